"""Our verdict beside ARLBench's released runs (Becktepe et al., 2024), task by task.

    rows = side_by_side(units, verdict)     # env -> rows: ARLBench's incumbents, then ours
    markdown(rows)                          # the tables the verdict and docs/results.md show

RELEASED holds, per task, the final evaluation (the mean return of 128 deterministic episodes
after the whole budget) of ARLBench's incumbents for each of its optimisers' 5 optimisation
seeds, read from automl/arlbench, branch `experiments` (commit 1c67583),
results_combined/optimizer_runs/<optimiser>/<task>_ppo.csv: per optimisation seed, the best
mean over its 3 training seeds of the configurations it tried (random search `rs`: 32; `smac`:
32 trials; `smac_mf`: those run at the full budget; `pbt`: the final population of 32, its 10th
interval). They are scored on the seeds that chose them (ARLBench releases no test-seed runs):
optimistic, as our incumbents are on the tuning seeds. `random_median` is the median over its
random search's 160 configurations (5 x 32) of their 3-seed means: what a random configuration
scores. ARLBench never ran its own default configuration.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from experiments.reporting.tables import markdown_table
from experiments.reporting.verdict_text import BEATS_DEFAULT, BEATS_SWEEP, FRAMES, SECONDS, SHARE, cell
from experiments.reporting.views import final_eval
from experiments.study.methods import label
from experiments.study.protocol import SWEEP, TEST, kind, started_from

SOURCE = "automl/arlbench, branch experiments, commit 1c675836707725fce270baa0c4ae42e21ea77238"
OPTIMISERS = {"rs": "random search", "smac": "SMAC", "smac_mf": "SMAC (multi-fidelity)", "pbt": "PBT"}


@dataclasses.dataclass(frozen=True)
class Released:
    """One task of ARLBench's released runs: its file prefix, its budget in environment steps,
    per optimiser the 5 optimisation seeds' incumbent scores, and a random configuration's median."""

    task: str
    steps: int
    incumbents: dict
    random_median: float


RELEASED = {  # our environment label -> ARLBench's released numbers (module docstring)
    "CartPole-v1": Released("cc_cartpole", 100000, {
        "rs": [500.0, 500.0, 500.0, 500.0, 500.0], "smac": [500.0, 500.0, 500.0, 500.0, 500.0],
        "smac_mf": [500.0, 500.0, 500.0, 500.0, 500.0], "pbt": [498.53, 500.0, 500.0, 500.0, 500.0]}, 373.41),
    "Pendulum-v1": Released("cc_pendulum", 100000, {
        "rs": [-905.86, -689.19, -886.74, -932.25, -952.3], "smac": [-217.97, -279.08, -957.03, -853.4, -1138.6],
        "smac_mf": [-557.03, -704.94, -769.8, -1071.0, -418.65],
        "pbt": [-997.0, -700.96, -612.25, -802.9, -563.84]}, -1215.7),
    "MountainCarContinuous-v0": Released("cc_continuous_mountain_car", 20000, {
        "rs": [98.433, 97.39, 95.667, 96.343, 96.123], "smac": [97.985, 98.543, 89.643, 98.404, 98.664],
        "smac_mf": [92.79, 97.05, 98.357, 96.7, 95.692], "pbt": [97.311, 97.609, 98.394, 91.866, 91.876]}, -0.0035339),
    "MountainCar-v0": Released("cc_mountain_car", 1000000, {
        "rs": [-138.27, -170.06, -113.71, -199.85, -179.03], "smac": [-200.0, -172.38, -200.0, -200.0, -198.39],
        "smac_mf": [-200.0, -200.0, -200.0, -119.23, -181.2],
        "pbt": [-113.47, -193.97, -181.05, -195.53, -149.73]}, -200.0),
    "Acrobot-v1": Released("cc_acrobot", 1000000, {
        "rs": [-76.823, -75.602, -73.339, -76.245, -78.779], "smac": [-77.034, -77.341, -66.596, -76.062, -71.341],
        "smac_mf": [-69.776, -73.805, -72.727, -76.742, -76.016],
        "pbt": [-72.977, -79.214, -75.427, -78.885, -75.164]}, -87.133),
    "xminigrid/MiniGrid-Unlock": Released("minigrid_unlock", 1000000, {
        "rs": [0.7205, 0.058366, 0.59091, 0.62698, 0.32384], "smac": [0.21285, 0.0076416, 0.85046, 0.80682, 0.35197],
        "smac_mf": [0.50999, 0.099007, 0.14711, 0.72769, 0.72517],
        "pbt": [0.41888, 0.027962, 0.010229, 0.0, 0.2984]}, 0.0),
    "xminigrid/MiniGrid-FourRooms": Released("minigrid_four_rooms", 1000000, {
        "rs": [0.11438, 0.075008, 0.11658, 0.084534, 0.10875], "smac": [0.12813, 0.12555, 0.14421, 0.14482, 0.12374],
        "smac_mf": [0.086201, 0.094247, 0.11748, 0.10185, 0.11588],
        "pbt": [0.080146, 0.079724, 0.032987, 0.087068, 0.066937]}, 0.013397),
    "halfcheetah": Released("brax_halfcheetah", 50000000, {
        "rs": [6991.8, 8029.6, 9287.6, 9480.6, 6434.7], "smac": [4803.0, 11269.0, 7554.6, 4698.8, 7436.0],
        "smac_mf": [8034.6, 6725.4, 7458.8, 10993.0, 6960.2],
        "pbt": [2585.2, 1298.2, 1135.7, 3424.4, 47.593]}, -8.9429),
}


def spread(values) -> str:
    """'median [min, max]' of a few numbers (4 significant digits), '' for none."""
    v = np.asarray([x for x in values if np.isfinite(x)], np.float64)
    if not v.size:
        return ""
    return f"{np.median(v):.4g} [{v.min():.4g}, {v.max():.4g}]" if v.size > 1 else f"{v[0]:.4g}"


def _mean(u) -> float:
    scores = final_eval(u)
    scores = scores[np.isfinite(scores)]
    return float(scores.mean()) if scores.size else float("nan")


def _draws(sweep_test, n_draws: int) -> list[float]:
    """Each draw's incumbent's mean final evaluation on the test seeds (sweep@test's rows: incumbent
    j // n on test seed j % n)."""
    scores = final_eval(sweep_test)
    return [float(np.nanmean(part)) for part in np.array_split(scores, n_draws)]


def budget(units, env: str) -> int:
    """The environment steps of one run of the study's default on `env` (its most frames per run)."""
    runs = [np.asarray(u.frames, np.int64).sum(axis=1).max() for u in units
            if u.meta["env"] == env and u.meta["method"] == "fixed"]
    return int(max(runs, default=0))


def side_by_side(units, verdict) -> dict[str, list[list[str]]]:
    """env -> the rows of its table (`HEADER`): ARLBench's incumbents per optimiser and a random
    configuration's median (their tuning seeds), then our default, our sweep's incumbents (median
    [min, max] over the draws, tuning and test seeds) and every online method (the mean of its runs,
    tuning and test seeds, and the verdict's test-seed cells), for the environments of `units` that
    RELEASED has."""
    by = {(u.meta["env"], u.meta["method"]): u for u in units}
    cells = {(r["env"], r["method"], r["comparison"]): r for r in verdict.rows if r["phase"] == "test"}
    out = {}
    for env in dict.fromkeys(u.meta["env"] for u in units):
        if env not in RELEASED:
            continue
        released = RELEASED[env]
        rows = [[f"ARLBench {OPTIMISERS[o]} incumbent (5 optimisation seeds)", spread(v), "", "", "", "", "", ""]
                for o, v in released.incumbents.items()]
        rows.append(["ARLBench random configuration (median of 160)", f"{released.random_median:.4g}",
                     "", "", "", "", "", ""])
        if (env, "fixed") in by:
            rows.append(["our default", spread([_mean(by[(env, "fixed")])]),
                         spread([_mean(by[(env, "fixed" + TEST)])]) if (env, "fixed" + TEST) in by else "",
                         "", "", "", "", ""])
        sweep_test = by.get((env, SWEEP + TEST))
        if sweep_test is not None:
            chosen = sweep_test.meta.get("incumbents") or [sweep_test.meta.get("incumbent", {})]
            draws = f"{len(chosen)} draw" + ("s" if len(chosen) > 1 else "")
            rows.append([f"our sweep incumbent ({draws})", spread([c.get("tuning_mean", np.nan)
                                                                               for c in chosen]),
                         spread(_draws(sweep_test, len(chosen))),
                         cell(cells.get((env, SWEEP, BEATS_DEFAULT))), "", "", "", ""])
        for (e, method), u in by.items():
            k = kind(method)
            if e != env or k.phase != "tuning" or k.base in ("fixed", SWEEP) or started_from(k.base):
                continue
            test = by.get((env, method + TEST))
            rows.append([label(method), spread([_mean(u)]), spread([_mean(test)]) if test is not None else "",
                         *(cell(cells.get((env, method, c))) for c in (BEATS_DEFAULT, BEATS_SWEEP, SHARE, FRAMES,
                                                                       SECONDS))])
        out[env] = rows
    return out


def budgets(units) -> dict[str, int]:
    """env -> steps of one of our runs (`budget`), for the environments RELEASED has."""
    return {env: budget(units, env) for env in dict.fromkeys(u.meta["env"] for u in units) if env in RELEASED}


HEADER = ["", "score, tuning seeds", "score, test seeds", "P(> default)", "P(> sweep incumbent)",
          "share of the sweep's gain", "frames / sweep", "seconds / sweep"]


def markdown(tables: dict[str, list[list[str]]], heading: str, ours: dict[str, int] | None = None) -> str:
    """The side-by-side section: one table per environment under `heading` (ours: env -> the
    steps of one of our runs, named beside ARLBench's budget)."""
    if not tables:
        return ""
    text = (f"{heading}\n\nARLBench's numbers ({SOURCE}) are the final evaluation of each optimiser's incumbent "
            f"on the seeds that chose it (its released runs have no test seeds), median [min, max] over its 5 "
            f"optimisation seeds; ours: mean final evaluation (128 deterministic episodes), the sweep's "
            f"incumbents median [min, max] over its draws.\n\n")
    for env, rows in tables.items():
        steps, mine = RELEASED[env].steps, (ours or {}).get(env)
        other = f"; ours: {mine:,}, another setting: compare with care" if mine and abs(mine - steps) > 0.05 * steps \
            else f"; ours: {mine:,}" if mine else ""
        text += f"**{env}** (ARLBench's budget: {steps:,} steps{other})\n\n" + markdown_table(HEADER, rows) + "\n"
    return text
