"""`hcjax export`: a study's unit files as tidy tables (CSV, and Parquet where pyarrow is).

Three tables (`TABLES`), built unit by unit as dicts of equal-length 1-D column arrays
(the same columns `experiments.load` returns as pandas DataFrames):

    iterations   one row per unit, seed and iteration: study, env, method, seed,
                 iteration (1-based), frames (the iteration's), total_frames (cumulative
                 frames of the seed up to and including the iteration), wall_seconds,
                 train_reward, objective, episode_return, rejected, tuner_time (host
                 seconds of ask+tell for all the unit's agents at that iteration, the
                 same for every seed), and `hp_<name>` per hyperparameter: the value in
                 effect, an integer hyperparameter as an integer, a categorical as its
                 option (str or number, from the space the unit recorded)
    evaluations  one row per unit, seed and evaluation: study, env, method, seed,
                 iteration (iterations done when evaluated), total_frames and
                 wall_seconds of that iteration, eval_reward
    lineage      one row per population step of a population method's unit (a header
                 only when there is none): study, env, method, seed, iteration
                 (iterations done at the step), parent (the seed it continued from;
                 itself when not replaced), objective (the value the step ranked)

`study` is the study key of the unit (the manifest's `study_key`, a hash of everything
the units of one study share), so tables of several studies can be concatenated and
told apart. `seed` is the seed id (`UnitResult.seeds`), not its index. `wall_seconds`
is the training time of the unit (of its fused program) from its start to the end of
the segment (`eval_every` iterations, see experiments.study.plan.segments) that
produced the iteration, summed over the runs that trained it (a resumed unit counts
only the segments it kept); NaN for a unit that recorded no segment times (host units
before they did).

CSV: floats are written in the shortest text that reads back to the same float32
(float64 for tuner_time and wall_seconds), `inf`/`-inf` as such and NaN as an empty
cell; read the files with `pd.read_csv(path, **CSV_READ_OPTIONS)`
(keep_default_na=False, na_values=[""]), so that a label such as `NA`, `null` or `nan`
stays a string. A text cell starting with `=`, `+`, `-`, `@`, a tab or a carriage
return, which spreadsheets would evaluate as a formula, is written with a leading `'`
(OWASP's advice); Parquet and the DataFrames hold the text unchanged. Every label is
made valid Unicode first: a lone surrogate (possible in JSON meta) becomes its escape,
e.g. the two characters `\\ud800` written as six.

Completeness: all tables are written into a fresh hidden directory beside `out`, with
`export.json` (tables, formats, row counts) written last, then that directory replaces
`out` in one rename (the previous export, if any, is moved aside first and deleted
after). A reader that finds `export.json` finds every table of one export. `out` must
be a new or empty directory or a previous export (refused otherwise, so that no other
file is deleted). Memory: the units are loaded (their arrays, tens of bytes per row)
and each table is written one unit at a time (CSV text CSV_CHUNK_ROWS rows at a time),
so memory does not grow with the text (experiments/benchmarks/bench_export_memory.py).
"""
from __future__ import annotations

import contextlib
import csv
import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

import numpy as np

try:  # optional: Parquet output (pip install "hcjax[export]")
    import pyarrow
    import pyarrow.parquet
except ImportError:
    pyarrow = None

from experiments.study.keys import study_key
from experiments.study.methods import is_population
from experiments.study.plan import segments
from experiments.study.store import UnitResult

TABLES = ("iterations", "evaluations", "lineage")
FORMATS = ("csv", "parquet")
LABELS = ("study", "env", "method")
PER_ITERATION = ("train_reward", "objective", "episode_return", "frames", "rejected")
MARKER = "export.json"
CSV_CHUNK_ROWS = 8192
CSV_READ_OPTIONS = {"keep_default_na": False, "na_values": [""]}
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
Columns = dict[str, np.ndarray]


def label(text) -> str:
    """A label as valid Unicode: lone surrogates replaced by their escapes (`\\ud800`)."""
    return str(text).encode("utf-8", "backslashreplace").decode("utf-8")


def study_id(u: UnitResult) -> str:
    """The unit's study key (recorded since study keys were; else computed from its config)."""
    return u.meta.get("study_key") or study_key(u.meta.get("config", {}))


def hparam_names(u: UnitResult) -> list[str]:
    """The unit's hyperparameter names; ValueError naming duplicates (they would merge columns)."""
    names = u.meta.get("hparam_names") or [f"h{i}" for i in range(u.hparams.shape[-1])]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"unit {u.meta['env']} / {u.meta['method']}: hparam_names holds {repeated} more than once; "
                         f"each hyperparameter needs its own name (its own hp_<name> column)")
    return [label(n) for n in names]


