"""The public modules (``trio_maint``, ``trio_maint.lowlevel``, ``trio_maint.testing``) say
what they export with ``__all__``: every name listed exists and is documented, and nothing
else public sits in them (``from __future__ import annotations`` once made ``annotations``
a public name of the package)."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import types
from pathlib import Path

import pytest

import trio_maint
import trio_maint.lowlevel
import trio_maint.otel
import trio_maint.prometheus
import trio_maint.testing

MODULES = [
    trio_maint,
    trio_maint.lowlevel,
    trio_maint.testing,
    trio_maint.otel,
    trio_maint.prometheus,
]


def _own_doc(obj: object) -> str | None:
    """The docstring an object was given itself (not one inherited from a base class)."""
    if inspect.isclass(obj):
        doc = obj.__dict__.get("__doc__")
        return doc if isinstance(doc, str) else None
    return inspect.getdoc(obj)


def _source_doc(module: str, name: str, seen: int = 0) -> str | None:
    """The documentation of a module-level value ``name`` in ``module``'s source: a ``#:``
    comment above its assignment or a string right after it (as Sphinx reads them),
    following ``from ... import name`` to the module that assigns it."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None and seen < 5
    source = Path(spec.origin).read_text()
    lines = source.splitlines()
    body = ast.parse(source).body
    for i, node in enumerate(body):
        if isinstance(node, ast.ImportFrom) and any(
            (a.asname or a.name) == name for a in node.names
        ):
            original = next(a.name for a in node.names if (a.asname or a.name) == name)
            package = module if spec.submodule_search_locations else module.rpartition(".")[0]
            target = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            return _source_doc(target, original, seen + 1)
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        if not any(isinstance(t, ast.Name) and t.id == name for t in targets):
            continue
        comments: list[str] = []
        for line in reversed(lines[: node.lineno - 1]):
            if not line.strip().startswith("#:"):
                break
            comments.insert(0, line.strip()[2:].strip())
        if comments:
            return " ".join(comments)
        after = body[i + 1] if i + 1 < len(body) else None
        if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
            return str(after.value.value)
        return None
    return None


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_all_lists_existing_documented_names(module: types.ModuleType) -> None:
    names = module.__all__
    assert len(set(names)) == len(names), "a name listed twice"
    missing = [n for n in names if not hasattr(module, n)]
    assert not missing, f"{module.__name__}.__all__ lists names it lacks: {missing}"
    undocumented = []
    for name in names:
        obj = getattr(module, name)
        if inspect.isclass(obj) or inspect.isroutine(obj):
            doc = _own_doc(obj)
        else:  # a constant or a type alias: documented where it is assigned
            doc = _source_doc(module.__name__, name)
        if not (doc and doc.strip()):
            undocumented.append(name)
    assert not undocumented, f"{module.__name__}: no docstring for {undocumented}"


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_no_stray_public_names(module: types.ModuleType) -> None:
    """Every public name of the module is in ``__all__``, except its submodules (and the
    ``@py_...`` helpers pytest's assertion rewriting adds to the plugin's package)."""
    stray = [
        name
        for name in dir(module)
        if name.isidentifier()
        and not name.startswith("_")
        and name not in module.__all__
        and not (
            isinstance(getattr(module, name), types.ModuleType)
            and getattr(module, name).__name__ == f"{module.__name__}.{name}"
        )
    ]
    assert not stray, f"{module.__name__} has public names outside __all__: {stray}"


def test_the_checks_see_what_they_should() -> None:
    """The helpers find a ``#:`` comment through re-exports, and refuse a missing one."""
    assert _source_doc("trio_maint.testing", "ENDPOINT_TYPES")
    assert _source_doc("trio_maint", "KeyT")
    assert _source_doc("trio_maint", "parse_url") is None  # a function: no ``#:``
    assert _own_doc(trio_maint.RedisError)
    assert _own_doc(type("Bare", (trio_maint.RedisError,), {})) is None
