"""Publish/subscribe over a dedicated RESP3 connection: :class:`PubSub`, :class:`Message`."""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self

import attrs
import trio

from .._net.connection import Connection
from .._sansio.commands import KeyT
from .._sansio.errors import ConnectionClosedError, RedisError, TimeoutError
from .._sansio.options import ClientOptions
from .._sansio.resp import PushNotification

__all__ = ["Message", "PubSub"]

logger = logging.getLogger("trio_maint.pubsub")

_MESSAGE_KINDS = frozenset(
    {
        "message",
        "pmessage",
        "smessage",
        "subscribe",
        "psubscribe",
        "ssubscribe",
        "unsubscribe",
        "punsubscribe",
        "sunsubscribe",
        "pong",
    }
)
_CONFIRMATIONS = frozenset(
    {"subscribe", "psubscribe", "ssubscribe", "unsubscribe", "punsubscribe", "sunsubscribe"}
)


@attrs.frozen
class Message:
    """One pub/sub event.

    * ``type`` (``str``): ``"message"``, ``"pmessage"``, ``"smessage"``, or a confirmation
      (``"subscribe"``, ``"unsubscribe"``, ``"psubscribe"``, ...), or ``"pong"``.
    * ``channel``: the channel (``bytes``, or ``str`` with ``decode_responses``).
    * ``data``: the payload; for confirmations the number of subscriptions (``int``).
    * ``pattern``: the matching pattern for ``"pmessage"``, else ``None``.
    """

    type: str
    channel: Any
    data: Any
    pattern: Any = None


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class PubSub:
    """A subscriber on its own connection (not taken from the pool).

    Use as ``async with r.pubsub() as ps:``; then :meth:`subscribe` and read with
    ``async for message in ps`` or :meth:`get_message`. In RESP3 every message and
    confirmation is a push frame; push frames that are not pub/sub (e.g. maintenance
    notifications) go to the connection's push handler.

    :param ignore_subscribe_messages: skip subscribe/unsubscribe confirmations.
    """

    def __init__(
        self,
        options: ClientOptions,
        *,
        ignore_subscribe_messages: bool = False,
        connection_factory: Callable[[], Any] | None = None,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self._options = options
        self._factory = connection_factory
        self._on_close = on_close
        self.ignore_subscribe_messages = ignore_subscribe_messages
        self.channels: set[Any] = set()
        self.patterns: set[Any] = set()
        self.shard_channels: set[Any] = set()
        self._conn: Connection | None = None
        self._closed = False
        self._connect_lock = trio.Lock()
        self._resubscribe = False  # a reconnect happened: subscribe again

    @property
    def connection(self) -> Connection | None:
        """The subscriber connection, once connected (``None`` before)."""
        return self._conn

    @property
    def subscribed(self) -> bool:
        """True while any channel, pattern or shard channel is subscribed."""
        return bool(self.channels or self.patterns or self.shard_channels)

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

    async def aclose(self) -> None:
        """Close the subscriber connection; iteration then ends."""
        self._close_nowait()
        await trio.lowlevel.checkpoint()

    def _close_nowait(self) -> None:
        """Close at once, without a checkpoint (the client closes its PubSubs on exit): a
        reader then gets :class:`~trio_maint.ConnectionClosedError` (iteration ends)."""
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close_nowait()
        on_close, self._on_close = self._on_close, None
        if on_close is not None:
            on_close()

    def _is_closed(self) -> bool:
        # A call, so that type checkers do not assume ``_closed`` unchanged across awaits.
        return self._closed

    async def _connection(self) -> Connection:
        if self._closed:
            raise ConnectionClosedError("this PubSub is closed")
        async with self._connect_lock:
            return await self._connected()

    async def _connected(self) -> Connection:
        """The connection, (re)connected and resubscribed if needed; the caller holds
        ``_connect_lock``."""
        if self._conn is None or not self._conn.usable:
            if self._conn is not None:
                # Lost (or cancelled mid-record on TLS): reconnect and resubscribe.
                self._conn.close_nowait()
                self._conn = None
                self._resubscribe = True
            if self._factory is not None:
                new = await self._factory()
            else:
                new = await Connection.open(self._options)
            if self._is_closed():  # closed while connecting
                new.close_nowait()
                raise ConnectionClosedError("this PubSub is closed")
            self._conn = new
        conn = self._conn
        if self._resubscribe:
            # Kept until it is done: a reconnect or resubscription that is cancelled or
            # fails is completed by the next call, so the subscriptions are never lost.
            self._resubscribe = False
            try:
                await self._subscribe_all(conn)
            except BaseException:
                self._resubscribe = True
                raise
        return conn

    async def adopt_connection(self, conn: Connection) -> None:
        """Make ``conn`` (a new connection, handshaken) the subscriber connection after a
        maintenance handoff: it is subscribed to every channel, pattern and shard channel
        first, then the previous connection is closed (make-before-break: no message is
        lost in between, some may arrive twice). Its subscribe confirmations arrive again.

        :raises ConnectionClosedError: this PubSub is closed (``conn`` is left open).
        :raises ConnectionError, TimeoutError: subscribing ``conn`` failed.
        """
        async with self._connect_lock:
            if self._closed:
                raise ConnectionClosedError("this PubSub is closed")
            await self._subscribe_all(conn)
            old, self._conn = self._conn, conn
            self._resubscribe = False
        if old is not None:
            old.close_nowait()  # a reader waiting on it moves to ``conn``

    async def _send(self, *args: Any, then: Callable[[], None] | None = None) -> None:
        """Send a command on the subscriber connection; ``then()`` records its effect on
        the subscription sets while no handoff can swap the connection."""
        if self._closed:
            raise ConnectionClosedError("this PubSub is closed")
        async with self._connect_lock:
            conn = await self._connected()
            await conn.send_only(tuple(args))
            if then is not None:
                then()

    async def subscribe(self, *channels: KeyT) -> None:
        """``SUBSCRIBE channel [channel ...]``; confirmations arrive as messages.

        :raises ConnectionError, TimeoutError: the subscriber connection failed.
        """
        if not channels:
            raise ValueError("subscribe() needs at least one channel")
        await self._send("SUBSCRIBE", *channels, then=lambda: self.channels.update(channels))

    async def unsubscribe(self, *channels: KeyT) -> None:
        """``UNSUBSCRIBE [channel ...]`` (all channels when none are given)."""
        await self._send("UNSUBSCRIBE", *channels, then=lambda: _forget(self.channels, channels))

    async def psubscribe(self, *patterns: KeyT) -> None:
        """``PSUBSCRIBE pattern [pattern ...]``."""
        if not patterns:
            raise ValueError("psubscribe() needs at least one pattern")
        await self._send("PSUBSCRIBE", *patterns, then=lambda: self.patterns.update(patterns))

    async def punsubscribe(self, *patterns: KeyT) -> None:
        """``PUNSUBSCRIBE [pattern ...]`` (all patterns when none are given)."""
        await self._send("PUNSUBSCRIBE", *patterns, then=lambda: _forget(self.patterns, patterns))

    async def ssubscribe(self, *channels: KeyT) -> None:
        """``SSUBSCRIBE shardchannel [shardchannel ...]`` (sharded pub/sub, Redis >= 7)."""
        if not channels:
            raise ValueError("ssubscribe() needs at least one channel")
        await self._send("SSUBSCRIBE", *channels, then=lambda: self.shard_channels.update(channels))

    async def sunsubscribe(self, *channels: KeyT) -> None:
        """``SUNSUBSCRIBE [shardchannel ...]`` (all when none are given)."""
        await self._send(
            "SUNSUBSCRIBE", *channels, then=lambda: _forget(self.shard_channels, channels)
        )

    async def ping(self, message: KeyT | None = None) -> None:
        """``PING`` on the subscriber connection; the answer arrives as a ``"pong"``
        message."""
        await self._send("PING", *(() if message is None else (message,)))

    async def resubscribe(self) -> None:
        """Subscribe again to everything this PubSub had (after a reconnect or a
        maintenance handoff); each channel, pattern and shard channel exactly once."""
        if self._closed:
            raise ConnectionClosedError("this PubSub is closed")
        async with self._connect_lock:
            conn = await self._connected()
            await self._subscribe_all(conn)

    async def _subscribe_all(self, conn: Connection) -> None:
        if self.channels:
            await conn.send_only(("SUBSCRIBE", *self.channels))
        if self.patterns:
            await conn.send_only(("PSUBSCRIBE", *self.patterns))
        if self.shard_channels:
            await conn.send_only(("SSUBSCRIBE", *self.shard_channels))

    def _to_message(self, frame: Any) -> Message | None:
        if isinstance(frame, PushNotification) and frame:
            kind = _text(frame[0])
            if kind not in _MESSAGE_KINDS:
                return None
            if kind == "pmessage" and len(frame) >= 4:
                return Message(kind, frame[2], frame[3], frame[1])
            if len(frame) >= 3:
                return Message(kind, frame[1], frame[2])
            return None
        if isinstance(frame, list) and frame and _text(frame[0]).lower() == "pong":
            return Message("pong", None, frame[1] if len(frame) > 1 else None)
        if frame in (b"PONG", "PONG"):
            return Message("pong", None, frame)
        return None

    async def get_message(self, timeout: float | None = None) -> Message | None:
        """Wait for the next message.

        :param timeout: seconds (``float``) to wait; ``None`` waits forever.
        :returns: a :class:`Message`, or ``None`` when ``timeout`` passed first.
        :raises ConnectionClosedError: the PubSub was closed.
        :raises ConnectionError: the subscriber connection was lost.
        """
        deadline = None if timeout is None else trio.current_time() + timeout
        while True:
            conn = await self._connection()
            remaining = None if deadline is None else max(0.0, deadline - trio.current_time())
            try:
                frame = await conn.read_frame(timeout=remaining)
            except TimeoutError:
                return None
            except RedisError:
                if self._closed:
                    raise ConnectionClosedError("this PubSub is closed") from None
                if conn is not self._conn:
                    continue  # a maintenance handoff replaced it: read the new one
                raise
            if isinstance(frame, RedisError):
                logger.warning("pub/sub connection got an error reply: %s", frame)
                continue
            message = self._to_message(frame)
            if message is None:
                if isinstance(frame, PushNotification):
                    conn.dispatch_push(frame)
                continue
            if self.ignore_subscribe_messages and message.type in _CONFIRMATIONS:
                continue
            return message

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Message:
        """The next message; iteration stops when the PubSub is closed."""
        try:
            message = await self.get_message()
        except ConnectionClosedError:
            raise StopAsyncIteration from None
        assert message is not None
        return message


def _forget(subscribed: set[Any], names: tuple[Any, ...]) -> None:
    if names:
        subscribed.difference_update(names)
    else:
        subscribed.clear()
