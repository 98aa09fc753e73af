"""The instrumentation hook of the clients: what an exporter (:mod:`trio_maint.otel`,
:mod:`trio_maint.prometheus`) is told about commands, pipelines and pub/sub messages.

Each client keeps one ``_observer`` (``None`` unless an exporter is attached), and each
path checks it once: :meth:`Redis._command <trio_maint.Redis>`, :meth:`Pipeline.execute
<trio_maint.Pipeline.execute>`, the cluster's routed commands and pipelines, and a
PubSub's received messages. An observed command runs inside :meth:`CommandObserver.command`,
which times it; the unobserved path pays one ``is None`` check (docs/observability.md,
docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Protocol, TypeVar

from .._sansio.options import ClientOptions
from .._sansio.resp import CommandArg

if TYPE_CHECKING:
    from .redis import Redis

__all__ = ["CommandObserver"]

T = TypeVar("T")


class CommandObserver(Protocol):
    """What the clients report to an attached exporter (the shell in
    :mod:`trio_maint._telemetry`). Each method awaits ``run`` exactly once and returns
    its result or raises its error; reporting never raises."""

    async def command(self, client: Redis, name: CommandArg, run: Awaitable[T]) -> T:
        """Run one command of ``client`` (``name``: its first argument), retries
        included."""
        ...

    async def pipeline(self, client: object, transaction: bool, size: int, run: Awaitable[T]) -> T:
        """Run one pipeline (``transaction``: MULTI/EXEC) of ``size`` commands of
        ``client`` (a :class:`~trio_maint.Redis` or :class:`~trio_maint.RedisCluster`)."""
        ...

    async def cluster_command(
        self, cluster: object, name: CommandArg, slot: int | None, run: Awaitable[T]
    ) -> T:
        """Run one command of a :class:`~trio_maint.RedisCluster` routed by ``slot``."""
        ...

    def pubsub_message(self, options: ClientOptions, kind: str) -> None:
        """A PubSub of a client with ``options`` read a message of type ``kind``
        (``"message"``, ``"pmessage"``, ``"smessage"``, ``"pong"``; confirmations are not
        reported)."""
        ...

    def node_started(self, client: Redis) -> None:
        """A cluster node's client started (observe it too)."""
        ...

    def node_stopped(self, client: Redis) -> None:
        """A cluster node's client stopped."""
        ...
