"""Every single-agent tuner, one module each; importing this package registers them all
and gives `make_tuner(name, space, **options)`, `available()` and `options(name)`.

Adding a tuner: write `hcjax/tuners/<name>.py` whose factory
`<name>(space, *, <options>, memory_limit_gib=...) -> hcjax.Tuner` is decorated with
`@hcjax.tuner.register("<name>")`, and add its module to the import line below. Give
`Tuner(..., index_bounds=...)` the range of every state field that indexes something
(arms, slots, buffer rows), so that `HostTuner.load_state_dict` refuses a state out of range.

Modules: `hypercontroller` (Algorithm 1 of the paper), `fixed`, `random`,
`random_start`, `gp_ucb`, `pb2`, `hyperband`; helpers `gp_common` (the GP tuners'
shared machinery), `stacked` (several tuners in one program, chosen per agent) and
`start` (a tuner whose first configuration is given: `make_tuner(..., start=...)`).
"""
from __future__ import annotations

from typing import Any

from hcjax.space import Space
from hcjax.tuner import DEFAULT_MEMORY_LIMIT_GIB, TUNERS, Tuner, documented, scalar_objective_tell
from hcjax.tuners import fixed, gp_ucb, hyperband, hypercontroller, pb2, random, random_start  # noqa: F401  (register)
from hcjax.tuners.start import starting_at


def available() -> tuple[str, ...]:
    """Names accepted by `make_tuner`."""
    return TUNERS.names()


def options(name: str) -> dict[str, Any]:
    """The keyword options of method `name` and their defaults."""
    return TUNERS.options(name)


def make_tuner(name: str, space: Space, *, start=None, memory_limit_gib: float = DEFAULT_MEMORY_LIMIT_GIB,
               **config) -> Tuner:
    """Build the tuner `name` over `space` with its `config` options (see `options(name)`).

    start: None (the method's own first configuration), "default" (the space's defaults) or
    (h,) values in natural units (a categorical's option index): the first `ask` returns
    them and the next `tell` observes them; from the second ask on the tuner is itself
    (`hcjax.tuners.start`: how a study starts a tuner from a poor default).

    memory_limit_gib: the most memory one agent's tuner may need (`Tuner.memory_bytes`:
    state plus the largest temporary of ask/tell, estimated before anything is
    allocated); above it a ValueError names the options involved, the estimate and the
    limit. Default 4 GiB; raise it for large d**s or GP buffers.

    An unknown name or option, an option out of range, or an estimate above the limit
    raises `ValueError`. The returned `tell` raises ValueError, when traced, for an
    objective that is not a real scalar (e.g. a list or a (1,) array); under `jax.vmap`
    each agent's objective is a scalar.
    """
    tuner = TUNERS.make(name, space, memory_limit_gib, config)
    if start is not None:
        tuner = starting_at(tuner, start)
    return documented(tuner._replace(tell=scalar_objective_tell(name, tuner.tell)))
