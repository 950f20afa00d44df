"""Binary record snapshots (§11.4.1, §11.4.2): what restore from the latest checkpoint costs.

Fault model: a replacement worker restores a long trajectory from its newest checkpoint; the
snapshot it reads may be damaged or truncated on disk, or written by an older build (canonical
JSON, ``record-snapshot/1``). Invariant: restore at t gives exactly the record the fold gives at
t (same values, same types, same table order, same canonical bytes), or a typed
UnrecoverableStateError naming the snapshot; stored bytes are never rewritten. Goal: the restore
decodes a compact binary snapshot (MessagePack, ``record-snapshot/2``) and reads little of the
log beyond the suffix it must fold, so it is many times quicker than folding from the start.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kernel_lib.checkpoint.capture as capture_mod
from kernel_lib.bench.restore import TRAJECTORY, make_events
from kernel_lib.checkpoint import Checkpointer, DirectoryBlobStore, MemoryBlobStore
from kernel_lib.checkpoint.manifest import CheckpointManifest
from kernel_lib.checkpoint.restore import SCAN_WINDOW, restore
import kernel_lib.checkpoint.state as S
from kernel_lib.core.events import CheckpointV2, ToolResult
from kernel_lib.core.record import fold, fold_into, initial_record
from kernel_lib.errors import UnrecoverableStateError
from kernel_lib.log import MemoryStore, TrajectoryLog, open_store
from kernel_lib.log.base import AckTier
from tests.helpers import intent, task
from tests.test_checkpoint import _build_log
from tests.test_record_fold import record_run, steps_strategy

TID = "traj-h"
HISTORY = Path(__file__).parent / "histories" / "v1" / "compacted_sqlite"


_SORTED = msgspec.msgpack.Encoder(order="deterministic")


def _exact(rec) -> bytes:
    """The record's stored fields as sorted-key MessagePack, which tells 5 from 5.0: equal bytes
    mean equal values of equal types (the table order is compared apart)."""
    return _SORTED.encode(rec.state_dict())


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


class CountingStore(MemoryStore):
    """A memory log store that counts the events it hands out (the reads the service received)."""

    def __init__(self) -> None:
        super().__init__()
        self.events_read = 0

    def read(self, trajectory_id, start=1, stop=None):
        for e in super().read(trajectory_id, start, stop):
            self.events_read += 1
            yield e


def _float_log(store, blobs):
    """A log whose tool outcomes hold whole-number floats (2.0), which JSON would turn into 2."""
    log = TrajectoryLog(store, TID, must_survive="none")
    log.append(task())
    log.append(intent("op1"))
    log.append(ToolResult(operation_id="op1", attempt_id="op1-a1", status="completed", observation_complete=True,
                          outcome={"score": 2.0, "count": 2, "ratio": 0.5}))
    return log


# --- the format --------------------------------------------------------------------------------


def test_a_new_checkpoint_stores_its_record_as_a_binary_snapshot_under_its_digest(tmp_path):
    """Situation: a full checkpoint is captured today. Invariant: the manifest names record format
    2 (and delta format 2), the stored snapshot is MessagePack (not JSON) of that format, and its
    digest is the SHA-256 of the stored bytes. Goal: restore decodes binary, not a JSON text."""
    blobs = DirectoryBlobStore(str(tmp_path / "blobs"))
    store = MemoryStore()
    log = _float_log(store, blobs)
    r = Checkpointer(log, blobs).capture(fold(initial_record(TID), store.read(TID)), None, kind="full")
    m = CheckpointManifest.from_bytes(blobs.get(r.manifest_sha256))
    assert m.record_format == S.RECORD_FORMAT and m.versions["record_delta_format"] == S.RECORD_DELTA_FORMAT
    stored = Path(blobs.path_of(m.record["snapshot"])).read_bytes()
    assert hashlib.sha256(stored).hexdigest() == m.record["snapshot"] == m.record_sha256 == r.record_sha256
    assert not stored.startswith(b"{")
    assert msgspec.msgpack.decode(stored)["format"] == S.RECORD_FORMAT
    assert m.record["size"] == len(stored)


def test_restore_gives_the_folded_record_with_every_value_of_its_type(tmp_path):
    """Fault: a JSON snapshot writes 2.0 as 2, so the restored record held an int where the fold
    held a float. Invariant: restore from a full checkpoint and through a delta chain gives the
    fold's record with the same types (canonical bytes equal). Goal: restore is exactly the fold."""
    blobs = MemoryBlobStore()
    store = MemoryStore()
    log = _float_log(store, blobs)
    ck = Checkpointer(log, blobs)
    rec = fold(initial_record(TID), store.read(TID))
    fold_into(rec, [ck.capture(rec, None, kind="full").event])
    log.append(intent("op2"))
    log.append(ToolResult(operation_id="op2", attempt_id="op2-a1", status="completed", observation_complete=True,
                          outcome={"score": 3.0}))
    fold_into(rec, log.events(rec.last_sequence_number + 1))
    inc = ck.capture(rec, None, kind="incremental")
    want = fold(initial_record(TID), store.read(TID))
    for checkpoint_id in (None, inc.checkpoint_id):
        got = restore(store, TID, blobs, checkpoint_id=checkpoint_id).record
        assert type(got.operations["op1"].outcome["score"]) is float
        assert type(got.operations["op1"].outcome["count"]) is int
        assert type(got.operations["op2"].outcome["score"]) is float
        assert got == want and _exact(got) == _exact(want)
        assert list(got.operations) == list(want.operations)


