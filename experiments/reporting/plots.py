"""`hcjax plot DIR`: the paper's Figures 1-2 and tables from a study directory.

    figures/fig1_tuning_time.png  median (line) and interquartile band (shade) over seeds of
                                  the training episode return (left: the mean return of the
                                  episodes that ended in each iteration; the per-step reward
                                  stays in the units, export and TensorBoard) and the
                                  evaluation reward sum (right) against cumulative tuning
                                  time (log-scale minutes), one row per environment
    figures/fig1_iterations.png   the same against training iterations
    figures/fig2_final.png        box plots of the final training episode return and the final
                                  evaluation reward sum per method, one row per environment
    tables/success.md             seeds finishing without a rejected update or NaN (paper layout)
    tables/results.md             median final evaluation reward sum, IQR, rank per environment
    tables/tuning_time.md         total tuning time per unit (minutes)
    tables/measured_nothing.md    the units whose evaluations all scored the same (only when there are such)
    tables/verdict.md, .json      the verdict on the test seeds (only for a study with test seeds, see
                                  experiments.reporting.verdict); figures/verdict.png its intervals
    figures/headroom.png          each environment's sweep configurations against the default, from
                                  the tuning seeds (only for a study with a sweep: experiments.reporting.headroom)
    tables/aggregate.md, .json    per method IQM and mean of normalised scores and P(HC > method),
                                  with stratified-bootstrap 95% intervals (see experiments.reporting.stats)
    figures/aggregate.png         IQM and mean with their intervals per method
    figures/probability_of_improvement.png   P(HC > method) with intervals
    figures/performance_profile.png          fraction of runs above each normalised score
    report.md                     all tables and figure links in one page

Every PNG is written with deterministic bytes: no software version in its metadata, and
log-scale limits snapped to tick values (see `_log_limits`), so replotting the same study
gives the same files.
"""
from __future__ import annotations

import io
import math
import os
from pathlib import Path

import numpy as np

from experiments.reporting import headroom, tables
from experiments.reporting import stats as ST
from experiments.reporting.verdict import Verdict, has_test_seeds, verdict
from experiments.reporting.verdict_text import column, method_label
from experiments.reporting.views import (
    ALL,
    BASELINE,
    cumulative_minutes,
    env_names,
    final_eval,
    final_return,
    grouped,
    quartiles,
    study_scores,
)
from experiments.study import unfinished
from experiments.study.files import safe_name
from experiments.study.methods import color, label
from experiments.study.protocol import REPLAY, SWEEP, configuration_means
from experiments.study.store import (
    StudyDir,
    UnitResult,
    atomic_write_bytes,
    atomic_write_text,
    read_manifest,
    unit_name,
)
from hcjax.extras import require


def _matplotlib():
    require("figures (experiments.reporting.plots)", "matplotlib")  # else an ImportError naming hcjax[studies]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure1(units, path, x_axis: str = "time") -> Path:
    """Median and IQR band of the training episode return and the eval reward sum vs tuning
    time or iterations."""
    plt = _matplotlib()
    envs, methods, by = grouped(units)
    fig, axes = plt.subplots(len(envs), 2, figsize=(11, 3.2 * len(envs)), squeeze=False)
    for row, env in enumerate(envs):
        for col, (metric, title) in enumerate((("train", "training episode return"),
                                               ("eval", "evaluation reward sum"))):
            ax = axes[row, col]
            xs = []
            for m in methods:
                u = by.get((env, m))
                if u is None:
                    continue
                if metric == "train":
                    y = u.episode_return
                    idx = np.arange(u.episode_return.shape[1])
                else:
                    y = u.eval_reward
                    idx = u.eval_iteration.astype(int) - 1
                if y.shape[1] == 0:
                    continue
                if x_axis == "time":
                    x = np.maximum(cumulative_minutes(u)[idx], 1e-7)
                else:
                    x = idx + 1
                xs.append(x)
                lo, med, hi = quartiles(y)
                ax.plot(x, med, color=color(m), label=label(m), lw=1.5)
                ax.fill_between(x, lo, hi, color=color(m), alpha=0.2, lw=0)
            if x_axis == "time":
                ax.set_xscale("log")
                if xs:
                    ax.set_xlim(*_log_limits(np.concatenate(xs)))
                ax.xaxis.set_minor_formatter(plt.NullFormatter())
                ax.set_xlabel("cumulative tuning time (min, log scale)")
            else:
                ax.set_xlabel("iteration")
            ax.set_ylabel(title)
            ax.set_title(f"{env}: median {title}")
            ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8, loc="best")
    fig.tight_layout()
    return _save(fig, path, plt)


