"""The policy explorer widget (Failure Recovery, figure 2, gate 3's break-even, Napkin Math 0.2).

Fault model: a reader (or code) sets givens that make no sense (a negative cost, p above 1, NaN,
an empty box, a string, a fractional token count, an unknown error class), from Python or from the
page. Invariant: the directive, gate, reason and numbers shown are ``decide``'s for the last valid
givens; the regions are ``decide`` on the grid and the curve is ``economics``' p*; a bad given is
a message in ``error``, marked in ``invalid``, and every other given still applies; nothing raises.
"""

from __future__ import annotations

import math

import pytest

from kernel_lib.recovery.policy import decide, economics, RepairCosts
from kernel_lib.recovery.taxonomy import classify_error
from widgets.policy_explorer import (
    DEFAULTS, ERROR_CLASSES, GIVENS, SAMPLE_ERRORS, PolicyExplorer, explore_policy, omega_and_config,
)


@pytest.fixture(scope="module")
def w0() -> PolicyExplorer:
    return PolicyExplorer(draw_svg=False)


def test_the_defaults_are_napkin_math_0_2_and_every_number_is_decides(w0):
    omega, config = omega_and_config(DEFAULTS)
    d = decide(omega, config)
    assert w0.error == "" and w0.invalid == {}
    assert w0.decision["directive"] == d.directive == "FORWARD_REPAIR" and w0.decision["gate"] == 3
    assert w0.decision["reason"] == d.reason and w0.readout_lines[1] == d.reason
    n = w0.decision["numbers"]
    assert math.isclose(n["p_star_s"], 4.1 / 86.6) and math.isclose(n["p_star_usd"], 0.00987 / 0.162)
    assert math.isclose(n["forward_expected_s"], 4.1 + 0.5 * 86.6)


def test_the_sample_errors_are_of_their_class():
    for cls in ERROR_CLASSES:
        assert classify_error(SAMPLE_ERRORS[cls]).error_class == cls


def test_regions_and_curve_come_from_the_kernel():
    v = explore_policy(success_p=0.3, unwind_s=100.0, rerun_usd=0.5)
    for r in v.regions[::37]:
        o, c = omega_and_config({**v.givens, "unwind_s": r["unwind_s"], "success_p": r["success_p"]})
        assert decide(o, c).directive == r["directive"]
    costs = RepairCosts(v.givens["repair_tokens"], v.givens["repair_usd"], v.givens["repair_s"])
    for c in v.break_even[::25]:
        e = economics(costs, 0.3, unwind_s=c["unwind_s"], unwind_usd=0.0, rerun_s=46.0, rerun_usd=0.5)
        assert math.isclose(c["p_star_s"], e.p_star_s)
    marks = [layer for layer in v.chart_spec["layer"] if layer["mark"].get("shape") == "diamond"
             or layer["mark"] == {"type": "point", "shape": "diamond", "size": 160, "filled": True, "color": "black"}]
    assert marks and marks[0]["data"]["values"][0]["success_p"] == 0.3


@pytest.mark.parametrize("cls, pivot, directive", [
    ("transient", False, "TRANSIENT_RETRY"), ("fatal", False, "BACKWARD_ROLLBACK"),
    ("fatal", True, "OPERATOR_ESCALATE"), ("unclassified", False, "BACKWARD_ROLLBACK"),
    ("semantic", True, "FORWARD_REPAIR"),
])
def test_each_class_and_the_pivot(w0, cls, pivot, directive):
    assert w0.update(error_class=cls, pivot_crossed=pivot)
    assert w0.decision["directive"] == directive
    assert w0.update(error_class="semantic", pivot_crossed=False)


def test_a_low_p_or_no_budget_rolls_back_before_the_pivot():
    w = PolicyExplorer(draw_svg=False, success_p=0.02)
    assert (w.decision["directive"], w.decision["gate"]) == ("BACKWARD_ROLLBACK", 3)
    assert w.update(success_p=0.5, tokens_rem=3000, tokens_reserve=1000)
    assert (w.decision["directive"], w.decision["gate"]) == ("BACKWARD_ROLLBACK", 2)


@pytest.mark.parametrize("name, bad", [
    ("success_p", 1.5), ("success_p", float("nan")), ("unwind_s", -1.0), ("repair_usd", None),
    ("repair_tokens", 2.5), ("tokens_rem", "lots"), ("pivot_crossed", "yes"), ("error_class", "bogus"),
    ("usd_rem", float("inf")), ("rerun_s", [1]),
])
def test_a_bad_given_is_marked_with_the_widgets_message_and_the_others_apply(name, bad):
    w = PolicyExplorer(draw_svg=False)
    before = w.decision
    setattr(w, name, bad)                       # never a TraitError
    assert name in w.invalid and w.error.startswith(name) and "Until fixed" in w.error
    assert w.decision == before                 # the last valid value still decides
    w.success_p = 0.01 if name != "success_p" else w.success_p
    if name != "success_p":
        assert w.decision["numbers"]["p"] == 0.01 and name in w.invalid     # another change still applies
    setattr(w, name, DEFAULTS[name])
    assert w.invalid == {} and w.error == ""


def test_a_box_emptied_in_the_page_is_reported():
    w = PolicyExplorer(draw_svg=False)
    w.set_state({"repair_s": None})
    assert "repair_s" in w.invalid
    w.set_state({"repair_s": None})             # None again: no trait change, still reported
    assert "repair_s" in w.invalid and "no value" in w.error
    w.set_state({"repair_s": 4.1})
    assert w.invalid == {}


def test_wrong_types_on_output_traits_get_the_widgets_message(w0):
    w0.revision = "x"
    assert "revision" in w0.error and "refused" in w0.error


def test_unknown_givens():
    with pytest.raises(TypeError, match="unknown givens"):
        PolicyExplorer(draw_svg=False, sunk=3)
    w = PolicyExplorer(draw_svg=False)
    assert not w.update(sunk=3) and "unknown given" in w.error
    assert set(GIVENS) == set(DEFAULTS)


def test_the_chart_is_drawn_offline():
    pytest.importorskip("vl_convert")
    w = PolicyExplorer()
    assert w.notice == "" and w.chart_svg.startswith("<svg") and "FORWARD_REPAIR" in w.chart_svg
