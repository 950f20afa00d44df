"""Availability and ownership before resume: leases, owner epochs, fencing (§11.5.1).

A replacement worker may hold a perfect copy of the log and still have no right to act on it.
This module supplies the three things §11.5.1 asks for before reconstruction and dispatch:

**An ownership coordinator.** :class:`OwnershipCoordinator` is the small interface a lease
service offers (``acquire``, ``renew``, ``release``, ``current``). Every grant carries a *new*
``owner_epoch``, strictly larger than every epoch granted before for that trajectory, and an
expiry. Another owner can be granted the trajectory only once the current lease has expired (or
was released). :class:`SQLiteOwnershipCoordinator` implements it on an embedded SQLite file: one
row per trajectory ``(owner_id, owner_epoch, granted_at_s, expires_at_s, released)`` plus an
append-only table of grants, every decision taken by compare-and-set inside one ``BEGIN
IMMEDIATE`` transaction committed with ``synchronous=FULL`` (a grant is on disk before it is
returned, so a crash of the coordinator's host cannot hand out the same epoch twice). It
survives what its volume survives (:attr:`~OwnershipCoordinator.survives_up_to` is
``HOST_CRASH``); the chapter wants the coordinator to survive whatever the log survives, so a
deployment that must survive volume loss replaces it with a replicated service (etcd, ZooKeeper,
a Raft group) behind the same four methods. :func:`require_coordinator_domain` refuses a pair
where the coordinator is the weaker one.

**Fencing at every boundary that can check it.** A lease by itself does not exclude anyone: a
worker that was suspended or partitioned after its last lease check still believes it owns the
trajectory when it wakes. What excludes it is its stale ``owner_epoch`` being refused where it
acts:

* the log: :func:`take_ownership` acquires a lease and installs its epoch as the log's fence
  (:meth:`~kernel_lib.log.base.LogStore.install_fence`) before anything else, so every later
  append stamped with an older epoch raises StaleOwnerError, in every store;
* the dispatch gate: :class:`LeaseCheck` is the gate's ``fence_check`` hook; the dispatch-time
  recheck asks the coordinator whether this worker's lease is still the current, unexpired grant
  and withholds the attempt otherwise (it also withholds when the coordinator cannot answer);
* downstream resources: the executor keeps the highest epoch it has seen per trajectory and
  operation and answers a lower one with 409 (:mod:`kernel_lib.live.executor`).

**Prefix completeness.** :func:`check_available` proves, before any fold, that the store is the
authoritative one (not a :class:`ReplicaView`), that its head is readable, that the sequence is
gapless from 1 to that head (and reaches any position the caller knows was acknowledged), that the
events fold, and that every checkpoint object the log names is present and intact (through
:func:`kernel_lib.checkpoint.restore`'s verification). Otherwise the answer is an
:class:`Availability` with ``ok=False`` and the reasons; a caller reports "unavailable" and never
treats what it could not read as an empty history.

Clocks
------
Lease expiry compares times taken by different processes, so the coordinator uses wall time
(``time.time()``, seconds since the epoch) by default: ``time.monotonic()`` has no meaning
outside the process that read it. The assumption is that the clocks of the processes sharing a
coordinator agree to within a skew much smaller than the lease ttl; a holder that wants a margin
passes ``margin_s`` to :meth:`OwnershipCoordinator.check` / :class:`LeaseCheck`. Safety does not
rest on that assumption: a wrong clock can only make a takeover early or late, and an early one
is still caught by the fences above, because the old owner's epoch is older. Tests inject a
:class:`ManualClock` (or pass ``now=``) instead of sleeping.

Every reading of a coordinator's clock is checked: a clock that raises, or returns anything but a
finite number of seconds (NaN, an infinity, a string, a bool), makes the call raise
:class:`~kernel_lib.errors.CoordinatorUnavailableError` before anything is decided (a lease
service that cannot tell the time cannot grant, renew or vouch for a lease). :class:`LeaseCheck`
turns that error into a reason to withhold, never into "valid". A ``now=`` argument that is not a
finite number is a caller's mistake and raises ConfigError, as does a :class:`ManualClock` started
or advanced to a non-finite time.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernel_lib.checkpoint.restore import restore
from kernel_lib._support.clock import ManualClock  # noqa: F401  (offered here as kernel_lib.ownership.ManualClock)
from kernel_lib._support.checks import check_id, check_seconds, finite_or_none
from kernel_lib._support.sqlite import (
    Layout,
    close_quietly,
    open_database,
    read_transaction,
    write_transaction,
)
from kernel_lib.errors import (
    AcknowledgmentTooWeakError,
    ConfigError,
    CoordinatorUnavailableError,
    KernelError,
    LeaseHeldError,
    LeaseLostError,
    ReconstructionUnavailableError,
    StaleOwnerError,
    StoreError,
    StoreReadOnlyError,
    UnrecoverableStateError,
)
from kernel_lib.core.events import CheckpointV2, Event, WorkspaceChanged
from kernel_lib.log.base import (
    MAX_OWNER_EPOCH,
    AckTier,
    AppendOutcome,
    FailureDomain,
    LogStore,
    RecoveryReport,
    read_bounds,
)
from kernel_lib.core.record import fold, initial_record

__all__ = [
    "Availability",
    "Lease",
    "LeaseCheck",
    "ManualClock",
    "OwnershipCoordinator",
    "ReplicaView",
    "SQLiteOwnershipCoordinator",
    "check_available",
    "check_available_at",
    "require_coordinator_domain",
    "take_ownership",
]


# ------------------------------------------------------------------------------------------------
# leases
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Lease:
    """One grant of a trajectory to an owner (§11.5.1).

    Fields:
        trajectory_id: the trajectory granted.
        owner_id: the claimant the coordinator granted it to.
        owner_epoch: the ownership generation of this grant (the fencing token); strictly larger
            than every earlier grant's for the trajectory.
        granted_at_s: when it was granted, on the coordinator's clock (seconds).
        expires_at_s: when it lapses unless renewed (seconds, same clock).
        released: the owner gave it up before expiry (a later grant needs no wait).
    """

    trajectory_id: str
    owner_id: str
    owner_epoch: int
    granted_at_s: float
    expires_at_s: float
    released: bool = False

    @property
    def ttl_s(self) -> float:
        """Length of the current term: expiry minus grant (or last renewal) time, seconds."""
        return self.expires_at_s - self.granted_at_s

    def remaining_s(self, now_s: float) -> float:
        """Seconds of the term left at ``now_s`` (0 when expired or released)."""
        return 0.0 if self.released else max(0.0, self.expires_at_s - now_s)

    def live(self, now_s: float) -> bool:
        """True while the lease is neither released nor expired at ``now_s``."""
        return not self.released and now_s < self.expires_at_s

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class OwnershipCoordinator(ABC):
    """The lease service of §11.5.1: grants trajectory ownership with a fresh owner_epoch.

    Implementations must decide each call atomically against their authoritative state (a
    compare-and-set on the trajectory's current grant), so that no two live leases and no two
    grants with the same epoch can ever exist for one trajectory. Times are seconds on the
    coordinator's clock (:attr:`clock`, wall time by default; ``now=`` overrides it per call).

    Attributes:
        clock: ``() -> seconds``, used when a call passes no ``now``.
        survives_up_to: the strongest failure domain whose failures a granted lease survives.
        name: a label for messages.
    """

    clock: Callable[[], float] = time.time
    survives_up_to: FailureDomain = FailureDomain.NONE
    name: str = "coordinator"

    @abstractmethod
    def acquire(self, trajectory_id: str, owner_id: str, ttl_s: float, now: float | None = None, *,
                min_epoch: int = 0) -> Lease:
        """Grant the trajectory to ``owner_id`` for ``ttl_s`` seconds under a new owner_epoch.

        The new epoch is ``max(newest epoch granted, min_epoch) + 1``; ``min_epoch`` lets a caller
        place the grant above an epoch some boundary has already seen (e.g. the log's fence).
        Acquiring again as the current holder is a new grant too: its previous epoch becomes
        stale (use :meth:`renew` to extend a lease instead).

        Raises:
            LeaseHeldError: another owner's lease is neither expired nor released at ``now``.
            ConfigError: an empty id, a non-positive or non-finite ttl, a bad ``min_epoch``.
            CoordinatorUnavailableError: the coordinator could not decide (nothing granted).
        """

    @abstractmethod
    def renew(self, lease: Lease, now: float | None = None, ttl_s: float | None = None) -> Lease:
        """Extend ``lease`` to ``now + ttl_s`` (default: its current term) under the same epoch.

        Raises:
            LeaseLostError: the lease is not the current live grant: superseded by a newer epoch,
                expired, released, or unknown to the coordinator (``reason`` says which).
            CoordinatorUnavailableError: the coordinator could not decide.
        """

    @abstractmethod
    def release(self, lease: Lease, now: float | None = None) -> bool:
        """Give the lease up so that another owner need not wait for expiry.

        Returns True if it was the current live grant and is now released, False if it had
        already been superseded, released or had expired (nothing changes then).

        Raises: CoordinatorUnavailableError."""

    @abstractmethod
    def current(self, trajectory_id: str, now: float | None = None) -> Lease | None:
        """The newest grant for the trajectory (live, expired or released), or None if the
        trajectory was never granted. Raises: CoordinatorUnavailableError."""

    # --- built on the four methods ----------------------------------------------------------------
    def _now(self, now: float | None) -> float:
        """``now`` checked (ConfigError unless a finite number), or the clock read and checked.

        Raises:
            CoordinatorUnavailableError: the clock raised, or did not return a finite number of
                seconds (see the module docstring on clocks)."""
        if now is not None:
            return check_seconds("now", now)
        try:
            value = self.clock()
        except Exception as exc:   # noqa: BLE001 - any failure to read the time is the same answer
            raise CoordinatorUnavailableError(f"{self.name}: its clock failed ({type(exc).__name__}: {exc}); "
                                              "nothing was decided") from exc
        t = finite_or_none(value)
        if t is None:
            raise CoordinatorUnavailableError(f"{self.name}: its clock returned {value!r}, not a finite number of "
                                              "seconds; nothing was decided")
        return t

    def check(self, lease: Lease, now: float | None = None, *, margin_s: float = 0.0) -> str | None:
        """Why ``lease`` may not be relied on at ``now`` (None when it is the current grant and
        has more than ``margin_s`` seconds left).

        Raises:
            CoordinatorUnavailableError: the coordinator, or its clock, cannot answer.
            ConfigError: ``now`` or ``margin_s`` is not a finite number (``margin_s`` >= 0)."""
        margin_s = check_seconds("margin_s", margin_s)
        if margin_s < 0:
            raise ConfigError(f"margin_s must be >= 0, got {margin_s!r}")
        t = self._now(now)
        cur = self.current(lease.trajectory_id, t)
        if cur is None or cur.owner_epoch < lease.owner_epoch:
            return (f"the coordinator holds no grant with owner_epoch={lease.owner_epoch} for "
                    f"{lease.trajectory_id} (newest: {cur.owner_epoch if cur else 'none'})")
        if cur.owner_epoch > lease.owner_epoch:
            return (f"ownership of {lease.trajectory_id} moved to owner_epoch={cur.owner_epoch} ({cur.owner_id}); "
                    f"this worker holds owner_epoch={lease.owner_epoch}")
        if cur.owner_id != lease.owner_id:
            return f"owner_epoch={lease.owner_epoch} of {lease.trajectory_id} was granted to {cur.owner_id}"
        if cur.released:
            return f"the lease with owner_epoch={lease.owner_epoch} on {lease.trajectory_id} was released"
        if not t + margin_s < cur.expires_at_s:       # written so that a NaN would withhold too
            late = t - cur.expires_at_s
            return (f"the lease with owner_epoch={lease.owner_epoch} on {lease.trajectory_id} "
                    + (f"expired {late:.3f} s ago" if late >= 0 else
                       f"has {-late:.3f} s left, less than the margin of {margin_s:g} s"))
        return None

    def verify(self, lease: Lease, now: float | None = None, *, margin_s: float = 0.0) -> Lease:
        """Return ``lease`` if :meth:`check` finds nothing wrong; raise LeaseLostError otherwise."""
        why = self.check(lease, now, margin_s=margin_s)
        if why is not None:
            cur = self.current(lease.trajectory_id, now)
            reason = ("superseded" if cur is not None and cur.owner_epoch > lease.owner_epoch else
                      "unknown" if cur is None or cur.owner_epoch < lease.owner_epoch else
                      "released" if cur.released else "expired")
            raise LeaseLostError(why, trajectory_id=lease.trajectory_id, owner_epoch=lease.owner_epoch,
                                 current_epoch=cur.owner_epoch if cur else 0, reason=reason)
        return lease


def require_coordinator_domain(coordinator: OwnershipCoordinator, must_survive: FailureDomain | str) -> None:
    """Refuse a coordinator that survives less than the trajectory's log must (§11.5.1: the lease
    service's own state must survive the failures the log survives).

    Raises:
        AcknowledgmentTooWeakError: ``coordinator.survives_up_to`` is weaker than ``must_survive``.
    """
    need = FailureDomain.parse(must_survive)
    has = coordinator.survives_up_to
    if has < need:
        survives = ", ".join(d.label for d in FailureDomain if FailureDomain.NONE < d <= has) or "no failure at all"
        raise AcknowledgmentTooWeakError(coordinator.name, f"{coordinator.name} grant", survives, need.label)


# ------------------------------------------------------------------------------------------------
# the SQLite coordinator
# ------------------------------------------------------------------------------------------------

_APPLICATION_ID = 0x4B4C4F57   # "KLOW": a kernel_lib ownership database
_LAYOUT_VERSION = 1
_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS leases (
        trajectory_id TEXT PRIMARY KEY,
        owner_id      TEXT    NOT NULL,
        owner_epoch   INTEGER NOT NULL,
        granted_at_s  REAL    NOT NULL,
        expires_at_s  REAL    NOT NULL,
        released      INTEGER NOT NULL DEFAULT 0
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS grants (
        trajectory_id TEXT    NOT NULL,
        owner_epoch   INTEGER NOT NULL,
        owner_id      TEXT    NOT NULL,
        granted_at_s  REAL    NOT NULL,
        expires_at_s  REAL    NOT NULL,
        PRIMARY KEY (trajectory_id, owner_epoch)
    ) WITHOUT ROWID""",
)
#: The layout checked at open (:mod:`kernel_lib._support.sqlite`): application_id, user_version, columns.
_LAYOUT = Layout(
    kind="kernel_lib ownership coordinator", label="ownership coordinator", version=_LAYOUT_VERSION,
    tables={"leases": frozenset({"trajectory_id", "owner_id", "owner_epoch", "granted_at_s", "expires_at_s",
                                 "released"}),
            "grants": frozenset({"trajectory_id", "owner_epoch", "owner_id", "granted_at_s", "expires_at_s"})},
    schema=_SCHEMA, application_id=_APPLICATION_ID)


class SQLiteOwnershipCoordinator(OwnershipCoordinator):
    """Leases in an embedded SQLite file (WAL, ``synchronous=FULL``), shared by every process
    that opens the same file on one host (§11.5.1).

    Tables: ``leases`` holds the current grant per trajectory (owner_id, owner_epoch,
    granted_at_s, expires_at_s, released); ``grants`` keeps every grant ever made (the epoch
    history). Each call is one ``BEGIN IMMEDIATE`` transaction that reads the current row and
    writes the new one only if the read still holds, so two claimants racing from two processes
    get two different answers, never two live leases.

    Args:
        path: the database file (created if missing).
        clock: ``() -> seconds``; default ``time.time`` (see the module docstring on clocks).
        busy_timeout_s: how long a call waits for another process's transaction (seconds).

    Raises:
        CoordinatorUnavailableError: the file cannot be opened, or is another kind of database
            (nothing in it is changed).
    """

    survives_up_to = FailureDomain.HOST_CRASH
    name = "sqlite-coordinator"

    def __init__(self, path: str | os.PathLike, *, clock: Callable[[], float] = time.time,
                 busy_timeout_s: float = 5.0):
        self.path = Path(path)
        self.clock = clock
        self._lock = threading.Lock()
        self._closed = False
        # refuses (nothing changed) a file that is not a coordinator of this layout; WAL, synchronous=FULL
        self._db = open_database(self.path, _LAYOUT, error=CoordinatorUnavailableError,
                                 busy_error=CoordinatorUnavailableError,
                                 busy_timeout_s=check_seconds("busy_timeout_s", busy_timeout_s, positive=True),
                                 journal_mode="WAL", synchronous="FULL")

    @classmethod
    def open(cls, path: str | os.PathLike, **kw) -> SQLiteOwnershipCoordinator:
        """Open (creating if needed) the coordinator at ``path``. See the class docstring."""
        return cls(path, **kw)

    @contextlib.contextmanager
    def _transaction(self, what: str, *, write: bool = True) -> Iterator[sqlite3.Connection]:
        """One transaction: ``BEGIN IMMEDIATE`` (the write lock first, so the read that decides
        is still true at commit) for decisions, a deferred read transaction for reads."""
        with self._lock:
            if self._closed:
                raise CoordinatorUnavailableError(f"ownership coordinator {self.path} is closed", retryable=False)
            transaction = write_transaction if write else read_transaction
            try:   # rolled back on any exception; a lock held past the timeout: CoordinatorUnavailableError
                with transaction(self._db, f"ownership coordinator {self.path}: {what}",
                                 busy_error=CoordinatorUnavailableError) as db:
                    yield db
            except sqlite3.Error as exc:
                raise CoordinatorUnavailableError(f"ownership coordinator {self.path}: {what} failed: {exc}; "
                                                  "nothing was granted or changed") from exc

    @staticmethod
    def _row(db: sqlite3.Connection, trajectory_id: str) -> Lease | None:
        row = db.execute("SELECT owner_id, owner_epoch, granted_at_s, expires_at_s, released FROM leases "
                         "WHERE trajectory_id=?", (trajectory_id,)).fetchone()
        return None if row is None else Lease(trajectory_id, row[0], row[1], row[2], row[3], bool(row[4]))

    @staticmethod
    def _write(db: sqlite3.Connection, lease: Lease) -> None:
        db.execute("INSERT INTO leases VALUES (?,?,?,?,?,?) ON CONFLICT(trajectory_id) DO UPDATE SET "
                   "owner_id=excluded.owner_id, owner_epoch=excluded.owner_epoch, granted_at_s=excluded.granted_at_s, "
                   "expires_at_s=excluded.expires_at_s, released=excluded.released",
                   (lease.trajectory_id, lease.owner_id, lease.owner_epoch, lease.granted_at_s, lease.expires_at_s,
                    int(lease.released)))

    def acquire(self, trajectory_id: str, owner_id: str, ttl_s: float, now: float | None = None, *,
                min_epoch: int = 0) -> Lease:
        """See :meth:`OwnershipCoordinator.acquire`."""
        check_id("trajectory_id", trajectory_id)
        check_id("owner_id", owner_id)
        ttl = check_seconds("ttl_s", ttl_s, positive=True)
        if type(min_epoch) is not int or not 0 <= min_epoch < MAX_OWNER_EPOCH:
            raise ConfigError(f"min_epoch must be an int with 0 <= min_epoch < 2**63 - 1, got {min_epoch!r}")
        t = self._now(now)
        with self._transaction("acquire") as db:
            cur = self._row(db, trajectory_id)
            if cur is not None and cur.live(t) and cur.owner_id != owner_id:
                raise LeaseHeldError(
                    f"{trajectory_id} is leased to {cur.owner_id} under owner_epoch={cur.owner_epoch} for another "
                    f"{cur.remaining_s(t):.3f} s; it can be granted to {owner_id} only after that lease expires or "
                    "is released", trajectory_id=trajectory_id, holder=cur.owner_id, owner_epoch=cur.owner_epoch,
                    expires_at_s=cur.expires_at_s, remaining_s=cur.remaining_s(t))
            epoch = max(cur.owner_epoch if cur else 0, min_epoch) + 1
            if epoch > MAX_OWNER_EPOCH:   # pragma: no cover - needs 2**63 grants
                raise ConfigError(f"{trajectory_id}: owner_epoch would pass 2**63 - 1")
            lease = Lease(trajectory_id, owner_id, epoch, t, t + ttl)
            self._write(db, lease)
            db.execute("INSERT INTO grants VALUES (?,?,?,?,?)",
                       (trajectory_id, epoch, owner_id, lease.granted_at_s, lease.expires_at_s))
        return lease

    def renew(self, lease: Lease, now: float | None = None, ttl_s: float | None = None) -> Lease:
        """See :meth:`OwnershipCoordinator.renew`."""
        t = self._now(now)
        ttl = lease.ttl_s if ttl_s is None else check_seconds("ttl_s", ttl_s, positive=True)
        with self._transaction("renew") as db:
            cur = self._row(db, lease.trajectory_id)
            lost = self._lost(lease, cur, t)
            if lost is not None:
                raise lost
            renewed = Lease(lease.trajectory_id, lease.owner_id, lease.owner_epoch, t, t + ttl)
            self._write(db, renewed)
        return renewed

    @staticmethod
    def _lost(lease: Lease, cur: Lease | None, t: float) -> LeaseLostError | None:
        tid, epoch = lease.trajectory_id, lease.owner_epoch
        newest = cur.owner_epoch if cur else 0
        if cur is None or cur.owner_epoch < epoch or (cur.owner_epoch == epoch and cur.owner_id != lease.owner_id):
            return LeaseLostError(f"the coordinator has no grant owner_epoch={epoch} of {tid} to {lease.owner_id}",
                                  trajectory_id=tid, owner_epoch=epoch, current_epoch=newest, reason="unknown")
        if cur.owner_epoch > epoch:
            return LeaseLostError(f"lease on {tid} lost: owner_epoch={cur.owner_epoch} was granted to {cur.owner_id} "
                                  f"after this lease's owner_epoch={epoch}", trajectory_id=tid, owner_epoch=epoch,
                                  current_epoch=newest, reason="superseded")
        if cur.released:
            return LeaseLostError(f"lease owner_epoch={epoch} on {tid} was released", trajectory_id=tid,
                                  owner_epoch=epoch, current_epoch=newest, reason="released")
        if t >= cur.expires_at_s:
            return LeaseLostError(f"lease owner_epoch={epoch} on {tid} expired {t - cur.expires_at_s:.3f} s ago; "
                                  "acquire again (a new grant gets a new owner_epoch)", trajectory_id=tid,
                                  owner_epoch=epoch, current_epoch=newest, reason="expired")
        return None

    def release(self, lease: Lease, now: float | None = None) -> bool:
        """See :meth:`OwnershipCoordinator.release`."""
        t = self._now(now)
        with self._transaction("release") as db:
            cur = self._row(db, lease.trajectory_id)
            if self._lost(lease, cur, t) is not None:
                return False
            self._write(db, Lease(cur.trajectory_id, cur.owner_id, cur.owner_epoch, cur.granted_at_s,
                                  min(cur.expires_at_s, t), released=True))
        return True

    def current(self, trajectory_id: str, now: float | None = None) -> Lease | None:
        """See :meth:`OwnershipCoordinator.current` (``now`` is not needed to read the row)."""
        with self._transaction("current", write=False) as db:
            return self._row(db, trajectory_id)

    def history(self, trajectory_id: str) -> list[Lease]:
        """Every grant made for the trajectory, oldest first, as first granted (renewals and
        releases are not shown). Raises CoordinatorUnavailableError."""
        with self._transaction("history", write=False) as db:
            rows = db.execute("SELECT owner_id, owner_epoch, granted_at_s, expires_at_s FROM grants "
                              "WHERE trajectory_id=? ORDER BY owner_epoch", (trajectory_id,)).fetchall()
        return [Lease(trajectory_id, r[0], r[1], r[2], r[3]) for r in rows]

    def close(self) -> None:
        """Close the connection. Idempotent; later calls raise CoordinatorUnavailableError."""
        with self._lock:
            if not self._closed:
                self._closed = True
                close_quietly(self._db)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ------------------------------------------------------------------------------------------------
# installing the epoch at the boundaries
# ------------------------------------------------------------------------------------------------


def take_ownership(coordinator: OwnershipCoordinator, store: LogStore, trajectory_id: str, owner_id: str,
                   ttl_s: float, now: float | None = None) -> Lease:
    """Acquire the trajectory and install the new owner_epoch as the log's fence (§11.5.1).

    The grant is placed above the log's current fence (``min_epoch=store.fence(...)``), so the
    new epoch is newer than every epoch the log has seen, and installed with
    :meth:`~kernel_lib.log.base.LogStore.claim_epoch`, which accepts it only if it is still
    strictly newer than the fence when it is written: a claimant that fenced the log in between
    (with or without a coordinator) makes this grant lost, so no two owners hold the same epoch.
    Once this returns, the log refuses any append stamped with an older epoch (StaleOwnerError).
    Read the log *after* this call: no earlier owner can extend it past that point.

    Returns:
        The :class:`Lease`; stamp ``lease.owner_epoch`` on every append (``TrajectoryLog``) and
        hand :class:`LeaseCheck` to the dispatch gate.

    Raises:
        LeaseHeldError: another owner's lease is live.
        LeaseLostError: the same or a newer epoch reached the log between the grant and the fence
            (a faster claimant won); this grant must not be used (it is released).
        CoordinatorUnavailableError; and the store's errors (StoreReadOnlyError, StoreBusyError, ...)
            from ``claim_epoch``: ownership is then not established (the grant is released).
    """
    lease = coordinator.acquire(trajectory_id, owner_id, ttl_s, now, min_epoch=store.fence(trajectory_id))
    try:
        store.claim_epoch(trajectory_id, lease.owner_epoch)
    except BaseException as exc:
        with contextlib.suppress(KernelError):     # a grant that never reached the log blocks nobody
            coordinator.release(lease, now)
        if not isinstance(exc, StaleOwnerError):
            raise
        raise LeaseLostError(f"owner_epoch={lease.owner_epoch} of {trajectory_id} could not be installed in the log: "
                             f"{exc}", trajectory_id=trajectory_id, owner_epoch=lease.owner_epoch,
                             current_epoch=store.fence(trajectory_id), reason="superseded") from exc
    return lease


class LeaseCheck:
    """The dispatch gate's ownership hook (``DispatchGate(fence_check=LeaseCheck(...))``).

    Called as ``check(trajectory_id, owner_epoch)`` at the dispatch-time recheck; returns None
    when ``lease`` is still the trajectory's current grant with more than ``margin_s`` seconds
    left, else the reason to withhold. A coordinator that cannot answer also yields a reason:
    a boundary that cannot verify ownership withholds (§11.5.1).

    Args:
        coordinator: the lease service.
        lease: this worker's grant (renewals keep its epoch, so the first one suffices).
        margin_s: seconds of lease that must remain (covers clock skew and the time from this
            check to the request leaving).
    """

    def __init__(self, coordinator: OwnershipCoordinator, lease: Lease, *, margin_s: float = 0.0):
        self.coordinator, self.lease = coordinator, lease
        self.margin_s = check_seconds("margin_s", margin_s)
        if self.margin_s < 0:
            raise ConfigError(f"margin_s must be >= 0, got {margin_s!r}")

    def __call__(self, trajectory_id: str, owner_epoch: int) -> str | None:
        if trajectory_id != self.lease.trajectory_id:
            return f"the lease is for {self.lease.trajectory_id}, not {trajectory_id}"
        if owner_epoch != self.lease.owner_epoch:
            return f"the writer stamps owner_epoch={owner_epoch} but its lease is owner_epoch={self.lease.owner_epoch}"
        try:
            return self.coordinator.check(self.lease, margin_s=self.margin_s)
        except CoordinatorUnavailableError as exc:
            return f"ownership cannot be verified ({exc})"


# ------------------------------------------------------------------------------------------------
# availability of the authoritative prefix
# ------------------------------------------------------------------------------------------------


@dataclass
class Availability:
    """Whether reconstruction may start, and why not (§11.5.1, §11.3 completeness rule).

    Fields:
        ok: the prefix 1..head is proven complete and authoritative and every required object
            is present; only then may a fold's silence be read as "did not happen".
        head: the store's last sequence number for the trajectory (None: it could not be read).
        reasons: one line per failed proof (empty when ``ok``).
        notes: findings that do not block (e.g. a torn, never-acknowledged tail that open trimmed).
        authoritative: the store claims to be the authoritative log (not a replica).
        fence: the log's fence (newest owner_epoch it has seen), when readable.
        prefix_sha256: the fold's running digest of the prefix (compare two copies with it).
        checkpoint_id: the checkpoint restore's verification started from (None: none, or not checked).
    """

    ok: bool
    head: int | None
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    authoritative: bool = True
    fence: int | None = None
    prefix_sha256: str | None = None
    checkpoint_id: str | None = None

    @property
    def status(self) -> str:
        return "available" if self.ok else "unavailable"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "status": self.status}

    def raise_if_unavailable(self) -> Availability:
        """Return self when ``ok``; raise ReconstructionUnavailableError with the reasons otherwise."""
        if not self.ok:
            raise ReconstructionUnavailableError("reconstruction unavailable: " + "; ".join(self.reasons),
                                                 availability=self)
        return self


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def check_available(store: LogStore, trajectory_id: str, blobs=None, *, min_head: int | None = None,
                    require_events: bool = True) -> Availability:
    """Prove that ``store`` holds the complete authoritative prefix of ``trajectory_id`` and that
    every object recovery needs exists, before any reconstruction (§11.5.1).

    Checks, each failure adding a reason:

    1. the store is authoritative (a store whose ``authoritative`` attribute is False, such as
       :class:`ReplicaView`, may lag: absence of an event there proves nothing);
    2. a read-only view did not stop at an unsettled tail (torn or still being written);
    3. the head is readable, non-zero when ``require_events`` (resuming a trajectory with no
       events is not an empty history, it is a missing one), and at least ``min_head`` when the
       caller knows that position was acknowledged (a shorter log was truncated or is stale);
    4. events 1..head read back gapless, each at its own position and of this trajectory (after
       log compaction, §11.8.3: the retained suffix from the compaction mark);
    5. they fold (the reducer accepts them); a compacted log is proven instead by restoring its
       retained checkpoint and folding the suffix (so it needs ``blobs``);
    6. with ``blobs``: :func:`kernel_lib.checkpoint.restore` to the head succeeds, verifying every
       checkpoint manifest, record snapshot or delta, tree, workspace delta and file blob it
       needs; without ``blobs``, a log that names checkpoint or workspace objects cannot be
       proven complete and is reported so.

    Args:
        store: the log store to read (it is only read).
        trajectory_id: the trajectory.
        blobs: the :class:`~kernel_lib.checkpoint.BlobStore` holding checkpoint objects, or None.
        min_head: a sequence number known to have been acknowledged, or None.
        require_events: report a trajectory without events as unavailable (default True).

    Returns:
        :class:`Availability`. Never raises for a damaged or missing log: that is a reason.

    Raises:
        ConfigError: ``min_head`` is not an int ≥ 0 or None.
    """
    if min_head is not None and (type(min_head) is not int or min_head < 0):
        raise ConfigError(f"min_head must be an int >= 0 or None, got {min_head!r}")
    reasons: list[str] = []
    authoritative = getattr(store, "authoritative", True) is not False
    out = Availability(ok=False, head=None, reasons=reasons, authoritative=authoritative)
    if not authoritative:
        reasons.append(f"the store {getattr(store, 'name', type(store).__name__)!r} is a replica, not the "
                       "authoritative log: it may lack acknowledged events that the authoritative log holds, so "
                       "a missing intent there says nothing about dispatch")
    rec: RecoveryReport | None = getattr(store, "recovery", None)
    if rec is not None:
        out.notes.extend(rec.notes())
        if rec.read_only and rec.torn_tail_found:
            reasons.append(f"the read-only view stops at an unsettled tail at {rec.torn_tail_at} "
                           f"({rec.torn_tail_bytes} bytes, {rec.torn_tail_reason}): a writer may still be extending "
                           "the log, or its owner has not recovered it yet")
    try:
        head = store.head(trajectory_id)
        out.head = head
        out.fence = store.fence(trajectory_id)
    except KernelError as exc:
        reasons.append(f"the head of {trajectory_id!r} cannot be read ({_short(exc)})")
        return out
    if head == 0 and require_events:
        reasons.append(f"the store holds no events of {trajectory_id!r}: there is no history to resume (a missing "
                       "log is not an empty one)")
    if min_head is not None and head < min_head:
        reasons.append(f"the store's head is #{head} but #{min_head} is known to have been acknowledged: the log "
                       "was truncated, or this is not the authoritative copy")
    events: list[Event] = []
    try:
        retired = store.retired_through(trajectory_id)
    except KernelError as exc:
        reasons.append(f"the compaction mark of {trajectory_id!r} cannot be read ({_short(exc)})")
        return out
    try:
        for i, ev in enumerate(store.read(trajectory_id, retired + 1, head), start=retired + 1):
            if ev.sequence_number != i or ev.trajectory_id != trajectory_id:
                reasons.append(f"position #{i} of {trajectory_id!r} holds {ev.trajectory_id!r}#{ev.sequence_number}: "
                               "the prefix is not gapless")
                break
            events.append(ev)
        else:
            if len(events) != head - retired:
                reasons.append(f"the store reports head #{head} but only #{retired + len(events)} events read back: "
                               f"the prefix has a gap after #{retired + len(events)}")
    except KernelError as exc:
        reasons.append(f"the prefix of {trajectory_id!r} cannot be read past #{retired + len(events)} ({_short(exc)})")
    if reasons:
        return out
    if retired:
        return _check_compacted(store, trajectory_id, blobs, out, retired)
    try:
        record = fold(initial_record(trajectory_id), events)
        out.prefix_sha256 = record.prefix_sha256
    except KernelError as exc:
        reasons.append(f"the prefix does not fold ({_short(exc)})")
        return out
    needs_objects = any(isinstance(e.payload, (CheckpointV2, WorkspaceChanged)) for e in events)
    if blobs is None:
        if needs_objects:
            reasons.append("the log names checkpoint or workspace objects, but no blob store was given to prove "
                           "they exist")
    elif events:
        try:
            res = restore(store, trajectory_id, blobs, target=head, verify_blobs=True, lazy_rows=False)
            out.checkpoint_id = res.checkpoint.checkpoint_id if res.checkpoint else None
        except UnrecoverableStateError as exc:
            missing = ", ".join(f"{k} {n[:16]}…" for k, n in exc.missing) or "unnamed"
            reasons.append(f"a required object is missing or damaged ({missing}): {str(exc)[:300]}")
        except KernelError as exc:
            reasons.append(f"the checkpoint objects do not rebuild the prefix ({_short(exc)})")
    out.ok = not reasons
    return out


