"""The cluster demo end to end (small): a real cluster behind simulators, a workload,
SMIGRATING, a real slot migration, SMIGRATED, and the report."""

from __future__ import annotations

import json

import pytest

from trio_maint._cli.cluster_demo import ClusterDemoConfig, run_cluster_demo

pytestmark = pytest.mark.trio


async def test_cluster_demo_small_run() -> None:
    lines: list[str] = []
    cfg = ClusterDemoConfig(tasks=20, keys=300, slots=30, phase=0.4, pool_size=5)
    report = await run_cluster_demo(cfg, lines.append)
    assert report.ok, report.lines()
    assert report.total_commands > 100
    assert report.failed_commands == 0 and report.keys_lost == 0
    assert report.keys_checked > 0 and report.keys_moved > 0
    assert report.smigrated_refreshes == 1
    assert report.relaxed_peak > 0
    assert all(report.latency[p]["count"] > 0 for p in ("before", "during", "after"))
    labels = [label for _t, label in report.timeline]
    assert labels[0] == "steady traffic" and "slots migrating" in labels
    assert any(label.startswith("SMIGRATED") for label in labels)
    assert lines[-1] == "OK"
    json.dumps(report.as_dict())
