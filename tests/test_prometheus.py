"""trio_maint.prometheus (issue 16, item 2): the metrics on a user's CollectorRegistry
after commands and a scripted maintenance window through the simulator (real
redis-servers on loopback); two clients and two exporters at once; refused registries."""

from __future__ import annotations

import contextlib
import gc
import weakref
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import trio

prometheus_client = pytest.importorskip("prometheus_client")

import trio_maint  # noqa: E402
import trio_maint.prometheus  # noqa: E402
from trio_maint._sansio.telemetry import MAX_ENDPOINTS  # noqa: E402
from trio_maint.testing import MaintenanceSimulator, RedisServer  # noqa: E402

pytestmark = pytest.mark.trio

TIMEOUT = 30.0
PASSWORD = "s3cret-do-not-print"
#: Clients of distinct endpoints (databases of one server): past MAX_ENDPOINTS.
MANY = MAX_ENDPOINTS + 6


@pytest.fixture(scope="module")
def backend() -> Iterator[RedisServer]:
    args = ("--requirepass", PASSWORD, "--databases", str(MANY))
    with RedisServer(extra_args=args) as server:
        yield server


@pytest.fixture
async def sim_a(backend: RedisServer) -> AsyncIterator[MaintenanceSimulator]:
    async with MaintenanceSimulator(backend=backend) as sim:
        yield sim


@pytest.fixture
async def sim_b(backend: RedisServer) -> AsyncIterator[MaintenanceSimulator]:
    async with MaintenanceSimulator(backend=backend) as sim:
        yield sim


def url(sim: MaintenanceSimulator, db: int = 2) -> str:
    return f"redis://:{PASSWORD}@127.0.0.1:{sim.port}/{db}"


def observer(r: trio_maint.Redis) -> object:
    return r._observer


async def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.02)


class Scrape:
    """Sample values of one registry."""

    def __init__(self, registry: Any, pool: str, port: int) -> None:
        self.registry = registry
        self.pool = {"db_system_name": "redis", "db_client_connection_pool_name": pool}
        self.server = {
            "db_system_name": "redis",
            "server_address": "127.0.0.1",
            "server_port": str(port),
        }

    def value(self, name: str, labels: dict[str, str]) -> float | None:
        found = self.registry.get_sample_value(name, labels)
        return None if found is None else float(found)

    def op(self, suffix: str, name: str, error: str = "") -> float | None:
        labels = {**self.server, "db_namespace": "2", "db_operation_name": name}
        return self.value(
            f"db_client_operation_duration_seconds_{suffix}", {**labels, "error_type": error}
        )

    def gauge(self, name: str, **labels: str) -> float | None:
        return self.value(name, {**self.pool, **labels})

    def notifications(self, kind: str) -> float | None:
        labels = {**self.server, "redis_client_connection_notification": kind}
        return self.value("redis_client_maintenance_notifications_total", labels)


