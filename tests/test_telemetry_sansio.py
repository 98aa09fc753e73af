"""The sans-IO side of the exporters (issue 16): metric names and labels
(_sansio/telemetry.py), maintenance windows (_sansio/telemetry_window.py), and the circuit
breakers' change listener. No Trio, no OpenTelemetry, no prometheus_client."""

from __future__ import annotations

import json

import trio_maint
from trio_maint import (
    CircuitBreakerChanged,
    HandoffFailed,
    HandoffQueued,
    HandoffSucceeded,
    MaintenanceDisabled,
    MalformedNotification,
    Migrated,
    Migrating,
    Moving,
    MovingStarted,
    NotificationReceived,
    TimeoutError,
    WrongTypeError,
)
from trio_maint._sansio.breaker import BreakerRegistry, BreakerState, CircuitBreaker
from trio_maint._sansio.endpoint import Endpoint
from trio_maint._sansio.notifications import Notification
from trio_maint._sansio.telemetry import (
    BREAKER_CHANGES,
    CACHE_METRICS,
    HANDOFF_DURATION,
    HANDOFFS,
    METRICS,
    NOTIFICATIONS,
    OBSERVED_KINDS,
    OTHER,
    OTHER_SERVER,
    WINDOW_DURATION,
    Attributes,
    Kind,
    OperationLabels,
    PoolSnapshot,
    ServerKey,
    endpoint_key,
    error_type,
    operation_name,
    pool_name,
    pool_observations,
)
from trio_maint._sansio.telemetry_window import (
    Count,
    MaintenanceTelemetry,
    Observe,
    Output,
    WindowClosed,
    WindowEvent,
    WindowOpened,
)
from trio_maint._sansio.timeouts import RelaxedTimeouts

SERVER: Attributes = {"db.system.name": "redis", "server.address": "127.0.0.1", "server.port": 6379}
POOL: Attributes = {"db.system.name": "redis", "db.client.connection.pool.name": "127.0.0.1:6379/0"}


def test_histogram_left_the_public_api() -> None:
    assert not hasattr(trio_maint, "Histogram")
    assert "Histogram" not in trio_maint.__all__
    assert "CircuitBreakerChanged" in trio_maint.__all__


def test_metric_names_units_and_prometheus_names() -> None:
    names = {m.name: m for m in METRICS}
    assert len(names) == len(METRICS)
    duration = names["db.client.operation.duration"]
    assert duration.unit == "s" and duration.kind is Kind.HISTOGRAM
    assert duration.prometheus_name == "db_client_operation_duration_seconds"
    assert "db_operation_name" in duration.prometheus_labels
    assert names["redis.client.connection.handoff"].prometheus_name == (
        "redis_client_connection_handoff_total"
    )
    assert names["db.client.connection.count"].prometheus_name == "db_client_connection_count"
    assert names["db.client.connection.timeouts"].prometheus_name == (
        "db_client_connection_timeouts_total"
    )
    for metric in METRICS:
        assert metric.description and metric.labels[0] == "db.system.name"
        assert bool(metric.buckets) == (metric.kind is Kind.HISTOGRAM)
        if metric.unit == "s":
            assert metric.kind is Kind.HISTOGRAM


def test_operation_names_are_bounded() -> None:
    assert operation_name("get") == "GET"
    assert operation_name(b"HSET") == "HSET"
    assert operation_name("client") == "CLIENT"
    assert operation_name("no-such-command") == OTHER
    assert operation_name(b"\xff\xfe") == OTHER
    assert operation_name(123) == OTHER
    for i in range(2000):  # the cache stays bounded
        assert operation_name(f"key:{i}") == OTHER


def test_error_types_are_class_names() -> None:
    assert error_type(TimeoutError("x")) == "TimeoutError"
    assert error_type(WrongTypeError("WRONGTYPE secret value")) == "WrongTypeError"
    assert error_type(KeyboardInterrupt()) == "KeyboardInterrupt"
    assert error_type(json.JSONDecodeError("x", "", 0)) == "json.JSONDecodeError"


def test_operation_labels_cached_and_bounded() -> None:
    labels = OperationLabels(max_endpoints=3)
    a = ("10.0.0.1", 6379, 0)
    first = labels.operation(a, "get", None)
    assert first is labels.operation(a, b"GET", None)
    assert dict(first) == {
        **SERVER,
        "server.address": "10.0.0.1",
        "db.namespace": "0",
        "db.operation.name": "GET",
    }
    failed = labels.operation(a, "get", TimeoutError())
    assert failed["error.type"] == "TimeoutError"
    pipeline = labels.operation(a, "PIPELINE", None)
    assert pipeline["db.operation.name"] == "PIPELINE"
    assert dict(labels.pool(labels.base(a))) == {
        **POOL,
        "db.client.connection.pool.name": "10.0.0.1:6379/0",
    }
    unix = labels.base(endpoint_key("localhost", 6379, "/tmp/r.sock", 2))
    assert dict(labels.server(unix)) == {"db.system.name": "redis", "server.address": "/tmp/r.sock"}
    assert unix.namespace == "2" and unix.pool == "/tmp/r.sock/2"
    ipv6 = labels.base(endpoint_key("::1", 7000, None, 3))
    assert ipv6.pool == "[::1]:7000/3"
    assert pool_name("::1", 7000, None, 3) == "[::1]:7000/3"
    assert pool_name("h", 1, "/s", 0) == "/s/0"


