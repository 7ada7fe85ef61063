"""The verdict in words: one plain sentence per method and the Markdown page, from the rows of
experiments.reporting.verdict (one dict per phase, environment or ALL, method, comparison)."""
from __future__ import annotations

import numpy as np

from experiments.reporting import caveats
from experiments.reporting.tables import markdown_table, probability_text
from experiments.reporting.views import ALL
from experiments.study.methods import label
from experiments.study.protocol import POOR, REPLAY, SWEEP
from hcjax.calls import p_text, probability_number

# The comparisons (the rows' `comparison`); a poor default's recovery is RECOVERY + its name (from the
# method's runs started there), LANDING + its name where the study has no such runs.
BEATS_DEFAULT, BEATS_SWEEP, BEATS_FRESH = "P(> default)", "P(> sweep incumbent)", "P(> fresh runs)"
SHARE, RECOVERY, FRAMES, SECONDS = "share of the sweep's gain", "recovery from ", "frames / sweep", "seconds / sweep"
LANDING = "level from "
SEEDS_ALONE = "seeds alone"  # the reference row's method: the default's test seeds against its tuning seeds
SHARED = "shared"  # a cost row's status: seconds of a program that ran several methods, split over its runs
DOCS = "docs/studies.md#the-verdict-does-tuning-help"
HEADINGS = {"test": "On the test seeds (the claims)",
            "tuning": "On the tuning seeds (optimistic: the sweep chose its incumbent on these)"}
ALL_NAN = "evaluations all NaN"  # a side's evaluations: none finite where it was compared
NO_NUMBER = ("not measured", "no shared environment", ALL_NAN)  # statuses of rows without a number
WORDS = {"better": "better than", "worse": "worse than", "not separated": "not separated from"}


def method_label(method: str) -> str:
    """'HC', 'HC, schedule replayed', 'sweep incumbent', 'poor default lr_x10', and the reference row."""
    if method == SEEDS_ALONE:
        return "default, test seeds against tuning seeds (what the seeds alone can do)"
    if method.startswith(REPLAY):
        return f"{label(method.removeprefix(REPLAY))}, schedule replayed"
    if method == SWEEP:
        return "sweep incumbent"
    if method.startswith(POOR):
        return f"poor default {method.removeprefix(POOR)}"
    return label(method)


def percent(x: float) -> str:
    return f"{100 * x:.0f}%"


def fraction(x: float) -> str:
    """A cost ratio: '1/96', '1/2.5', '1.5x'; 'n/a' for NaN."""
    if not np.isfinite(x) or x <= 0:
        return "n/a"
    if x >= 1:
        return f"{x:.2g}x"
    inverse = 1.0 / x
    return f"1/{inverse:.0f}" if inverse >= 10 else f"1/{inverse:.1f}".removesuffix(".0")


def share_text(row: dict) -> str:
    """'48% [30%, 65%]', 'within the noise' (unbounded: its denominator, the gain or the gap, is
    within the noise), or the reason there is no number."""
    if row["status"] in NO_NUMBER + ("undefined",):
        return row["status"]
    if row["status"] == "unbounded":  # its denominator is within the noise: a point estimate would mean nothing
        return "within the noise"
    text = f"{percent(row['estimate'])} [{percent(row['low'])}, {percent(row['high'])}]"
    return text + (" not testable" if row["status"] == "not testable" else "")


def cell(row: dict | None) -> str:
    """A table cell of one row."""
    if row is None:
        return ""
    if row["kind"] == "cost":
        return fraction(row["estimate"]) + (f" ({SHARED})" if row["status"] == SHARED else "")
    if row["kind"] == "share":
        return share_text(row)
    if row["status"] in NO_NUMBER:
        return row["status"]
    mark = {"better": "**better**", "worse": "**worse**"}.get(row["status"], row.get("call", row["status"]))
    fell = f", {row['collapsed']} collapsed" if row.get("collapsed") else ""
    return f"{_numbers(row)} {mark}{fell}"


def _numbers(row: dict) -> str:
    """'0.62 [0.55, 0.70]' where the row shows its interval, else '0.62 (p = 0.08)'."""
    if np.isfinite(row["low"]):
        return probability_text(row["estimate"], (row["low"], row["high"]))
    return f"{probability_number(row['estimate'])} ({p_text(row['p_value'], row['test'])})"


def _means(row: dict) -> str:
    """'means 444.4 and 442.5' or 'normalised means 0.71 and 0.64'."""
    a, b = row["means"]
    return f"normalised means {a:.2f} and {b:.2f}" if row.get("normalised") else f"means {a:.4g} and {b:.4g}"


