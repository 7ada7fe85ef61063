"""The verdict: does tuning help, on seeds it never saw? (`hcjax verdict DIR`, `experiments.verdict(DIR)`)

    v = experiments.verdict("results/verdict")
    v.table        # pandas DataFrame: one row per (phase, environment or ALL, method, comparison)
    v.markdown     # the tables and sentences as Markdown (what `hcjax verdict` prints)
    v.sentences    # method -> one plain sentence (test seeds, all environments)

The units of a study with test seeds (experiments.study): tuning-phase units named by their
method (`hypercontroller`, ..., `fixed` = the study's default, `fixed:<name>` = a poor default,
`sweep` = N static configurations x k tuning seeds), test-phase units (`protocol.kind`)
`<method>@test` (fresh runs of an online method; re-runs of `fixed`, `fixed:<name>` and of the
sweep's incumbent), and `replay_<method>@test` (a method's tuning-seed schedules replayed on
the test seeds). A run's score is its final evaluation (`views.final_eval`).

Every figure is computed twice: on the test seeds (the claims) and on the tuning seeds (beside
them, optimistic: the sweep chose its incumbent on those seeds; there the incumbent's runs are
the sweep's rows of its configurations, one per draw: `chosen_configurations`). Per environment and over all
environments, for every online method M, with D = the default, I = the sweep's incumbent, P =
a poor default, M:P = M started from P (`protocol.started_from`):

    P(M > D), P(M > I)   `stats.probability_of_improvement`: the Mann-Whitney P(x > y) + 0.5
                         P(x = y) over pairs of runs, averaged over environments
    share of the sweep's gain   (mean M - mean D) / (mean I - mean D): 1 = as good as the
                         incumbent, 0 = no better than the default; undefined when the
                         incumbent does not beat the default (I: the incumbents of every draw of
                         the sweep, their runs pooled)
    recovery from P      (mean M:P - mean P) / (mean D - mean P): the part of the gap from the poor
                         default to the default that M closes when it starts at P; undefined when
                         P is not worse. A study without M:P units gets instead
    level from P         (mean M - mean P) / (mean D - mean P): where M's own runs (which never
                         started at P) land between P and the default: not a recovery
    cost                 frames (and seconds, meta['run_seconds'] = one run) of one run of M
                         over the whole sweep's (its N x k runs); seconds of a method whose
                         program ran other units too (fused_methods) are that program's split
                         evenly over its runs: status 'shared', not measured per method

and for the incumbent and each poor default P(> D), for each replayed schedule P(replay > D)
and P(replay > fresh runs of M). Over all environments the means are of scores normalised per
environment as the claims page does (`stats.normalise`: min-max over the runs of the phase
that the verdict compares), each environment weighing the same; P is unchanged by it.

Intervals: 95% percentile intervals of a stratified bootstrap: each (environment, unit)
stratum's finite runs are resampled with replacement, independently, by the generator
`hcjax.stats.stratum_rng(seed, environment, the unit's method)`, the same draws for every
statistic; a share is computed on each replicate from the replicate's means. Replicates whose denominator
is not positive have no share: if they are more than the interval's tail (2.5%) the interval
is unbounded (the gain it is a share of is within the noise), else the interval is over the
others. A stratum of one run cannot vary: such comparisons are 'not testable'. A unit whose
evaluations all scored the same number (`views.measured_nothing`) measured nothing: its
comparisons say 'not measured', and it is left out of the all-environment figures. A unit whose
final evaluations are all NaN (or infinite) is a failed measurement too: its comparisons say
'evaluations all NaN', naming it (the default's, say), not 'no shared environment'.
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np

from experiments.reporting import arlbench, caveats, headroom, verdict_text
from experiments.reporting import stats as ST
from experiments.reporting.tables import strict_json
from experiments.reporting.verdict_text import (
    ALL_NAN,
    BEATS_DEFAULT,
    BEATS_FRESH,
    BEATS_SWEEP,
    FRAMES,
    LANDING,
    RECOVERY,
    SECONDS,
    SEEDS_ALONE,
    SHARE,
    SHARED,
)
from experiments.reporting.views import ALL, final_eval, measured_nothing
from experiments.study import unfinished
from experiments.study.files import atomic_write_text, check_writable_dir
from experiments.study.methods import ALL_METHODS
from experiments.study.protocol import (
    POOR,
    REPLAY,
    SWEEP,
    TEST,
    TEST_PHASE,
    TUNING_PHASE,
    draw_incumbents,
    kind,
    started_from,
)
from experiments.study.store import StudyDir, UnitResult, load_units
from hcjax import calls
from hcjax.extras import require

DEFAULT = "fixed"  # the study's default configuration
PHASES = (TEST_PHASE, TUNING_PHASE)


class NoTestSeeds(ValueError):
    """The study has no test-phase units: there is nothing to make a claim on."""


@dataclasses.dataclass(frozen=True)
class Stratum:
    """The runs of one unit in one environment: what the bootstrap resamples.
    name: the unit's method (names its generator); scores: (n,) final evaluations (NaN: none);
    flag: `views.measured_nothing` of the unit (None: it measured something); seeds: (n,) the
    runs' seed ids; hparams: name -> (n,) each run's final hyperparameters (naming collapses)."""

    name: str
    scores: np.ndarray
    flag: str | None
    seeds: np.ndarray | None = None
    hparams: dict | None = None


Roles = dict  # role (a method without '@test'; 'sweep' = the incumbent's runs) -> env -> Stratum


def is_online(role: str) -> bool:
    """A tuned method (a tuner or a population method), not a reference, a replay or a run started
    from a poor default (those measure the method's recovery)."""
    return role not in (DEFAULT, SWEEP) and not role.startswith(REPLAY) and not started_from(role)


def chosen_configurations(units: list[UnitResult]) -> dict[str, list[int]]:
    """env -> the sweep's incumbents (configuration indices) that its test unit ran (`sweep@test`'s
    meta), or, without one, each draw's best mean final evaluation (`protocol.draw_incumbents`)."""
    out = {}
    for u in units:
        chosen = u.meta.get("incumbents") or ([u.meta["incumbent"]] if "incumbent" in u.meta else [])
        if u.meta["method"] == SWEEP + TEST and chosen:
            out[u.meta["env"]] = [int(c["configuration"]) for c in chosen]
    for u in units:
        if u.meta["method"] == SWEEP and u.meta["env"] not in out:
            meta = u.meta["sweep"]
            options = {"configurations": int(meta.get("per_draw", len(meta["configurations"]))),
                       "seeds": int(meta["seeds"]), "repeats": int(meta.get("repeats", 1))}
            out[u.meta["env"]] = draw_incumbents(final_eval(u), np.asarray(meta["configuration"]), options).tolist()
    return out


def roles(units: list[UnitResult], phase: str) -> Roles:
    """The strata of one phase by role: test units under their method without '@test'; on the
    tuning seeds the role 'sweep' holds only the rows of its incumbents (one per draw)."""
    out: dict[str, dict[str, Stratum]] = {}
    chosen = chosen_configurations(units) if phase == TUNING_PHASE else {}
    for u in units:
        k = kind(u.meta["method"])
        if k.phase != phase:
            continue
        role, scores, keep = (REPLAY if k.replay else "") + k.base, final_eval(u), slice(None)
        if phase == TUNING_PHASE and role == SWEEP:
            rows = np.asarray(u.meta["sweep"]["configuration"])
            keep = np.isin(rows, chosen[u.meta["env"]])
        hparams = {name: u.hparams[keep, -1, i] for i, name in enumerate(u.meta.get("hparam_names", []))
                   if u.hparams.ndim == 3 and u.hparams.shape[1]}
        out.setdefault(role, {})[u.meta["env"]] = Stratum(u.meta["method"], scores[keep], measured_nothing(u),
                                                          np.asarray(u.seeds)[keep], hparams)
    order = {m: i for i, m in enumerate(ALL_METHODS)}
    return dict(sorted(out.items(), key=lambda kv: (order.get(kv[0].removeprefix(REPLAY), len(order)),
                                                    kv[0].startswith(REPLAY), kv[0])))


def _scope(sides: list[dict], envs: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(environments usable: every side has finite runs there and measured something,
    environments not measured, flags met) among `envs`."""
    used, unmeasured, flags = [], [], []
    for env in envs:
        strata = [side.get(env) for side in sides]
        if any(s is None or not ST.finite(s.scores).size for s in strata):
            continue
        met = [s.flag for s in strata if s.flag]
        if met:
            unmeasured.append(env)
            flags += [f for f in met if f not in flags]
        else:
            used.append(env)
    return used, unmeasured, flags


def _row(kind: str, estimate=float("nan"), ci=(float("nan"),) * 2, status: str = "", envs=(), seeds: int = 0,
         note: str = "", **more) -> dict:
    return {"estimate": float(estimate), "low": float(ci[0]), "high": float(ci[1]), "status": status,
            "envs": list(envs), "seeds": int(seeds), "note": note, "kind": kind, **more}


def _seeds(side: dict, envs: list[str]) -> int:
    """The fewest finite runs of a side over `envs`."""
    return min((ST.finite(side[e].scores).size for e in envs), default=0)


def _not_measured(kind: str, sides: list[dict], envs: list[str], unmeasured: list[str], flags: list[str]) -> dict:
    """The row of a comparison without a usable environment: 'not measured', ALL_NAN (a side's
    evaluations hold no finite number, named in the note) or 'no shared environment'."""
    empty = [] if unmeasured else _all_nan(sides, envs)
    if empty:
        return _row(kind, status=ALL_NAN, note="; ".join(empty))
    return _row(kind, status="not measured" if unmeasured else "no shared environment", envs=unmeasured,
                seeds=_seeds(sides[0], unmeasured), note="; ".join(flags))


def _all_nan(sides: list[dict], envs: list[str]) -> list[str]:
    """'the default's evaluations are all NaN (fixed@test on A, B)' for each side whose runs have
    no finite final evaluation in the environments of `envs` where it ran."""
    out = []
    for side in sides:
        empty = [env for env in envs if env in side and not ST.finite(side[env].scores).size]
        if empty:
            name = side[empty[0]].name
            role = (REPLAY if kind(name).replay else "") + kind(name).base
            whose = "the default" if role == DEFAULT else verdict_text.method_label(role)
            out.append(f"{whose}'s evaluations are all NaN ({name} on {', '.join(empty)})")
    return out


def probability(a: dict, b: dict, envs: list[str], reps: int, seed: int, confidence: float,
                normalised: dict | None = None) -> dict:
    """P(A > B) over `envs` (env -> Stratum each) and its call (`hcjax.calls.call`: the exact
    stratified permutation test; status 'better', 'worse', 'not separated', 'too few seeds to
    tell', 'not measured': no environment where both measured something, or 'evaluations all
    NaN': a side's final evaluations hold no finite number, the note names it), with the
    bootstrap interval where `calls.call` shows one (else NaNs, and the note says why), the
    p-value and each side's mean ('means': raw in one environment; over several, of the scores
    in `normalised`, role name -> env -> (n,), as `share`)."""
    used, unmeasured, flags = _scope([a, b], envs)
    if not used:
        return _not_measured("probability", [a, b], envs, unmeasured, flags)
    names = (a[used[0]].name, b[used[0]].name)
    xs, ys = [ST.finite(a[e].scores) for e in used], [ST.finite(b[e].scores) for e in used]
    r = ST.probability_of_improvement(dict(zip(used, xs)), dict(zip(used, ys)), names, reps, seed, confidence)
    made = calls.call(xs, ys, r["ci"], confidence, seed)
    scale = normalised if normalised is not None and len(used) > 1 else None
    means = [float(np.mean([np.mean(ST.finite(side[e].scores if scale is None else scale[side[e].name][e]))
                            for e in used])) for side in (a, b)]
    note = "; ".join(n for n in (made.no_interval, _left_out(unmeasured, flags)) if n)
    return _row("probability", made.p, made.ci, made.verdict, used, _seeds(a, used), note, p_value=made.p_value,
                test=made.test, call=made.words, means=means, normalised=scale is not None,
                runs=int(sum(x.size for x in xs)))


def _left_out(unmeasured: list[str], flags: list[str]) -> str:
    return f"left out {', '.join(unmeasured)}: {'; '.join(flags)}" if unmeasured else ""


def _means(side: dict, normalised: dict, envs: list[str], reps: int, seed: int) -> tuple[float, np.ndarray]:
    """(mean over `envs` of the stratum's mean normalised score, (reps,) the same of each
    bootstrap replicate). normalised: env -> (n,) the side's normalised scores."""
    point, boot = 0.0, np.zeros(reps)
    for env in envs:
        z = ST.finite(normalised[env])
        point += z.mean()
        boot += ST.resample_counts(z.size, reps, seed, env, side[env].name) @ z / z.size
    return point / len(envs), boot / len(envs)


def share(m: dict, low: dict, high: dict, normalised: dict, envs: list[str], reps: int, seed: int,
          confidence: float) -> dict:
    """(mean M - mean LOW) / (mean HIGH - mean LOW) over `envs` (each side env -> Stratum;
    normalised: role name -> env -> (n,) scores) with its interval; status 'undefined' (HIGH
    does not beat LOW), 'unbounded' (too many replicates where it does not), 'not testable'
    (a stratum of one run) or 'not measured'."""
    used, unmeasured, flags = _scope([m, low, high], envs)
    if not used:
        return _not_measured("share", [m, low, high], envs, unmeasured, flags)
    (pm, bm), (pl, bl), (ph, bh) = (_means(s, normalised[s[used[0]].name], used, reps, seed) for s in (m, low, high))
    note = _left_out(unmeasured, flags)
    if not ph > pl:
        return _row("share", status="undefined", envs=used, seeds=_seeds(m, used), note=note)
    defined = bh > bl
    tail = (1.0 - confidence) / 2.0
    if np.mean(~defined) > tail:
        ci, status = (-np.inf, np.inf), "unbounded"
    else:
        ci, status = ST.interval((bm - bl)[defined] / (bh - bl)[defined], confidence), ""
    if min(_seeds(s, used) for s in (m, low, high)) < 2:
        status = "not testable"
    return _row("share", (pm - pl) / (ph - pl), ci, status, used, _seeds(m, used), note)


def comparisons(r: Roles) -> list[tuple[str, str, str, tuple[str, ...]]]:
    """(method, comparison, statistic ('probability' | 'share'), roles compared) of one phase, in
    the table's order."""
    out = []
    poor = [p for p in r if p.startswith(POOR)]  # the poor defaults themselves
    for m in [m for m in r if is_online(m)]:
        if DEFAULT in r:
            out.append((m, BEATS_DEFAULT, "probability", (m, DEFAULT)))
        if SWEEP in r:
            out.append((m, BEATS_SWEEP, "probability", (m, SWEEP)))
        if DEFAULT in r and SWEEP in r:
            out.append((m, SHARE, "share", (m, DEFAULT, SWEEP)))
        if DEFAULT in r:  # from the runs started at P; without them, where the method's own runs land
            out += [(m, RECOVERY + p.removeprefix(POOR), "share", (started, p, DEFAULT)) if started in r else
                    (m, LANDING + p.removeprefix(POOR), "share", (m, p, DEFAULT))
                    for p in poor for started in [m + ":" + p.removeprefix(POOR)]]
        if REPLAY + m in r:
            if DEFAULT in r:
                out.append((REPLAY + m, BEATS_DEFAULT, "probability", (REPLAY + m, DEFAULT)))
            out.append((REPLAY + m, BEATS_FRESH, "probability", (REPLAY + m, m)))
    if DEFAULT in r:
        out += [(ref, BEATS_DEFAULT, "probability", (ref, DEFAULT)) for ref in [SWEEP] + poor if ref in r]
    return out


def phase_rows(units: list[UnitResult], phase: str, reps: int, seed: int, confidence: float) -> list[dict]:
    """Every row of one phase: per comparison, all environments first, then each environment."""
    r = roles(units, phase)
    envs = list(dict.fromkeys(u.meta["env"] for u in units))
    measured: dict[str, dict[str, np.ndarray]] = {}
    for side in r.values():
        for env, s in side.items():
            if not s.flag:
                measured.setdefault(s.name, {})[env] = s.scores
    normalised = ST.normalise(measured)  # per environment min-max over the runs this phase compares
    rows = []
    for method, comparison, statistic, compared in comparisons(r):
        sides = [r[c] for c in compared]
        for scope in [ALL] + envs:
            within = envs if scope == ALL else [scope]
            if statistic == "probability":
                row = probability(*sides, within, reps, seed, confidence, normalised)
            else:
                row = share(*sides, normalised, within, reps, seed, confidence)
            rows.append({"phase": phase, "env": scope, "method": method, "comparison": comparison, **row})
    return rows + cost_rows(units, phase, envs)


def reference_rows(units: list[UnitResult], reps: int, seed: int, confidence: float) -> list[dict]:
    """What the seeds alone can do: the default's test-seed runs against its tuning-seed runs
    (`probability`, all environments then each; means over several environments of scores
    normalised per environment over both), as the test phase's method SEEDS_ALONE. [] without
    the default on both seed sets."""
    test, tuning = (roles(units, phase).get(DEFAULT) for phase in (TEST_PHASE, TUNING_PHASE))
    if not test or not tuning:
        return []
    envs = list(dict.fromkeys(u.meta["env"] for u in units))
    normalised = ST.normalise({side[next(iter(side))].name: {e: s.scores for e, s in side.items() if not s.flag}
                               for side in (test, tuning)})
    rows = []
    for scope in [ALL] + envs:
        row = probability(test, tuning, envs if scope == ALL else [scope], reps, seed, confidence, normalised)
        rows.append({"phase": TEST_PHASE, "env": scope, "method": SEEDS_ALONE, "comparison": BEATS_DEFAULT, **row})
    return rows


def cost_rows(units: list[UnitResult], phase: str, envs: list[str]) -> list[dict]:
    """Per online method: the frames and seconds of one of its runs over those of the whole
    sweep (all N x k rows of the tuning unit `sweep`), per environment and summed over them."""
    by = {(u.meta["env"], u.meta["method"]): u for u in units}
    if not any(method == SWEEP for _, method in by):
        return []  # nothing to weigh a run against
    methods = [m for m in roles(units, phase) if is_online(m)]
    name = (lambda m: m + TEST) if phase == TEST_PHASE else (lambda m: m)
    rows = []
    for m in methods:
        for comparison, cost in ((FRAMES, _frames), (SECONDS, _seconds)):
            per_env = {env: (cost(by[(env, name(m))], one=True), cost(by[(env, SWEEP)], one=False))
                       for env in envs if (env, name(m)) in by and (env, SWEEP) in by}
            fused = {e: _fused(by[(e, name(m))]) for e in per_env} if comparison == SECONDS else {}
            for scope in [ALL] + envs:
                pairs = list(per_env.values()) if scope == ALL else [per_env[scope]] if scope in per_env else []
                known = pairs and all(a is not None and b is not None and b > 0 for a, b in pairs)
                ratio = sum(a for a, _ in pairs) / sum(b for _, b in pairs) if known else float("nan")
                shared = sorted({w for e, with_ in fused.items() if scope in (ALL, e) for w in with_})
                status = "n/a" if not known else SHARED if shared else ""
                note = f"one program ran it with {len(shared)} other unit(s) (fused_methods): that program's " \
                       f"seconds, compilation included, split evenly over its runs" if shared else ""
                rows.append({"phase": phase, "env": scope, "method": m, "comparison": comparison,
                             **_row("cost", ratio, status=status, envs=[e for e in per_env if scope in (ALL, e)],
                                    note=note)})
    return rows


def _fused(unit: UnitResult) -> list[str]:
    """The methods a unit's program ran besides it (meta['fused_with']), [] when it ran alone."""
    return [m for m in unit.meta.get("fused_with", []) if m != unit.meta["method"]]


def _frames(unit: UnitResult, one: bool) -> float:
    """Frames of one run of the unit (the mean over its rows), or of all its rows."""
    per_run = np.asarray(unit.frames, np.float64).sum(axis=1)
    return float(per_run.mean() if one else per_run.sum())


def _seconds(unit: UnitResult, one: bool) -> float | None:
    """Seconds of one run (meta['run_seconds']), or of all its rows; None when not recorded."""
    seconds = unit.meta.get("run_seconds")
    return None if seconds is None else float(seconds) * (1 if one else unit.seeds.size)


@dataclasses.dataclass(frozen=True)
class Verdict:
    """rows: every number, one dict per (phase, env or ALL, method, comparison) with estimate,
    low, high, status, envs, seeds (the method's fewest runs in an environment), note, and on
    P(> X) rows p_value, test, call (the call in words), means (the two sides'), collapsed
    (on P(> default) rows: how many of the method's runs collapsed); sentences: method -> one
    plain sentence (test seeds, all environments); flags: 'env / method' ->
    `views.measured_nothing` of every unit that measured nothing; sweep: the sweep's size
    ({'configurations': N, 'seeds': k, 'repeats': R}, {} without a sweep); headroom: env ->
    `headroom.Headroom` (from the tuning seeds: is there anything above the default to find?);
    beside: env -> the rows of the table beside ARLBench's released runs (`arlbench.side_by_side`);
    collapsed: every run below the worst run of the default and the poor defaults in its
    environment and phase (`caveats.collapsed_runs`); warnings: lines to read the calls with
    (`caveats.disagreements`)."""

    rows: list[dict]
    sentences: dict[str, str]
    flags: dict[str, str]
    sweep: dict
    headroom: dict = dataclasses.field(default_factory=dict)
    beside: dict = dataclasses.field(default_factory=dict)
    budgets: dict = dataclasses.field(default_factory=dict)
    collapsed: list = dataclasses.field(default_factory=list)
    warnings: list = dataclasses.field(default_factory=list)

    @property
    def markdown(self) -> str:
        """The sentences, the test-seed and tuning-seed tables and the flags (headings ###)."""
        return self.text(level=3)

    def text(self, level: int = 3) -> str:
        """The Markdown with its headings at `level` (3: ###): the headroom first, then the verdict."""
        rooms = headroom.markdown(self.headroom, f"{'#' * level} Headroom (tuning seeds, before any test seed)")
        beside = arlbench.markdown(self.beside, f"{'#' * level} Beside ARLBench's released runs", self.budgets)
        return rooms + verdict_text.markdown(self.rows, self.sentences, self.flags, self.sweep, level,
                                             self.collapsed, self.warnings) + beside

    def json(self) -> str:
        """Everything as strict JSON (NaN and infinities as null)."""
        data = {"rows": self.rows, "sentences": self.sentences, "flags": self.flags, "sweep": self.sweep,
                "headroom": {env: dict(dataclasses.asdict(r), share=r.share, ceiling=r.ceiling)
                             for env, r in self.headroom.items()},
                "beside_arlbench": {env: [dict(zip(arlbench.HEADER, row)) for row in rows]
                                    for env, rows in self.beside.items()},
                "collapsed": self.collapsed, "warnings": self.warnings}
        return json.dumps(strict_json(data), indent=1, allow_nan=False) + "\n"

    @property
    def table(self):
        """The rows as a pandas DataFrame (pandas comes with hcjax[studies])."""
        require("experiments.verdict(...).table", "pandas")
        import pandas as pd

        return pd.DataFrame(self.rows, columns=COLUMNS)


COLUMNS = ("phase", "env", "method", "comparison", "estimate", "low", "high", "p_value", "seeds", "status", "envs",
           "note")


def has_test_seeds(units: list[UnitResult]) -> bool:
    """Whether a study ran units on test seeds (`protocol.kind`): then it has a verdict."""
    return any(kind(u.meta["method"]).phase == TEST_PHASE for u in units)


def sweep_size(units: list[UnitResult]) -> dict:
    """{'configurations': N, 'seeds': k, 'repeats': R} of the study's sweep (its tuning unit; N per
    draw), {} without one."""
    for u in units:
        if u.meta["method"] == SWEEP:
            meta = u.meta["sweep"]
            return {"configurations": int(meta.get("per_draw", len(meta["configurations"]))),
                    "seeds": int(meta["seeds"]), "repeats": int(meta.get("repeats", 1))}
    return {}


def verdict(source: str | os.PathLike | list[UnitResult], reps: int = ST.REPS, seed: int = 0,
            confidence: float = ST.CONFIDENCE, json_path: str | os.PathLike | None = None) -> Verdict:
    """The verdict of a study directory (or of its units); json_path: also write `Verdict.json()`
    there (atomically). ValueError before any work when the study directory lacks units its
    manifest names (`experiments.study.unfinished.Unfinished`), the study has no test-phase units
    (NoTestSeeds) or json_path cannot be written."""
    if json_path is not None:
        if Path(json_path).is_dir():
            raise ValueError(f"the JSON file {json_path} is a folder; give the name of a file")
        check_writable_dir(Path(json_path).resolve().parent, "the JSON file's folder")
    units = load_units(source) if isinstance(source, (str, os.PathLike)) else list(source)
    if isinstance(source, (str, os.PathLike)):
        unfinished.check(StudyDir(source), units)  # units missing: say which, not a verdict without them
    if not has_test_seeds(units):
        raise NoTestSeeds("this study has no test seeds: run it with test_seeds (a count or a list of seed ids, "
                          "disjoint from the tuning seeds) to get a verdict on seeds the tuning never saw")
    rows = reference_rows(units, reps, seed, confidence)
    rows += [row for phase in PHASES for row in phase_rows(units, phase, reps, seed, confidence)]
    flags = {f"{u.meta['env']} / {u.meta['method']}": measured_nothing(u) for u in units if measured_nothing(u)}
    sweep = sweep_size(units)
    strata = {phase: roles(units, phase) for phase in PHASES}
    fell = [run for phase in PHASES for run in caveats.collapsed_runs(strata[phase], phase, DEFAULT)]
    caveats.count_collapses(rows, fell, BEATS_DEFAULT, strata, DEFAULT)
    result = Verdict(rows, verdict_text.sentences(rows, sweep, fell), flags, sweep, headroom.headroom(units),
                     collapsed=fell, warnings=caveats.disagreements(rows, BEATS_DEFAULT, SEEDS_ALONE))
    result = dataclasses.replace(result, beside=arlbench.side_by_side(units, result), budgets=arlbench.budgets(units))
    if json_path is not None:
        atomic_write_text(json_path, result.json())
    return result
