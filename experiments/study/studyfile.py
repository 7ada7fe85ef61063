"""Studies as data: a TOML study file <-> a `Preset`.

    hcjax run --config study.toml          # every field of a preset, validated before any work
    hcjax presets --toml cpu > study.toml  # a shipped preset as a file to start from

A study file holds the fields of `experiments.study.plan.Preset` (all optional except
`methods`; a study needs `envs` or `env_factories`, which `hcjax run --envs` /
`--env-factory` may give instead; `seeds` and `iterations` may come from `--seeds`
and `--iterations` instead; the rest default as in `Preset`: name the file's stem, eval_every
10, tune_every 5, the paper's four hyperparameters, no overrides, both flags false), except
that a file without a `[ppo]` table gets the small PPO of `presets.SMALL_PPO` (an empty
`[ppo]` table gives PPOConfig's defaults, the paper's sizes):

    name = "my-study"                  # default: the file's stem
    description = "..."
    envs = ["CartPole-v1", "brax/hopper", "gymnasium/Hopper-v4"]
    env_factories = ["mypkg.envs:make_env"]  # your own: imported and CALLED (runs your code)
    methods = ["hypercontroller", "random", "fixed"]
    seeds = 10
    iterations = 100
    eval_every = 10
    tune_every = 5
    fast_compile = false
    fuse_methods = false               # all methods of a JAX env in one program
    reductions = ["..."]
    test_seeds = 10                    # a count (ids from 100 up) or a list of ids: every method again there

    [ppo]                              # PPOConfig overrides
    num_envs = 16
    hidden_sizes = [64, 64]

    [[space]]                          # the tuned hyperparameters (default: the paper's four)
    name = "learning_rate"
    low = 1e-5
    high = 1e-3
    scale = "log"                      # "linear" (default) or "log"
    default = 3e-4                     # optional; integer = true for integers

    [[space]]                          # a categorical: options instead of low/high/scale/integer
    name = "batch_size"
    options = [1024, 2048, 4096]       # numbers or strings; values are option indices
    default = 2048                     # optional, one of the options (default: the first)

    [tuner.gp_ucb]                     # per-method tuner options
    buffer = 100

    [tuner.sweep]                      # methods = [..., "sweep"]: N static configurations x k seeds
    configurations = 32
    seeds = 3

    [poor_defaults.lr_x10]             # a `fixed:lr_x10` unit: the defaults with these values
    learning_rate = 1e-2
    # start_from_poor = ["hypercontroller"]  (top level) also runs `hypercontroller:lr_x10`: HC
    # started from that poor default (what its recovery is measured on)

    [paths."HalfCheetah-v4"]           # a study name run as another environment
    make = "halfcheetah"
    why = "Brax is faster on the CPU"

    [env_ppo."CartPole-v1"]            # PPOConfig overrides for one environment
    objective = "return_change"

    [env_schedule."CartPole-v1"]       # one environment's own iterations, eval_every, tune_every
    iterations = 390
    tune_every = 3

Unknown keys raise ValueError naming them and the allowed keys. Types are strict
(booleans are TOML booleans, counts integers, names strings), lists and `name` must not be
empty, and the file is bounded (a regular file of at most MAX_BYTES, tables and arrays
nested at most MAX_DEPTH deep); every value is then validated by `presets.resolve` like a
shipped preset's. `dumps(preset)` writes the
same format (the inverse of `loads`), so `hcjax presets --toml NAME` round-trips.
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
import stat
import tomllib
from pathlib import Path
from typing import Any

from experiments.study.plan import Preset
from experiments.study.presets import NAME, NAME_RULE, SMALL_PPO

TOP_LEVEL = tuple(f.name for f in dataclasses.fields(Preset))
HYPERPARAMETER_KEYS = ("name", "low", "high", "scale", "integer", "default", "options")
MAX_BYTES = 1 << 20  # a study file is a few kilobytes; anything over a mebibyte is a mistake
MAX_DEPTH = 8  # the deepest a study file needs is 3 (env_ppo.LABEL.hidden_sizes)
COUNTS = ("seeds", "iterations", "eval_every", "tune_every")
FLAGS = ("fast_compile", "fuse_methods")


def load(path: str | Path) -> Preset:
    """Read a study file; ValueError naming the file and the problem (also when it is not a
    regular file or is over MAX_BYTES: nothing is read without bound)."""
    path = Path(path)
    try:
        text = _read_bounded(path)
        return loads(text, default_name=safe_name(path.stem))
    except ValueError as e:
        raise ValueError(f"--config {path}: {e}") from None


def _read_bounded(path: Path) -> str:
    """The UTF-8 text of a regular file of at most MAX_BYTES (ValueError otherwise)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # before opening: a FIFO would block, /dev/zero never ends
            raise ValueError("not a regular file; give a study file (TOML)")
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise ValueError(f"cannot be read ({e.strerror or e})") from None
    if len(data) > MAX_BYTES:
        raise ValueError(f"larger than {MAX_BYTES} bytes; a study file is a few kilobytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 text ({e})") from None


