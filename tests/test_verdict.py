"""The verdict (experiments.reporting.verdict) on fabricated units (tests/verdict_units.py): its
intervals against a slow bootstrap (Python loops over replicates, the same per-stratum
generators; the incumbent's tuning rows chosen by a slow reference), its calls (hcjax.calls,
tested itself in tests/test_calls.py) and their A/A rate, the reference row (the default against
itself), the collapsed runs and the warning when the two seed sets disagree, the flag of
evaluations that measured nothing, its sentences, and `hcjax verdict`'s exit status without
test seeds. (`protocol.incumbent` itself: tests/test_protocol.py.)"""
import json
import math

import numpy as np
import pytest

import experiments
from experiments import cli
from experiments.reporting import claims, plots, tables, verdict_text
from experiments.reporting import verdict as V
from experiments.reporting.tables import strict_json
from experiments.reporting.views import ALL, final_eval, measured_nothing, study_scores
from experiments.study.store import StudyDir
from hcjax import calls
from hcjax.stats import stratum_rng
from tests import verdict_units as U

REPS = 120


# ---- the flag: evaluations that measured nothing -------------------------------------------

@pytest.mark.parametrize("evals, expected", [
    ([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]], "every evaluation scored 0: the evaluation measured nothing"),
    ([[9.5, 9.5], [9.5, 9.5]], "every evaluation scored 9.5: the evaluation measured nothing"),
    ([[-200.0], [-200.0]], "every evaluation scored -200: the evaluation measured nothing"),
    ([[0.0, 0.0], [np.nan, np.nan]], "every evaluation with a score scored 0 (2 of 4 had none): the evaluation "
                                     "measured nothing"),
    ([[0.0, 0.0], [0.0, 1.0]], None),  # one evaluation differs: something was measured
    ([[0.0], [0.5]], None),
    ([[3.0]], None),  # one number: nothing to compare it with
    ([[np.nan, np.nan], [np.nan, np.nan]], None),  # no score at all: another failure, not this flag's
    (np.zeros((2, 0)), None),  # no evaluation
])
def test_measured_nothing_fires_where_it_should(evals, expected):
    unit = U.unit("A", "fixed", np.zeros(len(evals)))
    unit.eval_reward = np.asarray(evals, np.float32).reshape(len(evals), -1)
    assert measured_nothing(unit) == expected


# ---- the intervals against a slow bootstrap ------------------------------------------------

def slow_incumbent(scores, configuration, n) -> int:
    """The configuration with the best mean score over its rows, by loops: a non-finite score
    makes its configuration's mean -inf; the first of equal means wins."""
    best, best_mean = 0, -math.inf
    for i in range(n):
        rows = [float(s) for s, c in zip(scores, configuration) if c == i]
        mean = -math.inf if not rows or not all(math.isfinite(s) for s in rows) else sum(rows) / len(rows)
        if mean > best_mean:
            best, best_mean = i, mean
    return best


def draws(n, seed, env, name):
    """(REPS, n) seed indices of one stratum, from its generator (hcjax.stats.stratum_rng), one replicate at a time."""
    rng = stratum_rng(seed, env, name)
    return rng.integers(0, n, size=(REPS, n))


def slow_strata(units, phase):
    """role -> env -> (name, finite scores, flag), by loops; the tuning sweep's incumbent rows
    by the slow incumbent."""
    out = {}
    for u in units:
        if u.meta.get("phase") != phase:
            continue
        role, scores = u.meta["method"].removesuffix("@test"), final_eval(u).astype(np.float64)
        if phase == "tuning" and role == "sweep":
            conf = u.meta["sweep"]["configuration"]
            best = slow_incumbent(scores, conf, len(u.meta["sweep"]["configurations"]))
            scores = np.array([s for s, c in zip(scores, conf) if c == best])
        out.setdefault(role, {})[u.meta["env"]] = (u.meta["method"], scores[np.isfinite(scores)], measured_nothing(u))
    return out


