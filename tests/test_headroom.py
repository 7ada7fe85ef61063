"""Headroom (experiments.reporting.headroom) on fabricated units against a loop, the ceiling
sentence, and the verdict's recovery measured on the runs started from the poor default (and
named for what it is where a study has none). NumPy only: nothing is trained."""
import numpy as np
import pytest

from experiments.reporting import headroom as H
from experiments.reporting import stats as ST
from experiments.reporting import verdict as V
from experiments.reporting import verdict_text
from experiments.reporting.views import ALL
from tests import verdict_units as U


def with_default(sweep_unit, per_draw: int):
    """The fabricated sweep drawn with `default`: the first configuration of every draw is the default."""
    sweep_unit.meta["sweep"].update(default=True, per_draw=per_draw)
    return sweep_unit


def slow_headroom(default_runs, sweep_scores, configuration, skip):
    """(configurations, better, best) by loops: each configuration's mean over its rows against the
    default's mean plus its seed standard deviation (ddof 1); `skip`: the default's own configurations."""
    mean = sum(default_runs) / len(default_runs)
    sigma = (sum((x - mean) ** 2 for x in default_runs) / (len(default_runs) - 1)) ** 0.5
    count, better, best = 0, 0, -np.inf
    for c in sorted(set(configuration)):
        if c in skip:
            continue
        rows = [s for s, k in zip(sweep_scores, configuration) if k == c]
        m = sum(rows) / len(rows)
        count += 1
        better += m - mean > sigma
        best = max(best, m)
    return count, better, best


