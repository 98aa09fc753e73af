"""Shared helpers of the benchmarks: command line, statistics, tables, JSON, RSS."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def parse_args(description: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The options every benchmark script takes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--smoke", action="store_true", help="a few seconds, for CI")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per case")
    parser.add_argument(
        "--duration", type=float, default=None, help="seconds per timed measurement"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="JSON file to write (default: results/<name>.json)"
    )
    parser.add_argument("--no-redis-py", action="store_true", help="skip the redis-py comparison")
    args = parser.parse_args(argv)
    if args.rounds is None:
        args.rounds = 1 if args.smoke else 5
    if args.duration is None:
        args.duration = 0.15 if args.smoke else 2.0
    return args


def summarize(values: Sequence[float]) -> dict[str, Any]:
    """Median, min, max and spread (``(max - min) / median`` in percent) of the rounds."""
    vals = [float(v) for v in values]
    if not vals:
        return {"rounds": [], "median": None, "min": None, "max": None, "spread_pct": None}
    med = statistics.median(vals)
    spread = (max(vals) - min(vals)) / med * 100.0 if med else 0.0
    return {
        "rounds": vals,
        "median": med,
        "min": min(vals),
        "max": max(vals),
        "spread_pct": round(spread, 1),
    }


def fmt(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    if digits == 0:
        return f"{value:,.0f}"
    return f"{value:,.{digits}f}"


def pm(summary: dict[str, Any], digits: int = 0) -> str:
    """``median ±spread%`` of a :func:`summarize` result."""
    return f"{fmt(summary['median'], digits)} ±{summary['spread_pct']}%"


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print a plain-text table (right-aligned columns but the first)."""
    widths = [len(h) for h in header]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    print(f"\n## {title}")
    line = "  ".join(
        h.ljust(widths[0]) if i == 0 else h.rjust(widths[i]) for i, h in enumerate(header)
    )
    print(line)
    print("-" * len(line))
    for row in rows:
        print(
            "  ".join(
                c.ljust(widths[0]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(row)
            )
        )
    sys.stdout.flush()


def environment() -> dict[str, Any]:
    """What the numbers were measured on."""
    import hiredis
    import trio

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "trio": trio.__version__,
        "hiredis": hiredis.__version__,
    }
    try:
        import redis

        info["redis_py"] = redis.__version__
    except ImportError:
        info["redis_py"] = None
    info["redis_server"] = _command_output(["redis-server", "--version"])
    info["git_commit"] = _command_output(
        ["git", "-C", str(Path(__file__).resolve().parent), "rev-parse", "--short", "HEAD"]
    )
    return info


def _command_output(argv: list[str]) -> str | None:
    """What ``argv`` prints (stripped), or ``None`` when it cannot run."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def write_json(name: str, args: argparse.Namespace, payload: dict[str, Any]) -> Path:
    """Write ``payload`` (plus metadata) to ``args.out`` or ``results/<name>.json``."""
    out: Path = args.out if args.out is not None else RESULTS_DIR / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "benchmark": name,
        "smoke": bool(args.smoke),
        "rounds": args.rounds,
        "duration": args.duration,
        "timestamp": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "environment": environment(),
        **payload,
    }
    out.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n")
    print(f"\nwrote {out}")
    return out


def rss_bytes() -> int:
    """The current resident set size of this process (Linux ``/proc``), in bytes."""
    with open("/proc/self/statm") as f:
        resident_pages = int(f.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    """The peak RSS of this process so far (``ru_maxrss``), in bytes."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def percentile(values: Sequence[float], pct: float) -> float | None:
    """The ``pct`` percentile (nearest rank) of ``values``; ``None`` when empty."""
    if not values:
        return None
    ordered = sorted(values)
    index = max(0, min(len(ordered) - 1, round(pct / 100.0 * len(ordered) + 0.5) - 1))
    return ordered[index]
