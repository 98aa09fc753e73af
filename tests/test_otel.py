"""trio_maint.otel (issue 16, item 1): metrics and spans through the OpenTelemetry SDK's
in-memory reader and exporter, after commands, pipelines and a scripted maintenance window
through the simulator (real redis-servers on loopback)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import trio

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode

import trio_maint
import trio_maint.otel
from trio_maint import MaintConfig, ResponseError, WrongTypeError
from trio_maint.testing import MaintenanceSimulator, RedisServer, free_port

pytestmark = pytest.mark.trio

TIMEOUT = 30.0


class Otel:
    """An SDK meter provider with an in-memory reader, and a tracer provider with an
    in-memory exporter."""

    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.meters = MeterProvider(metric_readers=[self.reader])
        self.exporter = InMemorySpanExporter()
        self.tracers = TracerProvider()
        self.tracers.add_span_processor(SimpleSpanProcessor(self.exporter))

    def instrument(self, client: Any, **kwargs: Any) -> trio_maint.otel.Instrumentation:
        return trio_maint.otel.instrument(
            client, meter_provider=self.meters, tracer_provider=self.tracers, **kwargs
        )

    def metrics(self) -> dict[str, Any]:
        """Every metric collected now, by name."""
        found = {}
        data = self.reader.get_metrics_data()
        assert data is not None
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                assert scope.scope.name == "trio_maint"
                for metric in scope.metrics:
                    found[metric.name] = metric
        return found

    def points(self, name: str, **match: Any) -> list[Any]:
        """Data points of ``name`` whose attributes include ``match`` (dots as ``__``)."""
        metric = self.metrics().get(name)
        if metric is None:
            return []
        wanted = {k.replace("__", "."): v for k, v in match.items()}
        return [
            p
            for p in metric.data.data_points
            if all(p.attributes.get(k) == v for k, v in wanted.items())
        ]

    def spans(self, prefix: str = "") -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name.startswith(prefix)]


@pytest.fixture
def otel() -> Iterator[Otel]:
    found = Otel()
    yield found
    found.meters.shutdown()
    found.tracers.shutdown()


@pytest.fixture(scope="module")
def backend() -> Iterator[RedisServer]:
    with RedisServer(extra_args=("--enable-debug-command", "yes")) as server:
        yield server


@pytest.fixture
async def sim_a(backend: RedisServer) -> AsyncIterator[MaintenanceSimulator]:
    async with MaintenanceSimulator(backend=backend) as sim:
        yield sim


@pytest.fixture
async def sim_b(backend: RedisServer) -> AsyncIterator[MaintenanceSimulator]:
    async with MaintenanceSimulator(backend=backend) as sim:
        yield sim


async def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.02)


async def warm_up(r: trio_maint.Redis, count: int) -> None:
    """Open ``count`` pooled connections (concurrent slow commands)."""
    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(r.execute_command, "DEBUG", "SLEEP", "0.05")
    assert len(r.pool.connections) == count


def telemetry_tasks() -> list[str]:
    """The names of the tasks of this run (system tasks included) that are telemetry's."""
    root = trio.lowlevel.current_root_task()
    assert root is not None
    found, stack = [], [root]
    while stack:
        task = stack.pop()
        if "telemetry" in task.name:
            found.append(task.name)
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return found


def observed(r: trio_maint.Redis) -> bool:
    """Whether ``r`` pays for an exporter: its observer, the pool's timed acquisition."""
    timed = "acquire_for_reply" in vars(r.pool)
    assert timed == (r._observer is not None)
    return timed


