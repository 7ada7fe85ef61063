"""What JAX lowers and compiles inside a block, from its jax.monitoring events: for tests
that a kept or shared program is not built again."""
from __future__ import annotations

import contextlib

import jax

_EVENTS = {"/jax/core/compile/jaxpr_to_mlir_module_duration": "lowered",
           "/jax/core/compile/backend_compile_duration": "compiled"}


@contextlib.contextmanager
def compilations():
    """{"lowered": programs lowered to XLA, "compiled": programs compiled, "names": the name of
    each program lowered} inside the block (a persistent-cache hit is lowered, not compiled)."""
    count = {"lowered": 0, "compiled": 0, "names": []}

    def listen(event, seconds, **kwargs):
        if event in _EVENTS:
            count[_EVENTS[event]] += 1
            if _EVENTS[event] == "lowered":
                count["names"].append(str(kwargs.get("fun_name")))

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield count
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
