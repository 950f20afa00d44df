"""The gate's decisions as pure values (§11.3.2, eq. 1), the fold's invariants and money in
integer micro-dollars (§11.5.3).

Fault model: a decision that appends or reads a clock behind the caller's back (replay could not
reproduce it); float noise in the budget (a reservation released unspent leaves 1e-17 USD held, or
a bound that fits exactly is refused); an event whose amount the schema would refuse reaching
the fold anyway. Invariants: the decisions return the payloads the gate appends, and calling them
changes nothing; a recheck that compares an approval's expiry with the clock records the reading
as a RuntimeInput first, one that does not records nothing; any mix of reservations, settlements
and releases, all settled, leaves exactly zero outstanding.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib.core.decisions import (
    RECHECK_CLOCK_INPUT,
    Admit,
    Denial,
    Withhold,
    decide_admission,
    decide_recheck,
    recheck_reads_clock,
    tool_intent,
)
from kernel_lib.core.events import (
    ApprovalRequested,
    ApprovalResolved,
    Authorized,
    BudgetReserved,
    BudgetSettled,
    TaskStarted,
)
from kernel_lib.core.money import micro_to_usd, usd_to_micro
from kernel_lib.core.record import TrajectoryRecord, fold, fold_step, initial_record
from kernel_lib.errors import AdmissionDenied, DispatchWithheld, FoldError, StaleRecordError
from kernel_lib.core.crash_positions import crash_positions
from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate, ToolProposal, ToolReply
from kernel_lib.log import FailureDomain, MemoryStore, TrajectoryLog
from tests.helpers import ev, task

POLICY = AdmissionPolicy({"g": {"run_tests"}})
PROPOSAL = ToolProposal("test_r18", "attempt1", "run_tests", {"snapshot": "ws_r18"}, "g", 0.5)


def started(ceiling=5.0) -> TrajectoryRecord:
    return fold(initial_record("traj-a"), [ev(task(ceiling), 1)])


def admit(rec, proposal=PROPOSAL, **kw):
    return decide_admission(rec, POLICY, subject_id=proposal.operation_id, kind="tool", grant_id=proposal.grant_id,
                            subject=proposal.tool, bound_usd=proposal.cost_bound_usd,
                            intent=tool_intent(proposal, rec.trajectory_id), attempt_id=proposal.attempt_id,
                            repeat_contract=proposal.repeat_contract, **kw)


def gate_over(store=None, **kw) -> DispatchGate:
    store = store or MemoryStore()
    gate = DispatchGate(TrajectoryLog(store, "traj-a", must_survive=FailureDomain.NONE), POLICY, **kw)
    gate.start(task())
    return gate


# --- admission ---------------------------------------------------------------------------------


def test_admission_returns_the_three_payloads_and_changes_nothing():
    rec = started()
    before = copy.deepcopy(rec)
    d = admit(rec)
    assert isinstance(d, Admit) and d.reuses_reservation is None
    assert [type(p).__name__ for p in d.payloads] == ["Authorized", "BudgetReserved", "ToolIntent"]
    assert d.payloads[0].decision == "allow" and d.payloads[1].amount_usd == 0.5
    assert rec == before   # a decision, not an effect


def test_a_budget_denial_carries_the_deny_to_log_and_a_pause_carries_nothing():
    rec = started(ceiling=0.9)   # 0.9 - reserve 0.5 leaves 0.4 < 0.5
    d = admit(rec)
    assert isinstance(d, Denial) and "does not fit" in d.reason
    assert len(d.payloads) == 1 and isinstance(d.payloads[0], Authorized) and d.payloads[0].decision == "deny"
    paused = copy.deepcopy(started())
    paused.control_state = "PAUSED"
    d = admit(paused)
    assert isinstance(d, Denial) and d.payloads == () and "PAUSED" in d.reason


def test_a_bound_that_fits_exactly_is_admitted_without_a_tolerance():
    """0.1 + 0.2 + 0.2 as floats is 0.5000000000000001; in micro-dollars it is exactly 500 000, so
    a bound that fills the budget to the micro-dollar fits, and one micro-dollar more does not."""
    rec = fold(initial_record("traj-a"), [
        ev(TaskStarted(task_id="t", requester="a", objective="o", grant_ids=["g"], budget_ceiling_usd=1.0,
                       finalization_reserve_usd=0.5), 1),
        ev(BudgetReserved(reservation_id="r1", subject_id="x", amount_usd=0.1), 2),
        ev(BudgetReserved(reservation_id="r2", subject_id="y", amount_usd=0.2), 3)])
    fits = ToolProposal("op", "a1", "run_tests", {}, "g", 0.2)
    assert isinstance(admit(rec, fits), Admit)
    over = ToolProposal("op", "a1", "run_tests", {}, "g", 0.200001)
    assert isinstance(admit(rec, over), Denial)


def test_the_gate_appends_what_admission_decided():
    gate = gate_over()
    decided = admit(copy.deepcopy(gate.record))
    gate.run_tool(PROPOSAL, lambda intent: ToolReply("completed", observation_complete=True, charged_usd=0.2))
    logged = [e.payload for e in gate.log.events()][1:4]
    assert [p.model_dump() for p in logged] == [p.model_dump() for p in decided.payloads]


# --- the dispatch-time recheck -----------------------------------------------------------------


def approval_record(expires=1_000.0, decision=None) -> TrajectoryRecord:
    events = [ev(task(), 1), ev(ApprovalRequested(approval_id="ap1", held_operation_id="test_r18",
                                                  held_attempt_id="attempt1", reviewer="bob",
                                                  expires_unix_s=expires), 2)]
    if decision:
        events.append(ev(ApprovalResolved(approval_id="ap1", decision=decision, reviewer="bob"), 3))
    return fold(initial_record("traj-a"), events)


def test_recheck_outcomes_are_values():
    rec = started()
    kw = dict(subject_id="test_r18", admitted_control_epoch=0, owner_epoch=1, now_unix_s=None)
    assert decide_recheck(rec, fence=1, **kw) is None
    w = decide_recheck(rec, fence=2, **kw)
    assert isinstance(w, Withhold) and "owner_epoch=2" in w.why and "withheld at the dispatch-time recheck" in w.message
    moved = decide_recheck(rec, fence=1, **{**kw, "admitted_control_epoch": 3})
    assert "control_epoch moved" in moved.why
    approved = approval_record(decision="approved")
    assert decide_recheck(approved, fence=0, **{**kw, "owner_epoch": 0, "now_unix_s": 500.0}) is None
    assert "expired" in decide_recheck(approved, fence=0, **{**kw, "owner_epoch": 0, "now_unix_s": 2_000.0}).why


def test_the_recheck_reads_the_clock_only_for_an_approval_with_an_expiry():
    assert not recheck_reads_clock(started(), "test_r18", 0)
    assert recheck_reads_clock(approval_record(decision="approved"), "test_r18", 0)
    assert not recheck_reads_clock(approval_record(expires=None, decision="approved"), "test_r18", 0)
    assert not recheck_reads_clock(approval_record(decision="refused"), "test_r18", 0)   # void whatever the time
    assert not recheck_reads_clock(approval_record(decision="approved"), "other_op", 0)
    assert not recheck_reads_clock(approval_record(decision="approved"), "test_r18", 1)   # withheld before


def approved_gate(clock, store=None):
    gate = gate_over(store or MemoryStore(), clock=clock)
    gate.append(ApprovalRequested(approval_id="ap1", held_operation_id="test_r18", held_attempt_id="attempt1",
                                  reviewer="bob", expires_unix_s=1_000.0),
                ApprovalResolved(approval_id="ap1", decision="approved", reviewer="bob"))
    return gate


def test_the_gate_records_the_clock_reading_that_licensed_the_dispatch():
    """Fault model: a replay or an audit must know the time the recheck compared with the
    approval's expiry. Invariant: the reading is in the log before the request leaves."""
    store, sent = MemoryStore(), []
    gate = approved_gate(lambda: 500.0, store)
    gate.run_tool(PROPOSAL, lambda i: sent.append(i) or ToolReply("completed", observation_complete=True))
    types = [e.event_type for e in store.read("traj-a")]
    i = types.index("ToolIntent")
    assert types[i + 1] == "RuntimeInput" and types[i + 2] == "ToolResult" and len(sent) == 1
    clock_inputs = [ri for ri in gate.record.runtime_inputs if ri["name"] == RECHECK_CLOCK_INPUT]
    assert clock_inputs == [{"sequence_number": i + 2, "kind": "clock", "name": RECHECK_CLOCK_INPUT,
                             "value": {"subject_id": "test_r18", "now_unix_s": 500.0}}]


