"""The command methods' names kept where they were imported before the command surface was
generated: :class:`ClientCommands`, :class:`PipelineCommands` and the argument types now
live in :mod:`trio_maint._sansio.cmds`."""

from __future__ import annotations

from .cmds import ClientCommands, EncodableT, KeyT, PipelineCommands, Value

__all__ = ["ClientCommands", "EncodableT", "KeyT", "PipelineCommands", "Value"]
