"""redis-py's ``get_message(ignore_subscribe_messages=..., timeout=...)`` keywords
(found by a fresh-user pass: the keyword was refused with TypeError)."""

from __future__ import annotations

import pytest
import trio

import trio_maint

pytestmark = pytest.mark.trio


async def test_get_message_takes_redis_pys_keywords(r: trio_maint.Redis) -> None:
    async with r.pubsub() as ps:
        await ps.subscribe("test:ps:kw")
        await r.publish("test:ps:kw", "hello")
        with trio.fail_after(5):
            message = await ps.get_message(ignore_subscribe_messages=True, timeout=2.0)
        assert message is not None
        assert (message.type, message["data"]) == ("message", b"hello")
        assert await ps.get_message(ignore_subscribe_messages=True, timeout=0) is None
        await ps.unsubscribe("test:ps:kw")
        with trio.fail_after(5):
            confirmation = await ps.get_message(timeout=2.0)
        assert confirmation is not None and confirmation.type == "unsubscribe"


async def test_a_timeout_passed_by_position_is_refused(r: trio_maint.Redis) -> None:
    async with r.pubsub() as ps:
        with pytest.raises(TypeError, match="timeout="):
            await ps.get_message(1.0)  # type: ignore[arg-type]
