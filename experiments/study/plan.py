"""A unit's identity and options, JAX-free: what changes a unit's numbers, and the hashes of it.

A unit is one (environment, method) pair of a study (`experiments.study.presets.Plan`).
`unit_config` is everything that changes its numbers; its hash is the unit's `config_key`.
The part every unit of a study shares (everything but the environment, the method and the
method's options: `study_part`) hashes into the `study_key`: a study directory holds one
study key (see `experiments.study.store`).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import TYPE_CHECKING, Any

import numpy as np

from experiments.study import methods

if TYPE_CHECKING:  # the presets build hcjax spaces; this module only reads their fields
    from experiments.study.presets import EnvChoice, Plan

STUDY_EXCLUDED = ("env", "method", "tuner")  # unit-config fields that may differ within a study


def tuner_options(plan: Plan, method: str) -> dict[str, Any]:
    """Options of `method` for this study: those the methods table derives from the run
    (hyperband's budget is the run's number of decisions, so its brackets complete), then
    the preset's overrides."""
    p = plan.preset
    opts: dict[str, Any] = methods.options(method, decisions=max(1, p.iterations // p.tune_every))
    opts.update(p.tuner.get(method, {}))
    return opts


def ppo_options(plan: Plan, env: EnvChoice | None = None) -> dict[str, Any]:
    """PPOConfig fields of this study (on `env`: with its own overrides)."""
    p = plan.preset
    return dict(p.ppo, **(env.ppo if env is not None else {}), num_iterations=p.iterations, tune_every=p.tune_every)


def unit_config(plan: Plan, env: EnvChoice, method: str) -> dict[str, Any]:
    """Everything that changes a unit's numbers (its config_key is the hash of this)."""
    p = plan.preset
    return dict(env=dataclasses.asdict(env), method=method, seeds=p.seeds, iterations=p.iterations,
                eval_every=p.eval_every, tune_every=p.tune_every, space=[dict(h) for h in p.space],
                ppo=ppo_options(plan), tuner=tuner_options(plan, method))


def jsonable(x):
    """`json.dumps`'s default for the values a configuration or a unit's meta holds."""
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (tuple, set)):
        return list(x)
    return str(x)


def config_key(config: dict) -> str:
    """A short stable hash of everything that changes a unit's numbers."""
    blob = json.dumps(config, sort_keys=True, default=jsonable).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def study_part(unit_config: dict) -> dict:
    """The part of a unit's configuration that every unit of one study shares."""
    return {k: v for k, v in unit_config.items() if k not in STUDY_EXCLUDED}


def study_key(unit_config: dict) -> str:
    """Hash of `study_part(unit_config)`."""
    return config_key(study_part(unit_config))


def study_config(plan: Plan) -> dict[str, Any]:
    """The part of the unit configurations every unit of `plan` shares (see study_part)."""
    env, method = plan.units[0]
    return study_part(unit_config(plan, env, method))


def unit_keys(plan: Plan) -> dict[tuple[str, str], str]:
    """(env label, method) -> config key of every unit of `plan`."""
    return {(e.label, m): config_key(unit_config(plan, e, m)) for e, m in plan.units}


def unit_groups(plan: Plan) -> list[tuple[EnvChoice, list[str]]]:
    """(env, methods) run as one program each: every method alone, or, with the study's
    fuse_methods, all per-agent methods of a JAX environment together (compiled once);
    population methods always run alone."""
    groups = []
    for env in plan.envs:
        fused = [m for m in plan.preset.methods if not methods.is_population(m)]
        if plan.preset.fuse_methods and env.path != "gymnasium" and len(fused) > 1:
            groups.append((env, fused))
            groups += [(env, [m]) for m in plan.preset.methods if methods.is_population(m)]
        else:
            groups += [(env, [m]) for m in plan.preset.methods]
    return groups


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
