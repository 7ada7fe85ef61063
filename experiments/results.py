"""Results on disk: one file per finished unit (environment, method), and a manifest.

Layout of a study directory:

    manifest.json                 config (the resolved preset), package versions, git
                                  commit, devices, start time; rewritten on every run
                                  (previous runs are kept in `runs`)
    units/<env>__<method>.npz     one finished unit, see `UnitResult`
    figures/, tables/             written by `hcjax plot`

Every write goes to a temporary file in the same directory and is then `os.replace`d
onto its name, so a file is either absent or complete: killing a run loses at most the
unit in flight, and `hcjax run` on the same directory skips the units already there.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

MANIFEST = "manifest.json"
UNITS = "units"
FORMAT = 1

# Per-iteration arrays of every seed: (S, T) except hparams (S, T, h).
SEED_METRICS = ("train_reward", "objective", "hparams", "frames", "rejected", "episode_return")


@dataclasses.dataclass
class UnitResult:
    """Everything one unit (env, method) produced.

    seeds: (S,) int seed ids; train_reward, objective, frames, rejected,
    episode_return: (S, T); hparams: (S, T, h); eval_iteration: (E,) iterations done
    when evaluated (1-based); eval_reward: (S, E) evaluation reward sums; tuner_time:
    (T,) seconds of host ask+tell for all agents of the unit at each iteration;
    meta: env, method, hparam names, timings, devices, ... (JSON-able).
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

    @property
    def success(self) -> np.ndarray:
        """(S,) bool: the seed finished without a rejected update and without NaN/inf
        in its training reward or evaluation reward sums."""
        ok = (self.rejected.sum(axis=1) == 0)
        ok &= np.all(np.isfinite(self.train_reward), axis=1)
        ok &= np.all(np.isfinite(self.eval_reward), axis=1)
        return ok


def unit_name(env: str, method: str) -> str:
    """File stem of a unit; env labels are file-name safe already."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in env)
    return f"{safe}__{method}"


def unit_path(out: str | os.PathLike, env: str, method: str) -> Path:
    return Path(out) / UNITS / f"{unit_name(env, method)}.npz"


# Markers of a running study, shared by the worker (`experiments.runner`) and the
# supervisor that restarts it (`experiments.cli.supervise`).
HEARTBEAT = ".heartbeat"  # touched while the worker makes progress
INFLIGHT = ".inflight"  # holds the unit_name being run
STALLED = ".stalled.json"  # suffix of the marker of a unit that stalled too often (it is skipped)


def heartbeat(out: str | os.PathLike) -> None:
    """Touch OUT/.heartbeat: the supervisor restarts a run without one for too long."""
    (Path(out) / HEARTBEAT).touch()


def stalled_path(out: str | os.PathLike, unit: str) -> Path:
    """Marker of the unit named `unit` (see `unit_name`) that stalled repeatedly."""
    return Path(out) / UNITS / f"{unit}{STALLED}"


def stalled_units(out: str | os.PathLike) -> list[str]:
    """Sorted names of the units marked stalled in OUT."""
    return sorted(p.name[: -len(STALLED)] for p in (Path(out) / UNITS).glob(f"*{STALLED}"))


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` atomically (temp file in the same directory, fsync, os.replace)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def save_unit(out: str | os.PathLike, result: UnitResult) -> Path:
    """Write one unit atomically; returns its path."""
    import io

    arrays = {f.name: np.asarray(getattr(result, f.name)) for f in dataclasses.fields(result) if f.name != "meta"}
    arrays["meta"] = np.asarray(json.dumps({"format": FORMAT, **result.meta}, default=_jsonable))
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    path = unit_path(out, result.meta["env"], result.meta["method"])
    atomic_write_bytes(path, buf.getvalue())
    return path


def load_unit(path: str | os.PathLike) -> UnitResult:
    with np.load(path, allow_pickle=False) as z:
        fields = {f.name: z[f.name] for f in dataclasses.fields(UnitResult) if f.name != "meta"}
        meta = json.loads(str(z["meta"]))
    return UnitResult(meta=meta, **fields)


def load_units(out: str | os.PathLike) -> list[UnitResult]:
    """Every finished unit in a study directory, in manifest order when it has one."""
    folder = Path(out) / UNITS
    if not folder.is_dir():
        return []
    units = [load_unit(p) for p in sorted(folder.glob("*.npz"))]
    order = {}
    manifest = read_manifest(out)
    if manifest:
        envs = [e["label"] for e in manifest["config"].get("env_choices", [])]
        methods = list(manifest["config"].get("methods", []))
        order = {(e, m): i for i, (e, m) in enumerate((e, m) for e in envs for m in methods)}
    return sorted(units, key=lambda u: order.get((u.meta["env"], u.meta["method"]), len(order)))


def is_done(out: str | os.PathLike, env: str, method: str, config_key: str) -> bool:
    """True when the unit's file exists, is readable, and was made with the same config."""
    path = unit_path(out, env, method)
    if not path.exists():
        return False
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
    except Exception:  # an unreadable file counts as not done; it will be rewritten
        return False
    return meta.get("config_key") == config_key


def _jsonable(x):
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (tuple, set)):
        return list(x)
    return str(x)


# ---- manifest ----------------------------------------------------------------------------

PACKAGES = ("jax", "jaxlib", "flax", "optax", "chex", "gymnax", "brax", "mujoco", "mujoco-mjx",
            "gymnasium", "numpy", "scipy", "matplotlib", "hcjax")


def package_versions() -> dict[str, str | None]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_commit(repo: str | os.PathLike | None = None) -> dict[str, Any]:
    """{'commit': sha or None, 'dirty': bool or None} of the repository holding this code."""
    repo = repo or Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True,
                             timeout=10).stdout.strip() or None
        status = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True,
                                timeout=10).stdout
        return {"commit": sha, "dirty": bool(status.strip()) if sha else None}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def device_info() -> dict[str, Any]:
    """The JAX backend, devices and host, for the manifest and the bench report."""
    import jax

    devices = jax.devices()
    return {
        "backend": jax.default_backend(),
        "devices": [str(d) for d in devices],
        "device_kind": devices[0].device_kind if devices else None,
        "local_device_count": jax.local_device_count(),
        "process_count": jax.process_count(),
        "host": platform.node(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
    }


def read_manifest(out: str | os.PathLike) -> dict | None:
    path = Path(out) / MANIFEST
    if not path.exists():
        return None
    return json.loads(path.read_text())


def write_manifest(out: str | os.PathLike, config: dict, config_key: str, extra: dict | None = None) -> dict:
    """Write (or update) the manifest; earlier runs' headers are kept under `runs`."""
    previous = read_manifest(out)
    run = {
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "argv": sys.argv,
        "packages": package_versions(),
        "git": git_commit(),
        "devices": device_info(),
        **(extra or {}),
    }
    manifest = {
        "format": FORMAT,
        "config_key": config_key,
        "config": config,
        **run,
        "runs": (previous.get("runs", []) if previous else []) + [run],
    }
    atomic_write_text(Path(out) / MANIFEST, json.dumps(manifest, indent=2, default=_jsonable))
    return manifest


def config_key(config: dict) -> str:
    """A short stable hash of everything that changes a unit's numbers."""
    import hashlib

    blob = json.dumps(config, sort_keys=True, default=_jsonable).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