def slow_probability(a, b, envs, seed):
    def wins(x, y):
        return sum(1.0 if u > v else 0.5 if u == v else 0.0 for u in x for v in y) / (len(x) * len(y))

    point = sum(wins(a[e][1], b[e][1]) for e in envs) / len(envs)
    ia = {e: draws(len(a[e][1]), seed, e, a[e][0]) for e in envs}
    ib = {e: draws(len(b[e][1]), seed, e, b[e][0]) for e in envs}
    boot = [sum(wins(a[e][1][ia[e][r]], b[e][1][ib[e][r]]) for e in envs) / len(envs) for r in range(REPS)]
    lo, hi = np.percentile(boot, [2.5, 97.5])
    word = calls.decide([a[e][1] for e in envs], [b[e][1] for e in envs])[0][()]  # the call: hcjax.calls
    return point, lo, hi, word


def slow_share(m, low, high, envs, reference, seed):
    """(mean M - mean LOW) / (mean HIGH - mean LOW) of normalised scores, each replicate by loops."""
    def z(env, x):
        lo, hi = reference[env]
        return [(v - lo) / (hi - lo) if hi > lo else 0.5 for v in x]

    def mean(side, r=None):
        total = 0.0
        for e in envs:
            x = side[e][1] if r is None else side[e][1][draws(len(side[e][1]), seed, e, side[e][0])[r]]
            total += sum(z(e, x)) / len(x)
        return total / len(envs)

    pm, pl, ph = mean(m), mean(low), mean(high)
    if not ph > pl:
        return "undefined", math.nan, math.nan, math.nan
    ratios, undefined = [], 0
    for r in range(REPS):
        bm, bl, bh = mean(m, r), mean(low, r), mean(high, r)
        if bh > bl:
            ratios.append((bm - bl) / (bh - bl))
        else:
            undefined += 1
    if undefined / REPS > 0.025:
        return "unbounded", (pm - pl) / (ph - pl), -math.inf, math.inf
    lo, hi = np.percentile(ratios, [2.5, 97.5])
    return "", (pm - pl) / (ph - pl), lo, hi


def slow_reference_scores(strata, env):
    runs = [v for side in strata.values() for e, (_, x, flag) in side.items() if e == env and not flag for v in x]
    return min(runs), max(runs)


@pytest.mark.parametrize("seed", [0, 3])
def test_the_intervals_match_a_slow_bootstrap(seed):
    units = U.study(seed, n_test=9, n_tuning=8)  # from calls.MIN_INTERVAL = 8 runs the intervals are shown
    result = V.verdict(units, reps=REPS, seed=seed)
    checked = shown = 0
    for phase in ("test", "tuning"):
        strata = slow_strata(units, phase)
        reference = {e: slow_reference_scores(strata, e) for e in ("A", "B")}
        for row in [r for r in result.rows if r["phase"] == phase and r["kind"] != "cost"]:
            envs = ["A", "B"] if row["env"] == ALL else [row["env"]]
            c, m = row["comparison"], row["method"]
            if m == verdict_text.SEEDS_ALONE:  # the default's test runs against its tuning runs
                want = slow_probability(strata["fixed"], slow_strata(units, "tuning")["fixed"], envs, seed)
            elif c == verdict_text.BEATS_DEFAULT:
                want = slow_probability(strata[m], strata["fixed"], envs, seed)
            elif c == verdict_text.BEATS_SWEEP:
                want = slow_probability(strata[m], strata["sweep"], envs, seed)
            elif c == verdict_text.BEATS_FRESH:
                want = slow_probability(strata[m], strata[m.removeprefix("replay_")], envs, seed)
            else:
                low, high = ("fixed", "sweep") if c == verdict_text.SHARE else ("fixed:lr_x10", "fixed")
                status, *numbers = slow_share(strata[m], strata[low], strata[high], envs, reference, seed)
                want = (*numbers, status)
            assert row["status"] == want[3], (phase, row["env"], m, c)
            if row["kind"] == "probability" and np.isnan(row["low"]):  # withheld: a point, or against the call
                assert row["estimate"] == pytest.approx(want[0], abs=1e-12)
                if c == verdict_text.BEATS_SWEEP and phase == "tuning" or m == "sweep" and phase == "tuning":
                    assert f"no interval below {calls.MIN_INTERVAL} runs" in row["note"]  # the sweep's 2 rows
                elif want[1] == want[2]:
                    assert "every resample orders the two groups alike" in row["note"]
                else:
                    assert (want[1] > 0.5 or want[2] < 0.5) != (row["status"] in ("better", "worse"))
                    assert "calls differ" in row["note"]
            else:
                assert [row["estimate"], row["low"], row["high"]] == pytest.approx(list(want[:3]), abs=1e-9,
                                                                                   nan_ok=True)
                shown += row["kind"] == "probability"
            checked += 1
    assert checked == 2 * 3 * (2 * 4 + 2 * 2 + 2) - 3 * 2 * 2 + 3  # no replays on the tuning seeds; reference row
    assert shown > 20


