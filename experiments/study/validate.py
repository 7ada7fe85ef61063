"""Checks of the .npz files a study reads back (units and checkpoints) before and after
loading: sizes bounded before anything is decompressed, shapes consistent with the
seeds, iterations and evaluations they declare, counters in range.

Each check returns None when all is well, else one sentence saying what is wrong (the
caller names the file and quarantines it)."""
from __future__ import annotations

import math
import zipfile

import numpy as np

from experiments.study import protocol

MAX_UNIT_BYTES = 2 * 2**30  # a unit's arrays, uncompressed
MAX_RECORD_BYTES = 2 * 2**30  # a checkpoint's arrays beyond the learner state, uncompressed
NUMERIC = "biuf"

Shapes = dict[str, tuple[tuple[int, ...], np.dtype]]


def npz_headers(path, limit: int | None) -> Shapes:
    """name -> (shape, dtype) of every array of an .npz, from the zip directory and each
    member's .npy header only (no array data is decompressed). ValueError if the total
    uncompressed size exceeds `limit` bytes, a member is not a plain .npy array, or its
    header declares more or fewer bytes than the member holds."""
    out = {}
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        total = sum(i.file_size for i in infos)
        if limit is not None and total > limit:
            raise ValueError(f"its arrays take {total / 2**30:.3g} GiB uncompressed, more than the limit of "
                             f"{limit / 2**30:.3g} GiB")
        for info in infos:
            if not info.filename.endswith(".npy"):
                raise ValueError(f"member {info.filename!r} is not a .npy array")
            with zf.open(info) as f:
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    shape, _, dtype = np.lib.format.read_array_header_1_0(f)
                elif version == (2, 0):
                    shape, _, dtype = np.lib.format.read_array_header_2_0(f)
                else:
                    raise ValueError(f"member {info.filename!r} has .npy format {version}; expected 1.0 or 2.0")
                declared = f.tell() + math.prod(shape) * dtype.itemsize
            if dtype.hasobject:
                raise ValueError(f"member {info.filename!r} holds Python objects")
            if declared != info.file_size:
                raise ValueError(f"member {info.filename!r} declares shape {shape} of {dtype} ({declared} bytes) "
                                 f"but holds {info.file_size} bytes")
            out[info.filename[:-len(".npy")]] = (tuple(shape), dtype)
    return out


def _shape(x) -> tuple[int, ...]:
    return tuple(x[0]) if isinstance(x, tuple) else np.shape(x)


def _dtype(x) -> np.dtype:
    return x[1] if isinstance(x, tuple) else np.asarray(x).dtype


SEED_METRICS = ("train_reward", "objective", "frames", "rejected", "episode_return")
UNIT_ARRAYS = ("seeds", *SEED_METRICS, "hparams", "eval_iteration", "eval_reward", "tuner_time")
LINEAGE = ("lineage_iteration", "lineage_parent", "lineage_objective")


def _lineage_shapes(arrays: dict, S: int, T: int) -> str | None:
    """lineage_iteration (K,) with K <= T, lineage_parent / lineage_objective (S, K) (or
    empty when K = 0); absent: no lineage."""
    present = [k for k in LINEAGE if k in arrays]
    if not present:
        return None
    if len(present) != len(LINEAGE):
        return f"it has {', '.join(present)} but not all of {', '.join(LINEAGE)}"
    its = _shape(arrays["lineage_iteration"])
    if len(its) != 1 or its[0] > T:
        return f"lineage_iteration has shape {its}; expected (K,) with K <= {T} iterations"
    K = its[0]
    for k in LINEAGE[1:]:
        shape = _shape(arrays[k])
        if shape != (S, K) and not (K == 0 and math.prod(shape) == 0):
            return f"{k} has shape {shape}; expected ({S}, {K}) (seeds, population steps)"
    return None


