"""The segment-file log store: framed, CRC32C-checked records in numbered files (§11.3.1, §11.8.4).

Acknowledgment tiers (§11.3.1, table 2)
---------------------------------------

* ``WRITE``: acknowledged once ``pwrite`` returned. The bytes sit in the kernel page cache, so the
  acknowledgment survives a crash of the worker process, not a power loss.
* ``FDATASYNC``: acknowledged once ``pwrite`` and then ``fdatasync`` returned (and, for a freshly
  created segment file, once its directory entry was made durable), so it survives a host crash
  with the volume intact.

A batch is one ``pwrite`` of all its accepted records and at most one ``fdatasync``. The
``fdatasync`` runs after the store's lock is released (under a sync lock of its own, which a roll
and close also take), so a write-tier append from another thread is never queued behind a flush's
barrier; a barrier that started after a batch was written covers it, so a batch whose bytes an
other thread's barrier already covered waits for none of its own.

Files
-----

``<directory>/00000001.seg``, ``00000002.seg``, ... hold the records; numbering starts at 1 and
has no holes. ``<directory>/LOCK`` carries the advisory ``flock`` (and the holder's pid) that keeps a
second opener from appending. A new segment is started when the next write would push the
current one past ``segment_bytes`` (a single batch larger than that gets a segment of its own).

A *log position* is the pair ``(segment number, byte offset)``, ordered lexicographically.

Preallocation
-------------

An ``fdatasync`` that follows a write which made the file longer must also commit the file's new
size (on ext4 a journal commit), while one that follows an overwrite of blocks already written
only flushes data: on the reference VM about 90 µs against 155 µs, and on a loaded disk the gap
is wider (``bench append`` figure 3; each durable step pays one such barrier). So once the current
segment holds ``preallocate_from_bytes`` (default 64 KiB), the store writes zeros ahead of the
log's end, as far ahead as the segment already holds and at most ``preallocate_bytes`` (default
4 MiB), never past ``segment_bytes``, and fdatasyncs them at once; later records overwrite those
zeros. (``fallocate`` is no help: ext4 marks such blocks unwritten and converting them on the
first write to each is again a journal commit.) The store keeps the log's end (:attr:`end_position`)
apart from the file's length. Only the last segment may end in zeros: a roll cuts them off the old
segment before its barrier, and a clean :meth:`~SegmentStore.close` cuts them off the last one, so
a closed log is exactly as long as its records. A short log (under 64 KiB) is never preallocated.

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
  Open first copies every byte it will cut into new files beside the segments
  (``<segment-file>.trimmed-at-<byte offset>``, fdatasynced, directory fsynced; a name already
  taken gets ``.2``, ``.3`` ...), then removes the later segment files, fsyncs the directory,
  truncates the file at X, fdatasyncs it, and reports what it cut, and where the bytes went, in
  :attr:`SegmentStore.recovery` (``moved_aside``). Stored bytes are never deleted.

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

Zeros are not a record: a frame starts with the magic (0xF7) and never ends with a zero byte (an
EVENT body is a JSON object, a FENCE body ends with its trajectory id). So when the frame at X is
bad and every byte from X to the end of the **last** segment is zero, X is simply the log's end
and what follows is unwritten preallocated space: nothing is trimmed or moved aside, and the
zeros stay for the next appends (:attr:`RecoveryReport.zero_tail_bytes`). A frame whose CRC fails
while its last byte and everything after it are zero is a record cut short inside that space:
``"torn"``, not ``"corrupt"``. Any non-zero byte after X is handled by the rule above (a crash can
leave a later unsynced write on disk while an earlier one is still zeros). A cut piece's trailing
run of at least :data:`ZERO_RUN_NOT_COPIED_BYTES` zeros is counted in ``zero_tail_bytes`` instead
of being copied aside. Zeros in a segment that is not the last are damage, as before (no roll
leaves any), and zeros that replaced the last synced records cannot be told from unwritten space
(see below).

After the scan, open checks that the events form gapless per-trajectory sequences, with unique
event ids and owner_epochs that never fall below a fence; a violation is a CorruptLogError.
Payloads are validated against their registered schema when :meth:`SegmentStore.read` decodes
them, not at open.

Only the envelope fields the index needs (trajectory_id, event_id, sequence_number,
owner_epoch) are taken from a body at open. A CRC-valid body nested too deeply for the JSON
decoder is read with a non-recursive scanner that skips the nested values, so open never raises
RecursionError: a valid envelope is indexed (its :meth:`~SegmentStore.read` raises
MalformedEventError), anything else is "a body that does not parse" as above.

What open costs per record: the common record (a CRC-valid EVENT of this format whose envelope
msgspec reads, the next event of its trajectory) is checked and indexed in the scan loop itself,
with one unpack of its 28-byte header, the CRC32C over header and body, and a msgspec decode of
the four envelope fields that skips (but syntax-checks) the rest; every other frame is decided by
the general frame parser, so the outcome (reason, report, error) is the same either way. Open
computes no SHA-256: an event's digest is computed by its first :meth:`~SegmentStore.read`,
from the bytes open indexed (the ones the CRC vouched for), and kept for later reads and for the
digest a conflicting retry's error names. Damage is caught where it always was, by the CRC at
open: this store never compared a digest with a stored one, it only gave each event its digest.

Read-only opening
-----------------

``SegmentStore.open(directory, read_only=True)`` changes nothing on disk and needs no write
permission: it only lists the directory and reads the segment files (``O_RDONLY``), takes no
lock (a writer may hold it), and creates no LOCK or segment file; a directory without a segment
file is refused. The scan and the rule above are the same, but a torn tail is only *reported*
(:attr:`RecoveryReport.torn_tail_found`, ``torn_tail_at``, ``torn_tail_bytes``,
``torn_tail_reason``) and left on disk; reads return the valid prefix before it. Damage before the
tail is still CorruptLogError. If the files grew while they were read (a live writer), the scan
is repeated before damage is called corruption. Appends and fences raise StoreReadOnlyError.

Interrupted appends
-------------------

If a write, fdatasync or roll raises anything (an OSError, KeyboardInterrupt, a bug in a
:class:`FileSystem`), the store is marked failed: the bytes on disk may hold the batch or part of
it, so every later append or fence raises StoreFailedError until the log is reopened (and
recovered). An OSError is raised as StoreFailedError; anything else is re-raised as it is.

What the rule cannot see: damage inside the *last* synced records, with no later record to
vouch for them, cannot be proven durable (and when the damage turned them into zeros up to the end
of the last segment, it reads as the log's end with nothing reported). It is trimmed (never
returned as a different event), but its bytes are moved aside as above, and the report tells the two shapes apart
(``recovery.tail_damage``): an incomplete frame (short header, bad magic, a length running past
the end of the file) is ``"torn"``; a complete frame whose CRC fails is ``"corrupt"`` (bit rot,
or a crash that kept the record's length but not all of its sectors) and its note says
"corruption at <segment-file>:<offset>". A caller that must not lose an FDATASYNC
acknowledgment to bit rot still needs a second copy (the replicated tier of table 2); the
moved-aside file is what lets a person recover the event by hand. The crash checker
(:mod:`kernel_lib.verify.log_workload`) tests the rule on every crash state.
"""

