"""The pivot crossing PREPARING -> COMMITTED, the pre-pivot verification gate, escrow and the
atomic outbox (Failure Recovery, "The pivot action boundary", Example 0.1), on the simulated twins.

Fault model: a crash between the crossing and the pivot's dispatch; an unwind asked for after the
crossing; a model claiming success while a deterministic check fails; a crash after the outbox's
send. Invariant: the crossing is durable before the pivot's intent; after it no compensator runs;
a failed check refuses the crossing and the saga can still unwind. Effects are counted at the
services (their ``applied`` counts), never by our log.
"""

from __future__ import annotations

import pytest

from kernel_lib.core.events import Event, PivotCrossed, decode
from kernel_lib.errors import (
    OutboxError, PivotCrossedError, PivotRefusedError, SagaPanicError, SagaTransitionError, VerificationError,
)
from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate
from kernel_lib.log import MemoryStore, TrajectoryLog
from kernel_lib.recovery.runner import RetryPolicy, SagaRunner
from kernel_lib.recovery.saga import SAGA_TRANSITIONS, decide_crossing, fold_saga
from kernel_lib.recovery.verification import (
    CheckResult, DigestCheck, ModelClaim, StateCheck, TestRunCheck, file_sha256, run_gate,
)
from kernel_lib.sim.deployment import deployment_registry
from kernel_lib.sim.saga_sweep import GRANT_ID, SAGA_ID, start_task
from kernel_lib.sim.services import TwinFleet

TID = "traj-pivot"
CLAIM = ModelClaim("All validation passed; activating the route is safe.", claims_success=True)


class _Crash(BaseException):
    """The worker dies (a BaseException: nothing in the runner catches it)."""


def make(fleet=None, store=None, *, require=False, crash_after=None, incidents=None):
    fleet = fleet or TwinFleet()
    store = store if store is not None else MemoryStore()
    reg = deployment_registry()
    seen = []

    def hook(name, ev):
        seen.append((name, ev))
        if crash_after is not None and crash_after(name, ev):
            raise _Crash(name)

    gate = DispatchGate(TrajectoryLog(store, TID, must_survive="none"), AdmissionPolicy({GRANT_ID: set(reg.names())}),
                        coalesce_admission=True, on_position=hook)
    if gate.record.task is None:
        start_task(gate, TID)
    runner = SagaRunner(gate, reg, fleet.client(TID), saga_id=SAGA_ID, grant_id=GRANT_ID,
                        retry=RetryPolicy(max_attempts=4), sleep=fleet.clock.advance, require_verification=require,
                        on_incident=(incidents.append if incidents is not None else (lambda i: None)))
    return fleet, store, runner


def applied(fleet, action):
    return fleet.twin_of(action).logic.state["applied"].get(action, 0)


def received(fleet, action):
    return fleet.twin_of(action).logic.state["received"].get(action, 0)


def passing():
    return run_gate([StateCheck("always", lambda: 1, lambda v: v == 1, "1")], CLAIM)


# --- the crossing is a durable state change --------------------------------------------------------

def test_the_crossing_is_durable_before_the_pivots_intent_and_retires_sigma():
    fleet, store, runner = make()
    runner.step("provision_sandbox", {"image": "x"})
    runner.step("reserve_ip", {"region": "r"})
    assert runner.saga.phase == "PREPARING" and len(runner.saga.stack) == 2
    runner.verify_pivot(passing())
    durable_at = {}
    inner = runner.gate.on_position

    def watch(name, ev):
        if ev is not None:
            durable_at.setdefault((ev.event_type, getattr(ev.payload, "operation_id", None)),
                                  runner.gate.log.durable_head)
        inner(name, ev)

    runner.gate.on_position = watch
    runner.step("activate_route", {"ip_id": "ip-0001"})
    events = list(store.read(TID))
    crossing = next(ev for ev in events if ev.event_type == "PivotCrossed")
    intent = next(ev for ev in events if ev.event_type == "ToolIntent" and ev.payload.operation_id == "deploy.T3")
    assert crossing.sequence_number < intent.sequence_number
    assert durable_at[("ToolIntent", "deploy.T3")] >= crossing.sequence_number   # a barrier covered the crossing
    assert crossing.payload.retired_compensators == ["deploy.T2", "deploy.T1"]
    assert crossing.payload.verified_sequence is not None
    saga = fold_saga(events, SAGA_ID)
    assert (saga.state, saga.phase) == ("COMMITTED", "COMMITTED")
    assert saga.stack == [] and [s.step_id for s in saga.retired_stack] == ["deploy.T2", "deploy.T1"]
    assert applied(fleet, "activate_route") == 1
    # COMPENSATING: only when the crossing's own pivot step failed without effect (saga.pivot_refused)
    assert SAGA_TRANSITIONS["COMMITTED"] == {"COMPLETED", "HALTED", "PANIC", "COMPENSATING"}


