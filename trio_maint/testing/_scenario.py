"""Scripted maintenance timelines for a :class:`MaintenanceSimulator`.

A :class:`Scenario` is a list of timed steps run against a simulator, in real time or on
:class:`trio.testing.MockClock` (all waiting goes through Trio's clock). The built-ins follow
managed Redis as measured (docs/testing.md, reference timings): MIGRATING / FAILING_OVER
about 2 s before the work, then MIGRATED / FAILED_OVER; MOVING with ``time`` = 15 s and the
old endpoint closing about ``time`` + 2 s later; clients that asked for endpoint type
``none`` are expected to reconnect (to the same address) at ``time`` / 2. ``compress``
divides every delay (and the ``time`` announced in frames, rounded to whole seconds, at
least 1) for fast runs.

:func:`migrate` (in ``_migrate``) moves the data for real between two redis-servers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs
import trio

from ._migrate import MigrationResult, migrate
from ._server import RedisServer
from ._simulator import Address, MaintenanceSimulator, Target

__all__ = [
    "MigrationResult",
    "Scenario",
    "Step",
    "StepRecord",
    "failover_scenario",
    "maintenance_scenario",
    "migrate",
    "migrate_scenario",
    "migrating_scenario",
    "moving_scenario",
    "slot_migration_scenario",
]

#: A scenario action: an async callable taking the simulator; its return value is recorded.
Action = Callable[[MaintenanceSimulator], Awaitable[Any]]


@attrs.frozen
class Step:
    """One timed step.

    :ivar at: seconds (``float``) after the scenario starts.
    :ivar action: see :data:`Action`.
    :ivar label: a name for logs and records.
    """

    at: float
    action: Action
    label: str = ""


@attrs.frozen
class StepRecord:
    """What happened when a step ran.

    :ivar label: the step's label.
    :ivar planned: its planned offset in seconds (after compression).
    :ivar started: the offset (``trio.current_time()`` minus the start) when it ran.
    :ivar result: what the action returned (e.g. a sequence id, or connection ids).
    """

    label: str
    planned: float
    started: float
    result: Any = None


@attrs.define
class Scenario:
    """A timeline of :class:`Step` objects.

    Build with :meth:`at` (chainable) or pass ``steps``. Steps run in order of ``at`` (ties
    in insertion order), one at a time: a slow action delays the steps after it.

    :param name: a name for logs.
    :param steps: initial steps.
    """

    name: str = "scenario"
    steps: list[Step] = attrs.field(factory=list)

    def at(self, seconds: float, action: Action, label: str = "") -> Scenario:
        """Add a step at ``seconds`` (``float``, >= 0) from the start; returns ``self``.

        :raises ValueError: a negative time.
        """
        if seconds < 0:
            raise ValueError("a step cannot run before the scenario starts")
        self.steps.append(Step(seconds, action, label or getattr(action, "__name__", "step")))
        return self

    @property
    def duration(self) -> float:
        """Offset of the last step, in seconds (``0.0`` when empty)."""
        return max((s.at for s in self.steps), default=0.0)

    def compressed(self, factor: float) -> Scenario:
        """A copy with every step time divided by ``factor`` (``> 0``).

        Only the timeline is compressed: frames keep the ``time`` the built-in put in them
        (the built-ins take ``compress`` to adjust those too).

        :raises ValueError: ``factor <= 0``.
        """
        if factor <= 0:
            raise ValueError("the compression factor must be > 0")
        return Scenario(self.name, [Step(s.at / factor, s.action, s.label) for s in self.steps])

    async def run(self, sim: MaintenanceSimulator, *, compress: float = 1.0) -> list[StepRecord]:
        """Run the steps against ``sim`` and return what each did.

        :param compress: divide step times by this factor (see :meth:`compressed`).
        :raises ValueError: ``compress <= 0``.
        :raises Exception: whatever an action raises (the run stops there).
        """
        steps = self.compressed(compress).steps if compress != 1.0 else list(self.steps)
        steps.sort(key=lambda s: s.at)
        start = trio.current_time()
        records: list[StepRecord] = []
        for step in steps:
            await trio.sleep_until(start + step.at)
            began = trio.current_time() - start
            result = await step.action(sim)
            records.append(StepRecord(step.label, step.at, began, result))
        return records


def _announced(time: int, compress: float) -> int:
    return time if compress == 1.0 else max(1, round(time / compress))


def _notification_pair(
    name: str,
    begin: Callable[..., Awaitable[int]],
    end: Callable[..., Awaitable[int]],
    *,
    lead: float,
    work: float,
    latency: float,
    seq_id: int | None,
    shard_ids: str | None,
    compress: float,
) -> Scenario:
    scenario = Scenario(name)
    seqs: dict[str, int] = {}

    async def start(sim: MaintenanceSimulator) -> int:
        seqs["begin"] = sim.next_seq_id() if seq_id is None else seq_id
        return await begin(
            sim,
            seq_id=seqs["begin"],
            time=_announced(max(1, round(lead)), compress),
            shard_ids=shard_ids,
            remember=True,
        )

    async def work_starts(sim: MaintenanceSimulator) -> None:
        sim.set_latency(latency)

    async def finish(sim: MaintenanceSimulator) -> int:
        sim.set_latency(0.0)
        return await end(sim, seq_id=seqs["begin"] + 1, shard_ids=shard_ids)

    scenario.at(0.0, start, f"{name} starts")
    if latency > 0:
        scenario.at(lead / compress, work_starts, "work starts (latency)")
    scenario.at((lead + work) / compress, finish, f"{name} ends")
    return scenario


def migrating_scenario(
    *,
    lead: float = 2.0,
    work: float = 1.0,
    latency: float = 0.0,
    seq_id: int | None = None,
    shard_ids: str | None = "1",
    compress: float = 1.0,
) -> Scenario:
    """MIGRATING at 0 (announcing ``lead`` seconds), the work from ``lead`` for ``work``
    seconds (with ``latency`` added to replies if > 0), then MIGRATED (``seq_id + 1``).

    As managed Redis's shard migration (MIGRATING arrives about 2 s before the work).
    Connections enabling notifications during the window get the MIGRATING too.
    """
    return _notification_pair(
        "migration",
        MaintenanceSimulator.inject_migrating,
        MaintenanceSimulator.inject_migrated,
        lead=lead,
        work=work,
        latency=latency,
        seq_id=seq_id,
        shard_ids=shard_ids,
        compress=compress,
    )


def failover_scenario(
    *,
    lead: float = 2.0,
    work: float = 1.0,
    latency: float = 0.0,
    seq_id: int | None = None,
    shard_ids: str | None = "1",
    compress: float = 1.0,
) -> Scenario:
    """FAILING_OVER at 0, the work from ``lead`` for ``work`` seconds, then FAILED_OVER;
    as :func:`migrating_scenario`."""
    return _notification_pair(
        "failover",
        MaintenanceSimulator.inject_failing_over,
        MaintenanceSimulator.inject_failed_over,
        lead=lead,
        work=work,
        latency=latency,
        seq_id=seq_id,
        shard_ids=shard_ids,
        compress=compress,
    )


def _add_moving(
    scenario: Scenario,
    offset: float,
    target: Target,
    *,
    time: int,
    grace: float,
    seq_id: int | None,
    compress: float,
) -> None:
    moved: list[int] = []

    async def moving(sim: MaintenanceSimulator) -> int:
        moved[:] = [c.id for c in sim.connections]
        sim.set_backend(target)
        return await sim.inject_moving(
            seq_id=seq_id, time=_announced(time, compress), target=target, remember=True
        )

    async def none_reconnect_due(sim: MaintenanceSimulator) -> list[int]:
        # Clients with endpoint type "none" should reconnect (to the same address) now;
        # the record lists the old "none" connections still open at this instant.
        return [c.id for c in sim.connections if c.id in moved and c.endpoint_type == "none"]

    async def close_old(sim: MaintenanceSimulator) -> list[int]:
        sim.forget("MOVING")
        return sim.close_connections(connections=moved)

    scenario.at(offset / compress, moving, "MOVING")
    scenario.at(
        (offset + time / 2) / compress,
        none_reconnect_due,
        "null-endpoint clients reconnect (still open)",
    )
    scenario.at((offset + time + grace) / compress, close_old, "old endpoint closes")


def moving_scenario(
    target: Target,
    *,
    time: int = 15,
    grace: float = 2.0,
    seq_id: int | None = None,
    compress: float = 1.0,
) -> Scenario:
    """The endpoint moves to ``target``: at 0 new connections start going to ``target``
    and MOVING (``time`` seconds) goes to every connection with notifications on (and to
    those enabling them later); at ``time / 2`` clients of type ``none`` are due to
    reconnect; at ``time + grace`` the connections open at 0 are closed.

    As managed Redis's endpoint move (docs/testing.md): declared 15 s, old socket closed
    about 16.6 to 18.4 s after the notice.

    :param target: a simulator (usually), a :class:`RedisServer`, ``(host, port)`` or text.
    """
    scenario = Scenario("moving")
    _add_moving(scenario, 0.0, target, time=time, grace=grace, seq_id=seq_id, compress=compress)
    return scenario


def maintenance_scenario(
    target: Target,
    *,
    lead: float = 2.0,
    work: float = 1.0,
    time: int = 15,
    grace: float = 2.0,
    seq_id: int | None = None,
    compress: float = 1.0,
) -> Scenario:
    """The typical standalone sequence: MIGRATING, MIGRATED after ``lead + work`` seconds,
    then MOVING to ``target`` right after, as :func:`moving_scenario`."""
    scenario = migrating_scenario(lead=lead, work=work, seq_id=seq_id, compress=compress)
    scenario.name = "maintenance"
    _add_moving(
        scenario,
        lead + work,
        target,
        time=time,
        grace=grace,
        seq_id=None,
        compress=compress,
    )
    return scenario


def slot_migration_scenario(
    entries: Sequence[tuple[str, str, str] | tuple[str, str]],
    *,
    slots: str | Sequence[str] = "0-16383",
    lead: float = 2.0,
    work: float = 0.5,
    seq_id: int | None = None,
    compress: float = 1.0,
) -> Scenario:
    """Cluster slot migration: SMIGRATING ``slots`` at 0, SMIGRATED ``entries`` after
    ``lead + work`` seconds (sequence ids ``seq`` and ``seq + 1``)."""
    scenario = Scenario("slot migration")
    seqs: dict[str, int] = {}

    async def start(sim: MaintenanceSimulator) -> int:
        seqs["begin"] = sim.next_seq_id() if seq_id is None else seq_id
        return await sim.inject_smigrating(seq_id=seqs["begin"], slots=slots, remember=True)

    async def finish(sim: MaintenanceSimulator) -> int:
        return await sim.inject_smigrated(entries, seq_id=seqs["begin"] + 1)

    scenario.at(0.0, start, "SMIGRATING")
    scenario.at((lead + work) / compress, finish, "SMIGRATED")
    return scenario


def migrate_scenario(
    target: MaintenanceSimulator | RedisServer | Address,
    *,
    time: int = 15,
    grace: float = 2.0,
    close_after: float | None = None,
    seq_id: int | None = None,
) -> Scenario:
    """A one-step :class:`Scenario` running :func:`migrate` from the simulator it is run
    against to ``target``; the step's result is the :class:`MigrationResult`."""

    async def run(sim: MaintenanceSimulator) -> MigrationResult:
        return await migrate(
            sim, target, time=time, grace=grace, close_after=close_after, seq_id=seq_id
        )

    return Scenario("migrate").at(0.0, run, "migrate")
