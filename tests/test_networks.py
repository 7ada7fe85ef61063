"""agents.networks.orthogonal under vmap: the batched and the one-QR-at-a-time paths give
the values of a Python loop of unvmapped inits (the batched path is run with jax >= 0.11 only:
tests.test_gp.runs_here), the kernels are orthogonal with the
requested gain, and the default path is read from the HLO (unbatched LAPACK QR when
compiled for the CPU, batched cuSOLVER QR when lowered for CUDA)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import networks as nets
from hcjax import gp
from tests.test_gp import CPU, assert_batched, assert_unbatched, lapack_calls, runs_here, stablehlo_calls

AGENTS = 3
OBS, ACT, HIDDEN = 5, 2, (64, 64)
ACTOR = nets.Actor(ACT, discrete=False, hidden_sizes=HIDDEN)
CRITIC = nets.Critic(HIDDEN)


def init(key):
    """One agent's (actor, critic) parameters."""
    k_actor, k_critic = jax.random.split(key)
    obs = jnp.zeros((1, OBS))
    return ACTOR.init(k_actor, obs), CRITIC.init(k_critic, obs)


def kernels(params):
    """[(kernel, expected gain)] of one agent's Dense layers: sqrt(2) hidden, 0.01 actor output, 1 critic output."""
    out = []
    for net, out_gain in zip(params, (0.01, 1.0)):
        layers = net["params"]["MLP_0"]
        for i in range(len(HIDDEN) + 1):
            out.append((np.asarray(layers[f"Dense_{i}"]["kernel"], np.float64),
                        out_gain if i == len(HIDDEN) else np.sqrt(2.0)))
    return out


@pytest.mark.slow
def test_vmapped_init_paths_equal_the_loop_and_are_orthogonal():
    keys = jax.device_put(jax.random.split(jax.random.PRNGKey(3), AGENTS), CPU)
    compiled, out = {}, {}
    for batched in (None, False, True):
        with gp.lapack_batching(batched):
            compiled[batched] = jax.jit(jax.vmap(init)).lower(keys).compile()
        if runs_here(batched):  # a forced-batched QR is compiled and read, not run, with a protected jax
            out[batched] = compiled[batched](keys)
    loop = [jax.jit(init)(keys[i]) for i in range(AGENTS)]
    reference = jax.tree_util.tree_map(lambda *xs: np.stack(xs), *loop)
    assert len(out) == (2 if gp.PROTECTED else 3)
    for batched in out:
        jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(np.asarray(a), b, rtol=1e-5, atol=1e-6),
                               out[batched], reference)
    for i in range(AGENTS):
        for W, gain in kernels(jax.tree_util.tree_map(lambda a: a[i], reference)):
            gram = W.T @ W if W.shape[0] >= W.shape[1] else W @ W.T  # the smaller side is orthonormal
            np.testing.assert_allclose(gram, gain ** 2 * np.eye(len(gram)), atol=1e-5 * max(1.0, gain ** 2))
    first = reference[0]["params"]["MLP_0"]["Dense_1"]["kernel"]
    assert not np.allclose(first[0], first[1])  # agents draw different weights
    # Compiled for XLA:CPU: forced sequential, one QR per LAPACK call; forced batched, stacks
    # of AGENTS; by default sequential with a protected jax (< 0.11), batched otherwise.
    assert_unbatched(lapack_calls(compiled[False].as_text()))
    assert_batched(lapack_calls(compiled[True].as_text()), AGENTS)
    if gp.PROTECTED:
        assert_unbatched(lapack_calls(compiled[None].as_text()))
    else:
        assert_batched(lapack_calls(compiled[None].as_text()), AGENTS)
    # Lowered for CUDA: the same default traces to batched cuSOLVER QRs.
    cuda = stablehlo_calls(jax.jit(jax.vmap(init)).trace(keys).lower(lowering_platforms=("cuda",)).as_text())
    qr = [dims for t, dims in cuda if t in ("cusolver_geqrf_ffi", "cusolver_orgqr_ffi")]
    assert qr and all(dims[0] == AGENTS for dims in qr), cuda
    assert not any(t.startswith("lapack_") for t, _ in cuda), cuda
