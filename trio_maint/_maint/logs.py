"""The maintenance shell's log lines (logger ``trio_maint.maintenance``), each bounded:
a server decides how many notifications arrive, so every per-frame line goes through
:func:`~trio_maint._sansio.loglimit.log_limited` (the first one, then at most one summary
line per :data:`~trio_maint._sansio.loglimit.LOG_INTERVAL` per kind, with a count).
Events (``r.maintenance.events()``) still carry every frame.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Final

from .._sansio.events import MovingRefused
from .._sansio.loglimit import log_limited
from .._sansio.notifications import Malformed, Notification

__all__ = ["RefusedLog", "log_failure", "log_malformed", "log_window", "logger"]

logger = logging.getLogger("trio_maint.maintenance")

#: How many refused endpoints :class:`RefusedLog` remembers as already logged.
REFUSED_REMEMBERED: Final = 256

_OPENING: Final = frozenset({"MIGRATING", "FAILING_OVER", "SMIGRATING"})
_CLOSING: Final = frozenset({"MIGRATED", "FAILED_OVER", "SMIGRATED"})


def log_malformed(conn_id: int, result: Malformed, now: float) -> None:
    """WARNING: a malformed maintenance notification was ignored on connection
    ``conn_id`` at Trio time ``now`` (``float`` seconds)."""
    log_limited(
        logger,
        logging.WARNING,
        "notification_malformed",
        now,
        "conn[%d] ignoring a malformed maintenance notification %s: %s (shape %s)",
        conn_id,
        result.name,
        result.reason,
        result.shape,
        extra={"event": "notification_malformed", "conn_id": conn_id},
    )


def log_window(conn_id: int, n: Notification, now: float) -> None:
    """INFO: a window opening (``MIGRATING``, ``FAILING_OVER``, ``SMIGRATING``: timeouts
    relaxed) or closing (``MIGRATED``, ``FAILED_OVER``, ``SMIGRATED``) on ``conn_id``;
    nothing for other notifications."""
    if n.NAME in _OPENING:
        kind, text = "timeouts_relaxed", "conn[%d] %s: timeouts relaxed"
    elif n.NAME in _CLOSING:
        kind, text = "timeouts_restored", "conn[%d] %s: maintenance window closed"
    else:
        return
    log_limited(
        logger,
        logging.INFO,
        kind,
        now,
        text,
        conn_id,
        n.NAME,
        extra={"event": kind, "conn_id": conn_id, "notification_name": n.NAME},
    )


def log_failure(kind: str, now: float, message: str, *args: object, conn_id: int = 0) -> None:
    """ERROR with the traceback being handled (call it from an ``except`` block): a
    notification hook or the handling of a notification failed. ``kind`` is the log
    limiter's kind (``notification_hook_failed_pre``/``_post``, ``notification_failed``);
    the record's ``event`` is ``notification_hook_failed`` or ``notification_failed``."""
    event = "notification_failed" if kind == "notification_failed" else "notification_hook_failed"
    extra: dict[str, object] = {"event": event}
    if conn_id:
        extra["conn_id"] = conn_id
    log_limited(logger, logging.ERROR, kind, now, message, *args, extra=extra, exc_info=True)


class RefusedLog:
    """WARNINGs for refused MOVINGs (docs/security.md): one per refused endpoint (the
    most recent :data:`REFUSED_REMEMBERED` remembered), and at most one per
    :data:`~trio_maint._sansio.loglimit.LOG_INTERVAL` for all endpoints (a flood of
    MOVINGs to ever new endpoints).

    :param address_text: the configured address as printed (``str``, no credentials).
    """

    __slots__ = ("_address", "_seen")

    def __init__(self, address_text: str) -> None:
        self._address = address_text
        self._seen: OrderedDict[str, None] = OrderedDict()

    def log(self, event: MovingRefused) -> None:
        """Log ``event`` unless its endpoint was logged already or the rate limit holds it
        back (then counted in the next summary line)."""
        seen = self._seen
        if event.endpoint in seen:
            seen.move_to_end(event.endpoint)
            return
        logged = log_limited(
            logger,
            logging.WARNING,
            "moving_refused",
            event.time,
            "MOVING seq %d to %s refused (%s): reconnecting to %s instead (docs/security.md)",
            event.seq_id,
            event.endpoint,
            event.reason,
            self._address,
            extra={"event": "moving_refused", "endpoint": event.endpoint, "reason": event.reason},
        )
        if logged:
            seen[event.endpoint] = None
            while len(seen) > REFUSED_REMEMBERED:
                seen.popitem(last=False)
