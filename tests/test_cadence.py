"""Checkpoint cadence (§11.4.2-11.4.3, §11.9, §11.12 ex. 5 and 9): derivations, formulas, eq. 6 on
crash traces, R measured from a real log, Napkin Math 11.1 rebuilt, and the CLI.

Fault model: crashes at Poisson or given turns; invariant: eq. 6 in closed form equals the
turn-by-turn account; goal: the stride that wins on long traces sits near the eq. 5 balance point.
"""

from __future__ import annotations

import copy
import json
import math

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import kernel_lib.cadence.derivation as dv
import kernel_lib.cadence.formulas as f
from kernel_lib.cadence.measure import Quantity, measure_reconstruction, resolve_pause
from kernel_lib.cadence.napkin import PRINTED, candidate_traces, reconstruct
from kernel_lib.cadence.trace import (
    CrashTrace,
    evaluate_strides,
    given_trace,
    poisson_trace,
    simulate_turn_by_turn,
    trace_overhead,
)
from kernel_lib.cli import main
from kernel_lib.errors import (
    CadenceError,
    CadenceParameterError,
    ConfigError,
    KernelError,
)

pos = st.floats(min_value=1e-3, max_value=1e4, allow_nan=False, allow_infinity=False)
rate = st.floats(min_value=1e-5, max_value=0.5, allow_nan=False, allow_infinity=False)
miss = st.floats(min_value=1e-2, max_value=1e2, allow_nan=False, allow_infinity=False)


# --- the sympy derivations --------------------------------------------------------------------------
def test_every_balance_has_the_flat_minimum_factor_and_a_true_minimum():
    d = dv.derive()
    target = (dv.x + 1 / dv.x) / 2
    for name, b in d.balances.items():
        assert sp.simplify(b.flat_factor - target) == 0, name
        assert b.curvature.is_positive, name


def test_derived_optima_match_the_chapter_forms():
    d = dv.derive()
    assert sp.simplify(d["young"].optimum - sp.sqrt(2 * dv.C * dv.M)) == 0
    assert sp.simplify(d["young"].minimum - sp.sqrt(2 * dv.C / dv.M)) == 0
    k_star = sp.sqrt(2 * dv.C / (dv.lam * dv.R))
    assert sp.simplify(d["logged_stride"].optimum - k_star) == 0
    assert sp.simplify(d["logged_stride"].minimum - sp.sqrt(2 * dv.C * dv.lam * dv.R)) == 0
    # the expectation of eq. 6 over Poisson crashes (continuous or whole turns) has the same optimum
    assert sp.simplify(d["trace_expectation"].optimum - k_star) == 0
    assert sp.simplify(d["discrete_trace_expectation"].optimum - k_star) == 0
    assert sp.simplify(d.logging_gain - sp.sqrt(dv.Re / dv.R)) == 0
    assert sp.simplify(d["consolidation"].optimum - sp.sqrt(2 * dv.P / (dv.p * dv.d))) == 0
    assert sp.simplify(d.snapshot.ratio - (dv.n + 1) / 2) == 0
    assert sp.simplify(d.snapshot.full - dv.g * dv.k * dv.n * (dv.n + 1) / 2) == 0


def test_check_numeric_reports_agreement_and_would_report_a_mismatch(monkeypatch):
    assert all(r["ok"] for r in dv.check_numeric())
    monkeypatch.setattr(f, "young_interval_s", lambda c, m: math.sqrt(c * m))   # a wrong transcription
    assert not all(r["ok"] for r in dv.check_numeric())


@given(c=pos, m=pos)
def test_young_numeric_equals_sympy(c, m):
    d = dv.derive()
    assert math.isclose(f.young_interval_s(c, m), dv.numeric(d["young"].optimum, dv.C, dv.M)(c, m), rel_tol=1e-12)
    assert math.isclose(f.young_optimal_overhead_fraction(c, m), dv.numeric(d["young"].minimum, dv.C, dv.M)(c, m),
                        rel_tol=1e-12)
    tau = 0.37 * c + 1.0
    assert math.isclose(f.young_overhead_fraction(tau, c, m), dv.numeric(d["young"].overhead, dv.tau, dv.C, dv.M)(
        tau, c, m), rel_tol=1e-12)


