"""Record snapshot format 4 and the pipelined digest check of restore (§11.4.1; issue 15).

Fault model: a replacement worker restores a long trajectory from a format-4 snapshot (each
table's rows one byte string, found through a table of end offsets) whose bytes may be damaged
on disk, replaced by another valid snapshot under the same name, or written by a faulty writer
(offsets out of range, not increasing, not one per id). The snapshot's SHA-256 is checked in a
background thread while the main thread decodes it and folds the suffix. Invariant: the record
rebuilt from format 4 is the record rebuilt from format 3 and the fold (values, types, order);
damage is refused with the UnrecoverableStateError a verified read raises, naming the snapshot,
whatever the damaged bytes made fail first, and nothing (record, workspace file) leaves restore
before the check passed; a malformed offset table is refused naming the snapshot, at the latest
when the row is read, and at once when every row is asked for. Goal: restore from the latest
checkpoint pays neither for parsing every row nor for the hash on the critical path
(``bench restore``).
"""

from __future__ import annotations

import importlib
import struct

import msgspec
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

import kernel_lib.checkpoint.blobs as blobs_mod
import kernel_lib.checkpoint.capture as capture_mod
import kernel_lib.checkpoint.state as S
from kernel_lib.bench.restore import TRAJECTORY, make_events
from kernel_lib.checkpoint import Checkpointer, MemoryBlobStore
from kernel_lib.checkpoint.blobs import PendingCheck, sha256_hex
from kernel_lib.checkpoint.manifest import CheckpointManifest
from kernel_lib.checkpoint.restore import load_checkpoint, restore
from kernel_lib.core.lazy_table import LazyTable
from kernel_lib.core.record import TrajectoryRecord, fold, initial_record
from kernel_lib.errors import UnrecoverableStateError
from kernel_lib.log import MemoryStore, TrajectoryLog
from kernel_lib.log.base import AckTier
from tests.test_record_fold import record_run, steps_strategy

restore_mod = importlib.import_module("kernel_lib.checkpoint.restore")
_SORTED = msgspec.msgpack.Encoder(order="deterministic")


def _exact(rec: TrajectoryRecord) -> bytes:
    return _SORTED.encode(rec.state_dict())


def _orders(rec: TrajectoryRecord) -> tuple:
    return (list(rec.operations), [list(o.attempts) for o in rec.operations.values()],
            list(rec.budget.reservations), list(rec.decisions), list(rec.approvals))


# --- the format ------------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(steps=steps_strategy, data=st.data())
def test_format_4_rebuilds_the_record_format_3_rebuilds_and_encodes_deterministically(steps, data):
    """Invariant (generated workloads, a random cut): the record rebuilt from the format-4
    snapshot (lazily, in full, and through decode_record_state) equals the one rebuilt from the
    format-3 snapshot of the same state and the fold, in values, types and table order; the
    decoded state encodes back to the same bytes (the record digest of a chain's rebuilt state
    is the captured one) and the snapshot decodes with no format named."""
    events, _ = record_run(steps)
    at = fold(initial_record("traj-h"), events[:data.draw(st.integers(0, len(events)))])
    state = S.state_of(at)
    v3 = S.encode_record_state(state, format=S.RECORD_FORMAT_NESTED)
    v4 = S.encode_record_state(state, format=S.RECORD_FORMAT)
    assert S.encode_record_state(S.state_of(at), format=S.RECORD_FORMAT) == v4
    from_v3 = S.record_from_snapshot(v3, format=S.RECORD_FORMAT_NESTED, lazy=False)
    rebuilt = [S.record_from_snapshot(v4, format=S.RECORD_FORMAT), S.record_from_snapshot(v4),
               S.record_from_snapshot(v4, format=S.RECORD_FORMAT, lazy=False),
               TrajectoryRecord.from_dict(S.decode_record_state(v4, format=S.RECORD_FORMAT)[0])]
    assert isinstance(rebuilt[0].operations, LazyTable) and type(rebuilt[2].operations) is dict
    for rec in rebuilt:
        assert rec == from_v3 == at
        assert _exact(rec) == _exact(from_v3) == _exact(at) and _orders(rec) == _orders(from_v3) == _orders(at)
    back, version = S.decode_record_state(v4, format=S.RECORD_FORMAT)
    assert back == S.decode_record_state(v3, format=S.RECORD_FORMAT_NESTED)[0]
    assert S.encode_record_state(back, version, format=S.RECORD_FORMAT) == v4
    assert S.record_digest(back, version, format=S.RECORD_FORMAT) == (sha256_hex(v4), v4)


