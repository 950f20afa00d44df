"""An approval that lapsed while no worker was alive is recorded as expired by resume itself
(Durable Execution §11.5.3; issue 14, cf. Restate #5196: a suspended invocation holding its key).

Fault model: an action is held for a reviewer with a deadline (AWAITING_APPROVAL, its reservation
admitted); the worker dies (nothing more is appended); the wall clock passes the deadline before
a replacement resumes.
Invariant: the resume reads the clock only when a pending approval has an expiry, records the
reading as a ``RuntimeInput`` before deciding, and appends the expiry naming that reading as its
evidence; a trajectory whose only pending approval lapsed is not AWAITING_APPROVAL afterwards,
and the void request's reservation is released (the held action never dispatched). A deadline
that has not passed leaves everything as it was and appends nothing.
Goal: no trajectory stays AWAITING_APPROVAL on a void request until someone writes the expiry by
hand.
"""

from __future__ import annotations

import pytest

from kernel_lib.core.events import ApprovalRequested, Authorized, BudgetReserved, TaskStarted
from kernel_lib.core.record import fold, initial_record
from kernel_lib.errors import AdmissionDenied
from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate, ToolProposal, decision_id, reservation_id
from kernel_lib.log import FailureDomain, MemoryStore, TrajectoryLog
from kernel_lib.resume.stages import timed_resume
from kernel_lib.sim.endpoints import PaymentService

TID = "traj-approval"
POLICY = AdmissionPolicy({"g": {"pay"}})
DEADLINE = 1_000.0


def held_then_died(expires=DEADLINE) -> MemoryStore:
    """A worker admits refund_42, asks bob to approve it by ``expires`` and dies."""
    store = MemoryStore()
    gate = DispatchGate(TrajectoryLog(store, TID, must_survive=FailureDomain.NONE), POLICY,
                        clock=lambda: pytest.fail("the first worker never reads the clock"))
    gate.start(TaskStarted(task_id="t", requester="alice", objective="refund", grant_ids=["g"],
                           budget_ceiling_usd=5.0))
    gate.append(Authorized(decision_id=decision_id("refund_42", "attempt1"), subject_id="refund_42",
                           subject_kind="tool", policy_version="policy-v1", grant_id="g", decision="allow"),
                BudgetReserved(reservation_id=reservation_id("refund_42", "attempt1"), subject_id="refund_42",
                               amount_usd=0.5),
                ApprovalRequested(approval_id="ap1", held_operation_id="refund_42", held_attempt_id="attempt1",
                                  reviewer="bob", expires_unix_s=expires))
    assert gate.record.control_state == "AWAITING_APPROVAL"
    return store


def refold(store):
    return fold(initial_record(TID), store.read(TID))


class Clock:
    def __init__(self, now):
        self.now, self.reads = now, 0

    def __call__(self):
        self.reads += 1
        return self.now


def test_a_deadline_passed_while_the_worker_was_dead_is_recorded_as_expired_by_resume():
    store = held_then_died()
    head = store.head(TID)
    clock = Clock(DEADLINE + 3_600.0)                     # an hour past the deadline
    resumed = timed_resume(store, TID, policy=POLICY, wall_clock=clock)
    rec = resumed.record
    assert rec.control_state != "AWAITING_APPROVAL" and rec.control_state == "RUNNING"
    assert rec.approvals["ap1"].status == "expired"
    assert clock.reads == 1
    appended = list(store.read(TID))[head:]
    reading, expiry = appended[0], appended[1]
    assert reading.event_type == "RuntimeInput" and reading.payload.kind == "clock"
    assert reading.payload.value["now_unix_s"] == DEADLINE + 3_600.0
    assert expiry.event_type == "ApprovalResolved" and expiry.payload.decision == "expired"
    assert f"#{reading.sequence_number}" in expiry.payload.evidence and "4600.0" in expiry.payload.evidence
    # the held action never dispatched and its request is void: its reservation is released unspent
    settled = [e.payload for e in appended if e.event_type == "BudgetSettled"]
    assert [(s.reservation_id, s.actual_usd, s.final) for s in settled] == [("res-refund_42/attempt1", 0.0, True)]
    durable = refold(store)                                  # the same from the log alone
    assert durable.control_state == "RUNNING" and durable.approvals["ap1"].status == "expired"
    assert durable.budget.outstanding_reservations_micro_usd == 0 and durable.orphaned_reservations() == []
    # void is void: the new owner cannot dispatch the held action on it
    svc = PaymentService()
    with pytest.raises(Exception) as exc:
        resumed.gate.run_tool(ToolProposal("refund_42", "attempt1", "pay", {"amount_usd": 1.0}, "g", 0.5),
                              svc.handle)
    assert isinstance(exc.value, (AdmissionDenied,)) or "void" in str(exc.value)
    assert svc.paid == []


def test_a_second_resume_after_the_expiry_appends_nothing_more():
    store = held_then_died()
    timed_resume(store, TID, policy=POLICY, wall_clock=Clock(DEADLINE + 1.0))
    head = store.head(TID)
    clock = Clock(DEADLINE + 2.0)
    timed_resume(store, TID, policy=POLICY, wall_clock=clock)
    assert store.head(TID) == head and clock.reads == 0    # nothing pending: the clock is not read


@pytest.mark.parametrize("now", [DEADLINE - 1.0, DEADLINE])   # not yet past (expiry is "now > expires")
def test_a_deadline_not_yet_passed_stays_awaiting_approval_and_appends_nothing(now):
    store = held_then_died()
    head = store.head(TID)
    clock = Clock(now)
    resumed = timed_resume(store, TID, policy=POLICY, wall_clock=clock)
    assert clock.reads == 1
    assert resumed.record.control_state == "AWAITING_APPROVAL" and resumed.record.approvals["ap1"].status == "pending"
    assert store.head(TID) == head                         # a reading that decides nothing is not recorded
    assert refold(store).budget.outstanding_reservations == {"res-refund_42/attempt1": 0.5}


def test_an_approval_without_a_deadline_is_never_expired_and_the_clock_is_not_read():
    store = held_then_died(expires=None)
    head = store.head(TID)
    resumed = timed_resume(store, TID, policy=POLICY,
                           wall_clock=lambda: pytest.fail("the clock was read with no deadline to compare"))
    assert resumed.record.control_state == "AWAITING_APPROVAL" and store.head(TID) == head


@pytest.mark.parametrize("reading", [float("nan"), float("inf"), None, "noon"])
def test_an_unreadable_clock_expires_nothing(reading):
    store = held_then_died()
    head = store.head(TID)
    resumed = timed_resume(store, TID, policy=POLICY, wall_clock=lambda: reading)
    assert resumed.record.control_state == "AWAITING_APPROVAL" and store.head(TID) == head
