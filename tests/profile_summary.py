"""Where the suite's time goes: `python -m tests.profile_summary DIR [N]` reads the per-test
lines that tests/conftest.py wrote to DIR (HCJAX_TEST_PROFILE=DIR), prints a table per file
and the N slowest tests by CPU seconds (own + subprocesses), and writes DIR/summary.json."""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

FIELDS = ("wall_s", "cpu_s", "child_cpu_s", "compiles", "compile_s", "cache_hits")


def load(directory: Path) -> list[dict]:
    """Every test line of every worker."""
    return [json.loads(line) for path in sorted(directory.glob("*.jsonl")) for line in path.read_text().splitlines()]


def summarize(lines: list[dict], slowest: int = 30) -> dict:
    """Totals, per-file sums (most CPU first) and the `slowest` tests by CPU seconds."""
    cost = lambda d: d["cpu_s"] + d["child_cpu_s"]
    files = defaultdict(lambda: dict.fromkeys(("tests",) + FIELDS, 0))
    for line in lines:
        row = files[line["test"].split("::")[0]]
        row["tests"] += 1
        for f in FIELDS:
            row[f] += line.get(f, 0)
    total = {f: sum(line.get(f, 0) for line in lines) for f in FIELDS}
    return {"tests": len(lines), "total": total,
            "files": dict(sorted(files.items(), key=lambda kv: -cost(kv[1]))),
            "slowest": sorted(lines, key=lambda d: -cost(d))[:slowest]}


def main(argv: list[str]) -> int:
    directory = Path(argv[0])
    summary = summarize(load(directory), int(argv[1]) if len(argv) > 1 else 30)
    head = f"{'':60} {'tests':>5} " + " ".join(f"{f:>11}" for f in FIELDS)
    print(head)
    for name, row in summary["files"].items():
        print(f"{name:60} {row['tests']:5d} " + " ".join(f"{row[f]:11.1f}" for f in FIELDS))
    print(f"{'total':60} {summary['tests']:5d} " + " ".join(f"{summary['total'][f]:11.1f}" for f in FIELDS))
    print()
    for line in summary["slowest"]:
        print(f"{line['test'][:100]:100} cpu {line['cpu_s']:6.1f} child {line['child_cpu_s']:6.1f} "
              f"compiles {line['compiles']:4d} ({line['compile_s']:.1f} s)")
    (directory / "summary.json").write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
