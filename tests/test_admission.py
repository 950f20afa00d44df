"""Continuation admission after a resume (§11.5.4).

Fault model: the worker died; a replacement took ownership and rebuilt the record. While the
trajectory was down, time passed (deadlines), an operator may have paused it, an operation may
still be in doubt, and the deployment may have moved to new model, prompt or tool-schema versions.
Invariant: recovered history never licenses new work by itself; every step passes the checks of
now, an in-doubt operation blocks only what depends on it or changes what it used, and no step is
admitted whose bound breaks consumption + outstanding + bound + reserve <= ceiling.
Goal: independent work continues; the rest is withheld (try again) or refused (with every reason),
and a refusal is on record.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib.gate.admission import (
    CHECKS, ContinuationGate, Deployment, ProposedStep, discarded_partial_streams, evaluate, recorded_versions,
    resolve_version,
)
from kernel_lib.gate.dispatch import (
    AdmissionPolicy, DispatchGate, ModelCall, ModelReply, ToolProposal, ToolReply, decision_id, reservation_id,
)
from kernel_lib.errors import AdmissionDenied, ConfigError, DispatchWithheld
from kernel_lib.core.events import (
    ApprovalRequested, Authorized, BudgetReserved, BudgetSettled, PlanChanged, TaskStarted,
)
from kernel_lib.log import FailureDomain, MemoryStore, TrajectoryLog
from kernel_lib.core.money import usd_to_micro
from kernel_lib.core.record import fold, initial_record

TRAJ = "traj-admission"
POLICY = AdmissionPolicy({"g": {"run_tests", "read_logs", "edit_file", "write_report", "m"}})
NOW = 1_000_000.0
TEST = ToolProposal("test_r18", "attempt1", "run_tests", {"snapshot": "ws_r18"}, "g", 0.5, input_ref="ws_r18")
EDIT = ToolProposal("edit_r19", "attempt1", "edit_file", {"path": "median.py"}, "g", 0.1, input_ref="ws_r18")
READ = ToolProposal("read_ci_logs", "attempt1", "read_logs", {"job": "nightly"}, "g", 0.05,
                    repeat_contract="read_only")
REPORT = ToolProposal("final_report", "attempt1", "write_report", {}, "g", 0.4)


def started(ceiling=5.0, reserve=0.5, deadline=None, fin_deadline=None, config=None):
    store = MemoryStore()
    log = TrajectoryLog(store, TRAJ, must_survive=FailureDomain.NONE, owner_epoch=0)
    gate = DispatchGate(log, POLICY, clock=lambda: NOW)
    gate.start(TaskStarted(task_id="t", requester="alice", objective="repair", grant_ids=["g"],
                           budget_ceiling_usd=ceiling, finalization_reserve_usd=reserve, deadline_unix_s=deadline,
                           finalization_deadline_unix_s=fin_deadline, config=config or {}))
    return store, gate


def crash_in_doubt(intent):
    """The request left and the worker died before any reply was logged."""
    raise SystemExit("worker crashed after dispatch")


def resume(store, epoch=1, now=NOW, deployment=None):
    """The replacement: fence installed, record folded, continuation admission in front of its gate."""
    store.install_fence(TRAJ, epoch)
    log = TrajectoryLog(store, TRAJ, must_survive=FailureDomain.NONE, owner_epoch=epoch)
    gate = DispatchGate(log, POLICY, clock=lambda: now)
    return ContinuationGate(gate, deployment, clock=lambda: now, issuer="worker-2")


def with_test_in_doubt(**kw):
    store, gate = started(**kw)
    with pytest.raises(SystemExit):
        gate.run_tool(TEST, crash_in_doubt)
    return store


def ok(intent):
    return ToolReply(status="completed", outcome={"ok": True}, observation_complete=True, charged_usd=0.01)


def outcome(d, name):
    return next(c.outcome for c in d.checks if c.name == name)


def refold(store):
    return fold(initial_record(TRAJ), store.read(TRAJ))


# --- in-doubt work blocks what depends on it, not the rest -------------------------------------

def test_dependent_edit_is_withheld_while_test_r18_is_in_doubt_and_nothing_is_reserved():
    store = with_test_in_doubt()
    cg = resume(store)
    before = store.head(TRAJ)
    d = cg.evaluate(ProposedStep.from_tool(EDIT, depends_on=("test_r18",)))
    assert d.verdict == "withhold" and outcome(d, "dependencies") == "withhold"
    assert outcome(d, "in_doubt") == "withhold"   # it would also change ws_r18, which test_r18 used
    with pytest.raises(DispatchWithheld, match="test_r18"):
        cg.run_tool(EDIT, ok, depends_on=("test_r18",))
    assert store.head(TRAJ) == before   # a withhold logs and reserves nothing
    assert "edit_r19" not in refold(store).operations


def test_independent_read_only_query_proceeds_while_test_r18_is_in_doubt():
    store = with_test_in_doubt()
    cg = resume(store)
    rec = cg.run_tool(READ, ok)
    assert rec.operations["read_ci_logs"].status == "established"
    assert rec.operations["test_r18"].status == "in_doubt"   # still in doubt, untouched


def test_a_mutation_of_what_an_in_doubt_operation_used_is_withheld_even_without_a_declared_dependency():
    store = with_test_in_doubt()
    d = resume(store).evaluate(ProposedStep.from_tool(EDIT))
    assert d.verdict == "withhold" and outcome(d, "dependencies") == "admit" and outcome(d, "in_doubt") == "withhold"
    # the same edit on another snapshot touches nothing in doubt
    other = ToolProposal("edit_r19", "attempt1", "edit_file", {"path": "median.py"}, "g", 0.1, input_ref="ws_r19")
    assert resume(store).evaluate(ProposedStep.from_tool(other)).verdict == "admit"


def test_the_logged_plan_supplies_dependencies():
    store = with_test_in_doubt()
    gate = resume(store).gate
    gate.append(PlanChanged(plan_revision=1, steps=[{"step_id": "edit_r19", "depends_on": ["test_r18"]}]))
    other = ToolProposal("edit_r19", "attempt1", "edit_file", {}, "g", 0.1, input_ref="ws_r19")
    d = ContinuationGate(gate, clock=lambda: NOW).evaluate(ProposedStep.from_tool(other))
    assert d.verdict == "withhold" and "test_r18 is in doubt" in dict((c.name, c.reason) for c in d.checks)[
        "dependencies"]


@pytest.mark.parametrize("contract, expected", [("at_most_once", "withhold"), ("unsafe", "withhold"),
                                                ("idempotency_key", "admit")])
def test_a_new_attempt_of_an_in_doubt_operation_needs_reconciliation_unless_its_contract_allows_it(
        contract, expected):
    store, gate = started()
    first = ToolProposal("test_r18", "attempt1", "run_tests", {"snapshot": "ws_r18"}, "g", 0.5,
                         repeat_contract=contract, input_ref="ws_r18")
    with pytest.raises(SystemExit):
        gate.run_tool(first, crash_in_doubt)
    again = ToolProposal("test_r18", "attempt2", "run_tests", {"snapshot": "ws_r18"}, "g", 0.5,
                         repeat_contract=contract, input_ref="ws_r18")
    d = resume(store).evaluate(ProposedStep.from_tool(again))
    assert outcome(d, "in_doubt") == expected and d.verdict == expected
    same = resume(store).evaluate(ProposedStep.from_tool(first))   # the same attempt again: never
    assert outcome(same, "in_doubt") == "withhold"


# --- deadlines --------------------------------------------------------------------------------

def test_expired_operating_deadline_admits_only_finalization_even_with_budget_left():
    store, gate = started(ceiling=5.0, reserve=0.5, deadline=NOW - 60, fin_deadline=NOW + 600)
    cg = resume(store)
    d = cg.evaluate(ProposedStep.from_tool(READ))
    assert d.mode == "finalization_only" and d.verdict == "refuse" and outcome(d, "budget") == "admit"
    with pytest.raises(AdmissionDenied, match="only finalization"):
        cg.run_tool(READ, ok)
    rec = refold(store)
    assert rec.operations["read_ci_logs"].status == "denied"   # the refusal is on record with its reason
    assert rec.decisions[decision_id("read_ci_logs", "attempt1")]["decision"] == "deny"
    reason = next(e.payload.reason for e in store.read(TRAJ) if isinstance(e.payload, Authorized))
    assert reason.startswith("continuation admission") and "deadline" in reason
    rec = cg.run_tool(REPORT, ok, finalization=True)
    assert rec.operations["final_report"].status == "established"


def test_finalization_work_may_draw_on_the_reserve_and_nothing_else_may():
    # ceiling 1.0, reserve 0.5, consumption 0: a 0.6 USD step fits only as finalization work
    store, gate = started(ceiling=1.0, reserve=0.5, deadline=NOW - 1, fin_deadline=NOW + 600)
    big = ToolProposal("final_report", "attempt1", "write_report", {}, "g", 0.6)
    cg = resume(store)
    assert cg.evaluate(ProposedStep.from_tool(big, finalization=True)).verdict == "admit"
    store_b, _ = started(ceiling=1.0, reserve=0.5)
    d = resume(store_b).evaluate(ProposedStep.from_tool(big))
    assert d.verdict == "refuse" and outcome(d, "budget") == "refuse"
    rec = cg.run_tool(big, ok, finalization=True)   # the dispatch gate agrees: the reserve is for this
    assert rec.operations["final_report"].status == "established"


def test_past_the_finalization_deadline_nothing_is_admitted():
    store, _ = started(deadline=NOW - 600, fin_deadline=NOW - 1)
    d = resume(store).evaluate(ProposedStep.from_tool(REPORT, finalization=True))
    assert d.mode == "closed" and d.verdict == "refuse"


# --- control state ----------------------------------------------------------------------------

def test_a_paused_trajectory_withholds_every_step_until_the_guarded_transition():
    store, gate = started()
    gate.change_control("PAUSED", issuer="operator", request_id="p1")
    cg = resume(store)
    d = cg.evaluate(ProposedStep.from_tool(READ))
    assert d.verdict == "withhold" and outcome(d, "control") == "withhold"
    cg.gate.change_control("RUNNING", issuer="operator", request_id="r1")
    assert cg.evaluate(ProposedStep.from_tool(READ)).verdict == "admit"


def test_terminal_is_refused():
    store, gate = started()
    gate.change_control("COMPLETED", issuer="operator", request_id="c1")
    assert resume(store).evaluate(ProposedStep.from_tool(READ)).verdict == "refuse"


# --- approvals, capacity, grants ---------------------------------------------------------------

def test_pending_approval_withholds_and_expired_approval_refuses():
    store, gate = started()
    gate.log.append_many([ApprovalRequested(approval_id="ap1", held_operation_id="edit_r19", held_attempt_id="attempt1",
                                            reviewer="bob", expires_unix_s=NOW - 5)])
    rec = refold(store)
    d = evaluate(rec, ProposedStep.from_tool(EDIT), policy=POLICY, now_unix_s=NOW - 10)   # before its expiry
    assert outcome(d, "approval") == "withhold"
    from kernel_lib.core.events import ApprovalResolved
    gate.log.append_many([ApprovalResolved(approval_id="ap1", decision="approved", reviewer="bob")])
    d = evaluate(refold(store), ProposedStep.from_tool(EDIT), policy=POLICY, now_unix_s=NOW)
    assert outcome(d, "approval") == "refuse" and "expired" in dict((c.name, c.reason) for c in d.checks)["approval"]
    d = evaluate(refold(store), ProposedStep.from_tool(EDIT), policy=POLICY, now_unix_s=NOW - 10)
    assert outcome(d, "approval") == "admit"


def test_no_free_dispatch_slot_withholds_and_an_unknown_grant_refuses():
    store, _ = started()
    d = resume(store, deployment=Deployment(free_dispatch_slots=0)).evaluate(ProposedStep.from_tool(READ))
    assert d.verdict == "withhold" and outcome(d, "capacity") == "withhold"
    bad = ToolProposal("x", "a1", "deploy_prod", {}, "g", 0.1)
    d = resume(store).evaluate(ProposedStep.from_tool(bad))
    assert d.verdict == "refuse" and outcome(d, "grant") == "refuse"


# --- budget -----------------------------------------------------------------------------------

def test_outstanding_reservations_withhold_a_step_that_fits_once_they_settle():
    # ceiling 1.5, reserve 0.5; test_r18 in doubt holds 0.5: a 0.6 USD step needs it settled first
    store = with_test_in_doubt(ceiling=1.5, reserve=0.5)
    big = ToolProposal("read_more", "attempt1", "read_logs", {}, "g", 0.6, repeat_contract="read_only")
    d = resume(store).evaluate(ProposedStep.from_tool(big))
    assert outcome(d, "budget") == "withhold" and d.verdict == "withhold"
    huge = ToolProposal("read_more", "attempt1", "read_logs", {}, "g", 1.2, repeat_contract="read_only")
    assert outcome(resume(store).evaluate(ProposedStep.from_tool(huge)), "budget") == "refuse"


def test_admitted_but_unsent_attempt_keeps_its_identity_and_reservation():
    store, gate = started(ceiling=1.0, reserve=0.4)
    gate.log.append_many([
        Authorized(decision_id=decision_id("test_r18", "attempt1"), subject_id="test_r18", subject_kind="tool",
                   policy_version="v1", grant_id="g", decision="allow"),
        BudgetReserved(reservation_id=reservation_id("test_r18", "attempt1"), subject_id="test_r18", amount_usd=0.5)])
    # crash here: admitted, no intent. Consumption 0 + outstanding 0.5 + bound 0.5 + reserve 0.4 > 1.0,
    # so a fresh admission would not fit; keeping the reservation it already holds, it passes
    cg = resume(store)
    d = cg.evaluate(ProposedStep.from_tool(TEST))
    assert d.verdict == "admit" and d.reuses_reservation == reservation_id("test_r18", "attempt1")
    rec = cg.run_tool(TEST, ok)
    reserved = [e for e in store.read(TRAJ) if isinstance(e.payload, BudgetReserved)]
    assert len(reserved) == 1 and rec.operations["test_r18"].status == "established"
    assert rec.operations["test_r18"].current_attempt_id == "attempt1"


def test_refusing_an_unsent_attempt_releases_its_reservation_with_zero_usage():
    store, gate = started(deadline=NOW - 1)
    gate.log.append_many([
        Authorized(decision_id=decision_id("test_r18", "attempt1"), subject_id="test_r18", subject_kind="tool",
                   policy_version="v1", grant_id="g", decision="allow"),
        BudgetReserved(reservation_id=reservation_id("test_r18", "attempt1"), subject_id="test_r18", amount_usd=0.5)])
    with pytest.raises(AdmissionDenied):
        resume(store).run_tool(TEST, ok)
    rec = refold(store)
    assert rec.budget.outstanding_reservations_usd == 0 and rec.budget.actual_consumption_usd == 0
    settled = [e.payload for e in store.read(TRAJ) if isinstance(e.payload, BudgetSettled)]
    assert [(s.actual_usd, s.final) for s in settled] == [(0.0, True)]


# --- partial model streams ----------------------------------------------------------------------

def test_a_recovered_partial_stream_is_discarded_not_promoted():
    store, gate = started()

    def partial(ctx):
        return ModelReply(status="partial", reply="run the tests, then edit med", proposal={"tool": "edit_file"})
    gate.run_model(ModelCall("model_call_2", "m", "prompt", "g", 0.1), partial)
    rec = refold(store)
    assert discarded_partial_streams(rec) == ["model_call_2"]
    assert rec.operations["model_call_2"].outcome is None   # never a completed candidate
    d = resume(store).evaluate(ProposedStep.from_tool(EDIT, source_invocation_id="model_call_2"))
    assert d.verdict == "refuse" and outcome(d, "source") == "refuse"
    assert resume(store).evaluate(ProposedStep.from_model(
        ModelCall("model_call_3", "m", "prompt again", "g", 0.1))).verdict == "admit"


# --- versions changed during downtime -----------------------------------------------------------

def test_version_changes_are_pinned_migrated_or_halt_and_the_transition_is_logged():
    cfg = {"model": "m-2026-01", "prompt_template": "repair-v3", "tool_schema:run_tests": "1"}
    store, _ = started(config=cfg)
    call = ModelCall("model_call_2", "m", "prompt", "g", 0.1)
    moved = {"model": "m-2026-11", "prompt_template": "repair-v4", "tool_schema:run_tests": "2"}
    # nothing servable, no migration: halt
    d = resume(store, deployment=Deployment(versions=moved)).evaluate(ProposedStep.from_model(call))
    assert d.verdict == "refuse" and outcome(d, "versions") == "refuse"
    # old model still servable (pin) and a verified template migration: admitted
    dep = Deployment(versions=moved, servable={"model": ["m-2026-01"]},
                     migrations={("prompt_template", "repair-v3", "repair-v4"): "migration-note-17"})
    cg = resume(store, deployment=dep)
    d = cg.evaluate(ProposedStep.from_model(call))
    assert d.verdict == "admit"
    assert {v.key: (v.resolution, v.runs_under) for v in d.versions} == {
        "model": ("pinned", "m-2026-01"), "prompt_template": ("migrated", "repair-v4")}

    def reply(ctx):
        return ModelReply(status="complete", reply="ok", charged_usd=0.01)
    cg.run_model(call, reply)
    rec = refold(store)
    assert recorded_versions(rec) == {**cfg, "prompt_template": "repair-v4"}
    logged = [r["name"] for r in rec.runtime_inputs]
    assert sorted(logged) == ["version:model", "version:prompt_template"]
    cg.run_model(ModelCall("model_call_3", "m", "p", "g", 0.1), reply)   # the boundary is logged once
    assert len(refold(store).runtime_inputs) == 2
    # the tool schema moved too, and nothing covers it: a tool step halts
    d = cg.evaluate(ProposedStep.from_tool(TEST))
    assert outcome(d, "versions") == "refuse"


def test_resolve_version_is_unchanged_when_the_deployment_does_not_name_the_key():
    r = resolve_version("model", "m1", Deployment())
    assert r.resolution == "unchanged" and r.runs_under == "m1"


# --- bad input ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kw", [
    dict(bound_usd=float("nan")), dict(bound_usd=-1), dict(bound_usd=True), dict(bound_usd=10**400),
    dict(bound_usd="0.1"), dict(step_id=""), dict(kind="shell"), dict(attempt_id=None), dict(attempt_id=""),
    dict(resources="ws_r18"), dict(depends_on="test_r18"), dict(depends_on=None), dict(depends_on=[["x"]]),
    dict(read_only="no"), dict(finalization="false"), dict(finalization=1), dict(source_invocation_id=3)])
def test_malformed_steps_are_refused_with_a_typed_error(kw):
    base = dict(step_id="s", kind="tool", subject="run_tests", grant_id="g", bound_usd=0.1, attempt_id="a1")
    ProposedStep(**base)   # the base itself is fine: each case fails for its own field
    with pytest.raises(ConfigError):
        ProposedStep(**{**base, **kw})


@pytest.mark.parametrize("bad", [float("inf"), float("nan"), "now", None])
def test_a_clock_that_is_not_a_finite_number_is_refused(bad):
    store, _ = started()
    with pytest.raises(ConfigError):
        evaluate(refold(store), ProposedStep.from_tool(READ), policy=POLICY, now_unix_s=bad)


def test_deployment_rejects_negative_capacity_and_malformed_migration_keys():
    with pytest.raises(ConfigError):
        Deployment(free_dispatch_slots=-1)
    with pytest.raises(ConfigError):
        Deployment(migrations={("model", "a"): "x"})


# --- property: the verdict is the strictest check, and the budget rule is never broken -------------

@settings(max_examples=200, deadline=None)
@given(consumed=st.floats(0, 3), held=st.floats(0, 3), bound=st.floats(0, 3), reserve=st.floats(0, 1),
       ceiling=st.floats(0, 6), finalization=st.booleans(), slots=st.integers(0, 2))
def test_verdict_is_the_strictest_check_and_admission_keeps_the_budget_rule(consumed, held, bound, reserve, ceiling,
                                                                            finalization, slots):
    store, gate = started(ceiling=max(ceiling, reserve), reserve=reserve)
    gate.log.append_many([BudgetReserved(reservation_id="res-other", subject_id="other", amount_usd=consumed + held),
                          BudgetSettled(reservation_id="res-other", subject_id="other", actual_usd=consumed,
                                        final=False)])
    rec = refold(store)
    step = ProposedStep("read_x", "tool", "read_logs", "g", bound, attempt_id="a1", read_only=True,
                        finalization=finalization)
    d = evaluate(rec, step, policy=POLICY, now_unix_s=NOW, deployment=Deployment(free_dispatch_slots=slots))
    assert [c.name for c in d.checks] == list(CHECKS)
    rank = {"admit": 0, "withhold": 1, "refuse": 2}
    assert rank[d.verdict] == max(rank[c.outcome] for c in d.checks)
    if d.admitted:   # the rule holds in integer micro-dollars, the unit the budget keeps
        b = rec.budget
        used_reserve = 0 if finalization else b.finalization_reserve_micro_usd
        assert (b.actual_consumption_micro_usd + b.outstanding_reservations_micro_usd + usd_to_micro(bound)
                + used_reserve <= b.ceiling_micro_usd)
        assert slots > 0


@pytest.mark.parametrize("kw", [dict(servable={"model": "m1"}), dict(versions=None), dict(versions={"model": 2}),
                                dict(migrations={("model", "a", "b"): ""}), dict(migrations={("model", "a", "b"): 7}),
                                dict(servable={"model": [5]})])
def test_deployment_refuses_shapes_that_would_be_misread(kw):
    """A string of servable versions would otherwise be read as its characters, so "m1" would
    halt and a recorded "1" would be silently pinned."""
    with pytest.raises(ConfigError):
        Deployment(**kw)


def test_evaluate_refuses_arguments_of_the_wrong_type_with_a_typed_error():
    store, _ = started()
    rec = refold(store)
    step = ProposedStep.from_tool(READ)
    for bad in (dict(record=None), dict(step=READ), dict(deployment={"free_dispatch_slots": 1}),
                dict(now_unix_s=10**400), dict(policy=None)):
        args = dict(record=rec, step=step, policy=POLICY, now_unix_s=NOW, deployment=None) | bad
        with pytest.raises(ConfigError):
            evaluate(args.pop("record"), args.pop("step"), **args)


# --- identity: nothing admitted may make the log unfoldable ----------------------------------------

def test_a_step_reusing_another_kinds_id_is_refused_and_the_log_still_folds():
    store = with_test_in_doubt(deadline=NOW - 1)
    cg = resume(store)
    head = store.head(TRAJ)
    call = ModelCall("test_r18", "m", "prompt", "g", 0.1)
    with pytest.raises(AdmissionDenied, match="tool operation"):
        cg.run_model(call, lambda ctx: ModelReply(status="complete"))
    assert store.head(TRAJ) == head and refold(store).operations["test_r18"].kind == "tool"


def test_a_refused_unsent_attempt_cannot_be_admitted_again_under_the_same_attempt_id():
    store, gate = started(config={"tool_schema:edit_file": "1"})
    edit = ToolProposal("edit_r19", "attempt1", "edit_file", {}, "g", 0.1, input_ref="ws_r19")
    gate.log.append_many([
        Authorized(decision_id=decision_id("edit_r19", "attempt1"), subject_id="edit_r19", subject_kind="tool",
                   policy_version="v1", grant_id="g", decision="allow"),
        BudgetReserved(reservation_id=reservation_id("edit_r19", "attempt1"), subject_id="edit_r19", amount_usd=0.1)])
    moved = Deployment(versions={"tool_schema:edit_file": "2"})
    with pytest.raises(AdmissionDenied, match="versions"):
        resume(store, deployment=moved).run_tool(edit, ok)
    migrated = Deployment(versions={"tool_schema:edit_file": "2"},
                          migrations={("tool_schema:edit_file", "1", "2"): "schema-migration-3"})
    cg = resume(store, 2, deployment=migrated)
    d = cg.evaluate(ProposedStep.from_tool(edit))
    assert d.verdict == "refuse" and outcome(d, "identity") == "refuse" and "new attempt id" in d.reasons()[0]
    with pytest.raises(AdmissionDenied):
        cg.run_tool(edit, ok)
    again = ToolProposal("edit_r19", "attempt2", "edit_file", {}, "g", 0.1, input_ref="ws_r19")
    rec = cg.run_tool(again, ok)          # a fresh attempt id is fine, and the log folds throughout
    assert rec.operations["edit_r19"].status == "established"
    assert refold(store).operations["edit_r19"].status == "established"


def test_an_established_operation_with_an_attempt_still_in_doubt_still_blocks_its_dependents():
    store, gate = started()
    keyed = dataclasses.replace(TEST, repeat_contract="idempotency_key")   # a tool that licenses another attempt
    with pytest.raises(SystemExit):
        gate.run_tool(keyed, crash_in_doubt)           # attempt1 left, in doubt
    second = dataclasses.replace(keyed, attempt_id="attempt2")
    gate.run_tool(second, ok)                          # attempt2 settles the operation
    rec = refold(store)
    assert rec.operations["test_r18"].status == "established" and ("test_r18", "attempt1") in rec.attempts_in_doubt()
    d = resume(store).evaluate(ProposedStep.from_tool(EDIT, depends_on=("test_r18",)))
    assert outcome(d, "dependencies") == "withhold" and outcome(d, "in_doubt") == "withhold"


@pytest.mark.parametrize("depends_on, expected", [("test_r18", "withhold"), ({"op": "test_r18"}, "refuse"),
                                                  (["test_r18"], "withhold")])
def test_a_plan_entry_of_an_odd_shape_is_never_ignored(depends_on, expected):
    store = with_test_in_doubt()
    gate = resume(store).gate
    gate.append(PlanChanged(plan_revision=1, steps=[{"step_id": "edit_r19", "depends_on": depends_on}]))
    other = ToolProposal("edit_r19", "attempt1", "edit_file", {}, "g", 0.1, input_ref="ws_r19")
    d = ContinuationGate(gate, clock=lambda: NOW).evaluate(ProposedStep.from_tool(other))
    assert outcome(d, "dependencies") == expected


def test_dependency_cycles_and_self_dependencies_are_refused_not_withheld_forever():
    store, gate = started()
    d = resume(store).evaluate(ProposedStep.from_tool(EDIT, depends_on=("edit_r19",)))
    assert outcome(d, "dependencies") == "refuse" and "back to itself" in d.reasons()[0]
    store, gate = started()
    gate.append(PlanChanged(plan_revision=1, steps=[{"step_id": "a", "depends_on": ["edit_r19"]},
                                                     {"step_id": "edit_r19", "depends_on": ["a"]}]))
    d = resume(store).evaluate(ProposedStep.from_tool(EDIT))
    assert outcome(d, "dependencies") == "refuse" and "edit_r19 -> a -> edit_r19" in d.reasons()[0]


def test_an_unsent_attempt_keeps_its_reservation_only_while_the_budget_rule_holds():
    # ceiling 1.0, reserve 0.3; test_r18/attempt1 admitted (0.1 held), then another call overran
    # its bound: consumption 0.8, so 0.8 + 0.1 + 0.3 > 1.0
    store, gate = started(ceiling=1.0, reserve=0.3)
    gate.log.append_many([
        Authorized(decision_id=decision_id("test_r18", "attempt1"), subject_id="test_r18", subject_kind="tool",
                   policy_version="v1", grant_id="g", decision="allow"),
        BudgetReserved(reservation_id=reservation_id("test_r18", "attempt1"), subject_id="test_r18", amount_usd=0.1),
        BudgetReserved(reservation_id="res-other", subject_id="other", amount_usd=0.2),
        BudgetSettled(reservation_id="res-other", subject_id="other", actual_usd=0.8, final=True)])
    small = ToolProposal("test_r18", "attempt1", "run_tests", {"snapshot": "ws_r18"}, "g", 0.1, input_ref="ws_r18")
    d = resume(store).evaluate(ProposedStep.from_tool(small))
    assert d.verdict == "refuse" and outcome(d, "budget") == "refuse" and d.reuses_reservation is None
    with pytest.raises(AdmissionDenied, match="over the ceiling"):   # the dispatch gate agrees on its own
        resume(store).gate.run_tool(small, ok)


def test_an_approval_request_that_lapses_while_pending_is_void_not_waiting():
    store, gate = started()
    gate.log.append_many([ApprovalRequested(approval_id="ap1", held_operation_id="edit_r19", held_attempt_id="attempt1",
                                            reviewer="bob", expires_unix_s=NOW + 10)])
    rec = refold(store)
    assert outcome(evaluate(rec, ProposedStep.from_tool(EDIT), policy=POLICY, now_unix_s=NOW), "approval") == "withhold"
    late = evaluate(rec, ProposedStep.from_tool(EDIT), policy=POLICY, now_unix_s=NOW + 11)
    assert outcome(late, "approval") == "refuse"
    assert "lapsed" in dict((c.name, c.reason) for c in late.checks)["approval"]
    assert rec.approval_pending("edit_r19", NOW) and not rec.approval_pending("edit_r19", NOW + 11)
