"""What a ``trio-maint demo`` run takes and gives: its settings (:class:`DemoConfig`, the
timeline's lengths), its outcome (:class:`DemoReport`, the ``--json`` document) and the live
numbers a view shows (:class:`Snapshot`, :class:`Observer`)."""

from __future__ import annotations

import math
from typing import Any, ClassVar, Final, Literal, Protocol

import attrs

from .cache_watch import cache_rows

__all__ = [
    "POST_HANDOFF_RELAXED",
    "SCENARIOS",
    "DemoConfig",
    "DemoError",
    "DemoReport",
    "Observer",
    "Snapshot",
    "errors_text",
    "latency_rows",
    "latency_summary",
    "ms",
    "percentile",
    "phase_summary",
    "stale_reads",
    "verdict_note",
]

#: The maintenance timelines ``--scenario`` accepts.
SCENARIOS: Final = ("moving", "failover", "none", "unreachable")

#: How ``moving`` and ``none`` move the data: ``stall`` (the demo's own sequence: B's
#: endpoint holds traffic until B is promoted, A is switched once no client command can
#: reach it) or ``migrate`` (:func:`trio_maint.testing.migrate`: A is switched first, then
#: MOVING is sent, so writes in flight meet ``READONLY``).
DataMove = Literal["stall", "migrate"]

ScenarioName = Literal["moving", "failover", "none", "unreachable"]

# The timeline at speed 1, in seconds, as measured on managed Redis (docs/testing.md).
BEFORE: Final = 4.0  # traffic before the first notification
LEAD: Final = 2.0  # MIGRATING / FAILING_OVER announce the work this long ahead
WORK: Final = 1.0  # the work itself
MOVING_TIME: Final = 15  # MOVING's ``time``
GRACE: Final = 2.0  # the old endpoint closes this long after ``time`` runs out
AFTER: Final = 4.0  # traffic after the window
FAILOVER_LATENCY: Final = 0.2  # seconds added to replies while a failover works
#: How long a connection handed off keeps relaxed timeouts at speed 1 (seconds):
#: ``MaintConfig.post_handoff_relaxed_duration``'s default, 2 x ``relaxed_timeout``. The
#: demo divides it by ``--speed`` like the rest of its timeline.
POST_HANDOFF_RELAXED: Final = 20.0


class DemoError(Exception):
    """A problem the user can fix (port in use, redis-server missing, bad option): the
    command line prints the message as one line."""


@attrs.frozen
class DemoConfig:
    """Settings of one demo run.

    :ivar tasks: concurrent workload tasks (``int`` >= 1).
    :ivar duration: total seconds of traffic (``float``), or ``None`` for the timeline's
        own length (traffic before, the window, traffic after; divided by ``speed``).
    :ivar pool_size: the client's pool size (``int`` >= 1).
    :ivar keys: size of the key space (``int`` >= ``tasks``).
    :ivar mix: relative weights of reads, writes and pipelines (``tuple[int, int, int]``).
    :ivar speed: the timeline is compressed by this factor (``float`` > 0).
    :ivar scenario: one of :data:`SCENARIOS`.
    :ivar port: port of endpoint A (``0`` = a free one).
    :ivar seed: seed of the workload's random choices (``None`` = random).
    :ivar data_move: see :data:`DataMove`.
    :ivar cache: the client caches its reads (``--cache``: ``CacheConfig()``) and the
        demo checks that no read was stale (``bool``).
    """

    tasks: int = 8
    duration: float | None = None
    pool_size: int = 4
    keys: int = 1000
    mix: tuple[int, int, int] = (60, 30, 10)
    speed: float = 1.0
    scenario: ScenarioName = "moving"
    port: int = 0
    seed: int | None = None
    data_move: DataMove = "stall"
    cache: bool = False

    def __attrs_post_init__(self) -> None:
        if self.tasks < 1:
            raise DemoError(f"--tasks must be >= 1, got {self.tasks}")
        if self.pool_size < 1:
            raise DemoError(f"--pool-size must be >= 1, got {self.pool_size}")
        if self.keys < self.tasks:
            raise DemoError(f"--keys must be >= --tasks ({self.tasks}), got {self.keys}")
        if len(self.mix) != 3 or min(self.mix) < 0 or sum(self.mix) <= 0:
            raise DemoError(f"--mix needs three weights >= 0, not all 0, got {self.mix}")
        if not (self.speed > 0 and math.isfinite(self.speed)):
            raise DemoError(f"--speed must be > 0, got {self.speed}")
        if self.scenario not in SCENARIOS:
            raise DemoError(f"--scenario must be one of {', '.join(SCENARIOS)}")
        if self.data_move not in ("stall", "migrate"):
            raise DemoError("--data-move must be stall or migrate")
        if not 0 <= self.port <= 65535:
            raise DemoError(f"--port must be in 0..65535, got {self.port}")
        if self.duration is not None and self.duration < self.window + 2 * self.min_phase:
            raise DemoError(
                f"--duration {self.duration:g} s is too short: the {self.scenario} window "
                f"takes {self.window:g} s at --speed {self.speed:g}, plus traffic before and "
                f"after (at least {self.min_phase:g} s each)"
            )

    @property
    def announced_time(self) -> int:
        """MOVING's ``time`` after compression (whole seconds, at least 1)."""
        return max(1, round(MOVING_TIME / self.speed))

    @property
    def announced_lead(self) -> int:
        """MIGRATING / FAILING_OVER's announced lead after compression (whole seconds)."""
        return max(1, round(LEAD / self.speed))

    @property
    def close_after(self) -> float:
        """Seconds from MOVING to the old endpoint closing its connections."""
        return self.announced_time + GRACE / self.speed

    @property
    def window(self) -> float:
        """Length of the maintenance window in seconds (after compression)."""
        pair = (LEAD + WORK) / self.speed
        if self.scenario == "failover":
            return pair
        return pair + self.close_after

    @property
    def min_phase(self) -> float:
        """The shortest traffic phase before or after the window (seconds)."""
        return min(BEFORE, AFTER) / self.speed / 4

    @property
    def phases(self) -> tuple[float, float]:
        """Seconds of traffic before and after the window."""
        if self.duration is None:
            return BEFORE / self.speed, AFTER / self.speed
        rest = (self.duration - self.window) / 2
        return rest, rest

    @property
    def length(self) -> float:
        """Seconds of traffic in all: before, the window, after (``float``)."""
        before, after = self.phases
        return before + self.window + after

    @property
    def post_handoff_relaxed(self) -> float:
        """``post_handoff_relaxed_duration`` the demo's client uses (seconds, ``float``):
        :data:`POST_HANDOFF_RELAXED` divided by ``speed``."""
        return POST_HANDOFF_RELAXED / self.speed

    @property
    def endpoint_type(self) -> str:
        """The ``moving-endpoint-type`` the demo's client asks for."""
        return "none" if self.scenario == "none" else "internal-ip"


