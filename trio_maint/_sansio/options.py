"""Client options and Redis URL parsing (sans-IO: no Trio imports).

URLs are parsed as redis-py parses them: ``redis://[[user]:password@]host[:port][/db]``,
``rediss://`` for TLS, and ``unix:///path/to/socket?db=N``, with query parameters for
timeouts, the pool and reply decoding.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from ssl import SSLContext, create_default_context
from typing import Any, SupportsFloat, SupportsIndex
from urllib.parse import parse_qs, unquote, urlsplit

import attrs

from .cache_config import CacheConfig
from .config import MAX_SECONDS, MaintConfig
from .endpoint import format_host_port
from .errors import InvalidClientNameError
from .limits import (
    DEFAULT_MAX_AGGREGATE_LEN,
    DEFAULT_MAX_BULK_LEN,
    FrameLimits,
    check_cap,
    check_optional_cap,
)
from .redact import REDACTED, redact_url

__all__ = ["ClientOptions", "parse_url"]


def _check_timeout(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, float):
        raise TypeError(
            f"{attribute.name} must be a number of seconds or None, got {type(value).__name__}"
        )
    if not (0 < value <= MAX_SECONDS):  # also NaN and infinities
        raise ValueError(
            f"{attribute.name} must be a number of seconds in (0, {MAX_SECONDS:g}], or None "
            f"for no timeout; got {value!r}"
        )


def _check_text(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    """``username``, ``password``, ``client_name``: ``str`` or ``None``, sendable as UTF-8
    (the message never shows the value)."""
    if value is None:
        return
    if not isinstance(value, str):
        raise TypeError(f"{attribute.name} must be a str or None, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeError:
        raise ValueError(
            f"{attribute.name} cannot be encoded as UTF-8 (it holds a lone surrogate)"
        ) from None


def _check_client_name(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    _check_text(instance, attribute, value)
    # Redis refuses names with spaces, newlines or anything outside '!'..'~' (CLIENT
    # SETNAME, HELLO SETNAME): say so here, not as a refused handshake.
    if value and not all("!" <= c <= "~" for c in value):
        raise InvalidClientNameError(
            "client_name may only hold printable ASCII characters without spaces "
            "('!' to '~'): Redis refuses spaces, newlines and other characters in it"
        )


def _check_non_negative(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value!r}")


def _check_maintenance(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not isinstance(value, MaintConfig):
        raise TypeError(f"maintenance must be a MaintConfig or None, got {type(value).__name__}")


def _check_cache(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not isinstance(value, CacheConfig):
        raise TypeError(f"cache must be a CacheConfig or None, got {type(value).__name__}")


def _optional_float(value: str | SupportsFloat | SupportsIndex | None) -> Any:
    # What does not convert is left as it is, for the validator to name the field.
    if value is None or isinstance(value, bool):
        return value
    try:
        return float(value)
    except OverflowError:  # an int beyond float's range: refused as infinite
        return float("inf")
    except (TypeError, ValueError):
        return value


def _password_repr(value: str | None) -> str:
    return "None" if value is None else repr(REDACTED)


@attrs.frozen(kw_only=True)
class ClientOptions:
    """Everything :func:`trio_maint.open_redis` needs to reach a server and size its pool.

    Build one directly or with :meth:`from_url`. Invalid values raise ``ValueError`` (a
    wrong type ``TypeError``) naming the field, at construction; no message shows the
    password, and neither does the repr (``password='***'``).

    Attributes (times are seconds as ``float`` in (0, 10^7], about 116 days; ``None``
    means "no timeout"; NaN, infinities, 0 and negative values are refused):

    * ``host`` (``str``, default ``"localhost"``), ``port`` (``int``, default 6379), or
      ``unix_path`` (``str``) for a Unix socket (``host``/``port`` are then ignored).
    * ``db`` (``int``, default 0): selected with ``SELECT`` in the handshake when not 0.
    * ``username`` / ``password`` (``str | None``): sent with ``HELLO 3 AUTH``.
    * ``client_name`` (``str | None``): sent with ``HELLO 3 SETNAME``; printable ASCII
      without spaces (``'!'`` to ``'~'``), as Redis requires (else
      :class:`~trio_maint.InvalidClientNameError`, a ``DataError`` and a ``ValueError``,
      raised here rather than as a refused handshake).
    * ``ssl`` (``bool``): TLS (``rediss://``); ``ssl_context`` (:class:`ssl.SSLContext`,
      default :func:`ssl.create_default_context`); ``ssl_server_hostname`` (``str | None``,
      default ``host``).
    * ``connect_timeout`` (default 5.0): dialing plus the handshake.
    * ``socket_timeout`` (default 5.0): each write, and the wait for each reply.
    * ``decode_responses`` (``bool``, default False): replies as ``str`` (UTF-8) rather than
      ``bytes``.
    * ``pool_size`` (``int``, default 10): most connections kept, idle plus in use.
    * ``max_active_conns`` (``int``, default 0 = no cap): hard cap on every open connection,
      including ones being handed off.
    * ``min_idle_conns`` (``int``, default 0): idle connections kept open ahead of need.
    * ``conn_max_idle_time`` (default 300.0 seconds, ``None`` = forever): an idle connection
      older than this is closed instead of reused.
    * ``pool_timeout`` (default 5.0): longest wait for a free connection, then
      :class:`~trio_maint.PoolTimeoutError`.
    * ``maintenance`` (:class:`~trio_maint.MaintConfig` or ``None`` for the defaults):
      maintenance-notification handling, see docs/maintenance.md.
    * ``max_bulk_len`` (``int`` bytes, default 512 MiB, as Redis's ``proto-max-bulk-len``):
      a bulk string declared longer fails its command with
      :class:`~trio_maint.ProtocolError` and the connection is discarded.
    * ``max_aggregate_len`` (``int``, default 2**24): the most elements an aggregate reply
      may declare (for a map, entries), and the most one reply's aggregates may declare
      ahead of the bytes received (hiredis allocates them at once); past it, as above.
    * ``max_reply_bytes`` (``int`` bytes or ``None``, the default): an optional cap on
      one reply's size on the wire; set, every received byte's framing is followed in
      Python (CPU on replies of many small values). See docs/robustness.md.
    * ``cache`` (:class:`~trio_maint.CacheConfig` or ``None``, the default: off):
      client-side caching, see docs/caching.md (over TLS too).
    * ``auto_pipeline`` (``bool``, default False): commands that several tasks send at
      once are written together as one pipeline per batch (data commands only: nothing
      blocking or connection-scoped), see docs/performance.md. A lone task's command
      goes out at once, as without it. A command waits for a batch at most
      ``pool_timeout`` seconds (then ``PoolTimeoutError``, unsent), as for a pool
      connection; once written, ``socket_timeout`` bounds its reply. Standalone clients
      only (the cluster client refuses it).
    """

    host: str = "localhost"
    port: int = attrs.field(default=6379, converter=int)
    unix_path: str | None = None
    db: int = attrs.field(default=0, converter=int, validator=_check_non_negative)
    username: str | None = attrs.field(default=None, validator=_check_text)
    password: str | None = attrs.field(default=None, repr=_password_repr, validator=_check_text)
    client_name: str | None = attrs.field(default=None, validator=_check_client_name)
    ssl: bool = False
    ssl_context: SSLContext | None = None
    ssl_server_hostname: str | None = None
    connect_timeout: float | None = attrs.field(
        default=5.0, converter=_optional_float, validator=_check_timeout
    )
    socket_timeout: float | None = attrs.field(
        default=5.0, converter=_optional_float, validator=_check_timeout
    )
    decode_responses: bool = False
    pool_size: int = attrs.field(default=10, converter=int)
    max_active_conns: int = attrs.field(default=0, converter=int, validator=_check_non_negative)
    min_idle_conns: int = attrs.field(default=0, converter=int, validator=_check_non_negative)
    conn_max_idle_time: float | None = attrs.field(
        default=300.0, converter=_optional_float, validator=_check_timeout
    )
    pool_timeout: float | None = attrs.field(
        default=5.0, converter=_optional_float, validator=_check_timeout
    )
    maintenance: MaintConfig | None = attrs.field(default=None, validator=_check_maintenance)
    max_bulk_len: int = attrs.field(default=DEFAULT_MAX_BULK_LEN, validator=check_cap)
    max_aggregate_len: int = attrs.field(default=DEFAULT_MAX_AGGREGATE_LEN, validator=check_cap)
    max_reply_bytes: int | None = attrs.field(default=None, validator=check_optional_cap)
    cache: CacheConfig | None = attrs.field(default=None, validator=_check_cache)
    auto_pipeline: bool = False

    @pool_size.validator
    def _check_pool_size(self, attribute: attrs.Attribute[int], value: int) -> None:
        if value < 1:
            raise ValueError(f"pool_size must be >= 1, got {value!r}")

    def __attrs_post_init__(self) -> None:
        if not (0 <= self.port <= 65535):
            raise ValueError(f"port must be in 0..65535, got {self.port!r}")
        if self.max_active_conns and self.max_active_conns < self.min_idle_conns:
            raise ValueError("max_active_conns must be >= min_idle_conns")
        if self.min_idle_conns > self.pool_size:
            raise ValueError("min_idle_conns must be <= pool_size")
        if self.unix_path is not None and self.ssl:
            raise ValueError("ssl cannot be used with a Unix socket")

    @property
    def frame_limits(self) -> FrameLimits:
        """The parser's caps (``max_bulk_len``, ``max_aggregate_len``, ``max_reply_bytes``)
        as a :class:`~trio_maint.lowlevel.FrameLimits`."""
        return FrameLimits(self.max_bulk_len, self.max_aggregate_len, self.max_reply_bytes)

    @property
    def encoding(self) -> str | None:
        """``"utf-8"`` when ``decode_responses`` is set, else ``None``."""
        return "utf-8" if self.decode_responses else None

    @property
    def address_text(self) -> str:
        """The configured address as text: ``host:port`` or the socket path."""
        if self.unix_path is not None:
            return self.unix_path
        return format_host_port(self.host, self.port)

    def make_ssl_context(self) -> SSLContext:
        """The TLS context to use: ``ssl_context`` or a default verifying context."""
        return self.ssl_context if self.ssl_context is not None else create_default_context()

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> ClientOptions:
        """Parse a Redis URL into options; keyword ``overrides`` win over the URL.

        :raises ValueError: unknown scheme, unknown query parameter, or a bad value.
        """
        return cls(**{**parse_url(url), **overrides})


def _to_bool(value: str) -> bool:
    low = value.lower()
    if low in ("1", "true", "yes", "on", "y"):
        return True
    if low in ("0", "false", "no", "off", "n"):
        return False
    raise ValueError(f"not a boolean: {value!r}")


def _to_timeout(value: str) -> float | None:
    if value.lower() in ("", "none", "null"):
        return None
    return float(value)


def _to_optional_int(value: str) -> int | None:
    if value.lower() in ("", "none", "null"):
        return None
    return int(value)


_QUERY_PARAMS: Mapping[str, Callable[[str], Any]] = {
    "db": int,
    "socket_timeout": _to_timeout,
    "socket_connect_timeout": _to_timeout,
    "connect_timeout": _to_timeout,
    "pool_timeout": _to_timeout,
    "conn_max_idle_time": _to_timeout,
    "pool_size": int,
    "max_connections": int,
    "max_active_conns": int,
    "min_idle_conns": int,
    "decode_responses": _to_bool,
    "client_name": str,
    "username": str,
    "password": str,
    "ssl_server_hostname": str,
    "max_bulk_len": int,
    "max_aggregate_len": int,
    "max_reply_bytes": _to_optional_int,
    "auto_pipeline": _to_bool,
}

_ALIASES = {"socket_connect_timeout": "connect_timeout", "max_connections": "pool_size"}


def parse_url(url: str) -> dict[str, Any]:
    """Parse a Redis URL into keyword arguments for :class:`ClientOptions`.

    Accepts ``redis://[[user]:password@]host[:port][/db]``, ``rediss://`` (TLS) and
    ``unix://[[user]:password@]/path?db=N``; user and password are percent-decoded.

    Error messages show the URL as :func:`~trio_maint.redact_url` prints it, never the
    password.

    :raises TypeError: ``url`` is not a ``str``.
    :raises ValueError: unknown scheme or query parameter, a value that does not parse, or
        an ``@`` after the host part (a password holding an unencoded ``/``, ``?`` or
        ``#``).
    """
    if not isinstance(url, str):
        raise TypeError(f"a Redis URL must be a str, got {type(url).__name__}")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("redis", "rediss", "unix"):
        raise ValueError(
            f"invalid Redis URL scheme {parts.scheme!r} in {redact_url(url)}: expected "
            "redis://, rediss:// or unix://"
        )
    after_host = parts.path + parts.query + parts.fragment
    if parts.netloc and "@" not in parts.netloc and "@" in after_host:
        # ``redis://user:pa/ss@host``: the host part ends at the '/', so the password
        # would be taken for a host and port, and its rest for a path or query.
        raise ValueError(
            f"cannot parse the Redis URL {redact_url(url)}: it has an '@' after its host "
            "part; percent-encode '/', '?', '#' and '@' in the user name and password "
            "(%2F, %3F, %23, %40), and '@' in query values (%40)"
        )
    kwargs: dict[str, Any] = {}
    for name, values in parse_qs(parts.query, keep_blank_values=True).items():
        conv = _QUERY_PARAMS.get(name)
        if conv is None:
            raise ValueError(
                f"unknown Redis URL query parameter {name!r} in {redact_url(url)}; known: "
                f"{', '.join(_QUERY_PARAMS)}"
            )
        try:
            kwargs[_ALIASES.get(name, name)] = conv(values[-1])
        except ValueError as exc:
            raise ValueError(f"invalid value for URL parameter {name!r}: {exc}") from None
    if parts.username:
        kwargs["username"] = unquote(parts.username)
    if parts.password:
        kwargs["password"] = unquote(parts.password)
    if scheme == "unix":
        if not parts.path:
            raise ValueError(f"unix:// URL without a socket path: {redact_url(url)}")
        kwargs["unix_path"] = unquote(parts.path)
        return kwargs
    if parts.hostname:
        kwargs["host"] = unquote(parts.hostname)
    try:
        port = parts.port
    except ValueError:
        # urllib's message quotes the port text, which may be a password ("redis://u:pw").
        raise ValueError(
            f"invalid port in Redis URL {redact_url(url)}: expected a number in 0..65535"
        ) from None
    if port is not None:
        kwargs["port"] = port
    path = parts.path.lstrip("/")
    if path and "db" not in kwargs:
        try:
            kwargs["db"] = int(path)
        except ValueError:
            raise ValueError(f"invalid database number {path!r} in Redis URL") from None
    if scheme == "rediss":
        kwargs["ssl"] = True
    return kwargs
