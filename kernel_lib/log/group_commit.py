"""Group commit: many writers, one durable flush (§11.3.4, eq. 2).

Writers call :meth:`GroupCommitter.append` (blocking) or :meth:`GroupCommitter.submit` (a
ticket). Events join the *open batch*; a flusher thread closes it and hands it to the store's
``append_batch`` at the committer's tier: one write and one barrier for the whole batch. No
writer is released before its batch's flush returned.

When is the open batch closed? At the first of:

* it holds ``batch_cap`` events;
* its first arrival has waited ``flush_timer_s`` (the flush timer bounds the aggregation delay);
* it holds an event from every writer thread active in the last two flushes (adaptive close: in
  steady state the same writers come back after every acknowledgment, so waiting longer only
  adds queueing delay, and a lone writer is flushed at once instead of waiting out the timer).

For every event the committer measures the two terms of eq. 2 separately:

* ``queue_wait_s`` = flush start − arrival (queueing and aggregation), and
* ``storage_s`` = durable acknowledgment − flush start (the shared storage operation),

so ``queue_wait_s + storage_s`` is the event's whole wait.

Backpressure: a committer holds at most ``queued_batches_max`` batches ahead of its flusher (the
open batch and full ones waiting; default :data:`kernel_lib.limits.GROUP_COMMIT_QUEUED_BATCHES_MAX`).
A writer whose events need a new batch while that many are queued waits until a flush takes one;
it is never dropped. Only a writer that passes ``timeout_s`` gets
:class:`~kernel_lib.errors.GroupCommitBackpressureError` (its events not queued) when the wait
outlasts it.

Two committers share this policy: :class:`GroupCommitter` for writer *threads* (each waiting
writer is an OS thread; on a small VM every wake-up is a thread hand-off of tens of µs), and
:class:`AsyncGroupCommitter` for writer *tasks* on one asyncio loop (an async agent runtime),
where waiting costs a future and only the flush itself leaves the loop. ``storage_s / batch_size`` is the
amortized storage cost per event; it shrinks with the batch while every member still waits the
whole flush.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from kernel_lib.errors import ConfigError, GroupCommitBackpressureError, StoreClosedError, StoreError
from kernel_lib.core.events import Event
from kernel_lib.limits import GROUP_COMMIT_QUEUED_BATCHES_MAX
from kernel_lib.log.base import AckTier, AppendOutcome, LogStore, check_events


def _check_timeout(timeout_s: float | None) -> float | None:
    if timeout_s is None:
        return None
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not math.isfinite(timeout_s) \
            or timeout_s < 0:
        raise ConfigError(f"timeout_s must be None or a finite number of seconds >= 0, got {timeout_s!r}")
    return float(timeout_s)


def _backpressure(n: int, queued: int, timeout_s: float) -> GroupCommitBackpressureError:
    return GroupCommitBackpressureError(
        f"group commit: {queued} batches were queued ahead of the flusher (the bound) for the whole "
        f"{timeout_s:g} s timeout; these {n} event(s) were not queued and are not acknowledged")


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
    """Per-flush sizes and storage times (s), and every acknowledgment, kept by the flusher."""

    batch_sizes: list[int] = field(default_factory=list)
    storage_s: list[float] = field(default_factory=list)
    acks: list[GroupAck] = field(default_factory=list)


class _Batch:
    """The events of one flush and their writers' tickets."""

    __slots__ = ("events", "arrivals", "tickets", "results", "error")

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.arrivals: list[float] = []
        self.tickets: list[Ticket] = []
        self.results: list[GroupAck | StoreError] = []
        self.error: BaseException | None = None


