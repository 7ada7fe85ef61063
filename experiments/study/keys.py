"""Hashes of a unit's configuration, JAX-free: the unit's `config_key` and the study's `study_key`.

A unit's configuration (`experiments.study.plan.unit_config`: everything that changes its
numbers) hashes into its `config_key`; the part every unit of a study shares (everything
but the environment, the method and the method's options: `study_part`) into the
`study_key`: a study directory holds one study key (see `experiments.study.store`).
"""
from __future__ import annotations

import hashlib
import json

import numpy as np

# unit-config fields that may differ within a study; "unit": a test unit's phase, seeds and source
# and "schedule": the environment's own iterations, eval_every and tune_every (Preset.env_schedule)
STUDY_EXCLUDED = ("env", "method", "tuner", "unit", "schedule")


def jsonable(x):
    """`json.dumps`'s default for the values a configuration or a unit's meta holds."""
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (tuple, set)):
        return list(x)
    return str(x)


def config_key(config: dict) -> str:
    """A short stable hash of everything that changes a unit's numbers."""
    blob = json.dumps(config, sort_keys=True, default=jsonable).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def study_part(unit_config: dict) -> dict:
    """The part of a unit's configuration that every unit of one study shares."""
    return {k: v for k, v in unit_config.items() if k not in STUDY_EXCLUDED}


def study_key(unit_config: dict) -> str:
    """Hash of `study_part(unit_config)`."""
    return config_key(study_part(unit_config))
