"""The client-side cache's metrics (issue 17, item 4): ``redis.client.csc.*`` through the
OpenTelemetry SDK's in-memory reader and a prometheus_client registry, for a caching client
against a real redis-server (hits, misses, an invalidation by another client's write, a
``clear()``, a MOVING through the simulator) and for the cluster client (one series per
node); the sans-IO mapping from ``CacheStats`` on its own."""

from __future__ import annotations

import ast
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

pytest.importorskip("opentelemetry.sdk")
prometheus_client = pytest.importorskip("prometheus_client")

from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import Gauge, InMemoryMetricReader, Sum  # noqa: E402

import trio_maint  # noqa: E402
import trio_maint.otel  # noqa: E402
import trio_maint.prometheus  # noqa: E402
from trio_maint import CacheConfig, CacheStats  # noqa: E402
from trio_maint._sansio import cache_machine  # noqa: E402
from trio_maint._sansio.telemetry import CACHE_METRICS, METRICS, Attributes, Kind  # noqa: E402
from trio_maint._sansio.telemetry_cache import (  # noqa: E402
    FLUSH_CAUSES,
    CacheSnapshot,
    cache_attributes,
    cache_observations,
)
from trio_maint.testing import LocalCluster, MaintenanceSimulator, RedisServer  # noqa: E402

TIMEOUT = 30.0

#: Metric name -> (kind, unit), as redis-py names them where it has them.
EXPECTED = {
    "redis.client.csc.requests": (Kind.OBSERVED_COUNTER, "{request}"),
    "redis.client.csc.bypassed": (Kind.OBSERVED_COUNTER, "{request}"),
    "redis.client.csc.items": (Kind.OBSERVED_GAUGE, "{item}"),
    "redis.client.csc.memory.usage": (Kind.OBSERVED_GAUGE, "By"),
    "redis.client.csc.evictions": (Kind.OBSERVED_COUNTER, "{eviction}"),
    "redis.client.csc.flushes": (Kind.OBSERVED_COUNTER, "{flush}"),
}


def stats(**fields: Any) -> CacheStats:
    """A :class:`CacheStats` with every counter 0 but ``fields``."""
    names = [a.name for a in attrs.fields(CacheStats)]
    base: dict[str, Any] = {name: ({} if name == "flushes" else 0) for name in names}
    base.update(fields)
    return CacheStats(**base)


# ------------------------------------------------------------------------ sans-IO


def test_specs() -> None:
    assert {m.name: (m.kind, m.unit) for m in CACHE_METRICS} == EXPECTED
    assert set(CACHE_METRICS) <= set(METRICS)
    names = {m.name: m for m in CACHE_METRICS}
    assert names["redis.client.csc.requests"].prometheus_name == "redis_client_csc_requests_total"
    assert names["redis.client.csc.memory.usage"].prometheus_name == (
        "redis_client_csc_memory_usage_bytes"
    )
    assert names["redis.client.csc.items"].prometheus_name == "redis_client_csc_items"
    for metric in CACHE_METRICS:
        assert "password" not in " ".join(metric.labels)
        assert metric.labels[:2] == ("db.system.name", "db.client.connection.pool.name")


