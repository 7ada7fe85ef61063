"""PureJaxRL-style PPO whose hyperparameters are traced values, any tuner in the loop.

    learner = make_learner(config, env, tuner)
    state = learner.init(key)                         # LearnerState
    state, metrics = learner.iterate(state, 10, 0)    # lax.scan of iterations 0..9
    ret = learner.evaluate(state, key)                # deterministic episode return
    train = make_train(config, env, tuner)            # train(key) -> (state, metrics)
    make_train(config, env, tuner, eval_every=10)     # train(key) -> (state, metrics, evaluations)
    jax.jit(jax.vmap(train))(keys)                    # N agents, own nets/optimisers/tuners

One iteration (all inside one jitted function):
1. rollout: a scan over `max_steps` = ceil(max_batch_size / num_envs) steps of the
   `num_envs` envs; steps t >= n_steps = ceil(batch_size / num_envs) (batch_size traced,
   from the tuner) leave the env state unchanged and are masked, so the iteration
   collects n_steps * num_envs valid frames (the chosen batch size up to one step of
   all envs). Observations are normalised with the statistics frozen at the start of
   the iteration; the statistics are updated after the update, by valid frames only.
2. GAE backwards through the mask (masked steps pass the bootstrap value through).
3. `update_epochs` epochs x `num_minibatches` (M) minibatches: a permutation puts the
   n_valid valid samples first (argsort of uniform keys, masked ones pushed to the end);
   minibatch m takes valid samples [m n_valid // M, (m+1) n_valid // M) through a
   fixed-size gather of L = ceil(max_batch / M) indices, masked beyond its size, so
   every valid sample is used exactly once per epoch and the compute is that of the
   maximum batch. Advantages are normalised per minibatch over its valid samples.
4. `tuner.tell(objective)` every iteration (from the second on for the "change"
   objectives), `tuner.ask` after iterations t with (t + 1) % tune_every == 0; the
   asked values are used from the next iteration on. The ask runs only on those
   iterations: `iterate(state, n, start)` scans over the iteration numbers start,
   start + 1, ... (not over per-agent state), so under `vmap` the decision is an
   unbatched `lax.cond`, not a `where` that would compute every agent's ask every
   iteration and throw it away.

Tuned hyperparameters. Any field of TUNABLE named in the tuner's space is a traced
value read from the tuner's (h,) values every iteration (one compilation serves every
value); the fields not in the space keep their PPOConfig value. learning_rate,
max_grad_norm and adam_eps reach the optimiser through `optax.inject_hyperparams`;
clip_eps, vf_coef, ent_coef, vf_clip_eps and normalize_advantage (a categorical of options
0 and 1) the loss; gamma, gae_lambda and reward_scale GAE;
batch_size the rollout (see 1.); obs_clip the observation normalisation. A space
naming a static field (num_envs, hidden_sizes, update_epochs, ...) or an unknown
name, or bounds outside a field's allowed range, raises ValueError.

Objectives and invalid data. The objective (PPOConfig.objective) is computed from the
iteration's rewards: "reward_change" X_t = R_t - R_(t-1) with R_t the mean per-step
reward of the iteration's valid frames; "reward" X_t = R_t; "return_change" the change
of the mean return of the episodes finished in the iteration (the previous value when
none finished). An iteration with a non-finite reward or one above MAX_ABS_OBJECTIVE
(1e15) in magnitude gives an invalid (NaN) objective, and so does the next change
computed from it: the tuner ignores and counts it (never learns from it).
metrics["episode_return"] is NaN until an episode has finished.

Divergence guard: a minibatch step whose loss or gradient is not finite is rejected
(parameters and optimiser state kept, `adam.step`: the choice fused into the Adam update, no
extra pass over the state); an iteration whose accepted steps still leave a non-finite
value in the parameters or optimiser state (an overflow: finite gradients, an absurd
learning rate) is undone at its end. metrics["rejected"] is 1 for an iteration with any
rejected step or undone update. Training goes on.

Loss: clipped surrogate + vf_coef * 0.5 * (V - target)^2 (unclipped value loss,
vf_coef 0.5; with vf_clip_eps set or tuned ARLBench's clipped one) - ent_coef * entropy;
Adam (eps 1e-5) after global-norm clipping 1.0. PPOConfig.minibatch_size (a size, static)
may replace num_minibatches; PPOConfig.optimizer_layout chooses where Adam keeps its moments.
Termination and time-limit truncation are both treated as terminal (no bootstrap).

Modules: config (PPOConfig, TUNABLE, check_space), adam (the guarded clipped-Adam step),
stages (the pure stages: rollout,
gae, update_epochs, ppo_loss, iteration_objective, episode_return), learner
(LearnerState, Learner, make_learner, make_train, eval_key).
"""
from agents.ppo.config import (
                               METRIC_KEYS,
                               OBJECTIVES,
                               OPTIMIZER_HPARAMS,
                               OPTIMIZER_LAYOUTS,
                               REAL_FIELDS,
                               TUNABLE,
                               PPOConfig,
                               check_space,
)
from agents.ppo.learner import INHERITED, Learner, LearnerState, eval_key, make_learner, make_train
from agents.ppo.stages import (
                               all_finite,
                               episode_return,
                               epoch_order,
                               gae,
                               iteration_objective,
                               minibatch_rows,
                               ppo_loss,
                               rollout,
                               update_epochs,
)

__all__ = ["INHERITED", "METRIC_KEYS", "OBJECTIVES", "OPTIMIZER_HPARAMS", "OPTIMIZER_LAYOUTS", "REAL_FIELDS",
           "TUNABLE", "Learner", "LearnerState", "PPOConfig", "all_finite", "check_space", "epoch_order", "eval_key",
           "episode_return", "gae", "iteration_objective", "make_learner", "make_train", "minibatch_rows", "ppo_loss",
           "rollout", "update_epochs"]