def _cut(data: bytes, raw_ends: bytes) -> list[bytes]:
    ends = list(struct.unpack(f"<{len(raw_ends) // 8}Q", raw_ends))
    assert ends == sorted(set(ends)) and (ends[-1] if ends else 0) == len(data)
    return [data[a:b] for a, b in zip([0, *ends], ends)]


def test_a_format_4_table_is_its_ids_and_rows_back_to_back_with_end_offsets_and_a_hash_index_of_the_ids():
    """Invariant: each row of a format-4 table is the sorted-key MessagePack of the format-3 row,
    stored back to back in ``row_bytes`` and cut by ``row_ends`` (one little-endian uint64 end
    per row, the last one the length of the bytes); the ids are format 3's, in table order,
    stored alike (``id_bytes``, ``id_ends``); ``id_order`` lists the rows by the bucket of their
    id (xxh3_64 of its encoding modulo a power of two >= the row count, row order within a
    bucket) and ``id_buckets`` says where each bucket starts there (little-endian uint32)."""
    rec = fold(initial_record(TRAJECTORY), make_events(300))
    v3 = msgspec.msgpack.decode(S.encode_record_state(S.state_of(rec), format=S.RECORD_FORMAT_NESTED))
    v4 = msgspec.msgpack.decode(S.encode_record_state(S.state_of(rec), format=S.RECORD_FORMAT))
    assert v4["format"] == "kernel_lib.record-snapshot/4" and v4["record"] == v3["record"]
    for name in ("operations", "reservations", "decisions"):
        t3, t4 = v3["tables"][name], v4["tables"][name]
        assert t4["fields"] == t3["fields"] and "rows" not in t4 and "ids" not in t4
        assert _cut(t4["row_bytes"], t4["row_ends"]) == [_SORTED.encode(row) for row in t3["rows"]]
        encoded = [_SORTED.encode(i) for i in t3["ids"]]
        assert _cut(t4["id_bytes"], t4["id_ends"]) == encoded
        n = len(encoded)
        buckets = 1
        while buckets < n:
            buckets *= 2
        bucket_of = [xxhash.xxh3_64_intdigest(e) % buckets for e in encoded]
        order = list(struct.unpack(f"<{n}I", t4["id_order"]))
        starts = list(struct.unpack(f"<{buckets + 1}I", t4["id_buckets"]))
        assert order == sorted(range(n), key=lambda i: (bucket_of[i], i))
        assert starts == [sum(b < k for b in bucket_of) for k in range(buckets + 1)]


def _doc(n: int = 120):
    rec = fold(initial_record(TRAJECTORY), make_events(n))
    return rec, msgspec.msgpack.decode(S.encode_record_state(S.state_of(rec), format=S.RECORD_FORMAT))


def _ends(t) -> list[int]:
    return list(struct.unpack(f"<{len(t['row_ends']) // 8}Q", t["row_ends"]))


def _set_ends(t, ends: list[int]) -> None:
    t["row_ends"] = struct.pack(f"<{len(ends)}Q", *ends)


def _last_end_short(t):
    _set_ends(t, _ends(t)[:-1] + [len(t["row_bytes"]) - 1])


