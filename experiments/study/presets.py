"""Presets: the shipped ones (`PRESETS`, in `experiments.study.preset_table`, re-exported here) and
the validation of a study, `resolve`.

`resolve(preset, envs=..., methods=..., seeds=..., iterations=..., space=...)` validates
everything (names, counts, the search space) and returns a `Plan` before anything is
compiled (it imports the environment registries it needs). A preset can also come from
a study file (`experiments.study.studyfile`).

Environments. The paper's names (HalfCheetah-v4, BipedalWalker-v3, Pusher-v4,
InvertedDoublePendulum-v4, Reacher-v4) are mapped per preset (`paths`) to either a Brax
re-implementation (jitted, vmapped with the agents, fast) or the exact gymnasium task
stepped on the host (the paper's environment, slower). Any other name is looked up by
`agents.envs.resolve` in the registries of gymnax, Brax and gymnasium (bare, or with a
`gymnax/`, `brax/` or `gymnasium/` prefix); its backend is recorded in the EnvChoice.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from agents import envs as agent_envs
from experiments.study import own_envs, protocol
from experiments.study.devices import check_run_count, check_seed_count
from experiments.study.methods import ALL_METHODS, METHODS, PAPER_METHODS, POPULATION_METHODS  # noqa: F401 - re-exported
from experiments.study.plan import (
    SCHEDULE_FIELDS,
    EnvChoice,
    Plan,
    Preset,
    make_hyperparameter,
    poor_values,
    tuner_options,
)
from experiments.study.preset_table import (  # noqa: F401 - re-exported
    CPU_PATHS,
    GPU_PATHS,
    LEARNING_ENV_PPO,
    LEARNING_PPO,
    LEARNING_SPACE,
    LEARNING_TUNER,
    PAPER_ENVS,
    PAPER_PATHS,
    PRESETS,
    SMALL_PPO,
    paper_space,
)
from experiments.study.store import unit_name
from hcjax import Space

# A study's name names its default directory (runs/<name>): one plain path component.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
NAME_RULE = "1-100 letters, digits, '.', '_' or '-', starting with a letter or digit (it names runs/<name>)"


def _backend_of(make: str, installed: bool = True) -> str:
    """The library behind an environment name (ValueError with suggestions if unknown; with
    installed=False, also that of a library not installed)."""
    return agent_envs.resolve(make, installed).backend


def _names(field: str, given: Sequence[str], allowed: Sequence[str] | None = None) -> tuple[str, ...]:
    """Validate a non-empty list of names without duplicates (against `allowed` if given)."""
    if isinstance(given, str):
        given = [given]
    given = [g.strip() for g in given]
    if not given:
        raise ValueError(f"{field} must not be empty" + (f"; allowed: {', '.join(allowed)}" if allowed else ""))
    bad = [g for g in given if allowed is not None and g not in allowed]
    if bad:
        raise ValueError(f"unknown {field} {bad}; allowed: {', '.join(allowed)}")
    dup = sorted({g for g in given if given.count(g) > 1})
    if dup:
        raise ValueError(f"{field}: duplicates {dup}")
    return tuple(given)


def _positive(field: str, value) -> int:
    if value is None:
        raise ValueError(f"{field} is not set: give `{field} = N` in the study file or --{field} N (an integer >= 1)")
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{field} must be a positive integer (>= 1), got {value!r}")
    return value


def choose_env(name: str, preset: Preset, installed: bool = True) -> EnvChoice:
    """The EnvChoice of a study environment name under `preset`: the preset's `paths`
    first, then any name `agents.envs.resolve` knows (ValueError with the closest names);
    with the preset's `env_ppo` overrides and `env_schedule` for it. installed=False: an
    environment of a library not installed is chosen too (to describe a preset, not to run it)."""
    own = dict(ppo=dict(preset.env_ppo.get(name, {})), schedule=dict(preset.env_schedule.get(name, {})))
    if name in preset.paths:
        make, why = preset.paths[name]
        return EnvChoice(label=name, make=make, path=_backend_of(make, installed), why=why, **own)
    if name == "Pusher-v4":  # registered by gymnasium, but needs mujoco<3
        return EnvChoice(label=name, make="Pusher-v5", path="gymnasium",
                         why="Pusher-v4 needs mujoco<3; Pusher-v5 is the same task", **own)
    return EnvChoice(label=name, make=name, path=_backend_of(name, installed), why="given directly", **own)


def check_env_schedule(env_schedule) -> dict[str, dict[str, int]]:
    """Validated `env_schedule`: a table of environment label -> {iterations, eval_every,
    tune_every} (any of them), each a positive integer; ValueError naming the entry."""
    if not isinstance(env_schedule, Mapping) or not all(isinstance(v, Mapping) for v in env_schedule.values()):
        raise ValueError(f"env_schedule must be a table of environment = {{{', '.join(SCHEDULE_FIELDS)}}}, got "
                         f"{env_schedule!r}")
    out = {}
    for label, entry in env_schedule.items():
        unknown = sorted(set(entry) - set(SCHEDULE_FIELDS))
        if unknown:
            raise ValueError(f"env_schedule.{label}: unknown field(s) {unknown}; allowed: {', '.join(SCHEDULE_FIELDS)}")
        out[label] = {f: _positive(f"env_schedule.{label}.{f}", v) for f, v in entry.items()}
    return out


def check_space(entries) -> tuple[dict, ...]:
    """Validate study-file space entries (dicts of Hyperparameter fields) by building the
    hcjax.Space; ValueError naming the entry. Empty: the paper's four."""
    entries = tuple(dict(e) for e in entries) or paper_space()
    params = []
    for i, entry in enumerate(entries):
        try:
            params.append(make_hyperparameter(entry))
        except TypeError as e:
            raise ValueError(f"space[{i}] {entry}: {e}") from None
        except ValueError as e:
            raise ValueError(f"space[{i}]: {e}") from None
    Space(params)
    return entries


