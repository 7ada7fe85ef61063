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
Cost: ask O(h d s) (+ O(h d s^3) with beta > 0), tell O(h s^3); no loops over arms.

Invalid objectives (non-finite, or |X| > MAX_ABS_OBJECTIVE) are ignored entirely: the
models, the window Xi, the contexts and t are left unchanged and `n_invalid` counts
them, so the controller behaves as if that iteration had not happened.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from hcjax.space import Space
from hcjax.tuner import Tuner, check_float, check_int, register, valid_objective


@struct.dataclass
class ControllerState:
    """V: (h, d^s, d, s, s); B, G: (h, d^s, d, s); history: (h, s) int32 last s arms,
    oldest first; window: (s,) last s objectives, oldest first; arms: (h,) int32 arms in
    effect; t: int32 objectives learned from; n_invalid: int32 objectives ignored."""

    V: jax.Array
    B: jax.Array
    G: jax.Array
    history: jax.Array
    window: jax.Array
    arms: jax.Array
    t: jax.Array
    n_invalid: jax.Array


def context_index(history: jax.Array, d: int) -> jax.Array:
    """(h, s) arms, oldest first -> (h,) int32 context index sum_k a_k d^(s-1-k)."""
    s = history.shape[-1]
    weights = jnp.asarray(d ** np.arange(s - 1, -1, -1), jnp.int32)
    return jnp.sum(history * weights, axis=-1).astype(jnp.int32)


def dot_last(a: jax.Array, w: jax.Array) -> jax.Array:
    """(..., s) . (s,) -> (...): unrolled over the tiny static s (a reduction over a
    minor axis of size 2 or 3 is several times slower on CPU)."""
    return sum(a[..., k] * w[k] for k in range(w.shape[-1]))


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


def break_ties(key: jax.Array, scores: jax.Array) -> jax.Array:
    """(..., d) scores -> (...,) int32 argmax, uniform among exactly tied maxima.

    Draws one number per row (not per arm): the u-th of the n tied arms, u ~ U{0..n-1}.
    """
    d = scores.shape[-1]
    best = scores == jnp.max(scores, axis=-1, keepdims=True)
    best_f = best.astype(jnp.float32)
    n_best = jnp.sum(best_f, axis=-1)
    u = jnp.minimum(jnp.floor(jax.random.uniform(key, n_best.shape) * n_best), n_best - 1.0)
    # rank of each tied arm among the tied ones (a prefix sum, as a tiny matmul: fast on CPU)
    rank = best_f @ jnp.triu(jnp.ones((d, d), jnp.float32)) - 1.0
    return jnp.argmax(best & (rank == u[..., None]), axis=-1).astype(jnp.int32)


@register("hypercontroller")
def hypercontroller(space: Space, *, d: int = 10, s: int = 1, ridge: float = 1.0, beta: float = 0.0) -> Tuner:
    """HyperController over `space` with d arms per hyperparameter, memory s, ridge
    lambda `ridge` and optimism bonus `beta` (0 = the paper's greedy algorithm)."""
    d = check_int("hypercontroller.d", d, 2)
    s = check_int("hypercontroller.s", s, 1, 3)
    ridge = check_float("hypercontroller.ridge", ridge, 0.0, low_open=True)
    beta = check_float("hypercontroller.beta", beta, 0.0)
    h = space.h
    n_ctx = d ** s
    grid = jnp.asarray(space.grid(d))  # (h, d)
    rows = jnp.arange(h)

    def init(key):
        eye = ridge * jnp.eye(s, dtype=jnp.float32)
        return ControllerState(
            V=jnp.broadcast_to(eye, (h, n_ctx, d, s, s)),
            B=jnp.zeros((h, n_ctx, d, s), jnp.float32),
            G=jnp.zeros((h, n_ctx, d, s), jnp.float32),
            history=jnp.zeros((h, s), jnp.int32),
            window=jnp.zeros((s,), jnp.float32),
            arms=jax.random.randint(key, (h,), 0, d, jnp.int32),
            t=jnp.zeros((), jnp.int32),
            n_invalid=jnp.zeros((), jnp.int32),
        )

    def predictions(state):
        """(h, d): the score of every arm of every hyperparameter in the current context."""
        ctx = context_index(state.history, d)
        scores = dot_last(state.G[rows, ctx], state.window)
        if beta > 0.0:
            V = state.V[rows, ctx]  # (h, d, s, s)
            w = solve_spd(V, jnp.broadcast_to(state.window, (h, d, s)))
            scores = scores + beta * jnp.sqrt(jnp.maximum(dot_last(w, state.window), 0.0))
        return jnp.where(state.t >= s, scores, 0.0)

    def ask(state, key):
        arms = break_ties(key, predictions(state))
        return state.replace(arms=arms), grid[rows, arms]

    def tell(state, objective):
        x = jnp.asarray(objective, jnp.float32)
        valid = valid_objective(x)
        x = jnp.where(valid, x, 0.0)
        idx = (rows, context_index(state.history, d), state.arms)
        xi = state.window
        V_old, B_old, G_old = state.V[idx], state.B[idx], state.G[idx]  # (h, s, s), (h, s), (h, s)
        V_new = V_old + jnp.outer(xi, xi)
        B_new = B_old + x * xi
        G_new = solve_spd(V_new, B_new)
        learn = valid & (state.t >= s) & jnp.all(jnp.isfinite(G_new)) & jnp.all(jnp.isfinite(V_new))
        # Only the h selected models are touched: O(h s^3), never a pass over all models.
        return state.replace(
            V=state.V.at[idx].set(jnp.where(learn, V_new, V_old)),
            B=state.B.at[idx].set(jnp.where(learn, B_new, B_old)),
            G=state.G.at[idx].set(jnp.where(learn, G_new, G_old)),
            window=jnp.where(valid, jnp.concatenate([xi[1:], x[None]]), xi),
            history=jnp.where(valid, jnp.concatenate([state.history[:, 1:], state.arms[:, None]], axis=1),
                              state.history),
            t=state.t + valid.astype(jnp.int32),
            n_invalid=state.n_invalid + (~valid).astype(jnp.int32),
        )

    return Tuner("hypercontroller", space, init, ask, tell)
