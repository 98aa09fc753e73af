"""The "no timeout given" sentinel (sans-IO).

A command's ``timeout`` may be a number of seconds, ``None`` (wait forever) or
:data:`UNSET`: nothing was given, so the client's ``socket_timeout`` applies. The sentinel is
the one member of an enum so that type checkers narrow ``timeout is UNSET`` exactly:
parameters are typed ``float | None | Literal[Unset.UNSET]``.
"""

from __future__ import annotations

import enum
from typing import Final

__all__ = ["UNSET", "Unset"]


class Unset(enum.Enum):
    """The type of :data:`UNSET` (one member)."""

    UNSET = 0

    def __repr__(self) -> str:
        return "<default>"


#: "No timeout given": use the configured one.
UNSET: Final = Unset.UNSET
