"""Rendering for the ``trio-maint`` command line: the live views of the demo (plain text, or
``rich`` when the output is a terminal and the extra ``cli`` is installed), its
end-of-run report, and the ``--plot`` figure (extra ``plot``)."""

from __future__ import annotations

import datetime as _dt
import math
from typing import Any, TextIO

from .report import DemoReport, Snapshot

__all__ = [
    "PlainView",
    "RichView",
    "UsageError",
    "make_view",
    "render_report",
    "rich_available",
    "timestamp",
    "write_plot",
]


class UsageError(Exception):
    """A bad argument (exit status 2)."""


def timestamp() -> str:
    """The current UTC time as ISO 8601 with milliseconds."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _ms(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value * 1e3:.2f} ms"


# ------------------------------------------------------------------------ live views


class PlainView:
    """Plain-text progress: one line per event, a status line every second."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.last = -math.inf

    def event(self, elapsed: float, text: str) -> None:
        print(f"[{elapsed:8.3f}s] {text}", file=self.out, flush=True)

    def update(self, s: Snapshot) -> None:
        if s.elapsed - self.last < 1.0:
            return
        self.last = s.elapsed
        print(
            f"[{s.elapsed:8.3f}s] {s.phase}: {s.ops_per_second:,.0f} ops/s, {s.total:,} ok, "
            f"{s.failed} failed, {s.relaxed} relaxed, handoffs {s.pending} pending / "
            f"{s.completed} done / {s.handoff_failed} failed; {s.endpoint}",
            file=self.out,
            flush=True,
        )

    def close(self) -> None:
        pass


class RichView:
    """A ``rich.live.Live`` panel: numbers on top, the latest events below."""

    def __init__(self, out: TextIO) -> None:
        from rich.console import Console
        from rich.live import Live

        self.console = Console(file=out)
        self.events: list[str] = []
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
        s = self.snapshot
        if s is not None:
            table.add_row("elapsed", f"{s.elapsed:.1f} s ({s.phase})")
            table.add_row("ops/s", f"{s.ops_per_second:,.0f}")
            table.add_row("commands", f"{s.total:,} ok, [red]{s.failed}[/] failed")
            table.add_row("relaxed connections", str(s.relaxed))
            table.add_row(
                "handoffs",
                f"{s.pending} pending, [green]{s.completed}[/] completed, "
                f"[red]{s.handoff_failed}[/] failed",
            )
            table.add_row("traffic", s.endpoint)
        log = "\n".join(self.events[-12:]) or "(waiting)"
        return Group(
            Panel(table, title="trio-maint demo"), Panel(log, title="notifications and events")
        )

    def event(self, elapsed: float, text: str) -> None:
        from rich.markup import escape

        self.events.append(f"[dim]{elapsed:7.3f}s[/] {escape(text)}")
        self.live.update(self._render())

    def update(self, s: Snapshot) -> None:
        self.snapshot = s
        self.live.update(self._render())

    def close(self) -> None:
        self.live.stop()


def rich_available() -> bool:
    """Whether ``rich`` (extra ``cli``) can be imported."""
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


def make_view(out: TextIO, plain: bool) -> PlainView | RichView:
    """The rich view on a terminal with rich installed (unless ``plain``), else plain text."""
    if not plain and out.isatty() and rich_available():
        return RichView(out)
    return PlainView(out)


# --------------------------------------------------------------------------- reports


def render_report(report: DemoReport, out: TextIO, *, use_rich: bool) -> None:
    """Print the end-of-run report (a rich table on a terminal, else plain text)."""
    d = report.as_dict()
    rows = [
        ("scenario", f"{d['scenario']} (speed {d['speed']:g}, {d['duration']:.1f} s)"),
        ("commands", f"{d['commands']['total']:,} total, {d['commands']['failed']} failed"),
        (
            "handoffs",
            f"{d['handoffs']['completed']} completed, {d['handoffs']['failed']} failed "
            f"({d['handoffs']['connections_moved']} connections told to move)",
        ),
    ]
    for phase in ("before", "during", "after"):
        lat = d["latency"][phase]
        rows.append(
            (
                f"latency {phase}",
                f"p50 {_ms(lat['p50'])}, p99 {_ms(lat['p99'])}, max {_ms(lat['max'])} "
                f"({lat['count']:,} ops)",
            )
        )
    check = d["data_check"]
    rows.append(
        (
            "data check",
            f"{'intact' if check['intact'] else 'WRITES LOST'}: {check['keys_checked']:,} keys "
            f"and {check['counters_checked']} counters read back from {check['server']} "
            f"({check['missing']} missing, {check['stale']} stale, "
            f"{check['counters_short']} counters short)",
        )
    )
    for b in d["breakers"]:
        if not b["opened"]:
            continue
        rows.append(
            (
                "circuit breaker",
                f"{b['endpoint']}: {b['state']} (opened {b['opened']} time(s)); traffic stayed "
                "where it was",
            )
        )
    if d["commands"]["errors"]:
        rows.append(("errors", ", ".join(f"{k}: {v}" for k, v in d["commands"]["errors"].items())))
    verdict = "PASS" if d["ok"] else "FAIL"
    if use_rich:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"trio-maint demo: {verdict}", show_header=False)
        table.add_column(style="bold")
        table.add_column()
        for key, value in rows:
            table.add_row(key, value)
        Console(file=out).print(table)
        return
    print(f"trio-maint demo: {verdict}", file=out)
    for key, value in rows:
        print(f"  {key:15} {value}", file=out)


def write_plot(report: DemoReport, path: str) -> None:
    """Draw ops/s and p99 latency over time, with the notifications marked, to ``path``.

    :raises UsageError: matplotlib is not installed (extra ``plot``).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'trio-maint[plot]'") from None
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
    failed = report.failed_commands
    fig.suptitle(
        f"trio-maint demo ({report.config.scenario}): {report.total_commands:,} commands, "
        f"{failed} failed\ngrey: the maintenance window; red: notifications",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
