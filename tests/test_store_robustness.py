"""Store robustness: read-only opening, interrupted appends, transient busy, tampered rows, bad
arguments, pathological bodies (§11.3.1 table 2, §11.8.4).

Fault model / invariant / goal, per test group:

* read-only opening — a log is inspected by a process that must not (or cannot) write; opening
  changes no byte, mtime or directory entry, refuses what is not a kernel_lib log, reports a torn
  segment tail instead of trimming it, and refuses appends with a typed error;
* interrupted appends — a KeyboardInterrupt or a non-OSError escapes the file system or the batch;
  a segment store is failed (so a retry cannot store an event twice), an SQLite transaction is
  rolled back (so nothing half-done stays visible or locked);
* transient busy — another connection holds SQLite's write lock; the append is refused with a
  retryable StoreBusyError and the store keeps working; a real I/O-class error still fails it;
* tampered rows — an SQLite row holds another event's bytes (with a matching digest) or a row is
  deleted; read() raises CorruptLogError naming the trajectory and position;
* bad arguments — a segment size that is not a sane int is a ConfigError (fences, tiers, read
  ranges and batch members are checked the same way by every store: the conformance suite,
  :mod:`kernel_lib.log.conformance`, run by tests/test_store_conformance.py);
* pathological bodies — a CRC-valid frame holding deeply nested JSON never raises RecursionError.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from kernel_lib.errors import (
    ConfigError,
    CorruptLogError,
    MalformedEventError,
    StoreBusyError,
    StoreError,
    StoreFailedError,
    StoreReadOnlyError,
)
from kernel_lib.core.events import Event, RuntimeInput
from kernel_lib.log import AckTier, GroupCommitter, SQLiteStore, open_store
from kernel_lib.log.fs import ForwardingFileSystem, MemoryFileSystem, OsFileSystem
from kernel_lib.log.segment import (
    HEADER_BYTES,
    KIND_EVENT,
    SegmentStore,
    encode_frame,
    segment_name,
)

F, W = AckTier.FDATASYNC, AckTier.WRITE
REPO = str(Path(__file__).resolve().parent.parent)


def ev(seq: int, traj: str = "t", *, eid: str | None = None, epoch: int = 0, value: int = 1) -> Event:
    return Event.create(trajectory_id=traj, event_id=eid or f"{traj}/{seq}", sequence_number=seq,
                        owner_epoch=epoch, payload=RuntimeInput(kind="random", name="draw", value=value))


def snapshot(root: str | os.PathLike) -> dict[str, tuple[bytes, int, int]]:
    """Every file under ``root``: relative path -> (bytes, mtime_ns, mode)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            st = os.stat(p)
            data = b"" if stat.S_ISDIR(st.st_mode) else Path(p).read_bytes()
            out[os.path.relpath(p, root)] = (data, st.st_mtime_ns, st.st_mode)
    return out


def sqlite_log(path, n=3) -> list[Event]:
    evs = [ev(i) for i in range(1, n + 1)]
    with SQLiteStore.open(path, create=True) as s:
        s.append_batch(evs, F)
        s.install_fence("t", 2)
    return evs


def segment_log(path, n=3, **kw) -> list[Event]:
    evs = [ev(i) for i in range(1, n + 1)]
    with SegmentStore.open(path, **kw, create=True) as s:
        for e in evs:
            s.append(e, F)
        s.install_fence("t", 2)
    return evs


# ------------------------------------------------------------------------------------------------
# 1. read-only opening: SQLite
# ------------------------------------------------------------------------------------------------


def test_sqlite_read_only_changes_nothing_on_disk(tmp_path):
    p = tmp_path / "log.sqlite"
    evs = sqlite_log(p)
    before = snapshot(tmp_path)
    assert set(before) == {"log.sqlite"}           # a clean close leaves no -wal / -shm
    s = open_store("sqlite", p, read_only=True)
    assert s.read_only and s.recovery.read_only
    assert [e.canonical for e in s.read("t")] == [e.canonical for e in evs]
    assert (s.head("t"), s.fence("t"), s.trajectories()) == (3, 2, ["t"])
    rep = s.recovery.to_dict()
    assert rep["events_recovered"] == 3 and rep["trajectories"] == 1 and rep["read_only"] is True
    assert rep["path"] == str(p)
    s.close()
    assert snapshot(tmp_path) == before


