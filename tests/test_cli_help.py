"""``trio-maint --version``, the examples in ``--help``, and the demo options ``--cluster``
refuses (no option is ignored silently). No server is started here."""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib.metadata import version

import pytest

from trio_maint._cli.main import CLUSTER_REFUSES, build_parser, main
from trio_maint._cli.simulate_control import INJECTIONS

TIMEOUT = 60.0


def test_version_from_the_package_metadata(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"trio-maint {version('trio-maint')} (Python ")
    assert "trio " in out and out.count("\n") == 1


def test_version_from_the_command_line() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "trio_maint", "--version"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.startswith(f"trio-maint {version('trio-maint')} ")


def subparser(*command: str) -> argparse.ArgumentParser:
    parser = build_parser()
    for name in command:
        (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return parser


def help_text(*command: str) -> str:
    return subparser(*command).format_help()


@pytest.mark.parametrize(
    ("command", "examples"),
    [
        ((), ["trio-maint demo --speed 10", "trio-maint monitor rediss://", "--log-level info"]),
        (("demo",), ["trio-maint demo --speed 10", "trio-maint demo --cluster --plot"]),
        (("monitor",), ["trio-maint monitor redis://127.0.0.1:7000 --count 3"]),
        (("simulate",), ["trio-maint simulate --listen", "trio-maint simulate ctl scenario"]),
        (("simulate", "ctl"), ["trio-maint simulate ctl --control /tmp/sim.sock scenario"]),
        *(
            (("simulate", "ctl", name), [f"trio-maint simulate ctl {name}"])
            for name in (*INJECTIONS, "scenario", "status")
        ),
    ],
    ids=lambda v: (" ".join(v) or "top") if isinstance(v, tuple) else None,
)
def test_help_has_examples(
    command: tuple[str, ...], examples: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    text = help_text(*command)
    assert "\nexamples" in text
    for example in examples:
        assert example in text, example
    # the examples keep their lines; the descriptions are filled
    assert all(len(line) <= 100 for line in text.splitlines()), text


def test_demo_help_says_the_default_speed_and_how_long(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    text = " ".join(help_text("demo").split())
    assert "default 1, real time: about 28 s; 10: about 3 s" in text
    assert "28 s at the default --speed 1" in text


def test_help_from_the_command_line() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "trio_maint", "demo", "--help"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == 0
    assert "examples:" in result.stdout and "--log-level LEVEL" in result.stdout


@pytest.mark.parametrize(
    "option",
    [
        ["--scenario", "failover"],
        ["--scenario", "moving"],  # the standalone default, given explicitly: still refused
        ["--data-move", "migrate"],
        ["--port", "7000"],
    ],
    ids=lambda o: " ".join(o),
)
def test_cluster_refuses_what_it_cannot_do(
    option: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--cluster", *option])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    name = option[0]
    assert f"trio-maint demo: error: {name} does not apply to --cluster: " in err
    assert CLUSTER_REFUSES[name[2:].replace("-", "_")] in " ".join(err.split())
    assert "Traceback" not in err


def test_cluster_refusal_from_the_command_line() -> None:
    """The case of the issue: exit status 2 and one clear line, not a silent exit 0."""
    result = subprocess.run(
        [sys.executable, "-m", "trio_maint", "demo", "--cluster", "--scenario", "failover"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines()[-1].startswith(
        "trio-maint demo: error: --scenario does not apply to --cluster"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tasks", "0"], "--tasks must be >= 1"),
        (["--tasks", "10", "--keys", "5"], "--keys must be >= --tasks (10), got 5"),
    ],
)
def test_cluster_usage_errors_are_one_line(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--cluster", *args]) == 2
    err = capsys.readouterr().err
    assert err == f"trio-maint: error: {message}\n"


def test_every_demo_option_is_used_or_refused_by_cluster() -> None:
    """A new demo option must be wired into the cluster demo (and added here) or listed
    in CLUSTER_REFUSES with why; ``used`` is what the cluster demo takes."""
    used = {"tasks", "duration", "pool_size", "keys", "mix", "speed", "seed", "json", "plot"}
    used |= {"plain", "cluster", "log_level", "help", "cache", "metrics_port"}
    options = {a.dest for a in subparser("demo")._actions}
    assert options - used - set(CLUSTER_REFUSES) == set()
