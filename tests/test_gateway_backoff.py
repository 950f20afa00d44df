"""Jittered backoff (Failure Recovery, "Jittered backoff protocols", figure 4 (b); the AWS
Architecture Blog's four schedules) and the pitfall "Allowing unbounded retries".

Invariants: every delay lies in [0, cap]; deterministic exponential is exactly min(cap, T0 2^k);
full jitter's mean is half its ceiling; decorrelated stays in [T0, cap]; the same seed gives the
same delays; a policy with no bound is a typed config error; a budget stops retries.
"""

from __future__ import annotations

import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib._support.clock import ManualClock
from kernel_lib.errors import ConfigError, GatewayConfigError
from kernel_lib.recovery.gateway import (
    BACKOFF_STRATEGIES, BackoffPolicy, RetryBudget, backoff_delay_s, bucket_take, ceiling_s,
)

bases = st.floats(1e-4, 10.0)
caps = st.floats(1e-3, 1000.0)


@given(st.sampled_from(BACKOFF_STRATEGIES), bases, caps, st.integers(0, 1000), st.integers(0, 2**32))
@settings(max_examples=400, deadline=None)
def test_every_delay_is_within_zero_and_the_cap(strategy, base, cap, k, seed):
    cap = max(cap, base)
    rng = random.Random(seed)
    prev = None
    for kk in (k, min(k + 1, 1000), min(k + 2, 1000)):
        d = backoff_delay_s(strategy, base, cap, kk, rng, prev)
        assert 0.0 <= d <= cap
        if strategy == "decorrelated_jitter":
            assert d >= base
        if strategy == "equal_jitter":
            assert d >= ceiling_s(base, cap, kk) / 2
        prev = d


@given(bases, caps, st.integers(0, 1000))
def test_deterministic_is_t0_times_two_to_the_k_capped(base, cap, k):
    cap = max(cap, base)
    expected = cap if k > 60 else min(cap, base * 2 ** k)
    assert backoff_delay_s("exponential", base, cap, k, random.Random(0)) == pytest.approx(expected)


@pytest.mark.parametrize("k", [0, 1, 3, 10])
def test_full_jitter_mean_is_half_the_ceiling(k):
    policy = BackoffPolicy("full_jitter", base_s=1.0, cap_s=30.0)
    rng = random.Random(7)
    draws = [policy.delay_s(k, rng) for _ in range(20_000)]
    c = policy.ceiling_s(k)
    assert statistics.fmean(draws) == pytest.approx(c / 2, rel=0.03)
    assert policy.mean_delay_s(k) == c / 2
    assert min(draws) < 0.05 * c and max(draws) > 0.95 * c        # spread over the whole interval


def test_napkin_math_0_4_retry_one():
    """k=1, T0=1 s, T_max=30 s: deterministic waits exactly 2 s for everyone; full jitter spreads
    128 agents over [0, 2] s (a mean of 1 s)."""
    det = BackoffPolicy("exponential", base_s=1.0, cap_s=30.0)
    assert {det.delay_s(1, random.Random(i)) for i in range(128)} == {2.0}
    fj = BackoffPolicy("full_jitter", base_s=1.0, cap_s=30.0)
    rng = random.Random(42)
    waits = [fj.delay_s(1, rng) for _ in range(128)]
    assert all(0 <= w <= 2.0 for w in waits) and len(set(waits)) == 128


def test_the_same_seed_gives_the_same_schedule():
    for strategy in BACKOFF_STRATEGIES:
        p = BackoffPolicy(strategy, base_s=0.1, cap_s=5.0, max_retries=8)
        a, b = p.schedule(123), p.schedule(123)
        assert [a.next_delay_s() for _ in range(9)] == [b.next_delay_s() for _ in range(9)]


def test_max_retries_bounds_a_schedule():
    s = BackoffPolicy(max_retries=2).schedule(1)
    assert s.next_delay_s() is not None and s.next_delay_s() is not None
    assert s.next_delay_s() is None and s.exhausted_by == "max_retries" and s.retries == 2


def test_an_unbounded_policy_is_a_config_error():
    with pytest.raises(GatewayConfigError) as e:
        BackoffPolicy(max_retries=None)
    assert isinstance(e.value, ConfigError) and e.value.field == "max_retries"
    with pytest.raises(GatewayConfigError):         # a refilling bucket bounds a rate, not a count
        BackoffPolicy(max_retries=None, budget=RetryBudget(10, 1.0, clock=ManualClock()))
    fixed = BackoffPolicy(max_retries=None, budget=RetryBudget(3, clock=ManualClock()))
    s = fixed.schedule(0)
    assert [s.next_delay_s() is not None for _ in range(4)] == [True, True, True, False]
    assert s.exhausted_by == "budget"


def test_a_shared_budget_caps_retries_across_calls_and_refills_with_time():
    clock = ManualClock()
    budget = RetryBudget(4, refill_tokens_per_s=1.0, clock=clock)
    policy = BackoffPolicy(max_retries=10, budget=budget)
    granted = sum(policy.schedule(i).next_delay_s() is not None for i in range(10))
    assert granted == 4
    clock.advance(2.5)
    assert budget.available_tokens() == pytest.approx(2.5)
    assert sum(policy.schedule(i).next_delay_s() is not None for i in range(10)) == 2


@given(st.floats(0, 10), st.floats(0, 100), st.floats(0.1, 100), st.floats(0, 5), st.floats(0.1, 2))
def test_bucket_never_exceeds_capacity_or_goes_negative(tokens, dt, cap, rate, cost):
    tokens = min(tokens, cap)
    ok, after, last = bucket_take(tokens, 0.0, dt, capacity_tokens=cap, refill_tokens_per_s=rate, cost_tokens=cost)
    assert 0 <= after <= cap and last == dt
    assert ok == (min(cap, tokens + dt * rate) >= cost)


@pytest.mark.parametrize("kw", [{"strategy": "linear"}, {"base_s": 0}, {"cap_s": float("inf")},
                                {"base_s": 5, "cap_s": 1}, {"max_retries": -1}, {"max_retries": 1.5},
                                {"budget": 3}])
def test_bad_policies_are_typed_errors(kw):
    with pytest.raises(GatewayConfigError):
        BackoffPolicy(**kw)
