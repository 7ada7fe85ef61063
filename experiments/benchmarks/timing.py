"""Timing helpers shared by the benchmark scripts, and atomic JSON output."""
from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax

from experiments.study.files import check_writable_dir
from experiments.study.store import atomic_write_text


def median_seconds(fn: Callable[[], Any], *, warmup: int = 2, repeats: int = 20) -> float:
    """Median wall time of `fn()` (blocked until its outputs are ready), after `warmup` calls."""
    for _ in range(warmup):
        jax.block_until_ready(fn())
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_calls(fn: Callable[..., Any], args_fn: Callable[[Any], tuple], repeats: int, warmup: int = 2) -> list[float]:
    """Seconds of each of `repeats` calls fn(*args_fn(previous output or None)), after
    `warmup` calls; the arguments are fresh each call (donated buffers), and the previous
    output is released before the call."""
    times, out = [], None
    for r in range(warmup + repeats):
        args = args_fn(out)
        out = None
        jax.block_until_ready(args)
        start = time.perf_counter()
        out = fn(*args)
        jax.block_until_ready(out)
        if r >= warmup:
            times.append(time.perf_counter() - start)
    return times


def check_json_out(path: str) -> None:
    """ValueError naming `path` when a JSON file cannot be written there (a folder, or a folder
    that cannot be made or written): checked before a benchmark measures anything."""
    if Path(path).is_dir():
        raise ValueError(f"--out {path} is a folder; give the name of a JSON file")
    check_writable_dir(Path(path).resolve().parent, "--out's folder")


def write_json_atomic(path: str, payload: Any) -> None:
    """Write `payload` as JSON to `path` atomically (see `experiments.study.store.atomic_write_bytes`)."""
    atomic_write_text(path, json.dumps(payload, indent=2, default=str))


def print_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """Print (and return) `rows` as an aligned Markdown table of `columns`."""
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v)

    cells = [[fmt(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c) for i, c in enumerate(columns)]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(columns, widths)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(v.ljust(w) for v, w in zip(row, widths)) + " |" for row in cells]
    text = "\n".join(lines)
    print(text)
    return text
