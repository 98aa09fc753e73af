"""Rate-limited logging for per-frame and per-event lines (sans-IO: time is passed in).

A server (or a man in the middle) decides how many push frames, error replies or
maintenance notifications arrive; a log line per frame would let it write 10^5 lines a
second into the application's logs. For each *kind* of event (a short fixed string, by
convention the record's ``extra["event"]``), :class:`LogLimiter` lets the first
occurrence through, then at most one line per ``interval`` seconds; the line that ends a
quiet spell carries the number of occurrences suppressed since the previous line. So a
flood of ``n`` events over ``t`` seconds writes at most ``1 + t / interval`` lines per
kind, however large ``n``.

:func:`log_limited` is the helper most callers want::

    log_limited(logger, logging.WARNING, "notification_malformed", now,
                "conn[%d] ignoring a malformed notification: %s", conn_id, reason,
                extra={"event": "notification_malformed", "conn_id": conn_id})

It logs through :data:`LOG_LIMITER`, the process-wide limiter (one budget per kind for the
whole process, whatever the number of clients, connections or endpoints), adds
``suppressed`` (``int``) to the record's ``extra`` and, when it is above 0, says so at the
end of the message. :meth:`LogLimiter.allow` is the bare decision, for a caller that logs
by itself.

Why not a :class:`logging.Filter`: a filter sees a record only after it was built, is
attached to one logger (records of child loggers bypass it), can be removed or doubled by
the application's logging set-up, and reads wall-clock time from the record, which
``trio.testing.MockClock`` cannot drive. The explicit call keeps the decision sans-IO and
testable with plain numbers, costs nothing when the level is disabled, and keeps each
call site's own message and ``extra``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Final

__all__ = ["LOG_INTERVAL", "LOG_LIMITER", "MAX_KINDS", "LogLimiter", "log_limited"]

#: Default seconds between two lines of one kind (``float``).
LOG_INTERVAL: Final = 10.0
#: Default number of kinds a limiter tracks (``int``); beyond it, new kinds share one
#: budget (``"*"``), so that even keys made from untrusted values stay bounded.
MAX_KINDS: Final = 256
_OVERFLOW: Final = "*"


class LogLimiter:
    """For each kind of event: log the first, then at most one per ``interval`` seconds,
    counting what was held back.

    Time is passed in (``now``, ``float`` seconds on any monotonic clock: Trio's, or the
    machine's ``now``). A ``now`` earlier than the kind's last line (another clock, or a
    new ``trio.run`` with its own time base) starts afresh: that line is let through.

    :param interval: seconds (``float`` > 0) between two lines of one kind.
    :param max_kinds: kinds tracked (``int`` >= 1); when full, kinds whose interval has
        passed with nothing held back are forgotten, and if none is, new kinds share one
        overflow budget.
    :raises ValueError: ``interval`` is not a positive finite number, or ``max_kinds``
        is below 1.
    """

    __slots__ = ("_lock", "_scanned", "_state", "interval", "max_kinds")

    def __init__(self, interval: float = LOG_INTERVAL, max_kinds: int = MAX_KINDS) -> None:
        if not (0 < interval < float("inf")):
            raise ValueError(f"interval: must be a positive finite number, got {interval!r}")
        if max_kinds < 1:
            raise ValueError(f"max_kinds: must be >= 1, got {max_kinds!r}")
        self.interval = float(interval)
        self.max_kinds = max_kinds
        # kind -> [time of the last line, occurrences held back since]
        self._state: dict[str, list[float]] = {}
        self._scanned: float | None = None  # when a full table was last scanned
        self._lock = threading.Lock()

    def allow(self, kind: str, now: float) -> tuple[bool, int]:
        """Record one occurrence of ``kind`` (``str``) at ``now`` (``float`` seconds).

        :returns: ``(log, suppressed)``: whether to log this one (``bool``) and, when
            ``log`` is True, how many occurrences of the kind were held back since its
            previous line (``int``; 0 otherwise).
        """
        with self._lock:
            state = self._state.get(kind)
            if state is None:
                if len(self._state) >= self.max_kinds:
                    self._forget_quiet(now)
                if len(self._state) >= self.max_kinds:
                    kind = _OVERFLOW
                    state = self._state.get(kind)
                if state is None:
                    self._state[kind] = [now, 0]
                    return True, 0
            last = state[0]
            if now - last >= self.interval or now < last:
                held = int(state[1])
                state[0] = now
                state[1] = 0
                return True, held
            state[1] += 1
            return False, 0

    def _forget_quiet(self, now: float) -> None:
        # At most one scan per interval: a flood of new kinds costs O(1) per occurrence.
        scanned = self._scanned
        if scanned is not None and 0 <= now - scanned < self.interval:
            return
        self._scanned = now
        quiet = [
            k
            for k, (last, held) in self._state.items()
            if held == 0 and (now - last >= self.interval or now < last)
        ]
        for k in quiet:
            del self._state[k]

    def pending(self) -> dict[str, int]:
        """Occurrences held back and not reported yet, per kind (``dict[str, int]``; kinds
        with none are left out); for a caller that wants to report them at shutdown."""
        with self._lock:
            return {k: int(s[1]) for k, s in self._state.items() if s[1]}

    def reset(self) -> None:
        """Forget every kind (the next occurrence of each is logged)."""
        with self._lock:
            self._state.clear()
            self._scanned = None

    def __len__(self) -> int:
        return len(self._state)


#: The process-wide limiter :func:`log_limited` uses by default.
LOG_LIMITER: Final = LogLimiter()


def log_limited(
    logger: logging.Logger,
    level: int,
    kind: str,
    now: float,
    msg: str,
    *args: object,
    extra: Mapping[str, object] | None = None,
    exc_info: bool = False,
    limiter: LogLimiter | None = None,
) -> bool:
    """Log ``msg % args`` at ``level`` on ``logger`` unless ``kind`` (``str``) already
    had a line in the last ``interval`` seconds at ``now`` (``float`` seconds).

    Nothing is counted while ``level`` is disabled on ``logger``. The record's ``extra``
    is ``extra`` plus ``suppressed`` (``int``): occurrences of the kind held back since
    its previous line; when above 0, ``" [N similar lines suppressed]"`` ends the
    message. The record points at the caller (``stacklevel``).

    :param limiter: the :class:`LogLimiter` to ask (default :data:`LOG_LIMITER`).
    :returns: whether a line was written (``bool``).
    """
    if not logger.isEnabledFor(level):
        return False
    log, suppressed = (limiter if limiter is not None else LOG_LIMITER).allow(kind, now)
    if not log:
        return False
    payload = dict(extra) if extra is not None else {}
    payload["suppressed"] = suppressed
    if suppressed:
        msg += " [%d similar lines suppressed]"
        args += (suppressed,)
    logger.log(level, msg, *args, extra=payload, exc_info=exc_info, stacklevel=2)
    return True