def _check_compacted(store: LogStore, trajectory_id: str, blobs, out: "Availability", retired: int) -> "Availability":
    """Step 5-6 of :func:`check_available` for a log whose prefix ``1..retired`` log compaction
    retired (§11.8.3): the state is provable only as the retained checkpoint plus the suffix."""
    if blobs is None:
        out.reasons.append(f"log compaction retired #1..#{retired}: the state is recoverable only from the retained "
                           "checkpoint, and no blob store was given to prove its objects exist")
        return out
    try:
        res = restore(store, trajectory_id, blobs, target=out.head, verify_blobs=True, lazy_rows=False)
    except UnrecoverableStateError as exc:
        missing = ", ".join(f"{k} {n[:16]}…" for k, n in exc.missing) or "unnamed"
        out.reasons.append(f"a required object is missing or damaged ({missing}): {str(exc)[:300]}")
        return out
    except KernelError as exc:
        out.reasons.append(f"the retained checkpoint and suffix do not rebuild the state ({_short(exc)})")
        return out
    if res.checkpoint is None:
        out.reasons.append(f"log compaction retired #1..#{retired} but no retained checkpoint rebuilds the state")
        return out
    out.checkpoint_id = res.checkpoint.checkpoint_id
    out.prefix_sha256 = res.record.prefix_sha256
    out.notes.append(f"log compaction retired #1..#{retired}; proven from checkpoint {out.checkpoint_id} and the "
                     f"{res.suffix_events}-event suffix")
    out.ok = True
    return out


