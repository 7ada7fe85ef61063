"""Live TensorBoard scalars of a running study (`hcjax run --tensorboard`).

Host-side only: after every segment of a unit group the new iterations of each agent are
appended to an event file of its own run directory, so `tensorboard --logdir OUT/tensorboard`
shows the study while it trains; nothing is added to the compiled step.

    OUT/tensorboard/<env>__<method>/seed_<i>/events.out.tfevents.*

Tags, at step = iterations done: `train/reward`, `train/objective`, `train/episode_return`,
`hparams/<name>` every iteration, `eval/reward` at every evaluation. Each segment's events
are appended and the file closed again (no thread, no open file between segments); a
resumed run starts a new event file and writes only iterations it trains.
"""
from __future__ import annotations

import os
import socket
import struct
import time
from pathlib import Path

import numpy as np

try:  # optional: pip install "hcjax[tensorboard]" (brax already brings it)
    from tensorboardX.proto import event_pb2, summary_pb2
    from tensorboardX.record_writer import masked_crc32c
except ImportError:
    event_pb2 = None

from experiments.study.store import unit_name

PER_ITERATION = {"train/reward": "train_reward", "train/objective": "objective",
                 "train/episode_return": "episode_return"}


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


class EventFile:
    """One run directory's event file, appended to and closed after every write."""

    def __init__(self, directory: Path):
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"events.out.tfevents.{time.time():.0f}.{socket.gethostname()}.{os.getpid()}"
        header = event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2")
        with open(self.path, "ab") as f:
            f.write(record_bytes(header))

    def append(self, events: list) -> None:
        with open(self.path, "ab") as f:  # closing flushes: TensorBoard reads it; no fsync per agent
            f.write(b"".join(record_bytes(e) for e in events))


class UnitGroupScalars:
    """The scalars of one unit group: methods[m]'s seed i is agent row m * seeds + i.

    Call it with the group's `Record` when the loop starts (a resumed record: nothing
    already trained is written again) and after every segment."""

    def __init__(self, logdir: Path, env: str, methods: list[str], seeds: int, hparam_names: list[str]):
        if not available():
            raise ValueError('--tensorboard needs tensorboardX, which is not installed: '
                             'pip install "hcjax[tensorboard]"')
        self.logdir, self.env, self.methods, self.seeds = Path(logdir), env, list(methods), seeds
        self.hparam_names = list(hparam_names)
        self.files: dict[int, EventFile] = {}
        self.written = None  # iterations already written; None until the first call
        self.evals_written = 0

    def file(self, row: int) -> EventFile:
        if row not in self.files:
            method = self.methods[row // self.seeds]
            self.files[row] = EventFile(self.logdir / unit_name(self.env, method) / f"seed_{row % self.seeds}")
        return self.files[row]

    def __call__(self, record) -> None:
        """record: the group's `experiments.study.checkpoints.Record` so far."""
        if self.written is None:
            self.written, self.evals_written = record.done, len(record.eval_its)
            return
        metrics = record.metrics()
        steps = range(self.written, record.done)
        evals = range(self.evals_written, len(record.eval_its))
        rewards = record.eval_reward()
        now = time.time()
        for row in range(len(self.methods) * self.seeds):
            events = []
            for t in steps:
                events += [scalar_event(tag, metrics[name][row, t], t + 1, now) for tag, name in PER_ITERATION.items()]
                events += [scalar_event(f"hparams/{h}", metrics["hparams"][row, t, j], t + 1, now)
                           for j, h in enumerate(self.hparam_names)]
            events += [scalar_event("eval/reward", rewards[row, k], record.eval_its[k], now) for k in evals]
            if events:
                self.file(row).append(events)
        self.written, self.evals_written = record.done, len(record.eval_its)


def read_scalars(directory: Path) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value), ...]} of every event file under `directory` (a run's
    directory), in file and write order: the reader behind the tests."""
    out: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(Path(directory).glob("events.out.tfevents.*")):
        data = path.read_bytes()
        at = 0
        while at < len(data):
            (length,) = struct.unpack_from("<Q", data, at)
            body = data[at + 12: at + 12 + length]
            if struct.unpack_from("<I", data, at + 8)[0] != masked_crc32c(data[at: at + 8]):
                raise ValueError(f"{path}: bad record header at byte {at}")
            if struct.unpack_from("<I", data, at + 12 + length)[0] != masked_crc32c(body):
                raise ValueError(f"{path}: bad record at byte {at}")
            event = event_pb2.Event.FromString(body)
            for v in event.summary.value:
                out.setdefault(v.tag, []).append((int(event.step), float(np.float32(v.simple_value))))
            at += 12 + length + 4
    return out
