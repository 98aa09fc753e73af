"""Polling for a reply against sleeping until it comes: sequential GETs in a bare Trio+hiredis
loop, with up to N passes through Trio's scheduler (each followed by one non-blocking read)
before the loop waits for readability.

``python -m benchmarks.poll_passes [--passes 0,1,2,4,8,16] [--count N] [--rounds R]
[--gap-us US]`` starts a private redis-server and, for each N in ``--passes`` (alternating
within each round), writes ``GET``, polls up to N passes, then waits for readability
(``trio.lowlevel.wait_readable``) if nothing came. It prints, per N, GET/s, client CPU µs per
GET (``time.process_time``), the share of replies found by polling, the mean pass at which
they were found, and the mean time of the ``write`` system call. ``--gap-us`` busy-waits that
long after each reply before the next write (a client's own work between commands): the
server has gone to sleep meanwhile, and waking it is paid in the write.

This is the measurement behind ``trio_maint/_sansio/spin.py`` (docs/performance.md,
"Polling for the reply"); no trio_maint code runs here.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Sequence
from typing import Any, cast

import hiredis
import trio

from trio_maint.testing import RedisServer

#: The key every GET reads (16 bytes, set before the loops).
KEY = "bench:poll:key"


async def _loop(port: int, passes: int, count: int, gap: float) -> dict[str, float]:
    """``count`` sequential GETs on a connection of their own to ``port``, polling up to
    ``passes`` passes before waiting, ``gap`` seconds of busy work after each reply;
    returns the rates and means the table prints."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    try:
        sock = stream.socket
        fd = sock.fileno()
        reader = hiredis.Reader()
        command = hiredis.pack_command(cast(Any, ("GET", KEY)))
        found = 0
        found_at = 0
        write_time = 0.0
        clock = time.perf_counter
        cpu = time.process_time()
        start = clock()
        for _ in range(count):
            before = clock()
            os.write(fd, command)
            write_time += clock() - before
            data = None
            for attempt in range(1, passes + 1):
                await trio.lowlevel.checkpoint()
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                found += 1
                found_at += attempt
                break
            while True:
                if data is None:
                    await trio.lowlevel.wait_readable(sock)
                    data = os.read(fd, 65536)
                reader.feed(data)
                reply = reader.gets()
                if reply is not False:
                    break
                data = None
            if gap:
                until = clock() + gap
                while clock() < until:
                    pass
        elapsed = clock() - start
        cpu_used = time.process_time() - cpu
    finally:
        await stream.aclose()
    return {
        "gets_per_s": count / elapsed,
        "cpu_us": cpu_used / count * 1e6,
        "found_pct": found / count * 100,
        "mean_pass": found_at / found if found else 0.0,
        "write_us": write_time / count * 1e6,
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line (see the module doc)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--passes", default="0,1,2,4,8,16")
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gap-us", type=float, default=0.0)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[int, dict[str, float]]:
    """Run the loops and print one line per N; returns the medians per N."""
    args = parse_args(argv)
    passes = [int(p) for p in args.passes.split(",") if p]
    runs: dict[int, list[dict[str, float]]] = {n: [] for n in passes}
    with RedisServer() as server:
        port = server.address[1]

        async def setup() -> None:
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            await stream.send_all(hiredis.pack_command(cast(Any, ("SET", KEY, b"v" * 16))))
            await stream.receive_some(65536)
            await stream.aclose()

        trio.run(setup)
        for round_no in range(args.rounds):
            order = passes if round_no % 2 == 0 else passes[::-1]
            for n in order:
                runs[n].append(trio.run(_loop, port, n, args.count, args.gap_us / 1e6))
    medians = {
        n: {key: statistics.median(run[key] for run in rows) for key in rows[0]}
        for n, rows in runs.items()
    }
    print(f"sequential GET, {args.count} per run, median of {args.rounds} rounds", end="")
    print(f", {args.gap_us:g} µs of client work between commands" if args.gap_us else "")
    print("passes      GET/s  CPU µs/GET  found by polling  mean pass  write µs")
    for n, m in medians.items():
        print(
            f"{n:>6} {m['gets_per_s']:>10,.0f} {m['cpu_us']:>11.1f} {m['found_pct']:>16.1f}%"
            f" {m['mean_pass']:>10.1f} {m['write_us']:>9.1f}"
        )
    return medians


if __name__ == "__main__":
    main()
