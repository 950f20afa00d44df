"""Opening a segment log without hashing it: each digest is computed by the event's first read
(§11.2.1, §11.5.2: a replacement worker opens, reads and folds the log before it resumes; §11.8.4).

Fault model: open spent a SHA-256 per event (and a general frame parser per record) before any
read asked for a digest. Deferring the hash and checking the common frame inline can go wrong in
four ways: a read hands out a digest of other bytes (a cache entry of another row, of a row
appended after open, or of a range read out of order); the cache makes a later read disagree with
a first one; the inline scan accepts or indexes a frame otherwise than the general parser does
(fences, several trajectories, rolled segments, non-ASCII bodies); a changed byte slips through
now that no digest is taken at open.

Invariants: open runs no SHA-256; every read, first or later, of any range in any order, gives
each event the SHA-256 of its stored bytes (the digest it was appended with), and hashes each
stored body at most once over all reads; a conflicting retry after reopen names the stored
event's digest; the store opened by the inline scan equals the one the general parser builds
(index, fences, watermark, end, report, events); a byte changed anywhere in a record is refused
at that record (CorruptLogError naming it, or a reported tail damage starting there), and only
byte-identical events before it are read.

Goal: open as cheap as its checks (frame CRC, envelope, sequences, fences), same results.
"""

from __future__ import annotations

import hashlib
import json
import struct

import crc32c

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kernel_lib.log.segment as segment_mod
from kernel_lib.core.events import Event, ToolResult
from kernel_lib.errors import ConflictingDuplicateError, CorruptLogError, KernelError
from kernel_lib.log.fs import MemoryFileSystem
from kernel_lib.log.segment import HEADER_BYTES, KIND_EVENT, KIND_FENCE, MAGIC, SegmentStore, encode_frame, segment_name

LOG = "/log"
TRAJECTORIES = ("ta", "tb", "tc")
_LENGTH = struct.Struct("<I")   # body_length_bytes, at offset 8 of a frame
_HEAD = struct.Struct("<4sBBHIIQ")   # a frame's header before its CRC (module docstring of segment.py)


def _event(tid: str, seq: int, epoch: int, note: str) -> Event:
    payload = ToolResult(operation_id=f"{tid}-op{seq}", attempt_id="attempt1", status="completed",
                         outcome={"seq": seq, "note": note}, observation_complete=True)
    return Event.create(trajectory_id=tid, event_id=f"{tid}-e{seq}", sequence_number=seq, payload=payload,
                        owner_epoch=epoch)


# one step of a writer: an event (trajectory, note), a fence (trajectory), a newer owner_epoch
# stamped on the next events without a fence record (trajectory), or the end of a batch
_steps = st.lists(st.one_of(
    st.tuples(st.just("event"), st.sampled_from(TRAJECTORIES), st.text(alphabet="ab é雪\"\\", max_size=12)),
    st.tuples(st.just("epoch"), st.sampled_from(TRAJECTORIES)),
    st.tuples(st.just("fence"), st.sampled_from(TRAJECTORIES)),
    st.tuples(st.just("batch"), st.sampled_from(["write", "fdatasync"])),
), min_size=1, max_size=30)


def _write_log(steps, segment_bytes: int) -> tuple[dict[str, bytes], dict[str, list[Event]]]:
    """The segment files of a log written by ``steps`` (closed cleanly), and the events per trajectory."""
    fs = MemoryFileSystem()
    written: dict[str, list[Event]] = {t: [] for t in TRAJECTORIES}
    epochs = dict.fromkeys(TRAJECTORIES, 0)
    batch: list[Event] = []
    store = SegmentStore.open(LOG, fs=fs, create=True, segment_bytes=segment_bytes)
    with store:
        for step in steps + [("batch", "write")]:
            if step[0] == "event":
                _, tid, note = step
                e = _event(tid, len(written[tid]) + 1, epochs[tid], note)
                written[tid].append(e)
                batch.append(e)
            elif step[0] == "epoch":
                epochs[step[1]] += 1
            else:
                if batch:
                    store.append_batch(batch, "write" if step[0] == "fence" else step[1])
                    batch = []
                if step[0] == "fence":
                    epochs[step[1]] += 1
                    store.install_fence(step[1], epochs[step[1]])
    return fs.snapshot(), {t: evs for t, evs in written.items() if evs}


def _record_starts(files: dict[str, bytes]) -> list[tuple[str, int, int]]:
    """(path, start, end) of every record of a cleanly closed log."""
    out = []
    for path in sorted(files):
        data, off = files[path], 0
        while off < len(data):
            end = off + HEADER_BYTES + _LENGTH.unpack_from(data, off + 8)[0]
            out.append((path, off, end))
            off = end
    return out