@settings(max_examples=30, deadline=None)
@given(steps=steps_strategy, data=st.data())
def test_restore_plus_tail_fold_equals_the_fold_in_canonical_bytes(steps, data):
    """Invariant (generated workloads, checkpoints full or incremental at random positions):
    restore(t) == fold(events 1..t) field for field and in canonical bytes, and a full
    checkpoint's stored snapshot is the canonical encoding of the fold at its position."""
    events, _ = record_run(steps)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(events)), min_size=1, max_size=3)))
    kinds = ["full"] + [data.draw(st.sampled_from(["incremental", "full", "auto"])) for _ in cuts[1:]]
    blobs = MemoryBlobStore()
    store, all_events = _build_log(events, cuts, blobs, kinds)
    for t in sorted({0, len(all_events), *data.draw(st.lists(st.integers(0, len(all_events)), max_size=4))}):
        res = restore(store, TID, blobs, target=t)
        want = fold(initial_record(TID), all_events[:t])
        assert res.record == want and _exact(res.record) == _exact(want)
        assert S.encode_record_state(res.record.state_dict()) == S.encode_record_state(want.state_dict())
        assert list(res.record.operations) == list(want.operations)
    for e in all_events:
        if isinstance(e.payload, CheckpointV2) and e.payload.kind == "full":
            m = CheckpointManifest.from_bytes(blobs.get(e.payload.manifest_sha256))
            at = fold(initial_record(TID), all_events[:m.covered_sequence_number])
            assert blobs.get(m.record["snapshot"]) == S.encode_record_state(S.state_of(at, m.record_format),
                                                                          format=m.record_format)


# --- older snapshots ---------------------------------------------------------------------------


def test_a_json_snapshot_of_an_older_build_still_restores_and_is_never_rewritten(tmp_path):
    """Situation: a frozen history (tests/histories/v1) holds a checkpoint whose record snapshot
    is canonical JSON. Invariant: it restores to its expected record with the old decoder, and
    opening it changes no stored byte. Goal: checkpoints on disk stay readable."""
    folder = tmp_path / "h"
    shutil.copytree(HISTORY, folder)
    before = _files(folder / "blobs")
    import json
    manifest = json.loads((folder / "manifest.json").read_text())
    store = open_store("sqlite", folder / "log.sqlite")
    try:
        res = restore(store, manifest["trajectory_id"], DirectoryBlobStore(str(folder / "blobs")))
    finally:
        store.close()
    assert res.checkpoint is not None and res.checkpoint.record_format == S.RECORD_FORMAT_JSON
    expected = json.loads((folder / "expected_record.json").read_text())
    assert json.loads(json.dumps(res.record.to_dict())) == expected
    assert _files(folder / "blobs") == before


