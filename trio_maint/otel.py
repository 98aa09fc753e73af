"""OpenTelemetry metrics and spans for a trio_maint client (the ``otel`` extra:
from a checkout ``.venv/bin/pip install -e '.[otel]'``, which brings ``opentelemetry-api``;
configure an SDK, or any other implementation, yourself).

::

    from opentelemetry.sdk.metrics import MeterProvider
    import trio_maint.otel

    async with trio_maint.open_redis(url) as r:
        with trio_maint.otel.instrument(r, meter_provider=MeterProvider(...)):
            ...

:func:`instrument` records, following OpenTelemetry's semantic conventions for database
clients, ``db.client.operation.duration`` per command and pipeline, the pool metrics
(``db.client.connection.*``), the maintenance metrics whose names go-redis and redis-py
use (``redis.client.maintenance.notifications``, ``redis.client.connection.handoff``, ...)
and, for a client with caching on, the client-side cache's (``redis.client.csc.*``, read
from ``r.cache.stats()`` at collection); each maintenance window becomes a span whose
events are its notifications and handoffs.
docs/observability.md lists every name, unit and attribute, and the mapping to go-redis and
redis-py. Nothing is recorded for a client that is not instrumented: the command path then
pays one ``is None`` check (docs/performance.md).
"""

try:
    import opentelemetry as _probe  # noqa: F401
except ImportError as _exc:  # pragma: no cover - depends on what is installed
    raise ImportError(
        "trio_maint.otel needs the 'otel' extra: .venv/bin/pip install -e '.[otel]' from a checkout"
    ) from _exc

from ._telemetry.otel_export import INSTRUMENTATION_NAME, Instrumentation, instrument

__all__ = ["INSTRUMENTATION_NAME", "Instrumentation", "instrument"]
