"""PubSub acknowledgements: a subscribe call waits for the server's answer and raises its
error reply; messages read meanwhile are kept in order; shard channels are subscribed one
slot per ``SSUBSCRIBE``; messages are readable as redis-py's dicts.

A scriptable fake server (tests/_fakeserver.py) answers the pub/sub commands, so each test
decides what the server says and when; a real redis-server checks the same paths once.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest
import trio

import trio_maint
from trio_maint import Message, PubSub
from trio_maint.lowlevel import Connection

from ._fakeserver import (
    Action,
    Err,
    FakeConnection,
    FakeServer,
    Handler,
    open_fake_server,
    push,
    resp,
)

pytestmark = pytest.mark.trio

TIMEOUT = 10.0


async def confirm(conn: FakeConnection, args: list[bytes]) -> bytes:
    """Answer ``(P|S)(UN)SUBSCRIBE name...`` as Redis does: one push frame per name, with
    the connection's subscription count of that kind."""
    kind = args[0].decode().lower()
    base = kind.replace("un", "")
    subscribed: set[bytes] = conn.state.setdefault(base, set())
    frames = b""
    for name in args[1:]:
        if kind.endswith("unsubscribe") and kind.startswith(("un", "pun", "sun")):
            subscribed.discard(name)
        else:
            subscribed.add(name)
        frames += push(kind, name, len(subscribed))
    if len(args) == 1:  # no name: one frame with a null channel
        frames += push(kind, None, len(subscribed))
    return frames


def serve_pubsub(server: FakeServer) -> None:
    """Make ``server`` confirm every subscribe and unsubscribe command."""
    for name in ("SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE"):
        server.on(name, confirm)
        server.on(name.replace("SUB", "UNSUB"), confirm)


@pytest.fixture
async def server() -> AsyncIterator[FakeServer]:
    async with open_fake_server() as srv:
        serve_pubsub(srv)
        yield srv


def subscriber_of(server: FakeServer) -> FakeConnection:
    """The one fake connection that sent a subscribe command."""
    (conn,) = [c for c in server.connections.values() if any(b"SUB" in a[0] for a in c.commands)]
    return conn


def refuse(message: str) -> Handler:
    async def handler(conn: FakeConnection, args: list[bytes]) -> bytes:
        return resp(Err(message))

    return handler


# ------------------------------------------------------------------ errors reach the caller


@pytest.mark.parametrize(
    ("command", "error"),
    [
        ("subscribe", trio_maint.NoPermissionError),
        ("psubscribe", trio_maint.NoPermissionError),
        ("ssubscribe", trio_maint.ResponseError),
    ],
)
async def test_error_reply_to_a_subscribe_reaches_the_caller(
    server: FakeServer, command: str, error: type[Exception]
) -> None:
    """An error reply is raised by the call that sent the command; the refused name is
    not recorded (so never subscribed again), and the PubSub goes on working."""
    server.on(command.upper(), refuse("NOPERM this user has no permissions to access it"))
    async with trio_maint.open_redis(server.url) as r, r.pubsub() as ps:
        with trio.fail_after(TIMEOUT):
            with pytest.raises(error, match="NOPERM"):
                await getattr(ps, command)("denied")
            assert (ps.channels, ps.patterns, ps.shard_channels) == (set(), set(), set())
            server.on(command.upper(), confirm)
            await getattr(ps, command)("allowed")
            message = await ps.get_message(timeout=1)
    assert message == Message(command, b"allowed", 1)


