"""The LGDS bandit problem, and HyperController beating Random on it."""
import jax
import numpy as np
import pytest

import hcjax
from hcjax import lgds
from tests.test_gp import AGENTS, CPU, assert_default_cpu_path, lapack_calls


def test_gamma_is_schur_and_noise_is_the_kernel():
    problem = lgds.make(jax.random.PRNGKey(0), h=2, d=4, rho=0.9, alpha=0.3)
    assert problem.gamma.shape == (16, 16) and problem.z0.shape == (16,)
    assert np.max(np.abs(np.linalg.eigvals(np.asarray(problem.gamma, np.float64)))) < 1.0
    q = np.asarray(problem.noise_chol @ problem.noise_chol.T)
    c = lgds.config_coordinates(2, 4)
    # configurations 0 = (0, 0) and 1 = (0, 1/3) are neighbours on the grid
    np.testing.assert_allclose(c[1], [0.0, 1 / 3], rtol=1e-6)
    expected = 0.3**2 * np.exp(-0.5 * np.sum((c[0] - c[1]) ** 2) / 0.3**2)
    np.testing.assert_allclose(q[0, 1], expected, rtol=1e-3)


def test_vmapped_problems_follow_the_lapack_protection():
    """`make` vmapped over keys (as `regret_table` builds its problems): the SVD of ||M||_2 runs
    one matrix per LAPACK call with a protected jax (< 0.11: a stack of them can deadlock
    XLA:CPU), a stack otherwise (read from the compiled HLO); the values equal a loop of
    single problems."""
    keys = jax.device_put(jax.random.split(jax.random.PRNGKey(4), AGENTS), CPU)
    gamma = lambda key: lgds.make(key, h=2, d=3).gamma
    compiled = jax.jit(jax.vmap(gamma)).lower(keys).compile()
    svd = [call for call in lapack_calls(compiled.as_text()) if "gesdd" in call[0]]
    assert len(svd) == 1  # the spectral norm's
    assert_default_cpu_path(svd)  # one matrix per call if gp.PROTECTED, a stack of AGENTS otherwise
    single = jax.jit(gamma)
    np.testing.assert_allclose(compiled(keys), np.stack([single(k) for k in keys]), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_run_plays_the_chosen_configuration():
    """A fixed tuner at arms (i, j) has regret max z_t - z_t[i * d + j], computed by hand."""
    h, d, n = 2, 5, 20
    space = hcjax.unit_space(h)
    tuner = hcjax.make_tuner("fixed", space, values=[0.25, 1.0])  # arms (1, 4)
    problem = lgds.make(jax.random.PRNGKey(1), h=h, d=d)
    key = jax.random.PRNGKey(2)
    regret = np.asarray(lgds.run(problem, tuner, key, n))
    # Replay the same noise: run() splits key into (init, run) and each step into 3 keys.
    @jax.jit  # one compiled step (run op by op, each operation compiled its own program)
    def replay(z, k):
        _, _, k_next = jax.random.split(k, 3)
        return problem.gamma @ z + problem.noise_chol @ jax.random.normal(k_next, z.shape)

    _, k_run = jax.random.split(key)
    z = np.asarray(problem.z0)
    for t, k in enumerate(jax.random.split(k_run, n)):
        assert regret[t] == pytest.approx(z.max() - z[1 * d + 4], abs=1e-4)
        z = np.asarray(replay(z, k))
    assert np.all(regret >= 0)


@pytest.mark.parametrize("field,kwargs", [
    ("lgds.rho", {"rho": 1.0}), ("lgds.d", {"d": 1}), ("lgds.alpha", {"alpha": 2.0}),
    ("lgds.length_scale", {"length_scale": 0.0}),
])
def test_bad_problem_options(field, kwargs):
    with pytest.raises(ValueError, match=field):
        lgds.make(jax.random.PRNGKey(0), **kwargs)


@pytest.mark.slow
@pytest.mark.optimized  # trains long: optimised code repays its compilation
def test_hypercontroller_beats_random():
    """h = 2, d = 10, n = 1000, 64 seeds: mean regret lower by more than 3 standard errors.

    The cost is the compilation: 64 seeds instead of 256 save a third of the test. Checked
    over keys 2026, 1, 2, 3: the difference was 8.8-11.5 standard errors of the difference
    and 6.3-9.2 of the two means (256 seeds: 20.6 and 15.9)."""
    space = hcjax.unit_space(2)
    methods = {"hypercontroller": hcjax.make_tuner("hypercontroller", space, d=10),
               "random": hcjax.make_tuner("random", space)}
    table = lgds.regret_table(methods, jax.random.PRNGKey(2026), seeds=64, n=1000, h=2, d=10)
    hc, rnd = table["hypercontroller"], table["random"]
    diff = np.asarray(rnd["totals"]) - np.asarray(hc["totals"])
    se_diff = diff.std(ddof=1) / np.sqrt(diff.size)
    se_both = np.hypot(hc["se"], rnd["se"])
    assert diff.mean() > 3 * se_diff, (hc["mean"], rnd["mean"], se_diff)
    assert diff.mean() > 3 * se_both, (hc["mean"], rnd["mean"], se_both)
