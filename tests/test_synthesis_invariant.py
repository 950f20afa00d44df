"""The crash-consistency invariant (Failure Recovery, "Fault-Tolerant System Synthesis"), checked
after every step of runs under the 20 % fault profile (hypothesis over seeds) and on every crash
state of the systems-administration workload (a crash sweep). Effects are counted by the services."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel_lib.recovery.synthesis.config import CONFIGS
from kernel_lib.recovery.synthesis.faults import Fault, FaultPlan, ScriptedFaultPlan
from kernel_lib.recovery.synthesis.harness import Harness
from kernel_lib.recovery.synthesis.invariant import CLASSIFICATIONS, check_crash_consistency, classify
from kernel_lib.sim.services import TwinFleet
from kernel_lib.sim.sysadmin import SYSADMIN_TASK, account_effects, crash_sweep


def _run_checking_every_step(config: str, seed: int, index: int) -> tuple[list, object]:
    fleet = TwinFleet(simulate_durations=True)
    reports = []

    def step(h: Harness, name: str, ev) -> None:
        if ev is None and name != "after:dispatch":
            return
        events = list(h.proc.store.read(h.outcome.trajectory_id))
        reports.append((name, check_crash_consistency(events, fleet.audits(), trajectory_id=h.outcome.trajectory_id)))

    out = Harness(CONFIGS[config], fleet, SYSADMIN_TASK, plan=FaultPlan(seed), audit=fleet.audits,
                  on_step=step).run(f"inv-{seed}-{index}", index)
    return reports, out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), index=st.integers(0, 50))
def test_the_synthesized_runtime_is_crash_consistent_after_every_step(seed, index):
    """Fault model: the 20 % profile, seeded. Invariant: at every gate position every mutation the
    services applied has a durable intent, and the trajectory is classifiable. Goal: it holds at
    each step and at each restart, and the run ends completed or unwound."""
    reports, out = _run_checking_every_step("synthesized", seed, index)
    assert reports
    bad = [(n, r.violations) for n, r in reports if not r.ok]
    assert not bad
    assert all(r.classification in CLASSIFICATIONS for _, r in reports)
    assert all(r["ok"] and r["classification"] in CLASSIFICATIONS for r in out.invariant)
    assert out.state in ("COMPLETED", "ABORT_CONSISTENT")


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000))
def test_a_durable_log_without_reconciliation_is_still_crash_consistent(seed):
    """WAL only: the invariant is about records, not about finishing: it holds while the run halts."""
    reports, out = _run_checking_every_step("wal_only", seed, 1)
    assert all(r.ok for _, r in reports) and all(r["ok"] for r in out.invariant)


def test_without_a_durable_log_the_invariant_fails_at_the_first_mutation():
    """Unmanaged: the records lived in memory; what survives a crash is nothing, while the services
    hold the effects. The same check that passes for the synthesized runtime reports it."""
    fleet = TwinFleet(simulate_durations=True)
    out = Harness(CONFIGS["unmanaged"], fleet, SYSADMIN_TASK, audit=fleet.audits).run("mem")
    assert out.state == "COMPLETED"
    end = out.invariant[-1]
    assert not end["ok"] and end["violations"] == end["mutations_checked"] >= 5
    assert {v["kind"] for v in end["violation_list"]} == {"mutation_without_durable_intent"}


def test_a_mutation_with_no_intent_in_the_log_is_a_violation_and_an_unsettleable_doubt_unclassifiable():
    fleet = TwinFleet(simulate_durations=True)
    seen = {}

    def step(h, name, ev):
        seen["store"] = h.proc.store
    out = Harness(CONFIGS["synthesized"], fleet, SYSADMIN_TASK, on_step=step).run("x")
    events = list(seen["store"].read("x"))
    audit = fleet.audits()
    audit["database"].append({"action": "provision_db", "operation_id": "x.T99", "resource": "database-9999"})
    report = check_crash_consistency(events, audit, trajectory_id="x")
    assert not report.ok and report.violations[0]["operation_id"] == "x.T99"
    assert out.state == "COMPLETED" and classify(events)[0] == "committed"
    # the log cut right after a ToolIntent whose contract is unsafe and has no status lookup
    cut = next(i for i, e in enumerate(events) if e.event_type == "ToolIntent")
    intent = events[cut].payload
    forged = intent.model_copy(update={"status_lookup": False, "repeat_contract": "unsafe"})
    from kernel_lib.core.events import Event

    ev = Event.create(trajectory_id="x", event_id=events[cut].event_id, sequence_number=events[cut].sequence_number,
                      payload=forged)
    cls, why = classify(events[:cut] + [ev])
    assert cls is None and why[0]["kind"] == "in_doubt_unresolvable"


def test_every_crash_position_of_figure5_recovers_without_duplicate_or_leak():
    """Fault model: figure 5's drop after the effect at T3 and broken SQL at T4, plus a kill after
    each gate position in turn. Goal: every run completes; the database service applied one
    database; nothing is left that the completed trajectory does not keep; each restart state is
    classified (all three classes occur) and consistent; nothing committed is lost (RPO 0)."""
    r = crash_sweep("synthesized")
    assert r["clean_state"] == "COMPLETED" and r["positions"] >= 50
    assert r["ok"] and r["completed"] == r["positions"]
    assert r["duplicated_effects"] == 0 and r["leaked_resources"] == 0 and r["invariant_violations"] == 0
    classes = Counter(c for run in r["runs"] for c in run["restart_classification"])
    assert set(classes) == set(CLASSIFICATIONS)
    assert all(rpo == 0 for run in r["runs"] for rpo in run["rpo_turns"])


def test_every_crash_position_of_an_exhausted_repair_ends_in_a_clean_unwind():
    plan = ScriptedFaultPlan({(3, 0): Fault("network_drop", after_effect=True), (4, 0): Fault("tool_exception"),
                              (4, 1): Fault(None, repair_u=0.9), (4, 2): Fault(None, repair_u=0.9)})
    r = crash_sweep("synthesized", plan=plan)
    assert r["clean_state"] == "ABORT_CONSISTENT" and r["ok"]
    assert {run["state"] for run in r["runs"]} == {"ABORT_CONSISTENT"}
    assert r["leaked_resources"] == 0 and r["duplicated_effects"] == 0


def test_the_same_sweep_without_the_synthesis_duplicates_leaks_and_breaks_the_invariant():
    """Saga only: the dropped answer is retried blindly (the database service applies a second
    database) and a kill loses Σ (what was created stays): the services and the invariant say so."""
    r = crash_sweep("saga_only")
    assert not r["ok"] and r["duplicated_effects"] > 0 and r["leaked_resources"] > 0
    assert r["invariant_violations"] > 0


@pytest.mark.parametrize("kept, expected", [(None, 2), ({"r-1"}, 1)])
def test_account_effects_counts_from_the_services_records(kept, expected):
    audits = {"database": [{"action": "provision_db", "operation_id": "t.T3", "resource": "r-1"},
                           {"action": "provision_db", "operation_id": "t.T4", "resource": "r-2"},
                           {"action": "provision_db", "operation_id": "u.T1", "resource": "r-3"}]}
    res = {"database": {f"r-{i}": {"kind": "database", "state": "active", "operation_id": op,
                                   "arguments": {"name": "a"}, "pivot": False}
                        for i, op in ((1, "t.T3"), (2, "t.T4"), (3, "u.T1"))}}
    v = account_effects(audits, res, {"t": kept})
    assert v["duplicated_effects"] == 1 and v["leaked_resources"] == expected


@pytest.mark.parametrize("tamper", ["drop_one_intent", "duplicate_tail", "reverse"])
def test_a_tampered_log_is_reported_as_violations_not_raised(tamper):
    """Adversarial review (issue 20): a log whose intent for an applied mutation was removed (or one
    duplicated or reordered) made the checker raise SagaTransitionError from the saga fold, losing
    part (1)'s finding. Invariant: the checker answers with a report; an unfoldable log is a
    violation (the trajectory cannot be classified)."""
    fleet = TwinFleet(simulate_durations=True)
    seen = {}
    out = Harness(CONFIGS["synthesized"], fleet, SYSADMIN_TASK,
                  on_step=lambda h, name, ev: seen.setdefault("store", h.proc.store)).run("t")
    assert out.state == "COMPLETED"
    events = list(seen["store"].read("t"))
    audit = fleet.audits()
    assert check_crash_consistency(events, audit).ok
    if tamper == "drop_one_intent":
        gone = next(e for e in events if e.event_type == "ToolIntent" and e.payload.tool == "provision_db")
        tampered = [e for e in events if e is not gone]
    elif tamper == "duplicate_tail":
        tampered = events + events[-4:]
    else:
        tampered = list(reversed(events))
    report = check_crash_consistency(tampered, audit, trajectory_id="t")
    kinds = Counter(v["kind"] for v in report.violations)
    assert not report.ok and report.classification is None and kinds["log_unfoldable"] == 1
    if tamper == "drop_one_intent":
        assert any(v["kind"] == "mutation_without_durable_intent" and v["operation_id"] == gone.payload.operation_id
                   for v in report.violations)
    cls, why = classify(tampered, "t")
    assert cls is None and why[0]["kind"] == "log_unfoldable"


@pytest.mark.parametrize("events,audit", [
    (None, {}), ("not a log", {}), ([{"event_type": "ToolIntent"}], {}), (42, {}),
    ([], None), ([], {"database": "provision_db"}), ([], {"database": [["provision_db"]]}), ([], [1, 2]),
])
def test_the_checker_refuses_input_of_the_wrong_shape_with_a_typed_error(events, audit):
    """Bad input (not a log of Event records, an audit that is not {service: [entry, ...]}): a
    ConfigError that says what was expected, never a TypeError or AttributeError from inside."""
    from kernel_lib.errors import ConfigError
    from kernel_lib.recovery.synthesis.invariant import check_crash_consistency

    with pytest.raises(ConfigError, match="events|audit"):
        check_crash_consistency(events, audit)
