"""Shared knobs of the robustness tests (tests/test_robust_*.py).

``TRIO_MAINT_FUZZ_EXAMPLES`` selects the heavy profile: when it is set (the ``fuzz`` nox
session sets it to 100000), hypothesis tests run that many examples and the randomized
loops scale up accordingly; unset, the suite runs a few hundred cases, quickly.
"""

from __future__ import annotations

import logging
import os

from hypothesis import HealthCheck, settings

from trio_maint._sansio.loglimit import LOG_LIMITER

_ENV = os.environ.get("TRIO_MAINT_FUZZ_EXAMPLES", "").strip()

#: ``True`` when running under the ``fuzz`` session (heavy variants enabled).
FUZZ = bool(_ENV)

#: Examples for the main hypothesis test of a module.
EXAMPLES = int(_ENV) if FUZZ else 300

settings.register_profile(
    "trio-maint-robust",
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
ROBUST = settings.get_profile("trio-maint-robust")


def scaled(default: int, heavy: int) -> int:
    """``default`` rounds in the normal suite, ``heavy`` under the fuzz session."""
    return heavy if FUZZ else default


class WarningCounter(logging.Handler):
    """Collects WARNING-or-worse records of the client's loggers (not the simulator's)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("trio_maint") and not record.name.startswith(
            "trio_maint.testing"
        ):
            self.records.append(record)

    def __enter__(self) -> WarningCounter:
        LOG_LIMITER.reset()  # each (hypothesis) example starts with a fresh budget
        logging.getLogger("trio_maint").addHandler(self)
        return self

    @property
    def malformed(self) -> int:
        """Malformed maintenance frames accounted for: WARNINGs written, plus the ones
        the log limiter held back (reported by a later line, or still pending)."""
        kind = "notification_malformed"
        lines = [r for r in self.records if getattr(r, "event", None) == kind]
        held = sum(int(getattr(r, "suppressed", 0)) for r in lines)
        return len(lines) + held + LOG_LIMITER.pending().get(kind, 0)

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("trio_maint").removeHandler(self)
