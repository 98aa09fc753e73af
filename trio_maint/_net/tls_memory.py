"""TLS that can be read without blocking: :class:`MemoryTLSStream`.

A client-side cache must read, synchronously, everything its tracking connection holds
before it serves a value (docs/caching.md, rule 1). Over :class:`trio.SSLStream` that
cannot be done: bytes are taken from the socket by a task that then reaches a schedule
point before it decrypts and returns them (``SocketStream.receive_some``), and the
:class:`ssl.SSLObject` and its buffers are private to trio. This stream keeps the TLS
state itself, in an :class:`ssl.SSLObject` over two :class:`ssl.MemoryBIO` on the
connection's plain socket, and offers, besides the :class:`trio.abc.Stream` methods the
handshake of a :class:`~trio_maint.lowlevel.Connection` uses, synchronous steps:

* :meth:`pull_nowait`: what the socket holds now into the incoming BIO (one ``read()``);
* :meth:`decrypt_nowait`: every whole record in the incoming BIO, decrypted (until the
  ``SSLObject`` wants more bytes: what is left is part of a record that has not arrived);
* :meth:`send_nowait` / :meth:`flush_nowait`: encrypt, and write what the socket takes.

Bytes are never held anywhere else: they are in the kernel's buffer, in the incoming BIO
(at most one partial record once :meth:`decrypt_nowait` has run), or returned. The
certificate is verified by the context's own rules against ``server_hostname``, exactly
as by :class:`trio.SSLStream` (the same context and name are given,
:func:`~trio_maint._net.stream.open_stream`). Closing closes the socket at once (no
``close_notify``), as the other streams of trio_maint are closed.
"""

from __future__ import annotations

import os
import ssl
from typing import Final

import trio

__all__ = ["RECEIVE_SIZE", "WRITE_CHUNK", "MemoryTLSStream"]

#: Bytes asked of the kernel per read in the async methods (``int``).
RECEIVE_SIZE: Final = 65536
#: Most plaintext bytes encrypted at once (``int``): the ciphertext waiting for the socket
#: is at most about this much (plus records a read produced, such as a KeyUpdate's answer).
WRITE_CHUNK: Final = 65536


def _broken(what: str, exc: BaseException) -> trio.BrokenResourceError:
    error = trio.BrokenResourceError(what)
    error.__cause__ = exc
    return error


