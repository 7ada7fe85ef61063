"""PPO's guarded clipped-Adam step on the state of `learner.make_optimizer`.

`step` does what `opt.update` then `optax.apply_updates` do for
`optax.inject_hyperparams(make_optimizer)` (gradients clipped to a global norm, then Adam,
then -learning_rate; per weight array or on one flat vector) and takes the step only where
`ok`: the state it reads and writes is optax's, so checkpoints, populations and the tests
that read `opt_state.hyperparams` or the Adam moments see no difference.

Why not optax's update and a select afterwards: a rejected step must keep the parameters and
the optimiser state, and `where(ok, new, old)` on whole trees after the update made XLA
recompute the new moments inside the parameter update and copy every moment array to keep
the old ones (on the CPU: +55% per minibatch update of a 3x256 actor and critic, counting the
finiteness checks of the results, +15% without them). Here the moments are selected first and
the parameter update reads the selected moments, so each weight array is read and written once,
in place, and `ok` is a scalar known before the step (the loss and the gradient norm finite).

With the flat layout the gradient is flattened (the norm and the moments are one vector) but
the parameters are not: each weight array adds its slice of the flat update. Flattening the
parameters too and splitting the result cost a concatenated copy of every parameter per step
(bench_peers' 2x64 CartPole agents, one process, interleaved: the whole training program 1.20x
faster at 16 vmapped agents and 1.10x at 256 without it, the same bits).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

B1, B2 = 0.9, 0.999  # optax.adam's defaults, as make_optimizer uses them


def _flatten(tree) -> jax.Array:
    return jnp.concatenate([jnp.reshape(x, (-1,)) for x in jax.tree.leaves(tree)])


def _unflatten(like, flat: jax.Array):
    leaves, treedef = jax.tree.flatten(like)
    offsets = np.cumsum([np.size(x) for x in leaves])[:-1]
    parts = jnp.split(flat, offsets)
    return jax.tree.unflatten(treedef, [jnp.reshape(p, x.shape) for p, x in zip(parts, leaves)])


def _increment(count):
    """optax.safe_increment: count + 1, staying at the dtype's maximum."""
    top = jnp.iinfo(count.dtype).max
    return jnp.where(count < top, count + 1, top)


def global_norm(grads) -> jax.Array:
    """float32 scalar: the Euclidean norm of every leaf of `grads` together."""
    return jnp.sqrt(sum(jnp.sum(jnp.square(g)) for g in jax.tree.leaves(grads)))


def step(opt_state, params, grads, ok, flat: bool):
    """-> (params, opt_state, accepted bool scalar): one clipped-Adam step where `accepted`
    = ok (bool scalar) and the gradient norm is finite; elsewhere params and opt_state unchanged.

    opt_state: the state of `optax.inject_hyperparams(make_optimizer)(..., flat=flat)`
    (hyperparams learning_rate, max_grad_norm, adam_eps). The clip is optax's
    clip_by_global_norm (t / norm * max_grad_norm above the bound) except at a zero norm,
    where the gradient (all zeros) is kept: optax divides 0 by 0 there when max_grad_norm is 0.
    A step can still overflow (finite gradients, an absurd learning rate): the caller checks
    the results where that matters (`stages.update_epochs`, once per iteration).
    """
    hp = opt_state.hyperparams
    lr, max_norm, eps = hp["learning_rate"], hp["max_grad_norm"], hp["adam_eps"]
    clip_state, (adam, scale_state) = opt_state.inner_state
    g = _flatten(grads) if flat else grads
    norm = global_norm(g)
    ok = ok & jnp.isfinite(norm)
    keep = (norm < max_norm) | (norm == 0.0)
    g = jax.tree.map(lambda t: jnp.where(keep, t, (t / norm) * max_norm), g)
    count = jnp.where(ok, _increment(adam.count), adam.count)
    mu = jax.tree.map(lambda m, t: jnp.where(ok, (1 - B1) * t + B1 * m, m), adam.mu, g)
    nu = jax.tree.map(lambda v, t: jnp.where(ok, (1 - B2) * (t * t) + B2 * v, v), adam.nu, g)
    c = count.astype(jnp.float32)
    bc1, bc2 = 1 - B1 ** c, 1 - B2 ** c  # 0 before the first accepted step: its update is never taken

    def change(m, v):
        return -lr * ((m / bc1) / (jnp.sqrt(v / bc2) + eps))

    updates = jax.tree.map(change, mu, nu)
    if flat:
        updates = _unflatten(params, updates)
    p = jax.tree.map(lambda x, u: jnp.where(ok, (x + u).astype(x.dtype), x), params, updates)
    inner = (clip_state, (adam._replace(count=count, mu=mu, nu=nu), scale_state))
    opt_state = opt_state._replace(count=jnp.where(ok, _increment(opt_state.count), opt_state.count),
                                   inner_state=inner)
    return p, opt_state, ok
