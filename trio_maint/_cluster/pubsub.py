"""Sharded pub/sub over a cluster: :class:`ClusterPubSub`."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import trio

from .._client.pubsub import Message, PubSub
from .._net.groups import unwrap_group
from .._sansio.commands import KeyT
from .._sansio.endpoint import split_host_port
from .._sansio.errors import ConnectionClosedError, RedisError
from .._sansio.slots import NodeInfo, key_slot
from .redirects import backoff

if TYPE_CHECKING:
    from .client import RedisCluster

__all__ = ["ClusterPubSub"]

logger = logging.getLogger("trio_maint.cluster")


class ClusterPubSub:
    """Sharded pub/sub over a cluster: one subscriber connection per node that owns a
    subscribed shard channel. Use as ``async with rc.pubsub() as ps:``, then
    :meth:`ssubscribe` and ``async for message in ps`` or :meth:`get_message`.

    When a channel's slot moves (the node sends ``sunsubscribe`` for it, or its
    connection is lost) the channel is subscribed again on the slot's new owner, after a
    slot-map refresh; that ``sunsubscribe`` is not delivered. Messages published while
    it moves may be missed (pub/sub is at-most-once).

    :param ignore_subscribe_messages: skip ``ssubscribe``/``sunsubscribe`` confirmations.
    """

    def __init__(self, cluster: RedisCluster, *, ignore_subscribe_messages: bool = False) -> None:
        self._cluster = cluster
        self.ignore_subscribe_messages = ignore_subscribe_messages
        #: The shard channels subscribed (``set``).
        self.shard_channels: set[Any] = set()
        self._where: dict[Any, str] = {}  # channel -> node name
        self._subs: dict[str, PubSub] = {}
        self._send, self._receive = trio.open_memory_channel[Message](1000)
        self._nursery: trio.Nursery | None = None
        self._nursery_cm: Any = None
        self._lock = trio.Lock()
        #: How many times channels were subscribed again elsewhere (``int``).
        self.resubscriptions = 0

    async def __aenter__(self) -> Self:
        self._nursery_cm = trio.open_nursery()
        self._nursery = await self._nursery_cm.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        await self.aclose()
        return False

    async def aclose(self) -> None:
        """Close every subscriber connection; iteration then ends."""
        nursery, self._nursery = self._nursery, None
        subs, self._subs = self._subs, {}
        for ps in subs.values():
            await ps.aclose()
        self._send.close()
        if nursery is not None:
            nursery.cancel_scope.cancel()
            try:
                await self._nursery_cm.__aexit__(None, None, None)
            except BaseExceptionGroup as group:
                raise unwrap_group(group) from None
        self._receive.close()

    def _key(self, channel: Any) -> Any:
        return channel.encode() if isinstance(channel, str) else channel

    async def _sub_for(self, name: str) -> PubSub:
        ps = self._subs.get(name)
        if ps is None:
            if self._nursery is None:
                raise ConnectionClosedError("this ClusterPubSub is closed (use async with)")
            info = self._cluster._map.nodes.get(name)
            if info is None:
                host, port = split_host_port(name, require_port=True)
                info = NodeInfo(name, host, port)
            node = await self._cluster._node(info)
            assert node.client is not None
            ps = node.client.pubsub()
            self._subs[name] = ps
            self._nursery.start_soon(self._reader, name, ps)
        return ps

    async def ssubscribe(self, *channels: KeyT) -> None:
        """``SSUBSCRIBE`` each channel on the master of its slot.

        :raises ConnectionError: a node cannot be reached.
        """
        if not channels:
            raise ValueError("ssubscribe() needs at least one channel")
        async with self._lock:
            await self._subscribe(channels)

    async def _subscribe(self, channels: Sequence[Any]) -> None:
        by_node: dict[str, list[Any]] = {}
        for channel in channels:
            node, _r = await self._cluster._route(key_slot(channel), False)
            by_node.setdefault(node.name, []).append(channel)
        for name, group in by_node.items():
            ps = await self._sub_for(name)
            await ps.ssubscribe(*group)
            for channel in group:
                self.shard_channels.add(channel)
                self._where[self._key(channel)] = name

    async def sunsubscribe(self, *channels: KeyT) -> None:
        """``SUNSUBSCRIBE`` the channels (all when none are given)."""
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
                logger.info("sharded pub/sub connection to %s lost (%s); moving", name, exc)
                await self._move_away(name, None)
                return
            if message is None:
                continue
            if message.type == "sunsubscribe":
                key = self._key(message.channel)
                if key in self._where and self._where[key] == name:
                    # The server dropped it (its slot moved): follow the slot.
                    if self._nursery is not None:
                        self._nursery.start_soon(self._move_away, name, message.channel)
                    continue
            if self.ignore_subscribe_messages and message.type in ("ssubscribe", "sunsubscribe"):
                continue
            try:
                await self._send.send(message)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                return

    async def _move_away(self, name: str, channel: Any | None) -> None:
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
            if not channels:
                return
            for attempt in range(50):
                try:
                    await cluster.refresh_slots()
                    moved = []
                    for c in channels:
                        master = cluster._map.master(key_slot(c))
                        if master is not None and (master.name != name or attempt >= 10):
                            moved.append(c)
                    if moved:
                        for c in moved:
                            self._where.pop(self._key(c), None)
                        await self._subscribe(moved)
                        self.resubscriptions += len(moved)
                        channels = [c for c in channels if c not in moved]
                    if not channels:
                        return
                except RedisError as exc:
                    logger.info("resubscribing shard channels failed (%s); retrying", exc)
                await trio.sleep(backoff(attempt))

    async def get_message(self, timeout: float | None = None) -> Message | None:
        """The next message from any node, or ``None`` after ``timeout`` seconds
        (``None``: wait forever).

        :raises ConnectionClosedError: the ClusterPubSub is closed.
        """
        with trio.move_on_after(float("inf") if timeout is None else timeout):
            try:
                return await self._receive.receive()
            except (trio.EndOfChannel, trio.ClosedResourceError):
                raise ConnectionClosedError("this ClusterPubSub is closed") from None
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
