"""Your own environments in a study: objects and importable factories as study environments.

A registry name (a string in `envs`) never imports code. Your own environment comes either
as an object in `experiments.Study(envs=...)` (a gymnax Environment or (Environment, params)
pair, a Brax Env, a JaxEnv / HostEnv, or a zero-argument factory returning one of these or a
gymnasium Env), or as an importable factory "package.module:make_env" (optionally
"LABEL=package.module:make_env") in a study file's `env_factories` / `hcjax run --env-factory`:
that imports the module and calls the function, i.e. runs your code, as Hydra's `_target_` does.

Each becomes an `Own` (label, make, path, why: an `EnvChoice` once `presets.resolve` adds its
per-environment PPO overrides) whose `make` names it and fingerprints its static description
(sizes, bounds, time limit, backend, and its params' repr where it has params):
"object:QUALNAME#FP" or "factory:REF#FP". `make` enters the unit's configuration key, so a
directory resumes a study only with an environment of the same name and fingerprint; a change
inside the code that keeps all of these is not detected (rename the label to start over).
The built environment is kept in this process under its `make` (`built`, read by `build.environment`);
an object given again, and a factory reference naming the same function object again, keep their
first build (the GIVEN_KEPT most recent of each), so a rerun's units reuse their compiled programs.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import re
import sys
from collections import OrderedDict
from typing import Any

from agents import envs as agent_envs

PREFIXES = ("object:", "factory:")  # the `make` of an own environment (never a registry name)
REFERENCE = re.compile(r"(?:(?P<label>[^=\s]+)=)?(?P<module>[A-Za-z_][\w.]*):(?P<attr>[A-Za-z_][\w.]*)")


_BUILT: dict[str, Any] = {}  # make -> the environment built in this process
# id -> (environment object, its build, params text), the GIVEN_KEPT most recently given: an
# object given again after that is built again (its units then compile again)
_GIVEN: OrderedDict[int, tuple[Any, Any, str]] = OrderedDict()
GIVEN_KEPT = 16  # as many as experiments.study.programs keeps unit configurations
# factory reference (without its label) -> (the factory function, its build, params text), the
# GIVEN_KEPT most recently named: the same function named again is not called again
_FACTORIES: OrderedDict[str, tuple[Any, Any, str]] = OrderedDict()


@dataclasses.dataclass(frozen=True)
class Own:
    """An own environment, built and kept in this process: `label` (tables, unit files),
    `make` ("object:..." / "factory:..." with its fingerprint), `path` (its backend:
    "custom", "gymnax", "brax" or "gymnasium") and `why` (where it came from)."""

    label: str
    make: str
    path: str
    why: str


def built(make: str):
    """The environment kept under `make` in this process; ValueError when there is none
    (an own environment is given again in each process: it is code, not a name)."""
    if make not in _BUILT:
        raise ValueError(f"environment {make} is your own and was not given in this process: pass the object in "
                         f"Study(envs=...) or its factory in env_factories")
    return _BUILT[make]


def is_own(make: str) -> bool:
    """Whether an EnvChoice's `make` names an own environment (not a registry name)."""
    return make.startswith(PREFIXES)


def _qualified(obj) -> str:
    """module.QualifiedName of a factory, or of an environment's class ((env, params): env's)."""
    if isinstance(obj, tuple) and obj:
        obj = obj[0]
    target = obj if callable(obj) and hasattr(obj, "__qualname__") else type(obj)
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', type(obj).__name__)}"


def _params_text(obj) -> str:
    """repr of an object's environment parameters (gymnax: the params of a pair, or the default)."""
    if isinstance(obj, tuple) and len(obj) == 2:
        return repr(obj[1])
    params = getattr(obj, "default_params", None)
    return "" if params is None else repr(params)


def fingerprint(env, params_text: str = "") -> str:
    """A short hash of a built environment's static description and its params' repr."""
    described = dict(name=env.name, obs_size=env.obs_size, action_size=env.action_size, discrete=env.discrete,
                     low=[float(x) for x in env.action_low], high=[float(x) for x in env.action_high],
                     steps=env.max_episode_steps, backend=env.backend, params=params_text)
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:12]


