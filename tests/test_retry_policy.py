"""The sans-IO retry policy (trio_maint._sansio.retry): plain function calls, no trio, no
sockets. The rule under test: never resend what may have run, within bounded budgets,
keeping a pipeline's order."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from trio_maint._sansio import errors as E
from trio_maint._sansio.resend import PipelineRetry, ResendGroup, group_by_target
from trio_maint._sansio.retry import (
    DEFAULT_BACKOFF_MAX,
    DEFAULT_BACKOFF_START,
    STANDALONE_POLICY,
    Ask,
    Decision,
    Finish,
    Kind,
    Outcome,
    Redirect,
    RedirectTarget,
    Retry,
    RetryPolicy,
    RetryState,
    WaitForMoving,
    backoff,
    classify,
    classify_transaction,
    parse_redirect,
)

from ._robust import ROBUST

STANDALONE = RetryPolicy()
CLUSTER = RetryPolicy.for_cluster()


def moved(slot: int = 12, address: str = "10.0.0.2:7001") -> Any:
    return E.MovedError(f"MOVED {slot} {address}")


def ask(slot: int = 12, address: str = "10.0.0.3:7002") -> Any:
    return E.AskError(f"ASK {slot} {address}")


def readonly() -> Any:
    return E.ReadOnlyError("READONLY You can't write against a read only replica.")


def lost(written: bool) -> Outcome:
    return classify(E.ConnectionError("server closed the connection"), written=written)


# ------------------------------------------------------------------------ classification


@pytest.mark.parametrize(
    ("result", "kind"),
    [
        (b"OK", Kind.OK),
        (None, Kind.OK),
        (0, Kind.OK),
        ([b"a", E.ResponseError("ERR x")], Kind.OK),
        (E.TryAgainError("TRYAGAIN Multiple keys request during rehashing of slot"), Kind.TRYAGAIN),
        (E.ClusterDownError("CLUSTERDOWN The cluster is down"), Kind.CLUSTERDOWN),
        (readonly(), Kind.READONLY),
        (E.LoadingError("LOADING Redis is loading the dataset in memory"), Kind.LOADING),
        (E.WrongTypeError("WRONGTYPE Operation against a key"), Kind.OTHER),
        (E.ResponseError("ERR unknown command 'FOO'"), Kind.OTHER),
        (E.ExecAbortError("EXECABORT Transaction discarded"), Kind.OTHER),
        (E.ResponseError(""), Kind.OTHER),
        (E.ResponseError("READONLY by its prefix"), Kind.READONLY),
        (E.DataError("cannot encode"), Kind.OTHER),
        (ValueError("not a Redis error"), Kind.OTHER),
    ],
)
def test_classify_replies(result: object, kind: Kind) -> None:
    outcome = classify(result)
    assert outcome.kind is kind
    assert outcome.value is result
    assert outcome.target is None


def test_classify_redirections_parse_their_target() -> None:
    outcome = classify(moved(3999, "127.0.0.1:6381"))
    assert outcome.kind is Kind.MOVED
    assert outcome.target == RedirectTarget(3999, "127.0.0.1", 6381)
    outcome = classify(ask(5, "node-b.example:7000"))
    assert outcome.kind is Kind.ASK
    assert outcome.target == RedirectTarget(5, "node-b.example", 7000)
    # A plain ResponseError built by hand is classified by its first word.
    assert classify(E.ResponseError("MOVED 1 h:2")).kind is Kind.MOVED
    # A malformed redirection cannot be followed: it goes to the caller.
    assert classify(E.MovedError("MOVED nonsense")).kind is Kind.OTHER
    assert classify(E.AskError("ASK 1 host-without-port")).kind is Kind.OTHER


@pytest.mark.parametrize(
    "error",
    [
        E.ConnectionError("connection refused"),
        E.TimeoutError("timed out"),
        E.ProtocolError("garbage"),
        E.ConnectionClosedError("closed"),
        E.PoolTimeoutError("no connection"),
    ],
)
def test_classify_transport_errors(error: BaseException) -> None:
    # Written (the default): the request may have reached the server.
    assert classify(error).kind is Kind.MAY_HAVE_RUN
    assert classify(error, written=True).kind is Kind.MAY_HAVE_RUN
    # Nothing written: retryable, except what closing or the pool's own wait caused.
    expected = (
        Kind.OTHER
        if isinstance(error, E.ConnectionClosedError | E.PoolTimeoutError)
        else Kind.LOST_BEFORE_WRITE
    )
    assert classify(error, written=False).kind is expected


def test_classify_reads_the_written_flag() -> None:
    """The connection marks what provably was not written (errors.not_written); classify
    reads the flag unless told, and assumes the request was written without one."""
    error = E.ConnectionError("first write failed")
    assert E.request_written(error) is True
    assert classify(error).kind is Kind.MAY_HAVE_RUN
    assert E.not_written(error) is error
    assert error.written is False
    assert E.request_written(error) is False
    assert classify(error).kind is Kind.LOST_BEFORE_WRITE
    # The caller knows better (its acquisition failed, so nothing was written): it says so.
    assert classify(E.ConnectionError("dial refused"), written=False).kind is (
        Kind.LOST_BEFORE_WRITE
    )
    assert classify(error, written=True).kind is Kind.MAY_HAVE_RUN
    closed = E.not_written(E.ConnectionClosedError("closed"))
    assert classify(closed).kind is Kind.OTHER  # closed by its owner: not retried
    assert E.request_written(E.TimeoutError("late")) is True
    assert classify(E.TimeoutError("late")).kind is Kind.MAY_HAVE_RUN


def test_kinds_that_prove_nothing_ran() -> None:
    assert {k for k in Kind if k.proves_not_run} == {
        Kind.MOVED,
        Kind.ASK,
        Kind.TRYAGAIN,
        Kind.CLUSTERDOWN,
        Kind.READONLY,
        Kind.LOADING,
        Kind.LOST_BEFORE_WRITE,
    }
    assert Kind.MOVED.value == "moved"
    assert f"{Kind.LOST_BEFORE_WRITE}" == "lost_before_write"


def test_outcome_needs_a_target_for_redirections() -> None:
    with pytest.raises(ValueError, match="target"):
        Outcome(Kind.MOVED)
    with pytest.raises(ValueError, match="target"):
        Outcome(Kind.ASK, ask())


# --------------------------------------------------------------------------- redirections


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("MOVED 3999 127.0.0.1:6381", (Kind.MOVED, 3999, "127.0.0.1", 6381)),
        ("ASK 0 redis-1.example.com:7000", (Kind.ASK, 0, "redis-1.example.com", 7000)),
        ("MOVED 16383 :6380", (Kind.MOVED, 16383, "", 6380)),
        ("MOVED 7 ::1:7000", (Kind.MOVED, 7, "::1", 7000)),
        ("MOVED 7 fe80::1:2:7000", (Kind.MOVED, 7, "fe80::1:2", 7000)),
        ("ASK 7 [2001:db8::5]:7001", (Kind.ASK, 7, "2001:db8::5", 7001)),
    ],
)
def test_parse_redirect(message: str, expected: tuple[Kind, int, str, int]) -> None:
    kind, target = parse_redirect(message)
    assert (kind, target.slot, target.host, target.port) == expected


@pytest.mark.parametrize(
    "message",
    [
        "",
        "MOVED",
        "MOVED 12",
        "MOVED 12 host",
        "MOVED 12 [::1]",
        "MOVED x host:1",
        "MOVED -1 host:1",
        "MOVED 16384 host:1",
        "MOVED 12 host:0",
        "MOVED 12 host:99999",
        "MOVED 12 host:port",
        "MOVED 12 host:1 extra",
        "TRYAGAIN 12 host:1",
        "moved 12 host:1",
    ],
)
def test_parse_redirect_rejects(message: str) -> None:
    with pytest.raises(ValueError):
        parse_redirect(message)


def test_redirect_target_name_and_address() -> None:
    assert RedirectTarget(1, "10.0.0.1", 7000).name == "10.0.0.1:7000"
    assert RedirectTarget(1, "::1", 7000).name == "[::1]:7000"
    assert RedirectTarget(1, "", 6380).address("10.0.0.9") == ("10.0.0.9", 6380)
    assert RedirectTarget(1, "b", 6380).address("10.0.0.9") == ("b", 6380)
    with pytest.raises(ValueError, match="slot"):
        RedirectTarget(16384, "h", 1)


# ------------------------------------------------------------------------------- policy


def test_backoff_doubles_from_10ms_to_250ms() -> None:
    assert [backoff(n) for n in range(8)] == pytest.approx(
        [0.01, 0.02, 0.04, 0.08, 0.16, 0.25, 0.25, 0.25]
    )
    assert (DEFAULT_BACKOFF_START, DEFAULT_BACKOFF_MAX) == (0.01, 0.25)
    assert backoff(10_000) == 0.25
    assert backoff(2, start=1.0, cap=3.0) == 3.0
    with pytest.raises(ValueError, match="attempt"):
        backoff(-1)


def test_policy_defaults_and_validation() -> None:
    assert STANDALONE.cluster is False
    assert STANDALONE.retry_timeout is None
    assert STANDALONE.max_readonly_retries == 1
    assert STANDALONE.moving_grace == 1.0
    assert CLUSTER.cluster is True
    assert (CLUSTER.max_redirects, CLUSTER.retry_timeout) == (16, 5.0)
    assert RetryPolicy.for_cluster(max_readonly_retries=3).max_readonly_retries == 3
    for bad in (
        {"max_redirects": -1},
        {"retry_timeout": -1.0},
        {"retry_timeout": math.inf},
        {"moving_grace": math.nan},
        {"backoff_start": 0.0},
        {"backoff_start": 0.5, "backoff_max": 0.1},
    ):
        with pytest.raises(ValueError):
            RetryPolicy(**bad)
    with pytest.raises(TypeError):
        RetryPolicy(max_redirects=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        RetryPolicy(retry_timeout="5")  # type: ignore[arg-type]


def test_timed_retry_cap() -> None:
    # 10+20+40+80+160 ms = 0.31 s, then 250 ms steps: 19 more reach 5 s; plus one.
    assert CLUSTER.timed_retry_cap(5.0) == 25
    assert CLUSTER.timed_retry_cap(0.0) == 0
    assert CLUSTER.timed_retry_cap(-1.0) == 0
    assert CLUSTER.timed_retry_cap(0.005) == 2
    assert CLUSTER.timed_retry_cap(1e9) == 4_000_000_005
    assert CLUSTER.max_resends == 16 + 1 + 25
    assert STANDALONE.max_resends == 16 + 1
    assert STANDALONE_POLICY.max_resends == 16 + 1 + 2


# ------------------------------------------------------------------------------ decisions


def test_final_outcomes_are_never_resent() -> None:
    for policy in (STANDALONE, CLUSTER, RetryPolicy.for_cluster(retry_timeout=60.0)):
        state = RetryState(policy)
        assert state.decide(classify(b"OK"), 0.0) == Finish(Kind.OK)
        assert state.decide(classify(E.ResponseError("ERR boom")), 0.0) == Finish(Kind.OTHER)
        for written_error in (
            E.ConnectionError("lost"),
            E.TimeoutError("no reply in time"),
            E.ProtocolError("bad frame"),
        ):
            for moving in (None, True, False):
                for replica in (False, True):
                    decision = state.decide(
                        classify(written_error, written=True), 0.0, moving=moving, replica=replica
                    )
                    assert isinstance(decision, Finish)
                    assert decision.kind is Kind.MAY_HAVE_RUN
                    assert "may have reached the server" in decision.reason
        assert state.resends == 0


def test_standalone_readonly_waits_for_moving_then_retries_once() -> None:
    state = RetryState(STANDALONE)
    refused = classify(readonly())
    decision = state.decide(refused, 0.0)
    assert decision == WaitForMoving(1.0)
    assert decision.resend is False
    assert state.decide(refused, 1.0, moving=True) == Retry(Kind.READONLY, 0.0, False)
    # Refused again after the resend: the budget (once) is spent, the error is raised.
    decision = state.decide(refused, 1.1, moving=True)
    assert isinstance(decision, Finish)
    assert "max_readonly_retries=1" in decision.reason
    assert state.resends == 1


def test_standalone_readonly_with_the_budget_spent_does_not_wait() -> None:
    """Refused again after the one resend: no second wait for a MOVING (it could not
    change the outcome), the READONLY is raised at once."""
    state = RetryState(STANDALONE)
    refused = classify(readonly())
    assert isinstance(state.decide(refused, 0.0), WaitForMoving)
    assert state.decide_after_wait(refused, 0.1, moving=True) == Retry(Kind.READONLY)
    decision = state.decide(refused, 0.2)
    assert isinstance(decision, Finish)
    assert "max_readonly_retries=1" in decision.reason
    # decide_after_wait never asks for a second wait.
    state = RetryState(STANDALONE)
    assert isinstance(state.decide(refused, 0.0), WaitForMoving)
    assert isinstance(state.decide_after_wait(refused, 1.0, moving=False), Finish)


def test_standalone_readonly_without_moving_is_raised() -> None:
    refused = classify(readonly())
    # The wait ended without a MOVING: a genuine read-only server.
    state = RetryState(STANDALONE)
    assert isinstance(state.decide(refused, 0.0), WaitForMoving)
    assert isinstance(state.decide(refused, 1.0, moving=False), Finish)
    # A connection without maintenance notifications: raised at once, no wait.
    state = RetryState(STANDALONE)
    assert isinstance(state.decide(refused, 0.0, moving=False), Finish)
    # A caller that answers the wait with "still unknown" gets no second wait.
    state = RetryState(STANDALONE)
    assert isinstance(state.decide(refused, 0.0), WaitForMoving)
    assert isinstance(state.decide(refused, 1.0), Finish)
    assert state.resends == 0


@pytest.mark.parametrize("budget", [0, 1, 3])
def test_readonly_after_moving_forever_is_bounded(budget: int) -> None:
    """The ~1,000-resends-then-RecursionError bug: a server answering READONLY to every
    write after a MOVING. The caller's loop resends at most ``max_readonly_retries``
    times, then raises the READONLY."""
    state = RetryState(RetryPolicy(max_readonly_retries=budget))
    refused = classify(readonly())
    resends = 0
    for attempt in range(10_000):
        decision = state.decide(refused, float(attempt), moving=True)
        if isinstance(decision, Finish):
            assert decision.kind is Kind.READONLY
            break
        assert isinstance(decision, Retry)
        resends += 1
    else:  # pragma: no cover - the bug
        pytest.fail("never gave up")
    assert resends == budget == state.readonly_retries


def test_standalone_gives_cluster_conditions_to_the_caller() -> None:
    state = RetryState(RetryPolicy(retry_timeout=5.0))
    for error in (
        moved(),
        ask(),
        E.TryAgainError("TRYAGAIN"),
        E.ClusterDownError("CLUSTERDOWN"),
        E.LoadingError("LOADING"),
    ):
        decision = state.decide(classify(error), 0.0, replica=True)
        assert isinstance(decision, Finish)
        assert "outside a cluster client" in decision.reason
    assert state.resends == 0


def test_lost_before_write_needs_a_time_budget() -> None:
    decision = RetryState(STANDALONE).decide(lost(written=False), 0.0)
    assert isinstance(decision, Finish)
    assert "no retry_timeout" in decision.reason
    state = RetryState(RetryPolicy(retry_timeout=1.0))
    assert state.decide(lost(written=False), 0.0) == Retry(Kind.LOST_BEFORE_WRITE, 0.01, False)
    assert state.decide(lost(written=False), 0.01) == Retry(Kind.LOST_BEFORE_WRITE, 0.02, False)
    # The same connection failure after the write: never again.
    assert isinstance(state.decide(lost(written=True), 0.03), Finish)
    # In a cluster the map is refreshed too (the node may be down).
    decision = RetryState(CLUSTER).decide(lost(written=False), 0.0)
    assert decision == Retry(Kind.LOST_BEFORE_WRITE, 0.01, True)


def test_standalone_resends_what_was_not_written_a_few_times() -> None:
    """The standalone client's policy: no time budget, but a request whose connection
    failed before the write (a pooled connection that died while idle) is resent at once,
    at most twice; one that may have been written never."""
    assert STANDALONE_POLICY.retry_timeout is None
    assert STANDALONE_POLICY.max_unsent_retries == 2
    state = RetryState(STANDALONE_POLICY)
    assert state.decide(lost(written=False), 0.0) == Retry(Kind.LOST_BEFORE_WRITE)
    assert state.decide(lost(written=False), 0.0) == Retry(Kind.LOST_BEFORE_WRITE)
    decision = state.decide(lost(written=False), 0.0)
    assert isinstance(decision, Finish)
    assert "max_unsent_retries=2" in decision.reason
    assert state.unsent_retries == state.resends == 2
    assert isinstance(RetryState(STANDALONE_POLICY).decide(lost(written=True), 0.0), Finish)
    # With a time budget (a cluster), the time budget applies instead.
    timed = RetryPolicy(retry_timeout=1.0, max_unsent_retries=2)
    assert timed.max_resends == timed.max_redirects + 1 + timed.timed_retry_cap(1.0)
    decision = RetryState(timed).decide(lost(written=False), 0.0)
    assert decision == Retry(Kind.LOST_BEFORE_WRITE, 0.01, False)
    with pytest.raises(ValueError):
        RetryPolicy(max_unsent_retries=-1)


def test_moved_redirects_and_updates_the_route() -> None:
    state = RetryState(CLUSTER, replica_reads=True)
    decision = state.decide(classify(moved(12, "10.0.0.2:7001")), 0.0, replica=True)
    assert decision == Redirect(RedirectTarget(12, "10.0.0.2", 7001), 0.0, True)
    assert decision.kind is Kind.MOVED and decision.resend
    assert state.replica_reads is False  # the replica did not serve it: use the master
    assert state.redirects == 1


def test_ask_is_followed_once_per_reply() -> None:
    state = RetryState(CLUSTER)
    decision = state.decide(classify(ask(12, "10.0.0.3:7002")), 0.0)
    assert decision == Ask(RedirectTarget(12, "10.0.0.3", 7002), 0.0, False)
    assert decision.kind is Kind.ASK and decision.resend


def test_redirects_back_off_from_the_third_and_are_bounded() -> None:
    policy = RetryPolicy.for_cluster(max_redirects=6)
    state = RetryState(policy)
    decisions: list[Decision] = []
    for n in range(10):
        outcome = classify(moved(1, "a:1") if n % 2 else ask(1, "b:2"))
        decisions.append(state.decide(outcome, float(n)))
        if isinstance(decisions[-1], Finish):
            break
    followed = [d for d in decisions if isinstance(d, Redirect | Ask)]
    assert len(followed) == len(decisions) - 1 == 6 == state.redirects
    assert [d.delay for d in followed] == pytest.approx([0, 0, 0.01, 0.02, 0.04, 0.08])
    # From the third on, a refresh is asked for too (nodes disagree for a moment).
    assert [d.refresh for d in followed if isinstance(d, Ask)] == [False, True, True]
    last = decisions[-1]
    assert isinstance(last, Finish)
    assert "max_redirects=6" in last.reason
    assert "ASK 1 b:2 -> MOVED 1 a:1" in last.reason


def test_loading_replica_read_goes_to_the_master() -> None:
    loading = classify(E.LoadingError("LOADING Redis is loading the dataset in memory"))
    state = RetryState(CLUSTER, replica_reads=True)
    assert state.decide(loading, 0.0, replica=True) == Retry(Kind.LOADING, 0.0, False)
    assert state.replica_reads is False
    assert state.redirects == 1
    # A master loading is not a cluster condition to wait out.
    assert isinstance(state.decide(loading, 0.0, replica=False), Finish)


@pytest.mark.parametrize(
    ("error", "refresh"),
    [
        (E.TryAgainError("TRYAGAIN Multiple keys request during rehashing of slot"), False),
        (E.ClusterDownError("CLUSTERDOWN The cluster is down"), True),
        (E.ReadOnlyError("READONLY You can't write against a read only replica."), True),
    ],
)
def test_time_budgeted_retries_until_the_deadline(error: BaseException, refresh: bool) -> None:
    policy = RetryPolicy.for_cluster(retry_timeout=1.0)
    state = RetryState(policy)
    outcome = classify(error)
    now = 100.0
    delays: list[float] = []
    while True:
        decision = state.decide(outcome, now)
        if isinstance(decision, Finish):
            break
        assert isinstance(decision, Retry)
        assert decision.kind is outcome.kind
        assert decision.refresh is refresh
        delays.append(decision.delay)
        now += decision.delay + 0.001  # the caller sleeps, the attempt takes 1 ms
    assert now >= 101.0
    assert delays[:6] == pytest.approx([0.01, 0.02, 0.04, 0.08, 0.16, 0.25])
    assert sum(delays) <= 1.0 + 1e-9
    assert "time budget spent" in decision.reason
    assert len(delays) == state.timed_retries <= policy.timed_retry_cap(1.0)


def test_budget_counts_from_the_first_failure_and_the_caller_deadline_shortens_it() -> None:
    state = RetryState(RetryPolicy.for_cluster(retry_timeout=5.0), deadline=10.3)
    tryagain = classify(E.TryAgainError("TRYAGAIN"))
    decision = state.decide(tryagain, 10.0)
    assert decision == Retry(Kind.TRYAGAIN, 0.01, False)
    # The last delay is cut to what is left of the deadline.
    decision = state.decide(tryagain, 10.295)
    assert isinstance(decision, Retry)
    assert decision.delay == pytest.approx(0.005)
    assert isinstance(state.decide(tryagain, 10.3), Finish)
    # A deadline already past: nothing is retried.
    state = RetryState(CLUSTER, deadline=1.0)
    assert isinstance(state.decide(tryagain, 2.0), Finish)


def test_time_budget_is_bounded_even_if_the_clock_stands_still() -> None:
    policy = RetryPolicy.for_cluster(retry_timeout=5.0)
    state = RetryState(policy)
    outcome = classify(E.ClusterDownError("CLUSTERDOWN"))
    count = 0
    while not isinstance(state.decide(outcome, 0.0), Finish):
        count += 1
    assert count == policy.timed_retry_cap(5.0)


def test_cluster_readonly_after_moving_retries_at_once() -> None:
    state = RetryState(CLUSTER)
    assert state.decide(classify(readonly()), 0.0, moving=True) == Retry(Kind.READONLY)
    assert state.readonly_retries == 1


def test_watched_transactions_are_never_resent() -> None:
    state = RetryState(RetryPolicy.for_cluster(retry_timeout=5.0), watched=True)
    for outcome in (
        classify(readonly()),
        classify(moved()),
        classify(ask()),
        classify(E.TryAgainError("TRYAGAIN")),
        lost(written=False),
    ):
        decision = state.decide(outcome, 0.0, moving=True)
        assert isinstance(decision, Finish)
        assert "WATCH" in decision.reason


def test_now_must_be_finite() -> None:
    state = RetryState(CLUSTER)
    for now in (math.nan, math.inf):
        with pytest.raises(ValueError, match="now"):
            state.decide(classify(b"OK"), now)


# --------------------------------------------------------------------------- transactions


QUEUED = b"QUEUED"


def test_classify_transaction_ran() -> None:
    outcome = classify_transaction([b"OK", QUEUED, QUEUED, [1, E.ResponseError("ERR x")]])
    assert outcome.kind is Kind.OK
    assert isinstance(outcome.value, list)
    assert len(outcome.value) == 2


def test_classify_transaction_watch_abort_and_refused_multi() -> None:
    outcome = classify_transaction([b"OK", QUEUED, None])
    assert (outcome.kind, outcome.value) == (Kind.OTHER, None)
    nested = E.ResponseError("ERR MULTI calls can not be nested")
    outcome = classify_transaction([nested, b"OK", QUEUED])
    assert (outcome.kind, outcome.value) == (Kind.OTHER, nested)
    outcome = classify_transaction([b"OK", QUEUED, b"odd"])
    assert outcome.kind is Kind.OTHER
    with pytest.raises(ValueError, match="MULTI and EXEC"):
        classify_transaction([b"OK"])


def test_classify_transaction_refused_while_queueing() -> None:
    abort = E.ExecAbortError("EXECABORT Transaction discarded because of previous errors.")
    outcome = classify_transaction([b"OK", moved(7, "b:2"), moved(7, "b:2"), abort])
    assert outcome.kind is Kind.MOVED
    assert outcome.target == RedirectTarget(7, "b", 2)
    assert classify_transaction([b"OK", QUEUED, ask(), abort]).kind is Kind.ASK
    assert classify_transaction([b"OK", readonly(), abort]).kind is Kind.READONLY
    # A command refused for good: resending cannot help, the transaction fails anyway.
    arity = E.ResponseError("ERR wrong number of arguments for 'get' command")
    outcome = classify_transaction([b"OK", moved(), arity, abort])
    assert (outcome.kind, outcome.value) == (Kind.OTHER, arity)
    outcome = classify_transaction([b"OK", QUEUED, abort])
    assert (outcome.kind, outcome.value) == (Kind.OTHER, abort)


def test_classify_transaction_exec_itself_refused() -> None:
    # A cluster node discards the transaction and redirects EXEC itself.
    down = E.ClusterDownError("CLUSTERDOWN Hash slot not served")
    assert classify_transaction([b"OK", QUEUED, down]).kind is Kind.CLUSTERDOWN
    assert classify_transaction([b"OK", QUEUED, moved(3, "c:3")]).target == RedirectTarget(
        3, "c", 3
    )
    # Redis >= 6.2 aborts EXEC with the reason (a replica now: the writes were refused).
    ro = E.ExecAbortError(
        "EXECABORT Transaction discarded because of: READONLY You can't write against a "
        "read only replica."
    )
    outcome = classify_transaction([b"OK", QUEUED, ro])
    assert (outcome.kind, outcome.value) == (Kind.READONLY, ro)
    noauth = E.ExecAbortError(
        "EXECABORT Transaction discarded because of: NOAUTH Authentication required."
    )
    assert classify_transaction([b"OK", QUEUED, noauth]).kind is Kind.OTHER


def test_transaction_loop_resends_whole_after_readonly_and_moving() -> None:
    state = RetryState(STANDALONE)
    abort = E.ExecAbortError("EXECABORT Transaction discarded because of previous errors.")
    refused = classify_transaction([b"OK", readonly(), abort])
    assert isinstance(state.decide(refused, 0.0), WaitForMoving)
    assert state.decide(refused, 0.5, moving=True) == Retry(Kind.READONLY)
    ran = classify_transaction([b"OK", QUEUED, [b"OK"]])
    assert state.decide(ran, 0.6) == Finish(Kind.OK)


# ------------------------------------------------------------------------------ pipelines


def test_group_by_target_keeps_order() -> None:
    pairs = [(3, "a"), (0, "b"), (1, "a"), (4, None), (2, "b")]
    assert group_by_target(pairs) == [("b", [0, 2]), ("a", [1, 3]), (None, [4])]
    assert group_by_target([]) == []
    with pytest.raises(ValueError, match="twice"):
        group_by_target([(1, "a"), (1, "b")])


def test_resend_group_inserts_and_strips_asking() -> None:
    group = ResendGroup("b:2", (1, 3, 4), (True, False, True), 0.0, False)
    commands = [("GET", "k0"), ("SET", "k1", "v"), ("GET", "k2"), ("INCR", "k3"), ("DEL", "k4")]
    assert group.commands(commands, ("ASKING",)) == [
        ("ASKING",),
        ("SET", "k1", "v"),
        ("INCR", "k3"),
        ("ASKING",),
        ("DEL", "k4"),
    ]
    # The command's own reply decides, even if its ASKING failed.
    failed = E.ResponseError("ERR ASKING")
    assert group.replies([b"OK", b"OK", 5, failed, 1]) == [b"OK", 5, 1]
    with pytest.raises(ValueError, match="expected 5 replies"):
        group.replies([b"OK"])


def test_standalone_pipeline_resends_only_the_refused_in_order() -> None:
    tracker = PipelineRetry(STANDALONE, 4)
    tracker.record([0, 1, 2, 3], [b"OK", readonly(), 7, readonly()], 0.0)
    assert not tracker.done
    assert tracker.moving_wait() == 1.0
    with pytest.raises(RuntimeError, match="resolve_moving"):
        tracker.plan()
    tracker.resolve_moving(True, 0.2)
    assert [i for i, _ in tracker.resends()] == [1, 3]
    (group,) = tracker.plan()
    assert (group.target, group.indexes, group.asking) == (None, (1, 3), (False, False))
    tracker.record(group.indexes, [b"OK", b"OK"], 0.3)
    assert tracker.results() == [b"OK", b"OK", 7, b"OK"]  # raises unless done
    assert tracker.transport_error is None


def test_standalone_pipeline_genuine_readonly_stays_in_place() -> None:
    tracker = PipelineRetry(STANDALONE, 2)
    refused = readonly()
    tracker.record([0, 1], [refused, b"OK"], 0.0)
    tracker.resolve_moving(False, 1.0)
    assert tracker.moving_wait() is None
    assert tracker.resends() == []
    assert tracker.done
    assert tracker.results() == [refused, b"OK"]


def test_cluster_pipeline_same_key_resent_in_order_on_one_node() -> None:
    """The k = 1 bug: ``SET k 1; SET k 2`` both MOVED must reach the new owner in one
    write, in order, never as two concurrent single commands."""
    tracker = PipelineRetry(CLUSTER, 2)
    tracker.record([0, 1], [moved(5, "b:2"), moved(5, "b:2")], 0.0)
    resends = tracker.resends()
    assert [i for i, _ in resends] == [0, 1]
    assert all(isinstance(d, Redirect) for _, d in resends)
    groups = tracker.plan({i: d.target.name for i, d in resends if isinstance(d, Redirect)})
    assert [(g.target, g.indexes) for g in groups] == [("b:2", (0, 1))]
    tracker.record([0, 1], [b"OK", b"OK"], 0.1)
    assert tracker.results() == [b"OK", b"OK"]


def test_cluster_pipeline_mixed_round() -> None:
    tracker = PipelineRetry(CLUSTER, 6)
    # First round: two nodes, concurrently (different nodes).
    tracker.record([0, 2, 4], [moved(1, "c:3"), b"x", ask(9, "b:2")], 0.0)
    tracker.record(
        [1, 3, 5],
        [E.TryAgainError("TRYAGAIN"), ask(9, "b:2"), E.ResponseError("ERR wrong")],
        0.0,
    )
    pending = dict(tracker.resends())
    assert sorted(pending) == [0, 1, 3, 4]
    assert isinstance(pending[0], Redirect) and isinstance(pending[4], Ask)
    assert isinstance(pending[1], Retry) and pending[1].delay == 0.01
    # The caller routes the Retry by its slot (here to b:2) and the redirections as told.
    targets = {0: "c:3", 1: "b:2", 3: "b:2", 4: "b:2"}
    groups = tracker.plan(targets)
    assert [(g.target, g.indexes, g.asking) for g in groups] == [
        ("c:3", (0,), (False,)),
        ("b:2", (1, 3, 4), (False, True, True)),
    ]
    assert groups[1].delay == 0.01
    tracker.record([0], [b"a"], 0.1)
    tracker.record([1, 3, 4], [b"b", b"c", b"d"], 0.2)
    results = tracker.results()
    assert results[:5] == [b"a", b"b", b"x", b"c", b"d"]
    assert isinstance(results[5], E.ResponseError)


def test_cluster_pipeline_lost_reply_is_never_resent() -> None:
    """INCR applied twice: a node's connection lost after the write must not resend."""
    tracker = PipelineRetry(CLUSTER, 3)
    error = E.ConnectionError("server closed the connection")
    tracker.record([0, 2], error, 0.0, written=True)
    tracker.record([1], [5], 0.0)
    assert tracker.resends() == []
    assert tracker.done
    assert tracker.results() == [error, 5, error]
    assert tracker.transport_error is error
    tracker = PipelineRetry(CLUSTER, 1)
    timeout = E.TimeoutError("no reply in time")
    tracker.record([0], timeout, 0.0)  # written defaults to True: may have run
    assert tracker.transport_error is timeout


