"""The durable result inbox (§11.5.3): signed completion records outlive the worker that asked.

Fault model: the worker dies after its intent was logged and the request left; the endpoint keeps
running and later delivers a signed completion record. Records may be forged, delivered twice,
contradicted, partial, still pending, or arrive in any order.
Invariant: only an authenticated, complete final record settles an operation; a stored record is
never overwritten; usage is settled once, and never beyond what was verified.
Goal: the next owner settles the in-doubt operation from the inbox without re-dispatching it.
"""

from __future__ import annotations

import hashlib
import itertools

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib.dispatch import AdmissionPolicy, DispatchGate, ToolProposal, ToolReply
from kernel_lib.errors import InboxConflictError, InboxRecordError, StaleOwnerError
from kernel_lib.events import BudgetSettled, ToolResult
from kernel_lib.inbox import ResultInbox
from kernel_lib.live.errors import EvidenceSignatureError
from kernel_lib.live.executor import signing_bytes
from kernel_lib.log import FailureDomain, MemoryStore, TrajectoryLog
from kernel_lib.record import fold, initial_record
from tests.helpers import task

TRAJ = "traj-inbox"
KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
OTHER_KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33)))
PUB_HEX = KEY.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()


def signed(op="test_r18", attempt="attempt1", status="completed", charged=0.8, key=KEY, **extra):
    """A completion record shaped like the live executor's, signed with ``key``."""
    rec = {"executor_id": "executor-r18", "operation_id": op, "attempt_id": attempt,
           "job_handle": "job_tests_18", "status": status, "outcome": {"passed": 12, "failed": 0},
           "charged_usd": charged, "public_key_sha256": hashlib.sha256(bytes.fromhex(PUB_HEX)).hexdigest(), **extra}
    if charged is None:
        del rec["charged_usd"]
    rec["signature"] = key.sign(signing_bytes(rec)).hex()
    return rec


def crashed_worker(ops=("test_r18",), bound=1.0):
    """A worker (owner_epoch 0) admits and sends each op, gets only ``accepted`` back, then dies."""
    store = MemoryStore()
    log = TrajectoryLog(store, TRAJ, must_survive=FailureDomain.NONE, owner_epoch=0)
    gate = DispatchGate(log, AdmissionPolicy({"g": {"run_tests"}}))
    gate.start(task(ceiling=10.0))
    for op in ops:
        gate.run_tool(ToolProposal(op, "attempt1", "run_tests", {"snapshot": "ws_r18"}, "g", bound),
                      lambda intent: ToolReply(status="accepted", job_handle="job_tests_18"))
    return store


def new_owner(store, epoch=1):
    store.install_fence(TRAJ, epoch)
    return TrajectoryLog(store, TRAJ, must_survive=FailureDomain.NONE, owner_epoch=epoch)


@pytest.fixture
def inbox(tmp_path):
    with ResultInbox(tmp_path / "inbox.sqlite", {"executor-r18": PUB_HEX}) as box:
        yield box


def test_worker_dies_and_the_new_owner_settles_from_the_inbox(tmp_path):
    """Goal: the completion lands in the inbox file while no worker runs; a new owner (epoch 1),
    opening the file afresh, ingests it: established outcome, usage settled, reservation released."""
    store = crashed_worker()
    rec0 = fold(initial_record(TRAJ), store.read(TRAJ))
    assert rec0.in_doubt() == ["test_r18"]
    with ResultInbox(tmp_path / "inbox.sqlite", {"executor-r18": PUB_HEX}) as box:
        box.deposit(signed(), trajectory_id=TRAJ)   # the endpoint delivers; no worker alive
    log = new_owner(store)
    with ResultInbox(tmp_path / "inbox.sqlite", {"executor-r18": PUB_HEX}) as box:   # survives reopening
        report = box.ingest(log)
    out = report.by_key()[("test_r18", "attempt1")]
    assert out.action == "established" and out.settled_usd == pytest.approx(0.8)
    rec = fold(initial_record(TRAJ), store.read(TRAJ))
    assert rec.to_dict() == report.record.to_dict()
    op = rec.operations["test_r18"]
    assert op.status == "established" and op.outcome == {"status": "completed", "passed": 12, "failed": 0}
    assert rec.budget.actual_consumption_usd == pytest.approx(0.8)
    assert rec.budget.outstanding_reservations_usd == pytest.approx(0.0)
    tail = list(store.read(TRAJ))[-2:]
    assert [type(e.payload) for e in tail] == [ToolResult, BudgetSettled]
    assert all(e.owner_epoch == 1 for e in tail) and tail[0].payload.source == "inbox"
    assert tail[0].payload.evidence["signature_ed25519"] == signed()["signature"]
    # no second dispatch: still exactly one intent for the operation
    assert sum(e.event_type == "ToolIntent" for e in store.read(TRAJ)) == 1


