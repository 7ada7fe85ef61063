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

When the moment falls inside a C function's Python callback instead (numpy asking a JAX dtype
for its `__numpy_dtype__`, say), Python turns the KeyboardInterrupt into a `SystemError` ("...
returned a result with an exception set") whose cause is it. `within(e)` finds the stop behind
such an exception, so that the engine re-raises it as a stop (exit 130) rather than recording a
failed unit (exit 1).
"""
from __future__ import annotations

import signal
from collections.abc import Callable
from typing import NoReturn

_pending: list[BaseException] = []


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived: stop like Ctrl-C (exit status 128 + the signal)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def on_signal(signum, frame) -> NoReturn:
    """`hcjax`'s handler. SIGINT: KeyboardInterrupt; SIGTERM, SIGHUP: Terminated; recorded as
    well as raised (`stop`), so that a stop raised where Python drops exceptions still stops."""
    stop(KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum))


def describe(exc: BaseException) -> str:
    """What a stop did, for the last line: "interrupted" or "terminated by signal N"."""
    return f"terminated by signal {exc.signum}" if isinstance(exc, Terminated) else "interrupted"


def exit_status(exc: BaseException) -> int:
    """A stop's exit status: 130 for Ctrl-C (or any other non-Exception), 128 + N for signal N."""
    return 128 + exc.signum if isinstance(exc, Terminated) else 130


def stop(exc: BaseException) -> NoReturn:
    """Record `exc` (a signal's KeyboardInterrupt or termination) and raise it."""
    _pending[:] = [exc]
    raise exc


def check() -> None:
    """Raise the recorded stop again, if one is recorded (and forget it)."""
    if _pending:
        raise _pending.pop()


def within(exc: BaseException) -> BaseException | None:
    """The stop that `exc` stands for, or None: the recorded stop (anything raised while one is
    pending is its consequence), else a KeyboardInterrupt or other non-`Exception` found along
    `exc`'s causes and contexts (Python's `SystemError` wrapping of one raised in a callback)."""
    if _pending:
        return _pending[-1]
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if not isinstance(e, Exception):
            return e
        todo += [e.__cause__, e.__context__]
    return None


def raise_within(exc: BaseException) -> None:
    """Raise the stop that `exc` stands for (`within`), forgetting it as recorded; nothing when
    `exc` is an ordinary failure."""
    stop = within(exc)
    if stop is not None:
        _pending.clear()
        raise stop from None


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