async def test_command_and_pool_metrics(r: trio_maint.Redis, otel: Otel) -> None:
    assert not observed(r)
    with otel.instrument(r) as handle:
        assert observed(r)
        await r.set("k", "v")
        assert await r.get("k") == b"v"
        with pytest.raises(WrongTypeError):
            await r.lpush("k", 1)
        with pytest.raises(ResponseError):
            await r.execute_command("NO-SUCH-COMMAND")
        async with r.pipeline(transaction=False) as pipe:
            pipe.set("a", 1).get("a")
            assert await pipe.execute() == [True, b"1"]
        async with r.pipeline() as pipe:
            pipe.incr("n").incr("n").incr("n")
            assert await pipe.execute() == [1, 2, 3]
        metric = otel.metrics()["db.client.operation.duration"]
        assert metric.unit == "s"
        points = {
            (p.attributes["db.operation.name"], p.attributes.get("error.type")): p
            for p in metric.data.data_points
        }
        assert set(points) == {
            ("SET", None),
            ("GET", None),
            ("LPUSH", "WrongTypeError"),
            ("OTHER", "ResponseError"),
            ("PIPELINE", None),
            ("MULTI", None),
        }
        get = points[("GET", None)]
        assert get.count == 1 and 0 < get.sum < 1.0
        server = r.pool.connections[0]
        assert dict(get.attributes) == {
            "db.system.name": "redis",
            "server.address": server.host,
            "server.port": server.port,
            "db.namespace": "9",
            "db.operation.name": "GET",
        }
        pool = f"{server.host}:{server.port}/9"
        [idle] = otel.points("db.client.connection.count", db__client__connection__state="idle")
        [used] = otel.points("db.client.connection.count", db__client__connection__state="used")
        assert idle.value == len(r.pool.idle_connections) and used.value == 0
        assert idle.attributes["db.client.connection.pool.name"] == pool
        [limit] = otel.points("db.client.connection.max")
        assert limit.value == r.options.pool_size
        [pending] = otel.points("db.client.connection.pending_requests")
        assert pending.value == 0
        [timeouts] = otel.points("db.client.connection.timeouts")
        assert timeouts.value == 0
        [waits] = otel.points("db.client.connection.wait_time")
        assert waits.count == 6 and waits.attributes["db.client.connection.pool.name"] == pool
        units = {name: m.unit for name, m in otel.metrics().items()}
        assert units["db.client.connection.wait_time"] == "s"
        assert units["db.client.connection.count"] == "{connection}"
        assert units["redis.client.connection.relaxed_timeout"] == "{relaxation}"
    assert handle.closed
    # Detached: the client is back to its one check, and nothing more is recorded.
    assert not observed(r)
    assert not r.maintenance.hooks
    await r.get("k")
    assert otel.points("db.client.operation.duration", db__operation__name="GET")[0].count == 1
    assert otel.points("db.client.connection.count") == []
    handle.close()  # idempotent


async def test_two_pools_of_one_endpoint_are_one_series(r: trio_maint.Redis, otel: Otel) -> None:
    # Two clients of the same host:port/db: one point per pool series, summed (as the
    # cache's); the SDK would otherwise keep one of two observations of a series.
    async with trio_maint.open_redis(r.options, pool_size=5) as other:
        with otel.instrument(r), otel.instrument(other):
            await r.ping()
            await other.ping()
            [limit] = otel.points("db.client.connection.max")
            assert limit.value == r.options.pool_size + 5
            [idle] = otel.points("db.client.connection.count", db__client__connection__state="idle")
            assert idle.value == 2


async def test_command_spans(r: trio_maint.Redis, otel: Otel) -> None:
    tracer = otel.tracers.get_tracer("test")
    with otel.instrument(r, spans=True):
        with tracer.start_as_current_span("request") as request:
            await r.set("k", "v")
            with pytest.raises(WrongTypeError):
                await r.lpush("k", 1)
        async with r.pipeline() as pipe:
            pipe.get("k").get("k")
            await pipe.execute()
    spans = {s.name: s for s in otel.spans() if s.name != "request"}
    assert set(spans) == {"SET", "LPUSH", "MULTI"}
    assert all(s.kind is SpanKind.CLIENT for s in spans.values())
    assert spans["SET"].parent is not None
    assert spans["SET"].parent.span_id == request.get_span_context().span_id
    assert spans["SET"].attributes is not None
    assert spans["SET"].attributes["db.operation.name"] == "SET"
    assert spans["LPUSH"].status.status_code is StatusCode.ERROR
    assert spans["LPUSH"].status.description == "WrongTypeError"
    assert spans["MULTI"].attributes is not None
    assert spans["MULTI"].attributes["db.operation.batch.size"] == 2
    assert spans["MULTI"].parent is None
    assert trace.get_current_span() is trace.INVALID_SPAN


