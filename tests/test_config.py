"""MaintConfig validation and scaling, and endpoint-type detection (sans-IO)."""

from __future__ import annotations

import os

import attrs
import pytest

from trio_maint._sansio.config import MaintConfig, MaintMode
from trio_maint._sansio.endpoint import (
    EndpointType,
    detect_endpoint_type,
    is_internal_address,
    split_host_port,
)


def test_defaults() -> None:
    config = MaintConfig()
    assert config.mode is MaintMode.AUTO
    assert config.endpoint_type is EndpointType.AUTO
    assert (config.max_workers, config.handoff_queue_size) == (0, 0)
    assert config.relaxed_timeout == 10.0
    assert config.handoff_timeout == 15.0
    assert config.max_handoff_retries == 3
    assert config.post_handoff_relaxed_duration == 0.0
    assert config.circuit_breaker_failure_threshold == 5
    assert config.circuit_breaker_reset_timeout == 60.0
    assert config.circuit_breaker_max_requests == 3
    assert config.enabled
    assert not config.is_resolved


def test_enum_strings_are_converted() -> None:
    config = MaintConfig(mode="enabled", endpoint_type="internal-ip")
    assert config.mode is MaintMode.ENABLED
    assert config.endpoint_type is EndpointType.INTERNAL_IP
    assert not MaintConfig(mode="disabled").enabled


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("mode", "on"),
        ("mode", ""),
        ("endpoint_type", "public"),
        ("relaxed_timeout", 0),
        ("relaxed_timeout", -1.0),
        ("relaxed_timeout", float("nan")),
        ("handoff_timeout", 0.0),
        ("handoff_timeout", float("inf")),
        ("max_workers", -1),
        ("handoff_queue_size", -1),
        ("post_handoff_relaxed_duration", -1.0),
        ("circuit_breaker_failure_threshold", 0),
        ("circuit_breaker_reset_timeout", -1.0),
        ("circuit_breaker_max_requests", 0),
        ("max_handoff_retries", 0),
        ("max_handoff_retries", 11),
    ],
)
def test_invalid_values_name_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"^{field}:"):
        MaintConfig(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "value"),
    [("relaxed_timeout", "10"), ("max_workers", 2.0), ("max_handoff_retries", True)],
)
def test_wrong_types(field: str, value: object) -> None:
    with pytest.raises(TypeError, match=f"^{field}:"):
        MaintConfig(**{field: value})  # type: ignore[arg-type]


def test_limits_are_accepted() -> None:
    MaintConfig(max_handoff_retries=1)
    MaintConfig(max_handoff_retries=10)
    MaintConfig(circuit_breaker_reset_timeout=0)
    assert MaintConfig(relaxed_timeout=5).relaxed_timeout == 5.0


def test_frozen_and_evolve_validates() -> None:
    config = MaintConfig()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        config.relaxed_timeout = 1.0  # type: ignore[misc]
    with pytest.raises(ValueError, match=r"^max_workers:"):
        attrs.evolve(config, max_workers=-2)


def test_worked_example_pool_100() -> None:
    config = MaintConfig().resolved(pool_size=100)
    assert config.max_workers == 33
    assert config.handoff_queue_size == 500
    assert config.post_handoff_relaxed_duration == 20.0
    assert config.is_resolved
    assert config.resolved(pool_size=100) == config  # idempotent


def test_worked_example_max_active_conns() -> None:
    assert MaintConfig().resolved(pool_size=100, max_active_conns=150).handoff_queue_size == 151


@pytest.mark.parametrize(
    ("pool", "workers"),
    [(6, 3), (15, 7), (30, 10), (60, 20), (100, 33), (120, 40), (50, 16), (1, 1), (3, 1)],
)
def test_auto_workers(pool: int, workers: int) -> None:
    assert MaintConfig().resolved(pool_size=pool).max_workers == workers


@pytest.mark.parametrize(
    ("pool", "max_active", "kwargs", "queue"),
    [
        (100, 0, {}, 500),
        (100, 150, {}, 151),
        (50, 0, {}, 250),
        (100, 0, {"max_workers": 60}, 500),
        (3, 0, {}, 15),
        (1, 0, {}, 5),
        (100, 1, {}, 2),
        (0, 0, {}, 2),
    ],
)
def test_auto_queue(pool: int, max_active: int, kwargs: dict[str, int], queue: int) -> None:
    base = MaintConfig() if not kwargs else MaintConfig(max_workers=kwargs["max_workers"])
    config = base.resolved(pool_size=pool, max_active_conns=max_active)
    assert config.handoff_queue_size == queue