def figure2(units, path) -> Path:
    """Box plots over seeds of the final training episode return and final eval reward sum."""
    plt = _matplotlib()
    envs, methods, by = grouped(units)
    fig, axes = plt.subplots(len(envs), 2, figsize=(11, 3.2 * len(envs)), squeeze=False)
    for row, env in enumerate(envs):
        for col, (fn, title) in enumerate(((final_return, "final training episode return"),
                                           (final_eval, "final evaluation reward sum"))):
            ax = axes[row, col]
            ms = [m for m in methods if (env, m) in by]
            data = [fn(by[(env, m)]) for m in ms]
            data = [d[np.isfinite(d)] for d in data]
            box = ax.boxplot(data, patch_artist=True, showfliers=True)
            ax.set_xticks(range(1, len(ms) + 1), [label(m) for m in ms])
            for patch, m in zip(box["boxes"], ms):
                patch.set_facecolor(color(m) or "white")
                patch.set_alpha(0.5)
            ax.set_title(f"{env}: {title}")
            ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return _save(fig, path, plt)


def _one_digit(x: float, up: bool) -> float:
    """x > 0 rounded down (up=False) or up to one significant digit, k * 10**e with k in 1..10."""
    e = math.floor(math.log10(x))
    unit = 10.0 ** e
    k = math.ceil(x / unit - 1e-9) if up else math.floor(x / unit + 1e-9)
    return max(k, 1) * unit


def _log_limits(x: np.ndarray) -> tuple[float, float]:
    """Limits of a log axis over the positive finite values of x: the data range widened to
    the nearest k * 10**e (the log locator's major and minor ticks).

    Why: with autoscaled limits a tick can fall within a hundredth of a pixel of the axes
    edge, and then whether it is drawn one pixel inside or on the spine depends on the last
    bits of log10, which NumPy computes differently with and without AVX-512 (the committed
    cpu_study figure was drawn without it; this machine has it). At a tick value the edge
    tick sits exactly on the spine on every machine."""
    x = np.asarray(x, np.float64)
    x = x[np.isfinite(x) & (x > 0)]
    if x.size == 0:
        return 0.1, 1.0
    lo, hi = _one_digit(float(x.min()), up=False), _one_digit(float(x.max()), up=True)
    return (lo, hi) if hi > lo else (lo, 10.0 * lo)


def _save(fig, path, plt) -> Path:
    """Save a figure atomically as PNG with deterministic bytes: the metadata that would
    change between machines or versions (matplotlib's 'Software' version string) is left
    out; Agg writes no timestamp. Never through a link in the study directory (the
    figure's grandparent: OUT/figures/NAME.png)."""
    buf = io.BytesIO()
    # tight_layout leaves a placeholder layout engine behind, and with one savefig first
    # draws the whole figure once more (renderer disabled) before the real draw: the layout
    # is final already, so drop it (same pixels, about a third less drawing time)
    fig.set_layout_engine(None)
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue(), root=Path(path).parent.parent)
    return Path(path)


def _interval_rows(ax, labels, colors, points, cis, xlim):
    """rliable-style rows: a bar over each interval, a black tick at the point estimate; top
    row first. labels/colors: (M,); points: (M,); cis: (M, 2)."""
    ys = np.arange(len(labels))[::-1].astype(float)
    for y, c, p, (lo, hi) in zip(ys, colors, points, cis):
        if np.isfinite(p):
            ax.barh(y, hi - lo, left=lo, height=0.6, color=c, alpha=0.75, lw=0)
            ax.vlines(p, y - 0.3, y + 0.3, color="k", lw=2)
    ax.set_yticks(ys, labels)
    ax.set_ylim(-0.6, len(labels) - 0.4)
    ax.set_xlim(*xlim)
    ax.grid(alpha=0.3, axis="x")


