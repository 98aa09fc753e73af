"""Parser: replies per second through trio_maint's protocol layer against bare hiredis on
the same bytes (no I/O).

Each case is a buffer of RESP3 replies fed in 64 KiB chunks (as the connection receives
them) and drained reply by reply:

* ``hiredis``: a bare :class:`hiredis.Reader` (``feed`` / ``gets``), the floor;
* ``RespParser``: :class:`trio_maint._resp.RespParser` (``feed`` / ``next_reply``);
* ``Connection``: the exact calls a connection makes per reply (``_next_parsed`` on a
  :class:`~trio_maint.Connection`, which wraps ``RespParser.next_reply``).

Overhead = time per reply of a layer / time per reply of bare hiredis - 1. Pure CPU work,
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

from trio_maint import ClientOptions, Connection
from trio_maint._connection import _RECEIVE_SIZE
from trio_maint._resp import NEED_DATA, RespParser

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
    return {
        "small (bulk/OK/int)": (small, 6000),
        "array of 10 bulk": (array10, 2000),
        "mixed RESP3": (mixed, 6000),
    }


def _chunks(data: bytes) -> list[bytes]:
    return [data[i : i + _RECEIVE_SIZE] for i in range(0, len(data), _RECEIVE_SIZE)]


def _run_hiredis(chunks: list[bytes]) -> int:
    reader = hiredis.Reader(notEnoughData=_SENTINEL)
    n = 0
    for chunk in chunks:
        reader.feed(chunk)
        gets = reader.gets
        while gets() is not _SENTINEL:
            n += 1
    return n


def _run_resp_parser(chunks: list[bytes]) -> int:
    parser = RespParser()
    n = 0
    for chunk in chunks:
        parser.feed(chunk)
        while parser.next_reply() is not NEED_DATA:
            n += 1
    return n


def _run_connection(chunks: list[bytes]) -> int:
    conn = Connection(ClientOptions())
    parser = conn._parser
    n = 0
    for chunk in chunks:
        parser.feed(chunk)
        while conn._next_parsed() is not NEED_DATA:
            n += 1
    return n


LAYERS: dict[str, Callable[[list[bytes]], int]] = {
    "hiredis": _run_hiredis,
    "RespParser": _run_resp_parser,
    "Connection": _run_connection,
}


def _measure(
    fn: Callable[[list[bytes]], int], chunks: list[bytes], expected: int, duration: float
) -> float:
    """Replies per CPU second of ``fn`` over ``duration`` CPU seconds."""
    replies = 0
    start = time.process_time()
    deadline = start + duration
    while True:
        got = fn(chunks)
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
                ratios.setdefault((case, layer), []).append(
                    (totals["hiredis"] / totals[layer] - 1) * 100
                )
    results: dict[str, Any] = {}
    rows = []
    for case in payloads:
        entry: dict[str, Any] = {layer: summarize(samples[(case, layer)]) for layer in LAYERS}
        overhead = {
            layer: round(statistics.median(ratios[(case, layer)]), 1)
            for layer in LAYERS
            if layer != "hiredis"
        }
        entry["overhead_pct"] = overhead
        entry["overhead_pct_rounds"] = {
            layer: [round(r, 1) for r in ratios[(case, layer)]]
            for layer in LAYERS
            if layer != "hiredis"
        }
        results[case] = entry
        rows.append(
            [
                case,
                *(
                    f"{fmt(entry[layer]['median'])} ±{entry[layer]['spread_pct']}%"
                    for layer in LAYERS
                ),
                f"{overhead['RespParser']:+.1f}%",
                f"{overhead['Connection']:+.1f}%",
            ]
        )
    print_table(
        "parser, replies/s (median ±spread); overhead vs bare hiredis (goal <= 25 %)",
        ["case", *LAYERS, "RespParser ovh", "Connection ovh"],
        rows,
    )
    payload = {"unit": "replies/s", "goal_overhead_pct": 25, "cases": results}
    write_json("parser", args, payload)
    return payload


if __name__ == "__main__":
    main()
