"""Circuit breakers for handoff target endpoints (sans-IO: every method takes ``now``).

One :class:`CircuitBreaker` per endpoint stops the client from dialing an endpoint that
keeps failing: ``closed`` (dial freely) -> ``open`` after ``failure_threshold``
consecutive failures (fail fast) -> ``half-open`` once ``reset_timeout`` seconds passed
since the last failure (admit up to ``max_requests`` trial dials) -> ``closed`` after
``max_requests`` successes, or back to ``open`` on a failure. As Redis's handoff circuit
breaker (see docs/maintenance.md), except that the open -> half-open step happens on the
handoff path too, so an endpoint that comes back is used again.

``now`` is any monotonic clock in seconds (``float``); Trio code passes
``trio.current_time()``.
"""

from __future__ import annotations

import enum
import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

import attrs

from .config import MaintConfig
from .endpoint import Endpoint
from .loglimit import log_limited

__all__ = [
    "BreakerListener",
    "BreakerRegistry",
    "BreakerState",
    "BreakerStats",
    "CircuitBreaker",
]

logger = logging.getLogger("trio_maint.breaker")

#: A breaker nobody asked for in this many seconds is forgotten (30 minutes).
BREAKER_IDLE_TTL: Final = 1800.0
#: How often (seconds) :meth:`BreakerRegistry.get` prunes idle breakers (5 minutes).
BREAKER_PRUNE_INTERVAL: Final = 300.0


