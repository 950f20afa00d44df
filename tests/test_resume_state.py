"""State restoration after a crash (§11.5.2–11.5.3): control state, approvals and budgets.

Fault model: the worker process dies at an arbitrary point; a replacement takes ownership with a
higher owner_epoch and rebuilds its record by folding the log (no model or tool is called).
Invariant: what the log says about control, approvals and money is what the new owner sees;
nothing paused resumes, nothing terminal restarts, nothing void is revived, no liability is freed.
Goal: the new owner continues only where the recovered state and the dispatch-time recheck allow.
"""

from __future__ import annotations

import pytest

from kernel_lib.gate.dispatch import (
    AdmissionPolicy, DispatchGate, ModelCall, ModelReply, ToolProposal, ToolReply, decision_id, reservation_id,
)
from kernel_lib.errors import AdmissionDenied, DispatchWithheld, FoldError, KernelError
from kernel_lib.core.events import (
    ApprovalRequested, ApprovalResolved, Authorized, BudgetReserved, BudgetSettled, ToolResult,
)
from kernel_lib.gate.inbox import ResultInbox
from kernel_lib.log import FailureDomain, MemoryStore, TrajectoryLog
from kernel_lib.core.record import TrajectoryRecord, fold, fold_into, initial_record
from tests.helpers import task
from tests.test_inbox import PUB_HEX, signed

TRAJ = "traj-inbox"   # the trajectory tests.test_inbox signs records for
POLICY = AdmissionPolicy({"g": {"run_tests", "m"}})
PROPOSAL = ToolProposal("test_r18", "attempt1", "run_tests", {"snapshot": "ws_r18"}, "g", 1.0)


def first_worker():
    store = MemoryStore()
    log = TrajectoryLog(store, TRAJ, must_survive=FailureDomain.NONE, owner_epoch=0)
    gate = DispatchGate(log, POLICY)
    gate.start(task(ceiling=10.0))
    return store, gate


def take_over(store, epoch=1, **kw):
    """The replacement: fence installed, record rebuilt by folding the log, nothing dispatched."""
    store.install_fence(TRAJ, epoch)
    log = TrajectoryLog(store, TRAJ, must_survive=FailureDomain.NONE, owner_epoch=epoch)
    return DispatchGate(log, POLICY, **kw)


def refold(store) -> TrajectoryRecord:
    return fold(initial_record(TRAJ), store.read(TRAJ))


def hold_for_approval(gate, expires=None):
    """The worker admits test_r18 (decision + reservation) and holds it for a reviewer; no intent."""
    gate.log.append_many([
        Authorized(decision_id=decision_id("test_r18", "attempt1"), subject_id="test_r18", subject_kind="tool",
                   policy_version="v1", grant_id="g", decision="allow"),
        BudgetReserved(reservation_id=reservation_id("test_r18", "attempt1"), subject_id="test_r18", amount_usd=1.0),
        ApprovalRequested(approval_id="ap1", held_operation_id="test_r18", held_attempt_id="attempt1",
                          reviewer="bob", expires_unix_s=expires)])


def never(intent):
    raise AssertionError("dispatched")


# --- control state ----------------------------------------------------------------------------

def test_paused_stays_paused_and_admits_nothing():
    store, gate = first_worker()
    gate.change_control("PAUSED", issuer="operator", request_id="p1")
    new = take_over(store)
    assert new.record.control_state == "PAUSED" and new.record.control_epoch == 1
    with pytest.raises(AdmissionDenied):
        new.run_tool(PROPOSAL, never)
    assert "test_r18" not in refold(store).operations or refold(store).operations["test_r18"].status == "denied"


@pytest.mark.parametrize("terminal", ["COMPLETED", "CANCELLED", "FAILED"])
def test_terminal_stays_terminal(terminal):
    store, gate = first_worker()
    gate.change_control(terminal, issuer="operator", request_id="t1")
    new = take_over(store)
    assert new.record.control_state == terminal
    with pytest.raises(KernelError):
        new.change_control("RUNNING", issuer="operator", request_id="r1")
    with pytest.raises(AdmissionDenied):
        new.run_tool(PROPOSAL, never)
    assert refold(store).control_state == terminal


def test_held_action_recovers_into_awaiting_approval():
    """A pending approval survives the crash; even an operator's RUNNING does not skip it."""
    store, gate = first_worker()
    hold_for_approval(gate)
    new = take_over(store)
    rec = new.record
    assert rec.control_state == "AWAITING_APPROVAL" and rec.approvals["ap1"].status == "pending"
    assert rec.approval_blocker("test_r18").startswith("approval ap1 for test_r18 is still pending")
    assert rec.budget.outstanding_reservations == {"res-test_r18/attempt1": 1.0}
    with pytest.raises(AdmissionDenied):
        new.run_tool(PROPOSAL, never)
    new.change_control("PAUSED", issuer="op", request_id="p")
    new.change_control("RUNNING", issuer="op", request_id="r")
    assert new.record.control_state == "AWAITING_APPROVAL"


@pytest.mark.parametrize("decision", ["expired", "withdrawn", "refused"])
def test_void_approval_stays_void_across_workers(decision):
    """An expired, revoked or refused approval cannot be turned into a grant by a later worker, and
    the gate's own dispatch-time recheck (fed by the recovered record) withholds the action."""
    store, gate = first_worker()
    hold_for_approval(gate)
    gate.log.append(ApprovalResolved(approval_id="ap1", decision=decision, reviewer="bob"))
    new = take_over(store)
    assert new.record.approvals["ap1"].status == decision
    assert "void" in new.record.approval_blocker("test_r18")
    with pytest.raises(DispatchWithheld):
        new.run_tool(PROPOSAL, never)
    # a late "approved" for the same request is refused by the fold: no worker can revive it
    late = new.log.append(ApprovalResolved(approval_id="ap1", decision="approved", reviewer="bob"))
    with pytest.raises(FoldError):
        fold_into(refold_until(store, late.sequence_number - 1), [late])


