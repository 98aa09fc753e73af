"""What trio_maint's metrics are, and the attributes of each measurement (sans-IO: no Trio,
no OpenTelemetry, no prometheus_client).

The optional exporters (:mod:`trio_maint.otel`, :mod:`trio_maint.prometheus`) are thin
shells over this module and :mod:`~trio_maint._sansio.telemetry_window`: every name, unit,
attribute and bound lives here once (docs/observability.md lists them).

* :data:`METRICS`: one :class:`MetricSpec` per metric, named after OpenTelemetry's semantic
  conventions for database clients (``db.client.*``) and, for maintenance, after the names
  go-redis (redisotel-native) and redis-py (``redis.observability``) use (``redis.client.*``).
* :func:`operation_name`, :func:`error_type`: bounded attribute values for a command and
  an error.
* :class:`OperationLabels`: the label values of one exporter and the attributes of the
  measurements of its clients, cached and bounded per exporter.
* :func:`pool_observations`: the values of the pool gauges at collection time, one point
  per series (the client-side cache's, from its ``stats()``, are
  :func:`~trio_maint._sansio.telemetry_cache.cache_observations`).

Label values stay bounded: command names come from the command table (others are
:data:`OTHER`), errors are exception class names, endpoints (``server.*``,
``db.namespace`` and the pool name) are at most :data:`MAX_ENDPOINTS` per exporter. No
key, argument, channel or password ever becomes a label.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Final, TypeAlias

import attrs

from .command_table import COMMANDS
from .endpoint import format_host_port

__all__ = [
    "CACHE_METRICS",
    "CSC_FLUSH_CAUSE",
    "CSC_REASON",
    "CSC_RESULT",
    "DB_NAMESPACE",
    "DB_OPERATION_BATCH_SIZE",
    "DB_OPERATION_NAME",
    "DB_SYSTEM_NAME",
    "ERROR_TYPE",
    "MAX_ENDPOINTS",
    "METRICS",
    "OBSERVED_KINDS",
    "OTHER",
    "OTHER_SERVER",
    "POOL_NAME",
    "SERVER_ADDRESS",
    "SERVER_PORT",
    "AttrValue",
    "Attributes",
    "EndpointKey",
    "Kind",
    "MetricSpec",
    "OperationLabels",
    "PoolSnapshot",
    "ServerKey",
    "endpoint_key",
    "error_type",
    "operation_name",
    "pool_name",
    "pool_observations",
]

#: An attribute value (OpenTelemetry's primitive types).
AttrValue: TypeAlias = str | int | float | bool
#: The attributes of one measurement (never mutated once made).
Attributes: TypeAlias = Mapping[str, AttrValue]

# Attribute keys (OpenTelemetry semantic conventions, then go-redis/redis-py's redis.*).
DB_SYSTEM_NAME: Final = "db.system.name"
DB_OPERATION_NAME: Final = "db.operation.name"
DB_OPERATION_BATCH_SIZE: Final = "db.operation.batch.size"
DB_NAMESPACE: Final = "db.namespace"
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"
ERROR_TYPE: Final = "error.type"
POOL_NAME: Final = "db.client.connection.pool.name"
CONNECTION_STATE: Final = "db.client.connection.state"
NOTIFICATION: Final = "redis.client.connection.notification"
HANDOFF_OUTCOME: Final = "redis.client.connection.handoff.outcome"
BREAKER_STATE: Final = "redis.client.circuit_breaker.state"
WINDOW_KIND: Final = "redis.client.maintenance.window.kind"
PUBSUB_DIRECTION: Final = "redis.client.pubsub.direction"
PUBSUB_SHARDED: Final = "redis.client.pubsub.sharded"
CSC_RESULT: Final = "redis.client.csc.result"
CSC_REASON: Final = "redis.client.csc.reason"
CSC_FLUSH_CAUSE: Final = "redis.client.csc.flush.cause"

#: ``db.operation.name`` of a command not in the command table (``str``).
OTHER: Final = "OTHER"
#: Distinct endpoints (address, port and db) one exporter labels apart; later ones are
#: labelled :data:`OTHER` (``server.address``, ``db.namespace``, the pool name) (``int``).
MAX_ENDPOINTS: Final = 64


class Kind(enum.Enum):
    """How a metric is measured: recorded by the client as things happen (``HISTOGRAM``,
    ``COUNTER``), or read from the client's state when the exporter collects
    (``OBSERVED_UPDOWN``: a level that goes up and down, an up-down counter in
    OpenTelemetry; ``OBSERVED_GAUGE``: the same, an observable gauge in OpenTelemetry, as
    redis-py reports its cache's items; ``OBSERVED_COUNTER``: a total)."""

    HISTOGRAM = "histogram"
    COUNTER = "counter"
    OBSERVED_UPDOWN = "observed_updown"
    OBSERVED_GAUGE = "observed_gauge"
    OBSERVED_COUNTER = "observed_counter"


#: The kinds read from the client's state when the exporter collects.
OBSERVED_KINDS: Final = (Kind.OBSERVED_UPDOWN, Kind.OBSERVED_GAUGE, Kind.OBSERVED_COUNTER)


#: Bucket bounds (seconds) of the duration histograms: 100 µs to 10 s.
DURATION_BUCKETS: Final = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
#: Bucket bounds (seconds) of maintenance windows: 1 s to 30 minutes.
WINDOW_BUCKETS: Final = (1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)


@attrs.frozen
class MetricSpec:
    """One metric.

    :ivar name: the OpenTelemetry name (``str``), e.g. ``db.client.operation.duration``.
    :ivar kind: the :class:`Kind`.
    :ivar unit: UCUM unit (``"s"`` for seconds, ``"By"`` for bytes, ``"{connection}"`` for
        a count).
    :ivar description: one line (``str``).
    :ivar labels: every attribute key a measurement may carry, in a fixed order (the
        Prometheus label names, dots turned into underscores).
    :ivar buckets: bucket bounds of a histogram (seconds), else ``()``.
    """

    name: str
    kind: Kind
    unit: str
    description: str
    labels: tuple[str, ...]
    buckets: tuple[float, ...] = ()

    @property
    def prometheus_name(self) -> str:
        """The Prometheus name as exposed: dots become underscores, ``_seconds`` is added
        for seconds, ``_bytes`` for bytes and ``_total`` for counters (as OpenTelemetry's
        Prometheus exporter does), e.g. ``db_client_operation_duration_seconds``."""
        name = self.name.replace(".", "_")
        if self.unit == "s":
            name += "_seconds"
        elif self.unit == "By":
            name += "_bytes"
        if self.kind in (Kind.COUNTER, Kind.OBSERVED_COUNTER):
            name += "_total"
        return name

    @property
    def prometheus_labels(self) -> tuple[str, ...]:
        """:attr:`labels` as Prometheus label names (``db_operation_name``, ...)."""
        return tuple(label.replace(".", "_") for label in self.labels)


_SERVER = (DB_SYSTEM_NAME, SERVER_ADDRESS, SERVER_PORT)
_POOL = (DB_SYSTEM_NAME, POOL_NAME)
_CACHE = (DB_SYSTEM_NAME, POOL_NAME, SERVER_ADDRESS, SERVER_PORT)

OPERATION_DURATION: Final = MetricSpec(
    "db.client.operation.duration",
    Kind.HISTOGRAM,
    "s",
    "Duration of database client operations (a command with its retries, or a pipeline).",
    (*_SERVER, DB_NAMESPACE, DB_OPERATION_NAME, ERROR_TYPE),
    DURATION_BUCKETS,
)
CONNECTION_COUNT: Final = MetricSpec(
    "db.client.connection.count",
    Kind.OBSERVED_UPDOWN,
    "{connection}",
    "Connections of the pool by state (idle: in the idle list; used: lent out).",
    (*_POOL, CONNECTION_STATE),
)
CONNECTION_MAX: Final = MetricSpec(
    "db.client.connection.max",
    Kind.OBSERVED_UPDOWN,
    "{connection}",
    "Most connections the pool lends at once (pool_size).",
    _POOL,
)
PENDING_REQUESTS: Final = MetricSpec(
    "db.client.connection.pending_requests",
    Kind.OBSERVED_UPDOWN,
    "{request}",
    "Tasks waiting for a connection of the pool.",
    _POOL,
)
CONNECTION_TIMEOUTS: Final = MetricSpec(
    "db.client.connection.timeouts",
    Kind.OBSERVED_COUNTER,
    "{timeout}",
    "Acquisitions that gave up after pool_timeout (PoolTimeoutError).",
    _POOL,
)
CONNECTION_CREATE_TIME: Final = MetricSpec(
    "db.client.connection.create_time",
    Kind.HISTOGRAM,
    "s",
    "Time to dial and handshake a new connection of the pool.",
    _POOL,
    DURATION_BUCKETS,
)
CONNECTION_WAIT_TIME: Final = MetricSpec(
    "db.client.connection.wait_time",
    Kind.HISTOGRAM,
    "s",
    "Time to obtain a connection from the pool (dialing one included).",
    _POOL,
    DURATION_BUCKETS,
)
CONNECTION_CLOSED: Final = MetricSpec(
    "redis.client.connection.closed",
    Kind.OBSERVED_COUNTER,
    "{connection}",
    "Connections of the pool closed (broken, stale, handoff failed, idle list full).",
    _POOL,
)
NOTIFICATIONS: Final = MetricSpec(
    "redis.client.maintenance.notifications",
    Kind.COUNTER,
    "{notification}",
    "Maintenance notifications handled (MOVING, MIGRATING, ...).",
    (*_SERVER, NOTIFICATION),
)
RELAXED_TIMEOUT: Final = MetricSpec(
    "redis.client.connection.relaxed_timeout",
    Kind.OBSERVED_UPDOWN,
    "{relaxation}",
    "Connections whose timeouts are relaxed now (maintenance window or after a handoff).",
    _POOL,
)
HANDOFFS: Final = MetricSpec(
    "redis.client.connection.handoff",
    Kind.COUNTER,
    "{handoff}",
    "Connections handed off to a new endpoint (after MOVING), by outcome.",
    (*_POOL, HANDOFF_OUTCOME),
)
HANDOFF_DURATION: Final = MetricSpec(
    "redis.client.connection.handoff.duration",
    Kind.HISTOGRAM,
    "s",
    "Time from queueing a handoff to its outcome.",
    (*_POOL, HANDOFF_OUTCOME),
    DURATION_BUCKETS,
)
HANDOFF_PENDING: Final = MetricSpec(
    "redis.client.connection.handoff.pending",
    Kind.OBSERVED_UPDOWN,
    "{connection}",
    "Handoffs queued or under way, and delayed ones not yet due (the queue depth).",
    _POOL,
)
BREAKER_CHANGES: Final = MetricSpec(
    "redis.client.circuit_breaker.state_changes",
    Kind.COUNTER,
    "{change}",
    "Circuit breakers of handoff targets that changed state, by the new state.",
    (*_POOL, BREAKER_STATE),
)
WINDOW_DURATION: Final = MetricSpec(
    "redis.client.maintenance.window.duration",
    Kind.HISTOGRAM,
    "s",
    "Maintenance windows, from the opening notification until they closed.",
    (*_SERVER, WINDOW_KIND),
    WINDOW_BUCKETS,
)
PUBSUB_MESSAGES: Final = MetricSpec(
    "redis.client.pubsub.messages",
    Kind.COUNTER,
    "{message}",
    "Pub/sub messages received (message, pmessage, smessage).",
    (*_SERVER, PUBSUB_DIRECTION, PUBSUB_SHARDED),
)
CSC_REQUESTS: Final = MetricSpec(
    "redis.client.csc.requests",
    Kind.OBSERVED_COUNTER,
    "{request}",
    "Cacheable reads by result (hit: served by the client-side cache; miss: sent to the "
    "server, the bypassed ones included).",
    (*_CACHE, CSC_RESULT),
)
CSC_BYPASSED: Final = MetricSpec(
    "redis.client.csc.bypassed",
    Kind.OBSERVED_COUNTER,
    "{request}",
    "Cacheable reads sent to the server around the client-side cache, while it was "
    "suspended (a maintenance window, tracking being set up); part of the misses.",
    _CACHE,
)
CSC_ITEMS: Final = MetricSpec(
    "redis.client.csc.items",
    Kind.OBSERVED_GAUGE,
    "{item}",
    "Replies held in the client-side cache now.",
    _CACHE,
)
CSC_MEMORY: Final = MetricSpec(
    "redis.client.csc.memory.usage",
    Kind.OBSERVED_GAUGE,
    "By",
    "Bytes the client-side cache's entries are counted for now (keys, replies and a fixed "
    "overhead per entry; the measure max_bytes bounds).",
    _CACHE,
)
CSC_EVICTIONS: Final = MetricSpec(
    "redis.client.csc.evictions",
    Kind.OBSERVED_COUNTER,
    "{eviction}",
    "Entries removed from the client-side cache, by reason (full: max_size or max_bytes; "
    "ttl; invalidation; flush).",
    (*_CACHE, CSC_REASON),
)
CSC_FLUSHES: Final = MetricSpec(
    "redis.client.csc.flushes",
    Kind.OBSERVED_COUNTER,
    "{flush}",
    "Flushes of the client-side cache, by cause (moving, tracking_lost, clear, ...).",
    (*_CACHE, CSC_FLUSH_CAUSE),
)

#: The client-side cache's metrics (read from ``r.cache.stats()`` at collection).
CACHE_METRICS: Final = (
    CSC_REQUESTS,
    CSC_BYPASSED,
    CSC_ITEMS,
    CSC_MEMORY,
    CSC_EVICTIONS,
    CSC_FLUSHES,
)

#: Every metric, in the order docs/observability.md lists them.
METRICS: Final = (
    OPERATION_DURATION,
    CONNECTION_COUNT,
    CONNECTION_MAX,
    PENDING_REQUESTS,
    CONNECTION_TIMEOUTS,
    CONNECTION_CREATE_TIME,
    CONNECTION_WAIT_TIME,
    CONNECTION_CLOSED,
    NOTIFICATIONS,
    RELAXED_TIMEOUT,
    HANDOFFS,
    HANDOFF_DURATION,
    HANDOFF_PENDING,
    BREAKER_CHANGES,
    WINDOW_DURATION,
    PUBSUB_MESSAGES,
    *CACHE_METRICS,
)

#: Upper-case names of the commands (containers of subcommands included) of the table.
_KNOWN: Final = frozenset(name for name in COMMANDS if "|" not in name)
_NAME_CACHE_SIZE: Final = 512
_names: dict[object, str] = {}


def operation_name(command: object) -> str:
    """``db.operation.name`` of a command whose first argument is ``command`` (``str`` or
    ``bytes``): its upper-case name when the command table knows it (``"GET"``,
    ``"CLIENT"``), else :data:`OTHER`. Cached; never raises."""
    name = _names.get(command)
    if name is not None:
        return name
    try:
        text = command.decode("ascii") if isinstance(command, bytes) else str(command)
    except UnicodeDecodeError:
        text = ""
    name = text.upper() if text.upper() in _KNOWN else OTHER
    if len(_names) < _NAME_CACHE_SIZE:
        try:
            _names[command] = name
        except TypeError:  # unhashable: not cached
            pass
    return name


def error_type(error: BaseException) -> str:
    """``error.type`` of ``error``: the class name for trio_maint's own errors
    (``"TimeoutError"``, ``"WrongTypeError"``, ``"ResponseError"``), else the package
    and class (``"trio.Cancelled"``, ``"KeyboardInterrupt"``). Bounded by the classes
    that exist; never the message."""
    cls = type(error)
    module = cls.__module__
    if module.startswith("trio_maint."):
        return cls.__qualname__
    package = module.split(".", 1)[0]
    return cls.__qualname__ if package == "builtins" else f"{package}.{cls.__qualname__}"


def pool_name(host: str, port: int, unix_path: str | None, db: int) -> str:
    """``db.client.connection.pool.name`` of a client's pool: ``host:port/db`` (or
    ``path/db`` for a Unix socket), as go-redis names its pools. No credentials."""
    address = unix_path if unix_path is not None else format_host_port(host, port)
    return f"{address}/{db}"


#: Where a client's measurements come from, as the shell knows it: ``(address, port,
#: db)``, the address being the socket's path and the port ``None`` for a Unix socket.
#: Made by :func:`endpoint_key`; :meth:`OperationLabels.base` turns it into labels.
EndpointKey: TypeAlias = tuple[str, int | None, int]


def endpoint_key(host: str, port: int, unix_path: str | None, db: int) -> EndpointKey:
    """The :data:`EndpointKey` of a client (or cluster node) with these options."""
    return (unix_path, None, db) if unix_path is not None else (host, port, db)


@attrs.frozen(cache_hash=True)
class ServerKey:
    """The label values of one endpoint in one exporter: ``server.address``,
    ``server.port`` (``None`` for a Unix socket), ``db.namespace`` (the db index as text)
    and ``db.client.connection.pool.name`` (:func:`pool_name`); all :data:`OTHER` (no
    port) for an endpoint past the exporter's bound. Made by :meth:`OperationLabels.base`."""

    address: str
    port: int | None
    namespace: str
    pool: str


#: The labels of every endpoint past an exporter's bound.
OTHER_SERVER: Final = ServerKey(OTHER, None, OTHER, OTHER)


class OperationLabels:
    """The label values of one exporter (an OpenTelemetry meter provider, a Prometheus
    registry), shared by every client it exports, and the attributes made of them, cached
    so that a measurement allocates nothing new once seen.

    Bounded per exporter: the first ``max_endpoints`` distinct endpoints
    (:data:`EndpointKey`: address, port and db) get their own ``server.address``,
    ``server.port``, ``db.namespace`` and pool name; every later one gets
    :data:`OTHER_SERVER` (``OTHER`` for each, no port), for good: the exporter's series
    stay bounded however many clients come and go. Not thread-safe: the Trio thread
    admits endpoints (a scrape only reads what was made there).

    :param max_endpoints: distinct endpoints kept apart (``int``).
    """

    def __init__(self, max_endpoints: int = MAX_ENDPOINTS) -> None:
        self.max_endpoints = max_endpoints
        self._bases: dict[EndpointKey, ServerKey] = {}
        self._cache: dict[tuple[EndpointKey, str, str | None], Attributes] = {}
        self._server: dict[ServerKey, Attributes] = {}
        self._pool: dict[ServerKey, Attributes] = {}
        self._pubsub: dict[tuple[EndpointKey, bool], Attributes] = {}

    def base(self, endpoint: EndpointKey) -> ServerKey:
        """The label values of ``endpoint`` (bounded: see the class docs)."""
        base = self._bases.get(endpoint)
        if base is None:
            if len(self._bases) >= self.max_endpoints:
                return OTHER_SERVER
            address, port, db = endpoint
            pool = pool_name(address, port or 0, address if port is None else None, db)
            base = self._bases[endpoint] = ServerKey(address, port, str(db), pool)
        return base

    def operation(
        self, endpoint: EndpointKey, command: object, error: BaseException | None
    ) -> Attributes:
        """Attributes of ``db.client.operation.duration``: ``db.system.name``,
        ``server.address``, ``server.port`` (TCP only), ``db.namespace`` (the db index),
        ``db.operation.name`` (:func:`operation_name` of ``command``; a pipeline passes
        ``"PIPELINE"`` or ``"MULTI"``) and ``error.type`` when ``error`` is not ``None``."""
        name = command if command in ("PIPELINE", "MULTI") else operation_name(command)
        kind = None if error is None else error_type(error)
        key = (endpoint, str(name), kind)
        found = self._cache.get(key)
        if found is not None:
            return found
        base = self.base(endpoint)
        attributes: dict[str, AttrValue] = dict(self.server(base))
        attributes[DB_NAMESPACE] = base.namespace
        attributes[DB_OPERATION_NAME] = str(name)
        if kind is not None:
            attributes[ERROR_TYPE] = kind
        if len(self._cache) < 4096:
            self._cache[key] = attributes
        return attributes

    def server(self, base: ServerKey) -> Attributes:
        """``db.system.name``, ``server.address`` and ``server.port`` of ``base``."""
        found = self._server.get(base)
        if found is None:
            attributes: dict[str, AttrValue] = {
                DB_SYSTEM_NAME: "redis",
                SERVER_ADDRESS: base.address,
            }
            if base.port is not None:
                attributes[SERVER_PORT] = base.port
            found = self._server[base] = attributes
        return found

    def pool(self, base: ServerKey) -> Attributes:
        """``db.system.name`` and ``db.client.connection.pool.name`` of ``base``."""
        found = self._pool.get(base)
        if found is None:
            found = self._pool[base] = {DB_SYSTEM_NAME: "redis", POOL_NAME: base.pool}
        return found

    def pubsub(self, endpoint: EndpointKey, sharded: bool) -> Attributes:
        """Attributes of ``redis.client.pubsub.messages`` (received) of ``endpoint``."""
        key = (endpoint, sharded)
        found = self._pubsub.get(key)
        if found is None:
            server = self.server(self.base(endpoint))
            found = {**server, PUBSUB_DIRECTION: "received", PUBSUB_SHARDED: sharded}
            if len(self._pubsub) < 256:
                self._pubsub[key] = found
        return found


@attrs.frozen
class PoolSnapshot:
    """What the pool gauges read from one client at collection time (all ``int``).

    :ivar name: the pool's name (:func:`pool_name`).
    :ivar idle / used: connections in the idle list / lent out.
    :ivar max: ``pool_size``; :ivar pending: tasks waiting for a connection.
    :ivar timeouts: acquisitions that timed out; :ivar closed: connections closed.
    :ivar relaxed: connections with relaxed timeouts; :ivar handoffs: pending handoffs.
    """

    name: str
    idle: int
    used: int
    max: int
    pending: int
    timeouts: int
    closed: int
    relaxed: int
    handoffs: int


def pool_observations(
    snapshots: Iterable[PoolSnapshot],
) -> list[tuple[MetricSpec, int, Attributes]]:
    """The observed metrics of ``snapshots``: ``(metric, value, attributes)`` for every
    observed metric (:data:`OBSERVED_KINDS`) but the cache's (:data:`CACHE_METRICS`), per
    pool name. Pools of the same name (two clients of one ``host:port/db`` exported
    together, or the pools labelled :data:`OTHER`) are summed, as the cache's points are
    (:func:`~trio_maint._sansio.telemetry_cache.cache_observations`): an exporter must
    never report one series twice (a Prometheus server rejects such a scrape)."""
    totals: dict[str, list[int]] = {}
    for s in snapshots:
        values = (s.idle, s.used, s.max, s.pending, s.timeouts, s.closed, s.relaxed, s.handoffs)
        total = totals.get(s.name)
        if total is None:
            totals[s.name] = list(values)
        else:
            for i, value in enumerate(values):
                total[i] += value
    points: list[tuple[MetricSpec, int, Attributes]] = []
    for name, (idle, used, most, pending, timeouts, closed, relaxed, handoffs) in totals.items():
        pool: Attributes = {DB_SYSTEM_NAME: "redis", POOL_NAME: name}
        points += [
            (CONNECTION_COUNT, idle, {**pool, CONNECTION_STATE: "idle"}),
            (CONNECTION_COUNT, used, {**pool, CONNECTION_STATE: "used"}),
            (CONNECTION_MAX, most, pool),
            (PENDING_REQUESTS, pending, pool),
            (CONNECTION_TIMEOUTS, timeouts, pool),
            (CONNECTION_CLOSED, closed, pool),
            (RELAXED_TIMEOUT, relaxed, pool),
            (HANDOFF_PENDING, handoffs, pool),
        ]
    return points