def test_mapping_from_cache_stats() -> None:
    server: Attributes = {
        "db.system.name": "redis",
        "server.address": "10.0.0.1",
        "server.port": 7000,
    }
    base = cache_attributes(server, "10.0.0.1:7000/0")
    snap = CacheSnapshot(
        base,
        stats(
            hits=7,
            misses=3,
            bypassed=2,
            evictions=4,
            expirations=5,
            invalidations=6,
            flushed=9,
            entries=11,
            bytes=1234,
            flushes={"moving": 2, "clear": 1, "some_new_cause": 1, "another": 2},
        ),
    )
    points = {
        (m.name, tuple(sorted((k, v) for k, v in a.items() if k not in base))): v
        for m, v, a in cache_observations([snap])
    }
    assert points == {
        ("redis.client.csc.requests", (("redis.client.csc.result", "hit"),)): 7,
        ("redis.client.csc.requests", (("redis.client.csc.result", "miss"),)): 5,
        ("redis.client.csc.bypassed", ()): 2,
        ("redis.client.csc.items", ()): 11,
        ("redis.client.csc.memory.usage", ()): 1234,
        ("redis.client.csc.evictions", (("redis.client.csc.reason", "full"),)): 4,
        ("redis.client.csc.evictions", (("redis.client.csc.reason", "ttl"),)): 5,
        ("redis.client.csc.evictions", (("redis.client.csc.reason", "invalidation"),)): 6,
        ("redis.client.csc.evictions", (("redis.client.csc.reason", "flush"),)): 9,
        ("redis.client.csc.flushes", (("redis.client.csc.flush.cause", "clear"),)): 1,
        ("redis.client.csc.flushes", (("redis.client.csc.flush.cause", "moving"),)): 2,
        ("redis.client.csc.flushes", (("redis.client.csc.flush.cause", "other"),)): 3,
    }
    for _m, _v, a in cache_observations([snap]):
        assert {k: a[k] for k in base} == {
            **server,
            "db.client.connection.pool.name": "10.0.0.1:7000/0",
        }
    # Two caches with the same labels are one series (summed); another node is its own.
    other = CacheSnapshot(cache_attributes(server, "10.0.0.2:7000/0"), stats(hits=1))
    summed = {
        (m.name, a["db.client.connection.pool.name"], a.get("redis.client.csc.result")): v
        for m, v, a in cache_observations([snap, snap, other])
        if m.name == "redis.client.csc.requests"
    }
    assert summed == {
        ("redis.client.csc.requests", "10.0.0.1:7000/0", "hit"): 14,
        ("redis.client.csc.requests", "10.0.0.1:7000/0", "miss"): 10,
        ("redis.client.csc.requests", "10.0.0.2:7000/0", "hit"): 1,
        ("redis.client.csc.requests", "10.0.0.2:7000/0", "miss"): 0,
    }


def recorded_causes(source: str) -> set[str]:
    """The flush causes written in ``source``: the first argument of ``flush(...)`` /
    ``_flush(...)``, ``cause=...`` in a call, the default of a ``cause`` parameter, and
    the values of the ``_OPENING`` / ``_CLOSING`` tables."""
    found: set[str] = set()

    def text(node: ast.AST | None) -> None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(node.value)

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("flush", "_flush") and node.args:
                text(node.args[0])
            for keyword in node.keywords:
                if keyword.arg == "cause":
                    text(keyword.value)
        elif isinstance(node, ast.FunctionDef):
            args = node.args
            for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
                if arg.arg == "cause":
                    text(default)
        elif isinstance(node, ast.AnnAssign | ast.Assign) and isinstance(node.value, ast.Dict):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id in ("_OPENING", "_CLOSING") for t in targets):
                for value in node.value.values:
                    text(value)
    return found


def test_every_flush_cause_the_cache_records_is_a_label_value() -> None:
    """The causes the cache's decisions pass to its flushes are the bounded label set
    (:data:`FLUSH_CAUSES`): a new cause fails here before it would be reported as
    ``other``."""
    causes = recorded_causes(Path(cache_machine.__file__).read_text())
    assert causes >= {"moving", "clear", "slot_moved", "tracking_lost", "migrating", "migrated"}
    assert causes == FLUSH_CAUSES, causes ^ FLUSH_CAUSES


# ------------------------------------------------------------------ real servers


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer() as srv:
        yield srv


@pytest.fixture
async def other(server: RedisServer) -> AsyncIterator[trio_maint.Redis]:
    """Another client (no cache), the writer; the data flushed first."""
    async with trio_maint.open_redis(server.url) as w:
        await w.flushall()
        yield w


async def ready(r: trio_maint.Redis) -> trio_maint.ClientCache:
    """``r``'s cache once its tracking connection is up."""
    cache = r.cache
    assert cache is not None
    await wait_for(lambda: cache.machine.serving)
    return cache


async def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.01)


class OtelReader:
    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.provider = MeterProvider(metric_readers=[self.reader])

    def collect(self) -> dict[str, Any]:
        data = self.reader.get_metrics_data()
        assert data is not None
        return {
            m.name: m
            for rm in data.resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.name.startswith("redis.client.csc.")
        }


def values(metric: Any, label: str | None = None) -> dict[Any, int]:
    return {(p.attributes.get(label) if label else None): p.value for p in metric.data.data_points}