def hparam_values(u: UnitResult) -> dict[str, np.ndarray]:
    """`hp_<name>` -> (S, T) values in effect: float32; int64 for an integer hyperparameter;
    a categorical's options (int64, float64, or str when any option is a str), from the
    space the unit's config recorded."""
    entries = {e.get("name"): e for e in u.meta.get("config", {}).get("space", []) if isinstance(e, dict)}
    out = {}
    for i, name in enumerate(hparam_names(u)):
        values, entry = u.hparams[:, :, i], entries.get(name, {})
        options = entry.get("options")
        if options:
            index = np.clip(np.round(np.nan_to_num(values)), 0, len(options) - 1).astype(np.int64)
            if any(isinstance(o, str) for o in options):
                table = np.asarray([label(o) for o in options], dtype=object)
            else:
                table = np.asarray(options, np.int64 if all(isinstance(o, int) for o in options) else np.float64)
            out[f"hp_{name}"] = table[index]
        elif entry.get("integer") and np.all(np.isfinite(values)):
            out[f"hp_{name}"] = np.round(values).astype(np.int64)
        else:
            out[f"hp_{name}"] = np.asarray(values, np.float32)
    return out


def wall_seconds(u: UnitResult) -> np.ndarray:
    """(T,) training seconds at the end of the segment that produced each iteration (see
    the module docstring); NaN when the unit recorded no segment times."""
    T = u.train_reward.shape[1]
    times = u.meta.get("segment_seconds")
    config = u.meta.get("config", {})
    own = config.get("schedule") or {}  # the environment's own schedule (experiments.study.plan.unit_timing)
    eval_every = own.get("eval_every", config.get("eval_every"))
    tune_every = own.get("tune_every", config.get("tune_every"))
    if not times or not isinstance(eval_every, int):
        return np.full(T, np.nan)
    ready = tune_every if is_population(u.meta["method"]) else None
    lengths = segments(T, eval_every, ready)
    if len(lengths) != len(times):  # recorded under another segmentation: not mapped to iterations
        return np.full(T, np.nan)
    return np.repeat(np.cumsum(np.asarray(times, np.float64)), lengths)


def _keys(u: UnitResult, rows_per_seed: int) -> Columns:
    """study, env, method, seed columns for `rows_per_seed` rows of each of the unit's seeds."""
    n = len(u.seeds) * rows_per_seed
    return {"study": np.full(n, label(study_id(u)), dtype=object),
            "env": np.full(n, label(u.meta["env"]), dtype=object),
            "method": np.full(n, label(u.meta["method"]), dtype=object),
            "seed": np.repeat(np.asarray(u.seeds, np.int64), rows_per_seed)}


def iterations(u: UnitResult) -> Columns:
    """The unit's per-iteration rows: S * T rows, seed-major."""
    S, T = u.train_reward.shape
    cols = _keys(u, T)
    cols["iteration"] = np.tile(np.arange(1, T + 1, dtype=np.int64), S)
    cols["frames"] = np.asarray(u.frames, np.int64).reshape(S * T)
    cols["total_frames"] = np.cumsum(np.asarray(u.frames, np.int64), axis=1).reshape(S * T)
    cols["wall_seconds"] = np.tile(wall_seconds(u), S)
    for name in PER_ITERATION:
        if name != "frames":
            cols[name] = np.asarray(getattr(u, name)).reshape(S * T)
    cols["tuner_time"] = np.tile(np.asarray(u.tuner_time, np.float64), S)
    for name, values in hparam_values(u).items():
        cols[name] = values.reshape(S * T)
    return cols


def evaluations(u: UnitResult) -> Columns:
    """The unit's evaluations: S * E rows, seed-major, with the total frames and the wall
    seconds of the iteration each was taken at."""
    S, E = u.eval_reward.shape
    at = np.asarray(u.eval_iteration, np.int64) - 1  # 0-based index of the iteration evaluated after
    cols = _keys(u, E)
    cols["iteration"] = np.tile(at + 1, S)
    cols["total_frames"] = np.cumsum(np.asarray(u.frames, np.int64), axis=1)[:, at].reshape(S * E)
    cols["wall_seconds"] = np.tile(wall_seconds(u)[at], S)
    cols["eval_reward"] = np.asarray(u.eval_reward, np.float32).reshape(S * E)
    return cols


def lineage(u: UnitResult) -> Columns:
    """The unit's population steps: S * K rows, seed-major (no rows for a tuner's unit)."""
    K = len(u.lineage_iteration)
    cols = _keys(u, K)
    cols["iteration"] = np.tile(np.asarray(u.lineage_iteration, np.int64), len(u.seeds))
    parents = np.asarray(u.lineage_parent, np.int64).reshape(-1) if K else np.zeros(0, np.int64)
    cols["parent"] = np.asarray(u.seeds, np.int64)[parents]
    cols["objective"] = np.asarray(u.lineage_objective, np.float32).reshape(-1) if K else np.zeros(0, np.float32)
    return cols


BUILDERS = {"iterations": iterations, "evaluations": evaluations, "lineage": lineage}


