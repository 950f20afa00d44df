"""Dispatch ordering (§11.3.2, eq. 1) and crash positions (§11.3.3, table 3)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib.gate.dispatch import (AdmissionPolicy, DispatchGate, ModelCall, ModelReply, ToolProposal, ToolReply,
                                 crash_positions)
from kernel_lib.errors import DispatchWithheld
from kernel_lib.sim.worksheet import worksheet_events
from kernel_lib.log import FailureDomain, TrajectoryLog
from tests.conftest import make_store
from tests.helpers import task

PROPOSAL = ToolProposal("test_r18", "attempt1", "run_tests", {"snapshot": "ws_r18"}, "g", 0.5)


def _gate(store, **kw):
    log = TrajectoryLog(store, "traj", must_survive=kw.pop("must_survive", FailureDomain.HOST_CRASH))
    gate = DispatchGate(log, AdmissionPolicy({"g": {"run_tests", "m"}}), **kw)
    gate.start(task())
    return gate


@pytest.mark.parametrize("coalesce", [False, True])
def test_intent_and_admission_are_durable_before_the_request_leaves(durable_store_kind, tmp_path, coalesce):
    """Invariant of eq. 1: at the moment the transport runs, the store already holds Authorized,
    BudgetReserved and ToolIntent, acknowledged at the fdatasync tier. For SQLite the check reads
    through a fresh connection, as a replacement worker would; the segment log admits one opener,
    so there the check reads the store's acknowledged content and its synced watermark."""
    store = make_store(durable_store_kind, tmp_path)
    gate = _gate(store, coalesce_admission=coalesce)
    assert gate.log.tier.label == "fdatasync"
    seen = {}

    def transport(intent):
        if durable_store_kind == "sqlite":
            fresh = make_store("sqlite", tmp_path)
            seen["types"] = [e.event_type for e in fresh.read("traj")]
            fresh.close()
        else:
            seen["types"] = [e.event_type for e in store.read("traj")]
            seen["synced"] = store.synced_watermark == store.end_position
        return ToolReply("accepted", job_handle="job_tests_18")

    gate.run_tool(PROPOSAL, transport)
    assert seen["types"][-3:] == ["Authorized", "BudgetReserved", "ToolIntent"]
    assert seen.get("synced", True)
    store.close()


def test_model_call_context_and_reservation_precede_the_request(tmp_path):
    store = make_store("sqlite", tmp_path)
    gate = _gate(store)
    seen = {}

    def model(ctx):
        seen["types"] = [e.event_type for e in make_store("sqlite", tmp_path).read("traj")]
        return ModelReply("complete", "ok", charged_usd=0.01)

    gate.run_model(ModelCall("call1", "m", "hello", "g", 0.2), model)
    assert seen["types"][-3:] == ["Authorized", "BudgetReserved", "ContextBuilt"]
    assert gate.record.operations["call1"].status == "established"


def test_positions_are_reported_in_eq_1_order(tmp_path):
    order = []
    gate = _gate(make_store("sqlite", tmp_path), on_position=lambda name, ev: order.append(name))
    order.clear()
    gate.run_tool(PROPOSAL, lambda i: (order.append("SEND"), ToolReply("completed", observation_complete=True))[1])
    assert order == ["after:Authorized", "after:BudgetReserved", "after:ToolIntent", "after:recheck", "SEND",
                     "after:dispatch", "after:ToolResult"]


def test_a_pause_withholds_the_admitted_attempt_records_it_and_releases_its_reservation(tmp_path):
    """Fault: an operator pauses between the intent's acknowledgment and dispatch. Goal: the request
    never leaves; the attempt is recorded as withheld (never sent, not in doubt) and its reservation
    released, and release later dispatches the operation once, as a new attempt with its own
    reservation (the withheld one is no longer held, so nothing is reserved twice)."""
    store = make_store("sqlite", tmp_path)
    sent, paused = [], []

    def pause_after_intent(name, ev):
        if name == "after:ToolIntent" and not paused:
            paused.append(1)
            gate.change_control("PAUSED", issuer="operator", request_id="pause-1")

    gate = _gate(store, on_position=pause_after_intent)
    with pytest.raises(DispatchWithheld, match="recorded as withheld"):
        gate.run_tool(PROPOSAL, lambda i: sent.append(i) or ToolReply("completed", observation_complete=True))
    assert sent == []
    assert gate.record.budget.outstanding_reservations_usd == 0
    assert gate.record.operations["test_r18"].status == "withheld" and gate.record.in_doubt() == []
    assert "test_r18" in gate.withheld
    gate.change_control("RUNNING", issuer="operator", request_id="resume-1")
    gate.release("test_r18", lambda i: sent.append(i) or ToolReply("completed", observation_complete=True))
    assert len(sent) == 1 and sent[0].attempt_id != "attempt1"
    reserved = [e for e in store.read("traj") if e.event_type == "BudgetReserved"]
    assert len(reserved) == 2 and gate.record.budget.reservations[reserved[0].payload.reservation_id].released
    assert gate.record.operations["test_r18"].status == "established"


