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
import functools
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np

from experiments import deps
from experiments.reporting import headroom
from experiments.reporting.views import final_eval
from experiments.study import interrupts, protocol
from experiments.study.build import DEFAULT_MEMORY_LIMIT_GIB
from experiments.study.checkpoints import Checkpoint
from experiments.study.devices import padded_count
from experiments.study.keys import config_key
from experiments.study.loops import run_host_unit, run_jax_unit
from experiments.study.plan import (
    EnvChoice,
    Plan,
    default_values,
    merge_configs,
    reads_results,
    source_method,
    study_config,
    tuner_options,
    unit_config,
    unit_groups,
    unit_keys,
    unit_seeds,
)
from experiments.study.presets import check_unit_names
from experiments.study.programs import announced, evaluation_programs, tuner_programs, unit_programs
from experiments.study.progress import Progress
from experiments.study.replay import measure_population_time, measure_tuner_time
from experiments.study.store import StudyDir, UnitResult, load_unit
from experiments.study.tensorboard import UnitGroupScalars


def run_units(plan: Plan, env: EnvChoice, methods: list[str], keys: dict[str, str],
              on_segment: Callable[[int], None] = lambda k: None,
              memory_limit_gib: float = DEFAULT_MEMORY_LIMIT_GIB, checkpoint: Checkpoint | None = None,
              tensorboard: Path | None = None, warn: Callable[[str], None] | None = None,
              source: Callable[[str], UnitResult] | None = None,
              phase: Callable[[str], None] = lambda text: None) -> list[UnitResult]:
    """Train every row of the units (env, method) of `methods` (resuming from `checkpoint`
    when it holds one) and measure each tuner's tuning time.

    One unit: its rows (`plan.unit_seeds`: seeds, or the sweep's configurations x seeds) are
    one vmapped program. Several units (the study's `fuse_methods`, JAX envs only): all in ONE
    program, compiled once, with a stacked tuner (hcjax.tuners.stacked) whose method is chosen
    per agent; the units' rows follow each other (a method's tuning and test units share its
    tuner), and each agent gets the numbers it would get alone. Units that read other units'
    results (`plan.reads_results`: the replays and the sweep's incumbent) run the schedules of
    `source(method)` (the finished UnitResult of that method on this environment) as one
    program. keys: method -> the unit's config key. tensorboard: a directory for live scalars
    (`experiments.study.tensorboard`), or None; warn: receives its one message if it fails
    (live logging then stops, the units go on); phase: told what the group does while its
    iterations do not advance (building, compiling, timing the tuners)."""
    p, timing = plan.preset, plan.timing(env)
    t0 = time.perf_counter()
    rows = [unit_seeds(plan, m) for m in methods]
    schedules, which, replayed = None, None, {}
    if reads_results(methods[0]):
        if source is None:
            raise ValueError(f"{env.label} / {'+'.join(methods)}: replayed units need their source units")
        schedules, which, replayed = replay_rows(plan, env, methods, source)
    phase("building the learner and its tuners")
    kept = unit_programs(plan, env, methods, memory_limit_gib, schedules)  # a rerun compiles nothing
    environment, learner, tuners, population = kept.environment, kept.learner, kept.tuners, kept.population
    if methods == [protocol.SWEEP]:  # row r runs configuration r // k
        R, N, k = protocol.sweep_shape(tuner_options(plan, protocol.SWEEP))
        which = np.repeat(np.arange(R * N), k)
    elif kept.branches is not None:
        which = np.concatenate([np.full(len(r), b) for r, b in zip(rows, kept.branches)])
    ids = np.concatenate(rows)
    n_real = len(ids)
    on_record = (lambda record: None) if tensorboard is None else \
        UnitGroupScalars(tensorboard, env.label, methods, [len(r) for r in rows], plan.space, timing.iterations, warn)
    if environment.host:
        if len(methods) > 1:
            raise ValueError(f"{env.label}: methods are fused only on JAX environments, not on the host path")
        n_dev = 1
        out = run_host_unit(learner, learner.tuner, ids, timing.eval_every, on_segment, checkpoint=checkpoint,
                            on_record=on_record)
    else:
        n_dev = len(jax.devices())
        n = padded_count(n_real, n_dev)
        ids = np.concatenate([ids, ids.max() + 1 + np.arange(n - n_real)])
        if which is not None:
            which = np.concatenate([which, np.zeros(n - n_real, np.int64)]).astype(np.int32)
        out = run_jax_unit(learner, ids, timing.iterations, timing.eval_every, on_segment, fast_compile=p.fast_compile,
                           checkpoint=checkpoint, which=which, population=population, on_record=on_record,
                           program=announced(kept.program, phase),
                           shared=announced(evaluation_programs(plan, env, environment), phase))
    if population is not None and "lineage_iteration" not in out:  # shorter than one tuning interval: no step
        out.update(lineage_iteration=np.zeros(0, np.int32), lineage_parent=np.zeros((len(ids), 0), np.int32),
                   lineage_objective=np.zeros((len(ids), 0), np.float32))
    train_seconds = float(out["train_seconds"])
    if any(sub is not None for sub in tuners):
        phase("timing each tuner's ask and tell on the host")
    results, start = [], 0
    for method, sub, seeds in zip(methods, tuners, rows):
        part = slice(start, start + len(seeds))
        start += len(seeds)

        def cut(name, dtype):
            return np.asarray(out[name][part], dtype)  # noqa: B023 - called within the iteration

        if sub is None:  # a schedule decides nothing
            tuner_time = np.zeros(timing.iterations)
        elif population is None:
            tuner_time = measure_tuner_time(sub, cut("objective", np.float32), timing.tune_every,
                                            program=tuner_programs(plan, protocol.kind(method).base,
                                                                   memory_limit_gib, env))
        else:
            tuner_time = measure_population_time(sub, out["lineage_iteration"], out["lineage_objective"],
                                                 timing.iterations, program=kept.program)
        meta = dict(env=env.label, method=method, make=env.make, path=env.path, config_key=keys[method],
                    config=unit_config(plan, env, method), hparam_names=list(plan.space.names),
                    phase=protocol.kind(method).phase, fast_compile=bool(p.fast_compile), n_agents=int(len(ids)),
                    n_devices=int(n_dev), devices=[str(d) for d in jax.devices()],
                    train_seconds=train_seconds, run_seconds=train_seconds / n_real,
                    unit_seconds=float(time.perf_counter() - t0), tuner_seconds=float(tuner_time.sum()),
                    tuning_time="host CPU replay of tell(+ask) for all agents with the run's objectives; "
                                "seconds per iteration, compilation excluded")
        meta.update(protocol_meta(plan, method, replayed))
        if len(methods) > 1:
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


