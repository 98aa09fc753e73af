"""Lua scripts by digest: :class:`Script` (what ``register_script`` returns) and the
mixins that give :class:`~trio_maint.Redis`, :class:`~trio_maint.Pipeline`,
:class:`~trio_maint.RedisCluster` and :class:`~trio_maint.ClusterPipeline` their
``register_script`` method.

As redis-py's ``Script``: a call sends ``EVALSHA``; a ``NOSCRIPT`` reply (the server's
script cache lacks it: after a restart, a failover, ``SCRIPT FLUSH``, or a MOVING handoff
to another endpoint) proves the script did not run, so the call is sent again as ``EVAL``,
which runs it and caches it on that server for the calls that follow: one more round
trip, where redis-py sends ``SCRIPT LOAD`` and then ``EVALSHA`` again. In pipelines
(docs/scripting.md):

* a ``MULTI``/``EXEC`` transaction sends the first call of each script as ``EVAL`` and
  the others as ``EVALSHA``, in the same write: the transaction runs on one server in
  order, so ``NOSCRIPT`` cannot occur inside it (where it could not be cured);
* a pipeline without ``MULTI`` sends ``EVALSHA``; the calls answered ``NOSCRIPT`` are sent
  again as ``EVAL``, in their queued order, in one more write (per node on a cluster) —
  so they run after the pipeline's other commands.

The decisions are sans-IO, in :mod:`trio_maint._sansio.scripts`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

import trio

from .._sansio.errors import NoScriptError
from .._sansio.replies import Callback
from .._sansio.resp import CommandArg
from .._sansio.scripts import (
    ScriptCall,
    Stack,
    encode_script,
    is_noscript,
    noscript_indexes,
    script_arguments,
    script_sha,
)

if TYPE_CHECKING:
    from .._sansio.unset import Unset

__all__ = ["PipelineScripting", "Script", "Scripting", "resend_noscript"]


class _Executor(Protocol):
    """What a client running a script needs: ``execute_command`` (Redis, RedisCluster)."""

    def execute_command(self, *args: CommandArg) -> Awaitable[Any]: ...


class _Queue(Protocol):
    def _command(
        self,
        args: tuple[CommandArg, ...],
        callback: Callback | None = None,
        *,
        timeout: float | Literal[Unset.UNSET] | None = ...,
    ) -> Any: ...


class Scripting:
    """Mixin of the clients (:class:`~trio_maint.Redis`,
    :class:`~trio_maint.RedisCluster`): :meth:`register_script`."""

    __slots__ = ()

    def register_script(self, script: str | bytes) -> Script:
        """A :class:`Script` for the Lua source ``script`` (``str``, sent UTF-8 encoded,
        or ``bytes``), run through this client by default, as redis-py's
        ``register_script``. Nothing is sent until the script is called.

        :raises TypeError: ``script`` is neither ``str`` nor ``bytes``.
        """
        return Script(self, script)


class PipelineScripting(Scripting):
    """Mixin of the pipelines (:class:`~trio_maint.Pipeline`,
    :class:`~trio_maint.ClusterPipeline`): :meth:`register_script`, whose scripts queue
    their calls in the pipeline (see the module docs for how they are sent)."""

    __slots__ = ()


class Script:
    """A Lua script called by its SHA1 digest, as redis-py's ``Script``. Get one from
    ``register_script`` of a client or pipeline (or ``Script(client, source)``).

    * ``registered_client``: the client or pipeline calls go to by default.
    * ``script``: the source, as given (``str`` or ``bytes``).
    * ``sha``: its digest (``str``, 40 lower-case hex digits, as ``SCRIPT LOAD`` answers).

    :raises TypeError: ``script`` is neither ``str`` nor ``bytes``.
    """

    __slots__ = ("_call", "registered_client", "script", "sha")

    def __init__(self, registered_client: Scripting, script: str | bytes) -> None:
        body = encode_script(script)
        self.registered_client = registered_client
        self.script = script
        self.sha = script_sha(body)
        self._call = ScriptCall(body, self.sha)

    def __repr__(self) -> str:
        return f"<Script {self.sha}>"

    async def __call__(
        self,
        keys: Sequence[CommandArg] | None = None,
        args: Iterable[CommandArg] | None = None,
        client: Scripting | None = None,
    ) -> Any:
        """Run the script with ``keys`` (its ``KEYS``, which also route it on a cluster)
        and ``args`` (its ``ARGV``) through ``client`` (default: ``registered_client``).

        On a client (``Redis``, ``RedisCluster``): sends ``EVALSHA``, and ``EVAL`` once
        if the server answered ``NOSCRIPT``; returns the script's reply. On a pipeline:
        queues the call and returns the pipeline (the reply comes from ``execute()``).

        :raises TypeError: ``keys`` or ``args`` is a single ``str``/``bytes``.
        :raises ResponseError: the script failed (or any error of
            :meth:`Redis.execute_command`); ``NOSCRIPT`` is never raised by a call made
            here.
        """
        target = self.registered_client if client is None else client
        arguments = script_arguments(keys, args)
        call = self._call
        if isinstance(target, PipelineScripting):
            await trio.lowlevel.checkpoint()
            return cast(_Queue, target)._command(call.evalsha(arguments), call)
        executor = cast(_Executor, target)
        try:
            return await executor.execute_command("EVALSHA", call.sha, *arguments)
        except NoScriptError as exc:
            if not is_noscript(exc):
                raise  # the script's own error: it ran
        # It did not run: send the body (outside the handler: no chained error).
        return await executor.execute_command("EVAL", call.body, *arguments)


async def resend_noscript(
    stack: Stack,
    replies: list[Any],
    send: Callable[[list[int], Stack], Awaitable[list[Any]]],
) -> list[Any]:
    """For a pipeline without ``MULTI``: the script calls of ``stack`` answered
    ``NOSCRIPT`` in ``replies`` are sent again as ``EVAL`` in their queued order with
    ``await send(indexes, entries)`` (``entries``: ``(EVAL command, callback)`` each;
    one reply per entry, error replies as values); returns ``replies`` with theirs in
    place (the same list when there was nothing to resend)."""
    indexes = noscript_indexes(stack, replies)
    if not indexes:
        return replies
    entries: Stack = []
    for index in indexes:
        command, callback = stack[index]
        assert isinstance(callback, ScriptCall)
        entries.append((callback.as_eval(command), callback))
    again = await send(indexes, entries)
    result = list(replies)
    for index, reply in zip(indexes, again, strict=True):
        result[index] = reply
    return result