async def test_metrics_after_a_maintenance_window(
    sim_a: MaintenanceSimulator, sim_b: MaintenanceSimulator
) -> None:
    registry = prometheus_client.CollectorRegistry()
    scrape = Scrape(registry, f"127.0.0.1:{sim_a.port}/2", sim_a.port)
    with trio.fail_after(TIMEOUT):
        async with trio_maint.open_redis(url(sim_a), pool_size=2) as r:
            with trio_maint.prometheus.instrument(r, registry=registry):
                await r.set("k", "v")
                await r.get("k")
                with pytest.raises(trio_maint.WrongTypeError):
                    await r.lpush("k", 1)
                async with r.pipeline() as pipe:
                    pipe.get("k").get("k")
                    await pipe.execute()
                assert scrape.op("count", "SET") == 1
                assert scrape.op("count", "LPUSH", "WrongTypeError") == 1
                assert scrape.op("count", "MULTI") == 1
                assert 0 < (scrape.op("sum", "GET") or 0) < 1
                assert scrape.gauge("db_client_connection_max") == 2
                assert scrape.gauge("db_client_connection_count", db_client_connection_state="idle")
                assert scrape.gauge("db_client_connection_timeouts_total") == 0
                assert scrape.gauge("db_client_connection_wait_time_seconds_count") == 4
                assert scrape.gauge("db_client_connection_create_time_seconds_count") == 1
                # A window: MIGRATING, MIGRATED, then MOVING to B with a handoff.
                await sim_a.inject_migrating()
                await r.ping()
                await wait_for(lambda: r.maintenance.state.relaxed_connections == 1)
                assert scrape.gauge("redis_client_connection_relaxed_timeout") == 1
                await sim_a.inject_migrated()
                await r.ping()
                await sim_a.inject_moving(time=1, target=sim_b)
                await r.ping()
                await wait_for(lambda: r.maintenance.state.completed_handoffs == 1)
                windows = "redis_client_maintenance_window_duration_seconds_count"
                moving = {**scrape.server, "redis_client_maintenance_window_kind": "MOVING"}
                await wait_for(lambda: scrape.value(windows, moving) == 1)
                migrating = {**moving, "redis_client_maintenance_window_kind": "MIGRATING"}
                assert scrape.value(windows, migrating) == 1
                assert scrape.notifications("MIGRATING") == 1
                assert scrape.notifications("MIGRATED") == 1
                assert scrape.notifications("MOVING") == 1
                outcome = {"redis_client_connection_handoff_outcome": "succeeded"}
                assert scrape.gauge("redis_client_connection_handoff_total", **outcome) == 1
                latency = "redis_client_connection_handoff_duration_seconds_count"
                assert scrape.gauge(latency, **outcome) == 1
                assert scrape.gauge("redis_client_connection_handoff_pending") == 0
                text = prometheus_client.generate_latest(registry).decode()
    for name in trio_maint.prometheus.metric_names():
        assert f"# HELP {name} " in text, name
    assert "# TYPE db_client_operation_duration_seconds histogram" in text
    assert "# TYPE redis_client_connection_handoff_total counter" in text
    assert PASSWORD not in text
    # Closed with the client: no gauge of it is left.
    assert scrape.gauge("db_client_connection_max") is None
    assert scrape.op("count", "SET") == 1