def resolve(preset: str | Preset = "smoke", *, envs: Sequence[str] | None = None,
            methods: Sequence[str] | None = None, seeds: int | None = None,
            iterations: int | None = None, space: Sequence[Mapping[str, Any]] | None = None,
            env_factories: Sequence[str] | None = None, own: Sequence[own_envs.Own] = ()) -> Plan:
    """Validate a preset (a name or a Preset, e.g. from a study file) and its overrides;
    ValueError naming the field and the allowed values on any bad input. Compiles
    nothing. The preset's env_factories are imported and called (your code runs);
    `env_factories` given without `envs` replaces the preset's environments (with `envs`: both);
    `own`: environments given as objects (`own_envs.from_object`), run after the others."""
    if isinstance(preset, str):
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; allowed: {', '.join(PRESETS)}")
        preset = PRESETS[preset]
    elif not isinstance(preset, Preset):
        raise ValueError(f"preset must be one of {', '.join(PRESETS)} or a Preset, got {type(preset).__name__}")
    changes = {}
    if envs is not None:
        changes["envs"] = _names("env", envs) if envs else ()
    if env_factories is not None:
        changes["env_factories"] = tuple(env_factories)
        if envs is None:  # the factories replace the preset's environments
            changes["envs"] = ()
    if methods is not None:
        changes["methods"] = _names("method", methods, ALL_METHODS)
    if seeds is not None:
        changes["seeds"] = _positive("seeds", seeds)
    if iterations is not None:
        changes["iterations"] = _positive("iterations", iterations)
    if space is not None:
        changes["space"] = tuple(space)
    p = dataclasses.replace(preset, **changes)
    if not isinstance(p.name, str) or not NAME.fullmatch(p.name):
        raise ValueError(f"name must be {NAME_RULE}; got {p.name!r}")
    if not (p.envs or p.env_factories or own):
        raise ValueError("env must not be empty: give registry names in envs, or your own environments "
                         "(env_factories, or objects in experiments.Study(envs=...))")
    if p.envs:
        _names("env", p.envs)
    _names("method", p.methods, ALL_METHODS)
    check_run_count("seeds", check_seed_count("seeds", _positive("seeds", p.seeds)))
    _positive("iterations", p.iterations)
    _positive("eval_every", p.eval_every)
    _positive("tune_every", p.tune_every)
    check_tables("tuner", p.tuner)
    p = dataclasses.replace(p, space=check_space(p.space), env_schedule=check_env_schedule(p.env_schedule),
                            start_from_poor=_method_list("start_from_poor", p.start_from_poor))
    mine = list(own) + [own_envs.from_factory(ref) for ref in p.env_factories]
    choices = tuple(choose_env(e, p) for e in p.envs) + tuple(
        EnvChoice(label=o.label, make=o.make, path=o.path, why=o.why, ppo=dict(p.env_ppo.get(o.label, {})),
                  schedule=dict(p.env_schedule.get(o.label, {})))
        for o in mine)
    labels = [c.label for c in choices]
    dropped = set(preset.envs) - set(labels)  # the preset's own environments that envs= left out
    for field in ("env_ppo", "env_schedule"):
        p = dataclasses.replace(p, **{field: {k: v for k, v in getattr(p, field).items() if k not in dropped}})
        unknown = sorted(set(getattr(p, field)) - set(labels))
        if unknown:
            raise ValueError(f"{field} names environment(s) {unknown} that the study does not run; "
                             f"envs: {', '.join(labels)}")
    check_unit_names(labels)
    if len(set(labels)) != len(labels):
        raise ValueError(f"env: duplicates in {labels}")
    return check_protocol(Plan(preset=p, envs=choices))


