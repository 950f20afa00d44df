"""Breaker state shared by every process of a host: :class:`SQLiteBreakerStore` (Failure Recovery,
"Tool Circuit Breakers": the breaker trips "across all running trajectories"; table 8).

One SQLite file (WAL) holds one row per dependency -- its :class:`~kernel_lib.recovery.gateway.breaker.BreakerState`
as JSON, a version counter, the breaker configuration it was written with -- and one row per
transition (time, from, to, reason, generation, cooldown, the window's rates). Every
:class:`~kernel_lib.recovery.gateway.runner.CircuitBreaker` opened on the file with the same
dependency id, in any thread or process, is the same breaker: a worker that restarts reads the
open state and fails fast instead of hammering the dependency, and the half-open canary is single
across processes because admitting it is a read-decide-write inside one ``BEGIN IMMEDIATE``
transaction (the write lock is taken before the state is read: a compare-and-set that no other
process can overtake).

What touches the file per call (the design choice; ``bench gateway`` prices it):

* admission while closed, and a refusal while open before the cooldown: no write. The breaker
  keeps the state it last read or wrote and asks the store whether it is still current
  (``PRAGMA data_version``, which changes when another connection commits, plus this
  connection's own write count): one cheap statement, no row read; the row is re-read only when
  something changed.
* an outcome: a write only when it changes the state. In a full count window that holds no
  failure and no slow call, a success changes nothing, so a healthy dependency's successes cost
  no write; a failure, a success that pushes a failure out of the window, and every outcome of a
  time window (its counts change) are one small transaction each.
* transitions (and the canary's lease): one transaction, with the transition rows.

``synchronous`` defaults to ``NORMAL``: a commit survives a process crash (what a restarted
worker needs) but a power loss may drop the last commits -- the breaker's window is advisory
state, re-learnt in a few calls. Pass ``"FULL"`` to keep transitions through a host crash.

The row also records the configuration it was written with; a breaker opened on the same
dependency with a different configuration is refused (:class:`~kernel_lib.errors.BreakerStoreError`):
two workers reading one window under different thresholds would each be wrong about the other.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from typing import Any

from kernel_lib._support.sqlite import Layout, close_quietly, open_database, statements, write_transaction
from kernel_lib.errors import BreakerStoreError, GatewayConfigError
from kernel_lib.recovery.gateway.breaker import BreakerConfig, BreakerState, Transition, initial_state
from kernel_lib.recovery.gateway.runner import Update

__all__ = ["SQLiteBreakerStore", "BREAKER_STORE_LAYOUT", "BREAKER_STORE_FILE"]

#: the store's file name inside a state directory (:meth:`SQLiteBreakerStore.in_dir`)
BREAKER_STORE_FILE = "breakers.sqlite"

_SCHEMA = statements("""
CREATE TABLE IF NOT EXISTS breaker (
    dependency_id TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    state TEXT NOT NULL,
    body TEXT NOT NULL,
    config TEXT NOT NULL,
    updated_at_s REAL
);
CREATE TABLE IF NOT EXISTS transition (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    dependency_id TEXT NOT NULL,
    at_s REAL NOT NULL,
    from_state TEXT NOT NULL,
    to_state TEXT NOT NULL,
    reason TEXT NOT NULL,
    generation INTEGER NOT NULL,
    cooldown_s REAL NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS transition_by_dependency ON transition (dependency_id, id)
""")

#: the file's layout (version 1; application_id "KLBR")
BREAKER_STORE_LAYOUT = Layout(
    kind="kernel_lib breaker store", label="breaker store", version=1,
    tables={"breaker": frozenset({"dependency_id", "version", "state", "body", "config", "updated_at_s"}),
            "transition": frozenset({"id", "dependency_id", "at_s", "from_state", "to_state", "reason", "generation",
                                     "cooldown_s", "detail"})},
    schema=_SCHEMA, application_id=0x4B4C4252)


def _error(message: str, *, retryable: bool | None = None) -> BreakerStoreError:
    return BreakerStoreError(message, retryable=retryable)


class SQLiteBreakerStore:
    """A :class:`~kernel_lib.recovery.gateway.runner.BreakerStore` in one SQLite file (module
    docstring). Thread-safe (one connection behind a lock); open one per process.

    Args:
        path: the file (created with its directory's permission; the directory must exist).
        synchronous: ``"NORMAL"`` (default: survives a process crash) or ``"FULL"`` (a host crash).
        busy_timeout_s: how long a transaction waits for another process's write lock (s).

    Raises:
        BreakerStoreError: the path cannot hold the store, or the file is another database
        (left untouched); retryable when it was only locked past the timeout.
        ConfigError: a bad ``synchronous`` or ``busy_timeout_s``.
    """

    def __init__(self, path: "str | os.PathLike[str]", *, synchronous: str = "NORMAL", busy_timeout_s: float = 5.0):
        self.path = os.fspath(path)
        self._label = f"breaker store {self.path}"
        self._db: sqlite3.Connection | None = open_database(
            self.path, BREAKER_STORE_LAYOUT, error=_error, busy_error=_error, busy_timeout_s=busy_timeout_s,
            synchronous=synchronous)
        self._lock = threading.Lock()
        self._writes = 0
        self.stats = {"loads": 0, "fresh_checks": 0, "transactions": 0, "writes": 0}

    @classmethod
    def in_dir(cls, state_dir: "str | os.PathLike[str]", **kwargs: Any) -> "SQLiteBreakerStore":
        """The store at ``state_dir / BREAKER_STORE_FILE`` (the directory is created if missing):
        every worker given the same state directory shares its breakers."""
        d = os.fspath(state_dir)
        try:
            os.makedirs(d, exist_ok=True)
        except OSError as exc:
            raise BreakerStoreError(f"cannot create the breaker store's directory {d}: {exc}") from exc
        return cls(os.path.join(d, BREAKER_STORE_FILE), **kwargs)

    # --- lifecycle ----------------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            close_quietly(self._db)
            self._db = None

    def __enter__(self) -> "SQLiteBreakerStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise BreakerStoreError(f"{self._label} is closed")
        return self._db

    # --- rows -----------------------------------------------------------------------------------------
    def _row(self, db: sqlite3.Connection, dependency_id: str, config: BreakerConfig) -> tuple[BreakerState, int]:
        row = db.execute("SELECT body, config, version FROM breaker WHERE dependency_id = ?",
                         (dependency_id,)).fetchone()
        if row is None:
            return initial_state(config), 0
        body, stored_config, version = row
        try:
            other = json.loads(stored_config)
        except ValueError:
            raise BreakerStoreError(f"{self._label}: the configuration of {dependency_id!r} does not decode",
                                    dependency_id=dependency_id) from None
        if other != config.to_json():
            raise BreakerStoreError(
                f"{self._label}: the breaker of {dependency_id!r} was written with another configuration "
                f"({stored_config}); every worker sharing it must use the same one (or another dependency id)",
                dependency_id=dependency_id)
        try:
            return BreakerState.from_json(json.loads(body)), int(version)
        except (ValueError, KeyError, TypeError) as exc:
            raise BreakerStoreError(f"{self._label}: the state of {dependency_id!r} does not decode ({exc})",
                                    dependency_id=dependency_id) from None

    def _token(self, db: sqlite3.Connection) -> tuple[int, int]:
        return db.execute("PRAGMA data_version").fetchone()[0], self._writes

    # --- the BreakerStore protocol ------------------------------------------------------------------------
    def load(self, dependency_id: str, config: BreakerConfig) -> tuple[BreakerState, object]:
        """The dependency's state (initial when absent) and a freshness token. Raises BreakerStoreError."""
        if not isinstance(config, BreakerConfig):
            raise GatewayConfigError("config must be a BreakerConfig", field="config")
        with self._lock:
            db = self._conn()
            self.stats["loads"] += 1
            try:
                state, _ = self._row(db, dependency_id, config)
                return state, self._token(db)
            except sqlite3.Error as exc:
                raise BreakerStoreError(f"{self._label}: cannot read {dependency_id!r}: {exc}",
                                        dependency_id=dependency_id) from exc

    def is_fresh(self, dependency_id: str, token: object) -> bool:
        """True when no connection has committed since ``token`` was taken (``PRAGMA
        data_version``) and this one has not written either."""
        with self._lock:
            db = self._conn()
            self.stats["fresh_checks"] += 1
            try:
                return self._token(db) == token
            except sqlite3.Error:
                return False

    def update(self, dependency_id: str, config: BreakerConfig, fn: Update
               ) -> tuple[BreakerState, tuple[Transition, ...], object, Any]:
        """Read-decide-write in one ``BEGIN IMMEDIATE`` transaction (module docstring). Raises
        BreakerStoreError (retryable when the write lock was held past the busy timeout)."""
        with self._lock:
            db = self._conn()
            self.stats["transactions"] += 1
            try:
                with write_transaction(db, f"{self._label}: update of {dependency_id!r}", busy_error=_error):
                    state, version = self._row(db, dependency_id, config)
                    new, trs, result = fn(state)
                    if new is not state or trs:
                        self._write(db, dependency_id, config, new, version + 1, trs)
            except sqlite3.Error as exc:
                raise BreakerStoreError(f"{self._label}: cannot update {dependency_id!r}: {exc}",
                                        dependency_id=dependency_id) from exc
            return new, trs, self._token(db), result

    def _write(self, db: sqlite3.Connection, dependency_id: str, config: BreakerConfig, new: BreakerState,
               version: int, trs: tuple[Transition, ...]) -> None:
        db.execute("INSERT INTO breaker (dependency_id, version, state, body, config, updated_at_s) "
                   "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (dependency_id) DO UPDATE SET version = excluded.version, "
                   "state = excluded.state, body = excluded.body, updated_at_s = excluded.updated_at_s",
                   (dependency_id, version, new.state, json.dumps(new.to_json()), json.dumps(config.to_json()),
                    new.changed_at_s))
        for t in trs:
            detail = {"failure_rate": t.failure_rate, "slow_call_rate": t.slow_call_rate, "calls": t.calls,
                      "pid": os.getpid()}
            db.execute("INSERT INTO transition (dependency_id, at_s, from_state, to_state, reason, generation, "
                       "cooldown_s, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                       (dependency_id, t.at_s, t.from_state, t.to_state, t.reason, t.generation, t.cooldown_s,
                        json.dumps(detail)))
        self._writes += 1
        self.stats["writes"] += 1

    def transitions(self, dependency_id: str | None = None, *, limit: int = 1000) -> list[tuple[str, Transition]]:
        """The recorded transitions, oldest first (the newest ``limit``): ``(dependency_id, transition)``."""
        with self._lock:
            db = self._conn()
            where, args = ("WHERE dependency_id = ?", (dependency_id,)) if dependency_id is not None else ("", ())
            rows = db.execute(f"SELECT dependency_id, at_s, from_state, to_state, reason, generation, cooldown_s, "
                              f"detail FROM transition {where} ORDER BY id DESC LIMIT ?",
                              (*args, int(limit))).fetchall()
        out = []
        for dep, at_s, frm, to, reason, gen, cooldown, detail in reversed(rows):
            d = json.loads(detail)
            out.append((dep, Transition(at_s, frm, to, reason, gen, cooldown, d.get("failure_rate"),
                                        d.get("slow_call_rate"), d.get("calls"))))
        return out

    def transition_rows(self, dependency_id: str | None = None, *, limit: int = 1000) -> list[dict[str, Any]]:
        """The transitions as plain rows (``id``, ``dependency_id``, ``at_s``, ``from_state``,
        ``to_state``, ``reason``, ``generation``, ``cooldown_s`` and the detail's ``pid``), for tables."""
        with self._lock:
            db = self._conn()
            where, args = ("WHERE dependency_id = ?", (dependency_id,)) if dependency_id is not None else ("", ())
            rows = db.execute(f"SELECT id, dependency_id, at_s, from_state, to_state, reason, generation, cooldown_s, "
                              f"detail FROM transition {where} ORDER BY id DESC LIMIT ?",
                              (*args, int(limit))).fetchall()
        keys = ("id", "dependency_id", "at_s", "from_state", "to_state", "reason", "generation", "cooldown_s")
        return [dict(zip(keys, r[:8]), pid=json.loads(r[8]).get("pid")) for r in reversed(rows)]

    def dependencies(self) -> list[dict[str, Any]]:
        """Every breaker in the file: ``dependency_id``, ``state``, ``version``, ``updated_at_s``."""
        with self._lock:
            rows = self._conn().execute("SELECT dependency_id, state, version, updated_at_s FROM breaker "
                                        "ORDER BY dependency_id").fetchall()
        return [dict(zip(("dependency_id", "state", "version", "updated_at_s"), r)) for r in rows]
