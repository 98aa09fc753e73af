"""Relaxed socket timeouts of one connection during maintenance (sans-IO: methods take
``now``, a monotonic clock in ``float`` seconds such as ``trio.current_time()``).

A connection is *relaxed* while a maintenance window announced on it is open (MIGRATING,
FAILING_OVER or SMIGRATING received, the matching MIGRATED, FAILED_OVER or SMIGRATED not
yet) or for a while after a handoff. While relaxed, every socket timeout is at least
``relaxed_timeout``: the relaxed timeout is a floor, never a tightening, and an operation
without a timeout (``BLPOP key 0``) keeps waiting forever. See docs/maintenance.md.

Two sources are tracked separately, so neither cuts the other short:

* notification windows, counted (nested openings need as many closings; extra closings
  never push the count below 0); a *backstop* ends them all if no opening notification
  arrived for ``backstop`` seconds (default ``WINDOW_BACKSTOP_FACTOR x relaxed_timeout``,
  i.e. 100 s with the default 10 s), in case the closing notification is lost;
* the post-handoff period, with its own expiry.
"""

from __future__ import annotations

import logging
from typing import Final

import attrs

from .loglimit import log_limited
from .notifications import (
    FailedOver,
    FailingOver,
    Migrated,
    Migrating,
    Notification,
    SMigrated,
    SMigrating,
)

__all__ = ["WINDOW_BACKSTOP_FACTOR", "RelaxationState", "RelaxedTimeouts"]

logger = logging.getLogger("trio_maint.timeouts")

#: The backstop of notification windows is this many times ``relaxed_timeout``.
WINDOW_BACKSTOP_FACTOR: Final = 10.0


@attrs.frozen
class RelaxationState:
    """A snapshot of :class:`RelaxedTimeouts` at some ``now``.

    :ivar relaxed: whether timeouts are relaxed (``bool``).
    :ivar open_windows: notification windows open (``int``).
    :ivar window_deadline: when the backstop ends them (``float`` seconds) or ``None``.
    :ivar post_handoff_until: end of the post-handoff period (``float``) or ``None``.
    """

    relaxed: bool
    open_windows: int
    window_deadline: float | None
    post_handoff_until: float | None


class RelaxedTimeouts:
    """Relaxation state of one connection; it belongs to the connection object and
    survives a handoff's stream swap.

    :param relaxed_timeout: the floor applied while relaxed (``float`` seconds >= 0;
        0 disables relaxation).
    :param backstop: seconds after the latest opening notification at which still-open
        windows are ended (``float`` > 0); default ``WINDOW_BACKSTOP_FACTOR x
        relaxed_timeout`` (at least 1 s).
    :raises ValueError: a negative ``relaxed_timeout`` or a non-positive ``backstop``.
    """

    def __init__(self, relaxed_timeout: float, *, backstop: float | None = None) -> None:
        if relaxed_timeout < 0:
            raise ValueError("relaxed_timeout: must be >= 0")
        if backstop is None:
            backstop = max(WINDOW_BACKSTOP_FACTOR * relaxed_timeout, 1.0)
        if backstop <= 0:
            raise ValueError("backstop: must be > 0")
        self.relaxed_timeout: Final = float(relaxed_timeout)
        self.backstop: Final = float(backstop)
        self._windows = 0
        self._window_deadline: float | None = None
        self._post_handoff_until: float | None = None
        #: How many times the backstop ended windows whose closing never came (``int``).
        self.backstop_expirations = 0

    def open_window(self, now: float) -> None:
        """A maintenance window opened (MIGRATING, FAILING_OVER, SMIGRATING): count it and
        push the backstop to ``now + backstop``."""
        self.expire(now)
        self._windows += 1
        self._window_deadline = now + self.backstop

    def close_window(self, now: float) -> bool:
        """A window closed (MIGRATED, FAILED_OVER, SMIGRATED): uncount one, never below 0.

        :returns: ``True`` if a window was open (``bool``); an unmatched closing is ignored.
        """
        self.expire(now)
        if self._windows == 0:
            return False
        self._windows -= 1
        if self._windows == 0:
            self._window_deadline = None
        return True

    def on_notification(self, notification: Notification, now: float) -> bool:
        """Apply a parsed notification received on this connection.

        :returns: ``True`` if it opens or closes a window (``bool``); MOVING and others are
            not relaxation events and return ``False``.
        """
        if isinstance(notification, Migrating | FailingOver | SMigrating):
            self.open_window(now)
            return True
        if isinstance(notification, Migrated | FailedOver | SMigrated):
            self.close_window(now)
            return True
        return False

    def relax_after_handoff(self, now: float, duration: float) -> None:
        """Relax for ``duration`` seconds (``float``; <= 0 does nothing) after a handoff,
        independently of notification windows; a longer running period is kept."""
        if duration <= 0:
            return
        until = now + duration
        if self._post_handoff_until is None or until > self._post_handoff_until:
            self._post_handoff_until = until

    def expire(self, now: float) -> bool:
        """Drop whatever expired by ``now``: the post-handoff period, and open windows
        whose backstop passed (logged at WARNING, counted in ``backstop_expirations``).

        :returns: ``True`` if the backstop ended windows on this call (``bool``).
        """
        if self._post_handoff_until is not None and now >= self._post_handoff_until:
            self._post_handoff_until = None
        if self._window_deadline is not None and now >= self._window_deadline:
            windows = self._windows
            self._windows = 0
            self._window_deadline = None
            self.backstop_expirations += 1
            # Per connection: rate-limited across connections.
            log_limited(
                logger,
                logging.WARNING,
                "relaxed_timeout_backstop",
                now,
                "maintenance window not closed by the server within %.1f s; "
                "restoring normal timeouts",
                self.backstop,
                extra={"event": "relaxed_timeout_backstop", "windows": windows},
            )
            return True
        return False

    def is_relaxed(self, now: float) -> bool:
        """Whether timeouts are relaxed at ``now`` (``bool``)."""
        self.expire(now)
        return self._windows > 0 or self._post_handoff_until is not None

    def relaxed_at(self, now: float) -> bool:
        """What :meth:`is_relaxed` answers at ``now``, changing nothing (``bool``): a read
        for observers, which may run on another thread; only :meth:`is_relaxed` and
        :meth:`expire` drop what expired."""
        post = self._post_handoff_until
        if post is not None and now < post:
            return True
        deadline = self._window_deadline
        return self._windows > 0 and (deadline is None or now < deadline)

    def effective(self, configured: float | None, now: float) -> float | None:
        """The timeout (``float`` seconds or ``None``) to arm for an operation at ``now``.

        ``configured`` is the normal timeout; ``None`` means no timeout and stays ``None``.
        While relaxed the result is ``max(configured, relaxed_timeout)``, otherwise
        ``configured``.
        """
        if configured is None:
            self.expire(now)
            return None
        if self.is_relaxed(now):
            return max(configured, self.relaxed_timeout)
        return configured

    def reset(self) -> None:
        """Forget all relaxation (e.g. when the connection is closed)."""
        self._windows = 0
        self._window_deadline = None
        self._post_handoff_until = None

    @property
    def open_windows(self) -> int:
        """Open notification windows (``int``), as of the last call that took ``now``."""
        return self._windows

    def state(self, now: float) -> RelaxationState:
        """A :class:`RelaxationState` snapshot at ``now``."""
        relaxed = self.is_relaxed(now)
        return RelaxationState(
            relaxed=relaxed,
            open_windows=self._windows,
            window_deadline=self._window_deadline,
            post_handoff_until=self._post_handoff_until,
        )
