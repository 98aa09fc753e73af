"""``trio-maint simulate``: maintenance simulators in front of a user's own redis-servers,
driven from another terminal by ``trio-maint simulate ctl ...`` over a Unix socket.

Everything runs in one ``trio.run``: the simulators (entered in order, left in reverse),
then one nursery holding the control server, a watcher per endpoint that prints its
connections, the running scenario if any, and the wait for Ctrl-C (SIGINT) or SIGTERM.
The signal cancels that nursery, the simulators close their sockets and the control socket
is removed: no task outlives :func:`run_simulate`. Decisions (what a request means, which
endpoint and target) are made in :mod:`.simulate_control`; this module carries them out.

The control socket is a Unix socket made readable and writable by its user only (0600,
in a directory only its user may enter when it is the default one): the simulator
authenticates nobody, so nothing but the local user may drive it.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import threading
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any, TextIO

import attrs
import trio

from .._net.groups import leaves
from ..testing import (
    MaintenanceSimulator,
    Scenario,
    Step,
    failover_scenario,
    maintenance_scenario,
    migrate_scenario,
    migrating_scenario,
    moving_scenario,
)
from .render import timestamp
from .simulate_control import (
    Address,
    ControlError,
    Endpoint,
    Inject,
    Layout,
    RunScenario,
    Status,
    decode_reply,
    decode_request,
    describe_target,
    encode,
    format_address,
    wire_name,
)
from .simulate_socket import (
    ControlPathError,
    bind_control,
    prepare_control_path,
    read_line,
    remove_control,
    remove_directory,
)

__all__ = ["SimulateConfig", "SimulateError", "run_ctl", "run_simulate"]


class SimulateError(Exception):
    """The simulator cannot start or the control request failed (exit status 1)."""


@attrs.frozen
class SimulateConfig:
    """What ``trio-maint simulate`` runs.

    :ivar layout: the endpoints (``--listen`` first, then the ``--target`` endpoints) and
        the plain target addresses.
    :ivar control: the control socket's path.
    :ivar quiet: do not print a line per client connection.
    :ivar use_rich: print with rich (colours) instead of plain text.
    """

    layout: Layout
    control: str
    quiet: bool = False
    use_rich: bool = False


class _Log:
    """Timestamped lines (UTC), plain or through rich; nothing printed holds a password
    (upstreams are shown redacted by :func:`~.simulate_control.parse_upstream`)."""

    def __init__(self, out: TextIO, use_rich: bool) -> None:
        self.out = out
        self.console: Any = None
        if use_rich:
            from rich.console import Console

            self.console = Console(file=out, highlight=False, soft_wrap=True)

    def say(self, text: str, style: str = "") -> None:
        if self.console is not None:
            from rich.text import Text

            self.console.print(Text.assemble((timestamp(), "dim"), " ", (text, style)))
            self.out.flush()
        else:
            print(f"{timestamp()} {text}", file=self.out, flush=True)


# ------------------------------------------------------------------ the controller


class _Controller:
    """Carries out control requests against the running simulators."""

    def __init__(
        self,
        cfg: SimulateConfig,
        sims: dict[str, MaintenanceSimulator],
        log: _Log,
        nursery: trio.Nursery,
    ) -> None:
        self.cfg = cfg
        self.layout = cfg.layout
        self.sims = sims
        self.log = log
        self.nursery = nursery
        self.scenario: dict[str, Any] | None = None
        self.last: dict[str, Any] | None = None

    def _target(self, target: Endpoint | Address) -> MaintenanceSimulator | Address:
        if isinstance(target, Endpoint):
            return self.sims[target.name]
        return target

    async def execute(self, line: bytes) -> dict[str, Any]:
        try:
            command = decode_request(line)
            if isinstance(command, Status):
                return {"ok": True, "message": self._status_text(), "result": self.status()}
            if isinstance(command, Inject):
                return await self._inject(command)
            return await self._run_scenario(command)
        except ControlError as exc:
            self.log.say(f"control: refused: {exc}", "red")
            return {"ok": False, "error": str(exc)}
        except Exception as exc:  # an injection failed: report it, keep serving
            self.log.say(f"control: failed: {_reason(exc)}", "bold red")
            return {"ok": False, "error": f"failed: {_reason(exc)}"}

    # status ---------------------------------------------------------------------

    def upstream_of(self, endpoint: Endpoint) -> str:
        """The redis-server ``endpoint``'s new connections reach now (after a migrate, the
        new primary; after a MOVING, through the endpoint it moved to), as its URL when it
        is an endpoint's ``--upstream`` (redacted), else ``host:port``."""
        by_address = {sim.address: sim for sim in self.sims.values()}
        address = self.sims[endpoint.name].backend_address
        for _ in range(len(by_address)):  # chained endpoints, at most once each
            if address not in by_address:
                break
            address = by_address[address].backend_address
        for e in self.layout.endpoints:
            if e.upstream.address == address:
                return e.upstream.shown
        return format_address(address)

    def describe(self, target: Endpoint | Address) -> str:
        """A MOVING target as the clients will find it (an endpoint: where it forwards now)."""
        if isinstance(target, Endpoint):
            return describe_target(target, self.upstream_of(target))
        return describe_target(target)

    def status(self) -> dict[str, Any]:
        endpoints = []
        for e in self.layout.endpoints:
            sim = self.sims[e.name]
            conns = sim.connections
            endpoints.append(
                {
                    "listen": e.name,
                    "upstream": self.upstream_of(e),
                    "configured_upstream": e.upstream.shown,
                    "backend": format_address(sim.backend_address),
                    "connections": len(conns),
                    "maint_enabled": sum(1 for c in conns if c.maint_enabled),
                    "accepted": sim.accepted,
                }
            )
        return {
            "endpoints": endpoints,
            "targets": [format_address(a) for a in self.layout.addresses],
            "scenario": self.scenario,
            "last_scenario": self.last,
            "control": self.cfg.control,
        }

    def _status_text(self) -> str:
        lines = []
        for e in self.status()["endpoints"]:
            moved = e["upstream"] != e["configured_upstream"]
            since = f"; started in front of {e['configured_upstream']}" if moved else ""
            lines.append(
                f"{e['listen']} -> {e['backend']} (upstream {e['upstream']}{since}): "
                f"{e['connections']} connection(s), {e['maint_enabled']} with notifications "
                f"on, {e['accepted']} accepted"
            )
        for a in self.layout.addresses:
            lines.append(f"target {format_address(a)}")
        if self.scenario is not None:
            s = self.scenario
            lines.append(f"scenario {s['name']} running on {s['on']} since {s['since']}")
        else:
            lines.append("no scenario running")
        return "\n".join(lines)

    # injections -----------------------------------------------------------------

    async def _inject(self, cmd: Inject) -> dict[str, Any]:
        endpoint = self.layout.endpoint(cmd.on)
        sim = self.sims[endpoint.name]
        count = sum(1 for c in sim.connections if c.maint_enabled)
        name = wire_name(cmd.kind)
        detail = ""
        if cmd.kind == "moving":
            target = self.layout.target(endpoint, cmd.to) or endpoint.listen
            detail = f" to {self.describe(target)}, time {cmd.time} s"
            seq = await sim.inject_moving(
                seq_id=cmd.seq,
                time=cmd.time if cmd.time is not None else 15,
                target=self._target(target),
                remember=cmd.remember,
            )
        elif cmd.kind in ("migrating", "failing-over"):
            method = sim.inject_migrating if cmd.kind == "migrating" else sim.inject_failing_over
            seq = await method(
                seq_id=cmd.seq, time=cmd.time, shard_ids=cmd.shard_ids, remember=cmd.remember
            )
            detail = f", time {cmd.time} s"
        else:
            method2 = sim.inject_migrated if cmd.kind == "migrated" else sim.inject_failed_over
            seq = await method2(seq_id=cmd.seq, shard_ids=cmd.shard_ids)
        message = f"{endpoint.name}: {name} seq={seq} sent to {count} connection(s){detail}"
        self.log.say(message, "bold yellow")
        return {
            "ok": True,
            "message": message,
            "result": {"notification": name, "seq": seq, "on": endpoint.name, "sent": count},
        }

    # scenarios ------------------------------------------------------------------

    def _build(self, cmd: RunScenario, endpoint: Endpoint) -> tuple[Scenario, str]:
        if cmd.name in ("migration", "failover"):
            build = migrating_scenario if cmd.name == "migration" else failover_scenario
            return build(lead=cmd.lead, work=cmd.work, compress=cmd.compress), ""
        target = self.layout.target(endpoint, cmd.to)
        if target is None:
            raise ControlError(
                f"scenario {cmd.name} needs a target: give --to HOST:PORT or start the "
                "simulator with --target"
            )
        if isinstance(target, Endpoint) and target == endpoint:
            raise ControlError(f"scenario {cmd.name}: {endpoint.name} cannot move to itself")
        # migrate moves the data to the target's own server; a MOVING sends the clients
        # wherever the target endpoint forwards now
        where = f" to {describe_target(target) if cmd.name == 'migrate' else self.describe(target)}"
        dest = self._target(target)
        if cmd.name == "moving":
            built = moving_scenario(dest, time=cmd.time, grace=cmd.grace, compress=cmd.compress)
        elif cmd.name == "maintenance":
            built = maintenance_scenario(
                dest,
                lead=cmd.lead,
                work=cmd.work,
                time=cmd.time,
                grace=cmd.grace,
                compress=cmd.compress,
            )
        else:
            if cmd.compress != 1.0:
                raise ControlError("scenario migrate runs in real time: --compress is not used")
            built = migrate_scenario(dest, time=cmd.time)
        return built, where

    def _logged(self, scenario: Scenario, on: str) -> Scenario:
        """The scenario with each step printing itself when it has run."""
        steps = []
        for step in scenario.steps:

            def make(step: Step) -> Callable[[MaintenanceSimulator], Any]:
                async def action(sim: MaintenanceSimulator) -> Any:
                    result = await step.action(sim)
                    shown = "" if result is None else f": {result}"
                    self.log.say(f"{on}: scenario step {step.label!r}{shown}", "cyan")
                    return result

                return action

            steps.append(Step(step.at, make(step), step.label))
        return Scenario(scenario.name, steps)

    async def _run_scenario(self, cmd: RunScenario) -> dict[str, Any]:
        if self.scenario is not None:
            raise ControlError(
                f"scenario {self.scenario['name']} is running on {self.scenario['on']}; "
                "wait until it is over"
            )
        endpoint = self.layout.endpoint(cmd.on)
        built, where = self._build(cmd, endpoint)
        scenario = self._logged(built, endpoint.name)
        state: dict[str, Any] = {"name": cmd.name, "on": endpoint.name, "since": timestamp()}
        self.scenario = state
        done = trio.Event()
        outcome: dict[str, Any] = {}
        sim = self.sims[endpoint.name]
        message = f"{endpoint.name}: scenario {cmd.name}{where} started"
        self.log.say(message, "bold cyan")

        def reach() -> str:
            """Where the endpoint's new connections go once a move is over."""
            return f" (now -> {self.upstream_of(endpoint)})" if where else ""

        async def run() -> None:
            try:
                records = await scenario.run(sim)
            except Exception as exc:
                outcome["error"] = f"scenario {cmd.name} failed: {_reason(exc)}"
                self.log.say(f"{endpoint.name}: {outcome['error']}", "bold red")
            else:
                outcome["steps"] = [
                    {
                        "label": r.label,
                        "planned": round(r.planned, 3),
                        "started": round(r.started, 3),
                        "result": _jsonable(r.result),
                    }
                    for r in records
                ]
                self.log.say(f"{endpoint.name}: scenario {cmd.name} done{reach()}", "bold cyan")
            finally:
                self.scenario = None
                self.last = {**state, "ended": timestamp(), **outcome}
                done.set()

        self.nursery.start_soon(run)
        if not cmd.wait:
            return {"ok": True, "message": message, "result": state}
        await done.wait()
        if "error" in outcome:
            return {"ok": False, "error": outcome["error"]}
        return {
            "ok": True,
            "message": f"{endpoint.name}: scenario {cmd.name}{where} done{reach()}",
            "result": self.last,
        }

    # the control server -----------------------------------------------------------

    async def serve(self, listener: trio.SocketListener) -> None:
        async with listener, trio.open_nursery() as nursery:
            while True:
                stream = await listener.accept()
                nursery.start_soon(self._serve_one, stream)

    async def _serve_one(self, stream: trio.SocketStream) -> None:
        buffer = bytearray()
        async with stream:
            try:
                while True:
                    try:
                        line = await read_line(stream, buffer)
                    except ControlError as exc:
                        await stream.send_all(encode({"ok": False, "error": str(exc)}))
                        return
                    if line is None:
                        return
                    await stream.send_all(encode(await self.execute(line)))
            except trio.BrokenResourceError:
                return  # the ctl process went away