def check_units(units: list[UnitResult]) -> None:
    """ValueError when the units' hyperparameter names repeat a name or differ between
    units (one table has one set of columns; a study's units share one space)."""
    first = None
    for u in units:
        names = hparam_names(u)
        if first is None:
            first = (names, u)
        elif names != first[0]:
            raise ValueError(f"units {first[1].meta['env']} / {first[1].meta['method']} and {u.meta['env']} / "
                             f"{u.meta['method']} have different hyperparameters ({first[0]} and {names}); "
                             f"export each study on its own")


def _csv_text(column: np.ndarray) -> np.ndarray:
    """A column as CSV cells: floats in their shortest exact text with NaN empty, text with
    formula-like starts prefixed by `'`."""
    if column.dtype == object:
        return np.asarray([f"'{v}" if isinstance(v, str) and v.startswith(FORMULA_STARTS) else v for v in column],
                          dtype=object)
    text = column.astype(str)
    if column.dtype.kind == "f":
        text[np.isnan(column)] = ""
    return text


class _CsvSink:
    def __init__(self, path: Path):
        self.file = open(path, "x", newline="", encoding="utf-8")
        self.writer = csv.writer(self.file, lineterminator="\n")
        self.header = None

    def add(self, cols: Columns) -> None:
        if self.header is None:
            self.header = list(cols)
            self.writer.writerow(self.header)
        n = len(cols["seed"])
        for start in range(0, n, CSV_CHUNK_ROWS):  # the text of a few thousand rows at a time
            self.writer.writerows(zip(*(_csv_text(cols[name][start:start + CSV_CHUNK_ROWS]) for name in self.header)))

    def close(self) -> None:
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()


def _arrow_type(column: np.ndarray):
    return pyarrow.string() if column.dtype == object else pyarrow.from_numpy_dtype(column.dtype)


class _ParquetSink:
    """One row group per unit; the schema is the first unit's columns."""

    def __init__(self, path: Path):
        self.path, self.writer = path, None

    def add(self, cols: Columns) -> None:
        if self.writer is None:
            self.schema = pyarrow.schema([(name, _arrow_type(c)) for name, c in cols.items()])
            self.writer = pyarrow.parquet.ParquetWriter(str(self.path), self.schema)
        table = pyarrow.table({name: pyarrow.array(cols[name].tolist() if cols[name].dtype == object
                                                   else cols[name], type=self.schema.field(name).type)
                               for name in self.schema.names}, schema=self.schema)
        self.writer.write_table(table)

    def close(self) -> None:
        self.writer.close()
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


SINKS = {"csv": _CsvSink, "parquet": _ParquetSink}


def check_formats(formats: Iterable[str]) -> list[str]:
    """The formats as a list; ValueError naming an unknown one, or parquet without pyarrow."""
    formats = list(formats)
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ValueError(f"format: {unknown} unknown; allowed: {', '.join(FORMATS)}")
    if "parquet" in formats and pyarrow is None:
        raise ValueError('format: parquet needs pyarrow, which is not installed (pip install "hcjax[export]")')
    return formats


def _check_out(out: Path) -> None:
    """ValueError unless `out` is absent, an empty directory or a previous export (with
    its export.json, or holding only table files, as exports before export.json did)."""
    if out.is_symlink():
        raise ValueError(f"--out {out} is a symbolic link; give the directory itself")
    tables = {f"{name}.{fmt}" for name in TABLES for fmt in FORMATS}
    if out.exists() and (not out.is_dir() or not ((out / MARKER).is_file()
                                                  or {p.name for p in out.iterdir()} <= tables)):
        raise ValueError(f"--out {out} holds files that are not an hcjax export; an export replaces its whole "
                         f"directory, so give a new or empty directory (or a previous export's)")


def write(units: Iterable[UnitResult], out: str | os.PathLike, formats: Iterable[str] = ("csv",)) -> list[Path]:
    """Write every table in every format into `out`, all at once (see the module
    docstring: complete or absent); returns the table paths."""
    formats, units, out = check_formats(formats), list(units), Path(out)
    if not units:
        raise ValueError("export: no units to write")
    check_units(units)
    _check_out(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        rows = {}
        for name, build in BUILDERS.items():
            sinks = [SINKS[fmt](tmp / f"{name}.{fmt}") for fmt in formats]
            rows[name] = 0
            for u in units:
                cols = build(u)
                rows[name] += len(cols["seed"])
                for sink in sinks:
                    sink.add(cols)
            for sink in sinks:
                sink.close()
        marker = {"tables": list(TABLES), "formats": formats, "rows": rows, "units": len(units),
                  "studies": sorted({label(study_id(u)) for u in units})}
        (tmp / MARKER).write_text(json.dumps(marker, indent=2))
        os.chmod(tmp, 0o777 & ~_umask())
        _swap_in(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return [out / f"{name}.{fmt}" for name in TABLES for fmt in formats]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _swap_in(new: Path, out: Path) -> None:
    """`new` becomes `out`; a previous `out` is moved aside first and deleted after."""
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.replace(out, old / out.name)
    os.replace(new, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    with contextlib.suppress(OSError):  # the rename is durable once the parent directory is synced
        fd = os.open(out.parent, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
