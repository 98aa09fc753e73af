"""``trio-maint simulate``, the part without I/O: parsing ``--listen``/``--upstream``/
``--target``, the control protocol (one JSON object per line each way) and the decisions
behind a control request (which endpoint, which target, which action), so the Trio side
(:mod:`.simulate`) only carries them out.

A request is ``{"op": ..., ...}``; a reply is ``{"ok": true, "message": ..., "result": ...}``
or ``{"ok": false, "error": ...}``. :func:`decode_request` turns a request into one of the
command classes below (or raises :class:`ControlError`), :func:`request_from_args` builds a
request from ``trio-maint simulate ctl ...``'s arguments, and :class:`Layout` resolves the
endpoint a command acts on and where a MOVING points.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Mapping
from typing import Any, TypeAlias
from urllib.parse import unquote, urlsplit

import attrs

from .. import redact_url

__all__ = [
    "INJECTIONS",
    "MAX_LINE",
    "SCENARIOS",
    "Address",
    "ControlError",
    "Endpoint",
    "Inject",
    "Layout",
    "RunScenario",
    "Status",
    "Upstream",
    "decode_reply",
    "decode_request",
    "default_control_path",
    "describe_target",
    "encode",
    "format_address",
    "parse_address",
    "parse_target",
    "parse_upstream",
    "request_from_args",
    "wire_name",
]

Address: TypeAlias = tuple[str, int]

#: The notifications ``ctl`` can inject, by their command-line names.
INJECTIONS = ("moving", "migrating", "migrated", "failing-over", "failed-over")
#: The scenarios ``ctl scenario`` can run (trio_maint.testing's built-ins).
SCENARIOS = ("moving", "maintenance", "migrate", "migration", "failover")
#: The longest control line accepted, in bytes (requests are a few hundred bytes).
MAX_LINE = 64 * 1024


class ControlError(ValueError):
    """A bad address, target or control request; the message says what is wrong."""


# ------------------------------------------------------------------ addresses


def parse_address(text: str) -> Address:
    """``host:port`` or ``[v6]:port`` as ``(host, port)``.

    :raises ControlError: no port, a port outside 1..65535, or an empty host.
    """
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ControlError(f"expected [IPv6]:PORT, got {text!r}")
        port_text = rest[1:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise ControlError(f"expected HOST:PORT, got {text!r}")
        if ":" in host:
            raise ControlError(f"write an IPv6 address as [ADDRESS]:PORT, got {text!r}")
    if not host:
        raise ControlError(f"no host in {text!r}")
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ControlError(f"the port must be a number in 1..65535, got {text!r}")
    return host, int(port_text)


def format_address(address: Address) -> str:
    """``host:port`` (``[host]:port`` for IPv6)."""
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@attrs.frozen
class Upstream:
    """A redis-server the simulator forwards to.

    :ivar address: its ``(host, port)``.
    :ivar shown: how to print it: the URL with its password hidden, or ``host:port``.
    :ivar username: the URL's user name, if any.
    :ivar password: the URL's password, else ``REDISCLI_AUTH``'s (``None``: none); only
        checked at start (``AUTH``), never shown.
    """

    address: Address
    shown: str
    username: str | None = attrs.field(default=None, repr=False)
    password: str | None = attrs.field(default=None, repr=False)


def parse_upstream(text: str, password: str | None = None) -> Upstream:
    """``redis://[[user]:password@]host[:port][/db]`` or ``host:port``.

    The simulator forwards bytes, so the client authenticates and selects through it; the
    user name and password (the URL's, else ``password``: ``REDISCLI_AUTH``'s) are only
    checked at start, the database is not used; only ``redis://`` over TCP can be
    simulated.

    :raises ControlError: ``rediss://`` or ``unix://``, or an address that does not parse;
        the message shows the URL redacted.
    """
    if "://" not in text:
        return Upstream(parse_address(text), text, None, password)
    shown = redact_url(text)
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme != "redis":
        raise ControlError(f"the upstream must be redis://host:port (TCP without TLS), got {shown}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        raise ControlError(f"bad port in {shown}") from None
    if not host:
        raise ControlError(f"no host in {shown}")
    user = unquote(parts.username) if parts.username else None
    secret = unquote(parts.password) if parts.password else password
    return Upstream((host, port or 6379), shown, user, secret)


@attrs.frozen
class Endpoint:
    """A simulator endpoint of this process.

    :ivar listen: the ``(host, port)`` it listens on.
    :ivar upstream: the server it forwards to.
    """

    listen: Address
    upstream: Upstream

    @property
    def name(self) -> str:
        """Its listening address as text: the name ``--on``/``--to`` use."""
        return format_address(self.listen)


def parse_target(text: str, password: str | None = None) -> Endpoint | Address:
    """``--target``: ``LISTEN=UPSTREAM`` is another simulator endpoint of this process (it
    listens on ``LISTEN`` and forwards to ``UPSTREAM``); a bare ``HOST:PORT`` is only an
    address a MOVING may point to (anything the clients can reach: a server, another
    ``trio-maint simulate``). ``password``: the upstream's when its URL has none.

    :raises ControlError: a part does not parse.
    """
    listen, sep, upstream = text.partition("=")
    if not sep:
        return parse_address(text)
    return Endpoint(parse_address(listen), parse_upstream(upstream, password))


@attrs.frozen
class Layout:
    """The endpoints of one ``trio-maint simulate`` process and its plain targets, in
    command-line order (``endpoints[0]`` is ``--listen``).

    :raises ControlError: two endpoints listen on the same address.
    """

    endpoints: tuple[Endpoint, ...]
    addresses: tuple[Address, ...] = ()

    def __attrs_post_init__(self) -> None:
        names = [e.name for e in self.endpoints]
        for name in names:
            if names.count(name) > 1:
                raise ControlError(f"two endpoints listen on {name}")

    def endpoint(self, on: str | None) -> Endpoint:
        """The endpoint named ``on`` (``None``: the ``--listen`` one).

        :raises ControlError: no endpoint listens there.
        """
        if on is None:
            return self.endpoints[0]
        wanted = format_address(parse_address(on))
        for e in self.endpoints:
            if e.name == wanted:
                return e
        known = ", ".join(e.name for e in self.endpoints)
        raise ControlError(f"no endpoint listens on {on} (endpoints: {known})")

    def target(self, on: Endpoint, to: str | None) -> Endpoint | Address | None:
        """Where a MOVING from ``on`` points: ``to`` (an endpoint of this process when one
        listens there, else the plain address), or by default the first ``--target``
        that is not ``on`` itself (``None`` when there is none).

        :raises ControlError: ``to`` does not parse.
        """
        if to is not None:
            address = parse_address(to)
            for e in self.endpoints:
                if e.listen == address:
                    return e
            return address
        for e in self.endpoints[1:]:
            if e != on:
                return e
        if on != self.endpoints[0]:
            return self.endpoints[0]
        return self.addresses[0] if self.addresses else None


def default_control_path() -> str:
    """The control socket used when ``--control`` is not given:
    ``$XDG_RUNTIME_DIR/trio-maint-simulate.sock``, else ``trio-maint-<uid>/simulate.sock``
    in the temporary directory (a directory only its user may enter; checked when bound)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return os.path.join(runtime, "trio-maint-simulate.sock")
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return os.path.join(tempfile.gettempdir(), f"trio-maint-{uid}", "simulate.sock")


