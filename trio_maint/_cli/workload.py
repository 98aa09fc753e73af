"""The demo's workload: tasks reading, writing and pipelining through one client, and what
they record (:class:`WorkloadStats`: latencies, failures, every acknowledged write)."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any, Protocol

import attrs
import trio

from .cache_watch import StaleReadCheck

__all__ = ["WorkloadSettings", "WorkloadStats", "run_task"]


class WorkloadSettings(Protocol):
    """What the workload reads of a demo's settings (both demos' configs have these)."""

    @property
    def tasks(self) -> int:
        """Concurrent tasks; task ``i`` writes keys ``i``, ``i + tasks``, ..."""

    @property
    def keys(self) -> int:
        """Size of the key space ``demo:key:0`` ... ``demo:key:{keys - 1}``."""

    @property
    def mix(self) -> tuple[int, int, int]:
        """Relative weights of reads, writes and pipelines."""


@attrs.define
class WorkloadStats:
    """Counters of the workload tasks (times in seconds from ``start``)."""

    start: float
    ops: list[tuple[float, float]] = attrs.field(factory=list)  # (started, latency)
    failed_at: list[float] = attrs.field(factory=list)
    errors: Counter[str] = attrs.field(factory=Counter)
    acked: dict[str, int] = attrs.field(factory=dict)  # key -> last acknowledged counter
    increments: dict[str, int] = attrs.field(factory=dict)  # counter key -> acked INCRs

    def record(self, started: float, ended: float, weight: int = 1) -> None:
        """Record one operation of ``weight`` commands that ran from ``started`` to ``ended``."""
        entry = (started - self.start, ended - started)
        for _ in range(weight):
            self.ops.append(entry)


async def run_task(
    r: Any,
    stats: WorkloadStats,
    task: int,
    cfg: WorkloadSettings,
    stop: trio.Event,
    rng: random.Random,
    check: StaleReadCheck | None = None,
) -> None:
    """One workload task until ``stop``: reads (``GET`` of any key), writes (``SET`` of a
    counter to a key of its own) and pipelines (two ``SET``, a ``GET``, an ``INCR`` of its
    counter key) through ``r`` (a :class:`~trio_maint.Redis` or
    :class:`~trio_maint.RedisCluster`), recording each in ``stats``; with ``check``
    (``--cache``), every acknowledged write and every ``GET`` go through the stale-read
    check too."""
    own = list(range(task, cfg.keys, cfg.tasks))
    counter = 0
    count_key = f"demo:count:{task}"
    weights = list(cfg.mix)
    kinds = ("read", "write", "pipeline")
    while not stop.is_set():
        kind = rng.choices(kinds, weights)[0]
        size = 4 if kind == "pipeline" else 1  # commands in this operation
        started = trio.current_time()
        try:
            if kind == "read":
                key = f"demo:key:{rng.randrange(cfg.keys)}"
                if check is None:
                    await r.get(key)
                else:
                    expected = check.read_started(key)
                    value = await r.get(key)
                    check.read_returned(key, expected, value, trio.current_time() - stats.start)
            elif kind == "write":
                counter += 1
                key = f"demo:key:{rng.choice(own)}"
                await r.set(key, f"{task}:{counter}")
                stats.acked[key] = counter
                if check is not None:
                    check.acked(key, counter)
            else:
                writes = [f"demo:key:{rng.choice(own)}" for _ in range(2)]
                async with r.pipeline(transaction=False) as pipe:
                    values = []
                    for key in writes:
                        counter += 1
                        values.append(counter)
                        pipe.set(key, f"{task}:{counter}")
                    pipe.get(f"demo:key:{rng.randrange(cfg.keys)}")
                    pipe.incr(count_key)
                    await pipe.execute()
                for key, version in zip(writes, values, strict=True):
                    stats.acked[key] = version
                    if check is not None:
                        check.acked(key, version)
                stats.increments[count_key] = stats.increments.get(count_key, 0) + 1
        except trio.Cancelled:
            raise
        except Exception as exc:
            # a failed pipeline counts as failed commands, all of them
            stats.failed_at.extend([trio.current_time() - stats.start] * size)
            stats.errors[type(exc).__name__] += size
            await trio.sleep(0.001)
            continue
        stats.record(started, trio.current_time(), size)
