"""A withheld attempt is settled as never sent (Durable Execution §11.3.2, §11.5.3; issue 14).

Fault model: the dispatch-time recheck withholds an admitted attempt whose intent is already
durable: its approval is void (refused, withdrawn, expired) or an operator paused the trajectory
between the intent's acknowledgment and dispatch; the worker may also crash right after the
withhold and be replaced.
Invariant: a request that never left is never in doubt. The gate appends an ``AttemptWithheld``
before it raises, the fold settles the attempt as never sent and releases its reservation, and
the endpoint (which counts what it received) saw nothing; no reservation is left held for it.
Goal: the trajectory keeps its budget, a replacement worker sees the same settled record, and a
later release dispatches the operation exactly once, as a new attempt under current admission.
"""

from __future__ import annotations

import pytest

from kernel_lib.core.crash_positions import crash_positions
from kernel_lib.core.events import ApprovalRequested, ApprovalResolved, Authorized, BudgetReserved, TaskStarted
from kernel_lib.core.record import fold, initial_record
from kernel_lib.errors import AdmissionDenied, DispatchWithheld
from kernel_lib.gate.dispatch import (
    AdmissionPolicy, DispatchGate, ModelCall, ModelReply, ToolProposal, decision_id, reservation_id,
)
from kernel_lib.log import FailureDomain, MemoryStore, TrajectoryLog
from kernel_lib.resume.stages import timed_resume
from kernel_lib.sim.endpoints import PaymentService

TID = "traj-withheld"
POLICY = AdmissionPolicy({"g": {"pay", "m"}})
#: an at-most-once payment: a request that may have left could never be repeated, so only the
#: withheld record (proof that it did not leave) lets the operation be dispatched later
PAY = ToolProposal("refund_42", "attempt1", "pay", {"amount_usd": 12.5}, "g", 0.5, repeat_contract="at_most_once")


class Crash(BaseException):
    """The worker process dies here (nothing after it runs)."""


def worker(store, epoch=0, **kw) -> DispatchGate:
    log = TrajectoryLog(store, TID, must_survive=FailureDomain.NONE, owner_epoch=epoch)
    return DispatchGate(log, POLICY, **kw)


def started(**kw):
    store = MemoryStore()
    gate = worker(store, **kw)
    gate.start(TaskStarted(task_id="t", requester="alice", objective="refund", grant_ids=["g"],
                           budget_ceiling_usd=5.0, finalization_reserve_usd=0.5))
    return store, gate


def refold(store):
    return fold(initial_record(TID), store.read(TID))


def assert_settled_never_sent(rec, op_id="refund_42", attempt="attempt1"):
    op = rec.operations[op_id]
    assert op.status == "withheld" and op_id not in rec.in_doubt(), op.status
    assert (op_id, attempt) not in rec.attempts_in_doubt()
    res = rec.budget.reservations[reservation_id(op_id, attempt) if op.kind == "tool" else reservation_id(op_id)]
    assert res.released and res.settled_micro_usd == 0            # released unspent
    assert rec.budget.outstanding_reservations_micro_usd == 0
    assert rec.orphaned_reservations() == []


def hold_then_void(gate, decision):
    """Admitted before a reviewer was asked (decision + reservation, no intent), then voided."""
    gate.append(Authorized(decision_id=decision_id("refund_42", "attempt1"), subject_id="refund_42",
                           subject_kind="tool", policy_version="policy-v1", grant_id="g", decision="allow"),
                BudgetReserved(reservation_id=reservation_id("refund_42", "attempt1"), subject_id="refund_42",
                               amount_usd=0.5),
                ApprovalRequested(approval_id="ap1", held_operation_id="refund_42", held_attempt_id="attempt1",
                                  reviewer="bob", expires_unix_s=1_000.0))
    gate.append(ApprovalResolved(approval_id="ap1", decision=decision, reviewer="bob"))


@pytest.mark.parametrize("decision", ["refused", "withdrawn", "expired"])
def test_a_void_approval_at_dispatch_time_settles_the_attempt_as_never_sent(decision):
    store, gate = started()
    svc = PaymentService()
    hold_then_void(gate, decision)
    assert gate.record.control_state == "RUNNING"     # no approval pending: admission reuses the reservation
    with pytest.raises(DispatchWithheld, match="void"):
        gate.run_tool(PAY, svc.handle)
    assert svc.paid == []                              # counted by the service: nothing reached it
    types = [e.event_type for e in store.read(TID)]
    assert types[-2:] == ["ToolIntent", "AttemptWithheld"]
    withheld = list(store.read(TID))[-1].payload
    assert withheld.attempt_id == "attempt1" and "void" in withheld.reason
    assert_settled_never_sent(gate.record)
    assert_settled_never_sent(refold(store))           # what is durable, not only the gate's memory
    # a void approval is never revived: releasing it withholds again and appends nothing
    head = store.head(TID)
    with pytest.raises(DispatchWithheld, match="void"):
        gate.release("refund_42", svc.handle)
    assert store.head(TID) == head and svc.paid == []


def test_an_approved_action_whose_window_passed_at_the_recheck_records_the_reading_and_the_withhold():
    store, gate = started(clock=lambda: 2_000.0)
    svc = PaymentService()
    gate.append(ApprovalRequested(approval_id="ap1", held_operation_id="refund_42", held_attempt_id="attempt1",
                                  reviewer="bob", expires_unix_s=1_000.0),
                ApprovalResolved(approval_id="ap1", decision="approved", reviewer="bob"))
    with pytest.raises(DispatchWithheld, match="expired"):
        gate.run_tool(PAY, svc.handle)
    events = list(store.read(TID))
    assert [e.event_type for e in events[-3:]] == ["ToolIntent", "RuntimeInput", "AttemptWithheld"]
    assert events[-2].payload.value == {"subject_id": "refund_42", "now_unix_s": 2_000.0}
    assert svc.paid == []
    assert_settled_never_sent(refold(store))
    assert all(r.sound for r in crash_positions(events, "refund_42"))


