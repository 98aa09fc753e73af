"""The network layer: everything that awaits I/O on a single Redis endpoint.

A :class:`~trio_maint._net.connection.Connection` (dial, RESP3 handshake, commands and
pipelines under deadlines, push-frame dispatch; its byte level is
:class:`~trio_maint._net.wire.StreamIO`), the :class:`~trio_maint._net.timer.ReplyTimer`
that bounds reply waits, the :class:`~trio_maint._net.pool.ConnectionPool` with its
:class:`~trio_maint._net.pool.PoolHook`, and the one helper that unwraps exception
groups (:mod:`trio_maint._net.groups`). It knows nothing of maintenance: a connection's
push frames go to a push handler and its timeouts may come from a timeout policy.

May import: ``_sansio`` and Trio.
"""
