"""Scripting on the local Redis Cluster (the session's ``redis_cluster``): a script call is
routed by its keys' slot, NOSCRIPT on that node is cured with EVAL there; cluster pipelines
resend the calls answered NOSCRIPT per node, transactions send each script's first call
as EVAL; after a slot migration the new owner's empty cache costs nothing."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator

import pytest
import trio

import trio_maint
from trio_maint import key_slot
from trio_maint.testing import LocalCluster

pytestmark = pytest.mark.trio

TIMEOUT = 30.0
_serial = itertools.count()


def fresh_source() -> str:
    """A script no node has seen (a unique comment): its first EVALSHA meets NOSCRIPT."""
    return (
        f"-- trio_maint cluster scripting {next(_serial)} {id(object())}\n"
        "return {KEYS[1], redis.call('INCR', KEYS[1])}"
    )


@pytest.fixture
async def rc(redis_cluster: LocalCluster) -> AsyncIterator[trio_maint.RedisCluster]:
    async with trio_maint.open_redis_cluster(redis_cluster.url, pool_size=8) as client:
        yield client


async def cached_on(rc: trio_maint.RedisCluster, sha: str) -> set[str]:
    """Names of the masters whose script cache holds ``sha``."""
    found = set()
    for info in rc.slot_map.masters:
        node = rc.nodes.get(info.name)
        if node is None:
            async with trio_maint.open_redis(f"redis://{info.name}") as node:
                (hit,) = await node.execute_command("SCRIPT", "EXISTS", sha)
        else:
            (hit,) = await node.execute_command("SCRIPT", "EXISTS", sha)
        if hit:
            found.add(info.name)
    return found


async def evalsha_failures(rc: trio_maint.RedisCluster, name: str) -> int:
    info = await rc.nodes[name].info("commandstats")
    return int(info.get("cmdstat_evalsha", {"failed_calls": 0})["failed_calls"])


def owner(rc: trio_maint.RedisCluster, key: str) -> str:
    return rc.node_for_key(key)


async def test_call_is_routed_by_slot_and_cured_on_its_node(
    rc: trio_maint.RedisCluster,
) -> None:
    script = rc.register_script(fresh_source())
    key = f"{{s{next(_serial)}}}.count"
    with trio.fail_after(TIMEOUT):
        await rc.delete(key)
        assert await script([key]) == [key.encode(), 1]
        assert await cached_on(rc, script.sha) == {owner(rc, key)}  # only where it ran
        failures = await evalsha_failures(rc, owner(rc, key))
        assert await script([key]) == [key.encode(), 2]
        assert await evalsha_failures(rc, owner(rc, key)) == failures  # found by digest
        # A keyless script runs on a master; NOSCRIPT there is cured the same way.
        keyless = rc.register_script(f"-- trio_maint keyless {next(_serial)}\nreturn 7")
        assert await keyless() == 7
        assert len(await cached_on(rc, keyless.sha)) == 1


async def test_cluster_pipeline_resends_noscript_per_node(rc: trio_maint.RedisCluster) -> None:
    script = rc.register_script(fresh_source())
    keys = [f"cp{next(_serial)}:{i}" for i in range(30)]
    assert len({owner(rc, k) for k in keys}) == len(rc.slot_map.masters)  # every master
    with trio.fail_after(TIMEOUT):
        for key in keys:
            await rc.delete(key)
        async with rc.pipeline() as pipe:
            for key in keys:
                await script([key], client=pipe)
                pipe.incr(key)
            results = await pipe.execute()
        # Each node ran its INCRs before the calls sent again as EVAL (after NOSCRIPT).
        assert results == [x for k in keys for x in ([k.encode(), 2], 1)]
        assert await cached_on(rc, script.sha) == {owner(rc, k) for k in keys}
        async with rc.pipeline() as pipe:
            for key in keys:
                await script([key], client=pipe)
            assert await pipe.execute() == [[k.encode(), 3] for k in keys]


async def test_cluster_transaction_never_meets_noscript(rc: trio_maint.RedisCluster) -> None:
    script = rc.register_script(fresh_source())
    other = rc.register_script(fresh_source())
    tag = f"{{t{next(_serial)}}}"
    a, b = f"{tag}.a", f"{tag}.b"
    name = owner(rc, a)
    with trio.fail_after(TIMEOUT):
        await rc.delete(a, b)
        failures = await evalsha_failures(rc, name)
        async with rc.pipeline(transaction=True) as pipe:
            await script([a], client=pipe)
            await other([b], client=pipe)
            pipe.incr(a)
            await script([a], client=pipe)
            await other([b], client=pipe)
            assert await pipe.execute() == [
                [a.encode(), 1],
                [b.encode(), 1],
                2,
                [a.encode(), 3],
                [b.encode(), 2],
            ]
        assert await evalsha_failures(rc, name) == failures
        assert await cached_on(rc, script.sha) == {name}
        # A script registered on the pipeline queues there.
        async with rc.pipeline(transaction=True) as pipe:
            queued = pipe.register_script(fresh_source())
            assert await queued([a]) is pipe
            assert await pipe.execute() == [[a.encode(), 4]]


async def test_script_follows_a_slot_migration(
    rc: trio_maint.RedisCluster, redis_cluster: LocalCluster
) -> None:
    """Cached on the slot's owner, the script is called after the slot moved to a master
    that never saw it: MOVED, then NOSCRIPT there, then EVAL: the call succeeds."""
    script = rc.register_script(fresh_source())
    key = f"{{m{next(_serial)}}}.n"
    slot = key_slot(key)
    with trio.fail_after(TIMEOUT):
        await rc.delete(key)
        assert await script([key]) == [key.encode(), 1]
        source = redis_cluster.master_of_slot(slot)
        target = next(m for m in redis_cluster.masters if m is not source)
        assert await cached_on(rc, script.sha) == {source.name}
        await redis_cluster.migrate_slots_async([slot], source, target)
        try:
            assert await script([key]) == [key.encode(), 2]  # MOVED, NOSCRIPT, EVAL
            assert rc.node_for_key(key) == target.name
            assert await cached_on(rc, script.sha) == {source.name, target.name}
            # A pipeline whose calls are redirected to a node without the script.
            await redis_cluster.migrate_slots_async([slot], target, source)
            other = rc.register_script(fresh_source())
            assert await other([key]) == [key.encode(), 3]  # cached on source
            assert rc.redirections["moved"] >= 1
            await redis_cluster.migrate_slots_async([slot], source, target)
            async with rc.pipeline() as pipe:
                await other([key], client=pipe)
                pipe.incr(key)
                await other([key], client=pipe)
                # All three were redirected to the target, whose cache lacks the script:
                # INCR ran there, the two calls met NOSCRIPT and were sent again as EVAL.
                assert await pipe.execute() == [[key.encode(), 5], 4, [key.encode(), 6]]
        finally:
            if redis_cluster.master_of_slot(slot) is not source:
                await redis_cluster.migrate_slots_async([slot], target, source)