def test_sqlite_read_only_sees_a_live_writer_and_creates_no_file(tmp_path):
    p = tmp_path / "log.sqlite"
    sqlite_log(p)
    w = SQLiteStore.open(p, create=True)                       # a live writer: -wal and -shm exist now
    names = set(os.listdir(tmp_path))
    r = SQLiteStore.open(p, read_only=True)
    assert r.head("t") == 3
    w.append(ev(4, epoch=2), F)
    assert r.head("t") == 4 and [e.sequence_number for e in r.read("t")] == [1, 2, 3, 4]
    r.close()
    w.close()
    assert set(os.listdir(tmp_path)) <= names


def test_sqlite_read_only_picks_up_a_writer_that_arrives_later(tmp_path):
    p = tmp_path / "log.sqlite"
    sqlite_log(p)
    r = SQLiteStore.open(p, read_only=True)       # no -wal: read without creating one
    assert r.head("t") == 3
    with SQLiteStore.open(p, create=True) as w:
        w.append(ev(4, epoch=2), F)
        assert r.head("t") == 4
    r.close()


def test_sqlite_read_only_refuses_writes(tmp_path):
    p = tmp_path / "log.sqlite"
    sqlite_log(p)
    before = snapshot(tmp_path)
    with SQLiteStore.open(p, read_only=True) as s:
        with pytest.raises(StoreReadOnlyError):
            s.append(ev(4), F)
        with pytest.raises(StoreReadOnlyError):
            s.install_fence("t", 9)
        assert s.head("t") == 3 and s.fence("t") == 2
    assert snapshot(tmp_path) == before


def _foreign(path: Path, kind: str) -> None:
    if kind == "text":
        path.write_text("hello, not a database " * 100)
    elif kind == "empty":
        path.write_bytes(b"")
    else:
        c = sqlite3.connect(path)
        if kind == "other_app":
            c.execute("create table foo(x)")
        elif kind == "version1_users":
            c.execute("create table users(a, b)")
            c.execute("pragma user_version=1")
        elif kind == "version1_events_ab":
            c.execute("create table events(a, b)")
            c.execute("pragma user_version=1")
        elif kind == "version7":
            c.execute("create table events(a, b)")
            c.execute("pragma user_version=7")
        c.commit()
        c.close()


@pytest.mark.parametrize("kind", ["text", "empty", "other_app", "version1_users", "version1_events_ab", "version7"])
def test_sqlite_read_only_refuses_what_is_not_a_kernel_log_and_touches_nothing(tmp_path, kind):
    p = tmp_path / "x.db"
    _foreign(p, kind)
    before = snapshot(tmp_path)
    with pytest.raises(StoreError):
        SQLiteStore.open(p, read_only=True)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("kind", ["other_app", "version1_users", "version1_events_ab", "version7"])
def test_sqlite_read_write_refuses_a_foreign_database_without_converting_it(tmp_path, kind):
    p = tmp_path / "x.db"
    _foreign(p, kind)
    before = snapshot(tmp_path)
    with pytest.raises(StoreError):
        SQLiteStore.open(p, create=True)
    c = sqlite3.connect(p)
    assert c.execute("pragma journal_mode").fetchone()[0] == "delete"    # not switched to WAL
    c.close()
    assert snapshot(tmp_path) == before


def test_sqlite_read_only_of_a_missing_file_creates_nothing(tmp_path):
    with pytest.raises(StoreError, match="no SQLite log"):
        open_store("sqlite", tmp_path / "nope.sqlite", read_only=True)
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------------------------------------
# 1. read-only opening: segment
# ------------------------------------------------------------------------------------------------


class CallLog(ForwardingFileSystem):
    """Records the name of every FileSystem method called."""

    def __init__(self, inner):
        super().__init__(inner)
        self.calls: list[str] = []

    def __getattribute__(self, name):
        attr = super().__getattribute__(name)
        if not name.startswith("_") and name not in ("inner", "calls") and callable(attr):
            self.calls.append(name)
        return attr


def test_segment_read_only_uses_only_reads_and_takes_no_lock(tmp_path):
    evs = segment_log(tmp_path / "seg")
    os.remove(tmp_path / "seg" / "LOCK")
    before = snapshot(tmp_path)
    fs = CallLog(OsFileSystem())
    with SegmentStore.open(tmp_path / "seg", fs=fs, read_only=True) as s:
        assert [e.canonical for e in s.read("t")] == [e.canonical for e in evs]
        assert s.fence("t") == 2 and s.recovery.read_only and not s.recovery.torn_tail_found
        with pytest.raises(StoreReadOnlyError):
            s.append(ev(4), F)
        with pytest.raises(StoreReadOnlyError):
            s.install_fence("t", 5)
    assert set(fs.calls) <= {"exists", "listdir", "read_all", "size"}, fs.calls
    assert snapshot(tmp_path) == before     # no LOCK file, no segment, no byte or mtime changed


