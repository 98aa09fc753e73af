"""The cluster client against a real local Redis Cluster (3 masters + 1 replica each, the
session's ``redis_cluster`` fixture): routing, cross-slot errors, pipelines, scan_iter,
sharded pub/sub, and 100 concurrent tasks through real slot migrations (with and without
SMIGRATING/SMIGRATED), a failover, and a node added and rebalanced."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any

import attrs
import pytest
import trio

import trio_maint
import trio_maint.testing
from trio_maint import CrossSlotError, Endpoint, MaintConfig, key_slot
from trio_maint.testing import ClusterNode, LocalCluster

pytestmark = pytest.mark.trio

TASKS = 100
KEYS_PER_TASK = 8


@pytest.fixture
async def rc(redis_cluster: LocalCluster) -> AsyncIterator[trio_maint.RedisCluster]:
    async with trio_maint.open_redis_cluster(redis_cluster.url, pool_size=20) as client:
        await client.flushdb()
        yield client


def _owner(rc: trio_maint.RedisCluster, slot: int) -> str:
    """The name of ``slot``'s master in the client's map (it must have one)."""
    master = rc.slot_map.master(slot)
    assert master is not None, slot
    return master.name


def _other_master(cluster: LocalCluster, node: ClusterNode) -> ClusterNode:
    return next(m for m in cluster.masters if m is not node)


# ------------------------------------------------------------------------ basics


async def test_key_slot_matches_the_server(redis_cluster: LocalCluster) -> None:
    rng = random.Random(8)
    keys = [f"k{rng.random()}" for _ in range(40)] + ["{user1}.a", "x{}y", "a{b}c", "\u00e9"]
    node = redis_cluster.nodes[0]
    for key in keys:
        served = await trio.to_thread.run_sync(node.call, "CLUSTER", "KEYSLOT", key)
        assert key_slot(key) == served, key


async def test_routing_and_keyless_commands(rc: trio_maint.RedisCluster) -> None:
    for i in range(50):
        assert await rc.set(f"key:{i}", i)
    assert [await rc.get(f"key:{i}") for i in range(50)] == [str(i).encode() for i in range(50)]
    assert await rc.dbsize() == 50
    assert len(await rc.keys("key:*")) == 50
    assert await rc.ping()
    assert await rc.mset({"{u1}a": 1, "{u1}b": 2})
    assert await rc.mget("{u1}a", "{u1}b") == [b"1", b"2"]
    assert await rc.delete("{u1}a", "{u1}b") == 2
    # Routed from the server's key specs (tests/test_cluster_keyspecs.py has the GETKEYS path).
    await rc.execute_command("SET", "key:0", "zero")
    assert await rc.execute_command("GETSET", "key:0", "z") == b"zero"
    assert len(rc.slot_map.masters) == len(rc.nodes) == 3
    # Auto mode: each node refused CLIENT MAINT_NOTIFICATIONS (Redis 7.0) and went quiet.
    for node in rc.nodes.values():
        assert node.maintenance is not None
        assert node.maintenance.mode is trio_maint.MaintMode.DISABLED


async def test_cross_slot_error_before_sending(rc: trio_maint.RedisCluster) -> None:
    assert key_slot("a") != key_slot("b")
    with pytest.raises(CrossSlotError):
        await rc.mget("a", "b")
    with pytest.raises(CrossSlotError):
        await rc.mset({"a": 1, "b": 2})
    with pytest.raises(CrossSlotError):
        await rc.rename("a", "b")
    async with rc.pipeline(transaction=True) as pipe:
        pipe.set("a", 1).set("b", 2)
        with pytest.raises(CrossSlotError):
            await pipe.execute()
    assert await rc.get("a") is None  # nothing was sent


async def test_pipeline_across_nodes_in_order(rc: trio_maint.RedisCluster) -> None:
    keys = [f"p:{i}" for i in range(200)]
    assert len({rc.node_for_key(k) for k in keys}) == 3
    async with rc.pipeline() as pipe:
        for i, key in enumerate(keys):
            pipe.set(key, i)
        for key in keys:
            pipe.get(key)
        pipe.incr("p:0")
        results = await pipe.execute()
    assert results[:200] == [True] * 200
    assert results[200:400] == [str(i).encode() for i in range(200)]
    assert results[400] == 1
    async with rc.pipeline() as pipe:
        pipe.get("p:1").lpush("p:1", "x")  # WRONGTYPE for the second
        out = await pipe.execute(raise_on_error=False)
    assert out[0] == b"1" and isinstance(out[1], trio_maint.WrongTypeError)


async def test_transaction_in_one_slot(rc: trio_maint.RedisCluster) -> None:
    async with rc.pipeline(transaction=True) as pipe:
        pipe.set("{acct}a", 10).incrby("{acct}a", 5).get("{acct}a")
        assert await pipe.execute() == [True, 15, b"15"]


async def test_scan_iter_all_masters(rc: trio_maint.RedisCluster) -> None:
    keys = {f"s:{i}".encode() for i in range(300)}
    async with rc.pipeline() as pipe:
        for key in keys:
            pipe.set(key, 1)
        await pipe.execute()
    await rc.set("other", 1)
    found = {k async for k in rc.scan_iter(match="s:*", count=50)}
    assert found == keys


async def test_read_from_replicas(redis_cluster: LocalCluster) -> None:
    async with trio_maint.open_redis_cluster(redis_cluster.url, read_from_replicas=True) as rc:
        await rc.set("rr", "v")
        await trio.to_thread.run_sync(_wait_replicated, redis_cluster)
        for _ in range(5):
            assert await rc.get("rr") == b"v"
        replica = rc.slot_map.replicas(key_slot("rr"))[0].name
        node = rc.nodes[replica]
        assert node.pool.stats().created >= 1
        # Writes still go to the master.
        assert await rc.incr("rr:n") == 1


def _wait_replicated(cluster: LocalCluster) -> None:
    for master in cluster.masters:
        master.call("WAIT", 1, 2000)


# ------------------------------------------------------------------ workload under change


@attrs.define
class Workload:
    """100 tasks writing and reading back keys of every slot region."""

    rc: trio_maint.RedisCluster
    acked: dict[str, int] = attrs.Factory(dict)
    uncertain: dict[str, int] = attrs.Factory(dict)
    failures: list[tuple[float, str]] = attrs.Factory(list)
    ops: int = 0
    stop: trio.Event = attrs.Factory(trio.Event)

    def keys_of(self, task: int) -> list[str]:
        return [f"w:{task}:{i}" for i in range(KEYS_PER_TASK)]

    async def task(self, task: int) -> None:
        keys = self.keys_of(task)
        value = 0
        while not self.stop.is_set():
            key = keys[value % len(keys)]
            value += 1
            try:
                await self.rc.set(key, value)
                self.acked[key] = value
                got = await self.rc.get(key)
                if got != str(value).encode():
                    self.failures.append((trio.current_time(), f"{key}: read {got!r}"))
                if value % 5 == 0:
                    async with self.rc.pipeline() as pipe:
                        for k in keys[:4]:
                            pipe.get(k)
                        await pipe.execute()
                self.ops += 1
            except trio_maint.RedisError as exc:
                self.uncertain[key] = value
                notes = " ".join(getattr(exc, "__notes__", ()))
                self.failures.append((trio.current_time(), f"{key}: {exc!r} {notes}"))
                await trio.sleep(0.01)

    async def run(self, change: Any) -> tuple[float, float]:
        """Run the tasks, await ``change()`` meanwhile; returns its (start, end) times."""
        window = (0.0, 0.0)
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for task in range(TASKS):
                    nursery.start_soon(self.task, task)
                await trio.sleep(0.3)
                start = trio.current_time()
                await change()
                window = (start, trio.current_time())
                await trio.sleep(0.3)
                self.stop.set()
        return window

    async def check_no_write_lost(self) -> None:
        assert self.ops > TASKS
        for key, value in self.acked.items():
            got = await self.rc.get(key)
            allowed = {str(value).encode()}
            if key in self.uncertain:
                allowed.add(str(self.uncertain[key]).encode())
            assert got in allowed, (key, got, value)


def _slots_with_keys(cluster: LocalCluster, source: ClusterNode, count: int) -> list[int]:
    """Up to ``count`` of ``source``'s slots that hold workload keys, then others."""
    owned = set(cluster.slots_of(source))
    with_keys = sorted(
        {key_slot(f"w:{t}:{i}") for t in range(TASKS) for i in range(KEYS_PER_TASK)} & owned
    )
    chosen = with_keys[:count]
    chosen += [s for s in sorted(owned) if s not in set(chosen)][: count - len(chosen)]
    return chosen


