"""``command_keys`` against the server's own ``COMMAND GETKEYS``, for every command of the
live server that has key specs (subcommands included) and every movablekeys command.

Argument lists are built from the server's ``COMMAND DOCS`` argument trees: each optional
argument left out or put in, each ``oneof`` choice in turn, each ``multiple`` argument once
or twice, and a ``numkeys`` argument set to the number of keys that follow. Every key is
named apart (``k1``, ``k2``, ...), so the order of the keys is checked too."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

import trio_maint
from trio_maint._sansio import command_table
from trio_maint._sansio.keyspecs import command_keys, command_spec

pytestmark = pytest.mark.trio

#: Values for arguments of each type (none of them is a keyword of any command).
_VALUES = {
    "string": "s",
    "integer": "1",
    "double": "1.5",
    "pattern": "p*",
    "unix-time": "1700000000",
}
#: Commands whose specs may not tell (``None`` is allowed for some of their forms).
_UNSURE = {"MIGRATE"}
#: Shard-channel commands: their specs are all ``not_key``, so GETKEYS refuses them.
_CHANNELS = {"SPUBLISH", "SSUBSCRIBE", "SUNSUBSCRIBE"}


def _text(value: Any) -> Any:
    """A RESP3 reply with every ``bytes`` decoded and every set made a sorted list."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, dict):
        return {_text(k): _text(v) for k, v in value.items()}
    if isinstance(value, set | frozenset):
        return sorted(_text(v) for v in value)
    if isinstance(value, list | tuple):
        return [_text(v) for v in value]
    return value


class _Forms:
    """Argument lists for one command's argument tree, one per variant."""

    def __init__(self, full: bool, choice: int, reps: int) -> None:
        self.full, self.choice, self.reps = full, choice, reps
        self.keys = 0

    def _key(self) -> str:
        self.keys += 1
        return f"k{self.keys}"

    def build(self, arguments: list[dict[str, Any]]) -> list[str]:
        out: list[str] = []
        for index, arg in enumerate(arguments):
            flags = arg.get("flags", [])
            if "optional" in flags and not self.full:
                continue
            if arg["type"] == "integer" and arg["name"] == "numkeys":
                out.append(str(self._numkeys(arguments[index + 1 :])))
                continue
            times = self.reps if "multiple" in flags else 1
            for time in range(times):
                token = arg.get("token")
                repeat = time == 0 or "multiple_token" in flags
                if token is not None and arg["type"] != "pure-token" and repeat:
                    out.append(token)
                out += self._one(arg)
        return out

    def _numkeys(self, following: list[dict[str, Any]]) -> int:
        for arg in following:
            if arg["type"] == "key":
                if "optional" in arg.get("flags", []) and not self.full:
                    return 0
                return self.reps if "multiple" in arg.get("flags", []) else 1
        return 1

    def _one(self, arg: dict[str, Any]) -> list[str]:
        kind = arg["type"]
        if kind == "key":
            return [self._key()]
        if kind == "pure-token":
            return [arg["token"]]
        if kind == "block":
            return self.build(arg["arguments"])
        if kind == "oneof":
            options = arg["arguments"]
            return self.build([dict(options[self.choice % len(options)], flags=[])])
        return [_VALUES[kind]]


def _argument_lists(name: str, doc: dict[str, Any]) -> Iterator[list[str]]:
    words = name.upper().split("|")
    arguments = doc.get("arguments", [])
    seen: set[tuple[str, ...]] = set()
    for full, choice, reps in itertools.product((False, True), range(4), (1, 2, 3)):
        args = words + _Forms(full, choice, reps).build(arguments)
        if tuple(args) not in seen:
            seen.add(tuple(args))
            yield args


