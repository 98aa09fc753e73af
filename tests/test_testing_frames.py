"""Notification frame builders against the hand-written golden payloads."""

from __future__ import annotations

from typing import Any

import pytest

from trio_maint._sansio.resp import NEED_DATA, RespParser, is_push
from trio_maint.testing import (
    Simple,
    encode_value,
    failed_over_frame,
    failing_over_frame,
    golden_payload,
    golden_payloads,
    migrated_frame,
    migrating_frame,
    moving_frame,
    smigrated_frame,
    smigrating_frame,
)


def _decode(data: bytes) -> Any:
    parser = RespParser(encoding="utf-8")
    parser.feed(data)
    value = parser.next_reply()
    assert parser.next_reply() is NEED_DATA
    return value


def _plain(value: Any) -> Any:
    return [_plain(v) for v in value] if isinstance(value, list) else value


def test_golden_payloads_decode_as_indexed() -> None:
    payloads = golden_payloads()
    names = {p.decoded[0] for p in payloads.values()}
    assert names == {
        "MOVING",
        "MIGRATING",
        "MIGRATED",
        "FAILING_OVER",
        "FAILED_OVER",
        "SMIGRATING",
        "SMIGRATED",
    }
    for payload in payloads.values():
        value = _decode(payload.data)
        assert is_push(value)
        assert _plain(value) == payload.decoded, payload.name
        assert payload.description


@pytest.mark.parametrize(
    ("name", "built"),
    [
        ("moving_ip", moving_frame(1001, 15, "10.0.0.5:12000")),
        ("moving_fqdn", moving_frame(1002, 15, "node-1.db.example.com:12000")),
        ("moving_null_resp3", moving_frame(1003, 15, None)),
        ("moving_null_resp2", moving_frame(1004, 15, None, null="$-1")),
        ("moving_null_omitted", moving_frame(1005, 15, None, null="omit")),
        ("moving_simple_strings", moving_frame(1006, 15, "127.0.0.1:6380", strings="simple")),
        ("migrating", migrating_frame(1007, time=2, shard_ids="1")),
        (
            "migrating_simple_strings",
            migrating_frame(1008, time=2, shard_ids="1", strings="simple"),
        ),
        ("migrating_slot", migrating_frame(1009, shard_ids="1000")),
        ("migrating_minimal", migrating_frame(1010)),
        ("migrated", migrated_frame(1011, shard_ids="1")),
        ("migrated_simple_strings", migrated_frame(1012, shard_ids="1", strings="simple")),
        ("failing_over", failing_over_frame(1013, time=2, shard_ids="1")),
        ("failing_over_minimal", failing_over_frame(1014)),
        ("failed_over", failed_over_frame(1015, shard_ids="1")),
        ("failed_over_minimal", failed_over_frame(1016)),
        ("smigrating", smigrating_frame(1017, "123,789-1000")),
        ("smigrating_specs", smigrating_frame(1018, ["1000", "2000-3000"])),
        (
            "smigrated_triplets",
            smigrated_frame(
                1019,
                [
                    ("127.0.0.1:6379", "127.0.0.1:6380", "123,456,789-1000"),
                    ("127.0.0.1:6379", "127.0.0.1:6381", "124,457,300-500"),
                ],
                strings="simple",
            ),
        ),
        (
            "smigrated_triplets_bulk",
            smigrated_frame(1020, [("127.0.0.1:7000", "127.0.0.1:7001", "0-5460,42")]),
        ),
        (
            "smigrated_pairs",
            smigrated_frame(1021, [("127.0.0.1:7001", "0-1000"), ("127.0.0.1:7002", "1001-2000")]),
        ),
    ],
)
def test_builders_match_golden_bytes(name: str, built: bytes) -> None:
    assert built == golden_payload(name)


def test_every_golden_payload_has_a_builder_case() -> None:
    assert len(golden_payloads()) == 21


def test_encode_value_edge_cases() -> None:
    assert encode_value(Simple("OK"), strings="bulk") == b"+OK\r\n"
    assert encode_value(b"x", strings="simple") == b"$1\r\nx\r\n"
    assert encode_value(None, null="$-1") == b"$-1\r\n"
    assert encode_value([1, [None]]) == b"*2\r\n:1\r\n*1\r\n_\r\n"
    with pytest.raises(TypeError):
        encode_value(True)
    with pytest.raises(ValueError):
        encode_value("a\r\nb", strings="simple")
    with pytest.raises(KeyError):
        golden_payload("nope")
