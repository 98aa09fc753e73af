"""What both demos (standalone and ``--cluster``) read off their client for the live view:
notifications described once each (:class:`NotificationLog`), relaxed connections and why
(:func:`relaxation`), the recent rate of commands (:func:`recent_rate`), and the live view's
numbers both demos show (:func:`workload_snapshot`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from .. import Moving, NotificationReceived
from .report import Observer, Snapshot
from .workload import WorkloadStats

__all__ = [
    "NotificationLog",
    "Relaxation",
    "Silent",
    "describe",
    "recent_rate",
    "relaxation",
    "workload_snapshot",
]


class Silent:
    """An :class:`~trio_maint._cli.report.Observer` that shows nothing."""

    def event(self, elapsed: float, text: str) -> None:
        """Ignore an event."""

    def notification(self, elapsed: float, text: str) -> None:
        """Ignore a notification."""

    def update(self, snapshot: Snapshot) -> None:
        """Ignore the numbers."""


def describe(n: Any, names: dict[str, str]) -> tuple[str, str]:
    """``(what arrived, what the client does)`` for a notification; ``names`` labels
    endpoints (``{"127.0.0.1:7000": "B"}``)."""
    name = n.NAME
    seq = getattr(n, "seq_id", None)
    head = f"{name} seq={seq}" if seq is not None else name
    if isinstance(n, Moving):
        if n.endpoint is None:
            return (
                f"{head} time={n.time:g}s endpoint=null",
                f"reconnect to the same address in {n.time / 2:g} s",
            )
        where = str(n.endpoint)
        label = names.get(where)
        shown = f"{where} ({label})" if label else where
        return (f"{head} time={n.time:g}s endpoint={shown}", f"hand connections off to {shown}")
    if name == "SMIGRATING":
        slots = ",".join(getattr(n, "slots", ()))
        shown = slots if len(slots) <= 24 else f"{slots[:21]}..."
        return f"{head} slots={shown}", "relax timeouts"
    if name == "SMIGRATED":
        return head, "restore timeouts, reload the slot map"
    if name in ("MIGRATING", "FAILING_OVER"):
        return head, "relax timeouts"
    return head, "restore timeouts"


class NotificationLog:
    """Each notification once, with the number of connections it arrived on: the first
    copy of ``(name, seq_id)`` goes to the observer and into ``entries`` (``{"t", "name",
    "seq_id", "connections", "text", "action"}``, the report's ``notifications``)."""

    def __init__(self, observer: Observer, names: dict[str, str]) -> None:
        self.observer = observer
        self.names = names
        self.entries: list[dict[str, Any]] = []
        self._seen: dict[tuple[str, Any], dict[str, Any]] = {}

    def add(self, elapsed: float, event: NotificationReceived) -> None:
        """Count ``event`` (a notification received on one connection) at ``elapsed``."""
        n = event.notification
        key = (n.NAME, getattr(n, "seq_id", None))
        entry = self._seen.get(key)
        if entry is None:
            arrived, action = describe(n, self.names)
            entry = {"t": elapsed, "name": n.NAME, "seq_id": key[1], "connections": 0}
            entry["text"] = arrived
            entry["action"] = action
            self._seen[key] = entry
            self.entries.append(entry)
            self.observer.notification(elapsed, f"{arrived} -> {action}")
        entry["connections"] += 1


@attrs.frozen
class Relaxation:
    """Relaxed connections at some moment.

    :ivar relaxed: connections with relaxed timeouts (``int``).
    :ivar after_handoff: of these, the ones relaxed only because they were handed off
        (``int``: no notification window open on them).
    :ivar until: when the last post-handoff period ends (Trio time, ``float``) or ``None``.
    """

    relaxed: int = 0
    after_handoff: int = 0
    until: float | None = None


def relaxation(handlers: Iterable[Any], now: float) -> Relaxation:
    """Count relaxed connections over ``handlers`` (each a client's ``maintenance``, a
    :class:`~trio_maint.MaintenanceHandler`, or ``None``) at Trio time ``now``, telling
    apart those in a maintenance window from those relaxed after a handoff."""
    relaxed = after = 0
    until: float | None = None
    for handler in handlers:
        if handler is None:
            continue
        for record in handler.machine.records():
            if record.timeouts is None:
                continue
            state = record.timeouts.state(now)
            if not state.relaxed:
                continue
            relaxed += 1
            if state.open_windows == 0 and state.post_handoff_until is not None:
                after += 1
                until = max(until or state.post_handoff_until, state.post_handoff_until)
    return Relaxation(relaxed, after, until)


def recent_rate(ops: list[tuple[float, float]], now: float) -> float:
    """Commands per second over the last second, from ``(started, latency)`` in order of
    completion (seconds from the start; ``now`` likewise)."""
    recent = 0
    for started, _latency in reversed(ops):
        if started < now - 1.0:
            break
        recent += 1
    return recent / min(1.0, max(now, 1e-3))


def workload_snapshot(
    stats: WorkloadStats, now: float, phase: str, relaxed: Relaxation, **fields: Any
) -> Snapshot:
    """A :class:`Snapshot` of the workload at ``now`` (seconds from the start): its recent
    rate, totals and failures from ``stats``, the relaxed connections, and the demo's own
    ``fields`` (``endpoint``, ``handoffs``, ``extra``, ...)."""
    return Snapshot(
        elapsed=now,
        phase=phase,
        ops_per_second=recent_rate(stats.ops, now),
        total=len(stats.ops),
        failed=len(stats.failed_at),
        relaxed=relaxed.relaxed,
        **fields,
    )
