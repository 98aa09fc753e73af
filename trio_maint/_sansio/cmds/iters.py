"""The ``*scan_iter`` helpers of the client (not commands, so not generated): async
iterators over ``HSCAN``, ``SSCAN`` and ``ZSCAN`` cursor by cursor, as redis-py's."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from .base import ClientBase
from .types import EncodableT, KeyT

__all__ = ["ScanIters"]


class ScanIters(ClientBase):
    """``hscan_iter``, ``sscan_iter`` and ``zscan_iter`` (clients only)."""

    hscan: Callable[..., Awaitable[tuple[int, Any]]]
    sscan: Callable[..., Awaitable[tuple[int, list[Any]]]]
    zscan: Callable[..., Awaitable[tuple[int, list[Any]]]]

    async def hscan_iter(
        self,
        name: KeyT,
        match: EncodableT | None = None,
        count: int | None = None,
        no_values: bool = False,
    ) -> AsyncIterator[Any]:
        """Every field of the hash ``name`` (``HSCAN``): ``(field, value)`` pairs, or the
        fields with ``no_values``. A field may come more than once if the hash changes."""
        cursor = 0
        while True:
            cursor, data = await self.hscan(name, cursor, match, count, no_values)
            if isinstance(data, dict):
                for item in data.items():
                    yield item
            else:
                for item in data:
                    yield item
            if cursor == 0:
                return

    async def sscan_iter(
        self, name: KeyT, match: EncodableT | None = None, count: int | None = None
    ) -> AsyncIterator[Any]:
        """Every member of the set ``name`` (``SSCAN``)."""
        cursor = 0
        while True:
            cursor, data = await self.sscan(name, cursor, match, count)
            for item in data:
                yield item
            if cursor == 0:
                return

    async def zscan_iter(
        self,
        name: KeyT,
        match: EncodableT | None = None,
        count: int | None = None,
        score_cast_func: Callable[[Any], Any] = float,
    ) -> AsyncIterator[Any]:
        """Every ``(member, score)`` of the sorted set ``name`` (``ZSCAN``)."""
        cursor = 0
        while True:
            cursor, data = await self.zscan(name, cursor, match, count, score_cast_func)
            for item in data:
                yield item
            if cursor == 0:
                return
