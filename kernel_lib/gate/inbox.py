"""A durable result inbox for endpoint completion records (§11.5.3).

Source: the "Durable Execution" chapter, §11.5.2–11.5.3. A worker may die while a tool endpoint is
still running one of its operations. The endpoint's signed completion record must then reach
whoever owns the trajectory next, so it is kept here, outside every worker, in an embedded SQLite
file of its own.

Two steps, kept apart on purpose:

* :meth:`ResultInbox.deposit` — the endpoint side. The record's Ed25519 signature is checked
  against the public key registered for its ``executor_id`` before anything is stored. Entries
  are keyed by ``(trajectory_id, operation_id, attempt_id)``. Depositing the same record again
  is a no-op that returns the stored entry; a second *final* record (``completed``/``failed``)
  for a key that already holds a different final record raises :class:`InboxConflictError`
  and leaves the stored one as it was. Progress reports (``accepted``, ``running``, ``pending``,
  ``partial``, ``timeout``, ...) are kept side by side: they are successive observations, not
  rival outcomes.
* :meth:`ResultInbox.ingest` — the owner side. The current owner reads its trajectory's entries,
  authenticates each one again (the file could have been edited), and appends evidence through
  its :class:`~kernel_lib.log.TrajectoryLog`, in the shapes the live worker writes on
  reconciliation: a ``ToolResult`` (``source="inbox"``, the signed record as evidence) and, when
  the record reports usage, a ``BudgetSettled``. Receiving a record does not settle anything by
  itself: only a ``completed``/``failed`` record with a complete observation makes the fold
  establish the attempt and settle its reservation finally. Any other record leaves the
  operation in doubt; reported usage settles non-finally, so the unverified rest of the
  reservation stays held.

Only evidence that correlates with the owner's log is ingested: the record must name a *tool*
operation and an attempt whose ``ToolIntent`` the log holds. A record for a model invocation, for an
operation never proposed, or for an attempt never dispatched is refused (nothing appended; the entry
stays stored and the outcome says why), so the inbox can never invent an operation or settle one
through an attempt the log does not know. Before anything is appended, the events are folded onto a
copy of the owner's record; if that fold would fail, the record is refused instead, so an
ingestion never leaves the log unfoldable.

One :class:`ResultInbox` may be shared by threads: every use of its SQLite connection is
serialised by a lock. SQLite failures (an unusable file, a busy database) surface as
:class:`~kernel_lib.errors.InboxError`.

Usage in a record (``charged_usd``, USD) is read as the attempt's cumulative verified usage so
far. Ingestion settles only what the log has not settled yet for that reservation, so the order
and number of ingestions do not change the budget totals. Ingestion is idempotent: a record whose
signature already appears as evidence in the log is skipped, and so is anything for an attempt the
log already established (later evidence never un-settles it).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from kernel_lib._support.sqlite import Layout, close_quietly, open_database, statements, write_transaction
from kernel_lib.gate.dispatch import reservation_id as _reservation_id
from kernel_lib.errors import ConfigError, FoldError, InboxConflictError, InboxError, InboxRecordError, KernelError
from kernel_lib.core.events import BudgetSettled, Payload, ToolResult
from kernel_lib.core.money import micro_to_usd, usd_to_micro
from kernel_lib.limits import USAGE_USD_MAX
from kernel_lib.errors import EvidenceSignatureError
from kernel_lib.gate.evidence import load_public_key, signing_bytes, verify_completion
from kernel_lib.log.trajectory import TrajectoryLog
from kernel_lib.core.record import SETTLING_STATUSES, TrajectoryRecord, fold, fold_into, fork, initial_record

#: Record statuses that claim a final outcome; one per (trajectory, operation, attempt).
FINAL_STATUSES = frozenset({"completed", "failed"})

#: How a record's status is written as a ToolResult status (anything else: ``partial``).
_STATUS_AS_RESULT = {"completed": "completed", "failed": "failed", "running": "running",
                     "accepted": "accepted", "pending": "accepted", "queued": "accepted",
                     "timeout": "timeout", "timed_out": "timeout", "partial": "partial",
                     "unreachable": "unreachable"}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS completions (
    entry_id       INTEGER PRIMARY KEY AUTOINCREMENT,
    trajectory_id  TEXT NOT NULL,
    operation_id   TEXT NOT NULL,
    attempt_id     TEXT NOT NULL,
    executor_id    TEXT NOT NULL,
    status         TEXT NOT NULL,
    final          INTEGER NOT NULL,
    record_sha256  TEXT NOT NULL UNIQUE,
    record_json    TEXT NOT NULL,
    signature      TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS completions_by_key ON completions (trajectory_id, operation_id, attempt_id);
CREATE UNIQUE INDEX IF NOT EXISTS one_final_per_key
    ON completions (trajectory_id, operation_id, attempt_id) WHERE final = 1;
"""
_COLUMNS = frozenset({"entry_id", "trajectory_id", "operation_id", "attempt_id", "executor_id", "status", "final",
                      "record_sha256", "record_json", "signature"})
