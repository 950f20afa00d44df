"""A segment log's read-write open never destroys stored bytes (issue 14, §11.3.1).

Fault model: bit rot flips one bit inside the last record of a segment log whose every append was
acknowledged at FDATASYNC (nothing later vouches for that record), or a crash tears the last
record (the file ends mid-record), or leaves later segment files behind a torn record.
Invariant: whatever a read-write open cuts off the log is first written, byte for byte, to a file
beside the segment named with the offset it came from; an earlier such file is never overwritten
by a later open; a complete record that fails its CRC is reported as corruption, an incomplete
one as a torn tail.
Goal: an acknowledged event hit by bit rot can still be recovered by hand from the moved-aside
bytes, and the report says which kind of damage was found.
"""

from __future__ import annotations

import os

from hypothesis import given, settings, strategies as st

from kernel_lib.core.events import Event, RuntimeInput
from kernel_lib.log import AckTier
from kernel_lib.log.fs import MemoryFileSystem
from kernel_lib.log.segment import HEADER_BYTES, KIND_EVENT, SegmentStore, encode_frame, segment_name

F = AckTier.FDATASYNC
LOG = "/log"


def ev(seq: int, note: str = "") -> Event:
    return Event.create(trajectory_id="t", event_id=f"e{seq}", sequence_number=seq, owner_epoch=0,
                        payload=RuntimeInput(kind="identifier", name="n", value=f"{seq}{note}"))


def _write(directory, n: int, fs=None) -> list[Event]:
    evs = [ev(i, "x" * (i * 7 % 40)) for i in range(1, n + 1)]
    with SegmentStore.open(directory, fs=fs, create=True) as s:
        for e in evs:
            s.append(e, F)
    return evs


def _aside(names) -> list[str]:
    return sorted(n for n in names if ".trimmed-at-" in n)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 5), pick=st.integers(0, 10**6), bit=st.integers(0, 7))
def test_bit_flip_in_last_acknowledged_record_is_moved_aside_and_called_corruption(n, pick, bit):
    mem = MemoryFileSystem()
    evs = _write(LOG, n, fs=mem)
    path = f"{LOG}/{segment_name(1)}"
    data = mem.read_all(path)
    start = len(data) - HEADER_BYTES - len(evs[-1].canonical)
    byte = start + HEADER_BYTES + pick % len(evs[-1].canonical)      # a bit of the last record's body
    damaged = bytearray(data)
    damaged[byte] ^= 1 << bit
    mem.files[path] = bytearray(damaged)
    with SegmentStore.open(LOG, fs=mem) as s:
        rep = s.recovery
        assert [e.canonical for e in s.read("t")] == [e.canonical for e in evs[:-1]]
        assert rep.tail_damage == "corrupt" and rep.details[0].startswith(f"corruption at {segment_name(1)}:{start}")
        assert rep.moved_aside == [f"{path}.trimmed-at-{start}"]
    # the removed tail is kept byte for byte, beside the segment, named with its offset
    assert mem.read_all(f"{path}.trimmed-at-{start}") == bytes(damaged[start:])
    assert mem.read_all(path) == bytes(damaged[:start])
    # a second open finds a clean log and leaves the aside file alone
    with SegmentStore.open(LOG, fs=mem) as s:
        assert not s.recovery.torn_tail_trimmed and s.recovery.moved_aside == []
    assert _aside(mem.listdir(LOG)) == [f"{segment_name(1)}.trimmed-at-{start}"]
    assert mem.read_all(f"{path}.trimmed-at-{start}") == bytes(damaged[start:])


def test_second_damage_at_the_same_offset_does_not_overwrite_the_first_aside_file(tmp_path):
    evs = _write(tmp_path, 3)
    seg = tmp_path / segment_name(1)
    data = seg.read_bytes()
    start = len(data) - HEADER_BYTES - len(evs[-1].canonical)
    first = bytearray(data)
    first[-1] ^= 0x01
    seg.write_bytes(bytes(first))
    with SegmentStore.open(tmp_path) as s:
        assert s.recovery.tail_damage == "corrupt"
        s.append(ev(3, "again"), F)                # a new event 3 lands at the same offset
    second = bytearray(seg.read_bytes())
    second[-1] ^= 0x01
    seg.write_bytes(bytes(second))
    with SegmentStore.open(tmp_path) as s:
        assert s.recovery.moved_aside == [f"{seg}.trimmed-at-{start}.2"]
        assert s.head("t") == 2
    assert (tmp_path / f"{segment_name(1)}.trimmed-at-{start}").read_bytes() == bytes(first[start:])
    assert (tmp_path / f"{segment_name(1)}.trimmed-at-{start}.2").read_bytes() == bytes(second[start:])


def test_torn_tail_cut_mid_record_is_moved_aside_and_called_torn(tmp_path):
    evs = _write(tmp_path, 4)
    seg = tmp_path / segment_name(1)
    data = seg.read_bytes()
    start = len(data) - HEADER_BYTES - len(evs[-1].canonical)
    cut = start + HEADER_BYTES + 3
    seg.write_bytes(data[:cut])
    with SegmentStore.open(tmp_path) as s:
        rep = s.recovery
        assert rep.tail_damage == "torn" and "torn tail" in rep.details[0] and "corruption" not in rep.details[0]
        assert rep.bytes_trimmed == cut - start and s.head("t") == 3
    assert (tmp_path / f"{segment_name(1)}.trimmed-at-{start}").read_bytes() == data[start:cut]
    assert seg.read_bytes() == data[:start]


def test_later_segment_files_behind_a_torn_tail_are_moved_aside_not_deleted(tmp_path):
    with SegmentStore.open(tmp_path, segment_bytes=1024, create=True) as s:
        for i in range(1, 12):
            s.append(ev(i), AckTier.WRITE)
        last = s.end_position[0]
    seg = tmp_path / segment_name(last)
    end = seg.stat().st_size
    tail = encode_frame(KIND_EVENT, ev(12).canonical, (last, 0))[:40]
    with open(seg, "ab") as f:
        f.write(tail)
    zeros, garbage = bytes(300), os.urandom(100)
    (tmp_path / segment_name(last + 1)).write_bytes(zeros)
    (tmp_path / segment_name(last + 2)).write_bytes(garbage)
    with SegmentStore.open(tmp_path, segment_bytes=1024) as s:
        assert s.recovery.bytes_trimmed == 40 + 300 + 100 and len(s.recovery.moved_aside) == 3
    assert not (tmp_path / segment_name(last + 1)).exists() and not (tmp_path / segment_name(last + 2)).exists()
    assert (tmp_path / f"{segment_name(last)}.trimmed-at-{end}").read_bytes() == tail
    assert (tmp_path / f"{segment_name(last + 1)}.trimmed-at-0").read_bytes() == zeros
    assert (tmp_path / f"{segment_name(last + 2)}.trimmed-at-0").read_bytes() == garbage


def test_read_only_open_reports_corruption_and_moves_nothing(tmp_path):
    evs = _write(tmp_path, 2)
    seg = tmp_path / segment_name(1)
    damaged = bytearray(seg.read_bytes())
    damaged[-2] ^= 0x10
    seg.write_bytes(bytes(damaged))
    with SegmentStore.open(tmp_path, read_only=True) as s:
        assert s.recovery.tail_damage == "corrupt" and s.recovery.details[0].startswith("corruption")
        assert s.head("t") == len(evs) - 1
    assert _aside(os.listdir(tmp_path)) == [] and seg.read_bytes() == bytes(damaged)