def figure_aggregate(summary: dict, path) -> Path:
    """IQM and mean of normalised scores per method with their intervals (two panels)."""
    plt = _matplotlib()
    agg = summary["aggregates"]
    ms = list(agg)
    pct = f"{100 * summary['bootstrap']['confidence']:g}%"
    ends = [v for a in agg.values() for v in a["iqm_ci"] + a["mean_ci"] if np.isfinite(v)]
    xlim = (min([0.0] + ends), max([1.0] + ends))
    fig, axes = plt.subplots(1, 2, figsize=(9, 0.45 * len(ms) + 1.4), squeeze=False)
    for ax, key, title in zip(axes[0], ("iqm", "mean"), ("IQM", "Mean")):
        _interval_rows(ax, [label(m) for m in ms], [color(m) or "tab:cyan" for m in ms],
                       [agg[m][key] for m in ms], [agg[m][key + "_ci"] for m in ms], xlim)
        ax.set_title(f"{title} ({pct} CI)")
        ax.set_xlabel("normalised final evaluation score")
    fig.tight_layout()
    return _save(fig, path, plt)


def figure_improvement(summary: dict, path) -> Path:
    """P(baseline > method) per other method with its interval; dashed line at 0.5."""
    plt = _matplotlib()
    vs = summary["improvement"]["vs"]
    base = label(summary["improvement"]["baseline"])
    ms = list(vs)
    fig, ax = plt.subplots(figsize=(6, 0.45 * max(len(ms), 1) + 1.4))
    if ms:
        _interval_rows(ax, [label(m) for m in ms], [color(m) or "tab:cyan" for m in ms],
                       [vs[m]["p"] for m in ms], [vs[m]["ci"] for m in ms], (0.0, 1.0))
        ax.axvline(0.5, color="k", ls="--", lw=1)
    else:
        ax.text(0.5, 0.5, f"no {base} units in this study", ha="center", va="center", transform=ax.transAxes)
        ax.set_yticks([])
    ax.set_xlabel(f"P({base} > X)")
    ax.set_title(f"Probability of improvement of {base} ({100 * summary['bootstrap']['confidence']:g}% CI)")
    fig.tight_layout()
    return _save(fig, path, plt)


def figure_profile(summary: dict, path) -> Path:
    """Performance profiles: fraction of runs with normalised score > tau, with bands."""
    plt = _matplotlib()
    taus = np.asarray(summary["profile"]["taus"])
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for m, prof in summary["profile"]["methods"].items():
        if not prof["envs"]:
            continue
        ax.plot(taus, prof["fraction"], color=color(m), label=label(m), lw=1.5)
        ax.fill_between(taus, prof["lower"], prof["upper"], color=color(m), alpha=0.15, lw=0)
    ax.set_xlim(float(taus.min()), float(taus.max()))
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel(r"normalised final evaluation score $\tau$")
    ax.set_ylabel(r"fraction of runs with score > $\tau$")
    ax.set_title(f"Performance profiles ({100 * summary['bootstrap']['confidence']:g}% CI)")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    return _save(fig, path, plt)


