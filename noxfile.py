"""nox sessions for trio_maint: tests, lint, typecheck."""

from __future__ import annotations

import os
import shutil

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_venv = "yes"
nox.options.sessions = ["tests", "lint", "typecheck"]
nox.options.download_python = "never"


def _require_redis_server(session: nox.Session) -> None:
    """Make sure a redis-server binary can be found, installing Debian's package if we can."""
    if os.environ.get("REDIS_URL") or os.environ.get("REDIS_SERVER"):
        return
    if shutil.which("redis-server"):
        return
    if shutil.which("apt-get") and hasattr(os, "geteuid") and os.geteuid() == 0:
        session.log("redis-server not found: installing Debian's redis-server package")
        session.run("apt-get", "update", "-q", external=True)
        session.run("apt-get", "install", "-y", "-q", "redis-server", external=True)
        return
    session.error(
        "redis-server is not on PATH: install it (Debian/Ubuntu: `sudo apt-get install "
        "redis-server`) or set $REDIS_SERVER to the binary, or $REDIS_URL to a server"
    )


@nox.session(python=None)
def tests(session: nox.Session) -> None:
    """Run the test suite against a real redis-server started by the fixtures."""
    _require_redis_server(session)
    # cli and plot too: the live view and --plot have tests of their own.
    session.install("-e", ".[test,cli,plot]")
    session.run("pytest", *session.posargs, env={"PYTHONDEVMODE": "1"})


@nox.session(python=None)
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=None)
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the package and the tests."""
    session.install("mypy", "-e", ".[test]")
    session.run("mypy", "--strict", "trio_maint", "tests")


@nox.session(python=None, default=False)
def bench(session: nox.Session) -> None:
    """Benchmarks (benchmarks/README.md): trio_maint against redis-py asyncio (hiredis) and
    redis-benchmark, parser, maintenance overhead, handoff storm, memory, cluster, the
    simulator's pass-through against direct redis-benchmark, telemetry, the peers side by
    side (coredis on Trio, valkey-glide, redis-py, bare hiredis loops). Not a default
    session; ``nox -s bench -- --smoke`` for a quick run. redis-py is installed here only."""
    _require_redis_server(session)
    # opentelemetry-sdk and prometheus-client: the telemetry benchmark's exporters.
    # coredis and valkey-glide: bench_peers's peers (here only, never in an extra).
    session.install(
        "-e",
        ".[otel,prometheus]",
        "opentelemetry-sdk",
        "redis[hiredis]>=5.0",
        "pyinstrument",
        "coredis",
    )
    try:
        # A Rust core shipped as wheels for some platforms only: bench_peers skips it
        # (and says so) where it is missing.
        session.install("valkey-glide")
    except nox.command.CommandFailed:
        session.warn("valkey-glide did not install here: the peers benchmark skips it")
    session.run("python", "-m", "benchmarks", *session.posargs)


@nox.session(python=None, default=False)
def demo(session: nox.Session) -> None:
    """``trio-maint demo --speed 10``: a workload rides through a maintenance window on two
    real redis-servers in about 3 s (README quick start; CI runs it once). Plain
    ``trio-maint demo`` runs at its default ``--speed 1``, the real-time timeline: about
    28 s. Arguments after ``--`` replace ``--speed 10``, e.g. ``nox -s demo -- --speed 1``
    or ``nox -s demo -- --cluster``."""
    _require_redis_server(session)
    session.install("-e", ".[cli]")
    args = session.posargs or ["--speed", "10"]
    if not session.posargs:
        session.log("--speed 10: about 3 s (plain 'trio-maint demo' is real time: about 28 s)")
    session.run("trio-maint", "demo", *args)


@nox.session(python=None, default=False)
def docs(session: nox.Session) -> None:
    """Build the Sphinx site in docs/_build with warnings as errors."""
    session.install("-e", ".[docs]")
    session.run("sphinx-build", "-W", "-n", "-b", "html", "docs", "docs/_build")


@nox.session(python=None, default=False)
def fuzz(session: nox.Session) -> None:
    """The robustness tests (docs/robustness.md) at full strength: 10^5 hypothesis examples
    of the reader fuzzer and the parser caps' fuzzer
    (``TRIO_MAINT_FUZZ_EXAMPLES``), scaled-up random cancellation and
    injection loops, and the heavy variants skipped in ``tests``. Takes tens of minutes;
    ``nox -s fuzz -- -k streams`` narrows it, ``TRIO_MAINT_FUZZ_EXAMPLES=2000 nox -s fuzz``
    shortens it."""
    _require_redis_server(session)
    session.install("-e", ".[test]")
    examples = os.environ.get("TRIO_MAINT_FUZZ_EXAMPLES", "100000")
    session.run(
        "pytest",
        "-p",
        "no:randomly",
        "-W",
        "error::ResourceWarning",
        "-o",
        "faulthandler_timeout=10800",  # the 10^5-example test runs for tens of minutes
        "tests/test_robust_reader.py",
        "tests/test_robust_cancel.py",
        "tests/test_robust_faults.py",
        "tests/test_robust_leaks.py",
        "tests/test_bounded_fuzz.py",
        *session.posargs,
        env={"PYTHONDEVMODE": "1", "TRIO_MAINT_FUZZ_EXAMPLES": examples},
    )
