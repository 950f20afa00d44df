"""Adversarial review of the checkpoint package (§11.4.1, §11.4.2): each test names its fault
model, the invariant it checks and the goal, and failed before the fix it guards.

Overall invariant: restore at position t either equals folding events 1..t from record_0, with
the workspace tree that holds at t, or raises a typed error naming what is wrong; it never pairs
a log position with a record or tree that belongs to another log or an earlier position. Capture
never publishes a checkpoint whose bytes are not in the store, nor one built on a missing base.
Every error a caller can provoke is a :class:`~kernel_lib.errors.KernelError`, never a raw
OSError or TypeError.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kernel_lib.checkpoint import (
    Checkpointer,
    DirectoryBlobStore,
    MemoryBlobStore,
    files_tree,
    log_workspace_change,
    scan_directory,
    store_tree,
)
import kernel_lib.checkpoint.restore as restore
from kernel_lib.checkpoint.manifest import CheckpointManifest
from kernel_lib.checkpoint.restore import find_checkpoint
from kernel_lib.checkpoint.state import canonical
from kernel_lib.errors import CheckpointError, UnrecoverableStateError
from kernel_lib.core.events import CheckpointV2
from kernel_lib.log import MemoryStore, TrajectoryLog
from kernel_lib.core.record import fold, initial_record
from tests.helpers import intent, task

TID = "traj-adv"


def _log(n_intents: int, prefix: str, store: MemoryStore | None = None):
    store = store or MemoryStore()
    log = TrajectoryLog(store, TID, must_survive="none")
    log.append(task(ceiling=100.0))
    for i in range(n_intents):
        log.append(intent(op=f"{prefix}{i}"))
    return store, log


def _rec(store):
    return fold(initial_record(TID), store.read(TID))


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


# --- 1. a Checkpoint event that does not belong to this log --------------------------------------


def _foreign_checkpoint(blobs):
    store_a, log_a = _log(10, "a")                       # 11 events
    ra = Checkpointer(log_a, blobs).capture(_rec(store_a), {"f": b"from log A"}, kind="full")
    assert ra.covered_sequence_number == 11
    return ra


def test_a_checkpoint_event_covering_a_position_at_or_after_itself_is_not_used():
    """Fault: a Checkpoint payload of another log (same trajectory id) is appended by hand at
    position 4 while it claims to cover position 11. Invariant: a checkpoint covers a position
    before its own event and at or before the target; restore never returns a record at 11 for
    target 4. Goal: such an event is skipped (it cannot be this log's checkpoint), restore equals
    the fold, and naming it explicitly is refused with an error naming it."""
    blobs = MemoryBlobStore()
    ra = _foreign_checkpoint(blobs)
    store_b, log_b = _log(2, "b")
    log_b.append(ra.event.payload)                        # lands at position 4
    res = restore(store_b, TID, blobs, target=4)
    assert res.record.last_sequence_number == 4
    assert res.record.to_dict() == _rec(store_b).to_dict()
    assert res.checkpoint is None and res.tree is None
    ev, _ = find_checkpoint(store_b, TID, 4)
    assert ev is None
    with pytest.raises(UnrecoverableStateError, match=ra.checkpoint_id):
        restore(store_b, TID, blobs, target=4, checkpoint_id=ra.checkpoint_id)
    # a new capture on log B does not build on it
    ck = Checkpointer(log_b, blobs)
    assert ck.latest is None
    assert ck.capture(_rec(store_b), {"f": b"B"}, kind="auto").kind == "full"


def test_a_checkpoint_of_another_log_at_a_plausible_position_is_refused():
    """Fault: the same foreign payload lands at position 17 of a log whose event 11 is not log
    A's event 11. Invariant: a manifest is bound to the event at its covered position (its
    digest); restore never folds B's events onto A's record. Goal: UnrecoverableStateError naming
    the checkpoint, for the head and for any target after the foreign event."""
    blobs = MemoryBlobStore()
    ra = _foreign_checkpoint(blobs)
    store_b, log_b = _log(15, "b")                       # 16 events
    log_b.append(ra.event.payload)                        # position 17, covering 11
    for target in (17, None):
        with pytest.raises(UnrecoverableStateError, match=ra.checkpoint_id) as exc:
            restore(store_b, TID, blobs, target=target)
        assert exc.value.missing
    # before the foreign event, restore is unaffected
    assert restore(store_b, TID, blobs, target=16).record.to_dict() == fold(
        initial_record(TID), list(store_b.read(TID))[:16]).to_dict()
    # a capture must not take it as a base: auto falls back to a full one, incremental refuses
    ck = Checkpointer(log_b, blobs)
    with pytest.raises(CheckpointError, match="base"):
        ck.capture(_rec(store_b), {"f": b"B"}, kind="incremental")
    r = Checkpointer(log_b, blobs).capture(_rec(store_b), {"f": b"B"}, kind="auto")
    assert r.kind == "full"
    assert restore(store_b, TID, blobs).record.to_dict() == _rec(store_b).to_dict()


def test_the_manifest_records_the_digest_of_its_covered_event_and_old_manifests_still_restore():
    """Goal: the manifest (format 2) carries the digest of the event at its covered position;
    a format-1 manifest (without it) is still read and restored from."""
    blobs = MemoryBlobStore()
    store, log = _log(3, "op")
    r = Checkpointer(log, blobs).capture(_rec(store), {"f": b"1"}, kind="full")
    m = CheckpointManifest.from_bytes(blobs.get(r.manifest_sha256))
    event_p = list(store.read(TID, 4, 4))[0]
    assert m.covered_event_sha256 == event_p.digest
    raw = json.loads(blobs.get(r.manifest_sha256))
    assert raw["format"] == "kernel_lib.checkpoint/2"
    # an old manifest: format 1, no covered-event digest
    raw["format"] = "kernel_lib.checkpoint/1"
    del raw["covered_event_sha256"]
    old = blobs.put(canonical(raw))
    log.append(intent(op="later"))
    p = r.event.payload
    log.append(CheckpointV2(checkpoint_id=p.checkpoint_id, covered_sequence_number=p.covered_sequence_number,
                            manifest_sha256=old, kind="full", record_sha256=p.record_sha256,
                            workspace_tree_sha256=p.workspace_tree_sha256))
    res = restore(store, TID, blobs)
    assert res.checkpoint_manifest_sha256 == old and res.checkpoint.covered_event_sha256 is None
    assert res.record.to_dict() == _rec(store).to_dict()
    assert res.tree == files_tree({"f": b"1"})[0]


# --- 2. restore from an older checkpoint keeps the newer tree a later checkpoint names -----------


def _two_trees_no_logged_change(blobs):
    store, log = _log(3, "op")
    ck = Checkpointer(log, blobs)
    r0 = ck.capture(_rec(store), {"a": b"v1"}, kind="full")
    log.append(intent(op="x"))
    r1 = ck.capture(_rec(store), {"a": b"v2"}, kind="incremental")
    log.append(intent(op="y"))
    return store, log, r0, r1


def test_restore_from_an_older_checkpoint_never_pairs_a_later_position_with_the_older_tree(tmp_path):
    """Fault: the workspace changed between two checkpoints without a WorkspaceChanged event, and
    restore is asked to start from the older one. Invariant: restore never pairs a later log
    position with an older tree. Goal: the tree named by the later Checkpoint event in the suffix
    is honoured (verified, then used), so every start gives the same record and tree."""
    blobs = MemoryBlobStore()
    store, _, r0, _ = _two_trees_no_logged_change(blobs)
    head = store.head(TID)
    v2 = files_tree({"a": b"v2"})[0]
    newest = restore(store, TID, blobs, target=head)
    older = restore(store, TID, blobs, target=head, checkpoint_id=r0.checkpoint_id, dest=tmp_path / "out")
    assert newest.tree == older.tree == v2
    assert _files(tmp_path / "out") == {"a": b"v2"}
    assert older.record.to_dict() == newest.record.to_dict() == _rec(store).to_dict()
    # at every position, every usable start agrees with the newest checkpoint
    for t in range(r0.event.sequence_number, head + 1):
        want = restore(store, TID, blobs, target=t)
        got = restore(store, TID, blobs, target=t, checkpoint_id=r0.checkpoint_id)
        assert (got.tree, got.record.to_dict()) == (want.tree, want.record.to_dict())


def test_restore_from_an_older_checkpoint_refuses_when_the_newer_tree_cannot_be_verified():
    """Fault: the later checkpoint's workspace delta is lost. Invariant: as above. Goal: restore
    from the older checkpoint fails with UnrecoverableStateError naming the object, rather than
    return the older tree."""
    blobs = MemoryBlobStore()
    store, _, r0, r1 = _two_trees_no_logged_change(blobs)
    m1 = json.loads(blobs.get(r1.manifest_sha256))
    del blobs.objects[m1["workspace"]["delta"]]
    with pytest.raises(UnrecoverableStateError) as exc:
        restore(store, TID, blobs, checkpoint_id=r0.checkpoint_id)
    assert m1["workspace"]["delta"] in " ".join(n for _, n in exc.value.missing)
    # before the later checkpoint's event, the older tree is the right one
    res = restore(store, TID, blobs, target=r1.event.sequence_number - 1)
    assert res.tree == files_tree({"a": b"v1"})[0]


# --- 3. a stale checkpointer after consolidation and retirement ----------------------------------


def test_a_stale_checkpointer_does_not_publish_on_a_retired_base():
    """Fault: checkpointer B cached A's incremental checkpoint; A then captured again,
    consolidated and deleted the superseded deltas. Invariant: a new capture never builds on a
    base whose objects are gone. Goal: B re-reads the log's newest checkpoint before publishing,
    so its incremental builds on the consolidated base and restore and a fresh checkpointer work."""
    blobs = MemoryBlobStore()
    store, log = _log(2, "op")
    files = {"a": b"1"}
    a = Checkpointer(log, blobs)
    a.capture(_rec(store), files, kind="full")
    log.append(intent(op="x1"))
    a.capture(_rec(store), files, kind="incremental")
    b = Checkpointer(log, blobs)
    assert b.latest.kind == "incremental"
    log.append(intent(op="x2"))
    a.capture(_rec(store), files, kind="incremental")
    cons = a.consolidate()
    a.retire(cons, delete=True)
    log.append(intent(op="x3"))
    r = b.capture(_rec(store), {"a": b"2"}, kind="incremental")
    assert r.chain_length == 1
    assert r.event.payload.base_checkpoint_id == cons.capture.checkpoint_id
    res = restore(store, TID, blobs)
    assert res.record.to_dict() == _rec(store).to_dict() and res.tree == files_tree({"a": b"2"})[0]
    assert Checkpointer(log, blobs).latest.checkpoint_id == r.checkpoint_id


def test_a_capture_never_builds_on_a_base_whose_objects_are_missing():
    """Fault: the newest checkpoint's record delta was lost. Invariant: as above. Goal:
    ``incremental`` refuses with CheckpointError (nothing published); ``auto`` captures a full
    checkpoint instead; restore at the damaged checkpoint's position still fails fast."""
    blobs = MemoryBlobStore()
    store, log = _log(2, "op")
    ck = Checkpointer(log, blobs)
    ck.capture(_rec(store), {"a": b"1"}, kind="full")
    log.append(intent(op="x1"))
    inc = ck.capture(_rec(store), {"a": b"1"}, kind="incremental")
    del blobs.objects[json.loads(blobs.get(inc.manifest_sha256))["record"]["delta"]]
    log.append(intent(op="x2"))
    head = store.head(TID)
    for fresh in (False, True):
        c = Checkpointer(log, blobs) if fresh else ck
        with pytest.raises(CheckpointError, match="base"):
            c.capture(_rec(store), {"a": b"1"}, kind="incremental")
        assert store.head(TID) == head
    r = ck.capture(_rec(store), {"a": b"1"}, kind="auto")
    assert r.kind == "full"
    assert restore(store, TID, blobs).record.to_dict() == _rec(store).to_dict()
    with pytest.raises(UnrecoverableStateError):
        restore(store, TID, blobs, target=head)


