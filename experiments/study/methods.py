"""The one table of methods: every tuner and population method a study can run.

A row: `name` (its name in hcjax's registries: `hcjax.available()` for per-agent tuners,
`hcjax.populations()` for population methods; a `study` method is the study's own, in no
registry: the `sweep` of static configurations, `experiments.study.protocol`), `label` (tables
and figures), `color` (figures; None: matplotlib's next colour), `population` (a population
method over a unit's seeds rather than one tuner per agent), `paper` (one of the paper's six
compared methods), and the options a study or benchmark derives for it (`options`): `budget`
(HyperBand's budget: the run's number of decisions), `buffer` (the GP ring buffer),
`arms` (the HyperController's arms per dimension).

A new tuner: its own file in hcjax/tuners/ and one row here.
"""
from __future__ import annotations

import dataclasses

from experiments.study import protocol


@dataclasses.dataclass(frozen=True)
class Method:
    """One row of the table (see the module docstring)."""

    name: str
    label: str
    color: str | None = None
    population: bool = False
    paper: bool = False
    budget: bool = False  # takes `budget`: the number of decisions of the run
    buffer: bool = False  # takes `buffer`: the size of its GP ring buffer
    arms: bool = False  # takes `d`: arms per dimension of its grid
    study: bool = False  # the study's own method (no registry tuner): the sweep


# In the order of tables and figures: the paper's six, the fixed-default reference, the sweep of
# static configurations, then the population methods (not in the paper).
TABLE = (
    Method("hypercontroller", "HC", "tab:red", paper=True, arms=True),
    Method("random", "R", "tab:blue", paper=True),
    Method("pb2", "PB2", "tab:green", paper=True, buffer=True),
    Method("gp_ucb", "GP-UCB", "tab:purple", paper=True, buffer=True),
    Method("hyperband", "HB", "tab:orange", paper=True, budget=True),
    Method("random_start", "RS", "tab:brown", paper=True),
    Method("fixed", "Fixed", "tab:gray"),
    Method("sweep", "Sweep", "tab:olive", study=True),
    Method("pbt", "PBT", population=True),
    Method("pb2_population", "PB2-pop", population=True),
    Method("hypercontroller_shared", "HC-shared", population=True),
)
BY_NAME = {m.name: m for m in TABLE}

PAPER_METHODS = tuple(m.name for m in TABLE if m.paper)  # the six compared methods of the paper
METHODS = tuple(m.name for m in TABLE if not (m.population or m.study))  # per-agent tuners: the paper's six + fixed
POPULATION_METHODS = tuple(m.name for m in TABLE if m.population)  # population-based training over the seeds
STUDY_METHODS = tuple(m.name for m in TABLE if m.study)  # the study's own: the sweep
ALL_METHODS = METHODS + STUDY_METHODS + POPULATION_METHODS
GP_METHODS = tuple(m.name for m in TABLE if m.buffer)


def label(name: str) -> str:
    """The short label of a unit's method (`protocol.kind`): the table's label of its base (the
    name itself when it is not in the table; "Fixed:<name>" for a poor default, "HC from <name>"
    for a method started from one), with " replay" for a replayed schedule and "@test" on the
    test seeds."""
    k = protocol.kind(name)
    start = protocol.started_from(k.base)
    if start:
        method, poor = start
        base = f"Fixed:{poor}" if method == "fixed" else f"{BY_NAME[method].label if method in BY_NAME else method} " \
            f"from {poor}"
    else:
        base = BY_NAME[k.base].label if k.base in BY_NAME else k.base
    return base + (" replay" if k.replay else "") + ("@test" if k.phase == protocol.TEST_PHASE else "")


def color(name: str) -> str | None:
    """The colour in figures of a unit's method: its base's, a method started from a poor default
    its method's (None: not fixed, matplotlib's colour cycle)."""
    base = protocol.kind(name).base
    start = protocol.started_from(base)
    if start and start[0] != "fixed":
        base = start[0]
    return BY_NAME[base].color if base in BY_NAME else None


def is_population(name: str) -> bool:
    """A unit of a population method (hcjax.populations()) rather than of a per-agent tuner (a
    replay of a population method's schedules is not: it replays values, agent by agent)."""
    k = protocol.kind(name)
    return not k.replay and k.base in BY_NAME and BY_NAME[k.base].population


def options(name: str, *, decisions: int | None = None, buffer: int | None = None,
            arms: int | None = None) -> dict:
    """The options of `name` derived from a run: of the given `decisions` (the number of
    asks), `buffer` (GP buffer size) and `arms` (arms per dimension), those it takes."""
    row = BY_NAME[name]
    given = {"budget": (row.budget, decisions), "buffer": (row.buffer, buffer), "d": (row.arms, arms)}
    return {key: value for key, (takes, value) in given.items() if takes and value is not None}
