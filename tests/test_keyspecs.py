"""The command table and key specs (sans-IO): the table's encoding, how specs are evaluated
(index and keyword begins, forwards and backwards; ranges with negative lastkey and
limit; keynum), subcommands, the fast paths against the general one, what the cluster
client derives (read-only commands, keyless commands), and the generator's output being
up to date with the session's live server."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import trio_maint
from trio_maint._cluster.redirects import READ_COMMANDS, is_readonly
from trio_maint._sansio import command_table, keyspecs
from trio_maint._sansio.keyspecs import (
    CONTAINERS,
    KEYLESS,
    CommandSpec,
    KeySpec,
    command_keys,
    command_spec,
    parse_key_spec,
)
from trio_maint._sansio.slots import command_slot, key_slot

ROOT = Path(__file__).resolve().parent.parent


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_command_table", ROOT / "tools" / "gen_command_table.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------ the table


def test_parse_key_spec_forms() -> None:
    assert parse_key_spec("@1 r0/1/0 RO access") == KeySpec(
        "index", 1, "", "range", 0, 1, 0, flags=frozenset({"RO", "access"})
    )
    assert parse_key_spec("STREAMS@1 r-1/1/2 RO access") == KeySpec(
        "keyword", 1, "STREAMS", "range", -1, 1, 2, flags=frozenset({"RO", "access"})
    )
    keynum = parse_key_spec("@2 n0/1/1 RW")
    assert (keynum.find, keynum.keynumidx, keynum.firstkey, keynum.keystep) == ("keynum", 0, 1, 1)
    unknown = parse_key_spec("? ? OW update")
    assert not unknown.known and unknown.begin == unknown.find == "unknown"
    for bad in ("1 r0/1/0", "@1 x0/1/0"):
        with pytest.raises(ValueError):
            parse_key_spec(bad)


def test_every_table_entry_parses() -> None:
    for name, (arity, flags, specs) in command_table.COMMANDS.items():
        assert name == name.upper()
        assert arity != 0, name
        assert flags == " ".join(sorted(flags.split())), name
        for text in specs:
            parse_key_spec(text)
    assert set(command_table.TIPS) <= set(command_table.COMMANDS)


def test_command_spec_lookup() -> None:
    get = command_spec(("get", "k"))
    assert isinstance(get, CommandSpec)
    assert (get.name, get.arity, get.readonly) == ("GET", 2, True)
    assert get.arity_ok(2) and not get.arity_ok(3)
    encoding = command_spec((b"object", b"encoding", b"k"))
    assert encoding is not None and encoding.name == "OBJECT|ENCODING"
    assert command_spec(("OBJECT",)) is not None  # the container itself
    assert command_spec(("OBJECT", "NOSUCH")) is None
    assert command_spec(("NOSUCH",)) is None
    assert command_spec(()) is None
    assert "request_policy:all_shards" in command_spec(("DBSIZE",)).tips  # type: ignore[union-attr]
    assert {"CLIENT", "OBJECT", "XINFO", "MEMORY", "CONFIG"} <= CONTAINERS


# ------------------------------------------------------------------- key positions


@pytest.mark.parametrize(
    ("args", "keys"),
    [
        (("GET", "k"), ["k"]),
        ((b"get", b"k"), [b"k"]),
        (("gEt", "k"), ["k"]),
        ((bytearray(b"GET"), "k"), ["k"]),
        (("SET", "k", "v", "EX", 10), ["k"]),
        (("MSET", "a", 1, "b", 2), ["a", "b"]),
        (("MGET", "a", "b", "c"), ["a", "b", "c"]),
        (("DEL", "a"), ["a"]),
        (("BLPOP", "a", "b", 0), ["a", "b"]),
        (("BITOP", "AND", "d", "a", "b"), ["d", "a", "b"]),
        (("RENAME", "a", "b"), ["a", "b"]),
        (("LMOVE", "a", "b", "LEFT", "RIGHT"), ["a", "b"]),
        (("EVAL", "return 1", 2, "x", "y", "arg"), ["x", "y"]),
        (("EVAL", "return 1", "2", "x", "y"), ["x", "y"]),
        (("EVAL", "return 1", 0), []),
        (("FCALL_RO", "f", 1, "x", "arg"), ["x"]),
        (("ZUNIONSTORE", "d", 2, "a", "b", "WEIGHTS", 1, 2), ["d", "a", "b"]),
        (("ZINTERCARD", 2, "a", "b", "LIMIT", 5), ["a", "b"]),
        (("LMPOP", 2, "a", "b", "LEFT"), ["a", "b"]),
        (("BZMPOP", 0, 1, "a", "MIN"), ["a"]),
        (("XREAD", "STREAMS", "a", "b", "0", "0"), ["a", "b"]),
        (("XREAD", "COUNT", 2, "BLOCK", 0, "streams", "a", "0"), ["a"]),
        (("XREAD", "STREAMS", "a", "b", "0"), ["a"]),  # limit 2: the first half, rounded down
        (("XREAD", "\u017ftreams", "a", "STREAMS", "b", "0"), ["b"]),  # ASCII case only
        (("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"), ["s"]),
        (("GEORADIUS", "k", 1, 2, 3, "m", "STORE", "d"), ["k", "d"]),
        (("GEORADIUS", "k", 1, 2, 3, "m", "STOREDIST", "d"), ["k", "d"]),
        (("GEORADIUS", "k", 1, 2, 3, "m"), ["k"]),
        (("SORT", "k"), ["k"]),
        (("SORT", "k", "BY", "store", "STORE", "d"), ["k", "d"]),
        (("SORT", "k", "LIMIT", 0, 5, "GET", "#", "STORE", "d"), ["k", "d"]),
        (("SORT", "k", "GET", "STORE", "ALPHA"), ["k"]),  # STORE here is GET's pattern
        (("SORT_RO", "k", "BY", "p"), ["k"]),
        (("MIGRATE", "h", 1, "k", 0, 5000), ["k"]),
        (("OBJECT", "ENCODING", "k"), ["k"]),
        (("MEMORY", "USAGE", "k", "SAMPLES", 5), ["k"]),
        (("XINFO", "STREAM", "s", "FULL"), ["s"]),
        (("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"), ["s"]),
        (("SPUBLISH", "ch", "m"), ["ch"]),  # shard channels decide the slot
        (("SSUBSCRIBE", "a", "b"), ["a", "b"]),
        (("SUNSUBSCRIBE",), []),
        (("PING",), []),
        (("CLIENT", "ID"), []),
        (("CLIENT",), []),
        (("MULTI",), []),
        # Arguments the specs do not fit: no keys (the server refuses the command).
        (("GET",), []),
        (("GET", "a", "b"), []),
        (("RENAME", "a"), []),
        (("EVAL", "s", "x"), []),
        (("EVAL", "s", -1), []),
        (("EVAL", "s", "01", "k"), []),
        (("EVAL", "s", 3, "a", "b"), []),
        (("XREAD", "STREAMS", "a"), []),
        ((), []),
    ],
)
def test_command_keys(args: tuple[Any, ...], keys: list[Any]) -> None:
    assert command_keys(args) == keys


def test_where_the_specs_cannot_tell() -> None:
    assert command_keys(("NOSUCHCOMMAND", "x")) is None
    assert command_keys(("CLIENT", "NOSUCH")) is None
    # MIGRATE's KEYS spec is flagged incomplete: once it matches, only the server knows.
    assert command_keys(("MIGRATE", "h", 1, "", 0, 5000, "KEYS", "a", "b")) is None
    with pytest.raises(KeyError):
        command_slot(("MIGRATE", "h", 1, "", 0, 5000, "KEYS", "a", "b"))


def test_keyword_searched_backwards() -> None:
    # A made-up spec: "KEYS" searched for from the second-to-last argument backwards.
    spec = CommandSpec("X", -2, frozenset(), (parse_key_spec("KEYS@-2 r-1/1/0 RW"),))
    program = keyspecs._compile(spec)
    assert keyspecs._run(program, ("X", "KEYS", "a", "KEYS", "b", "c")) == ["b", "c"]
    assert keyspecs._run(program, ("X", "a", "b", "KEYS")) == []  # never the last argument
    assert keyspecs._run(program, ("X", "KEYS", "a")) == ["a"]
    forwards = CommandSpec("Y", -2, frozenset(), (parse_key_spec("KEYS@1 r0/1/0 RW"),))
    assert keyspecs._run(keyspecs._compile(forwards), ("Y", "KEYS", "a", "KEYS", "b")) == ["a"]


def test_range_with_limit_and_step() -> None:
    spec = CommandSpec("Z", -2, frozenset(), (parse_key_spec("@1 r-1/2/2 RW"),))
    program = keyspecs._compile(spec)
    # first=1, argc=9: last = 1 + 8 // 2 - 1 = 4, every second argument.
    assert keyspecs._run(program, ("Z", "a", "x", "b", "y", "c", "z", "d", "w")) == ["a", "b"]


def test_fast_paths_agree_with_the_general_evaluation() -> None:
    """Every command that has a fast form answers as the compiled specs do, for argument
    counts from 1 to 8 and every spelling of its name."""
    fast = set(keyspecs._FAST) | set(keyspecs._FIXED) | set(keyspecs._COUNTED)
    assert {"GET", "SET", "MGET", "MSET", "RENAME", "EVAL", "FCALL_RO", b"get"} <= fast
    for name in fast:
        upper = keyspecs.command_name(name)
        program = keyspecs._PROGRAMS[upper]
        for argc in range(1, 9):
            args = (name, *(f"a{i}" for i in range(1, argc)))
            assert command_keys(args) == keyspecs._run(program, args), args
            for count in (-1, 0, 1, 2, 3, "2", "x"):
                counted = (name, "a1", count, *(f"a{i}" for i in range(3, argc)))
                assert command_keys(counted) == keyspecs._run(program, counted), counted


def test_keys_slot_and_cross_slot() -> None:
    assert command_slot(("ZUNIONSTORE", "{t}d", 2, "{t}a", "{t}b")) == key_slot("t")
    assert command_slot(("XREAD", "STREAMS", "{s}1", "{s}2", 0, 0)) == key_slot("s")
    with pytest.raises(trio_maint.CrossSlotError):
        command_slot(("EVAL", "return 1", 2, "a", "b"))
    with pytest.raises(trio_maint.CrossSlotError):
        command_slot(("XREAD", "STREAMS", "a", "b", 0, 0))
    assert command_slot(("EVAL", "return 1", 0)) is None


# ------------------------------------------------------------- what the client derives


def test_read_commands_come_from_the_readonly_flag() -> None:
    assert {"GET", "MGET", "XREAD", "EVAL_RO", "FCALL_RO", "OBJECT|ENCODING"} <= READ_COMMANDS
    assert not {"SET", "XREADGROUP", "EVAL", "INCR", "OBJECT"} & READ_COMMANDS
    assert is_readonly(("get", "k")) and is_readonly((b"OBJECT", b"freq", b"k"))
    assert not is_readonly(("SET", "k", "v")) and not is_readonly(("NOSUCH",))
    assert is_readonly((bytearray(b"GET"), "k")) and is_readonly(("gEt", "k"))
    assert not is_readonly(()) and not is_readonly(("OBJECT", "HELP"))
    for name in READ_COMMANDS:
        assert "write" not in command_table.COMMANDS[name][1].split(), name


def test_keyless_commands() -> None:
    assert {"PING", "MULTI", "EXEC", "CLIENT", "CLIENT|ID", "CONFIG", "FUNCTION"} <= KEYLESS
    assert not {"GET", "OBJECT", "OBJECT|ENCODING", "MEMORY"} & KEYLESS
    for name in KEYLESS:
        parts = (name.partition("|")[0], name.partition("|")[2])
        args = [p for p in parts if p]
        assert command_keys(args) == [], name


# ------------------------------------------------------------------------ generator


@pytest.mark.trio
async def test_generated_table_is_up_to_date(redis_url: str) -> None:
    """Regenerate from the session's live server and compare with the checked-in module
    (run ``tools/gen_command_table.py`` when this fails)."""
    generator = _generator()
    reply, version = await generator.read_command_table(redis_url)
    if version != command_table.SERVER_VERSION:
        pytest.skip(f"the table is of redis {command_table.SERVER_VERSION}, not {version}")
    text = generator.render(reply, version)
    checked_in = (ROOT / "trio_maint" / "_sansio" / "command_table.py").read_text("utf-8")
    assert text == checked_in
    assert text.count("\n") <= 650


def test_generator_writes_its_output(tmp_path: Path, redis_url: str) -> None:
    generator = _generator()
    target = tmp_path / "table.py"
    assert generator.main(["--url", redis_url, "--output", str(target)]) == 0
    namespace: dict[str, Any] = {}
    exec(compile(target.read_text("utf-8"), str(target), "exec"), namespace)
    assert namespace["COMMANDS"]["GET"] == command_table.COMMANDS["GET"]


def test_all_master_commands_are_all_shards_by_the_tips() -> None:
    """The keyless commands the cluster client runs on every master are those the server
    tips as ``request_policy:all_shards`` or ``all_nodes`` (``_sansio/fanout.py``)."""
    from trio_maint._sansio.fanout import FANOUT

    assert {"DBSIZE", "FLUSHDB", "FLUSHALL", "KEYS", "SCRIPT|LOAD"} <= set(FANOUT)
    for name in FANOUT:
        request = command_table.TIPS[name].split()
        assert {"request_policy:all_shards", "request_policy:all_nodes"} & set(request), name
        assert name.partition("|")[0] in KEYLESS or "|" in name
