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

Where ``haproxy`` is on the PATH, it runs beside the simulator as a reference: a TCP proxy
written in C (one thread, ``mode tcp``, placed like the simulator), measured in the same
rounds, so the table shows what any pass-through proxy costs on this machine.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from typing import Any

from trio_maint.testing import RedisServer, free_port

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


_HAPROXY_CONFIG = """\
global
    nbthread 1
    maxconn 4096
defaults
    mode tcp
    timeout connect 5s
    timeout client 600s
    timeout server 600s
frontend bench
    bind 127.0.0.1:{port}
    default_backend upstream
backend upstream
    server redis 127.0.0.1:{backend}
"""


@contextlib.contextmanager
def _haproxy(backend: int, cpu: str | None) -> Iterator[int | None]:
    """haproxy in front of ``backend`` (its port), or ``None`` where it is not installed."""
    binary = shutil.which("haproxy")
    if binary is None:
        yield None
        return
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "haproxy.cfg")
        with open(config, "w") as f:
            f.write(_HAPROXY_CONFIG.format(port=port, backend=backend))
        argv = [binary, "-db", "-f", config]
        if cpu is not None:
            argv = ["taskset", "-c", cpu, *argv]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError("haproxy did not start") from None
                    time.sleep(0.05)
            yield port
        finally:
            proc.terminate()
            proc.wait(10)


def _pin_process(pid: int, cpus: str) -> None:
    subprocess.run(["taskset", "-a", "-p", "-c", cpus, str(pid)], check=True, capture_output=True)


def _measure(
    server: RedisServer, layout: tuple[str | None, str | None], rounds: int, duration: float
) -> dict[str, Any]:
    sim_cpu, rest_cpus = layout
    assert server.process is not None
    all_cpus = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
    _pin_process(server.process.pid, rest_cpus or all_cpus)
    with (
        SimProcess(f"127.0.0.1:{server.address[1]}", cpu=sim_cpu) as sim,
        _haproxy(server.address[1], sim_cpu) as haproxy_port,
    ):
        ports = {"direct": server.address[1], "simulator": sim.port}
        if haproxy_port is not None:
            ports["haproxy"] = haproxy_port
        rates: dict[tuple[str, str], list[float]] = {(w, c): [] for w in ports for c in CASES}
        ratios: dict[tuple[str, str], list[float]] = {(w, c): [] for w in ports for c in CASES}
        for pipeline, _ in CASES.values():
            # Warm-up: the proxies' first 50 connections, the server's first keys.
            for where in ports:
                _redis_benchmark(ports[where], pipeline, 2000, rest_cpus)
        for round_no in range(rounds):
            for case, (pipeline, guess) in CASES.items():
                requests = max(2000, int(guess * duration / 2))
                order = list(ports) if round_no % 2 == 0 else list(reversed(ports))
                got: dict[str, float] = {}
                for where in order:
                    got[where] = _redis_benchmark(ports[where], pipeline, requests, rest_cpus)
                    rates[(where, case)].append(got[where])
                for where in ports:
                    ratios[(where, case)].append(got[where] / got["direct"])
            print(f"round {round_no + 1}/{rounds} done", flush=True)
    results: dict[str, Any] = {}
    for case, (pipeline, _) in CASES.items():
        results[case] = {
            "pipeline": pipeline,
            "direct": summarize(rates[("direct", case)]),
            "simulator": summarize(rates[("simulator", case)]),
            "ratio": summarize(ratios[("simulator", case)]),
            "goal": GOALS[case],
        }
        if "haproxy" in ports:
            results[case]["haproxy"] = summarize(rates[("haproxy", case)])
            results[case]["haproxy_ratio"] = summarize(ratios[("haproxy", case)])
    return results


def _ratio(ratio: dict[str, Any]) -> str:
    return f"{fmt(ratio['median'], 2)} ({fmt(ratio['min'], 2)}-{fmt(ratio['max'], 2)})"


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
                row = [
                    f"-P {entry['pipeline']}",
                    pm(entry["direct"]),
                    pm(entry["simulator"]),
                    _ratio(ratio),
                    f">= {entry['goal']}",
                ]
                if "haproxy" in entry:
                    row += [pm(entry["haproxy"]), _ratio(entry["haproxy_ratio"])]
                rows.append(row)
            where = (
                "all processes share every CPU"
                if layout[0] is None
                else f"simulator on CPU {layout[0]}, server and redis-benchmark on {layout[1]}"
            )
            print_table(
                f"redis-benchmark -t set,get -c {CLIENTS}, direct vs simulator ({where})",
                ["case", "direct ops/s", "simulator ops/s", "ratio (min-max)", "goal"]
                + (["haproxy ops/s", "haproxy ratio"] if len(rows[0]) > 5 else []),
                rows,
            )
    write_json("simulator", args, payload)
    return payload


if __name__ == "__main__":
    main()
