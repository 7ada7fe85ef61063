"""The tables of a study (Markdown, and the aggregate statistics as JSON).

    success       seeds finishing without a rejected update or NaN (paper layout)
    results       median final evaluation reward sum, IQR, rank per environment
    tuning_time   total tuning time per unit (minutes)
    aggregate     per method IQM and mean of normalised scores and P(HC > method), with
                  stratified-bootstrap 95% intervals (see experiments.reporting.stats)
"""
from __future__ import annotations

import json

import numpy as np

from experiments.reporting.views import env_names, final_eval, final_train, grouped, measured_nothing, quartiles
from experiments.study.methods import label


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table of `header` and `rows` (lists of cell texts)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def method_legend(methods) -> str:
    """One line naming the methods behind the tables' short labels."""
    return "Methods: " + ", ".join(f"{label(m)} = {m}" for m in methods) + "."


def _grid(units, cell) -> str:
    """Markdown table: a row per environment (named as it ran, `views.ran_as`), a column per
    method, `cell(unit)` in each cell ('no unit' where the unit is missing)."""
    envs, methods, by = grouped(units)
    names = env_names(units)
    body = [[names[env]] + ["no unit" if by.get((env, m)) is None else cell(by[(env, m)]) for m in methods]
            for env in envs]
    return markdown_table(["Env"] + [label(m) for m in methods], body)


def success_table(units) -> str:
    """Rows: environments; columns: methods; cells: successful seeds / seeds."""
    return ("Seeds that finished without a rejected update or NaN (successful / run).\n\n"
            + _grid(units, lambda u: f"{int(u.success.sum())}/{u.success.size}"))


def ranks(medians: dict[str, float]) -> dict[str, int | None]:
    """Method -> rank by median (1 = highest) among the methods with a finite median; ties
    share the best rank; a NaN median (no evaluation) gets None, no rank."""
    vals = {m: float(v) for m, v in medians.items() if np.isfinite(v)}
    return {m: (1 + sum(1 for o in vals.values() if o > vals[m]) if m in vals else None) for m in medians}


def results_rows(units) -> list[dict]:
    """One dict per (env, method): median / IQR of the final eval reward sum and of the final
    training reward, rank of the eval median within the env, total tuning time, evaluations
    run (a unit that evaluated but whose final evaluations are all NaN is no rank: 'evaluations
    all NaN' in the table)."""
    envs, methods, by = grouped(units)
    out = []
    for env in envs:
        stats = {}
        for m in methods:
            u = by.get((env, m))
            if u is None:
                continue
            q25, q50, q75 = quartiles(final_eval(u)[:, None])
            t25, t50, t75 = quartiles(final_train(u)[:, None])
            stats[m] = dict(env=env, method=m, eval_median=float(q50[0]), eval_q25=float(q25[0]),
                            eval_q75=float(q75[0]), train_median=float(t50[0]), train_q25=float(t25[0]),
                            train_q75=float(t75[0]), tuning_minutes=float(np.sum(u.tuner_time) / 60.0),
                            seeds=int(u.seeds.size), iterations=int(u.train_reward.shape[1]),
                            evaluations=int(u.eval_reward.shape[1]))
        rk = ranks({m: s["eval_median"] for m, s in stats.items()})
        for m, s in stats.items():
            s["rank"] = rk[m]
            out.append(s)
    return out


def results_table(units) -> str:
    """Median final eval reward sum [IQR] (rank) per environment (rows) and method (columns)."""
    envs, methods, _ = grouped(units)
    names = env_names(units)
    rows = {(r["env"], r["method"]): r for r in results_rows(units)}
    body = []
    for env in envs:
        row = [names[env]]
        for m in methods:
            r = rows.get((env, m))
            if r is None:
                row.append("no unit")
            elif r["rank"] is None:  # no finite final evaluation: not ranked
                row.append("evaluations all NaN" if r["evaluations"] else "no final evaluation")
            else:
                row.append(f"{r['eval_median']:.4g} [{r['eval_q25']:.4g}, {r['eval_q75']:.4g}] ({r['rank']})")
        body.append(row)
    head = ["Env"] + [label(m) for m in methods]
    return ("Median final evaluation reward sum over seeds, [25th, 75th percentile], (rank within the env, "
            "1 = best median).\n\n" + markdown_table(head, body))


def tuning_time_table(units) -> str:
    """Total tuning time (minutes) per env and method: the x-extent of Figure 1."""
    return ("Tuning time: the minutes the tuner itself took (its ask and tell for all seeds of the unit, replayed "
            "on the host CPU and summed over iterations; training excluded).\n\n"
            + _grid(units, lambda u: f"{np.sum(u.tuner_time) / 60.0:.3g}"))


def _ci(value: float, ci, fmt: str = ".3f") -> str:
    if not np.isfinite(value):
        return "n/a"
    return f"{value:{fmt}} [{ci[0]:{fmt}}, {ci[1]:{fmt}}]"


def probability_text(p: float, ci) -> str:
    """'P [lo, hi]' with two decimals, or three where a number other than 0.5 would show
    as 0.50 (so the verdict against 0.5 and the numbers agree); 'n/a' for NaN."""
    close = any(f"{x:.2f}" == "0.50" and x != 0.5 for x in (p, *ci))
    return _ci(p, ci, ".3f" if close else ".2f")


