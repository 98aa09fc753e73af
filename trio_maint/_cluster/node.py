"""One node of a cluster client: its :class:`~trio_maint.Redis` (pool and maintenance
handler) once running, and the hook that turns the node's ``SMIGRATED`` notifications into
slot-map updates of the cluster client."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

import trio

from .._client.redis import Redis
from .._net.connection import Connection
from .._sansio.notifications import Notification, SMigrated
from .._sansio.slots import NodeInfo

if TYPE_CHECKING:
    from .client import RedisCluster

__all__ = ["Node", "SlotMigrationHook"]


class Node:
    """One cluster node: its :class:`Redis` (pool + maintenance handler) once running."""

    __slots__ = ("client", "closing", "error", "info", "readonly", "ready")

    def __init__(self, info: NodeInfo) -> None:
        self.info = info
        self.client: Redis | None = None
        self.error: BaseException | None = None
        self.ready = trio.Event()
        self.closing = trio.Event()
        # Connections of this node that ran READONLY (replica reads).
        self.readonly: weakref.WeakSet[Connection] = weakref.WeakSet()

    @property
    def name(self) -> str:
        """``host:port`` of the node, its key in the cluster client."""
        return self.info.name


class SlotMigrationHook:
    """A :class:`~trio_maint.NotificationHook` installed on every node's handler: turns
    ``SMIGRATED`` into a slot-map update and one lazy refresh per sequence id."""

    def __init__(self, cluster: RedisCluster, node: Node) -> None:
        self._cluster = weakref.ref(cluster)
        self._node = node

    def pre(self, conn: Connection, notification: Notification) -> bool:
        return True

    def post(
        self, conn: Connection, notification: Notification, error: BaseException | None
    ) -> None:
        cluster = self._cluster()
        if cluster is not None and isinstance(notification, SMigrated):
            cluster.handle_smigrated(self._node.name, conn, notification)

    def __repr__(self) -> str:
        return f"<cluster slot-migration hook {self._node.name}>"
