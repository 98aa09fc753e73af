"""The deadlines of a cached read sent on the tracking connection (sans-IO: no Trio
imports; time is passed in), docs/caching.md.

A read that missed the cache waits for its reply on the tracking connection under two
deadlines (:func:`read_deadlines`), which are not the same thing:

* the **caller's**: the call's ``timeout`` (default ``socket_timeout``), counted from the
  start of the call; one deadline for the whole call. When it passes the call raises
  ``TimeoutError``; the tracking connection is left alone (its reply is still read, and
  stored if still valid);
* the tracking connection's **health**: ``socket_timeout`` from the send, whatever the
  call's timeout. A reply owed longer than that fails the tracking connection (the
  cache is flushed). A tiny per-call timeout never does.

Both are relaxed during maintenance as every socket timeout is
(:class:`~trio_maint._sansio.timeouts.RelaxedTimeouts`: a floor, never a tightening).

When the tracking connection fails under a waiting read, or the read gets an error reply
(``MOVED``, ``WRONGTYPE``, ...), the read is sent again through the pool (a read changes
nothing: sending it again is safe) with what is left of the caller's deadline
(:func:`resend`), or, when nothing is left, the call times out.
"""

from __future__ import annotations

import math
from typing import Final, Literal, Protocol

import attrs

from .unset import UNSET, Unset

__all__ = ["ReadDeadlines", "Relaxation", "Resend", "due", "read_deadlines", "resend"]

_INF: Final = math.inf


class Relaxation(Protocol):
    """A connection's timeout policy (``conn.timeouts``: the maintenance layer's
    :class:`~trio_maint._sansio.timeouts.RelaxedTimeouts`)."""

    def effective(self, configured: float | None, now: float) -> float | None:
        """The timeout in force at ``now`` for a ``configured`` one (``None``: none)."""
        ...


def due(seconds: float | None, now: float, policy: Relaxation | None) -> float:
    """``now`` plus ``seconds`` as the connection's relaxation ``policy`` (or ``None``)
    has it at ``now``; ``inf`` for ``None`` (no deadline)."""
    if policy is not None:
        seconds = policy.effective(seconds, now)
    return _INF if seconds is None else now + seconds


@attrs.frozen(slots=True)
class ReadDeadlines:
    """The two deadlines of a read on the tracking connection (Trio time, ``float``;
    ``inf``: none), see the module doc.

    :ivar caller: when the call times out.
    :ivar health: when a reply still owed fails the tracking connection.
    """

    caller: float
    health: float


def read_deadlines(
    timeout: float | Literal[Unset.UNSET] | None,
    socket_timeout: float | None,
    now: float,
    policy: Relaxation | None,
) -> ReadDeadlines:
    """The :class:`ReadDeadlines` of a read sent at ``now`` (the call's start: nothing
    before it waits) with the call's ``timeout`` (``UNSET``: ``socket_timeout``;
    ``None``: none), on a connection whose relaxation is ``policy``."""
    health = due(socket_timeout, now, policy)
    if timeout is UNSET or timeout == socket_timeout:
        return ReadDeadlines(health, health)
    return ReadDeadlines(due(timeout, now, policy), health)


@attrs.frozen(slots=True)
class Resend:
    """Send the read again through the pool, waiting at most ``timeout`` seconds (``float``,
    or ``None``: no deadline), the rest of the caller's."""

    timeout: float | None


def resend(deadlines: ReadDeadlines, now: float) -> Resend | None:
    """A read on the tracking connection got no usable reply (the connection failed, an
    error reply) at ``now``: :class:`Resend` with the rest of the caller's deadline, or
    ``None`` when it has passed (the call times out)."""
    caller = deadlines.caller
    if caller == _INF:
        return Resend(None)
    if now >= caller:
        return None
    return Resend(caller - now)
