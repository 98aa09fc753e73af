"""Real ``redis-server`` processes for tests: :class:`RedisServer`."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Self

import trio

from .._sansio.endpoint import format_host_port

__all__ = ["RedisServer", "RedisServerNotFoundError", "find_redis_server", "free_port"]


class RedisServerNotFoundError(RuntimeError):
    """No ``redis-server`` binary was found (Debian/Ubuntu package: ``redis-server``)."""


def find_redis_server(executable: str | None = None) -> str:
    """Locate the ``redis-server`` binary.

    :param executable: an explicit path; else ``$REDIS_SERVER``; else ``redis-server`` on PATH.
    :returns: the path to the binary.
    :raises RedisServerNotFoundError: none was found; the message names the Debian package.
    """
    from_env = os.environ.get("REDIS_SERVER")
    candidate = executable or from_env or "redis-server"
    found = shutil.which(candidate)
    if found is None and (executable or from_env):
        given = "the path given" if executable else "$REDIS_SERVER"
        if os.sep not in candidate:
            problem = "is not found on PATH"
        elif os.path.exists(candidate):
            problem = "is not an executable file"
        else:
            problem = "does not exist"
        raise RedisServerNotFoundError(
            f"redis-server not found: {given} ({candidate!r}) {problem}; point it at the "
            "redis-server binary (Debian's package `redis-server`: apt-get install redis-server)"
        )
    if found is None:
        raise RedisServerNotFoundError(
            f"redis-server not found ({candidate!r}): install Debian's package "
            "`redis-server` (apt-get install redis-server) or set $REDIS_SERVER to the binary"
        )
    return found


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that is free at the moment of the call."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServer:
    """A real ``redis-server`` process on a free loopback port (or a Unix socket).

    Persistence is off (``--save ''``, ``--appendonly no``) and its working directory is a
    fresh temporary directory. Usable as a sync context manager (for pytest session
    fixtures) and as an async one; both wait until the server answers ``PING`` and stop
    (and reap) the process on exit, also when the body raised.

    :param port: TCP port; ``None`` picks a free one.
    :param host: the loopback address to bind (default ``"127.0.0.1"``).
    :param unix_socket: also listen on a Unix socket (path in :attr:`unix_path`).
    :param extra_args: more ``redis-server`` arguments, e.g. ``("--requirepass", "pw")``.
    :param replica_of: a server to replicate (``--replicaof host port``).
    :param executable: path of the binary (default: ``$REDIS_SERVER`` or PATH).
    :param startup_timeout: seconds (``float``) to wait for ``PING`` to answer.
    :raises RedisServerNotFoundError: the binary is missing.
    :raises RuntimeError: the server exited or did not answer in time.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        host: str = "127.0.0.1",
        unix_socket: bool = False,
        extra_args: Sequence[str] = (),
        replica_of: RedisServer | tuple[str, int] | None = None,
        executable: str | None = None,
        startup_timeout: float = 10.0,
    ) -> None:
        self.executable = find_redis_server(executable)
        self.host = host
        self.port = port if port is not None else free_port(host)
        self._want_unix = unix_socket
        self.extra_args = tuple(extra_args)
        self.replica_of = replica_of
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self._tmpdir: tempfile.TemporaryDirectory[str] | None = None
        self.unix_path: str | None = None

    @property
    def url(self) -> str:
        """``redis://host:port`` of this server."""
        return f"redis://{format_host_port(self.host, self.port)}"

    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)`` of this server."""
        return (self.host, self.port)

    def _command(self) -> list[str]:
        assert self._tmpdir is not None
        args = [
            self.executable,
            "--port",
            str(self.port),
            "--bind",
            self.host,
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            self._tmpdir.name,
            "--daemonize",
            "no",
            "--loglevel",
            "warning",
            "--logfile",
            os.path.join(self._tmpdir.name, "redis.log"),
        ]
        if self._want_unix:
            self.unix_path = os.path.join(self._tmpdir.name, "redis.sock")
            args += ["--unixsocket", self.unix_path, "--unixsocketperm", "700"]
        if self.replica_of is not None:
            host, port = (
                self.replica_of.address
                if isinstance(self.replica_of, RedisServer)
                else self.replica_of
            )
            args += ["--replicaof", host, str(port)]
        args += list(self.extra_args)
        return args

    def start(self) -> None:
        """Start the process (non-blocking); see :meth:`wait_ready`."""
        if self.process is not None:
            raise RuntimeError("this RedisServer is already started")
        self._tmpdir = tempfile.TemporaryDirectory(prefix="trio-maint-redis-")
        self.process = subprocess.Popen(
            self._command(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def _ping_once(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5) as sock:
                sock.sendall(b"*1\r\n$4\r\nPING\r\n")
                data = b""
                while not data.endswith(b"\r\n"):
                    chunk = sock.recv(64)
                    if not chunk:
                        return False
                    data += chunk
                # "-LOADING" or "-NOAUTH" also prove the server is up and serving.
                return data.startswith((b"+PONG", b"-NOAUTH", b"-MASTERDOWN"))
        except OSError:
            return False

    def _check_alive(self) -> None:
        assert self.process is not None
        if self.process.poll() is not None:
            err = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
            log = self.read_log()
            self._cleanup()
            raise RuntimeError(
                f"redis-server exited with status {self.process.returncode}: {err.strip()} "
                f"{log.strip()}".strip()
            )

    def read_log(self) -> str:
        """The server's log file so far (``str``; empty when there is none)."""
        if self._tmpdir is None:
            return ""
        try:
            with open(os.path.join(self._tmpdir.name, "redis.log"), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def wait_ready(self) -> None:
        """Block until the server answers PING.

        :raises RuntimeError: it exited, or ``startup_timeout`` seconds passed.
        """
        deadline = time.monotonic() + self.startup_timeout
        while True:
            self._check_alive()
            if self._ping_once():
                return
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server on port {self.port} did not answer PING")
            time.sleep(0.02)

    async def wait_ready_async(self) -> None:
        """As :meth:`wait_ready`, without blocking the Trio run loop."""
        deadline = trio.current_time() + self.startup_timeout
        while True:
            self._check_alive()
            if await trio.to_thread.run_sync(self._ping_once):
                return
            if trio.current_time() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server on port {self.port} did not answer PING")
            await trio.sleep(0.02)

    def stop(self) -> None:
        """Terminate the process and reap it (kill after 5 s); idempotent."""
        proc = self.process
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._cleanup()

    def _cleanup(self) -> None:
        proc = self.process
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None

    def __enter__(self) -> Self:
        self.start()
        self.wait_ready()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        self.start()
        try:
            await self.wait_ready_async()
        except BaseException:
            self.stop()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self.stop)
