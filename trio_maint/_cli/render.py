"""Rendering for the ``trio-maint`` command line: the live views of the demo (plain text, or
``rich`` when the output is a terminal and the extra ``cli`` is installed), its
end-of-run report, and the ``--plot`` figure (extra ``plot``)."""

from __future__ import annotations

import datetime as _dt
import math
import sys
from typing import Any, Protocol, TextIO

from .report import Snapshot

__all__ = [
    "PlainView",
    "Reportable",
    "RichView",
    "UsageError",
    "draw_plot",
    "make_view",
    "plot_hint",
    "relaxed_text",
    "render_report",
    "rich_available",
    "snapshot_rows",
    "timestamp",
    "write_plot",
]


class UsageError(Exception):
    """A bad argument (exit status 2)."""


class Reportable(Protocol):
    """What :func:`render_report` and :func:`write_plot` read of a demo's report."""

    @property
    def ok(self) -> bool:
        """The run passed."""

    @property
    def heading(self) -> str:
        """``"trio-maint demo"`` or ``"trio-maint demo --cluster"``."""

    @property
    def label(self) -> str:
        """What ran, for the plot's title."""

    @property
    def verdict_note(self) -> str:
        """What follows ``PASS``/``FAIL`` (the stale reads with ``--cache``), or ``""``."""

    def rows(self) -> list[tuple[str, str]]:
        """The report as ``(label, text)`` rows."""

    total_commands: int
    failed_commands: int
    window: tuple[float, float]
    notifications: list[dict[str, Any]]
    series: list[dict[str, float]]


def timestamp() -> str:
    """The current UTC time as ISO 8601 with milliseconds."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# ------------------------------------------------------------------------ live views


def relaxed_text(s: Snapshot, *, short: bool = False) -> str:
    """The relaxed-connections count and, when handoffs keep some relaxed, why (``short``:
    for the plain status line)."""
    count = f"{s.relaxed:,} relaxed" if short else f"{s.relaxed:,}"
    if not s.relaxed_after_handoff:
        return count
    until = f", until {s.relaxed_until:.1f} s" if s.relaxed_until is not None else ""
    if short:
        return f"{count} ({s.relaxed_after_handoff:,} after a handoff{until})"
    return (
        f"{s.relaxed} ({s.relaxed_after_handoff} handed off: a connection keeps relaxed "
        f"timeouts {s.post_handoff:g} s after its handoff, MaintConfig."
        f"post_handoff_relaxed_duration{until})"
    )


def snapshot_rows(s: Snapshot) -> list[tuple[str, str]]:
    """The live numbers as ``(label, text)`` rows."""
    rows = [
        ("elapsed", f"{s.elapsed:.1f} s ({s.phase})"),
        ("ops/s", f"{s.ops_per_second:,.0f}"),
        ("commands", f"{s.total:,} ok, {s.failed:,} failed"),
        ("relaxed connections", relaxed_text(s)),
    ]
    if s.handoffs is not None:
        pending, completed, failed = s.handoffs
        rows.append(
            ("handoffs", f"{pending:,} pending, {completed:,} completed, {failed:,} failed")
        )
    rows.append(("traffic", s.endpoint))
    rows.extend(s.extra)
    return rows


class PlainView:
    """Plain-text progress: one line per event, a status line every second."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.last = -math.inf

    def event(self, elapsed: float, text: str) -> None:
        """Print an event with its time."""
        print(f"[{elapsed:8.3f}s] {text}", file=self.out, flush=True)

    def notification(self, elapsed: float, text: str) -> None:
        """Print a notification with its time."""
        self.event(elapsed, text)

    def update(self, s: Snapshot) -> None:
        """Print the numbers, at most once a second."""
        if s.elapsed - self.last < 1.0:
            return
        self.last = s.elapsed
        parts = [
            f"{s.ops_per_second:,.0f} ops/s",
            f"{s.total:,} ok",
            f"{s.failed:,} failed",
            relaxed_text(s, short=True),
        ]
        if s.handoffs is not None:
            pending, completed, failed = s.handoffs
            parts.append(f"handoffs {pending:,} pending / {completed:,} done / {failed:,} failed")
        extra = "".join(f"; {label} {text}" for label, text in s.extra)
        print(
            f"[{s.elapsed:8.3f}s] {s.phase}: {', '.join(parts)}; {s.endpoint}{extra}",
            file=self.out,
            flush=True,
        )

    def close(self) -> None:
        """Nothing to close."""


