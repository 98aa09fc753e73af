"""Relaxed timeouts of one connection (sans-IO; time passed in)."""

from __future__ import annotations

import logging

import pytest

from trio_maint._sansio.notifications import (
    FailedOver,
    FailingOver,
    Migrated,
    Migrating,
    Moving,
    Notification,
    SMigrated,
    SMigrating,
)
from trio_maint._sansio.timeouts import WINDOW_BACKSTOP_FACTOR, RelaxedTimeouts


def test_not_relaxed_initially() -> None:
    t = RelaxedTimeouts(10.0)
    assert not t.is_relaxed(0.0)
    assert t.effective(1.0, 0.0) == 1.0
    assert t.effective(None, 0.0) is None


def test_relaxed_timeout_is_a_floor() -> None:
    t = RelaxedTimeouts(10.0)
    t.open_window(0.0)
    assert t.is_relaxed(1.0)
    assert t.effective(1.0, 1.0) == 10.0
    assert t.effective(30.0, 1.0) == 30.0  # never a tightening
    assert t.effective(None, 1.0) is None  # BLPOP key 0 still waits forever


def test_nested_windows_are_counted() -> None:
    t = RelaxedTimeouts(10.0)
    t.open_window(0.0)
    t.open_window(0.0)
    assert t.close_window(1.0)
    assert t.is_relaxed(1.0)
    assert t.close_window(2.0)
    assert not t.is_relaxed(2.0)
    assert not t.close_window(3.0)  # unmatched closing ignored
    assert t.open_windows == 0
    t.open_window(4.0)
    assert t.is_relaxed(4.0)  # a stray closing did not go below zero


@pytest.mark.parametrize(
    ("opening", "closing"),
    [
        (Migrating(1), Migrated(2)),
        (FailingOver(1), FailedOver(2)),
        (SMigrating(1, ("1",)), SMigrated(2, ())),
        (Migrating(1), FailedOver(2)),
    ],
)
def test_on_notification(opening: Notification, closing: Notification) -> None:
    t = RelaxedTimeouts(10.0)
    assert t.on_notification(opening, 0.0)
    assert t.is_relaxed(0.0)
    assert t.on_notification(closing, 1.0)
    assert not t.is_relaxed(1.0)


def test_moving_does_not_relax() -> None:
    t = RelaxedTimeouts(10.0)
    assert not t.on_notification(Moving(1, 15.0, None), 0.0)
    assert not t.is_relaxed(0.0)


def test_post_handoff_is_separate_from_windows() -> None:
    t = RelaxedTimeouts(10.0)
    t.relax_after_handoff(0.0, 20.0)
    t.open_window(1.0)
    t.close_window(2.0)  # the MIGRATED does not end the post-handoff period
    assert t.is_relaxed(2.0)
    t.open_window(3.0)
    assert t.is_relaxed(25.0)  # the post-handoff expiry does not end the MIGRATING window
    t.close_window(26.0)
    assert not t.is_relaxed(26.0)


def test_post_handoff_expires() -> None:
    t = RelaxedTimeouts(10.0)
    t.relax_after_handoff(0.0, 0.1)
    assert t.is_relaxed(0.05)
    assert t.effective(1.0, 0.05) == 10.0
    assert not t.is_relaxed(0.15)
    assert t.effective(1.0, 0.15) == 1.0
    t.relax_after_handoff(1.0, 0.0)  # zero duration: nothing
    assert not t.is_relaxed(1.0)


def test_post_handoff_keeps_the_longer_period() -> None:
    t = RelaxedTimeouts(10.0)
    t.relax_after_handoff(0.0, 20.0)
    t.relax_after_handoff(1.0, 5.0)
    assert t.state(10.0).post_handoff_until == 20.0


def test_backstop_ends_a_window_never_closed(caplog: pytest.LogCaptureFixture) -> None:
    t = RelaxedTimeouts(10.0)
    assert t.backstop == WINDOW_BACKSTOP_FACTOR * 10.0 == 100.0
    t.open_window(0.0)
    t.open_window(50.0)  # a new opening pushes the backstop
    assert t.is_relaxed(149.0)
    with caplog.at_level(logging.WARNING, logger="trio_maint.timeouts"):
        assert t.effective(1.0, 150.0) == 1.0
    assert t.open_windows == 0
    assert t.backstop_expirations == 1
    assert "not closed by the server" in caplog.text
    assert not t.close_window(151.0)


def test_custom_backstop_and_validation() -> None:
    t = RelaxedTimeouts(2.0, backstop=5.0)
    t.open_window(0.0)
    assert not t.is_relaxed(5.0)
    with pytest.raises(ValueError):
        RelaxedTimeouts(-1.0)
    with pytest.raises(ValueError):
        RelaxedTimeouts(1.0, backstop=0.0)


def test_state_and_reset() -> None:
    t = RelaxedTimeouts(10.0)
    t.open_window(0.0)
    t.relax_after_handoff(0.0, 20.0)
    state = t.state(1.0)
    assert state.relaxed
    assert state.open_windows == 1
    assert state.window_deadline == 100.0
    assert state.post_handoff_until == 20.0
    t.reset()
    assert not t.is_relaxed(1.0)
