"""Golden RESP3 payloads of every maintenance notification and its variants.

They are shipped as package data (``trio_maint/testing/golden/*.resp``, one raw frame per
file, described in ``golden/index.json``). The bytes were written by hand from the wire
formats (docs/maintenance.md), not produced by :mod:`._frames`, so tests can check the
builder, the simulator and the client's parser against them.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

import attrs

__all__ = ["GoldenPayload", "golden_payload", "golden_payloads"]


@attrs.frozen
class GoldenPayload:
    """One golden frame.

    :ivar name: its name, e.g. ``"moving_null_resp3"``.
    :ivar data: the raw RESP3 bytes (``bytes``), one push frame.
    :ivar decoded: what it decodes to with texts as ``str``: a ``list`` of ``str``, ``int``,
        ``None`` and nested lists (JSON-compatible).
    :ivar description: what variant it is.
    """

    name: str
    data: bytes
    decoded: list[Any]
    description: str


@cache
def golden_payloads() -> dict[str, GoldenPayload]:
    """All golden payloads by name (a new ``dict`` is not made per call: do not mutate it).

    :raises FileNotFoundError: the package data is missing (a broken installation).
    """
    root = resources.files("trio_maint.testing").joinpath("golden")
    index = json.loads(root.joinpath("index.json").read_text(encoding="utf-8"))
    return {
        name: GoldenPayload(
            name=name,
            data=root.joinpath(entry["file"]).read_bytes(),
            decoded=entry["decoded"],
            description=entry["description"],
        )
        for name, entry in index.items()
    }


def golden_payload(name: str) -> bytes:
    """The raw bytes of the golden payload ``name``.

    :raises KeyError: no such payload (see :func:`golden_payloads` for the names).
    """
    return golden_payloads()[name].data
