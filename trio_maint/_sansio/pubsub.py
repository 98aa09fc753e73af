"""Pub/sub without I/O: :class:`Message`, what a frame read on a subscriber connection is,
slot grouping of shard channels, and :class:`AckQueue`, the pending acknowledgements of
the commands sent on a subscriber's connections.

Every command sent on a subscriber connection is registered, in send order, as an
:class:`Ack` naming what answers it: one confirmation push frame per name (``subscribe``,
``psubscribe``, ... with the channel's or pattern's name; a no-argument unsubscribe gets
exactly one, with a null name) or, for ``PING``, one plain reply. A confirmation consumes
one expected name of the oldest acknowledgement expecting it; an error reply (a non-push
error frame) answers the oldest pending one, as the server answers commands in order.
:class:`~trio_maint.PubSub` carries this out over its connections.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any, Final

import attrs

from .resp import PushNotification
from .slots import key_slot

__all__ = [
    "CONFIRMATIONS",
    "Ack",
    "AckQueue",
    "Message",
    "channel_name",
    "slot_groups",
    "to_message",
]

_MESSAGE_KINDS: Final = frozenset(
    {
        "message",
        "pmessage",
        "smessage",
        "subscribe",
        "psubscribe",
        "ssubscribe",
        "unsubscribe",
        "punsubscribe",
        "sunsubscribe",
        "pong",
    }
)
#: The message types that confirm a (un)subscribe command.
CONFIRMATIONS: Final = frozenset(
    {"subscribe", "psubscribe", "ssubscribe", "unsubscribe", "punsubscribe", "sunsubscribe"}
)
#: The confirmation type answering each command (``""``: a plain reply answers it).
_ANSWERED_BY: Final = {
    "SUBSCRIBE": "subscribe",
    "PSUBSCRIBE": "psubscribe",
    "SSUBSCRIBE": "ssubscribe",
    "UNSUBSCRIBE": "unsubscribe",
    "PUNSUBSCRIBE": "punsubscribe",
    "SUNSUBSCRIBE": "sunsubscribe",
    "PING": "",
}
_FIELDS: Final = ("type", "channel", "data", "pattern")


@attrs.frozen
class Message:
    """One pub/sub event, read by attribute (``message.data``) or, as redis-py's dicts,
    by key (``message["data"]``, ``message.get("pattern")``, ``dict(message)``).

    * ``type`` (``str``): ``"message"``, ``"pmessage"``, ``"smessage"``, or a confirmation
      (``"subscribe"``, ``"unsubscribe"``, ``"psubscribe"``, ...), or ``"pong"``.
    * ``channel``: the channel (``bytes``, or ``str`` with ``decode_responses``).
    * ``data``: the payload; for confirmations the number of subscriptions (``int``).
    * ``pattern``: the matching pattern for ``"pmessage"``, else ``None``.
    """

    type: str
    channel: Any
    data: Any
    pattern: Any = None

    def __getitem__(self, key: str) -> Any:
        """``message["type"]``, ``["channel"]``, ``["data"]``, ``["pattern"]``.

        :raises KeyError: any other key.
        """
        if key in _FIELDS:
            return getattr(self, key)
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` is one of the four keys."""
        return key in _FIELDS

    def get(self, key: str, default: Any = None) -> Any:
        """``message[key]``, or ``default`` for an unknown key."""
        return getattr(self, key) if key in _FIELDS else default

    def keys(self) -> tuple[str, ...]:
        """The keys, ``("type", "channel", "data", "pattern")``."""
        return _FIELDS


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def channel_name(value: Any) -> bytes:
    """A channel or pattern name as the server sees it (``str`` is sent UTF-8 encoded)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    return _text(value).encode("utf-8")


def slot_groups(channels: Iterable[Any]) -> list[list[Any]]:
    """``channels`` grouped by cluster slot (:func:`~trio_maint.key_slot`), in order of
    first appearance: Redis Cluster refuses an ``SSUBSCRIBE`` (or ``SUNSUBSCRIBE``) whose
    channels hash to different slots (``CROSSSLOT``), so each group is one command."""
    groups: dict[int, list[Any]] = {}
    for channel in channels:
        groups.setdefault(key_slot(channel_name(channel)), []).append(channel)
    return list(groups.values())


def to_message(frame: Any) -> Message | None:
    """The :class:`Message` a frame read on a subscriber connection carries, or ``None``
    (a push frame that is not pub/sub, e.g. a maintenance notification)."""
    if isinstance(frame, PushNotification) and frame:
        kind = _text(frame[0])
        if kind not in _MESSAGE_KINDS:
            return None
        if kind == "pmessage" and len(frame) >= 4:
            return Message(kind, frame[2], frame[3], frame[1])
        if len(frame) >= 3:
            return Message(kind, frame[1], frame[2])
        return None
    if isinstance(frame, list) and frame and _text(frame[0]).lower() == "pong":
        return Message("pong", None, frame[1] if len(frame) > 1 else None)
    if frame in (b"PONG", "PONG"):
        return Message("pong", None, frame)
    return None


@attrs.define(eq=False)
class Ack:
    """A command sent on ``conn`` whose answer has not been read yet."""

    #: The connection it was sent on (compared by identity).
    conn: object
    #: The command (``"SUBSCRIBE"``, ...).
    command: str
    #: The confirmation type that answers it, ``""`` for a plain reply (``PING``).
    kind: str
    #: Names still to be confirmed; ``None``: one confirmation of any name.
    expected: list[bytes] | None
    #: Names this command added to its subscription set (forgotten if it is refused).
    added: frozenset[Any] = frozenset()
    #: A caller waits for it (its error is raised there; otherwise logged).
    waited: bool = False
    #: Answered (or failed with its connection).
    done: bool = False
    #: The error reply (a ``ResponseError``), or the connection's failure.
    error: Exception | None = None


class AckQueue:
    """The pending :class:`Ack` values of one subscriber, in send order."""

    def __init__(self) -> None:
        self._pending: deque[Ack] = deque()

    def __len__(self) -> int:
        return len(self._pending)

    def __iter__(self) -> Iterator[Ack]:
        return iter(self._pending)

    def expect(self, conn: object, command: str, names: Iterable[Any]) -> Ack:
        """Register ``command names...``, about to be sent on ``conn`` (before the write:
        a reader may read its answer before the write returns).

        :raises KeyError: a command that is not pub/sub.
        """
        kind = _ANSWERED_BY[command]
        wanted = [channel_name(n) for n in names]
        expected = wanted if wanted or not kind else None
        ack = Ack(conn, command, kind, expected)
        self._pending.append(ack)
        return ack

    def withdraw(self, ack: Ack) -> None:
        """Forget ``ack`` (its command could not be sent)."""
        if ack in self._pending:
            self._pending.remove(ack)

    def _first(self, conn: object) -> Ack | None:
        return next((a for a in self._pending if a.conn is conn), None)

    def _resolve(self, ack: Ack, error: Exception | None) -> Ack:
        self._pending.remove(ack)
        ack.done, ack.error = True, error
        return ack

    def error_reply(self, conn: object, error: Exception) -> Ack | None:
        """An error reply read on ``conn`` answers its oldest pending command: that
        :class:`Ack`, resolved with ``error``, or ``None`` when nothing was pending."""
        ack = self._first(conn)
        return None if ack is None else self._resolve(ack, error)

    def plain_reply(self, conn: object) -> Ack | None:
        """A plain (non-push, non-error) reply read on ``conn``: the ``PING`` it answers,
        resolved, or ``None`` when the oldest pending command is not a ``PING``."""
        ack = self._first(conn)
        return self._resolve(ack, None) if ack is not None and ack.kind == "" else None

    def confirmation(self, conn: object, kind: str, channel: Any) -> Ack | None:
        """A confirmation of ``kind`` for ``channel`` read on ``conn``: consumes it from
        the oldest acknowledgement expecting it; returns that one when it is complete.
        One nobody expects (the ``sunsubscribe`` a cluster node sends when a slot
        moves) changes nothing."""
        name = None if channel is None else channel_name(channel)
        for ack in self._pending:
            if ack.conn is not conn or ack.kind != kind:
                continue
            if ack.expected is None:
                return self._resolve(ack, None)
            if name in ack.expected:
                ack.expected.remove(name)
                return self._resolve(ack, None) if not ack.expected else None
        return None

    def fail(self, conn: object | None, error: Exception) -> list[Ack]:
        """Resolve with ``error`` every acknowledgement pending on ``conn`` (``None``:
        all): the connection failed, was replaced or closed. Returns them."""
        failed = [a for a in self._pending if conn is None or a.conn is conn]
        return [self._resolve(ack, error) for ack in failed]

    def refused_names(self, ack: Ack) -> frozenset[Any]:
        """What a refused ``ack`` added and no later pending command of its kind asked
        for again: the names to forget."""
        again = {n for a in self._pending if a.command == ack.command for n in a.added}
        return ack.added - again