@pytest.mark.trio
async def test_otel_hits_misses_invalidation_and_clear(
    server: RedisServer, other: trio_maint.Redis
) -> None:
    otel = OtelReader()
    await other.set("a", "1")
    await other.set("b", "2")
    with trio.fail_after(TIMEOUT):
        async with trio_maint.open_redis(server.url, cache=CacheConfig()) as r:
            cache = await ready(r)
            with trio_maint.otel.instrument(r, meter_provider=otel.provider):
                assert await r.get("a") == b"1"  # miss
                assert await r.get("a") == b"1"  # hit
                assert await r.get("a") == b"1"  # hit
                assert await r.get("b") == b"2"  # miss
                assert await r.get("missing") is None  # miss
                await r.set("not-cacheable", "x")  # not a cacheable read: not counted
                await other.set("a", "3")  # another client's write
                assert await cache.sync()
                assert await r.get("a") == b"3"  # miss (invalidated)
                assert await r.get("a") == b"3"  # hit
                found = otel.collect()
                # No flush yet: the flush causes appear once counted.
                assert set(found) == set(EXPECTED) - {"redis.client.csc.flushes"}
                requests = found["redis.client.csc.requests"]
                assert values(requests, "redis.client.csc.result") == {"hit": 3, "miss": 4}
                [point] = found["redis.client.csc.items"].data.data_points
                assert point.value == 3 == cache.stats().entries
                assert dict(point.attributes) == {
                    "db.system.name": "redis",
                    "db.client.connection.pool.name": f"127.0.0.1:{server.port}/0",
                    "server.address": "127.0.0.1",
                    "server.port": server.port,
                }
                [memory] = found["redis.client.csc.memory.usage"].data.data_points
                assert memory.value == cache.stats().bytes > 3 * 240
                evictions = values(found["redis.client.csc.evictions"], "redis.client.csc.reason")
                assert evictions == {"full": 0, "ttl": 0, "invalidation": 1, "flush": 0}
                assert r.cache is not None and r.cache.clear() == 3
                found = otel.collect()
                assert set(found) == set(EXPECTED)
                for name, (kind, unit) in EXPECTED.items():
                    assert found[name].unit == unit, name
                    expected_type = Gauge if kind is Kind.OBSERVED_GAUGE else Sum
                    assert isinstance(found[name].data, expected_type), name
                    if kind is Kind.OBSERVED_COUNTER:
                        assert found[name].data.is_monotonic, name
                flushes = values(found["redis.client.csc.flushes"], "redis.client.csc.flush.cause")
                assert flushes == {"clear": 1}
                evictions = values(found["redis.client.csc.evictions"], "redis.client.csc.reason")
                assert evictions == {"full": 0, "ttl": 0, "invalidation": 1, "flush": 3}
                assert values(found["redis.client.csc.items"]) == {None: 0}
                assert values(found["redis.client.csc.memory.usage"]) == {None: 0}
                assert values(found["redis.client.csc.bypassed"]) == {None: 0}
                # Cumulative: the counters are the totals, read again unchanged.
                again = otel.collect()
                assert values(again["redis.client.csc.requests"], "redis.client.csc.result") == {
                    "hit": 3,
                    "miss": 4,
                }
    otel.provider.shutdown()


@pytest.mark.trio
async def test_uninstrumented_and_uncached_clients_pay_nothing(
    server: RedisServer, other: trio_maint.Redis
) -> None:
    """A client without caching has no csc series; a cached one that is not instrumented
    keeps no observer (its command path is the same single check)."""
    otel = OtelReader()
    with trio.fail_after(TIMEOUT):
        async with trio_maint.open_redis(server.url, cache=CacheConfig()) as cached:
            await ready(cached)
            assert cached._observer is None
            await cached.get("a")
            assert cached._observer is None
            with trio_maint.otel.instrument(other, meter_provider=otel.provider):
                await other.get("a")
                found = otel.collect()
                assert all(not m.data.data_points for m in found.values()), found
    otel.provider.shutdown()


def sample(registry: Any, name: str, **labels: str) -> float | None:
    found = registry.get_sample_value(name, labels)
    return None if found is None else float(found)