def test_endpoints_past_the_bound_are_other_in_every_label() -> None:
    # The bound is on endpoints (address, port, db): the fourth database of a known
    # server is as new as a new server, and past the bound nothing of it is a label:
    # server.address, db.namespace and the pool name are OTHER, no port.
    labels = OperationLabels(max_endpoints=2)
    labels.base(("10.0.0.1", 6379, 0))
    labels.base(("10.0.0.1", 6379, 1))
    for late in (("10.0.0.1", 6379, 2), ("10.0.0.3", 6379, 0), ("/tmp/s", None, 7)):
        assert labels.base(late) is OTHER_SERVER
        attributes = labels.operation(late, "GET", None)
        assert dict(attributes) == {
            "db.system.name": "redis",
            "server.address": OTHER,
            "db.namespace": OTHER,
            "db.operation.name": "GET",
        }
        assert labels.pool(labels.base(late))["db.client.connection.pool.name"] == OTHER
        assert labels.pubsub(late, True)["server.address"] == OTHER
    assert ServerKey(OTHER, None, OTHER, OTHER) == OTHER_SERVER
    # Admitted endpoints keep their labels.
    assert labels.base(("10.0.0.1", 6379, 1)).namespace == "1"
    # One exporter's bound: another OperationLabels (exporter) starts afresh.
    assert OperationLabels(max_endpoints=2).base(("10.0.0.3", 6379, 0)).address == "10.0.0.3"


def test_pool_observations() -> None:
    snapshot = PoolSnapshot(
        "p/0", idle=2, used=1, max=10, pending=4, timeouts=5, closed=6, relaxed=3, handoffs=7
    )
    seen = {
        (m.name, a.get("db.client.connection.state")): v
        for m, v, a in pool_observations([snapshot])
    }
    assert seen == {
        ("db.client.connection.count", "idle"): 2,
        ("db.client.connection.count", "used"): 1,
        ("db.client.connection.max", None): 10,
        ("db.client.connection.pending_requests", None): 4,
        ("db.client.connection.timeouts", None): 5,
        ("redis.client.connection.closed", None): 6,
        ("redis.client.connection.relaxed_timeout", None): 3,
        ("redis.client.connection.handoff.pending", None): 7,
    }
    observed = {m for m in METRICS if m.kind in OBSERVED_KINDS} - set(CACHE_METRICS)
    assert {m for m, _v, _a in pool_observations([snapshot])} == observed


def test_pools_of_one_name_are_summed() -> None:
    # Two clients of one host:port/db: one point per series, their values summed.
    a = PoolSnapshot(
        "p/0", idle=2, used=1, max=10, pending=4, timeouts=5, closed=6, relaxed=3, handoffs=7
    )
    b = PoolSnapshot(
        "p/0", idle=1, used=1, max=5, pending=0, timeouts=1, closed=0, relaxed=1, handoffs=0
    )
    c = PoolSnapshot(
        "q/0", idle=9, used=0, max=9, pending=0, timeouts=0, closed=0, relaxed=0, handoffs=0
    )
    points = pool_observations([a, b, c])
    keys = [(m.name, tuple(sorted(attrs.items()))) for m, _v, attrs in points]
    assert len(keys) == len(set(keys)) == 16
    seen = {
        (
            m.name,
            attrs["db.client.connection.pool.name"],
            attrs.get("db.client.connection.state"),
        ): v
        for m, v, attrs in points
    }
    assert seen["db.client.connection.count", "p/0", "idle"] == 3
    assert seen["db.client.connection.count", "p/0", "used"] == 2
    assert seen["db.client.connection.max", "p/0", None] == 15
    assert seen["db.client.connection.timeouts", "p/0", None] == 6
    assert seen["redis.client.connection.relaxed_timeout", "p/0", None] == 4
    assert seen["redis.client.connection.handoff.pending", "p/0", None] == 7
    assert seen["db.client.connection.max", "q/0", None] == 9
    assert pool_observations([]) == []


def is_open(tel: MaintenanceTelemetry) -> bool:
    return tel.open


def received(conn: int, n: Notification, t: float) -> NotificationReceived:
    return NotificationReceived(conn, n, False, None, t)


