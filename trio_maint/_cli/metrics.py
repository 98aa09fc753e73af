"""``trio-maint demo --metrics-port N``: the demo client's metrics served for Prometheus
while the demo runs, through the project's API (:func:`trio_maint.prometheus.instrument`
on a registry of the demo's own, served by prometheus_client's HTTP server).

The server is started before the Trio run and shut down after it (:func:`serve_metrics`):
its thread, the threads of the requests it was serving and its socket are all gone when
the demo returns. prometheus_client is imported only when the option is given.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import sys
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import attrs

from .render import UsageError
from .report import DemoError

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

__all__ = ["REQUEST_TIMEOUT", "MetricsServer", "instrumented", "metrics_hint", "serve_metrics"]

logger = logging.getLogger("trio_maint.cli")

#: Seconds a scrape's connection may stay silent before it is dropped (``float``).
REQUEST_TIMEOUT = 5.0


def metrics_hint() -> str:
    """How to install prometheus-client for the Python running this command."""
    return (
        "--metrics-port needs prometheus-client (extra 'prometheus'): "
        f"{sys.executable} -m pip install prometheus-client (or, from a checkout: "
        ".venv/bin/pip install -e '.[prometheus]')"
    )


@attrs.frozen
class MetricsServer:
    """A running metrics endpoint.

    :ivar registry: the ``prometheus_client.CollectorRegistry`` it serves (the demo
        instruments its client on it).
    :ivar url: where to scrape it, ``http://127.0.0.1:PORT/metrics`` (``str``).
    """

    registry: CollectorRegistry
    url: str


@contextlib.contextmanager
def serve_metrics(port: int) -> Iterator[MetricsServer]:
    """Serve a new registry on ``127.0.0.1:port`` (0: a free port) until the block
    ends; then shut the server down, wait for the requests under way and close its
    socket.

    :raises UsageError: prometheus-client is not installed.
    :raises DemoError: the port is in use, or cannot be listened on.
    """
    try:
        import prometheus_client

        import trio_maint.prometheus  # noqa: F401  (the extra's other half)
    except ImportError:
        raise UsageError(metrics_hint()) from None
    registry = prometheus_client.CollectorRegistry()
    try:
        started = prometheus_client.start_http_server(port, addr="127.0.0.1", registry=registry)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise DemoError(f"port {port} is in use (choose another with --metrics-port)") from None
        raise DemoError(f"cannot serve metrics on port {port}: {exc.strerror or exc}") from None
    httpd: Any = started[0]  # a ThreadingWSGIServer (typed as its base)
    thread = started[1]
    # server_close() then joins the request threads too (prometheus_client makes them
    # daemons, which older Pythons do not join),
    # each bounded: a connection that sends nothing is dropped after REQUEST_TIMEOUT.
    httpd.daemon_threads = False
    httpd.block_on_close = True
    handler = httpd.RequestHandlerClass
    httpd.RequestHandlerClass = type("TimedHandler", (handler,), {"timeout": REQUEST_TIMEOUT})
    httpd.handle_error = _request_failed  # a log record, not a traceback on stderr
    try:
        yield MetricsServer(registry, f"http://127.0.0.1:{httpd.server_port}/metrics")
    finally:
        httpd.shutdown()  # serve_forever returns (within its 0.5 s poll)
        httpd.server_close()
        thread.join()


def _request_failed(request: object, client_address: tuple[str, int]) -> None:
    """A scrape that failed (timed out, reset): logged at DEBUG."""
    logger.debug("metrics request from %s:%s failed", *client_address[:2], exc_info=True)


@contextlib.asynccontextmanager
async def instrumented(client: Any, registry: CollectorRegistry | None) -> AsyncIterator[None]:
    """Record ``client``'s metrics on ``registry`` inside the block
    (``trio_maint.prometheus.instrument(client, registry=registry)``); nothing when
    ``registry`` is ``None``. Inside the Trio run, on the open client."""
    if registry is None:
        yield
        return
    from ..prometheus import instrument

    with instrument(client, registry=registry):
        yield
