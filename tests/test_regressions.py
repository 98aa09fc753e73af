"""Regression tests for problems found by adversarial review of the core."""

from __future__ import annotations

import pytest
import trio
import trio.testing

import trio_maint
from trio_maint import ClientOptions, ProtocolError
from trio_maint.lowlevel import Connection

from ._stallproxy import open_scripted_server

pytestmark = pytest.mark.trio


async def test_cancel_during_health_check_does_not_leak(redis_url: str) -> None:
    async with trio_maint.open_redis(
        redis_url, pool_size=2, max_active_conns=2, pool_timeout=1.0
    ) as r:
        await r.ping()
        for _ in range(5):
            with trio.CancelScope() as scope:
                scope.cancel()
                await r.get("k")
        stats = r.pool.stats()
        assert stats.total == stats.idle + stats.in_use
        assert await r.ping() is True  # no lock-up at max_active_conns


async def test_random_cancellation_keeps_pool_invariants(redis_url: str) -> None:
    async with trio_maint.open_redis(redis_url, pool_size=4, max_active_conns=6) as r:
        import random

        rng = random.Random(7)

        async def worker(i: int) -> None:
            for j in range(60):
                with trio.move_on_after(rng.random() * 0.002):
                    value = f"{i}:{j}"
                    assert await r.echo(value) == value.encode()

        async with trio.open_nursery() as nursery:
            for i in range(8):
                nursery.start_soon(worker, i)
        stats = r.pool.stats()
        assert stats.in_use == 0
        assert stats.total == stats.idle <= 4
        assert await r.ping() is True


async def test_cancelled_get_message_keeps_subscriptions(r: trio_maint.Redis) -> None:
    async with r.pubsub(ignore_subscribe_messages=True) as ps:
        await ps.subscribe("keep")
        with trio.move_on_after(0.1):
            await ps.get_message()
        await r.publish("keep", "after-cancel")
        message = await ps.get_message(timeout=1)
        assert message is not None and message.data == b"after-cancel"


async def test_lost_subscriber_connection_resubscribes(r: trio_maint.Redis) -> None:
    async with r.pubsub(ignore_subscribe_messages=True) as ps:
        await ps.subscribe("again")
        await trio.sleep(0.05)
        assert ps.connection is not None
        await r.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
        await trio.sleep(0.05)
        with pytest.raises(trio_maint.ConnectionError):
            await ps.get_message(timeout=1)
        assert await ps.get_message(timeout=0.2) is None  # reconnects and resubscribes
        await r.publish("again", "v")
        message = await ps.get_message(timeout=1)
        assert message is not None and message.data == b"v"


async def test_get_message_timeout_zero_polls_the_socket(r: trio_maint.Redis) -> None:
    async with r.pubsub() as ps:
        await ps.subscribe("poll")
        await trio.sleep(0.05)
        message = await ps.get_message(timeout=0)
        assert message is not None and message.type == "subscribe"


async def test_resp3_attribute_is_a_protocol_error_not_a_wrong_reply() -> None:
    attr_then_hello = b"|1\r\n+ttl\r\n:3600\r\n%1\r\n+proto\r\n:3\r\n"
    async with open_scripted_server(attr_then_hello) as port:
        with pytest.raises(ProtocolError, match="attribute"):
            await Connection.open(ClientOptions(host="127.0.0.1", port=port))


async def test_users_own_exception_group_is_preserved(redis_url: str) -> None:
    with pytest.raises(ExceptionGroup) as info:
        async with trio_maint.open_redis(redis_url):
            raise ExceptionGroup("mine", [ValueError("x")])
    assert info.value.message == "mine"


async def test_connection_in_use_is_closed_when_the_client_exits(redis_url: str) -> None:
    errors: list[BaseException] = []
    async with trio.open_nursery() as nursery:
        async with trio_maint.open_redis(redis_url) as r:

            async def blocked() -> None:
                try:
                    await r.execute_command("BLPOP", "never-ever", "0")
                except trio_maint.RedisError as exc:
                    errors.append(exc)

            nursery.start_soon(blocked)
            await trio.testing.wait_all_tasks_blocked()
            conns = r.pool.connections
        with trio.fail_after(2):
            while not errors:
                await trio.sleep(0.01)
    assert all(c.closed for c in conns)
    assert isinstance(errors[0], trio_maint.ConnectionError)


async def test_more_checkpoints(r: trio_maint.Redis) -> None:
    p = r.pipeline()
    with trio.testing.assert_checkpoints():
        await p.reset()
    with trio.testing.assert_checkpoints():
        await p.unwatch()
    async with r.pubsub() as ps:
        with trio.testing.assert_checkpoints():
            await ps.resubscribe()
