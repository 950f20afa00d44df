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
