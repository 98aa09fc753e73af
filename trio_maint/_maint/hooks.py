"""Notification hooks: the :class:`NotificationHook` protocol and the two hooks trio_maint
ships, :class:`LoggingHook` and :class:`MetricsHook`. Register one with
``r.maintenance.add_hook(hook)``.

:class:`MetricsHook` keeps its numbers in memory, with no dependency; to export metrics,
use the optional :mod:`trio_maint.otel` or :mod:`trio_maint.prometheus` instead
(docs/observability.md). Its bucket histogram, :class:`_Histogram`, is private.
"""

from __future__ import annotations

import bisect
import logging
import math
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any, Final, Protocol

import trio

from .._net.connection import Connection
from .._sansio.loglimit import log_limited
from .._sansio.notifications import Notification
from .events import (
    HandoffFailed,
    HandoffQueued,
    HandoffSucceeded,
    MaintenanceEvent,
    MalformedNotification,
)

__all__ = ["DEFAULT_BUCKETS", "LoggingHook", "MetricsHook", "NotificationHook"]


class NotificationHook(Protocol):
    """Observes (and may drop) maintenance notifications; register with
    :meth:`MaintenanceHandler.add_hook`.

    Hooks run synchronously on the task that read the frame, in registration order; keep
    them fast. An exception in a hook is logged and ignored: it never breaks handling.
    A hook may also define ``on_event(event)``, called with every
    :data:`MaintenanceEvent` (handoff outcomes included).
    """

    def pre(self, conn: Connection, notification: Notification) -> bool:
        """Before handling. Return ``False`` to drop the notification: it is then not
        handled and no ``post`` runs."""
        ...

    def post(
        self, conn: Connection, notification: Notification, error: BaseException | None
    ) -> None:
        """After handling; ``error`` is what handling raised, or ``None``."""
        ...


def _seq_of(notification: Notification) -> int | None:
    return notification.seq_id


class LoggingHook:
    """Logs every notification: "processing notification started" at ``level`` before
    handling, "processing notification failed" at WARNING on error, "processing
    notification succeeded" at DEBUG otherwise. Records carry a machine-readable payload in
    ``extra``: ``event``, ``conn_id``, ``seq_id``, ``name``, ``notification`` (``repr``).

    A server decides how many notifications arrive, so by default each of the three
    lines is rate-limited like the client's own per-frame lines (the first, then at most
    one per :data:`~trio_maint._sansio.loglimit.LOG_INTERVAL` seconds, the next line
    saying how many were held back; see docs/robustness.md); pass ``rate_limit=False``
    for a line per notification whatever the rate.

    :param level: logging level of the "started" line (default ``logging.INFO``).
    :param logger: the logger (default ``trio_maint.maintenance.hooks``).
    :param rate_limit: limit the lines' rate (``bool``, default ``True``).
    """

    def __init__(
        self,
        level: int = logging.INFO,
        logger: logging.Logger | None = None,
        *,
        rate_limit: bool = True,
    ) -> None:
        self.level = level
        self.logger = logger or logging.getLogger("trio_maint.maintenance.hooks")
        self.rate_limit = rate_limit

    def _emit(self, level: int, kind: str, msg: str, *args: object, extra: dict[str, Any]) -> None:
        if self.rate_limit:
            log_limited(
                self.logger, level, "hook_" + kind, trio.current_time(), msg, *args, extra=extra
            )
        else:
            self.logger.log(level, msg, *args, extra=extra, stacklevel=3)

    def _extra(self, event: str, conn: Connection, n: Notification) -> dict[str, Any]:
        return {
            "event": event,
            "conn_id": conn.id,
            "seq_id": _seq_of(n),
            "notification_name": n.NAME,
            "notification": repr(n),
        }

    def pre(self, conn: Connection, notification: Notification) -> bool:
        """Log "processing notification started" at ``level``; never drops (``True``)."""
        self._emit(
            self.level,
            "notification_started",
            "processing notification started: conn[%d] %s seq=%s",
            conn.id,
            notification.NAME,
            _seq_of(notification),
            extra=self._extra("notification_started", conn, notification),
        )
        return True

    def post(
        self, conn: Connection, notification: Notification, error: BaseException | None
    ) -> None:
        """Log the outcome: WARNING with ``error`` when handling failed, else DEBUG."""
        if error is not None:
            self._emit(
                logging.WARNING,
                "notification_failed",
                "processing notification failed: conn[%d] %s: %r",
                conn.id,
                notification.NAME,
                error,
                extra=self._extra("notification_failed", conn, notification),
            )
        else:
            self._emit(
                logging.DEBUG,
                "notification_succeeded",
                "processing notification succeeded: conn[%d] %s",
                conn.id,
                notification.NAME,
                extra=self._extra("notification_succeeded", conn, notification),
            )


#: Default bucket upper bounds (seconds) of :class:`MetricsHook`'s histograms.
DEFAULT_BUCKETS: Final = (
    0.0001,
    0.0005,
    0.001,
    0.005,
    0.01,
    0.05,
    0.1,
    0.5,
    1.0,
    5.0,
    15.0,
    60.0,
)


