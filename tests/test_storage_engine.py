"""The storage engine contract of §11.8: payloads before references, reference tracking across
trajectories, log compaction behind a durable checkpoint and declared holds, backpressure, and a
follower replica that advertises only its gap-free prefix.

Fault model: a worker dies between writing a payload and logging its reference; one trajectory
expires while another shares its workspace blobs; compaction is attempted with a lost blob, a
memory-only blob store, or an active replay hold; the store fills; a replica receives events out
of order, twice, or conflicting. Invariant: no committed event names missing bytes; no blob that
a live retention contract needs is deleted; compaction never removes state the newest durable
checkpoint does not hold; a full store never drops or overwrites; a replica never advertises past
a gap and never restamps provenance. Goal: each refusal is typed and names its reason.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib.checkpoint import Checkpointer, DirectoryBlobStore, MemoryBlobStore
import kernel_lib.checkpoint.restore as restore
from kernel_lib.errors import (BackpressureError, CompactionRefusedError, ConfigError, ConflictingDuplicateError,
                               DanglingReferenceError, PayloadAccessError, PrefixRetiredError, RetentionError,
                               StoreError, StoreReadOnlyError)
from kernel_lib.core.events import ContextBuilt, Event, Provenance
from kernel_lib.log import MemoryStore, SQLiteStore, TrajectoryLog
from kernel_lib.log.base import AckTier
from kernel_lib.ownership.leases import check_available
from kernel_lib.core.record import fold, initial_record
from kernel_lib.history.replay import time_travel
from kernel_lib.retention.pricing import RetentionPolicy, full_retention, split_lifetimes
from kernel_lib.retention import (SECONDS_PER_MONTH, BoundedStore, FollowerReplica, PayloadStore, ReferenceIndex,
                                       collect_garbage, compact, plan_compaction, track_checkpoint)
from tests.helpers import ev, intent, result, task

T0 = 1_800_000_000.0      # a fixed "now" (Unix s) for the ledger


def _index(tmp_path, name="refs.db"):
    return ReferenceIndex(tmp_path / name)


def _context_event(tid, seq, ref, invocation="inv-1"):
    return Event.create(trajectory_id=tid, event_id=f"{tid}-{seq}", sequence_number=seq,
                        payload=ContextBuilt(invocation_id=invocation, model="m", delivered_input_ref=ref,
                                             delivered_input_sha256=ref))


# --- payload before reference (§11.8.2) ---------------------------------------------------------------


def test_an_event_naming_bytes_that_are_not_durable_is_refused_and_nothing_is_appended(tmp_path):
    """Fault: the harness logs a reference before the payload write (or for another holder).
    Invariant: the log never names missing bytes. Goal: DanglingReferenceError naming the digest."""
    store, blobs, index = MemoryStore(), DirectoryBlobStore(str(tmp_path / "blobs")), _index(tmp_path)
    index.register("a", tenant="acme", policy=full_retention(12))
    payloads = PayloadStore(blobs, index)
    store.append(ev(task(), 1, traj="a"), AckTier.MEMORY)
    data = b"the exact prompt delivered to the model"
    from kernel_lib.checkpoint.blobs import sha256_hex
    digest = sha256_hex(data)
    with pytest.raises(DanglingReferenceError) as err:
        payloads.append(store, _context_event("a", 2, digest), AckTier.MEMORY)
    assert err.value.digests == (digest,) and store.head("a") == 1
    ref = payloads.put(data, trajectory_id="a", holder="a-2", artifact_class="observations", media_type="text/plain")
    assert (ref.digest, ref.length) == (digest, len(data))
    # registered for another holder: still refused
    with pytest.raises(DanglingReferenceError):
        payloads.append(store, Event.create(trajectory_id="a", event_id="other-2", sequence_number=2,
                                            payload=ContextBuilt(invocation_id="i", model="m",
                                                                 delivered_input_ref=digest,
                                                                 delivered_input_sha256=digest)), AckTier.MEMORY)
    payloads.append(store, _context_event("a", 2, digest), AckTier.MEMORY)
    assert store.head("a") == 2 and blobs.get(digest) == data


_CHILD = textwrap.dedent("""
    import sys, time
    from kernel_lib.checkpoint import DirectoryBlobStore
    from kernel_lib.core.events import ContextBuilt, Event
    from kernel_lib.log import SQLiteStore
    from kernel_lib.log.base import AckTier
    from kernel_lib.retention.pricing import full_retention
    from kernel_lib.retention import PayloadStore, ReferenceIndex
    root, pause = sys.argv[1], float(sys.argv[2])
    store = SQLiteStore.open(root + "/log.db", create=True)
    index = ReferenceIndex(root + "/refs.db")
    index.register("k", tenant="acme", policy=full_retention(12))
    payloads = PayloadStore(DirectoryBlobStore(root + "/blobs"), index)
    for seq in range(1, 10_000):
        data = (f"payload {seq} " * 2000).encode()
        ref = payloads.put(data, trajectory_id="k", holder=f"k-{seq}", artifact_class="observations")
        time.sleep(pause)
        payloads.append(store, Event.create(trajectory_id="k", event_id=f"k-{seq}", sequence_number=seq,
                        payload=ContextBuilt(invocation_id=f"i{seq}", model="m", delivered_input_ref=ref.digest,
                                             delivered_input_sha256=ref.digest)), AckTier.FDATASYNC)
        print(seq, flush=True)
