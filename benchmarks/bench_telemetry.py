"""Telemetry overhead (issue 16): what the optional exporters cost per command, and what
their hook costs when no exporter is attached.

Modes, on the throughput benchmark's cases (``seq_get``: 1 task, sequential GET;
``pool50_setget``: 50 tasks SET+GET through the pool; ``pipeline100``: pipelines of 100
GETs) against one redis-server, alternating within each round (ABBA):

* ``none``: no exporter attached (how every client runs unless instrumented: the command
  path pays one ``is None`` check, the pool nothing);
* ``otel``: :func:`trio_maint.otel.instrument` on an OpenTelemetry SDK ``MeterProvider``
  with an in-memory reader (nothing exported), no spans;
* ``otel_spans``: the same with a span per command (``spans=True``) into a
  ``TracerProvider`` without processor;
* ``prometheus``: :func:`trio_maint.prometheus.instrument` on a fresh ``CollectorRegistry``.

A mode whose package is missing is skipped (``nox -s bench`` installs both). Client CPU
per operation (``time.process_time``) is the number to judge; ops/s is reported too.

The check itself is far below what a shared machine resolves in a whole command, so it is
also measured alone, in a tight loop on the CPU clock: ``self._observer is not None and
not _observed`` against nothing. Whether the unobserved command path got slower at all is
measured against the revision before the hooks with ``python -m benchmarks.ab REV``
(docs/performance.md quotes both).
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Sequence
from typing import Any

import trio

import trio_maint
from trio_maint.testing import RedisServer

from ._common import parse_args, pm, print_table, summarize, write_json
from .bench_throughput import KEY, VALUE, Sample, _case_body, _timed_tasks

CASES = ("seq_get", "pool50_setget", "pipeline100")
MODES = ("none", "otel", "otel_spans", "prometheus")
TASKS = 50


def _available(mode: str) -> bool:
    if mode == "none":
        return True
    if mode == "prometheus":
        return importlib.util.find_spec("prometheus_client") is not None
    return importlib.util.find_spec("opentelemetry.sdk") is not None


def _instrument(r: trio_maint.Redis, mode: str) -> Any:
    """Attach ``mode``'s exporter to ``r``; returns the handle (``None`` for ``none``)."""
    if mode == "none":
        return None
    if mode == "prometheus":
        import prometheus_client

        import trio_maint.prometheus

        return trio_maint.prometheus.instrument(r, registry=prometheus_client.CollectorRegistry())
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider

    import trio_maint.otel

    return trio_maint.otel.instrument(
        r,
        meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]),
        tracer_provider=TracerProvider(),
        spans=mode == "otel_spans",
    )


async def _case(url: str, case: str, mode: str, duration: float) -> Sample:
    ntasks = TASKS if case == "pool50_setget" else 1
    config = trio_maint.MaintConfig(mode="disabled")
    async with trio_maint.open_redis(url, pool_size=ntasks, maintenance=config) as r:
        handle = _instrument(r, mode)
        try:
            await r.set(KEY, VALUE)
            body = _case_body(r, case)
            await _timed_tasks(ntasks, min(0.2, duration), body)  # warm-up
            return await _timed_tasks(ntasks, duration, body)
        finally:
            if handle is not None:
                handle.close()


def _check_cost_ns(rounds: int, n: int) -> dict[str, Any]:
    """CPU nanoseconds of the unobserved path's check (an attribute read, ``is not None``,
    short-circuited), measured as a loop with it minus an empty loop."""

    class Client:
        _observer: object = None

    client = Client()

    def with_check() -> float:
        observed = False
        start = time.process_time()
        for _ in range(n):
            if client._observer is not None and not observed:
                raise AssertionError
        return time.process_time() - start

    def without() -> float:
        start = time.process_time()
        for _ in range(n):
            pass
        return time.process_time() - start

    return summarize([(with_check() - without()) / n * 1e9 for _ in range(rounds)])


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(__doc__ or "", argv)
    modes = [m for m in MODES if _available(m)]
    skipped = {m: "package not installed" for m in MODES if m not in modes}
    raw: dict[tuple[str, str], list[Sample]] = {(c, m): [] for c in CASES for m in modes}
    with RedisServer() as server:
        url = f"{server.url}/0"
        for round_no in range(args.rounds):
            for case in CASES:
                order = modes if round_no % 2 == 0 else modes[::-1]
                for mode in order:
                    raw[(case, mode)].append(trio.run(_case, url, case, mode, args.duration))
            print(f"round {round_no + 1}/{args.rounds} done", flush=True)
    results: dict[str, Any] = {}
    rows = []
    for case in CASES:
        entry: dict[str, Any] = {}
        base = None
        for mode in modes:
            rate = summarize([s[0] for s in raw[(case, mode)]])
            cpu = summarize([s[1] for s in raw[(case, mode)]])
            entry[mode] = {"ops_per_s": rate, "cpu_us_per_op": cpu}
            if mode == "none":
                base = cpu["median"]
            overhead = None if not base else (cpu["median"] / base - 1) * 100
            entry[mode]["cpu_overhead_pct"] = None if overhead is None else round(overhead, 1)
            rows.append(
                [
                    f"{case} {mode}",
                    pm(rate),
                    pm(cpu, 2),
                    "-" if overhead is None or mode == "none" else f"{overhead:+.1f} %",
                ]
            )
        results[case] = entry
    print_table(
        "telemetry: no exporter vs OpenTelemetry (metrics, + spans) vs Prometheus",
        ["case mode", "ops/s", "client CPU us/op", "CPU vs none"],
        rows,
    )
    check = _check_cost_ns(max(3, args.rounds), 200_000 if args.smoke else 5_000_000)
    seq_cpu_ns = results["seq_get"]["none"]["cpu_us_per_op"]["median"] * 1e3
    check_pct = check["median"] / seq_cpu_ns * 100
    print(
        f"the unobserved path's check: {check['median']:.1f} ns CPU per command = "
        f"{check_pct:.3f} % of a sequential GET's client CPU time"
    )
    payload: dict[str, Any] = {
        "cases": results,
        "modes": modes,
        "check_cpu_ns_per_command": check,
        "check_pct_of_seq_get": round(check_pct, 4),
    }
    if skipped:
        payload["skipped"] = skipped
    write_json("telemetry", args, payload)
    return payload


if __name__ == "__main__":
    main()
