"""Exception groups out of trio_maint's own nurseries: the one place that unwraps them.

A nursery wraps what its body and tasks raise in a ``BaseExceptionGroup`` (Trio's strict
exception groups). A nursery the library opens for its own purposes (a client's, the
handoff workers', a cluster pipeline's, the test simulator's) should not change what the
caller sees, so its group is unwrapped:

* :func:`unwrap_group`: after the nursery exited, the single meaningful exception of its
  group (``trio.Cancelled`` ignored when something else is there), or the group itself;
* :func:`holds_only`: in an ``__aexit__``, whether the group is only the ``async with``
  body's own exception (besides cancellations), which then propagates unwrapped;
* :func:`leaves`: every exception in a group, nested groups flattened;
* :func:`open_nursery_unwrapped`: a nursery whose ``async with`` block's own exception
  comes out as it was raised (for a generator-based context manager, where the
  ``__aexit__`` trick of :func:`holds_only` is not available).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

__all__ = ["holds_only", "leaves", "open_nursery_unwrapped", "unwrap_group"]


def unwrap_group(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The single meaningful exception of an internal nursery's group, or the group itself.

    Only the nursery's own level is unwrapped (ignoring ``trio.Cancelled``, and groups of
    nothing but ``trio.Cancelled``, when something else is there), so an
    ``ExceptionGroup`` the user raised comes out unchanged.
    """
    real = [e for e in group.exceptions if not _only_cancelled(e)]
    if len(real) == 1:
        return real[0]
    if not real and len(group.exceptions) == 1:
        return group.exceptions[0]
    return group


def _only_cancelled(exc: BaseException) -> bool:
    """Whether ``exc`` is ``trio.Cancelled`` or a group holding nothing else at any depth
    (a cancelled task's own nursery, e.g. ``trio.open_tcp_stream``'s connection attempts,
    reports its cancellation as such a group)."""
    if isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return all(_only_cancelled(e) for e in exc.exceptions)
    return False


def leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    """The exceptions in ``group`` that are not groups, nested groups flattened."""
    found: list[BaseException] = []
    for item in group.exceptions:
        if isinstance(item, BaseExceptionGroup):
            found.extend(leaves(item))
        else:
            found.append(item)
    return found


def holds_only(group: BaseExceptionGroup[BaseException], exc: BaseException) -> bool:
    """Whether ``group`` holds ``exc`` and otherwise only ``trio.Cancelled`` (at any depth).

    For an ``__aexit__`` whose nursery wrapped the body's own exception ``exc``: then it
    returns ``False`` and ``exc`` propagates unwrapped, as if there were no nursery. ``exc``
    counts as one exception even when it is a group itself (the user's own group).
    """
    found: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        item = pending.pop()
        if item is exc:
            found.append(item)
        elif isinstance(item, BaseExceptionGroup):
            pending.extend(item.exceptions)
        elif not isinstance(item, trio.Cancelled):
            found.append(item)
    return found == [exc]


@asynccontextmanager
async def open_nursery_unwrapped() -> AsyncIterator[trio.Nursery]:
    """``trio.open_nursery()`` for a nursery of the library's own, in an ``async with``
    block whose exception must reach the caller as it was raised: when the nursery's group
    holds only that exception (besides cancellations) it propagates unwrapped and
    untouched; any other group propagates as it is."""
    body_error: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            try:
                yield nursery
            except BaseException as exc:
                body_error = exc
                raise
    except BaseExceptionGroup as group:
        if body_error is None or not holds_only(group, body_error):
            raise
    else:
        return
    # Raised outside the except block, so the exception gets no new __context__.
    raise body_error