class RichView:
    """A ``rich.live.Live`` panel: numbers on top, then every notification (the first
    ones are kept), then the latest events.

    :param title: the top panel's title.
    """

    #: Lines of the notification and event panels.
    NOTIFICATIONS, EVENTS = 8, 10

    def __init__(self, out: TextIO, title: str = "trio-maint demo") -> None:
        from rich.console import Console
        from rich.live import Live

        self.title = title
        self.console = Console(file=out)
        self.notifications: list[tuple[str, str]] = []
        self.events: list[tuple[str, str]] = []
        self.snapshot: Snapshot | None = None
        self.live = Live(self._render(), console=self.console, refresh_per_second=8)
        self.live.start()

    def _render(self) -> Any:
        from rich.console import Group
        from rich.panel import Panel
        from rich.table import Table

        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold")
        table.add_column()
        if self.snapshot is not None:
            for label, text in snapshot_rows(self.snapshot):
                table.add_row(label, text)
        shown = self.notifications
        if len(shown) > self.NOTIFICATIONS:
            # the first, a count of those left out, the latest
            left_out = len(shown) - self.NOTIFICATIONS + 1
            more = ("", f"[dim]({left_out} more)[/]")
            shown = [shown[0], more, *shown[-self.NOTIFICATIONS + 2 :]]
        return Group(
            Panel(table, title=self.title),
            Panel(self._lines(shown) or "(none yet)", title="notifications received"),
            Panel(self._lines(self.events[-self.EVENTS :]) or "(waiting)", title="events"),
        )

    @staticmethod
    def _lines(lines: list[tuple[str, str]]) -> Any:
        """``lines`` (time, text) as a grid: a long text wraps under itself, with the time
        column as its hanging indent, not under the time; ``None`` if there are none."""
        from rich.table import Table

        if not lines:
            return None
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True)
        grid.add_column()
        for when, text in lines:
            grid.add_row(when, text)
        return grid

    def _line(self, elapsed: float, text: str) -> tuple[str, str]:
        from rich.markup import escape

        return f"[dim]{elapsed:7.3f}s[/]", escape(text)

    def event(self, elapsed: float, text: str) -> None:
        """Add an event (the panel shows the latest)."""
        self.events.append(self._line(elapsed, text))
        self.live.update(self._render())

    def notification(self, elapsed: float, text: str) -> None:
        """Add a notification (the panel keeps the first ones)."""
        self.notifications.append(self._line(elapsed, text))
        self.live.update(self._render())

    def update(self, s: Snapshot) -> None:
        """Show new numbers."""
        self.snapshot = s
        self.live.update(self._render())

    def close(self) -> None:
        """Stop the live display (its last state stays on screen)."""
        self.live.stop()


def rich_available() -> bool:
    """Whether ``rich`` (extra ``cli``) can be imported."""
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


def make_view(out: TextIO, plain: bool, title: str = "trio-maint demo") -> PlainView | RichView:
    """The rich view on a terminal with rich installed (unless ``plain``), else plain text."""
    if not plain and out.isatty() and rich_available():
        return RichView(out, title)
    return PlainView(out)


# --------------------------------------------------------------------------- reports


def render_report(report: Reportable, out: TextIO, *, use_rich: bool) -> None:
    """Print the end-of-run report, ``"<heading>: PASS"`` (or ``FAIL``, then the stale
    reads with ``--cache``) then its rows: a rich table on a terminal, else plain text."""
    verdict = ("PASS" if report.ok else "FAIL") + report.verdict_note
    rows = report.rows()
    if use_rich:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"{report.heading}: {verdict}", show_header=False)
        table.add_column(style="bold")
        table.add_column()
        for key, value in rows:
            table.add_row(key, value)
        Console(file=out).print(table)
        return
    print(f"{report.heading}: {verdict}", file=out)
    for key, value in rows:
        print(f"  {key:16} {value}", file=out)


def plot_hint() -> str:
    """How to install matplotlib for the Python running this command."""
    return (
        f"--plot needs matplotlib (extra 'plot'): {sys.executable} -m pip install matplotlib "
        "(or, from a checkout: .venv/bin/pip install -e '.[plot]')"
    )


def draw_plot(report: Reportable) -> Any:
    """A matplotlib figure of ops/s and p99 latency over time, the maintenance window
    shaded and the notifications marked; both axes start at zero.

    :raises UsageError: matplotlib is not installed (extra ``plot``).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError(plot_hint()) from None
    series = report.series
    t = [p["t"] for p in series]
    fig, (ax_ops, ax_p99) = plt.subplots(2, 1, sharex=True, figsize=(10, 6))
    ax_ops.plot(t, [p["ops_per_second"] for p in series], color="tab:blue")
    ax_ops.set_ylabel("ops/s")
    ax_p99.plot(
        t,
        [p["p99"] * 1e3 if math.isfinite(p["p99"]) else math.nan for p in series],
        color="tab:orange",
    )
    ax_p99.set_ylabel("p99 latency (ms)")
    ax_p99.set_xlabel("seconds")
    for ax in (ax_ops, ax_p99):
        if math.isfinite(report.window[0]):
            ax.axvspan(report.window[0], report.window[1], color="0.9", zorder=0)
        for n in report.notifications:
            ax.axvline(n["t"], color="tab:red", linestyle="--", linewidth=0.8)
        # From zero: a dip of noise must not look like an outage.
        ax.set_ylim(bottom=0)
        ax.set_xlim(left=0)
    for i, n in enumerate(report.notifications):
        ax_ops.annotate(
            n["name"],
            (n["t"], 0.98 - 0.08 * (i % 3)),
            xycoords=("data", "axes fraction"),
            va="top",
            ha="left",
            fontsize=8,
            color="tab:red",
        )
    fig.suptitle(
        f"{report.label}: {report.total_commands:,} commands, {report.failed_commands:,} "
        "failed\ngrey: the maintenance window; red: notifications",
        fontsize=11,
    )
    fig.tight_layout()
    return fig


def write_plot(report: Reportable, path: str) -> None:
    """Draw :func:`draw_plot`'s figure to ``path`` (PNG, or as its suffix says).

    :raises UsageError: matplotlib is not installed (extra ``plot``).
    """
    fig = draw_plot(report)
    import matplotlib.pyplot as plt

    try:
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
