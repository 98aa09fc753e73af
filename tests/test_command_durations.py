"""Times given to command methods are numbers (or timedeltas): a ``bool``, NaN, an infinity
or a string that is not a number is a DataError before anything is sent (found by an
adversarial review: ``set(ex=True)`` set a TTL of 1 s; NaN and infinities raised bare
ValueError/OverflowError)."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import trio_maint
from trio_maint import DataError

pytestmark = pytest.mark.trio

CALLS: list[tuple[str, Callable[[trio_maint.Redis], Awaitable[Any]]]] = [
    ("set ex=True", lambda r: r.set("test:dur", "v", ex=True)),
    ("set ex=nan", lambda r: r.set("test:dur", "v", ex=math.nan)),
    ("set px=inf", lambda r: r.set("test:dur", "v", px=math.inf)),
    ("expire True", lambda r: r.expire("test:dur", True)),
    ("pexpire nan", lambda r: r.pexpire("test:dur", math.nan)),
    ("blpop nan", lambda r: r.blpop(["test:dur:q"], math.nan)),
    ("blpop text", lambda r: r.blpop(["test:dur:q"], "abc")),  # type: ignore[arg-type]
    ("xread block nan", lambda r: r.xread({"test:dur:s": "0"}, block=math.nan)),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("name", "call"), CALLS, ids=[name for name, _ in CALLS])
async def test_a_bad_time_is_a_data_error_before_sending(
    r: trio_maint.Redis, name: str, call: Callable[[trio_maint.Redis], Awaitable[Any]]
) -> None:
    before = r.pool.stats()
    with pytest.raises(DataError, match=r"time|timeout"):
        await call(r)
    assert await r.ping() is True
    assert r.pool.stats().removed == before.removed  # no connection was spoilt


async def test_good_times_still_work(r: trio_maint.Redis) -> None:
    assert await r.set("test:dur", "v", ex=2.5) is True
    assert 0 < await r.pttl("test:dur") <= 2500
    assert await r.expire("test:dur", 10) is True
    assert await r.blpop(["test:dur:q"], 0.05) is None
    await r.delete("test:dur")
