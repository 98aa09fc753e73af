"""Simulator pass-through: ``redis-benchmark -t set,get -c 50`` against a redis-server
directly and through a ``MaintenanceSimulator`` in front of the same server, with nothing
injected, without pipelining (``-P 1``) and with ``-P 16``.

The simulator runs in a process of its own (``benchmarks._simproc``), so its CPU is not
the load generator's. Direct and simulator runs alternate within each round (ABBA order:
direct first in even rounds, the simulator first in odd ones), and each round gives one
ratio ``simulator / direct``; the table reports the median ratio of the rounds and their
spread.

Two layouts, measured one after the other: ``shared`` (every process on every CPU; on a
2-core machine the simulator runs take both cores for three busy processes where the direct
runs have them for two) and, with ``taskset`` and at least 2 CPUs, ``pinned`` (the
simulator alone on the last CPU, redis-server and redis-benchmark on the others, in both
the direct and the simulator runs). ``--smoke`` measures ``shared`` only.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
from collections.abc import Sequence
from typing import Any

from trio_maint.testing import RedisServer

from ._common import fmt, parse_args, pm, print_table, summarize, write_json
from ._simproc import SimProcess

CLIENTS = 50
#: case -> (pipeline depth, guessed direct ops/s for sizing -n)
CASES: dict[str, tuple[int, float]] = {
    "P1": (1, 70_000),
    "P16": (16, 1_000_000),
}
GOALS = {"P1": 0.5, "P16": 0.3}


def _redis_benchmark(port: int, pipeline: int, requests: int, pin: str | None) -> float:
    """ops/s of one redis-benchmark run (SET then GET; total ops over total time)."""
    cmd = [
        shutil.which("redis-benchmark") or "redis-benchmark",
        "-h",
        "127.0.0.1",
        "-p",
        str(port),
        "-c",
        str(CLIENTS),
        "-P",
        str(pipeline),
        "-n",
        str(requests),
        "-t",
        "set,get",
        "-q",
        "--csv",
    ]
    if pin is not None:
        cmd = ["taskset", "-c", pin, *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True).stdout
    rates = [float(row["rps"]) for row in csv.DictReader(io.StringIO(out))]
    if len(rates) != 2:
        raise RuntimeError(f"unexpected redis-benchmark output: {out!r}")
    return len(rates) / sum(1.0 / r for r in rates)


def _layouts() -> dict[str, tuple[str | None, str | None]]:
    """layout -> (the simulator's CPUs, redis-server's and redis-benchmark's CPUs)."""
    cpus = sorted(os.sched_getaffinity(0))
    layouts: dict[str, tuple[str | None, str | None]] = {"shared": (None, None)}
    if len(cpus) >= 2 and shutil.which("taskset") is not None:
        layouts["pinned"] = (str(cpus[-1]), ",".join(str(c) for c in cpus[:-1]))
    return layouts


def _pin_process(pid: int, cpus: str) -> None:
    subprocess.run(["taskset", "-a", "-p", "-c", cpus, str(pid)], check=True, capture_output=True)


def _measure(
    server: RedisServer, layout: tuple[str | None, str | None], rounds: int, duration: float
) -> dict[str, Any]:
    sim_cpu, rest_cpus = layout
    assert server.process is not None
    all_cpus = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
    _pin_process(server.process.pid, rest_cpus or all_cpus)
    rates: dict[tuple[str, str], list[float]] = {
        (w, c): [] for w in ("direct", "simulator") for c in CASES
    }
    ratios: dict[str, list[float]] = {c: [] for c in CASES}
    with SimProcess(f"127.0.0.1:{server.address[1]}", cpu=sim_cpu) as sim:
        ports = {"direct": server.address[1], "simulator": sim.port}
        for pipeline, _ in CASES.values():
            # Warm-up: the simulator's first 50 connections, the server's first keys.
            _redis_benchmark(sim.port, pipeline, 2000, rest_cpus)
        for round_no in range(rounds):
            for case, (pipeline, guess) in CASES.items():
                requests = max(2000, int(guess * duration / 2))
                order = ["direct", "simulator"] if round_no % 2 == 0 else ["simulator", "direct"]
                got: dict[str, float] = {}
                for where in order:
                    got[where] = _redis_benchmark(ports[where], pipeline, requests, rest_cpus)
                    rates[(where, case)].append(got[where])
                ratios[case].append(got["simulator"] / got["direct"])
            print(f"round {round_no + 1}/{rounds} done", flush=True)
    results: dict[str, Any] = {}
    for case, (pipeline, _) in CASES.items():
        results[case] = {
            "pipeline": pipeline,
            "direct": summarize(rates[("direct", case)]),
            "simulator": summarize(rates[("simulator", case)]),
            "ratio": summarize(ratios[case]),
            "goal": GOALS[case],
        }
    return results


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(__doc__ or "", argv)
    if shutil.which("redis-benchmark") is None:
        payload: dict[str, Any] = {"skipped": "redis-benchmark not on PATH"}
        print("redis-benchmark not on PATH: skipped")
        write_json("simulator", args, payload)
        return payload
    layouts = _layouts()
    if args.smoke:
        layouts = {"shared": layouts["shared"]}
    payload = {"clients": CLIENTS, "layouts": {}}
    with RedisServer() as server:
        for name, layout in layouts.items():
            print(f"layout {name}", flush=True)
            results = _measure(server, layout, args.rounds, args.duration)
            payload["layouts"][name] = {
                "simulator_cpus": layout[0],
                "server_and_benchmark_cpus": layout[1],
                "results": results,
            }
            rows = []
            for entry in results.values():
                ratio = entry["ratio"]
                rows.append(
                    [
                        f"-P {entry['pipeline']}",
                        pm(entry["direct"]),
                        pm(entry["simulator"]),
                        f"{fmt(ratio['median'], 2)} ({fmt(ratio['min'], 2)}-"
                        f"{fmt(ratio['max'], 2)})",
                        f">= {entry['goal']}",
                    ]
                )
            where = (
                "all processes share every CPU"
                if layout[0] is None
                else f"simulator on CPU {layout[0]}, server and redis-benchmark on {layout[1]}"
            )
            print_table(
                f"redis-benchmark -t set,get -c {CLIENTS}, direct vs simulator ({where})",
                ["case", "direct ops/s", "simulator ops/s", "ratio (min-max)", "goal"],
                rows,
            )
    write_json("simulator", args, payload)
    return payload


if __name__ == "__main__":
    main()
