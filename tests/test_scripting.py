"""Scripting on a real redis-server: ``register_script``/:class:`~trio_maint.Script` (EVALSHA,
EVAL after NOSCRIPT) on Redis, in pipelines and transactions, and functions (FUNCTION LOAD,
FCALL, FCALL_RO).

Every test builds a script of its own (a unique comment in the source), so its first call
meets NOSCRIPT without flushing anything; SCRIPT FLUSH and FUNCTION LOAD run on this
module's own server, never on the session's."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import trio

import trio_maint
from trio_maint import NoScriptError, ResponseError, Script
from trio_maint._sansio.scripts import script_sha
from trio_maint.testing import RedisServer

pytestmark = pytest.mark.trio

TIMEOUT = 20.0
_serial = itertools.count()

#: KEYS and ARGV back, and a counter bumped on every run (the script's side effect).
BODY = """-- {tag}
redis.call('INCR', KEYS[1])
return {{KEYS[1], ARGV[1], redis.call('GET', KEYS[1])}}
"""


def unique(kind: str) -> str:
    return f"trio_maint test {kind} {next(_serial)} {id(object())}"


def fresh_source(kind: str = "echo") -> str:
    """A script no server has seen (a unique comment), so its first EVALSHA fails."""
    return BODY.format(tag=unique(kind))


def failing_source() -> str:
    """A new script that fails on a key holding text."""
    return f"-- {unique('err')}\nreturn redis.call('INCR', KEYS[1])"


@pytest.fixture(scope="module")
def own_server() -> Iterator[RedisServer]:
    """A redis-server of this module's own: SCRIPT FLUSH and FUNCTION LOAD run here."""
    with RedisServer() as server:
        yield server


@pytest.fixture
async def own(own_server: RedisServer) -> AsyncIterator[trio_maint.Redis]:
    async with trio_maint.open_redis(own_server.url) as client:
        await client.execute_command("FLUSHDB")
        yield client


async def command_stats(r: trio_maint.Redis) -> dict[str, tuple[int, int]]:
    """``{"evalsha": (calls, failed_calls), "eval": (...)}`` from INFO commandstats."""
    info = await r.info("commandstats")
    stats = {}
    for name in ("evalsha", "eval"):
        entry = info.get(f"cmdstat_{name}", {"calls": 0, "failed_calls": 0})
        stats[name] = (int(entry["calls"]), int(entry["failed_calls"]))
    return stats


def delta(
    after: dict[str, tuple[int, int]], before: dict[str, tuple[int, int]]
) -> dict[str, tuple[int, int]]:
    return {
        name: (after[name][0] - before[name][0], after[name][1] - before[name][1]) for name in after
    }


async def exists(r: trio_maint.Redis, sha: str) -> bool:
    (found,) = await r.execute_command("SCRIPT", "EXISTS", sha)
    return bool(found)


# ---------------------------------------------------------------------------- the client


async def test_sha_is_the_servers(r: trio_maint.Redis) -> None:
    source = fresh_source()
    script = r.register_script(source)
    assert isinstance(script, Script)
    assert script.registered_client is r and script.script == source
    with trio.fail_after(TIMEOUT):
        assert (await r.execute_command("SCRIPT", "LOAD", source)).decode() == script.sha
    assert script.sha == script_sha(source.encode()) == r.register_script(source.encode()).sha
    assert repr(script) == f"<Script {script.sha}>"


async def test_first_call_falls_back_to_eval_and_caches_the_script(
    own: trio_maint.Redis,
) -> None:
    script = own.register_script(fresh_source())
    with trio.fail_after(TIMEOUT):
        assert not await exists(own, script.sha)
        before = await command_stats(own)
        assert await script(keys=["k"], args=["a"]) == [b"k", b"a", b"1"]
        # One EVALSHA answered NOSCRIPT (it ran nothing), then one EVAL.
        assert delta(await command_stats(own), before) == {"evalsha": (1, 1), "eval": (1, 0)}
        assert await exists(own, script.sha)
        before = await command_stats(own)
        assert await script(keys=["k"], args=["b"]) == [b"k", b"b", b"2"]
        assert delta(await command_stats(own), before) == {"evalsha": (1, 0), "eval": (0, 0)}
        assert await own.get("k") == b"2"  # each call ran exactly once


