"""``trio-maint demo --cache`` (client-side caching through the maintenance window, with a
stale-read check) and ``--metrics-port`` (the client's metrics served for Prometheus while
the demo runs), standalone and with ``--cluster``, at high ``--speed``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from trio_maint._cli.cache_watch import StaleReadCheck, version_of
from trio_maint._cli.demo import run_demo
from trio_maint._cli.main import main
from trio_maint._cli.report import DemoConfig, DemoReport
from trio_maint._sansio.cache import CacheStore
from trio_maint.testing import free_port

TIMEOUT = 90.0


def run_bounded(cfg: DemoConfig) -> DemoReport:
    """``run_demo(cfg)`` in a Trio run of its own, at most ``TIMEOUT`` seconds."""

    async def bounded() -> DemoReport:
        with trio.fail_after(TIMEOUT):
            return await run_demo(cfg)

    return trio.run(bounded)


def main_bounded(argv: list[str]) -> int:
    """``main(argv)`` in a thread, at most ``TIMEOUT`` seconds (the test fails beyond)."""
    status: list[int] = []
    runner = threading.Thread(target=lambda: status.append(main(argv)), daemon=True)
    runner.start()
    runner.join(TIMEOUT)
    assert not runner.is_alive(), f"trio-maint {' '.join(argv)} ran longer than {TIMEOUT} s"
    assert status, "main() raised (see the thread's traceback above)"
    return status[0]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trio_maint", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=dict(os.environ),
        check=False,
    )


# ---------------------------------------------------------------------- the check itself


def test_stale_read_check_follows_the_barriers() -> None:
    """A read must return what was acknowledged before the last completed barrier began;
    newer writes may still be on their way."""
    check = StaleReadCheck()
    check.acked("k", 1)
    expected = check.read_started("k")  # no barrier yet: anything goes
    check.read_returned("k", expected, None, 0.0)
    assert (check.stale, check.in_flight) == (0, 1)

    # a barrier that began after the acknowledgement of v1 and ended
    check._synced = check._tick()
    check.acked("k", 2)  # after the barrier began: not covered
    expected = check.read_started("k")
    assert expected == (1, 2)
    check.read_returned("k", expected, b"0:1", 0.1)  # v1: allowed, v2 in flight
    check.read_returned("k", expected, b"0:2", 0.1)
    check.read_returned("k", expected, b"0:7", 0.1)  # newer (a failed write applied): fine
    assert (check.stale, check.in_flight) == (0, 2)
    check.read_returned("k", expected, None, 0.2)  # v0 after v1 was covered: stale
    assert (check.stale, check.stale_nil) == (1, 1)
    assert check.examples == [
        "k read version 0 at 0.200 s, version 1 acknowledged before a completed barrier"
    ]
    assert check.as_dict()["reads_checked"] == 5
    assert version_of(b"12:345") == 345 and version_of(None) == 0


def test_the_check_catches_a_cache_that_ignores_invalidations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The demo's check is not vacuous: with every invalidation ignored (a mutant store:
    the server's, and the client's own for its writes), the demo reports stale reads and
    fails."""
    monkeypatch.setattr(CacheStore, "invalidate", lambda self, keys: 0)
    cfg = DemoConfig(speed=20, scenario="failover", cache=True, seed=5, mix=(80, 20, 0))
    report = run_bounded(cfg)
    assert report.cache is not None
    assert report.cache["stale_reads"] > 0
    assert report.failed_commands == 0 and report.data_intact
    assert not report.ok
    stale = report.cache["stale_reads"]
    assert report.verdict_note == f" ({stale:,} stale read{'' if stale == 1 else 's'})"


# ------------------------------------------------------------------------- --cache


