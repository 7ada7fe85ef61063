"""hcjax's PPO beside rejax's (a published JAX RL library), in one process, at equal settings.

    python -m experiments.benchmarks.bench_peers [--quick] [--optimizer-layout L] [--out FILE]
    hcjax bench --only bench_peers

rejax (github.com/keraJLi/rejax, `pip install -e ".[peers]"`, pinned at REJAX_VERSION) trains
PPO vmapped over seeds or configurations, as hcjax does. Both run the same gymnax task with the
same settings (`settings`: environments, steps per environment, epochs, minibatches, network
sizes and activation, the loss's coefficients, value clipping, observation normalisation off
as rejax's default; MAPPED lists the fields set equal), both without evaluations: rejax's
`train_iteration` in a loop (what its `train` runs between evaluations), hcjax's
`learner.iterate` with the `fixed` tuner (as a study runs it). Per row (CartPole-v1 and
Pendulum-v1; 1, 16 and 256 vmapped agents) both programs are compiled, then timed in `rounds`
interleaved rounds, the order alternating; the row reports frames per second (the median
round) and hcjax's speed relative to rejax's: rejax seconds / hcjax seconds per round,
median and range. The sweep rows: C configurations x S seeds, hcjax's sweep program (the
`schedule` tuner, one configuration per agent, as bench_sweep) against rejax's own way of
vmapping one (`jax.vmap(PPO.create)` over the configurations' values, then vmap over
configurations and seeds), each call from the agents' keys, init included (rejax's optimiser
closes over the traced values, so its init and training share one transformation).

What is not equal, by the libraries' design: rejax clips each gradient element
(`optax.clip(max_grad_norm)`) where hcjax clips the global norm, and updates the actor and
the critic with two Adam optimisers (two gradients) where hcjax takes one gradient of the
summed loss; rejax 0.1.3 unpacks gymnax's step as five values (gymnax < 1.0), and gymnax 1.0.1,
which hcjax needs, returns six, so rejax gets the same gymnax environment behind `FiveValues`
(done = terminated or truncated, what hcjax's PPO also uses). --optimizer-layout sets hcjax's
`PPOConfig.optimizer_layout` (default "auto", what a user gets). Writes JSON (default
bench_out/peers.json) atomically.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import hcjax
from agents import ppo
from experiments import deps
from experiments.benchmarks.timing import print_table, write_json_atomic
from hcjax.extras import missing_extra
from hcjax.tuners.schedule import schedule
from hcjax.tuners.stacked import select

REJAX_VERSION = "0.1.3"
PACKAGES = ("rejax", "jax", "jaxlib", "flax", "optax", "gymnax")  # versions in the report
ENVS = ("CartPole-v1", "Pendulum-v1")
# The shared settings: rejax's config names.
COMMON = dict(num_envs=8, num_steps=64, num_epochs=4, num_minibatches=4, learning_rate=3e-4, gamma=0.99,
              gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5,
              normalize_observations=False, normalize_rewards=False)
HIDDEN, ACTIVATION = (64, 64), "tanh"
ADAM_EPS = 1e-8  # rejax's optax.adam(learning_rate) keeps optax's default eps
# (PPOConfig field, rejax PPO field) pairs set to equal values
MAPPED = (("num_envs", "num_envs"), ("update_epochs", "num_epochs"), ("num_minibatches", "num_minibatches"),
          ("learning_rate", "learning_rate"), ("gamma", "gamma"), ("gae_lambda", "gae_lambda"),
          ("clip_eps", "clip_eps"), ("vf_clip_eps", "clip_eps"), ("ent_coef", "ent_coef"), ("vf_coef", "vf_coef"),
          ("max_grad_norm", "max_grad_norm"), ("normalize_obs", "normalize_observations"))
# The sweep's hyperparameters: rejax fields that are traced values (vmappable); hcjax tunes the same
# names, and vf_clip_eps with clip_eps's values (rejax clips its value loss with clip_eps)
SWEEP = (("learning_rate", 1e-4, 3e-3, "log"), ("clip_eps", 0.1, 0.3, "linear"), ("ent_coef", 0.0, 0.02, "linear"),
         ("gae_lambda", 0.9, 0.99, "linear"))


def settings(env_name: str, optimizer_layout: str = "auto") -> tuple[ppo.PPOConfig, dict]:
    """(hcjax's PPOConfig, rejax's PPO.create keyword arguments but `env`) for `env_name`."""
    c = COMMON
    frames = c["num_envs"] * c["num_steps"]
    config = ppo.PPOConfig(num_envs=c["num_envs"], batch_size=frames, max_batch_size=frames,
                           num_minibatches=c["num_minibatches"], update_epochs=c["num_epochs"],
                           learning_rate=c["learning_rate"], gamma=c["gamma"], gae_lambda=c["gae_lambda"],
                           clip_eps=c["clip_eps"], vf_clip_eps=c["clip_eps"], ent_coef=c["ent_coef"],
                           vf_coef=c["vf_coef"], max_grad_norm=c["max_grad_norm"], adam_eps=ADAM_EPS,
                           hidden_sizes=HIDDEN, activation=ACTIVATION, normalize_obs=c["normalize_observations"],
                           optimizer_layout=optimizer_layout)
    rejax = dict(COMMON, agent_kwargs={"activation": ACTIVATION, "hidden_layer_sizes": HIDDEN},
                 total_timesteps=frames, eval_freq=frames, skip_initial_evaluation=True)
    return config, rejax


def mismatches(config: ppo.PPOConfig, algo) -> list[str]:
    """The mapped fields where hcjax's config and rejax's configuration (`algo`: the created
    PPO, or anything with its attributes) differ, with the derived ones (frames per iteration,
    network sizes, activation); [] when every one is equal."""
    out = [f"{a}={getattr(config, a)!r} vs {b}={getattr(algo, b)!r}" for a, b in MAPPED
           if not np.isclose(float(getattr(config, a)), float(getattr(algo, b)))]
    if config.batch_size != algo.num_envs * algo.num_steps:
        out.append(f"batch_size={config.batch_size} vs num_envs x num_steps={algo.num_envs * algo.num_steps}")
    actor = algo.actor
    if tuple(actor.hidden_layer_sizes) != config.hidden_sizes:
        out.append(f"hidden_sizes={config.hidden_sizes} vs hidden_layer_sizes={actor.hidden_layer_sizes}")
    if getattr(actor.activation, "__name__", actor.activation) != config.activation:
        out.append(f"activation={config.activation!r} vs {actor.activation!r}")
    return out


class FiveValues:
    """A gymnax 1.x environment whose step returns gymnax 0.x's five values (obs, state,
    reward, done = terminated or truncated, info), as rejax 0.1.3 unpacks them."""

    def __init__(self, env):
        self.env = env

    def __getattr__(self, name):  # only for names not found on the wrapper (not "env": copies start without it)
        if name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)

    def step(self, key, state, action, params=None):
        obs, state, reward, terminated, truncated, info = self.env.step(key, state, action, params)
        return obs, state, reward, jnp.logical_or(terminated, truncated), info

    def reset(self, key, params=None):
        return self.env.reset(key, params)


def _rejax():
    try:
        import gymnax
        from rejax import PPO
    except ImportError as err:
        raise (missing_extra(err, "bench_peers (rejax's PPO)", "peers") or err) from err
    return PPO, gymnax


def rejax_algo(env_name: str, **overrides):
    """rejax's PPO for `env_name` with `settings`' values (and `overrides`), checked equal to hcjax's."""
    PPO, gymnax = _rejax()
    config, kwargs = settings(env_name)
    env, params = gymnax.make(env_name)
    algo = PPO.create(env=FiveValues(env), env_params=params, **dict(kwargs, **overrides))
    if not overrides and (bad := mismatches(config, algo)):
        raise RuntimeError(f"bench_peers: settings differ: {bad}")
    return algo