async def test_script_flush_between_calls(own: trio_maint.Redis) -> None:
    script = own.register_script(fresh_source())
    with trio.fail_after(TIMEOUT):
        assert await script(keys=["k"], args=[1]) == [b"k", b"1", b"1"]
        await own.execute_command("SCRIPT", "FLUSH")
        assert not await exists(own, script.sha)
        assert await script(keys=["k"], args=[2]) == [b"k", b"2", b"2"]
        assert await exists(own, script.sha)
        assert await own.get("k") == b"2"


async def test_script_errors_are_raised_once(own: trio_maint.Redis) -> None:
    script = own.register_script(failing_source())
    with trio.fail_after(TIMEOUT):
        await own.set("text", "not a number")
        before = await command_stats(own)
        for _ in range(2):  # EVAL's error, then EVALSHA's: neither is NOSCRIPT, none resent
            with pytest.raises(ResponseError, match="not an integer") as info:
                await script(keys=["text"])
            assert not isinstance(info.value, NoScriptError)
        # NOSCRIPT then EVAL's error; then EVALSHA's error: one run per call.
        assert delta(await command_stats(own), before) == {"evalsha": (2, 2), "eval": (1, 1)}


async def test_a_scripts_own_noscript_error_is_not_a_cache_miss(own: trio_maint.Redis) -> None:
    # Found by an adversarial review: a script that ran and then returned an error reply
    # starting with NOSCRIPT was taken as the server's cache miss and run again as EVAL.
    body = (
        f"redis.call('INCR', KEYS[1]); return redis.error_reply('NOSCRIPT stop') -- {next(_serial)}"
    )
    script = own.register_script(body)
    with trio.fail_after(TIMEOUT):
        await own.script_load(body)  # cached: EVALSHA runs it
        await own.delete("ran")
        with pytest.raises(NoScriptError, match="NOSCRIPT stop"):
            await script(keys=["ran"])
        assert await own.get("ran") == b"1"
        async with own.pipeline(transaction=False) as pipe:
            await script(keys=["ran"], client=pipe)
            assert len(await pipe.execute(raise_on_error=False)) == 1
        assert await own.get("ran") == b"2"


async def test_keys_args_and_other_clients(r: trio_maint.Redis, redis_url: str) -> None:
    script = r.register_script("return {#KEYS, #ARGV, ARGV[1], ARGV[2]}")
    with trio.fail_after(TIMEOUT):
        assert await script() == [0, 0]
        assert await script(keys=("a", b"b"), args=[1.5, b"x"]) == [2, 2, b"1.5", b"x"]
        async with trio_maint.open_redis(redis_url, decode_responses=True) as text:
            assert await script(args=["é", "y"], client=text) == [0, 2, "é", "y"]
            again = text.register_script("return {#KEYS, #ARGV, ARGV[1], ARGV[2]}")
            assert again.sha == script.sha
    with pytest.raises(TypeError, match="keys must be a sequence"):
        await script(keys="abc")
    with pytest.raises(TypeError, match="args must be a sequence"):
        await script(args=b"abc")
    with pytest.raises(TypeError, match="str or bytes"):
        r.register_script(42)  # type: ignore[arg-type]


async def test_concurrent_first_calls(own: trio_maint.Redis) -> None:
    """Many tasks call a script no server has yet: each runs it exactly once."""
    script = own.register_script(fresh_source())
    results: list[Any] = []

    async def call(i: int) -> None:
        results.append(await script(keys=["n"], args=[i]))

    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            for i in range(50):
                nursery.start_soon(call, i)
        assert await own.get("n") == b"50"
    assert sorted(int(r[2]) for r in results) == list(range(1, 51))


# ------------------------------------------------------------------------------ pipelines