def test_cluster_pipeline_lost_before_write_is_resent_in_order() -> None:
    tracker = PipelineRetry(CLUSTER, 3)
    tracker.record([0, 1, 2], E.ConnectionError("connection refused"), 0.0, written=False)
    assert [i for i, _ in tracker.resends()] == [0, 1, 2]
    (group,) = tracker.plan(dict.fromkeys(range(3), "a:1"))
    assert group.indexes == (0, 1, 2)
    assert group.refresh is True
    tracker.record(group.indexes, [1, 2, 3], 0.05)
    assert tracker.results() == [1, 2, 3]


def test_pipeline_tracker_misuse() -> None:
    tracker = PipelineRetry(CLUSTER, 2)
    with pytest.raises(ValueError, match="indexes but"):
        tracker.record([0, 1], [b"OK"], 0.0)
    with pytest.raises(ValueError, match="twice"):
        tracker.record([0, 0], [b"OK", b"OK"], 0.0)
    with pytest.raises(RuntimeError, match="still has commands"):
        tracker.results()
    tracker.record([0, 1], [b"OK", moved()], 0.0)
    with pytest.raises(ValueError, match="not in flight"):
        tracker.record([0], [b"OK"], 0.0)
    with pytest.raises(ValueError, match="exactly"):
        tracker.plan({0: "a"})
    assert tracker.state(1).redirects == 1
    with pytest.raises(ValueError, match="size"):
        PipelineRetry(CLUSTER, -1)
    empty = PipelineRetry(CLUSTER, 0)
    assert empty.done and empty.results() == []


