"""Group commit (§11.3.4, eq. 2): coalesced flushes, no early acknowledgment, separated wait terms."""

from __future__ import annotations

import threading
import time

import pytest

from kernel_lib.errors import ConfigError, SequenceGapError, StoreFailedError
from kernel_lib.log import (
    AckTier,
    GroupCommitter,
    MemoryStore,
    SQLiteStore,
    TrajectoryLog,
)
from tests.helpers import ev, intent, task


class SlowDurableStore(MemoryStore):
    """A memory store whose flush takes ``flush_s`` and records when each event became durable."""

    def __init__(self, flush_s=0.01, fail=False):
        super().__init__()
        self.flush_s, self.fail = flush_s, fail
        self.durable: set[str] = set()
        self.flushes = 0

    def append_batch(self, events, tier):
        out = super().append_batch(events, tier)
        time.sleep(self.flush_s)
        if self.fail:
            raise StoreFailedError("injected flush failure")
        self.flushes += 1
        self.durable.update(e.event_id for e in events)
        return out


def _writers(committer, n_writers, per_writer, check=None):
    errors, acks = [], []

    def writer(w):
        for i in range(1, per_writer + 1):
            e = ev(intent(op=f"op{w}-{i}"), i, traj=f"traj{w}")
            try:
                t0 = time.perf_counter()
                ack = committer.append(e)
                total = time.perf_counter() - t0
                if check:
                    check(e, ack)
                acks.append((ack, total))
            except Exception as exc:   # pragma: no cover - surfaced below
                errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(n_writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return acks


def test_concurrent_appends_share_flushes_and_nothing_is_acknowledged_before_its_flush():
    store = SlowDurableStore(flush_s=0.01)
    early = []
    with GroupCommitter(store, AckTier.MEMORY, flush_timer_s=0.002, batch_cap=64) as gc:
        acks = _writers(gc, 8, 5, check=lambda e, ack: e.event_id in store.durable or early.append(e.event_id))
    assert early == []                                   # every ack came after its batch was durable
    assert len(acks) == 40 and store.flushes < 40        # coalesced
    assert max(gc.stats.batch_sizes) > 1
    for t in range(8):
        assert [e.sequence_number for e in store.read(f"traj{t}")] == [1, 2, 3, 4, 5]


def test_eq_2_terms_are_measured_separately_and_add_up():
    store = SlowDurableStore(flush_s=0.02)
    with GroupCommitter(store, AckTier.MEMORY, flush_timer_s=0.005, batch_cap=4) as gc:
        acks = _writers(gc, 4, 3)
    for ack, total in acks:
        assert ack.storage_s >= 0.02 * 0.9                   # every member waits the whole flush
        assert ack.queue_wait_s >= 0
        assert ack.wait_s <= total + 1e-3                    # eq. 2: wait = ack time - arrival
    assert all(b <= 4 for b in gc.stats.batch_sizes)        # batch cap honoured


def test_flush_timer_bounds_the_wait_of_a_lonely_event():
    store = SlowDurableStore(flush_s=0.0)
    with GroupCommitter(store, AckTier.MEMORY, flush_timer_s=0.05, batch_cap=64, adaptive=False) as gc:
        ack = gc.append(ev(task(), 1))
    assert 0.04 <= ack.queue_wait_s < 0.5
    # adaptive close: a lone writer is not made to wait out the timer
    with GroupCommitter(MemoryStore(), AckTier.MEMORY, flush_timer_s=0.5, batch_cap=64) as gc:
        acks = [gc.append(ev(intent(op=f"o{i}"), i)) for i in range(1, 4)]
    assert all(a.queue_wait_s < 0.25 for a in acks)


def test_batch_cap_holds_even_when_writers_outrun_the_flusher():
    store = SlowDurableStore(flush_s=0.02)
    with GroupCommitter(store, AckTier.MEMORY, flush_timer_s=0.001, batch_cap=3) as gc:
        tickets = [gc.submit(ev(intent(op=f"o{i}"), i)) for i in range(1, 11)]
        assert [t.result(5).outcome.sequence_number for t in tickets] == list(range(1, 11))
    assert max(gc.stats.batch_sizes) <= 3 and sum(gc.stats.batch_sizes) == 10


def test_a_failed_flush_acknowledges_nobody():
    store = SlowDurableStore(fail=True)
    with GroupCommitter(store, AckTier.MEMORY, flush_timer_s=0.001) as gc:
        fut = gc.submit(ev(task(), 1))
        with pytest.raises(StoreFailedError):
            fut.result(5)


def test_per_event_errors_reach_only_their_writer():
    store = MemoryStore()
    with GroupCommitter(store, AckTier.MEMORY, flush_timer_s=0.01) as gc:
        good, bad = gc.submit(ev(task(), 1)), gc.submit(ev(task(), 7, traj="traj-b"))
        assert good.result(5).outcome.sequence_number == 1
        with pytest.raises(SequenceGapError):
            bad.result(5)


def test_trajectory_log_through_group_commit_on_sqlite(tmp_path):
    store = SQLiteStore.open(tmp_path / "g.sqlite", create=True)
    with GroupCommitter(store, AckTier.FDATASYNC, flush_timer_s=0.001) as gc:
        log = TrajectoryLog(store, "t", committer=gc)
        log.append(task())
        log.append(intent())
    assert [e.event_type for e in store.read("t")] == ["TaskStarted", "ToolIntent"]


@pytest.mark.parametrize("kw", [{"flush_timer_s": -1}, {"batch_cap": 0}])
def test_bad_parameters_are_refused(kw):
    with pytest.raises(ConfigError):
        GroupCommitter(MemoryStore(), AckTier.MEMORY, **kw)


# --- asyncio writers --------------------------------------------------------------------------

@pytest.mark.parametrize("offload", [False, True])
def test_async_committer_coalesces_tasks_and_never_acknowledges_early(offload):
    import asyncio

    from kernel_lib.log import AsyncGroupCommitter

    store = SlowDurableStore(flush_s=0.01)
    early = []

    async def main():
        async with AsyncGroupCommitter(store, AckTier.MEMORY, flush_timer_s=0.002, offload=offload) as gc:
            async def writer(w):
                for i in range(1, 6):
                    e = ev(intent(op=f"op{w}-{i}"), i, traj=f"traj{w}")
                    ack = await gc.append(e)
                    if e.event_id not in store.durable:
                        early.append(e.event_id)
                    assert ack.storage_s >= 0.009 and ack.queue_wait_s >= 0
            await asyncio.gather(*(writer(w) for w in range(8)))
            bad = gc.append(ev(task(), 9, traj="traj0"))
            with pytest.raises(SequenceGapError):
                await bad
            return gc

    gc = asyncio.run(main())
    assert early == [] and store.flushes < 40 and max(gc.stats.batch_sizes) > 1
    assert all(b <= 64 for b in gc.stats.batch_sizes)
    for t in range(8):
        assert [e.sequence_number for e in store.read(f"traj{t}")] == [1, 2, 3, 4, 5]


def test_async_committer_failed_flush_acknowledges_nobody():
    import asyncio

    from kernel_lib.log import AsyncGroupCommitter

    async def main():
        async with AsyncGroupCommitter(SlowDurableStore(fail=True), AckTier.MEMORY, offload=False) as gc:
            with pytest.raises(StoreFailedError):
                await gc.append_many([ev(task(), 1), ev(intent(), 2)])

    asyncio.run(main())


def test_submit_many_puts_a_logical_batch_in_one_flush():
    store = SlowDurableStore(flush_s=0.0)
    with GroupCommitter(store, AckTier.MEMORY, flush_timer_s=0.001) as gc:
        acks = gc.append_many([ev(task(), 1), ev(intent(), 2), ev(intent(op="b"), 3)])
    assert {a.batch_size for a in acks} == {3} and store.flushes == 1


@pytest.mark.parametrize("kw", [{"flush_timer_s": float("nan")}, {"flush_timer_s": float("inf")},
                                {"flush_timer_s": "0.1"}, {"flush_timer_s": True}, {"batch_cap": 2.5},
                                {"batch_cap": float("nan")}])
def test_non_finite_or_mistyped_parameters_are_refused(kw):
    """Repro /tmp/breaker/p_gc_nan.py: a NaN flush timer was accepted and the flusher never flushed."""
    import asyncio

    from kernel_lib.log import AsyncGroupCommitter

    with pytest.raises(ConfigError):
        GroupCommitter(MemoryStore(), AckTier.MEMORY, **kw)

    async def main():
        with pytest.raises(ConfigError):
            AsyncGroupCommitter(MemoryStore(), AckTier.MEMORY, **kw)

    asyncio.run(main())


def test_committer_parses_a_tier_label_and_refuses_non_events_at_submit():
    from kernel_lib.errors import StoreError

    with GroupCommitter(MemoryStore(), "memory", flush_timer_s=0.001) as gc:
        assert gc.tier is AckTier.MEMORY
        with pytest.raises(StoreError, match="Event"):
            gc.submit({"not": "an event"})
        assert gc.append(ev(task(), 1)).outcome.sequence_number == 1


def test_a_multi_event_submit_into_an_idle_committer_is_flushed_by_the_timer():
    """Regression: a batch opened by submit_many(2+ events) never woke the flusher when several
    writers had been active, so the flush timer never started and the writer hung."""
    store = SlowDurableStore(flush_s=0.0)
    with GroupCommitter(store, AckTier.MEMORY, flush_timer_s=0.01) as gc:
        _writers(gc, 3, 2)                                  # three recently active writers
        tickets = gc.submit_many([ev(intent(op="x1"), 1, traj="lone"), ev(intent(op="x2"), 2, traj="lone")])
        assert [t.result(timeout=2).outcome.sequence_number for t in tickets] == [1, 2]


def test_cancelling_the_async_flusher_mid_flush_says_the_outcome_is_unknown():
    import asyncio

    from kernel_lib.errors import StoreError
    from kernel_lib.log import AsyncGroupCommitter

    async def main():
        gc = AsyncGroupCommitter(SlowDurableStore(flush_s=0.2), AckTier.MEMORY, offload=True)
        writer = asyncio.ensure_future(gc.append(ev(task(), 1)))
        await asyncio.sleep(0.05)          # the flush is in progress in its worker thread
        gc._task.cancel()
        with pytest.raises(StoreError, match="unknown"):
            await writer
        await asyncio.wait_for(gc.aclose(), 5)   # no hang on shutdown
        assert gc._task.cancelled()

    asyncio.run(main())
