"""The demo's workload: tasks reading, writing and pipelining through one client, and what
they record (:class:`WorkloadStats`: latencies, failures, every acknowledged write)."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import attrs
import trio

from .report import DemoConfig

__all__ = ["WorkloadStats", "run_task"]


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
    r: Any, stats: WorkloadStats, task: int, cfg: DemoConfig, stop: trio.Event, rng: random.Random
) -> None:
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
                await r.get(f"demo:key:{rng.randrange(cfg.keys)}")
            elif kind == "write":
                counter += 1
                key = f"demo:key:{rng.choice(own)}"
                await r.set(key, f"{task}:{counter}")
                stats.acked[key] = counter
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
                for key, value in zip(writes, values, strict=True):
                    stats.acked[key] = value
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