def near_gain(delta: float) -> list:
    """Test units of env A: default and HC of the same distribution, the incumbent the default's
    runs + delta (a gain over the default that the noise hides for small delta)."""
    rng = np.random.default_rng(1)
    default = rng.normal(0.0, 1.0, 8)
    return [U.unit("A", "fixed@test", default, phase="test"),
            U.unit("A", "hypercontroller@test", rng.normal(0.0, 1.0, 8), phase="test"),
            U.unit("A", "sweep@test", default + delta, phase="test")]


# replicates without a gain: 0.05 most, 0.5 7.5%, 0.6 3.3% (unbounded: over the 2.5% tail), 0.7 1.7%
# (an interval over the others), 0.9 none; -1: the incumbent below the default (undefined)
@pytest.mark.parametrize("delta, status", [(0.05, "unbounded"), (0.5, "unbounded"), (0.6, "unbounded"), (0.7, ""),
                                           (0.9, ""), (-1.0, "undefined")])
def test_a_share_near_no_gain_is_unbounded_and_without_one_undefined(delta, status):
    units = near_gain(delta)
    result = V.verdict(units, reps=REPS)
    row = {r["comparison"]: r for r in result.rows if r["env"] == ALL and r["phase"] == "test"}[verdict_text.SHARE]
    strata = slow_strata(units, "test")
    want_status, *want = slow_share(strata["hypercontroller"], strata["fixed"], strata["sweep"], ["A"],
                                    {"A": slow_reference_scores(strata, "A")}, 0)
    assert (row["status"], want_status) == (status, status)
    assert [row["estimate"], row["low"], row["high"]] == pytest.approx(want, abs=1e-9, nan_ok=True)
    sentence = result.sentences["hypercontroller"]
    if status == "unbounded":
        assert "the sweep's gain over the default is within the noise, so there is no share of it to recover" \
            in sentence
        assert "%" not in sentence.split("sweep's incumbent")[-1]  # no point estimate of a share that means nothing
    if status == "undefined":
        assert "the sweep's incumbent does not beat the default, so there is no gain to recover" in sentence


def test_cost_is_one_run_over_the_whole_sweep():
    result = V.verdict(U.study(0), reps=20)  # runs of 4 x 100 frames, 2 s; the sweep 4 x 2 rows of 1.5 s
    cost = {(r["env"], r["comparison"]): r for r in result.rows if r["kind"] == "cost" and r["phase"] == "test"
            and r["method"] == "hypercontroller"}
    assert cost[(ALL, verdict_text.FRAMES)]["estimate"] == pytest.approx(1 / 8)
    assert cost[("A", verdict_text.SECONDS)]["estimate"] == pytest.approx(2.0 / (1.5 * 8))
    assert "at 1/8 of its frames and 1/6 of its seconds" in result.sentences["hypercontroller"]
    unknown = V.verdict(U.study(0, seconds=False), reps=20)
    assert [r["status"] for r in unknown.rows if r["comparison"] == verdict_text.SECONDS] == ["n/a"] * 12
    assert "1/8 of its frames;" in unknown.sentences["hypercontroller"]


