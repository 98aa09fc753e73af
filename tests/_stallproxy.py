"""A tiny TCP forwarder whose forwarding can be stalled, for cancellation tests."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio


class StallProxy:
    def __init__(self) -> None:
        self.port = 0
        self.upstream_open = trio.Event()
        self.forward = True  # when False, bytes are held back in both directions
        self._resume = trio.Event()
        self.connections = 0

    def stall(self) -> None:
        self.forward = False
        self._resume = trio.Event()

    def resume(self) -> None:
        self.forward = True
        self._resume.set()

    async def _pump(self, src: trio.abc.Stream, dst: trio.abc.Stream) -> None:
        try:
            while True:
                data = await src.receive_some(65536)
                if not data:
                    break
                while not self.forward:
                    await self._resume.wait()
                await dst.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async def _handle(self, client: trio.SocketStream, host: str, port: int) -> None:
        self.connections += 1
        try:
            server = await trio.open_tcp_stream(host, port)
        except OSError:
            await client.aclose()
            return
        async with client, server, trio.open_nursery() as nursery:
            nursery.start_soon(self._pump, client, server)
            await self._pump(server, client)
            nursery.cancel_scope.cancel()


@asynccontextmanager
async def open_stall_proxy(host: str, port: int) -> AsyncIterator[StallProxy]:
    proxy = StallProxy()
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(
                trio.serve_tcp, lambda s: proxy._handle(s, host, port), 0, host="127.0.0.1"
            )
        )
        proxy.port = listeners[0].socket.getsockname()[1]
        try:
            yield proxy
        finally:
            nursery.cancel_scope.cancel()


@asynccontextmanager
async def open_silent_server() -> AsyncIterator[int]:
    """A listener that accepts connections and never answers (a stalled handshake)."""
    held: list[trio.SocketStream] = []

    async def handler(stream: trio.SocketStream) -> None:
        held.append(stream)
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1")
        )
        try:
            yield listeners[0].socket.getsockname()[1]
        finally:
            nursery.cancel_scope.cancel()


@asynccontextmanager
async def open_scripted_server(reply: bytes) -> AsyncIterator[int]:
    """A listener that answers the first bytes it receives with ``reply``."""

    async def handler(stream: trio.SocketStream) -> None:
        async with stream:
            try:
                await stream.receive_some(65536)
                await stream.send_all(reply)
                await trio.sleep_forever()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1")
        )
        try:
            yield listeners[0].socket.getsockname()[1]
        finally:
            nursery.cancel_scope.cancel()
