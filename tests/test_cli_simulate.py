"""``trio-maint simulate`` as a user runs it: the CLI in a subprocess in front of a real
redis-server, a second endpoint on 127.0.0.2 with the same port as MOVING's target, driven
by ``trio-maint simulate ctl`` in other subprocesses; a redis-py client (its own
maintenance handling) rides a MOVING through it."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trio_maint.testing import RedisServer, free_port

redis = pytest.importorskip("redis")
maint = pytest.importorskip("redis.maint_notifications")
redis_retry = pytest.importorskip("redis.retry")
redis_backoff = pytest.importorskip("redis.backoff")

#: Bound of each subprocess call and of each wait below (seconds).
STEP_TIMEOUT = 15.0


def _cli(*args: str, timeout: float = STEP_TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trio_maint", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class Simulate:
    """A running ``trio-maint simulate`` subprocess and its ``ctl``."""

    def __init__(self, proc: subprocess.Popen[str], control: Path, log: Path, port: int):
        self.proc = proc
        self.control = control
        self.log = log
        self.port = port

    def ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return _cli("simulate", "ctl", *args, "--control", str(self.control))

    def status(self) -> dict[str, Any]:
        result = self.ctl("status", "--json")
        assert result.returncode == 0, result.stderr
        reply: dict[str, Any] = json.loads(result.stdout)
        assert reply["ok"] is True
        return dict(reply["result"])

    def endpoint(self, listen: str) -> dict[str, Any]:
        return next(e for e in self.status()["endpoints"] if e["listen"] == listen)

    def text(self) -> str:
        return self.log.read_text()


def _free_on_both() -> int:
    for _ in range(20):
        port = free_port("127.0.0.1")
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.2", port))
            except OSError:
                continue
        return port
    raise AssertionError("no port free on both 127.0.0.1 and 127.0.0.2")


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer() as srv:
        yield srv


@pytest.fixture
def simulate(server: RedisServer, tmp_path: Path) -> Iterator[Simulate]:
    with _running(tmp_path, server.port, server.port) as sim:
        yield sim


@contextlib.contextmanager
def _running(tmp_path: Path, upstream_port: int, target_port: int) -> Iterator[Simulate]:
    """``trio-maint simulate`` listening on 127.0.0.1:P in front of ``upstream_port``, with
    a target endpoint on 127.0.0.2:P in front of ``target_port``."""
    port = _free_on_both()
    control = tmp_path / "ctl.sock"
    log = tmp_path / "simulate.log"
    upstream = f"redis://:not-a-real-secret@127.0.0.1:{upstream_port}"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "trio_maint",
                "simulate",
                "--listen",
                f"127.0.0.1:{port}",
                "--upstream",
                upstream,
                "--target",
                f"127.0.0.2:{port}=redis://127.0.0.1:{target_port}",
                "--control",
                str(control),
                "--plain",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    sim = Simulate(proc, control, log, port)
    try:
        deadline = time.monotonic() + STEP_TIMEOUT
        while "control socket" not in sim.text():
            assert proc.poll() is None, sim.text()
            assert time.monotonic() < deadline, sim.text()
            time.sleep(0.05)
        yield sim
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(STEP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class Writer:
    """A redis-py client (sync, RESP3, maintenance handling on, no retries) writing
    ``w:<i> = i`` in a loop in a thread, counting failures."""

    def __init__(self, port: int) -> None:
        cfg = maint.MaintNotificationsConfig(enabled=True, relaxed_timeout=5)
        self.client = redis.Redis(
            host="127.0.0.1",
            port=port,
            protocol=3,
            maint_notifications_config=cfg,
            retry=redis_retry.Retry(redis_backoff.NoBackoff(), 0),
            socket_timeout=5,
        )
        self.acked = 0
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            try:
                self.client.set(f"w:{i}", i)
            except Exception as exc:  # every failure counts, whatever its type
                self.errors.append(repr(exc))
            else:
                self.acked = i + 1
                i += 1
            time.sleep(0.002)

    def __enter__(self) -> Writer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(STEP_TIMEOUT)
        self.client.close()


def _wait(predicate: Any, what: str) -> None:
    deadline = time.monotonic() + STEP_TIMEOUT
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_redispy_follows_a_moving_driven_by_ctl(simulate: Simulate, server: RedisServer) -> None:
    a, b = f"127.0.0.1:{simulate.port}", f"127.0.0.2:{simulate.port}"
    with Writer(simulate.port) as writer:
        _wait(lambda: simulate.endpoint(a)["maint_enabled"] >= 1, "redis-py to opt in")
        _wait(lambda: writer.acked >= 50, "writes before the move")
        result = simulate.ctl(
            "scenario", "moving", "--time", "2", "--grace", "0.5", "--wait", "--json"
        )
        assert result.returncode == 0, result.stderr
        reply = json.loads(result.stdout)
        assert [s["label"] for s in reply["result"]["steps"]] == [
            "MOVING",
            "null-endpoint clients reconnect (still open)",
            "old endpoint closes",
        ]
        before = writer.acked
        _wait(lambda: writer.acked >= before + 50, "writes after the move")
    assert writer.errors == []
    # redis-py followed MOVING to the other loopback address (same port)
    assert simulate.endpoint(b)["accepted"] >= 1
    # every acknowledged write is on the server (both endpoints forward to it)
    direct = redis.Redis(host="127.0.0.1", port=server.port)
    try:
        keys = [f"w:{i}" for i in range(writer.acked)]
        values = direct.mget(keys)
    finally:
        direct.close()
    assert values == [str(i).encode() for i in range(writer.acked)]
    log = simulate.text()
    assert re.search(r"scenario step 'MOVING': \d+", log)  # with its sequence id
    assert "scenario moving done" in log
    assert "not-a-real-secret" not in log


def test_redispy_rides_a_migrate_there_and_back_driven_by_ctl(tmp_path: Path) -> None:
    """``ctl scenario migrate``: the data really moves from A's server to B's and back,
    with a redis-py client writing all along: 0 errors, every acknowledged write on the
    server holding the data at the end."""
    with RedisServer() as a_server, RedisServer() as b_server:
        with _running(tmp_path, a_server.port, b_server.port) as sim:
            a, b = f"127.0.0.1:{sim.port}", f"127.0.0.2:{sim.port}"
            with Writer(sim.port) as writer:
                _wait(lambda: sim.endpoint(a)["maint_enabled"] >= 1, "redis-py to opt in")
                _wait(lambda: writer.acked >= 50, "writes before the move")
                there = sim.ctl("scenario", "migrate", "--time", "2", "--wait", "--json")
                assert there.returncode == 0, there.stderr
                a_url, b_url = f"redis://:***@127.0.0.1:{a_server.port}", b_server.url
                # A's data and A's clients are on B's server now
                assert json.loads(there.stdout)["message"].endswith(f"done (now -> {b_url})")
                assert sim.endpoint(a)["upstream"] == b_url
                assert sim.endpoint(a)["configured_upstream"] == a_url
                middle = writer.acked
                _wait(lambda: writer.acked >= middle + 50, "writes on B")
                back = sim.ctl("scenario", "migrate", "--on", b, "--to", a, "--time", "2", "--wait")
                assert back.returncode == 0, back.stderr
                # the data went to A's own server, and both endpoints forward there
                assert back.stdout == (
                    f"{b}: scenario migrate to {a} (endpoint -> {a_url}) done (now -> {a_url})\n"
                )
                end = writer.acked
                _wait(lambda: writer.acked >= end + 50, "writes back on A")
            # B's server is A's replica now: status and MOVING name the server reached
            status = sim.ctl("status")
            assert (
                f"{b} -> 127.0.0.1:{a_server.port} (upstream {a_url}; started in front of "
                f"{b_url}): "
            ) in status.stdout, status.stdout
            assert f"{a} -> 127.0.0.1:{a_server.port} (upstream {a_url}): " in status.stdout
            moving = sim.ctl("moving", "--to", b, "--time", "1")
            assert f" to {b} (endpoint -> {a_url}), time 1 s" in moving.stdout, moving.stdout
            assert str(b_server.port) not in moving.stdout
            assert "not-a-real-secret" not in sim.text() + status.stdout
            assert writer.errors == []
            assert writer.acked > middle > 50
            direct = redis.Redis(host="127.0.0.1", port=a_server.port)
            try:
                values = direct.mget([f"w:{i}" for i in range(writer.acked)])
                role = direct.execute_command("ROLE")[0]
            finally:
                direct.close()
            assert role in (b"master", "master")
            assert values == [str(i).encode() for i in range(writer.acked)]


def test_ctl_injections_status_and_errors(simulate: Simulate) -> None:
    a, b = f"127.0.0.1:{simulate.port}", f"127.0.0.2:{simulate.port}"
    status = simulate.status()
    assert [e["listen"] for e in status["endpoints"]] == [a, b]
    assert status["endpoints"][0]["upstream"].startswith("redis://:***@")
    assert status["scenario"] is None
    with socket.create_connection(("127.0.0.1", simulate.port), timeout=5) as conn:
        conn.sendall(b"CLIENT MAINT_NOTIFICATIONS ON moving-endpoint-type internal-ip\r\n")
        assert conn.recv(100) == b"+OK\r\n"
        for args, wire in [
            (("migrating", "--time", "3"), b"MIGRATING"),
            (("migrated",), b"MIGRATED"),
            (("failing-over",), b"FAILING_OVER"),
            (("failed-over", "--seq", "77"), b"FAILED_OVER"),
            (("moving", "--time", "9"), b"MOVING"),
        ]:
            result = simulate.ctl(*args, "--json")
            assert result.returncode == 0, result.stderr
            reply = json.loads(result.stdout)
            assert reply["result"]["sent"] == 1
            frame = conn.recv(200)
            assert wire in frame
        # MOVING defaulted to the first --target: the other loopback address, same port
        assert f"{b}".encode() in frame
        assert b"$1\r\n9\r\n" in frame or b":9\r\n" in frame
    # refused requests: exit 1 with one line
    bad = simulate.ctl("migrated", "--on", "127.0.0.9:1")
    assert bad.returncode == 1
    assert "no endpoint listens on 127.0.0.9:1" in bad.stderr
    busy = simulate.ctl("scenario", "failover", "--lead", "5")
    assert busy.returncode == 0, busy.stderr
    again = simulate.ctl("scenario", "migration")
    assert again.returncode == 1 and "is running" in again.stderr
    assert simulate.status()["scenario"]["name"] == "failover"
    # a usage error never reaches the simulator
    usage = simulate.ctl("scenario", "nonsense")
    assert usage.returncode == 2
    # a malformed line on the control socket gets an error reply, the socket stays usable
    with socket.socket(socket.AF_UNIX) as raw:
        raw.settimeout(5)
        raw.connect(str(simulate.control))
        raw.sendall(b"not json\n" + b'{"op": "moving", "time": -1}\n' + b'{"op":"status"}\n')
        lines = b""
        while lines.count(b"\n") < 3:
            chunk = raw.recv(65536)
            assert chunk
            lines += chunk
    replies = [json.loads(line) for line in lines.splitlines()]
    assert [r["ok"] for r in replies] == [False, False, True]
    assert "JSON" in replies[0]["error"] and "'time'" in replies[1]["error"]


def test_a_reader_that_stops_early_ends_ctl_quietly(simulate: Simulate) -> None:
    """``ctl status --json | head -c 600``: stdout closed before the reply is printed
    ends ``ctl`` with status 141 and no BrokenPipeError traceback."""
    command = ["simulate", "ctl", "status", "--json", "--control", str(simulate.control)]
    with subprocess.Popen(
        [sys.executable, "-m", "trio_maint", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        proc.stdout.close()  # the reader is gone before ctl writes
        try:
            _, err = proc.communicate(timeout=STEP_TIMEOUT)
        finally:
            proc.kill()
    assert proc.returncode == 141, err
    assert err == ""


@pytest.mark.parametrize(
    "where",
    [
        ("simulate", "ctl", "status", "--control", "{}"),
        ("simulate", "ctl", "--control", "{}", "status"),  # before the command, too
        ("simulate", "--control", "{}", "ctl", "status"),
        ("simulate", "ctl", "--control", "{}", "scenario", "moving"),
    ],
    ids=["after", "before the command", "before ctl", "before scenario"],
)
def test_ctl_without_a_simulator(tmp_path: Path, where: tuple[str, ...]) -> None:
    path = str(tmp_path / "none.sock")
    result = _cli(*(a.format(path) for a in where))
    assert result.returncode == 1, result.stderr
    assert f"no simulator is running on the control socket {path} " in result.stderr
    assert "Traceback" not in result.stderr


def test_simulate_usage_errors(tmp_path: Path) -> None:
    missing = _cli("simulate", "--listen", "127.0.0.1:1")
    assert missing.returncode == 2 and "--upstream" in missing.stderr
    tls = _cli("simulate", "--listen", "127.0.0.1:1", "--upstream", "rediss://:pw@h:1")
    assert tls.returncode == 2 and "rediss://:***@h:1" in tls.stderr
    assert "pw" not in tls.stderr
    port = free_port()
    dead = _cli(
        "simulate",
        "--listen",
        f"127.0.0.1:{free_port()}",
        "--upstream",
        f"127.0.0.1:{port}",
        "--control",
        str(tmp_path / "c.sock"),
    )
    assert dead.returncode == 1 and "cannot reach the upstream" in dead.stderr
    # why, in the OS's words (as monitor says it), not only "all attempts ... failed"
    assert dead.stderr.rstrip().endswith(f": {os.strerror(errno.ECONNREFUSED)}"), dead.stderr


def test_migrate_after_moving_is_refused_in_a_sentence(simulate: Simulate) -> None:
    """The refusal documented in docs/simulate.md names the endpoints by address, not
    by a ValueError of simulator reprs."""
    b = f"127.0.0.2:{simulate.port}"
    moving = simulate.ctl("scenario", "moving", "--time", "1", "--grace", "0.1", "--wait")
    assert moving.returncode == 0, moving.stderr
    refused = simulate.ctl("scenario", "migrate", "--wait")
    assert refused.returncode == 1
    assert refused.stderr == (
        f"trio-maint: error: scenario migrate failed: the simulator on 127.0.0.1:"
        f"{simulate.port} already forwards to the one on {b} (after a MOVING): the data is "
        "on the target's server; migrate from the target to move it back\n"
    )


def test_sigint_stops_cleanly(simulate: Simulate) -> None:
    with socket.create_connection(("127.0.0.1", simulate.port), timeout=5) as conn:
        conn.sendall(b"PING\r\n")
        assert conn.recv(100) == b"+PONG\r\n"
        simulate.proc.send_signal(signal.SIGINT)
        assert simulate.proc.wait(STEP_TIMEOUT) == 0
        conn.settimeout(5)
        assert conn.recv(100) == b""  # closed by the simulator on its way out
    assert not os.path.exists(simulate.control)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", simulate.port), timeout=5).close()
    log = simulate.text()
    assert "SIGINT: stopping" in log and log.rstrip().endswith("stopped")
    assert "Traceback" not in log


# ------------------------------------------------------------------ node-redis (optional)

#: A node-redis client writing ``w:<i>`` in a loop for ``ms`` milliseconds; prints
#: ``{"acked": N, "errors": [...]}``.
NODE_WRITER = """
const { createClient } = require('redis');
const [port, ms] = [Number(process.argv[1]), Number(process.argv[2])];
(async () => {
  const errors = [];
  const client = createClient({
    url: `redis://127.0.0.1:${port}`,
    RESP: 3,
    maintNotifications: 'enabled',
    maintRelaxedCommandTimeout: 5000,
  });
  client.on('error', (e) => errors.push(String(e)));
  await client.connect();
  let acked = 0;
  const end = Date.now() + ms;
  while (Date.now() < end) {
    try { await client.set(`w:${acked}`, String(acked)); acked++; }
    catch (e) { errors.push(String(e)); }
    await new Promise((r) => setTimeout(r, 2));
  }
  await client.close();
  console.log(JSON.stringify({ acked, errors }));
})();
"""


@pytest.fixture
def node_redis_dir() -> str:
    """A directory where ``require('redis')`` works ($TRIO_MAINT_NODE_REDIS, else the
    current one), or skip."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    where = os.environ.get("TRIO_MAINT_NODE_REDIS", os.getcwd())
    probe = subprocess.run(
        [node, "-e", "require('redis')"], cwd=where, capture_output=True, timeout=30, check=False
    )
    if probe.returncode != 0:
        pytest.skip(
            f"node-redis is not installed in {where} (npm install redis there, or set "
            "TRIO_MAINT_NODE_REDIS to a directory where it is)"
        )
    return where


def test_node_redis_follows_a_moving_driven_by_ctl(
    node_redis_dir: str, simulate: Simulate, server: RedisServer
) -> None:
    where = node_redis_dir
    b = f"127.0.0.2:{simulate.port}"
    node = subprocess.Popen(
        ["node", "-e", NODE_WRITER, str(simulate.port), "4000"],
        cwd=where,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait(
            lambda: simulate.endpoint(f"127.0.0.1:{simulate.port}")["maint_enabled"] >= 1,
            "node-redis to opt in",
        )
        result = simulate.ctl("scenario", "moving", "--time", "2", "--grace", "0.5", "--wait")
        assert result.returncode == 0, result.stderr
        out, err = node.communicate(timeout=STEP_TIMEOUT)
    finally:
        if node.poll() is None:
            node.kill()
            node.wait()
    assert node.returncode == 0, err
    report = json.loads(out)
    assert report["errors"] == []
    assert report["acked"] > 0
    assert simulate.endpoint(b)["accepted"] >= 1
    direct = redis.Redis(host="127.0.0.1", port=server.port)
    try:
        values = direct.mget([f"w:{i}" for i in range(report["acked"])])
    finally:
        direct.close()
    assert values == [str(i).encode() for i in range(report["acked"])]
