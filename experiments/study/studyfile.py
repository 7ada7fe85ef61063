"""Studies as data: a TOML study file <-> a `Preset`.

    hcjax run --config study.toml          # every field of a preset, validated before any work
    hcjax presets --toml cpu > study.toml  # a shipped preset as a file to start from

A study file holds the fields of `experiments.study.presets.Preset` (all optional except
`envs` and `methods`; the rest default as in `Preset`):

    name = "my-study"                  # default: the file's stem
    description = "..."
    envs = ["CartPole-v1", "brax/hopper", "gymnasium/Hopper-v4"]
    methods = ["hypercontroller", "random", "fixed"]
    seeds = 10
    iterations = 100
    eval_every = 10
    tune_every = 5
    fast_compile = false
    fuse_methods = false               # all methods of a JAX env in one program
    reductions = ["..."]

    [ppo]                              # PPOConfig overrides
    num_envs = 16
    hidden_sizes = [64, 64]

    [[space]]                          # the tuned hyperparameters (default: the paper's four)
    name = "learning_rate"
    low = 1e-5
    high = 1e-3
    scale = "log"                      # "linear" (default) or "log"
    default = 3e-4                     # optional; integer = true for integers

    [tuner.gp_ucb]                     # per-method tuner options
    buffer = 100

    [paths."HalfCheetah-v4"]           # a study name run as another environment
    make = "halfcheetah"
    why = "Brax is faster on the CPU"

    [env_ppo."CartPole-v1"]            # PPOConfig overrides for one environment
    objective = "return_change"

Unknown keys raise ValueError naming them and the allowed keys; every value is then
validated by `presets.resolve` like a shipped preset's. `dumps(preset)` writes the
same format (the inverse of `loads`), so `hcjax presets --toml NAME` round-trips.
"""
from __future__ import annotations

import dataclasses
import math
import tomllib
from pathlib import Path
from typing import Any

from experiments.study.presets import Preset

TOP_LEVEL = tuple(f.name for f in dataclasses.fields(Preset))
HYPERPARAMETER_KEYS = ("name", "low", "high", "scale", "integer", "default")


def load(path: str | Path) -> Preset:
    """Read a study file; ValueError naming the file and the problem."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ValueError(f"--config {path}: cannot be read ({e.strerror or e})") from None
    try:
        return loads(text, default_name=path.stem)
    except ValueError as e:
        raise ValueError(f"--config {path}: {e}") from None


def loads(text: str, default_name: str = "study") -> Preset:
    """A Preset from the text of a study file (not yet resolved: see presets.resolve)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"not valid TOML: {e}") from None
    unknown = sorted(set(data) - set(TOP_LEVEL))
    if unknown:
        raise ValueError(f"unknown key(s) {unknown}; allowed: {', '.join(TOP_LEVEL)}")
    for key in ("envs", "methods"):
        if key not in data:
            raise ValueError(f"'{key}' is required (a list of names)")
    fields: dict[str, Any] = {"name": default_name}
    for key, value in data.items():
        if key in ("envs", "methods", "reductions"):
            fields[key] = tuple(_strings(key, value))
        elif key == "space":
            fields[key] = tuple(_hyperparameter(i, entry) for i, entry in enumerate(_list(key, value)))
        elif key == "ppo":
            fields[key] = _ppo(key, value)
        elif key == "env_ppo":
            fields[key] = {label: _ppo(f"env_ppo.{label}", entry) for label, entry in _table(key, value).items()}
        elif key == "tuner":
            fields[key] = {m: dict(_table(f"tuner.{m}", opts)) for m, opts in _table(key, value).items()}
        elif key == "paths":
            fields[key] = {label: _path(label, entry) for label, entry in _table(key, value).items()}
        else:
            fields[key] = value
    return Preset(**fields)


def _list(field, value) -> list:
    if not isinstance(value, list):
        raise ValueError(f"'{field}' must be a list, got {value!r}")
    return value


def _strings(field, value) -> list[str]:
    items = _list(field, value)
    if not all(isinstance(v, str) for v in items):
        raise ValueError(f"'{field}' must be a list of strings, got {value!r}")
    return items


def _table(field, value) -> dict:
    if not isinstance(value, dict):
        raise ValueError(f"'{field}' must be a table, got {value!r}")
    return value


def _ppo(field, value) -> dict:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in _table(field, value).items()}


def _hyperparameter(i: int, entry) -> dict:
    entry = _table(f"space[{i}]", entry)
    unknown = sorted(set(entry) - set(HYPERPARAMETER_KEYS))
    if unknown:
        raise ValueError(f"space[{i}]: unknown key(s) {unknown}; allowed: {', '.join(HYPERPARAMETER_KEYS)}")
    missing = [k for k in ("name", "low", "high") if k not in entry]
    if missing:
        raise ValueError(f"space[{i}]: missing {missing} (every hyperparameter needs name, low, high)")
    return dict(entry)


def _path(label: str, entry) -> tuple[str, str]:
    entry = _table(f"paths.{label}", entry)
    if set(entry) - {"make", "why"} or not isinstance(entry.get("make"), str):
        raise ValueError(f"paths.{label} must be a table with 'make' (an environment name) and 'why', got {entry!r}")
    return entry["make"], str(entry.get("why", ""))


# ---- writing ---------------------------------------------------------------------------------


def dumps(preset: Preset) -> str:
    """The study file of `preset` (loads(dumps(p)) == p)."""
    lines = []
    scalars = {f: getattr(preset, f) for f in ("name", "description", "envs", "methods", "seeds", "iterations",
                                                "eval_every", "tune_every", "fast_compile", "fuse_methods",
                                                "reductions")}
    for key, value in scalars.items():
        lines.append(f"{key} = {_value(value)}")
    if preset.ppo:
        lines += ["", "[ppo]"] + [f"{k} = {_value(v)}" for k, v in preset.ppo.items()]
    for entry in preset.space:
        lines += ["", "[[space]]"] + [f"{k} = {_value(v)}" for k, v in entry.items() if v is not None]
    for method, opts in preset.tuner.items():
        lines += ["", f"[tuner.{method}]"] + [f"{k} = {_value(v)}" for k, v in opts.items()]
    for label, (make, why) in preset.paths.items():
        lines += ["", f"[paths.{_key(label)}]", f"make = {_value(make)}", f"why = {_value(why)}"]
    for label, ppo in preset.env_ppo.items():
        lines += ["", f"[env_ppo.{_key(label)}]"] + [f"{k} = {_value(v)}" for k, v in ppo.items()]
    return "\n".join(lines) + "\n"


def _key(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() else _value(k)


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"study files hold finite numbers only, got {v}")
        return repr(v)
    if isinstance(v, str):
        escaped = v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{escaped}"'
    if isinstance(v, (list, tuple)):
        if len(v) > 3 and all(isinstance(x, str) for x in v):
            return "[\n" + "".join(f"    {_value(x)},\n" for x in v) + "]"
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise ValueError(f"cannot write {v!r} ({type(v).__name__}) to a study file")