def test_retire_keeps_objects_a_later_checkpoint_in_the_log_still_needs():
    """Fault: after a consolidation, a checkpoint whose chain runs through the superseded deltas
    is published (a stale writer). Invariant: retirement never deletes an object that a
    published checkpoint after the consolidated base needs. Goal: those objects are kept and
    reported; restore at the head still works."""
    blobs = MemoryBlobStore()
    store, log = _log(2, "op")
    ck = Checkpointer(log, blobs)
    ck.capture(_rec(store), {"a": b"1"}, kind="full")
    log.append(intent(op="x1"))
    inc = ck.capture(_rec(store), {"a": b"1"}, kind="incremental")
    cons = ck.consolidate()
    log.append(inc.event.payload)                # a stale writer republishes the superseded delta
    rep = ck.retire(cons, delete=True)
    assert inc.manifest_sha256 in rep.kept and inc.manifest_sha256 not in rep.deleted
    res = restore(store, TID, blobs)
    assert res.checkpoint.checkpoint_id == inc.checkpoint_id
    assert res.record.to_dict() == _rec(store).to_dict()


# --- 4. the directory blob store must not trust its memory over the disk -------------------------


def test_a_put_rewrites_an_object_deleted_or_damaged_on_disk_after_this_store_wrote_it(tmp_path):
    """Fault: another process (or a GC) deletes, truncates or overwrites an object file after
    this store object wrote or verified it. Invariant: put_many returns only when every object is
    on disk with the right bytes. Goal: the object is written again; a capture after the loss
    publishes a checkpoint that restores."""
    blobs = DirectoryBlobStore(str(tmp_path / "b"))
    d = blobs.put(b"hello")
    path = Path(blobs.path_of(d))
    for damage in ("delete", "truncate", "same size"):
        if damage == "delete":
            path.unlink()
        elif damage == "truncate":
            path.write_bytes(b"hel")
        else:
            path.write_bytes(b"jello")
        assert blobs.put_many([b"hello"]).objects_written == 1, damage
        assert path.read_bytes() == b"hello"
    assert blobs.put_many([b"hello"]).objects_skipped == 1

    store, log = _log(1, "op")
    ck = Checkpointer(log, blobs)
    ck.capture(_rec(store), {"f": b"file bytes"}, kind="full")
    Path(blobs.path_of(files_tree({"f": b"file bytes"})[0].files["f"].sha256)).unlink()
    log.append(intent(op="x"))
    ck.capture(_rec(store), {"f": b"file bytes"}, kind="full")
    assert restore(store, TID, DirectoryBlobStore(str(tmp_path / "b"))).tree == files_tree({"f": b"file bytes"})[0]


