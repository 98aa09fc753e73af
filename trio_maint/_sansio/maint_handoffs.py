"""The handoff half of the maintenance decision core (sans-IO): when a marked connection
is handed to the HandoffManager (pacing, breakers), what an attempt's outcome means
(retries with backoff, exhaustion, retargeting) and the machine's timer.
:class:`HandoffDecisions` is a base of
:class:`~trio_maint._sansio.maint.MaintenanceMachine`, which owns the state it uses.
"""

from __future__ import annotations

from typing import Final

import attrs

from .breaker import BreakerRegistry
from .config import MaintConfig
from .endpoint import Endpoint
from .errors import CircuitBreakerOpenError, HandoffRetriesExhaustedError
from .events import HandoffFailed, HandoffQueued, HandoffSucceeded
from .maint_types import (
    Action,
    ConnKind,
    ConnRecord,
    Discard,
    Emit,
    GiveBack,
    Outcome,
    Phase,
    Relax,
    ScheduleTimer,
    StartHandoff,
    TakeIdle,
)
from .timeouts import RelaxedTimeouts

__all__ = ["HANDOFF_BURST", "HANDOFF_PACING", "RETRY_BASE_DELAY", "HandoffDecisions"]

#: A connection starts at most :data:`HANDOFF_BURST` handoffs in any ``HANDOFF_PACING``
#: seconds (``float``); a newer MOVING for it meanwhile is kept as its one pending target
#: and applied when the window allows (or at once after a READONLY from the old endpoint).
HANDOFF_PACING: Final = 1.0
#: See :data:`HANDOFF_PACING` (``int``): legitimate moves in quick succession (A -> B -> A)
#: are never delayed; a flood of MOVINGs is.
HANDOFF_BURST: Final = 2
#: Delay (``float`` seconds) before the first retry of a failed handoff dial; doubled for
#: each further retry and capped at ``handoff_timeout``.
RETRY_BASE_DELAY: Final = 0.5
_INF: Final = float("inf")
_HANDED: Final = (Phase.QUEUED, Phase.RUNNING, Phase.RETRY_WAIT)


def _blocked_error(rec: ConnRecord) -> str:
    message = f"the circuit breaker of conn[{rec.conn_id}]'s target is open"
    return repr(CircuitBreakerOpenError(message))


