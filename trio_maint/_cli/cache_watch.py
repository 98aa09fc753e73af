"""``trio-maint demo --cache``: what the demo reads off its client's caches, and the check
that no read was stale.

The check follows the guarantee of docs/caching.md as tests/test_cache_coherence.py
checks it, while the workload runs:

* every write the workload's client acknowledged is recorded (its key and version: a key
  is written by one task only, with an increasing counter, so versions are ordered);
* a barrier task runs ``await cache.sync()`` on every cache of the client all along (one
  round trip on each tracking connection: when it returns, every invalidation the server
  queued before it began has been handled);
* a read that *starts* after a barrier ended must return a version at least as new as
  every write acknowledged before that barrier *began*; an older one is a **stale
  read**. A read that returns an older version than the newest acknowledged write but
  one the last barrier did not yet cover is counted as *in flight* (allowed: the
  write's invalidation may still be on its way).

"Before" and "after" are the order of events in the Trio run (one thread: a logical
clock, so no two events tie), taken with no schedule point between the event and the
call it stands for. Every read of the workload's ``GET`` is checked, whether the cache
served it, read it through the tracking connection or sent it through the pool.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import attrs
import trio

from .. import CacheStats, ClientCache

__all__ = [
    "BARRIER_INTERVAL",
    "CacheTotals",
    "StaleReadCheck",
    "cache_document",
    "cache_rows",
    "version_of",
]

#: Seconds between two barriers (``float``).
BARRIER_INTERVAL = 0.005
#: Stale reads described in the report, at most (``int``).
MAX_EXAMPLES = 5


def version_of(value: Any) -> int:
    """The version a workload value holds: ``b"3:17"`` (task 3's 17th write) is 17;
    ``None`` (never written) is 0."""
    if value is None:
        return 0
    text = value.decode() if isinstance(value, bytes) else str(value)
    return int(text.rpartition(":")[2])


class StaleReadCheck:
    """The stale-read check of the module's doc, kept as the workload runs.

    :ivar reads: reads checked (``int``).
    :ivar stale: reads that returned a version older than a barrier had made certain
        (``int``; must be 0); ``stale_nil``: those of them that returned no value at all
        (the key read as never written).
    :ivar in_flight: reads that returned an older version than the newest acknowledged
        write, allowed because no barrier covered that write yet (``int``).
    :ivar barriers: barriers completed (``int``).
    :ivar examples: the first stale reads, described (``list[str]``).
    """

    def __init__(self) -> None:
        self._clock = 0
        self._synced = 0  # the clock when the last completed barrier began
        self._acks: dict[str, deque[tuple[int, int]]] = {}  # acks no barrier covers yet
        self._covered: dict[str, int] = {}  # the newest version a barrier covers
        self.reads = 0
        self.stale = 0
        self.stale_nil = 0
        self.in_flight = 0
        self.barriers = 0
        self.examples: list[str] = []

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _settle(self, key: str) -> deque[tuple[int, int]] | None:
        """Move ``key``'s acknowledgements that the last barrier covers into
        ``_covered``; the rest (newest last)."""
        acks = self._acks.get(key)
        if acks is not None:
            while acks and acks[0][0] < self._synced:
                self._covered[key] = acks.popleft()[1]
        return acks

    def acked(self, key: str, version: int) -> None:
        """A write of ``version`` to ``key`` was acknowledged (call it as the write's
        await returns, with no schedule point between)."""
        acks = self._settle(key)
        if acks is None:
            acks = self._acks[key] = deque()
        acks.append((self._tick(), version))

    def read_started(self, key: str) -> tuple[int, int]:
        """A read of ``key`` starts (call it right before the read's call):
        ``(required, newest)``, the version it must return at least and the newest
        acknowledged, for :meth:`read_returned`."""
        self._tick()
        acks = self._settle(key)
        required = self._covered.get(key, 0)
        newest = acks[-1][1] if acks else required
        return required, newest

    def read_returned(self, key: str, expected: tuple[int, int], value: Any, at: float) -> None:
        """The read of ``key`` begun with :meth:`read_started` returned ``value``, ``at``
        seconds from the workload's start."""
        required, newest = expected
        version = version_of(value)
        self.reads += 1
        if version < required:
            self.stale += 1
            self.stale_nil += value is None
            if len(self.examples) < MAX_EXAMPLES:
                self.examples.append(
                    f"{key} read version {version} at {at:.3f} s, version {required} "
                    "acknowledged before a completed barrier"
                )
        elif version < newest:
            self.in_flight += 1

    async def run_barriers(
        self, caches: Callable[[], Iterable[ClientCache]], stop: trio.Event
    ) -> None:
        """Run barriers until ``stop``: ``sync()`` on each of ``caches()`` in turn, then
        every acknowledgement made before the barrier began is covered."""
        while not stop.is_set():
            began = self._tick()
            for cache in list(caches()):
                await cache.sync()
            self._synced = began
            self.barriers += 1
            await trio.sleep(BARRIER_INTERVAL)

    def as_dict(self) -> dict[str, Any]:
        """The check's numbers for the report (JSON-compatible)."""
        return {
            "reads_checked": self.reads,
            "stale_reads": self.stale,
            "stale_nil": self.stale_nil,
            "in_flight": self.in_flight,
            "barriers": self.barriers,
            "stale_examples": list(self.examples),
        }


@attrs.frozen
class CacheTotals:
    """:class:`~trio_maint.CacheStats` summed over a client's caches (one, or one per
    cluster node), all ``int`` but ``flushes`` (cause -> count)."""

    caches: int = 0
    hits: int = 0
    misses: int = 0
    bypassed: int = 0
    invalidations: int = 0
    evictions: int = 0
    entries: int = 0
    flushes: dict[str, int] = attrs.field(factory=dict)

    @classmethod
    def of(cls, stats: Iterable[CacheStats]) -> CacheTotals:
        """The totals of ``stats``."""
        flushes: dict[str, int] = {}
        n = hits = misses = bypassed = invalidations = evictions = entries = 0
        for s in stats:
            n += 1
            hits += s.hits
            misses += s.misses
            bypassed += s.bypassed
            invalidations += s.invalidations
            evictions += s.evictions
            entries += s.entries
            for cause, count in s.flushes.items():
                flushes[cause] = flushes.get(cause, 0) + count
        return cls(n, hits, misses, bypassed, invalidations, evictions, entries, flushes)

    @property
    def hit_ratio(self) -> float:
        """Hits over every cacheable read (hits, misses and bypassed; ``float``)."""
        total = self.hits + self.misses + self.bypassed
        return self.hits / total if total else 0.0

    def as_dict(self) -> dict[str, Any]:
        """The totals for the report (JSON-compatible)."""
        return {
            "caches": self.caches,
            "hit_ratio": self.hit_ratio,
            "hits": self.hits,
            "misses": self.misses,
            "bypassed": self.bypassed,
            "invalidations": self.invalidations,
            "evictions": self.evictions,
            "entries": self.entries,
            "flushes": dict(sorted(self.flushes.items())),
        }


def cache_rows(cache: dict[str, Any]) -> list[tuple[str, str]]:
    """``(label, text)`` rows of a report's ``cache`` document (:meth:`CacheTotals.as_dict`
    and :meth:`StaleReadCheck.as_dict` merged), for the live view and the report."""
    flushes = ", ".join(f"{cause} {n:,}" for cause, n in cache["flushes"].items()) or "none"
    stale = cache["stale_reads"]
    rows = [
        (
            "cache",
            f"hit ratio {cache['hit_ratio']:.1%}: {cache['hits']:,} hits, {cache['misses']:,} "
            f"misses, {cache['bypassed']:,} bypassed; {cache['invalidations']:,} "
            f"invalidations; flushes: {flushes}",
        ),
        (
            "stale reads",
            f"{stale:,}{_stale_detail(cache)} of "
            f"{cache['reads_checked']:,} reads checked after {cache['barriers']:,} barriers "
            f"({cache['in_flight']:,} older while an invalidation was on its way, allowed)",
        ),
    ]
    rows += [("stale read", text) for text in cache["stale_examples"]]
    return rows


def _stale_detail(cache: dict[str, Any]) -> str:
    if not cache["stale_reads"]:
        return ""
    return f" (STALE DATA SERVED; {cache['stale_nil']:,} of them read no value)"


def cache_document(caches: Iterable[ClientCache], check: StaleReadCheck) -> dict[str, Any]:
    """A report's ``cache`` document: ``caches``' totals and ``check``'s numbers."""
    return {**CacheTotals.of(c.stats() for c in caches).as_dict(), **check.as_dict()}
