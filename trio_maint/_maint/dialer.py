"""How the maintenance shell makes connections: :class:`Dialer`.

New pool and pub/sub connections go to the machine's dial target (where the latest MOVING
sent the client), falling back to the configured endpoint while the target's circuit
breaker refuses or when the target cannot be reached; a handoff dials its target itself,
so that a failure to reach it (retried) is told apart from a failed handshake (not
retried). Every connection gets the client's push handler (or the one given) and, when
maintenance is on, the opt-in handshake hook.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from typing import Final

import attrs
import trio

from .._net.connection import Connection, HandshakeHook, PushHandler
from .._net.stream import open_stream
from .._sansio.endpoint import Endpoint
from .._sansio.errors import (
    ConnectionError,
    HandoffDialError,
)
from .._sansio.loglimit import log_limited
from .._sansio.maint import MaintenanceMachine
from .._sansio.options import ClientOptions
from .._sansio.trust import TargetPolicy

__all__ = ["Dialer"]

logger = logging.getLogger("trio_maint.maintenance")

#: Client options kept for endpoints other than the configured one (``int``), least
#: recently used dropped first.
OPTIONS_CACHE: Final = 32


class Dialer:
    """Connections for one client.

    :param options: the client's :class:`~trio_maint.ClientOptions`.
    :param machine: the client's :class:`~trio_maint.lowlevel.MaintenanceMachine`, asked
        for the dial target and told how dials to it went; ``None`` when maintenance is
        disabled (then every dial goes to the configured endpoint).
    :param configured: the configured :class:`~trio_maint.Endpoint`.
    :param push_handler: the default push handler of new connections, or ``None``.
    :param handshake_hook: run after ``HELLO 3`` on every new stream, or ``None``.
    """

    def __init__(
        self,
        options: ClientOptions,
        machine: MaintenanceMachine | None,
        configured: Endpoint,
        *,
        push_handler: PushHandler | None,
        handshake_hook: HandshakeHook | None,
        policy: TargetPolicy | None = None,
    ) -> None:
        self.options: Final = options
        self.machine: Final = machine
        self.configured: Final = configured
        self.push_handler = push_handler
        self.handshake_hook = handshake_hook
        self.policy = policy
        self._options: OrderedDict[Endpoint, ClientOptions] = OrderedDict()

    def options_for(self, endpoint: Endpoint) -> ClientOptions:
        """The client's options with ``endpoint``'s host and port (cached). Over TLS the
        certificate is still checked against the configured name (a MOVING cannot send
        the client to any host holding a certificate for its own name), unless the
        user's allow-list or callable trusts ``endpoint`` (docs/security.md)."""
        if endpoint == self.configured:
            return self.options
        opts = self._options.get(endpoint)
        if opts is None:
            tls_name = self.options.ssl_server_hostname
            if self.options.ssl and tls_name is None:
                trusted = self.policy is not None and self.policy.explicitly_trusted(endpoint)
                tls_name = None if trusted else self.options.host
            opts = attrs.evolve(
                self.options,
                host=endpoint.host,
                port=endpoint.port,
                unix_path=None,
                ssl_server_hostname=tls_name,
            )
            self._options[endpoint] = opts
            while len(self._options) > OPTIONS_CACHE:
                self._options.popitem(last=False)
        else:
            self._options.move_to_end(endpoint)
        return opts

    def new_connection(
        self, endpoint: Endpoint, push: PushHandler | None = None, *, memory_tls: bool = False
    ) -> Connection:
        """A new, unconnected :class:`~trio_maint.lowlevel.Connection` to ``endpoint``
        (``memory_tls``: see :func:`~trio_maint._net.stream.open_stream`)."""
        return Connection(
            self.options_for(endpoint),
            push_handler=push or self.push_handler,
            handshake_hook=self.handshake_hook,
            memory_tls=memory_tls,
        )

    async def connect(
        self, push: PushHandler | None = None, *, memory_tls: bool = False
    ) -> tuple[Connection, Endpoint, bool]:
        """A connected, handshaken connection to the dial target, or to the configured
        endpoint when the target's breaker refuses or the target cannot be reached:
        ``(conn, endpoint, fell_back)``.

        :raises ConnectionError, TimeoutError, AuthenticationError: the configured
            endpoint could not be reached either (or refused the credentials).
        """
        machine = self.machine
        target = machine.dial_target(trio.current_time()) if machine is not None else None
        fell_back = False
        if machine is not None and target is not None and target != self.configured:
            conn = self.new_connection(target, push, memory_tls=memory_tls)
            try:
                await conn.connect()
            except Exception as exc:
                # Whatever the target does wrong (unreachable, refusing the credentials or
                # the handshake, an address that cannot be used), the MOVING costs the
                # moved connections, not the workload: fall back to the configured
                # endpoint, and let the target's breaker count it.
                machine.dial_result(target, False, trio.current_time())
                log_limited(
                    logger,
                    logging.WARNING,
                    "moving_target_unreachable",
                    trio.current_time(),
                    "the new endpoint is unreachable (%s); using %s",
                    exc,
                    self.options.address_text,
                    extra={"event": "moving_target_unreachable", "endpoint": str(target)},
                )
                fell_back = True
            except BaseException:
                machine.dial_result(target, None, trio.current_time())  # cancelled
                raise
            else:
                machine.dial_result(target, True, trio.current_time())
                return conn, target, False
        conn = self.new_connection(self.configured, push, memory_tls=memory_tls)
        await conn.connect()
        return conn, self.configured, fell_back

    async def connect_for_handoff(
        self, target: Endpoint, push: PushHandler | None = None, *, memory_tls: bool = False
    ) -> Connection:
        """A connected, handshaken connection to ``target`` for a handoff.

        :raises HandoffDialError: ``target`` could not be reached within
            ``connect_timeout`` (the handoff is retried).
        :raises RedisError: the handshake failed (it is not).
        """
        opts = self.options_for(target)
        timeout = opts.connect_timeout
        try:
            with trio.move_on_after(math.inf if timeout is None else timeout) as scope:
                stream = await open_stream(opts, unix_path=opts.unix_path, memory_tls=memory_tls)
        except ConnectionError as exc:
            raise HandoffDialError(f"cannot reach {target}: {exc}") from exc
        if scope.cancelled_caught:
            raise HandoffDialError(f"dialing {target} took longer than {timeout} s")
        new = self.new_connection(target, push, memory_tls=memory_tls)
        await new.connect(stream)  # closes the stream on failure
        return new
