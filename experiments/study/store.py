"""Results on disk: the study directory, its lock, manifest and unit files.

Layout of a study directory (`StudyDir` owns every path; the engine and `hcjax plot`
ask it, neither spells a path):

    manifest.json                 the resolved study, its study key, package versions, hcjax's git commit
                                  (`provenance`), devices, start time; previous runs' headers under `runs`
    units/<env>__<method>.npz     one finished unit, see `UnitResult`
    units/corrupt/                unreadable units and checkpoints moved aside (recomputed on
                                  resume), each under a name of its own (`StudyDir.quarantine`)
    checkpoints/<unit>.npz        the training state of the unit in flight (see checkpoints); the
                                  directory is removed once no checkpoint is left
    run.log                       every run's log lines and full tracebacks, appended
    .lock                         held by the one process writing the directory
    figures/, tables/, report.md  written by `hcjax plot`

Every write goes to a temporary file in the same directory, is fsynced and then
`os.replace`d onto its name, so a file is either absent or complete (a killed write's
temp file is deleted with the next write or removal of its file); files get the user's umask
(0644 typically). Nothing is written through a link planted in the directory (`check_layout`
before any work, and `experiments.study.files` for every write). Units and checkpoints are
validated when read (`experiments.study.validate`). One writer per directory:
`StudyDir.lock()` holds an exclusive lock (filelock) for the whole run, and a second run on the
same directory fails at once naming the process that holds it.

Configuration checks. A unit's configuration (everything that changes its numbers) is hashed into
its `config_key`; the part every unit of a study shares (seeds, iterations, PPO settings, search
space, ... - everything but the environment, the method and the method's options) into the
`study_key`. A directory holds one study key: a run with another one is refused before any work, and
`hcjax plot` refuses units of different study keys. Adding environments or methods with the same
study key to a directory is allowed (the manifest lists the union).
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import io
import itertools
import json
import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path

import filelock
import numpy as np

from experiments.study import validate
from experiments.study.files import (  # noqa: F401 - atomic_write_* are part of this module's API
    PlantedLink,
    append_text,
    atomic_write_bytes,
    atomic_write_text,
    check_writable_dir,
    clear_killed_writes,
    file_chars,
    linked,
    make_dir,
    move_no_replace,
    not_regular,
    open_regular,
)
from experiments.study.keys import jsonable, study_key
from experiments.study.provenance import git_commit

FORMAT = 1

# Per-iteration arrays of every seed: (S, T) except hparams (S, T, h).
SEED_METRICS = ("train_reward", "objective", "hparams", "frames", "rejected", "episode_return")
LINEAGE = ("lineage_iteration", "lineage_parent", "lineage_objective")  # optional: population methods


@dataclasses.dataclass
class UnitResult:
    """Everything one unit (env, method) produced.

    seeds: (S,) int seed ids; train_reward, objective, frames, rejected,
    episode_return: (S, T); hparams: (S, T, h); eval_iteration: (E,) iterations done
    when evaluated (1-based); eval_reward: (S, E) evaluation reward sums; tuner_time:
    (T,) seconds of host ask+tell for all agents of the unit at each iteration;
    meta: env, method, hparam names, timings, devices, ... (JSON-able).
    Population methods only (empty otherwise), K population steps:
    lineage_iteration: (K,) iterations done at each step; lineage_parent: (S, K) the
    agent each seed continued from (itself if not replaced); lineage_objective: (S, K)
    the objectives the step ranked; the values chosen are hparams[:, iteration].
    """

    seeds: np.ndarray
    train_reward: np.ndarray
    objective: np.ndarray
    hparams: np.ndarray
    frames: np.ndarray
    rejected: np.ndarray
    episode_return: np.ndarray
    eval_iteration: np.ndarray
    eval_reward: np.ndarray
    tuner_time: np.ndarray
    meta: dict
    lineage_iteration: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0,), np.int32))
    lineage_parent: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 0), np.int32))
    lineage_objective: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 0), np.float32))

    @property
    def success(self) -> np.ndarray:
        """(S,) bool: the seed finished without a rejected update and without NaN/inf
        in its training reward or evaluation reward sums."""
        ok = (self.rejected.sum(axis=1) == 0)
        ok &= np.all(np.isfinite(self.train_reward), axis=1)
        ok &= np.all(np.isfinite(self.eval_reward), axis=1)
        return ok


def unit_name(env: str, method: str) -> str:
    """File stem of a unit, `<env>__<method>`: each part made one safe path component
    (characters other than letters, digits, '-', '_' and '.' become '_'; a part over
    80 characters is cut and ends with a hash of the whole). Plain labels keep their
    names; labels that still share one (`a/b` and `a_b`, or differing only in case) are
    refused before any work (`presets.resolve`, `engine.prepare`)."""
    return f"{_safe_part(env)}__{_safe_part(method)}"


def _safe_part(text: str) -> str:
    safe = file_chars(text)
    if len(safe) > 80:
        safe = f"{safe[:63]}-{hashlib.sha256(str(text).encode()).hexdigest()[:16]}"
    return safe


def unit_bytes(result: UnitResult) -> bytes:
    """The .npz bytes of a unit (arrays + meta as JSON)."""
    arrays = {f.name: np.asarray(getattr(result, f.name)) for f in dataclasses.fields(result) if f.name != "meta"}
    arrays["meta"] = np.asarray(json.dumps({"format": FORMAT, **result.meta}, default=jsonable))
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def load_unit(path: str | os.PathLike) -> UnitResult:
    """Read one unit file; raises CorruptFile naming it when it cannot be read or is
    inconsistent. Before anything is decompressed its members' headers are checked
    (total size within validate.MAX_UNIT_BYTES, shapes consistent with each other, see
    `validate.unit_shapes`); after loading, its values (`validate.unit_problem`)."""
    try:
        with open_regular(path) as file:  # a FIFO or a device named like a unit: refused, not waited on
            problem = validate.unit_shapes(validate.npz_headers(file, validate.MAX_UNIT_BYTES))
            if problem is None:
                file.seek(0)
                with np.load(file, allow_pickle=False) as z:
                    fields = {f.name: np.asarray(z[f.name]) for f in dataclasses.fields(UnitResult)
                              if f.name != "meta" and (f.name in z.files or f.name not in LINEAGE)}
                    present = {k: v for k, v in fields.items() if k in z.files}
                    present["meta"] = np.asarray(z["meta"])
                meta = json.loads(str(present["meta"]))
                problem = validate.unit_problem(present, meta)
    except Exception as e:  # noqa: BLE001 - any failure to read means the same: unreadable
        raise CorruptFile(f"{path}: unreadable unit file ({type(e).__name__}: {e})") from e
    if problem:
        raise CorruptFile(f"{path}: inconsistent unit file ({problem})")
    return UnitResult(meta=meta, **fields)


class CorruptFile(ValueError):
    """A results file that cannot be read (truncated, garbage, wrong format)."""


class StudyBusy(RuntimeError):
    """Another process holds the study directory's lock."""


