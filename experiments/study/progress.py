"""Progress of long work: bars on a terminal, plain periodic lines in a log.

`Progress(total, desc)` draws a tqdm bar when the stream is a terminal. Otherwise
(output redirected to a file or a pipe) it writes one plain line at most every
`every_s` seconds and one when the work is done, with no carriage returns, so a
redirected log stays readable.
"""
from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Counts `total` steps of one piece of work. Use as a context manager."""

    def __init__(self, total: int, desc: str, unit: str = "it", *, enabled: bool = True,
                 stream: TextIO | None = None, every_s: float = 30.0, position: int = 0, leave: bool = True):
        self.total, self.desc, self.unit = int(total), desc, unit
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.every_s = every_s
        self.n = 0
        self.start = self.last = time.monotonic()
        self.bar = None
        if enabled and _is_terminal(self.stream):
            from tqdm.auto import tqdm

            self.bar = tqdm(total=self.total, desc=desc, unit=unit, file=self.stream, position=position,
                            leave=leave, dynamic_ncols=True)

    def update(self, k: int = 1, note: str = "") -> None:
        self.n += k
        if self.bar is not None:
            if note:
                self.bar.set_postfix_str(note, refresh=False)
            self.bar.update(k)
            return
        now = time.monotonic()
        if self.enabled and (now - self.last >= self.every_s or self.n >= self.total):
            self.last = now
            self._line(note)

    def _line(self, note: str) -> None:
        elapsed = time.monotonic() - self.start
        text = f"{self.desc}: {self.n}/{self.total} {self.unit} ({elapsed:.0f} s)" + (f" {note}" if note else "")
        print(text, file=self.stream, flush=True)

    def close(self) -> None:
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
