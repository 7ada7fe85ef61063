"""A control group inside a tuned batch: some of the vmapped agents run fixed values (the
script's defaults) beside the tuned ones, in the same compiled program, and `report` says
at the end whether the tuned agents beat them.

    TUNER = hcjax.control.with_control(hcjax.make_tuner("hypercontroller", SPACE, d=4))
    controls = hcjax.control.controls(8)          # (8,) bool: agents 1, 3, 5, 7 are controls

    def train(rng, control):                      # vmapped over (rngs, controls)
        tuner_state = hcjax.control.assign(TUNER.init(rng), control)
        ...                                       # TUNER.values / TUNER.step as before

    out = jax.jit(jax.vmap(train))(rngs, controls)
    print(hcjax.control.report(final_scores, controls))   # (8,) scores, one per agent

`with_control(tuner)` is the tuner and `fixed` at the defaults stacked behind one Tuner
(`hcjax.tuners.stacked`): an agent's `which` picks its method, so the controls really run
the defaults, and every agent is in one program. A control agent's numbers are those of
`fixed` run alone; a tuned agent's those of the tuner run alone.

`report` compares one score per agent (e.g. the final greedy return) between the two
groups with the statistics of experiments.reporting.stats (rliable's): P(tuned > control)
(the Mann-Whitney statistic) with a 95% percentile interval from a bootstrap over each
group's seeds, and each group's IQM with its interval. Its sentence says "better" or
"worse" when the interval excludes 0.5, else "not separated".
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from hcjax.stats import CONFIDENCE, REPS, interval, iqm, mann_whitney, mann_whitney_boot, resample
from hcjax.tuner import Tuner, check_float, check_int
from hcjax.tuners import make_tuner
from hcjax.tuners.stacked import StackedState, select, stack

STRATUM = "control group"  # the bootstrap's environment name; the groups are the strata "tuned" and "control"


def with_control(tuner: Tuner, values=None) -> Tuner:
    """tuner -> a Tuner whose agents run `tuner` or, after `assign(state, True)`, `fixed`
    at `values` ((h,) natural units; None: the space's defaults). State: a StackedState
    (init: every agent tuned). The space must give every hyperparameter a `default` (the
    value the script ran with before tuning) unless `values` is given: a control at the
    middle of a range would not be the script's default (ValueError naming them)."""
    if not isinstance(tuner, Tuner):
        raise ValueError(f"with_control: tuner must be an hcjax Tuner (hcjax.make_tuner(...)), got {tuner!r}")
    if values is None:
        unset = [p.name for p in tuner.space.hyperparameters if p.default is None]
        if unset:
            raise ValueError(f"with_control: {unset} have no default, so a control would run the middle of their "
                             "range, not the value your script used; give hcjax.Hyperparameter(..., default=...) "
                             "or with_control(tuner, values=[...])")
    control = make_tuner("fixed", tuner.space, values=values)
    stacked = stack([tuner, control])
    return stacked._replace(name=f"control({tuner.name})")


def assign(state: StackedState, control) -> StackedState:
    """state (from `with_control(...).init`), control: a bool (a scalar per agent under
    vmap) -> the same state, running the fixed values where `control`, the tuner elsewhere.
    (A state that every agent shares, from `init` given one key for all, is refused by
    `step`.)"""
    if not isinstance(state, StackedState) or len(state.states) != 2:
        raise ValueError(f"assign: state must come from hcjax.control.with_control(tuner).init(key), got "
                         f"{type(state).__name__}")
    control = jnp.asarray(control)
    if control.dtype != jnp.bool_ or control.shape != ():
        raise ValueError(f"assign: control must be a bool scalar (one per agent under vmap), got dtype "
                         f"{control.dtype} and shape {control.shape}")
    return select(state, control.astype(jnp.int32))


def is_control(state: StackedState) -> jax.Array:
    """bool (...,): True for the agents of a `with_control` state that run the fixed values."""
    return jnp.asarray(state.which) == 1


def controls(n: int) -> np.ndarray:
    """(n,) bool: which of n agents are controls, every second one (1, 3, 5, ...), so that
    the two groups take alternate seeds; n >= 4 (two agents in each group at least)."""
    n = check_int("controls.n", n, 4)
    return np.arange(n) % 2 == 1


class ControlReport(NamedTuple):
    """The tuned agents against their control group (`report`): p: P(tuned > control),
    p_ci: its (low, high) interval; iqm_tuned, iqm_control and their (low, high)
    intervals; n_tuned, n_control: the agents with a finite score, n_dropped: those
    without; verdict: 'better', 'worse', 'not separated' or 'not testable' (fewer than 2
    agents in a group); str() is one plain sentence."""

    p: float
    p_ci: tuple[float, float]
    iqm_tuned: float
    iqm_tuned_ci: tuple[float, float]
    iqm_control: float
    iqm_control_ci: tuple[float, float]
    n_tuned: int
    n_control: int
    n_dropped: int
    verdict: str

    def __str__(self) -> str:
        if self.verdict == "not testable":
            return (f"tuned against its control: not testable ({self.n_tuned} tuned and {self.n_control} control "
                    "agents with a finite score; the bootstrap needs 2 in each)")
        lo, hi = self.p_ci
        head = {"better": "tuned better than its control", "worse": "tuned worse than its control",
                "not separated": "tuned and its control not separated"}[self.verdict]
        text = (f"{head}: P(tuned > control) = {self.p:.2f} [{lo:.2f}, {hi:.2f}]; IQM {self.iqm_tuned:.4g} tuned "
                f"[{self.iqm_tuned_ci[0]:.4g}, {self.iqm_tuned_ci[1]:.4g}], {self.iqm_control:.4g} control "
                f"[{self.iqm_control_ci[0]:.4g}, {self.iqm_control_ci[1]:.4g}] ({self.n_tuned} and "
                f"{self.n_control} seeds)")
        if self.n_dropped:
            text += f"; {self.n_dropped} agents without a finite score left out"
        if self.verdict == "worse":
            text += "; see the ranges (docs/own-training-loop.md, any algorithm)"
        return text


def report(scores, control, reps: int = REPS, seed: int = 0, confidence: float = CONFIDENCE) -> ControlReport:
    """scores: (n,) one score per agent, higher is better (NaN or inf: no score, left out);
    control: (n,) bool, True for the control agents (`controls(n)`, or `is_control` of the
    final tuner states) -> ControlReport. The bootstrap resamples each group's seeds
    (`reps` replicates, generators seeded by `seed`), as experiments.reporting.stats does
    for one environment."""
    scores = np.asarray(scores, np.float64)
    control = np.asarray(control)
    if scores.ndim != 1 or control.shape != scores.shape or control.dtype != np.bool_:
        raise ValueError(f"report: scores must be (n,) numbers and control (n,) bool, got shapes {scores.shape} "
                         f"and {control.shape} (dtype {control.dtype})")
    reps = check_int("report.reps", reps, 1)
    confidence = check_float("report.confidence", confidence, 0.0, 1.0, low_open=True)
    ok = np.isfinite(scores)
    tuned, fixed = scores[ok & ~control], scores[ok & control]
    nan2 = (float("nan"), float("nan"))
    counts = dict(n_tuned=int(tuned.size), n_control=int(fixed.size), n_dropped=int((~ok).sum()))
    if min(tuned.size, fixed.size) < 2:
        return ControlReport(float("nan"), nan2, float(iqm(tuned)), nan2, float(iqm(fixed)), nan2,
                             verdict="not testable", **counts)
    p_lo, p_hi = interval(mann_whitney_boot(tuned, fixed, reps, seed, STRATUM, ("tuned", "control")), confidence)
    iqm_ci = [tuple(float(v) for v in interval(iqm(resample(x, reps, seed, STRATUM, name)), confidence))
              for x, name in ((tuned, "tuned"), (fixed, "control"))]
    verdict = "better" if p_lo > 0.5 else "worse" if p_hi < 0.5 else "not separated"
    return ControlReport(mann_whitney(tuned, fixed), (float(p_lo), float(p_hi)), float(iqm(tuned)), iqm_ci[0],
                         float(iqm(fixed)), iqm_ci[1], verdict=verdict, **counts)
