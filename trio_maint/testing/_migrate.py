""":func:`migrate`: a real data move between two redis-servers behind simulators, with
managed Redis's client-visible behaviour: the old endpoint keeps serving reads and writes
(re-pointed to the new primary) until MOVING's time has run out, then closes.

Timeline (``t`` = MOVING's ``time``, ``g`` = ``grace``; the one timing shared with
:func:`~trio_maint.testing.moving_scenario`): the switch (a write hold as long as the
replication catch-up), then MOVING at 0, then the connections open at 0 closed at ``t + g``.
"""

from __future__ import annotations

from typing import Any

import attrs
import trio

from .._sansio.endpoint import format_host_port
from .._sansio.replies import parse_info
from ._raw import RawConnection, connect_raw
from ._server import RedisServer
from ._simulator import Address, MaintenanceSimulator, _resolve

__all__ = ["MigrationResult", "migrate"]

_ALREADY = b"OK Already connected to specified master"


@attrs.frozen
class MigrationResult:
    """What :func:`migrate` did.

    :ivar seq_id: the MOVING sequence id.
    :ivar moved: ids of the source's connections told to move (and closed at the end).
    :ivar paused_for: seconds new commands through the simulators (and writes of clients
        connected to the old server directly) were held for the switch (``float``).
    :ivar offset: the replication offset at the switch (``int``).
    :ivar upstream: ``(host, port)`` of the new primary: the server ``source`` (and
        ``target`` when it forwarded to the old one) forwards to now, whatever upstream it
        was started with.
    """

    seq_id: int
    moved: list[int]
    paused_for: float
    offset: int
    upstream: Address


async def _replication(conn: RawConnection) -> dict[str, Any]:
    reply = await conn.execute("INFO", "replication")
    if isinstance(reply, Exception):
        raise RuntimeError(f"INFO replication failed: {reply}")
    return parse_info(reply)


async def _ok(conn: RawConnection, *args: str | int) -> None:
    reply = await conn.execute(*args)
    if reply != b"OK" and reply != _ALREADY:
        raise RuntimeError(f"{' '.join(map(str, args))} failed: {reply!r}")


async def _wait_caught_up(replica: RawConnection, offset: int) -> None:
    while True:
        info = await _replication(replica)
        if info.get("master_link_status") == "up" and int(info.get("slave_repl_offset", -1)) >= (
            offset
        ):
            return
        await trio.sleep(0.01)


async def _offset(conn: RawConnection) -> int:
    return int((await _replication(conn)).get("master_repl_offset", 0))


def _begin_switch(sim: MaintenanceSimulator, address: Address) -> None:
    """Re-point ``sim`` to ``address`` (the new primary): new connections wait, and each
    open one moves there at its next command once the switch ended (:func:`_end_switch`)."""
    sim._switching = trio.Event()
    sim._backend, sim._backend_is_sim = address, False
    sim._epoch += 1


def _end_switch(sim: MaintenanceSimulator) -> None:
    switching, sim._switching = sim._switching, None
    if switching is not None:
        switching.set()


def _quiescent(sim: MaintenanceSimulator) -> bool:
    """No command of an open connection is still owed a reply by the old upstream, and no
    transaction (MULTI, WATCH) is open there: nothing more reaches it through ``sim``."""
    return all(
        c.epoch == sim._epoch
        or (c.replies >= c.expected and not (c.in_multi or c.watching or c.c2s_streaming))
        for c in sim._conns.values()
    )


async def _wait_quiescent(sims: list[MaintenanceSimulator], timeout: float) -> None:
    """Wait (at most ``timeout`` s: a command blocked longer, e.g. ``BLPOP 0``, is left to
    finish on the old server) until no command through ``sims`` awaits the old upstream."""
    with trio.move_on_after(timeout):
        while not all(_quiescent(sim) for sim in sims):
            await trio.sleep(0.001)


async def _switch_over(
    a: RawConnection,
    b: RawConnection,
    sims: list[MaintenanceSimulator],
    dst_addr: Address,
    sync_timeout: float,
    pause_timeout: float,
) -> tuple[float, int]:
    """The data switch; returns (seconds held, final offset)."""
    src_addr = sims[0].backend_address
    # redis-server waits 5 s by default before a diskless full sync, for more replicas to
    # join; there is only one here. (Best effort: a server may refuse CONFIG.)
    await a.execute("CONFIG", "SET", "repl-diskless-sync-delay", "0")
    try:
        with trio.fail_after(sync_timeout):
            await _ok(b, "REPLICAOF", src_addr[0], src_addr[1])
            await _wait_caught_up(b, await _offset(a))
    except BaseException:
        # Nothing was switched: the target's server is a primary again, as it was.
        # (On a connection of its own: ``b`` may have been cancelled mid-command.)
        with trio.CancelScope(shield=True), trio.move_on_after(5):
            async with await connect_raw(dst_addr) as fresh:
                await fresh.execute("REPLICAOF", "NO", "ONE")
        raise
    held_at = trio.current_time()
    for sim in sims:
        _begin_switch(sim, dst_addr)
    try:
        # Commands through the simulators are held now; the ones already sent finish on
        # the old primary (bounded: a blocked command is not waited for).
        await _wait_quiescent(sims, min(pause_timeout, sync_timeout) / 2)
        await _ok(a, "CLIENT", "PAUSE", int(pause_timeout * 1000), "WRITE")
        try:
            with trio.fail_after(sync_timeout):
                offset = await _offset(a)
                await _wait_caught_up(b, offset)
            await _ok(b, "REPLICAOF", "NO", "ONE")
            await _ok(a, "REPLICAOF", dst_addr[0], dst_addr[1])
        finally:
            with trio.CancelScope(shield=True):
                await a.execute("CLIENT", "UNPAUSE")
    finally:
        for sim in sims:
            _end_switch(sim)
    return trio.current_time() - held_at, offset


