"""The ``trio-maint`` command line: ``demo``, ``monitor`` and ``simulate`` (also ``python -m
trio_maint``).

``rich`` (extra ``cli``) draws the live view and tables when the output is a terminal;
otherwise plain text is printed. ``--plot`` needs matplotlib (extra ``plot``). The parser's
shared pieces are in ``args``, ``simulate``'s arguments in ``simulate_args``, logging in
``logs``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from typing import Any, Final, TextIO

import trio

from .. import redact_text
from .._net.groups import leaves
from .args import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    HelpFormatter,
    Parser,
    common_options,
    mix_weights,
    port_number,
    positive_float,
    version_text,
)
from .cluster_demo import ClusterDemoConfig, ClusterDemoReport, run_cluster_demo
from .demo import run_demo
from .logs import DEFAULT_LEVEL, cli_logging, parse_level
from .metrics import serve_metrics
from .render import (
    UsageError,
    make_view,
    plot_hint,
    render_report,
    rich_available,
    write_plot,
)
from .report import SCENARIOS, DemoConfig, DemoError, DemoReport
from .simulate_args import add_simulate

__all__ = ["main", "main_entry"]

# ----------------------------------------------------------------------------- demo


def _demo_config(args: argparse.Namespace) -> DemoConfig | ClusterDemoConfig:
    """The demo's settings from the command line (defaults filled in)."""
    mix = args.mix if args.mix is not None else (60, 30, 10)
    try:
        if args.cluster:
            defaults = ClusterDemoConfig()
            return ClusterDemoConfig(
                tasks=_given(args.tasks, defaults.tasks),
                keys=_given(args.keys, defaults.keys),
                pool_size=_given(args.pool_size, defaults.pool_size),
                mix=mix,
                speed=args.speed,
                duration=args.duration,
                seed=args.seed,
                cache=args.cache,
            )
        return DemoConfig(
            tasks=_given(args.tasks, 8),
            duration=args.duration,
            pool_size=_given(args.pool_size, 4),
            keys=_given(args.keys, 1000),
            mix=mix,
            speed=args.speed,
            scenario=args.scenario or "moving",
            port=args.port or 0,
            seed=args.seed,
            data_move=args.data_move or "stall",
            cache=args.cache,
        )
    except DemoError as exc:
        raise UsageError(str(exc)) from None


def _given(value: int | None, default: int) -> int:
    return value if value is not None else default


