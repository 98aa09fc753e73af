"""Throughput: trio_maint against redis-py's asyncio client (hiredis parser) and
redis-benchmark, on the same redis-server in the same run.

Cases (ops = user commands; MULTI/EXEC are not counted):

* ``seq_get``: 1 task, sequential GET (latency-bound);
* ``pool50_setget``: 50 tasks doing SET then GET through the client's pool (50 connections);
* ``pipeline100``: 1 task, non-transactional pipelines of 100 GETs;
* ``multi10``: 1 task, MULTI + 10 SETs + EXEC.

Each round runs every client on every case (interleaved), each measurement for
``--duration`` seconds after a warm-up. redis-benchmark has no MULTI test: for ``multi10``
it runs pipelines of 12 SETs (the same 12 commands per round trip, without MULTI) and its
rate is scaled by 10/12.
"""

from __future__ import annotations

import asyncio
import csv
import io
import shutil
import subprocess
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio

import trio_maint
from trio_maint.testing import RedisServer

from ._common import fmt, parse_args, print_table, summarize, write_json

CASES = ("seq_get", "pool50_setget", "pipeline100", "multi10")
TASKS = 50
VALUE = b"v" * 16
KEY = "bench:key"


#: ``(ops/s, client CPU microseconds per op)`` of one timed measurement.
Sample = tuple[float, float]


def _sample(done: int, start: float, cpu: float) -> Sample:
    elapsed = time.perf_counter() - start
    cpu_used = time.process_time() - cpu
    return done / elapsed, cpu_used / max(done, 1) * 1e6


# ---------------------------------------------------------------------------- trio_maint


async def _timed_tasks(ntasks: int, duration: float, body: Callable[[], Awaitable[int]]) -> Sample:
    """Run ``ntasks`` tasks looping ``body`` (returning ops done) for ``duration`` s."""
    done = 0
    deadline = 0.0

    async def worker() -> None:
        nonlocal done
        n = 0
        while time.perf_counter() < deadline:
            n += await body()
        done += n

    cpu = time.process_time()
    start = time.perf_counter()
    deadline = start + duration
    async with trio.open_nursery() as nursery:
        for _ in range(ntasks):
            nursery.start_soon(worker)
    return _sample(done, start, cpu)


def _case_body(r: Any, case: str) -> Callable[[], Awaitable[int]]:
    """One operation of ``case`` on ``r`` (a trio_maint or a redis-py asyncio client: the
    calls used are the same); the returned coroutine function gives the commands it ran."""

    async def seq_get() -> int:
        await r.get(KEY)
        return 1

    async def setget() -> int:
        await r.set(KEY, VALUE)
        await r.get(KEY)
        return 2

    async def pipeline100() -> int:
        pipe = r.pipeline(transaction=False)
        for _ in range(100):
            pipe.get(KEY)
        await pipe.execute()
        return 100

    async def multi10() -> int:
        pipe = r.pipeline(transaction=True)
        for _ in range(10):
            pipe.set(KEY, VALUE)
        await pipe.execute()
        return 10

    bodies: dict[str, Callable[[], Awaitable[int]]] = {
        "seq_get": seq_get,
        "pool50_setget": setget,
        "pipeline100": pipeline100,
        "multi10": multi10,
    }
    return bodies[case]


async def _trio_maint_case(url: str, case: str, duration: float) -> Sample:
    ntasks = TASKS if case == "pool50_setget" else 1
    async with trio_maint.open_redis(url, pool_size=ntasks, maintenance=_disabled()) as r:
        await r.set(KEY, VALUE)
        body = _case_body(r, case)
        await _timed_tasks(ntasks, min(0.2, duration), body)  # warm-up: dial, caches
        return await _timed_tasks(ntasks, duration, body)


def _disabled() -> trio_maint.MaintConfig:
    # A plain redis-server refuses the opt-in anyway; ``auto`` would send it once per
    # connection and turn itself off. The overhead of maintenance is bench_maintenance's.
    return trio_maint.MaintConfig(mode="disabled")


# ------------------------------------------------------------------------------ redis-py


def redis_py_available() -> bool:
    try:
        import redis.asyncio  # noqa: F401
    except ImportError:
        return False
    return True


def redis_py_parser() -> str:
    from redis.utils import HIREDIS_AVAILABLE

    return "hiredis" if HIREDIS_AVAILABLE else "python"


async def _redis_py_case(host: str, port: int, case: str, duration: float) -> Sample:
    import redis.asyncio as aioredis

    ntasks = TASKS if case == "pool50_setget" else 1
    pool = aioredis.BlockingConnectionPool(host=host, port=port, max_connections=ntasks)
    r = aioredis.Redis(connection_pool=pool)
    try:
        await r.set(KEY, VALUE)
        body = _case_body(r, case)

        async def run(seconds: float) -> Sample:
            done = 0
            deadline = 0.0

            async def worker() -> None:
                nonlocal done
                n = 0
                while time.perf_counter() < deadline:
                    n += await body()
                done += n

            cpu = time.process_time()
            start = time.perf_counter()
            deadline = start + seconds
            await asyncio.gather(*(worker() for _ in range(ntasks)))
            return _sample(done, start, cpu)

        await run(min(0.2, duration))
        return await run(duration)
    finally:
        await r.aclose()
        await pool.disconnect()