""")


@pytest.mark.parametrize("kill_after_s", [0.0, 0.05, 0.3])
def test_sigkill_anywhere_leaves_no_committed_reference_to_missing_bytes(tmp_path, kill_after_s):
    """Fault: a real worker process writing payloads and their ContextBuilt events is SIGKILLed at
    an arbitrary moment. Invariant: every event in the surviving log names bytes that are in the
    blob store intact; a payload written without its event is only an extra (referenced) blob."""
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(tmp_path), "0.003"], stdout=subprocess.PIPE,
                             env=env)
    assert child.stdout.readline().strip() == b"1"       # started, one payload + event committed
    time.sleep(kill_after_s)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    store = SQLiteStore.open(tmp_path / "log.db", read_only=True)
    blobs = DirectoryBlobStore(str(tmp_path / "blobs"))
    events = list(store.read("k"))
    for e in events:
        assert blobs.has(e.payload.delivered_input_ref), f"{e.event_id} names missing bytes"
    index = ReferenceIndex(tmp_path / "refs.db")
    assert {e.event_id for e in events} <= {r.holder for r in index.references(trajectory_id="k")}
    store.close()


# --- reference tracking across trajectories (§11.8.2 footnote 9) ---------------------------------------


def test_expiring_one_trajectory_never_deletes_a_blob_another_still_needs(tmp_path):
    """Fault: trajectories a and b share a workspace base by content address; a ends with a short
    policy. Invariant: the shared blob outlives a while b needs it. Goal: collection reports it as
    kept, and deletes it once b's lifetime is over too."""
    blobs, index = DirectoryBlobStore(str(tmp_path / "blobs")), _index(tmp_path)
    short = RetentionPolicy("short", {"workspace": 0.0, "observations": 0.0, "envelopes": 0.0})
    index.register("a", tenant="acme", policy=short)
    index.register("b", tenant="acme", policy=full_retention(12))
    payloads = PayloadStore(blobs, index, clock=lambda: T0)
    base = b"shared repository base " * 100
    ra = payloads.put(base, trajectory_id="a", holder="a-ws", artifact_class="workspace")
    rb = payloads.put(base, trajectory_id="b", holder="b-ws", artifact_class="workspace")
    own = payloads.put(b"only a's observation", trajectory_id="a", holder="a-obs", artifact_class="observations")
    assert ra.digest == rb.digest and blobs.stats.objects_written == 2        # stored once
    index.end("a", T0)
    rep = collect_garbage(blobs, index, now_unix_s=T0 + 1)
    assert rep.deleted == [own.digest] and rep.kept_referenced == {ra.digest: 1}
    assert blobs.has(ra.digest)
    index.end("b", T0 + 10)
    assert collect_garbage(blobs, index, now_unix_s=T0 + 11 * SECONDS_PER_MONTH).deleted == []   # b keeps 12 months
    rep = collect_garbage(blobs, index, now_unix_s=T0 + 10 + 12 * SECONDS_PER_MONTH)
    assert rep.deleted == [ra.digest] and not blobs.exists(ra.digest)


