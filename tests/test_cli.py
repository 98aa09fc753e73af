"""The ``trio-maint`` command line: the demo in compressed form, the monitor, errors."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from trio_maint._cli.main import main
from trio_maint._cli.monitor import run_monitor
from trio_maint.testing import (
    MaintenanceSimulator,
    RedisServer,
    RedisServerNotFoundError,
    find_redis_server,
)

TIMEOUT = 60.0


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trio_maint", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, **(env or {})},
        check=False,
    )


@pytest.mark.parametrize("scenario", ["moving", "none"])
def test_demo_json_rides_through_a_real_move(scenario: str) -> None:
    result = run_cli("demo", "--speed", "20", "--json", "--scenario", scenario, "--seed", "1")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert report["scenario"] == scenario
    assert report["commands"]["total"] > 100
    assert report["commands"]["failed"] == 0, report["commands"]["errors"]
    handoffs = report["handoffs"]
    assert handoffs["failed"] == 0
    assert handoffs["connections_moved"] >= report["pool_size"]
    # one completed handoff per connection told to move: with a null endpoint too, where
    # the connections reconnect to A's address, which leads to B and sends no MOVING again
    assert handoffs["completed"] == handoffs["connections_moved"]
    assert handoffs["closed_before_handoff"] == 0
    assert f"{handoffs['completed']} completed, 0 failed (" in result.stderr
    check = report["data_check"]
    assert check["intact"] is True
    assert check["server"] == "B"
    assert check["keys_checked"] > 0 and check["missing"] == 0 and check["stale"] == 0
    assert check["counters_checked"] == report["tasks"] and check["counters_short"] == 0
    names = [n["name"] for n in report["notifications"]]
    assert names == ["MIGRATING", "MIGRATED", "MOVING"]
    for phase in ("before", "during", "after"):
        assert report["latency"][phase]["count"] > 0
    # the live view went to stderr, in plain text (not a TTY)
    assert "MOVING seq=" in result.stderr
    assert "trio-maint demo: PASS" in result.stderr
    # handed-off connections stay relaxed for post_handoff_relaxed_duration, said so
    relaxed = report["relaxed"]
    assert relaxed["post_handoff_seconds"] == 1.0  # 20 s divided by --speed 20
    assert relaxed["peak"] >= 1
    assert (
        "a connection handed off keeps relaxed timeouts 1 s after its handoff "
        "(MaintConfig.post_handoff_relaxed_duration" in result.stderr
    )


def test_demo_cluster_json_and_plot_ride_through_a_slot_migration(tmp_path: Path) -> None:
    """--cluster takes the standalone demo's options: --json, --plot, --speed, --mix,
    --seed; the report and the verdict line are the standalone demo's."""
    pytest.importorskip("matplotlib")
    png = tmp_path / "cluster.png"
    result = run_cli(
        *("demo", "--cluster", "--tasks", "30", "--keys", "500", "--json"),
        *("--plot", str(png), "--speed", "2", "--mix", "50:40:10", "--seed", "7"),
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert report["scenario"] == "cluster-slot-migration"
    assert report["speed"] == 2 and report["mix"] == {"reads": 50, "writes": 40, "pipelines": 10}
    assert report["commands"]["total"] > 100
    assert report["commands"]["failed"] == 0, report["commands"]["errors"]
    assert report["keys_moved"] > 0
    assert report["smigrated_refreshes"] >= 1
    check = report["data_check"]
    assert check["intact"] is True and check["keys_checked"] > 0
    assert check["missing"] == check["stale"] == check["counters_short"] == 0
    assert [n["name"] for n in report["notifications"]] == ["SMIGRATING", "SMIGRATED"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the live view and the report went to stderr, in the standalone demo's style
    err = result.stderr
    assert "SMIGRATING seq=" in err and "server: SMIGRATED" in err
    assert "trio-maint demo --cluster: PASS" in err
    assert f"{report['commands']['total']:,} total, 0 failed" in err
    assert "{" not in err and "OK\n" not in err


@pytest.mark.parametrize("scenario", ["failover", "unreachable"])
def test_demo_other_scenarios(scenario: str, tmp_path: Path) -> None:
    out = os.path.join(str(tmp_path), "report.json")
    result = run_cli("demo", "--speed", "20", "--json", out, "--scenario", scenario)
    assert result.returncode == 0, result.stderr
    with open(out) as f:
        report = json.load(f)
    assert report["commands"]["failed"] == 0
    assert report["data_check"]["intact"] is True
    if scenario == "unreachable":
        assert report["handoffs"]["completed"] == 0
        assert report["handoffs"]["failed"] >= 1
        (breaker,) = report["breakers"]  # it opened and kept traffic on A
        assert breaker["opened"] >= 1
        # the view says so in the order it happened: the breaker opens (after 5 failed
        # dials, new connections' included), then the handoffs it refuses fail
        lines = result.stdout.splitlines()
        opened = [i for i, line in enumerate(lines) if "is now open: 5 dials to it" in line]
        refused = [i for i, line in enumerate(lines) if "FAILED: CircuitBreakerOpenError" in line]
        assert len(opened) == 1 and refused and opened[0] < min(refused), result.stdout
        # new connections go to A while the breaker is open, not to the dead target
        assert "new ones dial unreachable" not in result.stdout
        assert "new ones dial A 127.0.0.1:" in result.stdout
        assert "(the breaker of unreachable 127.0.0.1:" in result.stdout
    else:
        assert [n["name"] for n in report["notifications"]] == ["FAILING_OVER", "FAILED_OVER"]
        # the time the notification carries is whole seconds (at least 1); the view says
        # when the work really starts at --speed 20 (2 s / 20)
        assert "FAILING_OVER seq=" in result.stdout
        assert "sent (announced time 1 s; work starts in 0.1 s)" in result.stdout
    assert "trio-maint demo: PASS" in result.stdout


def test_demo_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = os.path.join(str(tmp_path), "demo.png")
    result = run_cli("demo", "--speed", "40", "--plot", png, "--tasks", "2")
    assert result.returncode == 0, result.stderr
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["monitor", "http://localhost"], "invalid Redis URL scheme"),
        (["monitor", "redis://localhost:99999"], "port"),
        (["demo", "--tasks", "0"], "--tasks must be >= 1"),
        (["demo", "--speed", "20", "--duration", "0.1"], "--duration 0.1 s is too short"),
    ],
)
def test_usage_errors_are_one_line_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("trio-maint: error: ") and message in err