def _reason(exc: Exception) -> str:
    """Why a scenario or an injection failed: the sentence of an error raised on purpose
    (ValueError, RuntimeError, OSError such as TimeoutError: :func:`_os_reason`), the
    repr of anything else (a bug: its type matters)."""
    if isinstance(exc, OSError):
        return _os_reason(exc)
    if isinstance(exc, (ValueError, RuntimeError)) and str(exc):
        return str(exc)
    return repr(exc)


def _os_reason(exc: OSError) -> str:
    """The OS's words for a failed connection, as the library's own messages give them
    (``Connection refused``): trio's "all attempts to connect to ... failed" carries them
    in its cause, a group of each attempt's error."""
    cause = exc.__cause__
    attempts = leaves(cause) if isinstance(cause, BaseExceptionGroup) else [exc]
    # the errno's text (trio's strerror names the address again); a resolver error's own
    reasons = [
        os.strerror(e.errno) if e.errno > 0 else e.strerror or str(e)
        for e in attempts
        if isinstance(e, OSError) and e.errno
    ]
    return "; ".join(dict.fromkeys(reasons)) or str(exc) or type(exc).__name__


def _jsonable(value: Any) -> Any:
    """``value`` for a JSON reply: attrs classes (a MigrationResult) as objects, anything
    else JSON cannot hold as its repr."""
    if attrs.has(type(value)):
        value = attrs.asdict(value)
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value


