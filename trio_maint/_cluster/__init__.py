"""The cluster layer: :func:`~trio_maint.open_redis_cluster` and
:class:`~trio_maint.RedisCluster` (one :func:`~trio_maint.open_redis` client per node,
routing by slot, redirections, slot-map refreshes, ``SMIGRATED``), cluster pipelines and
sharded pub/sub.

May import: ``_sansio``, ``_net``, ``_maint``, ``_client`` and Trio.
"""
