"""The demo's rendering without servers: the live views (the first notification kept, the
post-handoff relaxation explained), the report rows of both demos (thousands separators,
no Python reprs, one PASS/FAIL line), and the plot's axes from zero."""

from __future__ import annotations

import io
import math

import pytest

from trio_maint._cli.cluster_demo import ClusterDemoConfig, ClusterDemoReport
from trio_maint._cli.render import (
    PlainView,
    RichView,
    draw_plot,
    relaxed_text,
    render_report,
    snapshot_rows,
)
from trio_maint._cli.report import DemoConfig, DemoReport, Snapshot, latency_summary

LATENCY = {p: latency_summary([0.001, 0.002, 0.0015] * 500) for p in ("before", "during", "after")}


def snapshot(**changes: object) -> Snapshot:
    values: dict[str, object] = {
        "elapsed": 8.0,
        "phase": "window",
        "ops_per_second": 12345.6,
        "total": 1234567,
        "failed": 0,
        "relaxed": 3,
        "endpoint": "A 0 / B 4 connections, new ones dial B 127.0.0.1:7001",
        "handoffs": (0, 4, 0),
        "relaxed_after_handoff": 3,
        "relaxed_until": 27.0,
        "post_handoff": 20.0,
    }
    values.update(changes)
    return Snapshot(**values)  # type: ignore[arg-type]


def test_relaxed_after_a_handoff_is_explained() -> None:
    s = snapshot()
    text = relaxed_text(s)
    assert text.startswith("3 (3 handed off: a connection keeps relaxed timeouts 20 s after")
    assert "MaintConfig.post_handoff_relaxed_duration, until 27.0 s)" in text
    assert relaxed_text(s, short=True) == "3 relaxed (3 after a handoff, until 27.0 s)"
    in_window = snapshot(relaxed_after_handoff=0, relaxed_until=None)
    assert relaxed_text(in_window) == "3"
    rows = dict(snapshot_rows(s))
    assert rows["commands"] == "1,234,567 ok, 0 failed"
    assert rows["ops/s"] == "12,346"
    assert rows["handoffs"] == "0 pending, 4 completed, 0 failed"


def test_plain_view_status_line() -> None:
    out = io.StringIO()
    view = PlainView(out)
    view.notification(7.0, "MOVING seq=3 -> hand connections off")
    view.update(snapshot())
    lines = out.getvalue().splitlines()
    assert lines[0] == "[   7.000s] MOVING seq=3 -> hand connections off"
    assert lines[1].startswith("[   8.000s] window: 12,346 ops/s, 1,234,567 ok, 0 failed, ")
    assert "3 relaxed (3 after a handoff, until 27.0 s)" in lines[1]
    cluster = snapshot(handoffs=None, relaxed_after_handoff=0, extra=(("redirections", "ASK 3"),))
    view.update(cluster)  # less than a second later: nothing
    view.last = -math.inf
    view.update(cluster)
    assert out.getvalue().splitlines()[-1].endswith("; redirections ASK 3")
    assert "handoffs" not in out.getvalue().splitlines()[-1]


def rich_text(view: RichView, width: int = 200) -> str:
    from rich.console import Console

    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(view._render())
    return out.getvalue()


def test_rich_view_keeps_the_first_notification() -> None:
    pytest.importorskip("rich")
    view = RichView(io.StringIO())
    try:
        view.notification(4.0, "MIGRATING seq=1001 -> relax timeouts")
        for i in range(40):  # many events after it: handoffs, steps
            view.event(5.0 + i / 100, f"handoff conn {i} -> B done")
        view.update(snapshot())
        text = rich_text(view)
        assert "MIGRATING seq=1001 -> relax timeouts" in text
        assert "handoff conn 39 -> B done" in text and "handoff conn 29 " not in text
        assert "MaintConfig.post_handoff_relaxed_duration" in text
        for i in range(12):  # more notifications than the panel's lines
            view.notification(20.0 + i, f"FAILING_OVER seq={i}")
        text = rich_text(view)
        assert "MIGRATING seq=1001" in text  # the first stays
        assert "(6 more)" in text and "FAILING_OVER seq=11" in text
        assert "FAILING_OVER seq=5" not in text
    finally:
        view.close()


