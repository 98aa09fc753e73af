"""``trio-maint simulate`` and ``trio-maint simulate ctl``: their arguments and how they
run (the simulators are in ``simulate``, the control protocol in ``simulate_control``)."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any, Final, TextIO

import trio

from .. import redact_text
from .args import EXIT_FAILED, EXIT_OK, HelpFormatter, Parser, positive_float
from .render import UsageError, rich_available
from .report import DemoError

__all__ = ["SIMULATE_EXAMPLES", "add_simulate"]

SIMULATE_EXAMPLES: Final = """\
examples (docs/simulate.md):
  trio-maint simulate --listen 127.0.0.1:7000 --upstream redis://127.0.0.1:6380 \\
      --target 127.0.0.2:7000=redis://127.0.0.1:6381
  trio-maint simulate ctl scenario moving --wait       in another terminal
  trio-maint simulate ctl migrating --time 2
  trio-maint simulate ctl status --json
"""

CTL_EXAMPLES: Final = """\
examples (docs/simulate.md):
  trio-maint simulate ctl status
  trio-maint simulate ctl migrating --time 2             MIGRATING now
  trio-maint simulate ctl scenario moving --wait         the MOVING timeline, to its end
  trio-maint simulate ctl --control /tmp/sim.sock scenario failover
  trio-maint simulate ctl status --json --control /tmp/sim.sock

