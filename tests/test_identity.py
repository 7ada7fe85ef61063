"""What an object holds, as a digest (`experiments.study.identity`, issue 41): equal contents
give equal digests, in this process and in another one; any attribute, closure cell, default,
referenced global or array element that differs gives another; cycles end; what cannot be
read is named as opaque."""
from __future__ import annotations

import functools
import subprocess
import sys
import threading
import types
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from agents.envs import JaxEnv
from experiments.study.identity import MAX_DEPTH, describe
from tests import tiny_env

ROOT = Path(__file__).resolve().parents[1]


class Holder:
    def __init__(self, **fields):
        self.__dict__.update(fields)


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a, b):
        self.a, self.b = a, b


def scaled_step(key, state, action, scale=1.0):
    return tiny_env._step(key, state, action * scale)


def walker(scale: float) -> JaxEnv:
    """tiny_env's walker whose step goes through a partial with `scale` (a closure-free variant)."""
    return JaxEnv(name="walk", obs_size=2, action_size=2, discrete=True, reset=tiny_env._reset,
                  step=functools.partial(scaled_step, scale=scale), max_episode_steps=tiny_env.EPISODE)


def digest(x) -> str:
    return describe(x).digest


def test_equal_contents_give_equal_digests_and_any_difference_another():
    assert digest(Holder(drift=0.5, table={"a": [1, 2]})) == digest(Holder(drift=0.5, table={"a": [1, 2]}))
    base = digest(Holder(drift=0.5, table={"a": [1, 2]}))
    for other in (Holder(drift=0.25, table={"a": [1, 2]}), Holder(drift=0.5, table={"a": [1, 3]}),
                  Holder(drift=0.5, table={"b": [1, 2]}), Holder(drift=0.5, table={"a": (1, 2)}),
                  Holder(drift=0.5, table={"a": [1, 2]}, extra=None)):
        assert digest(other) != base
    assert digest(Slotted(1, 2)) == digest(Slotted(1, 2)) != digest(Slotted(1, 3))
    assert digest(np.arange(4.0)) == digest(np.arange(4.0)) != digest(np.arange(4.0) + [0, 0, 0, 1e-7])
    assert digest(np.arange(4.0)) != digest(np.arange(4.0, dtype=np.float32))  # the dtype counts
    assert digest(jnp.arange(3)) == digest(np.arange(3, dtype=np.int32))  # a JAX array by its values
    assert describe(np.dtype("f4")).opaque == () and digest(np.dtype("f4")) != digest(np.dtype("f8"))  # in spaces
    assert digest({1.0, 2.0}) == digest({2.0, 1.0}) and digest(0.1) != digest(float(np.nextafter(0.1, 1.0)))


def test_functions_by_code_closure_defaults_and_the_globals_they_name():
    def make(drift):
        return lambda x: x + drift

    assert digest(make(0.5)) == digest(make(0.5)) != digest(make(0.25))  # closure cells
    assert digest(lambda x: x + 1) != digest(lambda x: x + 2)  # code constants
    assert digest(lambda x, k=1: x + k) != digest(lambda x, k=2: x + k)  # defaults
    assert digest(walker(1.0)) == digest(walker(1.0)) != digest(walker(2.0))  # a partial's keywords
    module = types.ModuleType("user_envs")  # a module of your own: its functions' globals are read
    exec("GOAL = 3.0\ndef reward(x):\n    return -abs(GOAL - x)\n", module.__dict__)  # noqa: S102
    before = digest(module.reward)
    module.GOAL = 4.0
    assert digest(module.reward) != before
    assert describe(jnp.where).opaque == () and digest(jnp.where) == digest(jnp.where)  # a library's: by name


def test_cycles_end_and_what_cannot_be_read_is_named():
    a = Holder(name="a")
    a.me = a
    b = Holder(name="a")
    b.me = b
    assert digest(a) == digest(b)
    held = describe(Holder(rng=np.random.default_rng(0), lock=threading.Lock(), x=1))
    assert held.opaque == ("obj.lock: _thread.lock", "obj.rng: numpy.random._generator.Generator")
    assert digest(Holder(rng=np.random.default_rng(0), x=1)) == digest(Holder(rng=np.random.default_rng(1), x=1))
    deep = []
    for _ in range(MAX_DEPTH + 5):
        deep = [deep]
    assert any("deeper than" in part for part in describe(deep).opaque)


PRINT_DIGESTS = """
from experiments.study.identity import describe
from tests import test_identity, tiny_env
print(describe(tiny_env.make_walk()).digest, describe(test_identity.walker(2.0)).digest)
"""


def test_another_process_gives_the_same_digests():
    """What resuming a study and comparing processes rely on (hash randomisation differs
    between interpreters: no set or hash order may enter a digest)."""
    done = subprocess.run([sys.executable, "-c", PRINT_DIGESTS], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={"PYTHONHASHSEED": "12345", "PATH": ""})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [digest(tiny_env.make_walk()), digest(walker(2.0))]
