"""Which trajectory needs which stored bytes, and until when (§11.8.1, §11.8.2, §11.8.3).

Content addressing coalesces identical payloads (a workspace base shared by every run on one
repository is stored once), so a blob cannot belong to one trajectory: deleting it is safe only
when no trajectory's retention contract still needs it (footnote 9 of §11.8.2). The
:class:`ReferenceIndex` is the ledger that makes that decision checkable. It is one SQLite file
(WAL, ``synchronous=FULL``: every commit is on disk before the call returns) with four tables::

    trajectories(trajectory_id PRIMARY KEY, tenant, policy, ended_unix_s)
        -- who owns the run, its RetentionPolicy (JSON), when it ended (NULL while live)
    refs(digest, trajectory_id, holder, artifact_class, added_unix_s)
        -- PRIMARY KEY (digest, trajectory_id, holder); holder = the event id or checkpoint id
        -- whose committed record will name (or names) the digest
    holds(hold_id PRIMARY KEY, trajectory_id, from_sequence, to_sequence, purpose, until_unix_s)
        -- declared replay / audit / compliance promises over a span of log positions
    known(digest PRIMARY KEY)
        -- every digest ever referenced: collection considers only these, so objects other
        -- code stored in the same blob store without registering them are never touched
    collecting(digest PRIMARY KEY, owner_pid)
        -- a garbage collection in progress on that digest, by that process (see collect_garbage)

and one optional table, created by the first compaction (files from before it lack it)::

    compactions(trajectory_id PRIMARY KEY, through_sequence, checkpoint_event_id, holders,
                started_unix_s)
        -- a log compaction in progress: the prefix it retires and the holders (JSON list) whose
        -- references it releases once the prefix is retired (see kernel_lib.retention.compaction)

Ordering rules the rest of the engine relies on:

* a reference row is committed *before* the payload bytes are written and long before any log
  event names the digest, so a collection can never remove bytes between the write and the
  reference (a crash in between leaves a harmless extra reference, never a dangling one);
* a digest being collected cannot gain a reference until the collection is finished (a new
  reference waits, then rewrites the bytes);
* retention lifetimes run from the trajectory's end: while a run is live (``ended_unix_s`` NULL)
  none of its references expires, which is the current-recovery promise.

Months are converted to seconds as a mean Gregorian month, ``SECONDS_PER_MONTH`` =
365.2425 × 86 400 / 12 = 2 629 746 s.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from kernel_lib.checkpoint.blobs import is_digest
from kernel_lib._support.procs import pid_alive
from kernel_lib._support.checks import check_unix_s
from kernel_lib._support.sqlite import Layout, close_quietly, open_database, statements, write_transaction
from kernel_lib.errors import ConfigError, RetentionError
from kernel_lib.limits import SEQUENCE_NUMBER_MAX
from kernel_lib.retention.pricing import ARTIFACT_CLASSES, RetentionPolicy

SECONDS_PER_MONTH = 365.2425 * 86_400 / 12

HOLD_PURPOSES = ("replay", "audit", "compliance")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS trajectories (
    trajectory_id TEXT PRIMARY KEY,
    tenant        TEXT NOT NULL,
    policy        TEXT NOT NULL,
    ended_unix_s  REAL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS refs (
    digest         TEXT NOT NULL,
    trajectory_id  TEXT NOT NULL,
    holder         TEXT NOT NULL,
    artifact_class TEXT NOT NULL,
    added_unix_s   REAL NOT NULL,
    PRIMARY KEY (digest, trajectory_id, holder)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS refs_by_trajectory ON refs (trajectory_id, holder);
CREATE TABLE IF NOT EXISTS holds (
    hold_id       TEXT PRIMARY KEY,
    trajectory_id TEXT NOT NULL,
    from_sequence INTEGER NOT NULL,
    to_sequence   INTEGER NOT NULL,
    purpose       TEXT NOT NULL,
    until_unix_s  REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS known (
    digest TEXT PRIMARY KEY
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS collecting (
    digest    TEXT PRIMARY KEY,
    owner_pid INTEGER NOT NULL
) WITHOUT ROWID
"""

_LAYOUT_VERSION = 1