# --------------------------------------------------------------------- property: bounded

_REPLY_ERRORS: list[Any] = [
    moved(1, "a:1"),
    moved(2, "b:2"),
    ask(1, "b:2"),
    E.TryAgainError("TRYAGAIN"),
    E.ClusterDownError("CLUSTERDOWN"),
    readonly(),
    E.LoadingError("LOADING"),
    E.ResponseError("ERR other"),
]
_TRANSPORT = [E.ConnectionError("lost"), E.TimeoutError("late"), E.ProtocolError("junk")]

_RETRYABLE = st.one_of(
    st.sampled_from(_REPLY_ERRORS[:-1]).map(classify),
    st.builds(classify, st.sampled_from(_TRANSPORT), written=st.just(False)),
)
_TERMINAL = st.one_of(
    st.sampled_from([b"OK", _REPLY_ERRORS[-1]]).map(classify),
    st.builds(classify, st.sampled_from(_TRANSPORT), written=st.just(True)),
)
# Mostly outcomes that prove nothing ran, so that scripts run into the budgets.
outcomes = st.one_of(_RETRYABLE, _RETRYABLE, _RETRYABLE, _TERMINAL)
policies = st.builds(
    RetryPolicy,
    cluster=st.booleans(),
    max_redirects=st.integers(0, 5),
    max_readonly_retries=st.integers(0, 3),
    retry_timeout=st.one_of(st.none(), st.floats(0.0, 0.6)),
    max_unsent_retries=st.integers(0, 3),
)
steps = st.tuples(
    outcomes,
    st.sampled_from([None, True, False]),  # moving
    st.booleans(),  # replica
    st.floats(0.0, 0.2),  # extra time the attempt took (0: a clock standing still)
    st.booleans(),  # whether the caller slept the decision's delay
)


