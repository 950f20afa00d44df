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
import threading

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from hypothesis import given, settings
from hypothesis import strategies as st

import kernel_lib.core.record as record_module
from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate, ModelCall, ModelReply, ToolProposal, ToolReply
from kernel_lib.errors import (ConfigError, FoldError, InboxConflictError, InboxError, InboxRecordError,
                               StaleOwnerError)
from kernel_lib.core.events import BudgetSettled, ToolResult
from kernel_lib.gate.inbox import ResultInbox
from kernel_lib.errors import EvidenceSignatureError
from kernel_lib.live.executor import signing_bytes
from kernel_lib.log import FailureDomain, MemoryStore, TrajectoryLog
from kernel_lib.core.record import fold, initial_record
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


# --- ingestion never poisons the log ------------------------------------------------------------


def _refused(report, op, att):
    out = report.by_key()[(op, att)]
    assert out.action == "refused" and out.reason, out
    return out


def test_record_naming_a_model_invocation_is_refused_and_the_log_still_folds(inbox):
    """Fault: a validly signed record whose operation_id is a model invocation of this trajectory.
    Invariant: an append never makes the log unfoldable, so it is refused and nothing is appended."""
    store = crashed_worker()
    gate = DispatchGate(TrajectoryLog(store, TRAJ, must_survive=FailureDomain.NONE, owner_epoch=0),
                        AdmissionPolicy({"g": {"run_tests", "m"}}))
    gate.run_model(ModelCall("inv_1", "m", "prompt", "g", 0.1),
                   lambda ctx: ModelReply(status="partial", reply="h", charged_usd=0.01))
    inbox.deposit(signed(op="inv_1", attempt="inv_1"), trajectory_id=TRAJ)
    head = store.head(TRAJ)
    out = _refused(inbox.ingest(new_owner(store)), "inv_1", "inv_1")
    assert "model call" in out.reason
    assert store.head(TRAJ) == head
    rec = fold(initial_record(TRAJ), store.read(TRAJ))   # still folds
    assert rec.operations["inv_1"].kind == "model"
    assert len(inbox.entries(TRAJ)) == 1                 # the entry is kept


def test_record_for_an_undispatched_attempt_or_unknown_operation_is_refused(inbox):
    """Only an attempt whose ToolIntent is in the log can be settled from the inbox: a record for
    attempt9 (never dispatched) or for an operation never proposed is refused, stays stored, and
    establishes nothing; the in-doubt attempt1 stays in doubt."""
    store = crashed_worker()
    inbox.deposit(signed(attempt="attempt9"), trajectory_id=TRAJ)
    inbox.deposit(signed(op="never_proposed"), trajectory_id=TRAJ)
    head = store.head(TRAJ)
    report = inbox.ingest(new_owner(store))
    assert "attempt9" in _refused(report, "test_r18", "attempt9").reason
    assert "never proposed" in _refused(report, "never_proposed", "attempt1").reason
    assert store.head(TRAJ) == head
    rec = fold(initial_record(TRAJ), store.read(TRAJ))
    assert rec.operations["test_r18"].status == "in_doubt" and "never_proposed" not in rec.operations
    assert rec.attempts_in_doubt() == [("test_r18", "attempt1")]
    assert len(inbox.entries(TRAJ)) == 2


def test_anything_the_reducer_would_refuse_is_refused_before_it_is_appended(inbox, monkeypatch):
    """The events are folded onto a copy of the owner's record before the append: whatever the
    reducer refuses (here: a reducer that refuses ToolResults from the inbox) is refused with
    nothing appended."""
    store = crashed_worker()
    inbox.deposit(signed(), trajectory_id=TRAJ)
    log = new_owner(store)
    head = store.head(TRAJ)
    original = record_module._HANDLERS[ToolResult]

    def refuse(rec, ev, p):
        if p.source == "inbox":
            raise FoldError(f"event {ev.event_id}: refused by the test reducer")
        original(rec, ev, p)

    monkeypatch.setitem(record_module._HANDLERS, ToolResult, refuse)
    out = _refused(inbox.ingest(log), "test_r18", "attempt1")
    assert "refused by the test reducer" in out.reason and "nothing was appended" in out.reason
    assert store.head(TRAJ) == head == log.head
    monkeypatch.undo()
    assert inbox.ingest(log).by_key()[("test_r18", "attempt1")].action == "established"   # retried later


def test_a_record_not_at_the_log_head_is_refused_with_a_fold_error(inbox):
    """``record`` must be the owner's fold of the log: a stale one would validate appends against
    the wrong state, so ingestion refuses with a typed error and appends nothing."""
    store = crashed_worker()
    inbox.deposit(signed(), trajectory_id=TRAJ)
    log = new_owner(store)
    stale = fold(initial_record(TRAJ), list(store.read(TRAJ))[:-1])
    with pytest.raises(FoldError):
        inbox.ingest(log, stale)
    assert fold(initial_record(TRAJ), store.read(TRAJ)).in_doubt() == ["test_r18"]


