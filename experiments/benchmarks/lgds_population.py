"""Does HyperController learn faster when a population shares its statistics? (LGDS)

    python -m experiments.benchmarks.lgds_population [--seeds 128] [--agents 4 16] [--n 1000] [--out FILE.json]

n agents play the same LGDS problem (`hcjax.lgds`: one hidden z process, h = 2, d = 10,
100 configurations); each observes its own noise, X_a = z_t[A_a] + eta_a. Three ways:

- independent: every agent its own HyperController (`make_tuner("hypercontroller")`);
- shared: `make_population("hypercontroller_shared")`, one set of ridge models for the
  whole population: every agent's (context, arm, regressor Xi, objective) is added to
  the shared V and B of its (hyperparameter, context, arm), G = V^-1 B; each agent keeps
  its own window of objectives, contexts and arms, and decides greedily from the shared
  G with its own tie-break key;
- random: uniform arms (scale).

Every way sees the same problems, the same z paths, the same observation noise and
the same decision keys. Per problem: the population's mean total pseudo-regret per
agent over n steps. Reported: the mean over problems, its standard error, and the
shared-minus-independent difference with its paired standard error. Prints a table and
writes JSON (atomic).
"""
from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import hcjax
from experiments import deps
from experiments.benchmarks.timing import print_table, write_json_atomic
from hcjax import lgds


def population_regret(problem, key, n_agents: int, steps: int, s: int, ridge: float) -> jax.Array:
    """(3,) mean total regret per agent over `steps`: independent, shared, random.

    Each step: every agent plays the arms in effect, observes its objective, tells it,
    then decides the next arms (the independent tuners with keys split(k_decide, n), the
    shared population with k_decide, which it splits the same way); at step 0 the arms
    init drew (the same for both: init keys split(k_init, n))."""
    h, d = problem.h, problem.d
    space = lgds.default_space(h)
    tuner = hcjax.make_tuner("hypercontroller", space, d=d, s=s, ridge=ridge)
    pop = hcjax.make_population("hypercontroller_shared", space, d=d, s=s, ridge=ridge)
    dims = (d,) * h
    k_init, k_run = jax.random.split(key)
    ind = jax.vmap(tuner.init)(jax.random.split(k_init, n_agents))
    shared, _ = pop.init(k_init, n_agents)

    def config(arms):
        return jax.vmap(lambda a: jnp.ravel_multi_index(tuple(a), dims, mode="clip"))(arms)

    def step(carry, key):
        z, ind, shared = carry
        k_dec, k_obs, k_next, k_rand = jax.random.split(key, 4)
        noise = problem.sigma * jax.random.normal(k_obs, (n_agents,))
        arms_r = jax.random.randint(k_rand, (n_agents, h), 0, d)
        regrets = jnp.stack([jnp.mean(jnp.max(z) - z[config(arms)]) for arms in (ind.arms, shared.arms, arms_r)])
        ind = jax.vmap(tuner.tell)(ind, z[config(ind.arms)] + noise)
        ind, _ = jax.vmap(tuner.ask)(ind, jax.random.split(k_dec, n_agents))
        shared, _, _ = pop.step(shared, k_dec, z[config(shared.arms)] + noise)
        z = problem.gamma @ z + problem.noise_chol @ jax.random.normal(k_next, z.shape)
        return (z, ind, shared), regrets

    _, regret = jax.lax.scan(step, (problem.z0, ind, shared), jax.random.split(k_run, steps))
    return regret.sum(0)


def measure(seeds: int, n_agents: int, steps: int, s: int = 1, ridge: float = 1.0, seed: int = 0) -> dict:
    """Totals per problem for the three ways, and the paired comparison."""
    k_problems, k_runs = jax.random.split(jax.random.PRNGKey(seed))

    def one(pk, rk):
        return population_regret(lgds.make(pk, 2, 10), rk, n_agents, steps, s, ridge)

    t0 = time.perf_counter()
    totals = np.asarray(jax.jit(jax.vmap(one))(jax.random.split(k_problems, seeds), jax.random.split(k_runs, seeds)),
                        np.float64)
    seconds = time.perf_counter() - t0
    ind, shared, rnd = totals.T
    diff = shared - ind
    se = lambda a: float(a.std(ddof=1) / np.sqrt(a.size))  # noqa: E731
    return {"agents": n_agents, "seeds": seeds, "steps": steps, "s": s,
            "independent": float(ind.mean()), "independent_se": se(ind),
            "shared": float(shared.mean()), "shared_se": se(shared),
            "random": float(rnd.mean()), "random_se": se(rnd),
            "shared_minus_independent": float(diff.mean()), "paired_se": se(diff),
            "z": float(diff.mean() / max(se(diff), 1e-12)), "seconds": seconds,
            "totals": {"independent": ind.tolist(), "shared": shared.tolist(), "random": rnd.tolist()}}


COLUMNS = ["agents", "s", "independent", "independent_se", "shared", "shared_se", "random",
           "shared_minus_independent", "paired_se", "z", "seconds"]


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=128)
    parser.add_argument("--agents", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--n", type=int, default=1000, help="steps")
    parser.add_argument("--s", type=int, nargs="+", default=[1])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="bench_out/lgds_population.json")
    args = parser.parse_args(argv)
    rows = []
    for s in args.s:
        for n_agents in args.agents:
            rows.append(measure(args.seeds, n_agents, args.n, s=s, seed=args.seed))
            print(f"agents={n_agents} s={s}: shared - independent = {rows[-1]['shared_minus_independent']:.2f} "
                  f"± {rows[-1]['paired_se']:.2f}", flush=True)
    print_table([{k: v for k, v in r.items() if k != "totals"} for r in rows], COLUMNS)
    payload = {"rows": rows, "devices": deps.devices(), "args": vars(args)}
    write_json_atomic(args.out, payload)
    return payload


if __name__ == "__main__":
    main()