@ROBUST
@given(policy=policies, script=st.lists(steps, min_size=1, max_size=40))
def test_any_outcome_sequence_is_bounded_and_never_resends_what_may_have_run(
    policy: RetryPolicy, script: list[tuple[Outcome, bool | None, bool, float, bool]]
) -> None:
    """Whatever the servers answer (the script, repeated until the loop stops), one
    operation's loop ends, resends at most ``policy.max_resends`` times, and never resends
    after an outcome that may have run."""
    state = RetryState(policy)
    now = 1000.0
    resends = 0
    limit = 2 * (policy.max_resends + 1)
    for count, step in enumerate(itertools.cycle(script), start=1):
        outcome, moving, replica, took, slept = step
        decision = state.decide(outcome, now, moving=moving, replica=replica)
        assert count <= limit, "the loop did not stop within its budgets"
        if outcome.kind in (Kind.MAY_HAVE_RUN, Kind.OTHER, Kind.OK):
            assert isinstance(decision, Finish)
            assert decision.kind is outcome.kind
        if not outcome.kind.proves_not_run:
            assert not decision.resend
        if isinstance(decision, Finish):
            budget = next(
                (
                    b
                    for b in (
                        "max_redirects",
                        "max_readonly_retries",
                        "max_unsent_retries",
                        "time budget",
                    )
                    if b in decision.reason
                ),
                "no budget",
            )
            event(f"finished on {decision.kind.value} ({budget})")
            break
        if decision.resend:
            resends += 1
            assert isinstance(decision, Retry | Redirect | Ask)
            assert 0.0 <= decision.delay <= policy.backoff_max
            if slept:
                now += decision.delay
        now += took
    assert resends == state.resends <= policy.max_resends
    assert state.redirects <= policy.max_redirects
    assert state.readonly_retries <= policy.max_readonly_retries
    assert state.unsent_retries <= policy.max_unsent_retries