@given(c=pos, lam=rate, r=pos, k=st.integers(1, 10_000))
def test_stride_numeric_equals_sympy(c, lam, r, k):
    d = dv.derive()
    b = d["logged_stride"]
    assert math.isclose(f.logged_stride_turns(c, lam, r), dv.numeric(b.optimum, dv.C, dv.lam, dv.R)(c, lam, r),
                        rel_tol=1e-12)
    assert math.isclose(f.optimal_stride_overhead_s_per_turn(c, lam, r),
                        dv.numeric(b.minimum, dv.C, dv.lam, dv.R)(c, lam, r), rel_tol=1e-12)
    assert math.isclose(f.stride_overhead_s_per_turn(k, c, lam, r),
                        dv.numeric(b.overhead, dv.k, dv.C, dv.lam, dv.R)(k, c, lam, r), rel_tol=1e-12)
    assert math.isclose(f.unlogged_stride_turns(c, lam, r),
                        dv.numeric(d["unlogged_stride"].optimum, dv.C, dv.lam, dv.Re)(c, lam, r), rel_tol=1e-12)


@given(pause=pos, p=st.floats(1e-6, 1.0), b=st.floats(0, 100), dl=pos)
def test_consolidation_numeric_equals_sympy(pause, p, b, dl):
    bal = dv.derive()["consolidation"]
    m_star = f.consolidation_optimal_stride(pause, p, b, dl)
    assert math.isclose(m_star, dv.numeric(bal.optimum, dv.P, dv.p, dv.B, dv.d)(pause, p, b, dl), rel_tol=1e-12)
    assert math.isclose(f.consolidation_overhead_s(m_star, pause, p, b, dl),
                        dv.numeric(bal.minimum, dv.P, dv.p, dv.B, dv.d)(pause, p, b, dl), rel_tol=1e-9)


@given(c=pos, m=pos, x=miss)
def test_flat_minimum_identity_young(c, m, x):
    t = f.young_interval_s(c, m)
    ratio = f.young_overhead_fraction(x * t, c, m) / f.young_optimal_overhead_fraction(c, m)
    assert math.isclose(ratio, f.flat_minimum_factor(x), rel_tol=1e-9)
    assert math.isclose(f.flat_minimum_factor(x), f.flat_minimum_factor(1 / x), rel_tol=1e-12)
    assert f.flat_minimum_factor(x) >= 1.0 - 1e-12


@given(c=pos, lam=rate, r=pos, x=miss)
def test_flat_minimum_identity_stride(c, lam, r, x):
    k = f.logged_stride_turns(c, lam, r)
    ratio = f.stride_overhead_s_per_turn(x * k, c, lam, r) / f.optimal_stride_overhead_s_per_turn(c, lam, r)
    assert math.isclose(ratio, f.flat_minimum_factor(x), rel_tol=1e-9)


# --- figures the chapter prints -----------------------------------------------------------------------
def test_theorem_11_1_sensitivity_figures():
    s = f.young_summary(2.0, 600.0, (0.5, 2.0, 10.0))
    assert abs(s.interval_s - 49) <= 0.5                       # "about 49 s"
    assert abs(100 * s.overhead_fraction - 8.2) <= 0.05        # "8.2 percent"
    by_x = {m["miss_factor"]: m for m in s.misses}
    assert math.isclose(by_x[2.0]["relative_to_optimum"], 1.25) and math.isclose(by_x[0.5]["relative_to_optimum"], 1.25)
    assert abs(100 * by_x[10.0]["overhead_fraction"] - 41) <= 0.5   # "raises it to 41 percent"