# --- 5. a directory that cannot be listed ----------------------------------------------------------


def test_scan_refuses_a_subdirectory_it_cannot_list(tmp_path, monkeypatch):
    """Fault: a subdirectory of the workspace cannot be listed (permissions, I/O error).
    Invariant: a snapshot holds every file of the workspace or none. Goal: CheckpointError naming
    the directory; no checkpoint is published."""
    ws = tmp_path / "ws"
    (ws / "secret").mkdir(parents=True)
    (ws / "secret" / "key.txt").write_bytes(b"k")
    (ws / "a.txt").write_bytes(b"a")
    real = os.scandir

    def scandir(path="."):
        if os.fspath(path).endswith("secret"):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    with pytest.raises(CheckpointError, match="secret"):
        scan_directory(ws)
    store, log = _log(1, "op")
    head = store.head(TID)
    with pytest.raises(CheckpointError, match="secret"):
        Checkpointer(log, MemoryBlobStore()).capture(_rec(store), ws)
    assert store.head(TID) == head


# --- 6. a workspace change logged against a stale base -------------------------------------------


def test_a_workspace_change_from_a_stale_base_is_refused_and_nothing_is_appended():
    """Fault: a caller passes an old tree as the base of a workspace change. Invariant: every
    WorkspaceChanged event starts from the tree the log holds at that point (the last logged
    change, else the newest checkpoint's tree), so every later position still folds and restores.
    Goal: CheckpointError, nothing appended."""
    blobs = MemoryBlobStore()
    store, log = _log(1, "op")
    t0 = store_tree(blobs, {"a": b"0"})
    t1 = log_workspace_change(log, blobs, t0, {"a": b"1"}).tree
    head = store.head(TID)
    with pytest.raises(CheckpointError, match="base"):
        log_workspace_change(log, blobs, t0, {"a": b"2"})
    assert store.head(TID) == head
    log_workspace_change(log, blobs, t1, {"a": b"2"})
    assert restore(store, TID, blobs).tree == files_tree({"a": b"2"})[0]

    # with no logged change, the newest checkpoint's tree is the base
    store, log = _log(1, "op")
    Checkpointer(log, blobs).capture(_rec(store), {"a": b"ck"}, kind="full")
    head = store.head(TID)
    with pytest.raises(CheckpointError, match="base"):
        log_workspace_change(log, blobs, t0, {"a": b"3"})
    assert store.head(TID) == head
    log_workspace_change(log, blobs, files_tree({"a": b"ck"})[0], {"a": b"3"})
    assert restore(store, TID, blobs).tree == files_tree({"a": b"3"})[0]