#: Tables (and their columns) an index of this layout must have.
_LAYOUT_TABLES = {
    "trajectories": {"trajectory_id", "tenant", "policy", "ended_unix_s"},
    "refs": {"digest", "trajectory_id", "holder", "artifact_class", "added_unix_s"},
    "holds": {"hold_id", "trajectory_id", "from_sequence", "to_sequence", "purpose", "until_unix_s"},
    "known": {"digest"},
    "collecting": {"digest", "owner_pid"},
}

#: The optional compaction-plan table (module docstring): created on first use, so an index file
#: written before it existed keeps opening under the same layout version.
_COMPACTIONS_SCHEMA = """
CREATE TABLE IF NOT EXISTS compactions (
    trajectory_id       TEXT PRIMARY KEY,
    through_sequence    INTEGER NOT NULL,
    checkpoint_event_id TEXT NOT NULL,
    holders             TEXT NOT NULL,
    started_unix_s      REAL NOT NULL
) WITHOUT ROWID
"""

#: The layout checked at open (:mod:`kernel_lib._support.sqlite`): ``user_version`` and columns.
_LAYOUT = Layout(kind="reference index", label="reference index", version=_LAYOUT_VERSION,
                 tables={t: frozenset(c) for t, c in _LAYOUT_TABLES.items()}, schema=statements(_SCHEMA))

@dataclass(frozen=True)
class Hold:
    """A declared promise that needs log positions ``from_sequence..to_sequence`` of one
    trajectory (and the payloads they reference) until ``until_unix_s``: a replay window, an
    audit, a compliance obligation (§11.8.3). Compaction refuses to retire a held position."""

    hold_id: str
    trajectory_id: str
    from_sequence: int
    to_sequence: int
    purpose: str
    until_unix_s: float

    def active(self, now_unix_s: float) -> bool:
        return now_unix_s < self.until_unix_s

    def covers(self, through: int) -> bool:
        """True if retiring positions ``1..through`` would remove a held position."""
        return self.from_sequence <= through


@dataclass(frozen=True)
class PendingCompaction:
    """A log compaction recorded by :meth:`ReferenceIndex.begin_compaction` and not yet finished:
    it retires ``1..through_sequence`` behind ``checkpoint_event_id`` and then releases the
    references of ``holders``. ``started_unix_s``: when it was recorded (Unix s)."""

    trajectory_id: str
    through_sequence: int
    checkpoint_event_id: str
    holders: tuple[str, ...]
    started_unix_s: float


@dataclass(frozen=True)
class Reference:
    """One row of the ledger: ``trajectory_id``'s ``holder`` needs ``digest`` as ``artifact_class``."""

    digest: str
    trajectory_id: str
    holder: str
    artifact_class: str
    added_unix_s: float


