"""hcjax.gp against a float64 NumPy/SciPy reference GP, and its two vmap paths.

Tolerance: relative error < 1e-4 in float32 (|a - b| <= 1e-4 |b| + 1e-5) on well-conditioned
problems (noise ratio 0.1, length scale 0.5, n <= 40: condition numbers below ~1e3);
the blocked triangular solves on n = 300 with a strongly diagonal matrix, same tolerance.

Vmap paths (`gp.platform_batched`): the batched and the one-matrix-at-a-time LAPACK
calls are compared with each other and with a Python loop of unvmapped calls, at sizes
that do not deadlock XLA:CPU (3 agents, n = 152); the default path is read from the
HLO: unbatched LAPACK calls when compiled for the CPU, batched solver calls when
lowered for CUDA.
"""
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg as sl
from scipy.stats import multivariate_normal

import hcjax
from hcjax import gp

RTOL, ATOL = 1e-4, 1e-5
AGENTS = 3  # vmapped agents in the path tests
CPU = jax.devices("cpu")[0]  # inputs placed here make jit compile for XLA:CPU on any machine


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


ELL, R = 0.5, 0.1  # length scale and noise ratio of the reference problems


@jax.jit
def posterior_outputs(X, Xs, y, mask):
    """(n, D), (m, D), (n,), (n,) bool -> the correlation C (n, n), the profiled variance,
    mean (m,), var (m,), the log marginal likelihood and the profile likelihood: every
    seed's data through one compiled program."""
    C = gp.se_kernel(X, X, ELL)
    post = gp.condition(C, y, mask, R)
    mean, var = gp.predict(post, gp.se_kernel(X, Xs, ELL))
    return C, post.variance, mean, var, gp.log_marginal_likelihood(post, y), gp.profile_log_likelihood(C, y, mask, R)


@pytest.mark.parametrize("seed", range(4))
def test_posterior_and_likelihood_match_reference(seed):
    X, Xs, y, mask = data(seed)
    f32 = lambda a: np.asarray(a, np.float32)  # NumPy straight into the program: no eager conversion to compile
    C, variance, mean, var, lml, profile_lml = posterior_outputs(f32(X), f32(Xs), f32(y), mask)
    close(C, ref_se(X, X, ELL))
    # Reference: drop the masked rows, profile v = y^T A^-1 y / n.
    Xv, yv = X[mask], y[mask]
    A = ref_se(Xv, Xv, ELL) + R * np.eye(len(yv))
    cf = sl.cho_factor(A, lower=True)
    a = sl.cho_solve(cf, yv)
    v = yv @ a / len(yv)
    close(variance, v)
    Ks = ref_se(Xv, Xs, ELL)
    close(mean, Ks.T @ a)
    close(var, v * (1.0 - np.einsum("ij,ij->j", Ks, sl.cho_solve(cf, Ks))))
    reference = multivariate_normal(np.zeros(len(yv)), v * A).logpdf(yv)
    close(lml, reference)
    close(profile_lml, reference)


@jax.jit
def fixed_variance_outputs(X, Xs, y, mask):
    """As `posterior_outputs` with the signal variance fixed at 2 -> ((mean (m,), var (m,)),
    the masked gram (n, n), the log marginal likelihood)."""
    C = gp.se_kernel(X, X, ELL)
    post = gp.condition(C, y, mask, R, variance=2.0)
    return gp.predict(post, gp.se_kernel(X, Xs, ELL)), gp.masked_gram(C, mask, R), gp.log_marginal_likelihood(post, y)