def test_a_live_trajectory_never_loses_its_bytes_and_unregistered_objects_are_never_collected(tmp_path):
    blobs, index = DirectoryBlobStore(str(tmp_path / "blobs")), _index(tmp_path)
    index.register("a", tenant="acme", policy=RetentionPolicy("none", {}))
    payloads = PayloadStore(blobs, index)
    live = payloads.put(b"needed for recovery", trajectory_id="a", holder="a-1", artifact_class="observations")
    foreign = blobs.put(b"a checkpoint object someone stored without the ledger")
    rep = collect_garbage(blobs, index, now_unix_s=T0 + 100 * SECONDS_PER_MONTH)
    assert rep.deleted == [] and blobs.has(live.digest) and blobs.has(foreign)


def test_a_digest_is_not_a_permission_to_read(tmp_path):
    """Fault: tenant globex learns the digest of acme's payload. Goal: PayloadAccessError."""
    blobs, index = MemoryBlobStore(), _index(tmp_path)
    index.register("a", tenant="acme", policy=full_retention(1))
    index.register("g", tenant="globex", policy=full_retention(1))
    payloads = PayloadStore(blobs, index)
    ref = payloads.put(b"acme's customer record", trajectory_id="a", holder="a-1", artifact_class="observations")
    assert payloads.get(ref.digest, tenant="acme") == b"acme's customer record"
    with pytest.raises(PayloadAccessError):
        payloads.get(ref.digest, tenant="globex")
    with pytest.raises(RetentionError, match="belongs to tenant"):
        index.register("a", tenant="globex", policy=full_retention(1))


def test_an_interrupted_collection_blocks_new_references_until_it_is_finished(tmp_path):
    """Fault: a collector crashed after marking a digest and before deleting it. Invariant: a new
    put of the same bytes does not reference them mid-collection; the next collection finishes the
    job and the put then stores the bytes again."""
    blobs, index = MemoryBlobStore(), _index(tmp_path)
    index.register("a", tenant="acme", policy=full_retention(1))
    data = b"bytes being collected"
    digest = blobs.put(data)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()                                  # a collector process that no longer exists
    index._db.execute("INSERT INTO collecting VALUES (?, ?)", (digest, dead.pid))   # ... it died after marking
    payloads = PayloadStore(blobs, index)
    with pytest.raises(RetentionError, match="being garbage-collected"):
        index.add(digest, trajectory_id="a", holder="a-1", artifact_class="observations", wait_s=0.05)
    rep = collect_garbage(blobs, index, now_unix_s=T0)
    assert rep.resumed == [digest] and not blobs.exists(digest)
    payloads.put(data, trajectory_id="a", holder="a-1", artifact_class="observations")
    assert blobs.has(digest)


