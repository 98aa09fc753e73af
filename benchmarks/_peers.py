"""One client of ``bench_peers`` in a process of its own, driven over stdin/stdout.

Each client runs in its own process so that ``time.process_time()`` there is that client's
CPU time alone (every thread of the process: valkey-glide's Rust threads count too), never
the driver's, the server's or another client's. Protocol, one line each way:

* the child prints ``READY <json>`` (library version, event loop, parser) once the library
  imported, or ``SKIP <reason>`` and exits when it cannot be used here;
* ``run <case> <seconds>``: connect, warm up, measure ``case`` for ``seconds``, disconnect;
  answers ``OK <ops/s> <client CPU µs per op>`` or ``ERR <message>``;
* ``quit`` (or end of input) stops the child.

Run as ``python -m benchmarks._peers --client NAME --port P [--cpu N]``.

Every client does the same work per case (``_body``); a client gives three operations:
``get(key)``, ``set(key, value)`` and ``pipeline_get(key, n)`` (a non-transactional
pipeline of ``n`` GETs), each straight from the library's own API (bound methods where the
call is one). The bare loops are the floor: one socket per task, ``hiredis.pack_command``
per command and a ``hiredis.Reader`` per socket, nothing else.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import sys
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import hiredis
import trio

KEY = "bench:peers:key"
BIG_KEY = "bench:peers:big"
VALUE = b"v" * 16
BIG_SIZE = 100 * 1024
PIPELINE = 100
MIXED_PIPELINE = 10
#: Bytes asked of the socket per receive by the bare loops (the size trio's own default).
RECEIVE_SIZE = 65536

#: case -> (tasks = connections in the pool, what one call of the body does)
CASES: dict[str, tuple[int, str]] = {
    "seq_get": (1, "1 task, sequential GET of 16 B"),
    "pool50_setget": (50, "50 tasks SET then GET of 16 B, pool of 50"),
    "pipeline100": (1, "1 task, pipelines of 100 GET"),
    "mixed50": (50, "50 tasks, pool of 50: 9 single GET/SET then 1 pipeline of 10 GET (10 %)"),
    "big_get": (1, "1 task, GET of 100 KiB"),
    "big_get10": (10, "10 tasks GET of 100 KiB, pool of 10"),
}

#: client -> event loop it runs on
CLIENTS: dict[str, str] = {
    "trio_maint": "trio",
    "trio_maint-auto": "trio",
    "coredis": "trio",
    "valkey-glide": "asyncio",
    "redis-py": "asyncio",
    "bare-trio": "trio",
    "bare-asyncio": "asyncio",
}


@dataclass
class Ops:
    """The three operations every case is made of, for one task."""

    get: Callable[[str], Awaitable[Any]]
    set: Callable[[str, bytes], Awaitable[Any]]
    pipeline_get: Callable[[str, int], Awaitable[Any]]


#: Opens the client for ``ntasks`` tasks and yields one :class:`Ops` per task.
Opener = Callable[[str, int, int], contextlib.AbstractAsyncContextManager[list[Ops]]]


def _body(ops: Ops, case: str) -> Callable[[], Awaitable[int]]:
    """One call of ``case``'s loop; returns the commands it ran."""
    get, set_, pipeline_get = ops.get, ops.set, ops.pipeline_get

    async def seq_get() -> int:
        await get(KEY)
        return 1

    async def setget() -> int:
        await set_(KEY, VALUE)
        await get(KEY)
        return 2

    async def pipeline100() -> int:
        await pipeline_get(KEY, PIPELINE)
        return PIPELINE

    async def mixed() -> int:
        # 10 calls: 9 single commands (GET, SET, GET, ...) and 1 pipeline of 10 GETs.
        for i in range(9):
            if i % 2:
                await set_(KEY, VALUE)
            else:
                await get(KEY)
        await pipeline_get(KEY, MIXED_PIPELINE)
        return 9 + MIXED_PIPELINE

    async def big_get() -> int:
        reply = await get(BIG_KEY)
        if len(reply) != BIG_SIZE:
            raise RuntimeError(f"GET {BIG_KEY} gave {len(reply)} bytes")
        return 1

    bodies: dict[str, Callable[[], Awaitable[int]]] = {
        "seq_get": seq_get,
        "pool50_setget": setget,
        "pipeline100": pipeline100,
        "mixed50": mixed,
        "big_get": big_get,
        "big_get10": big_get,
    }
    return bodies[case]


# ------------------------------------------------------------------------------ drivers


async def _drive(
    bodies: list[Callable[[], Awaitable[int]]],
    seconds: float,
    run_all: Callable[[list[Callable[[], Awaitable[None]]]], Awaitable[None]],
) -> tuple[float, float]:
    """Loop each body for ``seconds`` in a task of its own (``run_all`` runs the tasks on
    the event loop's own way); ``(ops/s, CPU s per op)``."""
    done = 0
    deadline = 0.0

    async def worker(body: Callable[[], Awaitable[int]]) -> None:
        nonlocal done
        n = 0
        while time.perf_counter() < deadline:
            n += await body()
        done += n

    cpu = time.process_time()
    start = time.perf_counter()
    deadline = start + seconds
    await run_all([functools.partial(worker, body) for body in bodies])
    return _sample(done, start, cpu)


