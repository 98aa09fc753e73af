"""One hostile exchange, measured, in a process of its own (``python -m tests._hostile
CASE``; used by tests/test_bounded_connection.py and for the numbers in
docs/robustness.md).

A fake server answers ``GET bad`` with the bytes of CASE (and, for a streamed bulk
string, keeps writing 64 KiB at a time); every other command as usual. The client
runs ``GET bad`` once, then ``GET good``. Printed as JSON: the error (type and message),
the Trio time it took, the growth of the process's peak RSS in KiB, the longest the
event loop went without running a 5 ms ticker, and whether ``GET good`` then worked on a
new connection. The process's address space is capped (``RLIMIT_AS``, 3 GiB) so that a
regression fails here with ``MemoryError`` rather than taking the machine's memory.
"""

from __future__ import annotations

import json
import resource
import sys
from typing import Any

import trio
import trio.lowlevel

import trio_maint

from ._fakeserver import Action, FakeConnection, open_fake_server, resp

CASES: dict[str, tuple[bytes, bool]] = {
    # name: (the reply's first bytes, then stream 64 KiB writes forever)
    "push_2g": (b">2147483647\r\n", False),
    "push_100m": (b">100000000\r\n", False),
    "array_2g": (b"*2147483647\r\n", False),
    "set_2g": (b"~2147483647\r\n", False),
    "map_2g": (b"%2147483647\r\n", False),
    "nested_16m": (b"*16000000\r\n" * 8, False),
    "bulk_streamed": (b"$2147483647\r\n", True),
    "line_streamed": (b"+", True),
    "attribute": (b"|1\r\n+ttl\r\n:1\r\n", False),
}


def _peak_rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


async def exchange(case: str, url_query: str = "") -> dict[str, Any]:
    head, stream = CASES[case]

    async def get(conn: FakeConnection, args: list[bytes]) -> bytes | Action:
        if args[1] != b"bad":
            return resp(b"fine")
        await conn.send(head)
        while stream:
            await conn.send(b"x" * 65536)
            await trio.lowlevel.checkpoint()
        return Action.NO_REPLY

    result: dict[str, Any] = {}
    gaps = [0.0]

    async def ticker() -> None:
        last = trio.current_time()
        while True:
            await trio.sleep(0.005)
            now = trio.current_time()
            gaps.append(now - last)
            last = now

    async with open_fake_server(maint_notifications=False) as server:
        server.on("GET", get)
        url = server.url + url_query
        async with trio_maint.open_redis(url, socket_timeout=10.0) as r, trio.open_nursery() as n:
            n.start_soon(ticker)
            assert await r.get("good") == b"fine"
            rss = _peak_rss_kib()
            start = trio.current_time()
            try:
                await r.get("bad")
                result["error"] = None
            except Exception as exc:
                result["error"] = [type(exc).__name__, str(exc)]
            result["seconds"] = round(trio.current_time() - start, 3)
            result["rss_growth_kib"] = _peak_rss_kib() - rss
            result["max_stall"] = round(max(gaps), 3)
            result["next_ok"] = await r.get("good") == b"fine"
            result["connections"] = server.accepted
            n.cancel_scope.cancel()
    return result


def main() -> None:
    limit = 3 * 1024**3
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    case = sys.argv[1]
    query = sys.argv[2] if len(sys.argv) > 2 else ""
    print(json.dumps(trio.run(exchange, case, query)))


if __name__ == "__main__":
    main()
