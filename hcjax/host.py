"""`HostTuner`: any tuner behind ask/tell with host numbers, for a plain Python loop.

    tuner = hcjax.HostTuner("hypercontroller", space, seed=0, d=10)
    for step in range(n):
        hp = tuner.ask()        # {"learning_rate": 0.001, "batch_size": 2048, "optimizer": "sgd"}
        ...                     # train with hp
        tuner.tell(objective)   # one Python or NumPy number, higher is better

The pure tuner's `init`, `ask` and `tell` (from `make_tuner`, same options) are
compiled once with `jax.jit`, and shared by the HostTuners built later in this process
with the same name, space and options (the last `SHARED_PROGRAMS` such sets are kept:
a checkpoint restored into a new HostTuner, or a pickled copy, compiles nothing), and
they run on one device, by default the first CPU device
even where a GPU is present: the state is tiny, and on a GPU every call would pay host
<-> device round trips (0.60 ms per ask + tell on an H100 against 0.08 ms on the CPU).
The state stays on that device and its buffers are donated to each call (updated in
place), so a call moves only the objective in and the (h,) values out.

Key schedule: base = jax.random.PRNGKey(seed); `init` uses fold_in(base, 0) and the
k-th `ask` (k = 0, 1, ...) fold_in(base, k + 1). The pure tuner run with these keys
(jitted init, ask and tell) gives exactly the same values.

Checkpoints: `state_dict()` is a dict of NumPy arrays ("tuner": the name, "space" and
"options": JSON text of the space (names, bounds, scales, integer flags, options) and of
the tuner's options with their defaults, "key": the base key's data, "asks" and
"tells": counters, "state.<field>": the state's leaves), ready for `np.savez`;
`load_state_dict(d)` (a dict, or what `np.load` returns) validates it field by field
(names, the space and options, naming what differs, shapes, dtypes, finiteness,
counters and indices in range), then restores it exactly: the next asks equal those
the saved tuner would have made. Sizes come first: the text entries are at most MAX_TEXT
characters, and an `np.load`ed .npz file's shapes and dtypes are read from its headers
before any array is (a small compressed file can hold a huge array); JSON nested past
the parser's recursion limit is refused like any other malformed text. Load into a
HostTuner built with the same name, space and options. A state saved before "space" and
"options" were stored loads with a warning (nothing to check them against; save it again).

Pickling: a HostTuner pickles as its name, space, options, seed, device platform and
`state_dict()` (PICKLE_FORMAT); unpickling builds it again (compiling, on the first device
of that platform, or with a warning on the CPU where this machine has none: the state is
NumPy) and loads the state, so the copy continues exactly as the original would. A pickle
of an older hcjax loads the same way (a Space or Hyperparameter pickled before a field
existed is built again from its hyperparameters, the new fields at their defaults); one
whose format or state does not fit this version is a ValueError saying so.

Threads: a HostTuner is not thread-safe. ask, tell and load_state_dict replace its
state (whose buffers the previous call donated) and its counters without a lock: one
instance must not be used from two threads at once (guard it with a lock, or give each
thread its own HostTuner; separate instances are independent).
"""
from __future__ import annotations

import json
import threading
import warnings
import zipfile
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from hcjax.space import Space, real_scalar
from hcjax.tuner import Tuner, check_int, check_objective
from hcjax.tuners import make_tuner
from hcjax.tuners import options as tuner_options

MAX_ASKS = 2 ** 32 - 2  # fold_in takes a uint32: ask k uses k + 1
# Scalar state fields that count told objectives: each lies in [0, tells].
TELL_COUNTERS = ("state.n_invalid", "state.t", "state.n_obs")
SHARED_PROGRAMS = 32  # compiled (init, ask, tell) kept for later HostTuners of the same name, space, options
MAX_TEXT = 2**20  # characters of a state's text entries ('tuner', 'space', 'options'); read only below it
PICKLE_FORMAT = 1  # the layout of HostTuner.__getstate__; the pickles before it have no "format" (read too)
PICKLED = ("name", "space", "seed", "options", "platform", "state_dict")  # what every such pickle holds


