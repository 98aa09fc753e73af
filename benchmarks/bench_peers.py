"""Peers side by side (issue 18): trio_maint (as it is by default, and as
``trio_maint-auto`` with ``auto_pipeline=True``) against coredis on Trio, valkey-glide
(asyncio), redis-py asyncio (hiredis), a bare Trio+hiredis loop and a bare asyncio+hiredis
loop, with redis-benchmark for reference, on one redis-server in one run.

Cases (ops = commands; pool = the client's connections, one per task for the bare loops):

* ``seq_get``: 1 task, sequential GET of 16 B;
* ``pool50_setget``: 50 tasks SET then GET of 16 B, pool of 50;
* ``pipeline100``: 1 task, non-transactional pipelines of 100 GET;
* ``mixed50``: 50 tasks, pool of 50, each repeating 9 single commands (GET, SET, GET, ...)
  and 1 pipeline of 10 GET: 10 % of the calls are pipelines of 10;
* ``big_get``: 1 task, GET of a 100 KiB value;
* ``big_get10``: 10 tasks GET of the 100 KiB value, pool of 10.

Each client runs in a process of its own (``benchmarks/_peers.py``), started once and
driven over a pipe, so its ``time.process_time()`` is its CPU alone (valkey-glide's Rust
threads included); redis-benchmark's is its ``RUSAGE_CHILDREN`` time. Within each round
every case runs every client one after the other, the order rotated each round, so drift
on a shared machine hits every client alike; ratios are taken per round (trio_maint ÷ the
peer of the same round) and reported as median and spread. ``--pin`` puts redis-server on
the first CPU and every client (and redis-benchmark) on the last. A client whose library
does not install or import here is skipped with the reason, and the rest measured.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Self

import hiredis

from trio_maint.testing import RedisServer

from ._common import fmt, print_table, summarize, write_json
from ._common import parse_args as common_parse_args
from ._peers import BIG_KEY, BIG_SIZE, CASES, CLIENTS, KEY, PIPELINE, VALUE

#: The peers trio_maint is divided by, in the order of the tables.
PEERS = ("coredis", "valkey-glide", "redis-py", "bare-trio", "bare-asyncio", "redis-benchmark")
#: trio_maint as it is by default, and with ``auto_pipeline=True``: each gets its tables of
#: ratios to the peers.
OURS = ("trio_maint", "trio_maint-auto")
REDIS_BENCHMARK = "redis-benchmark"


class ClientProcess:
    """One client's process: ``with ClientProcess("coredis", port) as c: c.run(case, s)``.

    ``c.info`` is what the child said of itself, ``c.skipped`` why it cannot run here."""

    def __init__(self, client: str, port: int, *, cpu: int | None = None) -> None:
        self.client = client
        self.port = port
        self.cpu = cpu
        self.proc: subprocess.Popen[str] | None = None
        self.info: dict[str, Any] = {}
        self.skipped: str | None = None

    def __enter__(self) -> Self:
        argv = [sys.executable, "-m", "benchmarks._peers", "--client", self.client]
        argv += ["--port", str(self.port)]
        if self.cpu is not None:
            argv += ["--cpu", str(self.cpu)]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        first = self._readline()
        if first.startswith("READY "):
            self.info = json.loads(first[len("READY ") :])
        elif first.startswith("SKIP "):
            self.skipped = first[len("SKIP ") :]
            self.proc.wait(timeout=30)  # reaped now: its CPU is no client's
        else:
            self.skipped = f"the client process did not start ({first!r})"
        return self

    def _readline(self) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def run(self, case: str, seconds: float) -> tuple[float, float]:
        """``(ops/s, client CPU µs per op)`` of one measurement; RuntimeError if it failed."""
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(f"run {case} {seconds}\n")
        self.proc.stdin.flush()
        answer = self._readline()
        words = answer.split()
        if not words or words[0] != "OK":
            raise RuntimeError(answer or "the client process exited")
        return float(words[1]), float(words[2])

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        proc = self.proc
        if proc is None:
            return
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.write("quit\n")
                proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        self.proc = None


# ------------------------------------------------------------------------ redis-benchmark

# case -> ([(clients, pipeline, command words)], guessed ops/s to size -n); None: no
# equivalent (redis-benchmark runs one command at a time: it has no mixed workload).
_RB: dict[str, tuple[list[tuple[int, int, list[str]]], float] | None] = {
    "seq_get": ([(1, 1, ["GET", KEY])], 20_000),
    "pool50_setget": ([(50, 1, ["SET", KEY, VALUE.decode()]), (50, 1, ["GET", KEY])], 40_000),
    "pipeline100": ([(1, PIPELINE, ["GET", KEY])], 400_000),
    "mixed50": None,
    "big_get": ([(1, 1, ["GET", BIG_KEY])], 8_000),
    "big_get10": ([(10, 1, ["GET", BIG_KEY])], 12_000),
}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _redis_benchmark(port: int, case: str, seconds: float, cpu: int | None) -> tuple[float, float]:
    """``(ops/s, its CPU µs per op)``: several commands run one after the other, so the
    combined rate is total ops over total time."""
    spec = _RB[case]
    assert spec is not None
    runs, guess = spec
    requests = max(500, int(guess * seconds / len(runs)))
    rates = []
    cpu_before = _children_cpu()
    for clients, pipeline, command in runs:
        argv = [shutil.which(REDIS_BENCHMARK) or REDIS_BENCHMARK, "-h", "127.0.0.1"]
        argv += ["-p", str(port), "-c", str(clients), "-P", str(pipeline)]
        argv += ["-n", str(requests), "--csv", *command]
        if cpu is not None:
            argv = ["taskset", "-c", str(cpu), *argv]
        out = subprocess.run(
            argv, capture_output=True, text=True, timeout=60 + 10 * seconds, check=True
        ).stdout
        rows = list(csv.DictReader(io.StringIO(out)))
        if len(rows) != 1:
            raise RuntimeError(f"unexpected redis-benchmark output: {out!r}")
        rates.append(float(rows[0]["rps"]))
    cpu_us = (_children_cpu() - cpu_before) / (requests * len(runs)) * 1e6
    return len(rates) / sum(1.0 / r for r in rates), cpu_us


# ---------------------------------------------------------------------------------- main


def _set(port: int, key: str, value: bytes) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(hiredis.pack_command(("SET", key, value)))
        reader = hiredis.Reader()
        reply = reader.gets()
        while reply is False:
            reader.feed(sock.recv(4096))
            reply = reader.gets()
    if reply != b"OK":
        raise RuntimeError(f"SET {key} answered {reply!r}")


def _pin_process(pid: int, cpu: int) -> None:
    subprocess.run(
        ["taskset", "-a", "-p", "-c", str(cpu), str(pid)], check=True, capture_output=True
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--pin", action="store_true")
    extra.add_argument("--clients", default="")
    ours, rest = extra.parse_known_args(argv)
    args = common_parse_args(
        (__doc__ or "")
        + "\n--pin: server on the first CPU, clients on the last. --clients a,b: only these"
        " (trio_maint always).",
        rest,
    )
    args.pin = ours.pin
    args.clients = [c for c in ours.clients.split(",") if c]
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    all_clients = [*OURS, *[c for c in (*CLIENTS, REDIS_BENCHMARK) if c not in OURS]]
    wanted = list(all_clients)
    if args.clients:
        unknown = set(args.clients) - set(wanted)
        if unknown:
            raise SystemExit(f"unknown client(s) {sorted(unknown)}; choose from {all_clients}")
        wanted = [c for c in wanted if c == "trio_maint" or c in args.clients]
    skipped: dict[str, str] = {c: "not in --clients" for c in all_clients if c not in wanted}
    if args.no_redis_py and "redis-py" in wanted:
        wanted.remove("redis-py")
        skipped["redis-py"] = "--no-redis-py"
    if REDIS_BENCHMARK in wanted and shutil.which(REDIS_BENCHMARK) is None:
        wanted.remove(REDIS_BENCHMARK)
        skipped[REDIS_BENCHMARK] = "redis-benchmark not on PATH"
    cpus = sorted(os.sched_getaffinity(0))
    pinned = bool(args.pin and len(cpus) >= 2 and shutil.which("taskset"))
    if args.pin and not pinned:
        print("--pin: needs 2 CPUs and taskset; running unpinned", flush=True)
    client_cpu = cpus[-1] if pinned else None

    ops: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}
    errors: dict[str, str] = {}
    infos: dict[str, dict[str, Any]] = {}
    with RedisServer() as server, contextlib.ExitStack() as stack:
        port = server.address[1]
        if pinned:
            assert server.process is not None
            _pin_process(server.process.pid, cpus[0])
        _set(port, KEY, VALUE)
        _set(port, BIG_KEY, b"b" * BIG_SIZE)
        processes: dict[str, ClientProcess] = {}
        for client in wanted:
            if client == REDIS_BENCHMARK:
                continue
            proc = stack.enter_context(ClientProcess(client, port, cpu=client_cpu))
            if proc.skipped is not None:
                skipped[client] = proc.skipped
                print(f"{client}: skipped ({proc.skipped})", flush=True)
            else:
                processes[client] = proc
                infos[client] = proc.info
        if "trio_maint" not in processes:
            raise RuntimeError(f"trio_maint cannot run: {skipped.get('trio_maint')}")
        clients = [c for c in wanted if c in processes or c == REDIS_BENCHMARK]
        for round_no in range(args.rounds):
            for case in CASES:
                shift = round_no % len(clients)
                for client in clients[shift:] + clients[:shift]:
                    if client in errors:
                        continue
                    if client == REDIS_BENCHMARK:
                        if _RB[case] is None:
                            continue
                        rate, cpu_us = _redis_benchmark(port, case, args.duration, client_cpu)
                    else:
                        try:
                            rate, cpu_us = processes[client].run(case, args.duration)
                        except RuntimeError as exc:
                            # One client failing (a peer's timeout, say) leaves the others.
                            errors[client] = f"{case}: {exc}"
                            print(f"{client}: failed on {case}: {exc}", flush=True)
                            continue
                    ops.setdefault((client, case), []).append(rate)
                    cpu.setdefault((client, case), []).append(cpu_us)
            print(f"round {round_no + 1}/{args.rounds} done", flush=True)

    payload = _report(clients, ops, cpu, errors)
    payload.update(
        {
            "unit": "ops/s",
            "clients": clients,
            "client_info": infos,
            "skipped": skipped,
            "errors": errors,
            "pinned": {"server_cpu": cpus[0], "client_cpu": client_cpu} if pinned else None,
            "notes": (
                "CPU: each client's own process (all its threads), measured window only; "
                "redis-benchmark: its RUSAGE_CHILDREN time, whole run. redis-benchmark has "
                "no mixed workload. valkey-glide multiplexes one connection (no pool)."
            ),
        }
    )
    write_json("peers", args, payload)
    return payload


def _report(
    clients: list[str],
    ops: dict[tuple[str, str], list[float]],
    cpu: dict[tuple[str, str], list[float]],
    errors: dict[str, str],
) -> dict[str, Any]:
    """Summaries per case and client, per-round ratios; print the three tables."""
    cases: dict[str, Any] = {}
    peers = [p for p in PEERS if p in clients]
    ours = [c for c in OURS if c in clients]
    rate_rows: list[list[str]] = []
    cpu_rows: list[list[str]] = []
    ratio_rows: dict[str, list[list[str]]] = {us: [] for us in ours}
    cpu_ratio_rows: dict[str, list[list[str]]] = {us: [] for us in ours}
    for case, (tasks, what) in CASES.items():
        entry: dict[str, Any] = {"tasks": tasks, "what": what}
        for client in clients:
            if (client, case) in ops:
                entry[client] = summarize(ops[(client, case)])
                entry[client]["cpu_us_per_op"] = summarize(cpu[(client, case)])
        ratios: dict[str, Any] = {}
        cpu_ratios: dict[str, Any] = {}
        for us in ours:
            our_ops = ops.get((us, case), [])
            our_cpu = cpu.get((us, case), [])
            for peer in peers:
                theirs = ops.get((peer, case), [])
                their_cpu = cpu.get((peer, case), [])
                # Round by round: the two measurements of a round ran next to each other.
                pairs = [a / b for a, b in zip(our_ops, theirs, strict=False) if b]
                cpu_pairs = [a / b for a, b in zip(our_cpu, their_cpu, strict=False) if b]
                ratios[f"{us}/{peer}"] = summarize(pairs) if pairs else None
                cpu_ratios[f"{us}/{peer}"] = summarize(cpu_pairs) if cpu_pairs else None
            ratio_rows[us].append([case, *[_cell(ratios[f"{us}/{p}"], 2) for p in peers]])
            cpu_ratio_rows[us].append([case, *[_cell(cpu_ratios[f"{us}/{p}"], 2) for p in peers]])
        entry["ratios"] = ratios
        entry["cpu_ratios"] = cpu_ratios
        cases[case] = entry
        rate_rows.append([case, *[_cell(entry.get(c)) for c in clients]])
        cpu_rows.append([case, *[_cell(entry.get(c, {}).get("cpu_us_per_op"), 1) for c in clients]])
    print_table("ops/s (median ±spread over rounds)", ["case", *clients], rate_rows)
    print_table("client CPU µs per op (median ±spread)", ["case", *clients], cpu_rows)
    for us in ours:
        print_table(
            f"ops/s ratio {us} ÷ peer, per round (median ±spread; > 1: {us} faster)",
            ["case", *[f"÷{p}" for p in peers]],
            ratio_rows[us],
        )
        print_table(
            f"CPU per op ratio {us} ÷ peer, per round (median ±spread; < 1: {us} cheaper)",
            ["case", *[f"÷{p}" for p in peers]],
            cpu_ratio_rows[us],
        )
    for client, message in errors.items():
        print(f"{client}: FAILED ({message}); its cases are missing", flush=True)
    return {"cases": cases}


def _cell(summary: dict[str, Any] | None, digits: int = 0) -> str:
    if summary is None:
        return "-"
    return f"{fmt(summary['median'], digits)} ±{summary['spread_pct']}%"


if __name__ == "__main__":
    main()
