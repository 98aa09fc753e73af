"""Commands the server tips for every shard run on every master of the cluster client, their
replies combined by the tip's response policy (``_sansio/fanout.py``): scripts and functions
loaded through the cluster client reach every master, as redis-py's cluster client does."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

import trio_maint
from trio_maint import NoScriptError, RedisError, key_slot
from trio_maint._sansio.errors import ResponseError
from trio_maint._sansio.fanout import FANOUT, combine_replies, fanout_policy
from trio_maint.testing import LocalCluster


@pytest.fixture
async def rc(redis_cluster: LocalCluster) -> AsyncIterator[trio_maint.RedisCluster]:
    async with trio_maint.open_redis_cluster(redis_cluster.url) as client:
        yield client


def _keys_on_every_master(rc: trio_maint.RedisCluster) -> list[str]:
    """One key per master (by the slots each serves)."""
    slot_map = rc.slot_map
    keys = []
    for master in slot_map.masters:
        slots = set(slot_map.slots_of(master.name))
        keys.append(next(f"fanout:{i}" for i in range(100_000) if key_slot(f"fanout:{i}") in slots))
    assert len(keys) >= 2
    return keys


def test_policies_come_from_the_servers_tips() -> None:
    assert fanout_policy(("SCRIPT", "LOAD", "return 1")) == "all_succeeded"
    assert fanout_policy((b"script", b"exists", b"x")) == "agg_logical_and"
    assert fanout_policy(("FUNCTION", "LOAD", "#!lua name=x")) == "all_succeeded"
    assert fanout_policy(("DBSIZE",)) == "agg_sum"
    assert fanout_policy(("KEYS", "*")) == "concat"
    assert fanout_policy(("SCRIPT", "KILL")) == "one_succeeded"
    for one_node in (("GET", "k"), ("PING",), ("WAIT", "1", "0"), ("INFO",), ("RANDOMKEY",)):
        assert fanout_policy(one_node) is None
    assert "CONFIG|SET" in FANOUT and "SCRIPT|FLUSH" in FANOUT


def test_replies_combine_by_policy() -> None:
    assert combine_replies("agg_sum", [2, 3]) == 5
    assert combine_replies("agg_logical_and", [[1, 0, 1], [1, 1, 0]]) == [1, 0, 0]
    assert combine_replies("agg_logical_or", [[1, 0, 0], [0, 0, 1]]) == [1, 0, 1]
    assert combine_replies("concat", [[b"a"], [], [b"b", b"c"]]) == [b"a", b"b", b"c"]
    assert combine_replies("all_succeeded", [b"OK", b"OK"]) == b"OK"
    busy = ResponseError("NOTBUSY No scripts in execution right now.")
    assert combine_replies("one_succeeded", [busy, b"OK"]) == b"OK"
    with pytest.raises(ResponseError, match="NOTBUSY"):
        combine_replies("one_succeeded", [busy, busy])
    with pytest.raises(ResponseError, match="NOTBUSY"):
        combine_replies("all_succeeded", [b"OK", busy])


@pytest.mark.trio
async def test_script_load_reaches_every_master(rc: trio_maint.RedisCluster) -> None:
    await rc.refresh_slots()
    keys = _keys_on_every_master(rc)
    token = uuid.uuid4().hex
    body = f"return '{token}' .. KEYS[1]"
    sha = await rc.script_load(body)
    for key in keys:  # EVALSHA without a fallback: the script is on every master
        assert await rc.evalsha(sha, 1, key) == f"{token}{key}".encode()
    assert await rc.script_exists(sha) == [True]
    missing = "0" * 40
    assert await rc.script_exists(sha, missing) == [True, False]


@pytest.mark.trio
async def test_script_flush_reaches_every_master() -> None:
    with LocalCluster(masters=3, replicas=0) as cluster:
        async with trio_maint.open_redis_cluster(cluster.url) as rc:
            await rc.refresh_slots()
            keys = _keys_on_every_master(rc)
            sha = await rc.script_load("return 1")
            assert await rc.script_flush() is True
            assert await rc.script_exists(sha) == [False]
            for key in keys:
                with pytest.raises(NoScriptError):
                    await rc.evalsha(sha, 1, key)


@pytest.mark.trio
async def test_function_load_reaches_every_master(rc: trio_maint.RedisCluster) -> None:
    await rc.refresh_slots()
    keys = _keys_on_every_master(rc)
    library = f"fanout{uuid.uuid4().hex[:8]}"
    code = (
        f"#!lua name={library}\n"
        f"redis.register_function('{library}_bump', "
        "function(keys, args) return redis.call('INCRBY', keys[1], args[1]) end)"
    )
    assert await rc.function_load(code) == library.encode()
    try:
        for key in keys:
            assert await rc.fcall(f"{library}_bump", 1, key, 2) == 2
    finally:
        await rc.function_delete(library)
        for key in keys:
            await rc.delete(key)
    with pytest.raises(RedisError, match=r"not found|Library"):
        await rc.fcall(f"{library}_bump", 1, keys[0], 1)
