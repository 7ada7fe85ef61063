"""Progress of long work: bars on a terminal, plain periodic lines in a log.

`Progress(total, desc)` draws a tqdm bar when the stream is a terminal. Otherwise
(output redirected to a file or a pipe) it writes one plain line at most every
`every_s` seconds and one when the work is done, with no carriage returns, so a
redirected log stays readable.

Work that does not advance the count for a while (a compilation, a probe) is said with
`phase(text)`: on a terminal the bar shows it and its clock keeps running (redrawn every
second); in a log it is a line at once. Either way a line (or a redraw) comes at least every
`every_s` seconds while the Progress is open, from a background thread (a heartbeat): no
silent minutes while XLA compiles. `ticking(log, text)` does the same for work without a count.
"""
from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TextIO

TERMINAL_REDRAW_S = 1.0  # how often a bar's clock is redrawn while nothing advances


class Progress:
    """Counts `total` steps of one piece of work. Use as a context manager. heartbeat: False
    for a Progress whose inner work has its own (its lines would repeat theirs)."""

    def __init__(self, total: int, desc: str, unit: str = "it", *, enabled: bool = True,
                 stream: TextIO | None = None, every_s: float = 30.0, position: int = 0, leave: bool = True,
                 heartbeat: bool = True):
        self.total, self.desc, self.unit = int(total), desc, unit
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.every_s = every_s
        self.n = 0
        self.note = ""
        self.start = self.last = time.monotonic()
        self.bar = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._beat = None
        if enabled and _is_terminal(self.stream):
            from tqdm.auto import tqdm

            self.bar = tqdm(total=self.total, desc=desc, unit=unit, file=self.stream, position=position,
                            leave=leave, dynamic_ncols=True)
        if enabled and heartbeat and every_s > 0:
            self._beat = threading.Thread(target=self._heartbeat, name=f"progress {desc}", daemon=True)
            self._beat.start()

    def update(self, k: int = 1, note: str = "") -> None:
        with self._lock:
            self.n += k
            self.note = note
            if self.bar is not None:
                self.bar.set_postfix_str(note, refresh=False)
                self.bar.update(k)
                return
            now = time.monotonic()
            if self.enabled and (now - self.last >= self.every_s or self.n >= self.total):
                self._line()

    def phase(self, text: str) -> None:
        """Say what the work does now while its count stands still (e.g. "compiling ..."): the
        bar's note on a terminal, a line at once in a log; the heartbeat repeats it."""
        with self._lock:
            self.note = text
            if self.bar is not None:
                self.bar.set_postfix_str(text)
            elif self.enabled:
                self._line()

    def _line(self) -> None:
        self.last = time.monotonic()
        elapsed = self.last - self.start
        text = f"{self.desc}: {self.n}/{self.total} {self.unit} ({elapsed:.0f} s)"
        text += f" {self.note}" if self.note else ""
        print(text, file=self.stream, flush=True)

    def _heartbeat(self) -> None:
        """A redraw every TERMINAL_REDRAW_S on a terminal; a line when `every_s` passed without one in a log."""
        wait = TERMINAL_REDRAW_S if self.bar is not None else min(self.every_s, TERMINAL_REDRAW_S * 5)
        while not self._stop.wait(wait):
            with self._lock:
                if self._stop.is_set():
                    return
                if self.bar is not None:
                    self.bar.refresh()
                elif time.monotonic() - self.last >= self.every_s:
                    self._line()

    def close(self) -> None:
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
            self._beat = None
        with self._lock:
            if self.bar is not None:
                self.bar.close()
                self.bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


@contextlib.contextmanager
def ticking(log: Callable[[str], None], text: str, every_s: float = 30.0) -> Iterator[None]:
    """Work that says nothing for a while (building an environment, its probe's compilation):
    `log(text (N s))` every `every_s` seconds until the block ends, from a background thread."""
    stop, start = threading.Event(), time.monotonic()

    def tick():
        while not stop.wait(every_s):
            log(f"{text} ({time.monotonic() - start:.0f} s)")

    beat = threading.Thread(target=tick, name=f"ticking {text}", daemon=True)
    beat.start()
    try:
        yield
    finally:
        stop.set()
        beat.join()