def test_a_withheld_recheck_appends_nothing_however_often_it_is_polled():
    """Fault model: a caller polls ``release`` on an attempt whose approval expired. Invariant:
    nothing is sent; the withhold itself is recorded once (the reading that decided it, then the
    ``AttemptWithheld`` that settles the attempt as never sent), and polling does not grow the log."""
    store, sent = MemoryStore(), []
    gate = approved_gate(lambda: 2_000.0, store)
    reply = lambda i: sent.append(i) or ToolReply("completed", observation_complete=True)   # noqa: E731
    with pytest.raises(DispatchWithheld, match="expired"):
        gate.run_tool(PROPOSAL, reply)
    head = gate.log.head
    for _ in range(5):
        with pytest.raises(DispatchWithheld, match="expired"):
            gate.release("test_r18", reply)
    assert gate.log.head == head and not sent
    assert [e.event_type for e in store.read("traj-a")][-3:] == ["ToolIntent", "RuntimeInput", "AttemptWithheld"]
    assert gate.record.runtime_inputs[-1]["value"] == {"subject_id": "test_r18", "now_unix_s": 2_000.0}


@pytest.mark.parametrize("reading", [float("nan"), float("inf"), "noon", None, True])
def test_an_unreadable_clock_withholds_and_appends_nothing(reading):
    store, sent = MemoryStore(), []
    gate = approved_gate(lambda: reading, store)
    with pytest.raises(DispatchWithheld, match="clock returned"):
        gate.run_tool(PROPOSAL, lambda i: sent.append(i) or ToolReply("completed", observation_complete=True))
    # no reading is recorded (there is none to store), only the withhold that settles the attempt
    assert not sent and [e.event_type for e in store.read("traj-a")][-2:] == ["ToolIntent", "AttemptWithheld"]


