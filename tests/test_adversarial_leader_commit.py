"""Adversarial scenarios for LeaderGroupCommitter (§11.3.4), with GroupCommitter as the reference.

Fault model: real writer threads on a real store; Ctrl-C landing in a writer thread at the points
where CPython delivers it (a function's entry, a call's return) while that thread leads a flush;
``close()`` followed by the store's own close while writers are still queued; an empty append; a
store that breaks its contract by returning fewer outcomes than events.

Invariants: no writer waits forever (every join has a timeout, so a hang fails instead of
blocking); leadership always passes on; a writer gets an acknowledgment only for an event the
store acknowledged; ``close()`` returns only once the writers already queued are served, as with
the flusher-thread committer; an empty append costs no flush and leaves the committer working.

Goal: a user swapping GroupCommitter for LeaderGroupCommitter sees the same guarantees.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from kernel_lib.errors import StoreError
from kernel_lib.log import AckTier, AsyncGroupCommitter, GroupCommitter, LeaderGroupCommitter, MemoryStore
from kernel_lib.log import TrajectoryLog
from tests.helpers import ev, task

JOIN_S = 5.0


class GatedStore(MemoryStore):
    """A memory store whose first flush waits for ``gate`` (so that later writers queue behind it);
    counts every ``append_batch`` call it receives."""

    def __init__(self, flush_s: float = 0.0):
        super().__init__()
        self.gate = threading.Event()
        self.flush_s = flush_s
        self.calls: list[int] = []
        self._mu = threading.Lock()

    def append_batch(self, events, tier):
        with self._mu:
            number = len(self.calls)
            self.calls.append(len(events))
        if number == 0:
            self.gate.wait(JOIN_S)
        if self.flush_s:
            time.sleep(self.flush_s)
        return super().append_batch(events, tier)


def _writer(committer, traj, out):
    def run():
        try:
            out[traj] = committer.append(ev(task(), 1, traj=traj))
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            out[traj] = exc
    t = threading.Thread(target=run, name=f"writer-{traj}", daemon=True)
    t.start()
    return t


def _wait_until(cond, timeout_s=JOIN_S):
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.001)


def test_ctrl_c_in_the_leader_after_the_store_returned_strands_no_follower_of_its_batch():
    """Fault: Ctrl-C lands in the leading writer right after ``append_batch`` returned, before the
    followers of its batch were woken (modelled by the clock read that measures the flush).
    Invariant: every follower of that batch returns (a StoreError: the outcome is unknown), the
    leader sees its KeyboardInterrupt, and the committer keeps serving appends."""
    store = GatedStore()
    armed = threading.Event()

    def clock():
        if armed.is_set() and threading.current_thread().name == "writer-lead":
            armed.clear()
            raise KeyboardInterrupt
        return time.perf_counter()

    committer = LeaderGroupCommitter(store, AckTier.MEMORY, clock=clock)
    out: dict = {}
    first = _writer(committer, "first", out)          # leads flush 0, held at the gate
    _wait_until(lambda: store.calls)
    lead = _writer(committer, "lead", out)            # queued first: leads flush 1
    _wait_until(lambda: len(committer._queue) == 1)
    followers = [_writer(committer, f"f{i}", out) for i in range(3)]   # queued: members of flush 1
    _wait_until(lambda: len(committer._queue) == 4)

    orig = store.append_batch

    def append_batch(events, tier):
        res = orig(events, tier)
        if len(store.calls) == 2:
            armed.set()   # the next clock read in the leader is the interrupt
        return res
    store.append_batch = append_batch
    store.gate.set()
    for t in [first, lead, *followers]:
        t.join(JOIN_S)
    hung = [t.name for t in [first, lead, *followers] if t.is_alive()]
    assert not hung, f"writers stranded by a Ctrl-C in their leader: {hung}"
    assert isinstance(out["lead"], KeyboardInterrupt)
    for i in range(3):
        assert isinstance(out[f"f{i}"], StoreError), out[f"f{i}"]
    after = _writer(committer, "after", out)
    after.join(JOIN_S)
    assert not after.is_alive() and out["after"].outcome.sequence_number == 1


@pytest.mark.parametrize("who", ["first-arrival leader", "follower handed the lead"])
def test_ctrl_c_as_a_writer_takes_the_lead_does_not_wedge_the_committer(who):
    """Fault: Ctrl-C lands in a writer between taking the lead and starting its flush (CPython
    checks for signals on entry to a function), for a writer that found no flush in progress and
    for a follower just handed the lead. Invariant: that writer sees KeyboardInterrupt, the lead
    passes on, and every other writer, queued or later, is acknowledged."""
    store = GatedStore()
    committer = LeaderGroupCommitter(store, AckTier.MEMORY)
    victim = "first" if who == "first-arrival leader" else "second"
    real_lead = committer._lead

    def lead(me):
        if me.events[0].trajectory_id == victim:
            raise KeyboardInterrupt
        return real_lead(me)
    committer._lead = lead
    out: dict = {}
    threads = [_writer(committer, "first", out)]
    if victim == "second":
        _wait_until(lambda: store.calls)
        threads.append(_writer(committer, "second", out))
        _wait_until(lambda: len(committer._queue) == 1)
        threads.append(_writer(committer, "third", out))
        _wait_until(lambda: len(committer._queue) == 2)
        store.gate.set()
    else:
        store.gate.set()
        threads[0].join(JOIN_S)
        threads.append(_writer(committer, "second", out))
    for t in threads:
        t.join(JOIN_S)
    later = _writer(committer, "later", out)
    later.join(JOIN_S)
    hung = [t.name for t in [*threads, later] if t.is_alive()]
    assert not hung, f"the lead was lost with the interrupted writer: {hung} wait forever"
    assert isinstance(out[victim], KeyboardInterrupt)
    assert store.head(victim) == 0, "the interrupted writer's event was flushed anyway"
    for traj, res in out.items():
        if traj != victim:
            assert res.outcome.sequence_number == 1, (traj, res)
    assert not committer._leading and not committer._queue


@pytest.mark.parametrize("cls", [GroupCommitter, LeaderGroupCommitter])
def test_close_serves_the_writers_already_queued_before_it_returns(cls):
    """Fault: ``close()`` while one flush is in progress and writers are queued behind it, then the
    store is closed (``with store, committer:`` does exactly this). Invariant: close() returns only
    once they are served, so every one of them is acknowledged and stored: the flusher-thread
    committer's contract, which its leader/follower replacement must keep."""
    store = GatedStore(flush_s=0.002)
    committer = cls(store, AckTier.MEMORY)
    out: dict = {}
    threads = [_writer(committer, "w0", out)]
    _wait_until(lambda: store.calls)
    threads += [_writer(committer, f"w{i}", out) for i in range(1, 5)]
    time.sleep(0.05)   # let them queue
    closer = threading.Thread(target=lambda: (committer.close(), store.close()), daemon=True)
    closer.start()
    time.sleep(0.02)
    store.gate.set()
    closer.join(JOIN_S)
    for t in threads:
        t.join(JOIN_S)
    assert not closer.is_alive() and not any(t.is_alive() for t in threads)
    failed = {k: v for k, v in out.items() if isinstance(v, BaseException)}
    assert not failed, f"close() returned before the queued writers were served: {failed}"