def _end_past_the_bytes(t):
    ends = _ends(t)
    ends[2] = len(t["row_bytes"]) + 10
    _set_ends(t, ends)


def _ends_swapped(t):
    ends = _ends(t)
    ends[2], ends[3] = ends[3], ends[2]
    _set_ends(t, ends)


def _an_empty_row(t):
    ends = _ends(t)
    ends[3] = ends[2]
    _set_ends(t, ends)


def _an_end_missing(t):
    _set_ends(t, _ends(t)[1:])


def _an_end_too_many(t):
    _set_ends(t, [0] + _ends(t))


def _ends_not_whole(t):
    t["row_ends"] = t["row_ends"][:-3]


def _ids_and_rows_of_other_counts(t):
    ends = _ends({"row_ends": t["id_ends"]})
    t["id_bytes"], t["id_ends"] = t["id_bytes"][:ends[-2]], struct.pack(f"<{len(ends) - 1}Q", *ends[:-1])


def _id_ends_not_between_ids(t):
    ends = _ends({"row_ends": t["id_ends"]})
    ends[1] += 1
    t["id_ends"] = struct.pack(f"<{len(ends)}Q", *ends)


def _index_order_shuffled(t):
    order = list(struct.unpack(f"<{len(t['id_order']) // 4}I", t["id_order"]))
    order[0], order[-1] = order[-1], order[0]
    t["id_order"] = struct.pack(f"<{len(order)}I", *order)


def _index_bucket_past_the_rows(t):
    starts = list(struct.unpack(f"<{len(t['id_buckets']) // 4}I", t["id_buckets"]))
    starts[1:-1] = [len(starts) * 4] * (len(starts) - 2)
    t["id_buckets"] = struct.pack(f"<{len(starts)}I", *starts)


@pytest.mark.parametrize("table", ["operations", "reservations", "decisions"])
@pytest.mark.parametrize("mutate", [_last_end_short, _end_past_the_bytes, _ends_swapped, _an_empty_row, _an_end_missing,
                                    _an_end_too_many, _ends_not_whole, _ids_and_rows_of_other_counts,
                                    _id_ends_not_between_ids, _index_order_shuffled, _index_bucket_past_the_rows],
                         ids=["last-end-short", "end-past-the-bytes", "ends-not-increasing", "an-empty-row",
                              "an-end-missing", "an-end-too-many", "ends-not-whole-integers",
                              "ids-and-rows-of-other-counts", "id-ends-not-between-ids", "index-order-shuffled",
                              "index-bucket-past-the-rows"])
def test_a_malformed_offset_table_or_id_index_is_refused_naming_the_snapshot(mutate, table):
    """Fault: digest-valid bytes of a faulty writer whose offsets or id index do not fit: the
    last row end short of the row bytes, an end past them, two ends swapped (not increasing), a
    row of no bytes, one end too few or too many, ends that are not whole uint64s, one id fewer
    than rows, id ends that cut inside an id, an id index whose order is not the ids' buckets or
    whose buckets run past the rows. Invariant: UnrecoverableStateError naming the snapshot,
    from the lazy restore (at the latest when the table is read in full), the eager one and
    decode_record_state; never a record with rows shifted, merged or missing."""
    _rec, doc = _doc()
    mutate(doc["tables"][table])
    data = _SORTED.encode(doc)
    with pytest.raises(UnrecoverableStateError, match="snap-o") as info:
        S.record_from_snapshot(data, name="snap-o", format=S.RECORD_FORMAT, lazy=False)
    assert ("record snapshot", "snap-o") in info.value.missing
    with pytest.raises(UnrecoverableStateError, match="snap-o"):
        lazy = S.record_from_snapshot(data, name="snap-o", format=S.RECORD_FORMAT)
        {"operations": lazy.operations, "reservations": lazy.budget.reservations,
         "decisions": lazy.decisions}[table].materialize()
    with pytest.raises(UnrecoverableStateError, match="snap-o"):
        S.decode_record_state(data, name="snap-o", format=S.RECORD_FORMAT)