class Ticket:
    """A queued event's claim on its acknowledgment.

    Each ticket holds its own lock, taken at creation and released by the flusher once the batch
    is durable: a waiting writer wakes without contending for any lock shared with the others.
    """

    __slots__ = ("_batch", "_index", "_lock", "_done")

    def __init__(self, batch: _Batch, index: int):
        self._batch, self._index = batch, index
        self._lock = threading.Lock()
        self._lock.acquire()
        self._done = False

    def _release(self) -> None:
        self._done = True
        self._lock.release()

    def done(self) -> bool:
        return self._done

    def result(self, timeout: float | None = None) -> GroupAck:
        """Block until the event's batch is durable. Raises the store's error for this event,
        StoreError if the whole flush failed, TimeoutError if ``timeout`` (s) passed first."""
        if not self._done:
            if not self._lock.acquire(timeout=-1 if timeout is None else timeout):
                raise TimeoutError("group commit acknowledgment not received in time")
            self._lock.release()   # let a second result() call through
        if self._batch.error is not None:
            raise self._batch.error
        res = self._batch.results[self._index]
        if isinstance(res, Exception):
            raise res
        return res


class _CommitterCore:
    """Batch-closing policy, statistics and acknowledgments shared by both committers."""

    def __init__(self, store: LogStore, tier: AckTier, flush_timer_s: float, batch_cap: int, adaptive: bool,
                 clock: Callable[[], float], keep_stats: bool,
                 queued_batches_max: int = GROUP_COMMIT_QUEUED_BATCHES_MAX):
        timer_ok = (isinstance(flush_timer_s, (int, float)) and not isinstance(flush_timer_s, bool)
                    and math.isfinite(flush_timer_s) and flush_timer_s >= 0)
        cap_ok = isinstance(batch_cap, int) and not isinstance(batch_cap, bool) and batch_cap >= 1
        if not (timer_ok and cap_ok):
            raise ConfigError(f"need a finite flush_timer_s >= 0 (seconds) and an int batch_cap >= 1, got "
                              f"{flush_timer_s!r}, {batch_cap!r}")
        if isinstance(queued_batches_max, bool) or not isinstance(queued_batches_max, int) or queued_batches_max < 1:
            raise ConfigError(f"queued_batches_max must be an int >= 1, got {queued_batches_max!r}")
        self.store, self.tier = store, store.check_tier(tier)
        self.flush_timer_s, self.batch_cap, self.adaptive = flush_timer_s, batch_cap, adaptive
        self.queued_batches_max = queued_batches_max
        self._clock = clock
        self._writers: dict[object, int] = {}   # writer (thread id or task) -> flush it last joined
        self._flush_no = 0
        self._closed = False
        self.stats = FlushStats() if keep_stats else None

    def _target(self) -> int:
        """Adaptive close size: writers seen in this or the previous flush."""
        if not self.adaptive:
            return self.batch_cap
        recent = self._flush_no - 1
        return sum(1 for last in self._writers.values() if last >= recent)

    def _joined(self, writer: object, n: int, added: int) -> bool:
        """Note a writer's arrival of ``added`` events, leaving ``n`` in the open batch; True if the
        flusher should look at the batch now (it was empty, so its timer starts, or it is due)."""
        self._writers[writer] = self._flush_no
        return n == added or n >= self.batch_cap or n >= self._target()

    def _deadline(self, first_arrival: float, n: int) -> float:
        # the timer bounds the delay the committer adds, not time spent behind the last flush
        return max(first_arrival, self._clock() if n < self._target() else 0.0) + self.flush_timer_s

    def _due(self, n: int) -> bool:
        return n >= self.batch_cap or n >= self._target()

    def _needs_new_batch(self, last_batch_size: int | None, n: int) -> bool:
        """Do ``n`` events need a batch of their own (none open, or the open one cannot take them)?"""
        return last_batch_size is None or last_batch_size + n > self.batch_cap

    def _closed_batch(self) -> None:
        self._flush_no += 1
        if len(self._writers) > 4 * self.batch_cap:   # forget writers long gone
            self._writers = {k: v for k, v in self._writers.items() if v >= self._flush_no - 2}

    def _acks(self, arrivals: list[float], results: list, start: float, storage: float) -> list:
        size = len(arrivals)
        out = [res if isinstance(res, Exception) else GroupAck(res, start - arrived, storage, size)
               for arrived, res in zip(arrivals, results)]
        if self.stats is not None:
            self.stats.batch_sizes.append(size)
            self.stats.storage_s.append(storage)
            self.stats.acks.extend(a for a in out if isinstance(a, GroupAck))
        return out

    @staticmethod
    def _as_store_error(exc: BaseException) -> StoreError:
        """``exc`` if it is a StoreError, else a StoreError caused by it. The committer keeps
        running; a store whose write was interrupted has marked itself failed, so a retry of the
        batch gets StoreFailedError instead of writing it twice."""
        if isinstance(exc, StoreError):
            return exc
        err = StoreError(f"flush failed: {exc!r}; nothing in this batch is acknowledged")
        err.__cause__ = exc
        return err


