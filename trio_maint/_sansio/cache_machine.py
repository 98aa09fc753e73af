"""The client-side cache's decisions: :class:`CacheMachine` (sans-IO, in the manner of
h11's ``ConnectionState``: events with ``now`` in, actions out).

The cache reads through one *tracking connection* of its own (docs/caching.md): the server
tracks the keys read there and sends their invalidations there, in order with the replies.
The machine decides, from what happens to that connection and from the maintenance
notifications read on it, when the cache may serve and store, which part of it to flush
and when the tracking connection must be (re-)established or checked:

======================================  =============================================
event                                   decision
======================================  =============================================
tracking connection ready               serve and store (phase ``READY``); flush what
                                        an earlier one read (``replaced``)
lost / reset / refused ``CLIENT         flush all (``tracking_lost`` or
CACHING`` / a failed check              ``server_changed``); reconnect at once, then
                                        with backoff (0.05 s doubling to 5 s)
handed off (MOVING, make-before-break)  flush all (``handoff``) at the switch
MOVING read on it                       flush all (``moving``): the data behind the
                                        endpoint may already be elsewhere
MIGRATING / FAILING_OVER                flush all; bypass (serve and store nothing)
                                        until the matching MIGRATED / FAILED_OVER or
                                        :data:`WINDOW_BACKSTOP` seconds
MIGRATED / FAILED_OVER (or backstop)    flush all; check the connection (``Verify``)
                                        before serving again
SMIGRATED (cluster)                     flush the entries of the slots it lists
                                        (``slot_moved``)
invalidation of keys                    remove their entries; spoil their reads in
                                        flight (:class:`~.cache.CacheStore`)
invalidation with a null key list       flush all (``server_flush``)
malformed invalidation (its keys        flush all (``malformed_invalidation``)
cannot be read)
this client's own write (sent, and      remove its keys' entries; spoil their reads
again when its reply came)              in flight; flush all (``own_write``) when its
                                        keys cannot be known (``FLUSHDB``, ...)
every ``health_check_interval``         check the connection (``Verify``)
``CLIENT TRACKING`` refused             caching off for the client (``DISABLED``)
======================================  =============================================
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import Any, Final

import attrs

from .cache import CacheStats, CacheStore, ReadTicket
from .cache_config import CacheConfig, CacheKey
from .cache_writes import OwnWrite
from .notifications import (
    FailedOver,
    FailingOver,
    Migrated,
    Migrating,
    Moving,
    Notification,
    SMigrated,
)
from .slots import parse_slot_specs

__all__ = [
    "RECONNECT_BACKOFF_MAX",
    "STABLE_AFTER",
    "WINDOW_BACKSTOP",
    "CacheAction",
    "CacheMachine",
    "CachePhase",
    "Connect",
    "Disable",
    "DropTracking",
    "Flushed",
    "Verify",
]

#: Seconds (``float``) a maintenance window (MIGRATING, FAILING_OVER) may stay open
#: without its closing notification before the cache resumes anyway (after a flush and
#: a check of the tracking connection).
WINDOW_BACKSTOP: Final = 60.0
#: Longest wait (seconds, ``float``) between two attempts to (re)connect the tracking
#: connection; the first retry after a loss is immediate, then 0.05 s doubling.
RECONNECT_BACKOFF_MAX: Final = 5.0
#: Seconds (``float``) a tracking connection must have been up for its loss to reset the
#: backoff: one lost sooner (``CLIENT CACHING`` refused by an ACL at every miss, a server
#: that drops it at once) keeps backing off instead of being redialed at every read.
STABLE_AFTER: Final = 1.0
_BACKOFF_BASE: Final = 0.05
_INF: Final = float("inf")


class CachePhase(enum.Enum):
    """Where the tracking connection is (:attr:`CacheMachine.phase`).

    * ``DOWN``: none; one is due (a :class:`Connect` was asked for).
    * ``CONNECTING``: being dialed and set up.
    * ``READY``: tracking is on: the cache serves and stores (outside maintenance
      windows).
    * ``VERIFYING``: after a window closed: nothing is served until a check proves the
      connection is still tracked on the same server.
    * ``DISABLED``: the server refused ``CLIENT TRACKING``: every read bypasses the cache.
    """

    DOWN = "down"
    CONNECTING = "connecting"
    READY = "ready"
    VERIFYING = "verifying"
    DISABLED = "disabled"


@attrs.frozen
class Connect:
    """Dial and set up a tracking connection at ``at`` (``float``, the machine's clock),
    then report :meth:`CacheMachine.connected`, :meth:`~CacheMachine.connect_failed` or
    :meth:`~CacheMachine.refused`."""

    at: float


@attrs.frozen
class DropTracking:
    """Close the tracking connection now (``reason``, ``str``, for the log): its reads in
    flight are sent again through the pool."""

    reason: str


@attrs.frozen
class Verify:
    """Check the tracking connection with one round trip that fails if it is no longer
    tracked (``CLIENT CACHING YES``, or ``CLIENT TRACKINGINFO`` in ``bcast`` mode); report
    :meth:`CacheMachine.verified`."""


@attrs.frozen
class Flushed:
    """Entries were flushed: ``entries`` (``int``) for ``cause`` (``str``); for the log."""

    cause: str
    entries: int


@attrs.frozen
class Disable:
    """Caching is off for good (``reason``, ``str``): log it once."""

    reason: str


#: What the machine asks of its shell.
CacheAction = Connect | DropTracking | Verify | Flushed | Disable

_OPENING: Final = {Migrating: "migrating", FailingOver: "failing_over"}
_CLOSING: Final = {Migrated: "migrated", FailedOver: "failed_over"}


class CacheMachine:
    """The decisions of one client's cache (one cluster node's, in a cluster).

    :param config: the :class:`~trio_maint.CacheConfig`.
    :param slots: ``True`` in a cluster: entries remember their keys' slot, so that a
        ``SMIGRATED`` flushes only the slots it names.

    :ivar store: the :class:`~trio_maint._sansio.cache.CacheStore`.
    :ivar phase: the :class:`CachePhase`.

    Every method taking ``now`` (``float`` seconds of a monotonic clock, Trio's in the
    shell) returns the actions to carry out, in order; :attr:`next_wake` is when
    :meth:`timer` wants to run next.
    """

    def __init__(self, config: CacheConfig, *, slots: bool = False) -> None:
        self.config: Final = config
        self.slots: Final = slots
        self.store: Final = CacheStore(config)
        self.phase = CachePhase.DOWN
        self.disabled_reason: str | None = None
        self._window_until: float | None = None
        self._failures = 0
        self._ready_at = -_INF  # when the tracking connection was last set up
        self._checking = False
        self._next_check = _INF
        self._started = False

    # ------------------------------------------------------------------- queries

    @property
    def serving(self) -> bool:
        """Whether the cache serves hits and stores replies now (``bool``): the tracking
        connection is ``READY`` and no maintenance window is open."""
        return self.phase is CachePhase.READY and self._window_until is None

    @property
    def window_open(self) -> bool:
        """Whether a maintenance window (MIGRATING, FAILING_OVER) is open (``bool``)."""
        return self._window_until is not None

    @property
    def next_wake(self) -> float:
        """When :meth:`timer` has something to do (``float``; ``inf``: nothing)."""
        wake = self._next_check if self.phase is CachePhase.READY else _INF
        if self._window_until is not None:
            wake = min(wake, self._window_until)
        return wake

    def stats(self) -> CacheStats:
        """The store's :class:`~trio_maint._sansio.cache.CacheStats`."""
        return self.store.stats()

    # --------------------------------------------------------------------- reads

    def lookup(self, cache_key: CacheKey, now: float) -> tuple[bool, Any]:
        """``(True, value)`` when the cache may serve ``cache_key`` now, else
        ``(False, None)`` (see :meth:`CacheStore.get`)."""
        if not self.serving:
            return False, None
        return self.store.get(cache_key, now)

    def begin(
        self, cache_key: CacheKey, keys: tuple[bytes, ...], slot: int | None = None
    ) -> ReadTicket | None:
        """A cacheable read that missed is about to be sent on the tracking connection:
        its :class:`~trio_maint._sansio.cache.ReadTicket`, or ``None`` when the cache does
        not serve now (the read goes through the pool, counted as ``bypassed``)."""
        if not self.serving:
            self.store.bypass()
            return None
        return self.store.begin_read(cache_key, keys, slot if self.slots else None)

    def finish(self, ticket: ReadTicket, value: Any, now: float) -> bool:
        """The read's reply, read on the tracking connection in order with the
        invalidations: store it (see :meth:`CacheStore.finish_read`)."""
        return self.store.finish_read(ticket, value, now)

    def abandon(self, ticket: ReadTicket) -> None:
        """The read got an error reply or no reply: nothing is stored."""
        self.store.abandon_read(ticket)

    # ------------------------------------------------------- the tracking connection

    def start(self, now: float) -> list[CacheAction]:
        """The client started: connect the tracking connection."""
        if self._started or self.phase is CachePhase.DISABLED:
            return []
        self._started = True
        self.phase = CachePhase.CONNECTING
        return [Connect(now)]

    def connected(self, now: float) -> list[CacheAction]:
        """A tracking connection is set up (``CLIENT TRACKING ON`` accepted). It replaces
        any other: entries read there lose their tracking when it closes, so they are
        flushed (``replaced``)."""
        if self.phase is CachePhase.DISABLED:
            return [DropTracking("caching is disabled")]
        actions: list[CacheAction] = []
        if len(self.store) or self.store.reads_in_flight():
            self._flush("replaced", actions)
        self._ready_at = now  # the backoff is reset by a loss after STABLE_AFTER (lost())
        self.phase = CachePhase.READY
        self._checking = False
        self._next_check = now + self.config.health_check_interval
        return actions

    def connect_failed(self, now: float) -> list[CacheAction]:
        """Dialing or setting up the tracking connection failed: try again later."""
        if self.phase is CachePhase.DISABLED:
            return []
        delay = min(_BACKOFF_BASE * 2**self._failures, RECONNECT_BACKOFF_MAX)
        self._failures = min(self._failures + 1, 30)
        self.phase = CachePhase.CONNECTING
        return [Connect(now + delay)]

    def refused(self, reason: str) -> list[CacheAction]:
        """The server refused ``CLIENT TRACKING`` (an ACL, an old server): caching is
        off for this client; reads go through the pool."""
        self.phase = CachePhase.DISABLED
        self.disabled_reason = reason
        actions: list[CacheAction] = [Disable(reason)]
        return self._flush("disabled", actions)

    def lost(self, now: float, *, cause: str = "tracking_lost") -> list[CacheAction]:
        """The tracking connection failed (closed, reset, a protocol error, a reply that
        did not come in time): invalidations may have been lost. Flush everything, drop
        it, reconnect: at once when it had been up :data:`STABLE_AFTER` seconds, else
        with backoff (the failures count on from the attempts that came before)."""
        if self.phase is CachePhase.DISABLED:
            return []
        actions: list[CacheAction] = [DropTracking(cause)]
        self._flush(cause, actions)
        self._checking = False
        if self.phase is CachePhase.CONNECTING:
            return actions  # a Connect is already due
        self.phase = CachePhase.CONNECTING
        if now - self._ready_at >= STABLE_AFTER:
            self._failures = 0  # it had worked: retry at once
        delay = (
            0.0
            if self._failures == 0
            else min(_BACKOFF_BASE * 2**self._failures, RECONNECT_BACKOFF_MAX)
        )
        self._failures = min(self._failures + 1, 30)
        actions.append(Connect(now + delay))
        return actions

    def caching_refused(self, now: float) -> list[CacheAction]:
        """``CLIENT CACHING YES`` was refused on the tracking connection: it is no longer
        tracked (a proxy re-pointed it to another server): as :meth:`lost`, counted as
        ``server_changed``."""
        return self.lost(now, cause="server_changed")

    def handed_off(self, now: float) -> list[CacheAction]:
        """The tracking connection was handed off to a new endpoint (a MOVING): the new
        one is set up; entries read on the old one lose their tracking when it closes."""
        if self.phase is CachePhase.DISABLED:
            return [DropTracking("caching is disabled")]
        actions: list[CacheAction] = []
        self._flush("handoff", actions)
        if self.phase is not CachePhase.VERIFYING:
            self.phase = CachePhase.READY
        self._next_check = now + self.config.health_check_interval
        return actions

    def verified(self, ok: bool, now: float) -> list[CacheAction]:
        """Report on :class:`Verify`: ``ok`` when the connection is still tracked."""
        self._checking = False
        if not ok:
            return self.lost(now, cause="server_changed")
        if self.phase is CachePhase.VERIFYING:
            self.phase = CachePhase.READY
        self._next_check = now + self.config.health_check_interval
        return []

    # ----------------------------------------------------------- what the server says

    def invalidation(self, keys: Iterable[bytes] | None) -> list[CacheAction]:
        """An invalidation message: remove ``keys``' entries, or flush everything for a
        null key list (the server flushed its data, or its tracking table)."""
        if keys is None:
            return self._flush("server_flush", [])
        self.store.invalidate(keys)
        return []

    def malformed_invalidation(self) -> list[CacheAction]:
        """An ``invalidate`` push frame of a shape the client cannot read (a buggy server
        or proxy): which keys it meant is unknown, so everything is flushed
        (``malformed_invalidation``), in-flight reads included."""
        return self._flush("malformed_invalidation", [])

    def notification(self, n: Notification, now: float) -> list[CacheAction]:
        """A maintenance notification read on the tracking connection (see the module
        doc for each)."""
        actions: list[CacheAction] = []
        cls = type(n)
        if isinstance(n, Moving):
            self._flush("moving", actions)
        elif cls in _OPENING:
            self._flush(_OPENING[cls], actions)
            self._window_until = now + WINDOW_BACKSTOP
        elif cls in _CLOSING:
            self._flush(_CLOSING[cls], actions)
            self._close_window(actions)
        elif isinstance(n, SMigrated):
            slots = [s for move in n.moves for s in parse_slot_specs(move.slots)]
            if self.slots:
                removed = self.store.flush("slot_moved", slots=slots)
                actions.append(Flushed("slot_moved", removed))
            else:
                self._flush("slot_moved", actions)
        return actions

    def _close_window(self, actions: list[CacheAction]) -> None:
        self._window_until = None
        if self.phase is CachePhase.READY:
            self.phase = CachePhase.VERIFYING
            if not self._checking:
                self._checking = True
                actions.append(Verify())

    def timer(self, now: float) -> list[CacheAction]:
        """Time passed: a window's backstop, a health check due."""
        actions: list[CacheAction] = []
        if self._window_until is not None and now >= self._window_until:
            self._flush("window_backstop", actions)
            self._close_window(actions)
        if self.phase is CachePhase.READY and now >= self._next_check and not self._checking:
            self._checking = True
            self._next_check = _INF
            actions.append(Verify())
        return actions

    # ------------------------------------------------------------------ the user

    def own_write(self, write: OwnWrite) -> list[CacheAction]:
        """This client is about to send a command that may change ``write.keys`` (see
        :func:`~trio_maint._sansio.cache_writes.own_write`), or that command's reply (or
        failure) came: remove their entries and spoil their reads in flight (counted as
        ``invalidations``); when the keys cannot be known (``None``), flush everything
        (``own_write``) if there is anything to flush. The shell calls it at both
        moments: before the send, reads in flight cannot store the older value; after
        the reply, an entry a read stored meanwhile is gone, so a read that starts once
        the write is acknowledged misses (or finds a newer value)."""
        keys = write.keys
        if keys is None:
            if len(self.store) or self.store.reads_in_flight():
                return self._flush("own_write", [])
            return []
        self.store.invalidate(keys)
        return []

    def invalidate_keys(self, keys: Sequence[bytes]) -> int:
        """:meth:`~trio_maint.ClientCache.invalidate`: remove the entries of ``keys``."""
        return self.store.invalidate(keys)

    def clear(self) -> int:
        """:meth:`~trio_maint.ClientCache.clear`: flush everything (``clear``)."""
        return self.store.flush("clear")

    def _flush(self, cause: str, actions: list[CacheAction]) -> list[CacheAction]:
        removed = self.store.flush(cause)
        actions.append(Flushed(cause, removed))
        return actions