def test_seconds_of_a_program_that_ran_several_methods_are_labelled_shared():
    """A fused program's seconds are split over its runs, not measured per method: its cost in
    seconds says 'shared' (table, row, sentence); its frames are its own."""
    units = U.study(0)
    for u in units:
        if u.meta["method"] in ("hypercontroller@test", "fixed@test") and u.meta["env"] == "A":
            u.meta["fused_with"] = ["hypercontroller@test", "fixed@test"]
    result = V.verdict(units, reps=20)
    rows = {(r["env"], r["comparison"]): r for r in result.rows if r["kind"] == "cost" and r["phase"] == "test"
            and r["method"] == "hypercontroller"}
    assert rows[("A", verdict_text.SECONDS)]["status"] == rows[(ALL, verdict_text.SECONDS)]["status"] == "shared"
    assert "1 other unit(s)" in rows[("A", verdict_text.SECONDS)]["note"]
    assert rows[("B", verdict_text.SECONDS)]["status"] == "" and rows[(ALL, verdict_text.FRAMES)]["status"] == ""
    assert "1/6 (shared)" in result.markdown
    assert "1/6 of its seconds (shared with the methods of its program)" in result.sentences["hypercontroller"]


# ---- sentences, flags and the table --------------------------------------------------------

def shifted(**shift):
    """Test units of env A, 6 seeds each, at the given mean final evaluations (noise 0.1)."""
    rng = np.random.default_rng(0)
    return [U.unit("A", f"{m}@test", rng.normal(s, 0.1, 6), phase="test") for m, s in shift.items()]


def test_sentences_say_better_worse_not_separated_and_not_measured():
    units = shifted(fixed=0.0, hypercontroller=5.0, random=-5.0, pbt=0.0, gp_ucb=0.0)
    units[-1].eval_reward[:] = 0.0  # gp_ucb: every evaluation 0
    s = V.verdict(units, reps=REPS).sentences
    mean = {m: final_eval(u).mean() for u in units for m in [u.meta["method"].removesuffix("@test")]}
    # 6 + 6 runs entirely apart: p = 2 / C(12, 6); no interval (a [1, 1] one would claim certainty)
    assert s["hypercontroller"] == (f"HC on 6 test seeds: better than the default, 1.00 (p = 0.0022), means "
                                    f"{mean['hypercontroller']:.4g} and {mean['fixed']:.4g}.")
    assert s["random"].startswith("R on 6 test seeds: worse than the default, and 6 of 6 runs collapsed (seed 100: ")
    assert s["random"].endswith("3 more; 0.86 expected by chance), 0.00 (p = 0.0022), means "
                                f"{mean['random']:.4g} and {mean['fixed']:.4g}.")
    assert s["pbt"].startswith("PBT on 6 test seeds: not separated from the default, ")
    assert s["gp_ucb"] == ("GP-UCB on 6 test seeds: not measured against the default (every evaluation scored 0: "
                           "the evaluation measured nothing).")


def test_a_study_without_a_sweep_or_a_default_compares_what_it_has():
    units = shifted(fixed=0.0, hypercontroller=5.0)
    rows = V.verdict(units, reps=REPS).rows
    assert {r["comparison"] for r in rows} == {verdict_text.BEATS_DEFAULT}  # no sweep: no share, no cost
    alone = V.verdict(shifted(hypercontroller=5.0), reps=REPS)
    assert alone.rows == [] and alone.sentences == {} and "Nothing to compare on these seeds" in alone.markdown