def test_segment_read_only_works_while_a_writer_holds_the_lock(tmp_path):
    d = tmp_path / "seg"
    w = SegmentStore.open(d, create=True)
    w.append(ev(1), F)
    with open_store("segment", d, read_only=True) as r:
        assert r.head("t") == 1
    w.append(ev(2), F)                       # the writer is undisturbed
    w.close()


def test_segment_read_only_reports_a_torn_tail_and_leaves_it(tmp_path):
    d = tmp_path / "seg"
    evs = segment_log(d, n=4)
    path = d / segment_name(1)
    full = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(full - 10)                  # the last frame (the fence) is torn
    before = snapshot(tmp_path)
    with SegmentStore.open(d, read_only=True) as s:
        rep = s.recovery
        assert rep.torn_tail_found and not rep.torn_tail_trimmed and rep.bytes_trimmed == 0
        fence_frame = HEADER_BYTES + 8 + 1
        assert rep.torn_tail_bytes == fence_frame - 10
        assert rep.torn_tail_at == f"{segment_name(1)}:{full - fence_frame}"
        assert rep.torn_tail_reason and "torn tail" in rep.notes()[0]
        d2 = rep.to_dict()
        assert d2["torn_tail_found"] is True and d2["torn_tail_at"] == rep.torn_tail_at
        assert [e.canonical for e in s.read("t")] == [e.canonical for e in evs]   # the valid prefix
        assert s.fence("t") == 0                                                   # the torn fence is not read
    assert snapshot(tmp_path) == before
    with SegmentStore.open(d, create=True) as s:            # a read-write open trims it, as before
        assert s.recovery.torn_tail_trimmed and s.recovery.torn_tail_found
        assert s.recovery.bytes_trimmed == fence_frame - 10


def test_segment_read_only_still_refuses_corruption_before_the_tail(tmp_path):
    d = tmp_path / "seg"
    segment_log(d, n=4)
    path = d / segment_name(1)
    data = bytearray(path.read_bytes())
    data[HEADER_BYTES + 5] ^= 0x40           # damage inside the first record, vouched for by later ones
    path.write_bytes(bytes(data))
    before = snapshot(tmp_path)
    with pytest.raises(CorruptLogError):
        SegmentStore.open(d, read_only=True)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("what", ["missing", "empty", "no_segments", "a_file"])
def test_segment_read_only_refuses_a_directory_that_is_not_a_segment_log(tmp_path, what):
    d = tmp_path / "d"
    if what == "empty":
        d.mkdir()
    elif what == "no_segments":
        d.mkdir()
        (d / "notes.txt").write_text("hi")
    elif what == "a_file":
        d.write_text("hi")
    before = snapshot(tmp_path)
    with pytest.raises(StoreError, match="not a segment log|no segment log"):
        SegmentStore.open(d, read_only=True)
    assert snapshot(tmp_path) == before


def test_segment_read_only_on_memory_fs_records_no_mutation():
    mem = MemoryFileSystem()
    with SegmentStore.open("/log", fs=mem, create=True) as s:
        s.append(ev(1), F)
    files = mem.snapshot()
    with SegmentStore.open("/log", fs=mem, read_only=True) as r:
        assert r.head("t") == 1 and r.synced_watermark <= r.end_position
    assert mem.snapshot() == files and not mem._locks


# ------------------------------------------------------------------------------------------------
# 1. read-only opening without write permission (a real permission check, unprivileged)
# ------------------------------------------------------------------------------------------------

_RO_SCRIPT = textwrap.dedent("""
    import json, sys
    from kernel_lib.log import open_store
    out = {}
    for kind, path in (("sqlite", sys.argv[1]), ("segment", sys.argv[2])):
        with open_store(kind, path, read_only=True) as s:
            out[kind] = {"seqs": [e.sequence_number for e in s.read("t")], "fence": s.fence("t"),
                         "recovery": s.recovery.to_dict()}
    print(json.dumps(out))
""")


def _read_only_tree(base: str) -> None:
    for dirpath, _dirnames, filenames in os.walk(base):
        for n in filenames:
            os.chmod(os.path.join(dirpath, n), 0o444)
        os.chmod(dirpath, 0o555)


