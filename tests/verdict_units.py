"""Fabricated units of a study with test seeds, as experiments.study writes them (the data
contract of experiments.reporting.verdict): tuning units (online methods, `fixed`, poor defaults
`fixed:<name>`, a `sweep` of N configurations x k seeds), test units `<method>@test` and
`replay_<method>@test`. Every number is drawn from a seeded generator; nothing is trained."""
from __future__ import annotations

import numpy as np

from experiments.study import protocol
from experiments.study.store import UnitResult

TUNING, TEST = list(range(10)), list(range(100, 110))


def unit(env: str, method: str, finals, phase: str = "tuning", seeds=None, frames: int = 100, evals: int = 2,
         rng=None, **meta) -> UnitResult:
    """A unit whose final evaluations are `finals` (S,); earlier evaluations are noise."""
    rng = rng or np.random.default_rng(0)
    finals = np.asarray(finals, np.float64)
    S, T = finals.size, 4
    seeds = (TEST if phase == "test" else TUNING)[:S] if seeds is None else seeds
    eval_reward = np.column_stack([rng.normal(0.0, 1.0, (S, evals - 1)), finals]).astype(np.float32)
    return UnitResult(
        seeds=np.asarray(seeds, np.int32), train_reward=np.zeros((S, T), np.float32),
        objective=np.zeros((S, T), np.float32), hparams=np.zeros((S, T, 1), np.float32),
        frames=np.full((S, T), frames, np.int64), rejected=np.zeros((S, T), np.int32),
        episode_return=np.zeros((S, T), np.float32), eval_iteration=np.arange(1, evals + 1, dtype=np.int32) * 2,
        eval_reward=eval_reward, tuner_time=np.zeros(T), meta=dict(env=env, method=method, phase=phase, **meta))


def sweep(env: str, scores: np.ndarray, k: int, rng=None, **meta) -> UnitResult:
    """A tuning-phase sweep: `scores` (N*k,) final evaluations, row j of configuration j // k."""
    n = scores.size // k
    configuration = [j // k for j in range(n * k)]
    return unit(env, "sweep", scores, seeds=[j % k for j in range(n * k)], rng=rng,
                sweep={"configurations": [[0.001 * (i + 1)] for i in range(n)], "seeds": k,
                       "configuration": configuration}, **meta)


def study(seed: int = 0, envs=("A", "B"), n_test: int = 6, n_tuning: int = 5, shift=None, n_conf: int = 4,
          k: int = 2, seconds: bool = True) -> list[UnitResult]:
    """A whole fabricated study: per environment hypercontroller and random (online), fixed,
    fixed:lr_x10, a sweep of n_conf x k, their test units and the replays. `shift`: method ->
    mean final evaluation (rounded scores: ties happen)."""
    rng = np.random.default_rng(seed)
    shift = shift or {"hypercontroller": 1.0, "random": 0.0, "fixed": 0.5, "fixed:lr_x10": -2.0, "sweep": 2.0,
                      "replay_hypercontroller": 0.8, "replay_random": 0.0}
    units = []
    for e, env in enumerate(envs):
        scale = 10.0 ** e  # environments of different reward scales
        def draw(m, n):
            return np.round(scale * rng.normal(shift[m], 1.0, n), 1)
        run = {"run_seconds": 2.0} if seconds else {}
        for m in ("hypercontroller", "random", "fixed", "fixed:lr_x10"):
            units.append(unit(env, m, draw(m, n_tuning), rng=rng, **run))
            units.append(unit(env, m + "@test", draw(m, n_test), phase="test", rng=rng, **run))
        units.append(sweep(env, np.round(scale * rng.normal(0.5, 1.0, n_conf * k), 1), k, rng=rng,
                           **({"run_seconds": 1.5} if seconds else {})))
        best = protocol.incumbent(units[-1].eval_reward[:, -1], np.repeat(np.arange(n_conf), k))  # what it would run
        units.append(unit(env, "sweep@test", draw("sweep", n_test), phase="test", rng=rng,
                          incumbent={"configuration": best, "values": [0.001 * (best + 1)], "tuning_mean": 0.0}))
        for m in ("hypercontroller", "random"):
            units.append(unit(env, f"replay_{m}@test", draw(f"replay_{m}", n_test), phase="test", rng=rng))
    return units
