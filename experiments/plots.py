"""`hcjax plot DIR`: the paper's Figures 1-2 and tables from a study directory.

    figures/fig1_tuning_time.png  median (line) and interquartile band (shade) over seeds of
                                  the training reward (left) and the evaluation reward sum
                                  (right) against cumulative tuning time (log-scale minutes),
                                  one row per environment
    figures/fig1_iterations.png   the same against training iterations
    figures/fig2_final.png        box plots of the final training reward and the final
                                  evaluation reward sum per method, one row per environment
    tables/success.md             seeds finishing without a rejected update or NaN (paper layout)
    tables/results.md             median final evaluation reward sum, IQR, rank per environment
    tables/tuning_time.md         total tuning time per unit (minutes)
    tables/aggregate.md, .json    per method IQM and mean of normalised scores and P(HC > method),
                                  with stratified-bootstrap 95% intervals (see experiments.stats)
    figures/aggregate.png         IQM and mean with their intervals per method
    figures/probability_of_improvement.png   P(HC > method) with intervals
    figures/performance_profile.png          fraction of runs above each normalised score
    report.md                     all tables and figure links in one page

Every PNG is written with deterministic bytes: no software version in its metadata, and
log-scale limits snapped to tick values (see `_log_limits`), so replotting the same study
gives the same files.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

from experiments import results as R
from experiments import stats as ST
from experiments.presets import ALL_METHODS as METHODS, SHORT

COLORS = {"hypercontroller": "tab:red", "random": "tab:blue", "pb2": "tab:green", "gp_ucb": "tab:purple",
          "hyperband": "tab:orange", "random_start": "tab:brown", "fixed": "tab:gray"}


def _matplotlib():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _grouped(units: list[R.UnitResult]) -> tuple[list[str], list[str], dict]:
    """(envs in order, methods in order, {(env, method): unit})."""
    envs = list(dict.fromkeys(u.meta["env"] for u in units))
    present = {u.meta["method"] for u in units}
    methods = [m for m in METHODS if m in present] + sorted(present - set(METHODS))
    return envs, methods, {(u.meta["env"], u.meta["method"]): u for u in units}


def _quartiles(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x: (S, ...) -> 25th, 50th, 75th percentiles over seeds, ignoring NaN."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        q = np.nanpercentile(np.asarray(x, np.float64), [25, 50, 75], axis=0)
    return q[0], q[1], q[2]


def cumulative_minutes(unit: R.UnitResult) -> np.ndarray:
    """(T,) cumulative tuning time in minutes after each iteration."""
    return np.cumsum(unit.tuner_time) / 60.0


def final_eval(unit: R.UnitResult) -> np.ndarray:
    """(S,) the evaluation reward sum at the final evaluation (NaN when none)."""
    if unit.eval_reward.shape[1] == 0:
        return np.full(unit.eval_reward.shape[0], np.nan)
    return unit.eval_reward[:, -1]


def final_train(unit: R.UnitResult) -> np.ndarray:
    """(S,) the training reward at the final iteration."""
    return unit.train_reward[:, -1]


def figure1(units, path, x_axis: str = "time") -> Path:
    """Median and IQR band of training reward and eval reward sum vs tuning time or iterations."""
    plt = _matplotlib()
    envs, methods, by = _grouped(units)
    fig, axes = plt.subplots(len(envs), 2, figsize=(11, 3.2 * len(envs)), squeeze=False)
    for row, env in enumerate(envs):
        for col, (metric, title) in enumerate((("train", "training reward"), ("eval", "evaluation reward sum"))):
            ax = axes[row, col]
            xs = []
            for m in methods:
                u = by.get((env, m))
                if u is None:
                    continue
                if metric == "train":
                    y = u.train_reward
                    idx = np.arange(u.train_reward.shape[1])
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
                lo, med, hi = _quartiles(y)
                ax.plot(x, med, color=COLORS.get(m), label=SHORT.get(m, m), lw=1.5)
                ax.fill_between(x, lo, hi, color=COLORS.get(m), alpha=0.2, lw=0)
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
    """Box plots over seeds of the final training reward and final eval reward sum."""
    plt = _matplotlib()
    envs, methods, by = _grouped(units)
    fig, axes = plt.subplots(len(envs), 2, figsize=(11, 3.2 * len(envs)), squeeze=False)
    for row, env in enumerate(envs):
        for col, (fn, title) in enumerate(((final_train, "final training reward"),
                                           (final_eval, "final evaluation reward sum"))):
            ax = axes[row, col]
            ms = [m for m in methods if (env, m) in by]
            data = [fn(by[(env, m)]) for m in ms]
            data = [d[np.isfinite(d)] for d in data]
            box = ax.boxplot(data, patch_artist=True, showfliers=True)
            ax.set_xticks(range(1, len(ms) + 1), [SHORT.get(m, m) for m in ms])
            for patch, m in zip(box["boxes"], ms):
                patch.set_facecolor(COLORS.get(m, "white"))
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
    out; Agg writes no timestamp."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    R.atomic_write_bytes(path, buf.getvalue())
    return Path(path)


# ---- tables ----------------------------------------------------------------------------


def _md(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _grid(units, cell) -> str:
    """Markdown table: a row per environment, a column per method, `cell(unit)` in each
    cell ('-' where the unit is missing)."""
    envs, methods, by = _grouped(units)
    body = [[env] + ["-" if by.get((env, m)) is None else cell(by[(env, m)]) for m in methods] for env in envs]
    return _md(["Env"] + [SHORT.get(m, m) for m in methods], body)


def success_table(units) -> str:
    """Rows: environments; columns: methods; cells: successful seeds / seeds."""
    return _grid(units, lambda u: f"{int(u.success.sum())}/{u.success.size}")


def ranks(medians: dict[str, float]) -> dict[str, int | None]:
    """Method -> rank by median (1 = highest) among the methods with a finite median; ties
    share the best rank; a NaN median (no evaluation) gets None, no rank."""
    vals = {m: float(v) for m, v in medians.items() if np.isfinite(v)}
    return {m: (1 + sum(1 for o in vals.values() if o > vals[m]) if m in vals else None) for m in medians}


def results_rows(units) -> list[dict]:
    """One dict per (env, method): median / IQR of the final eval reward sum and of the final
    training reward, rank of the eval median within the env, total tuning time."""
    envs, methods, by = _grouped(units)
    out = []
    for env in envs:
        stats = {}
        for m in methods:
            u = by.get((env, m))
            if u is None:
                continue
            q25, q50, q75 = _quartiles(final_eval(u)[:, None])
            t25, t50, t75 = _quartiles(final_train(u)[:, None])
            stats[m] = dict(env=env, method=m, eval_median=float(q50[0]), eval_q25=float(q25[0]),
                            eval_q75=float(q75[0]), train_median=float(t50[0]), train_q25=float(t25[0]),
                            train_q75=float(t75[0]), tuning_minutes=float(np.sum(u.tuner_time) / 60.0),
                            seeds=int(u.seeds.size), iterations=int(u.train_reward.shape[1]))
        rk = ranks({m: s["eval_median"] for m, s in stats.items()})
        for m, s in stats.items():
            s["rank"] = rk[m]
            out.append(s)
    return out


def results_table(units) -> str:
    """Median final eval reward sum [IQR] (rank) per environment (rows) and method (columns)."""
    envs, methods, _ = _grouped(units)
    rows = {(r["env"], r["method"]): r for r in results_rows(units)}
    body = []
    for env in envs:
        row = [env]
        for m in methods:
            r = rows.get((env, m))
            if r is None:
                row.append("-")
            elif r["rank"] is None:  # no finite final evaluation: not ranked
                row.append("–")
            else:
                row.append(f"{r['eval_median']:.4g} [{r['eval_q25']:.4g}, {r['eval_q75']:.4g}] ({r['rank']})")
        body.append(row)
    head = ["Env"] + [SHORT.get(m, m) for m in methods]
    return ("Median final evaluation reward sum over seeds, [25th, 75th percentile], (rank within the env, "
            "1 = best median); '-' no unit, '–' no final evaluation (not ranked).\n\n" + _md(head, body))


def tuning_time_table(units) -> str:
    """Total tuning time (minutes) per env and method: the x-extent of Figure 1."""
    return ("Tuning time in minutes (host ask+tell of all seeds of the unit, summed over iterations).\n\n"
            + _grid(units, lambda u: f"{np.sum(u.tuner_time) / 60.0:.3g}"))


# ---- aggregate statistics (experiments.stats) ------------------------------------------

BASELINE = "hypercontroller"


def study_scores(units) -> dict[str, dict[str, np.ndarray]]:
    """method -> env -> (S,) final evaluation reward sums, methods in table order."""
    envs, methods, by = _grouped(units)
    return {m: {env: final_eval(by[(env, m)]) for env in envs if (env, m) in by} for m in methods}


def _ci(value: float, ci, fmt: str = ".3f") -> str:
    if not np.isfinite(value):
        return "–"
    return f"{value:{fmt}} [{ci[0]:{fmt}}, {ci[1]:{fmt}}]"


def aggregate_table(summary: dict) -> str:
    """Markdown: the normalisation, then per method the IQM and mean of normalised scores and
    P(HC > method), each with its 95% interval, and which P(HC > method) are significant."""
    agg, vs = summary["aggregates"], summary["improvement"]["vs"]
    base = SHORT.get(summary["improvement"]["baseline"], summary["improvement"]["baseline"])
    boot = summary["bootstrap"]
    pct = f"{100 * boot['confidence']:g}%"
    if summary["normalisation"]["kind"] == "min-max over the study":
        norm = ("Normalised score, per environment: (x - low) / (high - low), where x is a run's final evaluation "
                "reward sum and low / high are the lowest / highest final evaluation reward sums of any run (every "
                "method, every seed) in that environment in this study. 0 is the study's worst run there and 1 its "
                "best, so environments with different reward scales can be pooled. These scores are relative to this "
                "study: adding a method or a seed can change them, and they are not comparable across studies. An "
                "environment where every run has the same score gives all its runs 0.5.")
    else:
        norm = ("Normalised score, per environment: (x - low) / (high - low) with the given reference scores "
                "(low, high) below; not clipped to [0, 1].")
    text = (norm + "\n\n"
            f"IQM: mean of the middle half of a method's runs pooled over environments "
            f"(`scipy.stats.trim_mean(x, 0.25)`: floor(n/4) runs dropped at each end). Mean: mean over environments of "
            f"the per-environment mean. P({base} > X): probability that a run of {base} ends with a higher final "
            f"evaluation than a run of X in the same environment (ties count 1/2), averaged over the environments "
            f"both have; significant when its interval excludes 0.5. [{pct} CI]: percentile intervals of a stratified "
            f"bootstrap (seeds resampled with replacement within each environment, {boot['reps']} replicates, "
            f"seed {boot['seed']}). Runs / envs: the runs with a final evaluation and the environments they are "
            f"from.\n\n")
    rows = []
    for m, a in agg.items():
        p = vs.get(m)
        if p is None:
            pcell, sig = "–", "–"
        else:
            pcell = _ci(p["p"], p["ci"], ".2f")
            verdicts = {"better": f"yes, {base} better", "worse": f"yes, {base} worse", "not significant": "no"}
            sig = verdicts.get(p["verdict"], "–")  # '–': no shared environment
        rows.append([SHORT.get(m, m), f"{a['runs']} / {len(a['envs'])}", _ci(a["iqm"], a["iqm_ci"]),
                     _ci(a["mean"], a["mean_ci"]), pcell, sig])
    text += _md(["Method", "Runs / envs", f"IQM [{pct} CI]", f"Mean [{pct} CI]", f"P({base} > X) [{pct} CI]",
                 "Significant"], rows)
    sig = [SHORT.get(m, m) for m, p in vs.items() if p["significant"]]
    insig = [SHORT.get(m, m) for m, p in vs.items() if p["envs"] and not p["significant"]]
    if vs:
        text += (f"\nIntervals of P({base} > X) that exclude 0.5 (significant): {', '.join(sig) or 'none'}. "
                 f"Including 0.5 (not significant): {', '.join(insig) or 'none'}.\n")
    else:
        text += f"\nNo {base} units in this study: no probability of improvement.\n"
    notes = [f"{SHORT.get(m, m)} has no score on {', '.join(a['missing_envs'])}: left out of its aggregates "
             f"(not comparable with methods measured on every environment)."
             for m, a in agg.items() if a["missing_envs"]]
    single = summary["single_seed"]
    if single:
        notes.append("One seed only in " + ", ".join(f"{e} / {SHORT.get(m, m)}" for e, m in single)
                     + ": the bootstrap cannot vary these, so the intervals understate the uncertainty.")
    if notes:
        text += "\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    ref = summary["normalisation"]["reference"]
    text += "\nReference scores (final evaluation reward sum):\n\n" + _md(
        ["Env", "low (0)", "high (1)"], [[env, f"{lo:.4g}", f"{hi:.4g}"] for env, (lo, hi) in ref.items()])
    return text


def _jsonable(x):
    """The summary with arrays as lists and NaN as null (strict JSON)."""
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, np.ndarray)):
        return [_jsonable(v) for v in (x.tolist() if isinstance(x, np.ndarray) else x)]
    if isinstance(x, (float, np.floating)):
        return float(x) if np.isfinite(x) else None
    if isinstance(x, np.integer):
        return int(x)
    return x


def aggregate_json(summary: dict) -> str:
    """The summary as strict JSON (NaN -> null), methods in table order."""
    return json.dumps(_jsonable(summary), indent=1, allow_nan=False) + "\n"


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
        _interval_rows(ax, [SHORT.get(m, m) for m in ms], [COLORS.get(m, "tab:cyan") for m in ms],
                       [agg[m][key] for m in ms], [agg[m][key + "_ci"] for m in ms], xlim)
        ax.set_title(f"{title} ({pct} CI)")
        ax.set_xlabel("normalised final evaluation score")
    fig.tight_layout()
    return _save(fig, path, plt)


def figure_improvement(summary: dict, path) -> Path:
    """P(baseline > method) per other method with its interval; dashed line at 0.5."""
    plt = _matplotlib()
    vs = summary["improvement"]["vs"]
    base = SHORT.get(summary["improvement"]["baseline"], summary["improvement"]["baseline"])
    ms = list(vs)
    fig, ax = plt.subplots(figsize=(6, 0.45 * max(len(ms), 1) + 1.4))
    if ms:
        _interval_rows(ax, [SHORT.get(m, m) for m in ms], [COLORS.get(m, "tab:cyan") for m in ms],
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
        ax.plot(taus, prof["fraction"], color=COLORS.get(m), label=SHORT.get(m, m), lw=1.5)
        ax.fill_between(taus, prof["lower"], prof["upper"], color=COLORS.get(m), alpha=0.15, lw=0)
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


def figure_lineage(unit: R.UnitResult, path) -> Path:
    """A population unit's hyperparameter trajectories: one panel per hyperparameter,
    every agent's value in effect at each iteration (a step line), and every copy marked:
    at a population step where agent i took agent j's network, an arrow from j's value
    before the step to i's new value (explored from j's), coloured as agent i."""
    plt = _matplotlib()
    names = unit.meta.get("hparam_names", [f"h{k}" for k in range(unit.hparams.shape[2])])
    S, T, h = unit.hparams.shape
    fig, axes = plt.subplots(h, 1, figsize=(10, 2.4 * h), sharex=True, squeeze=False)
    colors = plt.get_cmap("tab20")(np.linspace(0, 1, max(S, 2)))
    x = np.arange(1, T + 1)
    log = {n: entry.get("scale") == "log" for n, entry in
           ((e["name"], e) for e in unit.meta.get("config", {}).get("space", []))}
    for k, ax in enumerate(axes[:, 0]):
        for i in range(S):
            ax.step(x, unit.hparams[i, :, k], where="post", color=colors[i], lw=1.0, alpha=0.8)
        for col, it in enumerate(unit.lineage_iteration):
            it = int(it)
            if it >= T:
                continue
            for i in np.nonzero(unit.lineage_parent[:, col] != np.arange(S))[0]:
                donor = int(unit.lineage_parent[i, col])
                ax.annotate("", xy=(it + 1, unit.hparams[i, it, k]), xytext=(it, unit.hparams[donor, it - 1, k]),
                            arrowprops=dict(arrowstyle="->", color=colors[i], lw=0.8))
                ax.plot([it + 1], [unit.hparams[i, it, k]], "o", ms=3, color=colors[i])
        if log.get(names[k]):
            ax.set_yscale("log")
        ax.set_ylabel(names[k])
        ax.grid(alpha=0.3)
    copies = int(np.sum(unit.lineage_parent != np.arange(S)[:, None])) if unit.lineage_parent.size else 0
    axes[0, 0].set_title(f"{unit.meta['env']} / {unit.meta['method']}: {S} agents, {len(unit.lineage_iteration)} "
                         f"population steps, {copies} copies\n(an arrow: from the donor's value to the copy's new "
                         f"value)", fontsize=10)
    axes[-1, 0].set_xlabel("iteration")
    fig.tight_layout()
    return _save(fig, path, plt)


def plot(out: str | os.PathLike, units: list[R.UnitResult] | None = None, reps: int = ST.REPS,
         seed: int = 0) -> dict[str, Path]:
    """Write every figure and table of a study directory; returns name -> path.
    units: the directory's units when the caller has loaded them already (else read here);
    reps, seed: bootstrap replicates and seed of the aggregate statistics."""
    out = Path(out)
    store = R.StudyDir(out)
    units = store.units() if units is None else units
    if not units:
        raise ValueError(f"plot: no finished units in {store.units_dir}; run `hcjax run --out {out}` first")
    paths = {
        "fig1_tuning_time": figure1(units, out / "figures" / "fig1_tuning_time.png", "time"),
        "fig1_iterations": figure1(units, out / "figures" / "fig1_iterations.png", "iterations"),
        "fig2_final": figure2(units, out / "figures" / "fig2_final.png"),
    }
    summary = ST.summarise(study_scores(units), baseline=BASELINE, reps=reps, seed=seed)
    paths["aggregate_figure"] = figure_aggregate(summary, out / "figures" / "aggregate.png")
    paths["probability_of_improvement"] = figure_improvement(summary, out / "figures"
                                                             / "probability_of_improvement.png")
    paths["performance_profile"] = figure_profile(summary, out / "figures" / "performance_profile.png")
    for u in units:
        if u.lineage_iteration.size:
            name = f"lineage_{R.unit_name(u.meta['env'], u.meta['method'])}"
            paths[name] = figure_lineage(u, out / "figures" / f"{name}.png")
    paths["aggregate_json"] = out / "tables" / "aggregate.json"
    R.atomic_write_text(paths["aggregate_json"], aggregate_json(summary))
    tables = {"success": "Seeds that finished without a rejected update or NaN (successful / run).\n\n"
                         + success_table(units),
              "results": results_table(units), "tuning_time": tuning_time_table(units),
              "aggregate": aggregate_table(summary)}
    for name, text in tables.items():
        paths[name] = out / "tables" / f"{name}.md"
        R.atomic_write_text(paths[name], text)
    manifest = R.read_manifest(out) or {}
    head = f"# Study `{manifest.get('config', {}).get('name', out.name)}`\n\n"
    dev = manifest.get("devices", {})
    if dev:
        head += f"Devices: {dev.get('backend')} x{dev.get('local_device_count')} ({dev.get('device_kind')}); " \
                f"commit {manifest.get('git', {}).get('commit')}.\n\n"
    report = head + "".join(f"## {k}\n\n{v}\n" for k, v in tables.items())
    report += "The aggregate statistics as JSON: [tables/aggregate.json](tables/aggregate.json).\n\n"
    report += "".join(f"![{k}](figures/{Path(p).name})\n\n" for k, p in paths.items() if str(p).endswith(".png"))
    paths["report"] = out / "report.md"
    R.atomic_write_text(paths["report"], report)
    return paths
