"""SQLite log store: the embedded default (§11.3.1, §11.8.4).

One database file in WAL mode. Tables::

    events(position, trajectory_id, sequence_number, event_id UNIQUE, digest, body)
        -- body = canonical bytes; UNIQUE (trajectory_id, sequence_number)
    fences(trajectory_id PRIMARY KEY, owner_epoch)    -- newest owner_epoch seen
    sync_marker(n)                                    -- bumped to force a WAL sync (see below)

``PRAGMA user_version`` holds :data:`LAYOUT_VERSION`. A database that is not this layout (another
application's tables, another version) is refused with StoreError and left as it was. Opening, the
layout check and the ``BEGIN IMMEDIATE`` transactions are those of :mod:`kernel_lib._support.sqlite`,
shared with the other embedded SQLite files (ownership coordinator, result inbox, reference index).

Acknowledgment tiers (the connection stays at ``PRAGMA synchronous=NORMAL``: no PRAGMA per
transaction):

* ``WRITE``: the commit returns once SQLite has handed the WAL frames to ``write()``, so they sit
  in the kernel page cache and survive a process crash only (under NORMAL the WAL is synced before
  every checkpoint, the database after it, and the WAL header when the file is reused, so a later
  barrier covers them).
* ``FDATASYNC``: the same commit, then an ``fdatasync`` of the ``-wal`` file (what
  ``synchronous=FULL`` does at each commit, done by the store): the acknowledgment survives power
  loss or a host crash with the volume intact. Every committed frame is then either in the synced
  WAL or was checkpointed into the synced database file. The ``fdatasync`` runs after the store's
  lock is released (under a sync lock of its own), so a write-tier commit of another thread is
  never queued behind it; a barrier that started after a commit returned covers that commit, so
  a commit already covered waits for none of its own.

Every batch is one ``BEGIN IMMEDIATE`` transaction in which the §11.8.4 contract is checked
against the database itself (not a per-process cache), so a second process holding a stale
``owner_epoch`` (a zombie worker, §11.5.1) is rejected by the log even though it has its own
connection.

Errors inside a batch or a fence:

* another connection holds the write lock past ``busy_timeout_s`` (SQLITE_BUSY / SQLITE_LOCKED):
  the transaction is rolled back and :class:`~kernel_lib.errors.StoreBusyError` raised; nothing
  was applied and the store stays usable (retry);
* any other SQLite error (I/O, disk full, corruption): rolled back, the store is marked failed
  and :class:`~kernel_lib.errors.StoreFailedError` raised now and on every later append;
* anything else (KeyboardInterrupt, a bug): rolled back, the per-connection caches are reset,
  and the exception is re-raised. A retry is safe: the contract is checked against the database.

Reads check what they return: each row's bytes against its stored digest, the decoded event's
trajectory, position and id against the row's, and that positions are contiguous from ``start``;
a mismatch raises :class:`~kernel_lib.errors.CorruptLogError` naming trajectory and position.

Read-only opening (``read_only=True``) changes nothing on disk: it connects through a
``file:...?mode=ro`` URI, runs no schema or PRAGMA write (no WAL switch), and needs no write
permission. When no ``-wal`` file exists (the log was closed cleanly and no writer is connected)
it adds ``immutable=1`` so that SQLite creates no ``-wal``/``-shm`` file, and switches to a plain
``mode=ro`` connection as soon as a writer's ``-wal`` appears. (A reader beside a writer shares the
writer's ``-shm`` index; only a ``-wal`` left without its ``-shm`` makes SQLite create one, or fail
with StoreError where it cannot.)
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from pathlib import Path
from typing import Iterator, Sequence

from kernel_lib._support.sqlite import (
    Layout,
    close_quietly,
    connect,
    is_busy,
    is_corrupt,
    open_database,
    set_synchronous,
    statements,
    write_transaction,
)
from kernel_lib.errors import (
    ConfigError,
    CorruptLogError,
    LogNotFoundError,
    MalformedEventError,
    StoreBusyError,
    StoreClosedError,
    StoreError,
    StoreFailedError,
    StoreReadOnlyError,
)
from kernel_lib.core.events import Event, decode_stored, digest
from kernel_lib.log.base import (
    MAX_OWNER_EPOCH,
    AckTier,
    AppendOutcome,
    LogStore,
    RecoveryReport,
    StoredRef,
    check_append,
    check_events,
    check_retire_args,
    prefix_retired,
    check_claim_args,
    check_fence_args,
    check_fence_not_older,
    next_claimed_epoch,
    read_bounds,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    position        INTEGER PRIMARY KEY,   -- rowid: appends land on the rightmost leaf
    trajectory_id   TEXT    NOT NULL,
    sequence_number INTEGER NOT NULL,
    event_id        TEXT    NOT NULL UNIQUE,
    digest          TEXT    NOT NULL,
    body            BLOB    NOT NULL,
    UNIQUE (trajectory_id, sequence_number)
);
CREATE TABLE IF NOT EXISTS fences (
    trajectory_id TEXT PRIMARY KEY,
    owner_epoch   INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sync_marker (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    n  INTEGER NOT NULL
);
INSERT OR IGNORE INTO sync_marker VALUES (1, 0);
"""

