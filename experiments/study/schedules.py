"""Schedule replay (`experiments.replay`, `hcjax replay`): rerun the per-seed
hyperparameter schedules a finished unit found, open-loop, on new seeds.

A unit's schedule for its seed row i is `hparams[i]` (T, h): the values in effect at
every iteration (option indices for categoricals). The replay trains new agents with
the unit's own environment, PPO settings, space, iterations and evaluation cadence,
with the `hcjax.tuners.schedule` tuner asked after every iteration (tune_every 1, which
changes nothing else of PPO's numbers), so that iteration t of new seed j runs exactly
the source's values at iteration t of source row j mod n (n source seeds): with as many
new seeds as source seeds each schedule is replayed once, with k times as many each is
replayed on k seeds. The replay uses the agents' keys of a study (seed id s: PRNGKey(s)),
so replaying a unit on its own seed ids reproduces a `fixed` unit exactly and a tuner's
unit in every number the tuner does not touch (the training is open-loop: nothing is
told back). A population method's schedules replay the values only, not the network
copies of its exploit steps. JAX environments only.

Your own environment (a unit whose `make` is "object:..." or "factory:...", `own_envs`)
is replayed on the environment given as `envs=` (the object, or a factory reference
"package.module:function"; `hcjax replay --env-factory`), or, without it, on the factory
reference the unit recorded, imported and called after saying so (it runs that code, as
`hcjax run` does). The environment must have the unit's fingerprint (its sizes, bounds,
time limit, backend and params): another one is refused (ValueError).

The result is a `UnitResult` of method `replay_<source method>` (tuner_time zeros: a
replay decides nothing; its meta names the source unit, its config the source rows);
with `out`, it is saved as a unit of that study directory (`units/<env>__replay_<method>.npz`,
readable by `experiments.load`, `hcjax export`, `hcjax plot`), and a replay already
saved there with the same configuration is read back instead of rerun; a directory
holding another study (the source's own, for one) is refused.
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from agents.ppo import PPOConfig, make_learner
from experiments.study import build, own_envs
from experiments.study.devices import check_run_count, check_seed_ids, padded_count
from experiments.study.keys import config_key, study_part
from experiments.study.loops import run_jax_unit
from experiments.study.plan import make_hyperparameter, unit_timing
from experiments.study.programs import announced, built_anew
from experiments.study.progress import Progress
from experiments.study.protocol import SWEEP, TEST
from experiments.study.store import StudyDir, UnitResult, load_unit, unit_name
from hcjax.space import Space
from hcjax.tuners.schedule import schedule


def source_unit(source: str | os.PathLike, unit: str) -> UnitResult:
    """The finished unit `unit` (its file stem, `<env>__<method>` as under units/) of the
    study directory `source`; ValueError naming the units there when it is not one."""
    store = StudyDir(source)
    path = store.units_dir / f"{unit}.npz"
    if not path.is_file():
        there = sorted(p.stem for p in store.units_dir.glob("*.npz")) if store.units_dir.is_dir() else []
        raise ValueError(f"unit: {unit!r} is not a finished unit of {store.path} (units: "
                         f"{', '.join(there) or 'none'})")
    return load_unit(path)


def check_replayable(unit: str, src: UnitResult) -> None:
    """ValueError for the sweep's tuning unit: its rows are N configurations x k tuning seeds, not
    one method's schedules (a replay on n seeds would run its first configurations); its incumbent,
    one schedule on every row, is the unit `sweep@test` (a study with test seeds runs it)."""
    if src.meta.get("method") == SWEEP:
        n = len((src.meta.get("sweep") or {}).get("configurations") or [])
        raise ValueError(f"unit: {unit} is the sweep, {n} static configurations x their tuning seeds, not one "
                         f"schedule: a replay would run its first configurations on the new seeds. Replay its "
                         f"incumbent, the unit {unit_name(src.meta['env'], SWEEP + TEST)} (sweep@test: the best "
                         f"configuration on every row; a study with test_seeds runs it)")


def check_schedule(unit: str, space: Space, hparams: np.ndarray) -> None:
    """ValueError naming the first value of `hparams` (n, T, h) outside `space` (float32
    bounds; whole numbers for an integer or categorical one): the schedule tuner would clip
    or round it, and the replay would not run what the unit ran (a unit file edited by hand?)."""
    hparams = np.asarray(hparams, np.float32)
    whole = np.asarray(space.is_integer | space.is_categorical)
    bad = ~np.isfinite(hparams) | (hparams < space.low) | (hparams > space.high)
    bad |= whole & (hparams != np.round(hparams))
    if not bad.any():
        return
    row, t, i = (int(k) for k in np.argwhere(bad)[0])
    p = space.hyperparameters[i]
    allowed = f"[{p.low:g}, {p.high:g}]" if not whole[i] else f"whole numbers in [{p.low:g}, {p.high:g}]"
    raise ValueError(f"unit: {unit}'s schedule lies outside the space: {p.name} = {hparams[row, t, i]:g} at seed row "
                     f"{row}, iteration {t} (the space allows {allowed}); a replay runs the values the unit ran, "
                     f"unchanged: was its file edited?")


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def environment(unit: str, make: str, envs: Any = None, log: Callable[[str], None] = _say, label: str | None = None):
    """The environment a unit of `make` ran on: a registry name's, or your own (see the module
    docstring): `envs` (an object or a factory reference) or the recorded factory, with the
    unit's fingerprint (ValueError otherwise); `label`: the unit's environment label (part of
    the fingerprint of an environment with parts that cannot be read: `own_envs`)."""
    if not own_envs.is_own(make):
        if envs is not None:
            raise ValueError(f"envs: unit {unit} ran the registry environment {make!r}, which is made by name; "
                             f"give no environment")
        return build.environment(make)
    kind, _, ref = make.partition(":")
    if envs is None:
        if kind != "factory":
            raise ValueError(f"unit {unit} ran your own environment object ({make}); give it again: "
                             f"experiments.replay(..., envs=the_object), or `hcjax replay --env-factory "
                             f"package.module:function` with a factory that returns it")
        envs = ref.rsplit("#", 1)[0]
        log(f"hcjax replay: unit {unit} ran your own environment: importing and calling its factory {envs} (this "
            f"runs that code, as hcjax run does; --env-factory gives another)")
    if isinstance(envs, str):
        own = own_envs.from_factory(envs if label is None or "=" in envs else f"{label}={envs}")
    else:
        own = own_envs.from_object(envs, label)
    if own.make.rsplit("#", 1)[-1] != make.rsplit("#", 1)[-1]:
        raise ValueError(f"envs: the environment given ({own.make}) is not the one unit {unit} ran ({make}): their "
                         f"fingerprints (sizes, bounds, time limit, backend, what the object holds) differ")
    return own_envs.built(own.make)


def replay(source: str | os.PathLike, unit: str, seeds: Sequence[int], out: str | os.PathLike | None = None,
           on_segment=lambda k: None, envs: Any = None, log: Callable[[str], None] = _say,
           progress: bool = False) -> UnitResult:
    """Replay unit `unit` of study directory `source` on `seeds` (seed ids); see the
    module docstring. out: a study directory to save the result in (None: not saved);
    envs: your own environment (object or factory reference) for a unit that ran one (None:
    the factory the unit recorded); log: where the line saying a factory is imported goes, and
    (progress) the line saying what is replayed; progress: a bar (a plain line in a log) over
    the iterations, saying what compiles, as `hcjax run` shows (`experiments.study.progress`)."""
    if isinstance(seeds, range):
        check_run_count("seeds", len(seeds))  # before its ids are made
    ids = check_seed_ids("seeds", list(seeds) if isinstance(seeds, range) else seeds)  # first: nothing read yet
    src = source_unit(source, unit)
    check_replayable(unit, src)
    config = src.meta.get("config") or {}
    env = config.get("env") or {}
    if env.get("path") == "gymnasium":
        raise ValueError(f"unit: {unit} runs a gymnasium (host) environment; replay runs JAX environments only")
    space = Space(make_hyperparameter(e) for e in config["space"])
    check_schedule(unit, space, src.hparams)
    n_src, T = src.train_reward.shape
    ppo = {k: tuple(v) if isinstance(v, list) else v for k, v in {**config["ppo"], **env.get("ppo", {})}.items()}
    learner = make_learner(PPOConfig(**dict(ppo, num_iterations=T, tune_every=1)),
                           environment(unit, env["make"], envs, log, env.get("label")), schedule(space, src.hparams))
    S, method = len(ids), f"replay_{src.meta['method']}"
    rows = (np.arange(S) % n_src).astype(np.int32)
    replay_config = dict(config, method=method, seeds=[int(s) for s in ids],
                         tuner={"source_unit": unit, "source_config_key": src.meta.get("config_key"),
                                "rows": rows.tolist()})
    key, skey = config_key(replay_config), config_key(study_part(replay_config))
    store = None if out is None else StudyDir(out)
    if store is not None:
        if store.path.resolve() == Path(source).resolve():
            raise ValueError(f"out: {store.path} is the source study directory; a replay is another study (other "
                             f"seeds, no tuner): give another --out")
        store.check_study(study_part(replay_config), skey)
        if store.finished(src.meta["env"], method, key):
            return load_unit(store.unit_path(src.meta["env"], method))
    n = padded_count(S, len(jax.devices()))
    agent_ids = np.concatenate([ids, ids.max() + 1 + np.arange(n - S)])
    if progress:
        log(f"hcjax replay: {unit}'s {n_src} schedule(s) of {T} iterations on {S} new seed(s)"
            + ("" if store is None else f" -> {store.path}"))
    t0 = time.perf_counter()
    with Progress(T, f"replay {unit}", enabled=progress) as bar:
        def segment_done(k):
            on_segment(k)
            bar.update(k)

        run = run_jax_unit(learner, agent_ids, T, unit_timing(config).eval_every, segment_done,
                           fast_compile=bool(src.meta.get("fast_compile", False)),
                           which=(np.arange(n) % n_src).astype(np.int32),
                           program=announced(built_anew, bar.phase), shared=announced(built_anew, bar.phase))
    meta = dict(env=src.meta["env"], method=method, make=src.meta.get("make"), path=src.meta.get("path"),
                config=replay_config, config_key=key, study_key=skey,
                hparam_names=list(space.names), source=dict(directory=str(Path(source)), unit=unit),
                fast_compile=bool(src.meta.get("fast_compile")), n_agents=int(n), n_devices=len(jax.devices()),
                devices=[str(d) for d in jax.devices()], train_seconds=float(run["train_seconds"]),
                unit_seconds=float(time.perf_counter() - t0), tuner_seconds=0.0,
                segment_seconds=[float(x) for x in run["segment_seconds"]],
                tuning_time="none: a replay decides nothing")
    result = UnitResult(
        seeds=ids.astype(np.int32), train_reward=np.asarray(run["train_reward"][:S], np.float32),
        objective=np.asarray(run["objective"][:S], np.float32), hparams=np.asarray(run["hparams"][:S], np.float32),
        frames=np.asarray(run["frames"][:S], np.int64), rejected=np.asarray(run["rejected"][:S], np.int32),
        episode_return=np.asarray(run["episode_return"][:S], np.float32),
        eval_iteration=np.asarray(run["eval_iteration"], np.int32),
        eval_reward=np.asarray(run["eval_reward"][:S], np.float32), tuner_time=np.zeros(T), meta=meta)
    if store is not None:
        with store.lock():
            store.save_unit(result)
    return result