def figure_verdict(judged: Verdict, path) -> Path:
    """The verdict on the test seeds over all environments, a panel per comparison: per method,
    P(> default), P(> sweep incumbent), P(> fresh runs) with intervals (dashed: 0.5), the share of
    the sweep's gain and the recovery from each poor default (dashed: 0 and 100%); a comparison
    without a number says why (not measured, undefined, within the noise) in its row."""
    plt = _matplotlib()
    rows = [r for r in judged.rows if r["phase"] == "test" and r["env"] == ALL and r["kind"] != "cost"]
    comparisons = sorted(dict.fromkeys(r["comparison"] for r in rows), key=column) or ["nothing to compare"]
    most = max(sum(r["comparison"] == c for r in rows) for c in comparisons) or 1
    ncols = min(3, len(comparisons))
    nrows = -(-len(comparisons) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, (0.4 * most + 1.2) * nrows + 0.4), squeeze=False)
    for ax in axes.ravel()[len(comparisons):]:
        ax.remove()
    for ax, comparison in zip(axes.ravel(), comparisons):
        mine = [r for r in rows if r["comparison"] == comparison]
        if not mine:  # no default and no sweep beside the methods
            ax.text(0.5, 0.5, "nothing to compare:\nno default (fixed), no sweep", ha="center", va="center")
            ax.set_axis_off()
            continue
        share = mine[0]["kind"] == "share"
        ends = [x for r in mine for x in (r["low"], r["high"]) if np.isfinite(x)]
        low, high = max(-2.0, min([0.0] + ends)), min(3.0, max([1.0] + ends))
        xlim = (low - 0.05 * (high - low), high + 0.05 * (high - low)) if share else (0.0, 1.0)
        noise = [r["status"] == "unbounded" for r in mine]  # a share of a gain within the noise: no number
        cis = np.clip([[np.nan, np.nan] if n else [r["low"], r["high"]] for r, n in zip(mine, noise)], *xlim)
        bases = [r["method"].removeprefix(REPLAY) for r in mine]
        _interval_rows(ax, [method_label(r["method"]) for r in mine], [color(m) or "tab:cyan" for m in bases],
                       [np.nan if n else r["estimate"] for r, n in zip(mine, noise)], cis, xlim)
        for y, r, n in zip(np.arange(len(mine))[::-1], mine, noise):
            if n or not np.isfinite(r["estimate"]):
                ax.text(sum(xlim) / 2, y, "within the noise" if n else r["status"], ha="center", va="center",
                        fontsize=8, bbox=dict(facecolor="white", edgecolor="none"))
        for x in (0.0, 1.0) if share else (0.5,):
            ax.axvline(x, color="k", ls="--", lw=1)
        if share:
            ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda x, _: f"{100 * x:.0f}%"))
        ax.set_title(comparison, fontsize=10)
    fig.suptitle("The verdict on the test seeds, all environments (95% CI)", fontsize=11)
    fig.tight_layout()
    return _save(fig, path, plt)


def figure_headroom(units, path) -> Path | None:
    """The headroom of every environment with a sweep (`headroom`), a panel each: the sweep's
    configurations sorted by their mean final evaluation on the tuning seeds (coloured where they
    beat the default by more than one seed standard deviation), the default's mean (a line) and
    that standard deviation (a band); None without a sweep."""
    by = {(u.meta["env"], u.meta["method"]): u for u in units}
    rooms = headroom.headroom(units)
    if not rooms:
        return None
    plt = _matplotlib()
    fig, axes = plt.subplots(1, len(rooms), figsize=(4.4 * len(rooms), 3.4), squeeze=False)
    for ax, (env, room) in zip(axes[0], rooms.items()):
        sweep = by[(env, SWEEP)]
        rows = np.asarray(sweep.meta["sweep"]["configuration"])
        own = np.unique(rows[headroom.default_rows(sweep.meta["sweep"])])
        means = configuration_means(final_eval(sweep), rows)
        means = np.sort(np.delete(means, own))[::-1]
        above = means - room.default_mean > room.sigma
        x = np.arange(1, means.size + 1)
        ax.axhspan(room.default_mean - room.sigma, room.default_mean + room.sigma, color="tab:gray", alpha=0.25,
                   label="default +- one seed sd")
        ax.axhline(room.default_mean, color="k", lw=1)
        ax.scatter(x[~above], means[~above], s=10, color="tab:gray", label="configurations")
        ax.scatter(x[above], means[above], s=12, color="tab:green", label="above the default by > 1 sd")
        ax.set_title(f"{env}: {room.better} of {room.configurations} above" + (" (ceiling)" if room.ceiling else ""),
                     fontsize=10)
        ax.set_xlabel("sweep configuration, by rank")
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylabel("mean final evaluation, tuning seeds")
    axes[0, 0].legend(fontsize=7, loc="lower left")
    fig.suptitle("Headroom: is there anything above the default to find?", fontsize=11)
    fig.tight_layout()
    return _save(fig, path, plt)


