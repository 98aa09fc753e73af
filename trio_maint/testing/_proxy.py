"""One client connection through a :class:`~trio_maint.testing.MaintenanceSimulator`: the
forwarding in both directions and the bookkeeping that keeps injected frames and the
proxy's own answers between whole frames (:class:`ProxyConnection`), and its snapshot
(:class:`ConnectionInfo`).

The server's bytes are forwarded untouched; a :class:`~trio_maint.testing.RespScanner`
per direction finds where frames end. While nothing special goes on, both directions are
handled by the simulator's fast path (``_fastpath.py``). Client commands up to 64 KiB are parsed, so
``CLIENT MAINT_NOTIFICATIONS`` can be answered by the proxy (in order with the replies owed
for earlier pipelined commands) and the replies the backend owes can be counted.
"""

from __future__ import annotations

import socket
import struct
from collections import deque
from typing import TYPE_CHECKING, Any, Final, TypeAlias

import attrs
import hiredis
import trio

from ._counting import ReplyCounter, RequestCounter
from ._fastpath import C2S, S2C, Dispatcher, dispatcher_for, fast_wait, stop_wait
from ._scanner import PUSH, RespScanError, RespScanner

if TYPE_CHECKING:
    from ._fastpath import _Park
    from ._simulator import MaintenanceSimulator

__all__ = ["ENDPOINT_TYPES", "Address", "ConnectionInfo", "ProxyConnection"]

#: ``(host, port)``.
Address: TypeAlias = tuple[str, int]

#: The values ``moving-endpoint-type`` accepts in ``CLIENT MAINT_NOTIFICATIONS ON``.
ENDPOINT_TYPES: Final = frozenset(
    {"internal-ip", "internal-fqdn", "external-ip", "external-fqdn", "none"}
)

_CHUNK: Final = 65536
#: Client frames up to this size are parsed for interception; larger ones stream through.
_CAPTURE_LIMIT: Final = 65536
_OK: Final = b"+OK\r\n"
_NOPROTO: Final = b"-NOPROTO sorry, this protocol version is not supported\r\n"
_SYNTAX: Final = b"-ERR syntax error\r\n"
_SUBSCRIBE: Final = frozenset({b"subscribe", b"psubscribe", b"ssubscribe"})
_UNSUBSCRIBE: Final = {b"unsubscribe": b"subscribe", b"punsubscribe": b"psubscribe"}
_UNSUBSCRIBE[b"sunsubscribe"] = b"ssubscribe"
_TRANSACTION: Final = frozenset({b"multi", b"exec", b"discard", b"watch", b"unwatch"})
#: Commands whose effect on the connection is replayed when the simulator re-points it to a
#: new upstream (:meth:`ProxyConnection._follow_upstream`), keyed by (name, subcommand).
_STATE: Final = frozenset({b"hello", b"auth", b"select", b"client setname", b"client no-evict"})
#: Commands the requests' fast path leaves to the general scan (interception, reply
#: counting, state tracking).
_SPECIAL: Final = frozenset(
    {b"hello", b"auth", b"select", b"client", *_SUBSCRIBE, *_UNSUBSCRIBE, *_TRANSACTION}
)
_CLOSED_ERRORS: Final = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


@attrs.frozen
class ConnectionInfo:
    """A snapshot of one client connection through the simulator.

    :ivar id: the simulator's connection id (``int``, from 1, never reused).
    :ivar peer: the client's ``(host, port)``.
    :ivar backend: the ``(host, port)`` this connection is forwarded to.
    :ivar maint_enabled: the client sent ``CLIENT MAINT_NOTIFICATIONS ON`` (and not ``OFF``).
    :ivar endpoint_type: the ``moving-endpoint-type`` it asked for (``None``: not given).
    :ivar protocol: 3 after a forwarded ``HELLO 3``, else 2.
    :ivar bytes_from_client: bytes received from the client.
    :ivar bytes_to_client: bytes written to the client (forwarded, injected and answered).
    :ivar frames_from_server: whole top-level frames forwarded from the backend.
    :ivar injected: frames (or raw payloads) injected so far.
    :ivar opened_at: ``trio.current_time()`` when accepted (seconds, ``float``).
    """

    id: int
    peer: Address
    backend: Address
    maint_enabled: bool
    endpoint_type: str | None
    protocol: int
    bytes_from_client: int
    bytes_to_client: int
    frames_from_server: int
    injected: int
    opened_at: float