def pause_once_after_intent(gate_ref, paused):
    def hook(name, ev):
        if name == "after:ToolIntent" and not paused:
            paused.append(1)
            gate_ref[0].change_control("PAUSED", issuer="operator", request_id="pause-1")
    return hook


def test_a_pause_at_dispatch_time_settles_the_attempt_and_release_dispatches_it_once():
    ref, paused = [], []
    store, gate = started(on_position=pause_once_after_intent(ref, paused))
    ref.append(gate)
    svc = PaymentService()
    with pytest.raises(DispatchWithheld, match="PAUSED"):
        gate.run_tool(PAY, svc.handle)
    assert svc.paid == []
    assert_settled_never_sent(refold(store))
    head = store.head(TID)
    with pytest.raises(DispatchWithheld, match="PAUSED"):        # still paused: nothing appended
        gate.release("refund_42", svc.handle)
    assert store.head(TID) == head
    gate.change_control("RUNNING", issuer="operator", request_id="resume-1")
    rec = gate.release("refund_42", svc.handle)
    assert len(svc.paid) == 1                                     # exactly once, under a new attempt
    op = rec.operations["refund_42"]
    assert op.status == "established" and op.current_attempt_id != "attempt1"
    assert rec.budget.outstanding_reservations_micro_usd == 0 and rec.orphaned_reservations() == []
    # re-proposing the withheld attempt id is refused before anything is appended: the log still folds
    with pytest.raises(AdmissionDenied):
        gate.run_tool(PAY, svc.handle)
    assert refold(store).last_sequence_number == store.head(TID)
    rows = crash_positions(list(store.read(TID)), "refund_42")
    assert all(r.sound for r in rows)
    after_withheld = [r for r in rows if r.position.startswith("after AttemptWithheld") and r.prefix_complete]
    assert after_withheld and all(r.conclusion == "not_dispatched" and not r.dispatched for r in after_withheld)


def test_the_same_attempt_id_is_refused_after_a_withhold_and_the_log_stays_foldable():
    store, gate = started()
    hold_then_void(gate, "refused")
    with pytest.raises(DispatchWithheld):
        gate.run_tool(PAY, PaymentService().handle)
    head = store.head(TID)
    with pytest.raises(AdmissionDenied, match="fresh identity"):
        gate.run_tool(PAY, PaymentService().handle)
    other = ToolProposal("refund_42", "attempt2", "pay", {"amount_usd": 99.0}, "g", 0.5,
                         repeat_contract="at_most_once")
    with pytest.raises(AdmissionDenied, match="repeat the recorded operation"):
        gate.run_tool(other, PaymentService().handle)
    assert store.head(TID) == head and refold(store).last_sequence_number == head


@pytest.mark.parametrize("cause", ["pause", "void"])
def test_a_crash_right_after_the_withhold_record_then_a_resume_finds_it_settled(cause):
    ref, paused = [], []

    def hook(name, ev):
        if cause == "pause":
            pause_once_after_intent(ref, paused)(name, ev)
        if name == "after:AttemptWithheld":
            raise Crash()

    store, gate = started(on_position=hook)
    ref.append(gate)
    svc = PaymentService()
    if cause == "void":
        hold_then_void(gate, "refused")
    with pytest.raises(Crash):
        gate.run_tool(PAY, svc.handle)
    resumed = timed_resume(store, TID, policy=POLICY)
    assert resumed.owner_epoch == 1
    assert_settled_never_sent(resumed.record)
    assert_settled_never_sent(refold(store))
    assert svc.paid == []
    new = resumed.gate
    if cause == "pause":                                          # the operator lets it go: one payment
        new.change_control("RUNNING", issuer="operator", request_id="resume-1")
        rec = new.release("refund_42", svc.handle)
        assert rec.operations["refund_42"].status == "established" and len(svc.paid) == 1
    else:                                                         # void stays void under the new owner
        with pytest.raises(DispatchWithheld, match="void"):
            new.release("refund_42", svc.handle)
        assert svc.paid == []
    assert refold(store).orphaned_reservations() == []


def test_a_withheld_model_invocation_is_not_in_doubt_for_its_charge():
    calls, paused = [], []
    store = MemoryStore()

    def hook(name, ev):
        if name == "after:ContextBuilt" and not paused:
            paused.append(1)
            gate.change_control("PAUSED", issuer="operator", request_id="p1")

    gate = worker(store, on_position=hook)
    gate.start(TaskStarted(task_id="t", requester="alice", objective="o", grant_ids=["g"], budget_ceiling_usd=5.0))
    call = ModelCall("call_1", "m", "hello", "g", 0.2)
    with pytest.raises(DispatchWithheld):
        gate.run_model(call, lambda ctx: calls.append(ctx) or ModelReply("complete", "hi", charged_usd=0.01))
    assert calls == []
    rec = refold(store)
    assert_settled_never_sent(rec, "call_1", "call_1")
    gate.change_control("RUNNING", issuer="operator", request_id="r1")
    with pytest.raises(AdmissionDenied, match="fresh identity"):   # a retry is a new invocation
        gate.run_model(call, lambda ctx: calls.append(ctx) or ModelReply("complete", "hi"))
    assert calls == []
