"""A MaintenanceSimulator in a process of its own, driven over stdin/stdout.

The benchmarks run the simulator (a Python RESP proxy) in a separate process so that its
CPU time and memory are not counted as the client's. Protocol, one line each way:

* the child prints ``READY <port>`` once listening;
* ``moving <time> <host:port>`` injects MOVING (to every maintenance-enabled connection)
  and answers ``OK <seq>``;
* ``count`` answers ``OK <open connections> <maint-enabled connections>``;
* ``quit`` (or end of input) stops the child.

Run as ``python -m benchmarks._simproc --backend host:port``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from types import TracebackType
from typing import Self

import trio

from trio_maint.testing import MaintenanceSimulator


async def _serve(backend: str) -> None:
    async with MaintenanceSimulator(backend=backend) as sim:
        print(f"READY {sim.port}", flush=True)
        while True:
            line = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
            words = line.split()
            if not words or words[0] == "quit":
                return
            if words[0] == "moving":
                seq = await sim.inject_moving(time=int(words[1]), target=words[2])
                print(f"OK {seq}", flush=True)
            elif words[0] == "count":
                conns = sim.connections
                enabled = sum(1 for c in conns if c.maint_enabled)
                print(f"OK {len(conns)} {enabled}", flush=True)
            else:
                print(f"ERR unknown command {words[0]!r}", flush=True)


class SimProcess:
    """The client side: ``with SimProcess("127.0.0.1:6380") as sim: sim.port ...``.

    Blocking calls (the benchmarks call them between timed windows, or from a thread).
    ``cpu``: run the child on these CPUs only (``taskset -c``, e.g. ``"1"``)."""

    def __init__(self, backend: str, *, cpu: str | None = None) -> None:
        self.backend = backend
        self.cpu = cpu
        self.port = 0
        self.proc: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        argv = [sys.executable, "-m", "benchmarks._simproc", "--backend", self.backend]
        if self.cpu is not None:
            argv = ["taskset", "-c", self.cpu, *argv]
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready = self._readline()
        if not ready.startswith("READY "):
            self.__exit__(None, None, None)
            raise RuntimeError(f"simulator process did not start: {ready!r}")
        self.port = int(ready.split()[1])
        return self

    def _readline(self) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def command(self, line: str) -> list[str]:
        """Send one command and return the words of its answer after ``OK``."""
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self._readline()
        if not answer.startswith("OK"):
            raise RuntimeError(f"simulator answered {answer!r} to {line!r}")
        return answer.split()[1:]

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        proc = self.proc
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.write("quit\n")
                proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        self.proc = None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", required=True)
    args = parser.parse_args()
    trio.run(_serve, args.backend)


if __name__ == "__main__":
    main()
