"""Live TensorBoard scalars of a running study (`hcjax run --tensorboard`).

Host-side only: after every segment of a unit group the new iterations are appended to
event files, so `tensorboard --logdir OUT/tensorboard` shows the study while it trains;
nothing is added to the compiled step. Runs (directories), per unit `<env>__<method>`:

    OUT/tensorboard/<env>__<method>/seed_<i>/events.out.tfevents.*     one per seed
    OUT/tensorboard/<env>__<method>/over_seeds/events.out.tfevents.*   the method over its seeds

A seed's tags, at step = iterations done: `train/episode_return` (the mean return of the
episodes that ended in the iteration, carried over one where none ended, NaN before the
first: the headline curve), `train/reward_per_step`,
`train/objective` and `hyperparameters/<name>` every iteration, `eval/reward` at every
evaluation, `population/parent` (the seed whose network it took; itself when it kept its
own) at every population step. At the end of the unit, the HParams dashboard's session
(method, seed, each hyperparameter's final value; metric `eval/reward`).
`over_seeds`: `over_seeds/<metric>/{mean,iqm,q25,q75}` of the episode return and the
evaluation reward sum over the seeds, a custom-scalars layout drawing each as an IQM line
with its 25th-75th percentile band (CUSTOM SCALARS tab), the population's copies as text
(`population/copies`) and the HParams experiment (the search space).

Safety (docs/studies.md): directories are reached from the study directory one component
at a time without following links (`files.open_dir_below`), each event file is created
exclusively (O_EXCL | O_NOFOLLOW) and every append reopens it with O_NOFOLLOW and
checks it is still the file created (device and inode). Names hold the creation time in
nanoseconds, so they sort in creation order (TensorBoard reads a run's files in name order).
Any fault (a link, a file in the way, a full disk, any OSError) is reported once through
`warn`, naming the path and the error, and stops live logging for the unit group;
training goes on.

The loop calls this object before saving each segment's checkpoint, so a kill between the
two leaves no gap; the rerun then trains the segment again and skips the steps its run
directories already hold (`last_step`), so no step is written twice.
"""
from __future__ import annotations

import errno
import os
import socket
import struct
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

try:  # optional: pip install "hcjax[tensorboard]"
    from tensorboardX.proto import api_pb2, event_pb2, layout_pb2, summary_pb2, tensor_pb2
    from tensorboardX.proto.plugin_hparams_pb2 import HParamsPluginData
    from tensorboardX.record_writer import masked_crc32c
    from tensorboardX.summary import hparams as hparams_summaries
    from tensorboardX.summary import text as text_summary
except ImportError:
    event_pb2 = None

from experiments.study.files import PlantedLink, create_exclusive, open_dir_below
from experiments.study.store import unit_name

HEADLINE = "train/episode_return"
PER_ITERATION = {HEADLINE: "episode_return", "train/reward_per_step": "train_reward",
                 "train/objective": "objective"}
OVER_SEEDS = "over_seeds"
STATISTICS = ("mean", "iqm", "q25", "q75")


def available() -> bool:
    """Whether tensorboardX is installed."""
    return event_pb2 is not None


def record_bytes(event) -> bytes:
    """One TFRecord: length, its masked CRC-32C, the serialised event, its masked CRC-32C."""
    data = event.SerializeToString()
    header = struct.pack("<Q", len(data))
    return header + struct.pack("<I", masked_crc32c(header)) + data + struct.pack("<I", masked_crc32c(data))


def scalar_event(tag: str, value: float, step: int, wall_time: float):
    summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=float(value))])
    return event_pb2.Event(wall_time=wall_time, step=int(step), summary=summary)


def summary_event(summary, step: int, wall_time: float):
    return event_pb2.Event(wall_time=wall_time, step=int(step), summary=summary)


