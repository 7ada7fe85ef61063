"""Timing helpers shared by the benchmark scripts, and atomic JSON output."""
from __future__ import annotations

import json
import os
import platform
import statistics
import tempfile
import time
from typing import Any, Callable

import jax


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


def device_description() -> dict[str, Any]:
    """The backend, devices and host this process runs on (for benchmark reports)."""
    devices = jax.devices()
    return {"backend": jax.default_backend(), "devices": [str(d) for d in devices],
            "device_kind": devices[0].device_kind, "host": platform.node(),
            "cpu_count": os.cpu_count(), "jax": jax.__version__}


def write_json_atomic(path: str, payload: Any) -> None:
    """Write `payload` as JSON to `path` atomically (temporary file + os.replace)."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(payload, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


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