#: The layout checked at open (:mod:`kernel_lib._support.sqlite`). The inbox predates layout
#: versions: a file is recognised by its ``completions`` columns, and what is missing is created.
_LAYOUT = Layout(kind="result inbox", label="inbox", version=None, tables={"completions": _COLUMNS},
                 schema=statements(_SCHEMA), indexes=frozenset({"completions_by_key", "one_final_per_key"}))


@dataclass(frozen=True)
class InboxEntry:
    """One stored completion record. ``record`` includes its ``signature``; ``record_sha256`` is
    the SHA-256 (hex) of the signed bytes (RFC 8785, signature excluded); ``final`` is True for
    a completed/failed record."""

    entry_id: int
    trajectory_id: str
    operation_id: str
    attempt_id: str
    executor_id: str
    status: str
    final: bool
    record_sha256: str
    record: dict[str, Any]

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.trajectory_id, self.operation_id, self.attempt_id)


@dataclass
class IngestOutcome:
    """What :meth:`ResultInbox.ingest` did for one (operation, attempt).

    ``action`` is ``"established"`` (complete final evidence appended), ``"in_doubt"`` (evidence
    appended, the attempt is still unsettled), ``"already_ingested"``, ``"already_established"``
    or ``"refused"`` (nothing appended; ``reason`` says why). ``settled_usd`` is the usage settled
    by this call (USD)."""

    operation_id: str
    attempt_id: str
    action: str
    status: str | None = None
    settled_usd: float = 0.0
    reason: str = ""


@dataclass
class IngestReport:
    """The outcomes of one ingestion, in key order, and the owner's record after it."""

    outcomes: list[IngestOutcome] = field(default_factory=list)
    record: TrajectoryRecord | None = None

    def by_key(self) -> dict[tuple[str, str], IngestOutcome]:
        return {(o.operation_id, o.attempt_id): o for o in self.outcomes}


def _usage(x: Any) -> bool:
    return (isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
            and 0 <= x <= USAGE_USD_MAX)


def _stored_json(text: str) -> Any:
    """A stored record's JSON; an unreadable one (the file was edited) becomes a non-record that
    authentication refuses, rather than an error that hides every other entry."""
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return {"unreadable_record_json": str(text)[:200]}


def _evidence(record: dict[str, Any]) -> dict[str, str]:
    """The evidence map of a ToolResult for a signed record (same keys the live worker writes)."""
    return {"signed_record": json.dumps({k: v for k, v in record.items() if k != "signature"}, sort_keys=True),
            "signature_ed25519": record["signature"], "signed_by": str(record.get("executor_id", "")),
            "public_key_sha256": str(record.get("public_key_sha256", ""))}


def _load_keys(endpoint_keys: Any) -> dict[str, Ed25519PublicKey]:
    """``executor_id`` → key object, every entry checked; a bad one is a :class:`ConfigError`."""
    if not isinstance(endpoint_keys, Mapping):
        raise ConfigError(f"endpoint_keys must map endpoint ids to public keys, not {type(endpoint_keys).__name__}")
    keys: dict[str, Ed25519PublicKey] = {}
    for eid, k in endpoint_keys.items():
        if not isinstance(eid, str) or not eid:
            raise ConfigError(f"endpoint id {eid!r} must be a non-empty string")
        if isinstance(k, Ed25519PublicKey):
            keys[eid] = k
            continue
        if not isinstance(k, (str, os.PathLike)):
            raise ConfigError(f"the public key of endpoint {eid!r} must be an Ed25519 public key, its 64-hex form or "
                              f"a key file path, not {type(k).__name__}")
        try:
            keys[eid] = load_public_key(k)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"the public key of endpoint {eid!r} ({str(k)[:120]!r}) cannot be loaded: it is neither "
                              f"64 hex characters nor a readable file holding them ({type(exc).__name__}: "
                              f"{exc})") from exc
    return keys