from __future__ import annotations

import hashlib
import json
import json.decoder
import os
import re
import struct
import threading
from typing import Iterator, NamedTuple, Sequence

import crc32c as _crc32c
import msgspec
import msgspec.structs

from kernel_lib.errors import (
    ConfigError,
    CorruptLogError,
    LogNotFoundError,
    MalformedEventError,
    StoreClosedError,
    StoreError,
    StoreFailedError,
    StoreReadOnlyError,
)
from kernel_lib._support.gc_pause import cyclic_gc_paused
from kernel_lib.core.events import Event, decode_stored
from kernel_lib.log.base import (
    AckTier,
    AppendOutcome,
    LogStore,
    RecoveryReport,
    StoredRef,
    decide_append,
    check_events,
    check_claim_args,
    check_fence_args,
    check_fence_not_older,
    next_claimed_epoch,
    read_bounds,
)
from kernel_lib.log.fs import LOCK_FILE_NAME, DirLock, FileHandle, FileSystem, OsFileSystem
from kernel_lib.limits import SEGMENT_BYTES_MIN

MAGIC = b"\xf7DAL"
FORMAT_VERSION = 1
KIND_EVENT = 1
KIND_FENCE = 2
_HEAD = struct.Struct("<4sBBHIIQ")   # magic, kind, version, flags, body length, watermark seg/off
_CRC = struct.Struct("<I")
#: the whole 28-byte header read at once, magic, kind, format_version and flags as one u64 (first)
_FRAME_HEAD = struct.Struct("<QIIQI")
#: that u64 for an EVENT record of this format (flags 0)
_EVENT_TAG = int.from_bytes(MAGIC + bytes([KIND_EVENT, FORMAT_VERSION, 0, 0]), "little")
_EPOCH = struct.Struct("<Q")
HEADER_BYTES = _HEAD.size + _CRC.size   # 28
DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
#: Most zeros a segment log writes ahead of its end in one go (module docstring, "Preallocation").
DEFAULT_PREALLOCATE_BYTES = 4 * 1024 * 1024
#: A segment is preallocated only once it holds this many bytes, so a short log stays its own size.
DEFAULT_PREALLOCATE_FROM_BYTES = 64 * 1024
#: A trailing run of zeros at least this long in a piece that open cuts is counted
#: (:attr:`RecoveryReport.zero_tail_bytes`), not copied aside: it is unwritten preallocated space.
ZERO_RUN_NOT_COPIED_BYTES = 4096
_PAGE_BYTES = 4096
_SEGMENT_NAME = re.compile(r"^(\d{8})\.seg$")

Position = tuple[int, int]   # (segment number, byte offset)
#: events :meth:`SegmentStore.read` decodes at once: the first run, and the longest (each run
#: doubles the one before it), so a caller that takes one event pays for a few decodes at most
_FIRST_RUN = 16
_LONGEST_RUN = 1024


def segment_name(number: int) -> str:
    """File name of segment ``number`` (1-based): ``00000001.seg``."""
    return f"{number:08d}.seg"


def encode_frame(kind: int, body: bytes, synced_watermark: Position) -> bytes:
    """One framed record (header + body) as laid out in the module docstring."""
    head = _HEAD.pack(MAGIC, kind, FORMAT_VERSION, 0, len(body), synced_watermark[0], synced_watermark[1])
    return head + _CRC.pack(_crc32c.crc32c(body, _crc32c.crc32c(head))) + body


class _Frame(NamedTuple):
    """A frame that passed every check. ``fields`` is (trajectory_id, event_id, seq, owner_epoch)
    for EVENT and (trajectory_id, owner_epoch) for FENCE. A named tuple: open builds one per
    record, and a tuple is the cheapest immutable record Python builds."""

    segment: int
    offset: int
    end: int
    kind: int
    body: bytes
    synced_watermark: Position
    fields: tuple


class _ScanState:
    """What :meth:`SegmentStore._scan` carries from one segment to the next: the newest synced
    watermark a valid frame claims, and the first index violation found (a message) or None."""

    __slots__ = ("watermark", "violation")

    def __init__(self) -> None:
        self.watermark: Position = (1, 0)
        self.violation: "str | None" = None


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
        if data[end - 1] == 0 and data.count(0, end) == len(data) - end:
            # a complete record never ends in a zero byte (an event body ends with "}", a fence
            # body with its trajectory id), so this one was cut short inside preallocated zeros
            return "incomplete record (its last bytes are unwritten zeros)"
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


#: Reasons :func:`_parse_frame` gives for a frame that is complete in the file but fails a check.
_CORRUPT_REASONS = ("CRC mismatch", "synced watermark", "undecodable body")


def damage_kind(reason: str) -> str:
    """``"corrupt"`` for a complete frame that fails its check (CRC mismatch, a watermark beyond
    itself, an undecodable body), ``"torn"`` for an incomplete one (short header, bad magic, a
    length running past the end of the file, a record whose last bytes are the unwritten zeros of
    preallocated space, a missing segment file)."""
    return "corrupt" if reason.startswith(_CORRUPT_REASONS) else "torn"


def _event_fields(body: bytes) -> tuple[str, str, int, int]:
    """The envelope fields the index needs. Raises ValueError if the body is not an envelope.

    Parses the body with :func:`json.loads`; if it nests too deeply for that, falls back to
    :func:`_top_level_fields`, which reads the top-level scalars without descending. First tries
    :func:`_envelope_fields_fast`, which decides the same for the bodies it accepts.
    """
    fast = _envelope_fields_fast(body)
    if fast is not None:
        return fast
    try:
        d = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not UTF-8 JSON: {exc}") from None
    except RecursionError:
        d = _top_level_fields(body)
    if not isinstance(d, dict):
        raise ValueError("not a JSON object")
    tid, eid, seq, epoch = (d.get(k) for k in ("trajectory_id", "event_id", "sequence_number", "owner_epoch"))
    if not (isinstance(tid, str) and tid and isinstance(eid, str) and eid
            and type(seq) is int and seq >= 1 and type(epoch) is int and epoch >= 0):
        raise ValueError("envelope fields trajectory_id/event_id/sequence_number/owner_epoch missing or invalid")
    return tid, eid, seq, epoch


class _IndexedFields(msgspec.Struct, gc=False):
    """The envelope fields open indexes; msgspec skips the rest of the body (checking its syntax).
    Untracked by the cyclic collector: it holds only strings and ints."""
    trajectory_id: str
    event_id: str
    sequence_number: int
    owner_epoch: int


_INDEXED_FIELDS = msgspec.json.Decoder(_IndexedFields)
_FIELDS_TUPLE = msgspec.structs.astuple


