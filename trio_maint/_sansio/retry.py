"""The one retry policy of trio_maint (sans-IO: no Trio import; the caller passes ``now``).

The rule: **never resend what may have run.** A command (or pipeline, or transaction) is
sent again only when a reply proves that it did not execute, or when its connection failed
before anything was written:

* ``MOVED`` / ``ASK`` (Redis Cluster redirections), ``TRYAGAIN`` (a multi-key command met a
  slot mid-migration), ``CLUSTERDOWN`` (the cluster cannot serve the slot): the server
  refused the command before running it;
* ``READONLY`` after a ``MOVING`` (the old endpoint of a managed Redis turns read-only just
  before it announces the move), and in a cluster a ``READONLY`` from a master that became
  a replica (a failover): the write was refused;
* ``LOADING`` from a replica serving a read: the read goes to the master;
* a connection that failed before any byte of the request was accepted (the dial or the
  pool's acquisition failed, or the write itself failed with nothing sent: the
  ``written`` flag of :class:`~trio_maint.ConnectionError`).

Anything that may have reached the server (a connection lost after the write, a timeout
waiting for the reply, any other error reply) goes to the caller, as redis-py does by
default. Every resend is bounded: a redirect budget (``max_redirects``), an attempt budget
for ``READONLY`` after ``MOVING`` (``max_readonly_retries``), a time budget
(``retry_timeout``, shortened by the caller's deadline) for ``TRYAGAIN``, ``CLUSTERDOWN``,
a failed-over master's ``READONLY`` and connections lost before the write, and without a
time budget an attempt budget for the latter (``max_unsent_retries``).
docs/maintenance.md ("What is sent again") and docs/cluster.md ("Redirections and
retries") describe the policy for users.

What an outcome proves is :mod:`trio_maint._sansio.outcome` (:func:`classify`, re-exported
here); this module decides what follows it; :mod:`trio_maint._sansio.resend` does the
bookkeeping of a pipeline (which commands to resend, in their original order, grouped by
target). The caller does the I/O in a loop (never recursion)::

    state = RetryState(policy)
    while True:
        try:
            reply = await send(...)            # the caller's I/O
        except (ConnectionError, TimeoutError, ProtocolError) as exc:
            outcome = classify(exc)            # written=False if the acquisition failed
        else:
            outcome = classify(reply)
        decision = state.decide(outcome, trio.current_time(), moving=..., replica=...)
        ...                                    # Finish / Retry / Redirect / Ask / WaitForMoving
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Final, TypeAlias

import attrs

from .outcome import (
    Kind,
    Outcome,
    RedirectTarget,
    classify,
    classify_transaction,
    parse_redirect,
)

__all__ = [
    "DEFAULT_BACKOFF_MAX",
    "DEFAULT_BACKOFF_START",
    "STANDALONE_POLICY",
    "Ask",
    "Decision",
    "Finish",
    "Kind",
    "Outcome",
    "Redirect",
    "RedirectTarget",
    "Retry",
    "RetryPolicy",
    "RetryState",
    "WaitForMoving",
    "backoff",
    "classify",
    "classify_transaction",
    "parse_redirect",
]

#: First backoff delay, in seconds (``float``): 10 ms, as the cluster client's today.
DEFAULT_BACKOFF_START: Final = 0.01
#: Longest backoff delay, in seconds (``float``): 250 ms.
DEFAULT_BACKOFF_MAX: Final = 0.25


# ---------------------------------------------------------------------------- decisions


@attrs.frozen
class Finish:
    """Stop: the outcome is final. Return the reply (``Kind.OK``), or give the error to
    the caller (raise it, or put it in its place in a pipeline).

    * ``kind``: the outcome's :class:`Kind`.
    * ``reason``: why it is not resent (``str``; empty for ``OK`` and ``OTHER``), worth
      adding to the error as a note (``err.add_note(reason)``).
    """

    kind: Kind
    reason: str = ""
    #: ``False``: nothing is sent again.
    resend: ClassVar[bool] = False


@attrs.frozen
class Retry:
    """Send the same operation again, to its usual route, after ``delay`` seconds.

    * ``kind``: what caused it (``TRYAGAIN``, ``CLUSTERDOWN``, ``READONLY``, ``LOADING``,
      ``LOST_BEFORE_WRITE``).
    * ``delay``: seconds to wait first (``float``, >= 0; ``0.0`` = at once).
    * ``refresh``: ask for a lazy slot-map refresh first (``bool``; cluster only).

    After ``LOADING`` on a replica, the state's ``replica_reads`` is ``False``: route the
    read to the slot's master.
    """

    kind: Kind
    delay: float = 0.0
    refresh: bool = False
    #: ``True``: the operation is sent again.
    resend: ClassVar[bool] = True


@attrs.frozen
class Redirect:
    """``MOVED``: the slot lives on ``target`` (:class:`RedirectTarget`) now, as Redis
    Cluster's MOVED redirection. Point the slot at it in the slot map, ask for a lazy
    refresh when ``refresh`` (``bool``), wait ``delay`` seconds (``float``; 0 for the first
    redirections, a backoff once nodes seem to disagree) and send the operation there. The
    state's ``replica_reads`` is then ``False`` (a replica does not serve the slot)."""

    target: RedirectTarget
    delay: float = 0.0
    refresh: bool = True
    #: The cause, always ``Kind.MOVED``.
    kind: ClassVar[Kind] = Kind.MOVED
    #: ``True``: the operation is sent again.
    resend: ClassVar[bool] = True


