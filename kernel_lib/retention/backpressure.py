"""Backpressure when the store is full: stall, never drop (§11.8.4).

:class:`BoundedStore` wraps a log store with a byte budget for retained events. An append that
does not fit first asks ``reclaim`` to free space the contracts allow (typically
:func:`~kernel_lib.retention.compact` plus :func:`~kernel_lib.retention.collect_garbage`,
which honour every hold), then waits for space (another thread compacting, an operator raising
the budget) up to ``stall_timeout_s``. If space never comes it raises
:class:`~kernel_lib.errors.BackpressureError`: the append was not made and nothing is
acknowledged, so the caller (the dispatch gate) must keep the trajectory stalled. It never
overwrites or drops a stored event to make room.

Accounting is logical: the sum of the canonical bytes of the retained events (what log
compaction can give back), counted at construction and kept current by appends and by
:meth:`BoundedStore.retire_prefix`.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from kernel_lib.errors import BackpressureError, ConfigError, StoreError
from kernel_lib.core.events import Event
from kernel_lib.log.base import AckTier, AppendOutcome, LogStore


@dataclass
class StallStats:
    """How often and how long appends waited for space (seconds, measured)."""

    stalls: int = 0
    stalled_s: float = 0.0
    refused: int = 0
    reclaims: int = 0


class BoundedStore(LogStore):
    """``inner`` with at most ``capacity_bytes`` of retained event bytes.

    Args:
        inner: the log store (its tiers, fences and compaction are used as they are).
        capacity_bytes: the budget (> 0).
        stall_timeout_s: how long an append waits for space before BackpressureError (>= 0).
        reclaim: called (no arguments) when an append does not fit, before waiting; should free
            space only as the retention contracts allow and may raise (the error is kept in
            :attr:`last_reclaim_error` and the append keeps waiting).

    Raises:
        ConfigError: bad budget or timeout.
    """

    def __init__(self, inner: LogStore, capacity_bytes: int, *, stall_timeout_s: float = 5.0,
                 reclaim: Callable[[], object] | None = None):
        if type(capacity_bytes) is not int or capacity_bytes <= 0:
            raise ConfigError(f"capacity_bytes must be an int > 0, got {capacity_bytes!r}")
        if (isinstance(stall_timeout_s, bool) or not isinstance(stall_timeout_s, (int, float))
                or not math.isfinite(stall_timeout_s) or stall_timeout_s < 0):
            raise ConfigError(f"stall_timeout_s must be a finite number >= 0, got {stall_timeout_s!r}")
        self.inner, self.capacity_bytes, self.stall_timeout_s, self.reclaim = (inner, capacity_bytes,
                                                                                stall_timeout_s, reclaim)
        self.name = f"bounded {inner.name}"
        self.offered_tiers = tuple(inner.offered_tiers)
        self.recovery = inner.recovery
        self.read_only = inner.read_only
        self.stats = StallStats()
        self.last_reclaim_error: BaseException | None = None
        self._space = threading.Condition()
        self._retiring = threading.Lock()    # one compaction at a time counts its freed bytes
        self._used = sum(len(e.canonical) for t in inner.trajectories()
                         for e in inner.read(t, inner.retired_through(t) + 1))

    @property
    def authoritative(self) -> bool:
        """As authoritative as the wrapped store (a bounded replica is still a replica)."""
        return getattr(self.inner, "authoritative", True) is not False

    @property
    def used_bytes(self) -> int:
        with self._space:
            return self._used

    def set_capacity(self, capacity_bytes: int) -> None:
        """Change the budget (e.g. an operator added disk); wakes stalled appends."""
        if type(capacity_bytes) is not int or capacity_bytes <= 0:
            raise ConfigError(f"capacity_bytes must be an int > 0, got {capacity_bytes!r}")
        with self._space:
            self.capacity_bytes = capacity_bytes
            self._space.notify_all()

    def _fits(self, need: int) -> bool:
        return self._used + need <= self.capacity_bytes

    def append_batch(self, events: Sequence[Event], tier: "AckTier | str") -> list["AppendOutcome | StoreError"]:
        """As :meth:`LogStore.append_batch`, after waiting for room for the whole batch.

        Raises:
            BackpressureError: no room within ``stall_timeout_s`` (nothing appended), or the
                batch alone is larger than the budget.
        """
        events = list(events)
        need = sum(len(e.canonical) for e in events if isinstance(e, Event))
        if need and need + self.used_bytes > self.capacity_bytes:
            need -= self._already_held(events)     # an identical retry needs no new bytes
        if need > self.capacity_bytes:
            self.stats.refused += 1
            raise BackpressureError(f"a batch of {need} bytes can never fit a budget of {self.capacity_bytes} bytes; "
                                    "nothing was appended", retryable=False)   # no release can make it fit
        t0 = time.monotonic()
        stalled = False
        with self._space:
            if not self._fits(need) and self.reclaim is not None:
                self._space.release()
                try:
                    self.stats.reclaims += 1
                    self.reclaim()
                except Exception as exc:     # the append keeps waiting; the reason is kept
                    self.last_reclaim_error = exc
                finally:
                    self._space.acquire()
            while not self._fits(need):
                stalled = True
                left = self.stall_timeout_s - (time.monotonic() - t0)
                if left <= 0:
                    self.stats.stalls += 1
                    self.stats.refused += 1
                    self.stats.stalled_s += time.monotonic() - t0
                    raise BackpressureError(
                        f"store {self.inner.name} is full ({self._used} of {self.capacity_bytes} bytes retained, "
                        f"{need} more needed) and no space was released within {self.stall_timeout_s} s: the append "
                        "was not made and is not acknowledged; keep the trajectory stalled (nothing stored was "
                        "dropped)")
                self._space.wait(min(left, 0.05))
            self._used += need       # reserve before releasing the lock
        try:
            out = self.inner.append_batch(events, tier)
        except BaseException:
            with self._space:
                self._used -= need
                self._space.notify_all()
            raise
        stored = sum(len(e.canonical) for e, o in zip(events, out) if isinstance(o, AppendOutcome) and not o.duplicate)
        unused = need - stored       # reserved but not stored (refused, or an identical retry)
        with self._space:
            self._used -= unused
            if stalled:
                self.stats.stalls += 1
                self.stats.stalled_s += time.monotonic() - t0
            if unused:
                self._space.notify_all()
        return out

    def _already_held(self, events: list) -> int:
        """Bytes of the batch's events the inner store already holds identically (by position)."""
        held = 0
        for e in events:
            if not isinstance(e, Event):
                continue
            try:
                if e.sequence_number <= self.inner.head(e.trajectory_id) and e.sequence_number > \
                        self.inner.retired_through(e.trajectory_id):
                    stored = next(iter(self.inner.read(e.trajectory_id, e.sequence_number, e.sequence_number)), None)
                    if stored is not None and stored.digest == e.digest:
                        held += len(e.canonical)
            except StoreError:
                continue
        return held

    def retire_prefix(self, trajectory_id: str, through: int, *, checkpoint_event_id: str) -> int:
        """Compaction through the wrapper, so the freed bytes are counted (and stalled appends
        woken). Concurrent compactions through one wrapper are serialized, so no freed byte is
        counted twice."""
        with self._retiring:
            before = self.inner.retired_through(trajectory_id)
            freed = (sum(len(e.canonical) for e in self.inner.read(trajectory_id, before + 1, through))
                     if type(through) is int and through > before else 0)
            mark = self.inner.retire_prefix(trajectory_id, through, checkpoint_event_id=checkpoint_event_id)
            if mark > before:
                with self._space:
                    self._used -= freed
                    self._space.notify_all()
            return mark

    # --- delegation -----------------------------------------------------------------------------------
    def read(self, trajectory_id: str, start: int = 1, stop: int | None = None) -> Iterator[Event]:
        return self.inner.read(trajectory_id, start, stop)

    def head(self, trajectory_id: str) -> int:
        return self.inner.head(trajectory_id)

    def fence(self, trajectory_id: str) -> int:
        return self.inner.fence(trajectory_id)

    def install_fence(self, trajectory_id: str, owner_epoch: int) -> None:
        self.inner.install_fence(trajectory_id, owner_epoch)

    def claim_epoch(self, trajectory_id: str, owner_epoch: "int | None" = None) -> int:
        return self.inner.claim_epoch(trajectory_id, owner_epoch)

    def retired_through(self, trajectory_id: str) -> int:
        return self.inner.retired_through(trajectory_id)

    def trajectories(self) -> list[str]:
        return self.inner.trajectories()

    def close(self) -> None:
        self.inner.close()
