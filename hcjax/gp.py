"""Fixed-size, masked Gaussian-process primitives shared by `gp_ucb` and `pb2`.

Every array has a fixed shape; observations that do not exist (empty ring-buffer slots,
ignored objectives) are switched off by a boolean mask instead of being removed. A
masked row/column of a kernel matrix is replaced by the identity row/column, so the
matrix stays positive definite, its Cholesky factor has a unit diagonal there, masked
targets are zero and contribute nothing to the posterior or to the likelihood.

LAPACK calls (Cholesky, triangular solves) go through `platform_batched`: under `vmap`
they become batched calls, except on XLA:CPU with jax < 0.11, where two concurrent
batched LAPACK calls deadlock jaxlib's `ParallelBatchMap` on a small thread pool: there
they become a loop of one-matrix calls (`PROTECTED`). `lapack_batching` overrides the
choice while tracing (tests, benchmarks).

Kernels are correlations (unit signal variance); the signal variance `v` multiplies
them outside, so the model is  K = v (C + r I)  with noise ratio r = noise / v.
All functions are pure jnp, float32, and work under `jit` and `vmap`.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import itertools
import math
import warnings
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.linalg import solve_triangular

# Jitter added to the diagonal, as a fraction of its mean, on successive Cholesky tries.
JITTERS = (1e-6, 1e-4, 1e-2)  # relative to mean(diag K), tried in order
LOG_2PI = math.log(2.0 * math.pi)


# jax releases before this one deadlock on the CPU: jaxlib's batched LAPACK kernels
# (`ParallelBatchMap`) queue chunks on the intra-op pool and block a pool thread until
# they finish, so two such calls at once on a 2-thread pool wait for each other forever
# (jax 0.10.2, 2 cores: vmapped inits of 16 3x256 networks hung in 6 runs of 6, 64-agent
# GP decisions at N = 200 in 7 of 7). With jax 0.11.2 the same workloads, both forced
# batched under load, finished every time (experiments/benchmarks/lapack_check.py).
FIXED_IN_JAX = (0, 11)


def jax_version(version: str = jax.__version__) -> tuple[int, ...]:
    """'0.10.2' (or '0.11.0.dev20260101') -> (0, 10, 2): the leading numeric fields."""
    fields = []
    for part in version.split("."):
        digits = "".join(itertools.takewhile(str.isdigit, part))
        if not digits:
            break
        fields.append(int(digits))
    return tuple(fields)


# True where this jax needs the protection: vmapped LAPACK calls run one matrix at a time
# on the CPU. Platforms on which `platform_batched` functions then run sequentially:
PROTECTED = jax_version() < FIXED_IN_JAX
SEQUENTIAL_PLATFORMS = ("cpu",) if PROTECTED else ()
PROTECTION_NOTE = (
    f"jax {jax.__version__} < 0.11 on the CPU: vmapped LAPACK calls (GP tuners' Cholesky, "
    "agents.networks.orthogonal) run one matrix at a time, because batched ones can deadlock "
    "XLA:CPU's thread pool in this jax; that is slower for many agents. Python 3.12 with "
    "jax >= 0.11 batches them.")


class LapackProtectionWarning(UserWarning):
    """A vmapped GP tuner was built on the CPU with a jax that needs the protection."""


def warn_if_protected(what: str) -> None:
    """Warn (once per call site) that `what` runs its vmapped LAPACK calls one matrix at a
    time: on the CPU (the default backend) with jax < 0.11."""
    if PROTECTED and jax.default_backend() == "cpu":
        warnings.warn(f"{what}: {PROTECTION_NOTE}", LapackProtectionWarning, stacklevel=3)


_BATCHED: contextvars.ContextVar = contextvars.ContextVar("hcjax_lapack_batched", default=None)


def batched_on(platform: str) -> bool:
    """Whether `platform_batched` functions vmap into batched calls by default on
    `platform` ("cpu", "cuda", "rocm", "tpu", as `jax.default_backend()` names it): every
    platform with jax >= 0.11, every one but the CPU before."""
    return platform not in SEQUENTIAL_PLATFORMS


@contextlib.contextmanager
def lapack_batching(batched: bool | None):
    """Within the block, `platform_batched` functions (the LAPACK calls here and in
    `agents.networks.orthogonal`) vmap batched (True), one element at a time (False) or
    by platform (None, the default). Read at trace time: a function that `jax.jit` has
    already traced keeps the path it was traced with."""
    if batched not in (None, True, False):
        raise ValueError(f"lapack_batching: batched must be True, False or None, not {batched!r}")
    token = _BATCHED.set(batched)
    try:
        yield
    finally:
        _BATCHED.reset(token)


def platform_batched(f: Callable) -> Callable:
    """f(*arrays) -> the same function whose vmap is the normal batched one, except on the
    SEQUENTIAL_PLATFORMS (the CPU with jax < 0.11), where it is a loop of unbatched calls
    (`jax.custom_batching.sequential_vmap`).

    With a protected jax both are traced and `jax.lax.platform_dependent` keeps the one of
    the platform the computation is lowered for (a `jax.export` for several platforms
    keeps both and picks at compile time); otherwise f is traced alone. `lapack_batching`
    forces one of them. Both give the same values up to float rounding.
    """
    sequential = jax.custom_batching.sequential_vmap(f)

    @functools.wraps(f)
    def by_platform(*args):
        batched = _BATCHED.get()
        if batched is None:
            if not SEQUENTIAL_PLATFORMS:
                return f(*args)
            return jax.lax.platform_dependent(*args, default=f, **{p: sequential for p in SEQUENTIAL_PLATFORMS})
        return f(*args) if batched else sequential(*args)

    return by_platform


def sq_dist(x1: jax.Array, x2: jax.Array) -> jax.Array:
    """(n, D), (m, D) -> (n, m) squared Euclidean distances (clamped at 0)."""
    d2 = jnp.sum(x1 * x1, -1)[:, None] + jnp.sum(x2 * x2, -1)[None, :] - 2.0 * x1 @ x2.T
    return jnp.maximum(d2, 0.0)


def se_kernel(x1: jax.Array, x2: jax.Array, lengthscale) -> jax.Array:
    """(n, D), (m, D) -> (n, m) squared-exponential correlation exp(-|x - x'|^2 / (2 l^2))."""
    return jnp.exp(-0.5 * sq_dist(x1, x2) / (lengthscale * lengthscale))


def tv_se_kernel(t1: jax.Array, x1: jax.Array, t2: jax.Array, x2: jax.Array, lengthscale, eps) -> jax.Array:
    """(n,), (n, D), (m,), (m, D) -> (n, m) time-varying SE correlation of PB2:

        exp(-|x - x'|^2 / (2 l^2)) (1 - eps)^(|t - t'| / 2)

    (the paper writes exp(-|x - x'|^2 / l'), i.e. l' = 2 l^2). eps in (0, 1).
    """
    dt = jnp.abs(t1[:, None] - t2[None, :])
    return se_kernel(x1, x2, lengthscale) * jnp.exp(0.5 * dt * jnp.log1p(-eps))


def masked_gram(C: jax.Array, mask: jax.Array, noise_ratio) -> jax.Array:
    """(n, n) correlation, (n,) bool -> (n, n) C + r I on valid rows/columns, identity elsewhere."""
    both = mask[:, None] & mask[None, :]
    eye = jnp.eye(C.shape[-1], dtype=C.dtype)
    return jnp.where(both, C + noise_ratio * eye, eye)


BLOCK = 128  # block size of the triangular solves


@platform_batched
def _lapack_inverse_lower(L: jax.Array) -> jax.Array:
    """(b, b) lower triangular -> inverse by a triangular solve (`platform_batched`)."""
    return solve_triangular(L, jnp.eye(L.shape[-1], dtype=L.dtype), lower=True)


def _inverse_lower(L: jax.Array) -> jax.Array:
    """(b, b) lower triangular -> its inverse, by recursive 2 x 2 block inversion
    [[A, 0], [C, D]]^-1 = [[A^-1, 0], [-D^-1 C A^-1, D^-1]] down to 16 x 16 blocks
    (XLA's CPU triangular solve is slow for large matrix right-hand sides)."""
    n = L.shape[-1]
    if n <= 16:
        return _lapack_inverse_lower(L)
    k = n // 2
    a_inv, d_inv = _inverse_lower(L[:k, :k]), _inverse_lower(L[k:, k:])
    c = -d_inv @ (L[k:, :k] @ a_inv)
    return jnp.block([[a_inv, jnp.zeros((k, n - k), L.dtype)], [c, d_inv]])


def _blocks(n: int, block: int) -> list[tuple[int, int]]:
    return [(k0, min(k0 + block, n)) for k0 in range(0, n, block)]


def diagonal_inverses(L: jax.Array, block: int = BLOCK) -> list[jax.Array]:
    """(n, n) lower triangular -> inverses of its diagonal blocks [(b_k, b_k)]: the full
    blocks vmapped as one (n // block, block, block) stack (`platform_batched` calls),
    plus the last partial block."""
    n = L.shape[-1]
    full = n // block
    out = []
    if full:
        diag = jnp.stack([L[k0:k0 + block, k0:k0 + block] for k0 in range(0, full * block, block)])
        out = list(jax.vmap(_inverse_lower)(diag))
    if n % block:
        out.append(_inverse_lower(L[full * block:, full * block:]))
    return out


def solve_lower(L: jax.Array, B: jax.Array, inverses=None, block: int = BLOCK) -> jax.Array:
    """(n, n) lower triangular, (n,) or (n, m) -> L^-1 B by blocked forward substitution:
    matrix products only, given the `diagonal_inverses` of L (computed if None)."""
    inverses = diagonal_inverses(L, block) if inverses is None else inverses
    vec = B.ndim == 1
    B = B[:, None] if vec else B
    out = []
    for (k0, k1), inv in zip(_blocks(L.shape[-1], block), inverses):
        rhs = B[k0:k1]
        if k0 > 0:
            rhs = rhs - L[k0:k1, :k0] @ jnp.concatenate(out, 0)
        out.append(inv @ rhs)
    X = jnp.concatenate(out, 0)
    return X[:, 0] if vec else X


def solve_upper_t(L: jax.Array, B: jax.Array, inverses=None, block: int = BLOCK) -> jax.Array:
    """(n, n) lower triangular, (n,) or (n, m) -> L^-T B by blocked back substitution."""
    inverses = diagonal_inverses(L, block) if inverses is None else inverses
    vec = B.ndim == 1
    B = B[:, None] if vec else B
    n, out = L.shape[-1], []
    for (k0, k1), inv in reversed(list(zip(_blocks(n, block), inverses))):
        rhs = B[k0:k1]
        if k1 < n:
            rhs = rhs - L[k1:, k0:k1].T @ jnp.concatenate(out[::-1], 0)
        out.append(inv.T @ rhs)
    X = jnp.concatenate(out[::-1], 0)
    return X[:, 0] if vec else X


@platform_batched
def _escalating_cholesky(K: jax.Array, jitters: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(n, n), (J,) relative jitters -> (L, index of the jitter used, J if none worked).

    Tries K + jitters[i] * I in order while the factor is not finite: the first try
    outright, the others in a while_loop (usually never entered; the jitter is added to
    the diagonal in place, which saved a third of the time of n = 1000 here). Vmapped:
    batched on GPU/TPU, one matrix at a time on the CPU (`platform_batched`); batched,
    the while_loop runs while any matrix of the batch fails.
    """
    diag = jnp.arange(K.shape[-1])

    def factor(i):
        return jnp.linalg.cholesky(K.at[diag, diag].add(jitters[i]))

    def failed(carry):
        i, L = carry
        return (i < jitters.shape[0]) & ~jnp.all(jnp.isfinite(L))

    def attempt(carry):
        i, _ = carry
        return i + 1, factor(i)

    i, L = jax.lax.while_loop(failed, attempt, (jnp.int32(1), factor(0)))
    return L, jnp.where(jnp.all(jnp.isfinite(L)), i - 1, jitters.shape[0])


def cholesky(K: jax.Array, jitters=JITTERS) -> tuple[jax.Array, jax.Array]:
    """(n, n) SPD -> lower factor L (n, n) and the jitter used (scalar).

    Escalating jitter: K + j * mean(diag K) * I for j in `jitters` in order, the first
    finite factor kept. If every try fails, returns the diagonal factor sqrt(diag K)
    (finite, crude) and jitter = -1.
    """
    scale = jnp.mean(jnp.diagonal(K))
    scale = jnp.where(jnp.isfinite(scale) & (scale > 0), scale, 1.0)
    js = jnp.asarray(jitters, K.dtype) * scale
    L, used = _escalating_cholesky(K, js)
    ok = used < len(jitters)
    diag = jnp.diagonal(K)
    fallback = jnp.diag(jnp.where(jnp.isfinite(diag) & (diag > 0), jnp.sqrt(jnp.abs(diag)), 1.0))
    return jnp.where(ok, L, fallback), jnp.where(ok, js[jnp.minimum(used, len(jitters) - 1)], -1.0)


class Posterior(NamedTuple):
    """A GP conditioned on masked data. L: (n, n) Cholesky of C + r I (masked);
    inverses: inverses of L's diagonal blocks (`diagonal_inverses`); alpha: (n,)
    (C + r I)^-1 y; variance: profiled signal variance v; mask: (n,) bool."""

    L: jax.Array
    inverses: list
    alpha: jax.Array
    variance: jax.Array
    mask: jax.Array


def _profiled_variance(quad, mask):
    """Maximum-likelihood signal variance y^T A^-1 y / n_valid, floored at 1e-6."""
    return jnp.maximum(quad / jnp.maximum(jnp.sum(mask), 1), 1e-6)


def condition(C: jax.Array, y: jax.Array, mask: jax.Array, noise_ratio, variance=None) -> Posterior:
    """(n, n) correlation, (n,) targets, (n,) bool -> Posterior.

    `variance`=None profiles the signal variance: v = y^T (C + r I)^-1 y / n_valid (its
    maximum-likelihood value), floored at 1e-6.
    """
    y = jnp.where(mask, y, 0.0)
    L, _ = cholesky(masked_gram(C, mask, noise_ratio))
    inverses = diagonal_inverses(L)
    alpha = solve_upper_t(L, solve_lower(L, y, inverses), inverses)
    if variance is None:
        variance = _profiled_variance(jnp.dot(y, alpha), mask)
    return Posterior(L, inverses, alpha, jnp.asarray(variance, y.dtype), mask)


def predict(post: Posterior, Cs: jax.Array, prior_diag=1.0) -> tuple[jax.Array, jax.Array]:
    """(n, m) correlations between data and m test points -> mean (m,), latent variance (m,).

    mean = Cs^T alpha, variance = v (prior_diag - |L^-1 Cs|^2), clamped at 0.
    """
    Cs = jnp.where(post.mask[:, None], Cs, 0.0)
    mean = Cs.T @ post.alpha
    w = solve_lower(post.L, Cs, post.inverses)
    var = post.variance * jnp.maximum(prior_diag - jnp.sum(w * w, axis=0), 0.0)
    return mean, var


def _lml(quad, L, n, variance):
    """log N(y | 0, v A) from y^T A^-1 y, the Cholesky factor L of A, n and v."""
    logdet = 2.0 * jnp.sum(jnp.log(jnp.diagonal(L))) + n * jnp.log(variance)
    return -0.5 * quad / variance - 0.5 * logdet - 0.5 * n * LOG_2PI


def log_marginal_likelihood(post: Posterior, y: jax.Array) -> jax.Array:
    """Scalar log p(y | K = v (C + r I)) over the valid entries of `post.mask`."""
    y = jnp.where(post.mask, y, 0.0)
    quad = jnp.dot(y, post.alpha)
    return _lml(quad, post.L, jnp.sum(post.mask), post.variance)


@platform_batched
def _cho_solve(L: jax.Array, y: jax.Array) -> jax.Array:
    """(n, n) lower factor, (n,) -> (L L^T)^-1 y by two triangular solves (`platform_batched`)."""
    return jax.scipy.linalg.cho_solve((L, True), y)


def profile_log_likelihood(C: jax.Array, y: jax.Array, mask: jax.Array, noise_ratio) -> jax.Array:
    """(n, n) correlation, (n,) targets, (n,) bool -> scalar log marginal likelihood with
    the signal variance profiled out: `log_marginal_likelihood(condition(C, y, mask, r), y)`
    without building the `Posterior` (no block inverses: two LAPACK triangular solves),
    for grid searches over kernel parameters."""
    y = jnp.where(mask, y, 0.0)
    L, _ = cholesky(masked_gram(C, mask, noise_ratio))
    quad = jnp.dot(y, _cho_solve(L, y))
    return _lml(quad, L, jnp.sum(mask), _profiled_variance(quad, mask))


def standardize(y: jax.Array, mask: jax.Array) -> jax.Array:
    """(n,), (n,) bool -> (n,) (y - mean) / std over the valid entries, 0 elsewhere.

    Two-pass moments; std < 1e-12 * (1 + |mean|) (constant targets) is replaced by 1.
    """
    n = jnp.maximum(jnp.sum(mask), 1)
    y = jnp.where(mask, y, 0.0)
    mean = jnp.sum(y) / n
    centred = jnp.where(mask, y - mean, 0.0)
    std = jnp.sqrt(jnp.sum(centred * centred) / n)
    std = jnp.where(std > 1e-12 * (1.0 + jnp.abs(mean)), std, 1.0)
    return centred / std


def minmax_scale(z: jax.Array, mask: jax.Array, extra: jax.Array | None = None):
    """(n, c) columns, (n,) bool[, (m, c)] -> the same scaled to [0, 1] by the min/max of
    the valid rows (and of `extra`, if given). Constant columns map to 0."""
    rows = z if extra is None else jnp.concatenate([z, extra], 0)
    keep = mask if extra is None else jnp.concatenate([mask, jnp.ones(extra.shape[:1], bool)])
    lo = jnp.min(jnp.where(keep[:, None], rows, jnp.inf), axis=0)
    hi = jnp.max(jnp.where(keep[:, None], rows, -jnp.inf), axis=0)
    lo = jnp.where(jnp.isfinite(lo), lo, 0.0)
    span = jnp.where(jnp.isfinite(hi) & (hi - lo > 0), hi - lo, 1.0)

    def scale(a):
        return jnp.clip((a - lo) / span, 0.0, 1.0)

    return scale(z) if extra is None else (scale(z), scale(extra))
