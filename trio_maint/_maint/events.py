"""Maintenance events and state: what ``r.maintenance.events()`` streams deliver
(:data:`MaintenanceEvent`), the :class:`EventStream` that delivers them, and the
:class:`MaintenanceState` snapshot (``r.maintenance.state``).
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Self, TypeAlias

import attrs
import trio

from .._sansio.config import MaintMode
from .._sansio.endpoint import EndpointType
from .._sansio.notifications import Notification

if TYPE_CHECKING:
    from .handler import MaintenanceHandler

__all__ = [
    "EventStream",
    "EventsDropped",
    "HandoffFailed",
    "HandoffQueued",
    "HandoffSucceeded",
    "MaintenanceDisabled",
    "MaintenanceEvent",
    "MaintenanceState",
    "MalformedNotification",
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
    :ivar time: ``trio.current_time()`` (``float``).
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
    :ivar time: ``trio.current_time()``.
    """

    conn_id: int
    name: str | None
    reason: str
    shape: str
    time: float


@attrs.frozen
class MovingStarted:
    """The first MOVING of a new sequence id: the client reacts pool-wide.

    :ivar seq_id: (``int``); :ivar endpoint: the new endpoint as ``host:port`` text, or
        ``None`` for a null endpoint (reconnect to the current address after
        ``time / 2``); :ivar deadline: when the old endpoint goes away
        (``trio.current_time()`` scale, ``float``); :ivar time: when it was handled.
    """

    seq_id: int
    endpoint: str | None
    deadline: float
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
    """A handoff failed and the connection was removed from the pool; ``error`` is the
    ``repr`` of the cause, ``latency`` seconds from queueing (``float``)."""

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
class EventsDropped:
    """This stream's consumer was too slow: ``count`` (``int``) oldest events were
    discarded just before this one was delivered."""

    count: int


#: Any event of :meth:`MaintenanceHandler.events`.
MaintenanceEvent: TypeAlias = (
    NotificationReceived
    | MalformedNotification
    | MovingStarted
    | HandoffQueued
    | HandoffSucceeded
    | HandoffFailed
    | MaintenanceDisabled
    | EventsDropped
)


class EventStream:
    """A bounded stream of :data:`MaintenanceEvent` values; get one from
    :meth:`MaintenanceHandler.events` and read it with ``async for``.

    Publishing never blocks: when the buffer is full the oldest event is discarded, and
    the consumer receives an :class:`EventsDropped` (with the count) before the next
    event. Iteration ends when the client closes or :meth:`aclose` is called.
    """

    def __init__(self, owner: MaintenanceHandler, size: int) -> None:
        if size < 1:
            raise ValueError("max_buffer: must be >= 1")
        self._owner = owner
        self._send, self._receive = trio.open_memory_channel[MaintenanceEvent](size)
        self._lost = 0
        #: Total events this stream discarded (``int``).
        self.dropped = 0

    def _publish(self, event: MaintenanceEvent) -> None:
        try:
            self._send.send_nowait(event)
        except trio.WouldBlock:
            try:
                self._receive.receive_nowait()
            except trio.WouldBlock:  # pragma: no cover - a full buffer has an item
                pass
            self._lost += 1
            self.dropped += 1
            self._send.send_nowait(event)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            self._owner._unsubscribe(self)

    def _close(self) -> None:
        self._send.close()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> MaintenanceEvent:
        if self._lost:
            await trio.lowlevel.checkpoint()
            lost, self._lost = self._lost, 0
            return EventsDropped(lost)
        try:
            return await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        """Stop receiving events."""
        self._owner._unsubscribe(self)
        self._send.close()
        await trio.lowlevel.checkpoint()

    async def __aenter__(self) -> Self:
        await trio.lowlevel.checkpoint()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


@attrs.frozen
class MaintenanceState:
    """A snapshot of ``r.maintenance`` (:attr:`MaintenanceHandler.state`).

    :ivar mode: the effective :class:`~trio_maint.MaintMode` (``auto`` turns into
        ``disabled`` once a server refused the opt-in).
    :ivar endpoint_type: the ``moving-endpoint-type`` requested
        (:class:`~trio_maint.EndpointType`).
    :ivar in_window: a maintenance window is open on some connection, or a MOVING's
        ``time`` has not run out yet (``bool``).
    :ivar relaxed_connections: connections whose timeouts are relaxed now (``int``).
    :ivar pending_handoffs: connections owned by the HandoffManager, plus delayed
        (null-endpoint) handoffs not yet due (``int``).
    :ivar completed_handoffs / failed_handoffs: totals since the client opened (``int``).
    :ivar current_endpoint: where new connections are dialed (``str``).
    :ivar last_moving_seq: sequence id of the latest MOVING handled (``int | None``).
    :ivar moving_deadline: when that MOVING's ``time`` runs out (``float | None``).
    """

    mode: MaintMode
    endpoint_type: EndpointType
    in_window: bool
    relaxed_connections: int
    pending_handoffs: int
    completed_handoffs: int
    failed_handoffs: int
    current_endpoint: str
    last_moving_seq: int | None
    moving_deadline: float | None