def test_rich_view_wraps_events_with_a_hanging_indent() -> None:
    pytest.importorskip("rich")
    view = RichView(io.StringIO())
    try:
        long = "MOVING seq=1002 -> 127.0.0.1:7001 in 15 s: " + "word " * 30
        view.event(4.5, long.strip())
        view.notification(4.5, long.strip())
        text = rich_text(view, width=60)
    finally:
        view.close()
    lines = [line for line in text.splitlines() if "word" in line]
    assert len(lines) > 4  # wrapped
    first = next(line for line in lines if "4.500s" in line)
    indent = first.index("MOVING")
    for line in lines:
        if "4.500s" not in line:
            # each continuation starts under the text, not under the time
            assert line[:indent].strip("│ ") == "" and line[indent] != " ", text


def demo_report() -> DemoReport:
    report = DemoReport(DemoConfig(speed=10))
    report.total_commands, report.failed_commands = 1234567, 0
    report.handoffs_completed, report.connections_moved = 4, 4
    report.latency = LATENCY
    report.keys_checked, report.counters_checked = 1000, 8
    report.relaxed_peak, report.relaxed_at_end = 4, 3
    report.duration = 3.2
    return report


def cluster_report() -> ClusterDemoReport:
    report = ClusterDemoReport(ClusterDemoConfig())
    report.total_commands, report.failed_commands = 38937, 2
    report.errors = {"ConnectionError": 2}
    report.redirections = {"ask": 1085, "moved": 32, "tryagain": 0}
    report.refreshes, report.smigrated_refreshes = 3, 1
    report.slots_moved, report.keys_moved = 200, 1191
    report.latency = LATENCY
    report.keys_checked, report.counters_checked = 1999, 100
    report.nodes = {"source": "127.0.0.1:7000", "target": "127.0.0.1:7001"}
    report.duration = 3.3
    return report


def test_demo_report_explains_post_handoff_relaxation() -> None:
    out = io.StringIO()
    render_report(demo_report(), out, use_rich=False)
    lines = out.getvalue().splitlines()
    assert lines[0] == "trio-maint demo: PASS"
    rows = {line[2:18].strip(): line[19:] for line in lines[1:]}
    assert rows["commands"] == "1,234,567 total, 0 failed"
    assert rows["relaxed timeouts"] == (
        "peak 4 connections, 3 at the end; a connection handed off keeps relaxed timeouts 2 s "
        "after its handoff (MaintConfig.post_handoff_relaxed_duration, by default 2 x "
        "relaxed_timeout = 20 s; divided by --speed here)"
    )
    assert rows["latency before"] == "p50 1.50 ms, p99 2.00 ms, max 2.00 ms (1,500 ops)"


@pytest.mark.parametrize("use_rich", [False, True])
def test_cluster_report_in_the_demo_style(use_rich: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if use_rich:
        pytest.importorskip("rich")
        monkeypatch.setenv("COLUMNS", "300")  # rich's width off a terminal: no wrapping
    out = io.StringIO()
    render_report(cluster_report(), out, use_rich=use_rich)
    text = out.getvalue()
    assert "trio-maint demo --cluster: FAIL" in text
    assert "38,937 total, 2 failed" in text
    assert "ASK 1,085, MOVED 32; slot-map refreshes: 3 (1 after SMIGRATED)" in text
    assert "200 slots and 1,191 keys moved 127.0.0.1:7000 -> 127.0.0.1:7001" in text
    assert "1,999 keys and 100 counters" in text
    assert "ConnectionError: 2" in text
    assert "{" not in text and "}" not in text and "OK" not in text


def test_plot_axes_start_at_zero() -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    report = demo_report()
    # a steady 4,200-4,300 ops/s: from zero, the noise stays small on the plot
    report.series = [
        {"t": i * 0.1, "ops_per_second": 4200.0 + (i % 3) * 50, "p99": 0.002, "failed": 0}
        for i in range(40)
    ]
    report.window = (1.0, 3.0)
    report.notifications = [{"t": 1.0, "name": "MIGRATING"}, {"t": 2.0, "name": "MOVING"}]
    fig = draw_plot(report)
    try:
        for ax in fig.axes:
            assert ax.get_ylim()[0] == 0
            assert ax.get_xlim()[0] == 0
        assert fig.axes[0].get_ylim()[1] >= 4300
        assert "1,234,567 commands, 0 failed" in fig._suptitle.get_text()
    finally:
        plt.close(fig)
