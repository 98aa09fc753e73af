"""The maintenance layer: the thin Trio shell around the sans-IO
:class:`~trio_maint._sansio.maint.MaintenanceMachine`.

The :class:`~trio_maint._maint.handler.MaintenanceHandler` (``r.maintenance``) opts
connections in, parses their push frames, runs the notification hooks, feeds the machine
(notifications, the pool's acquire/release/remove, handoff outcomes, its timer,
``READONLY`` replies) and carries out its actions on the pool, the
:class:`~trio_maint._maint.workers.HandoffManager` (whose workers run the handoffs) and
the pub/sub links (:mod:`~trio_maint._maint.link`). Event streams and the state snapshot
are in :mod:`~trio_maint._maint.events`, the hooks in :mod:`~trio_maint._maint.hooks`.

May import: ``_sansio``, ``_net`` and Trio.
"""
