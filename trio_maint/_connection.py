"""One connection to a Redis server: a Trio stream, the RESP3 handshake, commands with
deadlines, and push-frame dispatch.

A connection serves one command (or pipeline) at a time. Anything that interrupts a
command after its first byte was written and before its whole reply was read (a timeout,
a cancellation, a lost socket) marks the connection *broken*: the pool then discards it, so
no later command can ever receive a stale reply.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import select
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, Protocol

import trio

from ._errors import (
    AuthenticationError,
    ConnectionBusyError,
    ConnectionClosedError,
    ConnectionError,
    DataError,
    ProtocolError,
    RedisError,
    ResponseError,
    TimeoutError,
)
from ._options import ClientOptions
from ._resp import NEED_DATA, CommandArg, PushNotification, RespParser, RespValue, encode_command

__all__ = ["Connection", "PushHandler", "TimeoutPolicy", "open_stream"]

logger = logging.getLogger("trio_maint.connection")

_RECEIVE_SIZE: Final = 65536
_INF: Final = math.inf
_ids = itertools.count(1)


class _Unset:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<default>"


UNSET: Final = _Unset()

#: ``push_handler(connection, frame)``: called synchronously, without awaiting, for every
#: RESP3 push frame the connection reads (pub/sub messages, maintenance notifications,
#: tracking invalidations). It must not block or raise; an exception is logged and dropped.
PushHandler = Callable[["Connection", list[Any]], None]

#: ``hook(connection)``: extra handshake steps run after ``HELLO 3``/``SELECT`` on every new
#: stream (the maintenance opt-in). It may use :meth:`Connection.handshake_command`.
HandshakeHook = Callable[["Connection"], Awaitable[None]]


class TimeoutPolicy(Protocol):
    """What a connection asks for its effective timeout (the maintenance layer's
    relaxed timeouts implement it)."""

    def effective(self, configured: float | None, now: float) -> float | None:
        """The timeout to use for the next read/write, given the configured one (seconds,
        ``None`` = no timeout) and the current Trio time."""
        ...


def _socket_of(stream: trio.abc.Stream) -> trio.socket.SocketType:
    inner: Any = stream
    while isinstance(inner, trio.SSLStream):
        inner = inner.transport_stream
    if isinstance(inner, trio.SocketStream):
        return inner.socket
    raise TypeError(f"unsupported stream type {type(stream).__name__}")


async def open_stream(
    options: ClientOptions,
    host: str | None = None,
    port: int | None = None,
    *,
    unix_path: str | None = None,
) -> trio.abc.Stream:
    """Dial a transport: TCP, TLS over TCP (``options.ssl``), or a Unix socket.

    No timeout is applied here; the caller wraps it. ``host``/``port`` default to the
    options' address.

    :raises ConnectionError: the dial or the TLS handshake failed.
    """
    try:
        if unix_path is not None:
            return await trio.open_unix_socket(unix_path)
        host = options.host if host is None else host
        port = options.port if port is None else port
        tcp = await trio.open_tcp_stream(host, port)
        if not options.ssl:
            return tcp
        tls = trio.SSLStream(
            tcp,
            options.make_ssl_context(),
            server_hostname=options.ssl_server_hostname or host,
        )
        try:
            await tls.do_handshake()
        except BaseException:
            await trio.aclose_forcefully(tcp)
            raise
        return tls
    except RedisError:
        raise
    except (OSError, trio.BrokenResourceError, ssl.SSLError) as exc:
        where = unix_path if unix_path is not None else f"{host}:{port}"
        raise ConnectionError(f"cannot connect to {where}: {_describe(exc)}") from exc


class Connection:
    """A connection to one Redis endpoint speaking RESP3.

    Created by the pool (or by :meth:`open`); ``id`` (``int``) stays the same for the
    connection's whole life, also when a maintenance handoff swaps its stream to a new
    endpoint (as Redis's MOVING notification, see docs/maintenance.md).

    Attributes:
        id: unique, increasing ``int``.
        host, port: the endpoint the current stream is connected to (``unix_path`` for
            Unix sockets).
        broken: ``True`` once the stream can no longer be trusted (discard it).
        closed: ``True`` once closed.
        server_info: the ``HELLO 3`` reply (``dict``).
        push_handler: a :data:`PushHandler` or ``None``.
        timeouts: a :class:`TimeoutPolicy` (relaxed timeouts) or ``None``.
        maint_enabled: ``True`` when the server accepted ``CLIENT MAINT_NOTIFICATIONS``.
        last_used: Trio time (``float`` seconds) of the last release to the pool.
        reply_timer: the pool's :class:`ReplyTimer` bounding reply waits on plain
            sockets, or ``None`` (then each wait has a cancel scope of its own).
    """

    __slots__ = (
        "__weakref__",
        "_fileno",
        "_parser",
        "_receiving",
        "_sending",
        "_stream",
        "_timed_out",
        "broken",
        "closed",
        "handoff",
        "handshake_hook",
        "host",
        "id",
        "last_used",
        "maint_enabled",
        "options",
        "port",
        "push_handler",
        "reply_timer",
        "server_info",
        "timeouts",
        "unix_path",
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
    ) -> None:
        self.id = next(_ids)
        self.options = options
        self.unix_path = unix_path if unix_path is not None else options.unix_path
        self.host = options.host if host is None else host
        self.port = options.port if port is None else port
        self._stream: trio.abc.Stream | None = None
        self._fileno = -1
        self._parser = RespParser(options.encoding)
        self._sending = False
        self._receiving = False
        self.broken = False
        self.closed = False
        self.push_handler = push_handler
        self.handshake_hook = handshake_hook
        self.timeouts: TimeoutPolicy | None = None
        self.server_info: dict[Any, Any] = {}
        self.maint_enabled = False
        self.last_used = 0.0
        self.handoff: Any = None
        self.reply_timer: ReplyTimer | None = None
        self._timed_out = False

    def __repr__(self) -> str:
        state = "closed" if self.closed else "broken" if self.broken else "open"
        return f"<Connection id={self.id} {self.endpoint_text} {state}>"

    @property
    def endpoint_text(self) -> str:
        """The current endpoint as ``host:port`` or the Unix socket path."""
        if self.unix_path is not None:
            return self.unix_path
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

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
                _close_stream(stream)
            raise RuntimeError("connect() may be called once, on a new connection")
        timeout = self.options.connect_timeout
        deadline = _INF if timeout is None else trio.current_time() + timeout
        try:
            with trio.move_on_at(deadline) as scope:
                if stream is None:
                    stream = await open_stream(
                        self.options, self.host, self.port, unix_path=self.unix_path
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
        self._fileno = _socket_of(stream).fileno()

    async def handshake_command(self, *args: CommandArg) -> RespValue:
        """Run one command during the handshake and return its reply (error replies are
        returned as :class:`ResponseError` values, not raised). For handshake hooks."""
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
        """Swap in ``other``'s connected stream and parser (a maintenance handoff), keeping
        this connection's id and settings, and close this connection's old stream.

        Only its owner (the HandoffManager) may call this, while no command is in flight.
        ``other`` is left empty (closed, without closing the stream it gave away).
        """
        if self.in_use or other.in_use:
            raise ConnectionBusyError("cannot swap the stream of a connection in use")
        old = self._stream
        self._stream, self._fileno, self._parser = other._stream, other._fileno, other._parser
        self.host, self.port, self.unix_path = other.host, other.port, other.unix_path
        self.server_info, self.maint_enabled = other.server_info, other.maint_enabled
        self.broken = other.broken
        other._stream = None
        other.closed = True
        if old is not None:
            _close_stream(old)

    # ------------------------------------------------------------------- closing

    def close_nowait(self) -> None:
        """Close the socket at once (no ``QUIT``); idempotent, never raises."""
        self.closed = True
        stream, self._stream = self._stream, None
        if stream is not None:
            _close_stream(stream)

    async def aclose(self) -> None:
        """Close the connection; a checkpoint, otherwise as :meth:`close_nowait`."""
        self.close_nowait()
        await trio.lowlevel.checkpoint()

    # ------------------------------------------------------------------ commands

    def _configured_timeout(self, timeout: float | _Unset | None) -> float | None:
        return self.options.socket_timeout if isinstance(timeout, _Unset) else timeout

    def _deadline(self, configured: float | None) -> float:
        policy = self.timeouts
        if policy is not None:
            configured = policy.effective(configured, trio.current_time())
        if configured is None:
            return _INF
        return trio.current_time() + configured

    def _begin(self) -> trio.abc.Stream:
        if self._sending or self._receiving:
            raise ConnectionBusyError(
                f"connection {self.id} is already in use by another task; a connection "
                "serves one command at a time"
            )
        stream = self._stream
        if stream is None or self.closed:
            raise ConnectionClosedError(f"connection {self.id} is closed")
        if self.broken:
            raise ConnectionError(f"connection {self.id} is broken and cannot be reused")
        return stream

    async def execute(
        self, args: tuple[CommandArg, ...], *, timeout: float | _Unset | None = UNSET
    ) -> RespValue:
        """Send one command and return its reply.

        Error replies are *returned* as :class:`ResponseError` instances (and an
        undecodable reply as a :class:`DataError` instance) so the caller decides; push
        frames read on the way go to ``push_handler``.

        :param timeout: seconds to wait for the reply (``None`` = forever); default
            ``options.socket_timeout``. Maintenance relaxation may raise it (never lower).
        :raises DataError: an argument cannot be encoded (nothing was sent).
        :raises ConnectionBusyError: another task is using this connection.
        :raises ConnectionError, TimeoutError, ProtocolError: the connection is then broken.
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
        timeout: float | _Unset | None = UNSET,
    ) -> list[RespValue]:
        """Send several commands in one write and return their replies in order
        (a pipeline). Error replies are values, as in :meth:`execute`.

        :raises: as :meth:`execute`.
        """
        try:
            data = b"".join([encode_command(args) for args in commands])
        except DataError:
            await _unsent_checkpoint()
            raise
        stream = self._begin()
        configured = self._configured_timeout(timeout)
        self._sending = self._receiving = True
        try:
            await self._send(stream, data, configured, reply_follows=True)
            count = len(commands)
            replies: list[RespValue] = []
            pushed = self._take_replies(replies, count)
            deadline: float | None = None
            while len(replies) < count:
                if pushed or deadline is None:
                    # A push frame re-arms the deadline, and its relaxation applies now.
                    deadline = self._deadline(configured)
                await self._receive(deadline)
                pushed = self._take_replies(replies, count)
            return replies
        except BaseException:
            self.broken = True
            raise
        finally:
            self._sending = self._receiving = False

    async def send_only(
        self, args: tuple[CommandArg, ...], *, timeout: float | _Unset | None = UNSET
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
            raise ConnectionClosedError(f"connection {self.id} is closed")
        if self.broken:
            raise ConnectionError(f"connection {self.id} is broken")
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

    async def _send(
        self,
        stream: trio.abc.Stream,
        data: bytes,
        configured: float | None,
        *,
        reply_follows: bool = False,
    ) -> None:
        try:
            if reply_follows and type(stream) is trio.SocketStream:
                # Fast path (plain sockets, before reading a reply): a command almost
                # always fits in the socket buffer, so write it at once, without a cancel
                # scope or Trio's socket wrappers; what did not fit goes through send_all
                # below. Not a schedule point itself: the reply's receive that follows
                # always is one (and a cancelled caller writes nothing).
                await trio.lowlevel.checkpoint_if_cancelled()
                fd = stream.socket.fileno()
                if fd < 0:
                    raise trio.ClosedResourceError
                try:
                    sent = os.write(fd, data)
                except BlockingIOError:
                    sent = 0
                if sent == len(data):
                    return
                data = data[sent:]
            deadline = self._deadline(configured)
            if deadline == _INF:
                await stream.send_all(data)
                return
            with trio.move_on_at(deadline) as scope:
                await stream.send_all(data)
            if scope.cancelled_caught:
                raise TimeoutError(f"writing to {self.endpoint_text} timed out")
        except RedisError:
            raise
        except (trio.BrokenResourceError, OSError) as exc:
            # The fast path's failed write was no schedule point (see _unsent_checkpoint).
            await trio.lowlevel.cancel_shielded_checkpoint()
            raise ConnectionError(
                f"lost connection to {self.endpoint_text}: {_describe(exc)}"
            ) from exc
        except trio.ClosedResourceError as exc:
            await trio.lowlevel.cancel_shielded_checkpoint()
            raise ConnectionClosedError(f"connection {self.id} was closed") from exc

    def _next_parsed(self) -> RespValue:
        # RespParser.next_reply, inlined (one Python frame less per reply).
        parser = self._parser
        try:
            return parser._gets()
        except UnicodeDecodeError as exc:
            # hiredis skipped the rest of this reply: the stream is still in sync.
            return DataError(f"reply could not be decoded as {self.options.encoding}: {exc}")
        except Exception as exc:
            raise parser.failure(exc)  # failure() chains the cause

    def _take_replies(self, replies: list[RespValue], count: int) -> bool:
        """Append whole replies buffered to ``replies`` until it holds ``count`` (a
        pipeline's path: one batch call into hiredis, see :meth:`RespParser.take_replies`),
        handing push frames among them to ``push_handler`` instead. Never takes a byte
        past the ``count``-th reply. Returns whether a push frame was handed on."""
        pushed = False
        while True:
            start = len(replies)
            wanted = count - start
            if wanted <= 0 or not self._parser.take_replies(replies, wanted):
                return pushed
            taken = replies[start:]
            types = list(map(type, taken))
            try:
                index = types.index(PushNotification)
            except ValueError:
                return pushed
            # Take the push frames out (list.index and slices: no Python step per reply).
            del replies[start + index :]
            while True:
                self._parser.pushes_taken(1)
                self.dispatch_push(taken[index])
                pos = index + 1
                try:
                    index = types.index(PushNotification, pos)
                except ValueError:
                    replies.extend(taken[pos:])
                    break
                replies.extend(taken[pos:index])
            pushed = True
            if len(taken) < wanted:  # the buffer is drained
                return pushed

    async def _read_reply(self, configured: float | None, reply: RespValue = UNSET) -> RespValue:
        """The next reply, waiting for it; ``reply``: what the caller just parsed (default:
        parse first)."""
        if reply is UNSET:
            reply = self._next_reply()
            if reply is not NEED_DATA and reply.__class__ is not PushNotification:
                return reply
        deadline = self._deadline(configured)
        while True:
            if reply is NEED_DATA:
                await self._receive(deadline)
            elif reply.__class__ is PushNotification:
                self._parser.pushes_taken(1)
                self.dispatch_push(reply)
                # A push frame re-arms the reply's deadline, and its relaxation applies now.
                deadline = self._deadline(configured)
            else:
                return reply
            reply = self._next_reply()

    def _next_reply(self) -> RespValue:
        # _next_parsed for a reply: an undecodable frame that may have been a push frame
        # raises ProtocolError (RespParser.undecodable) rather than take the reply's place.
        parser = self._parser
        try:
            return parser._gets()
        except UnicodeDecodeError as exc:
            return parser.undecodable(exc)
        except Exception as exc:
            raise parser.failure(exc)  # failure() chains the cause

    async def _receive(self, deadline: float) -> None:
        stream = self._stream
        if stream is None:
            raise ConnectionClosedError(f"connection {self.id} is closed")
        data: bytes | bytearray
        try:
            if type(stream) is trio.SocketStream:
                # Fast path (plain sockets): wait until readable, then one read(), without
                # the failed first recv() and the wrappers of SocketStream.receive_some.
                # Cancellation can only happen in the wait, before anything was read.
                sock = stream.socket
                timer = self.reply_timer
                if deadline == _INF:
                    await trio.lowlevel.wait_readable(sock)
                elif timer is not None and timer.running:
                    # The pool's timer bounds the wait: no cancel scope per reply.
                    self._timed_out = False
                    timer.arm(self, deadline)
                    try:
                        await trio.lowlevel.wait_readable(sock)
                    except trio.ClosedResourceError:
                        if self._timed_out:
                            raise TimeoutError(
                                f"no reply from {self.endpoint_text} within the socket timeout"
                            ) from None
                        if timer.stopped() and self._stream is stream and sock.fileno() >= 0:
                            # The timer stopped (its client is closing) while this wait was
                            # armed: a spurious wakeup; the caller waits again, under a
                            # cancel scope.
                            return
                        raise
                    finally:
                        timer.disarm(self)
                else:
                    with trio.move_on_at(deadline) as scope:
                        await trio.lowlevel.wait_readable(sock)
                    if scope.cancelled_caught:
                        raise TimeoutError(
                            f"no reply from {self.endpoint_text} within the socket timeout"
                        )
                fd = sock.fileno()
                if fd < 0:
                    raise trio.ClosedResourceError
                try:
                    data = os.read(fd, _RECEIVE_SIZE)
                except BlockingIOError:  # pragma: no cover - a spurious wakeup: wait again
                    return
            elif deadline == _INF:
                data = await stream.receive_some(_RECEIVE_SIZE)
            else:
                data = b""
                with trio.move_on_at(deadline) as scope:
                    data = await stream.receive_some(_RECEIVE_SIZE)
                if scope.cancelled_caught:
                    raise TimeoutError(
                        f"no reply from {self.endpoint_text} within the socket timeout"
                    )
        except RedisError:
            raise
        except (trio.BrokenResourceError, OSError) as exc:
            raise ConnectionError(
                f"lost connection to {self.endpoint_text}: {_describe(exc)}"
            ) from exc
        except trio.ClosedResourceError as exc:
            raise ConnectionClosedError(f"connection {self.id} was closed") from exc
        if not data:
            raise ConnectionError(f"server {self.endpoint_text} closed the connection")
        self._parser.feed(data)  # raises ProtocolError on a RESP3 attribute frame

    def _wake_reply_wait(self, *, timed_out: bool) -> None:
        """Called by the :class:`ReplyTimer`: wake this connection's armed reply wait. It
        then raises ``TimeoutError`` (``timed_out``), or, when the timer is stopping, goes
        on under a cancel scope of its own."""
        self._timed_out = timed_out
        stream = self._stream
        if type(stream) is trio.SocketStream:
            trio.lowlevel.notify_closing(stream.socket)

    def dispatch_push(self, frame: list[Any]) -> None:
        """Hand one push frame to ``push_handler`` (logged and dropped when there is
        none, or when the handler raises)."""
        handler = self.push_handler
        if handler is None:
            logger.debug("connection %d: push frame with no handler: %.200r", self.id, frame)
            return
        try:
            handler(self, frame)
        except Exception:
            logger.exception("connection %d: push handler failed on %.200r", self.id, frame)

    def has_input(self) -> bool:
        """Whether bytes wait to be read (on the socket or buffered), without reading."""
        return self._readable() or self._parser.has_data()

    def _readable(self) -> bool:
        if self._fileno < 0:
            return False
        poller = select.poll()
        poller.register(self._fileno, select.POLLIN)
        return bool(poller.poll(0))

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
            while True:
                reply = self._next_parsed()
                if reply is NEED_DATA:
                    if not self._readable() and not self._parser.has_data():
                        break
                        # Part of a frame is buffered: wait for the rest, bounded.
                    await self._receive(deadline)
                    continue
                if reply.__class__ is PushNotification:
                    self._parser.pushes_taken(1)
                    self.dispatch_push(reply)
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


class ReplyTimer:
    """Bounds the reply waits of a pool's connections without a cancel scope per reply.

    A connection waiting for a reply on a plain socket registers its deadline (Trio time,
    ``float`` seconds) with :meth:`arm` and removes it with :meth:`disarm`; :meth:`run`, one
    task in the client's nursery, sleeps until the earliest deadline registered (the one
    cancel scope, whose deadline only moves when a shorter one arrives) and wakes the
    connections whose deadline has passed with :func:`trio.lowlevel.notify_closing`, so
    their wait raises and the command fails with ``TimeoutError`` as it would under its
    own cancel scope (the connection is then broken and discarded). Entering and leaving
    a cancel scope per reply was the largest cost of a command in the profile
    (docs/performance.md). A connection without a running timer uses a cancel scope.
    """

    __slots__ = ("_armed", "_next_wake", "_scope", "running")

    def __init__(self) -> None:
        self._armed: dict[Connection, float] = {}
        #: Never later than the earliest deadline armed (it may be earlier: a stale wake).
        self._next_wake = _INF
        self._scope: trio.CancelScope | None = None
        #: True while :meth:`run` runs; connections only arm a running timer.
        self.running = False

    def arm(self, conn: Connection, deadline: float) -> None:
        """Register ``conn``'s reply deadline (Trio time, ``float`` seconds).

        :raises ValueError: ``deadline`` is NaN (as a cancel scope refuses it: armed, it
            would never fire).
        """
        if deadline < self._next_wake:
            self._next_wake = deadline
            if self._scope is not None:
                self._scope.deadline = deadline
        elif deadline != deadline:
            raise ValueError("deadline must not be NaN")
        self._armed[conn] = deadline

    def stopped(self) -> bool:
        """Whether :meth:`run` is not running (checked again after a wait armed while it
        was)."""
        return not self.running

    def disarm(self, conn: Connection) -> None:
        """Forget ``conn``'s deadline (its wait ended); idempotent."""
        self._armed.pop(conn, None)

    async def run(self) -> None:
        """Run until cancelled (in the client's nursery); never raises otherwise."""
        self.running = True
        try:
            while True:
                with trio.CancelScope(deadline=self._next_wake) as scope:
                    self._scope = scope
                    await trio.sleep_forever()
                self._scope = None
                self._expire(trio.current_time())
        finally:
            self._scope = None
            self.running = False
            # Waits still armed would never be woken: wake them (not as timed out), so
            # they wait on under cancel scopes of their own and still end at their
            # deadlines (a shielded command while the client's nursery is cancelled).
            armed, self._armed = self._armed, {}
            self._next_wake = _INF
            for conn in armed:
                conn._wake_reply_wait(timed_out=False)

    def _expire(self, now: float) -> None:
        next_wake = _INF
        for conn, deadline in list(self._armed.items()):
            if deadline <= now:
                del self._armed[conn]
                conn._wake_reply_wait(timed_out=True)
            elif deadline < next_wake:
                next_wake = deadline
        self._next_wake = next_wake


async def _unsent_checkpoint() -> None:
    """The schedule point of a command that raises before it was sent (an argument that
    cannot be encoded): a caller that took its connection with only a cancel point
    (:meth:`ConnectionPool.acquire_for_reply`) counts on the command's own, which a command
    sent gets from waiting for its reply."""
    await trio.lowlevel.cancel_shielded_checkpoint()


def _describe(exc: BaseException) -> str:
    """A useful message for ``exc``, looking into its cause (trio's BrokenResourceError
    wraps the real ``OSError``/``SSLError`` without a message of its own)."""
    text = str(exc)
    cause = exc.__cause__ or exc.__context__
    if cause is not None and (not text or isinstance(exc, trio.BrokenResourceError)):
        inner = _describe(cause)
        return f"{text}: {inner}" if text else inner
    return text or type(exc).__name__


def _close_stream(stream: trio.abc.Stream) -> None:
    try:
        _socket_of(stream).close()
    except Exception:  # pragma: no cover - closing must never raise
        logger.debug("error closing a stream", exc_info=True)