def _writable_tree(base: str) -> None:
    for dirpath, _dirnames, filenames in os.walk(base):
        os.chmod(dirpath, 0o755)
        for n in filenames:
            os.chmod(os.path.join(dirpath, n), 0o644)


@pytest.mark.parametrize("live_wal", [False, True])
def test_read_only_opening_needs_no_write_permission(live_wal):
    """As an unprivileged user (``setpriv`` to nobody when running as root, where chmod means
    nothing), both stores open and read a log whose files and directories are read-only."""
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("running as root without setpriv: cannot drop privileges")
        prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    else:
        prefix = []
    base = tempfile.mkdtemp(prefix="kl-ro-", dir="/tmp")
    try:
        os.chmod(base, 0o755)
        sq, seg = os.path.join(base, "log.sqlite"), os.path.join(base, "seg")
        sqlite_log(sq)
        segment_log(seg)
        if live_wal:       # leave -wal and -shm behind, as a crashed writer would
            w = sqlite3.connect(sq)
            w.execute("pragma journal_mode=wal")
            w.execute("update fences set owner_epoch=3")
            w.commit()
            for suffix in ("-wal", "-shm"):
                shutil.copy(sq + suffix, sq + suffix + ".keep")
            w.close()
            for suffix in ("-wal", "-shm"):
                os.replace(sq + suffix + ".keep", sq + suffix)
            assert os.path.getsize(sq + "-wal") > 0
        _read_only_tree(base)
        before = snapshot(base)
        env = dict(os.environ, PYTHONPATH=REPO, PYTHONDONTWRITEBYTECODE="1")
        r = subprocess.run(prefix + [sys.executable, "-c", _RO_SCRIPT, sq, seg], capture_output=True, text=True,
                           env=env, cwd="/", timeout=120, check=False)
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["sqlite"]["seqs"] == [1, 2, 3] and out["segment"]["seqs"] == [1, 2, 3]
        assert out["sqlite"]["fence"] == (3 if live_wal else 2) and out["segment"]["fence"] == 2
        assert out["sqlite"]["recovery"]["read_only"] and out["segment"]["recovery"]["read_only"]
        after = snapshot(base)
        if live_wal:       # a reader may refresh SQLite's shared-memory index; nothing else changes
            before.pop("log.sqlite-shm"), after.pop("log.sqlite-shm")
        assert after == before
    finally:
        _writable_tree(base)
        shutil.rmtree(base, ignore_errors=True)


# ------------------------------------------------------------------------------------------------
# 2. interrupted appends
# ------------------------------------------------------------------------------------------------


class Interrupting(ForwardingFileSystem):
    """Raises ``exc`` from the named method once, when armed."""

    def __init__(self, inner):
        super().__init__(inner)
        self.armed: tuple[str, BaseException] | None = None

    def _maybe(self, name):
        if self.armed and self.armed[0] == name:
            exc = self.armed[1]
            self.armed = None
            raise exc

    def pwrite(self, handle, offset_bytes, data):
        self._maybe("pwrite")
        super().pwrite(handle, offset_bytes, data)

    def fdatasync(self, handle):
        self._maybe("fdatasync")
        super().fdatasync(handle)

    def fsync_dir(self, path):
        self._maybe("fsync_dir")
        super().fsync_dir(path)


@pytest.mark.parametrize("where", ["pwrite", "fdatasync", "fsync_dir"])
@pytest.mark.parametrize("exc", [KeyboardInterrupt("ctrl-c"), RuntimeError("a buggy file system")])
def test_segment_interrupt_fails_the_store_so_a_retry_cannot_store_twice(tmp_path, where, exc):
    """Repro /tmp/breaker/p_seg_interrupt.py: the retry after an interrupt wrote the event twice."""
    fs = Interrupting(OsFileSystem())
    # fsync_dir is called on a roll: make the second append roll into a new segment
    s = SegmentStore.open(tmp_path, fs=fs, segment_bytes=300, create=True)
    s.append(ev(1), F)
    fs.armed = (where, exc)
    with pytest.raises(type(exc)):
        s.append(ev(2), F)
    assert fs.armed is None, "the injected fault did not fire"
    with pytest.raises(StoreFailedError, match="reopen"):
        s.append(ev(2), F)                      # the retry is refused, not written a second time
    with pytest.raises(StoreFailedError):
        s.append(ev(3), F)
    with pytest.raises(StoreFailedError):
        s.install_fence("t", 1)
    s.close()
    with SegmentStore.open(tmp_path, segment_bytes=300, create=True) as s2:   # no CorruptLogError "stored twice"
        assert s2.head("t") in (1, 2)
        assert s2.append(ev(2), F).sequence_number == 2            # new, or an identical retry
        s2.append(ev(3), F)
        assert [e.sequence_number for e in s2.read("t")] == [1, 2, 3]