async def _trio_all(workers: list[Callable[[], Awaitable[None]]]) -> None:
    async with trio.open_nursery() as nursery:
        for worker in workers:
            nursery.start_soon(worker)


async def _asyncio_all(workers: list[Callable[[], Awaitable[None]]]) -> None:
    await asyncio.gather(*(worker() for worker in workers))


async def _drive_trio(
    bodies: list[Callable[[], Awaitable[int]]], seconds: float
) -> tuple[float, float]:
    return await _drive(bodies, seconds, _trio_all)


async def _drive_asyncio(
    bodies: list[Callable[[], Awaitable[int]]], seconds: float
) -> tuple[float, float]:
    return await _drive(bodies, seconds, _asyncio_all)


def _sample(done: int, start: float, cpu: float) -> tuple[float, float]:
    elapsed = time.perf_counter() - start
    cpu_used = time.process_time() - cpu
    return done / elapsed, cpu_used / max(done, 1) * 1e6


async def _measure(
    opener: Opener, loop: str, url: str, port: int, case: str, seconds: float
) -> tuple[float, float]:
    ntasks = CASES[case][0]
    drive = _drive_trio if loop == "trio" else _drive_asyncio
    async with opener(url, port, ntasks) as per_task:
        bodies = [_body(ops, case) for ops in per_task]
        await drive(bodies, min(0.2, seconds))  # warm-up: every connection dialled
        return await drive(bodies, seconds)


# ------------------------------------------------------------------------------ clients


@contextlib.asynccontextmanager
async def _open_trio_maint(
    url: str, port: int, ntasks: int, *, auto_pipeline: bool = False
) -> AsyncIterator[list[Ops]]:
    import trio_maint

    # A plain redis-server refuses the maintenance opt-in; bench_maintenance measures it.
    maint = trio_maint.MaintConfig(mode="disabled")
    async with trio_maint.open_redis(
        url, pool_size=ntasks, maintenance=maint, auto_pipeline=auto_pipeline
    ) as r:

        async def pipeline_get(key: str, n: int) -> Any:
            pipe = r.pipeline(transaction=False)
            for _ in range(n):
                pipe.get(key)
            return await pipe.execute()

        yield [Ops(r.get, r.set, pipeline_get)] * ntasks


@contextlib.asynccontextmanager
async def _open_coredis(url: str, port: int, ntasks: int) -> AsyncIterator[list[Ops]]:
    import coredis

    client: Any = coredis.Redis("127.0.0.1", port, max_connections=ntasks)
    async with client as r:

        async def pipeline_get(key: str, n: int) -> Any:
            async with r.pipeline(transaction=False) as pipe:
                for _ in range(n):
                    pipe.get(key)
            return pipe.results

        yield [Ops(r.get, r.set, pipeline_get)] * ntasks


@contextlib.asynccontextmanager
async def _open_glide(url: str, port: int, ntasks: int) -> AsyncIterator[list[Ops]]:
    from glide import Batch, GlideClient, GlideClientConfiguration, NodeAddress

    # One multiplexed connection (glide's design: it has no pool); requests in flight
    # from every task share it. A generous timeout: the default is 250 ms.
    config = GlideClientConfiguration([NodeAddress("127.0.0.1", port)], request_timeout=10_000)
    client = await GlideClient.create(config)
    try:

        async def pipeline_get(key: str, n: int) -> Any:
            batch = Batch(is_atomic=False)
            for _ in range(n):
                batch.get(key)
            return await client.exec(batch, raise_on_error=True)

        yield [Ops(client.get, client.set, pipeline_get)] * ntasks
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def _open_redis_py(url: str, port: int, ntasks: int) -> AsyncIterator[list[Ops]]:
    import redis.asyncio as aioredis

    pool = aioredis.BlockingConnectionPool(host="127.0.0.1", port=port, max_connections=ntasks)
    r = aioredis.Redis(connection_pool=pool)
    try:

        async def pipeline_get(key: str, n: int) -> Any:
            pipe = r.pipeline(transaction=False)
            for _ in range(n):
                pipe.get(key)
            return await pipe.execute()

        yield [Ops(r.get, r.set, pipeline_get)] * ntasks
    finally:
        await r.aclose()
        await pool.disconnect()


def _bare_ops(
    send: Callable[[bytes], Awaitable[Any]], receive: Callable[[int], Awaitable[bytes]]
) -> Ops:
    """The floor: pack, send, feed a hiredis.Reader until it has every reply."""
    reader = hiredis.Reader()
    pack = hiredis.pack_command
    gets = reader.gets
    feed = reader.feed

    async def call(data: bytes) -> Any:
        await send(data)
        reply = gets()
        while reply is False:
            feed(await receive(RECEIVE_SIZE))
            reply = gets()
        return reply

    async def get(key: str) -> Any:
        return await call(pack(("GET", key)))

    async def set_(key: str, value: bytes) -> Any:
        return await call(pack(("SET", key, value)))

    async def pipeline_get(key: str, n: int) -> Any:
        await send(b"".join([pack(("GET", key)) for _ in range(n)]))
        replies = []
        while len(replies) < n:
            reply = gets()
            if reply is False:
                feed(await receive(RECEIVE_SIZE))
            else:
                replies.append(reply)
        return replies

    return Ops(get, set_, pipeline_get)


