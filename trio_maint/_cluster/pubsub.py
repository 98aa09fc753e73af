"""Sharded pub/sub over a cluster: :class:`ClusterPubSub`."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final, Self

import trio

from .._client.pubsub import Message, PubSub
from .._net.groups import open_nursery_unwrapped, unwrap_group
from .._sansio.commands import KeyT
from .._sansio.endpoint import split_host_port
from .._sansio.errors import (
    AskError,
    ClusterDownError,
    ConnectionClosedError,
    MovedError,
    RedisError,
    ResponseError,
    TryAgainError,
)
from .._sansio.loglimit import log_limited
from .._sansio.pubsub import CONFIRMATIONS, slot_groups
from .._sansio.slots import NodeInfo, key_slot
from .redirects import backoff

if TYPE_CHECKING:
    from .client import RedisCluster

__all__ = ["ClusterPubSub"]

logger = logging.getLogger("trio_maint.cluster")

#: Attempts (``int``) to subscribe a slot's channels when the node answers ``MOVED``,
#: ``ASK``, ``TRYAGAIN`` or ``CLUSTERDOWN`` (the slot map is refreshed between).
SUBSCRIBE_ATTEMPTS: Final = 8
#: Attempts (``int``) of an automatic resubscription (after a slot move or a lost
#: connection) before it gives up and logs an error; about 12 s of backoff.
RESUBSCRIBE_ATTEMPTS: Final = 50
_RETRYABLE: Final = (MovedError, AskError, TryAgainError, ClusterDownError)


class ClusterPubSub:
    """Sharded pub/sub over a cluster: one subscriber connection per node that owns a
    subscribed shard channel, each channel subscribed with the others of its slot (one
    ``SSUBSCRIBE`` per slot). Get one with ``async with rc.pubsub() as ps:``
    (:meth:`RedisCluster.pubsub <trio_maint.RedisCluster.pubsub>`), then :meth:`ssubscribe`
    and ``async for message in ps`` or :meth:`get_message`.

    When a channel's slot moves (the node sends ``sunsubscribe`` for it, or its
    connection is lost) the channel is subscribed again on the slot's new owner, after a
    slot-map refresh; that ``sunsubscribe`` is not delivered. Messages published while
    it moves may be missed (pub/sub is at-most-once).

    :param cluster: the :class:`~trio_maint.RedisCluster`.
    :param nursery: where its reader tasks run (opened by ``rc.pubsub()``).
    :param ignore_subscribe_messages: skip ``ssubscribe``/``sunsubscribe`` confirmations.
    """

    def __init__(
        self,
        cluster: RedisCluster,
        nursery: trio.Nursery,
        *,
        ignore_subscribe_messages: bool = False,
    ) -> None:
        self._cluster = cluster
        self._nursery = nursery
        self.ignore_subscribe_messages = ignore_subscribe_messages
        #: The shard channels subscribed (``set``).
        self.shard_channels: set[Any] = set()
        self._where: dict[Any, str] = {}  # channel -> node name
        self._subs: dict[str, PubSub] = {}
        self._send, self._receive = trio.open_memory_channel[Message](1000)
        self._lock = trio.Lock()
        self._closed = False
        #: How many times channels were subscribed again elsewhere (``int``).
        self.resubscriptions = 0

    @classmethod
    @asynccontextmanager
    async def open(
        cls, cluster: RedisCluster, *, ignore_subscribe_messages: bool = False
    ) -> AsyncIterator[Self]:
        """A ClusterPubSub for the ``async with`` block, its reader tasks in a nursery
        entered here; on exit every subscriber connection is closed and the tasks end.
        An exception of the block comes out as raised; one of a task unwrapped."""
        body_error: BaseException | None = None
        try:
            async with open_nursery_unwrapped() as nursery:
                pubsub = cls(cluster, nursery, ignore_subscribe_messages=ignore_subscribe_messages)
                try:
                    yield pubsub
                except BaseException as exc:
                    body_error = exc
                    raise
                finally:
                    pubsub._close()
        except BaseExceptionGroup as group:
            if group is body_error:
                raise
            raise unwrap_group(group) from None

    async def aclose(self) -> None:
        """Close every subscriber connection now; iteration then ends (the ``async
        with`` block of ``rc.pubsub()`` does it on exit)."""
        self._close()
        await trio.lowlevel.checkpoint()

    def _close(self) -> None:
        self._closed = True
        subs, self._subs = self._subs, {}
        for ps in subs.values():
            ps._close_nowait()
        self._send.close()
        self._receive.close()
        self._nursery.cancel_scope.cancel()

    def _key(self, channel: Any) -> Any:
        return channel.encode() if isinstance(channel, str) else channel

    async def _sub_for(self, name: str) -> PubSub:
        ps = self._subs.get(name)
        if ps is None:
            if self._closed:
                raise ConnectionClosedError("this ClusterPubSub is closed")
            info = self._cluster._map.nodes.get(name)
            if info is None:
                host, port = split_host_port(name, require_port=True)
                info = NodeInfo(name, host, port)
            node = await self._cluster._node(info)
            assert node.client is not None
            ps = self._subs.get(name)
            if ps is None:
                if self._closed:
                    raise ConnectionClosedError("this ClusterPubSub is closed")
                ps = node.client.pubsub()
                self._subs[name] = ps
                self._nursery.start_soon(self._reader, name, ps)
        return ps

    async def ssubscribe(self, *channels: KeyT) -> None:
        """``SSUBSCRIBE`` the channels: one command per slot, on the slot's master.
        Returns once every channel is confirmed. A node answering ``MOVED`` (or ``ASK``,
        ``TRYAGAIN``, ``CLUSTERDOWN``) gets the slot's channels again on the right owner
        after a slot-map refresh, up to ``SUBSCRIBE_ATTEMPTS`` (8) times.

        :raises ResponseError: a node refused a slot's channels (``CROSSSLOT``,
            ``NOPERM``, or the last ``MOVED``...); the other slots stay subscribed.
        :raises ConnectionError: a node cannot be reached.
        :raises TimeoutError: a node did not confirm within ``socket_timeout``.
        """
        if not channels:
            raise ValueError("ssubscribe() needs at least one channel")
        async with self._lock:
            await self._subscribe(channels)

    async def _subscribe(self, channels: Sequence[Any]) -> None:
        """Subscribe ``channels``, each slot's together, where their slots live now."""
        cluster = self._cluster
        pending = slot_groups(channels)
        for attempt in range(SUBSCRIBE_ATTEMPTS):
            by_node: dict[str, list[list[Any]]] = {}
            for group in pending:
                node, _replica = await cluster._route(key_slot(group[0]), False)
                by_node.setdefault(node.name, []).append(group)
            refused: list[tuple[list[Any], ResponseError]] = []
            for name, groups in by_node.items():
                ps = await self._sub_for(name)
                errors = await ps._subscribe_groups("SSUBSCRIBE", groups)
                for group, error in zip(groups, errors, strict=True):
                    if error is not None:
                        refused.append((group, error))
                        continue
                    for channel in group:
                        self.shard_channels.add(channel)
                        self._where[self._key(channel)] = name
            final = [e for _g, e in refused if not isinstance(e, _RETRYABLE)]
            if final:
                raise final[0]
            if not refused:
                return
            if attempt == SUBSCRIBE_ATTEMPTS - 1:
                raise refused[0][1]
            if any(not isinstance(e, MovedError) for _g, e in refused):
                await trio.sleep(backoff(attempt))  # mid-migration or failover: wait
            await cluster.refresh_slots()  # then route each slot to its owner again
            pending = [group for group, _e in refused]

    async def sunsubscribe(self, *channels: KeyT) -> None:
        """``SUNSUBSCRIBE`` the channels (all when none are given), one command per slot;
        does not wait for the confirmations."""
        async with self._lock:
            targets = list(channels) if channels else list(self.shard_channels)
            by_node: dict[str, list[Any]] = {}
            for channel in targets:
                self.shard_channels.discard(channel)
                name = self._where.pop(self._key(channel), None)
                if name is not None:
                    by_node.setdefault(name, []).append(channel)
            for name, group in by_node.items():
                ps = self._subs.get(name)
                if ps is not None:
                    await ps.sunsubscribe(*group)

    async def _reader(self, name: str, ps: PubSub) -> None:
        while True:
            try:
                message = await ps.get_message()
            except ConnectionClosedError:
                return
            except RedisError as exc:
                log_limited(
                    logger,
                    logging.INFO,
                    "sharded_pubsub_lost",
                    trio.current_time(),
                    "sharded pub/sub connection to %s lost (%s); moving",
                    name,
                    exc,
                    extra={"event": "sharded_pubsub_lost", "node": name},
                )
                await self._move_away(name, None)
                return
            if message is None:
                continue
            if message.type == "sunsubscribe":
                key = self._key(message.channel)
                if key in self._where and self._where[key] == name:
                    # The server dropped it (its slot moved): follow the slot.
                    if not self._closed:
                        self._nursery.start_soon(self._move_away, name, message.channel)
                    continue
            if self.ignore_subscribe_messages and message.type in ("ssubscribe", "sunsubscribe"):
                continue
            try:
                await self._send.send(message)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                return

    async def _move_away(self, name: str, channel: Any | None) -> None:
        """Subscribe again elsewhere: ``channel``, which node ``name`` dropped (its slot
        moved: wait until the map names another owner, bounded), or every channel of
        ``name`` when ``channel`` is ``None`` (its connection was lost: resubscribe where
        the refreshed map says, the same node included)."""
        cluster = self._cluster
        async with self._lock:
            if channel is not None:
                channels = [c for c in self.shard_channels if self._key(c) == self._key(channel)]
                old = self._subs.get(name)
                if old is not None:  # the old node dropped it: never resubscribe there
                    old.shard_channels.difference_update(channels)
            else:
                channels = [c for c in self.shard_channels if self._where.get(self._key(c)) == name]
                ps = self._subs.pop(name, None)
                if ps is not None:
                    await ps.aclose()
            for c in channels:  # subscribed nowhere now
                self._where.pop(self._key(c), None)
            for attempt in range(RESUBSCRIBE_ATTEMPTS):
                if not channels:
                    return
                try:
                    await cluster.refresh_slots()
                    moved = []
                    for c in channels:
                        master = cluster._map.master(key_slot(c))
                        if master is not None and (
                            channel is None or master.name != name or attempt >= 10
                        ):
                            moved.append(c)
                    if moved:
                        await self._subscribe(moved)
                except RedisError as exc:
                    log_limited(
                        logger,
                        logging.INFO,
                        "sharded_resubscribe_failed",
                        trio.current_time(),
                        "resubscribing shard channels failed (%s); retrying",
                        exc,
                        extra={"event": "sharded_resubscribe_failed", "node": name},
                    )
                done = [c for c in channels if self._key(c) in self._where]
                self.resubscriptions += len(done)
                channels = [c for c in channels if c not in done]
                if channels:
                    await trio.sleep(backoff(attempt))
            logger.error("shard channels %r could not be subscribed again; giving up", channels)

    async def get_message(
        self, ignore_subscribe_messages: bool = False, timeout: float | None = None
    ) -> Message | None:
        """The next message from any node, or ``None`` after ``timeout`` seconds
        (``None``: wait forever), as :meth:`PubSub.get_message
        <trio_maint.PubSub.get_message>` (``ignore_subscribe_messages`` skips
        confirmations for this call).

        :raises ConnectionClosedError: the ClusterPubSub is closed.
        :raises TypeError: ``ignore_subscribe_messages`` is not a ``bool``.
        """
        if not isinstance(ignore_subscribe_messages, bool):
            raise TypeError("get_message()'s first argument is a bool: pass timeout=")
        with trio.move_on_after(float("inf") if timeout is None else timeout):
            while True:
                try:
                    message = await self._receive.receive()
                except (trio.EndOfChannel, trio.ClosedResourceError):
                    raise ConnectionClosedError("this ClusterPubSub is closed") from None
                if not (ignore_subscribe_messages and message.type in CONFIRMATIONS):
                    return message
        return None

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Message:
        """The next message; iteration stops when the ClusterPubSub is closed."""
        try:
            message = await self.get_message()
        except ConnectionClosedError:
            raise StopAsyncIteration from None
        assert message is not None
        return message