def test_cold_tier_move_retires_the_local_copy_only_after_the_destination_verifies(tmp_path):
    class LossyCold(MemoryBlobStore):
        def _read(self, digest):
            raw = super()._read(digest)
            return None if raw is not None and raw.startswith(b"lost") else raw

    blobs, index = MemoryBlobStore(), _index(tmp_path)
    index.register("a", tenant="acme", policy=full_retention(12))
    payloads = PayloadStore(blobs, index)
    ok = payloads.put(b"arrives intact", trajectory_id="a", holder="a-1", artifact_class="observations")
    bad = payloads.put(b"lost on the way", trajectory_id="a", holder="a-2", artifact_class="observations")
    rep = payloads.migrate([ok.digest, bad.digest], LossyCold())
    assert rep.retired == [ok.digest] and [d for d, _ in rep.failed] == [bad.digest]
    assert not blobs.exists(ok.digest) and blobs.has(bad.digest)


# --- log compaction (§11.8.3) ------------------------------------------------------------------------------


def _checkpointed(store, blobs, tid="c", n_before=6, n_after=4):
    """A log with ``n_before`` tool steps, a checkpoint, then ``n_after`` more. Returns the record
    at every position (folded before any compaction) and the checkpoint capture."""
    log = TrajectoryLog(store, tid, must_survive="none")
    log.append(task(ceiling=100.0))
    for i in range(n_before):
        log.append(intent(op=f"op{i}"))
        if i % 2:
            log.append(result(op=f"op{i}"))
    rec = fold(initial_record(tid), store.read(tid))
    cap = Checkpointer(log, blobs).capture(rec, {"src/median.py": b"def median(xs): ...\n"})
    for i in range(n_after):
        log.append(intent(op=f"late{i}"))
    records = {p: fold(initial_record(tid), store.read(tid, 1, p)) for p in range(0, store.head(tid) + 1)}
    return log, cap, records


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_compaction_keeps_current_recovery_and_moves_the_replay_horizon(tmp_path, kind):
    """Goal: after compaction the state at the head (and at every retained position from the
    checkpoint's event on) is exactly the fold from the start computed before compaction; earlier
    positions raise PrefixRetiredError; the availability proof goes through the checkpoint."""
    store = MemoryStore() if kind == "memory" else SQLiteStore.open(tmp_path / "log.db", create=True)
    blobs, index = DirectoryBlobStore(str(tmp_path / "blobs")), _index(tmp_path)
    index.register("c", tenant="acme", policy=full_retention(12))
    _, cap, records = _checkpointed(store, blobs)
    head = store.head("c")
    domain = "none" if kind == "memory" else "host_crash"      # a memory log survives nothing
    rep = compact(store, blobs, index, "c", now_unix_s=T0, failure_domain=domain)
    p = cap.covered_sequence_number
    assert rep.events_retired == p - 1 and store.retired_through("c") == p - 1 and store.head("c") == head
    assert rep.recoverable_from == cap.event.sequence_number
    for target in range(rep.recoverable_from, head + 1):
        assert restore(store, "c", blobs, target=target).record.to_dict() == records[target].to_dict()
    with pytest.raises(PrefixRetiredError) as err:
        list(store.read("c"))
    assert err.value.retired_through == p - 1 and err.value.checkpoint_event_id == cap.event.event_id
    with pytest.raises(PrefixRetiredError):
        time_travel(store, "c", 2, blobs=blobs)
    view = time_travel(store, "c", head, blobs=blobs)
    assert view.record.to_dict() == records[head].to_dict() and view.missing[0][0] == "log prefix"
    avail = check_available(store, "c", blobs)
    assert avail.ok and avail.checkpoint_id == cap.checkpoint_id and avail.prefix_sha256 == records[head].prefix_sha256
    assert not check_available(store, "c").ok                     # without blobs it cannot be proven
    if kind == "sqlite":                                           # the mark is durable
        store.close()
        again = SQLiteStore.open(tmp_path / "log.db", read_only=True)
        assert again.retired_through("c") == p - 1 and again.recovery.details == []
        assert restore(again, "c", blobs).record.to_dict() == records[head].to_dict()
        again.close()


