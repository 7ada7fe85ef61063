"""What two groups of runs can claim (NumPy only): one call, made the same way for
`hcjax.control.report` (tuned agents against their controls) and the verdict of a study
(experiments.reporting.verdict: a method against the default, task by task), and the runs
that collapsed.

The call on groups X and Y with runs on T tasks (x_t (n_t,), y_t (m_t,)):
    "better" / "worse"   the stratified permutation test of the mean over tasks of
                         P(X > Y) + 0.5 P(X = Y) (hcjax.permutation) gives a two-sided p-value
                         <= alpha = 1 - confidence, and that mean is above / below 1/2
    "not separated"      otherwise
    "too few seeds to tell (n = a+b)"   the groups are so small that no outcome could reach
                         alpha: even runs entirely apart give p = 2 / prod_t C(n_t + m_t, n_t)
                         > alpha (one task: 2 + 2, 3 + 3, 3 + 4 runs; two tasks: 2 + 2 each)
Two groups drawn from one distribution get "better" or "worse" at most a fraction alpha of
the time, at every size (the test is exact; its discreteness only makes it rarer):
tests/test_calls.py measures it over 2000 trials per size and task count, and
`python -m experiments.benchmarks.bench_calls` prints the table beside the percentile
bootstrap's, which called 31% of such pairs at 2 + 2 runs on one task.

The interval printed beside the call is the stratified bootstrap's (rliable's percentile
interval; the caller computes it), shown only where it can be trusted and agrees with the
call: every task has at least MIN_INTERVAL runs in each group (below that the percentile
bootstrap excluded 1/2 for up to 31% of one-distribution pairs; from 8 runs on it stayed
within 0.07 in the benchmark), it is not a single point (runs entirely apart resample to
[1, 1] whatever the truth), and it excludes 1/2 exactly when the call is "better" or
"worse". Otherwise the p-value stands in its place and `Call.no_interval` says why.

A collapsed run: one scoring below the worst run of the reference group on its task (or of
several references, e.g. the default and a poor default: below all of them), named with its
seed and its final hyperparameters (`collapsed`): P(X > Y) is a rank statistic, and it can
say "better" while one run of X fell to the task's floor and the means are equal.
"""
from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np

from hcjax.permutation import p_values, smallest_p
from hcjax.stats import CONFIDENCE, finite

MIN_SEEDS = 4  # runs per group (per task) from which one task alone can be called: 2 / C(8, 4) = 0.029 <= 0.05
MIN_INTERVAL = 8  # runs per group (per task) from which the bootstrap interval of P(X > Y) is printed
VERDICTS = ("better", "worse", "not separated", "too few seeds to tell")
_SHOWN_COLLAPSES = 3  # collapsed runs named in a sentence; every one is in the tables


class FewSeedsWarning(UserWarning):
    """A study or a control group has fewer than MIN_SEEDS runs per group on a task."""