class BreakerState(enum.StrEnum):
    """The state of a :class:`CircuitBreaker`; values ``closed``, ``open``, ``half-open``."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"


@attrs.frozen
class BreakerStats:
    """A snapshot of one breaker.

    :ivar endpoint: the breaker's :class:`~trio_maint.Endpoint`.
    :ivar state: :class:`BreakerState` at the time of the snapshot (an open breaker whose
        reset timeout has passed still reports ``open`` until the next dial asks).
    :ivar failures: failures counted since the last success in ``closed`` (``int``).
    :ivar successes: successes in the current half-open episode (``int``).
    :ivar requests: trial dials admitted in the current half-open episode (``int``).
    :ivar last_failure_time: ``now`` of the last failure (``float`` seconds) or ``None``.
    :ivar last_success_time: ``now`` of the last success (``float`` seconds) or ``None``.
    :ivar opened: how many times the breaker opened (``int``).
    """

    endpoint: Endpoint
    state: BreakerState
    failures: int
    successes: int
    requests: int
    last_failure_time: float | None
    last_success_time: float | None
    opened: int


#: ``listener(breaker, old_state, now)``: a :class:`CircuitBreaker` changed state.
BreakerListener = Callable[["CircuitBreaker", BreakerState, float], None]


class CircuitBreaker:
    """The breaker of one endpoint.

    :param endpoint: the endpoint guarded (:class:`~trio_maint.Endpoint`).
    :param failure_threshold: consecutive failures that open it (``int`` >= 1, default 5).
    :param reset_timeout: seconds after the last failure before trial dials are admitted
        (``float`` >= 0, default 60.0).
    :param max_requests: trial dials admitted per half-open episode, and successes needed
        to close (``int`` >= 1, default 3).
    :param on_change: ``on_change(breaker, old_state, now)``, called after each change
        of state (not on ``reset()``), or ``None``.
    :raises ValueError: a parameter is out of range.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        failure_threshold: int = 5,
        reset_timeout: float = 60.0,
        max_requests: int = 3,
        on_change: BreakerListener | None = None,
    ) -> None:
        if failure_threshold < 1:
            raise ValueError("failure_threshold: must be >= 1")
        if reset_timeout < 0:
            raise ValueError("reset_timeout: must be >= 0")
        if max_requests < 1:
            raise ValueError("max_requests: must be >= 1")
        self.endpoint: Final = endpoint
        self.failure_threshold: Final = failure_threshold
        self.reset_timeout: Final = float(reset_timeout)
        self.max_requests: Final = max_requests
        self._state = BreakerState.CLOSED
        self._failures = 0
        self._successes = 0
        self._requests = 0
        self._last_failure: float | None = None
        self._last_success: float | None = None
        self._half_open_since = 0.0
        self._opened = 0
        self.on_change = on_change

    def _set(self, state: BreakerState, now: float) -> None:
        old, self._state = self._state, state
        if old is not state and self.on_change is not None:
            self.on_change(self, old, now)

    @property
    def state(self) -> BreakerState:
        """The current :class:`BreakerState` (not advanced by time; see :meth:`allow`)."""
        return self._state

    def blocks(self, now: float) -> bool:
        """Whether a dial would be refused at ``now`` (``bool``), without changing
        anything: ``open`` until ``reset_timeout`` has passed since the last failure;
        ``half-open`` once its ``max_requests`` trial dials are out, until the episode is
        ``reset_timeout`` old. The one rule :meth:`allow` applies."""
        if self._state is BreakerState.OPEN:
            since = self._last_failure if self._last_failure is not None else now
            return now - since < self.reset_timeout
        if self._state is BreakerState.HALF_OPEN:
            return (
                self._requests >= self.max_requests
                and now - self._half_open_since < self.reset_timeout
            )
        return False

    def allow(self, now: float) -> bool:
        """Ask whether a dial may happen now; call once per dial, then report its outcome
        with :meth:`record_success`, :meth:`record_failure` or :meth:`release`.

        ``closed`` admits everything. ``open`` admits nothing until ``reset_timeout`` has
        passed since the last failure; then the breaker turns ``half-open``. ``half-open``
        admits ``max_requests`` trial dials per episode; if their outcomes never arrive, a
        new episode starts after another ``reset_timeout``, so the breaker cannot stay
        stuck (see :meth:`blocks`).

        :returns: ``True`` if the dial may go ahead (``bool``).
        """
        if self.blocks(now):
            return False
        if self._state is BreakerState.OPEN or (
            self._state is BreakerState.HALF_OPEN and self._requests >= self.max_requests
        ):
            self._enter_half_open(now)
        if self._state is BreakerState.HALF_OPEN:
            self._requests += 1
        return True

    def _enter_half_open(self, now: float) -> None:
        self._requests = 0
        self._successes = 0
        self._half_open_since = now
        self._set(BreakerState.HALF_OPEN, now)
        # Per breaker, and MOVINGs choose the endpoints: rate-limited across breakers.
        log_limited(
            logger,
            logging.INFO,
            "circuit_breaker_half_open",
            now,
            "circuit breaker for %s is half-open, admitting trial handoffs",
            self.endpoint,
            extra={"event": "circuit_breaker_half_open", "endpoint": str(self.endpoint)},
        )

    def record_failure(self, now: float) -> None:
        """Report a failed dial at ``now``: count it; open the breaker at the threshold
        (``closed``) or at once (``half-open``); an open breaker's wait restarts."""
        self._last_failure = now
        self._failures += 1
        if self._state is BreakerState.HALF_OPEN or (
            self._state is BreakerState.CLOSED and self._failures >= self.failure_threshold
        ):
            reopened = self._state is BreakerState.HALF_OPEN
            self._opened += 1
            self._set(BreakerState.OPEN, now)
            log_limited(
                logger,
                logging.WARNING,
                "circuit_breaker_opened",
                now,
                "circuit breaker for %s %s after %d failures",
                self.endpoint,
                "re-opened" if reopened else "opened",
                self._failures,
                extra={
                    "event": "circuit_breaker_opened",
                    "endpoint": str(self.endpoint),
                    "failures": self._failures,
                },
            )

    def record_success(self, now: float) -> None:
        """Report a successful handoff at ``now``: in ``closed`` the failure count restarts
        at 0; in ``half-open`` it counts towards ``max_requests`` successes, which close
        the breaker."""
        self._last_success = now
        if self._state is BreakerState.CLOSED:
            self._failures = 0
        elif self._state is BreakerState.HALF_OPEN:
            self._successes += 1
            if self._successes >= self.max_requests:
                self._failures = 0
                self._requests = 0
                self._set(BreakerState.CLOSED, now)
                log_limited(
                    logger,
                    logging.INFO,
                    "circuit_breaker_closed",
                    now,
                    "circuit breaker for %s closed after %d successes",
                    self.endpoint,
                    self._successes,
                    extra={"event": "circuit_breaker_closed", "endpoint": str(self.endpoint)},
                )

    def release(self) -> None:
        """Report that an admitted dial ended with no verdict on the endpoint (cancelled, or
        failed after connecting): a half-open trial slot is given back."""
        if self._state is BreakerState.HALF_OPEN and self._requests > 0:
            self._requests -= 1

    def reset(self) -> None:
        """Back to ``closed`` with every counter and timestamp cleared."""
        self._state = BreakerState.CLOSED
        self._failures = self._successes = self._requests = 0
        self._last_failure = self._last_success = None

    def stats(self) -> BreakerStats:
        """A :class:`BreakerStats` snapshot."""
        return BreakerStats(
            endpoint=self.endpoint,
            state=self._state,
            failures=self._failures,
            successes=self._successes,
            requests=self._requests,
            last_failure_time=self._last_failure,
            last_success_time=self._last_success,
            opened=self._opened,
        )


