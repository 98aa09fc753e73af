"""The code blocks of README.md and docs/*.md run: every ``python`` block is a complete
program run here, against throwaway servers, unless it is marked as not run; shell blocks
run when marked so. README.md ("Running the tests") states the convention:

* ``<!-- not-run: reason -->`` on the line before a fence: the block is not run (a
  fragment, a program for a server of your own, a command for your shell). A ``python``
  block marked so must still compile (top-level ``await`` allowed).
* ``<!-- run -->`` before a ``sh``/``console`` block: run it (``sh -e``, the venv's
  ``trio-maint`` on PATH). Every shell or other code block carries one of the two markers.
* ``<!-- output -->`` before a block (```` ```text ````): the expected standard output of
  the block before it, compared as doctest does (``...`` matches anything, runs of
  whitespace are equal).
* In a block that runs, ``localhost:6379`` and ``127.0.0.1:6379`` name a throwaway
  ``redis-server`` (a new one per block) and ``localhost:7000`` / ``127.0.0.1:7000`` a
  throwaway 3-master cluster (one per module, flushed before each block); any other
  mention of ``localhost`` or ``127.0.0.1`` fails the test, so that no example reaches a
  server that happens to listen there. A block that defines ``test_*`` functions is run
  by pytest, with the ``trio_maint`` plugin's fixtures.
"""

from __future__ import annotations

import ast
import doctest
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from trio_maint.testing import LocalCluster, RedisServer

ROOT = Path(__file__).resolve().parent.parent
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = frozenset({"sh", "console", "bash", "shell"})
#: Languages of code blocks: each runs or is marked not run.
CODE = frozenset({"python", "js", "javascript", *SHELL})
#: Blocks that are not code: output listings, diagrams, Sphinx directives (``{...}``).
NOT_CODE = frozenset({"", "text"})
STANDALONE = ("localhost:6379", "127.0.0.1:6379")
CLUSTER = ("localhost:7000", "127.0.0.1:7000")
#: Seconds one block may take (a few take 1-3 s; a loaded machine is slower).
TIMEOUT = 90.0
MARKER = re.compile(r"<!--\s*(?P<kind>not-run|run|output)\s*(?::(?P<reason>.*?))?\s*-->", re.S)


@dataclass
class Block:
    """One fenced block of a Markdown file."""

    path: Path
    line: int  #: 1-based line of the opening fence
    lang: str
    code: str
    marker: str = ""  #: "", "run", "not-run" or "output"
    reason: str = ""
    output: str | None = None  #: the expected stdout, from an ``output`` block after it

    @property
    def name(self) -> str:
        return f"{self.path.name}:{self.line}"

    @property
    def runs(self) -> bool:
        if self.marker in ("not-run", "output") or self.lang not in CODE:
            return False
        return self.lang == "python" or self.marker == "run"


def parse(text: str, path: Path) -> tuple[list[Block], list[str]]:
    """The fenced blocks of ``text`` with their markers, and the convention's violations."""
    blocks: list[Block] = []
    problems: list[str] = []
    marker: tuple[re.Match[str], int] | None = None
    for token in MarkdownIt("commonmark").parse(text):
        if token.type == "html_block" and token.map is not None:
            match = MARKER.fullmatch(token.content.strip())
            if match:
                marker = (match, token.map[1])
            continue
        if token.type != "fence" or token.map is None:
            if marker is not None and token.map is not None:
                problems.append(f"{path.name}:{marker[1]}: a marker not followed by a fence")
                marker = None
            continue
        lang = token.info.split()[0] if token.info.strip() else ""
        block = Block(path, token.map[0] + 1, lang, token.content)
        if marker is not None:
            match, end = marker
            marker = None
            if end != token.map[0]:
                problems.append(f"{block.name}: the marker must be on the line before the fence")
            block.marker = match["kind"]
            block.reason = (match["reason"] or "").strip()
            if block.marker == "not-run" and not block.reason:
                problems.append(f"{block.name}: not-run needs a reason (not-run: why)")
            if block.marker == "output":
                if not blocks or not blocks[-1].runs:
                    problems.append(f"{block.name}: output of a block that does not run")
                else:
                    blocks[-1].output = block.code
        if lang.startswith("{") or lang in NOT_CODE:
            if block.marker in ("run", "not-run"):
                problems.append(f"{block.name}: {block.marker} on a block that is not code")
        elif lang not in CODE:
            problems.append(f"{block.name}: unknown language {lang!r} (mark it or teach me)")
        elif lang != "python" and not block.marker:
            problems.append(f"{block.name}: a {lang} block needs <!-- run --> or not-run")
        elif lang not in SHELL and block.marker == "run":
            problems.append(f"{block.name}: <!-- run --> is for shell blocks")
        blocks.append(block)
    if marker is not None:
        problems.append(f"{path.name}:{marker[1]}: a marker at the end of the file")
    return blocks, problems