def _envelope_fields_fast(body: bytes) -> "tuple[str, str, int, int] | None":
    """What :func:`_event_fields` returns for ``body``, or None where its json.loads route must
    decide (an error, a body msgspec refuses, fields out of range).

    msgspec checks the syntax of the members it skips but not the UTF-8 of their strings, so the
    body is checked as UTF-8 first: valid UTF-8 starting with ``{`` is read by json.loads as UTF-8,
    and strict JSON that msgspec accepts json.loads accepts with the same members (both take the
    last of repeated keys). tests/test_read_path.py checks the two agree, torn and corrupt bodies
    included. An ASCII body (the common case: RFC 8785 bytes of ASCII text) is UTF-8 without
    decoding it."""
    if not body.startswith(b"{"):
        return None
    try:
        if not body.isascii():
            body.decode("utf-8")
        f = _INDEXED_FIELDS.decode(body)
    except (UnicodeDecodeError, msgspec.DecodeError, RecursionError):
        return None
    if f.sequence_number >= 1 and f.owner_epoch >= 0 and f.trajectory_id and f.event_id:
        return _FIELDS_TUPLE(f)
    return None


_WS = re.compile(r"[ \t\n\r]*")
_NESTED_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
_SCALAR = json.JSONDecoder()
_NESTED = object()   # stands for a skipped nested value


def _skip_nested(s: str, i: int) -> int:
    """End of the array/object starting at ``s[i]``, found without recursion (strings skipped)."""
    depth = 0
    for m in _NESTED_TOKEN.finditer(s, i):
        tok = m.group()
        if tok in "[{":
            depth += 1
        elif tok in "]}":
            depth -= 1
            if depth == 0:
                return m.end()
    raise ValueError("unterminated array or object")


