"""The cluster demo (``trio-maint demo --cluster``, scenario (a) of docs/cluster.md): a real
local Redis Cluster behind maintenance simulators, the standalone demo's workload through
:func:`~trio_maint.open_redis_cluster`, and a real slot migration announced with
``SMIGRATING``/``SMIGRATED``; the same live view, report and ``--json``/``--plot`` as the
standalone demo (commands, failures, latency before/during/after, redirections, slot-map
refreshes, relaxed connections, a check of every acknowledged write).

It uses only the public API and :mod:`trio_maint.testing`.
"""

from __future__ import annotations

import math
import random
from typing import Any, ClassVar

import attrs
import trio

from .. import (
    CacheConfig,
    ClientCache,
    Endpoint,
    MaintConfig,
    NotificationReceived,
    RedisCluster,
    key_slot,
    open_redis_cluster,
)
from ..testing import LocalCluster
from .cache_watch import StaleReadCheck, cache_document, cache_rows
from .metrics import instrumented
from .observe import NotificationLog, Silent, relaxation, workload_snapshot
from .report import (
    DemoError,
    Observer,
    errors_text,
    latency_rows,
    phase_summary,
    stale_reads,
    verdict_note,
)
from .workload import WorkloadStats, run_task

__all__ = ["ClusterDemoConfig", "ClusterDemoReport", "run_cluster_demo"]


@attrs.frozen
class ClusterDemoConfig:
    """Knobs of :func:`run_cluster_demo`.

    :ivar tasks: concurrent workload tasks (``int`` >= 1).
    :ivar keys: keys written and read, spread over every slot (``int`` >= ``tasks``).
    :ivar slots: how many slots migrate from the first master to the second (``int``).
    :ivar phase: seconds (``float``) at speed 1 of steady traffic before and after the
        migration, and of its ``ASK`` phase (slots migrating, keys not yet moved).
    :ivar pool_size: connections per node (``int`` >= 1).
    :ivar mix: relative weights of reads, writes and pipelines (``tuple[int, int, int]``).
    :ivar speed: ``phase`` is divided by this (``float`` > 0).
    :ivar duration: seconds of traffic in all (``float``), split in three equal phases
        instead of ``phase / speed`` (moving the keys adds its own time); ``None``: not set.
    :ivar seed: seed of the workload's random choices (``None`` = random).
    :ivar cache: every node's client caches its reads (``--cache``) and the demo checks
        that no read was stale (``bool``).
    """

    tasks: int = 100
    keys: int = 2000
    slots: int = 200
    phase: float = 1.0
    pool_size: int = 20
    mix: tuple[int, int, int] = (60, 30, 10)
    speed: float = 1.0
    duration: float | None = None
    seed: int | None = None
    cache: bool = False

    def __attrs_post_init__(self) -> None:
        for name in ("tasks", "pool_size", "slots"):
            if getattr(self, name) < 1:
                raise DemoError(f"--{name.replace('_', '-')} must be >= 1")
        if self.keys < self.tasks:
            raise DemoError(f"--keys must be >= --tasks ({self.tasks}), got {self.keys}")
        if not (self.speed > 0 and math.isfinite(self.speed)):
            raise DemoError(f"--speed must be > 0, got {self.speed}")
        if self.duration is not None and not (0 < self.duration < math.inf):
            raise DemoError(f"--duration must be > 0, got {self.duration}")

    @property
    def phase_seconds(self) -> float:
        """Seconds of each of the three phases (``float``)."""
        if self.duration is not None:
            return self.duration / 3
        return self.phase / self.speed