def _against(row: dict, what: str, collapsed=()) -> str:
    """'better than the default, but 1 of 20 runs collapsed (seed 7: 9.4, learning_rate 0.01),
    0.62 [0.55, 0.70], p = 0.003, means 444.4 and 442.5', 'too few seeds to tell (n = 2+2)
    against the default, 0.75 (p = 0.33), ...' or 'not measured against the default (...)'."""
    if row["status"] in NO_NUMBER:
        return f"{row['status']} against {what}" + (f" ({row['note']})" if row["note"] else "")
    head = f"{WORDS[row['status']]} {what}" if row["status"] in WORDS else f"{row['call']} against {what}"
    fell = caveats.collapse_clause(row, list(collapsed))
    if fell:
        head += f", {'but' if row['status'] == 'better' else 'and'} {fell}"
    p = "" if not np.isfinite(row["low"]) else f", {p_text(row['p_value'], row['test'])}"
    return f"{head}, {_numbers(row)}{p}, {_means(row)}"


def _gain(row: dict, sweep: dict, costs: dict) -> str:
    """The share of the sweep's gain in words, with the cost (`costs`: the method's cost rows)."""
    n = sweep.get("configurations")
    of = f"a {n}-configuration sweep's gain" if n else "the sweep's gain"
    cost, of_sweep = _cost(costs), _cost(costs, whose="the sweep's")
    if row["status"] == "undefined":
        return "the sweep's incumbent does not beat the default, so there is no gain to recover" + (
            f" (one run costs {of_sweep})" if cost else "")
    if row["status"] in NO_NUMBER:
        return f"its share of the sweep's gain is {row['status']}"
    if row["status"] == "unbounded":
        return "the sweep's gain over the default is within the noise, so there is no share of it to recover" + (
            f" (one run costs {of_sweep})" if cost else "")
    return f"recovers {share_text(row)} of {of}" + (f" at {cost}" if cost else "")


def _recovery(row: dict, poor: str, started: bool = True) -> str:
    """The recovery from poor default `poor` in words; started False: the method never started
    there (LANDING), so its number says where its own runs land, not what it recovers."""
    what = "recovery" if started else "level"
    if row["status"] == "undefined":
        return f"the poor default {poor} is not worse than the default (nothing to recover)"
    if row["status"] in NO_NUMBER:
        return f"its {what} from the poor default {poor} is {row['status']}"
    if row["status"] == "unbounded":
        return f"the gap from the poor default {poor} to the default is within the noise (no {what} to measure)"
    if not started:
        return (f"its own runs land {share_text(row)} of the way from the poor default {poor} to the default (not a "
                f"recovery: it never started at {poor})")
    return f"started at the poor default {poor}, recovers {share_text(row)} of the gap from it to the default"


def _cost(rows: dict, whose: str = "its") -> str:
    """'1/96 of its frames and 1/80 of its seconds' from the method's cost rows (ALL); `whose`
    names the sweep in the first part."""
    parts = [f"{fraction(rows[c]['estimate'])} of {'its' if i else whose} {word}"
             + (" (shared with the methods of its program)" if rows[c]["status"] == SHARED else "")
             for i, (c, word) in enumerate((c, w) for c, w in ((FRAMES, "frames"), (SECONDS, "seconds"))
                                           if c in rows and np.isfinite(rows[c]["estimate"]))]
    return " and ".join(parts)


def _seeds(seeds: int, envs: int, draws: int = 1) -> str:
    """'on 20 test seeds in each of 3 environments'; draws > 1: the sweep's incumbents, one per draw,
    each on the test seeds (its `seeds` runs are draws x the test seeds)."""
    where = f" in each of {envs} environments" if envs > 1 else ""
    if draws > 1:
        return f"on {seeds // draws} test seeds{where} (the incumbents of its {draws} draws)"
    return f"on {seeds} test seeds{where}"


def sentences(rows: list[dict], sweep: dict, collapsed=()) -> dict[str, str]:
    """method -> one plain sentence on the test seeds over all environments (the reference row
    first, when there is one); collapsed: the verdict's collapsed runs, counted in the sentences."""
    by: dict[str, dict[str, dict]] = {}
    for r in rows:
        if r["phase"] == "test" and r["env"] == ALL:
            by.setdefault(r["method"], {})[r["comparison"]] = r
    out = {}
    for method, mine in by.items():
        first = next((r for r in mine.values() if r["kind"] != "cost"), None)
        if first is None:
            continue
        parts = []
        if method == SEEDS_ALONE:
            out[method] = _seeds_alone(mine[BEATS_DEFAULT])
            continue
        if BEATS_DEFAULT in mine:
            parts.append(_against(mine[BEATS_DEFAULT], "the default", collapsed))
        if BEATS_SWEEP in mine:
            parts.append(_against(mine[BEATS_SWEEP], "the sweep's incumbent"))
        if BEATS_FRESH in mine:
            parts.append(_against(mine[BEATS_FRESH], f"fresh runs of {label(method.removeprefix(REPLAY))}"))
        if SHARE in mine:
            parts.append(_gain(mine[SHARE], sweep, mine))
        parts += [_recovery(r, c.removeprefix(RECOVERY)) for c, r in mine.items() if c.startswith(RECOVERY)]
        parts += [_recovery(r, c.removeprefix(LANDING), started=False) for c, r in mine.items()
                  if c.startswith(LANDING)]
        draws = sweep.get("repeats", 1) if method == SWEEP else 1
        seeds = _seeds(first["seeds"], len(first["envs"]), draws) if first["envs"] else "on the test seeds"
        name = f"{label(method.removeprefix(REPLAY))}'s schedules replayed" if method.startswith(REPLAY) \
            else method_label(method)
        out[method] = f"{name[0].upper()}{name[1:]} {seeds}: {'; '.join(parts)}."
    return out