def safe_name(text: str) -> str:
    """`text` as a study name (NAME): other characters become '_', at most 100 of them."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", text).lstrip("._-")[:100]
    return safe or "study"


def loads(text: str, default_name: str = "study") -> Preset:
    """A Preset from the text of a study file (not yet resolved: see presets.resolve).
    Omitted `seeds` and `iterations` are None (given on the command line, or refused by
    presets.resolve); every other omission takes Preset's default."""
    if len(text) > MAX_BYTES:
        raise ValueError(f"larger than {MAX_BYTES} characters; a study file is a few kilobytes")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"not valid TOML: {e}") from None
    except RecursionError:
        raise ValueError(f"arrays or tables nested too deeply (at most {MAX_DEPTH} levels)") from None
    _check_depth(data)
    unknown = sorted(set(data) - set(TOP_LEVEL))
    if unknown:
        raise ValueError(f"unknown key(s) {unknown}; allowed: {', '.join(TOP_LEVEL)}")
    if "methods" not in data:
        raise ValueError("'methods' is required (a list of names)")
    fields: dict[str, Any] = {"name": default_name, "seeds": None, "iterations": None, "envs": (),
                              "ppo": dict(SMALL_PPO)}
    for key, value in data.items():
        if key in ("envs", "methods", "reductions", "env_factories", "start_from_poor"):
            fields[key] = tuple(_strings(key, value, empty=key == "reductions" or
                                         (key == "envs" and "env_factories" in data)))
        elif key == "space":
            fields[key] = tuple(_hyperparameter(i, entry) for i, entry in enumerate(_list(key, value)))
        elif key == "name":
            fields[key] = _name(value)
        elif key == "description":
            fields[key] = _string(key, value)
        elif key in COUNTS:
            fields[key] = _integer(key, value)
        elif key in FLAGS:
            fields[key] = _flag(key, value)
        elif key == "ppo":
            fields[key] = _ppo(key, value)
        elif key == "env_ppo":
            fields[key] = {label: _ppo(f"env_ppo.{label}", entry) for label, entry in _table(key, value).items()}
        elif key == "tuner":
            fields[key] = {m: dict(_table(f"tuner.{m}", opts)) for m, opts in _table(key, value).items()}
        elif key == "paths":
            fields[key] = {label: _path(label, entry) for label, entry in _table(key, value).items()}
        elif key == "poor_defaults":
            fields[key] = {name: dict(_table(f"poor_defaults.{name}", entry))
                           for name, entry in _table(key, value).items()}
        elif key == "env_schedule":
            fields[key] = {label: {f: _integer(f"env_schedule.{label}.{f}", v)
                                   for f, v in _table(f"env_schedule.{label}", entry).items()}
                           for label, entry in _table(key, value).items()}
        elif key == "test_seeds":
            fields[key] = _test_seeds(value)
        else:
            fields[key] = value
    return Preset(**fields)


def _check_depth(data) -> None:
    """ValueError when tables and arrays nest deeper than MAX_DEPTH (checked without recursion)."""
    pending = [(data, 0)]
    while pending:
        value, depth = pending.pop()
        if depth > MAX_DEPTH:
            raise ValueError(f"arrays or tables nested too deeply (at most {MAX_DEPTH} levels)")
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        pending.extend((child, depth + 1) for child in children)


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _list(field, value, empty: bool = False) -> list:
    if not isinstance(value, list):
        raise ValueError(f"'{field}' must be a list, got {_short(value)}")
    if not value and not empty:
        raise ValueError(f"'{field}' must not be empty (leave it out for the default)" if field == "space" else
                         f"'{field}' must not be empty: give at least one")
    return value