def _data_address(target: MaintenanceSimulator | RedisServer | Address) -> Address:
    if isinstance(target, MaintenanceSimulator):
        return target.home_address
    return _resolve(target)[0]


async def migrate(
    source: MaintenanceSimulator,
    target: MaintenanceSimulator | RedisServer | Address,
    *,
    time: int = 15,
    grace: float = 2.0,
    close_after: float | None = None,
    seq_id: int | None = None,
    sync_timeout: float = 10.0,
    pause_timeout: float = 10.0,
) -> MigrationResult:
    """Move the data behind ``source`` to ``target``'s server for real, then the clients,
    as managed Redis does: no command fails for a client that follows MOVING.

    1. ``target``'s server (its :attr:`~MaintenanceSimulator.home_address` when it is a
       simulator) becomes a replica of the server ``source`` forwards to (``REPLICAOF``; the
       source's ``repl-diskless-sync-delay`` is set to 0) and catches up;
    2. the switch: new commands through ``source`` (and through ``target`` when it forwards
       to the same server, as after an earlier move) are held; the commands already sent
       get their replies; writes of clients connected to the old server directly are
       paused (``CLIENT PAUSE WRITE``); once the replica has the final offset it is
       promoted (``REPLICAOF NO ONE``) and the old server becomes its replica. The hold
       lasts about as long as this catch-up (``paused_for``);
    3. the simulators' upstream is now the new primary: every open connection is re-pointed
       at its next command (its HELLO, AUTH, SELECT and CLIENT SETNAME replayed), so a
       client still on the old address keeps reading and writing, on the new server; a
       connection in a transaction (MULTI or WATCH) or subscribed moves once that ends
       (subscribers keep receiving: the old server replicates PUBLISH);
    4. MOVING (``time`` seconds, endpoint per client type, pointing to ``target``) is sent
       to the source's connections and remembered for connections opened on the old address
       during the window (they are served by the new primary too);
    5. ``time + grace`` seconds after the MOVING (``close_after`` overrides), the
       connections open at step 4 are closed, as in
       :func:`~trio_maint.testing.moving_scenario` (managed Redis: declared 15 s, old socket
       closed 16.6 to 18.4 s after the notice). New connections to ``source`` keep going to
       the new primary. Returns then; run it in a task to keep traffic going meanwhile.

    Every write acknowledged by either server is on the new one. It can run again in the
    other direction (``migrate(b, a)`` after ``migrate(a, b)``), any number of times.

    :param source: the simulator whose upstream holds the data now.
    :param target: a simulator in front of the destination server (usual), or the
        destination server itself.
    :param time: MOVING's ``time`` (whole seconds).
    :param grace: seconds after ``time`` before the old connections are closed.
    :param close_after: seconds after the MOVING before closing (default ``time + grace``).
    :param sync_timeout: seconds to wait for the replica to catch up.
    :param pause_timeout: the write pause's safety bound in seconds (lifted much earlier).
    :raises ValueError: ``target``'s server is the one ``source`` already forwards to, or
        ``source`` forwards to ``target`` itself (after a MOVING scenario).
    :raises TimeoutError: the replica did not catch up in ``sync_timeout`` seconds (the
        target's server is made a primary again: nothing was switched).
    :raises RuntimeError: a server refused a command.
    """
    src_addr = source.backend_address
    dst_addr = _data_address(target)
    where = format_host_port(*source.address)
    if src_addr == dst_addr:
        raise ValueError(
            f"the simulator on {where} already forwards to the target's server "
            f"{format_host_port(*dst_addr)}: there is nothing to move"
        )
    if isinstance(target, MaintenanceSimulator) and src_addr == target.address:
        # After a MOVING scenario (set_backend(target)) the source's clients already use
        # the target's server: there is nothing behind the source to move.
        raise ValueError(
            f"the simulator on {where} already forwards to the one on "
            f"{format_host_port(*target.address)} (after a MOVING): the data is on the "
            "target's server; migrate from the target to move it back"
        )
    sims = [source]
    if isinstance(target, MaintenanceSimulator) and target.backend_address == src_addr:
        sims.append(target)  # back to its own server: it forwards to the old primary
    try:
        async with await connect_raw(src_addr) as a, await connect_raw(dst_addr) as b:
            paused_for, offset = await _switch_over(
                a, b, sims, dst_addr, sync_timeout, pause_timeout
            )
    except trio.TooSlowError:
        raise TimeoutError(f"the replica did not catch up within {sync_timeout} s") from None
    moved = [c.id for c in source.connections]
    seq = await source.inject_moving(seq_id=seq_id, time=time, target=target, remember=True)
    await trio.sleep(time + grace if close_after is None else close_after)
    source.forget("MOVING")
    source.close_connections(connections=moved)
    return MigrationResult(
        seq_id=seq, moved=moved, paused_for=paused_for, offset=offset, upstream=dst_addr
    )
