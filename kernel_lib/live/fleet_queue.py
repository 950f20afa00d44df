"""The worker fleet's durable queue: one SQLite file shared by the controller and every worker
process of a host (Failure Recovery, "Fault-Tolerant System Synthesis": many trajectories, few
workers; Chapter 11 §11.5.1: a lost worker's trajectory is taken over, never run twice at once).

Tables (WAL, ``synchronous=FULL``: a claim or a result is on disk before it is acted on):

* ``trajectories``: one row per submitted trajectory: its program and parameters, priority and
  submission order, ``state`` (``queued`` -> ``claimed`` -> ``done`` | ``failed``), the worker and
  ``owner_epoch`` that hold it, ``lease_expires_at_s`` (the holder's ownership lease, copied here
  at every renewal), how many times it was claimed, its outcome and result (JSON); ``mode``
  (``forward``, or ``unwind`` once it passed the forward give-up bound: its next claims run
  compensators only) and ``unwind_claims`` (its claims in that mode).
* ``attempts``: one row per claim: the worker and pid, ``owner_epoch``, and the times of the
  claim, the grant, the end of the log open + fold, the first event appended (forward progress
  resumed), the status lookups made before it (probes), the end; ``fenced`` with the refusal
  when a boundary rejected a stale owner; ``notes``, what the program recorded as it went (JSON;
  an unwind notes its ``residue``); ``mode``, the row's mode when it was claimed.
* ``workers``: one row per worker process (pid, state ``idle``/``busy``/``exited``/``killed``,
  the trajectory it holds).
* ``kills``: every SIGKILL, sent by the controller or by a worker to itself at a drawn crash
  position (pid, trajectory, the lease expiry at that moment, who sent it).

A claim is one ``BEGIN IMMEDIATE`` transaction (the write lock is taken before the row is chosen,
so two workers never claim the same row): the next claimable row is a ``claimed`` row whose lease
expired (its worker is gone or stalled: taken over first, since it holds resources and someone
waits for it), else the ``queued`` row with the highest priority, oldest first (FIFO). A claim
copies a provisional expiry (now + the lease ttl) so that a worker dying before its grant does
not strand the row. Every later write by a worker names the ``worker_id`` and ``owner_epoch``
it holds and changes nothing when they are no longer the row's (the queue fences a stale owner
too). All times are wall-clock seconds (``time.time()``), comparable across the host's processes.

Layout version 2 (``PRAGMA user_version``; version 1 had no ``mode``/``unwind_claims``): a version-1
file is upgraded in place when opened (its rows are forward rows with no unwind claim); a file of
another version is refused with FleetError and left untouched.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterable

from kernel_lib._support.sqlite import Layout, close_quietly, open_database, statements, write_transaction
from kernel_lib.errors import ConfigError, FleetError

__all__ = ["FleetQueue", "Claim", "QUEUE_FILE", "TERMINAL"]

QUEUE_FILE = "queue.sqlite"
#: the states a trajectory ends in
TERMINAL = ("done", "failed")

_SCHEMA = statements("""
CREATE TABLE IF NOT EXISTS trajectories (
    trajectory_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0,
    program TEXT NOT NULL,
    params TEXT NOT NULL,
    durability TEXT NOT NULL,
    pinned_worker TEXT,
    state TEXT NOT NULL,
    worker_id TEXT,
    pid INTEGER,
    owner_epoch INTEGER,
    lease_expires_at_s REAL,
    claims INTEGER NOT NULL DEFAULT 0,
    submitted_at_s REAL NOT NULL,
    finished_at_s REAL,
    outcome TEXT,
    result TEXT,
    mode TEXT NOT NULL DEFAULT 'forward',
    unwind_claims INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS trajectories_by_state ON trajectories (state, priority DESC, seq);
CREATE TABLE IF NOT EXISTS attempts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    trajectory_id TEXT NOT NULL,
    worker_id TEXT NOT NULL,
    pid INTEGER NOT NULL,
    owner_epoch INTEGER,
    claimed_at_s REAL NOT NULL,
    granted_at_s REAL,
    lease_wait_s REAL,
    folded_at_s REAL,
    first_append_at_s REAL,
    probes INTEGER NOT NULL DEFAULT 0,
    probes_s REAL NOT NULL DEFAULT 0,
    fast_fails INTEGER NOT NULL DEFAULT 0,
    events_appended INTEGER NOT NULL DEFAULT 0,
    finished_at_s REAL,
    outcome TEXT,
    fenced INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    notes TEXT,
    mode TEXT NOT NULL DEFAULT 'forward'
);
CREATE INDEX IF NOT EXISTS attempts_by_trajectory ON attempts (trajectory_id, id);
CREATE TABLE IF NOT EXISTS workers (
    worker_id TEXT PRIMARY KEY,
    pid INTEGER NOT NULL,
    started_at_s REAL NOT NULL,
    state TEXT NOT NULL,
    trajectory_id TEXT,
    updated_at_s REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS kills (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    pid INTEGER NOT NULL,
    worker_id TEXT,
    trajectory_id TEXT,
    owner_epoch INTEGER,
    attempt_id INTEGER,
    killed_at_s REAL NOT NULL,
    lease_expires_at_s REAL,
    signal TEXT NOT NULL,
    sent_by TEXT NOT NULL,
    detail TEXT
)
""")

_V1_TABLES = {
    "trajectories": frozenset({"trajectory_id", "seq", "priority", "program", "params", "durability", "pinned_worker",
                               "state", "worker_id", "pid", "owner_epoch", "lease_expires_at_s", "claims",
                               "submitted_at_s", "finished_at_s", "outcome", "result"}),
    "attempts": frozenset({"id", "trajectory_id", "worker_id", "pid", "owner_epoch", "claimed_at_s", "granted_at_s",
                           "lease_wait_s", "folded_at_s", "first_append_at_s", "probes", "probes_s", "fast_fails",
                           "events_appended", "finished_at_s", "outcome", "fenced", "error", "notes"}),
    "workers": frozenset({"worker_id", "pid", "started_at_s", "state", "trajectory_id", "updated_at_s"}),
    "kills": frozenset({"id", "pid", "worker_id", "trajectory_id", "owner_epoch", "attempt_id", "killed_at_s",
                        "lease_expires_at_s", "signal", "sent_by", "detail"})}
_LAYOUT = Layout(
    kind="kernel_lib fleet queue", label="fleet queue", version=2,
    tables={**_V1_TABLES, "trajectories": _V1_TABLES["trajectories"] | {"mode", "unwind_claims"},
            "attempts": _V1_TABLES["attempts"] | {"mode"}},
    schema=_SCHEMA, application_id=0x4B4C4651)   # "KLFQ"
#: version 1 (before the compensation-only claims): opened and upgraded in place (:func:`_upgrade_v1`)
_LAYOUT_V1 = Layout(kind="kernel_lib fleet queue", label="fleet queue", version=1, tables=_V1_TABLES,
                    schema=(), application_id=0x4B4C4651)
#: what version 2 adds to a version-1 file (every old row is a forward claim with no unwind claim)
_V2_COLUMNS = ("ALTER TABLE trajectories ADD COLUMN mode TEXT NOT NULL DEFAULT 'forward'",
               "ALTER TABLE trajectories ADD COLUMN unwind_claims INTEGER NOT NULL DEFAULT 0",
               "ALTER TABLE attempts ADD COLUMN mode TEXT NOT NULL DEFAULT 'forward'")
#: a row's claim modes: run the program forward, or only compensate what its log shows done
MODES = ("forward", "unwind")


def _upgrade_v1(path: str, busy_timeout_s: float) -> None:
    """Add version 2's columns to a version-1 queue file in one ``BEGIN IMMEDIATE`` transaction
    (checked again under the write lock: another process may have upgraded it first)."""
    db = open_database(path, _LAYOUT_V1, error=FleetError, busy_error=FleetError, busy_timeout_s=busy_timeout_s,
                       synchronous="FULL", create=False)
    try:
        with write_transaction(db, f"fleet queue {path}: upgrade to layout version 2", busy_error=FleetError):
            if db.execute("PRAGMA user_version").fetchone()[0] == 1:
                for stmt in _V2_COLUMNS:
                    db.execute(stmt)
                db.execute("PRAGMA user_version=2")
    finally:
        close_quietly(db)


#: the columns of an attempt row, in table order
_ATTEMPT_FIELDS = ("id", "trajectory_id", "worker_id", "pid", "owner_epoch", "claimed_at_s", "granted_at_s",
                   "lease_wait_s", "folded_at_s", "first_append_at_s", "probes", "probes_s", "fast_fails",
                   "events_appended", "finished_at_s", "outcome", "fenced", "error", "notes", "mode")
_ATTEMPT_SETTABLE = frozenset(_ATTEMPT_FIELDS) - {"id", "trajectory_id", "worker_id", "pid", "claimed_at_s", "mode"}
_ROW_FIELDS = ("trajectory_id", "seq", "priority", "program", "params", "durability", "pinned_worker", "state",
               "worker_id", "pid", "owner_epoch", "lease_expires_at_s", "claims", "submitted_at_s", "finished_at_s",
               "outcome", "result", "mode", "unwind_claims")


@dataclass(frozen=True)
class Claim:
    """A trajectory a worker claimed: what to run and under which attempt row.

    Fields: ``trajectory_id``, ``program`` (a registry name), ``params`` (dict), ``durability``
    (``on``/``off``), ``claims`` (this claim's number, 1 for the first), ``attempt_id`` (its row
    in ``attempts``), ``takeover`` (True when the row was held by a worker whose lease expired),
    ``previous_worker`` (that worker's id, or None), ``mode`` (``forward``: run the program;
    ``unwind``: the row passed the forward give-up bound, compensate only), ``unwind_claims``
    (this row's claims in unwind mode, this one included)."""

    trajectory_id: str
    program: str
    params: dict[str, Any]
    durability: str
    claims: int
    attempt_id: int
    takeover: bool
    previous_worker: str | None
    mode: str = "forward"
    unwind_claims: int = 0


def _now() -> float:
    return time.time()


def _noted_residue(db: sqlite3.Connection, trajectory_id: str) -> tuple[Any, str]:
    """The residue the latest unwind attempt of ``trajectory_id`` noted (``notes["residue"]``),
    and where it comes from; ``(None, why)`` when no unwind attempt got as far as its log."""
    for aid, notes in db.execute("SELECT id, notes FROM attempts WHERE trajectory_id = ? AND mode = 'unwind' "
                                 "AND notes IS NOT NULL ORDER BY id DESC", (trajectory_id,)):
        with contextlib.suppress(ValueError):
            doc = json.loads(notes)
            if isinstance(doc, dict) and "residue" in doc:
                return doc["residue"], (f"the log as folded by unwind attempt {aid}, less the compensations it "
                                        "recorded before it ended")
    return None, "unknown: no unwind attempt read the trajectory's log"


class FleetQueue:
    """The queue file (module docstring). One object per process (thread-safe behind a lock).

    Args:
        path: the SQLite file (created with its tables when missing).
        busy_timeout_s: how long a transaction waits for another process's write lock (s).

    Raises:
        FleetError: the file cannot be opened or is another kind of database (left untouched);
            ``retryable`` when another process held its lock past ``busy_timeout_s`` (a version-1
            file is then left at version 1: opening it again upgrades it).
    """

    def __init__(self, path: str | os.PathLike, *, busy_timeout_s: float = 10.0):
        self.path = os.fspath(path)

        def opened() -> sqlite3.Connection:
            return open_database(self.path, _LAYOUT, error=FleetError, busy_error=FleetError,
                                 busy_timeout_s=busy_timeout_s, synchronous="FULL")

        try:
            db = opened()
        except FleetError as refused:
            if getattr(refused, "retryable", False):
                raise
            try:   # a version-1 queue file (before unwind claims): upgraded in place, then opened
                _upgrade_v1(self.path, busy_timeout_s)
            except FleetError as upgrade:
                if getattr(upgrade, "retryable", False):
                    raise   # a version-1 file whose write lock another process holds: busy, not a wrong layout
                # not a version-1 file (or another process upgraded it first: the open below says)
            try:
                db = opened()
            except FleetError as again:
                if getattr(again, "retryable", False):
                    raise
                raise refused from None
        self._db: sqlite3.Connection | None = db
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            close_quietly(self._db)
            self._db = None

    def __enter__(self) -> "FleetQueue":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise FleetError(f"fleet queue {self.path} is closed")
        return self._db

    def _write(self, what: str):
        return write_transaction(self._conn(), f"fleet queue {self.path}: {what}", busy_error=FleetError)

    # --- the controller's side ---------------------------------------------------------------------------
    def submit(self, items: Iterable[dict[str, Any]]) -> list[str]:
        """Enqueue trajectories in one transaction; each item ``{trajectory_id, program, params,
        durability, priority=0, pinned_worker=None}``. Returns the ids in submission order.

        Raises: ConfigError (a repeated or already queued id, a bad priority) with nothing enqueued."""
        rows = list(items)
        ids = [r["trajectory_id"] for r in rows]
        if len(set(ids)) != len(ids):
            raise ConfigError("a trajectory id is submitted twice in one batch")
        with self._lock, self._write("submit") as db:
            seq = db.execute("SELECT coalesce(max(seq), 0) FROM trajectories").fetchone()[0]
            taken = [t for t in ids if db.execute("SELECT 1 FROM trajectories WHERE trajectory_id = ?",
                                                  (t,)).fetchone()]
            if taken:
                raise ConfigError(f"trajectory ids already in the queue: {taken[:5]}")
            now = _now()
            for r in rows:
                seq += 1
                pr = r.get("priority", 0)
                if isinstance(pr, bool) or not isinstance(pr, int):
                    raise ConfigError(f"priority must be an integer, got {pr!r}")
                db.execute("INSERT INTO trajectories (trajectory_id, seq, priority, program, params, durability, "
                           "pinned_worker, state, claims, submitted_at_s) VALUES (?, ?, ?, ?, ?, ?, ?, 'queued', 0, ?)",
                           (r["trajectory_id"], seq, pr, r["program"], json.dumps(r.get("params") or {}),
                            r["durability"], r.get("pinned_worker"), now))
        return ids

    def record_kill(self, pid: int, killed_at_s: float, *, lease_expires_at_s: float | None = None,
                    signal_name: str = "SIGKILL", sent_by: str = "controller",
                    detail: dict[str, Any] | None = None) -> dict[str, Any]:
        """Record a kill of worker ``pid`` and the attempt it was running (the unfinished attempt of
        that pid, if any). ``sent_by``: ``controller`` or ``self`` (a worker that kills itself at a
        drawn crash position records the kill first). Returns the kill row as a dict."""
        with self._lock, self._write("record kill") as db:
            w = db.execute("SELECT worker_id FROM workers WHERE pid = ? ORDER BY started_at_s DESC LIMIT 1",
                           (pid,)).fetchone()
            a = db.execute("SELECT id, trajectory_id, owner_epoch FROM attempts WHERE pid = ? AND finished_at_s IS "
                           "NULL ORDER BY id DESC LIMIT 1", (pid,)).fetchone()
            row = {"pid": pid, "worker_id": w[0] if w else None, "trajectory_id": a[1] if a else None,
                   "owner_epoch": a[2] if a else None, "attempt_id": a[0] if a else None, "killed_at_s": killed_at_s,
                   "lease_expires_at_s": lease_expires_at_s, "signal": signal_name, "sent_by": sent_by,
                   "detail": detail}
            db.execute("INSERT INTO kills (pid, worker_id, trajectory_id, owner_epoch, attempt_id, killed_at_s, "
                       "lease_expires_at_s, signal, sent_by, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       (pid, row["worker_id"], row["trajectory_id"], row["owner_epoch"], row["attempt_id"],
                        killed_at_s, lease_expires_at_s, signal_name, sent_by,
                        json.dumps(detail) if detail is not None else None))
            if w:
                db.execute("UPDATE workers SET state = 'killed', updated_at_s = ? WHERE worker_id = ?",
                           (killed_at_s, w[0]))
        return row

    def in_flight(self, pid: int) -> dict[str, Any] | None:
        """The unfinished attempt of worker ``pid`` (``{attempt_id, trajectory_id, owner_epoch}``), or None."""
        with self._lock:
            a = self._conn().execute("SELECT id, trajectory_id, owner_epoch FROM attempts WHERE pid = ? AND "
                                     "finished_at_s IS NULL ORDER BY id DESC LIMIT 1", (pid,)).fetchone()
        return None if a is None else {"attempt_id": a[0], "trajectory_id": a[1], "owner_epoch": a[2]}

    # --- the worker's side ---------------------------------------------------------------------------------
    def worker_state(self, worker_id: str, pid: int, state: str, trajectory_id: str | None = None) -> None:
        """Insert or update the worker's row (``idle``, ``busy``, ``exited``)."""
        now = _now()
        with self._lock, self._write("worker state") as db:
            db.execute("INSERT INTO workers (worker_id, pid, started_at_s, state, trajectory_id, updated_at_s) "
                       "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (worker_id) DO UPDATE SET state = excluded.state, "
                       "trajectory_id = excluded.trajectory_id, updated_at_s = excluded.updated_at_s",
                       (worker_id, pid, now, state, trajectory_id, now))

    def has_claimable(self, worker_id: str, now: float | None = None) -> bool:
        """A cheap read: is there a row this worker could claim now? (No write lock taken.)"""
        t = _now() if now is None else now
        with self._lock:
            row = self._conn().execute(
                "SELECT 1 FROM trajectories WHERE (state = 'queued' OR (state = 'claimed' AND lease_expires_at_s <= ?))"
                " AND (pinned_worker IS NULL OR pinned_worker = ?) LIMIT 1", (t, worker_id)).fetchone()
        return row is not None

    def claim(self, worker_id: str, pid: int, provisional_ttl_s: float, *, max_claims: int = 5,
              max_unwind_claims: int = 3, now: float | None = None) -> Claim | None:
        """Claim the next trajectory (module docstring) or None.

        Two bounds keep a poison trajectory (one that kills every worker that runs it) from
        killing the fleet, without leaking what its forward steps created (Failure Recovery,
        "Saga compensation stacks": giving up on forward progress is an unwind, not an exit):

        * a ``forward`` row already claimed ``max_claims`` times goes back to the queue in
          ``unwind`` mode (its holder's ownership is dropped; the next claim of it fences
          with a new owner epoch like any takeover and runs only compensators);
        * an ``unwind`` row already claimed ``max_unwind_claims`` times in that mode is
          ``failed`` with outcome ``GAVE_UP``; its result lists the residue the last unwind
          attempt noted (what its log showed done and not compensated), for an operator.

        Returns a :class:`Claim` (``mode`` says which run it is). Raises ConfigError on a bound
        below 1."""
        for name, bound in (("max_claims", max_claims), ("max_unwind_claims", max_unwind_claims)):
            if isinstance(bound, bool) or not isinstance(bound, int) or bound < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {bound!r}")
        t = _now() if now is None else now
        with self._lock, self._write("claim") as db:
            while True:
                row = db.execute(
                    "SELECT trajectory_id, program, params, durability, claims, state, worker_id, mode, unwind_claims "
                    "FROM trajectories WHERE (state = 'queued' OR (state = 'claimed' AND lease_expires_at_s <= ?)) "
                    "AND (pinned_worker IS NULL OR pinned_worker = ?) "
                    "ORDER BY (state = 'claimed') DESC, (mode = 'unwind') DESC, priority DESC, seq LIMIT 1",
                    (t, worker_id)).fetchone()
                if row is None:
                    return None
                tid, program, params, durability, claims, state, previous, mode, unwinds = row
                if mode == "forward" and claims >= max_claims:
                    db.execute("UPDATE trajectories SET mode = 'unwind', state = 'queued', worker_id = NULL, "
                               "pid = NULL, owner_epoch = NULL, lease_expires_at_s = NULL WHERE trajectory_id = ?",
                               (tid,))
                    continue
                if mode == "unwind" and unwinds >= max_unwind_claims:
                    residue, source = _noted_residue(db, tid)
                    db.execute("UPDATE trajectories SET state = 'failed', outcome = 'GAVE_UP', finished_at_s = ?, "
                               "result = ? WHERE trajectory_id = ?",
                               (t, json.dumps({"error": f"claimed {claims - unwinds} times forward and {unwinds} "
                                                        "times to unwind without finishing",
                                               "gave_up": "unwind", "forward_claims": claims - unwinds,
                                               "unwind_claims": unwinds, "residue": residue,
                                               "residue_source": source}, default=str), tid))
                    continue
                db.execute("UPDATE trajectories SET state = 'claimed', worker_id = ?, pid = ?, owner_epoch = NULL, "
                           "lease_expires_at_s = ?, claims = claims + 1, unwind_claims = unwind_claims + ? "
                           "WHERE trajectory_id = ?",
                           (worker_id, pid, t + provisional_ttl_s, int(mode == "unwind"), tid))
                cur = db.execute("INSERT INTO attempts (trajectory_id, worker_id, pid, claimed_at_s, mode) "
                                 "VALUES (?, ?, ?, ?, ?)", (tid, worker_id, pid, t, mode))
                return Claim(tid, program, json.loads(params), durability, claims + 1, int(cur.lastrowid),
                             state == "claimed", previous if state == "claimed" else None, mode,
                             unwinds + int(mode == "unwind"))

    def set_owner(self, trajectory_id: str, worker_id: str, owner_epoch: int, lease_expires_at_s: float) -> bool:
        """Record the grant on the row this worker claimed; False when the row is no longer its claim."""
        with self._lock, self._write("set owner") as db:
            cur = db.execute("UPDATE trajectories SET owner_epoch = ?, lease_expires_at_s = ? WHERE trajectory_id = ? "
                             "AND state = 'claimed' AND worker_id = ?",
                             (owner_epoch, lease_expires_at_s, trajectory_id, worker_id))
            return cur.rowcount == 1

    def renew(self, trajectory_id: str, worker_id: str, owner_epoch: int, lease_expires_at_s: float) -> bool:
        """Copy a renewed lease's expiry; False when this worker and epoch no longer hold the row."""
        with self._lock, self._write("renew") as db:
            cur = db.execute("UPDATE trajectories SET lease_expires_at_s = ? WHERE trajectory_id = ? AND "
                             "state = 'claimed' AND worker_id = ? AND owner_epoch = ?",
                             (lease_expires_at_s, trajectory_id, worker_id, owner_epoch))
            return cur.rowcount == 1

    def finish(self, trajectory_id: str, worker_id: str, owner_epoch: int, state: str, outcome: str,
               result: dict[str, Any], *, attempt_id: int | None = None, **attempt: Any) -> bool:
        """End the trajectory (``done``/``failed``) if this worker and epoch still hold it; False
        otherwise. With ``attempt_id``, the attempt row is closed in the same transaction (its
        ``outcome``, ``finished_at_s`` and the given columns; ``fenced`` when the row was not
        this worker's any more), so no kill can separate the result from its attempt's record."""
        if state not in TERMINAL:
            raise ConfigError(f"a trajectory ends done or failed, not {state!r}")
        bad = set(attempt) - _ATTEMPT_SETTABLE
        if bad:
            raise ConfigError(f"not attempt columns: {sorted(bad)}")
        with self._lock, self._write("finish") as db:
            now = _now()
            cur = db.execute("UPDATE trajectories SET state = ?, outcome = ?, result = ?, finished_at_s = ? WHERE "
                             "trajectory_id = ? AND state = 'claimed' AND worker_id = ? AND owner_epoch IS ?",
                             (state, outcome, json.dumps(result, default=str), now, trajectory_id, worker_id,
                              owner_epoch))
            ok = cur.rowcount == 1
            if attempt_id is not None:
                fields = {**attempt, "finished_at_s": now, "outcome": outcome if ok else "FENCED",
                          "fenced": int(not ok)}
                if not ok:
                    fields["error"] = "the queue refused the result: another worker holds the trajectory"
                cols = ", ".join(f"{k} = ?" for k in fields)
                db.execute(f"UPDATE attempts SET {cols} WHERE id = ?", (*fields.values(), attempt_id))
            return ok

    def fail_claim(self, trajectory_id: str, worker_id: str, outcome: str, result: dict[str, Any]) -> bool:
        """End a claim that cannot run at all (an unknown program, a log that cannot be opened) as
        ``failed``, if this worker still holds it."""
        with self._lock, self._write("fail claim") as db:
            cur = db.execute("UPDATE trajectories SET state = 'failed', outcome = ?, result = ?, finished_at_s = ? "
                             "WHERE trajectory_id = ? AND state = 'claimed' AND worker_id = ?",
                             (outcome, json.dumps(result, default=str), _now(), trajectory_id, worker_id))
            return cur.rowcount == 1

    def give_back(self, trajectory_id: str, worker_id: str) -> bool:
        """Return a claim to the queue (claimable at once) when this worker cannot run it."""
        with self._lock, self._write("give back") as db:
            cur = db.execute("UPDATE trajectories SET state = 'queued', worker_id = NULL, pid = NULL, "
                             "owner_epoch = NULL, lease_expires_at_s = NULL WHERE trajectory_id = ? AND "
                             "state = 'claimed' AND worker_id = ?", (trajectory_id, worker_id))
            return cur.rowcount == 1

    def update_attempt(self, attempt_id: int, **fields: Any) -> None:
        """Set columns of an attempt row (``granted_at_s``, ``owner_epoch``, ``folded_at_s``, ...)."""
        bad = set(fields) - _ATTEMPT_SETTABLE
        if bad:
            raise ConfigError(f"not attempt columns: {sorted(bad)}")
        if not fields:
            return
        cols = ", ".join(f"{k} = ?" for k in fields)
        with self._lock, self._write("attempt") as db:
            db.execute(f"UPDATE attempts SET {cols} WHERE id = ?", (*fields.values(), attempt_id))

    # --- reading ---------------------------------------------------------------------------------------
    def rows(self, trajectory_ids: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Every trajectory row (or those named), in submission order, params and result decoded."""
        with self._lock:
            rows = self._conn().execute(f"SELECT {', '.join(_ROW_FIELDS)} FROM trajectories ORDER BY seq").fetchall()
        want = None if trajectory_ids is None else set(trajectory_ids)
        out = []
        for r in rows:
            d = dict(zip(_ROW_FIELDS, r))
            if want is not None and d["trajectory_id"] not in want:
                continue
            d["params"] = json.loads(d["params"])
            d["result"] = json.loads(d["result"]) if d["result"] else None
            out.append(d)
        return out

    def attempts(self, trajectory_id: str | None = None) -> list[dict[str, Any]]:
        """Attempt rows (of one trajectory, or all), oldest first."""
        q = f"SELECT {', '.join(_ATTEMPT_FIELDS)} FROM attempts"
        args: tuple[Any, ...] = ()
        if trajectory_id is not None:
            q, args = q + " WHERE trajectory_id = ?", (trajectory_id,)
        with self._lock:
            rows = self._conn().execute(q + " ORDER BY id", args).fetchall()
        return [dict(zip(_ATTEMPT_FIELDS, r), fenced=bool(r[16]), notes=json.loads(r[18]) if r[18] else {})
                for r in rows]

    def kills(self) -> list[dict[str, Any]]:
        keys = ("id", "pid", "worker_id", "trajectory_id", "owner_epoch", "attempt_id", "killed_at_s",
                "lease_expires_at_s", "signal", "sent_by", "detail")
        with self._lock:
            rows = self._conn().execute(f"SELECT {', '.join(keys)} FROM kills ORDER BY id").fetchall()
        return [{**dict(zip(keys, r)), "detail": json.loads(r[10]) if r[10] else None} for r in rows]

    def workers(self) -> list[dict[str, Any]]:
        keys = ("worker_id", "pid", "started_at_s", "state", "trajectory_id", "updated_at_s")
        with self._lock:
            rows = self._conn().execute(f"SELECT {', '.join(keys)} FROM workers ORDER BY started_at_s").fetchall()
        return [dict(zip(keys, r)) for r in rows]

    def counts(self) -> dict[str, int]:
        """``{state: rows}`` over every trajectory."""
        with self._lock:
            rows = self._conn().execute("SELECT state, count(*) FROM trajectories GROUP BY state").fetchall()
        return {s: n for s, n in rows}
