"""Sans-IO cluster pieces: CRC16 and hash tags, key positions, slot maps, slot specs; the
cluster client's SMIGRATED handling and refresh coalescing on a stand-in node set."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

import trio_maint
from trio_maint import CrossSlotError, SMigrated
from trio_maint._cluster.client import SMIGRATED_DEDUP_SIZE, RedisCluster
from trio_maint._cluster.pipeline import keys_slot_of
from trio_maint._sansio.notifications import SlotMove, parse_notification
from trio_maint._sansio.resp import RespParser
from trio_maint._sansio.slots import (
    SLOT_COUNT,
    NodeInfo,
    SlotMap,
    command_keys,
    command_slot,
    crc16,
    key_slot,
    parse_slot_specs,
)
from trio_maint.testing import smigrated_frame


def test_crc16_xmodem_vector() -> None:
    assert crc16(b"123456789") == 0x31C3
    assert crc16(b"") == 0


def _crc16_bitwise(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def test_crc16_matches_a_bitwise_reference() -> None:
    import random

    rng = random.Random(8)
    for length in range(0, 70):
        for _ in range(20):
            data = bytes(rng.randrange(256) for _ in range(length))
            assert crc16(data) == _crc16_bitwise(data), data


@pytest.mark.parametrize(
    ("key", "slot"),
    [
        ("foo", 12182),
        ("bar", 5061),
        (b"foo", 12182),
        ("123456789", 0x31C3 % SLOT_COUNT),
        ("{user1000}.following", 3443),
        ("{user1000}.followers", 3443),
        ("foo{}{bar}", key_slot("foo{}{bar}")),
        ("foo{{bar}}zap", key_slot("{bar")),
        ("foo{bar}{zap}", key_slot("bar")),
        ("{}", crc16(b"{}") % SLOT_COUNT),
        ("a{", crc16(b"a{") % SLOT_COUNT),
        ("\u00e9t\u00e9", crc16("\u00e9t\u00e9".encode()) % SLOT_COUNT),
    ],
)
def test_key_slot(key: str | bytes, slot: int) -> None:
    assert key_slot(key) == slot


def test_hash_tag_rules() -> None:
    # An empty tag does not count: the whole key is hashed.
    assert key_slot("foo{}{bar}") == crc16(b"foo{}{bar}") % SLOT_COUNT
    assert key_slot("foo{bar}{zap}") == key_slot("bar") == 5061
    with pytest.raises(TypeError):
        key_slot(None)  # type: ignore[arg-type]


def test_command_keys_table() -> None:
    assert command_keys(("GET", "k")) == ["k"]
    assert command_keys((b"set", "k", "v")) == ["k"]
    assert command_keys(("MSET", "a", 1, "b", 2)) == ["a", "b"]
    assert command_keys(("MGET", "a", "b", "c")) == ["a", "b", "c"]
    assert command_keys(("BLPOP", "a", "b", 0)) == ["a", "b"]
    assert command_keys(("LMOVE", "a", "b", "LEFT", "RIGHT")) == ["a", "b"]
    assert command_keys(("EVAL", "return 1", 2, "x", "y", "arg")) == ["x", "y"]
    assert command_keys(("OBJECT", "ENCODING", "k")) == ["k"]
    assert command_keys(("PING",)) == []
    assert command_keys(("SPUBLISH", "ch", "m")) == ["ch"]
    assert command_keys(("NOSUCHCOMMAND", "x")) is None


def test_command_slot_cross_slot() -> None:
    assert command_slot(("MGET", "{t}a", "{t}b")) == key_slot("t")
    assert command_slot(("PING",)) is None
    with pytest.raises(CrossSlotError):
        command_slot(("MGET", "a", "b"))
    with pytest.raises(KeyError):
        command_slot(("NOSUCHCOMMAND",))
    assert keys_slot_of([None, 5, 5]) == 5
    with pytest.raises(CrossSlotError):
        keys_slot_of([5, None, 6])


def test_parse_slot_specs() -> None:
    assert parse_slot_specs(["1", "3-5"]) == [1, 3, 4, 5]
    assert parse_slot_specs(["123,789-790", " ", "x", "9-8", "16384"]) == [123, 789, 790]


def _shards_resp3() -> list[Any]:
    def node(port: int, role: str, health: str = "online", endpoint: str = "127.0.0.1") -> Any:
        return {
            "id": f"id{port}",
            "port": port,
            "ip": "127.0.0.1",
            "endpoint": endpoint,
            "role": role,
            "replication-offset": 1,
            "health": health,
        }

    return [
        {"slots": [0, 5460], "nodes": [node(7000, "master"), node(7003, "replica")]},
        {"slots": [5461, 10922], "nodes": [node(7001, "master", endpoint="?")]},
        {
            "slots": [10923, 16000, 16001, 16383],
            "nodes": [node(7002, "master"), node(7005, "replica", "failed")],
        },
    ]


def test_slot_map_from_shards() -> None:
    slot_map = SlotMap.from_shards(_shards_resp3(), "10.0.0.1")
    assert slot_map.covered == SLOT_COUNT
    master = slot_map.master(0)
    assert master is not None and master.name == "127.0.0.1:7000" and master.primary
    assert [r.name for r in slot_map.replicas(100)] == ["127.0.0.1:7003"]
    assert slot_map.master(6000) == NodeInfo("127.0.0.1:7001", "127.0.0.1", 7001, "id7001")
    assert slot_map.replicas(16383) == ()  # the failed replica is left out
    assert [m.name for m in slot_map.masters] == [
        "127.0.0.1:7000",
        "127.0.0.1:7001",
        "127.0.0.1:7002",
    ]


def test_slot_map_from_shards_resp2_flat_lists() -> None:
    reply = [
        [
            b"slots",
            [0, 16383],
            b"nodes",
            [[b"id", b"x", b"port", 7000, b"ip", b"", b"endpoint", b"", b"role", b"master"]],
        ]
    ]
    slot_map = SlotMap.from_shards(reply, "10.0.0.1")
    master = slot_map.master(42)
    assert master is not None and master.name == "10.0.0.1:7000"


def test_slot_map_from_slots_and_moved_update() -> None:
    reply = [
        [0, 99, [b"127.0.0.1", 7000, b"a"], [b"127.0.0.1", 7003, b"d"]],
        [100, 16383, [b"", 7001, b"b"]],
    ]
    slot_map = SlotMap.from_slots(reply, "10.0.0.9")
    assert slot_map.covered == SLOT_COUNT
    owner = slot_map.master(200)
    assert owner is not None and owner.name == "10.0.0.9:7001"
    slot_map.set_master(50, NodeInfo("127.0.0.1:7001", "127.0.0.1", 7001))
    slot_map.set_master(51, NodeInfo("127.0.0.1:7777", "127.0.0.1", 7777))
    assert slot_map.master(50) == NodeInfo("127.0.0.1:7001", "127.0.0.1", 7001)
    new = slot_map.master(51)
    assert new is not None and new.port == 7777
    assert 51 in slot_map.slots_of("127.0.0.1:7777")
    with pytest.raises(ValueError):
        SlotMap.from_slots(b"nope", "h")
    with pytest.raises(ValueError):
        SlotMap.from_shards([{"slots": 1}], "h")


# ------------------------------------------------------------- client logic, no server


def _decode(data: bytes) -> Any:
    parser = RespParser()
    parser.feed(data)
    return parser.next_reply()


class _FakeCluster(RedisCluster):
    """A RedisCluster whose refresh only counts (and can be made slow)."""

    def __init__(self, nursery: trio.Nursery) -> None:
        super().__init__(
            trio_maint.ClientOptions(),
            [NodeInfo("127.0.0.1:7000", "127.0.0.1", 7000)],
            nursery,
            refresh_cooldown=0.0,
        )
        self.gate = trio.Event()
        self.calls = 0

    async def _refresh_once(self) -> None:
        self.calls += 1
        await self.gate.wait()


@pytest.mark.trio
async def test_refresh_coalescing_exactly_one_more() -> None:
    async with trio.open_nursery() as nursery:
        rc = _FakeCluster(nursery)
        rc.request_refresh()
        await trio.testing.wait_all_tasks_blocked()
        assert rc.calls == 1
        for _ in range(50):  # requests during the refresh ...
            rc.request_refresh()
        rc.gate.set()
        await trio.testing.wait_all_tasks_blocked()
        assert rc.calls == 2  # ... cause exactly one more refresh
        assert not rc._refreshing
        rc.request_refresh()  # a later request starts a new one (never lost)
        await trio.testing.wait_all_tasks_blocked()
        assert rc.calls == 3
        await rc.refresh_slots()
        assert rc.calls == 4
        rc._close()


@pytest.mark.trio
async def test_smigrated_dedup_and_matching() -> None:
    async with trio.open_nursery() as nursery:
        rc = _FakeCluster(nursery)
        rc.gate.set()
        rc._map = SlotMap.from_shards(_shards_resp3(), "127.0.0.1")
        frame = parse_notification(
            [
                "SMIGRATED",
                7,
                [
                    ["127.0.0.1:7000", "127.0.0.1:7001", "1,3-4"],
                    ["127.0.0.1:7009", "127.0.0.1:7002", "100"],
                ],
            ]
        )
        assert isinstance(frame, SMigrated)
        assert rc.handle_smigrated("127.0.0.1:7000", None, frame)
        assert not rc.handle_smigrated("127.0.0.1:7000", None, frame)  # same seq: once
        assert rc.smigrated_refreshes == 1
        for slot in (1, 3, 4):
            owner = rc.slot_map.master(slot)
            assert owner is not None and owner.name == "127.0.0.1:7001"
        owner = rc.slot_map.master(100)
        assert owner is not None and owner.name == "127.0.0.1:7000"  # other source: ignored
        # A source that is not this node: nothing happens.
        other = SMigrated(8, (SlotMove("127.0.0.1:7002", "127.0.0.1:7001", ("9",)),))
        assert not rc.handle_smigrated("127.0.0.1:7000", None, other)
        # The pair shape [target, slots] counts as this node's.
        pair = parse_notification(_decode(smigrated_frame(9, [("127.0.0.1:7002", "20")])))
        assert isinstance(pair, SMigrated)
        assert rc.handle_smigrated("127.0.0.1:7000", None, pair)
        owner = rc.slot_map.master(20)
        assert owner is not None and owner.name == "127.0.0.1:7002"
        # The de-duplication set is bounded.
        for seq in range(100, 100 + SMIGRATED_DEDUP_SIZE + 50):
            rc.handle_smigrated(
                "127.0.0.1:7000",
                None,
                SMigrated(seq, (SlotMove(None, "127.0.0.1:7001", ("5",)),)),
            )
        assert len(rc._smigrated_seen) == SMIGRATED_DEDUP_SIZE
        await trio.testing.wait_all_tasks_blocked()
        rc._close()
