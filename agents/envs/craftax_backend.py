"""Craftax environments by name (`craftax/Craftax-Classic-Symbolic-v1`, ...) as JaxEnvs.

Craftax "conforms to the gymnax interface" without gymnax's base class: its environments
go through the gymnax backend's adapter for gymnax-like objects (`gymnax_backend.
from_gymnax_like`), built by craftax's own `make_craftax_env_from_name(name, auto_reset=True)`
(its auto-resetting step). A craftax environment object given directly is accepted the
same way by the gymnax backend (its `JaxEnv.backend` is then "craftax" too).

Options: `params=` and any field of craftax's EnvParams as a keyword (as for gymnax).
Observations: the symbolic ones are flat vectors (1345 for Classic, 8268 for Craftax), the
pixel ones images (flattened). Actions: Discrete(17) (Classic) or Discrete(43).
"""
from __future__ import annotations

from agents.envs import gymnax_backend
from agents.envs.backend import Backend, import_module, require

# The names craftax's make_craftax_env_from_name takes (without its "-AutoReset" aliases: every
# environment made here auto-resets).
NAMES = ("Craftax-Classic-Symbolic-v1", "Craftax-Classic-Pixels-v1", "Craftax-Symbolic-v1", "Craftax-Pixels-v1")


def _registry() -> tuple[str, ...]:
    require(BACKEND)
    return NAMES


def _named(ident: str, **opts):
    require(BACKEND)
    craftax_env = import_module("craftax.craftax_env", BACKEND)
    env = craftax_env.make_craftax_env_from_name(ident, auto_reset=True)
    return gymnax_backend.from_gymnax_like(env, opts.pop("params", None), ident, **opts)


BACKEND = Backend(name="craftax", package="craftax", min_version="1.6.1", host=False, registry=_registry,
                  make_named=_named, accepts=lambda obj: False,  # a craftax object: the gymnax backend's
                  make_object=gymnax_backend.BACKEND.make_object, described="", bare=False)
