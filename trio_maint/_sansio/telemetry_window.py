"""Maintenance events as metrics and windows (sans-IO: no Trio, no exporter).

:class:`MaintenanceTelemetry` turns the :data:`~trio_maint.MaintenanceEvent` values of one
client (or one cluster node) into what an exporter records: counts and observations of the
maintenance metrics of :mod:`~trio_maint._sansio.telemetry`, and *maintenance windows*,
which OpenTelemetry shows as spans whose events are the notifications.

A window opens at the first MIGRATING, FAILING_OVER, SMIGRATING or MOVING and closes when
all of these hold:

* every connection that got an opening notification got its closing one (MIGRATED,
  FAILED_OVER, SMIGRATED), or the relaxation backstop ended it (the closing was lost);
* the time of the latest MOVING ran out;
* every handoff queued meanwhile has an outcome (succeeded or failed), or was queued
  longer than the backstop ago (a handoff withdrawn because its connection closed has
  none).

A MOVING opens a window with its first occurrence (:class:`~trio_maint.MovingStarted`);
replays on other connections are events of the window.

It ends at the latest of these moments, whenever the shell notices it (:meth:`tick` at
:meth:`next_deadline`). Inputs carry ``now`` (``float`` seconds, Trio's clock); outputs are
plain values: :class:`Count`, :class:`Observe`, :class:`WindowOpened`,
:class:`WindowEvent`, :class:`WindowClosed`.
"""

from __future__ import annotations

import math
from typing import Final, TypeAlias

import attrs

from .events import (
    CircuitBreakerChanged,
    HandoffFailed,
    HandoffQueued,
    HandoffSucceeded,
    MaintenanceEvent,
    MovingRefused,
    MovingStarted,
    NotificationReceived,
)
from .notifications import (
    FailedOver,
    FailingOver,
    Migrated,
    Migrating,
    Moving,
    SMigrated,
    SMigrating,
)
from .telemetry import (
    BREAKER_CHANGES,
    BREAKER_STATE,
    HANDOFF_DURATION,
    HANDOFF_OUTCOME,
    HANDOFFS,
    NOTIFICATION,
    NOTIFICATIONS,
    SERVER_ADDRESS,
    WINDOW_DURATION,
    WINDOW_KIND,
    Attributes,
    AttrValue,
    MetricSpec,
)

__all__ = [
    "CLIENT_CLOSED",
    "DETACHED",
    "Count",
    "MaintenanceTelemetry",
    "Observe",
    "Output",
    "WindowClosed",
    "WindowEvent",
    "WindowOpened",
]

_OPENING = (Migrating, FailingOver, SMigrating)
_HANDLED = (
    NotificationReceived,
    MovingStarted,
    HandoffQueued,
    HandoffSucceeded,
    HandoffFailed,
    MovingRefused,
    CircuitBreakerChanged,
)
# Attributes of the window's span events (besides those of telemetry.py).
CONN_ID: Final = "redis.client.connection.id"
PUBSUB: Final = "redis.client.connection.pubsub"
SEQ_ID: Final = "redis.client.maintenance.seq_id"
MOVING_TIME: Final = "redis.client.maintenance.moving.time"
ENDPOINT: Final = "redis.client.maintenance.endpoint"
REASON: Final = "redis.client.maintenance.reason"
ERROR: Final = "redis.client.maintenance.error"
OLD_STATE: Final = "redis.client.circuit_breaker.old_state"
_CLOSING = (Migrated, FailedOver, SMigrated)
#: ``redis.client.maintenance.window.closed_by`` of a window open when its exporter
#: detached (the handle was closed) / when its client closed.
DETACHED: Final = "detached"
CLIENT_CLOSED: Final = "client_closed"


@attrs.frozen
class Count:
    """Add ``value`` (``int``) to the counter ``metric`` with ``attributes``."""

    metric: MetricSpec
    attributes: Attributes
    value: int = 1


@attrs.frozen
class Observe:
    """Record ``value`` (``float`` seconds) in the histogram ``metric``."""

    metric: MetricSpec
    value: float
    attributes: Attributes


@attrs.frozen
class WindowOpened:
    """A maintenance window opened at ``time`` (``float``, Trio's clock); ``kind`` is the
    opening notification's name (``"MIGRATING"``, ``"MOVING"``, ...), ``attributes``
    those of the span."""

    time: float
    kind: str
    attributes: Attributes


@attrs.frozen
class WindowEvent:
    """Something happened during the open window: ``name`` is the notification's name
    or ``handoff_queued``, ``handoff_succeeded``, ``handoff_failed``,
    ``moving_refused``, ``circuit_breaker_changed``."""

    time: float
    name: str
    attributes: Attributes


