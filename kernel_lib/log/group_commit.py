"""Group commit: many writers, one durable flush (§11.3.4, eq. 2).

Writers call :meth:`GroupCommitter.append` (blocking) or :meth:`GroupCommitter.submit` (a
future). A flusher thread gathers queued events into a batch and hands the batch to the store's
``append_batch`` at the committer's tier: one write and one barrier for the whole batch. A batch
is closed when it reaches ``batch_cap`` events or when its first arrival has waited
``flush_timer_s``, whichever comes first. No writer is released before its batch's flush returned.

For every event the committer measures the two terms of eq. 2 separately:

* ``queue_wait_s`` = flush start − arrival (queueing and aggregation), and
* ``storage_s`` = durable acknowledgment − flush start (the shared storage operation),

so ``queue_wait_s + storage_s`` is the event's whole wait. ``storage_s / batch_size`` is the
amortized storage cost per event; it shrinks with the batch while every member still waits the
whole flush.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable

from ..errors import ConfigError, StoreClosedError, StoreError
from ..events import Event
from .base import AckTier, AppendOutcome, LogStore


@dataclass(frozen=True, slots=True)
class GroupAck:
    """One event's acknowledgment through group commit, with its eq. 2 terms (seconds)."""

    outcome: AppendOutcome
    queue_wait_s: float
    storage_s: float
    batch_size: int

    @property
    def wait_s(self) -> float:
        """Whole wait from arrival to durable acknowledgment (eq. 2)."""
        return self.queue_wait_s + self.storage_s


@dataclass
class FlushStats:
    """Per-flush record: size, storage time (s). Appended by the flusher thread."""

    batch_sizes: list[int] = field(default_factory=list)
    storage_s: list[float] = field(default_factory=list)
    acks: list[GroupAck] = field(default_factory=list)


class GroupCommitter:
    """Coalesce concurrent appends into shared flushes.

    Args:
        store: any :class:`LogStore`.
        tier: acknowledgment tier of every flush (must be offered by ``store``).
        flush_timer_s: longest the first event of a batch waits for company (≥ 0).
        batch_cap: most events per flush (≥ 1).
        clock: monotonic clock in seconds (injectable for tests).

    Raises:
        ConfigError: a parameter out of range. TierNotOfferedError: tier not offered by store.
    """

    def __init__(self, store: LogStore, tier: AckTier, *, flush_timer_s: float = 0.001, batch_cap: int = 64,
                 clock: Callable[[], float] = time.perf_counter, keep_stats: bool = True):
        if flush_timer_s < 0 or batch_cap < 1:
            raise ConfigError(f"need flush_timer_s >= 0 and batch_cap >= 1, got {flush_timer_s}, {batch_cap}")
        store.check_tier(tier)
        self.store, self.tier = store, tier
        self.flush_timer_s, self.batch_cap = flush_timer_s, batch_cap
        self._clock = clock
        self._queue: deque[tuple[Event, float, Future]] = deque()
        self._cv = threading.Condition()
        self._closed = False
        self.stats = FlushStats() if keep_stats else None
        self._thread = threading.Thread(target=self._run, name="group-commit", daemon=True)
        self._thread.start()

    def submit(self, event: Event) -> "Future[GroupAck]":
        """Queue ``event``; the future resolves to a :class:`GroupAck` or raises the store's error."""
        fut: Future = Future()
        with self._cv:
            if self._closed:
                raise StoreClosedError("group committer is closed")
            self._queue.append((event, self._clock(), fut))
            self._cv.notify()
        return fut

    def append(self, event: Event) -> GroupAck:
        """Queue ``event`` and block until its batch is durable. Raises the store's error for it."""
        return self.submit(event).result()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._queue and not self._closed:
                    self._cv.wait()
                if not self._queue and self._closed:
                    return
                deadline = self._queue[0][1] + self.flush_timer_s
                while len(self._queue) < self.batch_cap and not self._closed:
                    left = deadline - self._clock()
                    if left <= 0:
                        break
                    self._cv.wait(left)
                n = min(len(self._queue), self.batch_cap)
                batch = [self._queue.popleft() for _ in range(n)]
            self._flush(batch)

    def _flush(self, batch: list[tuple[Event, float, Future]]) -> None:
        start = self._clock()
        try:
            results = self.store.append_batch([b[0] for b in batch], self.tier)
        except BaseException as exc:  # the flush failed: nobody in the batch is acknowledged
            for _, _, fut in batch:
                fut.set_exception(exc if isinstance(exc, StoreError) else StoreError(f"flush failed: {exc!r}"))
            return
        done = self._clock()
        storage = done - start
        if self.stats is not None:
            self.stats.batch_sizes.append(len(batch))
            self.stats.storage_s.append(storage)
        for (ev, arrived, fut), res in zip(batch, results):
            if isinstance(res, Exception):
                fut.set_exception(res)
                continue
            ack = GroupAck(res, start - arrived, storage, len(batch))
            if self.stats is not None:
                self.stats.acks.append(ack)
            fut.set_result(ack)

    def close(self) -> None:
        """Flush what is queued, then stop the flusher thread. Idempotent."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._thread.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
