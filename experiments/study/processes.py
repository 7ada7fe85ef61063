"""The processes of one distributed run (`jax.distributed`, `hcjax run --distributed`): they
agree on the study before any work, and when one stops the others stop too, with a message.

    start(coordinator, n, id)    jax.distributed.initialize (gloo collectives on the CPU)
    agree(plan)                  every process's environment identities, study key and unit keys,
                                 compared before any work (`Disagreement` naming the process, the
                                 label and what differs, or the peer's own refusal)
    refuse(error)                this process failed its checks: the others stop with its message
    with watchdog(): ...         `hcjax run --distributed`: each process marks itself alive in the
                                 coordination service's key-value store every POLL_SECONDS and
                                 watches the others; one silent for LOST_SECONDS, one that says it
                                 stopped, or the service gone or not answering within ANSWER_SECONDS
                                 (process 0 stopped or frozen) ends this one; a
                                 process leaving the block says it finished (no longer watched:
                                 process 0 may plot long after the others are done)
    leave(reason, status)        tell the others this process stops, print why, exit at once
    leave_if_lost(errors, log)   leave when an error says another process went away

Every process writes its identity (or its refusal) under `hcjax/round<r>/<process>` and reads
everyone's: each study opened is one round, the same on every process. All processes compare
everyone with process 0, so they print the same message and exit 2 (the user's mistake: the
processes were given different studies, or one could not run it).

Why a process leaves at once (os._exit) rather than returning: at the end of a process, JAX's
distributed client waits for every other process at a shutdown barrier, and for one that is
gone it waits its heartbeat timeout (100 s) and then aborts the process (SIGABRT with a native
stack). A process that stops during the work tells the others (`hcjax/stopped/<process>`),
which stop within POLL_SECONDS with its reason; process 0, which holds the coordination service,
waits GRACE_SECONDS first so that they can read it. A run stopped this way resumes as any other:
run the same command on every process again. With one process every function here does nothing.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator

import jax
from jax._src import distributed  # the coordination service's key-value store (no public API in jax 0.11)

from experiments.study.keys import config_key
from experiments.study.plan import Plan, study_config, unit_keys

AGREE_SECONDS = 600  # how long a process waits for the others' checks
POLL_SECONDS = 1.0  # the watchdog's beat
LOST_SECONDS = 30.0  # a peer silent this long is gone (JAX's own heartbeat timeout is 100 s)
GRACE_SECONDS = 2.5 * POLL_SECONDS  # process 0 waits this long after its stop notice
ANSWER_SECONDS = LOST_SECONDS  # a key-value call unanswered this long: the service is gone (process 0 frozen)
LOST_PEER_WORDS = ("Connection closed by peer", "Connection reset by peer", "heartbeat timeout",
                   "coordination service", "Socket closed")  # in an error: a peer or the service went away


class Disagreement(ValueError):
    """The processes do not run the same study, or one refused it: every process knows."""


_state = {"round": 0}
_watching: list[threading.Event] = []  # the running watchdog's stop event (at most one)


def start(coordinator: str | None = None, num_processes: int | None = None, process_id: int | None = None) -> None:
    """jax.distributed.initialize with the given coordinator ("host:port"), process count and
    id (all three, or none: then from the cluster's environment, e.g. SLURM); ValueError naming
    the options otherwise. On the CPU, collectives go through gloo (set before the backend starts)."""
    given = [coordinator, num_processes, process_id]
    if any(v is not None for v in given) and not all(v is not None for v in given):
        raise ValueError("--distributed takes --coordinator, --num-processes and --process-id together, or none")
    if num_processes is not None and not (num_processes >= 1 and 0 <= process_id < num_processes):
        raise ValueError(f"--process-id must be in [0, --num-processes), got {process_id} of {num_processes}")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if coordinator is None:
        jax.distributed.initialize()
    else:
        jax.distributed.initialize(coordinator, num_processes=num_processes, process_id=process_id)


def _client():
    return distributed.global_state.client


def _many() -> bool:
    return jax.process_count() > 1 and _client() is not None


def identity(plan: Plan) -> dict:
    """What the processes must share: {envs: {label: make}, study: the study's configuration
    (`plan.study_config`), study_key, units: {"label / method": config key}}."""
    study = study_config(plan)
    return {"envs": {e.label: e.make for e in plan.envs}, "study": json.loads(json.dumps(study, default=str)),
            "study_key": config_key(study), "units": {f"{e} / {m}": k for (e, m), k in unit_keys(plan).items()}}


def _short(value) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


def differences(reports: list[dict]) -> list[str]:
    """What differs between each process's report ({"ok": True, "identity": ...} or {"ok":
    False, "message": ...}) and process 0's, one phrase each: a refusal, an environment
    (label and make), a field of the study's configuration, a unit's configuration key."""
    n = len(reports)
    found = [f"process {k} of {n} refused the study: {r.get('message')}" for k, r in enumerate(reports)
             if not r.get("ok")]
    if found:
        return found
    base = reports[0]["identity"]
    for k, report in enumerate(reports[1:], start=1):
        mine, where = report["identity"], f"process {k} of {n}"
        differ = [f"{where}: environment {label!r} is {mine['envs'].get(label, '(none)')} there, "
                  f"{base['envs'].get(label, '(none)')} on process 0"
                  for label in sorted(set(base["envs"]) | set(mine["envs"]))
                  if base["envs"].get(label) != mine["envs"].get(label)]
        differ += [f"{where}: {field} is {_short(mine['study'].get(field))} there, "
                   f"{_short(base['study'].get(field))} on process 0"
                   for field in sorted(set(base["study"]) | set(mine["study"]))
                   if base["study"].get(field) != mine["study"].get(field)]
        if not differ:  # the same environments and study: the units differ in their methods' options
            differ = [f"{where}: unit {unit} has configuration key {mine['units'].get(unit, '(none)')} there, "
                      f"{base['units'].get(unit, '(none)')} on process 0 (its method or options differ)"
                      for unit in sorted(set(base["units"]) | set(mine["units"]))
                      if base["units"].get(unit) != mine["units"].get(unit)]
        found += differ
    return found


def _key(round_: int, process: int) -> str:
    return f"hcjax/round{round_}/{process}"


def refuse(error: BaseException) -> None:
    """Tell the other processes that this one failed its checks (`error`'s message): they stop
    with it. Once per error; nothing with one process or after `agree` raised."""
    if not _many() or getattr(error, "told_peers", False):
        return
    error.told_peers = True
    round_, _state["round"] = _state["round"], _state["round"] + 1
    with contextlib.suppress(Exception):  # the others may be gone already: nothing more to tell
        _client().key_value_set(_key(round_, jax.process_index()), json.dumps({"ok": False, "message": str(error)}))


def agree(plan: Plan, timeout: float = AGREE_SECONDS) -> None:
    """Every process's `identity(plan)` compared with process 0's before any work;
    Disagreement naming the process and what differs (a peer's refusal included) otherwise.
    Waits at most `timeout` seconds for each other process. Nothing with one process."""
    if not _many():
        return
    client, me, n = _client(), jax.process_index(), jax.process_count()
    round_, _state["round"] = _state["round"], _state["round"] + 1
    client.key_value_set(_key(round_, me), json.dumps({"ok": True, "identity": identity(plan)}, default=str))
    reports = []
    for k in range(n):
        try:
            reports.append(json.loads(client.blocking_key_value_get(_key(round_, k), int(timeout * 1000))))
        except Exception as e:  # noqa: BLE001 - a timeout, or the service gone: no study to agree on
            error = Disagreement(f"process {k} of {n} did not report its checks within {timeout:g} s "
                                 f"({str(e).splitlines()[0]}): start the same command on every process")
            error.told_peers = True
            raise error from None
    found = differences(reports)
    if found:
        refused = all(r.get("ok") for r in reports[:1]) and not all(r.get("ok") for r in reports)
        error = Disagreement("; ".join(found) + ", so no process starts" if refused else
                             "the processes do not run the same study, so none starts: " + "; ".join(found) +
                             " (give every process the same study file, options and environments)")
        error.told_peers = True
        raise error


def lost_peer(error: BaseException) -> bool:
    """Whether `error` says that another process (or the coordination service) went away."""
    text = str(error)
    return any(words in text for words in LOST_PEER_WORDS)


def leave_if_lost(errors: list[BaseException], log: Callable[[str], None] | None = None) -> None:
    """With several processes, when one of `errors` says another process went away (not our
    failure): `log` it (process 0: its run.log), then `leave` (exit 1). Nothing otherwise."""
    lost = next((e for e in errors if _many() and lost_peer(e)), None)
    if lost is not None:
        cause = f"{type(lost).__name__}: {str(lost).splitlines()[0]}"
        if log is not None:
            log(f"hcjax run: lost another process ({cause})")
        leave(f"it lost another process ({cause})")


def leave(reason: str, status: int = 1) -> None:
    """This process stops now: tell the others (`hcjax/stopped/<process>`), print `reason` and
    how to resume, exit with `status` without JAX's shutdown barrier (module docstring)."""
    me, n = jax.process_index(), jax.process_count()
    for stop in _watching:
        stop.set()
    with contextlib.suppress(Exception):  # a frozen service: not waited on for longer than a beat or two
        _answered(_client().key_value_set, f"hcjax/stopped/{me}", reason, allow_overwrite=True,
                  timeout=2 * POLL_SECONDS)
    print(f"hcjax run: process {me} of {n} stops: {reason}. Run the same command on every process again to "
          f"resume (finished units and checkpoints are kept).", file=sys.stderr, flush=True)
    sys.stdout.flush()
    if me == 0:
        time.sleep(GRACE_SECONDS)  # the others read the notice from this process's service
    os._exit(status)


def _watch(stop: threading.Event) -> None:
    """The watchdog's loop (see `watchdog`): beat, look at the others, `leave` with the reason."""
    client, me, n = _client(), jax.process_index(), jax.process_count()
    heard = {k: (None, time.monotonic()) for k in range(n) if k != me}
    beat, reason = 0, None
    while reason is None and not stop.wait(POLL_SECONDS):
        try:
            beat += 1
            _answered(client.key_value_set, f"hcjax/alive/{me}", str(beat), allow_overwrite=True)
            reason = _look(client, heard, n)
        except Exception as e:  # noqa: BLE001 - the coordination service is gone with process 0, or frozen
            if stop.is_set():
                return
            reason = f"the coordination service on process 0 cannot be reached ({str(e).splitlines()[0]})"
    if reason is not None:
        leave(reason)


def _look(client, heard: dict, n: int) -> str | None:
    """Why this process must stop, from the others' keys (None: they are alive, or finished);
    `heard`: process -> (its last alive mark, since when), updated, finished ones dropped."""
    for k, (last, since) in list(heard.items()):
        notice = _try_get(client, f"hcjax/stopped/{k}")
        if notice is not None:
            return f"process {k} of {n} stopped ({notice})"
        if _try_get(client, f"hcjax/finished/{k}") is not None:  # done with the work (or refused it)
            del heard[k]
            continue
        now = _try_get(client, f"hcjax/alive/{k}")
        if now != last:
            heard[k] = (now, time.monotonic())
        elif time.monotonic() - since > LOST_SECONDS:
            return f"process {k} of {n} has not answered for {LOST_SECONDS:g} s (killed, or its machine lost)"
    return None


def _answered(call: Callable, *args, timeout: float = ANSWER_SECONDS, **kwargs):
    """call(*args, **kwargs), or TimeoutError when it has not returned within `timeout` seconds.
    The key-value store's calls have no timeout of their own: with process 0 stopped (SIGSTOP,
    a machine that hangs) its service never answers, and a call would wait until JAX's heartbeat
    timeout aborts this process (SIGABRT, about 90 s, without our message). The call runs in a
    daemon thread, left behind when it does not return (the process then leaves)."""
    box: dict = {}

    def run():
        try:
            box["value"] = call(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            box["error"] = e

    thread = threading.Thread(target=run, name="hcjax-key-value", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise TimeoutError(f"no answer within {timeout:g} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _try_get(client, key: str) -> str | None:
    try:
        return _answered(client.key_value_try_get, key)
    except Exception as e:
        if "NOT_FOUND" in str(e):
            return None
        raise


@contextlib.contextmanager
def watchdog() -> Iterator[None]:
    """Watch the other processes while the block runs (module docstring); nothing with one
    process. The watch ends with the block."""
    if not _many():
        yield
        return
    stop = threading.Event()
    thread = threading.Thread(target=_watch, args=(stop,), name="hcjax-watchdog", daemon=True)
    _watching.append(stop)
    thread.start()
    try:
        yield
    finally:  # this process is done (or refused the study): the others stop watching it
        stop.set()
        _watching.remove(stop)
        thread.join(timeout=5 * POLL_SECONDS)
        with contextlib.suppress(Exception):
            _answered(_client().key_value_set, f"hcjax/finished/{jax.process_index()}", "1", allow_overwrite=True,
                      timeout=2 * POLL_SECONDS)