class HandoffDecisions:
    """Handoff scheduling and outcomes; see the module docstring. Plain calls, ``now``
    passed in, actions returned (or appended to the caller's list)."""

    config: MaintConfig
    breakers: BreakerRegistry
    closed: bool
    _conns: dict[int, ConnRecord]
    _wake: float
    _completed: int
    _failed: int

    def _start(self, rec: ConnRecord, now: float, actions: list[Action]) -> None:
        """A handoff became due: a subscriber moves at once; a pooled connection is taken
        if it is idle (else it is queued when its borrower releases it)."""
        if rec.kind is ConnKind.PUBSUB:
            self._queue(rec, now, actions)
        else:
            actions.append(TakeIdle(rec.conn_id))

    def _blocked(self, endpoint: Endpoint, now: float) -> bool:
        breaker = self.breakers.peek(endpoint)
        return breaker is not None and breaker.blocks(now)

    def _due(self, rec: ConnRecord, now: float) -> bool:
        return rec.mark is not None and rec.mark.due <= now

    @staticmethod
    def _paced_until(rec: ConnRecord) -> float:
        """When ``rec`` may start another handoff (``-inf``: at once): at most
        :data:`HANDOFF_BURST` starts in any :data:`HANDOFF_PACING` seconds."""
        recent = rec.recent_starts
        return recent[0] + HANDOFF_PACING if len(recent) >= HANDOFF_BURST else -_INF

    def _queue(
        self, rec: ConnRecord, now: float, actions: list[Action], *, retry: bool = False
    ) -> bool:
        """Hand ``rec`` to the HandoffManager. ``False`` when not now: its target is
        blocked by an open breaker (the mark is dropped), or the connection started
        :data:`HANDOFF_BURST` handoffs in the last :data:`HANDOFF_PACING` seconds (the
        mark waits; a ``retry`` of a failed dial is part of the same handoff)."""
        mark = rec.mark
        assert mark is not None
        if self._blocked(mark.target, now):
            rec.mark = None
            return False
        if not retry and not mark.urgent:
            allowed = self._paced_until(rec)
            if allowed > now:
                rec.mark = attrs.evolve(mark, due=allowed)
                self._wake_at(allowed, actions)
                return False
            rec.recent_starts = (*rec.recent_starts, now)[-HANDOFF_BURST:]
        rec.phase = Phase.QUEUED
        rec.redo = False
        if rec.queued_at is None:
            rec.queued_at = now
        actions.append(StartHandoff(rec.conn_id, mark.target, mark.seq_id))
        actions.append(Emit(HandoffQueued(rec.conn_id, str(mark.target), mark.seq_id, now)))
        return True

    def attempt_started(self, conn_id: int, now: float) -> Endpoint | None:
        """A handoff attempt of ``conn_id`` starts dialing: the endpoint to dial (the
        latest target), or ``None`` when the target's circuit breaker refuses (report
        :attr:`Outcome.BREAKER_OPEN`) or the handoff was withdrawn."""
        rec = self._conns.get(conn_id)
        if rec is None or rec.mark is None or rec.phase is not Phase.QUEUED:
            return None
        breaker = self.breakers.get(rec.mark.target, now)
        if not breaker.allow(now):
            return None
        rec.phase = Phase.RUNNING
        rec.dialing = rec.tried = rec.mark.target
        rec.attempts += 1
        rec.redo = False
        return rec.dialing

    def _breaker_release(self, rec: ConnRecord) -> None:
        if rec.dialing is not None:
            breaker = self.breakers.peek(rec.dialing)
            rec.dialing = None
            if breaker is not None:
                breaker.release()

    def handoff_result(
        self, conn_id: int, outcome: Outcome, now: float, error: str = ""
    ) -> list[Action]:
        """The HandoffManager reports how ``conn_id``'s attempt ended (``error``: the
        cause's ``repr``, for events)."""
        rec = self._conns.get(conn_id)
        if rec is None or rec.phase not in (Phase.QUEUED, Phase.RUNNING) or rec.mark is None:
            return []
        actions: list[Action] = []
        dialed, rec.dialing = rec.dialing, None
        breaker = self.breakers.peek(dialed) if dialed is not None else None
        if breaker is not None:
            if outcome is Outcome.OK:
                breaker.record_success(now)
            elif outcome is Outcome.DIAL_ERROR:
                breaker.record_failure(now)
            else:
                breaker.release()
        if outcome is Outcome.OK and dialed is not None:
            self._succeeded(rec, dialed, now, actions)
        elif rec.redo and outcome in (Outcome.DIAL_ERROR, Outcome.ERROR):
            self._redo(rec, now, actions, dialed)
        elif outcome is Outcome.DIAL_ERROR and rec.attempts < self.config.max_handoff_retries:
            delay = min(RETRY_BASE_DELAY * 2 ** (rec.attempts - 1), self.config.handoff_timeout)
            rec.phase = Phase.RETRY_WAIT
            rec.retry_at = now + delay
            self._wake_at(rec.retry_at, actions)
        else:
            if outcome is Outcome.DIAL_ERROR:
                error = repr(
                    HandoffRetriesExhaustedError(
                        f"handoff to {dialed} failed after {rec.attempts} dial attempts: {error}"
                    )
                )
            self._failed_to(rec, error or outcome.value, now, actions, dialed)
        return actions

    def _redo(
        self, rec: ConnRecord, now: float, actions: list[Action], dialed: Endpoint | None = None
    ) -> None:
        """The target changed during an attempt: go to the new one (or stay, when the
        connection is already there). ``dialed``: the endpoint the attempt dialed."""
        mark = rec.mark
        if mark is not None and not mark.null and mark.target == rec.endpoint:
            self._returned(rec, actions)
        elif not self._queue(rec, now, actions):
            if rec.mark is None:
                self._failed_to(rec, _blocked_error(rec), now, actions, dialed)
            else:  # paced: it goes back, its mark waits for the pacing window
                self._returned(rec, actions, keep_mark=True)

    def _returned(self, rec: ConnRecord, actions: list[Action], *, keep_mark: bool = False) -> None:
        if not keep_mark:
            rec.mark = None
        rec.redo = False
        rec.tried = None
        rec.attempts = 0
        rec.retry_at = None
        rec.queued_at = None
        rec.phase = Phase.POOL
        actions.append(GiveBack(rec.conn_id))

    def _succeeded(
        self, rec: ConnRecord, target: Endpoint, now: float, actions: list[Action]
    ) -> None:
        rec.endpoint = target
        rec.seen = None
        rec.attempts = 0
        rec.tried = None
        self._completed += 1
        latency = now - (rec.queued_at if rec.queued_at is not None else now)
        rec.queued_at = None
        if rec.timeouts is None:
            rec.timeouts = RelaxedTimeouts(self.config.relaxed_timeout)
        rec.timeouts.relax_after_handoff(now, self.config.post_handoff_relaxed_duration)
        actions.append(Relax(rec.conn_id, rec.timeouts))  # a subscriber's is a new connection
        actions.append(Emit(HandoffSucceeded(rec.conn_id, str(target), latency, now)))
        mark = rec.mark
        if rec.redo and mark is not None and (mark.null or mark.target != target):
            rec.redo = False
            if self._queue(rec, now, actions):
                return
            self._returned(rec, actions, keep_mark=rec.mark is not None)  # paced
            return
        self._returned(rec, actions)

    def _failed_to(
        self,
        rec: ConnRecord,
        reason: str,
        now: float,
        actions: list[Action],
        dialed: Endpoint | None = None,
    ) -> None:
        """The handoff failed for good: a pooled connection is discarded, a subscriber
        stays on its current connection. The event names the endpoint the last attempt
        dialed (``dialed``), else the pending target, else where the connection is."""
        where = dialed if dialed is not None else rec.mark.target if rec.mark else rec.tried
        target = str(where if where is not None else rec.endpoint)
        rec.tried = None
        latency = now - (rec.queued_at if rec.queued_at is not None else now)
        self._failed += 1
        actions.append(Emit(HandoffFailed(rec.conn_id, target, reason, latency, now)))
        if rec.kind is ConnKind.PUBSUB:
            self._returned(rec, actions)
        else:
            rec.mark = None
            actions.append(Discard(rec.conn_id, f"handoff to {target} failed: {reason}"))

    # ------------------------------------------------------------------------- timers

    def _wake_at(self, at: float, actions: list[Action]) -> None:
        if at < self._wake:
            self._wake = at
            actions.append(ScheduleTimer(at))

    def timer_fired(self, now: float) -> list[Action]:
        """The shell's timer fired at ``now``: start what became due (retries, scheduled
        and paced handoffs) and ask for the next wake-up."""
        actions: list[Action] = []
        self._wake = _INF
        if self.closed:
            return actions
        upcoming = _INF
        for rec in list(self._conns.values()):
            if rec.phase is Phase.RETRY_WAIT and rec.retry_at is not None:
                if rec.retry_at <= now:
                    rec.retry_at = None
                    if rec.mark is None or not self._queue(rec, now, actions, retry=True):
                        self._failed_to(rec, _blocked_error(rec), now, actions)
                else:
                    upcoming = min(upcoming, rec.retry_at)
            elif rec.mark is not None and rec.phase not in _HANDED:
                if rec.mark.due > now:
                    upcoming = min(upcoming, rec.mark.due)
                else:
                    self._start(rec, now, actions)
        if upcoming < _INF:
            self._wake_at(upcoming, actions)
        return actions