def test_compaction_is_refused_while_any_promise_needs_the_prefix(tmp_path):
    """Fault: compaction attempted (1) with no checkpoint, (2) with a lost checkpoint blob, (3) with
    checkpoint bytes only in memory under a host-crash contract, (4) under an active replay hold.
    Invariant: nothing is retired. Goal: every reason is listed; once the hold lapses it proceeds."""
    store, index = MemoryStore(), _index(tmp_path)
    index.register("c", tenant="acme", policy=full_retention(12))
    log = TrajectoryLog(store, "c", must_survive="none")
    log.append(task())
    log.append(intent())
    blobs = DirectoryBlobStore(str(tmp_path / "blobs"))
    with pytest.raises(CompactionRefusedError, match="no published checkpoint"):
        compact(store, blobs, index, "c", now_unix_s=T0)
    store2 = MemoryStore()
    _, cap, _ = _checkpointed(store2, blobs)
    os.remove(blobs.path_of(cap.record_sha256))
    plan = plan_compaction(store2, blobs, index, "c", now_unix_s=T0)
    assert not plan.allowed and "not intact" in plan.reasons[0]
    mem_store, mem_blobs = MemoryStore(), MemoryBlobStore()
    _checkpointed(mem_store, mem_blobs)
    plan = plan_compaction(mem_store, mem_blobs, index, "c", now_unix_s=T0, failure_domain="host_crash")
    assert any("survives only none" in r for r in plan.reasons)
    store3, blobs3 = MemoryStore(), DirectoryBlobStore(str(tmp_path / "blobs3"))
    _checkpointed(store3, blobs3)
    index.declare_hold("audit-q3", trajectory_id="c", from_sequence=2, to_sequence=3, purpose="audit",
                       until_unix_s=T0 + 100)
    with pytest.raises(CompactionRefusedError) as err:
        compact(store3, blobs3, index, "c", now_unix_s=T0, failure_domain="none")
    assert any("audit-q3" in r for r in err.value.reasons) and store3.retired_through("c") == 0
    assert compact(store3, blobs3, index, "c", now_unix_s=T0 + 100, failure_domain="none").events_retired > 0


def test_compaction_carries_what_the_record_names_and_releases_the_rest(tmp_path):
    """Fault: compaction retires events that hold payload references: a model input the record's
    operation table still names, and a leftover payload stored for one of those events that the event
    never named. Invariant: current recovery keeps every artifact the checkpoint's record
    references. Goal: the first is carried to the checkpoint and survives collection; the second
    is released and collected."""
    store, blobs, index = MemoryStore(), DirectoryBlobStore(str(tmp_path / "blobs")), _index(tmp_path)
    index.register("c", tenant="acme", policy=full_retention(12))
    payloads = PayloadStore(blobs, index)
    log = TrajectoryLog(store, "c", must_survive="none")
    log.append(task(ceiling=100.0))
    logged = payloads.log_with_payloads(
        log, lambda refs: ContextBuilt(invocation_id="i1", model="m", delivered_input_ref=refs["prompt"].digest,
                                       delivered_input_sha256=refs["prompt"].digest),
        {"prompt": (b"turn-2 prompt", "observations", "text/plain")})
    prompt = logged.payload.delivered_input_ref
    leftover = payloads.put(b"stored for #2, never named by it", trajectory_id="c", holder=logged.event_id,
                            artifact_class="observations").digest
    log.append(intent())
    cap = Checkpointer(log, blobs).capture(fold(initial_record("c"), store.read("c")), {"f": b"x"})
    log.append(intent(op="after"))
    rep = compact(store, blobs, index, "c", now_unix_s=T0, failure_domain="none")
    assert rep.references_released == 2
    assert collect_garbage(blobs, index, now_unix_s=T0).deleted == [leftover]
    assert blobs.has(prompt) and restore(store, "c", blobs).record.last_sequence_number == store.head("c")
    assert {r.holder for r in index.references(prompt)} == {f"checkpoint:{cap.checkpoint_id}"}