# ------------------------------------------------------------------ commands


@attrs.frozen
class Inject:
    """Send one notification from endpoint ``on`` to its connections with notifications
    on (the ``kind`` is one of :data:`INJECTIONS`). ``to`` and ``time`` apply to MOVING
    (``time`` also to MIGRATING and FAILING_OVER), ``shard_ids`` to the others;
    ``remember`` replays it to connections that opt in later (MOVING, MIGRATING,
    FAILING_OVER)."""

    kind: str
    on: str | None = None
    to: str | None = None
    time: int | None = None
    seq: int | None = None
    shard_ids: str = "1"
    remember: bool = False


@attrs.frozen
class RunScenario:
    """Run a built-in scenario (one of :data:`SCENARIOS`) on endpoint ``on``; ``wait``:
    reply when it is over instead of when it starts. ``time`` is MOVING's (default 15),
    ``grace`` the extra seconds before old connections close (moving, maintenance),
    ``lead``/``work`` the notice and the work of migration/failover, ``compress`` divides
    every delay (scenarios other than migrate)."""

    name: str
    on: str | None = None
    to: str | None = None
    time: int = 15
    grace: float = 2.0
    lead: float = 2.0
    work: float = 1.0
    compress: float = 1.0
    wait: bool = False


@attrs.frozen
class Status:
    """Report the endpoints, their connections and the running scenario."""


Command: TypeAlias = Inject | RunScenario | Status


