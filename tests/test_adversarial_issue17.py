"""Adversarial checks of issue 17 (Failure Recovery II): inputs and sizes the feature tests did not try.

Fault model: a user (or a generated plan, Ω or log) hands the recovery commands bad, odd or very
large input. Invariant: bad input is refused with one typed error (exit 2), every answer is
computed in time roughly linear in the input per pivot candidate, and the answers keep the
promises of issue 17. Goal: each test below failed before its fix.
"""

from __future__ import annotations

import time

import pytest

from kernel_lib.cli import main
from kernel_lib.errors import PlanError
from kernel_lib.recovery.pivot import Plan, PlanStep, check_plan, plan_from_json, propose_order

# --- plan check / the reorderer -------------------------------------------------------------------


def _chain_of_stageable_pivots(n: int) -> Plan:
    return Plan(tuple(PlanStep(f"s{i}", "III", depends_on=(f"s{i - 1}",) if i else (), stageable=True)
                      for i in range(n)))


def test_reorderer_on_a_chain_of_stageable_pivots_is_not_cubic():
    """A chain of n stageable tier III steps has no valid order (each candidate pivot has others
    depending on it or on a staged payload). The reorderer used to recompute the descendants of every
    other pivot for every candidate (O(n^3): 15 s at n=400, minutes at 2,000) and to report one
    reason per (candidate, step) pair (n^2 reasons: 159,600 at n=400)."""
    p = _chain_of_stageable_pivots(400)
    t = time.perf_counter()
    prop = propose_order(p)
    took = time.perf_counter() - t
    assert prop.order is None and prop.reasons
    assert len(prop.reasons) <= 3 * 400, len(prop.reasons)
    assert took < 3.0, took
    # the offending steps are still all named
    assert any(r.rule == "dependency_order" and "s399" in r.steps for r in prop.reasons)


def test_reorderer_on_a_dense_2000_step_plan_finishes_quickly():
    """2,000 steps, one stageable pivot in 50, each step depending on the 30 before it: the
    finalization set was rebuilt (a set union) once per step and per candidate (15 s)."""
    steps = tuple(PlanStep(f"s{i}", "III" if i % 50 == 0 else "I", "idempotent",
                           tuple(f"s{j}" for j in range(max(0, i - 30), i)), stageable=i % 50 == 0)
                  for i in range(2000))
    t = time.perf_counter()
    prop = propose_order(Plan(steps))
    assert time.perf_counter() - t < 3.0
    if prop.order is not None:
        assert check_plan(prop.plan).valid


def test_reorderer_on_2000_independent_stageable_pivots_is_fast_and_valid():
    p = Plan(tuple(PlanStep(f"s{i}", "III", stageable=True) for i in range(2000)))
    t = time.perf_counter()
    prop = propose_order(p)
    assert time.perf_counter() - t < 2.0
    assert prop.pivot == "s0" and len(prop.staged) == 1999 and check_plan(prop.plan).valid


def test_depends_on_as_a_json_object_is_refused():
    """``"depends_on": {"b": 1}`` was read as the list of its keys (a plan with an unknown
    dependency, exit 1) although the format says a list of ids."""
    with pytest.raises(PlanError, match="depends_on must be a list"):
        plan_from_json([{"id": "a", "tier": "I", "depends_on": {"b": 1}}])
    with pytest.raises(PlanError, match="outbox must be a list"):
        plan_from_json([{"id": "a", "tier": "III", "outbox": {"b": 1}}])