def _text(name: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{name} must be a non-empty string, got {value!r}")
    return value


def policy_to_json(policy: RetentionPolicy) -> str:
    return json.dumps({"name": policy.name, "lifetimes_months": dict(policy.lifetimes_months)}, sort_keys=True)


def policy_from_json(text: str) -> RetentionPolicy:
    data = json.loads(text)
    return RetentionPolicy(data["name"], data["lifetimes_months"])


class ReferenceIndex:
    """The reference ledger (module docstring). Thread-safe; several processes may share the file
    (every write is one ``BEGIN IMMEDIATE`` transaction).

    Args:
        path: the SQLite file (created if missing). A file of another layout is refused.
        busy_timeout_s: how long a write waits for another connection's lock (seconds).

    Raises:
        RetentionError: the file is not a reference index of this layout (a directory, not an
            SQLite file, another application's database, another layout version: nothing in it is
            changed), or cannot be opened (locked past the timeout: ``retryable``).
        ConfigError: a bad ``busy_timeout_s``.

    Every write method may raise :class:`~kernel_lib.errors.StoreBusyError` (retryable: nothing
    of the call was applied) when another connection holds the write lock past the timeout.
    """

    def __init__(self, path: str | os.PathLike, *, busy_timeout_s: float = 5.0):
        self.path = Path(path)
        self._lock = threading.RLock()
        # the layout is checked before any write (a foreign file stays untouched) and created under
        # the write lock (another opener may win the race); WAL, synchronous=FULL
        self._db = open_database(self.path, _LAYOUT, error=RetentionError, busy_error=RetentionError,
                                 busy_timeout_s=busy_timeout_s, journal_mode="WAL", synchronous="FULL")

    # --- plumbing -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction under the lock. Raises StoreBusyError (retryable,
        nothing applied) when another connection holds the write lock past the busy timeout."""
        with self._lock, write_transaction(self._db, f"reference index {self.path}") as db:
            yield db

    def close(self) -> None:
        with self._lock:
            close_quietly(self._db)

    def __enter__(self) -> "ReferenceIndex":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- trajectories ----------------------------------------------------------------------------
    def register(self, trajectory_id: str, *, tenant: str, policy: RetentionPolicy) -> None:
        """Declare a trajectory, the tenant that may read its payloads, and its retention policy.
        Registering again with the same tenant replaces the policy; another tenant is refused.

        Raises:
            ConfigError: bad arguments. RetentionError: the trajectory belongs to another tenant.
        """
        _text("trajectory_id", trajectory_id)
        _text("tenant", tenant)
        if not isinstance(policy, RetentionPolicy):
            raise ConfigError("policy must be a kernel_lib.retention.pricing.RetentionPolicy, "
                              f"got {type(policy).__name__}")
        with self._tx() as db:
            row = db.execute("SELECT tenant FROM trajectories WHERE trajectory_id=?", (trajectory_id,)).fetchone()
            if row and row[0] != tenant:
                raise RetentionError(f"trajectory {trajectory_id!r} belongs to tenant {row[0]!r}, not {tenant!r}")
            db.execute("INSERT INTO trajectories VALUES (?,?,?,NULL) ON CONFLICT(trajectory_id) DO UPDATE SET "
                       "policy=excluded.policy", (trajectory_id, tenant, policy_to_json(policy)))

    def _trajectory(self, db: sqlite3.Connection, trajectory_id: str) -> tuple[str, RetentionPolicy, float | None]:
        row = db.execute("SELECT tenant, policy, ended_unix_s FROM trajectories WHERE trajectory_id=?",
                         (trajectory_id,)).fetchone()
        if row is None:
            raise RetentionError(f"trajectory {trajectory_id!r} is not registered with the reference index "
                                 f"{self.path}: call register() first")
        return row[0], policy_from_json(row[1]), row[2]

    def tenant_of(self, trajectory_id: str) -> str:
        with self._lock:
            return self._trajectory(self._db, trajectory_id)[0]

    def policy_of(self, trajectory_id: str) -> RetentionPolicy:
        with self._lock:
            return self._trajectory(self._db, trajectory_id)[1]

    def end(self, trajectory_id: str, now_unix_s: float) -> None:
        """Mark the trajectory ended (terminal and its operations settled): retention lifetimes
        start counting. Ending twice keeps the first time."""
        now = check_unix_s("now_unix_s", now_unix_s)
        with self._tx() as db:
            self._trajectory(db, trajectory_id)
            db.execute("UPDATE trajectories SET ended_unix_s=coalesce(ended_unix_s, ?) WHERE trajectory_id=?",
                       (now, trajectory_id))

    def ended_at(self, trajectory_id: str) -> float | None:
        with self._lock:
            return self._trajectory(self._db, trajectory_id)[2]

    # --- references -------------------------------------------------------------------------------
    def add(self, digest: str, *, trajectory_id: str, holder: str, artifact_class: str,
            now_unix_s: float | None = None, wait_s: float = 5.0) -> None:
        """Record that ``holder`` of ``trajectory_id`` needs ``digest``. Call this BEFORE writing
        the bytes (module docstring). If a collection of ``digest`` is in progress, waits up to
        ``wait_s`` for it to finish.

        Raises:
            ConfigError: bad arguments or an unknown artifact class. RetentionError: the
                trajectory is not registered, or a collection of ``digest`` did not finish in time.
        """
        if not is_digest(digest):
            raise ConfigError(f"digest must be a SHA-256 hex digest (64 lowercase hex characters), got {digest!r}")
        _text("holder", holder)
        if (isinstance(wait_s, bool) or not isinstance(wait_s, (int, float)) or not math.isfinite(wait_s)
                or wait_s < 0):
            raise ConfigError(f"wait_s must be a finite number of seconds >= 0, got {wait_s!r}")
        if artifact_class not in ARTIFACT_CLASSES:
            raise ConfigError(f"artifact_class must be one of {', '.join(ARTIFACT_CLASSES)}, got {artifact_class!r}")
        now = time.time() if now_unix_s is None else check_unix_s("now_unix_s", now_unix_s)
        deadline = time.monotonic() + wait_s
        while True:
            with self._tx() as db:
                self._trajectory(db, trajectory_id)
                if db.execute("SELECT 1 FROM collecting WHERE digest=?", (digest,)).fetchone() is None:
                    db.execute("INSERT OR IGNORE INTO refs VALUES (?,?,?,?,?)",
                               (digest, trajectory_id, holder, artifact_class, now))
                    db.execute("INSERT OR IGNORE INTO known VALUES (?)", (digest,))
                    return
            if time.monotonic() > deadline:
                raise RetentionError(f"payload {digest[:16]}… is being garbage-collected and the collection did not "
                                     f"finish within {wait_s} s; retry")
            time.sleep(0.01)

    def references(self, digest: str | None = None, *, trajectory_id: str | None = None) -> list[Reference]:
        """References, optionally only of one digest and/or one trajectory."""
        q, args = "SELECT digest, trajectory_id, holder, artifact_class, added_unix_s FROM refs WHERE 1=1", []
        if digest is not None:
            q, args = q + " AND digest=?", args + [digest]
        if trajectory_id is not None:
            q, args = q + " AND trajectory_id=?", args + [trajectory_id]
        with self._lock:
            return [Reference(*r) for r in self._db.execute(q + " ORDER BY digest, trajectory_id, holder", args)]

    def holders(self, trajectory_id: str) -> set[str]:
        with self._lock:
            return {r[0] for r in self._db.execute("SELECT DISTINCT holder FROM refs WHERE trajectory_id=?",
                                                   (trajectory_id,))}

    def release(self, trajectory_id: str, holders: "set[str] | list[str]") -> int:
        """Drop every reference of ``trajectory_id`` held by one of ``holders`` (e.g. the events a
        compaction retired). Returns the number of rows dropped. The bytes stay until
        :meth:`collectable` says no one needs them."""
        holders = list(holders)
        n = 0
        with self._tx() as db:
            for i in range(0, len(holders), 500):
                chunk = holders[i:i + 500]
                marks = ",".join("?" * len(chunk))
                n += db.execute(f"DELETE FROM refs WHERE trajectory_id=? AND holder IN ({marks})",
                                [trajectory_id, *chunk]).rowcount
        return n

    def readable_by(self, digest: str, tenant: str) -> bool:
        """True if some trajectory of ``tenant`` references ``digest`` (§11.8.2: a digest names
        bytes; only a reference from one of the tenant's own runs lets it read them)."""
        with self._lock:
            return self._db.execute(
                "SELECT 1 FROM refs r JOIN trajectories t USING (trajectory_id) WHERE r.digest=? AND t.tenant=? "
                "LIMIT 1", (digest, tenant)).fetchone() is not None

    # --- compaction plans (crash-safe release, kernel_lib.retention.compaction) ------------------
    def begin_compaction(self, trajectory_id: str, *, through_sequence: int, checkpoint_event_id: str,
                         holders: "set[str] | list[str]", now_unix_s: float | None = None) -> PendingCompaction:
        """Durably record, BEFORE the log prefix is retired, which holders' references the
        compaction of ``trajectory_id`` through ``through_sequence`` will release. A crash after
        the retirement leaves this row, and the next compaction finishes the release
        (:meth:`finish_compaction`). Replaces an older unfinished row of the trajectory.

        Raises ConfigError for bad arguments, RetentionError for an unregistered trajectory."""
        _text("checkpoint_event_id", checkpoint_event_id)
        if type(through_sequence) is not int or not 1 <= through_sequence <= SEQUENCE_NUMBER_MAX:
            raise ConfigError(f"through_sequence must be an int from 1 to 2**63 - 1, got {through_sequence!r}")
        held = tuple(sorted({_text("holder", h) for h in holders}))
        now = time.time() if now_unix_s is None else check_unix_s("now_unix_s", now_unix_s)
        with self._tx() as db:
            self._trajectory(db, trajectory_id)
            db.execute(_COMPACTIONS_SCHEMA)
            db.execute("INSERT OR REPLACE INTO compactions VALUES (?,?,?,?,?)",
                       (trajectory_id, through_sequence, checkpoint_event_id, json.dumps(list(held)), now))
        return PendingCompaction(trajectory_id, through_sequence, checkpoint_event_id, held, now)

    def pending_compaction(self, trajectory_id: str) -> PendingCompaction | None:
        """The unfinished compaction of ``trajectory_id``, or None."""
        with self._lock:
            if self._db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='compactions'").fetchone() \
                    is None:
                return None
            row = self._db.execute("SELECT through_sequence, checkpoint_event_id, holders, started_unix_s FROM "
                                   "compactions WHERE trajectory_id=?", (trajectory_id,)).fetchone()
        if row is None:
            return None
        return PendingCompaction(trajectory_id, row[0], row[1], tuple(json.loads(row[2])), row[3])

    def finish_compaction(self, trajectory_id: str) -> int:
        """In one transaction: release every reference of the pending compaction's holders and
        clear its row. Idempotent: with nothing pending, changes nothing and returns 0. Returns
        the number of reference rows dropped."""
        n = 0
        with self._tx() as db:
            if db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='compactions'").fetchone() is None:
                return 0
            row = db.execute("SELECT holders FROM compactions WHERE trajectory_id=?", (trajectory_id,)).fetchone()
            if row is None:
                return 0
            holders = json.loads(row[0])
            for i in range(0, len(holders), 500):
                chunk = holders[i:i + 500]
                marks = ",".join("?" * len(chunk))
                n += db.execute(f"DELETE FROM refs WHERE trajectory_id=? AND holder IN ({marks})",
                                [trajectory_id, *chunk]).rowcount
            db.execute("DELETE FROM compactions WHERE trajectory_id=?", (trajectory_id,))
        return n

    def abandon_compaction(self, trajectory_id: str) -> bool:
        """Clear a pending compaction whose prefix was never retired (nothing was released yet).
        Returns False if none was pending."""
        if self.pending_compaction(trajectory_id) is None:
            return False
        with self._tx() as db:
            return db.execute("DELETE FROM compactions WHERE trajectory_id=?", (trajectory_id,)).rowcount > 0

    # --- expiry ------------------------------------------------------------------------------------
    def expiry_of(self, ref: Reference) -> float | None:
        """When ``ref`` expires (Unix seconds), or None while its trajectory is live."""
        with self._lock:
            _, policy, ended = self._trajectory(self._db, ref.trajectory_id)
        if ended is None:
            return None
        months = policy.lifetime(ref.artifact_class) or 0.0
        return ended + months * SECONDS_PER_MONTH

    def expire(self, now_unix_s: float) -> list[Reference]:
        """Drop every reference whose lifetime (from its trajectory's end, per its policy) is over
        at ``now_unix_s``, unless a hold that is still active needs its trajectory. Returns the
        dropped references."""
        now = check_unix_s("now_unix_s", now_unix_s)
        dropped: list[Reference] = []
        with self._tx() as db:
            held = {r[0] for r in db.execute("SELECT DISTINCT trajectory_id FROM holds WHERE until_unix_s>?", (now,))}
            ended = db.execute("SELECT trajectory_id, policy, ended_unix_s FROM trajectories "
                               "WHERE ended_unix_s IS NOT NULL").fetchall()
            for tid, ptext, t_end in ended:
                if tid in held:
                    continue
                policy = policy_from_json(ptext)
                for row in db.execute("SELECT digest, trajectory_id, holder, artifact_class, added_unix_s FROM refs "
                                      "WHERE trajectory_id=?", (tid,)).fetchall():
                    ref = Reference(*row)
                    if now >= t_end + (policy.lifetime(ref.artifact_class) or 0.0) * SECONDS_PER_MONTH:
                        dropped.append(ref)
            for ref in dropped:
                db.execute("DELETE FROM refs WHERE digest=? AND trajectory_id=? AND holder=?",
                           (ref.digest, ref.trajectory_id, ref.holder))
        return dropped

    # --- holds ---------------------------------------------------------------------------------------
    def declare_hold(self, hold_id: str, *, trajectory_id: str, from_sequence: int, to_sequence: int,
                     purpose: str, until_unix_s: float) -> Hold:
        """Declare a replay / audit / compliance promise over positions ``from..to``.

        Raises:
            ConfigError: bad arguments (``purpose`` one of replay, audit, compliance; 1 <= from <= to).
            RetentionError: ``hold_id`` already declared with other terms, or unknown trajectory.
        """
        _text("hold_id", hold_id)
        if purpose not in HOLD_PURPOSES:
            raise ConfigError(f"purpose must be one of {', '.join(HOLD_PURPOSES)}, got {purpose!r}")
        for name, v in (("from_sequence", from_sequence), ("to_sequence", to_sequence)):
            if type(v) is not int or not 1 <= v <= SEQUENCE_NUMBER_MAX:
                raise ConfigError(f"{name} must be an int from 1 to 2**63 - 1, got {v!r}")
        if to_sequence < from_sequence:
            raise ConfigError(f"to_sequence ({to_sequence}) is before from_sequence ({from_sequence})")
        hold = Hold(hold_id, trajectory_id, from_sequence, to_sequence, purpose,
                    check_unix_s("until_unix_s", until_unix_s))
        with self._tx() as db:
            self._trajectory(db, trajectory_id)
            row = db.execute("SELECT trajectory_id, from_sequence, to_sequence, purpose, until_unix_s FROM holds "
                             "WHERE hold_id=?", (hold_id,)).fetchone()
            if row is not None:
                if tuple(row) != (trajectory_id, from_sequence, to_sequence, purpose, hold.until_unix_s):
                    raise RetentionError(f"hold {hold_id!r} is already declared with other terms {tuple(row)}")
                return hold
            db.execute("INSERT INTO holds VALUES (?,?,?,?,?,?)", (hold_id, trajectory_id, from_sequence, to_sequence,
                                                                 purpose, hold.until_unix_s))
        return hold

    def holds(self, trajectory_id: str | None = None) -> list[Hold]:
        q, args = "SELECT hold_id, trajectory_id, from_sequence, to_sequence, purpose, until_unix_s FROM holds", ()
        if trajectory_id is not None:
            q, args = q + " WHERE trajectory_id=?", (trajectory_id,)
        with self._lock:
            return [Hold(*r) for r in self._db.execute(q + " ORDER BY hold_id", args)]

    def lift_hold(self, hold_id: str) -> bool:
        """Release a hold early (its promise was withdrawn). Returns False if there was none."""
        with self._tx() as db:
            return db.execute("DELETE FROM holds WHERE hold_id=?", (hold_id,)).rowcount > 0

    # --- collection ------------------------------------------------------------------------------------
    def begin_collect(self, digest: str) -> bool:
        """Atomically: if no reference names ``digest``, mark it as being collected and return
        True (its bytes may now be deleted); else False. Call :meth:`end_collect` afterwards."""
        with self._tx() as db:
            if db.execute("SELECT 1 FROM refs WHERE digest=? LIMIT 1", (digest,)).fetchone():
                return False
            if db.execute("SELECT 1 FROM collecting WHERE digest=?", (digest,)).fetchone():
                return False            # another collector holds it
            db.execute("INSERT INTO collecting VALUES (?, ?)", (digest, os.getpid()))
            return True

    def end_collect(self, digest: str) -> None:
        """Clear the collection mark of ``digest`` (its bytes are gone: it is no longer known)."""
        with self._tx() as db:
            db.execute("DELETE FROM collecting WHERE digest=?", (digest,))
            db.execute("DELETE FROM known WHERE digest=?", (digest,))

    def known(self) -> set[str]:
        """Every digest a reference ever named and that no collection has removed since."""
        with self._lock:
            return {r[0] for r in self._db.execute("SELECT digest FROM known")}

    def referenced(self) -> set[str]:
        with self._lock:
            return {r[0] for r in self._db.execute("SELECT DISTINCT digest FROM refs")}

    def unfinished_collections(self) -> list[str]:
        """Digests whose collection was interrupted: marked by a collector process that no longer
        exists (a crash between mark and finish). A live collector's marks are left alone."""
        with self._lock:
            rows = self._db.execute("SELECT digest, owner_pid FROM collecting ORDER BY digest").fetchall()
        return [d for d, pid in rows if pid != os.getpid() and not pid_alive(pid)]