def exposed_series(registry: Any) -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    """Every sample of the registry's text exposition, parsed back: (name, labels)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = prometheus_client.generate_latest(registry).decode()
    return [
        (sample.name, tuple(sorted(sample.labels.items())))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


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


async def test_handles_never_closed_end_with_their_clients(backend: RedisServer) -> None:
    # instrument() without `with` and without close(), on short-lived clients: each
    # handle closes when its client does; no task outlives the client's block, and
    # neither the registry nor the meter provider keeps a closed client reachable.
    otel = pytest.importorskip("opentelemetry.sdk.metrics")
    import trio_maint.otel

    registry = prometheus_client.CollectorRegistry()
    meters = otel.MeterProvider()
    address = f"redis://:{PASSWORD}@127.0.0.1:{backend.port}/2"
    scrape = Scrape(registry, f"127.0.0.1:{backend.port}/2", backend.port)
    refs: list[weakref.ref[trio_maint.Redis]] = []
    with trio.fail_after(TIMEOUT):
        for _ in range(20):
            async with trio_maint.open_redis(address) as r:
                handle = trio_maint.prometheus.instrument(r, registry=registry)
                trio_maint.otel.instrument(r, meter_provider=meters)  # the handle dropped
                await r.ping()
                assert telemetry_tasks() == ["trio_maint telemetry timer"]
            assert telemetry_tasks() == []  # at once: it ended inside the block
            assert handle.closed and observer(r) is None
            handle.close()  # still idempotent
            refs.append(weakref.ref(r))
            del r, handle
        # A client whose block is cancelled from outside closes its handle as well.
        with trio.CancelScope() as outside:
            async with trio_maint.open_redis(address) as r:
                handle = trio_maint.prometheus.instrument(r, registry=registry)
                await r.ping()
                outside.cancel()
                await trio.sleep_forever()
        assert handle.closed and telemetry_tasks() == []
        refs.append(weakref.ref(r))
        del r, handle
    gc.collect()
    assert [ref for ref in refs if ref() is not None] == []
    assert scrape.gauge("db_client_connection_max") is None
    assert scrape.op("count", "PING") == 21  # what was recorded stays
    meters.shutdown()


async def test_two_pools_of_one_endpoint_are_one_series(backend: RedisServer) -> None:
    # Two clients of the same host:port/db on one registry: their pools have the same
    # name, so their gauges are summed into one series (as the cache's are); reporting
    # both would expose duplicate series, which a Prometheus server rejects.
    registry = prometheus_client.CollectorRegistry()
    address = f"127.0.0.1:{backend.port}/2"
    scrape = Scrape(registry, address, backend.port)
    with trio.fail_after(TIMEOUT):
        async with (
            trio_maint.open_redis(f"redis://:{PASSWORD}@{address}", pool_size=3) as a,
            trio_maint.open_redis(f"redis://:{PASSWORD}@{address}", pool_size=5) as b,
        ):
            with (
                trio_maint.prometheus.instrument(a, registry=registry),
                trio_maint.prometheus.instrument(b, registry=registry),
            ):
                await a.ping()
                await b.ping()
                found = exposed_series(registry)
                twice = [key for key, n in Counter(found).items() if n > 1]
                assert twice == []
                assert scrape.gauge("db_client_connection_max") == 8
                idle = scrape.gauge("db_client_connection_count", db_client_connection_state="idle")
                assert idle == 2
                assert scrape.gauge("db_client_connection_create_time_seconds_count") == 2


async def test_two_clients_and_two_exporters(sim_a: MaintenanceSimulator) -> None:
    otel = pytest.importorskip("opentelemetry.sdk.metrics")
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    import trio_maint.otel

    registry = prometheus_client.CollectorRegistry()
    reader = InMemoryMetricReader()
    meters = otel.MeterProvider(metric_readers=[reader])
    with trio.fail_after(TIMEOUT):
        async with (
            trio_maint.open_redis(url(sim_a, 2)) as r2,
            trio_maint.open_redis(url(sim_a, 3)) as r3,
        ):
            with trio_maint.prometheus.instrument(r2, registry=registry) as prom2:
                trio_maint.prometheus.instrument(r3, registry=registry)
                otel_handle = trio_maint.otel.instrument(r2, meter_provider=meters)
                await r2.ping()
                await r3.ping()
                for db, client in ((2, r2), (3, r3)):
                    scrape = Scrape(registry, f"127.0.0.1:{sim_a.port}/{db}", sim_a.port)
                    assert scrape.gauge("db_client_connection_max") == client.options.pool_size
                labels = {"db_system_name": "redis", "server_address": "127.0.0.1"}
                labels.update(server_port=str(sim_a.port), db_operation_name="PING")
                labels.update(error_type="")
                sample = "db_client_operation_duration_seconds_count"
                assert registry.get_sample_value(sample, {**labels, "db_namespace": "3"}) == 1
                assert registry.get_sample_value(sample, {**labels, "db_namespace": "2"}) == 1
            # Prometheus detached from r2; OpenTelemetry still records it.
            assert prom2.closed and observer(r2) is not None
            await r2.ping()
            assert registry.get_sample_value(sample, {**labels, "db_namespace": "2"}) == 1
            data = reader.get_metrics_data()
            assert data is not None
            [duration] = [
                m
                for rm in data.resource_metrics
                for sm in rm.scope_metrics
                for m in sm.metrics
                if m.name == "db.client.operation.duration"
            ]
            assert [getattr(p, "count", None) for p in duration.data.data_points] == [2]
            otel_handle.close()
            assert observer(r2) is None
            meters.shutdown()


async def test_a_registry_whose_names_are_taken_is_refused(r: trio_maint.Redis) -> None:
    registry = prometheus_client.CollectorRegistry()
    prometheus_client.Counter("redis_client_connection_handoff", "taken", registry=registry)
    with pytest.raises(ValueError, match="Duplicated"):
        trio_maint.prometheus.instrument(r, registry=registry)
    assert r._observer is None
    with pytest.raises(TypeError):
        trio_maint.prometheus.instrument("redis://localhost", registry=registry)  # type: ignore[arg-type]
    mine = prometheus_client.CollectorRegistry()
    with trio_maint.prometheus.instrument(r, registry=mine):
        with pytest.raises(RuntimeError, match="already instrumented"):
            trio_maint.prometheus.instrument(r, registry=mine)
    with trio_maint.prometheus.instrument(r, registry=mine):  # again, once closed
        await r.ping()


async def test_endpoints_are_bounded_per_exporter(backend: RedisServer) -> None:
    # MANY clients, each its own endpoint (a database of one server), on ONE registry and
    # ONE meter provider: each exporter labels at most MAX_ENDPOINTS endpoints apart,
    # whichever client they come from; the later ones are OTHER in server.address,
    # db.namespace and the pool name alike, their pools one summed series.
    otel = pytest.importorskip("opentelemetry.sdk.metrics")
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    import trio_maint.otel

    registry = prometheus_client.CollectorRegistry()
    reader = InMemoryMetricReader()
    meters = otel.MeterProvider(metric_readers=[reader])
    with trio.fail_after(TIMEOUT):
        async with contextlib.AsyncExitStack() as stack:
            clients = []
            for db in range(MANY):
                address = f"redis://:{PASSWORD}@127.0.0.1:{backend.port}/{db}"
                r = await stack.enter_async_context(trio_maint.open_redis(address, pool_size=2))
                stack.enter_context(trio_maint.prometheus.instrument(r, registry=registry))
                stack.enter_context(trio_maint.otel.instrument(r, meter_provider=meters))
                clients.append(r)
            for r in clients:
                await r.ping()
            # Prometheus, the exposition parsed back.
            found = exposed_series(registry)
            assert [key for key, n in Counter(found).items() if n > 1] == []
            endpoints, pools = set(), set()
            for name, labels in found:
                values = dict(labels)
                if name.startswith("db_client_operation_duration_seconds"):
                    endpoints.add(
                        (values["server_address"], values["server_port"], values["db_namespace"])
                    )
                if "db_client_connection_pool_name" in values:
                    pools.add(values["db_client_connection_pool_name"])
            assert len(endpoints) == MAX_ENDPOINTS + 1 and ("OTHER", "", "OTHER") in endpoints
            assert len(pools) == MAX_ENDPOINTS + 1 and "OTHER" in pools
            other_pool = {"db_system_name": "redis", "db_client_connection_pool_name": "OTHER"}
            late = MANY - MAX_ENDPOINTS
            assert registry.get_sample_value("db_client_connection_max", other_pool) == 2 * late
            waits = "db_client_connection_wait_time_seconds_count"
            assert registry.get_sample_value(waits, other_pool) == late
            # OpenTelemetry, the same bound on its own.
            data = reader.get_metrics_data()
            assert data is not None
            metrics = {
                m.name: m
                for rm in data.resource_metrics
                for sm in rm.scope_metrics
                for m in sm.metrics
            }
            ops = [
                dict(p.attributes or {})
                for p in metrics["db.client.operation.duration"].data.data_points
            ]
            seen = {(a["server.address"], a.get("server.port"), a["db.namespace"]) for a in ops}
            assert len(seen) == MAX_ENDPOINTS + 1 and ("OTHER", None, "OTHER") in seen
            for name in ("db.client.connection.wait_time", "db.client.connection.max"):
                points = metrics[name].data.data_points
                named = {dict(p.attributes or {})["db.client.connection.pool.name"] for p in points}
                assert len(named) == MAX_ENDPOINTS + 1 and "OTHER" in named, name
    meters.shutdown()
