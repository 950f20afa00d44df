"""The scripted endpoints of the refund example (kernel_lib.sim.endpoints, §11.5.3, §11.9).

Fault model: the worker dies after its request left. Invariants: the endpoint acted exactly once and the
log ends at the durable intent; an at_most_once endpoint pays every request it gets, so only the gate's
refusal keeps it from paying twice; an idempotency_key endpoint answers a repeated key without paying
again; a signed completion verifies against the signer's key and nowhere else, and settles the operation
when ingested from the inbox.
"""

from __future__ import annotations

import dataclasses

import pytest

from kernel_lib.core.events import TaskStarted
from kernel_lib.core.record import fold, initial_record
from kernel_lib.errors import AdmissionDenied, ConfigError, EvidenceSignatureError
from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate, ToolProposal
from kernel_lib.gate.evidence import verify_completion
from kernel_lib.gate.inbox import ResultInbox
from kernel_lib.log import FailureDomain, TrajectoryLog
from kernel_lib.sim.endpoints import CompletionSigner, KeyedPaymentService, PaymentService, dispatch_then_crash

TRAJ = "traj_refund"
POLICY = AdmissionPolicy({"g": {"issue_refund"}})
TASK = TaskStarted(task_id="refund", requester="support", objective="refund order 1142", grant_ids=["g"],
                   budget_ceiling_usd=5.0, finalization_reserve_usd=0.5)
REFUND = ToolProposal("refund_1142", "attempt1", "issue_refund", {"order": 1142, "amount_usd": 40}, "g", 0.2,
                      repeat_contract="at_most_once")


def _retry(store, service, contract):
    gate = DispatchGate(TrajectoryLog(store, TRAJ, must_survive=FailureDomain.NONE,
                                      owner_epoch=store.claim_epoch(TRAJ)), POLICY)
    gate.run_tool(dataclasses.replace(REFUND, attempt_id="attempt2", repeat_contract=contract), service.handle)
    return gate


def test_the_first_worker_dies_after_the_request_left():
    service = PaymentService()
    store = dispatch_then_crash(TRAJ, POLICY, TASK, REFUND, service.handle)
    assert [e.event_type for e in store.read(TRAJ)][-1] == "ToolIntent"
    assert service.paid == [("refund_1142/attempt1", 40)] and service.inquire("refund_1142") == ["refund_1142/attempt1"]
    assert fold(initial_record(TRAJ), store.read(TRAJ)).in_doubt() == ["refund_1142"]


def test_at_most_once_endpoint_is_protected_only_by_the_gates_refusal():
    service = PaymentService()
    store = dispatch_then_crash(TRAJ, POLICY, TASK, REFUND, service.handle)
    with pytest.raises(AdmissionDenied):
        _retry(store, service, "at_most_once")
    assert len(service.paid) == 1
    service.handle(dataclasses.replace(REFUND, attempt_id="attempt2"))       # a naive re-send pays again
    assert len(service.paid) == 2 and PaymentService.repeat_contract == "at_most_once"


def test_idempotency_key_endpoint_answers_a_repeat_without_paying_again():
    service = KeyedPaymentService()
    store = dispatch_then_crash(TRAJ, POLICY, TASK, dataclasses.replace(REFUND, repeat_contract="idempotency_key"),
                                service.handle)
    gate = _retry(store, service, "idempotency_key")
    op = gate.record.operations["refund_1142"]
    assert op.status == "established" and op.outcome["duplicate"] is True
    assert op.outcome["paid_for"] == "refund_1142/attempt1" and len(service.paid) == 1


def test_a_request_without_an_amount_is_refused():
    with pytest.raises(ConfigError):
        PaymentService().handle(dataclasses.replace(REFUND, arguments={"order": 1}))


def test_a_signed_completion_verifies_and_settles_the_operation_from_the_inbox():
    signer = CompletionSigner("payments")
    service = PaymentService()
    store = dispatch_then_crash(TRAJ, POLICY, TASK, REFUND, service.handle)
    record = signer.sign(TRAJ, "refund_1142", "attempt1", {"refunded_usd": 40}, 0.05)
    assert verify_completion(record, signer.public_key_hex) is record
    with pytest.raises(EvidenceSignatureError):
        verify_completion(record, CompletionSigner("payments", bytes(32)).public_key_hex)
    with pytest.raises(EvidenceSignatureError):
        verify_completion({**record, "charged_usd": 0.0}, signer.public_key_hex)
    epoch = store.claim_epoch(TRAJ)
    with ResultInbox(":memory:", {"payments": signer.public_key_hex}) as inbox:
        inbox.deposit(record, trajectory_id=TRAJ)
        report = inbox.ingest(TrajectoryLog(store, TRAJ, must_survive=FailureDomain.NONE, owner_epoch=epoch))
    assert [o.action for o in report.outcomes] == ["established"]
    assert fold(initial_record(TRAJ), store.read(TRAJ)).operations["refund_1142"].status == "established"


def test_a_signer_needs_a_32_byte_key():
    with pytest.raises(ConfigError):
        CompletionSigner("payments", b"short")
