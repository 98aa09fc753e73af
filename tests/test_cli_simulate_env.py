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