def test_a_unit_that_measured_nothing_is_said_everywhere_and_never_a_tie(tmp_path):
    units = U.study(0)
    for u in units:
        if u.meta["env"] == "A" and u.meta["method"] in ("hypercontroller@test", "fixed@test"):
            u.eval_reward[:] = 0.0  # both at 0: a tie at 0.5 if it were compared
    result = V.verdict(units, reps=REPS)
    words = "every evaluation scored 0: the evaluation measured nothing"
    assert result.flags == {"A / hypercontroller@test": words, "A / fixed@test": words}
    rows = {(r["env"], r["method"], r["comparison"]): r for r in result.rows if r["phase"] == "test"}
    row = rows[("A", "hypercontroller", verdict_text.BEATS_DEFAULT)]
    assert row["status"] == "not measured" and math.isnan(row["estimate"]) and words in row["note"]
    assert rows[(ALL, "hypercontroller", verdict_text.BEATS_DEFAULT)]["envs"] == ["B"]  # A left out, said so
    assert "left out A" in rows[(ALL, "hypercontroller", verdict_text.BEATS_DEFAULT)]["note"]
    assert rows[("A", "random", verdict_text.BEATS_DEFAULT)]["status"] == "not measured"
    assert "| HC | not measured |" in result.markdown and words in result.markdown
    assert f"- A / HC@test: {words}\n" in tables.summary(units)
    scores = study_scores(units)  # the study's statistics compare the tuning units; the verdict the test units
    assert "hypercontroller" in scores and not any("@" in m for m in scores) and "sweep" not in scores
    flags = {(u.meta["env"], u.meta["method"]): text for u in units if (text := measured_nothing(u))}
    study = {"path": tmp_path, "name": "x", "units": units, "env_names": {"A": "A", "B": "B"}, "single_seed": [],
             "flags": flags, "verdict": result, "rows": claims.claim_rows(units, 20),
             "budget": {"envs": ["A", "B"], "methods": ["hypercontroller"], "seeds": (5, 8), "iterations": [4],
                        "frames": (100, 100), "mean_frames": 100.0, "device": "cpu"}}
    page = claims.study_section(study, tmp_path)
    assert "#### The verdict on the test seeds" in page and words in page
    assert "| HC | not measured |" in page  # in A: not a tie


def test_the_claims_page_says_not_measured_where_a_method_measured_nothing_everywhere():
    units = [U.unit("A", "hypercontroller", [1.0, 2.0, 3.0]), U.unit("A", "random", [0.0, 0.0, 0.0]),
             U.unit("A", "fixed", [0.5, 1.5, 2.5])]
    units[1].eval_reward[:] = 0.0
    flags = {(u.meta["env"], u.meta["method"]): text for u in units if (text := measured_nothing(u))}
    table = claims.claims_table(claims.claim_rows(units, 20), flags=flags)
    assert "| R | not measured | not measured |" in table and "| Fixed | 0." in table


def test_the_table_has_one_row_per_comparison():
    result = V.verdict(U.study(0), reps=20)
    table = result.table
    assert list(table.columns) == list(V.COLUMNS)
    assert not table.duplicated(["phase", "env", "method", "comparison"]).any()
    assert set(table["phase"]) == {"test", "tuning"}
    assert json.loads(result.json())["rows"][0] == strict_json(result.rows[0])


@pytest.mark.slow  # matplotlib draws every figure of the study: about 8 CPU s
def test_hcjax_plot_writes_the_verdict_and_the_flags(tmp_path):
    units = U.study(0)
    units[0].eval_reward[:] = 0.0  # A / hypercontroller (tuning seeds): measured nothing
    store = StudyDir(tmp_path)
    for u in units:
        store.save_unit(u)
    paths = plots.plot(tmp_path, reps=50)
    report = paths["report"].read_text()
    assert report.index("## measured_nothing") < report.index("## verdict") < report.index("## results")
    assert "- A / HC: every evaluation scored 0: the evaluation measured nothing" in report
    assert paths["verdict"].read_text() == V.verdict(units, reps=50).markdown
    assert json.loads(paths["verdict_json"].read_text())["sentences"]["hypercontroller"].startswith("HC on 6 test")
    assert "![verdict_figure](figures/verdict.png)" in report and paths["verdict_figure"].stat().st_size > 0
    alone = plots.figure_verdict(V.verdict(shifted(hypercontroller=5.0), reps=20), tmp_path / "figures" / "alone.png")
    assert alone.stat().st_size > 0  # nothing to compare: a figure that says so