class EventFile:
    """One run directory's event file, `root / run / events.out.tfevents.<ns>.<host>.<pid>`:
    created exclusively (anything planted at the name makes it try the next nanosecond),
    then appended to and closed after every write, never through a link."""

    def __init__(self, root: Path, run: Path):
        self.root, self.directory = Path(root), Path(root) / run
        dir_fd = open_dir_below(self.root, self.directory)
        try:
            for _ in range(16):  # nanoseconds: names sort in creation order, as TensorBoard reads them
                self.name = f"events.out.tfevents.{time.time_ns()}.{socket.gethostname()}.{os.getpid()}"
                try:
                    fd = create_exclusive(dir_fd, self.name)
                    break
                except FileExistsError:
                    continue
            else:
                raise FileExistsError(f"{self.directory}: no free event file name")
        finally:
            os.close(dir_fd)
        with os.fdopen(fd, "wb") as f:
            info = os.fstat(f.fileno())
            self.identity = (info.st_dev, info.st_ino)
            f.write(record_bytes(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2")))

    @property
    def path(self) -> Path:
        return self.directory / self.name

    def append(self, events: list) -> None:
        dir_fd = open_dir_below(self.root, self.directory, create=False)
        try:
            fd = os.open(self.name, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise PlantedLink(f"{self.path} is a symbolic link: hcjax does not write through links inside a "
                                  f"study directory; not written") from None
            raise OSError(e.errno, e.strerror, str(self.path)) from None
        finally:
            os.close(dir_fd)
        with os.fdopen(fd, "ab") as f:  # closing flushes: TensorBoard reads it; no fsync per agent
            info = os.fstat(f.fileno())
            if (info.st_dev, info.st_ino) != self.identity:
                raise PlantedLink(f"{self.path} is no longer the event file hcjax created (replaced while the run "
                                  f"was going); not written")
            f.write(b"".join(record_bytes(e) for e in events))


def over_seeds(x: np.ndarray) -> dict[str, np.ndarray]:
    """(S, T) values of S seeds -> {'mean', 'iqm', 'q25', 'q75'}: (T,) statistics over the
    finite values of each column (NaN where a column has none). IQM: the mean of the values
    left after dropping floor(n/4) at each end (as experiments.reporting.stats.iqm)."""
    out = {k: np.full(x.shape[1], np.nan) for k in STATISTICS}
    for t in range(x.shape[1]):
        v = np.sort(x[np.isfinite(x[:, t]), t].astype(np.float64))
        if v.size:
            cut = v.size // 4
            out["mean"][t], out["iqm"][t] = v.mean(), v[cut: v.size - cut].mean()
            out["q25"][t], out["q75"][t] = np.percentile(v, [25, 75])
    return out


def layout_summary(env: str):
    """The custom-scalars layout of an environment's methods: an IQM line and its 25th-75th
    percentile band per method (margin charts), and the means (a multi-line chart)."""
    def margin(metric, title):
        tags = [f"{OVER_SEEDS}/{metric}/{k}" for k in ("iqm", "q25", "q75")]
        series = layout_pb2.MarginChartContent.Series(value=tags[0], lower=tags[1], upper=tags[2])
        return layout_pb2.Chart(title=title, margin=layout_pb2.MarginChartContent(series=[series]))

    charts = [margin("episode_return", "episode return: IQM over seeds, band 25th-75th percentile"),
              margin("eval_reward", "evaluation reward sum: IQM over seeds, band 25th-75th percentile"),
              layout_pb2.Chart(title="episode return: mean over seeds", multiline=layout_pb2.MultilineChartContent(
                  tag=[f"{OVER_SEEDS}/episode_return/mean"]))]
    layout = layout_pb2.Layout(category=[layout_pb2.Category(title=f"{env}: methods over seeds", chart=charts)])
    tensor = tensor_pb2.TensorProto(dtype="DT_STRING", string_val=[layout.SerializeToString()])
    metadata = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(
        plugin_name="custom_scalars"))
    return summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="custom_scalars__config__", tensor=tensor,
                                                                metadata=metadata)])


def hparams_experiment(space):
    """The HParams dashboard's experiment: the search space (numeric ranges; a categorical's
    option indices), the method and seed, and the metric `eval/reward`."""
    infos = [api_pb2.HParamInfo(name="method", type=api_pb2.DataType.Value("DATA_TYPE_STRING")),
             api_pb2.HParamInfo(name="seed", type=api_pb2.DataType.Value("DATA_TYPE_FLOAT64"))]
    for p in space.hyperparameters:
        low, high = (0.0, float(p.n_options - 1)) if p.n_options else (float(p.low), float(p.high))
        infos.append(api_pb2.HParamInfo(name=p.name, type=api_pb2.DataType.Value("DATA_TYPE_FLOAT64"),
                                        domain_interval=api_pb2.Interval(min_value=low, max_value=high)))
    experiment, _, _ = hparams_summaries({}, {"eval/reward": 0.0})
    content = api_pb2.Experiment(hparam_infos=infos, metric_infos=[api_pb2.MetricInfo(
        name=api_pb2.MetricName(tag="eval/reward"), display_name="final evaluation reward sum")])
    experiment.value[0].metadata.plugin_data.content = HParamsPluginData(experiment=content).SerializeToString()
    return experiment