class Programs(NamedTuple):
    """A tuner's jitted calls as a HostTuner runs them: init(key) -> state;
    ask(state, base key, asks) -> (state, asks + 1, values (h,)) with the key fold_in(base,
    asks + 1); tell(state, objective) -> state. ask and tell donate the state (and ask the
    counter)."""

    init: Callable
    ask: Callable
    tell: Callable


_programs: OrderedDict[tuple, Programs] = OrderedDict()
_programs_lock = threading.Lock()


def _option_json(value) -> list:
    """A non-JSON option (a NumPy or JAX number or array) -> [dtype, nested list]."""
    a = np.asarray(value)
    return [str(a.dtype), a.tolist()]


def shared_programs(tuner: Tuner, options: dict) -> Programs:
    """The jitted calls of `tuner` (= make_tuner(tuner.name, tuner.space, **options)), the
    same objects for every tuner built with the same name, space (every field of every
    hyperparameter, exactly) and options: a jitted function compiles once per input
    shapes and device, so later HostTuners reuse its compilations. The `SHARED_PROGRAMS`
    most recently used sets are kept."""
    key = (tuner.name, repr(tuner.space.hyperparameters), json.dumps(options, sort_keys=True, default=_option_json))
    with _programs_lock:
        if key in _programs:
            _programs.move_to_end(key)
            return _programs[key]

    def ask(state, base, asks):
        state, values = tuner.ask(state, jax.random.fold_in(base, asks + 1))
        return state, asks + 1, values

    # Committed inputs place the compiled calls on the HostTuner's device.
    programs = Programs(init=jax.jit(tuner.init), ask=jax.jit(ask, donate_argnums=(0, 2)),
                        tell=jax.jit(tuner.tell, donate_argnums=0))
    with _programs_lock:
        programs = _programs.setdefault(key, programs)
        while len(_programs) > SHARED_PROGRAMS:
            _programs.popitem(last=False)
    return programs


def host_device(device) -> jax.Device:
    """A jax Device, or a platform name ("cpu", "gpu", "cuda", "rocm", "tpu": the first
    device of that platform) -> the Device; a ValueError naming `device` otherwise."""
    if isinstance(device, jax.Device):
        return device
    if isinstance(device, str):
        try:
            return jax.devices(device)[0]
        except RuntimeError as e:
            raise ValueError(f"HostTuner.device: no {device!r} device here ({e}); pass a jax Device or a platform "
                             f"name with devices, e.g. 'cpu'") from None
    raise ValueError(f"HostTuner.device must be a jax Device or a platform name such as 'cpu' or 'gpu', "
                     f"got {device!r}")