def check_tables(field: str, value) -> None:
    """ValueError naming `field`.<name> unless `value` is a table of tables (a study's `tuner`:
    method -> its options): a string given for one would be read as its characters."""
    if not isinstance(value, Mapping):
        raise ValueError(f"{field} must be a table of name = {{option = value}}, got {value!r}")
    for name, options in value.items():
        if not isinstance(options, Mapping):
            raise ValueError(f"{field}.{name} must be a table of options ({field}={{{name!r}: {{...}}}}, or "
                             f"[{field}.{name}] in a study file), got {options!r}")


def check_protocol(plan: Plan) -> Plan:
    """The plan, after the checks of its tuning/test protocol (`protocol`; ValueError): test
    seeds, poor defaults, the sweep's options, what runs where, and one file name per unit."""
    p = plan.preset
    if not isinstance(p.poor_defaults, Mapping) or not all(isinstance(v, Mapping) for v in p.poor_defaults.values()):
        raise ValueError(f"poor_defaults must be a table of name = {{hyperparameter = value}}, got {p.poor_defaults!r}")
    check_start_from_poor(p)
    test_ids = plan.test_ids
    for name in p.poor_defaults:
        poor_values(plan, protocol.POOR + name)
    if protocol.SWEEP in p.methods or protocol.SWEEP in p.tuner:
        tuner_options(plan, protocol.SWEEP)
    protocol.check(p.methods, p.poor_defaults, test_ids, {e.label: e.path for e in plan.envs})
    files: dict[str, str] = {}
    for method in plan.methods:
        other = files.setdefault(unit_name("", method).casefold(), method)
        if other != method:
            raise ValueError(f"methods {other!r} and {method!r} would share unit files (units/"
                             f"{unit_name('ENV', method)}.npz): rename the poor default")
    return plan


def _method_list(field: str, given) -> tuple[str, ...]:
    """A list of method names as a tuple (ValueError naming `field` for anything else)."""
    if isinstance(given, str) or not isinstance(given, (list, tuple)) or not all(isinstance(m, str) for m in given):
        raise ValueError(f"{field} must be a list of the study's methods, got {given!r}")
    return tuple(given)


def check_start_from_poor(p: Preset) -> None:
    """ValueError naming `start_from_poor` unless it lists methods of the study that can start from
    a poor default (tuners that learn: not fixed, random_start or the sweep; no population method)
    and the study has poor defaults to start them from."""
    given = _method_list("start_from_poor", p.start_from_poor)
    if not given:
        return
    if not p.poor_defaults:
        raise ValueError("start_from_poor starts methods from the study's poor defaults, and it has none: give "
                         "poor_defaults (e.g. lr_div10 = {learning_rate = ...}) or leave start_from_poor out")
    for m in _names("start_from_poor", given):
        if m not in p.methods:
            raise ValueError(f"start_from_poor: {m!r} is not one of the study's methods {list(p.methods)}")
        if m in protocol.NOT_FROM_POOR:
            raise ValueError(f"start_from_poor: {m!r} cannot start from a poor default as a unit of its own: "
                             f"{protocol.NOT_FROM_POOR[m]}")
        if m in POPULATION_METHODS:
            raise ValueError(f"start_from_poor: {m!r} is a population method, whose agents start at the space's "
                             f"defaults: run it in a study whose space has the poor default as its default")


def check_unit_names(labels: Sequence[str], existing: Sequence[str] = ()) -> None:
    """ValueError naming both labels when two environment labels (of `labels`, or one of
    them and one of `existing`: a study directory's) would share unit files: a unit's file
    is named after its label (`store.unit_name`), and file systems may ignore case."""
    seen = {unit_name(label, "").casefold(): label for label in existing}
    for label in labels:
        other = seen.setdefault(unit_name(label, "").casefold(), label)
        if other != label:
            raise ValueError(f"envs {other!r} and {label!r} would share the unit files units/"
                             f"{unit_name(label, 'METHOD')}.npz; every environment label needs its own file "
                             f"name (letters, digits, '-', '_' and '.' are kept, other characters become '_', "
                             f"case is ignored): rename one of them")
