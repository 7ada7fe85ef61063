"""Hyperparameter spaces: bounds, scales, categorical options, grids of arms, and the
[0, 1] encoding.

A `Space` of h `Hyperparameter`s is static configuration (plain Python, never traced).
Its array-valued methods (`encode`, `decode`, `clip`, `snap`, `natural`) are pure jnp
functions that work under `jit` and `vmap`.

Categorical hyperparameters (`Hyperparameter.choice(name, options)`): a tuner's values
hold the OPTION INDEX (0..k-1, as float32), an integer hyperparameter on [0, k-1]. In
[0, 1] units option i is the bin [i/k, (i+1)/k): decode(u) = min(floor(u k), k - 1), so
a uniform u draws every option with probability 1/k, and encode(i) = (i + 0.5) / k, the
bin centre. Methods that model the unit cube (the GP tuners, pb2) therefore see the
options as ordered points: adjacent options are treated as similar, so list them in a
meaningful order. `natural(values)` swaps the index for the option's value where every
option is a number; `as_dict` and `names_to_values` give the option (module docs/tuners.md).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence

import jax.numpy as jnp
import numpy as np

SCALES = ("linear", "log")
FLOAT32_MAX = float(np.finfo(np.float32).max)  # 3.4028235e38, the largest finite float32
FLOAT32_TINY = float(np.finfo(np.float32).tiny)  # 1.1754944e-38, the smallest normal float32


def real_scalar(value) -> float | None:
    """A real number -> Python float, or None if `value` is not one.

    Accepted: Python int and float, NumPy and JAX scalars and 0-d arrays of integer or
    floating dtype. Refused (None): bools (Python, NumPy or bool dtype), other shapes,
    other types, tracers. Python ints too large for a float give +-inf.
    """
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    dtype = getattr(value, "dtype", None)
    if dtype is None or getattr(value, "shape", None) != ():
        return None
    if not (jnp.issubdtype(dtype, jnp.integer) or jnp.issubdtype(dtype, jnp.floating)):
        return None
    try:
        return float(value)
    except TypeError:  # a tracer: no concrete value
        return None


def integer_scalar(value) -> int | None:
    """An integer -> Python int, or None: Python int, NumPy and JAX integer scalars and
    0-d integer arrays; bools, floats (even 3.0) and everything else give None."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, int):
        return value
    dtype = getattr(value, "dtype", None)
    if dtype is None or getattr(value, "shape", None) != () or not jnp.issubdtype(dtype, jnp.integer):
        return None
    try:
        return int(value)
    except TypeError:  # a tracer
        return None


def option_value(name: str, i: int, option) -> str | int | float:
    """One categorical option checked: a str, or a finite real number representable in
    float32 (Python, NumPy or JAX scalar; not a bool), returned as str, int or float."""
    if isinstance(option, str):
        return option
    n = integer_scalar(option)
    v = real_scalar(option)
    if v is None or not math.isfinite(v) or abs(v) > FLOAT32_MAX:
        raise ValueError(f"Hyperparameter {name!r}: options[{i}] must be a str or a finite number representable in "
                         f"float32 (|x| <= {FLOAT32_MAX:.8g}; not a bool), got {option!r}")
    return n if n is not None else v


def option_key(option) -> tuple | None:
    """What options are compared by: ("str", s) or ("number", float32 value as float);
    None for anything else (bools included)."""
    if isinstance(option, str):
        return ("str", option)
    v = real_scalar(option)
    if v is None or not math.isfinite(v) or abs(v) > FLOAT32_MAX:
        return None
    return ("number", float(np.float32(v)))


def check_options(name: str, options) -> tuple:
    """`options` -> a tuple of >= 2 distinct options (`option_value`), or a ValueError
    naming the hyperparameter. Numbers must stay distinct in float32."""
    if isinstance(options, (str, bytes)) or not isinstance(options, (Sequence, np.ndarray)):
        raise ValueError(f"Hyperparameter {name!r}: options must be a list or tuple of at least 2 distinct values "
                         f"(str or numbers), got {options!r}")
    checked = tuple(option_value(name, i, o) for i, o in enumerate(options))
    if len(checked) < 2:
        raise ValueError(f"Hyperparameter {name!r}: options must hold at least 2 values, got {list(checked)}")
    keys = [option_key(o) for o in checked]
    if len(set(keys)) != len(keys):
        raise ValueError(f"Hyperparameter {name!r}: options must be distinct (numbers compared in float32), got "
                         f"{list(checked)}")
    return checked


