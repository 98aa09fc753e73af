"""The retry bookkeeping of a pipeline (sans-IO: no Trio import): which of its commands to
send again, grouped by target in their original order, and the final reply list.

Each command of a pipeline has its own :class:`~trio_maint._sansio.retry.RetryState` (its
own budgets); :class:`PipelineRetry` records what each write produced, asks the policy
about every command, and plans the next round as :class:`ResendGroup` values: one write
per target, ordered by the smallest index, each index ascending, so two commands for one
node are never in flight concurrently and each node sees them in the order they were
queued. A transaction is resent whole or not at all: see
:func:`~trio_maint._sansio.outcome.classify_transaction` and
:class:`~trio_maint._sansio.retry.RetryState`.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Final, TypeVar

import attrs

from .outcome import Outcome, classify
from .retry import Ask, Decision, Finish, Redirect, Retry, RetryPolicy, RetryState, WaitForMoving

__all__ = ["PipelineRetry", "ResendGroup", "group_by_target"]

_C = TypeVar("_C")
_R = TypeVar("_R")
_H = TypeVar("_H", bound=Hashable)


# ----------------------------------------------------------------------------- pipelines


def group_by_target(items: Iterable[tuple[int, _H]]) -> list[tuple[_H, list[int]]]:
    """Group command indexes by target, keeping the original order.

    :param items: ``(index, target)`` pairs (``int``, any hashable: a node name, an
        address, ``None`` for a standalone connection).
    :returns: ``[(target, [indexes...]), ...]``: each index list ascending, one entry per
        target, the entries ordered by their smallest index. Send the groups one after the
        other, each in one write, so two commands for one node are never in flight
        concurrently and each node sees them in the order they were queued.
    :raises ValueError: an index appears twice.
    """
    groups: dict[_H, list[int]] = {}
    seen: set[int] = set()
    for index, target in sorted(items, key=lambda item: item[0]):
        if index in seen:
            raise ValueError(f"index {index} appears twice")
        seen.add(index)
        groups.setdefault(target, []).append(index)
    return list(groups.items())


@attrs.frozen
class ResendGroup:
    """One write of a pipeline's resend round (from :meth:`PipelineRetry.plan`).

    * ``target``: where to send it (the caller's key: a node name, ``None``, ...).
    * ``indexes``: the commands' positions in the pipeline (``tuple[int, ...]``,
      ascending): send them in this order, in one write.
    * ``asking``: per index, whether an ``ASKING`` must precede the command
      (``tuple[bool, ...]``, as Redis Cluster's ASK redirection).
    * ``delay``: seconds to wait before sending (``float``): the longest of the members'.
    * ``refresh``: ask for a lazy slot-map refresh before sending (``bool``).
    """

    target: Hashable
    indexes: tuple[int, ...]
    asking: tuple[bool, ...]
    delay: float
    refresh: bool

    def commands(self, commands: Sequence[_C], asking: _C) -> list[_C]:
        """The commands to write for this group: ``commands[i]`` for each index, each
        preceded by ``asking`` (e.g. ``("ASKING",)``) where required. ``commands`` is the
        whole pipeline's list."""
        out: list[_C] = []
        for index, ask in zip(self.indexes, self.asking, strict=True):
            if ask:
                out.append(asking)
            out.append(commands[index])
        return out

    def replies(self, replies: Sequence[_R]) -> list[_R]:
        """The commands' own replies out of the replies to :meth:`commands` (the
        ``ASKING`` replies dropped). A command's own reply is what tells whether it ran,
        even when its ``ASKING`` failed.

        :raises ValueError: ``replies`` has not one item per written command.
        """
        expected = len(self.indexes) + sum(self.asking)
        if len(replies) != expected:
            raise ValueError(f"expected {expected} replies, got {len(replies)}")
        out: list[_R] = []
        position = 0
        for ask in self.asking:
            if ask:
                position += 1
            out.append(replies[position])
            position += 1
        return out


_PENDING: Final = object()


@attrs.define
class PipelineRetry:
    """The retry bookkeeping of one pipeline (not a transaction: see
    :func:`~trio_maint._sansio.outcome.classify_transaction` for those).

    Constructor: ``PipelineRetry(policy, size, *, deadline=None, watched=False)``; each
    command gets its own :class:`RetryState` (its own budgets).

    The caller's loop (sans-IO: every ``await`` is the caller's)::

        tracker = PipelineRetry(policy, len(commands))
        for target, indexes in group_by_target(first_targets):   # first round
            tracker.record(indexes, <replies, or the exception>, now, written=...)
        while not tracker.done:
            if (grace := tracker.moving_wait()) is not None:      # standalone READONLY
                tracker.resolve_moving(await wait_for_moving(conn, grace), now)
                continue
            for group in tracker.plan(<target of each index in tracker.resends()>):
                await sleep(group.delay)
                ... send group.commands(commands, ("ASKING",)) to group.target ...
                tracker.record(group.indexes, group.replies(got) or the exception, now)
        replies = tracker.results()   # raise tracker.transport_error first, if any

    Attributes: ``policy`` (:class:`RetryPolicy`), ``size`` (``int``), ``deadline``
    (``float`` or ``None``), ``watched`` (``bool``).
    """

    policy: RetryPolicy
    size: int
    deadline: float | None = attrs.field(default=None, kw_only=True)
    watched: bool = attrs.field(default=False, kw_only=True)
    _states: list[RetryState] = attrs.field(init=False)
    _results: list[object] = attrs.field(init=False)
    _waiting: dict[int, tuple[Outcome, bool, float]] = attrs.field(factory=dict, init=False)
    _resend: dict[int, Retry | Redirect | Ask] = attrs.field(factory=dict, init=False)
    _in_flight: set[int] = attrs.field(init=False)
    _raised: dict[int, BaseException] = attrs.field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 0:
            raise ValueError(f"size must be an int >= 0, got {self.size!r}")
        self._states = [
            RetryState(self.policy, deadline=self.deadline, watched=self.watched)
            for _ in range(self.size)
        ]
        self._results = [_PENDING] * self.size
        self._in_flight = set(range(self.size))

    def state(self, index: int) -> RetryState:
        """The :class:`RetryState` of command ``index`` (``int``)."""
        return self._states[index]

    def record(
        self,
        indexes: Sequence[int],
        results: Sequence[object] | BaseException,
        now: float,
        *,
        written: bool | None = None,
        moving: bool | None = None,
        replica: bool = False,
    ) -> None:
        """Record what one write of the pipeline produced and decide each command's fate.

        :param indexes: the commands sent in that write, in order (``Sequence[int]``); each
            must be in flight (sent in the first round, or planned by :meth:`plan`).
        :param results: their replies, one per index (error replies as values; ``ASKING``
            replies already dropped), or the exception the write or read raised, which
            then stands for every index.
        :param now: the caller's clock, in seconds (``float``).
        :param written: with an exception: whether any byte may have been accepted
            (``bool``); default ``None``: the exception's own ``written`` flag, ``True``
            (nothing is resent) when it has none; see
            :func:`~trio_maint._sansio.outcome.classify`.
        :param moving: passed to :meth:`RetryState.decide` for ``READONLY`` replies.
        :param replica: the write went to a replica (``bool``).
        :raises ValueError: an index is not in flight, or ``results`` has the wrong length.
        """
        if isinstance(results, BaseException):
            outcome = classify(results, written=written)
            outcomes = [outcome] * len(indexes)
            raised: BaseException | None = results
        else:
            if len(results) != len(indexes):
                raise ValueError(f"{len(indexes)} indexes but {len(results)} results")
            outcomes = [classify(r) for r in results]
            raised = None
        if len(set(indexes)) != len(indexes):
            raise ValueError("an index appears twice")
        for index in indexes:
            if index not in self._in_flight:
                raise ValueError(f"command {index} is not in flight")
        for index, outcome in zip(indexes, outcomes, strict=True):
            self._in_flight.discard(index)
            decision = self._states[index].decide(outcome, now, moving=moving, replica=replica)
            self._apply(index, outcome, decision, raised, replica)

    def _apply(
        self,
        index: int,
        outcome: Outcome,
        decision: Decision,
        raised: BaseException | None,
        replica: bool,
    ) -> None:
        if isinstance(decision, Finish):
            self._results[index] = outcome.value
            if raised is not None:
                self._raised[index] = raised
        elif isinstance(decision, WaitForMoving):
            self._waiting[index] = (outcome, replica, decision.timeout)
        else:
            self._resend[index] = decision

    def moving_wait(self) -> float | None:
        """Seconds to wait for a MOVING before :meth:`resolve_moving` (``float``, the
        longest asked), or ``None`` when no command waits for one."""
        if not self._waiting:
            return None
        return max(timeout for _outcome, _replica, timeout in self._waiting.values())

    def resolve_moving(self, moving: bool, now: float) -> None:
        """Decide again the commands refused with ``READONLY`` that waited for a MOVING.

        :param moving: whether the endpoint is moving (``bool``), as the wait found.
        :param now: the caller's clock, in seconds (``float``).
        """
        waiting, self._waiting = self._waiting, {}
        for index in sorted(waiting):
            outcome, replica, _timeout = waiting[index]
            decision = self._states[index].decide(outcome, now, moving=moving, replica=replica)
            self._apply(index, outcome, decision, None, replica)

    def resends(self) -> list[tuple[int, Retry | Redirect | Ask]]:
        """The commands to send again and why, ascending by index
        (``list[tuple[int, Decision]]``). Apply each :class:`Redirect` to the slot map
        before routing the :class:`Retry` ones, then give :meth:`plan` their targets."""
        return sorted(self._resend.items(), key=lambda item: item[0])

    def plan(self, targets: Mapping[int, Hashable] | None = None) -> list[ResendGroup]:
        """Group the pending resends into writes, in the pipeline's order.

        :param targets: the target of each index of :meth:`resends` (any hashable: a node
            name, an address), or ``None`` for a standalone client (one target, ``None``).
        :returns: ``list[ResendGroup]``, one per target, ordered by smallest index, each
            index ascending. Send them one after the other (never two at once for one
            node), then :meth:`record` each. The planned commands are now in flight.
        :raises RuntimeError: commands still wait for a MOVING (call :meth:`resolve_moving`
            first).
        :raises ValueError: ``targets`` does not cover exactly the pending resends.
        """
        if self._waiting:
            raise RuntimeError("commands wait for a MOVING: call resolve_moving() first")
        pending = self._resend
        if targets is None:
            targets = dict.fromkeys(pending)
        if set(targets) != set(pending):
            raise ValueError("targets must name exactly the indexes of resends()")
        groups: list[ResendGroup] = []
        for target, indexes in group_by_target((i, targets[i]) for i in pending):
            decisions = [pending[i] for i in indexes]
            groups.append(
                ResendGroup(
                    target=target,
                    indexes=tuple(indexes),
                    asking=tuple(isinstance(d, Ask) for d in decisions),
                    delay=max(d.delay for d in decisions),
                    refresh=any(d.refresh for d in decisions),
                )
            )
        self._in_flight.update(pending)
        self._resend = {}
        return groups

    @property
    def done(self) -> bool:
        """``True`` when every command's outcome is final (``bool``)."""
        return all(result is not _PENDING for result in self._results) and not (
            self._waiting or self._resend or self._in_flight
        )

    @property
    def transport_error(self) -> BaseException | None:
        """The first (by index) exception that ended a command, not an error reply: a
        connection lost after the write, a timeout, or a failure that exhausted the time
        budget; ``None`` if none. A pipeline raises it, as redis-py does."""
        if not self._raised:
            return None
        return self._raised[min(self._raised)]

    def results(self) -> list[object]:
        """The final list, one item per command in the pipeline's order: each reply, or
        its error (error replies and transport errors as values).

        :raises RuntimeError: not :attr:`done` yet.
        """
        if not self.done:
            raise RuntimeError("the pipeline still has commands to send or record")
        return list(self._results)