def _seeds_alone(row: dict) -> str:
    """The reference row's sentence."""
    if row["status"] in NO_NUMBER:
        return f"The default against itself on the other seed set (what the seeds alone can do): {row['status']}."
    envs = f" in each of {len(row['envs'])} environments" if len(row["envs"]) > 1 else ""
    p = "" if not np.isfinite(row["low"]) else f", {p_text(row['p_value'], row['test'])}"
    return (f"The default on {row['seeds']} test seeds{envs} against its own tuning seeds (what the seeds alone can "
            f"do): {row['call']}, {_numbers(row)}{p}, {_means(row)}.")


def column(comparison: str) -> int:
    """A comparison's place among the table's columns."""
    order = (BEATS_DEFAULT, BEATS_SWEEP, BEATS_FRESH, SHARE, RECOVERY, LANDING, FRAMES, SECONDS)
    prefix = next((p for p in (RECOVERY, LANDING) if comparison.startswith(p)), comparison)
    return order.index(prefix)


def phase_tables(rows: list[dict], phase: str) -> str:
    """Markdown: a table per scope (all environments, then each), a row per method, a column
    per comparison."""
    mine = [r for r in rows if r["phase"] == phase]
    if not mine:
        return ("Nothing to compare on these seeds: "
                "the verdict needs the default (fixed) or a sweep beside the methods.\n\n")
    comparisons = sorted(dict.fromkeys(r["comparison"] for r in mine), key=column)
    methods = list(dict.fromkeys(r["method"] for r in mine))
    by = {(r["env"], r["method"], r["comparison"]): r for r in mine}
    text = ""
    for scope in dict.fromkeys(r["env"] for r in mine):
        body = [[method_label(m)] + [cell(by.get((scope, m, c))) for c in comparisons]
                for m in methods if any((scope, m, c) in by for c in comparisons)]
        head = "All environments (normalised per environment)" if scope == ALL else scope
        text += f"**{head}**\n\n" + markdown_table(["Method"] + comparisons, body) + "\n"
    return text


def markdown(rows: list[dict], sentences_: dict[str, str], flags: dict[str, str], sweep: dict, level: int = 3,
             collapsed=(), warnings=()) -> str:
    """The verdict page: the sentences, the warnings, the test-seed tables, the tuning-seed
    tables, the collapsed runs, the flags, under headings of `level` (3: ###)."""
    hashes = "#" * level
    draws = f" in each of {sweep['repeats']} draws" if sweep.get("repeats", 1) > 1 else ""
    n = f"{sweep['configurations']} configurations x {sweep['seeds']} tuning seeds{draws}" if sweep else "no sweep"
    text = "".join(f"- {s}\n" for s in sentences_.values()) + "\n"
    text += "".join(f"- **Warning**: {w}.\n" for w in warnings) + ("\n" if warnings else "")
    text += (f"Cells: P(> X), the probability that a run of the method ends above a run of X (ties count 1/2), "
             f"**better** / **worse** where the exact stratified permutation test gives p <= 0.05, with the "
             f"bootstrap's 95% CI where it is trustworthy and agrees (else the p-value; hcjax.calls), 'too few "
             f"seeds to tell' where no outcome could reach 0.05, and the runs that collapsed (below every run of the "
             f"default and the poor defaults; named below the tables); share of the sweep's gain "
             f"({n}): (method - default) / (incumbent - default) of mean final evaluations, 100% = as good as "
             f"the sweep's incumbent; recovery from a poor default: (method started at poor - poor) / (default - "
             f"poor); level from a poor default (a study whose methods never started there): (method - poor) / "
             f"(default - poor), where its own runs land; cost: one run over the whole sweep. Stratified bootstrap "
             f"over seeds. How to read it: {DOCS}.\n\n")
    for phase in ("test", "tuning"):
        text += f"{hashes} {HEADINGS[phase]}\n\n" + phase_tables(rows, phase)
    if collapsed:
        text += f"{hashes} Collapsed runs\n\n" + caveats.collapse_table(list(collapsed), method_label) + "\n"
    if flags:
        text += f"{hashes} Evaluations that measured nothing\n\n" + "".join(f"- {k}: {v}\n" for k, v in flags.items())
    return text
