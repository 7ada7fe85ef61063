"""XLA:CPU setting shared by the tests (conftest) and `bench_ppo`.

XLA:CPU's multi-threaded Eigen pool intermittently wedges (every thread in a futex
wait, forever) while running vmapped programs that call LAPACK (Cholesky, QR) on this
kind of machine; running Eigen single-threaded avoids it, at a cost of ~15% on the
heaviest programs. Call `use_single_threaded_eigen()` before JAX initialises its
backend (before the first computation). The flag is ignored by GPU backends.
"""
from __future__ import annotations

import os

FLAG = "--xla_cpu_multi_thread_eigen=false"


def use_single_threaded_eigen() -> None:
    """Append FLAG to XLA_FLAGS unless XLA_FLAGS already sets multi_thread_eigen."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_multi_thread_eigen" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {FLAG}".strip()