def check_available_at(kind: str, path: str | os.PathLike, trajectory_id: str, blobs=None, *,
                       min_head: int | None = None, require_events: bool = True) -> Availability:
    """:func:`check_available` on the store at ``path``, opened read-only (so a missing store is
    reported, never created empty, and nothing on disk changes). Same arguments and result; a
    store that cannot be opened is one more reason."""
    from kernel_lib.log import open_store

    if kind == "memory":
        return Availability(False, None, ["a memory store cannot be reopened: its history died with its process"])
    try:
        store = open_store(kind, path, read_only=True)
    except KernelError as exc:
        return Availability(False, None, [f"the {kind} store at {path} cannot be opened ({_short(exc)})"])
    try:
        return check_available(store, trajectory_id, blobs, min_head=min_head, require_events=require_events)
    finally:
        store.close()


class ReplicaView(LogStore):
    """A read-only view of a log that trails it by ``lag_events`` per trajectory: a stand-in for
    an asynchronously updated replica (§11.3 completeness rule, §11.9 "incomplete replica").

    Reads return what such a replica would hold; :attr:`authoritative` is False, so
    :func:`check_available` refuses to certify it. Appends and fences raise StoreReadOnlyError.
    Closing the view leaves the primary open.
    """

    name = "replica"
    authoritative = False
    read_only = True

    def __init__(self, primary: LogStore, lag_events: int = 1):
        if type(lag_events) is not int or lag_events < 0:
            raise ConfigError(f"lag_events must be an int >= 0, got {lag_events!r}")
        self.primary, self.lag_events = primary, lag_events
        self.offered_tiers = tuple(primary.offered_tiers)
        self.recovery = RecoveryReport(store=self.name, read_only=True)

    def head(self, trajectory_id: str) -> int:
        return max(0, self.primary.head(trajectory_id) - self.lag_events)

    def read(self, trajectory_id: str, start: int = 1, stop: int | None = None) -> Iterator[Event]:
        lo, hi = read_bounds(start, stop)
        top = self.head(trajectory_id)
        return self.primary.read(trajectory_id, lo, top if hi is None else min(hi, top))

    def fence(self, trajectory_id: str) -> int:
        return self.primary.fence(trajectory_id)

    def retired_through(self, trajectory_id: str) -> int:
        return self.primary.retired_through(trajectory_id)

    def trajectories(self) -> list[str]:
        return [t for t in self.primary.trajectories() if self.head(t) > 0]

    def append_batch(self, events: Sequence[Event], tier: AckTier) -> list[AppendOutcome | StoreError]:
        raise StoreReadOnlyError("a replica view takes no appends: write to the authoritative log")

    def install_fence(self, trajectory_id: str, owner_epoch: int) -> None:
        raise StoreReadOnlyError("a replica view takes no fences: install them in the authoritative log")

    def claim_epoch(self, trajectory_id: str, owner_epoch: int | None = None) -> int:
        raise StoreReadOnlyError("a replica view takes no fences: claim epochs in the authoritative log")

    def close(self) -> None:
        pass