@settings(max_examples=25, deadline=None)
@given(n_before=st.integers(1, 8), n_after=st.integers(0, 6), seed=st.integers(0, 10**6))
def test_restore_after_compaction_equals_fold_from_start(tmp_path_factory, n_before, n_after, seed):
    """Property: for any log shape, restore at every retained position after compaction equals the
    record folded from the start before it."""
    tmp = tmp_path_factory.mktemp("prop")
    store, blobs, index = MemoryStore(), MemoryBlobStore(), _index(tmp)
    index.register("c", tenant="acme", policy=full_retention(1))
    _, cap, records = _checkpointed(store, blobs, n_before=n_before, n_after=n_after)
    rep = compact(store, blobs, index, "c", now_unix_s=T0, failure_domain="none")
    for target in range(rep.recoverable_from, store.head("c") + 1):
        assert restore(store, "c", blobs, target=target).record.to_dict() == records[target].to_dict()


def test_retire_prefix_checks_its_arguments_and_the_segment_store_refuses(tmp_path):
    from kernel_lib.log.segment import SegmentStore
    store = MemoryStore()
    store.append(ev(task(), 1, traj="a"), AckTier.MEMORY)
    for bad in (1, -1, True, "1"):
        with pytest.raises(StoreError):
            store.retire_prefix("a", bad, checkpoint_event_id="x")
    seg = SegmentStore.open(tmp_path / "seg", create=True)
    with pytest.raises(StoreError, match="does not support log compaction"):
        seg.retire_prefix("a", 0, checkpoint_event_id="x")
    seg.close()


# --- semantic deduplication (§11.8.4) ----------------------------------------------------------------------


def test_a_retried_batch_carrying_other_evidence_under_a_stored_event_id_is_an_error_not_a_silent_drop(tmp_path):
    """Fault (§11.8.4): an ingestion retry re-sends event id X with a timeout ToolResult while the
    store holds X with success evidence. Goal: ConflictingDuplicateError, both versions intact."""
    store = SQLiteStore.open(tmp_path / "log.db", create=True)
    store.append(ev(task(), 1), AckTier.FDATASYNC)
    store.append(ev(intent(), 2), AckTier.FDATASYNC)
    ok = ev(result(status="completed"), 3, event_id="res-1")
    store.append(ok, AckTier.FDATASYNC)
    assert store.append(ok, AckTier.FDATASYNC).duplicate                       # identical retry: acknowledged
    with pytest.raises(ConflictingDuplicateError):
        store.append(ev(result(status="timeout", complete=False), 3, event_id="res-1"), AckTier.FDATASYNC)
    assert next(iter(store.read("traj-a", 3, 3))).payload.status == "completed"
    store.close()


# --- backpressure (§11.8.4) ------------------------------------------------------------------------------------


def test_a_full_store_stalls_the_append_until_compaction_frees_space(tmp_path):
    """Fault: the store's budget is exhausted mid-trajectory. Invariant: the append waits (no
    acknowledgment, nothing dropped) and lands once compaction, which honours the contracts, frees
    space; without any release it is refused with BackpressureError and nothing is stored."""
    blobs, index = DirectoryBlobStore(str(tmp_path / "blobs")), _index(tmp_path)
    index.register("c", tenant="acme", policy=full_retention(12))
    inner = MemoryStore()
    _checkpointed(inner, blobs, n_before=8, n_after=1)
    used = sum(len(e.canonical) for e in inner.read("c"))
    bounded = BoundedStore(inner, used + 10, stall_timeout_s=0.2)
    assert bounded.used_bytes == used
    nxt = ev(intent(op="blocked"), inner.head("c") + 1, traj="c")
    before = [e.digest for e in inner.read("c")]
    with pytest.raises(BackpressureError, match="not acknowledged"):
        bounded.append(nxt, AckTier.MEMORY)
    assert [e.digest for e in inner.read("c")] == before and bounded.stats.refused == 1

    bounded.stall_timeout_s = 10.0
    threading.Timer(0.3, lambda: compact(bounded, blobs, index, "c", now_unix_s=T0, failure_domain="none")).start()
    t0 = time.monotonic()
    out = bounded.append(nxt, AckTier.MEMORY)
    waited = time.monotonic() - t0
    assert out.sequence_number == nxt.sequence_number and waited >= 0.25 and bounded.stats.stalls == 2
    assert bounded.used_bytes == sum(len(e.canonical) for e in inner.read("c", inner.retired_through("c") + 1))


