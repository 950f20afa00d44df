"""Adversarial tests of the §11.8 storage engine (kernel_lib.retention, LogStore.retire_prefix).

Each test is a scenario: the fault injected, the invariant the project promises, and the goal. Many
were written as failing tests for defects an adversarial pass found (each since fixed).

Invariants under attack (from the brief and §11.8): bad input gets a clear typed error
(kernel_lib.errors); nothing stored is lost or overwritten; no blob a live retention contract needs
is deleted; compaction never removes state the newest durable checkpoint does not hold; a full store
never drops; a replica never advertises past a gap nor restamps provenance.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from kernel_lib.checkpoint import Checkpointer, DirectoryBlobStore, MemoryBlobStore
import kernel_lib.checkpoint.restore as restore
from kernel_lib.checkpoint.blobs import sha256_hex
from kernel_lib.errors import (BackpressureError, CompactionRefusedError, ConfigError, ConflictingDuplicateError,
                               KernelError, PrefixRetiredError, RetentionError, StoreError)
from kernel_lib.core.events import Event
from kernel_lib.log import MemoryStore, SQLiteStore, TrajectoryLog
from kernel_lib.log.base import AckTier
from kernel_lib.ownership.leases import check_available
from kernel_lib.core.record import fold, initial_record
from kernel_lib.history.replay import time_travel
from kernel_lib.retention.pricing import full_retention
from kernel_lib.retention import (BoundedStore, FollowerReplica, PayloadStore, ReferenceIndex, collect_garbage,
                                       compact, plan_compaction)
import kernel_lib.retention.references as references_module
from tests.helpers import ev, intent, result, task

T0 = 1_800_000_000.0
ROOT = Path(__file__).resolve().parents[1]


def _index(tmp_path, name="refs.db", tid="c", months=12):
    index = ReferenceIndex(tmp_path / name)
    index.register(tid, tenant="acme", policy=full_retention(months))
    return index


def _steps(log, n, prefix="op"):
    for i in range(n):
        log.append(intent(op=f"{prefix}{i}"))
        log.append(result(op=f"{prefix}{i}"))


def _checkpointed(store, blobs, tid="c", n_before=3, n_after=2):
    """task, n_before settled steps, a full checkpoint, n_after intents. Returns (log, capture)."""
    log = TrajectoryLog(store, tid, must_survive="none")
    log.append(task(ceiling=100.0))
    _steps(log, n_before)
    cap = Checkpointer(log, blobs).capture(fold(initial_record(tid), store.read(tid)), {"src/a.py": b"a = 1\n"})
    for i in range(n_after):
        log.append(intent(op=f"late{i}"))
    return log, cap


def _domain(store):
    return "host_crash" if isinstance(store, SQLiteStore) else "none"


# ================================================================================================
# compaction: repeated, chained, racing, reopened
# ================================================================================================


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_compaction_twice_then_append_checkpoint_and_compact_again_keeps_the_fold(tmp_path, kind):
    """Fault: compaction run twice in a row, then more work, an incremental checkpoint (whose full
    base's event is now in the retired prefix), a consolidation, and compaction again.
    Invariant: the second identical compaction is refused as "nothing new", never retiring more;
    every later compaction keeps the state at the head equal to the fold from #1.
    Goal: restore at the head equals the uncompacted fold after each round."""
    store = MemoryStore() if kind == "memory" else SQLiteStore.open(tmp_path / "log.db", create=True)
    blobs, index = DirectoryBlobStore(str(tmp_path / "blobs")), _index(tmp_path)
    log = TrajectoryLog(store, "c", must_survive="none")
    log.append(task(ceiling=100.0))
    _steps(log, 3)
    files = {"src/a.py": b"a = 1\n"}
    ckpt = Checkpointer(log, blobs)
    ckpt.capture(fold(initial_record("c"), store.read("c")), files, kind="full")
    log.append(intent(op="x"))
    shadow = MemoryStore()                     # an uncompacted copy of every event, to fold from #1
    for e in store.read("c"):
        shadow.append(e, AckTier.MEMORY)

    def sync_shadow():
        for e in store.read("c", shadow.head("c") + 1):
            shadow.append(e, AckTier.MEMORY)

    def check_head():
        sync_shadow()
        want = fold(initial_record("c"), shadow.read("c")).to_dict()
        assert restore(store, "c", blobs).record.to_dict() == want

    rep1 = compact(store, blobs, index, "c", now_unix_s=T0, failure_domain=_domain(store))
    mark = store.retired_through("c")
    assert rep1.events_retired == mark > 0
    with pytest.raises(CompactionRefusedError, match="nothing new to retire"):
        compact(store, blobs, index, "c", now_unix_s=T0, failure_domain=_domain(store))
    assert store.retired_through("c") == mark
    check_head()

    # more work, an incremental checkpoint on the (retained) full base, then compaction again
    _steps(log, 2, prefix="late")
    files["src/b.py"] = b"b = 2\n"
    sync_shadow()
    inc = ckpt.capture(fold(initial_record("c"), shadow.read("c")), files, kind="incremental")
    assert inc.kind == "incremental"
    log.append(intent(op="y"))
    compact(store, blobs, index, "c", now_unix_s=T0, failure_domain=_domain(store))
    assert store.retired_through("c") == inc.covered_sequence_number - 1
    check_head()

    # a fresh checkpointer (another process) builds another delta on the chain whose base's
    # event is retired, then consolidates; compaction once more
    sync_shadow()
    log.append(result(op="y"))
    sync_shadow()
    again = Checkpointer(TrajectoryLog(store, "c", must_survive="none"), blobs)
    inc2 = again.capture(fold(initial_record("c"), shadow.read("c")), files, kind="incremental")
    assert inc2.chain_length == 2
    cons = again.consolidate()
    assert cons is not None
    log2 = TrajectoryLog(store, "c", must_survive="none")
    log2.append(intent(op="z"))
    compact(store, blobs, index, "c", now_unix_s=T0, failure_domain=_domain(store))
    check_head()
    assert check_available(store, "c", blobs).ok
    store.close()


def test_a_checkpoint_covering_position_1_leaves_nothing_to_retire(tmp_path):
    """Fault: the only checkpoint covers #1 (captured right after TaskStarted). Invariant:
    nothing may be retired (event #1 is the checkpoint's boundary). Goal: refused, typed, mark 0."""
    store, blobs, index = MemoryStore(), MemoryBlobStore(), _index(tmp_path)
    log = TrajectoryLog(store, "c", must_survive="none")
    log.append(task())
    Checkpointer(log, blobs).capture(fold(initial_record("c"), store.read("c")), {"f": b"x"})
    log.append(intent())
    plan = plan_compaction(store, blobs, index, "c", now_unix_s=T0, failure_domain="none")
    assert not plan.allowed and plan.retire_through == 0
    with pytest.raises(CompactionRefusedError):
        compact(store, blobs, index, "c", now_unix_s=T0, failure_domain="none")
    assert store.retired_through("c") == 0 and len(list(store.read("c"))) == 3


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_compaction_racing_appends_from_another_thread_loses_nothing(tmp_path, kind):
    """Fault: a writer thread appends while compaction retires the prefix. Invariant: every event
    the writer got an acknowledgment for is readable afterwards (suffix), the head is the writer's
    last sequence number, and the retained suffix is gapless. Goal: no append lost or refused."""
    store = MemoryStore() if kind == "memory" else SQLiteStore.open(tmp_path / "log.db", create=True)
    blobs, index = DirectoryBlobStore(str(tmp_path / "blobs")), _index(tmp_path)
    _checkpointed(store, blobs, n_before=4, n_after=1)
    acked, errors = [], []
    tier = AckTier.MEMORY if kind == "memory" else AckTier.WRITE

    def writer():
        try:
            for _ in range(150):
                h = store.head("c")
                out = store.append(ev(intent(op=f"w{h}"), h + 1, traj="c", event_id=f"w-{h + 1}"), tier)
                acked.append(out.sequence_number)
        except BaseException as exc:       # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=writer)
    t.start()
    compact(store, blobs, index, "c", now_unix_s=T0, failure_domain=_domain(store))
    t.join(30)
    assert not errors
    mark = store.retired_through("c")
    kept = [e.sequence_number for e in store.read("c", mark + 1)]
    assert kept == list(range(mark + 1, store.head("c") + 1))
    assert set(acked) <= set(kept) and store.head("c") == acked[-1]
    store.close()


def test_compacted_sqlite_log_reopens_read_only_and_read_write_and_keeps_its_mark(tmp_path):
    """Fault: the process that compacted exits; the log is reopened read-only (no -wal file,
    immutable connection) and then read-write by another writer that appends. Invariant: the mark
    survives, reads below it raise PrefixRetiredError, appends continue at head + 1, and the
    survey reports no gap. Goal: the whole life cycle through files."""
    path = tmp_path / "log.db"
    store = SQLiteStore.open(path, create=True)
    blobs, index = DirectoryBlobStore(str(tmp_path / "blobs")), _index(tmp_path)
    _, cap = _checkpointed(store, blobs)
    compact(store, blobs, index, "c", now_unix_s=T0)
    mark, head = store.retired_through("c"), store.head("c")
    store.close()
    ro = SQLiteStore.open(path, read_only=True)
    assert (ro.retired_through("c"), ro.head("c"), ro.recovery.details) == (mark, head, [])
    with pytest.raises(PrefixRetiredError):
        list(ro.read("c", 1, 1))
    rw = SQLiteStore.open(path, create=True)
    assert rw.recovery.details == []
    rw.append(ev(intent(op="after-reopen"), head + 1, traj="c", event_id="after-reopen"), AckTier.FDATASYNC)
    assert ro.head("c") == head + 1 and ro.retired_through("c") == mark      # reader sees the writer
    assert restore(ro, "c", blobs).record.last_sequence_number == head + 1
    with pytest.raises(StoreError):
        ro.retire_prefix("c", mark + 1, checkpoint_event_id=cap.event.event_id)
    ro.close()
    rw.close()


def test_an_old_sqlite_log_without_the_retired_prefix_table_opens_read_only(tmp_path):
    """Fault: a log written by a build before compaction existed (no ``retired_prefix`` table),
    opened read-only (which must not create the table). Invariant: nothing on disk changes; it
    reads as never compacted; time travel and availability work. Goal: no sqlite3 error leaks."""
    path = tmp_path / "old.db"
    store = SQLiteStore.open(path, create=True)
    for i, p in enumerate([task(), intent(), result()], start=1):
        store.append(ev(p, i, traj="old"), AckTier.FDATASYNC)
    store.close()
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE retired_prefix")
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    ro = SQLiteStore.open(path, read_only=True)
    assert ro.retired_through("old") == 0 and len(list(ro.read("old"))) == 3
    assert time_travel(ro, "old", 3).record.last_sequence_number == 3
    assert check_available(ro, "old").ok
    ro.close()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM sqlite_master WHERE name='retired_prefix'").fetchone()[0] == 0


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_retired_event_id_is_not_silently_reusable(tmp_path, kind):
    """Fault: after compaction an ingestion retry re-sends a retired event (lost ack), and a split-
    brain writer appends a different event under a retired event id at the head.
    Invariant (§11.8.4 semantic dedup): an identical retry is acknowledged as a duplicate; a
    different event under a stored id is a ConflictingDuplicateError, retired or not.
    Goal: both stores behave like the memory store."""
    store = MemoryStore() if kind == "memory" else SQLiteStore.open(tmp_path / "log.db", create=True)
    blobs, index = DirectoryBlobStore(str(tmp_path / "blobs")), _index(tmp_path)
    _checkpointed(store, blobs)
    retired_event = list(store.read("c", 2, 2))[0]
    compact(store, blobs, index, "c", now_unix_s=T0, failure_domain=_domain(store))
    assert store.retired_through("c") >= 2
    tier = store.strongest_tier()
    head = store.head("c")
    forged = Event.create(trajectory_id="c", event_id=retired_event.event_id, sequence_number=head + 1,
                          payload=intent(op="evil"))
    with pytest.raises(ConflictingDuplicateError):
        store.append(forged, tier)
    assert store.head("c") == head
    out = store.append(retired_event, tier)
    assert out.duplicate and out.sequence_number == 2
    store.close()


def test_compaction_keeps_the_input_bytes_of_an_operation_still_in_doubt(tmp_path):
    """Fault: a tool intent whose input (the exact patch to deploy) is an offloaded payload is
    durable but unsettled when the checkpoint is taken; compaction retires its event, then the
    collector runs. Invariant (§11.8.1 current recovery: the checkpoint plus "every external
    artifact referenced by those records"): the in-doubt operation's input_ref names bytes that
    still exist. Goal: the bytes survive compaction + collection while the run is live."""
    store, blobs, index = MemoryStore(), DirectoryBlobStore(str(tmp_path / "blobs")), _index(tmp_path)
    payloads = PayloadStore(blobs, index)
    log = TrajectoryLog(store, "c", must_survive="none")
    log.append(task(ceiling=100.0))
    e = payloads.log_with_payloads(log, lambda refs: intent(op="deploy", input_ref=refs["args"].digest),
                                   {"args": (b"the exact patch to deploy", "observations", "text/plain")})
    _steps(log, 2)
    Checkpointer(log, blobs).capture(fold(initial_record("c"), store.read("c")), {"f": b"x"})
    log.append(intent(op="late"))
    compact(store, blobs, index, "c", now_unix_s=T0, failure_domain="none")
    collect_garbage(blobs, index, now_unix_s=T0)
    rec = restore(store, "c", blobs).record
    assert "deploy" in rec.in_doubt()
    assert rec.operations["deploy"].input_ref == e.payload.input_ref
    assert blobs.has(e.payload.input_ref), "the in-doubt operation's input bytes were collected"


# ================================================================================================
# bad arguments to the planner / compactor
# ================================================================================================


@pytest.mark.parametrize("now", [float("nan"), float("inf")])
def test_a_non_finite_now_cannot_switch_off_an_active_hold(tmp_path, now):
    """Fault: a caller passes now_unix_s=NaN/inf (a broken clock, a division by zero). Invariant:
    an active hold blocks compaction; bad input is a typed error. Goal: ConfigError, nothing retired."""
    store, blobs, index = MemoryStore(), MemoryBlobStore(), _index(tmp_path)
    _checkpointed(store, blobs)
    index.declare_hold("audit", trajectory_id="c", from_sequence=1, to_sequence=3, purpose="audit",
                       until_unix_s=T0 + 1000)
    try:
        with pytest.raises(ConfigError):
            compact(store, blobs, index, "c", now_unix_s=now, failure_domain="none")
    finally:
        assert store.retired_through("c") == 0, "the held prefix was retired"


def test_a_string_now_is_a_typed_error(tmp_path):
    store, blobs, index = MemoryStore(), MemoryBlobStore(), _index(tmp_path)
    _checkpointed(store, blobs)
    index.declare_hold("audit", trajectory_id="c", from_sequence=1, to_sequence=3, purpose="audit",
                       until_unix_s=T0 + 1000)
    with pytest.raises(KernelError):
        plan_compaction(store, blobs, index, "c", now_unix_s="2027-01-01", failure_domain="none")


def test_failure_domain_none_is_refused_not_read_as_survive_nothing(tmp_path):
    """Fault: a caller forwards an unset option (None) as failure_domain. Invariant: compaction
    never relies on a checkpoint that is not durable across the declared domain; bad input is
    typed. Goal: StoreError/ConfigError, and the memory blob store is not accepted."""
    store, blobs, index = MemoryStore(), MemoryBlobStore(), _index(tmp_path)
    _checkpointed(store, blobs)
    with pytest.raises(KernelError):
        plan_compaction(store, blobs, index, "c", now_unix_s=T0, failure_domain=None)


def test_retire_prefix_rejects_huge_and_odd_positions_on_both_stores(tmp_path):
    """Bad arguments at the primitive: huge ints, floats, NaN, None, empty ids. Goal: StoreError."""
    for store in (MemoryStore(), SQLiteStore.open(tmp_path / "log.db", create=True)):
        tier = store.strongest_tier()
        for i, p in enumerate([task(), intent(), result()], start=1):
            store.append(ev(p, i, traj="a"), tier)
        for bad in (2**63, 2**80, 1.0, float("nan"), None, -0.0):
            with pytest.raises(StoreError):
                store.retire_prefix("a", bad, checkpoint_event_id="x")
        for tid, ck in (("", "x"), ("a", ""), ("a", None), (None, "x")):
            with pytest.raises(StoreError):
                store.retire_prefix(tid, 1, checkpoint_event_id=ck)
        assert store.retired_through("a") == 0 and len(list(store.read("a"))) == 3
        store.close()


# ================================================================================================
# the reference index
# ================================================================================================


def test_garbage_and_empty_files_as_reference_index(tmp_path):
    """Fault: the index path names random bytes, or a directory. Goal: RetentionError, not sqlite3."""
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"\x00not sqlite at all" * 500)
    with pytest.raises(RetentionError):
        ReferenceIndex(junk)
    with pytest.raises(RetentionError):
        ReferenceIndex(tmp_path)
    assert junk.read_bytes() == b"\x00not sqlite at all" * 500


def test_reference_index_refuses_a_foreign_file_with_user_version_1_and_leaves_it_untouched(tmp_path):
    """Fault: an operator points the ledger at the log file (or another app's DB that happens to use
    user_version 1). Invariant: a foreign file is refused and left as it was. Goal: RetentionError
    at open, journal mode unchanged."""
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as db:
        db.execute("PRAGMA user_version=1")
        db.execute("CREATE TABLE customers (id INTEGER)")
    try:
        with pytest.raises(RetentionError):
            ReferenceIndex(other).register("t", tenant="acme", policy=full_retention(1))
    finally:
        with sqlite3.connect(other) as db:
            assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete", "the foreign file was switched to WAL"
    log = SQLiteStore.open(tmp_path / "log.db", create=True)
    log.append(ev(task(), 1), AckTier.FDATASYNC)
    log.close()
    with pytest.raises(RetentionError):
        ReferenceIndex(tmp_path / "log.db")


def test_two_processes_creating_the_same_index_at_once_both_open_it(tmp_path, monkeypatch):
    """Fault: two workers open a not-yet-initialised ledger file at the same moment; the other one
    commits the schema between this opener's two layout reads (simulated deterministically by
    creating the schema from inside the second read). Invariant: both open the same ledger.
    Goal: no RetentionError for a file that is a valid reference index."""
    path = tmp_path / "refs.db"
    real_connect = sqlite3.connect
    state = {"done": False}

    class Conn:
        def __init__(self, db):
            self._db = db

        def execute(self, sql, *args):
            if sql.startswith("SELECT count(*) FROM sqlite_master") and not state["done"]:
                state["done"] = True
                monkeypatch.setattr(references_module.sqlite3, "connect", real_connect)
                ReferenceIndex(path).close()            # the other process wins the race here
            return self._db.execute(sql, *args)

        def __getattr__(self, name):
            return getattr(self._db, name)

    monkeypatch.setattr(references_module.sqlite3, "connect", lambda *a, **k: Conn(real_connect(*a, **k)))
    index = ReferenceIndex(path)
    index.register("t", tenant="acme", policy=full_retention(1))


def test_two_processes_sharing_an_index_see_each_others_references(tmp_path):
    """Two connections (as two processes would) on one ledger: a reference added through one
    blocks collection through the other. Goal: no blob deleted that the other side references."""
    a, b = _index(tmp_path, tid="t1"), ReferenceIndex(tmp_path / "refs.db")
    blobs = MemoryBlobStore()
    pa = PayloadStore(blobs, a)
    ref = pa.put(b"shared", trajectory_id="t1", holder="h1", artifact_class="observations")
    rep = collect_garbage(blobs, b, now_unix_s=T0)
    assert rep.deleted == [] and blobs.has(ref.digest) and b.tenant_of("t1") == "acme"


def test_add_checks_wait_s(tmp_path):
    """Fault: wait_s=NaN or "5" while a collection mark is stuck. Goal: ConfigError, no hang."""
    index = _index(tmp_path, tid="a")
    digest = sha256_hex(b"being collected")
    assert index.begin_collect(digest)
    outcome: list = []

    def call(w):
        try:
            index.add(digest, trajectory_id="a", holder="h", artifact_class="observations", wait_s=w)
            outcome.append("returned")
        except BaseException as exc:
            outcome.append(exc)

    try:
        t = threading.Thread(target=call, args=(float("nan"),), daemon=True)
        t.start()
        t.join(1.0)
        hung = t.is_alive()
        call("5")
    finally:
        index.end_collect(digest)        # let a spinning call finish
        t.join(5)
    assert not hung, "add(wait_s=nan) never returned"
    assert all(isinstance(o, ConfigError) for o in outcome), outcome


@pytest.mark.parametrize("case", ["huge-hold", "not-a-digest"])
def test_reference_index_bad_arguments_are_typed(tmp_path, case):
    index = _index(tmp_path, tid="a")
    with pytest.raises(ConfigError):
        if case == "huge-hold":
            index.declare_hold("h", trajectory_id="a", from_sequence=1, to_sequence=2**70, purpose="audit",
                               until_unix_s=T0)
        else:
            index.add("../../etc/passwd", trajectory_id="a", holder="h", artifact_class="observations")


def test_gc_racing_puts_of_the_same_bytes_never_leaves_a_reference_without_bytes(tmp_path):
    """Fault: one thread repeatedly releases and collects a payload while another repeatedly puts the
    same bytes for a fresh holder (the collecting mark is the only thing between them).
    Invariant: whenever a put returned, its digest is stored until its reference is released.
    Goal: after every round, a referenced digest has its bytes."""
    blobs, index = DirectoryBlobStore(str(tmp_path / "blobs")), _index(tmp_path, tid="a")
    payloads = PayloadStore(blobs, index)
    data = b"contended bytes " * 64
    digest = sha256_hex(data)
    stop = threading.Event()
    errors: list = []

    def collector():
        try:
            while not stop.is_set():
                index.release("a", [h for h in index.holders("a") if h.startswith("old")])
                collect_garbage(blobs, index, now_unix_s=T0)
        except BaseException as exc:     # pragma: no cover
            errors.append(exc)

    t = threading.Thread(target=collector)
    t.start()
    try:
        for i in range(60):
            payloads.put(data, trajectory_id="a", holder=f"live-{i}", artifact_class="observations")
            assert blobs.has(digest), f"round {i}: a returned put has no bytes"
            index.release("a", [f"live-{i}"])
            payloads.put(data, trajectory_id="a", holder=f"old-{i}", artifact_class="observations")
    finally:
        stop.set()
        t.join(30)
    assert not errors
    payloads.put(data, trajectory_id="a", holder="final", artifact_class="observations")
    collect_garbage(blobs, index, now_unix_s=T0)
    assert blobs.has(digest)


def test_a_second_collector_does_not_steal_a_live_collection(tmp_path):
    """Fault: two collectors (two processes sharing the ledger) run at once; collector A has marked a
    digest and is about to delete it when collector B starts, "resumes" A's mark as crashed, and a
    put of the same bytes slips in. Invariant: no referenced blob is deleted. Goal: the put's bytes
    survive A's delete."""
    blobs, index = DirectoryBlobStore(str(tmp_path / "blobs")), _index(tmp_path, tid="a")
    payloads = PayloadStore(blobs, index)
    data = b"a payload whose last reference was released"
    ref = payloads.put(data, trajectory_id="a", holder="e1", artifact_class="observations")
    index.release("a", ["e1"])
    go, marked = threading.Event(), threading.Event()

    class SlowDelete(DirectoryBlobStore):
        def delete(self, digest):
            marked.set()
            go.wait(10)
            return super().delete(digest)

    slow = SlowDelete(str(tmp_path / "blobs"))
    a = threading.Thread(target=lambda: collect_garbage(slow, index, now_unix_s=T0))
    a.start()
    assert marked.wait(10)
    collect_garbage(blobs, index, now_unix_s=T0)                   # collector B
    put_done: list = []
    putter = threading.Thread(target=lambda: put_done.append(
        payloads.put(data, trajectory_id="a", holder="e2", artifact_class="observations")))
    putter.start()
    putter.join(0.5)                 # with the defect the put completes at once, inside A's window
    go.set()
    a.join(10)
    putter.join(10)
    assert put_done, "the put never completed"
    assert [r.holder for r in index.references(ref.digest)] == ["e2"]
    assert blobs.has(ref.digest), "a referenced payload was deleted by the first collector"


def test_an_interrupted_collection_left_by_a_crash_is_finished_and_reported_once(tmp_path):
    """Fault: several collecting rows left by a crashed collector, one digest's bytes already gone.
    Goal: the next collection finishes all of them, the marks are gone, a second run resumes none."""
    blobs, index = MemoryBlobStore(), _index(tmp_path, tid="a")
    present, gone = blobs.put(b"still here"), sha256_hex(b"already deleted")
    for d in (present, gone):
        assert index.begin_collect(d)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()                          # the collector that marked them is gone
    index._db.execute("UPDATE collecting SET owner_pid=?", (dead.pid,))
    rep = collect_garbage(blobs, index, now_unix_s=T0)
    assert sorted(rep.resumed) == sorted([present, gone]) and not blobs.exists(present)
    assert index.unfinished_collections() == []
    assert collect_garbage(blobs, index, now_unix_s=T0).resumed == []


# ================================================================================================
# backpressure
# ================================================================================================


def test_bounded_store_accounting_stays_exact_with_duplicates_and_errors_in_a_batch():
    """Fault: batches mixing new events, identical retries, conflicting duplicates, sequence gaps,
    stale owners and a non-Event. Invariant: used_bytes always equals the canonical bytes of the
    retained events. Goal: no drift either way."""
    inner = MemoryStore()
    bounded = BoundedStore(inner, 10**7, stall_timeout_s=0.0)

    def true_bytes():
        return sum(len(e.canonical) for e in inner.read("traj-a"))

    e1, e2 = ev(task(), 1, epoch=2), ev(intent(), 2, epoch=2)
    bounded.append_batch([e1, e2, e1], AckTier.MEMORY)
    assert bounded.used_bytes == true_bytes()
    out = bounded.append_batch([e2, ev(intent(op="other"), 2, event_id=e2.event_id, epoch=2),
                                ev(result(), 9, epoch=2), ev(result(), 3, epoch=1), ev(result(), 3, epoch=2)],
                               AckTier.MEMORY)
    assert [type(o).__name__ for o in out][:4] == ["AppendOutcome", "ConflictingDuplicateError", "SequenceGapError",
                                                   "StaleOwnerError"]
    assert bounded.used_bytes == true_bytes()
    with pytest.raises(StoreError):
        bounded.append_batch([ev(intent(op="n"), 4, epoch=2), "not an event"], AckTier.MEMORY)
    assert bounded.used_bytes == true_bytes()


def test_bounded_store_reclaim_that_raises_keeps_the_error_and_refuses_cleanly():
    inner = MemoryStore()
    e1 = ev(task(), 1)
    inner.append(e1, AckTier.MEMORY)

    def reclaim():
        raise RuntimeError("compaction blew up")

    e2 = ev(intent(), 2)
    bounded = BoundedStore(inner, len(e1.canonical) + len(e2.canonical) - 1, stall_timeout_s=0.05, reclaim=reclaim)
    with pytest.raises(BackpressureError, match="no space was released"):
        bounded.append(e2, AckTier.MEMORY)
    assert isinstance(bounded.last_reclaim_error, RuntimeError) and bounded.stats.reclaims == 1
    assert inner.head("traj-a") == 1 and bounded.used_bytes == len(e1.canonical)


def test_concurrent_compactions_through_a_bounded_store_do_not_double_count():
    """Fault: two threads compact the same trajectory through the wrapper at once (both read the
    prefix size before either retires). Invariant: used_bytes equals the retained bytes."""
    class Rendezvous(MemoryStore):
        barrier = threading.Barrier(2)

        def retire_prefix(self, *a, **k):
            try:                       # meet the other compaction here if it can get this far
                self.barrier.wait(0.5)
            except threading.BrokenBarrierError:
                pass                   # it could not: the wrapper serializes compactions
            return super().retire_prefix(*a, **k)

    inner = Rendezvous()
    inner.append(ev(task(), 1), AckTier.MEMORY)
    for i in range(2, 7):
        inner.append(ev(intent(op=f"o{i}"), i), AckTier.MEMORY)
    bounded = BoundedStore(inner, 10**6)
    threads = [threading.Thread(target=bounded.retire_prefix, args=("traj-a", 3), kwargs={"checkpoint_event_id": "x"})
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert bounded.used_bytes == sum(len(e.canonical) for e in inner.read("traj-a", 4))


def test_a_bounded_wrapper_does_not_make_a_replica_authoritative():
    """Fault: a budget is put on a follower's store. Invariant (§11.9): a replica is never evidence
    of non-dispatch. Goal: check_available refuses the wrapped replica as it refuses the bare one."""
    replica = FollowerReplica()
    replica.receive([ev(task(), 1, traj="r"), ev(intent(), 2, traj="r")])
    assert not check_available(replica, "r").ok
    assert not check_available(BoundedStore(replica, 10**6), "r").ok


def test_a_full_store_still_acknowledges_an_identical_retry():
    """Fault: the acknowledgment of the last event was lost and the store is now exactly full.
    Invariant: an identical retry is acknowledged as a duplicate; nothing new stored. Goal: duplicate."""
    inner = MemoryStore()
    e1 = ev(task(), 1)
    inner.append(e1, AckTier.MEMORY)
    bounded = BoundedStore(inner, len(e1.canonical), stall_timeout_s=0.0)
    assert bounded.append(e1, AckTier.MEMORY).duplicate


# ================================================================================================
# the follower replica
# ================================================================================================


def test_a_replica_interleaving_several_trajectories_keeps_each_prefix_separate(tmp_path):
    """Fault: events of three trajectories arrive interleaved, reversed and duplicated, into a
    durable SQLite backing. Invariant: each trajectory's advertised prefix is its own gap-free run;
    stored bytes equal the primary's. Goal: reopen shows exactly the advertised prefixes."""
    prims = {}
    for tid, n in (("x", 5), ("y", 3), ("z", 4)):
        src = MemoryStore()
        log = TrajectoryLog(src, tid, must_survive="none", owner_epoch=7)
        log.append(task())
        for i in range(n - 1):
            log.append(intent(op=f"{tid}{i}"))
        prims[tid] = list(src.read(tid))
    replica = FollowerReplica(SQLiteStore.open(tmp_path / "rep.db", create=True))
    batch = [e for tid in prims for e in reversed(prims[tid]) if not (tid == "z" and e.sequence_number == 2)]
    rep = replica.receive(batch + prims["x"][:2])
    assert rep.heads == {"x": 5, "y": 3, "z": 1} and rep.first_gaps["z"] == 2
    assert replica.staged("z") == [3, 4] and replica.staged("x") == []
    assert [e.canonical for e in replica.read("x")] == [e.canonical for e in prims["x"]]
    replica.close()
    again = SQLiteStore.open(tmp_path / "rep.db", read_only=True)
    assert {t: again.head(t) for t in "xyz"} == {"x": 5, "y": 3, "z": 1}
    again.close()


def test_a_replica_over_a_store_that_already_holds_other_events_refuses_the_conflict(tmp_path):
    """Fault: the backing SQLite store already has a different #1 for the trajectory. Goal:
    ConflictingDuplicateError; the stored event is not overwritten."""
    backing = SQLiteStore.open(tmp_path / "rep.db", create=True)
    local = ev(task(), 1, traj="r", event_id="local-1")
    backing.append(local, AckTier.FDATASYNC)
    replica = FollowerReplica(backing)
    with pytest.raises(ConflictingDuplicateError):
        replica.receive([ev(task(ceiling=9.0), 1, traj="r")])
    assert next(iter(replica.read("r"))).digest == local.digest
    assert replica.receive([local]).duplicates == 1
    replica.close()


@pytest.mark.parametrize("bad", [None, 5])
def test_replica_receive_of_a_non_iterable_is_a_typed_error(bad):
    with pytest.raises(StoreError):
        FollowerReplica().receive(bad)


def test_a_bad_member_in_a_replica_batch_stages_nothing():
    """Fault: receive([event #1, "junk"]). Invariant: typed error and nothing half-applied; the
    replica's reports stay truthful (first_gap never names a position it holds). Goal: nothing staged."""
    replica = FollowerReplica()
    with pytest.raises(StoreError):
        replica.receive([ev(task(), 1, traj="r"), "junk"])
    assert replica.staged("r") == [] and replica.first_gap("r") is None


# ================================================================================================
# the notebook
# ================================================================================================


def test_notebook_tenant_label_matches_the_code():
    nb = json.loads((ROOT / "notebooks" / "11_8_retention.ipynb").read_text())
    cells = ["".join(c["source"]) for c in nb["cells"]]
    i = next(k for k, s in enumerate(cells) if "Shared bytes, separate promises" in s)
    tenants = set(re.findall(r'tenant="([^"]+)"', cells[i + 1]))
    ordinals = {"second": 2, "third": 3, "fourth": 4}
    for word, n in ordinals.items():
        if f"{word} tenant" in cells[i]:
            assert len(tenants) >= n, f"the text says '{word} tenant' but the code registers {sorted(tenants)}"
