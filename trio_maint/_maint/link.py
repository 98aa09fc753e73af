"""The maintenance side of a pub/sub subscriber: :class:`PubSubLink`.

A :class:`~trio_maint.PubSub` makes its connections through its link, so the subscriber
is one more connection of the client's :class:`~trio_maint.lowlevel.MaintenanceMachine`
(known by the link's negative ``id``): it dials the current target, its notifications are
handled as the pool's are, and on MOVING the machine decides when it moves (at once for
an endpoint, after ``time / 2`` for a null endpoint) and the HandoffManager runs the move,
make-before-break: a new connection is dialed and handshaken, the PubSub subscribes it to
everything it has and only then closes the old one. A move that fails leaves the
subscriber on its old connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from .._net.connection import Connection
from .._sansio.errors import ConnectionClosedError

if TYPE_CHECKING:
    from .handler import MaintenanceHandler

__all__ = ["PubSubLink", "Subscriber"]


class Subscriber(Protocol):
    """What a link needs from its PubSub."""

    @property
    def connection(self) -> Connection | None:
        """The connection messages are read from now (``None`` before the first)."""
        ...

    async def adopt_connection(self, conn: Connection) -> None:
        """Subscribe ``conn`` to every channel, pattern and shard channel, make it the
        connection messages are read from, and close the previous one.

        :raises ConnectionClosedError: the PubSub is closed (``conn`` is left open).
        """
        ...


class PubSubLink:
    """Connection factory, push handler and handoff target of one PubSub.

    :ivar id: the subscriber's id in the machine (``int`` < 0, unique per client).
    :ivar memory_tls: its connections keep TLS in a
        :class:`~trio_maint._net.tls_memory.MemoryTLSStream` (``bool``; a client-side
        cache's tracking connection, read without blocking), dials and handoffs alike.
    """

    def __init__(self, handler: MaintenanceHandler, link_id: int) -> None:
        self.handler = handler
        self.id = link_id
        self.memory_tls = False
        self.pubsub: Subscriber | None = None

    def __repr__(self) -> str:
        return f"<PubSubLink {self.id}>"

    def attach(self, pubsub: Subscriber) -> None:
        """Serve ``pubsub``."""
        self.pubsub = pubsub

    @property
    def connection(self) -> Connection | None:
        """The PubSub's current connection, or ``None``."""
        return None if self.pubsub is None else self.pubsub.connection

    async def connect(self) -> Connection:
        """A new connection to the client's current dial target (the PubSub's connection
        factory).

        :raises ConnectionError, TimeoutError, AuthenticationError: the dial failed.
        """
        return await self.handler.connect_link(self)

    def push(self, conn: Connection, frame: list[Any]) -> None:
        """The push handler of the PubSub's connections (synchronous, never raises)."""
        self.handler.process(self.id, conn, frame, pubsub=True)

    async def adopt(self, conn: Connection) -> None:
        """Hand a handed-off connection to the PubSub (see :class:`Subscriber`).

        :raises ConnectionClosedError: there is no PubSub any more.
        """
        if self.pubsub is None:
            raise ConnectionClosedError("the PubSub of this link is gone")
        await self.pubsub.adopt_connection(conn)

    def close(self) -> None:
        """The PubSub closed: forget the subscriber (a handoff under way is withdrawn)."""
        self.handler.forget_link(self)
