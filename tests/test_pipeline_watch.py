"""redis-py's immediate mode: after ``await pipe.watch(k)`` and before ``pipe.multi()``,
a command runs at once when awaited (issue 14)."""

from __future__ import annotations

import pytest

import trio_maint
from trio_maint import RedisError

pytestmark = pytest.mark.trio


async def test_a_read_after_watch_runs_at_once_and_the_transaction_follows(
    r: trio_maint.Redis,
) -> None:
    await r.set("test:watch:a", "1")
    async with r.pipeline() as pipe:
        await pipe.watch("test:watch:a")
        value = await pipe.get("test:watch:a")
        assert value == b"1"
        assert await pipe.execute_command("GET", "test:watch:a") == b"1"
        pipe.multi()
        pipe.set("test:watch:a", int(value) + 1).get("test:watch:a")
        assert await pipe.execute() == [True, b"2"]
    await r.delete("test:watch:a")


async def test_a_command_left_unawaited_while_watching_is_refused(r: trio_maint.Redis) -> None:
    async with r.pipeline() as pipe:
        await pipe.watch("test:watch:b")
        pipe.get("test:watch:b")  # not awaited: redis-py would never run it either
        with pytest.raises(RedisError, match="never awaited"):
            pipe.multi()
        pipe.get("test:watch:b")
        with pytest.raises(RedisError, match="await it"):
            pipe.get("test:watch:c")


async def test_awaiting_a_queued_command_gives_the_pipeline(r: trio_maint.Redis) -> None:
    # As redis-py's asyncio pipeline: `await pipe.set(k, v)` queues and returns the pipe.
    async with r.pipeline(transaction=False) as pipe:
        same = await pipe.set("test:watch:d", "1")
        assert same is pipe
        await pipe.get("test:watch:d")
        assert len(pipe) == 2
        assert await pipe.execute() == [True, b"1"]
    await r.delete("test:watch:d")