def test_fixed_variance_and_masked_rows_are_inert():
    X, Xs, y, mask = data(7)
    f32 = lambda a: np.asarray(a, np.float32)
    predicted, K, lml = fixed_variance_outputs(f32(X), f32(Xs), f32(y), mask)
    # Garbage in the masked targets changes nothing.
    y2 = np.where(mask, y, 1e6)
    predicted2, _, _ = fixed_variance_outputs(f32(X), f32(Xs), f32(y2), mask)
    for a, b in zip(predicted, predicted2):
        close(a, np.asarray(b, np.float64))
    ref = np.where(mask[:, None] & mask[None, :], ref_se(X, X, ELL) + R * np.eye(len(y)), np.eye(len(y)))
    close(K, ref)
    Xv, yv = X[mask], y[mask]
    A = 2.0 * (ref_se(Xv, Xv, ELL) + R * np.eye(len(yv)))
    close(lml, multivariate_normal(np.zeros(len(yv)), A).logpdf(yv))


def test_time_varying_kernel():
    rng = np.random.default_rng(3)
    t1, t2 = rng.uniform(size=9), rng.uniform(size=5)
    x1, x2 = rng.uniform(size=(9, 4)), rng.uniform(size=(5, 4))
    got = jax.jit(gp.tv_se_kernel)(*(np.asarray(a, np.float32) for a in (t1, x1, t2, x2)), 0.7, 0.3)
    ref = ref_se(x1, x2, 0.7) * (1 - 0.3) ** (np.abs(t1[:, None] - t2[None, :]) / 2)
    close(got, ref)


def test_cholesky_jitter_rescues_singular_matrix():
    # Rank-1 PSD matrix: plain Cholesky fails in float32; escalating jitter gives a finite factor.
    v = np.arange(1.0, 41.0) / 40.0
    K = np.outer(v, v).astype(np.float32)
    cholesky = jax.jit(gp.cholesky)  # one program for both matrices
    L, jitter = cholesky(K)
    assert np.all(np.isfinite(np.asarray(L)))
    assert float(jitter) > 0.0
    np.testing.assert_allclose(np.asarray(L) @ np.asarray(L).T, K, atol=float(jitter) * 2 + 1e-3)
    # An all-NaN input falls back to a finite diagonal factor.
    L, jitter = cholesky(np.full(K.shape, np.nan, np.float32))
    assert float(jitter) == -1.0 and np.all(np.isfinite(np.asarray(L)))


def test_blocked_triangular_solves():
    rng = np.random.default_rng(0)
    n = 300  # several blocks of gp.BLOCK plus a partial one
    A = rng.normal(size=(n, n)) / np.sqrt(n)
    L = np.tril(A, -1) * 0.5 + np.diag(1.0 + rng.uniform(size=n))
    B = rng.normal(size=(n, 6))
    lower, upper = jax.jit(lambda L, B: (gp.solve_lower(L, B), gp.solve_upper_t(L, B[:, 0])))(
        np.asarray(L, np.float32), np.asarray(B, np.float32))
    close(lower, sl.solve_triangular(L, B, lower=True))
    close(upper, sl.solve_triangular(L.T, B[:, 0], lower=False))


def test_standardize_and_minmax():
    standardize = jax.jit(gp.standardize)
    y = np.asarray([1.0, 2.0, 3.0, 1e6], np.float32)
    mask = np.asarray([True, True, True, False])
    z = np.asarray(standardize(y, mask))
    close(z, np.array([-1.2247449, 0.0, 1.2247449, 0.0]))
    assert np.all(np.asarray(standardize(np.full(4, 5.0, np.float32), mask)) == 0.0)
    cols = np.asarray([[0.0, 5.0], [10.0, 5.0], [99.0, 5.0]], np.float32)
    scaled = jax.jit(gp.minmax_scale)(cols, np.asarray([True, True, False]))
    close(scaled, np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 0.0]]))


# ---- the two vmap paths ---------------------------------------------------------------------


def lapack_calls(hlo: str) -> list[tuple[str, tuple[int, ...]]]:
    """Compiled XLA:CPU HLO text -> [(LAPACK custom-call target, dims of its first operand)]."""
    calls = []
    for line in hlo.splitlines():
        target = re.search(r'custom_call_target="(lapack_\w+)"', line)
        if target:
            dims = re.search(r"operand_layout_constraints=\{\w+\[([\d,]*)\]", line).group(1)
            calls.append((target.group(1), tuple(int(d) for d in dims.split(",") if d)))
    return calls