# ---- the command ---------------------------------------------------------------------------

def test_hcjax_verdict_exits_2_without_test_seeds_and_prints_the_markdown(tmp_path, capsys):
    tuning_only = StudyDir(tmp_path / "tuning")
    for u in U.study(0):
        if u.meta["phase"] == "tuning":
            tuning_only.save_unit(u)
    assert cli.main(["verdict", str(tmp_path / "tuning")]) == 2
    assert "this study has no test seeds: run it with test_seeds" in capsys.readouterr().err
    full = StudyDir(tmp_path / "full")
    for u in U.study(0):
        full.save_unit(u)
    assert cli.main(["verdict", str(tmp_path / "full"), "--json", str(tmp_path / "out" / "v.json")]) == 0
    expected = experiments.verdict(tmp_path / "full")
    assert capsys.readouterr().out == expected.markdown
    assert (tmp_path / "out" / "v.json").read_text() == expected.json()
    assert cli.main(["verdict", str(tmp_path / "full"), "--json", str(tmp_path)]) == 2  # a folder, not a file
    assert "is a folder" in capsys.readouterr().err


# ---- what the seeds can carry: the calls' A/A rate, the reference row, collapses, warnings ----

def aa_strata(rng, envs: int, n: int):
    """The default's and a method's test runs in `envs` environments of different reward scales,
    n each, drawn from one distribution: (method, default) as verdict.roles gives them."""
    scale = rng.uniform(0.1, 100.0, envs)
    side = lambda name: {f"E{e}": V.Stratum(name, scale[e] * rng.normal(size=n), None)  # noqa: E731
                         for e in range(envs)}
    return side("hypercontroller@test"), side("fixed@test")


@pytest.mark.slow  # 30000 rows of the verdict, one at a time: about 18 CPU s in all
@pytest.mark.parametrize("envs", [1, 2, 4])
def test_the_verdict_calls_one_distribution_better_or_worse_at_most_about_5_percent(envs):
    """P(> default) rows of the verdict on A/A strata, 2000 trials at group sizes from 2 to 20."""
    rng = np.random.default_rng(envs)
    for n in (2, 3, 4, 8, 20):
        statuses = [V.probability(*aa_strata(rng, envs, n), [f"E{e}" for e in range(envs)], 1, 0, 0.95)["status"]
                    for _ in range(2000)]
        rate = np.isin(statuses, ["better", "worse"]).mean()
        assert rate <= 0.07, (envs, n, rate)


def test_the_reference_row_is_the_default_against_itself_and_comes_first():
    units = U.study(0, n_test=9, n_tuning=8)
    result = V.verdict(units, reps=REPS)
    first = result.rows[0]
    assert (first["phase"], first["env"], first["method"]) == ("test", ALL, verdict_text.SEEDS_ALONE)
    strata = slow_strata(units, "test"), slow_strata(units, "tuning")
    want = slow_probability(strata[0]["fixed"], strata[1]["fixed"], ["A", "B"], 0)
    assert first["estimate"] == pytest.approx(want[0]) and first["status"] == want[3]
    sentence = next(iter(result.sentences.values()))
    assert sentence.startswith("The default on 9 test seeds in each of 2 environments against its own tuning seeds "
                               "(what the seeds alone can do): ")
    assert "| default, test seeds against tuning seeds (what the seeds alone can do) | 0." in result.markdown
    test_only = [u for u in units if u.meta["phase"] == "test"]  # no tuning default: no reference row
    assert not any(r["method"] == verdict_text.SEEDS_ALONE for r in V.verdict(test_only, reps=20).rows)