class _CountingSha256:
    """Stands in for hashlib.sha256, counting calls per input."""

    def __init__(self) -> None:
        self.calls: dict[bytes, int] = {}
        self._real = hashlib.sha256

    def __call__(self, data: bytes = b"", **kw):
        self.calls[bytes(data)] = self.calls.get(bytes(data), 0) + 1
        return self._real(data, **kw)


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=_steps, segment_bytes=st.sampled_from([256, 1024, 1 << 20]), data=st.data())
def test_digests_are_computed_on_first_read_equal_the_eager_ones_and_are_cached(steps, segment_bytes, data):
    files, written = _write_log(steps, segment_bytes)
    counter = _CountingSha256()
    with pytest.MonkeyPatch.context() as m:
        m.setattr(hashlib, "sha256", counter)
        store = SegmentStore.open(LOG, fs=MemoryFileSystem(files=files), read_only=True)
        assert counter.calls == {}, "open hashed an event"
        with store:
            assert store.trajectories() == sorted(written)
            ranges = data.draw(st.lists(st.tuples(st.sampled_from(TRAJECTORIES), st.integers(1, 12),
                                                  st.integers(0, 12)), max_size=8))
            for tid, start, length in ranges + [(t, 1, 10 ** 6) for t in written] * 2:
                got = list(store.read(tid, start, start + length - 1))
                want = written.get(tid, [])[start - 1:start - 1 + length]
                assert [e.canonical for e in got] == [e.canonical for e in want]
                assert [e.digest for e in got] == [e.digest for e in want]
            hashed_after_first_full_reads = dict(counter.calls)
            for t in written:   # everything is cached now: a further read hashes nothing
                for e in store.read(t):
                    assert e.digest == counter._real(e.canonical).hexdigest()
            assert counter.calls == hashed_after_first_full_reads
    bodies = [e.canonical for evs in written.values() for e in evs]
    assert all(n == 1 for n in counter.calls.values()) and set(counter.calls) == set(bodies)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=_steps, data=st.data())
def test_a_retry_after_reopen_is_compared_with_the_stored_event(steps, data):
    files, written = _write_log(steps, 1024)
    if not written:
        return
    tid = data.draw(st.sampled_from(sorted(written)))
    stored = data.draw(st.sampled_from(written[tid]))
    fs = MemoryFileSystem(files=files)
    with SegmentStore.open(LOG, fs=fs, create=True) as store:
        assert store.append(stored, "write").duplicate   # an identical retry: acknowledged, not stored
        other = _event(tid, stored.sequence_number, stored.owner_epoch, "a different outcome")
        with pytest.raises(ConflictingDuplicateError) as info:
            store.append(other, "write")
        assert f"digest {_sha(stored.canonical)[:12]}" in str(info.value)
        assert f"digest {other.digest[:12]}" in str(info.value)
        assert [e.digest for e in store.read(tid)] == [e.digest for e in written[tid]]


def _store_view(store: SegmentStore) -> tuple:
    return (store.trajectories(), {t: (store.head(t), store.fence(t)) for t in TRAJECTORIES},
            store.synced_watermark, store.end_position, store.recovery.to_dict(),
            {t: [(e.canonical, e.digest) for e in store.read(t)] for t in store.trajectories()})


def _open_view(files: dict[str, bytes]):
    try:
        store = SegmentStore.open(LOG, fs=MemoryFileSystem(files=files), read_only=True)
    except KernelError as exc:   # CorruptLogError; StoreError for a record of an unknown format
        return ("refused", type(exc).__name__, str(exc))
    with store:
        return _store_view(store)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=_steps, segment_bytes=st.sampled_from([256, 1024, 1 << 20]), data=st.data())
def test_the_inline_scan_builds_the_store_the_general_parser_builds(steps, segment_bytes, data):
    files, written = _write_log(steps, segment_bytes)
    records = _record_starts(files)
    how = data.draw(st.sampled_from(["intact", "flip", "reframe"]))
    if how == "flip" and records:
        path = data.draw(st.sampled_from(sorted(files)))
        if files[path]:
            raw = bytearray(files[path])
            i = data.draw(st.integers(0, len(raw) - 1))
            raw[i] ^= data.draw(st.integers(1, 255))
            files = {**files, path: bytes(raw)}
    elif how == "reframe" and records:
        # a CRC-valid record that a writer of this format never writes: another kind, version or
        # flags, or a synced watermark at or beyond its own position
        path, start, end = data.draw(st.sampled_from(records))
        kind, version, flags, _length, wm_seg, wm_off = _HEAD.unpack_from(files[path], start)[1:]
        number = int(path.rsplit("/", 1)[1][:8])
        field = data.draw(st.sampled_from(["kind", "version", "flags", "watermark"]))
        if field == "kind":
            kind = data.draw(st.sampled_from([0, 1, 2, 3]))
        elif field == "version":
            version = data.draw(st.sampled_from([0, 1, 2]))
        elif field == "flags":
            flags = data.draw(st.sampled_from([0, 1, 256]))
        else:
            wm_seg, wm_off = data.draw(st.sampled_from([(number, start), (number, start + 1), (number + 1, 0)]))
        body = files[path][start + HEADER_BYTES:end]
        head = _HEAD.pack(MAGIC, kind, version, flags, len(body), wm_seg, wm_off)
        frame = head + struct.pack("<I", crc32c.crc32c(body, crc32c.crc32c(head))) + body
        files = {**files, path: files[path][:start] + frame + files[path][end:]}
    _assert_inline_and_general_agree(files)


