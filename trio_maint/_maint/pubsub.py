"""The maintenance side of a pub/sub connection: :class:`PubSubLink` makes a
:class:`~trio_maint.PubSub`'s connections through the handler and, on MOVING, asks the
PubSub to reconnect to the new endpoint and resubscribe (other notifications relax its
timeouts as on any connection)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from .._net.connection import Connection
from .._sansio.notifications import Moving, Notification
from .moving import MovingReactions

if TYPE_CHECKING:
    from .handler import MaintenanceHandler

__all__ = ["PubSubLink"]

logger = logging.getLogger("trio_maint.maintenance")


class _Reconnectable(Protocol):
    def reconnect_soon(self) -> None: ...


class PubSubLink:
    """Connection factory and push handler of one PubSub: on MOVING it asks the PubSub to
    reconnect (once per sequence id) to the new endpoint and resubscribe."""

    def __init__(self, handler: MaintenanceHandler) -> None:
        self.handler = handler
        self.target = handler._target
        self.pubsub: _Reconnectable | None = None
        self.last_seq: int | None = None

    def attach(self, pubsub: _Reconnectable) -> None:
        self.pubsub = pubsub

    async def connect(self) -> Connection:
        conn = self.handler._new_connection(self.target, self.push)
        await conn.connect()
        return conn

    def push(self, conn: Connection, frame: list[Any]) -> None:
        self.handler._process(conn, frame, self)

    def on_notification(self, conn: Connection, n: Notification) -> None:
        if not isinstance(n, Moving):
            self.handler._relax(conn, n)
            return
        if self.last_seq is not None and n.seq_id <= self.last_seq:
            return
        self.last_seq = n.seq_id
        target = n.endpoint if n.endpoint is not None else self.target
        if n.endpoint is not None and MovingReactions._is_at(conn, n.endpoint):
            return
        self.target = target
        logger.info(
            "pub/sub conn[%d] MOVING seq %d: reconnecting to %s and resubscribing",
            conn.id,
            n.seq_id,
            target,
            extra={"event": "pubsub_moving", "conn_id": conn.id, "seq_id": n.seq_id},
        )
        if self.pubsub is not None:
            self.pubsub.reconnect_soon()
