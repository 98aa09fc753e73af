"""API input (issue 13, item 7): bad input fails at once with an error naming what is
wrong — an empty command, a URL that is not a ``str``, a timeout that is not a usable
number of seconds, a client name Redis would refuse."""

from __future__ import annotations

import math
from typing import Any

import pytest
import trio

import trio_maint
from trio_maint import ClientOptions, DataError, MaintConfig, parse_url
from trio_maint._sansio.config import MAX_SECONDS

from ._fakeserver import ClusterTopology, open_fake_server, serve_cluster_commands

TIMEOUT = 10.0


def _kw(field: str, value: object) -> dict[str, Any]:
    return {field: value}


# ------------------------------------------------------------------- empty commands


@pytest.mark.trio
async def test_an_empty_command_fails_at_once() -> None:
    """``execute_command()`` used to send ``*0`` and wait for the socket timeout."""
    async with open_fake_server() as srv:
        async with trio_maint.open_redis(srv.url, socket_timeout=1000) as r:
            assert await r.ping() is True
            before = len(srv.log)
            with trio.fail_after(1):
                with pytest.raises(DataError, match="needs a command name"):
                    await r.execute_command()
                pipe = r.pipeline(transaction=False)
                with pytest.raises(DataError, match="needs a command name"):
                    pipe.execute_command()
                assert await pipe.set("k", "v").execute() == [True]  # nothing was queued
                async with r.pipeline() as watching:
                    with pytest.raises(DataError, match="needs a command name"):
                        await watching.immediate_execute_command()
            assert await r.ping() is True  # the connection is fine
            assert r.pool.stats().removed == 0
        assert all(args for _cid, args in srv.log[before:])


@pytest.mark.trio
async def test_an_empty_cluster_command_fails_at_once() -> None:
    topology = ClusterTopology()
    async with open_fake_server() as node:
        serve_cluster_commands(node, topology)
        topology.assign(node)
        async with trio_maint.open_redis_cluster(node.url, socket_timeout=1000) as rc:
            with trio.fail_after(1):
                with pytest.raises(DataError, match="needs a command name"):
                    await rc.execute_command()
                with pytest.raises(DataError, match="needs a command name"):
                    rc.pipeline().execute_command()
                assert await rc.set("k", "v") is True


# ---------------------------------------------------------------------- URL types


@pytest.mark.parametrize("url", [123, b"redis://localhost", ["redis://localhost"], 1.5])
def test_a_url_that_is_not_a_str_is_a_type_error(url: Any) -> None:
    with pytest.raises(TypeError, match=f"must be a str, got {type(url).__name__}"):
        parse_url(url)
    with pytest.raises(TypeError, match=type(url).__name__):
        ClientOptions.from_url(url)


@pytest.mark.trio
@pytest.mark.parametrize("url", [123, b"redis://localhost", 1.5])
async def test_open_redis_and_cluster_name_the_type(url: Any) -> None:
    with pytest.raises(TypeError, match=type(url).__name__):
        async with trio_maint.open_redis(url):
            pass  # pragma: no cover
    with pytest.raises(TypeError, match=type(url).__name__):
        async with trio_maint.open_redis_cluster(url):
            pass  # pragma: no cover
    with pytest.raises(TypeError, match=type(url).__name__):
        async with trio_maint.open_redis_cluster(["localhost:7000", url]):
            pass  # pragma: no cover


# ------------------------------------------------------------------------ timeouts

CLIENT_TIMEOUTS = ["connect_timeout", "socket_timeout", "conn_max_idle_time", "pool_timeout"]
MAINT_DURATIONS = [
    "relaxed_timeout",
    "handoff_timeout",
    "post_handoff_relaxed_duration",
    "circuit_breaker_reset_timeout",
]
ABSURD = [math.inf, -math.inf, math.nan, 1e400, 2e9, MAX_SECONDS * 1.0001, 10**400]


