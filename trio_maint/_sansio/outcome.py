"""What one attempt's outcome proves (sans-IO: no Trio import): the classification half of
trio_maint's one retry policy (:mod:`trio_maint._sansio.retry` decides what follows).

An attempt ends with a reply (error replies are values, as the connection returns them) or
an exception. :func:`classify` turns it into an :class:`Outcome` whose :class:`Kind` says
whether the command provably did not run (``MOVED``, ``ASK``, ``TRYAGAIN``,
``CLUSTERDOWN``, ``READONLY``, ``LOADING``, a connection lost before anything was written)
or may have run (anything else); :func:`classify_transaction` does the same for the
replies of one ``MULTI``/``EXEC`` round trip, and :func:`parse_redirect` reads the target
of a Redis Cluster ``MOVED``/``ASK`` reply.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Final

import attrs

from . import errors as _errors
from .endpoint import split_host_port

__all__ = [
    "Kind",
    "Outcome",
    "RedirectTarget",
    "classify",
    "classify_transaction",
    "parse_redirect",
]

#: Number of hash slots of Redis Cluster (slots are 0..16383).
_SLOTS: Final = 16384
#: Prefix of the EXEC reply when the server refused EXEC itself (Redis >= 6.2): the
#: transaction was discarded, the reason follows.
_EXECABORT_BECAUSE: Final = "because of: "


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


def classify(result: object, *, written: bool | None = None) -> Outcome:
    """Classify what one attempt produced.

    :param result: a reply value (error replies are values, as the connection returns
        them), or the exception the attempt raised.
    :param written: for a transport error only (``bool`` or ``None``): whether any byte of
        the request may have been accepted by the socket. ``None`` (the default) reads the
        error's own ``written`` flag (:class:`~trio_maint.ConnectionError` carries one, set
        to ``False`` by the connection only when provably nothing was written), and assumes
        ``True`` for an error without one (the safe assumption: the command may have run).
        Pass ``False`` when the pool acquisition (or its dial) failed, so the request was
        never written whatever the error says about the handshake.
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
        if written is None:
            written = _errors.request_written(result)
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
