"""What a unit has produced so far (`Record`) and its checkpoint in the study directory
(`Checkpoint`): saved atomically after every segment, so a killed unit resumes from its
last segment with bit-identical results (JAX environments)."""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import jax
import numpy as np

from experiments.study import validate
from experiments.study.devices import to_host
from experiments.study.store import StudyDir


@dataclasses.dataclass
class Record:
    """What a unit has produced so far (kept in its checkpoint): `done` iterations;
    per-segment metrics, each {name: (n, k[, h])}; evaluations (n,) with the iteration
    count at each; seconds per segment."""

    done: int = 0
    chunks: list = dataclasses.field(default_factory=list)
    evals: list = dataclasses.field(default_factory=list)
    eval_its: list = dataclasses.field(default_factory=list)
    seg_times: list = dataclasses.field(default_factory=list)
    lineage: list = dataclasses.field(default_factory=list)  # (iteration, parents (n,), objectives (n,))

    def add(self, length: int, metrics: dict, reward: np.ndarray | None, seconds: float) -> None:
        self.done += length
        self.chunks.append({k: np.asarray(v) for k, v in metrics.items()})
        if reward is not None:
            self.evals.append(np.asarray(reward, np.float32))
            self.eval_its.append(self.done)
        self.seg_times.append(seconds)

    def arrays(self) -> dict[str, np.ndarray]:
        """Everything as named arrays (for the checkpoint); `from_arrays` inverts it."""
        out = {f"metric/{k}": v for k, v in self.metrics().items()}
        out.update({"eval_reward": self.eval_reward(), "eval_iteration": np.asarray(self.eval_its, np.int32),
                    "segment_seconds": np.asarray(self.seg_times, np.float64), "done": np.asarray(self.done)})
        out.update(self.lineage_arrays())
        return out

    def lineage_arrays(self) -> dict[str, np.ndarray]:
        """lineage_iteration (K,), lineage_parent (n, K), lineage_objective (n, K)."""
        if not self.lineage:
            return {}
        its, parents, objectives = zip(*self.lineage)
        return {"lineage_iteration": np.asarray(its, np.int32),
                "lineage_parent": np.stack(parents, axis=1).astype(np.int32),
                "lineage_objective": np.stack(objectives, axis=1).astype(np.float32)}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> Record:
        metrics = {k[len("metric/"):]: v for k, v in arrays.items() if k.startswith("metric/")}
        rec = cls(done=int(arrays["done"]), chunks=[metrics] if metrics else [],
                  evals=list(np.moveaxis(arrays["eval_reward"], 1, 0)),
                  eval_its=[int(i) for i in arrays["eval_iteration"]],
                  seg_times=[float(t) for t in arrays["segment_seconds"]])
        if "lineage_iteration" in arrays:
            rec.lineage = [(int(it), arrays["lineage_parent"][:, k], arrays["lineage_objective"][:, k])
                           for k, it in enumerate(arrays["lineage_iteration"])]
        return rec

    def metrics(self) -> dict[str, np.ndarray]:
        if not self.chunks:
            return {}
        return {k: np.concatenate([c[k] for c in self.chunks], axis=1) for k in self.chunks[0]}

    def eval_reward(self) -> np.ndarray:
        return np.stack(self.evals, axis=1) if self.evals else np.zeros((0, 0), np.float32)

    def result(self, t0: float) -> dict[str, np.ndarray]:
        """A finished unit's arrays: the metrics {name: (n, T)}, eval_iteration (E,),
        eval_reward (n, E), the lineage if any, and train_seconds since `t0`."""
        out = self.metrics()
        out["eval_iteration"] = np.asarray(self.eval_its, np.int32)
        out["eval_reward"] = self.eval_reward().astype(np.float32)
        out["train_seconds"] = time.perf_counter() - t0
        out.update(self.lineage_arrays())
        return out


class Checkpoint:
    """A unit's checkpoint in its study directory: the batched learner state (every leaf,
    gathered to the host) and the Record, saved atomically after every segment, tagged
    with the unit's config key. `store` None: no checkpoints (e.g. processes other
    than 0 under jax.distributed, which only read)."""

    def __init__(self, store: StudyDir | None, env: str, method: str, config_key: str,
                 log: Callable[[str], None], write: bool = True):
        self.store, self.env, self.method, self.key, self.log, self.write = store, env, method, config_key, log, write

    def save(self, state, record: Record) -> None:
        leaves = [to_host(x) for x in jax.tree.leaves(state)]  # every process takes part in the gather
        if self.store is None or not self.write:
            return
        arrays = {f"state/{i:05d}": leaf for i, leaf in enumerate(leaves)}
        arrays.update({f"record/{k}": v for k, v in record.arrays().items()})
        arrays["config_key"] = np.asarray(self.key)
        self.store.save_checkpoint(self.env, self.method, arrays)

    def load(self, like) -> tuple[list[np.ndarray], Record] | None:
        """(state leaves, Record) of a checkpoint matching `like` (a pytree of
        ShapeDtypeStructs of the state) and this unit's config key; None otherwise
        (a mismatching or inconsistent checkpoint is moved aside, with a line naming it).
        Before anything is decompressed its size is bounded by the state's and
        validate.MAX_RECORD_BYTES; the record is checked (`validate.record_problem`)."""
        if self.store is None:
            return None
        want = jax.tree.leaves(like)
        limit = sum(int(np.prod(w.shape)) * np.dtype(w.dtype).itemsize for w in want) + validate.MAX_RECORD_BYTES
        arrays = self.store.load_checkpoint(self.env, self.method, log=self.log, limit=limit)
        if arrays is None:
            return None
        leaves = [arrays[k] for k in sorted(k for k in arrays if k.startswith("state/"))]
        fits = str(arrays.get("config_key")) == self.key and len(leaves) == len(want) and all(
            a.shape == w.shape and a.dtype == w.dtype for a, w in zip(leaves, want))
        if not fits:
            path = self.store.checkpoint_path(self.env, self.method)
            if self.write:
                self.log(f"{path}: a checkpoint of another configuration; {self.store.moved_aside(path)}")
            return None
        record_arrays = {k[len("record/"):]: v for k, v in arrays.items() if k.startswith("record/")}
        problem = validate.record_problem(record_arrays)
        if problem:
            path = self.store.checkpoint_path(self.env, self.method)
            if self.write:
                self.log(f"warning: {path}: inconsistent checkpoint ({problem}); "
                         f"{self.store.moved_aside(path)}, the unit starts over")
            return None
        record = Record.from_arrays(record_arrays)
        if self.write:
            self.log(f"resume {self.env} / {self.method} from its checkpoint after iteration {record.done}")
        return leaves, record

    def remove(self) -> None:
        if self.store is not None and self.write:
            self.store.remove_checkpoint(self.env, self.method)
