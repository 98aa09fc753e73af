"""Client-side caching in the cluster client (docs/caching.md): each node's client has a
cache of its own, with a tracking connection to that node; a cacheable read goes to the
cache of its slot's master.

Read-your-own-writes: a write of this client invalidates its keys in the cache of its
slot's master before it is sent, and again once its reply came, in the cache of the
slot's master then (a ``MOVED`` may have changed it) and in the first one; a write whose
keys cannot be known (:func:`~trio_maint._sansio.cache_writes.own_write`) flushes every
node's cache at both moments. Commands run on every master (``FLUSHDB``, ``FUNCTION
LOAD``, ...) go through each node's client, whose cache does the same for itself."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal

from .._client.cache import BYPASS, ClientCache
from .._sansio.cache_deadline import Resend
from .._sansio.cache_writes import OwnWrite, own_write
from .._sansio.resp import CommandArg
from .._sansio.unset import Unset

if TYPE_CHECKING:
    from .client import RedisCluster

__all__ = [
    "BYPASS",
    "ClusterWrite",
    "cached_command",
    "cached_read",
    "write_begin",
    "write_end",
]


async def cached_command(
    cluster: RedisCluster,
    args: tuple[CommandArg, ...],
    slot: int | None,
    timeout: float | Literal[Unset.UNSET] | None,
) -> Any:
    """The cluster client's path of one command (routed by ``slot``) when caching is on:
    a read served by (or read through) the cache of ``slot``'s master, else routed as
    usual (a read the tracking connection could not answer with what is left of
    ``timeout``); a write invalidates what it may change in the caches before it is sent
    and when its reply came (the module doc)."""
    reply = await cached_read(cluster, args, slot, timeout)
    if reply.__class__ is Resend:
        return await cluster._execute(args, slot, reply.timeout)
    if reply is not BYPASS:
        return reply
    write = write_begin(cluster, [(args, slot)])
    if write is None:
        return await cluster._execute(args, slot, timeout)
    try:
        return await cluster._execute(args, slot, timeout)
    finally:
        write_end(cluster, write)


async def cached_read(
    cluster: RedisCluster,
    args: tuple[CommandArg, ...],
    slot: int | None,
    timeout: float | Literal[Unset.UNSET] | None,
) -> Any:
    """``args``' reply from the cache of ``slot``'s master (or read through its tracking
    connection and stored), or :data:`BYPASS`: not cacheable, the master's client not
    running yet; or a :class:`~trio_maint._sansio.cache_deadline.Resend`: a reply the
    cache does not take (an error such as ``MOVED``, the tracking connection lost: the
    caller then routes the command as usual, with what is left of ``timeout``).

    :raises TimeoutError: ``timeout`` passed first."""
    cache = _master_cache(cluster, slot)
    if cache is None:
        return BYPASS
    return await cache.command(args, timeout, slot)


def _master_cache(cluster: RedisCluster, slot: int | None) -> ClientCache | None:
    """The cache of ``slot``'s master when the map knows it and its client runs."""
    node = cluster._master_now(slot)
    client = None if node is None else node.client
    return None if client is None else client.cache


class ClusterWrite:
    """This client's writes in flight (:func:`write_begin`): what each may change, its
    slot, and the cache it was invalidated in when sent (``None``: every node's)."""

    __slots__ = ("writes",)

    def __init__(self) -> None:
        self.writes: list[tuple[OwnWrite, int | None, ClientCache | None]] = []


def _invalidate(cluster: RedisCluster, write: OwnWrite, cache: ClientCache | None) -> None:
    if write.keys is None:
        for client in cluster.nodes.values():
            if client.cache is not None:
                client.cache.invalidate_write(write)
    elif cache is not None:
        cache.invalidate_write(write)


def write_begin(
    cluster: RedisCluster, commands: Iterable[tuple[tuple[CommandArg, ...], int | None]]
) -> ClusterWrite | None:
    """Before ``commands`` (each with its slot) are sent: invalidate what they may change
    (see the module doc). :returns: what to give :func:`write_end` once their replies
    came (or they failed), or ``None``: nothing to do."""
    token: ClusterWrite | None = None
    for args, slot in commands:
        write = own_write(args)
        if write is None:
            continue
        cache = None if write.keys is None else _master_cache(cluster, slot)
        _invalidate(cluster, write, cache)
        if token is None:
            token = ClusterWrite()
        token.writes.append((write, slot, cache))
    return token


def write_end(cluster: RedisCluster, token: ClusterWrite) -> None:
    """The replies of :func:`write_begin`'s commands came (or they failed): invalidate
    again, in the cache of each slot's master now and in the one of the send."""
    for write, slot, first in token.writes:
        cache = None if write.keys is None else _master_cache(cluster, slot)
        _invalidate(cluster, write, cache)
        if first is not None and first is not cache:
            first.invalidate_write(write)
