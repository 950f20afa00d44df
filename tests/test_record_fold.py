"""The fold (§11.2.1, §11.5.3): pure, deterministic on every prefix, never invents an outcome."""

from __future__ import annotations


import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate, ModelCall, ModelReply, ToolProposal, ToolReply
from kernel_lib.errors import AdmissionDenied, FoldError
from kernel_lib.core.events import BudgetReserved
from kernel_lib.log import FailureDomain, MemoryStore, TrajectoryLog
from kernel_lib.core.record import fold, initial_record
from tests.helpers import ev, intent, result, task

STATUSES = ["accepted", "running", "completed", "failed", "timeout", "partial", "unreachable"]

# A trajectory is a list of steps; each tool step is a list of result statuses (possibly empty:
# the worker died before any evidence), each model step a reply status.
steps_strategy = st.lists(st.one_of(
    st.tuples(st.just("tool"), st.lists(st.sampled_from(STATUSES), max_size=3), st.booleans()),
    st.tuples(st.just("model"), st.sampled_from(["complete", "partial", "error"]), st.booleans()),
    st.tuples(st.just("pause"), st.just(None), st.booleans()),
), max_size=8)


def record_run(steps):
    """Drive the real gate over a MemoryStore; return the events and, per tool op, its statuses."""
    store = MemoryStore()
    log = TrajectoryLog(store, "traj-h", must_survive=FailureDomain.NONE)
    gate = DispatchGate(log, AdmissionPolicy({"g": {"run_tests", "m"}}))
    gate.start(task(ceiling=100.0))
    expect = {}
    for i, (kind, arg, flag) in enumerate(steps):
        if kind == "tool":
            op = f"op{i}"
            first, rest = (arg[0], arg[1:]) if arg else ("accepted", [])
            replies = [ToolReply(status=s, observation_complete=flag, outcome={"n": i}) for s in [first] + rest]
            gate.run_tool(ToolProposal(op, "attempt1", "run_tests", {"i": i}, "g", 1.0),
                          lambda _, first=replies[0]: first)
            for r in replies[1:]:
                gate.record_evidence(op, "attempt1", r)
            expect[op] = [r.status for r in replies] if flag else []
        elif kind == "model":
            gate.run_model(ModelCall(f"call{i}", "m", f"prompt {i}", "g", 0.5),
                           lambda ctx, s=arg: ModelReply(status=s, charged_usd=0.1))
        else:
            gate.change_control("PAUSED", issuer="op", request_id=f"p{i}")
            gate.change_control("RUNNING", issuer="op", request_id=f"r{i}")
    return list(store.read("traj-h")), expect


@settings(max_examples=60)
@given(steps=steps_strategy, data=st.data())
def test_fold_is_deterministic_and_composes_on_every_prefix(steps, data):
    events, _ = record_run(steps)
    r0 = initial_record("traj-h")
    whole = fold(r0, events)
    assert fold(r0, events).to_dict() == whole.to_dict()          # deterministic
    for k in range(len(events) + 1):                               # every prefix
        head = fold(r0, events[:k])
        assert head.last_sequence_number == k
        assert fold(head, events[k:]).to_dict() == whole.to_dict()  # fold(fold(r0,a),b) == fold(r0,a+b)
    assert r0.to_dict() == initial_record("traj-h").to_dict()        # record_0 untouched


@settings(max_examples=60)
@given(steps=steps_strategy)
def test_fold_never_invents_an_outcome(steps):
    """Invariant: an operation is established only by complete completed/failed evidence; otherwise an
    operation with an intent is in doubt and its reservation is still held."""
    events, expect = record_run(steps)
    rec = fold(initial_record("traj-h"), events)
    for op_id, op in rec.operations.items():
        if op.kind != "tool":
            continue
        settled = any(s in ("completed", "failed") for s in expect.get(op_id, []))
        assert (op.status == "established") == settled
        if not settled:
            assert op.status == "in_doubt"
            assert rec.budget.reservations[op.reservation_id].outstanding_usd == pytest.approx(1.0)


def test_worksheet_crash_folds_to_in_doubt_with_reservation_held():
    """Fault: the worker dies after the test_r18 intent is durable. Goal: the fold keeps the intent and
    the held reservation and invents no outcome (§11.2.1)."""
    evs = [ev(task(), 1), ev(BudgetReserved(reservation_id="res-test_r18", subject_id="test_r18", amount_usd=0.5), 2),
           ev(intent(), 3)]
    rec = fold(initial_record("traj-a"), evs)
    op = rec.operations["test_r18"]
    assert op.status == "in_doubt" and op.outcome is None and op.current_attempt_id == "attempt1"
    assert rec.budget.outstanding_reservations_usd == pytest.approx(0.5)
    assert rec.in_doubt() == ["test_r18"]
    # a pending ToolResult with a job handle keeps it in doubt but records the handle
    rec2 = fold(rec, [ev(result(status="running", complete=False, job_handle="job_tests_18"), 4)])
    assert rec2.operations["test_r18"].status == "in_doubt"
    assert rec2.operations["test_r18"].job_handle == "job_tests_18"
    # a timeout is not evidence of failure
    rec3 = fold(rec2, [ev(result(status="timeout", complete=False), 5)])
    assert rec3.operations["test_r18"].status == "in_doubt"
    # only complete outcome evidence establishes it
    rec4 = fold(rec3, [ev(result(status="completed", outcome={"passed": 3}), 6)])
    assert rec4.operations["test_r18"].status == "established"
    assert rec4.operations["test_r18"].outcome == {"status": "completed", "passed": 3}