def test_a_fenced_worker_is_withheld_at_the_recheck(tmp_path):
    store = make_store("sqlite", tmp_path)
    sent = []
    gate = _gate(store, on_position=lambda n, e: store.install_fence("traj", 1) if n == "after:ToolIntent" else None)
    with pytest.raises(DispatchWithheld, match="ownership moved"):
        gate.run_tool(PROPOSAL, lambda i: sent.append(i))
    assert sent == []


def test_transport_timeout_becomes_in_doubt_evidence(tmp_path):
    gate = _gate(make_store("sqlite", tmp_path))

    def slow(intent):
        raise TimeoutError("no reply in 30 s")

    rec = gate.run_tool(PROPOSAL, slow)
    assert rec.operations["test_r18"].status == "in_doubt"
    assert rec.operations["test_r18"].attempts["attempt1"].last_result_status == "timeout"


# --- crash positions -----------------------------------------------------------------------------

def test_crash_positions_follow_table_3_on_the_worksheet():
    rows = crash_positions(worksheet_events())
    by = {(r.position, r.prefix_complete): r for r in rows}
    intent_seq = next(e.sequence_number for e in worksheet_events() if e.event_type == "ToolIntent")
    assert all(r.sound for r in rows)
    for r in rows:
        if r.prefix_complete and r.surviving_sequence_number < intent_seq:
            assert r.conclusion == "not_dispatched", r.position
        if not r.prefix_complete and r.conclusion == "not_dispatched":
            pytest.fail(f"an incomplete prefix concluded not_dispatched at {r.position}")
    assert by[(f"after ToolIntent (sequence {intent_seq})", True)].conclusion == "in_doubt"
    assert by[("after dispatch of test_r18 (before evidence)", True)].conclusion == "in_doubt"
    landed = [r for r in rows if "intent landed" in r.position and "test_r18" in r.position and r.prefix_complete]
    lost = [r for r in rows if "did not land" in r.position and "test_r18" in r.position and r.prefix_complete]
    assert landed[0].conclusion == "in_doubt" and lost[0].conclusion == "not_dispatched"
    assert rows[-2].conclusion == "established" and rows[-2].prefix_complete


@settings(max_examples=25)
@given(lag=st.integers(1, 5))
def test_incomplete_prefixes_never_conclude_not_dispatched(lag):
    for r in crash_positions(worksheet_events(), lag_events=lag):
        if not r.prefix_complete and r.surviving_sequence_number < r.after_sequence_number:
            assert r.conclusion != "not_dispatched"


def test_cli_crash_positions_json():
    out = subprocess.run([sys.executable, "-m", "kernel_lib", "crash-positions", "--json"], capture_output=True,
                         text=True, check=True).stdout
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows and all({"position", "prefix_complete", "conclusion"} <= set(r) for r in rows)
    assert {r["conclusion"] for r in rows} == {"not_dispatched", "in_doubt", "established"}
    assert all(isinstance(r["prefix_complete"], bool) for r in rows)


@pytest.mark.parametrize("contract, allowed", [("at_most_once", False), ("unsafe", False),
                                               ("idempotency_key", True), ("read_only", True)])
def test_only_the_endpoint_contract_licenses_another_attempt_of_an_in_doubt_operation(tmp_path, contract, allowed):
    """Fault: attempt1 timed out (in doubt). Goal: a second attempt is admitted only when the endpoint's
    repeat contract makes the repeat safe (settlement before retry, §11.3.3)."""
    from kernel_lib.errors import AdmissionDenied
    gate = _gate(make_store("sqlite", tmp_path))
    p1 = ToolProposal("op", "attempt1", "run_tests", {}, "g", 0.5, repeat_contract=contract)

    def timeout(i):
        raise TimeoutError()

    gate.run_tool(p1, timeout)
    with pytest.raises(AdmissionDenied, match="fresh identity"):
        gate.run_tool(p1, timeout)                     # the same attempt id is never reused
    p2 = ToolProposal("op", "attempt2", "run_tests", {}, "g", 0.5, repeat_contract=contract)
    if allowed:
        rec = gate.run_tool(p2, lambda i: ToolReply("completed", observation_complete=True, charged_usd=0.1))
        assert rec.operations["op"].status == "established"
        assert rec.budget.outstanding_reservations_usd == pytest.approx(0.5)   # attempt1's liability still held
    else:
        with pytest.raises(AdmissionDenied, match="settle it first"):
            gate.run_tool(p2, timeout)