def test_unwind_after_the_crossing_is_refused_and_escalated_no_compensator_runs():
    incidents = []
    fleet, store, runner = make(incidents=incidents)
    runner.step("provision_sandbox", {"image": "x"})
    runner.step("activate_route", {"ip_id": "ip"})
    with pytest.raises(PivotCrossedError) as e:
        runner.unwind("giving up")
    assert isinstance(e.value, SagaPanicError) and e.value.pivot_step_id == "deploy.T2"
    assert applied(fleet, "teardown_sandbox") == 0
    assert incidents[0]["failure_mode"] == "POST_PIVOT_STALLED"
    assert sorted(r["kind"] for r in incidents[0]["residue"]) == ["route", "sandbox"]   # read from the services
    assert runner.gate.record.control_state == "FROZEN"


def test_a_failure_after_the_crossing_is_halted_not_compensated():
    fleet, store, runner = make()
    runner.step("provision_sandbox", {"image": "x"})
    runner.step("activate_route", {"ip_id": "ip"})
    fleet.twin_of("create_branch").logic.inject("create_branch", "conflict")
    with pytest.raises(Exception):
        runner.step("create_branch", {"repo": "catalog"})
    assert runner.saga.steps["deploy.T3"].state == "HALTED"
    with pytest.raises(PivotCrossedError):
        runner.unwind("post pivot")
    assert applied(fleet, "teardown_sandbox") == 0


@pytest.mark.parametrize("cut", ["after:PivotCrossed", "after:SagaStepChanged"])
def test_a_crash_between_the_crossing_and_the_dispatch_resumes_forward(cut):
    """Fault: the worker dies right after the crossing (or after the pivot's PENDING), before the
    pivot is sent. Goal: the next owner sees COMMITTED, does not unwind, and sends the pivot once."""
    fleet, store, _ = make()
    state = {"crossed": False}

    def crash(name, ev):
        if ev is not None and ev.event_type == "PivotCrossed":
            state["crossed"] = True
        return state["crossed"] and name == cut

    _, _, runner = make(fleet, store, crash_after=crash)
    runner.step("provision_sandbox", {"image": "x"})
    with pytest.raises(_Crash):
        runner.step("activate_route", {"ip_id": "ip"})
    assert received(fleet, "activate_route") == 0
    # the next owner folds the log: the crossing is durable
    _, _, again = make(fleet, store)
    assert again.saga.phase == "COMMITTED" and again.saga.stack == []
    assert decide_crossing(again.saga, "deploy.T2", repeat_safe=False, require_verification=True).kind == "crossed"
    again.step("provision_sandbox", {"image": "x"})       # answered from the log
    out = again.step("activate_route", {"ip_id": "ip"})   # forward: the pivot is sent now
    assert out["route_id"].startswith("route-")
    assert applied(fleet, "activate_route") == 1 and applied(fleet, "provision_sandbox") == 1
    assert sum(ev.event_type == "PivotCrossed" for ev in store.read(TID)) == 1
    again.complete()
    assert fold_saga(store.read(TID), SAGA_ID).state == "COMPLETED"


