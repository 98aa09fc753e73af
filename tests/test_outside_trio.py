"""The public entry points outside a Trio run."""

from __future__ import annotations

import asyncio

import pytest

import trio_maint


def test_outside_trio_is_a_clear_runtime_error(redis_url: str) -> None:
    async def main() -> None:
        async with trio_maint.open_redis(redis_url):
            pass  # pragma: no cover

    with pytest.raises(RuntimeError, match="inside a Trio run"):
        asyncio.run(main())