# ------------------------------------------------------------------------ redis-benchmark

# case -> (clients, pipeline, tests, guessed ops/s for sizing -n, scale)
_RB: dict[str, tuple[int, int, str, float, float]] = {
    "seq_get": (1, 1, "get", 20_000, 1.0),
    "pool50_setget": (TASKS, 1, "set,get", 30_000, 1.0),
    "pipeline100": (1, 100, "get", 300_000, 1.0),
    "multi10": (1, 12, "set", 300_000, 10 / 12),
}


def _redis_benchmark(port: int, case: str, duration: float) -> float:
    clients, pipeline, tests, guess, scale = _RB[case]
    ntests = len(tests.split(","))
    requests = max(1000, int(guess * duration / ntests))
    cmd = [
        shutil.which("redis-benchmark") or "redis-benchmark",
        "-h",
        "127.0.0.1",
        "-p",
        str(port),
        "-c",
        str(clients),
        "-P",
        str(pipeline),
        "-n",
        str(requests),
        "-d",
        str(len(VALUE)),
        "-t",
        tests,
        "--csv",
    ]
    out = subprocess.run(
        cmd, capture_output=True, text=True, timeout=60 + 10 * duration, check=True
    ).stdout
    rates = [float(row["rps"]) for row in csv.DictReader(io.StringIO(out))]
    if len(rates) != ntests:
        raise RuntimeError(f"unexpected redis-benchmark output: {out!r}")
    # Several tests run one after the other: the combined rate is total ops / total time.
    combined = len(rates) / sum(1.0 / r for r in rates)
    return combined * scale


# ---------------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(__doc__ or "", argv)
    use_redis_py = not args.no_redis_py and redis_py_available()
    use_rb = shutil.which("redis-benchmark") is not None
    clients = ["trio_maint"]
    if use_redis_py:
        clients.append("redis-py")
    if use_rb:
        clients.append("redis-benchmark")
    samples: dict[tuple[str, str], list[float]] = {(c, k): [] for c in clients for k in CASES}
    cpu: dict[tuple[str, str], list[float]] = {(c, k): [] for c in clients for k in CASES}
    with RedisServer() as server:
        host, port = server.address
        url = f"{server.url}/0"
        for round_no in range(args.rounds):
            for case in CASES:
                # Rotate the order every round so no client always runs first.
                order = clients[round_no % len(clients) :] + clients[: round_no % len(clients)]
                for client in order:
                    if client == "trio_maint":
                        rate, cpu_us = trio.run(_trio_maint_case, url, case, args.duration)
                        cpu[(client, case)].append(cpu_us)
                    elif client == "redis-py":
                        rate, cpu_us = asyncio.run(_redis_py_case(host, port, case, args.duration))
                        cpu[(client, case)].append(cpu_us)
                    else:
                        rate = _redis_benchmark(port, case, args.duration)
                    samples[(client, case)].append(rate)
            print(f"round {round_no + 1}/{args.rounds} done", flush=True)

    results: dict[str, Any] = {}
    rows = []
    cpu_rows = []
    for case in CASES:
        entry: dict[str, Any] = {}
        for client in clients:
            entry[client] = summarize(samples[(client, case)])
            if cpu[(client, case)]:
                entry[client]["cpu_us_per_op"] = summarize(cpu[(client, case)])
        ours = entry["trio_maint"]["median"]
        ratios: dict[str, float | None] = {}
        for other in ("redis-py", "redis-benchmark"):
            theirs = entry.get(other, {}).get("median")
            ratios[f"trio_maint/{other}"] = round(ours / theirs, 3) if theirs else None
        entry["ratios"] = ratios
        results[case] = entry
        row = [case]
        for client in ("trio_maint", "redis-py", "redis-benchmark"):
            s = entry.get(client)
            row.append("-" if s is None else f"{fmt(s['median'])} ±{s['spread_pct']}%")
        row += [
            fmt(ratios["trio_maint/redis-py"], 2),
            fmt(ratios["trio_maint/redis-benchmark"], 2),
        ]
        rows.append(row)
        cpu_row = [case]
        for client in ("trio_maint", "redis-py"):
            c = entry.get(client, {}).get("cpu_us_per_op")
            cpu_row.append("-" if c is None else f"{fmt(c['median'], 2)} ±{c['spread_pct']}%")
        cpu_rows.append(cpu_row)
    print_table(
        "throughput, ops/s (median ±spread over rounds)",
        ["case", "trio_maint", "redis-py", "redis-benchmark", "÷redis-py", "÷redis-bench"],
        rows,
    )
    print_table(
        "client CPU time, microseconds per op (median ±spread)",
        ["case", "trio_maint", "redis-py"],
        cpu_rows,
    )
    payload: dict[str, Any] = {
        "unit": "ops/s",
        "clients": clients,
        "skipped": {}
        if use_redis_py
        else {"redis-py": "not installed (it is installed only by `nox -s bench`)"},
        "redis_py_parser": redis_py_parser() if use_redis_py else None,
        "notes": "multi10 for redis-benchmark: pipelines of 12 SETs without MULTI, x10/12",
        "cases": results,
    }
    if not use_rb:
        payload["skipped"]["redis-benchmark"] = "redis-benchmark not on PATH"
    write_json("throughput", args, payload)
    return payload


if __name__ == "__main__":
    main()