def test_no_pool_size_uses_cpu_count() -> None:
    p = 10 * (os.cpu_count() or 1)
    assert MaintConfig().resolved().max_workers == max(1, min(p // 2, max(10, p // 3)))


def test_explicit_values_are_kept() -> None:
    # A deliberate improvement on the reference, which raises explicit workers to
    # pool // 2 and explicit queues to at least 200 (see docs/maintenance.md).
    config = MaintConfig(
        max_workers=15, handoff_queue_size=10, post_handoff_relaxed_duration=0.1
    ).resolved(pool_size=100)
    assert (config.max_workers, config.handoff_queue_size) == (15, 10)
    assert config.post_handoff_relaxed_duration == 0.1


def test_post_handoff_follows_relaxed_timeout() -> None:
    assert MaintConfig(relaxed_timeout=5).resolved(10).post_handoff_relaxed_duration == 10.0


def test_resolved_rejects_negative_sizes() -> None:
    with pytest.raises(ValueError):
        MaintConfig().resolved(pool_size=-1)


INTERNAL = ["10.0.0.1", "172.16.5.4", "192.168.1.1", "127.0.0.1", "169.254.1.1", "100.64.0.1"]
INTERNAL += ["100.127.255.254", "::1", "fe80::1", "fc00::1", "fd12:3456:789a::1", "::ffff:10.1.1.1"]
EXTERNAL = ["100.63.255.255", "100.128.0.0", "8.8.8.8", "1.1.1.1", "2001:4860:4860::8888", ""]
EXTERNAL += ["not-an-ip", "172.32.0.1"]


@pytest.mark.parametrize("address", INTERNAL)
def test_internal_addresses(address: str) -> None:
    assert is_internal_address(address)


@pytest.mark.parametrize("address", EXTERNAL)
def test_external_addresses(address: str) -> None:
    assert not is_internal_address(address)


@pytest.mark.parametrize(
    ("address", "tls", "expected"),
    [
        ("10.0.0.1:6379", False, EndpointType.INTERNAL_IP),
        ("10.0.0.1:6379", True, EndpointType.INTERNAL_FQDN),
        ("8.8.8.8:6379", False, EndpointType.EXTERNAL_IP),
        ("8.8.8.8:6379", True, EndpointType.EXTERNAL_FQDN),
        ("127.0.0.1:6379", False, EndpointType.INTERNAL_IP),
        ("[::1]:6379", False, EndpointType.INTERNAL_IP),
        ("[fc00::1]:6379", True, EndpointType.INTERNAL_FQDN),
        ("[2001:4860:4860::8888]:6379", False, EndpointType.EXTERNAL_IP),
        ("100.64.0.1:6379", False, EndpointType.INTERNAL_IP),
        (":6379", False, EndpointType.INTERNAL_IP),
        (":6379", True, EndpointType.INTERNAL_FQDN),
        ("", False, EndpointType.INTERNAL_IP),
        ("", True, EndpointType.INTERNAL_FQDN),
        ("localhost:6379", False, EndpointType.INTERNAL_IP),
        ("localhost:6379", True, EndpointType.INTERNAL_FQDN),
        ("redis.example.invalid:6379", False, EndpointType.EXTERNAL_IP),
        ("redis.example.invalid:6379", True, EndpointType.EXTERNAL_FQDN),
    ],
)
def test_detect_endpoint_type(address: str, tls: bool, expected: EndpointType) -> None:
    host, _ = split_host_port(address)
    assert detect_endpoint_type(host, tls) is expected


def test_detect_with_caller_resolved_addresses() -> None:
    name = "redis.internal.example"
    assert detect_endpoint_type(name, False, resolved=["10.0.0.1", "10.0.0.2"]) is (
        EndpointType.INTERNAL_IP
    )
    assert detect_endpoint_type(name, False, resolved=["10.0.0.1", "8.8.8.8"]) is (
        EndpointType.EXTERNAL_IP
    )
    assert detect_endpoint_type(name, True, resolved=[]) is EndpointType.EXTERNAL_FQDN
    # An IP literal is judged by itself, whatever was resolved.
    assert detect_endpoint_type("8.8.8.8", False, resolved=["10.0.0.1"]) is (
        EndpointType.EXTERNAL_IP
    )
