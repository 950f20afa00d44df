"""A restore at a position whose checkpoint was retired says so, and falls back (§11.4.2, §11.8.3).

Fault model: checkpoints are consolidated into a full base and the superseded deltas are retired
(their manifests and record deltas removed from the blob store), while the ``Checkpoint`` events
that published them stay in the log. Later, someone restores an old position whose newest
checkpoint is one of them.

Invariant: retirement is not data loss. A restore at any position either rebuilds exactly the
fold of the log prefix there (from an older retained checkpoint, or from the log's start when
the log is intact), and reports which checkpoint was retired, by whom and when, and what it fell
back to; or, when no fallback exists, raises :class:`CheckpointRetiredError` naming who retired it
and when. It never reports the retired manifest as "missing".

Goal: the tests below build real logs and blob stores, retire with a caller-given clock, and
compare every restore with the plain fold of the log (the oracle is the reducer, not a constant).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel_lib.checkpoint import Checkpointer, DirectoryBlobStore, MemoryBlobStore, restore
from kernel_lib.checkpoint.retired import Tombstone, scan_trajectory, write_tombstones
from kernel_lib.core.record import fold, initial_record
from kernel_lib.errors import CheckpointRetiredError, UnrecoverableStateError
from kernel_lib.log import MemoryStore, SQLiteStore, TrajectoryLog
from tests.helpers import intent, task

TID = "traj-retired"
RETIRED_AT = 1_700_000_123.5      # the retiring caller's clock (Unix seconds)


def _fold(store, upto):
    return fold(initial_record(TID), list(store.read(TID, 1, upto))).to_dict()


def _chain(store, blobs, n_incremental=3, files=None):
    """task + ops, a full checkpoint, ``n_incremental`` incremental ones (an op between each),
    then a consolidation and the retirement of the superseded deltas. Returns (full capture,
    incremental captures, consolidation, retire report)."""
    log = TrajectoryLog(store, TID, must_survive="none")
    log.append(task(ceiling=100.0))
    for i in range(3):
        log.append(intent(op=f"op{i}"))
    ck = Checkpointer(log, blobs, max_chain=20)
    files = files or {"a.txt": b"a\n"}
    full = ck.capture(fold(initial_record(TID), store.read(TID)), files, kind="full")
    incs = []
    for i in range(n_incremental):
        log.append(intent(op=f"more{i}"))
        log.append(intent(op=f"more{i}b"))
        incs.append(ck.capture(fold(initial_record(TID), store.read(TID)), files, kind="incremental"))
    log.append(intent(op="before-consolidation"))
    ck.capture(fold(initial_record(TID), store.read(TID)), files, kind="incremental")
    cons = ck.consolidate()
    rep = ck.retire(cons, delete=True, now_unix_s=RETIRED_AT)
    log.append(intent(op="after"))
    return full, incs, cons, rep


def test_restore_at_a_retired_delta_falls_back_to_the_older_retained_checkpoint(tmp_path):
    store = SQLiteStore.open(tmp_path / "log.sqlite", create=True)
    blobs = DirectoryBlobStore(str(tmp_path / "blobs"))
    try:
        full, incs, cons, rep = _chain(store, blobs)
        assert rep.deleted, "the consolidation retired nothing: the test would prove nothing"
        old = incs[1]
        pos = old.event.sequence_number + 1          # newest checkpoint at or before pos: the retired delta
        res = restore(store, TID, blobs, target=pos)
        assert res.record.to_dict() == _fold(store, pos)
        assert [t.checkpoint_id for t in res.retired][:1] == [old.checkpoint_id]
        t = res.retired[0]
        assert t.retired_by == "consolidation" and t.retired_at_unix_s == RETIRED_AT
        assert t.replaced_by == cons.capture.checkpoint_id
        assert res.fallback_to == f"checkpoint {full.checkpoint_id}"
        assert res.checkpoint.checkpoint_id == full.checkpoint_id
        assert "consolidation" in res.fallback and full.checkpoint_id in res.fallback
        assert "missing" not in res.fallback
        # the head still restores from the consolidated base, with no fallback
        head = restore(store, TID, blobs)
        assert head.checkpoint.checkpoint_id == cons.capture.checkpoint_id and head.fallback is None
        assert head.retired == () and head.record.to_dict() == _fold(store, store.head(TID))
    finally:
        store.close()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 4), data=st.data())
def test_every_position_restores_to_the_fold_after_retirement(n, data):
    """Property: after consolidation and retirement, a restore at any position equals the fold
    of the log prefix; a position whose newest checkpoint was retired reports the tombstone."""
    store, blobs = MemoryStore(), MemoryBlobStore()
    _full, incs, _cons, rep = _chain(store, blobs, n_incremental=n)
    retired_ids = {t.checkpoint_id for t in scan_trajectory(blobs, TID).tombstones}
    assert {c.checkpoint_id for c in incs} <= retired_ids     # every superseded delta left a tombstone
    assert len(retired_ids) == len(rep.deleted) // 2          # one per manifest (+ its record delta)
    pos = data.draw(st.integers(1, store.head(TID)))
    res = restore(store, TID, blobs, target=pos)
    assert res.record.to_dict() == _fold(store, pos)
    if res.retired:
        assert all(t.retired_by == "consolidation" and t.retired_at_unix_s == RETIRED_AT for t in res.retired)
        assert res.fallback_to and res.fallback_to.startswith("checkpoint ")


def test_with_no_retained_checkpoint_and_an_intact_log_restore_folds_the_log(tmp_path):
    """The only checkpoint at or before the target was retired (here by a named operator with its
    own clock, through the same tombstone path): the log is intact, so restore folds it from the
    start and says so. (The checkpoint has no workspace: one whose workspace only the retired
    checkpoint knew cannot be rebuilt from the log, which the last lines check.)"""
    store, blobs = MemoryStore(), MemoryBlobStore()
    log = TrajectoryLog(store, TID, must_survive="none")
    log.append(task(ceiling=100.0))
    log.append(intent(op="op0"))
    cap = Checkpointer(log, blobs).capture(fold(initial_record(TID), store.read(TID)), None, kind="full")
    log.append(intent(op="op1"))
    write_tombstones(blobs, [Tombstone(TID, cap.checkpoint_id, cap.manifest_sha256, cap.covered_sequence_number,
                                       (cap.manifest_sha256,), "operator alice", RETIRED_AT)])
    del blobs.objects[cap.manifest_sha256]
    res = restore(store, TID, blobs, target=store.head(TID), verify_blobs=False)
    assert res.record.to_dict() == _fold(store, store.head(TID))
    assert res.fallback_to == "log" and res.checkpoint is None
    assert "operator alice" in res.fallback and "folding the log from its start" in res.fallback
    assert "missing" not in res.fallback
    # named explicitly: no silent substitute, but a typed error saying who retired it and when
    with pytest.raises(CheckpointRetiredError) as info:
        restore(store, TID, blobs, checkpoint_id=cap.checkpoint_id)
    e = info.value
    assert (e.checkpoint_id, e.retired_by, e.retired_at_unix_s) == (cap.checkpoint_id, "operator alice", RETIRED_AT)
    assert "missing" not in str(e) and isinstance(e, UnrecoverableStateError)
    # with a workspace named only by the retired checkpoint, the log cannot stand in: typed error
    store2, blobs2 = MemoryStore(), MemoryBlobStore()
    log2 = TrajectoryLog(store2, TID, must_survive="none")
    log2.append(task(ceiling=100.0))
    cap2 = Checkpointer(log2, blobs2).capture(fold(initial_record(TID), store2.read(TID)), {"a": b"1"}, kind="full")
    write_tombstones(blobs2, [Tombstone(TID, cap2.checkpoint_id, cap2.manifest_sha256, cap2.covered_sequence_number,
                                        (cap2.manifest_sha256,), "operator alice", RETIRED_AT)])
    del blobs2.objects[cap2.manifest_sha256]
    with pytest.raises(CheckpointRetiredError, match="workspace") as info:
        restore(store2, TID, blobs2)
    assert info.value.retired_by == "operator alice" and "missing" not in str(info.value)


def test_a_lost_manifest_without_tombstone_still_fails_fast():
    """The contrast: an object removed without a tombstone (real loss) is still reported as such."""
    store, blobs = MemoryStore(), MemoryBlobStore()
    log = TrajectoryLog(store, TID, must_survive="none")
    log.append(task(ceiling=100.0))
    cap = Checkpointer(log, blobs).capture(fold(initial_record(TID), store.read(TID)), {"a": b"1"}, kind="full")
    del blobs.objects[cap.manifest_sha256]
    with pytest.raises(UnrecoverableStateError) as info:
        restore(store, TID, blobs)
    assert not isinstance(info.value, CheckpointRetiredError) and info.value.missing


def test_no_fallback_after_compaction_raises_checkpoint_retired_error(tmp_path):
    """The log prefix before the retired checkpoint was compacted away and no older checkpoint is
    retained: restore cannot fall back, and says the checkpoint was retired, by whom and when."""
    store = SQLiteStore.open(tmp_path / "log.sqlite", create=True)
    blobs = MemoryBlobStore()
    try:
        log = TrajectoryLog(store, TID, must_survive="none")
        log.append(task(ceiling=100.0))
        for i in range(3):
            log.append(intent(op=f"op{i}"))
        cap = Checkpointer(log, blobs).capture(fold(initial_record(TID), store.read(TID)), {"a": b"1"},
                                               kind="full")
        log.append(intent(op="later"))
        store.retire_prefix(TID, cap.covered_sequence_number - 1, checkpoint_event_id=cap.event.event_id)
        write_tombstones(blobs, [Tombstone(TID, cap.checkpoint_id, cap.manifest_sha256, cap.covered_sequence_number,
                                           (cap.manifest_sha256,), "consolidation", RETIRED_AT, "ckpt-x")])
        del blobs.objects[cap.manifest_sha256]
        with pytest.raises(CheckpointRetiredError) as info:
            restore(store, TID, blobs, verify_blobs=False)
        e = info.value
        assert (e.retired_by, e.retired_at_unix_s, e.replaced_by) == ("consolidation", RETIRED_AT, "ckpt-x")
        assert "compaction" in str(e) and "missing" not in str(e)
    finally:
        store.close()