class HostTuner:
    """A tuner driven from Python: `ask() -> {name: value}`, `tell(objective)`.

    name, space, options: as `make_tuner(name, space, **options)` (the same ValueErrors,
    including `memory_limit_gib`); seed: integer in [0, 2**32 - 1], see the key schedule
    in the module docstring; device: where the state lives and the compiled calls run
    (a jax Device or a platform name, default: the first CPU device).
    Not thread-safe; picklable (module docstring).
    """

    def __init__(self, name: str, space: Space, seed: int = 0, *, device: jax.Device | str | None = None,
                 **options):
        seed = check_int("HostTuner.seed", seed, 0, 2 ** 32 - 1)
        self.device = host_device("cpu" if device is None else device)
        self.tuner = make_tuner(name, space, **options)
        self.name, self.space = self.tuner.name, self.tuner.space
        self._seed, self._options = seed, dict(options)
        programs = shared_programs(self.tuner, self._options)
        self._ask, self._tell = programs.ask, programs.tell
        self._key = jax.device_put(jax.random.PRNGKey(seed), self.device)
        self._state = programs.init(jax.random.fold_in(self._key, 0))
        self._asks = jax.device_put(jnp.zeros((), jnp.uint32), self.device)  # read by the compiled ask
        self._n_asks, self._n_tells = 0, 0  # host copies: no device read per call
        paths, self._treedef = jax.tree_util.tree_flatten_with_path(self._state)
        self._leaf_names = ["state" + jax.tree_util.keystr(path) for path, _ in paths]

    def __repr__(self):
        return f"HostTuner({self.name!r}, {list(self.space.names)}, asks={self.n_asks}, tells={self.n_tells})"

    def __getstate__(self) -> dict:
        return {"format": PICKLE_FORMAT, "name": self.name, "space": self.space, "seed": self._seed,
                "options": self._options, "platform": self.device.platform, "state_dict": self.state_dict()}

    def __setstate__(self, pickled: dict) -> None:
        version = pickled.get("format") if isinstance(pickled, dict) else None
        missing = [k for k in PICKLED if k not in pickled] if isinstance(pickled, dict) else list(PICKLED)
        if version not in (None, PICKLE_FORMAT) or missing:
            raise ValueError(f"HostTuner: this pickle was written by another version of hcjax (format {version}, "
                             f"missing {missing}); this one reads format {PICKLE_FORMAT} and the unversioned "
                             f"pickles before it: build the HostTuner again (and load a state_dict() if you saved one)")
        device = pickled["platform"]
        try:
            host_device(device)
        except ValueError:
            warnings.warn(f"HostTuner({pickled['name']!r}) was pickled on a {device!r} device, which this machine "
                          f"lacks: it runs on the CPU (its state is NumPy, the numbers are the same)", stacklevel=2)
            device = "cpu"
        self.__init__(pickled["name"], pickled["space"], pickled["seed"], device=device, **pickled["options"])
        try:
            self.load_state_dict(pickled["state_dict"])
        except ValueError as e:
            if version is not None:
                raise
            raise ValueError(f"HostTuner: this pickle was written by an older version of hcjax, whose state does not "
                             f"fit this one's ({e})") from None

    @property
    def state(self):
        """The tuner's state pytree (arrays on `device`; do not keep it across calls: donated)."""
        return self._state

    @property
    def n_asks(self) -> int:
        return self._n_asks

    @property
    def n_tells(self) -> int:
        return self._n_tells

    @property
    def n_invalid(self) -> int:
        """Objectives told that were ignored (non-finite or |x| > 1e15), as every tuner counts them."""
        return int(self._state.n_invalid)

    def ask(self) -> dict:
        """The next configuration: {name: value} in natural units, in the space's order;
        the option itself (as given to `Hyperparameter.choice`) for a categorical, Python
        int for integer hyperparameters, Python float otherwise."""
        if self._n_asks > MAX_ASKS:
            raise ValueError(f"HostTuner({self.name!r}).ask: at most {MAX_ASKS + 1} asks (the key schedule's counter "
                             "is a uint32)")
        self._state, self._asks, values = self._ask(self._state, self._key, self._asks)
        self._n_asks += 1
        out = {}
        for p, v in zip(self.space.hyperparameters, np.asarray(values).tolist()):
            out[p.name] = p.option_at(v) if p.options is not None else int(v) if p.integer else float(v)
        return out

    def tell(self, objective) -> None:
        """Report one objective of the configuration in effect (higher is better): a Python,
        NumPy or 0-d JAX number. Non-finite or huge ones are ignored and counted (`n_invalid`)."""
        check_objective(f"HostTuner({self.name!r})", objective)
        with np.errstate(over="ignore"):
            x = np.float32(real_scalar(objective))
        self._state = self._tell(self._state, x)
        self._n_tells += 1

    def state_dict(self) -> dict[str, np.ndarray]:
        """Copies of everything `load_state_dict` needs, as NumPy arrays (see module docstring)."""
        out = {"tuner": np.asarray(self.name), **{k: np.asarray(json.dumps(v)) for k, v in self._identity().items()},
               "key": np.array(self._key), "asks": np.asarray(self._n_asks, np.uint32),
               "tells": np.asarray(self._n_tells, np.int64)}
        for name, leaf in zip(self._leaf_names, jax.tree_util.tree_leaves(self._state)):
            out[name] = np.array(leaf)
        return out

    def _identity(self) -> dict[str, list | dict]:
        """{"space": one dict per hyperparameter (name, low, high, scale, integer, options),
        "options": the tuner's options with their defaults (memory_limit_gib aside)}, as
        JSON values: what a state means depends on both."""
        space = [{"name": p.name, "low": p.low, "high": p.high, "scale": p.scale, "integer": p.integer,
                  "options": None if p.options is None else list(p.options)} for p in self.space.hyperparameters]
        options = {**tuner_options(self.name), **self._options}
        options.pop("memory_limit_gib", None)
        return {"space": space, "options": json.loads(json.dumps(options, default=lambda o: np.asarray(o).tolist()))}

    def _layout(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """name -> (shape, dtype) of every entry of `state_dict()`, without copying."""
        layout = {"key": (self._key.shape, self._key.dtype), "asks": ((), np.dtype(np.uint32)),
                  "tells": ((), np.dtype(np.int64))}
        for name, leaf in zip(self._leaf_names, jax.tree_util.tree_leaves(self._state)):
            layout[name] = (tuple(leaf.shape), np.dtype(leaf.dtype))
        return layout

    def load_state_dict(self, d: Mapping) -> None:
        """Restore a `state_dict()` (a dict, or `np.load(path)` of an `np.savez` file).
        ValueError naming the field, leaving this tuner unchanged, for a missing or
        unexpected entry, another tuner's name, a shape or dtype that differs from this
        tuner's (other options), a non-finite float, or a counter out of range ('tells'
        < 0, a negative integer in the state, a count of told objectives above 'tells')."""
        arrays = self._checked_arrays(d)
        leaves = [jax.device_put(arrays[name], self.device) for name in self._leaf_names]
        self._state = jax.tree_util.tree_unflatten(self._treedef, leaves)
        self._key = jax.device_put(arrays["key"], self.device)
        self._asks = jax.device_put(arrays["asks"], self.device)
        self._n_asks = int(arrays["asks"])
        self._n_tells = int(arrays["tells"])

    def _checked_arrays(self, d: Mapping) -> dict[str, np.ndarray]:
        """{name: private NumPy copy} of a state dict after every check of `load_state_dict`."""
        where = f"HostTuner({self.name!r}).load_state_dict"
        if not isinstance(d, Mapping):
            raise ValueError(f"{where}: expected a mapping of names to arrays (a state_dict() or np.load(path)), "
                             f"got {type(d).__name__}")
        layout = self._layout()
        identity = self._identity()
        expected = set(layout) | {"tuner"} | set(identity)
        missing, unexpected = sorted(expected - set(d)), sorted(set(d) - expected)
        if missing == sorted(identity) and not unexpected:
            warnings.warn(f"{where}: a state saved without its space and options (by an older hcjax): they cannot be "
                          f"checked against this tuner's; save it again", stacklevel=3)
        elif missing or unexpected:
            raise ValueError(f"{where}: missing entries {missing}, unexpected entries {unexpected}; expected "
                             f"{sorted(expected)}")
        for name in ("tuner", *identity):  # sizes first, from an .npz file's headers: nothing large is read
            if name in d:
                shape, dtype = stored_layout(d, name, where)
                if shape != () or dtype.kind != "U" or dtype.itemsize > 4 * MAX_TEXT:
                    raise ValueError(f"{where}: {name!r} must be a text of at most {MAX_TEXT} characters (as "
                                     f"state_dict() writes it), got shape {shape} and dtype {dtype}")
        if str(np.asarray(d["tuner"])) != self.name:
            raise ValueError(f"{where}: 'tuner' must be {self.name!r}, got {d['tuner']!r}")
        for field, here in identity.items():
            if field in d:
                check_identity(where, field, d[field], here)
        for name, (shape, dtype) in layout.items():
            stored = stored_layout(d, name, where)
            if stored != (shape, dtype):
                raise ValueError(f"{where}: {name!r} must have shape {shape} and dtype {dtype}, got shape {stored[0]} "
                                 f"and dtype {stored[1]} (a checkpoint of other options or another space?)")
        arrays = {}
        for name in layout:
            a = np.array(d[name])  # a private copy: the device may alias it, and donation overwrites
            if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
                raise ValueError(f"{where}: {name!r} has non-finite entries")
            if name.startswith("state") and a.dtype.kind in "iu" and np.any(a < 0):
                raise ValueError(f"{where}: {name!r} must be >= 0 (counters and indices), got {a.min()}")
            arrays[name] = a
        for field, bound in self.tuner.index_bounds:
            a, b = arrays[f"state.{field}"], np.asarray(bound)
            if np.any(a >= b.reshape(b.shape + (1,) * (a.ndim - b.ndim))):
                limit = bound if b.ndim == 0 else f"{list(bound)} (one per hyperparameter)"
                raise ValueError(f"{where}: 'state.{field}' holds indices up to {a.max()}, out of this tuner's range "
                                 f"(entries must be < {limit}); a state of other options or another space?")
        tells = int(arrays["tells"])
        if tells < 0:
            raise ValueError(f"{where}: 'tells' must be >= 0, got {tells}")
        for name in TELL_COUNTERS:
            if name in arrays and arrays[name].shape == () and int(arrays[name]) > tells:
                raise ValueError(f"{where}: {name!r} counts told objectives, so it must be <= 'tells' = {tells}, got "
                                 f"{int(arrays[name])}")
        return arrays


def stored_layout(d: Mapping, name: str, where: str) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) of entry `name` of a state dict; of an `np.load`ed .npz file read from
    the entry's header (its data is not read: a small compressed file can hold a huge array).
    ValueError naming the entry when it is not a NumPy array file."""
    if not isinstance(d, np.lib.npyio.NpzFile):
        a = np.asarray(d[name])
        return a.shape, a.dtype
    member = f"{name}.npy" if f"{name}.npy" in d.zip.namelist() else name
    try:
        with d.zip.open(member) as f:
            version = np.lib.format.read_magic(f)
            read = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
            if version not in read:
                raise ValueError(f"format version {version}")
            shape, _, dtype = read[version](f)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
        raise ValueError(f"{where}: {name!r} is not a NumPy array as np.savez writes it ({e})") from None
    return tuple(shape), np.dtype(dtype)


def check_identity(where: str, field: str, saved, here: list | dict) -> None:
    """ValueError naming what differs between a saved state's "space" or "options" (JSON
    text, `HostTuner._identity`) and this tuner's."""
    try:
        value = json.loads(str(np.asarray(saved)))
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser's recursion limit
        raise ValueError(f"{where}: {field!r} must be JSON text (as state_dict() writes it: a list of "
                         f"hyperparameters, a table of options), got {str(np.asarray(saved))[:200]!r}") from None
    if field == "options":
        differ = _differences(value, here) if isinstance(value, dict) else [f"{value!r} saved"]
    elif isinstance(value, list) and all(isinstance(p, dict) for p in value) and len(value) == len(here):
        differ = [f"hyperparameter {i} ({b['name']!r}) {d}" for i, (a, b) in enumerate(zip(value, here))
                  for d in _differences(a, b)]
    else:
        names = [p.get("name") for p in value if isinstance(p, dict)] if isinstance(value, list) else value
        differ = [f"hyperparameters {names!r} saved, {[p['name'] for p in here]} here"]
    if differ:
        raise ValueError(f"{where}: {field!r} differs from this tuner's: {'; '.join(differ)} (a state saved over "
                         f"another {'space' if field == 'space' else 'set of options'} would mean other values; "
                         f"build the HostTuner as the saved one was)")


def _differences(saved: dict, here: dict) -> list[str]:
    """'<key> <saved> saved, <here> here' for every key whose values differ."""
    return [f"{k} {saved.get(k, '<absent>')!r} saved, {here.get(k, '<absent>')!r} here"
            for k in sorted(set(saved) | set(here)) if saved.get(k, "<absent>") != here.get(k, "<absent>")]
