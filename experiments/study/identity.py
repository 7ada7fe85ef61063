"""What an object holds, as a digest: the content part of your own environment's fingerprint
(`experiments.study.own_envs`), the same in every process that builds the same object.

    described = describe(env)          # Described(digest='3f2a...', opaque=())

The walk covers what decides how an environment behaves: numbers, strings and containers by
value; NumPy and JAX arrays by dtype, shape and bytes; an object by its class's qualified name
and its attributes (`__dict__`, `__slots__`); a function (a lambda too) by its code, defaults,
closure cells and the globals its code names; a bound method by its function and object;
`functools.partial` by its function and arguments; a wrapped function (`jax.jit`) by what it
wraps. A class, a module and a function of an installed library or the standard library (a
file under site-packages or the stdlib) are named, not walked: their code is not hashed
(change a method of your class and the digest stays; a changed attribute, argument or
closure changes it), and nothing of a library's internal state enters the digest.

Strings and bytes longer than LONG_TEXT characters enter by their length and SHA-256 (hashed
directly, not through their repr). What cannot be described this way (an object of a C extension
without attributes, such as a MuJoCo model or a NumPy Generator, a structure deeper than MAX_DEPTH
or larger than MAX_NODES, a part whose reading raises: your __getattr__, __repr__ or a property
raising) is named by its type only and listed in `opaque`: objects that differ only there share
a digest, and `own_envs` then keys them by their study label as well.
"""
from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import math
import sys
import sysconfig
import types
from pathlib import Path
from typing import Any

import jax
import numpy as np

MAX_DEPTH = 64  # nesting walked before a part is opaque
MAX_NODES = 200_000  # values walked in one object before the rest is opaque
MAX_LISTED = 8  # opaque parts listed by path (the others counted)
LONG_TEXT = 1024  # longer strings and bytes enter the digest by their length and SHA-256


@dataclasses.dataclass(frozen=True)
class Described:
    """`digest`: 16 hex digits of SHA-256 over the walk; `opaque`: 'path: type' of every part
    named by its type only (empty when the whole object was described)."""

    digest: str
    opaque: tuple[str, ...]


def describe(obj: Any) -> Described:
    """The Described of `obj` (module docstring)."""
    walk = _Walk()
    text = walk.value(obj, "obj", ())
    return Described(hashlib.sha256(text.encode()).hexdigest()[:16], tuple(walk.opaque))


def text_value(x: str | bytes) -> str:
    """The canonical text of a string or bytes: its repr up to LONG_TEXT characters, else its
    length and SHA-256 (hashed directly: a 256 MB bytes attribute is one pass, not a 1 GB repr)."""
    kind = type(x).__name__
    if len(x) <= LONG_TEXT:
        return f"{kind}:{x!r}"
    data = x if isinstance(x, bytes) else x.encode("utf-8", "surrogatepass")
    return f"{kind}:{len(x)}:{hashlib.sha256(data).hexdigest()}"


def _has(x, name: str) -> bool:
    """hasattr, False where your __getattr__ raises something else than AttributeError (a
    KeyError from a dict lookup, say): the object's own attributes are still walked."""
    try:
        return hasattr(x, name)
    except Exception:  # noqa: BLE001 - your __getattr__ raised
        return False


def _label(key) -> str:
    """A dict key as a path component: its repr, cut to 40 characters ('?' when repr raises)."""
    try:
        text = repr(key)
    except Exception:  # noqa: BLE001 - your __repr__ raised: the path names it by type
        return f"<{type(key).__name__}>"
    return text if len(text) <= 40 else text[:37] + "..."


def _name(x) -> str:
    return f"{getattr(x, '__module__', '?')}.{getattr(x, '__qualname__', getattr(x, '__name__', '?'))}"


