"""Prometheus metrics for a trio_maint client (the ``prometheus`` extra:
from a checkout ``.venv/bin/pip install -e '.[prometheus]'``, which brings
``prometheus-client``).

::

    import prometheus_client
    import trio_maint.prometheus

    registry = prometheus_client.CollectorRegistry()
    async with trio_maint.open_redis(url) as r:
        with trio_maint.prometheus.instrument(r, registry=registry):
            prometheus_client.start_http_server(9100, registry=registry)  # a thread
            ...

:func:`instrument` registers the metrics of :mod:`trio_maint.otel` on ``registry``, named
as OpenTelemetry's Prometheus exporter would name them (dots become underscores, ``_seconds``
for durations, ``_total`` for counters: ``db_client_operation_duration_seconds``,
``redis_client_connection_handoff_total``, ...; docs/observability.md lists them). The
gauges (``db_client_connection_count``, ``redis_client_connection_relaxed_timeout``, ...)
and the client-side cache's counters (``redis_client_csc_requests_total``, ...) are read
from the clients at each scrape; the rest is recorded as it happens. There are no
spans: maintenance windows are the ``redis_client_maintenance_window_duration_seconds``
histogram.
"""

try:
    import prometheus_client as _probe  # noqa: F401
except ImportError as _exc:  # pragma: no cover - depends on what is installed
    raise ImportError(
        "trio_maint.prometheus needs the 'prometheus' extra: "
        ".venv/bin/pip install -e '.[prometheus]' from a checkout"
    ) from _exc

from ._telemetry.prometheus_export import Instrumentation, instrument, metric_names

__all__ = ["Instrumentation", "instrument", "metric_names"]
