"""The command line's logging: ``--log-level``, one formatted line per record on stderr,
repeats held back and counted, the library's warnings in the demo once each."""

from __future__ import annotations

import io
import logging
import os
import re
import subprocess
import sys

import pytest

from trio_maint._cli.logs import (
    REPEAT_INTERVAL,
    LineHandler,
    cli_logging,
    format_line,
    parse_level,
)
from trio_maint._cli.main import main

TIMEOUT = 60.0
#: A line of the handler: UTC time with milliseconds, level, logger, message.
LINE = re.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR|CRITICAL) \S+: "
)


def record(
    msg: str, *args: object, level: int = logging.WARNING, name: str = "trio_maint.x"
) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_format_line_is_one_line_with_time_level_logger() -> None:
    line = format_line(record("cannot reach %s\nat all", "redis://u:hunter2@h:1/0"))
    assert LINE.match(line), line
    assert "\n" not in line
    assert line.endswith("WARNING trio_maint.x: cannot reach redis://u:***@h:1/0\\nat all")
    assert "hunter2" not in line


def test_format_line_exception_in_brackets_or_traceback() -> None:
    try:
        raise ConnectionError("refused")
    except ConnectionError:
        rec = logging.LogRecord("t", logging.ERROR, __file__, 1, "dial failed", (), sys.exc_info())
    assert format_line(rec).endswith("ERROR t: dial failed [ConnectionError: refused]")
    full = format_line(rec, traceback=True)
    assert full.splitlines()[0].endswith("ERROR t: dial failed")
    assert "Traceback (most recent call last)" in full


def test_repeats_are_held_back_and_counted() -> None:
    out = io.StringIO()
    clock = Clock()
    handler = LineHandler(stream=lambda: out, clock=clock)
    for conn in range(4):
        handler.handle(record("conn[%d] cannot connect to the new endpoint", conn))
    handler.handle(record("another message"))
    lines = out.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert lines[0].endswith("conn[0] cannot connect to the new endpoint")
    clock.now += REPEAT_INTERVAL
    handler.handle(record("conn[%d] cannot connect to the new endpoint", 9))
    last = out.getvalue().splitlines()[-1]
    assert last.endswith("conn[9] cannot connect to the new endpoint [3 similar lines suppressed]")
    # what is held back when the command ends is reported, once
    handler.handle(record("conn[%d] cannot connect to the new endpoint", 10))
    handler.close()
    lines = out.getvalue().splitlines()
    assert lines[-1].endswith(
        "conn[10] cannot connect to the new endpoint [1 similar line suppressed]"
    )
    assert len(lines) == 4
    for line in lines:
        assert LINE.match(line), line


def test_other_levels_and_loggers_are_other_lines() -> None:
    out = io.StringIO()
    handler = LineHandler(stream=lambda: out, clock=Clock())
    handler.handle(record("same"))
    handler.handle(record("same", level=logging.ERROR))
    handler.handle(record("same", name="trio_maint.y"))
    handler.handle(record("same"))
    assert len(out.getvalue().splitlines()) == 3


def test_cli_logging_installs_and_restores() -> None:
    root = logging.getLogger()
    before = (root.level, list(root.handlers))
    out = io.StringIO()
    with cli_logging(logging.INFO, stream=lambda: out) as handler:
        assert handler in root.handlers
        logging.getLogger("trio_maint.test").info("hello %s", "there")
        logging.getLogger("trio_maint.test").debug("not shown")
    assert (root.level, list(root.handlers)) == before
    (line,) = out.getvalue().splitlines()
    assert LINE.match(line) and line.endswith("INFO trio_maint.test: hello there")


@pytest.mark.parametrize(("text", "level"), [("debug", 10), ("INFO", 20), ("Warning", 30)])
def test_parse_level(text: str, level: int) -> None:
    assert parse_level(text) == level


def test_bad_log_level_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--log-level", "loud", "demo"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "expected one of debug, info, warning, error, critical, got 'loud'" in err


def test_log_level_after_the_command_name(capsys: pytest.CaptureFixture[str]) -> None:
    """``--log-level`` is taken before or after the command's name (here a usage error
    stops the command before it starts anything)."""
    assert main(["demo", "--log-level", "debug", "--tasks", "0"]) == 2
    assert "--tasks must be >= 1" in capsys.readouterr().err


def run_demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trio_maint", "demo", "--plain", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )


def test_unreachable_demo_warnings_once_formatted_on_stderr() -> None:
    """The library's warnings (the MOVING target cannot be reached, the breaker opens)
    appear once each, formatted, on stderr; the demo's own lines are on stdout."""
    result = run_demo("--scenario", "unreachable", "--speed", "20")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines, "no warning logged"
    for line in lines:
        assert LINE.match(line), f"unformatted line on stderr: {line!r}"
    dial = [line for line in lines if "the new endpoint is unreachable" in line]
    assert len(dial) == 1, lines
    assert " WARNING trio_maint." in dial[0]
    assert sum("circuit breaker for" in line for line in lines) == 1
    assert "WARNING" not in result.stdout and "trio-maint demo: PASS" in result.stdout


def test_log_level_error_silences_the_warnings() -> None:
    result = run_demo("--scenario", "unreachable", "--speed", "20", "--log-level", "error")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