# ------------------------------------------------------------------------------ report


def percentile(sorted_values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1, nearest rank) of sorted values; ``nan`` when empty."""
    if not sorted_values:
        return math.nan
    index = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[index]


def latency_summary(values: list[float]) -> dict[str, float | int]:
    """``{"count", "p50", "p99", "max"}`` of latencies in seconds (``nan`` when empty)."""
    ordered = sorted(values)
    return {
        "count": len(ordered),
        "p50": percentile(ordered, 0.50),
        "p99": percentile(ordered, 0.99),
        "max": ordered[-1] if ordered else math.nan,
    }


def phase_summary(
    ops: list[tuple[float, float]],
    failed_at: list[float],
    window: tuple[float, float],
    end: float,
) -> tuple[dict[str, dict[str, float | int]], list[dict[str, float]]]:
    """Latency per phase and the time series of a run.

    :param ops: ``(started, latency)`` of each command (seconds from the start).
    :param failed_at: when each failed command ended (seconds from the start).
    :param window: the maintenance window (start, end) in seconds.
    :param end: the end of traffic in seconds.
    :returns: ``({"before"|"during"|"after": latency_summary}, series)``, the series a
        list of ``{"t", "ops_per_second", "p99", "failed"}`` per bucket (at most 80
        buckets of 0.05 to 1 s, whole buckets only).
    """
    phases: dict[str, list[float]] = {"before": [], "during": [], "after": []}
    for started, seconds in ops:
        if started < window[0]:
            phases["before"].append(seconds)
        elif started < window[1]:
            phases["during"].append(seconds)
        else:
            phases["after"].append(seconds)
    latency = {name: latency_summary(values) for name, values in phases.items()}
    bucket = min(1.0, max(0.05, end / 80))
    count = max(1, int(end / bucket))
    per: list[list[float]] = [[] for _ in range(count)]
    fails = [0] * count
    for started, seconds in ops:
        if int(started / bucket) < count:
            per[int(started / bucket)].append(seconds)
    for t in failed_at:
        if int(t / bucket) < count:
            fails[int(t / bucket)] += 1
    series = [
        {
            "t": i * bucket,
            "ops_per_second": len(values) / bucket,
            "p99": percentile(sorted(values), 0.99),
            "failed": fails[i],
        }
        for i, values in enumerate(per)
    ]
    return latency, series


def ms(value: Any) -> str:
    """Seconds as milliseconds with two decimals (``-`` for none)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value * 1e3:,.2f} ms"