@attrs.frozen
class Ask:
    """``ASK``: send ``ASKING`` then the operation to ``target`` (:class:`RedirectTarget`),
    once, as Redis Cluster's ASK redirection (the slot is mid-migration; the slot map is
    unchanged). Wait ``delay`` seconds (``float``) first; ``refresh`` (``bool``) asks for a
    lazy slot-map refresh (only once nodes seem to disagree)."""

    target: RedirectTarget
    delay: float = 0.0
    refresh: bool = False
    #: The cause, always ``Kind.ASK``.
    kind: ClassVar[Kind] = Kind.ASK
    #: ``True``: the operation is sent again.
    resend: ClassVar[bool] = True


@attrs.frozen
class WaitForMoving:
    """A standalone write was refused with ``READONLY``: wait up to ``timeout`` seconds
    (``float``) for the ``MOVING`` notification that follows a switch-over (see
    docs/maintenance.md), then call :meth:`RetryState.decide` again with the same outcome
    and ``moving=True`` (a MOVING came, or the connection is marked for a handoff) or
    ``moving=False`` (none came: a genuine READONLY, which is then raised). Nothing is
    sent meanwhile."""

    timeout: float
    #: The cause, always ``Kind.READONLY``.
    kind: ClassVar[Kind] = Kind.READONLY
    #: ``False``: nothing is sent before the caller answers.
    resend: ClassVar[bool] = False


#: What :meth:`RetryState.decide` returns; match on the class. ``decision.resend`` is
#: ``True`` for :class:`Retry`, :class:`Redirect` and :class:`Ask`.
Decision: TypeAlias = Finish | Retry | Redirect | Ask | WaitForMoving


# ------------------------------------------------------------------------------- policy


def backoff(
    attempt: int, start: float = DEFAULT_BACKOFF_START, cap: float = DEFAULT_BACKOFF_MAX
) -> float:
    """The delay before retry number ``attempt`` (``int``, from 0): ``start`` seconds
    doubling each attempt, at most ``cap`` seconds (``float``); 10 ms, 20 ms, 40 ms, 80 ms,
    160 ms, then 250 ms by default, as the cluster client's backoff.

    :raises ValueError: ``attempt`` is negative.
    """
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}")
    return float(min(cap, start * 2.0 ** min(attempt, 64)))


def _non_negative_int(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{attribute.name} must be an int, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value}")


