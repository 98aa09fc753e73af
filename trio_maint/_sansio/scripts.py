"""Lua scripts called by their SHA1 digest, sans-IO (no Trio import): the decisions behind
:class:`~trio_maint.Script` (trio_maint/_client/script.py; docs/scripting.md).

A script is sent as ``EVALSHA sha numkeys keys... args...``; a server whose script cache
lacks it answers ``NOSCRIPT``, which proves the script did not run, so the call may be
sent again as ``EVAL body numkeys ...`` (which runs it and caches it on that server for
later ``EVALSHA`` calls). This module computes the digest, builds both commands, marks a
script call queued in a pipeline (:class:`ScriptCall`, the entry's reply callback) and
decides, for a queued batch, which calls are sent with their body:

* :func:`first_calls_as_eval`: a ``MULTI``/``EXEC`` transaction runs in order on one
  server, so the first call of each script is sent as ``EVAL`` and the later ones as
  ``EVALSHA``: no ``NOSCRIPT`` can occur inside the transaction (where it could not be
  cured: the transaction's other commands would have run);
* :func:`noscript_indexes`: in a pipeline without ``MULTI``, the calls answered
  ``NOSCRIPT``, to be sent again as ``EVAL`` in their queued order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any, Final, TypeAlias

from .errors import ResponseError
from .replies import Callback
from .resp import CommandArg

__all__ = [
    "ScriptCall",
    "Stack",
    "encode_script",
    "first_calls_as_eval",
    "is_noscript",
    "noscript_indexes",
    "script_arguments",
    "script_sha",
]

#: A pipeline's queued commands: ``(arguments, reply callback or None)`` each.
Stack: TypeAlias = list[tuple[tuple[CommandArg, ...], Callback | None]]

#: How the server words a missing script (Redis 6.0 to 7.x); a script's own error that
#: merely starts with ``NOSCRIPT`` is not taken as one.
_NOSCRIPT_MESSAGE: Final = "NOSCRIPT No matching script"


def encode_script(script: str | bytes) -> bytes:
    """The bytes of a script's source as they are sent (``str`` is UTF-8 encoded, as
    every ``str`` argument is).

    :raises TypeError: ``script`` is neither ``str`` nor ``bytes``.
    :raises UnicodeEncodeError: a ``str`` that UTF-8 cannot encode (lone surrogates).
    """
    if isinstance(script, str):
        return script.encode("utf-8")
    if isinstance(script, bytes | bytearray | memoryview):
        return bytes(script)
    raise TypeError(f"a script is str or bytes, not {type(script).__name__}")


def script_sha(script: str | bytes) -> str:
    """The SHA1 digest of ``script`` (``str``, 40 lower-case hex digits): the name
    ``EVALSHA`` takes, equal to what ``SCRIPT LOAD`` answers for the same source.

    :raises TypeError: as :func:`encode_script`.
    """
    return hashlib.sha1(encode_script(script), usedforsecurity=False).hexdigest()


def _items(value: Iterable[Any] | None, what: str) -> tuple[Any, ...]:
    if value is None:
        return ()
    if isinstance(value, str | bytes | bytearray | memoryview):
        # tuple("key") would silently send one key per character.
        raise TypeError(f"{what} must be a sequence (e.g. a list), not {type(value).__name__}")
    return tuple(value)


def script_arguments(
    keys: Sequence[CommandArg] | None, args: Iterable[CommandArg] | None
) -> tuple[CommandArg, ...]:
    """``(numkeys, *keys, *args)``: what follows the script's digest or body in
    ``EVALSHA``/``EVAL``, as redis-py's ``Script`` builds it.

    :raises TypeError: ``keys`` or ``args`` is a single ``str``/``bytes`` rather than a
        sequence of them (it would be split into characters).
    """
    key_items = _items(keys, "keys")
    return (len(key_items), *key_items, *_items(args, "args"))


def is_noscript(reply: object) -> bool:
    """``True`` when ``reply`` is the server's own ``NOSCRIPT No matching script`` error
    (``EVALSHA`` named a script the server does not have: nothing ran). An error a script
    raises itself (``redis.error_reply("NOSCRIPT ...")``) comes after the script ran, and
    is not one: only the server's wording is taken as proof."""
    return isinstance(reply, ResponseError) and str(reply).startswith(_NOSCRIPT_MESSAGE)


class ScriptCall:
    """A script call queued in a pipeline: the reply callback of its ``EVALSHA`` entry
    (it returns the reply unchanged), carrying the script's ``body`` (``bytes``) and
    ``sha`` (``str``) so that the pipeline can send the call as ``EVAL`` instead.

    :param body: the script's source, as :func:`encode_script` gives it.
    :param sha: its digest (:func:`script_sha`).
    """

    __slots__ = ("body", "sha")

    def __init__(self, body: bytes, sha: str) -> None:
        self.body = body
        self.sha = sha

    def __repr__(self) -> str:
        return f"<ScriptCall {self.sha}>"

    def __call__(self, reply: Any) -> Any:
        """The reply, unchanged (a script's reply is whatever the script returns)."""
        return reply

    def evalsha(self, arguments: tuple[CommandArg, ...]) -> tuple[CommandArg, ...]:
        """``("EVALSHA", sha, *arguments)``; ``arguments`` as :func:`script_arguments`."""
        return ("EVALSHA", self.sha, *arguments)

    def as_eval(self, command: tuple[CommandArg, ...]) -> tuple[CommandArg, ...]:
        """The same call as ``EVAL``: ``command`` (an ``EVALSHA`` of this script) with
        the digest replaced by the body."""
        return ("EVAL", self.body, *command[2:])


def first_calls_as_eval(stack: Stack) -> Stack:
    """``stack`` with the first queued call of each script sent as ``EVAL`` (for a
    ``MULTI``/``EXEC`` transaction: later calls find the script in the cache of the
    server the transaction runs on, so none can answer ``NOSCRIPT``). Other entries,
    and ``stack`` itself when it holds no script call, are returned unchanged (a new
    list otherwise)."""
    seen: set[str] | None = None
    result: Stack | None = None
    for index, (command, callback) in enumerate(stack):
        if not isinstance(callback, ScriptCall):
            continue
        if seen is None:
            seen = set()
            result = list(stack)
        if callback.sha not in seen:
            seen.add(callback.sha)
            assert result is not None
            result[index] = (callback.as_eval(command), callback)
    return stack if result is None else result


def noscript_indexes(stack: Stack, replies: Sequence[object]) -> list[int]:
    """Indexes, in queued order, of the script calls of ``stack`` whose reply in
    ``replies`` (one per entry, error replies as values) is ``NOSCRIPT``: they did not
    run and may be sent again as ``EVAL`` (:meth:`ScriptCall.as_eval`). An ``EVALSHA``
    queued by hand (no :class:`ScriptCall`) has no body to fall back on and keeps its
    error."""
    return [
        index
        for index, ((_command, callback), reply) in enumerate(zip(stack, replies, strict=True))
        if isinstance(callback, ScriptCall) and is_noscript(reply)
    ]
