"""The :class:`ReplyTimer`: one task per client bounding every reply wait of its pool's
connections (docs/performance.md)."""

from __future__ import annotations

import math
from typing import Final, Protocol

import trio

__all__ = ["ReplyTimer", "ReplyWaiter"]

_INF: Final = math.inf


class ReplyWaiter(Protocol):
    """What the timer needs of a connection (:class:`~trio_maint.lowlevel.Connection`)."""

    def _wake_reply_wait(self, *, timed_out: bool) -> None:
        """Wake this connection's armed reply wait (see :class:`ReplyTimer`)."""


class ReplyTimer:
    """Bounds the reply waits of a pool's connections without a cancel scope per reply.

    A connection waiting for a reply on a plain socket registers its deadline (Trio time,
    ``float`` seconds) with :meth:`arm` and removes it with :meth:`disarm`; :meth:`run`, one
    task in the client's nursery, sleeps until the earliest deadline registered (the one
    cancel scope, whose deadline only moves when a shorter one arrives) and wakes the
    connections whose deadline has passed with :func:`trio.lowlevel.notify_closing`, so
    their wait raises and the command fails with ``TimeoutError`` as it would under its
    own cancel scope (the connection is then broken and discarded). Entering and leaving
    a cancel scope per reply was the largest cost of a command in the profile
    (docs/performance.md). A connection without a running timer uses a cancel scope.
    """

    __slots__ = ("_armed", "_next_wake", "_scope", "running")

    def __init__(self) -> None:
        self._armed: dict[ReplyWaiter, float] = {}
        #: Never later than the earliest deadline armed (it may be earlier: a stale wake).
        self._next_wake = _INF
        self._scope: trio.CancelScope | None = None
        #: True while :meth:`run` runs; connections only arm a running timer.
        self.running = False

    def arm(self, conn: ReplyWaiter, deadline: float) -> None:
        """Register ``conn``'s reply deadline (Trio time, ``float`` seconds).

        :raises ValueError: ``deadline`` is NaN (as a cancel scope refuses it: armed, it
            would never fire).
        """
        if deadline < self._next_wake:
            self._next_wake = deadline
            if self._scope is not None:
                self._scope.deadline = deadline
        elif deadline != deadline:
            raise ValueError("deadline must not be NaN")
        self._armed[conn] = deadline

    def stopped(self) -> bool:
        """Whether :meth:`run` is not running (checked again after a wait armed while it
        was)."""
        return not self.running

    def disarm(self, conn: ReplyWaiter) -> None:
        """Forget ``conn``'s deadline (its wait ended); idempotent."""
        self._armed.pop(conn, None)

    async def run(self) -> None:
        """Run until cancelled (in the client's nursery); never raises otherwise."""
        self.running = True
        try:
            while True:
                with trio.CancelScope(deadline=self._next_wake) as scope:
                    self._scope = scope
                    await trio.sleep_forever()
                self._scope = None
                self._expire(trio.current_time())
        finally:
            self._scope = None
            self.running = False
            # Waits still armed would never be woken: wake them (not as timed out), so
            # they wait on under cancel scopes of their own and still end at their
            # deadlines (a shielded command while the client's nursery is cancelled).
            armed, self._armed = self._armed, {}
            self._next_wake = _INF
            for conn in armed:
                conn._wake_reply_wait(timed_out=False)

    def _expire(self, now: float) -> None:
        next_wake = _INF
        for conn, deadline in list(self._armed.items()):
            if deadline <= now:
                del self._armed[conn]
                conn._wake_reply_wait(timed_out=True)
            elif deadline < next_wake:
                next_wake = deadline
        self._next_wake = next_wake
