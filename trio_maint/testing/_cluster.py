"""A real Redis Cluster of ``redis-server`` processes on loopback: :class:`LocalCluster`.

Every node is a :class:`~trio_maint.testing.RedisServer` started with
``--cluster-enabled yes`` (its ``nodes.conf`` lives in the server's temporary directory).
The nodes are joined with ``CLUSTER MEET``, masters get their slots with
``CLUSTER ADDSLOTSRANGE`` and replicas follow with ``CLUSTER REPLICATE``. Helpers move
slots for real (``SETSLOT IMPORTING/MIGRATING``, ``MIGRATE`` of the keys in batches,
``SETSLOT NODE``), fail a master over to its replica, and add or remove nodes.

The helpers are blocking (they talk to the nodes over plain sockets); from Trio call the
``*_async`` variants, which run them in a worker thread.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from types import TracebackType
from typing import Any, Self

import trio

from .._sansio.replies import parse_info
from ._cluster_node import (
    SLOT_COUNT,
    ClusterError,
    ClusterNode,
    SyncConnection,
    check_replies,
    cluster_free_port,
    in_thread,
    server_call,
    setslot,
    text,
)
from ._server import RedisServer
from ._simulator import MaintenanceSimulator

__all__ = ["LocalCluster"]


class LocalCluster:
    """A real Redis Cluster of ``redis-server`` processes on free loopback ports.

    Use as ``with LocalCluster() as cluster:`` or ``async with LocalCluster() as cluster:``;
    both wait until every node reports ``cluster_state:ok`` and agrees on the slot map,
    and stop (and reap) every process on exit, also when the body raised.

    :param masters: number of masters (``int`` >= 1); the 16384 slots are split evenly.
    :param replicas: replicas per master (``int`` >= 0).
    :param host: the loopback address to bind.
    :param node_timeout: ``cluster-node-timeout`` in seconds (``float``).
    :param extra_args: more ``redis-server`` arguments for every node.
    :param executable: path of ``redis-server`` (default: ``$REDIS_SERVER`` or PATH).
    :param startup_timeout: seconds (``float``) to wait for the cluster to become ready.
    :raises RedisServerNotFoundError: the binary is missing.
    :raises ClusterError: the cluster did not form in time.
    """

    def __init__(
        self,
        masters: int = 3,
        replicas: int = 1,
        *,
        host: str = "127.0.0.1",
        node_timeout: float = 2.0,
        extra_args: Sequence[str] = (),
        executable: str | None = None,
        startup_timeout: float = 30.0,
    ) -> None:
        if masters < 1 or replicas < 0:
            raise ValueError("a cluster needs masters >= 1 and replicas >= 0")
        self.master_count = masters
        self.replica_count = replicas
        self.host = host
        self.node_timeout = node_timeout
        self.extra_args = tuple(extra_args)
        self.executable = executable
        self.startup_timeout = startup_timeout
        #: Every node started (and not removed), in start order (``list[ClusterNode]``).
        self.nodes: list[ClusterNode] = []
        self._ports: list[int] = []

    # ------------------------------------------------------------------ addresses

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        """``(host, port)`` of every node."""
        return [(n.host, n.port) for n in self.nodes]

    @property
    def url(self) -> str:
        """``redis://host:port`` of the first node (a startup node for a cluster client)."""
        return self.nodes[0].url

    def node(self, name_or_id: str) -> ClusterNode:
        """The node with this ``"host:port"`` or node id.

        :raises KeyError: no such node.
        """
        for node in self.nodes:
            if name_or_id in (node.name, node.node_id):
                return node
        raise KeyError(name_or_id)

    # ------------------------------------------------------------------ lifecycle

    def _new_server(self) -> RedisServer:
        port = cluster_free_port(self.host, self._ports)
        self._ports.append(port)
        args = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            str(int(self.node_timeout * 1000)),
            "--cluster-require-full-coverage",
            "yes",
            "--cluster-allow-replica-migration",
            "no",
            "--repl-diskless-sync-delay",
            "0",
            *self.extra_args,
        ]
        return RedisServer(port=port, host=self.host, extra_args=args, executable=self.executable)

    def _start_node(self) -> ClusterNode:
        server = self._new_server()
        try:
            server.__enter__()
            node_id = text(server_call(server, "CLUSTER", "MYID"))
        except BaseException:
            server.stop()
            raise
        node = ClusterNode(server, node_id)
        self.nodes.append(node)
        return node

    def start(self) -> None:
        """Start every process, join them and wait for ``cluster_state:ok`` (blocking).

        :raises ClusterError: the cluster did not form within ``startup_timeout``.
        """
        if self.nodes:
            raise RuntimeError("this LocalCluster is already started")
        try:
            total = self.master_count * (1 + self.replica_count)
            for _ in range(total):
                self._start_node()
            masters = self.nodes[: self.master_count]
            replicas = self.nodes[self.master_count :]
            for epoch, node in enumerate(self.nodes, 1):
                node.call("CLUSTER", "SET-CONFIG-EPOCH", epoch)
            per = SLOT_COUNT // self.master_count
            for i, node in enumerate(masters):
                first = i * per
                last = SLOT_COUNT - 1 if i == self.master_count - 1 else first + per - 1
                node.call("CLUSTER", "ADDSLOTSRANGE", first, last)
            for node in self.nodes[1:]:
                node.call("CLUSTER", "MEET", self.host, self.nodes[0].port)
            self._wait(self._all_known, "every node to know every other node")
            for i, node in enumerate(replicas):
                master = masters[i % self.master_count]
                node.call("CLUSTER", "REPLICATE", master.node_id)
            self.wait_ready()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop and reap every node; idempotent."""
        nodes, self.nodes = self.nodes, []
        for node in nodes:
            node.server.stop()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        try:
            await trio.to_thread.run_sync(self.start, abandon_on_cancel=False)
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

    # ------------------------------------------------------------------ state

    def _wait(self, predicate: Callable[[], bool], what: str, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (self.startup_timeout if timeout is None else timeout)
        while True:
            try:
                if predicate():
                    return
            except (OSError, ClusterError):
                pass
            if time.monotonic() > deadline:
                raise ClusterError(f"timed out waiting for {what}")
            time.sleep(0.05)

    def _all_known(self) -> bool:
        ids = {n.node_id for n in self.nodes}
        for node in self.nodes:
            known = {line.split()[0] for line in self.cluster_nodes(node)}
            if not ids <= known:
                return False
        return True

    def cluster_nodes(self, node: ClusterNode) -> list[str]:
        """``CLUSTER NODES`` of ``node``, one line per known node (``list[str]``)."""
        return [line for line in text(node.call("CLUSTER", "NODES")).splitlines() if line]

    def slot_owners(self, node: ClusterNode | None = None) -> dict[int, str]:
        """``slot -> node id`` of the master serving each slot, as ``node`` (default: the
        first node) sees it (``dict[int, str]``)."""
        owners: dict[int, str] = {}
        for entry in (node or self.nodes[0]).call("CLUSTER", "SLOTS"):
            owner = text(entry[2][2])
            for slot in range(int(entry[0]), int(entry[1]) + 1):
                owners[slot] = owner
        return owners

    def _topology(self, node: ClusterNode) -> list[tuple[str, str, str]]:
        """``(node id, "master"|"slave", master id)`` for every node ``node`` knows."""
        out = []
        for line in self.cluster_nodes(node):
            fields = line.split()
            flags = set(fields[2].split(","))
            if flags & {"fail", "fail?", "handshake", "noaddr"}:
                return []  # not settled
            role = "slave" if "slave" in flags else "master"
            out.append((fields[0], role, fields[3]))
        return sorted(out)

    def _agreed(self) -> bool:
        reference: Any = None
        for node in self.nodes:
            info = parse_info(node.call("CLUSTER", "INFO"))
            if info.get("cluster_state") != "ok":
                return False
            view = (
                sorted(
                    (int(e[0]), int(e[1]), text(e[2][2])) for e in node.call("CLUSTER", "SLOTS")
                ),
                self._topology(node),
            )
            if reference is None:
                reference = view
            elif view != reference:
                return False
        return (
            reference is not None
            and len(reference[1]) == len(self.nodes)
            and sum(e[1] - e[0] + 1 for e in reference[0]) == SLOT_COUNT
        )

    def _replicas_synced(self) -> bool:
        for node in self.nodes:
            info = parse_info(node.call("INFO", "replication"))
            if info.get("role") == "slave" and info.get("master_link_status") != "up":
                return False
        return True

    def wait_ready(self, timeout: float | None = None) -> None:
        """Block until every node says ``cluster_state:ok``, all agree on the slot map
        and on who replicates whom (``CLUSTER NODES``, no node flagged failing), and every
        replica's link to its master is up.

        :param timeout: seconds (``float``); default ``startup_timeout``.
        :raises ClusterError: not reached in time.
        """
        self._wait(lambda: self._agreed() and self._replicas_synced(), "cluster_state:ok", timeout)

    async def wait_ready_async(self, timeout: float | None = None) -> None:
        """As :meth:`wait_ready`, in a worker thread."""
        await in_thread(self.wait_ready, timeout)

    def role_of(self, node: ClusterNode) -> str:
        """``"master"`` or ``"replica"``, as ``node`` itself says (``ROLE``)."""
        role = text(node.call("ROLE")[0])
        return "master" if role == "master" else "replica"

    @property
    def masters(self) -> list[ClusterNode]:
        """The nodes that are masters now, in start order."""
        return [n for n in self.nodes if self.role_of(n) == "master"]

    def replicas_of(self, master: ClusterNode) -> list[ClusterNode]:
        """The replicas of ``master`` now (``list[ClusterNode]``)."""
        out = []
        for line in self.cluster_nodes(master):
            fields = line.split()
            if fields[3] == master.node_id and "fail" not in fields[2]:
                try:
                    out.append(self.node(fields[0]))
                except KeyError:
                    continue
        return out

    def slots_of(self, master: ClusterNode) -> list[int]:
        """The slots ``master`` serves, as the first node sees it (sorted ``list[int]``)."""
        return sorted(s for s, owner in self.slot_owners(master).items() if owner == master.node_id)

    def master_of_slot(self, slot: int) -> ClusterNode:
        """The master serving ``slot`` (as the first node sees it)."""
        return self.node(self.slot_owners()[slot])

    # ------------------------------------------------------------------ slot migration

    def migrate_slots(
        self,
        slots: Sequence[int] | range,
        source: ClusterNode,
        target: ClusterNode,
        *,
        batch: int = 100,
        on_phase: Callable[[str], None] | None = None,
        pause: float = 0.0,
    ) -> int:
        """Move ``slots`` from ``source`` to ``target`` for real, as ``redis-cli
        --cluster reshard`` does: ``SETSLOT IMPORTING`` on the target, ``SETSLOT
        MIGRATING`` on the source, ``MIGRATE`` of every key in batches of ``batch``,
        then ``SETSLOT NODE`` on the target, the source and every other master.

        :param on_phase: called with ``"migrating"`` once every slot is in the migrating
            state (before keys move), and ``"migrated"`` once ownership changed.
        :param pause: seconds (``float``) to wait between the two phases, so clients meet
            ``ASK`` redirections for a while.
        :returns: the number of keys moved (``int``).
        :raises ClusterError: a node refused a step.
        """
        slots = list(slots)
        src = SyncConnection(source.host, source.port)
        dst = SyncConnection(target.host, target.port)
        moved = 0
        try:
            check_replies(
                dst.pipeline(
                    [("CLUSTER", "SETSLOT", s, "IMPORTING", source.node_id) for s in slots]
                )
            )
            check_replies(
                src.pipeline(
                    [("CLUSTER", "SETSLOT", s, "MIGRATING", target.node_id) for s in slots]
                )
            )
            if on_phase is not None:
                on_phase("migrating")
            if pause:
                time.sleep(pause)
            for slot in slots:
                while True:
                    keys = src.call("CLUSTER", "GETKEYSINSLOT", slot, batch)
                    if not keys:
                        break
                    src.call(
                        "MIGRATE", target.host, target.port, "", 0, 10000, "REPLACE", "KEYS", *keys
                    )
                    moved += len(keys)
            check_replies(dst.pipeline([setslot(s, "NODE", target.node_id) for s in slots]))
            check_replies(src.pipeline([setslot(s, "NODE", target.node_id) for s in slots]))
            for node in self.masters:
                if node is source or node is target:
                    continue
                conn = SyncConnection(node.host, node.port)
                try:
                    check_replies(
                        conn.pipeline([setslot(s, "NODE", target.node_id) for s in slots])
                    )
                finally:
                    conn.close()
        finally:
            src.close()
            dst.close()
        if on_phase is not None:
            on_phase("migrated")
        return moved

    async def migrate_slots_async(
        self,
        slots: Sequence[int] | range,
        source: ClusterNode,
        target: ClusterNode,
        *,
        batch: int = 100,
        on_phase: Callable[[str], None] | None = None,
        pause: float = 0.0,
    ) -> int:
        """As :meth:`migrate_slots`, in a worker thread (``on_phase`` runs in that thread:
        use ``trio.from_thread`` to reach Trio from it)."""
        return await in_thread(
            lambda: self.migrate_slots(
                slots, source, target, batch=batch, on_phase=on_phase, pause=pause
            )
        )

    # ------------------------------------------------------------------ failover

    def failover(self, master: ClusterNode, *, force: bool = False) -> ClusterNode:
        """Promote a replica of ``master`` with ``CLUSTER FAILOVER`` (coordinated: the old
        master pauses writes until the replica caught up, so no acknowledged write is
        lost; ``force=True`` sends ``CLUSTER FAILOVER FORCE``). Waits until every node
        agrees on the new owner.

        :returns: the new master.
        :raises ClusterError: ``master`` has no replica, or the failover did not finish.
        """
        replicas = self.replicas_of(master)
        if not replicas:
            raise ClusterError(f"{master} has no replica to fail over to")
        replica = replicas[0]
        args: tuple[str, ...] = ("CLUSTER", "FAILOVER") + (("FORCE",) if force else ())
        replica.call(*args)
        self._wait(lambda: self.role_of(replica) == "master", "the replica to take over")
        self.wait_ready()
        return replica

    async def failover_async(self, master: ClusterNode, *, force: bool = False) -> ClusterNode:
        """As :meth:`failover`, in a worker thread."""
        return await in_thread(lambda: self.failover(master, force=force))

    def crash(
        self, master: ClusterNode, *, timeout: float | None = None, takeover: bool = False
    ) -> ClusterNode:
        """Kill ``master``'s process (``SIGKILL``: an unplanned failover), wait until the
        cluster elects one of its replicas, then ``CLUSTER FORGET`` the dead node on every
        other node and wait until the cluster is ready again. Writes the dead master had
        not yet replicated are lost, as in production.

        :param timeout: seconds (``float``) to wait for the election; default
            ``startup_timeout``.
        :param takeover: send ``CLUSTER FAILOVER TAKEOVER`` to the first replica at once
            (an operator's promotion, without the cluster's agreement) instead of waiting
            for the failure detection and the election (about ``node_timeout`` plus 1 s).
        :returns: the new master.
        :raises ClusterError: ``master`` has no replica, or no replica took over in time.
        """
        replicas = self.replicas_of(master)
        if not replicas:
            raise ClusterError(f"{master} has no replica to take over")
        slots = self.slots_of(master)
        process = master.server.process
        if process is not None and process.poll() is None:
            process.kill()
        master.server.stop()
        self.nodes.remove(master)
        if takeover:
            replicas[0].call("CLUSTER", "FAILOVER", "TAKEOVER")

        def elected() -> ClusterNode | None:
            for replica in replicas:
                if self.role_of(replica) == "master":
                    return replica
            return None

        self._wait(lambda: elected() is not None, "a replica to be elected", timeout)
        new_master = elected()
        assert new_master is not None
        if takeover and slots:  # every node knows the new owner before the old is forgotten

            def announced() -> bool:
                return all(self.slot_owners(n)[slots[0]] == new_master.node_id for n in self.nodes)

            self._wait(announced, "the new master to be known", timeout)
        for other in self.nodes:
            other.call("CLUSTER", "FORGET", master.node_id)
        self.wait_ready(timeout)
        return new_master

    async def crash_async(
        self, master: ClusterNode, *, timeout: float | None = None, takeover: bool = False
    ) -> ClusterNode:
        """As :meth:`crash`, in a worker thread."""
        return await in_thread(lambda: self.crash(master, timeout=timeout, takeover=takeover))

    # ------------------------------------------------------------------ membership

    def add_node(self, replica_of: ClusterNode | None = None) -> ClusterNode:
        """Start a new node, join it (``CLUSTER MEET``) and, with ``replica_of``, make it
        that master's replica; otherwise it is a master without slots (move some to it with
        :meth:`migrate_slots` or :meth:`rebalance`). Waits until the cluster is ready.

        :returns: the new node.
        """
        node = self._start_node()
        try:
            node.call("CLUSTER", "MEET", self.host, self.nodes[0].port)
            self._wait(self._all_known, "the new node to be known")
            if replica_of is not None:
                node.call("CLUSTER", "REPLICATE", replica_of.node_id)
            self.wait_ready()
        except BaseException:
            self.nodes.remove(node)
            node.server.stop()
            raise
        return node

    async def add_node_async(self, replica_of: ClusterNode | None = None) -> ClusterNode:
        """As :meth:`add_node`, in a worker thread."""
        return await in_thread(lambda: self.add_node(replica_of))

    def remove_node(self, node: ClusterNode) -> None:
        """Remove ``node`` (a replica, or a master that serves no slot): ``CLUSTER
        FORGET`` on every other node, then stop its process.

        :raises ClusterError: ``node`` still serves slots.
        """
        if self.role_of(node) == "master" and self.slots_of(node):
            raise ClusterError(f"{node} still serves slots: migrate them first")
        for replica in self.replicas_of(node):
            raise ClusterError(f"{node} still has replica {replica}")
        self.nodes.remove(node)
        try:
            for other in self.nodes:
                other.call("CLUSTER", "FORGET", node.node_id)
        finally:
            node.server.stop()
        self.wait_ready()

    async def remove_node_async(self, node: ClusterNode) -> None:
        """As :meth:`remove_node`, in a worker thread."""
        await in_thread(lambda: self.remove_node(node))

    def rebalance(self, target: ClusterNode, slots_per_master: int, *, batch: int = 100) -> int:
        """Move ``slots_per_master`` slots from every other master to ``target`` (the last
        ones each serves), e.g. after :meth:`add_node`. :returns: keys moved (``int``)."""
        moved = 0
        for master in self.masters:
            if master is target:
                continue
            owned = self.slots_of(master)
            if owned:
                moved += self.migrate_slots(owned[-slots_per_master:], master, target, batch=batch)
        self.wait_ready()
        return moved

    async def rebalance_async(
        self, target: ClusterNode, slots_per_master: int, *, batch: int = 100
    ) -> int:
        """As :meth:`rebalance`, in a worker thread."""
        return await in_thread(lambda: self.rebalance(target, slots_per_master, batch=batch))

    # ------------------------------------------------------------------ announced ports

    def announce_ports(self, ports: dict[ClusterNode, int]) -> None:
        """Make nodes announce another client port (``cluster-announce-port``; 0 restores
        the real one), e.g. a :class:`MaintenanceSimulator` in front of each, and wait until
        every node's slot map shows the new ports. ``MOVED``/``ASK`` and ``CLUSTER SHARDS``
        then name those ports (the cluster bus keeps using the real ones).

        :raises ClusterError: not propagated within ``startup_timeout``.
        """
        for node, port in ports.items():
            node.call("CONFIG", "SET", "cluster-announce-port", port)
        wanted = {node.node_id: port or node.port for node, port in ports.items()}

        def announced() -> bool:
            for node in self.nodes:
                for entry in node.call("CLUSTER", "SLOTS"):
                    for raw in entry[2:]:
                        node_id = text(raw[2])
                        if node_id in wanted and int(raw[1]) != wanted[node_id]:
                            return False
            return True

        self._wait(announced, "the announced ports to propagate")

    async def announce_ports_async(self, ports: dict[ClusterNode, int]) -> None:
        """As :meth:`announce_ports`, in a worker thread."""
        await in_thread(lambda: self.announce_ports(ports))

    @asynccontextmanager
    async def simulators(self) -> AsyncIterator[dict[str, MaintenanceSimulator]]:
        """Front every node with a :class:`MaintenanceSimulator` and make the cluster
        announce the simulators' ports, so cluster clients connect through them (and opt
        in to maintenance notifications there); on exit the real ports are announced
        again and the simulators closed.

        Yields ``{node_id: simulator}``; inject ``SMIGRATING``/``SMIGRATED`` on a node's
        simulator around :meth:`migrate_slots_async`, naming nodes by their
        simulator's address (``str(Endpoint(*sim.address))``), as the cluster announces them.
        """
        async with AsyncExitStack() as stack:
            sims: dict[str, MaintenanceSimulator] = {}
            for node in list(self.nodes):
                sim = MaintenanceSimulator(backend=node.server)
                sims[node.node_id] = await stack.enter_async_context(sim)
            nodes = {self.node(node_id): sim.port for node_id, sim in sims.items()}
            await self.announce_ports_async(nodes)
            try:
                yield sims
            finally:
                with trio.CancelScope(shield=True):
                    alive = {n: 0 for n in nodes if n in self.nodes}
                    await self.announce_ports_async(alive)

    def __repr__(self) -> str:
        return f"<LocalCluster {len(self.nodes)} nodes {[n.port for n in self.nodes]}>"