def _cmd_demo(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    cfg = _demo_config(args)
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise UsageError(plot_hint()) from None
    json_to_stdout = args.json == "-"
    view_out = err if json_to_stdout else out
    with contextlib.ExitStack() as stack:
        registry = None
        if args.metrics_port is not None:
            server = stack.enter_context(serve_metrics(args.metrics_port))
            registry = server.registry
            print(f"metrics for Prometheus: {server.url}", file=view_out, flush=True)
        report = _run_demo(cfg, view_out, args.plain, registry)
    if args.json:
        text = json.dumps(report.as_dict(), indent=2)
        if json_to_stdout:
            print(text, file=out)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    use_rich = not args.plain and view_out.isatty() and rich_available()
    render_report(report, view_out, use_rich=use_rich)
    if args.plot:
        write_plot(report, args.plot)
        print(f"plot written to {args.plot}", file=view_out)
    return EXIT_OK if report.ok else EXIT_FAILED


def _run_demo(
    cfg: DemoConfig | ClusterDemoConfig, view_out: TextIO, plain: bool, registry: Any
) -> DemoReport | ClusterDemoReport:
    """Run the demo ``cfg`` asks for with its live view on ``view_out``."""
    if isinstance(cfg, ClusterDemoConfig):
        from ..testing import ClusterError, RedisServerNotFoundError

        view = make_view(view_out, plain, "trio-maint demo --cluster")
        try:
            return trio.run(run_cluster_demo, cfg, view, registry)
        except (RedisServerNotFoundError, ClusterError) as exc:
            raise DemoError(str(exc)) from None
        finally:
            view.close()
    view = make_view(view_out, plain)
    try:
        return trio.run(run_demo, cfg, view, registry)
    finally:
        view.close()


#: Demo options that do not apply to ``--cluster``, and why.
CLUSTER_REFUSES: Final = {
    "scenario": "the cluster demo has one scenario, a slot migration (SMIGRATING, ASK and "
    "MOVED, SMIGRATED)",
    "data_move": "the cluster moves its slots with MIGRATE, as redis-cli --cluster reshard",
    "port": "the cluster's nodes and simulators take free ports of their own",
}


def check_demo_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse, with ``parser.error`` (exit status 2), a demo option ``--cluster`` does not
    use: no option is ignored silently."""
    if not args.cluster:
        return
    for name, why in CLUSTER_REFUSES.items():
        if getattr(args, name) is not None:
            parser.error(f"--{name.replace('_', '-')} does not apply to --cluster: {why}")


# -------------------------------------------------------------------------- monitor


def _cmd_monitor(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from .monitor import MonitorError, run_monitor

    try:
        return trio.run(
            run_monitor,
            args.url,
            out,
            args.interval,
            args.duration,
            args.count,
            args.endpoint_type,
            os.environ.get("REDISCLI_AUTH") or None,
        )
    except MonitorError as exc:
        raise UsageError(str(exc)) if exc.usage else exc


# ------------------------------------------------------------------------- simulate


# ---------------------------------------------------------------------------- parser


MAIN_EXAMPLES: Final = """\
examples:
  trio-maint demo                    the maintenance timeline in real time (about 28 s)
  trio-maint demo --speed 10         the same compressed ten times (about 3 s)
  trio-maint demo --cluster          a slot migration on a local Redis Cluster
  REDISCLI_AUTH=... trio-maint monitor rediss://default@redis-12000.example.com:12000
  trio-maint simulate --listen 127.0.0.1:7000 --upstream redis://127.0.0.1:6380 \\
      --target 127.0.0.2:7000=redis://127.0.0.1:6381
  trio-maint --log-level info demo   the library's INFO lines too

Each command has its own --help. Logging: one line per record on stderr (UTC time,
level, logger, message), repeats of a message held back for 10 s and counted.
"""

DEMO_EXAMPLES: Final = """\
examples:
  trio-maint demo                          real time: about 28 s (failover: 11 s)
  trio-maint demo --speed 10               compressed: about 3 s (what nox -s demo runs)
  trio-maint demo --speed 20 --json        the report as JSON on stdout, the view on stderr
  trio-maint demo --scenario unreachable --plot demo.png
  trio-maint demo --data-move migrate --tasks 32 --pool-size 8
  trio-maint demo --cluster --plot cluster.png --json cluster.json
  trio-maint demo --cache --mix 90:9:1     client-side caching: hit ratio, stale reads (0)
  trio-maint demo --metrics-port 9464      Prometheus metrics on 127.0.0.1:9464 meanwhile

The run takes the timeline's length divided by --speed (28 s at the default --speed 1:
4 s of traffic, MIGRATING, 3 s, MIGRATED and MOVING with 15 s of time plus 2 s of
grace, 4 s of traffic), plus about a second to start the servers. With --cluster:
three phases of 1 s / --speed (traffic, the ASK phase, traffic) plus the key move,
and a few seconds to start the cluster. --scenario, --data-move and --port do not
apply to --cluster and are refused.
"""

MONITOR_EXAMPLES: Final = """\
examples:
  REDISCLI_AUTH=... trio-maint monitor rediss://default@redis-12000.example.com:12000
  trio-maint monitor redis://127.0.0.1:7000 --count 3      stop after three notifications
  trio-maint monitor redis://127.0.0.1:7000 --duration 60