class _Walk:
    """One walk: a canonical text of a value, the opaque parts found, nodes counted."""

    def __init__(self):
        self.opaque: list[str] = []
        self.nodes = 0

    def hidden(self, x, path: str, why: str = "") -> str:
        if len(self.opaque) < MAX_LISTED:
            self.opaque.append(f"{path}: {_name(type(x))}{why}")
        elif len(self.opaque) == MAX_LISTED:
            self.opaque.append("and more")
        return f"opaque({_name(type(x))})"

    def value(self, x, path: str, ancestors: tuple[int, ...]) -> str:
        """Canonical text of `x` at `path`; `ancestors`: ids of the objects containing it (a
        reference back to one is written as its depth, so cycles end). A part whose reading
        raises (your __getattr__, __repr__ or __eq__ raising) is opaque, named with the exception."""
        self.nodes += 1
        if self.nodes > MAX_NODES:
            return self.hidden(x, path, f" (past {MAX_NODES} values)")
        try:
            return self.read(x, path, ancestors)
        except Exception as e:  # noqa: BLE001 - your code raised while we read it: that part is opaque
            return self.hidden(x, path, f" (reading it raised {type(e).__name__})")

    def read(self, x, path: str, ancestors: tuple[int, ...]) -> str:
        """`value`'s text of `x`, by its kind (the module docstring)."""
        if x is None or isinstance(x, (bool, int)):
            return f"{type(x).__name__}:{x!r}"
        if isinstance(x, (str, bytes)):
            return text_value(x)
        if isinstance(x, float):
            return f"float:{x.hex() if math.isfinite(x) else repr(x)}"
        if isinstance(x, complex):
            return f"complex:{x!r}"
        if isinstance(x, (types.ModuleType,)):
            return f"module:{x.__name__}"
        if isinstance(x, type):
            return f"class:{_name(x)}"
        if isinstance(x, np.dtype):
            return f"dtype:{x.str}" if x.fields is None else f"dtype:{x.descr}"
        if isinstance(x, enum.Enum):
            return f"enum:{_name(type(x))}.{x.name}"
        if id(x) in ancestors:
            return f"cycle:{len(ancestors) - ancestors.index(id(x))}"
        if len(ancestors) >= MAX_DEPTH:
            return self.hidden(x, path, f" (deeper than {MAX_DEPTH})")
        if isinstance(x, (np.ndarray, np.generic, jax.Array)):
            return self.array(x, path, ancestors)
        inner = ancestors + (id(x),)
        if isinstance(x, (list, tuple)):
            items = ",".join(self.value(v, f"{path}[{i}]", inner) for i, v in enumerate(x))
            return f"{_name(type(x))}[{items}]"
        if isinstance(x, (set, frozenset)):
            return f"{_name(type(x))}{{{','.join(sorted(self.value(v, f'{path}{{}}', inner) for v in x))}}}"
        if isinstance(x, (dict, types.MappingProxyType)):
            items = ",".join(f"{self.value(k, f'{path}.key', inner)}:{self.value(v, f'{path}[{_label(k)}]', inner)}"
                             for k, v in x.items())
            return f"{_name(type(x))}{{{items}}}"
        if isinstance(x, types.CodeType):
            return self.code(x, path, inner)
        if isinstance(x, types.FunctionType):
            return f"function:{_name(x)}" if _in_library(x.__module__) else self.function(x, path, inner)
        if isinstance(x, types.MethodType):
            return f"method({self.value(x.__func__, path + '.__func__', inner)}," \
                   f"{self.value(x.__self__, path + '.__self__', inner)})"
        if isinstance(x, functools.partial):
            return f"partial({self.value(x.func, path + '.func', inner)},{self.value(x.args, path + '.args', inner)}," \
                   f"{self.value(x.keywords, path + '.keywords', inner)})"
        if isinstance(x, (types.BuiltinFunctionType, types.WrapperDescriptorType, types.MethodDescriptorType)):
            owner = getattr(x, "__self__", None)
            bound = "" if owner is None or isinstance(owner, types.ModuleType) else \
                self.value(owner, path + ".__self__", inner)
            return f"builtin:{_name(x)}({bound})"
        if callable(x) and _has(x, "__wrapped__"):  # jax.jit, functools.wraps
            return f"wraps:{_name(type(x))}({self.value(x.__wrapped__, path + '.__wrapped__', inner)})"
        return self.attributes(x, path, inner)

    def array(self, x, path: str, ancestors) -> str:
        try:
            if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
                x = jax.random.key_data(x)
            a = np.asarray(x)
        except Exception:  # noqa: BLE001 - an array this process cannot read whole (sharded across processes)
            return self.hidden(x, path, " (not readable here)")
        if a.dtype.kind == "O":
            return f"object-array{a.shape}[{','.join(self.value(v, path, ancestors) for v in a.ravel())}]"
        digest = hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()
        return f"array:{a.dtype.str}{a.shape}:{digest}"

    def code(self, c: types.CodeType, path: str, inner) -> str:
        consts = ",".join(self.value(k, f"{path}.co_consts", inner) for k in c.co_consts)
        return (f"code:{c.co_name}({c.co_argcount},{c.co_kwonlyargcount},{c.co_flags},{c.co_code.hex()},"
                f"[{consts}],{c.co_names})")

    def function(self, f: types.FunctionType, path: str, inner) -> str:
        """A function: its code, defaults, closure cells and the globals its code (and the
        code nested in it) names, each by value."""
        cells = []
        for name, cell in zip(f.__code__.co_freevars, f.__closure__ or ()):
            try:
                contents = cell.cell_contents
            except ValueError:  # an empty cell (a name not bound yet)
                cells.append(f"{name}=<empty>")
                continue
            cells.append(f"{name}={self.value(contents, f'{path}.<closure {name}>', inner)}")
        names = sorted(_global_names(f.__code__))
        found = [(n, f.__globals__[n]) for n in names if n in f.__globals__]
        used = ",".join(f"{n}={self.value(v, f'{path}.<global {n}>', inner)}" for n, v in found)
        return (f"function:{_name(f)}({self.code(f.__code__, path, inner)},"
                f"{self.value(f.__defaults__, path + '.__defaults__', inner)},"
                f"{self.value(f.__kwdefaults__, path + '.__kwdefaults__', inner)},[{','.join(cells)}],[{used}])")

    def attributes(self, x, path: str, inner) -> str:
        """An object by its class and attributes; opaque without any to read."""
        fields = dict(getattr(x, "__dict__", None) or {})
        for cls in type(x).__mro__:
            for slot in [cls.__dict__["__slots__"]] if isinstance(cls.__dict__.get("__slots__"), str) else \
                    cls.__dict__.get("__slots__", ()):
                if slot not in ("__dict__", "__weakref__") and _has(x, slot):
                    fields.setdefault(slot, getattr(x, slot))
        if not fields and not hasattr(x, "__dict__"):
            return self.hidden(x, path)
        items = ",".join(f"{k}={self.value(v, f'{path}.{k}', inner)}" for k, v in sorted(fields.items()))
        return f"object:{_name(type(x))}{{{items}}}"


@functools.lru_cache(maxsize=1024)
def _in_library(module_name: str | None) -> bool:
    """Whether a module is built in, or a file of the standard library or of an installed
    package (under site-packages): named, never walked. A module without a file that is not
    built in (a notebook's or `python -c`'s __main__) is your code."""
    if module_name in sys.builtin_module_names:
        return True
    file = getattr(sys.modules.get(module_name or ""), "__file__", None)
    if file is None:
        return False
    here = Path(file).resolve()
    return any(here.is_relative_to(root) for root in _LIBRARY_ROOTS)


_LIBRARY_ROOTS = tuple({Path(sysconfig.get_paths()[k]).resolve()
                        for k in ("stdlib", "platstdlib", "purelib", "platlib")})


def _global_names(code: types.CodeType) -> set[str]:
    """The names `code` and the code objects nested in it look up (globals among them)."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names
