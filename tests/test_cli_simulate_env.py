"""``trio-maint simulate`` and ``monitor`` and their environment: the default control
socket's directory (removed on the way out when the simulator created it), and the
password of ``REDISCLI_AUTH`` (used when the URL has none, never printed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from trio_maint.testing import RedisServer, free_port

#: Bound of each subprocess call and of each wait below (seconds).
STEP_TIMEOUT = 15.0


def _env(**changes: str | None) -> dict[str, str]:
    env = dict(os.environ)
    for key, value in changes.items():
        env.pop(key, None)
        if value is not None:
            env[key] = value
    return env


@contextmanager
def _simulate(*args: str, env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[str]]:
    """``trio-maint simulate ARGS`` until its control socket is up; SIGINT on the way out."""
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "trio_maint", "simulate", *args, "--plain"],
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
    try:
        deadline = time.monotonic() + STEP_TIMEOUT
        while "control socket" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(STEP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def server() -> Iterator[RedisServer]:
    with RedisServer() as srv:
        yield srv


@pytest.mark.parametrize("existed", [False, True])
def test_default_control_directory(server: RedisServer, tmp_path: Path, existed: bool) -> None:
    """Without ``--control`` (nor XDG_RUNTIME_DIR) the socket is in <tmp>/trio-maint-<uid>:
    Ctrl-C removes the directory the simulator created, and leaves one it found."""
    directory = tmp_path / f"trio-maint-{os.getuid()}"
    if existed:
        directory.mkdir(mode=0o700)
    env = _env(TMPDIR=str(tmp_path), XDG_RUNTIME_DIR=None)
    listen = f"127.0.0.1:{free_port()}"
    args = ("--listen", listen, "--upstream", f"127.0.0.1:{server.port}")
    with _simulate(*args, env=env, log=tmp_path / "log") as proc:
        assert (directory / "simulate.sock").is_socket()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(STEP_TIMEOUT) == 0
    assert not (directory / "simulate.sock").exists()
    assert directory.is_dir() is existed
    # a directory it created holding something else stays, with that file
    if not existed:
        with _simulate(*args, env=env, log=tmp_path / "log2") as proc:
            (directory / "keep").write_text("not the simulator's")
        assert proc.returncode == 0
        assert (directory / "keep").read_text() == "not the simulator's"
        assert not (directory / "simulate.sock").exists()


# ------------------------------------------------------------------ REDISCLI_AUTH

PW = "env-secret-7f3a"
WRONG = "wrong-secret-91c2"


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trio_maint", *args],
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT,
        env=env,
        check=False,
    )


@pytest.fixture
def locked() -> Iterator[RedisServer]:
    with RedisServer(extra_args=("--requirepass", PW)) as srv:
        yield srv


def test_monitor_takes_the_password_of_rediscli_auth(locked: RedisServer) -> None:
    """``monitor URL`` without a password in the URL uses $REDISCLI_AUTH's (the URL's wins);
    the password is never printed."""
    url = f"redis://127.0.0.1:{locked.port}"
    used = _cli("monitor", url, "--duration", "0.3", env=_env(REDISCLI_AUTH=PW))
    assert used.returncode == 0, used.stderr
    assert "does not support maintenance notifications" in used.stdout  # logged in
    wrong = _cli("monitor", url, "--duration", "0.3", env=_env(REDISCLI_AUTH=WRONG))
    assert wrong.returncode == 1 and "refused the credentials" in wrong.stderr, wrong.stderr
    with_url = f"redis://:{PW}@127.0.0.1:{locked.port}"
    url_wins = _cli("monitor", with_url, "--duration", "0.3", env=_env(REDISCLI_AUTH=WRONG))
    assert url_wins.returncode == 0, url_wins.stderr
    for result in (used, wrong, url_wins):
        assert PW not in result.stdout + result.stderr
        assert WRONG not in result.stdout + result.stderr


def test_simulate_checks_the_password_of_rediscli_auth(locked: RedisServer, tmp_path: Path) -> None:
    """``simulate --upstream`` checks $REDISCLI_AUTH's password at start (a refused one
    is a one-line error); a monitor through it, with the same variable, follows a MOVING.
    Neither prints the password."""
    listen = f"127.0.0.1:{free_port()}"
    args = ["--listen", listen, "--upstream", f"redis://default@127.0.0.1:{locked.port}"]
    args += ["--control", str(tmp_path / "c.sock")]
    refused = _cli("simulate", *args, env=_env(REDISCLI_AUTH=WRONG))
    assert refused.returncode == 1
    assert refused.stderr.startswith(
        f"trio-maint: error: the upstream redis://default@127.0.0.1:{locked.port} of "
        f"{listen} refused the password: WRONGPASS"
    ), refused.stderr
    assert WRONG not in refused.stdout + refused.stderr
    env = _env(REDISCLI_AUTH=PW)
    with _simulate(*args, env=env, log=tmp_path / "log"):
        monitor = subprocess.Popen(
            [sys.executable, "-m", "trio_maint", "monitor", f"redis://{listen}", "--count", "1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        try:
            deadline = time.monotonic() + STEP_TIMEOUT
            while (
                "1 with notifications on"
                not in _cli(
                    "simulate", "ctl", "status", "--control", str(tmp_path / "c.sock"), env=env
                ).stdout
            ):
                assert monitor.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
            ctl = [
                "simulate",
                "ctl",
                "moving",
                "--time",
                "1",
                "--control",
                str(tmp_path / "c.sock"),
            ]
            assert _cli(*ctl, env=env).returncode == 0
            out, _ = monitor.communicate(timeout=STEP_TIMEOUT)
        finally:
            if monitor.poll() is None:
                monitor.kill()
                monitor.wait()
        assert monitor.returncode == 0, out
        assert "MOVING seq=" in out and "stopped after 1 notification(s)" in out, out
        log = (tmp_path / "log").read_text()
    assert PW not in out + log and WRONG not in out + log