def rejax_program(env_name: str, iterations: int):
    """(init(key) -> state, run(state) -> state): rejax's PPO, `iterations` train_iteration calls."""
    algo = rejax_algo(env_name)
    return algo.init_state, lambda ts: jax.lax.fori_loop(0, iterations, lambda _, t: algo.train_iteration(t), ts)


def hcjax_space(config: ppo.PPOConfig) -> hcjax.Space:
    """The fixed tuner's space: learning_rate alone, its default the config's (the other fields static)."""
    return hcjax.Space([hcjax.Hyperparameter("learning_rate", 1e-5, 1e-2, scale="log", default=config.learning_rate)])


def hcjax_program(env_name: str, iterations: int, optimizer_layout: str = "auto"):
    """(init(key) -> state, run(state) -> state): hcjax's PPO with `fixed`, `iterations` iterations."""
    config, _ = settings(env_name, optimizer_layout)
    learner = ppo.make_learner(config, env_name, hcjax.make_tuner("fixed", hcjax_space(config)))
    return learner.init, lambda s: learner.iterate(s, iterations, 0)[0]


def sweep_values(configs: int) -> tuple[hcjax.Space, np.ndarray]:
    """The sweep's space (SWEEP and vf_clip_eps) and (configs, h) values drawn from it
    (vf_clip_eps = clip_eps in every row)."""
    space = hcjax.Space([hcjax.Hyperparameter(n, lo, hi, scale=s) for n, lo, hi, s in SWEEP])
    values = space.sample(configs, 0)
    full = hcjax.Space([*space.hyperparameters, hcjax.Hyperparameter("vf_clip_eps", 0.1, 0.3)])
    return full, np.concatenate([values, values[:, [1]]], axis=1).astype(np.float32)