def test_a_json_chain_stays_json_and_a_new_full_checkpoint_is_binary(tmp_path, monkeypatch):
    """Situation: an older build wrote a JSON full checkpoint; this build continues the log.
    Invariant: an incremental checkpoint on it keeps the chain's format (JSON delta, JSON record
    digest) and restores to the fold; a consolidation keeps the chain's record digest; a new full
    checkpoint is binary; no stored object is rewritten or deleted. Goal: mixed histories restore."""
    blobs = DirectoryBlobStore(str(tmp_path / "blobs"))
    store = MemoryStore()
    log = TrajectoryLog(store, TID, must_survive="none")
    log.append(task())
    log.append(intent("op1"))
    monkeypatch.setattr(capture_mod, "RECORD_FORMAT", S.RECORD_FORMAT_JSON)   # the older build's writer
    ck = Checkpointer(log, blobs)
    rec = fold(initial_record(TID), store.read(TID))
    old = ck.capture(rec, None, kind="full")
    monkeypatch.undo()
    fold_into(rec, [old.event])
    old_bytes = _files(tmp_path / "blobs")
    assert blobs.get(old.record_sha256).startswith(b"{")
    assert S.decode_record_state(blobs.get(old.record_sha256), format=S.RECORD_FORMAT_JSON)[0]["budget"].keys() \
        >= {"ceiling_usd"}
    ck = Checkpointer(TrajectoryLog(store, TID, must_survive="none"), blobs)   # a new worker of this build
    ck.log.append(ToolResult(operation_id="op1", attempt_id="op1-a1", status="completed", observation_complete=True,
                             outcome={"x": 1.5}))
    fold_into(rec, ck.log.events(rec.last_sequence_number + 1))
    inc = ck.capture(rec, None, kind="incremental")
    m = CheckpointManifest.from_bytes(blobs.get(inc.manifest_sha256))
    assert m.record_format == S.RECORD_FORMAT_JSON and m.versions["record_delta_format"] == S.RECORD_DELTA_FORMAT_JSON
    assert blobs.get(m.record["delta"]).startswith(b"{")
    want = fold(initial_record(TID), store.read(TID))
    assert restore(store, TID, blobs).record == want
    cons = ck.consolidate()
    assert cons.capture.record_sha256 == inc.record_sha256          # same format, same record digest
    fold_into(rec, ck.log.events(rec.last_sequence_number + 1))
    new = ck.capture(rec, None, kind="full")
    assert CheckpointManifest.from_bytes(blobs.get(new.manifest_sha256)).record_format == S.RECORD_FORMAT
    assert restore(store, TID, blobs).record == fold(initial_record(TID), store.read(TID))
    after = _files(tmp_path / "blobs")
    assert all(after.get(k) == v for k, v in old_bytes.items())


# --- damage ------------------------------------------------------------------------------------


def test_a_damaged_or_truncated_binary_snapshot_is_refused_with_a_typed_error(tmp_path):
    """Fault: the stored snapshot is truncated or overwritten on disk, or bytes that are not a
    format-2 snapshot reach the decoder. Invariant: UnrecoverableStateError naming the record
    snapshot, never a partial record or another exception. Goal: damage is reported, not used."""
    blobs = DirectoryBlobStore(str(tmp_path / "blobs"))
    store = MemoryStore()
    log = _float_log(store, blobs)
    r = Checkpointer(log, blobs).capture(fold(initial_record(TID), store.read(TID)), None, kind="full")
    path = Path(blobs.path_of(r.record_sha256))
    good = path.read_bytes()
    for cut in sorted({1, len(good) // 3, len(good) // 2, len(good) - 1}):
        with pytest.raises(UnrecoverableStateError):
            S.record_from_snapshot(good[:cut], format=S.RECORD_FORMAT)
        with pytest.raises(UnrecoverableStateError):
            S.decode_record_state(good[:cut], format=S.RECORD_FORMAT)
    json_bytes = S.encode_record_state(S.state_of(fold(initial_record(TID), store.read(TID)), S.RECORD_FORMAT_JSON),
                                     format=S.RECORD_FORMAT_JSON)
    for wrong in (json_bytes, msgspec.msgpack.encode({"format": S.RECORD_FORMAT_JSON}), msgspec.msgpack.encode([1])):
        with pytest.raises(UnrecoverableStateError):
            S.record_from_snapshot(wrong, format=S.RECORD_FORMAT)
    path.chmod(0o644)
    path.write_bytes(good[: len(good) // 2])
    with pytest.raises(UnrecoverableStateError) as info:
        restore(store, TID, blobs)
    assert ("record snapshot", r.record_sha256) in info.value.missing


# --- the read beyond the suffix ----------------------------------------------------------------


def test_restore_reads_less_than_one_window_of_the_log_beyond_the_suffix():
    """Situation: the newest checkpoint is about 1 000 events before the head (the 1 % suffix of
    a 100 000-event log). Invariant: restore folds the suffix and the store hands out fewer than
    SCAN_WINDOW events beyond it (counted by the store); doubling windows read ~800 extra.
    Goal: the backward scan for the checkpoint costs little more than the suffix itself."""
    events = make_events(1400)
    store = CountingStore()
    blobs = MemoryBlobStore()
    store.append_batch(events[:360], AckTier.MEMORY)
    log = TrajectoryLog(store, TRAJECTORY, must_survive="none")
    Checkpointer(log, blobs).capture(fold(initial_record(TRAJECTORY), store.read(TRAJECTORY)), None, kind="full")
    rest = [e.restamp(sequence_number=e.sequence_number + 1) for e in events[360:]]
    store.append_batch(rest, AckTier.MEMORY)
    want = fold(initial_record(TRAJECTORY), store.read(TRAJECTORY))
    store.events_read = 0
    res = restore(store, TRAJECTORY, blobs)
    assert res.record == want and res.suffix_events == len(rest) + 1    # the Checkpoint event and the rest
    assert store.events_read < res.suffix_events + SCAN_WINDOW