async def test_pipeline_resends_only_noscript_calls_in_order(own: trio_maint.Redis) -> None:
    script = own.register_script(fresh_source())
    other = own.register_script(fresh_source("other"))
    with trio.fail_after(TIMEOUT):
        await own.set("x", "before")
        before = await command_stats(own)
        async with own.pipeline(transaction=False) as pipe:
            assert await script(keys=["a"], args=[1], client=pipe) is pipe
            pipe.get("x")
            await other(keys=["b"], args=[2], client=pipe)
            pipe.set("x", "after")
            await script(keys=["a"], args=[3], client=pipe)
            results = await pipe.execute()
        assert results == [
            [b"a", b"1", b"1"],
            b"before",
            [b"b", b"2", b"1"],
            True,
            [b"a", b"3", b"2"],
        ]
        # Three EVALSHA answered NOSCRIPT; the three calls were sent again as EVAL.
        assert delta(await command_stats(own), before) == {"evalsha": (3, 3), "eval": (3, 0)}
        # Cached now: the same pipeline again sends EVALSHA only.
        before = await command_stats(own)
        async with own.pipeline(transaction=False) as pipe:
            await script(keys=["a"], args=[4], client=pipe)
            await other(keys=["b"], args=[5], client=pipe)
            assert await pipe.execute() == [[b"a", b"4", b"3"], [b"b", b"5", b"2"]]
        assert delta(await command_stats(own), before) == {"evalsha": (2, 0), "eval": (0, 0)}


async def test_pipeline_keeps_other_errors(own: trio_maint.Redis) -> None:
    script = own.register_script(fresh_source())
    with trio.fail_after(TIMEOUT):
        await own.set("text", "x")
        async with own.pipeline(transaction=False) as pipe:
            await script(keys=["text"], args=[1], client=pipe)
            pipe.execute_command("EVALSHA", "0" * 40, 0)  # by hand: no body to fall back on
            replies = await pipe.execute(raise_on_error=False)
        assert isinstance(replies[0], ResponseError) and "not an integer" in str(replies[0])
        assert isinstance(replies[1], NoScriptError)
        async with own.pipeline(transaction=False) as pipe:
            await script(keys=["text"], args=[1], client=pipe)
            with pytest.raises(ResponseError, match="not an integer") as info:
                await pipe.execute()
        assert any("command #1" in note for note in info.value.__notes__)


async def test_transaction_sends_each_scripts_first_call_as_eval(own: trio_maint.Redis) -> None:
    """Inside MULTI/EXEC, NOSCRIPT could not be cured (the other commands ran): the first
    call of each script is EVAL, the next ones EVALSHA, so none fails."""
    script = own.register_script(fresh_source())
    other = own.register_script(fresh_source("other"))
    with trio.fail_after(TIMEOUT):
        for flush in (False, True):
            if flush:
                await own.execute_command("SCRIPT", "FLUSH")
            await own.delete("a", "b")
            before = await command_stats(own)
            async with own.pipeline() as pipe:
                await script(keys=["a"], args=[1], client=pipe)
                pipe.incr("c")
                await script(keys=["a"], args=[2], client=pipe)
                await other(keys=["b"], args=[3], client=pipe)
                await script(keys=["a"], args=[4], client=pipe)
                results = await pipe.execute()
            assert results[0] == [b"a", b"1", b"1"]
            assert results[2:] == [[b"a", b"2", b"2"], [b"b", b"3", b"1"], [b"a", b"4", b"3"]]
            assert delta(await command_stats(own), before) == {
                "evalsha": (2, 0),
                "eval": (2, 0),
            }


async def test_script_registered_on_a_pipeline(own: trio_maint.Redis) -> None:
    with trio.fail_after(TIMEOUT):
        async with own.pipeline() as pipe:
            script = pipe.register_script(fresh_source())
            assert script.registered_client is pipe
            assert await script(keys=["p"], args=["x"]) is pipe
            assert await pipe.execute() == [[b"p", b"x", b"1"]]
            # Reused after execute(): the first call of the next transaction is EVAL again.
            await script(keys=["p"], args=["y"])
            assert await pipe.execute() == [[b"p", b"y", b"2"]]
        async with own.pipeline(transaction=False) as pipe:
            script = pipe.register_script(fresh_source())
            await script(keys=["q"], args=["y"])
            await script(keys=["q"], args=["z"])
            assert await pipe.execute() == [[b"q", b"y", b"1"], [b"q", b"z", b"2"]]