def windows(out: list[Output]) -> list[Output]:
    return [o for o in out if isinstance(o, WindowOpened | WindowEvent | WindowClosed)]


def counts(out: list[Output]) -> list[tuple[str, object]]:
    return [(o.metric.name, list(o.attributes.values())[-1]) for o in out if isinstance(o, Count)]


def test_migrating_window_closes_when_every_connection_got_migrated() -> None:
    tel = MaintenanceTelemetry(SERVER, POOL, backstop=100.0)
    out = tel.event(received(1, Migrating(7), 10.0))
    assert counts(out) == [(NOTIFICATIONS.name, "MIGRATING")]
    opened = [o for o in out if isinstance(o, WindowOpened)]
    assert opened == [
        WindowOpened(
            10.0, "MIGRATING", {**SERVER, "redis.client.maintenance.window.kind": "MIGRATING"}
        )
    ]
    assert is_open(tel)
    out = tel.event(received(2, Migrating(7), 10.5))
    assert [o.name for o in windows(out) if isinstance(o, WindowEvent)] == ["MIGRATING"]
    assert not [o for o in tel.event(received(1, Migrated(8), 11.0)) if isinstance(o, WindowClosed)]
    assert is_open(tel) and tel.next_deadline() == 110.5  # the backstop of connection 2
    out = tel.event(received(2, Migrated(8), 12.0))
    closed = [o for o in out if isinstance(o, WindowClosed)]
    assert len(closed) == 1 and closed[0].time == 12.0 and closed[0].reason == "MIGRATED"
    assert closed[0].attributes["redis.client.maintenance.window.events"] == 4
    duration = [o for o in out if isinstance(o, Observe)]
    assert duration[0].metric is WINDOW_DURATION and duration[0].value == 2.0
    assert duration[0].attributes["redis.client.maintenance.window.kind"] == "MIGRATING"
    assert not is_open(tel) and tel.next_deadline() == float("inf")
    # A closing notification without a window counts, and opens nothing.
    out = tel.event(received(3, Migrated(9), 13.0))
    assert counts(out) == [(NOTIFICATIONS.name, "MIGRATED")] and not windows(out)


def test_moving_window_lasts_until_its_time_and_its_handoffs() -> None:
    tel = MaintenanceTelemetry(SERVER, POOL, backstop=100.0)
    out = tel.event(MovingStarted(5, "10.0.0.2:6379", 15.0, 5.0))
    assert [o.kind for o in out if isinstance(o, WindowOpened)] == ["MOVING"]
    out = tel.event(received(1, Moving(5, 10.0, Endpoint("10.0.0.2", 6379)), 5.0))
    assert counts(out) == [(NOTIFICATIONS.name, "MOVING")]
    event = next(o for o in out if isinstance(o, WindowEvent))
    assert event.attributes["redis.client.maintenance.endpoint"] == "10.0.0.2:6379"
    assert event.attributes["redis.client.maintenance.moving.time"] == 10.0
    tel.event(HandoffQueued(1, "10.0.0.2:6379", 5, 5.1))
    tel.event(HandoffQueued(2, "10.0.0.2:6379", 5, 5.1))
    out = tel.event(HandoffSucceeded(1, "10.0.0.2:6379", 0.2, 5.3))
    assert counts(out) == [(HANDOFFS.name, "succeeded")]
    latency = next(o for o in out if isinstance(o, Observe))
    assert latency.metric is HANDOFF_DURATION and latency.value == 0.2
    assert latency.attributes["redis.client.connection.handoff.outcome"] == "succeeded"
    assert tel.tick(14.9) == [] and is_open(tel)
    # Time ran out, but connection 2's handoff has no outcome yet.
    assert tel.tick(15.0) == [] and is_open(tel)
    out = tel.event(HandoffFailed(2, "10.0.0.2:6379", "HandoffDialError()", 11.0, 16.0))
    closed = next(o for o in out if isinstance(o, WindowClosed))
    assert closed.time == 16.0 and closed.reason == "handoffs"
    assert closed.attributes["redis.client.maintenance.window.handoffs_succeeded"] == 1
    assert closed.attributes["redis.client.maintenance.window.handoffs_failed"] == 1
    assert counts(out) == [(HANDOFFS.name, "failed")]


def test_moving_window_closes_at_its_deadline_when_handoffs_are_done() -> None:
    tel = MaintenanceTelemetry(SERVER, POOL, backstop=100.0)
    tel.event(MovingStarted(5, None, 3.0, 1.0))
    tel.event(HandoffQueued(1, "127.0.0.1:6379", 5, 2.0))
    tel.event(HandoffSucceeded(1, "127.0.0.1:6379", 0.1, 2.1))
    assert tel.next_deadline() == 3.0
    out = tel.tick(3.5)  # noticed late: it still ends at the deadline
    closed = next(o for o in out if isinstance(o, WindowClosed))
    assert closed.time == 3.0 and closed.reason == "moving_time"
    assert [o.value for o in out if isinstance(o, Observe)] == [2.0]
    # A late event first closes a window that was done, then is handled.
    tel.event(MovingStarted(6, None, 5.0, 4.0))
    out = tel.event(received(1, Migrating(9), 20.0))
    kinds = [type(o).__name__ for o in windows(out)]
    assert kinds == ["WindowClosed", "WindowOpened", "WindowEvent"]