def test_the_recorded_contract_not_the_new_proposal_licenses_a_repeat(tmp_path):
    from kernel_lib.errors import AdmissionDenied
    gate = _gate(make_store("sqlite", tmp_path))

    def timeout(i):
        raise TimeoutError()

    gate.run_tool(ToolProposal("op", "a1", "run_tests", {}, "g", 0.1, repeat_contract="at_most_once"), timeout)
    with pytest.raises(AdmissionDenied, match="at_most_once"):
        gate.run_tool(ToolProposal("op", "a2", "run_tests", {}, "g", 0.1, repeat_contract="idempotent"), timeout)
    gate.run_tool(ToolProposal("done", "a1", "run_tests", {}, "g", 0.1),
                  lambda i: ToolReply("completed", observation_complete=True))
    with pytest.raises(AdmissionDenied, match="established"):
        gate.run_tool(ToolProposal("done", "a2", "run_tests", {}, "g", 0.1), timeout)


def test_a_callback_that_appends_inside_a_coalesced_batch_does_not_wedge_the_gate(tmp_path):
    paused = []

    def pause_once(name, ev):
        if name == "after:BudgetReserved" and not paused:
            paused.append(1)
            gate.change_control("PAUSED", issuer="op", request_id="p1")

    gate = _gate(make_store("sqlite", tmp_path), coalesce_admission=True, on_position=pause_once)
    with pytest.raises(DispatchWithheld):
        gate.run_tool(PROPOSAL, lambda i: ToolReply("completed", observation_complete=True))
    assert gate.record.last_sequence_number == gate.log.head
    gate.change_control("RUNNING", issuer="op", request_id="r1")
    assert gate.release("test_r18", lambda i: ToolReply("completed", observation_complete=True)
                        ).operations["test_r18"].status == "established"


def test_secrets_in_evidence_are_redacted_not_lost(tmp_path):
    store = make_store("sqlite", tmp_path)
    gate = _gate(store)
    rec = gate.run_tool(PROPOSAL, lambda i: ToolReply("completed", observation_complete=True,
                                                     outcome={"passed": 3, "token": "s3cr3t-value"}))
    op = rec.operations["test_r18"]
    assert op.status == "established" and op.outcome["passed"] == 3 and op.outcome["redacted_fields"] == ["token"]
    assert b"s3cr3t-value" not in b"".join(e.canonical for e in store.read("traj"))


@pytest.mark.parametrize("garbage", [None, "ok", {"status": "completed"}])
def test_a_garbage_reply_is_incomplete_evidence(tmp_path, garbage):
    rec = _gate(make_store("sqlite", tmp_path)).run_tool(PROPOSAL, lambda i: garbage)
    assert rec.operations["test_r18"].status == "in_doubt"
    assert rec.operations["test_r18"].attempts["attempt1"].last_result_status == "partial"


@pytest.mark.parametrize("bound", [-1.0, float("nan"), float("inf"), "5", True])
def test_bad_cost_bounds_are_config_errors(bound):
    from kernel_lib.errors import ConfigError
    with pytest.raises(ConfigError):
        ToolProposal("op", "a1", "run_tests", {}, "g", bound)


def test_crash_positions_refuse_unknown_operations_and_bad_lags():
    from kernel_lib.errors import ConfigError, KernelError
    with pytest.raises(KernelError, match="does not occur"):
        crash_positions(worksheet_events(), "nope")
    for lag in (0, -3):
        with pytest.raises(ConfigError):
            crash_positions(worksheet_events(), lag_events=lag)


def test_usage_evidence_settles_the_attempts_own_reservation_once(tmp_path):
    """A late duplicate completion with a charge must not settle a released reservation again (that
    would be an invalid log) nor settle another attempt's reservation."""
    gate = _gate(make_store("sqlite", tmp_path))
    done = ToolReply("completed", observation_complete=True, charged_usd=0.2)
    gate.run_tool(ToolProposal("op", "a1", "run_tests", {}, "g", 0.5), lambda i: done)
    gate.record_evidence("op", "a1", done)          # the same completion delivered twice
    b = gate.record.budget
    assert b.reservations["res-op/a1"].released and b.actual_consumption_usd == pytest.approx(0.2)
    assert gate.record.last_sequence_number == gate.log.head


