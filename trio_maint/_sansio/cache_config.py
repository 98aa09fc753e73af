"""Client-side caching: :class:`CacheConfig` and which commands are cached (sans-IO: no
Trio imports). The cache itself is :mod:`trio_maint._sansio.cache`, its maintenance
decisions :mod:`trio_maint._sansio.cache_machine`; docs/caching.md states the guarantee.

Which commands are cached (:data:`CACHEABLE_COMMANDS`) is derived from the server's own
command table (:mod:`~trio_maint._sansio.command_table`, generated from ``COMMAND``): a
command qualifies when it is flagged ``readonly``, is not ``blocking``, is not a
subcommand, is not a script call, reads at least one key and every key spec is a
read-only (``RO``) spec of a known kind, so the server tracks exactly the keys
:func:`~trio_maint._sansio.keyspecs.command_keys` finds. Left out by hand
(:data:`NOT_CACHED`), because their reply changes without any write to the key:
``TTL``/``PTTL`` (time passes), ``HRANDFIELD``/``SRANDMEMBER``/``ZRANDMEMBER`` (random),
``HSCAN``/``SSCAN``/``ZSCAN`` (cursors), ``XPENDING`` (idle times grow), ``TOUCH`` (an
access-time update) and ``DUMP`` (a serialization, not a value).
"""

from __future__ import annotations

from typing import Any, Final, Literal

import attrs

from .command_table import COMMANDS
from .keyspecs import command_keys, parse_key_spec

__all__ = [
    "CACHEABLE_COMMANDS",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_SIZE",
    "NOT_CACHED",
    "CacheConfig",
    "arg_bytes",
    "cacheable_commands",
]

#: Default most entries (``int``), as redis-py's ``CacheConfig.DEFAULT_MAX_SIZE``.
DEFAULT_MAX_SIZE: Final = 10_000
#: Default most bytes the entries may hold (``int``, 64 MiB), counted as in
#: :attr:`CacheConfig.max_bytes`.
DEFAULT_MAX_BYTES: Final = 64 * 1024 * 1024

#: Read-only commands kept out of the cache although the table's flags let them in: their
#: reply changes without a write to the key (time, randomness, cursors), or they are not
#: value reads (see the module doc).
NOT_CACHED: Final = frozenset(
    {
        "TTL",
        "PTTL",
        "HRANDFIELD",
        "SRANDMEMBER",
        "ZRANDMEMBER",
        "HSCAN",
        "SSCAN",
        "ZSCAN",
        "XPENDING",
        "TOUCH",
        "DUMP",
    }
)


def cacheable_commands() -> frozenset[str]:
    """The commands :data:`CACHEABLE_COMMANDS` holds, computed from the command table by
    the rule of the module doc (upper-case names)."""
    found = set()
    for name, (_arity, flags, specs) in COMMANDS.items():
        words = flags.split()
        if "|" in name or "readonly" not in words or "blocking" in words:
            continue
        if "no_mandatory_keys" in words or not specs or name in NOT_CACHED:
            continue  # script calls (EVAL_RO, FCALL_RO, ...) and keyless commands
        parsed = [parse_key_spec(s) for s in specs]
        if all(s.known and "RO" in s.flags and "incomplete" not in s.flags for s in parsed):
            found.add(name)
    return frozenset(found)


#: The commands whose replies are cached (upper-case names), generated from the command
#: table's flags and key specs (module doc); docs/caching.md lists them and a test keeps the
#: list there equal to this set.
CACHEABLE_COMMANDS: Final = cacheable_commands()

#: The spellings callers use (``"GET"``, ``"get"``, ``b"GET"``, ``b"get"``) -> the name.
_SPELLINGS: Final = {
    spelling: name
    for name in CACHEABLE_COMMANDS
    for spelling in (name, name.lower(), name.encode(), name.lower().encode())
}

#: A cache key: the command's upper-case name, then its arguments as ``bytes``.
CacheKey = tuple[Any, ...]


def arg_bytes(arg: Any) -> bytes | None:
    """An argument as the cache compares it (``bytes``: ``str`` UTF-8 encoded, ``int`` in
    decimal, ``float`` by ``repr``), or ``None`` for a type the encoder refuses (and a
    ``str`` that does not encode)."""
    cls = arg.__class__
    if cls is bytes:
        return arg  # type: ignore[no-any-return]
    if cls is str:
        try:
            return arg.encode()  # type: ignore[no-any-return]
        except UnicodeError:
            return None
    if cls is int:
        return b"%d" % arg
    if cls is float:
        return repr(arg).encode()
    if isinstance(arg, bytearray | memoryview):
        return bytes(arg)
    return None  # bool, None, ...: the command itself refuses it


def cache_request(
    args: tuple[Any, ...], allowed: frozenset[str] | None = None
) -> tuple[CacheKey, tuple[bytes, ...]] | None:
    """``(cache_key, redis_keys)`` for a command whose reply may be cached, else ``None``.

    :param args: the command (``args[0]`` its name) as the client's methods build it.
    :param allowed: the cacheable names (default :data:`CACHEABLE_COMMANDS`).

    The cache key is the upper-case name followed by every argument as ``bytes`` (``str``
    UTF-8 encoded, ``int`` in decimal, ``float`` by ``repr``), so ``get("k")`` and
    ``get(b"k")`` share an entry; ``redis_keys`` are the keys the server tracks for it
    (:func:`~trio_maint._sansio.keyspecs.command_keys`), as ``bytes``. ``None`` for other
    commands, for arguments the command's specs do not fit (the server refuses them),
    and for arguments of a type the encoder refuses.
    """
    try:
        name = _SPELLINGS.get(args[0])
    except (TypeError, IndexError):
        return None
    if name is None or (allowed is not None and name not in allowed):
        return None
    parts: list[Any] = [name]
    for arg in args[1:]:
        encoded = arg_bytes(arg)
        if encoded is None:
            return None
        parts.append(encoded)
    keys = command_keys(parts)
    if not keys:
        return None
    return tuple(parts), tuple(keys)