def test_bad_url_from_the_command_line() -> None:
    result = run_cli("monitor", "not-a-url")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_redis_server_missing_is_one_line() -> None:
    result = run_cli("demo", "--speed", "20", env={"REDIS_SERVER": "/nonexistent/redis-server"})
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1, result.stderr
    assert "redis-server not found" in result.stderr and "apt-get install" in result.stderr
    # $REDIS_SERVER was set: the message says what is wrong with it
    assert "$REDIS_SERVER ('/nonexistent/redis-server') does not exist" in result.stderr


def test_redis_server_not_executable(tmp_path: Path) -> None:
    plain = tmp_path / "redis-server"
    plain.write_text("")
    with pytest.raises(RedisServerNotFoundError, match="is not an executable file"):
        find_redis_server(str(plain))


def test_port_in_use_is_one_line() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = run_cli("demo", "--speed", "20", "--port", str(port))
    assert result.returncode == 1
    assert (
        result.stderr == f"trio-maint: error: port {port} is in use (choose another with --port)\n"
    )


def test_unreachable_server_is_one_line() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connections are refused
        result = run_cli("monitor", f"redis://127.0.0.1:{port}")
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "cannot reach" in result.stderr


@pytest.mark.trio
async def test_monitor_on_plain_redis_says_unsupported(redis_server: RedisServer) -> None:
    out = io.StringIO()
    with trio.fail_after(TIMEOUT):
        status = await run_monitor(redis_server.url, out, 0.05, 5.0)
    assert status == 0
    text = out.getvalue()
    assert "does not support maintenance notifications" in text
    assert text.count("\n") == 1


@pytest.mark.trio
async def test_monitor_prints_injected_notifications(redis_server: RedisServer) -> None:
    out = io.StringIO()
    with trio.fail_after(TIMEOUT):
        async with (
            MaintenanceSimulator(redis_server) as sim,
            MaintenanceSimulator(redis_server) as target,
            trio.open_nursery() as nursery,
        ):

            async def inject() -> None:
                await sim.wait_for_connections(1, maint_enabled=True)
                await sim.inject_migrating(time=2, seq_id=7)
                await sim.inject_migrated(seq_id=8)
                await sim.inject_moving(time=2, seq_id=9, target=target)

            nursery.start_soon(inject)
            status = await run_monitor(sim.url, out, 0.05, 20.0, 3)
    assert status == 0
    lines = out.getvalue().splitlines()
    assert "monitoring 127.0.0.1:" in lines[0]
    text = "\n".join(lines)
    assert "MIGRATING seq=7 -> timeouts relaxed to at least 10 s" in text
    assert "MIGRATED seq=8 -> timeouts restored" in text
    assert f"MOVING seq=9 time=2s endpoint=127.0.0.1:{target.port} -> handing off" in text
    assert "stopped after 3 notification(s)" in lines[-1]
    for line in lines:
        assert line[:4].isdigit() and "T" in line.split()[0]  # a timestamp first


def test_monitor_from_the_command_line(redis_server: RedisServer) -> None:
    result = run_cli("monitor", redis_server.url, "--duration", "1")
    assert result.returncode == 0, result.stderr
    assert "does not support maintenance notifications" in result.stdout


@pytest.mark.trio
async def test_monitor_stops_cleanly_on_ctrl_c(redis_server: RedisServer, tmp_path: Path) -> None:
    out_path, err_path = tmp_path / "out.txt", tmp_path / "err.txt"
    async with MaintenanceSimulator(redis_server) as sim:
        with out_path.open("w") as out_f, err_path.open("w") as err_f:
            proc = await trio.lowlevel.open_process(
                [sys.executable, "-m", "trio_maint", "monitor", sim.url, "--interval", "0.05"],
                stdout=out_f,
                stderr=err_f,
            )
            try:
                with trio.fail_after(TIMEOUT):
                    await sim.wait_for_connections(1, maint_enabled=True)
                    await sim.inject_migrating(time=2, seq_id=41)
                    await trio.sleep(0.5)
                    proc.send_signal(signal.SIGINT)
                    status = await proc.wait()
            finally:
                if proc.returncode is None:
                    proc.kill()
                    with trio.CancelScope(shield=True):
                        await proc.wait()
    out, err = out_path.read_text(), err_path.read_text()
    assert status == 0, err
    assert "MIGRATING seq=41 -> timeouts relaxed" in out
    assert out.splitlines()[-1].endswith("stopped after 1 notification(s)")
    assert err == ""