@settings(max_examples=30, deadline=None)
@given(sizes=st.lists(st.integers(1, 40), min_size=1, max_size=25), capacity=st.integers(600, 6000))
def test_every_append_is_either_acknowledged_and_stored_or_refused_and_absent(sizes, capacity):
    """Property: under a byte budget, no acknowledged event is ever missing and no refused event
    ever appears; the stored bytes never exceed the budget."""
    inner = MemoryStore()
    bounded = BoundedStore(inner, capacity, stall_timeout_s=0.0)
    acked, seq = [], 0
    for i, n in enumerate(sizes):
        e = ev(intent(op="x" * n + str(i)), seq + 1)
        try:
            bounded.append(e, AckTier.MEMORY)
            acked.append(e.digest)
            seq += 1
        except BackpressureError:
            assert e.digest not in [x.digest for x in inner.read("traj-a")]
    assert [x.digest for x in inner.read("traj-a")] == acked
    assert bounded.used_bytes <= capacity


def test_bounded_store_refuses_bad_budgets():
    for bad in (0, -5, 1.5, True):
        with pytest.raises(ConfigError):
            BoundedStore(MemoryStore(), bad)
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(ConfigError):
            BoundedStore(MemoryStore(), 100, stall_timeout_s=bad)


# --- the follower replica (§11.8.4) ----------------------------------------------------------------------------


def _primary_events(n, tid="r"):
    store = MemoryStore()
    log = TrajectoryLog(store, tid, must_survive="none", owner_epoch=3)
    log.append(task())
    for i in range(n - 1):
        log.append(intent(op=f"op{i}"))
    return list(store.read(tid))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 20), data=st.data())
def test_a_replica_advertises_only_its_gap_free_prefix(n, data):
    """Property: whatever order events arrive in (with duplicates), the advertised prefix is the
    longest run 1..k received so far, and the events there are byte-identical to the primary's."""
    events = _primary_events(n)
    order = data.draw(st.permutations(events))
    extra = data.draw(st.lists(st.sampled_from(events), max_size=5))
    replica = FollowerReplica()
    seen: set[int] = set()
    for e in list(order) + extra:
        replica.receive([e])
        seen.add(e.sequence_number)
        k = 0
        while k + 1 in seen:
            k += 1
        assert replica.recoverable_prefix("r") == k
        assert [x.canonical for x in replica.read("r")] == [x.canonical for x in events[:k]]
    assert replica.staged("r") == [] and replica.first_gap("r") is None


def test_a_replica_keeps_original_provenance_refuses_conflicts_and_fresh_appends():
    events = _primary_events(4)
    replica = FollowerReplica(name="follower-2")
    rep = replica.receive([events[0], events[2], events[3]])
    assert ((rep.applied, replica.recoverable_prefix("r"), replica.first_gap("r"), replica.staged("r"))
            == (1, 1, 2, [3, 4]))
    replica.receive([events[1]])
    held = list(replica.read("r"))
    assert all(h.owner_epoch == 3 and h.provenance == e.provenance and h.digest == e.digest
               for h, e in zip(held, events))
    forged = Event.create(trajectory_id="r", event_id=events[2].event_id, sequence_number=3, payload=intent(op="x"),
                          owner_epoch=3, provenance=Provenance("default", "replica-node-2"))
    with pytest.raises(ConflictingDuplicateError):
        replica.receive([forged])
    with pytest.raises(StoreReadOnlyError):
        replica.append(ev(intent(), 5, traj="r", epoch=3), AckTier.MEMORY)
    avail = check_available(replica, "r")
    assert not avail.ok and "replica" in avail.reasons[0]