class FailingPreallocation(ForwardingFileSystem):
    """Raises ``exc`` from the write of a run of zeros ahead of the log (``where="pwrite"``) or
    from the fdatasync right after it (``where="fdatasync"``), once armed."""

    def __init__(self, inner, where: str, exc: BaseException):
        super().__init__(inner)
        self.where, self.exc, self.armed, self.fired, self._after_fill = where, exc, False, False, False

    def pwrite(self, handle, offset_bytes, data):
        if self.armed and len(data) >= 1024 and not data.strip(b"\0"):
            if self.where == "pwrite":
                self.armed, self.fired = False, True
                raise self.exc
            self._after_fill = True
        super().pwrite(handle, offset_bytes, data)

    def fdatasync(self, handle):
        if self._after_fill:
            self._after_fill, self.armed, self.fired = False, False, True
            raise self.exc
        super().fdatasync(handle)


@pytest.mark.parametrize("where", ["pwrite", "fdatasync"])
@pytest.mark.parametrize("exc", [KeyboardInterrupt("ctrl-c"), OSError(28, "No space left on device")])
def test_segment_fault_while_preallocating_fails_the_store_and_reopen_keeps_what_was_acknowledged(
        tmp_path, where, exc):
    """The zeros written ahead of the log's end are a write and a barrier like any other: a fault
    there fails the store (the append that needed them is not acknowledged, nor any after it),
    and a reopen finds every acknowledged event and no damage."""
    fs = FailingPreallocation(OsFileSystem(), where, exc)
    kw = {"preallocate_bytes": 4096, "preallocate_from_bytes": 0}
    s = SegmentStore.open(tmp_path, fs=fs, create=True, **kw)
    s.append(ev(1), F)                                   # preallocates 4 KiB ahead
    fs.armed = True
    seq = 1
    with pytest.raises(StoreFailedError if isinstance(exc, OSError) else type(exc)):
        while seq < 200:                                 # until the zeros run out and are extended
            seq += 1
            s.append(ev(seq), W if seq % 2 else F)
    assert fs.fired, "the injected fault did not fire"
    with pytest.raises(StoreFailedError):
        s.append(ev(seq), F)
    s.close()
    with SegmentStore.open(tmp_path, create=True, **kw) as s2:
        assert s2.head("t") == seq - 1 and not s2.recovery.torn_tail_found
        s2.append(ev(seq), F)
        assert [e.sequence_number for e in s2.read("t")] == list(range(1, seq + 1))


