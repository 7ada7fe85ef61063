"""`hcjax bench`: run every benchmark script and write one report naming the device.

The scripts (each `main(argv) -> dict` with `--out FILE.json` and `--quick`):

    experiments.benchmarks.bench_controller  HyperController decisions: vmapped batches, 1000 in one scan
    experiments.benchmarks.bench_tuners      decision cost of every tuner vs batch and buffer size, HostTuner
    experiments.benchmarks.bench_population  one population step + exploit for 64-1024 PPO agents, Ray Tune PBT
    experiments.benchmarks.bench_population_distributed  the same over a sharded agent axis, 1 vs 2 processes
    experiments.benchmarks.bench_ppo         PPO frames per second with each tuner, agents-per-program scaling
    experiments.benchmarks.bench_own_loop    the own-training-loop example, tuned / untuned wall time (4 seeds)
    experiments.benchmarks.bench_compile     compilation and step time of a PPO program, flat vs per-array optimiser
    experiments.benchmarks.bench_guard       the PPO speed guard: hcjax's PPO step / a minimal PPO's, one process
    experiments.benchmarks.bench_sweep       a study's sweep: seconds per configuration and seed per 1e5 CartPole steps
    experiments.benchmarks.bench_peers       hcjax's PPO beside rejax's, one process (the `peers` extra)

A script that is not there (yet), or whose optional package is not installed (bench_peers
without the `peers` extra), is reported as missing, one that fails as an error with
its traceback; the others still run. Output: OUT/<script>.json from each script, and
OUT/report.json + OUT/report.md with the device, package versions and every table.
"""
from __future__ import annotations

import datetime
import importlib
import io
import json
import sys
import time
import traceback
from contextlib import redirect_stdout
from pathlib import Path

from experiments import deps
from experiments.study import provenance
from experiments.study import store as R
from hcjax.extras import PROVIDED_BY

SCRIPTS = ("bench_controller", "bench_tuners", "bench_population", "bench_population_distributed", "bench_ppo",
           "bench_own_loop", "bench_compile", "bench_guard", "bench_sweep", "bench_peers")


class _Tee(io.StringIO):
    """Captures what a script prints while still printing it."""

    def __init__(self, stream):
        super().__init__()
        self.stream = stream

    def write(self, s):
        self.stream.write(s)
        self.stream.flush()
        return super().write(s)


def run_script(name: str, out: Path, quick: bool) -> dict:
    """Run one benchmark module's main; returns {status, seconds, report|message, stdout}."""
    try:
        module = importlib.import_module(f"experiments.benchmarks.{name}")
    except ModuleNotFoundError as e:
        if e.name in (f"experiments.benchmarks.{name}",):
            return {"status": "missing", "message": f"experiments/benchmarks/{name}.py is not in this checkout"}
        return {"status": "error", "message": traceback.format_exc()}
    if not hasattr(module, "main"):
        return {"status": "error", "message": f"experiments.benchmarks.{name} has no main(argv)"}
    argv = ["--out", str(out / f"{name}.json")] + (["--quick"] if quick else [])
    tee = _Tee(sys.stdout)
    t0 = time.perf_counter()
    try:
        with redirect_stdout(tee):
            report = module.main(argv)
        status = "ok"
    except SystemExit as e:  # argparse rejected our flags
        report, status = {"message": f"main({argv}) exited with {e.code}"}, "error"
    except Exception as e:  # noqa: BLE001 - a failing benchmark must not stop the others
        # an optional package the benchmark needs is missing (its message names the extra), or a failure
        optional = isinstance(e, ModuleNotFoundError) and (e.name or "").split(".")[0] in PROVIDED_BY
        report = {"message": str(e) if optional else traceback.format_exc()}
        status = "missing" if optional else "error"
    result = {"status": status, "seconds": time.perf_counter() - t0, "stdout": tee.getvalue()}
    if status == "ok":
        result["report"] = report if isinstance(report, dict) else {"returned": repr(report)}
    else:
        result["message"] = report["message"]
    return result


def _rows_markdown(rows: list[dict]) -> str:
    columns = list(dict.fromkeys(k for r in rows for k in r))

    def fmt(v):
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def markdown(report: dict) -> str:
    dev = report["device"]
    text = [f"# hcjax bench ({report['date']})\n",
            f"Device: **{dev['backend']} - {dev['device_kind']}** x{dev['local_device_count']} "
            f"({', '.join(dev['devices'])}); host {dev['host']}, {dev['cpu_count']} CPUs; "
            f"jax {report['packages'].get('jax')}; commit {report['git'].get('commit')}.\n"]
    for name, r in report["benchmarks"].items():
        text.append(f"## {name}: {r['status']}" + (f" ({r['seconds']:.1f} s)" if "seconds" in r else "") + "\n")
        if r["status"] != "ok":
            text.append("```\n" + r.get("message", "") + "\n```\n")
            continue
        body = r["report"]
        tables = {k: v for k, v in body.items() if isinstance(v, list) and v and all(isinstance(x, dict) for x in v)}
        for key, rows in tables.items():
            text.append(f"### {key}\n\n" + _rows_markdown(rows))
        rest = {k: v for k, v in body.items() if k not in tables and k != "device"}
        if rest:
            text.append("```json\n" + json.dumps(rest, indent=1, default=str)[:4000] + "\n```\n")
    return "\n".join(text)


def run(out: Path, quick: bool = False, scripts=SCRIPTS) -> dict:
    """Run `scripts` into `out`; returns the report (with 'paths' of the JSON and Markdown)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
              "device": deps.devices(), "packages": deps.versions(), "git": provenance.git_commit(),
              "quick": quick, "benchmarks": {}}
    paths = {"json": out / "report.json", "markdown": out / "report.md"}
    for name in scripts:
        print(f"== {name}", flush=True)
        report["benchmarks"][name] = run_script(name, out, quick)
        print(f"== {name}: {report['benchmarks'][name]['status']}", flush=True)
        # rewritten after every script, so an interrupted bench keeps what finished
        R.atomic_write_text(paths["json"], json.dumps(report, indent=2, default=str))
        R.atomic_write_text(paths["markdown"], markdown(report))
    report["paths"] = {k: str(v) for k, v in paths.items()}
    return report
