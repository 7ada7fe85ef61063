"""`hyperband`: HyperBand (Li et al., 2018) run online on one training run.

Resource unit: one decision (one `ask`). Successive halving runs sequentially: the
configurations of a round run one after another, each for r_i consecutive decisions,
on the one model being trained. A configuration's score is the mean of every valid
objective told while it was in effect during its bracket (all its rounds so far).

Schedule (computed in NumPy at construction, see `hyperband_schedule`): with
R = eta^s_max decisions as the maximum resource, a sweep runs brackets s = s_max..0;
bracket s samples n = ceil((s_max + 1) eta^s / (s + 1)) fresh uniform configurations,
and its round i = 0..s runs the n_i = floor(n / eta^i) best of them (best first) for
r_i = eta^(s_max - s + i) decisions each. s_max is the largest integer whose whole
sweep (sum over brackets and rounds of n_i r_i decisions) fits in `budget` decisions,
so every bracket completes inside a run of `budget` asks. After the last bracket the
sweep starts again (cycle). E.g. budget 200, eta 3: s_max = 2, brackets of 27, 24 and
27 decisions, sweep of 78.

State: the candidate table of the current bracket (n_max, h), per-candidate score
sums and counts, which candidates are still in the bracket, the run order of the
current round, the slot in effect and the position in the sweep. Invalid objectives
are not scored and are counted in `n_invalid`; a candidate with no valid objective
ranks below every scored one.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from hcjax import pytree
from hcjax.space import Space
from hcjax.tuner import DEFAULT_MEMORY_LIMIT_GIB, Tuner, check_int, check_memory, register, valid_objective

UNSCORED = -3.0e38  # score of a candidate in the bracket with no valid objective yet


def brackets(s_max: int, eta: int) -> list[list[tuple[int, int]]]:
    """The rounds (n_i configurations, r_i decisions each) of brackets s = s_max..0."""
    out = []
    for s in range(s_max, -1, -1):
        n = math.ceil((s_max + 1) * eta ** s / (s + 1))
        out.append([(n // eta ** i, eta ** (s_max - s + i)) for i in range(s + 1)])
    return out


def sweep_length(s_max: int, eta: int) -> int:
    """Decisions in one sweep over all brackets."""
    return sum(n * r for bracket in brackets(s_max, eta) for n, r in bracket)


def sweep_shape(budget: int, eta: int) -> tuple[int, int, int]:
    """(s_max, length of one sweep, n_slots = the largest bracket's configurations) of the
    largest HyperBand whose whole sweep fits in `budget` decisions; O(s_max^3), no arrays."""
    s_max = 0
    while sweep_length(s_max + 1, eta) <= budget:
        s_max += 1
    return s_max, sweep_length(s_max, eta), max(b[0][0] for b in brackets(s_max, eta))


def hyperband_schedule(budget: int, eta: int) -> dict:
    """Static schedule for a run of `budget` decisions.

    Returns s_max, brackets (see `brackets`), length L of one sweep, n_slots (largest
    bracket) and per-position arrays of shape (L,): new_bracket (bool, first decision
    of a bracket), n_new (int32, its number of configurations), new_round (bool, first
    decision of a round i > 0), keep (int32, configurations in that round), rank (int32,
    which of the round's configurations, in score order, runs at this decision).
    """
    s_max, length, n_slots = sweep_shape(budget, eta)
    bs = brackets(s_max, eta)
    new_bracket, n_new, new_round, keep, rank = [], [], [], [], []
    for bracket in bs:
        for i, (n_i, r_i) in enumerate(bracket):
            first = np.zeros(n_i * r_i, bool)
            first[:1] = True
            new_bracket.append(first & (i == 0))
            new_round.append(first & (i > 0))
            n_new.append(np.full(n_i * r_i, bracket[0][0], np.int32))
            keep.append(np.full(n_i * r_i, n_i, np.int32))
            rank.append(np.repeat(np.arange(n_i, dtype=np.int32), r_i))
    return dict(s_max=s_max, brackets=bs, length=length, n_slots=n_slots,
                new_bracket=np.concatenate(new_bracket), n_new=np.concatenate(n_new),
                new_round=np.concatenate(new_round), keep=np.concatenate(keep), rank=np.concatenate(rank))


def hyperband_memory(h: int, budget: int, eta: int) -> int:
    """Estimated peak bytes of one agent: the state twice ((n_slots, h) candidates and
    (n_slots,) scores), ask's temporaries (a fresh table, two argsorts), and the (L,)
    schedule arrays (14 bytes per position) the compiled program embeds."""
    _, length, n_slots = sweep_shape(budget, eta)
    state = n_slots * (4 * h + 13) + 16
    return 2 * state + n_slots * (16 * h + 64) + 14 * length + 1024


@pytree.dataclass
class HyperbandState:
    """configs: (n_slots, h) candidates of the bracket; sums, counts: (n_slots,) float32
    sum and number of valid objectives per candidate; alive: (n_slots,) bool candidates
    of the current round; order: (n_slots,) int32 slots of the current round, best first;
    slot: int32 candidate in effect; pos: int32 next position in the sweep; started:
    bool an `ask` happened; n_invalid: int32 invalid objectives."""

    configs: jax.Array
    sums: jax.Array
    counts: jax.Array
    alive: jax.Array
    order: jax.Array
    slot: jax.Array
    pos: jax.Array
    started: jax.Array
    n_invalid: jax.Array


@register("hyperband")
def hyperband(space: Space, *, budget: int = 200, eta: int = 3,
              memory_limit_gib: float = DEFAULT_MEMORY_LIMIT_GIB) -> Tuner:
    """Online HyperBand sized so that whole sweeps fit in `budget` asks (see module doc)."""
    budget = check_int("hyperband.budget", budget, 1, 2 ** 31 - 1)
    eta = check_int("hyperband.eta", eta, 2)
    memory = check_memory("hyperband", hyperband_memory(space.h, budget, eta), memory_limit_gib,
                          f"budget={budget}, eta={eta} (with h={space.h} hyperparameters)")
    sched = hyperband_schedule(budget, eta)
    n_slots, length = sched["n_slots"], sched["length"]
    new_bracket, n_new = jnp.asarray(sched["new_bracket"]), jnp.asarray(sched["n_new"])
    new_round, keep, rank = jnp.asarray(sched["new_round"]), jnp.asarray(sched["keep"]), jnp.asarray(sched["rank"])
    slots = jnp.arange(n_slots, dtype=jnp.int32)

    def table(key):
        return space.decode(jax.random.uniform(key, (n_slots, space.h)))

    def init(key):
        return HyperbandState(
            configs=table(key),
            sums=jnp.zeros((n_slots,), jnp.float32),
            counts=jnp.zeros((n_slots,), jnp.float32),
            alive=slots < n_new[0],
            order=slots,
            slot=jnp.zeros((), jnp.int32),
            pos=jnp.zeros((), jnp.int32),
            started=jnp.zeros((), bool),
            n_invalid=jnp.zeros((), jnp.int32),
        )

    def ask(state, key):
        p = state.pos
        # A new bracket: fresh candidates (init's table serves the very first one).
        fresh = new_bracket[p]
        reset = fresh & state.started
        configs = jnp.where(reset, table(key), state.configs)
        sums = jnp.where(reset, 0.0, state.sums)
        counts = jnp.where(reset, 0.0, state.counts)
        alive = jnp.where(fresh, slots < n_new[p], state.alive)
        order = jnp.where(fresh, slots, state.order)
        # A new round: rank the previous round's candidates, keep the best keep[p].
        score = jnp.where(alive, jnp.where(counts > 0, sums / jnp.maximum(counts, 1.0), UNSCORED), -jnp.inf)
        ranked = jnp.argsort(-score, stable=True).astype(jnp.int32)
        position = jnp.argsort(ranked).astype(jnp.int32)  # rank of every slot
        order = jnp.where(new_round[p], ranked, order)
        alive = jnp.where(new_round[p], position < keep[p], alive)
        slot = order[rank[p]]
        state = state.replace(configs=configs, sums=sums, counts=counts, alive=alive, order=order, slot=slot,
                              pos=(p + 1) % length, started=jnp.ones((), bool))
        return state, configs[slot]

    def tell(state, objective):
        x = jnp.asarray(objective, jnp.float32)
        valid = valid_objective(x)
        hit = (slots == state.slot) & valid
        return state.replace(
            sums=state.sums + jnp.where(hit, x, 0.0),
            counts=state.counts + hit.astype(jnp.float32),
            n_invalid=state.n_invalid + (~valid).astype(jnp.int32),
        )

    def values(state):
        """(h,) the candidate in effect (before the first ask: the first of init's table)."""
        return state.configs[state.slot]

    def place(state, values):
        """`values` (h,) become the candidate in effect (its slot's configuration): they are scored,
        kept or dropped by the bracket like any candidate."""
        return state.replace(configs=state.configs.at[state.slot].set(space.clip(jnp.asarray(values, jnp.float32))))

    return Tuner("hyperband", space, init, ask, tell, memory, values,
                 index_bounds=(("order", n_slots), ("slot", n_slots), ("pos", length)), place=place)
