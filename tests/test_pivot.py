"""The pivot action boundary (Failure Recovery, "Pivot Action Irreversibility", Example 0.1).

Fault model: an agent proposes a plan whose irreversible steps are interleaved with fallible ones
(the dual-commit trap). Invariant: a plan is accepted only with at most one pivot, reversible
steps before it and repeat-safe steps after it, in an order that respects its dependencies.
Goal: the checker refuses every plan that breaks it, naming the rule and the steps; the
reorderer finds a valid order (with escrow and an atomic outbox) whenever one exists, and a brute
force over every order and every escrow choice agrees when it says none does.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel_lib.cli import main
from kernel_lib.core.proposals import REPEAT_CONTRACTS
from kernel_lib.errors import ConfigError, PlanError
from kernel_lib.recovery.pivot import (
    STAGE_SUFFIX,
    Plan,
    PlanStep,
    check_plan,
    example_0_1,
    load_plan,
    plan_from_json,
    propose_order,
)

ROOT = Path(__file__).resolve().parents[1]


def plan(*steps: dict) -> Plan:
    return plan_from_json(list(steps))


def rules(p: Plan) -> dict[str, list[str]]:
    return check_plan(p).offending


# --- Example 0.1 ---------------------------------------------------------------------------------


def test_example_0_1_is_refused_with_its_reasons_then_remedied():
    """The dual-commit trap: T3 and T5 are both pivots, T4 (compensable, not idempotent) runs after
    T3. The remedy is derived: T1, T2, T4 (moved before the pivot), T5 staged, T3 flushing T5."""
    p = example_0_1()
    verdict = check_plan(p)
    assert not verdict.valid and verdict.pivot == "T3"
    assert verdict.offending == {"at_most_one_pivot": ["T3", "T5"], "finalization_repeat_safe": ["T4", "T5"]}
    prop = propose_order(p)
    assert prop.order == ("T1", "T2", "T4", "T5" + STAGE_SUFFIX, "T3")
    assert prop.pivot == "T3" and prop.staged == ("T5",)
    staged = prop.plan.step("T5.stage")
    assert staged.tier == "I" and staged.stage_of == "T5" and staged.depends_on == ("T2", "T4")
    assert prop.plan.step("T3").outbox == ("T5",)
    kinds = {(t.kind, t.step) for t in prop.transformations}
    assert kinds == {("stage_in_escrow", "T5"), ("outbox_flush", "T3"), ("moved_before_pivot", "T4")}
    after = check_plan(prop.plan)
    assert after.valid and after.pivot == "T3" and after.finalization == ()
    assert sum(s.tier == "III" for s in prop.plan.steps) == 1


def test_the_remedy_is_derived_from_the_dependencies_not_typed_in():
    """Change the example's dependencies and the proposal follows: if T5 needs the live routing
    (depends on T3), its payload cannot be staged, and no valid order exists."""
    data = example_0_1().to_json()
    data["steps"][4]["depends_on"] = ["T3", "T4"]
    prop = propose_order(plan_from_json(data))
    assert prop.order is None
    assert any(r.rule == "dependency_order" and "T5" in r.steps for r in prop.reasons)
    # and if the catalog migration needs the live routing, it must follow the pivot: it is not idempotent
    data = example_0_1().to_json()
    data["steps"][3]["depends_on"] = ["T3"]
    prop = propose_order(plan_from_json(data))
    assert prop.order is None
    assert any(r.rule == "finalization_repeat_safe" and r.steps == ("T4",) for r in prop.reasons)
    data["steps"][3]["repeat_contract"] = "idempotency_key"   # a keyed migration may follow the pivot
    data["steps"][4]["depends_on"] = ["T2"]
    prop = propose_order(plan_from_json(data))
    assert prop.order == ("T1", "T2", "T5.stage", "T3", "T4") and check_plan(prop.plan).valid
    assert ("moved_after_pivot", "T4") not in {(t.kind, t.step) for t in prop.transformations}


# --- each rule, with its offending steps -----------------------------------------------------------


def test_unknown_dependency_and_cycle():
    p = plan({"id": "a", "tier": "I", "depends_on": ["zz"]}, {"id": "b", "tier": "II", "depends_on": ["c"]},
             {"id": "c", "tier": "II", "depends_on": ["b"]})
    got = rules(p)
    assert got["unknown_dependency"] == ["a"] and got["dependency_cycle"] == ["b", "c"]
    prop = propose_order(p)
    assert prop.order is None and {r.rule for r in prop.reasons} == {"unknown_dependency", "dependency_cycle"}
    assert rules(plan({"id": "a", "tier": "I", "depends_on": ["a"]}))["dependency_cycle"] == ["a"]


def test_dependency_order():
    p = plan({"id": "a", "tier": "I", "depends_on": ["b"]}, {"id": "b", "tier": "II"})
    assert rules(p) == {"dependency_order": ["a"]}
    assert propose_order(p).order == ("b", "a")


def test_two_unstageable_pivots_have_no_order():
    p = plan({"id": "a", "tier": "III"}, {"id": "b", "tier": "II"}, {"id": "c", "tier": "III"})
    assert rules(p)["at_most_one_pivot"] == ["a", "c"]
    prop = propose_order(p)
    assert prop.order is None and prop.reasons[0].rule == "at_most_one_pivot" and prop.reasons[0].steps == ("a", "c")


def test_finalization_needs_repeat_safe_steps():
    p = plan({"id": "p", "tier": "III"}, {"id": "u", "tier": "I"}, {"id": "m", "tier": "II",
                                                                  "repeat_contract": "at_most_once"},
             {"id": "k", "tier": "II", "repeat_contract": "idempotency_key"},
             {"id": "r", "tier": "I", "repeat_contract": "read_only"})
    assert rules(p) == {"finalization_repeat_safe": ["u", "m"]}
    assert check_plan(plan({"id": "p", "tier": "III"}, {"id": "k", "tier": "II", "repeat_contract": "idempotent",
                                                        "depends_on": ["p"]})).valid


def test_a_non_idempotent_step_that_depends_on_the_pivot_has_no_order():
    p = plan({"id": "p", "tier": "III"}, {"id": "x", "tier": "II", "depends_on": ["p"]})
    prop = propose_order(p)
    assert prop.order is None and prop.reasons[0].rule == "finalization_repeat_safe"
    assert prop.reasons[0].steps == ("x",)


def test_escrow_rule_on_transformed_plans():
    # a staged payload never flushed, a flush with nothing staged, a stage after the pivot, an outbox off the pivot
    assert rules(plan({"id": "s", "tier": "I", "stage_of": "w"}, {"id": "p", "tier": "III"}))["escrow"] == ["s"]
    assert rules(plan({"id": "p", "tier": "III", "outbox": ["w"]}))["escrow"] == ["p"]
    assert rules(plan({"id": "p", "tier": "III", "outbox": ["w"]}, {"id": "s", "tier": "I", "stage_of": "w",
                                                                    "repeat_contract": "idempotent"}))["escrow"] \
        == ["s", "p"]
    assert rules(plan({"id": "a", "tier": "I", "outbox": ["w"]}))["escrow"] == ["a"]
    assert rules(plan({"id": "s", "tier": "II", "stage_of": "w"}, {"id": "p", "tier": "III", "outbox": ["w"]}))[
        "escrow"] == ["s"]
    # a dependency on a flushed payload is met only after the pivot
    good = plan({"id": "s", "tier": "I", "stage_of": "w"}, {"id": "p", "tier": "III", "outbox": ["w"]},
                {"id": "n", "tier": "I", "repeat_contract": "idempotent", "depends_on": ["w"]})
    assert check_plan(good).valid
    bad = plan({"id": "s", "tier": "I", "stage_of": "w"}, {"id": "n", "tier": "I", "depends_on": ["w"]},
               {"id": "p", "tier": "III", "outbox": ["w"]})
    assert rules(bad) == {"dependency_order": ["n"]}


def test_bad_input_is_a_typed_error():
    for bad in ([], [{"id": "a"}], [{"id": "a", "tier": "IV"}], [{"id": "a", "tier": "I", "repeat_contract": "maybe"}],
                [{"id": "a", "tier": "I"}, {"id": "a", "tier": "II"}], [{"id": "", "tier": "I"}],
                [{"id": "a", "tier": "I", "stageable": True}], [{"id": "a", "tier": "I", "depends_on": "b"}],
                [{"id": "a", "tier": "I", "depend_on": ["b"]}], {"steps": [], "x": 1}, "a plan", [1],
                {"name": "no steps"}, [{"id": "a", "tier": "III", "stageable": "yes"}]):
        with pytest.raises(PlanError):
            plan_from_json(bad)
    assert issubclass(PlanError, ConfigError)
    with pytest.raises(PlanError, match="not valid JSON"):
        load_plan("{")
    with pytest.raises(TypeError):
        check_plan([{"id": "a", "tier": "I"}])


def test_undeclared_contract_is_unsafe_and_the_json_round_trips():
    p = example_0_1()
    assert PlanStep("x", "I").repeat_contract == "unsafe"
    assert plan_from_json(json.loads(json.dumps(p.to_json()))) == p
    prop = propose_order(p)
    assert plan_from_json(prop.plan.to_json()) == prop.plan


# --- the property: proposal valid, or brute force finds nothing -----------------------------------


@st.composite
def small_plans(draw) -> Plan:
    n = draw(st.integers(1, 6))
    steps = []
    for i in range(n):
        tier = draw(st.sampled_from(["I", "II", "III"]))
        deps = draw(st.lists(st.integers(0, i - 1), max_size=i, unique=True)) if i else []
        steps.append(PlanStep(f"s{i}", tier, draw(st.sampled_from(sorted(REPEAT_CONTRACTS))),
                              tuple(f"s{d}" for d in deps),
                              stageable=tier == "III" and draw(st.booleans())))
    order = draw(st.permutations(range(n)))   # the plan's own order need not respect the DAG
    return Plan(tuple(steps[i] for i in order))


def _brute_force_valid_order_exists(p: Plan) -> bool:
    """Every escrow choice (any subset of the stageable steps) and every order of the resulting
    steps, judged by check_plan alone."""
    stageable = [s.id for s in p.steps if s.stageable]
    for k in range(len(stageable) + 1):
        for chosen in itertools.combinations(stageable, k):
            rest = [s for s in p.steps if s.id not in chosen]
            pivots = [s.id for s in rest if s.tier == "III"]
            if chosen and len(pivots) != 1:
                continue          # a staged payload needs the one pivot's outbox
            stages = [PlanStep(x + STAGE_SUFFIX, "I", "idempotent", p.step(x).depends_on, stage_of=x)
                      for x in chosen]
            base = [PlanStep(s.id, s.tier, s.repeat_contract, s.depends_on,
                             outbox=tuple(chosen) if s.tier == "III" else ()) for s in rest]
            for perm in itertools.permutations(base + stages):
                if check_plan(Plan(perm)).valid:
                    return True
    return False


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_plans())
def test_proposal_is_valid_or_no_order_exists(p):
    prop = propose_order(p)
    if prop.order is not None:
        verdict = check_plan(prop.plan)
        assert verdict.valid, (p.to_json(), prop.to_json(), verdict.reasons)
        assert prop.order == prop.plan.ids
        # every original step is there, staged ones as their staging step
        assert {s.stage_of or s.id for s in prop.plan.steps} == set(p.ids)
        assert sum(s.tier == "III" for s in prop.plan.steps) <= 1
        pos = {i: k for k, i in enumerate(prop.order)}
        piv = pos.get(prop.pivot, len(pos))
        for s in prop.plan.steps:   # the dependencies, an outbox-flushed one met only after the pivot
            for d in s.depends_on:
                assert (pos[d] < pos[s.id]) if d in pos else (pos[s.id] > piv), (s, d)
        if check_plan(p).valid:
            assert prop.order == p.ids and not prop.transformations   # a valid plan is left as it is
    else:
        assert prop.reasons
        assert not _brute_force_valid_order_exists(p), p.to_json()


def test_brute_force_finds_example_0_1s_remedy_too():
    assert _brute_force_valid_order_exists(example_0_1())
    assert not _brute_force_valid_order_exists(plan({"id": "a", "tier": "III"}, {"id": "b", "tier": "III"}))


def test_ties_follow_the_plans_own_order():
    p = plan({"id": "c", "tier": "I"}, {"id": "a", "tier": "II"}, {"id": "b", "tier": "I", "depends_on": ["c"]})
    assert propose_order(p).order == ("c", "a", "b")
    assert propose_order(p) == propose_order(p)


# --- CLI ----------------------------------------------------------------------------------------


def test_cli_exit_codes_and_keys(tmp_path, capsys):
    f = tmp_path / "plan.json"
    assert main(["plan", "example", "ex0.1"]) == 0
    f.write_text(capsys.readouterr().out)
    assert main(["plan", "check", str(f), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert {"valid", "reasons", "proposed_order", "transformations"} <= set(out)
    assert out["valid"] is False and out["proposed_order"] == ["T1", "T2", "T4", "T5.stage", "T3"]
    assert any(r.startswith("at_most_one_pivot [T3, T5]") for r in out["reasons"])
    f.write_text(json.dumps(out["transformed_plan"]))
    assert main(["plan", "check", str(f), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["valid"] is True and again["reasons"] == [] and again["proposed_order"] == out["proposed_order"]
    f.write_text(json.dumps([{"id": "a", "tier": "III"}, {"id": "b", "tier": "III"}]))
    assert main(["plan", "check", str(f), "--json"]) == 1
    none = json.loads(capsys.readouterr().out)
    assert none["proposed_order"] is None and none["proposal_reasons"]
    assert main(["plan", "check", str(f)]) == 1
    assert "no valid order exists" in capsys.readouterr().out


@pytest.mark.parametrize("text", ["{", "[]", '[{"id": "a"}]', '[{"id": "a", "tier": "I", "stageable": true}]',
                                  '{"steps": [{"id": "a", "tier": "I"}], "extra": 1}'])
def test_cli_bad_input_is_one_error_line_exit_2(text, tmp_path, capsys):
    f = tmp_path / "plan.json"
    f.write_text(text)
    assert main(["plan", "check", str(f), "--json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:"), err


def test_cli_missing_file_directory_and_unknown_example(tmp_path, capsys):
    for argv in (["plan", "check", str(tmp_path / "nope.json")], ["plan", "check", str(tmp_path)],
                 ["plan", "example", "ex9.9"]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error:"), (argv, err)


def test_cli_as_module_help_documents_the_format(tmp_path):
    h = subprocess.run([sys.executable, "-m", "kernel_lib", "plan", "check", "--help"], capture_output=True,
                       text=True, cwd=ROOT, timeout=120)
    assert h.returncode == 0
    for word in ("plan format", "tier", "repeat_contract", "depends_on", "stageable", "exit status", "proposed_order"):
        assert word in h.stdout, word
    f = tmp_path / "p.json"
    f.write_text(json.dumps({"steps": [{"id": "a", "tier": "II"}, {"id": "b", "tier": "III", "depends_on": ["a"]}]}))
    r = subprocess.run([sys.executable, "-m", "kernel_lib", "plan", "check", str(f), "--json"], capture_output=True,
                       text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0 and json.loads(r.stdout)["valid"] is True, r.stderr