@pytest.mark.parametrize(
    "options",
    [
        ("--scenario", "moving"),
        ("--scenario", "moving", "--data-move", "migrate"),
        ("--scenario", "none"),
        ("--scenario", "failover"),
        ("--scenario", "unreachable"),
    ],
    ids=["moving", "moving-migrate", "none", "failover", "unreachable"],
)
def test_demo_cache_reads_no_stale_value_through_the_window(options: tuple[str, ...]) -> None:
    result = run_cli("demo", "--cache", "--speed", "20", "--json", "--seed", "2", *options)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert report["commands"]["failed"] == 0, report["commands"]["errors"]
    assert report["data_check"]["intact"] is True
    cache = report["cache"]
    assert cache["caches"] == 1
    assert cache["stale_reads"] == 0, cache["stale_examples"]
    # Not vacuous: enough reads and barriers to check (how many depends on the machine's
    # load: 425 reads in a CI run while other tests ran, where 500 were asked).
    assert cache["reads_checked"] > 200 and cache["barriers"] > 10
    assert cache["hits"] > 0 and cache["misses"] > 0 and cache["invalidations"] > 0
    assert 0 < cache["hit_ratio"] < 1
    flushes = cache["flushes"]
    if "failover" in options:
        assert flushes["failing_over"] >= 1 and flushes["failed_over"] >= 1
    else:
        assert flushes["migrating"] >= 1 and flushes["moving"] >= 1
    if "migrate" in options:
        # migrate() re-points A's connections to B's server under the tracking connection
        assert flushes.get("server_changed", 0) + flushes.get("handoff", 0) >= 1
    # the live view and the report show the numbers; the verdict names the stale reads
    err = result.stderr
    assert "cache hit ratio " in err and "stale reads 0 of " in err
    assert "trio-maint demo: PASS (0 stale reads)" in err
    if options == ("--scenario", "moving"):
        # the tracking connection left A before the switch, not at the deadline
        assert "A closed the cache's tracking connection" in err
        assert "connections still busy on A closed" not in err
        # every connection told to move has an outcome: the tracking connection's is
        # "closed by A", counted and said. Its handoff may still complete: its dial to B
        # is under way (held by B's endpoint) when A closes its old stream, and whether
        # its reader notices the close first is a race.
        handoffs = report["handoffs"]
        assert handoffs["closed_before_handoff"] == 1 and handoffs["failed"] == 0
        moved = handoffs["connections_moved"]
        assert handoffs["completed"] in (moved - 1, moved)
        assert "1 of them closed by A before its handoff: the cache's tracking" in err


def test_demo_without_cache_has_no_cache_section() -> None:
    cfg = DemoConfig(speed=40, scenario="failover", tasks=2)
    report = run_bounded(cfg)
    assert report.cache is None and "cache" not in report.as_dict()
    assert report.verdict_note == ""
    assert not any(label in ("cache", "stale reads") for label, _ in report.rows())


# ------------------------------------------------------------------- --metrics-port


class Scraper:
    """Scrapes ``url`` every 50 ms from a thread of its own until stopped."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.pages: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, name="test-scraper")

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                with urllib.request.urlopen(self.url, timeout=5) as response:
                    self.pages.append(response.read().decode())
            except OSError:
                pass  # not serving yet, or any more
            self.stop.wait(0.05)


@pytest.fixture
def scraper() -> Iterator[Scraper]:
    port = free_port()
    s = Scraper(f"http://127.0.0.1:{port}/metrics")
    s.thread.start()
    try:
        yield s
    finally:
        s.stop.set()
        s.thread.join(10)


def samples(page: str) -> dict[str, float]:
    """Sum of each sample name's values over its labels."""
    from prometheus_client.parser import text_string_to_metric_families

    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


