"""The durable taint ledger: the provenance graph and its taint history in SQLite (Failure
Recovery, table 12 stage 4, definition 0.3).

One file (WAL, ``synchronous=FULL``: a write that returned survives a host crash) holds:

* ``artifacts`` — every artifact's envelope (:class:`~.taint.Artifact`): hash, producer, epoch,
  parents (a parent must be registered first, so the graph stays acyclic);
* ``marks`` — the ordered history of taint marks and clearances (its ``seq`` orders them); a
  clearance keeps its verifier's kind and identity, method and evidence;
* ``quarantines`` — each tombstone applied: trajectory, quarantine id, t_taint. An artifact
  registered later by a quarantined producer at or after t_taint is tainted as it is registered.

The states are computed by :func:`~.taint.taint_states` from what the file holds, so every
process that opens the ledger reads the same answer; the connection re-reads the file only when
another connection has committed (``PRAGMA data_version``). Nothing stored is ever deleted or
overwritten: a clearance is a new mark, a second registration of a hash must repeat its envelope
exactly. Applying a tombstone is idempotent (the log is the truth; a restarted supervisor applies
it again).

Errors: :class:`~kernel_lib.errors.TaintLedgerError` (the file is not a taint ledger),
:class:`~kernel_lib.errors.ArtifactError` (a malformed or conflicting envelope, an unknown
hash), :class:`~kernel_lib.errors.ClearanceRefused` (a clearance that is not independent).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kernel_lib._support.sqlite import Layout, close_quietly, open_database, statements, write_transaction
from kernel_lib.errors import ArtifactError, ConfigError, TaintLedgerError
from kernel_lib.recovery.quarantine.taint import (
    Artifact, Clearance, TaintState, TaintView, check_clearance, produced_since, taint_states,
)

__all__ = ["TaintLedger", "AppliedTombstone"]

_LAYOUT = Layout(
    kind="taint ledger", label="taint ledger", version=1,
    tables={"artifacts": frozenset({"sha256", "producer", "epoch", "parents", "name", "registered_seq"}),
            "marks": frozenset({"seq", "kind", "sha256", "quarantine_id", "verifier_kind", "verifier_id", "method",
                                "evidence", "at_unix_s"}),
            "quarantines": frozenset({"quarantine_id", "trajectory_id", "taint_from_sequence", "seq"})},
    schema=statements("""
        CREATE TABLE IF NOT EXISTS artifacts (sha256 TEXT PRIMARY KEY, producer TEXT NOT NULL, epoch INTEGER NOT NULL,
            parents TEXT NOT NULL, name TEXT NOT NULL, registered_seq INTEGER NOT NULL);
        CREATE TABLE IF NOT EXISTS marks (seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL
            CHECK (kind IN ('taint', 'clear')), sha256 TEXT NOT NULL REFERENCES artifacts(sha256),
            quarantine_id TEXT, verifier_kind TEXT, verifier_id TEXT, method TEXT, evidence TEXT,
            at_unix_s REAL NOT NULL);
        CREATE TABLE IF NOT EXISTS quarantines (quarantine_id TEXT PRIMARY KEY, trajectory_id TEXT NOT NULL,
            taint_from_sequence INTEGER NOT NULL, seq INTEGER NOT NULL);
        CREATE INDEX IF NOT EXISTS artifacts_by_producer ON artifacts (producer, epoch);
    """),
    application_id=0x5441_4e54)   # "TANT"


@dataclass(frozen=True)
class AppliedTombstone:
    """What :meth:`TaintLedger.apply_tombstone` did: ``newly_tainted`` (hashes marked now),
    ``tainted`` (every artifact the tombstone covers), ``suspect`` (artifacts that became
    SUSPECT through lineage), ``already_applied`` (the same quarantine id was applied before)."""

    quarantine_id: str
    trajectory_id: str
    taint_from_sequence: int
    newly_tainted: tuple[str, ...]
    tainted: tuple[str, ...]
    suspect: tuple[str, ...]
    already_applied: bool

    def to_json(self) -> dict[str, Any]:
        return {"quarantine_id": self.quarantine_id, "trajectory_id": self.trajectory_id,
                "taint_from_sequence": self.taint_from_sequence, "newly_tainted": list(self.newly_tainted),
                "tainted": list(self.tainted), "suspect": list(self.suspect), "already_applied": self.already_applied}


class TaintLedger:
    """The taint ledger in one SQLite file (module docstring); ``":memory:"`` for a throwaway one.

    Thread-safe (one lock around the connection). ``clock`` (seconds since the epoch) stamps the
    marks; inject it for reproducible files.

    Raises TaintLedgerError when the file is not a taint ledger or cannot be opened."""

    def __init__(self, path: str | os.PathLike, *, clock: Any = time.time):
        self.path = os.fspath(path)
        self.db = open_database(self.path, _LAYOUT, error=TaintLedgerError, synchronous="FULL")
        self._clock = clock
        self._lock = threading.RLock()
        self._cache: tuple[int, dict[str, Artifact], list[tuple[str, int]], list[tuple[str, int]]] | None = None

    @classmethod
    def open(cls, path: str | os.PathLike, **kw: Any) -> "TaintLedger":
        return cls(path, **kw)

    def close(self) -> None:
        close_quietly(self.db)

    def __enter__(self) -> "TaintLedger":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- reading ----------------------------------------------------------------------------------
    def _load(self) -> tuple[dict[str, Artifact], list[tuple[str, int]], list[tuple[str, int]]]:
        version = self.db.execute("PRAGMA data_version").fetchone()[0]
        if self._cache is not None and self._cache[0] == version:
            return self._cache[1], self._cache[2], self._cache[3]
        arts = {r[0]: Artifact(r[0], r[1], r[2], tuple(json.loads(r[3])), r[4]) for r in self.db.execute(
            "SELECT sha256, producer, epoch, parents, name FROM artifacts ORDER BY registered_seq, sha256")}
        taints, clears = [], []
        for seq, kind, sha in self.db.execute("SELECT seq, kind, sha256 FROM marks ORDER BY seq"):
            (taints if kind == "taint" else clears).append((sha, seq))
        self._cache = (version, arts, taints, clears)
        return arts, taints, clears

    def _invalidate(self) -> None:
        self._cache = None

    def artifacts(self) -> dict[str, Artifact]:
        """Every registered artifact, in registration order."""
        with self._lock:
            return dict(self._load()[0])

    def artifact(self, sha256: str) -> Artifact:
        """One artifact's envelope. Raises ArtifactError when the hash is not registered."""
        with self._lock:
            a = self._load()[0].get(sha256)
        if a is None:
            raise ArtifactError(f"artifact {str(sha256)[:12]}… is not registered in the taint ledger", sha256=sha256)
        return a

    def states(self) -> dict[str, TaintView]:
        """Every artifact's :class:`~.taint.TaintView`."""
        with self._lock:
            return taint_states(*self._load())

    def state(self, sha256: str) -> TaintView:
        """One artifact's :class:`~.taint.TaintView`. Raises ArtifactError when not registered."""
        self.artifact(sha256)
        return self.states()[sha256]

    def quarantines(self) -> list[dict[str, Any]]:
        """The tombstones applied: ``[{quarantine_id, trajectory_id, taint_from_sequence, seq}]``."""
        with self._lock:
            rows = self.db.execute("SELECT quarantine_id, trajectory_id, taint_from_sequence, seq FROM quarantines "
                                   "ORDER BY seq").fetchall()
        return [{"quarantine_id": q, "trajectory_id": t, "taint_from_sequence": f, "seq": s} for q, t, f, s in rows]

    def is_quarantined(self, trajectory_id: str) -> bool:
        return any(q["trajectory_id"] == trajectory_id for q in self.quarantines())

    def clearances(self, sha256: str | None = None) -> list[dict[str, Any]]:
        """The clearances recorded (of one artifact, or all): verifier, method, evidence, seq."""
        with self._lock:
            rows = self.db.execute("SELECT seq, sha256, verifier_kind, verifier_id, method, evidence, at_unix_s "
                                   "FROM marks WHERE kind = 'clear' ORDER BY seq").fetchall()
        return [{"seq": s, "sha256": h, "verifier_kind": k, "verifier_id": i, "method": m,
                 "evidence": json.loads(e or "{}"), "at_unix_s": t}
                for s, h, k, i, m, e, t in rows if sha256 is None or h == sha256]

    # --- writing ----------------------------------------------------------------------------------
    def _next_seq(self) -> int:
        row = self.db.execute("SELECT max(s) FROM (SELECT max(seq) AS s FROM marks UNION ALL "
                              "SELECT max(seq) FROM quarantines UNION ALL SELECT max(registered_seq) FROM artifacts)"
                              ).fetchone()
        return (row[0] or 0) + 1

    def _mark_taint(self, sha: str, quarantine_id: str) -> None:
        self.db.execute("INSERT INTO marks (kind, sha256, quarantine_id, at_unix_s) VALUES ('taint', ?, ?, ?)",
                        (sha, quarantine_id, float(self._clock())))

    def register(self, artifact: Artifact) -> TaintView:
        """Record ``artifact``'s envelope (durable when this returns) and return its state. A
        quarantined producer's artifact at or after its t_taint is tainted as it is registered.
        Registering the same envelope again changes nothing.

        Raises ArtifactError: not an Artifact, an unregistered parent, or the hash already
        registered with another envelope."""
        if not isinstance(artifact, Artifact):
            raise ArtifactError(f"register takes an Artifact, got {type(artifact).__name__}")
        with self._lock, write_transaction(self.db, f"taint ledger {self.path}", busy_error=TaintLedgerError):
            row = self.db.execute("SELECT producer, epoch, parents, name FROM artifacts WHERE sha256 = ?",
                                  (artifact.sha256,)).fetchone()
            if row is not None:
                known = Artifact(artifact.sha256, row[0], row[1], tuple(json.loads(row[2])), row[3])
                if known != artifact:
                    raise ArtifactError(f"artifact {artifact.sha256[:12]}… is registered already as {known.to_json()}"
                                        f", not {artifact.to_json()}; an envelope is never rewritten",
                                        sha256=artifact.sha256)
            else:
                for p in artifact.parents:
                    if self.db.execute("SELECT 1 FROM artifacts WHERE sha256 = ?", (p,)).fetchone() is None:
                        raise ArtifactError(f"artifact {artifact.sha256[:12]}… names parent {p[:12]}…, which is not "
                                            "registered (register parents first)", sha256=artifact.sha256)
                self.db.execute("INSERT INTO artifacts (sha256, producer, epoch, parents, name, registered_seq) "
                                "VALUES (?, ?, ?, ?, ?, ?)", (artifact.sha256, artifact.producer, artifact.epoch,
                                                               json.dumps(list(artifact.parents)), artifact.name,
                                                               self._next_seq()))
                for qid, t_from in self.db.execute("SELECT quarantine_id, taint_from_sequence FROM quarantines "
                                                   "WHERE trajectory_id = ?", (artifact.producer,)).fetchall():
                    if artifact.epoch >= t_from:
                        self._mark_taint(artifact.sha256, qid)
            self._invalidate()
        return self.state(artifact.sha256)

    def apply_tombstone(self, trajectory_id: str, quarantine_id: str, taint_from_sequence: int) -> AppliedTombstone:
        """Taint everything ``trajectory_id`` produced at or after log position
        ``taint_from_sequence`` (and, from now on, everything it registers there), in one durable
        transaction. Idempotent per ``quarantine_id``.

        Raises ConfigError for an empty id or a t_taint < 1; TaintLedgerError when the same
        quarantine id was applied to another trajectory or t_taint."""
        if not isinstance(trajectory_id, str) or not trajectory_id or not isinstance(quarantine_id, str) \
                or not quarantine_id:
            raise ConfigError("apply_tombstone needs a trajectory id and a quarantine id (non-empty strings)")
        if type(taint_from_sequence) is not int or taint_from_sequence < 1:
            raise ConfigError(f"taint_from_sequence must be a log position >= 1, got {taint_from_sequence!r}")
        with self._lock:
            with write_transaction(self.db, f"taint ledger {self.path}", busy_error=TaintLedgerError):
                row = self.db.execute("SELECT trajectory_id, taint_from_sequence FROM quarantines WHERE "
                                      "quarantine_id = ?", (quarantine_id,)).fetchone()
                if row is not None and tuple(row) != (trajectory_id, taint_from_sequence):
                    raise TaintLedgerError(f"quarantine {quarantine_id} was applied to {row[0]} from #{row[1]}, not "
                                           f"to {trajectory_id} from #{taint_from_sequence}")
                already = row is not None
                arts = [Artifact(r[0], r[1], r[2], (), "") for r in self.db.execute(
                    "SELECT sha256, producer, epoch FROM artifacts WHERE producer = ? AND epoch >= ?",
                    (trajectory_id, taint_from_sequence))]
                covered = produced_since(arts, trajectory_id, taint_from_sequence)
                marked = {r[0] for r in self.db.execute("SELECT sha256 FROM marks WHERE kind = 'taint' AND "
                                                        "quarantine_id = ?", (quarantine_id,))}
                new = [h for h in covered if h not in marked]
                if not already:
                    self.db.execute("INSERT INTO quarantines (quarantine_id, trajectory_id, taint_from_sequence, seq) "
                                    "VALUES (?, ?, ?, ?)", (quarantine_id, trajectory_id, taint_from_sequence,
                                                            self._next_seq()))
                for h in new:
                    self._mark_taint(h, quarantine_id)
                self._invalidate()
            views = self.states()
        return AppliedTombstone(quarantine_id, trajectory_id, taint_from_sequence, tuple(new), tuple(covered),
                                tuple(h for h, v in views.items() if v.state is TaintState.SUSPECT), already)

    def clear(self, clearance: Clearance) -> TaintView:
        """Record ``clearance`` (after :func:`~.taint.check_clearance`, with every producer the
        ledger knows as an agent identity) and return the artifact's new state.

        Raises ClearanceRefused (not independent: the model, an agent, no method or evidence),
        ArtifactError (the hash is not registered), ConfigError (evidence that is not JSON)."""
        with self._lock:
            producers = {a.producer for a in self._load()[0].values()} | {q["trajectory_id"]
                                                                         for q in self.quarantines()}
            check_clearance(clearance, agent_ids=producers)
            self.artifact(clearance.sha256)
            try:
                evidence = json.dumps(dict(clearance.evidence), sort_keys=True)
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"clearance evidence must be plain JSON: {exc}") from None
            with write_transaction(self.db, f"taint ledger {self.path}", busy_error=TaintLedgerError):
                self.db.execute("INSERT INTO marks (kind, sha256, verifier_kind, verifier_id, method, evidence, "
                                "at_unix_s) VALUES ('clear', ?, ?, ?, ?, ?, ?)",
                                (clearance.sha256, clearance.verifier.kind, clearance.verifier.identity,
                                 clearance.method, evidence, float(self._clock())))
                self._invalidate()
        return self.state(clearance.sha256)

    def register_many(self, artifacts: Iterable[Artifact]) -> list[TaintView]:
        return [self.register(a) for a in artifacts]

    def summary(self) -> dict[str, Any]:
        """Counts per state and the tombstones: ``{"states": {state: n}, "quarantines": [...]}``."""
        counts = {s.value: 0 for s in TaintState}
        for v in self.states().values():
            counts[v.state.value] += 1
        return {"states": counts, "quarantines": self.quarantines()}

