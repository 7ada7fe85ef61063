"""`experiments.load` and `hcjax export`: the DataFrames against the unit files read
directly (a slow row-by-row reference), the CSV and Parquet files against the DataFrames,
and the export's edges (header-only tables, completeness, odd labels)."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import experiments
from experiments import cli
from experiments.reporting import export
from experiments.study.store import load_units

ROOT = Path(__file__).resolve().parent.parent
POPULATION_STUDY = ROOT / "results" / "population_study"


@pytest.fixture(scope="module")
def results():
    return experiments.load(POPULATION_STUDY)


def reference_rows(path: Path) -> tuple[list[dict], list[dict], list[dict]]:
    """The three tables' rows of one unit file, read with np.load and json alone, one
    Python loop per row."""
    with np.load(path) as z:
        a = {k: z[k] for k in z.files}
    meta = json.loads(str(a["meta"]))
    config = meta["config"]
    space = {e["name"]: e for e in config["space"]}
    S, T = a["train_reward"].shape
    ends = sorted({t for t in range(1, T + 1) if t % config["eval_every"] == 0 or t == T
                   or (meta["method"] in ("pbt", "pb2_population", "hypercontroller_shared")
                       and t % config["tune_every"] == 0)})
    times = meta["segment_seconds"]
    keys = {"study": meta["study_key"], "env": meta["env"], "method": meta["method"]}
    its, evs, lin = [], [], []
    for s in range(S):
        total = 0
        for t in range(T):
            total += int(a["frames"][s, t])
            wall = sum(times[:[i for i, e in enumerate(ends) if e >= t + 1][0] + 1])
            row = dict(keys, seed=int(a["seeds"][s]), iteration=t + 1, frames=int(a["frames"][s, t]),
                       total_frames=total, wall_seconds=wall, train_reward=a["train_reward"][s, t],
                       objective=a["objective"][s, t], episode_return=a["episode_return"][s, t],
                       rejected=int(a["rejected"][s, t]), tuner_time=a["tuner_time"][t])
            for i, name in enumerate(meta["hparam_names"]):
                v = float(a["hparams"][s, t, i])
                row[f"hp_{name}"] = int(round(v)) if space[name].get("integer") else np.float32(v)
            its.append(row)
            if t + 1 in a["eval_iteration"]:
                e = list(a["eval_iteration"]).index(t + 1)
                evs.append(dict(keys, seed=int(a["seeds"][s]), iteration=t + 1, total_frames=total,
                                wall_seconds=wall, eval_reward=a["eval_reward"][s, e]))
        for k in range(len(a.get("lineage_iteration", []))):
            lin.append(dict(keys, seed=int(a["seeds"][s]), iteration=int(a["lineage_iteration"][k]),
                            parent=int(a["seeds"][a["lineage_parent"][s, k]]),
                            objective=a["lineage_objective"][s, k]))
    return its, evs, lin


def assert_rows_equal(frame: pd.DataFrame, rows: list[dict]) -> None:
    assert len(frame) == len(rows)
    expected = pd.DataFrame(rows)
    assert list(frame.columns) == list(expected.columns)
    for col in frame.columns:
        got, want = frame[col].to_numpy(), expected[col].to_numpy()
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-12, atol=0)
        else:
            assert got.tolist() == want.tolist(), col


def test_load_matches_the_unit_files_row_by_row(results):
    paths = {f"{u.meta['env']}__{u.meta['method']}.npz": u for u in results.units}
    assert len(paths) == 20 and any(u.lineage_parent.size for u in results.units)
    its, evs, lin = [], [], []
    for name in paths:  # the units in the loader's (manifest) order
        a, b, c = reference_rows(POPULATION_STUDY / "units" / name)
        its, evs, lin = its + a, evs + b, lin + c
    assert_rows_equal(results.iterations, its)
    assert_rows_equal(results.evaluations, evs)
    assert_rows_equal(results.lineage, lin)
    assert results.iterations["hp_batch_size"].dtype == np.int64
    assert results.iterations["train_reward"].dtype == np.float32


def assert_frames_equal(got: pd.DataFrame, want: pd.DataFrame) -> None:
    assert list(got.columns) == list(want.columns) and len(got) == len(want)
    for col in want.columns:
        if want[col].dtype.kind == "f":  # CSV reads float64: the float32 text reads back to the same float32
            np.testing.assert_array_equal(got[col].to_numpy(np.float64).astype(want[col].dtype), want[col].to_numpy())
        else:
            assert got[col].tolist() == want[col].tolist(), col


def test_export_files_read_back_equal_the_frames(results, tmp_path):
    assert cli.main(["export", str(POPULATION_STUDY), "--out", str(tmp_path / "x"), "--format", "csv",
                     "parquet"]) == 0
    for name in export.TABLES:
        want = getattr(results, name)
        assert_frames_equal(pd.read_csv(tmp_path / "x" / f"{name}.csv", **export.CSV_READ_OPTIONS), want)
        parquet = pd.read_parquet(tmp_path / "x" / f"{name}.parquet")
        assert [str(t) for t in parquet.dtypes] == [str(t) for t in want.dtypes]
        assert_frames_equal(parquet, want)
    marker = json.loads((tmp_path / "x" / export.MARKER).read_text())
    assert marker["rows"] == {name: len(getattr(results, name)) for name in export.TABLES}


def test_non_finite_values_survive(tmp_path):
    units = load_units(POPULATION_STUDY)[:1]
    units[0].train_reward[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    export.write(units, tmp_path / "x")
    got = pd.read_csv(tmp_path / "x" / "iterations.csv", **export.CSV_READ_OPTIONS)
    assert_frames_equal(got, experiments.reporting.frames.frames(units).iterations)
    assert np.signbit(got["train_reward"][3])


def test_a_study_without_population_units_has_a_header_only_lineage(tmp_path):
    units = [u for u in load_units(POPULATION_STUDY) if not u.lineage_parent.size][:2]
    export.write(units, tmp_path / "x", formats=("csv", "parquet"))
    for table in (pd.read_csv(tmp_path / "x" / "lineage.csv"), pd.read_parquet(tmp_path / "x" / "lineage.parquet")):
        assert len(table) == 0
        assert list(table.columns) == ["study", "env", "method", "seed", "iteration", "parent", "objective"]


def test_an_interrupted_export_leaves_the_previous_one_whole(tmp_path, monkeypatch):
    units = load_units(POPULATION_STUDY)[:2]
    export.write(units, tmp_path / "x")
    before = {p.name: p.read_bytes() for p in (tmp_path / "x").iterdir()}

    def broken(u):
        raise RuntimeError("killed")

    monkeypatch.setitem(export.BUILDERS, "lineage", broken)
    with pytest.raises(RuntimeError, match="killed"):
        export.write(units[:1], tmp_path / "x")
    assert {p.name: p.read_bytes() for p in (tmp_path / "x").iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x"]  # no temporary directory left


def test_an_out_holding_other_files_is_refused(tmp_path, capsys):
    (tmp_path / "lineage.csv").write_text("\n")  # an export of before export.json is replaced
    export.write(load_units(POPULATION_STUDY)[:1], tmp_path)
    assert len(pd.read_csv(tmp_path / "lineage.csv").columns) == 7
    (tmp_path / export.MARKER).unlink()
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not an hcjax export"):
        export.write(load_units(POPULATION_STUDY)[:1], tmp_path)
    assert cli.main(["export", str(POPULATION_STUDY), "--out", str(tmp_path)]) == 2
    assert (tmp_path / "notes.txt").read_text() == "mine"


def relabelled(unit, env: str, method: str):
    u = copy.copy(unit)
    u.meta = dict(unit.meta, env=env, method=method)
    return u


def test_odd_labels_are_written_readably(tmp_path):
    unit = load_units(POPULATION_STUDY)[0]
    labels = [("=1+2", "+x"), ("-cmd", "@sum"), ("NA", "null"), ("nan", "ok\ud800")]
    units = [relabelled(unit, env, method) for env, method in labels]
    export.write(units, tmp_path / "x", formats=("csv", "parquet"))
    csv = pd.read_csv(tmp_path / "x" / "evaluations.csv", **export.CSV_READ_OPTIONS)
    pairs = list(dict.fromkeys(zip(csv["env"], csv["method"])))
    assert pairs == [("'=1+2", "'+x"), ("'-cmd", "'@sum"), ("NA", "null"), ("nan", "ok\\ud800")]
    parquet = pd.read_parquet(tmp_path / "x" / "evaluations.parquet")
    assert list(dict.fromkeys(zip(parquet["env"], parquet["method"])))[0] == ("=1+2", "+x")
    assert np.isnan(csv["eval_reward"]).sum() == np.isnan(parquet["eval_reward"]).sum()


def test_duplicate_hparam_names_and_bad_formats_are_refused(tmp_path, capsys):
    unit = load_units(POPULATION_STUDY)[0]
    unit.meta["hparam_names"] = ["lr", "clip", "lr", "batch"]
    with pytest.raises(ValueError, match=r"\['lr'\] more than once"):
        export.write([unit], tmp_path / "x")
    with pytest.raises(ValueError, match="format"):
        export.write([unit], tmp_path, formats=("xlsx",))
    assert cli.main(["export", str(tmp_path / "nothing")]) == 2
    assert "nothing" in capsys.readouterr().err


def test_categoricals_are_their_options_and_missing_segment_times_are_nan(tmp_path):
    unit = load_units(POPULATION_STUDY)[0]
    space = [dict(e) for e in unit.meta["config"]["space"]]
    space[1] = {"name": "clip_eps", "options": ["small", "=big"]}
    space[3] = {"name": "batch_size", "options": [32, 64, 128]}
    index = np.arange(unit.hparams[..., 0].size).reshape(unit.hparams.shape[:2])
    unit.hparams[..., 1], unit.hparams[..., 3] = index % 2, index % 3
    unit.meta = dict(unit.meta, config=dict(unit.meta["config"], space=space))
    del unit.meta["segment_seconds"]
    it = experiments.reporting.frames.frames([unit]).iterations
    assert it["hp_clip_eps"].tolist() == [["small", "=big"][i % 2] for i in index.reshape(-1)]
    assert it["hp_batch_size"].tolist() == [(32, 64, 128)[i % 3] for i in index.reshape(-1)]
    assert it["hp_batch_size"].dtype == np.int64 and it["wall_seconds"].isna().all()
    export.write([unit], tmp_path / "x")
    csv = pd.read_csv(tmp_path / "x" / "iterations.csv", **export.CSV_READ_OPTIONS)
    assert set(csv["hp_clip_eps"]) == {"small", "'=big"} and csv["wall_seconds"].isna().all()
    assert csv["hp_batch_size"].tolist() == it["hp_batch_size"].tolist()