def test_forged_or_altered_record_is_refused_and_nothing_is_stored(inbox):
    """Invariant: an unauthenticated record never enters the inbox, so it can never become evidence."""
    with pytest.raises(EvidenceSignatureError):
        inbox.deposit(signed(key=OTHER_KEY), trajectory_id=TRAJ)        # signed by another key
    tampered = signed()
    tampered["outcome"] = {"passed": 13, "failed": 0}                   # changed after signing
    with pytest.raises(EvidenceSignatureError):
        inbox.deposit(tampered, trajectory_id=TRAJ)
    unsigned = {k: v for k, v in signed().items() if k != "signature"}
    with pytest.raises(EvidenceSignatureError):
        inbox.deposit(unsigned, trajectory_id=TRAJ)
    with pytest.raises(InboxRecordError):
        inbox.deposit({**signed(), "executor_id": "unknown"}, trajectory_id=TRAJ)
    with pytest.raises(InboxRecordError):
        inbox.deposit(signed())                                           # no trajectory scope
    assert inbox.entries(TRAJ) == []


def test_record_edited_inside_the_inbox_file_is_not_ingested(inbox):
    """Fault: someone rewrites the stored JSON. Ingestion authenticates again and refuses it."""
    store = crashed_worker()
    inbox.deposit(signed(), trajectory_id=TRAJ)
    inbox._db.execute("UPDATE completions SET record_json = replace(record_json, '\"passed\": 12', '\"passed\": 99')")
    report = inbox.ingest(new_owner(store))
    assert report.by_key()[("test_r18", "attempt1")].action == "refused"
    assert fold(initial_record(TRAJ), store.read(TRAJ)).in_doubt() == ["test_r18"]


def test_duplicate_is_one_entry_and_a_conflicting_final_record_is_refused(inbox):
    """Idempotent: the same record twice is one entry. A different final record for the same
    (trajectory, operation, attempt) is a typed error, and the stored one is untouched."""
    first = inbox.deposit(signed(), trajectory_id=TRAJ)
    again = inbox.deposit(signed(), trajectory_id=TRAJ)
    assert again == first and len(inbox.entries(TRAJ)) == 1
    with pytest.raises(InboxConflictError):
        inbox.deposit(signed(status="failed", charged=0.9), trajectory_id=TRAJ)
    with pytest.raises(InboxConflictError):
        inbox.deposit(signed(), trajectory_id="another-trajectory")
    assert inbox.entries(TRAJ) == [first]
    assert inbox.entries("another-trajectory") == []


def test_partial_usage_settles_only_the_verified_fraction(inbox):
    """§11.5.3: a partial report settles what it verifies; the rest of the bound stays reserved
    until final usage evidence arrives, then the reservation is released and nothing is counted twice."""
    store = crashed_worker(bound=1.0)
    log = new_owner(store)
    inbox.deposit(signed(status="partial", charged=0.3, outcome=None), trajectory_id=TRAJ)
    out = inbox.ingest(log).by_key()[("test_r18", "attempt1")]
    assert out.action == "in_doubt" and out.settled_usd == pytest.approx(0.3)
    rec = fold(initial_record(TRAJ), store.read(TRAJ))
    assert rec.in_doubt() == ["test_r18"]
    assert rec.budget.actual_consumption_usd == pytest.approx(0.3)
    assert rec.budget.outstanding_reservations_usd == pytest.approx(0.7)
    assert rec.budget.available_usd == pytest.approx(10.0 - 0.3 - 0.7 - 0.5)
    assert inbox.ingest(log).by_key()[("test_r18", "attempt1")].action == "already_ingested"
    # the final record reports cumulative usage 0.8: only 0.5 more is settled, and finally
    inbox.deposit(signed(charged=0.8), trajectory_id=TRAJ)
    out = inbox.ingest(log).by_key()[("test_r18", "attempt1")]
    assert out.action == "established" and out.settled_usd == pytest.approx(0.5)
    rec = fold(initial_record(TRAJ), store.read(TRAJ))
    assert rec.budget.actual_consumption_usd == pytest.approx(0.8)
    assert rec.budget.outstanding_reservations_usd == pytest.approx(0.0)