def test_backstop_ends_lost_closings_and_withdrawn_handoffs() -> None:
    tel = MaintenanceTelemetry(SERVER, POOL, backstop=5.0)
    tel.event(received(1, Migrating(1), 0.0))
    assert tel.next_deadline() == 5.0
    closed = [o for o in tel.tick(5.0) if isinstance(o, WindowClosed)]
    assert closed[0].time == 5.0 and closed[0].reason == "backstop"
    tel.event(MovingStarted(2, None, 11.0, 10.0))
    tel.event(HandoffQueued(4, "127.0.0.1:6379", 2, 10.0))  # withdrawn: never an outcome
    assert tel.tick(12.0) == [] and tel.next_deadline() == 15.0
    closed = [o for o in tel.tick(15.0) if isinstance(o, WindowClosed)]
    assert closed[0].time == 15.0 and closed[0].reason == "backstop"


def test_detach_ends_the_window_and_other_events() -> None:
    tel = MaintenanceTelemetry(SERVER, POOL, backstop=100.0)
    out = tel.event(CircuitBreakerChanged("10.0.0.9:6379", "closed", "open", 1.0))
    assert counts(out) == [(BREAKER_CHANGES.name, "open")] and not windows(out)
    assert tel.event(MalformedNotification(1, "MOVING", "bad", "[str]", 1.0)) == []
    assert tel.event(MaintenanceDisabled("127.0.0.1:6379", "ERR", 1.0)) == []
    tel.event(received(1, Migrating(1), 2.0))
    out = tel.event(CircuitBreakerChanged("10.0.0.9:6379", "open", "half-open", 3.0))
    event = next(o for o in out if isinstance(o, WindowEvent))
    assert event.name == "circuit_breaker_changed"
    assert event.attributes["redis.client.circuit_breaker.state"] == "half-open"
    closed = [o for o in tel.close(4.0) if isinstance(o, WindowClosed)]
    assert closed[0].reason == "detached" and closed[0].time == 4.0
    assert tel.close(5.0) == []


def test_a_window_open_when_the_client_closes_ends_client_closed() -> None:
    tel = MaintenanceTelemetry(SERVER, POOL, backstop=100.0)
    tel.event(received(1, Migrating(1), 2.0))
    out = tel.close(3.0, "client_closed")
    [closed] = [o for o in out if isinstance(o, WindowClosed)]
    assert closed.reason == "client_closed" and closed.time == 3.0
    assert closed.attributes["redis.client.maintenance.window.closed_by"] == "client_closed"
    [length] = [o for o in out if isinstance(o, Observe)]
    assert length.metric is WINDOW_DURATION and length.value == 1.0


def test_relaxed_at_reads_what_is_relaxed_answers() -> None:
    timeouts = RelaxedTimeouts(10.0, backstop=5.0)
    timeouts.open_window(0.0)
    timeouts.relax_after_handoff(1.0, 2.0)
    for now in (0.5, 2.9, 3.0, 4.9, 5.0, 7.0):
        expected = timeouts.relaxed_at(now)
        copy = RelaxedTimeouts(10.0, backstop=5.0)
        copy.open_window(0.0)
        copy.relax_after_handoff(1.0, 2.0)
        assert copy.is_relaxed(now) == expected, now
    assert timeouts.relaxed_at(7.0) is False and timeouts._windows == 1  # nothing dropped


def test_breaker_listener_sees_every_change() -> None:
    changes: list[tuple[str, str, float]] = []
    registry = BreakerRegistry(failure_threshold=2, reset_timeout=10.0, max_requests=1)

    def listener(breaker: CircuitBreaker, old: BreakerState, now: float) -> None:
        changes.append((old.value, breaker.state.value, now))

    registry.on_change = listener
    breaker = registry.get(Endpoint("10.0.0.1", 6379), 0.0)
    breaker.record_failure(1.0)
    assert changes == []
    breaker.record_failure(2.0)
    assert breaker.allow(12.0)
    breaker.record_failure(13.0)  # a failed trial: open again
    assert breaker.allow(23.0)
    breaker.record_success(24.0)
    assert changes == [
        ("closed", "open", 2.0),
        ("open", "half-open", 12.0),
        ("half-open", "open", 13.0),
        ("open", "half-open", 23.0),
        ("half-open", "closed", 24.0),
    ]
