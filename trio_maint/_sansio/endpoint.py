"""Endpoints (``host:port``) and the endpoint types of the maintenance handshake (sans-IO).

This module is the one place that reads and writes ``host:port`` text:
:func:`split_host_port` / :meth:`Endpoint.parse` parse it and :func:`format_host_port` /
``str(Endpoint)`` write it (an IPv6 host in brackets, ``[::1]:6379``). Connections,
options, the cluster client, the slot map, the command line and the testing tools all go
through them.

The endpoint types are the values of ``CLIENT MAINT_NOTIFICATIONS ON moving-endpoint-type
<type>``; they tell the server which form of address to put into MOVING notifications
(see docs/maintenance.md). :func:`detect_endpoint_type` picks one from the configured
address without any DNS lookup.
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Iterable
from typing import Final

import attrs

__all__ = [
    "DEFAULT_PORT",
    "Endpoint",
    "EndpointType",
    "detect_endpoint_type",
    "format_host_port",
    "is_internal_address",
    "split_host_port",
]

#: The port assumed when an address has none (Redis's default port).
DEFAULT_PORT: Final = 6379


class EndpointType(enum.StrEnum):
    """The kind of address the server should send in MOVING notifications.

    The values are the exact wire strings of ``moving-endpoint-type`` (lower case). ``AUTO``
    never reaches the wire: it is replaced by :func:`detect_endpoint_type`. ``NONE`` asks
    the server for a null endpoint, meaning "reconnect to the address you already use".
    """

    AUTO = "auto"
    INTERNAL_IP = "internal-ip"
    INTERNAL_FQDN = "internal-fqdn"
    EXTERNAL_IP = "external-ip"
    EXTERNAL_FQDN = "external-fqdn"
    NONE = "none"


def _check_port(port: int) -> int:
    if isinstance(port, bool) or not isinstance(port, int):
        raise TypeError(f"port must be an int, not {type(port).__name__}")
    if not 0 < port < 65536:
        raise ValueError(f"port must be in 1..65535, got {port}")
    return port


def _check_host(host: str) -> str:
    if not isinstance(host, str):
        raise TypeError(f"host must be a str, not {type(host).__name__}")
    if not host:
        raise ValueError("host must not be empty")
    return host


def format_host_port(host: str, port: int) -> str:
    """``host:port`` text; a host holding ``:`` (an IPv6 literal) is put in brackets,
    ``[::1]:6379``. The inverse of :func:`split_host_port`.

    :param host: the host (``str``, IPv6 without brackets); not validated.
    :param port: the port (``int``); not validated.
    """
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def split_host_port(
    address: str, default_port: int = DEFAULT_PORT, *, require_port: bool = False
) -> tuple[str, int]:
    """Split ``address`` into ``(host, port)``.

    Accepted forms: ``host:port``, ``host`` (``default_port`` is used), ``[v6]:port``,
    ``[v6]`` and a bare IPv6 literal such as ``::1`` or ``fe80::1``. A bare string with
    several colons is always taken as a whole IPv6 host, never as ``v6:port`` — write
    ``[::1]:6379`` to give a port. The host may come back empty (``":6379"``).

    With ``require_port`` the text must end with a port and its *last* ``:`` separates it,
    so a bare IPv6 host with a port (``::1:7000``) is read as ``("::1", 7000)``: the form
    Redis writes in cluster replies (``MOVED``/``ASK``, node names) and ``SMIGRATED``
    entries. Brackets are accepted and removed there too.

    :param address: the text to split (``str``).
    :param default_port: the port used when ``address`` has none (``int``, default 6379).
    :param require_port: ``address`` must carry a port (``bool``, default ``False``).
    :returns: ``(host, port)``, the host without brackets.
    :raises ValueError: the port is not a decimal integer in 1..65535, a bracket is
        unbalanced, a bare multi-colon string is not an IPv6 literal, or (with
        ``require_port``) there is no port.
    """
    if require_port and not address.startswith("["):
        host, sep, port_text = address.rpartition(":")
        if not sep:
            raise ValueError(f"expected 'host:port', got {address!r}")
        return host.strip("[]"), _parse_port(port_text, address)
    if address.startswith("["):
        close = address.find("]")
        if close < 0:
            raise ValueError(f"unbalanced '[' in address {address!r}")
        host = address[1:close]
        rest = address[close + 1 :]
        if not rest:
            if require_port:
                raise ValueError(f"expected 'host:port', got {address!r}")
            return host, default_port
        if not rest.startswith(":"):
            raise ValueError(f"unexpected text after ']' in address {address!r}")
        return host, _parse_port(rest[1:], address)
    colons = address.count(":")
    if colons == 0:
        return address, default_port
    if colons == 1:
        host, _, port_text = address.partition(":")
        return host, _parse_port(port_text, address)
    try:
        ipaddress.IPv6Address(address.split("%", 1)[0])
    except ValueError:
        raise ValueError(
            f"address {address!r} has several ':' but is not an IPv6 literal; "
            "write IPv6 addresses with a port as '[addr]:port'"
        ) from None
    return address, default_port


def _parse_port(text: str, address: str) -> int:
    if not text.isdigit() or not text.isascii():
        raise ValueError(f"invalid port {text!r} in address {address!r}")
    port = int(text)
    if not 0 < port < 65536:
        raise ValueError(f"port {port} out of range 1..65535 in address {address!r}")
    return port


@attrs.frozen
class Endpoint:
    """A TCP endpoint, ``host`` (name or IP literal, ``str``, IPv6 without brackets) and
    ``port`` (``int``, 1..65535).

    Used for the targets of MOVING notifications and as the key of circuit breakers.
    ``str(endpoint)`` gives ``host:port`` (``[v6]:port`` for IPv6).

    :raises TypeError: ``host`` is not a ``str`` or ``port`` not an ``int``.
    :raises ValueError: ``host`` is empty or ``port`` out of range.
    """

    host: str = attrs.field(converter=_check_host)
    port: int = attrs.field(default=DEFAULT_PORT, converter=_check_port)

    @classmethod
    def parse(cls, address: str, default_port: int = DEFAULT_PORT) -> Endpoint:
        """Parse ``host:port`` text (forms as :func:`split_host_port`).

        A MOVING endpoint without a port means port 6379, as Redis's MOVING notification
        (see docs/maintenance.md).

        :raises ValueError: the text is not a valid address or its host is empty.
        """
        host, port = split_host_port(address, default_port)
        return cls(host, port)

    def __str__(self) -> str:
        return format_host_port(self.host, self.port)


_INTERNAL_NETWORKS: Final = tuple(
    ipaddress.ip_network(net)
    for net in (
        "10.0.0.0/8",  # RFC 1918
        "172.16.0.0/12",  # RFC 1918
        "192.168.0.0/16",  # RFC 1918
        "127.0.0.0/8",  # loopback
        "169.254.0.0/16",  # link-local
        "100.64.0.0/10",  # RFC 6598 carrier-grade NAT
        "fc00::/7",  # RFC 4193 unique local
        "::1/128",  # loopback
        "fe80::/10",  # link-local
    )
)


def is_internal_address(address: str) -> bool:
    """True when ``address`` is an IP literal in a private, loopback, link-local or CGNAT
    range: 10/8, 172.16/12, 192.168/16, 127/8, 169.254/16, 100.64/10, fc00::/7, ::1,
    fe80::/10 (IPv4-mapped IPv6 addresses are judged by their IPv4 part).

    Anything that is not an IP literal (a host name, empty text) is not internal. Brackets
    and an IPv6 zone (``%eth0``) are ignored. No DNS lookup is made.
    """
    text = address.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    text = text.split("%", 1)[0]
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip.version == net.version and ip in net for net in _INTERNAL_NETWORKS)


def _is_local_name(host: str) -> bool:
    name = host.rstrip(".").lower()
    return name == "localhost" or name.endswith(".localhost")


def detect_endpoint_type(
    host: str, tls: bool, *, resolved: Iterable[str] | None = None
) -> EndpointType:
    """Choose the ``moving-endpoint-type`` to request for a client of ``host``.

    Rules, as Redis's endpoint auto-detection (see docs/maintenance.md):

    * "internal" when ``host`` is empty, ``localhost`` (or ``*.localhost``), or an IP
      literal accepted by :func:`is_internal_address`;
    * another host name is internal only if ``resolved`` (addresses the caller already
      looked up) is non-empty and every address in it is internal; otherwise external.
      This function never resolves names itself;
    * with ``tls`` the result is an FQDN type (the client needs a name for certificate
      checks), otherwise an IP type.

    :param host: the configured host (``str``), IPv6 with or without brackets.
    :param tls: whether the client connects with TLS (``bool``).
    :param resolved: optional addresses ``host`` resolves to (``str`` IP literals).
    :returns: one of ``INTERNAL_IP``, ``INTERNAL_FQDN``, ``EXTERNAL_IP``, ``EXTERNAL_FQDN``.
    """
    stripped = host.strip()
    if not stripped or _is_local_name(stripped) or is_internal_address(stripped):
        internal = True
    else:
        try:
            ipaddress.ip_address(stripped.strip("[]").split("%", 1)[0])
        except ValueError:
            addresses = list(resolved) if resolved is not None else []
            internal = bool(addresses) and all(is_internal_address(a) for a in addresses)
        else:
            internal = False
    if internal:
        return EndpointType.INTERNAL_FQDN if tls else EndpointType.INTERNAL_IP
    return EndpointType.EXTERNAL_FQDN if tls else EndpointType.EXTERNAL_IP
