"""Run every benchmark: ``python -m benchmarks [--smoke] [--only a,b] [--out-dir DIR]``.

Each benchmark runs in a process of its own (so peak RSS and CPU time are its own), starts
its own redis-server(s), prints its table and writes ``DIR/<name>.json``; this runner then
writes ``DIR/all.json`` with every document. Other options (``--rounds``,
``--duration``, ``--no-redis-py``) are passed on. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from ._common import RESULTS_DIR

BENCHMARKS = {
    "throughput": "benchmarks.bench_throughput",
    "parser": "benchmarks.bench_parser",
    "maintenance_overhead": "benchmarks.bench_maintenance",
    "handoff_storm": "benchmarks.bench_handoff",
    "memory": "benchmarks.bench_memory",
    "cluster": "benchmarks.bench_cluster",
    "simulator": "benchmarks.bench_simulator",
    "telemetry": "benchmarks.bench_telemetry",
    "cache": "benchmarks.bench_cache",
    "peers": "benchmarks.bench_peers",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--only", default="", help="comma-separated: " + ",".join(BENCHMARKS))
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per benchmark")
    args, passthrough = parser.parse_known_args()
    names = [n for n in args.only.split(",") if n] or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; choose from {list(BENCHMARKS)}")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    combined: dict[str, object] = {}
    failed = []
    for name in names:
        out = args.out_dir / f"{name}.json"
        cmd = [sys.executable, "-m", BENCHMARKS[name], "--out", str(out), *passthrough]
        if args.smoke:
            cmd.append("--smoke")
        print(f"\n===== {name} =====", flush=True)
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, timeout=args.timeout, check=False)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            code = -1
            print(f"{name}: timed out after {args.timeout} s", flush=True)
        print(f"({name}: {time.perf_counter() - start:.1f} s)", flush=True)
        if code != 0:
            failed.append(name)
            continue
        combined[name] = json.loads(out.read_text())
    (args.out_dir / "all.json").write_text(json.dumps(combined, indent=2) + "\n")
    print(f"\nwrote {args.out_dir / 'all.json'}")
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
