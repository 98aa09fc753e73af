"""Memory: RSS per 1,000 idle pooled connections, with maintenance handling disabled and
enabled.

Each measurement runs in a fresh child process: it opens a client, dials one connection
(so that code paths and caches are warm), measures its RSS, then dials ``N`` more
connections into the pool (all idle), collects garbage and measures again. The result is
``(RSS after - RSS before) / N * 1000``. Variants:

* ``disabled``: ``mode="disabled"``, straight to redis-server;
* ``enabled``: ``mode="enabled"`` through a MaintenanceSimulator process (every connection
  opted in, with the push handler and pool hooks installed).
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

import trio

import trio_maint
from trio_maint.testing import RedisServer

from ._common import fmt, parse_args, print_table, rss_bytes, summarize, write_json
from ._simproc import SimProcess

VARIANTS = ("disabled", "enabled")


async def _child(url: str, mode: str, count: int) -> dict[str, Any]:
    config = trio_maint.MaintConfig(mode=mode)
    async with trio_maint.open_redis(
        url, pool_size=count + 1, pool_timeout=60.0, maintenance=config
    ) as r:
        await r.ping()
        gc.collect()
        before = rss_bytes()
        pool = r.pool
        held = [await pool.acquire()]  # the warm connection
        batch = 50
        while len(held) < count + 1:
            chunk: list[trio_maint.lowlevel.Connection] = []

            async def dial(chunk: list[trio_maint.lowlevel.Connection] = chunk) -> None:
                chunk.append(await pool.acquire())

            async with trio.open_nursery() as nursery:
                for _ in range(min(batch, count + 1 - len(held))):
                    nursery.start_soon(dial)
            held += chunk
        for conn in held:
            pool.release(conn)
        del held
        gc.collect()
        after = rss_bytes()
        stats = pool.stats()
        opted_in = sum(1 for c in pool.connections if c.maint_enabled)
        return {
            "rss_before": before,
            "rss_after": after,
            "idle": stats.idle,
            "new_connections": count,
            "opted_in": opted_in,
            "per_1000_mib": (after - before) / count * 1000 / 2**20,
        }


def _measure(url: str, mode: str, count: int, env: dict[str, str]) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_memory", "--child", url, mode, str(count)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--child":
        url, mode, count = argv[1], argv[2], int(argv[3])
        print(json.dumps(trio.run(_child, url, mode, count)))
        return {}
    args = parse_args(__doc__ or "", argv)
    count = 100 if args.smoke else 1000
    rounds = args.rounds if args.smoke else min(args.rounds, 3)
    args.rounds = rounds  # recorded in the JSON as run
    raw: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    with (
        tempfile.TemporaryDirectory() as cache_dir,
        RedisServer() as server,
        SimProcess(str(trio_maint.Endpoint(*server.address))) as sim,
    ):
        urls = {"disabled": f"{server.url}/0", "enabled": f"{sim.url}/0"}
        # The children load bytecode (written to a cache of their own by a warm-up child):
        # compiling the package from source, as PYTHONDONTWRITEBYTECODE makes every run
        # do, leaves megabytes freed in the heap, which the first connections then fill
        # without growing the RSS (so the result would depend on the modules' sizes).
        env = {**os.environ, "PYTHONPYCACHEPREFIX": cache_dir}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        for variant in VARIANTS:
            _measure(urls[variant], variant, 10, env)
        for round_no in range(rounds):
            for variant in VARIANTS:
                raw[variant].append(_measure(urls[variant], variant, count, env))
            print(f"round {round_no + 1}/{rounds} done", flush=True)
    results: dict[str, Any] = {}
    rows = []
    for variant in VARIANTS:
        runs = raw[variant]
        per = summarize([run["per_1000_mib"] for run in runs])
        results[variant] = {"per_1000_mib": per, "rounds": runs}
        rows.append(
            [
                variant,
                f"{fmt(per['median'], 2)} ±{per['spread_pct']}%",
                f"{fmt(per['median'] * 2**20 / 1000 / 1024, 2)}",
                str(runs[-1]["idle"]),
                str(runs[-1]["opted_in"]),
            ]
        )
    print_table(
        f"memory: RSS per 1,000 idle pooled connections (measured with {count})",
        ["maintenance", "MiB per 1,000", "KiB per conn", "idle", "opted in"],
        rows,
    )
    payload = {
        "connections_measured": count,
        "unit": "MiB per 1,000 connections",
        "results": results,
    }
    write_json("memory", args, payload)
    return payload


if __name__ == "__main__":
    main()
