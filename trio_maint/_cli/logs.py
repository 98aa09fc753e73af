"""Logging for the ``trio-maint`` command line: one formatted line per record on stderr,
repeats rate-limited (``--log-level``, default ``warning``).

The library logs through :mod:`logging` and configures nothing (an application's logging
is its own). The command line is an application: :func:`cli_logging` puts one handler on
the root logger for the duration of a command, :class:`LineHandler`, which writes::

    2026-12-01T17:25:17.123Z WARNING trio_maint._maint.dialer: cannot connect to ...

(UTC time with milliseconds, level, logger name, message; URLs with their password
hidden). It looks ``sys.stderr`` up at each record, so that while the demo's ``rich``
live view runs (it redirects ``sys.stderr``) the lines appear above the view instead of
tearing it.

Repeats: the library already limits its per-frame lines (``_sansio/loglimit.py``: the
first of a kind, then one per 10 s with a count). The handler adds the same rule for
everything that reaches it, whoever logs it: per logger, level and message template, the
first record is written, then at most one per :data:`REPEAT_INTERVAL` seconds, that line
ending with the number held back; what is still held back when the command ends is
reported in one line per template.
"""

from __future__ import annotations

import datetime as _dt
import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final, TextIO

from .. import redact_text

__all__ = [
    "DEFAULT_LEVEL",
    "LEVELS",
    "REPEAT_INTERVAL",
    "LineHandler",
    "cli_logging",
    "format_line",
    "parse_level",
]

#: The names ``--log-level`` accepts, lowest first.
LEVELS: Final = ("debug", "info", "warning", "error", "critical")
#: ``--log-level``'s default: the library's warnings (an unreachable MOVING target, a
#: breaker opening), not its per-event INFO lines, which the demo shows in its own words.
DEFAULT_LEVEL: Final = "warning"
#: Seconds between two lines of one logger, level and message template (as the library's
#: ``LOG_INTERVAL``).
REPEAT_INTERVAL: Final = 10.0
#: Templates tracked at once; beyond, the oldest is forgotten (its count reported).
MAX_TEMPLATES: Final = 256


def parse_level(text: str) -> int:
    """The :mod:`logging` level of a ``--log-level`` name (any case).

    :raises ValueError: not one of :data:`LEVELS`.
    """
    name = text.strip().lower()
    if name not in LEVELS:
        raise ValueError(f"expected one of {', '.join(LEVELS)}, got {text!r}")
    level: int = getattr(logging, name.upper())
    return level


def _utc(created: float) -> str:
    moment = _dt.datetime.fromtimestamp(created, _dt.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _stderr() -> TextIO:
    return sys.stderr


def format_line(record: logging.LogRecord, *, traceback: bool = False) -> str:
    """``record`` as one line: UTC time, level, logger name, message (its newlines shown
    as ``\\n``); an exception is added as ``[Type: text]``, or, with ``traceback``, as its
    traceback on the following lines. Passwords in URLs are hidden."""
    message = record.getMessage()
    tail = ""
    if record.exc_info and record.exc_info[1] is not None:
        exc = record.exc_info[1]
        if traceback:
            tail = "\n" + logging.Formatter().formatException(record.exc_info)
        else:
            message += f" [{type(exc).__name__}: {exc}]"
    message = message.replace("\r", "\\r").replace("\n", "\\n")
    line = f"{_utc(record.created)} {record.levelname} {record.name}: {message}{tail}"
    return redact_text(line)


class LineHandler(logging.Handler):
    """Writes each record as one line (:func:`format_line`) to ``stream()``, the current
    ``sys.stderr`` by default, holding back repeats (see the module's documentation).

    :param level: the handler's level (``int``).
    :param stream: returns the stream to write to, called at each record.
    :param clock: monotonic seconds (``float``), for the repeat interval.
    """

    def __init__(
        self,
        level: int = logging.NOTSET,
        *,
        stream: Callable[[], TextIO] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(level)
        self.stream: Callable[[], TextIO] = stream if stream is not None else _stderr
        self.clock = clock
        # (logger, level, template) -> [time of its last line, records held back since]
        self._repeats: dict[tuple[str, int, str], list[float]] = {}
        self._last: dict[tuple[str, int, str], logging.LogRecord] = {}

    def _allow(self, key: tuple[str, int, str], now: float) -> tuple[bool, int]:
        state = self._repeats.get(key)
        if state is None:
            if len(self._repeats) >= MAX_TEMPLATES:
                oldest = next(iter(self._repeats))
                self._report(oldest)
            self._repeats[key] = [now, 0]
            return True, 0
        if now - state[0] >= REPEAT_INTERVAL or now < state[0]:
            held = int(state[1])
            state[0], state[1] = now, 0
            return True, held
        state[1] += 1
        return False, 0

    def emit(self, record: logging.LogRecord) -> None:
        """Write ``record`` unless it repeats one written less than
        :data:`REPEAT_INTERVAL` seconds ago."""
        try:
            key = (record.name, record.levelno, str(record.msg))
            with_traceback = self.level <= logging.DEBUG
            self.acquire()
            try:
                allowed, held = self._allow(key, self.clock())
                if not allowed:
                    self._last[key] = record
                    return
                self._last.pop(key, None)
            finally:
                self.release()
            line = format_line(record, traceback=with_traceback)
            if held:
                line += f" [{held} similar line{'s' if held > 1 else ''} suppressed]"
            self._write(line)
        except Exception:
            self.handleError(record)

    def _write(self, line: str) -> None:
        out = self.stream()
        out.write(line + "\n")
        out.flush()

    def _report(self, key: tuple[str, int, str]) -> None:
        state = self._repeats.pop(key, None)
        last = self._last.pop(key, None)
        if state is None or not state[1] or last is None:
            return
        held = int(state[1])
        line = format_line(last)
        self._write(f"{line} [{held} similar line{'s' if held > 1 else ''} suppressed]")

    def close(self) -> None:
        """Report what is still held back (one line per template: the latest record and
        the count), then close."""
        self.acquire()
        try:
            for key in list(self._repeats):
                try:
                    self._report(key)
                except Exception:  # the stream is gone: nothing more to say
                    break
            self._repeats.clear()
            self._last.clear()
        finally:
            self.release()
        super().close()


@contextmanager
def cli_logging(level: int, stream: Callable[[], TextIO] | None = None) -> Iterator[LineHandler]:
    """Log records of ``level`` and above (``int``) through a :class:`LineHandler` on the
    root logger until the block ends; then the handler is closed (reporting what it held
    back) and the root logger's level and handlers are as before."""
    root = logging.getLogger()
    handler = LineHandler(level, stream=stream)
    saved_level = root.level
    root.addHandler(handler)
    root.setLevel(level)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(saved_level)
        handler.close()
