"""ARLBench's PPO options in hcjax's PPO: vf_clip_eps, normalize_advantage, minibatch_size, and
clip_eps / max_grad_norm at 0 (the loss itself against NumPy: tests/test_ppo.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import hcjax
from agents import ppo
from agents.ppo import adam
from agents.ppo.learner import make_optimizer
from tests.tiny_env import make_walk

H = hcjax.Hyperparameter

# ---- configuration ---------------------------------------------------------------------


@pytest.mark.parametrize("fields, match", [
    (dict(vf_clip_eps=-0.1), r"vf_clip_eps must be a number >= 0.0"),
    (dict(vf_clip_eps=float("nan")), r"vf_clip_eps must be a number"),
    (dict(vf_clip_eps=True), r"vf_clip_eps must be a number"),
    (dict(normalize_advantage=1), r"normalize_advantage must be True or False"),
    (dict(minibatch_size=0), r"minibatch_size must be an integer >= 1"),
    (dict(minibatch_size=64.0), r"minibatch_size must be an integer >= 1"),
    (dict(minibatch_size=64, num_minibatches=4), r"minibatch_size or num_minibatches, not both.*minibatch_size=64, "
                                                 r"num_minibatches=4"),
    (dict(clip_eps=-0.1), r"clip_eps must be a number >= 0.0"),
    (dict(max_grad_norm=-1.0), r"max_grad_norm must be a number >= 0.0"),
])
def test_config_refuses_bad_values_naming_the_field(fields, match):
    with pytest.raises(ValueError, match=match):
        ppo.PPOConfig(**fields)


def test_config_accepts_arlbench_ranges():
    """ARLBench's ranges start at 0 for clip_eps, max_grad_norm and vf_clip_eps; the defaults keep
    today's PPO (no value clipping, normalised advantages, num_minibatches)."""
    cfg = ppo.PPOConfig(clip_eps=0.0, max_grad_norm=0.0, vf_clip_eps=0.0, normalize_advantage=False,
                        minibatch_size=64)
    assert (cfg.clip_eps, cfg.max_grad_norm, cfg.vf_clip_eps, cfg.normalize_advantage) == (0.0, 0.0, 0.0, False)
    default = ppo.PPOConfig()
    assert (default.vf_clip_eps, default.normalize_advantage, default.minibatch_size) == (None, True, None)
    assert ppo.PPOConfig(minibatch_size=64, num_minibatches=16).minibatches(256) == 4  # the default count is no clash


@pytest.mark.parametrize("space, match", [
    ([H("normalize_advantage", 0.0, 1.0)], r"normalize_advantage is a switch: give it as a categorical"),
    ([H.choice("normalize_advantage", [0, 2])], r"normalize_advantage is categorical: its options must be \(0, 1\)"),
    ([H("vf_clip_eps", -0.1, 0.5)], r"vf_clip_eps bounds \[-0.1, 0.5\] must be >= 0.0"),
    ([H.choice("vf_clip_eps", [-0.1, 0.2])], r"vf_clip_eps is categorical: its options"),
])
def test_space_refuses_bad_switch_and_clip_bounds(space, match):
    with pytest.raises(ValueError, match=match):
        ppo.check_space(hcjax.Space(space))


def test_space_accepts_arlbench_search_space_bounds():
    ppo.check_space(hcjax.Space([H("clip_eps", 0.0, 0.5), H("vf_clip_eps", 0.0, 0.5), H("max_grad_norm", 0.0, 1.0),
                                 H.choice("normalize_advantage", [1, 0])]))


@pytest.mark.parametrize("size, max_batch, count", [
    (64, 256, 4), (100, 256, 3), (255, 256, 2), (256, 256, 1), (512, 256, 1), (1, 8, 8), (8, 8, 1)])
def test_minibatch_size_sets_the_number_of_minibatches(size, max_batch, count):
    """ceil(max batch / minibatch_size), one minibatch of the whole batch when the size is at
    least the batch (ARLBench cuts a larger size to the rollout: CartPole's 512 of 256)."""
    assert ppo.PPOConfig(minibatch_size=size).minibatches(max_batch) == count


