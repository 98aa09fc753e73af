"""A server flooding maintenance notifications cannot flood the application's logs
(issue 13, item 5): the handler's per-frame lines — malformed frames, windows opening and
closing, MOVINGs, refused MOVINGs, the LoggingHook — are rate-limited, and every frame
is still handled (events and state say so)."""

from __future__ import annotations

import logging
from collections import Counter

import pytest
import trio
import trio.testing

from trio_maint import LoggingHook, MalformedNotification, MovingRefused
from trio_maint._maint.handler import MaintenanceHandler
from trio_maint._sansio.loglimit import LOG_INTERVAL
from trio_maint.lowlevel import Connection

from .test_maintenance_unit import OPTIONS, fill, harness, moving

FLOOD = 100_000
SPAN = 100.0  # seconds of Trio time the flood lasts
BOUND = 1 + SPAN / LOG_INTERVAL  # lines per kind at most


def _count(caplog: pytest.LogCaptureFixture) -> Counter[str]:
    return Counter(
        str(getattr(r, "event", r.getMessage()))
        for r in caplog.records
        if r.name.startswith("trio_maint") and not r.name.startswith("trio_maint.testing")
    )


def _flood(frames: list[list[object]], count: int, hook: bool) -> int:
    """Feed ``frames`` ``count`` times over SPAN seconds of MockClock time to a handler's
    push handler; return the number of MalformedNotification events."""
    clock = trio.testing.MockClock()
    malformed = 0

    async def main() -> None:
        nonlocal malformed
        handler = MaintenanceHandler(OPTIONS)
        if hook:
            handler.add_hook(LoggingHook())
        conn = Connection(OPTIONS)
        stream = handler.events(max_buffer=(len(frames) + 1) * count)
        async with stream:
            for _ in range(count):
                clock.jump(SPAN / count)
                for frame in frames:
                    handler.push_handler(conn, frame)
        async for event in stream:  # closed: what it holds, then the end
            malformed += isinstance(event, MalformedNotification)

    trio.run(main, clock=clock)
    return malformed


def test_a_flood_of_malformed_frames_writes_bounded_lines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """10^5 malformed MOVING frames over 100 s: at most 11 WARNING lines, the held-back
    count on each; every frame still reaches the event stream."""
    caplog.set_level(logging.DEBUG, logger="trio_maint")
    malformed = _flood([[b"MOVING", b"not a number", 5]], FLOOD, hook=False)
    assert malformed == FLOOD
    lines = [r for r in caplog.records if getattr(r, "event", None) == "notification_malformed"]
    assert 1 <= len(lines) <= BOUND
    assert all(r.levelno == logging.WARNING for r in lines)
    assert len(lines) + sum(getattr(r, "suppressed", 0) for r in lines) <= FLOOD
    assert getattr(lines[-1], "suppressed", 0) > 0
    assert _count(caplog) == Counter({"notification_malformed": len(lines)})


def test_a_flood_of_windows_writes_bounded_lines(caplog: pytest.LogCaptureFixture) -> None:
    """2*10^4 MIGRATING/MIGRATED pairs over 100 s, with a LoggingHook and DEBUG on: at
    most 11 lines per kind (relaxed, restored, and the hook's started/succeeded)."""
    caplog.set_level(logging.DEBUG, logger="trio_maint")
    count = 20_000
    _flood([[b"MIGRATING", 1, 5, b"1"], [b"MIGRATED", 2, b"1"]], count, hook=True)
    lines = _count(caplog)
    for kind in (
        "timeouts_relaxed",
        "timeouts_restored",
        "notification_started",
        "notification_succeeded",
    ):
        assert 1 <= lines[kind] <= BOUND, (kind, lines)
    assert all(n <= BOUND for n in lines.values()), lines


@pytest.mark.trio
async def test_a_flood_of_refused_movings_writes_bounded_lines(
    caplog: pytest.LogCaptureFixture, autojump_clock: trio.abc.Clock
) -> None:
    """10^4 MOVINGs, each a new seqID to a new foreign host name (refused: the client
    opted in with internal-ip), over 100 s: every one is refused and emitted as a
    MovingRefused event, the log has at most 11 lines per kind."""
    caplog.set_level(logging.INFO, logger="trio_maint")
    count = 10_000
    refused = 0
    async with harness() as (handler, pool):
        conns = await fill(pool, 2)
        stream = handler.events(max_buffer=count * 8)
        async with stream:
            for seq in range(1, count + 1):
                await trio.sleep(SPAN / count)
                handler.push_handler(conns[0], moving(seq, 15, f"h{seq}.example.com:7000"))
        async for event in stream:  # closed: what it holds, then the end
            refused += isinstance(event, MovingRefused)
    assert refused == count
    lines = _count(caplog)
    for kind in ("moving_refused", "moving"):
        assert 1 <= lines[kind] <= BOUND, (kind, lines)
    assert all(n <= BOUND for n in lines.values()), lines
