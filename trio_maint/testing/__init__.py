"""trio_maint.testing: real redis-server processes and a maintenance simulator, for
trio_maint's own tests and for users rehearsing maintenance in theirs."""

from __future__ import annotations

from ._server import (
    RedisServer as RedisServer,
    RedisServerNotFoundError as RedisServerNotFoundError,
    find_redis_server as find_redis_server,
    free_port as free_port,
)