def test_headroom_equals_a_loop_on_fabricated_units():
    rng = np.random.default_rng(0)
    for _ in range(50):
        k, per_draw, draws = int(rng.integers(1, 4)), int(rng.integers(2, 6)), int(rng.integers(1, 3))
        n = per_draw * draws
        scores = np.round(rng.normal(0.0, 1.0, n * k), 1)
        sweep = with_default(U.sweep("A", scores, k), per_draw)
        fixed = U.unit("A", "fixed", np.round(rng.normal(0.3, 0.5, 6), 1))
        room = H.headroom([sweep, fixed])["A"]
        configuration = [j // k for j in range(n * k)]
        skip = {r * per_draw for r in range(draws)}
        count, better, best = slow_headroom(list(fixed.eval_reward[:, -1].astype(float)), list(scores),
                                            configuration, skip)
        assert (room.configurations, room.better) == (count, better)
        assert room.best == pytest.approx(best, abs=1e-5)
        assert room.ceiling == (better == 0)
        alone = H.of_env("A", sweep)  # without the fixed unit: the default's rows of the sweep
        own = [s for s, c in zip(scores, configuration) if c in skip]
        if len(own) >= 2:
            assert alone.default_runs == len(own)
            assert alone.default_mean == pytest.approx(np.mean(own), abs=1e-5)


def test_a_default_at_the_ceiling_gets_the_sentence_and_room_does_not():
    tied = U.sweep("A", np.array([500.0, 500.0, 500.0, 480.0, 300.0, 290.0]), 2)  # the best ties the default
    fixed = U.unit("A", "fixed", np.array([500.0, 500.0, 498.0, 500.0]))
    room = H.headroom([tied, fixed])["A"]
    assert room.ceiling and room.better == 0
    text = H.sentence(room)
    assert "none of 3" in text
    assert ("the default is at this task's ceiling, as far as this sweep and these seeds can tell: "
            "no tuner can beat it here") in text
    roomy = U.sweep("B", np.array([-900.0, -880.0, -300.0, -320.0, -1200.0, -1100.0]), 2)
    poor_default = U.unit("B", "fixed", np.array([-1000.0, -950.0, -1050.0, -980.0]))
    room = H.headroom([roomy, poor_default])["B"]
    assert room.better == 2 and not room.ceiling
    text = H.sentence(room)
    assert "ceiling" not in text and "2 of 3 sweep configurations (67%) beat it" in text


def test_the_verdict_leads_with_the_headroom():
    result = V.verdict(U.study(0), reps=20)
    assert set(result.headroom) == {"A", "B"}
    text = result.markdown
    assert text.startswith("### Headroom (tuning seeds, before any test seed)")
    assert text.index("### Headroom") < text.index("### On the test seeds")


def started(units, method: str, poor: str, shift: float, rng) -> list:
    """Units of `method` started from poor default `poor` (tuning and test), scores around `shift`."""
    out = []
    for env, scale in (("A", 1.0), ("B", 10.0)):
        out.append(U.unit(env, f"{method}:{poor}", np.round(scale * rng.normal(shift, 1.0, 5), 1), rng=rng))
        out.append(U.unit(env, f"{method}:{poor}@test", np.round(scale * rng.normal(shift, 1.0, 6), 1),
                          phase="test", rng=rng))
    return units + out


def test_recovery_is_measured_on_the_runs_started_from_the_poor_default():
    """HC started at lr_x10 gets a recovery from its own started runs; random, which never started
    there, gets the level of its ordinary runs, named as such."""
    rng = np.random.default_rng(3)
    units = started(U.study(0), "hypercontroller", "lr_x10", -1.0, rng)
    result = V.verdict(units, reps=20)
    rows = {(r["method"], r["comparison"]): r for r in result.rows if r["env"] == ALL and r["phase"] == "test"}
    recovery = rows[("hypercontroller", verdict_text.RECOVERY + "lr_x10")]
    plain = V.verdict(U.study(0), reps=20)
    landing = {(r["method"], r["comparison"]): r for r in plain.rows if r["env"] == ALL and r["phase"] == "test"}
    assert ("hypercontroller", verdict_text.LANDING + "lr_x10") in landing  # the study without started runs
    assert recovery["estimate"] < landing[("hypercontroller", verdict_text.LANDING + "lr_x10")]["estimate"]
    strata = V.roles(units, "test")
    by_hand = V.share(strata["hypercontroller:lr_x10"], strata["fixed:lr_x10"], strata["fixed"],
                      _normalised(strata), ["A", "B"], 20, 0, 0.95)
    assert recovery["estimate"] == pytest.approx(by_hand["estimate"])
    assert ("random", verdict_text.LANDING + "lr_x10") in rows  # random never started there
    assert "started at the poor default lr_x10, recovers" in result.sentences["hypercontroller"]
    assert "not a recovery: it never started at lr_x10" in result.sentences["random"]
    assert "hypercontroller:lr_x10" not in result.sentences  # not a method of its own


def _normalised(strata):
    """Unit method -> env -> normalised scores, as the verdict normalises one phase's runs."""
    measured = {}
    for side in strata.values():
        for env, s in side.items():
            measured.setdefault(s.name, {})[env] = s.scores
    return ST.normalise(measured)


def test_the_table_beside_arlbench_holds_its_medians_and_ours_per_draw():
    """On a fabricated Pendulum-v1 study: ARLBench's released incumbents as median [min, max] over
    its 5 optimisation seeds, our default's means, and our sweep's incumbents per draw (the test
    unit's rows split by draw), computed here by hand."""
    rng = np.random.default_rng(5)
    units = [u for u in U.study(0, envs=("Pendulum-v1",))]
    test = next(u for u in units if u.meta["method"] == "sweep@test")
    test.meta["incumbents"] = [{"configuration": 0, "tuning_mean": -300.0}, {"configuration": 5, "tuning_mean": -250.0}]
    test.eval_reward = np.round(rng.normal(-400.0, 50.0, (6, 2)), 1).astype(np.float32)  # draws of 3 test seeds each
    result = V.verdict(units, reps=20)
    rows = {r[0]: r for r in result.beside["Pendulum-v1"]}
    assert rows["ARLBench random search incumbent (5 optimisation seeds)"][1] == "-905.9 [-952.3, -689.2]"
    assert rows["ARLBench PBT incumbent (5 optimisation seeds)"][1] == "-701 [-997, -563.8]"
    assert rows["ARLBench random configuration (median of 160)"][1] == "-1216"
    fixed = next(u for u in units if u.meta["method"] == "fixed")
    assert rows["our default"][1] == f"{fixed.eval_reward[:, -1].mean():.4g}"
    draws = [test.eval_reward[:3, -1].mean(), test.eval_reward[3:, -1].mean()]
    ours = rows["our sweep incumbent (2 draws)"]
    assert ours[1] == "-275 [-300, -250]"
    assert ours[2] == f"{np.median(draws):.4g} [{min(draws):.4g}, {max(draws):.4g}]"
    assert "HC" in rows and rows["HC"][3].startswith("0.")  # the verdict's P(> default) cell
    assert "### Beside ARLBench's released runs" in result.markdown


def test_the_headroom_figure_draws_every_environment_with_a_sweep(tmp_path):
    from experiments.reporting import plots
    units = U.study(0)
    path = plots.figure_headroom(units, tmp_path / "headroom.png")
    assert path.read_bytes().startswith(b"\x89PNG") and path.stat().st_size > 10_000
    assert plots.figure_headroom([u for u in units if u.meta["method"] != "sweep"], tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()
