"""No secret in any message (issue 13, item 2): a password never appears in an exception
(its text, repr or traceback), a log record, a repr or the CLI's output, and an argument
that cannot be encoded is described by position, type and length, never by value."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import traceback
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
import trio

import trio_maint
from trio_maint import (
    AuthenticationError,
    ClientOptions,
    DataError,
    parse_url,
    redact_text,
    redact_url,
)
from trio_maint._cli.main import main
from trio_maint.lowlevel import encode_command

from ._fakeserver import Action, Err, FakeConnection, open_fake_server, push, resp

PW = "Pw-s3cr3t-7"
#: Pieces of the password that must not appear either (a message cut at '/' or ':').
PIECES = (PW, "s3cr3t")
TIMEOUT = 10.0


def _kw(field: str, value: object) -> dict[str, Any]:
    return {field: value}


def assert_no_secret(*texts: object) -> None:
    for text in texts:
        for piece in PIECES:
            assert piece not in str(text), f"{piece!r} leaked in {text!r}"


def exception_texts(exc: BaseException) -> Iterator[str]:
    """What a user or a log may see of ``exc``: its text, repr and full traceback
    (causes and contexts included)."""
    yield str(exc)
    yield repr(exc)
    yield "".join(traceback.format_exception(exc))
    yield from getattr(exc, "__notes__", ())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ------------------------------------------------------------------------ redact_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"redis://u:{PW}@h:6379/0", "redis://u:***@h:6379/0"),
        (f"redis://:{PW}@h", "redis://:***@h"),
        (f"rediss://u:{PW}@[::1]:6380/2", "rediss://u:***@[::1]:6380/2"),
        (f"redis://u:{PW}@h/0?timeout=1", "redis://u:***@h/0?timeout=***"),
        (
            f"redis://h/0?password={PW}&socket_timeout=1&db=2",
            "redis://h/0?password=***&socket_timeout=1&db=2",
        ),
        (f"redis://h/0?pasword={PW}", "redis://h/0?pasword=***"),
        (f"redis://u:{PW.replace('-', '/')}@h/0", "redis://u:***@h/0"),  # '/' unencoded
        (f"redis://u:p?{PW}@h", "redis://u:***@h"),  # '?' unencoded
        (f"redis://u:{PW}#x@h", "redis://u:***@h"),  # '#' unencoded
        (f"redis://u:a@{PW}@h", "redis://u:***@h"),  # '@' unencoded
        (f"redis://u:{PW}", "redis://u:***"),  # no "@host": the "port" is the password
        (f"redis://[::1]:{PW}", "redis://[::1]:***"),
        (f"unix://u:{PW}@/tmp/r.sock?db=1", "unix://u:***@/tmp/r.sock?db=1"),
        ("redis://localhost:6379/0?socket_timeout=2", "redis://localhost:6379/0?socket_timeout=2"),
        (f"u:{PW}@h:6379", "u:***@h:6379"),  # no scheme
        (f"redis://h/0#{PW}", "redis://h/0#***"),
        (f"redis://h/0?{PW}", "redis://h/0?***"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert_no_secret(shown)


def test_redact_url_of_a_non_str_names_its_type() -> None:
    assert redact_url(b"redis://u:pw@h") == "<bytes>"


def test_redact_text_finds_every_url() -> None:
    text = f"a redis://u:{PW}@h/0 and 'rediss://x:{PW}@y:1' then unix://:{PW}@/s"
    assert redact_text(text) == "a redis://u:***@h/0 and 'rediss://x:***@y:1' then unix://:***@/s"


# ----------------------------------------------------------------- URL and option errors

BAD_URLS = [
    f"redis://u:{PW}@h/0?timeout=1",  # unknown query parameter
    f"redis://u:{PW}@h:notaport/0",  # bad port
    f"redis://u:{PW}@h:99999/0",  # port out of range
    f"redis://u:{PW}@h/notanumber",  # bad database
    f"unix://u:{PW}@",  # no socket path
    f"http://u:{PW}@h",  # bad scheme
    f"redis://u:{PW.replace('-', '/')}@h/0",  # '/' in the password, unencoded
    f"redis://u:x?{PW}@h/0",  # '?' in the password, unencoded
    f"redis://:{PW}",  # '@host' forgotten: the password is taken for a port
    f"redis://h/0?password={PW}&bogus=1",
    f"redis://h/0?pasword={PW}",  # a typo of a parameter
    f"redis://u:{PW}@h/0?decode_responses=maybe",
    f"redis://u:{PW}@h/0?socket_timeout=1e400",
    f"redis://u:{PW}@h/0?client_name=a%0Ab",
]


@pytest.mark.parametrize("url", BAD_URLS)
def test_url_errors_never_show_the_password(url: str) -> None:
    with pytest.raises(ValueError) as info:
        ClientOptions.from_url(url)
    assert_no_secret(*exception_texts(info.value))


def test_url_errors_show_the_redacted_url() -> None:
    with pytest.raises(ValueError, match=r"'timeout' in redis://u:\*\*\*@h/0\?timeout=\*\*\*"):
        parse_url(f"redis://u:{PW}@h/0?timeout=1")
    with pytest.raises(ValueError, match=r"invalid port in Redis URL redis://u:\*\*\*@h:\*\*\*"):
        parse_url(f"redis://u:{PW}@h:notaport/0")
    with pytest.raises(ValueError, match="percent-encode"):
        parse_url(f"redis://u:x/{PW}@h/0")


def test_a_percent_encoded_password_still_parses() -> None:
    assert parse_url("redis://u:a%2Fb%3Fc%23d%40e@h/0")["password"] == "a/b?c#d@e"
    assert parse_url("unix:///tmp/a@b.sock")["unix_path"] == "/tmp/a@b.sock"


@pytest.mark.trio
@pytest.mark.parametrize("url", BAD_URLS[:4])
async def test_open_redis_and_cluster_errors_never_show_the_password(url: str) -> None:
    with pytest.raises(ValueError) as info:
        async with trio_maint.open_redis(url):
            pass  # pragma: no cover
    assert_no_secret(*exception_texts(info.value))
    with pytest.raises(ValueError) as info:
        async with trio_maint.open_redis_cluster(url):
            pass  # pragma: no cover
    assert_no_secret(*exception_texts(info.value))


@pytest.mark.trio
async def test_a_cluster_startup_node_with_credentials_is_not_quoted() -> None:
    with pytest.raises(ValueError) as info:
        async with trio_maint.open_redis_cluster([f"u:{PW}@h:x:1"]):
            pass  # pragma: no cover
    assert_no_secret(*exception_texts(info.value))
    assert "u:***@" in str(info.value)


@pytest.mark.parametrize("field", ["username", "password", "client_name"])
def test_an_unencodable_credential_is_refused_without_its_value(field: str) -> None:
    with pytest.raises(ValueError, match=field) as info:
        ClientOptions(**_kw(field, PW + "\udcff"))
    assert_no_secret(*exception_texts(info.value))


# ----------------------------------------------------------------------------- reprs


def test_client_options_repr_hides_the_password() -> None:
    opts = ClientOptions.from_url(f"redis://u:{PW}@h/0?client_name=app")
    assert opts.password == PW
    assert_no_secret(repr(opts), str(opts), repr(attrs.evolve(opts, db=3)))
    assert "password='***'" in repr(opts)
    assert "password=None" in repr(ClientOptions())
    assert "username='u'" in repr(opts)


@pytest.mark.trio
async def test_client_repr_hides_the_password() -> None:
    async with open_fake_server() as srv:
        url = f"redis://u:{PW}@{srv.name}/0"
        async with trio_maint.open_redis(url) as r:
            assert await r.ping() is True
            assert_no_secret(repr(r), repr(r.options), repr(r.pool), r.maintenance.state)


# -------------------------------------------------------------- argument-encoding errors


def test_an_unencodable_hello_shows_no_argument() -> None:
    """The issue's case: a lone surrogate in ``HELLO 3 AUTH user password SETNAME name``."""
    with pytest.raises(DataError) as info:
        encode_command(("HELLO", 3, "AUTH", "someuser", PW, "SETNAME", "bad\udcffname"))
    error = info.value
    assert str(error).startswith("command argument 6 of HELLO (str of 8 characters)")
    assert error.__cause__ is None and error.__context__ is None
    assert_no_secret(*exception_texts(error))
    for text in (str(error), repr(error)):  # (a traceback quotes this file's source)
        assert "someuser" not in text and "bad" not in text and "AUTH" not in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("AUTH", "someuser", PW, None), "command argument 3 of AUTH: NoneType"),
        (("AUTH", PW + "\udcff"), "command argument 1 of AUTH (str of 12 characters)"),
        (("CONFIG", "SET", "requirepass", [PW]), "command argument 3 of CONFIG: list"),
        ((b"MIGRATE", "h", 1, "", 0, 5, "AUTH", PW, True), "command argument 8 of MIGRATE: bool"),
        ((PW + "\udcff",), "command argument 0 (str of 12 characters)"),
        ((bytearray(PW.encode()), "x"), "command argument 0: bytearray of 11 bytes"),
    ],
)
def test_encoding_errors_name_position_and_type_only(
    args: tuple[object, ...], message: str
) -> None:
    with pytest.raises(DataError) as info:
        encode_command(args)  # type: ignore[arg-type]
    assert message in str(info.value)
    assert_no_secret(*exception_texts(info.value))