def decide(xs, ys, confidence: float = CONFIDENCE, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """The calls on a batch of comparisons. xs, ys: T per-task arrays x_t (..., n_t), y_t
    (..., m_t) sharing a batch shape (...). -> (verdicts (...) str, one of VERDICTS; stat (...):
    mean over tasks of P(X > Y) + 0.5 P(X = Y); p (...): two-sided p-values; how: 'exact' or
    'monte carlo (B splits)', see hcjax.permutation)."""
    stat, p, how = p_values(xs, ys, seed)
    sizes = [(np.shape(x)[-1], np.shape(y)[-1]) for x, y in zip(xs, ys)]
    alpha = 1.0 - confidence
    if smallest_p(sizes) > alpha:
        return np.full(stat.shape, VERDICTS[3], dtype=object), stat, p, how
    called = p <= alpha + 1e-12
    words = np.where(called & (stat > 0.5), "better", np.where(called & (stat < 0.5), "worse", "not separated"))
    return words.astype(object), stat, p, how


class Call(NamedTuple):
    """One comparison's call (`call`): verdict, one of VERDICTS; p: the mean over tasks of
    P(X > Y) + 0.5 P(X = Y); p_value: the permutation test's, two-sided; test: 'exact' or
    'monte carlo (B splits)'; ci: (low, high) the bootstrap interval where shown, else NaNs;
    no_interval: why none is shown ('' when one is); sizes: ((n_t, m_t), ...) runs per task."""

    verdict: str
    p: float
    p_value: float
    test: str
    ci: tuple[float, float]
    no_interval: str
    sizes: tuple[tuple[int, int], ...]

    @property
    def words(self) -> str:
        """'better', 'worse', 'not separated', 'too few seeds to tell (n = 2+2)' or '(n = 2+2 per task)'."""
        if self.verdict != VERDICTS[3]:
            return self.verdict
        n, m = (min(s[i] for s in self.sizes) for i in (0, 1))
        return f"{self.verdict} (n = {n}+{m}{' per task' if len(self.sizes) > 1 else ''})"

    @property
    def numbers(self) -> str:
        """'0.62 [0.55, 0.70]' where the interval is shown, else '0.62 (p = 0.08)'."""
        if self.no_interval:
            return f"{probability_number(self.p)} ({p_text(self.p_value, self.test)})"
        return f"{probability_number(self.p)} [{probability_number(self.ci[0])}, {probability_number(self.ci[1])}]"


def probability_number(x: float) -> str:
    """A probability with two decimals, three where a number other than 0.5 would read 0.50."""
    return f"{x:.3f}" if f"{x:.2f}" == "0.50" and x != 0.5 else f"{x:.2f}"


def p_text(p: float, test: str = "exact") -> str:
    """'p = 0.012', 'p < 0.001'; '(Monte Carlo)' after it when the distribution was sampled."""
    text = "p < 0.001" if p < 0.001 else f"p = {p:.2g}" if p < 0.1 else f"p = {p:.2f}"
    return text + ("" if test == "exact" else " (Monte Carlo)")


def call(xs, ys, interval=None, confidence: float = CONFIDENCE, seed: int = 0) -> Call:
    """One comparison: xs, ys: T per-task arrays of finite scores (x_t (n_t,), y_t (m_t,), each
    with a run); interval: (low, high) the stratified bootstrap's interval of the same
    statistic, or None. -> Call (`decide` for one comparison, and the interval shown or why not)."""
    verdicts, stat, p, how = decide([np.asarray(x, np.float64) for x in xs], [np.asarray(y, np.float64) for y in ys],
                                    confidence, seed)
    verdict = str(verdicts[()])
    sizes = tuple((len(x), len(y)) for x, y in zip(xs, ys))
    ci = (float("nan"),) * 2 if interval is None else tuple(float(v) for v in interval)
    why = no_interval(verdict, ci, sizes)
    return Call(verdict, float(stat), float(p), how, (float("nan"),) * 2 if why else ci, why, sizes)


def no_interval(verdict: str, ci, sizes) -> str:
    """Why the interval `ci` is not shown beside `verdict` for groups of `sizes` runs per task
    ('' when it is)."""
    lo, hi = ci
    fewest = min(min(s) for s in sizes)
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return "no interval"
    if fewest < MIN_INTERVAL:
        return f"no interval below {MIN_INTERVAL} runs per group"
    if lo == hi:
        return "no interval: every resample orders the two groups alike"
    if (lo > 0.5 or hi < 0.5) != (verdict in VERDICTS[:2]):
        return "no interval: the bootstrap's and the exact test's calls differ at this size"
    return ""


def collapsed(scores, references, seeds=None, hyperparameters=None) -> list[dict]:
    """The runs of one group on one task that scored below every run of every reference group
    there. scores: (n,) (NaN: no score, never collapsed); references: a list of (k,) scores
    (their finite runs count); seeds: (n,) ids (default: 0..n-1); hyperparameters: name -> (n,)
    final values, or None. -> [{'index', 'seed', 'score', 'floor' (the worst reference run),
    'hyperparameters': {name: value}}] in the order of `scores`."""
    scores = np.asarray(scores, np.float64)
    floor_runs = np.concatenate([finite(r) for r in references]) if references else np.zeros(0)
    if not floor_runs.size:
        return []
    floor = float(floor_runs.min())
    seeds = np.arange(scores.size) if seeds is None else np.asarray(seeds)
    hyperparameters = hyperparameters or {}
    return [{"index": int(i), "seed": int(seeds[i]), "score": float(scores[i]), "floor": floor,
             "hyperparameters": {k: float(np.asarray(v)[i]) for k, v in hyperparameters.items()}}
            for i in np.flatnonzero(np.isfinite(scores) & (scores < floor))]


def run_text(run: dict, where: str = "seed") -> str:
    """'seed 7: 9.4, learning_rate 0.01, clip_eps 0.3' (where: the word before the id)."""
    values = "".join(f", {k} {value_text(v)}" for k, v in run["hyperparameters"].items())
    return f"{where} {run['seed']}: {run['score']:.4g}{values}"


def value_text(v: float) -> str:
    """A hyperparameter's value: 3 significant digits below 1 (0.00599), 4 above (1024, 0.978 -> 0.978)."""
    return f"{v:.3g}" if abs(v) < 1 else f"{v:.4g}"


def collapse_text(runs: list[dict], total: int, group: str = "", named=None, chance: float | None = None) -> str:
    """'1 of 20 tuned runs collapsed (seed 7: 9.4, learning_rate 0.01; 0.95 expected by chance)';
    '' without a collapse. named: run -> its label (default `run_text`); the first few are named;
    chance: how many would fall below the reference's worst run if the group were drawn as the
    reference is (`by_chance`), said beside them."""
    if not runs:
        return ""
    named = named or run_text
    shown = "; ".join(named(r) for r in runs[:_SHOWN_COLLAPSES])
    more = f"; {len(runs) - _SHOWN_COLLAPSES} more" if len(runs) > _SHOWN_COLLAPSES else ""
    odds = "" if chance is None else f"; {chance:.2g} expected by chance"
    return f"{len(runs)} of {total} {group + ' ' if group else ''}runs collapsed ({shown}{more}{odds})"


def by_chance(sizes) -> float:
    """How many runs of a group would end below every run of the reference on their task if
    both were drawn from one distribution: sum over tasks of n_t / (m_t + 1), for (n_t runs,
    m_t reference runs) per task (each run is the lowest of its m_t + 1 with probability
    1 / (m_t + 1)). About one for equal groups of any size: a single collapse is no evidence by
    itself; its score and hyperparameters are."""
    return float(sum(n / (m + 1) for n, m in sizes))


def few_seeds(n: int, tasks: int = 1, what: str = "each group", task: str = "task") -> str:
    """The warning for groups of `n` runs each on each of `tasks` tasks ('' from MIN_SEEDS on);
    what: the groups, in words; task: what a task is called (a study's: 'environment')."""
    if n >= MIN_SEEDS:
        return ""
    alone = smallest_p([(n, n)] * tasks) > 1.0 - CONFIDENCE
    overall = ("no comparison can call a difference at all" if alone or tasks == 1 else
               f"only comparisons over all {tasks} {task}s can")
    return (f"{n} runs in {what}: below hcjax.calls.MIN_SEEDS = {MIN_SEEDS}, a difference on one {task} cannot "
            f"be called (it reads 'too few seeds to tell'), and {overall}; give each group at least {MIN_SEEDS} "
            "(docs/studies.md#how-many-seeds)")


def warn_few_seeds(n: int, what: str = "each group", tasks: int = 1, stacklevel: int = 3, task: str = "task") -> str:
    """Warn (FewSeedsWarning) with `few_seeds(n, tasks, what, task)` when it says something; returns it."""
    message = few_seeds(n, tasks, what, task)
    if message:
        warnings.warn(message, FewSeedsWarning, stacklevel=stacklevel)
    return message
