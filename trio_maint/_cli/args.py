"""Pieces of the ``trio-maint`` argument parser shared by its commands: the parser class
(error messages with passwords hidden), the help formatter (examples kept as written),
argument types, the options every command takes, the version line, the exit statuses."""

from __future__ import annotations

import argparse
import math
import sys
from typing import NoReturn

import trio

from .. import redact_text
from .logs import DEFAULT_LEVEL, LEVELS, parse_level

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "HelpFormatter",
    "Parser",
    "common_options",
    "log_level",
    "mix_weights",
    "port_number",
    "positive_float",
    "version_text",
]

#: Exit statuses: success, a failed run or environment problem, a usage error.
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def mix_weights(text: str) -> tuple[int, int, int]:
    """``--mix R:W:P``: three weights >= 0, not all 0."""
    parts = text.split(":")
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected READS:WRITES:PIPELINES, got {text!r}")
    if len(values) != 3 or min(values) < 0 or sum(values) == 0:
        raise argparse.ArgumentTypeError(f"expected three weights >= 0, got {text!r}")
    return values[0], values[1], values[2]


def positive_float(text: str) -> float:
    """A finite number > 0 (``--speed``, ``--duration``, ...)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}")
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


def port_number(text: str) -> int:
    """A TCP port, 0 to 65535 (0: a free one)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}")
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be in 0..65535, got {text!r}")
    return value


class Parser(argparse.ArgumentParser):
    """argparse with its error messages redacted: they quote arguments ("unrecognized
    arguments: redis://user:secret@host"), and a password must never be printed."""

    def error(self, message: str) -> NoReturn:
        """Print the usage and ``message`` with every URL's password hidden, exit 2."""
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {redact_text(message)}\n")


def version_text() -> str:
    """``trio-maint X.Y.Z`` from the installed package's metadata, with Python's and
    Trio's versions."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        mine = version("trio-maint")
    except PackageNotFoundError:  # run from a checkout without installing
        from .. import __version__ as mine
    python = ".".join(str(n) for n in sys.version_info[:3])
    return f"trio-maint {mine} (Python {python}, trio {trio.__version__})"


class HelpFormatter(argparse.HelpFormatter):
    """Descriptions filled to the terminal's width, examples (text with line breaks) kept
    as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def log_level(text: str) -> int:
    """``--log-level``: a :mod:`logging` level from its name (see ``logs.LEVELS``)."""
    try:
        return parse_level(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def common_options() -> Parser:
    """Options every command takes (also before the command's name)."""
    common = Parser(add_help=False)
    common.add_argument(
        "--log-level",
        type=log_level,
        default=argparse.SUPPRESS,
        metavar="LEVEL",
        help=f"log records of LEVEL and above: {', '.join(LEVELS)} (default {DEFAULT_LEVEL})",
    )
    return common
