"""Benchmark: cost of HyperController decisions (one compiled ask + tell).

    python -m experiments.benchmarks.bench_controller [--quick] [--out bench_out/controller.json]

Rows: (a) one decision of 1, 64 and 1024 vmapped controllers (h = 4, d = 10, s = 1, 2),
fresh keys and objectives per call, state donated so updates happen in place; (b) 1000
sequential decisions of one controller inside one `lax.scan`. Median of repeated runs
after warm-up.
"""
from __future__ import annotations

import argparse

import jax

import hcjax
from experiments import deps
from experiments.benchmarks.timing import median_seconds, print_table, write_json_atomic


def time_batched(agents: int, s: int, d: int = 10, h: int = 4, repeats: int = 50) -> float:
    """Seconds for one ask + tell of `agents` vmapped controllers. Every call gets fresh
    keys and random objectives (prepared beforehand), so the controllers move through
    their contexts as in training instead of revisiting cached ones."""
    tuner = hcjax.make_tuner("hypercontroller", hcjax.unit_space(h), d=d, s=s)

    def decide(state, key, objective):
        state, values = tuner.ask(state, key)
        return tuner.tell(state, objective), values

    step = jax.jit(jax.vmap(decide), donate_argnums=0)
    warmup = 5
    calls = warmup + repeats
    keys = list(jax.random.split(jax.random.PRNGKey(0), (calls, agents)))
    objectives = list(jax.random.normal(jax.random.PRNGKey(1), (calls, agents)))
    box = {"state": jax.jit(jax.vmap(tuner.init))(keys[0]), "call": 0}

    def call():
        n = box["call"]
        box["call"] = n + 1
        box["state"], values = step(box["state"], keys[n], objectives[n])
        return values

    return median_seconds(call, warmup=warmup, repeats=repeats)


def time_sequential(s: int, n: int = 1000, d: int = 10, h: int = 4, repeats: int = 10) -> float:
    """Seconds for n sequential decisions of one controller in one compiled lax.scan."""
    tuner = hcjax.make_tuner("hypercontroller", hcjax.unit_space(h), d=d, s=s)

    @jax.jit
    def run(key, objectives):
        def step(state, inp):
            k, x = inp
            state, values = tuner.ask(state, k)
            return tuner.tell(state, x), values

        k0, k1 = jax.random.split(key)
        return jax.lax.scan(step, tuner.init(k0), (jax.random.split(k1, n), objectives))[1]

    key, objectives = jax.random.PRNGKey(0), jax.random.normal(jax.random.PRNGKey(1), (n,))
    return median_seconds(lambda: run(key, objectives), warmup=2, repeats=repeats)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--out", default="bench_out/controller.json")
    args = parser.parse_args(argv)
    repeats = 10 if args.quick else 50
    rows = []
    for s in (1, 2):
        for agents in (1, 64, 1024):
            sec = time_batched(agents, s, repeats=repeats)
            rows.append({"case": "one decision, vmapped", "s": s, "agents": agents, "ms_total": sec * 1e3,
                         "us_per_agent": sec * 1e6 / agents, "target_ms": 1.0 if agents == 1024 else ""})
        sec = time_sequential(s, repeats=max(3, repeats // 5))
        rows.append({"case": "1000 sequential decisions, one scan", "s": s, "agents": 1, "ms_total": sec * 1e3,
                     "us_per_agent": sec * 1e6 / 1000, "target_ms": 10.0})
    for row in rows:
        row["meets_target"] = "" if row["target_ms"] == "" else row["ms_total"] <= row["target_ms"]
    print_table(rows, ["case", "s", "agents", "ms_total", "us_per_agent", "target_ms", "meets_target"])
    report = {"benchmark": "controller", "h": 4, "d": 10, "device": deps.devices(), "rows": rows}
    write_json_atomic(args.out, report)
    print(f"wrote {args.out}")
    return report


if __name__ == "__main__":
    main()