async def test_watch_then_script_in_a_transaction(own: trio_maint.Redis) -> None:
    script = own.register_script(fresh_source())
    with trio.fail_after(TIMEOUT):
        await own.set("w", 10)
        async with own.pipeline() as pipe:
            await pipe.watch("w")
            value = int(await pipe.immediate_execute_command("GET", "w"))
            pipe.multi()
            await script(keys=["w"], args=[value], client=pipe)
            assert await pipe.execute() == [[b"w", b"10", b"11"]]


async def test_transaction_of_a_failing_script_runs_the_rest(own: trio_maint.Redis) -> None:
    """A script's runtime error inside EXEC is its reply (Redis does not roll back); it is
    not NOSCRIPT, so nothing is resent."""
    script = own.register_script(failing_source())
    with trio.fail_after(TIMEOUT):
        await own.set("text", "x")
        async with own.pipeline() as pipe:
            await script(keys=["text"], client=pipe)
            pipe.incr("ok")
            replies = await pipe.execute(raise_on_error=False)
        assert isinstance(replies[0], ResponseError) and replies[1] == 1
        assert await own.get("ok") == b"1"


# ------------------------------------------------------------------------------ functions

LIBRARY = """#!lua name=tmlib{n}
redis.register_function('tm_incr{n}', function(keys, args)
  return redis.call('INCRBY', keys[1], args[1])
end)
redis.register_function{{function_name='tm_get{n}', callback=function(keys, args)
  return redis.call('GET', keys[1])
end, flags={{'no-writes'}}}}
"""


async def test_function_load_and_fcall(own: trio_maint.Redis) -> None:
    n = next(_serial)
    with trio.fail_after(TIMEOUT):
        name = await own.execute_command("FUNCTION", "LOAD", "REPLACE", LIBRARY.format(n=n))
        assert name == f"tmlib{n}".encode()
        assert await own.execute_command("FCALL", f"tm_incr{n}", 1, "f", 5) == 5
        assert await own.execute_command("FCALL_RO", f"tm_get{n}", 1, "f") == b"5"
        with pytest.raises(ResponseError, match=r"(?i)write"):
            await own.execute_command("FCALL_RO", f"tm_incr{n}", 1, "f", 1)
        async with own.pipeline() as pipe:
            pipe.execute_command("FCALL", f"tm_incr{n}", 1, "f", 2)
            pipe.execute_command("FCALL_RO", f"tm_get{n}", 1, "f")
            assert await pipe.execute() == [7, b"7"]


async def test_function_and_script_methods(own: trio_maint.Redis) -> None:
    """The generated methods (FUNCTION LOAD, FCALL, FCALL_RO, SCRIPT LOAD/EXISTS, EVALSHA)
    with register_script's digests."""
    n = next(_serial)
    lib = LIBRARY.format(n=f"{n}m")
    with trio.fail_after(TIMEOUT):
        assert await own.function_load(lib, replace=True) in (f"tmlib{n}m", f"tmlib{n}m".encode())
        assert await own.fcall(f"tm_incr{n}m", 1, "g", 3) == 3
        assert await own.fcall_ro(f"tm_get{n}m", 1, "g") == b"3"
        async with own.pipeline() as pipe:
            pipe.fcall(f"tm_incr{n}m", 1, "g", 4).fcall_ro(f"tm_get{n}m", 1, "g")
            assert await pipe.execute() == [7, b"7"]
        source = fresh_source()
        script = own.register_script(source)
        assert await own.script_exists(script.sha) == [False]
        assert await own.script_load(source) in (script.sha, script.sha.encode())
        assert await own.script_exists(script.sha) == [True]
        assert await own.evalsha(script.sha, 1, "h", "v") == [b"h", b"v", b"1"]
        assert await script(["h"], ["w"]) == [b"h", b"w", b"2"]