def _flatten_docs(docs: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, doc in docs.items():
        yield name, doc
        yield from _flatten_docs(doc.get("subcommands", {}))


async def test_command_keys_agrees_with_command_getkeys(redis_url: str) -> None:
    async with trio_maint.open_redis(redis_url) as r:
        docs = _text(await r.execute_command("COMMAND", "DOCS"))
        info = _text(await r.execute_command("COMMAND"))
        version = _text(await r.execute_command("INFO", "server"))
        if f"redis_version:{command_table.SERVER_VERSION}" not in version:
            pytest.skip(f"the table is of redis {command_table.SERVER_VERSION}")
        keyed = set()
        movable = set()
        for entry in info:
            for sub in [entry, *entry[9]]:
                if sub[8]:
                    keyed.add(sub[0].upper())
                if "movablekeys" in sub[2]:
                    movable.add(sub[0].upper())
        agreed: dict[str, int] = {}
        unsure: list[list[str]] = []
        checked = 0
        for name, doc in _flatten_docs(docs):
            upper = name.upper()
            if upper not in keyed:
                continue
            for args in _argument_lists(name, doc):
                ours = command_keys(args)
                if upper in _CHANNELS:
                    spec = command_spec(args)
                    assert spec is not None and spec.arity_ok(len(args))
                    expected = args[1:2] if upper == "SPUBLISH" else args[1:]
                    assert ours == expected, args
                    agreed[upper] = agreed.get(upper, 0) + 1
                    continue
                try:
                    theirs = _text(await r.execute_command("COMMAND", "GETKEYS", *args))
                except trio_maint.ResponseError:
                    continue  # a form the server refuses (checked by hand below)
                checked += 1
                if ours is None:
                    assert upper in _UNSURE, (args, theirs)
                    unsure.append(args)
                    continue
                assert ours == theirs, (args, ours, theirs)
                agreed[upper] = agreed.get(upper, 0) + 1
        missing = (keyed | movable) - set(agreed)
        assert not missing, sorted(missing)
        assert all(args[0] == "MIGRATE" and "KEYS" in args for args in unsure)
        assert checked > 500, checked


async def test_forms_the_specs_do_not_fit(redis_url: str) -> None:
    """Where GETKEYS refuses the arguments, ``command_keys`` finds no key: the cluster
    client then sends the command to any node, which refuses it; where the server says
    there are none (EVAL with a key count that is not one), neither are there here."""
    forms = [
        ("GET",),
        ("GET", "a", "b"),
        ("RENAME", "a"),
        ("EVAL", "s", "x"),
        ("EVAL", "s", "-1", "k"),
        ("EVAL", "s", "3", "a", "b"),
        ("EVAL", "s", "0"),
        ("ZUNIONSTORE", "d", "x", "a"),
        ("ZUNIONSTORE", "d", "0", "a"),
        ("ZUNIONSTORE", "d", "2", "a"),
        ("XREAD", "COUNT", "1", "STREAMS"),
        ("LMPOP", "0", "LEFT"),
    ]
    async with trio_maint.open_redis(redis_url) as r:
        for args in forms:
            try:
                theirs = _text(await r.execute_command("COMMAND", "GETKEYS", *args))
            except trio_maint.ResponseError:
                theirs = []
            assert command_keys(args) == theirs == [], args


async def test_sort_and_migrate_forms(redis_url: str) -> None:
    """The commands whose specs leave part of the answer to the server's own parser."""
    forms = [
        ("SORT", "k"),
        ("SORT", "k", "STORE", "d"),
        ("SORT", "k", "BY", "store", "STORE", "d"),
        ("SORT", "k", "GET", "STORE", "ALPHA"),
        ("SORT", "k", "LIMIT", "store", "store", "STORE", "d", "STORE", "e"),
        ("SORT", "k", "store"),
        ("SORT_RO", "k", "BY", "p", "GET", "#"),
        ("MIGRATE", "h", "1", "k", "0", "5000", "COPY"),
        ("MIGRATE", "h", "1", "k", "0", "5000", "AUTH", "keys"),
    ]
    async with trio_maint.open_redis(redis_url) as r:
        for args in forms:
            theirs = _text(await r.execute_command("COMMAND", "GETKEYS", *args))
            assert command_keys(args) == theirs, args
