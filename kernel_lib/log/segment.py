"""The segment-file log store: framed, CRC32C-checked records in numbered files (§11.3.1, §11.8.4).

Acknowledgment tiers (§11.3.1, table 2)
---------------------------------------

* ``WRITE``: acknowledged once ``pwrite`` returned. The bytes sit in the kernel page cache, so the
  acknowledgment survives a crash of the worker process, not a power loss.
* ``FDATASYNC``: acknowledged once ``pwrite`` and then ``fdatasync`` returned (and, for a freshly
  created segment file, once its directory entry was made durable), so it survives a host crash
  with the volume intact.

A batch is one ``pwrite`` of all its accepted records and at most one ``fdatasync``.

Files
-----

``<directory>/00000001.seg``, ``00000002.seg``, ... hold the records; numbering starts at 1 and
has no holes. ``<directory>/LOCK`` carries the advisory ``flock`` (and the holder's pid) that keeps a
second opener from appending. A new segment is started when the next write would push the
current one past ``segment_bytes`` (a single batch larger than that gets a segment of its own).

A *log position* is the pair ``(segment number, byte offset)``, ordered lexicographically.

Record frame (little-endian)
----------------------------

======  ====  ================================  =================================================
offset  size  field                             meaning
======  ====  ================================  =================================================
0       4     magic                             ``F7 44 41 4C`` (``\\xf7DAL``); 0xF7 never occurs in
                                                UTF-8, so never inside an event body
4       1     kind                              1 = EVENT, 2 = FENCE
5       1     format_version                    1
6       2     flags                             0
8       4     body_length_bytes                 length of the body that follows the header
12      4     synced_watermark_segment          the synced watermark (see below): segment number
16      8     synced_watermark_offset_bytes     ... and byte offset in that segment
24      4     crc32c                            CRC32C over bytes 0..23 of this header + the body
28      n     body                              EVENT: the event's canonical bytes (RFC 8785);
                                                FENCE: u64 owner_epoch + UTF-8 trajectory id
======  ====  ================================  =================================================

The synced watermark, and how open tells a torn tail from corruption
--------------------------------------------------------------------

Every record carries the log position up to which the store had *completed* a barrier when it
wrote the record: every byte before that position had been covered by a returned ``fdatasync``
(and every segment file before it by a directory ``fsync``). Open scans the segments in order.
When a frame at position X fails (short header, bad magic, a length that runs past the end of
the file, a CRC mismatch, or a body that does not parse), open searches the rest of the log for
frames with a good magic and CRC:

* if any of them claims a synced watermark **greater than X**, the byte at X had already been
  made durable before that record was written. A durable byte cannot be a torn write, so this
  is damage to stored data: :class:`~kernel_lib.errors.CorruptLogError` naming file and offset,
  and nothing is changed on disk;
* otherwise nothing after X was ever proven durable: X starts a torn (or never synced) tail.
  Open removes the later segment files, fsyncs the directory, truncates the file at X, fdatasyncs
  it, and reports what it cut in :attr:`SegmentStore.recovery`.

Why this is sound: a host crash may keep any subset of the writes that no barrier covered,
in any order, and may tear the last one at sector boundaries. Every record in such a write
was stamped with a watermark no later than the first byte that was still unsynced, and X can
only lie at or after that byte, so surviving pieces of the unsynced tail never claim more
than X and are trimmed with it. A record can claim more than X only if X was durable. Then
the damage is real, and trimming would silently drop acknowledged events. Three rules keep
the watermark honest:
(1) it advances only after a barrier returns; (2) a roll fdatasyncs the old segment before the
new file is created, then fdatasyncs the new file and fsyncs the directory, so every record in
segment ``s + 1`` claims at least ``(s + 1, 0)``; (3) a trim removes later segments (and
fsyncs the directory) before it truncates, so a half-done trim never exposes stale records.
Open also fdatasyncs the last segment and fsyncs the directory, so all it returns is durable.

After the scan, open checks that the events form gapless per-trajectory sequences, with unique
event ids and owner_epochs that never fall below a fence; a violation is a CorruptLogError.
Payloads are validated against their registered schema when :meth:`SegmentStore.read` decodes
them, not at open.

What the rule cannot see: damage inside the *last* synced records, with no later record to
vouch for them, looks exactly like a torn write. It is trimmed and reported in ``recovery``
(never returned as a different event), so a caller that must not lose an FDATASYNC
acknowledgment to bit rot needs a second copy (the replicated tier of table 2), not a local
checksum. The crash checker (:mod:`kernel_lib.crashcheck`) tests the rule on every crash state.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import threading
from dataclasses import dataclass
from typing import Iterator, Sequence

import crc32c as _crc32c

from ..errors import (
    ConfigError,
    CorruptLogError,
    StaleOwnerError,
    StoreClosedError,
    StoreError,
    StoreFailedError,
)
from ..events import Event, decode_stored
from .base import AckTier, AppendOutcome, LogStore, RecoveryReport, StoredRef, check_append
from .fs import DirLock, FileHandle, FileSystem, OsFileSystem

MAGIC = b"\xf7DAL"
FORMAT_VERSION = 1
KIND_EVENT = 1
KIND_FENCE = 2
_HEAD = struct.Struct("<4sBBHIIQ")   # magic, kind, version, flags, body length, watermark seg/off
_CRC = struct.Struct("<I")
_EPOCH = struct.Struct("<Q")
HEADER_BYTES = _HEAD.size + _CRC.size   # 28
DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
MIN_SEGMENT_BYTES = 256
_SEGMENT_NAME = re.compile(r"^(\d{8})\.seg$")

Position = tuple[int, int]   # (segment number, byte offset)


def segment_name(number: int) -> str:
    """File name of segment ``number`` (1-based): ``00000001.seg``."""
    return f"{number:08d}.seg"


def encode_frame(kind: int, body: bytes, synced_watermark: Position) -> bytes:
    """One framed record (header + body) as laid out in the module docstring."""
    head = _HEAD.pack(MAGIC, kind, FORMAT_VERSION, 0, len(body), synced_watermark[0], synced_watermark[1])
    return head + _CRC.pack(_crc32c.crc32c(body, _crc32c.crc32c(head))) + body


@dataclass(frozen=True, slots=True)
class _Frame:
    """A frame that passed every check. ``fields`` is (trajectory_id, event_id, seq, owner_epoch)
    for EVENT and (trajectory_id, owner_epoch) for FENCE."""

    segment: int
    offset: int
    end: int
    kind: int
    body: bytes
    synced_watermark: Position
    fields: tuple


class _Unsupported(Exception):
    """A CRC-valid frame of a format version or kind this build does not know."""


def _parse_frame(data: bytes, offset: int, segment: int) -> "_Frame | str":
    """Parse the frame at ``offset``. Return it, or a reason string describing why it is bad.

    Raises _Unsupported for a CRC-valid frame of an unknown version/kind (never trimmed).
    """
    avail = len(data) - offset
    if avail < HEADER_BYTES:
        return f"short header ({avail} of {HEADER_BYTES} bytes)"
    magic, kind, version, flags, length, wm_seg, wm_off = _HEAD.unpack_from(data, offset)
    if magic != MAGIC:
        return "bad magic"
    end = offset + HEADER_BYTES + length
    if end > len(data):
        return f"body length {length} runs past the end of the file"
    (crc,) = _CRC.unpack_from(data, offset + _HEAD.size)
    body = data[offset + HEADER_BYTES:end]
    if _crc32c.crc32c(body, _crc32c.crc32c(data[offset:offset + _HEAD.size])) != crc:
        return "CRC mismatch"
    if version != FORMAT_VERSION or kind not in (KIND_EVENT, KIND_FENCE) or flags != 0:
        raise _Unsupported(f"record kind {kind} format_version {version} flags {flags}")
    wm = (wm_seg, wm_off)
    if wm > (segment, offset):
        return f"synced watermark {wm} lies beyond the record itself"
    try:
        fields = _event_fields(body) if kind == KIND_EVENT else _fence_fields(body)
    except ValueError as exc:
        return f"undecodable body ({exc})"
    return _Frame(segment, offset, end, kind, body, wm, fields)


def _event_fields(body: bytes) -> tuple[str, str, int, int]:
    """The envelope fields the index needs. Raises ValueError if the body is not an envelope."""
    try:
        d = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not UTF-8 JSON: {exc}") from None
    if not isinstance(d, dict):
        raise ValueError("not a JSON object")
    tid, eid, seq, epoch = (d.get(k) for k in ("trajectory_id", "event_id", "sequence_number", "owner_epoch"))
    if not (isinstance(tid, str) and tid and isinstance(eid, str) and eid
            and type(seq) is int and seq >= 1 and type(epoch) is int and epoch >= 0):
        raise ValueError("envelope fields trajectory_id/event_id/sequence_number/owner_epoch missing or invalid")
    return tid, eid, seq, epoch


def _fence_fields(body: bytes) -> tuple[str, int]:
    if len(body) <= _EPOCH.size:
        raise ValueError("fence body too short")
    (epoch,) = _EPOCH.unpack_from(body)
    try:
        tid = body[_EPOCH.size:].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"fence trajectory id is not UTF-8: {exc}") from None
    return tid, epoch


class SegmentStore(LogStore):
    """The project's own segment-file log. Open with :meth:`SegmentStore.open`.

    In memory it keeps, per trajectory, the canonical bytes of every event (decoded on
    :meth:`read`), the fence (newest owner_epoch seen), and ``event_id -> StoredRef``; all are
    rebuilt by the scan in :meth:`open`. Appends are serialized by a lock.

    Attributes:
        recovery: what open found and repaired (:class:`RecoveryReport`).
        directory: the log directory. fs: the :class:`FileSystem` every operation goes through.
    """

    name = "segment"
    offered_tiers = (AckTier.WRITE, AckTier.FDATASYNC)

    def __init__(self, directory: str, fs: FileSystem, segment_bytes: int, dir_lock: DirLock):
        """Private: use :meth:`open`."""
        self.directory = str(directory)
        self.fs = fs
        self.segment_bytes = segment_bytes
        self._dir_lock = dir_lock
        self._lock = threading.RLock()
        self._bytes: dict[str, list[bytes]] = {}
        self._ids: dict[str, StoredRef] = {}
        self._fences: dict[str, int] = {}
        self._segment = 1
        self._handle: FileHandle | None = None
        self._size = 0                      # bytes in the current segment
        self._synced: Position = (1, 0)     # synced watermark: everything before it is durable
        self._failed: str | None = None
        self._closed = False
        self.recovery = RecoveryReport(store=self.name)

    # --- opening and recovery ------------------------------------------------------------------
    @classmethod
    def open(cls, directory: "str | os.PathLike[str]", fs: FileSystem | None = None,
             segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> "SegmentStore":
        """Open (creating if needed) the segment log in ``directory`` and recover it.

        Args:
            directory: the log directory; created (and its parent fsynced) if missing.
            fs: the file-system seam (default :class:`OsFileSystem`).
            segment_bytes: size at which a new segment file is started (≥ 256 bytes).

        Returns:
            The store, with :attr:`recovery` describing any torn tail trimmed.

        Raises:
            ConfigError: ``segment_bytes`` too small.
            StoreError: another opener holds the directory lock, or a record was written by a
                newer format.
            CorruptLogError: damage before the tail (named file and offset), or events that do
                not form gapless per-trajectory sequences. Nothing on disk is changed.
            StoreError: the file system failed while opening (the OSError is chained).
        """
        if segment_bytes < MIN_SEGMENT_BYTES:
            raise ConfigError(f"segment_bytes must be >= {MIN_SEGMENT_BYTES}, got {segment_bytes}")
        fs = fs if fs is not None else OsFileSystem()
        directory = os.fspath(directory)
        try:
            if not fs.exists(directory):
                fs.makedirs(directory)
                fs.fsync_dir(os.path.dirname(os.path.normpath(directory)) or ".")
            lock = fs.lock_dir(directory)
        except OSError as exc:
            raise StoreError(f"cannot open segment log {directory}: {exc}") from exc
        store = cls(directory, fs, segment_bytes, lock)
        try:
            store._recover()
        except OSError as exc:
            store._release_files()
            raise StoreError(f"cannot open segment log {directory}: {exc}") from exc
        except BaseException:
            store._release_files()
            raise
        return store

    def _path(self, number: int) -> str:
        return os.path.join(self.directory, segment_name(number))

    def _recover(self) -> None:
        fs = self.fs
        numbers = sorted(int(m.group(1)) for n in fs.listdir(self.directory)
                         if (m := _SEGMENT_NAME.match(n)))
        datas: dict[int, bytes] = {}
        frames: list[_Frame] = []
        damage: tuple[int, int, str] | None = None
        for expected, number in enumerate(numbers, start=1):
            if number != expected:
                damage = (expected, 0, f"segment file {segment_name(expected)} is missing")
                break
            data = datas[number] = fs.read_all(self._path(number))
            off = 0
            while off < len(data):
                try:
                    fr = _parse_frame(data, off, number)
                except _Unsupported as exc:
                    raise StoreError(f"{self._path(number)} offset {off}: {exc} is not supported by this "
                                     "build (written by a newer version?); refusing to open") from None
                if isinstance(fr, str):
                    damage = (number, off, fr)
                    break
                frames.append(fr)
                off = fr.end
            if damage:
                break

        if damage is not None:
            self._classify_damage(damage, numbers, datas)
        self._build_index(frames)

        # --- everything checked: now (and only now) repair the files ---------------------------
        if damage is not None:
            dseg, doff, reason = damage
            later = [n for n in numbers if n > dseg]
            trimmed = sum(len(datas[n]) if n in datas else fs.size(self._path(n)) for n in later)
            for n in reversed(later):
                fs.remove(self._path(n))
                self.recovery.details.append(f"removed {segment_name(n)} (after the torn tail)")
            if later:
                fs.fsync_dir(self.directory)
            if dseg in datas:
                self._segment = dseg
                h = self._handle = fs.open_file(self._path(dseg))
                trimmed += len(datas[dseg]) - doff
                fs.truncate(h, doff)
                self._size = doff
            elif dseg > 1:  # the missing segment itself: continue in the one before it
                self._segment = dseg - 1
                self._handle = fs.open_file(self._path(self._segment))
                self._size = len(datas[self._segment])
            else:  # segment 1 missing and nothing valid after it: start afresh
                self._segment = 1
                self._handle = fs.open_file(self._path(1), create=True)
                self._size = 0
            where = f"{segment_name(dseg)}:{doff}"
            self.recovery.torn_tail_trimmed = True
            self.recovery.bytes_trimmed = trimmed
            self.recovery.trimmed_at = where
            self.recovery.details.insert(0, f"trimmed a torn tail at {where} ({reason}): {trimmed} bytes; "
                                            "no later record claims it was synced")
        elif numbers:
            self._segment = numbers[-1]
            self._handle = fs.open_file(self._path(self._segment))
            self._size = len(datas[self._segment])
        else:
            self._segment = 1
            self._handle = fs.open_file(self._path(1), create=True)
            self._size = 0
        # make what open returns durable, so the watermark starts at the end of the log
        fs.fdatasync(self._handle)
        fs.fsync_dir(self.directory)
        self._synced = (self._segment, self._size)
        self.recovery.events_recovered = len(self._ids)

    def _classify_damage(self, damage: tuple[int, int, str], numbers: list[int], datas: dict[int, bytes]) -> None:
        """Raise CorruptLogError if a later valid frame claims a synced watermark past the damage."""
        dseg, doff, reason = damage
        x = (dseg, doff)
        for number in numbers:
            if number < dseg:
                continue
            data = datas.get(number)
            if data is None:
                data = datas[number] = self.fs.read_all(self._path(number))
            pos = data.find(MAGIC, doff + 1 if number == dseg else 0)
            while pos != -1:
                try:
                    fr = _parse_frame(data, pos, number)
                except _Unsupported:
                    fr = None
                if isinstance(fr, _Frame) and fr.synced_watermark > x:
                    ws, wo = fr.synced_watermark
                    raise CorruptLogError(
                        f"{self._path(dseg)} offset {doff}: {reason}, but the valid record at "
                        f"{segment_name(number)}:{pos} was written after {segment_name(ws)}:{wo} had been "
                        "synced, so this is damage to durable data, not a torn write; refusing to trim")
                pos = data.find(MAGIC, pos + 1)

    def _build_index(self, frames: list[_Frame]) -> None:
        def where(fr: _Frame) -> str:
            return f"{self._path(fr.segment)} offset {fr.offset}"

        for fr in frames:
            if fr.kind == KIND_FENCE:
                tid, epoch = fr.fields
                self._fences[tid] = max(self._fences.get(tid, 0), epoch)
                continue
            tid, eid, seq, epoch = fr.fields
            rows = self._bytes.setdefault(tid, [])
            if eid in self._ids:
                raise CorruptLogError(f"{where(fr)}: event id {eid} is stored twice")
            if seq != len(rows) + 1:
                raise CorruptLogError(f"{where(fr)}: event {eid} has {tid}#{seq} but the trajectory's head is "
                                      f"{len(rows)} (sequence gap inside the log)")
            fence = self._fences.get(tid, 0)
            if epoch < fence:
                raise CorruptLogError(f"{where(fr)}: event {eid} has owner_epoch={epoch} after the log "
                                      f"had fenced {tid} at {fence}")
            rows.append(fr.body)
            self._ids[eid] = StoredRef(tid, seq, hashlib.sha256(fr.body).hexdigest())
            self._fences[tid] = max(fence, epoch)

    # --- appends -------------------------------------------------------------------------------
    def _usable(self) -> None:
        if self._closed:
            raise StoreClosedError(f"segment log {self.directory} is closed")
        if self._failed:
            raise StoreFailedError(f"segment log {self.directory} failed earlier ({self._failed}); its tail "
                                   "is unknown, reopen it to recover")

    def _fail(self, exc: OSError, what: str) -> StoreFailedError:
        self._failed = f"{what}: {exc}"
        return StoreFailedError(f"segment log {self.directory}: {what} failed ({exc}); nothing in this call is "
                                "acknowledged and the store refuses appends until reopened")

    def _roll(self) -> None:
        """Start the next segment: sync the old one, create the new one, make its entry durable."""
        fs = self.fs
        if self._synced < (self._segment, self._size):
            self._sync()
        fs.close(self._handle)
        self._segment += 1
        self._handle = fs.open_file(self._path(self._segment), create=True)
        self._size = 0
        fs.fdatasync(self._handle)
        fs.fsync_dir(self.directory)
        self._synced = (self._segment, 0)

    def _sync(self) -> None:
        """The host-crash barrier: fdatasync the current segment and advance the watermark."""
        self.fs.fdatasync(self._handle)
        self._synced = (self._segment, self._size)

    def _write_records(self, records: list[tuple[int, bytes]]) -> None:
        """Frame ``records`` ((kind, body) pairs) and write them with one pwrite, rolling first
        if they would push the current segment past ``segment_bytes``."""
        total = sum(HEADER_BYTES + len(body) for _, body in records)
        if self._size > 0 and self._size + total > self.segment_bytes:
            self._roll()
        buf = b"".join(encode_frame(kind, body, self._synced) for kind, body in records)
        self.fs.pwrite(self._handle, self._size, buf)
        self._size += total

    def append_batch(self, events: Sequence[Event], tier: AckTier) -> list["AppendOutcome | StoreError"]:
        """Append ``events`` with one write and, at ``FDATASYNC``, one fdatasync (§11.8.4).

        Returns one :class:`AppendOutcome` or error per event, in order (see
        :meth:`LogStore.append_batch`). An identical retry acknowledged at ``FDATASYNC`` first makes
        the stored copy durable if it was only written.

        Raises:
            TierNotOfferedError: ``tier`` is not WRITE or FDATASYNC.
            StoreFailedError: the write or fdatasync failed now or earlier (reopen to recover).
            StoreClosedError: the store was closed.
        """
        self.check_tier(tier)
        with self._lock:
            self._usable()
            out: list[AppendOutcome | StoreError] = []
            new_ids: dict[str, tuple[StoredRef, bytes]] = {}
            heads: dict[str, int] = {}
            fences: dict[str, int] = {}
            accepted: list[Event] = []
            for ev in events:
                t = ev.trajectory_id
                if t not in heads:
                    heads[t] = len(self._bytes.get(t, ()))
                    fences[t] = self._fences.get(t, 0)
                ref_raw = new_ids.get(ev.event_id)
                if ref_raw is None:
                    ref = self._ids.get(ev.event_id)
                    ref_raw = (ref, self._bytes[ref.trajectory_id][ref.sequence_number - 1]) if ref else None
                ref, raw = ref_raw if ref_raw else (None, None)
                try:
                    dup = check_append(ev, ref, raw, heads[t], fences[t])
                except StoreError as exc:
                    out.append(exc)
                    continue
                if dup:
                    out.append(AppendOutcome(ev.event_id, ref.trajectory_id, ref.sequence_number, tier, True))
                    continue
                new_ids[ev.event_id] = (StoredRef(t, ev.sequence_number, ev.digest), ev.canonical)
                heads[t] = ev.sequence_number
                fences[t] = max(fences[t], ev.owner_epoch)
                accepted.append(ev)
                out.append(AppendOutcome(ev.event_id, t, ev.sequence_number, tier))
            acknowledged = any(isinstance(o, AppendOutcome) for o in out)
            try:
                if accepted:
                    self._write_records([(KIND_EVENT, ev.canonical) for ev in accepted])
            except OSError as exc:
                raise self._fail(exc, "write") from exc
            try:
                if tier is AckTier.FDATASYNC and acknowledged and self._synced < (self._segment, self._size):
                    self._sync()
            except OSError as exc:
                raise self._fail(exc, "fdatasync") from exc
            for ev in accepted:
                self._bytes.setdefault(ev.trajectory_id, []).append(ev.canonical)
                self._ids[ev.event_id] = new_ids[ev.event_id][0]
                self._fences[ev.trajectory_id] = max(self._fences.get(ev.trajectory_id, 0), ev.owner_epoch)
            return out

    def install_fence(self, trajectory_id: str, owner_epoch: int) -> None:
        """Write a FENCE record and fdatasync it before returning (§11.5.1 fencing at the log).

        Raises:
            StaleOwnerError: ``owner_epoch`` is older than the trajectory's current fence.
            StoreFailedError, StoreClosedError: as for :meth:`append_batch`.
        """
        if type(owner_epoch) is not int or owner_epoch < 0 or not trajectory_id:
            raise StoreError(f"install_fence needs a trajectory id and an owner_epoch >= 0, got "
                             f"{trajectory_id!r}, {owner_epoch!r}")
        with self._lock:
            self._usable()
            cur = self._fences.get(trajectory_id, 0)
            if owner_epoch < cur:
                raise StaleOwnerError(f"cannot install owner_epoch={owner_epoch} on {trajectory_id}: "
                                      f"the log has seen owner_epoch={cur}")
            try:
                self._write_records([(KIND_FENCE, _EPOCH.pack(owner_epoch) + trajectory_id.encode("utf-8"))])
            except OSError as exc:
                raise self._fail(exc, "write") from exc
            try:
                self._sync()
            except OSError as exc:
                raise self._fail(exc, "fdatasync") from exc
            self._fences[trajectory_id] = owner_epoch

    # --- reads ---------------------------------------------------------------------------------
    def read(self, trajectory_id: str, start: int = 1, stop: int | None = None) -> Iterator[Event]:
        """Events of one trajectory with ``start <= sequence_number <= stop``, decoded lazily.

        Raises StoreClosedError after close; decoding raises the typed event errors.
        """
        with self._lock:
            if self._closed:
                raise StoreClosedError(f"segment log {self.directory} is closed")
            rows = self._bytes.get(trajectory_id, [])
            hi = len(rows) if stop is None else max(0, min(stop, len(rows)))
            chunk = rows[max(start, 1) - 1:hi]
        return (decode_stored(b) for b in chunk)

    def head(self, trajectory_id: str) -> int:
        with self._lock:
            return len(self._bytes.get(trajectory_id, ()))

    def fence(self, trajectory_id: str) -> int:
        with self._lock:
            return self._fences.get(trajectory_id, 0)

    def trajectories(self) -> list[str]:
        with self._lock:
            return sorted(t for t, rows in self._bytes.items() if rows)

    @property
    def synced_watermark(self) -> Position:
        """(segment number, byte offset) before which every byte is known durable."""
        return self._synced

    @property
    def end_position(self) -> Position:
        """(segment number, byte offset) where the next record will be written."""
        return (self._segment, self._size)

    def segment_paths(self) -> list[str]:
        """Paths of the segment files, in order."""
        return [self._path(n) for n in range(1, self._segment + 1)]

    # --- closing -------------------------------------------------------------------------------
    def _release_files(self) -> None:
        if self._handle is not None:
            try:
                self.fs.close(self._handle)
            finally:
                self._handle = None
        self._dir_lock.release()

    def close(self) -> None:
        """Close the current segment and release the directory lock. Idempotent."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._release_files()

    def __repr__(self) -> str:
        return (f"<SegmentStore {self.directory} segment={self._segment} size={self._size} "
                f"synced={self._synced} events={len(self._ids)}>")