def aggregate_table(summary: dict) -> str:
    """Markdown: the normalisation, then per method the IQM and mean of normalised scores and
    P(HC > method), each with its 95% interval, and which P(HC > method) are significant."""
    agg, vs = summary["aggregates"], summary["improvement"]["vs"]
    base = label(summary["improvement"]["baseline"])
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
            f"both have; significant when the exact stratified permutation test of it gives p <= 0.05 "
            f"(hcjax.calls; 'too few seeds' where no outcome of groups this small could). [{pct} CI]: percentile "
            f"intervals of a stratified bootstrap (seeds resampled with replacement within each environment, "
            f"{boot['reps']} replicates, "
            f"seed {boot['seed']}). Runs / envs: the runs with a final evaluation and the environments they are "
            f"from.\n\n")
    rows = []
    for m, a in agg.items():
        p = vs.get(m)
        if p is None:
            pcell, sig = "n/a", "n/a"
        else:
            pcell = probability_text(p["p"], p["ci"])
            verdicts = {"better": f"yes, {base} better", "worse": f"yes, {base} worse", "not significant": "no",
                        "not testable": "not testable (one run)", "too few seeds": "too few seeds to tell"}
            sig = verdicts.get(p["verdict"], "no shared environment")
        rows.append([label(m), f"{a['runs']} / {len(a['envs'])}", _ci(a["iqm"], a["iqm_ci"]),
                     _ci(a["mean"], a["mean_ci"]), pcell, sig])
    text += method_legend(list(agg)) + "\n\n"
    text += markdown_table(["Method", "Runs / envs", f"IQM [{pct} CI]", f"Mean [{pct} CI]", f"P({base} > X) [{pct} CI]",
                 "Significant"], rows)
    sig = [label(m) for m, p in vs.items() if p["significant"]]
    insig = [label(m) for m, p in vs.items() if p["verdict"] == "not significant"]
    untestable = [label(m) for m, p in vs.items() if p["verdict"] == "not testable"]
    few = [label(m) for m, p in vs.items() if p["verdict"] == "too few seeds"]
    if vs:
        text += (f"\nSignificant (the exact test's p <= 0.05): {', '.join(sig) or 'none'}. "
                 f"Not significant: {', '.join(insig) or 'none'}.\n")
        if few:
            text += f"Too few seeds to tell (no outcome could reach p <= 0.05): {', '.join(few)}.\n"
        if untestable:
            text += (f"Not testable (a method has one run in an environment: no verdict): "
                     f"{', '.join(untestable)}.\n")
    else:
        text += (f"\nNo {base} ({summary['improvement']['baseline']}) units in this study: there is no claim "
                 f"to test, so no probability of improvement.\n")
    notes = [f"{label(m)} has no score on {', '.join(a['missing_envs'])}: left out of its aggregates "
             f"(not comparable with methods measured on every environment)."
             for m, a in agg.items() if a["missing_envs"]]
    single = summary["single_seed"]
    if single:
        notes.append(one_run_warning(single))
    if notes:
        text += "\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    ref = summary["normalisation"]["reference"]
    names = summary.get("env_names", {})
    text += "\nReference scores (final evaluation reward sum):\n\n" + markdown_table(
        ["Env", "low (0)", "high (1)"],
        [[names.get(env, env), f"{lo:.4g}", f"{hi:.4g}"] for env, (lo, hi) in ref.items()])
    return text


def one_run_warning(single: list) -> str:
    """The note on (env, method) strata with one run."""
    return ("One seed only in " + ", ".join(f"{e} / {label(m)}" for e, m in single)
            + ": the bootstrap cannot vary these, so their intervals understate the uncertainty and no verdict "
              "is drawn where they are compared (not testable).")


def strict_json(x):
    """The summary with arrays as lists and NaN as null (strict JSON)."""
    if isinstance(x, dict):
        return {str(k): strict_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, np.ndarray)):
        return [strict_json(v) for v in (x.tolist() if isinstance(x, np.ndarray) else x)]
    if isinstance(x, (float, np.floating)):
        return float(x) if np.isfinite(x) else None
    if isinstance(x, np.integer):
        return int(x)
    return x


def aggregate_json(summary: dict) -> str:
    """The summary as strict JSON (NaN -> null), methods in table order."""
    return json.dumps(strict_json(summary), indent=1, allow_nan=False) + "\n"


def measurement_notes(units) -> str:
    """Markdown naming every unit whose evaluations measured nothing (`views.measured_nothing`),
    '' when there is none. Such a unit is left out of every comparison (`views.study_scores`)."""
    names = env_names(units)
    lines = [f"- {names[u.meta['env']]} / {label(u.meta['method'])}: {text}\n"
             for u in units if (text := measured_nothing(u))]
    if not lines:
        return ""
    return ("Evaluations that measured nothing: these units are compared with nothing (not measured, never a "
            "tie). Evaluate several episodes (ppo.eval_episodes), with the sampled policy "
            "(ppo.eval_policy = 'sampled') or for more steps (ppo.eval_steps).\n\n" + "".join(lines))


def summary(units) -> str:
    """The results and success tables (Markdown) of a study's units, then the methods' legend
    and the units whose evaluations measured nothing."""
    text = results_table(units) + "\n" + success_table(units) + "\n" + method_legend(grouped(units)[1]) + "\n"
    notes = measurement_notes(units)
    return text + ("\n" + notes if notes else "")
