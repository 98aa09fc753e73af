"""The two bases of the generated command mixins: what every class that uses them provides
(``_command``, the one primitive, and ``_blocking_timeout``)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Literal, Self

from ..blocking import TimeUnit
from ..replies import Callback
from ..resp import CommandArg
from ..unset import Unset

__all__ = ["ClientBase", "PipelineBase"]


class ClientBase:
    """Base of the client mixin: each command method returns ``self._command(...)``, an
    awaitable of the reply."""

    def _command(
        self,
        args: tuple[CommandArg, ...],
        callback: Callback | None = None,
        *,
        timeout: float | Literal[Unset.UNSET] | None = Unset.UNSET,
    ) -> Awaitable[Any]:
        raise NotImplementedError

    def _blocking_timeout(self, timeout: float | None, unit: TimeUnit = "s") -> float | None:
        raise NotImplementedError


class PipelineBase:
    """Base of the pipeline mixin: each command method queues the command and returns the
    pipeline."""

    def _command(
        self,
        args: tuple[CommandArg, ...],
        callback: Callback | None = None,
        *,
        timeout: float | Literal[Unset.UNSET] | None = Unset.UNSET,
    ) -> Self:
        raise NotImplementedError

    def _blocking_timeout(self, timeout: float | None, unit: TimeUnit = "s") -> float | None:
        raise NotImplementedError