def unit_shapes(arrays: dict) -> str | None:
    """Problems with a unit's shapes (arrays: name -> array, or -> (shape, dtype) from
    `npz_headers`): seeds (S,); the per-seed metrics (S, T); hparams (S, T, h);
    eval_iteration (E,) with E <= T; eval_reward (S, E); tuner_time (T,); the lineage;
    meta a string; every array numeric."""
    missing = [k for k in (*UNIT_ARRAYS, "meta") if k not in arrays]
    if missing:
        return f"it lacks {', '.join(missing)}"
    for k in (*UNIT_ARRAYS, *[k for k in LINEAGE if k in arrays]):
        if _dtype(arrays[k]).kind not in NUMERIC:
            return f"{k} has dtype {_dtype(arrays[k])}; expected numbers"
    if _shape(arrays["meta"]) != () or _dtype(arrays["meta"]).kind != "U":
        return "its meta is not one string"
    seeds = _shape(arrays["seeds"])
    if len(seeds) != 1:
        return f"seeds has shape {seeds}; expected (S,)"
    S = seeds[0]
    first = _shape(arrays["train_reward"])
    if len(first) != 2 or first[0] != S:
        return f"train_reward has shape {first}; expected ({S}, T) (seeds, iterations)"
    T = first[1]
    for k in SEED_METRICS:
        if _shape(arrays[k]) != (S, T):
            return f"{k} has shape {_shape(arrays[k])}; expected ({S}, {T}) (seeds, iterations) like train_reward"
    hp = _shape(arrays["hparams"])
    if len(hp) != 3 or hp[:2] != (S, T):
        return f"hparams has shape {hp}; expected ({S}, {T}, h) (seeds, iterations, hyperparameters)"
    if _shape(arrays["tuner_time"]) != (T,):
        return f"tuner_time has shape {_shape(arrays['tuner_time'])}; expected ({T},) (iterations)"
    ev = _shape(arrays["eval_iteration"])
    if len(ev) != 1 or ev[0] > T:
        return f"eval_iteration has shape {ev}; expected (E,) with E <= {T} iterations"
    if _shape(arrays["eval_reward"]) != (S, ev[0]):
        return f"eval_reward has shape {_shape(arrays['eval_reward'])}; expected ({S}, {ev[0]}) (seeds, evaluations)"
    return _lineage_shapes(arrays, S, T)


def _counter(name: str, values: np.ndarray, low: int, high: int, strict: bool) -> str | None:
    """Problems with iteration counters: whole numbers within [low, high], increasing."""
    v = np.asarray(values, np.float64)
    if v.size and (not np.all(np.isfinite(v)) or np.any(v != np.round(v)) or v.min() < low or v.max() > high):
        return f"{name} holds {v.tolist()[:8]}; expected whole numbers within [{low}, {high}]"
    steps = np.diff(v)
    if steps.size and (np.any(steps <= 0) if strict else np.any(steps < 0)):
        return f"{name} holds {v.tolist()[:8]}; expected {'increasing' if strict else 'non-decreasing'} values"
    return None


def unit_problem(arrays: dict, meta: dict) -> str | None:
    """Problems with a loaded unit: its shapes (`unit_shapes`), eval_iteration within [1, T]
    and increasing, lineage iterations within [1, T], parents within [0, S), and its meta
    (env and method strings; hparam_names, if given, h strings)."""
    problem = unit_shapes(arrays)
    if problem:
        return problem
    S, T, h = np.shape(arrays["hparams"])
    problem = _counter("eval_iteration", arrays["eval_iteration"], 1, T, strict=True)
    if problem is None and "lineage_iteration" in arrays:
        problem = _counter("lineage_iteration", arrays["lineage_iteration"], 1, T, strict=False)
        parents = np.asarray(arrays["lineage_parent"])
        if problem is None and parents.size and (parents.min() < 0 or parents.max() >= S):
            problem = f"lineage_parent holds agents outside [0, {S})"
    if problem:
        return problem
    if not isinstance(meta, dict) or not all(isinstance(meta.get(k), str) for k in ("env", "method")):
        return "its meta lacks env/method strings"
    names = meta.get("hparam_names")
    if names is not None and (not isinstance(names, list) or len(names) != h
                              or not all(isinstance(n, str) for n in names)):
        return f"its meta's hparam_names is {names!r}; expected {h} names (hparams has shape {(S, T, h)})"
    return meta_problem(meta, np.asarray(arrays["seeds"]), h)


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def meta_problem(meta: dict, seeds: np.ndarray, h: int) -> str | None:
    """Problems with what a unit's meta says of its runs (seeds: (S,) its seed ids; h: its
    hyperparameters): run_seconds a finite number >= 0; a test unit's seeds none of the tuning
    seeds 0..config.seeds-1 (the protocol's rule); the sweep's `sweep` entry (`sweep_problem`)."""
    seconds = meta.get("run_seconds")
    if seconds is not None and not (_number(seconds) and seconds >= 0):
        return f"its meta's run_seconds is {seconds!r}; expected a number of seconds >= 0"
    k, tuning = protocol.kind(meta["method"]), (meta.get("config") or {}).get("seeds")
    if k.phase == protocol.TEST_PHASE and isinstance(tuning, int) and not isinstance(tuning, bool):
        shared = sorted(int(s) for s in seeds if 0 <= s < tuning)
        if shared:
            return (f"its seeds {shared[:8]} are tuning seeds (its meta's config.seeds = {tuning}: ids 0.."
                    f"{tuning - 1}); a test unit's seeds must be none of them")
    if meta["method"] == protocol.SWEEP:
        return sweep_problem(meta.get("sweep"), len(seeds), h)
    return None


