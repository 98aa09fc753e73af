"""Where a command's keys are, from the server's own key specs (sans-IO: no Trio imports).

The specs come from :mod:`trio_maint._sansio.command_table` (generated from ``COMMAND``
by ``tools/gen_command_table.py``); they are evaluated as the server evaluates them for
``COMMAND GETKEYS``:

* the search begins at a fixed argument (*index*) or after a *keyword*, looked for from
  argument ``startfrom`` forwards, or from ``len(args) + startfrom`` backwards when
  ``startfrom`` is negative (a spec whose keyword is absent contributes no key);
* the keys then run over a *range* (``lastkey`` relative to the begin; a negative one
  counts from the end, or, with a ``limit``, covers ``1/limit`` of the arguments left) or
  are counted by a *keynum* argument;
* an argument list the specs do not fit (wrong arity, a key position past the end, a key
  count that is not a number) has no keys, as the server says; it refuses the command
  wherever it goes.

Subcommands are looked up as ``"CONTAINER|SUB"`` from the first two arguments. Shard
channels (``SPUBLISH``, ``SSUBSCRIBE``, ``SUNSUBSCRIBE``: specs flagged ``not_key``) count
as keys here, since they decide the slot. Where the specs cannot tell, :func:`command_keys`
answers ``None``: a spec of unknown kind, or one flagged ``incomplete`` that matched
(``MIGRATE ... KEYS``). ``SORT`` is the one command resolved by hand: its specs mark the
``STORE`` destination as unknown, and its grammar (``BY``/``GET`` take one argument,
``LIMIT`` two) finds it exactly.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, Final

import attrs

from .command_table import COMMANDS, TIPS

__all__ = [
    "CONTAINERS",
    "KEYLESS",
    "READONLY_COMMANDS",
    "CommandSpec",
    "KeySpec",
    "command_keys",
    "command_name",
    "command_spec",
    "is_readonly",
    "parse_key_spec",
]


@attrs.frozen
class KeySpec:
    """One key spec of a command, as ``COMMAND`` reports it.

    :ivar begin: ``"index"``, ``"keyword"`` or ``"unknown"`` (``str``).
    :ivar index: the argument the search begins at (index), or ``startfrom`` (keyword:
        negative searches backwards from the end) (``int``).
    :ivar keyword: the keyword the keys follow (``str``; empty unless ``begin`` is
        ``"keyword"``).
    :ivar find: ``"range"``, ``"keynum"`` or ``"unknown"`` (``str``).
    :ivar lastkey: range: the last key, relative to the begin; negative counts from the
        end of the arguments (``int``).
    :ivar keystep: how many arguments from one key to the next (``int``).
    :ivar limit: range with a negative ``lastkey``: the keys cover ``1/limit`` of the
        arguments from the begin on (``0``: all of them) (``int``).
    :ivar keynumidx: keynum: where the key count is, relative to the begin (``int``).
    :ivar firstkey: keynum: where the first key is, relative to the begin (``int``).
    :ivar flags: the spec's flags (``frozenset[str]``: ``RO``, ``RW``, ``OW``, ``RM``,
        ``access``, ``update``, ``insert``, ``delete``, ``not_key``, ``incomplete``,
        ``variable_flags``).
    """

    begin: str
    index: int
    keyword: str
    find: str
    lastkey: int = 0
    keystep: int = 1
    limit: int = 0
    keynumidx: int = 0
    firstkey: int = 0
    flags: frozenset[str] = frozenset()

    @property
    def known(self) -> bool:
        """``True`` when both halves of the spec are of a known kind."""
        return self.begin != "unknown" and self.find != "unknown"


@attrs.frozen
class CommandSpec:
    """A command (or subcommand) of the table.

    :ivar name: upper case, ``"CONTAINER|SUB"`` for a subcommand (``str``).
    :ivar arity: the argument count including the name; negative: at least ``-arity``
        (``int``).
    :ivar flags: the command flags (``frozenset[str]``: ``readonly``, ``write``,
        ``blocking``, ``movablekeys``, ``fast``, ``admin``, ...).
    :ivar key_specs: its key specs, in the server's order (``tuple[KeySpec, ...]``).
    :ivar tips: the request/response policy tips (``tuple[str, ...]``, e.g.
        ``"request_policy:all_shards"``).
    """

    name: str
    arity: int
    flags: frozenset[str]
    key_specs: tuple[KeySpec, ...]
    tips: tuple[str, ...] = ()

    @property
    def readonly(self) -> bool:
        """``True`` for a read-only command (one a replica may serve)."""
        return "readonly" in self.flags

    def arity_ok(self, argc: int) -> bool:
        """``True`` when ``argc`` arguments (the name included) fit the arity."""
        return argc == self.arity if self.arity >= 0 else argc >= -self.arity


def parse_key_spec(text: str) -> KeySpec:
    """A :class:`KeySpec` from the table's string form (``"STREAMS@1 r-1/1/2 RO access"``).

    :raises ValueError: the string is not in that form.
    """
    where, how, *flags = text.split(" ")
    fields: dict[str, Any] = {"flags": frozenset(flags)}
    if where == "?":
        fields.update(begin="unknown", index=0, keyword="")
    else:
        keyword, at, index = where.rpartition("@")
        if not at:
            raise ValueError(f"bad begin_search in {text!r}")
        begin = "keyword" if keyword else "index"
        fields.update(begin=begin, index=int(index), keyword=keyword)
    if how == "?":
        fields["find"] = "unknown"
    else:
        first, second, third = (int(part) for part in how[1:].split("/"))
        if how[0] == "r":
            fields.update(find="range", lastkey=first, keystep=second, limit=third)
        elif how[0] == "n":
            fields.update(find="keynum", keynumidx=first, firstkey=second, keystep=third)
        else:
            raise ValueError(f"bad find_keys in {text!r}")
    return KeySpec(**fields)


def _build() -> dict[str, CommandSpec]:
    specs = {}
    for name, (arity, flags, key_specs) in COMMANDS.items():
        specs[name] = CommandSpec(
            name,
            arity,
            frozenset(flags.split()),
            tuple(parse_key_spec(s) for s in key_specs),
            tuple(TIPS.get(name, "").split()),
        )
    return specs


_SPECS: Final = _build()

#: Commands with subcommands (upper case): their spec is looked up as ``"NAME|SUB"``.
CONTAINERS: Final = frozenset(name.partition("|")[0] for name in _SPECS if "|" in name)

#: Commands and subcommands without keys (neither they nor a subcommand have a key spec):
#: any node can serve them.
KEYLESS: Final = frozenset(_SPECS) - frozenset(
    prefix
    for name, spec in _SPECS.items()
    if spec.key_specs
    for prefix in {name, name.partition("|")[0]}
)

#: Read-only commands and subcommands (the ``readonly`` flag): a replica may serve them.
READONLY_COMMANDS: Final = frozenset(name for name, spec in _SPECS.items() if spec.readonly)


# Tuples, not unions: ``str | bytes`` would be built anew at each call.
_BYTES_LIKE: Final = (bytes, bytearray, memoryview)
_TEXT: Final = (str, bytes)
_TEXT_LIKE: Final = (str, bytes, bytearray, memoryview)


def command_name(arg: Any) -> str:
    """A command name (``str``, ``bytes``, ...) in upper case; only ASCII letters change
    case, as the server compares names and keywords byte by byte (a non-ASCII ``str`` is
    returned as it is)."""
    if type(arg) is str:
        return arg.upper() if arg.isascii() else arg
    if isinstance(arg, _BYTES_LIKE):
        return bytes(arg).decode("ascii", "replace").upper()
    return str(arg).upper()


def command_spec(args: Sequence[Any]) -> CommandSpec | None:
    """The spec of the command ``args`` runs (``args[0]`` its name; a container's
    subcommand from ``args[1]``), or ``None`` when the table does not know it."""
    if not args:
        return None
    name = command_name(args[0])
    if name in CONTAINERS and len(args) > 1:
        return _SPECS.get(f"{name}|{command_name(args[1])}")
    return _SPECS.get(name)


def is_readonly(args: Sequence[Any]) -> bool:
    """``True`` when the command ``args`` runs is read-only (subcommands resolved), so a
    replica may serve it."""
    try:
        known = _READONLY_BY_SPELLING.get(args[0])
    except (TypeError, IndexError):
        known = None
    if known is not None:
        return known
    spec = command_spec(args)
    return spec is not None and spec.readonly


#: Whether each command (not a container) is read-only, by the spellings callers use:
#: ``"GET"``, ``"get"``, ``b"GET"``, ``b"get"``.
_READONLY_BY_SPELLING: Final = {
    spelling: spec.readonly
    for name, spec in _SPECS.items()
    if "|" not in name and name not in CONTAINERS
    for spelling in (name, name.lower(), name.encode(), name.lower().encode())
}


# --------------------------------------------------------------------- key positions


# A key spec compiled for evaluation: (begin, index, keyword, find, a, b, c, incomplete),
# begin 0/1/2 = index/keyword/unknown, find 0/1/2 = range/keynum/unknown, a/b/c as in the
# table (range: lastkey, keystep, limit; keynum: keynumidx, firstkey, keystep).
_Step = tuple[int, int, str, int, int, int, int, bool]
# A command compiled: (arity, special, steps); special 1 = SORT, 2 = SORT_RO, else 0.
_Program = tuple[int, int, tuple[_Step, ...]]
# The fast path: (arity, first, lastkey, keystep) of a command with one index/range spec.
_Simple = tuple[int, int, int, int]
# Several keys at fixed positions: (arity, an itemgetter of them).
_Fixed = tuple[int, "operator.itemgetter[Any]"]
# One keynum spec at a fixed index (EVAL, FCALL, ...): (arity, count's position, first
# key's distance from it, keystep).
_Counted = tuple[int, int, int, int]

_BEGINS: Final = {"index": 0, "keyword": 1, "unknown": 2}
_FINDS: Final = {"range": 0, "keynum": 1, "unknown": 2}


def _compile(spec: CommandSpec) -> _Program:
    steps = []
    for k in spec.key_specs:
        a, b, c = (
            (k.keynumidx, k.firstkey, k.keystep)
            if k.find == "keynum"
            else (k.lastkey, k.keystep, k.limit)
        )
        begin, find = _BEGINS[k.begin], _FINDS[k.find]
        steps.append((begin, k.index, k.keyword, find, a, b, c, "incomplete" in k.flags))
    special = {"SORT": 1, "SORT_RO": 2}.get(spec.name, 0)
    return (spec.arity, special, tuple(steps))


def _keyword_start(keyword: str, startfrom: int, args: Sequence[Any], argc: int) -> int:
    """The argument after ``keyword`` searched for from ``startfrom`` (backwards when it is
    negative), or 0 when it is absent."""
    forwards = startfrom > 0
    positions = range(startfrom, argc - 1) if forwards else range(argc + startfrom, 0, -1)
    size = len(keyword)
    for i in positions:
        if i < 1 or i >= argc:
            break
        arg = args[i]
        if isinstance(arg, _TEXT) and len(arg) != size:
            continue  # cannot be the keyword: spare the upper-casing
        if command_name(arg) == keyword:
            return i + 1
    return 0


def _key_count(arg: Any) -> int:
    """A keynum argument's value, read as strictly as the server reads it (a decimal
    integer without sign, spaces or leading zeros); -1 when it is not such a number."""
    if isinstance(arg, int) and not isinstance(arg, bool):
        return arg if arg >= 0 else -1
    if not isinstance(arg, _TEXT_LIKE):
        return -1
    text = command_name(arg)
    if not text.isascii() or not text.isdigit() or (text[0] == "0" and len(text) > 1):
        return -1
    return int(text)


def _sort_keys(args: Sequence[Any]) -> list[Any]:
    """``SORT key [BY p] [LIMIT o c] [GET p ...] [ASC|DESC] [ALPHA] [STORE dest]``: the key
    and the last ``STORE`` destination (``BY``/``GET`` patterns name no key of the slot)."""
    keys = [args[1]]
    store = None
    i, argc = 2, len(args)
    while i < argc:
        token = command_name(args[i])
        if token == "LIMIT":
            i += 2
        elif token in ("BY", "GET"):
            i += 1
        elif token == "STORE" and i + 1 < argc:
            store = args[i + 1]
        i += 1
    if store is not None:
        keys.append(store)
    return keys


def _run(program: _Program, args: Sequence[Any]) -> list[Any] | None:
    """Evaluate a compiled command's key specs over ``args`` (see the module doc)."""
    arity, special, steps = program
    argc = len(args)
    if (argc != arity) if arity >= 0 else (argc < -arity):
        return []
    if special:
        return _sort_keys(args) if special == 1 else [args[1]]
    keys: list[Any] = []
    for begin, index, keyword, find, a, b, c, incomplete in steps:
        if begin == 0:
            first = index
        elif begin == 1:
            first = _keyword_start(keyword, index, args, argc)
            if not first:
                continue  # the keyword is absent: no key from this spec
        else:
            return None
        if find == 0:
            if a >= 0:
                last = first + a
            elif not c:
                last = argc + a
            else:
                last = first + (argc - first) // c + a
            step = b
        elif find == 1:
            where = first + a
            if where >= argc:
                return []
            count = _key_count(args[where])
            if count <= 0:
                return []  # no keys at all, as the server says (EVAL's ``0`` included)
            first += b
            last = first + count - 1
            step = c
        else:
            return None
        if last >= argc or last < first or first >= argc:
            return []
        if incomplete:
            return None  # it matched, and may have missed keys or taken other arguments
        keys += args[first : last + 1 : step]
    return keys


