"""The byte level of a :class:`~trio_maint._net.connection.Connection`: sending a command's
bytes under a write deadline, receiving replies under a reply deadline (the client's
:class:`~trio_maint._net.timer.ReplyTimer`, or a cancel scope), taking whole replies from
the parser, and handing push frames met on the way to the push handler.

:class:`StreamIO` holds the stream, the parser and the deadline settings;
:class:`~trio_maint._net.connection.Connection` adds its life cycle (dial, handshake,
handoff, close) and the command API on top.
"""

from __future__ import annotations

import logging
import math
import os
import select
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, cast

import trio

from .._sansio.endpoint import format_host_port
from .._sansio.errors import (
    ConnectionClosedError,
    ConnectionError,
    DataError,
    RedisError,
    TimeoutError,
    not_written,
)
from .._sansio.loglimit import log_limited
from .._sansio.options import ClientOptions
from .._sansio.resp import NEED_DATA, PushNotification, RespParser, RespValue
from .._sansio.spin import ReadSpin, read_now
from .._sansio.unset import UNSET, Unset
from .stream import describe_error

if TYPE_CHECKING:
    from .connection import Connection
    from .timer import ReplyTimer

__all__ = ["PUSH_BURST", "PushHandler", "StreamIO", "TimeoutPolicy"]

logger = logging.getLogger("trio_maint.connection")

_RECEIVE_SIZE: Final = 65536
_INF: Final = math.inf
#: Push frames handed on in a row, from bytes already buffered, before a reply wait
#: checkpoints (``int``): a flood of buffered push frames never blocks the event loop
#: for long (docs/robustness.md).
PUSH_BURST: Final = 32

#: ``push_handler(connection, frame)``: called synchronously, without awaiting, for every
#: RESP3 push frame the connection reads (pub/sub messages, maintenance notifications,
#: tracking invalidations). It must not block or raise; an exception is logged and dropped.
PushHandler = Callable[["Connection", list[Any]], None]


def _read_now(sock: trio.socket.SocketType) -> bytes | None:
    """One non-blocking ``read()`` of ``sock``: what it holds (``b""`` at end of file), or
    ``None`` when nothing is there yet.

    :raises trio.ClosedResourceError: the socket was closed.
    """
    fd = sock.fileno()
    if fd < 0:
        raise trio.ClosedResourceError
    try:
        return os.read(fd, _RECEIVE_SIZE)
    except BlockingIOError:
        return None


class TimeoutPolicy(Protocol):
    """What a connection asks for its effective timeout (the maintenance layer's
    relaxed timeouts implement it)."""

    def effective(self, configured: float | None, now: float) -> float | None:
        """The timeout to use for the next read/write, given the configured one (seconds,
        ``None`` = no timeout) and the current Trio time."""
        ...


