"""Frozen dataclasses that are JAX pytrees: the states of every tuner and population.

    @pytree.dataclass
    class State:
        values: jax.Array                       # a leaf: traced, vmapped, scanned
        d: int = pytree.static_field()          # not a leaf: part of the tree's structure

    state = state.replace(values=new_values)    # a copy with some fields changed

The same contract as `flax.struct.dataclass`, written on `jax.tree_util.register_dataclass`
so that the core package needs nothing but jax and numpy.
"""
from __future__ import annotations

import dataclasses

import jax

STATIC = "hcjax_static"  # the field metadata key of a static_field


def static_field(**kwargs) -> dataclasses.Field:
    """A dataclass field that is not a pytree leaf (hashable metadata such as a grid shape)."""
    return dataclasses.field(metadata={STATIC: True}, **kwargs)


def replace(self, **changes):
    """A copy of this state with `changes` (field name -> new value)."""
    return dataclasses.replace(self, **changes)


def dataclass(cls: type) -> type:
    """`cls` as a frozen dataclass registered as a pytree (leaves: the fields not marked
    `static_field`, in declaration order), with a `replace(**changes)` method."""
    cls = dataclasses.dataclass(frozen=True)(cls)
    fields = dataclasses.fields(cls)
    data = [f.name for f in fields if not f.metadata.get(STATIC, False)]
    meta = [f.name for f in fields if f.metadata.get(STATIC, False)]
    cls.replace = replace
    return jax.tree_util.register_dataclass(cls, data_fields=data, meta_fields=meta)
