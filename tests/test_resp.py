"""The sans-IO RESP layer: encoding, parsing every RESP3 type, chunked feeding."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_maint import DataError, ProtocolError, ResponseError, WrongTypeError
from trio_maint._sansio.resp import (
    NEED_DATA,
    PushNotification,
    RespParser,
    encode_command,
    encode_commands,
    is_push,
)


def test_encode_command_types() -> None:
    assert encode_command(("SET", b"k", 1, 1.5)) == (
        b"*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\n1\r\n$3\r\n1.5\r\n"
    )
    assert encode_command(("ECHO", "é")) == b"*2\r\n$4\r\nECHO\r\n$2\r\n\xc3\xa9\r\n"
    assert encode_command(("ECHO", memoryview(b"ab"))) == b"*2\r\n$4\r\nECHO\r\n$2\r\nab\r\n"


@pytest.mark.parametrize("bad", [None, True, [1], {"a": 1}, object(), bytearray(b"x")])
def test_encode_rejects_other_types_naming_the_argument(bad: Any) -> None:
    with pytest.raises(DataError, match=r"argument 2") as info:
        encode_command(("SET", "k", bad))
    assert type(bad).__name__ in str(info.value)


def test_encode_commands_is_the_commands_encoded_one_after_another() -> None:
    commands = [("GET", "k"), ("SET", b"k", 1, 1.5), ("ECHO", memoryview(b"ab"))]
    assert encode_commands(commands) == b"".join(encode_command(c) for c in commands)
    assert encode_commands([]) == b""


@pytest.mark.parametrize("bad", [None, True, "bad\udcff"])
def test_encode_commands_names_the_first_command_that_does_not_encode(bad: Any) -> None:
    # The batch (one pass in C) fails as a whole; the DataError is the failing command's
    # own, as encode_command's, without hiredis's error (which holds the value) attached.
    commands: list[Any] = [("GET", "k"), ("SETEX", "k", 10, bad), ("SET", "k", None)]
    with pytest.raises(DataError, match=r"argument 3 of SETEX") as info:
        encode_commands(commands)
    assert info.value.__cause__ is None and info.value.__context__ is None


def parse_all(data: bytes, encoding: str | None = None) -> list[Any]:
    parser = RespParser(encoding)
    parser.feed(data)
    out = []
    while (reply := parser.next_reply()) is not NEED_DATA:
        out.append(reply)
    return out


def test_false_is_not_incomplete() -> None:
    assert parse_all(b"#f\r\n#t\r\n") == [False, True]
    parser = RespParser()
    parser.feed(b"#")
    assert parser.next_reply() is NEED_DATA


def test_error_replies_are_values_of_the_right_class() -> None:
    [err, nested] = parse_all(b"-WRONGTYPE Operation\r\n*2\r\n:1\r\n-ERR inner\r\n")
    assert isinstance(err, WrongTypeError)
    assert err.code == "WRONGTYPE"
    assert nested[0] == 1
    assert isinstance(nested[1], ResponseError)


def test_push_frames_are_marked() -> None:
    [push, arr] = parse_all(b">2\r\n+a\r\n:1\r\n*2\r\n+a\r\n:1\r\n")
    assert is_push(push)
    assert isinstance(push, PushNotification)
    assert not is_push(arr)
    assert push == arr == [b"a", 1]


def test_protocol_error_breaks_parser_for_good() -> None:
    parser = RespParser()
    parser.feed(b"?bad\r\n")
    with pytest.raises(ProtocolError):
        parser.next_reply()
    assert parser.broken
    parser.feed(b"+OK\r\n")
    with pytest.raises(ProtocolError):
        parser.next_reply()


def test_unhashable_map_key_is_a_protocol_error() -> None:
    parser = RespParser()
    parser.feed(b"%1\r\n*1\r\n:1\r\n:2\r\n")
    with pytest.raises(ProtocolError):
        parser.next_reply()
    assert parser.broken


def test_decode_error_skips_one_reply_only() -> None:
    parser = RespParser("utf-8")
    parser.feed(b"$2\r\n\xff\xfe\r\n+NEXT\r\n")
    with pytest.raises(UnicodeDecodeError):
        parser.next_reply()
    assert parser.next_reply() == "NEXT"


# --------------------------------------------------------------- property test


def _blob(b: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(b), b)


simple_text = st.binary(max_size=20).filter(lambda b: b"\r" not in b and b"\n" not in b)

leaves = st.one_of(
    st.binary(max_size=40).map(lambda b: (_blob(b), b)),
    simple_text.map(lambda b: (b"+" + b + b"\r\n", b)),
    st.integers(-(2**63), 2**63 - 1).map(lambda i: (b":%d\r\n" % i, i)),
    st.floats(allow_nan=False).map(lambda f: (b"," + repr(f).encode() + b"\r\n", f)),
    st.sampled_from([(b",inf\r\n", math.inf), (b",-inf\r\n", -math.inf)]),
    st.just((b"_\r\n", None)),
    st.just((b"$-1\r\n", None)),
    st.booleans().map(lambda v: (b"#t\r\n" if v else b"#f\r\n", v)),
    st.integers(min_value=10**20, max_value=10**40).map(
        lambda i: (b"(%d\r\n" % i, str(i).encode())
    ),
    simple_text.map(lambda b: (b"=%d\r\ntxt:%s\r\n" % (len(b) + 4, b), b)),
    simple_text.map(lambda b: (b"-ERR " + b + b"\r\n", ("error", b"ERR " + b))),
)


def _aggregates(children: Any) -> Any:
    arrays = st.lists(children, max_size=5).map(
        lambda items: (
            b"*%d\r\n" % len(items) + b"".join(w for w, _ in items),
            [v for _, v in items],
        )
    )
    sets = st.lists(children, max_size=5).map(
        lambda items: (
            b"~%d\r\n" % len(items) + b"".join(w for w, _ in items),
            [v for _, v in items],
        )
    )
    maps = st.dictionaries(st.binary(max_size=8), children, max_size=4).map(
        lambda d: (
            b"%%%d\r\n" % len(d) + b"".join(_blob(k) + w for k, (w, _) in d.items()),
            {k: v for k, (_, v) in d.items()},
        )
    )
    pushes = st.lists(children, min_size=1, max_size=4).map(
        lambda items: (
            b">%d\r\n" % len(items) + b"".join(w for w, _ in items),
            ("push", [v for _, v in items]),
        )
    )
    return st.one_of(arrays, sets, maps, pushes)


values = st.recursive(leaves, _aggregates, max_leaves=25)


def normalise(value: Any) -> Any:
    if isinstance(value, ResponseError):
        return ("error", str(value).encode("utf-8", "surrogateescape"))
    if isinstance(value, PushNotification):
        return ("push", [normalise(v) for v in value])
    if isinstance(value, list):
        return [normalise(v) for v in value]
    if isinstance(value, dict):
        return {k: normalise(v) for k, v in value.items()}
    return value


def expected_norm(value: Any) -> Any:
    if isinstance(value, tuple) and value[0] == "error":
        # hiredis decodes error text as UTF-8 with "replace".
        return ("error", value[1].decode("utf-8", "replace").encode("utf-8", "surrogateescape"))
    if isinstance(value, tuple) and value[0] == "push":
        return ("push", [expected_norm(v) for v in value[1]])
    if isinstance(value, list):
        return [expected_norm(v) for v in value]
    if isinstance(value, dict):
        return {k: expected_norm(v) for k, v in value.items()}
    return value


@settings(max_examples=300, deadline=None)
@given(st.lists(values, min_size=1, max_size=5), st.data())
def test_chunked_feed_parses_like_whole_feed(frames: list[Any], data: st.DataObject) -> None:
    wire = b"".join(w for w, _ in frames)
    whole = [normalise(v) for v in parse_all(wire)]
    assert whole == [expected_norm(v) for _, v in frames]
    cuts = sorted(data.draw(st.sets(st.integers(0, len(wire)), max_size=12)))
    parser = RespParser()
    got: list[Any] = []
    last = 0
    for cut in [*cuts, len(wire)]:
        parser.feed(wire[last:cut])
        last = cut
        while (reply := parser.next_reply()) is not NEED_DATA:
            got.append(normalise(reply))
    assert got == whole


def test_nan_double() -> None:
    [value] = parse_all(b",nan\r\n")
    assert math.isnan(value)


def test_attribute_at_a_frame_boundary_is_rejected() -> None:
    parser = RespParser()
    parser.feed(b"+OK\r\n")
    assert parser.next_reply() == b"OK"
    with pytest.raises(ProtocolError, match="attribute"):
        parser.feed(b"|1\r\n+ttl\r\n:3600\r\n+OK\r\n")
    assert parser.broken


def test_bar_after_a_consumed_type_byte_is_data() -> None:
    parser = RespParser()
    parser.feed(b"+")
    assert parser.next_reply() is NEED_DATA  # hiredis has consumed the '+'
    parser.feed(b"|ab\r\n")
    assert parser.next_reply() == b"|ab"
    parser.feed(b"$3\r\n")
    parser.feed(b"|xy\r\n")
    assert parser.next_reply() == b"|xy"


# ------------------------------------------------------- the batch path (pipelines)


def test_take_replies_stops_at_the_limit_and_leaves_the_rest() -> None:
    parser = RespParser()
    parser.feed(b"+a\r\n:1\r\n$1\r\nb\r\n+c")
    out: list[Any] = [b"earlier"]
    assert parser.take_replies(out, 2) is False
    assert out == [b"earlier", b"a", 1]
    assert parser.take_replies(out, 10) is False
    assert out == [b"earlier", b"a", 1, b"b"]  # "+c" is incomplete: left buffered
    parser.feed(b"\r\n")
    assert parser.next_reply() == b"c"
    assert parser.take_replies(out, 0) is False
    assert parser.take_replies(out, -1) is False
    assert len(out) == 4


def test_take_replies_says_when_push_frames_may_be_among_them() -> None:
    parser = RespParser()
    parser.feed(b"+a\r\n")
    out: list[Any] = []
    assert parser.take_replies(out, 5) is False
    parser.feed(b">2\r\n+invalidate\r\n*0\r\n+b\r\n>1\r\n+x")
    assert parser.take_replies(out, 5) is True
    assert [type(v) for v in out] == [bytes, PushNotification, bytes]
    parser.pushes_taken(1)
    # The second push frame is incomplete: its '>' is still owed.
    assert parser.take_replies(out, 5) is True
    parser.feed(b"\r\n+c\r\n")
    assert parser.take_replies(out, 5) is True
    assert type(out[3]) is PushNotification and out[4] == b"c"
    parser.pushes_taken(1)
    parser.feed(b"+d\r\n")
    assert parser.take_replies(out, 5) is False  # every '>' is accounted for again
    # A '>' inside a value counts too, and is never taken back (conservative).
    parser.feed(b"$3\r\na>b\r\n")
    assert parser.take_replies(out, 5) is True
    parser.feed(b"+e\r\n")
    assert parser.take_replies(out, 5) is True


def test_take_replies_puts_a_data_error_in_place_of_an_undecodable_reply() -> None:
    parser = RespParser("utf-8")
    parser.feed(b"+one\r\n$2\r\n\xff\xfe\r\n+two\r\n+three\r\n")
    out: list[Any] = []
    assert parser.take_replies(out, 3) is False
    assert out[0] == "one" and out[2] == "two"
    assert isinstance(out[1], DataError)
    assert parser.take_replies(out, 3) is False
    assert out[3:] == ["three"]


def test_take_replies_keeps_what_came_before_a_malformed_frame() -> None:
    parser = RespParser()
    parser.feed(b"+a\r\n:2\r\n?bad\r\n+b\r\n")
    out: list[Any] = []
    with pytest.raises(ProtocolError):
        parser.take_replies(out, 10)
    assert out == [b"a", 2]
    assert parser.broken
    with pytest.raises(ProtocolError):
        parser.take_replies(out, 10)


@settings(max_examples=200, deadline=None)
@given(st.lists(values, min_size=1, max_size=8), st.data())
def test_take_replies_parses_like_next_reply(frames: list[Any], data: st.DataObject) -> None:
    wire = b"".join(w for w, _ in frames)
    whole = [normalise(v) for v in parse_all(wire)]
    cuts = sorted(data.draw(st.sets(st.integers(0, len(wire)), max_size=12)))
    parser = RespParser()
    got: list[Any] = []
    last = 0
    for cut in [*cuts, len(wire)]:
        parser.feed(wire[last:cut])
        last = cut
        while True:
            before = len(got)
            parser.take_replies(got, data.draw(st.integers(1, 4)))
            if len(got) == before:
                break
    assert [normalise(v) for v in got] == whole


def test_a_big_chunk_holding_a_gt_byte_keeps_types_looked_at() -> None:
    parser = RespParser()
    big = b"$5000\r\n" + b"x" * 5000 + b"\r\n"
    parser.feed(big + b">1\r\n+ping\r\n")
    out: list[Any] = []
    assert parser.take_replies(out, 5) is True
    assert type(out[1]) is PushNotification
    parser.pushes_taken(1)
    # Not counted byte by byte (too slow for big values): an upper bound stays owed.
    assert parser.push_credit > 0
    parser.feed(b"+a\r\n")
    assert parser.take_replies(out, 5) is True
