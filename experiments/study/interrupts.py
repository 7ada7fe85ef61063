"""A stop signal that is not lost.

Python runs a signal handler between two bytecodes of the main thread. When that moment falls
inside a callback whose exceptions Python ignores (a garbage-collection callback such as
JAX's, a `__del__`: "Exception ignored in ..." on stderr), the KeyboardInterrupt the handler
raises is dropped and the run would go on to its end as if Ctrl-C had never been pressed.
`hcjax run` therefore records the exception here as it raises it (`stop`), and the study
engine calls `check()` after every segment and before every unit group: a dropped stop is
raised again there, at most one segment later, and Python's report of the dropped exception
is left out (`quiet_hook`). From Python (no `hcjax` handler installed) nothing is recorded and
`check()` does nothing.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

_pending: list[BaseException] = []


def stop(exc: BaseException) -> NoReturn:
    """Record `exc` (a signal's KeyboardInterrupt or termination) and raise it."""
    _pending[:] = [exc]
    raise exc


def check() -> None:
    """Raise the recorded stop again, if one is recorded (and forget it)."""
    if _pending:
        raise _pending.pop()


def clear() -> None:
    """Forget a recorded stop (the command that installed the handlers has returned)."""
    _pending.clear()


def quiet_hook(previous: Callable) -> Callable:
    """A `sys.unraisablehook` that says nothing of the recorded stop Python dropped (no
    "Exception ignored in ..." traceback on Ctrl-C: the stop is raised again by `check`) and
    passes every other unraisable exception to `previous`."""
    def hook(unraisable):
        if not (_pending and unraisable.exc_value is _pending[-1]):
            previous(unraisable)

    return hook