def _assert_inline_and_general_agree(files: dict[str, bytes]) -> None:
    inline = _open_view(files)
    with pytest.MonkeyPatch.context() as m:
        # with no fast envelope route, the scan hands every frame to _parse_frame and _index_frame
        m.setattr(segment_mod, "_envelope_fields_fast", lambda _body: None)
        general = _open_view(files)
    assert inline == general


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=_steps, segment_bytes=st.sampled_from([256, 1024, 1 << 20]), data=st.data())
def test_the_inline_scan_finds_the_index_violations_the_general_parser_finds(steps, segment_bytes, data):
    """A CRC-valid record a correct writer would not have written where it stands: the same
    refusal (a repeated event id, a sequence gap, an epoch below a fence) or the same store."""
    files, written = _write_log([("event", "ta", ""), ("event", "tb", "")] + steps, segment_bytes)
    records = _record_starts(files)
    # a CRC-valid record a correct writer would not have written there, before record ``at``
    # (or at the end): a fence, an event (a repeated event id, a sequence number next to the
    # trajectory's head there, an epoch maybe below its fence), or a copy of another record
    at = data.draw(st.integers(0, len(records)))
    path, start = records[at][:2] if at < len(records) else (records[-1][0], records[-1][2])
    heads = dict.fromkeys(TRAJECTORIES, 0)
    for p, b, e in records[:at]:
        if files[p][b + 4] == KIND_EVENT:
            heads[json.loads(files[p][b + HEADER_BYTES:e])["trajectory_id"]] += 1
    what = data.draw(st.sampled_from(["fence", "event", "copy"]))
    if what == "fence":
        tid = data.draw(st.sampled_from(TRAJECTORIES)).encode()
        frame = encode_frame(KIND_FENCE, struct.pack("<Q", data.draw(st.integers(0, 3))) + tid, (1, 0))
    elif what == "event":
        tid = data.draw(st.sampled_from(TRAJECTORIES))
        seq = data.draw(st.sampled_from([heads[tid] + 1, heads[tid] + 2, max(heads[tid], 1)]))
        eids = [e.event_id for evs in written.values() for e in evs] + ["fresh-id"]
        e = _event(tid, seq, data.draw(st.integers(0, 2)), "inserted")
        e = Event.create(trajectory_id=tid, event_id=data.draw(st.sampled_from(eids)),
                         sequence_number=seq, payload=e.payload, owner_epoch=e.owner_epoch)
        frame = encode_frame(KIND_EVENT, e.canonical, (1, 0))
    else:
        src_path, src_start, src_end = data.draw(st.sampled_from(records))
        kind = files[src_path][src_start + 4]
        frame = encode_frame(kind, files[src_path][src_start + HEADER_BYTES:src_end], (1, 0))
    files = {**files, path: files[path][:start] + frame + files[path][start:]}
    _assert_inline_and_general_agree(files)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=_steps, segment_bytes=st.sampled_from([256, 1024, 1 << 20]), data=st.data())
def test_a_changed_byte_in_any_record_is_refused_at_that_record(steps, segment_bytes, data):
    files, written = _write_log(steps, segment_bytes)
    records = _record_starts(files)
    if not records:
        return
    path, start, end = data.draw(st.sampled_from(records))
    i = data.draw(st.integers(start, end - 1))
    raw = bytearray(files[path])
    raw[i] ^= data.draw(st.integers(1, 255))
    damaged = {**files, path: bytes(raw)}
    where = f"{segment_name(int(path.rsplit('/', 1)[1][:8]))}:{start}"
    try:
        store = SegmentStore.open(LOG, fs=MemoryFileSystem(files=damaged), create=True)
    except CorruptLogError as exc:
        assert f"{path} offset {start}:" in str(exc)   # damage to durable data, named at its record
        return
    with store:
        rep = store.recovery
        assert rep.torn_tail_found and rep.torn_tail_trimmed and rep.torn_tail_at == where
        for t, evs in written.items():
            got = [(e.canonical, e.digest) for e in store.read(t)]
            assert got == [(e.canonical, _sha(e.canonical)) for e in evs[:len(got)]]
