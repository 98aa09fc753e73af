"""Handoff storm: a pool full of connections gets MOVING to a live endpoint while tasks keep
working.

Two MaintenanceSimulator processes (A and B) forward to the same redis-server. A client
with ``pool_size`` connections to A (all dialed and idle, maintenance ``enabled``) runs
``tasks`` tasks doing SET/GET; then A injects ``MOVING <seq> 15 <B>`` on every connection.
Measured per round:

* ``converge_s``: seconds from the injection until every connection of the pool is on B;
* command latency p50/p99/max before and during the storm (injection -> converged), and
  commands that failed (goal: 0);
* RSS of this process before and at its peak during the storm;
* handoffs succeeded/failed (MetricsHook), connections removed, dialed, queue-full refusals.

Variants: ``storm`` (default handoff settings: workers and queue scaled from the pool) and
``small_queue`` (``handoff_queue_size`` and ``max_workers`` tiny, so most idle connections
hit the queue-full path and are removed; the pool then recovers by dialing B on demand).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import trio

import trio_maint
from trio_maint import MaintConfig, MetricsHook
from trio_maint.testing import RedisServer

from ._common import fmt, parse_args, percentile, print_table, rss_bytes, summarize, write_json
from ._simproc import SimProcess

VALUE = b"v" * 16
MOVING_TIME = 15


def _variants(smoke: bool) -> dict[str, dict[str, Any]]:
    pool, tasks = (24, 6) if smoke else (500, 100)
    return {
        "storm": {"pool_size": pool, "tasks": tasks, "config": MaintConfig(mode="enabled")},
        "small_queue": {
            "pool_size": pool,
            "tasks": tasks,
            "config": MaintConfig(mode="enabled", handoff_queue_size=4, max_workers=2),
        },
    }


async def _round(
    sim_a: SimProcess,
    sim_b: SimProcess,
    pool_size: int,
    tasks: int,
    config: MaintConfig,
    limit: float,
) -> dict[str, Any]:
    metrics = MetricsHook()
    b_port = sim_b.port
    async with trio_maint.open_redis(
        f"{sim_a.url}/0",
        pool_size=pool_size,
        pool_timeout=30.0,
        socket_timeout=10.0,
        maintenance=config,
    ) as r:
        assert r.maintenance is not None
        r.maintenance.add_hook(metrics)
        pool = r.pool
        # Fill the pool: pool_size connections, dialed and handshaken, then idle.
        held = []
        for _ in range(pool_size):
            held.append(await pool.acquire())
        for conn in held:
            pool.release(conn)
        del held
        opted_in = sum(1 for c in pool.connections if c.maint_enabled)
        before = pool.stats()

        samples: list[tuple[float, float]] = []
        failures: Counter[str] = Counter()
        first_errors: list[str] = []
        stop = False

        async def worker(i: int) -> None:
            key = f"bench:h:{i}"
            n = 0
            while not stop:
                t = time.perf_counter()
                try:
                    if n % 2:
                        await r.get(key)
                    else:
                        await r.set(key, VALUE)
                except trio_maint.RedisError as exc:
                    failures[type(exc).__name__] += 1
                    if len(first_errors) < 5:
                        first_errors.append(repr(exc))
                samples.append((t, time.perf_counter() - t))
                n += 1

        result: dict[str, Any] = {}
        async with trio.open_nursery() as nursery:
            for i in range(tasks):
                nursery.start_soon(worker, i)
            await trio.sleep(0.5)
            rss_before = rss_bytes()
            rss_peak = rss_before
            t0 = time.perf_counter()
            await trio.to_thread.run_sync(sim_a.command, f"moving {MOVING_TIME} {sim_b.address}")
            t_inject = time.perf_counter() - t0
            converged: float | None = None
            recovered: float | None = None
            while time.perf_counter() - t0 < limit:
                rss_peak = max(rss_peak, rss_bytes())
                conns = pool.connections
                now = time.perf_counter()
                if converged is None and conns and all(c.port == b_port for c in conns):
                    converged = now - t0
                manager = r.maintenance.manager if r.maintenance is not None else None
                pending = manager.stats().pending if manager is not None else 0
                if converged is not None and pending == 0:
                    recovered = now - t0
                    break
                await trio.sleep(0.002)
            t_end = time.perf_counter()
            await trio.sleep(0.3)  # a little steady state on B
            stop = True
        after = pool.stats()
        conns = pool.connections
        manager = r.maintenance.manager if r.maintenance is not None else None
        hstats = manager.stats() if manager is not None else None
        during = [d for t, d in samples if t0 <= t <= t_end]
        baseline = [d for t, d in samples if t < t0]
        handoff = metrics.get_metrics()
        result = {
            "pool_size": pool_size,
            "tasks": tasks,
            "opted_in_before": opted_in,
            "inject_call_s": t_inject,
            "converged": converged is not None,
            "converge_s": converged,
            "recovered_s": recovered,
            "commands_total": len(samples),
            "commands_during_storm": len(during),
            "failed_commands": sum(failures.values()),
            "failures_by_type": dict(failures),
            "first_errors": first_errors,
            "latency_ms": {
                "baseline_p50": _ms(percentile(baseline, 50)),
                "baseline_p99": _ms(percentile(baseline, 99)),
                "storm_p50": _ms(percentile(during, 50)),
                "storm_p99": _ms(percentile(during, 99)),
                "storm_max": _ms(max(during) if during else None),
            },
            "rss_mib": {
                "before": rss_before / 2**20,
                "peak_during_storm": rss_peak / 2**20,
            },
            "pool_before": {"total": before.total, "created": before.created},
            "pool_after": {
                "total": after.total,
                "idle": after.idle,
                "created_during": after.created - before.created,
                "removed_during": after.removed - before.removed,
                "on_new_endpoint": sum(1 for c in conns if c.port == b_port),
            },
            "handoffs": {
                "queued": handoff["handoffs_queued"],
                "succeeded": handoff["handoff_successes"],
                "failed": handoff["handoff_failures"],
                "failure_reasons": handoff["handoff_failure_reasons"],
                "queue_full": hstats.queue_full if hstats is not None else None,
                "max_workers": hstats.max_workers if hstats is not None else None,
                "queue_capacity": hstats.queue_capacity if hstats is not None else None,
                "pending_at_end": hstats.pending if hstats is not None else None,
            },
        }
        if not result["converged"]:
            result["not_on_new_endpoint"] = [
                {
                    "id": c.id,
                    "endpoint": c.endpoint_text,
                    "in_use": c.in_use,
                    "handoff": repr(r.maintenance.handoff_target(c)),
                }
                for c in conns
                if c.port != b_port
            ][:20]
        return result


def _pm(summary: dict[str, Any], digits: int = 0) -> str:
    return f"{fmt(summary['median'], digits)} ±{summary['spread_pct']}%"


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(__doc__ or "", argv)
    # Queue-full refusals log one warning per connection: counted below instead.
    logging.getLogger("trio_maint").setLevel(logging.ERROR)
    rounds = args.rounds if args.smoke else min(args.rounds, 3)
    args.rounds = rounds  # recorded in the JSON as run
    limit = 10.0 if args.smoke else 60.0
    variants = _variants(args.smoke)
    raw: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    with RedisServer() as server:
        backend = str(trio_maint.Endpoint(*server.address))
        with SimProcess(backend) as sim_a, SimProcess(backend) as sim_b:
            for round_no in range(rounds):
                for name, spec in variants.items():
                    raw[name].append(
                        trio.run(
                            _round,
                            sim_a,
                            sim_b,
                            spec["pool_size"],
                            spec["tasks"],
                            spec["config"],
                            limit,
                        )
                    )
                print(f"round {round_no + 1}/{rounds} done", flush=True)
    results: dict[str, Any] = {}
    rows = []
    for name, runs in raw.items():

        def med(path: Sequence[str], runs: list[dict[str, Any]] = runs) -> dict[str, Any]:
            values = []
            for run in runs:
                value: Any = run
                for key in path:
                    value = value[key]
                if value is not None:
                    values.append(value)
            return summarize(values)

        summary = {
            "converged_rounds": sum(1 for run in runs if run["converged"]),
            "converge_s": med(["converge_s"]),
            "recovered_s": med(["recovered_s"]),
            "storm_p99_ms": med(["latency_ms", "storm_p99"]),
            "baseline_p99_ms": med(["latency_ms", "baseline_p99"]),
            "failed_commands": sum(run["failed_commands"] for run in runs),
            "peak_rss_mib": med(["rss_mib", "peak_during_storm"]),
            "rss_before_mib": med(["rss_mib", "before"]),
            "removed": med(["pool_after", "removed_during"]),
            "created": med(["pool_after", "created_during"]),
            "handoffs_succeeded": med(["handoffs", "succeeded"]),
            "queue_full": med(["handoffs", "queue_full"]),
            "pool_total_after": med(["pool_after", "total"]),
        }
        results[name] = {"summary": summary, "rounds": runs}
        rows.append(
            [
                name,
                f"{summary['converged_rounds']}/{len(runs)}",
                _pm(summary["converge_s"], 3),
                fmt(summary["baseline_p99_ms"]["median"], 1),
                fmt(summary["storm_p99_ms"]["median"], 1),
                str(summary["failed_commands"]),
                f"{fmt(summary['rss_before_mib']['median'], 1)}->"
                f"{fmt(summary['peak_rss_mib']['median'], 1)}",
                fmt(summary["handoffs_succeeded"]["median"]),
                fmt(summary["removed"]["median"]),
                fmt(summary["created"]["median"]),
                fmt(summary["pool_total_after"]["median"]),
            ]
        )
    print_table(
        "handoff storm: MOVING to a live endpoint (medians over rounds)",
        [
            "variant",
            "converged",
            "converge s",
            "p99 ms before",
            "p99 ms storm",
            "failed",
            "RSS MiB",
            "handed off",
            "removed",
            "dialed",
            "pool after",
        ],
        rows,
    )
    payload = {
        "variants": {
            name: {
                "pool_size": spec["pool_size"],
                "tasks": spec["tasks"],
                "handoff_queue_size": spec["config"].handoff_queue_size,
                "max_workers": spec["config"].max_workers,
            }
            for name, spec in variants.items()
        },
        "moving_time_s": MOVING_TIME,
        "results": results,
    }
    write_json("handoff_storm", args, payload)
    return payload


if __name__ == "__main__":
    main()