@pytest.mark.parametrize("status", ["pending", "running", "timeout", "partial"])
def test_pending_timeout_or_partial_keeps_the_operation_in_doubt(inbox, status):
    """Receiving a message is not settlement: the reservation stays held in full when no usage is
    reported, and the operation stays in doubt."""
    store = crashed_worker()
    inbox.deposit(signed(status=status, charged=None, outcome=None), trajectory_id=TRAJ)
    out = inbox.ingest(new_owner(store)).by_key()[("test_r18", "attempt1")]
    assert out.action == "in_doubt"
    rec = fold(initial_record(TRAJ), store.read(TRAJ))
    assert rec.in_doubt() == ["test_r18"] and rec.operations["test_r18"].outcome is None
    assert rec.budget.outstanding_reservations_usd == pytest.approx(1.0)
    assert rec.budget.actual_consumption_usd == 0.0


def test_completed_record_with_incomplete_observation_stays_in_doubt(inbox):
    store = crashed_worker()
    inbox.deposit(signed(observation_complete=False), trajectory_id=TRAJ)
    inbox.ingest(new_owner(store))
    rec = fold(initial_record(TRAJ), store.read(TRAJ))
    assert rec.in_doubt() == ["test_r18"]
    assert rec.budget.outstanding_reservations_usd == pytest.approx(0.2)   # 0.8 verified, 0.2 held


def test_fenced_out_old_owner_cannot_ingest(inbox):
    """Only the current owner writes evidence: the old owner's handle is refused by the log fence."""
    store = crashed_worker()
    old = TrajectoryLog(store, TRAJ, must_survive=FailureDomain.NONE, owner_epoch=0)
    new_owner(store)
    inbox.deposit(signed(), trajectory_id=TRAJ)
    with pytest.raises(StaleOwnerError):
        inbox.ingest(old)
    assert fold(initial_record(TRAJ), store.read(TRAJ)).in_doubt() == ["test_r18"]


def _settlement_view(rec):
    b = rec.budget
    return ({k: (op.status, op.outcome, {a: x.established for a, x in op.attempts.items()})
             for k, op in rec.operations.items()},
            {k: (round(r.settled_usd, 9), r.released) for k, r in b.reservations.items()},
            round(b.actual_consumption_usd, 9), round(b.outstanding_reservations_usd, 9))


RECORDS = [signed("op_a", status="running", charged=None, outcome=None),
           signed("op_a", status="partial", charged=0.2, outcome=None),
           signed("op_a", status="completed", charged=0.6),
           signed("op_b", status="partial", charged=0.4, outcome=None),
           signed("op_b", status="timeout", charged=0.1, outcome=None),
           signed("op_c", status="failed", charged=0.3, outcome={"error": "exit 1"})]


@settings(max_examples=40, deadline=None)
@given(plan=st.lists(st.one_of(st.sampled_from(range(len(RECORDS))), st.just("ingest")), max_size=14),
       order=st.permutations(range(len(RECORDS))))
def test_any_order_any_repetition_gives_the_same_record(tmp_path_factory, plan, order):
    """Property: deposits and ingestions interleaved in any order, any number of times, end (after
    every record is in and one last ingestion) with the same operation table and budget; and
    depositing everything first gives byte-for-byte the same log whatever the order."""
    def run(steps):
        store = crashed_worker(ops=("op_a", "op_b", "op_c"))
        log = new_owner(store)
        with ResultInbox(":memory:", {"executor-r18": PUB_HEX}) as box:
            for s in steps:
                if s == "ingest":
                    box.ingest(log)
                else:
                    box.deposit(RECORDS[s], trajectory_id=TRAJ)
            for i in range(len(RECORDS)):
                box.deposit(RECORDS[i], trajectory_id=TRAJ)
            box.ingest(log)
            box.ingest(log)
        return store, fold(initial_record(TRAJ), store.read(TRAJ))

    _, reference = run([])
    _, got = run(plan)
    assert _settlement_view(got) == _settlement_view(reference)
    assert reference.operations["op_a"].status == "established"
    assert reference.operations["op_b"].status == "in_doubt"
    assert reference.operations["op_c"].status == "established"
    assert reference.budget.reservations["res-op_b/attempt1"].settled_usd == pytest.approx(0.4)
    store_a, a = run(list(order))
    store_b, b = run(list(itertools.chain(reversed(list(order)), order)))
    assert a.to_dict() == b.to_dict()
    assert [e.canonical for e in store_a.read(TRAJ)] == [e.canonical for e in store_b.read(TRAJ)]
