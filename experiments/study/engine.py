"""Run a study: every (environment, method) unit over the same seeds, resumable.

`prepare` checks the study directory against the plan and writes its manifest; `run`
trains every unit group not yet finished (`experiments.study.plan.unit_groups`): a unit's
seeds are one vmapped program sharded over every device (`loops.run_jax_unit`; gymnasium
environments run on the host, `loops.run_host_unit`), several methods of a JAX environment
may share one program (a stacked tuner), and a population method steps its unit's agents
(`agents.population.PopulationLoop`); what a unit group trains with, compiled programs
included, is kept in the process for a rerun of it (`programs`). Each unit's tuning time
is then measured by a replay on the host CPU (`replay`), and the unit is saved to the
study directory (`store`).
"""
from __future__ import annotations

import dataclasses
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np

from experiments import deps
from experiments.study import interrupts
from experiments.study.build import DEFAULT_MEMORY_LIMIT_GIB
from experiments.study.checkpoints import Checkpoint
from experiments.study.devices import padded_count
from experiments.study.keys import config_key
from experiments.study.loops import run_host_unit, run_jax_unit
from experiments.study.plan import EnvChoice, Plan, merge_configs, study_config, unit_config, unit_groups, unit_keys
from experiments.study.presets import check_unit_names
from experiments.study.programs import evaluation_programs, tuner_programs, unit_programs
from experiments.study.progress import Progress
from experiments.study.replay import measure_population_time, measure_tuner_time
from experiments.study.store import StudyDir, UnitResult
from experiments.study.tensorboard import UnitGroupScalars


def run_units(plan: Plan, env: EnvChoice, methods: list[str], keys: dict[str, str],
              on_segment: Callable[[int], None] = lambda k: None,
              memory_limit_gib: float = DEFAULT_MEMORY_LIMIT_GIB, checkpoint: Checkpoint | None = None,
              tensorboard: Path | None = None, warn: Callable[[str], None] | None = None) -> list[UnitResult]:
    """Train every seed of the units (env, method) of `methods` (resuming from
    `checkpoint` when it holds one) and measure each tuner's tuning time.

    One method: its seeds are one vmapped program. Several methods (the study's
    `fuse_methods`, JAX envs only): all of them in ONE program, compiled once, with a
    stacked tuner (hcjax.tuners.stacked) whose method is chosen per agent: agent
    m * seeds + i runs method m with seed i, and gets the numbers it would get alone.
    keys: method -> the unit's config key. tensorboard: a directory for live scalars
    (`experiments.study.tensorboard`), or None; warn: receives its one message if it fails
    (live logging then stops, the units go on)."""
    p = plan.preset
    t0 = time.perf_counter()
    kept = unit_programs(plan, env, methods, memory_limit_gib)  # a rerun of this configuration compiles nothing
    environment, learner, tuners, population = kept.environment, kept.learner, kept.tuners, kept.population
    S, M = p.seeds, len(methods)
    seeds = np.arange(S)
    on_record = (lambda record: None) if tensorboard is None else \
        UnitGroupScalars(tensorboard, env.label, methods, S, tuners[0].space, p.iterations, warn)
    if environment.host:
        if M > 1:
            raise ValueError(f"{env.label}: methods are fused only on JAX environments, not on the host path")
        ids, n_dev = seeds, 1
        out = run_host_unit(learner, learner.tuner, ids, p.eval_every, on_segment, checkpoint=checkpoint,
                            on_record=on_record)
    else:
        n_dev = len(jax.devices())
        n = padded_count(M * S, n_dev)
        ids = np.concatenate([np.tile(seeds, M), S + np.arange(n - M * S)])
        which = np.concatenate([np.repeat(np.arange(M), S), np.zeros(n - M * S, np.int64)]).astype(np.int32)
        out = run_jax_unit(learner, ids, p.iterations, p.eval_every, on_segment, fast_compile=p.fast_compile,
                           checkpoint=checkpoint, which=which if M > 1 else None, population=population,
                           on_record=on_record, program=kept.program,
                           shared=evaluation_programs(plan, env, environment))
    if population is not None and "lineage_iteration" not in out:  # shorter than one tuning interval: no step
        out.update(lineage_iteration=np.zeros(0, np.int32), lineage_parent=np.zeros((len(ids), 0), np.int32),
                   lineage_objective=np.zeros((len(ids), 0), np.float32))
    train_seconds = float(out["train_seconds"])
    results = []
    for m, (method, sub) in enumerate(zip(methods, tuners)):
        rows = slice(m * S, (m + 1) * S)

        def cut(name, dtype):
            return np.asarray(out[name][rows], dtype)  # noqa: B023 - called within the iteration

        if population is None:
            tuner_time = measure_tuner_time(sub, cut("objective", np.float32), p.tune_every,
                                            program=tuner_programs(plan, method, memory_limit_gib))
        else:
            tuner_time = measure_population_time(sub, out["lineage_iteration"], out["lineage_objective"],
                                                 p.iterations, program=kept.program)
        meta = dict(env=env.label, method=method, make=env.make, path=env.path, config_key=keys[method],
                    config=unit_config(plan, env, method), hparam_names=list(sub.space.names),
                    fast_compile=bool(p.fast_compile), n_agents=int(len(ids)), n_devices=int(n_dev),
                    devices=[str(d) for d in jax.devices()],
                    train_seconds=train_seconds, unit_seconds=float(time.perf_counter() - t0),
                    tuner_seconds=float(tuner_time.sum()),
                    tuning_time="host CPU replay of tell(+ask) for all agents with the run's objectives; "
                                "seconds per iteration, compilation excluded")
        if M > 1:
            meta["fused_with"] = list(methods)
        if "segment_seconds" in out:
            meta["segment_seconds"] = [float(x) for x in out["segment_seconds"]]
        results.append(UnitResult(
            seeds=seeds.astype(np.int32),
            train_reward=cut("train_reward", np.float32), objective=cut("objective", np.float32),
            hparams=cut("hparams", np.float32), frames=cut("frames", np.int64), rejected=cut("rejected", np.int32),
            episode_return=cut("episode_return", np.float32),
            eval_iteration=np.asarray(out["eval_iteration"], np.int32), eval_reward=cut("eval_reward", np.float32),
            tuner_time=tuner_time.astype(np.float64), meta=meta,
            **({} if population is None else dict(
                lineage_iteration=np.asarray(out["lineage_iteration"], np.int32),
                lineage_parent=np.asarray(out["lineage_parent"], np.int32),
                lineage_objective=np.asarray(out["lineage_objective"], np.float32)))))
    return results