class _Histogram:
    """:class:`MetricsHook`'s histograms (private: read them through
    :meth:`MetricsHook.get_metrics`, or export with :mod:`trio_maint.otel` /
    :mod:`trio_maint.prometheus`). A cumulative-free bucket histogram of seconds:
    ``counts[i]`` observations
    ``<= bounds[i]`` (and above ``bounds[i-1]``), ``counts[-1]`` above the last bound.

    Attributes: ``bounds`` (``tuple[float, ...]``), ``counts`` (``list[int]``), ``count``,
    ``total`` (``float``), ``min``/``max`` (``float``, ``nan`` while empty).
    """

    def __init__(self, bounds: Sequence[float] = DEFAULT_BUCKETS) -> None:
        self.bounds = tuple(sorted(bounds))
        self.counts = [0] * (len(self.bounds) + 1)
        self.count = 0
        self.total = 0.0
        self.min = math.nan
        self.max = math.nan

    def observe(self, value: float) -> None:
        """Record one value (seconds)."""
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.total += value
        self.min = value if self.count == 1 else min(self.min, value)
        self.max = value if self.count == 1 else max(self.max, value)

    @property
    def mean(self) -> float:
        """The average (``float``; ``nan`` while empty)."""
        return self.total / self.count if self.count else math.nan

    def snapshot(self) -> dict[str, Any]:
        """``{"count", "total", "min", "max", "mean", "buckets": {bound: n, ..., "inf": n}}``."""
        buckets: dict[str, int] = {
            str(b): c for b, c in zip(self.bounds, self.counts[:-1], strict=True)
        }
        buckets["inf"] = self.counts[-1]
        return {
            "count": self.count,
            "total": self.total,
            "min": self.min,
            "max": self.max,
            "mean": self.mean,
            "buckets": buckets,
        }


class MetricsHook:
    """Counts notifications and handoffs. All fields are filled in:

    * ``notification_counts`` / ``error_counts``: ``Counter`` by notification name;
    * ``processing_times``: ``dict`` name -> bucket histogram of handling time (seconds of
      wall-clock time from ``pre`` to ``post``; its ``snapshot()`` is what
      :meth:`get_metrics` shows);
    * ``handoffs_queued``, ``handoff_successes``, ``handoff_failures`` (``int``) and
      ``handoff_failure_reasons`` (``Counter`` of error class names);
    * ``handoff_latency``: bucket histogram of seconds from queueing to the outcome;
    * ``malformed``: malformed frames ignored (``int``).
    """

    def __init__(self) -> None:
        self.notification_counts: Counter[str] = Counter()
        self.error_counts: Counter[str] = Counter()
        self.processing_times: dict[str, _Histogram] = {}
        self.handoffs_queued = 0
        self.handoff_successes = 0
        self.handoff_failures = 0
        self.handoff_failure_reasons: Counter[str] = Counter()
        self.handoff_latency = _Histogram()
        self.malformed = 0
        self._started: tuple[int, float] | None = None

    def pre(self, conn: Connection, notification: Notification) -> bool:
        """Count the notification by name and start its processing timer; never drops
        (``True``)."""
        self.notification_counts[notification.NAME] += 1
        self._started = (id(notification), time.perf_counter())
        return True

    def post(
        self, conn: Connection, notification: Notification, error: BaseException | None
    ) -> None:
        """Record the processing time (seconds, ``float``) in ``processing_times[name]``
        and count an ``error`` in ``error_counts``."""
        started, self._started = self._started, None
        if started is not None and started[0] == id(notification):
            histogram = self.processing_times.get(notification.NAME)
            if histogram is None:
                histogram = self.processing_times[notification.NAME] = _Histogram()
            histogram.observe(time.perf_counter() - started[1])
        if error is not None:
            self.error_counts[notification.NAME] += 1

    def on_event(self, event: MaintenanceEvent) -> None:
        """Count handoffs queued / succeeded / failed (with the failure's error type) and
        record each success's latency (seconds) in ``handoff_latency``."""
        if isinstance(event, HandoffQueued):
            self.handoffs_queued += 1
        elif isinstance(event, HandoffSucceeded):
            self.handoff_successes += 1
            self.handoff_latency.observe(event.latency)
        elif isinstance(event, HandoffFailed):
            self.handoff_failures += 1
            self.handoff_failure_reasons[event.error.split("(", 1)[0]] += 1
            self.handoff_latency.observe(event.latency)
        elif isinstance(event, MalformedNotification):
            self.malformed += 1

    def get_metrics(self) -> dict[str, Any]:
        """Everything above as plain ``dict``/``int`` values."""
        return {
            "notification_counts": dict(self.notification_counts),
            "error_counts": dict(self.error_counts),
            "processing_times": {k: h.snapshot() for k, h in self.processing_times.items()},
            "handoffs_queued": self.handoffs_queued,
            "handoff_successes": self.handoff_successes,
            "handoff_failures": self.handoff_failures,
            "handoff_failure_reasons": dict(self.handoff_failure_reasons),
            "handoff_latency": self.handoff_latency.snapshot(),
            "malformed": self.malformed,
        }