def last_step(directory: Path) -> int:
    """The highest step of any event in the event files of a run directory (0 if none or
    no directory); a damaged or cut tail (a kill mid-write) ends a file's reading."""
    steps = [0]
    for path in sorted(Path(directory).glob("events.out.tfevents.*")) if Path(directory).is_dir() else []:
        steps += [int(e.step) for e in read_events(path, damaged_tail_ok=True)]
    return max(steps)


class UnitGroupScalars:
    """The event files of one unit group: methods[m]'s row i (seed_i) is agent row
    offset_m + i, the units' rows following each other (`seeds`: every unit's row count, or
    one count for all).

    Call it with the group's `Record` when the loop starts (a resumed record: nothing
    already trained is written again) and after every segment, before its checkpoint.
    space: the hyperparameters' `hcjax.Space`; iterations: the unit's length (the HParams
    session is written when it is reached); warn: receives the one message of a fault."""

    def __init__(self, logdir: Path, env: str, methods: list[str], seeds: int | Sequence[int], space,
                 iterations: int, warn: Callable[[str], None] | None = None):
        if not available():
            raise ValueError('--tensorboard needs tensorboardX, which is not installed: '
                             'pip install "hcjax[tensorboard]"')
        self.logdir, self.env, self.methods = Path(logdir), env, list(methods)
        counts = [int(seeds)] * len(self.methods) if isinstance(seeds, (int, np.integer)) else [int(n) for n in seeds]
        starts = np.concatenate([[0], np.cumsum(counts)]).astype(int)
        self.rows = [range(int(a), int(b)) for a, b in zip(starts[:-1], starts[1:])]  # each unit's agent rows
        self.space, self.iterations = space, int(iterations)
        self.warn = warn or (lambda msg: warnings.warn(msg, stacklevel=2))
        self.files: dict[str, EventFile] = {}
        self.written: dict[str, int] | None = None  # run -> last step written; None until the first call
        self.stopped = False
        self.laid_out: set[str] = set()  # units whose over_seeds run got the layout and experiment
        self.guarded(lambda: [self.file(run) for run in self.runs()])  # a file in the way: found before work

    def runs(self) -> list[str]:
        """Run directories relative to logdir: every seed's, then every method's over_seeds."""
        units = [unit_name(self.env, m) for m in self.methods]
        return [f"{u}/seed_{i}" for u, rows in zip(units, self.rows) for i in range(len(rows))] + \
            [f"{u}/{OVER_SEEDS}" for u in units]

    def file(self, run: str) -> EventFile:
        if run not in self.files:
            self.files[run] = EventFile(self.logdir.parent, Path(self.logdir.name) / run)
        return self.files[run]

    def guarded(self, write: Callable[[], object]) -> None:
        """Run `write` unless logging stopped; a fault warns once and stops it."""
        if self.stopped:
            return
        try:
            write()
        except OSError as e:  # PlantedLink is a ValueError: caught below
            self.fault(f"{e.filename}: {e.strerror}" if e.filename and e.strerror else str(e))
        except PlantedLink as e:
            self.fault(str(e))

    def fault(self, cause: str) -> None:
        self.stopped = True
        self.warn(f"live TensorBoard logging stopped for {self.env} / {'+'.join(self.methods)}: {cause}. "
                  f"Training goes on; fix the cause under {self.logdir} for the next run")

    def __call__(self, record) -> None:
        """record: the group's `experiments.study.checkpoints.Record` so far."""
        self.guarded(lambda: self.write(record))

    def write(self, record) -> None:
        if self.written is None:  # steps already in the files (a kill after scalars, before the checkpoint)
            self.written = {run: max(record.done, last_step(self.logdir / run)) for run in self.runs()}
            return
        metrics, rewards, now = record.metrics(), record.eval_reward(), time.time()
        eval_its = np.asarray(record.eval_its, np.int64)
        lineage = [(int(it), np.asarray(parents)) for it, parents, _ in record.lineage]
        done = record.done
        for m, method in enumerate(self.methods):
            unit, rows = unit_name(self.env, method), self.rows[m]
            for i, row in enumerate(rows):
                run = f"{unit}/seed_{i}"
                after = self.written[run]
                events = []
                for t in range(after, done):
                    events += [scalar_event(tag, metrics[name][row, t], t + 1, now)
                               for tag, name in PER_ITERATION.items()]
                    events += [scalar_event(f"hyperparameters/{h}", metrics["hparams"][row, t, j], t + 1, now)
                               for j, h in enumerate(self.space.names)]
                events += [scalar_event("eval/reward", rewards[row, k], it, now)
                           for k, it in enumerate(eval_its) if after < it <= done]
                events += [scalar_event("population/parent", parents[row] - rows[0], it, now)
                           for it, parents in lineage if after < it <= done]
                if done >= self.iterations > after:
                    events += self.session(method, i, metrics["hparams"][row, -1], now)
                self.append(run, events, done)
            self.append(f"{unit}/{OVER_SEEDS}", self.method_events(unit, rows, metrics, rewards, eval_its,
                                                                   lineage, done, now), done)

    def append(self, run: str, events: list, done: int) -> None:
        if events:
            self.file(run).append(events)
        self.written[run] = max(self.written[run], done)

    def session(self, method: str, seed: int, final: np.ndarray, now: float) -> list:
        """The HParams session of a seed's run: method, seed and final hyperparameter values."""
        values = {"method": method, "seed": seed} | {h: float(final[j]) for j, h in enumerate(self.space.names)}
        _, start, end = hparams_summaries(values, {"eval/reward": 0.0})
        return [summary_event(start, 0, now), summary_event(end, self.iterations, now)]

    def method_events(self, unit: str, rows: range, metrics: dict, rewards: np.ndarray, eval_its: np.ndarray,
                      lineage: list, done: int, now: float) -> list:
        after = self.written[f"{unit}/{OVER_SEEDS}"]
        events = []
        if unit not in self.laid_out:  # once per process: the same content each time
            self.laid_out.add(unit)
            events += [summary_event(layout_summary(self.env), 0, now),
                       summary_event(hparams_experiment(self.space), 0, now)]
        returns = over_seeds(metrics["episode_return"][rows.start: rows.stop, after:done])
        for k in STATISTICS:
            events += [scalar_event(f"{OVER_SEEDS}/episode_return/{k}", v, after + t + 1, now)
                       for t, v in enumerate(returns[k]) if np.isfinite(v)]
        new = [k for k, it in enumerate(eval_its) if after < it <= done]
        if new:
            evals = over_seeds(rewards[rows.start: rows.stop][:, new])
            for k in STATISTICS:
                events += [scalar_event(f"{OVER_SEEDS}/eval_reward/{k}", v, eval_its[new[j]], now)
                           for j, v in enumerate(evals[k]) if np.isfinite(v)]
        for it, parents in lineage:
            if after < it <= done:
                copies = [f"seed_{i} took seed_{parents[row] - rows.start}'s network" for i, row in enumerate(rows)
                          if parents[row] != row]
                events.append(summary_event(text_summary("population/copies", f"iteration {it}: "
                                                         + ("; ".join(copies) or "no copies")), it, now))
        return events