@pytest.mark.parametrize("cls", [GroupCommitter, LeaderGroupCommitter])
def test_an_empty_append_costs_no_flush_and_the_committer_keeps_working(cls):
    """Fault: a writer appends an empty list (a step that produced no events). Invariant: it gets
    ``[]`` at once, the store sees no flush and the stats no batch of size 0, and the next
    writer is still acknowledged (nothing waits forever)."""
    store = GatedStore()
    store.gate.set()
    committer = cls(store, AckTier.MEMORY)
    assert committer.append_many([]) == []
    time.sleep(0.05)   # a flusher thread, if any, has looked at the queue meanwhile
    out: dict = {}
    t = _writer(committer, "next", out)
    t.join(JOIN_S)
    assert not t.is_alive(), "the writer after an empty append waits forever"
    assert out["next"].outcome.sequence_number == 1
    assert store.calls == [1] and committer.stats.batch_sizes == [1]
    committer.close()


def test_an_empty_async_append_leaves_the_flusher_task_running():
    """Same fault for AsyncGroupCommitter: the next append must still be acknowledged."""
    async def main():
        committer = AsyncGroupCommitter(MemoryStore(), AckTier.MEMORY)
        assert await committer.append_many([]) == []
        ack = await asyncio.wait_for(committer.append(ev(task(), 1, traj="next")), JOIN_S)
        await committer.aclose()
        return ack
    assert asyncio.run(main()).outcome.sequence_number == 1


def test_a_store_returning_too_few_outcomes_acknowledges_nothing():
    """Fault: a store breaks the append contract and returns fewer outcomes than events.
    Invariant: no event without an outcome is acknowledged: the writers get a StoreError and a
    TrajectoryLog's head does not move past what the store acknowledged."""
    class ShortStore(MemoryStore):
        def append_batch(self, events, tier):
            return super().append_batch(events, tier)[:-1]
    store = ShortStore()
    committer = LeaderGroupCommitter(store, AckTier.MEMORY)
    log = TrajectoryLog(store, "t", must_survive="none", committer=committer)
    with pytest.raises(StoreError):
        log.append_many([task(), task()])
    assert log.head == 0 and log.barriers == 0