async def test_slot_migration_plain_moved_ask(
    rc: trio_maint.RedisCluster, redis_cluster: LocalCluster
) -> None:
    """(b): slots migrate with no notifications at all: MOVED/ASK only, zero failures."""
    work = Workload(rc)
    source = redis_cluster.masters[0]
    target = _other_master(redis_cluster, source)

    async def change() -> None:
        slots = _slots_with_keys(redis_cluster, source, 60)
        await redis_cluster.migrate_slots_async(slots, source, target, batch=5, pause=0.3)
        await redis_cluster.migrate_slots_async(slots, target, source, batch=5)

    await work.run(change)
    assert not work.failures, work.failures[:5]
    await work.check_no_write_lost()
    assert rc.redirections["moved"] > 0


async def test_slot_migration_with_smigrating_smigrated(redis_cluster: LocalCluster) -> None:
    """(a): the same migration through maintenance simulators, with SMIGRATING before and
    SMIGRATED after: relaxed, restored, one refresh per seqID, zero failures."""
    async with (
        redis_cluster.simulators() as sims,
        trio_maint.open_redis_cluster(
            [sim.url for sim in sims.values()],
            pool_size=20,
            maintenance=MaintConfig(mode="enabled"),
        ) as rc,
    ):
        sim_names = {str(Endpoint(*sim.address)) for sim in sims.values()}
        assert {m.name for m in rc.slot_map.masters} <= sim_names
        work = Workload(rc)
        source = redis_cluster.masters[0]
        target = _other_master(redis_cluster, source)
        src_sim, dst_sim = sims[source.node_id], sims[target.node_id]
        src_name = str(Endpoint(*src_sim.address))
        dst_name = str(Endpoint(*dst_sim.address))
        observed: dict[str, Any] = {}

        async def change() -> None:
            slots = _slots_with_keys(redis_cluster, source, 60)
            spec = ",".join(str(s) for s in slots)
            await src_sim.inject_smigrating(seq_id=501, slots=spec)
            await trio.sleep(0.2)
            handler = rc.nodes[src_name].maintenance
            assert handler is not None
            observed["relaxed"] = handler.state.relaxed_connections
            await redis_cluster.migrate_slots_async(slots, source, target, batch=5, pause=0.2)
            before = rc.refreshes
            await src_sim.inject_smigrated([(src_name, dst_name, spec)], seq_id=502)
            await trio.sleep(0.3)
            observed["refreshes"] = rc.refreshes - before
            observed["smigrated"] = rc.smigrated_refreshes
            observed["owner"] = _owner(rc, slots[0])

        await work.run(change)
        assert not work.failures, work.failures[:5]
        await work.check_no_write_lost()
        assert observed["relaxed"] > 0
        # Every connection of the source got SMIGRATED; one refresh for seq 502.
        assert observed["smigrated"] == 1
        assert observed["refreshes"] >= 1
        assert observed["owner"] == dst_name
        # Idle connections read SMIGRATED when next borrowed: borrow them all, then every
        # relaxation is over.
        source_client = rc.nodes[src_name]
        async with trio.open_nursery() as nursery:
            for _ in range(20):
                nursery.start_soon(source_client.ping)
        assert source_client.maintenance is not None
        assert not source_client.maintenance.state.in_window
        assert source_client.maintenance.state.relaxed_connections == 0


