"""Configuration of maintenance-notification handling (sans-IO).

:class:`MaintConfig` holds every knob, validated at construction. Fields left at ``0``
("scale from the pool") are filled in by :meth:`MaintConfig.resolved` with the formulas of
Redis's reference client (see docs/maintenance.md).
"""

from __future__ import annotations

import enum
import math
import os
from collections.abc import Callable, Iterable
from typing import Final, TypeVar

import attrs

from .endpoint import Endpoint, EndpointType
from .trust import parse_trusted

__all__ = ["MaintConfig", "MaintMode"]


class MaintMode(enum.StrEnum):
    """Whether connections opt in to maintenance notifications.

    * ``AUTO`` (default): send ``CLIENT MAINT_NOTIFICATIONS ON``; if the server refuses,
      turn the feature off for the client quietly.
    * ``ENABLED``: the opt-in is mandatory; a refusal fails the connection with
      :class:`~trio_maint.MaintenanceNotSupportedError`.
    * ``DISABLED``: never send it; no endpoint detection either.
    """

    AUTO = "auto"
    ENABLED = "enabled"
    DISABLED = "disabled"


#: Upper bound of ``max_handoff_retries``.
MAX_HANDOFF_RETRIES_LIMIT: Final = 10

#: Upper bound of every duration setting of :class:`MaintConfig` and
#: :class:`~trio_maint.ClientOptions` (``float`` seconds: 10^7, about 116 days). Longer
#: means "never" in practice, usually by mistake (a unit error, ``1e400``); where "no
#: timeout" is wanted and allowed, it is written ``None``.
MAX_SECONDS: Final = 1e7


_E = TypeVar("_E", bound=enum.StrEnum)


def _to_enum(field: str, cls: type[_E], value: object) -> _E:
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        try:
            return cls(value.lower())
        except ValueError:
            pass
    allowed = ", ".join(repr(m.value) for m in cls)
    raise ValueError(f"{field}: {value!r} is not one of {allowed}")


def _to_mode(value: object) -> MaintMode:
    return _to_enum("mode", MaintMode, value)


def _to_endpoint_type(value: object) -> EndpointType:
    return _to_enum("endpoint_type", EndpointType, value)


