"""The maintenance layer: what the client does about maintenance notifications.

The :class:`~trio_maint._maint.handler.MaintenanceHandler` (``r.maintenance``) opts
connections in, parses their push frames, runs the notification hooks, relaxes timeouts,
reacts to MOVING (:mod:`~trio_maint._maint.moving`) and, as a pool hook, hands marked
connections to the :class:`~trio_maint._maint.workers.HandoffManager`, whose workers move
them to the new endpoint. Events and the state snapshot are in
:mod:`~trio_maint._maint.events`, the hooks in :mod:`~trio_maint._maint.hooks`.

May import: ``_sansio``, ``_net`` and Trio.
"""
