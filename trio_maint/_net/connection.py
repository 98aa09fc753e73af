"""One connection to a Redis server: a Trio stream, the RESP3 handshake, commands with
deadlines, and push-frame dispatch.

A connection serves one command (or pipeline) at a time. Anything that interrupts a
command after its first byte was written and before its whole reply was read (a timeout,
a cancellation, a lost socket) marks the connection *broken*: the pool then discards it, so
no later command can ever receive a stale reply.

The byte level (sending, receiving under deadlines, taking replies from the parser, push
dispatch) is :class:`~trio_maint._net.wire.StreamIO`, which :class:`Connection` extends;
dialing is :func:`~trio_maint._net.stream.open_stream`.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, Literal

import trio

from .._sansio.errors import (
    AuthenticationError,
    ConnectionBusyError,
    ConnectionClosedError,
    ConnectionError,
    DataError,
    ProtocolError,
    RedisError,
    ResponseError,
    TimeoutError,
    not_written,
)
from .._sansio.options import ClientOptions
from .._sansio.resp import (
    NEED_DATA,
    CommandArg,
    PushNotification,
    RespParser,
    RespValue,
    encode_command,
    encode_commands,
)
from .._sansio.spin import ReadSpin, read_now
from .._sansio.unset import UNSET, Unset
from .stream import close_stream, open_stream, socket_of
from .wire import PUSH_BURST, PushHandler, StreamIO, TimeoutPolicy

__all__ = ["Connection", "HandshakeHook", "PushHandler", "TimeoutPolicy", "open_stream"]

logger = logging.getLogger("trio_maint.connection")

_INF: Final = math.inf
_ids = itertools.count(1)

#: ``hook(connection)``: extra handshake steps run after ``HELLO 3``/``SELECT`` on every new
#: stream (the maintenance opt-in). It may use :meth:`Connection.handshake_command`.
HandshakeHook = Callable[["Connection"], Awaitable[None]]


class Connection(StreamIO):
    """A connection to one Redis endpoint speaking RESP3.

    Created by the pool (or by :meth:`open`); ``id`` (``int``) stays the same for the
    connection's whole life, also when a maintenance handoff swaps its stream to a new
    endpoint (as Redis's MOVING notification, see docs/maintenance.md).

    :ivar id: unique, increasing ``int``.
    :ivar host: the host the current stream is connected to (``str``).
    :ivar port: its port (``int``); ``unix_path``: the socket path for Unix sockets.
    :ivar broken: ``True`` once the stream can no longer be trusted (discard it).
    :ivar closed: ``True`` once closed.
    :ivar server_info: the ``HELLO 3`` reply (``dict``).
    :ivar push_handler: a :data:`PushHandler` or ``None``.
    :ivar timeouts: a :class:`TimeoutPolicy` (relaxed timeouts) or ``None``.
    :ivar maint_enabled: ``True`` when the server accepted ``CLIENT MAINT_NOTIFICATIONS``.
    :ivar last_used: Trio time (``float`` seconds) of the last release to the pool.
    :ivar reply_timer: the pool's :class:`ReplyTimer` bounding reply waits on plain
        sockets, or ``None`` (then each wait has a cancel scope of its own).
    """

    __slots__ = (
        "__weakref__",
        "_receiving",
        "_sending",
        "broken",
        "closed",
        "handshake_hook",
        "last_used",
        "maint_enabled",
        "memory_tls",
        "server_info",
    )

    def __init__(
        self,
        options: ClientOptions,
        *,
        host: str | None = None,
        port: int | None = None,
        unix_path: str | None = None,
        push_handler: PushHandler | None = None,
        handshake_hook: HandshakeHook | None = None,
        memory_tls: bool = False,
    ) -> None:
        self.id = next(_ids)
        self.memory_tls = memory_tls
        self.options = options
        self.unix_path = unix_path if unix_path is not None else options.unix_path
        self.host = options.host if host is None else host
        self.port = options.port if port is None else port
        self._stream = None
        self._set_fileno(-1)
        self._parser = RespParser(options.encoding, limits=options.frame_limits)
        self._sending = False
        self._receiving = False
        self.broken = False
        self.closed = False
        self.push_handler = push_handler
        self.handshake_hook = handshake_hook
        self.timeouts = None
        self.server_info: dict[Any, Any] = {}
        self.maint_enabled = False
        self.last_used = 0.0
        self.reply_timer = None
        self._timed_out = False
        self._spin = ReadSpin()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "broken" if self.broken else "open"
        return f"<Connection id={self.id} {self.endpoint_text} {state}>"

    @property
    def in_use(self) -> bool:
        """True while a command, pipeline or push read is in progress."""
        return self._sending or self._receiving

    @property
    def usable(self) -> bool:
        """True when the connection is open, connected and not broken."""
        return self._stream is not None and not self.broken and not self.closed

    # ----------------------------------------------------------------- connecting

    async def connect(self, stream: trio.abc.Stream | None = None) -> None:
        """Dial and handshake, all within ``options.connect_timeout``.

        :param stream: an already dialed stream to handshake on (a maintenance handoff
            dials itself, to tell dial failures from handshake failures); it is owned by
            the connection from the call on, and closed on failure.
        :raises ConnectionError: the dial or handshake failed (RESP3 refused, ...).
        :raises AuthenticationError: the credentials were refused.
        :raises TimeoutError: ``connect_timeout`` passed.
        """
        if self._stream is not None or self.closed:
            if stream is not None:
                close_stream(stream)
            raise RuntimeError("connect() may be called once, on a new connection")
        timeout = self.options.connect_timeout
        deadline = _INF if timeout is None else trio.current_time() + timeout
        try:
            with trio.move_on_at(deadline) as scope:
                if stream is None:
                    stream = await open_stream(
                        self.options,
                        self.host,
                        self.port,
                        unix_path=self.unix_path,
                        memory_tls=self.memory_tls,
                    )
                self._attach(stream)
                await self._handshake()
            if scope.cancelled_caught:
                raise TimeoutError(
                    f"connecting to {self.endpoint_text} took longer than {timeout} s"
                )
        except BaseException:
            self.close_nowait()
            raise

    def _attach(self, stream: trio.abc.Stream) -> None:
        self._stream = stream
        self._set_fileno(socket_of(stream).fileno())

    async def handshake_command(self, *args: CommandArg) -> RespValue:
        """Run one command during the handshake and return its reply (error replies are
        returned as :class:`~trio_maint.ResponseError` values, not raised). For handshake hooks."""
        return await self.execute(args)

    async def _handshake(self) -> None:
        opts = self.options
        hello: list[CommandArg] = ["HELLO", 3]
        if opts.password is not None:
            hello += ["AUTH", opts.username or "default", opts.password]
        if opts.client_name:
            hello += ["SETNAME", opts.client_name]
        commands: list[tuple[CommandArg, ...]] = [tuple(hello)]
        if opts.db:
            commands.append(("SELECT", opts.db))
        replies = await self.execute_many(commands)
        info = replies[0]
        if isinstance(info, ResponseError):
            if isinstance(info, AuthenticationError) or info.code in ("WRONGPASS", "NOAUTH"):
                raise AuthenticationError(str(info))
            raise ConnectionError(
                f"server at {self.endpoint_text} refused HELLO 3 ({info}): trio_maint needs "
                "RESP3, which requires Redis >= 6"
            )
        if not isinstance(info, dict):
            raise ConnectionError(f"unexpected HELLO 3 reply: {info!r}")
        self.server_info = info
        if len(replies) > 1 and isinstance(replies[1], ResponseError):
            raise ConnectionError(f"SELECT {opts.db} failed: {replies[1]}")
        if self.handshake_hook is not None:
            await self.handshake_hook(self)
        # Bytes past the handshake's replies: push frames are handed on, anything else
        # (a reply nobody asked for) would be taken for the first command's reply.
        if (self._parser.has_data() or self._readable()) and not await self.check_idle(
            schedule=False
        ):
            raise ConnectionError(
                f"{self.endpoint_text} sent more replies than the handshake asked for"
            )

    @classmethod
    async def open(cls, options: ClientOptions, **kwargs: Any) -> Connection:
        """Create a connection and :meth:`connect` it (keyword arguments as the
        constructor's).

        :raises ConnectionError, AuthenticationError, TimeoutError: as :meth:`connect`.
        """
        conn = cls(options, **kwargs)
        await conn.connect()
        return conn

    def adopt_stream_of(self, other: Connection) -> None:
        """Swap in ``other``'s connected stream, parser and readiness poller (a
        maintenance handoff), keeping this connection's id and settings, and close this
        connection's old stream.

        Only its owner (the HandoffManager) may call this, while no command is in flight.
        ``other`` is left empty (closed, without closing the stream it gave away).

        :raises ConnectionBusyError: either connection is in use.
        :raises ConnectionClosedError: this connection was closed meanwhile (the pool
            closing): ``other`` keeps its stream, for the caller to close.
        """
        if self.in_use or other.in_use:
            raise ConnectionBusyError("cannot swap the stream of a connection in use")
        if self.closed:
            raise ConnectionClosedError(f"connection {self.id} was closed during its handoff")
        old = self._stream
        self._stream, self._parser, self._poller = other._stream, other._parser, other._poller
        self.host, self.port, self.unix_path = other.host, other.port, other.unix_path
        self.server_info, self.maint_enabled = other.server_info, other.maint_enabled
        self.broken = other.broken
        other._stream = other._poller = None
        other.closed = True
        if old is not None:
            close_stream(old)

    # ------------------------------------------------------------------- closing

    def close_nowait(self) -> None:
        """Close the socket at once (no ``QUIT``); idempotent, never raises."""
        self.closed = True
        stream, self._stream = self._stream, None
        self._poller = None  # its descriptor number may be reused by another socket
        if stream is not None:
            close_stream(stream)

    async def aclose(self) -> None:
        """Close the connection; a checkpoint, otherwise as :meth:`close_nowait`."""
        self.close_nowait()
        await trio.lowlevel.checkpoint()

    # ------------------------------------------------------------------ commands

    def _configured_timeout(self, timeout: float | Literal[Unset.UNSET] | None) -> float | None:
        return self.options.socket_timeout if timeout is UNSET else timeout

    def _begin(self) -> trio.abc.Stream:
        if self._sending or self._receiving:
            raise ConnectionBusyError(
                f"connection {self.id} is already in use by another task; a connection "
                "serves one command at a time"
            )
        stream = self._stream
        if stream is None or self.closed:
            raise not_written(ConnectionClosedError(f"connection {self.id} is closed"))
        if self.broken:
            raise not_written(
                ConnectionError(f"connection {self.id} is broken and cannot be reused")
            )
        return stream

    async def execute(
        self, args: tuple[CommandArg, ...], *, timeout: float | Literal[Unset.UNSET] | None = UNSET
    ) -> RespValue:
        """Send one command and return its reply.

        Error replies are *returned* as :class:`~trio_maint.ResponseError` instances (and an
        undecodable reply as a :class:`~trio_maint.DataError` instance) so the caller decides; push
        frames read on the way go to ``push_handler``.

        :param timeout: seconds to wait for the reply (``None`` = forever); default
            ``options.socket_timeout``. Maintenance relaxation may raise it (never lower).
        :raises DataError: an argument cannot be encoded (nothing was sent).
        :raises ConnectionBusyError: another task is using this connection.
        :raises ConnectionError, TimeoutError, ProtocolError: the connection is then broken.
            A ``ConnectionError``'s ``written`` flag is ``False`` only when provably no
            byte of the command was handed to the kernel (the connection was already
            closed or broken, or the first write failed at once): only then may the
            command be sent again (docs/maintenance.md, "What is sent again").
        """
        try:
            data = encode_command(args)
        except DataError:
            await _unsent_checkpoint()
            raise
        stream = self._begin()
        configured = self._configured_timeout(timeout)
        self._sending = self._receiving = True
        try:
            await self._send(stream, data, configured, reply_follows=True)
            return await self._read_reply(configured)
        except BaseException:
            self.broken = True
            raise
        finally:
            self._sending = self._receiving = False

    async def execute_many(
        self,
        commands: Sequence[tuple[CommandArg, ...]],
        *,
        timeout: float | Literal[Unset.UNSET] | None = UNSET,
    ) -> list[RespValue]:
        """Send several commands in one write and return their replies in order
        (a pipeline). Error replies are values, as in :meth:`execute`.

        :raises: as :meth:`execute`.
        """
        try:
            data = encode_commands(commands)
        except DataError:
            await _unsent_checkpoint()
            raise
        stream = self._begin()
        configured = self._configured_timeout(timeout)
        self._sending = self._receiving = True
        replies: list[RespValue] = []
        try:
            await self._send(stream, data, configured, reply_follows=True)
            count = len(commands)
            pushed = self._take_replies(replies, count)
            start: float | None = None
            deadline = _INF
            reads = 0
            while len(replies) < count:
                if start is None:
                    start = trio.current_time()
                    deadline = self._deadline_from(start, configured)
                elif pushed:
                    # Its relaxation applies now, measured from the start of the wait.
                    deadline = self._deadline_after_push(configured, start, deadline)
                if pushed and self._parser.has_data():
                    # More buffered after a batch holding push frames: a schedule point
                    # between batches, so that a flood never blocks the event loop long.
                    await trio.lowlevel.checkpoint()
                else:
                    # The first read polls for the replies, as execute's does; the 2nd
                    # to 4th try the socket at once; later ones (and, unlike a single
                    # reply's, the 2nd to 4th when nothing was there) wait for
                    # readability (_sansio/spin.py).
                    await self._receive(deadline, eager=reads == 0, now=read_now(reads))
                    reads += 1
                pushed = self._take_replies(replies, count)
            return replies
        except ProtocolError as exc:
            self.broken = True
            if exc.read_before is None:  # the replies before the one at fault
                exc.read_before = (commands, replies)
            raise
        except BaseException:
            self.broken = True
            raise
        finally:
            self._sending = self._receiving = False

    async def send_only(
        self, args: tuple[CommandArg, ...], *, timeout: float | Literal[Unset.UNSET] | None = UNSET
    ) -> None:
        """Write a command without reading a reply (pub/sub, whose confirmations arrive as
        push frames). May run while another task is in :meth:`read_frame`.

        :raises DataError, ConnectionBusyError, ConnectionError, TimeoutError: as
            :meth:`execute`.
        """
        data = encode_command(args)
        if self._sending:
            raise ConnectionBusyError(f"connection {self.id} is already sending")
        stream = self._stream
        if stream is None or self.closed:
            raise not_written(ConnectionClosedError(f"connection {self.id} is closed"))
        if self.broken:
            raise not_written(ConnectionError(f"connection {self.id} is broken"))
        self._sending = True
        try:
            await self._send(stream, data, self._configured_timeout(timeout))
        except BaseException:
            self.broken = True
            raise
        finally:
            self._sending = False

    async def read_frame(self, *, timeout: float | None = None) -> RespValue:
        """Read the next frame of any kind, push frames included, without dispatching it
        (pub/sub). A timeout here is *not* fatal: nothing was half-read.

        :param timeout: seconds to wait (``None`` = forever).
        :raises TimeoutError: nothing arrived in time (the connection stays usable).
        :raises ConnectionBusyError, ConnectionError, ProtocolError: as :meth:`execute`.
        """
        if self._receiving:
            raise ConnectionBusyError(f"connection {self.id} is already being read")
        if self._stream is None or self.closed:
            raise ConnectionClosedError(f"connection {self.id} is closed")
        if self.broken:
            raise ConnectionError(f"connection {self.id} is broken")
        await trio.lowlevel.checkpoint_if_cancelled()
        self._receiving = True
        try:
            deadline = _INF if timeout is None else trio.current_time() + timeout
            received = False
            while True:
                reply = self._next_parsed()
                if reply is not NEED_DATA:
                    break
                if self._readable():
                    # Bytes are waiting: read them even when the deadline has passed
                    # (``timeout=0`` polls), bounded in case they are not a whole frame.
                    await self._receive(max(deadline, trio.current_time() + 1.0))
                else:
                    await self._receive(deadline)
                received = True
        except TimeoutError:
            raise
        except trio.Cancelled:
            # Partial frames stay in the parser's buffer, so a cancelled wait on a plain
            # socket loses nothing; a TLS stream cancelled mid-record cannot be trusted.
            if not isinstance(self._stream, trio.SocketStream):
                self.broken = True
            raise
        except BaseException:
            self.broken = True
            raise
        finally:
            self._receiving = False
        if not received:
            await trio.lowlevel.cancel_shielded_checkpoint()
        return reply

    # ------------------------------------------------------------------- internals

    async def check_idle(self, *, schedule: bool = True) -> bool:
        """The pool's health check before reuse: drain push frames that arrived while
        idle and notice a closed or broken socket. Always checkpoints.

        :param schedule: ``False``: when nothing arrived (the common case) it is only a
            cancel point (``checkpoint_if_cancelled``), for a caller whose next step is a
            schedule point anyway (see :meth:`ConnectionPool.acquire_for_reply`).
        :returns: ``True`` when the connection can be used, ``False`` when it must be
            discarded (then it is marked broken).
        """
        if not self.usable or self.in_use:
            await trio.lowlevel.checkpoint()
            return False
        if not self._readable() and not self._parser.has_data():
            if schedule:
                await trio.lowlevel.checkpoint()
            else:
                await trio.lowlevel.checkpoint_if_cancelled()
            return True
        self._receiving = True
        try:
            timeout = self.options.socket_timeout or 5.0
            deadline = trio.current_time() + timeout
            burst = 0
            while True:
                reply = self._next_parsed()
                if reply is NEED_DATA:
                    if not self._readable() and not self._parser.has_data():
                        break
                    # Part of a frame is buffered: wait for the rest, bounded.
                    await self._receive(deadline)
                    burst = 0
                    continue
                if reply.__class__ is PushNotification:
                    self._parser.pushes_taken(1)
                    self.dispatch_push(reply)
                    burst += 1
                    if burst >= PUSH_BURST:
                        await trio.lowlevel.checkpoint()  # (as in _read_reply)
                        burst = 0
                    if trio.current_time() >= deadline:
                        # Push frames without end: the check gives up (the connection
                        # is discarded) at its deadline, however fast they come.
                        raise TimeoutError(
                            f"{self.endpoint_text} kept sending push frames to an idle connection"
                        )
                    continue
                raise ProtocolError(f"unexpected reply on an idle connection: {reply!r:.200}")
        except trio.Cancelled:
            self.broken = True
            raise
        except RedisError as exc:
            logger.debug("connection %d is stale: %s", self.id, exc)
            self.broken = True
        finally:
            self._receiving = False
        await trio.lowlevel.checkpoint()
        return self.usable


async def _unsent_checkpoint() -> None:
    """The schedule point of a command that raises before it was sent (an argument that
    cannot be encoded): a caller that took its connection with only a cancel point
    (:meth:`ConnectionPool.acquire_for_reply`) counts on the command's own, which a command
    sent gets from waiting for its reply."""
    await trio.lowlevel.cancel_shielded_checkpoint()