# --- 7. a tree the destination file system cannot hold ---------------------------------------------


@pytest.mark.parametrize("bad", ["n" * 300, "/".join(["d" * 200] * 25) + "/f"])
def test_restore_into_a_directory_that_cannot_hold_the_tree_leaves_nothing_behind(tmp_path, bad):
    """Fault: a captured path is longer than the destination file system allows (a 300-character
    name, a path beyond PATH_MAX). Invariant: restore(dest=...) writes the whole tree or nothing.
    Goal: a typed error; dest is left as it was (absent, or empty) and no temporary sibling
    remains, so a retry meets the same error instead of "not empty"."""
    blobs = MemoryBlobStore()
    store, log = _log(1, "op")
    Checkpointer(log, blobs).capture(_rec(store), {"a.txt": b"a", bad: b"b", "z.txt": b"z"}, kind="full")
    parent = tmp_path / "p"
    parent.mkdir()
    for existing in (False, True):
        dest = parent / "out"
        if existing:
            dest.mkdir()
        for _ in range(2):                                   # a retry fails the same way
            with pytest.raises(CheckpointError, match="cannot"):
                restore(store, TID, blobs, dest=dest)
            assert sorted(os.listdir(parent)) == (["out"] if existing else [])
            if existing:
                assert os.listdir(dest) == []


