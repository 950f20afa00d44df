"""Checkpoints and snapshots (§11.4.1, §11.4.2): record round trip, capture, restore, delta chains,
consolidation, and fail-fast restore when a delta or blob is lost.

Fault model: a worker is replaced at any log position; blob-store objects may be lost or damaged.
Invariant: restore at position t equals folding events 1..t from record_0, with the workspace the
log names at t, or it fails with a typed error naming what is missing. Goal: recovery from the
newest checkpoint plus its suffix, with its costs (bytes written, pause, restore time) reported.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib.checkpoint import (
    Checkpointer,
    DirectoryBlobStore,
    MemoryBlobStore,
    Tree,
    files_tree,
    log_workspace_change,
    scan_directory,
    store_tree,
)
import kernel_lib.checkpoint.restore as restore
from kernel_lib.checkpoint.state import (apply_state_delta, decode_record_state, diff_state, encode_record_state,
                                        record_from_snapshot)
from kernel_lib.errors import CheckpointError, ConfigError, RecordFormatError, UnrecoverableStateError
from kernel_lib.core.events import CheckpointV2, decode
from kernel_lib.log import MemoryStore, TrajectoryLog
from kernel_lib.log.base import AckTier
from kernel_lib.core.record import TrajectoryRecord, fold, fold_into, fork, initial_record
from tests.helpers import ev, intent, task
from tests.test_record_fold import record_run, steps_strategy

TID = "traj-h"


# --- record snapshots round-trip exactly --------------------------------------------------------


@settings(max_examples=40)
@given(steps=steps_strategy, data=st.data())
def test_record_round_trips_exactly_through_state_dict_and_json(steps, data):
    events, _ = record_run(steps)
    k = data.draw(st.integers(0, len(events)))
    rec = fold(initial_record(TID), events[:k])
    state = rec.state_dict()
    full = dataclasses.asdict(rec)
    if not full["masked_actions"]:       # left out while empty (issue 18): snapshots keep their bytes
        del full["masked_actions"]
    assert state == full                                         # same content as asdict, cheaper
    assert TrajectoryRecord.from_dict(state) == rec              # exact, field for field
    data = encode_record_state(state)                              # the snapshot bytes
    back = TrajectoryRecord.from_dict(decode_record_state(data)[0])
    assert back == rec and encode_record_state(back.state_dict()) == data
    assert list(back.operations) == list(rec.operations)           # the table keeps log order
    direct = record_from_snapshot(data)                             # the restore path: rows to objects
    assert direct == rec and list(direct.operations) == list(rec.operations)
    assert list(direct.budget.reservations) == list(rec.budget.reservations)
    assert TrajectoryRecord.from_dict(rec.to_dict()).to_dict() == rec.to_dict()   # from the view too
    # a record rebuilt from a snapshot folds on exactly like the original
    assert fold(back, events[k:]).to_dict() == fold(initial_record(TID), events).to_dict()


def test_from_dict_refuses_what_is_not_a_record():
    for bad in ({}, {"trajectory_id": "t", "bogus": 1}, {"trajectory_id": "t", "operations": {"o": {"kind": "tool"}}},
                [], {"trajectory_id": "t", "budget": {"reservations": {"r": {"amount_usd": 1}}}}):
        with pytest.raises(RecordFormatError):
            TrajectoryRecord.from_dict(bad)


@settings(max_examples=40)
@given(steps=steps_strategy, data=st.data())
def test_fork_then_fold_equals_fold_and_leaves_the_original_alone(steps, data):
    events, _ = record_run(steps)
    k = data.draw(st.integers(0, len(events)))
    base = fold(initial_record(TID), events[:k])
    before = json.dumps(base.state_dict(), sort_keys=True)
    forked = fold_into(fork(base, events[k:]), events[k:])
    assert forked.to_dict() == fold(base, events[k:]).to_dict()
    assert json.dumps(base.state_dict(), sort_keys=True) == before


@settings(max_examples=60)
@given(steps=st.lists(st.one_of(st.integers(-2**53 + 1, 2**53 - 1), st.text(max_size=3), st.booleans(), st.none(),
                                st.floats(-1e6, 1e6)), max_size=6), data=st.data())
def test_record_delta_rebuilds_the_new_state_exactly(steps, data):
    a = {"k": steps, "d": {"x": 1, "y": [1, 2]}, "flag": 1}
    b = json.loads(json.dumps(a))
    b["k"] = steps + data.draw(st.lists(st.integers(-1000, 1000), max_size=3))
    b["d"].pop("x")
    b["d"]["z"] = {"n": True}
    b["flag"] = data.draw(st.sampled_from([1, True, 1.5, None]))
    out = apply_state_delta(json.loads(json.dumps(a)), diff_state(a, b))
    assert rfc8785.dumps(out) == rfc8785.dumps(b)


# --- restore-then-fold equals fold-from-start ---------------------------------------------------


def _build_log(events, cuts, blobs, kinds):
    """Store ``events`` with a checkpoint captured after each cut position; return (store, all events)."""
    store = MemoryStore()
    log = TrajectoryLog(store, TID, must_survive="none")
    ck = Checkpointer(log, blobs)
    shift, done = 0, 0
    for cut, kind in zip(cuts, kinds):
        batch = [e.restamp(sequence_number=e.sequence_number + shift) for e in events[done:cut]]
        if batch:
            store.append_batch(batch, AckTier.MEMORY)
        log = TrajectoryLog(store, TID, must_survive="none")
        ck.log = log
        rec = fold(initial_record(TID), store.read(TID))
        log.control_epoch = rec.control_epoch
        ck.capture(rec, None, kind=kind)
        shift += 1
        done = cut
    rest = [e.restamp(sequence_number=e.sequence_number + shift) for e in events[done:]]
    if rest:
        store.append_batch(rest, AckTier.MEMORY)
    return store, list(store.read(TID))


@settings(max_examples=40)
@given(steps=steps_strategy, data=st.data())
def test_restore_then_fold_equals_fold_from_start_for_every_checkpoint_and_target(steps, data):
    """Invariant: for any log, any checkpoint positions p (full, then incremental) and any target
    t, restore(t) == fold(record_0, events[1..t])."""
    events, _ = record_run(steps)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(events)), min_size=1, max_size=3)))
    kinds = ["full"] + [data.draw(st.sampled_from(["incremental", "full", "auto"])) for _ in cuts[1:]]
    blobs = MemoryBlobStore()
    store, all_events = _build_log(events, cuts, blobs, kinds)
    for t in range(len(all_events) + 1):
        res = restore(store, TID, blobs, target=t)
        want = fold(initial_record(TID), all_events[:t])
        assert res.record.to_dict() == want.to_dict()
        assert res.record.state_dict() == want.state_dict()
        ckpts = [e for e in all_events[:t] if isinstance(e.payload, CheckpointV2)]
        if ckpts:   # the newest checkpoint at or before t was used, and only its suffix folded
            assert res.checkpoint.checkpoint_id == ckpts[-1].payload.checkpoint_id
            assert res.suffix_events == t - ckpts[-1].payload.covered_sequence_number
        else:
            assert res.checkpoint is None and res.suffix_events == t


# --- workspace trees, deltas and logged changes --------------------------------------------------

FILE_OPS = st.lists(st.tuples(st.sampled_from(["write", "delete", "chmod", "event", "checkpoint"]),
                              st.sampled_from(["a.py", "src/b.py", "src/c/d.txt", "README"]),
                              st.binary(max_size=12)), min_size=1, max_size=14)


@settings(max_examples=40)
@given(ops=FILE_OPS)
def test_logged_workspace_changes_restore_the_tree_of_every_position(ops, tmp_path_factory):
    """Invariant: the workspace restored at t is exactly the files the log's workspace changes
    produced by t, whichever checkpoints (full or incremental) came before."""
    blobs = MemoryBlobStore()
    store = MemoryStore()
    log = TrajectoryLog(store, TID, must_survive="none")
    log.append(task())
    files: dict[str, tuple[bytes, bool]] = {"a.py": (b"print(1)\n", False)}
    tree = store_tree(blobs, files)
    ck = Checkpointer(log, blobs, max_chain=2)
    ck.capture(fold(initial_record(TID), store.read(TID)), files, kind="full")
    expect = {}    # position -> files
    for i, (op, path, data) in enumerate(ops):
        new = dict(files)
        if op == "write":
            new[path] = (data, new.get(path, (b"", False))[1])
        elif op == "delete":
            new.pop(path, None)
        elif op == "chmod" and path in new:
            new[path] = (new[path][0], not new[path][1])
        elif op == "event":
            log.append(intent(op=f"op{i}"))
        elif op == "checkpoint":
            ck.capture(fold(initial_record(TID), store.read(TID)), files, kind="auto")
        if new != files:
            res = log_workspace_change(log, blobs, tree, new, operation_id=f"op{i}")
            tree, files = res.tree, new
        expect[store.head(TID)] = dict(files)
    for t, want in expect.items():
        out = tmp_path_factory.mktemp("ws")
        os.rmdir(out)
        res = restore(store, TID, blobs, target=t, dest=out)
        assert res.tree == files_tree(want)[0]
        got = {p.relative_to(out).as_posix(): (p.read_bytes(), bool(p.stat().st_mode & 0o100))
               for p in out.rglob("*") if p.is_file()}
        assert got == want


def test_directory_snapshot_keeps_bytes_and_executable_flag_and_refuses_links(tmp_path):
    ws = tmp_path / "ws"
    (ws / "pkg").mkdir(parents=True)
    (ws / "pkg" / "m.py").write_bytes(b"x = 1\n")
    (ws / "run.sh").write_bytes(b"#!/bin/sh\n")
    (ws / "run.sh").chmod(0o755)
    (ws / "empty.txt").write_bytes(b"")
    tree, datas = scan_directory(ws)
    assert {p: (e.size, e.executable) for p, e in tree.files.items()} == {
        "empty.txt": (0, False), "pkg/m.py": (6, False), "run.sh": (10, True)}
    assert Tree.from_bytes(tree.canonical) == tree
    (ws / "link").symlink_to(ws / "run.sh")
    with pytest.raises(CheckpointError, match="link"):
        scan_directory(ws)


# --- capture: publication order, torn boundaries, costs ----------------------------------------


def _started(blobs=None, n_ops=3):
    store = MemoryStore()
    log = TrajectoryLog(store, TID, must_survive="none")
    log.append(task(ceiling=100.0))
    for i in range(n_ops):
        log.append(intent(op=f"op{i}"))
    return store, log, blobs or MemoryBlobStore()


def test_capture_refuses_a_torn_pair_and_publishes_nothing():
    """Fault: the workspace on disk is not the tree the log names at p (a tool wrote after the
    last logged change). Invariant: no checkpoint pairs that record with those files."""
    store, log, blobs = _started()
    t0 = store_tree(blobs, {"a.py": b"1"})
    log_workspace_change(log, blobs, t0, {"a.py": b"2"})
    rec = fold(initial_record(TID), store.read(TID))
    head = store.head(TID)
    with pytest.raises(CheckpointError, match="torn"):
        Checkpointer(log, blobs).capture(rec, {"a.py": b"3"})
    with pytest.raises(CheckpointError, match="quiet boundary"):
        Checkpointer(log, blobs).capture(fold(initial_record(TID), list(store.read(TID))[:-1]), {"a.py": b"2"})
    assert store.head(TID) == head                               # nothing published
    assert restore(store, TID, blobs).tree.files["a.py"].sha256 == files_tree({"a.py": b"2"})[0].files["a.py"].sha256


def test_the_checkpoint_event_comes_after_its_bytes_are_durable(tmp_path):
    """Invariant (publication follows availability): when the Checkpoint event is appended, every
    object it names is already stored and synced."""
    seen = []

    class Watching(MemoryStore):
        def append_batch(self, events, tier):
            for e in events:
                if isinstance(e.payload, CheckpointV2):
                    seen.append(all(blobs.has(d) for d in (e.payload.manifest_sha256, e.payload.record_sha256,
                                                            e.payload.workspace_tree_sha256)))
            return super().append_batch(events, tier)

    store = Watching()
    blobs = DirectoryBlobStore(str(tmp_path / "blobs"))
    log = TrajectoryLog(store, TID, must_survive="none")
    log.append(task())
    Checkpointer(log, blobs).capture(fold(initial_record(TID), store.read(TID)), {"f": b"data"})
    assert seen == [True]


def test_incremental_writes_less_than_full_as_state_accumulates_and_reports_its_costs():
    """Goal (§11.4.2, eq. 3): with state growing turn by turn, each full snapshot rewrites the
    accumulated state while a delta holds what changed; both report bytes, pause and restore."""
    figures = {}
    for kind in ("full", "incremental"):
        store, log, blobs = _started(n_ops=0)
        ck = Checkpointer(log, blobs, max_chain=100)
        files = {}
        written = []
        for turn in range(8):
            for i in range(5):
                log.append(intent(op=f"t{turn}-op{i}", arguments={"turn": turn, "text": "x" * 200}))
            files[f"f{turn}.txt"] = os.urandom(2048)
            r = ck.capture(fold(initial_record(TID), store.read(TID)), files, kind=kind if turn else "full")
            assert r.pause_s >= 0 and r.write_s >= 0 and r.total_s >= r.pause_s
            assert r.state_bytes >= r.record_bytes
            written.append(r.bytes_written)
        res = restore(store, TID, blobs)
        assert res.timings_s["total"] > 0 and res.chain_length == (0 if kind == "full" else 7)
        figures[kind] = written
    full, inc = figures["full"], figures["incremental"]
    assert full[0] == inc[0]
    assert all(i < f for i, f in zip(inc[1:], full[1:]))
    assert full[-1] > 2 * full[1]                     # full snapshots grow with the accumulated state
    assert max(inc[1:]) < 2 * min(inc[1:])            # deltas stay about one turn's worth


# --- consolidation and retirement ----------------------------------------------------------------


def test_consolidation_publishes_a_new_base_before_anything_is_retired():
    store, log, blobs = _started()
    ck = Checkpointer(log, blobs, max_chain=10)
    files = {"a": b"0"}
    ck.capture(fold(initial_record(TID), store.read(TID)), files, kind="full")
    for i in range(3):
        log.append(intent(op=f"more{i}"))
        ck.capture(fold(initial_record(TID), store.read(TID)), files, kind="incremental")
    pos_last_delta = store.head(TID)
    cons = ck.consolidate()
    assert cons.capture.kind == "full" and len(cons.supersedes) == 3 and cons.retirable
    ev_base = list(store.read(TID))[-1]
    assert ev_base.payload.supersedes == cons.supersedes and ev_base.payload.kind == "full"
    assert ck.consolidate() is None                   # already a full base

    # a base that is not in the log retires nothing
    other_store, other_log, _ = _started(blobs)
    with pytest.raises(CheckpointError, match="not published"):
        Checkpointer(other_log, blobs).retire(cons, delete=True)
    assert all(blobs.has(d) for d in cons.retirable)

    rep = ck.retire(cons, delete=True)
    assert rep.deleted == cons.retirable and rep.bytes_freed > 0
    res = restore(store, TID, blobs)
    assert res.checkpoint.checkpoint_id == cons.capture.checkpoint_id and res.chain_length == 0
    assert res.record.to_dict() == fold(initial_record(TID), store.read(TID)).to_dict()
    # the retired history: a position whose newest checkpoint was a retired delta says so (its
    # tombstone) and falls back to the chain's retained full base (issue 14; tests/test_checkpoint_retired.py)
    old = restore(store, TID, blobs, target=pos_last_delta)
    assert old.retired and old.retired[0].retired_by == "consolidation" and old.fallback_to.startswith("checkpoint ")
    assert old.record.to_dict() == fold(initial_record(TID), list(store.read(TID, 1, pos_last_delta))).to_dict()


# --- fail fast on a missing or damaged delta or blob ----------------------------------------------


def _chain_with_a_logged_change():
    store, log, blobs = _started()
    ck = Checkpointer(log, blobs, max_chain=10)
    files = {"src/a.py": b"a = 1\n", "README": b"r18\n"}
    base = ck.capture(fold(initial_record(TID), store.read(TID)), files, kind="full")
    log.append(intent(op="edit"))
    inc = ck.capture(fold(initial_record(TID), store.read(TID)), files, kind="incremental")
    new = {"src/a.py": b"a = 2\n", "README": b"r18\n"}
    change = log_workspace_change(log, blobs, files_tree(files)[0], new, operation_id="edit")
    log.append(intent(op="after"))
    return store, blobs, base, inc, change, new


@pytest.mark.parametrize("lose", ["record delta", "manifest", "workspace delta", "file blob", "damaged blob"])
def test_restore_fails_fast_naming_what_is_missing_and_writes_nothing(lose, tmp_path):
    """Fault: one object behind the newest state is lost or damaged. Invariant: restore raises
    UnrecoverableStateError naming it, writes no workspace, and never falls back to an older tree."""
    store, blobs, base, inc, change, new = _chain_with_a_logged_change()
    inc_manifest = json.loads(blobs.get(inc.manifest_sha256))
    victim = {"record delta": inc_manifest["record"]["delta"], "manifest": inc.manifest_sha256,
              "workspace delta": change.event.payload.delta_sha256,
              "file blob": files_tree(new)[0].files["src/a.py"].sha256,
              "damaged blob": files_tree(new)[0].files["src/a.py"].sha256}[lose]
    if lose == "damaged blob":
        blobs.objects[victim] = b"a = 3\n"
    else:
        del blobs.objects[victim]
    dest = tmp_path / "out"
    with pytest.raises(UnrecoverableStateError) as exc:
        restore(store, TID, blobs, dest=dest)
    assert victim in " ".join(name for _, name in exc.value.missing)
    assert not dest.exists()
    # a position before the logged change needs nothing of what was lost there
    if lose in ("workspace delta", "file blob", "damaged blob"):
        res = restore(store, TID, blobs, target=change.event.sequence_number - 1)
        assert res.tree == files_tree({"src/a.py": b"a = 1\n", "README": b"r18\n"})[0]


def test_missing_required_artifact_fails_restore_and_refuses_capture():
    store, log, blobs = _started()
    art = blobs.put(b"delivered input offloaded to the blob store")
    r = Checkpointer(log, blobs).capture(fold(initial_record(TID), store.read(TID)), None, artifact_refs=[art])
    assert restore(store, TID, blobs).checkpoint.artifacts == (art,)
    del blobs.objects[art]
    with pytest.raises(UnrecoverableStateError, match="artifact") as exc:
        restore(store, TID, blobs)
    assert exc.value.missing == (("artifact", art),)
    with pytest.raises(CheckpointError, match="artifact"):
        Checkpointer(log, blobs).capture(fold(initial_record(TID), store.read(TID)), None, artifact_refs=[art])
    assert r.kind == "full"


def test_restore_arguments_are_checked():
    store, log, blobs = _started()
    with pytest.raises(ConfigError):
        restore(store, TID, blobs, target=store.head(TID) + 1)
    with pytest.raises(ConfigError):
        restore(store, TID, blobs, checkpoint_id="ckpt-nope")


# --- the directory blob store ---------------------------------------------------------------------


def test_directory_blob_store_verifies_reads_and_repairs_a_torn_object(tmp_path):
    blobs = DirectoryBlobStore(str(tmp_path / "b"))
    d = blobs.put(b"hello")
    assert blobs.get(d) == b"hello" and list(blobs.digests()) == [d]
    assert blobs.put_many([b"hello"]).objects_skipped == 1
    Path(blobs.path_of(d)).write_bytes(b"hel")            # a crash tore the file
    fresh = DirectoryBlobStore(str(tmp_path / "b"))
    with pytest.raises(UnrecoverableStateError, match="damaged"):
        fresh.get(d)
    assert fresh.put_many([b"hello"]).objects_written == 1  # not skipped: rewritten
    assert fresh.get(d) == b"hello"
    assert fresh.delete(d) and not fresh.has(d) and not fresh.delete(d)


def test_checkpoint_event_decodes_and_validates():
    store, log, blobs = _started()
    res = Checkpointer(log, blobs).capture(fold(initial_record(TID), store.read(TID)), {"x": b"1"})
    assert decode(res.event.canonical) == res.event
    with pytest.raises(Exception):
        CheckpointV2(checkpoint_id="c", covered_sequence_number=1, manifest_sha256="0" * 64, kind="incremental",
                     record_sha256="0" * 64)


def test_fold_rejects_a_workspace_change_from_another_tree():
    a, b, c = ("a" * 64, "b" * 64, "c" * 64)
    from kernel_lib.errors import FoldError
    from kernel_lib.core.events import WorkspaceChanged
    evs = [ev(task(), 1), ev(WorkspaceChanged(change_id="w1", base_tree_sha256=a, result_tree_sha256=b,
                                              delta_sha256=c), 2),
           ev(WorkspaceChanged(change_id="w2", base_tree_sha256=a, result_tree_sha256=c, delta_sha256=c), 3)]
    assert fold(initial_record("traj-a"), evs[:2]).workspace_tree_sha256 == b
    with pytest.raises(FoldError, match="workspace"):
        fold(initial_record("traj-a"), evs)


def test_a_new_checkpointer_continues_the_chain_it_finds_in_the_log(tmp_path):
    """Fault: the capturing worker is replaced. Goal: its replacement reads the newest published
    checkpoint back from the log and blob store, and extends that chain incrementally."""
    store, log, _ = _started()
    blobs = DirectoryBlobStore(str(tmp_path / "blobs"))
    first = Checkpointer(log, blobs).capture(fold(initial_record(TID), store.read(TID)), {"a": b"1"}, kind="full")
    log.append(intent(op="later", arguments={"ratio": 5.0}))
    again = Checkpointer(log, DirectoryBlobStore(str(tmp_path / "blobs")))
    assert again.latest.checkpoint_id == first.checkpoint_id
    r = again.capture(fold(initial_record(TID), store.read(TID)), {"a": b"1", "b": b"2"}, kind="incremental")
    assert r.kind == "incremental" and r.chain_length == 1 and r.file_bytes_written == 1
    res = restore(store, TID, DirectoryBlobStore(str(tmp_path / "blobs")))
    assert res.checkpoint.checkpoint_id == r.checkpoint_id and res.chain_length == 1
    assert res.record.to_dict() == fold(initial_record(TID), store.read(TID)).to_dict()
    assert res.tree == files_tree({"a": b"1", "b": b"2"})[0]