@attrs.define
class ClusterDemoReport:
    """The outcome of :func:`run_cluster_demo`; :meth:`as_dict` is the ``--json`` document.

    Times are seconds from the workload's start; latencies are seconds.
    """

    config: ClusterDemoConfig
    nodes: dict[str, str] = attrs.field(factory=dict)
    total_commands: int = 0
    failed_commands: int = 0
    errors: dict[str, int] = attrs.field(factory=dict)
    latency: dict[str, dict[str, float | int]] = attrs.field(factory=dict)
    window: tuple[float, float] = (math.nan, math.nan)
    duration: float = 0.0
    redirections: dict[str, int] = attrs.field(factory=dict)
    refreshes: int = 0
    smigrated_refreshes: int = 0
    relaxed_peak: int = 0
    relaxed_at_end: int = 0
    slots_moved: int = 0
    keys_moved: int = 0
    keys_checked: int = 0
    keys_missing: int = 0
    keys_stale: int = 0
    counters_checked: int = 0
    counters_short: int = 0
    timeline: list[tuple[float, str]] = attrs.field(factory=list)
    notifications: list[dict[str, Any]] = attrs.field(factory=list)
    series: list[dict[str, float]] = attrs.field(factory=list)
    #: ``--cache``: the node caches' totals and the stale-read check (as the standalone
    #: demo's ``DemoReport.cache``).
    cache: dict[str, Any] | None = None

    #: The first words of the report's verdict line.
    heading: ClassVar[str] = "trio-maint demo --cluster"

    @property
    def label(self) -> str:
        """What ran, for titles (``str``)."""
        return "trio-maint demo --cluster (slot migration)"

    @property
    def data_intact(self) -> bool:
        """Every acknowledged write was read back."""
        return self.keys_missing == 0 and self.keys_stale == 0 and self.counters_short == 0

    @property
    def ok(self) -> bool:
        """No command failed, every acknowledged write was read back, and (``--cache``)
        no read was stale."""
        return self.failed_commands == 0 and self.data_intact and stale_reads(self.cache) == 0

    @property
    def verdict_note(self) -> str:
        """What follows ``PASS``/``FAIL``: the stale reads with ``--cache``, else ``""``."""
        return verdict_note(self.cache)

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-compatible values (``nan`` becomes ``None``)."""

        def clean(value: Any) -> Any:
            if isinstance(value, float) and not math.isfinite(value):
                return None
            if isinstance(value, dict):
                return {k: clean(v) for k, v in value.items()}
            if isinstance(value, list | tuple):
                return [clean(v) for v in value]
            return value

        cfg = self.config
        out: dict[str, Any] = clean(
            {
                "ok": self.ok,
                "scenario": "cluster-slot-migration",
                "speed": cfg.speed,
                "tasks": cfg.tasks,
                "pool_size": cfg.pool_size,
                "keys": cfg.keys,
                "mix": {"reads": cfg.mix[0], "writes": cfg.mix[1], "pipelines": cfg.mix[2]},
                "duration": self.duration,
                "nodes": self.nodes,
                "commands": {
                    "total": self.total_commands,
                    "failed": self.failed_commands,
                    "errors": self.errors,
                },
                "latency": self.latency,
                "window": {"start": self.window[0], "end": self.window[1]},
                "redirections": self.redirections,
                "refreshes": self.refreshes,
                "smigrated_refreshes": self.smigrated_refreshes,
                "relaxed": {"peak": self.relaxed_peak, "at_end": self.relaxed_at_end},
                "slots_moved": self.slots_moved,
                "keys_moved": self.keys_moved,
                "data_check": {
                    "keys_checked": self.keys_checked,
                    "missing": self.keys_missing,
                    "stale": self.keys_stale,
                    "counters_checked": self.counters_checked,
                    "counters_short": self.counters_short,
                    "intact": self.data_intact,
                },
                "timeline": [{"t": t, "label": label} for t, label in self.timeline],
                "notifications": self.notifications,
                "series": self.series,
            }
        )
        if self.cache is not None:
            out["cache"] = clean(self.cache)
        return out

    def rows(self) -> list[tuple[str, str]]:
        """The report as ``(label, text)`` rows, as the standalone demo's."""
        cfg = self.config
        rows = [
            (
                "scenario",
                f"slot migration on a local cluster, 3 masters + 1 replica each "
                f"(speed {cfg.speed:g}, {self.duration:.1f} s)",
            ),
            ("commands", f"{self.total_commands:,} total, {self.failed_commands:,} failed"),
            (
                "slots",
                f"{self.slots_moved:,} slots and {self.keys_moved:,} keys moved "
                f"{self.nodes.get('source', '?')} -> {self.nodes.get('target', '?')}",
            ),
            (
                "redirections",
                f"{redirections_text(self.redirections)}; slot-map refreshes: "
                f"{self.refreshes:,} ({self.smigrated_refreshes:,} after SMIGRATED)",
            ),
            (
                "relaxed timeouts",
                f"peak {self.relaxed_peak:,} connections (from SMIGRATING to SMIGRATED), "
                f"{self.relaxed_at_end:,} at the end",
            ),
            *latency_rows(self.latency),
            (
                "data check",
                f"{'intact' if self.data_intact else 'WRITES LOST'}: {self.keys_checked:,} keys "
                f"and {self.counters_checked:,} counters read back through the cluster client "
                f"({self.keys_missing:,} missing, {self.keys_stale:,} stale, "
                f"{self.counters_short:,} counters short)",
            ),
        ]
        if self.cache is not None:
            rows += cache_rows(self.cache)
        if self.errors:
            rows.append(("errors", errors_text(self.errors)))
        return rows


