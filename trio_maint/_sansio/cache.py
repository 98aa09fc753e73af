"""The client-side cache's store: bounded entries, invalidation, and the rule that keeps a
late reply out (sans-IO: no Trio imports; time is passed in).

:class:`CacheStore` holds replies keyed by command and arguments (see
:func:`~trio_maint._sansio.cache_config.cache_request`), bounded by a number of entries,
a number of bytes (:func:`entry_size`) and an optional TTL, least recently used evicted
first. In a cluster each entry remembers its keys' slot, so that a slot migration
flushes only that slot's entries.

**Late replies.** A read sent before the server invalidated its key may complete after
the client processed that invalidation; its reply is then the old value and must not be
stored. :meth:`CacheStore.begin_read` returns a :class:`ReadTicket` capturing, before the
request is sent, the store's flush epoch and each key's invalidation generation (kept
only for keys with reads in flight, so memory is bounded by the reads in flight);
:meth:`CacheStore.finish_read` stores the reply only when neither changed.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

from .cache_config import CacheConfig, CacheKey

__all__ = [
    "ENTRY_OVERHEAD",
    "MALFORMED",
    "NOT_INVALIDATION",
    "CacheStats",
    "CacheStore",
    "ReadTicket",
    "copy_reply",
    "entry_size",
    "parse_invalidation",
]

#: Bytes counted for each entry on top of its key and reply (``int``): the entry object,
#: its slot in the LRU dictionary and in the key index, as measured with ``tracemalloc``
#: on CPython 3.11 (docs/performance.md, "Client-side caching").
ENTRY_OVERHEAD: Final = 240

_IMMUTABLE: Final = (bytes, str, int, float, bool, type(None))


def entry_size(cache_key: CacheKey, value: Any) -> int:
    """The bytes an entry is counted for (``int``): :data:`ENTRY_OVERHEAD` plus
    ``sys.getsizeof`` of the cache key, its parts, the reply and everything the reply
    holds (iteratively: a deeply nested reply cannot exhaust the stack)."""
    size = ENTRY_OVERHEAD + sys.getsizeof(cache_key)
    for part in cache_key:
        size += sys.getsizeof(part)
    stack = [value]
    while stack:
        item = stack.pop()
        size += sys.getsizeof(item)
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            stack.extend(item)
    return size


#: :func:`parse_invalidation`'s answer for a push frame of another kind.
NOT_INVALIDATION: Final = object()
#: :func:`parse_invalidation`'s answer for an ``invalidate`` frame of the wrong shape.
MALFORMED: Final = object()
_INVALIDATE: Final = (b"invalidate", "invalidate")
_IS_BYTES: Final = bytes.__instancecheck__
#: An invalidation longer than this, and than the keys the store holds or reads, is
#: matched against those keys in C (a set intersection) rather than key by key.
_BULK: Final = 64


def parse_invalidation(frame: list[Any]) -> Any:
    """The keys (``list[bytes]``; ``str`` keys, decoded by ``decode_responses``, are
    encoded back as UTF-8) of a RESP3 ``invalidate`` push frame, ``None`` for a null key
    list (everything), :data:`MALFORMED` for an ``invalidate`` frame of another shape,
    :data:`NOT_INVALIDATION` for any other frame. Never raises."""
    if not frame or frame[0] not in _INVALIDATE:
        return NOT_INVALIDATION
    if len(frame) != 2:
        return MALFORMED
    keys = frame[1]
    if keys is None:
        return None
    if not isinstance(keys, list):
        return MALFORMED
    if all(map(_IS_BYTES, keys)):  # the common case, checked in C: a long list is cheap
        return keys
    out = []
    for key in keys:
        if isinstance(key, bytes):
            out.append(key)
        elif isinstance(key, str):
            out.append(key.encode("utf-8", "surrogateescape"))
        else:
            return MALFORMED
    return out


def copy_reply(value: Any) -> Any:
    """``value`` itself when immutable, else a copy of its containers (lists, dicts,
    sets, recursively), so a caller that changes a reply cannot change the cache."""
    cls = value.__class__
    if cls in _IMMUTABLE:
        return value
    if isinstance(value, list):
        return [copy_reply(v) for v in value]
    if isinstance(value, dict):
        return {copy_reply(k): copy_reply(v) for k, v in value.items()}
    if isinstance(value, set):
        return {copy_reply(v) for v in value}
    return value  # an error value or another immutable object


@attrs.frozen
class CacheStats:
    """Counters of a client's cache (``r.cache.stats()``), all ``int`` unless said.

    * ``hits`` / ``misses``: cacheable reads served from the cache / sent to the server.
    * ``stores``: replies stored; ``not_stored``: replies not stored because an
      invalidation or a flush came while they were in flight (the race of
      docs/caching.md), or the reply was larger than ``max_bytes``.
    * ``bypassed``: cacheable reads sent to the server without being cached, because
      caching was suspended (a maintenance window, tracking being re-established).
    * ``evictions``: entries evicted for ``max_size`` or ``max_bytes`` (least recently
      used first); ``expirations``: entries dropped because their TTL ran out.
    * ``invalidations``: entries removed by the server's invalidation messages, by this
      client's own writes (docs/caching.md, rule 4) and by
      :meth:`~trio_maint.ClientCache.invalidate`.
    * ``flushes``: ``Mapping[str, int]``, the number of flushes by cause (see
      docs/caching.md: ``tracking_lost``, ``moving``, ``migrating``, ``migrated``,
      ``failing_over``, ``failed_over``, ``slot_moved``, ``server_changed``,
      ``server_flush``, ``own_write``, ``clear``, ...); ``flushed``: entries removed by
      them.
    * ``entries``: entries held now; ``bytes``: their size (``entry_size``: the key's
      and the reply's bytes plus a fixed overhead).
    """

    hits: int
    misses: int
    stores: int
    not_stored: int
    bypassed: int
    evictions: int
    expirations: int
    invalidations: int
    flushes: Mapping[str, int]
    flushed: int
    entries: int
    bytes: int

    @property
    def hit_ratio(self) -> float:
        """``hits / (hits + misses + bypassed)`` (``float``; 0.0 before any read)."""
        total = self.hits + self.misses + self.bypassed
        return self.hits / total if total else 0.0


class _Entry:
    __slots__ = ("expires", "keys", "size", "slot", "value")

    def __init__(
        self,
        value: Any,
        size: int,
        keys: tuple[bytes, ...],
        expires: float,
        slot: int | None,
    ) -> None:
        self.value = value
        self.size = size
        self.keys = keys
        self.expires = expires
        self.slot = slot


@attrs.frozen
class ReadTicket:
    """A cacheable read in flight (:meth:`CacheStore.begin_read`).

    :ivar cache_key: the entry it would fill.
    :ivar keys: the Redis keys it reads (``tuple[bytes, ...]``).
    :ivar epoch: the store's flush epoch when it began (``int``).
    :ivar generations: each key's invalidation generation when it began.
    :ivar slot: the keys' slot (cluster) or ``None``.
    """

    cache_key: CacheKey
    keys: tuple[bytes, ...]
    epoch: int
    generations: tuple[int, ...]
    slot: int | None = None


_INF: Final = float("inf")


class CacheStore:
    """The entries of one client's cache (one cluster node's, in a cluster).

    :param config: the :class:`~trio_maint.CacheConfig` (``max_size``, ``max_bytes``,
        ``ttl``).

    Times (``now``) are ``float`` seconds of the caller's monotonic clock. Nothing here
    decides *when* to flush or whether a connection is tracked: that is
    :class:`~trio_maint._sansio.cache_machine.CacheMachine`.
    """

    def __init__(self, config: CacheConfig) -> None:
        self.config = config
        self._entries: OrderedDict[CacheKey, _Entry] = OrderedDict()
        # Redis key -> the cache key of its one entry, or a set of them.
        self._index: dict[bytes, Any] = {}
        # Redis key -> [reads in flight, invalidation generation], for keys being read.
        self._inflight: dict[bytes, list[int]] = {}
        self._epoch = 0
        self._bytes = 0
        self._hits = self._misses = self._stores = self._not_stored = self._bypassed = 0
        self._evictions = self._expirations = self._invalidations = self._flushed = 0
        self._flushes: dict[str, int] = {}

    # ---------------------------------------------------------------- introspection

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def total_bytes(self) -> int:
        """The bytes the entries are counted for (``int``)."""
        return self._bytes

    @property
    def epoch(self) -> int:
        """The flush epoch (``int``): it grows at every flush or clear."""
        return self._epoch

    def __contains__(self, cache_key: object) -> bool:
        return cache_key in self._entries

    def stats(self) -> CacheStats:
        """A :class:`CacheStats` snapshot."""
        return CacheStats(
            hits=self._hits,
            misses=self._misses,
            stores=self._stores,
            not_stored=self._not_stored,
            bypassed=self._bypassed,
            evictions=self._evictions,
            expirations=self._expirations,
            invalidations=self._invalidations,
            flushes=dict(self._flushes),
            flushed=self._flushed,
            entries=len(self._entries),
            bytes=self._bytes,
        )

    def reads_in_flight(self) -> int:
        """Keys with cacheable reads in flight (``int``; for tests and bounds)."""
        return len(self._inflight)

    # ---------------------------------------------------------------------- lookup

    def get(self, cache_key: CacheKey, now: float) -> tuple[bool, Any]:
        """``(True, value)`` for a live entry (it becomes the most recently used; the
        value is the stored object, see :func:`copy_reply`), else ``(False, None)``. An
        entry past its TTL is dropped. Counts a hit; a miss is counted by
        :meth:`begin_read` or :meth:`bypass`."""
        entry = self._entries.get(cache_key)
        if entry is None:
            return False, None
        if now >= entry.expires:
            self._drop(cache_key, entry)
            self._expirations += 1
            return False, None
        self._entries.move_to_end(cache_key)
        self._hits += 1
        return True, entry.value

    def bypass(self) -> None:
        """Count a cacheable read sent to the server without caching (``bypassed``)."""
        self._bypassed += 1

    # ----------------------------------------------------------------------- reads

    def begin_read(
        self,
        cache_key: CacheKey,
        keys: tuple[bytes, ...],
        slot: int | None = None,
    ) -> ReadTicket:
        """A cacheable read of ``keys`` (in a cluster, of ``slot``) is about to be sent:
        capture what :meth:`finish_read` compares. Counts a miss. Every ticket must end
        in :meth:`finish_read` or :meth:`abandon_read`."""
        self._misses += 1
        inflight = self._inflight
        generations = []
        for key in keys:
            record = inflight.get(key)
            if record is None:
                inflight[key] = record = [0, 0]
            record[0] += 1
            generations.append(record[1])
        return ReadTicket(cache_key, keys, self._epoch, tuple(generations), slot)

    def _end(self, ticket: ReadTicket) -> bool:
        """Release the ticket's keys; ``True`` when nothing invalidated them meanwhile."""
        clean = ticket.epoch == self._epoch
        inflight = self._inflight
        for key, generation in zip(ticket.keys, ticket.generations, strict=True):
            record = inflight[key]
            if record[1] != generation:
                clean = False
            record[0] -= 1
            if record[0] == 0:
                del inflight[key]
        return clean

    def abandon_read(self, ticket: ReadTicket) -> None:
        """The read failed or was cancelled: nothing is stored."""
        self._end(ticket)

    def finish_read(self, ticket: ReadTicket, value: Any, now: float) -> bool:
        """The read's reply arrived: store it unless a flush or an invalidation of one of
        its keys came since :meth:`begin_read`, or it is larger than ``max_bytes``.
        Evicts least recently used entries beyond the bounds.

        :returns: whether it was stored (``bool``).
        """
        if not self._end(ticket):
            self._not_stored += 1
            return False
        size = entry_size(ticket.cache_key, value)
        limit = self.config.max_bytes
        if limit is not None and size > limit:
            self._not_stored += 1
            return False
        old = self._entries.get(ticket.cache_key)
        if old is not None:
            self._drop(ticket.cache_key, old)
        ttl = self.config.ttl
        expires = _INF if ttl is None else now + ttl
        entry = _Entry(value, size, ticket.keys, expires, ticket.slot)
        self._entries[ticket.cache_key] = entry
        self._bytes += size
        index = self._index
        for key in ticket.keys:
            current = index.get(key)
            if current is None:
                index[key] = ticket.cache_key
            elif isinstance(current, set):
                current.add(ticket.cache_key)
            elif current != ticket.cache_key:
                index[key] = {current, ticket.cache_key}
        self._stores += 1
        self._evict(limit)
        return True

    def _evict(self, limit: int | None) -> None:
        entries = self._entries
        max_size = self.config.max_size
        while len(entries) > max_size or (limit is not None and self._bytes > limit):
            cache_key, entry = next(iter(entries.items()))
            self._drop(cache_key, entry)
            self._evictions += 1

    def _drop(self, cache_key: CacheKey, entry: _Entry) -> None:
        del self._entries[cache_key]
        self._bytes -= entry.size
        index = self._index
        for key in entry.keys:
            current = index.get(key)
            if current is None:
                continue
            if isinstance(current, set):
                current.discard(cache_key)
                if len(current) == 1:
                    index[key] = next(iter(current))
                elif not current:
                    del index[key]
            elif current == cache_key:
                del index[key]

    # ---------------------------------------------------------------- invalidation

    def invalidate(self, keys: Iterable[bytes]) -> int:
        """Remove every entry reading any of ``keys`` (an invalidation message, or
        :meth:`~trio_maint.ClientCache.invalidate`), and spoil the reads of them in
        flight. :returns: the entries removed (``int``)."""
        removed = 0
        index = self._index
        inflight = self._inflight
        if (
            isinstance(keys, list | tuple)
            and len(keys) > _BULK
            and len(keys) > len(index) + len(inflight)
        ):
            # A long list (an invalidation of many keys, a flood): only the keys the
            # store holds or reads matter, found in C (2M keys: some 50 ms, not 150).
            keys = (index.keys() | inflight.keys()).intersection(keys)
        for key in keys:
            record = inflight.get(key)
            if record is not None:
                record[1] += 1
            current = index.get(key)
            if current is None:
                continue
            for cache_key in list(current) if isinstance(current, set) else [current]:
                entry = self._entries.get(cache_key)
                if entry is not None:
                    self._drop(cache_key, entry)
                    removed += 1
        self._invalidations += removed
        return removed

    def flush(
        self,
        cause: str,
        *,
        slots: Iterable[int] | None = None,
    ) -> int:
        """Remove entries and spoil every read in flight (a new epoch): all of them, or
        only those of cluster ``slots``. Counted under ``cause`` (``str``).
        :returns: the entries removed (``int``)."""
        self._epoch += 1
        self._flushes[cause] = self._flushes.get(cause, 0) + 1
        if slots is None:
            removed = len(self._entries)
            self._entries.clear()
            self._index.clear()
            self._bytes = 0
        else:
            wanted = frozenset(slots)
            doomed = [(k, e) for k, e in self._entries.items() if e.slot in wanted]
            for cache_key, entry in doomed:
                self._drop(cache_key, entry)
            removed = len(doomed)
        self._flushed += removed
        return removed
