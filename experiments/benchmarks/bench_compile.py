"""Compilation and step time of PPO's training program, its optimiser on one flat vector
(`agents.ppo.learner.make_optimizer(flat=True)`, what make_learner takes for networks of at
most FLAT_MAX_PARAMS parameters) against one Adam update per weight array (flat=False).

    python -m experiments.benchmarks.bench_compile [--quick] [--out FILE]

Per configuration (CartPole-v1; "tiny": the test suite's size, one hidden layer of 8, 4 envs,
1 epoch of 2 minibatches, a fixed tuner and pb2; "paper": 64x64, 8 envs x 128 steps, 4
epochs of 4 minibatches, hypercontroller) and optimiser, a new jitted 2-iteration segment
is traced, lowered and compiled (process CPU seconds of the three, with XLA's default
optimisation), then run (median wall seconds of 10 calls). Rounds are interleaved
(every configuration and optimiser once per round), so a drift of the machine's load
hits all alike; the table gives each one's median and range over the rounds.
Writes JSON (default bench_out/compile.json) atomically.
"""
from __future__ import annotations

import argparse
import statistics
import time

import jax

import hcjax
from agents import envs, ppo
from agents.ppo import learner as ppo_learner
from experiments.benchmarks.timing import median_seconds, print_table, write_json_atomic

TINY = dict(num_envs=4, batch_size=32, max_batch_size=64, num_minibatches=2, update_epochs=1, hidden_sizes=(8,))
CONFIGS = {  # name -> (PPOConfig fields, tuner)
    "tiny fixed": (TINY, "fixed"),
    "tiny pb2": (TINY, "pb2"),
    "paper hypercontroller": (dict(num_envs=8, batch_size=1024, max_batch_size=1024, num_minibatches=4,
                                   update_epochs=4, hidden_sizes=(64, 64)), "hypercontroller"),
}


def measure(name: str, flat: bool) -> dict:
    """One round of configuration `name` with the flat or per-array optimiser."""
    fields, tuner = CONFIGS[name]
    original = ppo_learner.FLAT_MAX_PARAMS
    ppo_learner.FLAT_MAX_PARAMS = 2**62 if flat else 0  # the layout forced whatever the network's size
    try:
        learner = ppo.make_learner(ppo.PPOConfig(**fields), envs.make("CartPole-v1"),
                                   hcjax.make_tuner(tuner, hcjax.ppo_space(batch_size=(16, fields["max_batch_size"]))))
    finally:
        ppo_learner.FLAT_MAX_PARAMS = original
    state = jax.jit(learner.init)(jax.random.PRNGKey(0))
    segment = jax.jit(lambda s: learner.iterate(s, 2, 0))
    t0 = time.process_time()
    compiled = segment.trace(state).lower().compile()
    compile_cpu = time.process_time() - t0
    return dict(config=name, optimizer="flat" if flat else "per array", compile_cpu_s=compile_cpu,
                step_s=median_seconds(lambda: compiled(state), warmup=1, repeats=10) / 2,
                fusions=compiled.as_text().count(" fusion("))


def summarise(samples: list[dict]) -> list[dict]:
    """Median and range per (config, optimizer) of compile_cpu_s and step_s."""
    rows = []
    for name in CONFIGS:
        for optimizer in ("per array", "flat"):
            mine = [s for s in samples if s["config"] == name and s["optimizer"] == optimizer]
            if not mine:
                continue
            c, t = [s["compile_cpu_s"] for s in mine], [s["step_s"] for s in mine]
            rows.append(dict(config=name, optimizer=optimizer, rounds=len(mine), compile_cpu_s=statistics.median(c),
                             compile_range=f"{min(c):.2f}-{max(c):.2f}", step_ms=1e3 * statistics.median(t),
                             step_range_ms=f"{1e3 * min(t):.1f}-{1e3 * max(t):.1f}", fusions=mine[0]["fusions"]))
    for row in rows:
        base = next(r for r in rows if r["config"] == row["config"] and r["optimizer"] == "per array")
        row["compile_ratio"] = row["compile_cpu_s"] / base["compile_cpu_s"]
    return rows


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the tiny fixed configuration, 2 rounds")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 3, quick 2)")
    parser.add_argument("--out", default="bench_out/compile.json")
    args = parser.parse_args(argv)
    names = ["tiny fixed"] if args.quick else list(CONFIGS)
    rounds = args.rounds or (2 if args.quick else 3)
    samples = []
    for r in range(rounds):
        for name in names:
            for flat in ((False, True) if r % 2 == 0 else (True, False)):
                samples.append(measure(name, flat))
    rows = summarise(samples)
    print_table(rows, ["config", "optimizer", "rounds", "compile_cpu_s", "compile_range", "compile_ratio", "step_ms",
                       "step_range_ms", "fusions"])
    report = dict(jax=jax.__version__, devices=str(jax.devices()), rows=rows, samples=samples)
    write_json_atomic(args.out, report)
    return report


if __name__ == "__main__":
    main()
