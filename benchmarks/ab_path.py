"""A/B of the client's own command path, without I/O: a git revision against the working
tree.

``python -m benchmarks.ab_path REV [--rounds 5]``

The command path of :class:`~trio_maint.Redis` and :class:`~trio_maint.Pipeline` (the
typed method, ``_command`` or ``execute``, the pool calls, the reply handling) runs against
a fake pool whose connection answers at once, inside one Trio run: what is left is the
client's Python work per command, which a change such as the telemetry hook's ``is None``
check adds to. Each side runs in fresh processes, alternately (ABBA), on the CPU clock;
prints the median nanoseconds per sequential GET, per MULTI + 10 SET + EXEC and per
pipeline of 100 GETs, and the change. End-to-end numbers on a shared machine move by more
than such a change (``benchmarks.ab``); this isolates it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from .ab import ROOT, _export

CASES = ("get", "multi10", "pipeline100")

_CODE = r"""
import sys, time
import trio
from trio_maint._client.pipeline import Pipeline
from trio_maint._client.redis import Redis
from trio_maint._sansio.options import ClientOptions

class Conn:
    maint_enabled = False
    async def execute(self, args, timeout=None):
        return b"v"
    async def execute_many(self, commands, timeout=None):
        if commands[0] == ("MULTI",):
            n = len(commands) - 2
            return [b"OK"] + [b"QUEUED"] * n + [[b"OK"] * n]
        return [b"v"] * len(commands)

class Pool:
    conn = Conn()
    async def acquire_for_reply(self):
        return self.conn
    def release(self, conn):
        pass

async def main():
    r = Redis(ClientOptions(), Pool())
    async def get(n):
        for _ in range(n):
            await r.get("k")
    async def multi10(n):
        for _ in range(n):
            pipe = Pipeline(r, True)
            for _ in range(10):
                pipe.set("k", "v")
            await pipe.execute()
    async def pipeline100(n):
        for _ in range(n):
            pipe = Pipeline(r, False)
            for _ in range(100):
                pipe.get("k")
            await pipe.execute()
    cases = {
        "get": (get, 200_000),
        "multi10": (multi10, 20_000),
        "pipeline100": (pipeline100, 3_000),
    }
    for name in sys.argv[1:]:
        body, n = cases[name]
        await body(n // 10)  # warm-up
        start = time.process_time()
        await body(n)
        print(name, (time.process_time() - start) / n * 1e9)

trio.run(main)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("rev", help="the 'before' git revision, e.g. HEAD~1")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="trio-maint-ab-path-") as tmp:
        before = Path(tmp)
        _export(args.rev, before)
        trees = {"before": before, "after": ROOT}
        ns: dict[tuple[str, str], list[float]] = {(t, c): [] for t in trees for c in CASES}
        for round_no in range(args.rounds):
            order = list(trees) if round_no % 2 == 0 else list(trees)[::-1]
            for side in order:
                env = dict(os.environ, PYTHONPATH=str(trees[side]))
                out = subprocess.run(
                    [sys.executable, "-c", _CODE, *CASES],
                    cwd=trees[side],
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=300,
                    check=True,
                ).stdout
                for line in out.splitlines():
                    case, value = line.split()
                    ns[(side, case)].append(float(value))
            print(f"round {round_no + 1}/{args.rounds} done", flush=True)
    print(f"\n{'case':12} {'ns/op before':>13} {'after':>10} {'change':>8}")
    for case in CASES:
        b, a = (statistics.median(ns[(s, case)]) for s in ("before", "after"))
        print(f"{case:12} {b:13,.0f} {a:10,.0f} {100 * (a / b - 1):+7.1f}%")


if __name__ == "__main__":
    main()