def build_object(obj, where: str):
    """(built JaxEnv / HostEnv, params repr) of an environment object or a zero-argument
    factory; ValueError naming `where` when it is not (or does not return) an environment."""
    if isinstance(obj, (str, agent_envs.EnvSpec)):
        raise ValueError(f"{where}: got {obj!r}; registry names go in envs, own environments are objects")
    native = isinstance(obj, (agent_envs.JaxEnv, agent_envs.HostEnv)) or any(
        b.accepts(obj) for b in agent_envs.TABLE if not b.host)
    if native:
        return agent_envs.make(obj), _params_text(obj)
    if not callable(obj):
        raise agent_envs.not_an_environment(obj, where)
    try:
        made = obj()
    except TypeError as e:
        raise ValueError(f"{where}: calling the factory with no arguments failed: {e}") from None
    if isinstance(made, (str, agent_envs.EnvSpec)) or callable(made) and not _is_gymnasium(made):
        raise ValueError(f"{where}: the factory returned {type(made).__name__}, not an environment")
    known = _is_gymnasium(made) or isinstance(made, (agent_envs.JaxEnv, agent_envs.HostEnv)) or any(
        b.accepts(made) for b in agent_envs.TABLE if not b.host)
    if not known:
        raise agent_envs.not_an_environment(made, where, returned=True)
    try:
        if _is_gymnasium(made):
            _close(made)
            return agent_envs.make(obj), ""  # the host path builds num_envs copies from the factory
        return agent_envs.make(made), _params_text(made)
    except ValueError as e:
        raise ValueError(f"{where}: the factory's {type(made).__name__} was refused: {e}") from None


def _is_gymnasium(obj) -> bool:
    module = sys.modules.get("gymnasium")
    return module is not None and isinstance(obj, module.Env)


def _close(env) -> None:
    if callable(getattr(env, "close", None)):
        env.close()


def from_object(obj, label: str | None = None) -> Own:
    """The Own of an environment object or factory (built now and registered);
    label: its name in tables and unit files (default the environment's own name). The same
    environment object (not a factory: it is called again) given again in this process keeps
    its first build (of the GIVEN_KEPT most recently given), so a second study of it reuses
    its units' compiled programs (`experiments.study.programs`); give a new object after
    changing one."""
    where = f"envs: {label or _qualified(obj)}"
    if callable(obj):  # a factory object is called again (only a named factory reference keeps its build)
        env, params = build_object(obj, where)
    else:  # the entry holds the object: its id names no other while kept
        env, params = _kept_build(_GIVEN, id(obj), obj, lambda: build_object(obj, where))
    return _choice(env, label, f"object:{_qualified(obj)}", params, "your own environment (a Python object)")


def _kept_build(kept: OrderedDict, key, source, build) -> tuple[Any, str]:
    """(environment, params text) kept in `kept` under `key` while its entry holds this very
    `source` (an object or factory function); else `build()`, kept (the GIVEN_KEPT most recent)."""
    entry = kept.get(key)
    if entry is not None and entry[0] is source:
        kept.move_to_end(key)
        return entry[1], entry[2]
    env, params = build()
    kept[key] = (source, env, params)
    while len(kept) > GIVEN_KEPT:
        kept.popitem(last=False)
    return env, params


def import_factory(reference: str):
    """(label or None, the factory) of "[LABEL=]package.module:function"; imports the module
    (running its code). ValueError naming the reference when it cannot be imported."""
    match = REFERENCE.fullmatch(reference.strip()) if isinstance(reference, str) else None
    if match is None:
        raise ValueError(f"env_factories: {reference!r} is not of the form [LABEL=]package.module:function")
    try:
        target = importlib.import_module(match["module"])
        for part in match["attr"].split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"env_factories: {reference!r} cannot be imported ({type(e).__name__}: {e}); its module "
                         f"must be importable: installed, or in a folder on PYTHONPATH (PYTHONPATH=. for the "
                         f"current folder; `hcjax run` and `hcjax replay` also look in the current folder)") from None
    if not callable(target):
        raise ValueError(f"env_factories: {reference!r} is {type(target).__name__}, not a callable factory")
    return match["label"], target


def from_factory(reference: str) -> Own:
    """The Own of an importable factory reference (imported, called, built, registered). The
    same reference naming the same function object again (of the GIVEN_KEPT most recently
    named) keeps its first build, so rerunning a study file in one process (a resume, a
    notebook) reuses its units' compiled programs; reload the module after changing its code."""
    label, factory = import_factory(reference)
    ref = reference.strip().split("=", 1)[-1] if "=" in reference else reference.strip()
    env, params = _kept_build(_FACTORIES, ref, factory, lambda: build_object(factory, f"env_factories: {reference!r}"))
    label = label or env.name
    return _choice(env, label, f"factory:{ref}", params,
                   f"your own environment: factory {ref} (imports and runs your code)")


def _choice(env, label: str | None, kind: str, params: str, why: str) -> Own:
    make = f"{kind}#{fingerprint(env, params)}"
    _BUILT[make] = env
    return Own(label=label or env.name, make=make, path=env.backend, why=why)


def check_unchanged(choices, old: list[dict[str, Any]]) -> None:
    """ValueError when a study directory ran an own environment of the same label with
    another name or fingerprint (its code or parameters changed): resuming would mix them."""
    before = {e.get("label"): e.get("make") for e in old if isinstance(e, dict)}
    for choice in choices:
        was = before.get(choice.label)
        if was is not None and was != choice.make and (is_own(was) or is_own(choice.make)):
            raise ValueError(f"environment {choice.label!r} changed since this directory's run (was {was}, now "
                             f"{choice.make}): its results would mix two environments; use another out "
                             f"directory, or another label for the changed environment")
