"""`hcjax export`: a study's unit files as tidy tables (CSV, and Parquet where pyarrow is).

Three tables, each a dict of equal-length 1-D column arrays:

    iterations   one row per environment, method, seed and iteration:
                 env, method, seed, iteration (1-based), train_reward, objective,
                 episode_return, frames, rejected, tuner_time (host seconds of ask+tell
                 for all the unit's agents at that iteration, the same for every seed),
                 and one column `hp_<name>` per hyperparameter (its value at that iteration)
    evaluations  one row per environment, method, seed and evaluation:
                 env, method, seed, iteration (iterations done when evaluated), eval_reward
    lineage      population methods only, one row per environment, method, seed and
                 population step: env, method, seed, iteration (iterations done at the
                 step), parent (the seed it continued from; itself when not replaced),
                 objective (the value the step ranked)

`seed` is the seed id of the unit's row (`UnitResult.seeds`), not its index. Floats are
written in the shortest text that reads back to the same float32 (`nan`, `inf` as
such), so a CSV round-trips the unit arrays exactly.
"""
from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from pathlib import Path

import numpy as np

try:  # optional: Parquet output (pip install "hcjax[export]")
    import pyarrow
    import pyarrow.parquet
except ImportError:
    pyarrow = None

from experiments.study.store import UnitResult, atomic_write_bytes

TABLES = ("iterations", "evaluations", "lineage")
FORMATS = ("csv", "parquet")
PER_ITERATION = ("train_reward", "objective", "episode_return", "frames", "rejected")
Columns = dict[str, np.ndarray]


def _keys(u: UnitResult, rows_per_seed: int) -> Columns:
    """env, method, seed columns for `rows_per_seed` rows of each of the unit's seeds."""
    n = len(u.seeds) * rows_per_seed
    return {"env": np.full(n, u.meta["env"], dtype=object), "method": np.full(n, u.meta["method"], dtype=object),
            "seed": np.repeat(np.asarray(u.seeds, np.int64), rows_per_seed)}


def _hparam_names(u: UnitResult) -> list[str]:
    names = u.meta.get("hparam_names") or [f"h{i}" for i in range(u.hparams.shape[-1])]
    return [f"hp_{name}" for name in names]


def iterations(u: UnitResult) -> Columns:
    """The unit's per-iteration rows: S * T rows, seed-major."""
    S, T = u.train_reward.shape
    cols = _keys(u, T)
    cols["iteration"] = np.tile(np.arange(1, T + 1, dtype=np.int64), S)
    for name in PER_ITERATION:
        cols[name] = np.asarray(getattr(u, name)).reshape(S * T)
    cols["tuner_time"] = np.tile(np.asarray(u.tuner_time, np.float64), S)
    for i, name in enumerate(_hparam_names(u)):
        cols[name] = np.asarray(u.hparams[:, :, i]).reshape(S * T)
    return cols


def evaluations(u: UnitResult) -> Columns:
    """The unit's evaluations: S * E rows, seed-major."""
    S, E = u.eval_reward.shape
    cols = _keys(u, E)
    cols["iteration"] = np.tile(np.asarray(u.eval_iteration, np.int64), S)
    cols["eval_reward"] = np.asarray(u.eval_reward).reshape(S * E)
    return cols


def lineage(u: UnitResult) -> Columns:
    """The unit's population steps: S * K rows, seed-major (none for a tuner)."""
    K = len(u.lineage_iteration)
    cols = _keys(u, K)
    cols["iteration"] = np.tile(np.asarray(u.lineage_iteration, np.int64), len(u.seeds))
    cols["parent"] = np.asarray(u.seeds, np.int64)[np.asarray(u.lineage_parent, np.int64).reshape(-1)] \
        if K else np.zeros(0, np.int64)
    cols["objective"] = np.asarray(u.lineage_objective, np.float32).reshape(-1)
    return cols


def concat(parts: list[Columns]) -> Columns:
    """One table from several units' columns; a column a unit lacks (another space's
    hyperparameter) is NaN in its rows."""
    names = list(dict.fromkeys(name for p in parts for name in p))
    out = {}
    for name in names:
        pieces = []
        for p in parts:
            n = len(next(iter(p.values()))) if p else 0
            pieces.append(p[name] if name in p else np.full(n, np.nan, np.float32))
        out[name] = np.concatenate(pieces) if pieces else np.zeros(0)
    return out


def tables(units: Iterable[UnitResult]) -> dict[str, Columns]:
    """{table name: columns} over `units`, in the order given."""
    units = list(units)
    return {"iterations": concat([iterations(u) for u in units]),
            "evaluations": concat([evaluations(u) for u in units]),
            "lineage": concat([lineage(u) for u in units if len(u.lineage_iteration)])}


def _text(column: np.ndarray) -> np.ndarray:
    """A column as strings that read back exactly (float32's shortest repr)."""
    return column.astype(str) if column.dtype != object else column


def csv_bytes(cols: Columns) -> bytes:
    """The table as CSV with a header row."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(cols)
    writer.writerows(zip(*(_text(c) for c in cols.values())))
    return buf.getvalue().encode()


def parquet_bytes(cols: Columns) -> bytes:
    """The table as Parquet (needs pyarrow: `pip install "hcjax[export]"`)."""
    table = pyarrow.table({k: (v.tolist() if v.dtype == object else v) for k, v in cols.items()})
    sink = pyarrow.BufferOutputStream()
    pyarrow.parquet.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def write(units: Iterable[UnitResult], out: Path, formats: Iterable[str] = ("csv",)) -> list[Path]:
    """Write every table in every format into `out` (atomically); returns the paths."""
    formats = list(formats)
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ValueError(f"format: {unknown} unknown; allowed: {', '.join(FORMATS)}")
    if "parquet" in formats and pyarrow is None:
        raise ValueError('format: parquet needs pyarrow, which is not installed (pip install "hcjax[export]")')
    paths = []
    for name, cols in tables(units).items():
        for fmt in formats:
            path = Path(out) / f"{name}.{fmt}"
            atomic_write_bytes(path, csv_bytes(cols) if fmt == "csv" else parquet_bytes(cols))
            paths.append(path)
    return paths