def _check_positive_int(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None and attribute.name == "max_bytes":
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{attribute.name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{attribute.name} must be >= 1, got {value!r}")


def _check_seconds(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{attribute.name} must be a number of seconds or None")
    if not (0 < value <= 10**7):  # also NaN and infinities
        raise ValueError(f"{attribute.name} must be in (0, 1e7] seconds or None, got {value!r}")


def _to_prefixes(value: Any) -> tuple[bytes, ...]:
    if isinstance(value, str | bytes):
        value = (value,)
    out = []
    for prefix in value:
        if isinstance(prefix, str):
            prefix = prefix.encode()
        if not isinstance(prefix, bytes):
            raise TypeError(f"prefixes must be str or bytes, got {type(prefix).__name__}")
        out.append(prefix)
    return tuple(out)


def _to_allow_list(value: Any) -> frozenset[str] | None:
    if value is None:
        return None
    names = frozenset(
        (n.decode() if isinstance(n, bytes) else str(n)).upper()
        for n in ([value] if isinstance(value, str | bytes) else value)
    )
    unknown = names - CACHEABLE_COMMANDS
    if unknown:
        raise ValueError(
            f"not cacheable: {', '.join(sorted(unknown))} (allow_list may only narrow "
            "CACHEABLE_COMMANDS, see docs/caching.md)"
        )
    return names


@attrs.frozen(kw_only=True)
class CacheConfig:
    """Client-side caching settings: ``open_redis(url, cache=CacheConfig(...))`` (the
    keyword ``cache_config=`` is accepted too, as redis-py's). docs/caching.md has the
    design and the coherence guarantee.

    :ivar max_size: most entries (``int`` >= 1, default 10,000, redis-py's name); the
        least recently used entry is evicted beyond it.
    :ivar max_bytes: most bytes the entries may hold (``int`` >= 1, default 64 MiB; ``None``:
        no byte bound), each entry counted as the Python size (``sys.getsizeof``) of its
        key, arguments and reply, everything the reply holds included, plus 240 bytes of
        bookkeeping; least recently used entries are evicted beyond it, and a reply larger
        than this is never stored.
    :ivar ttl: seconds (``float``) an entry may be served after it was stored, or ``None``
        (the default: until invalidated or evicted). Bounds how long a value can be served
        when the server sends no invalidation (a key whose expiry the server has not yet
        acted on, see docs/caching.md).
    :ivar mode: ``"default"`` (the server remembers the keys this client read, with
        ``OPTIN``: only the cached reads are tracked) or ``"bcast"`` (the server sends an
        invalidation for every key modified under ``prefixes``; nothing is remembered per
        read).
    :ivar prefixes: ``bcast`` only: key prefixes (``str`` or ``bytes``; empty: every key).
    :ivar allow_list: the commands to cache (names, a subset of
        :data:`CACHEABLE_COMMANDS`), or ``None`` for all of them.
    :ivar health_check_interval: seconds (``float``) between checks of each tracking
        connection (a round trip proving it is alive and still the same connection on the
        same server); a tracking connection whose socket silently died is found within
        this plus ``socket_timeout``.
    :raises ValueError, TypeError: a field is out of range or of the wrong type.
    """

    max_size: int = attrs.field(default=DEFAULT_MAX_SIZE, validator=_check_positive_int)
    max_bytes: int | None = attrs.field(default=DEFAULT_MAX_BYTES, validator=_check_positive_int)
    ttl: float | None = attrs.field(default=None, validator=_check_seconds)
    mode: Literal["default", "bcast"] = attrs.field(default="default")
    prefixes: tuple[bytes, ...] = attrs.field(default=(), converter=_to_prefixes)
    allow_list: frozenset[str] | None = attrs.field(default=None, converter=_to_allow_list)
    health_check_interval: float = attrs.field(default=5.0, validator=_check_seconds)

    def __attrs_post_init__(self) -> None:
        if self.mode not in ("default", "bcast"):
            raise ValueError(f"mode must be 'default' or 'bcast', got {self.mode!r}")
        if self.mode == "default" and self.prefixes:
            raise ValueError("prefixes are for mode='bcast' only")

    @property
    def bcast(self) -> bool:
        """``True`` in ``bcast`` mode."""
        return self.mode == "bcast"

    def covers(self, keys: tuple[bytes, ...]) -> bool:
        """Whether the server sends invalidations for all of ``keys`` (``bool``): always in
        ``default`` mode; in ``bcast`` mode, when each starts with one of ``prefixes`` (or
        there are none). A read of other keys is never cached: nothing would invalidate
        it."""
        prefixes = self.prefixes
        if not prefixes or not self.bcast:
            return True
        return all(key.startswith(prefixes) for key in keys)

    def tracking_command(self) -> tuple[Any, ...]:
        """The ``CLIENT TRACKING ON ...`` command sent on the tracking connection:
        ``OPTIN`` in ``default`` mode (each cached read is preceded by ``CLIENT CACHING
        YES``), ``BCAST`` and a ``PREFIX`` per prefix in ``bcast`` mode."""
        if self.bcast:
            args: list[Any] = ["CLIENT", "TRACKING", "ON", "BCAST"]
            for prefix in self.prefixes:
                args += ["PREFIX", prefix]
            return tuple(args)
        return ("CLIENT", "TRACKING", "ON", "OPTIN")
