"""Maintenance push notifications: parsing RESP3 push frames into attrs values (sans-IO).

A managed Redis announces maintenance on each connection with push frames named
``MOVING``, ``MIGRATING``, ``MIGRATED``, ``FAILING_OVER``, ``FAILED_OVER``, ``SMIGRATING``
and ``SMIGRATED`` (see docs/maintenance.md for what the client does with each).
:func:`parse_notification` turns the list hiredis returns for a push frame into one of the
classes below, ``None`` for push frames of other subsystems (pub/sub, client tracking), or
a :class:`Malformed` value describing why a maintenance frame was rejected. It never
raises, so a bad frame cannot break the command that read it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar, Final, TypeAlias

import attrs

from .endpoint import Endpoint

__all__ = [
    "MAINTENANCE_PUSH_NAMES",
    "FailedOver",
    "FailingOver",
    "Malformed",
    "Migrated",
    "Migrating",
    "Moving",
    "Notification",
    "ParseResult",
    "SMigrated",
    "SMigrating",
    "SlotMove",
    "describe_shape",
    "parse_notification",
]


@attrs.frozen
class Moving:
    """``MOVING seq time [endpoint]``: the connection's endpoint goes away in ``time``
    seconds; reconnect to ``endpoint`` (as Redis's MOVING notification).

    :ivar seq_id: the server's sequence id (``int``), used to ignore replays.
    :ivar time: seconds (``float``, never negative; a negative value on the wire is
        clamped to 0) the server gives the client before the old endpoint closes.
    :ivar endpoint: the new :class:`Endpoint`, or ``None`` for a null endpoint
        (omitted, RESP null, empty or ``<nil>``): reconnect to the configured address
        after ``time / 2`` seconds.
    """

    NAME: ClassVar[str] = "MOVING"
    seq_id: int
    time: float
    endpoint: Endpoint | None = None

    @property
    def null_endpoint_delay(self) -> float:
        """Seconds (``float``) to wait before reconnecting for a null endpoint: half of
        ``time``, fractional (Redis's reference client rounds down to whole seconds)."""
        return self.time / 2


@attrs.frozen
class Migrating:
    """``MIGRATING seq ...``: the shard behind this connection starts migrating; relax this
    connection's timeouts until :class:`Migrated` (as Redis's MIGRATING notification).

    :ivar seq_id: the sequence id (``int``), or ``None`` when the server sent a non-integer
        there (tolerated: the relaxation still applies). Extra elements are ignored.
    """

    NAME: ClassVar[str] = "MIGRATING"
    seq_id: int | None


@attrs.frozen
class Migrated:
    """``MIGRATED seq ...``: the migration announced by :class:`Migrating` finished;
    restore this connection's timeouts. ``seq_id`` as in :class:`Migrating`."""

    NAME: ClassVar[str] = "MIGRATED"
    seq_id: int | None


@attrs.frozen
class FailingOver:
    """``FAILING_OVER seq ...``: the shard behind this connection starts a failover; relax
    this connection's timeouts until :class:`FailedOver`. ``seq_id`` as in
    :class:`Migrating`."""

    NAME: ClassVar[str] = "FAILING_OVER"
    seq_id: int | None


@attrs.frozen
class FailedOver:
    """``FAILED_OVER seq ...``: the failover finished; restore this connection's timeouts.
    ``seq_id`` as in :class:`Migrating`."""

    NAME: ClassVar[str] = "FAILED_OVER"
    seq_id: int | None


@attrs.frozen
class SMigrating:
    """``SMIGRATING seq slot-spec ...`` (cluster): slots are migrating away from the node of
    this connection; relax its timeouts until :class:`SMigrated`.

    :ivar seq_id: the sequence id (``int``).
    :ivar slots: the slot specs as sent (``tuple[str, ...]``): single slots ``"1000"`` or
        inclusive ranges ``"2000-3000"``; not interpreted. Integer elements are kept as
        their decimal text; other element types are left out.
    """

    NAME: ClassVar[str] = "SMIGRATING"
    seq_id: int
    slots: tuple[str, ...]


@attrs.frozen
class SlotMove:
    """One entry of :class:`~trio_maint.SMigrated`: ``slots`` moved from ``source`` to ``target``.

    :ivar source: ``host:port`` text of the node the slots left, exactly as the server
        wrote it (``str``), or ``None`` for the two-element entry shape ``[target, slots]``.
    :ivar target: ``host:port`` text of the node that now serves the slots (``str``).
    :ivar slots: slots and inclusive ranges (``tuple[str, ...]``), the server's
        comma-separated list split on ``,`` with blanks dropped.
    """

    source: str | None
    target: str
    slots: tuple[str, ...]


@attrs.frozen
class SMigrated:
    """``SMIGRATED seq [[source, target, slots], ...]`` (cluster): slots finished moving;
    restore this connection's timeouts and reload the cluster topology if one of the
    sources is this client's node (as Redis's SMIGRATED notification).

    Entries may be triples ``[source, target, slots]`` or pairs ``[target, slots]``.

    :ivar seq_id: the sequence id (``int``), for de-duplication across connections.
    :ivar moves: the well-formed entries (``tuple[SlotMove, ...]``), in order.
    :ivar skipped: how many entries were of another shape and left out (``int``).
    """

    NAME: ClassVar[str] = "SMIGRATED"
    seq_id: int
    moves: tuple[SlotMove, ...]
    skipped: int = 0


@attrs.frozen
class Malformed:
    """A push frame named like a maintenance notification (or with no usable name) whose
    structure is wrong. Log it once at WARNING with ``shape`` and carry on.

    :ivar name: the notification name (``str``), or ``None`` if the frame had none.
    :ivar reason: what is wrong (``str``), e.g. ``"seq_id is not an integer"``.
    :ivar shape: the frame's structure without its values (``str``), from
        :func:`describe_shape`, e.g. ``"[str, int, bytes(3)]"``.
    """

    name: str | None
    reason: str
    shape: str


#: Any parsed maintenance notification.
Notification: TypeAlias = (
    Moving | Migrating | Migrated | FailingOver | FailedOver | SMigrating | SMigrated
)

_Parser: TypeAlias = Callable[[Sequence[object]], Notification]

#: What :func:`parse_notification` returns.
ParseResult: TypeAlias = Notification | Malformed | None

#: The seven push-frame names handled by the maintenance subsystem (case-sensitive).
MAINTENANCE_PUSH_NAMES: Final = frozenset(
    {"MOVING", "MIGRATING", "MIGRATED", "FAILING_OVER", "FAILED_OVER", "SMIGRATING", "SMIGRATED"}
)

_MAX_SHAPE_ITEMS: Final = 8
_MAX_SHAPE_DEPTH: Final = 3


def describe_shape(value: object, _depth: int = 0) -> str:
    """Describe the structure of a decoded RESP value without its contents, for logs.

    Strings show their type and length (``bytes(14)``, ``str(6)``); lists show their
    elements (at most 8, then ``...+N``), nested at most 3 deep. Never raises.
    """
    try:
        if isinstance(value, bytes | bytearray | str):
            return f"{type(value).__name__}({len(value)})"
        if value is None:
            return "null"
        if isinstance(value, list | tuple):
            if _depth >= _MAX_SHAPE_DEPTH:
                return f"list({len(value)})"
            items = [describe_shape(v, _depth + 1) for v in value[:_MAX_SHAPE_ITEMS]]
            if len(value) > _MAX_SHAPE_ITEMS:
                items.append(f"...+{len(value) - _MAX_SHAPE_ITEMS}")
            return "[" + ", ".join(items) + "]"
        if isinstance(value, dict):
            return f"map({len(value)})"
        return type(value).__name__
    except Exception:
        return "?"


def _text(value: object) -> str | None:
    """``value`` as text when it is ``str`` or UTF-8 ``bytes``, else ``None``."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None


def _int(value: object) -> int | None:
    """``value`` when it is a RESP integer (``int`` but not ``bool``), else ``None``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


class _Invalid(Exception):
    pass


def parse_notification(frame: Sequence[object]) -> ParseResult:
    """Parse one push frame as hiredis returns it (elements ``bytes`` or ``str``, ``int``,
    ``None``, nested ``list``...).

    :returns: a :data:`~trio_maint.Notification` for a well-formed maintenance frame; ``None`` for a
        push frame whose name is not in :data:`MAINTENANCE_PUSH_NAMES` (``message``,
        ``invalidate``, ...); a :class:`Malformed` value for an empty frame, a frame
        whose first element is not text, or a maintenance frame with a wrong structure.
        Validation follows Redis's maintenance notifications (see docs/maintenance.md):
        sequence ids must be RESP integers where they are checked (MOVING, SMIGRATING,
        SMIGRATED), MOVING's time must be an integer number of seconds.
    :raises: nothing, whatever ``frame`` is.
    """
    name: str | None = None
    try:
        if not isinstance(frame, list | tuple) or not frame:
            raise _Invalid("empty frame" if isinstance(frame, list | tuple) else "not a list")
        name = _text(frame[0])
        if name is None:
            raise _Invalid("notification name is not text")
        if name not in MAINTENANCE_PUSH_NAMES:
            return None
        return _PARSERS[name](frame)
    except _Invalid as exc:
        return Malformed(name, str(exc), describe_shape(frame))
    except Exception as exc:  # defensive: a parser bug must not reach the reader
        return Malformed(name, f"unexpected {type(exc).__name__}", describe_shape(frame))


def _parse_moving(frame: Sequence[object]) -> Moving:
    if len(frame) < 3:
        raise _Invalid(f"MOVING needs at least 3 elements, got {len(frame)}")
    seq_id = _int(frame[1])
    if seq_id is None:
        raise _Invalid("seq_id is not an integer")
    seconds = _int(frame[2])
    if seconds is None:
        raise _Invalid("time is not an integer")
    endpoint: Endpoint | None = None
    if len(frame) > 3 and frame[3] is not None:
        text = _text(frame[3])
        if text is None:
            raise _Invalid("endpoint is not text or null")
        if text and text != "<nil>":
            try:
                endpoint = Endpoint.parse(text)
            except ValueError as exc:
                raise _Invalid(f"endpoint is not host:port ({exc})") from None
    return Moving(seq_id, float(max(seconds, 0)), endpoint)


def _parse_simple(
    cls: type[Migrating | Migrated | FailingOver | FailedOver],
) -> _Parser:
    def parse(frame: Sequence[object]) -> Notification:
        if len(frame) < 2:
            raise _Invalid(f"{cls.NAME} needs at least 2 elements, got {len(frame)}")
        return cls(_int(frame[1]))

    return parse


def _parse_smigrating(frame: Sequence[object]) -> SMigrating:
    if len(frame) < 3:
        raise _Invalid(f"SMIGRATING needs at least 3 elements, got {len(frame)}")
    seq_id = _int(frame[1])
    if seq_id is None:
        raise _Invalid("seq_id is not an integer")
    slots: list[str] = []
    for item in frame[2:]:
        number = _int(item)
        text = str(number) if number is not None else _text(item)
        if text is not None:
            slots.append(text)
    return SMigrating(seq_id, tuple(slots))


def _parse_smigrated(frame: Sequence[object]) -> SMigrated:
    if len(frame) < 3:
        raise _Invalid(f"SMIGRATED needs at least 3 elements, got {len(frame)}")
    seq_id = _int(frame[1])
    if seq_id is None:
        raise _Invalid("seq_id is not an integer")
    entries = frame[2]
    if not isinstance(entries, list | tuple):
        raise _Invalid("entries element is not an array")
    if not entries:
        raise _Invalid("entries array is empty")
    moves: list[SlotMove] = []
    skipped = 0
    for entry in entries:
        move = _slot_move(entry)
        if move is None:
            skipped += 1
        else:
            moves.append(move)
    return SMigrated(seq_id, tuple(moves), skipped)


def _slot_move(entry: object) -> SlotMove | None:
    if not isinstance(entry, list | tuple) or len(entry) not in (2, 3):
        return None
    texts = [_text(item) for item in entry]
    if any(text is None for text in texts):
        return None
    strings = [t for t in texts if t is not None]
    source = strings[0] if len(strings) == 3 else None
    target, slots = strings[-2], strings[-1]
    if not target:
        return None
    return SlotMove(source, target, tuple(s.strip() for s in slots.split(",") if s.strip()))


_PARSERS: Final[dict[str, _Parser]] = {
    "MOVING": _parse_moving,
    "MIGRATING": _parse_simple(Migrating),
    "MIGRATED": _parse_simple(Migrated),
    "FAILING_OVER": _parse_simple(FailingOver),
    "FAILED_OVER": _parse_simple(FailedOver),
    "SMIGRATING": _parse_smigrating,
    "SMIGRATED": _parse_smigrated,
}
