"""Leader/follower group commit (§11.3.4): the writers flush for each other, no flusher thread.

Fault model: writer threads racing, a flush that is slow, one that fails, one interrupted by
Ctrl-C in the leader's own thread, a follower interrupted while it waits. Invariants: no writer is
acknowledged before the flush holding its events returned; every acknowledged event is in the
store exactly once, in each writer's order; batches respect the cap; a failure reaches exactly the
writers of its batch; leadership always passes on, so no writer waits forever.
"""

from __future__ import annotations

import random
import threading
import time

import pytest

from kernel_lib.errors import ConfigError, StoreClosedError, StoreError, StoreFailedError
from kernel_lib.log import AckTier, LeaderGroupCommitter, MemoryStore, TrajectoryLog
from tests.helpers import ev, intent, task


class SlowStore(MemoryStore):
    """A memory store whose flush takes ``flush_s``; records each batch, and fails the batches
    whose number is in ``fail_batches`` (after storing nothing of them)."""

    def __init__(self, flush_s=0.002, fail_batches=(), interrupt_batches=()):
        super().__init__()
        self.flush_s = flush_s
        self.fail_batches, self.interrupt_batches = set(fail_batches), set(interrupt_batches)
        self.batches: list[list[str]] = []
        self.flushing = 0
        self.overlapped = False
        self._count = threading.Lock()

    def append_batch(self, events, tier):
        with self._count:
            self.flushing += 1
            self.overlapped |= self.flushing > 1
            number = len(self.batches)
            self.batches.append([e.event_id for e in events])
        try:
            time.sleep(self.flush_s)
            if number in self.fail_batches:
                raise StoreFailedError(f"injected failure of batch {number}")
            if number in self.interrupt_batches:
                raise KeyboardInterrupt
            return super().append_batch(events, tier)
        finally:
            with self._count:
                self.flushing -= 1