def notifications(page: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[str, float] = {}
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            if sample.name == "redis_client_maintenance_notifications_total":
                kind = sample.labels["redis_client_connection_notification"]
                found[kind] = found.get(kind, 0.0) + sample.value
    return found


def server_threads() -> list[str]:
    names = ("serve_forever", "process_request_thread")
    return [t.name for t in threading.enumerate() if any(n in t.name for n in names)]


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


def test_demo_serves_its_metrics_while_it_runs(
    scraper: Scraper, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("prometheus_client")
    port = port_of(scraper.url)
    argv = ["demo", "--speed", "20", "--plain", "--metrics-port", str(port), "--seed", "4"]
    assert main_bounded(argv) == 0
    out = capsys.readouterr().out
    assert out.count(scraper.url) == 1
    assert out.startswith(f"metrics for Prometheus: {scraper.url}\n")
    # nothing outlives the demo: no server or request thread, the port is closed
    assert server_threads() == []
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    scraper.stop.set()
    scraper.thread.join(10)
    # scraped all along the run (at high speed it lasts about 1.5 s)
    pages = [p for p in scraper.pages if "db_client_operation_duration_seconds_count" in p]
    assert len(pages) >= 5
    first, last = samples(pages[0]), samples(pages[-1])
    ops = "db_client_operation_duration_seconds_count"
    assert 0 < first.get(ops, 0) < last[ops]
    assert last["db_client_operation_duration_seconds_sum"] > 0
    assert last["redis_client_connection_handoff_total"] >= 1
    # the gauges are read from the client at each scrape, while it is instrumented
    assert any(samples(p).get("db_client_connection_max") == 4 for p in pages)  # pool_size
    kinds = notifications(pages[-1])
    assert {"MIGRATING", "MIGRATED", "MOVING"} <= set(kinds) and min(kinds.values()) >= 1


def test_demo_cluster_cache_and_metrics(
    scraper: Scraper, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """--cache and --metrics-port work with --cluster too: every node's cache, summed; the
    cluster client's metrics (SMIGRATING, SMIGRATED) on the endpoint."""
    pytest.importorskip("prometheus_client")
    port = port_of(scraper.url)
    out_json = tmp_path / "cluster.json"
    argv = ["demo", "--cluster", "--cache", "--metrics-port", str(port), "--speed", "4"]
    argv += ["--tasks", "30", "--keys", "500", "--seed", "9", "--plain", "--json", str(out_json)]
    status = main_bounded(argv)
    out = capsys.readouterr().out
    assert server_threads() == []
    scraper.stop.set()
    scraper.thread.join(10)
    report = json.loads(out_json.read_text())
    assert out.count(scraper.url) == 1
    pages = [p for p in scraper.pages if "db_client_operation_duration_seconds_count" in p]
    assert pages
    assert samples(pages[-1])["db_client_operation_duration_seconds_count"] > 0
    assert {"SMIGRATING", "SMIGRATED"} <= set(notifications(pages[-1]))
    cache = report["cache"]
    assert cache["caches"] >= 3  # one per master the reads reached
    assert cache["hits"] > 0 and cache["reads_checked"] > 500 and cache["barriers"] > 5
    assert cache["flushes"].get("slot_moved", 0) >= 1
    assert report["commands"]["failed"] == 0 and report["data_check"]["intact"] is True
    stale = cache["stale_reads"]
    verdict = f"trio-maint demo --cluster: {'PASS' if stale == 0 else 'FAIL'} ({stale:,} stale"
    assert verdict in out
    assert status == (0 if stale == 0 else 1) and report["ok"] is (stale == 0)
    assert stale == 0, cache["stale_examples"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["demo", "--metrics-port", "70000"], "must be in 0..65535"),
        (["demo", "--metrics-port", "x"], "not a port number"),
    ],
)
def test_metrics_port_usage_errors(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_metrics_port_without_prometheus_client_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import fails
    monkeypatch.delitem(sys.modules, "trio_maint.prometheus", raising=False)
    assert main(["demo", "--metrics-port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "--metrics-port needs prometheus-client" in err
    assert ".venv/bin/pip install -e '.[prometheus]'" in err


def test_plot_without_matplotlib_says_the_same_install_form(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """--plot's hint is written as --metrics-port's: the checkout's .venv/bin/pip."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
    assert main(["demo", "--plot", str(tmp_path / "demo.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "--plot needs matplotlib (extra 'plot')" in err
    assert "(or, from a checkout: .venv/bin/pip install -e '.[plot]')" in err


def test_metrics_port_in_use_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("prometheus_client")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main_bounded(["demo", "--speed", "20", "--metrics-port", str(port)]) == 1
    err = capsys.readouterr().err
    assert err == f"trio-maint: error: port {port} is in use (choose another with --metrics-port)\n"


def test_a_silent_scrape_does_not_hold_the_demo(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A connection to the metrics port that sends nothing is dropped after
    REQUEST_TIMEOUT (quietly: a DEBUG record), so the server's shutdown, which joins its
    request threads, stays bounded."""
    pytest.importorskip("prometheus_client")
    import time

    from trio_maint._cli import metrics

    monkeypatch.setattr(metrics, "REQUEST_TIMEOUT", 0.3)
    with metrics.serve_metrics(0) as server:
        silent = socket.create_connection(("127.0.0.1", port_of(server.url)))
        with urllib.request.urlopen(server.url, timeout=5) as response:
            assert b"# HELP" not in response.read()  # nothing instrumented on it
        started = time.monotonic()
    # the shutdown waited for the silent connection's thread, at most REQUEST_TIMEOUT
    silent.close()
    assert time.monotonic() - started < 3
    assert server_threads() == []
    assert capsys.readouterr().err == ""
