"""A loopback TCP forwarder that makes some bytes late, as a slow network path would: the
replies and invalidations of a client-side cache's tracking connection (the connection
whose client sent ``CLIENT TRACKING``), and the requests of the other connections (the
pool's). Bytes keep their order in each direction."""

from __future__ import annotations

import math
from collections.abc import Callable

import trio


class DelayProxy:
    """Forward ``127.0.0.1:port`` to ``127.0.0.1:target_port``. The delays may be
    changed while it runs (they apply to the bytes read from then on).

    :param tracking_down: seconds added to what the server sends on the tracking
        connection (from the chunk holding ``CLIENT TRACKING`` on).
    :param pooled_up: seconds added to what a client sends on the other connections.
    """

    def __init__(
        self, target_port: int, *, tracking_down: float = 0.0, pooled_up: float = 0.0
    ) -> None:
        self.target_port = target_port
        self.tracking_down = tracking_down
        self.pooled_up = pooled_up
        self.port = 0
        self._tracking: list[trio.SocketStream] = []

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            task_status.started()
            await trio.serve_listeners(self._handle, listeners, handler_nursery=nursery)

    async def _handle(self, client: trio.SocketStream) -> None:
        server = await trio.open_tcp_stream("127.0.0.1", self.target_port)
        tracking = False

        def up_delay(data: bytes) -> float:
            nonlocal tracking
            if b"TRACKING" in data.upper() and not tracking:
                tracking = True
                self._tracking.append(client)
            return 0.0 if tracking else self.pooled_up

        def down_delay(data: bytes) -> float:
            return self.tracking_down if tracking else 0.0

        async with client, server, trio.open_nursery() as nursery:
            nursery.start_soon(self._pipe, client, server, up_delay, nursery.cancel_scope)
            nursery.start_soon(self._pipe, server, client, down_delay, nursery.cancel_scope)

    async def drop_tracking(self) -> None:
        """Close the client side of every tracking connection (a reset the client sees at
        once)."""
        tracking, self._tracking = self._tracking, []
        for stream in tracking:
            await stream.aclose()

    @staticmethod
    async def _pipe(
        src: trio.SocketStream,
        dst: trio.SocketStream,
        delay: Callable[[bytes], float],
        scope: trio.CancelScope,
    ) -> None:
        send, receive = trio.open_memory_channel[tuple[float, bytes]](math.inf)

        async def deliver() -> None:
            async for due, data in receive:
                await trio.sleep_until(due)
                await dst.send_all(data)

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(deliver)
                async with send:
                    async for data in src:
                        chunk = bytes(data)
                        send.send_nowait((trio.current_time() + delay(chunk), chunk))
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            scope.cancel()  # one side is gone: close both
