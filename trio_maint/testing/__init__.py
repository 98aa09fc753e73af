"""trio_maint.testing: real redis-server processes and a maintenance simulator, for
trio_maint's own tests and for users rehearsing maintenance in theirs (docs/testing.md)."""

from ._cluster import LocalCluster
from ._cluster_node import ClusterError, ClusterNode, cluster_free_port
from ._frames import (
    Simple,
    encode_value,
    failed_over_frame,
    failing_over_frame,
    format_endpoint,
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
from ._scenario import (
    MigrationResult,
    Scenario,
    Step,
    StepRecord,
    failover_scenario,
    maintenance_scenario,
    migrate,
    migrate_scenario,
    migrating_scenario,
    moving_scenario,
    slot_migration_scenario,
)
from ._server import RedisServer, RedisServerNotFoundError, find_redis_server, free_port
from ._simulator import (
    ENDPOINT_TYPES,
    ConnectionInfo,
    ConnectionSelector,
    MaintenanceSimulator,
)

__all__ = [
    "ENDPOINT_TYPES",
    "ClusterError",
    "ClusterNode",
    "ConnectionInfo",
    "ConnectionSelector",
    "GoldenPayload",
    "LocalCluster",
    "MaintenanceSimulator",
    "MigrationResult",
    "RawConnection",
    "RedisServer",
    "RedisServerNotFoundError",
    "RespScanError",
    "RespScanner",
    "Scenario",
    "Simple",
    "Step",
    "StepRecord",
    "cluster_free_port",
    "connect_raw",
    "encode_value",
    "failed_over_frame",
    "failing_over_frame",
    "failover_scenario",
    "find_redis_server",
    "format_endpoint",
    "free_port",
    "golden_payload",
    "golden_payloads",
    "maintenance_scenario",
    "migrate",
    "migrate_scenario",
    "migrated_frame",
    "migrating_frame",
    "migrating_scenario",
    "moving_frame",
    "moving_scenario",
    "push_frame",
    "slot_migration_scenario",
    "smigrated_frame",
    "smigrating_frame",
]