def _number(field: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{field}: expected seconds as a float, got {type(value).__name__}")
    try:
        seconds = float(value)
    except OverflowError:  # an int beyond float's range
        seconds = math.inf
    if not math.isfinite(seconds):
        raise ValueError(f"{field}: must be finite, got {seconds!r}")
    if seconds > MAX_SECONDS:
        raise ValueError(
            f"{field}: must be at most {MAX_SECONDS:g} seconds (about 116 days), got {seconds!r}"
        )
    return seconds


def _integer(field: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{field}: expected an int, got {type(value).__name__}")
    return value


def _to_entries(value: str | Iterable[str]) -> tuple[str, ...]:
    entries = (value,) if isinstance(value, str) else tuple(value)
    for entry in entries:
        if not isinstance(entry, str) or not entry.strip():
            raise ValueError(f"trusted_targets: {entry!r} is not a host, suffix or network")
    parse_trusted(entries)  # malformed networks fail here, naming the field
    return entries


@attrs.frozen(kw_only=True)
class MaintConfig:
    """Settings of maintenance-notification handling; immutable, validated at construction.

    Durations are finite ``float`` seconds, at most ``MAX_SECONDS`` (10^7, about 116
    days). Fields and defaults (as Redis's reference client, see docs/maintenance.md):

    * ``mode`` (:class:`MaintMode` or its string, default ``"auto"``).
    * ``endpoint_type`` (:class:`~trio_maint.EndpointType` or its string such as
      ``"internal-ip"``, default ``"auto"`` = detected from the address and TLS).
    * ``relaxed_timeout`` (10.0, > 0): the socket timeout floor while a maintenance window
      is announced on a connection.
    * ``handoff_timeout`` (15.0, > 0): the time budget of one handoff attempt (dial +
      handshake + swap).
    * ``max_handoff_retries`` (3, 1..10): the most dial attempts per handoff.
    * ``max_workers`` (0 = scaled from the pool, >= 0): handoff worker tasks.
    * ``handoff_queue_size`` (0 = scaled from the pool, >= 0): handoff queue capacity.
    * ``post_handoff_relaxed_duration`` (0 = 2 x ``relaxed_timeout``, >= 0): how long a
      connection keeps relaxed timeouts after a handoff.
    * ``circuit_breaker_failure_threshold`` (5, >= 1): consecutive dial failures that open
      an endpoint's breaker.
    * ``circuit_breaker_reset_timeout`` (60.0, >= 0): seconds an open breaker waits before
      letting trial handoffs through (half-open).
    * ``circuit_breaker_max_requests`` (3, >= 1): trial handoffs admitted while half-open;
      that many successes close the breaker.
    * ``trusted_targets`` (``()``): MOVING targets trusted beyond the default policy
      (docs/security.md): exact host names, domain suffixes with a leading dot
      (``".db.example.com"``), IP networks (``"10.20.0.0/16"``) or addresses; a trusted
      target's TLS certificate is checked against its own name.
    * ``target_check`` (``None``): a callable ``(Endpoint) -> bool`` trusting more
      targets (``True``: trusted, as an allow-list entry); an exception counts as
      ``False``.

    :raises ValueError: a value is out of range or not a valid enum string; the message
        starts with the field name. Checked in the order above after the enums.
    :raises TypeError: a number field has a non-numeric type (``bool`` included).
    """

    mode: MaintMode = attrs.field(default=MaintMode.AUTO, converter=_to_mode)
    endpoint_type: EndpointType = attrs.field(
        default=EndpointType.AUTO, converter=_to_endpoint_type
    )
    relaxed_timeout: float = 10.0
    handoff_timeout: float = 15.0
    max_handoff_retries: int = 3
    max_workers: int = 0
    handoff_queue_size: int = 0
    post_handoff_relaxed_duration: float = 0.0
    circuit_breaker_failure_threshold: int = 5
    circuit_breaker_reset_timeout: float = 60.0
    circuit_breaker_max_requests: int = 3
    trusted_targets: tuple[str, ...] = attrs.field(default=(), converter=_to_entries)
    target_check: Callable[[Endpoint], bool] | None = None

    def __attrs_post_init__(self) -> None:
        def positive(field: str) -> None:
            value = _number(field, getattr(self, field))
            if value <= 0:
                raise ValueError(f"{field}: must be > 0 seconds, got {value!r}")
            object.__setattr__(self, field, value)

        def non_negative(field: str) -> None:
            value = _number(field, getattr(self, field))
            if value < 0:
                raise ValueError(f"{field}: must be >= 0 seconds, got {value!r}")
            object.__setattr__(self, field, value)

        def int_at_least(field: str, low: int, high: int | None = None) -> None:
            value = _integer(field, getattr(self, field))
            if value < low or (high is not None and value > high):
                bound = f"in {low}..{high}" if high is not None else f">= {low}"
                raise ValueError(f"{field}: must be {bound}, got {value!r}")

        positive("relaxed_timeout")
        positive("handoff_timeout")
        int_at_least("max_workers", 0)
        int_at_least("handoff_queue_size", 0)
        non_negative("post_handoff_relaxed_duration")
        int_at_least("circuit_breaker_failure_threshold", 1)
        non_negative("circuit_breaker_reset_timeout")
        int_at_least("circuit_breaker_max_requests", 1)
        int_at_least("max_handoff_retries", 1, MAX_HANDOFF_RETRIES_LIMIT)

    @property
    def enabled(self) -> bool:
        """``True`` unless ``mode`` is ``disabled``."""
        return self.mode is not MaintMode.DISABLED

    @property
    def is_resolved(self) -> bool:
        """``True`` when no field is left at "0 = scaled from the pool"."""
        return (
            self.max_workers > 0
            and self.handoff_queue_size > 0
            and self.post_handoff_relaxed_duration > 0
        )

    def resolved(self, pool_size: int = 0, max_active_conns: int = 0) -> MaintConfig:
        """A copy with every "0 = automatic" field filled in; explicit values are kept.

        Formulas, from Redis's reference client (see docs/maintenance.md), with
        ``P = pool_size`` or, if that is 0, ``10 x CPU count``:

        * ``max_workers`` = ``max(1, min(P // 2, max(10, P // 3)))``;
        * ``handoff_queue_size`` = ``max(2, min(max(20 x workers, pool_size), cap))`` where
          ``cap = max(max_active_conns + 1, 2)`` if ``max_active_conns > 0`` else
          ``5 x pool_size``;
        * ``post_handoff_relaxed_duration`` = ``2 x relaxed_timeout``.

        E.g. pool 100 gives 33 workers and a queue of 500 (151 with max_active_conns 150).
        Unlike the reference client, explicit ``max_workers`` and ``handoff_queue_size``
        are used as given (never raised to half the pool or to 200, nor capped).

        :param pool_size: the pool's maximum size (``int`` >= 0, 0 = unknown).
        :param max_active_conns: the pool's limit on open connections (``int`` >= 0,
            0 = none).
        :raises ValueError: a negative argument.
        """
        if pool_size < 0 or max_active_conns < 0:
            raise ValueError("pool_size and max_active_conns must be >= 0")
        workers = self.max_workers
        if workers == 0:
            p = pool_size if pool_size > 0 else 10 * (os.cpu_count() or 1)
            workers = max(1, min(p // 2, max(10, p // 3)))
        queue = self.handoff_queue_size
        if queue == 0:
            cap = max(max_active_conns + 1, 2) if max_active_conns > 0 else pool_size * 5
            queue = max(2, min(max(20 * workers, pool_size), cap))
        post = self.post_handoff_relaxed_duration or 2 * self.relaxed_timeout
        return attrs.evolve(
            self,
            max_workers=workers,
            handoff_queue_size=queue,
            post_handoff_relaxed_duration=post,
        )