def whole_float32(x: float) -> bool:
    """`x` is a whole number that float32 holds exactly (values are computed in float32)."""
    return float(x).is_integer() and float(np.float32(x)) == x


@dataclasses.dataclass(frozen=True)
class Hyperparameter:
    """One tuned hyperparameter.

    name: unique name; low < high: inclusive bounds in natural units;
    scale: "linear" or "log" (log needs low > 0); integer: values are rounded, and
    low and high must be whole numbers exact in float32 (so every value is inside them);
    default: the value used by the `fixed` tuner (None: the middle of the scale).
    options: None, or the k >= 2 options of a categorical hyperparameter (build it with
    `Hyperparameter.choice`): then low = 0, high = k - 1, integer, linear, and values
    and default are option indices (default None: 0, the first option; module docstring).

    Values are stored and computed in float32, so low, high and default must be finite
    with |x| <= 3.4028235e38 (FLOAT32_MAX), low < high must still hold in float32, a
    linear range must have high - low <= FLOAT32_MAX, and a log scale needs
    low >= 1.1754944e-38 (float32's smallest normal number). Numbers may be Python,
    NumPy or JAX scalars (stored as Python floats); bools are refused.
    """

    name: str
    low: float
    high: float
    scale: str = "linear"
    integer: bool = False
    default: float | None = None
    options: tuple | None = None

    @classmethod
    def choice(cls, name: str, options, default=None) -> Hyperparameter:
        """A categorical hyperparameter over `options` (>= 2 distinct str or numbers;
        bools refused). default: one of the options (None: the first); the tuners'
        values and `default` hold option indices."""
        options = check_options(name, options)
        keys = [option_key(o) for o in options]
        index = 0 if default is None else next((i for i, k in enumerate(keys) if k == option_key(default)), None)
        if index is None:
            raise ValueError(f"Hyperparameter {name!r}: default must be one of the options {list(options)}, got "
                             f"{default!r}")
        return cls(name, 0, len(options) - 1, integer=True, default=index, options=options)

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"Hyperparameter.name must be a non-empty string, got {self.name!r}")
        where = f"Hyperparameter {self.name!r}"
        for field in ("low", "high", "default"):
            value = getattr(self, field)
            if field == "default" and value is None:
                continue
            v = real_scalar(value)
            if v is None or not math.isfinite(v) or abs(v) > FLOAT32_MAX:
                raise ValueError(
                    f"{where}: {field} must be a finite number representable in float32 (|x| <= {FLOAT32_MAX:.8g}; "
                    f"a Python, NumPy or JAX scalar, not a bool), got {value!r}")
            object.__setattr__(self, field, v)
        if not isinstance(self.integer, (bool, np.bool_)):
            raise ValueError(f"{where}: integer must be True or False, got {self.integer!r}")
        object.__setattr__(self, "integer", bool(self.integer))
        if not self.low < self.high:
            raise ValueError(f"{where}: low must be < high, got low={self.low}, high={self.high}")
        low32, high32 = np.float32(self.low), np.float32(self.high)
        if not low32 < high32:
            raise ValueError(f"{where}: low must be < high in float32 (the precision values are stored in), got "
                             f"low={self.low!r} and high={self.high!r}, both {low32!r} in float32")
        if self.scale not in SCALES:
            raise ValueError(f"{where}: scale must be one of {SCALES}, got {self.scale!r}")
        if self.scale == "log" and self.low <= 0:
            raise ValueError(f"{where}: scale='log' needs low > 0, got low={self.low}")
        if self.scale == "log" and self.low < FLOAT32_TINY:
            raise ValueError(f"{where}: scale='log' needs low >= {FLOAT32_TINY:.8g} (float32's smallest normal "
                             f"number), got low={self.low!r}")
        if self.scale == "linear" and float(high32) - float(low32) > FLOAT32_MAX:
            raise ValueError(f"{where}: a linear scale needs high - low <= {FLOAT32_MAX:.8g} (float32's largest "
                             f"number), got high - low = {float(high32) - float(low32):.8g}")
        if self.integer and not all(whole_float32(x) for x in (self.low, self.high)):
            raise ValueError(f"{where}: integer=True: bounds must be whole numbers, exact in float32 (every "
                             f"integer up to 2**24 = {2 ** 24} is), got low={self.low!r}, high={self.high!r}")
        if self.default is not None and not self.low <= self.default <= self.high:
            raise ValueError(
                f"{where}: default must lie in [low, high] = [{self.low}, {self.high}], got {self.default}")
        if self.options is not None:
            self._check_categorical(where)

    def _check_categorical(self, where: str) -> None:
        """A categorical's options checked and its bounds, scale and integer tied to them."""
        options = check_options(self.name, self.options)
        object.__setattr__(self, "options", options)
        k = len(options)
        if (self.low, self.high, self.integer, self.scale) != (0.0, float(k - 1), True, "linear"):
            raise ValueError(f"{where}: options given: low must be 0, high {k - 1} (k - 1 for k = {k} options), "
                             f"integer True and scale 'linear' (use Hyperparameter.choice), got low={self.low}, "
                             f"high={self.high}, integer={self.integer}, scale={self.scale!r}")
        if self.default is None:
            object.__setattr__(self, "default", 0.0)  # the first option
        elif not float(self.default).is_integer():
            raise ValueError(f"{where}: default is an option index, a whole number in [0, {k - 1}], got "
                             f"{self.default}")

    @property
    def n_options(self) -> int:
        """k for a categorical, 0 otherwise."""
        return 0 if self.options is None else len(self.options)

    def option_at(self, index) -> str | int | float:
        """A categorical's option at a tuner value: the index rounded and clipped to [0, k - 1]
        (a ValueError naming the hyperparameter for NaN)."""
        if np.isnan(index):
            raise ValueError(f"Hyperparameter {self.name!r}: a categorical's value is an option index in "
                             f"[0, {self.n_options - 1}], got NaN")
        return self.options[int(np.clip(np.round(index), 0, self.n_options - 1))]

    @property
    def default_value(self) -> float:
        """The `default`, or the middle of the scale (geometric mean for log)."""
        if self.default is not None:
            return float(self.default)
        if self.scale == "log":
            value = math.sqrt(self.low * self.high)
        else:
            value = 0.5 * (self.low + self.high)
        return float(round(value)) if self.integer else value