@pytest.mark.trio
async def test_client_and_pipeline_encoding_errors_show_no_password() -> None:
    async with open_fake_server() as srv, trio_maint.open_redis(srv.url) as r:
        with pytest.raises(DataError) as info:
            await r.execute_command("AUTH", "someuser", PW, None)  # type: ignore[arg-type]
        assert_no_secret(*exception_texts(info.value))
        async with r.pipeline(transaction=False) as pipe:
            pipe.execute_command("AUTH", "someuser", PW + "\udcff")
            with pytest.raises(DataError) as info:
                await pipe.execute()
        assert_no_secret(*exception_texts(info.value))
        assert srv.count("AUTH") == 0  # nothing was sent


# ------------------------------------------------------------------------ log records


def record_texts(records: list[logging.LogRecord]) -> Iterator[str]:
    formatter = logging.Formatter("%(message)s")
    for record in records:
        yield formatter.format(record)  # message, exception and stack
        yield repr(record.args)
        yield repr(vars(record))


@pytest.mark.trio
async def test_no_log_record_shows_the_password(caplog: pytest.LogCaptureFixture) -> None:
    """A client with a password through a session that logs what it can: a refused
    handshake, a malformed notification, a lost connection, a bad pub/sub frame."""
    caplog.set_level(logging.DEBUG)
    async with open_fake_server() as srv:
        url = f"redis://someuser:{PW}@{srv.name}/0"
        refused: list[int] = []
        default_hello = srv._handlers["HELLO"]

        async def hello(conn: FakeConnection, args: list[bytes]) -> bytes | Action:
            if not refused:
                refused.append(conn.id)
                return resp(Err("WRONGPASS invalid username-password pair or user is disabled"))
            return await default_hello(conn, args)

        async def subscribe(conn: FakeConnection, args: list[bytes]) -> bytes:
            return push(b"subscribe", args[1], 1) + resp(Err("ERR unexpected"))

        srv.on("HELLO", hello)
        srv.on("SUBSCRIBE", subscribe)
        async with trio_maint.open_redis(url, socket_timeout=2) as r:
            with trio.fail_after(TIMEOUT):
                with pytest.raises(AuthenticationError) as info:
                    await r.ping()
                assert_no_secret(*exception_texts(info.value))
                assert await r.ping() is True
                await srv.push(push(b"MOVING", b"x", b"y"))  # malformed
                assert await r.ping() is True
                srv.close_all()
                await srv.wait_until(lambda s: not s.connections)
                assert await r.ping() is True  # redialed, with the password again
                async with r.pubsub() as ps:
                    await ps.subscribe("ch")
                    assert await ps.get_message(timeout=0.3) is not None  # its confirmation
                    assert await ps.get_message(timeout=0.3) is None  # the error, logged
    assert srv.seen("HELLO")[-1][-1] == PW.encode()  # the password was used...
    assert caplog.records  # ... and something was logged
    assert_no_secret(*record_texts(caplog.records))