def _differences(a: dict, b: dict, prefix: str = "") -> list[str]:
    """Human-readable differences between two nested JSON-able dicts (a: old, b: new)."""
    out = []
    for k in sorted(set(a) | set(b), key=str):
        name = f"{prefix}{k}"
        va, vb = a.get(k, "<absent>"), b.get(k, "<absent>")
        if isinstance(va, dict) and isinstance(vb, dict):
            out += _differences(va, vb, name + ".")
        elif json.dumps(va, sort_keys=True, default=jsonable) != json.dumps(vb, sort_keys=True, default=jsonable):
            out.append(f"{name}: {va!r} -> {vb!r}")
    return out


class StudyDir:
    """One study directory (see the module docstring for its layout)."""

    MANIFEST = "manifest.json"
    UNITS = "units"
    CORRUPT = "corrupt"
    CHECKPOINTS = "checkpoints"
    LOG = "run.log"
    LOCK = ".lock"
    OWNER = ".lock.owner"

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._lock = None

    # -- paths --
    @property
    def manifest_path(self) -> Path:
        return self.path / self.MANIFEST

    @property
    def units_dir(self) -> Path:
        return self.path / self.UNITS

    @property
    def log_path(self) -> Path:
        return self.path / self.LOG

    def unit_path(self, env: str, method: str) -> Path:
        return self.units_dir / f"{unit_name(env, method)}.npz"

    def checkpoint_path(self, env: str, method: str) -> Path:
        return self.path / self.CHECKPOINTS / f"{unit_name(env, method)}.npz"

    # -- checks before any work --
    def check_layout(self, entries: tuple[str, ...] | None = None) -> None:
        """ValueError naming the first of `entries` (default: every entry hcjax writes, see
        LAYOUT) that is a symbolic link, or a file where a directory belongs or the reverse;
        links are refused under tensorboard/ too (see experiments.study.files)."""
        for name in entries or tuple(LAYOUT):
            p = self.path / name
            if p.is_symlink():
                raise PlantedLink(f"{p} is a symbolic link: hcjax does not write through links inside a study "
                                  f"directory (they could point anywhere); remove it (a real "
                                  f"{'directory' if LAYOUT[name] else 'file'} is fine)")
            if LAYOUT[name] and p.exists() and not p.is_dir():
                raise ValueError(f"{p} is a file, but hcjax keeps a directory there ({name}/); move it aside")
            if not LAYOUT[name] and p.is_dir():
                raise ValueError(f"{p} is a directory, but hcjax keeps a file there ({name}); move it aside")
            if not LAYOUT[name] and p.exists() and not_regular(p.stat().st_mode):  # a FIFO: reading it waits
                raise ValueError(f"{p} is {not_regular(p.stat().st_mode)}, not a file hcjax can read; move it aside")
        if "tensorboard" in (entries or LAYOUT) and (self.path / "tensorboard").is_dir():
            for top, dirs, files in os.walk(self.path / "tensorboard"):  # every depth; links are not walked
                for p in sorted(Path(top) / name for name in dirs + files):
                    if p.is_symlink():
                        raise PlantedLink(f"{p} is a symbolic link: hcjax does not write through links inside a "
                                          f"study directory (they could point anywhere); remove it")

    def check_writable(self) -> None:
        """ValueError when the directory cannot be created or written, or an entry hcjax
        writes is a link or of the wrong kind (named, with why)."""
        check_writable_dir(self.path, "--out")
        self.check_layout()

    def check_plot_writable(self) -> None:
        """ValueError naming the path when `hcjax plot` could not write its figures and tables
        here: a read-only or unwritable directory, a link or a file in the way."""
        self.check_layout(("figures", "tables", "report.md"))
        for p in (self.path, self.path / "figures", self.path / "tables"):
            if p.is_dir():
                check_writable_dir(p, "study directory" if p == self.path else "directory", root=self.path)

    @contextlib.contextmanager
    def lock(self):
        """Hold the directory's exclusive lock; StudyBusy naming the holder if taken."""
        self.check_writable()  # a .lock that is a link is refused there: filelock would truncate its target
        lock = filelock.FileLock(str(self.path / self.LOCK), timeout=0)
        try:
            lock.acquire()
        except filelock.Timeout:
            raise StudyBusy(f"{self.path} is in use by another hcjax run ({self._owner()}); wait for it to "
                            f"finish or stop it, or use another --out") from None
        owner = self.path / self.OWNER
        try:
            atomic_write_text(owner, json.dumps({"pid": os.getpid(), "host": platform.node(), "argv": sys.argv,
                                                 "started": _now()}), root=self.path)
            yield self
        finally:
            owner.unlink(missing_ok=True)
            lock.release()

    def _owner(self) -> str:
        try:
            o = json.loads((self.path / self.OWNER).read_text())
            return f"pid {o['pid']} on {o['host']}, started {o['started']}: {' '.join(map(str, o['argv']))}"
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            return "holder unknown"

    # -- manifest --
    def read_manifest(self) -> dict | None:
        """The manifest, None if absent; ValueError naming the file and the fix if unreadable."""
        p = self.manifest_path
        if not p.exists():
            return None
        try:
            with open_regular(p) as f:
                manifest = json.loads(f.read())
            if not isinstance(manifest, dict) or not isinstance(manifest.get("config"), dict):
                raise ValueError("no 'config' object")
        except (OSError, ValueError, RecursionError) as e:  # RecursionError: nested past the parser's limit
            raise ValueError(f"{p} is corrupt ({type(e).__name__}: {e}). Fix: move it aside "
                             f"(mv {p} {p}.bad); the next run writes a new one and keeps the unit files") from None
        return manifest

    def study_keys_on_disk(self) -> set[str]:
        """Study keys of the manifest (or, for older manifests, of the readable units)."""
        manifest = self.read_manifest()
        if manifest and manifest.get("study_key"):
            return {manifest["study_key"]}
        keys = set()
        for path in sorted(self.units_dir.glob("*.npz")):
            try:
                keys.add(study_key(load_unit(path).meta.get("config", {})))
            except CorruptFile:
                continue
        return keys

    def check_study(self, study: dict, key: str) -> None:
        """ValueError if the directory holds a study with another study key."""
        on_disk = self.study_keys_on_disk() - {key}
        if not on_disk:
            return
        manifest = self.read_manifest() or {}
        old = manifest.get("study") or {}
        diff = _differences(old, study) if old else []
        detail = ("; differences: " + "; ".join(diff[:8])) if diff else ""
        raise ValueError(f"{self.path} holds a study with a different configuration (study key "
                         f"{', '.join(sorted(on_disk))}, this run {key}){detail}. Use another --out, or "
                         f"delete {self.path} to start over")

    def write_manifest(self, config: dict, study: dict, key: str, installation: dict,
                       merge: Callable[[dict, dict], dict] | None = None) -> dict:
        """Write the manifest: `config` (merged with the previous one's by `merge(old, new)`
        when given), the study part and key, this run's header (kept under `runs`) with
        `installation` ({"packages": ..., "devices": ...}: `experiments.deps`, which the caller
        imports, so that reading and plotting a study imports neither jax nor the agents)."""
        previous = self.read_manifest()
        if previous is not None and merge is not None:
            config = merge(previous["config"], config)
        run = {"started": _now(), "argv": sys.argv, "git": git_commit(), **installation}
        manifest = {"format": FORMAT, "study_key": key, "study": study, "config": config, **run,
                    "runs": (previous.get("runs", []) if previous else []) + [run]}
        atomic_write_text(self.manifest_path, json.dumps(manifest, indent=2, default=jsonable), root=self.path)
        return manifest

    # -- units --
    def quarantine(self, path: Path) -> Path:
        """Move an unreadable unit or checkpoint file into units/corrupt/ (kept for
        inspection) as `<name>.<unit|checkpoint>.<local time>[.<n>]`, the first such name
        that is free: nothing there is ever replaced. Returns its new path."""
        kind = "checkpoint" if path.parent.name == self.CHECKPOINTS else "unit"
        stem = self.units_dir / self.CORRUPT / f"{path.name}.{kind}.{datetime.datetime.now():%Y%m%dT%H%M%S}"
        make_dir(stem.parent, self.path)
        for n in itertools.count():
            target = stem.with_name(f"{stem.name}.{n}" if n else stem.name)
            with contextlib.suppress(FileExistsError):
                move_no_replace(path, target)
                return target

    def moved_aside(self, path: Path) -> str:
        """Quarantine `path` and say so: 'moved <path> to <new path>' (for log lines)."""
        return f"moved {path} to {self.quarantine(path)}"

    def finished(self, env: str, method: str, config_key_: str, log: Callable[[str], None] = print) -> bool:
        """True when the unit's file is there with this configuration. An unreadable file is
        moved aside (and the unit recomputed); a readable one of another configuration
        raises ValueError."""
        path = self.unit_path(env, method)
        if not path.exists():
            return False
        linked(path, lambda message: log(f"warning: {message}"))
        try:
            unit = load_unit(path)
        except CorruptFile as e:
            log(f"{e}; {self.moved_aside(path)}, the unit will be recomputed")
            return False
        if unit.meta.get("config_key") != config_key_:
            raise ValueError(f"{path} exists with a different configuration (config key "
                             f"{unit.meta.get('config_key')}, this run {config_key_}); use another --out, or "
                             f"delete that file to recompute it")
        return True

    # -- checkpoints of the unit in flight --
    def save_checkpoint(self, env: str, method: str, arrays: dict[str, np.ndarray]) -> Path:
        """Write the unit's checkpoint atomically (an uncompressed .npz of `arrays`)."""
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        path = self.checkpoint_path(env, method)
        atomic_write_bytes(path, buf.getvalue(), root=self.path)
        return path

    def load_checkpoint(self, env: str, method: str, log: Callable[[str], None] = print,
                        limit: int | None = None) -> dict | None:
        """The unit's checkpoint arrays, None if there is none; an unreadable one, or one whose
        arrays would take more than `limit` bytes uncompressed (checked before decompressing),
        is moved aside (units/corrupt/) and None returned."""
        path = self.checkpoint_path(env, method)
        if not path.exists():
            return None
        try:
            with open_regular(path) as f:
                validate.npz_headers(f, limit)
                f.seek(0)
                with np.load(f, allow_pickle=False) as z:
                    return {k: np.asarray(z[k]) for k in z.files}
        except Exception as e:  # noqa: BLE001 - any failure to read means the same: unreadable
            log(f"{path}: unreadable checkpoint ({type(e).__name__}: {e}); {self.moved_aside(path)}, "
                f"the unit starts over")
            return None

    def remove_checkpoint(self, env: str, method: str) -> None:
        """Delete a unit's checkpoint, its killed writes' temp files and the emptied checkpoint directory."""
        path = self.checkpoint_path(env, method)
        path.unlink(missing_ok=True)
        clear_killed_writes(path)
        with contextlib.suppress(OSError):  # another unit's checkpoint is still there
            path.parent.rmdir()

    def save_unit(self, result: UnitResult) -> Path:
        """Write one unit atomically; returns its path."""
        path = self.unit_path(result.meta["env"], result.meta["method"])
        atomic_write_bytes(path, unit_bytes(result), root=self.path)
        clear_killed_writes(path)
        return path

    def units(self, warn: Callable[[str], None] | None = None) -> list[UnitResult]:
        """Every readable unit, in the manifest's order. Unreadable files are skipped with a
        warning naming them; units of different study keys raise ValueError."""
        warn = warn or (lambda msg: print(f"warning: {msg}", file=sys.stderr))
        if not self.units_dir.is_dir():
            return []
        units = _named_units(sorted(self.units_dir.glob("*.npz")), warn)
        manifest = self.read_manifest()
        keys = {}
        for u in units:
            keys.setdefault(u.meta.get("study_key") or study_key(u.meta.get("config", {})), []).append(
                unit_name(u.meta["env"], u.meta["method"]))
        expected = (manifest or {}).get("study_key")
        if len(keys) > 1 or (expected and set(keys) - {expected}):
            detail = "; ".join(f"{k}: {', '.join(v)}" for k, v in keys.items())
            raise ValueError(f"{self.units_dir} mixes units of different study configurations "
                             f"(manifest study key {expected}; units by study key: {detail}); "
                             f"move the odd ones out")
        order = {}
        if manifest:
            envs = [e["label"] for e in manifest["config"].get("env_choices", [])]
            methods = list(manifest["config"].get("methods", []))
            order = {(e, m): i for i, (e, m) in enumerate((e, m) for e in envs for m in methods)}
        return sorted(units, key=lambda u: order.get((u.meta["env"], u.meta["method"]), len(order)))

    def log(self, line: str) -> None:
        """Append a timestamped line to run.log (never through a link: OSError)."""
        append_text(self.log_path, f"{_now()} {line}\n")


