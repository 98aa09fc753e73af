"""Rate-limited logging (issue 13, item 5): per-frame and per-event log lines are bounded
whatever a server sends — the first of a kind is logged, then at most one line per
interval, which carries the count of what was held back."""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator

import pytest
import trio

import trio_maint
from trio_maint import Endpoint, SMigrated
from trio_maint._sansio.loglimit import LOG_INTERVAL, LOG_LIMITER, LogLimiter, log_limited
from trio_maint.lowlevel import CircuitBreaker, RelaxedTimeouts, SlotMove

from ._fakeserver import (
    ClusterTopology,
    Err,
    FakeConnection,
    FakeServer,
    open_fake_server,
    push,
    resp,
    serve_cluster_commands,
)

FLOOD = 100_000
log = logging.getLogger("tests.log_limits")


# ------------------------------------------------------------------ the limiter itself


def test_first_then_one_per_interval_with_the_count() -> None:
    limiter = LogLimiter(interval=10.0)
    assert limiter.allow("k", 100.0) == (True, 0)  # the first is logged
    assert [limiter.allow("k", 100.0 + i / 10) for i in range(1, 50)] == [(False, 0)] * 49
    assert limiter.pending() == {"k": 49}
    assert limiter.allow("k", 110.0) == (True, 49)  # the interval passed: the summary
    assert limiter.pending() == {}
    assert limiter.allow("k", 115.0) == (False, 0)
    assert limiter.allow("k", 125.0) == (True, 1)


def test_kinds_are_independent() -> None:
    limiter = LogLimiter(interval=10.0)
    assert limiter.allow("a", 0.0) == (True, 0)
    assert limiter.allow("b", 0.0) == (True, 0)
    assert limiter.allow("a", 1.0) == (False, 0)
    assert limiter.pending() == {"a": 1}


def test_time_going_back_starts_afresh() -> None:
    """Another clock (a new trio.run has its own time base): the line is let through."""
    limiter = LogLimiter(interval=10.0)
    assert limiter.allow("k", 5000.0) == (True, 0)
    assert limiter.allow("k", 5001.0) == (False, 0)
    assert limiter.allow("k", 3.0) == (True, 1)