class MemoryTLSStream(trio.abc.Stream):
    """TLS over ``transport``'s socket, with its state in this process's own
    :class:`ssl.SSLObject` (see the module's docstring).

    :param transport: the connected :class:`trio.SocketStream` (owned from now on).
    :param context: the :class:`ssl.SSLContext` (certificate verification, versions).
    :param server_hostname: the name the certificate must be valid for (client side).
    :param server_side: act as the server (tests).
    :ivar transport_stream: the :class:`trio.SocketStream`.
    :ivar at_eof: the peer closed the TLS session cleanly (``close_notify``).
    """

    def __init__(
        self,
        transport: trio.SocketStream,
        context: ssl.SSLContext,
        *,
        server_hostname: str | None = None,
        server_side: bool = False,
    ) -> None:
        self.transport_stream: Final = transport
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(
            self._incoming,
            self._outgoing,
            server_side=server_side,
            server_hostname=None if server_side else server_hostname,
        )
        self._backlog = bytearray()  # ciphertext the socket did not take yet
        self._settled = True  # nothing can be decrypted before more bytes arrive
        self._failure: BaseException | None = None  # raised once the plaintext is taken
        self._socket_eof = False
        self.at_eof = False

    # ------------------------------------------------------------- synchronous steps

    def _fd(self) -> int:
        fd = self.transport_stream.socket.fileno()
        if fd < 0:
            raise trio.ClosedResourceError("the TLS stream was closed")
        return fd

    def pull_nowait(self, max_bytes: int) -> int:
        """Move what the socket holds now (at most ``max_bytes``) into the incoming BIO,
        without blocking.

        :returns: the bytes read (``int``; 0 when nothing was waiting, or at the end).
        :raises trio.BrokenResourceError: the read failed.
        :raises trio.ClosedResourceError: the stream was closed.
        """
        if self._socket_eof:
            return 0
        try:
            data = os.read(self._fd(), max_bytes)
        except BlockingIOError:
            return 0
        except OSError as exc:
            raise _broken("reading the TLS socket failed", exc) from exc
        self._settled = False
        if not data:
            self._socket_eof = True
            self._incoming.write_eof()
            return 0
        self._incoming.write(data)
        return len(data)

    def decrypt_nowait(self, max_bytes: int | None = None) -> bytes:
        """The plaintext of the whole records in the incoming BIO (at most ``max_bytes``;
        ``None``: all of it), without blocking. Records that carry no data (session
        tickets, key updates) are handled on the way; their answers are queued for
        :meth:`flush_nowait`.

        :returns: the plaintext (``b""``: nothing until more bytes arrive, or
            :attr:`at_eof`).
        :raises trio.BrokenResourceError: the bytes are not valid TLS, or the connection
            ended without ``close_notify`` (mid-record, say); raised once the plaintext
            before the fault has been returned.
        """
        if self._settled:
            return b""
        chunks: list[bytes] = []
        taken = 0
        try:
            while max_bytes is None or taken < max_bytes:
                size = RECEIVE_SIZE if max_bytes is None else min(RECEIVE_SIZE, max_bytes - taken)
                chunk = self._ssl.read(size)
                if not chunk:
                    self.at_eof = True
                    self._settled = True
                    break
                chunks.append(chunk)
                taken += len(chunk)
        except ssl.SSLWantReadError:
            self._settled = True
        except ssl.SSLZeroReturnError:
            self.at_eof = True
            self._settled = True
        except ssl.SSLError as exc:
            self._failure = _broken("TLS error", exc)
        finally:
            self._take_output()
        if self._failure is not None:
            if not chunks:
                raise self._failure
            self._settled = False  # raise it at the next call
        return b"".join(chunks)

    def _take_output(self) -> None:
        if self._outgoing.pending:
            self._backlog += self._outgoing.read()

    @property
    def output_pending(self) -> bool:
        """Whether ciphertext waits for the socket (``bool``)."""
        return bool(self._backlog) or self._outgoing.pending > 0

    def flush_nowait(self) -> bool:
        """Write the ciphertext waiting, as far as the socket takes it now.

        :returns: whether none is left (``bool``).
        :raises trio.BrokenResourceError: the write failed.
        :raises trio.ClosedResourceError: the stream was closed.
        """
        self._take_output()
        backlog = self._backlog
        while backlog:
            try:
                written = os.write(self._fd(), backlog)
            except BlockingIOError:
                return False
            except OSError as exc:
                raise _broken("writing the TLS socket failed", exc) from exc
            del backlog[:written]
        return True

    def send_nowait(self, data: bytes | bytearray | memoryview) -> int:
        """Encrypt the start of ``data`` (at most :data:`WRITE_CHUNK` bytes) and write what
        the socket takes now; nothing while earlier ciphertext still waits for it. What
        was accepted is this stream's to deliver (:meth:`flush_nowait`, in order).

        :returns: the plaintext bytes accepted (``int``, possibly 0).
        :raises trio.BrokenResourceError: the write failed, or TLS refused it.
        :raises trio.ClosedResourceError: the stream was closed.
        """
        if not self.flush_nowait() or not data:
            return 0
        chunk = bytes(memoryview(data)[:WRITE_CHUNK])  # (no export left on ``data``)
        try:
            accepted = self._ssl.write(chunk)
        except ssl.SSLError as exc:  # a renegotiation (TLS 1.2), which Redis never asks
            raise _broken("TLS refused the write", exc) from exc
        self.flush_nowait()
        return accepted

    # ------------------------------------------------------------------- trio.abc.Stream

    async def _flush(self) -> None:
        while not self.flush_nowait():
            await trio.lowlevel.wait_writable(self.transport_stream.socket)

    async def do_handshake(self) -> None:
        """The TLS handshake (the certificate checked as the context says).

        :raises trio.BrokenResourceError: it failed (the cause says why).
        """
        await trio.lowlevel.checkpoint()
        while True:
            try:
                self._ssl.do_handshake()
                break
            except ssl.SSLWantReadError:
                pass
            except (ssl.SSLError, ssl.CertificateError) as exc:
                raise _broken("TLS handshake failed", exc) from exc
            await self._flush()
            await trio.lowlevel.wait_readable(self.transport_stream.socket)
            self.pull_nowait(RECEIVE_SIZE)
        await self._flush()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Encrypt and write all of ``data``."""
        await trio.lowlevel.checkpoint_if_cancelled()
        view = memoryview(data)
        waited = False
        while True:
            accepted = self.send_nowait(view)
            view = view[accepted:]
            if not view and not self.output_pending:
                break
            waited = True
            await trio.lowlevel.wait_writable(self.transport_stream.socket)
        if not waited:
            await trio.lowlevel.cancel_shielded_checkpoint()

    async def wait_send_all_might_not_block(self) -> None:
        await self._flush()
        await trio.lowlevel.wait_writable(self.transport_stream.socket)

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """Up to about ``max_bytes`` of plaintext; ``b""`` after the peer's
        ``close_notify``. Cancelled only while waiting for the socket (nothing is lost).

        :raises trio.BrokenResourceError: as :meth:`decrypt_nowait`.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        limit = RECEIVE_SIZE if max_bytes is None else max_bytes
        while True:
            data = self.decrypt_nowait(limit)
            if data or self.at_eof:
                break
            await trio.lowlevel.wait_readable(self.transport_stream.socket)
            self.pull_nowait(RECEIVE_SIZE)
        await trio.lowlevel.cancel_shielded_checkpoint()
        return data

    async def aclose(self) -> None:
        """Close the socket at once (no ``close_notify``)."""
        await self.transport_stream.aclose()
