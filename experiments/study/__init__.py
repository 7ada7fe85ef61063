"""The study engine: plan a study, run its units on every device, keep them in a study directory.

api.py          the Python API: Study, StudyResult, StudyFailed (`hcjax run` is a thin layer over it)
own_envs.py     your own environments (objects, importable factories) as study environments
identity.py     what an object holds, as a digest: the content part of an own environment's fingerprint
estimate.py     the frames and duration of a study, printed before the work
methods.py      the one table of methods (registry name, label, colour, options)
plan.py         a unit's identity and options (JAX-free): unit_config, config_key, study_key
presets.py      smoke / cpu_learn / gpu / cpu / paper study definitions, validated by `resolve`
studyfile.py    studies as TOML files <-> presets
build.py        a unit's environment and tuner or population
checks.py       checks before anything is compiled, memory estimates
devices.py      the agent mesh, padding, seed keys, arrays back to the host
checkpoints.py  a unit's Record and its checkpoint
programs.py     a unit group's learner, tuners and compiled programs, kept per configuration in a process
loops.py        the JAX and host unit loops
population.py   population methods over a unit's agents
replay.py       tuning time by a replay of the tuner on the host CPU
engine.py       prepare a study directory, run every unit group
processes.py    the processes of a distributed run: they agree before any work and stop together
store.py        the study directory: lock, manifest, unit files, checkpoints
progress.py     progress bars on a terminal, plain lines otherwise
"""
from hcjax.extras import require_studies

require_studies()  # else an ImportError naming hcjax[studies]
