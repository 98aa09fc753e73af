"""A minimal raw RESP connection over Trio, for the simulator's admin work and for tests.

It is deliberately not the trio_maint client: no pool, no handshake, no retries. Replies are
parsed by hiredis (:class:`trio_maint.lowlevel.RespParser`); push frames are kept in order.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Any, Self

import trio

from .._sansio.resp import NEED_DATA, CommandArg, RespParser, encode_command, is_push

__all__ = ["RawConnection", "connect_raw"]


class RawConnection:
    """One TCP connection speaking raw RESP.

    :param stream: a connected :class:`trio.SocketStream`.
    """

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.parser = RespParser()
        #: Every push frame read by :meth:`execute`, in arrival order.
        self.pushes: list[Any] = []

    async def send(self, *commands: Sequence[CommandArg]) -> None:
        """Write one or more commands in one write (a pipeline)."""
        await self.stream.send_all(b"".join(encode_command(tuple(c)) for c in commands))

    async def send_raw(self, data: bytes) -> None:
        """Write ``data`` as is."""
        await self.stream.send_all(data)

    async def read(self) -> Any:
        """Read the next frame (a reply or a push frame).

        :raises EOFError: the server closed the connection.
        """
        while True:
            value = self.parser.next_reply()
            if value is not NEED_DATA:
                return value
            data = await self.stream.receive_some(65536)
            if not data:
                raise EOFError("connection closed by the server")
            self.parser.feed(data)

    async def read_reply(self) -> Any:
        """Read the next reply, collecting push frames into :attr:`pushes` on the way."""
        while True:
            value = await self.read()
            if is_push(value):
                self.pushes.append(value)
                continue
            return value

    async def execute(self, *args: CommandArg) -> Any:
        """Send one command and return its reply (an error reply is returned, not raised)."""
        await self.send(args)
        return await self.read_reply()

    async def aclose(self) -> None:
        """Close the socket."""
        await self.stream.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


async def connect_raw(address: tuple[str, int]) -> RawConnection:
    """Open a :class:`RawConnection` to ``(host, port)``.

    :raises OSError: the connection failed.
    """
    stream = await trio.open_tcp_stream(*address)
    return RawConnection(stream)
