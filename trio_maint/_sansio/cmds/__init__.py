"""The command methods (sans-IO): generated from the server's command table by
``tools/gen_commands.py`` (the ``g_*`` modules and ``mixins``), with hand-written argument
builders (``builders``, ``builders_z``), reply callbacks (``callbacks``) and types
(``types``).

:class:`ClientCommands` is mixed into :class:`~trio_maint.Redis` and
:class:`~trio_maint.RedisCluster` (each method returns an awaitable of the reply);
:class:`PipelineCommands` into :class:`~trio_maint.Pipeline` and
:class:`~trio_maint.ClusterPipeline` (each method queues the command and returns the
pipeline). docs/commands.md lists every method.
"""

from __future__ import annotations

from .mixins import ClientCommands, PipelineCommands
from .types import EncodableT, KeyT, Value

__all__ = ["ClientCommands", "EncodableT", "KeyT", "PipelineCommands", "Value"]
