"""The shipped presets (`PRESETS`) and the settings they are built from; `experiments.study.presets`
validates them and resolves a study (the names below are re-exported there).

    smoke  one environment, three methods, two seeds, a few iterations, tiny networks:
           the README's first command, a table and a figure in under 3 minutes on a
           2-core CPU (compilation included).
    cpu    every method + fixed on the paper's five environments, 3 seeds, sized to
           finish within about 2 hours on a 2-core CPU. Its reductions from the paper
           are listed in `Preset.reductions`.
    paper  the paper's settings (10 seeds, 1000 iterations, 1000-6000 frames per
           iteration, 3x256 networks, 10 epochs), meant for a GPU.
    cpu_learn  a CPU study that can tell methods apart: five JAX tasks where PPO with the
           fixed defaults clearly learns, all seven methods, 20 seeds, methods fused.
    gpu    the paper's tasks that have a Brax version, all seven methods, 16 seeds,
           methods fused: about 5 minutes on one H100 (measured, results/gpu_h100_5b602f1).
    verdict  does tuning help, on seeds it never saw? Four gymnax tasks (three the default
           learns, MountainCar-v0 it learns poorly), the paper's six methods, `fixed`, a
           32 x 3 sweep and two poor defaults on 10 tuning seeds, every one again on 10 test
           seeds (`experiments.study.protocol`); about an hour on a 2-core CPU by the estimate.
    headroom  does tuning help where it can? ARLBench's PPO setting (its default configuration,
           search space, budgets and evaluation) on gymnax Pendulum-v1 and
           MountainCarContinuous-v0, where its released runs show room above the default, and
           CartPole-v1 as the do-no-harm control; the paper's six methods (five also started
           from two poor defaults), its random search as a 5 x 32 x 3 sweep with the default in
           every draw, 5 tuning and 20 test seeds; at least 100 decisions per run.

Environments. The paper's names are mapped per preset (`paths`) to either a Brax re-implementation
(jitted, vmapped with the agents, fast) or the exact gymnasium task stepped on the host (the paper's
environment, slower): `CPU_PATHS`, `PAPER_PATHS`, `GPU_PATHS`.
"""
from __future__ import annotations

import dataclasses

from experiments.study.methods import METHODS, PAPER_METHODS
from experiments.study.plan import Preset
from hcjax import ppo_space

PAPER_ENVS = ("HalfCheetah-v4", "BipedalWalker-v3", "Pusher-v4", "InvertedDoublePendulum-v4", "Reacher-v4")


# Per preset, the path of each paper environment and why. Speeds are the anchor figures
# of the paper measured on a 2-core CPU (Brax: 64 envs x 100 steps jitted; gymnasium: one env).
CPU_PATHS = {
    "HalfCheetah-v4": ("halfcheetah",
                       "Brax (spring) steps 11k/s jitted and vmapped with the agents vs 7.4k/s for one "
                       "gymnasium env plus a host round trip per step; speed wins on the CPU budget"),
    "BipedalWalker-v3": ("BipedalWalker-v3", "gymnasium only (Box2D has no Brax/gymnax port)"),
    "Pusher-v4": ("Pusher-v5",
                  "gymnasium Pusher-v5 (v4 needs mujoco<3): 6.4k steps/s on the host is faster than "
                  "Brax pusher (2.0k/s) and is the paper's exact task"),
    "InvertedDoublePendulum-v4": ("inverted_double_pendulum",
                                  "Brax steps 126k/s vs 5.9k/s for gymnasium: 20x faster"),
    "Reacher-v4": ("reacher", "Brax steps 85k/s vs 7.9k/s for gymnasium: 10x faster"),
}
PAPER_PATHS = {
    "HalfCheetah-v4": ("HalfCheetah-v4", "fidelity: the paper's exact MuJoCo task (gymnasium, host)"),
    "BipedalWalker-v3": ("BipedalWalker-v3", "gymnasium only (Box2D has no Brax/gymnax port)"),
    "Pusher-v4": ("Pusher-v5", "fidelity: the paper's task; v5 because v4 needs mujoco<3 (same dynamics)"),
    "InvertedDoublePendulum-v4": ("InvertedDoublePendulum-v4", "fidelity: the paper's exact task (gymnasium)"),
    "Reacher-v4": ("Reacher-v4", "fidelity: the paper's exact task (gymnasium)"),
}


