"""The implementation of :mod:`trio_maint.prometheus` (see there), imported only through it."""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

import prometheus_client
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from .._sansio.telemetry import (
    METRICS,
    OBSERVED_KINDS,
    Attributes,
    AttrValue,
    Kind,
    MetricSpec,
    OperationLabels,
    pool_observations,
)
from .._sansio.telemetry_cache import cache_observations
from .._sansio.telemetry_window import WindowClosed, WindowEvent, WindowOpened
from .handle import Instrumentation
from .shell import Client, ClientTelemetry

__all__ = ["Instrumentation", "instrument", "metric_names"]

#: Most labelled children :meth:`_Metrics.child` keeps by attributes identity (``int``).
_MAX_CHILDREN = 4096

_OBSERVED = tuple(s for s in METRICS if s.kind in OBSERVED_KINDS)


def _text(value: AttrValue | None) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _values(spec: MetricSpec, attributes: Attributes) -> tuple[str, ...]:
    return tuple(_text(attributes.get(label)) for label in spec.labels)


def _family(spec: MetricSpec) -> GaugeMetricFamily | CounterMetricFamily:
    name = spec.prometheus_name
    labels = spec.prometheus_labels
    if spec.kind is Kind.OBSERVED_COUNTER:
        return CounterMetricFamily(name.removesuffix("_total"), spec.description, labels=labels)
    return GaugeMetricFamily(name, spec.description, labels=labels)


class _Metrics(Collector):
    """The metrics of one registry, shared by every client instrumented on it, and its
    label values (:attr:`labels`: the bound on endpoints holds per registry); as a
    collector it reports the gauges (pools, caches) of :attr:`attached` at each scrape."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.labels = OperationLabels()
        #: The open handles' sinks and their shells (a scrape's thread reads a copy).
        self.attached: dict[_Sink, ClientTelemetry] = {}
        self.metrics: dict[MetricSpec, Any] = {}
        self.children: dict[tuple[MetricSpec, int], tuple[Attributes, Any]] = {}
        for spec in METRICS:
            name, text, labels = spec.prometheus_name, spec.description, spec.prometheus_labels
            if spec.kind is Kind.HISTOGRAM:
                self.metrics[spec] = prometheus_client.Histogram(
                    name, text, labels, registry=registry, buckets=spec.buckets
                )
            elif spec.kind is Kind.COUNTER:
                self.metrics[spec] = prometheus_client.Counter(
                    name.removesuffix("_total"), text, labels, registry=registry
                )
        registry.register(self)

    def child(self, spec: MetricSpec, attributes: Attributes) -> Any:
        """The labelled child of ``spec`` for ``attributes``. The shell hands the same
        (cached, never mutated) attributes object for the same labels, so children are
        cached by its identity; the entry keeps the object alive, so that its id is not
        reused. Bounded: past :data:`_MAX_CHILDREN` entries, prometheus_client's own
        lookup by label values is used."""
        key = (spec, id(attributes))
        found = self.children.get(key)
        if found is not None and found[0] is attributes:
            return found[1]
        child = self.metrics[spec].labels(*_values(spec, attributes))
        if len(self.children) < _MAX_CHILDREN:
            self.children[key] = (attributes, child)
        return child

    def describe(self) -> Iterable[Metric]:
        """The gauge families, without samples (for the registry's name check)."""
        return [_family(spec) for spec in _OBSERVED]

    def collect(self) -> Iterable[Metric]:
        """The gauges of every instrumented client, and its cache's counters, read now
        (the scrape's thread); one sample per series (equal labels summed)."""
        families = {spec: _family(spec) for spec in _OBSERVED}
        shells = [(k, s) for k, s in list(self.attached.items()) if not s.client.closed]
        pools = pool_observations(p for k, s in shells for p in s.snapshots(k))
        caches = cache_observations(c for k, s in shells for c in s.cache_snapshots(k))
        for spec, value, attributes in [*pools, *caches]:
            families[spec].add_metric(_values(spec, attributes), value)
        return list(families.values())


_by_registry: weakref.WeakKeyDictionary[CollectorRegistry, _Metrics] = weakref.WeakKeyDictionary()


class _Sink:
    """What one :func:`instrument` call records (see ``_telemetry.shell.Sink``)."""

    command_spans = False

    def __init__(self, metrics: _Metrics) -> None:
        self.metrics = metrics
        self.labels = metrics.labels

    def add(self, metric: MetricSpec, value: int, attributes: Attributes) -> None:
        self.metrics.child(metric, attributes).inc(value)

    def record(self, metric: MetricSpec, value: float, attributes: Attributes) -> None:
        self.metrics.child(metric, attributes).observe(value)

    def span(
        self,
        name: str,
        start_ns: int,
        end_ns: int,
        attributes: Attributes,
        error: BaseException | None,
    ) -> None:
        """No spans in Prometheus."""

    def window(
        self, key: object, output: WindowOpened | WindowEvent | WindowClosed, time_ns: int
    ) -> None:
        """No spans in Prometheus (windows are the window-duration histogram)."""


def metric_names() -> list[str]:
    """The names of the metric families :func:`instrument` registers, as exposed
    (``list[str]``), e.g. ``"db_client_operation_duration_seconds"``."""
    return [spec.prometheus_name for spec in METRICS]


def instrument(client: Client, *, registry: CollectorRegistry | None = None) -> Instrumentation:
    """Record ``client``'s metrics on ``registry`` until the returned handle is closed
    (``with instrument(r, registry=reg): ...`` or ``handle.close()``).

    Call it inside the Trio run, on an open :class:`~trio_maint.Redis` or
    :class:`~trio_maint.RedisCluster` (as :func:`trio_maint.otel.instrument`). The metric
    families are registered on ``registry`` the first time it is used; later clients
    share them, told apart by their labels (``server_address``,
    ``db_client_connection_pool_name``). Serve the registry as usual, e.g.
    ``prometheus_client.start_http_server(port, registry=registry)``.

    :param registry: a ``prometheus_client.CollectorRegistry`` (default:
        ``prometheus_client.REGISTRY``, the global one).
    :returns: an :class:`~trio_maint.otel.Instrumentation` (``close()``, context
        manager); closing stops this client's gauges, counters keep their values.
    :raises TypeError: ``client`` is not a trio_maint client.
    :raises RuntimeError: the client is closed, or this is not inside a Trio run, or it is
        already instrumented on this registry (its handle is still open).
    :raises ValueError: another collector of ``registry`` already uses one of
        :func:`metric_names` (prometheus_client's duplicate check).
    """
    reg = registry if registry is not None else prometheus_client.REGISTRY
    ClientTelemetry.check(client)
    metrics = _by_registry.get(reg)
    if metrics is None:
        metrics = _by_registry[reg] = _Metrics(reg)
    shell = ClientTelemetry.of(client)
    if any(isinstance(s, _Sink) and s.metrics is metrics for s in shell.sinks):
        raise RuntimeError(f"{client!r} is already instrumented on this registry")
    sink = _Sink(metrics)
    metrics.attached[sink] = shell

    def on_close() -> None:
        metrics.attached.pop(sink, None)

    shell.add_sink(sink, on_close)
    return Instrumentation(client, shell, sink)