def refold_until(store, seq):
    return fold(initial_record(TRAJ), store.read(TRAJ, 1, seq + 1))


def test_approval_granted_before_the_crash_releases_only_if_the_recheck_passes_now():
    """Approved before the crash: the new owner dispatches it with the reservation admitted before
    the crash (nothing reserved again); with the approval's window passed at dispatch time, or the
    new owner's lease no longer verifiable, the recheck withholds it instead."""
    def approved_then_crashed():
        store, gate = first_worker()
        hold_for_approval(gate, expires=1_000.0)
        gate.log.append(ApprovalResolved(approval_id="ap1", decision="approved", reviewer="bob"))
        return store

    store = approved_then_crashed()
    late_clock = take_over(store, clock=lambda: 2_000.0)        # the gate reads the wall clock at the recheck
    assert late_clock.record.control_state == "RUNNING"
    with pytest.raises(DispatchWithheld, match="expired"):
        late_clock.run_tool(PROPOSAL, never)

    store = approved_then_crashed()
    lost_lease = take_over(store, fence_check=lambda t, e: "lease superseded", clock=lambda: 500.0)
    with pytest.raises(DispatchWithheld, match="lease superseded"):
        lost_lease.run_tool(PROPOSAL, never)

    store = approved_then_crashed()
    sent = []
    ok = take_over(store, clock=lambda: 500.0)
    ok.run_tool(PROPOSAL, lambda intent: sent.append(intent) or ToolReply(status="completed",
                                                                        observation_complete=True, charged_usd=0.4))
    assert len(sent) == 1
    rec = refold(store)
    assert rec.operations["test_r18"].status == "established"
    assert sum(e.event_type == "BudgetReserved" for e in store.read(TRAJ)) == 1
    assert rec.budget.actual_consumption_usd == pytest.approx(0.4)


# --- budgets ------------------------------------------------------------------------------------

def test_budget_is_rebuilt_from_reservations_and_settlements():
    """actual_consumption, outstanding reservations and the finalization reserve come back from
    BudgetReserved/BudgetSettled alone; a partial usage report frees nothing beyond what it verifies;
    an in-doubt model call keeps its whole bound."""
    store, gate = first_worker()
    gate.run_tool(PROPOSAL, lambda i: ToolReply(status="partial", charged_usd=0.25))
    gate.run_model(ModelCall("call1", "m", "prompt", "g", 0.5), lambda ctx: ModelReply(status="partial"))
    rec = refold(store)
    b = rec.budget
    assert b.actual_consumption_usd == pytest.approx(0.25)
    assert b.outstanding_reservations == pytest.approx({"res-test_r18/attempt1": 0.75, "res-call1": 0.5})
    assert b.finalization_reserve_usd == pytest.approx(0.5)
    assert b.available_usd == pytest.approx(10.0 - 0.25 - 1.25 - 0.5)
    settled = [e.payload for e in store.read(TRAJ) if isinstance(e.payload, BudgetSettled)]
    assert not any(s.final for s in settled) and sum(s.actual_usd for s in settled) == pytest.approx(0.25)
    # restoring from a snapshot of the record and folding the rest gives the same budget
    events = list(store.read(TRAJ))
    snap = TrajectoryRecord.from_dict(fold(initial_record(TRAJ), events[:4]).state_dict())
    assert fold(snap, events[4:]).to_dict() == rec.to_dict()


# --- late results -------------------------------------------------------------------------------

def test_late_results_after_pause_or_timeout_update_the_operation_table_only(tmp_path):
    """A timed-out operation's completion arrives after the operator paused the run: it settles the
    operation (audit trail), keeps the trajectory PAUSED, leaves the timeout evidence and the model
    turn as logged, and is stamped with the current control epoch."""
    store, gate = first_worker()
    gate.run_model(ModelCall("call1", "m", "prompt", "g", 0.5),
                   lambda ctx: ModelReply(status="complete", reply="run the tests", charged_usd=0.1))
    gate.run_tool(PROPOSAL, lambda i: ToolReply(status="timeout"))
    gate.change_control("PAUSED", issuer="operator", request_id="p1")
    before = list(store.read(TRAJ))
    turn = refold(store).operations["call1"]
    new = take_over(store)
    with ResultInbox(tmp_path / "inbox.sqlite", {"executor-r18": PUB_HEX}) as box:
        box.deposit(signed(charged=0.6), trajectory_id=TRAJ)
        report = box.ingest(new.log, new.record)
    assert report.by_key()[("test_r18", "attempt1")].action == "established"
    after = list(store.read(TRAJ))
    assert [e.canonical for e in after[:len(before)]] == [e.canonical for e in before]   # nothing rewritten
    rec = refold(store)
    assert rec.control_state == "PAUSED"
    assert rec.operations["test_r18"].status == "established"
    assert rec.operations["call1"] == turn                       # the old turn is untouched
    new_events = after[len(before):]
    assert {type(e.payload) for e in new_events} == {ToolResult, BudgetSettled}
    assert all(e.control_epoch == rec.control_epoch == 1 for e in new_events)
    assert not rec.operations["test_r18"].attempts["attempt1"].late
