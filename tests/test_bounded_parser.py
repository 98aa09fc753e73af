"""Bounded parsing, sans-IO (issue 13): the caps of :class:`FrameLimits` applied by
:class:`RespParser` (aggregate headers checked before hiredis sees them, the item hiredis
buffers checked from what it holds, or every byte followed with ``max_reply_bytes``),
push frames that do not decode, and the parser's own cost in memory. Plain calls here;
the hypothesis tests are in ``test_bounded_fuzz.py``."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import hiredis
import pytest

from trio_maint import DataError, ProtocolError
from trio_maint._sansio.headers import find_candidates
from trio_maint._sansio.limits import (
    DEFAULT_MAX_AGGREGATE_LEN,
    DEFAULT_MAX_BULK_LEN,
    MAX_LINE_LEN,
    DeclaredBudget,
    FrameLimits,
    FrameTracker,
    LimitExceeded,
    parse_length,
)
from trio_maint._sansio.resp import NEED_DATA, PushNotification, RespParser


def drain(parser: RespParser, out: list[Any]) -> None:
    """Take every whole reply, as the connection does after each read."""
    while (reply := parser.next_reply()) is not NEED_DATA:
        out.append(reply)


def run(parser: RespParser, chunks: list[bytes]) -> tuple[list[Any], BaseException | None]:
    """Feed ``chunks`` one by one, draining after each; the replies and the error."""
    out: list[Any] = []
    try:
        for chunk in chunks:
            parser.feed(chunk)
            drain(parser, out)
    except ProtocolError as exc:
        return out, exc
    return out, None


def cuts(data: bytes) -> list[list[bytes]]:
    """``data`` whole, and in two at every position."""
    return [[data]] + [[data[:i], data[i:]] for i in range(1, len(data))]


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


SMALL = FrameLimits(max_aggregate_len=2000)


# ----------------------------------------------------------------------- the caps


def test_defaults_are_redis_proto_max_bulk_len_and_2_to_the_24() -> None:
    limits = FrameLimits()
    assert limits.max_bulk_len == DEFAULT_MAX_BULK_LEN == 512 * 1024 * 1024
    assert limits.max_aggregate_len == DEFAULT_MAX_AGGREGATE_LEN == 2**24
    assert limits.max_reply_bytes is None


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("max_bulk_len", 0, ValueError),
        ("max_aggregate_len", -1, ValueError),
        ("max_reply_bytes", 0, ValueError),
        ("max_bulk_len", 1.5, TypeError),
        ("max_aggregate_len", True, TypeError),
    ],
)
def test_caps_are_validated_naming_the_field(field: str, value: Any, error: type) -> None:
    with pytest.raises(error, match=field):
        FrameLimits(**{field: value})


@pytest.mark.parametrize(
    "raw",
    [
        b"0",
        b"1",
        b"-1",
        b"-2",
        b"-0",
        b"01",
        b"+1",
        b"",
        b"-",
        b"1a",
        b" 1",
        b"9223372036854775807",
        b"9223372036854775808",
        b"1" * 19,
        b"1" * 20,
    ],
)
def test_parse_length_refuses_what_hiredis_refuses(raw: bytes) -> None:
    reader = hiredis.Reader()
    reader.feed(b"*" + raw + b"\r\n")
    try:
        reader.gets()
        refused = False
    except hiredis.ProtocolError as exc:
        refused = "Bad multi-bulk length" in str(exc)
    assert (parse_length(raw) is None) == refused, raw


@pytest.mark.parametrize("kind", [b"*", b"~", b"%", b">", b"|"])
def test_an_aggregate_header_over_the_cap_is_refused_before_hiredis_sees_it(kind: bytes) -> None:
    frame = kind + b"2001\r\n"
    for chunks in cuts(b"+a\r\n" + frame + b":1\r\n"):
        parser = RespParser(limits=SMALL)
        got, error = run(parser, chunks)
        assert got == [b"a"]
        assert isinstance(error, ProtocolError)
        assert ("attribute" if kind == b"|" else "max_aggregate_len (2,000)") in str(error)
        assert parser._fed <= 4  # not one byte of the header handed to hiredis
        assert parser.broken


@pytest.mark.parametrize("kind", [b"*", b"~", b">"])
def test_an_aggregate_at_the_cap_is_parsed(kind: bytes) -> None:
    frame = kind + b"2000\r\n" + b":1\r\n" * 2000
    for at in (1, 3, 5, 7, 100):
        parser = RespParser(limits=SMALL)
        got, error = run(parser, [frame[:at], frame[at:]])
        assert error is None and len(got) == 1 and got[0] == [1] * 2000


def test_huge_counts_cost_no_memory_and_no_time() -> None:
    # Before: hiredis allocated (and for '>' copied) 2**31 slots: RSS past 2 GiB.
    before = rss_kib()
    for kind in (b">", b"*", b"~", b"%"):
        parser = RespParser()
        with pytest.raises(ProtocolError, match="2,147,483,647 elements, over max_aggregate_len"):
            parser.feed(kind + b"2147483647\r\n")
        del parser
    assert rss_kib() - before < 20 * 1024


def test_header_like_bytes_inside_values_are_data() -> None:
    tricky = [
        b"\r\n*99999999\r\n",
        b"\n>-1\r\n",
        b"\n|1\r\n+x\r\n",
        b"$2147483647\r\n",
        b"*2147483647",
        b"\n~12345",
        b"\n%9999999999999999999999\r\n",
    ]
    wire = b"".join(b"$%d\r\n%s\r\n" % (len(v), v) for v in tricky)
    wire += b"=%d\r\ntxt:%s\r\n" % (len(tricky[0]) + 4, tricky[0])
    wire += b"+|1\r\n-ERR >-1 *12345\r\n"
    for chunks in cuts(wire):
        got, error = run(RespParser(limits=SMALL), chunks)
        assert error is None, chunks
        assert got[: len(tricky)] == tricky
        assert len(got) == len(tricky) + 3


def test_attribute_and_null_push_frames_are_refused_anywhere() -> None:
    for frame, what in ((b"|1\r\n+ttl\r\n:3600\r\n", "attribute"), (b">-1\r\n", "null push")):
        for chunks in cuts(b"*2\r\n:1\r\n:2\r\n" + frame + b"+OK\r\n"):
            got, error = run(RespParser(), chunks)
            assert got == [[1, 2]] and what in str(error)


def test_nested_aggregates_declared_ahead_of_the_bytes_are_refused() -> None:
    # Each header alone is under the cap; together, with nothing received, they are not.
    nested = b"*1500\r\n" * 3
    for chunks in cuts(b"+a\r\n" + nested):
        parser = RespParser(limits=FrameLimits(max_aggregate_len=4000))
        got, error = run(parser, chunks)
        assert got == [b"a"]
        assert "declared 4,496 elements ahead of the bytes received" in str(error)


def test_nested_aggregates_backed_by_their_bytes_are_parsed() -> None:
    # Two arrays of 3,000 side by side in one reply: never more than 3,001 declared and
    # not received, so never refused, although they declare 6,002 together.
    inner = b"*3000\r\n" + b":7\r\n" * 3000
    wire = b"*2\r\n" + inner + inner
    for at in range(0, len(wire), 997):
        parser = RespParser(limits=FrameLimits(max_aggregate_len=4000))
        got, error = run(parser, [wire[:at], wire[at:]])
        assert error is None and got == [[[7] * 3000, [7] * 3000]]


def test_declared_budget_pays_back_one_element_per_three_bytes() -> None:
    budget = DeclaredBudget(4000)
    assert budget.declare(3000, 100) is None
    assert budget.declare(3000, 103) == 5999  # 3 bytes later: 1 element back
    assert budget.declare(3000, 100 + 3 * 2000) is None  # 2,000 paid back
    budget.reply_done()
    assert not budget.active
    assert budget.declare(4000, 10**6) is None
    assert budget.declare(1, 10**6) == 4001


def test_a_bulk_string_over_the_cap_is_refused_before_128_kib_are_held() -> None:
    limits = FrameLimits(max_bulk_len=1024 * 1024)
    for header in (b"$1048577\r\n", b"=2147483647\r\n", b"$9223372036854775807\r\n"):
        parser = RespParser(limits=limits)
        stream = [b"+a\r\n" + header] + [b"x" * 65536] * 8
        got, error = run(parser, stream)
        assert got == [b"a"]
        assert "over max_bulk_len (1,048,576 bytes" in str(error)
        assert parser._reader.len() < 3 * 65536 + 1024
    # At the cap: parsed.
    value = b"y" * (1024 * 1024)
    wire = b"$1048576\r\n" + value + b"\r\n"
    pieces = [wire[i : i + 65536] for i in range(0, len(wire), 65536)]
    got, error = run(RespParser(limits=limits), pieces)
    assert error is None and got == [value]


def test_the_default_bulk_cap_is_checked_the_same_way() -> None:
    parser = RespParser()
    _, error = run(parser, [b"$536870913\r\n"] + [b"z" * 65536] * 4)
    assert "over max_bulk_len (536,870,912 bytes; the default is Redis's own" in str(error)
    assert parser._reader.len() < 3 * 65536 + 1024


def test_a_line_over_1_mib_is_refused() -> None:
    parser = RespParser()
    got, error = run(parser, [b"+ok\r\n+"] + [b"a" * 65536] * 24)
    assert got == [b"ok"] and "line of more than 1,048,576 bytes" in str(error)
    assert parser._reader.len() <= MAX_LINE_LEN + 2 * 65536


def test_a_big_value_is_skipped_not_looked_at() -> None:
    # A 2 MiB value of bytes that look like headers everywhere: parsed exactly, and the
    # parser follows the bulk string rather than searching its bytes.
    value = (b"\r\n*99999999\r\n>-1\r\n|1\r\n" * 100_000)[: 2 * 1024 * 1024]
    wire = b"$%d\r\n%s\r\n+after\r\n" % (len(value), value)
    parser = RespParser()
    got, error = run(parser, [wire[i : i + 65536] for i in range(0, len(wire), 65536)])
    assert error is None and got == [value, b"after"]


def test_a_huge_read_is_checked_in_pieces() -> None:
    # Bigger than any socket read (a sans-IO caller): a bulk string past the cap cannot
    # hide inside it.
    limits = FrameLimits(max_bulk_len=2 * 1024 * 1024)
    big = b"$%d\r\n%s\r\n" % (3 * 1024 * 1024, b"q" * (3 * 1024 * 1024))
    got, error = run(RespParser(limits=limits), [b"+a\r\n" + big])
    assert got == [b"a"] and "over max_bulk_len" in str(error)


def test_replies_before_the_frame_past_a_cap_come_first() -> None:
    parser = RespParser(limits=SMALL)
    parser.feed(b"+a\r\n:2\r\n*2001\r\n")  # hiredis was not drained: replies queued
    out: list[Any] = []
    with pytest.raises(ProtocolError, match="max_aggregate_len"):
        parser.take_replies(out, 10)
    assert out == [b"a", 2]
    with pytest.raises(ProtocolError):
        parser.take_replies(out, 10)


def test_a_parser_is_freed_by_reference_counting() -> None:
    # No reference cycle: a dropped connection's parser (and what hiredis holds) goes at
    # once, not at the next cyclic collection.
    for encoding in (None, "utf-8"):
        parser = RespParser(encoding, limits=SMALL)
        parser.feed(b"+a\r\n*1500\r\n:1\r\n")  # into the slow path
        ref = weakref.ref(parser)
        gc.disable()
        try:
            del parser
            assert ref() is None
        finally:
            gc.enable()


# ---------------------------------------------------------------- max_reply_bytes


def test_max_reply_bytes_is_exact() -> None:
    limits = FrameLimits(max_reply_bytes=21)
    exact = b"*2\r\n$3\r\nabc\r\n+defgh\r\n"
    assert len(exact) == 21
    for chunks in cuts(exact + exact):
        got, error = run(RespParser(limits=limits), chunks)
        assert error is None and got == [[b"abc", b"defgh"]] * 2
    over = b"*2\r\n$3\r\nabc\r\n+defghi\r\n"
    for chunks in cuts(exact + over):
        parser = RespParser(limits=limits)
        got, error = run(parser, chunks)
        assert got == [[b"abc", b"defgh"]]
        assert "more than max_reply_bytes (21 bytes)" in str(error)
        assert parser._fed <= 42


def test_max_reply_bytes_refuses_a_bulk_string_at_its_header() -> None:
    parser = RespParser(limits=FrameLimits(max_reply_bytes=1000))
    got, error = run(parser, [b"+a\r\n$5000\r\n"])
    assert got == [b"a"] and "max_reply_bytes" in str(error)


def test_tracker_mode_applies_every_cap_exactly() -> None:
    limits = FrameLimits(max_aggregate_len=4000, max_reply_bytes=10**9)
    # Outstanding elements, exactly: 3 x 1,500 nested is over, 2 x 3,000 side by side is not.
    got, error = run(RespParser(limits=limits), [b"*1500\r\n" * 3])
    assert "declared 4,500 elements" in str(error)
    inner = b"*3000\r\n" + b":7\r\n" * 3000
    got, error = run(RespParser(limits=limits), [b"*2\r\n" + inner + inner])
    assert error is None and len(got[0]) == 2
    for frame in (b"|1\r\n+a\r\n:1\r\n", b">-1\r\n", b"*4001\r\n"):
        got, error = run(RespParser(limits=limits), [b"+ok\r\n" + frame])
        assert got == [b"ok"] and isinstance(error, ProtocolError)


def test_frame_tracker_counts_frames_and_outstanding_elements() -> None:
    tracker = FrameTracker(FrameLimits())
    tracker.walk(b"*2\r\n%1\r\n+k\r\n")
    assert tracker.outstanding == 3  # the array's two (the map is not complete), its entry
    tracker.walk(b"$3\r\nabc\r\n:5\r\n>1\r\n_\r\n")
    assert tracker.frames == 2 and tracker.outstanding == 0


def test_frame_tracker_offsets_index_the_data_walked() -> None:
    tracker = FrameTracker(FrameLimits(max_aggregate_len=10))
    tracker.walk(b"+ok\r\n*1")
    with pytest.raises(LimitExceeded) as info:
        tracker.walk(b"1\r\n")
    assert info.value.offset == 0  # the header began in the bytes walked before


def test_find_candidates_finds_every_header_after_a_lf() -> None:
    data = b"+a\r\n*1234\r\n%5\r\n~99999\r\n>-1\r\n|1\r\n>12"
    found = find_candidates(data, 0, 4, True)
    assert [data[i : i + 2] for i in found] == [b"*1", b"~9", b">-", b"|1", b">1"]
    assert find_candidates(b"*1234\r\n", 0, 4, True) == [0]
    assert find_candidates(b"*1234\r\n", 0, 4, False) == []
    binary = bytes(range(256)) * 64 + b"\n*56789\r\n" + bytes(range(256)) * 4 + b"\n~1"
    found = find_candidates(binary, 0, 4, False)
    assert [binary[i : i + 2] for i in found] == [b"*5", b"~1"]


# ------------------------------------------------------------- frames that do not decode


PUSH_BAD = b">2\r\n$10\r\ninvalidate\r\n*1\r\n$2\r\n\xff\xfe\r\n"


def test_a_push_frame_that_does_not_decode_comes_with_bytes() -> None:
    for chunks in cuts(b"+a\r\n" + PUSH_BAD + b"+b\r\n"):
        got, error = run(RespParser("utf-8"), chunks)
        assert error is None
        assert got == ["a", ["invalidate", [b"\xff\xfe"]], "b"]
        assert type(got[1]) is PushNotification


def test_a_reply_that_does_not_decode_is_a_data_error_in_its_place() -> None:
    wire = b"+a\r\n*2\r\n$1\r\nk\r\n$2\r\n\xc3\x28\r\n%1\r\n$1\r\n\xff\r\n:1\r\n+b\r\n"
    for chunks in cuts(wire):
        parser = RespParser("utf-8")
        out: list[Any] = []
        for chunk in chunks:
            parser.feed(chunk)
            parser.take_replies(out, 10)
        assert out[0] == "a" and out[3] == "b"
        assert isinstance(out[1], DataError) and "invalid continuation byte" in str(out[1])
        assert isinstance(out[2], DataError) and "invalid start byte" in str(out[2])
    parser = RespParser("utf-8")
    parser.feed(wire)
    assert parser.next_reply() == "a"
    with pytest.raises(UnicodeDecodeError):
        parser.next_reply()  # as before: the reply is skipped
    with pytest.raises(UnicodeDecodeError):
        parser.next_reply()
    assert parser.next_reply() == "b"


def test_decoding_strings_that_do_decode_is_unchanged() -> None:
    wire = b"*3\r\n$2\r\n\xc3\xa9\r\n+ok\r\n%1\r\n$1\r\nk\r\n$4\r\n\xf0\x9f\x98\x80\r\n"
    got, error = run(RespParser("utf-8"), [wire])
    assert error is None and got == [["é", "ok", {"k": "😀"}]]


def test_a_frame_flagged_while_partial_is_checked_after_a_batch_on_the_fast_path() -> None:
    # Found by test_bounded_fuzz: the slow path handed back to the fast one after a reply
    # that decoded, then a partial frame's undecodable string was flagged; the frame came
    # out later on the fast path with its escaped string.
    for tail in (b"*2\r\n$1\r\n\x80\r\n", b">3\r\n$10\r\ninvalidate\r\n$1\r\n\x80\r\n"):
        chunks = [
            b"$1\r\n\x80\r\n",
            b"$0\r\n\r\n>2\r\n$10\r\ninvalidate\r\n$0\r\n\r\n" + tail,
            b"$0\r\n\r\n",
        ]
        parser = RespParser("utf-8")
        out: list[Any] = []
        for chunk in chunks:
            parser.feed(chunk)
            parser.take_replies(out, 100)
        assert len(out) == 4
        assert isinstance(out[0], DataError) and out[1] == ""
        assert out[2] == ["invalidate", ""]
        if tail.startswith(b"*"):
            assert isinstance(out[3], DataError)
        else:
            assert out[3] == ["invalidate", b"\x80", ""] and type(out[3]) is PushNotification
