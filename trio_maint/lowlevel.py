"""Advanced names of trio_maint: the pieces under the client, for code that builds on them
(a custom pool hook, a connection driven by hand, a handoff manager of its own, a parser
benchmark). Most programs need only :mod:`trio_maint`.

* connections and the pool: :class:`Connection`, :class:`ReplyTimer`,
  :class:`ConnectionPool`, :class:`PoolHook`, :class:`Disposition`, :class:`PoolStats`;
* handoffs: :class:`HandoffManager`, :class:`HandoffStats`;
* circuit breakers: :class:`CircuitBreaker`, :class:`BreakerRegistry`,
  :class:`BreakerState`, :class:`BreakerStats`;
* relaxed timeouts: :class:`RelaxedTimeouts`, :class:`RelaxationState`;
* notification parsing: :func:`parse_notification`, :class:`Malformed`, :class:`SlotMove`;
* RESP: :class:`RespParser`, :func:`encode_command`.
"""

from ._maint.jobs import HandoffStats
from ._maint.workers import HandoffManager
from ._net.connection import Connection
from ._net.pool import ConnectionPool, Disposition, PoolHook, PoolStats
from ._net.timer import ReplyTimer
from ._sansio.breaker import BreakerRegistry, BreakerState, BreakerStats, CircuitBreaker
from ._sansio.notifications import Malformed, SlotMove, parse_notification
from ._sansio.resp import RespParser, encode_command
from ._sansio.timeouts import RelaxationState, RelaxedTimeouts

__all__ = [
    "BreakerRegistry",
    "BreakerState",
    "BreakerStats",
    "CircuitBreaker",
    "Connection",
    "ConnectionPool",
    "Disposition",
    "HandoffManager",
    "HandoffStats",
    "Malformed",
    "PoolHook",
    "PoolStats",
    "RelaxationState",
    "RelaxedTimeouts",
    "ReplyTimer",
    "RespParser",
    "SlotMove",
    "encode_command",
    "parse_notification",
]