def paper_space(batch_size: tuple[int, int] = (1000, 6000)) -> tuple[dict, ...]:
    """The paper's four hyperparameters (`hcjax.ppo_space`) as study-file entries."""
    return tuple({k: v for k, v in dataclasses.asdict(h).items() if v is not None}
                 for h in ppo_space(batch_size=batch_size).hyperparameters)


# The PPO of a study that leaves `ppo` out (a study file without a [ppo] table, Study(ppo=None)):
# sized for a 2-core CPU (the documented smallest study in about a minute), announced in the
# estimate line; PPOConfig's own defaults are the paper's (3x256, 10 epochs x 16 minibatches).
SMALL_PPO = dict(num_envs=8, hidden_sizes=(64, 64), update_epochs=4, num_minibatches=4)

# The space of the studies sized for learning within 100 iterations (cpu_learn, gpu).
LEARNING_SPACE = (
    dict(name="learning_rate", low=1e-4, high=1e-2, scale="log", default=1e-3),
    dict(name="clip_eps", low=0.1, high=0.5, default=0.2),
    dict(name="gae_lambda", low=0.9, high=1.0, default=0.95),
    dict(name="batch_size", low=256, high=2048, integer=True, default=1024),
)
# The verdict preset's: the learning space at half its batch sizes (an hour on the CPU for 1384 runs).
VERDICT_SPACE = tuple(dict(h, low=128, high=1024, default=512) if h["name"] == "batch_size" else h
                      for h in LEARNING_SPACE)
# Their PPO settings and GP buffers (100 points: every observation of a 100-iteration run).
LEARNING_PPO = dict(num_envs=16, hidden_sizes=(64, 64), update_epochs=4, num_minibatches=8, ent_coef=0.0,
                    eval_steps=1000, eval_episodes=4)
LEARNING_TUNER = dict(gp_ucb=dict(buffer=100), pb2=dict(buffer=100))
# the gymnax tasks' own settings, calibrated with LEARNING_PPO (docs/studies.md): CartPole's and
# Acrobot's per-step reward is constant, so their objective is the change of the episode return
LEARNING_ENV_PPO = {"CartPole-v1": dict(objective="return_change", eval_steps=500),
                    "Acrobot-v1": dict(objective="return_change", eval_steps=500),
                    "Pendulum-v1": dict(reward_scale=0.1, update_epochs=10, num_minibatches=16, eval_steps=200)}
# The headroom preset: ARLBench's PPO (automl/arlbench, branch experiments, 1c67583: its
# algorithm/ppo.yaml defaults, its classic-control search space search_space/ppo_cc.yaml, its
# experiments/cc_*_ppo.yaml tasks; docs/results.md names every difference).
ARLBENCH_PPO = dict(num_envs=8, hidden_sizes=(64, 64), activation="tanh", learning_rate=3e-4, clip_eps=0.2,
                    vf_clip_eps=0.2, gae_lambda=0.95, gamma=0.99, ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5,
                    normalize_advantage=True, minibatch_size=64, adam_eps=1e-5, normalize_obs=False,
                    eval_episodes=128, eval_policy="greedy")
ARLBENCH_SPACE = (  # ppo_cc.yaml without minibatch_size (static here: see reductions), defaults from ppo.yaml
    dict(name="learning_rate", low=1e-6, high=0.1, scale="log", default=3e-4),
    dict(name="ent_coef", low=0.0, high=0.5, default=0.0),
    dict(name="gae_lambda", low=0.8, high=0.9999, default=0.95),
    dict(name="clip_eps", low=0.0, high=0.5, default=0.2),
    dict(name="vf_clip_eps", low=0.0, high=0.5, default=0.2),
    dict(name="vf_coef", low=0.0, high=1.0, default=0.5),
    dict(name="max_grad_norm", low=0.0, high=1.0, default=0.5),
    dict(name="normalize_advantage", options=[0, 1], default=1),
)
# Per task: ARLBench's environments, rollout, epochs and observation normalisation (Pendulum's
# rollout shortened from 512 to 128 steps, ARLBench's default n_steps: 100 decisions in its budget).
ARLBENCH_ENV_PPO = {
    "CartPole-v1": dict(batch_size=256, update_epochs=20, objective="return_change", eval_steps=500),
    "Pendulum-v1": dict(batch_size=1024, update_epochs=10, eval_steps=200),
    "MountainCarContinuous-v0": dict(batch_size=8, update_epochs=10, normalize_obs=True, eval_steps=999),
}
# Their budgets (1e5, 1e5 and 2e4 steps) in iterations, decided often enough for 100+ decisions,
# evaluated 5 times (the last: the score).
ARLBENCH_SCHEDULE = {
    "CartPole-v1": dict(iterations=390, tune_every=3, eval_every=78),
    "MountainCarContinuous-v0": dict(iterations=2500, tune_every=25, eval_every=500),
}
GPU_PATHS = {
    "HalfCheetah-v4": ("halfcheetah", "Brax (spring): jitted and vmapped with the agents on the GPU"),
    "Pusher-v4": ("pusher", "Brax (spring): jitted and vmapped with the agents on the GPU"),
    "InvertedDoublePendulum-v4": ("inverted_double_pendulum", "Brax (spring): jitted and vmapped on the GPU"),
    "Reacher-v4": ("reacher", "Brax (spring): jitted and vmapped with the agents on the GPU"),
}