class ResultInbox:
    """Completion records kept in their own SQLite file, independent of any worker.

    Args:
        path: the SQLite file (created if missing); ``":memory:"`` for a throwaway inbox.
        endpoint_keys: ``executor_id`` → Ed25519 public key (a key object, its 64-hex form, or
            a path to a key file). Records from an endpoint without a key are refused.

        create: with False, a missing file is an error instead of a new, empty inbox (for readers).

    The file is opened in WAL mode with ``synchronous=FULL`` (:mod:`kernel_lib._support.sqlite`):
    a deposit that returned is on disk and survives a host crash or power loss with the volume
    intact. The connection is shared by threads under a lock.

    Raises:
        ConfigError: ``endpoint_keys`` is not a mapping of endpoint ids to usable Ed25519 public
            keys (a key file that is missing or unreadable, a malformed hex key, a wrong type).
        InboxError: the file cannot be used as an inbox (a directory, a missing parent directory,
            not an SQLite file, an SQLite file holding another ``completions`` table, or missing
            with ``create=False``: nothing in it is changed), or it stayed locked past the busy
            timeout (10 s; ``retryable``).
    """

    def __init__(self, path: str | os.PathLike, endpoint_keys: Mapping[str, Ed25519PublicKey | str | os.PathLike],
                 *, create: bool = True):
        if not isinstance(path, (str, os.PathLike)):
            raise ConfigError(f"the inbox path must be a string or path, not {type(path).__name__}")
        self.path = str(path)
        self._keys = _load_keys(endpoint_keys)
        self._lock = threading.RLock()
        # the path and the layout are checked before anything is written (":memory:" needs neither)
        self._db = open_database(self.path, _LAYOUT, error=InboxError, busy_error=InboxError, busy_timeout_s=10.0,
                                 journal_mode="WAL", synchronous="FULL", create=create)

    @contextmanager
    def _locked(self, what: str) -> Iterator[sqlite3.Connection]:
        """The connection, held under the lock; SQLite errors become :class:`InboxError`."""
        with self._lock:
            try:
                yield self._db
            except sqlite3.Error as exc:
                raise InboxError(f"inbox {self.path!r}: {what} failed: {type(exc).__name__}: {exc}") from exc

    def check_writable(self) -> None:
        """Take and release the write lock without storing anything (what a depositor checks at
        startup). Raises InboxError when the file cannot be written (read-only file or
        directory, locked past the busy timeout)."""
        with self._locked("a write check") as db, write_transaction(db, f"inbox {self.path!r}: a write check",
                                                                   busy_error=InboxError):
            pass   # an empty transaction: the lock was taken, nothing is written

    def close(self) -> None:
        with self._lock:
            close_quietly(self._db)

    def __enter__(self) -> "ResultInbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the endpoint side -----------------------------------------------------------------------
    def _authenticate(self, record: Any) -> dict[str, Any]:
        if not isinstance(record, dict):
            raise InboxRecordError(f"a completion record is a JSON object, not {type(record).__name__}")
        executor = record.get("executor_id")
        key = self._keys.get(executor) if isinstance(executor, str) else None
        if key is None:
            raise InboxRecordError(f"no public key is registered for endpoint {executor!r}; its records "
                                   "cannot be authenticated")
        try:
            verify_completion(record, key)   # raises EvidenceSignatureError
        except rfc8785.CanonicalizationError as exc:   # NaN/Infinity, huge integers, non-JSON values
            raise InboxRecordError(f"the completion record is not canonical JSON (RFC 8785), so its signature "
                                   f"cannot even be checked: {exc}") from exc
        for name in ("operation_id", "attempt_id", "status"):
            if not isinstance(record.get(name), str) or not record[name]:
                raise InboxRecordError(f"completion record field {name!r} must be a non-empty string")
        charged = record.get("charged_usd")
        if charged is not None and not _usage(charged):
            raise InboxRecordError(f"completion record field 'charged_usd' must be a finite number of USD >= 0, "
                                   f"got {charged!r}")
        return record

    def deposit(self, record: dict[str, Any], *, trajectory_id: str | None = None) -> InboxEntry:
        """Authenticate a signed completion record and store it durably; return its entry.

        ``trajectory_id`` is the scope the result was registered under; it may instead be a field
        of the record (both given: they must agree).

        Raises:
            EvidenceSignatureError: the signature is missing or does not verify (nothing stored).
            InboxRecordError: unknown endpoint, missing fields, or no trajectory scope.
            InboxConflictError: a different final record is stored for the same key, or this record
                is stored under another trajectory. The stored entry is unchanged.
            InboxError: SQLite failed (e.g. the file stayed locked past the busy timeout); nothing stored.
        """
        record = self._authenticate(record)
        inner = record.get("trajectory_id")
        if inner is not None and trajectory_id is not None and inner != trajectory_id:
            raise InboxRecordError(f"the record names trajectory {inner!r} but was deposited for {trajectory_id!r}")
        tid = trajectory_id if trajectory_id is not None else inner
        if not isinstance(tid, str) or not tid:
            raise InboxRecordError("a completion record needs its trajectory scope (trajectory_id)")
        sha = hashlib.sha256(signing_bytes(record)).hexdigest()
        final = record["status"] in FINAL_STATUSES
        with self._locked("deposit") as db:
            return self._deposit_locked(db, record, tid, sha, final)

    def _deposit_locked(self, db: sqlite3.Connection, record: dict[str, Any], tid: str, sha: str,
                        final: bool) -> InboxEntry:
        # one BEGIN IMMEDIATE transaction: rolled back on any exception (a conflict stores nothing)
        with write_transaction(db, f"inbox {self.path!r}: deposit", busy_error=InboxError):
            same = self._select("record_sha256 = ?", (sha,))
            if same:
                if same[0].trajectory_id != tid:
                    raise InboxConflictError(f"this completion record is already stored for trajectory "
                                             f"{same[0].trajectory_id!r}, not {tid!r}")
                return same[0]
            if final:
                rival = self._select("trajectory_id = ? AND operation_id = ? AND attempt_id = ? AND final = 1",
                                     (tid, record["operation_id"], record["attempt_id"]))
                if rival:
                    raise InboxConflictError(
                        f"{tid}/{record['operation_id']}/{record['attempt_id']} already holds a final record "
                        f"(entry {rival[0].entry_id}, {rival[0].status}, sha256 {rival[0].record_sha256[:12]}…) "
                        f"that differs from this one (sha256 {sha[:12]}…); the stored record is kept")
            cur = db.execute(
                "INSERT INTO completions (trajectory_id, operation_id, attempt_id, executor_id, status, final, "
                "record_sha256, record_json, signature) VALUES (?,?,?,?,?,?,?,?,?)",
                (tid, record["operation_id"], record["attempt_id"], record["executor_id"], record["status"],
                 int(final), sha, json.dumps(record, sort_keys=True), record["signature"]))
            entry_id = cur.lastrowid
        return self._select("entry_id = ?", (entry_id,))[0]

    # --- reading ---------------------------------------------------------------------------------
    def _select(self, where: str, args: tuple) -> list[InboxEntry]:
        with self._locked("read") as db:
            rows = db.execute(
                "SELECT entry_id, trajectory_id, operation_id, attempt_id, executor_id, status, final, record_sha256, "
                f"record_json FROM completions WHERE {where} ORDER BY operation_id, attempt_id, entry_id",
                args).fetchall()
        return [InboxEntry(r[0], r[1], r[2], r[3], r[4], r[5], bool(r[6]), r[7], _stored_json(r[8])) for r in rows]

    def entries(self, trajectory_id: str, operation_id: str | None = None,
                attempt_id: str | None = None) -> list[InboxEntry]:
        """Stored entries of a trajectory (optionally one operation / attempt), in key order then
        arrival order."""
        where, args = "trajectory_id = ?", [trajectory_id]
        if operation_id is not None:
            where, args = where + " AND operation_id = ?", args + [operation_id]
        if attempt_id is not None:
            where, args = where + " AND attempt_id = ?", args + [attempt_id]
        return self._select(where, tuple(args))

    # --- the owner side --------------------------------------------------------------------------
    def ingest(self, current_owner_log: TrajectoryLog, record: TrajectoryRecord | None = None) -> IngestReport:
        """Turn this trajectory's stored completion records into evidence in the owner's log.

        ``current_owner_log`` is the log handle of the current owner (its ``owner_epoch`` is
        stamped on every append; a fenced-out handle gets the store's StaleOwnerError and appends
        nothing). ``record`` is the owner's folded record of that log (default: fold it); it is
        updated in place and returned as ``report.record``.

        Per (operation, attempt): the final record if one is stored, else the progress report with
        the largest verified usage. It is authenticated again, correlated with the logged intent
        (the operation must be a tool call whose attempt has a ``ToolIntent`` in the log, and
        ``snapshot_digest`` / ``check`` must match the intent's arguments when both name them),
        then appended as a ToolResult plus, for reported usage, a BudgetSettled of the usage not
        yet settled for that reservation (final only if the attempt is now established). The
        events are folded onto a copy of ``record`` first; a record they would not fold onto is
        refused and nothing is appended. Refused entries stay stored (a later ingestion, e.g. once
        the intent is logged, looks at them again).

        Raises:
            StoreError: the log refused an append (e.g. StaleOwnerError once the owner is fenced).
            FoldError: ``record`` is not at the log handle's head (it was not folded from this log,
                or the handle is behind the store); nothing is appended.
            InboxError: the inbox file could not be read.
        """
        with self._lock:
            return self._ingest(current_owner_log, record)

    def _ingest(self, log: TrajectoryLog, record: TrajectoryRecord | None) -> IngestReport:
        events = list(log.events())
        rec = record if record is not None else fold(initial_record(log.trajectory_id), events)
        if rec.trajectory_id != log.trajectory_id or rec.last_sequence_number != log.head:
            raise FoldError(f"ingest needs the owner's record of {log.trajectory_id} at the log handle's head "
                            f"(sequence {log.head}); the record given is of {rec.trajectory_id} at sequence "
                            f"{rec.last_sequence_number}: fold the log again (or reopen the handle) and retry")
        log.control_epoch = max(log.control_epoch, rec.control_epoch)
        in_log: set[str] = set()
        settled: dict[str, int] = {}   # micro-dollars settled per reservation, as the fold counts them
        for ev in events:
            p = ev.payload
            if isinstance(p, ToolResult) and p.evidence and "signature_ed25519" in p.evidence:
                in_log.add(p.evidence["signature_ed25519"])
            elif isinstance(p, BudgetSettled):
                settled[p.reservation_id] = settled.get(p.reservation_id, 0) + usd_to_micro(p.actual_usd, "up")
        report = IngestReport(record=rec)
        groups: dict[tuple[str, str], list[InboxEntry]] = {}
        for e in self.entries(log.trajectory_id):
            groups.setdefault((e.operation_id, e.attempt_id), []).append(e)
        for (op_id, att_id), group in sorted(groups.items()):
            out = self._ingest_one(log, rec, op_id, att_id, group, in_log, settled)
            report.outcomes.append(out)
        return report

    def _ingest_one(self, log: TrajectoryLog, rec: TrajectoryRecord, op_id: str, att_id: str,
                    group: list[InboxEntry], in_log: set[str], settled: dict[str, int]) -> IngestOutcome:
        good: list[InboxEntry] = []
        reasons = []
        for e in group:
            try:
                self._authenticate(e.record)
                if (e.record["operation_id"], e.record["attempt_id"]) != (op_id, att_id):
                    raise InboxRecordError("the stored key does not match the signed record")
                good.append(e)
            except (EvidenceSignatureError, InboxRecordError) as exc:
                reasons.append(f"entry {e.entry_id}: {exc}")
        if not good:
            return IngestOutcome(op_id, att_id, "refused", reason="; ".join(reasons) or "no entries")
        finals = [e for e in good if e.final]
        chosen = finals[0] if finals else max(
            good, key=lambda e: (e.record.get("charged_usd") if _usage(e.record.get("charged_usd")) else -1.0,
                                 e.record_sha256))
        r = chosen.record
        op = rec.operations.get(op_id)
        att = op.attempts.get(att_id) if op else None
        if op is None:
            return IngestOutcome(op_id, att_id, "refused", r["status"],
                                 reason=f"the log holds no operation {op_id!r}: a record for an operation this "
                                        "trajectory never proposed does not correlate with any logged intent; "
                                        "the entry stays stored")
        if op.kind != "tool":
            return IngestOutcome(op_id, att_id, "refused", r["status"],
                                 reason=f"{op_id!r} is a {op.kind} call in the log, not a tool call: an endpoint's "
                                        "completion record cannot settle it; the entry stays stored")
        if att is None or att.intent_sequence is None:
            known = sorted(a for a, x in op.attempts.items() if x.intent_sequence is not None)
            return IngestOutcome(op_id, att_id, "refused", r["status"],
                                 reason=f"the log holds no ToolIntent for attempt {att_id!r} of {op_id!r} (attempts "
                                        f"dispatched: {known}): only a dispatched attempt can be settled from the "
                                        "inbox; the entry stays stored")
        if att.established:
            return IngestOutcome(op_id, att_id, "already_established", r["status"])
        if r["signature"] in in_log:
            return IngestOutcome(op_id, att_id, "already_ingested", r["status"])
        if op is not None:
            bad = {k: (r.get(k), op.arguments[k]) for k in ("snapshot_digest", "check")
                   if k in op.arguments and k in r and r[k] != op.arguments[k]}
            if bad:
                return IngestOutcome(op_id, att_id, "refused", r["status"],
                                     reason=f"the record does not correlate with the logged intent: {bad}")
        status = _STATUS_AS_RESULT.get(r["status"], "partial")
        complete = status in SETTLING_STATUSES and r.get("observation_complete", True) is True
        outcome = r.get("outcome")
        if outcome is not None and not isinstance(outcome, dict):
            outcome = {"value": outcome}
        if status == "partial" and r["status"] != "partial":
            outcome = {**(outcome or {}), "endpoint_status": r["status"]}
        job = r.get("job_handle") if isinstance(r.get("job_handle"), str) and r.get("job_handle") else None
        try:
            result = ToolResult(operation_id=op_id, attempt_id=att_id, status=status, job_handle=job,
                                outcome=outcome, observation_complete=complete, evidence=_evidence(r),
                                source="inbox")
        except (KernelError, ValueError) as exc:   # e.g. an outcome the event schema refuses
            return IngestOutcome(op_id, att_id, "refused", r["status"],
                                 reason=f"the record cannot be written as a ToolResult: {type(exc).__name__}: {exc}")
        payloads: list[Payload] = [result]
        # will the fold establish the attempt? (same rule as record._tool_result)
        established = complete
        res_id = _reservation_id(op_id, att_id)
        if res_id not in rec.budget.reservations and op is not None and op.reservation_id \
                and rec.budget.reservations.get(op.reservation_id) is not None \
                and len(op.attempts) <= 1:
            res_id = op.reservation_id   # an intent that names its own reservation (one attempt)
        res = rec.budget.reservations.get(res_id)
        delta_micro = 0
        charged = r.get("charged_usd")
        if _usage(charged) and not (res is not None and res.released):
            # what the log has not settled yet, in the fold's micro-dollars (exact, no float residue)
            delta_micro = max(usd_to_micro(float(charged), "up") - settled.get(res_id, 0), 0)
            if delta_micro > 0 or (established and res is not None):
                payloads.append(BudgetSettled(reservation_id=res_id, subject_id=op_id,
                                              actual_usd=micro_to_usd(delta_micro),
                                              final=established,
                                              evidence=f"inbox:{r['status']}:{chosen.record_sha256}"))
        # fold what would be appended onto a copy of the record first: an append must never make
        # the log unfoldable, so anything the reducer would refuse is refused here instead
        try:
            trial = [log.stamp(pl, log.head + i + 1) for i, pl in enumerate(payloads)]
            fold_into(fork(rec, trial), trial)
        except (KernelError, ValueError) as exc:
            return IngestOutcome(op_id, att_id, "refused", r["status"],
                                 reason=f"appending this record would not fold onto the owner's record "
                                        f"({type(exc).__name__}: {exc}); nothing was appended")
        appended = log.append_many(payloads)
        fold_into(rec, appended)
        log.control_epoch = max(log.control_epoch, rec.control_epoch)
        in_log.add(r["signature"])
        if len(payloads) > 1:
            settled[res_id] = settled.get(res_id, 0) + delta_micro
        now = rec.operations[op_id].attempts[att_id]
        return IngestOutcome(op_id, att_id, "established" if now.established else "in_doubt", r["status"],
                             settled_usd=micro_to_usd(delta_micro) if len(payloads) > 1 else 0.0,
                             reason="" if now.established else
                             f"a {r['status']} record does not settle the operation; it stays in doubt")


def open_inbox(path: str | os.PathLike, endpoint_keys: Mapping[str, Any]) -> ResultInbox:
    """Open (or create, with its parent directories) the inbox file at ``path``; see :class:`ResultInbox`."""
    if isinstance(path, (str, os.PathLike)) and str(path) != ":memory:":
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InboxError(f"inbox {str(path)!r}: its directory cannot be created: {exc}") from exc
    return ResultInbox(path, endpoint_keys)


__all__ = ["FINAL_STATUSES", "InboxEntry", "IngestOutcome", "IngestReport", "ResultInbox", "open_inbox"]
