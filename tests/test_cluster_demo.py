"""The cluster demo end to end (small): a real cluster behind simulators, the workload,
SMIGRATING, a real slot migration, SMIGRATED, and the report."""

from __future__ import annotations

import json

import pytest

from trio_maint._cli.cluster_demo import ClusterDemoConfig, run_cluster_demo
from trio_maint._cli.report import Snapshot

pytestmark = pytest.mark.trio


class Recorder:
    """An observer keeping what the live view would show."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.notifications: list[str] = []
        self.snapshots: list[Snapshot] = []

    def event(self, elapsed: float, text: str) -> None:
        self.events.append(text)

    def notification(self, elapsed: float, text: str) -> None:
        self.notifications.append(text)

    def update(self, snapshot: Snapshot) -> None:
        self.snapshots.append(snapshot)


async def test_cluster_demo_small_run() -> None:
    seen = Recorder()
    cfg = ClusterDemoConfig(tasks=20, keys=300, slots=30, phase=0.4, pool_size=5, seed=3)
    report = await run_cluster_demo(cfg, seen)
    assert report.ok, report.rows()
    assert report.total_commands > 100
    assert report.failed_commands == 0 and report.data_intact
    assert report.keys_checked > 0 and report.keys_moved > 0 and report.slots_moved == 30
    assert report.counters_checked == 20
    assert report.smigrated_refreshes == 1
    assert report.relaxed_peak > 0
    assert all(report.latency[p]["count"] > 0 for p in ("before", "during", "after"))
    labels = [label for _t, label in report.timeline]
    assert labels[0].startswith("workload: 20 tasks")
    assert "server: slots migrating: clients meet ASK" in labels
    assert any(label.startswith("server: SMIGRATED") for label in labels)
    # each notification once, however many connections received it
    assert [n["name"] for n in report.notifications] == ["SMIGRATING", "SMIGRATED"]
    assert report.notifications[0]["connections"] >= 1
    assert seen.notifications[0].startswith("SMIGRATING seq=")
    assert seen.snapshots and seen.snapshots[-1].handoffs is None
    assert report.series and report.window[0] < report.window[1] <= report.duration
    json.dumps(report.as_dict())