def test_a_warning_when_the_tuning_and_test_seeds_point_opposite_ways():
    rng = np.random.default_rng(0)
    units = [U.unit("A", "fixed", rng.normal(0.0, 1.0, 10)), U.unit("A", "hypercontroller", rng.normal(-0.3, 1.0, 10)),
             U.unit("A", "fixed@test", rng.normal(0.0, 1.0, 10), phase="test"),
             U.unit("A", "hypercontroller@test", rng.normal(3.0, 1.0, 10), phase="test")]
    result = V.verdict(units, reps=REPS)
    tuning = next(r for r in result.rows if r["phase"] == "tuning" and r["env"] == ALL)
    assert tuning["estimate"] <= 0.5 and len(result.warnings) == 1
    assert result.warnings[0].startswith(f"HC: better (1.00) on the test seeds but not separated "
                                         f"({tuning['estimate']:.2f}) on the tuning seeds: the two seed sets point "
                                         "opposite ways")
    assert "the default against itself across the two seed sets: 0." in result.warnings[0]
    assert f"- **Warning**: {result.warnings[0]}.\n" in result.markdown
    agree = [U.unit("A", "hypercontroller", rng.normal(3.0, 1.0, 10))] + units[:1] + units[2:]
    assert V.verdict(agree, reps=REPS).warnings == []


def test_collapsed_runs_are_named_in_a_table_and_counted_in_the_sentence():
    rng = np.random.default_rng(1)
    hc = rng.normal(5.0, 1.0, 10)
    hc[3] = -40.0  # seed 103 fell below every run of the default and of the poor default
    units = [U.unit("A", "fixed@test", rng.normal(0.0, 1.0, 10), phase="test"),
             U.unit("A", "fixed:lr_x10@test", rng.normal(-2.0, 1.0, 10), phase="test"),
             U.unit("A", "hypercontroller@test", hc, phase="test", hparam_names=["learning_rate"])]
    units[2].hparams[:, -1, 0] = np.linspace(1e-4, 1e-2, 10)
    result = V.verdict(units, reps=REPS)
    assert [(c["method"], c["seed"], c["score"]) for c in result.collapsed] == [("hypercontroller", 103, -40.0)]
    assert result.collapsed[0]["hyperparameters"] == {"learning_rate": pytest.approx(0.0034, rel=1e-5)}
    assert result.sentences["hypercontroller"].startswith(
        "HC on 10 test seeds: better than the default, but 1 of 10 runs collapsed (seed 103: -40, learning_rate "
        "0.0034), ")  # no chance figure: the poor default lowers the floor below the default's worst
    assert "| test | A | HC | 103 | -40 | " in result.markdown and "learning_rate 0.0034 |" in result.markdown
    row = next(r for r in result.rows if r["method"] == "hypercontroller" and r["env"] == ALL)
    assert row["collapsed"] == 1 and "1 collapsed" in verdict_text.cell(row)
    assert row["means"] == pytest.approx([hc.mean(), final_eval(units[0]).mean()])


def test_a_two_seed_study_says_too_few_seeds_to_tell_and_prints_no_interval():
    result = V.verdict(U.study(0, n_test=2, n_tuning=2), reps=REPS)  # the "0.00 [0.00, 0.00]"
    row = next(r for r in result.rows if (r["phase"], r["env"], r["method"], r["comparison"]) ==
               ("test", ALL, "hypercontroller", verdict_text.BEATS_DEFAULT))
    assert row["status"] == "too few seeds to tell" and np.isnan(row["low"])  # 2 + 2 on 2 tasks: p >= 2/36
    sentence = result.sentences["hypercontroller"]
    assert sentence.startswith("HC on 2 test seeds in each of 2 environments: too few seeds to tell (n = 2+2 per "
                               "task) against the default, ")
    assert "[" not in sentence.split(";")[0]