def sweep_programs(env_name: str, configs: int, seeds: int, iterations: int, optimizer_layout: str = "auto") -> dict:
    """{"rejax": (keys, run), "hcjax": (keys, run)}: configs x seeds agents trained from their
    keys, init included, each library's own way: rejax creates its PPO vmapped over the
    configurations' values and vmaps init and training over (configurations, seeds), as its
    random-search example does (its optimiser closes over the traced values: init and training
    must share one transformation); hcjax's sweep vmaps one learner whose `schedule` tuner gives
    agent i configuration i // seeds."""
    space, values = sweep_values(configs)
    names = [n for n, *_ in SWEEP]
    keys = jax.random.split(jax.random.PRNGKey(0), configs * seeds)

    def rejax_run(keys):
        def one(v, k):
            algo = rejax_algo(env_name, **dict(zip(names, v)))
            return jax.lax.fori_loop(0, iterations, lambda _, t: algo.train_iteration(t), algo.init_state(k))
        return jax.vmap(lambda v, ks: jax.vmap(lambda k: one(v, k))(ks))(
            jnp.asarray(values[:, :len(names)]), keys.reshape(configs, seeds, 2))

    config, _ = settings(env_name, optimizer_layout)
    tuner = schedule(space, values[:, None, :])
    learner = ppo.make_learner(config, env_name, tuner)
    rows = jnp.repeat(jnp.arange(configs, dtype=jnp.int32), seeds)

    def hcjax_run(keys):
        return jax.vmap(lambda k, r: learner.iterate(learner.init(k, select(tuner.init(k), r)), iterations, 0)[0])(
            keys, rows)

    return {"rejax": (keys, rejax_run), "hcjax": (keys, hcjax_run)}


def interleaved(programs: dict, rounds: int, carry: bool = True) -> dict:
    """{name: [seconds per round]} of programs {name: (state, run)}, each jitted and called
    twice before the rounds (compilation; a state's Python numbers become arrays after the
    first call, which would compile again); carry: each call continues from the last one's
    result, else from the same state. The order alternates between rounds."""
    compiled, seconds = {}, {n: [] for n in programs}
    for name, (state, run) in programs.items():
        fn = jax.jit(run)
        t0 = time.perf_counter()
        for _ in range(2):
            out = jax.block_until_ready(fn(state))
            state = out if carry else state
        print(f"  {name}: compiled + 2 calls {time.perf_counter() - t0:.1f} s", flush=True)
        compiled[name] = [fn, state]
    order = list(programs)
    for r in range(rounds):
        for name in order if r % 2 == 0 else order[::-1]:
            fn, state = compiled[name]
            t0 = time.perf_counter()
            out = jax.block_until_ready(fn(state))
            seconds[name].append(time.perf_counter() - t0)
            if carry:
                compiled[name][1] = out
    return seconds


