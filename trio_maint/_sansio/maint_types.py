"""The values of the maintenance decision core (sans-IO): who owns a connection
(:class:`Phase`), what a handoff attempt came to (:class:`Outcome`), the verdicts, the
actions the :class:`~trio_maint._sansio.maint.MaintenanceMachine` asks its shell to carry
out (:data:`Action`), and its per-connection records and state snapshots."""

from __future__ import annotations

import enum
from typing import TypeAlias

import attrs

from .config import MaintMode
from .endpoint import Endpoint
from .events import MaintenanceEvent
from .timeouts import RelaxedTimeouts

__all__ = [
    "Action",
    "CancelHandoff",
    "ConnKind",
    "ConnRecord",
    "Discard",
    "Emit",
    "GiveBack",
    "MachineState",
    "Mark",
    "MovingSeen",
    "Outcome",
    "Phase",
    "ReadonlyVerdict",
    "Relax",
    "Restore",
    "ScheduleTimer",
    "SetDialTarget",
    "StartHandoff",
    "TakeIdle",
    "Verdict",
]


class Phase(enum.Enum):
    """Who holds a connection, as the machine sees it.

    ``POOL``: its usual owner, the pool (its idle list or a borrower; which one is the
    pool's business: a :class:`TakeIdle` asks) or, for a pub/sub connection, its PubSub;
    ``QUEUED``: handed to the HandoffManager, not started; ``RUNNING``: a handoff attempt
    is under way; ``RETRY_WAIT``: a failed dial waits for its retry (held by the
    maintenance shell). A connection marked for a handoff that is not due yet stays
    ``POOL`` with a :class:`~trio_maint.lowlevel.Mark` whose ``due`` is in the future (*scheduled*).
    """

    POOL = "pool"
    QUEUED = "queued"
    RUNNING = "running"
    RETRY_WAIT = "retry-wait"


class ConnKind(enum.Enum):
    """``POOLED``: a connection of the pool; ``PUBSUB``: a subscriber connection (handed
    off make-before-break: a new connection subscribes, then replaces it)."""

    POOLED = "pooled"
    PUBSUB = "pubsub"


class Verdict(enum.Enum):
    """The pool's answer on acquire/release: ``KEEP`` (lend it / pool it) or ``TAKEN``
    (the maintenance layer now owns it for a handoff)."""

    KEEP = "keep"
    TAKEN = "taken"


class Outcome(enum.Enum):
    """How a handoff attempt ended (:meth:`MaintenanceMachine.handoff_result`).

    ``OK``; ``DIAL_ERROR`` (the new endpoint could not be reached in time: retried);
    ``ERROR`` (the handshake or swap failed: not retried); ``BREAKER_OPEN`` (the attempt
    was refused by the target's breaker); ``QUEUE_FULL`` (the HandoffManager's queue
    stayed full); ``ABANDONED`` (the manager closed).
    """

    OK = "ok"
    DIAL_ERROR = "dial-error"
    ERROR = "error"
    BREAKER_OPEN = "breaker-open"
    QUEUE_FULL = "queue-full"
    ABANDONED = "abandoned"


class ReadonlyVerdict(enum.Enum):
    """After a write was refused with ``READONLY``: ``RETRY`` (the endpoint is moving, the
    write did not run: send it again), ``WAIT`` (wait a little for a MOVING, then ask
    again with ``waited=True``) or ``RAISE`` (a genuine read-only server)."""

    RETRY = "retry"
    WAIT = "wait"
    RAISE = "raise"


# ------------------------------------------------------------------------------- actions


@attrs.frozen
class Relax:
    """Install ``timeouts`` (a :class:`RelaxedTimeouts`) as connection ``conn_id``'s
    timeout policy."""

    conn_id: int
    timeouts: RelaxedTimeouts


@attrs.frozen
class Restore:
    """Remove connection ``conn_id``'s timeout policy (nothing is relaxed any more)."""

    conn_id: int


@attrs.frozen
class TakeIdle:
    """Take connection ``conn_id`` out of the pool's idle list if it is there, and report
    with :meth:`MaintenanceMachine.claimed`."""

    conn_id: int


@attrs.frozen
class StartHandoff:
    """Queue connection ``conn_id`` with the HandoffManager, towards ``endpoint`` (the
    attempt asks :meth:`MaintenanceMachine.attempt_started` for the target when it
    starts)."""

    conn_id: int
    endpoint: Endpoint
    seq_id: int


@attrs.frozen
class CancelHandoff:
    """Withdraw connection ``conn_id``'s handoff from the HandoffManager."""

    conn_id: int


@attrs.frozen
class GiveBack:
    """Give connection ``conn_id`` back to the pool's idle list (pub/sub: keep using it)."""

    conn_id: int


