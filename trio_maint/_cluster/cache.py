"""Client-side caching in the cluster client (docs/caching.md): each node's client has a
cache of its own, with a tracking connection to that node; a cacheable read goes to the
cache of its slot's master."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from .._client.cache import BYPASS
from .._sansio.resp import CommandArg
from .._sansio.unset import Unset

if TYPE_CHECKING:
    from .client import RedisCluster

__all__ = ["BYPASS", "cached_read"]


async def cached_read(
    cluster: RedisCluster,
    args: tuple[CommandArg, ...],
    slot: int | None,
    timeout: float | Literal[Unset.UNSET] | None,
) -> Any:
    """``args``' reply from the cache of ``slot``'s master (or read through its tracking
    connection and stored), or :data:`BYPASS`: not cacheable, the master's client not
    running yet, or a reply the cache does not take (an error such as ``MOVED``: the
    caller then routes the command as usual)."""
    if slot is None:
        return BYPASS
    node = cluster._master_now(slot)
    client = None if node is None else node.client
    cache = None if client is None else client.cache
    if cache is None:
        return BYPASS
    return await cache.command(args, timeout, slot)