def stablehlo_calls(text: str) -> list[tuple[str, tuple[int, ...]]]:
    """StableHLO text -> [(custom-call target or "triangular_solve", dims of its first operand)]."""
    calls = []
    for line in text.splitlines():
        op = re.search(r"stablehlo\.custom_call @(\w+)\(|stablehlo\.(triangular_solve)\b", line)
        if op:
            dims = re.search(r": \(tensor<((?:\d+x)*)[a-z]\w*>", line).group(1)
            calls.append((op.group(1) or op.group(2), tuple(int(d) for d in dims.split("x") if d)))
    return calls


def assert_unbatched(calls, matrix_rank=2):
    """Every call factorises or solves one matrix: its first operand has `matrix_rank` dims."""
    assert calls, "no solver call found"
    assert all(len(dims) == matrix_rank for _, dims in calls), calls


def assert_batched(calls, batch=AGENTS):
    """Some call works on a stack whose leading dimension is the agent batch."""
    assert any(len(dims) > 2 and dims[0] == batch for _, dims in calls), calls


def agent_problems(n=gp.BLOCK + 24, m=5, seed=0):
    """AGENTS GP problems of n observations (a full block and a partial one) and m test
    points -> float32 arrays C (A, n, n), y (A, n), mask (A, n), Cs (A, n, m), K (A, n, n)
    where K[1] is singular (rank 1, needs jitter) and K[2] all NaN (diagonal fallback)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(AGENTS, n, 3))
    Xs = rng.uniform(size=(AGENTS, m, 3))
    C = np.stack([ref_se(x, x, 0.5) for x in X])
    Cs = np.stack([ref_se(x, xs, 0.5) for x, xs in zip(X, Xs)])
    y = np.sin(3 * X).sum(-1) + 0.1 * rng.normal(size=(AGENTS, n))
    mask = rng.uniform(size=(AGENTS, n)) < 0.8
    v = np.arange(1.0, n + 1.0) / n
    K = np.stack([C[0] + 0.1 * np.eye(n), np.outer(v, v), np.full((n, n), np.nan)])
    f32 = lambda a: jax.device_put(np.asarray(a, np.float32), CPU)  # cast in NumPy: no eager conversion program
    return f32(C), f32(y), jax.device_put(mask, CPU), f32(Cs), f32(K)


def gp_outputs(C, y, mask, Cs, K):
    """One agent's results of every public LAPACK-backed function -> dict of arrays."""
    L_k, jitter = gp.cholesky(K)
    post = gp.condition(C, y, mask, 0.1)
    mean, var = gp.predict(post, Cs)
    return {"cholesky": L_k, "jitter": jitter, "L": post.L, "inverses": post.inverses, "alpha": post.alpha,
            "variance": post.variance, "mean": mean, "var": var,
            "lml": gp.log_marginal_likelihood(post, y), "profile_lml": gp.profile_log_likelihood(C, y, mask, 0.1)}


def compile_each(lowered: dict) -> dict:
    """{path: jax Lowered} -> {path: Compiled}, compiling each distinct program text once (with
    jax >= 0.11 the default CPU path is the batched one: one program, not two compilations)."""
    by_text = {}
    for low in lowered.values():
        text = low.as_text()
        if text not in by_text:
            by_text[text] = low.compile()
    return {path: by_text[low.as_text()] for path, low in lowered.items()}


def runs_here(batched) -> bool:
    """Whether a test may run a program compiled for the CPU under `gp.lapack_batching(batched)`:
    not a forced-batched one with a protected jax (< 0.11), whose XLA:CPU can deadlock on the
    vmapped LAPACK calls it holds (a CI run's Python 3.11 suite once hung here, in
    test_vmap_paths_...). Such a program is compiled and its HLO read, not run; the batched path's
    values are checked with jax >= 0.11, where it is the default."""
    return not (batched and gp.PROTECTED)


