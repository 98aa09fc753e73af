"""Streams (issue 14, item 5): the typed replies of ``_sansio/streams.py`` (checked
against redis-py's RESP3 client on a real server) and the consumer-group helper
:class:`~trio_maint.StreamConsumer` on a real redis-server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis
import trio

import trio_maint
from trio_maint import ProtocolError, ResponseError, StreamConsumer, StreamEntry
from trio_maint._sansio.replies import apply_callback
from trio_maint._sansio.streams import (
    XAutoClaimReply,
    entry_fields,
    parse_entries,
    parse_entry,
    parse_ids,
    parse_xautoclaim,
    parse_xautoclaim_justid,
    parse_xinfo_consumers,
    parse_xinfo_groups,
    parse_xinfo_stream,
    parse_xinfo_stream_full,
    parse_xpending,
    parse_xpending_range,
    parse_xread,
)
from trio_maint.testing import RedisServer

# ------------------------------------------------------------------ sans-IO shapes


def test_entries_compare_equal_to_redis_py_tuples() -> None:
    entry = parse_entry([b"1-0", [b"a", b"1", b"b", b"2"]])
    assert isinstance(entry, StreamEntry)
    assert entry.id == b"1-0" and entry.fields == {b"a": b"1", b"b": b"2"}
    assert entry == (b"1-0", {b"a": b"1", b"b": b"2"})


def test_entry_fields_of_a_deleted_entry_and_a_map() -> None:
    assert entry_fields(None) == {}
    assert entry_fields({b"a": b"1"}) == {b"a": b"1"}
    assert parse_entry(["1-0", None]) == ("1-0", {})


@pytest.mark.parametrize(
    "bad", [b"x", [b"1-0"], [1, [b"a", b"1"]], [b"1-0", [b"a"]], [b"1-0", b"ab"]]
)
def test_malformed_entries_raise(bad: Any) -> None:
    with pytest.raises(ValueError):
        parse_entry(bad)


def test_a_malformed_reply_becomes_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="XRANGE"):
        apply_callback(parse_entries, b"nonsense", ("XRANGE", "s", "-", "+"))


def test_parse_entries_and_ids() -> None:
    assert parse_entries(None) == []
    assert parse_entries([[b"1-0", [b"a", b"1"]], None]) == [(b"1-0", {b"a": b"1"})]
    assert parse_ids([b"1-0", b"2-0"]) == [b"1-0", b"2-0"]
    assert parse_ids(None) == []
    with pytest.raises(ValueError):
        parse_ids(b"1-0")


def test_parse_xread_resp3_resp2_and_nil() -> None:
    resp3 = {b"s": [[b"1-0", [b"a", b"1"]]], b"t": []}
    assert parse_xread(resp3) == {b"s": [(b"1-0", {b"a": b"1"})], b"t": []}
    resp2 = [[b"s", [[b"1-0", [b"a", b"1"]]]]]
    assert parse_xread(resp2) == {b"s": [(b"1-0", {b"a": b"1"})]}
    assert parse_xread(None) == {}
    with pytest.raises(ValueError):
        parse_xread([[b"s"]])
    with pytest.raises(ValueError):
        parse_xread(b"s")


def test_parse_xautoclaim() -> None:
    reply = [b"0-0", [[b"1-0", [b"a", b"1"]]], [b"2-0"]]
    parsed = parse_xautoclaim(reply)
    assert parsed == XAutoClaimReply(b"0-0", [StreamEntry(b"1-0", {b"a": b"1"})], [b"2-0"])
    assert parsed.next_id == b"0-0" and parsed.deleted_ids == [b"2-0"]
    assert parse_xautoclaim([b"0-0", []]).deleted_ids == []  # before Redis 7
    assert parse_xautoclaim_justid([b"0-0", [b"1-0"], []]) == [b"1-0"]
    with pytest.raises(ValueError):
        parse_xautoclaim([b"0-0"])


def test_parse_xpending() -> None:
    assert parse_xpending([0, None, None, None]) == {
        "pending": 0,
        "min": None,
        "max": None,
        "consumers": [],
    }
    summary = parse_xpending([2, b"1-0", b"2-0", [[b"c", b"2"]]])
    assert summary["consumers"] == [{"name": b"c", "pending": 2}]
    assert parse_xpending_range([[b"1-0", b"c", 5, 1]]) == [
        {"message_id": b"1-0", "consumer": b"c", "time_since_delivered": 5, "times_delivered": 1}
    ]
    with pytest.raises(ValueError):
        parse_xpending([1, 2])


def test_parse_xinfo() -> None:
    stream = parse_xinfo_stream(
        {b"length": 1, b"first-entry": [b"1-0", [b"a", b"1"]], b"last-entry": None}
    )
    assert stream == {"length": 1, "first-entry": (b"1-0", {b"a": b"1"}), "last-entry": None}
    flat = parse_xinfo_stream([b"length", 0, b"first-entry", None])
    assert flat == {"length": 0, "first-entry": None}
    full = parse_xinfo_stream_full(
        {
            b"entries": [[b"1-0", [b"a", b"1"]]],
            b"groups": [{b"name": b"g", b"consumers": [{b"name": b"c"}]}],
        }
    )
    assert full == {
        "entries": {b"1-0": {b"a": b"1"}},
        "groups": [{"name": b"g", "consumers": [{"name": b"c"}]}],
    }
    assert parse_xinfo_groups([{b"name": b"g"}]) == [{"name": b"g"}]
    assert parse_xinfo_consumers([[b"name", b"c", b"idle", 3]]) == [{"name": b"c", "idle": 3}]
    with pytest.raises(ValueError):
        parse_xinfo_groups(b"x")


# --------------------------------------------- against redis-py on a real server


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer() as srv:
        yield srv


@pytest.fixture
async def r(server: RedisServer) -> AsyncIterator[trio_maint.Redis]:
    async with trio_maint.open_redis(server.url, socket_timeout=2.0) as client:
        await client.execute_command("FLUSHALL")
        yield client


@pytest.mark.trio
async def test_replies_match_redis_py_resp3(server: RedisServer, r: trio_maint.Redis) -> None:
    def redis_py() -> redis.Redis:
        return redis.Redis(*server.address, protocol=3, legacy_responses=False)

    rp = await trio.to_thread.run_sync(redis_py)
    run = r.execute_command
    await run("XADD", "s", "1-0", "a", "1", "b", "2")
    await run("XADD", "s", "2-0", "a", "3")
    await run("XGROUP", "CREATE", "s", "g", "0")
    assert parse_entries(await run("XRANGE", "s", "-", "+")) == rp.xrange("s")
    assert parse_entries(await run("XREVRANGE", "s", "+", "-")) == rp.xrevrange("s")
    assert parse_xread(await run("XREAD", "STREAMS", "s", "0")) == rp.xread({"s": 0})
    assert parse_xread(await run("XREAD", "BLOCK", 10, "STREAMS", "s", "$")) == {}
    read = parse_xread(await run("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"))
    assert read == {b"s": rp.xrange("s")}
    assert parse_xpending(await run("XPENDING", "s", "g")) == rp.xpending("s", "g")
    ranged = parse_xpending_range(await run("XPENDING", "s", "g", "-", "+", 10))
    assert [p["message_id"] for p in ranged] == [
        p["message_id"] for p in rp.xpending_range("s", "g", "-", "+", 10)
    ]
    claimed = parse_entries(await run("XCLAIM", "s", "g", "c2", 0, "2-0"))
    assert claimed == [(b"2-0", {b"a": b"3"})]
    auto = parse_xautoclaim(await run("XAUTOCLAIM", "s", "g", "c", 0, "0"))
    assert list(auto) == rp.xautoclaim("s", "g", "c", 0)
    justid = await run("XAUTOCLAIM", "s", "g", "c", 0, "0", "JUSTID")
    assert parse_xautoclaim_justid(justid) == rp.xautoclaim("s", "g", "c", 0, justid=True)
    assert parse_xinfo_stream(await run("XINFO", "STREAM", "s")) == rp.xinfo_stream("s")
    assert parse_xinfo_groups(await run("XINFO", "GROUPS", "s")) == rp.xinfo_groups("s")
    consumers = parse_xinfo_consumers(await run("XINFO", "CONSUMERS", "s", "g"))
    assert [c["name"] for c in consumers] == [c["name"] for c in rp.xinfo_consumers("s", "g")]
    full = parse_xinfo_stream_full(await run("XINFO", "STREAM", "s", "FULL"))
    theirs = rp.xinfo_stream("s", full=True)
    assert full["entries"] == theirs["entries"] and full["length"] == theirs["length"]
    assert full["groups"][0]["consumers"][0]["name"] == b"c"
    await trio.to_thread.run_sync(rp.close)


# --------------------------------------------------------------- StreamConsumer


async def _produce(r: trio_maint.Redis, stream: str, count: int) -> list[bytes]:
    return [await r.execute_command("XADD", stream, "*", "n", i) for i in range(count)]


async def _consume(consumer: StreamConsumer, count: int, *, ack: bool = True) -> list[StreamEntry]:
    got: list[StreamEntry] = []
    with trio.fail_after(30):
        async for entry in consumer:
            got.append(entry)
            if ack:
                assert await consumer.ack(entry) == 1
            if len(got) == count:
                break
    return got


@pytest.mark.trio
async def test_consume_and_ack(r: trio_maint.Redis) -> None:
    async with r.stream_consumer("s", "g", "c1", create=True, block=0.2) as consumer:
        ids = await _produce(r, "s", 25)
        got = await _consume(consumer, 25)
        assert [e.id for e in got] == ids
        assert got[3].fields == {b"n": b"3"}
        assert consumer.delivered == consumer.acknowledged == 25
        assert consumer.pending_ids == []
    assert (await r.execute_command("XPENDING", "s", "g"))[0] == 0


@pytest.mark.trio
async def test_pending_entries_are_read_again_first(r: trio_maint.Redis) -> None:
    async with r.stream_consumer("s", "g", "c1", create=True, start_id="0", count=3) as c:
        ids = await _produce(r, "s", 10)
        first = await _consume(c, 4, ack=False)
        assert c.pending_ids == ids[:4]
        await c.ack(first[0])
        assert c.pending_ids == ids[1:4]
    # A new run of the same consumer (after a crash, say): the 3 unacknowledged first.
    async with r.stream_consumer("s", "g", "c1", count=2) as c:
        again = await _consume(c, 9)
        assert [e.id for e in again] == ids[1:]
    assert (await r.execute_command("XPENDING", "s", "g"))[0] == 0


@pytest.mark.trio
async def test_an_existing_group_is_fine_and_a_missing_one_raises(r: trio_maint.Redis) -> None:
    await r.execute_command("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    async with r.stream_consumer("s", "g", "c1", create=True, block=0.1) as c:
        assert await c.read() == []
    async with r.stream_consumer("s", "nogroup", "c1", block=0.1) as c:
        with pytest.raises(ResponseError, match="NOGROUP"):
            await c.read()


@pytest.mark.trio
async def test_read_batches_and_misuse(r: trio_maint.Redis) -> None:
    consumer = r.stream_consumer("s", "g", "c1", create=True, block=0.1, count=4)
    with pytest.raises(RuntimeError, match="async with"):
        await consumer.read()
    async with consumer:
        await _produce(r, "s", 6)
        assert len(await consumer.read()) == 4
        assert await consumer.ack() == 0
    with pytest.raises(ValueError, match="block"):
        r.stream_consumer("s", "g", "c", block=0)
    with pytest.raises(ValueError, match="count"):
        r.stream_consumer("s", "g", "c", count=0)
    with pytest.raises(ValueError, match="retries"):
        r.stream_consumer("s", "g", "c", retries=-1)


@pytest.mark.trio
async def test_the_consumer_with_decode_responses(server: RedisServer) -> None:
    async with trio_maint.open_redis(server.url, decode_responses=True) as r:
        await r.execute_command("DEL", "sd")
        async with r.stream_consumer("sd", "g", "c1", create=True, block=0.1) as c:
            ids = [await r.execute_command("XADD", "sd", "*", "k", "v") for _ in range(3)]
            got = await _consume(c, 3, ack=False)
            assert [e.id for e in got] == ids and got[0].fields == {"k": "v"}
            assert c.pending_ids == [i.encode() for i in ids]
            assert await c.ack(*ids) == 3
            assert c.pending_ids == []


@pytest.mark.trio
async def test_a_read_cancelled_after_the_server_answered_is_read_again(
    r: trio_maint.Redis,
) -> None:
    # Found by an adversarial review: the server delivered entries to the consumer (now
    # pending) and the cancel landed before they reached it; the same open consumer went
    # on reading only new entries, leaving those pending until it was entered again.
    async with r.stream_consumer("s", "g", "c1", create=True, block=0.2) as c:
        ids = await _produce(r, "s", 2)
        real = c.client.execute_command

        async def answered_then_cancelled(*args: Any, **kwargs: Any) -> Any:
            reply = await real(*args, **kwargs)
            if args[-1] == ">":
                await trio.sleep_forever()  # the cancel lands after the server answered
            return reply

        c.client.execute_command = answered_then_cancelled  # type: ignore[method-assign]
        with trio.move_on_after(1) as scope:
            await c.read()
        assert scope.cancelled_caught
        del c.client.execute_command  # the class's method again
        assert (await r.execute_command("XPENDING", "s", "g"))[0] == 2
        got = await _consume(c, 2)
        assert [e.id for e in got] == ids
    assert (await r.execute_command("XPENDING", "s", "g"))[0] == 0