_NODES = ["a:1", "b:2", "c:3"]


@ROBUST
@given(
    policy=policies.map(
        lambda p: RetryPolicy.for_cluster(
            max_redirects=p.max_redirects,
            retry_timeout=p.retry_timeout,
            max_readonly_retries=p.max_readonly_retries,
        )
    ),
    size=st.integers(1, 8),
    data=st.data(),
)
def test_pipeline_rounds_keep_order_and_never_resend_what_may_have_run(
    policy: RetryPolicy, size: int, data: st.DataObject
) -> None:
    """A cluster pipeline under any replies: each round's writes go one per node, in the
    pipeline's order; a command whose outcome may have run is never sent again; every
    command's resends stay within the budgets; the loop ends with one result each."""
    tracker = PipelineRetry(policy, size)
    now = 0.0
    final_unsafe: set[int] = set()
    resent = [0] * size

    def write(indexes: list[int]) -> None:
        nonlocal now
        for index in indexes:
            assert index not in final_unsafe, "a command that may have run was resent"
        if data.draw(st.booleans(), label="whole write failed"):
            written = data.draw(st.booleans(), label="written")
            error = data.draw(st.sampled_from(_TRANSPORT), label="error")
            tracker.record(indexes, error, now, written=written)
            if written:
                final_unsafe.update(indexes)
        else:
            replies = [
                data.draw(st.sampled_from([*_REPLY_ERRORS, b"OK"]), label=f"reply {i}")
                for i in indexes
            ]
            tracker.record(indexes, replies, now)
        now += data.draw(st.floats(0.0, 0.3), label="time")

    first = [(i, data.draw(st.sampled_from(_NODES), label=f"node {i}")) for i in range(size)]
    for _node, indexes in group_by_target(first):
        write(indexes)
    rounds = 0
    while not tracker.done:
        rounds += 1
        # Each round resends something or resolves a wait (at most one per resend, + 1).
        assert rounds <= size * 2 * (policy.max_resends + 1)
        if tracker.moving_wait() is not None:
            tracker.resolve_moving(data.draw(st.booleans(), label="moving"), now)
            continue
        resends = tracker.resends()
        assert resends, "not done, yet nothing to send"
        targets: dict[int, str] = {}
        for index, decision in resends:
            resent[index] += 1
            if isinstance(decision, Redirect | Ask):
                targets[index] = decision.target.name
            else:
                targets[index] = data.draw(st.sampled_from(_NODES), label=f"route {index}")
        groups = tracker.plan(targets)
        assert len({g.target for g in groups}) == len(groups), "two writes to one node"
        firsts = [g.indexes[0] for g in groups]
        assert firsts == sorted(firsts)
        assert sum(len(g.indexes) for g in groups) == len(resends)
        for group in groups:
            assert list(group.indexes) == sorted(group.indexes)
            now += group.delay
            write(list(group.indexes))
    results = tracker.results()
    assert len(results) == size
    for index in range(size):
        assert resent[index] == tracker.state(index).resends <= policy.max_resends
    if final_unsafe:
        assert tracker.transport_error is not None


@ROBUST
@given(
    budget=st.integers(0, 5),
    cluster=st.booleans(),
    answers=st.lists(st.sampled_from([None, True, False]), min_size=1, max_size=20),
)
def test_readonly_storm_is_bounded(budget: int, cluster: bool, answers: list[bool | None]) -> None:
    """A server answering READONLY to everything, whatever the caller learns about MOVING:
    at most ``max_readonly_retries`` resends explained by a MOVING, and (in a cluster)
    the time budget for the rest; the loop always ends with the READONLY raised."""
    policy = RetryPolicy(
        cluster=cluster, max_readonly_retries=budget, retry_timeout=0.1 if cluster else None
    )
    state = RetryState(policy)
    refused = classify(readonly())
    now = 0.0
    for count, moving in enumerate(itertools.cycle(answers), start=1):
        assert count <= 2 * (policy.max_resends + 1)
        decision = state.decide(refused, now, moving=moving)
        if isinstance(decision, Finish):
            assert decision.kind is Kind.READONLY
            event("readonly budget spent" if "max_readonly" in decision.reason else "other")
            break
        if isinstance(decision, Retry):
            now += decision.delay
    assert state.readonly_retries <= budget
    assert state.resends <= policy.max_resends