async def test_error_reply_reaches_the_caller_while_another_task_reads(
    server: FakeServer,
) -> None:
    """A reader task blocked in ``get_message`` reads the error reply: it resolves the
    subscribe's acknowledgement (no deadlock) and does not see the error itself."""
    got: list[Message] = []
    errors: list[BaseException] = []

    async def reader(ps: PubSub) -> None:
        try:
            async for message in ps:
                got.append(message)
        except BaseException as exc:
            errors.append(exc)
            raise

    async with trio_maint.open_redis(server.url) as r, r.pubsub() as ps:
        with trio.fail_after(TIMEOUT):
            await ps.subscribe("first")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(reader, ps)
                await trio.testing.wait_all_tasks_blocked()
                server.on("SUBSCRIBE", refuse("NOPERM no"))
                with pytest.raises(trio_maint.NoPermissionError):
                    await ps.subscribe("second")
                server.on("SUBSCRIBE", confirm)
                await ps.subscribe("third")
                while len(got) < 2:
                    await trio.sleep(0.01)
                nursery.cancel_scope.cancel()
    assert [(m.type, m.channel) for m in got] == [("subscribe", b"first"), ("subscribe", b"third")]
    assert errors == [] or all(isinstance(e, trio.Cancelled) for e in errors)
    assert ps.channels == {"first", "third"}


async def test_error_of_a_resubscription_is_logged(
    server: FakeServer, caplog: pytest.LogCaptureFixture
) -> None:
    """After a lost connection, the resubscription's error reply has nobody to be raised
    to: it is logged, and reading goes on."""
    async with (
        trio_maint.open_redis(server.url) as r,
        r.pubsub(ignore_subscribe_messages=True) as ps,
    ):
        with trio.fail_after(TIMEOUT):
            await ps.subscribe("a")
            server.on("SUBSCRIBE", refuse("NOPERM revoked"))
            server.close_all()
            with pytest.raises(trio_maint.ConnectionError):
                await ps.get_message(timeout=1)
            with caplog.at_level(logging.WARNING, logger="trio_maint.pubsub"):
                assert await ps.get_message(timeout=0.3) is None
    assert "NOPERM revoked" in caplog.text


