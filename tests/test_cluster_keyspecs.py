"""Cluster routing from the server's key specs, on the session's local cluster (3 masters
with one replica each): multi-key, keyword-keyed (``XREAD STREAMS``), numkeys and
subcommand commands go straight to the master of their keys' slot (no ``MOVED`` met),
cross-slot ones are refused before anything is sent, a command whose specs cannot tell is
asked about with ``COMMAND GETKEYS``, and read-only commands (the ``readonly`` flag)
reach the replicas with ``read_from_replicas``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

import trio_maint
from trio_maint import CrossSlotError, key_slot
from trio_maint.testing import ClusterNode, LocalCluster

pytestmark = pytest.mark.trio


def _tag_away_from_first_master(rc: trio_maint.RedisCluster) -> str:
    """A hash tag whose slot is not served by the master that keyless commands go to,
    so that a command wrongly taken as keyless would meet a ``MOVED``."""
    first = rc.slot_map.masters[0].name
    for i in range(1000):
        tag = f"ks{i}"
        master = rc.slot_map.master(key_slot(tag))
        if master is not None and master.name != first:
            return tag
    raise AssertionError("no such tag")


@pytest.fixture
async def rc(redis_cluster: LocalCluster) -> AsyncIterator[trio_maint.RedisCluster]:
    async with trio_maint.open_redis_cluster(redis_cluster.url) as client:
        yield client


async def test_commands_go_to_their_keys_master(rc: trio_maint.RedisCluster) -> None:
    t = _tag_away_from_first_master(rc)
    names = ["a", "b", "s1", "s2", "z1", "z2", "l1", "l2"]
    a, b, s1, s2, z1, z2, l1, l2 = (f"{{{t}}}{n}" for n in names)
    commands: list[tuple[Any, ...]] = [
        ("DEL", a, b, s1, s2, z1, z2, l1, l2, f"{{{t}}}d", f"{{{t}}}g"),
        ("MSET", a, "1", b, "2"),
        ("MGET", a, b),
        ("XADD", s1, "*", "f", "1"),
        ("XADD", s2, "*", "f", "2"),
        ("XREAD", "COUNT", 5, "STREAMS", s1, s2, "0", "0"),
        ("EVAL", "return redis.call('get', KEYS[1])", 1, a),
        ("EVAL_RO", "return #KEYS", 2, a, b, "arg"),
        ("ZADD", z1, 1, "m"),
        ("ZADD", z2, 2, "m"),
        ("ZUNIONSTORE", f"{{{t}}}d", 2, z1, z2, "WEIGHTS", 1, 2),
        ("ZINTERCARD", 2, z1, z2),
        ("RPUSH", l1, "x", "y"),
        ("LMPOP", 2, l1, l2, "LEFT"),
        ("SORT", l1, "ALPHA", "STORE", l2),
        ("RENAME", l2, f"{{{t}}}l3"),
        ("GEOADD", f"{{{t}}}g", 13.36, 38.11, "p"),
        ("GEORADIUS", f"{{{t}}}g", 13, 38, 200, "km", "STORE", f"{{{t}}}g2"),
        ("OBJECT", "ENCODING", a),
        ("MEMORY", "USAGE", a),
        ("XINFO", "STREAM", s1),
    ]
    before = rc.redirections["moved"]
    for args in commands:
        assert rc._slot_of(args) == key_slot(t), args
        await rc.execute_command(*args)
    assert rc.redirections["moved"] == before
    assert await rc.execute_command("MGET", a, b) == [b"1", b"2"]
    reply = await rc.execute_command("XREAD", "STREAMS", s1, s2, "0", "0")
    assert len(reply) == 2
    assert await rc.execute_command("EVAL_RO", "return #KEYS", 2, a, b) == 2
    assert await rc.execute_command("ZSCORE", f"{{{t}}}d", "m") == 5.0


async def test_cross_slot_commands_are_refused_before_sending(
    rc: trio_maint.RedisCluster,
) -> None:
    assert key_slot("a") != key_slot("b")
    for args in [
        ("XREAD", "STREAMS", "a", "b", "0", "0"),
        ("EVAL", "return 1", 2, "a", "b"),
        ("ZUNIONSTORE", "a", 1, "b"),
        ("LMPOP", 2, "a", "b", "LEFT"),
        ("RENAME", "a", "b"),
        ("SORT", "a", "STORE", "b"),
        ("GEORADIUS", "a", 13, 38, 200, "km", "STOREDIST", "b"),
    ]:
        with pytest.raises(CrossSlotError):
            await rc.execute_command(*args)


async def test_commands_the_specs_cannot_place(rc: trio_maint.RedisCluster) -> None:
    # MIGRATE ... KEYS: the spec is flagged incomplete, so the server is asked.
    args = ("MIGRATE", "127.0.0.1", "1", "", "0", "100", "KEYS", "{m}a", "{m}b")
    with pytest.raises(KeyError):
        rc._slot_of(args)
    assert await rc._slot_of_unknown(args) == key_slot("m")


def _calls(node: ClusterNode, command: str) -> int:
    """How many times ``node`` ran ``command`` (``INFO commandstats``)."""
    info = node.call("INFO", "commandstats")
    text = info.decode() if isinstance(info, bytes) else str(info)
    for line in text.splitlines():
        if line.startswith(f"cmdstat_{command}:"):
            return int(line.split("calls=", 1)[1].split(",", 1)[0])
    return 0


async def test_read_only_commands_reach_replicas(redis_cluster: LocalCluster) -> None:
    async with trio_maint.open_redis_cluster(redis_cluster.url, read_from_replicas=True) as rc:
        t = "rr-keyspecs"
        key, stream = f"{{{t}}}k", f"{{{t}}}s"
        await rc.execute_command("SET", key, "v")
        await rc.execute_command("XADD", stream, "*", "f", "1")
        master_info = rc.slot_map.master(key_slot(t))
        assert master_info is not None
        master = redis_cluster.node(master_info.name)
        await trio.to_thread.run_sync(master.call, "WAIT", 1, 2000)
        replica = redis_cluster.node(rc.slot_map.replicas(key_slot(t))[0].name)
        reads = {"get": 0, "xread": 0, "object|encoding": 0, "eval_ro": 0}
        for command in reads:
            reads[command] = await trio.to_thread.run_sync(_calls, replica, command)
        writes = await trio.to_thread.run_sync(_calls, master, "set")
        assert await rc.execute_command("GET", key) == b"v"
        assert await rc.execute_command("XREAD", "STREAMS", stream, "0")
        assert await rc.execute_command("OBJECT", "ENCODING", key)
        assert await rc.execute_command("EVAL_RO", "return 1", 1, key) == 1
        # A write goes to the master.
        assert await rc.execute_command("SET", key, "w")
        for command, before in reads.items():
            assert await trio.to_thread.run_sync(_calls, replica, command) == before + 1, command
        assert await trio.to_thread.run_sync(_calls, master, "set") == writes + 1
