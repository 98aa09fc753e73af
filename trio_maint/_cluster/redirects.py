"""What the cluster client needs to know about commands and cluster replies (no I/O): which
commands may read from a replica, which error replies are redirections or retryable
conditions, where a ``MOVED``/``ASK`` points, and the backoff between retries."""

from __future__ import annotations

from typing import Any, Final

from .._sansio.endpoint import format_host_port, split_host_port
from .._sansio.errors import (
    AskError,
    ClusterDownError,
    LoadingError,
    MovedError,
    ReadOnlyError,
    RedisError,
    TryAgainError,
)
from .._sansio.slots import NodeInfo

__all__ = ["READ_COMMANDS", "REDIRECT_KINDS", "backoff", "command_name", "redirect_target"]

#: Read-only commands that may go to a replica with ``read_from_replicas``.
READ_COMMANDS: Final = frozenset(
    [
        "GET",
        "MGET",
        "EXISTS",
        "STRLEN",
        "GETRANGE",
        "TYPE",
        "TTL",
        "PTTL",
        "HGET",
        "HMGET",
        "HGETALL",
        "HEXISTS",
        "HKEYS",
        "HVALS",
        "HLEN",
        "HSTRLEN",
        "LRANGE",
        "LLEN",
        "LINDEX",
        "LPOS",
        "SMEMBERS",
        "SISMEMBER",
        "SMISMEMBER",
        "SCARD",
        "SRANDMEMBER",
        "SINTER",
        "SUNION",
        "SDIFF",
        "ZSCORE",
        "ZMSCORE",
        "ZCARD",
        "ZCOUNT",
        "ZRANK",
        "ZREVRANK",
        "ZRANGE",
        "ZREVRANGE",
        "ZRANGEBYSCORE",
        "ZREVRANGEBYSCORE",
        "ZLEXCOUNT",
        "XLEN",
        "XRANGE",
        "XREVRANGE",
        "GETBIT",
        "BITCOUNT",
        "BITPOS",
        "PFCOUNT",
        "GEOPOS",
        "GEODIST",
        "GEOHASH",
    ]
)
#: Keyless commands run on every master; their replies are combined.

#: The error replies the cluster client handles, by the name it counts them under.
REDIRECT_KINDS: Final[dict[type[RedisError], str]] = {
    MovedError: "moved",
    AskError: "ask",
    TryAgainError: "tryagain",
    ClusterDownError: "clusterdown",
    ReadOnlyError: "readonly",
    LoadingError: "loading",
}

_BACKOFF_START: Final = 0.01
_BACKOFF_MAX: Final = 0.25


def command_name(arg: Any) -> str:
    """A command name (``str`` or ``bytes``) in upper case."""
    if isinstance(arg, bytes):
        return arg.decode("ascii", "replace").upper()
    return str(arg).upper()


def redirect_target(error: RedisError) -> tuple[int, NodeInfo]:
    """``(slot, node)`` of a ``MOVED slot host:port`` / ``ASK slot host:port`` reply."""
    parts = str(error).split()
    if len(parts) < 3:
        raise error
    host, port = split_host_port(parts[2], require_port=True)
    return int(parts[1]), NodeInfo(format_host_port(host, port), host, port)


def backoff(attempt: int) -> float:
    """Seconds to wait before retry number ``attempt`` (from 0): 10 ms doubling, at most 250 ms."""
    return float(min(_BACKOFF_MAX, _BACKOFF_START * (2**attempt)))
