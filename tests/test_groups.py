"""How trio_maint's own nurseries unwrap their exception groups (``_net/groups.py``)."""

from __future__ import annotations

import pytest
import trio

from trio_maint._net.groups import unwrap_group

pytestmark = pytest.mark.trio


async def _a_cancelled() -> trio.Cancelled:
    with trio.CancelScope() as scope:
        scope.cancel()
        try:
            await trio.lowlevel.checkpoint()
        except trio.Cancelled as exc:
            return exc
    raise AssertionError("the checkpoint was not cancelled")


async def test_groups_of_only_cancellations_are_ignored() -> None:
    """A handoff worker cancelled while ``trio.open_tcp_stream`` races its connection
    attempts reports a group of ``Cancelled``: beside the block's own error it is ignored,
    so the error comes out unwrapped (this was a flaky failure of
    ``test_error_in_block_during_a_handoff_is_not_wrapped`` under load)."""
    boom = ValueError("boom")
    nested = BaseExceptionGroup("attempts", [await _a_cancelled(), await _a_cancelled()])
    deeper = BaseExceptionGroup("outer", [BaseExceptionGroup("inner", [await _a_cancelled()])])
    group = BaseExceptionGroup("nursery", [boom, nested, deeper, await _a_cancelled()])
    assert unwrap_group(group) is boom


async def test_a_real_error_inside_a_nested_group_keeps_the_group() -> None:
    nested = BaseExceptionGroup("attempts", [await _a_cancelled(), OSError("refused")])
    group = BaseExceptionGroup("nursery", [ValueError("boom"), nested])
    assert unwrap_group(group) is group


async def test_a_users_own_group_comes_out_unchanged() -> None:
    users = ExceptionGroup("mine", [ValueError("a"), KeyError("b")])
    assert unwrap_group(BaseExceptionGroup("nursery", [users])) is users


@pytest.mark.parametrize("count", [1, 2])
async def test_only_cancellations(count: int) -> None:
    cancels = [await _a_cancelled() for _ in range(count)]
    group = BaseExceptionGroup("nursery", cancels)
    assert unwrap_group(group) is (cancels[0] if count == 1 else group)