def test_plan_check_on_an_empty_path_is_not_called_a_directory(capsys):
    """``plan check ''`` said "'': a directory, not a plan file" (Path('') is '.')."""
    assert main(["plan", "check", "", "--json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "directory" not in err[0]


# --- recovery decide / D(Ω) -------------------------------------------------------------------------

import copy  # noqa: E402
import json  # noqa: E402

from kernel_lib.errors import OmegaError  # noqa: E402
from kernel_lib.recovery.policy import config_from_dict, decide, omega_from_dict  # noqa: E402

NAPKIN = {"failed_step": {"step_id": "mig.T6", "tool": "apply_routes", "tier": "II", "pivot_crossed": False},
          "error": {"http_status": 422, "error": "routes[0].port must be an integer", "retryable": False},
          "budget": {"tokens_rem": 200000, "steps_rem": 20, "usd_rem": 5.0},
          "history": [{"step_id": "mig.T1-5", "compensation_s": 40.6, "compensation_usd": 0.0, "forward_s": 46.0,
                       "forward_usd": 0.162}],
          "remedies": [{"name": "error_feedback", "tokens": 2570, "usd": 0.00987, "s": 4.1, "success_p": 0.5}]}


def _decide_cli(tmp_path, capsys, doc=None, raw: bytes | None = None):
    f = tmp_path / "omega.json"
    if raw is not None:
        f.write_bytes(raw)
    else:
        f.write_text(json.dumps(doc))
    rc = main(["recovery", "decide", str(f), "--json"])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err.strip().splitlines()


@pytest.mark.parametrize("where,value", [
    (("budget", "tokens_rem"), 10 ** 400),   # OverflowError: int too large to convert to float
    (("budget", "usd_rem"), 10 ** 400),
    (("budget", "steps_rem"), 10 ** 400),
], ids=["tokens_rem", "usd_rem", "steps_rem"])
def test_decide_refuses_an_integer_beyond_a_float_with_a_typed_error(where, value, tmp_path, capsys):
    doc = copy.deepcopy(NAPKIN)
    doc[where[0]][where[1]] = value
    with pytest.raises(OmegaError):
        omega_from_dict(doc)
    rc, out, err = _decide_cli(tmp_path, capsys, doc)
    assert rc == 2 and len(err) == 1 and err[0].startswith("error:") and where[1] in err[0]


def test_decide_on_a_history_whose_sum_overflows_is_refused_not_a_traceback(tmp_path, capsys):
    """Three committed steps of 1e308 s each passed one by one, then U = fsum(...) raised
    OverflowError ("intermediate overflow in fsum") inside decide."""
    doc = copy.deepcopy(NAPKIN)
    doc["history"] = [{"step_id": f"x{i}", "compensation_s": 1e308, "compensation_usd": 1e308, "forward_s": 1e308,
                       "forward_usd": 1e308} for i in range(3)]
    rc, out, err = _decide_cli(tmp_path, capsys, doc)
    assert rc == 2 and len(err) == 1 and err[0].startswith("error:") and "compensation_s" in err[0]


def test_decide_on_a_binary_file_is_one_error_line(tmp_path, capsys):
    rc, out, err = _decide_cli(tmp_path, capsys, raw=b"\xff\xfe\x00garbage")
    assert rc == 2 and len(err) == 1 and err[0].startswith("error:") and "UTF-8" in err[0]


def test_decide_refuses_outcomes_that_are_not_objects():
    """``"outcomes": [5]`` was skipped in silence (p then came from the prior alone)."""
    doc = copy.deepcopy(NAPKIN) | {"outcomes": [5, "x"]}
    with pytest.raises(OmegaError, match="outcomes"):
        config_from_dict(doc)


def test_after_the_pivot_no_input_yields_a_rollback():
    """Every gate, after the pivot: fatal, unclassified, transient exhausted, anti-spin, no budget,
    p = 0, the economics: never BACKWARD_ROLLBACK."""
    errors = [{"http_status": 401, "error": "credential revoked", "retryable": False}, "",
              {"http_status": 429, "error": "slow down", "retryable": True},
              NAPKIN["error"], "SyntaxError: invalid syntax"]
    for err in errors:
        for retries, repairs, tokens, p in [(0, 0, 200000, 0.5), (99, 3, 0, 0.0), (5, 2, 2570, 1.0)]:
            doc = copy.deepcopy(NAPKIN)
            doc["failed_step"] |= {"pivot_crossed": True, "retries_done": retries, "repairs_done": repairs}
            doc["error"], doc["budget"]["tokens_rem"] = err, tokens
            doc["remedies"][0]["success_p"] = p
            d = decide(omega_from_dict(doc), config_from_dict(doc))
            assert d.directive != "BACKWARD_ROLLBACK", (err, retries, repairs, tokens, p, d.reason)


# --- the policy explorer ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["rerun_s", "unwind_usd", "usd_rem", "repair_s"])
def test_policy_explorer_marks_a_huge_given_invalid_and_applies_the_others(name):
    """A cost above JSON_NUMBER_MAX passed the widget's check but D(Ω) refuses it: the widget said
    "could not decide (RecoveryPolicyError)", marked nothing invalid and dropped the other changes."""
    from widgets.policy_explorer import PolicyExplorer

    w = PolicyExplorer(draw_svg=False)
    assert not w.update(**{name: 1e20, "success_p": 0.01})
    assert name in w.invalid and "could not decide" not in w.error and name in w.error
    assert w.view.givens["success_p"] == 0.01 and w.decision["directive"] == "BACKWARD_ROLLBACK"