# What hcjax writes in a study directory: entry -> whether it is a directory.
LAYOUT = {"manifest.json": False, "units": True, "units/corrupt": True, "checkpoints": True, "run.log": False,
          ".lock": False, ".lock.owner": False, "figures": True, "tables": True, "report.md": False,
          "tensorboard": True, "export": True}


def _named_units(paths: list[Path], warn: Callable[[str], None]) -> list[UnitResult]:
    """The readable units of `paths`, each once: an unreadable or inconsistent file (a FIFO or
    a device among them) is skipped with a warning naming it, a symbolic link is read with a
    warning naming it (`linked`); a file not named after what it holds (copied from
    another unit's name) is named in a warning, and skipped when another file holds the
    same unit (the one of the right name is kept)."""
    loaded = []
    for path in paths:
        linked(path, warn)
        try:
            loaded.append((path, load_unit(path)))
        except CorruptFile as e:
            warn(f"{e}; skipped")
    def key(u):
        return u.meta["env"], u.meta["method"]

    proper = {key(u) for p, u in loaded if p.name == f"{unit_name(*key(u))}.npz"}
    units, seen = [], set()
    for path, u in loaded:
        expected = f"{unit_name(*key(u))}.npz"
        if path.name != expected:
            env, method = key(u)
            if key(u) in proper or key(u) in seen:
                warn(f"{path} holds the unit {env} / {method}, whose file is {expected}, which another file holds "
                     f"too; skipped")
                continue
            warn(f"{path} holds the unit {env} / {method}, whose file is {expected}: rename it (a run does not "
                 f"see it under this name)")
        seen.add(key(u))
        units.append(u)
    return units


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


# Module-level shortcuts for readers of a study directory.
def load_units(out: str | os.PathLike) -> list[UnitResult]:
    return StudyDir(out).units()


def read_manifest(out: str | os.PathLike) -> dict | None:
    return StudyDir(out).read_manifest()
