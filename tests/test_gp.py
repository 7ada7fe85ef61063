"""hcjax.gp against a float64 NumPy/SciPy reference GP.

Tolerance: relative error < 1e-4 in float32 (|a - b| <= 1e-4 |b| + 1e-5) on well-conditioned
problems (noise ratio 0.1, length scale 0.5, n <= 40: condition numbers below ~1e3);
the blocked triangular solves on n = 300 with a strongly diagonal matrix, same tolerance.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg as sl
from scipy.stats import multivariate_normal

from hcjax import gp

RTOL, ATOL = 1e-4, 1e-5


def close(a, b):
    np.testing.assert_allclose(np.asarray(a, np.float64), b, rtol=RTOL, atol=ATOL)


def ref_se(x1, x2, ell):
    d2 = ((x1[:, None, :] - x2[None, :, :]) ** 2).sum(-1)
    return np.exp(-0.5 * d2 / ell ** 2)


def data(seed, n=30, m=7, dim=3):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, dim))
    Xs = rng.uniform(size=(m, dim))
    y = np.sin(3 * X).sum(1) + 0.1 * rng.normal(size=n)
    mask = rng.uniform(size=n) < 0.7
    mask[0] = True
    return X, Xs, y, mask


@pytest.mark.parametrize("seed", range(4))
def test_posterior_and_likelihood_match_reference(seed):
    X, Xs, y, mask = data(seed)
    ell, r = 0.5, 0.1
    f32 = lambda a: jnp.asarray(a, jnp.float32)
    C = gp.se_kernel(f32(X), f32(X), ell)
    close(C, ref_se(X, X, ell))
    post = gp.condition(C, f32(y), jnp.asarray(mask), r)
    mean, var = gp.predict(post, gp.se_kernel(f32(X), f32(Xs), ell))
    # Reference: drop the masked rows, profile v = y^T A^-1 y / n.
    Xv, yv = X[mask], y[mask]
    A = ref_se(Xv, Xv, ell) + r * np.eye(len(yv))
    cf = sl.cho_factor(A, lower=True)
    a = sl.cho_solve(cf, yv)
    v = yv @ a / len(yv)
    close(post.variance, v)
    Ks = ref_se(Xv, Xs, ell)
    close(mean, Ks.T @ a)
    close(var, v * (1.0 - np.einsum("ij,ij->j", Ks, sl.cho_solve(cf, Ks))))
    reference = multivariate_normal(np.zeros(len(yv)), v * A).logpdf(yv)
    close(gp.log_marginal_likelihood(post, f32(y)), reference)
    close(gp.profile_log_likelihood(C, f32(y), jnp.asarray(mask), r), reference)


def test_fixed_variance_and_masked_rows_are_inert():
    X, Xs, y, mask = data(7)
    f32 = lambda a: jnp.asarray(a, jnp.float32)
    C = gp.se_kernel(f32(X), f32(X), 0.5)
    post = gp.condition(C, f32(y), jnp.asarray(mask), 0.1, variance=2.0)
    # Garbage in the masked targets changes nothing.
    y2 = np.where(mask, y, 1e6)
    post2 = gp.condition(C, f32(y2), jnp.asarray(mask), 0.1, variance=2.0)
    Cs = gp.se_kernel(f32(X), f32(Xs), 0.5)
    for a, b in zip(gp.predict(post, Cs), gp.predict(post2, Cs)):
        close(a, np.asarray(b, np.float64))
    K = gp.masked_gram(C, jnp.asarray(mask), 0.1)
    ref = np.where(mask[:, None] & mask[None, :], ref_se(X, X, 0.5) + 0.1 * np.eye(len(y)), np.eye(len(y)))
    close(K, ref)
    Xv, yv = X[mask], y[mask]
    A = 2.0 * (ref_se(Xv, Xv, 0.5) + 0.1 * np.eye(len(yv)))
    close(gp.log_marginal_likelihood(post, f32(y)), multivariate_normal(np.zeros(len(yv)), A).logpdf(yv))


def test_time_varying_kernel():
    rng = np.random.default_rng(3)
    t1, t2 = rng.uniform(size=9), rng.uniform(size=5)
    x1, x2 = rng.uniform(size=(9, 4)), rng.uniform(size=(5, 4))
    got = gp.tv_se_kernel(*(jnp.asarray(a, jnp.float32) for a in (t1, x1, t2, x2)), 0.7, 0.3)
    ref = ref_se(x1, x2, 0.7) * (1 - 0.3) ** (np.abs(t1[:, None] - t2[None, :]) / 2)
    close(got, ref)


def test_cholesky_jitter_rescues_singular_matrix():
    # Rank-1 PSD matrix: plain Cholesky fails in float32; escalating jitter gives a finite factor.
    v = jnp.arange(1.0, 41.0) / 40.0
    K = jnp.outer(v, v)
    L, jitter = jax.jit(gp.cholesky)(K)
    assert np.all(np.isfinite(np.asarray(L)))
    assert float(jitter) > 0.0
    np.testing.assert_allclose(np.asarray(L @ L.T), np.asarray(K), atol=float(jitter) * 2 + 1e-3)
    # An all-NaN input falls back to a finite diagonal factor.
    L, jitter = gp.cholesky(jnp.full((5, 5), jnp.nan))
    assert float(jitter) == -1.0 and np.all(np.isfinite(np.asarray(L)))


def test_blocked_triangular_solves():
    rng = np.random.default_rng(0)
    n = 300  # several blocks of gp.BLOCK plus a partial one
    A = rng.normal(size=(n, n)) / np.sqrt(n)
    L = np.tril(A, -1) * 0.5 + np.diag(1.0 + rng.uniform(size=n))
    B = rng.normal(size=(n, 6))
    Lj = jnp.asarray(L, jnp.float32)
    close(gp.solve_lower(Lj, jnp.asarray(B, jnp.float32)), sl.solve_triangular(L, B, lower=True))
    close(gp.solve_upper_t(Lj, jnp.asarray(B[:, 0], jnp.float32)), sl.solve_triangular(L.T, B[:, 0], lower=False))


def test_standardize_and_minmax():
    y = jnp.asarray([1.0, 2.0, 3.0, 1e6], jnp.float32)
    mask = jnp.asarray([True, True, True, False])
    z = np.asarray(gp.standardize(y, mask))
    close(z, np.array([-1.2247449, 0.0, 1.2247449, 0.0]))
    assert np.all(gp.standardize(jnp.full(4, 5.0), mask) == 0.0)
    cols = jnp.asarray([[0.0, 5.0], [10.0, 5.0], [99.0, 5.0]], jnp.float32)
    scaled = gp.minmax_scale(cols, jnp.asarray([True, True, False]))
    close(scaled, np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 0.0]]))
