"""A log cut on a record boundary below a position another durable record names is refused (§11.5.1).

Fault model: the authoritative log loses a suffix, cut exactly on a record boundary (rows deleted
from the SQLite file; the segment file truncated at the start of a frame), so every remaining
record is intact and no CRC or gap check can see the loss. Elsewhere, durable records still name
positions from the lost suffix: a checkpoint manifest in the blob store (its covered position),
a result-inbox entry (the position of the intent it answers), a replica (its head).

Invariant: resume never continues silently from a log shorter than a position a durable record
names; it raises :class:`LogTruncatedError` naming the position, who names it, and the log's
head. An intact log (or one cut only above every named position) resumes as before.

Goal: the checks below cut real logs and run :func:`timed_resume` on them; the pure check
:func:`find_truncation` is tested as a property against a direct filter.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import struct
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from hypothesis import given
from hypothesis import strategies as st

from kernel_lib.checkpoint import Checkpointer, DirectoryBlobStore
from kernel_lib.core.record import fold, initial_record
from kernel_lib.errors import LogTruncatedError, ReconstructionUnavailableError
from kernel_lib.gate.evidence import signing_bytes
from kernel_lib.gate.inbox import ResultInbox
from kernel_lib.log import MemoryStore, SQLiteStore, TrajectoryLog
from kernel_lib.log.segment import HEADER_BYTES, MAGIC, SegmentStore
from kernel_lib.resume.stages import timed_resume
from kernel_lib.resume.truncation import NamedPosition, find_truncation
from kernel_lib.retention.replica import FollowerReplica
from tests.helpers import intent, task

TID = "traj-trunc"


def _write(store, blobs, n_before=4, n_after=4):
    """task + ``n_before`` intents, a full checkpoint at k (the head then), ``n_after`` more
    intents. Returns the capture."""
    log = TrajectoryLog(store, TID, must_survive="none")
    log.append(task(ceiling=100.0))
    for i in range(n_before):
        log.append(intent(op=f"op{i}"))
    cap = Checkpointer(log, blobs).capture(fold(initial_record(TID), store.read(TID)), {"a.txt": b"1\n"},
                                           kind="full")
    for i in range(n_after):
        log.append(intent(op=f"late{i}"))
    return cap


def _cut_sqlite(path: Path, keep_through: int) -> None:
    db = sqlite3.connect(path)
    db.execute("DELETE FROM events WHERE trajectory_id=? AND sequence_number > ?", (TID, keep_through))
    db.commit()
    db.close()


def _cut_segment(directory: Path, keep_through: int) -> int:
    """Truncate the segment log at the first byte of the frame of event ``keep_through + 1``
    (a record boundary). Returns the offset cut at."""
    segs = sorted(directory.glob("*.seg"))
    for seg in segs:
        data = seg.read_bytes()
        off = 0
        while off + HEADER_BYTES <= len(data):
            assert data[off:off + 4] == MAGIC
            kind = data[off + 4]
            (length,) = struct.unpack_from("<I", data, off + 8)
            body = data[off + HEADER_BYTES:off + HEADER_BYTES + length]
            if kind == 1 and json.loads(body)["sequence_number"] == keep_through + 1:
                with open(seg, "r+b") as f:
                    f.truncate(off)
                for later in segs[segs.index(seg) + 1:]:
                    later.unlink()
                return off
            off += HEADER_BYTES + length
    raise AssertionError("event not found in the segment files")


@pytest.mark.parametrize("kind", ["sqlite", "segment"])
def test_a_log_cut_below_a_checkpoint_is_refused_for_resume(tmp_path, kind):
    blobs = DirectoryBlobStore(str(tmp_path / "blobs"))
    path = tmp_path / ("log.sqlite" if kind == "sqlite" else "seglog")
    opener = ((lambda: SQLiteStore.open(path, create=True)) if kind == "sqlite"
              else (lambda: SegmentStore.open(str(path), create=True)))
    store = opener()
    cap = _write(store, blobs)
    k = cap.covered_sequence_number
    head_before = store.head(TID)
    store.close()
    cut_to = k - 2                       # below the checkpoint's covered position
    if kind == "sqlite":
        _cut_sqlite(path, cut_to)
    else:
        _cut_segment(path, cut_to)
    store = opener()
    try:
        assert store.head(TID) == cut_to < k < head_before    # the store itself sees a clean, shorter log
        with pytest.raises(LogTruncatedError) as info:
            timed_resume(store, TID, blobs=blobs)
        e = info.value
        assert isinstance(e, ReconstructionUnavailableError)
        assert (e.head, e.position, e.kind) == (cut_to, k, "checkpoint")
        assert cap.checkpoint_id in e.named_by and cap.checkpoint_id in str(e)
        assert store.fence(TID) == 0          # refused before ownership: no epoch installed
    finally:
        store.close()


@pytest.mark.parametrize("kind", ["sqlite", "segment"])
def test_an_intact_log_or_one_cut_above_every_named_position_resumes(tmp_path, kind):
    blobs = DirectoryBlobStore(str(tmp_path / "blobs"))
    path = tmp_path / ("log.sqlite" if kind == "sqlite" else "seglog")
    opener = ((lambda: SQLiteStore.open(path, create=True)) if kind == "sqlite"
              else (lambda: SegmentStore.open(str(path), create=True)))
    store = opener()
    cap = _write(store, blobs)
    r = timed_resume(store, TID, blobs=blobs)
    assert r.record.last_sequence_number == store.head(TID)
    store.close()
    keep = cap.event.sequence_number + 1     # above the checkpoint (and its publishing event)
    (_cut_sqlite if kind == "sqlite" else _cut_segment)(path, keep)
    store = opener()
    try:
        r = timed_resume(store, TID, blobs=blobs)
        assert r.record.last_sequence_number == keep
    finally:
        store.close()


def _signed(key: Ed25519PrivateKey, public_hex: str, **fields) -> dict:
    rec = {"executor_id": "ci", "trajectory_id": TID, "status": "completed", "outcome": {"passed": 1},
           "charged_usd": 0.01, "public_key_sha256": hashlib.sha256(bytes.fromhex(public_hex)).hexdigest(), **fields}
    rec["signature"] = key.sign(signing_bytes(rec)).hex()
    return rec


def test_an_inbox_entry_naming_a_later_intent_position_is_refused(tmp_path):
    key = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
    public_hex = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()
    path = tmp_path / "log.sqlite"
    store = SQLiteStore.open(path, create=True)
    log = TrajectoryLog(store, TID, must_survive="none")
    log.append(task(ceiling=100.0))
    log.append(intent(op="op0"))
    ev = log.append(intent(op="test_r18"))            # the intent the endpoint was sent
    log.append(intent(op="op2"))
    inbox = ResultInbox(tmp_path / "inbox.sqlite", {"ci": public_hex})
    try:
        inbox.deposit(_signed(key, public_hex, operation_id="test_r18", attempt_id="attempt1",
                              intent_sequence=ev.sequence_number))
        inbox.deposit(_signed(key, public_hex, operation_id="op0", attempt_id="attempt1"))   # names no position
        r = timed_resume(store, TID, inbox=inbox)        # intact: resumes
        assert r.record.last_sequence_number == 4
        store.close()
        _cut_sqlite(path, ev.sequence_number - 1)         # the intent's record is gone, cleanly
        store = SQLiteStore.open(path, create=True)
        with pytest.raises(LogTruncatedError) as info:
            timed_resume(store, TID, inbox=inbox)
        e = info.value
        assert (e.kind, e.position, e.head) == ("inbox", ev.sequence_number, ev.sequence_number - 1)
        assert "test_r18" in e.named_by
        # without the inbox nothing names the lost position: the shorter log is all there is
        assert timed_resume(store, TID).record.last_sequence_number == ev.sequence_number - 1
    finally:
        inbox.close()
        store.close()


def test_a_replica_ahead_of_the_log_is_refused():
    primary, follower = MemoryStore(), FollowerReplica()
    log = TrajectoryLog(primary, TID, must_survive="none")
    log.append(task(ceiling=100.0))
    for i in range(3):
        log.append(intent(op=f"op{i}"))
    follower.receive(list(primary.read(TID)))
    assert timed_resume(primary, TID, replicas=[follower]).record.last_sequence_number == 4
    with pytest.raises(LogTruncatedError) as info:   # as a plain name -> head mapping
        timed_resume(primary, TID, replicas={"follower-b": 6})
    assert (info.value.kind, info.value.position, info.value.head) == ("replica", 6, 4)
    assert "follower-b" in info.value.named_by


@given(head=st.integers(0, 50), positions=st.lists(st.tuples(st.integers(0, 60), st.sampled_from(
    ["checkpoint", "inbox", "replica"])), max_size=12))
def test_find_truncation_reports_exactly_the_positions_past_the_head(head, positions):
    named = [NamedPosition(p, k, f"{k}-{i}") for i, (p, k) in enumerate(positions)]
    f = find_truncation(head, named, trajectory_id=TID)
    assert set(f.beyond) == {n for n in named if n.position > head}
    assert f.truncated == any(n.position > head for n in named)
    if f.truncated:
        assert f.worst.position == max(n.position for n in named) and f.worst.named_by in f.describe()
