"""The ``trio-maint`` command line: ``demo`` and ``monitor`` (also ``python -m trio_maint``).

``rich`` (extra ``cli``) draws the live view and tables when the output is a terminal;
otherwise plain text is printed. ``--plot`` needs matplotlib (extra ``plot``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import sys
from collections.abc import Sequence
from typing import Any, TextIO

import trio

from ._demo import SCENARIOS, DemoConfig, DemoError, DemoReport, Snapshot, run_demo

__all__ = ["main"]

#: Exit statuses: success, a failed run or environment problem, a usage error.
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A bad argument (exit status 2)."""


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


def _rich_available() -> bool:
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


def _make_view(out: TextIO, plain: bool) -> PlainView | RichView:
    if not plain and out.isatty() and _rich_available():
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


# ----------------------------------------------------------------------------- demo


def _mix(text: str) -> tuple[int, int, int]:
    parts = text.split(":")
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected READS:WRITES:PIPELINES, got {text!r}")
    if len(values) != 3 or min(values) < 0 or sum(values) == 0:
        raise argparse.ArgumentTypeError(f"expected three weights >= 0, got {text!r}")
    return values[0], values[1], values[2]


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}")
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


def _cmd_cluster_demo(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``trio-maint demo --cluster``: scenario (a) of docs/cluster.md with progress lines and
    a report (JSON with ``--json``)."""
    from ._cluster_demo import ClusterDemoConfig, run_cluster_demo
    from .testing import ClusterError, RedisServerNotFoundError

    for name in ("tasks", "pool_size", "keys"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    defaults = ClusterDemoConfig()
    cfg = ClusterDemoConfig(
        tasks=args.tasks or defaults.tasks,
        keys=args.keys or defaults.keys,
        pool_size=args.pool_size or defaults.pool_size,
    )
    json_to_stdout = args.json == "-"
    view_out = err if json_to_stdout else out

    def say(line: str) -> None:
        print(line, file=view_out, flush=True)

    try:
        report = trio.run(run_cluster_demo, cfg, say)
    except (RedisServerNotFoundError, ClusterError) as exc:
        raise DemoError(str(exc)) from None
    if args.json:
        text = json.dumps(report.as_dict(), indent=2)
        if json_to_stdout:
            print(text, file=out)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    return EXIT_OK if report.ok else EXIT_FAILED


def _cmd_demo(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.cluster:
        return _cmd_cluster_demo(args, out, err)
    try:
        cfg = DemoConfig(
            tasks=args.tasks if args.tasks is not None else 8,
            duration=args.duration,
            pool_size=args.pool_size if args.pool_size is not None else 4,
            keys=args.keys if args.keys is not None else 1000,
            mix=args.mix,
            speed=args.speed,
            scenario=args.scenario,
            port=args.port,
            seed=args.seed,
            data_move=args.data_move,
        )
    except DemoError as exc:
        raise UsageError(str(exc)) from None
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise UsageError("--plot needs matplotlib: pip install 'trio-maint[plot]'") from None
    json_to_stdout = args.json == "-"
    view_out = err if json_to_stdout else out
    view = _make_view(view_out, args.plain)
    try:
        report = trio.run(run_demo, cfg, view)
    finally:
        view.close()
    if args.json:
        text = json.dumps(report.as_dict(), indent=2)
        if json_to_stdout:
            print(text, file=out)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    use_rich = not args.plain and view_out.isatty() and _rich_available()
    render_report(report, view_out, use_rich=use_rich)
    if args.plot:
        write_plot(report, args.plot)
        print(f"plot written to {args.plot}", file=view_out)
    return EXIT_OK if report.ok else EXIT_FAILED


# -------------------------------------------------------------------------- monitor


def _cmd_monitor(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ._monitor import MonitorError, run_monitor

    try:
        return trio.run(
            run_monitor,
            args.url,
            out,
            args.interval,
            args.duration,
            args.count,
            args.endpoint_type,
        )
    except MonitorError as exc:
        raise UsageError(str(exc)) if exc.usage else exc


# ---------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    """The ``trio-maint`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="trio-maint",
        description="trio_maint's demo of hitless maintenance, and a monitor for real servers.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo",
        help="run a workload through a simulated maintenance window on two real redis-servers",
        description=(
            "Start two redis-servers (A, and B that becomes its replica) behind maintenance "
            "simulators, run a concurrent workload through open_redis, drive the managed-"
            "Redis timeline (MIGRATING, MIGRATED, MOVING to B with the real data move, A's "
            "connections closed when time runs out) and report. Exit status 1 if a command "
            "failed or a write was lost."
        ),
    )
    demo.add_argument(
        "--tasks", type=int, default=None, help="concurrent tasks (default 8; 100 with --cluster)"
    )
    demo.add_argument(
        "--duration",
        type=_positive_float,
        default=None,
        help="seconds of traffic in all (default: the timeline's length at --speed)",
    )
    demo.add_argument(
        "--pool-size",
        type=int,
        default=None,
        help="client pool size (default 4; per node with --cluster: 20)",
    )
    demo.add_argument(
        "--keys", type=int, default=None, help="key space size (default 1000; 2000 with --cluster)"
    )
    demo.add_argument(
        "--mix",
        type=_mix,
        default=(60, 30, 10),
        metavar="R:W:P",
        help="weights of reads, writes and pipelines (default 60:30:10)",
    )
    demo.add_argument(
        "--speed",
        type=_positive_float,
        default=1.0,
        help="compress the timeline by this factor (default 1: about 28 s)",
    )
    demo.add_argument(
        "--scenario",
        choices=SCENARIOS,
        default="moving",
        help="moving (default), failover, none (null-endpoint MOVING) or unreachable "
        "(MOVING to a dead endpoint: the circuit breaker)",
    )
    demo.add_argument(
        "--data-move",
        choices=("stall", "migrate"),
        default="stall",
        help="how moving/none move the data: stall (default: B's endpoint holds traffic "
        "until B is promoted, A switches once idle) or migrate (trio_maint.testing.migrate: "
        "A switches first, then MOVING; writes in flight meet READONLY)",
    )
    demo.add_argument("--port", type=int, default=0, help="port of endpoint A (default: free)")
    demo.add_argument("--seed", type=int, default=None, help="seed of the workload")
    demo.add_argument(
        "--json",
        nargs="?",
        const="-",
        default=None,
        metavar="FILE",
        help="write the report as JSON to FILE, or to stdout (then the live view goes to stderr)",
    )
    demo.add_argument(
        "--plot", metavar="FILE.png", help="draw ops/s and p99 over time (needs matplotlib)"
    )
    demo.add_argument("--plain", action="store_true", help="plain text even on a terminal")
    demo.add_argument(
        "--cluster",
        action="store_true",
        help="run the Redis Cluster demo instead: a real local cluster (3 masters + 1 "
        "replica each) behind simulators, SMIGRATING, a real migration of slots between "
        "masters (MOVED/ASK), SMIGRATED; --tasks, --pool-size, --keys and --json apply",
    )
    demo.set_defaults(func=_cmd_demo)

    monitor = sub.add_parser(
        "monitor",
        help="print every maintenance notification a real endpoint sends",
        description=(
            "Connect to URL, opt in to maintenance notifications and print each one with a "
            "timestamp and what the client did about it, until interrupted (Ctrl-C)."
        ),
    )
    monitor.add_argument("url", help="redis://[[user]:password@]host[:port][/db] or rediss://")
    monitor.add_argument(
        "--interval",
        type=_positive_float,
        default=0.5,
        help="seconds between the PINGs that keep the connection reading (default 0.5)",
    )
    monitor.add_argument(
        "--duration", type=_positive_float, default=None, help="stop after this many seconds"
    )
    monitor.add_argument(
        "--count", type=int, default=None, help="stop after this many notifications"
    )
    monitor.add_argument(
        "--endpoint-type",
        default="auto",
        help="moving-endpoint-type to ask for (default: detected from the address)",
    )
    monitor.set_defaults(func=_cmd_monitor)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run ``trio-maint`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status.

    Errors a user can cause print one line, ``trio-maint: error: ...``, and return 2
    (usage) or 1 (the environment, e.g. redis-server missing or a server unreachable).
    """
    out = out if out is not None else sys.stdout
    err = sys.stderr
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status: int = args.func(args, out, err)
        return status
    except UsageError as exc:
        print(f"trio-maint: error: {exc}", file=err)
        return EXIT_USAGE
    except DemoError as exc:
        print(f"trio-maint: error: {exc}", file=err)
        return EXIT_FAILED
    except BaseException as exc:
        from ._monitor import MonitorError

        if isinstance(exc, MonitorError):
            print(f"trio-maint: error: {exc}", file=err)
            return EXIT_FAILED
        if _interrupted(exc):
            print("trio-maint: interrupted", file=err)
            return 130
        raise


def _interrupted(exc: BaseException) -> bool:
    """``exc`` is a Ctrl-C, possibly wrapped in exception groups (with cancellations)."""
    if isinstance(exc, KeyboardInterrupt):
        return True
    if isinstance(exc, BaseExceptionGroup):
        leaves = [e for e in exc.exceptions if not isinstance(e, trio.Cancelled)]
        return bool(leaves) and all(_interrupted(e) for e in leaves)
    return False


def timestamp() -> str:
    """The current UTC time as ISO 8601 with milliseconds."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def main_entry() -> None:
    """Console-script entry point: ``sys.exit(main())``."""
    sys.exit(main())
