"""The tuning/test protocol of a study: which units it runs, on which seeds, with what.

The field's protocol (ARLBench; Eimer, Lindauer and Raileanu, ICML 2023): tuning seeds and test
seeds are disjoint; whatever is chosen (a sweep's incumbent) is chosen on the tuning seeds, and
claims are made on the test seeds. A study's units, by method name:

    tuning phase (seed ids 0..seeds-1):
      <method>              every method of the study (a tuner, a population method, `fixed`)
      fixed:<name>          each poor default (`Preset.poor_defaults`): `fixed` at other values
      <method>:<name>       each method of `Preset.start_from_poor` started from each poor default
                            (its first configuration is the poor default: `hcjax.tuners.start`),
                            what a recovery from that poor default is measured on
      sweep                 R draws (`repeats`, sweep seeds seed..seed+R-1) of N static
                            configurations from the space (with `default`: the study's default is
                            the first of each draw), each on k of the tuning seeds: R x N x k runs
                            in one program (`SWEEP_OPTIONS`); each draw has its incumbent
                            (`incumbent`: the best mean final evaluation, ties broken by a stated rule)
    test phase (the study's `test_seeds`, when it has any):
      <method>@test         fresh runs of every tuning unit's method on the test seeds (an online
                            method is an algorithm: its test is running it again); `sweep@test` is
                            each draw's incumbent on every test seed (R x the test seeds)
      replay_<method>@test  the schedules an online method found on the tuning seeds, replayed
                            open-loop on the test seeds (does the schedule transfer?)

`fixed`, poor defaults and the sweep are static (their configuration never changes): nothing to
replay; neither are the runs started from a poor default. Population methods replay their values
only (`experiments.study.schedules`).
"""
from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence

import numpy as np

from experiments.study.devices import check_run_count, check_seed_ids
from hcjax.space import option_key

SWEEP = "sweep"
POOR = "fixed:"
TEST = "@test"
REPLAY = "replay_"
TUNING_PHASE, TEST_PHASE = "tuning", "test"
# The sweep's options (`tuner.sweep` in a study): configurations N per draw, seeds k (tuning seeds
# 0..k-1, at most the study's seeds; default min(3, seeds)), seed (of the first draw), repeats R
# (draws, the r-th from seed + r: the incumbent's spread over draws), default (the study's default
# configuration is the first of every draw, so that the sweep can find nothing better than it).
SWEEP_OPTIONS = {"configurations": 32, "seeds": 3, "seed": 0, "repeats": 1, "default": False}
POOR_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,39}")
POOR_NAME_RULE = "1-40 letters, digits, '_', '.' or '-', starting with a letter or digit"


@dataclasses.dataclass(frozen=True)
class UnitKind:
    """What a unit's method name means: `base` (the study method: a tuner, population method,
    `fixed`, `fixed:<name>` or `sweep`), `phase` ("tuning" | "test"), `replay` (its base's
    tuning schedules replayed)."""

    base: str
    phase: str
    replay: bool = False

    @property
    def method(self) -> str:
        """The unit's method name."""
        if self.phase == TUNING_PHASE:
            return self.base
        return (REPLAY if self.replay else "") + self.base + TEST


def kind(method: str) -> UnitKind:
    """The UnitKind of a unit's method name (see the module docstring)."""
    if not method.endswith(TEST):
        return UnitKind(method, TUNING_PHASE)
    base = method[: -len(TEST)]
    if base.startswith(REPLAY):
        return UnitKind(base[len(REPLAY):], TEST_PHASE, replay=True)
    return UnitKind(base, TEST_PHASE)


def started_from(base: str) -> tuple[str, str] | None:
    """(method, poor default name) of a unit base `<method>:<name>` (`fixed:<name>`: the poor
    default itself), None for any other base."""
    method, sep, name = base.partition(":")
    return (method, name) if sep else None


def is_static(base: str) -> bool:
    """`fixed`, a poor default or the sweep: a configuration that never changes (no schedule to replay)."""
    return base in ("fixed", SWEEP) or base.startswith(POOR)


