"""What the figures and tables read from a study's units: the units grouped by environment
and method (methods in the table's order), quartiles over seeds, final rewards, tuning time."""
from __future__ import annotations

import warnings

import numpy as np

from experiments.study.methods import ALL_METHODS
from experiments.study.store import UnitResult


def grouped(units: list[UnitResult]) -> tuple[list[str], list[str], dict]:
    """(envs in order, methods in order, {(env, method): unit})."""
    envs = list(dict.fromkeys(u.meta["env"] for u in units))
    present = {u.meta["method"] for u in units}
    methods = [m for m in ALL_METHODS if m in present] + sorted(present - set(ALL_METHODS))
    return envs, methods, {(u.meta["env"], u.meta["method"]): u for u in units}


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
    """x: (S, ...) -> 25th, 50th, 75th percentiles over seeds, ignoring NaN. The columns
    without NaN in one vectorised `np.percentile` (the same numbers as `np.nanpercentile`,
    which loops over columns in Python), the others through `np.nanpercentile`."""
    x = np.asarray(x, np.float64)
    nan = np.isnan(x).any(axis=0)
    q = np.percentile(x, [25, 50, 75], axis=0)
    if nan.any():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: NaN
            q[:, nan] = np.nanpercentile(x[:, nan], [25, 50, 75], axis=0)
    return q[0], q[1], q[2]


def cumulative_minutes(unit: UnitResult) -> np.ndarray:
    """(T,) cumulative tuning time in minutes after each iteration."""
    return np.cumsum(unit.tuner_time) / 60.0


def final_eval(unit: UnitResult) -> np.ndarray:
    """(S,) the evaluation reward sum at the final evaluation (NaN when none)."""
    if unit.eval_reward.shape[1] == 0:
        return np.full(unit.eval_reward.shape[0], np.nan)
    return unit.eval_reward[:, -1]


def final_train(unit: UnitResult) -> np.ndarray:
    """(S,) the training reward at the final iteration."""
    return unit.train_reward[:, -1]


def final_return(unit: UnitResult) -> np.ndarray:
    """(S,) the training episode return at the final iteration (the mean return of the
    episodes that ended in it, or the last such mean; NaN before any episode ended)."""
    return unit.episode_return[:, -1]


BASELINE = "hypercontroller"


def study_scores(units) -> dict[str, dict[str, np.ndarray]]:
    """method -> env -> (S,) final evaluation reward sums, methods in table order."""
    envs, methods, by = grouped(units)
    return {m: {env: final_eval(by[(env, m)]) for env in envs if (env, m) in by} for m in methods}