def node_caches(rc: RedisCluster) -> list[ClientCache]:
    """The caches of ``rc``'s node clients (``--cache``; none without it)."""
    return [c.cache for c in list(rc.nodes.values()) if c.cache is not None]


def redirections_text(counts: dict[str, int]) -> str:
    """``{"ask": 3, "moved": 1}`` as ``ASK 3, MOVED 1`` (``none`` when empty)."""
    shown = [f"{name.upper()} {n:,}" for name, n in sorted(counts.items()) if n]
    return ", ".join(shown) or "none"


class _ClusterDemo:
    def __init__(self, cfg: ClusterDemoConfig, observer: Observer) -> None:
        self.cfg = cfg
        self.observer = observer
        self.report = ClusterDemoReport(cfg)
        self.stats = WorkloadStats(start=trio.current_time())
        self.names: dict[str, str] = {}
        self.notifications = NotificationLog(observer, self.names)
        self.report.notifications = self.notifications.entries
        self.phase = "starting"
        self.moving = ""
        self.stale_check = StaleReadCheck() if cfg.cache else None

    def now(self) -> float:
        return trio.current_time() - self.stats.start

    def step(self, label: str) -> None:
        t = self.now()
        self.report.timeline.append((t, label))
        self.observer.event(t, label)

    async def consume(self, rc: RedisCluster, name: str) -> None:
        """Notifications received by the node client of ``name`` (once it exists)."""
        while (client := rc.nodes.get(name)) is None:
            await trio.sleep(0.01)
        async with client.maintenance.events(max_buffer=4096) as events:
            async for event in events:
                if isinstance(event, NotificationReceived):
                    self.notifications.add(self.now(), event)

    async def refresh(self, rc: RedisCluster, stop: trio.Event) -> None:
        while not stop.is_set():
            now = self.now()
            nodes = rc.nodes
            relaxed = relaxation([c.maintenance for c in nodes.values()], trio.current_time())
            self.report.relaxed_peak = max(self.report.relaxed_peak, relaxed.relaxed)
            masters = len(rc.slot_map.masters)
            self.observer.update(
                workload_snapshot(
                    self.stats,
                    now,
                    self.phase,
                    relaxed,
                    endpoint=f"{masters} masters, {len(nodes)} node clients{self.moving}",
                    extra=(
                        ("redirections", redirections_text(dict(rc.redirections))),
                        (
                            "slot map",
                            f"{rc.refreshes:,} refreshes ({rc.smigrated_refreshes:,} after "
                            "SMIGRATED)",
                        ),
                        *self.cache_extra(rc),
                    ),
                )
            )
            await trio.sleep(0.25)

    def cache_extra(self, rc: RedisCluster) -> list[tuple[str, str]]:
        """The live view's cache rows (``--cache``), else none."""
        if self.stale_check is None:
            return []
        return cache_rows(cache_document(node_caches(rc), self.stale_check))

    async def check(self, rc: RedisCluster) -> None:
        """Read every acknowledged write back (newer values are fine: a failed write may
        still have been applied)."""
        report = self.report
        acked = dict(self.stats.acked)
        keys = sorted(acked)
        report.keys_checked = len(keys)
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            async with rc.pipeline() as pipe:
                for key in chunk:
                    pipe.get(key)
                values = await pipe.execute()
            for key, value in zip(chunk, values, strict=True):
                if value is None:
                    report.keys_missing += 1
                elif int(value.decode().rpartition(":")[2]) < acked[key]:
                    report.keys_stale += 1
        counts = dict(self.stats.increments)
        report.counters_checked = len(counts)
        for key, expected in counts.items():
            value = await rc.get(key)
            if value is None or int(value) < expected:
                report.counters_short += 1


