"""Adversarial tests of the sans-IO MaintenanceMachine (plain function calls, no Trio).

Each test is a minimal reproducer of a rule of docs/maintenance.md that the machine once
broke (found by an adversarial review; fixed since); the stateful model at the end extends
the one of
tests/test_maint_machine.py with rules it lacks (pub/sub reconnecting by itself, READONLY
about removed connections, a refused handshake, dials through the breaker, timers and
MOVING times far in the future) and currently holds.
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from trio_maint._sansio.breaker import BreakerState
from trio_maint._sansio.config import MaintConfig
from trio_maint._sansio.endpoint import Endpoint
from trio_maint._sansio.events import HandoffSucceeded, MovingStarted
from trio_maint._sansio.maint import HANDOFF_BURST, HANDOFF_PACING, MaintenanceMachine
from trio_maint._sansio.maint_types import (
    Action,
    CancelHandoff,
    ConnKind,
    Emit,
    Outcome,
    SetDialTarget,
    StartHandoff,
    TakeIdle,
    Verdict,
)
from trio_maint._sansio.notifications import Moving

from .test_maint_machine import ENDPOINTS, MachineModel

A = Endpoint("10.0.0.1", 6379)
B = Endpoint("10.0.0.2", 6379)
C = Endpoint("10.0.0.3", 6379)


def new_machine(config: MaintConfig | None = None) -> MaintenanceMachine:
    return MaintenanceMachine(
        config or MaintConfig(max_workers=4, handoff_queue_size=10), A, pool_size=4
    )


def borrowed(m: MaintenanceMachine, cid: int, endpoint: Endpoint, now: float = 0.0) -> None:
    """A connection to ``endpoint`` dialed for a borrower that keeps it."""
    m.register(cid, endpoint, now)
    verdict, _actions = m.acquired(cid, True, now)
    assert verdict is Verdict.KEEP


def successes(actions: Sequence[Action], cid: int) -> list[HandoffSucceeded]:
    return [
        a.event
        for a in actions
        if isinstance(a, Emit) and isinstance(a.event, HandoffSucceeded) and a.event.conn_id == cid
    ]


# ------------------------------------------------------------------------------ pacing


def test_retargeting_during_attempts_bypasses_handoff_pacing() -> None:
    """docs/maintenance.md, "Bounds on churn": a connection completes at most 2 handoffs in
    any 1 s; a newer MOVING meanwhile becomes its one pending target, applied when the
    window allows. Here every attempt of connection X is retargeted by a MOVING read on a
    connection of the endpoint X is leaving (a hostile flood from every node): X completes
    a handoff every 20 ms."""
    m = new_machine()
    x, on_a, on_b, on_c = 1, 2, 3, 4
    for cid, endpoint in ((x, A), (on_a, A), (on_b, B), (on_c, C)):
        borrowed(m, cid, endpoint)
    done: list[HandoffSucceeded] = []

    m.notification(on_a, Moving(1, 10.0, B), 0.0)  # A -> B
    verdict, _ = m.released(x, 0.0)
    assert verdict is Verdict.TAKEN
    assert m.attempt_started(x, 0.0) == B
    # While X dials B, A says C; B says A; C says B; each read during an attempt of X.
    for step, (reader, seq, target) in enumerate(
        [(on_a, 2, C), (on_b, 1, A), (on_c, 1, B), (on_a, 3, C)]
    ):
        now = 0.01 + 0.02 * step
        m.notification(reader, Moving(seq, 10.0, target), now)
        done += successes(m.handoff_result(x, Outcome.OK, now + 0.01), x)
        if m.attempt_started(x, now + 0.01) is None:
            break
    times = [event.time for event in done]
    in_one_second = [t for t in times if t - times[0] < HANDOFF_PACING]
    assert len(in_one_second) <= HANDOFF_BURST, times


# -------------------------------------------------------------------------- seqID rule


def test_a_completed_null_endpoint_move_lets_the_address_number_afresh() -> None:
    """The seqID rule: a source's record is forgotten once a move *to* that endpoint has
    completed (its ``time`` ran out). A null-endpoint MOVING is a move to the current
    address: after it, the address leads to another node, which may number from 1001
    again (as every MaintenanceSimulator does). Its first MOVING must act client-wide."""
    m = new_machine()
    reader, other = 1, 2
    borrowed(m, reader, A)
    borrowed(m, other, A)
    first = m.notification(reader, Moving(1001, 4.0, None), 0.0)
    assert any(isinstance(a, Emit) and isinstance(a.event, MovingStarted) for a in first)
    for cid in (reader, other):  # both reconnect to the same address at time / 2
        assert m.released(cid, 2.0)[0] is Verdict.TAKEN
        assert m.attempt_started(cid, 2.0) == A
        assert successes(m.handoff_result(cid, Outcome.OK, 2.1), cid)
        assert m.acquired(cid, False, 10.0)[0] is Verdict.KEEP
    # Well after the move completed (t = 4), the new node behind A announces its own move.
    actions = m.notification(reader, Moving(1001, 30.0, B), 10.0)
    assert any(isinstance(a, Emit) and isinstance(a.event, MovingStarted) for a in actions)
    assert SetDialTarget(B) in actions
    record = m.record(other)
    assert record is not None and record.mark is not None and record.mark.target == B


# -------------------------------------------------------------------------- breakers


def test_a_subscriber_reconnecting_mid_attempt_gives_back_its_breaker_slot() -> None:
    """A half-open breaker admits ``max_requests`` trial dials; an attempt that ends
    without a verdict must give its slot back (docs: "a dial cancelled ... release"). A
    subscriber whose connection is lost while its handoff dials (it reconnects by itself,
    CancelHandoff) leaks the slot: the breaker then blocks the endpoint, MOVINGs to it
    mark nothing and new connections dial the old endpoint, for a whole reset timeout."""
    config = MaintConfig(
        max_workers=2,
        handoff_queue_size=4,
        circuit_breaker_failure_threshold=1,
        circuit_breaker_reset_timeout=3.0,
        circuit_breaker_max_requests=1,
        max_handoff_retries=1,
    )
    m = new_machine(config)
    borrowed(m, 1, A)
    m.notification(1, Moving(1, 100.0, B), 0.0)
    m.released(1, 0.0)
    m.attempt_started(1, 0.0)
    m.handoff_result(1, Outcome.DIAL_ERROR, 0.0)  # B's breaker opens
    # Past the reset timeout, a subscriber on A follows the move: a trial dial to B.
    m.register(-1, A, 4.0, kind=ConnKind.PUBSUB)
    assert m.attempt_started(-1, 4.0) == B
    breaker = m.breakers.peek(B)
    assert breaker is not None and breaker.state is BreakerState.HALF_OPEN
    # Its old connection is lost meanwhile: the PubSub reconnects by itself.
    assert m.register(-1, A, 4.5, kind=ConnKind.PUBSUB) == [CancelHandoff(-1)]
    # No attempt is under way any more, so no trial slot is in use.
    assert not breaker.blocks(5.0)


# ------------------------------------------------------------------ stateful model


class ExtendedModel(MachineModel):
    """tests/test_maint_machine.py's model plus: a subscriber reconnecting by itself at
    any phase, READONLY about connections that are gone, a refused handshake (mode
    downgrade), new connections dialed through ``dial_target``/``dial_result`` (with
    fallback), MOVING times and clock jumps far in the future."""

    @precondition(lambda self: self.ids("pubsub"))
    @rule(data=st.data(), endpoint=st.sampled_from(ENDPOINTS), fallback=st.booleans())
    def pubsub_reconnects(self, data: st.DataObject, endpoint: Endpoint, fallback: bool) -> None:
        cid = data.draw(st.sampled_from(self.ids("pubsub")))
        self.run(self.m.register(cid, endpoint, self.now, kind=ConnKind.PUBSUB, fallback=fallback))

    @rule(cid=st.integers(1, 40), endpoint=st.sampled_from(ENDPOINTS), waited=st.booleans())
    def readonly_about_a_gone_connection(self, cid: int, endpoint: Endpoint, waited: bool) -> None:
        if cid in self.owner:
            return
        _verdict, actions = self.m.readonly(cid, endpoint, self.now, waited=waited)
        for action in actions:  # nothing may be asked of a connection nobody has
            if isinstance(action, TakeIdle | StartHandoff):
                assert action.conn_id in self.owner, action
        self.run(actions)

    @rule()
    def handshake_refused(self) -> None:
        _fail, actions = self.m.handshake_refused("10.0.0.9:1", "ERR unknown", self.now)
        self.run(actions)

    @rule(dt=st.sampled_from([1e3, 1e6, 1e9]))
    def far_tick(self, dt: float) -> None:
        self.tick(dt)

    @precondition(lambda self: self.owner)
    @rule(
        data=st.data(),
        seq=st.integers(1000, 1010),
        endpoint=st.sampled_from([*ENDPOINTS, None]),
        time=st.sampled_from([1e6, 1e12]),
    )
    def notify_far(
        self, data: st.DataObject, seq: int, endpoint: Endpoint | None, time: float
    ) -> None:
        self.notify(data, Moving(seq, time, endpoint))

    @rule(ok=st.booleans(), pubsub=st.booleans())
    def dial_through_the_breaker(self, ok: bool, pubsub: bool) -> None:
        endpoint = self.m.dial_target(self.now)
        self.m.dial_result(endpoint, ok, self.now)
        fallback = False
        if not ok:
            if endpoint == self.m.configured:
                return
            endpoint, fallback = self.m.configured, True
        cid = self.next_id
        self.next_id += 1
        kind = ConnKind.PUBSUB if pubsub else ConnKind.POOLED
        self.owner[cid] = "pubsub" if pubsub else "borrowed"
        self.run(self.m.register(cid, endpoint, self.now, kind=kind, fallback=fallback))
        if not pubsub:
            verdict, actions = self.m.acquired(cid, True, self.now)
            assert verdict is Verdict.KEEP
            self.run(actions)


TestExtendedModel = ExtendedModel.TestCase
TestExtendedModel.settings = settings(
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
