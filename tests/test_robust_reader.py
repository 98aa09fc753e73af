"""Reader fuzzing: random RESP3 streams through a real :class:`Connection`.

A fake server on a socket pair answers the handshake and then plays a generated script:
replies of every RESP3 type, interleaved push frames (maintenance notifications valid and
malformed, unknown names, pub/sub messages), sometimes one fatal item (bytes that are not
RESP, negative or huge counts, a truncated frame), delivered in chunks cut at random
places or at every byte. The client runs commands and pipelines against it, with the
maintenance handler as push handler.

Properties: no crash and no hang; every command before the fatal item gets exactly its
own reply; the command that meets the fatal item gets a clear RedisError and the
connection is broken; each malformed maintenance frame read is accounted for by the
rate-limited WARNING (written, or counted as held back), and nothing else warns.
"""

from __future__ import annotations

import itertools
import math
import random
import socket
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

import trio_maint
from trio_maint import ClientOptions, MaintConfig, RedisError, ResponseError
from trio_maint._maint.handler import MaintenanceHandler
from trio_maint._sansio.notifications import MAINTENANCE_PUSH_NAMES, Malformed, parse_notification
from trio_maint.lowlevel import Connection
from trio_maint.testing import (
    failed_over_frame,
    failing_over_frame,
    migrated_frame,
    migrating_frame,
    moving_frame,
    smigrated_frame,
    smigrating_frame,
)

from ._robust import ROBUST, WarningCounter

HELLO_REPLY = b"%2\r\n$6\r\nserver\r\n$5\r\nredis\r\n$5\r\nproto\r\n:3\r\n"
OK = b"+OK\r\n"
ERROR = object()  # marks an expected error reply in the model

# --------------------------------------------------------------------------- values


def _bulk(data: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(data), data)


safe_text = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=12).map(str.encode)
binaries = st.binary(max_size=24)


def _scalar() -> st.SearchStrategy[tuple[bytes, Any]]:
    return st.one_of(
        st.integers(-(2**63), 2**63 - 1).map(lambda i: (b":%d\r\n" % i, i)),
        binaries.map(lambda b: (_bulk(b), b)),
        safe_text.map(lambda b: (b"+" + b + b"\r\n", b)),
        st.sampled_from([b"_\r\n", b"$-1\r\n", b"*-1\r\n"]).map(lambda b: (b, None)),
        st.booleans().map(lambda v: (b"#t\r\n" if v else b"#f\r\n", v)),
        st.floats(allow_nan=False).map(
            lambda f: (b",%s\r\n" % (repr(f) if math.isfinite(f) else str(f)).encode(), f)
        ),
        st.integers(2**64, 2**200).map(lambda i: (b"(%d\r\n" % i, str(i).encode())),
        safe_text.map(lambda b: (b"=%d\r\ntxt:%s\r\n" % (len(b) + 4, b), b)),
        safe_text.map(lambda b: (b"-ERR " + b + b"\r\n", (ERROR, b"ERR " + b))),
    )


def _aggregate(
    children: st.SearchStrategy[tuple[bytes, Any]],
) -> st.SearchStrategy[tuple[bytes, Any]]:
    def array(items: list[tuple[bytes, Any]], kind: bytes) -> tuple[bytes, Any]:
        return (
            kind + b"%d\r\n" % len(items) + b"".join(i[0] for i in items),
            [i[1] for i in items],
        )

    def mapping(items: dict[int, tuple[bytes, Any]]) -> tuple[bytes, Any]:
        data = b"%%%d\r\n" % len(items)
        for key, (raw, _) in items.items():
            data += b":%d\r\n" % key + raw
        return data, {k: v[1] for k, v in items.items()}

    return st.one_of(
        st.lists(children, max_size=4).map(lambda xs: array(xs, b"*")),
        st.lists(children, max_size=4).map(lambda xs: array(xs, b"~")),
        st.dictionaries(st.integers(-5, 5), children, max_size=3).map(mapping),
    )


#: ``(wire bytes, expected value)`` of a valid reply.
replies = st.recursive(_scalar(), _aggregate, max_leaves=8)

# ---------------------------------------------------------------------- push frames

_any_element = st.one_of(
    st.integers(-(2**63), 2**63 - 1).map(lambda i: b":%d\r\n" % i),
    binaries.map(_bulk),
    st.just(b"_\r\n"),
    st.just(b"*0\r\n"),
    st.just(b"*2\r\n:1\r\n$1\r\nx\r\n"),
    st.just(b"#t\r\n"),
    st.just(b",1.5\r\n"),
)