def _run_writers(committer, n_writers, per_writer, events_per_append=1, join_s=30.0):
    """Each writer appends its own trajectory; returns ({writer: [acks or errors]}, hung threads)."""
    results: dict[int, list] = {w: [] for w in range(n_writers)}

    def writer(w):
        seq = 0
        for _ in range(per_writer):
            batch = [ev(intent(op=f"op{w}-{seq + k}"), seq + k + 1, traj=f"traj{w}") for k in range(events_per_append)]
            try:
                acks = committer.append_many(batch)
            except StoreError as exc:
                results[w].append(exc)
                return   # a refused append leaves a gap: this writer stops, as a gate would
            results[w].append(acks)
            seq += events_per_append

    threads = [threading.Thread(target=writer, args=(w,), daemon=True) for w in range(n_writers)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + join_s
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return results, [t for t in threads if t.is_alive()]


def test_writers_share_flushes_and_every_acknowledged_event_is_stored_once_in_order():
    store = SlowStore(flush_s=0.003)
    committer = LeaderGroupCommitter(store, AckTier.MEMORY, batch_cap=64)
    results, hung = _run_writers(committer, n_writers=8, per_writer=15, events_per_append=3)
    assert not hung
    assert not store.overlapped, "two leaders flushed at once"
    for w, outs in results.items():
        assert len(outs) == 15 and all(isinstance(o, list) for o in outs)
        acked = [a.outcome.sequence_number for acks in outs for a in acks]
        assert acked == list(range(1, 46))
        assert [e.sequence_number for e in store.read(f"traj{w}")] == acked
    ids = [i for b in store.batches for i in b]
    assert len(ids) == len(set(ids)) == 8 * 45
    sizes = committer.stats.batch_sizes
    assert sum(sizes) == 8 * 45 and max(sizes) > 3, "writers never shared a flush"
    assert len(sizes) < 8 * 15, "one flush per append: no group commit happened"
    # eq. 2 terms are measured per event: the wait before the flush and the flush itself
    assert all(a.storage_s >= 0.003 * 0.9 and a.queue_wait_s >= 0 for a in committer.stats.acks)


def test_no_writer_is_acknowledged_before_its_flush_returned():
    store = SlowStore(flush_s=0.004)
    committer = LeaderGroupCommitter(store, AckTier.MEMORY)
    early = []

    def check(w, acks):
        stored = {e.event_id for e in store.read(f"traj{w}")}
        early.extend(a.outcome.event_id for a in acks if a.outcome.event_id not in stored)

    def writer(w):
        for i in range(1, 6):
            check(w, committer.append_many([ev(intent(op=f"op{w}-{i}"), i, traj=f"traj{w}")]))

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not early


@pytest.mark.parametrize("cap", [1, 2, 5])
def test_batches_respect_the_cap_and_an_oversize_append_gets_a_flush_of_its_own(cap):
    store = SlowStore(flush_s=0.002)
    committer = LeaderGroupCommitter(store, AckTier.MEMORY, batch_cap=cap)
    results, hung = _run_writers(committer, n_writers=6, per_writer=8, events_per_append=1)
    assert not hung and all(len(v) == 8 for v in results.values())
    assert max(len(b) for b in store.batches) <= cap
    big = [ev(intent(op=f"big{k}"), k + 1, traj="big") for k in range(cap + 3)]
    assert len(committer.append_many(big)) == cap + 3
    assert store.batches[-1] == [e.event_id for e in big]


def test_a_failed_flush_reaches_exactly_its_writers_and_the_lead_passes_on():
    store = SlowStore(flush_s=0.002, fail_batches={3, 7})
    committer = LeaderGroupCommitter(store, AckTier.MEMORY, batch_cap=2)   # many batches of few writers
    results, hung = _run_writers(committer, n_writers=8, per_writer=10)
    assert not hung, "a failed flush stranded waiting writers"
    failed_ids = {i for n in (3, 7) for i in store.batches[n]}
    for outs in results.values():
        for out in outs:
            if isinstance(out, StoreError):
                assert "injected failure" in str(out)
            else:
                assert out[0].outcome.event_id not in failed_ids
    failed_writers = {w for w, outs in results.items() if outs and isinstance(outs[-1], StoreError)}
    assert failed_writers == {int(i.split("-")[0].removeprefix("traj")) for i in failed_ids}
    # the committer still works after the failures
    assert committer.append(ev(task(), 1, traj="after")).outcome.sequence_number == 1


def test_ctrl_c_in_the_leader_is_raised_there_and_its_followers_get_a_store_error():
    store = SlowStore(flush_s=0.02, interrupt_batches={0})
    committer = LeaderGroupCommitter(store, AckTier.MEMORY)
    started = threading.Event()
    caught: dict[str, BaseException] = {}

    def leader():
        started.set()
        try:
            committer.append(ev(task(), 1, traj="leader"))
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            caught["leader"] = exc

    def follower():
        started.wait()
        time.sleep(0.005)   # arrive while the leader's flush sleeps
        try:
            committer.append(ev(task(), 1, traj="follower"))
        except BaseException as exc:  # noqa: BLE001
            caught["follower"] = exc

    threads = [threading.Thread(target=leader), threading.Thread(target=follower)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads)
    assert isinstance(caught["leader"], KeyboardInterrupt)
    # the follower was either in the interrupted batch (a StoreError) or led the next flush itself
    if "follower" in caught:
        assert isinstance(caught["follower"], StoreError)
    else:
        assert [e.sequence_number for e in store.read("follower")] == [1]
    assert committer.append(ev(task(), 1, traj="later")).outcome.sequence_number == 1


def test_an_interrupted_follower_passes_on_a_lead_it_was_handed():
    store = SlowStore(flush_s=0.001)
    committer = LeaderGroupCommitter(store, AckTier.MEMORY)
    from kernel_lib.log.group_commit import _Waiter
    # a follower that was handed the lead, then interrupted before it could flush
    quitter = _Waiter([ev(task(), 1, traj="quitter")], 0.0)
    waiting = _Waiter([ev(task(), 1, traj="waiting")], 0.0)
    committer._queue.extend([quitter, waiting])
    committer._leading = True
    quitter.lead = True
    committer._abandon(quitter)
    assert waiting.lead and waiting.lock.acquire(blocking=False), "the lead was not passed on"
    committer._lead(waiting)
    assert waiting.done and not committer._leading and not committer._queue
    assert [e.sequence_number for e in store.read("waiting")] == [1] and store.head("quitter") == 0


def test_closed_committer_refuses_and_bad_arguments_are_config_errors():
    committer = LeaderGroupCommitter(MemoryStore(), AckTier.MEMORY)
    with committer:
        committer.append(ev(task(), 1, traj="t"))
    with pytest.raises(StoreClosedError):
        committer.append(ev(task(), 2, traj="t"))
    for cap in (0, -1, 1.5, True):
        with pytest.raises(ConfigError):
            LeaderGroupCommitter(MemoryStore(), AckTier.MEMORY, batch_cap=cap)
    with pytest.raises(StoreError):
        LeaderGroupCommitter(MemoryStore(), AckTier.MEMORY).append_many(["not an event"])


@pytest.mark.parametrize("seed", range(5))
def test_random_caps_and_failures_never_lose_reorder_or_hang(seed):
    rng = random.Random(seed)
    store = SlowStore(flush_s=rng.choice([0, 0.0005, 0.002]),
                      fail_batches=set(rng.sample(range(60), 4)))
    committer = LeaderGroupCommitter(store, AckTier.MEMORY, batch_cap=rng.randint(1, 12))
    results, hung = _run_writers(committer, n_writers=rng.randint(2, 12), per_writer=rng.randint(1, 12),
                                 events_per_append=rng.randint(1, 3))
    assert not hung
    stored = {i for b in store.batches for i in b}
    for w, outs in results.items():
        acked = [a.outcome.event_id for o in outs if isinstance(o, list) for a in o]
        assert [e.event_id for e in store.read(f"traj{w}")] == acked
        assert set(acked) <= stored


def test_a_trajectory_log_writes_through_it():
    store = MemoryStore()
    committer = LeaderGroupCommitter(store, AckTier.MEMORY)
    log = TrajectoryLog(store, "t", must_survive="none", committer=committer)
    log.append_many([task()])
    assert log.barriers == 1 and committer.stats.batch_sizes == [1]
