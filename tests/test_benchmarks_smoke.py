"""Smoke runs of benchmarks/: each benchmark's ``--smoke`` mode runs and writes well-formed
JSON. Nothing here is timed: the numbers of a smoke run mean nothing.

redis-py is installed only by ``nox -s bench``; without it the throughput and cluster
benchmarks record the comparison as skipped and still measure trio_maint (and
redis-benchmark).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from trio_maint.testing import RedisServerNotFoundError, find_redis_server

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = {
    "throughput": "benchmarks.bench_throughput",
    "parser": "benchmarks.bench_parser",
    "maintenance_overhead": "benchmarks.bench_maintenance",
    "handoff_storm": "benchmarks.bench_handoff",
    "memory": "benchmarks.bench_memory",
    "cluster": "benchmarks.bench_cluster",
    "simulator": "benchmarks.bench_simulator",
    "telemetry": "benchmarks.bench_telemetry",
    "cache": "benchmarks.bench_cache",
    "peers": "benchmarks.bench_peers",
}
HAVE_REDIS_PY = importlib.util.find_spec("redis") is not None
HAVE_COREDIS = importlib.util.find_spec("coredis") is not None
#: Extra arguments of a smoke run: the peers' 6 cases x 7 clients in a few seconds.
EXTRA_ARGS = {"peers": ["--duration", "0.05"]}
PEER_CASES = {"seq_get", "pool50_setget", "pipeline100", "mixed50", "big_get", "big_get10"}
PEER_CLIENTS = (
    "trio_maint",
    "trio_maint-auto",
    "coredis",
    "valkey-glide",
    "redis-py",
    "bare-trio",
    "bare-asyncio",
    "redis-benchmark",
)


def _have_redis_server() -> bool:
    try:
        find_redis_server()
    except RedisServerNotFoundError:
        return False
    return True


# The benchmarks start their own redis-server processes (never $REDIS_URL's server).
pytestmark = pytest.mark.skipif(
    not _have_redis_server(), reason="the benchmarks need a redis-server binary"
)


def run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("PYTHONDEVMODE", None)  # dev mode's per-call checks are not what is measured
    proc = subprocess.run(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,  # a safety bound, not a timed assertion
        check=False,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_summary(summary: dict[str, Any]) -> None:
    assert summary["rounds"], summary
    assert all(is_number(v) for v in summary["rounds"])
    for key in ("median", "min", "max", "spread_pct"):
        assert is_number(summary[key]), (key, summary)
    assert summary["min"] <= summary["median"] <= summary["max"]


def check_document(name: str, doc: dict[str, Any]) -> None:
    assert doc["benchmark"] == name
    assert doc["smoke"] is True
    assert doc["environment"]["python"]
    if name == "throughput":
        assert set(doc["cases"]) == {"seq_get", "pool50_setget", "pipeline100", "multi10"}
        for entry in doc["cases"].values():
            check_summary(entry["trio_maint"])
            assert entry["trio_maint"]["median"] > 0
            check_summary(entry["trio_maint"]["cpu_us_per_op"])
            if HAVE_REDIS_PY:
                check_summary(entry["redis-py"])
            else:
                assert "redis-py" not in entry
                assert entry["ratios"]["trio_maint/redis-py"] is None
        if not HAVE_REDIS_PY:
            assert "redis-py" in doc["skipped"]
    elif name == "parser":
        for entry in doc["cases"].values():
            for layer in ("hiredis", "RespParser", "Connection"):
                check_summary(entry[layer])
            assert all(is_number(v) for v in entry["overhead_pct"].values())
    elif name == "maintenance_overhead":
        for mode in ("disabled", "enabled"):
            check_summary(doc["modes"][mode]["ops_per_s"])
            check_summary(doc["modes"][mode]["cpu_us_per_op"])
        assert max(doc["modes"]["enabled"]["maint_enabled_connections"]) > 0
        assert max(doc["modes"]["disabled"]["maint_enabled_connections"]) == 0
        assert is_number(doc["overhead_pct"]["cpu_per_op"])
        assert is_number(doc["overhead_pct"]["pool_hooks_cpu"])
        check_summary(doc["pool_hooks_cpu_us_per_command"])
    elif name == "handoff_storm":
        assert set(doc["results"]) == {"storm", "small_queue"}
        for variant in doc["results"].values():
            (run_,) = variant["rounds"]
            assert isinstance(run_["converged"], bool)
            assert isinstance(run_["failed_commands"], int)
            assert run_["opted_in_before"] == run_["pool_size"]
            assert is_number(run_["rss_mib"]["peak_during_storm"])
            assert run_["commands_total"] > 0
    elif name == "cluster":
        assert set(doc["cases"]) == {"seq_get", "pool50_setget", "pipeline100", "pipeline100_set"}
        for entry in doc["cases"].values():
            check_summary(entry["trio_maint"])
            assert entry["trio_maint"]["median"] > 0
            check_summary(entry["trio_maint"]["cpu_us_per_op"])
            if HAVE_REDIS_PY:
                check_summary(entry["redis-py"])
                check_summary(entry["redis-py"]["cpu_us_per_op"])
                assert is_number(entry["ratios"]["trio_maint/redis-py"])
            else:
                assert "redis-py" not in entry
                assert entry["ratios"]["trio_maint/redis-py"] is None
        if not HAVE_REDIS_PY:
            assert "redis-py" in doc["skipped"]
    elif name == "simulator":
        if "skipped" in doc:  # no redis-benchmark on PATH
            return
        assert set(doc["layouts"]) == {"shared"}  # --smoke measures one layout
        results = doc["layouts"]["shared"]["results"]
        assert set(results) == {"P1", "P16"}
        for entry in results.values():
            for side in ("direct", "simulator", "ratio"):
                check_summary(entry[side])
    elif name == "telemetry":
        assert set(doc["cases"]) == {"seq_get", "pool50_setget", "pipeline100"}
        assert doc["modes"][0] == "none"
        for entry in doc["cases"].values():
            for mode in doc["modes"]:
                check_summary(entry[mode]["ops_per_s"])
                check_summary(entry[mode]["cpu_us_per_op"])
        check_summary(doc["check_cpu_ns_per_command"])
    elif name == "cache":
        assert set(doc["cases"]) == {"hit", "miss", "hit_50tasks"}
        for case, entry in doc["cases"].items():
            for result in entry.values():
                check_summary(result["ops_s"])
                check_summary(result["cpu_us"])
            assert ("redis-py cached" in entry) == (HAVE_REDIS_PY and case != "hit_50tasks")
        assert doc["memory"]["trio_maint"]["bytes_per_entry"] > 0
        assert ("redis-py" in doc["memory"]) == HAVE_REDIS_PY
    elif name == "peers":
        check_peers(doc)
    elif name == "memory":
        for variant in ("disabled", "enabled"):
            check_summary(doc["results"][variant]["per_1000_mib"])
        assert doc["results"]["enabled"]["rounds"][0]["opted_in"] > 0


def check_peers(doc: dict[str, Any]) -> None:
    """Every client either measured in every case or skipped with a reason; the bare loops
    and trio_maint (with and without auto_pipeline) always measured; coredis wherever it
    is installed (on Trio)."""
    clients = doc["clients"]
    assert clients[:2] == ["trio_maint", "trio_maint-auto"]
    assert {"bare-trio", "bare-asyncio"} <= set(clients)
    for client in PEER_CLIENTS:
        assert (client in clients) != (client in doc["skipped"]), client
    assert ("coredis" in clients) == HAVE_COREDIS
    assert ("redis-py" in clients) == HAVE_REDIS_PY
    if HAVE_COREDIS:
        assert doc["client_info"]["coredis"]["async_library"] == "trio"
    assert doc["errors"] == {}
    assert set(doc["cases"]) == PEER_CASES
    for case, entry in doc["cases"].items():
        for client in clients:
            if client == "redis-benchmark" and case == "mixed50":  # it has no mixed workload
                assert client not in entry
                assert entry["ratios"]["trio_maint/redis-benchmark"] is None
                continue
            check_summary(entry[client])
            assert entry[client]["median"] > 0
            check_summary(entry[client]["cpu_us_per_op"])
            if client not in ("trio_maint", "trio_maint-auto"):
                for us in ("trio_maint", "trio_maint-auto"):  # auto_pipeline=True too
                    check_summary(entry["ratios"][f"{us}/{client}"])
                    check_summary(entry["cpu_ratios"][f"{us}/{client}"])


# parser runs through the runner below (the cheapest, so the runner is tested cheaply).
@pytest.mark.parametrize("name", [n for n in BENCHMARKS if n != "parser"])
def test_smoke(name: str, tmp_path: Path) -> None:
    out = tmp_path / f"{name}.json"
    proc = run(
        [BENCHMARKS[name], "--smoke", "--out", str(out), *EXTRA_ARGS.get(name, [])], tmp_path
    )
    assert "##" in proc.stdout  # printed its table
    check_document(name, json.loads(out.read_text()))


# Without redis-py installed, test_smoke["cluster"] already runs this path.
@pytest.mark.skipif(not HAVE_REDIS_PY, reason="test_smoke covers it without redis-py")
def test_cluster_smoke_without_redis_py(tmp_path: Path) -> None:
    """``--no-redis-py`` measures trio_maint alone and says why redis-py is missing."""
    out = tmp_path / "cluster.json"
    run(["benchmarks.bench_cluster", "--smoke", "--no-redis-py", "--out", str(out)], tmp_path)
    doc = json.loads(out.read_text())
    assert doc["clients"] == ["trio_maint"]
    assert doc["skipped"]["redis-py"] == "--no-redis-py"
    for entry in doc["cases"].values():
        check_summary(entry["trio_maint"])
        assert "redis-py" not in entry


def test_runner_combines(tmp_path: Path) -> None:
    run(["benchmarks", "--smoke", "--only", "parser", "--out-dir", str(tmp_path)], tmp_path)
    combined = json.loads((tmp_path / "all.json").read_text())
    assert list(combined) == ["parser"]
    check_document("parser", combined["parser"])


def test_poll_passes_runs(tmp_path: Path) -> None:
    """``benchmarks.poll_passes`` (docs/performance.md, "Polling for the reply") prints a
    line per number of passes; with 0 passes nothing is found by polling."""
    proc = run(
        ["benchmarks.poll_passes", "--passes", "0,4", "--count", "200", "--rounds", "1"],
        tmp_path,
    )
    lines = proc.stdout.splitlines()
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert set(rows) == {"0", "4"}
    assert rows["0"][3] == "0.0%"
