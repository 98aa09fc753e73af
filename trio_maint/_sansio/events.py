"""Maintenance events (sans-IO values): what the maintenance layer reports to
``r.maintenance.events()`` streams and to hooks' ``on_event``.

The :class:`~trio_maint._sansio.maint.MaintenanceMachine` builds the handoff and MOVING
events; the Trio shell builds the notification events and delivers all of them. Every
``time`` is the ``now`` the event happened at (``trio.current_time()`` scale, ``float``
seconds).
"""

from __future__ import annotations

from typing import TypeAlias

import attrs

from .notifications import Notification

__all__ = [
    "CircuitBreakerChanged",
    "EventsDropped",
    "HandoffFailed",
    "HandoffQueued",
    "HandoffSucceeded",
    "MaintenanceDisabled",
    "MaintenanceEvent",
    "MalformedNotification",
    "MovingRefused",
    "MovingStarted",
    "NotificationReceived",
]


@attrs.frozen
class NotificationReceived:
    """A maintenance notification was handled (hooks did not drop it).

    :ivar conn_id: the connection it arrived on (``int``).
    :ivar notification: the parsed notification (``Moving``, ``Migrating``, ...).
    :ivar pubsub: ``True`` when it arrived on a pub/sub connection (``bool``).
    :ivar error: ``repr`` of the error handling it raised, or ``None``.
    :ivar time: when it was handled (``float``).
    """

    conn_id: int
    notification: Notification
    pubsub: bool
    error: str | None
    time: float


@attrs.frozen
class MalformedNotification:
    """A maintenance push frame with a wrong structure was ignored.

    :ivar conn_id: the connection (``int``); :ivar name: its name or ``None``;
    :ivar reason: what is wrong (``str``); :ivar shape: its structure (``str``);
    :ivar time: when it was read (``float``).
    """

    conn_id: int
    name: str | None
    reason: str
    shape: str
    time: float


@attrs.frozen
class MovingStarted:
    """The first MOVING of a new sequence id from an endpoint: the client reacts
    pool-wide (as Redis's MOVING notification).

    :ivar seq_id: (``int``); :ivar endpoint: the new endpoint as ``host:port`` text, or
        ``None`` for a null endpoint (reconnect to the current address after
        ``time / 2``); :ivar deadline: when the old endpoint goes away (``float``);
        :ivar time: when it was handled (``float``).
    """

    seq_id: int
    endpoint: str | None
    deadline: float
    time: float


@attrs.frozen
class MovingRefused:
    """A MOVING named an endpoint the client does not follow (docs/security.md): it was
    handled as a null-endpoint MOVING to the configured address instead.

    :ivar seq_id: (``int``); :ivar endpoint: the refused endpoint, ``host:port`` text;
    :ivar reason: why (``str``); :ivar time: when it was handled (``float``, Trio's clock).
    """

    seq_id: int
    endpoint: str
    reason: str
    time: float


@attrs.frozen
class HandoffQueued:
    """A connection was given to the HandoffManager (``conn_id``, ``endpoint`` text,
    ``seq_id``, ``time``)."""

    conn_id: int
    endpoint: str
    seq_id: int
    time: float


@attrs.frozen
class HandoffSucceeded:
    """A connection now talks to ``endpoint``; ``latency`` is the seconds (``float``) from
    queueing to success."""

    conn_id: int
    endpoint: str
    latency: float
    time: float


@attrs.frozen
class HandoffFailed:
    """A handoff failed: the connection was removed from the pool (a pub/sub connection
    stays where it is); ``error`` is the ``repr`` of the cause, ``latency`` seconds from
    queueing (``float``)."""

    conn_id: int
    endpoint: str
    error: str
    latency: float
    time: float


@attrs.frozen
class MaintenanceDisabled:
    """``auto`` mode met a server that refuses ``CLIENT MAINT_NOTIFICATIONS``: the feature
    is off for this client from now on (``endpoint`` text, the server's ``reply``)."""

    endpoint: str
    reply: str
    time: float


@attrs.frozen
class CircuitBreakerChanged:
    """The circuit breaker of a handoff target changed state (docs/maintenance.md).

    :ivar endpoint: the endpoint it guards, ``host:port`` text.
    :ivar old: the state it left: ``"closed"``, ``"open"`` or ``"half-open"`` (``str``).
    :ivar new: the state it is in now (``str``, as ``old``).
    :ivar time: when it changed (``float``, Trio's clock).
    """

    endpoint: str
    old: str
    new: str
    time: float


@attrs.frozen
class EventsDropped:
    """This stream's consumer was too slow: ``count`` (``int``) oldest events were
    discarded just before this one was delivered."""

    count: int


#: Any event of ``r.maintenance.events()``.
MaintenanceEvent: TypeAlias = (
    NotificationReceived
    | MalformedNotification
    | MovingStarted
    | MovingRefused
    | HandoffQueued
    | HandoffSucceeded
    | HandoffFailed
    | MaintenanceDisabled
    | CircuitBreakerChanged
    | EventsDropped
)
