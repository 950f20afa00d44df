"""SegmentStore: the append contract (§11.8.4), tiers (§11.3.1 table 2), torn tail vs corruption.

Fault model / invariant / goal, per test group:

* roundtrip and contract — no fault; what was acknowledged reads back byte-identical, retries
  never store a second copy, conflicts / stale owners / gaps are refused and nothing is overwritten;
* tail damage — the file is cut or a bit flips at every position of the last records; reopen
  trims and reports, and never returns an event that differs from what was written;
* damage before the tail — a flipped bit followed by records written after an fdatasync; reopen
  refuses with CorruptLogError and leaves the file untouched;
* I/O failure — an fdatasync or write raises OSError; the store refuses appends until reopened;
* property — random appends, batches, tiers, fences and reopens keep read-back == acknowledged.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from kernel_lib.errors import (
    ConfigError,
    ConflictingDuplicateError,
    CorruptLogError,
    SequenceGapError,
    StaleOwnerError,
    StoreClosedError,
    StoreError,
    StoreFailedError,
    TierNotOfferedError,
)
from kernel_lib.core.events import BudgetReserved, Event, RuntimeInput, ToolIntent, ToolResult
from kernel_lib.log.base import AckTier, AppendOutcome
from kernel_lib.log.fs import ForwardingFileSystem, MemoryFileSystem, OsFileSystem
from kernel_lib.log.segment import (
    HEADER_BYTES,
    KIND_EVENT,
    MAGIC,
    ZERO_RUN_NOT_COPIED_BYTES,
    SegmentStore,
    encode_frame,
    segment_name,
)

W, F = AckTier.WRITE, AckTier.FDATASYNC
LOG = "/log"


def ev(tid: str, seq: int, *, eid: str | None = None, epoch: int = 0, note: str = "") -> Event:
    """A realistic event: intents, results and reservations cycling by sequence number."""
    op = f"{tid}-op{seq}"
    kind = seq % 3
    if kind == 0:
        payload = BudgetReserved(reservation_id=f"{op}-res", subject_id=op, amount_usd=0.05 * seq)
    elif kind == 1:
        payload = ToolIntent(operation_id=op, attempt_id="attempt1", tool="run_tests",
                             arguments={"check": f"test_r{seq}", "note": note}, repeat_contract="idempotency_key",
                             grant_id="grant_repo", authorization_ref=f"{op}-auth", reservation_ref=f"{op}-res")
    else:
        payload = ToolResult(operation_id=op, attempt_id="attempt1", status="completed",
                             outcome={"passed": seq, "log": "ok " * (seq % 7) + note}, observation_complete=True)
    return Event.create(trajectory_id=tid, event_id=eid or f"{tid}-e{seq}", sequence_number=seq,
                        payload=payload, owner_epoch=epoch)


def all_events(store: SegmentStore) -> dict[str, list[bytes]]:
    return {t: [e.canonical for e in store.read(t)] for t in store.trajectories()}


def reopen_mem(files: dict[str, bytes], **kw) -> SegmentStore:
    return SegmentStore.open(LOG, fs=MemoryFileSystem(files=files), **kw, create=True)


# ------------------------------------------------------------------------------------------------
# roundtrip and the §11.8.4 contract, on real files
# ------------------------------------------------------------------------------------------------


def test_roundtrip_real_directory_with_rolls(tmp_path):
    d = tmp_path / "log"
    written: dict[str, list[bytes]] = {"a": [], "b": []}
    with SegmentStore.open(d, segment_bytes=2048, create=True) as s:
        assert s.recovery.events_recovered == 0 and not s.recovery.torn_tail_trimmed
        for seq in range(1, 21):
            for t in ("a", "b"):
                e = ev(t, seq)
                out = s.append(e, W if seq % 2 else F)
                assert out == AppendOutcome(e.event_id, t, seq, W if seq % 2 else F)
                written[t].append(e.canonical)
        batch = [ev("a", 21), ev("a", 22), ev("b", 21)]
        assert all(isinstance(o, AppendOutcome) for o in s.append_batch(batch, F))
        written["a"] += [batch[0].canonical, batch[1].canonical]
        written["b"].append(batch[2].canonical)
        assert all_events(s) == written
        assert s.synced_watermark == s.end_position
    segs = sorted(n for n in os.listdir(d) if n.endswith(".seg"))
    assert len(segs) > 3 and segs[0] == "00000001.seg" and "LOCK" in os.listdir(d)
    with SegmentStore.open(d, segment_bytes=2048, create=True) as s:
        assert all_events(s) == written
        assert s.recovery.events_recovered == 43 and not s.recovery.torn_tail_trimmed
        assert [e.sequence_number for e in s.read("a", 5, 7)] == [5, 6, 7]
        assert list(s.read("a", 30)) == [] and list(s.read("nobody")) == []
        assert s.head("a") == 22 and s.head("nobody") == 0 and s.trajectories() == ["a", "b"]
        e = next(s.read("b", 3, 3))
        assert e == ev("b", 3) and e.digest == ev("b", 3).digest


def test_identical_retry_acknowledged_without_a_second_copy(tmp_path):
    with SegmentStore.open(tmp_path, create=True) as s:
        e1, e2 = ev("t", 1), ev("t", 2)
        s.append_batch([e1, e2], F)
        path = s.segment_paths()[-1]
        size = os.path.getsize(path)
        again = s.append(e1, F)
        assert again.duplicate and again.sequence_number == 1 and again.tier is F
        assert os.path.getsize(path) == size
        # a retry inside one batch, next to a new event: only the new one adds a record
        e3 = ev("t", 3)
        outs = s.append_batch([e2, e3, e3], W)
        assert [o.duplicate for o in outs] == [True, False, True]
        assert os.path.getsize(path) == size + HEADER_BYTES + len(e3.canonical)
    with SegmentStore.open(tmp_path, create=True) as s:
        assert all_events(s) == {"t": [e1.canonical, e2.canonical, e3.canonical]}


def test_conflicting_duplicate_raises_and_overwrites_nothing(tmp_path):
    with SegmentStore.open(tmp_path, create=True) as s:
        original = ev("t", 1, note="success evidence")
        s.append(original, F)
        size = os.path.getsize(s.segment_paths()[-1])
        conflicting = ev("t", 1, note="late timeout")          # same event id, different payload
        assert conflicting.event_id == original.event_id and conflicting.digest != original.digest
        with pytest.raises(ConflictingDuplicateError, match="split brain"):
            s.append(conflicting, F)
        # also under another trajectory/sequence: still the same id
        outs = s.append_batch([ev("u", 1, eid=original.event_id), ev("t", 2)], F)
        assert isinstance(outs[0], ConflictingDuplicateError) and isinstance(outs[1], AppendOutcome)
        assert os.path.getsize(s.segment_paths()[-1]) == size + HEADER_BYTES + len(ev("t", 2).canonical)
    with SegmentStore.open(tmp_path, create=True) as s:
        assert next(s.read("t")).canonical == original.canonical
        assert s.trajectories() == ["t"]


def test_stale_owner_epoch_rejected_and_fence_durable(tmp_path):
    with SegmentStore.open(tmp_path, create=True) as s:
        s.append(ev("t", 1, epoch=1), F)
        assert s.fence("t") == 1                       # an appended owner_epoch raises the fence
        s.install_fence("t", 2)
        with pytest.raises(StaleOwnerError, match="owner_epoch=1"):
            s.append(ev("t", 2, epoch=1), F)
        with pytest.raises(StaleOwnerError):
            s.install_fence("t", 1)
        s.append(ev("t", 2, epoch=2), W)
        s.install_fence("other", 5)                    # a fence on a trajectory with no events yet
    with SegmentStore.open(tmp_path, create=True) as s:
        assert s.fence("t") == 2 and s.fence("other") == 5 and s.head("t") == 2
        with pytest.raises(StaleOwnerError):
            s.append(ev("t", 3, epoch=1), F)
        assert isinstance(s.append_batch([ev("other", 1, epoch=4)], F)[0], StaleOwnerError)


def test_gap_rejected_others_in_batch_still_acknowledged(tmp_path):
    with SegmentStore.open(tmp_path, create=True) as s:
        s.append(ev("t", 1), F)
        with pytest.raises(SequenceGapError, match="expected 2"):
            s.append(ev("t", 3), F)
        outs = s.append_batch([ev("t", 2), ev("t", 4), ev("t", 3), ev("u", 1)], F)
        assert [type(o).__name__ for o in outs] == ["AppendOutcome", "SequenceGapError", "AppendOutcome",
                                                    "AppendOutcome"]
    with SegmentStore.open(tmp_path, create=True) as s:
        assert s.head("t") == 3 and s.head("u") == 1


def test_tiers_offered_and_closed_store(tmp_path):
    s = SegmentStore.open(tmp_path, create=True)
    assert s.offered_tiers == (W, F) and s.name == "segment"
    for tier in (AckTier.MEMORY, AckTier.QUORUM):
        with pytest.raises(TierNotOfferedError):
            s.append(ev("t", 1), tier)
    s.close()
    s.close()   # idempotent
    with pytest.raises(StoreClosedError):
        s.append(ev("t", 1), F)
    with pytest.raises(StoreClosedError):
        s.read("t")


class CountingFS(ForwardingFileSystem):
    def __init__(self, inner):
        super().__init__(inner)
        self.calls: list[str] = []

    def pwrite(self, handle, offset_bytes, data):
        self.calls.append("pwrite")
        super().pwrite(handle, offset_bytes, data)

    def fdatasync(self, handle):
        self.calls.append("fdatasync")
        super().fdatasync(handle)


def test_batch_is_one_write_and_at_most_one_fdatasync(tmp_path):
    fs = CountingFS(OsFileSystem())
    with SegmentStore.open(tmp_path, fs=fs, create=True) as s:
        fs.calls.clear()
        s.append_batch([ev("t", i) for i in range(1, 6)], F)
        assert fs.calls == ["pwrite", "fdatasync"]
        fs.calls.clear()
        s.append_batch([ev("t", i) for i in range(6, 11)], W)
        assert fs.calls == ["pwrite"]
        fs.calls.clear()
        s.append(ev("t", 10), F)      # identical retry of a WRITE-only event: sync, no write
        assert fs.calls == ["fdatasync"]
        fs.calls.clear()
        s.append(ev("t", 10), F)      # already durable: nothing to do
        assert fs.calls == []


def test_concurrent_appenders_are_serialized(tmp_path):
    import threading

    errors = []

    def writer(tid: str) -> None:
        try:
            for seq in range(1, 31):
                s.append(ev(tid, seq), F if seq % 3 == 0 else W)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    with SegmentStore.open(tmp_path, segment_bytes=4096, create=True) as s:
        threads = [threading.Thread(target=writer, args=(f"t{i}",)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    with SegmentStore.open(tmp_path, segment_bytes=4096, create=True) as s:
        assert not s.recovery.torn_tail_trimmed
        for i in range(4):
            assert [e.canonical for e in s.read(f"t{i}")] == [ev(f"t{i}", q).canonical for q in range(1, 31)]


# ------------------------------------------------------------------------------------------------
# tail damage: torn writes are trimmed and reported
# ------------------------------------------------------------------------------------------------


def _log_of(n: int, tier: AckTier = F) -> tuple[dict[str, bytes], list[bytes], list[int]]:
    """A one-segment log of ``n`` events; returns files, canonical bytes, record start offsets."""
    mem = MemoryFileSystem()
    evs = [ev("t", i, note="x" * (i * 13 % 90)) for i in range(1, n + 1)]
    with SegmentStore.open(LOG, fs=mem, create=True) as s:
        for e in evs:
            s.append(e, tier)
    starts, off = [], 0
    for e in evs:
        starts.append(off)
        off += HEADER_BYTES + len(e.canonical)
    return mem.snapshot(), [e.canonical for e in evs], starts


def test_truncation_at_every_byte_of_the_last_two_records_is_trimmed():
    files, written, starts = _log_of(6)
    path = f"{LOG}/{segment_name(1)}"
    data = files[path]
    ends = starts[1:] + [len(data)]
    for cut in range(starts[-2], len(data)):
        with reopen_mem({path: data[:cut]}) as s:
            complete = sum(1 for end in ends if end <= cut)
            assert [e.canonical for e in s.read("t")] == written[:complete], cut
            boundary = starts[complete] if complete < len(starts) else len(data)
            assert s.recovery.torn_tail_trimmed == (cut != boundary), cut
            if cut != boundary:
                assert s.recovery.bytes_trimmed == cut - boundary
                assert s.recovery.trimmed_at == f"{segment_name(1)}:{boundary}"
                assert s.end_position == (1, boundary)
            s.append(ev("t", complete + 1, eid=f"new-{cut}"), F)     # the log keeps working
            assert s.head("t") == complete + 1


def test_truncation_on_real_files_is_trimmed_durably(tmp_path):
    with SegmentStore.open(tmp_path, create=True) as s:
        evs = [ev("t", i) for i in range(1, 5)]
        for e in evs:
            s.append(e, F)
        path = s.segment_paths()[-1]
    full = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(full - 10)
    with SegmentStore.open(tmp_path, create=True) as s:
        assert s.recovery.torn_tail_trimmed and s.recovery.bytes_trimmed == HEADER_BYTES + len(evs[-1].canonical) - 10
        assert "torn tail" in s.recovery.details[0]
        assert [e.canonical for e in s.read("t")] == [e.canonical for e in evs[:3]]
    assert os.path.getsize(path) == full - HEADER_BYTES - len(evs[-1].canonical)


def test_bit_flip_at_every_bit_of_the_last_record_is_detected():
    files, written, starts = _log_of(4)
    path = f"{LOG}/{segment_name(1)}"
    data = files[path]
    for byte in range(starts[-1], len(data)):
        for bit in range(8):
            damaged = bytearray(data)
            damaged[byte] ^= 1 << bit
            try:
                s = reopen_mem({path: bytes(damaged)})
            except CorruptLogError:
                continue   # allowed by the contract; never a silently different event
            with s:
                got = [e.canonical for e in s.read("t")]
                assert got == written[:len(got)], (byte, bit)
                assert got == written[:-1] and s.recovery.torn_tail_trimmed, (byte, bit)


def test_torn_tail_across_segments_removes_later_files(tmp_path):
    with SegmentStore.open(tmp_path, segment_bytes=1024, create=True) as s:
        evs = [ev("t", i) for i in range(1, 12)]
        for e in evs:
            s.append(e, W)
        last = s.end_position[0]
        kept = [e.canonical for e in evs]
    tail = encode_frame(KIND_EVENT, ev("t", 12).canonical, (last, 0))
    with open(tmp_path / segment_name(last), "ab") as f:
        f.write(tail[:40])
    (tmp_path / segment_name(last + 1)).write_bytes(bytes(300))          # zero-filled next segment
    (tmp_path / segment_name(last + 2)).write_bytes(os.urandom(100))     # and a garbage one
    with SegmentStore.open(tmp_path, segment_bytes=1024, create=True) as s:
        assert s.recovery.torn_tail_trimmed and s.recovery.bytes_trimmed == 40 + 300 + 100
        assert [e.canonical for e in s.read("t")] == kept
    assert not (tmp_path / segment_name(last + 1)).exists() and not (tmp_path / segment_name(last + 2)).exists()


# ------------------------------------------------------------------------------------------------
# damage before the tail: a hard error, nothing trimmed
# ------------------------------------------------------------------------------------------------


def test_early_bit_flip_followed_by_synced_records_is_corruption(tmp_path):
    with SegmentStore.open(tmp_path, create=True) as s:
        for i in range(1, 4):
            s.append(ev("t", i), F)
        for i in range(4, 7):
            s.append(ev("t", i), W)
        path = s.segment_paths()[-1]
    data = bytearray(open(path, "rb").read())
    second = HEADER_BYTES + len(ev("t", 1).canonical)
    data[second + HEADER_BYTES + 5] ^= 0x04             # a bit inside event 2's body
    open(path, "wb").write(bytes(data))
    before = {n: (tmp_path / n).read_bytes() for n in os.listdir(tmp_path) if n.endswith(".seg")}
    with pytest.raises(CorruptLogError) as info:
        SegmentStore.open(tmp_path, create=True)
    msg = str(info.value)
    assert path in msg and f"offset {second}" in msg and "CRC mismatch" in msg
    after = {n: (tmp_path / n).read_bytes() for n in os.listdir(tmp_path) if n.endswith(".seg")}
    assert after == before
    # the lock was released: a fixed file opens again
    data[second + HEADER_BYTES + 5] ^= 0x04
    open(path, "wb").write(bytes(data))
    with SegmentStore.open(tmp_path, create=True) as s:
        assert s.head("t") == 6


def test_unsynced_damage_with_only_unsynced_records_after_it_is_a_torn_tail():
    """Out-of-order persistence: a later unsynced record survived, an earlier one did not."""
    mem = MemoryFileSystem()
    with SegmentStore.open(LOG, fs=mem, create=True) as s:
        s.append(ev("t", 1), F)
        s.append(ev("t", 2), W)
        s.append(ev("t", 3), W)
    path = f"{LOG}/{segment_name(1)}"
    data = bytearray(mem.files[path])
    start2 = HEADER_BYTES + len(ev("t", 1).canonical)
    end2 = start2 + HEADER_BYTES + len(ev("t", 2).canonical)
    data[start2:end2] = bytes(end2 - start2)            # record 2 never reached the disk
    with reopen_mem({path: bytes(data)}) as s:
        assert [e.canonical for e in s.read("t")] == [ev("t", 1).canonical]
        assert s.recovery.trimmed_at == f"{segment_name(1)}:{start2}"


def test_missing_middle_segment_is_corruption(tmp_path):
    with SegmentStore.open(tmp_path, segment_bytes=1024, create=True) as s:
        for i in range(1, 15):
            s.append(ev("t", i), F)
        assert s.end_position[0] >= 3
    os.remove(tmp_path / segment_name(2))
    with pytest.raises(CorruptLogError, match="00000002.seg is missing"):
        SegmentStore.open(tmp_path, segment_bytes=1024, create=True)


def _write_frames(tmp_path, frames: list[bytes]) -> None:
    (tmp_path / segment_name(1)).write_bytes(b"".join(frames))


def test_valid_frames_with_a_sequence_gap_are_corruption(tmp_path):
    _write_frames(tmp_path, [encode_frame(KIND_EVENT, ev("t", 1).canonical, (1, 0)),
                             encode_frame(KIND_EVENT, ev("t", 3).canonical, (1, 0))])
    with pytest.raises(CorruptLogError, match="sequence gap"):
        SegmentStore.open(tmp_path, create=True)


def test_frame_of_unknown_format_version_is_refused_not_trimmed(tmp_path):
    frame = bytearray(encode_frame(KIND_EVENT, ev("t", 1).canonical, (1, 0)))
    frame[5] = 9   # format_version
    import crc32c
    body = bytes(frame[HEADER_BYTES:])
    frame[24:28] = crc32c.crc32c(body, crc32c.crc32c(bytes(frame[:24]))).to_bytes(4, "little")
    _write_frames(tmp_path, [bytes(frame)])
    with pytest.raises(StoreError, match="newer"):
        SegmentStore.open(tmp_path, create=True)
    assert (tmp_path / segment_name(1)).read_bytes() == bytes(frame)


def test_magic_cannot_occur_inside_an_event_body():
    e = ev("t", 1, note="\u00f7DAL \U0001f600 \xff")
    assert MAGIC not in e.canonical


# ------------------------------------------------------------------------------------------------
# the directory lock
# ------------------------------------------------------------------------------------------------


def test_second_opener_in_this_process_is_refused(tmp_path):
    s = SegmentStore.open(tmp_path, create=True)
    with pytest.raises(StoreError, match=rf"locked by another opener \(pid {os.getpid()}\)"):
        SegmentStore.open(tmp_path, create=True)
    s.close()
    SegmentStore.open(tmp_path, create=True).close()


def test_second_process_is_refused_with_the_holder_named(tmp_path):
    code = textwrap.dedent(f"""
        import sys
        from kernel_lib.log.segment import SegmentStore
        s = SegmentStore.open({str(tmp_path)!r}, create=True)
        print("ready", flush=True)
        sys.stdin.readline()
        s.close()
    """)
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(StoreError, match=f"pid {holder.pid}"):
            SegmentStore.open(tmp_path, create=True)
    finally:
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.wait(timeout=30)
    SegmentStore.open(tmp_path, create=True).close()


def test_memory_file_system_lock():
    mem = MemoryFileSystem()
    s = SegmentStore.open(LOG, fs=mem, create=True)
    with pytest.raises(StoreError, match="locked"):
        SegmentStore.open(LOG, fs=mem, create=True)
    s.close()
    SegmentStore.open(LOG, fs=mem, create=True).close()


# ------------------------------------------------------------------------------------------------
# I/O failures: fsyncgate
# ------------------------------------------------------------------------------------------------


class FaultyFS(ForwardingFileSystem):
    """Raises EIO from the next fdatasync / pwrite once armed."""

    def __init__(self, inner):
        super().__init__(inner)
        self.fail_fdatasync = False
        self.fail_pwrite = False

    def fdatasync(self, handle):
        if self.fail_fdatasync:
            raise OSError(5, "Input/output error (injected)")
        super().fdatasync(handle)

    def pwrite(self, handle, offset_bytes, data):
        if self.fail_pwrite:
            raise OSError(28, "No space left on device (injected)")
        super().pwrite(handle, offset_bytes, data)


def test_failed_fdatasync_fails_the_store_until_reopened(tmp_path):
    fs = FaultyFS(OsFileSystem())
    s = SegmentStore.open(tmp_path, fs=fs, create=True)
    s.append(ev("t", 1), F)
    fs.fail_fdatasync = True
    with pytest.raises(StoreFailedError, match="fdatasync failed"):
        s.append(ev("t", 2), F)
    fs.fail_fdatasync = False                   # even once the disk "recovers", the tail is unknown
    with pytest.raises(StoreFailedError, match="reopen"):
        s.append(ev("t", 2), W)
    with pytest.raises(StoreFailedError):
        s.install_fence("t", 3)
    assert [e.sequence_number for e in s.read("t")] == [1]   # only what was acknowledged
    s.close()
    with SegmentStore.open(tmp_path, create=True) as s2:   # the written-but-unacknowledged event may be there
        assert s2.head("t") in (1, 2)
        s2.append(ev("t", s2.head("t") + 1), F)


def test_failed_write_fails_the_store(tmp_path):
    fs = FaultyFS(OsFileSystem())
    with SegmentStore.open(tmp_path, fs=fs, create=True) as s:
        fs.fail_pwrite = True
        with pytest.raises(StoreFailedError, match="write failed"):
            s.append(ev("t", 1), W)
        fs.fail_pwrite = False
        with pytest.raises(StoreFailedError):
            s.append(ev("t", 1), W)
    with SegmentStore.open(tmp_path, create=True) as s:
        assert s.head("t") == 0


# ------------------------------------------------------------------------------------------------
# property: random appends, batches, tiers, fences and reopens
# ------------------------------------------------------------------------------------------------

TRAJS = ("t-a", "t-b", "t-c")


class SegmentStoreMachine(RuleBasedStateMachine):
    """Model: per trajectory, the list of acknowledged canonical bytes, and the fence."""

    @initialize(segment_bytes=st.sampled_from([512, 2048, 1 << 20]), preallocate=st.sampled_from([None, 256, 4096]))
    def setup(self, segment_bytes, preallocate):
        self.mem = MemoryFileSystem()
        self.segment_bytes = segment_bytes
        # None: the store's defaults (these short logs are never preallocated); else zeros ahead from the start
        self.kw = {} if preallocate is None else {"preallocate_bytes": preallocate, "preallocate_from_bytes": 0}
        self.store = SegmentStore.open(LOG, fs=self.mem, segment_bytes=segment_bytes, create=True, **self.kw)
        self.model: dict[str, list[Event]] = {t: [] for t in TRAJS}
        self.fences = {t: 0 for t in TRAJS}
        self.counter = 0

    def _fresh(self, tid: str, seq: int, epoch: int) -> Event:
        self.counter += 1
        return Event.create(trajectory_id=tid, event_id=f"{tid}-{self.counter}", sequence_number=seq,
                            payload=RuntimeInput(kind="random", name="draw", value=self.counter * 7919 % 1000),
                            owner_epoch=epoch)

    @rule(plan=st.lists(st.tuples(st.sampled_from(TRAJS), st.sampled_from(["next", "retry", "gap", "stale"])),
                        min_size=1, max_size=6),
          tier=st.sampled_from([W, F]))
    def append_batch(self, plan, tier):
        pending = {t: list(self.model[t]) for t in TRAJS}   # acknowledged + new in this batch
        heads = {t: len(self.model[t]) for t in TRAJS}
        batch, expect = [], []
        for tid, what in plan:
            if what == "retry" and pending[tid]:
                batch.append(pending[tid][-1])
                expect.append("dup")
            elif what == "gap":
                batch.append(self._fresh(tid, heads[tid] + 2, self.fences[tid]))
                expect.append(SequenceGapError)
            elif what == "stale" and self.fences[tid] > 0:
                batch.append(self._fresh(tid, heads[tid] + 1, self.fences[tid] - 1))
                expect.append(StaleOwnerError)
            else:
                heads[tid] += 1
                batch.append(self._fresh(tid, heads[tid], self.fences[tid]))
                pending[tid].append(batch[-1])
                expect.append("new")
        outs = self.store.append_batch(batch, tier)
        for e, out, want in zip(batch, outs, expect):
            if want == "new":
                assert isinstance(out, AppendOutcome) and not out.duplicate
                self.model[e.trajectory_id].append(e)
            elif want == "dup":
                assert isinstance(out, AppendOutcome) and out.duplicate
            else:
                assert isinstance(out, want)

    @rule(tid=st.sampled_from(TRAJS), bump=st.integers(0, 2))
    def install_fence(self, tid, bump):
        self.store.install_fence(tid, self.fences[tid] + bump)
        self.fences[tid] += bump

    @rule()
    def reopen(self):
        self.store.close()
        self.store = SegmentStore.open(LOG, fs=self.mem, segment_bytes=self.segment_bytes, create=True, **self.kw)
        assert not self.store.recovery.torn_tail_trimmed
        assert self.store.recovery.zero_tail_bytes == 0       # a clean close cut the preallocated zeros

    @rule()
    def process_crash(self):
        """The process dies without close(): its page cache (here, the files) survives."""
        files = self.mem.snapshot()
        self.store._release_files()
        self.mem = MemoryFileSystem(files=files)
        self.store = SegmentStore.open(LOG, fs=self.mem, segment_bytes=self.segment_bytes, create=True, **self.kw)
        assert not self.store.recovery.torn_tail_found       # everything written survived: zeros are no torn tail

    @invariant()
    def read_back_equals_acknowledged(self):
        if not hasattr(self, "store"):
            return
        for t in TRAJS:
            assert [e.canonical for e in self.store.read(t)] == [e.canonical for e in self.model[t]]
            assert self.store.fence(t) == self.fences[t]

    def teardown(self):
        if hasattr(self, "store"):
            self.store.close()


SegmentStoreMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=25, deadline=None,
                                                 suppress_health_check=[HealthCheck.too_slow])
test_segment_store_property = SegmentStoreMachine.TestCase


@pytest.mark.parametrize("held_max", [0, 64 * 1024])
def test_os_pwrite_writes_at_the_offset_and_raises_the_os_error(tmp_path, monkeypatch, held_max):
    """Fault model: the write path that keeps the GIL (small writes, libc ``pwrite`` through
    ctypes) and the ``os.pwrite`` one must mean the same: bytes land at the offset given, a write
    past the end extends the file, and a refused write raises the OSError the kernel reported.
    Goal: identical file contents for both paths, small and large writes; EBADF on a read-only
    descriptor."""
    import errno

    import kernel_lib.log.fs as fs_mod
    monkeypatch.setattr(fs_mod, "GIL_HELD_WRITE_BYTES_MAX", held_max)
    fs = OsFileSystem()
    h = fs.open_file(str(tmp_path / "f"), create=True)
    try:
        fs.pwrite(h, 0, b"a" * 10)
        fs.pwrite(h, 4, b"XY")
        fs.pwrite(h, 10, b"z" * 100_000)   # over the GIL-held limit: os.pwrite either way
        fs.pwrite(h, 100_010, b"end")
    finally:
        fs.close(h)
    assert (tmp_path / "f").read_bytes() == b"aaaaXYaaaa" + b"z" * 100_000 + b"end"
    fd = os.open(tmp_path / "f", os.O_RDONLY)
    ro = fs_mod._OsHandle(str(tmp_path / "f"), fd)
    try:
        with pytest.raises(OSError) as info:
            fs.pwrite(ro, 0, b"no")
        assert info.value.errno == errno.EBADF
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------------------------
# preallocation: zeros written ahead of the log's end (module docstring, "Preallocation")
# ------------------------------------------------------------------------------------------------

SMALL = {"preallocate_bytes": 1024, "preallocate_from_bytes": 0}


def _file_size(path) -> int:
    return os.stat(path).st_size


def test_a_long_log_is_preallocated_and_a_barrier_then_leaves_the_file_size_alone(tmp_path):
    """The file system's own size and block counts: past 64 KiB the segment is preallocated with
    written zeros, so the fdatasync of the appends that follow does not have to commit a new size."""
    with SegmentStore.open(tmp_path, create=True) as s:
        path = s.segment_paths()[-1]
        seq = 0
        while True:
            seq += 1
            s.append(ev("t", seq), F)
            if s.end_position[1] >= 64 * 1024:         # the first append reaching 64 KiB preallocates
                break
            assert _file_size(path) == s.end_position[1]   # below the threshold: the file is the log
        size, end = _file_size(path), s.end_position[1]
        assert size > end and size % 4096 == 0 and size - end >= 64 * 1024 - 4096
        assert os.stat(path).st_blocks * 512 >= size   # allocated and written, not a sparse hole
        with open(path, "rb") as f:
            data = f.read()
        assert data[end:] == bytes(size - end)
        for _ in range(20):                            # appends inside the zeros: same size
            seq += 1
            s.append(ev("t", seq), F)
            assert _file_size(path) == size
        end = s.end_position[1]
    assert _file_size(path) == end                     # a clean close cuts the zeros off
    with SegmentStore.open(tmp_path) as s:
        assert s.head("t") == seq and s.recovery.zero_tail_bytes == 0 and not s.recovery.details


def test_a_crash_leaves_zeros_that_reopen_reads_as_the_end_of_the_log(tmp_path):
    s = SegmentStore.open(tmp_path, create=True, **SMALL)
    evs = [ev("t", i) for i in range(1, 9)]
    for e in evs:
        s.append(e, F if e.sequence_number % 2 else W)
    path, end = s.segment_paths()[-1], s.end_position
    size = _file_size(path)
    assert size > end[1]
    s._release_files()                                  # killed: no close, the zeros stay
    with SegmentStore.open(tmp_path, **SMALL) as s2:
        rep = s2.recovery
        assert not rep.torn_tail_found and not rep.torn_tail_trimmed and rep.moved_aside == []
        assert rep.zero_tail_bytes == size - end[1] and "preallocated" in rep.details[0]
        assert s2.end_position == end and _file_size(path) == size   # kept, not trimmed
        assert [e.canonical for e in s2.read("t")] == [e.canonical for e in evs]
        s2.append(ev("t", 9), F)                        # written where the log ends, over the zeros
        assert s2.end_position[1] > end[1] and _file_size(path) == size
    assert not [n for n in os.listdir(tmp_path) if "trimmed-at" in n]
    with SegmentStore.open(tmp_path) as s3:
        assert s3.head("t") == 9


def test_read_only_open_beside_a_preallocating_writer_reads_to_the_end_of_the_log(tmp_path):
    with SegmentStore.open(tmp_path, create=True, **SMALL) as w:
        for i in range(1, 6):
            w.append(ev("t", i), F)
        path = w.segment_paths()[-1]
        assert _file_size(path) > w.end_position[1]
        before = open(path, "rb").read()
        with SegmentStore.open(tmp_path, read_only=True) as r:
            assert r.head("t") == 5 and r.end_position == w.end_position and not r.recovery.torn_tail_found
            assert r.recovery.zero_tail_bytes == _file_size(path) - w.end_position[1]
        assert open(path, "rb").read() == before


def _crashed_log(**kw) -> tuple[MemoryFileSystem, list[Event], tuple[int, int]]:
    mem = MemoryFileSystem()
    s = SegmentStore.open(LOG, fs=mem, create=True, **(kw or SMALL))
    evs = [ev("t", i) for i in range(1, 6)]
    for e in evs:
        s.append(e, F)
    end = s.end_position
    s._release_files()
    return mem, evs, end


def test_a_record_cut_short_in_the_zeros_is_a_torn_tail_and_only_its_bytes_are_moved_aside():
    mem, evs, (seg, end) = _crashed_log(preallocate_bytes=64 * 1024, preallocate_from_bytes=0)
    path = f"{LOG}/{segment_name(seg)}"
    frame = encode_frame(KIND_EVENT, ev("t", 6).canonical, (seg, end))
    size = len(mem.files[path])
    mem.files[path][end:end + len(frame) // 2] = frame[: len(frame) // 2]   # half of it reached the disk
    assert len(mem.files[path]) == size and size - end - len(frame) // 2 >= ZERO_RUN_NOT_COPIED_BYTES
    with SegmentStore.open(LOG, fs=mem, **SMALL) as s:
        rep = s.recovery
        assert rep.torn_tail_trimmed and rep.tail_damage == "torn" and "unwritten zeros" in rep.torn_tail_reason
        assert rep.bytes_trimmed == size - end and rep.trimmed_at == f"{segment_name(seg)}:{end}"
        assert rep.moved_aside == [f"{path}.trimmed-at-{end}"]
        assert mem.read_all(rep.moved_aside[0]) == frame[: len(frame) // 2]   # the non-zero bytes, all of them
        assert rep.zero_tail_bytes == size - end - len(frame) // 2
        assert [e.canonical for e in s.read("t")] == [e.canonical for e in evs]


def test_a_garbage_sector_after_the_zeros_is_a_torn_tail_not_the_end_of_the_log():
    mem, evs, (seg, end) = _crashed_log()
    path = f"{LOG}/{segment_name(seg)}"
    buf = mem.files[path]
    assert len(buf) - end >= 64
    buf[len(buf) - 16:] = b"\x17" * 16                  # an unsynced write that survived out of order
    with SegmentStore.open(LOG, fs=mem, **SMALL) as s:
        assert s.recovery.torn_tail_trimmed and s.recovery.trimmed_at == f"{segment_name(seg)}:{end}"
        assert mem.read_all(s.recovery.moved_aside[0]).endswith(b"\x17" * 16)
        assert [e.canonical for e in s.read("t")] == [e.canonical for e in evs]


def test_zeros_over_synced_records_followed_by_a_synced_record_are_corruption():
    mem, evs, (seg, end) = _crashed_log()
    path = f"{LOG}/{segment_name(seg)}"
    second = HEADER_BYTES + len(evs[0].canonical)
    third = second + HEADER_BYTES + len(evs[1].canonical)
    mem.files[path][second:third] = bytes(third - second)   # durable record 2 reads as zeros now
    before = mem.snapshot()
    with pytest.raises(CorruptLogError, match=f"offset {second}"):
        SegmentStore.open(LOG, fs=mem, **SMALL)
    assert mem.snapshot() == before


def test_only_the_last_segment_may_end_in_zeros():
    mem = MemoryFileSystem()
    with SegmentStore.open(LOG, fs=mem, segment_bytes=2048, create=True, **SMALL) as s:
        for i in range(1, 12):
            s.append(ev("t", i), F)
        n = s.end_position[0]
        assert n >= 3
        sizes = {k: len(mem.files[f"{LOG}/{segment_name(k)}"]) for k in range(1, n)}
    # every rolled segment was cut back to its last record (a frame never ends in a zero byte)
    assert all(mem.files[f"{LOG}/{segment_name(k)}"][-1] != 0 for k in sizes)
    mem.files[f"{LOG}/{segment_name(1)}"].extend(bytes(512))     # zeros appended to a rolled segment
    with pytest.raises(CorruptLogError, match=f"{segment_name(1)} offset {sizes[1]}"):
        SegmentStore.open(LOG, fs=mem, segment_bytes=2048, **SMALL)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "4096"])
def test_preallocation_sizes_must_be_ints_of_zero_or_more(tmp_path, bad):
    for name in ("preallocate_bytes", "preallocate_from_bytes"):
        with pytest.raises(ConfigError, match=name):
            SegmentStore.open(tmp_path, create=True, **{name: bad})