@attrs.frozen
class Discard:
    """Close connection ``conn_id`` and remove it from the pool; ``reason`` (``str``)."""

    conn_id: int
    reason: str


@attrs.frozen
class ScheduleTimer:
    """Call :meth:`MaintenanceMachine.timer_fired` at ``at`` (``float``) or earlier."""

    at: float


@attrs.frozen
class SetDialTarget:
    """New connections go to ``endpoint`` from now on (informational: the shell asks
    :meth:`MaintenanceMachine.dial_target` when it dials)."""

    endpoint: Endpoint


@attrs.frozen
class MovingSeen:
    """A new MOVING was accepted: wake tasks waiting for one (``READONLY`` handling)."""


@attrs.frozen
class Emit:
    """Publish ``event`` (a :data:`~trio_maint._sansio.events.MaintenanceEvent`)."""

    event: MaintenanceEvent


#: Any action of the machine.
Action: TypeAlias = (
    Relax
    | Restore
    | TakeIdle
    | StartHandoff
    | CancelHandoff
    | GiveBack
    | Discard
    | ScheduleTimer
    | SetDialTarget
    | MovingSeen
    | Emit
)


# --------------------------------------------------------------------------------- state


@attrs.frozen
class Mark:
    """A connection's pending handoff: to ``target`` (:class:`~trio_maint.Endpoint`) for
    the MOVING ``seq_id`` (``int``) read from ``source`` (:class:`~trio_maint.Endpoint`),
    not before ``due`` (``float``, the machine's clock); ``null`` (``bool``) for a null
    endpoint (reconnect to the same address); ``urgent`` (``bool``) once the old endpoint
    refused a write with ``READONLY``: it starts at once, paced or not."""

    target: Endpoint
    seq_id: int
    source: Endpoint
    due: float
    null: bool = False
    urgent: bool = False


@attrs.define(eq=False)
class ConnRecord:
    """What the machine knows of one connection; read it, never change it.

    :ivar conn_id: the connection's id (``int``; a pub/sub link's is negative).
    :ivar kind: :class:`ConnKind`; :ivar phase: :class:`Phase` (who holds it).
    :ivar endpoint: where its stream is (:class:`~trio_maint.Endpoint`).
    :ivar mark: its pending handoff (:class:`Mark`) or ``None``.
    :ivar attempts: dial attempts of the current handoff (``int``).
    :ivar dialing: the endpoint of the attempt under way, or ``None``.
    :ivar tried: the endpoint the current handoff's latest attempt dialed, or ``None``
        (named in its failure when the mark is gone by then).
    :ivar redo: a newer MOVING changed the target during the attempt (``bool``).
    :ivar retry_at: when a failed dial is retried (``float``) or ``None``.
    :ivar queued_at: when the current handoff was queued (``float``) or ``None``.
    :ivar recent_starts: when its latest handoffs were started (``tuple[float, ...]``,
        the pacing window).
    :ivar seen: ``(source, seq_id)`` of the latest MOVING applied to it, or ``None``.
    :ivar timeouts: its relaxation (:class:`~trio_maint.lowlevel.RelaxedTimeouts`) while
        installed, or ``None``.
    """

    conn_id: int
    kind: ConnKind
    endpoint: Endpoint
    phase: Phase
    mark: Mark | None = None
    attempts: int = 0
    dialing: Endpoint | None = None
    tried: Endpoint | None = None
    redo: bool = False
    retry_at: float | None = None
    queued_at: float | None = None
    recent_starts: tuple[float, ...] = ()
    seen: tuple[Endpoint, int] | None = None
    timeouts: RelaxedTimeouts | None = None


@attrs.frozen
class MachineState:
    """A snapshot of the machine at some ``now``.

    :ivar mode: the effective :class:`~trio_maint.MaintMode`.
    :ivar relaxed_connections: connections whose timeouts are relaxed (``int``).
    :ivar open_windows: some connection has a maintenance window open (``bool``).
    :ivar pending_handoffs: connections queued, running, waiting to retry, or marked
        with a handoff not yet started (``int``).
    :ivar completed_handoffs / failed_handoffs: totals (``int``).
    :ivar dial_target: where new connections go (:class:`~trio_maint.Endpoint`).
    :ivar last_moving_seq: the seqID of the latest MOVING accepted (``int | None``).
    :ivar moving_deadline: when its ``time`` runs out (``float | None``).
    :ivar breakers: circuit breakers kept (``int``).
    """

    mode: MaintMode
    relaxed_connections: int
    open_windows: bool
    pending_handoffs: int
    completed_handoffs: int
    failed_handoffs: int
    dial_target: Endpoint
    last_moving_seq: int | None
    moving_deadline: float | None
    breakers: int