# ------------------------------------------------------------------------------- CLI


@pytest.mark.parametrize("url", [*BAD_URLS, f"redis://u:{PW}@h/0?timeout=1"])
def test_cli_monitor_never_prints_the_password(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["monitor", url]) == 2
    out, err = capsys.readouterr()
    assert_no_secret(out, err)
    assert err.startswith("trio-maint: error: ")


def test_cli_monitor_of_an_unreachable_server(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"redis://someuser:{PW}@127.0.0.1:{free_port()}/0"
    assert main(["monitor", url, "--duration", "1"]) == 1
    out, err = capsys.readouterr()
    assert_no_secret(out, err)
    assert "cannot reach 127.0.0.1:" in err


def test_cli_argparse_errors_are_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["demo", f"redis://u:{PW}@h/0"])
    assert info.value.code == 2
    out, err = capsys.readouterr()
    assert_no_secret(out, err)
    assert "redis://u:***@h/0" in err


def test_cli_subprocess_from_the_issue() -> None:
    """``trio-maint monitor 'redis://u:PW@h/0?timeout=1'`` as a user runs it."""
    result = subprocess.run(
        [sys.executable, "-m", "trio_maint", "monitor", f"redis://u:{PW}@h/0?timeout=1"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        check=False,
    )
    assert result.returncode == 2
    assert_no_secret(result.stdout, result.stderr)
    assert "unknown Redis URL query parameter 'timeout' in redis://u:***@h/0" in result.stderr