def test_segment_interrupt_during_install_fence_fails_the_store(tmp_path):
    fs = Interrupting(OsFileSystem())
    s = SegmentStore.open(tmp_path, fs=fs, create=True)
    s.append(ev(1), F)
    fs.armed = ("fdatasync", KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        s.install_fence("t", 4)
    with pytest.raises(StoreFailedError):
        s.append(ev(2), F)
    s.close()
    with SegmentStore.open(tmp_path, create=True) as s2:
        assert s2.fence("t") in (0, 4) and s2.head("t") == 1


class InterruptingSQLite(SQLiteStore):
    """Raises ``exc`` inside the batch's transaction: after the all-new fast path has inserted
    its rows, or (when the fast path is not taken) while deciding the ``at``-th event."""

    interrupt_at: int | None = None
    exc: BaseException = KeyboardInterrupt("ctrl-c during batch")
    _ONE_STATEMENT_EVENTS_MAX = 0   # every batch takes the transaction path, where the interrupt is injected

    def _insert_all_new(self, events, tier):
        out = super()._insert_all_new(events, tier)
        if self.interrupt_at is not None and out is not None:
            self.interrupt_at = None
            raise self.exc
        return out

    def _decide(self, ev):
        if self.interrupt_at is not None:
            self.interrupt_at -= 1
            if self.interrupt_at == 0:
                self.interrupt_at = None
                raise self.exc
        return super()._decide(ev)


@pytest.mark.parametrize("exc", [KeyboardInterrupt("ctrl-c"), OverflowError("int too large")])
def test_sqlite_interrupt_rolls_back_and_resets_caches(tmp_path, exc):
    """Repro /tmp/breaker/p_sqlite_txn*.py: the half-done transaction stayed open (visible on this
    connection, locking every other writer, and the cached head said 2)."""
    p = tmp_path / "x.db"
    s = InterruptingSQLite.open(p, busy_timeout_s=0.2, create=True)
    s.append(ev(1), F)
    s.interrupt_at, s.exc = 2, exc
    with pytest.raises(type(exc)):
        s.append_batch([ev(2), ev(3)], F)
    assert not s._db.in_transaction
    assert s.head("t") == 1 and [e.sequence_number for e in s.read("t")] == [1]
    with SQLiteStore.open(p, busy_timeout_s=0.2, create=True) as other:     # the write lock was released
        other.append(ev(2, value=99), F)
    assert s.append(ev(3), F).sequence_number == 3             # cache was reset: head is 2 now
    with pytest.raises(StoreError):
        s.append(ev(2), F)                                      # conflicting duplicate of other's #2
    s.install_fence("t", 1)
    s.close()
    with SQLiteStore.open(p, create=True) as s3:
        assert [e.payload.value for e in s3.read("t")] == [1, 99, 1] and s3.fence("t") == 1


def test_sqlite_interrupt_after_a_one_statement_append_resets_caches(tmp_path):
    """Fault model: an interrupt lands right after the one-statement append (a run of one
    trajectory's events at the fence's epoch) committed, before the store counted it. Invariant:
    the statement is atomic (no transaction is left open), the caller sees the interrupt, the
    caches are dropped, and the next append is decided against the database: the committed
    events are there once, the next position is accepted, a retry of a committed one is a
    duplicate. Goal: head 3 after the interrupted [2, 3], #4 accepted, #3 retried as duplicate."""
    p = tmp_path / "x.db"

    class Interrupted(SQLiteStore):
        armed = False

        def _committed(self):
            if self.armed:
                self.armed = False
                raise KeyboardInterrupt("ctrl-c after the commit")
            return super()._committed()

    s = Interrupted.open(p, create=True)
    s.append(ev(1), F)
    s.armed = True
    with pytest.raises(KeyboardInterrupt):
        s.append_batch([ev(2), ev(3)], F)
    assert not s._db.in_transaction and not s._heads
    assert s.head("t") == 3
    assert s.append(ev(4), F).sequence_number == 4
    (dup,) = s.append_batch([ev(3)], F)
    assert dup.duplicate and dup.sequence_number == 3
    s.close()


def test_sqlite_interrupt_inside_install_fence_rolls_back(tmp_path):
    p = tmp_path / "x.db"
    s = SQLiteStore.open(p, create=True)
    s.append(ev(1), F)

    real = s._db

    class Conn:   # the connection, except that writing the fence row is interrupted
        def __getattr__(self, name):
            return getattr(real, name)

        def execute(self, sql, *a):
            if sql.startswith("INSERT INTO fences"):
                raise KeyboardInterrupt("ctrl-c")
            return real.execute(sql, *a)

    s._db = Conn()
    with pytest.raises(KeyboardInterrupt):
        s.install_fence("t", 3)
    s._db = real
    assert not real.in_transaction and s.fence("t") == 0
    s.install_fence("t", 3)
    assert s.fence("t") == 3
    s.close()


# ------------------------------------------------------------------------------------------------
# 3. SQLite: transient busy, real failures, use after close
# ------------------------------------------------------------------------------------------------


def test_sqlite_busy_is_retryable_and_does_not_fail_the_store(tmp_path):
    """Repro /tmp/breaker/p_fail_reopen.py (SQLite part)."""
    p = tmp_path / "x.db"
    s = SQLiteStore.open(p, busy_timeout_s=0.05, create=True)
    s.append(ev(1), F)
    other = sqlite3.connect(p, timeout=0, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    with pytest.raises(StoreBusyError) as ei:
        s.append(ev(2), F)
    assert not isinstance(ei.value, StoreFailedError)
    with pytest.raises(StoreBusyError):
        s.install_fence("t", 2)
    assert not s._db.in_transaction
    other.execute("ROLLBACK")
    other.close()
    assert s.append(ev(2), F).sequence_number == 2             # retry succeeds, no reopen needed
    s.install_fence("t", 2)
    assert s.fence("t") == 2
    s.close()


def test_sqlite_disk_full_still_fails_the_store(tmp_path):
    p = tmp_path / "x.db"
    s = SQLiteStore.open(p, create=True)
    s.append(ev(1), F)
    pages = s._db.execute("PRAGMA page_count").fetchone()[0]
    s._db.execute(f"PRAGMA max_page_count={pages}")          # the "disk" is now full
    big = [ev(i) for i in range(2, 200)]
    with pytest.raises(StoreFailedError, match="full"):
        s.append_batch(big, F)
    assert not s._db.in_transaction
    with pytest.raises(StoreFailedError, match="failed earlier"):
        s.append(ev(2), F)
    with pytest.raises(StoreFailedError):
        s.install_fence("t", 1)
    s.close()
    with SQLiteStore.open(p, create=True) as s2:
        assert s2.head("t") == 1


# ------------------------------------------------------------------------------------------------
# 4. SQLite read integrity
# ------------------------------------------------------------------------------------------------


def _set_row(p, seq, body):
    c = sqlite3.connect(p)
    c.execute("UPDATE events SET body=?, digest=? WHERE sequence_number=?",
              (body, hashlib.sha256(body).hexdigest(), seq))
    c.commit()
    c.close()


@pytest.mark.parametrize("body", [ev(2, traj="zzz", eid="other").canonical,   # another trajectory's event
                                  ev(7).canonical,                            # another position
                                  ev(2, eid="renamed").canonical])            # another event id
def test_sqlite_read_detects_a_row_holding_another_event(tmp_path, body):
    """Repro /tmp/breaker/p_sqlite_tamper.py: the digest matches the (tampered) bytes."""
    p = tmp_path / "x.db"
    sqlite_log(p)
    _set_row(p, 2, body)
    with SQLiteStore.open(p, read_only=True) as s:
        with pytest.raises(CorruptLogError, match=r"'t'.*#2|t#2"):
            list(s.read("t"))
        assert [e.sequence_number for e in s.read("t", 3)] == [3]


def test_sqlite_read_detects_a_deleted_row(tmp_path):
    p = tmp_path / "x.db"
    sqlite_log(p, n=4)
    c = sqlite3.connect(p)
    c.execute("DELETE FROM events WHERE sequence_number=2")
    c.commit()
    c.close()
    with SQLiteStore.open(p, create=True) as s:
        with pytest.raises(CorruptLogError, match=r"'t'.*#2"):
            s.read("t")
        with pytest.raises(CorruptLogError, match=r"#2"):
            s.read("t", 2, 3)
        assert [e.sequence_number for e in s.read("t", 3)] == [3, 4]
        assert any("#2" in d for d in s.recovery.details)       # open reports the gap
    c = sqlite3.connect(p)
    c.execute("DELETE FROM events WHERE sequence_number=1")
    c.commit()
    c.close()
    with SQLiteStore.open(p, read_only=True) as s, pytest.raises(CorruptLogError, match=r"#1"):
        s.read("t")


def test_sqlite_read_of_a_deeply_nested_body_is_typed(tmp_path):
    p = tmp_path / "x.db"
    sqlite_log(p)
    _set_row(p, 2, b'{"a":' + b"[" * 5000 + b"]" * 5000 + b"}")
    with SQLiteStore.open(p, create=True) as s, pytest.raises((MalformedEventError, CorruptLogError)):
        list(s.read("t"))


# ------------------------------------------------------------------------------------------------
# 5. argument validation (the checks shared by every store are in kernel_lib.log.conformance)
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seg", [float("nan"), float("inf"), 0, -5, 300.5, "1024", True, None])
def test_segment_bytes_must_be_a_sane_int(tmp_path, seg):
    with pytest.raises(ConfigError):
        SegmentStore.open(tmp_path / "seg", segment_bytes=seg, create=True)
    assert not (tmp_path / "seg").exists()


# ------------------------------------------------------------------------------------------------
# 6. pathological bodies in CRC-valid frames
# ------------------------------------------------------------------------------------------------

DEEP = b"[" * 5000 + b"]" * 5000


def _deep_envelope() -> bytes:
    """A valid envelope whose payload nests far past the JSON decoder's recursion limit."""
    d = json.loads(ev(1).canonical)
    body = json.dumps(d, sort_keys=True, separators=(",", ":")).encode()
    marker = json.dumps(d["payload"], sort_keys=True, separators=(",", ":")).encode()
    assert marker in body
    return body.replace(marker, b'{"deep":' + DEEP + b"}")


def test_deep_non_envelope_body_at_the_tail_is_torn_not_a_recursion_error(tmp_path):
    """Repro /tmp/breaker/p_seg_craft.py: open raised RecursionError."""
    d = tmp_path / "seg"
    d.mkdir()
    frames = [encode_frame(KIND_EVENT, ev(1).canonical, (1, 0))]
    frames.append(encode_frame(KIND_EVENT, b'{"a":' + DEEP + b"}", (1, len(frames[0]))))
    (d / segment_name(1)).write_bytes(b"".join(frames))
    with SegmentStore.open(d, read_only=True) as s:
        assert s.recovery.torn_tail_found and "undecodable" in s.recovery.torn_tail_reason
        assert s.head("t") == 1
    with SegmentStore.open(d, create=True) as s:
        assert s.recovery.torn_tail_trimmed and s.head("t") == 1


def test_deep_non_envelope_body_before_synced_records_is_corruption(tmp_path):
    d = tmp_path / "seg"
    d.mkdir()
    a = encode_frame(KIND_EVENT, b'{"a":' + DEEP + b"}", (1, 0))
    b = encode_frame(KIND_EVENT, ev(1).canonical, (1, len(a)))     # claims the deep frame was synced
    (d / segment_name(1)).write_bytes(a + b)
    with pytest.raises(CorruptLogError):
        SegmentStore.open(d, create=True)


def test_deep_payload_in_a_valid_envelope_opens_and_read_raises_typed(tmp_path):
    d = tmp_path / "seg"
    d.mkdir()
    body = _deep_envelope()
    (d / segment_name(1)).write_bytes(encode_frame(KIND_EVENT, body, (1, 0)))
    for ro in (True, False):
        with SegmentStore.open(d, read_only=ro) as s:
            assert s.head("t") == 1 and not s.recovery.torn_tail_found   # only the envelope is needed
            with pytest.raises(MalformedEventError):
                list(s.read("t"))


# ------------------------------------------------------------------------------------------------
# 7. group commit over an interrupted segment store
# ------------------------------------------------------------------------------------------------


def test_group_commit_interrupt_fails_the_segment_store_and_no_retry_double_writes(tmp_path):
    fs = Interrupting(OsFileSystem())
    store = SegmentStore.open(tmp_path, fs=fs, create=True)
    with GroupCommitter(store, F, flush_timer_s=0.001) as gc:
        gc.append(ev(1))
        fs.armed = ("fdatasync", KeyboardInterrupt("ctrl-c in the flusher"))
        with pytest.raises(StoreError) as ei:
            gc.submit(ev(2)).result(10)
        assert isinstance(ei.value.__cause__, KeyboardInterrupt) or "KeyboardInterrupt" in str(ei.value)
        with pytest.raises(StoreFailedError):      # the committer keeps running; the store refuses
            gc.submit(ev(2)).result(10)
    store.close()
    with SegmentStore.open(tmp_path, create=True) as s:       # no "stored twice"
        assert s.head("t") in (1, 2)


def test_open_store_memory_cannot_be_read_only():
    with pytest.raises(StoreError, match="read-only"):
        open_store("memory", read_only=True)


@pytest.mark.parametrize("note", ["", 'brackets ]]}} and {[ "quoted" \\ backslash \\"', "\u00e9\U0001f600", "x" * 300])
def test_top_level_scanner_agrees_with_json_loads(note):
    """The non-recursive fallback reads the same envelope fields as json.loads."""
    from kernel_lib.core.events import ToolIntent
    from kernel_lib.log.segment import _event_fields, _top_level_fields

    e = Event.create(trajectory_id="t-é", event_id=f"id-{note[:5]}", sequence_number=3, owner_epoch=7,
                     payload=ToolIntent(operation_id="op", attempt_id="a1", tool="run_tests",
                                        arguments={"note": note, "nested": [[{"a": [note]}]]},
                                        repeat_contract="idempotency_key", grant_id="g", authorization_ref="au",
                                        reservation_ref="r"))
    full = json.loads(e.canonical)
    top = _top_level_fields(e.canonical)
    assert set(top) == set(full)
    assert {k: v for k, v in full.items() if not isinstance(v, (dict, list))} == \
        {k: v for k, v in top.items() if not isinstance(full[k], (dict, list))}
    assert _event_fields(e.canonical) == ("t-é", e.event_id, 3, 7)
    for bad in (b"[1]", b'{"a":1', b'{"a":[1}', b'{"a":1} x', b'{"a" 1}', b"\xff"):
        with pytest.raises(ValueError):
            _top_level_fields(bad)
