"""Maintenance events and state: the :class:`EventStream` that delivers the events of
``r.maintenance.events()`` (the event values themselves are sans-IO, in
:mod:`trio_maint._sansio.events`, re-exported here), and the :class:`MaintenanceState`
snapshot (``r.maintenance.state``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Final, Self

import attrs
import trio

from .._sansio.config import MaintMode
from .._sansio.endpoint import EndpointType
from .._sansio.events import (
    CircuitBreakerChanged,
    EventsDropped,
    HandoffFailed,
    HandoffQueued,
    HandoffSucceeded,
    MaintenanceDisabled,
    MaintenanceEvent,
    MalformedNotification,
    MovingRefused,
    MovingStarted,
    NotificationReceived,
)

if TYPE_CHECKING:
    from .hooks import NotificationHook

logger = logging.getLogger("trio_maint.maintenance")

#: Default capacity of an event stream (``int``).
DEFAULT_EVENT_BUFFER: Final = 256

__all__ = [
    "DEFAULT_EVENT_BUFFER",
    "CircuitBreakerChanged",
    "EventHub",
    "EventStream",
    "EventsDropped",
    "HandoffFailed",
    "HandoffQueued",
    "HandoffSucceeded",
    "MaintenanceDisabled",
    "MaintenanceEvent",
    "MaintenanceState",
    "MalformedNotification",
    "MovingRefused",
    "MovingStarted",
    "NotificationReceived",
]


class EventStream:
    """A bounded stream of :data:`MaintenanceEvent` values; get one from
    :meth:`MaintenanceHandler.events` and read it with ``async for``.

    Publishing never blocks: when the buffer is full the oldest event is discarded, and
    the consumer receives an :class:`EventsDropped` (with the count) before the next
    event. Iteration ends when the client closes or :meth:`aclose` is called.
    """

    def __init__(self, owner: EventHub, size: int) -> None:
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


class EventHub:
    """The notification hooks and event subscribers of one client: what
    :meth:`MaintenanceHandler.add_hook` and :meth:`MaintenanceHandler.events` register,
    and the one place events are delivered from (:meth:`emit`)."""

    def __init__(self) -> None:
        #: The registered hooks, in order (a tuple, replaced on each registration).
        self.hooks: tuple[NotificationHook, ...] = ()
        self._observers: tuple[Callable[[MaintenanceEvent], None], ...] = ()
        self._streams: list[EventStream] = []
        self.closed = False

    @property
    def listening(self) -> bool:
        """Whether any stream or ``on_event`` hook would receive an event (``bool``)."""
        return bool(self._streams or self._observers)

    def add_hook(self, hook: NotificationHook) -> None:
        """Register ``hook`` (appended); its ``on_event``, if any, receives every event."""
        self.hooks = (*self.hooks, hook)
        on_event = getattr(hook, "on_event", None)
        if callable(on_event):
            self._observers = (*self._observers, on_event)

    def remove_hook(self, hook: NotificationHook) -> None:
        """Unregister ``hook`` and its ``on_event`` (no error if it is not registered)."""
        self.hooks = tuple(h for h in self.hooks if h is not hook)
        on_event = getattr(hook, "on_event", None)
        self._observers = tuple(o for o in self._observers if o != on_event)

    def stream(self, max_buffer: int) -> EventStream:
        """A new :class:`EventStream` (already ended when the hub is closed)."""
        stream = EventStream(self, max_buffer)
        if self.closed:
            stream._close()
        else:
            self._streams.append(stream)
        return stream

    def _unsubscribe(self, stream: EventStream) -> None:
        if stream in self._streams:
            self._streams.remove(stream)

    def emit(self, event: MaintenanceEvent) -> None:
        """Deliver ``event`` to every ``on_event`` hook (errors logged) and stream."""
        for observer in self._observers:
            try:
                observer(event)
            except Exception:
                logger.exception("maintenance event observer %r failed", observer)
        for stream in tuple(self._streams):
            stream._publish(event)

    def close(self) -> None:
        """End every stream; later streams end at once."""
        self.closed = True
        streams, self._streams = self._streams, []
        for stream in streams:
            stream._close()


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