async def test_failover_no_acknowledged_write_lost(
    rc: trio_maint.RedisCluster, redis_cluster: LocalCluster
) -> None:
    """(c): a master fails over to its replica (CLUSTER FAILOVER): failures only within
    the failover window, and every acknowledged write is there afterwards."""
    work = Workload(rc)
    master = redis_cluster.masters[1]

    async def change() -> None:
        await redis_cluster.failover_async(master)

    start, end = await work.run(change)
    late = [f for f in work.failures if not (start <= f[0] <= end + 1.0)]
    assert late == []
    await work.check_no_write_lost()


async def test_node_added_and_rebalanced(
    rc: trio_maint.RedisCluster, redis_cluster: LocalCluster
) -> None:
    """(d): a node joins and slots are rebalanced to it, then moved back and the node
    removed: zero failures."""
    work = Workload(rc)

    async def change() -> None:
        node = await redis_cluster.add_node_async()
        await redis_cluster.rebalance_async(node, 40, batch=10)
        assert len(redis_cluster.slots_of(node)) == 40 * (len(redis_cluster.masters) - 1)
        owners = [m for m in redis_cluster.masters if m is not node]
        slots = redis_cluster.slots_of(node)
        await redis_cluster.migrate_slots_async(slots, node, owners[0], batch=10)
        await redis_cluster.remove_node_async(node)

    await work.run(change)
    assert not work.failures, work.failures[:5]
    await work.check_no_write_lost()
    assert len(redis_cluster.masters) == 3


