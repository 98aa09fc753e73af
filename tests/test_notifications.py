"""Parsing of maintenance push frames and of endpoints (sans-IO)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_maint._sansio.endpoint import Endpoint, split_host_port
from trio_maint._sansio.notifications import (
    MAINTENANCE_PUSH_NAMES,
    FailedOver,
    FailingOver,
    Malformed,
    Migrated,
    Migrating,
    Moving,
    SlotMove,
    SMigrated,
    SMigrating,
    describe_shape,
    parse_notification,
)
from trio_maint._sansio.resp import RespParser


def test_names() -> None:
    assert (
        frozenset(
            {
                "MOVING",
                "MIGRATING",
                "MIGRATED",
                "FAILING_OVER",
                "FAILED_OVER",
                "SMIGRATING",
                "SMIGRATED",
            }
        )
        == MAINTENANCE_PUSH_NAMES
    )


@pytest.mark.parametrize("text", [True, False])
def test_moving_forms(text: bool) -> None:
    def t(s: str) -> str | bytes:
        return s if text else s.encode()

    assert parse_notification([t("MOVING"), 1001, 15, t("10.0.0.5:12000")]) == Moving(
        1001, 15.0, Endpoint("10.0.0.5", 12000)
    )
    for null in (None, t(""), t("<nil>")):
        assert parse_notification([t("MOVING"), 1002, 15, null]) == Moving(1002, 15.0, None)
    assert parse_notification([t("MOVING"), 1003, 15]) == Moving(1003, 15.0, None)
    assert parse_notification([t("MOVING"), 1, 15, t("redis.example.com")]) == Moving(
        1, 15.0, Endpoint("redis.example.com", 6379)
    )
    assert parse_notification([t("MOVING"), 1, 15, t("[::1]:7000")]) == Moving(
        1, 15.0, Endpoint("::1", 7000)
    )


def test_moving_time_and_null_delay() -> None:
    moving = parse_notification(["MOVING", 1, 15])
    assert isinstance(moving, Moving)
    assert moving.null_endpoint_delay == 7.5  # fractional, not floor(15 / 2)
    negative = parse_notification(["MOVING", 1, -3])
    assert isinstance(negative, Moving)
    assert negative.time == 0.0


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (["MOVING", 1], "at least 3"),
        (["MOVING", "1001", 15], "seq_id"),
        (["MOVING", b"1001", 15], "seq_id"),
        (["MOVING", True, 15], "seq_id"),
        (["MOVING", 1, "15"], "time"),
        (["MOVING", 1, 1.5], "time"),
        (["MOVING", 1, 15, 42], "endpoint"),
        (["MOVING", 1, 15, ["a"]], "endpoint"),
        (["MOVING", 1, 15, "host:notaport"], "endpoint"),
        (["MIGRATING"], "at least 2"),
        (["FAILED_OVER"], "at least 2"),
        (["SMIGRATING", 1], "at least 3"),
        (["SMIGRATING", "x", "1000"], "seq_id"),
        (["SMIGRATED", 1], "at least 3"),
        (["SMIGRATED", "1", [["a:1", "b:2", "1"]]], "seq_id"),
        (["SMIGRATED", 1, "a:1"], "not an array"),
        (["SMIGRATED", 1, []], "empty"),
        ([], "empty frame"),
        ([42, 1], "not text"),
        ([b"\xff\xfe", 1], "not text"),
    ],
)
def test_malformed(frame: list[object], reason: str) -> None:
    result = parse_notification(frame)
    assert isinstance(result, Malformed)
    assert reason in result.reason
    assert result.shape == describe_shape(frame)


def test_malformed_shape_hides_values() -> None:
    result = parse_notification([b"MOVING", b"1001", 15, b"secret-host:1"])
    assert isinstance(result, Malformed)
    assert result.name == "MOVING"
    assert result.shape == "[bytes(6), bytes(4), int, bytes(13)]"
    assert "secret" not in result.shape


def test_relaxation_notifications_tolerate_extras() -> None:
    assert parse_notification([b"MIGRATING", 1004, b"1000"]) == Migrating(1004)
    assert parse_notification(["MIGRATED", 1006, "1000", "more"]) == Migrated(1006)
    assert parse_notification(["FAILING_OVER", 1005]) == FailingOver(1005)
    assert parse_notification(["FAILED_OVER", 1007]) == FailedOver(1007)
    # The reference does not check these seq ids; the relaxation still applies.
    assert parse_notification(["MIGRATING", "x"]) == Migrating(None)


def test_smigrating() -> None:
    assert parse_notification([b"SMIGRATING", 1008, b"1000", b"2000-3000", 42, None]) == (
        SMigrating(1008, ("1000", "2000-3000", "42"))
    )


def test_smigrated_triples_pairs_and_skips() -> None:
    frame = [
        "SMIGRATED",
        1009,
        [
            ["127.0.0.1:6379", "127.0.0.1:6380", "123,456,789-1000"],
            [b"127.0.0.1:6379", b"127.0.0.1:6381", b"124, 457,300-500"],
            ["127.0.0.1:6382", "1-2"],
            ["only-one"],
            ["a", "b", 3],
            "not-a-list",
        ],
    ]
    assert parse_notification(frame) == SMigrated(
        1009,
        (
            SlotMove("127.0.0.1:6379", "127.0.0.1:6380", ("123", "456", "789-1000")),
            SlotMove("127.0.0.1:6379", "127.0.0.1:6381", ("124", "457", "300-500")),
            SlotMove(None, "127.0.0.1:6382", ("1-2",)),
        ),
        skipped=3,
    )


@pytest.mark.parametrize(
    "frame",
    [
        ["message", "chan", "data"],
        [b"invalidate", [b"key"]],
        ["smessage", "c", "d"],
        ["moving", 1, 15],  # names are case-sensitive
    ],
)
def test_other_push_frames_are_not_ours(frame: list[object]) -> None:
    assert parse_notification(frame) is None


def test_frames_from_hiredis() -> None:
    wire = (
        b">4\r\n$6\r\nMOVING\r\n:1001\r\n:15\r\n$14\r\n10.0.0.5:12000\r\n"
        b">4\r\n$6\r\nMOVING\r\n:1002\r\n:15\r\n_\r\n"
        b">3\r\n$6\r\nMOVING\r\n:1003\r\n:15\r\n"
        b">3\r\n$9\r\nMIGRATING\r\n:1004\r\n$4\r\n1000\r\n"
        b">2\r\n$12\r\nFAILING_OVER\r\n:1005\r\n"
        b">4\r\n$10\r\nSMIGRATING\r\n:1008\r\n$4\r\n1000\r\n$9\r\n2000-3000\r\n"
        b">3\r\n+SMIGRATED\r\n:1009\r\n*2\r\n*3\r\n+127.0.0.1:6379\r\n+127.0.0.1:6380\r\n"
        b"+123,456,789-1000\r\n*3\r\n+127.0.0.1:6379\r\n+127.0.0.1:6381\r\n+124,457,300-500\r\n"
    )
    for encoding in (None, "utf-8"):
        parser = RespParser(encoding=encoding)
        parser.feed(wire)
        results = [parse_notification(parser.next_reply()) for _ in range(7)]
        assert results == [
            Moving(1001, 15.0, Endpoint("10.0.0.5", 12000)),
            Moving(1002, 15.0, None),
            Moving(1003, 15.0, None),
            Migrating(1004),
            FailingOver(1005),
            SMigrating(1008, ("1000", "2000-3000")),
            SMigrated(
                1009,
                (
                    SlotMove("127.0.0.1:6379", "127.0.0.1:6380", ("123", "456", "789-1000")),
                    SlotMove("127.0.0.1:6379", "127.0.0.1:6381", ("124", "457", "300-500")),
                ),
            ),
        ]


_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.binary(max_size=20),
    st.text(max_size=20),
    st.sampled_from(sorted(MAINTENANCE_PUSH_NAMES)),
    st.sampled_from([b"MOVING", b"SMIGRATED", "10.0.0.1:1", "[::1]:0", "<nil>"]),
    st.builds(ValueError, st.text(max_size=5)),
)
_values = st.recursive(
    _leaves,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(), children),
    max_leaves=30,
)


@given(
    st.one_of(
        st.lists(_values, max_size=6),
        st.tuples(st.sampled_from(sorted(MAINTENANCE_PUSH_NAMES)), _values, _values, _values),
        _values,
    )
)
def test_parse_never_raises(frame: object) -> None:
    result = parse_notification(frame)  # type: ignore[arg-type]
    assert result is None or isinstance(
        result,
        Malformed
        | Moving
        | Migrating
        | Migrated
        | FailingOver
        | FailedOver
        | SMigrating
        | SMigrated,
    )


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("10.0.0.5:12000", ("10.0.0.5", 12000)),
        ("host", ("host", 6379)),
        ("[::1]:6380", ("::1", 6380)),
        ("[::1]", ("::1", 6379)),
        ("::1", ("::1", 6379)),
        ("fe80::1%eth0", ("fe80::1%eth0", 6379)),
        (":6379", ("", 6379)),
    ],
)
def test_split_host_port(address: str, expected: tuple[str, int]) -> None:
    assert split_host_port(address) == expected


@pytest.mark.parametrize(
    "address", ["host:", "host:x", "host:0", "host:70000", "[::1", "[::1]x", "a:b:c", ":6379"]
)
def test_endpoint_parse_rejects(address: str) -> None:
    with pytest.raises(ValueError):
        Endpoint.parse(address)


def test_endpoint_str_and_validation() -> None:
    assert str(Endpoint("::1", 7000)) == "[::1]:7000"
    assert str(Endpoint.parse("redis:7000")) == "redis:7000"
    with pytest.raises(ValueError):
        Endpoint("h", 0)
    with pytest.raises(TypeError):
        Endpoint("h", "6379")  # type: ignore[arg-type]
