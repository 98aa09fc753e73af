"""Shared fixtures: a real redis-server for the whole session (or $REDIS_URL)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest

import trio_maint
from trio_maint._sansio.loglimit import LOG_LIMITER
from trio_maint.testing import RedisServer


@pytest.fixture(autouse=True)
def _fresh_log_limiter() -> None:
    """Each test starts with the process-wide log limiter empty: a line of one kind that
    an earlier test logged does not hold back this test's first (test clocks restart)."""
    LOG_LIMITER.reset()


@pytest.fixture(scope="session")
def redis_server_process() -> Iterator[RedisServer | None]:
    """A real redis-server on a free loopback port (also on a Unix socket), started once
    per session with persistence off; ``None`` when $REDIS_URL names a server instead.
    A missing binary fails loudly (RedisServerNotFoundError names the Debian package)."""
    if os.environ.get("REDIS_URL"):
        yield None
        return
    with RedisServer(unix_socket=True, extra_args=("--enable-debug-command", "local")) as srv:
        yield srv


@pytest.fixture(scope="session")
def redis_url(redis_server_process: RedisServer | None) -> str:
    """URL of the session's server, on database 9 (tests flush it)."""
    if redis_server_process is None:
        return os.environ["REDIS_URL"]
    return redis_server_process.url + "/9"


@pytest.fixture
def unix_path(redis_server_process: RedisServer | None) -> str:
    """The session server's Unix socket path (skipped under $REDIS_URL)."""
    if redis_server_process is None or redis_server_process.unix_path is None:
        pytest.skip("Unix socket tests need the suite's own redis-server")
    return redis_server_process.unix_path


@pytest.fixture
async def r(redis_url: str) -> AsyncIterator[trio_maint.Redis]:
    """A client on the session's server, with its test database flushed first."""
    async with trio_maint.open_redis(redis_url) as client:
        await client.flushdb()
        yield client