def _push(name: bytes | None, elements: Sequence[bytes]) -> bytes:
    head = [] if name is None else [_bulk(name)]
    items = head + list(elements)
    return b">%d\r\n" % len(items) + b"".join(items)


_valid_maintenance = st.one_of(
    st.builds(
        moving_frame,
        st.integers(1, 2**31),
        st.integers(0, 30),
        st.sampled_from([None, "127.0.0.1:6390", "localhost:7000"]),
    ),
    st.builds(migrating_frame, st.integers(1, 2**31)),
    st.builds(migrated_frame, st.integers(1, 2**31)),
    st.builds(failing_over_frame, st.integers(1, 2**31)),
    st.builds(failed_over_frame, st.integers(1, 2**31)),
    st.builds(smigrating_frame, st.integers(1, 2**31), st.just("0-100")),
    st.builds(
        smigrated_frame,
        st.integers(1, 2**31),
        st.just([("127.0.0.1:1", "127.0.0.1:2", "0-100")]),
    ),
)

#: Push frames: maintenance names with random element lists (wrong types, missing or
#: extra elements), unknown names, pub/sub messages, no name, an empty frame.
push_frames = st.one_of(
    _valid_maintenance,
    st.builds(
        _push,
        st.sampled_from(sorted(MAINTENANCE_PUSH_NAMES)).map(str.encode),
        st.lists(_any_element, max_size=5),
    ),
    st.builds(
        _push,
        st.sampled_from([b"message", b"invalidate", b"FOO", b"moving", b"", b"\xff\xfe"]),
        st.lists(_any_element, max_size=3),
    ),
    st.builds(_push, st.none(), st.lists(_any_element, min_size=1, max_size=3)),
    st.just(b">0\r\n"),
)

#: The stream ends in the middle of a reply (the server closes mid-reply).
TRUNCATE = b""

#: Bytes after which no further reply can be trusted: hiredis fails, or waits for data
#: that only ends with the server's EOF.
fatal_items = st.sampled_from(
    [
        b"?what\r\n",
        b"*-2\r\n",
        b"$-7\r\n",
        b">-5\r\n",
        b"*99999999999999\r\n",
        b"*9999999999999999999999\r\n",
        b":abc\r\n",
        b"+O\rK\r\n",
        b"!5\r\nERR x\r\n",
        b"%1\r\n*1\r\n:1\r\n:2\r\n",  # an unhashable map key
        b"*1000000\r\n:1\r\n",  # a huge count: what follows is swallowed until EOF
        b"$99999999999999\r\n",
        TRUNCATE,
    ]
)


@attrs.frozen
class Command:
    pushes: tuple[bytes, ...]
    reply: tuple[bytes, Any]