def _seconds(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None and attribute.name == "retry_timeout":
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{attribute.name} must be a number of seconds, not {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{attribute.name} must be finite and >= 0, got {value}")
    if attribute.name == "backoff_start" and value <= 0:
        raise ValueError("backoff_start must be > 0")


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """The budgets and switches of the retry policy (immutable; share one per client).

    * ``cluster`` (``bool``, default ``False``): follow Redis Cluster conditions (MOVED,
      ASK, TRYAGAIN, CLUSTERDOWN, a failed-over master's READONLY, LOADING on a replica).
      A standalone client gives those to the caller.
    * ``max_redirects`` (``int``, default 16): most MOVED/ASK redirections (and LOADING
      replica-to-master moves) followed per operation, as ``open_redis_cluster``'s option.
    * ``max_readonly_retries`` (``int``, default 1): most resends after a READONLY that a
      MOVING explained (docs/maintenance.md: "retried once").
    * ``retry_timeout`` (seconds, ``float`` or ``None``; default ``None``): how long one
      operation may keep retrying TRYAGAIN, CLUSTERDOWN, a failed-over master's READONLY
      and connections lost before the write, counted from the first such failure;
      ``None`` retries none of those, except the last within ``max_unsent_retries``. The
      cluster client's option (5 s).
    * ``max_unsent_retries`` (``int``, default 0): without a ``retry_timeout``, most
      resends of an operation whose connection failed before anything was written (a
      pooled connection that died while idle); sent again at once. The standalone client
      uses :data:`STANDALONE_POLICY` (2).
    * ``moving_grace`` (seconds, ``float``, default 1.0): how long a standalone READONLY
      waits for a MOVING (``READONLY_MOVING_GRACE`` of the maintenance handler).
    * ``backoff_start``, ``backoff_max`` (seconds, ``float``; 0.01 and 0.25): the
      backoff of :func:`backoff`.
    * ``backoff_after_redirects`` (``int``, default 2): redirections followed at once;
      from the next one on each waits a backoff and asks for a refresh, so nodes that
      disagree for a moment can settle.

    :raises TypeError, ValueError: a field of the wrong type or out of range.
    """

    cluster: bool = False
    max_redirects: int = attrs.field(default=16, validator=_non_negative_int)
    max_readonly_retries: int = attrs.field(default=1, validator=_non_negative_int)
    retry_timeout: float | None = attrs.field(default=None, validator=_seconds)
    max_unsent_retries: int = attrs.field(default=0, validator=_non_negative_int)
    moving_grace: float = attrs.field(default=1.0, validator=_seconds)
    backoff_start: float = attrs.field(default=DEFAULT_BACKOFF_START, validator=_seconds)
    backoff_max: float = attrs.field(default=DEFAULT_BACKOFF_MAX, validator=_seconds)
    backoff_after_redirects: int = attrs.field(default=2, validator=_non_negative_int)

    def __attrs_post_init__(self) -> None:
        if self.backoff_max < self.backoff_start:
            raise ValueError("backoff_max must be >= backoff_start")

    @classmethod
    def for_cluster(
        cls, *, max_redirects: int = 16, retry_timeout: float | None = 5.0, **fields: Any
    ) -> RetryPolicy:
        """The cluster client's policy: ``cluster=True``, ``max_redirects`` (default 16)
        and ``retry_timeout`` (seconds, default 5.0), as ``open_redis_cluster``'s defaults;
        ``fields`` sets the other fields.

        :raises TypeError, ValueError: as the class.
        """
        return cls(
            cluster=True,
            max_redirects=max_redirects,
            retry_timeout=retry_timeout,
            **fields,
        )

    def backoff(self, attempt: int) -> float:
        """:func:`backoff` with this policy's ``backoff_start`` and ``backoff_max``
        (seconds, ``float``)."""
        return backoff(attempt, self.backoff_start, self.backoff_max)

    def timed_retry_cap(self, budget: float) -> int:
        """Most time-budgeted retries that fit in ``budget`` seconds (``float``): the
        number of backoff sleeps whose sum first reaches ``budget``, plus one for clock
        rounding. Each retry sleeps its backoff (the last one possibly cut short by the
        deadline), so a real clock reaches the deadline first; the cap only bounds a clock
        that does not advance. Returns an ``int`` (0 for a budget <= 0)."""
        if not budget > 0:
            return 0
        total = 0.0
        count = 0
        while total < budget:
            step = self.backoff(count)
            if step >= self.backoff_max:
                count += math.ceil((budget - total) / self.backoff_max)
                break
            total += step
            count += 1
        return count + 1

    @property
    def max_resends(self) -> int:
        """The most resends one operation can make under this policy (``int``):
        ``max_redirects + max_readonly_retries + timed_retry_cap(retry_timeout)``, or
        ``+ max_unsent_retries`` instead of the last without a ``retry_timeout``."""
        if self.retry_timeout is None:
            timed = self.max_unsent_retries
        else:
            timed = self.timed_retry_cap(self.retry_timeout)
        return self.max_redirects + self.max_readonly_retries + timed


@attrs.define
class RetryState:
    """The retry state of one operation (a command, a transaction, or one command of a
    pipeline): its budgets as spent so far. Create one per operation; call :meth:`decide`
    after each attempt.

    Constructor: ``RetryState(policy, *, deadline=None, replica_reads=False,
    watched=False)``.

    * ``policy``: the :class:`RetryPolicy`.
    * ``deadline``: the caller's own deadline (absolute, in the caller's clock's seconds,
      ``float``) or ``None``; it shortens the ``retry_timeout`` budget.
    * ``replica_reads``: the operation is a read the caller may route to a replica
      (``bool``); set to ``False`` once a replica proved unable to serve it (MOVED, or
      LOADING): from then on, route it to the master.
    * ``watched``: a transaction holding a ``WATCH`` (``bool``): never resent, since its
      watch lives on the connection it was sent on.

    Read-only counters: ``redirects``, ``readonly_retries``, ``timed_retries``,
    ``unsent_retries`` (``int``), :attr:`resends`, and ``trail`` (the redirections met,
    ``list[str]``).
    """

    policy: RetryPolicy
    deadline: float | None = attrs.field(default=None, kw_only=True)
    replica_reads: bool = attrs.field(default=False, kw_only=True)
    watched: bool = attrs.field(default=False, kw_only=True)
    redirects: int = attrs.field(default=0, init=False)
    readonly_retries: int = attrs.field(default=0, init=False)
    timed_retries: int = attrs.field(default=0, init=False)
    unsent_retries: int = attrs.field(default=0, init=False)
    trail: list[str] = attrs.field(factory=list, init=False)
    _timed_deadline: float | None = attrs.field(default=None, init=False)
    _timed_cap: int = attrs.field(default=0, init=False)
    _waiting: bool = attrs.field(default=False, init=False)

    @property
    def resends(self) -> int:
        """Resends decided so far (``int``): redirects + readonly_retries + timed_retries +
        unsent_retries."""
        return self.redirects + self.readonly_retries + self.timed_retries + self.unsent_retries

    def decide(
        self,
        outcome: Outcome,
        now: float,
        *,
        moving: bool | None = None,
        replica: bool = False,
    ) -> Decision:
        """Decide what follows ``outcome``, spending the budgets.

        :param outcome: the attempt's :class:`Outcome` (from :func:`classify` or
            :func:`classify_transaction`).
        :param now: the caller's clock, in seconds (``float``, e.g. ``trio.current_time()``).
        :param moving: for ``READONLY`` (``bool`` or ``None``): ``True`` when the endpoint
            is known to be moving (the connection is marked for a handoff, or a MOVING came
            while waiting), ``False`` when known not to be (the connection did not opt in to
            maintenance notifications, or the wait ended without a MOVING), ``None`` when
            not known yet.
        :param replica: the attempt was served by a replica (``bool``).
        :returns: a :data:`Decision`:

            * ``OK``, ``MAY_HAVE_RUN``, ``OTHER``: :class:`Finish`, always;
            * anything else when ``watched``: :class:`Finish`;
            * ``READONLY``: with ``moving=True`` a :class:`Retry` at once, at most
              ``max_readonly_retries`` times; else in a cluster a time-budgeted
              :class:`Retry` with a refresh (a failed-over master); else with
              ``moving=None`` (once, and only while ``max_readonly_retries`` is not
              spent) :class:`WaitForMoving`; else :class:`Finish`;
            * ``LOST_BEFORE_WRITE``: a time-budgeted :class:`Retry` (with a refresh in a
              cluster); without ``retry_timeout`` a :class:`Retry` at once, at most
              ``max_unsent_retries`` times, then :class:`Finish`;
            * standalone (``cluster=False``): every other kind is :class:`Finish`;
            * ``MOVED``: :class:`Redirect`; ``ASK``: :class:`Ask`; ``LOADING`` from a
              replica: :class:`Retry` to the master; all within ``max_redirects``, at once
              for the first ``backoff_after_redirects``, then with a backoff and a refresh;
            * ``LOADING`` from a master: :class:`Finish`;
            * ``TRYAGAIN`` (no refresh), ``CLUSTERDOWN`` (refresh): time-budgeted
              :class:`Retry`.

            A time-budgeted retry waits ``backoff(n)`` for its ``n``-th time (cut to the
            deadline) and stops (:class:`Finish`) once ``retry_timeout`` seconds passed
            since the first such failure, or the caller's ``deadline`` passed.
        :raises ValueError: ``now`` is not a finite number.
        """
        if not math.isfinite(now):
            raise ValueError(f"now must be a finite number of seconds, got {now!r}")
        kind = outcome.kind
        waited, self._waiting = self._waiting, False
        if kind is Kind.OK or kind is Kind.OTHER:
            return Finish(kind)
        if kind is Kind.MAY_HAVE_RUN:
            return Finish(kind, "not retried: the request may have reached the server")
        if self.watched:
            return Finish(kind, "not retried: a WATCHed transaction is bound to its connection")
        policy = self.policy
        if kind is Kind.READONLY:
            if moving:
                return self._readonly_retry()
            if policy.cluster:
                return self._timed(kind, now, refresh=True)
            if moving is None and not waited:
                if self.readonly_retries >= policy.max_readonly_retries:
                    return self._readonly_retry()  # spent: no use waiting for a MOVING
                self._waiting = True
                return WaitForMoving(policy.moving_grace)
            return Finish(kind, "not retried: READONLY and the endpoint is not moving")
        if kind is Kind.LOST_BEFORE_WRITE:
            if policy.retry_timeout is None and policy.max_unsent_retries:
                return self._unsent_retry()
            return self._timed(kind, now, refresh=policy.cluster)
        if not policy.cluster:
            return Finish(kind, f"not retried: {kind.value.upper()} outside a cluster client")
        if kind is Kind.MOVED or kind is Kind.ASK:
            target = outcome.target
            assert target is not None  # Outcome's validator
            spent = self._redirect(outcome)
            if isinstance(spent, Finish):
                return spent
            delay, refresh = spent
            if kind is Kind.ASK:
                return Ask(target, delay, refresh)
            self.replica_reads = False
            return Redirect(target, delay, True)
        if kind is Kind.LOADING:
            if not replica:
                return Finish(kind, "not retried: the master is loading its dataset")
            spent = self._redirect(outcome)
            if isinstance(spent, Finish):
                return spent
            self.replica_reads = False
            return Retry(kind, spent[0], spent[1])
        return self._timed(kind, now, refresh=kind is Kind.CLUSTERDOWN)

    def decide_after_wait(
        self, outcome: Outcome, now: float, *, moving: bool, replica: bool = False
    ) -> Finish | Retry | Redirect | Ask:
        """:meth:`decide` again after a :class:`WaitForMoving`, with what the wait found
        (``moving``, ``bool``): never a second wait. Same parameters and budgets.

        :raises ValueError: ``now`` is not a finite number.
        """
        decision = self.decide(outcome, now, moving=moving, replica=replica)
        assert not isinstance(decision, WaitForMoving)  # only moving=None waits
        return decision

    def _readonly_retry(self) -> Decision:
        limit = self.policy.max_readonly_retries
        if self.readonly_retries >= limit:
            return Finish(
                Kind.READONLY,
                f"not retried: READONLY after MOVING, already resent {self.readonly_retries} "
                f"time(s) (max_readonly_retries={limit})",
            )
        self.readonly_retries += 1
        return Retry(Kind.READONLY)

    def _unsent_retry(self) -> Decision:
        limit = self.policy.max_unsent_retries
        if self.unsent_retries >= limit:
            return Finish(
                Kind.LOST_BEFORE_WRITE,
                f"not retried: the connection failed before the write, already resent "
                f"{self.unsent_retries} time(s) (max_unsent_retries={limit})",
            )
        self.unsent_retries += 1
        return Retry(Kind.LOST_BEFORE_WRITE)

    def _redirect(self, outcome: Outcome) -> tuple[float, bool] | Finish:
        policy = self.policy
        self.trail.append(str(outcome.value))
        if self.redirects >= policy.max_redirects:
            return Finish(
                outcome.kind,
                f"not retried: {self.redirects} redirection(s) followed "
                f"(max_redirects={policy.max_redirects}): " + " -> ".join(self.trail),
            )
        self.redirects += 1
        settled = policy.backoff_after_redirects
        if self.redirects <= settled:
            return 0.0, False
        return policy.backoff(self.redirects - settled - 1), True

    def _timed(self, kind: Kind, now: float, *, refresh: bool) -> Decision:
        policy = self.policy
        if policy.retry_timeout is None:
            return Finish(kind, f"not retried: {kind.value.upper()} and no retry_timeout")
        if self._timed_deadline is None:
            limit = now + policy.retry_timeout
            if self.deadline is not None:
                limit = min(limit, self.deadline)
            self._timed_deadline = limit
            self._timed_cap = policy.timed_retry_cap(limit - now)
        limit = self._timed_deadline
        if now >= limit or self.timed_retries >= self._timed_cap:
            return Finish(
                kind,
                f"not retried: {kind.value.upper()}, retried {self.timed_retries} time(s), "
                f"time budget spent (retry_timeout={policy.retry_timeout} s)",
            )
        delay = min(policy.backoff(self.timed_retries), limit - now)
        self.timed_retries += 1
        return Retry(kind, delay, refresh)


#: The standalone client's policy (:class:`~trio_maint.Redis`): READONLY after a MOVING
#: resent once; a request whose connection failed before anything was written resent at
#: most twice, at once; nothing else.
STANDALONE_POLICY: Final = RetryPolicy(max_unsent_retries=2)