class GroupCommitter(_CommitterCore):
    """Coalesce appends from concurrent writer threads into shared flushes.

    Args:
        store: any :class:`LogStore`.
        tier: acknowledgment tier of every flush (an :class:`AckTier` or its label; must be
            offered by ``store``).
        flush_timer_s: longest the first event of a batch waits for company (finite, ≥ 0).
        batch_cap: most events per flush (an int ≥ 1); a single :meth:`submit_many` larger than
            the cap gets a flush of its own.
        adaptive: also close a batch once every recently active writer is in it (module doc).
        clock: monotonic clock in seconds (injectable for tests).
        keep_stats: keep every acknowledgment in :attr:`stats` (for measurement).
        queued_batches_max: most batches held ahead of the flusher, the open one included (an
            int ≥ 1); past it writers wait (module docstring: backpressure).

    Raises:
        ConfigError: a parameter out of range, NaN or infinite. TierNotOfferedError: tier not
            offered by store.

    If ``append_batch`` raises, every writer of that batch gets the error (a non-StoreError, e.g.
    KeyboardInterrupt raised inside the store, wrapped in a StoreError) and the committer keeps
    running.
    """

    def __init__(self, store: LogStore, tier: AckTier, *, flush_timer_s: float = 0.001, batch_cap: int = 64,
                 adaptive: bool = True, clock: Callable[[], float] = time.perf_counter, keep_stats: bool = True,
                 queued_batches_max: int = GROUP_COMMIT_QUEUED_BATCHES_MAX):
        super().__init__(store, tier, flush_timer_s, batch_cap, adaptive, clock, keep_stats, queued_batches_max)
        lock = threading.Lock()
        self._cv = threading.Condition(lock)     # the flusher waits here for events
        self._room = threading.Condition(lock)   # writers wait here for a queue slot
        self._batches: deque[_Batch] = deque()   # the first is the open batch; later ones are full
        self._thread = threading.Thread(target=self._run, name="group-commit", daemon=True)
        self._thread.start()

    def submit(self, event: Event, *, timeout_s: float | None = None) -> Ticket:
        """Put ``event`` in the open batch; the ticket yields its :class:`GroupAck`
        (``timeout_s`` as in :meth:`submit_many`)."""
        return self.submit_many([event], timeout_s=timeout_s)[0]

    def submit_many(self, events: list[Event], *, timeout_s: float | None = None) -> list[Ticket]:
        """Put ``events`` in one batch together (in order), so one flush acknowledges them all.

        When they need a new batch and ``queued_batches_max`` batches are already queued, wait for
        a flush to take one: without ``timeout_s`` for as long as it takes, with it at most that
        many seconds.

        Raises StoreError at once if a member is not an Event (it never joins a batch, so it
        cannot fail other writers' flush), EventTooLargeError for a member over the event size
        limit, GroupCommitBackpressureError when the wait outlasts ``timeout_s`` (nothing
        queued), StoreClosedError after close, ConfigError for a bad ``timeout_s``.
        """
        events = check_events(events)
        timeout_s = _check_timeout(timeout_s)
        with self._cv:
            if self._closed:
                raise StoreClosedError("group committer is closed")
            if not events:
                return []   # an empty batch would reach the flusher with no first arrival to time
            deadline = None if timeout_s is None else time.monotonic() + timeout_s
            while (len(self._batches) >= self.queued_batches_max
                   and self._needs_new_batch(len(self._batches[-1].events), len(events))):
                if deadline is None:
                    self._room.wait()
                else:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise _backpressure(len(events), len(self._batches), timeout_s)
                    self._room.wait(left)
                if self._closed:
                    raise StoreClosedError("group committer closed while this writer waited for a queue slot")
            if self._needs_new_batch(len(self._batches[-1].events) if self._batches else None, len(events)):
                self._batches.append(_Batch())
            b = self._batches[-1]
            now = self._clock()
            tickets = []
            for ev in events:
                b.events.append(ev)
                b.arrivals.append(now)
                t = Ticket(b, len(b.events) - 1)
                b.tickets.append(t)
                tickets.append(t)
            if self._joined(threading.get_ident(), len(b.events), len(events)):
                self._cv.notify()
        return tickets

    def append(self, event: Event, *, timeout_s: float | None = None) -> GroupAck:
        """Queue ``event`` and block until its batch is durable. Raises the store's error for it.
        ``timeout_s`` bounds only the wait for a queue slot (:meth:`submit_many`)."""
        return self.submit(event, timeout_s=timeout_s).result()

    def append_many(self, events: list[Event], *, timeout_s: float | None = None) -> list[GroupAck]:
        """Queue ``events`` in one batch and block until it is durable; raises the first error.
        ``timeout_s`` bounds only the wait for a queue slot (:meth:`submit_many`)."""
        return [t.result() for t in self.submit_many(events, timeout_s=timeout_s)]

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._batches and not self._closed:
                    self._cv.wait()
                if not self._batches:
                    return   # closed and drained
                b = self._batches[0]
                deadline = self._deadline(b.arrivals[0], len(b.events))
                while not self._closed and len(self._batches) == 1 and not self._due(len(b.events)):
                    left = deadline - self._clock()
                    if left <= 0:
                        break
                    self._cv.wait(left)
                self._batches.popleft()
                self._closed_batch()
                self._room.notify_all()   # a queue slot is free
            self._flush(b)

    def _flush(self, batch: _Batch) -> None:
        start = self._clock()
        try:
            results = self.store.append_batch(batch.events, self.tier)
        except BaseException as exc:   # the flush failed: nobody in the batch is acknowledged
            batch.error = self._as_store_error(exc)
        else:
            batch.results = self._acks(batch.arrivals, results, start, self._clock() - start)
        for t in batch.tickets:
            t._release()

    def close(self) -> None:
        """Flush what is queued, then stop the flusher thread. Idempotent."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
            self._room.notify_all()
        self._thread.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _Waiter:
    """One writer's events queued in a :class:`LeaderGroupCommitter`, and how it is woken."""

    __slots__ = ("events", "arrival", "lock", "done", "lead", "results", "error")

    def __init__(self, events: list[Event], arrival: float):
        self.events, self.arrival = events, arrival
        self.lock = threading.Lock()   # held from creation; released once: acknowledged, or made leader
        self.lock.acquire()
        self.done = False
        self.lead = False
        self.results: list[GroupAck | StoreError] = []
        self.error: StoreError | None = None

    def outcome(self) -> list[GroupAck]:
        if self.error is not None:
            raise self.error
        if len(self.results) != len(self.events):   # woken by a leader interrupted before it recorded them
            raise StoreError(f"group commit: the flush of these {len(self.events)} event(s) was interrupted "
                             "(KeyboardInterrupt or SystemExit in the leading writer's thread) before their "
                             "outcome was recorded; whether they are durable is unknown: re-read the log")
        for res in self.results:
            if isinstance(res, Exception):
                raise res
        return self.results   # type: ignore[return-value]