def test_rows_before_a_bad_offset_still_read_and_the_bad_row_is_refused_when_read():
    """Fault: one row's end offset points past the row bytes. Invariant: the lazy record is
    built (the offsets are checked per row, not all at once), the rows whose slices are sound
    read as the fold has them, and the two rows whose slices use the bad offset are refused
    with an UnrecoverableStateError naming the snapshot and the row."""
    rec, doc = _doc()
    t = doc["tables"]["operations"]
    ids = list(rec.operations)
    _end_past_the_bytes(t)
    lazy = S.record_from_snapshot(_SORTED.encode(doc), name="snap-p", format=S.RECORD_FORMAT)
    assert lazy.operations[ids[0]] == rec.operations[ids[0]]
    assert lazy.operations[ids[5]] == rec.operations[ids[5]]
    for bad in (ids[2], ids[3]):
        with pytest.raises(UnrecoverableStateError, match=rf"snap-p.*operation row of '{bad}'") as info:
            lazy.operations[bad]
        assert ("record snapshot", "snap-p") in info.value.missing


def test_a_format_3_chain_stays_format_3_and_a_new_full_checkpoint_is_format_4(monkeypatch):
    """Situation: the previous build wrote a full checkpoint in ``record-snapshot/3``; this build
    continues the log. Invariant: an incremental checkpoint on it keeps format 3 (delta format 2,
    the record digest of a format-3 snapshot), a new full checkpoint is format 4 and an
    incremental one on it format 4; restore from each, and through each chain, gives the fold."""
    store, blobs = MemoryStore(), MemoryBlobStore()
    events = make_events(600)
    store.append_batch(events[:200], AckTier.MEMORY)
    log = TrajectoryLog(store, TRAJECTORY, must_survive="none")
    monkeypatch.setattr(capture_mod, "RECORD_FORMAT", S.RECORD_FORMAT_NESTED)   # the previous build's writer
    old = Checkpointer(log, blobs).capture(fold(initial_record(TRAJECTORY), store.read(TRAJECTORY)), None,
                                           kind="full")
    monkeypatch.undo()
    assert msgspec.msgpack.decode(blobs.get(old.record_sha256))["format"] == S.RECORD_FORMAT_NESTED
    ck = Checkpointer(TrajectoryLog(store, TRAJECTORY, must_survive="none"), blobs)
    formats, done = [], 200
    for upto, kind in ((300, "incremental"), (400, "full"), (500, "incremental")):
        ck.log.append_many([e.payload for e in events[done:upto]])
        done = upto
        r = ck.capture(fold(initial_record(TRAJECTORY), store.read(TRAJECTORY)), None, kind=kind)
        m = CheckpointManifest.from_bytes(blobs.get(r.manifest_sha256))
        formats.append((m.kind, m.record_format, m.versions["record_delta_format"]))
        want = fold(initial_record(TRAJECTORY), store.read(TRAJECTORY))
        for lazy_rows in (True, False):
            got = restore(store, TRAJECTORY, blobs, lazy_rows=lazy_rows).record
            assert got == want and _exact(got) == _exact(want) and _orders(got) == _orders(want)
    assert formats == [("incremental", S.RECORD_FORMAT_NESTED, S.RECORD_DELTA_FORMAT),
                       ("full", S.RECORD_FORMAT, S.RECORD_DELTA_FORMAT),
                       ("incremental", S.RECORD_FORMAT, S.RECORD_DELTA_FORMAT)]


# --- the pipelined digest check --------------------------------------------------------------------


@pytest.fixture
def threaded(monkeypatch):
    """Every object's pending check runs in its background thread (not only objects over 1 MiB)."""
    monkeypatch.setattr(blobs_mod, "PENDING_CHECK_MIN_BYTES", 0)