def test_incomplete_completed_result_does_not_settle():
    rec = fold(initial_record("traj-a"), [ev(task(), 1), ev(intent(), 2), ev(result(complete=False), 3)])
    assert rec.operations["test_r18"].status == "in_doubt"


@pytest.mark.parametrize("bad", ["gap", "repeat", "other_trajectory", "reducer"])
def test_fold_refuses_bad_sequences_with_a_typed_error(bad):
    good = [ev(task(), 1), ev(intent(), 2)]
    third = {"gap": ev(result(), 4), "repeat": ev(result(), 2), "other_trajectory": ev(result(), 3, traj="traj-b"),
             "reducer": ev(result(), 3).restamp(reducer_version=9)}[bad]
    with pytest.raises(FoldError):
        fold(initial_record("traj-a"), good + [third])


def test_admission_refuses_what_the_budget_cannot_cover():
    store = MemoryStore()
    gate = DispatchGate(TrajectoryLog(store, "t", must_survive="none"), AdmissionPolicy({"g": {"run_tests"}}))
    gate.start(task(ceiling=1.0))   # reserve 0.5 of 1.0 is protected
    with pytest.raises(AdmissionDenied, match="does not fit"):
        gate.run_tool(ToolProposal("op", "a1", "run_tests", {}, "g", 0.6), lambda _: ToolReply("completed"))
    assert [e.event_type for e in store.read("t")][-1] == "Authorized"   # the denial is on the record
    assert gate.record.decisions["auth-op/a1"]["decision"] == "deny"
    assert gate.record.budget.outstanding_reservations_usd == 0


# --- invalid logs are refused, not silently folded (adversarial findings) -----------------------

from kernel_lib.core.events import ApprovalRequested, ApprovalResolved, BudgetSettled, ControlChanged, ModelReplied  # noqa: E402,E501


def _res(rid="r1", amt=1.0, subj="test_r18"):
    return BudgetReserved(reservation_id=rid, subject_id=subj, amount_usd=amt)


@pytest.mark.parametrize("name, tail", [
    ("second TaskStarted", [task(ceiling=1e9)]),
    ("terminal then running", [ControlChanged(request_id="c", issuer="op", to_state="COMPLETED"),
                               ControlChanged(request_id="r", issuer="op", to_state="RUNNING")]),
    ("reservation replaced", [_res(amt=5.0), _res(amt=0.1)]),
    ("double final settlement", [_res(), BudgetSettled(reservation_id="r1", subject_id="test_r18", actual_usd=1.0,
                                                       final=True),
                                 BudgetSettled(reservation_id="r1", subject_id="test_r18", actual_usd=1.0,
                                               final=True)]),
    ("tool id reused for a model call", [intent(), ModelReplied(invocation_id="test_r18", status="complete")]),
    ("same attempt intended twice", [intent(), intent()]),
    ("a retry that changes the request", [intent(attempt="a1"), intent(attempt="a2", arguments={"snapshot": "x"})]),
    ("dispatch after a terminal state", [ControlChanged(request_id="c", issuer="op", to_state="CANCELLED"), intent()]),
    ("an approval resolved twice", [ApprovalRequested(approval_id="ap", held_operation_id="test_r18",
                                                      held_attempt_id="a1", reviewer="bob"),
                                    ApprovalResolved(approval_id="ap", decision="refused", reviewer="bob"),
                                    ApprovalResolved(approval_id="ap", decision="approved", reviewer="bob")]),
])
def test_invalid_logs_raise_fold_errors(name, tail):
    evs = [ev(p, i) for i, p in enumerate([task()] + tail, start=1)]
    with pytest.raises(FoldError):
        fold(initial_record("traj-a"), evs)


def test_an_extra_attempt_stays_visible_when_another_is_established():
    """Fault: attempt2 was dispatched, then attempt1's completion arrived. Invariant: the operation's
    outcome is established, but attempt2's effect and charge are still in doubt and must be listed."""
    evs = [ev(p, i) for i, p in enumerate([task(), intent(attempt="a1"), intent(attempt="a2"),
                                           result(attempt="a1", status="completed"),
                                           intent(attempt="a3")], start=1)]
    rec = fold(initial_record("traj-a"), evs)
    op = rec.operations["test_r18"]
    assert op.status == "established" and op.outcome["status"] == "completed" and op.current_attempt_id == "a1"
    assert rec.attempts_in_doubt() == [("test_r18", "a2"), ("test_r18", "a3")]
    assert rec.to_dict()["attempts_in_doubt"] == [["test_r18", "a2"], ["test_r18", "a3"]]


def test_over_settlement_is_kept_visible():
    evs = [ev(p, i) for i, p in enumerate([task(ceiling=10), _res(amt=1.0),
                                           BudgetSettled(reservation_id="r1", subject_id="test_r18", actual_usd=3.0,
                                                         final=True)], start=1)]
    d = fold(initial_record("traj-a"), evs).to_dict()
    assert d["budget"]["overruns"] == {"r1": pytest.approx(2.0)}
    assert d["budget"]["actual_consumption_usd"] == pytest.approx(3.0)


def test_resuming_does_not_bypass_a_pending_approval():
    evs = [ev(p, i) for i, p in enumerate([
        task(), ApprovalRequested(approval_id="ap", held_operation_id="op", held_attempt_id="a1", reviewer="bob"),
        ControlChanged(request_id="p", issuer="op", to_state="PAUSED"),
        ControlChanged(request_id="r", issuer="op", to_state="RUNNING")], start=1)]
    assert fold(initial_record("traj-a"), evs).control_state == "AWAITING_APPROVAL"
