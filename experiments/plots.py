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
    report.md                     all tables and figure links in one page
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from experiments import results as R
from experiments.presets import METHODS, SHORT

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
                lo, med, hi = _quartiles(y)
                ax.plot(x, med, color=COLORS.get(m), label=SHORT.get(m, m), lw=1.5)
                ax.fill_between(x, lo, hi, color=COLORS.get(m), alpha=0.2, lw=0)
            if x_axis == "time":
                ax.set_xscale("log")
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


def _save(fig, path, plt) -> Path:
    """Save a figure atomically as PNG."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
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


def ranks(medians: dict[str, float]) -> dict[str, int]:
    """Method -> rank by median (1 = highest); NaN ranks last; ties share the best rank."""
    vals = {m: (v if np.isfinite(v) else -np.inf) for m, v in medians.items()}
    return {m: 1 + sum(1 for o in vals.values() if o > v) for m, v in vals.items()}


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
            row.append("-" if r is None else
                       f"{r['eval_median']:.4g} [{r['eval_q25']:.4g}, {r['eval_q75']:.4g}] ({r['rank']})")
        body.append(row)
    head = ["Env"] + [SHORT.get(m, m) for m in methods]
    return ("Median final evaluation reward sum over seeds, [25th, 75th percentile], (rank within the env, "
            "1 = best median).\n\n" + _md(head, body))


def tuning_time_table(units) -> str:
    """Total tuning time (minutes) per env and method: the x-extent of Figure 1."""
    return ("Tuning time in minutes (host ask+tell of all seeds of the unit, summed over iterations).\n\n"
            + _grid(units, lambda u: f"{np.sum(u.tuner_time) / 60.0:.3g}"))


def plot(out: str | os.PathLike) -> dict[str, Path]:
    """Write every figure and table of a study directory; returns name -> path."""
    out = Path(out)
    units = R.load_units(out)
    if not units:
        raise ValueError(f"plot: no finished units in {out / R.UNITS}; run `hcjax run --out {out}` first")
    paths = {
        "fig1_tuning_time": figure1(units, out / "figures" / "fig1_tuning_time.png", "time"),
        "fig1_iterations": figure1(units, out / "figures" / "fig1_iterations.png", "iterations"),
        "fig2_final": figure2(units, out / "figures" / "fig2_final.png"),
    }
    tables = {"success": "Seeds that finished without a rejected update or NaN (successful / run).\n\n"
                         + success_table(units),
              "results": results_table(units), "tuning_time": tuning_time_table(units)}
    for name, text in tables.items():
        paths[name] = out / "tables" / f"{name}.md"
        R.atomic_write_text(paths[name], text)
    manifest = R.read_manifest(out) or {}
    head = f"# Study `{manifest.get('config', {}).get('name', out.name)}`\n\n"
    dev = manifest.get("devices", {})
    if dev:
        head += f"Devices: {dev.get('backend')} x{dev.get('local_device_count')} ({dev.get('device_kind')}); " \
                f"commit {manifest.get('git', {}).get('commit')}.\n\n"
    stalled = R.stalled_units(out)
    if stalled:
        head += ("Units skipped after repeated XLA:CPU stalls (empty cells below): "
                 + ", ".join(f"`{u}`" for u in stalled) + ".\n\n")
    report = head + "".join(f"## {k}\n\n{v}\n" for k, v in tables.items())
    report += "".join(f"![{k}](figures/{Path(p).name})\n\n" for k, p in paths.items() if str(p).endswith(".png"))
    paths["report"] = out / "report.md"
    R.atomic_write_text(paths["report"], report)
    return paths