def latency_rows(latency: dict[str, dict[str, float | int]]) -> list[tuple[str, str]]:
    """One report row per phase of :func:`phase_summary`'s latency."""
    return [
        (
            f"latency {phase}",
            f"p50 {ms(lat['p50'])}, p99 {ms(lat['p99'])}, max {ms(lat['max'])} "
            f"({lat['count']:,} ops)",
        )
        for phase, lat in latency.items()
    ]


def stale_reads(cache: dict[str, Any] | None) -> int:
    """The stale reads of a report's ``cache`` document (0 without ``--cache``)."""
    return 0 if cache is None else int(cache["stale_reads"])


def verdict_note(cache: dict[str, Any] | None) -> str:
    """`` (N stale reads)`` after the verdict with ``--cache``, else ``""``."""
    if cache is None:
        return ""
    n = stale_reads(cache)
    return f" ({n:,} stale read{'' if n == 1 else 's'})"


def errors_text(errors: dict[str, int]) -> str:
    """``{"ConnectionError": 3}`` as ``ConnectionError: 3``."""
    return ", ".join(f"{name}: {count:,}" for name, count in errors.items())


@attrs.define
class DemoReport:
    """The outcome of :func:`run_demo`; :meth:`as_dict` is the ``--json`` document.

    Times are seconds (``float``) from the start of the workload; latencies are seconds.
    """

    config: DemoConfig
    endpoints: dict[str, str] = attrs.field(factory=dict)
    total_commands: int = 0
    failed_commands: int = 0
    errors: dict[str, int] = attrs.field(factory=dict)
    handoffs_completed: int = 0
    handoffs_failed: int = 0
    connections_moved: int = 0
    #: Connections told to move that A closed before their handoff (``--cache``: the
    #: cache's tracking connection, whose handoff waits for B; it reconnects): neither
    #: completed nor failed.
    closed_before_handoff: int = 0
    latency: dict[str, dict[str, float | int]] = attrs.field(factory=dict)
    window: tuple[float, float] = (math.nan, math.nan)
    duration: float = 0.0
    keys_checked: int = 0
    keys_missing: int = 0
    keys_stale: int = 0
    counters_checked: int = 0
    counters_short: int = 0
    checked_on: str = "B"
    timeline: list[tuple[float, str]] = attrs.field(factory=list)
    notifications: list[dict[str, Any]] = attrs.field(factory=list)
    series: list[dict[str, float]] = attrs.field(factory=list)
    breakers: list[dict[str, Any]] = attrs.field(factory=list)
    relaxed_peak: int = 0
    relaxed_at_end: int = 0
    #: ``--cache``: the caches' totals and the stale-read check
    #: (``cache_watch.CacheTotals.as_dict()`` and ``StaleReadCheck.as_dict()`` merged).
    cache: dict[str, Any] | None = None

    #: The first words of the report's verdict line.
    heading: ClassVar[str] = "trio-maint demo"

    @property
    def label(self) -> str:
        """What ran, for titles (``str``)."""
        return f"trio-maint demo ({self.config.scenario})"

    def rows(self) -> list[tuple[str, str]]:
        """The report as ``(label, text)`` rows (numbers with thousands separators)."""
        d = self.as_dict()
        cfg = self.config
        moved = d["handoffs"]["connections_moved"]
        closed = self.closed_before_handoff
        told = f"{moved:,} connections told to move"
        if closed:
            told += (
                f"; {closed:,} of them closed by A before its handoff: the cache's tracking "
                "connection, which reconnected"
            )
        rows = [
            ("scenario", f"{cfg.scenario} (speed {cfg.speed:g}, {self.duration:.1f} s)"),
            ("commands", f"{self.total_commands:,} total, {self.failed_commands:,} failed"),
            (
                "handoffs",
                f"{self.handoffs_completed:,} completed, {self.handoffs_failed:,} failed ({told})",
            ),
        ]
        relaxed = f"peak {self.relaxed_peak:,} connections, {self.relaxed_at_end:,} at the end"
        if self.handoffs_completed:
            relaxed += (
                f"; a connection handed off keeps relaxed timeouts {cfg.post_handoff_relaxed:g} s "
                "after its handoff (MaintConfig.post_handoff_relaxed_duration, by default "
                f"2 x relaxed_timeout = {POST_HANDOFF_RELAXED:g} s; divided by --speed here)"
            )
        rows.append(("relaxed timeouts", relaxed))
        rows += latency_rows(self.latency)
        rows.append(
            (
                "data check",
                f"{'intact' if self.data_intact else 'WRITES LOST'}: {self.keys_checked:,} keys "
                f"and {self.counters_checked:,} counters read back from {self.checked_on} "
                f"({self.keys_missing:,} missing, {self.keys_stale:,} stale, "
                f"{self.counters_short:,} counters short)",
            )
        )
        for b in self.breakers:
            if b["opened"]:
                rows.append(
                    (
                        "circuit breaker",
                        f"{b['endpoint']}: {b['state']} (opened {b['opened']:,} time(s)); "
                        "traffic stayed where it was",
                    )
                )
        if self.cache is not None:
            rows += cache_rows(self.cache)
        if self.errors:
            rows.append(("errors", errors_text(self.errors)))
        return rows

    @property
    def data_intact(self) -> bool:
        """Every acknowledged write was found on the checked server."""
        return self.keys_missing == 0 and self.keys_stale == 0 and self.counters_short == 0

    @property
    def ok(self) -> bool:
        """No command failed, no acknowledged write was lost, and (``--cache``) no read
        was stale."""
        return self.failed_commands == 0 and self.data_intact and stale_reads(self.cache) == 0

    @property
    def verdict_note(self) -> str:
        """What follows ``PASS``/``FAIL``: the stale reads with ``--cache``, else ``""``."""
        return verdict_note(self.cache)

    def as_dict(self) -> dict[str, Any]:
        """The report as plain JSON-compatible values (``nan`` becomes ``None``)."""

        def clean(value: Any) -> Any:
            if isinstance(value, float) and not math.isfinite(value):
                return None
            if isinstance(value, dict):
                return {k: clean(v) for k, v in value.items()}
            if isinstance(value, list | tuple):
                return [clean(v) for v in value]
            return value

        cfg = self.config
        document: dict[str, Any] = clean(
            {
                "ok": self.ok,
                "scenario": cfg.scenario,
                "data_move": cfg.data_move,
                "speed": cfg.speed,
                "tasks": cfg.tasks,
                "pool_size": cfg.pool_size,
                "keys": cfg.keys,
                "mix": {"reads": cfg.mix[0], "writes": cfg.mix[1], "pipelines": cfg.mix[2]},
                "duration": self.duration,
                "endpoints": self.endpoints,
                "commands": {
                    "total": self.total_commands,
                    "failed": self.failed_commands,
                    "errors": self.errors,
                },
                "handoffs": {
                    "completed": self.handoffs_completed,
                    "failed": self.handoffs_failed,
                    "connections_moved": self.connections_moved,
                    "closed_before_handoff": self.closed_before_handoff,
                },
                "latency": self.latency,
                "relaxed": {
                    "peak": self.relaxed_peak,
                    "at_end": self.relaxed_at_end,
                    "post_handoff_seconds": cfg.post_handoff_relaxed,
                },
                "window": {"start": self.window[0], "end": self.window[1]},
                "data_check": {
                    "server": self.checked_on,
                    "keys_checked": self.keys_checked,
                    "missing": self.keys_missing,
                    "stale": self.keys_stale,
                    "counters_checked": self.counters_checked,
                    "counters_short": self.counters_short,
                    "intact": self.data_intact,
                },
                "timeline": [{"t": t, "label": label} for t, label in self.timeline],
                "notifications": self.notifications,
                "breakers": self.breakers,
                "series": self.series,
            }
        )
        if self.cache is not None:
            document["cache"] = clean(self.cache)
        return document