def test_the_table_of_kinds_is_bounded() -> None:
    """Kinds made from untrusted values (an endpoint per MOVING) cannot grow the table
    or the number of lines: past ``max_kinds``, new kinds share one budget."""
    limiter = LogLimiter(interval=10.0, max_kinds=8)
    allowed = sum(limiter.allow(f"kind-{i}", 1.0)[0] for i in range(10_000))
    assert len(limiter) <= 9
    assert allowed == 9  # 8 kinds and the overflow budget
    # Once their interval passed with nothing held back, kinds are forgotten for new ones.
    fresh = LogLimiter(interval=10.0, max_kinds=2)
    assert fresh.allow("a", 0.0)[0] and fresh.allow("b", 0.0)[0]
    assert fresh.allow("c", 20.0) == (True, 0)
    assert len(fresh) == 1


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"interval": 0.0}, "interval"),
        ({"interval": math.inf}, "interval"),
        ({"interval": math.nan}, "interval"),
        ({"max_kinds": 0}, "max_kinds"),
    ],
)
def test_limiter_arguments_are_checked(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        LogLimiter(**kwargs)  # type: ignore[arg-type]


def test_log_limited_keeps_extra_and_reports_the_count(caplog: pytest.LogCaptureFixture) -> None:
    limiter = LogLimiter(interval=10.0)
    caplog.set_level(logging.INFO, logger="tests.log_limits")
    for i in range(1000):
        log_limited(
            log,
            logging.INFO,
            "thing",
            i / 100,  # 0 .. 9.99 s
            "thing %d happened",
            i,
            extra={"event": "thing", "conn_id": i},
            limiter=limiter,
        )
    assert log_limited(log, logging.INFO, "thing", 10.0, "thing %d happened", 1000, limiter=limiter)
    first, summary = caplog.records
    assert first.getMessage() == "thing 0 happened"
    assert (first.event, first.conn_id, first.suppressed) == ("thing", 0, 0)  # type: ignore[attr-defined]
    assert summary.getMessage() == "thing 1000 happened [999 similar lines suppressed]"
    assert summary.suppressed == 999  # type: ignore[attr-defined]
    assert first.funcName == "test_log_limited_keeps_extra_and_reports_the_count"


def test_a_disabled_level_counts_nothing(caplog: pytest.LogCaptureFixture) -> None:
    limiter = LogLimiter()
    caplog.set_level(logging.WARNING, logger="tests.log_limits")
    for _ in range(100):
        assert not log_limited(log, logging.DEBUG, "quiet", 0.0, "x", limiter=limiter)
    assert len(limiter) == 0
    assert log_limited(log, logging.WARNING, "loud", 0.0, "x %s", "y", limiter=limiter)


# ------------------------------------------------------------- floods, sans-IO callers


def test_a_flood_of_backstop_expirations_is_bounded(caplog: pytest.LogCaptureFixture) -> None:
    """10^5 connections whose maintenance window the server never closes, over 100 s:
    at most one WARNING per 10 s, every expiration still counted."""
    caplog.set_level(logging.WARNING, logger="trio_maint.timeouts")
    expired = 0
    for i in range(FLOOD):
        t = RelaxedTimeouts(1.0, backstop=1.0)
        now = i / 1000  # 10^5 events over 100 s
        t.open_window(now)
        expired += t.expire(now + 1.0)
    assert expired == FLOOD
    lines = [r for r in caplog.records if r.name == "trio_maint.timeouts"]
    assert 1 <= len(lines) <= 1 + 100 / LOG_INTERVAL
    assert all(r.event == "relaxed_timeout_backstop" for r in lines)  # type: ignore[attr-defined]
    assert sum(r.suppressed for r in lines) + len(lines) <= FLOOD  # type: ignore[attr-defined]
    assert lines[1].suppressed > 0  # type: ignore[attr-defined]


def test_a_flood_of_breakers_opening_is_bounded(caplog: pytest.LogCaptureFixture) -> None:
    """10^5 MOVING targets, each failing: one breaker each opens, re-opens after a trial,
    closes after successes; each kind of line stays bounded."""
    caplog.set_level(logging.INFO, logger="trio_maint.breaker")
    for i in range(FLOOD):
        now = i / 10_000  # 10 s in all
        b = CircuitBreaker(
            Endpoint(f"10.0.{i // 250}.{i % 250}", 6379),
            failure_threshold=1,
            reset_timeout=0.0,
            max_requests=1,
        )
        b.record_failure(now)  # opened
        assert b.allow(now)  # half-open
        b.record_success(now)  # closed
    kinds = [r.event for r in caplog.records]  # type: ignore[attr-defined]
    for kind in ("circuit_breaker_opened", "circuit_breaker_half_open", "circuit_breaker_closed"):
        assert 1 <= kinds.count(kind) <= 2, kinds
    assert all(hasattr(r, "endpoint") for r in caplog.records)


# --------------------------------------------------------------- floods, Trio callers


def _confirm(kind: bytes) -> object:
    async def handler(conn: FakeConnection, args: list[bytes]) -> bytes:
        return b"".join(push(kind, ch, i + 1) for i, ch in enumerate(args[1:]))

    return handler


@pytest.fixture
async def pubsub_server() -> AsyncIterator[FakeServer]:
    async with open_fake_server() as srv:
        srv.on("SUBSCRIBE", _confirm(b"subscribe"))  # type: ignore[arg-type]
        yield srv


@pytest.mark.slow
@pytest.mark.trio
async def test_a_flood_of_bad_pubsub_frames_is_bounded(
    pubsub_server: FakeServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A subscriber's server sends 10^5 error replies nobody asked for and 10^5 frames
    that do not decode: two WARNING lines (one per kind), and the subscriber still reads
    the message that follows."""
    caplog.set_level(logging.DEBUG, logger="trio_maint.pubsub")
    errors = resp(Err("ERR hostile")) * FLOOD
    undecodable = resp(b"\xff\xfe") * FLOOD
    done = push(b"message", b"ch", b"after the flood")
    async with (
        trio_maint.open_redis(pubsub_server.url, decode_responses=True) as r,
        r.pubsub(ignore_subscribe_messages=True) as ps,
    ):
        with trio.fail_after(60):
            await ps.subscribe("ch")
            async with trio.open_nursery() as nursery:  # the push blocks until read
                nursery.start_soon(pubsub_server.push, errors + undecodable + done)
                message = await ps.get_message(timeout=30)
                while message is None:
                    message = await ps.get_message(timeout=30)
    assert message.data == "after the flood"
    lines = [r for r in caplog.records if r.name == "trio_maint.pubsub"]
    by_kind = [r.event for r in lines]  # type: ignore[attr-defined]
    assert by_kind.count("pubsub_unexpected_error_reply") <= 2
    assert by_kind.count("pubsub_undecodable_frame") <= 2
    assert len(lines) <= 4, [r.getMessage() for r in lines]
    assert all(r.conn_id >= 1 for r in lines)  # type: ignore[attr-defined]


@pytest.mark.trio
async def test_a_flood_of_smigrated_is_bounded(caplog: pytest.LogCaptureFixture) -> None:
    """10^5 SMIGRATED with new seq ids (the server picks them): the slot map follows
    each, one INFO line per interval."""
    caplog.set_level(logging.INFO, logger="trio_maint.cluster")
    topology = ClusterTopology()
    async with open_fake_server() as node:
        serve_cluster_commands(node, topology)
        topology.assign(node)
        async with trio_maint.open_redis_cluster(node.url) as rc:
            caplog.clear()
            for seq in range(1, FLOOD + 1):
                moved = SMigrated(seq, (SlotMove(None, node.name, (str(seq % 16384),)),))
                assert rc.handle_smigrated(node.name, None, moved)
                if seq % 1000 == 0:
                    await trio.lowlevel.checkpoint()  # let the refreshes run
    lines = [r for r in caplog.records if getattr(r, "event", "") == "smigrated_reload"]
    assert 1 <= len(lines) <= 13  # 2 minutes at most: one line per 10 s
    assert all(hasattr(r, "seq_id") and hasattr(r, "node") for r in lines)


def test_the_process_wide_limiter_is_reset_between_tests() -> None:
    """tests/conftest.py empties it before each test (test clocks restart at 0)."""
    assert len(LOG_LIMITER) == 0
