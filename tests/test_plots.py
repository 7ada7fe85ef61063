"""experiments.reporting.plots and tables: ranking without evaluations, the aggregate outputs of `plot()` on a
small synthetic study, and figures with deterministic bytes."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from experiments.reporting import plots, tables
from experiments.reporting import stats as ST
from experiments.study import store as R

ROOT = Path(__file__).resolve().parent.parent
CPU_STUDY = ROOT / "results" / "cpu_study"


def unit(env: str, method: str, seeds: int, rng, final=None, iterations: int = 20, evals: int = 2):
    """A UnitResult of random numbers; `final`: (seeds,) final evaluation reward sums."""
    S, T = seeds, iterations
    eval_reward = rng.normal(0.0, 10.0, (S, evals))
    if final is not None:
        eval_reward[:, -1] = final
    return R.UnitResult(
        seeds=np.arange(S, dtype=np.int32), train_reward=rng.normal(size=(S, T)).astype(np.float32),
        objective=rng.normal(size=(S, T)).astype(np.float32), hparams=rng.uniform(size=(S, T, 4)).astype(np.float32),
        frames=np.full((S, T), 256, np.int64), rejected=np.zeros((S, T), np.int32),
        episode_return=rng.normal(size=(S, T)).astype(np.float32),
        eval_iteration=np.linspace(T // evals, T, evals).astype(np.int32), eval_reward=eval_reward.astype(np.float32),
        tuner_time=rng.uniform(1e-4, 1e-3, T), meta=dict(env=env, method=method))


def synthetic_study(out: Path) -> list[R.UnitResult]:
    """Env A: three methods, 'random' without a finite final evaluation (NaN for every seed);
    env B: no 'fixed' unit, 'hypercontroller' with 2 seeds and one NaN seed. Saved to out."""
    rng = np.random.default_rng(0)
    units = [
        unit("A", "hypercontroller", 3, rng, final=[30.0, 10.0, 20.0]),
        unit("A", "random", 3, rng, final=[np.nan] * 3),
        unit("A", "fixed", 3, rng, final=[0.0, 5.0, 40.0]),
        unit("B", "hypercontroller", 2, rng, final=[-1.0, np.nan]),
        unit("B", "random", 3, rng, final=[-3.0, -2.0, -5.0]),
    ]
    study = R.StudyDir(out)
    for u in units:
        study.save_unit(u)
    return units


def test_ranks_skip_methods_without_a_finite_median():
    assert tables.ranks({"a": 1.0, "b": np.nan, "c": 3.0, "d": 3.0}) == {"a": 3, "b": None, "c": 1, "d": 1}
    assert tables.ranks({"a": np.nan}) == {"a": None}


def test_results_table_says_what_is_missing_and_ranks_nothing_without_an_evaluation(tmp_path):
    units = synthetic_study(tmp_path)
    rows = {(r["env"], r["method"]): r for r in tables.results_rows(units)}
    assert rows[("A", "random")]["rank"] is None
    assert rows[("A", "hypercontroller")]["rank"] == 1 and rows[("A", "fixed")]["rank"] == 2  # medians 20, 5
    assert rows[("B", "hypercontroller")]["rank"] == 1 and rows[("B", "random")]["rank"] == 2  # -1 vs -3
    table = tables.results_table(units)
    assert "| A | 20 [15, 25] (1) | evaluations all NaN | 5 [2.5, 22.5] (2) |" in table  # evaluated: all NaN
    assert "| B | -1 [-1, -1] (1) | -3 [-4, -2.5] (2) | no unit |" in table


REPS = 100  # bootstrap replicates of the synthetic study's plots


@pytest.fixture(scope="module")
def synthetic_plotted(tmp_path_factory):
    """(directory, units, plot()'s paths) of the synthetic study plotted once (REPS
    replicates): the aggregate test reads it, the replotting test plots it again."""
    out = tmp_path_factory.mktemp("synthetic")
    units = synthetic_study(out)
    return out, units, plots.plot(out, reps=REPS)


@pytest.mark.slow
def test_plot_writes_the_aggregate_outputs_of_a_synthetic_study(synthetic_plotted):
    tmp_path, units, paths = synthetic_plotted
    for name in ("aggregate.png", "probability_of_improvement.png", "performance_profile.png",
                 "fig1_tuning_time.png", "fig1_iterations.png", "fig2_final.png"):
        png = (tmp_path / "figures" / name).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and b"Software" not in png
    got = json.loads((tmp_path / "tables" / "aggregate.json").read_text())
    assert paths["aggregate_json"] == tmp_path / "tables" / "aggregate.json"
    expected = ST.summarise(plots.study_scores(units), reps=REPS)
    # normalisation over the study: A from 0 (fixed) to 40 (fixed), B from -5 to -1
    assert got["normalisation"]["reference"] == {"A": [0.0, 40.0], "B": [-5.0, -1.0]}
    hc = got["aggregates"]["hypercontroller"]
    # HC's runs: A 30/40, 10/40, 20/40 and B (−1 + 5)/4 = 1 -> pooled .25 .5 .75 1: IQM .625
    assert hc["iqm"] == pytest.approx(0.625) and hc["runs"] == 4
    assert hc["mean"] == pytest.approx((0.5 + 1.0) / 2)
    assert hc["iqm_ci"] == pytest.approx(expected["aggregates"]["hypercontroller"]["iqm_ci"])
    assert got["aggregates"]["random"]["envs"] == ["B"] and got["aggregates"]["random"]["missing_envs"] == ["A"]
    assert got["aggregates"]["fixed"]["missing_envs"] == ["B"]
    vs = got["improvement"]["vs"]
    assert got["improvement"]["baseline"] == "hypercontroller" and set(vs) == {"random", "fixed"}
    assert vs["random"]["p"] == 1.0 and vs["random"]["envs"] == ["B"]  # -1 beats -3, -2, -5
    assert vs["fixed"]["p"] == pytest.approx(6.0 / 9.0)  # each of 30, 10, 20 beats 0 and 5, not 40
    assert len(got["profile"]["taus"]) == len(ST.TAUS)
    table = (tmp_path / "tables" / "aggregate.md").read_text()
    assert "relative to this study" in table
    assert "| HC | 4 / 2 | 0.625 [" in table
    assert "| R | 3 / 1 |" in table and "R has no score on A" in table and "Fixed has no score on B" in table
    assert "One seed only in B / HC" in table
    report = (tmp_path / "report.md").read_text()
    for link in ("figures/aggregate.png", "figures/probability_of_improvement.png",
                 "figures/performance_profile.png", "tables/aggregate.json", "## aggregate"):
        assert link in report


def test_plot_without_hypercontroller_still_writes_every_output(tmp_path):
    rng = np.random.default_rng(1)
    R.StudyDir(tmp_path).save_unit(unit("A", "random", 1, rng, final=[1.0]))
    plots.plot(tmp_path, reps=50)
    got = json.loads((tmp_path / "tables" / "aggregate.json").read_text())
    assert got["improvement"]["vs"] == {} and got["aggregates"]["random"]["iqm"] == 0.5  # a single run
    assert "No HC (hypercontroller) units in this study: there is no claim to test" in \
        (tmp_path / "tables" / "aggregate.md").read_text()
    assert (tmp_path / "figures" / "probability_of_improvement.png").stat().st_size > 1000


def outputs(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for d in ("figures", "tables") for p in sorted((out / d).iterdir())}


def test_plot_of_a_directory_without_units_names_it(tmp_path):
    with pytest.raises(ValueError, match=f"no finished units in {R.StudyDir(tmp_path).units_dir}"):
        plots.plot(tmp_path)


@pytest.mark.slow
def test_replotting_gives_byte_identical_files(synthetic_plotted):
    """Plotting again over a study's earlier figures and tables rewrites the same bytes (a
    fresh directory's plot equals the committed bytes: test_a_committed_study_replots_to_the_same_bytes)."""
    one = synthetic_plotted[0]
    first = outputs(one)  # plotted once by the fixture
    plots.plot(one, reps=REPS)  # again into the same directory
    assert len(first) == 11
    assert outputs(one) == first


