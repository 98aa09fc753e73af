"""The generated command surface (issue 14): the checked-in modules are what
``tools/gen_commands.py`` writes from a live server; every command the server lists has a
method on all four command classes or a written exclusion; every redis-py method we also
have accepts redis-py's parameter names."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import trio_maint
from trio_maint.testing import RedisServer

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import command_spec  # type: ignore[import-not-found]  # noqa: E402
import gen_commands  # type: ignore[import-not-found]  # noqa: E402

CLASSES = [
    trio_maint.Redis,
    trio_maint.Pipeline,
    trio_maint.RedisCluster,
    trio_maint.ClusterPipeline,
]


@pytest.fixture(scope="module")
def tables() -> Iterator[tuple[dict[str, Any], list[Any]]]:
    """``COMMAND DOCS`` and ``COMMAND`` of a redis-server of our own."""
    with RedisServer() as server:
        yield gen_commands.read_server(server.url)


def test_generated_files_are_up_to_date(tables: tuple[dict[str, Any], list[Any]]) -> None:
    files = gen_commands.generate(*tables)
    stale = [str(p) for p, text in files.items() if (ROOT / p).read_text() != text]
    on_disk = {p.name for p in (ROOT / gen_commands.PKG_DIR).glob("g_*.py")}
    expected = {p.name for p in files if p.name.startswith("g_")}
    assert not stale, f"regenerate with tools/gen_commands.py: {stale}"
    assert on_disk == expected, f"stray generated modules: {on_disk - expected}"


def _method_names() -> dict[str, str]:
    names: dict[str, str] = {}
    for command, entry in command_spec.COMMANDS.items():
        if entry.method:
            names[command] = entry.method
    return names


def test_every_command_has_a_method_or_a_reason(tables: tuple[dict[str, Any], list[Any]]) -> None:
    docs, _ = tables
    leaves = gen_commands.leaf_commands(docs)
    assert len(leaves) > 300
    renamed = _method_names()
    missing = []
    for command in sorted(leaves):
        if command in command_spec.EXCLUDED:
            assert len(command_spec.EXCLUDED[command]) > 20, command  # a real reason
            continue
        name = renamed.get(command) or gen_commands.pyname(command.replace("|", "_")).rstrip("_")
        for cls in CLASSES:
            if not callable(getattr(cls, name, None)):
                missing.append(f"{cls.__name__}.{name} ({command})")
    assert not missing, missing
    for command in command_spec.EXCLUDED:
        if command != "client|no-touch":  # listed for newer servers
            assert command in leaves, f"exclusion of a command the server lacks: {command}"


def test_every_method_documents_command_reply_and_link() -> None:
    for cls in (trio_maint.Redis, trio_maint.Pipeline):
        for name in ("get", "zrange", "config_get", "xreadgroup", "client_no_evict"):
            doc = inspect.getdoc(getattr(cls, name)) or ""
            assert "https://redis.io/commands/" in doc
            assert "``" in doc.splitlines()[0]
    sig = inspect.signature(trio_maint.Redis.get)
    assert "Value | None" in str(sig.return_annotation)
    assert str(inspect.signature(trio_maint.Pipeline.get).return_annotation) == "Self"


def test_redis_py_keyword_names_are_accepted() -> None:
    redis = pytest.importorskip("redis")
    problems = []
    for name in sorted(dir(redis.Redis)):
        if name.startswith("_") or not hasattr(trio_maint.Redis, name):
            continue
        theirs_fn = getattr(redis.Redis, name)
        if not callable(theirs_fn):
            continue
        theirs = inspect.signature(theirs_fn).parameters
        ours = inspect.signature(getattr(trio_maint.Redis, name)).parameters
        kinds = {p.kind for p in ours.values()}
        allowed = command_spec.COMPAT.get(name, {})
        for param in list(theirs.values())[1:]:
            if param.kind is param.VAR_KEYWORD or param.name in allowed:
                continue
            if param.kind is param.VAR_POSITIONAL:
                if inspect.Parameter.VAR_POSITIONAL not in kinds:
                    problems.append(f"{name}: *{param.name}")
            elif param.name not in ours and inspect.Parameter.VAR_KEYWORD not in kinds:
                problems.append(f"{name}: {param.name}")
    assert not problems, problems
    for name, reasons in command_spec.COMPAT.items():
        assert all(len(why) > 20 for why in reasons.values()), name


def test_old_keyword_names_still_work() -> None:
    """Keywords of the hand-written methods before the generator stay accepted."""
    expire = inspect.signature(trio_maint.Redis.expire).parameters
    assert "seconds" in expire and "time" in expire
    assert "milliseconds" in inspect.signature(trio_maint.Redis.pexpire).parameters
    assert "type" in inspect.signature(trio_maint.Redis.scan).parameters