async def run_cluster_demo(
    cfg: ClusterDemoConfig | None = None, observer: Observer | None = None, registry: Any = None
) -> ClusterDemoReport:
    """Run the cluster demo and return its report; ``observer`` (default: none) receives
    the events, the notifications and the live numbers; the client's metrics are recorded
    on ``registry`` (a ``prometheus_client.CollectorRegistry``, ``--metrics-port``) if
    given.

    :raises RedisServerNotFoundError: no ``redis-server`` binary.
    :raises ClusterError: the cluster did not form or a migration step failed.
    """
    cfg = cfg or ClusterDemoConfig()
    demo = _ClusterDemo(cfg, observer if observer is not None else Silent())
    report = demo.report
    rng = random.Random(cfg.seed)
    phase = cfg.phase_seconds
    demo.observer.event(0.0, "starting a local cluster (3 masters + 1 replica each)")
    async with LocalCluster() as cluster, cluster.simulators() as sims:
        source, target = cluster.masters[:2]
        src, dst = sims[source.node_id], sims[target.node_id]
        src_name, dst_name = str(Endpoint(*src.address)), str(Endpoint(*dst.address))
        demo.names.update({src_name: "source", dst_name: "target"})
        report.nodes = {"source": src_name, "target": dst_name}
        async with open_redis_cluster(
            [s.url for s in sims.values()],
            pool_size=cfg.pool_size,
            maintenance=MaintConfig(mode="enabled"),
            cache=CacheConfig() if cfg.cache else None,
        ) as rc:
            keys = [f"demo:key:{i}" for i in range(cfg.keys)]
            stop = trio.Event()
            check = demo.stale_check
            async with instrumented(rc, registry), trio.open_nursery() as nursery:
                nursery.start_soon(demo.consume, rc, src_name)
                await trio.lowlevel.checkpoint()
                demo.stats.start = trio.current_time()
                nursery.start_soon(demo.refresh, rc, stop)
                async with trio.open_nursery() as workers:
                    if check is not None:
                        workers.start_soon(check.run_barriers, lambda: node_caches(rc), stop)
                    for task in range(cfg.tasks):
                        workers.start_soon(
                            run_task,
                            rc,
                            demo.stats,
                            task,
                            cfg,
                            stop,
                            random.Random(rng.random()),
                            check,
                        )
                    demo.phase = "before"
                    demo.step(
                        f"workload: {cfg.tasks} tasks, pools of {cfg.pool_size} per node, "
                        "a cluster of 3 masters + 1 replica each behind simulators"
                    )
                    await trio.sleep(phase)
                    owned = set(cluster.slots_of(source))
                    slots = sorted({key_slot(k) for k in keys} & owned)[: cfg.slots]
                    spec = ",".join(str(s) for s in slots)
                    demo.phase = "window"
                    w_start = demo.now()
                    demo.moving = f"; {len(slots)} slots moving {src_name} -> {dst_name}"
                    seq = await src.inject_smigrating(slots=spec)
                    demo.step(f"server: SMIGRATING seq={seq} sent: {len(slots)} slots leave source")

                    def on_phase(name: str) -> None:
                        what = {
                            "migrating": "slots migrating: clients meet ASK",
                            "migrated": "keys moved, the slots are the target's now",
                        }
                        trio.from_thread.run_sync(demo.step, f"server: {what.get(name, name)}")

                    report.keys_moved = await cluster.migrate_slots_async(
                        slots, source, target, batch=20, pause=phase, on_phase=on_phase
                    )
                    report.slots_moved = len(slots)
                    seq = await src.inject_smigrated([(src_name, dst_name, spec)])
                    demo.step(f"server: SMIGRATED seq={seq} sent: the slots are on target")
                    demo.moving = ""
                    window = (w_start, demo.now())
                    demo.phase = "after"
                    await trio.sleep(phase)
                    stop.set()
                end = demo.now()
                demo.phase = "checking"
                report.relaxed_at_end = relaxation(
                    [c.maintenance for c in rc.nodes.values()], trio.current_time()
                ).relaxed
                if check is not None:
                    report.cache = cache_document(node_caches(rc), check)
                nursery.cancel_scope.cancel()
            await demo.check(rc)
            report.redirections = dict(rc.redirections)
            report.refreshes = rc.refreshes
            report.smigrated_refreshes = rc.smigrated_refreshes
    stats = demo.stats
    report.duration = end
    report.window = window
    report.total_commands = len(stats.ops) + len(stats.failed_at)
    report.failed_commands = len(stats.failed_at)
    report.errors = dict(stats.errors)
    report.latency, report.series = phase_summary(stats.ops, stats.failed_at, window, end)
    return report
