"""Publish/subscribe over a dedicated RESP3 connection: :class:`PubSub`, :class:`Message`.

Each command sent on the subscriber connection is registered first as a pending
acknowledgement (:class:`~trio_maint._sansio.pubsub.AckQueue`: what answers it, in send
order). Whoever reads frames resolves them: a task in :meth:`PubSub.get_message`, or a
subscribe call waiting for its own acknowledgement while nobody else reads (it then keeps
the messages it reads; :meth:`PubSub.get_message` returns them first, in order).
``subscribe``, ``psubscribe`` and ``ssubscribe`` wait for theirs and raise the server's
error reply; the errors of the others (unsubscribes, ``PING``, resubscriptions) are logged.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Self

import trio

from .._net.connection import Connection
from .._sansio.commands import KeyT
from .._sansio.errors import (
    ConnectionClosedError,
    ConnectionError,
    RedisError,
    ResponseError,
    TimeoutError,
)
from .._sansio.loglimit import log_limited
from .._sansio.options import ClientOptions
from .._sansio.pubsub import CONFIRMATIONS, Ack, AckQueue, Message, slot_groups, to_message
from .._sansio.resp import PushNotification
from .observe import CommandObserver

__all__ = ["Message", "PubSub"]

logger = logging.getLogger("trio_maint.pubsub")


class PubSub:
    """A subscriber on its own connection (not taken from the pool).

    Use as ``async with r.pubsub() as ps:``; then :meth:`subscribe` and read with
    ``async for message in ps`` or :meth:`get_message`. In RESP3 every message and
    confirmation is a push frame; push frames that are not pub/sub (e.g. maintenance
    notifications) go to the connection's push handler.

    ``subscribe``, ``psubscribe`` and ``ssubscribe`` return once the server confirmed
    every name (or raise its error reply); messages read meanwhile are kept, in order, for
    :meth:`get_message`. Several tasks may read at once: each message goes to one of them.

    :param options: the client's :class:`~trio_maint.ClientOptions` (``socket_timeout``
        bounds the wait for a subscribe's confirmations).
    :param ignore_subscribe_messages: skip subscribe/unsubscribe confirmations.
    :param connection_factory: ``async () -> Connection`` making each connection (the
        client passes its maintenance link's, so the subscriber follows MOVING); default:
        :meth:`Connection.open <trio_maint.lowlevel.Connection.open>` with ``options``.
    :param on_close: called once when the PubSub closes.
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
        self._acks = AckQueue()
        self._buffer: deque[Message] = deque()  # read, not yet returned
        self._reading = False  # a task is reading a frame
        self._changed = trio.Event()  # set (and replaced) after each frame and on close
        # An attached exporter (set by Redis.pubsub, see observe.py), else None.
        self._observer: CommandObserver | None = None

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
        self._settle(self._acks.fail(None, ConnectionClosedError("this PubSub is closed")))
        self._buffer.clear()
        self._wake()
        on_close, self._on_close = self._on_close, None
        if on_close is not None:
            on_close()

    def _is_closed(self) -> bool:
        # A call, so that type checkers do not assume ``_closed`` unchanged across awaits.
        return self._closed

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    # ------------------------------------------------------------------ connection

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
                lost, self._conn = self._conn, None
                lost.close_nowait()
                self._settle(self._acks.fail(lost, ConnectionError(f"connection {lost.id} lost")))
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
        maintenance handoff: ``conn`` is subscribed to every channel, pattern and shard
        channel (shard channels one ``SSUBSCRIBE`` per slot) before it replaces the
        previous connection, which is then closed; a reader waiting on that one moves on
        to ``conn``. The confirmations arrive again on ``conn``; an error reply to one of
        these subscriptions is logged (nobody waits for it). It does not wait for the
        confirmations: both connections would deliver the messages published meanwhile
        (twice, when they reach the same server); a message still in flight on the
        previous connection when it is closed is missed instead.

        :raises ConnectionClosedError: this PubSub is closed (``conn`` is left open).
        :raises ConnectionError, TimeoutError: subscribing ``conn`` failed; the PubSub
            stays on its previous connection.
        """
        async with self._connect_lock:
            if self._closed:
                raise ConnectionClosedError("this PubSub is closed")
            try:
                await self._subscribe_all(conn)
                if self._is_closed():  # closed while it subscribed (the client exiting)
                    raise ConnectionClosedError("this PubSub is closed")
            except BaseException:
                self._settle(self._acks.fail(conn, ConnectionError(f"connection {conn.id} failed")))
                raise
            old, self._conn = self._conn, conn
            self._resubscribe = False
        if old is not None:
            replaced = ConnectionClosedError(f"connection {old.id} was handed off")
            self._settle(self._acks.fail(old, replaced))
            old.close_nowait()  # a reader waiting on it moves to ``conn``
        self._wake()

    # -------------------------------------------------------------------- sending

    async def _send_on(
        self,
        conn: Connection,
        command: str,
        names: Sequence[Any],
        *,
        waited: bool = False,
        record: set[Any] | None = None,
    ) -> Ack:
        """Send ``command names...`` on ``conn``. Its acknowledgement is registered, and
        ``names`` added to ``record``, before the write: a reader may read the answer
        (an error reply forgets what it added) before the write returns."""
        ack = self._acks.expect(conn, command, names)
        ack.waited = waited
        if record is not None:
            ack.added = frozenset(n for n in names if n not in record)
            record.update(names)
        try:
            await conn.send_only((command, *names))
        except BaseException:
            # Not written whole, so not run: the connection is broken (or an argument
            # could not be encoded and nothing was sent).
            self._acks.withdraw(ack)
            if record is not None:
                record.difference_update(ack.added)
            raise
        return ack

    async def _send(
        self, command: str, names: Sequence[Any], then: Callable[[], None] | None = None
    ) -> None:
        """Send a command (an unsubscribe or ``PING``) without waiting for its answer;
        ``then()`` records its effect on the subscription sets while no handoff can swap
        the connection. A no-argument unsubscribe names what is subscribed."""
        if self._closed:
            raise ConnectionClosedError("this PubSub is closed")
        async with self._connect_lock:
            conn = await self._connected()
            for group in self._groups(command, names):
                await self._send_on(conn, command, group)
            if then is not None:
                then()

    def _groups(self, command: str, names: Sequence[Any]) -> list[Sequence[Any]]:
        if command in ("UNSUBSCRIBE", "PUNSUBSCRIBE", "SUNSUBSCRIBE") and not names:
            # Named explicitly so that exactly one confirmation per name answers it.
            names = list(self._set_of(command.replace("UNSUBSCRIBE", "SUBSCRIBE")))
        if command in ("SSUBSCRIBE", "SUNSUBSCRIBE") and names:
            return list(slot_groups(names))
        return [names]

    def _set_of(self, command: str) -> set[Any]:
        """The subscription set ``(P|S)SUBSCRIBE`` changes."""
        if command == "SUBSCRIBE":
            return self.channels
        return self.patterns if command == "PSUBSCRIBE" else self.shard_channels

    async def _subscribe_groups(
        self, command: str, groups: Sequence[Sequence[Any]]
    ) -> list[ResponseError | None]:
        """Send ``command`` once per group and wait until the server answered each: the
        error reply of each group, or ``None`` where every name was confirmed. A refused
        group's names are forgotten again. Used by :class:`~trio_maint.ClusterPubSub`.

        :raises ConnectionError: the connection was lost: the names sent stay recorded
            (subscribed again on the next connection), those not sent are not.
        :raises TimeoutError: no answer within ``socket_timeout`` (the connection stays
            usable; a late answer is still matched, and an error then logged).
        """
        if self._closed:
            raise ConnectionClosedError("this PubSub is closed")
        subscribed = self._set_of(command)
        async with self._connect_lock:
            conn = await self._connected()
            acks: list[Ack] = []
            try:
                for group in groups:
                    ack = await self._send_on(conn, command, group, waited=True, record=subscribed)
                    acks.append(ack)
                await self._wait_for(conn, acks)
            finally:
                for ack in acks:
                    ack.waited = False  # cancelled or timed out: nobody to raise to now
        results: list[ResponseError | None] = []
        for ack in acks:
            error = ack.error
            if error is not None and not isinstance(error, ResponseError):
                raise error  # the connection failed or the PubSub closed meanwhile
            results.append(error)
        return results

    def _ack_timeout(self, conn: Connection) -> float | None:
        """Seconds to wait for an answer: ``socket_timeout``, relaxed during a window."""
        timeout = self._options.socket_timeout
        if conn.timeouts is not None:
            timeout = conn.timeouts.effective(timeout, trio.current_time())
        return timeout

    async def _wait_for(self, conn: Connection, acks: list[Ack]) -> None:
        """Wait until ``acks`` are resolved, reading frames itself while no other task
        does, up to the socket timeout (relaxed during maintenance)."""
        timeout = self._ack_timeout(conn)
        deadline = float("inf") if timeout is None else trio.current_time() + timeout
        while not all(ack.done for ack in acks):
            if self._reading:  # another task reads: it resolves them
                changed = self._changed
                with trio.move_on_at(deadline):
                    await changed.wait()
            else:
                remaining = max(0.0, deadline - trio.current_time())
                try:
                    await self._read_one(conn, remaining)
                except TimeoutError:
                    pass
                except RedisError:
                    continue  # its acknowledgements failed with the connection
            if trio.current_time() >= deadline and not all(ack.done for ack in acks):
                names = " ".join(a.command for a in acks if not a.done)
                raise TimeoutError(f"no confirmation of {names} within {timeout} s")

    async def _subscribe(self, command: str, names: tuple[KeyT, ...]) -> None:
        if not names:
            raise ValueError(f"{command.lower()}() needs at least one name")
        groups = slot_groups(names) if command == "SSUBSCRIBE" else [names]
        for error in await self._subscribe_groups(command, groups):
            if error is not None:
                raise error

    async def subscribe(self, *channels: KeyT) -> None:
        """``SUBSCRIBE channel [channel ...]``; returns once the server confirmed each
        channel (the confirmations also arrive as messages).

        :raises ResponseError: the server refused it (e.g. ``NoPermissionError``).
        :raises ConnectionError: the subscriber connection failed.
        :raises TimeoutError: no confirmation within ``socket_timeout`` seconds.
        """
        await self._subscribe("SUBSCRIBE", channels)

    async def unsubscribe(self, *channels: KeyT) -> None:
        """``UNSUBSCRIBE [channel ...]`` (all channels when none are given); does not
        wait for the confirmations (an error reply is logged)."""
        await self._send("UNSUBSCRIBE", channels, then=lambda: _forget(self.channels, channels))

    async def psubscribe(self, *patterns: KeyT) -> None:
        """``PSUBSCRIBE pattern [pattern ...]``; waits and raises as :meth:`subscribe`."""
        await self._subscribe("PSUBSCRIBE", patterns)

    async def punsubscribe(self, *patterns: KeyT) -> None:
        """``PUNSUBSCRIBE [pattern ...]`` (all patterns when none are given)."""
        await self._send("PUNSUBSCRIBE", patterns, then=lambda: _forget(self.patterns, patterns))

    async def ssubscribe(self, *channels: KeyT) -> None:
        """``SSUBSCRIBE shardchannel [shardchannel ...]`` (sharded pub/sub, Redis >= 7):
        one command per cluster slot, as a cluster node refuses channels of several slots;
        waits and raises as :meth:`subscribe` (e.g. ``MovedError`` when this node does
        not serve a channel's slot; use :meth:`RedisCluster.pubsub
        <trio_maint.RedisCluster.pubsub>` on a cluster)."""
        await self._subscribe("SSUBSCRIBE", channels)

    async def sunsubscribe(self, *channels: KeyT) -> None:
        """``SUNSUBSCRIBE [shardchannel ...]`` (all when none are given), one command per
        slot."""
        await self._send(
            "SUNSUBSCRIBE", channels, then=lambda: _forget(self.shard_channels, channels)
        )

    async def ping(self, message: KeyT | None = None) -> None:
        """``PING`` on the subscriber connection; the answer arrives as a ``"pong"``
        message."""
        await self._send("PING", () if message is None else (message,))

    async def resubscribe(self) -> None:
        """Subscribe again to everything this PubSub had (after a reconnect or a
        maintenance handoff); each channel, pattern and shard channel exactly once, shard
        channels one command per slot. Does not wait for the confirmations."""
        if self._closed:
            raise ConnectionClosedError("this PubSub is closed")
        async with self._connect_lock:
            conn = await self._connected()
            await self._subscribe_all(conn)

    async def _subscribe_all(self, conn: Connection) -> None:
        """Send the subscriptions on ``conn``; their errors are logged when read."""
        if self.channels:
            await self._send_on(conn, "SUBSCRIBE", list(self.channels))
        if self.patterns:
            await self._send_on(conn, "PSUBSCRIBE", list(self.patterns))
        for group in slot_groups(self.shard_channels):
            await self._send_on(conn, "SSUBSCRIBE", group)

    # -------------------------------------------------------------------- reading

    async def _read_one(self, conn: Connection, timeout: float | None) -> None:
        """Read one frame from ``conn`` and take it in (the caller checked that no other
        task reads).

        :raises TimeoutError: nothing arrived within ``timeout`` seconds.
        :raises ConnectionError: the connection failed (its acknowledgements fail too).
        """
        self._reading = True
        try:
            frame = await conn.read_frame(timeout=timeout)
            self._take(conn, frame)
        except TimeoutError:
            raise
        except RedisError as exc:
            failed = ConnectionError(f"connection {conn.id} failed: {exc}")
            self._settle(self._acks.fail(conn, failed))
            raise
        finally:
            self._reading = False
            self._wake()

    def _take(self, conn: Connection, frame: Any) -> None:
        """Resolve what ``frame`` answers and buffer the message it carries (no await:
        a frame read is never lost to a cancellation)."""
        if isinstance(frame, ResponseError):
            ack = self._acks.error_reply(conn, frame)
            if ack is None:
                # Per frame, and the server decides how many: rate-limited.
                log_limited(
                    logger,
                    logging.WARNING,
                    "pubsub_unexpected_error_reply",
                    trio.current_time(),
                    "pub/sub connection got an unexpected error reply: %s",
                    frame,
                    extra={"event": "pubsub_unexpected_error_reply", "conn_id": conn.id},
                )
            else:
                self._settle([ack])
            return
        if isinstance(frame, RedisError):  # an undecodable frame
            log_limited(
                logger,
                logging.WARNING,
                "pubsub_undecodable_frame",
                trio.current_time(),
                "pub/sub connection got a frame it cannot decode: %s",
                frame,
                extra={"event": "pubsub_undecodable_frame", "conn_id": conn.id},
            )
            return
        if not isinstance(frame, PushNotification) and self._acks.plain_reply(conn):
            self._buffer.append(Message("pong", None, frame))  # PING's answer
            return
        message = to_message(frame)
        if message is None:
            if isinstance(frame, PushNotification):
                conn.dispatch_push(frame)
            else:
                log_limited(
                    logger,
                    logging.DEBUG,
                    "pubsub_unexpected_reply",
                    trio.current_time(),
                    "pub/sub connection: unexpected reply %.200r",
                    frame,
                    extra={"event": "pubsub_unexpected_reply", "conn_id": conn.id},
                )
            return
        if message.type in CONFIRMATIONS:
            self._acks.confirmation(conn, message.type, message.channel)
        elif self._observer is not None:  # the one check (observe.py)
            self._observer.pubsub_message(self._options, message.type)
        self._buffer.append(message)

    def _settle(self, acks: list[Ack]) -> None:
        """After ``acks`` were resolved: forget the names of refused subscribes, and log
        the errors nobody waits for."""
        for ack in acks:
            error = ack.error
            if error is None:
                continue
            if isinstance(error, ResponseError) and ack.added:
                self._set_of(ack.command).difference_update(self._acks.refused_names(ack))
            if not ack.waited:
                level = logging.WARNING if isinstance(error, ResponseError) else logging.DEBUG
                log_limited(
                    logger,
                    level,
                    "pubsub_command_failed",
                    trio.current_time(),
                    "pub/sub %s failed: %s",
                    ack.command,
                    error,
                    extra={"event": "pubsub_command_failed", "command": ack.command},
                )

    def _next_buffered(self, ignore: bool | None = None) -> Message | None:
        skip = self.ignore_subscribe_messages if ignore is None else ignore
        while self._buffer:
            message = self._buffer.popleft()
            if not (skip and message.type in CONFIRMATIONS):
                return message
        return None

    async def get_message(
        self, ignore_subscribe_messages: bool | None = None, timeout: float | None = None
    ) -> Message | None:
        """Wait for the next message (messages a subscribe call read come first).

        :param ignore_subscribe_messages: skip subscribe/unsubscribe confirmations for this
            call (``bool``; default: as the PubSub was made), as redis-py's keyword.
        :param timeout: seconds (``float``) to wait; ``None`` (the default) waits forever,
            ``0`` polls. redis-py's default is ``0.0`` (poll): a redis-py loop that relies
            on it should pass ``timeout=0``; in a Trio task, waiting is the usual choice.
        :raises TypeError: ``ignore_subscribe_messages`` is not a ``bool`` (a timeout passed
            by position: pass ``timeout=``).
        :returns: a :class:`Message`, or ``None`` when ``timeout`` passed first.
        :raises ConnectionClosedError: the PubSub was closed.
        :raises ConnectionError: the subscriber connection was lost (the next call
            reconnects and subscribes again).
        """
        if ignore_subscribe_messages is not None and not isinstance(
            ignore_subscribe_messages, bool
        ):
            raise TypeError(
                "get_message()'s first argument is ignore_subscribe_messages (a bool), as "
                f"redis-py's; got {type(ignore_subscribe_messages).__name__}: pass timeout="
            )
        deadline = float("inf") if timeout is None else trio.current_time() + timeout
        while True:
            if self._closed:
                await trio.lowlevel.checkpoint()
                raise ConnectionClosedError("this PubSub is closed")
            if self._buffer:
                await trio.lowlevel.checkpoint()
                message = self._next_buffered(ignore_subscribe_messages)
                if message is not None:
                    return message
                continue
            if self._reading:  # another task reads (a subscribe waiting, another reader)
                changed = self._changed
                with trio.move_on_at(deadline):
                    await changed.wait()
                if trio.current_time() >= deadline and not self._buffer:
                    return None
                continue
            conn = self._conn
            if conn is None or not conn.usable or self._resubscribe:
                await self._connection()
                continue  # meanwhile messages may have been buffered
            remaining = max(0.0, deadline - trio.current_time()) if timeout is not None else None
            try:
                await self._read_one(conn, remaining)  # a checkpoint
            except TimeoutError:
                if not self._buffer:
                    return None
            except RedisError:
                if self._closed:
                    raise ConnectionClosedError("this PubSub is closed") from None
                if conn is not self._conn:
                    continue  # a maintenance handoff replaced it: read the new one
                raise
            else:
                message = self._next_buffered(ignore_subscribe_messages)
                if message is not None:
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
