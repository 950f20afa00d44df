"""The clock the runtime reads, injected (Design principle 4: determinism is injected).

A clock is anything called with no arguments that returns seconds as a float: ``time.time`` (the
wall clock, seconds since the epoch) in live runs, a :class:`ManualClock` in tests, notebooks and
simulations. A decision never reads a clock itself: the gate reads it and records the reading as a
``RuntimeInput`` so that replay sees the same value (``kernel_lib.core.decisions``).
"""

from __future__ import annotations

import math
import time
from typing import Protocol, runtime_checkable

from kernel_lib._support.checks import check_seconds
from kernel_lib.errors import ConfigError

__all__ = ["Clock", "ManualClock", "wall_clock"]


@runtime_checkable
class Clock(Protocol):
    """``clock() -> seconds`` (float)."""

    def __call__(self) -> float: ...


def wall_clock() -> float:
    """The wall clock: seconds since the epoch (``time.time``)."""
    return time.time()


class ManualClock:
    """A clock for tests and notebooks: starts at ``start_s`` and moves only by :meth:`advance`.

    Call it like ``time.time``: ``clock()`` returns the current time in seconds."""

    def __init__(self, start_s: float = 1_000_000.0):
        self.now_s = check_seconds("ManualClock start_s", start_s)

    def __call__(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> float:
        """Move forward by ``seconds`` (≥ 0) and return the new time. Raises ConfigError otherwise."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) \
                or seconds < 0:
            raise ConfigError(f"a clock only moves forward by a finite number of seconds, got {seconds!r}")
        later = self.now_s + seconds
        if not math.isfinite(later):
            raise ConfigError(f"advancing the clock by {seconds!r} s from {self.now_s!r} s leaves finite time")
        self.now_s = later
        return self.now_s
