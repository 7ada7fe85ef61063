"""HyperController (Algorithm 1 of the paper), pure JAX.

For each hyperparameter i (independently), each context c (the last s arms chosen for
i, encoded in base d, d^s contexts) and each arm a, a ridge model predicts the next
objective from the last s objectives Xi = (X_{t-s}, ..., X_{t-1}):

    V[i, c, a] = ridge I + sum Xi Xi^T    (s, s)
    B[i, c, a] = sum X Xi                  (s,)
    G[i, c, a] = V^-1 B                    (s,)

ask: a_i = argmax_a G[i, c_i, a] . Xi (+ beta ||Xi||_{V^-1}, optional), ties broken
uniformly at random; uniform arms while fewer than s objectives were learned from.
tell: update the model (i, c_i, a_i) that made the prediction, then shift Xi and c_i.
Cost: ask O(h d s) (+ O(h d s^3) with beta > 0), tell O(h s^3 + h d s^2); no loops
over arms. The memory layout (ControllerState) and the tie-break (break_ties) are
chosen for speed on XLA:CPU, where many vmapped controllers are latency-bound.

Categorical hyperparameters: one arm per option. Hyperparameter i has n_arms[i] arms
(k options for a categorical, d otherwise, at the values of `space.grid(d)`); the arm
axis has size D = max(n_arms) (contexts in base D), and arms j >= n_arms[i] are masked:
never drawn by `init`, scored -inf by `ask` (a real arm's NaN score counts as
-FLOAT32_MAX, so it still beats them). Without categoricals D = d and nothing is masked.

Invalid objectives (non-finite, or |X| > MAX_ABS_OBJECTIVE) are ignored entirely: the
models, the window Xi, the contexts and t are left unchanged and `n_invalid` counts
them, so the controller behaves as if that iteration had not happened.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from hcjax import pytree
from hcjax.space import FLOAT32_MAX, Space
from hcjax.tuner import DEFAULT_MEMORY_LIMIT_GIB, Tuner, check_float, check_int, check_memory, register, valid_objective


class ModelViews:
    """The views V: (..., s, s), B and G: (..., s) of a state's `models` array packed by
    `pack_models` (s is the length of the state's `window`)."""

    @property
    def V(self) -> jax.Array:
        return unpack_models(self.models, self.window.shape[-1])[0]

    @property
    def B(self) -> jax.Array:
        return unpack_models(self.models, self.window.shape[-1])[1]

    @property
    def G(self) -> jax.Array:
        return unpack_models(self.models, self.window.shape[-1])[2]


@pytree.dataclass
class ControllerState(ModelViews):
    """models: (h, d^s, d, s*s + 2s) float32, the ridge model of each (hyperparameter,
    context, arm) packed as [V row-major (s*s) | B (s) | G (s)], so that a decision
    touches one memory line per hyperparameter (three separate arrays made tell
    memory-latency bound for many agents); the views V: (h, d^s, d, s, s), B, G:
    (h, d^s, d, s) read it. current: (h, d, s*s + 2s) a copy of models[i, c_i], the
    models of the current contexts, refreshed by tell after its update; ask and tell
    read it instead of the large array (gathering inside ask's reduction cost 2-3x: the
    latency-bound reads did not overlap there). history: (h, s) int32 last s arms,
    oldest first; window: (s,) last s objectives, oldest first; arms: (h,) int32 arms
    in effect; t: int32 objectives learned from; n_invalid: int32 objectives ignored.
    Leading batch axes (from vmap) are allowed everywhere."""

    models: jax.Array
    current: jax.Array
    history: jax.Array
    window: jax.Array
    arms: jax.Array
    t: jax.Array
    n_invalid: jax.Array


def pack_models(V: jax.Array, B: jax.Array, G: jax.Array) -> jax.Array:
    """(..., s, s), (..., s), (..., s) -> (..., s*s + 2s)"""
    return jnp.concatenate([V.reshape(V.shape[:-2] + (-1,)), B, G], axis=-1)


def unpack_models(m: jax.Array, s: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(..., s*s + 2s) -> V (..., s, s), B (..., s), G (..., s)"""
    return m[..., : s * s].reshape(m.shape[:-1] + (s, s)), m[..., s * s : s * s + s], m[..., s * s + s :]


def context_index(history: jax.Array, d: int) -> jax.Array:
    """(h, s) arms, oldest first -> (h,) int32 context index sum_k a_k d^(s-1-k)."""
    s = history.shape[-1]
    weights = jnp.asarray(d ** np.arange(s - 1, -1, -1), jnp.int32)
    return jnp.sum(history * weights, axis=-1).astype(jnp.int32)


def dot_last(a: jax.Array, w: jax.Array) -> jax.Array:
    """(..., s) . (..., s) (broadcast) -> (...): unrolled over the tiny static s (a
    reduction over a minor axis of size 2 or 3 is several times slower on CPU)."""
    return sum(a[..., k] * w[..., k] for k in range(w.shape[-1]))


def arm_scores(V: jax.Array, G: jax.Array, window: jax.Array, ready: jax.Array, beta: float) -> jax.Array:
    """Each arm's predicted next objective G . window, plus beta sqrt(window' V^-1 window)
    when beta > 0; 0 where not `ready` (fewer than s objectives learned from).
    V (..., s, s), G (..., s), window and ready broadcastable to (..., s) and (...)."""
    scores = dot_last(G, window)
    if beta > 0.0:
        w = solve_spd(V, jnp.broadcast_to(window, G.shape))
        scores = scores + beta * jnp.sqrt(jnp.maximum(dot_last(w, window), 0.0))
    return jnp.where(ready, scores, 0.0)


def check_options(name: str, d, s, ridge, beta) -> tuple[int, int, float, float]:
    """HyperController's options checked: d arms (>= 2), memory s (1..3), ridge > 0, beta >= 0."""
    return (check_int(f"{name}.d", d, 2), check_int(f"{name}.s", s, 1, 3),
            check_float(f"{name}.ridge", ridge, 0.0, low_open=True), check_float(f"{name}.beta", beta, 0.0))


def solve_spd(V: jax.Array, b: jax.Array) -> jax.Array:
    """(..., s, s) symmetric positive-definite V, (..., s) b -> (..., s) V^-1 b.

    An unrolled Cholesky solve for the tiny static s of the ridge models: elementwise
    ops over the batch, much cheaper on CPU than a batched LAPACK call.
    """
    s = V.shape[-1]
    L = [[None] * s for _ in range(s)]
    for i in range(s):
        for j in range(i + 1):
            acc = V[..., i, j] - sum(L[i][k] * L[j][k] for k in range(j))
            L[i][j] = jnp.sqrt(jnp.maximum(acc, 1e-30)) if i == j else acc / L[j][j]
    y = []
    for i in range(s):  # L y = b
        y.append((b[..., i] - sum(L[i][k] * y[k] for k in range(i))) / L[i][i])
    x = [None] * s
    for i in reversed(range(s)):  # L^T x = y
        x[i] = (y[i] - sum(L[k][i] * x[k] for k in range(i + 1, s))) / L[i][i]
    return jnp.stack(x, axis=-1)


_GOLDEN = np.uint32(0x9E3779B9)


def mix32(x: jax.Array) -> jax.Array:
    """uint32 -> uint32, the murmur3 finaliser: a bijection with full avalanche."""
    x = x ^ (x >> 16)
    x = x * np.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * np.uint32(0xC2B2AE35)
    return x ^ (x >> 16)


def key_word(key: jax.Array) -> jax.Array:
    """A PRNG key (raw uint32 or typed, any implementation) -> one uint32 word: its words
    folded through mix32. Used instead of `jax.random.bits`, whose threefry runs as a
    rolled while-loop on XLA:CPU and cost as much as the rest of a decision."""
    words = jax.random.key_data(key).reshape(-1)
    word = np.uint32(0x2545F491)
    for k in range(words.shape[0]):
        word = mix32(word ^ words[k])
    return word


def break_ties(key: jax.Array, scores: jax.Array) -> jax.Array:
    """(..., d) scores -> (...,) int32 argmax, uniform among exactly tied maxima.

    Arm j of row r gets the priority mix32(w ^ (r d + j) * golden), w = key_word(key).
    mix32 is a bijection, so the priorities of one call are distinct and the
    lexicographic maximum of (score, priority) is unique: one reduction over the arms
    picks a uniformly random one of the tied best arms (drawing a uniform per row and
    ranking the ties cost 4-6x more on XLA:CPU). NaN scores count as -inf.
    """
    counters = jnp.arange(scores.size, dtype=jnp.uint32).reshape(scores.shape) * _GOLDEN
    priority = mix32(key_word(key) ^ counters)
    scores = jnp.where(jnp.isnan(scores), -jnp.inf, scores)
    arm = jax.lax.broadcasted_iota(jnp.int32, scores.shape, scores.ndim - 1)

    def better(a, b):
        (sa, pa, ia), (sb, pb, ib) = a, b
        take_a = (sa > sb) | ((sa == sb) & (pa > pb))
        return jnp.where(take_a, sa, sb), jnp.where(take_a, pa, pb), jnp.where(take_a, ia, ib)

    init = (jnp.float32(-jnp.inf), jnp.uint32(0), jnp.int32(0))
    return jax.lax.reduce((scores.astype(jnp.float32), priority, arm), init, better, (scores.ndim - 1,))[2]


def masked_scores(scores: jax.Array, n_arms: jax.Array) -> jax.Array:
    """(..., h, D) scores, (h,) arm counts -> scores with arms j >= n_arms[i] at -inf and
    the real arms' NaN and -inf at -FLOAT32_MAX (so a real arm always wins)."""
    real = jnp.where(jnp.isnan(scores) | (scores == -jnp.inf), -FLOAT32_MAX, scores)
    arm = jnp.arange(scores.shape[-1])
    return jnp.where(arm < n_arms[:, None], real, -jnp.inf)


def controller_arms(space: Space, d: int) -> tuple[jax.Array, jax.Array, int, bool]:
    """(h, D) arm values, (h,) int32 arm counts, D, and whether any arm is masked
    (`Space.arm_grid`; D = d and no mask without categoricals)."""
    grid, n_arms = space.arm_grid(d)
    D = grid.shape[1]
    return jnp.asarray(grid), jnp.asarray(n_arms), D, bool(np.any(n_arms < D))


def draw_arms(key: jax.Array, n_arms: jax.Array, D: int, masked: bool) -> jax.Array:
    """(h,) int32 uniform initial arms, arm i in [0, n_arms[i])."""
    return jax.random.randint(key, n_arms.shape, 0, n_arms if masked else D, jnp.int32)


def arm_units(space: Space, grid: np.ndarray, n_arms: np.ndarray) -> np.ndarray:
    """(h, D) float32: each arm's position on its hyperparameter's scale in [0, 1] (a
    categorical's arm j: option j's bin centre), NaN for the masked arms j >= n_arms[i]."""
    with jax.ensure_compile_time_eval():  # constants even when the tuner is built inside a jit
        units = np.asarray(space.encode(jnp.asarray(grid.T))).T.copy()  # (h, D): column j is arm j of every row
    units[np.arange(grid.shape[1])[None, :] >= n_arms[:, None]] = np.nan
    return units.astype(np.float32)


def nearest_arms(space: Space, unit_arms: jax.Array, values: jax.Array) -> jax.Array:
    """(h,) int32: per hyperparameter, the arm nearest `values` (h,) on its scale (`arm_units`
    (h, D); a categorical: the option itself); of two equally near, the lower."""
    u = space.encode(space.clip(jnp.asarray(values, jnp.float32)))  # (h,)
    distance = jnp.where(jnp.isnan(unit_arms), jnp.inf, jnp.abs(unit_arms - u[:, None]))
    return jnp.argmin(distance, axis=1).astype(jnp.int32)


def controller_memory(h: int, d: int, s: int) -> int:
    """Estimated peak bytes of one controller: the state twice (a jitted tell returns a
    new copy of `models`, (h, d^s, d, s*s + 2s) float32) plus ask's (h, d, .) temporaries."""
    width = s * s + 2 * s
    state = 4 * (h * d ** s * d * width + h * d * width + h * s + s + h + 2)
    return 2 * state + 4 * h * d * (width + s + 2)


@register("hypercontroller")
def hypercontroller(space: Space, *, d: int = 10, s: int = 1, ridge: float = 1.0, beta: float = 0.0,
                    memory_limit_gib: float = DEFAULT_MEMORY_LIMIT_GIB) -> Tuner:
    """HyperController over `space` with d arms per hyperparameter, memory s, ridge
    lambda `ridge` and optimism bonus `beta` (0 = the paper's greedy algorithm); a
    categorical has one arm per option (module docstring). Memory per agent: about
    8 h D^(s+1) (s^2 + 2s) bytes, D = max(d, options) (`controller_memory`)."""
    d, s, ridge, beta = check_options("hypercontroller", d, s, ridge, beta)
    h = space.h
    grid, n_arms, D, masked = controller_arms(space, d)  # (h, D), (h,)
    memory = check_memory("hypercontroller", controller_memory(h, D, s), memory_limit_gib,
                          f"d={d}, s={s} (with h={h} hyperparameters, {D} arms at most)")
    if D ** s >= 2 ** 31:
        raise ValueError(f"hypercontroller: d**s must be < 2**31 (contexts are int32 indices "
                         f"in base D = max(d, options) = {D}), got d={d}, s={s}")
    n_ctx = D ** s
    rows = jnp.arange(h)

    def init(key):
        zeros = jnp.zeros((s,), jnp.float32)
        prior = pack_models(ridge * jnp.eye(s, dtype=jnp.float32), zeros, zeros)  # V = ridge I, B = G = 0
        return ControllerState(
            models=jnp.broadcast_to(prior, (h, n_ctx, D, prior.size)),
            current=jnp.broadcast_to(prior, (h, D, prior.size)),
            history=jnp.zeros((h, s), jnp.int32),
            window=jnp.zeros((s,), jnp.float32),
            arms=draw_arms(key, n_arms, D, masked),
            t=jnp.zeros((), jnp.int32),
            n_invalid=jnp.zeros((), jnp.int32),
        )

    def predictions(state):
        """(h, D): the score of every arm of every hyperparameter in the current context
        (-inf for the masked arms)."""
        V, _, G = unpack_models(state.current, s)  # (h, D, s, s), (h, D, s)
        scores = arm_scores(V, G, state.window, state.t >= s, beta)
        return masked_scores(scores, n_arms) if masked else scores

    def ask(state, key):
        state = state.replace(arms=break_ties(key, predictions(state)))
        return state, values(state)

    def tell(state, objective):
        x = jnp.asarray(objective, jnp.float32)
        valid = valid_objective(x)
        x = jnp.where(valid, x, 0.0)
        idx = (rows, context_index(state.history, D), state.arms)
        xi = state.window
        old = state.current[rows, state.arms]  # (h, s*s + 2s), = state.models[idx]
        V_old, B_old, _ = unpack_models(old, s)
        V_new = V_old + jnp.outer(xi, xi)
        B_new = B_old + x * xi
        new = pack_models(V_new, B_new, solve_spd(V_new, B_new))
        learn = valid & (state.t >= s) & jnp.all(jnp.isfinite(new))
        # Only the h selected models are touched: O(h s^3), never a pass over all models.
        models = state.models.at[idx].set(jnp.where(learn, new, old))
        window = jnp.where(valid, jnp.concatenate([xi[1:], x[None]]), xi)
        history = jnp.where(valid, jnp.concatenate([state.history[:, 1:], state.arms[:, None]], axis=1),
                            state.history)
        t = state.t + valid.astype(jnp.int32)
        # The next contexts' models, gathered as whole (D * (s*s + 2s),) rows (20 % faster than (d, s*s + 2s)).
        current = models.reshape(h, n_ctx, -1)[rows, context_index(history, D)].reshape(state.current.shape)
        return state.replace(models=models, current=current, window=window, history=history, t=t,
                             n_invalid=state.n_invalid + (~valid).astype(jnp.int32))

    def values(state):
        """(h,) the arms in effect, in natural units."""
        return grid[rows, state.arms]

    def place(state, values):
        """The arms nearest `values` (h,) in effect (`nearest_arms`)."""
        return state.replace(arms=nearest_arms(space, unit_arms, values))

    host_grid, host_n_arms = space.arm_grid(d)  # NumPy: grid and n_arms above may be traced (built inside a jit)
    unit_arms = jnp.asarray(arm_units(space, host_grid, host_n_arms))
    arms = tuple(int(n) for n in host_n_arms)  # arm i in [0, n_arms[i])
    return Tuner("hypercontroller", space, init, ask, tell, memory, values,
                 index_bounds=(("arms", arms), ("history", arms)), place=place)
