"""The simulator's counting fast paths (``trio_maint.testing._counting``), sans-IO: what
they count agrees with the frame scanner, and whatever they cannot prove is left to it."""

from __future__ import annotations

from typing import Any

import hiredis
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_maint.testing import RespScanner
from trio_maint.testing._counting import ReplyCounter, RequestCounter

SPECIAL = (b"hello", b"client", b"subscribe")


def _pack(command: tuple[Any, ...]) -> bytes:
    return bytes(hiredis.pack_command(command))


_arg = st.binary(max_size=40) | st.sampled_from([b"*2\r\n", b"$3\r\n", b"+\r\n", b"\r\n"])
_name = st.sampled_from([b"GET", b"SET", b"ping", b"HELLO", b"Client", b"subscribe", b"DEL"])
_command = st.tuples(_name, st.lists(_arg, max_size=4)).map(lambda t: (t[0], *t[1]))


def _ordinary(command: tuple[bytes, ...]) -> bool:
    return command[0].lower() not in SPECIAL


@settings(max_examples=300, deadline=None)
@given(
    groups=st.lists(
        st.tuples(st.lists(_command, max_size=6), _command, st.integers(0, 200)), max_size=6
    )
)
def test_requests_counted_up_to_the_first_special_or_cut_command(
    groups: list[tuple[list[tuple[bytes, ...]], tuple[bytes, ...], int]],
) -> None:
    """Each chunk starts at a command boundary (as the proxy calls it) and holds whole
    commands, then possibly the start of one more: what is taken is exactly the leading
    ordinary whole commands, and the counter starts clean after any of them."""
    counter = RequestCounter(SPECIAL)
    for whole, cut, cut_at in groups:
        packed = [_pack(c) for c in whole]
        tail = _pack(cut)
        tail = tail[: min(cut_at, len(tail) - 1)]
        chunk = b"".join(packed) + tail
        if not chunk:
            continue
        expected_count = 0
        expected_taken = 0
        for command, encoded in zip(whole, packed, strict=True):
            if not _ordinary(command):
                break
            expected_count += 1
            expected_taken += len(encoded)
        assert counter.take(chunk) == (expected_taken, expected_count)


def test_a_chunk_that_ends_inside_an_aggregate_is_not_taken_whole() -> None:
    """hiredis keeps no unparsed byte after an aggregate's header; the probe frame shows the
    aggregate is still open."""
    counter = RequestCounter(SPECIAL)
    get = _pack((b"GET", b"k"))
    assert counter.take(get + b"*2\r\n$3\r\nGET\r\n") == (len(get), 1)
    assert counter.take(get + b"*2\r\n") == (len(get), 1)
    # The next chunk starts at a boundary again, with a clean reader.
    assert counter.take(get * 3) == (3 * len(get), 3)


def test_requests_the_server_would_treat_apart_are_left_to_the_scanner() -> None:
    counter = RequestCounter(SPECIAL)
    assert counter.take(b"*0\r\n") == (0, 0)  # redis-server owes no reply for it
    assert counter.take(b"*-1\r\n") == (0, 0)
    assert counter.take(b"*1\r\n:5\r\n") == (0, 0)  # not a name
    assert counter.take(b"PING\r\n") == (0, 0)  # inline command: hiredis refuses it
    get = _pack((b"GET", b"k"))
    assert counter.take(get + _pack((b"HELLO", b"3")) + get) == (len(get), 1)
    assert counter.take(get) == (len(get), 1)


_scalar = st.one_of(
    st.binary(max_size=30).map(lambda b: b"$%d\r\n%s\r\n" % (len(b), b)),
    st.sampled_from(
        [b"+OK\r\n", b"-ERR x\r\n", b":12\r\n", b"$-1\r\n", b"_\r\n", b",1.5\r\n", b"#t\r\n"]
    ),
    st.just(b"(123456789012345678901234567890\r\n"),
)
_aggregate = st.sampled_from(
    [
        b"*1\r\n:1\r\n",
        b">2\r\n+a\r\n+b\r\n",
        b"%1\r\n+a\r\n+b\r\n",
        b"~0\r\n",
        b"|1\r\n+a\r\n+b\r\n",
    ]
)


@settings(max_examples=300, deadline=None)
@given(frames=st.lists(_scalar | _aggregate, min_size=1, max_size=12), data=st.data())
def test_replies_counted_only_when_the_scanner_agrees(
    frames: list[bytes], data: st.DataObject
) -> None:
    """Fed a chunk from a frame boundary, the reply counter gives either ``-1`` or the
    number of frames the scanner finds, and only when the chunk ends at a boundary."""
    stream = b"".join(frames)
    cut = data.draw(st.integers(1, len(stream)))
    chunk = stream[:cut]
    scanner = RespScanner()
    ends = scanner.feed(chunk)
    count = ReplyCounter().count(chunk)
    if count >= 0:
        assert scanner.at_boundary
        assert count == len(ends)
    if any(kind in chunk for kind in (b"*", b">", b"%", b"~", b"|")):
        assert count == -1


def test_reply_counter_starts_clean_after_a_cut_frame() -> None:
    counter = ReplyCounter()
    assert counter.count(b"+OK\r\n$3\r\nxx") == -1
    # The scanner took that chunk and the rest of the frame; the next chunk is fresh.
    assert counter.count(b"$3\r\nxxx\r\n:1\r\n") == 2
    assert counter.count(b"$3\r\nx*x\r\n") == -1  # an aggregate type byte, even in a string
    assert counter.count(b"!5\r\nerror\r\n") == -1  # a type hiredis refuses
    assert counter.count(b"+OK\r\n") == 1


@pytest.mark.parametrize(
    "chunk", [b":0\r\n", b"#f\r\n", b",0\r\n", b"(0\r\n", b":0\r\n+OK\r\n:0\r\n"]
)
def test_replies_equal_to_false_are_counted(chunk: bytes) -> None:
    """Regression: ``iter(gets, False)`` stopped at a reply equal to ``False`` (``:0``, a
    ``DEL`` of missing keys, ``#f``, ``,0``), so the proxy believed a reply still owed and
    ``migrate``'s switch waited its whole bound (5 s) with the connection's commands held."""
    assert ReplyCounter().count(chunk) == len(RespScanner().feed(chunk))
    assert RequestCounter(()).take(b"*1\r\n$4\r\nPING\r\n" * 2) == (28, 2)
