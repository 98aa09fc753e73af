"""trio_maint: a Trio-native Redis client (RESP3 over Trio, parsed by hiredis) with
hitless maintenance handling.

This module is the user API, flat; :mod:`trio_maint.lowlevel` holds the advanced names
(connections, the pool, the HandoffManager, circuit breakers, the parsers) and
:mod:`trio_maint.testing` the test tools. The implementation is layered, each layer
importing only the ones below it (docs/architecture.md)::

    _cli        the trio-maint command (uses the public API and testing)
    _cluster    RedisCluster, open_redis_cluster, ClusterPipeline, ClusterPubSub
    _client     Redis, open_redis, Pipeline, PubSub
    _maint      MaintenanceHandler, HandoffManager, events, hooks
    _net        Connection, ReplyTimer, ConnectionPool (everything that awaits I/O)
    _sansio     errors, RESP, commands and replies, options, notifications, endpoints,
                config, circuit breakers, relaxed timeouts, slots (no Trio)

``testing`` uses ``_sansio`` and the public API; ``testing`` and ``_cli`` also use
``_net.groups``, the one helper that unwraps exception groups.
"""

from . import lowlevel as lowlevel
from ._client.cache import ClientCache
from ._client.pipeline import Pipeline
from ._client.pubsub import Message, PubSub
from ._client.redis import Redis, open_redis
from ._client.script import Script
from ._client.streams import StreamConsumer
from ._cluster.client import RedisCluster, open_redis_cluster
from ._cluster.pipeline import ClusterPipeline
from ._cluster.pubsub import ClusterPubSub
from ._maint.events import (
    CircuitBreakerChanged,
    EventsDropped,
    EventStream,
    HandoffFailed,
    HandoffQueued,
    HandoffSucceeded,
    MaintenanceDisabled,
    MaintenanceEvent,
    MaintenanceState,
    MalformedNotification,
    MovingRefused,
    MovingStarted,
    NotificationReceived,
)
from ._maint.handler import MaintenanceHandler
from ._maint.hooks import LoggingHook, MetricsHook, NotificationHook
from ._sansio.cache import CacheStats
from ._sansio.cache_config import CACHEABLE_COMMANDS, CacheConfig
from ._sansio.cmds.types import EncodableT, KeyT, Value
from ._sansio.config import MaintConfig, MaintMode
from ._sansio.endpoint import Endpoint, EndpointType
from ._sansio.errors import (
    AskError,
    AuthenticationError,
    AuthorizationError,
    BusyError,
    CircuitBreakerOpenError,
    ClusterDownError,
    ConnectionBusyError,
    ConnectionClosedError,
    ConnectionError,
    CrossSlotError,
    DataError,
    ExecAbortError,
    HandoffDialError,
    HandoffError,
    HandoffQueueFullError,
    HandoffRetriesExhaustedError,
    InvalidClientNameError,
    LoadingError,
    MaintenanceNotSupportedError,
    MovedError,
    NoPermissionError,
    NoScriptError,
    OutOfMemoryError,
    PoolTimeoutError,
    ProtocolError,
    ReadOnlyError,
    RedisError,
    ResponseError,
    TimeoutError,
    TryAgainError,
    WatchError,
    WrongTypeError,
)
from ._sansio.notifications import (
    FailedOver,
    FailingOver,
    Migrated,
    Migrating,
    Moving,
    Notification,
    SMigrated,
    SMigrating,
)
from ._sansio.options import ClientOptions, parse_url
from ._sansio.redact import redact_text, redact_url
from ._sansio.replies import parse_info
from ._sansio.slots import NodeInfo, SlotMap, key_slot
from ._sansio.streams import StreamEntry, StreamId, XAutoClaimReply, XReadReply
from ._sansio.version import __version__

__all__ = [
    "CACHEABLE_COMMANDS",
    "AskError",
    "AuthenticationError",
    "AuthorizationError",
    "BusyError",
    "CacheConfig",
    "CacheStats",
    "CircuitBreakerChanged",
    "CircuitBreakerOpenError",
    "ClientCache",
    "ClientOptions",
    "ClusterDownError",
    "ClusterPipeline",
    "ClusterPubSub",
    "ConnectionBusyError",
    "ConnectionClosedError",
    "ConnectionError",
    "CrossSlotError",
    "DataError",
    "EncodableT",
    "Endpoint",
    "EndpointType",
    "EventStream",
    "EventsDropped",
    "ExecAbortError",
    "FailedOver",
    "FailingOver",
    "HandoffDialError",
    "HandoffError",
    "HandoffFailed",
    "HandoffQueueFullError",
    "HandoffQueued",
    "HandoffRetriesExhaustedError",
    "HandoffSucceeded",
    "InvalidClientNameError",
    "KeyT",
    "LoadingError",
    "LoggingHook",
    "MaintConfig",
    "MaintMode",
    "MaintenanceDisabled",
    "MaintenanceEvent",
    "MaintenanceHandler",
    "MaintenanceNotSupportedError",
    "MaintenanceState",
    "MalformedNotification",
    "Message",
    "MetricsHook",
    "Migrated",
    "Migrating",
    "MovedError",
    "Moving",
    "MovingRefused",
    "MovingStarted",
    "NoPermissionError",
    "NoScriptError",
    "NodeInfo",
    "Notification",
    "NotificationHook",
    "NotificationReceived",
    "OutOfMemoryError",
    "Pipeline",
    "PoolTimeoutError",
    "ProtocolError",
    "PubSub",
    "ReadOnlyError",
    "Redis",
    "RedisCluster",
    "RedisError",
    "ResponseError",
    "SMigrated",
    "SMigrating",
    "Script",
    "SlotMap",
    "StreamConsumer",
    "StreamEntry",
    "StreamId",
    "TimeoutError",
    "TryAgainError",
    "Value",
    "WatchError",
    "WrongTypeError",
    "XAutoClaimReply",
    "XReadReply",
    "__version__",
    "key_slot",
    "open_redis",
    "open_redis_cluster",
    "parse_info",
    "parse_url",
    "redact_text",
    "redact_url",
]
