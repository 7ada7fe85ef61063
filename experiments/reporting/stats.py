"""Aggregate statistics of a study with bootstrap confidence intervals (NumPy only).

The methodology of Agarwal et al. 2021, "Deep RL at the edge of the statistical precipice"
(the `rliable` package), for the final evaluation reward sums of a study.
The primitives (IQM, the Mann-Whitney statistic, percentile intervals, each stratum's
resampling) live in hcjax.stats, shared with the core's control-group report
(hcjax.control), and are importable from here under the same names.

Input. `scores`: method -> environment -> (S,) per-seed scores (S may differ between
units; NaN or inf = a seed without a score, dropped). An (environment, method) pair that
is absent, or has no finite score, is *missing*: it is left out of that method's
aggregates, and every result names the environments it was computed over.

Normalised score (`normalise`). Per environment, min-max over the study:
    z = (x - low) / (high - low),  low / high = the lowest / highest finite score of any
    run (every method, every seed) in that environment,
so 0 is the worst run of the study in that environment and 1 the best, and environments
with different reward scales can be pooled. These scores are *relative to the study*: they
change when a method or seed is added, and they are not comparable between studies.
Explicit per-environment (low, high) reference scores (e.g. random and expert returns)
can be given instead; then z is not clipped and may leave [0, 1]. An environment where
every run has the same score (low == high, e.g. a single run) cannot be ordered: all its
runs get 0.5, the midpoint, so that it favours no method (as a tie counts 1/2 in the
probability of improvement).

Aggregates (`aggregates`), per method, over its runs pooled over environments:
    IQM   interquartile mean, `scipy.stats.trim_mean(x, 0.25)` as rliable computes it: the
          floor(n/4) lowest and floor(n/4) highest of the n pooled runs are dropped and the
          rest averaged (no fractional weighting of boundary runs, so for n not divisible
          by 4 slightly more than the middle half is averaged, e.g. 9 of 15 runs; for
          n < 4 it is the mean). Environments with more seeds weigh more.
    mean  mean over environments of the mean over that environment's runs (each
          environment weighs the same; the pooled mean when seed counts are equal).

Stratified bootstrap. Each (environment, method) stratum's finite seeds are resampled with
replacement, independently per stratum, `reps` times; the statistic is recomputed on each
resample and the 95% interval is the 2.5th-97.5th percentile of those values (NumPy's
linear interpolation). Each stratum's resampling indices come from a generator seeded by
(seed, environment, method), so results are deterministic, the same for every statistic
of a method, and do not depend on which other methods are in the study. A stratum with a
single seed does not vary under the bootstrap, so intervals understate the uncertainty of
single-seed studies. Cost: vectorised over the replicates (statistics that are linear in a
resample are matrix products with the resample's draw counts); `summarise` of the committed
5-environment x 7-method x 3-seed study takes about 0.15 s at reps = 2000 on one CPU core
(2.6 s at 20000) and grows linearly in reps and in the number of runs.

Probability of improvement (`probability_of_improvement`): per environment the
Mann-Whitney statistic P(X > Y) + 0.5 P(X = Y) over every pair (seed of X, seed of Y),
averaged over the environments where both methods have a score; bootstrap over the seeds of
both methods within each environment. Which differences are called (`improvement_over`):
hcjax.calls' exact stratified permutation test (p <= 0.05), as the verdict and
`hcjax.control.report` call them, calibrated at every group size; the interval is reported
beside it.

Performance profile (`performance_profile`): for each threshold tau, the fraction of a
method's runs with normalised score > tau, averaged over environments (each environment
weighs the same), with pointwise bootstrap bands.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from hcjax import calls
from hcjax.stats import (  # the primitives, in the core (hcjax.control reports with them)
    CONFIDENCE,
    REPS,
    finite,
    interval,
    iqm,
    mann_whitney,
    mann_whitney_boot,
    resample,
    resample_counts,
)

Scores = Mapping[str, Mapping[str, np.ndarray]]  # method -> env -> (S,) per-seed scores

TAUS = np.linspace(0.0, 1.0, 101)


def _present(per_env: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """env -> (n,) finite scores, for the environments with at least one, sorted by env."""
    out = {env: finite(per_env[env]) for env in sorted(per_env)}
    return {env: x for env, x in out.items() if x.size}


def environments(scores: Scores) -> list[str]:
    """Every environment named in `scores`, sorted."""
    return sorted({env for per_env in scores.values() for env in per_env})


def missing(scores: Scores, method: str) -> list[str]:
    """Environments of the study where `method` has no unit or no finite score, sorted."""
    have = _present(scores.get(method, {}))
    return [env for env in environments(scores) if env not in have]


def reference_scores(scores: Scores) -> dict[str, tuple[float, float]]:
    """env -> (low, high): min and max of every finite run of the environment in the study
    (all methods, all seeds). Environments with no finite run are left out."""
    ref = {}
    for env in environments(scores):
        runs = np.concatenate([finite(per_env[env]) for per_env in scores.values() if env in per_env])
        if runs.size:
            ref[env] = (float(runs.min()), float(runs.max()))
    return ref


def normalise(scores: Scores, reference: Mapping[str, Sequence[float]] | None = None) -> dict:
    """method -> env -> (S,) normalised scores (NaN stays NaN).

    reference: env -> (low, high); None = `reference_scores(scores)` (min-max over the
    study, where low == high maps every run to 0.5). Given references must cover every
    environment with a finite score and have high > low (ValueError otherwise)."""
    given = reference is not None
    ref = reference_scores(scores) if reference is None else dict(reference)
    out: dict[str, dict[str, np.ndarray]] = {}
    for method, per_env in scores.items():
        out[method] = {}
        for env, x in per_env.items():
            x = np.asarray(x, np.float64)
            if env not in ref:
                if given and finite(x).size:
                    raise ValueError(f"normalise: no reference score for environment {env!r}")
                out[method][env] = np.full(x.shape, np.nan)
                continue
            low, high = (float(v) for v in ref[env])
            if high > low:
                z = (x - low) / (high - low)
            elif given:
                raise ValueError(f"normalise: reference for {env!r} needs high > low, got ({low}, {high})")
            else:
                z = np.full(x.shape, 0.5)
            out[method][env] = np.where(np.isfinite(x), z, np.nan)
    return out


def _iqm_and_mean(per_env: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """per_env: [(..., n_e)] -> (IQM of all runs pooled, mean over envs of env means), each (...)."""
    pooled = np.concatenate(per_env, axis=-1)
    means = np.stack([x.mean(axis=-1) for x in per_env], axis=-1)
    return iqm(pooled, axis=-1), means.mean(axis=-1)


def aggregate(per_env: Mapping[str, np.ndarray], method: str = "", reps: int = REPS, seed: int = 0,
              confidence: float = CONFIDENCE) -> dict:
    """IQM and mean of one method's normalised scores (env -> (S,)) with stratified-bootstrap
    intervals: {'iqm', 'iqm_ci': [lo, hi], 'mean', 'mean_ci', 'runs', 'envs'} (NaN when the
    method has no finite score)."""
    strata = _present(per_env)
    if not strata:
        nan2 = [float("nan")] * 2
        return dict(iqm=float("nan"), iqm_ci=nan2, mean=float("nan"), mean_ci=nan2, runs=0, envs=[])
    point = _iqm_and_mean(list(strata.values()))
    boot = _iqm_and_mean([resample(x, reps, seed, env, method) for env, x in strata.items()])
    (iqm_lo, iqm_hi), (mean_lo, mean_hi) = (interval(b, confidence) for b in boot)
    return dict(iqm=float(point[0]), iqm_ci=[float(iqm_lo), float(iqm_hi)], mean=float(point[1]),
                mean_ci=[float(mean_lo), float(mean_hi)], runs=int(sum(x.size for x in strata.values())),
                envs=list(strata))


def aggregates(normalised: Scores, reps: int = REPS, seed: int = 0, confidence: float = CONFIDENCE) -> dict:
    """method -> `aggregate(...)` plus 'missing_envs' (environments left out for that method)."""
    out = {}
    for method, per_env in normalised.items():
        out[method] = aggregate(per_env, method, reps, seed, confidence)
        out[method]["missing_envs"] = missing(normalised, method)
    return out


def probability_of_improvement(x: Mapping[str, np.ndarray], y: Mapping[str, np.ndarray],
                               names: tuple[str, str] = ("x", "y"), reps: int = REPS, seed: int = 0,
                               confidence: float = CONFIDENCE) -> dict:
    """P(X > Y) of method X over Y (each env -> (S,) scores), the mean over shared environments
    of `mann_whitney`, with a stratified bootstrap over the seeds of both methods in each
    environment: {'p', 'ci': [lo, hi], 'envs'} (NaN when no environment is shared).
    names: the two methods' names, which seed their strata's resampling."""
    sx, sy = _present(x), _present(y)
    shared = [env for env in sx if env in sy]
    if not shared:
        return dict(p=float("nan"), ci=[float("nan")] * 2, envs=[])
    point = np.mean([mann_whitney(sx[env], sy[env]) for env in shared])
    boot = np.zeros(reps)
    for env in shared:
        boot += mann_whitney_boot(sx[env], sy[env], reps, seed, env, names)
    lo, hi = interval(boot / len(shared), confidence)
    return dict(p=float(point), ci=[float(lo), float(hi)], envs=shared)


def improvement_over(scores: Scores, reference: str = "hypercontroller", reps: int = REPS, seed: int = 0,
                     confidence: float = CONFIDENCE) -> dict:
    """other method -> P(reference > other) (`probability_of_improvement` on raw scores; a
    per-environment min-max normalisation would not change it) plus 'p_value' (hcjax.calls'
    exact stratified permutation test, NaN where none ran), 'significant' (that test calls a
    difference), 'one_run' (the shared environments where either method has a single finite
    score: nothing can vary there, so no verdict is drawn) and 'verdict' ('better', 'worse',
    'not significant', 'too few seeds' (no outcome of groups this small could reach the test's
    level), 'not testable' (a stratum of one run) or 'no shared environment'). {} when
    `reference` is not in the study."""
    if reference not in scores:
        return {}
    words = {"better": "better", "worse": "worse", "not separated": "not significant",
             calls.VERDICTS[3]: "too few seeds"}
    out = {}
    for method, per_env in scores.items():
        if method == reference:
            continue
        r = probability_of_improvement(scores[reference], per_env, (reference, method), reps, seed, confidence)
        r["one_run"] = [env for env in r["envs"]
                        if min(finite(scores[reference][env]).size, finite(per_env[env]).size) < 2]
        r["p_value"], r["verdict"] = float("nan"), "no shared environment" if not r["envs"] else "not testable"
        if r["envs"] and not r["one_run"]:
            made = calls.call([finite(scores[reference][e]) for e in r["envs"]],
                              [finite(per_env[e]) for e in r["envs"]], None, confidence, seed)
            r["p_value"], r["verdict"] = made.p_value, words[made.verdict]
        r["significant"] = r["verdict"] in ("better", "worse")
        out[method] = r
    return out


def performance_profile(normalised: Scores, taus: np.ndarray = TAUS, reps: int = REPS, seed: int = 0,
                        confidence: float = CONFIDENCE) -> dict:
    """method -> {'fraction': (T,), 'lower': (T,), 'upper': (T,), 'envs'}: for each tau in the
    (T,) grid, the fraction of the method's runs with normalised score > tau (environments
    weigh equally), with pointwise stratified-bootstrap bands. NaN rows for a method with no
    finite score."""
    taus = np.asarray(taus, np.float64)
    out = {}
    for method, per_env in normalised.items():
        strata = _present(per_env)
        if not strata:
            nan = np.full(taus.shape, np.nan)
            out[method] = dict(fraction=nan, lower=nan, upper=nan, envs=[])
            continue
        point, boot = np.zeros(taus.shape), np.zeros((reps,) + taus.shape)
        for env, x in strata.items():
            above = (x[:, None] > taus[None, :]).astype(np.float64)  # (n, T)
            point += above.mean(axis=0)
            boot += resample_counts(x.size, reps, seed, env, method) @ above / x.size  # the resamples' fractions
        lo, hi = interval(boot / len(strata), confidence)
        out[method] = dict(fraction=point / len(strata), lower=lo, upper=hi, envs=list(strata))
    return out


def single_seed_strata(scores: Scores) -> list[tuple[str, str]]:
    """(env, method) pairs with exactly one finite score: fixed under the bootstrap."""
    return [(env, m) for m, per_env in scores.items() for env, x in sorted(per_env.items()) if finite(x).size == 1]


def summarise(scores: Scores, reference: Mapping[str, Sequence[float]] | None = None,
              baseline: str = "hypercontroller", taus: np.ndarray = TAUS, reps: int = REPS, seed: int = 0,
              confidence: float = CONFIDENCE) -> dict:
    """Everything above for one study (JSON-able once arrays are listed):
    {'normalisation', 'bootstrap', 'aggregates', 'improvement', 'profile', 'single_seed'}."""
    normalised = normalise(scores, reference)
    ref = reference_scores(scores) if reference is None else {e: tuple(map(float, v)) for e, v in reference.items()}
    return dict(
        normalisation=dict(kind="min-max over the study" if reference is None else "given reference scores",
                           reference={env: list(v) for env, v in sorted(ref.items())}),
        bootstrap=dict(reps=int(reps), seed=int(seed), confidence=float(confidence),
                       interval="percentile", strata="environment"),
        aggregates=aggregates(normalised, reps, seed, confidence),
        improvement=dict(baseline=baseline, vs=improvement_over(scores, baseline, reps, seed, confidence)),
        profile=dict(taus=np.asarray(taus, np.float64), methods=performance_profile(normalised, taus, reps, seed,
                                                                                   confidence)),
        single_seed=single_seed_strata(scores),
    )
