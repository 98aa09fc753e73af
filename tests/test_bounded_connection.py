"""Bounded parsing through a real client (issue 13): hostile fake servers answer a GET with
headers that used to take gigabytes or block the event loop for seconds; every one must
now fail that command with a ProtocolError naming the cap, at once, within bounded memory,
without stalling the loop, and cost only its connection.

The hostile exchanges run in a subprocess of their own (``tests/_hostile.py``, address
space capped at 3 GiB), which measures its peak RSS and the event loop's longest stall;
the bounds asserted here are generous (measured values are in docs/robustness.md). Before
the fix (HEAD f5a8163, same cap): ``>100000000`` grew the RSS by 781 MiB, stalled the loop
for 1 s and hung until the socket timeout; ``>2147483647`` and ``*2147483647`` only failed
because the cap turned hiredis's 16 GiB allocation into a MemoryError (uncapped: RSS past
2 GiB, seconds blocked); eight nested ``*16000000`` hung until the timeout.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

import trio_maint
from trio_maint import ProtocolError

from ._fakeserver import FakeConnection, open_fake_server, resp

ROOT = Path(__file__).resolve().parents[1]


def hostile(case: str, query: str = "") -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "tests._hostile", case, query],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize(
    ("case", "names"),
    [
        ("push_2g", "aggregate of 2,147,483,647 elements, over max_aggregate_len (16,777,216)"),
        ("push_100m", "aggregate of 100,000,000 elements, over max_aggregate_len"),
        ("array_2g", "over max_aggregate_len"),
        ("set_2g", "over max_aggregate_len"),
        ("map_2g", "over max_aggregate_len"),
        ("nested_16m", "ahead of the bytes received, over max_aggregate_len"),
        ("bulk_streamed", "bulk string of 2,147,483,647 bytes, over max_bulk_len (536,870,912"),
        ("line_streamed", "line of more than 1,048,576 bytes"),
        ("attribute", "attribute frame"),
    ],
)
def test_a_hostile_reply_costs_one_command_and_one_connection(case: str, names: str) -> None:
    result = hostile(case)
    assert result["error"][0] in ("ProtocolError", "LimitExceeded"), result
    assert names in result["error"][1], result
    assert result["seconds"] < 3.0, result  # at once, not at the 10 s socket timeout
    assert result["rss_growth_kib"] < 64 * 1024, result  # before: up to 781 MiB (> 2 GiB)
    assert result["max_stall"] < 1.0, result  # before: 1 s, or seconds
    assert result["next_ok"] and result["connections"] == 2, result


def test_max_reply_bytes_from_the_url() -> None:
    result = hostile("push_100m", "?max_reply_bytes=1000")
    assert "over max_aggregate_len" in result["error"][1], result


async def _values(conn: FakeConnection, args: list[bytes]) -> bytes:
    return resp(b"v" * int(args[1]))


@pytest.mark.trio
async def test_max_reply_bytes_bounds_one_reply() -> None:
    async with open_fake_server(maint_notifications=False) as server:
        server.on("GET", _values)
        url = server.url + "?max_reply_bytes=1000"
        async with trio_maint.open_redis(url, socket_timeout=5.0) as r:
            assert r.options.max_reply_bytes == 1000
            assert await r.get("992") == b"v" * 992  # $992\r\n...\r\n: 1,000 bytes
            with trio.fail_after(3), pytest.raises(ProtocolError, match="max_reply_bytes"):
                await r.get("993")
            async with r.pipeline(transaction=False) as pipe:
                pipe.get("10").get("20")
                assert await pipe.execute() == [b"v" * 10, b"v" * 20]
            assert server.accepted == 2  # the refused reply's connection was discarded


@pytest.mark.trio
async def test_caps_are_client_options() -> None:
    async with open_fake_server(maint_notifications=False) as server:
        server.on("GET", _values)
        url = server.url + "?max_bulk_len=2000000&max_aggregate_len=50000"
        async with trio_maint.open_redis(url) as r:
            assert r.options.frame_limits.max_bulk_len == 2_000_000
            assert await r.get("1500") == b"v" * 1500
