"""A follower replica that advertises only its gap-free prefix and keeps original provenance (§11.8.4).

:class:`FollowerReplica` receives a primary's events in whatever order the network delivers
them (:meth:`FollowerReplica.receive`). Events past a gap are staged in memory; the contiguous
run from the replica's head is applied, in order, to its own backing store. Consequences:

* :meth:`FollowerReplica.recoverable_prefix` (and ``head``/``read``) never go past the first
  missing position, however many later events are staged;
* each event is stored as the primary's canonical bytes: the original ``owner_epoch``,
  ``control_epoch`` and provenance (tenant, issuer) are kept, never restamped with the
  replica's identity (the digest would change if they were);
* the replica takes no fresh appends (:class:`~kernel_lib.errors.StoreReadOnlyError`): only the
  authoritative log checks leases and fences for new work. A received event that conflicts with
  one already held at the same position or id is an integrity violation
  (:class:`~kernel_lib.errors.ConflictingDuplicateError`), and an identical one is a duplicate;
* :attr:`authoritative` is False, so :func:`kernel_lib.ownership.leases.check_available` never
  certifies a replica: an absent intent there does not prove non-dispatch (§11.9).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Sequence

from kernel_lib.errors import ConflictingDuplicateError, StoreError, StoreReadOnlyError
from kernel_lib.core.events import Event
from kernel_lib.log.base import AckTier, AppendOutcome, LogStore, RecoveryReport, check_events
from kernel_lib.log.memory import MemoryStore


@dataclass
class ReceiveReport:
    """What one :meth:`FollowerReplica.receive` call did, per trajectory touched."""

    applied: int = 0
    staged: int = 0
    duplicates: int = 0
    heads: dict[str, int] = field(default_factory=dict)
    first_gaps: dict[str, int | None] = field(default_factory=dict)


class FollowerReplica(LogStore):
    """A read-only follower of some primary log.

    Args:
        backing: where applied events are kept (default: a new :class:`MemoryStore`; pass an
            SQLite store for a durable follower). Its strongest tier is used for applying.
        name: shown in messages and in :func:`~kernel_lib.ownership.leases.check_available`'s reasons.
    """

    authoritative = False
    read_only = True

    def __init__(self, backing: LogStore | None = None, *, name: str = "follower replica"):
        self.backing = backing if backing is not None else MemoryStore()
        self.name = name
        self.offered_tiers = tuple(self.backing.offered_tiers)
        self.recovery = RecoveryReport(store=name, read_only=True)
        self._tier = self.backing.strongest_tier()
        self._staged: dict[str, dict[int, Event]] = {}
        self._lock = threading.Lock()

    # --- replication --------------------------------------------------------------------------------
    def receive(self, events: Iterable[Event]) -> ReceiveReport:
        """Take replicated events in any order; apply the contiguous run, stage the rest.

        Raises:
            ConflictingDuplicateError: an event differs from the one held (applied or staged) at
                its position; nothing of that trajectory past the conflict is applied.
            StoreError: ``events`` is not a sequence of Events (nothing staged).
        """
        events = check_events(events)         # the whole batch, before anything is staged
        rep = ReceiveReport()
        with self._lock:
            touched: set[str] = set()
            for ev in events:
                t = ev.trajectory_id
                touched.add(t)
                head = self.backing.head(t)
                if ev.sequence_number <= head:
                    held = next(iter(self.backing.read(t, ev.sequence_number, ev.sequence_number)))
                    if held.canonical != ev.canonical:
                        raise ConflictingDuplicateError(
                            f"{self.name}: {t}#{ev.sequence_number} already holds event {held.event_id} (digest "
                            f"{held.digest[:12]}…); the received {ev.event_id} (digest {ev.digest[:12]}…) differs: "
                            "integrity violation or split brain, nothing overwritten")
                    rep.duplicates += 1
                    continue
                staged = self._staged.setdefault(t, {})
                other = staged.get(ev.sequence_number)
                if other is not None:
                    if other.canonical != ev.canonical:
                        raise ConflictingDuplicateError(
                            f"{self.name}: two different events received for {t}#{ev.sequence_number} "
                            f"({other.event_id} and {ev.event_id}): integrity violation or split brain")
                    rep.duplicates += 1
                    continue
                staged[ev.sequence_number] = ev
                rep.staged += 1
            for t in touched:
                rep.applied += self._drain(t)
                rep.heads[t] = self.backing.head(t)
                rep.first_gaps[t] = self._first_gap(t)
            rep.staged -= rep.applied
        return rep

    def _drain(self, t: str) -> int:
        staged = self._staged.get(t, {})
        head = self.backing.head(t)
        run: list[Event] = []
        while head + len(run) + 1 in staged:
            run.append(staged[head + len(run) + 1])
        if not run:
            return 0
        out = self.backing.append_batch(run, self._tier)
        applied = 0
        for ev, o in zip(run, out):
            if isinstance(o, Exception):
                raise o
            staged.pop(ev.sequence_number, None)
            applied += 1
        return applied

    def _first_gap(self, t: str) -> int | None:
        staged = self._staged.get(t)
        return self.backing.head(t) + 1 if staged else None

    def recoverable_prefix(self, trajectory_id: str) -> int:
        """The last position up to which this replica holds every event (its advertised head)."""
        return self.backing.head(trajectory_id)

    def staged(self, trajectory_id: str) -> list[int]:
        """Positions received past the first gap, held in memory and not advertised."""
        with self._lock:
            return sorted(self._staged.get(trajectory_id, {}))

    def first_gap(self, trajectory_id: str) -> int | None:
        """The first missing position when later ones are staged, else None."""
        with self._lock:
            return self._first_gap(trajectory_id)

    # --- LogStore (read side) --------------------------------------------------------------------------
    def read(self, trajectory_id: str, start: int = 1, stop: int | None = None) -> Iterator[Event]:
        return self.backing.read(trajectory_id, start, stop)

    def head(self, trajectory_id: str) -> int:
        return self.backing.head(trajectory_id)

    def fence(self, trajectory_id: str) -> int:
        return self.backing.fence(trajectory_id)

    def retired_through(self, trajectory_id: str) -> int:
        return self.backing.retired_through(trajectory_id)

    def trajectories(self) -> list[str]:
        return self.backing.trajectories()

    def append_batch(self, events: Sequence[Event], tier: AckTier) -> list[AppendOutcome | StoreError]:
        raise StoreReadOnlyError(f"{self.name} takes no fresh appends: write to the authoritative log, whose fence "
                                 "and lease checks decide who may append")

    def install_fence(self, trajectory_id: str, owner_epoch: int) -> None:
        raise StoreReadOnlyError(f"{self.name} takes no fences: install them in the authoritative log")

    def claim_epoch(self, trajectory_id: str, owner_epoch: int | None = None) -> int:
        raise StoreReadOnlyError(f"{self.name} cannot grant ownership: claim the epoch in the authoritative log")

    def close(self) -> None:
        self.backing.close()
