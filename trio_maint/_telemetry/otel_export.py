"""The implementation of :mod:`trio_maint.otel` (see there), imported only through it."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Iterable
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, TracerProvider

from .._sansio.telemetry import (
    CACHE_METRICS,
    METRICS,
    Attributes,
    Kind,
    MetricSpec,
    OperationLabels,
    error_type,
    pool_observations,
)
from .._sansio.telemetry_cache import cache_observations
from .._sansio.telemetry_window import DETACHED, WindowClosed, WindowEvent, WindowOpened
from .._sansio.version import __version__
from .handle import Instrumentation
from .shell import Client, ClientTelemetry

__all__ = ["INSTRUMENTATION_NAME", "Instrumentation", "instrument"]

#: The instrumentation scope (meter and tracer name): ``"trio_maint"``.
INSTRUMENTATION_NAME = "trio_maint"


class _Instruments:
    """The instruments of one meter provider, shared by every client instrumented with
    it, and its label values (:attr:`labels`: the bound on endpoints holds per provider);
    the observable ones read the pools and caches of :attr:`attached` when the reader
    collects."""

    def __init__(self, meter: Meter) -> None:
        self.labels = OperationLabels()
        #: The open handles' sinks and their shells (the reader's thread reads a copy).
        self.attached: dict[_Sink, ClientTelemetry] = {}
        self.counters: dict[MetricSpec, Any] = {}
        self.histograms: dict[MetricSpec, Any] = {}
        for spec in METRICS:
            name, unit, text = spec.name, spec.unit, spec.description
            if spec.kind is Kind.HISTOGRAM:
                self.histograms[spec] = meter.create_histogram(
                    name, unit, text, explicit_bucket_boundaries_advisory=list(spec.buckets)
                )
            elif spec.kind is Kind.COUNTER:
                self.counters[spec] = meter.create_counter(name, unit, text)
            else:
                callback = functools.partial(self._observe, spec)
                if spec.kind is Kind.OBSERVED_UPDOWN:
                    meter.create_observable_up_down_counter(name, [callback], unit, text)
                elif spec.kind is Kind.OBSERVED_GAUGE:
                    meter.create_observable_gauge(name, [callback], unit, text)
                else:
                    meter.create_observable_counter(name, [callback], unit, text)

    def _observe(self, spec: MetricSpec, options: CallbackOptions) -> Iterable[Observation]:
        shells = [(k, s) for k, s in list(self.attached.items()) if not s.client.closed]
        if spec in CACHE_METRICS:
            points = cache_observations(c for k, s in shells for c in s.cache_snapshots(k))
        else:
            points = pool_observations(p for k, s in shells for p in s.snapshots(k))
        return [
            Observation(value, attributes) for metric, value, attributes in points if metric is spec
        ]


_by_provider: weakref.WeakKeyDictionary[MeterProvider, _Instruments] = weakref.WeakKeyDictionary()


def _instruments(provider: MeterProvider) -> _Instruments:
    found = _by_provider.get(provider)
    if found is None:
        meter = provider.get_meter(INSTRUMENTATION_NAME, __version__)
        found = _by_provider[provider] = _Instruments(meter)
    return found


class _Sink:
    """What one :func:`instrument` call records (see ``_telemetry.shell.Sink``)."""

    def __init__(
        self, instruments: _Instruments, tracer: Tracer, command_spans: bool, window_spans: bool
    ) -> None:
        self.instruments = instruments
        self.labels = instruments.labels
        self.tracer = tracer
        self.command_spans = command_spans
        self.window_spans = window_spans
        self.windows: dict[object, Span] = {}

    def add(self, metric: MetricSpec, value: int, attributes: Attributes) -> None:
        self.instruments.counters[metric].add(value, attributes)

    def record(self, metric: MetricSpec, value: float, attributes: Attributes) -> None:
        self.instruments.histograms[metric].record(value, attributes)

    def span(
        self,
        name: str,
        start_ns: int,
        end_ns: int,
        attributes: Attributes,
        error: BaseException | None,
    ) -> None:
        span = self.tracer.start_span(
            name, kind=SpanKind.CLIENT, attributes=attributes, start_time=start_ns
        )
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error_type(error)))
        span.end(end_time=end_ns)

    def window(
        self, key: object, output: WindowOpened | WindowEvent | WindowClosed, time_ns: int
    ) -> None:
        if not self.window_spans:
            return
        if isinstance(output, WindowOpened):
            # A root span: a window is nobody's request.
            self.windows[key] = self.tracer.start_span(
                f"redis maintenance {output.kind}",
                context=Context(),
                attributes=output.attributes,
                start_time=time_ns,
            )
            return
        span = self.windows.get(key)
        if span is None:
            return
        if isinstance(output, WindowEvent):
            span.add_event(output.name, output.attributes, timestamp=time_ns)
        else:
            del self.windows[key]
            span.set_attributes(output.attributes)
            span.end(end_time=time_ns)

    def close(self) -> None:
        """End the spans of windows still open (the shell ended them unless another
        exporter keeps the client instrumented)."""
        windows, self.windows = self.windows, {}
        for span in windows.values():
            span.set_attribute("redis.client.maintenance.window.closed_by", DETACHED)
            span.end()


def instrument(
    client: Client,
    *,
    meter_provider: MeterProvider | None = None,
    tracer_provider: TracerProvider | None = None,
    spans: bool = False,
    window_spans: bool = True,
) -> Instrumentation:
    """Record ``client``'s metrics (and spans) through OpenTelemetry until the returned
    handle is closed (``with instrument(r): ...`` or ``handle.close()``).

    Call it inside the Trio run, on an open client: a :class:`~trio_maint.Redis` (its
    pool, maintenance handler and pub/sub) or a :class:`~trio_maint.RedisCluster` (its
    routed commands and pipelines, and every node's pool and handler, nodes started later
    included). Several clients may share a provider, and a client may be instrumented
    with several providers (or through Prometheus too) at once.

    :param meter_provider: where metrics go (default: the global one,
        ``opentelemetry.metrics.get_meter_provider()``); the meter is named
        :data:`INSTRUMENTATION_NAME` with trio_maint's version.
    :param tracer_provider: where spans go (default: the global one).
    :param spans: also make a ``CLIENT`` span per command and pipeline (``bool``, default
        ``False``: commands are many), named by ``db.operation.name``, with the metric's
        attributes (plus ``db.operation.batch.size`` for pipelines) and an ``ERROR``
        status whose description is ``error.type``; it is a child of the current span.
    :param window_spans: make a root span per maintenance window (``bool``, default
        ``True``), ``redis maintenance <KIND>``, the notifications and handoffs as its
        events.
    :returns: an :class:`Instrumentation` (``close()``, context manager).
    :raises TypeError: ``client`` is not a trio_maint client.
    :raises RuntimeError: the client is closed, or this is not inside a Trio run, or it is
        already instrumented with this meter provider (its handle is still open).
    """
    provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
    tracers = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
    ClientTelemetry.check(client)
    instruments = _instruments(provider)
    tracer = tracers.get_tracer(INSTRUMENTATION_NAME, __version__)
    shell = ClientTelemetry.of(client)
    if any(isinstance(s, _Sink) and s.instruments is instruments for s in shell.sinks):
        raise RuntimeError(f"{client!r} is already instrumented with this meter provider")
    sink = _Sink(instruments, tracer, spans, window_spans)
    instruments.attached[sink] = shell

    def on_close() -> None:
        sink.close()
        instruments.attached.pop(sink, None)

    shell.add_sink(sink, on_close)
    return Instrumentation(client, shell, sink)
