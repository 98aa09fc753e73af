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
  pool's acquisition failed, or the write itself failed with nothing sent).

Anything that may have reached the server (a connection lost after the write, a timeout
waiting for the reply, any other error reply) goes to the caller, as redis-py does by
default. Every resend is bounded: a redirect budget (``max_redirects``), an attempt budget
for ``READONLY`` after ``MOVING`` (``max_readonly_retries``), and a time budget
(``retry_timeout``, shortened by the caller's deadline) for ``TRYAGAIN``, ``CLUSTERDOWN``,
a failed-over master's ``READONLY`` and connections lost before the write.

The module only decides; the caller does the I/O in a loop (never recursion)::

    state = RetryState(policy)
    while True:
        try:
            reply = await send(...)            # the caller's I/O
        except (ConnectionError, TimeoutError, ProtocolError) as exc:
            outcome = classify(exc, written=...)
        else:
            outcome = classify(reply)
        decision = state.decide(outcome, trio.current_time(), moving=..., replica=...)
        ...                                    # Finish / Retry / Redirect / Ask / WaitForMoving

:class:`PipelineRetry` does the same bookkeeping for a pipeline: which commands to resend,
in their original order, grouped by target, and the final reply list.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Final, TypeAlias, TypeVar

import attrs

try:
    from trio_maint._sansio import errors as _errors  # type: ignore[import-not-found, attr-defined, unused-ignore]
except ImportError:  # pragma: no cover - the layout before trio_maint._sansio
    from trio_maint import _errors  # type: ignore[import-not-found, attr-defined, no-redef, unused-ignore]
try:
    from trio_maint._sansio.endpoint import (  # type: ignore[import-not-found, unused-ignore]
        split_host_port,
    )
except ImportError:  # pragma: no cover - the layout before trio_maint._sansio
    from trio_maint._endpoint import (  # type: ignore[import-not-found, no-redef, unused-ignore]
        split_host_port,
    )

__all__ = [
    "DEFAULT_BACKOFF_MAX",
    "DEFAULT_BACKOFF_START",
    "Ask",
    "Decision",
    "Finish",
    "Kind",
    "Outcome",
    "PipelineRetry",
    "Redirect",
    "RedirectTarget",
    "ResendGroup",
    "Retry",
    "RetryPolicy",
    "RetryState",
    "WaitForMoving",
    "backoff",
    "classify",
    "classify_transaction",
    "group_by_target",
    "parse_redirect",
]

#: First backoff delay, in seconds (``float``): 10 ms, as the cluster client's today.
DEFAULT_BACKOFF_START: Final = 0.01
#: Longest backoff delay, in seconds (``float``): 250 ms.
DEFAULT_BACKOFF_MAX: Final = 0.25
#: Number of hash slots of Redis Cluster (slots are 0..16383).
_SLOTS: Final = 16384
#: Prefix of the EXEC reply when the server refused EXEC itself (Redis >= 6.2): the
#: transaction was discarded, the reason follows.
_EXECABORT_BECAUSE: Final = "because of: "

_C = TypeVar("_C")
_R = TypeVar("_R")
_H = TypeVar("_H", bound=Hashable)


# ------------------------------------------------------------------------------ kinds


class Kind(enum.StrEnum):
    """What an attempt's outcome proves, as :func:`classify` finds it.

    The values are lower-case words usable as counter keys (``"moved"``, ``"ask"``, ...).

    * ``OK``: a reply that is not an error (the command ran).
    * ``MOVED``, ``ASK``: Redis Cluster redirections (the command did not run there).
    * ``TRYAGAIN``: a cluster multi-key command met a slot mid-migration (did not run).
    * ``CLUSTERDOWN``: the cluster cannot serve the slot (did not run).
    * ``READONLY``: a write refused by a read-only server (did not run).
    * ``LOADING``: the server is loading its dataset (did not run).
    * ``LOST_BEFORE_WRITE``: the connection failed before any byte of the request was
      accepted (dial, pool acquisition, or the write itself): nothing reached the server.
    * ``MAY_HAVE_RUN``: the connection failed or timed out after the write: the server may
      have run the command. Never resent.
    * ``OTHER``: any other error reply, or an error that retrying cannot cure (an argument
      that cannot be encoded, the pool's own timeout, a client closed by its owner). Never
      resent.
    """

    OK = "ok"
    MOVED = "moved"
    ASK = "ask"
    TRYAGAIN = "tryagain"
    CLUSTERDOWN = "clusterdown"
    READONLY = "readonly"
    LOADING = "loading"
    LOST_BEFORE_WRITE = "lost_before_write"
    MAY_HAVE_RUN = "may_have_run"
    OTHER = "other"

    @property
    def proves_not_run(self) -> bool:
        """``True`` (``bool``) for the kinds that prove the command did not execute, the
        only ones a resend may follow: MOVED, ASK, TRYAGAIN, CLUSTERDOWN, READONLY, LOADING
        and LOST_BEFORE_WRITE."""
        return self in _NOT_RUN


_NOT_RUN: Final = frozenset(
    {
        Kind.MOVED,
        Kind.ASK,
        Kind.TRYAGAIN,
        Kind.CLUSTERDOWN,
        Kind.READONLY,
        Kind.LOADING,
        Kind.LOST_BEFORE_WRITE,
    }
)

# Error reply classes, as ``errors.response_error`` builds them from the reply's prefix.
_REPLY_KINDS: Final[dict[type[BaseException], Kind]] = {
    _errors.MovedError: Kind.MOVED,
    _errors.AskError: Kind.ASK,
    _errors.TryAgainError: Kind.TRYAGAIN,
    _errors.ClusterDownError: Kind.CLUSTERDOWN,
    _errors.ReadOnlyError: Kind.READONLY,
    _errors.LoadingError: Kind.LOADING,
}
# The same by the reply's first word, for a plain ResponseError built by hand.
_CODE_KINDS: Final[dict[str, Kind]] = {
    "MOVED": Kind.MOVED,
    "ASK": Kind.ASK,
    "TRYAGAIN": Kind.TRYAGAIN,
    "CLUSTERDOWN": Kind.CLUSTERDOWN,
    "READONLY": Kind.READONLY,
    "LOADING": Kind.LOADING,
}


# ------------------------------------------------------------------------ redirections


def _check_slot(slot: int) -> int:
    if isinstance(slot, bool) or not isinstance(slot, int):
        raise TypeError(f"slot must be an int, not {type(slot).__name__}")
    if not 0 <= slot < _SLOTS:
        raise ValueError(f"slot must be in 0..{_SLOTS - 1}, got {slot}")
    return slot


@attrs.frozen
class RedirectTarget:
    """Where a ``MOVED`` or ``ASK`` reply sends a command: ``slot`` (``int``, 0..16383),
    ``host`` (``str``; IPv6 without brackets) and ``port`` (``int``).

    An empty ``host`` (``MOVED 3999 :6380``) means "the host of the node that replied", as
    Redis Cluster announces a node whose endpoint is unknown
    (``cluster-preferred-endpoint-type unknown-endpoint``): use :meth:`address`.

    :raises TypeError, ValueError: ``slot`` is not an int in 0..16383.
    """

    slot: int = attrs.field(converter=_check_slot)
    host: str
    port: int

    @property
    def name(self) -> str:
        """``"host:port"`` (``"[v6]:port"`` for IPv6), the cluster client's node name."""
        if ":" in self.host:
            return f"[{self.host}]:{self.port}"
        return f"{self.host}:{self.port}"

    def address(self, current_host: str) -> tuple[str, int]:
        """``(host, port)`` to dial: ``host``, or ``current_host`` (the host of the node
        that sent the redirection, ``str``) when the reply gave an empty one."""
        return (self.host or current_host, self.port)


def parse_redirect(message: str) -> tuple[Kind, RedirectTarget]:
    """Parse a Redis Cluster redirection, ``MOVED slot host:port`` or ``ASK slot host:port``.

    The address is split with ``split_host_port``; an unbracketed IPv6 address, as Redis
    writes it (``MOVED 12 ::1:7000``), is split at its last colon. The port is required.

    :param message: the error reply's text without the leading ``-`` (``str``), e.g.
        ``str(MovedError(...))``.
    :returns: ``(Kind.MOVED or Kind.ASK, RedirectTarget)``.
    :raises ValueError: not a well-formed MOVED/ASK reply.
    """
    parts = message.split()
    if len(parts) != 3 or parts[0] not in ("MOVED", "ASK"):
        raise ValueError(f"not a MOVED/ASK redirection: {message!r}")
    code, slot_text, address = parts
    if not slot_text.isascii() or not slot_text.isdigit():
        raise ValueError(f"bad slot {slot_text!r} in redirection {message!r}")
    if address.startswith("["):
        if "]:" not in address:
            raise ValueError(f"no port in redirection {message!r}")
    else:
        if ":" not in address:
            raise ValueError(f"no port in redirection {message!r}")
        if address.count(":") > 1:
            host_part, _, port_part = address.rpartition(":")
            address = f"[{host_part}]:{port_part}"
    host, port = split_host_port(address)
    kind = Kind.MOVED if code == "MOVED" else Kind.ASK
    return kind, RedirectTarget(int(slot_text), host, port)


# ----------------------------------------------------------------------- classification


def _check_outcome(
    instance: Outcome, attribute: attrs.Attribute[RedirectTarget | None], value: object
) -> None:
    if instance.kind in (Kind.MOVED, Kind.ASK) and value is None:
        raise ValueError(f"a {instance.kind.name} outcome needs its redirect target")


@attrs.frozen
class Outcome:
    """One attempt's outcome, classified: build it with :func:`classify` or
    :func:`classify_transaction`.

    * ``kind``: a :class:`Kind`.
    * ``value``: what the attempt produced (``object``): the reply, the error reply
      instance, or the transport error raised; ``None`` when there is nothing to give.
    * ``target``: the :class:`RedirectTarget` of a ``MOVED``/``ASK`` (required for those
      kinds), else ``None``.

    :raises ValueError: a MOVED or ASK outcome without a target.
    """

    kind: Kind
    value: object = None
    target: RedirectTarget | None = attrs.field(default=None, validator=_check_outcome)


_TRANSPORT_ERRORS: Final = (_errors.ConnectionError, _errors.TimeoutError, _errors.ProtocolError)


def classify(result: object, *, written: bool = True) -> Outcome:
    """Classify what one attempt produced.

    :param result: a reply value (error replies are values, as the connection returns
        them), or the exception the attempt raised.
    :param written: for a transport error only (``bool``): whether any byte of the request
        may have been accepted by the socket. Default ``True`` (the safe assumption: the
        command may have run). Pass ``False`` only when the dial or the pool acquisition
        failed, or the write failed with nothing sent.
    :returns: an :class:`Outcome`:

        * an error reply (:class:`ResponseError`): ``MOVED``/``ASK`` (with the parsed
          target; a malformed one is ``OTHER``), ``TRYAGAIN``, ``CLUSTERDOWN``,
          ``READONLY``, ``LOADING`` by its class (as ``response_error`` maps the reply's
          prefix), else ``OTHER``;
        * a ``ConnectionError``, ``TimeoutError`` or ``ProtocolError``:
          ``LOST_BEFORE_WRITE`` when not ``written``, else ``MAY_HAVE_RUN``; except that a
          ``ConnectionClosedError`` (closed by its owner) and a ``PoolTimeoutError`` (the
          caller's own wait, already spent) are ``OTHER`` when nothing was written;
        * any other exception: ``OTHER``; any other value: ``OK``.
    """
    if isinstance(result, _errors.ResponseError):
        kind = _reply_kind(result)
        if kind in (Kind.MOVED, Kind.ASK):
            try:
                parsed, target = parse_redirect(str(result))
            except ValueError:
                return Outcome(Kind.OTHER, result)
            return Outcome(parsed, result, target)
        return Outcome(kind, result)
    if isinstance(result, _TRANSPORT_ERRORS):
        if written:
            return Outcome(Kind.MAY_HAVE_RUN, result)
        if isinstance(result, _errors.ConnectionClosedError | _errors.PoolTimeoutError):
            return Outcome(Kind.OTHER, result)
        return Outcome(Kind.LOST_BEFORE_WRITE, result)
    if isinstance(result, BaseException):
        return Outcome(Kind.OTHER, result)
    return Outcome(Kind.OK, result)


def _reply_kind(error: BaseException) -> Kind:
    for cls in type(error).__mro__:
        kind = _REPLY_KINDS.get(cls)
        if kind is not None:
            return kind
    message = str(error)
    return _CODE_KINDS.get(message.split(" ", 1)[0] if message else "", Kind.OTHER)


def classify_transaction(replies: Sequence[object]) -> Outcome:
    """Classify the replies of one ``MULTI`` / commands / ``EXEC`` round trip.

    :param replies: ``[MULTI's reply, each queued command's reply, EXEC's reply]``, in
        order, without the reply of a leading ``ASKING`` (``Sequence``).
    :returns: an :class:`Outcome` for the transaction as a whole:

        * ``OK`` when ``EXEC`` returned its list (the transaction ran; ``value`` is that
          list, whose items may be the commands' own error replies);
        * ``OTHER`` with ``value=None`` when ``EXEC`` returned nil (a watched key changed:
          nothing ran; the caller raises its ``WatchError``);
        * ``OTHER`` with ``MULTI``'s error when ``MULTI`` was refused (the commands may then
          have run on their own: never resent);
        * the kind of ``EXEC``'s own error when ``EXEC`` was redirected or refused (a
          cluster node discards the transaction and answers ``MOVED``/``ASK``/
          ``TRYAGAIN``/``CLUSTERDOWN``; Redis >= 6.2 answers ``EXECABORT Transaction
          discarded because of: READONLY ...`` or ``LOADING ...``, classified by the
          reason);
        * after ``EXECABORT ... previous errors``: ``OTHER`` with the first queued error
          that retrying cannot cure if there is one (the transaction would fail anyway),
          else the first queued error's kind (e.g. ``MOVED`` while queueing), else
          ``OTHER`` with ``EXEC``'s error.

    Whatever the kind, a transaction is resent whole or not at all: an ``EXEC`` that
    answered an error ran nothing, as Redis's MULTI/EXEC guarantees.

    :raises ValueError: fewer than two replies.
    """
    if len(replies) < 2:
        raise ValueError("a transaction has at least the replies of MULTI and EXEC")
    first = classify(replies[0])
    if first.kind is not Kind.OK:
        return Outcome(Kind.OTHER, replies[0])
    exec_reply = replies[-1]
    if isinstance(exec_reply, list):
        return Outcome(Kind.OK, exec_reply)
    if exec_reply is None:
        return Outcome(Kind.OTHER, None)
    final = classify(exec_reply)
    if final.kind is Kind.OK:
        return Outcome(Kind.OTHER, exec_reply)  # not a reply EXEC can give
    if final.kind.proves_not_run:
        return final
    reason = _exec_abort_reason(exec_reply)
    if reason is not None:
        inner = classify(_errors.response_error(reason))
        if inner.kind.proves_not_run:
            return Outcome(inner.kind, exec_reply, inner.target)
        return final
    queued = [classify(r) for r in replies[1:-1] if isinstance(r, _errors.ResponseError)]
    for outcome in queued:
        if not outcome.kind.proves_not_run:
            return outcome
    if queued:
        return queued[0]
    return final


def _exec_abort_reason(reply: object) -> str | None:
    text = str(reply)
    if not text.startswith("EXECABORT"):
        return None
    _, sep, reason = text.partition(_EXECABORT_BECAUSE)
    return reason.strip() if sep and reason.strip() else None


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
      ``None`` retries none of those. The cluster client's option (5 s).
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
        ``max_redirects + max_readonly_retries + timed_retry_cap(retry_timeout)``."""
        timed = 0 if self.retry_timeout is None else self.timed_retry_cap(self.retry_timeout)
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

    Read-only counters: ``redirects``, ``readonly_retries``, ``timed_retries`` (``int``),
    :attr:`resends`, and ``trail`` (the redirections met, ``list[str]``).
    """

    policy: RetryPolicy
    deadline: float | None = attrs.field(default=None, kw_only=True)
    replica_reads: bool = attrs.field(default=False, kw_only=True)
    watched: bool = attrs.field(default=False, kw_only=True)
    redirects: int = attrs.field(default=0, init=False)
    readonly_retries: int = attrs.field(default=0, init=False)
    timed_retries: int = attrs.field(default=0, init=False)
    trail: list[str] = attrs.field(factory=list, init=False)
    _timed_deadline: float | None = attrs.field(default=None, init=False)
    _timed_cap: int = attrs.field(default=0, init=False)
    _waiting: bool = attrs.field(default=False, init=False)

    @property
    def resends(self) -> int:
        """Resends decided so far (``int``): redirects + readonly_retries + timed_retries."""
        return self.redirects + self.readonly_retries + self.timed_retries

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
              ``moving=None`` (once) :class:`WaitForMoving`; else :class:`Finish`;
            * ``LOST_BEFORE_WRITE``: a time-budgeted :class:`Retry` (with a refresh in a
              cluster), or :class:`Finish` without ``retry_timeout``;
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
                self._waiting = True
                return WaitForMoving(policy.moving_grace)
            return Finish(kind, "not retried: READONLY and the endpoint is not moving")
        if kind is Kind.LOST_BEFORE_WRITE:
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


# ----------------------------------------------------------------------------- pipelines


def group_by_target(items: Iterable[tuple[int, _H]]) -> list[tuple[_H, list[int]]]:
    """Group command indexes by target, keeping the original order.

    :param items: ``(index, target)`` pairs (``int``, any hashable: a node name, an
        address, ``None`` for a standalone connection).
    :returns: ``[(target, [indexes...]), ...]``: each index list ascending, one entry per
        target, the entries ordered by their smallest index. Send the groups one after the
        other, each in one write, so two commands for one node are never in flight
        concurrently and each node sees them in the order they were queued.
    :raises ValueError: an index appears twice.
    """
    groups: dict[_H, list[int]] = {}
    seen: set[int] = set()
    for index, target in sorted(items, key=lambda item: item[0]):
        if index in seen:
            raise ValueError(f"index {index} appears twice")
        seen.add(index)
        groups.setdefault(target, []).append(index)
    return list(groups.items())


@attrs.frozen
class ResendGroup:
    """One write of a pipeline's resend round (from :meth:`PipelineRetry.plan`).

    * ``target``: where to send it (the caller's key: a node name, ``None``, ...).
    * ``indexes``: the commands' positions in the pipeline (``tuple[int, ...]``,
      ascending): send them in this order, in one write.
    * ``asking``: per index, whether an ``ASKING`` must precede the command
      (``tuple[bool, ...]``, as Redis Cluster's ASK redirection).
    * ``delay``: seconds to wait before sending (``float``): the longest of the members'.
    * ``refresh``: ask for a lazy slot-map refresh before sending (``bool``).
    """

    target: Hashable
    indexes: tuple[int, ...]
    asking: tuple[bool, ...]
    delay: float
    refresh: bool

    def commands(self, commands: Sequence[_C], asking: _C) -> list[_C]:
        """The commands to write for this group: ``commands[i]`` for each index, each
        preceded by ``asking`` (e.g. ``("ASKING",)``) where required. ``commands`` is the
        whole pipeline's list."""
        out: list[_C] = []
        for index, ask in zip(self.indexes, self.asking, strict=True):
            if ask:
                out.append(asking)
            out.append(commands[index])
        return out

    def replies(self, replies: Sequence[_R]) -> list[_R]:
        """The commands' own replies out of the replies to :meth:`commands` (the
        ``ASKING`` replies dropped). A command's own reply is what tells whether it ran,
        even when its ``ASKING`` failed.

        :raises ValueError: ``replies`` has not one item per written command.
        """
        expected = len(self.indexes) + sum(self.asking)
        if len(replies) != expected:
            raise ValueError(f"expected {expected} replies, got {len(replies)}")
        out: list[_R] = []
        position = 0
        for ask in self.asking:
            if ask:
                position += 1
            out.append(replies[position])
            position += 1
        return out


_PENDING: Final = object()


@attrs.define
class PipelineRetry:
    """The retry bookkeeping of one pipeline (not a transaction: see
    :func:`classify_transaction` for those).

    Constructor: ``PipelineRetry(policy, size, *, deadline=None, watched=False)``; each
    command gets its own :class:`RetryState` (its own budgets).

    The caller's loop (sans-IO: every ``await`` is the caller's)::

        tracker = PipelineRetry(policy, len(commands))
        for target, indexes in group_by_target(first_targets):   # first round
            tracker.record(indexes, <replies, or the exception>, now, written=...)
        while not tracker.done:
            if (grace := tracker.moving_wait()) is not None:      # standalone READONLY
                tracker.resolve_moving(await wait_for_moving(conn, grace), now)
                continue
            for group in tracker.plan(<target of each index in tracker.resends()>):
                await sleep(group.delay)
                ... send group.commands(commands, ("ASKING",)) to group.target ...
                tracker.record(group.indexes, group.replies(got) or the exception, now)
        replies = tracker.results()   # raise tracker.transport_error first, if any

    Attributes: ``policy`` (:class:`RetryPolicy`), ``size`` (``int``), ``deadline``
    (``float`` or ``None``), ``watched`` (``bool``).
    """

    policy: RetryPolicy
    size: int
    deadline: float | None = attrs.field(default=None, kw_only=True)
    watched: bool = attrs.field(default=False, kw_only=True)
    _states: list[RetryState] = attrs.field(init=False)
    _results: list[object] = attrs.field(init=False)
    _waiting: dict[int, tuple[Outcome, bool, float]] = attrs.field(factory=dict, init=False)
    _resend: dict[int, Retry | Redirect | Ask] = attrs.field(factory=dict, init=False)
    _in_flight: set[int] = attrs.field(init=False)
    _raised: dict[int, BaseException] = attrs.field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 0:
            raise ValueError(f"size must be an int >= 0, got {self.size!r}")
        self._states = [
            RetryState(self.policy, deadline=self.deadline, watched=self.watched)
            for _ in range(self.size)
        ]
        self._results = [_PENDING] * self.size
        self._in_flight = set(range(self.size))

    def state(self, index: int) -> RetryState:
        """The :class:`RetryState` of command ``index`` (``int``)."""
        return self._states[index]

    def record(
        self,
        indexes: Sequence[int],
        results: Sequence[object] | BaseException,
        now: float,
        *,
        written: bool = True,
        moving: bool | None = None,
        replica: bool = False,
    ) -> None:
        """Record what one write of the pipeline produced and decide each command's fate.

        :param indexes: the commands sent in that write, in order (``Sequence[int]``); each
            must be in flight (sent in the first round, or planned by :meth:`plan`).
        :param results: their replies, one per index (error replies as values; ``ASKING``
            replies already dropped), or the exception the write or read raised, which
            then stands for every index.
        :param now: the caller's clock, in seconds (``float``).
        :param written: with an exception: whether any byte may have been accepted
            (``bool``; default ``True``, so nothing is resent); see :func:`classify`.
        :param moving: passed to :meth:`RetryState.decide` for ``READONLY`` replies.
        :param replica: the write went to a replica (``bool``).
        :raises ValueError: an index is not in flight, or ``results`` has the wrong length.
        """
        if isinstance(results, BaseException):
            outcome = classify(results, written=written)
            outcomes = [outcome] * len(indexes)
            raised: BaseException | None = results
        else:
            if len(results) != len(indexes):
                raise ValueError(f"{len(indexes)} indexes but {len(results)} results")
            outcomes = [classify(r) for r in results]
            raised = None
        if len(set(indexes)) != len(indexes):
            raise ValueError("an index appears twice")
        for index in indexes:
            if index not in self._in_flight:
                raise ValueError(f"command {index} is not in flight")
        for index, outcome in zip(indexes, outcomes, strict=True):
            self._in_flight.discard(index)
            decision = self._states[index].decide(outcome, now, moving=moving, replica=replica)
            self._apply(index, outcome, decision, raised, replica)

    def _apply(
        self,
        index: int,
        outcome: Outcome,
        decision: Decision,
        raised: BaseException | None,
        replica: bool,
    ) -> None:
        if isinstance(decision, Finish):
            self._results[index] = outcome.value
            if raised is not None:
                self._raised[index] = raised
        elif isinstance(decision, WaitForMoving):
            self._waiting[index] = (outcome, replica, decision.timeout)
        else:
            self._resend[index] = decision

    def moving_wait(self) -> float | None:
        """Seconds to wait for a MOVING before :meth:`resolve_moving` (``float``, the
        longest asked), or ``None`` when no command waits for one."""
        if not self._waiting:
            return None
        return max(timeout for _outcome, _replica, timeout in self._waiting.values())

    def resolve_moving(self, moving: bool, now: float) -> None:
        """Decide again the commands refused with ``READONLY`` that waited for a MOVING.

        :param moving: whether the endpoint is moving (``bool``), as the wait found.
        :param now: the caller's clock, in seconds (``float``).
        """
        waiting, self._waiting = self._waiting, {}
        for index in sorted(waiting):
            outcome, replica, _timeout = waiting[index]
            decision = self._states[index].decide(outcome, now, moving=moving, replica=replica)
            self._apply(index, outcome, decision, None, replica)

    def resends(self) -> list[tuple[int, Retry | Redirect | Ask]]:
        """The commands to send again and why, ascending by index
        (``list[tuple[int, Decision]]``). Apply each :class:`Redirect` to the slot map
        before routing the :class:`Retry` ones, then give :meth:`plan` their targets."""
        return sorted(self._resend.items(), key=lambda item: item[0])

    def plan(self, targets: Mapping[int, Hashable] | None = None) -> list[ResendGroup]:
        """Group the pending resends into writes, in the pipeline's order.

        :param targets: the target of each index of :meth:`resends` (any hashable: a node
            name, an address), or ``None`` for a standalone client (one target, ``None``).
        :returns: ``list[ResendGroup]``, one per target, ordered by smallest index, each
            index ascending. Send them one after the other (never two at once for one
            node), then :meth:`record` each. The planned commands are now in flight.
        :raises RuntimeError: commands still wait for a MOVING (call :meth:`resolve_moving`
            first).
        :raises ValueError: ``targets`` does not cover exactly the pending resends.
        """
        if self._waiting:
            raise RuntimeError("commands wait for a MOVING: call resolve_moving() first")
        pending = self._resend
        if targets is None:
            targets = dict.fromkeys(pending)
        if set(targets) != set(pending):
            raise ValueError("targets must name exactly the indexes of resends()")
        groups: list[ResendGroup] = []
        for target, indexes in group_by_target((i, targets[i]) for i in pending):
            decisions = [pending[i] for i in indexes]
            groups.append(
                ResendGroup(
                    target=target,
                    indexes=tuple(indexes),
                    asking=tuple(isinstance(d, Ask) for d in decisions),
                    delay=max(d.delay for d in decisions),
                    refresh=any(d.refresh for d in decisions),
                )
            )
        self._in_flight.update(pending)
        self._resend = {}
        return groups

    @property
    def done(self) -> bool:
        """``True`` when every command's outcome is final (``bool``)."""
        return all(result is not _PENDING for result in self._results) and not (
            self._waiting or self._resend or self._in_flight
        )

    @property
    def transport_error(self) -> BaseException | None:
        """The first (by index) exception that ended a command, not an error reply: a
        connection lost after the write, a timeout, or a failure that exhausted the time
        budget; ``None`` if none. A pipeline raises it, as redis-py does."""
        if not self._raised:
            return None
        return self._raised[min(self._raised)]

    def results(self) -> list[object]:
        """The final list, one item per command in the pipeline's order: each reply, or
        its error (error replies and transport errors as values).

        :raises RuntimeError: not :attr:`done` yet.
        """
        if not self.done:
            raise RuntimeError("the pipeline still has commands to send or record")
        return list(self._results)