def tuner_method(base: str) -> str:
    """The registry method that runs `base`: `fixed` for a poor default, `<method>` for a method
    started from one, else `base` itself (the sweep runs on the `schedule` tuner: not a registry
    method)."""
    start = started_from(base)
    return start[0] if start else base


# Methods that cannot start from a poor default as a unit of their own, and why.
NOT_FROM_POOR = {"fixed": "it is the poor default itself: the unit fixed:<name>",
                 "random_start": "it would hold the poor default for the whole run: the unit fixed:<name> runs that",
                 SWEEP: "its configurations are drawn from the space"}


def tuning_methods(study_methods: Sequence[str], poor_defaults: Mapping, from_poor: Sequence[str] = ()) -> list[str]:
    """The tuning phase's unit methods: the study's methods, then per poor default `fixed:<name>`
    and `<method>:<name>` for each method of `from_poor`."""
    return list(study_methods) + [m + ":" + name for name in poor_defaults for m in ("fixed", *from_poor)]


def unit_methods(study_methods: Sequence[str], poor_defaults: Mapping, testing: bool,
                 from_poor: Sequence[str] = ()) -> list[str]:
    """Every unit method of a study in run order: the tuning phase, then (testing) every tuning
    method on the test seeds, then the replays of the online ones (not of those started from a
    poor default: the recovery is their question)."""
    tuning = tuning_methods(study_methods, poor_defaults, from_poor)
    if not testing:
        return tuning
    return tuning + [m + TEST for m in tuning] + [REPLAY + m + TEST for m in tuning
                                                   if not is_static(m) and not started_from(m)]


def test_seed_ids(test_seeds, seeds: int) -> tuple[int, ...]:
    """The test seed ids of a study with `seeds` tuning seeds (ids 0..seeds-1): `test_seeds` is a
    count n (0: none; ids from the first multiple of 100 at or above max(100, seeds), as ARLBench
    tests on seeds 100 and up) or a list of ids (disjoint from the tuning ids: an overlap is refused
    naming the ids). ValueError naming the field otherwise."""
    if isinstance(test_seeds, (int, np.integer)) and not isinstance(test_seeds, (bool, np.bool_)):
        n = int(test_seeds)
        if n < 0:
            raise ValueError(f"test_seeds must be a count >= 0 or a list of seed ids, got {test_seeds!r}")
        check_run_count("test_seeds", n)  # before any id is made
        start = 100 * max(1, math.ceil(seeds / 100))
        return tuple(int(v) for v in check_seed_ids("test_seeds", list(range(start, start + n)))) if n else ()
    if not isinstance(test_seeds, (list, tuple)):
        raise ValueError(f"test_seeds must be a count >= 0 or a list of seed ids, got {test_seeds!r}")
    check_run_count("test_seeds", len(test_seeds), " (a list of seed ids)")
    ids = tuple(int(v) for v in check_seed_ids("test_seeds", list(test_seeds)))
    overlap = sorted(set(ids) & set(range(seeds)))
    if overlap:
        raise ValueError(f"test_seeds {overlap} are tuning seeds too (the study tunes on seeds 0..{seeds - 1}): "
                         f"test seeds must be disjoint from them; give ids >= {seeds}")
    return ids