def prepare(plan: Plan, store: StudyDir,
            log: Callable[[str], None]) -> tuple[dict[tuple[str, str], str], set[tuple[str, str]]]:
    """Checks against the directory before any work (ValueError on a conflict): the
    directory's study configuration must be this plan's, and no unit file may hold
    another configuration (unreadable ones are moved aside). Writes the manifest.
    Returns the config key of every unit and the (env label, method) units finished."""
    study = study_config(plan)
    skey = config_key(study)
    store.check_study(study, skey)
    old = ((store.read_manifest() or {}).get("config") or {}).get("env_choices") or []
    check_unit_names([e.label for e in plan.envs],
                     [e["label"] for e in old if isinstance(e, dict) and isinstance(e.get("label"), str)])
    keys = unit_keys(plan)
    # finished: raises on a conflict, quarantines corrupt files
    done = {unit for unit, key in keys.items() if store.finished(*unit, key, log=log)}
    store.write_manifest(plan.to_dict(), study, skey, {"packages": deps.versions(), "devices": deps.devices()},
                         merge=merge_configs)
    return keys, done


@dataclasses.dataclass
class UnitFailure:
    """A unit group that raised: its environment label, its methods and the exception."""

    env: str
    methods: list[str]
    error: Exception

    def __str__(self) -> str:
        where = "+".join(self.methods)
        return f"{self.env} / {where}: {type(self.error).__name__}: {self.error}"


class _Tracked(Checkpoint):
    """A Checkpoint that remembers whether it resumed and how often it saved."""

    resumed, saves = False, 0

    def load(self, like):
        loaded = super().load(like)
        self.resumed = loaded is not None
        return loaded

    def save(self, state, record) -> None:
        super().save(state, record)
        self.saves += 1