def _strings(field, value, empty: bool = False) -> list[str]:
    items = _list(field, value, empty)
    if not all(isinstance(v, str) for v in items):
        raise ValueError(f"'{field}' must be a list of strings, got {_short(value)}")
    return items


def _string(field, value) -> str:
    if not isinstance(value, str):
        raise ValueError(f"'{field}' must be a string, got {_short(value)} ({type(value).__name__})")
    return value


def _name(value) -> str:
    if not isinstance(value, str) or not NAME.fullmatch(value):
        raise ValueError(f"'name' must be a string of {NAME_RULE}; got {_short(value)}")
    return value


def _integer(field, value) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"'{field}' must be an integer >= 1 (a TOML integer, e.g. {field} = 10), "
                         f"got {_short(value)} ({type(value).__name__})")
    return value


def _flag(field, value) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"'{field}' must be a boolean: true or false (unquoted), got {_short(value)}")
    return value


def _table(field, value) -> dict:
    if not isinstance(value, dict):
        raise ValueError(f"'{field}' must be a table, got {value!r}")
    return value


def _ppo(field, value) -> dict:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in _table(field, value).items()}


def _test_seeds(value) -> int | tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return tuple(value)
    raise ValueError(f"'test_seeds' must be a count (test_seeds = 10) or a list of seed ids (test_seeds = [100, 101]), "
                     f"got {_short(value)}")


def _hyperparameter(i: int, entry) -> dict:
    entry = _table(f"space[{i}]", entry)
    unknown = sorted(set(entry) - set(HYPERPARAMETER_KEYS))
    if unknown:
        raise ValueError(f"space[{i}]: unknown key(s) {unknown}; allowed: {', '.join(HYPERPARAMETER_KEYS)}")
    # A categorical giving bounds too is refused by presets.check_space, naming the entry.
    required = ("name", "options") if "options" in entry else ("name", "low", "high")
    missing = [k for k in required if k not in entry]
    if missing:
        raise ValueError(f"space[{i}]: missing {missing} (every hyperparameter needs name and low, high, or "
                         f"options)")
    return dict(entry)


def _path(label: str, entry) -> tuple[str, str]:
    entry = _table(f"paths.{label}", entry)
    if set(entry) - {"make", "why"} or not isinstance(entry.get("make"), str) \
            or not isinstance(entry.get("why", ""), str):
        raise ValueError(f"paths.{label} must be a table with 'make' (an environment name) and 'why' "
                         f"(a string), got {_short(entry)}")
    return entry["make"], entry.get("why", "")


# ---- writing ---------------------------------------------------------------------------------


def dumps(preset: Preset) -> str:
    """The study file of `preset` (loads(dumps(p)) == p)."""
    lines = []
    scalars = {f: getattr(preset, f) for f in ("name", "description", "envs", "methods", "seeds", "iterations",
                                                "eval_every", "tune_every", "fast_compile", "fuse_methods",
                                                "reductions")}
    for key, value in scalars.items():
        lines.append(f"{key} = {_value(value)}")
    if preset.env_factories:
        lines.append(f"env_factories = {_value(preset.env_factories)}")
    if preset.test_seeds:
        lines.append(f"test_seeds = {_value(preset.test_seeds)}")
    if preset.start_from_poor:
        lines.append(f"start_from_poor = {_value(preset.start_from_poor)}")
    lines += ["", "[ppo]"] + [f"{k} = {_value(v)}" for k, v in preset.ppo.items()]  # even empty: see SMALL_PPO
    for entry in preset.space:
        lines += ["", "[[space]]"] + [f"{k} = {_value(v)}" for k, v in entry.items() if v is not None]
    for method, opts in preset.tuner.items():
        lines += ["", f"[tuner.{method}]"] + [f"{k} = {_value(v)}" for k, v in opts.items()]
    for label, (make, why) in preset.paths.items():
        lines += ["", f"[paths.{_key(label)}]", f"make = {_value(make)}", f"why = {_value(why)}"]
    for label, ppo in preset.env_ppo.items():
        lines += ["", f"[env_ppo.{_key(label)}]"] + [f"{k} = {_value(v)}" for k, v in ppo.items()]
    for name, values in preset.poor_defaults.items():
        lines += ["", f"[poor_defaults.{_key(name)}]"] + [f"{k} = {_value(v)}" for k, v in values.items()]
    for label, timing in preset.env_schedule.items():
        lines += ["", f"[env_schedule.{_key(label)}]"] + [f"{k} = {_value(v)}" for k, v in timing.items()]
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
