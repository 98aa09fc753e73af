"""The handle :func:`trio_maint.otel.instrument` and :func:`trio_maint.prometheus.instrument`
return: :class:`Instrumentation`."""

from __future__ import annotations

from types import TracebackType
from typing import Self

from .shell import Client, ClientTelemetry, Sink

__all__ = ["Instrumentation"]


class Instrumentation:
    """One exporter attached to one client; :meth:`close` (or the end of a ``with``
    block) detaches it. Made by :func:`trio_maint.otel.instrument` or
    :func:`trio_maint.prometheus.instrument`.

    Closing stops recording for this exporter: open maintenance windows end there (their
    spans get ``redis.client.maintenance.window.closed_by = "detached"``), the client's
    gauges are no longer reported, and counters keep their last values. Once no exporter
    is attached, the client's command path is back to its single ``is None`` check.

    The client closing (the end of its ``async with`` block) closes the handle too:
    nothing of the exporter outlives the client, and the exporter (its meter provider or
    registry) no longer refers to it; windows open then end with ``closed_by =
    "client_closed"``.

    :ivar client: the instrumented :class:`~trio_maint.Redis` or
        :class:`~trio_maint.RedisCluster`.
    """

    def __init__(self, client: Client, shell: ClientTelemetry, sink: Sink) -> None:
        self.client = client
        self._shell = shell
        self._sink = sink

    @property
    def closed(self) -> bool:
        """``True`` once :meth:`close` ran or the client closed (``bool``)."""
        return not self._shell.attached(self._sink)

    def close(self) -> None:
        """Detach; idempotent, never raises for a closed client."""
        self._shell.remove_sink(self._sink)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<Instrumentation of {self.client!r} ({state})>"