def test_log_limits_snap_to_tick_values():
    assert plots._log_limits(np.array([0.0123, 0.0456])) == pytest.approx((0.01, 0.05))
    assert plots._log_limits(np.array([3.2e-5, 0.0199, np.nan, 0.0])) == pytest.approx((3e-5, 0.02))
    assert plots._log_limits(np.array([0.02])) == pytest.approx((0.02, 0.2))
    assert plots._log_limits(np.array([9.5])) == pytest.approx((9.0, 10.0))


COMMITTED = sorted(p.parent.name for p in (ROOT / "results").glob("*/manifest.json"))


@pytest.fixture(scope="module")
def replotted(tmp_path_factory):
    """name -> a copy of committed study `name` (its units and manifest) replotted by
    `plots.plot` in this process, drawn once for every test that reads it."""
    done = {}

    def replot(name: str) -> Path:
        if name not in done:
            study, copy = ROOT / "results" / name, tmp_path_factory.mktemp("replot") / name
            copy.mkdir()
            shutil.copytree(study / "units", copy / "units")
            shutil.copy(study / "manifest.json", copy / "manifest.json")
            plots.plot(copy)
            done[name] = copy
        return done[name]

    return replot


FIG1 = """
import sys
from experiments.reporting import plots
from experiments.study import store as R
plots.figure1(R.load_units(sys.argv[1]), sys.argv[2], "time")
print("imported:", sorted(m for m in ("agents", "flax", "optax", "gymnax") if m in sys.modules))
"""


