"""The sans-IO part of ``trio-maint simulate``: addresses, targets, upstream URLs (never
showing a password), control requests and the endpoint/target decisions."""

from __future__ import annotations

import json

import pytest

from trio_maint._cli.simulate_control import (
    ControlError,
    Endpoint,
    Inject,
    Layout,
    RunScenario,
    Status,
    decode_reply,
    decode_request,
    encode,
    format_address,
    parse_address,
    parse_target,
    parse_upstream,
    request_from_args,
    wire_name,
)


def test_addresses() -> None:
    assert parse_address("127.0.0.2:7000") == ("127.0.0.2", 7000)
    assert parse_address("[::1]:7000") == ("::1", 7000)
    assert format_address(("::1", 7000)) == "[::1]:7000"
    for bad in ("127.0.0.1", "h:0", "h:70000", "h:x", ":7000", "::1:7000", "[::1]7000"):
        with pytest.raises(ControlError):
            parse_address(bad)


def test_upstreams_hide_passwords() -> None:
    up = parse_upstream("redis://user:s3cret@127.0.0.1:6380/2")
    assert up.address == ("127.0.0.1", 6380)
    assert "s3cret" not in up.shown and "user" in up.shown
    assert parse_upstream("redis://localhost").address == ("localhost", 6379)
    assert parse_upstream("127.0.0.1:6381").address == ("127.0.0.1", 6381)
    for bad in ("rediss://:s3cret@h:1", "unix:///tmp/r.sock", "redis://:s3cret@h:notaport"):
        with pytest.raises(ControlError) as info:
            parse_upstream(bad)
        assert "s3cret" not in str(info.value)


def test_targets_and_layout_defaults() -> None:
    a = Endpoint(("127.0.0.1", 7000), parse_upstream("redis://127.0.0.1:6379"))
    b = parse_target("127.0.0.2:7000=redis://127.0.0.1:6380")
    plain = parse_target("10.0.0.5:6379")
    assert isinstance(b, Endpoint) and b.name == "127.0.0.2:7000"
    assert plain == ("10.0.0.5", 6379)
    layout = Layout((a, b), (("10.0.0.5", 6379),))
    assert layout.endpoint(None) == a
    assert layout.endpoint("127.0.0.2:7000") == b
    with pytest.raises(ControlError, match=r"no endpoint listens on 127\.0\.0\.9:1"):
        layout.endpoint("127.0.0.9:1")
    # the first other endpoint by default; from B back to A; an explicit address as given
    assert layout.target(a, None) == b
    assert layout.target(b, None) == a
    assert layout.target(a, "127.0.0.2:7000") == b
    assert layout.target(a, "10.1.1.1:1") == ("10.1.1.1", 1)
    only = Layout((a,), (("10.0.0.5", 6379),))
    assert only.target(a, None) == ("10.0.0.5", 6379)
    assert Layout((a,)).target(a, None) is None
    with pytest.raises(ControlError, match="two endpoints"):
        Layout((a, a))


def test_requests() -> None:
    assert decode_request(b'{"op":"status"}') == Status()
    assert decode_request('{"op":"moving","to":"127.0.0.2:7000","time":5}') == Inject(
        "moving", to="127.0.0.2:7000", time=5
    )
    assert decode_request('{"op":"migrating"}') == Inject("migrating", time=2)
    assert decode_request('{"op":"failed-over","seq":9}') == Inject("failed-over", seq=9)
    assert decode_request(
        '{"op":"scenario","name":"moving","time":2,"grace":0.5,"wait":true}'
    ) == RunScenario("moving", time=2, grace=0.5, wait=True)
    for bad, why in [
        (b"nope", "JSON"),
        (b"[1]", "JSON"),
        (b'{"op":"reboot"}', "unknown op"),
        (b'{"op":"moving","time":-1}', "'time'"),
        (b'{"op":"moving","time":true}', "'time'"),
        (b'{"op":"moving","seq":"1"}', "'seq'"),
        (b'{"op":"migrated","time":3}', "does not apply"),
        (b'{"op":"migrating","to":"h:1"}', "moving only"),
        (b'{"op":"scenario","name":"explode"}', "unknown scenario"),
        (b'{"op":"scenario","name":"moving","compress":0}', "'compress'"),
        (b'{"op":"scenario","name":"moving","time":0}', "at least 1"),
        (b'{"op":"scenario","name":"moving","grace":"NaN"}', "'grace'"),
    ]:
        with pytest.raises(ControlError, match=why):
            decode_request(bad)


def test_request_from_args_round_trips() -> None:
    args = {
        "ctl": "scenario",
        "name": "moving",
        "to": None,
        "time": 3,
        "wait": True,
        "remember": False,
        "json": True,
        "control": "/x",
    }
    req = request_from_args("scenario", args)
    assert req == {"op": "scenario", "name": "moving", "time": 3, "wait": True}
    line = encode(req)
    assert line.endswith(b"\n") and b"\n" not in line[:-1]
    assert decode_request(line) == RunScenario("moving", time=3, wait=True)
    assert request_from_args("moving", {"shard_ids": "2", "seq": 0})["seq"] == 0


def test_replies_and_names() -> None:
    assert decode_reply(b'{"ok":true,"message":"m"}\n')["message"] == "m"
    for bad in (b"x", b"{}", json.dumps({"ok": "yes"}).encode()):
        with pytest.raises(ControlError):
            decode_reply(bad)
    assert wire_name("failing-over") == "FAILING_OVER"
    assert wire_name("moving") == "MOVING"