@pytest.mark.trio
async def test_prometheus_through_a_moving(server: RedisServer, other: trio_maint.Redis) -> None:
    registry = prometheus_client.CollectorRegistry()
    await other.set("k", "v")
    with trio.fail_after(TIMEOUT):
        async with (
            MaintenanceSimulator(backend=server) as a,
            MaintenanceSimulator(backend=server, host="127.0.0.2", port=a.port) as b,
            trio_maint.open_redis(a.url, cache=CacheConfig()) as r,
        ):
            cache = await ready(r)
            with trio_maint.prometheus.instrument(r, registry=registry):
                labels = {
                    "db_system_name": "redis",
                    "db_client_connection_pool_name": f"127.0.0.1:{a.port}/0",
                    "server_address": "127.0.0.1",
                    "server_port": str(a.port),
                }
                for _ in range(3):
                    assert await r.get("k") == b"v"
                requests = "redis_client_csc_requests_total"
                assert sample(registry, requests, **labels, redis_client_csc_result="hit") == 2
                assert sample(registry, requests, **labels, redis_client_csc_result="miss") == 1
                assert sample(registry, "redis_client_csc_items", **labels) == 1
                assert sample(registry, "redis_client_csc_memory_usage_bytes", **labels) == (
                    cache.stats().bytes
                )
                await a.inject_moving(time=2, target=b)
                await wait_for(lambda: cache.stats().flushes.get("moving", 0) >= 1)
                await wait_for(lambda: cache.machine.serving)
                assert await r.get("k") == b"v"
                # Everything the registry reports is what stats() says, at the same moment.
                text = prometheus_client.generate_latest(registry).decode()
                st = cache.stats()
                flushes = "redis_client_csc_flushes_total"
                for cause, count in st.flushes.items():
                    assert sample(
                        registry, flushes, **labels, redis_client_csc_flush_cause=cause
                    ) == (count)
                assert st.flushes.get("moving", 0) >= 1
                assert (
                    sample(registry, requests, **labels, redis_client_csc_result="hit") == st.hits
                )
                assert sample(registry, requests, **labels, redis_client_csc_result="miss") == (
                    st.misses + st.bypassed
                )
                assert sample(registry, "redis_client_csc_bypassed_total", **labels) == st.bypassed
                evictions = "redis_client_csc_evictions_total"
                assert (
                    sample(registry, evictions, **labels, redis_client_csc_reason="flush")
                    == (st.flushed)
                    >= 1
                )
                assert sample(registry, "redis_client_csc_items", **labels) == st.entries
    for name in ("redis_client_csc_requests_total", "redis_client_csc_evictions_total"):
        assert f"# TYPE {name} counter" in text
    assert "# TYPE redis_client_csc_items gauge" in text
    assert "# TYPE redis_client_csc_memory_usage_bytes gauge" in text
    # Closed with the client: no cache series of it is left.
    assert sample(registry, "redis_client_csc_items", **labels) is None


@pytest.mark.trio
async def test_cluster_one_series_per_node(redis_cluster: LocalCluster) -> None:
    registry = prometheus_client.CollectorRegistry()
    keys = [f"csc-telemetry:{i}" for i in range(12)]
    with trio.fail_after(TIMEOUT):
        async with trio_maint.open_redis_cluster(redis_cluster.url) as w:
            for key in keys:
                await w.set(key, "1")
        async with trio_maint.open_redis_cluster(redis_cluster.url, cache=CacheConfig()) as rc:
            with trio_maint.prometheus.instrument(rc, registry=registry):

                def caches() -> dict[str, trio_maint.ClientCache]:
                    return {n: c.cache for n, c in rc.nodes.items() if c.cache is not None}

                # Nodes' clients start as the cluster client first needs them (after
                # instrumenting: they are observed as they start); reads before a node's
                # tracking connection is up go around its cache.
                with trio.fail_after(10):
                    while sum(c.stats().entries for c in caches().values()) < len(keys):
                        for key in keys:
                            assert await rc.get(key) == b"1"
                for key in keys:
                    assert await rc.get(key) == b"1"  # hits
                nodes = {rc.node_for_key(k) for k in keys}
                assert len(nodes) >= 2
                seen = 0
                with_hits = 0
                for name, cache in caches().items():
                    host, port = rc.nodes[name].options.host, rc.nodes[name].options.port
                    labels = {
                        "db_system_name": "redis",
                        "db_client_connection_pool_name": f"{host}:{port}/0",
                        "server_address": host,
                        "server_port": str(port),
                    }
                    st = cache.stats()
                    hits = sample(
                        registry,
                        "redis_client_csc_requests_total",
                        **labels,
                        redis_client_csc_result="hit",
                    )
                    assert hits == st.hits
                    assert sample(registry, "redis_client_csc_items", **labels) == st.entries
                    seen += st.hits
                    with_hits += bool(hits)
                assert seen == sum(c.stats().hits for c in caches().values()) >= len(keys)
                assert with_hits == len(nodes)
