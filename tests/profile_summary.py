"""Where the suite's time goes: `python -m tests.profile_summary DIR [N]` reads the per-test
lines that tests/conftest.py wrote to DIR (HCJAX_TEST_PROFILE=DIR), prints a table per file
the N slowest tests by CPU seconds (own + subprocesses) and the N program names compiled for
the most seconds in all (with how often and in how many files), and writes DIR/summary.json."""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

FIELDS = ("wall_s", "cpu_s", "child_cpu_s", "lowered", "compiles", "compile_s", "cache_hits", "trace_s", "lower_s")


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
    programs = defaultdict(lambda: {"count": 0, "seconds": 0.0, "files": set()})
    for line in lines:
        for name, seconds in line.get("compiled", ()):
            row = programs[name]
            row["count"] += 1
            row["seconds"] += seconds
            row["files"].add(line["test"].split("::")[0])
    programs = sorted(({"name": k, "count": v["count"], "seconds": round(v["seconds"], 3), "files": sorted(v["files"])}
                       for k, v in programs.items()), key=lambda d: -d["seconds"])
    return {"tests": len(lines), "total": total,
            "files": dict(sorted(files.items(), key=lambda kv: -cost(kv[1]))),
            "slowest": sorted(lines, key=lambda d: -cost(d))[:slowest], "programs": programs[:slowest]}


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
    print()
    for row in summary["programs"]:
        print(f"{row['name'][:60]:60} compiled {row['count']:4d} times, {row['seconds']:6.1f} s, "
              f"in {len(row['files'])} files")
    (directory / "summary.json").write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
