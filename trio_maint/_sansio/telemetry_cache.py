"""The client-side cache's metrics (sans-IO: no Trio, no OpenTelemetry, no
prometheus_client): how a cache's :class:`~trio_maint.CacheStats` becomes the points of
:data:`~trio_maint._sansio.telemetry.CACHE_METRICS`.

Everything is read when the exporter collects (observable counters and gauges): a cache
counts in its own store anyway, so the command path pays nothing for being exported. The
names are redis-py's (``redis.observability``: ``redis.client.csc.requests``,
``redis.client.csc.items``, ``redis.client.csc.evictions``) where it has one;
docs/observability.md lists them and the mapping.

* ``redis.client.csc.requests``: ``result="hit"`` is ``hits``; ``result="miss"`` is
  ``misses + bypassed`` (every cacheable read not served by the cache, as redis-py counts
  a miss); ``redis.client.csc.bypassed`` is the ``bypassed`` part alone.
* ``redis.client.csc.items`` / ``redis.client.csc.memory.usage``: ``entries`` / ``bytes``.
* ``redis.client.csc.evictions`` by ``redis.client.csc.reason``: ``full`` is
  ``evictions`` (``max_size`` or ``max_bytes``), ``ttl`` is ``expirations``,
  ``invalidation`` is ``invalidations``, ``flush`` is ``flushed`` (entries removed by
  flushes).
* ``redis.client.csc.flushes`` by ``redis.client.csc.flush.cause``: ``flushes``, each cause
  of :data:`FLUSH_CAUSES` as itself, any other as :data:`OTHER_CAUSE` (bounded).

Points with the same attributes (two clients of the same ``host:port/db`` exported
together) are summed, so that no series is reported twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import attrs

from .cache import CacheStats
from .telemetry import (
    CSC_BYPASSED,
    CSC_EVICTIONS,
    CSC_FLUSH_CAUSE,
    CSC_FLUSHES,
    CSC_ITEMS,
    CSC_MEMORY,
    CSC_REASON,
    CSC_REQUESTS,
    CSC_RESULT,
    POOL_NAME,
    Attributes,
    AttrValue,
    MetricSpec,
)

__all__ = [
    "EVICTION_REASONS",
    "FLUSH_CAUSES",
    "OTHER_CAUSE",
    "CacheSnapshot",
    "cache_attributes",
    "cache_observations",
    "flush_cause",
]

#: The flush causes the cache records (``CacheStats.flushes``' keys; docs/caching.md),
#: each a value of ``redis.client.csc.flush.cause``.
FLUSH_CAUSES: Final = frozenset(
    {
        "clear",
        "disabled",
        "failed_over",
        "failing_over",
        "handoff",
        "malformed_invalidation",
        "migrated",
        "migrating",
        "moving",
        "own_write",
        "replaced",
        "server_changed",
        "server_flush",
        "slot_moved",
        "tracking_lost",
        "window_backstop",
    }
)
#: ``redis.client.csc.flush.cause`` of a cause not in :data:`FLUSH_CAUSES` (``str``).
OTHER_CAUSE: Final = "other"
#: The values of ``redis.client.csc.reason``, in the order they are reported.
EVICTION_REASONS: Final = ("full", "ttl", "invalidation", "flush")


def flush_cause(cause: str) -> str:
    """``redis.client.csc.flush.cause`` of ``cause``: itself when it is one of
    :data:`FLUSH_CAUSES`, else :data:`OTHER_CAUSE`."""
    return cause if cause in FLUSH_CAUSES else OTHER_CAUSE


def cache_attributes(server: Attributes, pool: str) -> Attributes:
    """The attributes of one cache's points: ``server`` (``db.system.name``,
    ``server.address``, ``server.port``: the client's, or the cluster node's) and
    ``db.client.connection.pool.name`` ``pool`` (as redis-py labels
    ``redis.client.csc.items``)."""
    return {**server, POOL_NAME: pool}


@attrs.frozen
class CacheSnapshot:
    """One cache read at collection time.

    :ivar attributes: its :func:`cache_attributes`.
    :ivar stats: its :class:`~trio_maint.CacheStats` (``r.cache.stats()``).
    """

    attributes: Attributes
    stats: CacheStats


_Key = tuple[MetricSpec, tuple[tuple[str, AttrValue], ...]]


def _points(snapshot: CacheSnapshot) -> list[tuple[MetricSpec, int, Attributes]]:
    base = snapshot.attributes
    stats = snapshot.stats
    found: list[tuple[MetricSpec, int, Attributes]] = [
        (CSC_REQUESTS, stats.hits, {**base, CSC_RESULT: "hit"}),
        (CSC_REQUESTS, stats.misses + stats.bypassed, {**base, CSC_RESULT: "miss"}),
        (CSC_BYPASSED, stats.bypassed, base),
        (CSC_ITEMS, stats.entries, base),
        (CSC_MEMORY, stats.bytes, base),
    ]
    removed = (stats.evictions, stats.expirations, stats.invalidations, stats.flushed)
    for reason, value in zip(EVICTION_REASONS, removed, strict=True):
        found.append((CSC_EVICTIONS, value, {**base, CSC_REASON: reason}))
    for cause, count in sorted(stats.flushes.items()):
        found.append((CSC_FLUSHES, count, {**base, CSC_FLUSH_CAUSE: flush_cause(cause)}))
    return found


def cache_observations(
    snapshots: Iterable[CacheSnapshot],
) -> list[tuple[MetricSpec, int, Attributes]]:
    """The points of :data:`~trio_maint._sansio.telemetry.CACHE_METRICS` for
    ``snapshots``: ``(metric, value, attributes)``, the mapping of the module doc; the
    values of equal attributes summed (one point per series). Flush causes appear once
    counted; every other series always (zero included)."""
    totals: dict[_Key, list[int]] = {}
    attributes: dict[_Key, Attributes] = {}
    for snapshot in snapshots:
        for spec, value, attrs_ in _points(snapshot):
            key = (spec, tuple(sorted(attrs_.items())))
            total = totals.get(key)
            if total is None:
                totals[key] = [value]
                attributes[key] = attrs_
            else:
                total[0] += value
    return [(key[0], total[0], attributes[key]) for key, total in totals.items()]
