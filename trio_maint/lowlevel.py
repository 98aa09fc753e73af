"""Advanced names of trio_maint: the pieces under the client, for code that builds on them
(a custom pool hook, a connection driven by hand, a handoff manager of its own, a parser
benchmark). Most programs need only :mod:`trio_maint`.

* connections and the pool: :class:`Connection`, :class:`ReplyTimer`,
  :class:`ConnectionPool`, :class:`PoolHook`, :class:`Disposition`, :class:`PoolStats`;
* the maintenance decisions: :class:`MaintenanceMachine` (sans-IO) and its values
  (:mod:`trio_maint._sansio.maint_types`: :class:`Phase`, :class:`Outcome`, the actions);
* handoffs: :class:`HandoffManager`, :func:`open_handoff_manager`, :class:`HandoffStats`;
* circuit breakers: :class:`CircuitBreaker`, :class:`BreakerRegistry`,
  :class:`BreakerState`, :class:`BreakerStats`;
* relaxed timeouts: :class:`RelaxedTimeouts`, :class:`RelaxationState`;
* notification parsing: :func:`parse_notification`, :class:`Malformed`, :class:`SlotMove`;
* RESP: :class:`RespParser`, :func:`encode_command`.
"""

from ._maint.link import PubSubLink
from ._maint.workers import HandoffManager, HandoffStats, open_handoff_manager
from ._net.connection import Connection
from ._net.pool import ConnectionPool, Disposition, PoolHook, PoolStats
from ._net.timer import ReplyTimer
from ._sansio.breaker import BreakerRegistry, BreakerState, BreakerStats, CircuitBreaker
from ._sansio.limits import FrameLimits
from ._sansio.maint import (
    HANDOFF_BURST,
    HANDOFF_PACING,
    MAX_BREAKERS,
    RETRY_BASE_DELAY,
    MaintenanceMachine,
)
from ._sansio.maint_types import (
    Action,
    CancelHandoff,
    ConnKind,
    ConnRecord,
    Discard,
    Emit,
    GiveBack,
    MachineState,
    Mark,
    MovingSeen,
    Outcome,
    Phase,
    ReadonlyVerdict,
    Relax,
    Restore,
    ScheduleTimer,
    SetDialTarget,
    StartHandoff,
    TakeIdle,
    Verdict,
)
from ._sansio.notifications import Malformed, SlotMove, parse_notification
from ._sansio.resp import RespParser, encode_command
from ._sansio.timeouts import RelaxationState, RelaxedTimeouts
from ._sansio.trust import TargetPolicy

__all__ = [
    "HANDOFF_BURST",
    "HANDOFF_PACING",
    "MAX_BREAKERS",
    "RETRY_BASE_DELAY",
    "Action",
    "BreakerRegistry",
    "BreakerState",
    "BreakerStats",
    "CancelHandoff",
    "CircuitBreaker",
    "ConnKind",
    "ConnRecord",
    "Connection",
    "ConnectionPool",
    "Discard",
    "Disposition",
    "Emit",
    "FrameLimits",
    "GiveBack",
    "HandoffManager",
    "HandoffStats",
    "MachineState",
    "MaintenanceMachine",
    "Malformed",
    "Mark",
    "MovingSeen",
    "Outcome",
    "Phase",
    "PoolHook",
    "PoolStats",
    "PubSubLink",
    "ReadonlyVerdict",
    "Relax",
    "RelaxationState",
    "RelaxedTimeouts",
    "ReplyTimer",
    "RespParser",
    "Restore",
    "ScheduleTimer",
    "SetDialTarget",
    "SlotMove",
    "StartHandoff",
    "TakeIdle",
    "TargetPolicy",
    "Verdict",
    "encode_command",
    "open_handoff_manager",
    "parse_notification",
]