class Space:
    """An ordered set of h hyperparameters; values are (h,) arrays in this order.

    Categoricals (module docstring): `is_categorical` (h,) bool, `n_options` (h,) int
    (0 for the others); values hold option indices; `natural(values)` (..., h) gives
    the option values of all-numeric categoricals (indices of the others, under jit);
    `as_dict` gives numeric options' values (float32) and string options' int32 index
    (for `lax.switch`); `names_to_values` (host) gives the option itself.
    """

    def __init__(self, hyperparameters: Iterable[Hyperparameter]):
        params = tuple(hyperparameters)
        if not params:
            raise ValueError("Space.hyperparameters must not be empty")
        for p in params:
            if not isinstance(p, Hyperparameter):
                raise ValueError(f"Space.hyperparameters must be Hyperparameter objects, got {type(p).__name__}")
        names = [p.name for p in params]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"Space.hyperparameters: duplicate names {duplicates}")
        self.hyperparameters = params
        self.names = tuple(names)
        self.h = len(params)
        self.low = np.array([p.low for p in params], np.float32)
        self.high = np.array([p.high for p in params], np.float32)
        self.is_log = np.array([p.scale == "log" for p in params])
        self.is_integer = np.array([p.integer for p in params])
        self.default = np.array([p.default_value for p in params], np.float32)
        self.n_options = np.array([p.n_options for p in params], np.int64)
        self.is_categorical = self.n_options > 0
        # Numeric categoricals: (h, K) option values (row i padded with its last option).
        self.is_numeric_choice = np.array([p.options is not None and all(not isinstance(o, str) for o in p.options)
                                           for p in params])
        width = max(1, int(self.n_options.max()))
        self._option_values = np.zeros((self.h, width), np.float32)
        for i, p in enumerate(params):
            if self.is_numeric_choice[i]:
                row = [float(o) for o in p.options]
                self._option_values[i] = row + row[-1:] * (width - len(row))
        # Bounds in the transformed (log or linear) coordinates, as float64 for accuracy.
        lo64 = np.array([p.low for p in params], np.float64)
        hi64 = np.array([p.high for p in params], np.float64)
        self._lo = np.where(self.is_log, np.log(np.where(self.is_log, lo64, 1.0)), lo64)
        self._hi = np.where(self.is_log, np.log(np.where(self.is_log, hi64, 1.0)), hi64)

    def __repr__(self):
        return f"Space({list(self.hyperparameters)})"

    def __len__(self):
        return self.h

    def grid(self, d: int) -> np.ndarray:
        """(h, d) float32: the d arms of each hyperparameter, evenly spaced on its scale.

        Integer hyperparameters are rounded; when d exceeds the number of integers in
        range some arms repeat a value, which is harmless (they are distinct arms with
        equal values). A categorical's row is the option indices that the d evenly spaced
        points of [0, 1] decode to (its bins); HyperController uses `arm_grid` instead.
        """
        n = integer_scalar(d)
        if n is None or n < 2:
            raise ValueError(f"grid: d must be an integer >= 2, got {d!r}")
        u = np.linspace(0.0, 1.0, n)
        return np.asarray(self._decode_np(np.broadcast_to(u, (self.h, n)).T).T, np.float32)

    def arm_grid(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        """HyperController's arms: ((h, D) float32 values, (h,) int32 arm counts n_arms).

        n_arms[i] = k for a categorical (arm j = option j), d otherwise (the values of
        `grid(d)`); D = max(n_arms). Rows shorter than D are padded with their last
        value: arms j >= n_arms[i] exist only in the array and must never be chosen.
        """
        grid = self.grid(d)
        n_arms = np.where(self.is_categorical, self.n_options, grid.shape[1]).astype(np.int32)
        D = int(n_arms.max())
        arms = np.zeros((self.h, D), np.float32)
        for i in range(self.h):
            row = np.arange(n_arms[i], dtype=np.float32) if self.is_categorical[i] else grid[i]
            arms[i] = np.concatenate([row, np.full(D - n_arms[i], row[-1], np.float32)])
        return arms, n_arms

    def _decode_np(self, u: np.ndarray) -> np.ndarray:
        x = self._lo + u * (self._hi - self._lo)
        x = np.where(self.is_log, np.exp(np.where(self.is_log, x, 0.0)), x)
        x = np.where(self.is_integer, np.round(x), x)
        if self.is_categorical.any():
            k = np.maximum(self.n_options, 1)
            x = np.where(self.is_categorical, np.minimum(np.floor(np.clip(u, 0.0, 1.0) * k), k - 1), x)
        return np.clip(x.astype(np.float32), self.low, self.high)

    def sample(self, n: int, seed: int) -> np.ndarray:
        """(n, h) float32: n configurations drawn uniformly on the hyperparameters' scales
        (log-uniform on a log scale, integers rounded, a categorical's options equally likely)
        from NumPy's generator seeded with `seed` (NumPy, outside jit: e.g. a sweep's plan)."""
        return self._decode_np(np.random.default_rng(seed).random((int(n), self.h)))

    def unit_grid(self, d: int) -> np.ndarray:
        """(h, d) float32: the arms of `grid(d)` encoded in [0, 1] (NumPy, static)."""
        x = self.grid(d).astype(np.float64).T  # (d, h)
        x = np.where(self.is_log, np.log(np.where(self.is_log, x, 1.0)), x)
        u = np.clip((x - self._lo) / (self._hi - self._lo), 0.0, 1.0)
        if self.is_categorical.any():
            u = np.where(self.is_categorical, (x + 0.5) / np.maximum(self.n_options, 1), u)
        return u.T.astype(np.float32)

    def decode(self, unit: jnp.ndarray) -> jnp.ndarray:
        """(..., h) in [0, 1] -> (..., h) natural units inside bounds (rounded for integers;
        option index min(floor(u k), k - 1) for a categorical of k options)."""
        u = jnp.clip(jnp.asarray(unit, jnp.float32), 0.0, 1.0)
        lo, hi = jnp.asarray(self._lo, jnp.float32), jnp.asarray(self._hi, jnp.float32)
        x = lo + u * (hi - lo)
        x = jnp.where(self.is_log, jnp.exp(x), x)
        if self.is_categorical.any():
            k = jnp.asarray(np.maximum(self.n_options, 1), jnp.float32)
            x = jnp.where(self.is_categorical, jnp.minimum(jnp.floor(u * k), k - 1.0), x)
        return self.clip(x)

    def encode(self, values: jnp.ndarray) -> jnp.ndarray:
        """(..., h) natural units -> (..., h) in [0, 1] (inverse of `decode` up to rounding;
        (i + 0.5) / k, the centre of its bin, for option index i of k)."""
        x = jnp.asarray(values, jnp.float32)
        x = jnp.where(self.is_log, jnp.log(jnp.maximum(x, jnp.asarray(self.low))), x)
        lo, hi = jnp.asarray(self._lo, jnp.float32), jnp.asarray(self._hi, jnp.float32)
        u = jnp.clip((x - lo) / (hi - lo), 0.0, 1.0)
        if self.is_categorical.any():
            k = np.maximum(self.n_options, 1).astype(np.float32)
            index = jnp.clip(jnp.round(x), 0.0, k - 1.0)
            u = jnp.where(self.is_categorical, (index + 0.5) / k, u)
        return u

    def clip(self, values: jnp.ndarray) -> jnp.ndarray:
        """(..., h): round integer hyperparameters and clip every value into its bounds."""
        x = jnp.where(self.is_integer, jnp.round(values), values)
        return jnp.clip(x, self.low, self.high)

    def snap(self, values: jnp.ndarray, d: int) -> jnp.ndarray:
        """(..., h) natural units -> (..., h) int32 index of the nearest of the d arms (in [0,1] units)."""
        arms = jnp.asarray(self.unit_grid(d))  # (h, d)
        u = self.encode(values)[..., None]  # (..., h, 1)
        return jnp.argmin(jnp.abs(u - arms), axis=-1).astype(jnp.int32)

    def index(self, name: str) -> int:
        """The position of hyperparameter `name` in values (h,); ValueError listing the
        names for an unknown one."""
        if not isinstance(name, str) or name not in self.names:
            raise ValueError(f"Space: unknown hyperparameter {name!r}; the names are {list(self.names)}")
        return self.names.index(name)

    def value(self, values: jnp.ndarray, name: str) -> jnp.ndarray:
        """values (..., h) -> (...,) the entries of hyperparameter `name` (a 0-d array for
        one configuration). Works under jit and vmap: the name is static."""
        return jnp.asarray(values)[..., self.index(name)]

    def as_dict(self, values: jnp.ndarray) -> dict[str, jnp.ndarray]:
        """values (..., h) -> {name: (...,) array} in the space's order (0-d arrays for one
        configuration). Works under jit and vmap (nothing leaves the device); for Python
        floats outside jit use `names_to_values`. Categoricals: the option value (float32)
        where all options are numbers, else the int32 option index (for `lax.switch`); either
        way the index is rounded and clipped to [0, k - 1], as `option_at` does."""
        x = jnp.asarray(values)
        if x.ndim < 1 or x.shape[-1] != self.h:
            raise ValueError(f"Space.as_dict: values must have shape (..., h) = (..., {self.h}), one entry per "
                             f"hyperparameter {list(self.names)}, got shape {tuple(x.shape)}")
        natural = self.natural(x)
        return {name: natural[..., i] if self.is_numeric_choice[i] else
                jnp.clip(jnp.round(x[..., i]), 0, self.n_options[i] - 1).astype(jnp.int32) if self.is_categorical[i]
                else x[..., i] for i, name in enumerate(self.names)}

    def natural(self, values: jnp.ndarray) -> jnp.ndarray:
        """(..., h) tuner values -> (..., h) float32 with the index of every categorical
        whose options are all numbers replaced by that option's value (a gather: works
        under jit and vmap); string-option categoricals keep the index, the rest is unchanged."""
        x = jnp.asarray(values, jnp.float32)
        if not self.is_numeric_choice.any():
            return x
        last = np.maximum(self.n_options - 1, 0).astype(np.float32)
        index = jnp.clip(jnp.round(x), 0.0, last).astype(jnp.int32)
        options = jnp.asarray(self._option_values)[jnp.arange(self.h), index]
        return jnp.where(self.is_numeric_choice, options, x)

    def names_to_values(self, values: Sequence[float] | np.ndarray) -> dict:
        """(h,) values -> {name: float, or the option itself (str or number) for a
        categorical}, for logs and tables (concrete values only: under jit use `as_dict`)."""
        out = {}
        for p, v in zip(self.hyperparameters, np.asarray(values)):
            out[p.name] = float(v) if p.options is None else p.option_at(v)
        return out


def unit_space(h: int) -> Space:
    """h linear hyperparameters on [0, 1], named x0..x{h-1}: the space of synthetic problems."""
    n = integer_scalar(h)
    if n is None or n < 1:
        raise ValueError(f"unit_space: h must be an integer >= 1, got {h!r}")
    return Space(Hyperparameter(f"x{i}", 0.0, 1.0) for i in range(n))


def ppo_space(batch_size: tuple[int, int] = (1000, 6000)) -> Space:
    """The paper's four PPO hyperparameters with the reference code's ranges.

    Learning rate on a log scale (the reference used a linear grid; log is what users expect).
    Defaults are the reference PPO's: lr 3e-4, clip 0.2, GAE lambda 0.95, batch size low end.
    """
    return Space([
        Hyperparameter("learning_rate", 1e-5, 1e-3, "log", default=3e-4),
        Hyperparameter("clip_eps", 0.1, 0.5, default=0.2),
        Hyperparameter("gae_lambda", 0.9, 1.0, default=0.95),
        Hyperparameter("batch_size", float(batch_size[0]), float(batch_size[1]), integer=True,
                       default=float(batch_size[0])),
    ])