def _top_level_fields(body: bytes) -> dict:
    """The top-level members of a JSON object body; nested values are skipped (not parsed).

    Raises ValueError if the body is not a JSON object at the top level.
    """
    try:
        s = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8: {exc}") from None
    out: dict = {}
    try:
        i = _WS.match(s, 0).end()
        if s[i] != "{":
            raise ValueError("not a JSON object")
        i = _WS.match(s, i + 1).end()
        if s[i] == "}":
            i += 1
        else:
            while True:
                if s[i] != '"':
                    raise ValueError(f"expected a key at {i}")
                key, i = json.decoder.scanstring(s, i + 1)
                i = _WS.match(s, i).end()
                if s[i] != ":":
                    raise ValueError(f"expected ':' at {i}")
                i = _WS.match(s, i + 1).end()
                if s[i] in "[{":
                    value, i = _NESTED, _skip_nested(s, i)
                else:
                    value, i = _SCALAR.raw_decode(s, i)
                out[key] = value
                i = _WS.match(s, i).end()
                if s[i] == ",":
                    i = _WS.match(s, i + 1).end()
                    continue
                if s[i] != "}":
                    raise ValueError(f"expected ',' or '}}' at {i}")
                i += 1
                break
    except IndexError:
        raise ValueError("truncated JSON object") from None
    except RecursionError:   # pragma: no cover - scalars do not nest
        raise ValueError("JSON nests too deeply") from None
    if _WS.match(s, i).end() != len(s):
        raise ValueError("data after the JSON object")
    return out


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
    :meth:`read`), the fence (newest owner_epoch seen), and ``event_id -> (trajectory_id,
    sequence_number)``; all are rebuilt by the scan in :meth:`open`. Each event's SHA-256 is
    computed on its first read and cached (module docstring). Appends are serialized by a lock.

    Attributes:
        recovery: what open found and repaired (:class:`RecoveryReport`).
        read_only: opened with ``read_only=True`` (module docstring, "Read-only opening").
        directory: the log directory. fs: the :class:`FileSystem` every operation goes through.
    """

    name = "segment"
    offered_tiers = (AckTier.WRITE, AckTier.FDATASYNC)
    #: one fdatasync of the segment covers every earlier write to it, and a roll syncs the old segment
    #: before the next is created: a WRITE acknowledgment is made durable by the next FDATASYNC one
    barrier_covers_earlier_writes = True

    def __init__(self, directory: str, fs: FileSystem, segment_bytes: int, dir_lock: DirLock,
                 read_only: bool = False, preallocate_bytes: int = DEFAULT_PREALLOCATE_BYTES,
                 preallocate_from_bytes: int = DEFAULT_PREALLOCATE_FROM_BYTES):
        """Private: use :meth:`open`."""
        self.directory = str(directory)
        self.fs = fs
        self.segment_bytes = segment_bytes
        self.preallocate_bytes = preallocate_bytes
        self.preallocate_from_bytes = preallocate_from_bytes
        self.read_only = read_only
        self._dir_lock = dir_lock
        self._lock = threading.RLock()
        #: held around every fdatasync of the current segment, and by a roll or close (which close the
        #: handle): taken after ``_lock`` when both are held, never the other way round
        self._sync_lock = threading.RLock()
        self._bytes: dict[str, list[bytes]] = {}
        #: SHA-256 (hex) of ``_bytes[t][i]`` for the rows open indexed, None until the first read
        #: of that row computed it from those bytes (rows appended later are hashed when read);
        #: a later read hands it to decode_stored. Never resized after open, so an entry always
        #: belongs to the same bytes (a failed append only takes back rows appended after open)
        self._digests: dict[str, list["str | None"]] = {}
        #: event_id -> (trajectory_id, sequence_number); the digest is the row's (_stored_digest)
        self._ids: dict[str, tuple[str, int]] = {}
        self._fences: dict[str, int] = {}
        self._segment = 1
        self._handle: FileHandle | None = None
        self._size = 0                      # bytes in the current segment (the log's end in it)
        self._allocated = 0                 # bytes of the current segment file: _size + zeros ahead of it
        self._zero_tail: "tuple[int, int] | None" = None   # (segment, offset) of a zero tail open found
        self._synced: Position = (1, 0)     # synced watermark: everything before it is durable
        self._failed: str | None = None
        self._closed = False
        self.recovery = RecoveryReport(store=self.name, path=self.directory, read_only=read_only)

    # --- opening and recovery ------------------------------------------------------------------
    @classmethod
    def open(cls, directory: "str | os.PathLike[str]", fs: FileSystem | None = None,
             segment_bytes: int = DEFAULT_SEGMENT_BYTES, read_only: bool = False,
             create: bool = False, preallocate_bytes: int = DEFAULT_PREALLOCATE_BYTES,
             preallocate_from_bytes: int = DEFAULT_PREALLOCATE_FROM_BYTES) -> "SegmentStore":
        """Open the segment log in ``directory`` and recover it.

        Args:
            directory: the log directory. If it does not exist, read-write with ``create=True``
                creates it (and fsyncs its parent); otherwise LogNotFoundError (a missing log is
                not an empty one). An existing directory without segment files is a new log
                (read-write) and refused read-only.
            fs: the file-system seam (default :class:`OsFileSystem`).
            segment_bytes: size at which a new segment file is started (an int ≥ 256 bytes).
            read_only: change nothing on disk (module docstring, "Read-only opening").
            create: read-write only: create the directory if it is missing (default False);
                ignored with ``read_only`` (a read-only open never creates anything).
            preallocate_bytes: most zeros written ahead of the log's end at once, in bytes (an
                int ≥ 0; 0 turns preallocation off). Module docstring, "Preallocation".
            preallocate_from_bytes: a segment is preallocated only once it holds this many
                bytes (an int ≥ 0).

        Returns:
            The store, with :attr:`recovery` describing any torn tail trimmed (read-write) or
            found and left in place (read-only).

        Raises:
            ConfigError: ``segment_bytes`` not an int ≥ 256, ``create`` not a bool, or a
                preallocation size not an int ≥ 0.
            LogNotFoundError: ``directory`` does not exist, or (read-write) holds neither a segment
                file nor a LOCK, and ``create`` is false.
            StoreError: another opener holds the directory lock (read-write only), a record was
                written by a newer format, or (read-only) the directory is missing or holds no
                segment file ("not a segment log").
            CorruptLogError: damage before the tail (named file and offset), or events that do
                not form gapless per-trajectory sequences. Nothing on disk is changed.
            StoreError: the file system failed while opening (the OSError is chained).
        """
        if isinstance(segment_bytes, bool) or not isinstance(segment_bytes, int) or segment_bytes < SEGMENT_BYTES_MIN:
            raise ConfigError(f"segment_bytes must be an int >= {SEGMENT_BYTES_MIN}, got {segment_bytes!r}")
        if create is not True and create is not False:
            raise ConfigError(f"create must be True or False, got {create!r}")
        for name, value in (("preallocate_bytes", preallocate_bytes),
                            ("preallocate_from_bytes", preallocate_from_bytes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{name} must be an int >= 0 (bytes), got {value!r}")
        fs = fs if fs is not None else OsFileSystem()
        directory = os.fspath(directory)
        try:
            if not fs.exists(directory) and (read_only or not create):
                raise LogNotFoundError(f"no segment log at {directory}: the directory does not exist"
                                       + ("" if read_only else " (a missing log is not an empty one; pass "
                                          "create=True to start a new log there)"))
            if read_only:
                try:
                    names = fs.listdir(directory)
                except NotADirectoryError:
                    raise StoreError(f"{directory} is not a segment log: it is not a directory") from None
                if not any(_SEGMENT_NAME.match(n) for n in names):
                    raise StoreError(f"{directory} is not a segment log: it holds no {segment_name(1)}-style "
                                     "segment file")
                lock = DirLock()   # no lock: a writer may hold it; we only read
            else:
                if not fs.exists(directory):
                    fs.makedirs(directory)
                    fs.fsync_dir(os.path.dirname(os.path.normpath(directory)) or ".")
                elif not create:   # an existing folder that no segment log ever used is not a log either
                    try:
                        names = fs.listdir(directory)
                    except NotADirectoryError:
                        raise StoreError(f"{directory} is not a segment log: it is not a directory") from None
                    if not any(_SEGMENT_NAME.match(n) or n == LOCK_FILE_NAME for n in names):
                        raise LogNotFoundError(f"no segment log in {directory}: the directory holds no segment "
                                               f"file ({segment_name(1)}-style) and no {LOCK_FILE_NAME} (pass "
                                               "create=True to start a new log there)")
                lock = fs.lock_dir(directory)
        except OSError as exc:
            raise StoreError(f"cannot open segment log {directory}: {exc}") from exc
        store = cls(directory, fs, segment_bytes, lock, read_only=read_only, preallocate_bytes=preallocate_bytes,
                    preallocate_from_bytes=preallocate_from_bytes)
        try:
            with cyclic_gc_paused():   # a frame and an index entry per record, none of them garbage
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

    def _scan(self) -> "tuple[list[int], dict[int, bytes], tuple[int, int, str] | None, Position, str | None]":
        """Read the segments in order up to the first bad frame, indexing each valid frame as it
        is read (:meth:`_scan_segment`).

        Returns (segment numbers, their contents read so far, the damage (segment, offset, reason)
        or None, the newest synced watermark a valid frame claims ((1, 0) if none), the first
        index violation (a CorruptLogError message, raised by the caller after the damage was
        classified) or None).
        """
        fs = self.fs
        numbers = sorted(int(m.group(1)) for n in fs.listdir(self.directory)
                         if (m := _SEGMENT_NAME.match(n)))
        datas: dict[int, bytes] = {}
        damage: tuple[int, int, str] | None = None
        self._zero_tail = None
        scan = _ScanState()
        for expected, number in enumerate(numbers, start=1):
            if number != expected:
                damage = (expected, 0, f"segment file {segment_name(expected)} is missing")
                break
            data = datas[number] = fs.read_all(self._path(number))
            damage = self._scan_segment(number, data, number == numbers[-1], scan)
            if damage:
                break
        return numbers, datas, damage, scan.watermark, scan.violation

    def _scan_segment(self, number: int, data: bytes, last: bool, scan: "_ScanState") -> "tuple[int, int, str] | None":
        """Check and index the frames of segment ``number`` (its bytes ``data``) up to the first
        bad one; return that damage (segment, offset, reason), or None.

        The common frame, a CRC-valid EVENT record of this format whose envelope
        :func:`_envelope_fields_fast` reads and which extends its trajectory, is checked and
        indexed inline: one header unpack, the CRC32C over header and body, the four envelope
        fields. Anything else (a fence, a frame failing any check, a body only json.loads can
        read, an index violation) goes to :func:`_parse_frame` and :meth:`_index_frame`, which
        decide every such case as the scan always did. No digest is computed here: a read hashes
        an event's bytes the first time it decodes it (:meth:`_decode_ahead`)."""
        n = len(data)
        off = 0
        unpack = _FRAME_HEAD.unpack_from
        crc32c = _crc32c.crc32c
        fields_fast = _envelope_fields_fast   # looked up per segment: tests turn the fast route off
        rows_of, ids, fences = self._bytes, self._ids, self._fences
        wm_seg, wm_off = scan.watermark
        head_crc_end = _HEAD.size
        event_tag = _EVENT_TAG
        try:
            while off < n:
                if n - off >= HEADER_BYTES and scan.violation is None:
                    tag, length, w_seg, w_off, crc = unpack(data, off)
                    end = off + HEADER_BYTES + length
                    if (tag == event_tag and end <= n
                            and (w_seg < number or (w_seg == number and w_off <= off))):
                        body = data[off + HEADER_BYTES:end]
                        if crc32c(body, crc32c(data[off:off + head_crc_end])) == crc:
                            fields = fields_fast(body)
                            if fields is not None:
                                tid, eid, seq, epoch = fields
                                rows = rows_of.get(tid)
                                if rows is None:
                                    rows = rows_of[tid] = []
                                if seq == len(rows) + 1 and epoch >= fences.get(tid, 0) and eid not in ids:
                                    rows.append(body)
                                    ids[eid] = (tid, seq)
                                    fences[tid] = epoch
                                    if w_seg > wm_seg or (w_seg == wm_seg and w_off > wm_off):
                                        wm_seg, wm_off = w_seg, w_off
                                    off = end
                                    continue
                # the reference route decides everything the inline one did not accept
                try:
                    fr = _parse_frame(data, off, number)
                except _Unsupported as exc:
                    raise StoreError(f"{self._path(number)} offset {off}: {exc} is not supported by this "
                                     "build (written by a newer version?); refusing to open") from None
                if isinstance(fr, str):
                    if last and data.count(0, off) == n - off:
                        # only zeros from here to the end of the last segment: its preallocated,
                        # never written space (a record never starts with a zero byte)
                        self._zero_tail = (number, off)
                        return None
                    return (number, off, fr)
                if fr.synced_watermark > (wm_seg, wm_off):
                    wm_seg, wm_off = fr.synced_watermark
                if scan.violation is None:
                    scan.violation = self._index_frame(fr)
                off = fr.end
            return None
        finally:
            scan.watermark = (wm_seg, wm_off)

    def _grew(self, numbers: list[int], datas: dict[int, bytes]) -> bool:
        """True if segments appeared or grew since they were read (a live writer)."""
        now = sorted(int(m.group(1)) for n in self.fs.listdir(self.directory) if (m := _SEGMENT_NAME.match(n)))
        if now != numbers:
            return True
        return any(self.fs.size(self._path(n)) != len(d) for n, d in datas.items())

    def _scan_and_index(self) -> "tuple[list[int], dict[int, bytes], tuple[int, int, str] | None, Position]":
        """:meth:`_scan` (which builds the index), damage classified (CorruptLogError), then an
        index violation raised; read-only, a scan that looked corrupt is repeated (up to 3 times)
        if the files grew meanwhile. Returns (segment numbers, their contents, the damage, the
        newest synced watermark a valid frame claims) of the scan that was indexed."""
        attempts = 3 if self.read_only else 1
        for attempt in range(attempts):
            numbers, datas, damage, watermark, violation = self._scan()
            try:
                if damage is not None:
                    self._classify_damage(damage, numbers, datas)
                if violation is not None:
                    raise CorruptLogError(violation)
            except CorruptLogError:
                # read-only beside a live writer: what looked like damage may be a write in flight
                if attempt + 1 < attempts and self._grew(numbers, datas):
                    self._bytes.clear()
                    self._ids.clear()
                    self._fences.clear()
                    continue
                raise
            break
        # no digest yet: each is computed from the event's bytes on its first read, and kept here
        self._digests = {t: [None] * len(rows) for t, rows in self._bytes.items()}
        return numbers, datas, damage, watermark

    def _recover(self) -> None:
        fs = self.fs
        numbers, datas, damage, watermark = self._scan_and_index()
        rep = self.recovery
        rep.trajectories = sum(1 for rows in self._bytes.values() if rows)
        rep.events_recovered = len(self._ids)
        tail_bytes = 0
        if damage is not None:
            dseg, doff, reason = damage
            later = [n for n in numbers if n > dseg]
            tail_bytes = sum(len(datas[n]) if n in datas else fs.size(self._path(n)) for n in later)
            if dseg in datas:
                tail_bytes += len(datas[dseg]) - doff
            rep.torn_tail_found = True
            rep.torn_tail_at = f"{segment_name(dseg)}:{doff}"
            rep.torn_tail_bytes = tail_bytes
            rep.torn_tail_reason = reason
            rep.tail_damage = damage_kind(reason)
        if self.read_only:
            self._adopt_read_only(numbers, datas, damage, watermark)
            return

        # --- everything checked: now (and only now) repair the files ---------------------------
        if damage is not None:
            dseg, doff, reason = damage
            later = [n for n in numbers if n > dseg]
            # first copy every byte that is about to be cut into files beside the segments, and
            # make them durable: the cut never destroys stored bytes (bit rot in the last record
            # looks like a torn write, and only the copy lets a person recover that event)
            pieces = [(n, 0, datas[n] if n in datas else fs.read_all(self._path(n))) for n in later]
            if dseg in datas:
                pieces.insert(0, (dseg, doff, datas[dseg][doff:]))
            for n, off, piece in pieces:
                kept = len(piece.rstrip(b"\0"))
                if len(piece) - kept >= ZERO_RUN_NOT_COPIED_BYTES:   # unwritten preallocated space
                    rep.zero_tail_bytes += len(piece) - kept
                    rep.details.append(f"{segment_name(n)}: the last {len(piece) - kept} bytes of the cut piece at "
                                       f"offset {off} are zeros (unwritten preallocated space), counted, not copied")
                    piece = piece[:kept]
                if piece:
                    rep.moved_aside.append(self._move_aside(n, off, piece))
            if rep.moved_aside:
                fs.fsync_dir(self.directory)
            for n in reversed(later):
                fs.remove(self._path(n))
                rep.details.append(f"removed {segment_name(n)} (after the damaged tail; its bytes were moved aside)")
            if later:
                fs.fsync_dir(self.directory)
            if dseg in datas:
                self._segment = dseg
                h = self._handle = fs.open_file(self._path(dseg))
                fs.truncate(h, doff)
                self._size = doff
                self._allocated = doff
            elif dseg > 1:  # the missing segment itself: continue in the one before it
                self._segment = dseg - 1
                self._handle = fs.open_file(self._path(self._segment))
                self._size = self._allocated = len(datas[self._segment])
            else:  # segment 1 missing and nothing valid after it: start afresh
                self._segment = 1
                self._handle = fs.open_file(self._path(1), create=True)
                self._size = self._allocated = 0
            where = rep.torn_tail_at
            rep.torn_tail_trimmed = True
            rep.bytes_trimmed = tail_bytes
            rep.trimmed_at = where
            kept = (f"moved aside to {', '.join(os.path.basename(p) for p in rep.moved_aside)}"
                    if rep.moved_aside else "nothing to move aside")
            if rep.tail_damage == "corrupt":
                rep.details.insert(0, f"corruption at {where}: a complete record fails its check ({reason}), "
                                      f"bit rot or a write torn inside the record; no later record claims it was "
                                      f"synced, so it and the {tail_bytes} bytes from it to the end were cut from "
                                      f"the log and {kept} (an acknowledged event may be among them)")
            else:
                rep.details.insert(0, f"trimmed a torn tail at {where} ({reason}): {tail_bytes} bytes; "
                                      f"no later record claims it was synced; {kept}")
        elif numbers:
            self._segment = numbers[-1]
            self._handle = fs.open_file(self._path(self._segment))
            self._allocated = len(datas[self._segment])
            self._size = self._zero_tail[1] if self._zero_tail else self._allocated
            self._note_zero_tail()
        else:
            self._segment = 1
            self._handle = fs.open_file(self._path(1), create=True)
            self._size = self._allocated = 0
        # make what open returns durable, so the watermark starts at the end of the log
        fs.fdatasync(self._handle)
        fs.fsync_dir(self.directory)
        self._synced = (self._segment, self._size)

    def _note_zero_tail(self) -> None:
        """Report the zero tail the scan found after the last record (kept: it is preallocated space)."""
        if self._zero_tail is not None and self._allocated > self._size:
            n = self._allocated - self._size
            self.recovery.zero_tail_bytes += n
            self.recovery.details.append(
                f"{segment_name(self._segment)}: the log ends at offset {self._size}; the {n} bytes after it are "
                "zeros, preallocated space never written (kept for the next appends; not a torn tail)")

    def _move_aside(self, number: int, offset: int, piece: bytes) -> str:
        """Write ``piece`` (bytes ``offset..`` of segment ``number``) durably to a new file beside
        it, ``<segment-file>.trimmed-at-<offset>`` (``.2``, ``.3`` ... if taken). Returns its path."""
        fs = self.fs
        base = f"{self._path(number)}.trimmed-at-{offset}"
        path, k = base, 1
        while fs.exists(path):
            k += 1
            path = f"{base}.{k}"
        h = fs.open_file(path, create=True)
        try:
            fs.pwrite(h, 0, piece)
            fs.fdatasync(h)
        finally:
            fs.close(h)
        return path

    def _adopt_read_only(self, numbers: list[int], datas: dict[int, bytes],
                         damage: "tuple[int, int, str] | None", watermark: Position) -> None:
        """Read-only: take the valid prefix as the log and report (not trim) what follows it;
        ``watermark`` is the newest synced watermark a valid record claims."""
        if not numbers:   # the segment files went away after open listed them
            raise StoreError(f"{self.directory} is not a segment log (any more): it holds no segment file")
        if damage is not None:
            dseg, doff, reason = damage
            if dseg in datas:
                self._segment, self._size = dseg, doff
            elif dseg > 1:
                self._segment, self._size = dseg - 1, len(datas[dseg - 1])
            else:
                self._segment, self._size = 1, 0
            rep = self.recovery
            what = "corruption (a complete record fails its check)" if rep.tail_damage == "corrupt" else "torn tail"
            rep.details.insert(0, f"{what} at {rep.torn_tail_at} ({reason}): {rep.torn_tail_bytes} bytes after "
                                  "the last valid record were not read and were left on disk (read-only open; a "
                                  "read-write open moves them aside and trims them, or a live writer may still be "
                                  "writing them)")
        else:
            self._segment = numbers[-1]
            self._allocated = len(datas[self._segment])
            self._size = self._zero_tail[1] if self._zero_tail else self._allocated
            self._note_zero_tail()
        # the newest watermark any valid record claims: everything before it is known durable
        self._synced = watermark

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

    def _index_frame(self, fr: _Frame) -> "str | None":
        """Add one valid frame to the index (the route :meth:`_scan_segment` takes for a frame it
        did not index inline). Returns None, or the message of the CorruptLogError it breaks (an
        event id stored twice, a sequence gap, an owner_epoch below the fence); the frame is then
        not indexed."""
        if fr.kind == KIND_FENCE:
            tid, epoch = fr.fields
            self._fences[tid] = max(self._fences.get(tid, 0), epoch)
            return None
        where = f"{self._path(fr.segment)} offset {fr.offset}"
        tid, eid, seq, epoch = fr.fields
        rows = self._bytes.setdefault(tid, [])
        if eid in self._ids:
            return f"{where}: event id {eid} is stored twice"
        if seq != len(rows) + 1:
            return (f"{where}: event {eid} has {tid}#{seq} but the trajectory's head is "
                    f"{len(rows)} (sequence gap inside the log)")
        fence = self._fences.get(tid, 0)
        if epoch < fence:
            return f"{where}: event {eid} has owner_epoch={epoch} after the log had fenced {tid} at {fence}"
        rows.append(fr.body)
        self._ids[eid] = (tid, seq)
        self._fences[tid] = max(fence, epoch)
        return None

    def _stored_digest(self, trajectory_id: str, seq: int) -> str:
        """SHA-256 (hex) of the stored bytes of ``trajectory_id#seq`` (which must exist): the one
        a read cached, else computed now (and cached for a row indexed at open). Under ``_lock``."""
        cache = self._digests.get(trajectory_id)
        k = seq - 1
        digest = cache[k] if cache is not None and k < len(cache) else None
        if digest is None:
            digest = hashlib.sha256(self._bytes[trajectory_id][k]).hexdigest()
            if cache is not None and k < len(cache):
                cache[k] = digest
        return digest

    # --- appends -------------------------------------------------------------------------------
    def _open_for_reads(self) -> None:
        if self._closed:
            raise StoreClosedError(f"segment log {self.directory} is closed")

    def _usable(self) -> None:
        self._open_for_reads()
        if self.read_only:
            raise StoreReadOnlyError(f"segment log {self.directory} was opened read-only; it takes no appends "
                                     "or fences")
        if self._failed:
            raise StoreFailedError(f"segment log {self.directory} failed earlier ({self._failed}); its tail "
                                   "is unknown, reopen it to recover")

    def _fail(self, exc: BaseException, what: str) -> StoreFailedError:
        """Mark the store failed by ``exc`` during ``what``; return the StoreFailedError to raise."""
        cause = str(exc) if isinstance(exc, OSError) else f"interrupted by {exc!r}"
        self._failed = f"{what}: {cause}"
        return StoreFailedError(f"segment log {self.directory}: {what} failed ({cause}); nothing in this call is "
                                "acknowledged and the store refuses appends until reopened")

    def _failing(self, exc: BaseException, what: str) -> None:
        """Mark the store failed and raise: StoreFailedError for an OSError, else ``exc`` itself."""
        err = self._fail(exc, what)
        if isinstance(exc, OSError):
            raise err from exc
        raise exc

    def _roll(self) -> None:
        """Start the next segment: sync the old one, create the new one, make its entry durable."""
        fs = self.fs
        with self._sync_lock:   # no barrier of another thread is left running on the handle closed here
            cut = self._allocated > self._size
            if cut:   # only the last segment may end in zeros: cut them before the barrier below
                fs.truncate(self._handle, self._size)
                self._allocated = self._size
            if cut or self._synced < (self._segment, self._size):
                self._sync()
            fs.close(self._handle)
            self._segment += 1
            self._handle = fs.open_file(self._path(self._segment), create=True)
            self._size = self._allocated = 0
            fs.fdatasync(self._handle)
            fs.fsync_dir(self.directory)
            self._synced = (self._segment, 0)

    def _sync(self) -> None:
        """The host-crash barrier: fdatasync the current segment and advance the watermark
        (called under ``_lock``)."""
        with self._sync_lock:
            self.fs.fdatasync(self._handle)
            self._synced = (self._segment, self._size)

    def _sync_through(self, target: Position) -> None:
        """Called *without* ``_lock``, after a batch was written ending at ``target``: return once a
        completed fdatasync covers ``target``. Another thread's barrier that started after the
        write covers it too (then this one issues none). A roll cannot run meanwhile (it takes the
        sync lock), so the current segment is stable here; the size read is that of completed
        writes (it is advanced after each ``pwrite`` returned). Raises StoreFailedError if the
        store failed meanwhile (a barrier after a failed one proves nothing) or the sync fails."""
        with self._sync_lock:
            if self._synced >= target:
                return
            if self._failed or self._closed:
                self._usable()   # raises StoreFailedError / StoreClosedError
            covered = (self._segment, self._size)
            try:
                self.fs.fdatasync(self._handle)
            except BaseException as exc:  # noqa: BLE001 - re-raised by _failing
                self._failing(exc, "fdatasync")
            if covered > self._synced:
                self._synced = covered

    def _write_records(self, records: list[tuple[int, bytes]]) -> None:
        """Frame ``records`` ((kind, body) pairs) and write them with one pwrite, rolling first
        if they would push the current segment past ``segment_bytes``."""
        total = sum(HEADER_BYTES + len(body) for _, body in records)
        if self._size > 0 and self._size + total > self.segment_bytes:
            self._roll()
        end = self._size + total
        if end > self._allocated and self.preallocate_bytes and end >= self.preallocate_from_bytes:
            self._preallocate(end)
        buf = b"".join(encode_frame(kind, body, self._synced) for kind, body in records)
        self.fs.pwrite(self._handle, self._size, buf)
        self._size = end
        if end > self._allocated:
            self._allocated = end

    def _preallocate(self, end: int) -> None:
        """Write zeros from the current segment file's end to past ``end`` (the end of the batch
        about to be written) and fdatasync them (module docstring, "Preallocation"): ahead by as
        much as the segment already holds, at most :attr:`preallocate_bytes`, never past
        ``segment_bytes`` unless the batch itself is longer, in whole pages. Called under ``_lock``."""
        ahead = min(self.preallocate_bytes, max(end, _PAGE_BYTES))
        target = max(end, min(self.segment_bytes, -(-(end + ahead) // _PAGE_BYTES) * _PAGE_BYTES))
        if target <= self._allocated:
            return
        with self._sync_lock:
            self.fs.pwrite(self._handle, self._allocated, bytes(target - self._allocated))
            self._allocated = target
            self.fs.fdatasync(self._handle)   # blocks and size on disk: later barriers flush data only
            self._synced = max(self._synced, (self._segment, self._size))

    def append_batch(self, events: Sequence[Event], tier: "AckTier | str") -> list["AppendOutcome | StoreError"]:
        """Append ``events`` with one write and, at ``FDATASYNC``, one fdatasync (§11.8.4).

        Returns one :class:`AppendOutcome` or error per event, in order (see
        :meth:`LogStore.append_batch`). An identical retry acknowledged at ``FDATASYNC`` first makes
        the stored copy durable if it was only written.

        Raises:
            TierNotOfferedError: ``tier`` is not WRITE or FDATASYNC (or their labels).
            StoreError: a batch member is not an Event (nothing is written).
            StoreFailedError: the write or fdatasync failed now or earlier (reopen to recover).
            StoreReadOnlyError, StoreClosedError: opened read-only, or closed.
            Anything else raised by the write, the roll or the fdatasync (KeyboardInterrupt, ...)
            is re-raised after the store was marked failed.
        """
        tier = self.check_tier(tier)
        events = check_events(events)
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
                    at = self._ids.get(ev.event_id)
                    ref_raw = ((StoredRef(at[0], at[1], self._stored_digest(*at)), self._bytes[at[0]][at[1] - 1])
                               if at else None)
                ref, raw = ref_raw if ref_raw else (None, None)
                decided = decide_append(ev, ref, raw, heads[t], fences[t], tier)
                if decided is not None:
                    out.append(decided)
                    continue
                new_ids[ev.event_id] = (StoredRef(t, ev.sequence_number, ev.digest), ev.canonical)
                heads[t] = ev.sequence_number
                fences[t] = max(fences[t], ev.owner_epoch)
                accepted.append(ev)
                out.append(AppendOutcome(ev.event_id, t, ev.sequence_number, tier))
            acknowledged = any(isinstance(o, AppendOutcome) for o in out)
            stage = "write"
            try:
                if accepted:
                    self._write_records([(KIND_EVENT, ev.canonical) for ev in accepted])
                stage = "index update"
                before = {t: self._fences.get(t) for t in fences}
                for ev in accepted:
                    self._bytes.setdefault(ev.trajectory_id, []).append(ev.canonical)
                    self._ids[ev.event_id] = (ev.trajectory_id, ev.sequence_number)
                    self._fences[ev.trajectory_id] = max(self._fences.get(ev.trajectory_id, 0), ev.owner_epoch)
            except BaseException as exc:  # noqa: BLE001 - re-raised; the tail is unknown, no retry may write it again
                self._failing(exc, stage)
            # an identical retry too: its stored copy may so far be written only
            target = (self._segment, self._size)
            if not (tier is AckTier.FDATASYNC and acknowledged and self._synced < target):
                return out
        try:
            self._sync_through(target)   # outside the lock: other threads' writes go on meanwhile
        except BaseException:
            with self._lock:
                self._unindex(accepted, before)
            raise
        return out

    def _unindex(self, accepted: list[Event], fences_before: dict[str, "int | None"]) -> None:
        """After a failed barrier: take this batch's events back out of the index (under
        ``_lock``), so reads return only what was acknowledged. An event is taken out only while
        it is still its trajectory's last row (another writer's later row of the same trajectory
        stays; the store is failed either way and a reopen recovers from the files)."""
        for ev in reversed(accepted):
            rows = self._bytes.get(ev.trajectory_id)
            if rows and len(rows) == ev.sequence_number and rows[-1] is ev.canonical:
                rows.pop()
                self._ids.pop(ev.event_id, None)
        for t, f in fences_before.items():
            if f is None:
                self._fences.pop(t, None)
            else:
                self._fences[t] = f

    def install_fence(self, trajectory_id: str, owner_epoch: int) -> None:
        """Write a FENCE record and fdatasync it before returning (§11.5.1 fencing at the log).

        Raises:
            StoreError: bad arguments (:func:`~kernel_lib.log.base.check_fence_args`).
            StaleOwnerError: ``owner_epoch`` is older than the trajectory's current fence.
            StoreFailedError, StoreReadOnlyError, StoreClosedError: as for :meth:`append_batch`
            (an interrupt during the write or fdatasync likewise fails the store).
        """
        check_fence_args(trajectory_id, owner_epoch)

        def decide(cur: int) -> int:
            check_fence_not_older(trajectory_id, owner_epoch, cur)
            return owner_epoch
        self._set_fence(trajectory_id, decide)

    def claim_epoch(self, trajectory_id: str, owner_epoch: "int | None" = None) -> int:
        """See :meth:`LogStore.claim_epoch`: the fence is read, and the FENCE record written and
        fdatasynced, under the store's lock (one process holds the directory's write lock, so
        that lock serializes every claimant of this log).

        Raises:
            StoreError: bad arguments (:func:`~kernel_lib.log.base.check_claim_args`).
            StaleOwnerError: ``owner_epoch`` is not newer than the current fence.
            StoreFailedError, StoreReadOnlyError, StoreClosedError: as :meth:`install_fence`.
        """
        check_claim_args(trajectory_id, owner_epoch)
        return self._set_fence(trajectory_id, lambda cur: next_claimed_epoch(trajectory_id, owner_epoch, cur))

    def _set_fence(self, trajectory_id: str, decide) -> int:
        """Under the lock: ``decide(current fence) -> new`` (it may raise), then write a FENCE
        record for ``new`` and fdatasync it. Returns ``new``."""
        with self._lock:
            self._usable()
            epoch = decide(self._fences.get(trajectory_id, 0))
            stage = "write"
            try:
                self._write_records([(KIND_FENCE, _EPOCH.pack(epoch) + trajectory_id.encode("utf-8"))])
                stage = "fdatasync"
                self._sync()
                self._fences[trajectory_id] = epoch
            except BaseException as exc:  # noqa: BLE001 - re-raised by _failing
                self._failing(exc, stage)
            return epoch

    # --- reads ---------------------------------------------------------------------------------
    def read(self, trajectory_id: str, start: int = 1, stop: int | None = None) -> Iterator[Event]:
        """Events of one trajectory with ``start <= sequence_number <= stop``, decoded lazily, a
        run of events at a time (16 at first, doubling up to 1024: :meth:`_decode_ahead`).

        Bounds as :func:`~kernel_lib.log.base.read_bounds`. Raises StoreClosedError after close,
        StoreError for non-int bounds; decoding raises the typed event errors (MalformedEventError
        for a body nested too deeply), and CorruptLogError if a body decodes to an event other
        than the one indexed at that position. Each event's ``digest`` is the SHA-256 of its
        stored bytes, computed on the first read of a row open indexed and then cached (rows
        appended since open are hashed by each read).
        """
        lo, hi = read_bounds(start, stop)
        with self._lock:
            self._open_for_reads()
            rows = self._bytes.get(trajectory_id, [])
            end = len(rows) if hi is None else min(hi, len(rows))
            chunk = rows[lo - 1:end] if end >= lo else []
            # the digest cache of the rows open indexed (a list never resized: see __init__)
            digests = self._digests.get(trajectory_id, [])
        return self._decode_ahead(trajectory_id, lo, chunk, digests)

    def _decode_ahead(self, trajectory_id: str, lo: int, bodies: list[bytes], digests: list) -> Iterator[Event]:
        """Decode ``bodies`` (sequence numbers ``lo``, ``lo + 1``, ...) in runs of
        :data:`_FIRST_RUN` events, doubling up to :data:`_LONGEST_RUN`, each run with the cyclic
        collector paused (kernel_lib._support.gc_pause), and yield each run's events in order.
        A run is decoded only when the caller asks for its first event, and an error is raised
        where its event stands, after every event before it was yielded, as a one-at-a-time
        decode would.

        ``digests`` is the trajectory's digest cache (``digests[seq - 1]``, rows open indexed):
        a cached digest is handed to decode_stored; a missing one decode_stored computes from
        the body, and the event's digest is then kept in the cache for the next read."""
        i, n, run = 0, len(bodies), _FIRST_RUN
        cached = len(digests)
        while i < n:
            end = min(n, i + run)
            out: list[Event] = []
            failure: "Exception | None" = None
            with cyclic_gc_paused():
                for j in range(i, end):
                    k = lo - 1 + j
                    digest = digests[k] if k < cached else None
                    try:
                        ev = self._decoded(trajectory_id, k + 1, bodies[j], digest)
                    except Exception as exc:   # noqa: BLE001 - re-raised below, at its event's place
                        failure = exc
                        break
                    if digest is None and k < cached:
                        digests[k] = ev.digest   # SHA-256 of bodies[j], the bytes open indexed at k
                    out.append(ev)
            yield from out
            if failure is not None:
                raise failure
            i = end
            run = min(2 * run, _LONGEST_RUN)

    def _decoded(self, trajectory_id: str, seq: int, body: bytes, digest: "str | None" = None) -> Event:
        try:
            ev = decode_stored(body, known_digest=digest)
        except RecursionError:
            raise MalformedEventError(f"segment log {self.directory}: stored event {trajectory_id}#{seq} nests too "
                                      "deeply to decode") from None
        if ev.trajectory_id != trajectory_id or ev.sequence_number != seq:
            raise CorruptLogError(f"segment log {self.directory}: the record indexed as {trajectory_id}#{seq} "
                                  f"decodes to {ev.trajectory_id}#{ev.sequence_number}")
        return ev

    def head(self, trajectory_id: str) -> int:
        with self._lock:
            self._open_for_reads()
            return len(self._bytes.get(trajectory_id, ()))

    def fence(self, trajectory_id: str) -> int:
        # one dict read is atomic: no need to queue behind a flush holding the append lock
        self._open_for_reads()
        return self._fences.get(trajectory_id, 0)

    def trajectories(self) -> list[str]:
        with self._lock:
            self._open_for_reads()
            return sorted(t for t, rows in self._bytes.items() if rows)

    @property
    def synced_watermark(self) -> Position:
        """(segment number, byte offset) before which every byte is known durable (read-only:
        the newest watermark a valid record claims)."""
        return self._synced

    @property
    def end_position(self) -> Position:
        """(segment number, byte offset) where the next record will be written (read-only: the
        end of the valid prefix)."""
        return (self._segment, self._size)

    def segment_paths(self) -> list[str]:
        """Paths of the segment files, in order."""
        return [self._path(n) for n in range(1, self._segment + 1)]

    # --- closing -------------------------------------------------------------------------------
    def _release_files(self) -> None:
        try:
            if self._handle is not None:
                try:
                    self.fs.close(self._handle)
                finally:
                    self._handle = None
        finally:
            self._dir_lock.release()

    def close(self) -> None:
        """Close the current segment and release the directory lock. Idempotent.

        A store that is neither read-only nor failed first cuts the preallocated zeros off its
        last segment, so a closed log is exactly as long as its records."""
        with self._lock, self._sync_lock:
            if not self._closed:
                self._closed = True
                if (not self.read_only and not self._failed and self._handle is not None
                        and self._allocated > self._size):
                    try:
                        self.fs.truncate(self._handle, self._size)
                        self._allocated = self._size
                    except OSError:
                        pass   # zeros after the last record are a valid end of the log: the next open reads them so
                self._release_files()

    def __repr__(self) -> str:
        return (f"<SegmentStore {self.directory}{' read-only' if self.read_only else ''} segment={self._segment} "
                f"size={self._size} synced={self._synced} events={len(self._ids)}>")
