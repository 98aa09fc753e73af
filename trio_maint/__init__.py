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
    AuthenticationError as AuthenticationError,
    AuthorizationError as AuthorizationError,
    BusyError as BusyError,
    ClusterDownError as ClusterDownError,
    ConnectionBusyError as ConnectionBusyError,
    ConnectionClosedError as ConnectionClosedError,
    ConnectionError as ConnectionError,
    DataError as DataError,
    ExecAbortError as ExecAbortError,
    HandoffError as HandoffError,
    HandoffQueueFullError as HandoffQueueFullError,
    LoadingError as LoadingError,
    MaintenanceNotSupportedError as MaintenanceNotSupportedError,
    MovedError as MovedError,
    NoPermissionError as NoPermissionError,
    NoScriptError as NoScriptError,
    OutOfMemoryError as OutOfMemoryError,
    PoolTimeoutError as PoolTimeoutError,
    ProtocolError as ProtocolError,
    ReadOnlyError as ReadOnlyError,
    RedisError as RedisError,
    ResponseError as ResponseError,
    TimeoutError as TimeoutError,
    TryAgainError as TryAgainError,
    WatchError as WatchError,
    WrongTypeError as WrongTypeError,
)

__version__ = "0.1.0"

from ._client import Redis as Redis, open_redis as open_redis
from ._commands import parse_info as parse_info
from ._connection import Connection as Connection
from ._options import ClientOptions as ClientOptions, parse_url as parse_url
from ._pipeline import Pipeline as Pipeline
from ._pool import (
    ConnectionPool as ConnectionPool,
    Disposition as Disposition,
    PoolHook as PoolHook,
    PoolStats as PoolStats,
)
from ._pubsub import Message as Message, PubSub as PubSub