def _checkpointed(n: int = 400, covered: int = 300, workspace: dict | None = None):
    """A bench-shaped log of ``n`` events with one full checkpoint at ``covered`` (with
    ``workspace`` as its tree); returns (store, blobs, capture result)."""
    store, blobs = MemoryStore(), MemoryBlobStore()
    events = make_events(n)
    store.append_batch(events[:covered], AckTier.MEMORY)
    log = TrajectoryLog(store, TRAJECTORY, must_survive="none")
    r = Checkpointer(log, blobs).capture(fold(initial_record(TRAJECTORY), store.read(TRAJECTORY)), workspace,
                                         kind="full")
    log.append_many([e.payload for e in events[covered:]])
    return store, blobs, r


def _another_valid_snapshot(data: bytes) -> bytes:
    """Valid format-4 bytes of the same record but for one operation's outcome: they decode and
    fold as well as the real ones, and hash to something else."""
    state, version = S.decode_record_state(data, format=S.RECORD_FORMAT)
    op = next(o for o in state["operations"].values() if o["outcome"] is not None)
    op["outcome"] = {"forged": True}
    return S.encode_record_state(state, version, format=S.RECORD_FORMAT)


def _undecodable(data: bytes) -> bytes:
    """The bytes with their first byte (the document's map header) made one MessagePack never
    uses (0xc1): no decoder gets past it."""
    return b"\xc1" + data[1:]


