"""No reservation outlives its reason (Durable Execution §11.5.3, §11.3.2; issue 14).

Fault model: the worker dies at any point of a multi-tool run (tool calls that complete with and
without usage reports, time out and are retried, stay accepted or partial; model calls; a pause
at dispatch time and a release; a void approval; a held action; a completed trajectory): modelled
as the log cut at any position (which also splits a batch, the worst a store could do) or as the
worker killed between two appends, and a replacement resumes. The two cases named in the issue:
a crash between a result and its usage settlement, and a retried attempt whose operation another
attempt already settled.
Invariant: after the resume, every reservation still holding liability belongs to an operation
that is in doubt, or still running toward its intent (admitted, in a live trajectory, not held
back by a void approval); the fold reports every other one
(:meth:`TrajectoryRecord.orphaned_reservations`), and the resume settles it: released unspent only
when the operation provably never dispatched, otherwise charged at its bound (missing usage is
never released as unspent budget).
Goal: the budget a trajectory rebuilds names only liabilities that still have an owner.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel_lib.core.events import (
    ApprovalRequested, ApprovalResolved, Authorized, BudgetReserved, BudgetSettled, ContextBuilt, TaskStarted,
    ToolIntent,
)
from kernel_lib.core.money import usd_to_micro
from kernel_lib.core.record import TERMINAL_STATES, fold, initial_record
from kernel_lib.errors import DispatchWithheld
from kernel_lib.gate.dispatch import (
    AdmissionPolicy, DispatchGate, ModelCall, ModelReply, ToolProposal, ToolReply, decision_id, reservation_id,
)
from kernel_lib.log import FailureDomain, MemoryStore, TrajectoryLog, load_events
from kernel_lib.resume.stages import timed_resume

TID = "traj-inv"
POLICY = AdmissionPolicy({"g": {"run", "m"}})
HISTORIES = Path(__file__).resolve().parent / "histories" / "v1"

STEPS = ["charged", "uncharged", "timeout", "timeout_retry", "accepted", "partial", "model_complete",
         "model_partial", "pause_release", "void"]


class Crash(BaseException):
    """The worker process dies here."""


# --- the invariant, stated from the record's plain fields (independent of the fold's own view) ---

def unjustified(rec) -> list[str]:
    """Reservations holding liability whose operation is neither in doubt nor running."""
    out = []
    for rid, r in rec.budget.reservations.items():
        if r.released or r.amount_micro_usd - r.settled_micro_usd <= 0:
            continue
        op = rec.operations.get(r.subject_id)
        void = any(a.held_operation_id == r.subject_id and a.status in ("refused", "withdrawn", "expired")
                   for a in rec.approvals.values())
        in_doubt = op is not None and op.status == "in_doubt"
        running = (op is not None and op.status in ("proposed", "admitted") and not void
                   and rec.control_state not in TERMINAL_STATES)
        if not (in_doubt or running):
            out.append(f"{rid} ({op.status if op else 'no operation'}, trajectory {rec.control_state})")
    return out


def assert_invariant(rec, where=""):
    assert unjustified(rec) == [], where
    assert rec.orphaned_reservations() == [], where


def never_dispatched(events, subject_id) -> bool:
    """No intent of ``subject_id`` in ``events`` that its own AttemptWithheld does not settle."""
    intents = {(e.payload.operation_id, e.payload.attempt_id) for e in events if isinstance(e.payload, ToolIntent)}
    intents |= {(e.payload.invocation_id,) * 2 for e in events if isinstance(e.payload, ContextBuilt)}
    withheld = {(e.payload.subject_id, e.payload.attempt_id) for e in events if e.event_type == "AttemptWithheld"}
    return not any(s == subject_id for s, _ in intents - withheld)


# --- a recorded multi-tool run ------------------------------------------------------------------

def timeout(intent):
    raise TimeoutError("no reply in 30 s")


def completed(charged):
    return lambda intent: ToolReply("completed", observation_complete=True, charged_usd=charged)


class Run:
    """One worker running a script of steps through its gate; ``crash_at`` kills it at the n-th
    position the gate reports (after an append, the recheck or the dispatch)."""

    def __init__(self, store, epoch=0, crash_at=None):
        self.positions, self.crash_at, self.pause_next = 0, crash_at, False
        log = TrajectoryLog(store, TID, must_survive=FailureDomain.NONE, owner_epoch=epoch)
        self.gate = DispatchGate(log, POLICY, on_position=self.hook)

    def hook(self, name, ev):
        self.positions += 1
        if self.crash_at is not None and self.positions >= self.crash_at:
            raise Crash(name)
        if name == "after:ToolIntent" and self.pause_next:
            self.pause_next = False
            self.gate.change_control("PAUSED", issuer="operator", request_id=f"pause-{self.positions}")

    def start(self):
        self.gate.start(TaskStarted(task_id="t", requester="alice", objective="repair", grant_ids=["g"],
                                    budget_ceiling_usd=50.0, finalization_reserve_usd=0.5))

    def step(self, i, kind):
        g, op = self.gate, f"op{i}"

        def p(att):
            return ToolProposal(op, att, "run", {"i": i}, "g", 0.5, repeat_contract="idempotency_key")

        if kind == "charged":
            g.run_tool(p("a1"), completed(0.1))
        elif kind == "uncharged":
            g.run_tool(p("a1"), completed(None))
        elif kind == "timeout":
            g.run_tool(p("a1"), timeout)
        elif kind == "timeout_retry":
            g.run_tool(p("a1"), timeout)
            g.run_tool(p("a2"), completed(0.2))
        elif kind == "accepted":
            g.run_tool(p("a1"), lambda intent: ToolReply("accepted", job_handle=f"job-{i}"))
        elif kind == "partial":
            g.run_tool(p("a1"), lambda intent: ToolReply("partial", charged_usd=0.05))
        elif kind == "model_complete":
            g.run_model(ModelCall(op, "m", f"turn {i}", "g", 0.2), lambda c: ModelReply("complete", "ok",
                                                                                        charged_usd=0.01))
        elif kind == "model_partial":
            g.run_model(ModelCall(op, "m", f"turn {i}", "g", 0.2), lambda c: ModelReply("partial", "o",
                                                                                        charged_usd=0.05))
        elif kind == "pause_release":
            self.pause_next = True
            try:
                g.run_tool(p("a1"), completed(0.1))
            except DispatchWithheld:
                g.change_control("RUNNING", issuer="operator", request_id=f"resume-{i}")
                g.release(op, completed(0.1))
        elif kind in ("void", "held"):
            g.append(Authorized(decision_id=decision_id(op, "a1"), subject_id=op, subject_kind="tool",
                                policy_version="policy-v1", grant_id="g", decision="allow"),
                     BudgetReserved(reservation_id=reservation_id(op, "a1"), subject_id=op, amount_usd=0.5),
                     ApprovalRequested(approval_id=f"ap-{op}", held_operation_id=op, held_attempt_id="a1",
                                       reviewer="bob"))
            if kind == "void":
                g.append(ApprovalResolved(approval_id=f"ap-{op}", decision="refused", reviewer="bob"))
                try:
                    g.run_tool(p("a1"), completed(0.1))
                except DispatchWithheld:
                    pass

    def script(self, steps, held, complete):
        self.start()
        for i, kind in enumerate(steps):
            self.step(i, kind)
        if held:
            self.step(len(steps), "held")
        if complete:
            self.gate.change_control("COMPLETED", issuer="agent", request_id="done")


def recorded(steps, held, complete):
    store = MemoryStore()
    Run(store).script(steps, held, complete)
    return list(store.read(TID))


def store_of(events):
    store = MemoryStore()
    for out in store.append_batch(events, store.strongest_tier()):
        assert not isinstance(out, Exception), out
    return store


def resume_and_check(store, where):
    before = list(store.read(TID))
    resumed = timed_resume(store, TID, policy=POLICY)
    assert_invariant(resumed.record, where)
    refolded = fold(initial_record(TID), store.read(TID))
    assert_invariant(refolded, where + " (refolded)")
    # a settlement the resume appended releases unspent only what provably never dispatched
    for ev in list(store.read(TID))[len(before):]:
        if isinstance(ev.payload, BudgetSettled) and ev.payload.actual_usd == 0:
            amount = refolded.budget.reservations[ev.payload.reservation_id].amount_micro_usd
            assert amount == 0 or never_dispatched(before, ev.payload.subject_id), (where, ev.payload)
    return resumed


scripts = st.tuples(st.lists(st.sampled_from(STEPS), min_size=1, max_size=6), st.booleans(), st.booleans())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=scripts, cut=st.floats(0, 1))
def test_after_a_cut_anywhere_and_a_resume_every_reservation_has_a_reason(script, cut):
    events = recorded(*script)
    k = max(1, round(cut * len(events)))
    resume_and_check(store_of(events[:k]), f"{script} cut after #{k} of {len(events)}")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=scripts, crash_at=st.integers(1, 80))
def test_a_worker_killed_between_appends_then_resumed_and_continued_keeps_the_invariant(script, crash_at):
    store = MemoryStore()
    try:
        Run(store, crash_at=crash_at).script(*script)
    except Crash:
        pass
    where = f"{script} killed at position {crash_at}"
    resumed = resume_and_check(store, where)
    # the new owner continues: one more charged step, then the trajectory completes, then it dies
    new = Run(store, epoch=resumed.owner_epoch)
    new.gate = resumed.gate
    if new.gate.record.control_state == "PAUSED":
        new.gate.change_control("RUNNING", issuer="operator", request_id="resume-after-crash")
    if new.gate.record.control_state == "RUNNING":
        new.step(99, "charged")
    if new.gate.record.control_state not in TERMINAL_STATES:
        new.gate.change_control("COMPLETED", issuer="agent", request_id="done-after-crash")
    resume_and_check(store, where + ", continued, completed and resumed again")


# --- the two named cases ------------------------------------------------------------------------

def test_a_crash_after_the_result_finds_its_usage_settlement_already_durable():
    """Result and settlement are one batch: a worker killed right after the ToolResult was
    acknowledged leaves the settlement durable too (nothing for anyone to remember)."""
    store = MemoryStore()
    run = Run(store)
    run.start()

    def crash_after_result(name, ev):
        if name == "after:ToolResult":
            raise Crash(name)
    run.gate.on_position = crash_after_result
    with pytest.raises(Crash):
        run.step(0, "charged")
    types = [e.event_type for e in store.read(TID)]
    assert types[-2:] == ["ToolResult", "BudgetSettled"]
    rec = fold(initial_record(TID), store.read(TID))
    assert rec.budget.outstanding_reservations_micro_usd == 0 and unjustified(rec) == []
    assert rec.budget.actual_consumption_micro_usd == usd_to_micro(0.1)


def test_a_log_cut_between_a_result_and_its_settlement_is_charged_at_the_bound_on_resume():
    """A store that tore the batch (or a log written before the batch): the completed result is
    durable, its usage report is not. The fold reports the reservation; resume charges the bound."""
    events = recorded(["charged"], False, False)
    cut = [e.event_type for e in events].index("BudgetSettled")
    store = store_of(events[:cut])
    rec = fold(initial_record(TID), store.read(TID))
    assert rec.operations["op0"].status == "established"
    assert rec.orphaned_reservations() == [reservation_id("op0", "a1")] and unjustified(rec)
    resumed = resume_and_check(store, "cut between result and settlement")
    b = resumed.record.budget
    assert b.outstanding_reservations_micro_usd == 0 and b.actual_consumption_micro_usd == usd_to_micro(0.5)
    last = list(store.read(TID))[-1].payload
    assert isinstance(last, BudgetSettled) and last.final and "charged at the bound" in last.evidence


def test_a_retried_attempt_whose_operation_another_attempt_settled_leaves_no_reservation_after_resume():
    """attempt1 timed out (in doubt, its bound held); attempt2 completed and settled, so the
    operation is established and nothing is in doubt, yet attempt1's bound stays held."""
    events = recorded(["timeout_retry"], False, True)
    rec = fold(initial_record(TID), events)
    assert rec.control_state == "COMPLETED" and rec.in_doubt() == []
    assert rec.orphaned_reservations() == [reservation_id("op0", "a1")]
    store = store_of(events)
    resumed = resume_and_check(store, "retry after the operation settled")
    b = resumed.record.budget
    assert b.outstanding_reservations_micro_usd == 0
    assert b.actual_consumption_micro_usd == usd_to_micro(0.2) + usd_to_micro(0.5)   # attempt1 charged at its bound


def test_the_frozen_retry_history_reports_its_orphan_and_a_resume_of_a_copy_settles_it():
    """The v1 ``retry`` history (read-only): its fold is unchanged, the orphan is reported by the
    derived view, and resuming a copy settles it."""
    events = load_events(HISTORIES / "retry" / "log.sqlite")
    rec = fold(initial_record(events[0].trajectory_id), events)
    assert rec.orphaned_reservations() == ["res-test_r18/attempt1"]
    store = MemoryStore()
    store.append_batch(events, store.strongest_tier())
    store.install_fence(events[0].trajectory_id, max(e.owner_epoch for e in events))
    resumed = timed_resume(store, events[0].trajectory_id)
    assert resumed.record.orphaned_reservations() == [] and unjustified(resumed.record) == []