def test_a_record_the_event_schema_refuses_is_refused_not_raised(inbox):
    """A signed outcome that cannot be logged (it holds a credential) is refused, nothing appended."""
    store = crashed_worker()
    inbox.deposit(signed(outcome={"password": "hunter2-hunter2"}), trajectory_id=TRAJ)
    head = store.head(TRAJ)
    _refused(inbox.ingest(new_owner(store)), "test_r18", "attempt1")
    assert store.head(TRAJ) == head


def test_unreadable_stored_json_is_refused_and_the_other_entries_still_ingest(inbox):
    store = crashed_worker(ops=("test_r18", "op_b"))
    inbox.deposit(signed(), trajectory_id=TRAJ)
    inbox.deposit(signed(op="op_b"), trajectory_id=TRAJ)
    inbox._db.execute("UPDATE completions SET record_json = '{not json' WHERE operation_id = 'op_b'")
    report = inbox.ingest(new_owner(store)).by_key()
    assert report[("op_b", "attempt1")].action == "refused"
    assert report[("test_r18", "attempt1")].action == "established"


# --- typed errors on bad input --------------------------------------------------------------------


def test_non_finite_or_invalid_usage_is_a_typed_refusal_and_nothing_is_stored(inbox):
    """NaN cannot be canonicalised (RFC 8785), so the signature cannot even be checked: that is an
    InboxRecordError, not a raw FloatDomainError. Negative or non-numeric usage is refused too."""
    nan = {**signed(), "charged_usd": float("nan")}
    huge = {**signed(), "outcome": {"n": 2**70}}
    for bad in (nan, {**signed(), "charged_usd": float("inf")}, huge):
        with pytest.raises(InboxRecordError, match="canonical"):
            inbox.deposit(bad, trajectory_id=TRAJ)
    for charged in (-0.1, "0.5", True):
        with pytest.raises(InboxRecordError, match="charged_usd"):
            inbox.deposit(signed(charged=charged), trajectory_id=TRAJ)
    assert inbox.entries(TRAJ) == []


def test_bad_endpoint_keys_are_a_config_error(tmp_path):
    garbage = tmp_path / "garbage.pub"
    garbage.write_text("not a key\n")
    for keys in ({"executor-r18": tmp_path / "missing.pub"}, {"executor-r18": "zz"}, {"executor-r18": None},
                 {"executor-r18": 5}, {"executor-r18": garbage}, {"executor-r18": tmp_path}, {"": PUB_HEX},
                 {7: PUB_HEX}, [("executor-r18", PUB_HEX)], None):
        with pytest.raises(ConfigError):
            ResultInbox(tmp_path / "inbox.sqlite", keys)
    key_file = tmp_path / "good.pub"
    key_file.write_text(PUB_HEX + "\n")
    with ResultInbox(tmp_path / "inbox.sqlite", {"executor-r18": key_file}) as box:
        assert box.deposit(signed(), trajectory_id=TRAJ).status == "completed"


def test_an_unusable_inbox_file_is_an_inbox_error_and_nothing_is_overwritten(tmp_path):
    (tmp_path / "adir").mkdir()
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"this is not sqlite" * 100)
    import sqlite3
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE completions (x INTEGER)")
    keys = {"executor-r18": PUB_HEX}
    for path in (tmp_path / "adir", tmp_path / "no" / "inbox.sqlite", garbage, other):
        with pytest.raises(InboxError):
            ResultInbox(path, keys)
    assert garbage.read_bytes() == b"this is not sqlite" * 100
    with pytest.raises(InboxError):
        ResultInbox(tmp_path / "absent.sqlite", keys, create=False)
    assert not (tmp_path / "absent.sqlite").exists()
    with pytest.raises(ConfigError):
        ResultInbox(None, keys)


# --- one inbox shared by threads ------------------------------------------------------------------


def test_one_inbox_shared_by_threads_stores_every_deposit(tmp_path):
    """The connection is opened with check_same_thread=False, so every use of it is under a lock:
    concurrent deposits (and reads) from several threads all land, with no error."""
    records = [signed(op=f"op{i}") for i in range(240)]
    errors: list[BaseException] = []
    with ResultInbox(tmp_path / "inbox.sqlite", {"executor-r18": PUB_HEX}) as box:
        barrier = threading.Barrier(6)

        def run(chunk):
            barrier.wait()
            for r in chunk:
                try:
                    box.deposit(r, trajectory_id=TRAJ)
                    box.deposit(r, trajectory_id=TRAJ)   # a repeat is the same entry
                    box.entries(TRAJ, r["operation_id"])
                except BaseException as exc:   # noqa: BLE001 - collected and asserted below
                    errors.append(exc)

        threads = [threading.Thread(target=run, args=(records[i::6],)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        stored = box.entries(TRAJ)
        assert len(stored) == len(records)
        assert {e.operation_id for e in stored} == {f"op{i}" for i in range(240)}