def test_a_retry_after_a_crash_between_reservation_and_intent_reuses_the_admission(tmp_path):
    """Fault: the worker died after BudgetReserved, before the ToolIntent (non-coalesced admission).
    Goal: a replacement re-proposing the same attempt keeps its identity and reservation, reserves
    nothing again, and the log keeps folding (§11.5.4)."""
    store = make_store("sqlite", tmp_path)

    def die_before_intent(name, ev):
        if name == "after:BudgetReserved":
            raise SystemExit("killed")

    gate = _gate(store, on_position=die_before_intent)
    with pytest.raises(SystemExit):
        gate.run_tool(PROPOSAL, lambda i: ToolReply("completed", observation_complete=True))
    replacement = DispatchGate(TrajectoryLog(store, "traj"), AdmissionPolicy({"g": {"run_tests"}}))
    assert replacement.record.operations["test_r18"].status == "admitted"
    rec = replacement.run_tool(PROPOSAL, lambda i: ToolReply("completed", observation_complete=True))
    assert rec.operations["test_r18"].status == "established"
    types = [e.event_type for e in store.read("traj")]
    assert types.count("BudgetReserved") == 1 and types.count("Authorized") == 1
    with pytest.raises(Exception, match="already started"):
        replacement.start(task())
    replacement.change_control("CANCELLED", issuer="op", request_id="c1")
    with pytest.raises(Exception, match="terminal"):
        replacement.change_control("CANCELLED", issuer="op2", request_id="c2")
    from kernel_lib.core.record import fold, initial_record
    assert fold(initial_record("traj"), store.read("traj")).control_state == "CANCELLED"


def test_a_new_attempt_must_repeat_the_recorded_request(tmp_path):
    from kernel_lib.errors import AdmissionDenied
    gate = _gate(make_store("sqlite", tmp_path))

    def timeout(i):
        raise TimeoutError()

    keyed = {"repeat_contract": "idempotency_key"}   # a repeat-safe tool: only the changed request is refused
    gate.run_tool(ToolProposal("pay", "a1", "run_tests", {"amount": 10, "to": "alice"}, "g", 0.1, **keyed), timeout)
    with pytest.raises(AdmissionDenied, match="repeat the recorded operation"):
        gate.run_tool(ToolProposal("pay", "a2", "run_tests", {"amount": 10000, "to": "mallory"}, "g", 0.1, **keyed),
                      timeout)


@pytest.mark.parametrize("outcome", [{"t": "\ud800"}, {"n": float("nan")}, {"s": {1, 2}}, {1: "int key"},
                                     ["token: abcdefgh"]])
def test_unstorable_evidence_is_recorded_as_incomplete_not_lost(tmp_path, outcome):
    store = make_store("sqlite", tmp_path)
    rec = _gate(store).run_tool(PROPOSAL, lambda i: ToolReply("completed", observation_complete=True,
                                                             outcome=outcome))
    op = rec.operations["test_r18"]
    assert op.attempts["attempt1"].last_result_status in ("completed", "partial")
    if op.status == "in_doubt":
        assert "could not be stored" in [e for e in store.read("traj")][-1].payload.outcome["error"]
    assert b"abcdefgh" not in b"".join(e.canonical for e in store.read("traj"))


def test_a_gate_given_a_record_folded_from_a_lagging_replica_appends_nothing():
    """Fault: recovery folds a replica one event behind the authoritative log (the last event, a
    ToolIntent, has not arrived) and hands that record to a dispatch gate on the real log.
    Invariant: the gate never logs a second intent for an attempt the log already holds (which
    would make the log unfoldable). Goal: StaleRecordError, log unchanged and still folding."""
    from kernel_lib.errors import StaleRecordError
    from kernel_lib.log import MemoryStore, TrajectoryLog
    from kernel_lib.ownership.leases import ReplicaView
    from kernel_lib.core.record import fold, initial_record
    from tests.helpers import intent, task

    store = MemoryStore()
    log = TrajectoryLog(store, "t", must_survive="none")
    log.append(task())
    log.append(intent())
    lagging = fold(initial_record("t"), ReplicaView(store, lag_events=1).read("t"))
    gate = DispatchGate(log, AdmissionPolicy({"g": {"run_tests"}}), record=lagging)
    with pytest.raises(StaleRecordError, match="lagging replica"):
        gate.change_control("PAUSED", issuer="ops", request_id="r1")
    assert store.head("t") == 2
    fold(initial_record("t"), store.read("t"))
