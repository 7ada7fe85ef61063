"""A study's definition and a unit's identity: `Preset` (what a study runs), `EnvChoice` (how
one environment runs), `Plan` (a validated study: `experiments.study.presets.resolve` makes
it), and what changes a unit's numbers.

A unit is one (environment, method) pair of a plan. `unit_config` is everything that
changes its numbers; its hash is the unit's `config_key`, and the part every unit of a
study shares hashes into the `study_key` (`experiments.study.keys`).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from experiments.study import methods, protocol
from experiments.study.keys import config_key, study_part
from hcjax import Hyperparameter, Space


@dataclasses.dataclass(frozen=True)
class EnvChoice:
    """How one study environment is run: `label` (tables, figures), `make` (the name given
    to agents.envs.make, or your own environment's name and fingerprint: `own_envs`),
    `path` (its backend: 'brax' | 'gymnax' | 'gymnasium', or 'custom'), `why`
    (the reason), `ppo` (PPOConfig overrides for this environment only, on top of the
    study's, e.g. objective = "return_change" where the per-step reward is constant),
    `schedule` (this environment's own iterations, eval_every and tune_every, on top of the
    study's: `Preset.env_schedule`)."""

    label: str
    make: str
    path: str
    why: str
    ppo: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    schedule: Mapping[str, int] = dataclasses.field(default_factory=dict)


SCHEDULE_FIELDS = ("iterations", "eval_every", "tune_every")  # what Preset.env_schedule may set per environment


class Timing(NamedTuple):
    """An environment's schedule in a study: iterations per run, iterations between
    evaluations (and one after the last), iterations between asks."""

    iterations: int
    eval_every: int
    tune_every: int


def env_config(env: EnvChoice) -> dict:
    """An EnvChoice as a dict (the manifest, a unit's configuration); `schedule` only when it
    sets something, so that a study without per-environment schedules keeps its keys."""
    d = dataclasses.asdict(env)
    if not d["schedule"]:
        del d["schedule"]
    return d


@dataclasses.dataclass(frozen=True)
class Preset:
    """A study definition.

    envs: study environment names (keys of `paths` or direct agents.envs names);
    methods: tuner names; seeds: number of seeds (the same seeds 0..seeds-1 for every
    method); iterations: PPO iterations per run; eval_every: iterations between
    evaluations (and one after the last); tune_every: iterations between `ask`s (tell
    every iteration); space: the tuned hyperparameters, one dict of
    `hcjax.Hyperparameter` fields each (names: tunable PPOConfig fields; default the
    paper's four, `paper_space()`); ppo: PPOConfig field overrides; tuner: per-method
    option overrides; paths: study env -> (make name, why); env_ppo: study env -> PPOConfig
    overrides for that environment only; reductions: every departure from the paper's
    settings, in words; fast_compile: compile the training segments without XLA backend
    optimisation (for tiny runs); fuse_methods: run all methods of a JAX environment in
    one program compiled once (a stacked tuner, the method chosen per agent; each
    agent's numbers are those of its method run alone); env_factories: your own
    environments as importable factories "[LABEL=]package.module:function" (imported and
    run: `own_envs`), beside `envs`. env_schedule: study env -> {iterations, eval_every,
    tune_every} for that environment only (tasks of other budgets in one study: ARLBench's
    CartPole runs 390 iterations where its Pendulum runs 100). test_seeds: a count or a list of seed ids, disjoint from
    the tuning seeds, on which every method is run again (`experiments.study.protocol`; 0: no
    test phase); poor_defaults: name -> {hyperparameter: value}, each a `fixed:<name>` unit
    at the study's defaults with those values (does tuning rescue a poor default?);
    start_from_poor: methods of the study that also run started from every poor default, as
    units `<method>:<name>` (their first configuration is the poor default: what a recovery
    from it is measured on). The method `sweep` runs R draws of N static configurations on k
    tuning seeds (options in `tuner.sweep`).
    """

    name: str
    envs: tuple[str, ...]
    methods: tuple[str, ...]
    seeds: int
    iterations: int
    eval_every: int = 10
    tune_every: int = 5
    space: tuple[Mapping[str, Any], ...] = ()
    ppo: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    tuner: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    paths: Mapping[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    env_ppo: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    reductions: tuple[str, ...] = ()
    description: str = ""
    fast_compile: bool = False
    fuse_methods: bool = False
    env_factories: tuple[str, ...] = ()
    test_seeds: int | tuple[int, ...] = 0
    poor_defaults: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    env_schedule: Mapping[str, Mapping[str, int]] = dataclasses.field(default_factory=dict)
    start_from_poor: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        """JSON-able form (for the manifest)."""
        d = dataclasses.asdict(self)
        d["test_seeds"] = list(self.test_seeds) if isinstance(self.test_seeds, tuple) else self.test_seeds
        d["poor_defaults"] = {k: dict(v) for k, v in self.poor_defaults.items()}
        d["space"] = [dict(h) for h in self.space]
        d["ppo"], d["tuner"] = dict(self.ppo), {k: dict(v) for k, v in self.tuner.items()}
        d["paths"] = {k: list(v) for k, v in self.paths.items()}
        d["env_ppo"] = {k: dict(v) for k, v in self.env_ppo.items()}
        d["env_schedule"] = {k: dict(v) for k, v in self.env_schedule.items()}
        for field in ("env_schedule", "start_from_poor"):  # written only when set: older manifests stay equal
            if not d[field]:
                del d[field]
        return d


@dataclasses.dataclass(frozen=True)
class Plan:
    """A validated study: the preset after overrides, and how each environment runs."""

    preset: Preset
    envs: tuple[EnvChoice, ...]

    @property
    def space(self):
        """The tuned hyperparameters as an hcjax.Space."""
        return Space(make_hyperparameter(entry) for entry in self.preset.space)

    @property
    def test_ids(self) -> tuple[int, ...]:
        """The test seed ids (`protocol.test_seed_ids`; () without a test phase)."""
        return protocol.test_seed_ids(self.preset.test_seeds, self.preset.seeds)

    @property
    def methods(self) -> list[str]:
        """Every unit's method name in run order (`protocol.unit_methods`): the study's methods
        and poor defaults, then, with test seeds, their test units and replays."""
        p = self.preset
        return protocol.unit_methods(p.methods, p.poor_defaults, bool(self.test_ids), p.start_from_poor)

    @property
    def units(self) -> list[tuple[EnvChoice, str]]:
        """(env, method) pairs in run order: environment-major."""
        return [(e, m) for e in self.envs for m in self.methods]

    def timing(self, env: EnvChoice | None = None) -> Timing:
        """The schedule of `env` (the study's, with the environment's own `schedule` on top;
        None: the study's)."""
        p, own = self.preset, (env.schedule if env is not None else {})
        return Timing(*(int(own.get(f, getattr(p, f))) for f in SCHEDULE_FIELDS))

    def to_dict(self) -> dict:
        d = self.preset.to_dict()
        d["env_choices"] = [env_config(e) for e in self.envs]
        return d


BOUND_KEYS = ("low", "high", "scale", "integer")  # what a categorical entry (options) must not give


def make_hyperparameter(entry: Mapping) -> Hyperparameter:
    """A space entry (a dict of Hyperparameter fields, or name, options and an optional
    default option for a categorical) -> the Hyperparameter; ValueError for a categorical
    entry that also gives bounds."""
    if "options" not in entry:
        return Hyperparameter(**entry)
    mixed = [k for k in BOUND_KEYS if k in entry]
    if mixed:
        raise ValueError(f"{entry.get('name')!r} gives options, so it must not give {mixed} (a categorical has "
                         f"options and an optional default; the others low, high, scale, integer)")
    extra = sorted(set(entry) - {"name", "options", "default"})
    if extra:
        raise TypeError(f"unexpected key(s) {extra}")
    return Hyperparameter.choice(entry.get("name"), entry["options"], entry.get("default"))



def tuner_options(plan: Plan, method: str, env: EnvChoice | None = None) -> dict[str, Any]:
    """Options of a unit's method for this study on `env` (a test unit or a replay: its base
    method's): those the methods table derives from the run (hyperband's budget is the run's
    number of decisions on `env`, `Plan.timing`, so its brackets complete), then the preset's
    overrides; a poor default's are `fixed`'s with its `values` (tuner values), a method started
    from one has its `start` (`hcjax.make_tuner`); the sweep's are `protocol.sweep_options`."""
    p = plan.preset
    base = protocol.kind(method).base
    if base == protocol.SWEEP:
        return protocol.sweep_options(p.tuner.get(protocol.SWEEP, {}), p.seeds)
    name = protocol.tuner_method(base)
    timing = plan.timing(env)
    opts: dict[str, Any] = methods.options(name, decisions=max(1, timing.iterations // timing.tune_every))
    opts.update(p.tuner.get(name, {}))
    if base != name:  # a poor default, or a method started from one
        opts["values" if name == "fixed" else "start"] = poor_values(plan, base).tolist()
    return opts


def default_values(plan: Plan) -> np.ndarray:
    """(h,) tuner values of the study's default configuration: `fixed`'s values if the study
    sets them, else the space's defaults."""
    given = plan.preset.tuner.get("fixed", {}).get("values")
    return np.asarray(plan.space.default if given is None else given, np.float32)


def poor_values(plan: Plan, base: str) -> np.ndarray:
    """(h,) tuner values of the poor default of `fixed:<name>` (or `<method>:<name>`): the study's
    default configuration (`default_values`) with the poor default's values."""
    space, given = plan.space, plan.preset.tuner.get("fixed", {}).get("values")
    name = protocol.started_from(base)[1]
    values = protocol.poor_default_values(space, name, plan.preset.poor_defaults[name])
    if given is not None:
        changed = [space.index(n) for n in plan.preset.poor_defaults[name]]
        values = np.where(np.isin(np.arange(space.h), changed), values, np.asarray(given, np.float32))
    return values


def unit_seeds(plan: Plan, method: str) -> np.ndarray:
    """(S,) int64 seed ids of a unit's rows: the tuning seeds 0..seeds-1; the sweep's R x N x k
    rows (row r: configuration r // k on tuning seed r % k); a test unit's the test seeds, the
    sweep's R incumbents' R x the test seeds (row j: incumbent j // n on test seed j % n)."""
    k = protocol.kind(method)
    if k.base == protocol.SWEEP:
        R, N, seeds = protocol.sweep_shape(tuner_options(plan, method))
        if k.phase == protocol.TEST_PHASE:
            return np.tile(np.asarray(plan.test_ids, np.int64), R)
        return np.tile(np.arange(seeds, dtype=np.int64), R * N)
    if k.phase == protocol.TEST_PHASE:
        return np.asarray(plan.test_ids, np.int64)
    return np.arange(plan.preset.seeds, dtype=np.int64)


def ppo_options(plan: Plan, env: EnvChoice | None = None) -> dict[str, Any]:
    """PPOConfig fields of this study (on `env`: with its own overrides and schedule)."""
    timing = plan.timing(env)
    return dict(plan.preset.ppo, **(env.ppo if env is not None else {}), num_iterations=timing.iterations,
                tune_every=timing.tune_every)


def unit_config(plan: Plan, env: EnvChoice, method: str) -> dict[str, Any]:
    """Everything that changes a unit's numbers (its config_key is the hash of this). A study
    with test seeds names them in every unit (the study's part); a test unit's phase and seeds,
    and the config key of the unit whose results it reads (a replay's source, the sweep for its
    incumbent), are under `unit` (the unit's own part). An environment with its own schedule
    (`Preset.env_schedule`) has it in full under `schedule` (`unit_timing` reads it)."""
    p = plan.preset
    config = dict(env=env_config(env), method=method, seeds=p.seeds, iterations=p.iterations,
                  eval_every=p.eval_every, tune_every=p.tune_every, space=[dict(h) for h in p.space],
                  ppo=ppo_options(plan), tuner=tuner_options(plan, method, env))
    if env.schedule:
        config["schedule"] = plan.timing(env)._asdict()
    if plan.test_ids:
        config["test_seeds"] = list(plan.test_ids)
    k = protocol.kind(method)
    if k.phase == protocol.TEST_PHASE:
        config["unit"] = dict(phase=k.phase, seeds=list(plan.test_ids))
        if k.replay or k.base == protocol.SWEEP:
            config["unit"]["source"] = config_key(unit_config(plan, env, k.base))
    return config


def unit_timing(config: Mapping[str, Any]) -> Timing:
    """The schedule a unit ran (from its configuration, `unit_config`: its environment's own
    `schedule` where it has one, else the study's)."""
    own = config.get("schedule") or {}
    return Timing(*(int(own.get(f, config[f])) for f in SCHEDULE_FIELDS))


def study_config(plan: Plan) -> dict[str, Any]:
    """The part of the unit configurations every unit of `plan` shares (see study_part)."""
    env, method = plan.units[0]
    return study_part(unit_config(plan, env, method))


def unit_keys(plan: Plan) -> dict[tuple[str, str], str]:
    """(env label, method) -> config key of every unit of `plan`."""
    return {(e.label, m): config_key(unit_config(plan, e, m)) for e, m in plan.units}


def unit_groups(plan: Plan) -> list[tuple[EnvChoice, list[str]]]:
    """(env, methods) run as one program each, in run order: per environment its tuning phase,
    then its test phase (so that everything chosen on the tuning seeds, and the headroom, is
    known before any test seed runs). Every unit alone, or, with the study's fuse_methods, the
    units of per-agent tuners of a JAX environment and phase together by family (`family`: one
    program for the cheap tuners, one per GP tuner with its runs from poor defaults; under vmap
    every agent of a fused program computes every method's ask, and a GP's ask costs a hundred
    of the others'); population methods and the sweep always run alone. The units that read
    other units' results (the replays and the sweep's incumbents, `protocol`) come last, as one
    program of replayed schedules."""
    groups = []
    for env in plan.envs:
        for phase in (protocol.TUNING_PHASE, protocol.TEST_PHASE):
            names = [m for m in plan.methods if not reads_results(m) and protocol.kind(m).phase == phase]
            agentwise = [m for m in names if not methods.is_population(m) and protocol.kind(m).base != protocol.SWEEP]
            fused = plan.preset.fuse_methods and env.path != "gymnasium"
            families = {}
            for m in agentwise if fused else []:
                families.setdefault(family(m), []).append(m)
            groups += [(env, members) for members in families.values()]
            groups += [(env, [m]) for m in names if not any(m in members for members in families.values())]
        replayed = [m for m in plan.methods if reads_results(m)]
        if replayed:
            groups.append((env, replayed))
    return groups


def family(method: str) -> str:
    """The fused program of a unit's method (`unit_groups`): its GP tuner's name for a GP method
    (and its runs from poor defaults), "" for every other per-agent tuner."""
    name = protocol.tuner_method(protocol.kind(method).base)
    return name if name in methods.GP_METHODS else ""


def reads_results(method: str) -> bool:
    """A unit run from other units' results: a replay, or the sweep's incumbent on the test seeds."""
    k = protocol.kind(method)
    return k.replay or (k.base == protocol.SWEEP and k.phase == protocol.TEST_PHASE)


def source_method(method: str) -> str:
    """The unit whose results a `reads_results` unit reads: its base method's tuning unit."""
    return protocol.kind(method).base


def merge_configs(old: dict, new: dict) -> dict:
    """Manifest config of a directory that gets more environments or methods of the same
    study: the new config with the union of both env_choices and methods (old first)."""
    merged = dict(new)
    envs = {e["label"]: e for e in old.get("env_choices", [])}
    envs.update({e["label"]: e for e in new.get("env_choices", [])})
    merged["env_choices"] = list(envs.values())
    merged["envs"] = [e["label"] for e in merged["env_choices"]]
    merged["methods"] = list(dict.fromkeys(list(old.get("methods", [])) + list(new.get("methods", []))))
    return merged


def segments(iterations: int, eval_every: int, ready: int | None = None) -> list[int]:
    """Lengths of the host-side segments: they end at every multiple of eval_every (an
    evaluation), of `ready` (a population step) when given, and at `iterations`."""
    ends = set(range(eval_every, iterations, eval_every)) | {iterations}
    if ready:
        ends |= set(range(ready, iterations, ready))
    ends = sorted(ends)
    return [b - a for a, b in zip([0] + ends[:-1], ends)]
