"""A handoff request and what the HandoffManager reports about them: the
:class:`HandoffConnection` protocol, the request (:class:`Job`) and its :class:`Phase`, and
the :class:`HandoffStats` snapshot."""

from __future__ import annotations

import enum
from typing import Generic, Protocol, TypeVar

import attrs
import trio

from .._sansio.endpoint import Endpoint

__all__ = ["ConnT", "HandoffConnection", "HandoffStats", "Job", "Phase", "withdrawn"]


class HandoffConnection(Protocol):
    """What the manager needs from a connection: a process-wide unique ``id`` (``int``),
    stable across handoffs. Everything else is done by the owner's ``perform``."""

    @property
    def id(self) -> int: ...


ConnT = TypeVar("ConnT", bound=HandoffConnection)


class Phase(enum.Enum):
    """Where a handoff request is."""

    WAITING_ROOM = "waiting for room in the queue"
    QUEUED = "queued"
    RUNNING = "running"
    RETRY_WAIT = "waiting to retry"


@attrs.define(eq=False)
class Job(Generic[ConnT]):
    """One handoff request: the connection, its target and where it is."""

    conn: ConnT
    endpoint: Endpoint
    seq_id: int
    phase: Phase
    attempts: int = 0
    redo: bool = False
    done: bool = False
    scope: trio.CancelScope | None = None


def withdrawn(job: Job[ConnT]) -> bool:
    """Whether ``job`` was withdrawn or finished (``job.done``)."""
    # A function call, so that type checkers do not assume ``done`` unchanged across awaits.
    return job.done


@attrs.frozen
class HandoffStats:
    """A snapshot of a :class:`HandoffManager`.

    :ivar pending: connections the manager owns (queued, running, waiting to retry or
        waiting for room in the queue) (``int``).
    :ivar queued: requests sitting in the queue (``int``).
    :ivar running: handoffs being performed now (``int``).
    :ivar retry_waiting: handoffs waiting to retry a failed dial (``int``).
    :ivar completed: handoffs that succeeded since the start (``int``).
    :ivar failed: handoffs that failed since the start, any reason (``int``).
    :ivar queue_full: requests refused because the queue stayed full (``int``).
    :ivar workers: worker tasks alive (``int``).
    :ivar max_workers: the worker limit (``int``).
    :ivar queue_capacity: the queue's capacity, ``handoff_queue_size`` (``int``).
    :ivar scheduled: delayed handoffs (null-endpoint MOVING) not yet due (``int``).
    """

    pending: int
    queued: int
    running: int
    retry_waiting: int
    completed: int
    failed: int
    queue_full: int
    workers: int
    max_workers: int
    queue_capacity: int
    scheduled: int