def row(kind: str, env_name: str, agents: int, frames: int, seconds: dict) -> dict:
    """A table row: frames/s of each side (median round), hcjax / rejax speed (median, range)."""
    ratios = [r / h for r, h in zip(seconds["rejax"], seconds["hcjax"])]
    print(f"  hcjax / rejax {statistics.median(ratios):.3f} ({min(ratios):.2f}-{max(ratios):.2f})", flush=True)
    return {"kind": kind, "env": env_name, "agents": agents, "frames": frames,
            "rejax_fps": frames / statistics.median(seconds["rejax"]),
            "hcjax_fps": frames / statistics.median(seconds["hcjax"]), "hcjax_over_rejax": statistics.median(ratios),
            "ratio_min": min(ratios), "ratio_max": max(ratios), "rounds": len(ratios)}


def measure(env_name: str, agents: int, iterations: int, rounds: int, optimizer_layout: str = "auto") -> dict:
    """One row: `agents` vmapped agents (seeds) of each library."""
    print(f"{env_name} agents={agents}", flush=True)
    programs = {}
    for name, (init, run) in (("rejax", rejax_program(env_name, iterations)),
                              ("hcjax", hcjax_program(env_name, iterations, optimizer_layout))):
        programs[name] = (jax.jit(jax.vmap(init))(jax.random.split(jax.random.PRNGKey(0), agents)), jax.vmap(run))
    frames = agents * iterations * COMMON["num_envs"] * COMMON["num_steps"]
    return row("seeds", env_name, agents, frames, interleaved(programs, rounds))


def measure_sweep(env_name: str, configs: int, seeds: int, iterations: int, rounds: int,
                  optimizer_layout: str = "auto") -> dict:
    print(f"{env_name} sweep {configs} x {seeds}", flush=True)
    frames = configs * seeds * iterations * COMMON["num_envs"] * COMMON["num_steps"]
    return row(f"sweep {configs}x{seeds}", env_name, configs * seeds, frames,
               interleaved(sweep_programs(env_name, configs, seeds, iterations, optimizer_layout), rounds,
                           carry=False))


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="CartPole-v1, 1 and 16 agents, a 4 x 4 sweep, 3 rounds")
    parser.add_argument("--optimizer-layout", default="auto", choices=ppo.OPTIMIZER_LAYOUTS,
                        help="hcjax's PPOConfig.optimizer_layout (default auto: what a user gets)")
    parser.add_argument("--out", default="bench_out/peers.json")
    args = parser.parse_args(argv)
    _rejax()
    t0, load = time.perf_counter(), [os.getloadavg()[0]]
    # (env, agents, iterations per round): about a second or more per call on a 2-core CPU
    cases = [("CartPole-v1", 1, 20), ("CartPole-v1", 16, 4)] if args.quick else \
        [(e, n, it) for e in ENVS for n, it in ((1, 20), (16, 4), (256, 1))]
    sweeps = [("CartPole-v1", 4, 4, 4)] if args.quick else [("CartPole-v1", 4, 4, 4), ("CartPole-v1", 16, 16, 1)]
    rounds = 3 if args.quick else 5
    layout = args.optimizer_layout
    rows = [measure(e, n, it, rounds, layout) for e, n, it in cases]
    rows += [measure_sweep(e, c, s, it, rounds, layout) for e, c, s, it in sweeps]
    load.append(os.getloadavg()[0])
    print_table(rows, ["kind", "env", "agents", "frames", "rejax_fps", "hcjax_fps", "hcjax_over_rejax", "ratio_min",
                       "ratio_max"])
    print(f"load {load[0]:.1f} -> {load[1]:.1f}")
    report = {"benchmark": "peers", "device": deps.devices(), "quick": args.quick, "rows": rows,
              "settings": dict(COMMON, hidden=HIDDEN, activation=ACTIVATION, adam_eps=ADAM_EPS,
                               optimizer_layout=layout),
              "versions": {p: importlib.metadata.version(p) for p in PACKAGES},
              "load": load, "wall_s": time.perf_counter() - t0}
    write_json_atomic(args.out, report)
    print(f"wrote {args.out}")
    return report


if __name__ == "__main__":
    main()
