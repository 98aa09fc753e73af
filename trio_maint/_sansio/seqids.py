"""Which MOVING is new: the seqID rule (sans-IO; ``now`` is passed in).

A MOVING is known by its *source* (the endpoint of the connection it was read from) and
its sequence id. It is new when its source has sent no MOVING yet, or only lower sequence
ids; an older or equal one is a replay (managed Redis sends MOVING on every connection and
replays it to connections opened during the window). A node may number its notifications
afresh (every ``MaintenanceSimulator`` starts at 1001; a node the client left and comes
back to may have restarted), so a source's record is forgotten once a move *to* that
endpoint has completed: once that MOVING's ``time`` has run out. See docs/maintenance.md.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final, TypeVar

from .endpoint import Endpoint

__all__ = ["MAX_SOURCES", "MovingSeqIds"]

_V = TypeVar("_V", int, float)

#: Most endpoints remembered, as sources and as move targets (``int``), least recently
#: used dropped first: a stream of MOVINGs to distinct endpoints stays bounded.
MAX_SOURCES: Final = 256


class MovingSeqIds:
    """The latest sequence id accepted from each source, and when moves complete.

    :param max_sources: most endpoints remembered (``int`` >= 1).
    """

    def __init__(self, max_sources: int = MAX_SOURCES) -> None:
        if max_sources < 1:
            raise ValueError("max_sources: must be >= 1")
        self.max_sources: Final = max_sources
        self._latest: OrderedDict[Endpoint, int] = OrderedDict()
        self._arrivals: OrderedDict[Endpoint, float] = OrderedDict()

    def is_new(self, source: Endpoint, seq_id: int, now: float) -> bool:
        """Whether a MOVING ``seq_id`` (``int``) read from ``source`` at ``now`` is new."""
        arrived = self._arrivals.get(source)
        if arrived is not None and now >= arrived:
            del self._arrivals[source]  # a move to it completed: it may number afresh
            self._latest.pop(source, None)
        latest = self._latest.get(source)
        return latest is None or seq_id > latest

    def accept(
        self, source: Endpoint, seq_id: int, target: Endpoint | None, deadline: float
    ) -> None:
        """Record a new MOVING from ``source`` to ``target`` (``None``: a null endpoint,
        the same address) whose ``time`` runs out at ``deadline`` (``float``)."""
        _put(self._latest, source, seq_id, self.max_sources)
        if target is not None:
            _put(self._arrivals, target, deadline, self.max_sources)

    def __len__(self) -> int:
        return len(self._latest)


def _put(table: OrderedDict[Endpoint, _V], key: Endpoint, value: _V, cap: int) -> None:
    table[key] = value
    table.move_to_end(key)
    while len(table) > cap:
        table.popitem(last=False)