def test_crash_positions_place_the_dispatch_after_the_recorded_clock_reading():
    """Ground truth of table 3 with a recorded reading: the request leaves after the RuntimeInput,
    so a crash right after it has not dispatched."""
    store = MemoryStore()
    gate = approved_gate(lambda: 500.0, store)
    gate.run_tool(PROPOSAL, lambda i: ToolReply("completed", observation_complete=True))
    rows = crash_positions(list(store.read("traj-a")), "test_r18")
    by = {(r.position, r.prefix_complete): r for r in rows}
    intent_seq = next(e.sequence_number for e in store.read("traj-a") if e.event_type == "ToolIntent")
    after_intent = by[(f"after ToolIntent (sequence {intent_seq})", True)]
    after_clock = by[(f"after RuntimeInput (sequence {intent_seq + 1})", True)]
    dispatch = by[("after dispatch of test_r18 (before evidence)", True)]
    assert not after_intent.dispatched and not after_clock.dispatched and dispatch.dispatched
    assert dispatch.after_sequence_number == intent_seq + 1 and all(r.sound for r in rows)
    assert sum(r.position.startswith("during ToolIntent append") for r in rows) == 4


def test_a_recheck_without_approvals_appends_nothing_and_reads_no_clock():
    def no_clock():
        raise AssertionError("the clock was read")
    gate = gate_over(clock=no_clock)
    gate.run_tool(PROPOSAL, lambda i: ToolReply("completed", observation_complete=True))
    assert [e.event_type for e in gate.log.events()] == ["TaskStarted", "Authorized", "BudgetReserved", "ToolIntent",
                                                         "ToolResult"]