@pytest.mark.slow
def test_tuning_time_figure_has_the_same_bytes_with_and_without_avx512(replotted, tmp_path):
    # The committed cpu_study's Figure 1 has a tick within 0.01 px of an axes edge; with
    # autoscaled log limits it was drawn differently when NumPy used AVX-512 (last bits of
    # log10). Drawn in this process (with the CPU features it runs with) and in a second
    # process with AVX-512 disabled where this CPU has it.
    from numpy._core._multiarray_umath import __cpu_features__ as features

    off = [f for f in ("AVX512_SPR", "AVX512_ICL", "AVX512_SKX", "X86_V4") if features.get(f)]
    env = dict(os.environ)
    if off:
        env["NPY_DISABLE_CPU_FEATURES"] = " ".join(off)
    png = tmp_path / "fig.png"
    child = subprocess.run([sys.executable, "-c", FIG1, str(CPU_STUDY), str(png)], cwd=ROOT, env=env, check=True,
                           timeout=300, capture_output=True, text=True)
    # the same process also shows that reading and plotting a study leaves the agents stack unimported
    assert "imported: []" in child.stdout, child.stdout + child.stderr
    assert png.read_bytes() == (replotted("cpu_study") / "figures" / "fig1_tuning_time.png").read_bytes()


def drawn_files(study: Path) -> dict[str, bytes]:
    """Every figure, table and the report of a study directory: relative path -> bytes."""
    files = list(study.glob("figures/*")) + list(study.glob("tables/*")) + [study / "report.md"]
    return {str(f.relative_to(study)): f.read_bytes() for f in files}


@pytest.mark.parametrize("name", COMMITTED)
@pytest.mark.slow
def test_a_committed_study_replots_to_the_same_bytes(name, replotted):
    """`hcjax plot` on a copy of a committed study's units and manifest redraws its figures,
    tables and report byte for byte."""
    committed, redrawn = drawn_files(ROOT / "results" / name), drawn_files(replotted(name))
    assert sorted(redrawn) == sorted(committed)
    assert [f for f in committed if committed[f] != redrawn[f]] == []


def test_every_committed_study_is_checked():
    assert COMMITTED == ["cpu_learn_study", "cpu_study", "gpu_h100_5b602f1", "headroom_study", "population_study",
                         "verdict_study"]


def test_lineage_copies_are_every_replaced_agent_before_the_last_iteration_step_by_step():
    """plots._copies against the loop the lineage figure ran before it drew one collection per panel."""
    rng = np.random.default_rng(3)
    S, T, K = 5, 12, 4
    u = unit("A", "pbt", S, rng, iterations=T)
    u.lineage_iteration = np.array([3, 6, 9, 12], np.int32)  # the step at 12 = T has no later iteration
    u.lineage_parent = np.where(rng.uniform(size=(S, K)) < 0.5, rng.integers(0, S, (S, K)), np.arange(S)[:, None])
    want = [(int(it), i, int(u.lineage_parent[i, col])) for col, it in enumerate(u.lineage_iteration) if it < T
            for i in np.nonzero(u.lineage_parent[:, col] != np.arange(S))[0]]
    it, agent, donor = plots._copies(u)
    assert len(want) > 3 and list(zip(it.tolist(), agent.tolist(), donor.tolist())) == want


def test_quartiles_equal_numpys_nanpercentile_bit_for_bit():
    """views.quartiles / nan_percentiles against np.nanpercentile (the slow reference: a Python
    loop over columns) on random columns with NaN, all-NaN columns, one number, ties and
    infinities, for the quartiles and other percentiles: equal numbers and signs (but a zero's,
    where a column holds both 0.0 and -0.0)."""
    from experiments.reporting import views
    rng = np.random.default_rng(0)
    for seeds in (1, 2, 3, 5, 8, 13):
        x = rng.normal(size=(seeds, 400)) * 10.0 ** rng.integers(-3, 4, size=400)
        x[rng.random(x.shape) < 0.3] = np.nan
        x[:, :5] = np.nan  # columns of NaN
        x[:, 5:10] = np.round(x[:, 5:10])  # ties
        x[0, 10:13] = [np.inf, -np.inf, np.inf]
        with np.errstate(invalid="ignore"), pytest.warns(RuntimeWarning):
            want = np.nanpercentile(x, [25, 50, 75], axis=0)
        got = np.stack(views.quartiles(x))
        numbers = ~np.isnan(want) & (want != 0)  # a zero's sign follows numpy's partition order of 0.0 and -0.0
        assert np.array_equal(got, want, equal_nan=True) and np.array_equal(np.signbit(got[numbers]),
                                                                            np.signbit(want[numbers]))
        others = (0, 10, 33.3, 90, 100)
        with np.errstate(invalid="ignore"), pytest.warns(RuntimeWarning):
            want = np.nanpercentile(x, others, axis=0)
        assert np.array_equal(views.nan_percentiles(x, others), want, equal_nan=True), seeds
    assert views.quartiles(np.ones((2, 3, 4)))[1].shape == (3, 4)  # (S, ...) keeps its trailing shape
