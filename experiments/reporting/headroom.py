"""Headroom: is there anything above the default for a tuner to find? From the tuning seeds only.

    rooms = headroom(units)          # env -> Headroom, from the tuning units `fixed` and `sweep`
    sentence(rooms["Pendulum-v1"])   # 'Pendulum-v1: 41 of 155 sweep configurations (26%) beat ...'

A test bed must leave room above its default, or it cannot tell tuners apart. Per environment,
with D the default's final evaluations on the tuning seeds (the `fixed` unit; without one, the
default's rows in a sweep drawn with `default`), sigma their standard deviation over seeds
(ddof 1) and, for each configuration of the sweep (every draw, the default's own rows left out),
its mean final evaluation over its tuning seeds:

    better     the configurations whose mean exceeds mean(D) by more than sigma
    share      better / configurations
    best       the best configuration's mean, and its margin over mean(D) in units of sigma

Where no configuration beats the default by more than sigma, the default is at the task's
ceiling as far as the sweep and the seeds can tell (`ceiling`: the best configuration's mean may
still be above the default's, but not by more than the seeds' own spread), and a verdict on that
task measures mostly what tuning costs. The study prints this once an environment's tuning units are done, before any of
its test seeds run (`experiments.study.engine`); the verdict and the claims page lead with it.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from experiments.reporting.views import final_eval
from experiments.study.protocol import SWEEP, configuration_means

DEFAULT = "fixed"


@dataclasses.dataclass(frozen=True)
class Headroom:
    """One environment's headroom (module docstring): env; configurations (of the sweep, the
    default's own left out); better (how many beat the default by more than sigma); default_mean,
    sigma (over default_runs runs); best (the best configuration's mean); margin (best -
    default_mean, in units of sigma; NaN when sigma is 0 or unknown)."""

    env: str
    configurations: int
    better: int
    default_mean: float
    sigma: float
    default_runs: int
    best: float
    margin: float

    @property
    def share(self) -> float:
        """better / configurations."""
        return self.better / self.configurations if self.configurations else float("nan")

    @property
    def ceiling(self) -> bool:
        """No configuration beats the default by more than one seed standard deviation."""
        return self.better == 0


def default_rows(meta: dict) -> np.ndarray:
    """(rows,) bool: the sweep's rows of the default (the first configuration of every draw of a
    sweep drawn with `default`; none otherwise)."""
    configuration = np.asarray(meta["configuration"])
    if not meta.get("default", False):
        return np.zeros(configuration.shape, bool)
    return configuration % int(meta["per_draw"]) == 0


def of_env(env: str, sweep, fixed=None) -> Headroom | None:
    """The Headroom of one environment from its tuning units (`sweep`, and `fixed` or None);
    None when the default's runs are fewer than two (no standard deviation)."""
    meta = sweep.meta["sweep"]
    scores, rows = final_eval(sweep), np.asarray(meta["configuration"])
    own = default_rows(meta)
    d = final_eval(fixed) if fixed is not None else scores[own]
    d = d[np.isfinite(d)]
    if d.size < 2:
        return None
    mean, sigma = float(d.mean()), float(d.std(ddof=1))
    means = configuration_means(scores, rows)
    drawn = np.setdiff1d(np.unique(rows), np.unique(rows[own]))
    means = means[drawn]
    finite = means[np.isfinite(means)]
    best = float(finite.max()) if finite.size else float("nan")
    margin = (best - mean) / sigma if sigma > 0 and np.isfinite(best) else float("nan")
    return Headroom(env=env, configurations=int(drawn.size), better=int(np.sum(means - mean > sigma)),
                    default_mean=mean, sigma=sigma, default_runs=int(d.size), best=best, margin=margin)


def headroom(units) -> dict[str, Headroom]:
    """env -> Headroom of every environment whose tuning phase has a sweep (and the default)."""
    by = {(u.meta["env"], u.meta["method"]): u for u in units}
    out = {}
    for (env, method), unit in by.items():
        if method == SWEEP:
            room = of_env(env, unit, by.get((env, DEFAULT)))
            if room is not None:
                out[env] = room
    return out


def _number(x: float) -> str:
    return f"{x:.4g}"


def sentence(room: Headroom) -> str:
    """The headroom of one environment in words."""
    noise = f"one seed standard deviation (sigma = {_number(room.sigma)}, from {room.default_runs} runs of the default)"
    head = f"{room.env}: the default scores {_number(room.default_mean)} on the tuning seeds"
    if room.ceiling:
        return (f"{head}, and none of {room.configurations} sweep configurations beats it by more than {noise} (the "
                f"best scores {_number(room.best)}): the default is at this task's ceiling, as far as this sweep "
                f"and these seeds can tell: no tuner can beat it here by more than the seeds' own spread")
    margin = f"{room.margin:.1f} standard deviations" if np.isfinite(room.margin) else "an unmeasured margin"
    return (f"{head}; {room.better} of {room.configurations} sweep configurations ({100 * room.share:.0f}%) beat it "
            f"by more than {noise}, the best ({_number(room.best)}) by {margin}")


def markdown(rooms: dict[str, Headroom], heading: str) -> str:
    """The headroom section: one line per environment under `heading` ('' for none)."""
    if not rooms:
        return ""
    lines = "".join(f"- {sentence(r)}.\n" for r in rooms.values())
    return (f"{heading}\n\n" if heading else "") + lines + "\n"