# --- the public append and its invariant -------------------------------------------------------


def test_append_folds_and_reports_and_refuses_a_stale_record():
    seen = []
    gate = gate_over(on_position=lambda name, e: seen.append(name))
    events = gate.append(BudgetReserved(reservation_id="r", subject_id="x", amount_usd=0.25))
    assert gate.record.last_sequence_number == gate.log.head == events[0].sequence_number
    assert seen[-1] == "after:BudgetReserved" and gate.record.budget.reservations["r"].amount_micro_usd == 250_000
    other = TrajectoryLog(gate.log.store, "traj-a", must_survive=FailureDomain.NONE)
    other.append(BudgetReserved(reservation_id="r2", subject_id="y", amount_usd=0.1))   # behind the gate's back
    gate.log = TrajectoryLog(gate.log.store, "traj-a", must_survive=FailureDomain.NONE)
    with pytest.raises(StaleRecordError, match="nothing appended"):
        gate.append(BudgetReserved(reservation_id="r3", subject_id="z", amount_usd=0.1))
    assert gate.log.store.head("traj-a") == 3


def test_append_checks_that_the_record_ends_at_the_log_head_afterwards():
    """A log whose head moves further than the events it returned (a writer slipped one in) is
    caught right after the append, before any callback acts on the record."""
    seen = []
    gate = gate_over(on_position=lambda name, e: seen.append(name))
    log = gate.log
    real = log.append_many

    def append_many(payloads, **kw):
        out = real(payloads, **kw)
        real([BudgetReserved(reservation_id="sneaked", subject_id="s", amount_usd=0.1)])
        return out
    log.append_many = append_many
    with pytest.raises(StaleRecordError, match="ends at #2"):
        gate.append(BudgetReserved(reservation_id="r", subject_id="x", amount_usd=0.25))
    assert seen == ["after:TaskStarted"]   # no callback saw the inconsistent record


def test_continuation_admission_appends_through_the_public_method():
    from kernel_lib.gate.admission import ContinuationGate
    gate = gate_over(clock=lambda: 0.0)
    cg = ContinuationGate(gate, clock=lambda: 0.0)
    with pytest.raises(AdmissionDenied):
        cg.run_tool(ToolProposal("x", "a1", "not_granted", {}, "g", 0.1), lambda i: ToolReply("completed"))
    assert [e.event_type for e in gate.log.events()][-1] == "Authorized"
    assert gate.record.last_sequence_number == gate.log.head


# --- money: integer micro-dollars --------------------------------------------------------------


def test_usd_amounts_become_micro_dollars_rounded_half_even():
    assert usd_to_micro(0.1) == 100_000 and usd_to_micro(5) == 5_000_000
    assert usd_to_micro(2.5e-6) == 2 and usd_to_micro(3.5e-6) == 4 and usd_to_micro(1.0000005) == 1_000_000
    assert usd_to_micro(4e-7, "up") == 1 and usd_to_micro(4e-7, "down") == 0 and usd_to_micro(0.1, "up") == 100_000
    assert usd_to_micro(1.0000004, "up") == 1_000_001 and usd_to_micro(0.9999996, "down") == 999_999
    assert usd_to_micro(0.30000000000000004, "up") == 300_001 and usd_to_micro(5, "up") == 5_000_000
    assert micro_to_usd(usd_to_micro(0.30000000000000004)) == 0.3
    for bad in (float("nan"), float("inf"), True, "1"):
        with pytest.raises(ValueError):
            usd_to_micro(bad)