@pytest.mark.parametrize("lazy_rows", [True, False], ids=["lazy", "all-rows"])
@pytest.mark.parametrize("damage", ["another-valid-snapshot", "undecodable", "truncated"])
def test_restore_refuses_a_damaged_snapshot_with_the_error_a_verified_read_raises(threaded, tmp_path, damage,
                                                                                  lazy_rows):
    """Fault: the record snapshot's bytes are replaced under its name by another valid snapshot
    (it decodes and folds), by bytes that fail to decode, or by a truncated copy, while the
    digest is checked in the background. Invariant: restore raises the UnrecoverableStateError
    of a verified read ("is damaged", ``missing`` naming the record snapshot), never the decode
    error and never a record; no workspace file is written; load_checkpoint refuses it alike."""
    store, blobs, r = _checkpointed(workspace={"a.txt": b"alpha", "b/c.txt": b"gamma"})
    good = blobs.objects[r.record_sha256]
    blobs.objects[r.record_sha256] = {"another-valid-snapshot": _another_valid_snapshot, "undecodable": _undecodable,
                                      "truncated": lambda d: d[:len(d) // 2]}[damage](good)
    assert sha256_hex(blobs.objects[r.record_sha256]) != r.record_sha256
    dest = tmp_path / "ws"
    with pytest.raises(UnrecoverableStateError, match=rf"record snapshot {r.record_sha256[:16]}… is damaged") as info:
        restore(store, TRAJECTORY, blobs, dest=dest, lazy_rows=lazy_rows)
    assert list(info.value.missing) == [("record snapshot", r.record_sha256)]
    assert not dest.exists() and list(tmp_path.iterdir()) == []
    with pytest.raises(UnrecoverableStateError, match="is damaged") as info:
        load_checkpoint(blobs, r.manifest_sha256, as_record=True, lazy_rows=lazy_rows)
    assert list(info.value.missing) == [("record snapshot", r.record_sha256)]
    blobs.objects[r.record_sha256] = good
    res = restore(store, TRAJECTORY, blobs, dest=dest, lazy_rows=lazy_rows)
    assert res.record == fold(initial_record(TRAJECTORY), store.read(TRAJECTORY))
    assert (dest / "a.txt").read_bytes() == b"alpha" and (dest / "b" / "c.txt").read_bytes() == b"gamma"


def test_a_damaged_snapshot_found_late_is_reported_by_a_restore_that_verifies_as_it_reads(threaded, monkeypatch):
    """Situation: the background check fails only after the checkpoint was chosen and the
    suffix folded. Invariant: restore runs again verifying every object as it is read (so the
    damage is met where a verified read meets it, retired checkpoints included) and raises that
    error; the first, pipelined run returned nothing."""
    store, blobs, r = _checkpointed()
    blobs.objects[r.record_sha256] = _another_valid_snapshot(blobs.objects[r.record_sha256])
    calls = []
    real = restore_mod._restore

    def spy(*args):
        calls.append(args[-1])
        return real(*args)

    monkeypatch.setattr(restore_mod, "_restore", spy)
    with pytest.raises(UnrecoverableStateError, match="is damaged"):
        restore(store, TRAJECTORY, blobs)
    assert calls == [True, False]


def test_an_intact_snapshot_restores_with_its_check_waited_for(threaded):
    """Invariant: with the check in the background, restore gives the fold, reports how long it
    waited for the check (``check_wait``, seconds, >= 0) and each phase it reported before."""
    store, blobs, _r = _checkpointed()
    res = restore(store, TRAJECTORY, blobs)
    assert res.record == fold(initial_record(TRAJECTORY), store.read(TRAJECTORY))
    assert set(res.timings_s) == {"find", "load", "fold", "check_wait", "workspace", "materialize", "total"}
    assert all(v >= 0 for v in res.timings_s.values())


@pytest.mark.parametrize("size", [10, 3 << 20], ids=["small-checked-at-once", "large-checked-in-a-thread"])
def test_a_pending_check_raises_what_get_raises_and_the_same_answer_every_time(tmp_path, size):
    """Invariant: for intact bytes the pending check passes (and keeps passing); for damaged
    bytes it raises an UnrecoverableStateError whose message and ``missing`` are get's, every
    time it is waited for; a missing object is refused at once, as get refuses it."""
    blobs = MemoryBlobStore()
    data = bytes(range(256)) * (size // 256 + 1)
    d = blobs.put(data)
    raw, check = blobs.get_pending(d, kind="record snapshot", needed_by="a test")
    assert raw == data and not check.damaged()
    check.wait()
    check.wait()
    blobs.objects[d] = data[:-1] + b"\x00"
    with pytest.raises(UnrecoverableStateError) as want:
        blobs.get(d, kind="record snapshot", needed_by="a test")
    raw, check = blobs.get_pending(d, kind="record snapshot", needed_by="a test")
    for _ in range(2):
        with pytest.raises(UnrecoverableStateError) as got:
            check.wait()
        assert str(got.value) == str(want.value) and got.value.missing == want.value.missing
    assert check.damaged()
    del blobs.objects[d]
    with pytest.raises(UnrecoverableStateError, match="is missing"):
        blobs.get_pending(d, kind="record snapshot")
    assert not PendingCheck.done(None).damaged()


def test_the_bench_report_describes_format_4_and_the_background_check():
    """The ``bench restore`` docstring tells what a restore from the latest checkpoint does now."""
    import kernel_lib.bench.restore as bench

    doc = " ".join((bench.__doc__ or "").split())
    assert "record-snapshot/4" in doc and "background" in doc


def test_the_manifest_of_a_new_checkpoint_names_format_4():
    """Invariant: a new full checkpoint's manifest names record format 4 with delta format 2,
    and the stored snapshot is the format-4 encoding of the record at its position."""
    store, blobs, r = _checkpointed(200, 150)
    m = CheckpointManifest.from_bytes(blobs.get(r.manifest_sha256))
    assert (m.record_format, m.versions["record_delta_format"]) == (S.RECORD_FORMAT, S.RECORD_DELTA_FORMAT)
    at = fold(initial_record(TRAJECTORY), list(store.read(TRAJECTORY))[:150])
    assert blobs.get(m.record["snapshot"]) == S.encode_record_state(S.state_of(at), format=S.RECORD_FORMAT)
