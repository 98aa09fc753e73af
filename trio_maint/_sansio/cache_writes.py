"""Which entries of a client's own cache a command of that client may make stale (sans-IO:
no Trio imports): read-your-own-writes for client-side caching (docs/caching.md).

The server's invalidation of a key this client wrote comes on the tracking connection,
which may be slower than the pooled connection that acknowledged the write; so the
client also invalidates, itself, what its own writes change: once before the write is
sent (reads of those keys in flight are not stored) and once when its reply has come (a
read that started meanwhile and stored the older value is dropped). :func:`own_write`
says what a command changes, from the command table
(:mod:`~trio_maint._sansio.command_table`) and its key specs
(:func:`~trio_maint._sansio.keyspecs.command_keys`):

* flagged ``readonly`` with only read-only key specs, or neither ``write`` nor a script
  call (``PING``, ``WATCH``, ``PUBLISH``, ``CLIENT ...``, ``CONFIG ...``, ...): nothing;
* flagged ``write``, or a key spec that changes its key (``PFCOUNT`` updates its cached
  cardinality): its keys (every key the specs find, the ones it only reads too);
* a script call that may write (``EVAL``, ``EVALSHA``, ``FCALL``): its declared keys;
* *everything* (:attr:`OwnWrite.keys` ``None``) when its keys cannot be found: a write
  without keys (``FLUSHDB``, ``FLUSHALL``, ``SWAPDB``, ``FUNCTION LOAD``/``DELETE``/
  ``FLUSH``/``RESTORE``), a script call declaring no key, a command whose specs cannot
  tell (``MIGRATE ... KEYS``), and a command the table does not know (a module's, a newer
  server's): whatever it does is unknown. The cache holds one database's entries, so
  "everything" is the part of the database the cache can hold.

A write whose arguments the key specs do not fit (wrong arity) changes nothing: the
server refuses it. Keys are compared as the cache stores them
(:func:`~trio_maint._sansio.cache_config.cache_request`: ``str`` UTF-8 encoded, ``int``
in decimal).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

import attrs

from .cache_config import arg_bytes
from .command_table import COMMANDS
from .keyspecs import CONTAINERS, CommandSpec, command_keys, command_spec

__all__ = ["EVERYTHING", "OwnWrite", "own_write", "own_writes", "write_kind"]

# What a command does to the cache: nothing, its keys, its declared keys (a script call:
# none declared is everything), or everything.
_NONE, _KEYS, _SCRIPT, _ALL = 0, 1, 2, 3
_CHANGES: Final = frozenset({"RW", "OW", "RM", "insert", "delete", "update"})


@attrs.frozen(slots=True)
class OwnWrite:
    """What one of this client's commands (or a pipeline's) may change in its cache.

    :ivar keys: the keys (``tuple[bytes, ...]``, as the cache stores them), or ``None``:
        anything (the whole cache is flushed).
    """

    keys: tuple[bytes, ...] | None


#: An :class:`OwnWrite` of everything.
EVERYTHING: Final = OwnWrite(None)


def write_kind(spec: CommandSpec | None) -> int:
    """How a command of the table (``None``: not in it) touches the cache (see the module
    doc): 0 nothing, 1 its keys, 2 its declared keys (a script call), 3 everything."""
    if spec is None:
        return _ALL
    if "write" in spec.flags:
        return _KEYS if spec.key_specs else _ALL
    if not spec.readonly and "no_mandatory_keys" in spec.flags:
        return _SCRIPT  # EVAL, EVALSHA, FCALL (their _RO forms are flagged readonly)
    for key_spec in spec.key_specs:
        if key_spec.flags & _CHANGES and "not_key" not in key_spec.flags:
            return _KEYS  # PFCOUNT
    return _NONE


#: Each command's kind by the spellings callers use (``"SET"``, ``"set"``, ``b"SET"``,
#: ``b"set"``); containers (``FUNCTION``, ``XGROUP``, ...) are resolved per subcommand.
_KINDS: Final = {
    spelling: write_kind(command_spec((name,)))
    for name in COMMANDS
    if "|" not in name and name not in CONTAINERS
    for spelling in (name, name.lower(), name.encode(), name.lower().encode())
}


def own_write(args: Sequence[Any]) -> OwnWrite | None:
    """What the command ``args`` (``args[0]`` its name) may change in this client's cache:
    ``None`` for nothing, else an :class:`OwnWrite` (see the module doc). Never raises."""
    try:
        kind = _KINDS.get(args[0])
    except (TypeError, IndexError):
        kind = None
    if kind is None:
        kind = write_kind(command_spec(args))
    if kind == _NONE:
        return None
    if kind == _ALL:
        return EVERYTHING
    keys = command_keys(args)
    if keys is None:
        return EVERYTHING
    if not keys:
        # A script call declaring no key may write any; a write the specs do not fit is
        # refused by the server.
        return EVERYTHING if kind == _SCRIPT else None
    out = []
    for key in keys:
        encoded = arg_bytes(key)
        if encoded is not None:  # else the encoder refuses the command: nothing is sent
            out.append(encoded)
    return OwnWrite(tuple(out))


def own_writes(commands: Iterable[Sequence[Any]]) -> OwnWrite | None:
    """:func:`own_write` of several commands (a pipeline, a transaction) together."""
    keys: list[bytes] = []
    found = False
    for args in commands:
        write = own_write(args)
        if write is None:
            continue
        if write.keys is None:
            return EVERYTHING
        found = True
        keys += write.keys
    return OwnWrite(tuple(keys)) if found else None