async def test_maintenance_window_through_the_simulator(
    sim_a: MaintenanceSimulator, sim_b: MaintenanceSimulator, otel: Otel
) -> None:
    with trio.fail_after(TIMEOUT):
        async with trio_maint.open_redis(f"{sim_a.url}/3", pool_size=3) as r:
            await warm_up(r, 3)
            with otel.instrument(r):
                # MIGRATING then MIGRATED on every connection: one window.
                await sim_a.inject_migrating()
                await r.ping()
                await wait_for(lambda: r.maintenance.state.relaxed_connections == 3)
                [relaxed] = otel.points("redis.client.connection.relaxed_timeout")
                assert relaxed.value == 3
                await sim_a.inject_migrated()
                await wait_for(lambda: len(otel.spans("redis maintenance")) == 1)
                [migrating] = otel.spans("redis maintenance")
                assert migrating.name == "redis maintenance MIGRATING"
                assert migrating.parent is None and migrating.kind is SpanKind.INTERNAL
                names = [e.name for e in migrating.events]
                assert names.count("MIGRATING") == 3 and names.count("MIGRATED") == 3
                assert migrating.attributes is not None
                assert migrating.attributes["redis.client.maintenance.window.closed_by"] == (
                    "MIGRATED"
                )
                # MOVING to B: handed off, and the window lasts the MOVING's 2 s.
                await sim_a.inject_moving(time=2, target=sim_b)
                await r.ping()
                await wait_for(lambda: r.maintenance.state.completed_handoffs == 3)
                assert len(otel.spans("redis maintenance")) == 1
                await wait_for(lambda: len(otel.spans("redis maintenance")) == 2)
                moving = otel.spans("redis maintenance MOVING")[0]
                assert moving.end_time is not None and moving.start_time is not None
                assert 1.9 < (moving.end_time - moving.start_time) / 1e9 < 2.5
                events = [e.name for e in moving.events]
                assert events.count("handoff_succeeded") == 3
                assert "MOVING" in events and "handoff_queued" in events
                assert moving.attributes is not None
                assert moving.attributes["redis.client.maintenance.window.closed_by"] == (
                    "moving_time"
                )
                assert moving.attributes["redis.client.maintenance.window.handoffs_succeeded"] == 3
                by_type = {
                    p.attributes["redis.client.connection.notification"]: p.value
                    for p in otel.points("redis.client.maintenance.notifications")
                }
                assert by_type["MIGRATING"] == 3 and by_type["MIGRATED"] == 3
                assert by_type["MOVING"] >= 1
                metrics = otel.metrics()
                assert metrics["redis.client.maintenance.notifications"].unit == "{notification}"
                [handoffs] = otel.points("redis.client.connection.handoff")
                assert handoffs.value == 3
                assert handoffs.attributes["redis.client.connection.handoff.outcome"] == (
                    "succeeded"
                )
                [latency] = otel.points("redis.client.connection.handoff.duration")
                assert latency.count == 3 and metrics[
                    "redis.client.connection.handoff.duration"
                ].unit == ("s")
                windows = {
                    p.attributes["redis.client.maintenance.window.kind"]: p
                    for p in otel.points("redis.client.maintenance.window.duration")
                }
                assert set(windows) == {"MIGRATING", "MOVING"}
                assert 1.9 < windows["MOVING"].sum < 2.5
                [pending] = otel.points("redis.client.connection.handoff.pending")
                assert pending.value == 0
                # Commands now go to B; the pool is still named after A.
                await r.ping()
                [ping] = otel.points("db.client.operation.duration", db__operation__name="PING")
                assert ping.attributes["server.port"] == sim_a.port


async def test_breaker_and_failed_handoffs(sim_a: MaintenanceSimulator, otel: Otel) -> None:
    dead = ("127.0.0.1", free_port())
    config = MaintConfig(
        max_handoff_retries=1, handoff_timeout=1.0, circuit_breaker_failure_threshold=1
    )
    with trio.fail_after(TIMEOUT):
        async with trio_maint.open_redis(sim_a.url, pool_size=2, maintenance=config) as r:
            await warm_up(r, 2)
            with otel.instrument(r):
                await sim_a.inject_moving(time=2, target=dead)
                await r.ping()
                await wait_for(lambda: r.maintenance.state.failed_handoffs >= 1)
                changes = otel.points(
                    "redis.client.circuit_breaker.state_changes",
                    redis__client__circuit_breaker__state="open",
                )
                assert changes and changes[0].value >= 1
                failed = otel.points(
                    "redis.client.connection.handoff",
                    redis__client__connection__handoff__outcome="failed",
                )
                assert failed and failed[0].value >= 1
                await wait_for(lambda: len(otel.spans("redis maintenance")) == 1)
                [window] = otel.spans("redis maintenance MOVING")
                names = [e.name for e in window.events]
                assert "circuit_breaker_changed" in names and "handoff_failed" in names


