"""Parser: replies per second through trio_maint's protocol layer against bare hiredis on
the same bytes (no I/O).

Each case is a buffer of RESP3 frames fed in 64 KiB chunks (as the connection receives
them) and drained. Two shapes, each with its own bare-hiredis floor:

* reply by reply, as a single command reads its reply: ``hiredis`` (a bare
  :class:`hiredis.Reader`, ``gets()`` in a Python loop), ``RespParser``
  (``RespParser.next_reply``) and ``Connection`` (``Connection._next_parsed``, the exact
  call the single-command path makes);
* batched, as a pipeline reads its replies: ``hiredis batch`` (``list.extend(iter(gets,
  sentinel))``: hiredis called from C, the fastest way to drain a bare reader),
  ``RespParser batch`` (``RespParser.take_replies``) and ``Connection pipeline``
  (``Connection._take_replies``, the exact call ``execute_many`` makes, which also hands
  push frames to the push handler).

Overhead = time per reply of a layer / time per reply of the bare hiredis loop of the same
shape - 1 (and, in brackets, against the faster of the two bare loops). Pure CPU work,
so it is timed with this process's CPU clock (``time.process_time``, immune to being
descheduled on a busy machine), in short slices with the layers interleaved; the overhead
is the median over rounds of each round's paired ratio.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import hiredis

from trio_maint import ClientOptions
from trio_maint._net.wire import _RECEIVE_SIZE
from trio_maint._sansio.resp import NEED_DATA, RespParser
from trio_maint.lowlevel import Connection

from ._common import fmt, parse_args, print_table, summarize, write_json

_SENTINEL = object()


def _payloads() -> dict[str, tuple[bytes, int]]:
    """case -> (bytes, number of replies)."""
    bulk = b"$16\r\n" + b"v" * 16 + b"\r\n"
    small = bulk * 2000 + b"+OK\r\n" * 2000 + b":12345\r\n" * 2000
    array10 = (b"*10\r\n" + bulk * 10) * 2000
    mixed = (
        b"%2\r\n+server\r\n+redis\r\n+version\r\n+7.0.15\r\n"
        + b"*3\r\n$3\r\nfoo\r\n,3.25\r\n#t\r\n"
        + b"_\r\n"
        + bulk
    ) * 1500
    push = b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$5\r\nhello\r\n"
    with_pushes = (bulk * 33 + b"+OK\r\n" * 33 + b":12345\r\n" * 33 + push) * 60
    return {
        "small (bulk/OK/int)": (small, 6000),
        "small, 1 push in 100": (with_pushes, 6000),
        "array of 10 bulk": (array10, 2000),
        "mixed RESP3": (mixed, 6000),
    }


def _chunks(data: bytes) -> list[bytes]:
    return [data[i : i + _RECEIVE_SIZE] for i in range(0, len(data), _RECEIVE_SIZE)]


def _run_hiredis(chunks: list[bytes], count: int) -> int:
    reader = hiredis.Reader(notEnoughData=_SENTINEL)
    n = 0
    for chunk in chunks:
        reader.feed(chunk)
        gets = reader.gets
        while gets() is not _SENTINEL:
            n += 1
    return n


def _run_hiredis_batch(chunks: list[bytes], count: int) -> int:
    reader = hiredis.Reader(notEnoughData=_SENTINEL)
    replies: list[Any] = []
    for chunk in chunks:
        reader.feed(chunk)
        replies.extend(iter(reader.gets, _SENTINEL))
    return len(replies)


def _run_resp_parser(chunks: list[bytes], count: int) -> int:
    parser = RespParser()
    n = 0
    for chunk in chunks:
        parser.feed(chunk)
        while parser.next_reply() is not NEED_DATA:
            n += 1
    return n


def _run_resp_parser_batch(chunks: list[bytes], count: int) -> int:
    parser = RespParser()
    replies: list[Any] = []
    for chunk in chunks:
        parser.feed(chunk)
        parser.take_replies(replies, count - len(replies))
    return len(replies)


def _run_connection(chunks: list[bytes], count: int) -> int:
    conn = Connection(ClientOptions())
    parser = conn._parser
    n = 0
    for chunk in chunks:
        parser.feed(chunk)
        while conn._next_parsed() is not NEED_DATA:
            n += 1
    return n


def _run_connection_pipeline(chunks: list[bytes], count: int) -> int:
    pushes: list[object] = []
    conn = Connection(ClientOptions(), push_handler=lambda _conn, frame: pushes.append(frame))
    parser = conn._parser
    replies: list[Any] = []
    for chunk in chunks:
        parser.feed(chunk)
        conn._take_replies(replies, count)
    return len(replies) + len(pushes)


#: layer -> (function, the bare hiredis layer it is compared with)
LAYERS: dict[str, Callable[[list[bytes], int], int]] = {
    "hiredis": _run_hiredis,
    "hiredis batch": _run_hiredis_batch,
    "RespParser": _run_resp_parser,
    "Connection": _run_connection,
    "RespParser batch": _run_resp_parser_batch,
    "Connection pipeline": _run_connection_pipeline,
}
#: Each layer of ours against the bare hiredis loop of the same shape: reply by reply
#: (``gets()`` in a Python loop, as a single command reads its reply) or batched
#: (``list.extend(iter(gets, sentinel))``, hiredis called from C, as a pipeline reads).
FLOOR: dict[str, str] = {
    "RespParser": "hiredis",
    "Connection": "hiredis",
    "RespParser batch": "hiredis batch",
    "Connection pipeline": "hiredis batch",
}


def _measure(
    fn: Callable[[list[bytes], int], int], chunks: list[bytes], expected: int, duration: float
) -> float:
    """Replies per CPU second of ``fn`` over ``duration`` CPU seconds."""
    replies = 0
    start = time.process_time()
    deadline = start + duration
    while True:
        got = fn(chunks, expected)
        if got != expected:
            raise AssertionError(f"{fn.__name__} parsed {got} replies, expected {expected}")
        replies += got
        now = time.process_time()
        if now >= deadline:
            return replies / (now - start)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(__doc__ or "", argv)
    slice_s = args.duration / 10
    samples: dict[tuple[str, str], list[float]] = {}
    ratios: dict[tuple[str, str], list[float]] = {}
    payloads = _payloads()
    for _round in range(args.rounds):
        for case, (data, count) in payloads.items():
            chunks = _chunks(data)
            totals = dict.fromkeys(LAYERS, 0.0)
            for _slice in range(5):  # interleaved slices: drift hits every layer alike
                for layer, fn in LAYERS.items():
                    totals[layer] += _measure(fn, chunks, count, slice_s) / 5
            for layer in LAYERS:
                samples.setdefault((case, layer), []).append(totals[layer])
                if layer in FLOOR:
                    floor = totals[FLOOR[layer]]
                    fastest = max(totals["hiredis"], totals["hiredis batch"])
                    ratios.setdefault((case, layer), []).append((floor / totals[layer] - 1) * 100)
                    ratios.setdefault((case, layer + " vs fastest"), []).append(
                        (fastest / totals[layer] - 1) * 100
                    )
    results: dict[str, Any] = {}
    rate_rows = []
    overhead_rows = []
    for case in payloads:
        entry: dict[str, Any] = {layer: summarize(samples[(case, layer)]) for layer in LAYERS}
        overhead = {
            key[1]: round(statistics.median(r), 1) for key, r in ratios.items() if key[0] == case
        }
        entry["overhead_pct"] = overhead
        entry["overhead_pct_rounds"] = {
            key[1]: [round(x, 1) for x in r] for key, r in ratios.items() if key[0] == case
        }
        results[case] = entry
        rate_rows.append(
            [
                case,
                *(
                    f"{fmt(entry[layer]['median'])} ±{entry[layer]['spread_pct']}%"
                    for layer in LAYERS
                ),
            ]
        )
        overhead_rows.append(
            [
                case,
                *(
                    f"{overhead[layer]:+.1f}% ({overhead[layer + ' vs fastest']:+.1f}%)"
                    for layer in FLOOR
                ),
            ]
        )
    print_table("parser, replies/s (median ±spread)", ["case", *LAYERS], rate_rows)
    print_table(
        "overhead vs bare hiredis of the same shape (in brackets: vs the faster bare loop); "
        "goal <= 25 %",
        ["case", *FLOOR],
        overhead_rows,
    )
    payload = {"unit": "replies/s", "goal_overhead_pct": 25, "cases": results}
    write_json("parser", args, payload)
    return payload


if __name__ == "__main__":
    main()
