"""Volatile in-memory log store: what a worker that keeps its log in its own memory has.

Its only tier is :attr:`AckTier.MEMORY`, which survives no failure at all (§11.3.1, table 2:
"an event queued only in the runtime's own memory"). It exists to show what is lost, and as a
fast store for simulation and tests. Opening a trajectory that must survive even a process crash
on it is refused. Arguments are checked with the same helpers as the durable stores (§11.8.4).
"""

from __future__ import annotations

import threading
from typing import Iterator, Sequence

from kernel_lib.errors import StoreClosedError, StoreError
from kernel_lib.core.events import Event
from kernel_lib.log.base import (
    AckTier,
    AppendOutcome,
    LogStore,
    RecoveryReport,
    StoredRef,
    decide_append,
    check_events,
    check_retire_args,
    prefix_retired,
    check_claim_args,
    check_fence_args,
    check_fence_not_older,
    next_claimed_epoch,
    read_bounds,
)


class MemoryStore(LogStore):
    """A log held in a Python list per trajectory; gone when the process is."""

    name = "memory"
    offered_tiers = (AckTier.MEMORY,)

    def __init__(self) -> None:
        self._events: dict[str, list[Event]] = {}
        self._ids: dict[str, StoredRef] = {}
        self._fences: dict[str, int] = {}
        self._retired: dict[str, tuple[int, str]] = {}   # trajectory -> (retired through, checkpoint event id)
        self._lock = threading.Lock()
        self._closed = False
        self.recovery = RecoveryReport(store=self.name)

    def _open(self) -> None:
        if self._closed:
            raise StoreClosedError("memory store is closed")

    def append_batch(self, events: Sequence[Event], tier: "AckTier | str") -> list["AppendOutcome | StoreError"]:
        """See :meth:`LogStore.append_batch`. Raises TierNotOfferedError, StoreError (a member
        that is not an Event), StoreClosedError."""
        tier = self.check_tier(tier)
        events = check_events(events)
        out: list[AppendOutcome | StoreError] = []
        with self._lock:
            self._open()
            for ev in events:
                log = self._events.setdefault(ev.trajectory_id, [])
                base = self._retired.get(ev.trajectory_id, (0, ""))[0]
                decided = decide_append(ev, self._ids.get(ev.event_id), None, base + len(log),
                                        self._fences.get(ev.trajectory_id, 0), tier)
                if decided is not None:
                    out.append(decided)
                    continue
                log.append(ev)
                self._ids[ev.event_id] = StoredRef(ev.trajectory_id, ev.sequence_number, ev.digest)
                if ev.owner_epoch > self._fences.get(ev.trajectory_id, 0):
                    self._fences[ev.trajectory_id] = ev.owner_epoch
                out.append(AppendOutcome(ev.event_id, ev.trajectory_id, ev.sequence_number, tier))
        return out

    def read(self, trajectory_id: str, start: int = 1, stop: int | None = None) -> Iterator[Event]:
        lo, hi = read_bounds(start, stop)
        with self._lock:
            self._open()
            log = self._events.get(trajectory_id, ())
            base, ckpt = self._retired.get(trajectory_id, (0, ""))
            end = base + len(log) if hi is None else min(hi, base + len(log))
            if end < lo:
                return iter(())
            prefix_retired(trajectory_id, lo, base, ckpt, "memory log ")
            chunk = list(log[lo - 1 - base:end - base])
        return iter(chunk)

    def head(self, trajectory_id: str) -> int:
        with self._lock:
            self._open()
            return self._retired.get(trajectory_id, (0, ""))[0] + len(self._events.get(trajectory_id, ()))

    def retired_through(self, trajectory_id: str) -> int:
        with self._lock:
            self._open()
            return self._retired.get(trajectory_id, (0, ""))[0]

    def retire_prefix(self, trajectory_id: str, through: int, *, checkpoint_event_id: str) -> int:
        """See :meth:`LogStore.retire_prefix` (under the store's lock)."""
        with self._lock:
            self._open()
            log = self._events.get(trajectory_id, [])
            base = self._retired.get(trajectory_id, (0, ""))[0]
            check_retire_args(trajectory_id, through, base + len(log), checkpoint_event_id)
            if through <= base:
                return base
            self._events[trajectory_id] = log[through - base:]
            self._retired[trajectory_id] = (through, checkpoint_event_id)
            return through

    def fence(self, trajectory_id: str) -> int:
        with self._lock:
            self._open()
            return self._fences.get(trajectory_id, 0)

    def install_fence(self, trajectory_id: str, owner_epoch: int) -> None:
        check_fence_args(trajectory_id, owner_epoch)
        with self._lock:
            self._open()
            cur = self._fences.get(trajectory_id, 0)
            check_fence_not_older(trajectory_id, owner_epoch, cur)
            self._fences[trajectory_id] = owner_epoch

    def claim_epoch(self, trajectory_id: str, owner_epoch: "int | None" = None) -> int:
        """See :meth:`LogStore.claim_epoch`: read and raise the fence under the store's lock."""
        check_claim_args(trajectory_id, owner_epoch)
        with self._lock:
            self._open()
            epoch = next_claimed_epoch(trajectory_id, owner_epoch, self._fences.get(trajectory_id, 0))
            self._fences[trajectory_id] = epoch
            return epoch

    def trajectories(self) -> list[str]:
        with self._lock:
            self._open()
            return sorted(t for t, evs in self._events.items() if evs)

    def close(self) -> None:
        self._closed = True