class LeaderGroupCommitter(_CommitterCore):
    """Group commit for writer threads without a flusher thread: leader/follower (§11.3.4).

    A writer that finds no flush in progress becomes the *leader*: it takes every event queued
    so far (up to ``batch_cap``, whole submissions only, in arrival order), hands them to the
    store's ``append_batch`` at the committer's tier (one write, one barrier) and acknowledges
    them. Writers that arrive meanwhile queue and sleep; the events that arrived during one flush
    make the next batch (natural batching: no flush timer, the barrier itself is the wait). When
    its own events are durable the leader passes leadership to the first queued writer and
    returns, so no thread stays behind as a flusher and every writer is woken at most once per
    append: either acknowledged, or to lead the next flush. (:class:`GroupCommitter` wakes a
    flusher thread too, one hand-off more per flush and a thread switch per batch: on a 2-core
    VM with 16 trajectories on threads that hand-off was most of the fleet's durability
    overhead; ``bench append`` figure 4 measures both.)

    Args:
        store: any :class:`LogStore`.
        tier: acknowledgment tier of every flush (an :class:`AckTier` or its label; must be
            offered by ``store``).
        batch_cap: most events per flush (an int >= 1); one :meth:`append_many` larger than the
            cap gets a flush of its own.
        clock: monotonic clock in seconds (injectable for tests).
        keep_stats: keep every acknowledgment in :attr:`stats` (eq. 2 terms: ``queue_wait_s`` =
            flush start - arrival, ``storage_s`` = the flush's duration).

    Raises:
        ConfigError: ``batch_cap`` out of range. TierNotOfferedError: tier not offered by store.

    Every writer of a batch whose ``append_batch`` raised gets the error (a non-StoreError wrapped
    in a StoreError), and leadership still passes on. A leader may be the main thread, where Ctrl-C
    lands: a KeyboardInterrupt anywhere in its turn is raised there, the followers of its batch get
    a StoreError (outcome unknown unless the store had answered), and the lead passes on all the
    same. There is no queue bound: each writer thread waits for its own submission, so at most one
    submission per thread is queued.
    """

    def __init__(self, store: LogStore, tier: AckTier, *, batch_cap: int = 64,
                 clock: Callable[[], float] = time.perf_counter, keep_stats: bool = True):
        super().__init__(store, tier, 0.0, batch_cap, False, clock, keep_stats)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)   # close() waits here for the last flush
        self._queue: deque[_Waiter] = deque()
        self._leading = False   # a writer is leading a flush, or has been handed the lead

    def append(self, event: Event) -> GroupAck:
        """Queue ``event`` and block until its flush is durable. Raises the store's error for it."""
        return self.append_many([event])[0]

    def append_many(self, events: list[Event]) -> list[GroupAck]:
        """Queue ``events`` in one flush together (in order) and block until it is durable.

        Raises StoreError at once if a member is not an Event, EventTooLargeError for a member
        over the size limit, StoreClosedError after :meth:`close`; the store's error for the first
        event it refused; StoreError when the whole flush failed or was interrupted. An empty list
        returns ``[]`` without a flush."""
        me = _Waiter(check_events(events), self._clock())
        # Ctrl-C may land anywhere in this thread (CPython raises it on a function's entry or a
        # call's return): from the moment ``me`` is queued, any exit hands on a lead ``me`` holds.
        try:
            with self._lock:
                if self._closed:
                    raise StoreClosedError("group committer is closed")
                if not me.events:
                    return []
                self._queue.append(me)
                if not self._leading:
                    self._leading = me.lead = True
            if not me.lead:
                me.lock.acquire()   # acknowledged, or handed the lead (me.lead)
            if me.lead and not me.done:
                self._lead(me)
        except BaseException:
            self._abandon(me)
            raise
        return me.outcome()

    def _lead(self, me: _Waiter) -> None:
        """Flush the batch that starts with ``me`` (a leader is first in the queue), wake its
        followers, then pass the lead on (or drop it). Followers are woken and the lead passed
        even if the flush, or this thread, is interrupted."""
        batch: list[_Waiter] = []
        try:
            with self._lock:
                batch.append(self._queue.popleft())
                size = len(me.events)
                while self._queue and size + len(self._queue[0].events) <= self.batch_cap:
                    size += len(self._queue[0].events)
                    batch.append(self._queue.popleft())
            self._flush(batch)
        finally:
            try:
                for w in batch:
                    w.done = True
                    if w is not me:
                        w.lock.release()
            finally:
                with self._lock:   # _pass_lead inlined: a call's entry is where a Ctrl-C lands
                    if self._queue:
                        self._queue[0].lead = True
                        self._queue[0].lock.release()
                    else:
                        self._leading = False
                        self._idle.notify_all()

    def _pass_lead(self) -> None:
        """(Under ``_lock``.) Wake the first queued writer as the next leader, or note none leads."""
        if self._queue:
            nxt = self._queue[0]
            nxt.lead = True
            nxt.lock.release()
        else:
            self._leading = False
            self._idle.notify_all()

    def _abandon(self, me: _Waiter) -> None:
        """``me``'s writer was interrupted (KeyboardInterrupt) while queued, waiting, or about to
        lead: take its events out if no flush took them yet, and pass on a lead it holds, so that
        no other writer waits forever."""
        with self._lock:
            if me in self._queue:
                self._queue.remove(me)
                if me.lead:
                    self._pass_lead()

    def _flush(self, batch: list[_Waiter]) -> None:
        """Write ``batch`` in one ``append_batch`` and record each writer's outcome (or the
        error); re-raise a KeyboardInterrupt/SystemExit raised in the store."""
        events = [ev for w in batch for ev in w.events]
        start = self._clock()
        try:
            results = list(self.store.append_batch(events, self.tier))
            if len(results) != len(events):
                raise StoreError(f"{self.store.name} returned {len(results)} outcome(s) for a batch of {len(events)} "
                                 "events (one per event expected); nothing in this batch is acknowledged")
        except BaseException as exc:   # the flush failed: nobody in the batch is acknowledged
            err = self._as_store_error(exc)
            for w in batch:
                w.error = err
            if not isinstance(exc, Exception):
                raise   # Ctrl-C in the leader's own thread: re-raised there, after the wake-ups
            return
        acks = self._acks([w.arrival for w in batch for _ in w.events], results, start, self._clock() - start)
        at = 0
        for w in batch:
            w.results = acks[at:at + len(w.events)]
            at += len(w.events)

    def close(self) -> None:
        """Refuse new appends (StoreClosedError), and return once the flush in progress and the
        writers already queued are served (as :meth:`GroupCommitter.close`), so that the store can
        be closed next. Idempotent."""
        with self._lock:
            self._closed = True
            while self._leading:
                self._idle.wait(0.05)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class AsyncGroupCommitter(_CommitterCore):
    """Coalesce appends from concurrent asyncio tasks into shared flushes.

    Same arguments and policy as :class:`GroupCommitter`; writers are tasks on one event loop.
    ``offload=False`` (default) runs each flush on the loop thread: the loop stalls for one
    barrier (one write and one fdatasync, sub-millisecond on a local disk) while every writer in
    the batch is waiting for it anyway, and no thread hand-off is paid (one costs tens of µs on
    a small VM, a sizeable share of a flush cycle; see ``bench append`` figure 2).
    ``offload=True`` runs each flush in a worker thread so other tasks keep running meanwhile:
    the right choice when a flush can be long (a remote or replicated store).
    Create it inside the running loop; close it with ``await committer.aclose()``. Backpressure
    (``queued_batches_max``, ``timeout_s``) as for :class:`GroupCommitter`.
    """

    def __init__(self, store: LogStore, tier: AckTier, *, flush_timer_s: float = 0.001, batch_cap: int = 64,
                 adaptive: bool = True, offload: bool = False, clock: Callable[[], float] = time.perf_counter,
                 keep_stats: bool = True, queued_batches_max: int = GROUP_COMMIT_QUEUED_BATCHES_MAX):
        super().__init__(store, tier, flush_timer_s, batch_cap, adaptive, clock, keep_stats, queued_batches_max)
        self.offload = offload
        self._loop = asyncio.get_running_loop()
        self._batches: deque[tuple[list[Event], list[float], list[asyncio.Future]]] = deque()
        self._wake = asyncio.Event()
        self._room = asyncio.Event()   # set when the flusher takes a batch (a queue slot is free)
        self._task = self._loop.create_task(self._run())

    async def append(self, event: Event, *, timeout_s: float | None = None) -> GroupAck:
        """Queue ``event``; return once its batch is durable. Raises the store's error for it."""
        return (await self.append_many([event], timeout_s=timeout_s))[0]

    async def append_many(self, events: list[Event], *, timeout_s: float | None = None) -> list[GroupAck]:
        """Queue ``events`` in one batch; return once it is durable. Raises the first error
        (StoreError at once for a member that is not an Event, EventTooLargeError for one over the
        event size limit). With ``queued_batches_max`` batches queued, waits for a queue slot
        (``timeout_s`` bounds that wait: GroupCommitBackpressureError, nothing queued)."""
        events = check_events(events)
        timeout_s = _check_timeout(timeout_s)
        if self._closed:
            raise StoreClosedError("group committer is closed")
        if not events:
            return []   # an empty batch would reach the flusher with no first arrival to time
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while (len(self._batches) >= self.queued_batches_max
               and self._needs_new_batch(len(self._batches[-1][0]), len(events))):
            self._room.clear()
            if deadline is None:
                await self._room.wait()
            else:
                left = deadline - time.monotonic()
                try:
                    if left <= 0:
                        raise TimeoutError
                    await asyncio.wait_for(self._room.wait(), left)
                except TimeoutError:
                    raise _backpressure(len(events), len(self._batches), timeout_s) from None
            if self._closed:
                raise StoreClosedError("group committer closed while this writer waited for a queue slot")
        if self._needs_new_batch(len(self._batches[-1][0]) if self._batches else None, len(events)):
            self._batches.append(([], [], []))
        evs, arrivals, futs = self._batches[-1]
        now = self._clock()
        mine = []
        for ev in events:
            evs.append(ev)
            arrivals.append(now)
            fut = self._loop.create_future()
            futs.append(fut)
            mine.append(fut)
        if self._joined(asyncio.current_task(), len(evs), len(events)):
            self._wake.set()
        results = await asyncio.gather(*mine, return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return results

    async def _run(self) -> None:
        while True:
            if not self._batches:
                if self._closed:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            evs, arrivals, futs = self._batches[0]
            deadline = self._deadline(arrivals[0], len(evs))
            while not self._closed and len(self._batches) == 1 and not self._due(len(evs)):
                left = deadline - self._clock()
                if left <= 0:
                    break
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), left)
                except TimeoutError:
                    break
            self._batches.popleft()
            self._closed_batch()
            self._room.set()   # a queue slot is free
            start = self._clock()
            try:
                if self.offload:
                    results = await asyncio.to_thread(self.store.append_batch, evs, self.tier)
                else:
                    results = self.store.append_batch(evs, self.tier)
            except (asyncio.CancelledError, KeyboardInterrupt, SystemExit) as exc:
                # stopped mid-flush: the batch may or may not be durable (an offloaded flush even
                # runs on); say so, and stop instead of swallowing the cancellation
                err = StoreError(f"flush interrupted ({type(exc).__name__}): whether these events are durable "
                                 "is unknown; re-read the log")
                for f in futs:
                    if not f.done():
                        f.set_exception(err)
                self._closed = True
                raise
            except Exception as exc:   # the flush failed: nobody in the batch is acknowledged
                err = self._as_store_error(exc)
                for f in futs:
                    if not f.done():
                        f.set_exception(err)
                continue
            for f, a in zip(futs, self._acks(arrivals, results, start, self._clock() - start)):
                if f.done():
                    continue   # the writer was cancelled; its event is durable all the same
                if isinstance(a, Exception):
                    f.set_exception(a)
                else:
                    f.set_result(a)

    async def aclose(self) -> None:
        """Flush what is queued, then stop the flusher task. Idempotent."""
        self._closed = True
        self._wake.set()
        self._room.set()
        if not self._task.done():
            await self._task
        for _evs, _, futs in self._batches:   # left behind by an interrupted flusher
            for f in futs:
                if not f.done():
                    f.set_exception(StoreClosedError("group committer stopped before this event was flushed"))
        self._batches.clear()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.aclose()
