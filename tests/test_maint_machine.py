"""The sans-IO MaintenanceMachine, tested with plain function calls (no Trio, no
sockets): every decision of docs/maintenance.md, then a hypothesis stateful test of random
interleavings that checks the invariants after every step."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from trio_maint._sansio.breaker import BreakerState
from trio_maint._sansio.config import MaintConfig, MaintMode
from trio_maint._sansio.endpoint import Endpoint, EndpointType
from trio_maint._sansio.events import (
    HandoffFailed,
    HandoffQueued,
    HandoffSucceeded,
    MaintenanceDisabled,
    MovingRefused,
    MovingStarted,
)
from trio_maint._sansio.maint import HANDOFF_PACING, MAX_BREAKERS, MaintenanceMachine
from trio_maint._sansio.maint_types import (
    Action,
    CancelHandoff,
    ConnKind,
    Discard,
    Emit,
    GiveBack,
    MovingSeen,
    Outcome,
    Phase,
    ReadonlyVerdict,
    Relax,
    Restore,
    ScheduleTimer,
    SetDialTarget,
    StartHandoff,
    TakeIdle,
    Verdict,
)
from trio_maint._sansio.notifications import (
    FailedOver,
    FailingOver,
    Migrated,
    Migrating,
    Moving,
    Notification,
)
from trio_maint._sansio.seqids import MovingSeqIds
from trio_maint._sansio.trust import TargetPolicy

A = Endpoint("10.0.0.1", 6379)
B = Endpoint("10.0.0.2", 6379)
C = Endpoint("10.0.0.3", 6379)
CONFIG = MaintConfig(max_workers=4, handoff_queue_size=10)


def machine(config: MaintConfig = CONFIG) -> MaintenanceMachine:
    return MaintenanceMachine(config, A, pool_size=4)


def of(actions: Sequence[Action], kind: type[Any]) -> list[Any]:
    return [a for a in actions if isinstance(a, kind)]


def events(actions: Sequence[Action], kind: type[Any]) -> list[Any]:
    return [a.event for a in actions if isinstance(a, Emit) and isinstance(a.event, kind)]


def pool(m: MaintenanceMachine, idle: int = 0, borrowed: int = 0, now: float = 0.0) -> list[int]:
    """Register connections on A: ``idle`` of them released to the idle list, then
    ``borrowed`` kept by borrowers. Returns their ids in that order."""
    ids: list[int] = []
    for i in range(idle + borrowed):
        cid = 100 + len(list(m.records())) + i * 0
        m.register(cid, A, now)
        m.acquired(cid, True, now)
        ids.append(cid)
    for cid in ids[:idle]:
        assert kept(m.released(cid, now))
    return ids


def kept(result: tuple[Verdict, Sequence[Action]]) -> bool:
    """The pool keeps the connection and there is nothing to do."""
    return result[0] is Verdict.KEEP and not result[1]


def handoff(m: MaintenanceMachine, cid: int, now: float, outcome: Outcome) -> list[Action]:
    target = m.attempt_started(cid, now)
    assert target is not None
    return m.handoff_result(cid, outcome, now, "boom")


# ------------------------------------------------------------------------- relaxation


def test_windows_relax_nest_and_restore() -> None:
    m = machine()
    [cid] = pool(m, borrowed=1)
    first = m.notification(cid, Migrating(1), 0.0)
    [relax] = of(first, Relax)
    timeouts = relax.timeouts
    assert timeouts.effective(1.0, 0.0) == CONFIG.relaxed_timeout
    assert m.notification(cid, FailingOver(2), 0.1) == []  # nested: same policy
    assert m.notification(cid, Migrated(3), 0.2) == []  # one window still open
    assert timeouts.effective(1.0, 0.2) == CONFIG.relaxed_timeout
    assert m.notification(cid, FailedOver(4), 0.3) == [Restore(cid)]
    assert m.notification(cid, Migrated(5), 0.4) == []  # an extra closing is ignored


def test_relaxation_is_a_floor_never_a_tightening() -> None:
    m = machine()
    [cid] = pool(m, borrowed=1)
    [relax] = of(m.notification(cid, Migrating(1), 0.0), Relax)
    assert relax.timeouts.effective(60.0, 0.0) == 60.0
    assert relax.timeouts.effective(None, 0.0) is None


# ---------------------------------------------------------------------- explicit MOVING


def test_explicit_moving_marks_the_pool_and_moves_the_dial_target() -> None:
    m = machine()
    idle1, idle2, busy, reader = pool(m, idle=2, borrowed=2)
    actions = m.notification(reader, Moving(1001, 15.0, B), 1.0)
    [started] = events(actions, MovingStarted)
    assert (started.seq_id, started.endpoint, started.deadline) == (1001, str(B), 16.0)
    assert SetDialTarget(B) in actions and MovingSeen() in actions
    # Every connection on A is asked for: the idle ones are taken at once (the machine
    # does not track idle vs lent; the pool's idle list answers).
    assert sorted(a.conn_id for a in of(actions, TakeIdle)) == [idle1, idle2, busy, reader]
    assert m.dial_target(1.0) == B
    claimed = m.claimed(idle1, True, 1.0)
    assert StartHandoff(idle1, B, 1001) in claimed
    assert events(claimed, HandoffQueued)
    # Busy ones and the reader are not in the idle list: queued when released.
    assert m.claimed(busy, False, 1.0) == []
    record = m.record(busy)
    assert record is not None and record.mark is not None and record.mark.target == B
    verdict, released = m.released(busy, 2.0)
    assert verdict is Verdict.TAKEN and StartHandoff(busy, B, 1001) in released


def test_a_connection_being_checked_out_is_taken_by_acquire() -> None:
    m = machine()
    [cid] = pool(m, idle=1)
    m.notification(cid, Moving(1, 10.0, B), 0.0)  # read by the health check
    assert m.claimed(cid, False, 0.0) == []  # not in the idle list any more
    verdict, actions = m.acquired(cid, False, 0.0)
    assert verdict is Verdict.TAKEN and of(actions, StartHandoff)


def test_successful_handoff_gives_back_with_post_handoff_relaxation() -> None:
    m = machine()
    [cid] = pool(m, borrowed=1)
    m.notification(cid, Moving(1, 10.0, B), 0.0)
    m.released(cid, 0.5)
    assert m.attempt_started(cid, 0.5) == B
    running = m.record(cid)
    assert running is not None and running.phase is Phase.RUNNING
    actions = m.handoff_result(cid, Outcome.OK, 0.75)
    record = m.record(cid)
    assert record is not None
    assert GiveBack(cid) in actions
    [done] = events(actions, HandoffSucceeded)
    assert done.latency == pytest.approx(0.25) and done.endpoint == str(B)
    [relax] = of(actions, Relax)
    duration = m.config.post_handoff_relaxed_duration
    assert relax.timeouts.is_relaxed(0.75 + duration - 0.01)
    assert not relax.timeouts.is_relaxed(0.75 + duration)
    assert record.endpoint == B and record.phase is Phase.POOL and record.mark is None
    assert m.state(1.0).completed_handoffs == 1


def test_replays_change_nothing() -> None:
    m = machine()
    first, second = pool(m, borrowed=2)
    assert events(m.notification(first, Moving(5, 10.0, B), 0.0), MovingStarted)
    # The same MOVING on another connection: not new client-wide, applied to it only.
    again = m.notification(second, Moving(5, 10.0, B), 0.1)
    assert events(again, MovingStarted) == [] and again == []
    # An older one: stale.
    assert m.notification(first, Moving(4, 10.0, C), 0.2) == []
    assert m.dial_target(0.2) == B


def test_moving_to_where_the_connection_already_is_clears_its_mark() -> None:
    m = machine()
    [cid] = pool(m, borrowed=1)
    m.notification(cid, Moving(1, 10.0, B), 0.0)
    m.notification(cid, Moving(2, 10.0, A), 0.1)  # changed its mind: stay on A
    record = m.record(cid)
    assert record is not None and record.mark is None
    assert kept(m.released(cid, 0.2))


# ------------------------------------------------------------------- null endpoint


def test_null_endpoint_waits_half_the_time() -> None:
    m = machine()
    idle, busy = pool(m, idle=1, borrowed=1)
    actions = m.notification(busy, Moving(7, 10.0, None), 0.0)
    assert ScheduleTimer(5.0) in actions and not of(actions, TakeIdle)
    assert kept(m.released(busy, 4.9))  # not due yet: pooled
    assert m.timer_fired(4.9) == [ScheduleTimer(5.0)]
    due = m.timer_fired(5.0)
    assert sorted(a.conn_id for a in of(due, TakeIdle)) == sorted([idle, busy])
    assert StartHandoff(idle, A, 7) in m.claimed(idle, True, 5.0)  # to the same address


def test_readonly_expedites_null_endpoint_handoffs() -> None:
    m = machine()
    idle, busy = pool(m, idle=1, borrowed=1)
    m.notification(busy, Moving(7, 10.0, None), 0.0)
    verdict, actions = m.readonly(busy, A, 0.5)
    assert verdict is ReadonlyVerdict.RETRY
    assert sorted(a.conn_id for a in of(actions, TakeIdle)) == sorted([idle, busy])
    assert m.released(busy, 0.6)[0] is Verdict.TAKEN


def test_readonly_without_moving_waits_then_raises() -> None:
    m = machine()
    [cid] = pool(m, borrowed=1)
    assert m.readonly(cid, A, 0.0)[0] is ReadonlyVerdict.WAIT
    assert m.readonly(cid, A, 1.0, waited=True)[0] is ReadonlyVerdict.RAISE
    m.notification(cid, Moving(1, 10.0, B), 1.0)
    assert m.readonly(cid, A, 1.1, waited=True)[0] is ReadonlyVerdict.RETRY


def test_readonly_on_a_connection_already_closed_asks_about_its_endpoint() -> None:
    """The pool may close the refused connection before the retry policy asks (its idle
    list was full): the endpoint it talked to still says whether it is moving."""
    m = machine()
    reader, refused = pool(m, borrowed=2)
    m.removed(refused)
    assert m.readonly(refused, A, 0.0)[0] is ReadonlyVerdict.WAIT
    m.notification(reader, Moving(1, 10.0, B), 0.5)
    assert m.readonly(refused, A, 0.6, waited=True)[0] is ReadonlyVerdict.RETRY
    assert m.readonly(refused, C, 0.6, waited=True)[0] is ReadonlyVerdict.RAISE


# ---------------------------------------------------------------------- failures


def test_dial_failures_retry_with_backoff_then_discard() -> None:
    m = machine()
    [cid] = pool(m, borrowed=1)
    m.notification(cid, Moving(1, 10.0, B), 0.0)
    m.released(cid, 0.0)
    assert handoff(m, cid, 0.0, Outcome.DIAL_ERROR) == [ScheduleTimer(0.5)]
    record = m.record(cid)
    assert record is not None and record.phase is Phase.RETRY_WAIT
    assert StartHandoff(cid, B, 1) in m.timer_fired(0.5)
    assert handoff(m, cid, 0.5, Outcome.DIAL_ERROR) == [ScheduleTimer(1.5)]
    m.timer_fired(1.5)
    actions = handoff(m, cid, 1.5, Outcome.DIAL_ERROR)
    [discard] = of(actions, Discard)
    assert discard.conn_id == cid
    [failed] = events(actions, HandoffFailed)
    assert "3 dial attempts" in failed.error
    assert m.state(2.0).failed_handoffs == 1


def test_a_handoff_failed_behind_an_open_breaker_names_the_target_it_tried() -> None:
    """A connection waiting to retry whose mark is dropped (a later MOVING finds the
    target's breaker open) fails naming the endpoint it tried, not where it is."""
    m = machine()
    cids = pool(m, borrowed=6)
    m.notification(cids[0], Moving(1, 10.0, B), 0.0)
    for cid in cids:
        m.released(cid, 0.0)
    for cid in cids[:5]:  # the breaker opens after these
        handoff(m, cid, 0.0, Outcome.DIAL_ERROR)
    m.notification(cids[5], Moving(2, 10.0, B), 0.1)
    failed = events(m.timer_fired(0.5), HandoffFailed)
    assert {f.conn_id for f in failed} == set(cids[:5])
    assert {f.endpoint for f in failed} == {str(B)}


def test_other_errors_are_not_retried() -> None:
    m = machine()
    [cid] = pool(m, borrowed=1)
    m.notification(cid, Moving(1, 10.0, B), 0.0)
    m.released(cid, 0.0)
    assert of(handoff(m, cid, 0.0, Outcome.ERROR), Discard)


def test_breaker_opens_then_moving_to_that_endpoint_marks_nothing() -> None:
    config = MaintConfig(circuit_breaker_failure_threshold=2, max_handoff_retries=1)
    m = machine(config)
    conns = pool(m, borrowed=3)
    m.notification(conns[0], Moving(1, 10.0, B), 0.0)
    for cid in conns:
        assert m.released(cid, 0.0)[0] is Verdict.TAKEN
    for cid in conns[:2]:
        handoff(m, cid, 0.0, Outcome.DIAL_ERROR)
    breaker = m.breakers.peek(B)
    assert breaker is not None and breaker.state is BreakerState.OPEN
    # The third, queued before, is refused by the breaker when its attempt starts.
    assert m.attempt_started(conns[2], 0.0) is None
    assert of(m.handoff_result(conns[2], Outcome.BREAKER_OPEN, 0.0), Discard)
    # A connection marked for B while the breaker is open stays where it is.
    [late] = pool(m, borrowed=1)
    m.notification(late, Moving(1, 10.0, B), 0.5)
    assert kept(m.released(late, 0.5))
    # New connections dial the configured endpoint while it is open.
    assert m.dial_target(1.0) == A
    [fresh] = pool(m, borrowed=1, now=1.0)
    m.notification(fresh, Moving(2, 10.0, B), 1.0)
    record = m.record(fresh)
    assert record is not None and record.mark is None  # no churn


def test_breakers_exist_only_for_dialed_endpoints_and_are_bounded() -> None:
    m = machine()
    [cid] = pool(m, borrowed=1)
    for i in range(10_000):
        m.notification(cid, Moving(i + 1, 10.0, Endpoint(f"10.1.{i // 250}.{i % 250}", 7000)), i)
    assert len(m.breakers) == 0  # nothing was dialed
    for i in range(10_000):
        m.notification(cid, Moving(20_000 + i, 10.0, Endpoint(f"10.2.{i // 250}.{i % 250}", 1)), i)
        m.dial_result(m.dial_target(float(i)), False, float(i))
    assert len(m.breakers) <= MAX_BREAKERS


# -------------------------------------------------------------------- retargeting


def test_newer_moving_retargets_a_queued_handoff() -> None:
    m = machine()
    [cid] = pool(m, borrowed=1)
    m.notification(cid, Moving(1, 10.0, B), 0.0)
    m.released(cid, 0.0)
    m.notification(cid, Moving(2, 10.0, C), 0.1)  # read from the old stream
    assert m.attempt_started(cid, 0.2) == C


def test_newer_moving_during_an_attempt_redoes_it() -> None:
    m = machine()
    [cid] = pool(m, borrowed=1)
    m.notification(cid, Moving(1, 10.0, B), 0.0)
    m.released(cid, 0.0)
    assert m.attempt_started(cid, 0.0) == B
    m.notification(cid, Moving(2, 10.0, C), 0.1)
    actions = m.handoff_result(cid, Outcome.OK, 0.2)
    assert StartHandoff(cid, C, 2) in actions and GiveBack(cid) not in actions
    assert m.attempt_started(cid, 0.3) == C


def test_moving_back_cancels_a_queued_handoff() -> None:
    m = machine()
    [cid] = pool(m, borrowed=1)
    m.notification(cid, Moving(1, 10.0, B), 0.0)
    m.released(cid, 0.0)
    actions = m.notification(cid, Moving(2, 10.0, A), 0.1)
    assert CancelHandoff(cid) in actions and GiveBack(cid) in actions
    record = m.record(cid)
    assert record is not None and record.phase is Phase.POOL


def test_a_connection_is_paced_after_a_burst_of_handoffs() -> None:
    m = machine()
    [cid] = pool(m, borrowed=1)
    # Two moves in quick succession (A -> B -> C) are never delayed ...
    m.notification(cid, Moving(1, 10.0, B), 0.0)
    m.released(cid, 0.0)
    handoff(m, cid, 0.1, Outcome.OK)
    m.acquired(cid, False, 0.2)
    m.notification(cid, Moving(1, 10.0, C), 0.2)  # from B
    assert m.released(cid, 0.2)[0] is Verdict.TAKEN
    handoff(m, cid, 0.3, Outcome.OK)
    m.acquired(cid, False, 0.4)
    # ... a third start within HANDOFF_PACING of the first is (a flood of MOVINGs).
    actions = m.notification(cid, Moving(1, 10.0, A), 0.4)  # from C
    assert ScheduleTimer(0.0 + HANDOFF_PACING) in actions
    assert kept(m.released(cid, 0.5))
    # A READONLY from the old endpoint (it refuses writes already) starts it at once.
    verdict, expedited = m.readonly(cid, C, 0.6)
    assert verdict is ReadonlyVerdict.RETRY and TakeIdle(cid) in expedited
    assert StartHandoff(cid, A, 1) in m.claimed(cid, True, 0.6)


def test_the_pacing_timer_starts_a_paced_handoff() -> None:
    m = machine()
    [cid] = pool(m, borrowed=1)
    for seq, (target, at) in enumerate([(B, 0.0), (C, 0.2)], start=1):
        m.notification(cid, Moving(seq, 10.0, target), at)
        m.released(cid, at)
        handoff(m, cid, at + 0.1, Outcome.OK)
        m.acquired(cid, False, at + 0.1)
    # Started at 0.0 and 0.2: the third may start at 0.0 + HANDOFF_PACING.
    assert ScheduleTimer(0.0 + HANDOFF_PACING) in m.notification(cid, Moving(1, 10.0, A), 0.4)
    m.released(cid, 0.5)
    assert of(m.timer_fired(0.0 + HANDOFF_PACING), TakeIdle) == [TakeIdle(cid)]


def test_retargeting_an_attempt_is_paced_too() -> None:
    """A MOVING that retargets a running handoff redoes it when the attempt ends: that is
    a start too, so a flood of retargets cannot bypass the pacing."""
    m = machine()
    [cid] = pool(m, borrowed=1)
    m.notification(cid, Moving(1, 10.0, B), 0.0)
    m.released(cid, 0.0)
    targets = [C, B, C, B]
    started = 0
    now = 0.0
    for seq, target in enumerate(targets, start=2):
        if m.attempt_started(cid, now) is not None:
            started += 1
        m.notification(cid, Moving(seq, 10.0, target), now + 0.01)  # read on the old stream
        m.handoff_result(cid, Outcome.OK, now + 0.02)
        now += 0.02
    assert started <= 2  # within one second


def test_dial_that_raced_a_moving_is_marked_unless_it_fell_back() -> None:
    m = machine()
    [reader] = pool(m, borrowed=1)
    m.notification(reader, Moving(1, 10.0, B), 0.0)
    m.register(50, A, 0.1)  # its dial started before the MOVING
    raced = m.record(50)
    assert raced is not None and raced.mark is not None and raced.mark.target == B
    m.register(51, A, 0.1, fallback=True)  # B was unreachable: it fell back
    fell = m.record(51)
    assert fell is not None and fell.mark is None


# ------------------------------------------------------------------------ seqID rule


def test_each_node_numbering_afresh() -> None:
    """A -> B -> A -> B where every node numbers its MOVINGs from 1001."""
    m = machine()
    [cid] = pool(m, borrowed=1)
    assert events(m.notification(cid, Moving(1001, 5.0, B), 0.0), MovingStarted)
    m.released(cid, 0.0)
    handoff(m, cid, 0.0, Outcome.OK)
    m.acquired(cid, False, 2.0)
    assert events(m.notification(cid, Moving(1001, 5.0, A), 2.0), MovingStarted)  # from B
    assert m.released(cid, 3.0)[0] is Verdict.TAKEN
    handoff(m, cid, 3.0, Outcome.OK)
    m.acquired(cid, False, 3.5)
    # Before the move to A completed (its time runs out at 7.0): 1001 from A is a replay.
    assert events(m.notification(cid, Moving(1001, 5.0, B), 3.5), MovingStarted) == []
    # Once it has, A may number afresh.
    assert events(m.notification(cid, Moving(1001, 5.0, B), 7.0), MovingStarted)


def test_client_wide_increasing_numbering() -> None:
    m = machine()
    [cid] = pool(m, borrowed=1)
    for seq, (target, now) in enumerate([(B, 0.0), (A, 2.0), (B, 4.0)], start=1001):
        if seq > 1001:
            m.acquired(cid, False, now)
        assert events(m.notification(cid, Moving(seq, 5.0, target), now), MovingStarted)
        assert m.released(cid, now)[0] is Verdict.TAKEN  # moves 2 s apart: never paced
        handoff(m, cid, now, Outcome.OK)
    record = m.record(cid)
    assert record is not None and record.endpoint == B


# ------------------------------------------------------------------------- pub/sub


def test_pubsub_follows_moving_and_keeps_its_connection_on_failure() -> None:
    m = machine()
    m.register(-1, A, 0.0, kind=ConnKind.PUBSUB)
    actions = m.notification(-1, Moving(1, 10.0, B), 0.0)
    assert StartHandoff(-1, B, 1) in actions  # make-before-break, at once
    assert m.attempt_started(-1, 0.0) == B
    actions = m.handoff_result(-1, Outcome.ERROR, 0.1)
    assert GiveBack(-1) in actions and not of(actions, Discard)
    record = m.record(-1)
    assert record is not None and record.phase is Phase.POOL and record.endpoint == A


def test_pubsub_null_endpoint_waits_half_the_time() -> None:
    m = machine()
    m.register(-1, A, 0.0, kind=ConnKind.PUBSUB)
    actions = m.notification(-1, Moving(1, 8.0, None), 0.0)
    assert not of(actions, StartHandoff) and ScheduleTimer(4.0) in actions
    assert StartHandoff(-1, A, 1) in m.timer_fired(4.0)


def test_removed_connection_withdraws_its_handoff() -> None:
    m = machine()
    [cid] = pool(m, borrowed=1)
    m.notification(cid, Moving(1, 10.0, B), 0.0)
    m.released(cid, 0.0)
    assert m.removed(cid) == [CancelHandoff(cid)]
    assert m.handoff_result(cid, Outcome.OK, 0.1) == []


def test_handshake_refusal() -> None:
    enabled = machine(MaintConfig(mode="enabled"))
    assert enabled.handshake_refused("a:1", "ERR", 0.0) == (True, [])
    auto = machine()
    fail, actions = auto.handshake_refused("a:1", "ERR unknown", 0.0)
    assert not fail and events(actions, MaintenanceDisabled)
    assert auto.mode is MaintMode.DISABLED
    assert auto.handshake_refused("a:1", "ERR unknown", 1.0) == (False, [])


# ------------------------------------------------------------------ stateful model

ENDPOINTS = (A, B, C)
NOTIFICATIONS: st.SearchStrategy[Notification] = st.one_of(
    st.builds(Migrating, st.integers(1, 5)),
    st.builds(Migrated, st.integers(1, 5)),
    st.builds(FailingOver, st.integers(1, 5)),
    st.builds(FailedOver, st.integers(1, 5)),
    st.builds(
        Moving,
        st.integers(1000, 1010),
        st.sampled_from([0.0, 1.0, 4.0, 15.0]),
        st.sampled_from([*ENDPOINTS, None]),
    ),
)


class MachineModel(RuleBasedStateMachine):
    """A model pool, HandoffManager and shell carry out the machine's actions; after
    every step, each connection has exactly one owner and the machine agrees."""

    def __init__(self) -> None:
        super().__init__()
        self.m = MaintenanceMachine(
            MaintConfig(
                max_workers=2,
                handoff_queue_size=4,
                circuit_breaker_failure_threshold=2,
                circuit_breaker_reset_timeout=3.0,
            ),
            A,
            pool_size=4,
        )
        self.now = 0.0
        self.next_id = 1
        self.owner: dict[int, str] = {}  # id -> idle | borrowed | manager | retry | shell
        self.running: set[int] = set()
        self.wake = float("inf")
        self.policies: dict[int, Any] = {}
        self.accepted: dict[Endpoint, int] = {}
        self.arrivals: dict[Endpoint, float] = {}

    # -- carrying out actions ----------------------------------------------------------

    def run(self, actions: Sequence[Action]) -> None:
        work = list(actions)
        while work:
            action = work.pop(0)
            if isinstance(action, TakeIdle):
                ok = self.owner.get(action.conn_id) == "idle"
                if ok:
                    self.owner[action.conn_id] = "shell"
                work[:0] = self.m.claimed(action.conn_id, ok, self.now)
            elif isinstance(action, StartHandoff):
                where = self.owner.get(action.conn_id)
                assert where in ("shell", "borrowed", "pubsub"), (action, where)
                if where != "pubsub":
                    self.owner[action.conn_id] = "manager"
            elif isinstance(action, CancelHandoff):
                if self.owner.get(action.conn_id) == "manager":
                    self.owner[action.conn_id] = "shell"
            elif isinstance(action, GiveBack):
                where = self.owner.get(action.conn_id)
                if where != "pubsub":
                    assert where in ("shell", "manager", "retry"), (action, where)
                    self.owner[action.conn_id] = "idle"
            elif isinstance(action, Discard):
                assert self.owner.get(action.conn_id) in ("shell", "manager", "retry"), action
                del self.owner[action.conn_id]
                work[:0] = self.m.removed(action.conn_id)
            elif isinstance(action, ScheduleTimer):
                assert action.at >= self.now
                self.wake = min(self.wake, action.at)
            elif isinstance(action, Relax):
                self.policies[action.conn_id] = action.timeouts
            elif isinstance(action, Restore):
                self.policies.pop(action.conn_id, None)

    def ids(self, *owners: str) -> list[int]:
        return sorted(i for i, o in self.owner.items() if o in owners)

    # -- rules ---------------------------------------------------------------------------

    @rule(endpoint=st.sampled_from(ENDPOINTS), pubsub=st.booleans())
    def dial(self, endpoint: Endpoint, pubsub: bool) -> None:
        cid = self.next_id
        self.next_id += 1
        kind = ConnKind.PUBSUB if pubsub else ConnKind.POOLED
        self.owner[cid] = "pubsub" if pubsub else "borrowed"
        self.run(self.m.register(cid, endpoint, self.now, kind=kind))
        if not pubsub:
            verdict, actions = self.m.acquired(cid, True, self.now)
            assert verdict is Verdict.KEEP
            self.run(actions)

    @precondition(lambda self: self.ids("idle"))
    @rule(data=st.data())
    def acquire(self, data: st.DataObject) -> None:
        cid = data.draw(st.sampled_from(self.ids("idle")))
        self.owner[cid] = "borrowed"
        if self.m.quick_acquired(cid, False):  # as the shell: the fast path first
            return
        verdict, actions = self.m.acquired(cid, False, self.now)
        if verdict is Verdict.TAKEN:
            self.owner[cid] = "shell"
        self.run(actions)

    @precondition(lambda self: self.ids("borrowed"))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        cid = data.draw(st.sampled_from(self.ids("borrowed")))
        if self.m.quick_released(cid):
            self.owner[cid] = "idle"
            return
        verdict, actions = self.m.released(cid, self.now)
        self.owner[cid] = "shell" if verdict is Verdict.TAKEN else "idle"
        self.run(actions)

    @precondition(lambda self: self.ids("idle", "borrowed", "pubsub"))
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        cid = data.draw(st.sampled_from(self.ids("idle", "borrowed", "pubsub")))
        del self.owner[cid]
        self.run(self.m.removed(cid))

    @precondition(lambda self: self.owner)
    @rule(data=st.data(), n=NOTIFICATIONS)
    def notify(self, data: st.DataObject, n: Notification) -> None:
        cid = data.draw(st.sampled_from(sorted(self.owner)))
        record = self.m.record(cid)
        assert record is not None
        source = record.endpoint
        expect_new = False
        if isinstance(n, Moving):
            # The seqID rule, mirrored: new when higher than any accepted from this
            # source since a move to the source last completed.
            arrived = self.arrivals.get(source)
            if arrived is not None and self.now >= arrived:
                del self.arrivals[source]
                self.accepted.pop(source, None)
            latest = self.accepted.get(source)
            expect_new = latest is None or n.seq_id > latest
            if expect_new:
                self.accepted[source] = n.seq_id
                # A null endpoint moves the client to the same address (its dial target).
                arrival = n.endpoint or self.m.state(self.now).dial_target
                self.arrivals[arrival] = self.now + n.time
        actions = self.m.notification(cid, n, self.now)
        started = [a for a in actions if isinstance(a, Emit) and isinstance(a.event, MovingStarted)]
        assert bool(started) == expect_new, "a stale MOVING was re-applied (or a new one lost)"
        self.run(actions)

    def handed(self) -> list[int]:
        subscribers = [
            cid
            for cid in self.ids("pubsub")
            if (r := self.m.record(cid)) is not None and r.phase in (Phase.QUEUED, Phase.RUNNING)
        ]
        return self.ids("manager") + subscribers

    @precondition(lambda self: self.handed())
    @rule(data=st.data(), outcome=st.sampled_from(list(Outcome)))
    def attempt(self, data: st.DataObject, outcome: Outcome) -> None:
        cid = data.draw(st.sampled_from(self.handed()))
        record = self.m.record(cid)
        assert record is not None
        if record.phase is Phase.QUEUED and outcome is not Outcome.QUEUE_FULL:
            assert record.mark is not None
            breaker = self.m.breakers.peek(record.mark.target)
            blocked = breaker is not None and breaker.blocks(self.now)
            target = self.m.attempt_started(cid, self.now)
            if target is None:
                outcome = Outcome.BREAKER_OPEN
            else:
                assert not blocked, "a handoff started to an endpoint whose breaker is open"
        subscriber = self.owner[cid] == "pubsub"
        # Exactly one outcome per attempt: the connection leaves the manager, then the
        # actions say where it goes (queued again, retry wait, idle, or closed).
        if not subscriber:
            self.owner[cid] = "shell"
        self.run(self.m.handoff_result(cid, outcome, self.now, "x"))
        after = self.m.record(cid)
        if not subscriber and after is not None and after.phase is Phase.RETRY_WAIT:
            assert self.owner[cid] == "shell"
            self.owner[cid] = "retry"
        if cid in self.owner:
            assert self.owner[cid] != "shell", f"conn {cid} left with no owner"

    @rule(dt=st.sampled_from([0.05, 0.5, 1.0, 2.5, 8.0]))
    def tick(self, dt: float) -> None:
        self.now += dt
        if self.now >= self.wake:
            self.wake = float("inf")
            actions = self.m.timer_fired(self.now)
            starts = {a.conn_id for a in actions if isinstance(a, StartHandoff)}
            for cid in self.ids("retry"):
                if cid in starts:
                    self.owner[cid] = "shell"
            self.run(actions)

    @precondition(lambda self: self.ids("borrowed"))
    @rule(data=st.data(), waited=st.booleans())
    def readonly(self, data: st.DataObject, waited: bool) -> None:
        cid = data.draw(st.sampled_from(self.ids("borrowed")))
        record = self.m.record(cid)
        assert record is not None
        _verdict, actions = self.m.readonly(cid, record.endpoint, self.now, waited=waited)
        self.run(actions)

    # -- invariants ----------------------------------------------------------------------

    @invariant()
    def one_owner_and_the_machine_agrees(self) -> None:
        phases = {
            "idle": {Phase.POOL},
            "borrowed": {Phase.POOL},
            "manager": {Phase.QUEUED, Phase.RUNNING},
            "retry": {Phase.RETRY_WAIT},
            "pubsub": {Phase.POOL, Phase.QUEUED, Phase.RUNNING, Phase.RETRY_WAIT},
        }
        known = {r.conn_id for r in self.m.records()}
        assert known == set(self.owner)
        for cid, where in self.owner.items():
            record = self.m.record(cid)
            assert record is not None
            assert where != "shell", f"conn {cid} held by nobody"
            assert record.phase in phases[where], (cid, where, record.phase)

    @invariant()
    def relaxation_never_tightens(self) -> None:
        for timeouts in self.policies.values():
            for configured in (0.1, 5.0, 100.0):
                effective = timeouts.effective(configured, self.now)
                assert effective is not None and effective >= configured
            assert timeouts.effective(None, self.now) is None

    @invariant()
    def bounded(self) -> None:
        assert len(self.m.breakers) <= MAX_BREAKERS
        pending = self.m.state(self.now).pending_handoffs
        assert pending <= len(self.owner)

    @invariant()
    def a_timer_is_asked_for_every_future_due(self) -> None:
        for record in self.m.records():
            if record.phase is Phase.RETRY_WAIT:
                assert record.retry_at is not None and self.wake <= record.retry_at


TestMachineModel = MachineModel.TestCase
TestMachineModel.settings = settings(
    max_examples=300,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


# ------------------------------------------------------------------------- seqIDs


def test_seqids_are_per_source_and_restart_after_an_arrival() -> None:
    seqs = MovingSeqIds()
    assert seqs.is_new(A, 1001, 0.0)
    seqs.accept(A, 1001, B, 5.0)
    assert not seqs.is_new(A, 1001, 1.0) and not seqs.is_new(A, 1000, 1.0)
    assert seqs.is_new(A, 1002, 1.0)
    assert seqs.is_new(B, 1001, 1.0)  # another source: its own numbering
    seqs.accept(B, 1001, A, 8.0)  # B -> A, complete at 8.0
    assert not seqs.is_new(A, 1001, 7.9)  # a late replay of A's own MOVING
    assert seqs.is_new(A, 1001, 8.0)  # back on A after the move: A may number afresh


def test_seqids_remember_a_bounded_number_of_endpoints() -> None:
    seqs = MovingSeqIds(max_sources=8)
    for i in range(1000):
        source = Endpoint(f"10.9.{i // 250}.{i % 250}", 1)
        seqs.accept(source, i, Endpoint("10.8.0.1", 1), 1.0)
    assert len(seqs) == 8
    assert len(seqs._arrivals) <= 8


# ------------------------------------------------------------------ target policy


def policy_machine(endpoint_type: str, **config: Any) -> MaintenanceMachine:
    kind = EndpointType(endpoint_type)
    cfg = MaintConfig(**config)
    policy = TargetPolicy(kind, A, cfg.trusted_targets, cfg.target_check)
    return MaintenanceMachine(cfg, A, pool_size=4, policy=policy)


@pytest.mark.parametrize(
    ("endpoint_type", "target", "followed"),
    [
        ("internal-ip", Endpoint("10.9.0.1", 7000), True),
        ("internal-ip", Endpoint("127.0.0.2", 6379), True),
        ("internal-ip", Endpoint("8.8.8.8", 6379), False),  # a public address
        ("internal-ip", Endpoint("evil.example.com", 6379), False),  # a name
        ("internal-ip", Endpoint("fd00::1", 6379), False),  # another address family
        ("external-ip", Endpoint("8.8.8.8", 6379), True),
        ("external-ip", Endpoint("evil.example.com", 6379), False),
        ("internal-fqdn", Endpoint("node-2.db.internal", 6379), True),
        ("internal-fqdn", Endpoint("10.9.0.1", 6379), False),
        ("none", Endpoint("10.9.0.1", 6379), False),
        ("none", A, True),  # the configured endpoint is always trusted
    ],
)
def test_the_default_target_policy_follows_the_endpoint_type(
    endpoint_type: str, target: Endpoint, followed: bool
) -> None:
    m = policy_machine(endpoint_type)
    [cid] = pool(m, borrowed=1)
    actions = m.notification(cid, Moving(1, 10.0, target), 0.0)
    refused = events(actions, MovingRefused)
    record = m.record(cid)
    assert record is not None
    if target == A:
        assert not refused and record.mark is None  # already there
    elif followed:
        assert not refused
        assert record.mark is not None and record.mark.target == target
    else:
        assert record.mark is not None
        assert [r.endpoint for r in refused] == [str(target)] and refused[0].reason
        # Handled as a null endpoint: the configured address, after time / 2.
        assert (record.mark.target, record.mark.null, record.mark.due) == (A, True, 5.0)
        assert SetDialTarget(target) not in actions
        assert m.dial_target(0.0) == A


def test_the_user_may_trust_more_targets() -> None:
    m = policy_machine(
        "internal-ip",
        trusted_targets=(".db.example.com", "203.0.113.0/24"),
        target_check=lambda e: e.port == 7777,
    )
    conns = pool(m, borrowed=4)
    trusted = [
        Endpoint("n1.db.example.com", 6379),
        Endpoint("203.0.113.9", 6379),
        Endpoint("8.8.8.8", 7777),
    ]
    for seq, (cid, target) in enumerate(zip(conns, trusted, strict=False), start=1):
        m.record(cid)
        assert not events(m.notification(cid, Moving(seq, 10.0, target), float(seq)), MovingRefused)
    assert events(
        m.notification(conns[3], Moving(9, 10.0, Endpoint("8.8.8.8", 1)), 9.0), MovingRefused
    )


def test_a_target_check_that_raises_refuses() -> None:
    def broken(endpoint: Endpoint) -> bool:
        raise RuntimeError("user bug")

    m = policy_machine("internal-ip", target_check=broken)
    [cid] = pool(m, borrowed=1)
    assert events(
        m.notification(cid, Moving(1, 10.0, Endpoint("8.8.8.8", 6379)), 0.0), MovingRefused
    )


def test_malformed_trusted_targets_fail_at_construction() -> None:
    with pytest.raises(ValueError, match="trusted_targets"):
        MaintConfig(trusted_targets=("10.0.0.0/33",))
    with pytest.raises(ValueError, match="trusted_targets"):
        MaintConfig(trusted_targets=("",))
