"""URL parsing and option validation."""

from __future__ import annotations

import pytest

from trio_maint import ClientOptions, parse_url


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://localhost", {"host": "localhost"}),
        ("redis://h:6380/2", {"host": "h", "port": 6380, "db": 2}),
        ("redis://:pw@h", {"host": "h", "password": "pw"}),
        (
            "redis://user:p%40ss@h:1/0",
            {"host": "h", "port": 1, "db": 0, "username": "user", "password": "p@ss"},
        ),
        ("rediss://h", {"host": "h", "ssl": True}),
        ("unix:///tmp/redis.sock?db=3", {"unix_path": "/tmp/redis.sock", "db": 3}),
        ("redis://[::1]:7000", {"host": "::1", "port": 7000}),
        (
            "redis://h?socket_timeout=1.5&socket_connect_timeout=2&pool_size=3"
            "&decode_responses=true&client_name=app",
            {
                "host": "h",
                "socket_timeout": 1.5,
                "connect_timeout": 2.0,
                "pool_size": 3,
                "decode_responses": True,
                "client_name": "app",
            },
        ),
        ("redis://h?max_connections=7", {"host": "h", "pool_size": 7}),
        ("redis://h?socket_timeout=none", {"host": "h", "socket_timeout": None}),
    ],
)
def test_parse_url(url: str, expected: dict[str, object]) -> None:
    assert parse_url(url) == expected


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://h", "scheme"),
        ("redis://h?bogus=1", "unknown Redis URL query parameter 'bogus'"),
        ("redis://h/notanumber", "database number"),
        ("redis://h?decode_responses=maybe", "decode_responses"),
        ("unix://", "socket path"),
    ],
)
def test_parse_url_errors(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ClientOptions.from_url(url)


def test_overrides_win_over_url() -> None:
    opts = ClientOptions.from_url("redis://h:1/2", db=5, pool_size=4)
    assert (opts.host, opts.port, opts.db, opts.pool_size) == ("h", 1, 5, 4)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("pool_size", 0),
        ("socket_timeout", 0),
        ("socket_timeout", -1.0),
        ("connect_timeout", float("nan")),
        ("db", -1),
        ("port", 70000),
        ("max_active_conns", -1),
    ],
)
def test_invalid_options_name_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        ClientOptions(**{field: value})  # type: ignore[arg-type]