--control (before or after the command) names the simulator's control socket, default
$XDG_RUNTIME_DIR/trio-maint-simulate.sock; --json prints the reply as JSON.
"""

#: Examples of each ``simulate ctl`` command, by name (``{}``: where the name goes).
CTL_COMMAND_EXAMPLES: Final = {
    "moving": ("moving --to 127.0.0.2:7000 --time 5", "moving --remember"),
    "migrating": ("migrating --time 2", "migrating --on 127.0.0.2:7000 --shard-ids 1"),
    "migrated": ("migrated", "migrated --seq 10 --json"),
    "failing-over": ("failing-over --time 2", "failing-over --remember"),
    "failed-over": ("failed-over", "failed-over --on 127.0.0.2:7000"),
    "scenario": (
        "scenario moving --wait",
        "scenario failover --compress 10 --json --wait",
        "scenario migrate --on 127.0.0.2:7000 --to 127.0.0.1:7000 --wait",
    ),
    "status": ("status", "status --json --control /tmp/sim.sock"),
}


def _ctl_examples(name: str) -> str:
    """The ``examples:`` epilog of ``simulate ctl NAME``."""
    lines = [f"  trio-maint simulate ctl {e}" for e in CTL_COMMAND_EXAMPLES[name]]
    return "examples (docs/simulate.md):\n" + "\n".join(lines) + "\n"


def _cmd_simulate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from .simulate_control import (
        ControlError,
        Endpoint,
        Layout,
        default_control_path,
        parse_address,
        parse_target,
        parse_upstream,
    )

    if args.listen is None or args.upstream is None:
        raise UsageError("simulate needs --listen HOST:PORT and --upstream URL (or: simulate ctl)")
    try:
        password = os.environ.get("REDISCLI_AUTH") or None  # as redis-cli: not in `ps`
        first = Endpoint(parse_address(args.listen), parse_upstream(args.upstream, password))
        targets = [parse_target(t, password) for t in args.target]
        layout = Layout(
            (first, *[t for t in targets if isinstance(t, Endpoint)]),
            tuple(t for t in targets if not isinstance(t, Endpoint)),
        )
    except ControlError as exc:
        raise UsageError(str(exc)) from None
    from .simulate import SimulateConfig, SimulateError, run_simulate

    cfg = SimulateConfig(
        layout=layout,
        control=args.control or default_control_path(),
        quiet=args.quiet,
        use_rich=not args.plain and out.isatty() and rich_available(),
    )
    try:
        return trio.run(lambda: run_simulate(cfg, out, default_control=args.control is None))
    except SimulateError as exc:
        raise DemoError(str(exc)) from None


def _cmd_simulate_ctl(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from .simulate import SimulateError, run_ctl
    from .simulate_control import default_control_path, request_from_args

    request = request_from_args(args.ctl, vars(args))
    wait = bool(request.get("wait"))
    try:
        control = getattr(args, "control", None) or default_control_path()
        reply = run_ctl(control, request, None if wait else 10.0)
    except SimulateError as exc:
        raise DemoError(str(exc)) from None
    if args.json:
        print(json.dumps(reply, indent=2), file=out)
    elif reply["ok"]:
        print(reply.get("message", "ok"), file=out)
    if not reply["ok"]:
        print(f"trio-maint: error: {redact_text(str(reply.get('error')))}", file=err)
        return EXIT_FAILED
    return EXIT_OK


def add_simulate(sub: Any, shared: argparse.ArgumentParser) -> None:
    """Add ``simulate`` and ``simulate ctl ...`` to ``sub`` (the command subparsers);
    ``shared`` holds the options every command takes."""
    from .simulate_control import INJECTIONS
    from .simulate_control import SCENARIOS as SIM_SCENARIOS

    simulate = sub.add_parser(
        "simulate",
        help="run maintenance simulators in front of your own redis-servers (docs/simulate.md)",
        description=(
            "Listen on --listen and forward every connection to --upstream, as a managed-"
            "Redis endpoint that sends maintenance notifications (MOVING, MIGRATING, "
            "MIGRATED, FAILING_OVER, FAILED_OVER) when told to by 'trio-maint simulate ctl' "
            "in another terminal, until Ctrl-C. Point any client at --listen."
        ),
        epilog=SIMULATE_EXAMPLES,
        formatter_class=HelpFormatter,
        parents=[shared],
    )
    simulate.add_argument("--listen", metavar="HOST:PORT", help="where clients connect")
    simulate.add_argument(
        "--upstream",
        metavar="URL",
        help="redis://host:port of your redis-server (or HOST:PORT); a password, checked "
        "at start, comes from $REDISCLI_AUTH when the URL has none (one written in the URL "
        "shows in ps)",
    )
    simulate.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="LISTEN=UPSTREAM|HOST:PORT",
        help="where a MOVING may point: LISTEN=UPSTREAM adds another simulator endpoint "
        "(e.g. 127.0.0.2:7000=redis://127.0.0.1:6380), HOST:PORT is only an address; "
        "repeatable, the first is ctl's default --to",
    )
    control_help = "the control socket (default: $XDG_RUNTIME_DIR/trio-maint-simulate.sock)"
    simulate.add_argument("--control", metavar="PATH", help=control_help)
    simulate.add_argument("--quiet", action="store_true", help="no line per client connection")
    simulate.add_argument("--plain", action="store_true", help="plain text even on a terminal")
    simulate.set_defaults(func=_cmd_simulate)

    simsub = simulate.add_subparsers(dest="simulate_command", parser_class=Parser)
    ctl = simsub.add_parser(
        "ctl",
        help="drive a running 'trio-maint simulate'",
        description="Send one command to a running 'trio-maint simulate' over its control "
        "socket and print its answer. Exit status 1 if it refused or none runs.",
        epilog=CTL_EXAMPLES,
        formatter_class=HelpFormatter,
        parents=[shared],
    )
    # --control also before the command (ctl --control PATH status); SUPPRESS: an absent
    # option does not overwrite the one given at another level (argparse copies a
    # subparser's defaults over its parent's values)
    ctl.add_argument("--control", metavar="PATH", default=argparse.SUPPRESS, help=control_help)
    ctls = ctl.add_subparsers(dest="ctl", required=True, parser_class=Parser)

    def common(p: argparse.ArgumentParser, on: bool = True) -> None:
        p.add_argument("--control", metavar="PATH", default=argparse.SUPPRESS, help=control_help)
        p.add_argument("--json", action="store_true", help="print the reply as JSON")
        if on:
            p.add_argument(
                "--on", metavar="HOST:PORT", help="the endpoint acting (default: --listen's)"
            )
        p.set_defaults(func=_cmd_simulate_ctl)

    for kind in INJECTIONS:
        p = ctls.add_parser(
            kind,
            help=f"send {kind.upper().replace('-', '_')} now",
            epilog=_ctl_examples(kind),
            formatter_class=HelpFormatter,
            parents=[shared],
        )
        common(p)
        p.add_argument("--seq", type=int, help="the sequence id (default: the next one)")
        if kind == "moving":
            p.add_argument(
                "--to", metavar="HOST:PORT", help="the new endpoint (default: the first --target)"
            )
        if kind in ("moving", "migrating", "failing-over"):
            p.add_argument("--time", type=int, help="seconds announced (default 15 / 2 / 2)")
            p.add_argument(
                "--remember",
                action="store_true",
                help="also send it to connections that opt in later",
            )
        if kind != "moving":
            p.add_argument("--shard-ids", help="shard ids (default 1)")
    scen = ctls.add_parser(
        "scenario",
        help="run a built-in scenario (docs/simulate.md)",
        epilog=_ctl_examples("scenario"),
        formatter_class=HelpFormatter,
        parents=[shared],
    )
    common(scen)
    scen.add_argument("name", choices=SIM_SCENARIOS)
    scen.add_argument("--to", metavar="HOST:PORT", help="moving/maintenance/migrate: where to")
    scen.add_argument("--time", type=int, help="MOVING's time in seconds (default 15)")
    scen.add_argument(
        "--grace", type=float, help="seconds after time until old connections close (default 2)"
    )
    scen.add_argument("--lead", type=float, help="seconds of notice (default 2)")
    scen.add_argument("--work", type=float, help="seconds of work (default 1)")
    scen.add_argument("--compress", type=positive_float, help="divide every delay by this")
    scen.add_argument("--wait", action="store_true", help="return when the scenario is over")
    status = ctls.add_parser(
        "status",
        help="endpoints, connections, the running scenario",
        epilog=_ctl_examples("status"),
        formatter_class=HelpFormatter,
        parents=[shared],
    )
    common(status, on=False)