async def test_sharded_pubsub_follows_slot(
    rc: trio_maint.RedisCluster, redis_cluster: LocalCluster
) -> None:
    async with rc.pubsub(ignore_subscribe_messages=True) as ps:
        await ps.ssubscribe("news")
        await trio.sleep(0.1)
        assert await rc.spublish("news", "one") == 1
        message = await ps.get_message(timeout=5)
        assert message is not None and (message.type, message.data) == ("smessage", b"one")
        slot = key_slot("news")
        source = redis_cluster.master_of_slot(slot)
        target = _other_master(redis_cluster, source)
        await redis_cluster.migrate_slots_async([slot], source, target)
        with trio.fail_after(10):
            while ps.resubscriptions < 1:
                await trio.sleep(0.05)
        await trio.sleep(0.1)
        assert await rc.spublish("news", "two") == 1
        message = await ps.get_message(timeout=5)
        assert message is not None and message.data == b"two"
        await redis_cluster.migrate_slots_async([slot], target, source)


async def test_tryagain_is_retried_until_the_slot_settles(
    rc: trio_maint.RedisCluster, redis_cluster: LocalCluster
) -> None:
    """A multi-key command whose keys are split by a migration in progress gets TRYAGAIN;
    it is retried with backoff and succeeds once the slot has moved."""
    await rc.mset({"{ta}1": "a", "{ta}2": "b"})
    slot = key_slot("ta")
    source = redis_cluster.master_of_slot(slot)
    target = _other_master(redis_cluster, source)

    def half_migrate() -> None:
        target.call("CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id)
        source.call("CLUSTER", "SETSLOT", slot, "MIGRATING", target.node_id)
        source.call("MIGRATE", target.host, target.port, "", 0, 5000, "KEYS", "{ta}1")

    await trio.to_thread.run_sync(half_migrate)
    result: list[Any] = []

    async def read() -> None:
        result.append(await rc.mget("{ta}1", "{ta}2"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        with trio.fail_after(5):
            while rc.redirections["tryagain"] < 2:
                await trio.sleep(0.01)
        assert result == []
        await redis_cluster.migrate_slots_async([slot], source, target)
    assert result == [[b"a", b"b"]]


async def test_no_startup_node_answers() -> None:
    port = trio_maint.testing.free_port()
    with pytest.raises(trio_maint.ConnectionError, match="no cluster node answered"):
        async with trio_maint.open_redis_cluster(f"redis://127.0.0.1:{port}"):
            pass  # pragma: no cover
    with pytest.raises(ValueError):
        async with trio_maint.open_redis_cluster("redis://127.0.0.1:7000/3"):
            pass  # pragma: no cover
    with pytest.raises(ValueError, match="auto_pipeline is for a standalone client"):
        async with trio_maint.open_redis_cluster("redis://127.0.0.1:7000", auto_pipeline=True):
            pass  # pragma: no cover


async def test_transaction_follows_moved_and_ask(redis_cluster: LocalCluster) -> None:
    """A transaction whose slot is mid-migration gets ASK (EXECABORT, nothing ran): it is
    sent again to the target after ASKING; once the slot moved, a stale map meets MOVED
    and the transaction is sent to the new owner."""
    slot = key_slot("tx")
    async with trio_maint.open_redis_cluster(redis_cluster.url) as rc:
        await rc.set("{tx}a", 1)
        source = redis_cluster.master_of_slot(slot)
        target = _other_master(redis_cluster, source)

        def half_migrate() -> None:
            target.call("CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id)
            source.call("CLUSTER", "SETSLOT", slot, "MIGRATING", target.node_id)
            source.call("MIGRATE", target.host, target.port, "", 0, 5000, "KEYS", "{tx}a")

        await trio.to_thread.run_sync(half_migrate)
        async with rc.pipeline(transaction=True) as pipe:
            pipe.incr("{tx}a").get("{tx}a")
            assert await pipe.execute() == [2, b"2"]
        assert rc.redirections["ask"] == 1
        assert _owner(rc, slot) == source.name
        await redis_cluster.migrate_slots_async([slot], source, target)
        async with rc.pipeline(transaction=True) as pipe:
            pipe.incr("{tx}a")
            assert await pipe.execute() == [3]
        assert rc.redirections["moved"] == 1
        assert _owner(rc, slot) == target.name
        await redis_cluster.migrate_slots_async([slot], target, source)


async def test_cluster_slots_fallback(
    redis_cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server without CLUSTER SHARDS (Redis < 7): the map comes from CLUSTER SLOTS."""
    real = trio_maint.Redis.execute_command
    asked: list[Any] = []

    async def no_shards(self: trio_maint.Redis, *args: Any, **kwargs: Any) -> Any:
        asked.append(args)
        if args[:2] == ("CLUSTER", "SHARDS"):
            raise trio_maint.ResponseError("ERR unknown subcommand 'SHARDS'. Try CLUSTER HELP.")
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(trio_maint.Redis, "execute_command", no_shards)
    async with trio_maint.open_redis_cluster(redis_cluster.url) as rc:
        assert ("CLUSTER", "SLOTS") in asked
        assert rc.slot_map.covered == 16384
        assert {m.name for m in rc.slot_map.masters} == {m.name for m in redis_cluster.masters}
        await rc.set("fallback", 1)
        assert await rc.get("fallback") == b"1"


async def test_unplanned_failover_master_killed(redis_cluster: LocalCluster) -> None:
    """A master is killed (SIGKILL): commands for the whole cluster meet lost connections
    and CLUSTERDOWN until its replica is elected; they are retried within retry_timeout,
    so failures (if any) fall inside the failover window. Afterwards the replica is
    replaced, so the session cluster keeps its shape."""
    async with trio_maint.open_redis_cluster(
        redis_cluster.url, pool_size=20, retry_timeout=20.0
    ) as rc:
        await rc.flushdb()
        work = Workload(rc)
        master = redis_cluster.masters[0]
        promoted: list[ClusterNode] = []

        async def change() -> None:
            promoted.append(await redis_cluster.crash_async(master, timeout=20.0))

        start, end = await work.run(change)
        late = [f for f in work.failures if not (start <= f[0] <= end + 1.0)]
        assert late == []
        assert rc.redirections["connection"] + rc.redirections["clusterdown"] > 0
        # Every task kept writing and reading its own keys afterwards (checked in the
        # workload); writes the dead master had not replicated may be lost, as in Redis.
        assert await rc.set("after-crash", 1)
        await redis_cluster.add_node_async(replica_of=promoted[0])