@contextlib.asynccontextmanager
async def _open_bare_trio(url: str, port: int, ntasks: int) -> AsyncIterator[list[Ops]]:
    streams = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(ntasks)]
    try:
        yield [_bare_ops(s.send_all, s.receive_some) for s in streams]
    finally:
        for s in streams:
            await s.aclose()


@contextlib.asynccontextmanager
async def _open_bare_asyncio(url: str, port: int, ntasks: int) -> AsyncIterator[list[Ops]]:
    pairs = [await asyncio.open_connection("127.0.0.1", port) for _ in range(ntasks)]
    try:
        per_task = []
        for reader, writer in pairs:

            def sender(w: asyncio.StreamWriter) -> Callable[[bytes], Awaitable[None]]:
                async def send(data: bytes) -> None:
                    w.write(data)
                    await w.drain()

                return send

            per_task.append(_bare_ops(sender(writer), reader.read))
        yield per_task
    finally:
        for _, writer in pairs:
            writer.close()
            await writer.wait_closed()


OPENERS: dict[str, Opener] = {
    "trio_maint": _open_trio_maint,
    # trio_maint with auto_pipeline=True: concurrent tasks' commands share writes.
    "trio_maint-auto": functools.partial(_open_trio_maint, auto_pipeline=True),
    "coredis": _open_coredis,
    "valkey-glide": _open_glide,
    "redis-py": _open_redis_py,
    "bare-trio": _open_bare_trio,
    "bare-asyncio": _open_bare_asyncio,
}


# ----------------------------------------------------------------------------- the child


async def _async_library_under_trio() -> str:
    import sniffio

    return sniffio.current_async_library()


def _describe(client: str) -> dict[str, Any]:
    """Import the client's library (ImportError when it is missing) and say what it is."""
    info: dict[str, Any] = {"loop": CLIENTS[client], "hiredis": hiredis.__version__}
    if client in ("trio_maint", "trio_maint-auto"):
        import trio_maint

        info["version"] = getattr(trio_maint, "__version__", None)
        info["auto_pipeline"] = client == "trio_maint-auto"
    elif client == "coredis":
        from importlib.metadata import version

        import coredis

        info["version"] = coredis.__version__
        info["anyio"] = version("anyio")
        # coredis runs on anyio: the library anyio sees inside trio.run is trio.
        info["async_library"] = trio.run(_async_library_under_trio)
        info["parser"] = "coredis (own, compiled)"
    elif client == "valkey-glide":
        from importlib.metadata import version

        import glide  # noqa: F401

        info["version"] = version("valkey-glide")
        info["parser"] = "Rust core (own threads)"
    elif client == "redis-py":
        import redis
        from redis.utils import HIREDIS_AVAILABLE

        info["version"] = redis.__version__
        info["parser"] = "hiredis" if HIREDIS_AVAILABLE else "python"
    else:
        info["version"] = None
        info["parser"] = "hiredis"
    if client in ("trio_maint", "trio_maint-auto", "bare-trio"):
        info["parser"] = "hiredis"
    info["trio" if CLIENTS[client] == "trio" else "python"] = (
        trio.__version__ if CLIENTS[client] == "trio" else sys.version.split()[0]
    )
    return info


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--client", required=True, choices=sorted(CLIENTS))
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cpu", type=int, default=None, help="run on this CPU only")
    args = parser.parse_args()
    if args.cpu is not None:
        # Before any library starts a thread: threads inherit the affinity.
        os.sched_setaffinity(0, {args.cpu})
    try:
        info = _describe(args.client)
    except Exception as exc:  # ImportError, or a library that fails on import here
        print(f"SKIP {type(exc).__name__}: {exc}".replace("\n", " "), flush=True)
        return
    print("READY " + json.dumps(info), flush=True)
    url = f"redis://127.0.0.1:{args.port}/0"
    opener = OPENERS[args.client]
    loop = CLIENTS[args.client]
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            return
        if words[0] != "run" or len(words) != 3 or words[1] not in CASES:
            print(f"ERR bad command {line.strip()!r}", flush=True)
            continue
        case, seconds = words[1], float(words[2])
        try:
            if loop == "trio":
                rate, cpu_us = trio.run(_measure, opener, loop, url, args.port, case, seconds)
            else:
                rate, cpu_us = asyncio.run(_measure(opener, loop, url, args.port, case, seconds))
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            print(f"ERR {type(exc).__name__}: {exc}".replace("\n", " "), flush=True)
            continue
        print(f"OK {rate!r} {cpu_us!r}", flush=True)


if __name__ == "__main__":
    main()
