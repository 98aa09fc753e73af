"""The cluster demo (scenario (a) of docs/cluster.md): a real local Redis Cluster behind
maintenance simulators, a concurrent workload through :func:`~trio_maint.open_redis_cluster`,
and a real slot migration announced with ``SMIGRATING``/``SMIGRATED``; a line of progress a
second and a report (commands, failures, latency before/during/after, redirections,
refreshes, a check of every acknowledged write).

:func:`run_cluster_demo` is meant to be wired into ``trio-maint demo --cluster``; it uses
only the public API and :mod:`trio_maint.testing`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import attrs
import trio

from .. import Endpoint, MaintConfig, RedisError, key_slot, open_redis_cluster
from ..testing import LocalCluster
from .report import latency_summary

__all__ = ["ClusterDemoConfig", "ClusterDemoReport", "run_cluster_demo"]


@attrs.frozen
class ClusterDemoConfig:
    """Knobs of :func:`run_cluster_demo`.

    :ivar tasks: concurrent workload tasks (``int``).
    :ivar keys: keys written and read, spread over every slot (``int``).
    :ivar slots: how many slots migrate from the first master to the second (``int``).
    :ivar phase: seconds (``float``) of steady traffic before and after the migration, and
        of the ``ASK`` phase inside it (slots migrating, keys not yet moved).
    :ivar pool_size: connections per node (``int``).
    """

    tasks: int = 100
    keys: int = 2000
    slots: int = 200
    phase: float = 1.0
    pool_size: int = 20


@attrs.define
class ClusterDemoReport:
    """The outcome of :func:`run_cluster_demo` (times in seconds from the workload's start;
    latencies in seconds)."""

    config: ClusterDemoConfig
    total_commands: int = 0
    failed_commands: int = 0
    errors: dict[str, int] = attrs.field(factory=dict)
    latency: dict[str, dict[str, float | int]] = attrs.field(factory=dict)
    redirections: dict[str, int] = attrs.field(factory=dict)
    refreshes: int = 0
    smigrated_refreshes: int = 0
    relaxed_peak: int = 0
    keys_moved: int = 0
    keys_checked: int = 0
    keys_lost: int = 0
    timeline: list[tuple[float, str]] = attrs.field(factory=list)

    @property
    def ok(self) -> bool:
        """No command failed and every acknowledged write was read back."""
        return self.failed_commands == 0 and self.keys_lost == 0

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

        out: dict[str, Any] = clean(
            {
                "ok": self.ok,
                "tasks": self.config.tasks,
                "commands": {
                    "total": self.total_commands,
                    "failed": self.failed_commands,
                    "errors": self.errors,
                },
                "latency": self.latency,
                "redirections": self.redirections,
                "refreshes": self.refreshes,
                "smigrated_refreshes": self.smigrated_refreshes,
                "relaxed_peak": self.relaxed_peak,
                "keys_moved": self.keys_moved,
                "data_check": {"checked": self.keys_checked, "lost": self.keys_lost},
                "timeline": [{"t": t, "label": label} for t, label in self.timeline],
            }
        )
        return out

    def lines(self) -> list[str]:
        """The report as text lines."""
        out = [
            f"commands: {self.total_commands} total, {self.failed_commands} failed",
            f"redirections: {dict(self.redirections) or 'none'}; slot-map refreshes: "
            f"{self.refreshes} ({self.smigrated_refreshes} from SMIGRATED)",
            f"connections relaxed at the peak: {self.relaxed_peak}; keys moved: {self.keys_moved}",
        ]
        for phase, stats in self.latency.items():
            out.append(
                f"latency {phase:>6}: n={stats['count']} p50={stats['p50'] * 1000:.2f} ms "
                f"p99={stats['p99'] * 1000:.2f} ms max={stats['max'] * 1000:.2f} ms"
            )
        out.append(
            f"data check: {self.keys_checked} keys, {self.keys_lost} acknowledged writes lost"
        )
        out.append("OK" if self.ok else "FAILED")
        return out


async def run_cluster_demo(
    cfg: ClusterDemoConfig | None = None, out: Callable[[str], None] | None = None
) -> ClusterDemoReport:
    """Run the cluster demo and return its report; ``out`` gets progress lines.

    :raises RedisServerNotFoundError: no ``redis-server`` binary.
    :raises ClusterError: the cluster did not form or a migration step failed.
    """
    cfg = cfg or ClusterDemoConfig()
    say = out or (lambda _line: None)
    report = ClusterDemoReport(cfg)
    latencies: dict[str, list[float]] = {"before": [], "during": [], "after": []}
    errors: Counter[str] = Counter()
    acked: dict[str, int] = {}
    uncertain: dict[str, int] = {}
    phase = ["before"]
    stop = trio.Event()
    start = [trio.current_time()]

    def mark(label: str) -> None:
        report.timeline.append((trio.current_time() - start[0], label))
        say(f"{trio.current_time() - start[0]:6.2f}s  {label}")

    say(f"starting a cluster (3 masters + 1 replica each) behind simulators, {cfg.tasks} tasks")
    async with LocalCluster() as cluster, cluster.simulators() as sims:
        source, target = cluster.masters[:2]
        src, dst = sims[source.node_id], sims[target.node_id]
        src_name, dst_name = str(Endpoint(*src.address)), str(Endpoint(*dst.address))
        async with open_redis_cluster(
            [s.url for s in sims.values()],
            pool_size=cfg.pool_size,
            maintenance=MaintConfig(mode="enabled"),
        ) as rc:
            keys = [f"demo:{i}" for i in range(cfg.keys)]

            async def task(index: int) -> None:
                mine = keys[index :: cfg.tasks]
                n = 0
                while not stop.is_set() and mine:
                    key = mine[n % len(mine)]
                    n += 1
                    started = trio.current_time()
                    try:
                        await rc.set(key, n)
                        acked[key] = n
                        await rc.get(key)
                        report.total_commands += 2
                    except RedisError as exc:
                        uncertain[key] = n
                        report.failed_commands += 1
                        errors[type(exc).__name__] += 1
                        await trio.sleep(0.01)
                        continue
                    latencies[phase[0]].append((trio.current_time() - started) / 2)

            async def live() -> None:
                last = 0
                while not stop.is_set():
                    await trio.sleep(1.0)
                    client = rc.nodes.get(src_name)
                    relaxed = (
                        client.maintenance.state.relaxed_connections
                        if client is not None and client.maintenance is not None
                        else 0
                    )
                    report.relaxed_peak = max(report.relaxed_peak, relaxed)
                    elapsed = trio.current_time() - start[0]
                    say(
                        f"{elapsed:6.2f}s  {report.total_commands - last:6d} "
                        f"ops/s  failed {report.failed_commands}  relaxed {relaxed}  "
                        f"redirections {dict(rc.redirections)}  refreshes {rc.refreshes}"
                    )
                    last = report.total_commands

            async with trio.open_nursery() as nursery:
                start[0] = trio.current_time()
                for index in range(cfg.tasks):
                    nursery.start_soon(task, index)
                nursery.start_soon(live)
                mark("steady traffic")
                await trio.sleep(cfg.phase)
                owned = set(cluster.slots_of(source))
                with_keys = sorted({key_slot(k) for k in keys} & owned)
                slots = with_keys[: cfg.slots]
                spec = ",".join(str(s) for s in slots)
                phase[0] = "during"
                await src.inject_smigrating(slots=spec)
                mark(f"SMIGRATING: {len(slots)} slots leave {src_name}")
                await trio.sleep(0.1)
                client = rc.nodes.get(src_name)
                if client is not None and client.maintenance is not None:
                    report.relaxed_peak = max(
                        report.relaxed_peak, client.maintenance.state.relaxed_connections
                    )
                report.keys_moved = await cluster.migrate_slots_async(
                    slots,
                    source,
                    target,
                    batch=20,
                    pause=cfg.phase,
                    on_phase=lambda p: trio.from_thread.run_sync(mark, f"slots {p}"),
                )
                await src.inject_smigrated([(src_name, dst_name, spec)])
                mark(f"SMIGRATED: slots now on {dst_name}")
                phase[0] = "after"
                await trio.sleep(cfg.phase)
                stop.set()
                mark("stopping")
            for key, value in acked.items():
                got = await rc.get(key)
                report.keys_checked += 1
                allowed = {str(value).encode()}
                if key in uncertain:
                    allowed.add(str(uncertain[key]).encode())
                if got not in allowed:
                    report.keys_lost += 1
            report.redirections = dict(rc.redirections)
            report.refreshes = rc.refreshes
            report.smigrated_refreshes = rc.smigrated_refreshes
    report.errors = dict(errors)
    report.latency = {name: latency_summary(values) for name, values in latencies.items()}
    for line in report.lines():
        say(line)
    return report
