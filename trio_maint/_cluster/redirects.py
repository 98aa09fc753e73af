"""What the cluster client needs to know about commands and cluster replies (no I/O): which
commands may read from a replica (the server's ``readonly`` flag), the counter each
retryable condition is counted under, the node a ``MOVED``/``ASK`` points to, and the
backoff between retries. What a reply means and what follows it is the one retry policy
(:mod:`trio_maint._sansio.retry`)."""

from __future__ import annotations

from typing import Any, Final

from .._sansio.endpoint import format_host_port
from .._sansio.keyspecs import READONLY_COMMANDS, is_readonly
from .._sansio.outcome import Kind, Outcome, RedirectTarget
from .._sansio.retry import Finish, RetryPolicy
from .._sansio.retry import backoff as _policy_backoff
from .._sansio.slots import NodeInfo

__all__ = [
    "COUNTER_NAMES",
    "READ_COMMANDS",
    "backoff",
    "cluster_policy",
    "command_name",
    "final_error",
    "is_readonly",
    "target_node",
]

#: Read-only commands (``"NAME"``, subcommands as ``"NAME|SUB"``) that may go to a replica
#: with ``read_from_replicas``: those the server flags ``readonly`` in its command table
#: (:data:`~trio_maint._sansio.keyspecs.READONLY_COMMANDS`). :func:`is_readonly` looks a
#: command's arguments up, subcommand included.
READ_COMMANDS: Final = READONLY_COMMANDS

#: The outcomes ``RedisCluster.redirections`` counts, by the name it counts them under
#: (docs/cluster.md): every one a command meets, also the last one raised when a budget
#: is spent. ``"connection"``: a connection that failed before the request was written.
COUNTER_NAMES: Final[dict[Kind, str]] = {
    Kind.MOVED: "moved",
    Kind.ASK: "ask",
    Kind.TRYAGAIN: "tryagain",
    Kind.CLUSTERDOWN: "clusterdown",
    Kind.READONLY: "readonly",
    Kind.LOADING: "loading",
    Kind.LOST_BEFORE_WRITE: "connection",
}


def cluster_policy(max_redirects: int, retry_timeout: float) -> RetryPolicy:
    """The retry policy of a cluster client with these options (``max_redirects``,
    ``int``; ``retry_timeout``, seconds, ``float``): :meth:`RetryPolicy.for_cluster`.

    :raises TypeError, ValueError: an option out of range.
    """
    return RetryPolicy.for_cluster(max_redirects=max_redirects, retry_timeout=retry_timeout)


def command_name(arg: Any) -> str:
    """A command name (``str`` or ``bytes``) in upper case."""
    if isinstance(arg, bytes):
        return arg.decode("ascii", "replace").upper()
    return str(arg).upper()


def target_node(target: RedirectTarget, current_host: str) -> NodeInfo:
    """The node a ``MOVED``/``ASK`` reply points to, as a :class:`NodeInfo`; an empty host
    in the reply (``MOVED 3999 :6380``) means ``current_host`` (``str``), the host of the
    node that replied."""
    host, port = target.address(current_host)
    return NodeInfo(format_host_port(host, port), host, port)


def final_error(outcome: Outcome, finish: Finish, node_name: str) -> BaseException:
    """The error to raise for an error ``outcome`` the policy did not resend (``finish``),
    met on ``node_name``: ``outcome.value``, with the reason it was not resent as a note
    when a resend was possible (a budget spent)."""
    error = outcome.value
    assert isinstance(error, BaseException)  # only error outcomes are given
    if finish.reason and outcome.kind.proves_not_run:
        error.add_note(f"{node_name}: {finish.reason}")
    return error


def backoff(attempt: int) -> float:
    """Seconds to wait before retry number ``attempt`` (from 0): 10 ms doubling, at most
    250 ms (:func:`trio_maint._sansio.retry.backoff`)."""
    return _policy_backoff(attempt)
