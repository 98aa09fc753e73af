"""The package layout (docs/architecture.md): the sans-IO layer imports no Trio, no module
grows past 650 lines, and imports only point down the layers."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import trio_maint
import trio_maint.testing

PACKAGE = Path(trio_maint.__file__).parent
ROOT = PACKAGE.parent
MAX_LINES = 650

#: What each layer may import from trio_maint, besides itself. "api" is the public API
#: (``trio_maint``, ``trio_maint.lowlevel`` and the optional exporters ``trio_maint.otel``
#: and ``trio_maint.prometheus``, over the ``_telemetry`` shell).
ALLOWED: dict[str, set[str]] = {
    "_sansio": set(),
    "_net": {"_sansio"},
    "_maint": {"_sansio", "_net"},
    "_client": {"_sansio", "_net", "_maint"},
    "_cluster": {"_sansio", "_net", "_maint", "_client"},
    "_telemetry": {"_sansio", "_net", "_maint", "_client", "_cluster"},
    "api": {"_sansio", "_net", "_maint", "_client", "_cluster", "_telemetry"},
    "testing": {"_sansio", "api"},
    "_cli": {"api", "testing"},
}
#: Single modules a layer may import outside the table: the exception-group helper, the
#: one place that unwraps the groups of trio_maint's own nurseries.
EXTRA: dict[str, set[str]] = {
    "testing": {"trio_maint._net.groups"},
    "_cli": {"trio_maint._net.groups"},
    "__main__": {"trio_maint._cli.main"},
}


def _modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found.append((".".join(parts), path))
    return found


def _layer(module: str) -> str:
    parts = module.split(".")
    if module in ("trio_maint", "trio_maint.lowlevel", "trio_maint.otel", "trio_maint.prometheus"):
        return "api"
    if module == "trio_maint.__main__":
        return "__main__"
    return parts[1]


def _imports(module: str, path: Path) -> list[str]:
    """Every trio_maint module ``module`` imports (relative imports resolved)."""
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "trio_maint"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target.split(".")[0] != "trio_maint":
                continue
            if target in ("trio_maint", "trio_maint.testing") or not node.module:
                # ``from .. import x`` may name a submodule as well as an attribute.
                submodules = [f"{target}.{a.name}" for a in node.names]
                found += [m for m in submodules if _is_module(m)] or [target]
            else:
                found.append(target)
    return found


def _is_module(name: str) -> bool:
    relative = Path(*name.split("."))
    return (ROOT / relative).with_suffix(".py").exists() or (ROOT / relative).is_dir()


def _allowed(importer: str, imported: str) -> bool:
    layer = _layer(importer)
    if imported in EXTRA.get(layer, ()):
        return True
    target = _layer(imported)
    return target == layer or target in ALLOWED.get(layer, set())


def test_sansio_never_imports_trio() -> None:
    """Every module of ``_sansio`` imports without Trio (in a fresh interpreter, with a bare
    ``trio_maint`` package so that its ``__init__`` does not pull the other layers in)."""
    names = sorted(
        f"trio_maint._sansio.{p.stem}"
        for p in (PACKAGE / "_sansio").glob("*.py")
        if p.stem != "__init__"
    )
    assert names
    script = textwrap.dedent(
        f"""
        import importlib, sys, types
        package = types.ModuleType("trio_maint")
        package.__path__ = [{str(PACKAGE)!r}]
        sys.modules["trio_maint"] = package
        for name in {names!r}:
            importlib.import_module(name)
            assert "trio" not in sys.modules, f"{{name}} imported trio"
        print("ok", len({names!r}))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok")


@pytest.mark.parametrize(("module", "path"), _modules(), ids=[m for m, _ in _modules()])
def test_module_size(module: str, path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{module} has {lines} lines (at most {MAX_LINES})"


def test_imports_point_down() -> None:
    wrong = [
        f"{module} imports {imported}"
        for module, path in _modules()
        for imported in _imports(module, path)
        if not _allowed(module, imported)
    ]
    assert not wrong, "\n".join(wrong)


def test_the_rule_is_checked() -> None:
    """The checker itself: a lower layer importing a higher one is refused."""
    assert not _allowed("trio_maint._net.pool", "trio_maint._maint.handler")
    assert not _allowed("trio_maint._sansio.resp", "trio_maint._net.connection")
    assert not _allowed("trio_maint.testing._simulator", "trio_maint._net.connection")
    assert not _allowed("trio_maint._cli.demo", "trio_maint._client.redis")
    assert _allowed("trio_maint._cluster.client", "trio_maint._client.redis")
    assert _allowed("trio_maint._cli.demo", "trio_maint.testing")
    assert _allowed("trio_maint.testing._proxy", "trio_maint._net.groups")
    imports = _imports("trio_maint._cli.demo", PACKAGE / "_cli" / "demo.py")
    assert "trio_maint" in imports and "trio_maint.testing" in imports


def test_public_api() -> None:
    """The user API is flat in ``trio_maint``; the advanced names are in ``lowlevel`` only."""
    import trio_maint.lowlevel

    assert set(trio_maint.__all__) <= set(dir(trio_maint))
    assert "annotations" not in dir(trio_maint)
    assert "annotations" not in dir(trio_maint.lowlevel)
    for name in trio_maint.lowlevel.__all__:
        assert hasattr(trio_maint.lowlevel, name)
        assert name not in trio_maint.__all__
        assert not hasattr(trio_maint, name), name
    # The test cluster no longer shares its name with the client class.
    assert "LocalCluster" in trio_maint.testing.__all__
    assert not hasattr(trio_maint.testing, "RedisCluster")