The password: the URL's, else $REDISCLI_AUTH's (as redis-cli). A password written in the
URL on the command line shows in ps to other users; the environment variable does not.
Passwords are never printed: URLs are shown with the password hidden.
"""


def build_parser() -> argparse.ArgumentParser:
    """The ``trio-maint`` argument parser."""
    common = common_options()
    raw = HelpFormatter
    parser = Parser(
        prog="trio-maint",
        description="trio_maint's demo of hitless maintenance, a monitor for real servers, and "
        "a maintenance simulator for any client.",
        epilog=MAIN_EXAMPLES,
        formatter_class=raw,
        parents=[common],
    )
    parser.set_defaults(log_level=parse_level(DEFAULT_LEVEL))
    parser.add_argument("--version", action="version", version=version_text())
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    demo = sub.add_parser(
        "demo",
        help="run a workload through a simulated maintenance window on two real redis-servers",
        description=(
            "Start two redis-servers (A, and B that becomes its replica) behind maintenance "
            "simulators, run a concurrent workload through open_redis, drive the managed-"
            "Redis timeline (MIGRATING, MIGRATED, MOVING to B with the real data move, A's "
            "connections closed when time runs out) and report. With --cluster: a local Redis "
            "Cluster and a slot migration instead. Exit status 1 if a command failed or a "
            "write was lost."
        ),
        epilog=DEMO_EXAMPLES,
        formatter_class=raw,
        parents=[common],
    )
    demo.add_argument(
        "--tasks", type=int, default=None, help="concurrent tasks (default 8; 100 with --cluster)"
    )
    demo.add_argument(
        "--duration",
        type=positive_float,
        default=None,
        help="seconds of traffic in all (default: the timeline's length at --speed; with "
        "--cluster split in three phases)",
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
        type=mix_weights,
        default=None,
        metavar="R:W:P",
        help="weights of reads, writes and pipelines (default 60:30:10)",
    )
    demo.add_argument(
        "--speed",
        type=positive_float,
        default=1.0,
        help="divide the timeline by this (default 1, real time: about 28 s; 10: about 3 s)",
    )
    demo.add_argument(
        "--scenario",
        choices=SCENARIOS,
        default=None,
        help="moving (default), failover, none (null-endpoint MOVING) or unreachable "
        "(MOVING to a dead endpoint: the circuit breaker)",
    )
    demo.add_argument(
        "--data-move",
        choices=("stall", "migrate"),
        default=None,
        help="how moving/none move the data: stall (default: B's endpoint holds traffic "
        "until B is promoted, A switches once idle) or migrate (trio_maint.testing.migrate: "
        "A switches first, then MOVING; writes in flight meet READONLY)",
    )
    demo.add_argument("--port", type=int, default=None, help="port of endpoint A (default: free)")
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
        "--cache",
        action="store_true",
        help="the client caches its reads (client-side caching, CacheConfig()); the view and "
        "report show the hit ratio, invalidations, flushes by cause and stale reads, which "
        "must be 0 (checked after r.cache.sync() barriers, docs/caching.md)",
    )
    demo.add_argument(
        "--metrics-port",
        type=port_number,
        default=None,
        metavar="N",
        help="serve the client's metrics for Prometheus on http://127.0.0.1:N/metrics while "
        "the demo runs (0: a free port; needs prometheus-client, extra 'prometheus')",
    )
    demo.add_argument(
        "--cluster",
        action="store_true",
        help="run the Redis Cluster demo instead: a real local cluster (3 masters + 1 "
        "replica each) behind simulators, SMIGRATING, a real migration of slots between "
        "masters (MOVED/ASK), SMIGRATED; every other option applies but --scenario, "
        "--data-move and --port",
    )
    demo.set_defaults(func=_cmd_demo, check=check_demo_args, parser=demo)

    monitor = sub.add_parser(
        "monitor",
        help="print every maintenance notification a real endpoint sends",
        description=(
            "Connect to URL, opt in to maintenance notifications and print each one with a "
            "timestamp and what the client did about it, until interrupted (Ctrl-C)."
        ),
        epilog=MONITOR_EXAMPLES,
        formatter_class=raw,
        parents=[common],
    )
    monitor.add_argument(
        "url",
        help="redis://[[user]:password@]host[:port][/db] or rediss://; without a password "
        "in it, $REDISCLI_AUTH's is used",
    )
    monitor.add_argument(
        "--interval",
        type=positive_float,
        default=0.5,
        help="seconds between the PINGs that keep the connection reading (default 0.5)",
    )
    monitor.add_argument(
        "--duration", type=positive_float, default=None, help="stop after this many seconds"
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
    add_simulate(sub, common)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run ``trio-maint`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status.

    Errors a user can cause print one line, ``trio-maint: error: ...``, and return 2
    (usage) or 1 (the environment, e.g. redis-server missing or a server unreachable).
    No line shows a password: URLs are printed as :func:`trio_maint.redact_url` does.
    Log records of ``--log-level`` and above are written to stderr, one line each, while
    the command runs (:mod:`trio_maint._cli.logs`).
    """
    out = out if out is not None else sys.stdout
    err = sys.stderr
    parser = build_parser()
    args = parser.parse_args(argv)
    check = getattr(args, "check", None)
    if check is not None:
        check(args.parser, args)
    try:
        with cli_logging(args.log_level):
            status: int = args.func(args, out, err)
        return status
    except UsageError as exc:
        print(f"trio-maint: error: {redact_text(str(exc))}", file=err)
        return EXIT_USAGE
    except DemoError as exc:
        print(f"trio-maint: error: {redact_text(str(exc))}", file=err)
        return EXIT_FAILED
    except BaseException as exc:
        from .monitor import MonitorError

        if isinstance(exc, MonitorError):
            print(f"trio-maint: error: {redact_text(str(exc))}", file=err)
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
        real = [e for e in leaves(exc) if not isinstance(e, trio.Cancelled)]
        return bool(real) and all(isinstance(e, KeyboardInterrupt) for e in real)
    return False


#: Exit status when stdout was closed under us (``... | head``): 128 + SIGPIPE, as a
#: program killed by SIGPIPE reports in a shell.
EXIT_BROKEN_PIPE: Final = 141


def _broken_pipe(exc: BaseException) -> bool:
    """``exc`` is a write to a closed pipe, possibly wrapped in exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        real = [e for e in leaves(exc) if not isinstance(e, trio.Cancelled)]
        return bool(real) and all(isinstance(e, BrokenPipeError) for e in real)
    return isinstance(exc, BrokenPipeError)


def main_entry() -> None:
    """Console-script entry point (and ``python -m trio_maint``): ``sys.exit(main())``.

    A reader that stops early (``trio-maint ... --json | head -c 600``) ends the command
    quietly with status 141, without a traceback: stdout is pointed at ``os.devnull`` so
    the interpreter's last flush at exit does not fail again (the recipe of Python's
    ``signal`` documentation)."""
    try:
        status = main()
        sys.stdout.flush()  # a closed pipe shows here rather than at exit
    except BaseException as exc:
        if not _broken_pipe(exc):
            raise
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(EXIT_BROKEN_PIPE)
    sys.exit(status)