def _all_blocks() -> list[Block]:
    return [b for path in FILES for b in parse(path.read_text(), path)[0]]


BLOCKS = _all_blocks()


def test_markers_follow_the_convention() -> None:
    problems = [p for path in FILES for p in parse(path.read_text(), path)[1]]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "block",
    [b for b in BLOCKS if b.lang == "python" and not b.runs],
    ids=lambda b: b.name,
)
def test_python_not_run_compiles(block: Block) -> None:
    """A ``python`` block that is not run is still Python (fragments may ``await``);
    pseudo-code and listings go in ``text`` blocks."""
    compile(block.code, block.name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


def test_the_parser() -> None:
    doc = "\n".join(
        [
            "```python",
            "print(1)",
            "```",
            "<!-- output -->",
            "```text",
            "1",
            "```",
            "",
            "<!-- not-run: a fragment -->",
            "```python",
            "await x",
            "```",
            "```sh",
            "ls",
            "```",
            "<!-- run -->",
            "",
            "```sh",
            "true",
            "```",
            "<!-- not-run -->",
            "```js",
            "```",
            "```ruby",
            "```",
        ]
    )
    blocks, problems = parse(doc, Path("x.md"))
    assert [(b.line, b.lang, b.marker, b.runs) for b in blocks] == [
        (1, "python", "", True),
        (5, "text", "output", False),
        (10, "python", "not-run", False),
        (13, "sh", "", False),
        (18, "sh", "run", True),
        (22, "js", "not-run", False),
        (24, "ruby", "", False),
    ]
    assert blocks[0].output == "1\n" and blocks[2].reason == "a fragment"
    assert problems == [
        "x.md:13: a sh block needs <!-- run --> or not-run",
        "x.md:18: the marker must be on the line before the fence",
        "x.md:22: not-run needs a reason (not-run: why)",
        "x.md:24: unknown language 'ruby' (mark it or teach me)",
    ]


# ---------------------------------------------------------------------------- running


def _flushall(address: tuple[str, int]) -> None:
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(b"*1\r\n$8\r\nFLUSHALL\r\n")
        reply = sock.recv(64)
    assert reply.startswith((b"+OK", b"-READONLY")), reply


@pytest.fixture(scope="module")
def docs_cluster() -> Iterator[LocalCluster]:
    """A throwaway cluster for the blocks that name ``localhost:7000``."""
    with LocalCluster(masters=3, replicas=0) as cluster:
        yield cluster


def _run(args: list[str], cwd: Path, stdin: str | None = None) -> tuple[int, str, str]:
    """Run ``args`` in a session of its own, the interpreter's scripts (``trio-maint``)
    first on PATH; on timeout the whole session (servers it started included) is ended."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    proc = subprocess.Popen(
        args,
        cwd=cwd,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "PATH": path},
    )
    try:
        out, err = proc.communicate(stdin, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        out = err = ""
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, None)):
            try:
                os.killpg(proc.pid, sig)
                out, err = proc.communicate(timeout=wait)
                break
            except (ProcessLookupError, subprocess.TimeoutExpired):
                continue
        pytest.fail(f"timed out after {TIMEOUT} s:\n{out}\n{err}")
    return proc.returncode, out, err


def _defines_tests(code: str) -> bool:
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")
        for node in ast.parse(code).body
    )


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.runs], ids=lambda b: b.name)
def test_block_runs(block: Block, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    _run_block(block, tmp_path, request)


def test_the_runner(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A shell block runs with the venv's scripts on PATH and the address swapped; wrong
    output, a failing program and a local address not swapped fail."""
    doc = "\n".join(
        [
            "<!-- run -->",
            "```sh",
            ".venv/bin/trio-maint --help > /dev/null",
            "echo redis://localhost:6379",
            "```",
            "<!-- output -->",
            "```text",
            "redis://localhost:6379",
            "```",
            "```python",
            "print('a', 1)",
            "```",
            "<!-- output -->",
            "```text",
            "a 2",
            "```",
            "```python",
            "raise SystemExit(3)",
            "```",
            "```python",
            "print('redis://localhost')  # the default port: maybe a real server",
            "```",
        ]
    )
    shell, _, wrong, _, failing, stray = parse(doc, tmp_path / "x.md")[0]
    assert ":6379" not in _run_block(shell, tmp_path, request)
    with pytest.raises(AssertionError, match=r"The docs show:\s+a 2"):
        _run_block(wrong, tmp_path, request)
    with pytest.raises(AssertionError, match="exited with 3"):
        _run_block(failing, tmp_path, request)
    with pytest.raises(AssertionError, match="write local addresses as"):
        _run_block(stray, tmp_path, request)


def _run_block(block: Block, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """Run ``block`` against throwaway servers and check its output; returns the code run."""
    code = block.code
    ports: dict[int, int] = {}  # the throwaway port -> the port the docs show
    with RedisServer() as server:
        for address in STANDALONE:
            host, _, port = address.partition(":")
            code = code.replace(address, f"{host}:{server.port}")
            ports[server.port] = int(port)
        if any(address in code for address in CLUSTER):
            cluster: LocalCluster = request.getfixturevalue("docs_cluster")
            for master in cluster.masters:
                _flushall((master.host, master.port))
            seed = cluster.nodes[0].port
            for address in CLUSTER:
                host, _, port = address.partition(":")
                code = code.replace(address, f"{host}:{seed}")
                ports[seed] = int(port)
        stray = re.search(rf"(localhost|127\.0\.0\.1)(?!:({'|'.join(map(str, ports))})\b)", code)
        assert stray is None, f"{block.name}: write local addresses as {STANDALONE + CLUSTER}"
        stem = re.sub(r"\W", "_", block.path.stem)
        if block.lang in SHELL:
            code = code.replace(".venv/bin/", "")
            rc, out, err = _run(["sh", "-e"], tmp_path, stdin=code)
        elif _defines_tests(code):
            script = tmp_path / f"test_{stem}_{block.line}.py"
            script.write_text(code)
            args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error", script.name]
            rc, out, err = _run([sys.executable, *args], tmp_path)
        else:
            script = tmp_path / f"{stem}_{block.line}.py"
            script.write_text(code)
            rc, out, err = _run([sys.executable, "-W", "error", script.name], tmp_path)
    assert rc == 0, f"{block.name} exited with {rc}:\n{out}\n{err}"
    if block.output is not None:
        for real, shown in ports.items():
            out = out.replace(f":{real}", f":{shown}")
        flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
        checker = doctest.OutputChecker()
        assert checker.check_output(block.output, out, flags), (
            f"{block.name} printed:\n{out}\nThe docs show:\n{block.output}"
        )
    return code