class BreakerRegistry:
    """The :class:`CircuitBreaker` of every endpoint dialed, created on first use and
    bounded: past ``max_size`` breakers the least recently used is dropped, and breakers
    nobody asked for in ``idle_ttl`` seconds are dropped too (checked at most every
    5 minutes, inside ``get``; no background task). A hostile stream of MOVINGs to
    distinct endpoints therefore cannot grow it without bound.

    :param failure_threshold: as :class:`CircuitBreaker` (``int``, default 5).
    :param reset_timeout: as :class:`CircuitBreaker` (``float`` seconds, default 60.0).
    :param max_requests: as :class:`CircuitBreaker` (``int``, default 3).
    :param idle_ttl: seconds (``float``, default 1800.0) after which an unused breaker
        is forgotten.
    :param max_size: most breakers kept (``int`` >= 1, default 1024).
    :raises ValueError: a parameter is out of range.
    """

    def __init__(
        self,
        *,
        failure_threshold: int = 5,
        reset_timeout: float = 60.0,
        max_requests: int = 3,
        idle_ttl: float = BREAKER_IDLE_TTL,
        max_size: int = 1024,
    ) -> None:
        # Validate once, eagerly, with a throwaway breaker.
        CircuitBreaker(
            Endpoint("validate"),
            failure_threshold=failure_threshold,
            reset_timeout=reset_timeout,
            max_requests=max_requests,
        )
        if max_size < 1:
            raise ValueError("max_size: must be >= 1")
        self._params = (failure_threshold, float(reset_timeout), max_requests)
        self._idle_ttl = idle_ttl
        self.max_size: Final = max_size
        # Least recently used first; the value is the last use (``now``).
        self._breakers: OrderedDict[Endpoint, tuple[CircuitBreaker, float]] = OrderedDict()
        self._last_prune: float | None = None
        #: Breakers dropped because the registry was full (``int``).
        self.evicted = 0
        #: Called after any breaker of the registry changed state (a
        #: :data:`BreakerListener`), or ``None``: the maintenance shell reports it as a
        #: :class:`~trio_maint.CircuitBreakerChanged` event.
        self.on_change: BreakerListener | None = None

    @classmethod
    def from_config(cls, config: MaintConfig, *, max_size: int = 1024) -> BreakerRegistry:
        """A registry with the ``circuit_breaker_*`` settings of ``config``
        (:class:`~trio_maint.MaintConfig`), keeping at most ``max_size`` breakers."""
        return cls(
            failure_threshold=config.circuit_breaker_failure_threshold,
            reset_timeout=config.circuit_breaker_reset_timeout,
            max_requests=config.circuit_breaker_max_requests,
            max_size=max_size,
        )

    def get(self, endpoint: Endpoint, now: float) -> CircuitBreaker:
        """The breaker of ``endpoint`` (the same object every time while it is kept),
        created ``closed`` if needed; records ``now`` as its last use. Call it only for
        an endpoint about to be dialed (use :meth:`peek` to look)."""
        if self._last_prune is None:
            self._last_prune = now
        elif now - self._last_prune >= BREAKER_PRUNE_INTERVAL:
            self.prune(now)
        entry = self._breakers.get(endpoint)
        if entry is None:
            threshold, reset_timeout, max_requests = self._params
            breaker = CircuitBreaker(
                endpoint,
                failure_threshold=threshold,
                reset_timeout=reset_timeout,
                max_requests=max_requests,
                on_change=self._changed,
            )
            while len(self._breakers) >= self.max_size:
                self._breakers.popitem(last=False)
                self.evicted += 1
        else:
            breaker = entry[0]
            self._breakers.move_to_end(endpoint)
        self._breakers[endpoint] = (breaker, now)
        return breaker

    def _changed(self, breaker: CircuitBreaker, old: BreakerState, now: float) -> None:
        listener = self.on_change
        if listener is not None:
            listener(breaker, old, now)

    def peek(self, endpoint: Endpoint) -> CircuitBreaker | None:
        """The breaker of ``endpoint`` if there is one (``None`` otherwise); creates
        nothing and does not count as a use."""
        entry = self._breakers.get(endpoint)
        return None if entry is None else entry[0]

    def prune(self, now: float) -> int:
        """Forget breakers unused for ``idle_ttl`` seconds; returns how many (``int``)."""
        self._last_prune = now
        stale = [e for e, (_b, t) in self._breakers.items() if now - t >= self._idle_ttl]
        for endpoint in stale:
            del self._breakers[endpoint]
        if stale:
            logger.info(
                "removed %d/%d idle circuit breakers",
                len(stale),
                len(stale) + len(self._breakers),
                extra={"event": "circuit_breaker_cleanup", "removed": len(stale)},
            )
        return len(stale)

    def reset(self) -> None:
        """Reset every breaker to ``closed`` (see :meth:`CircuitBreaker.reset`)."""
        for breaker, _last in self._breakers.values():
            breaker.reset()

    def stats(self) -> tuple[BreakerStats, ...]:
        """A :class:`BreakerStats` per known endpoint, sorted by ``str(endpoint)``."""
        breakers = sorted((b for b, _t in self._breakers.values()), key=lambda b: str(b.endpoint))
        return tuple(b.stats() for b in breakers)

    def __len__(self) -> int:
        return len(self._breakers)
