"""The client layer: :func:`~trio_maint.open_redis` and :class:`~trio_maint.Redis` (one
pool, one maintenance handler, one nursery), pipelines and transactions, and pub/sub.

May import: ``_sansio``, ``_net``, ``_maint`` and Trio.
"""
