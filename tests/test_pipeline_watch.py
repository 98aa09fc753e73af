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


async def test_awaiting_a_pipeline_with_nothing_to_run_is_a_type_error(
    r: trio_maint.Redis,
) -> None:
    async with r.pipeline() as pipe:
        pipe.get("test:watch:d")  # queued: not watching
        with pytest.raises(TypeError, match="execute"):
            await pipe
        assert len(pipe) == 1