PRESETS: dict[str, Preset] = {
    "smoke": Preset(
        name="smoke",
        envs=("CartPole-v1",),
        methods=("hypercontroller", "random", "fixed"),
        seeds=2,
        iterations=20,
        eval_every=10,
        tune_every=5,
        space=paper_space(batch_size=(128, 512)),
        ppo=dict(num_envs=8, hidden_sizes=(32, 32), update_epochs=2, num_minibatches=4, eval_steps=500,
                 objective="return_change"),
        fast_compile=True,
        description="one gymnax env (CartPole-v1, jitted end to end), three methods, two seeds, "
                    "20 iterations of 128-512 frames, 2x32 networks: tables and figures",
        reductions=(
            "CartPole-v1 (gymnax) instead of the paper's MuJoCo/Box2D tasks",
            "2 seeds instead of 10", "20 iterations instead of 1000",
            "batch size (frames per iteration) in [128, 512] instead of [1000, 6000]",
            "2x32 networks instead of 3x256", "2 epochs instead of 10",
            "evaluation episodes of up to 500 steps (CartPole's limit) instead of 1000",
            "objective: change of the mean training episode return, because CartPole's per-step reward "
            "is always 1 and the paper's reward change would be identically 0",
            "training segments compiled without XLA backend optimisation (compilation dominates)",
        ),
    ),
    "cpu": Preset(
        name="cpu",
        envs=PAPER_ENVS,
        methods=METHODS,
        seeds=3,
        iterations=100,
        eval_every=10,
        tune_every=5,
        space=paper_space(batch_size=(256, 1536)),
        ppo=dict(num_envs=16, hidden_sizes=(64, 64), update_epochs=4, num_minibatches=4, eval_steps=1000),
        tuner=dict(gp_ucb=dict(buffer=100), pb2=dict(buffer=100)),
        paths=CPU_PATHS,
        description="all six methods + fixed on the five paper environments, 3 seeds, 100 iterations "
                    "of 256-1536 frames, 2x64 networks, 4 epochs; Brax where it is much faster; "
                    "about 90 min on an idle 2-core CPU (estimated from 20-iteration units)",
        reductions=(
            "3 seeds instead of 10", "100 iterations instead of 1000",
            "batch size (frames per iteration) in [256, 1536] instead of [1000, 6000] "
            "(same 6:1 ratio; the update costs that of the largest batch)",
            "2x64 networks instead of 3x256", "4 epochs instead of 10",
            "GP buffers of 100 points (= every observation of the run) instead of 1000",
            "HalfCheetah, InvertedDoublePendulum and Reacher are the Brax re-implementations "
            "(different dynamics and reward scales from MuJoCo's); Pusher is gymnasium Pusher-v5",
        ),
    ),
    "paper": Preset(
        name="paper",
        envs=PAPER_ENVS,
        methods=METHODS,
        seeds=10,
        iterations=1000,
        eval_every=10,
        tune_every=5,
        space=paper_space(batch_size=(1000, 6000)),
        ppo=dict(hidden_sizes=(256, 256, 256), update_epochs=10, eval_steps=1000),
        paths=PAPER_PATHS,
        description="the paper's settings (10 seeds, 1000 iterations, 1000-6000 frames per "
                    "iteration, 3x256, 10 epochs) on the exact gymnasium tasks; meant for a GPU",
        reductions=("Pusher-v5 instead of Pusher-v4 (v4 needs mujoco<3)",
                    "learning rate tuned on a log scale (the reference code's grid was linear)",
                    "every baseline trains for real (the reference's batch-size and HyperBand defects "
                    "are not reproduced)"),
    ),
    "cpu_learn": Preset(
        name="cpu_learn",
        envs=("CartPole-v1", "Acrobot-v1", "Pendulum-v1", "reacher", "inverted_double_pendulum"),
        methods=METHODS,
        seeds=20,
        iterations=100,
        eval_every=10,
        tune_every=5,
        space=LEARNING_SPACE,
        ppo=LEARNING_PPO,
        tuner=LEARNING_TUNER,
        env_ppo=LEARNING_ENV_PPO,
        fuse_methods=True,
        description="a CPU study that can tell methods apart: five JAX tasks on which PPO with the fixed "
                    "defaults clearly learns in 100 iterations (gymnax CartPole, Acrobot, Pendulum; Brax reacher "
                    "and inverted_double_pendulum), all seven methods, 20 seeds, every method of a task in one "
                    "program compiled once; about an hour on a 2-core CPU",
        reductions=(
            "gymnax CartPole-v1, Acrobot-v1, Pendulum-v1 and Brax reacher, inverted_double_pendulum instead of "
            "the paper's gymnasium tasks (all jitted and vmapped: the CPU budget allows 20 seeds)",
            "20 seeds instead of 10", "100 iterations instead of 1000",
            "learning rate in [1e-4, 1e-2] (log) with default 1e-3 instead of [1e-5, 1e-3] with 3e-4, and batch "
            "size in [256, 2048] with default 1024 instead of [1000, 6000] with 1000: the defaults learn in 100 "
            "iterations (calibrated, see docs/studies.md)",
            "2x64 networks instead of 3x256, 4 epochs of 8 minibatches instead of 10 of 16 (Pendulum: 10 of 16)",
            "entropy coefficient 0 instead of 1e-4",
            "objective: change of the mean episode return on CartPole and Acrobot (their per-step reward is "
            "constant, so the paper's reward change would carry no signal); reward change elsewhere",
            "GP buffers of 100 points (= every observation of the run) instead of 1000",
            "each evaluation the mean of 4 deterministic episodes, each from its own reset, instead of one",
        ),
    ),
    "verdict": Preset(
        name="verdict",
        envs=("CartPole-v1", "Acrobot-v1", "Pendulum-v1", "MountainCar-v0"),
        methods=PAPER_METHODS + ("fixed", "sweep"),
        seeds=10,
        test_seeds=10,
        iterations=100,
        eval_every=20,
        tune_every=5,
        space=VERDICT_SPACE,
        ppo=LEARNING_PPO,
        tuner=dict(LEARNING_TUNER, sweep=dict(configurations=32, seeds=3, seed=0)),
        poor_defaults={"lr_x10": {"learning_rate": 1e-2}, "lr_div10": {"learning_rate": 1e-4}},
        env_ppo={**LEARNING_ENV_PPO, "MountainCar-v0": dict(objective="return_change", eval_steps=200)},
        fuse_methods=True,
        description="does tuning help, on seeds it never saw? gymnax CartPole, Acrobot and Pendulum (the default "
                    "learns in 100 iterations) and MountainCar (a sparse reward: it learns poorly); the paper's six "
                    "methods, fixed, a sweep of 32 configurations x 3 tuning seeds and two poor defaults (learning "
                    "rate x10 and /10) on 10 tuning seeds, every one again on 10 test seeds, the online methods' "
                    "schedules replayed there; about an hour on a 2-core CPU by the estimate",
        reductions=(
            "gymnax CartPole-v1, Acrobot-v1, Pendulum-v1 and MountainCar-v0 instead of the paper's gymnasium tasks",
            "10 tuning seeds, and 10 test seeds the paper does not have", "100 iterations instead of 1000",
            "learning rate in [1e-4, 1e-2] (log) with default 1e-3, batch size in [128, 1024] with default 512 instead "
            "of [1e-5, 1e-3] with 3e-4 and [1000, 6000] with 1000 (the cpu_learn space at half its batch sizes: the "
            "defaults learn on three of the tasks in 100 iterations, measured)",
            "2x64 networks, 4 epochs of 8 minibatches (Pendulum: 10 of 16, rewards x 0.1), entropy coefficient 0",
            "objective: change of the mean episode return on CartPole, Acrobot and MountainCar (constant per-step "
            "reward); reward change on Pendulum",
            "GP buffers of 100 points (= every observation of the run) instead of 1000",
            "each evaluation the mean of 4 deterministic episodes, each from its own reset, instead of one",
        ),
    ),
    "headroom": Preset(
        name="headroom",
        envs=("Pendulum-v1", "MountainCarContinuous-v0", "CartPole-v1"),
        methods=PAPER_METHODS + ("fixed", "sweep"),
        seeds=5,
        test_seeds=20,
        iterations=100,
        eval_every=20,
        tune_every=1,
        space=ARLBENCH_SPACE,
        ppo=ARLBENCH_PPO,
        tuner=dict(LEARNING_TUNER, sweep=dict(configurations=32, seeds=3, seed=42, repeats=5, default=True)),
        poor_defaults={"lr_x10": {"learning_rate": 3e-3}, "lr_div10": {"learning_rate": 3e-5}},
        start_from_poor=("hypercontroller", "random", "pb2", "gp_ucb", "hyperband"),
        env_ppo=ARLBENCH_ENV_PPO,
        env_schedule=ARLBENCH_SCHEDULE,
        fuse_methods=True,
        description="does tuning help where it can? ARLBench's PPO (its default configuration, 8 of its 9 searched "
                    "hyperparameters, its budgets and 128 deterministic evaluation episodes) on gymnax Pendulum-v1 "
                    "(1e5 steps) and MountainCarContinuous-v0 (2e4), where its released runs leave room above the "
                    "default, and CartPole-v1 (1e5) as the do-no-harm control; the paper's six methods, five of them "
                    "also started from two poor defaults (learning rate x10 and /10), a sweep of 5 draws of 32 "
                    "configurations (the default first in each) x 3 tuning seeds, on 5 tuning and 20 test seeds; "
                    "every online method decides 100 or more times per run",
        reductions=(
            "ARLBench's classic-control search space without minibatch_size (fixed at ARLBench's default 64): a "
            "traced minibatch size costs the largest count of the largest minibatches in one program",
            "Pendulum's rollout 8 x 128 steps (ARLBench's default n_steps) instead of 8 x 512: 100 updates in "
            "102,400 steps instead of 24, so that an online tuner decides 100 times",
            "float32 where ARLBench enables x64 (Pendulum, MountainCarContinuous)",
            "minibatches of equal size (ARLBench's last minibatch takes the remainder)",
            "observation normalisation clipped to +-10 (ARLBench clips only the standard deviation)",
            "5 evaluations of 128 deterministic episodes per run (ARLBench's random search: 10), the last the score",
            "the sweep is ARLBench's random search (5 seeds x 32 configurations x 3 training seeds) with the default "
            "as the first configuration of every draw; its incumbents are re-run on 20 test seeds (100-119), which "
            "ARLBench's released runs do not do",
            "objective given to the tuners: the change of the mean training reward (the paper's), of the mean episode "
            "return on CartPole (its per-step reward is constant)",
            "GP buffers of 100 points (CartPole's 390 and MountainCarContinuous' 2500 iterations are told more)",
        ),
    ),
    "gpu": Preset(
        name="gpu",
        envs=("HalfCheetah-v4", "Pusher-v4", "InvertedDoublePendulum-v4", "Reacher-v4"),
        methods=METHODS,
        seeds=16,
        iterations=100,
        eval_every=20,
        tune_every=5,
        space=LEARNING_SPACE,
        ppo=LEARNING_PPO,
        tuner=LEARNING_TUNER,
        paths=GPU_PATHS,
        fuse_methods=True,
        description="the paper's tasks that have a JAX version (Brax halfcheetah, pusher, inverted_double_pendulum, "
                    "reacher), all seven methods, 16 seeds, 100 iterations of 256-2048 frames, every method of a "
                    "task in one program compiled once: about 5 minutes on one H100, compilation included "
                    "(measured: results/gpu_h100_5b602f1)",
        reductions=(
            "Brax re-implementations instead of the gymnasium tasks (different dynamics and reward scales); "
            "BipedalWalker-v3 is left out: it has no JAX version, and on the host path its 16 x 7 seeds would "
            "take longer than the whole preset",
            "16 seeds instead of 10 (more, for the statistics)", "100 iterations instead of 1000",
            "learning rate in [1e-4, 1e-2] (log) with default 1e-3, batch size in [256, 2048] with default 1024 "
            "(the cpu_learn space: the defaults learn in 100 iterations)",
            "2x64 networks, 4 epochs of 8 minibatches, entropy coefficient 0 (as cpu_learn)",
            "GP buffers of 100 points (= every observation of the run) instead of 1000",
            "each evaluation the mean of 4 deterministic episodes, each from its own reset, instead of one",
        ),
    ),
}