def _simple_form(spec: CommandSpec) -> _Simple | None:
    """The fast path's form of a command with one index/range spec whose keys are always
    in reach when the arity fits, else ``None``."""
    if len(spec.key_specs) != 1 or spec.name in ("SORT", "SORT_RO"):
        return None
    key_spec = spec.key_specs[0]
    if key_spec.begin != "index" or key_spec.find != "range" or key_spec.limit:
        return None
    if "incomplete" in key_spec.flags:
        return None
    least, first, lastkey = abs(spec.arity), key_spec.index, key_spec.lastkey
    if first + max(lastkey, 0) >= least or (lastkey < 0 and first > least + lastkey):
        return None
    return (spec.arity, first, lastkey, key_spec.keystep)


def _fixed_form(spec: CommandSpec) -> _Fixed | None:
    """``(arity, getter)`` for a command with several index/range specs whose keys are at
    fixed positions, always in reach when the arity fits (``RENAME``, ``LMOVE``, ...)."""
    if len(spec.key_specs) < 2:
        return None
    positions: list[int] = []
    for k in spec.key_specs:
        if k.begin != "index" or k.find != "range" or k.lastkey < 0 or k.flags & _UNSURE:
            return None
        positions += range(k.index, k.index + k.lastkey + 1, k.keystep)
    if max(positions) >= abs(spec.arity):
        return None
    return (spec.arity, operator.itemgetter(*positions))