def _copies(unit: UnitResult) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The copies of a population unit's lineage before its last iteration, population step by
    step, agent by agent: (C,) iterations done at the step, (C,) copying agents i, (C,) donors j."""
    S, T = unit.hparams.shape[:2]
    its = unit.lineage_iteration.astype(int)
    copied = (unit.lineage_parent != np.arange(S)[:, None]) & (its < T)[None, :]  # (S, K)
    step, agent = np.nonzero(copied.T)  # step-major: the order of the population steps
    return its[step], agent, unit.lineage_parent[agent, step].astype(int)


def figure_lineage(unit: UnitResult, path) -> Path:
    """A population unit's hyperparameter trajectories: one panel per hyperparameter,
    every agent's value in effect at each iteration (a step line), and every copy marked:
    at a population step where agent i took agent j's network, a line from j's value
    before the step to a dot at i's new value (explored from j's), coloured as agent i.
    The copies of a panel are one LineCollection and one scatter (one artist per copy
    drew ~1 s per figure)."""
    plt = _matplotlib()
    from matplotlib.collections import LineCollection

    names = unit.meta.get("hparam_names", [f"h{k}" for k in range(unit.hparams.shape[2])])
    S, T, h = unit.hparams.shape
    fig, axes = plt.subplots(h, 1, figsize=(10, 2.4 * h), sharex=True, squeeze=False)
    colors = plt.get_cmap("tab20")(np.linspace(0, 1, max(S, 2)))
    x = np.arange(1, T + 1)
    log = {n: entry.get("scale") == "log" for n, entry in
           ((e["name"], e) for e in unit.meta.get("config", {}).get("space", []))}
    it, agent, donor = _copies(unit)
    for k, ax in enumerate(axes[:, 0]):
        for i in range(S):
            ax.step(x, unit.hparams[i, :, k], where="post", color=colors[i], lw=1.0, alpha=0.8)
        if it.size:
            before, after = unit.hparams[donor, it - 1, k], unit.hparams[agent, it, k]  # (C,) each
            segments = np.stack([np.stack([it, before], -1), np.stack([it + 1, after], -1)], 1)  # (C, 2, 2)
            ax.add_collection(LineCollection(segments, colors=colors[agent], lw=0.8, zorder=3), autolim=False)
            ax.scatter(it + 1, after, s=9, c=colors[agent], lw=1.0, zorder=3)  # the old ms=3 dots
        if log.get(names[k]):
            ax.set_yscale("log")
        ax.set_ylabel(names[k])
        ax.grid(alpha=0.3)
    copies = int(np.sum(unit.lineage_parent != np.arange(S)[:, None])) if unit.lineage_parent.size else 0
    axes[0, 0].set_title(f"{unit.meta['env']} / {unit.meta['method']}: {S} agents, {len(unit.lineage_iteration)} "
                         f"population steps, {copies} copies\n(a line: from the donor's value to a dot at the "
                         f"copy's new value)", fontsize=10)
    axes[-1, 0].set_xlabel("iteration")
    fig.tight_layout()
    return _save(fig, path, plt)


# The figures of a study: name -> (file name, writer(units, summary, path)), in report order.
FIGURES = {
    "fig1_tuning_time": ("fig1_tuning_time.png", lambda units, summary, path: figure1(units, path, "time")),
    "fig1_iterations": ("fig1_iterations.png", lambda units, summary, path: figure1(units, path, "iterations")),
    "fig2_final": ("fig2_final.png", lambda units, summary, path: figure2(units, path)),
    "aggregate_figure": ("aggregate.png", lambda units, summary, path: figure_aggregate(summary, path)),
    "probability_of_improvement": ("probability_of_improvement.png",
                                   lambda units, summary, path: figure_improvement(summary, path)),
    "performance_profile": ("performance_profile.png", lambda units, summary, path: figure_profile(summary, path)),
}

# The tables of a study: name -> writer(units, summary) of its Markdown, in report order.
TABLES = {
    "success": lambda units, summary: tables.success_table(units),
    "results": lambda units, summary: tables.results_table(units),
    "tuning_time": lambda units, summary: tables.tuning_time_table(units),
    "aggregate": lambda units, summary: tables.aggregate_table(summary),
}


def report(out: Path, texts: dict[str, str], paths: dict[str, Path]) -> str:
    """report.md: a header from the manifest, every table, every figure."""
    manifest = read_manifest(out) or {}
    head = f"# Study `{manifest.get('config', {}).get('name', out.name)}`\n\n"
    dev = manifest.get("devices", {})
    if dev:
        head += f"Devices: {dev.get('backend')} x{dev.get('local_device_count')} ({dev.get('device_kind')}); " \
                f"commit {manifest.get('git', {}).get('commit')}.\n\n"
    text = head + "".join(f"## {k}\n\n{v}\n" for k, v in texts.items())
    text += "The aggregate statistics as JSON: [tables/aggregate.json](tables/aggregate.json).\n\n"
    return text + "".join(f"![{k}](figures/{Path(p).name})\n\n" for k, p in paths.items() if str(p).endswith(".png"))


def plot(out: str | os.PathLike, units: list[UnitResult] | None = None, reps: int = ST.REPS,
         seed: int = 0) -> dict[str, Path]:
    """Write every figure and table of a study directory; returns name -> path. Every
    path lies inside `out` (file names from a unit's meta are made safe, see
    files.safe_name) and nothing is written through a link planted there.
    units: the directory's units when the caller has loaded them already (else read here);
    reps, seed: bootstrap replicates and seed of the aggregate statistics."""
    out = Path(out)
    store = StudyDir(out)
    store.check_plot_writable()
    units = store.units() if units is None else units
    if not units:
        raise ValueError(f"plot: no finished units in {store.units_dir}; run `hcjax run --out {out}` first")
    summary = ST.summarise(study_scores(units), baseline=BASELINE, reps=reps, seed=seed)
    summary["env_names"] = env_names(units)  # what each environment ran as, for the tables
    judged, waiting = None, ""
    if has_test_seeds(units) or unfinished.testing(store.read_manifest()):
        try:  # a verdict without some of its units: none, and the report says why
            unfinished.check(store, units, "the verdict")
            judged = verdict(units, reps, seed) if has_test_seeds(units) else None
        except unfinished.Unfinished as e:
            waiting = f"Not written: {e}\n"
    paths = {name: write(units, summary, out / "figures" / file) for name, (file, write) in FIGURES.items()}
    room = figure_headroom(units, out / "figures" / "headroom.png")
    if room is not None:
        paths["headroom_figure"] = room
    if judged is not None:
        paths["verdict_figure"] = figure_verdict(judged, out / "figures" / "verdict.png")
        paths["verdict_json"] = out / "tables" / "verdict.json"
        atomic_write_text(paths["verdict_json"], judged.json(), root=out)
    for u in units:
        if u.lineage_iteration.size:
            name = safe_name(f"lineage_{unit_name(u.meta['env'], u.meta['method'])}")  # whatever meta says
            paths[name] = figure_lineage(u, out / "figures" / f"{name}.png")
    paths["aggregate_json"] = out / "tables" / "aggregate.json"
    atomic_write_text(paths["aggregate_json"], tables.aggregate_json(summary), root=out)
    texts = {name: write(units, summary) for name, write in TABLES.items()}
    notes = tables.measurement_notes(units)  # first in the report: what the other tables leave out
    page = judged.markdown if judged else waiting
    texts = {**({"measured_nothing": notes} if notes else {}), **({"verdict": page} if page else {}), **texts}
    for name, text in texts.items():
        paths[name] = out / "tables" / f"{name}.md"
        atomic_write_text(paths[name], text, root=out)
    paths["report"] = out / "report.md"
    atomic_write_text(paths["report"], report(out, texts, paths), root=out)
    return paths