def sweep_problem(sweep, S: int, h: int) -> str | None:
    """Problems with the sweep unit's meta `sweep` entry: configurations a non-empty list of N
    lists of h finite numbers, seeds an integer >= 1, configuration S integers in [0, N)."""
    if not isinstance(sweep, dict):
        return f"its meta's sweep is {sweep!r}; the sweep's unit must say its configurations there"
    configurations = sweep.get("configurations")
    if not (isinstance(configurations, list) and configurations and all(
            isinstance(c, list) and len(c) == h and all(map(_number, c)) for c in configurations)):
        return f"its meta's sweep.configurations is {str(configurations)[:80]}; expected N >= 1 lists of {h} numbers"
    k = sweep.get("seeds")
    if not (isinstance(k, int) and not isinstance(k, bool) and k >= 1):
        return f"its meta's sweep.seeds is {k!r}; expected an integer >= 1 (tuning seeds per configuration)"
    rows = sweep.get("configuration")
    if not (isinstance(rows, list) and len(rows) == S and all(
            isinstance(r, int) and not isinstance(r, bool) and 0 <= r < len(configurations) for r in rows)):
        return (f"its meta's sweep.configuration is {str(rows)[:80]}; expected {S} integers (one per seed row) in "
                f"[0, {len(configurations)})")
    return None


def record_problem(arrays: dict) -> str | None:
    """Problems with a checkpoint's record (`checkpoints.Record.arrays`): done a whole
    number >= 0; every metric (n, done[, h]) with one n; eval_iteration (E,) increasing
    within [1, done]; eval_reward (n, E) (empty when E = 0); segment_seconds (G,); the lineage."""
    for k in ("done", "eval_iteration", "eval_reward", "segment_seconds"):
        if k not in arrays:
            return f"its record lacks {k}"
    done = np.asarray(arrays["done"])
    if done.shape != () or done.dtype.kind not in "iu" or int(done) < 0:
        return f"its record's done is {done.tolist()!r}; expected a whole number >= 0"
    done = int(done)
    metrics = {k: np.shape(v) for k, v in arrays.items() if k.startswith("metric/")}
    if done and not metrics:
        return f"its record says {done} iterations are done but holds no metrics"
    agents = {shape[0] if shape else None for shape in metrics.values()}
    for k, shape in metrics.items():
        if len(shape) not in (2, 3) or shape[1] != done or len(agents) > 1:
            return (f"its record's {k} has shape {shape}; expected (agents, {done}[, h]) with the same agents "
                    f"as every metric ({done} iterations done)")
    n = agents.pop() if agents else None
    E = np.shape(arrays["eval_iteration"])
    if len(E) != 1:
        return f"its record's eval_iteration has shape {E}; expected (E,)"
    ev = np.shape(arrays["eval_reward"])
    if E[0] == 0 and math.prod(ev) != 0 or E[0] and (len(ev) != 2 or ev[1] != E[0] or n is not None and ev[0] != n):
        return f"its record's eval_reward has shape {ev}; expected ({n}, {E[0]}) (agents, evaluations)"
    if np.ndim(arrays["segment_seconds"]) != 1:
        return f"its record's segment_seconds has shape {np.shape(arrays['segment_seconds'])}; expected (G,)"
    problem = _counter("its record's eval_iteration", arrays["eval_iteration"], 1, done, strict=True)
    if problem is None and "lineage_iteration" in arrays:
        problem = _lineage_shapes(arrays, n if n is not None else 0, done) or _counter(
            "its record's lineage_iteration", arrays["lineage_iteration"], 1, done, strict=False)
    return problem