@attrs.frozen
class Script:
    groups: tuple[tuple[Command, ...], ...]  # a group of 1 is execute(), more a pipeline
    fatal: bytes | None
    fatal_at: int  # index of the group before whose first reply the fatal item comes

    def wire(self) -> bytes:
        out = [HELLO_REPLY, OK]
        for index, group in enumerate(self.groups):
            for position, command in enumerate(group):
                if index == self.fatal_at and position == 0 and self.fatal is not None:
                    out.append(self.fatal)
                out.extend(command.pushes)
                if index == self.fatal_at and position == 0 and self.fatal == TRUNCATE:
                    reply = command.reply[0]
                    out.append(reply[: len(reply) // 2])
                    return b"".join(out)
                out.append(command.reply[0])
        if self.fatal is not None and self.fatal_at >= len(self.groups):
            out.append(self.fatal)
        return b"".join(out)


commands = st.builds(Command, st.lists(push_frames, max_size=2).map(tuple), replies)


@st.composite
def scripts(draw: st.DrawFn) -> Script:
    groups = draw(st.lists(st.lists(commands, min_size=1, max_size=3).map(tuple), max_size=5))
    fatal = draw(st.none() | fatal_items)
    fatal_at = draw(st.integers(0, len(groups)))
    return Script(tuple(groups), fatal, fatal_at)


@st.composite
def chunked(draw: st.DrawFn) -> tuple[Script, list[bytes]]:
    script = draw(scripts())
    data = script.wire()
    if draw(st.booleans()) and len(data) < 600:
        cuts = list(range(1, len(data)))  # split at every byte
    else:
        cuts = sorted(draw(st.sets(st.integers(1, max(1, len(data) - 1)), max_size=12)))
    bounds = [0, *cuts, len(data)]
    return script, [data[a:b] for a, b in itertools.pairwise(bounds) if b > a]


# --------------------------------------------------------------------------- checking


def matches(value: Any, expected: Any) -> bool:
    if isinstance(expected, tuple) and expected and expected[0] is ERROR:
        return isinstance(value, ResponseError) and str(value) == expected[1].decode()
    if isinstance(expected, list):
        return (
            type(value) is list
            and len(value) == len(expected)
            and all(matches(v, e) for v, e in zip(value, expected, strict=True))
        )
    if isinstance(expected, dict):
        return (
            isinstance(value, dict)
            and value.keys() == expected.keys()
            and all(matches(value[k], e) for k, e in expected.items())
        )
    return type(value) is type(expected) and value == expected


def is_bad_maintenance(frame: bytes) -> bool:
    """Whether the maintenance handler must warn about this push frame (the parser's
    own verdict, tested separately in test_notifications.py)."""
    from trio_maint._sansio.resp import RespParser

    parser = RespParser()
    parser.feed(frame)
    return isinstance(parse_notification(parser.next_reply()), Malformed)


async def serve(
    stream: trio.SocketStream, chunks: list[bytes], connected: trio.Event, handshake: int
) -> None:
    """Play ``chunks`` one at a time, each once the client has read everything before it,
    then half-close; requests are drained meanwhile. The first ``handshake`` bytes (the
    handshake's replies) go first, the rest once ``connected`` is set: as from a server,
    which answers commands only once they are sent (a client fails a dial whose
    handshake is followed by a reply nobody asked for)."""

    async def drain() -> None:
        try:
            while await stream.receive_some(65536):
                pass
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain)
        try:
            sent = 0
            for chunk in chunks:
                if sent < handshake < sent + len(chunk):  # the handshake's end: cut there
                    await stream.send_all(chunk[: handshake - sent])
                    await trio.testing.wait_all_tasks_blocked()
                    chunk = chunk[handshake - sent :]
                    sent = handshake
                if sent >= handshake:
                    await connected.wait()
                await stream.send_all(chunk)
                sent += len(chunk)
                await trio.testing.wait_all_tasks_blocked()
            await stream.send_eof()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


async def play(script: Script, chunks: list[bytes]) -> None:
    options = ClientOptions(host="fake", port=1, socket_timeout=5.0, connect_timeout=5.0)
    handler = MaintenanceHandler(options, MaintConfig(mode="enabled"))
    client_sock, server_sock = trio.socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    server_stream = trio.SocketStream(server_sock)
    conn = Connection(
        options, push_handler=handler.push_handler, handshake_hook=handler.handshake_hook
    )
    got_error: list[tuple[int, BaseException]] = []
    with WarningCounter() as warnings:
        try:
            with trio.fail_after(20):
                async with trio.open_nursery() as nursery:
                    connected = trio.Event()
                    handshake = len(HELLO_REPLY + OK)
                    nursery.start_soon(serve, server_stream, chunks, connected, handshake)
                    await conn.connect(trio.SocketStream(client_sock))
                    connected.set()
                    assert conn.maint_enabled
                    for index, group in enumerate(script.groups):
                        args = [("ECHO", f"{index}:{i}") for i in range(len(group))]
                        try:
                            if len(group) == 1:
                                values = [await conn.execute(args[0])]
                            else:
                                values = await conn.execute_many(args)
                        except RedisError as exc:
                            got_error.append((index, exc))
                            break
                        for value, command in zip(values, group, strict=True):
                            assert matches(value, command.reply[1]), (index, value, command)
                    nursery.cancel_scope.cancel()
        finally:
            conn.close_nowait()
            server_sock.close()
    fatal_at = script.fatal_at if script.fatal is not None else len(script.groups)
    if fatal_at < len(script.groups):
        assert got_error, "the fatal item did not fail its command"
        index, error = got_error[0]
        assert index == fatal_at, (index, error)
        assert conn.broken or conn.closed
    else:
        assert not got_error, got_error
    read_pushes = [p for g in script.groups[:fatal_at] for c in g for p in c.pushes]
    if script.fatal == TRUNCATE and fatal_at < len(script.groups):
        read_pushes += script.groups[fatal_at][0].pushes  # they precede the cut
    bad = sum(is_bad_maintenance(p) for p in read_pushes)
    assert warnings.malformed == bad, [r.getMessage() for r in warnings.records]
    assert all(getattr(r, "event", None) == "notification_malformed" for r in warnings.records)


@ROBUST
@given(chunked())
def test_random_resp3_streams_through_a_connection(case: tuple[Script, list[bytes]]) -> None:
    script, chunks = case
    trio.run(play, script, chunks)


# ------------------------------------------------------------- known reader problems


def _two_replies_after(frame: bytes) -> Script:
    """Two commands; ``frame`` arrives before the first reply and must fail the first."""
    return Script(((Command((), (b":1\r\n", 1)),), (Command((), (b":2\r\n", 2)),)), frame, 0)


def test_null_push_frame_is_not_a_reply() -> None:
    # Was a strict xfail (hiredis returns '>-1' as None): the parser refuses it (issue 13).
    script = _two_replies_after(b">-1\r\n")
    trio.run(play, script, [script.wire()])


def test_attribute_frame_after_other_bytes_is_not_a_reply() -> None:
    # Was a strict xfail (the chunk-start check missed it): every aggregate header after a
    # LF is looked at now, and hiredis says whether it is one (issue 13).
    script = _two_replies_after(b"|1\r\n+ttl\r\n:3600\r\n")
    trio.run(play, script, [script.wire()])


def test_bar_at_the_start_of_a_chunk_is_not_an_attribute() -> None:
    script = Script(((Command((), (b"+|ab\r\n", b"|ab")),),), None, 0)
    head = HELLO_REPLY + OK + b"+"
    trio.run(play, script, [head, b"|ab\r\n"])


# ------------------------------------------- the same, in front of a real redis-server


def _random_push(rng: random.Random, here: str) -> bytes:
    """A push frame drawn from the strategies above (hypothesis' ``example`` is for
    interactive use only, so draw by hand)."""
    seq = rng.randint(1, 2**31)
    choices: list[Callable[[], bytes]] = [
        lambda: moving_frame(seq, rng.randint(0, 30), rng.choice([None, here])),
        lambda: migrating_frame(seq),
        lambda: migrated_frame(seq),
        lambda: smigrating_frame(seq, "0-10"),
        lambda: _push(rng.choice([b"MOVING", b"MIGRATING", b"SMIGRATED", b"FAILED_OVER"]), []),
        lambda: _push(b"MOVING", [_bulk(b"x"), b":1\r\n"]),
        lambda: _push(b"SMIGRATED", [b":1\r\n", b":2\r\n"]),
        lambda: _push(b"invalidate", [b"*1\r\n$1\r\nk\r\n"]),
        lambda: _push(b"whatever", [b":1\r\n"]),
        lambda: b">0\r\n",
        lambda: _push(None, [b":7\r\n"]),
    ]
    return rng.choice(choices)()


@pytest.mark.trio
async def test_injected_frames_between_real_replies(redis_server_process: object) -> None:
    """Push frames (valid, malformed, unknown) injected by the simulator between real
    replies of a real redis-server, at random frame boundaries; then garbage that is
    not RESP. Every reply is the command's own; each malformed maintenance frame is
    accounted for by the rate-limited WARNING; garbage fails exactly one command with a
    RedisError and the pool recovers."""
    from trio_maint import ProtocolError
    from trio_maint.testing import MaintenanceSimulator

    from ._robust import scaled

    rng = random.Random(5)
    rounds = scaled(150, 3000)
    async with MaintenanceSimulator() as sim:
        with trio.fail_after(60 if rounds < 1000 else 600), WarningCounter() as warnings:
            async with trio_maint.open_redis(sim.url, pool_size=1) as r:
                await r.ping()
                bad = 0
                for i in range(rounds):
                    frames = [
                        _random_push(rng, f"127.0.0.1:{sim.port}") for _ in range(rng.randint(0, 3))
                    ]
                    bad += sum(is_bad_maintenance(f) for f in frames)
                    for frame in frames:
                        await sim.inject_raw(frame, after_frames=rng.randint(0, 2))
                    async with r.pipeline(transaction=False) as pipe:
                        for j in range(3):
                            pipe.echo(f"{i}:{j}")
                        assert await pipe.execute() == [f"{i}:{j}".encode() for j in range(3)]
                # Frames still scheduled behind future replies arrive with these.
                for _ in range(3):
                    assert await r.echo("drain") == b"drain"
                assert warnings.malformed == bad, [w.getMessage() for w in warnings.records]
                for garbage in (b"?oops\r\n", b"*-3\r\n", b":x\r\n", b"%1\r\n*0\r\n:1\r\n"):
                    # On an idle connection: the pool's health check discards it.
                    await sim.inject_raw(garbage)
                    assert await r.echo("next") == b"next"
                    # While a command waits for its reply: that command fails.
                    errors: list[BaseException] = []

                    async def victim(errors: list[BaseException] = errors) -> None:
                        try:
                            await r.execute_command("BLPOP", "rr:never", "5")
                        except ProtocolError as exc:
                            errors.append(exc)

                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(victim)
                        await trio.testing.wait_all_tasks_blocked(0.05)
                        await sim.inject_raw(garbage)
                    assert len(errors) == 1
                    assert r.pool.stats().total == 0  # discarded
                    assert await r.echo("next") == b"next"
                assert warnings.malformed == bad
