"""What HyperController's claim comes to in each committed study, and what the paper's budget
would take on one GPU.

    python -m experiments.reporting.claims results/cpu_study results/cpu_learn_study ...

prints Markdown: per study, its budget and, for every other method X, the probability of
improvement P(HC > X) with its 95% stratified-bootstrap interval over all environments (the
numbers of the study's `tables/aggregate.md`: same statistics, replicates and seed as `hcjax
plot`) and on each environment alone (the same bootstrap restricted to that environment's
seeds), with the verdict: `better` (interval above 0.5), `worse` (below 0.5), `not
separated` (it contains 0.5) or `not testable` (a method with one run in an environment).
Then, for the studies that ran on a GPU, an estimate of a study at the paper's budget from
the rates measured there (`measured_rates`, `paper_estimate`).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import numpy as np

from experiments.reporting import stats as ST
from experiments.reporting.tables import markdown_table, measurement_notes, one_run_warning, probability_text
from experiments.reporting.verdict import has_test_seeds
from experiments.reporting.verdict import verdict as verdict_of
from experiments.reporting.views import ALL, BASELINE, env_names, grouped, measured_nothing, study_scores
from experiments.study import protocol
from experiments.study.methods import label
from experiments.study.plan import unit_timing
from experiments.study.store import load_units, read_manifest

VERDICTS = {"better": "better", "worse": "worse", "not significant": "not separated",
            "too few seeds": "too few seeds to tell", "not testable": "not testable",
            "no shared environment": "no shared environment"}

# The paper's protocol (PAPER.md): 1000 iterations, batch size (frames per iteration) tuned in
# [1000, 6000], 10 seeds per method and environment.
PAPER_ITERATIONS = 1000
PAPER_FRAMES = (1000, 6000)
PAPER_SEEDS = 10


# ---- verdicts ------------------------------------------------------------------------------

def on_environment(scores: ST.Scores, env: str) -> dict:
    """The scores (method -> env -> (S,)) restricted to one environment (methods without it
    left out)."""
    return {m: {env: per_env[env]} for m, per_env in scores.items() if env in per_env}


def claim_rows(units, reps: int = ST.REPS, seed: int = 0) -> list[dict]:
    """One row per (environment or ALL, other method): {'env', 'method', 'p', 'ci', 'verdict',
    'envs', 'all_nan' (`all_nan` of the method and HC)}. ALL rows are `stats.improvement_over`
    on the study's final evaluations, exactly as `hcjax plot` writes them to
    tables/aggregate.json; an environment's rows are the same statistic on that environment
    alone (its seeds resampled by the same generators)."""
    scores = study_scores(units)
    envs, _, _ = grouped(units)
    rows = []
    for env, part in [(ALL, scores)] + [(env, on_environment(scores, env)) for env in envs]:
        for method, r in ST.improvement_over(part, BASELINE, reps, seed).items():
            rows.append({"env": env, "method": method, "p": r["p"], "ci": list(r["ci"]), "envs": r["envs"],
                         "verdict": VERDICTS[r["verdict"]], "all_nan": all_nan(part, (method, BASELINE))})
    return rows


def all_nan(scores: ST.Scores, methods) -> list[tuple[str, str]]:
    """(method, env) of each of `methods` that ran in an environment of `scores` and whose final
    evaluations there are all NaN: a measurement that failed, not a method that was not run."""
    return [(m, env) for m in methods for env, x in scores.get(m, {}).items()
            if np.size(x) and not np.isfinite(x).any()]


# ---- budgets -------------------------------------------------------------------------------

def frames_range(config: dict, frames: np.ndarray | None) -> tuple[tuple[int, int], bool]:
    """((low, high) frames per iteration, tuned) of a unit: the batch size's search range (a
    `space` entry named batch_size, or the older `batch_size: [low, high]`) and True; else the
    frames its runs recorded per iteration (`frames`, (seeds, iterations): each environment's
    own batch size; None: the configuration's PPO batch size) and False."""
    for h in config.get("space") or []:
        if h["name"] == "batch_size":
            return (int(h["low"]), int(h["high"])), True
    if isinstance(config.get("batch_size"), (list, tuple)):
        low, high = config["batch_size"]
        return (int(low), int(high)), True
    if frames is None or not np.size(frames):
        size = int(config.get("ppo", {}).get("batch_size") or 0)
        return (size, size), False
    return (int(np.min(frames)), int(np.max(frames))), False


def device_name(manifest: dict | None, units) -> str:
    """The study's accelerator as the manifest names it ('cpu' for a CPU study)."""
    devices = (manifest or {}).get("devices") or {}
    if devices.get("device_kind"):
        count = devices.get("cpu_count")
        kind = devices["device_kind"]
        return f"{count}-core CPU" if kind == "cpu" and count else kind
    return ", ".join(sorted({d for u in units for d in u.meta.get("devices", [])}))


def budget(units, manifest: dict | None = None) -> dict:
    """What a study spent: environments, methods, seeds per unit (min, max), iterations per run,
    frames per iteration (low, high) of the batch-size range, the mean frames per iteration the
    runs actually used, and the device."""
    envs, methods, _ = grouped(units)
    ranges = [frames_range(u.meta["config"], u.frames) for u in units]
    compared = [u for u in units if protocol.kind(u.meta["method"]).phase == protocol.TUNING_PHASE
                and u.meta["method"] != protocol.SWEEP] or units  # the sweep's rows are configurations x seeds
    seeds = [int(u.seeds.size) for u in compared]
    test = [int(u.seeds.size) for u in units if protocol.kind(u.meta["method"]).phase == protocol.TEST_PHASE
            and protocol.kind(u.meta["method"]).base != protocol.SWEEP]  # the sweep's: incumbents x test seeds
    return {"envs": envs, "methods": list(dict.fromkeys(u.meta["method"] for u in compared)),
            "seeds": (min(seeds), max(seeds)), "test_seeds": max(test, default=0),
            "iterations": sorted({int(u.train_reward.shape[1]) for u in units}),
            "frames": (min(r[0] for r, _ in ranges), max(r[1] for r, _ in ranges)),
            "tuned": any(tuned for _, tuned in ranges),
            "mean_frames": float(np.mean(np.concatenate([np.ravel(u.frames) for u in units]))),
            "device": device_name(manifest, units)}


def study_claims(path: str | os.PathLike, reps: int = ST.REPS, seed: int = 0) -> dict:
    """{'path', 'name', 'budget', 'rows', 'units'} of one study directory."""
    units = load_units(path)
    if not units:
        raise ValueError(f"claims: no units in {path}")
    flags = {(u.meta["env"], u.meta["method"]): text for u in units if (text := measured_nothing(u))}
    return {"path": Path(path), "name": Path(path).name, "units": units, "env_names": env_names(units),
            "single_seed": ST.single_seed_strata(study_scores(units)), "flags": flags,
            "verdict": verdict_of(units, reps, seed) if has_test_seeds(units) else None,
            "budget": budget(units, read_manifest(path)), "rows": claim_rows(units, reps, seed)}


# ---- Markdown ------------------------------------------------------------------------------

def _cell(row: dict | None, unmeasured: bool) -> str:
    if unmeasured:
        return "not measured"
    if row is None or not np.isfinite(row["p"]):
        failed = (row or {}).get("all_nan") or []
        if not failed:
            return "not run there"
        where = [label(m) if row["env"] != ALL else f"{label(m)} on {env}" for m, env in failed]
        return f"evaluations all NaN ({', '.join(where)})"
    mark = {"better": "**better**", "worse": "**worse**"}.get(row["verdict"], row["verdict"])
    return f"{probability_text(row['p'], row['ci'])} {mark}"


def claims_table(rows: list[dict], names: dict[str, str] | None = None, flags: dict | None = None) -> str:
    """Markdown: a row per other method, a column for all environments then one per
    environment (headed by `names`: env label -> what it ran as); cells 'P [lo, hi] verdict'
    ('not run there' where the method lacks the environment, 'evaluations all NaN (...)' where
    it, or HC, ran there but every final evaluation is NaN, 'not measured' where it or HC
    measured nothing there: `flags`, {(env, method): what `views.measured_nothing` said})."""
    names, flags = names or {}, flags or {}
    columns = list(dict.fromkeys(r["env"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    by = {(r["env"], r["method"]): r for r in rows}
    flagged = {m for _, m in flags}

    def unmeasured(c, m):  # the method or HC measured nothing there (over all: no environment left to compare)
        if c == ALL:
            row = by.get((c, m))
            return bool({m, BASELINE} & flagged) and (row is None or not np.isfinite(row["p"]))
        return (c, m) in flags or (c, BASELINE) in flags

    body = [[label(m)] + [_cell(by.get((c, m)), unmeasured(c, m)) for c in columns] for m in methods]
    head = [f"P({label(BASELINE)} > X)"] + ["all (aggregate)" if c == ALL else names.get(c, c) for c in columns]
    return markdown_table(head, body)


def _span(pair) -> str:
    low, high = pair
    return f"{low}" if low == high else f"{low}-{high}"


def budget_text(b: dict, names: dict[str, str] | None = None) -> str:
    """One sentence: the study's budget (environments named by `names`, as they ran)."""
    iterations = ", ".join(str(t) for t in b["iterations"])
    envs = [(names or {}).get(e, e) for e in b["envs"]]
    test = f" (and every unit again on {b['test_seeds']} test seeds)" if b.get("test_seeds") else ""
    return (f"{len(b['envs'])} environments ({'; '.join(envs)}) × {len(b['methods'])} methods × "
            f"{_span(b['seeds'])} seeds{test}; {iterations} iterations of {_span(b['frames'])} frames per iteration "
            f"({'tuned; ' if b.get('tuned', True) else ''}{b['mean_frames']:.0f} used on average); {b['device']}.")


def summary_text(rows: list[dict]) -> str:
    """The aggregate verdicts in one sentence: which methods HC beats, is level with, loses to,
    cannot be tested against (each named only where it has a method)."""
    agg = [r for r in rows if r["env"] == ALL]
    parts = []
    for word, name in (("better", "better than"), ("not separated", "not separated from"), ("worse", "worse than"),
                       ("too few seeds to tell", "too few seeds to tell against"),
                       ("not testable", "not testable (one run in an environment) against")):
        names = [label(r["method"]) for r in agg if r["verdict"] == word]
        if names:
            parts.append(f"{name} {', '.join(names)}")
    return f"Over all environments {label(BASELINE)} is " + ("; ".join(parts) or "compared with no method") + "."


def study_section(study: dict, relative_to: str | os.PathLike = "docs") -> str:
    """Markdown of one study: heading, budget, source link, the table and its one-line summary."""
    source = os.path.relpath(Path(study["path"]).resolve() / "tables" / "aggregate.md", Path(relative_to).resolve())
    source = Path(source).as_posix()
    head = (f"### {study['name']}\n\n"
            f"Budget: {budget_text(study['budget'], study['env_names'])} Source: "
            f"[`{study['name']}/tables/aggregate.md`]({source}) (the 'all' column; the per-environment columns are "
            f"computed here).\n\n")
    if not study["rows"]:
        return head + (f"No {label(BASELINE)} ({BASELINE}) units in this study, so there is no claim to test: "
                       f"it compares {', '.join(label(m) for m in study['budget']['methods'])} only.\n")
    warning = f"\n{one_run_warning(study['single_seed'])}\n" if study["single_seed"] else ""
    notes = measurement_notes(study["units"])
    table = claims_table(study["rows"], study["env_names"], study.get("flags"))
    text = head + table + "\n" + summary_text(study["rows"]) + "\n" + warning + (f"\n{notes}" if notes else "")
    if study.get("verdict") is not None:
        text += "\n#### The verdict on the test seeds\n\n" + study["verdict"].text(level=5)
    return text


# ---- the paper's budget on one GPU, from measured rates -----------------------------------

def segment_lengths(unit) -> list[int]:
    """Iterations of each timed segment of a JAX unit: segments end at every evaluation (the
    unit's eval_iteration). ValueError when that does not match its segment_seconds."""
    ends = [int(e) for e in unit.eval_iteration]
    lengths = [b - a for a, b in zip([0] + ends[:-1], ends)]
    if len(lengths) != len(unit.meta.get("segment_seconds", [])):
        raise ValueError(f"claims: {unit.meta['env']}/{unit.meta['method']}: segments do not match evaluations")
    return lengths


def program_rate(unit) -> dict:
    """The measured rate of the compiled program a unit ran in (shared by the methods fused
    with it): {'agents', 'max_frames', 'seconds_per_iteration', 'compile_seconds'}.

    seconds_per_iteration: the median over segments of segment seconds / segment iterations
    (a segment's time includes its closing evaluation; compilation falls in the first segment
    and the first after a resume, which the median leaves out). compile_seconds: the first
    segment's time above that steady rate. max_frames: the top of the batch-size range, the
    frames every iteration steps whatever batch size is chosen (the rollout is masked)."""
    seconds = [float(s) for s in unit.meta["segment_seconds"]]
    lengths = segment_lengths(unit)
    steady = statistics.median(s / n for s, n in zip(seconds, lengths))
    top = frames_range(unit.meta["config"], getattr(unit, "frames", None))[0][1]
    return {"agents": int(unit.meta["n_agents"]), "max_frames": top,
            "seconds_per_iteration": steady, "compile_seconds": max(0.0, seconds[0] - steady * lengths[0])}


def measured_rates(units) -> list[dict]:
    """Per environment: its programs' summed rate, {'env', 'agents', 'methods', 'seeds',
    'max_frames', 'seconds_per_iteration', 'compile_seconds', 'agent_frames_per_second'}.
    Methods fused into one program (meta 'fused_with') count once."""
    envs, _, by = grouped(units)
    out = []
    for env in envs:
        programs, methods = {}, []
        for (e, m), u in by.items():
            if e != env:
                continue
            methods.append(m)
            programs.setdefault(tuple(u.meta.get("fused_with", [m])), program_rate(u))
        rates = list(programs.values())
        agents = sum(r["agents"] for r in rates)
        frames = max(r["max_frames"] for r in rates)
        per_iteration = sum(r["seconds_per_iteration"] for r in rates)
        out.append({"env": env, "agents": agents, "methods": len(methods), "seeds": agents // len(methods),
                    "max_frames": frames, "seconds_per_iteration": per_iteration,
                    "compile_seconds": sum(r["compile_seconds"] for r in rates),
                    "agent_frames_per_second": agents * frames / per_iteration})
    return out


def paper_estimate(rates: list[dict], iterations: int = PAPER_ITERATIONS, frames: int = PAPER_FRAMES[1],
                   seeds: int = PAPER_SEEDS) -> list[dict]:
    """Per environment: the seconds a study of `iterations` iterations stepping `frames` frames
    each, `seeds` seeds of the same methods, would take at the measured agent-frames per second
    (time per iteration proportional to agents x frames), plus the measured compilation once:
    {'env', 'agents', 'frames', 'iterations', 'seconds'}."""
    out = []
    for r in rates:
        agents = r["methods"] * seeds
        per_iteration = agents * frames / r["agent_frames_per_second"]
        out.append({"env": r["env"], "agents": agents, "frames": frames, "iterations": iterations,
                    "seconds": iterations * per_iteration + r["compile_seconds"]})
    return out


def evaluation_interval(units) -> str:
    """The units' iterations between evaluations ('20', or '20/100' where environments differ)."""
    return "/".join(str(v) for v in sorted({unit_timing(u.meta["config"]).eval_every for u in units}))


def settings_text(units) -> str:
    """The PPO and tuner settings of a study that set its cost per iteration, in words."""
    config = units[0].meta["config"]
    ppo = config["ppo"]
    buffers = sorted({int(u.meta["config"]["tuner"]["buffer"]) for u in units if "buffer" in u.meta["config"]["tuner"]})
    text = (f"{len(ppo['hidden_sizes'])}×{max(ppo['hidden_sizes'])} networks, {ppo['update_epochs']} epochs of "
            f"{ppo['num_minibatches']} minibatches, an evaluation every {evaluation_interval(units)} iterations")
    return text + (f", GP buffers of {'/'.join(map(str, buffers))} points" if buffers else "")


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def estimate_section(study: dict, relative_to: str | os.PathLike = "docs") -> str:
    """Markdown: the measured rates of a GPU study and the paper-budget estimate from them."""
    rates = measured_rates(study["units"])
    low = paper_estimate(rates, frames=PAPER_FRAMES[0])
    high = paper_estimate(rates, frames=PAPER_FRAMES[1])
    units_dir = Path(os.path.relpath(Path(study["path"]).resolve() / "units", Path(relative_to).resolve())).as_posix()
    r0 = rates[0]
    body = [[r["env"], f"{r['agents']} × {r['max_frames']}", f"{r['seconds_per_iteration']:.3f}",
             f"{r['compile_seconds']:.0f}", f"{r['agent_frames_per_second'] / 1e6:.2f}",
             _duration(lo["seconds"]), _duration(hi["seconds"])] for r, lo, hi in zip(rates, low, high)]
    body.append(["total (one task after another)", "", "", "", "", _duration(sum(x["seconds"] for x in low)),
                 _duration(sum(x["seconds"] for x in high))])
    agents = f"{r0['methods']} methods × {PAPER_SEEDS} seeds"
    head = ["Task", "agents × frames stepped per iteration (measured)", "s per iteration", "compile s",
            "M agent-frames/s", f"{agents}, {PAPER_ITERATIONS} it × {PAPER_FRAMES[0]} frames",
            f"{agents}, {PAPER_ITERATIONS} it × {PAPER_FRAMES[1]} frames"]
    return (f"### A study at the paper's budget on one {study['budget']['device']}: an estimate\n\n"
            f"Measured in `{study['name']}` (its [units]({units_dir})' `segment_seconds`, `n_agents` and batch-size "
            f"range), then extrapolated to {PAPER_ITERATIONS} iterations of {PAPER_FRAMES[0]}-{PAPER_FRAMES[1]} "
            f"frames, {PAPER_SEEDS} seeds, the same {r0['methods']} methods. This is an estimate from measured "
            f"rates, not a measurement. It assumes:\n\n"
            f"- the time per iteration is proportional to agents × frames stepped per iteration: the GPU keeps "
            f"the throughput (agent-frames per second) measured here. Longer rollouts lengthen the scans in "
            f"proportion; {r0['methods'] * PAPER_SEEDS} agents instead of {r0['agents']} may keep the GPU less "
            f"busy, which would make the estimate low;\n"
            f"- a tuned batch size in [{PAPER_FRAMES[0]}, {PAPER_FRAMES[1]}] costs what {PAPER_FRAMES[1]} frames "
            f"cost: the compiled program steps the range's maximum every iteration and masks the rest. The "
            f"{PAPER_FRAMES[0]}-frame column is the cost of a fixed {PAPER_FRAMES[0]}-frame batch, the "
            f"{PAPER_FRAMES[1]}-frame column that of the paper's tuned range;\n"
            f"- the measured study's PPO and tuners ({settings_text(study['units'])}), not the paper's (3×256 "
            f"networks, 10 epochs, an evaluation every 10 iterations, GP buffers of 1000 points), which cost more "
            f"per iteration;\n"
            "- every method and seed of a task in one program, the tasks one after another, each compiled once "
            "(its measured compilation added once); the steady time per iteration is the median segment's "
            "(a segment's time includes its closing evaluation);\n"
            "- only the tasks measured here (the paper's BipedalWalker-v3 has no JAX version).\n\n"
            + markdown_table(head, body))


# ---- the page ------------------------------------------------------------------------------

def on_gpu(study: dict) -> bool:
    """Whether a study's units ran on a GPU (device names 'cuda:...' or 'gpu:...')."""
    return any(d.startswith(("cuda", "gpu")) for u in study["units"] for d in u.meta.get("devices", []))


def render(paths, relative_to: str | os.PathLike = "docs", reps: int = ST.REPS, seed: int = 0) -> str:
    """The Markdown block of the results page: every study's section, then the estimate from
    each GPU study among them."""
    studies = [study_claims(p, reps, seed) for p in paths]
    text = ("Cells: P(HC > X) [95% CI] (the stratified bootstrap's) and the verdict, called as the verdict and "
            "`hcjax.control.report` call theirs (hcjax.calls): **better** / **worse** where the exact stratified "
            "permutation test gives p <= 0.05, not separated otherwise, too few seeds to tell where no outcome "
            "of groups this small could reach 0.05 (3 + 3 runs on one environment), not testable where either "
            "method has one run in an environment. The interval may exclude 0.5 where the test does not call "
            "a difference: the percentile bootstrap of a few seeds is too narrow. Two decimals, three "
            "where a number would otherwise show as 0.50. The aggregate is "
            "the study's `tables/aggregate.md`; an environment's cell is the same statistic on that "
            "environment's seeds alone (fewer seeds, wider intervals). Environments are named as they ran: "
            "the backend and its environment, and the study's name for it where they differ.\n\n")
    text += "\n".join(study_section(s, relative_to) for s in studies)
    text += "".join("\n" + estimate_section(s, relative_to) for s in studies if on_gpu(s))
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.reporting.claims",
                                     description="What HyperController's claim comes to in each study (Markdown).")
    parser.add_argument("studies", nargs="+", help="study directories (results/<study>)")
    parser.add_argument("--relative-to", default="docs", help="folder the links are relative to (default: docs)")
    args = parser.parse_args(argv)
    sys.stdout.write(render(args.studies, args.relative_to))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