def run(plan: Plan, store: StudyDir, keys: dict[tuple[str, str], str], finished: set[tuple[str, str]] | None,
        progress: bool = True, log: Callable[[str], None] | None = None,
        memory_limit_gib: float = DEFAULT_MEMORY_LIMIT_GIB, tensorboard: bool = False,
        failures: list[UnitFailure] | None = None) -> list[Path]:
    """Run every unit of `plan` not already finished in `store` (`finished`, from
    `prepare`; None: looked up in `store`, as processes other than 0 do); returns the
    unit files. Only process 0 writes (under jax.distributed). tensorboard: live scalars
    under OUT/tensorboard/ (process 0).

    failures: None, a unit's exception propagates; a list, a unit group that raises (an
    environment that raises, a non-finite state, ...) is appended to it as a UnitFailure,
    logged with its cause (the traceback appended to run.log), and the other units run.
    A failed unit's checkpoint is kept, so that the next run resumes it, unless the unit
    failed again after resuming from it without saving a new segment: then it is moved
    aside and the next run starts the unit over (a rerun never loops on one crash)."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    writer = jax.process_index() == 0
    progress = progress and writer
    paths = []
    study_key = config_key(study_config(plan))
    with Progress(len(plan.units), "units", "unit", enabled=progress, position=0) as bar:
        for env, methods in unit_groups(plan):
            interrupts.check()  # a stop whose exception was dropped (experiments.study.interrupts)
            pending = []
            for method in methods:
                unit = (env.label, method)
                done = (unit in finished) if finished is not None else store.finished(*unit, keys[unit], log=log)
                if done:
                    log(f"skip {env.label} / {method}: already finished in {store.path}")
                    bar.update(1)
                    paths.append(store.unit_path(env.label, method))
                else:
                    pending.append(method)
            if not pending:
                continue
            group_key = config_key([keys[(env.label, m)] for m in pending])
            checkpoint = _Tracked(store, env.label, "+".join(pending), group_key, log, write=writer)
            try:
                with Progress(plan.preset.iterations, f"{env.label}/{'+'.join(pending)}", enabled=progress,
                              position=1, leave=False) as inner:
                    def on_segment(k, inner=inner):
                        interrupts.check()
                        inner.update(k)

                    results = run_units(plan, env, pending, {m: keys[(env.label, m)] for m in pending},
                                        on_segment=on_segment, memory_limit_gib=memory_limit_gib,
                                        checkpoint=checkpoint,
                                        tensorboard=store.path / "tensorboard" if tensorboard and writer else None,
                                        warn=log)
            except Exception as e:
                if failures is None:
                    raise
                failures.append(_failed(UnitFailure(env.label, list(pending), e), store, checkpoint, log, writer))
                bar.update(len(pending), note=f"{env.label} / {'+'.join(pending)} failed")
                continue
            for result in results:
                result.meta["study_key"] = study_key
                if writer:
                    paths.append(store.save_unit(result))
                log(f"done {env.label} / {result.meta['method']}: {result.meta['unit_seconds']:.1f} s, of which "
                    f"the tuner's own ask and tell took {result.meta['tuner_seconds']:.3g} s")
                bar.update(1, note=f"{env.label} / {result.meta['method']}")
            checkpoint.remove()
    return paths


def _failed(failure: UnitFailure, store: StudyDir, checkpoint: _Tracked, log: Callable[[str], None],
            writer: bool) -> UnitFailure:
    """Log a failed unit group with its cause and decide its checkpoint's fate (see `run`)."""
    log(f"FAILED {failure}")
    if writer:
        store.log("".join(traceback.format_exception(failure.error)))
        path = store.checkpoint_path(failure.env, "+".join(failure.methods))
        if checkpoint.resumed and checkpoint.saves == 0 and path.exists():
            log(f"{failure.env} / {'+'.join(failure.methods)} failed again after resuming from {path} without a "
                f"new segment; {store.moved_aside(path)}: the next run starts this unit over")
    return failure