#: Optional table (created by any read-write open, absent from logs never opened by a build that
#: compacts): the log-compaction mark of each trajectory (§11.8.3).
_RETIRED_SCHEMA = """
CREATE TABLE IF NOT EXISTS retired_prefix (
    trajectory_id       TEXT PRIMARY KEY,
    through_sequence    INTEGER NOT NULL,
    checkpoint_event_id TEXT NOT NULL
) WITHOUT ROWID
"""

#: The tables of the layout as SQL (read-only use: ``bench append`` measures SQLite alone on them).
SCHEMA_SQL = _SCHEMA

#: Version of the table layout, kept in ``PRAGMA user_version``.
LAYOUT_VERSION = 1

#: Columns each table of the layout must have (checked at open).
_LAYOUT_COLUMNS = {
    "events": {"position", "trajectory_id", "sequence_number", "event_id", "digest", "body"},
    "fences": {"trajectory_id", "owner_epoch"},
    "sync_marker": {"id", "n"},
}

#: The layout checked at open (:mod:`kernel_lib._support.sqlite`): ``user_version`` and columns.
_LAYOUT = Layout(kind="kernel_lib log", label="SQLite log", version=LAYOUT_VERSION,
                 tables={t: frozenset(c) for t, c in _LAYOUT_COLUMNS.items()}, schema=statements(_SCHEMA))

#: ``PRAGMA synchronous`` of every commit, both tiers (what each level survives:
#: kernel_lib._support.sqlite). NORMAL, not OFF: in WAL mode both return from a commit without a
#: sync, but under OFF a checkpoint copies frames into the database file and the WAL is then reused
#: with no sync at all, so a later barrier (which syncs only the WAL) would not cover what the reused
#: WAL overwrote. NORMAL syncs the WAL before each checkpoint and the database after it, so every
#: barrier (an fdatasync of the WAL after a commit) makes all earlier commits durable (one barrier
#: per step, kernel_lib.log.trajectory).
_SYNCHRONOUS = "NORMAL"


def _empty_file_without_wal(path: Path) -> bool:
    """A zero-byte regular file with no non-empty ``-wal`` beside it (in WAL mode the main file may
    stay empty while the ``-wal`` holds every page, so only both empty means "no log here")."""
    try:
        if not path.is_file() or path.stat().st_size:
            return False
        wal = Path(str(path) + "-wal")
        return not (wal.is_file() and wal.stat().st_size)
    except OSError:
        return False