async def test_a_window_open_at_close_ends_detached(
    sim_a: MaintenanceSimulator, otel: Otel
) -> None:
    with trio.fail_after(TIMEOUT):
        async with trio_maint.open_redis(sim_a.url) as r:
            await r.ping()
            handle = otel.instrument(r)
            await sim_a.inject_migrating()
            await r.ping()
            await wait_for(lambda: r.maintenance.state.relaxed_connections == 1)
            assert otel.spans("redis maintenance") == []
            handle.close()
            [window] = otel.spans("redis maintenance")
            assert window.attributes is not None
            assert window.attributes["redis.client.maintenance.window.closed_by"] == "detached"


async def test_a_window_open_when_the_client_closes_ends_with_it(
    sim_a: MaintenanceSimulator, otel: Otel
) -> None:
    # The handle is never closed: the client closing ends the window's span at once
    # (not at the backstop, 10 x relaxed_timeout later), saying why.
    config = MaintConfig(relaxed_timeout=5.0)
    with trio.fail_after(TIMEOUT):
        async with trio_maint.open_redis(sim_a.url, maintenance=config) as r:
            await r.ping()
            otel.instrument(r)
            await sim_a.inject_migrating()
            await r.ping()
            await wait_for(lambda: r.maintenance.state.relaxed_connections == 1)
            assert otel.spans("redis maintenance") == []
            closing = trio.current_time()
        [window] = otel.spans("redis maintenance")
        assert trio.current_time() - closing < 1.0
    assert window.attributes is not None
    assert window.attributes["redis.client.maintenance.window.closed_by"] == "client_closed"
    assert window.status.status_code is StatusCode.UNSET
    [length] = otel.points("redis.client.maintenance.window.duration")
    assert length.count == 1 and length.sum < 1.0


async def test_cluster(redis_cluster: Any, otel: Otel) -> None:
    other = MeterProvider()
    with trio.fail_after(TIMEOUT):
        async with trio_maint.open_redis_cluster(redis_cluster.url) as rc:
            never_closed = trio_maint.otel.instrument(rc, meter_provider=other)
            assert telemetry_tasks() == ["trio_maint telemetry timer"]
            with otel.instrument(rc):
                for i in range(20):
                    await rc.set(f"key:{i}", i)
                assert await rc.dbsize() >= 20  # on every master, through the nodes
                pipe = rc.pipeline()
                pipe.get("key:1").get("key:2")
                await pipe.execute()
            ports = {n.port for n in redis_cluster.masters}
            sets = otel.points("db.client.operation.duration", db__operation__name="SET")
            assert {p.attributes["server.port"] for p in sets} <= ports
            assert sum(p.count for p in sets) == 20
            dbsize = otel.points("db.client.operation.duration", db__operation__name="DBSIZE")
            assert {p.attributes["server.port"] for p in dbsize} == ports
            [pipeline] = otel.points("db.client.operation.duration", db__operation__name="PIPELINE")
            assert pipeline.count == 1
            waits = otel.points("db.client.connection.wait_time")
            assert len(waits) >= len(ports)
            nodes = list(rc.nodes.values())
    # The cluster closing closed the handle, and everything of it ended with the block.
    assert never_closed.closed
    assert rc._observer is None and all(node._observer is None for node in nodes)
    assert telemetry_tasks() == []
    other.shutdown()


async def test_instrument_refuses_what_it_cannot_observe(r: trio_maint.Redis) -> None:
    with pytest.raises(TypeError):
        trio_maint.otel.instrument(object())  # type: ignore[arg-type]
    async with trio_maint.open_redis(r.options) as other:
        pass
    with pytest.raises(RuntimeError, match="closed"):
        trio_maint.otel.instrument(other)
    assert other._observer is None
    provider = MeterProvider()
    with trio_maint.otel.instrument(r, meter_provider=provider):
        with pytest.raises(RuntimeError, match="already instrumented"):
            trio_maint.otel.instrument(r, meter_provider=provider)
    provider.shutdown()