# ------------------------------------------------------------------ watching, signals


async def _watch(sim: MaintenanceSimulator, name: str, log: _Log) -> None:
    """Print each connection of ``sim`` as it opens, opts in and closes."""

    def snapshot(s: MaintenanceSimulator) -> dict[int, tuple[bool, str | None]]:
        return {c.id: (c.maint_enabled, c.endpoint_type) for c in s.connections}

    known: dict[int, tuple[bool, str | None]] = {}
    peers: dict[int, str] = {}
    while True:
        await sim.wait_until(lambda s, seen=known: snapshot(s) != seen)  # type: ignore[misc]
        infos = {c.id: c for c in sim.connections}
        now = snapshot(sim)
        for cid in sorted(now.keys() - known.keys()):
            info = infos[cid]
            peers[cid] = format_address(info.peer)
            log.say(
                f"{name}: conn {cid} opened from {peers[cid]} -> {format_address(info.backend)}"
            )
        for cid in sorted(now.keys() & known.keys()):
            if now[cid] != known[cid]:
                enabled, etype = now[cid]
                what = f"on ({etype or 'no endpoint type'})" if enabled else "off"
                log.say(f"{name}: conn {cid} maintenance notifications {what}")
        for cid in sorted(known.keys() - now.keys()):
            log.say(f"{name}: conn {cid} from {peers.pop(cid, '?')} closed", "dim")
        known = now


