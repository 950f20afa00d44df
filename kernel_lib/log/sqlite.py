"""SQLite log store: the embedded default (§11.3.1, §11.8.4).

One database file in WAL mode. Tables::

    events(position, trajectory_id, sequence_number, event_id UNIQUE, digest, body)
        -- body = canonical bytes; UNIQUE (trajectory_id, sequence_number)
    fences(trajectory_id PRIMARY KEY, owner_epoch)    -- newest owner_epoch seen
    sync_marker(n)                                    -- bumped to force a WAL sync (see below)

Acknowledgment tiers:

* ``WRITE``: ``PRAGMA synchronous=OFF``; the commit returns once SQLite has handed the WAL frames
  to ``write()``, so they sit in the kernel page cache and survive a process crash only.
* ``FDATASYNC``: ``PRAGMA synchronous=FULL``; SQLite syncs the WAL before the commit returns, so
  the acknowledgment survives power loss or a host crash with the volume intact.

Every batch is one ``BEGIN IMMEDIATE`` transaction in which the §11.8.4 contract is checked
against the database itself (not a per-process cache), so a second process holding a stale
``owner_epoch`` (a zombie worker, §11.5.1) is rejected by the log even though it has its own
connection.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path
from typing import Iterator, Sequence

from ..errors import StaleOwnerError, StoreClosedError, StoreError, StoreFailedError
from ..errors import CorruptLogError
from ..events import Event, decode_stored, digest
from .base import AckTier, AppendOutcome, LogStore, RecoveryReport, StoredRef, check_append

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

#: Version of the table layout, kept in ``PRAGMA user_version``.
LAYOUT_VERSION = 1

_SYNC = {AckTier.WRITE: "OFF", AckTier.FDATASYNC: "FULL"}


class SQLiteStore(LogStore):
    """The default store. ``SQLiteStore.open(path)`` creates the file if needed.

    Raises StoreError if the file is not a database of this layout.
    """

    name = "sqlite"
    offered_tiers = (AckTier.WRITE, AckTier.FDATASYNC)

    def __init__(self, path: str | os.PathLike, *, busy_timeout_s: float = 5.0):
        self.path = Path(path)
        try:
            self._db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False,
                                       timeout=busy_timeout_s)
            self._db.execute("PRAGMA journal_mode=WAL")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, LAYOUT_VERSION):
                raise StoreError(f"{self.path} is a log of layout version {version}; this build reads "
                                 f"version {LAYOUT_VERSION}")
            if version == 0 and self._db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
                raise StoreError(f"{self.path} is an SQLite database but not a kernel_lib log")
            self._db.executescript(_SCHEMA)
            self._db.execute(f"PRAGMA user_version={LAYOUT_VERSION}")
            n = self._db.execute("SELECT count(*) FROM events").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open SQLite log {self.path}: {exc}") from exc
        self._sync: str | None = None
        self._heads: dict[str, int] = {}
        self._fences: dict[str, int] = {}
        self._data_version: int | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._failed: str | None = None
        self.recovery = RecoveryReport(store=self.name, events_recovered=n)

    @classmethod
    def open(cls, path: str | os.PathLike, **kw) -> "SQLiteStore":
        return cls(path, **kw)

    def _set_tier(self, tier: AckTier) -> None:
        mode = _SYNC[tier]
        if mode != self._sync:
            self._db.execute(f"PRAGMA synchronous={mode}")
            self._sync = mode

    def _usable(self) -> None:
        if self._closed:
            raise StoreClosedError(f"SQLite log {self.path} is closed")
        if self._failed:
            raise StoreFailedError(f"SQLite log {self.path} failed earlier ({self._failed}); reopen it")

    def _lookup(self, event_id: str) -> tuple[StoredRef, bytes] | tuple[None, None]:
        row = self._db.execute("SELECT trajectory_id, sequence_number, digest, body FROM events WHERE event_id=?",
                               (event_id,)).fetchone()
        return (StoredRef(row[0], row[1], row[2]), bytes(row[3])) if row else (None, None)

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

    def _decide(self, ev: Event) -> bool:
        """Insert ``ev`` if new (True), or return False for an identical retry; raise its error."""
        head, fence = self._head_fence(ev.trajectory_id)
        if ev.owner_epoch >= fence and ev.sequence_number == head + 1:
            try:
                self._db.execute("INSERT INTO events (trajectory_id, sequence_number, event_id, digest, body) "
                                 "VALUES (?,?,?,?,?)",
                                 (ev.trajectory_id, ev.sequence_number, ev.event_id, ev.digest, ev.canonical))
                return True
            except sqlite3.IntegrityError:
                pass   # the event id exists: a retry or a conflict, decided below
        ref, body = self._lookup(ev.event_id)
        if check_append(ev, ref, body, head, fence):
            return False
        raise StoreError(f"internal: {ev.event_id} neither new nor a retry")  # pragma: no cover

    def append_batch(self, events: Sequence[Event], tier: AckTier) -> list["AppendOutcome | StoreError"]:
        self.check_tier(tier)
        out: list[AppendOutcome | StoreError] = []
        with self._lock:
            self._usable()
            db = self._db
            self._set_tier(tier)
            inserted, retried = 0, 0
            try:
                db.execute("BEGIN IMMEDIATE")
                self._refresh_cache()
                for ev in events:
                    t = ev.trajectory_id
                    try:
                        new = self._decide(ev)
                    except StoreError as exc:
                        out.append(exc)
                        continue
                    if not new:
                        ref, _ = self._lookup(ev.event_id)
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
                db.execute("COMMIT")
                self._data_version = db.execute("PRAGMA data_version").fetchone()[0]
            except sqlite3.Error as exc:
                try:
                    db.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
                self._heads.clear()
                self._fences.clear()
                self._failed = str(exc)
                raise StoreFailedError(f"SQLite append to {self.path} failed: {exc}; nothing in this "
                                       "batch is acknowledged") from exc
        return out

    def read(self, trajectory_id: str, start: int = 1, stop: int | None = None) -> Iterator[Event]:
        with self._lock:
            if self._closed:
                raise StoreClosedError(f"SQLite log {self.path} is closed")
            rows = self._db.execute(
                "SELECT body, digest, sequence_number FROM events WHERE trajectory_id=? AND sequence_number>=? AND sequence_number<=? "
                "ORDER BY sequence_number", (trajectory_id, start, stop if stop is not None else 2**62)).fetchall()
        return (self._checked(trajectory_id, bytes(r[0]), r[1], r[2]) for r in rows)

    def _checked(self, trajectory_id: str, body: bytes, stored_digest: str, seq: int) -> Event:
        """Decode a stored event after checking its bytes against the digest stored with them."""
        if digest(body) != stored_digest:
            raise CorruptLogError(f"{self.path}: stored bytes of {trajectory_id}#{seq} do not match their digest")
        return decode_stored(body)

    def head(self, trajectory_id: str) -> int:
        with self._lock:
            return self._db.execute("SELECT coalesce(max(sequence_number), 0) FROM events WHERE trajectory_id=?",
                                    (trajectory_id,)).fetchone()[0]

    def fence(self, trajectory_id: str) -> int:
        with self._lock:
            row = self._db.execute("SELECT owner_epoch FROM fences WHERE trajectory_id=?", (trajectory_id,)).fetchone()
        return row[0] if row else 0

    def install_fence(self, trajectory_id: str, owner_epoch: int) -> None:
        with self._lock:
            self._usable()
            self._set_tier(AckTier.FDATASYNC)
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute("SELECT owner_epoch FROM fences WHERE trajectory_id=?", (trajectory_id,)).fetchone()
                cur = row[0] if row else 0
                if owner_epoch < cur:
                    raise StaleOwnerError(f"cannot install owner_epoch={owner_epoch} on {trajectory_id}: "
                                          f"the log has seen owner_epoch={cur}")
                db.execute("INSERT INTO fences VALUES (?,?) ON CONFLICT(trajectory_id) "
                           "DO UPDATE SET owner_epoch=excluded.owner_epoch", (trajectory_id, owner_epoch))
                db.execute("COMMIT")
                self._fences.pop(trajectory_id, None)
                self._heads.pop(trajectory_id, None)
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def trajectories(self) -> list[str]:
        with self._lock:
            return [r[0] for r in self._db.execute("SELECT DISTINCT trajectory_id FROM events ORDER BY 1")]

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._db.close()