def test_eq3_chapter_example():
    v = f.snapshot_write_volumes(128_000, 5, 500 // 5)
    assert abs(v.full_bytes / 1e9 - 3.2) <= 0.05 and v.incremental_bytes == 64e6 and v.ratio == 50.5


def test_exercise_9_consolidation():
    p = f.consolidation_plan(1.0, 0.005, 0.2, 0.04, deadline_s=2.0)
    assert math.isclose(p.optimal_stride, 100.0) and math.isclose(p.optimal_overhead_s, 0.021)
    assert math.isclose(p.worst_case_restore_at_optimum_s, 4.2)
    assert p.deadline_stride == 45
    assert math.isclose(p.variable_part_ratio, p.flat_minimum_factor, rel_tol=1e-12)
    assert 1.3 < p.deadline_cost_ratio < p.variable_part_ratio   # the constant term dilutes the ratio
    with pytest.raises(CadenceParameterError):
        f.largest_stride_within_deadline(0.21, 0.2, 0.04)


def test_exercise_5_partly_unlogged():
    cost = f.effective_turn_cost_s(0.1, 0.05, 12.0)
    assert math.isclose(cost, 1.245)
    assert math.isclose(f.logged_stride_turns(0.8, 0.01, 0.05), 40 * math.sqrt(2))
    assert math.isclose(f.optimal_stride_overhead_s_per_turn(0.8, 0.01, 0.05), math.sqrt(2 * 0.8 * 0.01 * 0.05))


# --- typed errors -------------------------------------------------------------------------------------
@pytest.mark.parametrize("call", [
    lambda: f.young_interval_s(-2, 600),
    lambda: f.young_interval_s(2, 0),
    lambda: f.logged_stride_turns(0.5, 0.0, 0.1),
    lambda: f.logged_stride_turns(float("nan"), 0.02, 0.1),
    lambda: f.logged_stride_turns(True, 0.02, 0.1),
    lambda: f.stride_overhead_s_per_turn(0, 0.5, 0.02, 0.1),
    lambda: f.snapshot_write_volumes(1, 0, 10),
    lambda: f.snapshot_write_volumes(1, 2.5, 10),
    lambda: f.flat_minimum_factor(0),
    lambda: f.effective_turn_cost_s(1.5, 0.1, 1),
    lambda: f.consolidation_plan(1, 1.5, 0.2, 0.04),
    lambda: trace_overhead(CrashTrace(10, (3,)), 0, pause_s=1, restore_s_per_crash=1, reconstruction_s_per_turn=1),
    lambda: trace_overhead(CrashTrace(10, (3,)), 2, pause_s=-1, restore_s_per_crash=1, reconstruction_s_per_turn=1),
    lambda: CrashTrace(10, (10,)),
    lambda: CrashTrace(10, (-1,)),
    lambda: CrashTrace(10, (5, 3)),
    lambda: CrashTrace(0, ()),
    lambda: poisson_trace(100, 0, seed=1),
    lambda: resolve_pause(-1.0),
    lambda: resolve_pause(lambda: -0.5),
])
def test_bad_parameters_raise_typed_errors(call):
    with pytest.raises(CadenceParameterError) as ei:
        call()
    assert isinstance(ei.value, ValueError) and isinstance(ei.value, ConfigError) and isinstance(ei.value, KernelError)
    assert ei.value.name


# --- eq. 6 on traces ----------------------------------------------------------------------------------
traces = st.integers(1, 300).flatmap(
    lambda n: st.tuples(st.just(n), st.lists(st.integers(0, n - 1), max_size=12).map(sorted)))


@given(tr=traces, k=st.integers(1, 400), c=st.floats(0, 10), t=st.floats(0, 10), r=st.floats(0, 10))
def test_eq6_equals_turn_by_turn_simulation(tr, k, c, t, r):
    trace = CrashTrace(tr[0], tuple(tr[1]))
    closed = trace_overhead(trace, k, pause_s=c, restore_s_per_crash=t, reconstruction_s_per_turn=r)
    brute = simulate_turn_by_turn(trace, k, pause_s=c, restore_s_per_crash=t, reconstruction_s_per_turn=r)
    assert math.isclose(closed.overhead_s, brute, rel_tol=1e-9, abs_tol=1e-9)
    assert closed.checkpoints == trace.turns // k
    assert all(0 <= s < k for s in closed.lost_suffix_turns)


def test_turn_by_turn_simulation_is_not_the_closed_form_in_disguise():
    # a crash right after a checkpoint loses nothing; one just before the next loses k-1 turns
    trace = CrashTrace(20, (10, 19))
    assert simulate_turn_by_turn(trace, 10, pause_s=0, restore_s_per_crash=0, reconstruction_s_per_turn=1) == 9
    assert simulate_turn_by_turn(trace, 10, pause_s=1, restore_s_per_crash=0, reconstruction_s_per_turn=0) == 2
    assert simulate_turn_by_turn(trace, 10, pause_s=0, restore_s_per_crash=3, reconstruction_s_per_turn=0) == 6


def test_poisson_trace_is_seeded_and_has_the_right_rate():
    a, b = poisson_trace(100_000, 0.02, seed=5), poisson_trace(100_000, 0.02, seed=5)
    assert a == b and a != poisson_trace(100_000, 0.02, seed=6)
    assert abs(a.crashes - 2000) < 4.5 * math.sqrt(2000)
    assert a.source.startswith("poisson(")


@settings(max_examples=25)
@given(lam=st.floats(0.005, 0.05), r=st.floats(0.05, 1.0), k_target=st.floats(4, 40), seed=st.integers(0, 10**6))
def test_long_traces_are_cheapest_near_the_balance_stride(lam, r, k_target, seed):
    c = k_target ** 2 * lam * r / 2          # so that eq. 5 gives k* = k_target
    k_star = f.logged_stride_turns(c, lam, r)
    assert math.isclose(k_star, k_target, rel_tol=1e-9)
    trace = poisson_trace(max(100_000, int(2000 / lam)), lam, seed)     # about 2000 crashes or more
    ev = evaluate_strides(trace, range(1, int(4 * k_star) + 2), pause_s=c, restore_s_per_crash=1.0,
                          reconstruction_s_per_turn=r)
    best = ev.best
    assert k_star / 2 <= best.stride_turns <= 2 * k_star
    at_k_star = trace_overhead(trace, round(k_star), pause_s=c, restore_s_per_crash=1.0, reconstruction_s_per_turn=r)
    # a finite trace's lost suffixes are random: with ~2000 crashes their sum wanders by a few percent
    # between neighbouring strides, so the balance stride is within 8 % of the trace's best, not exact
    assert at_k_star.overhead_s <= 1.08 * best.overhead_s


# --- R measured from a real log -------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["sqlite", "segment"])
def test_reconstruction_is_measured_from_a_real_log(kind, tmp_path):
    q = measure_reconstruction(kind, turns=24, short_suffix_turns=4, long_suffix_turns=20, repeats=3,
                               directory=str(tmp_path))
    assert q.source == "measured" and q.unit == "s/turn"
    assert 0 < q.value < 1.0
    assert q.detail["store"] == kind and q.detail["events_per_turn"] == 10 and q.detail["log_bytes"] > 0
    assert list(tmp_path.iterdir()) == []   # the temporary log is gone
    ev = evaluate_strides(CrashTrace(50, (7, 30)), [5, 10], pause_s=0.5, restore_s_per_crash=1,
                          reconstruction_s_per_turn=q)
    assert ev.sources["reconstruction_s_per_turn"] == "measured" and ev.sources["pause_s"] == "given"


def test_measure_rejects_bad_arguments():
    with pytest.raises(CadenceParameterError):
        measure_reconstruction("memory")
    with pytest.raises(CadenceParameterError):
        measure_reconstruction("sqlite", turns=10, short_suffix_turns=8, long_suffix_turns=5)


def test_measurement_counts_are_bounded():
    for kw, name in (({"turns": 10 ** 9}, "turns"), ({"repeats": 10 ** 9}, "repeats"),
                     ({"payload_bytes": 10 ** 12}, "payload_bytes"), ({"payload_bytes": -1}, "payload_bytes"),
                     ({"payload_bytes": True}, "payload_bytes")):
        with pytest.raises(CadenceParameterError) as ei:
            measure_reconstruction("sqlite", **kw)
        assert ei.value.name == name
    with pytest.raises(CadenceParameterError, match="repeats"):
        resolve_pause(lambda: 0.1, repeats=10 ** 9)


def test_pause_from_a_callable_is_measured():
    samples = iter([0.3, 0.1, 0.2])
    q = resolve_pause(lambda: next(samples), repeats=3)
    assert q.source == "measured" and q.value == 0.2 and q.samples == (0.3, 0.1, 0.2)
    assert resolve_pause(0.5) == Quantity(0.5, "s", "given")


# --- Napkin Math 11.1 -------------------------------------------------------------------------------------
def test_napkin_math_11_1_is_rebuilt_and_every_printed_figure_follows():
    r = reconstruct()
    assert r.all_ok, [c for c in r.checks if not c.ok]
    assert r.crash_turns == (37, 83)
    assert set(r.candidate_traces_unordered) == {(33, 37), (33, 87), (37, 83), (83, 87)}
    assert r.candidate_traces_ordered == ((37, 83),)
    assert (r.pause_s, r.reconstruction_s_per_turn, r.restore_s_per_crash) == (0.5, 0.1, 1.0)
    readings = {x.name: x for x in r.readings}
    assert not readings["eq. 6 third term only"].consistent
    assert readings["whole recovery time"].consistent
    assert readings["eq. 6 third term only"].totals_under_solved_givens_s == (1.0, 2.0, 7.0)
    by_k = {x.stride_turns: x for x in r.results}
    assert by_k[1].overhead_s == 52.0 and by_k[25].overhead_s == 6.0


def test_napkin_check_fails_when_a_printed_figure_is_wrong():
    bad = copy.deepcopy(PRINTED)
    bad["every_turn_overhead_s"] = 50
    r = reconstruct(bad)
    assert not r.all_ok
    assert [c.figure for c in r.checks if not c.ok] == ["every-turn policy, stride 1 (s), §11.9"]
    bad = copy.deepcopy(PRINTED)
    bad["per_stride"][25]["lost_suffix_turns"] = (12, 9)   # no crash pair gives 12&9 with 7&3 and 37&33
    with pytest.raises(CadenceError):
        reconstruct(bad)


def test_candidate_search_is_exhaustive():
    got = candidate_traces(100, {10: (7, 3), 25: (12, 8), 50: (37, 33)}, ordered=False)
    brute = [(a, b) for a in range(100) for b in range(a, 100)
             if sorted([a % 10, b % 10]) == [3, 7] and sorted([a % 25, b % 25]) == [8, 12]
             and sorted([a % 50, b % 50]) == [33, 37]]
    assert got == brute


# --- CLI --------------------------------------------------------------------------------------------------
def test_cli_trace_json(capsys):
    assert main(["cadence", "trace", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    g = out["givens_reconstructed"]
    assert g["crash_turns"] == [37, 83] and g["exact"] == {"pause_s": "1/2", "reconstruction_s_per_turn": "1/10",
                                                           "restore_s_per_crash": "1"}
    assert out["all_ok"] and {row["stride_turns"]: row["overhead_s"] for row in out["per_stride"]}[25] == 6.0


def test_cli_tables_and_errors(capsys):
    assert main(["cadence", "trace"]) == 0
    assert "T_restore = 1 s/crash" in capsys.readouterr().out
    assert main(["cadence", "young", "--pause-s", "2", "--mtbf-s", "600"]) == 0
    assert "48.99 s" in capsys.readouterr().out
    assert main(["cadence", "young", "--pause-s", "-2", "--mtbf-s", "600"]) == 2
    assert "pause_s must be > 0" in capsys.readouterr().err
    assert main(["cadence", "stride", "--pause-s", "1", "--failure-rate-per-turn", "0.02"]) == 2
    assert "--reconstruction-s-per-turn" in capsys.readouterr().err
    assert main(["cadence", "simulate", "--turns", "100", "--crash-turns", "37,83", "--pause-s", "0.5",
                 "--restore-s", "1", "--reconstruction-s-per-turn", "0.1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["turn_by_turn_agrees"] and out["best_stride_turns"] == 25
    assert main(["cadence", "simulate", "--turns", "100", "--crash-turns", "100", "--pause-s", "0.5",
                 "--restore-s", "1", "--reconstruction-s-per-turn", "0.1"]) == 2
    assert main(["cadence", "consolidation", "--pause-s", "1", "--restore-probability", "0.005", "--base-read-s",
                 "0.2", "--delta-apply-s", "0.04", "--deadline-s", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["deadline_stride"] == 45
    assert main(["cadence", "derive", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["numeric_check_ok"]


def test_cli_stride_with_measured_reconstruction(capsys, tmp_path):
    assert main(["cadence", "stride", "--pause-s", "0.5", "--failure-rate-per-turn", "0.02",
                 "--measure-reconstruction", "sqlite", "--dir", str(tmp_path), "--reexecution-s-per-turn", "20",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["reconstruction_source"] == "measured" and out["reconstruction"]["source"] == "measured"
    assert out["logged_stride_turns"] > out["unlogged_stride_turns"]


def test_given_trace_sorts_and_checks():
    assert given_trace(10, [7, 2]).crash_turns == (2, 7)
    with pytest.raises(CadenceParameterError):
        given_trace(10, ["a", 2])


def test_pause_callable_is_measured_once_per_evaluation():
    calls = []

    def capture() -> float:   # stands in for a real checkpoint capture
        calls.append(1)
        return 0.5

    ev = evaluate_strides(CrashTrace(100, (37, 83)), [10, 25, 50], pause_s=capture, restore_s_per_crash=1,
                          reconstruction_s_per_turn=0.1)
    assert len(calls) == 5 and ev.sources["pause_s"] == "measured"
    assert [r.overhead_s for r in ev.results] == [8.0, 6.0, 10.0]


# --- adversarial review: extreme givens, bounded work, seeds, integer types -----------------------------
HUGE_INT = 10 ** 400


@pytest.mark.parametrize("call, blamed", [
    (lambda: f.young_interval_s(HUGE_INT, 600), "pause_s"),            # was OverflowError
    (lambda: f.young_interval_s(1e300, 1e300), "pause_s"),             # was inf
    (lambda: f.young_interval_s(1e-300, 1e-300), "pause_s"),           # was 0 (underflow)
    (lambda: f.logged_stride_turns(1e300, 1e-300, 1e-300), "pause_s"),   # was ZeroDivisionError
    (lambda: f.logged_stride_turns(1e-3, 1e300, 1e300), "failure_rate_per_turn"),   # was k* = 0
    (lambda: f.logged_stride_turns(1, 0.02, 1e-300), "reconstruction_s_per_turn"),
    (lambda: f.unlogged_stride_turns(1, 0.02, 1e300), "reexecution_s_per_turn"),
    (lambda: f.stride_overhead_s_per_turn(5, 1e308, 0.02, 0.1), "pause_s"),
    (lambda: f.consolidation_plan(1, 0.1, 0, 1e-300, 1e300), "delta_apply_s"),   # was OverflowError
    (lambda: f.largest_stride_within_deadline(1e300, 0, 1), "deadline_s"),
    (lambda: f.snapshot_write_volumes(1, 1, HUGE_INT), "checkpoints"),   # was OverflowError
    (lambda: f.snapshot_write_volumes(1e300, 1, 10), "bytes_per_turn"),
    (lambda: f.flat_minimum_factor(1e-300), "miss_factor"),
    (lambda: f.young_summary(2, 600, [1e300]), "miss_factor"),
    (lambda: f.consolidation_plan(1, 1 + 1e-9, 0.2, 0.04), "restore_probability"),
])
def test_extreme_givens_are_refused_naming_the_given(call, blamed):
    with pytest.raises(CadenceParameterError) as ei:
        call()
    assert ei.value.name == blamed and blamed in str(ei.value)
    assert len(str(ei.value)) < 200                 # a 400-digit integer is not printed whole


def _numbers_in(obj):
    if isinstance(obj, bool):
        return
    if isinstance(obj, (int, float)):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _numbers_in(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _numbers_in(v)


def test_every_formula_gives_a_typed_error_or_a_finite_result_for_any_input():
    import itertools
    import random

    import numpy as np
    values = [0, 5e-324, 1e-300, 1e-12, 0.5, 1, 1e3, 1e12, 1e300, math.inf, math.nan, -1, HUGE_INT,
              np.int64(3), np.float32(2), True, "x", None]
    funcs = [(f.young_interval_s, 2), (f.young_overhead_fraction, 3), (f.young_optimal_overhead_fraction, 2),
             (f.flat_minimum_factor, 1), (f.stride_overhead_s_per_turn, 4), (f.logged_stride_turns, 3),
             (f.unlogged_stride_turns, 3), (f.optimal_stride_overhead_s_per_turn, 3), (f.logging_stride_gain, 2),
             (f.effective_turn_cost_s, 3), (f.snapshot_write_volumes, 3), (f.consolidation_overhead_s, 5),
             (f.consolidation_optimal_stride, 4), (f.worst_case_restore_s, 3), (f.largest_stride_within_deadline, 3),
             (f.consolidation_plan, 5), (f.young_summary, 2), (f.stride_summary, 4)]
    rng = random.Random(0)
    for fn, n in funcs:
        combos = (itertools.product(values, repeat=n) if n <= 3 else
                  [tuple(rng.choice(values) for _ in range(n)) for _ in range(3000)])
        for args in combos:
            try:
                out = fn(*args)
            except CadenceParameterError:
                continue
            out = out.to_dict() if hasattr(out, "to_dict") else out
            assert all(math.isfinite(v) and v >= 0 for v in _numbers_in(out)), (fn.__name__, args, out)


def test_results_stay_finite_and_positive_at_the_corners_of_the_accepted_ranges():
    import itertools
    lo, hi = f.DEFAULT_RANGE
    r_lo, r_hi, _ = f.RANGES["failure_rate_per_turn"]
    for c, lam, r in itertools.product((lo, hi), (r_lo, r_hi), (lo, hi)):
        for v in (f.logged_stride_turns(c, lam, r), f.optimal_stride_overhead_s_per_turn(c, lam, r),
                  f.young_interval_s(c, r), f.young_optimal_overhead_fraction(c, r), f.logging_stride_gain(c, r)):
            assert math.isfinite(v) and v > 0
        k = f.logged_stride_turns(c, lam, r)
        assert math.isfinite(f.stride_overhead_s_per_turn(k / 3, c, lam, r))   # the explorer's curve reaches k*/3
        s = f.young_summary(c, r, (1e-6, 1e6))
        assert all(math.isfinite(m["overhead_fraction"]) for m in s.misses)
    plan = f.consolidation_plan(hi, 1e-12, 0, lo, hi)
    assert all(math.isfinite(v) and v >= 0 for v in _numbers_in(plan.to_dict()))


def test_poisson_trace_draw_is_bounded_and_needs_a_real_seed():
    import time

    import numpy as np
    t0 = time.perf_counter()
    dense = poisson_trace(10, 1e3, seed=1)           # 10^4 expected crashes in 10 turns: no endless loop
    assert time.perf_counter() - t0 < 30 and abs(dense.crashes - 10_000) < 6 * math.sqrt(10_000)
    assert set(dense.crash_turns) <= set(range(10))
    with pytest.raises(CadenceParameterError, match="failure_rate_per_turn"):
        poisson_trace(10, 1e300, seed=1)             # rates above 1e3 per turn are refused
    with pytest.raises(CadenceParameterError, match="crashes") as ei:
        poisson_trace(10 ** 7, 1.0, seed=1)          # 10^7 expected crashes: more than MAX_POISSON_CRASHES
    assert ei.value.name == "failure_rate_per_turn"
    for bad in (None, "7", True, -1, 2.0):
        with pytest.raises(CadenceParameterError) as ei:
            poisson_trace(100, 0.1, seed=bad)
        assert ei.value.name == "seed"
    assert poisson_trace(1000, 0.05, seed=np.int64(7)) == poisson_trace(1000, 0.05, seed=7)


def test_numpy_integers_are_accepted_wherever_a_whole_number_is():
    import numpy as np
    trace = CrashTrace(np.int64(100), (np.int64(37), np.int32(83)))
    assert trace == CrashTrace(100, (37, 83)) and all(type(c) is int for c in trace.crash_turns)
    assert given_trace(np.int64(100), np.array([83, 37])) == trace
    kw = {"pause_s": np.float64(0.5), "restore_s_per_crash": np.int64(1), "reconstruction_s_per_turn": 0.1}
    assert trace_overhead(trace, np.int64(25), **kw).overhead_s == 6.0
    assert evaluate_strides(trace, [np.int64(10), np.uint8(25)], **kw).best.stride_turns == 25
    assert simulate_turn_by_turn(trace, np.int16(25), **kw) == pytest.approx(6.0)
    assert f.snapshot_write_volumes(np.int64(1000), np.int64(5), np.int64(10)).ratio == 5.5
    with pytest.raises(CadenceParameterError):
        CrashTrace(100, (True,))                     # bool is not a turn
    with pytest.raises(CadenceParameterError):
        trace_overhead(trace, np.float64(2.5), **kw)


def test_long_runs_are_refused_where_the_work_grows_with_them():
    from kernel_lib.cadence.trace import MAX_ALL_STRIDES, MAX_SIMULATED_TURNS
    long = CrashTrace(MAX_SIMULATED_TURNS + 1, (5,))
    kw = {"pause_s": 1, "restore_s_per_crash": 1, "reconstruction_s_per_turn": 0.1}
    with pytest.raises(CadenceParameterError, match="turn-by-turn"):
        simulate_turn_by_turn(long, 10, **kw)
    with pytest.raises(CadenceParameterError, match="every stride") as ei:
        evaluate_strides(CrashTrace(MAX_ALL_STRIDES + 1, (5,)), None, **kw)
    assert ei.value.name == "strides"
    assert trace_overhead(long, 10, **kw).overhead_s > 0      # the closed form is fine at any length


def _cli_error(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    assert "inf" not in captured.out and "nan" not in captured.out
    return err


@pytest.mark.parametrize("argv, says", [
    ("stride --pause-s 1e300 --failure-rate-per-turn 1e-300 --reconstruction-s-per-turn 1e-300", "--pause-s"),
    ("stride --pause-s 1e-300 --failure-rate-per-turn 1e300 --reconstruction-s-per-turn 1e300", "--pause-s"),
    ("stride --pause-s 1 --failure-rate-per-turn 1e300 --reconstruction-s-per-turn 1", "--failure-rate-per-turn"),
    ("consolidation --pause-s 1 --restore-probability 0.1 --base-read-s 0 --delta-apply-s 1e-300 --deadline-s 1e300",
     "--delta-apply-s"),
    ("consolidation --pause-s 1e-300 --restore-probability 0.1 --base-read-s 0 --delta-apply-s 1",
     "--pause-s: consolidation_pause_s"),
    (f"snapshot --bytes-per-turn 1 --stride-turns 1 --turns {HUGE_INT}", "--turns"),
    ("snapshot --bytes-per-turn 1 --turns 5 --stride-turns 10", "--turns: turns (5) is shorter than stride_turns"),
    ("simulate --turns 100 --crash-turns 3 --pause-s 1e308 --restore-s 1e308 --reconstruction-s-per-turn 1",
     "--pause-s"),
    ("simulate --turns 100 --crash-turns 3 --pause-s 1 --restore-s 1e308 --reconstruction-s-per-turn 1",
     "--restore-s"),
    ("young --pause-s 1e-300 --mtbf-s 1e-300", "--pause-s: pause_s"),
    ("young --pause-s 2 --mtbf-s 600 --miss 2,x", "--miss"),
    ("simulate --turns 100 --crash-turns 3 --pause-s 1 --restore-s 1 --reconstruction-s-per-turn 1 --strides x",
     "--strides"),
    ("simulate --turns 100 --crash-turns 3,x --pause-s 1 --restore-s 1 --reconstruction-s-per-turn 1", "--crash-turns"),
    ("simulate --turns 10 --failure-rate-per-turn 1e300 --pause-s 1 --restore-s 1 --reconstruction-s-per-turn 1",
     "--failure-rate-per-turn"),
    (("simulate --turns 1000000000 --failure-rate-per-turn 0.01 --pause-s 1 --restore-s 1 "
      "--reconstruction-s-per-turn 1"), "--turns: turns must be <= 10,000,000"),
    ("simulate --turns 20000 --crash-turns 3 --pause-s 1 --restore-s 1 --reconstruction-s-per-turn 1 --strides all",
     "--strides"),
    (("simulate --turns 100 --failure-rate-per-turn 0.1 --seed -1 --pause-s 1 --restore-s 1 "
      "--reconstruction-s-per-turn 1"), "--seed"),
])
def test_cli_bad_givens_are_one_error_line_naming_the_option(capsys, argv, says):
    err = _cli_error(capsys, ["cadence", *argv.split()])
    assert says in err
    assert "interval_s" not in err and "checkpoints must" not in err   # internal names are not blamed


def test_cli_simulate_bounds_its_turn_by_turn_check(capsys, monkeypatch):
    import kernel_lib.cli.cadence as cadence_cli
    monkeypatch.setattr(cadence_cli, "CHECK_BUDGET_TURNS", 150)   # room for one walk of a 100-turn run
    argv = ["cadence", "simulate", "--turns", "100", "--crash-turns", "37,83", "--pause-s", "0.5", "--restore-s", "1",
            "--reconstruction-s-per-turn", "0.1"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["turn_by_turn_agrees"] and out["turn_by_turn_checked_strides"] == [out["best_stride_turns"]]
    assert main(argv) == 0
    assert "the cheapest 1 of 7" in capsys.readouterr().out