def read_events(path: Path, damaged_tail_ok: bool = False):
    """The events of one event file, in order; ValueError naming the file at a damaged
    record, unless `damaged_tail_ok`: then reading stops there."""
    data = Path(path).read_bytes()
    at = 0
    while at < len(data):
        try:
            (length,) = struct.unpack_from("<Q", data, at)
            body = data[at + 12: at + 12 + length]
            if struct.unpack_from("<I", data, at + 8)[0] != masked_crc32c(data[at: at + 8]):
                raise ValueError(f"{path}: bad record header at byte {at}")
            if struct.unpack_from("<I", data, at + 12 + length)[0] != masked_crc32c(body):
                raise ValueError(f"{path}: bad record at byte {at}")
        except (ValueError, struct.error):
            if damaged_tail_ok:
                return
            raise ValueError(f"{path}: bad record at byte {at}") from None
        yield event_pb2.Event.FromString(body)
        at += 12 + length + 4


def read_scalars(directory: Path) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value), ...]} of every event file under `directory` (a run's
    directory), in file and write order: the reader behind the tests."""
    out: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(Path(directory).glob("events.out.tfevents.*")):
        for event in read_events(path):
            for v in event.summary.value:
                if v.WhichOneof("value") == "simple_value":
                    out.setdefault(v.tag, []).append((int(event.step), float(np.float32(v.simple_value))))
    return out


def read_summaries(directory: Path) -> dict[str, list]:
    """{tag: [(step, Summary.Value), ...]} of the non-scalar summaries (text, layout, HParams)
    of a run directory's event files."""
    out: dict[str, list] = {}
    for path in sorted(Path(directory).glob("events.out.tfevents.*")):
        for event in read_events(path):
            for v in event.summary.value:
                if v.WhichOneof("value") != "simple_value":
                    out.setdefault(v.tag, []).append((int(event.step), v))
    return out