class ProxyConnection:
    """One accepted client connection, forwarded to ``backend_address``; its simulator
    (``sim``) owns it and supplies the run-time settings (stall, latency, the proxy's
    ``CLIENT MAINT_NOTIFICATIONS`` handling, notifications to replay)."""

    def __init__(
        self, sim: MaintenanceSimulator, cid: int, client: trio.SocketStream, peer: Address
    ) -> None:
        self.sim = sim
        self.id = cid
        self.client = client
        self.peer = peer
        self.backend: trio.SocketStream | None = None
        self.backend_address: Address = ("", 0)
        self.passthrough = False
        self.epoch = sim._epoch  # the simulator's upstream generation this backend belongs to
        self.pumps: trio.Nursery | None = None
        self.in_multi = False
        self.watching = False
        self.state: dict[bytes, bytes] = {}  # state commands to replay, by name (verbatim)
        self.drained: trio.Event | None = None  # set by the s2c pump once replies >= expected
        self.scope = trio.CancelScope()
        self.abort = False
        self.closed = False
        self.write_lock = trio.Lock()
        self.s2c = RespScanner()
        self.c2s = RespScanner(requests=True)
        self.c2s_pending = bytearray()
        self.c2s_streaming = False
        self.c2s_counter = RequestCounter(_SPECIAL)
        self.s2c_counter = ReplyCounter()
        self.dispatcher: Dispatcher | None = None
        self.parked: list[_Park | None] = [None, None]  # per direction, see _fastpath
        self.client_backlog = b""  # what a fast-path write to the client left
        self.scheduled: list[list[Any]] = []  # [frames still to pass, payload]
        self.synthetic: deque[tuple[int, bytes]] = deque()  # (replies to wait for, reply)
        self.expected = 0  # regular replies the backend owes for forwarded commands
        self.replies = 0  # regular (non-push) frames received from the backend
        self.resp3 = False
        self.reply_off = False
        self.skip_next = False
        self.subscriptions: dict[bytes, set[bytes]] = {k: set() for k in _SUBSCRIBE}
        self.maint_enabled = False
        self.endpoint_type: str | None = None
        self.bytes_from_client = 0
        self.bytes_to_client = 0
        self.injected = 0
        self.opened_at = trio.current_time()

    def info(self) -> ConnectionInfo:
        """A snapshot of this connection."""
        return ConnectionInfo(
            id=self.id,
            peer=self.peer,
            backend=self.backend_address,
            maint_enabled=self.maint_enabled,
            endpoint_type=self.endpoint_type,
            protocol=3 if self.resp3 else 2,
            bytes_from_client=self.bytes_from_client,
            bytes_to_client=self.bytes_to_client,
            frames_from_server=self.s2c.frames,
            injected=self.injected,
            opened_at=self.opened_at,
        )

    def close_now(self, *, abort: bool) -> None:
        """End the connection soon: a FIN, or with ``abort`` a reset (RST)."""
        self.abort = self.abort or abort
        self.scope.cancel()

    async def forward(self) -> None:
        """Dial the backend and forward both directions until either side ends or
        :meth:`close_now` is called."""
        with self.scope:
            try:
                self.backend = await trio.open_tcp_stream(*self.backend_address)
            except OSError:
                return
            self.dispatcher = dispatcher_for(self.sim._nursery)
            try:
                async with trio.open_nursery() as nursery:
                    self.pumps = nursery
                    nursery.start_soon(self._pump_client_to_server)
                    nursery.start_soon(self._pump_server_to_client, self.backend)
            finally:
                if self.dispatcher is not None:
                    self.dispatcher.release()

    def release(self) -> None:
        """After :meth:`forward`: drop what was pending and close both sockets (a reset
        when the connection was aborted)."""
        self.scheduled.clear()
        self.synthetic.clear()
        if self.abort:
            try:
                self.client.socket.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
            except OSError:
                pass
        self.client.socket.close()
        if self.backend is not None:
            self.backend.socket.close()

    def fast_ok(self) -> bool:
        """Whether the fast path may handle this connection's next chunk (no stall, no
        latency, the upstream did not move)."""
        sim = self.sim
        return (
            self.dispatcher is not None
            and not sim._stalled
            and sim._latency <= 0
            and self.epoch == sim._epoch
        )

    async def _send_client(self, payload: bytes) -> None:
        """Write to the client (under ``write_lock``), after what the fast path left."""
        if self.client_backlog:
            payload = self.client_backlog + payload
            self.client_backlog = b""
        if payload:
            await self.client.send_all(payload)

    async def _pump_server_to_client(self, backend: trio.SocketStream) -> None:
        try:
            while True:
                if self.fast_ok() and backend is self.backend:
                    kind, value = await fast_wait(self, S2C, backend)
                    if isinstance(value, BaseException):
                        raise value
                    if kind == "sent":
                        async with self.write_lock:
                            await self._send_client(b"")
                        continue
                    data = value
                else:
                    data = await backend.receive_some(_CHUNK)
                if not data:
                    break
                await self.sim._gate()
                if self.sim._latency > 0:
                    await trio.sleep(self.sim._latency)
                async with self.write_lock:
                    await self._send_client(self._server_payload(data))
                if self.drained is not None and self.replies >= self.expected:
                    self.drained.set()
        except (*_CLOSED_ERRORS, RespScanError):
            pass
        if backend is self.backend:  # not replaced by _follow_upstream
            self.scope.cancel()

    def _server_payload(self, data: bytes) -> bytes:
        """Account for server bytes; what to write to the client: them, with the injected
        frames and the proxy's answers that are due put between whole frames."""
        scanner = self.s2c
        if not self.scheduled and not self.synthetic and scanner.at_boundary:
            count = self.s2c_counter.count(data)
            if count >= 0:
                scanner.frames += count
                self.replies += count
                self.bytes_to_client += len(data)
                return data
        out = self._due_answers() if self.synthetic and scanner.at_boundary else []
        pushes = scanner.pushes
        ends = scanner.feed(data)
        if not self.scheduled and not self.synthetic and not out:
            self.replies += len(ends) - (scanner.pushes - pushes)
            self.bytes_to_client += len(data)
            return data
        start = 0
        for end, kind in ends:
            if kind != PUSH:
                self.replies += 1
            due = self._due()
            if due:
                out.append(data[start:end])
                out.extend(due)
                start = end
        out.append(data[start:])
        payload = b"".join(out)
        self.bytes_to_client += len(payload)
        return payload

    def _due(self) -> list[bytes]:
        """Payloads to write right after the frame that just ended."""
        due: list[bytes] = []
        if self.scheduled:
            keep: list[list[Any]] = []
            for item in self.scheduled:
                item[0] -= 1
                if item[0] <= 0:
                    due.append(item[1])
                    self.injected += 1
                else:
                    keep.append(item)
            self.scheduled = keep
        due.extend(self._due_answers())
        return due

    def _due_answers(self) -> list[bytes]:
        """The proxy's own answers whose turn has come (all earlier replies went out)."""
        due: list[bytes] = []
        while self.synthetic and self.synthetic[0][0] <= self.replies:
            due.append(self.synthetic.popleft()[1])
        return due

    async def _pump_client_to_server(self) -> None:
        assert self.backend is not None
        try:
            while True:
                if self.fast_ok():
                    kind, value = await fast_wait(self, C2S, self.client)
                    if isinstance(value, BaseException):
                        raise value
                    if kind == "sent":
                        if value:
                            await self.backend.send_all(value)
                        if self.synthetic:
                            await self._flush_answers()
                        continue
                    data = value
                else:
                    data = await self.client.receive_some(_CHUNK)
                if not data:
                    try:
                        await self.backend.send_eof()
                    except _CLOSED_ERRORS:
                        self.scope.cancel()
                    return
                self.bytes_from_client += len(data)
                await self.sim._gate()
                if self.epoch != self.sim._epoch:
                    await self._follow_upstream()
                forward = self._scan_client_bytes(data)
                if forward:
                    await self.backend.send_all(forward)
                if self.synthetic:
                    await self._flush_answers()
        except (*_CLOSED_ERRORS, RespScanError):
            self.scope.cancel()

    async def _flush_answers(self) -> None:
        async with self.write_lock:
            if self.closed or not self.s2c.at_boundary:
                return
            due = self._due_answers()
            if due:
                payload = b"".join(due)
                self.bytes_to_client += len(payload)
                await self._send_client(payload)

    def _scan_client_bytes(self, data: bytes) -> bytes:
        """Split client bytes into what to forward and what the proxy answers itself (the
        answers are queued in ``self.synthetic`` behind the replies owed so far)."""
        if (
            data[:1] == b"*"
            and not self.reply_off
            and not self.skip_next
            and not self.c2s_streaming
            and self.c2s.at_boundary
        ):
            whole = self._plain_commands(data)
            if whole == len(data):
                return data
            if whole:
                return data[:whole] + self._scan_general(data[whole:])
        return self._scan_general(data)

    def _plain_commands(self, data: bytes) -> int:
        """The requests' fast path, at a frame boundary: the leading whole ordinary
        commands (:class:`~trio_maint.testing._counting.RequestCounter`) are only counted.
        Returns how many bytes they took; the rest goes through the general scan."""
        taken, commands = self.c2s_counter.take(data)
        self.expected += commands
        self.c2s.frames += commands
        return taken

    def _scan_general(self, data: bytes) -> bytes:
        forward: list[bytes] = []
        start = 0
        for end, kind in self.c2s.feed(data):
            piece = data[start:end]
            start = end
            if self.c2s_streaming:
                self.c2s_streaming = False
                forward.append(piece)
                self.expected += 1
                continue
            if self.c2s_pending:
                frame = bytes(self.c2s_pending) + piece
                self.c2s_pending.clear()
            else:
                frame = piece
            args = _parse_request(frame, kind)
            reply = self._intercept(args) if args else None
            if reply is None:
                forward.append(frame)
                self._count_replies(args, frame)
                if self.passthrough and args and self._is_maint_on(args):
                    # Chained: the next simulator answers; a maintenance window open here
                    # reaches the connection right behind that answer.
                    self.synthetic.extend(
                        (self.expected, factory(self)) for factory in self.sim._remembered.values()
                    )
            else:
                self.synthetic.extend((self.expected, part) for part in reply)
        tail = data[start:]
        if tail:
            if self.c2s_streaming:
                forward.append(tail)
            else:
                self.c2s_pending += tail
                if len(self.c2s_pending) > _CAPTURE_LIMIT:
                    forward.append(bytes(self.c2s_pending))
                    self.c2s_pending.clear()
                    self.c2s_streaming = True
        return b"".join(forward)

    def _count_replies(self, args: list[bytes] | None, frame: bytes = b"") -> None:
        """Account for the regular replies the backend owes for a forwarded command (and
        track what re-pointing the connection must know: transactions, state commands)."""
        if args is None:
            self.expected += 1
            return
        if not args:
            return  # a blank inline line gets no reply
        name = args[0].lower()
        sub = args[1].lower() if len(args) > 1 else b""
        owed = 1
        if name in _TRANSACTION:
            self._track_transaction(name)
        key = name + b" " + sub if name == b"client" else name
        if key in _STATE:
            self.state.pop(key, None)
            self.state[key] = frame
        if name == b"hello" and len(args) > 1:
            self.resp3 = args[1].strip() == b"3"
        elif name in _SUBSCRIBE:
            channels = args[1:]
            self.subscriptions[name].update(channels)
            owed = 0 if self.resp3 else len(channels)
        elif name in _UNSUBSCRIBE:
            subs = self.subscriptions[_UNSUBSCRIBE[name]]
            channels = args[1:]
            owed = len(channels) if channels else max(1, len(subs))
            if channels:
                subs.difference_update(channels)
            else:
                subs.clear()
            if self.resp3:
                owed = 0
        elif name == b"client" and sub == b"reply" and len(args) > 2:
            mode = args[2].lower()
            if mode == b"on":
                self.reply_off = False
                self.skip_next = False
                self.expected += 1
                return
            if mode == b"off":
                self.reply_off = True
            elif mode == b"skip":
                self.skip_next = True
                return
            owed = 0
        if self.reply_off:
            owed = 0
        elif self.skip_next:
            self.skip_next = False
            owed = 0
        self.expected += owed

    def _track_transaction(self, name: bytes) -> None:
        if name == b"multi":
            self.in_multi = True
        elif name == b"watch":
            self.watching = True
        elif name in (b"exec", b"discard"):
            self.in_multi = self.watching = False
        elif name == b"unwatch" and not self.in_multi:
            self.watching = False

    def _is_maint_on(self, args: list[bytes]) -> bool:
        """Track ``CLIENT MAINT_NOTIFICATIONS ON|OFF`` forwarded to a chained simulator;
        true for a well-formed ``ON``."""
        if len(args) < 3 or args[0].lower() != b"client":
            return False
        if args[1].lower() != b"maint_notifications":
            return False
        sub = args[2].lower()
        if sub == b"off":
            self.maint_enabled = False
            self.endpoint_type = None
            self.sim._notify()
            return False
        if sub != b"on" or len(args) not in (3, 5):
            return False
        endpoint_type = args[4].decode("utf-8", "replace").lower() if len(args) == 5 else None
        if endpoint_type is not None and endpoint_type not in ENDPOINT_TYPES:
            return False
        self.maint_enabled = True
        self.endpoint_type = endpoint_type
        self.sim._notify()
        return True

    async def _follow_upstream(self) -> None:
        """The simulator's upstream moved (:func:`~trio_maint.testing.migrate`): at this
        command boundary, once the old backend has sent every reply it owes and no
        transaction or subscription is open, dial the new upstream, replay the connection's
        state commands (HELLO, AUTH, SELECT, CLIENT SETNAME), and forward from now on to
        it. Held meanwhile, as the server would hold commands queued behind earlier ones.
        A connection that cannot move yet keeps its backend and is retried on its next
        bytes."""
        if self.c2s_streaming or self.in_multi or self.watching:
            return
        if any(self.subscriptions.values()):
            return
        while self.replies < self.expected:
            self.drained = trio.Event()
            await self.drained.wait()
        self.drained = None
        await self.sim._switch_done()
        epoch, address = self.sim._epoch, self.sim._backend
        new = await trio.open_tcp_stream(*address)
        try:
            owed = len(self.state)
            if owed:
                await new.send_all(b"".join(self.state.values()))
            scanner = RespScanner()
            while owed > 0:
                data = await new.receive_some(_CHUNK)
                if not data:
                    raise trio.BrokenResourceError("the new upstream closed the connection")
                owed -= sum(1 for _, kind in scanner.feed(data) if kind != PUSH)
        except BaseException:
            new.socket.close()
            raise
        old, self.backend = self.backend, new
        self.backend_address = address
        self.epoch = epoch
        self.passthrough = False
        assert self.pumps is not None
        stop_wait(self, S2C)  # the old backend's fast-path wait ends
        self.pumps.start_soon(self._pump_server_to_client, new)
        if old is not None:
            await old.aclose()

    def _intercept(self, args: list[bytes]) -> list[bytes] | None:
        """The proxy's own answer to a client command, or ``None`` to forward it."""
        name = args[0].lower()
        if self.sim.resp2_only and name == b"hello" and len(args) > 1 and args[1].strip() == b"3":
            return [_NOPROTO]
        if not self.sim.maint_notifications or self.sim.resp2_only or self.passthrough:
            return None
        if name != b"client" or len(args) < 2 or args[1].lower() != b"maint_notifications":
            return None
        sub = args[2].lower() if len(args) > 2 else b""
        if sub == b"off" and len(args) == 3:
            self.maint_enabled = False
            self.endpoint_type = None
            self.sim._notify()
            return [_OK]
        if sub != b"on":
            return [_SYNTAX]
        if len(args) == 3:
            endpoint_type = None
        elif len(args) == 5 and args[3].lower() == b"moving-endpoint-type":
            endpoint_type = args[4].decode("utf-8", "replace").lower()
            if endpoint_type not in ENDPOINT_TYPES:
                return [_SYNTAX]
        else:
            return [_SYNTAX]
        self.maint_enabled = True
        self.endpoint_type = endpoint_type
        self.sim._notify()
        # Connections opened during a maintenance window get its current notification.
        return [_OK, *(factory(self) for factory in self.sim._remembered.values())]

    async def inject(self, payload: bytes, after_frames: int) -> None:
        """Write ``payload`` to the client after ``after_frames`` more server frames (and at a
        frame boundary)."""
        async with self.write_lock:
            if self.closed:
                return
            remaining = after_frames + (0 if self.s2c.at_boundary else 1)
            if remaining > 0:
                self.scheduled.append([remaining, payload])
                return
            try:
                await self._send_client(payload)
            except _CLOSED_ERRORS:
                self.close_now(abort=False)
                return
            self.injected += 1
            self.bytes_to_client += len(payload)


def _parse_request(frame: bytes, kind: int) -> list[bytes] | None:
    """The arguments of one client command frame (``[]`` for a blank inline line)."""
    if kind == -1:
        return []
    if kind == 0:
        return frame.split()
    reader = hiredis.Reader()
    reader.feed(frame)
    try:
        value = reader.gets()
    except hiredis.ProtocolError:
        return None
    if isinstance(value, list) and all(isinstance(v, bytes) for v in value):
        return value
    return None