async def test_error_reply_to_an_unsubscribe_is_not_taken_for_a_later_subscribe(
    server: FakeServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Errors are matched in command order: the error of an (unwaited) unsubscribe is
    logged, and the subscribe sent after it still succeeds."""
    server.on("SUNSUBSCRIBE", refuse("CROSSSLOT Keys in request don't hash to the same slot"))
    async with trio_maint.open_redis(server.url) as r, r.pubsub() as ps:
        with trio.fail_after(TIMEOUT), caplog.at_level(logging.WARNING):
            await ps.sunsubscribe("x")
            await ps.subscribe("y")
    assert "CROSSSLOT" in caplog.text


# ------------------------------------------------------------------ waiting and buffering


async def test_messages_read_by_a_subscribe_are_returned_later_in_order(
    server: FakeServer,
) -> None:
    """With nobody reading, the subscribe call reads until its confirmation; the messages
    it read on the way come out of ``get_message`` first, in order, then the rest."""

    async def chatty(conn: FakeConnection, args: list[bytes]) -> bytes:
        if args[1:] == [b"b"]:
            await conn.send(push("message", "a", "m1") + push("message", "a", "m2"))
        return await confirm(conn, args)

    server.on("SUBSCRIBE", chatty)
    async with trio_maint.open_redis(server.url) as r, r.pubsub() as ps:
        with trio.fail_after(TIMEOUT):
            await ps.subscribe("a")
            await ps.subscribe("b")
            await server.push(push("message", "b", "m3"))
            got = [await ps.get_message(timeout=1) for _ in range(5)]
            assert await ps.get_message(timeout=0.05) is None
    assert [(m.type, m.channel, m.data) for m in got if m is not None] == [
        ("subscribe", b"a", 1),
        ("message", b"a", b"m1"),
        ("message", b"a", b"m2"),
        ("subscribe", b"b", 2),
        ("message", b"b", b"m3"),
    ]


async def test_subscribe_waits_for_every_confirmation(server: FakeServer) -> None:
    """The call returns only once each name was confirmed (here the second comes late)."""
    release = trio.Event()

    async def slow_second(conn: FakeConnection, args: list[bytes]) -> bytes | Action:
        await conn.send(push("subscribe", args[1], 1))
        await release.wait()
        await conn.send(push("subscribe", args[2], 2))
        return Action.NO_REPLY

    server.on("SUBSCRIBE", slow_second)
    async with trio_maint.open_redis(server.url) as r, r.pubsub() as ps:
        with trio.fail_after(TIMEOUT):
            async with trio.open_nursery() as nursery:
                done = trio.Event()

                async def subscribe() -> None:
                    await ps.subscribe("one", "two")
                    done.set()

                nursery.start_soon(subscribe)
                await trio.sleep(0.2)
                assert not done.is_set()
                release.set()
                await done.wait()


async def test_subscribe_times_out_and_the_connection_stays_usable(
    server: FakeServer, caplog: pytest.LogCaptureFixture
) -> None:
    """No answer within ``socket_timeout``: TimeoutError; the late answer is still
    matched to that command (here an error, which is logged and forgets the name), and
    the same connection serves the next subscribe."""
    release = trio.Event()

    async def late_refusal(conn: FakeConnection, args: list[bytes]) -> bytes:
        if args[1] == b"late":
            await release.wait()
            return resp(Err("NOPERM too late"))
        return await confirm(conn, args)

    server.on("SUBSCRIBE", late_refusal)
    async with trio_maint.open_redis(server.url, socket_timeout=0.3) as r, r.pubsub() as ps:
        with trio.fail_after(TIMEOUT):
            with pytest.raises(trio_maint.TimeoutError, match="SUBSCRIBE"):
                await ps.subscribe("late")
            conn = ps.connection
            assert conn is not None and conn.usable
            assert ps.channels == {"late"}  # sent: kept until the server says otherwise
            release.set()
            with caplog.at_level(logging.WARNING, logger="trio_maint.pubsub"):
                await ps.subscribe("next")
            assert ps.connection is conn
            assert ps.channels == {"next"}
    assert "NOPERM too late" in caplog.text


async def test_cancelled_subscribe_leaves_the_pubsub_usable(server: FakeServer) -> None:
    """A subscribe cancelled while it waits for its acknowledgement: the command was sent
    (the name stays recorded); its confirmation, read later, is delivered in order, and
    the PubSub keeps working on the same connection."""
    release = trio.Event()

    async def held(conn: FakeConnection, args: list[bytes]) -> bytes:
        if args[1] == b"held":
            await release.wait()
        return await confirm(conn, args)

    server.on("SUBSCRIBE", held)
    async with trio_maint.open_redis(server.url) as r, r.pubsub() as ps:
        with trio.fail_after(TIMEOUT):
            with trio.move_on_after(0.2) as scope:
                await ps.subscribe("held")
            assert scope.cancelled_caught
            conn = ps.connection
            assert conn is not None and conn.usable and ps.channels == {"held"}
            release.set()
            await ps.subscribe("after")
            assert ps.connection is conn
            got = [await ps.get_message(timeout=1) for _ in range(2)]
            await server.push(push("message", "held", "x"))
            message = await ps.get_message(timeout=1)
    assert [(m.type, m.channel) for m in got if m is not None] == [
        ("subscribe", b"held"),
        ("subscribe", b"after"),
    ]
    assert message is not None and message["data"] == b"x"


async def test_cancelled_get_message_while_a_subscribe_reads(server: FakeServer) -> None:
    """A reader waiting while a subscribe call reads, cancelled, loses nothing."""
    release = trio.Event()

    async def held(conn: FakeConnection, args: list[bytes]) -> bytes:
        await release.wait()
        await conn.send(push("message", "early", "e"))
        return await confirm(conn, args)

    server.on("SUBSCRIBE", held)
    async with trio_maint.open_redis(server.url) as r, r.pubsub() as ps:
        with trio.fail_after(TIMEOUT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ps.subscribe, "c")
                await trio.sleep(0.1)  # the subscribe reads, waiting for its confirmation
                with trio.move_on_after(0.05) as scope:
                    await ps.get_message()  # waits for the subscribe's reading
                assert scope.cancelled_caught
                release.set()
            got = [await ps.get_message(timeout=1) for _ in range(2)]
    assert [(m.type, m.data) for m in got if m is not None] == [("message", b"e"), ("subscribe", 1)]


# ------------------------------------------------------------------ slots


async def test_ssubscribe_sends_one_command_per_slot(server: FakeServer) -> None:
    """Channels of one slot (a hash tag) share a command; others get their own, in order
    of first appearance; ``sunsubscribe`` is split the same way."""
    async with trio_maint.open_redis(server.url) as r, r.pubsub() as ps:
        with trio.fail_after(TIMEOUT):
            await ps.ssubscribe("{u1}.a", "solo", "{u1}.b")
            await ps.sunsubscribe()
            await trio.sleep(0.1)
    assert server.seen("SSUBSCRIBE") == [
        (b"SSUBSCRIBE", b"{u1}.a", b"{u1}.b"),
        (b"SSUBSCRIBE", b"solo"),
    ]
    assert {frozenset(args[1:]) for args in server.seen("SUNSUBSCRIBE")} == {
        frozenset({b"{u1}.a", b"{u1}.b"}),
        frozenset({b"solo"}),
    }
    assert len(server.seen("SUNSUBSCRIBE")) == 2


def slot_commands(commands: list[tuple[bytes, ...]]) -> list[set[bytes]]:
    """The channel sets of the ``SSUBSCRIBE`` commands among ``commands``."""
    return [set(c[1:]) for c in commands if c[0] == b"SSUBSCRIBE"]


async def test_resubscribe_after_reconnect_is_one_command_per_slot(server: FakeServer) -> None:
    async with (
        trio_maint.open_redis(server.url) as r,
        r.pubsub(ignore_subscribe_messages=True) as ps,
    ):
        with trio.fail_after(TIMEOUT):
            await ps.ssubscribe("{u1}.a", "{u1}.b", "solo")
            await ps.subscribe("plain")
            server.close_all()
            with pytest.raises(trio_maint.ConnectionError):
                await ps.get_message(timeout=1)
            assert await ps.get_message(timeout=0.2) is None  # reconnects, resubscribes
            conn = subscriber_of(server)
    assert sorted(slot_commands(conn.commands), key=len) == [{b"solo"}, {b"{u1}.a", b"{u1}.b"}]
    assert (b"SUBSCRIBE", b"plain") in conn.commands


async def test_adopted_connection_is_subscribed_one_command_per_slot(server: FakeServer) -> None:
    """``adopt_connection`` (a maintenance handoff) subscribes the new connection per
    slot before the old one is closed; the confirmations arrive on the new one."""
    async with trio_maint.open_redis(server.url) as r, r.pubsub() as ps:
        with trio.fail_after(TIMEOUT):
            await ps.ssubscribe("{u1}.a", "{u1}.b", "solo")
            old = ps.connection
            new = await Connection.open(r.options)
            await ps.adopt_connection(new)
            assert ps.connection is new and old is not None and old.closed
            got = [await ps.get_message(timeout=1) for _ in range(6)]
    confirmations = [(m.type, m.channel) for m in got if m is not None]
    assert confirmations.count(("ssubscribe", b"solo")) == 2  # before and after the move
    new_side = [c for c in server.log if c[1][0] == b"SSUBSCRIBE"][-2:]
    assert sorted((set(args[1:]) for _id, args in new_side), key=len) == [
        {b"solo"},
        {b"{u1}.a", b"{u1}.b"},
    ]


# ------------------------------------------------------------------ messages as dicts


async def test_message_reads_as_a_dict() -> None:
    message = Message("pmessage", b"news.1", b"hi", b"news.*")
    assert (message["type"], message["channel"], message["data"], message["pattern"]) == (
        "pmessage",
        b"news.1",
        b"hi",
        b"news.*",
    )
    assert message.data == b"hi"
    assert dict(message) == {
        "type": "pmessage",
        "channel": b"news.1",
        "data": b"hi",
        "pattern": b"news.*",
    }
    assert message.get("data") == b"hi" and message.get("other", 0) == 0
    assert "data" in message and "other" not in message
    with pytest.raises(KeyError):
        message["other"]


async def test_ping_answer_is_a_pong_message(server: FakeServer) -> None:
    async with trio_maint.open_redis(server.url) as r, r.pubsub() as ps:
        with trio.fail_after(TIMEOUT):
            await ps.subscribe("x")
            await ps.ping()
            got = [await ps.get_message(timeout=1) for _ in range(2)]
    assert [m["type"] for m in got if m is not None] == ["subscribe", "pong"]


# ------------------------------------------------------------------ a real server


async def test_real_server_refusal_and_buffering(r: trio_maint.Redis) -> None:
    """Against redis-server: a channel outside the user's ACL is refused with NOPERM,
    raised by ``subscribe``; messages published before a later subscribe come first."""
    user = "tm-pubsub-acks"
    await r.execute_command(
        "ACL", "SETUSER", user, "reset", "on", ">pw", "resetchannels", "&ok:*", "+@all"
    )
    try:
        async with (
            trio_maint.open_redis(r.options, username=user, password="pw") as limited,
            limited.pubsub(ignore_subscribe_messages=True) as ps,
        ):
            with trio.fail_after(TIMEOUT):
                with pytest.raises(trio_maint.NoPermissionError):
                    await ps.subscribe("ok:1", "denied")
                assert ps.channels == set()
                await ps.subscribe("ok:1")
                assert await r.publish("ok:1", "before") == 1
                await ps.subscribe("ok:2")  # reads (and keeps) "before" on the way
                assert await r.publish("ok:2", "after") == 1
                got = [await ps.get_message(timeout=1) for _ in range(2)]
    finally:
        await r.execute_command("ACL", "DELUSER", user)
    assert [(m["channel"], m["data"]) for m in got if m is not None] == [
        (b"ok:1", b"before"),
        (b"ok:2", b"after"),
    ]


async def test_confirmations_match_with_decode_responses(server: FakeServer) -> None:
    """With ``decode_responses`` the confirmations carry ``str`` names: still matched."""
    async with trio_maint.open_redis(server.url, decode_responses=True) as r, r.pubsub() as ps:
        with trio.fail_after(TIMEOUT):
            await ps.subscribe("grüße", b"raw")
            await ps.ssubscribe("{t}.a", "{t}.b")
            got = [await ps.get_message(timeout=1) for _ in range(4)]
    assert [(m["type"], m["channel"]) for m in got if m is not None] == [
        ("subscribe", "grüße"),
        ("subscribe", "raw"),
        ("ssubscribe", "{t}.a"),
        ("ssubscribe", "{t}.b"),
    ]


async def test_adopt_connection_logs_a_refused_resubscription(
    server: FakeServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The new endpoint refuses a pattern: the refusal is logged, the channel still
    delivers on the new connection, and the old one is closed."""
    async with (
        trio_maint.open_redis(server.url) as r,
        r.pubsub(ignore_subscribe_messages=True) as ps,
    ):
        with trio.fail_after(TIMEOUT):
            await ps.subscribe("a")
            await ps.psubscribe("p*")
            old = ps.connection
            assert old is not None
            server.on("PSUBSCRIBE", refuse("NOPERM not on the new endpoint"))
            new = await Connection.open(r.options)
            with caplog.at_level(logging.WARNING, logger="trio_maint.pubsub"):
                await ps.adopt_connection(new)
                assert ps.connection is new and old.closed
                await server.push(push("message", "a", "on-new"))  # to every connection left
                message = await ps.get_message(timeout=1)
                assert await ps.get_message(timeout=0.1) is None
    assert message is not None and message.data == b"on-new"
    assert "NOPERM not on the new endpoint" in caplog.text