class StreamIO:
    """One stream and its RESP3 parser: the send and receive paths of a connection.

    Not used on its own: :class:`~trio_maint._net.connection.Connection` sets every
    attribute in its constructor.
    """

    __slots__ = (
        "_parser",
        "_poller",
        "_spin",
        "_stream",
        "_timed_out",
        "host",
        "id",
        "options",
        "port",
        "push_handler",
        "reply_timer",
        "timeouts",
        "unix_path",
    )

    id: int
    options: ClientOptions
    host: str
    port: int
    unix_path: str | None
    push_handler: PushHandler | None
    timeouts: TimeoutPolicy | None
    reply_timer: ReplyTimer | None
    _stream: trio.abc.Stream | None
    #: ``select.poll`` object registered for the socket (POLLIN), made once per socket:
    #: the pool's health check before each reuse is then one ``poll`` call.
    _poller: select.poll | None
    _parser: RespParser
    _timed_out: bool
    #: How many passes the next polling read makes (see :meth:`_receive`).
    _spin: ReadSpin

    @property
    def endpoint_text(self) -> str:
        """The current endpoint as ``host:port`` or the Unix socket path."""
        if self.unix_path is not None:
            return self.unix_path
        return format_host_port(self.host, self.port)

    def _deadline(self, configured: float | None) -> float:
        return self._deadline_from(trio.current_time(), configured)

    def _deadline_from(self, start: float, configured: float | None) -> float:
        """``start`` (Trio time) plus the timeout in force at ``start``: ``configured``
        seconds (``None``: no deadline), as the timeout policy may relax it."""
        policy = self.timeouts
        if policy is not None:
            configured = policy.effective(configured, start)
        if configured is None:
            return _INF
        return start + configured

    def _deadline_after_push(
        self, configured: float | None, start: float, deadline: float
    ) -> float:
        """The reply deadline after a push frame was handed on, for a wait that started at
        ``start`` (Trio time) with ``deadline``: the timeout in force now, measured from
        ``start`` (a relaxation the frame brought, e.g. MIGRATING, lengthens the wait up to
        ``start`` + the relaxed timeout), never shorter than before, never re-armed from
        now: an endless stream of push frames ends in ``TimeoutError`` on time.

        :raises TimeoutError: the deadline has passed.
        """
        now = trio.current_time()
        policy = self.timeouts
        if policy is not None:
            configured = policy.effective(configured, now)
        if configured is not None and start + configured > deadline:
            deadline = start + configured
        if now >= deadline:
            raise TimeoutError(f"no reply from {self.endpoint_text} within the socket timeout")
        return deadline

    async def _send(
        self,
        stream: trio.abc.Stream,
        data: bytes,
        configured: float | None,
        *,
        reply_follows: bool = False,
    ) -> None:
        """Write ``data`` under the write deadline of ``configured`` seconds.

        :raises ConnectionError, ConnectionClosedError: the write failed; its ``written``
            flag is ``False`` when provably no byte was handed to the kernel (the fast
            path's first ``os.write`` failed, or the socket was already closed).
        :raises TimeoutError: the write deadline passed (some bytes may have been written).
        """
        written = True
        try:
            if reply_follows and type(stream) is trio.SocketStream:
                # Fast path (plain sockets, before reading a reply): a command almost
                # always fits in the socket buffer, so write it at once, without a cancel
                # scope or Trio's socket wrappers; what did not fit goes through send_all
                # below. Not a schedule point itself: the reply's receive that follows
                # always is one (and a cancelled caller writes nothing).
                await trio.lowlevel.checkpoint_if_cancelled()
                written = False  # until os.write accepts a byte (or send_all may have)
                fd = stream.socket.fileno()
                if fd < 0:
                    raise trio.ClosedResourceError
                try:
                    sent = os.write(fd, data)
                except BlockingIOError:
                    sent = 0
                if sent == len(data):
                    return
                written = True
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
            # The fast path's failed write was no schedule point (see
            # connection._unsent_checkpoint).
            await trio.lowlevel.cancel_shielded_checkpoint()
            lost = ConnectionError(
                f"lost connection to {self.endpoint_text}: {describe_error(exc)}"
            )
            raise (lost if written else not_written(lost)) from exc
        except trio.ClosedResourceError as exc:
            await trio.lowlevel.cancel_shielded_checkpoint()
            closed = ConnectionClosedError(f"connection {self.id} was closed")
            raise (closed if written else not_written(closed)) from exc

    def _next_parsed(self) -> RespValue:
        # RespParser.next_reply, inlined (one Python frame less per reply).
        parser = self._parser
        try:
            return parser._gets()
        except UnicodeDecodeError as exc:
            # A reply that did not decode (a push frame comes out with bytes in it).
            return DataError(f"reply could not be decoded as {self.options.encoding}: {exc}")
        except Exception as exc:
            raise parser.failure(exc)  # failure() chains the cause

    def _take_replies(self, replies: list[RespValue], count: int) -> bool:
        """Append whole replies buffered to ``replies`` until it holds ``count`` (a
        pipeline's path: one batch call into hiredis, see :meth:`RespParser.take_replies`),
        handing push frames among them to ``push_handler`` instead. Never takes a byte
        past the ``count``-th reply. Returns whether a push frame was handed on: then
        more may be buffered (:meth:`RespParser.has_data`) when it stopped after
        ``PUSH_BURST`` push frames, so that the caller checkpoints between bursts (a flood
        of them never blocks the event loop for long). Batches are taken until then, so a
        small pipeline behind a flood drains it a burst per checkpoint, not ``count``
        frames per checkpoint (it timed out behind 100,000 push frames)."""
        handed = 0
        while True:
            start = len(replies)
            wanted = count - start
            if wanted <= 0 or not self._parser.take_replies(replies, wanted):
                return handed > 0
            taken = replies[start:]
            types = list(map(type, taken))
            try:
                index = types.index(PushNotification)
            except ValueError:
                return handed > 0
            # Take the push frames out (list.index and slices: no Python step per reply).
            del replies[start + index :]
            while True:
                self._parser.pushes_taken(1)
                self.dispatch_push(taken[index])
                handed += 1
                pos = index + 1
                try:
                    index = types.index(PushNotification, pos)
                except ValueError:
                    replies.extend(taken[pos:])
                    break
                replies.extend(taken[pos:index])
            if handed >= PUSH_BURST:
                return True

    async def _read_reply(
        self, configured: float | None, reply: RespValue | Literal[Unset.UNSET] = UNSET
    ) -> RespValue:
        """The next reply, waiting for it; ``reply``: what the caller just parsed (default:
        parse first)."""
        if reply is UNSET:
            reply = self._next_parsed()
            if reply is not NEED_DATA and reply.__class__ is not PushNotification:
                return reply
        start = trio.current_time()
        deadline = self._deadline_from(start, configured)
        burst = 0
        reads = 0
        while True:
            if reply is NEED_DATA:
                # Every read polls; the 2nd to 4th try the socket before any pass: the
                # rest of a reply begun is usually there already (_sansio/spin.py).
                await self._receive(deadline, eager=True, now=read_now(reads))
                reads += 1
                burst = 0
            elif reply.__class__ is PushNotification:
                self._parser.pushes_taken(1)
                self.dispatch_push(reply)
                # Its relaxation applies now, measured from the start of the wait.
                deadline = self._deadline_after_push(configured, start, deadline)
                burst += 1
                if burst >= PUSH_BURST:
                    # A flood of buffered push frames never blocks the event loop long.
                    await trio.lowlevel.checkpoint()
                    burst = 0
            else:
                return reply
            reply = self._next_parsed()

    async def _receive(self, deadline: float, *, eager: bool = False, now: bool = False) -> None:
        """Read what the socket holds into the parser, waiting for it until ``deadline``.

        On a plain socket (TCP or Unix), ``eager`` (a read right after a write, and every
        read of a single command's reply): poll for the bytes before waiting for
        readability, up to :data:`~trio_maint._sansio.spin.SPIN_PASSES` passes through
        Trio's scheduler (a checkpoint each) and a non-blocking read after each, as the
        connection's :class:`~trio_maint._sansio.spin.ReadSpin` decides (it backs off
        when polling keeps missing). The reply is usually there within a few passes, and
        a found reply skips the wait's epoll registration and the thread's sleep and
        wakeup, which cost more than the round trip on a virtual machine
        (docs/performance.md, "Polling for the reply"). Other tasks run in every pass.
        ``now`` (the 2nd to 4th read of one reply, :func:`~trio_maint._sansio.spin.read_now`):
        one non-blocking read first, before any pass. Either way ``deadline`` is checked
        first: bytes that keep coming in dribs never hold a reply past it.

        :raises TimeoutError: ``deadline`` passed first (the connection is then broken).
        :raises ConnectionError, ConnectionClosedError: the socket failed or was closed.
        """
        stream = self._stream
        if stream is None:
            raise ConnectionClosedError(f"connection {self.id} is closed")
        data: bytes | bytearray
        try:
            if type(stream) is trio.SocketStream:
                # Fast path (plain sockets): reads with os.read, polling or after the
                # wait for readability, without the wrappers of SocketStream.receive_some.
                # Cancellation can only happen in a checkpoint or the wait, before
                # anything was read.
                if (eager or now) and deadline != _INF and trio.current_time() >= deadline:
                    # (A polled read never reaches the wait, where the deadline applies.)
                    raise TimeoutError(
                        f"no reply from {self.endpoint_text} within the socket timeout"
                    )
                sock = stream.socket
                got = _read_now(sock) if now else None
                if got is None and eager:
                    # Poll for the reply a few passes before waiting (_sansio/spin.py).
                    spin = self._spin
                    passes = spin.passes()
                    while passes:
                        await trio.lowlevel.checkpoint()
                        got = _read_now(sock)
                        if got is not None:
                            if spin.misses:
                                spin.found()
                            break
                        passes -= 1
                        if not passes:
                            spin.missed()
                if got is None:
                    if not await self._wait_readable(stream, sock, deadline):
                        return
                    got = _read_now(sock)
                    if got is None:  # pragma: no cover - a spurious wakeup: wait again
                        return
                data = got
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
                f"lost connection to {self.endpoint_text}: {describe_error(exc)}"
            ) from exc
        except trio.ClosedResourceError as exc:
            raise ConnectionClosedError(f"connection {self.id} was closed") from exc
        if not data:
            raise ConnectionError(f"server {self.endpoint_text} closed the connection")
        self._parser.feed(data)  # raises ProtocolError on a frame past a cap

    async def _wait_readable(
        self, stream: trio.SocketStream, sock: trio.socket.SocketType, deadline: float
    ) -> bool:
        """Wait until ``sock`` is readable, bounded by ``deadline`` (the pool's
        :class:`ReplyTimer` when it runs, else a cancel scope). ``False``: the timer
        stopped meanwhile (its client closing), a spurious wakeup; the caller waits again.

        :raises TimeoutError: ``deadline`` passed first.
        """
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
                    # armed: the caller waits again, under a cancel scope.
                    return False
                raise
            finally:
                timer.disarm(self)
        else:
            with trio.move_on_at(deadline) as scope:
                await trio.lowlevel.wait_readable(sock)
            if scope.cancelled_caught:
                raise TimeoutError(f"no reply from {self.endpoint_text} within the socket timeout")
        return True

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
        none, or when the handler raises: then at a bounded rate, see
        :func:`~trio_maint._sansio.loglimit.log_limited`)."""
        handler = self.push_handler
        if handler is None:
            logger.debug("connection %d: push frame with no handler: %.200r", self.id, frame)
            return
        try:
            handler(cast("Connection", self), frame)
        except Exception:
            log_limited(
                logger,
                logging.ERROR,
                "push_handler_failed",
                trio.current_time(),
                "connection %d: push handler failed on %.200r",
                self.id,
                frame,
                extra={"event": "push_handler_failed", "conn_id": self.id},
                exc_info=True,
            )

    def has_input(self) -> bool:
        """Whether bytes wait to be read (on the socket or buffered), without reading."""
        return self._readable() or self._parser.has_data()

    def _readable(self) -> bool:
        poller = self._poller
        if poller is None:
            return False
        return bool(poller.poll(0))

    def _set_fileno(self, fileno: int) -> None:
        """Watch the socket's file descriptor ``fileno`` (``-1``: none) with a poller."""
        if fileno < 0:
            self._poller = None
        else:
            self._poller = select.poll()
            self._poller.register(fileno, select.POLLIN)
