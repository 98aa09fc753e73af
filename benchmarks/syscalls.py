"""System calls per command: trio_maint against the bare Trio+hiredis loop, under strace.

``python -m benchmarks.syscalls [--count N]`` starts a private redis-server, then runs
``N`` sequential GETs (after a warm-up) in a child process for each client, under
``strace -f -c``, and prints each system call's count per GET. Counting, not timing:
strace slows every call down, so its times are not the client's. Needs ``strace``
(Debian: ``apt-get install strace``). docs/performance.md ("System calls per command")
quotes what it showed.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from trio_maint.testing import RedisServer

#: The child: ``python -c CHILD <client> <port> <count>``; warms up, then only GETs.
CHILD = r"""
import sys, trio, hiredis
client, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

async def trio_maint_gets():
    import trio_maint
    off = trio_maint.MaintConfig(mode="disabled")
    url = f"redis://127.0.0.1:{port}/0"
    async with trio_maint.open_redis(url, pool_size=1, maintenance=off) as r:
        await r.set("k", b"v" * 16)
        for _ in range(count):
            await r.get("k")

async def bare_gets():
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    reader = hiredis.Reader()
    await stream.send_all(hiredis.pack_command(("SET", "k", b"v" * 16)))
    for _ in range(count + 1):
        reply = reader.gets()
        while reply is False:
            reader.feed(await stream.receive_some(65536))
            reply = reader.gets()
        await stream.send_all(hiredis.pack_command(("GET", "k")))
    await stream.aclose()

trio.run(trio_maint_gets if client == "trio_maint" else bare_gets)
"""

CLIENTS = ("trio_maint", "bare-trio")


def count_calls(client: str, port: int, count: int) -> dict[str, int]:
    """``{system call: calls}`` of one child process run under ``strace -f -c``."""
    with tempfile.TemporaryDirectory(prefix="trio-maint-strace-") as tmp:
        out = Path(tmp) / "strace.txt"
        command = [sys.executable, "-c", CHILD, client, str(port), str(count)]
        subprocess.run(["strace", "-f", "-c", "-o", str(out), *command], check=True, timeout=300)
        calls: dict[str, int] = {}
        for line in out.read_text().splitlines():
            fields = line.split()
            # "% time  seconds  usecs/call  calls  [errors]  syscall"
            if (
                len(fields) >= 5
                and fields[0][0].isdigit()
                and fields[3].isdigit()
                and fields[-1] != "total"
            ):
                calls[fields[-1]] = int(fields[3])
        return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=5000, help="GETs per client")
    args = parser.parse_args()
    if shutil.which("strace") is None:
        parser.error("strace is not installed (Debian: apt-get install strace)")
    with RedisServer() as server:
        base = {c: count_calls(c, server.port, 0) for c in CLIENTS}
        runs = {c: count_calls(c, server.port, args.count) for c in CLIENTS}
    # Per GET: the run's calls less those of a run without GETs (start-up, connecting).
    names = sorted({n for run in runs.values() for n in run})
    rows = []
    for name in names:
        per = [(runs[c].get(name, 0) - base[c].get(name, 0)) / args.count for c in CLIENTS]
        if any(p >= 0.01 for p in per):
            rows.append((name, per))
    print(f"system calls per GET ({args.count:,} sequential GETs)")
    print(f"{'call':16}" + "".join(f"{c:>12}" for c in CLIENTS))
    for name, per in rows:
        print(f"{name:16}" + "".join(f"{p:12.2f}" for p in per))
    totals = [sum(p[i] for _, p in rows) for i in range(len(CLIENTS))]
    print(f"{'total':16}" + "".join(f"{t:12.2f}" for t in totals))


if __name__ == "__main__":
    main()
