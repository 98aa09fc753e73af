"""Which commands a cluster client runs on every master, and how their replies combine,
sans-IO (no Trio imports): from the server's own command tips (``request_policy`` and
``response_policy`` of ``COMMAND``, kept in :data:`~trio_maint._sansio.command_table.TIPS`).

A keyless command tipped ``request_policy:all_shards`` or ``all_nodes`` is run on every
master when its ``response_policy`` says how to combine the replies (``agg_sum``,
``agg_logical_and``/``_or``, ``agg_min``/``_max``, ``all_succeeded``, ``one_succeeded``),
and for ``KEYS`` (the keys of every master, concatenated). Commands whose replies the
server calls ``special`` (``INFO``, ``MEMORY STATS``, ``LATENCY ...``), or that have no
response policy and are not ``KEYS`` (``RANDOMKEY``, ``SLOWLOG GET``), ``PING`` and ``WAIT`` run on
one node as any keyless command. Masters only: ``all_nodes`` commands (``SCRIPT LOAD``,
``SCRIPT FLUSH``, ``CONFIG SET``) do not reach replicas (docs/cluster.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from .command_table import TIPS
from .errors import RedisError
from .keyspecs import CONTAINERS, command_name

__all__ = ["FANOUT", "combine_replies", "fanout_policy"]

_COMBINABLE: Final = frozenset(
    {
        "agg_sum",
        "agg_logical_and",
        "agg_logical_or",
        "agg_min",
        "agg_max",
        "all_succeeded",
        "one_succeeded",
    }
)
#: Run on one node although tipped for every shard: ``PING`` checks one connection;
#: ``WAIT`` counts the replicas of this connection's own writes.
_ONE_NODE: Final = frozenset({"PING", "WAIT"})


def _policies(tips: str) -> tuple[str | None, str | None]:
    request = response = None
    for tip in tips.split():
        kind, _, value = tip.partition(":")
        if kind == "request_policy":
            request = value
        elif kind == "response_policy":
            response = value
    return request, response


def _build() -> dict[str, str]:
    table: dict[str, str] = {}
    for name, tips in TIPS.items():
        request, response = _policies(tips)
        if request not in ("all_shards", "all_nodes") or name in _ONE_NODE:
            continue
        if response in _COMBINABLE:
            table[name] = response
        elif response is None and name == "KEYS":
            table[name] = "concat"
    return table


#: Command (``"DBSIZE"``, ``"SCRIPT|LOAD"``) → how the masters' replies combine
#: (a ``response_policy`` value, or ``"concat"``).
FANOUT: Final[dict[str, str]] = _build()
_TOP: Final = frozenset(name.partition("|")[0] for name in FANOUT)


def fanout_policy(args: Sequence[Any]) -> str | None:
    """How the command ``args`` combines the replies of every master, or ``None`` when it
    runs on one node (the usual case: one set lookup)."""
    name = command_name(args[0])
    if name not in _TOP:
        return None
    if name in CONTAINERS:
        if len(args) < 2:
            return None
        name = f"{name}|{command_name(args[1])}"
    return FANOUT.get(name)


def _as_bool_list(reply: Any) -> list[bool]:
    return [bool(item) for item in reply]


def combine_replies(policy: str, replies: Sequence[Any]) -> Any:
    """The reply of a command run on every master, from theirs (in the masters' order;
    an error reply is a :class:`~trio_maint.RedisError` value).

    :param policy: from :func:`fanout_policy`.
    :returns: ``agg_sum``: the sum; ``agg_logical_and``/``_or``: element by element for
        lists of ``0``/``1`` (``SCRIPT EXISTS``: a script counts only where every master
        has it), else of the values; ``agg_min``/``_max``; ``concat``: the lists joined;
        ``all_succeeded``: the first reply; ``one_succeeded``: the first reply that is not
        an error.
    :raises RedisError: the first error reply, unless ``one_succeeded`` and one master
        succeeded.
    """
    errors = [reply for reply in replies if isinstance(reply, RedisError)]
    if policy == "one_succeeded":
        for reply in replies:
            if not isinstance(reply, RedisError):
                return reply
        raise errors[0]
    if errors:
        raise errors[0]
    if not replies:
        return None
    if policy == "agg_sum":
        return sum(int(reply) for reply in replies)
    if policy in ("agg_logical_and", "agg_logical_or"):
        pick = all if policy == "agg_logical_and" else any
        if isinstance(replies[0], list):
            columns = zip(*(_as_bool_list(reply) for reply in replies), strict=True)
            return [int(pick(column)) for column in columns]
        return int(pick(bool(reply) for reply in replies))
    if policy == "agg_min":
        return min(replies)
    if policy == "agg_max":
        return max(replies)
    if policy == "concat":
        return [item for reply in replies for item in reply]
    return replies[0]
