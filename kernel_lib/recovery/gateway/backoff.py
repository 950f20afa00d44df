"""Retry backoff with jitter, always bounded (Failure Recovery, "Jittered backoff protocols",
figure 4 panel (b), Napkin Math 0.4; the pitfall "Allowing unbounded retries").

The four schedules are the ones compared in Marc Brooker, "Exponential Backoff And Jitter", AWS
Architecture Blog, 4 March 2015 (https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/),
written here with the chapter's names: ``T0`` = ``base_s``, ``T_max`` = ``cap_s``, ``k`` = the
zero-indexed retry (``k = 0`` is the wait before the first retry)::

    exponential           t(k) = min(T_max, T0 * 2**k)                      (deterministic)
    full_jitter           t(k) ~ U(0, min(T_max, T0 * 2**k))                (the chapter's choice)
    equal_jitter          c = min(T_max, T0 * 2**k);  t(k) = c/2 + U(0, c/2)
    decorrelated_jitter   t(k) = min(T_max, U(T0, 3 * t(k-1))),  t(-1) = T0

Every delay lies in ``[0, T_max]`` (decorrelated: in ``[min(T0, T_max), T_max]``). Randomness is
injected: a :class:`random.Random` (or a seed) is passed in, so the virtual-clock simulator and a
notebook get the same delays from the same seed, and the live gateway uses a freshly seeded one.

A policy is never unbounded. :class:`BackoffPolicy` needs ``max_retries`` (retries after the first
call), or a :class:`RetryBudget` that does not refill (a fixed number of tokens): constructing a
policy with neither raises :class:`~kernel_lib.errors.GatewayConfigError`. A refilling token bucket
bounds the *rate* of retries across all callers (gRPC's retry throttling and Finagle's
``RetryBudget`` work this way), not the number of retries of one call, so with a refilling bucket
``max_retries`` is still required.

Pure parts: :func:`ceiling_s`, :func:`backoff_delay_s`, :func:`bucket_take` (functions of their
arguments and the injected generator). Stateful helpers: :class:`BackoffSchedule` (one call's
retries) and :class:`RetryBudget` (a thread-safe token bucket on an injected clock).
"""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from kernel_lib._support.clock import wall_clock
from kernel_lib.errors import GatewayConfigError

__all__ = ["BACKOFF_STRATEGIES", "BackoffStrategy", "BackoffPolicy", "RetryBudget", "BackoffSchedule",
           "ceiling_s", "backoff_delay_s", "bucket_take", "make_rng", "AWS_BACKOFF_SOURCE"]

BackoffStrategy = Literal["exponential", "full_jitter", "equal_jitter", "decorrelated_jitter"]
BACKOFF_STRATEGIES: tuple[str, ...] = ("exponential", "full_jitter", "equal_jitter", "decorrelated_jitter")

#: where the four formulas come from (cited in notebooks and the comparison table)
AWS_BACKOFF_SOURCE = ("Marc Brooker, \"Exponential Backoff And Jitter\", AWS Architecture Blog, 2015-03-04, "
                      "https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/")

#: the largest retry index a policy accepts (2**k stays a finite float well past the cap)
RETRIES_MAX = 1000