def assert_trees_close(a, b, rtol=RTOL, atol=ATOL):
    jax.tree_util.tree_map(lambda u, v: np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=rtol,
                                                                   atol=atol), a, b)


def test_default_path_by_platform_and_jax_version():
    assert gp.jax_version("0.10.2") == (0, 10, 2) and gp.jax_version("0.11.0.dev20260101") == (0, 11, 0)
    assert gp.jax_version("0.11.2rc1") == (0, 11, 2) and gp.jax_version("1.0") == (1, 0)
    assert gp.PROTECTED == (gp.jax_version(jax.__version__) < (0, 11))
    assert gp.batched_on("cpu") == (not gp.PROTECTED)
    assert all(gp.batched_on(p) for p in ("cuda", "rocm", "tpu"))
    with pytest.raises(ValueError, match="batched must be True, False or None"):
        with gp.lapack_batching("batched"):
            pass


def assert_default_cpu_path(calls, batch=None):
    """The CPU default: one matrix per LAPACK call with a protected jax (< 0.11), stacks otherwise."""
    if gp.PROTECTED:
        assert_unbatched(calls)
    else:
        assert_batched(calls, *(() if batch is None else (batch,)))


def test_protection_warning_follows_the_jax_version():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hcjax.make_tuner("gp_ucb", hcjax.ppo_space(), **GP_OPTIONS)
    protection = [w for w in caught if issubclass(w.category, gp.LapackProtectionWarning)]
    assert len(protection) == (1 if gp.PROTECTED and jax.default_backend() == "cpu" else 0)
    if protection:
        assert "jax >= 0.11" in str(protection[0].message) and "one matrix at a time" in str(protection[0].message)


@pytest.mark.slow
def test_vmap_paths_give_the_loop_values_and_cpu_default_follows_the_jax_version():
    args = agent_problems()
    lowered = {}
    for batched in (None, False, True):
        with gp.lapack_batching(batched):
            lowered[batched] = jax.jit(jax.vmap(gp_outputs)).lower(*args)
    compiled = compile_each(lowered)
    out = {batched: compiled[batched](*args) for batched in compiled if runs_here(batched)}
    # Reference: one unvmapped call per agent.
    single = jax.jit(gp_outputs)
    host = [np.asarray(a) for a in args]  # sliced in NumPy: an eager a[i] compiles a program per shape
    with jax.default_device(CPU):  # NumPy inputs placed as the sliced CPU arrays were
        loop = [single(*(a[i] for a in host)) for i in range(AGENTS)]
    reference = jax.tree_util.tree_map(lambda *xs: np.stack(xs), *loop)
    assert len(out) == (2 if gp.PROTECTED else 3)
    for batched in out:
        assert_trees_close(out[batched], reference)
    jitter = np.asarray(reference["jitter"])
    assert jitter[0] > 0 and jitter[1] > jitter[0] and jitter[2] == -1.0  # three escalation outcomes
    assert np.all(np.isfinite(np.asarray(reference["cholesky"])))
    # Compiled for XLA:CPU: forced sequential, one matrix per LAPACK call; forced batched,
    # stacks of AGENTS matrices; by default as the jax version says.
    assert_unbatched(lapack_calls(compiled[False].as_text()))
    assert_batched(lapack_calls(compiled[True].as_text()))
    assert_default_cpu_path(lapack_calls(compiled[None].as_text()))


