"""``trio-maint monitor URL``: print every maintenance notification an endpoint sends."""

from __future__ import annotations

import math
import signal
import threading
from typing import TextIO

import trio

from .. import (
    AuthenticationError,
    ClientOptions,
    EventsDropped,
    HandoffFailed,
    HandoffQueued,
    HandoffSucceeded,
    MaintConfig,
    MaintenanceDisabled,
    MaintenanceEvent,
    MaintMode,
    MalformedNotification,
    Moving,
    NotificationReceived,
    RedisError,
    open_redis,
)
from .render import timestamp

__all__ = ["MonitorError", "run_monitor"]


class MonitorError(Exception):
    """The monitor cannot run: ``usage`` is ``True`` for a bad argument (exit 2), else the
    endpoint could not be reached (exit 1)."""

    def __init__(self, message: str, *, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


async def _stop_on_sigint(done: trio.Event) -> None:
    """Ctrl-C ends the monitor cleanly (only possible on the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        async for _ in signals:
            done.set()
            return


def describe(event: MaintenanceEvent, relaxed_timeout: float) -> str | None:
    """One line for an event (``None`` for events not worth a line)."""
    if isinstance(event, NotificationReceived):
        n = event.notification
        seq = getattr(n, "seq_id", None)
        head = f"{n.NAME} seq={seq}" if seq is not None else n.NAME
        if isinstance(n, Moving):
            if n.endpoint is None:
                what = (
                    f"{head} time={n.time:g}s endpoint=null -> reconnecting to the same "
                    f"address in {n.time / 2:g} s"
                )
            else:
                what = f"{head} time={n.time:g}s endpoint={n.endpoint} -> handing off to it"
        elif n.NAME in ("MIGRATING", "FAILING_OVER", "SMIGRATING"):
            what = f"{head} -> timeouts relaxed to at least {relaxed_timeout:g} s"
        else:
            what = f"{head} -> timeouts restored"
        if event.error is not None:
            what += f" (handling failed: {event.error})"
        return f"conn {event.conn_id}: {what}"
    if isinstance(event, HandoffQueued):
        return f"conn {event.conn_id}: handoff to {event.endpoint} queued"
    if isinstance(event, HandoffSucceeded):
        return (
            f"conn {event.conn_id}: handoff to {event.endpoint} done in "
            f"{event.latency * 1e3:.1f} ms"
        )
    if isinstance(event, HandoffFailed):
        return f"conn {event.conn_id}: handoff to {event.endpoint} FAILED: {event.error}"
    if isinstance(event, MalformedNotification):
        return f"conn {event.conn_id}: malformed notification ignored: {event.reason}"
    if isinstance(event, EventsDropped):
        return f"({event.count} events dropped)"
    return None


async def run_monitor(
    url: str,
    out: TextIO,
    interval: float = 0.5,
    duration: float | None = None,
    count: int | None = None,
    endpoint_type: str = "auto",
    password: str | None = None,
) -> int:
    """Monitor ``url`` and return the exit status (0).

    Opts in with ``CLIENT MAINT_NOTIFICATIONS ON`` (mode ``auto``) and sends ``PING`` every
    ``interval`` seconds so the connection keeps reading; prints each notification and
    handoff with a UTC timestamp. On a server that refuses the opt-in, says so and
    returns 0.

    :param duration: stop after this many seconds (``float``; ``None`` = until cancelled).
    :param count: stop after this many notifications (``None`` = no limit).
    :param password: the password when ``url`` has none (``REDISCLI_AUTH``'s, which unlike
        a URL on the command line does not show in ``ps``); never printed.
    :raises MonitorError: a bad URL or endpoint type (``usage``), or the server could
        not be reached.
    """
    try:
        config = MaintConfig(mode="auto", endpoint_type=endpoint_type)
        options = ClientOptions.from_url(url, pool_size=1, maintenance=config)
        if options.password is None and password:
            options = ClientOptions.from_url(
                url, pool_size=1, maintenance=config, password=password
            )
    except (ValueError, TypeError) as exc:
        raise MonitorError(str(exc), usage=True) from None
    seen = 0
    done = trio.Event()

    def emit(text: str) -> None:
        print(f"{timestamp()} {text}", file=out, flush=True)

    async with open_redis(options) as r:
        handler = r.maintenance
        assert handler is not None
        relaxed = handler.config.relaxed_timeout
        events = handler.events(max_buffer=1024)

        async def consume() -> None:
            nonlocal seen
            async for event in events:
                line = describe(event, relaxed)
                if line is not None:
                    emit(line)
                if isinstance(event, NotificationReceived):
                    seen += 1
                    if count is not None and seen >= count:
                        done.set()

        try:
            with trio.fail_after((options.connect_timeout or 5.0) + 5.0):
                await r.ping()
        except AuthenticationError as exc:
            raise MonitorError(f"{options.address_text} refused the credentials: {exc}") from None
        except (RedisError, OSError, trio.TooSlowError) as exc:
            raise MonitorError(f"cannot reach {options.address_text}: {exc}") from None
        if handler.mode is MaintMode.DISABLED:
            reason = ""
            with trio.move_on_after(0.1):
                async for event in events:
                    if isinstance(event, MaintenanceDisabled):
                        reason = f" ({event.reply})"
                        break
            print(
                f"{options.address_text} does not support maintenance notifications: it "
                f"refused CLIENT MAINT_NOTIFICATIONS{reason}. Nothing to monitor.",
                file=out,
                flush=True,
            )
            await events.aclose()
            return 0
        emit(
            f"monitoring {options.address_text} (moving-endpoint-type "
            f"{handler.endpoint_type.value}); waiting for maintenance notifications, "
            "Ctrl-C to stop"
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(consume)
            nursery.start_soon(_stop_on_sigint, done)
            with trio.move_on_after(math.inf if duration is None else duration):
                while not done.is_set():
                    try:
                        await r.ping()
                    except RedisError as exc:
                        emit(f"PING failed: {exc!r}")
                    with trio.move_on_after(interval):
                        await done.wait()
            # let the events of the last PING through
            await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
        await events.aclose()
    emit(f"stopped after {seen} notification(s)")
    return 0
