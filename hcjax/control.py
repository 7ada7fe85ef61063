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
groups: P(tuned > control) (the Mann-Whitney statistic), its call by `hcjax.calls` ("better"
or "worse" where the exact permutation test gives p <= 0.05, "not separated", or "too few
seeds to tell" below what any outcome could separate) with the 95% percentile interval of a
bootstrap over each group's seeds where it can be trusted (`hcjax.calls.call`), each group's
mean and IQM, and the tuned runs that collapsed below the worst control, named with their
seeds and final hyperparameters.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from hcjax import calls
from hcjax.stats import CONFIDENCE, REPS, interval, iqm, mann_whitney_boot, resample
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
    the two groups take alternate seeds; n >= 4 (two agents in each group at least). Below
    2 * hcjax.calls.MIN_SEEDS agents it warns (FewSeedsWarning): no report can call a
    difference with fewer than MIN_SEEDS agents in a group."""
    n = check_int("controls.n", n, 4)
    calls.warn_few_seeds(n // 2, f"the control group of controls({n})")
    return np.arange(n) % 2 == 1


class ControlReport(NamedTuple):
    """The tuned agents against their control group (`report`): p: P(tuned > control);
    p_ci: its (low, high) interval, NaNs where none is shown (`hcjax.calls.call`: too few
    agents, or an interval that would not agree with the call); p_value: the exact (or Monte
    Carlo) permutation test's; test: which; iqm_tuned, iqm_control and their intervals (NaNs
    below hcjax.calls.MIN_INTERVAL agents); mean_tuned, mean_control and their standard
    errors se_tuned, se_control; n_tuned, n_control: the agents with a finite score,
    n_dropped: those without; verdict: 'better', 'worse', 'not separated', 'too few seeds to
    tell' or 'not testable' (a group without a finite score); collapsed: the tuned runs below
    the worst control ({'seed', 'score', 'floor', 'hyperparameters'}, `hcjax.calls.collapsed`);
    call: the hcjax.calls.Call (None when not testable); seed_word: how a run is named ('seed'
    with the given seed ids, 'agent' with indices); str() is one plain sentence."""

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
    p_value: float = float("nan")
    test: str = ""
    mean_tuned: float = float("nan")
    mean_control: float = float("nan")
    se_tuned: float = float("nan")
    se_control: float = float("nan")
    collapsed: tuple = ()
    call: calls.Call | None = None
    seed_word: str = "seed"

    def __str__(self) -> str:
        if self.verdict == "not testable":
            return (f"tuned against its control: not testable ({self.n_tuned} tuned and {self.n_control} control "
                    "agents with a finite score)")
        head = {"better": "tuned better than its control", "worse": "tuned worse than its control",
                "not separated": "tuned and its control not separated"}.get(self.verdict, f"tuned against its "
                                                                                    f"control: {self.call.words}")
        fell = calls.collapse_text(list(self.collapsed), self.n_tuned, "tuned",
                                   lambda r: calls.run_text(r, self.seed_word),
                                   calls.by_chance([(self.n_tuned, self.n_control)]))
        if fell:
            head += f", {'but' if self.verdict == 'better' else 'and'} {fell}"
        p = f"P(tuned > control) = {self.call.numbers}"
        if not self.call.no_interval:
            p += f", {calls.p_text(self.p_value, self.test)}"
        text = (f"{head}: {p}; mean {_mean(self.mean_tuned, self.se_tuned)} tuned, "
                f"{_mean(self.mean_control, self.se_control)} control (± s.e.); IQM {self.iqm_tuned:.4g} tuned"
                f"{_ci(self.iqm_tuned_ci)}, {self.iqm_control:.4g} control{_ci(self.iqm_control_ci)} "
                f"({self.n_tuned} and {self.n_control} seeds)")
        if self.n_dropped:
            text += f"; {self.n_dropped} agent{'s' if self.n_dropped > 1 else ''} without a finite score left out"
        if self.verdict == "worse":
            text += "; see the ranges (docs/own-training-loop.md, any algorithm)"
        return text


def _mean(mean: float, se: float) -> str:
    return f"{mean:.4g} ± {se:.3g}" if np.isfinite(se) else f"{mean:.4g}"


def _ci(ci) -> str:
    return f" [{ci[0]:.4g}, {ci[1]:.4g}]" if np.isfinite(ci[0]) else ""


def _mean_se(x: np.ndarray) -> tuple[float, float]:
    """(mean, standard error) of (n,) finite scores; the error NaN for fewer than 2."""
    return float(x.mean()) if x.size else float("nan"), float(x.std(ddof=1) / np.sqrt(x.size)) if x.size > 1 \
        else float("nan")


def report(scores, control, reps: int = REPS, seed: int = 0, confidence: float = CONFIDENCE, seeds=None,
           hyperparameters=None) -> ControlReport:
    """scores: (n,) one score per agent, higher is better (NaN or inf: no score, left out);
    control: (n,) bool, True for the control agents (`controls(n)`, or `is_control` of the
    final tuner states); seeds: (n,) the agents' seed ids for naming collapsed runs (default:
    their index, named 'agent i'); hyperparameters: name -> (n,) each agent's final values
    (e.g. `SPACE.as_dict(TUNER.values(final_states))`), named beside a collapsed run ->
    ControlReport. The bootstrap resamples each group's seeds (`reps` replicates, generators
    seeded by `seed`), as experiments.reporting.stats does for one environment; the call is
    `hcjax.calls.call`'s."""
    scores = np.asarray(scores, np.float64)
    control = np.asarray(control)
    if scores.ndim != 1 or control.shape != scores.shape or control.dtype != np.bool_:
        raise ValueError(f"report: scores must be (n,) numbers and control (n,) bool, got shapes {scores.shape} "
                         f"and {control.shape} (dtype {control.dtype})")
    reps = check_int("report.reps", reps, 1)
    confidence = check_float("report.confidence", confidence, 0.0, 1.0, low_open=True)
    ids = np.arange(scores.size) if seeds is None else np.asarray(seeds).ravel()
    hp = {k: np.asarray(v, np.float64).ravel() for k, v in (hyperparameters or {}).items()}
    if ids.shape != scores.shape or any(v.shape != scores.shape for v in hp.values()):
        raise ValueError(f"report: seeds and every hyperparameters entry must be (n,) = {scores.shape}, got "
                         f"{ids.shape} and {({k: v.shape for k, v in hp.items()})}")
    ok = np.isfinite(scores)
    tuned, fixed = scores[ok & ~control], scores[ok & control]
    nan2 = (float("nan"), float("nan"))
    (mt, st), (mc, sc) = _mean_se(tuned), _mean_se(fixed)
    counts = dict(n_tuned=int(tuned.size), n_control=int(fixed.size), n_dropped=int((~ok).sum()), mean_tuned=mt,
                  mean_control=mc, se_tuned=st, se_control=sc, seed_word="agent" if seeds is None else "seed")
    if min(tuned.size, fixed.size) < 1:
        return ControlReport(float("nan"), nan2, float(iqm(tuned)), nan2, float(iqm(fixed)), nan2,
                             verdict="not testable", **counts)
    boot = interval(mann_whitney_boot(tuned, fixed, reps, seed, STRATUM, ("tuned", "control")), confidence)
    made = calls.call([tuned], [fixed], boot, confidence, seed)
    iqm_ci = [nan2 if min(tuned.size, fixed.size) < calls.MIN_INTERVAL else
              tuple(float(v) for v in interval(iqm(resample(x, reps, seed, STRATUM, name)), confidence))
              for x, name in ((tuned, "tuned"), (fixed, "control"))]
    mine = ok & ~control
    fell = calls.collapsed(scores[mine], [fixed], ids[mine], {k: v[mine] for k, v in hp.items()})
    return ControlReport(made.p, made.ci, float(iqm(tuned)), iqm_ci[0], float(iqm(fixed)), iqm_ci[1],
                         verdict=made.verdict, p_value=made.p_value, test=made.test, collapsed=tuple(fell),
                         call=made, **counts)
