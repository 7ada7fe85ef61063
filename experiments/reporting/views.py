"""What the figures and tables read from a study's units: the units grouped by environment
and method (methods in the table's order), quartiles over seeds, final rewards, tuning time."""
from __future__ import annotations

import numpy as np

from experiments.study import protocol
from experiments.study.methods import ALL_METHODS
from experiments.study.store import UnitResult


def grouped(units: list[UnitResult]) -> tuple[list[str], list[str], dict]:
    """(envs in order, methods in order, {(env, method): unit})."""
    envs = list(dict.fromkeys(u.meta["env"] for u in units))
    present = {u.meta["method"] for u in units}
    methods = [m for m in ALL_METHODS if m in present] + sorted(present - set(ALL_METHODS))
    return envs, methods, {(u.meta["env"], u.meta["method"]): u for u in units}


ALL = "all environments"  # the scope of a figure over every environment (claims, verdict)

BACKENDS = {"brax": "Brax", "gymnax": "gymnax", "gymnasium": "Gymnasium"}


def ran_as(meta: dict) -> str:
    """What an environment of a unit ran as, from its meta: 'CartPole-v1 (gymnax)' when the
    backend has the study's name, 'Brax halfcheetah, standing in for HalfCheetah-v4' when
    the study runs another implementation under its label."""
    env, make = meta["env"], meta.get("make", meta["env"])
    if make.startswith(("object:", "factory:")):  # your own environment (experiments.study.own_envs)
        kind, _, ref = make.partition(":")
        return f"{env} (your own, {kind} {ref.split('#')[0]})"
    backend = BACKENDS.get(meta.get("path"), meta.get("path") or "")
    if make == env:
        return f"{env} ({backend})" if backend else env
    return f"{backend} {make}, standing in for {env}".strip()


def env_names(units: list[UnitResult]) -> dict[str, str]:
    """env label -> `ran_as` of its first unit, envs in table order."""
    names = {}
    for u in units:
        names.setdefault(u.meta["env"], ran_as(u.meta))
    return names


def quartiles(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x: (S, ...) -> 25th, 50th, 75th percentiles over seeds, ignoring NaN (NaN where a
    column has no number): `np.nanpercentile`'s numbers bit for bit (a zero's sign aside,
    where a column holds both 0.0 and -0.0), without its Python loop over the columns that
    hold a NaN (`nan_percentiles`; replotting four committed studies took 31-35 CPU s with it
    against 33-36 with the loop)."""
    x = np.asarray(x, np.float64)
    nan = np.isnan(x).any(axis=0)
    q = np.percentile(x, [25, 50, 75], axis=0)
    if nan.any():
        q[:, nan] = nan_percentiles(x[:, nan], (25, 50, 75))
    return q[0], q[1], q[2]


def nan_percentiles(x: np.ndarray, ps) -> np.ndarray:
    """x: (S, M) float64, ps: (P,) percentiles -> (P, M) each column's percentiles of its
    numbers (NaN ignored; NaN for a column of NaN), computed as `np.nanpercentile(x, p,
    axis=0)` computes each column (linear method): the sorted numbers at floor and floor + 1
    of (n - 1) p / 100, and numpy's interpolation between them (from the upper one when its
    weight is >= 0.5). The columns are sorted once for every p."""
    s = np.sort(x, axis=0)  # NaN sorts last: a column's n numbers come first
    n = np.count_nonzero(~np.isnan(x), axis=0)
    cols = np.arange(x.shape[1])
    out = np.empty((len(ps), x.shape[1]))
    for i, p in enumerate(ps):
        virtual = (n - 1) * (p / 100.0)
        lower = np.clip(np.floor(virtual), 0, None).astype(np.intp)
        upper = np.clip(lower + 1, None, np.maximum(n - 1, 0))
        a, b = s[lower, cols], s[upper, cols]
        t = virtual - lower
        with np.errstate(invalid="ignore"):  # inf - inf, NaN columns: NaN, as numpy's
            diff = b - a
            out[i] = np.where(n > 0, np.where(t >= 0.5, b - diff * (1 - t), a + diff * t), np.nan)
    return out


def cumulative_minutes(unit: UnitResult) -> np.ndarray:
    """(T,) cumulative tuning time in minutes after each iteration."""
    return np.cumsum(unit.tuner_time) / 60.0


def final_eval(unit: UnitResult) -> np.ndarray:
    """(S,) the evaluation reward sum at the final evaluation (NaN when none)."""
    if unit.eval_reward.shape[1] == 0:
        return np.full(unit.eval_reward.shape[0], np.nan)
    return unit.eval_reward[:, -1]


def number_text(x: float) -> str:
    """A score as it is, without rounding or exponent: 0 -> '0', 9.5 -> '9.5', -200 -> '-200'."""
    return np.format_float_positional(float(x), trim="-")


def measured_nothing(unit: UnitResult) -> str | None:
    """The one judge of a unit whose evaluations measured nothing: every finite evaluation
    reward sum of the (S, E) eval_reward, every seed and every evaluation, is the same number
    (at least two of them), e.g. a sparse reward that no evaluation episode reached. Returns
    what to say ('every evaluation scored 0: the evaluation measured nothing'; with the count
    of NaN ones when some seeds have none), None when the evaluations differ or there are
    fewer than two finite ones (no evaluation, or only NaN: not this flag's business)."""
    x = np.asarray(unit.eval_reward, np.float64).ravel()
    ok = np.isfinite(x)
    if ok.sum() < 2 or np.any(x[ok] != x[ok][0]):
        return None
    score = number_text(x[ok][0])
    if ok.all():
        return f"every evaluation scored {score}: the evaluation measured nothing"
    return (f"every evaluation with a score scored {score} ({int((~ok).sum())} of {x.size} had none): "
            f"the evaluation measured nothing")


def final_train(unit: UnitResult) -> np.ndarray:
    """(S,) the training reward at the final iteration."""
    return unit.train_reward[:, -1]


def final_return(unit: UnitResult) -> np.ndarray:
    """(S,) the training episode return at the final iteration (the mean return of the
    episodes that ended in it, or the last such mean; NaN before any episode ended)."""
    return unit.episode_return[:, -1]


BASELINE = "hypercontroller"


def study_scores(units) -> dict[str, dict[str, np.ndarray]]:
    """method -> env -> (S,) final evaluation reward sums, methods in table order, of the units
    the study's statistics compare: the tuning phase's (a study with test seeds is judged on them
    by `experiments.reporting.verdict`), not the sweep (its rows are configurations x seeds, not
    the seeds of one method: the verdict compares its incumbent). A unit whose evaluations
    measured nothing (`measured_nothing`) is left out: it is compared with nothing."""
    envs, methods, by = grouped(units)
    compared = [m for m in methods if protocol.kind(m).phase == protocol.TUNING_PHASE and m != protocol.SWEEP]
    return {m: {env: final_eval(by[(env, m)]) for env in envs if (env, m) in by and not measured_nothing(by[(env, m)])}
            for m in compared}