def test_default_lowering_for_gpu_is_batched():
    args = agent_problems()
    fn = jax.jit(jax.vmap(gp_outputs)).trace(*args)
    for platform, solver in (("cuda", "cusolver_potrf_ffi"), ("rocm", "hipsolver_potrf_ffi")):
        calls = stablehlo_calls(fn.lower(lowering_platforms=(platform,)).as_text())
        assert not any(t.startswith("lapack_") for t, _ in calls), calls
        potrf = [dims for t, dims in calls if t == solver]
        assert potrf and all(dims[0] == AGENTS for dims in potrf), calls
        solves = [dims for t, dims in calls if t == "triangular_solve"]
        assert solves and all(dims[0] == AGENTS for dims in solves), calls
    cpu = stablehlo_calls(fn.lower(lowering_platforms=("cpu",)).as_text())
    assert_default_cpu_path(cpu)
    assert all(t.startswith("lapack_") for t, _ in cpu), cpu


GP_OPTIONS = dict(buffer=40, candidates=64, fit_points=32, refine_steps=3)


@pytest.mark.parametrize("name", ["gp_ucb", "pb2"])
@pytest.mark.slow
def test_vmapped_gp_tuner_decision_is_the_same_on_both_paths(name):
    tuner = hcjax.make_tuner(name, hcjax.ppo_space(), **GP_OPTIONS)

    def filled(key):  # 30 of 40 rows told: a partly masked buffer
        def tell(state, inp):
            k, objective = inp
            return tuner.tell(state.replace(current=jax.random.uniform(k, state.current.shape)), objective), None

        objectives = jnp.sin(jnp.arange(30) + 0.3)
        return jax.lax.scan(tell, tuner.init(key), (jax.random.split(key, 30), objectives))[0]

    def decision(state, key, objective):
        state, values = tuner.ask(state, key)
        return tuner.tell(state, objective), values

    keys = jax.device_put(jax.random.split(jax.random.key(5), AGENTS), CPU)
    states = jax.jit(jax.vmap(filled))(keys)
    objectives = jax.device_put(np.asarray([0.5, -1.0, 2.0], np.float32), CPU)
    ask_keys = jax.random.split(jax.random.key(6), AGENTS)
    traced = {}
    for batched in (None, True):
        with gp.lapack_batching(batched):  # read at trace time
            traced[batched] = jax.jit(jax.vmap(decision)).trace(states, ask_keys, objectives)
    compiled = compile_each({batched: t.lower() for batched, t in traced.items()})
    out = {batched: compiled[batched](states, ask_keys, objectives) for batched in compiled if runs_here(batched)}
    # one unvmapped call per agent, its inputs sliced in NumPy (an eager a[i] compiles a program
    # per shape), the key rewrapped inside the program
    single = jax.jit(lambda state, raw, objective: decision(state, jax.random.wrap_key_data(raw), objective))
    host_states, raw_keys, host_objectives = jax.device_get((states, jax.random.key_data(ask_keys), objectives))
    at = lambda tree, i: jax.tree_util.tree_map(lambda a: a[i], tree)
    with jax.default_device(CPU):  # NumPy inputs placed as the sliced CPU states were
        loop = [single(at(host_states, i), raw_keys[i], host_objectives[i]) for i in range(AGENTS)]
    reference = jax.tree_util.tree_map(lambda *xs: np.stack(xs), *loop)
    assert len(out) == (1 if gp.PROTECTED else 2)
    for batched in out:
        assert_trees_close(out[batched], reference)
    assert np.unique(np.asarray(reference[1]), axis=0).shape[0] == AGENTS  # three different decisions
    assert_default_cpu_path(lapack_calls(compiled[None].as_text()))
    # Batched: the grid search vmaps inside each agent, so stacks are (agents, grid, n, n).
    assert_batched(lapack_calls(compiled[True].as_text()))
    cuda = stablehlo_calls(traced[None].lower(lowering_platforms=("cuda",)).as_text())
    assert any(t == "cusolver_potrf_ffi" and dims[0] == AGENTS for t, dims in cuda), cuda
    assert not any(t.startswith("lapack_") for t, _ in cuda), cuda