def test_the_fold_refuses_an_amount_the_schema_would_refuse():
    """An event built around the schema (model_construct) with a negative amount is refused by the
    fold before it changes the record."""
    rec = started()
    bad = BudgetSettled.model_construct(reservation_id="r", subject_id="x", actual_usd=-0.5, final=True,
                                        evidence="x")
    with pytest.raises(FoldError, match="negative"):
        fold_step(rec, ev(bad, 2))
    assert rec.last_sequence_number == 1 and rec.budget.actual_consumption_micro_usd == 0


@pytest.mark.parametrize("ceiling, reserve, bounds, admitted", [
    (1e-6, 0.0, [4e-7] * 5, 1),            # each sub-micro bound holds a whole micro-dollar
    (0.0, 0.0, [4e-7], 0),                 # nothing fits a zero ceiling
    (1.0, 0.0, [1.0000004], 0),            # a bound over the ceiling by less than a micro-dollar
    (1.0, 0.3, [0.7000001], 0),            # ... or over what the finalization reserve leaves
    (1.0, 0.0, [1.0], 1),                  # exactly the ceiling fits
])
def test_sub_micro_dollar_amounts_round_toward_more_liability(ceiling, reserve, bounds, admitted):
    """Fault model: bounds and charges finer than a micro-dollar (the fold's grain). Invariant: the
    bounded-liability rule never admits more than the ceiling allows: bounds and the reserve round
    up, the ceiling down, so rounding can only refuse, never admit, a step the exact rule refuses."""
    gate = DispatchGate(TrajectoryLog(MemoryStore(), "traj-a", must_survive=FailureDomain.NONE), POLICY)
    gate.start(TaskStarted(task_id="t", requester="a", objective="o", grant_ids=["g"], budget_ceiling_usd=ceiling,
                           finalization_reserve_usd=reserve))
    ok = 0
    for i, bound in enumerate(bounds):
        try:
            gate.run_tool(ToolProposal(f"op{i}", "a1", "run_tests", {}, "g", bound),
                          lambda intent, b=bound: ToolReply("completed", observation_complete=True, charged_usd=b))
            ok += 1
        except AdmissionDenied:
            pass
    assert ok == admitted
    b = gate.record.budget
    assert b.actual_consumption_micro_usd + b.outstanding_reservations_micro_usd <= b.ceiling_micro_usd


def test_a_charge_over_its_reservation_by_a_fraction_of_a_micro_dollar_is_an_overrun():
    gate = DispatchGate(TrajectoryLog(MemoryStore(), "traj-a", must_survive=FailureDomain.NONE), POLICY)
    gate.start(TaskStarted(task_id="t", requester="a", objective="o", grant_ids=["g"], budget_ceiling_usd=1.0))
    gate.run_tool(ToolProposal("op0", "a1", "run_tests", {}, "g", 0.5),
                  lambda intent: ToolReply("completed", observation_complete=True, charged_usd=0.5000004))
    assert gate.record.budget.actual_consumption_micro_usd == 500_001
    with pytest.raises(AdmissionDenied):   # 0.500001 spent + 0.5 would pass the 1.0 ceiling
        gate.run_tool(ToolProposal("op1", "a1", "run_tests", {}, "g", 0.5),
                      lambda intent: ToolReply("completed", observation_complete=True))


def test_a_usage_report_too_large_to_store_settles_nothing_and_raises_nothing():
    from kernel_lib.limits import JSON_NUMBER_MAX, USAGE_USD_MAX
    assert USAGE_USD_MAX <= JSON_NUMBER_MAX
    gate = DispatchGate(TrajectoryLog(MemoryStore(), "traj-a", must_survive=FailureDomain.NONE), POLICY)
    gate.start(TaskStarted(task_id="t", requester="a", objective="o", grant_ids=["g"], budget_ceiling_usd=1.0))
    gate.run_tool(ToolProposal("op0", "a1", "run_tests", {}, "g", 0.5),
                  lambda intent: ToolReply("completed", observation_complete=True, charged_usd=float(2**53)))
    assert gate.record.operations["op0"].status == "established"
    assert [e.event_type for e in gate.log.events()][-1] == "ToolResult"