def test_restore_into_an_existing_empty_directory_is_complete_and_leaves_no_sibling(tmp_path):
    blobs = MemoryBlobStore()
    store, log = _log(1, "op")
    files = {"a.txt": b"a", "src/b.py": b"b", "run.sh": (b"#!/bin/sh\n", True)}
    Checkpointer(log, blobs).capture(_rec(store), files, kind="full")
    dest = tmp_path / "out"
    dest.mkdir()
    res = restore(store, TID, blobs, dest=dest)
    assert res.workspace_dir == dest and sorted(os.listdir(tmp_path)) == ["out"]
    assert _files(dest) == {"a.txt": b"a", "src/b.py": b"b", "run.sh": b"#!/bin/sh\n"}
    assert os.stat(dest / "run.sh").st_mode & 0o777 == 0o755
    with pytest.raises(CheckpointError, match="not an empty directory"):
        restore(store, TID, blobs, dest=dest)


# --- 8. typed errors instead of raw OS errors ------------------------------------------------------


def test_a_file_vanishing_during_the_scan_is_a_checkpoint_error(tmp_path, monkeypatch):
    """Fault: a file is deleted between the directory listing and its stat (a tool still running).
    Goal: CheckpointError naming the file, not FileNotFoundError."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_bytes(b"a")
    (ws / "gone.txt").write_bytes(b"g")
    real = os.walk

    def walk(top, *a, **kw):
        for dirpath, dirnames, filenames in real(top, *a, **kw):
            if "gone.txt" in filenames:
                os.remove(os.path.join(dirpath, "gone.txt"))
            yield dirpath, dirnames, filenames

    monkeypatch.setattr(os, "walk", walk)
    with pytest.raises(CheckpointError, match="gone.txt"):
        scan_directory(ws)


@pytest.mark.parametrize("case", ["dangling symlink", "under a regular file", "symlink to an empty dir"])
def test_a_bad_destination_is_a_checkpoint_error_and_is_left_alone(tmp_path, case):
    """Fault: ``dest`` is a dangling symbolic link, lies under a regular file, or is a link.
    Goal: CheckpointError naming dest; nothing created or changed there."""
    blobs = MemoryBlobStore()
    store, log = _log(1, "op")
    Checkpointer(log, blobs).capture(_rec(store), {"a": b"1"}, kind="full")
    if case == "dangling symlink":
        dest = tmp_path / "link"
        dest.symlink_to(tmp_path / "nowhere")
    elif case == "under a regular file":
        (tmp_path / "file").write_bytes(b"x")
        dest = tmp_path / "file" / "out"
    else:
        (tmp_path / "empty").mkdir()
        dest = tmp_path / "link"
        dest.symlink_to(tmp_path / "empty")
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(CheckpointError, match="cannot"):
        restore(store, TID, blobs, dest=dest)
    assert sorted(os.listdir(tmp_path)) == before
    assert not (tmp_path / "nowhere").exists() and (case != "symlink to an empty dir"
                                                     or os.listdir(tmp_path / "empty") == [])


def test_a_blob_path_taken_by_a_directory_is_a_typed_error(tmp_path):
    """Fault: the file name of an object is taken by a directory (or its fan-out directory by a
    file). Goal: put raises CheckpointError naming the object; get reports it missing."""
    blobs = DirectoryBlobStore(str(tmp_path / "b"))
    d = files_tree({"x": b"x"})[0].files["x"].sha256
    os.makedirs(blobs.path_of(d))
    with pytest.raises(CheckpointError, match=d[:16]):
        blobs.put(b"x")
    with pytest.raises(UnrecoverableStateError, match="missing"):
        blobs.get(d)
    other = files_tree({"y": b"y"})[0].files["y"].sha256
    Path(blobs.root, other[:2]).write_bytes(b"not a directory")
    with pytest.raises(CheckpointError, match=other[:16]):
        blobs.put(b"y")


@pytest.mark.parametrize("workspace", [b"/tmp", ["a.txt"], 5, {"a": "text, not bytes"}])
def test_a_workspace_of_the_wrong_type_is_a_checkpoint_error(workspace):
    """Fault: the workspace is given as bytes, a list, a number or a mapping to text. Goal:
    CheckpointError saying what a workspace may be; nothing published."""
    blobs = MemoryBlobStore()
    store, log = _log(1, "op")
    head = store.head(TID)
    with pytest.raises(CheckpointError, match="workspace"):
        Checkpointer(log, blobs).capture(_rec(store), workspace)
    with pytest.raises(CheckpointError, match="workspace"):
        store_tree(blobs, workspace)
    with pytest.raises(CheckpointError, match="workspace"):
        log_workspace_change(log, blobs, files_tree({})[0], workspace)
    assert store.head(TID) == head


def test_an_empty_workspace_is_a_tree_not_the_absence_of_one():
    """Fault: every file is deleted, then a checkpoint is captured (the tree is empty, and an
    empty tree is falsy in Python). Invariant: an empty tree is still the tree at that position.
    Goal: restore from either checkpoint at every position gives the empty tree after the change."""
    blobs = MemoryBlobStore()
    store, log = _log(1, "op")
    ck = Checkpointer(log, blobs)
    r0 = ck.capture(_rec(store), {"a.py": b"1"}, kind="full")
    log_workspace_change(log, blobs, files_tree({"a.py": b"1"})[0], {})
    r1 = ck.capture(_rec(store), {}, kind="incremental")
    assert r1.tree_sha256 == files_tree({})[0].sha256
    log.append(intent(op="after"))
    for t in range(r1.event.sequence_number, store.head(TID) + 1):
        for start in (None, r0.checkpoint_id, r1.checkpoint_id):
            assert restore(store, TID, blobs, target=t, checkpoint_id=start).tree == files_tree({})[0]


def test_two_checkpoints_naming_different_trees_for_one_position_are_refused():
    """Fault: a second Checkpoint event (hand-appended) covers the same position as the one
    restore starts from but names another tree. Invariant: restore never silently picks one of
    two conflicting trees for a position. Goal: UnrecoverableStateError naming the tree."""
    blobs = MemoryBlobStore()
    store, log = _log(1, "op")
    r0 = Checkpointer(log, blobs).capture(_rec(store), {"a": b"v1"}, kind="full")
    other_store, other_log = _log(1, "op")            # same events 1..2, so the binding holds
    r_other = Checkpointer(other_log, blobs).capture(_rec(other_store), {"a": b"v2"}, kind="full")
    assert r_other.covered_sequence_number == r0.covered_sequence_number
    log.append(r_other.event.payload)
    with pytest.raises(UnrecoverableStateError, match="same position") as exc:
        restore(store, TID, blobs, checkpoint_id=r0.checkpoint_id)
    assert exc.value.missing == (("workspace tree", r_other.tree_sha256),)
