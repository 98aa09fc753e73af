"""The maintenance decision core: :class:`MaintenanceMachine` (sans-IO).

Every decision the client takes about maintenance lives here once, in the manner of h11's
``ConnectionState``: inputs are events (a notification read on a connection, a connection
acquired / released / removed, a handoff's outcome, a timer, a ``READONLY`` reply) with
``now`` (``float`` seconds of a monotonic clock: ``trio.current_time()`` in the shell);
outputs are a verdict where the pool needs one plus actions
(:mod:`~trio_maint._sansio.maint_types`) for the Trio shell to carry out. It decides
relaxation, MOVING (seqID de-duplication, the dial target, which connections move and
when, retargeting), handoff admission by circuit breakers, retries and their exhaustion,
and the bounds on churn. docs/maintenance.md states each rule, including the seqID rule:
seqIDs are compared per *source* (the endpoint a MOVING was read from) and a source's
record is forgotten once a move to that endpoint has completed, since a node may number
its notifications afresh.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Final

import attrs

from .breaker import BreakerRegistry
from .config import MaintConfig, MaintMode
from .endpoint import Endpoint
from .events import (
    MaintenanceDisabled,
    MovingRefused,
    MovingStarted,
)
from .loglimit import log_limited
from .maint_handoffs import (
    _HANDED,
    _INF,
    HANDOFF_BURST,
    HANDOFF_PACING,
    RETRY_BASE_DELAY,
    HandoffDecisions,
)
from .maint_types import (
    Action,
    CancelHandoff,
    ConnKind,
    ConnRecord,
    Emit,
    GiveBack,
    MachineState,
    Mark,
    MovingSeen,
    Phase,
    ReadonlyVerdict,
    Relax,
    Restore,
    SetDialTarget,
    Verdict,
)
from .notifications import (
    FailedOver,
    FailingOver,
    Migrated,
    Migrating,
    Moving,
    Notification,
    SMigrated,
    SMigrating,
)
from .seqids import MovingSeqIds
from .timeouts import RelaxedTimeouts
from .trust import TargetPolicy

__all__ = [
    "HANDOFF_BURST",
    "HANDOFF_PACING",
    "MAX_BREAKERS",
    "RETRY_BASE_DELAY",
    "MaintenanceMachine",
]

logger = logging.getLogger("trio_maint.maintenance")

#: Most circuit breakers kept; the least recently used are dropped beyond it (``int``).
MAX_BREAKERS: Final = 64

_OPENING = (Migrating, FailingOver, SMigrating)
_CLOSING = (Migrated, FailedOver, SMigrated)


@attrs.frozen
class _Move:
    source: Endpoint
    target: Endpoint | None
    seq_id: int
    deadline: float


#: The common answer of acquired/released: nothing to do (shared, never mutated).
_KEPT: Final[tuple[Verdict, Sequence[Action]]] = (Verdict.KEEP, ())


class MaintenanceMachine(HandoffDecisions):
    """The maintenance decisions of one client (one pool, its pub/sub connections).

    :param config: the :class:`~trio_maint.MaintConfig`; its automatic (0) fields are resolved with
        ``pool_size`` and ``max_active_conns``.
    :param configured: the endpoint the client was configured with
        (:class:`~trio_maint.Endpoint`).
    :param pool_size: the pool's size (``int``), for resolving ``config``.
    :param max_active_conns: the pool's cap on open connections (``int``).
    :param breakers: a :class:`BreakerRegistry` (default: one from ``config``, bounded to
        :data:`~trio_maint.lowlevel.MAX_BREAKERS`).
    :param policy: the :class:`~trio_maint.lowlevel.TargetPolicy` a MOVING's endpoint
        must pass to be followed (``None``: any is followed).

    Methods take ``now`` (``float`` seconds of the shell's monotonic clock,
    ``trio.current_time()``) and return actions to carry out in order; unknown connection
    ids are ignored. Some actions owe a report: ``TakeIdle`` -> :meth:`claimed`,
    ``StartHandoff`` -> :meth:`attempt_started` then :meth:`handoff_result`,
    ``ScheduleTimer`` -> :meth:`timer_fired` (docs/architecture.md has an example).
    """

    def __init__(
        self,
        config: MaintConfig,
        configured: Endpoint,
        *,
        pool_size: int = 0,
        max_active_conns: int = 0,
        breakers: BreakerRegistry | None = None,
        policy: TargetPolicy | None = None,
    ) -> None:
        self.config = config.resolved(pool_size, max_active_conns)
        self.mode = config.mode
        self.configured: Final = configured
        self.breakers = (
            breakers
            if breakers is not None
            else BreakerRegistry.from_config(config, max_size=MAX_BREAKERS)
        )
        #: The :class:`~trio_maint.lowlevel.TargetPolicy` MOVING targets must pass
        #: (``None``: every target is followed).
        self.policy = policy
        self._target = configured
        self._conns: dict[int, ConnRecord] = {}
        self._seqs = MovingSeqIds()
        self._last: _Move | None = None
        self._wake = _INF
        self._completed = 0
        self._failed = 0
        self._disabled_reported = False
        self.closed = False

    # -------------------------------------------------------------------- introspection

    def record(self, conn_id: int) -> ConnRecord | None:
        """The :class:`~trio_maint.lowlevel.ConnRecord` of ``conn_id``, or ``None``."""
        return self._conns.get(conn_id)

    def records(self) -> Iterator[ConnRecord]:
        """Every known connection's :class:`~trio_maint.lowlevel.ConnRecord`."""
        return iter(list(self._conns.values()))

    def state(self, now: float) -> MachineState:
        """A :class:`MachineState` snapshot at ``now``."""
        relaxed = pending = 0
        windows = False
        for rec in self._conns.values():
            t = rec.timeouts
            if t is not None:
                relaxed += t.is_relaxed(now)
                windows = windows or t.open_windows > 0
            pending += rec.phase in _HANDED or rec.mark is not None
        last = self._last
        return MachineState(
            mode=self.mode,
            relaxed_connections=relaxed,
            open_windows=windows,
            pending_handoffs=pending,
            completed_handoffs=self._completed,
            failed_handoffs=self._failed,
            dial_target=self._target,
            last_moving_seq=None if last is None else last.seq_id,
            moving_deadline=None if last is None else last.deadline,
            breakers=len(self.breakers),
        )

    def gauges(self, now: float) -> tuple[int, int]:
        """``(relaxed_connections, pending_handoffs)`` at ``now``, counted as
        :meth:`state` counts them but changing nothing: a read for the exporters, which
        may call it from another thread (it walks a copy of the records)."""
        relaxed = pending = 0
        for rec in list(self._conns.values()):
            t = rec.timeouts
            if t is not None:
                relaxed += t.relaxed_at(now)
            pending += rec.phase in _HANDED or rec.mark is not None
        return relaxed, pending

    # ---------------------------------------------------------------- connections

    def register(
        self,
        conn_id: int,
        endpoint: Endpoint,
        now: float,
        *,
        kind: ConnKind = ConnKind.POOLED,
        fallback: bool = False,
    ) -> list[Action]:
        """A new connection to ``endpoint`` exists (dialed and handshaken), owned by its
        borrower (pooled) or its PubSub.

        A dial that started before a MOVING and so reached the endpoint being left is
        marked for a handoff to the new target (it serves its borrower first), unless it
        got there as the ``fallback`` from an unreachable target.
        """
        rec = ConnRecord(conn_id, kind, endpoint, Phase.POOL)
        previous = self._conns.get(conn_id)
        self._conns[conn_id] = rec
        if previous is not None and previous.phase in (Phase.QUEUED, Phase.RUNNING):
            # A subscriber reconnected by itself (its old connection was lost) while a
            # handoff was under way: the new connection goes to the current target.
            self._breaker_release(previous)
            return [CancelHandoff(conn_id)]
        last = self._last
        if fallback or self.closed or last is None or last.target is None:
            return []
        if endpoint != last.source or now >= last.deadline or self._target == endpoint:
            return []
        actions: list[Action] = []
        self._mark(rec, Mark(self._target, last.seq_id, last.source, now), now, actions)
        return actions

    def quick_acquired(self, conn_id: int, is_new: bool) -> bool:
        """:meth:`acquired`'s common case, without ``now`` and without a write: ``True``
        when nothing can be due for ``conn_id`` (lend it); ``False``: call
        :meth:`acquired`. The pool's hooks run on every command: this is their cost."""
        rec = self._conns.get(conn_id)
        return rec is None or rec.mark is None or is_new

    def quick_released(self, conn_id: int) -> bool:
        """:meth:`released`'s common case, without ``now``: ``True`` when ``conn_id`` just
        goes back to the idle list; ``False``: call :meth:`released`."""
        rec = self._conns.get(conn_id)
        return rec is None or rec.mark is None

    def acquired(self, conn_id: int, is_new: bool, now: float) -> tuple[Verdict, Sequence[Action]]:
        """The pool is about to lend ``conn_id`` (``is_new``: just dialed) from its idle
        list. A connection whose handoff is due is taken for it instead (the borrower
        gets another); a new one serves its borrower first."""
        rec = self._conns.get(conn_id)
        if rec is None or rec.mark is None or is_new or rec.phase is not Phase.POOL:
            return _KEPT
        actions: list[Action] = []
        if self._due(rec, now) and self._queue(rec, now, actions):
            return Verdict.TAKEN, actions
        return Verdict.KEEP, actions

    def released(self, conn_id: int, now: float) -> tuple[Verdict, Sequence[Action]]:
        """A borrower gave ``conn_id`` back, healthy. A connection whose handoff is due is
        taken for it; any other goes to the idle list."""
        rec = self._conns.get(conn_id)
        if rec is None or rec.mark is None or rec.phase is not Phase.POOL:
            return _KEPT
        actions: list[Action] = []
        if self._due(rec, now) and self._queue(rec, now, actions):
            return Verdict.TAKEN, actions
        return Verdict.KEEP, actions

    def removed(self, conn_id: int) -> list[Action]:
        """``conn_id`` was closed and forgotten (by the pool, or its PubSub closed)."""
        rec = self._conns.pop(conn_id, None)
        if rec is None:
            return []
        self._breaker_release(rec)
        if rec.phase in (Phase.QUEUED, Phase.RUNNING):
            return [CancelHandoff(conn_id)]
        return []

    def claimed(self, conn_id: int, ok: bool, now: float) -> list[Action]:
        """Report on a :class:`TakeIdle`: ``ok`` when the connection was taken out of the
        idle list (the shell now holds it; it is queued or given back)."""
        rec = self._conns.get(conn_id)
        if rec is None or not ok:
            return []
        actions: list[Action] = []
        if not (self._due(rec, now) and self._queue(rec, now, actions)):
            actions.append(GiveBack(conn_id))
        return actions

    # ------------------------------------------------------------------ notifications

    def notification(self, conn_id: int, n: Notification, now: float) -> list[Action]:
        """A parsed maintenance notification was read on ``conn_id``."""
        rec = self._conns.get(conn_id)
        if rec is None or self.closed:
            return []
        if isinstance(n, Moving):
            return self._moving(rec, n, now)
        actions: list[Action] = []
        if isinstance(n, _OPENING):
            timeouts = self._timeouts(rec, actions)
            timeouts.open_window(now)
        elif isinstance(n, _CLOSING) and rec.timeouts is not None:
            rec.timeouts.close_window(now)
            if not rec.timeouts.is_relaxed(now):
                rec.timeouts = None
                actions.append(Restore(conn_id))
        return actions

    def _timeouts(self, rec: ConnRecord, actions: list[Action]) -> RelaxedTimeouts:
        if rec.timeouts is None:
            rec.timeouts = RelaxedTimeouts(self.config.relaxed_timeout)
            actions.append(Relax(rec.conn_id, rec.timeouts))
        return rec.timeouts

    def _moving(self, rec: ConnRecord, n: Moving, now: float) -> list[Action]:
        source = rec.endpoint
        actions: list[Action] = []
        new = self._seqs.is_new(source, n.seq_id, now)
        null_target = self._target  # where a null endpoint reconnects
        if n.endpoint is not None and self.policy is not None:
            reason = self.policy.refusal(n.endpoint)
            if reason is not None:
                # Not followed (docs/security.md): a null endpoint, to the configured address.
                if new:
                    actions.append(Emit(MovingRefused(n.seq_id, str(n.endpoint), reason, now)))
                n = attrs.evolve(n, endpoint=None)
                null_target = self.configured
        if new:
            self._accept(source, n, null_target, now, actions)  # applies it to ``rec`` too
        if rec.seen is not None and rec.seen[0] == source and rec.seen[1] >= n.seq_id:
            return actions  # this connection already applied it (or a newer one)
        self._apply(rec, source, n, null_target, now, actions)
        return actions

    def _accept(
        self, source: Endpoint, n: Moving, null_target: Endpoint, now: float, actions: list[Action]
    ) -> None:
        """The first MOVING of a new seqID from ``source``: act client-wide."""
        deadline = now + n.time
        # A null endpoint moves the client to the same address: it arrives there too.
        self._seqs.accept(source, n.seq_id, n.endpoint or null_target, deadline)
        self._last = _Move(source, n.endpoint, n.seq_id, deadline)
        endpoint = n.endpoint
        where = endpoint if endpoint is not None else "the current address"
        extra = {"event": "moving", "seq_id": n.seq_id, "endpoint": str(endpoint)}
        log_limited(
            logger,
            logging.INFO,
            "moving",
            now,
            "MOVING seq %d from %s to %s",
            n.seq_id,
            source,
            where,
            extra=extra,
        )
        actions.append(MovingSeen())
        text = None if endpoint is None else str(endpoint)
        actions.append(Emit(MovingStarted(n.seq_id, text, deadline, now)))
        moved = endpoint is not None and endpoint != self._target
        if endpoint is not None and moved and not self._blocked(endpoint, now):
            self._target = endpoint
            actions.append(SetDialTarget(endpoint))
        # Every connection on the source, or heading there, follows the move.
        for other in list(self._conns.values()):
            heading = other.mark is not None and other.mark.target == source
            if other.endpoint == source or heading:
                self._apply(other, source, n, null_target, now, actions)

    def _apply(
        self,
        rec: ConnRecord,
        source: Endpoint,
        n: Moving,
        null_target: Endpoint,
        now: float,
        actions: list[Action],
    ) -> None:
        """Apply MOVING ``n`` (read from ``source``) to one connection."""
        rec.seen = (source, n.seq_id)
        if n.endpoint is None:
            mark = Mark(null_target, n.seq_id, source, now + n.null_endpoint_delay, null=True)
        else:
            mark = Mark(n.endpoint, n.seq_id, source, now)
        self._mark(rec, mark, now, actions)

    def _mark(self, rec: ConnRecord, mark: Mark, now: float, actions: list[Action]) -> None:
        current = rec.mark
        if current is not None and current.seq_id > mark.seq_id and current.source == mark.source:
            return  # an older MOVING than the one it follows
        if rec.phase in _HANDED:
            # Retarget the handoff under way (at most one pending target).
            if not mark.null and mark.target == rec.endpoint and rec.phase is not Phase.RUNNING:
                # Moving back to where it is: the handoff is no longer needed.
                if rec.phase is Phase.QUEUED:
                    actions.append(CancelHandoff(rec.conn_id))
                self._returned(rec, actions)
                return
            if current is None or mark.target != current.target:
                rec.redo = rec.phase is Phase.RUNNING
            rec.mark = attrs.evolve(mark, due=min(mark.due, now))
            return
        if not mark.null and mark.target == rec.endpoint:
            rec.mark = None  # already there: a previous mark is stale
            return
        if self._blocked(mark.target, now):
            rec.mark = None  # its breaker is open: stay here rather than churn
            return
        mark = attrs.evolve(mark, due=max(mark.due, self._paced_until(rec)))
        rec.mark = mark
        if mark.due > now:
            self._wake_at(mark.due, actions)
        else:
            self._start(rec, now, actions)

    # ------------------------------------------------------------------------ READONLY

    def readonly(
        self, conn_id: int, endpoint: Endpoint, now: float, *, waited: bool = False
    ) -> tuple[ReadonlyVerdict, list[Action]]:
        """A write on ``conn_id``, talking to ``endpoint``, was refused with ``READONLY``
        (so it did not run). The connection may be gone already (the pool closes what it
        cannot keep idle).

        ``RETRY`` when the endpoint is moving: the connection is marked for a handoff, or
        ``endpoint`` is the source of a MOVING whose ``time`` has not run out. Handoffs not
        due yet (null endpoint, pacing) are then started at once, since the old node no
        longer takes writes. Otherwise ``WAIT`` (the shell waits for :class:`MovingSeen`,
        then asks again with ``waited=True``) or ``RAISE``.
        """
        rec = self._conns.get(conn_id)
        actions: list[Action] = []
        if self.closed:
            return ReadonlyVerdict.RAISE, actions
        last = self._last
        moving = rec is not None and (rec.mark is not None or rec.phase in _HANDED)
        if not moving and last is not None and now < last.deadline:
            moving = endpoint == last.source
        if not moving:
            return (ReadonlyVerdict.RAISE if waited else ReadonlyVerdict.WAIT), actions
        for other in list(self._conns.values()):
            mark = other.mark
            if mark is None or mark.urgent or other.phase in _HANDED:
                continue
            other.mark = attrs.evolve(mark, due=now, urgent=True)
            self._start(other, now, actions)
        return ReadonlyVerdict.RETRY, actions

    # --------------------------------------------------------------------- dial target

    def dial_target(self, now: float) -> Endpoint:
        """Where to dial a new connection now: the current target, or the configured
        endpoint while the target's breaker refuses. Report the dial with
        :meth:`dial_result`."""
        target = self._target
        if target == self.configured:
            return target
        if not self.breakers.get(target, now).allow(now):
            return self.configured
        return target

    def dial_result(self, endpoint: Endpoint, ok: bool | None, now: float) -> None:
        """A dial to ``endpoint`` connected (``True``), failed (``False``) or gave no
        verdict (``None``: cancelled)."""
        if endpoint == self.configured:
            return
        breaker = self.breakers.peek(endpoint)
        if breaker is None:
            return
        if ok is None:
            breaker.release()
        elif ok:
            breaker.record_success(now)
        else:
            breaker.record_failure(now)

    # ---------------------------------------------------------------------- handshake

    def handshake_refused(self, endpoint: str, reply: str, now: float) -> tuple[bool, list[Action]]:
        """A server refused ``CLIENT MAINT_NOTIFICATIONS``: ``(True, [])`` when the
        connection must fail (mode ``enabled``); else the client turns the feature off
        for good (mode ``auto``) and ``(False, actions)``."""
        if self.mode is MaintMode.ENABLED:
            return True, []
        self.mode = MaintMode.DISABLED
        if self._disabled_reported:
            return False, []
        self._disabled_reported = True
        return False, [Emit(MaintenanceDisabled(endpoint, reply, now))]

    def close(self) -> None:
        """The client is closing: later inputs are ignored (handoff results still end
        the connections concerned)."""
        self.closed = True