amounts = st.decimals(min_value=0, max_value=1000, places=6, allow_nan=False).map(float)


@settings(max_examples=200, deadline=None)
@given(plan=st.lists(st.tuples(amounts, st.lists(amounts, max_size=4), st.sampled_from(["release", "settle"])),
                     min_size=1, max_size=25))
def test_reservations_settlements_and_releases_net_to_exactly_zero(plan):
    """Any sequence of reservations, each with partial settlements and then a final settlement (a
    release with zero usage, or a final usage report), leaves exactly zero outstanding; the
    consumption is exactly the sum of the settled micro-dollars."""
    events = [ev(TaskStarted(task_id="t", requester="a", objective="o", budget_ceiling_usd=10**6), 1)]
    expected = 0
    for i, (bound, _partials, _how) in enumerate(plan):
        events.append(ev(BudgetReserved(reservation_id=f"r{i}", subject_id=f"op{i}", amount_usd=bound),
                         len(events) + 1))
    for i, (bound, partials, how) in enumerate(plan):   # settle after all are reserved (interleaved holds)
        for a in partials:
            events.append(ev(BudgetSettled(reservation_id=f"r{i}", subject_id=f"op{i}", actual_usd=a, final=False,
                                           evidence="partial"), len(events) + 1))
            expected += usd_to_micro(a)
        last = 0.0 if how == "release" else bound
        events.append(ev(BudgetSettled(reservation_id=f"r{i}", subject_id=f"op{i}", actual_usd=last, final=True,
                                       evidence=how), len(events) + 1))
        expected += usd_to_micro(last)
        mid = fold(initial_record("traj-a"), events)
        held = sum(usd_to_micro(b) for b, _, _ in plan[i + 1:])
        assert mid.budget.outstanding_reservations_micro_usd == held   # the others are still held in full
    rec = fold(initial_record("traj-a"), events)
    b = rec.budget
    assert b.outstanding_reservations_micro_usd == 0 and b.outstanding_reservations == {}
    assert b.outstanding_reservations_usd == 0.0
    assert b.actual_consumption_micro_usd == expected
    assert b.available_micro_usd == b.ceiling_micro_usd - expected
    assert TrajectoryRecord.from_dict(rec.to_dict()) == rec == TrajectoryRecord.from_dict(rec.snapshot_state())


def test_an_intent_too_large_for_one_event_is_refused_before_anything_is_appended():
    """Fault model: a model call whose delivered input is larger than one event may be. Invariant:
    no admission is logged without its intent, so no reservation is left held; the error is typed."""
    from kernel_lib.core.proposals import ModelCall, ModelReply
    from kernel_lib.errors import EventTooLargeError
    from kernel_lib.limits import EVENT_BYTES_MAX
    store = MemoryStore()
    gate = DispatchGate(TrajectoryLog(store, "traj-a", must_survive=FailureDomain.NONE),
                        AdmissionPolicy({"g": {"run_tests", "model-x"}}))
    gate.start(task())
    head = gate.log.head
    call = ModelCall("inv-1", "model-x", "x" * (EVENT_BYTES_MAX + 1), "g", 0.5)
    with pytest.raises(EventTooLargeError):
        gate.run_model(call, lambda ctx: ModelReply("complete", "ok"))
    assert gate.log.head == head and gate.record.budget.outstanding_reservations_micro_usd == 0


def test_the_log_appends_an_event_it_stamped_and_refuses_one_stamped_for_another_position():
    from kernel_lib.errors import ConfigError
    log = TrajectoryLog(MemoryStore(), "traj-a", must_survive=FailureDomain.NONE)
    first = log.stamp(task(), 1)
    assert log.append_many([first]) == [first] and log.head == 1
    with pytest.raises(ConfigError, match="next position"):
        log.append_many([log.stamp(task(), 3)])
    assert log.head == 1 and [e.sequence_number for e in log.events()] == [1]
