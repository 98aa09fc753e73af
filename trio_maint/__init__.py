"""trio_maint: a Trio-native Redis client (RESP3 over Trio, parsed by hiredis) with
hitless maintenance handling.

Layers, each importing only from those below it::

    testing, _cli
    _client (open_redis, Redis), _pipeline, _pubsub, _commands
    _maintenance (push handler, hooks, events), _handoff (HandoffManager)
    _pool
    _connection (streams, handshake, deadlines, push dispatch)
    sans-IO: _resp, _notifications, _timeouts, _config, _breaker, _errors
"""

from __future__ import annotations

from ._errors import (
    AskError as AskError,
)
from ._errors import (
    AuthenticationError as AuthenticationError,
)
from ._errors import (
    AuthorizationError as AuthorizationError,
)
from ._errors import (
    BusyError as BusyError,
)
from ._errors import (
    ClusterDownError as ClusterDownError,
)
from ._errors import (
    ConnectionBusyError as ConnectionBusyError,
)
from ._errors import (
    ConnectionClosedError as ConnectionClosedError,
)
from ._errors import (
    ConnectionError as ConnectionError,
)
from ._errors import (
    CrossSlotError as CrossSlotError,
)
from ._errors import (
    DataError as DataError,
)
from ._errors import (
    ExecAbortError as ExecAbortError,
)
from ._errors import (
    HandoffError as HandoffError,
)
from ._errors import (
    HandoffQueueFullError as HandoffQueueFullError,
)
from ._errors import (
    LoadingError as LoadingError,
)
from ._errors import (
    MaintenanceNotSupportedError as MaintenanceNotSupportedError,
)
from ._errors import (
    MovedError as MovedError,
)
from ._errors import (
    NoPermissionError as NoPermissionError,
)
from ._errors import (
    NoScriptError as NoScriptError,
)
from ._errors import (
    OutOfMemoryError as OutOfMemoryError,
)
from ._errors import (
    PoolTimeoutError as PoolTimeoutError,
)
from ._errors import (
    ProtocolError as ProtocolError,
)
from ._errors import (
    ReadOnlyError as ReadOnlyError,
)
from ._errors import (
    RedisError as RedisError,
)
from ._errors import (
    ResponseError as ResponseError,
)
from ._errors import (
    TimeoutError as TimeoutError,
)
from ._errors import (
    TryAgainError as TryAgainError,
)
from ._errors import (
    WatchError as WatchError,
)
from ._errors import (
    WrongTypeError as WrongTypeError,
)

__version__ = "0.1.0"

from ._client import Redis as Redis
from ._client import open_redis as open_redis
from ._cluster import ClusterPipeline as ClusterPipeline
from ._cluster import ClusterPubSub as ClusterPubSub
from ._cluster import RedisCluster as RedisCluster
from ._cluster import open_redis_cluster as open_redis_cluster
from ._commands import parse_info as parse_info
from ._connection import Connection as Connection
from ._options import ClientOptions as ClientOptions
from ._options import parse_url as parse_url
from ._pipeline import Pipeline as Pipeline
from ._pool import (
    ConnectionPool as ConnectionPool,
)
from ._pool import (
    Disposition as Disposition,
)
from ._pool import (
    PoolHook as PoolHook,
)
from ._pool import (
    PoolStats as PoolStats,
)
from ._pubsub import Message as Message
from ._pubsub import PubSub as PubSub
from ._slots import NodeInfo as NodeInfo
from ._slots import SlotMap as SlotMap
from ._slots import key_slot as key_slot

# isort: split
# Maintenance notifications (docs/maintenance.md).
from ._breaker import BreakerRegistry as BreakerRegistry
from ._breaker import BreakerState as BreakerState
from ._breaker import BreakerStats as BreakerStats
from ._breaker import CircuitBreaker as CircuitBreaker
from ._config import MaintConfig as MaintConfig
from ._config import MaintMode as MaintMode
from ._endpoint import Endpoint as Endpoint
from ._endpoint import EndpointType as EndpointType
from ._errors import CircuitBreakerOpenError as CircuitBreakerOpenError
from ._errors import HandoffDialError as HandoffDialError
from ._errors import HandoffRetriesExhaustedError as HandoffRetriesExhaustedError
from ._handoff import HandoffManager as HandoffManager
from ._handoff import HandoffStats as HandoffStats
from ._maintenance import EventsDropped as EventsDropped
from ._maintenance import EventStream as EventStream
from ._maintenance import HandoffFailed as HandoffFailed
from ._maintenance import HandoffQueued as HandoffQueued
from ._maintenance import HandoffSucceeded as HandoffSucceeded
from ._maintenance import Histogram as Histogram
from ._maintenance import LoggingHook as LoggingHook
from ._maintenance import MaintenanceDisabled as MaintenanceDisabled
from ._maintenance import MaintenanceEvent as MaintenanceEvent
from ._maintenance import MaintenanceHandler as MaintenanceHandler
from ._maintenance import MaintenanceState as MaintenanceState
from ._maintenance import MalformedNotification as MalformedNotification
from ._maintenance import MetricsHook as MetricsHook
from ._maintenance import MovingStarted as MovingStarted
from ._maintenance import NotificationHook as NotificationHook
from ._maintenance import NotificationReceived as NotificationReceived
from ._notifications import FailedOver as FailedOver
from ._notifications import FailingOver as FailingOver
from ._notifications import Malformed as Malformed
from ._notifications import Migrated as Migrated
from ._notifications import Migrating as Migrating
from ._notifications import Moving as Moving
from ._notifications import Notification as Notification
from ._notifications import SMigrated as SMigrated
from ._notifications import SMigrating as SMigrating
from ._notifications import parse_notification as parse_notification
from ._timeouts import RelaxedTimeouts as RelaxedTimeouts