@attrs.frozen
class WindowClosed:
    """The window closed at ``time``; ``reason`` says what closed it last
    (``"MIGRATED"``, ``"FAILED_OVER"``, ``"SMIGRATED"``, ``"moving_time"``,
    ``"handoffs"``, ``"backstop"``, or :meth:`MaintenanceTelemetry.close`'s
    ``"detached"`` and ``"client_closed"``); ``attributes`` sum it up."""

    time: float
    reason: str
    attributes: Attributes


#: What :class:`MaintenanceTelemetry` asks the exporter to do.
Output: TypeAlias = Count | Observe | WindowOpened | WindowEvent | WindowClosed


class MaintenanceTelemetry:
    """The maintenance telemetry of one client or cluster node; see the module docs.

    :param server: ``db.system.name``, ``server.address``, ``server.port`` of the client
        (:meth:`OperationLabels.server <trio_maint._sansio.telemetry.OperationLabels.server>`).
    :param pool: ``db.system.name`` and ``db.client.connection.pool.name``.
    :param backstop: seconds (``float`` > 0) after the latest opening notification on a
        connection at which its window counts as closed though no closing came (the
        relaxation backstop, ``WINDOW_BACKSTOP_FACTOR x relaxed_timeout``).
    """

    def __init__(self, server: Attributes, pool: Attributes, backstop: float) -> None:
        self.server = server
        self.pool = pool
        self.backstop = backstop
        self._opened: tuple[float, str] | None = None
        self._conns: dict[int, tuple[int, float]] = {}  # conn -> (open count, last opening)
        self._moving_until = -math.inf
        self._pending: dict[int, float] = {}  # conn -> when its handoff was queued
        self._last = -math.inf  # latest closing notification or handoff outcome
        self._reason = ""
        self._notes = 0
        self._handoffs = [0, 0]  # succeeded, failed
        self._labels: dict[tuple[MetricSpec, str, str], Attributes] = {}

    @property
    def open(self) -> bool:
        """Whether a window is open (``bool``)."""
        return self._opened is not None

    def _attrs(self, metric: MetricSpec, key: str, value: str) -> Attributes:
        """The attributes of ``metric`` with ``key=value``, cached (bounded by the
        notification names, outcomes and breaker states)."""
        cache_key = (metric, key, value)
        found = self._labels.get(cache_key)
        if found is None:
            base = self.server if SERVER_ADDRESS in metric.labels else self.pool
            found = self._labels[cache_key] = {**base, key: value}
        return found

    def next_deadline(self) -> float:
        """When :meth:`tick` may close the window (``float``; ``inf``: only an event can,
        or no window is open)."""
        if self._opened is None:
            return math.inf
        ends = [self._moving_until] if self._moving_until > -math.inf else []
        ends += [opened + self.backstop for _n, opened in self._conns.values()]
        ends += [queued + self.backstop for queued in self._pending.values()]
        return max(ends) if ends else math.inf

    def event(self, event: MaintenanceEvent) -> list[Output]:
        """What to record for ``event`` (at its own ``time``)."""
        if not isinstance(event, _HANDLED):
            return []  # MalformedNotification, MaintenanceDisabled, EventsDropped
        now = event.time
        out = self.tick(now)
        if isinstance(event, NotificationReceived):
            self._notification(event, out)
        elif isinstance(event, MovingStarted):
            self._open(now, "MOVING", out)
            self._moving_until = max(self._moving_until, event.deadline)
        elif isinstance(event, HandoffQueued):
            if self._opened is not None:
                self._pending.setdefault(event.conn_id, now)
            self._note(out, now, "handoff_queued", {CONN_ID: event.conn_id, SEQ_ID: event.seq_id})
        elif isinstance(event, HandoffSucceeded | HandoffFailed):
            self._handoff(event, out)
        elif isinstance(event, MovingRefused):
            refused: Attributes = {SEQ_ID: event.seq_id, ENDPOINT: event.endpoint}
            self._note(out, now, "moving_refused", {**refused, REASON: event.reason})
        else:
            out.append(
                Count(BREAKER_CHANGES, self._attrs(BREAKER_CHANGES, BREAKER_STATE, event.new))
            )
            change: Attributes = {ENDPOINT: event.endpoint, BREAKER_STATE: event.new}
            self._note(out, now, "circuit_breaker_changed", {**change, OLD_STATE: event.old})
        self._close_if_done(now, out)
        return out

    def _notification(self, event: NotificationReceived, out: list[Output]) -> None:
        n, now = event.notification, event.time
        out.append(Count(NOTIFICATIONS, self._attrs(NOTIFICATIONS, NOTIFICATION, n.NAME)))
        if isinstance(n, _OPENING):
            count, _opened = self._conns.get(event.conn_id, (0, now))
            self._conns[event.conn_id] = (count + 1, now)
            self._open(now, n.NAME, out)
        details: dict[str, AttrValue] = {CONN_ID: event.conn_id, PUBSUB: event.pubsub}
        if n.seq_id is not None:
            details[SEQ_ID] = n.seq_id
        if isinstance(n, Moving):
            details[MOVING_TIME] = n.time
            details[ENDPOINT] = "null" if n.endpoint is None else str(n.endpoint)
        if event.error is not None:
            details[ERROR] = event.error
        self._note(out, now, n.NAME, details)
        if isinstance(n, _CLOSING):
            count, opened = self._conns.get(event.conn_id, (0, now))
            if count > 1:
                self._conns[event.conn_id] = (count - 1, opened)
            elif count == 1:
                del self._conns[event.conn_id]
            self._last = max(self._last, now)
            self._reason = n.NAME

    def _handoff(self, event: HandoffSucceeded | HandoffFailed, out: list[Output]) -> None:
        ok = isinstance(event, HandoffSucceeded)
        outcome = "succeeded" if ok else "failed"
        out.append(Count(HANDOFFS, self._attrs(HANDOFFS, HANDOFF_OUTCOME, outcome)))
        latency = self._attrs(HANDOFF_DURATION, HANDOFF_OUTCOME, outcome)
        out.append(Observe(HANDOFF_DURATION, event.latency, latency))
        self._pending.pop(event.conn_id, None)
        self._handoffs[0 if ok else 1] += 1
        self._last = max(self._last, event.time)
        self._reason = "handoffs"
        details: dict[str, AttrValue] = {CONN_ID: event.conn_id, ENDPOINT: event.endpoint}
        details[HANDOFF_DURATION.name] = event.latency
        if isinstance(event, HandoffFailed):
            details[ERROR] = event.error
        self._note(out, event.time, f"handoff_{outcome}", details)

    def _open(self, now: float, kind: str, out: list[Output]) -> None:
        if self._opened is not None:
            return
        self._opened = (now, kind)
        self._notes = 0
        self._handoffs = [0, 0]
        self._last = now
        self._reason = ""
        out.append(WindowOpened(now, kind, {**self.server, WINDOW_KIND: kind}))

    def _note(self, out: list[Output], now: float, name: str, details: Attributes) -> None:
        if self._opened is not None:
            self._notes += 1
            out.append(WindowEvent(now, name, details))

    def tick(self, now: float) -> list[Output]:
        """Close the window if it is done by ``now`` (the backstop and MOVING's time are
        taken into account); the shell calls it at :meth:`next_deadline`."""
        out: list[Output] = []
        if self._opened is None:
            return out
        for conn_id, (_count, opened) in list(self._conns.items()):
            if now >= opened + self.backstop:
                del self._conns[conn_id]
                self._backstop(opened)
        for conn_id, queued in list(self._pending.items()):
            if now >= queued + self.backstop:  # cancelled (the connection closed): no outcome
                del self._pending[conn_id]
                self._backstop(queued)
        self._close_if_done(now, out)
        return out

    def _backstop(self, since: float) -> None:
        if since + self.backstop > self._last:
            self._last, self._reason = since + self.backstop, "backstop"

    def _close_if_done(self, now: float, out: list[Output]) -> None:
        if self._opened is None or self._conns or self._pending or now < self._moving_until:
            return
        end, reason = self._last, self._reason
        if self._moving_until >= end:
            end, reason = self._moving_until, "moving_time"
        self._finish(end, reason or "moving_time", out)

    def close(self, now: float, reason: str = DETACHED) -> list[Output]:
        """The exporter stops observing at ``now``: an open window ends there, with
        ``reason`` :data:`DETACHED` (the exporter detached) or :data:`CLIENT_CLOSED` (the
        client closed)."""
        out = self.tick(now)
        if self._opened is not None:
            self._finish(now, reason, out)
        return out

    def _finish(self, end: float, reason: str, out: list[Output]) -> None:
        assert self._opened is not None
        opened, kind = self._opened
        end = max(end, opened)
        self._opened = None
        self._conns.clear()
        self._pending.clear()
        self._moving_until = -math.inf
        summary: dict[str, AttrValue] = {
            "redis.client.maintenance.window.closed_by": reason,
            "redis.client.maintenance.window.events": self._notes,
            "redis.client.maintenance.window.handoffs_succeeded": self._handoffs[0],
            "redis.client.maintenance.window.handoffs_failed": self._handoffs[1],
        }
        out.append(
            Observe(WINDOW_DURATION, end - opened, self._attrs(WINDOW_DURATION, WINDOW_KIND, kind))
        )
        out.append(WindowClosed(end, reason, summary))
