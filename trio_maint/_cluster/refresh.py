"""Keeping a cluster client's slot map current: refresh rounds (``CLUSTER SHARDS``, or
``CLUSTER SLOTS`` on older servers), coalesced background refreshes, and ``SMIGRATED``.

:class:`SlotMapRefresh` is the part of :class:`~trio_maint._cluster.client.RedisCluster`
that does this; the client owns the state (docs/cluster.md).
"""

from __future__ import annotations

import collections
import logging
import random
from typing import Final

import trio

from .._net.connection import Connection
from .._sansio.endpoint import format_host_port, split_host_port
from .._sansio.errors import (
    ClusterDownError,
    ConnectionError,
    MovedError,
    RedisError,
    ResponseError,
)
from .._sansio.errors import TimeoutError as RedisTimeoutError
from .._sansio.loglimit import log_limited
from .._sansio.notifications import SMigrated
from .._sansio.slots import NodeInfo, SlotMap, parse_slot_ranges
from .node import Node

__all__ = ["SMIGRATED_DEDUP_SIZE", "SMIGRATED_MAX_TARGETS", "SlotMapRefresh"]

logger = logging.getLogger("trio_maint.cluster")

#: Most SMIGRATED sequence ids remembered per client for de-duplication.
SMIGRATED_DEDUP_SIZE: Final = 1024
#: Most distinct target nodes one SMIGRATED may point slots at (``int``); entries naming
#: more are left to the slot-map refresh it requests.
SMIGRATED_MAX_TARGETS: Final = 16


class SlotMapRefresh:
    """Slot-map refreshes, mixed into :class:`~trio_maint._cluster.client.RedisCluster`
    (which sets every attribute below in its constructor)."""

    startup_nodes: list[NodeInfo]
    refresh_cooldown: float
    refreshes: int
    smigrated_refreshes: int
    last_refresh_error: BaseException | None
    _nursery: trio.Nursery
    _map: SlotMap
    _closed: bool
    _refreshing: bool
    _refresh_pending: bool
    _rounds_started: int
    _rounds_done: int
    _round_finished: trio.Event
    _smigrated_seen: collections.OrderedDict[tuple[str, int], None]

    async def _node(self, info: NodeInfo) -> Node:
        raise NotImplementedError

    async def _fetch_map(self, node: Node) -> SlotMap:
        client = node.client
        assert client is not None
        try:
            reply = await client.execute_command("CLUSTER", "SHARDS")
            return SlotMap.from_shards(reply, node.info.host)
        except ResponseError as exc:
            if isinstance(exc, ClusterDownError | MovedError):
                raise
            reply = await client.execute_command("CLUSTER", "SLOTS")
            return SlotMap.from_slots(reply, node.info.host)

    async def _refresh_once(self) -> None:
        candidates: list[NodeInfo] = list(self._map.masters)
        random.shuffle(candidates)
        seen = {c.name for c in candidates}
        candidates += [s for s in self.startup_nodes if s.name not in seen]
        errors: list[str] = []
        for info in candidates:
            try:
                node = await self._node(info)
                new_map = await self._fetch_map(node)
            except (RedisError, ValueError) as exc:
                errors.append(f"{info.name}: {exc}")
                continue
            if new_map.covered == 0:
                errors.append(f"{info.name}: serves no slot map")
                continue
            self._map = new_map
            self.refreshes += 1
            return
        raise ConnectionError("no cluster node answered CLUSTER SHARDS/SLOTS: " + "; ".join(errors))

    def request_refresh(self) -> None:
        """Ask for a slot-map refresh in the background (synchronous).

        Requests are coalesced: while a refresh runs, any number of requests cause exactly
        one more refresh after it (never a lost one); refreshes are at least
        ``refresh_cooldown`` seconds apart.
        """
        self._refresh_pending = True
        if not self._refreshing and not self._closed:
            self._refreshing = True
            self._nursery.start_soon(self._refresh_loop)

    async def _refresh_loop(self) -> None:
        try:
            first = True
            while self._refresh_pending and not self._closed:
                if not first:
                    await trio.sleep(self.refresh_cooldown)
                first = False
                self._refresh_pending = False
                self._rounds_started += 1
                try:
                    await self._refresh_once()
                    self.last_refresh_error = None
                except RedisError as exc:
                    self.last_refresh_error = exc
                    log_limited(
                        logger,
                        logging.WARNING,
                        "slot_map_refresh_failed",
                        trio.current_time(),
                        "slot map refresh failed: %s",
                        exc,
                        extra={"event": "slot_map_refresh_failed"},
                    )
                finally:
                    self._rounds_done += 1
                    finished, self._round_finished = self._round_finished, trio.Event()
                    finished.set()
        finally:
            self._refreshing = False

    async def refresh_slots(self, timeout: float | None = 10.0) -> None:
        """Refresh the slot map and wait for a refresh that started after this call.

        :param timeout: seconds (``float``) to wait (``None``: forever).
        :raises TimeoutError: it did not finish in time (``trio.TooSlowError`` is not used).
        """
        wanted = self._rounds_started + 1
        self.request_refresh()
        with trio.move_on_after(float("inf") if timeout is None else timeout) as scope:
            while self._rounds_done < wanted and not self._closed:
                await self._round_finished.wait()
        if scope.cancelled_caught:
            raise RedisTimeoutError(f"the slot map refresh took longer than {timeout} s")

    def handle_smigrated(self, node_name: str, conn: Connection | None, n: SMigrated) -> bool:
        """React to an ``SMIGRATED`` notification read on ``node_name``'s connection
        ``conn`` (the maintenance handler already restored the connection's timeouts).

        Entries whose source is this node (its announced ``host:port``, or the address
        the connection dialed; pairs ``[target, slots]`` count as this node's) move their
        slots to the target in the map at once, and one lazy refresh is requested per
        sequence id (de-duplicated over the last 1,024 ids).

        :returns: ``True`` when it requested a refresh.
        """
        names = {node_name}
        if conn is not None:
            names.add(conn.endpoint_text)
        matching = [m for m in n.moves if m.source is None or m.source in names]
        if not matching:
            return False
        key = (node_name, n.seq_id)
        if key in self._smigrated_seen:
            return False
        self._smigrated_seen[key] = None
        while len(self._smigrated_seen) > SMIGRATED_DEDUP_SIZE:
            self._smigrated_seen.popitem(last=False)
        # Bounded work whatever the frame holds: at most SMIGRATED_MAX_TARGETS new
        # targets, and each range written in one slice (the refresh below corrects the
        # rest of the map).
        targets: dict[str, NodeInfo] = {}
        for move in matching:
            target = targets.get(move.target)
            if target is None:
                if len(targets) >= SMIGRATED_MAX_TARGETS:
                    continue
                try:
                    host, port = split_host_port(move.target, require_port=True)
                except ValueError:
                    continue
                target = targets[move.target] = NodeInfo(format_host_port(host, port), host, port)
            for first, last in parse_slot_ranges(move.slots):
                self._map.set_master_range(first, last, target)
        # One line per new seq id, which the server picks: rate-limited.
        if logger.isEnabledFor(logging.INFO):
            log_limited(
                logger,
                logging.INFO,
                "smigrated_reload",
                trio.current_time(),
                "SMIGRATED seq %d from %s: slots %.200s moved to %s; reloading the slot map",
                n.seq_id,
                node_name,
                ",".join(s for m in matching for s in m.slots),
                matching[0].target,
                extra={"event": "smigrated_reload", "seq_id": n.seq_id, "node": node_name},
            )
        self.smigrated_refreshes += 1
        self.request_refresh()
        return True