def _counted_form(spec: CommandSpec) -> _Counted | None:
    """The fast form of a command whose one key spec is a keynum at a fixed index."""
    if len(spec.key_specs) != 1:
        return None
    k = spec.key_specs[0]
    if k.begin != "index" or k.find != "keynum" or k.flags & _UNSURE or k.firstkey < 1:
        return None
    return (spec.arity, k.index + k.keynumidx, k.firstkey - k.keynumidx, k.keystep)


_UNSURE: Final = frozenset({"incomplete"})
_PROGRAMS: Final = {name: _compile(spec) for name, spec in _SPECS.items()}


def _spellings() -> tuple[
    dict[Any, _Simple], dict[Any, _Fixed], dict[Any, _Counted], dict[Any, _Program]
]:
    """Every command name as callers spell it (``"GET"``, ``"get"``, ``b"GET"``,
    ``b"get"``) → its simple, fixed or counted form, or its compiled specs (containers
    left out)."""
    simple: dict[Any, _Simple] = {}
    fixed: dict[Any, _Fixed] = {}
    counted: dict[Any, _Counted] = {}
    other: dict[Any, _Program] = {}
    for name, spec in _SPECS.items():
        if "|" in name or name in CONTAINERS:
            continue
        form = _simple_form(spec)
        several = _fixed_form(spec)
        keynum = _counted_form(spec)
        for spelling in (name, name.lower(), name.encode(), name.lower().encode()):
            if form is not None:
                simple[spelling] = form
            elif several is not None:
                fixed[spelling] = several
            elif keynum is not None:
                counted[spelling] = keynum
            else:
                other[spelling] = _PROGRAMS[name]
    return simple, fixed, counted, other