@pytest.mark.parametrize("field", CLIENT_TIMEOUTS)
@pytest.mark.parametrize("value", [*ABSURD, 0, 0.0, -1.0, "nan", "inf", "1e400"])
def test_client_timeouts_must_be_usable(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        ClientOptions(**_kw(field, value))


@pytest.mark.parametrize("field", CLIENT_TIMEOUTS)
@pytest.mark.parametrize("value", [True, "soon", [1.0]])
def test_client_timeouts_of_the_wrong_type(field: str, value: object) -> None:
    with pytest.raises(TypeError, match=field):
        ClientOptions(**_kw(field, value))


@pytest.mark.parametrize("field", CLIENT_TIMEOUTS)
def test_client_timeouts_accepted(field: str) -> None:
    assert getattr(ClientOptions(**_kw(field, None)), field) is None  # no timeout
    assert getattr(ClientOptions(**_kw(field, MAX_SECONDS)), field) == MAX_SECONDS
    assert getattr(ClientOptions(**_kw(field, 1)), field) == 1.0
    assert getattr(ClientOptions(**_kw(field, "2.5")), field) == 2.5


@pytest.mark.parametrize(
    "query", ["socket_timeout=1e400", "socket_connect_timeout=nan", "pool_timeout=-1"]
)
def test_url_timeouts_must_be_usable(query: str) -> None:
    field = query.split("=")[0].replace("socket_connect", "connect")
    with pytest.raises(ValueError, match=field):
        ClientOptions.from_url(f"redis://h/0?{query}")


@pytest.mark.parametrize("field", MAINT_DURATIONS)
@pytest.mark.parametrize("value", [*ABSURD, -1.0])
def test_maint_durations_must_be_usable(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        MaintConfig(**_kw(field, value))


@pytest.mark.parametrize("field", MAINT_DURATIONS)
def test_maint_durations_up_to_the_bound(field: str) -> None:
    assert getattr(MaintConfig(**_kw(field, MAX_SECONDS)), field) == MAX_SECONDS


def test_the_bound_is_about_116_days() -> None:
    assert MAX_SECONDS == 1e7
    assert 115 < MAX_SECONDS / 86400 < 116


# --------------------------------------------------------------------- client names


@pytest.mark.parametrize(
    "name", ["a\r\nb", "a\nb", "a\rb", "with space", "tab\there", "caf\u00e9", "nul\x00", "\x7f"]
)
def test_a_client_name_redis_would_refuse(name: str) -> None:
    with pytest.raises(DataError, match="client_name") as info:
        ClientOptions(client_name=name)
    assert "RESP3" not in str(info.value)
    assert isinstance(info.value, trio_maint.InvalidClientNameError)
    assert isinstance(info.value, ValueError)  # as every other invalid option


def test_a_client_name_in_a_url() -> None:
    with pytest.raises(DataError, match="client_name"):
        ClientOptions.from_url("redis://h/0?client_name=a%0D%0Ab")
    with pytest.raises(DataError, match="client_name"):
        ClientOptions.from_url("redis://h/0?client_name=a+b")
    assert ClientOptions.from_url("redis://h/0?client_name=app-1.worker_2").client_name == (
        "app-1.worker_2"
    )


def test_client_names_redis_accepts() -> None:
    assert ClientOptions(client_name="!~{}[]@#$%^&*()").client_name == "!~{}[]@#$%^&*()"
    assert ClientOptions(client_name="").client_name == ""  # no name: nothing sent


@pytest.mark.trio
async def test_a_bad_client_name_fails_before_dialing() -> None:
    async with open_fake_server() as srv:
        with pytest.raises(ValueError, match="client_name"):
            async with trio_maint.open_redis(srv.url, client_name="a\r\nb"):
                pass  # pragma: no cover
        assert srv.accepted == 0


@pytest.mark.parametrize("field", ["username", "password", "client_name"])
def test_credentials_must_be_str(field: str) -> None:
    with pytest.raises(TypeError, match=f"{field} must be a str or None, got bytes"):
        ClientOptions(**_kw(field, b"x"))
