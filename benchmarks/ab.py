"""A/B: trio_maint's throughput cases from a git revision against the working tree.

``python -m benchmarks.ab REV [--cases seq_get,pool50_setget] [--rounds 6] [--duration 1]``

The package at ``REV`` (``git archive``) and the working tree's are run alternately (ABBA),
each measurement in a fresh process, against one redis-server; both use the working
tree's benchmark code. Prints the median ops/s and client CPU µs per op of each side and
the change. This is how the before/after numbers in docs/performance.md were measured.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from trio_maint.testing import RedisServer

ROOT = Path(__file__).resolve().parents[1]
_CODE = (
    "import sys, trio\n"
    "from benchmarks.bench_throughput import _trio_maint_case as case\n"
    "rate, cpu = trio.run(case, sys.argv[1], sys.argv[2], float(sys.argv[3]))\n"
    "print(rate, cpu)\n"
)


def _export(rev: str, into: Path) -> None:
    archive = into / "rev.tar"
    with archive.open("wb") as f:
        subprocess.run(["git", "archive", rev, "trio_maint"], cwd=ROOT, stdout=f, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    archive.unlink()
    (into / "benchmarks").symlink_to(ROOT / "benchmarks")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("rev", help="the 'before' git revision, e.g. HEAD~1")
    parser.add_argument("--cases", default="seq_get,pool50_setget,pipeline100,multi10")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--duration", type=float, default=1.0)
    args = parser.parse_args()
    cases = args.cases.split(",")
    with tempfile.TemporaryDirectory(prefix="trio-maint-ab-") as tmp:
        before = Path(tmp)
        _export(args.rev, before)
        trees = {"before": before, "after": ROOT}
        rate: dict[tuple[str, str], list[float]] = {(t, c): [] for t in trees for c in cases}
        cpu: dict[tuple[str, str], list[float]] = {(t, c): [] for t in trees for c in cases}
        with RedisServer() as server:
            for round_no in range(args.rounds):
                for case in cases:
                    order = list(trees) if round_no % 2 == 0 else list(trees)[::-1]
                    for side in order:
                        env = dict(os.environ, PYTHONPATH=str(trees[side]))
                        out = subprocess.run(
                            [
                                sys.executable,
                                "-c",
                                _CODE,
                                f"{server.url}/0",
                                case,
                                str(args.duration),
                            ],
                            cwd=trees[side],
                            env=env,
                            capture_output=True,
                            text=True,
                            timeout=120,
                            check=True,
                        ).stdout.split()
                        rate[(side, case)].append(float(out[0]))
                        cpu[(side, case)].append(float(out[1]))
                print(f"round {round_no + 1}/{args.rounds} done", flush=True)
    print(
        f"\n{'case':15} {'ops/s before':>13} {'after':>10} {'change':>8}   "
        f"{'CPU us/op before':>16} {'after':>7} {'change':>8}"
    )
    for case in cases:
        rb, ra = (statistics.median(rate[(s, case)]) for s in ("before", "after"))
        cb, ca = (statistics.median(cpu[(s, case)]) for s in ("before", "after"))
        print(
            f"{case:15} {rb:13,.0f} {ra:10,.0f} {100 * (ra / rb - 1):+7.1f}%   "
            f"{cb:16.2f} {ca:7.2f} {100 * (ca / cb - 1):+7.1f}%"
        )


if __name__ == "__main__":
    main()
