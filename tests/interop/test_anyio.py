"""trio_maint inside an anyio program (anyio on the trio backend)."""

from __future__ import annotations

import anyio
import pytest

import trio_maint

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


async def test_works_under_anyio_trio_backend(redis_url: str) -> None:
    async with trio_maint.open_redis(redis_url) as r:
        results: list[bool] = []
        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(lambda: _ping(r, results))
        assert results == [True] * 5
        with anyio.move_on_after(0.1) as scope:
            await r.execute_command("BLPOP", "anyio-never", "0")
        assert scope.cancelled_caught
        with pytest.raises(TimeoutError):
            await r.execute_command("BLPOP", "anyio-never", "1", timeout=0.05)
        async with r.pubsub() as ps:
            await ps.subscribe("anyio")
            assert (await ps.get_message(timeout=1)) is not None


async def _ping(r: trio_maint.Redis, out: list[bool]) -> None:
    out.append(await r.ping())


def test_anyio_run_entry_point(redis_url: str) -> None:
    async def main() -> bytes:
        async with trio_maint.open_redis(redis_url) as r:
            await r.set("anyio-key", "v")
            value = await r.get("anyio-key")
            assert isinstance(value, bytes)
            return value

    assert anyio.run(main, backend="trio") == b"v"