_FAST, _FIXED, _COUNTED, _OTHER = _spellings()


def command_keys(args: Sequence[Any]) -> list[Any] | None:
    """The keys of the command ``args`` (``args[0]`` is its name), in the order of its key
    specs: ``[]`` for keyless commands and for arguments the specs do not fit, ``None``
    when the table does not know the command or its specs cannot tell (the caller may
    ask the server with ``COMMAND GETKEYS``)."""
    try:
        form = _FAST.get(args[0])
    except TypeError:
        form = None  # not hashable: the slow path decides
    except IndexError:
        return []
    if form is not None:
        arity, first, lastkey, step = form
        argc = len(args)
        if (argc != arity) if arity >= 0 else (argc < -arity):
            return []
        if lastkey == 0:
            return [args[first]]
        last = first + lastkey if lastkey > 0 else argc + lastkey
        return list(args[first : last + 1 : step])
    try:
        several = _FIXED.get(args[0])
        counted = None if several else _COUNTED.get(args[0])
        program = None if several or counted else _OTHER.get(args[0])
    except TypeError:
        several = counted = program = None
    if several is not None:
        arity, getter = several
        argc = len(args)
        if (argc != arity) if arity >= 0 else (argc < -arity):
            return []
        return list(getter(args))
    if counted is not None:
        arity, where, offset, step = counted
        argc = len(args)
        if ((argc != arity) if arity >= 0 else (argc < -arity)) or where >= argc:
            return []
        count = _key_count(args[where])
        first = where + offset
        last = first + count - 1
        if count <= 0 or last >= argc:
            return []
        return list(args[first : last + 1 : step])
    if program is None:
        spec = command_spec(args)
        if spec is None:
            return None
        program = _PROGRAMS[spec.name]
    return _run(program, args)
