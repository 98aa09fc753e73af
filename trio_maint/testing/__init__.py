"""trio_maint.testing: real redis-server processes and a maintenance simulator, for
trio_maint's own tests and for users rehearsing maintenance in theirs (docs/testing.md)."""

from __future__ import annotations

from ._frames import (
    Simple,
    encode_value,
    failed_over_frame,
    failing_over_frame,
    migrated_frame,
    migrating_frame,
    moving_frame,
    push_frame,
    smigrated_frame,
    smigrating_frame,
)
from ._golden import GoldenPayload, golden_payload, golden_payloads
from ._raw import RawConnection, connect_raw
from ._scanner import RespScanError, RespScanner
from ._server import RedisServer, RedisServerNotFoundError, find_redis_server, free_port
from ._simulator import (
    ENDPOINT_TYPES,
    ConnectionInfo,
    MaintenanceSimulator,
    format_endpoint,
)

__all__ = [
    "ENDPOINT_TYPES",
    "ConnectionInfo",
    "GoldenPayload",
    "MaintenanceSimulator",
    "RawConnection",
    "RedisServer",
    "RedisServerNotFoundError",
    "RespScanError",
    "RespScanner",
    "Simple",
    "connect_raw",
    "encode_value",
    "failed_over_frame",
    "failing_over_frame",
    "find_redis_server",
    "format_endpoint",
    "free_port",
    "golden_payload",
    "golden_payloads",
    "migrated_frame",
    "migrating_frame",
    "moving_frame",
    "push_frame",
    "smigrated_frame",
    "smigrating_frame",
]
