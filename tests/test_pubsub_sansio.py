"""The sans-IO side of pub/sub (trio_maint/_sansio/pubsub.py): matching answers to the
commands sent, slot grouping, frames to messages. Plain calls, no I/O."""

from __future__ import annotations

import hiredis
import pytest

from trio_maint import NoPermissionError, ResponseError, key_slot
from trio_maint._sansio.pubsub import AckQueue, Message, slot_groups, to_message

A, B = object(), object()  # two connections


def test_confirmations_complete_a_command_name_by_name() -> None:
    acks = AckQueue()
    ack = acks.expect(A, "SUBSCRIBE", ["a", b"b", "a"])  # a name twice: two answers
    assert acks.confirmation(A, "subscribe", b"a") is None
    assert acks.confirmation(A, "subscribe", "b") is None  # decode_responses: str
    assert acks.confirmation(B, "subscribe", b"a") is None  # another connection's
    assert acks.confirmation(A, "psubscribe", b"a") is None  # another kind
    assert not ack.done
    assert acks.confirmation(A, "subscribe", b"a") is ack
    assert (ack.done, ack.error, len(acks)) == (True, None, 0)


def test_error_reply_answers_the_oldest_pending_command() -> None:
    acks = AckQueue()
    first = acks.expect(A, "SUNSUBSCRIBE", ["x"])
    second = acks.expect(A, "SUBSCRIBE", ["y"])
    other = acks.expect(B, "SUBSCRIBE", ["z"])
    error = ResponseError("CROSSSLOT Keys in request don't hash to the same slot")
    assert acks.error_reply(A, error) is first and first.error is error
    assert acks.confirmation(A, "subscribe", b"y") is second and second.error is None
    assert acks.error_reply(A, error) is None  # nothing pending there any more
    assert list(acks) == [other]


def test_unexpected_confirmation_changes_nothing() -> None:
    """A cluster node's own ``sunsubscribe`` (its slot moved) is nobody's answer."""
    acks = AckQueue()
    ack = acks.expect(A, "SSUBSCRIBE", ["s"])
    assert acks.confirmation(A, "sunsubscribe", b"s") is None
    assert list(acks) == [ack]


def test_no_argument_unsubscribe_and_ping() -> None:
    acks = AckQueue()
    unsub = acks.expect(A, "PUNSUBSCRIBE", [])  # nothing subscribed: one null answer
    ping = acks.expect(A, "PING", [])
    assert acks.plain_reply(A) is None  # PONG cannot come before the unsubscribe's answer
    assert acks.confirmation(A, "punsubscribe", None) is unsub
    assert acks.plain_reply(A) is ping


def test_fail_resolves_a_connections_commands() -> None:
    acks = AckQueue()
    a1, b1, a2 = (acks.expect(c, "SUBSCRIBE", ["n"]) for c in (A, B, A))
    gone = ConnectionError("lost")
    assert acks.fail(A, gone) == [a1, a2]
    assert a1.error is gone and a2.done and not b1.done
    assert acks.fail(None, gone) == [b1]


def test_refused_names_spare_those_asked_for_again() -> None:
    acks = AckQueue()
    first = acks.expect(A, "SUBSCRIBE", ["a", "b"])
    first.added = frozenset({"a", "b"})
    again = acks.expect(A, "SUBSCRIBE", ["b"])
    again.added = frozenset({"b"})  # recorded before the first was refused
    assert acks.error_reply(A, NoPermissionError("NOPERM")) is first
    assert acks.refused_names(first) == {"a"}


def test_withdraw() -> None:
    acks = AckQueue()
    ack = acks.expect(A, "SUBSCRIBE", ["a"])
    acks.withdraw(ack)
    acks.withdraw(ack)  # twice is fine
    assert len(acks) == 0


def test_unknown_command_is_refused() -> None:
    with pytest.raises(KeyError):
        AckQueue().expect(A, "GET", ["k"])


def test_slot_groups_keep_order_and_hash_tags_together() -> None:
    channels = ["{t}.1", "solo", "{t}.2", b"{t}.3"]
    assert slot_groups(channels) == [["{t}.1", "{t}.2", b"{t}.3"], ["solo"]]
    assert key_slot("{t}.1") != key_slot("solo")
    assert slot_groups([]) == []


def test_frames_to_messages() -> None:
    reader = hiredis.Reader()
    reader.feed(b">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nd\r\n")
    reader.feed(b">4\r\n$8\r\npmessage\r\n$2\r\nc*\r\n$2\r\nc1\r\n$1\r\nd\r\n")
    reader.feed(b">3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n")
    reader.feed(b">2\r\n$10\r\ninvalidate\r\n*0\r\n")
    frames = [reader.gets() for _ in range(4)]
    assert [to_message(f) for f in frames] == [
        Message("message", b"c", b"d"),
        Message("pmessage", b"c1", b"d", b"c*"),
        Message("subscribe", b"c", 1),
        None,  # not pub/sub: for the push handler
    ]
    assert to_message(b"PONG") == Message("pong", None, b"PONG")