def sweep_options(options: Mapping, seeds: int) -> dict:
    """The sweep's options filled in (SWEEP_OPTIONS; k = min(3, seeds) unless given), checked:
    ValueError naming `tuner.sweep.<field>`. The options `repeats` and `default` appear only
    when they differ from SWEEP_OPTIONS' (a study of one draw without the default keeps its keys)."""
    unknown = sorted(set(options) - set(SWEEP_OPTIONS))
    if unknown:
        raise ValueError(f"tuner.sweep: unknown option(s) {unknown}; allowed: {', '.join(SWEEP_OPTIONS)}")
    out = {**SWEEP_OPTIONS, "seeds": min(SWEEP_OPTIONS["seeds"], seeds), **options}
    for field, low in (("configurations", 1), ("seeds", 1), ("seed", 0), ("repeats", 1)):
        v = out[field]
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < low:
            raise ValueError(f"tuner.sweep.{field} must be an integer >= {low}, got {v!r}")
    if not isinstance(out["default"], (bool, np.bool_)):
        raise ValueError(f"tuner.sweep.default must be true or false, got {out['default']!r}")
    if out["seeds"] > seeds:
        raise ValueError(f"tuner.sweep.seeds ({out['seeds']}) must be at most the study's seeds ({seeds}): each "
                         f"configuration runs on tuning seeds 0..k-1")
    R, N, k = int(out["repeats"]), int(out["configurations"]), int(out["seeds"])
    check_run_count("tuner.sweep.repeats x configurations x seeds", R * N * k,
                    f" ({R} x {N} x {k}: the sweep's runs, one program)")
    filled = {k: int(v) for k, v in out.items() if k != "default"}
    filled["default"] = bool(out["default"])
    return {k: v for k, v in filled.items() if k not in ("repeats", "default") or v != SWEEP_OPTIONS[k]}


def sweep_shape(options: Mapping) -> tuple[int, int, int]:
    """(R draws, N configurations per draw, k seeds per configuration) of filled sweep options."""
    return int(options.get("repeats", 1)), int(options["configurations"]), int(options["seeds"])


def sweep_configurations(space, options: Mapping, default=None) -> np.ndarray:
    """(R x N, h) float32 tuner values: draw r's N configurations (rows r N .. r N + N - 1) drawn
    uniformly on the space's scales (log-uniform on a log scale, integers rounded, categoricals
    uniform over the options) from sweep seed `seed` + r; with the option `default`, the first of
    every draw is `default` ((h,) the study's default configuration) and the other N - 1 are
    drawn."""
    R, N, _ = sweep_shape(options)
    draws = []
    for r in range(R):
        if options.get("default", False):
            draws += [np.asarray(default, np.float32)[None], space.sample(N - 1, int(options["seed"]) + r)]
        else:
            draws.append(space.sample(N, int(options["seed"]) + r))
    return np.concatenate(draws).astype(np.float32)


def poor_default_values(space, name: str, values: Mapping) -> np.ndarray:
    """(h,) float32 tuner values of poor default `name`: the space's defaults with `values`
    (hyperparameter name -> natural value; a categorical's option itself) in their place;
    ValueError naming `poor_defaults.<name>` for an unknown name or a value outside the space."""
    where = f"poor_defaults.{name}"
    if not isinstance(name, str) or not POOR_NAME.fullmatch(name):
        raise ValueError(f"poor_defaults: names must be {POOR_NAME_RULE}; got {name!r}")
    if not isinstance(values, Mapping) or not values:
        raise ValueError(f"{where} must be a non-empty table of hyperparameter = value, got {values!r}")
    out = np.asarray(space.default, np.float32).copy()
    for hp_name, value in values.items():
        if hp_name not in space.names:
            raise ValueError(f"{where}: {hp_name!r} is not a tuned hyperparameter; the space has {list(space.names)}")
        i = space.index(hp_name)
        p = space.hyperparameters[i]
        if p.options is not None:
            key = option_key(value)
            matches = [j for j, option in enumerate(p.options) if key is not None and option_key(option) == key]
            if not matches:
                raise ValueError(f"{where}.{hp_name} must be one of its options {list(p.options)}, got {value!r}")
            out[i] = matches[0]
            continue
        ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
        if not (ok and math.isfinite(value) and p.low <= value <= p.high):
            raise ValueError(f"{where}.{hp_name} must be a number in [{p.low}, {p.high}] (the space's bounds), "
                             f"got {value!r}")
        out[i] = round(value) if p.integer else value
    return out


