"""What the verdict's calls must be read with (experiments.reporting.verdict): the runs that
collapsed, and the methods whose calls on the tuning seeds and on the test seeds point
opposite ways.

- A collapsed run: a run of a method (online, replayed, or the sweep's incumbent) that ended
  below the worst run of the default and of every poor default in its environment and phase
  (`hcjax.calls.collapsed`). P(> default) is a rank statistic: one run at the task's floor moves
  it by 1/n at most, so it can say "better" while the means are equal. Each is named with its
  seed and final hyperparameters in the verdict's table of collapsed runs, and counted in its
  method's sentence beside how many runs drawn as the default's are would fall below the
  default's worst by chance (`hcjax.calls.by_chance`: about one for equal groups; fewer where a
  poor default lowers the floor, so it is an upper bound there).
- A disagreement: a method called better (or worse) than the default on one seed set while
  its P(> default) on the other is at or on the other side of 1/2. The verdict's reference row
  (the default against itself, test seeds against tuning seeds) says how far the seeds alone
  move that number.
"""
from __future__ import annotations

from experiments.reporting.tables import markdown_table
from experiments.reporting.views import ALL
from experiments.study.methods import label
from experiments.study.protocol import POOR
from hcjax import calls
from hcjax.stats import finite


def collapsed_runs(strata: dict, phase: str, default: str) -> list[dict]:
    """strata: role -> env -> verdict.Stratum of one phase (`verdict.roles`); default: the
    default's role. -> [{'phase', 'env', 'method', 'seed', 'score', 'floor', 'hyperparameters',
    'index'}], per role and environment, for every role but the default and the poor defaults."""
    references = [default] + [role for role in strata if role.startswith(POOR)]
    out = []
    for role, side in strata.items():
        if role in references:
            continue
        for env, s in side.items():
            floors = [strata[ref][env].scores for ref in references
                      if env in strata.get(ref, {}) and not strata[ref][env].flag]
            if s.flag or not floors:
                continue
            out += [{"phase": phase, "env": env, "method": role, **run}
                    for run in calls.collapsed(s.scores, floors, s.seeds, s.hparams)]
    return out


def count_collapses(rows: list[dict], collapsed: list[dict], comparison: str, strata: dict, default: str) -> None:
    """Set 'collapsed' on every `comparison` row (P(> default)): how many of the method's runs in
    the row's environments collapsed, and 'chance': how many would by chance if they were drawn
    as the default's (`hcjax.calls.by_chance`), None where a poor default's worst run is below
    the default's (then the floor is lower and the chance smaller, not known). strata: phase ->
    role -> env -> verdict.Stratum."""
    for row in rows:
        if row["comparison"] != comparison or row["kind"] != "probability":
            continue
        row["collapsed"] = sum(1 for c in collapsed if (c["phase"], c["method"]) == (row["phase"], row["method"])
                               and c["env"] in row["envs"])
        roles = strata.get(row["phase"], {})
        if row["method"] not in roles or default not in roles:
            continue
        sizes, poor_below = [], False
        for env in row["envs"]:
            base = finite(roles[default][env].scores)
            poor = [finite(roles[p][env].scores) for p in roles if p.startswith(POOR) and env in roles[p]]
            poor_below |= any(p.size and p.min() < base.min() for p in poor)
            sizes.append((finite(roles[row["method"]][env].scores).size, base.size))
        row["chance"] = None if poor_below else calls.by_chance(sizes)


def collapse_clause(row: dict, collapsed: list[dict]) -> str:
    """'1 of 40 runs collapsed (CartPole-v1 seed 107: 9.4, learning_rate 0.01)' for a P(>
    default) row, '' without a collapse."""
    mine = [c for c in collapsed if (c["phase"], c["method"]) == (row["phase"], row["method"])
            and c["env"] in row["envs"]]
    several = len(row["envs"]) > 1
    return calls.collapse_text(mine, row.get("runs", 0), named=lambda c: calls.run_text(
        c, f"{c['env']} seed" if several else "seed"), chance=row.get("chance"))


def disagreements(rows: list[dict], comparison: str, reference: str) -> list[str]:
    """One line per method whose `comparison` (P(> default)) over all environments is called
    better or worse on one seed set while the other's estimate is at or across 1/2; `reference`:
    the method of the reference row (the default against itself), quoted beside."""
    by = {(r["phase"], r["method"]): r for r in rows
          if r["env"] == ALL and r["comparison"] == comparison and r["kind"] == "probability"}
    ref = by.get(("test", reference))
    seeds = f"; the default against itself across the two seed sets: {ref['estimate']:.2f}" if ref else ""
    out = []
    for (phase, method), test in by.items():
        tuning = by.get(("tuning", method))
        if phase != "test" or tuning is None:
            continue
        if any(_across(a, b) for a, b in ((test, tuning), (tuning, test))):
            out.append(f"{label(method)}: {_said(test)} on the test seeds but {_said(tuning)} on the tuning seeds: "
                       f"the two seed sets point opposite ways, so neither call is more than its seeds{seeds}")
    return out


def _across(called: dict, other: dict) -> bool:
    """`called` is better or worse and `other`'s estimate is at 1/2 or on the other side."""
    if called["status"] == "better":
        return other["estimate"] <= 0.5
    return called["status"] == "worse" and other["estimate"] >= 0.5


def _said(row: dict) -> str:
    return f"{row.get('call', row['status'])} ({row['estimate']:.2f})"


def collapse_table(collapsed: list[dict], method_label) -> str:
    """Markdown: one row per collapsed run (phase, environment, method, seed, final evaluation,
    the worst reference run, final hyperparameters); '' without one."""
    if not collapsed:
        return ""
    body = [[c["phase"], c["env"], method_label(c["method"]), str(c["seed"]), f"{c['score']:.4g}", f"{c['floor']:.4g}",
             ", ".join(f"{k} {calls.value_text(v)}" for k, v in c["hyperparameters"].items()) or "n/a"]
            for c in collapsed]
    return markdown_table(["Seeds", "Environment", "Method", "Seed", "Final evaluation",
                           "Worst default or poor default", "Final hyperparameters"], body)