def test_the_learner_takes_its_minibatches_from_minibatch_size():
    """make_learner's count of minibatches (its Parts, bound into every function) follows
    minibatch_size over the maximum batch (num_envs x max_steps = 4 x 8 = 32 frames)."""
    space = hcjax.Space([H("clip_eps", 0.0, 0.5)])
    for fields, count in [(dict(minibatch_size=10), 4), (dict(minibatch_size=64), 1), (dict(num_minibatches=8), 8)]:
        cfg = ppo.PPOConfig(num_envs=4, batch_size=32, hidden_sizes=(8,), **fields)
        parts = ppo.make_learner(cfg, make_walk(), hcjax.make_tuner("fixed", space)).learn.args[0]
        assert (parts.num_minibatches, parts.minibatch_length) == (count, -(-32 // count))
        assert parts.clip_values is False  # no value clipping: the rollout's values stay out of the samples


def test_the_learner_cuts_equal_minibatches_only_where_every_sample_is_valid():
    """Parts.full (stages.update_epochs' one gather per epoch): the batch size fills the whole
    rollout, is not tuned, and divides into the minibatches; else the general path."""
    fixed = hcjax.Space([H("clip_eps", 0.0, 0.5)])
    tuned = hcjax.Space([H.choice("batch_size", [16, 32])])
    for fields, space, full in [(dict(batch_size=32, num_minibatches=4), fixed, True),
                                (dict(batch_size=32, minibatch_size=7), fixed, False),  # 5 minibatches of 32
                                (dict(batch_size=24, max_batch_size=32, num_minibatches=4), fixed, False),
                                (dict(batch_size=32, num_minibatches=4), tuned, False)]:
        cfg = ppo.PPOConfig(num_envs=4, hidden_sizes=(8,), **fields)
        assert ppo.make_learner(cfg, make_walk(), hcjax.make_tuner("fixed", space)).learn.args[0].full is full, fields


# ---- max_grad_norm 0 ---------------------------------------------------------------------


@jax.jit
def clipped_steps(grad_scale):
    """Two steps of the learner's guarded Adam (adam.step) with max_grad_norm 0 and lr 0.1 on
    params w (3,), the gradient grad_scale * (1, 2, 3) -> [(params, opt_state, accepted)] * 2."""
    opt = optax.inject_hyperparams(make_optimizer, static_args=("flat",))(
        learning_rate=0.1, max_grad_norm=0.0, adam_eps=1e-5, flat=False)
    params, state, out = {"w": jnp.ones(3)}, None, []
    state = opt.init(params)
    for _ in range(2):
        params, state, accepted = adam.step(state, params, {"w": grad_scale * jnp.arange(1.0, 4.0)}, True, False)
        out.append((params, state, accepted))
    return out


def test_max_grad_norm_zero_zeroes_every_gradient_without_nan():
    """At max_grad_norm 0 every clipped gradient is 0, so Adam's moments stay 0 and the
    parameters do not move; a zero gradient too (where optax's clip_by_global_norm divides 0
    by 0: adam.step keeps a zero-norm gradient as it is), so no NaN enters a state."""
    for scale in (1.0, 0.0):
        for params, state, accepted in clipped_steps(scale):
            np.testing.assert_array_equal(np.asarray(params["w"]), np.ones(3))
            assert bool(accepted) and all(np.all(np.isfinite(x)) for x in jax.tree.leaves(state))
        assert int(state.inner_state[1][0].count) == 2
    grads = {"w": jnp.zeros(3)}
    updates, _ = jax.jit(lambda g: make_optimizer(0.1, 0.0, 1e-5, flat=False).update(
        g, make_optimizer(0.1, 0.0, 1e-5, flat=False).init(g)))(grads)
    assert np.isnan(np.asarray(updates["w"])).all()  # optax's own clip: 0 / 0


# ---- a tiny learner tuning ARLBench's options -----------------------------------------------

# vf_clip_eps, normalize_advantage (index 0: option 0, off), clip_eps, max_grad_norm
DEFAULTS = np.float32([0.1, 0.0, 0.2, 0.5])


@pytest.fixture(scope="module")
def tiny():
    """The walker, 4 envs x 4 steps, 2 minibatches of 8 (minibatch_size), 1 epoch; a fixed
    tuner over vf_clip_eps, normalize_advantage, clip_eps and max_grad_norm; one iteration
    from a given state jitted once."""
    space = hcjax.Space([H("vf_clip_eps", 0.0, 0.5, default=0.1), H.choice("normalize_advantage", [0, 1]),
                         H("clip_eps", 0.0, 0.5, default=0.2), H("max_grad_norm", 0.0, 1.0, default=0.5)])
    cfg = ppo.PPOConfig(num_envs=4, batch_size=16, minibatch_size=8, update_epochs=1, hidden_sizes=(8,),
                        num_iterations=2, tune_every=100)
    learner = ppo.make_learner(cfg, make_walk(), hcjax.make_tuner("fixed", space))
    return dict(learner=learner, init=jax.jit(learner.init), step=jax.jit(lambda s: learner.iterate(s, 1, 0)))


def flat_params(state) -> np.ndarray:
    return np.concatenate([np.ravel(x) for x in jax.tree.leaves(state.params)])


@pytest.mark.slow
def test_a_learner_tuning_the_options_records_them_and_each_changes_the_update(tiny):
    """The metrics' hparams hold the tuner's values; from one initial state, a different
    vf_clip_eps, normalize_advantage (on) or clip_eps changes the parameters; max_grad_norm 0
    leaves them as they were (first Adam step of zero gradients), all finite, none rejected."""
    parts = tiny["learner"].learn.args[0]
    assert (parts.num_minibatches, parts.clip_values) == (2, True)
    initial = tiny["init"](jax.random.PRNGKey(0))
    np.testing.assert_array_equal(np.asarray(initial.hparams), DEFAULTS)
    runs = {}
    for name, values in [("base", DEFAULTS), ("vf_clip_eps", [0.0, 0, 0.2, 0.5]),
                         ("normalize_advantage", [0.1, 1, 0.2, 0.5]), ("clip_eps", [0.1, 0, 0.0, 0.5]),
                         ("max_grad_norm", [0.1, 0, 0.2, 0.0])]:
        state, m = tiny["step"](initial.replace(hparams=jnp.asarray(values, jnp.float32)))
        np.testing.assert_array_equal(np.asarray(m["hparams"][0]), np.float32(values))
        assert int(m["rejected"][0]) == 0, name
        assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves((state.params, state.opt_state))), name
        runs[name] = flat_params(state)
    before = flat_params(initial)
    assert not np.array_equal(runs["base"], before)
    for name in ("vf_clip_eps", "normalize_advantage", "clip_eps"):
        assert not np.array_equal(runs[name], runs["base"]), f"{name} did not change the update"
    np.testing.assert_array_equal(runs["max_grad_norm"], before)