def test_a_durable_replica_survives_reopen_with_only_its_applied_prefix(tmp_path):
    events = _primary_events(6)
    replica = FollowerReplica(SQLiteStore.open(tmp_path / "replica.db", create=True))
    random.Random(7).shuffle(events)
    replica.receive([e for e in events if e.sequence_number != 4])
    assert replica.recoverable_prefix("r") == 3
    replica.close()
    again = SQLiteStore.open(tmp_path / "replica.db", read_only=True)
    assert again.head("r") == 3
    again.close()


def test_reference_index_refuses_foreign_files_and_bad_arguments(tmp_path):
    import sqlite3
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE customers (id INTEGER)")
    with pytest.raises(RetentionError, match="not a reference index"):
        ReferenceIndex(other)
    index = _index(tmp_path)
    with pytest.raises(RetentionError, match="not registered"):
        index.add("ab" * 32, trajectory_id="ghost", holder="h", artifact_class="workspace")
    index.register("a", tenant="acme", policy=split_lifetimes(12, 1))
    with pytest.raises(ConfigError):
        index.add("ab" * 32, trajectory_id="a", holder="h", artifact_class="raw packets")
    with pytest.raises(ConfigError):
        index.declare_hold("h", trajectory_id="a", from_sequence=5, to_sequence=2, purpose="audit", until_unix_s=T0)
    with pytest.raises(ConfigError):
        index.declare_hold("h", trajectory_id="a", from_sequence=1, to_sequence=2, purpose="fun", until_unix_s=T0)
    index.declare_hold("h", trajectory_id="a", from_sequence=1, to_sequence=2, purpose="audit", until_unix_s=T0)
    with pytest.raises(RetentionError, match="other terms"):
        index.declare_hold("h", trajectory_id="a", from_sequence=1, to_sequence=3, purpose="audit", until_unix_s=T0)
    with pytest.raises(ConfigError):
        index.end("a", float("nan"))


def test_track_checkpoint_protects_every_object_of_the_chain(tmp_path):
    store, blobs, index = MemoryStore(), DirectoryBlobStore(str(tmp_path / "blobs")), _index(tmp_path)
    index.register("c", tenant="acme", policy=RetentionPolicy("ws", {"workspace": 1.0}))
    _, cap, _ = _checkpointed(store, blobs)
    n = track_checkpoint(index, blobs, cap.event)
    assert n >= 4
    index.end("c", T0)
    assert collect_garbage(blobs, index, now_unix_s=T0 + 1).deleted == []
    assert restore(store, "c", blobs).record.last_sequence_number == store.head("c")
    rep = collect_garbage(blobs, index, now_unix_s=T0 + 2 * SECONDS_PER_MONTH)
    assert len(rep.deleted) == n


def test_every_crash_state_of_payload_first_writes_keeps_references_resolvable_and_the_method_finds_the_naive_order():
    """Fault: a crash after any file operation (process crash, host crash, torn write) while turns
    are logged with offloaded inputs. Invariant: every surviving event names intact bytes and every
    acknowledged event survives. Goal: zero violations for payload-first; the same exploration
    finds violations when the reference is committed first (so the check can fail)."""
    from kernel_lib.verify.payload_workload import explore
    good = explore("payload-first", turns=3, seed=1)
    bad = explore("reference-first", turns=3, seed=1)
    assert good.states_explored > 20 and good.violations == 0, good.violation_details[:2]
    assert bad.violations > 0
    assert all("whose bytes are not stored" in p for v in bad.violation_details for p in v["problems"])
    with pytest.raises(ConfigError):
        explore("sideways")
    with pytest.raises(ConfigError):
        explore(turns=0)
