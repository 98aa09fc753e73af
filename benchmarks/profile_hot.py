"""Profile trio_maint's hot paths with pyinstrument (installed by ``nox -s bench``).

``python -m benchmarks.profile_hot [case ...] [--duration S]`` runs each throughput case
(default: seq_get and pool50_setget) against a private redis-server under pyinstrument and
prints the call tree, so the cost of each layer (pool, connection, parser, Trio) shows.
"""

from __future__ import annotations

import argparse

import trio

from trio_maint.testing import RedisServer

from .bench_throughput import CASES, _trio_maint_case


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("cases", nargs="*", default=["seq_get", "pool50_setget"])
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--interval", type=float, default=0.0005)
    args = parser.parse_args()
    from pyinstrument import Profiler

    with RedisServer() as server:
        for case in args.cases:
            if case not in CASES:
                parser.error(f"unknown case {case!r}; one of {', '.join(CASES)}")
            profiler = Profiler(interval=args.interval, async_mode="disabled")
            profiler.start()
            rate, _cpu = trio.run(_trio_maint_case, f"{server.url}/0", case, args.duration)
            profiler.stop()
            print(f"\n===== {case}: {rate:,.0f} ops/s under the profiler =====")
            print(profiler.output_text(unicode=False, color=False, show_all=False))


if __name__ == "__main__":
    main()