def replay_rows(plan: Plan, env: EnvChoice, methods: list[str], source: Callable[[str], UnitResult]) \
        -> tuple[np.ndarray, np.ndarray, dict[str, dict]]:
    """The schedules of a group of `reads_results` units: (table (R, T, h) tuner values, row
    (n,) int of every agent of the group, {method: what it replays}). The sweep's incumbents
    (`incumbents`) are constant rows, agent j running incumbent j // n_test; a replay's agent j
    runs row j mod S of its source's S schedules (`experiments.study.schedules`)."""
    T, tables, rows, replayed, start = plan.timing(env).iterations, [], [], {}, 0
    for method in methods:
        src = source(source_method(method))
        n = len(unit_seeds(plan, method))
        if protocol.kind(method).base == protocol.SWEEP:
            chosen = incumbents(plan, src)
            table = np.broadcast_to(np.asarray([c["values"] for c in chosen], np.float32)[:, None],
                                    (len(chosen), T, plan.space.h))
            replayed[method] = dict(incumbent=chosen[0], incumbents=chosen)
            rows.append(start + np.arange(n) // len(plan.test_ids))
        else:
            table = np.asarray(src.hparams, np.float32)
            replayed[method] = dict(source=dict(unit=src.meta["method"], config_key=src.meta.get("config_key")))
            rows.append(start + np.arange(n) % len(table))
        tables.append(table)
        start += len(table)
    return np.concatenate(tables), np.concatenate(rows), replayed


def incumbents(plan: Plan, sweep: UnitResult) -> list[dict]:
    """Each draw's incumbent of a finished sweep unit (`protocol.draw_incumbents`: ties broken by
    the mean evaluation over the run, then by the distance to the study's default in the space's
    [0, 1] units): its configuration index, tuner values, hyperparameters and tuning-seed mean."""
    meta = sweep.meta["sweep"]
    configurations = np.asarray(meta["configurations"], np.float32)
    rows, final = np.asarray(meta["configuration"]), final_eval(sweep)
    space = plan.space
    distance = np.abs(np.asarray(space.encode(configurations)) - np.asarray(space.encode(default_values(plan))))
    options = {"configurations": int(meta.get("per_draw", len(configurations))), "seeds": int(meta["seeds"]),
               "repeats": int(meta.get("repeats", 1))}
    chosen = protocol.draw_incumbents(final, rows, options, np.asarray(sweep.eval_reward, np.float64),
                                      distance.sum(axis=1))
    means = protocol.configuration_means(final, rows)
    return [dict(configuration=int(c), values=configurations[c].tolist(),
                 hyperparameters=space.names_to_values(configurations[c]), tuning_mean=float(means[c]))
            for c in chosen]


def protocol_meta(plan: Plan, method: str, replayed: dict[str, dict]) -> dict:
    """What a unit's meta says of its place in the protocol: the sweep's configurations (tuner
    values (N, h), seeds per configuration, each row's configuration), a replay's source, the
    incumbent's configuration, a poor default's values."""
    base = protocol.kind(method).base
    if method == protocol.SWEEP:
        options = tuner_options(plan, method)
        R, N, k = protocol.sweep_shape(options)
        configurations = protocol.sweep_configurations(plan.space, options, default_values(plan))
        return dict(sweep=dict(configurations=configurations.tolist(), seeds=k, repeats=R, per_draw=N,
                               default=bool(options.get("default", False)),
                               configuration=np.repeat(np.arange(R * N), k).tolist()), runs=int(R * N * k))
    start = protocol.started_from(base)
    if start:
        return dict(poor_default=dict(name=start[1], values=dict(plan.preset.poor_defaults[start[1]])))
    return dict(replayed.get(method, {}))


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
    trained: dict[tuple[str, str], UnitResult] = {}  # this run's units, for the units that read them

    def source(env_label: str, method: str) -> UnitResult:
        """The finished unit (env, method): trained in this run, else read from the directory."""
        if (env_label, method) in trained:
            return trained[(env_label, method)]
        path = store.unit_path(env_label, method)
        if not path.is_file():
            raise ValueError(f"{env_label} / {method} is not finished (it failed or has not run): the units that "
                             f"replay it wait for it; run the study again")
        return load_unit(path)

    told: set[str] = set()  # environments whose headroom was told
    with Progress(len(plan.units), "units", "unit", enabled=progress, position=0, heartbeat=False) as bar:
        for env, methods in unit_groups(plan):
            interrupts.check()  # a stop whose exception was dropped (experiments.study.interrupts)
            if protocol.kind(methods[0]).phase == protocol.TEST_PHASE and env.label not in told:
                told.add(env.label)
                tell_headroom(plan, env, functools.partial(source, env.label), log)
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
                with Progress(plan.timing(env).iterations, f"{env.label}/{'+'.join(pending)}", enabled=progress,
                              position=1, leave=False) as inner:
                    def on_segment(k, inner=inner):
                        interrupts.check()
                        inner.update(k)

                    results = run_units(plan, env, pending, {m: keys[(env.label, m)] for m in pending},
                                        on_segment=on_segment, memory_limit_gib=memory_limit_gib,
                                        checkpoint=checkpoint,
                                        tensorboard=store.path / "tensorboard" if tensorboard and writer else None,
                                        warn=log, source=functools.partial(source, env.label),
                                        phase=inner.phase)
            except Exception as e:
                interrupts.raise_within(e)  # Ctrl-C that surfaced as another exception: a stop, not a failure
                if failures is None:
                    raise
                failures.append(_failed(UnitFailure(env.label, list(pending), e), store, checkpoint, log, writer))
                bar.update(len(pending), note=f"{env.label} / {'+'.join(pending)} failed")
                continue
            for result in results:
                result.meta["study_key"] = study_key
                trained[(env.label, result.meta["method"])] = result
                if writer:
                    paths.append(store.save_unit(result))
                log(f"done {env.label} / {result.meta['method']}: {result.meta['unit_seconds']:.1f} s, of which "
                    f"the tuner's own ask and tell took {result.meta['tuner_seconds']:.3g} s")
                bar.update(1, note=f"{env.label} / {result.meta['method']}")
            checkpoint.remove()
    return paths


def tell_headroom(plan: Plan, env: EnvChoice, source: Callable[[str], UnitResult], log: Callable[[str], None]) -> None:
    """Log `env`'s headroom (`experiments.reporting.headroom`) from its finished tuning units
    `sweep` and `fixed`, before its test seeds run; nothing when the study has no sweep or a unit
    is missing (it failed: the verdict says so)."""
    if protocol.SWEEP not in plan.preset.methods:
        return
    try:
        sweep = source(protocol.SWEEP)
        fixed = source("fixed") if "fixed" in plan.preset.methods else None
    except ValueError:
        return
    room = headroom.of_env(env.label, sweep, fixed)
    if room is not None:
        log(f"headroom (tuning seeds, before any test seed runs): {headroom.sentence(room)}")


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
