"""Which MOVING targets the client follows: :class:`TargetPolicy` (sans-IO).

A MOVING names the endpoint to reconnect to; a hostile server, or a man in the middle on
``redis://``, could name any host. By default a MOVING is followed only to an endpoint
consistent with the endpoint type the client opted in with (the ``moving-endpoint-type``
of the handshake):

* ``internal-ip``: an IP literal in a private, loopback, link-local or CGNAT range, of the
  same address family as the configured host when that host is an IP literal;
* ``external-ip``: an IP literal;
* ``internal-fqdn`` / ``external-fqdn``: a host name (not an IP literal);
* ``none``: nothing (the server was asked for null endpoints; an explicit one is refused).

The configured endpoint itself is always accepted. ``MaintConfig.trusted_targets``
widens this with an allow-list (exact host names, domain suffixes written with a leading
dot, IP networks or addresses), and ``MaintConfig.target_check`` with a callable. A
refused MOVING is handled as a null-endpoint MOVING to the configured address (see
docs/security.md).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable
from typing import Final

import attrs

from .endpoint import Endpoint, EndpointType, is_internal_address

__all__ = ["TargetPolicy", "parse_trusted"]

_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    text = host.strip("[]").split("%", 1)[0]
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


@attrs.frozen
class _Trusted:
    hosts: frozenset[str]
    suffixes: tuple[str, ...]
    networks: tuple[_Network, ...]


def parse_trusted(entries: Iterable[str]) -> _Trusted:
    """Split allow-list ``entries`` (``str``) into exact host names, domain suffixes
    (``".example.com"``: any name ending so) and IP networks (``"10.0.0.0/8"``, or one
    address). Names are compared case-insensitively, without a trailing dot.

    :raises ValueError: an entry is empty or a malformed network.
    """
    hosts: set[str] = set()
    suffixes: list[str] = []
    networks: list[_Network] = []
    for entry in entries:
        text = str(entry).strip().lower().rstrip(".")
        if not text:
            raise ValueError("trusted_targets: an entry is empty")
        if "/" in text or _ip(text) is not None:
            try:
                networks.append(ipaddress.ip_network(text.strip("[]"), strict=False))
            except ValueError as exc:
                raise ValueError(f"trusted_targets: {entry!r} is not a network: {exc}") from None
        elif text.startswith("."):
            suffixes.append(text)
        else:
            hosts.add(text)
    return _Trusted(frozenset(hosts), tuple(suffixes), tuple(networks))


@attrs.frozen
class TargetPolicy:
    """Decides whether a MOVING's endpoint may be followed (see the module docstring).

    :param endpoint_type: the ``moving-endpoint-type`` the client opted in with.
    :param configured: the configured :class:`~trio_maint.Endpoint`.
    :param trusted: allow-list entries (``tuple[str, ...]``), as ``parse_trusted`` reads.
    :param check: ``(Endpoint) -> bool`` or ``None``: ``True`` trusts the endpoint too.
    :raises ValueError: a malformed allow-list entry.
    """

    endpoint_type: EndpointType
    configured: Endpoint
    trusted: tuple[str, ...] = ()
    check: Callable[[Endpoint], bool] | None = None
    _lists: _Trusted = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_lists", parse_trusted(self.trusted))

    def explicitly_trusted(self, endpoint: Endpoint) -> bool:
        """Whether the user's allow-list or callable trusts ``endpoint`` (``bool``); such
        an endpoint's TLS certificate is checked against its own name rather than the
        configured one. An exception from the callable counts as ``False``."""
        name = endpoint.host.strip("[]").lower().rstrip(".")
        lists = self._lists
        if name in lists.hosts or any(name.endswith(s) for s in lists.suffixes):
            return True
        ip = _ip(endpoint.host)
        if ip is not None and any(ip.version == n.version and ip in n for n in lists.networks):
            return True
        if self.check is not None:
            try:
                return bool(self.check(endpoint))
            except Exception:
                return False
        return False

    def refusal(self, endpoint: Endpoint) -> str | None:
        """``None`` when a MOVING to ``endpoint`` may be followed, else why not (``str``,
        for logs and the ``MovingRefused`` event)."""
        if endpoint == self.configured or self.explicitly_trusted(endpoint):
            return None
        kind = self.endpoint_type
        ip = _ip(endpoint.host)
        if kind is EndpointType.INTERNAL_IP:
            if ip is None or not is_internal_address(str(ip)):
                return _WHY_INTERNAL
            family = _ip(self.configured.host)
            if family is not None and family.version != ip.version:
                return f"an IPv{ip.version} address where the client uses IPv{family.version}"
            return None
        if kind is EndpointType.EXTERNAL_IP:
            return None if ip is not None else "a host name where the client asked for an IP"
        if kind in (EndpointType.INTERNAL_FQDN, EndpointType.EXTERNAL_FQDN):
            return None if ip is None else "an IP address where the client asked for a name"
        if kind is EndpointType.NONE:
            return "an endpoint where the client asked for none (a null endpoint)"
        return "the endpoint type the client opted in with is not known"


_WHY_INTERNAL: Final = (
    "not a private or loopback IP address, as moving-endpoint-type internal-ip asks"
)
