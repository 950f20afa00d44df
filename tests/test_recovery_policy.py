"""The recovery policy D(Ω) (Failure Recovery, figure 2, Napkin Math 0.2, the anti-spin invariant).

Fault model: one failed sub-transaction of each kind — transient (429, 503), fatal (revoked
lease) before and after the pivot, unclassified, semantic with too little budget, semantic on
either side of the break-even, semantic after the pivot, a repair loop that repeats itself.
Invariant: each gate decides what figure 2 says, with the reason and the numbers; after the pivot
rollback is never returned, and before it the safe case is rollback, never escalation; p comes
from recorded outcomes when it is not given. Goal: a decision a reader can audit
from the log, the CLI and Python alike.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib.errors import OmegaError, RecoveryPolicyError
from kernel_lib.recovery.policy import (
    Budget, CommittedStep, FailedStep, Omega, PolicyConfig, RemedyOption, RepairCosts, Reserves,
    backoff_window_s, config_from_dict, decide, decision_event, economics, omega_from_dict,
)
from kernel_lib.recovery.repair_stats import RepairStats, beta_quantile, fold_repair_stats
from kernel_lib.recovery.signatures import signature_of

# --- Napkin Math 0.2's givens (the issue's parameter names), and what follows from them ------------------

NM = dict(forward_s=46.0, compensation_s=40.6, input_tokens=38500, output_tokens=3100, repair_input_tokens=2390,
          repair_output_tokens=180, decode_tokens_per_s=50.0, validation_s=0.5, input_usd_per_mtok=3.0,
          output_usd_per_mtok=15.0, repair_success_p=0.5)


def _usd(inp: int, out: int) -> float:
    return (inp * NM["input_usd_per_mtok"] + out * NM["output_usd_per_mtok"]) / 1e6


REPAIR = RepairCosts(tokens=NM["repair_input_tokens"] + NM["repair_output_tokens"],
                     usd=_usd(NM["repair_input_tokens"], NM["repair_output_tokens"]),
                     s=NM["repair_output_tokens"] / NM["decode_tokens_per_s"] + NM["validation_s"])
#: Σ: the five committed steps, with the napkin's totals spread evenly (only the sums matter)
HISTORY = tuple(CommittedStep(f"mig.T{i}", NM["compensation_s"] / 5, 0.0, NM["forward_s"] / 5,
                              _usd(NM["input_tokens"], NM["output_tokens"]) / 5) for i in range(1, 6))
SCHEMA_ERROR = {"http_status": 422, "error": "routes[0].port: expected an integer, got a string", "retryable": False}


BUDGET = Budget(200_000, 20, 5.0)


def omega(error=SCHEMA_ERROR, *, pivot=False, budget=BUDGET, history=HISTORY, **failed):
    step = FailedStep("mig.T6", "apply_routes", "III" if pivot else "II", pivot, **failed)
    return Omega({"cluster": "staging"}, step, error, budget, history)


def config(p=NM["repair_success_p"], **kw):
    return PolicyConfig(remedies=(RemedyOption("error_feedback", REPAIR, p),), **kw)


def test_napkin_math_0_2_follows_from_its_givens():
    """The chapter prints rounded figures; they are derived here and compared with a stated
    tolerance (half a unit of the printed last digit)."""
    e = economics(REPAIR, NM["repair_success_p"], unwind_s=sum(c.compensation_s for c in HISTORY),
                  unwind_usd=0.0, rerun_s=sum(c.forward_s for c in HISTORY),
                  rerun_usd=sum(c.forward_usd for c in HISTORY))
    printed = {"backward_s": (86.6, 0.05), "backward_usd": (0.162, 0.0005), "repair_s": (4.1, 0.05),
               "repair_usd": (0.010, 0.0005), "forward_s": (47.4, 0.05), "forward_usd": (0.091, 0.0005)}
    for name, (value, tol) in printed.items():
        assert abs(getattr(e, name) - value) <= tol, (name, getattr(e, name), value)
    assert round(100 * e.p_star_s) == 5 and round(100 * e.p_star_usd) == 6      # "5 percent", "6 percent"
    assert e.p_star_usd > e.p_star_s                                            # "more than about 6 percent"
    # the display's (1 − p)·U does not give the napkin's numbers: 24.4 s, and no finite dollar break-even
    assert abs(e.displayed_forward_s - 24.4) < 0.05 and math.isinf(e.displayed_p_star_usd)
    assert abs(e.displayed_forward_s - 47.4) > 20


def test_the_napkin_decision_is_forward_repair_by_gate_3():
    d = decide(omega(), config())
    assert (d.directive, d.gate, d.remedy) == ("FORWARD_REPAIR", 3, "error_feedback")
    n = d.numbers
    assert abs(n["forward_expected_s"] - 47.4) < 0.05 and abs(n["backward_s"] - 86.6) < 0.05
    assert n["remedies"]["error_feedback"]["p_source"] == "given"
    assert "break-even" in d.reason and d.classification.failure_class == "semantic.validation"


@pytest.mark.parametrize("dp, expected", [(+1e-6, "FORWARD_REPAIR"), (-1e-6, "BACKWARD_ROLLBACK")])
def test_gate_3_on_both_sides_of_the_break_even(dp, expected):
    e = economics(REPAIR, 0.5, unwind_s=40.6, unwind_usd=0.0, rerun_s=46.0, rerun_usd=sum(c.forward_usd
                                                                                          for c in HISTORY))
    p_star = max(e.p_star_s, e.p_star_usd)       # the dollar break-even binds (6 % > 5 %)
    d = decide(omega(), config(p=p_star + dp))
    assert (d.directive, d.gate) == (expected, 3)


def test_both_units_must_pay_unless_a_price_of_time_is_declared():
    """p between the two break-evens: cheaper in time, dearer in dollars. The default rule needs
    both, so it unwinds; pricing a second at $0.01 makes the time saving decide."""
    p = 0.055                                   # 4.7 % < p < 6.1 %
    assert decide(omega(), config(p=p)).directive == "BACKWARD_ROLLBACK"
    d = decide(omega(), config(p=p, usd_per_s=0.01))
    assert d.directive == "FORWARD_REPAIR" and d.numbers["remedies"]["error_feedback"]["p_star_combined"] < p


def test_a_failure_with_nothing_committed_unwinds():
    d = decide(omega(history=()), config(p=0.99))
    assert (d.directive, d.gate) == ("BACKWARD_ROLLBACK", 3) and d.numbers["p_star_s"] == "inf"


# --- gate 1 ------------------------------------------------------------------------------------------------

def test_transient_429_retries_unchanged_with_seeded_full_jitter():
    err = {"http_status": 429, "error": "rate limited", "retryable": True, "retry_after_s": 0.25}
    d = decide(omega(err, retries_done=3), config(), rng=random.Random(7))
    assert (d.directive, d.gate, d.remedy) == ("TRANSIENT_RETRY", 1, "retry_unchanged")
    window = backoff_window_s(3, 0.5, 30.0)
    assert window == 4.0 and d.numbers["backoff_window_s"] == 4.0
    draw = random.Random(7).uniform(0.0, 4.0)
    assert d.numbers["delay_s"] == max(draw, 0.25) and 0.25 <= d.numbers["delay_s"] <= 4.0
    assert decide(omega(err, retries_done=3), config(), rng=random.Random(7)).numbers == d.numbers
    assert backoff_window_s(30, 0.5, 30.0) == 30.0     # the cap


def test_a_transient_fault_that_persists_stops_being_retried():
    d = decide(omega({"http_status": 503, "error": "unavailable", "retryable": True}, retries_done=5), config())
    assert (d.directive, d.gate) == ("BACKWARD_ROLLBACK", 1) and "persisted" in d.reason


@pytest.mark.parametrize("pivot, expected", [(False, "BACKWARD_ROLLBACK"), (True, "OPERATOR_ESCALATE")])
def test_fatal_rolls_back_before_the_pivot_and_escalates_after(pivot, expected):
    err = {"http_status": 401, "error": "capability lease refused: revoked", "reason": "lease_revoked"}
    d = decide(omega(err, pivot=pivot), config(p=1.0))
    assert (d.directive, d.gate, d.classification.error_class) == (expected, 1, "fatal")
    assert d.remedy is None


@pytest.mark.parametrize("pivot, expected", [(False, "BACKWARD_ROLLBACK"), (True, "OPERATOR_ESCALATE")])
def test_unclassified_takes_the_safe_case(pivot, expected):
    d = decide(omega("the flux capacitor is misaligned", pivot=pivot), config(p=1.0))
    assert (d.directive, d.gate, d.classification.error_class) == (expected, 1, "unclassified")
    assert "cannot classify" in d.reason


# --- gate 2 ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("budget, reserves, fits", [
    (Budget(REPAIR.tokens + 1000, 5, 1.0), Reserves(1000, 0.0), True),     # exactly repair + reserve
    (Budget(REPAIR.tokens + 999, 5, 1.0), Reserves(1000, 0.0), False),     # one token short
    (Budget(10**6, 5, REPAIR.usd + 0.05), Reserves(0, 0.05), True),
    (Budget(10**6, 5, REPAIR.usd + 0.049), Reserves(0, 0.05), False),
    (Budget(10**6, 0, 5.0), Reserves(), False),                             # no trajectory step left
])
def test_gate_2_budget_headroom(budget, reserves, fits):
    d = decide(omega(budget=budget), config(reserves=reserves))
    if fits:
        assert d.directive == "FORWARD_REPAIR"
    else:
        assert (d.directive, d.gate) == ("BACKWARD_ROLLBACK", 2)
        assert d.numbers["remedies"]["error_feedback"]["budget"]["fits"] is False


def test_gate_2_after_the_pivot_escalates():
    d = decide(omega(pivot=True, budget=Budget(10, 5, 5.0)), config())
    assert (d.directive, d.gate) == ("OPERATOR_ESCALATE", 2)


# --- the pivot and anti-spin -------------------------------------------------------------------------------

def test_after_the_pivot_a_fitting_repair_completes_forward_whatever_the_economics():
    d = decide(omega(pivot=True, history=()), config(p=0.01))
    assert (d.directive, d.gate, d.remedy) == ("FORWARD_REPAIR", "pivot", "error_feedback")


def test_after_the_pivot_a_hopeless_repair_escalates():
    d = decide(omega(pivot=True), config(p=0.0))
    assert (d.directive, d.gate, d.remedy) == ("OPERATOR_ESCALATE", "pivot", None)


def test_a_repeated_signature_stops_repair_and_names_the_earlier_iteration():
    sigma = signature_of(SCHEMA_ERROR)
    other = signature_of("SyntaxError: unmatched ')'")
    d = decide(omega(repairs_done=2, prior_signatures=(sigma, other)), config(p=1.0))
    assert (d.directive, d.gate) == ("BACKWARD_ROLLBACK", "anti-spin")
    assert d.numbers["anti_spin"]["matched_iteration"] == 1 and d.numbers["anti_spin"]["iteration"] == 3
    d2 = decide(omega(pivot=True, repairs_done=2, prior_signatures=(sigma, other)), config(p=1.0))
    assert (d2.directive, d2.gate) == ("OPERATOR_ESCALATE", "anti-spin")


@pytest.mark.parametrize("k_repair", [1, 2, 3])
def test_k_repair_repairs_and_no_more(k_repair):
    assert decide(omega(repairs_done=k_repair - 1), config(k_repair=k_repair)).directive == "FORWARD_REPAIR"
    d = decide(omega(repairs_done=k_repair), config(k_repair=k_repair))
    assert (d.directive, d.gate, d.numbers["anti_spin"]["reason"]) == ("BACKWARD_ROLLBACK", "anti-spin",
                                                                       "repair_budget_exhausted")


def test_k_repair_above_3_is_refused():
    with pytest.raises(RecoveryPolicyError, match="k_repair"):
        config(k_repair=4)


errors = st.sampled_from([SCHEMA_ERROR, "ImportError: cannot import name 'X'", "MemoryError", "bash: x: command "
                          "not found", {"http_status": 429, "error": "slow down"}, "no idea", {"http_status": 500,
                          "error": "half", "retryable": False, "partial": True}])


@settings(max_examples=200, deadline=None)
@given(err=errors, pivot=st.booleans(), p=st.floats(0, 1), tokens=st.integers(0, 10**5), steps=st.integers(0, 5),
       usd=st.floats(0, 1), comp_s=st.floats(0, 1000), fwd_usd=st.floats(0, 10), repairs=st.integers(0, 4),
       retries=st.integers(0, 8))
def test_rollback_never_after_the_pivot_and_escalation_only_after_it(err, pivot, p, tokens, steps, usd, comp_s,
                                                                     fwd_usd, repairs, retries):
    hist = (CommittedStep("T1", comp_s, 0.0, 10.0, fwd_usd),)
    d = decide(omega(err, pivot=pivot, budget=Budget(tokens, steps, usd), history=hist, repairs_done=repairs,
                     retries_done=retries), config(p=p))
    if pivot:
        assert d.directive != "BACKWARD_ROLLBACK"
    else:
        assert d.directive != "OPERATOR_ESCALATE"
    assert d.reason and isinstance(d.numbers, dict)
    json.dumps(decision_event(d).model_dump(mode="json"))       # every decision can be logged


# --- remedies and p -------------------------------------------------------------------------------------------

def test_the_remedy_with_the_least_expected_cost_is_chosen():
    remedies = (RemedyOption("error_feedback", REPAIR, 0.30),
                RemedyOption("resample", RepairCosts(2000, 0.008, 3.8), 0.10, {"temperature": 1.0, "seed": 2}),
                RemedyOption("model_fallback", RepairCosts(2570, 0.040, 6.0), 0.80, {"model": "large-stand-in"}))
    d = decide(omega(), PolicyConfig(remedies=remedies))
    U_s, R_s = 40.6, 46.0
    R_usd = sum(c.forward_usd for c in HISTORY)

    def rel(r):   # expected cost relative to unwind and rerun, in time plus in dollars
        return ((r.costs.s + (1 - r.success_p) * (U_s + R_s)) / (U_s + R_s)
                + (r.costs.usd + (1 - r.success_p) * R_usd) / R_usd)
    best = min(remedies, key=rel)
    assert best.name == "model_fallback"        # dearer per pass, far likelier to work
    assert (d.directive, d.remedy) == ("FORWARD_REPAIR", best.name)
    assert set(d.numbers["remedies"]) == {"error_feedback", "resample", "model_fallback"}
    assert d.numbers["remedies"]["resample"]["detail"] == {"temperature": 1.0, "seed": 2}
    assert "least expected cost" in d.remedy_reason


def test_p_is_estimated_from_recorded_outcomes_with_its_count_and_interval():
    fc = "semantic.validation"
    remedies = (RemedyOption("error_feedback", REPAIR),)     # no success_p: measured
    outcomes = [{"failure_class": fc, "remedy": "error_feedback", "success": i < 8} for i in range(10)]
    cfg = PolicyConfig(remedies=remedies, stats=fold_repair_stats(outcomes))
    d = decide(omega(), cfg)
    info = d.numbers["remedies"]["error_feedback"]
    assert info["p_source"] == "estimated" and info["estimate"]["attempts"] == 10
    assert info["p"] == pytest.approx(9 / 12) and d.directive == "FORWARD_REPAIR"
    lo, hi = info["estimate"]["interval_95"]
    assert lo < 9 / 12 < hi
    # the measurement, not an assumption, moves the decision: 0 of 20 puts p = 1/22 below p* ≈ 6.1 %
    none = [{"failure_class": fc, "remedy": "error_feedback", "success": False}] * 20
    assert decide(omega(), PolicyConfig(remedies=remedies, stats=fold_repair_stats(none))).directive == \
        "BACKWARD_ROLLBACK"
    # outcomes of another failure class do not count for this one
    other = [{"failure_class": "semantic.syntax_error", "remedy": "error_feedback", "success": False}] * 20
    d3 = decide(omega(), PolicyConfig(remedies=remedies, stats=fold_repair_stats(other)))
    assert d3.numbers["remedies"]["error_feedback"]["estimate"]["attempts"] == 0


@pytest.mark.parametrize("s, n", [(0, 0), (3, 10), (50, 60), (1, 200), (199, 200)])
def test_the_beta_interval_matches_scipy(s, n):
    stats = pytest.importorskip("scipy.stats")
    a, b = RepairStats(s, n).posterior
    lo, hi = RepairStats(s, n).interval()
    assert lo == pytest.approx(stats.beta.ppf(0.025, a, b), abs=1e-9)
    assert hi == pytest.approx(stats.beta.ppf(0.975, a, b), abs=1e-9)


def test_beta_quantile_without_scipy_on_closed_forms():
    assert beta_quantile(0.3, 1, 1) == pytest.approx(0.3, abs=1e-10)          # uniform
    assert beta_quantile(0.25, 2, 1) == pytest.approx(0.5, abs=1e-10)         # F(x) = x²
    assert beta_quantile(0.75, 1, 2) == pytest.approx(0.5, abs=1e-10)         # F(x) = 1 − (1 − x)²


def test_bad_stats_are_refused():
    for bad in (dict(successes=3, attempts=2), dict(successes=-1, attempts=2), dict(prior_a=0)):
        with pytest.raises(RecoveryPolicyError):
            RepairStats(**bad)


# --- the log ---------------------------------------------------------------------------------------------------

def test_decisions_and_outcomes_are_logged_and_fold_back():
    from kernel_lib.core.events import Event, RepairOutcome, decode
    from kernel_lib.core.record import fold, initial_record

    d = decide(omega(), config())
    sigma = d.error_signature
    events = [Event.create(trajectory_id="t", event_id="t-1", sequence_number=1, payload=decision_event(d))]
    for i, ok in enumerate([True, False, True], start=2):
        events.append(Event.create(trajectory_id="t", event_id=f"t-{i}", sequence_number=i, payload=RepairOutcome(
            step_id="mig.T6", failure_class=d.classification.failure_class, remedy="error_feedback", success=ok,
            error_signature=sigma)))
    back = [decode(e.canonical) for e in events]
    assert back == events and back[0].payload.directive == "FORWARD_REPAIR" and back[0].payload.gate == 3
    rec = fold(initial_record("t"), events)
    assert [r["event_type"] for r in rec.recovery_records] == ["RecoveryDecided"] + ["RepairOutcome"] * 3
    st_ = fold_repair_stats(back)[("semantic.validation", "error_feedback")]
    assert (st_.successes, st_.attempts) == (2, 3)


def test_decide_is_pure():
    o, c = omega(), config()
    before = (repr(o), repr(c))
    assert decide(o, c).as_dict() == decide(o, c).as_dict()
    assert (repr(o), repr(c)) == before


# --- Ω from JSON and the CLI -------------------------------------------------------------------------------------

NAPKIN_DOC = {
    "environment": {"cluster": "staging"},
    "failed_step": {"step_id": "mig.T6", "tool": "apply_routes", "tier": "II", "pivot_crossed": False},
    "error": SCHEMA_ERROR,
    "budget": {"tokens_rem": 200000, "steps_rem": 20, "usd_rem": 5.0},
    "history": [{"step_id": "mig.T1-5", "compensation_s": 40.6, "compensation_usd": 0.0, "forward_s": 46.0,
                 "forward_usd": 0.162}],
    "remedies": [{"name": "error_feedback", "tokens": 2570, "usd": 0.00987, "s": 4.1, "success_p": 0.5}],
}


def test_omega_from_json_names_the_bad_field():
    assert decide(omega_from_dict(NAPKIN_DOC), config_from_dict(NAPKIN_DOC)).directive == "FORWARD_REPAIR"
    cases = [({"budget": {"tokens_rem": 1, "steps_rem": 1}}, "budget.usd_rem"),
             ({"budget": {"tokens_rem": -1, "steps_rem": 1, "usd_rem": 1.0}}, "budget"),
             ({"failed_step": {**NAPKIN_DOC["failed_step"], "tier": "IV"}}, "failed_step"),
             ({"history": [{"step_id": "x"}]}, "history[0].compensation_s"),
             ({"surprise": 1}, "omega.surprise")]
    for change, field in cases:
        with pytest.raises(OmegaError) as info:
            doc = {**NAPKIN_DOC, **change}
            omega_from_dict(doc)
            config_from_dict(doc)
        assert info.value.field == field, (change, info.value.field, str(info.value))
    for change in ({"remedies": []}, {"policy": {"k_repair": 4}}, {"remedies": [{"name": "pray", "tokens": 1,
                                                                                   "usd": 0, "s": 0}]}):
        with pytest.raises(OmegaError):
            config_from_dict({**NAPKIN_DOC, **change})


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "kernel_lib", "recovery", "decide", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=120)


def test_cli_decides_from_a_file(tmp_path):
    path = tmp_path / "omega.json"
    path.write_text(json.dumps(NAPKIN_DOC))
    proc = _cli(str(path), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert (out["directive"], out["gate"], out["remedy"]) == ("FORWARD_REPAIR", 3, "error_feedback")
    assert round(out["numbers"]["forward_expected_s"], 1) == 47.4 and round(out["numbers"]["p_star_usd"], 2) == 0.06
    text = _cli(str(path), cwd=tmp_path)
    assert text.returncode == 0 and text.stdout.startswith("directive  FORWARD_REPAIR\ngate       3\n")


@pytest.mark.parametrize("content, needle", [
    ('{"failed_step": ', "is not JSON"),
    (json.dumps({k: v for k, v in NAPKIN_DOC.items() if k != "budget"}), "missing budget"),
    (json.dumps({**NAPKIN_DOC, "policy": {"k_repair": 0}}), "k_repair"),
    (json.dumps([1, 2]), "must be an object"),
])
def test_cli_bad_input_is_one_error_line_and_exit_2(tmp_path, content, needle):
    path = tmp_path / "omega.json"
    path.write_text(content)
    proc = _cli(str(path), "--json", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], proc.stderr


def test_cli_missing_file_is_exit_2(tmp_path):
    proc = _cli(str(tmp_path / "nope.json"), cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("error: ")


def test_cli_help_documents_the_omega_format(tmp_path):
    proc = _cli("--help", cwd=tmp_path)
    assert proc.returncode == 0
    for key in ("failed_step", "budget", "history", "remedies", "reserves", "outcomes", "pivot_crossed",
                "Napkin Math 0.2"):
        assert key in proc.stdout, key


def test_replace_keeps_validation():
    with pytest.raises(RecoveryPolicyError):
        replace(Budget(1, 1, 1.0), usd_rem=float("nan"))