def _seconds(name: str, value: object, *, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or (value <= 0 if positive else value < 0):
        raise GatewayConfigError(f"{name} must be a finite number of seconds {'> 0' if positive else '>= 0'}, "
                                 f"got {value!r}", field=name)
    return float(value)


def make_rng(rng: "random.Random | int | None") -> random.Random:
    """The generator a schedule draws from: ``rng`` itself, a ``random.Random(seed)`` for an int,
    or a freshly seeded one (from the OS) for None (live use). Raises GatewayConfigError otherwise."""
    if isinstance(rng, random.Random):
        return rng
    if rng is None:
        return random.Random()
    if isinstance(rng, bool) or not isinstance(rng, int):
        raise GatewayConfigError(f"rng must be a random.Random, an int seed or None, got {type(rng).__name__}",
                                 field="rng")
    return random.Random(rng)


class RetryBudget:
    """A token bucket of retries shared by every call that holds it (thread-safe).

    Args:
        capacity_tokens: the bucket's size (> 0); it starts full.
        refill_tokens_per_s: tokens added per second (>= 0; 0: a fixed allowance that never comes
            back, which on its own bounds a policy).
        retry_cost_tokens: tokens one retry takes (> 0, default 1).
        clock: seconds as a float (injected; the wall clock by default).

    A retry is allowed only when a whole ``retry_cost_tokens`` is in the bucket: the budget caps the
    retry pressure all callers together put on a dependency, whatever each one's schedule says.

    Raises:
        GatewayConfigError: a field out of range.
    """

    def __init__(self, capacity_tokens: float, refill_tokens_per_s: float = 0.0, *, retry_cost_tokens: float = 1.0,
                 clock: Callable[[], float] = wall_clock):
        self.capacity_tokens = _seconds("capacity_tokens", capacity_tokens)
        self.refill_tokens_per_s = _seconds("refill_tokens_per_s", refill_tokens_per_s, positive=False)
        self.retry_cost_tokens = _seconds("retry_cost_tokens", retry_cost_tokens)
        if self.retry_cost_tokens > self.capacity_tokens:
            raise GatewayConfigError(f"retry_cost_tokens {retry_cost_tokens} exceeds capacity_tokens "
                                     f"{capacity_tokens}: no retry could ever be paid for", field="retry_cost_tokens")
        if not callable(clock):
            raise GatewayConfigError("clock must be callable (() -> seconds)", field="clock")
        self._clock = clock
        self._lock = threading.Lock()
        self.tokens = self.capacity_tokens
        self._last_s = float(clock())

    @property
    def refills(self) -> bool:
        """True when tokens come back over time (then the budget bounds a rate, not a count)."""
        return self.refill_tokens_per_s > 0

    def try_take(self) -> bool:
        """Take one retry's tokens if the bucket holds them; True when taken."""
        with self._lock:
            ok, self.tokens, self._last_s = bucket_take(self.tokens, self._last_s, float(self._clock()),
                                                        capacity_tokens=self.capacity_tokens,
                                                        refill_tokens_per_s=self.refill_tokens_per_s,
                                                        cost_tokens=self.retry_cost_tokens)
            return ok

    def available_tokens(self) -> float:
        """The tokens in the bucket now (after refill), without taking any."""
        with self._lock:
            elapsed = max(0.0, float(self._clock()) - self._last_s)
            return min(self.capacity_tokens, self.tokens + elapsed * self.refill_tokens_per_s)


def bucket_take(tokens: float, last_s: float, now_s: float, *, capacity_tokens: float, refill_tokens_per_s: float,
                cost_tokens: float) -> tuple[bool, float, float]:
    """One token-bucket step, pure: refill for the time since ``last_s`` (a clock that went back
    refills nothing), then take ``cost_tokens`` if there are that many.

    Returns ``(taken, tokens_after, last_s_after)``."""
    elapsed = now_s - last_s
    if elapsed > 0:
        tokens = min(capacity_tokens, tokens + elapsed * refill_tokens_per_s)
        last_s = now_s
    if tokens >= cost_tokens:
        return True, tokens - cost_tokens, last_s
    return False, tokens, last_s


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """How long to wait before each retry, and how many retries at most (module docstring).

    Fields:
        strategy: one of :data:`BACKOFF_STRATEGIES` (default ``"full_jitter"``, figure 4 (b)).
        base_s: T0, the base slot (s, > 0; the chapter's examples: 0.1 s and 1 s).
        cap_s: T_max, the ceiling of every delay (s, >= base_s; the chapter's example: 30 s).
        max_retries: retries after the first call (>= 0), or None when ``budget`` alone bounds
            them (a non-refilling budget only).
        budget: a :class:`RetryBudget` shared by the calls of this policy, or None.

    Raises:
        GatewayConfigError: a field out of range, an unknown strategy, or no bound at all
        (``max_retries`` None and no non-refilling budget: unbounded retries are refused).
    """

    strategy: str = "full_jitter"
    base_s: float = 0.1
    cap_s: float = 30.0
    max_retries: int | None = 3
    budget: RetryBudget | None = None

    def __post_init__(self) -> None:
        if self.strategy not in BACKOFF_STRATEGIES:
            raise GatewayConfigError(f"strategy must be one of {', '.join(BACKOFF_STRATEGIES)}, got "
                                     f"{self.strategy!r}", field="strategy")
        object.__setattr__(self, "base_s", _seconds("base_s", self.base_s))
        object.__setattr__(self, "cap_s", _seconds("cap_s", self.cap_s))
        if self.cap_s < self.base_s:
            raise GatewayConfigError(f"cap_s ({self.cap_s} s) is below base_s ({self.base_s} s): T_max must be "
                                     "at least T0", field="cap_s")
        if self.max_retries is not None and (type(self.max_retries) is not int
                                             or not 0 <= self.max_retries <= RETRIES_MAX):
            raise GatewayConfigError(f"max_retries must be an integer in [0, {RETRIES_MAX}] or None, got "
                                     f"{self.max_retries!r}", field="max_retries")
        if self.budget is not None and not isinstance(self.budget, RetryBudget):
            raise GatewayConfigError(f"budget must be a RetryBudget or None, got {type(self.budget).__name__}",
                                     field="budget")
        if self.max_retries is None:
            if self.budget is None:
                raise GatewayConfigError("an unbounded retry policy is refused: give max_retries, or a RetryBudget "
                                         "that does not refill (Failure Recovery, pitfall 'Allowing unbounded "
                                         "retries')", field="max_retries")
            if self.budget.refills:
                raise GatewayConfigError("a refilling RetryBudget bounds the rate of retries, not the number of "
                                         "retries of one call: give max_retries too", field="max_retries")

    def ceiling_s(self, k: int) -> float:
        """min(T_max, T0 * 2**k): the deterministic delay before retry ``k`` (s)."""
        return ceiling_s(self.base_s, self.cap_s, k)

    def delay_s(self, k: int, rng: random.Random, previous_s: float | None = None) -> float:
        """The delay before retry ``k`` (s) drawn from ``rng`` (:func:`backoff_delay_s`)."""
        return backoff_delay_s(self.strategy, self.base_s, self.cap_s, k, rng, previous_s)

    def mean_delay_s(self, k: int) -> float:
        """The expected delay before retry ``k`` (s) for the three memoryless strategies:
        exponential c, full jitter c/2, equal jitter 3c/4 (c = :meth:`ceiling_s`). Raises
        GatewayConfigError for decorrelated jitter (its mean depends on the previous draw)."""
        c = self.ceiling_s(k)
        if self.strategy == "exponential":
            return c
        if self.strategy == "full_jitter":
            return c / 2
        if self.strategy == "equal_jitter":
            return 0.75 * c
        raise GatewayConfigError("decorrelated jitter has no closed-form mean per retry (it depends on the "
                                 "previous delay); simulate it", field="strategy")

    def schedule(self, rng: "random.Random | int | None" = None) -> "BackoffSchedule":
        """A fresh :class:`BackoffSchedule` for one call."""
        return BackoffSchedule(self, rng)


def _retry_index(k: object) -> int:
    if type(k) is not int or not 0 <= k <= RETRIES_MAX:
        raise GatewayConfigError(f"the retry index k must be an integer in [0, {RETRIES_MAX}], got {k!r}", field="k")
    return k


def _slot(base_s: object, cap_s: object) -> tuple[float, float]:
    """T0 and T_max checked as :class:`BackoffPolicy` checks them (finite, > 0, T0 <= T_max): a
    bad pair given straight to the pure functions gave negative, NaN or astronomically large delays."""
    b, c = _seconds("base_s", base_s), _seconds("cap_s", cap_s)
    if c < b:
        raise GatewayConfigError(f"cap_s ({c} s) is below base_s ({b} s): T_max must be at least T0", field="cap_s")
    return b, c


def ceiling_s(base_s: float, cap_s: float, k: int) -> float:
    """min(cap_s, base_s * 2**k) in seconds, for a retry index k in [0, 1000] (no overflow).
    Raises GatewayConfigError for a k out of range, or a base_s / cap_s that is not finite and
    > 0 with base_s <= cap_s."""
    k = _retry_index(k)
    base_s, cap_s = _slot(base_s, cap_s)
    return min(cap_s, base_s * (2.0 ** k))


def backoff_delay_s(strategy: str, base_s: float, cap_s: float, k: int, rng: random.Random,
                    previous_s: float | None = None) -> float:
    """The delay before retry ``k`` (seconds) under ``strategy`` (module docstring's formulas),
    drawing from ``rng``. ``previous_s`` is the previous delay (decorrelated jitter only; None:
    T0). Deterministic exponential draws nothing.

    Returns a float in [0, cap_s]. Raises GatewayConfigError for an unknown strategy, a bad k,
    bad base_s / cap_s (:func:`ceiling_s`), or a ``previous_s`` that is not None or a number >= 0
    (an infinite one draws up to the cap)."""
    if strategy == "exponential":
        return ceiling_s(base_s, cap_s, k)
    if strategy == "full_jitter":
        return rng.uniform(0.0, ceiling_s(base_s, cap_s, k))
    if strategy == "equal_jitter":
        c = ceiling_s(base_s, cap_s, k)
        return c / 2 + rng.uniform(0.0, c / 2)
    if strategy == "decorrelated_jitter":
        _retry_index(k)
        base_s, cap_s = _slot(base_s, cap_s)
        if previous_s is not None and (isinstance(previous_s, bool) or not isinstance(previous_s, (int, float))
                                       or not previous_s >= 0):
            raise GatewayConfigError(f"previous_s must be None or a number of seconds >= 0, got {previous_s!r}",
                                     field="previous_s")
        prev = base_s if previous_s is None else previous_s
        return min(cap_s, rng.uniform(base_s, max(base_s, 3.0 * prev)))
    raise GatewayConfigError(f"strategy must be one of {', '.join(BACKOFF_STRATEGIES)}, got {strategy!r}",
                             field="strategy")


class BackoffSchedule:
    """The retries of one call under a :class:`BackoffPolicy`: each :meth:`next_delay_s` is the
    wait before the next retry, or None when the policy allows no more (``max_retries`` used up,
    or the shared budget empty). Not shared between calls; not thread-safe (one call's retries
    are sequential).

    ``retries``: the retries granted so far; ``delays_s``: their delays; ``exhausted_by``:
    ``"max_retries"`` or ``"budget"`` once the schedule said no, else None."""

    def __init__(self, policy: BackoffPolicy, rng: "random.Random | int | None" = None):
        if not isinstance(policy, BackoffPolicy):
            raise GatewayConfigError(f"policy must be a BackoffPolicy, got {type(policy).__name__}", field="policy")
        self.policy = policy
        self.rng = make_rng(rng)
        self.retries = 0
        self.delays_s: list[float] = []
        self.exhausted_by: str | None = None

    def next_delay_s(self) -> float | None:
        """The delay before the next retry (s), or None when no retry is allowed (then
        ``exhausted_by`` says why). A granted retry takes its tokens from the budget."""
        p = self.policy
        if self.exhausted_by is not None:
            return None
        if p.max_retries is not None and self.retries >= p.max_retries:
            self.exhausted_by = "max_retries"
            return None
        if self.retries >= RETRIES_MAX:
            self.exhausted_by = "max_retries"
            return None
        if p.budget is not None and not p.budget.try_take():
            self.exhausted_by = "budget"
            return None
        prev = self.delays_s[-1] if self.delays_s else None
        d = p.delay_s(self.retries, self.rng, prev)
        self.retries += 1
        self.delays_s.append(d)
        return d