class SQLiteStore(LogStore):
    """The default store. ``SQLiteStore.open(path, create=True)`` starts a new log if the file is
    missing; without ``create`` a missing file is refused (a missing log is not an empty one).

    Args:
        path: the database file.
        busy_timeout_s: how long a statement waits for another connection's lock (seconds).
        read_only: open without changing anything on disk (module docstring); appends and fences
            raise StoreReadOnlyError. The file must exist and be a kernel_lib log.
        create: read-write only: create an empty log if ``path`` does not exist (default False);
            ignored with ``read_only`` (a read-only open never creates anything).

    Raises:
        LogNotFoundError: ``path`` does not exist, or is an empty file with no ``-wal``, and
            ``create`` is false (nothing is created).
        ConfigError: ``create`` is not a bool.
        StoreError: the file is not a database of this layout (nothing is changed), or cannot
            be opened. StoreBusyError: locked past the timeout.
    """

    name = "sqlite"
    offered_tiers = (AckTier.WRITE, AckTier.FDATASYNC)
    #: a barrier syncs the whole WAL, so it covers the frames of earlier commits too (and NORMAL
    #: syncs the WAL before a checkpoint copies it and the database before the WAL is reused)
    barrier_covers_earlier_writes = True

    def __init__(self, path: str | os.PathLike, *, busy_timeout_s: float = 5.0, read_only: bool = False,
                 create: bool = False):
        self.path = Path(path)
        self.read_only = bool(read_only)
        if create is not True and create is not False:
            raise ConfigError(f"create must be True or False, got {create!r}")
        if not self.path.exists() and (self.read_only or not create):
            raise LogNotFoundError(f"no SQLite log at {self.path}: the file does not exist"
                                   + ("" if self.read_only else " (a missing log is not an empty one; pass "
                                      "create=True to start a new log there)"))
        if not create and not self.read_only and _empty_file_without_wal(self.path):
            raise LogNotFoundError(f"no SQLite log at {self.path}: the file is empty and has no -wal beside it (an "
                                   "empty file is not a log; pass create=True to start a new log in it)")
        self._timeout = busy_timeout_s
        self._wal_path = str(self.path) + "-wal"
        self._immutable = False
        self._sync: str | None = None
        self._heads: dict[str, int] = {}
        self._fences: dict[str, int] = {}
        self._data_version: int | None = None
        self._lock = threading.Lock()
        #: held around each barrier (fdatasync of the WAL) and by close; taken after ``_lock`` when
        #: both are held, never the other way round
        self._sync_lock = threading.Lock()
        self._wal_fd: int | None = None
        self._commits = 0          # commits of this connection that returned (under _lock)
        self._synced_commits = 0   # of those, how many a completed barrier covers (under _sync_lock)
        self._fence_lock = threading.Lock()       # guards the fence reader, not the writer
        self._fence_db: sqlite3.Connection | None = None
        self._closed = False
        self._failed: str | None = None
        self.recovery = RecoveryReport(store=self.name, path=str(self.path), read_only=self.read_only)
        self._db: sqlite3.Connection | None = None
        try:
            if self.read_only:
                self._open_read_only()
            else:
                self._open_read_write()
            self._survey()
        except sqlite3.Error as exc:
            self._close_quietly()
            if is_busy(exc):
                raise StoreBusyError(f"cannot open SQLite log {self.path}: {exc} (another connection holds "
                                     "its lock; retry)") from exc
            raise StoreError(f"cannot open SQLite log {self.path}: {exc}") from exc
        except BaseException:
            self._close_quietly()
            raise

    @classmethod
    def open(cls, path: str | os.PathLike, *, busy_timeout_s: float = 5.0, read_only: bool = False,
             create: bool = False) -> "SQLiteStore":
        """Open the log at ``path`` (read-write; ``create=True`` starts a new one if the file is
        missing, else LogNotFoundError). See :class:`SQLiteStore`."""
        return cls(path, busy_timeout_s=busy_timeout_s, read_only=read_only, create=create)

    # --- opening -------------------------------------------------------------------------------
    def _open_read_write(self) -> None:
        # the layout is checked before anything is written (a foreign file stays untouched), and
        # created under the write lock; synchronous is set before the first transaction (_set_tier)
        self._db = db = open_database(self.path, _LAYOUT, error=StoreError, busy_timeout_s=self._timeout,
                                      journal_mode="WAL", synchronous=None)
        if db.execute("SELECT count(*) FROM sync_marker WHERE id = 1").fetchone()[0] == 0:
            db.execute("INSERT OR IGNORE INTO sync_marker VALUES (1, 0)")   # needed by retry-only syncs
        db.execute(_RETIRED_SCHEMA)

    def _open_read_only(self) -> None:
        self._immutable = not os.path.exists(self._wal_path)
        self._file_state = self._stat()
        self._db = open_database(self.path, _LAYOUT, error=StoreError, busy_timeout_s=self._timeout,
                                 read_only=True, immutable=self._immutable)

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _connect_read_only(self) -> sqlite3.Connection:
        """A ``mode=ro`` connection; ``immutable=1`` too while no ``-wal`` file exists."""
        self._immutable = not os.path.exists(self._wal_path)
        self._file_state = self._stat()
        return connect(self.path, busy_timeout_s=self._timeout, read_only=True, immutable=self._immutable)

    def _survey(self) -> None:
        """Fill :attr:`recovery`: events, trajectories, and trajectories whose rows have gaps."""
        rep = self.recovery
        rows = self._db.execute("SELECT trajectory_id, count(*), min(sequence_number), max(sequence_number) "
                                "FROM events GROUP BY trajectory_id ORDER BY trajectory_id").fetchall()
        rep.events_recovered = sum(r[1] for r in rows)
        rep.trajectories = len(rows)
        for tid, n, lo, hi in rows:
            retired = self._retired(self._db, tid)[0]
            if retired:     # retired rows keep their id and digest; count the retained suffix
                n, lo = self._db.execute("SELECT count(*), min(sequence_number) FROM events WHERE trajectory_id=? "
                                         "AND sequence_number>?", (tid, retired)).fetchone()
                rep.events_recovered -= self._db.execute(
                    "SELECT count(*) FROM events WHERE trajectory_id=? AND sequence_number<=?",
                    (tid, retired)).fetchone()[0]
            if lo != retired + 1 or n != hi - retired:
                first_missing = retired + 1 if lo != retired + 1 else self._first_gap(tid)
                rep.details.append(f"trajectory {tid!r} stores {n} events but its head is #{hi}: #{first_missing} "
                                   "(at least) is missing; reading it raises CorruptLogError")

    def _retired(self, db: sqlite3.Connection, tid: str) -> tuple[int, str]:
        """(retired through, checkpoint event id) of ``tid``; (0, "") if never compacted."""
        try:
            row = db.execute("SELECT through_sequence, checkpoint_event_id FROM retired_prefix WHERE trajectory_id=?",
                             (tid,)).fetchone()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):    # a log written before compaction existed, opened read-only
                return 0, ""
            raise
        return (row[0], row[1]) if row else (0, "")

    def retired_through(self, trajectory_id: str) -> int:
        with self._lock:
            db = self._reader()
            with self._reading("retired_through"):
                return self._retired(db, trajectory_id)[0]

    def retire_prefix(self, trajectory_id: str, through: int, *, checkpoint_event_id: str) -> int:
        """See :meth:`LogStore.retire_prefix`: one ``BEGIN IMMEDIATE`` transaction empties the
        prefix rows' bodies (keeping each event id, position and digest, so ids stay unique and an
        identical late retry is acknowledged) and records the mark, committed with
        a barrier (the WAL is synced before this returns)."""
        with self._lock:
            self._usable()
            try:
                self._set_tier(AckTier.FDATASYNC)
                with write_transaction(self._db, f"SQLite retire_prefix on {self.path}") as db:
                    self._refresh_cache()
                    head = db.execute("SELECT coalesce(max(sequence_number), 0) FROM events WHERE trajectory_id=?",
                                      (trajectory_id,)).fetchone()[0]
                    check_retire_args(trajectory_id, through, head, checkpoint_event_id)   # raises: rolled back
                    current = self._retired(db, trajectory_id)[0]
                    if through <= current:
                        return current   # nothing written: the commit is empty
                    # the bodies go; id, position and digest stay, so a retired event id is never reused and an
                    # identical late retry is still acknowledged as the duplicate it is (§11.8.4)
                    db.execute("UPDATE events SET body=x'' WHERE trajectory_id=? AND sequence_number<=?",
                               (trajectory_id, through))
                    db.execute("INSERT INTO retired_prefix VALUES (?,?,?) ON CONFLICT(trajectory_id) DO UPDATE SET "
                               "through_sequence=excluded.through_sequence, "
                               "checkpoint_event_id=excluded.checkpoint_event_id",
                               (trajectory_id, through, checkpoint_event_id))
                self._data_version = None
                self._barrier(self._committed())
                return through
            except sqlite3.Error as exc:
                self._raise_sqlite(exc, "retire_prefix")
            except BaseException:
                self._abort()
                raise

    def _first_gap(self, tid: str) -> int:
        row = self._db.execute(
            "SELECT a.sequence_number + 1 FROM events a WHERE a.trajectory_id=? AND NOT EXISTS "
            "(SELECT 1 FROM events b WHERE b.trajectory_id=a.trajectory_id AND b.sequence_number=a.sequence_number+1) "
            "ORDER BY a.sequence_number LIMIT 1", (tid,)).fetchone()
        return row[0] if row else 0

    # --- state checks ----------------------------------------------------------------------------
    def _close_quietly(self) -> None:
        close_quietly(self._db)
        self._db = None

    def _usable(self) -> None:
        if self._closed:
            raise StoreClosedError(f"SQLite log {self.path} is closed")
        if self.read_only:
            raise StoreReadOnlyError(f"SQLite log {self.path} was opened read-only; it takes no appends or fences")
        if self._failed:
            raise StoreFailedError(f"SQLite log {self.path} failed earlier ({self._failed}); reopen it")

    def _reader(self) -> sqlite3.Connection:
        """The connection to read through (call under the lock)."""
        if self._closed:
            raise StoreClosedError(f"SQLite log {self.path} is closed")
        if self._immutable and (os.path.exists(self._wal_path) or self._stat() != self._file_state):
            # an immutable connection trusts the file never to change: reconnect when a writer
            # came (its -wal exists) or came and went (the file changed since we connected)
            old, self._db = self._db, self._connect_read_only()
            old.close()
        return self._db

    @contextlib.contextmanager
    def _reading(self, what: str):
        """Turn SQLite errors raised by a read into typed errors."""
        try:
            yield
        except sqlite3.Error as exc:
            if is_busy(exc):
                raise StoreBusyError(f"SQLite log {self.path}: {what}: {exc} (retry)") from exc
            if is_corrupt(exc):
                raise CorruptLogError(f"SQLite log {self.path}: {what}: {exc}") from exc
            raise StoreError(f"SQLite log {self.path}: {what} failed: {exc}") from exc

    def _abort(self) -> None:
        """Roll back an open transaction and drop the caches; mark the store failed if that fails."""
        db = self._db
        self._heads.clear()
        self._fences.clear()
        self._data_version = None
        try:
            if db.in_transaction:
                db.execute("ROLLBACK")
        except sqlite3.Error as exc:
            self._failed = self._failed or f"rollback failed: {exc}"
        if db.in_transaction:
            self._failed = self._failed or "a transaction could not be rolled back"

    def _raise_sqlite(self, exc: sqlite3.Error, what: str) -> None:
        """Roll back after ``exc`` and raise the typed error (busy: retryable; else: failed)."""
        self._abort()
        if is_busy(exc) and not self._failed:
            raise StoreBusyError(f"SQLite {what} on {self.path}: {exc}: another connection holds the write "
                                 "lock; nothing was applied, retry") from exc
        self._failed = self._failed or str(exc)
        raise StoreFailedError(f"SQLite {what} on {self.path} failed: {exc}; nothing in this call is "
                               "acknowledged and the store refuses appends until reopened") from exc

    # --- appends ---------------------------------------------------------------------------------
    def _set_tier(self, tier: AckTier) -> None:
        """Every tier commits under :data:`_SYNCHRONOUS` (set once per connection); ``FDATASYNC``
        adds :meth:`_barrier` after the commit."""
        if self._sync != _SYNCHRONOUS:
            set_synchronous(self._db, _SYNCHRONOUS)
            self._sync = _SYNCHRONOUS

    def _committed(self) -> int:
        """Count a commit that just returned (under ``_lock``); returns its number for :meth:`_barrier`."""
        self._commits += 1
        return self._commits

    def _barrier(self, commit: int) -> None:
        """Return once a completed ``fdatasync`` of the WAL covers commit number ``commit`` (module
        docstring). Called after the commit returned, with or without ``_lock``.

        The WAL is the file SQLite's connection opened at its first transaction; it is not removed
        while a connection is open, so the descriptor opened here at the first barrier names it
        until close. Raises StoreFailedError when the sync fails (and on every later append: a
        barrier after a failed one proves nothing) or the store failed meanwhile."""
        with self._sync_lock:
            if self._synced_commits >= commit:
                return
            if self._failed or self._closed:
                self._usable()   # raises StoreFailedError / StoreClosedError
            covered = self._commits   # every commit counted so far returned before this read
            try:
                if self._wal_fd is None:
                    self._wal_fd = os.open(self._wal_path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
                getattr(os, "fdatasync", os.fsync)(self._wal_fd)
            except OSError as exc:
                self._failed = self._failed or f"fdatasync of the WAL failed: {exc}"
                raise StoreFailedError(f"SQLite log {self.path}: fdatasync of {self._wal_path} failed ({exc}); "
                                       "what was committed since the last barrier is not known durable, and the "
                                       "store refuses appends until reopened") from exc
            if covered > self._synced_commits:
                self._synced_commits = covered

    def _lookup(self, event_id: str) -> tuple[StoredRef, bytes] | tuple[None, None]:
        row = self._db.execute("SELECT trajectory_id, sequence_number, digest, body FROM events WHERE event_id=?",
                               (event_id,)).fetchone()
        if not row:
            return None, None
        body = bytes(row[3])
        return StoredRef(row[0], row[1], row[2]), (body or None)   # a retired row keeps only its digest

    def _refresh_cache(self) -> None:
        """Drop cached heads and fences if another connection committed since we last looked."""
        version = self._db.execute("PRAGMA data_version").fetchone()[0]
        if version != self._data_version:
            self._heads.clear()
            self._fences.clear()
            self._data_version = version

    def _head_fence(self, t: str) -> tuple[int, int]:
        if t not in self._heads:
            db = self._db
            self._heads[t] = db.execute("SELECT coalesce(max(sequence_number), 0) FROM events WHERE trajectory_id=?",
                                        (t,)).fetchone()[0]
            row = db.execute("SELECT owner_epoch FROM fences WHERE trajectory_id=?", (t,)).fetchone()
            self._fences[t] = row[0] if row else 0
        return self._heads[t], self._fences[t]

    def _decide(self, ev: Event) -> StoredRef | None:
        """Insert ``ev`` if new (None), or return where the store holds it for an identical retry;
        raise its error."""
        head, fence = self._head_fence(ev.trajectory_id)
        if ev.owner_epoch >= fence and ev.sequence_number == head + 1:
            if ev.owner_epoch > MAX_OWNER_EPOCH or ev.sequence_number > MAX_OWNER_EPOCH:
                raise StoreError(f"event {ev.event_id}: owner_epoch and sequence_number must be < 2**63 "
                                 "to be stored")
            try:
                self._db.execute("INSERT INTO events (trajectory_id, sequence_number, event_id, digest, body) "
                                 "VALUES (?,?,?,?,?)",
                                 (ev.trajectory_id, ev.sequence_number, ev.event_id, ev.digest, ev.canonical))
                return None
            except sqlite3.IntegrityError:
                pass   # the event id exists: a retry or a conflict, decided below
        ref, body = self._lookup(ev.event_id)
        if check_append(ev, ref, body, head, fence):
            return ref
        raise StoreError(f"internal: {ev.event_id} neither new nor a retry")  # pragma: no cover

    def _insert_all_new(self, events: Sequence[Event], tier: AckTier) -> "list[AppendOutcome] | None":
        """Fast path of a batch: if the cached heads and fences say every event is new and next in
        line, insert them all with one ``executemany`` (few statements, so a flush does not keep
        handing the GIL back and forth). Returns None, with nothing written, when any event needs
        the per-event path (a retry, a conflict, a gap, a stale owner)."""
        heads: dict[str, int] = {}
        fences: dict[str, int] = {}
        for ev in events:
            t = ev.trajectory_id
            if t not in heads:
                heads[t], fences[t] = self._head_fence(t)
            if (ev.owner_epoch < fences[t] or ev.sequence_number != heads[t] + 1
                    or ev.owner_epoch > MAX_OWNER_EPOCH or ev.sequence_number > MAX_OWNER_EPOCH):
                return None
            heads[t] = ev.sequence_number
            fences[t] = max(fences[t], ev.owner_epoch)
        db = self._db
        insert = "INSERT INTO events (trajectory_id, sequence_number, event_id, digest, body) VALUES (?,?,?,?,?)"
        if len(events) == 1:   # one statement is atomic by itself: no savepoint to take and release
            ev = events[0]
            try:
                db.execute(insert, (ev.trajectory_id, ev.sequence_number, ev.event_id, ev.digest, ev.canonical))
            except sqlite3.IntegrityError:   # the event id is already stored
                return None
        else:
            db.execute("SAVEPOINT all_new")
            try:
                db.executemany(insert, [(ev.trajectory_id, ev.sequence_number, ev.event_id, ev.digest, ev.canonical)
                                        for ev in events])
            except sqlite3.IntegrityError:   # an event id already stored (or twice in the batch)
                db.execute("ROLLBACK TO all_new")
                db.execute("RELEASE all_new")
                return None
            db.execute("RELEASE all_new")
        for t, f in fences.items():
            if f > self._fences[t]:
                db.execute("INSERT INTO fences VALUES (?,?) ON CONFLICT(trajectory_id) "
                           "DO UPDATE SET owner_epoch=excluded.owner_epoch", (t, f))
        self._heads.update(heads)
        self._fences.update(fences)
        return [AppendOutcome(ev.event_id, ev.trajectory_id, ev.sequence_number, tier) for ev in events]

    def append_batch(self, events: Sequence[Event], tier: "AckTier | str") -> list["AppendOutcome | StoreError"]:
        """Append ``events`` in one transaction, committed at ``tier`` (§11.8.4).

        Raises:
            TierNotOfferedError, StoreError (a member is not an Event): before anything is written.
            StoreBusyError: another connection held the write lock past the timeout; retry.
            StoreFailedError: an SQLite error now or earlier; reopen.
            StoreReadOnlyError, StoreClosedError: opened read-only, or closed.
            Anything else raised inside the transaction is re-raised after a rollback.
        """
        tier = self.check_tier(tier)
        events = check_events(events)
        out: list[AppendOutcome | StoreError] = []
        with self._lock:
            self._usable()
            try:
                self._set_tier(tier)
                one = self._append_in_one_statement(events, tier) if events else None
                if one is not None:   # committed by that one statement
                    commit = self._committed()
                    out = one
                else:
                    commit = self._append_in_transaction(events, tier, out)
            except sqlite3.Error as exc:
                self._raise_sqlite(exc, "append")
            except BaseException:
                self._abort()
                raise
        if tier is AckTier.FDATASYNC and any(isinstance(o, AppendOutcome) for o in out):
            self._barrier(commit)   # outside the lock: other threads' commits go on meanwhile
        return out

    #: the statement of :meth:`_append_in_one_statement` for each batch size (built once)
    _one_statement_sql: dict[int, str] = {}

    #: most events :meth:`_append_in_one_statement` takes (5 bound parameters each, well under
    #: SQLite's limit on parameters per statement)
    _ONE_STATEMENT_EVENTS_MAX = 32

    def _append_in_one_statement(self, events: Sequence[Event], tier: AckTier) -> "list[AppendOutcome] | None":
        """The common append of one writer (under ``_lock``): a run of events of one trajectory
        at consecutive positions, all stamped with the owner epoch the store already holds for it,
        inserted by ONE autocommit ``INSERT ... SELECT`` whose ``WHERE`` checks the §11.8.4
        contract inside the database itself: the stored head is the position before the first
        event and the stored fence equals the events' owner epoch. SQLite runs the statement as
        one transaction under the write lock, so the check and the insert are atomic against
        other connections and processes, as a ``BEGIN IMMEDIATE`` transaction's would be; it costs
        one statement instead of four (begin, data_version, insert, commit).

        Returns the outcomes once committed, or None with nothing written when the batch needs the
        transaction path: another shape (several trajectories, a gap, a new owner epoch whose
        fence must be raised), a check that failed (then the transaction path names the error),
        an event id already stored (a retry or a conflict), or a busy database (the transaction
        path waits for the lock). Sets the writer's cached head and fence of the trajectory (both
        are facts of the database at this commit), valid while ``PRAGMA data_version`` stays as
        it was read before the statement (by this call when no reading is held, else earlier)."""
        first = events[0]
        t, epoch, seq0 = first.trajectory_id, first.owner_epoch, first.sequence_number
        n = len(events)
        if n > self._ONE_STATEMENT_EVENTS_MAX or epoch > MAX_OWNER_EPOCH or seq0 + n - 1 > MAX_OWNER_EPOCH:
            return None
        params: list = []
        for i, ev in enumerate(events):
            if ev.trajectory_id != t or ev.owner_epoch != epoch or ev.sequence_number != seq0 + i:
                return None
            params += (t, ev.sequence_number, ev.event_id, ev.digest, ev.canonical)
        params += (t, seq0 - 1, t, epoch)
        # the cache's PRAGMA data_version must have been read before the statement: after a
        # successful insert this connection's head and fence of ``t`` are facts as of this commit,
        # which is later than that reading, so fence() can answer the gate's dispatch-time recheck
        # from the cache while the version stays the one read (no other connection committed since
        # the reading, hence none since this commit either); a commit by another connection at any
        # point after the reading changes the version, so the cache is dropped at the next look and
        # never trusted. A reading kept from an earlier call is as good as a fresh one for this
        # (the decision itself is the statement's own check, not the cache), so the PRAGMA is read
        # only when no reading is held (open, after a failure or a retire): one statement fewer in
        # the common append (the statement runs once per step at least, twice with deferred evidence)
        if self._data_version is None:
            self._refresh_cache()
        sql = self._one_statement_sql.get(n)
        if sql is None:
            sql = self._one_statement_sql[n] = (
                "INSERT INTO events (trajectory_id, sequence_number, event_id, digest, body) "
                "SELECT column1, column2, column3, column4, column5 FROM (VALUES "
                + ",".join(["(?,?,?,?,?)"] * n) + ") "
                "WHERE (SELECT coalesce(max(sequence_number), 0) FROM events WHERE trajectory_id=?) = ? "
                "AND coalesce((SELECT owner_epoch FROM fences WHERE trajectory_id=?), 0) = ?")
        try:
            inserted = self._db.execute(sql, params).rowcount
        except sqlite3.IntegrityError:   # an event id (or position) already stored: nothing written
            return None
        except sqlite3.OperationalError as exc:
            if is_busy(exc):   # nothing written; the transaction path waits for the lock
                return None
            raise
        if inserted != n:   # 0: a check failed and nothing was written (the statement is atomic)
            return None
        self._heads[t] = events[-1].sequence_number   # what the statement's WHERE checked, plus the insert
        self._fences[t] = epoch
        return [AppendOutcome(ev.event_id, t, ev.sequence_number, tier) for ev in events]

    def _append_in_transaction(self, events: Sequence[Event], tier: AckTier,
                               out: "list[AppendOutcome | StoreError]") -> int:
        """Append ``events`` in one ``BEGIN IMMEDIATE`` transaction (under ``_lock``), deciding
        each against the cached heads and fences; fill ``out``; return the commit's number."""
        inserted, retried = 0, 0
        with write_transaction(self._db, f"SQLite append on {self.path}") as db:
            self._refresh_cache()
            fast = self._insert_all_new(events, tier)
            if fast is not None:   # the common case: every event new and next in line
                out.extend(fast)
                events = ()
            for ev in events:
                t = ev.trajectory_id
                try:
                    ref = self._decide(ev)
                except StoreError as exc:
                    out.append(exc)
                    continue
                if ref is not None:   # an identical retry: acknowledged where it already is
                    out.append(AppendOutcome(ev.event_id, ref.trajectory_id, ref.sequence_number, tier, True))
                    retried += 1
                    continue
                inserted += 1
                self._heads[t] = ev.sequence_number
                if ev.owner_epoch > self._fences[t]:
                    self._fences[t] = ev.owner_epoch
                    db.execute("INSERT INTO fences VALUES (?,?) ON CONFLICT(trajectory_id) "
                               "DO UPDATE SET owner_epoch=excluded.owner_epoch", (t, ev.owner_epoch))
                out.append(AppendOutcome(ev.event_id, t, ev.sequence_number, tier))
            if retried and not inserted and tier is AckTier.FDATASYNC:
                db.execute("UPDATE sync_marker SET n = n + 1 WHERE id = 1")
        # committed here; our own commit leaves PRAGMA data_version unchanged
        return self._committed()

    def install_fence(self, trajectory_id: str, owner_epoch: int) -> None:
        """Record ``owner_epoch`` for the trajectory in one FDATASYNC transaction (§11.5.1).

        Raises:
            StoreError: bad arguments (:func:`~kernel_lib.log.base.check_fence_args`).
            StaleOwnerError: ``owner_epoch`` is older than the current fence.
            StoreBusyError, StoreFailedError, StoreReadOnlyError, StoreClosedError: as
            :meth:`append_batch`.
        """
        check_fence_args(trajectory_id, owner_epoch)

        def decide(cur: int) -> int:
            check_fence_not_older(trajectory_id, owner_epoch, cur)
            return owner_epoch
        self._set_fence(trajectory_id, decide, "install_fence")

    def claim_epoch(self, trajectory_id: str, owner_epoch: "int | None" = None) -> int:
        """See :meth:`LogStore.claim_epoch`: the fence is read and raised inside one ``BEGIN
        IMMEDIATE`` transaction (the database's write lock is held from the read to the commit),
        so claimants on other connections or in other processes are serialized.

        Raises:
            StoreError: bad arguments (:func:`~kernel_lib.log.base.check_claim_args`).
            StaleOwnerError: ``owner_epoch`` is not newer than the current fence.
            StoreBusyError, StoreFailedError, StoreReadOnlyError, StoreClosedError: as
            :meth:`install_fence`.
        """
        check_claim_args(trajectory_id, owner_epoch)
        return self._set_fence(trajectory_id, lambda cur: next_claimed_epoch(trajectory_id, owner_epoch, cur),
                               "claim_epoch")

    def _set_fence(self, trajectory_id: str, decide, what: str) -> int:
        """Read the fence, let ``decide(current) -> new`` check it, and write ``new``, all in one
        FDATASYNC ``BEGIN IMMEDIATE`` transaction. Returns ``new``."""
        with self._lock:
            self._usable()
            try:
                self._set_tier(AckTier.FDATASYNC)
                with write_transaction(self._db, f"SQLite {what} on {self.path}") as db:
                    row = db.execute("SELECT owner_epoch FROM fences WHERE trajectory_id=?",
                                     (trajectory_id,)).fetchone()
                    epoch = decide(row[0] if row else 0)
                    db.execute("INSERT INTO fences VALUES (?,?) ON CONFLICT(trajectory_id) "
                               "DO UPDATE SET owner_epoch=excluded.owner_epoch", (trajectory_id, epoch))
                self._fences.pop(trajectory_id, None)
                self._heads.pop(trajectory_id, None)
                self._barrier(self._committed())
                return epoch
            except sqlite3.Error as exc:
                self._raise_sqlite(exc, what)
            except BaseException:
                self._abort()
                raise

    # --- reads -----------------------------------------------------------------------------------
    def read(self, trajectory_id: str, start: int = 1, stop: int | None = None) -> Iterator[Event]:
        """Events of one trajectory with ``start <= sequence_number <= stop``, decoded lazily.

        Raises:
            CorruptLogError: a position in the range is missing below the last stored one (now),
                or a row's bytes do not match their digest or hold another event (while iterating).
            StoreError: non-int bounds. StoreClosedError: after close. Decoding raises the typed
                event errors.
        """
        lo, hi = read_bounds(start, stop)
        hi = MAX_OWNER_EPOCH if hi is None else min(hi, MAX_OWNER_EPOCH)
        with self._lock:
            db = self._reader()
            if hi < lo:
                return iter(())
            with self._reading(f"read {trajectory_id!r}"):
                retired, ckpt = self._retired(db, trajectory_id)
            prefix_retired(trajectory_id, lo, retired, ckpt, f"{self.path}: ")
            with self._reading(f"read {trajectory_id!r}"):
                rows = db.execute(
                    "SELECT sequence_number, event_id, digest, body FROM events WHERE trajectory_id=? "
                    "AND sequence_number>=? AND sequence_number<=? ORDER BY sequence_number",
                    (trajectory_id, lo, hi)).fetchall()
        for i, row in enumerate(rows):
            if row[0] != lo + i:
                raise CorruptLogError(
                    f"{self.path}: trajectory {trajectory_id!r} has no row for #{lo + i} but stores #{row[0]}: "
                    "a row was deleted or altered; refusing to return a history with a gap")
        return (self._checked(trajectory_id, seq, eid, bytes(body), dig) for seq, eid, dig, body in rows)

    def _checked(self, trajectory_id: str, seq: int, event_id: str, body: bytes, stored_digest: str) -> Event:
        """Decode a stored event after checking its bytes against the digest stored with them,
        then check that it is the event the row says it is."""
        where = f"{self.path}: row {trajectory_id!r}#{seq}"
        computed = digest(body)
        if computed != stored_digest:
            raise CorruptLogError(f"{where}: stored bytes do not match their digest")
        try:
            ev = decode_stored(body, known_digest=computed)   # hashed just now: not hashed twice
        except RecursionError:
            raise MalformedEventError(f"{where}: stored event nests too deeply to decode",
                                      event_id=event_id) from None
        if (ev.trajectory_id, ev.sequence_number, ev.event_id) != (trajectory_id, seq, event_id):
            raise CorruptLogError(f"{where} (event id {event_id}) holds event {ev.event_id} of "
                                  f"{ev.trajectory_id!r}#{ev.sequence_number}: the row was altered")
        return ev

    def head(self, trajectory_id: str) -> int:
        with self._lock:
            db = self._reader()
            with self._reading("head"):
                return db.execute("SELECT coalesce(max(sequence_number), 0) FROM events WHERE trajectory_id=?",
                                  (trajectory_id,)).fetchone()[0]

    def fence(self, trajectory_id: str) -> int:
        """Newest owner_epoch committed for the trajectory, by any connection or process.

        A read-write store whose writer connection is idle answers from the writer's cache of the
        fence when ``PRAGMA data_version`` says no other connection committed since the cache was
        filled (the cache holds what this connection committed, and is dropped on any other
        commit or failure); otherwise, and whenever the writer is busy, it reads through a second
        connection of its own: a WAL reader sees the last commit without waiting for the writer's
        lock, so the gate's dispatch-time recheck never queues behind a flush in progress.
        """
        sql = "SELECT owner_epoch FROM fences WHERE trajectory_id=?"
        if not self.read_only and self._lock.acquire(blocking=False):
            try:
                cached = self._cached_fence(trajectory_id)
            finally:
                self._lock.release()
            if cached is not None:
                return cached
        if self.read_only:
            with self._lock:
                db = self._reader()
                with self._reading("fence"):
                    row = db.execute(sql, (trajectory_id,)).fetchone()
            return row[0] if row else 0
        with self._fence_lock:
            if self._closed:
                raise StoreClosedError(f"SQLite log {self.path} is closed")
            with self._reading("fence"):
                if self._fence_db is None:
                    self._fence_db = connect(self.path, busy_timeout_s=self._timeout)
                row = self._fence_db.execute(sql, (trajectory_id,)).fetchone()
        return row[0] if row else 0

    def _cached_fence(self, trajectory_id: str) -> "int | None":
        """The writer cache's fence of ``trajectory_id`` if it is known current (under ``_lock``),
        else None. Current: the store is open and not failed, no transaction is open, the cache
        holds the trajectory, and ``PRAGMA data_version`` is the one read when it was filled
        (it changes exactly when another connection commits)."""
        if self._closed or self._failed or self._db is None or self._db.in_transaction:
            return None
        fence = self._fences.get(trajectory_id)
        if fence is None or self._data_version is None:
            return None
        try:
            version = self._db.execute("PRAGMA data_version").fetchone()[0]
        except sqlite3.Error:
            return None
        return fence if version == self._data_version else None

    def trajectories(self) -> list[str]:
        with self._lock:
            db = self._reader()
            with self._reading("trajectories"):
                return [r[0] for r in db.execute("SELECT DISTINCT trajectory_id FROM events ORDER BY 1")]

    def close(self) -> None:
        with self._lock, self._fence_lock, self._sync_lock:
            if not self._closed:
                self._closed = True
                self._close_quietly()
                close_quietly(self._fence_db)
                self._fence_db = None
                if self._wal_fd is not None:
                    with contextlib.suppress(OSError):
                        os.close(self._wal_fd)
                    self._wal_fd = None