# ----------------------------------------------------------------------- live snapshots


@attrs.frozen
class Snapshot:
    """What the live view shows, refreshed a few times a second.

    :ivar relaxed: connections whose timeouts are relaxed (``int``), of which
        ``relaxed_after_handoff`` only because they were handed off (a connection keeps
        relaxed timeouts ``post_handoff`` seconds after its handoff, until
        ``relaxed_until`` seconds from the start at the latest, ``None`` if none is).
    :ivar handoffs: ``(pending, completed, failed)``, or ``None`` where nothing is handed
        off (the cluster demo).
    :ivar endpoint: where traffic goes (``str``).
    :ivar extra: more ``(label, text)`` rows (the cluster's redirections).
    """

    elapsed: float
    phase: str
    ops_per_second: float
    total: int
    failed: int
    relaxed: int
    endpoint: str
    handoffs: tuple[int, int, int] | None = None
    relaxed_after_handoff: int = 0
    relaxed_until: float | None = None
    post_handoff: float = 0.0
    extra: tuple[tuple[str, str], ...] = ()


class Observer(Protocol):
    """Receives the demo's progress (the command line's live view)."""

    def event(self, elapsed: float, text: str) -> None:
        """Something happened (a handoff, a timeline step)."""

    def notification(self, elapsed: float, text: str) -> None:
        """A maintenance notification arrived (the first connection's copy)."""

    def update(self, snapshot: Snapshot) -> None:
        """Periodic numbers."""