def check(study_methods: Sequence[str], poor_defaults: Mapping, test_ids: Sequence[int],
          paths: Mapping[str, str]) -> None:
    """The protocol's own checks of a study (ValueError): a poor default needs `fixed` beside it
    (the verdict's good default), so does a sweep with test seeds (its incumbent is judged
    against the default), and the sweep and the replays run on JAX environments only
    (`paths`: env label -> its backend path)."""
    if poor_defaults and "fixed" not in study_methods:
        raise ValueError("poor_defaults are compared with the study's default: add 'fixed' to methods")
    if test_ids and SWEEP in study_methods and "fixed" not in study_methods:
        raise ValueError("methods: the sweep's incumbent is compared with the study's default on the test seeds, "
                         "and the verdict has none without 'fixed': add 'fixed' to methods")
    host = sorted(label for label, path in paths.items() if path == "gymnasium")
    if host and SWEEP in study_methods:
        raise ValueError(f"method 'sweep' runs its configurations as one JAX program; gymnasium environments {host} "
                         f"run on the host: leave them out or drop 'sweep'")
    replayed = [m for m in tuning_methods(study_methods, poor_defaults) if not is_static(m)]
    if host and test_ids and replayed:
        raise ValueError(f"test_seeds replay the schedules of {replayed} on JAX environments only; gymnasium "
                         f"environments {host} run on the host: leave them out of a study with test_seeds")


def configuration_means(final: np.ndarray, configuration: np.ndarray) -> np.ndarray:
    """(N,) mean final evaluation of each configuration over its rows (final, configuration:
    (N x k,) a sweep's final evaluations and each row's configuration); NaN counts as -inf
    (a configuration with a NaN row cannot be the best)."""
    scores = np.where(np.isfinite(final), np.asarray(final, np.float64), -np.inf)
    n = int(np.max(configuration)) + 1
    return np.bincount(configuration, weights=scores, minlength=n) / np.bincount(configuration, minlength=n)


TIE_RTOL = 1e-6  # configuration means within this relative distance of the best are tied


def incumbent(final: np.ndarray, configuration: np.ndarray, curve: np.ndarray | None = None,
              distance: np.ndarray | None = None) -> int:
    """The sweep's incumbent among the configurations of `configuration` (rows (n,)): the best
    mean final evaluation over its tuning seeds (`configuration_means`). Ties (means within
    TIE_RTOL of the best, e.g. 11 CartPole configurations at 500), in this order: the best mean
    over the whole run (curve (n, E): each row's evaluations, NaN as -inf: the one that got
    there sooner), then the nearest to the default (distance (N,): e.g. in the space's [0, 1]
    units: the smallest change), then the lowest index. Without `curve` or `distance` that step
    is skipped."""
    means = configuration_means(final, configuration)
    best = np.max(means)
    tied = np.flatnonzero(means >= best - TIE_RTOL * max(abs(best), 1e-12)) if np.isfinite(best) else \
        np.flatnonzero(means == best)
    if tied.size > 1 and curve is not None:
        run = np.where(np.isfinite(curve), np.asarray(curve, np.float64), -np.inf).mean(axis=1)
        auc = configuration_means(run, configuration)[tied]
        tied = tied[auc == np.max(auc)]
    if tied.size > 1 and distance is not None:
        near = np.asarray(distance, np.float64)[tied]
        tied = tied[near == np.min(near)]
    return int(tied[0])


def draw_incumbents(final: np.ndarray, configuration: np.ndarray, options: Mapping, curve: np.ndarray | None = None,
                    distance: np.ndarray | None = None) -> np.ndarray:
    """(R,) int: each draw's incumbent (`incumbent` within its configurations r N .. r N + N - 1),
    as an index into the sweep's R x N configurations. final, configuration: (R x N x k,) rows;
    curve: (rows, E) or None; distance: (R x N,) or None."""
    R, N, _ = sweep_shape(options)
    out = []
    for r in range(R):
        rows = (configuration >= r * N) & (configuration < (r + 1) * N)
        out.append(r * N + incumbent(final[rows], configuration[rows] - r * N,
                                     None if curve is None else curve[rows],
                                     None if distance is None else distance[r * N:(r + 1) * N]))
    return np.asarray(out, np.int64)
