"""The virtual-clock herd simulator (kernel_lib.sim.herd; Failure Recovery, "Tool Circuit Breakers",
Napkin Math 0.4): conservation of attempts, determinism, the deterministic herd against full
jitter over many seeds, and the shared breaker keeping fast fails off the service.

Fault model: a service that hangs and restarts (or slows and errs), a client timeout, retries with
the gateway's backoff, optionally one breaker shared by every agent. Invariants: every attempt ends
in exactly one outcome; what the breaker refuses never reaches the service; a half-open breaker
lets one canary through at a time. Expected values come from the scenario's own arithmetic, not
from a previous run.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st

from kernel_lib.course.exercises import nm0_4
from kernel_lib.errors import HerdConfigError
from kernel_lib.recovery.gateway.breaker import BreakerConfig
from kernel_lib.sim.herd import (
    OUTCOMES, POLICIES, HerdConfig, HerdPolicy, compare_herd, peak_rate_per_s, retry_wave, run_herd,
)

DET, JIT, BRK = POLICIES
SMALL_BREAKER = BreakerConfig(window_size=10, minimum_calls=10, failure_rate_threshold=0.5, cooldown_s=2.0,
                              cooldown_max_s=16.0, canary_timeout_s=3.0)


def check_conservation(r) -> None:
    t = r.totals
    assert t["attempts"] == sum(t[k] for k in OUTCOMES) + t["in_flight"]
    assert t["arrivals"] == t["attempts"] - t["fast_failed"]
    s = r.series
    assert sum(s["attempts"]) == t["attempts"] and sum(s["arrivals"]) == t["arrivals"]
    assert sum(s["goodput"]) == t["succeeded"] and sum(s["timeouts"]) == t["timed_out"]
    assert sum(s["fast_fails"]) == t["fast_failed"] and sum(s["rejected"]) == t["rejected"]
    assert sum(s["errors"]) == t["failed"]
    assert len({len(v) for v in s.values()}) == 1
    assert min(s["queue_depth"], default=0) >= 0
    if t["in_flight"] == 0 and t["scheduled"] == 0:
        assert t["calls_completed"] + t["calls_given_up"] == r.config["agents"] * r.config["calls_per_agent"]
        assert t["agents_done"] == r.config["agents"]
        assert s["queue_depth"][-1] == 0


scenarios = st.builds(
    HerdConfig,
    agents=st.integers(1, 120),
    calls_per_agent=st.integers(1, 3),
    think_s=st.sampled_from([0.0, 0.5, 2.0]),
    start_spread_s=st.sampled_from([0.0, 0.1, 2.0]),
    capacity_per_s=st.sampled_from([5.0, 50.0, 500.0]),
    timeout_s=st.sampled_from([0.5, 2.0, 5.0]),
    queue_limit=st.sampled_from([0, 5, 1_000_000]),
    outage_mode=st.sampled_from(["stall", "slow"]),
    outage_s=st.sampled_from([0.0, 1.0, 3.0, 8.0]),
    degraded_error_rate=st.sampled_from([0.0, 0.5, 1.0]),
    drop_expired=st.booleans(),
    base_s=st.sampled_from([0.1, 1.0]),
    max_retries=st.integers(0, 6),
    series_bin_s=st.sampled_from([0.1, 1.0]),
    horizon_s=st.sampled_from([5.0, 3600.0]),
)
policies = st.sampled_from([DET, JIT, BRK, HerdPolicy("small_breaker", "equal_jitter", SMALL_BREAKER),
                            HerdPolicy("budget", "decorrelated_jitter", None, budget_tokens=20.0)])


@settings(max_examples=120, deadline=None)
@given(cfg=scenarios, policy=policies, seed=st.integers(0, 2**32))
def test_every_attempt_is_served_timed_out_rejected_or_fast_failed(cfg, policy, seed):
    check_conservation(run_herd(cfg, policy, seed))


@settings(max_examples=40, deadline=None)
@given(cfg=scenarios, seed=st.integers(0, 2**32))
def test_what_the_breaker_refuses_never_reaches_the_service(cfg, seed):
    r = run_herd(cfg, HerdPolicy("b", "full_jitter", SMALL_BREAKER), seed, trace=True)
    reached = [e for e in r.trace if e["reached_service"]]
    assert len(reached) == r.totals["arrivals"] and len(r.trace) == r.totals["attempts"]
    assert all(e["outcome"] == "fast_failed" for e in r.trace if not e["reached_service"])
    assert all(e["breaker"] in ("closed", "half_open") for e in reached)
    # the same from the recorded transitions alone (attempts at the instant of a transition skipped:
    # the order of events within one instant is not in the transitions)
    trs = r.breaker_transitions
    at = {tr["at_s"] for tr in trs}

    def state_before(t: float) -> str:
        s = "closed"
        for tr in trs:
            if tr["at_s"] < t:
                s = tr["to_state"]
        return s
    for e in reached:
        if e["t_s"] not in at:
            assert state_before(e["t_s"]) in ("closed", "half_open"), e
    # half-open admits one canary at a time: no two admitted attempts in one half-open period
    periods = [(tr["at_s"], tr["generation"]) for tr in trs if tr["to_state"] == "half_open"]
    for at, gen in periods:
        end = next((tr["at_s"] for tr in trs if tr["generation"] == gen + 1), math.inf)
        assert sum(1 for e in reached if at <= e["t_s"] < end) <= 1


def test_the_breaker_trips_and_sheds_the_herd():
    r = run_herd(HerdConfig(agents=2000), BRK, seed=5, trace=True)
    check_conservation(r)
    assert r.totals["fast_failed"] > 0
    assert [t["to_state"] for t in r.breaker_transitions][:2] == ["open", "half_open"]
    assert any(t["reason"] == "canary_succeeded" for t in r.breaker_transitions)
    plain = run_herd(HerdConfig(agents=2000), JIT, seed=5)
    assert r.totals["arrivals"] < plain.totals["arrivals"]
    assert r.totals["wasted_server_s"] < plain.totals["wasted_server_s"]


def test_the_same_seed_gives_the_same_run_and_another_seed_another():
    cfg = HerdConfig(agents=300)
    a, b = run_herd(cfg, BRK, 11).to_json(), run_herd(cfg, BRK, 11).to_json()
    a.pop("wall_s"), b.pop("wall_s")
    assert a == b
    c = run_herd(cfg, BRK, 12).to_json()
    assert c["series"] != a["series"]


def test_deterministic_backoff_sends_the_whole_herd_within_one_dispatch_window():
    # every agent's call is held by the hung service and reset at the restart, at one instant:
    # deterministic backoff brings all of them back within the dispatch jitter
    n, cfg = 400, HerdConfig(agents=400, start_spread_s=1.0, outage_s=3.0)
    det = run_herd(cfg, DET, seed=1)
    assert det.totals["failed"] == n                       # the restart reset all of them
    assert det.peak_arrival_rate_per_s == n / cfg.dispatch_jitter_s
    assert det.peak_arrival_at_s == pytest.approx(cfg.outage_s + cfg.base_s, abs=2 * cfg.dispatch_jitter_s)
    jit = run_herd(cfg, JIT, seed=1)
    assert jit.peak_arrival_rate_per_s < det.peak_arrival_rate_per_s / 10


def test_full_jitter_peaks_below_deterministic_over_many_seeds():
    cfg = HerdConfig(agents=300, capacity_per_s=100.0)
    below = sum(run_herd(cfg, JIT, s).peak_arrival_rate_per_s <= run_herd(cfg, DET, s).peak_arrival_rate_per_s
                for s in range(25))
    assert below >= 24


def test_without_an_outage_every_call_succeeds_first_time():
    cfg = HerdConfig(agents=200, start_spread_s=10.0, outage_s=0.0, capacity_per_s=1000.0)
    for p in POLICIES:
        r = run_herd(cfg, p, 3)
        assert r.totals["attempts"] == r.totals["succeeded"] == 200 and not r.breaker_transitions


def test_a_full_queue_refuses_and_a_deadline_aware_server_wastes_nothing():
    cfg = HerdConfig(agents=500, start_spread_s=0.0, outage_s=0.0, capacity_per_s=50.0, queue_limit=10)
    r = run_herd(cfg, JIT, 2)
    check_conservation(r)
    assert r.totals["rejected"] > 0 and r.peak_queue_depth <= 10
    slow = HerdConfig(agents=500, start_spread_s=0.0, outage_s=0.0, capacity_per_s=50.0, timeout_s=1.0)
    wasteful, aware = run_herd(slow, JIT, 2), run_herd(HerdConfig(**{**slow.to_json(), "drop_expired": True}), JIT, 2)
    assert wasteful.totals["wasted_server_s"] > 0 and aware.totals["wasted_server_s"] == 0
    assert aware.totals["succeeded"] >= wasteful.totals["succeeded"]


def test_the_slow_outage_fails_a_share_of_calls():
    cfg = HerdConfig(agents=400, outage_mode="slow", outage_s=10.0, degraded_latency_s=0.5, degraded_error_rate=0.5,
                     capacity_per_s=1000.0, max_retries=20)
    r = run_herd(cfg, JIT, 9)
    check_conservation(r)
    first_share = r.totals["failed"] / r.totals["arrivals"]
    assert 0.2 < first_share < 0.6 and r.totals["calls_completed"] == 400


def test_compare_reports_every_policy_and_the_simulators_speed():
    out = compare_herd(HerdConfig(agents=200), seed=1, series=False)
    assert {"deterministic", "full_jitter", "full_jitter_breaker", "simulator", "config"} <= set(out)
    for k in ("deterministic", "full_jitter", "full_jitter_breaker"):
        assert {"peak_arrival_rate_per_s", "mean_arrival_rate_per_s", "peak_queue_depth", "mean_queue_depth",
                "goodput"} <= set(out[k]) and "series" not in out[k]
    sim = out["simulator"]
    assert sim["agent_steps"] == sum(out[k]["totals"]["attempts"] for k in ("deterministic", "full_jitter",
                                                                            "full_jitter_breaker"))
    assert sim["agent_steps_per_s"] > 0


# --- Napkin Math 0.4, drawn ---------------------------------------------------------------------------


def test_the_retry_wave_matches_napkin_math_0_4():
    p = nm0_4.DEFAULTS
    det = retry_wave(p["failing_agents"], p["timeout_ms"] / 1e3, p["base_ms"] / 1e3, p["cap_ms"] / 1e3,
                     p["retry_attempt"], p["dispatch_jitter_ms"] / 1e3, "exponential")
    s = nm0_4.solve()
    assert det[0] >= s["deterministic_wake_ms"] / 1e3 and det[-1] - det[0] < p["dispatch_jitter_ms"] / 1e3
    assert peak_rate_per_s(det, p["dispatch_jitter_ms"] / 1e3) == s["deterministic_peak_rate_per_s"]
    peaks = []
    for seed in range(1500):
        w = retry_wave(p["failing_agents"], 5.0, 1.0, 30.0, 1, 0.002, "full_jitter", seed)
        assert w[-1] - 5.0 <= s["jitter_window_ms"] / 1e3 + 0.002
        peaks.append(max(Counter(int(t // 0.002) for t in w).values()))
    mean, se = statistics.mean(peaks), statistics.stdev(peaks) / math.sqrt(len(peaks))
    assert abs(mean - s["jitter_expected_max_per_bin"]) < 5 * se + 0.01


# --- bad input ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, field", [
    ({"agents": 0}, "agents"), ({"capacity_per_s": 0.0}, "capacity_per_s"), ({"timeout_s": -1}, "timeout_s"),
    ({"outage_mode": "down"}, "outage_mode"), ({"degraded_error_rate": 1.5}, "degraded_error_rate"),
    ({"cap_s": 0.5}, "cap_s"), ({"max_retries": None}, "max_retries"), ({"drop_expired": 1}, "drop_expired"),
    ({"series_bin_s": 1e-6}, "series_bin_s")])
def test_a_bad_scenario_names_its_field(kwargs, field):
    with pytest.raises(HerdConfigError) as e:
        HerdConfig(**kwargs)
    assert e.value.field == field


def test_bad_policies_and_arguments_are_refused():
    with pytest.raises(HerdConfigError, match="strategy"):
        HerdPolicy("x", "linear")
    with pytest.raises(HerdConfigError, match="breaker"):
        HerdPolicy("x", breaker={"window_size": 3})
    with pytest.raises(HerdConfigError, match="seed"):
        run_herd(HerdConfig(agents=2), JIT, seed="1")
    with pytest.raises(HerdConfigError, match="distinct names"):
        compare_herd(HerdConfig(agents=2), policies=(JIT, JIT))