def _get(req: Mapping[str, Any], key: str, kind: type | tuple[type, ...], default: Any) -> Any:
    value = req.get(key, default)
    if value is default:
        return value
    if isinstance(value, bool) and kind is not bool:
        raise ControlError(f"{key!r} must be {_kind_name(kind)}, got {value!r}")
    if not isinstance(value, kind):
        raise ControlError(f"{key!r} must be {_kind_name(kind)}, got {value!r}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(
        {"str": "text", "int": "an integer", "float": "a number"}.get(k.__name__, k.__name__)
        for k in kinds
    )


def _seconds(req: Mapping[str, Any], key: str, default: float, *, positive: bool) -> float:
    value = float(_get(req, key, (int, float), default))
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ControlError(f"{key!r} must be {'> 0' if positive else '>= 0'}, got {value!r}")
    return value


def _whole_seconds(req: Mapping[str, Any], key: str, default: int | None) -> int | None:
    value = _get(req, key, int, default)
    if value is not None and value < 0:
        raise ControlError(f"{key!r} must be >= 0, got {value!r}")
    return value  # type: ignore[no-any-return]


def decode_request(line: bytes | str) -> Command:
    """One control line as a command.

    :raises ControlError: not JSON, not an object, an unknown ``op`` or a bad field.
    """
    try:
        req = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        raise ControlError("a control request is one JSON object per line") from None
    if not isinstance(req, dict):
        raise ControlError("a control request is one JSON object per line")
    op = req.get("op")
    on = _get(req, "on", str, None)
    to = _get(req, "to", str, None)
    if op == "status":
        return Status()
    if op in INJECTIONS:
        if to is not None and op != "moving":
            raise ControlError(f"'to' applies to moving only, not {op}")
        default_time = {"moving": 15, "migrating": 2, "failing-over": 2}.get(op)
        time = _whole_seconds(req, "time", default_time)
        if time is not None and default_time is None:
            raise ControlError(f"'time' does not apply to {op}")
        seq = _get(req, "seq", int, None)
        if seq is not None and seq < 0:
            raise ControlError(f"'seq' must be >= 0, got {seq!r}")
        return Inject(
            kind=op,
            on=on,
            to=to,
            time=time,
            seq=seq,
            shard_ids=_get(req, "shard_ids", str, "1"),
            remember=_get(req, "remember", bool, False),
        )
    if op == "scenario":
        name = req.get("name")
        if name not in SCENARIOS:
            raise ControlError(f"unknown scenario {name!r}: expected one of {', '.join(SCENARIOS)}")
        time = _whole_seconds(req, "time", 15)
        if time is None or time < 1:
            raise ControlError("'time' must be at least 1")
        return RunScenario(
            name=name,
            on=on,
            to=to,
            time=time,
            grace=_seconds(req, "grace", 2.0, positive=False),
            lead=_seconds(req, "lead", 2.0, positive=False),
            work=_seconds(req, "work", 1.0, positive=False),
            compress=_seconds(req, "compress", 1.0, positive=True),
            wait=_get(req, "wait", bool, False),
        )
    raise ControlError(
        f"unknown op {op!r}: expected status, scenario or one of {', '.join(INJECTIONS)}"
    )


def request_from_args(ctl: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """The request for ``trio-maint simulate ctl <ctl> ...``: ``args`` are the parsed
    options (``None`` = not given, left out so the simulator's defaults apply)."""
    req: dict[str, Any] = {"op": ctl}
    for key in (
        "name",
        "on",
        "to",
        "time",
        "seq",
        "shard_ids",
        "remember",
        "grace",
        "lead",
        "work",
        "compress",
        "wait",
    ):
        value = args.get(key)
        if value is not None and value is not False:
            req[key] = value
    return req


def encode(obj: Mapping[str, Any]) -> bytes:
    """One control line: compact JSON and ``\\n``."""
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def decode_reply(line: bytes) -> dict[str, Any]:
    """A reply line as a dict.

    :raises ControlError: not a JSON object with ``ok``.
    """
    try:
        reply = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        reply = None
    if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
        raise ControlError("the simulator sent a reply that is not a control reply")
    return reply


def describe_target(target: Endpoint | Address, upstream: str | None = None) -> str:
    """How a MOVING target is shown; ``upstream``: where the endpoint forwards now, when
    that is no longer its ``--upstream`` (after a migrate or a MOVING)."""
    if isinstance(target, Endpoint):
        return f"{target.name} (endpoint -> {upstream or target.upstream.shown})"
    return format_address(target)


def wire_name(kind: str) -> str:
    """The notification's name on the wire for an :data:`INJECTIONS` kind
    (``failing-over`` -> ``FAILING_OVER``)."""
    return kind.upper().replace("-", "_")
