"""The tuning/test protocol of a study: which units it runs, on which seeds, with what.

The field's protocol (ARLBench; Eimer, Lindauer and Raileanu, ICML 2023): tuning seeds and test
seeds are disjoint; whatever is chosen (a sweep's incumbent) is chosen on the tuning seeds, and
claims are made on the test seeds. A study's units, by method name:

    tuning phase (seed ids 0..seeds-1):
      <method>              every method of the study (a tuner, a population method, `fixed`)
      fixed:<name>          each poor default (`Preset.poor_defaults`): `fixed` at other values
      sweep                 N static configurations drawn from the space (seeded), each on k of the
                            tuning seeds: N x k runs in one program (`SWEEP_OPTIONS`)
    test phase (the study's `test_seeds`, when it has any):
      <method>@test         fresh runs of every tuning unit's method on the test seeds (an online
                            method is an algorithm: its test is running it again); `sweep@test` is
                            the sweep's incumbent (its best configuration on the tuning seeds)
      replay_<method>@test  the schedules an online method found on the tuning seeds, replayed
                            open-loop on the test seeds (does the schedule transfer?)

`fixed`, poor defaults and the sweep are static (their configuration never changes): nothing to
replay. Population methods replay their values only (`experiments.study.schedules`).
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
# The sweep's options (`tuner.sweep` in a study): configurations N, seeds k (tuning seeds 0..k-1,
# at most the study's seeds; default min(3, seeds)), seed (of the draw).
SWEEP_OPTIONS = {"configurations": 32, "seeds": 3, "seed": 0}
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


def is_static(base: str) -> bool:
    """`fixed`, a poor default or the sweep: a configuration that never changes (no schedule to replay)."""
    return base in ("fixed", SWEEP) or base.startswith(POOR)


def tuner_method(base: str) -> str:
    """The registry method that runs `base`: `fixed` for a poor default, else `base` itself
    (the sweep runs on the `schedule` tuner: not a registry method)."""
    return "fixed" if base.startswith(POOR) else base


def tuning_methods(study_methods: Sequence[str], poor_defaults: Mapping) -> list[str]:
    """The tuning phase's unit methods: the study's methods, then `fixed:<name>` per poor default."""
    return list(study_methods) + [POOR + name for name in poor_defaults]


def unit_methods(study_methods: Sequence[str], poor_defaults: Mapping, testing: bool) -> list[str]:
    """Every unit method of a study in run order: the tuning phase, then (testing) every tuning
    method on the test seeds, then the replays of the online ones."""
    tuning = tuning_methods(study_methods, poor_defaults)
    if not testing:
        return tuning
    return tuning + [m + TEST for m in tuning] + [REPLAY + m + TEST for m in tuning if not is_static(m)]


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
    ValueError naming `tuner.sweep.<field>`."""
    unknown = sorted(set(options) - set(SWEEP_OPTIONS))
    if unknown:
        raise ValueError(f"tuner.sweep: unknown option(s) {unknown}; allowed: {', '.join(SWEEP_OPTIONS)}")
    out = {**SWEEP_OPTIONS, "seeds": min(SWEEP_OPTIONS["seeds"], seeds), **options}
    for field, low in (("configurations", 1), ("seeds", 1), ("seed", 0)):
        v = out[field]
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < low:
            raise ValueError(f"tuner.sweep.{field} must be an integer >= {low}, got {v!r}")
    if out["seeds"] > seeds:
        raise ValueError(f"tuner.sweep.seeds ({out['seeds']}) must be at most the study's seeds ({seeds}): each "
                         f"configuration runs on tuning seeds 0..k-1")
    check_run_count("tuner.sweep.configurations x tuner.sweep.seeds", int(out["configurations"]) * int(out["seeds"]),
                    f" ({out['configurations']} x {out['seeds']}: the sweep's runs, one program)")
    return {k: int(v) for k, v in out.items()}


def sweep_configurations(space, options: Mapping) -> np.ndarray:
    """(N, h) float32 tuner values: N configurations drawn uniformly on the space's scales
    (log-uniform on a log scale, integers rounded, categoricals uniform over the options) from
    the sweep's `seed`."""
    return space.sample(int(options["configurations"]), int(options["seed"]))


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


def incumbent(final: np.ndarray, configuration: np.ndarray) -> int:
    """The sweep's incumbent: the configuration with the best mean final evaluation over its
    tuning seeds (`configuration_means`; ties: the lowest index)."""
    return int(np.argmax(configuration_means(final, configuration)))
