"""`hcjax export`: tidy tables round-trip the unit files (CSV and Parquet)."""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pyarrow.parquet
import pytest

from experiments import cli
from experiments.reporting import export
from experiments.study.store import load_units

ROOT = Path(__file__).resolve().parent.parent
POPULATION_STUDY = ROOT / "results" / "population_study"


def read_csv(path: Path) -> dict[str, list[str]]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return {name: [r[i] for r in rows[1:]] for i, name in enumerate(rows[0])}


def rows_of(table: dict[str, list], env: str, method: str, seed: int) -> np.ndarray:
    return np.flatnonzero((np.asarray(table["env"]) == env) & (np.asarray(table["method"]) == method)
                          & (np.asarray(table["seed"]).astype(int) == seed))


def check_against_units(tables: dict[str, dict[str, list]], units) -> None:
    """Every array of every unit is found, value for value, in the tidy tables."""
    it, ev, lin = tables["iterations"], tables["evaluations"], tables["lineage"]
    assert len(it["env"]) == sum(u.train_reward.size for u in units)
    assert len(ev["env"]) == sum(u.eval_reward.size for u in units)
    assert len(lin.get("env", [])) == sum(u.lineage_parent.size for u in units)
    for u in units:
        env, method = u.meta["env"], u.meta["method"]
        for s, seed in enumerate(u.seeds):
            rows = rows_of(it, env, method, int(seed))
            T = u.train_reward.shape[1]
            np.testing.assert_array_equal(np.asarray(it["iteration"])[rows].astype(int), np.arange(1, T + 1))
            for name in export.PER_ITERATION:
                got = np.asarray(it[name])[rows].astype(getattr(u, name).dtype)
                np.testing.assert_array_equal(got, getattr(u, name)[s])
            np.testing.assert_array_equal(np.asarray(it["tuner_time"])[rows].astype(np.float64), u.tuner_time)
            for i, hp in enumerate(u.meta["hparam_names"]):
                got = np.asarray(it[f"hp_{hp}"])[rows].astype(np.float32)
                np.testing.assert_array_equal(got, u.hparams[s, :, i])
            rows = rows_of(ev, env, method, int(seed))
            np.testing.assert_array_equal(np.asarray(ev["iteration"])[rows].astype(int), u.eval_iteration)
            np.testing.assert_array_equal(np.asarray(ev["eval_reward"])[rows].astype(np.float32), u.eval_reward[s])
            if u.lineage_parent.size:
                rows = rows_of(lin, env, method, int(seed))
                np.testing.assert_array_equal(np.asarray(lin["iteration"])[rows].astype(int), u.lineage_iteration)
                np.testing.assert_array_equal(np.asarray(lin["parent"])[rows].astype(int),
                                              u.seeds[u.lineage_parent[s]])
                np.testing.assert_array_equal(np.asarray(lin["objective"])[rows].astype(np.float32),
                                              u.lineage_objective[s])


def test_csv_round_trips_the_population_study(tmp_path):
    units = load_units(POPULATION_STUDY)
    assert any(u.lineage_parent.size for u in units) and any(not u.lineage_parent.size for u in units)
    assert cli.main(["export", str(POPULATION_STUDY), "--out", str(tmp_path)]) == 0
    tables = {name: read_csv(tmp_path / f"{name}.csv") for name in export.TABLES}
    check_against_units(tables, units)


def test_parquet_holds_the_same_table(tmp_path):
    units = load_units(POPULATION_STUDY)[:3]
    export.write(units, tmp_path, formats=("csv", "parquet"))
    for name in ("iterations", "evaluations"):
        table = pyarrow.parquet.read_table(tmp_path / f"{name}.parquet").to_pydict()
        text = read_csv(tmp_path / f"{name}.csv")
        assert list(table) == list(text)
        for col, values in table.items():
            expected = text[col]
            if isinstance(values[0], str):
                assert values == expected
            else:
                np.testing.assert_array_equal(np.asarray(values, np.float64).astype(np.float32),
                                              np.asarray(expected, np.float64).astype(np.float32))


def test_non_finite_values_survive(tmp_path):
    units = load_units(POPULATION_STUDY)[:1]
    u = units[0]
    u.train_reward[0, :3] = [np.nan, np.inf, -np.inf]
    export.write(units, tmp_path)
    check_against_units({name: read_csv(tmp_path / f"{name}.csv") for name in export.TABLES}, units)


def test_a_bad_format_or_an_empty_directory_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(ValueError, match="format"):
        export.write([], tmp_path, formats=("xlsx",))
    assert cli.main(["export", str(tmp_path / "nothing")]) == 2
    assert "nothing" in capsys.readouterr().err
