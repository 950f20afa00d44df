"""Failure Recovery, Napkin Math 0.4 (exercise nm0.4, bulkhead capacity and jitter under RPC stress):
the solver against the chapter's printed figures, against a thread-by-thread count and against
simulated retries of its own givens; the busiest-bin distribution against brute-force enumeration
and a seeded Monte Carlo; the named readings, bad givens and the CLI.

The generic checks every registered exercise passes (seeds, wrong answers, notebooks under
papermill) are in test_exercises.py and test_exercise_grade.py. Expected values are computed here
by other means (counting, enumeration, sampling), or are the chapter's printed text.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st

from kernel_lib.cli import main
from kernel_lib.course.exercises import accept_readings, canonical_id, format_report, get
from kernel_lib.course.exercises import nm0_4
from kernel_lib.errors import ConfigError

D = nm0_4.DEFAULTS


def graded(params=None) -> dict:
    sol = nm0_4.solve(params)
    return {k: sol[k] for k in nm0_4.GRADED}


def pool_by_counting(p: dict) -> dict:
    """The pool as calls taking threads one at a time: waves of M, each held for T."""
    threads = [0.0] * p["pool_threads"]          # time each thread is next free, ms
    for _ in range(p["agents"]):
        i = min(range(len(threads)), key=threads.__getitem__)
        threads[i] += p["timeout_ms"]
    # the pool is full while every thread is busy: until the earliest thread frees for good
    full_until = min(threads) if p["agents"] >= p["pool_threads"] else 0.0
    blocked = sum(1 for t in threads if t > 0)
    return {"blocked": blocked, "free": p["pool_threads"] - blocked, "frozen": full_until}


def brute_max_cdf(n: int, probs: list[float], m: int) -> float:
    total = 0.0
    for xs in itertools.product(range(len(probs)), repeat=n):
        if max(Counter(xs).values()) <= m:
            total += math.prod(probs[x] for x in xs)
    return total


def test_every_form_of_the_id_names_napkin_math_0_4():
    for form in ("nm0.4", "NM0.4", "nm0_4", " Nm0_4 "):
        assert get(form) is nm0_4 and canonical_id(form) == "nm0.4"


def test_the_parameter_names_and_defaults_are_the_issues():
    assert D == {"agents": 256, "pool_threads": 300, "timeout_ms": 5000.0, "base_ms": 1000.0, "cap_ms": 30000.0,
                 "failing_agents": 128, "dispatch_jitter_ms": 2.0, "retry_attempt": 1}
    assert [p.name for p in nm0_4.PARAMS] == list(D)


def test_the_defaults_give_the_printed_retry_figures_and_not_the_printed_exhaustion():
    s = nm0_4.solve()
    assert s["free_threads"] == 44 and s["blocked_threads"] == 256
    assert s["deterministic_wake_ms"] == 7000 and s["deterministic_peak_rate_per_s"] == 64_000
    assert s["jitter_window_ms"] == 2000 and s["jitter_mean_rate_per_s"] == 64 and s["peak_reduction"] == 1000
    # the block's "t_exhaust < 200 ms" does not follow: 256 calls on 300 threads leave 44 free
    assert s["pool_exhausted_by_agents"] is False and s["t_exhaust_ms"] is None and s["frozen_window_ms"] == 0
    assert s["min_secondary_rate_to_exhaust_per_s"] == pytest.approx(44 / 5)
    rows = {r["claim"]: r for r in nm0_4.chapter_figures()}
    assert not rows["time to thread exhaustion"]["holds"] and not rows["runtime frozen for"]["holds"]
    held = {c for c, r in rows.items() if r["holds"]}
    assert held == set(rows) - {"time to thread exhaustion", "runtime frozen for"}, rows
    assert "440/s" in rows["time to thread exhaustion"]["note"]
    # the chapter's figure is what its own burst assumption gives, and is graded as that reading
    assert s["alternative"]["chapter_secondary_burst"] == {"pool_exhausted_by_agents": True,
                                                           "frozen_window_ms": 4800.0}


def test_a_changed_given_moves_the_answers():
    s = nm0_4.solve({"pool_threads": 200})
    assert s["pool_exhausted_by_agents"] is True and s["free_threads"] == 0 and s["queued_agents"] == 56
    assert s["frozen_window_ms"] == 5000 and s["min_secondary_rate_to_exhaust_per_s"] == 0
    assert nm0_4.solve({"retry_attempt": 5})["jitter_window_ms"] == 30000        # the cap binds at 32 s


@pytest.mark.parametrize("seed", range(20))
def test_the_pool_matches_counting_threads(seed):
    p = nm0_4.validate_params(nm0_4.generate(seed))
    s, c = nm0_4.solve(p), pool_by_counting(p)
    assert (s["blocked_threads"], s["free_threads"]) == (c["blocked"], c["free"])
    assert s["pool_exhausted_by_agents"] == (c["free"] == 0)
    assert s["frozen_window_ms"] == pytest.approx(c["frozen"])


@pytest.mark.parametrize("seed", range(20))
def test_the_retries_match_sampled_waits(seed):
    p = nm0_4.validate_params(nm0_4.generate(seed))
    s = nm0_4.solve(p)
    rng = random.Random(seed)
    k, ceiling = p["retry_attempt"], min(p["cap_ms"], p["base_ms"] * 2 ** p["retry_attempt"])
    waits = [rng.uniform(0.0, ceiling) for _ in range(2000)]
    assert max(waits) <= s["jitter_window_ms"] and max(waits) > 0.98 * s["jitter_window_ms"]
    assert s["deterministic_wait_ms"] == p["base_ms"] * 2 ** k
    assert s["deterministic_wake_ms"] == p["timeout_ms"] + p["base_ms"] * 2 ** k
    assert s["jitter_mean_rate_per_s"] == pytest.approx(p["failing_agents"] / (ceiling / 1000))
    assert s["peak_reduction"] == pytest.approx(ceiling / p["dispatch_jitter_ms"])


def test_the_exhaustion_time_matches_calls_arriving_one_by_one():
    for rate in (5.0, 8.8, 17.6, 440.0):
        r = nm0_4.exhaust_time_ms(None, rate)
        # the j-th extra blocking call arrives at j / rate s; the pool is full at the 44th
        t = 44 / rate * 1000
        assert r["calls_needed"] == 44
        if t < 5000:
            assert r["t_exhaust_ms"] == pytest.approx(t) and r["frozen_window_ms"] == pytest.approx(5000 - t)
        else:
            assert r["t_exhaust_ms"] is None and r["frozen_window_ms"] == 0 and not r["exhausted_before_timeout"]
    with pytest.raises(ConfigError, match="secondary_calls_per_s"):
        nm0_4.exhaust_time_ms(None, -1.0)


# --- the busiest bin ---------------------------------------------------------------------------------


@pytest.mark.parametrize("n, window_ms, bin_ms", [(4, 4.0, 2.0), (5, 5.0, 2.0), (6, 6.0, 2.0), (5, 4.5, 1.0),
                                                  (3, 10.0, 2.0), (7, 3.0, 1.0)])
def test_the_busiest_bin_cdf_matches_enumeration(n, window_ms, bin_ms):
    full = int(window_ms // bin_ms)
    partial = window_ms / bin_ms - full
    probs = [bin_ms / window_ms] * full + ([partial * bin_ms / window_ms] if partial else [])
    cdf = nm0_4.max_bin_count_cdf(n, window_ms, bin_ms)
    for m, p in enumerate(cdf):
        assert p == pytest.approx(brute_max_cdf(n, probs, m), abs=1e-12)
    assert cdf[-1] == 1.0


@pytest.mark.parametrize("n, window_ms, bin_ms", [(128, 2000.0, 2.0), (64, 5.0, 2.0), (300, 200.0, 2.0),
                                                  (500, 1000.0, 5.0)])
def test_the_expected_busiest_bin_matches_a_seeded_monte_carlo(n, window_ms, bin_ms):
    rng = random.Random(f"{n}:{window_ms}")
    runs = 3000
    draws = [max(Counter(int(rng.uniform(0.0, window_ms) // bin_ms) for _ in range(n)).values())
             for _ in range(runs)]
    mean = sum(draws) / runs
    sd = math.sqrt(sum((x - mean) ** 2 for x in draws) / (runs - 1))
    e = nm0_4.expected_max_bin_count(n, window_ms, bin_ms)
    assert abs(e - mean) < 5 * sd / math.sqrt(runs) + 1e-9, (e, mean, sd)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 400), bins=st.integers(1, 3000), bin_ms=st.sampled_from([0.5, 1.0, 2.0, 5.0]))
def test_the_busiest_bin_distribution_is_a_distribution(n, bins, bin_ms):
    window = bins * bin_ms
    cdf = nm0_4.max_bin_count_cdf(n, window, bin_ms)
    assert all(0.0 <= p <= 1.0 for p in cdf) and cdf[-1] == 1.0
    assert all(b >= a - 1e-12 for a, b in zip(cdf, cdf[1:]))
    e = nm0_4.expected_max_bin_count(n, window, bin_ms)
    assert math.ceil(n / bins) - 1e-9 <= e <= n + 1e-9      # pigeonhole below, all in one bin above
    assert cdf[math.ceil(n / bins) - 1] == 0.0                # fewer than n/bins in every bin is impossible


def test_the_mean_is_not_the_peak():
    s = nm0_4.solve()
    # 128 arrivals in 1,000 bins: two or three share the busiest bin
    assert 2.0 < s["jitter_expected_max_per_bin"] < 3.0
    assert s["jitter_expected_peak_rate_per_s"] == pytest.approx(s["jitter_expected_max_per_bin"] / 0.002)
    assert s["jitter_mean_rate_per_s"] < s["jitter_expected_peak_rate_per_s"] < s["deterministic_peak_rate_per_s"]
    assert s["binned_peak_reduction"] == pytest.approx(128 / s["jitter_expected_max_per_bin"])


# --- the named readings ------------------------------------------------------------------------------


def test_the_alternative_readings_are_computed_from_their_own_assumptions():
    alt = nm0_4.solve()["alternative"]
    z = alt["zero_indexed_k"]
    assert z["deterministic_wait_ms"] == 1000 and z["jitter_window_ms"] == 1000 and z["peak_reduction"] == 500
    assert z["jitter_mean_rate_per_s"] == 128
    capped = nm0_4.solve({"retry_attempt": 6})["alternative"]["capped_deterministic"]
    assert capped["deterministic_wait_ms"] == 30000 and capped["deterministic_wake_ms"] == 35000
    assert nm0_4.solve({"retry_attempt": 6})["deterministic_wait_ms"] == 64000
    assert alt["independent_poisson_bins"]["jitter_expected_peak_rate_per_s"] == pytest.approx(
        nm0_4.expected_max_bin_count(128, 2000.0, 2.0, poisson_bins=True) / 0.002)
    assert "zero_indexed_k" not in nm0_4.solve({"retry_attempt": 0})["alternative"]


@pytest.mark.parametrize("reading, params, names", [
    ("chapter_secondary_burst", None, ("pool_exhausted_by_agents", "frozen_window_ms")),
    ("zero_indexed_k", None, ("deterministic_wait_ms", "deterministic_wake_ms", "jitter_window_ms",
                              "jitter_mean_rate_per_s", "peak_reduction", "jitter_expected_peak_rate_per_s")),
    ("capped_deterministic", {"retry_attempt": 6}, ("deterministic_wait_ms", "deterministic_wake_ms")),
    ("independent_poisson_bins", {"failing_agents": 8, "dispatch_jitter_ms": 200.0},
     ("jitter_expected_peak_rate_per_s",)),
])
def test_an_answer_of_a_named_reading_is_graded_alternative_and_accepted_on_request(reading, params, names):
    alt = nm0_4.solve(params)["alternative"][reading]
    report = nm0_4.check(params, {**graded(params), **{n: alt[n] for n in names}})
    for n in names:
        q = report["quantities"][n]
        assert q["status"] == "alternative" and q["reading"] == reading and not q["ok"], (n, q)
    assert not report["all_ok"] and report["score"] == len(nm0_4.GRADED) - len(names)
    assert f"matches the reading '{reading}'" in format_report(report)
    assert accept_readings(report)["all_ok"]


def test_right_answers_pass_and_wrong_ones_fail():
    assert nm0_4.check(None, graded())["all_ok"]
    assert not nm0_4.check(None, {**graded(), "free_threads": 45})["all_ok"]
    assert not nm0_4.check(None, {**graded(), "pool_exhausted_by_agents": True})["all_ok"]
    assert not nm0_4.check(None, {**graded(), "frozen_window_ms": 4800})["all_ok"]
    assert nm0_4.check(None, {**graded(), "jitter_expected_peak_rate_per_s": 1140 * 1.005})["all_ok"]
    assert not nm0_4.check(None, {**graded(), "jitter_expected_peak_rate_per_s": 64})["all_ok"]   # the mean


# --- bad givens ------------------------------------------------------------------------------------


@pytest.mark.parametrize("params, name", [
    ({"agents": 0}, "agents"), ({"agents": 2.5}, "agents"), ({"pool_threads": -1}, "pool_threads"),
    ({"timeout_ms": 0}, "timeout_ms"), ({"base_ms": float("nan")}, "base_ms"), ({"cap_ms": "30s"}, "cap_ms"),
    ({"failing_agents": True}, "failing_agents"), ({"dispatch_jitter_ms": 0.0}, "dispatch_jitter_ms"),
    ({"retry_attempt": -1}, "retry_attempt"), ({"retry_attempt": None}, "retry_attempt")])
def test_bad_givens_raise_config_error_naming_the_parameter(params, name):
    with pytest.raises(ConfigError, match=f"^{name} "):
        nm0_4.solve(params)


def test_more_failing_agents_than_agents_is_refused():
    with pytest.raises(ConfigError, match="failing_agents 300 is more than agents 256"):
        nm0_4.solve({"failing_agents": 300})
    with pytest.raises(ConfigError, match="unknown parameter"):
        nm0_4.solve({"threads": 5})
    with pytest.raises(ConfigError, match="arrivals"):
        nm0_4.expected_max_bin_count(0, 10.0, 1.0)


# --- CLI ---------------------------------------------------------------------------------------------


def test_cli_solve_json_keys(capsys):
    assert main(["exercise", "solve", "nm0.4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(nm0_4.GRADED) <= set(out)
    assert {"params", "exercise", "decision", "decision_text", "reading", "alternative", "t_exhaust_ms",
            "jitter_expected_max_per_bin", "binned_peak_reduction", "exhaust_by_secondary_rate"} <= set(out)
    assert out["params"] == nm0_4.validate_params(None) and out["exercise"] == "nm0.4"
    assert out["free_threads"] == 44 and out["deterministic_peak_rate_per_s"] == 64000
    assert set(out["alternative"]) == {"chapter_secondary_burst", "capped_deterministic", "independent_poisson_bins",
                                       "zero_indexed_k"}


def test_cli_params_and_check(tmp_path, capsys):
    assert main(["exercise", "solve", "nm0.4", "--param", "pool_threads=256", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pool_exhausted_by_agents"] is True and out["frozen_window_ms"] == 5000
    f = tmp_path / "answers.json"
    f.write_text(json.dumps(graded()))
    assert main(["exercise", "check", "nm0.4", "--answers", str(f)]) == 0
    assert f"{len(nm0_4.GRADED)} correct" in capsys.readouterr().out
    assert main(["exercise", "solve", "nm0.4", "--param", "failing_agents=999"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:")