def test_the_next_owner_after_the_crossing_may_not_unwind():
    fleet, store, _ = make()
    _, _, runner = make(fleet, store, crash_after=lambda name, ev: name == "after:PivotCrossed")
    runner.step("provision_sandbox", {"image": "x"})
    with pytest.raises(_Crash):
        runner.step("activate_route", {"ip_id": "ip"})
    _, _, again = make(fleet, store)
    with pytest.raises(PivotCrossedError):
        again.unwind("the next owner would rather roll back")
    assert applied(fleet, "teardown_sandbox") == 0 and received(fleet, "activate_route") == 0


# --- the pre-pivot verification gate ---------------------------------------------------------------

def test_the_gate_refuses_a_failed_check_whatever_the_model_claims(tmp_path):
    """A model stand-in claims success; the artifact on disk does not match the service's record
    and a test fails. The gate refuses, names the checks, records the claim with weight 0; the
    crossing never happens and the saga still unwinds."""
    fleet, store, runner = make(require=True)
    out = runner.step("provision_sandbox", {"image": "x", "image_sha256": "0" * 64})
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b   # the model's 'fix'\n")
    (repo / "test_calc.py").write_text("from calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    (repo / "artifact.bin").write_bytes(b"built")
    sandbox = fleet.twin_of("provision_sandbox").logic.state["resources"][out["sandbox_id"]]
    verdict = run_gate([
        TestRunCheck("tests_pass", str(repo)),
        DigestCheck("artifact_digest", str(repo / "artifact.bin"), lambda: sandbox["arguments"]["image_sha256"],
                    source="sandbox service"),
        StateCheck("sandbox_active", lambda: sandbox["state"], lambda s: s == "active", "active"),
    ], CLAIM)
    assert CLAIM.claims_success and not verdict.passed and verdict.claim_contradicted
    assert verdict.failed_checks == ("tests_pass", "artifact_digest")
    tests = verdict.checks[0].evidence
    assert tests["returncode"] == 1 and tests["failed"] == 1 and "failed" in tests["summary"]
    assert verdict.checks[1].evidence["actual_sha256"] == file_sha256(repo / "artifact.bin")
    with pytest.raises(PivotRefusedError) as e:
        runner.verify_pivot(verdict)
    assert e.value.failed_checks == ["tests_pass", "artifact_digest"]
    rec = fold_saga(store.read(TID), SAGA_ID).verifications[-1]
    assert rec["passed"] is False and rec["model_claim"]["weight"] == 0 and rec["model_claim"]["claims_success"]
    with pytest.raises(PivotRefusedError, match="failed tests_pass, artifact_digest"):
        runner.step("activate_route", {"ip_id": "ip"})
    assert received(fleet, "activate_route") == 0
    assert not any(ev.event_type == "PivotCrossed" for ev in store.read(TID))
    assert runner.unwind("the gate refused") == "ABORT_CONSISTENT"
    assert applied(fleet, "teardown_sandbox") == 1


def test_a_required_gate_refuses_a_crossing_without_a_verdict_or_with_a_stale_one():
    fleet, store, runner = make(require=True)
    runner.step("provision_sandbox", {"image": "x"})
    with pytest.raises(PivotRefusedError, match="no verdict"):
        runner.step("activate_route", {"ip_id": "ip"})
    runner.verify_pivot(passing(), step_id="deploy.T2")
    # the refused step did not consume its position: the same step id is verified, then crossed
    runner.step("activate_route", {"ip_id": "ip"})
    assert fold_saga(store.read(TID), SAGA_ID).crossing["pivot_step_id"] == "deploy.T2"


def test_a_check_that_raises_fails_and_an_empty_gate_is_an_error():
    def boom():
        raise OSError("service unreachable")
    v = run_gate([StateCheck("reads", boom, lambda v: True)], CLAIM)
    assert not v.passed and "OSError" in v.checks[0].evidence["error"]
    with pytest.raises(VerificationError):
        run_gate([], CLAIM)
    with pytest.raises(VerificationError):
        run_gate([StateCheck("a", int, bool), StateCheck("a", int, bool)])
    assert CheckResult("x", True).to_json()["passed"] is True


# --- escrow and the atomic outbox ------------------------------------------------------------------

MAIL = {"to": "registry@compliance.example", "subject": "audit", "body": "activated"}


def test_staged_payloads_are_dropped_by_the_unwind_before_the_pivot():
    fleet, store, runner = make()
    runner.step("provision_sandbox", {"image": "x"})
    entry = runner.stage("webhook", "send_email", MAIL)
    assert entry.state == "STAGED" and received(fleet, "send_email") == 0
    assert runner.stage("webhook", "send_email", MAIL).state == "STAGED"   # a re-run: a no-op
    with pytest.raises(OutboxError):
        runner.stage("webhook", "send_email", {**MAIL, "body": "other"})
    assert runner.unwind("migration failed") == "ABORT_CONSISTENT"
    assert fold_saga(store.read(TID), SAGA_ID).outbox["webhook"].state == "DROPPED"
    assert received(fleet, "send_email") == 0 and applied(fleet, "teardown_sandbox") == 1


def test_the_outbox_flushes_with_the_pivot_and_a_crash_after_the_send_delivers_one_email():
    fleet, store, _ = make()
    _, _, runner = make(fleet, store, crash_after=lambda name, ev: name == "after:dispatch"
                        and received(fleet, "send_email") == 1)
    runner.step("provision_sandbox", {"image": "x"})
    runner.stage("webhook", "send_email", MAIL)
    with pytest.raises(OutboxError):
        runner.flush_outbox()                       # not before the pivot
    runner.step("activate_route", {"ip_id": "ip"})
    crossing = fold_saga(store.read(TID), SAGA_ID).crossing
    assert crossing["outbox"] == ["webhook"]
    with pytest.raises(OutboxError):
        runner.complete()                           # the outbox goes with the pivot
    with pytest.raises(_Crash):
        runner.flush_outbox()                       # the relay applied it; the answer is lost with the worker
    _, _, again = make(fleet, store)
    assert again.saga.outbox["webhook"].state == "STAGED"
    again.step("provision_sandbox", {"image": "x"})
    again.step("activate_route", {"ip_id": "ip"})
    out = again.flush_outbox()
    assert out["webhook"]["message_id"].startswith("message-")
    again.complete()
    assert applied(fleet, "send_email") == 1 and received(fleet, "send_email") <= 2
    assert applied(fleet, "activate_route") == 1
    assert fold_saga(store.read(TID), SAGA_ID).outbox["webhook"].state == "FLUSHED"


def test_staging_after_the_crossing_is_refused():
    fleet, store, runner = make()
    runner.step("activate_route", {"ip_id": "ip"})
    with pytest.raises(OutboxError, match="preparation phase"):
        runner.stage("late", "send_email", MAIL)


# --- old logs ----------------------------------------------------------------------------------------

def test_a_log_without_crossing_records_folds_as_before_and_new_records_roundtrip():
    fleet, store, runner = make()
    runner.step("provision_sandbox", {"image": "x"})
    runner.step("activate_route", {"ip_id": "ip"})
    events = list(store.read(TID))
    old = [ev for ev in events if ev.event_type != "PivotCrossed"]   # what the runner wrote before this change
    saga = fold_saga(old, SAGA_ID)
    assert saga.state == "RUNNING" and saga.crossing is None
    assert [s.step_id for s in saga.stack] == ["deploy.T1"]          # Σ as it was folded before
    assert saga.pivot_committed.step_id == "deploy.T2" and saga.phase == "COMMITTED"
    crossing = next(ev for ev in events if ev.event_type == "PivotCrossed")
    assert decode(crossing.canonical) == crossing and isinstance(crossing.payload, PivotCrossed)
    # a second crossing is not a saga transition
    twice = Event.create(trajectory_id=TID, event_id="x", sequence_number=events[-1].sequence_number + 1,
                         payload=crossing.payload)
    with pytest.raises(SagaTransitionError, match="COMMITTED"):
        fold_saga(list(events) + [twice], SAGA_ID)