async def _wait_for_stop() -> str:
    """Return the name of the first SIGINT/SIGTERM (never, off the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        await trio.sleep_forever()
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            return signal.Signals(signum).name
    raise AssertionError("unreachable")  # pragma: no cover


async def _check_upstream(endpoint: Endpoint) -> None:
    """The upstream accepts a TCP connection, and its password (the URL's or
    ``REDISCLI_AUTH``'s) when there is one: ``AUTH`` answered ``+OK``, or the error of a
    server that asks for none."""
    upstream = endpoint.upstream
    refused = None
    try:
        with trio.fail_after(5):
            stream = await trio.open_tcp_stream(*upstream.address)
            async with stream:
                if upstream.password is not None:
                    refused = await _auth_refused(stream, upstream.username, upstream.password)
    except (OSError, trio.BrokenResourceError, trio.TooSlowError) as exc:
        reason = (
            _os_reason(exc)
            if isinstance(exc, OSError)
            else "timed out"
            if isinstance(exc, trio.TooSlowError)
            else "the connection broke"
        )
        raise SimulateError(
            f"cannot reach the upstream {upstream.shown} of {endpoint.name}: {reason}"
        ) from None
    if refused is not None:
        raise SimulateError(
            f"the upstream {upstream.shown} of {endpoint.name} refused the password: {refused}"
        )


async def _auth_refused(stream: trio.SocketStream, user: str | None, password: str) -> str | None:
    """Send ``AUTH [user] password``; the server's error when it refused (never holding the
    password), else ``None`` (also from a server without a password: it takes anyone)."""
    args = [b"AUTH", *([user.encode()] if user else []), password.encode()]
    await stream.send_all(
        b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)
    )
    reply = b""
    while b"\r\n" not in reply and len(reply) < 4096:
        chunk = await stream.receive_some(4096)
        if not chunk:
            return "the connection was closed"
        reply += chunk
    line = reply.split(b"\r\n", 1)[0].decode("utf-8", "replace")
    if line == "+OK" or (line.startswith("-ERR AUTH") and "without any password" in line):
        return None
    return line.lstrip("-").replace(password, "***")[:200]


async def run_simulate(
    cfg: SimulateConfig,
    out: TextIO,
    *,
    default_control: bool = False,
) -> int:
    """Run the simulators of ``cfg.layout`` and the control server until SIGINT/SIGTERM
    (or cancellation); returns 0.

    :param default_control: ``cfg.control`` is the default path (its directory is created
        private and checked).
    :raises SimulateError: an upstream is unreachable, a listening address is taken, or
        the control socket is in use.
    """
    log = _Log(out, cfg.use_rich)
    for endpoint in cfg.layout.endpoints:
        await _check_upstream(endpoint)
    try:
        created = prepare_control_path(cfg.control, default_control)
    except ControlPathError as exc:
        raise SimulateError(str(exc)) from None
    sims: dict[str, MaintenanceSimulator] = {}
    async with AsyncExitStack() as stack:
        stack.callback(remove_directory, cfg.control, created)  # last, when empty
        for e in cfg.layout.endpoints:
            host, port = e.listen
            sim = MaintenanceSimulator(backend=e.upstream.address, host=host, port=port)
            try:
                await stack.enter_async_context(sim)
            except OSError as exc:
                raise SimulateError(f"cannot listen on {e.name}: {exc.strerror or exc}") from None
            sims[e.name] = sim
            log.say(f"simulator {e.name} -> {e.upstream.shown}", "bold green")
        for address in cfg.layout.addresses:
            log.say(f"target {format_address(address)} (an address only)")
        try:
            listener = await bind_control(cfg.control)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise SimulateError(f"the control socket {cfg.control} is in use") from None
            raise SimulateError(f"cannot bind {cfg.control}: {exc.strerror or exc}") from None
        try:
            async with trio.open_nursery() as nursery:
                controller = _Controller(cfg, sims, log, nursery)
                nursery.start_soon(controller.serve, listener)
                if not cfg.quiet:
                    for name, sim in sims.items():
                        nursery.start_soon(_watch, sim, name, log)
                log.say(
                    f"control socket {cfg.control} (this user only); drive it with "
                    f"'trio-maint simulate ctl ...' — Ctrl-C to stop",
                    "bold green",
                )
                why = await _wait_for_stop()
                log.say(f"{why}: stopping")
                nursery.cancel_scope.cancel()
        finally:
            remove_control(cfg.control)
    log.say("stopped")
    return 0


# ------------------------------------------------------------------ the ctl side


def run_ctl(path: str, request: dict[str, Any], timeout: float | None) -> dict[str, Any]:
    """Send one request to the simulator on ``path`` and return its reply.

    :param timeout: seconds to wait for the reply (``None``: as long as it takes, for
        ``scenario --wait``).
    :raises SimulateError: no simulator listens there, or it did not answer in time.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(5.0)
        try:
            sock.connect(path)
        except (FileNotFoundError, ConnectionRefusedError):
            raise SimulateError(
                f"no simulator is running on the control socket {path} (start one with "
                "'trio-maint simulate --listen HOST:PORT --upstream URL', or give --control)"
            ) from None
        sock.sendall(encode(request))
        sock.settimeout(timeout)
        data = b""
        while not data.endswith(b"\n"):
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                raise SimulateError(f"the simulator did not answer within {timeout} s") from None
            if not chunk:
                raise SimulateError("the simulator closed the control connection")
            data += chunk
        try:
            return decode_reply(data)
        except ControlError as exc:
            raise SimulateError(str(exc)) from None
    finally:
        sock.close()
