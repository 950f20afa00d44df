"""The kernel's bounds (kernel_lib.limits): their relations, the event size limit of every store,
and the bound on queued batches in group commit.

Fault model: a bound changed in one place and not another (an event the local stores take but
the quorum store cannot ship; an etcd transaction over the server's limits); an event too large
for a store half-applied or silently truncated; a slow store letting a group committer's queue
grow without bound, or a full queue dropping a writer. Invariants: the relations hold at import;
every store refuses an event over EVENT_BYTES_MAX with EventTooLargeError naming its size and
the limit, and appends nothing of its batch; a writer facing a full group-commit queue waits
and is acknowledged once the store catches up, and gets GroupCommitBackpressureError (nothing
queued) only when it gave a timeout.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import time

import pytest

from kernel_lib import limits
from kernel_lib.errors import ConfigError, EventTooLargeError, GroupCommitBackpressureError, StoreError
from kernel_lib.log import AckTier, GroupCommitter, MemoryStore
from kernel_lib.log.group_commit import AsyncGroupCommitter
from tests.conftest import make_store
from tests.helpers import ev, intent, task

TRAJ = "traj-a"


def sized(seq: int, n_bytes: int, traj: str = TRAJ):
    """An intent event whose canonical encoding is exactly ``n_bytes`` long."""
    base = ev(intent(op=f"op{seq}", arguments={"pad": ""}), seq, traj=traj)
    pad = n_bytes - len(base.canonical)
    assert pad >= 0
    e = ev(intent(op=f"op{seq}", arguments={"pad": "x" * pad}), seq, traj=traj)
    assert len(e.canonical) == n_bytes
    return e


def test_the_relations_between_the_bounds_hold():
    assert all(ok for ok, _ in limits._relations())
    # one largest event, base64-encoded with its keys, fits one etcd transaction and request
    assert limits.etcd_encoded_bytes(limits.EVENT_BYTES_MAX) <= limits.ETCD_TXN_BYTES_MAX < \
        limits.ETCD_REQUEST_BYTES_MAX
    assert limits.etcd_encoded_bytes(3) == 4 + limits.ETCD_EVENT_OVERHEAD_BYTES   # base64 of 3 bytes is 4
    names = [n for n in limits.__all__ if n.isupper() and n != "ETCD_EVENT_OVERHEAD_BYTES"]
    assert names and all(n.endswith(("_MAX", "_MIN")) for n in names)


@pytest.mark.parametrize("kind", ["memory", "sqlite", "segment"])
def test_every_store_refuses_an_event_over_the_size_limit_and_appends_nothing(kind, tmp_path):
    store = make_store(kind, tmp_path)
    try:
        tier = store.strongest_tier()
        store.append_batch([ev(task(), 1, traj=TRAJ)], tier)
        at_limit = sized(2, limits.EVENT_BYTES_MAX)
        over = sized(3, limits.EVENT_BYTES_MAX + 1)
        with pytest.raises(EventTooLargeError) as info:
            store.append_batch([at_limit, over], tier)   # the whole batch is refused
        err = info.value
        assert (err.size_bytes, err.limit_bytes, err.event_id) == (limits.EVENT_BYTES_MAX + 1, limits.EVENT_BYTES_MAX,
                                                                   over.event_id)
        assert f"{limits.EVENT_BYTES_MAX + 1:,} bytes" in str(err) and f"{limits.EVENT_BYTES_MAX:,}-byte" in str(err)
        assert isinstance(err, StoreError) and store.head(TRAJ) == 1   # nothing of the batch appended
        out = store.append_batch([at_limit], tier)            # an event at the limit is taken
        assert not isinstance(out[0], Exception) and store.head(TRAJ) == 2
        assert next(iter(store.read(TRAJ, 2, 2))).canonical == at_limit.canonical
    finally:
        store.close()


@pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd is not installed")
def test_the_quorum_store_refuses_an_event_over_the_size_limit_and_takes_one_at_it():
    from kernel_lib.log import AckTier as T
    from kernel_lib.quorum.cluster import EtcdCluster
    from kernel_lib.quorum.store import EtcdStore

    with EtcdCluster(1) as cluster:
        store = EtcdStore(cluster.endpoints(), prefix="limits/")
        try:
            store.append(ev(task(), 1, traj=TRAJ), T.QUORUM)
            with pytest.raises(EventTooLargeError):
                store.append_batch([sized(2, limits.EVENT_BYTES_MAX + 1)], T.QUORUM)
            assert store.head(TRAJ) == 1
            # the largest event fits one etcd transaction (the relation limits.py checks)
            out = store.append_batch([sized(2, limits.EVENT_BYTES_MAX), sized(3, limits.EVENT_BYTES_MAX)], T.QUORUM)
            assert not any(isinstance(o, Exception) for o in out) and store.head(TRAJ) == 3
        finally:
            store.close()


def test_the_group_committer_refuses_an_oversized_event_before_it_joins_a_batch():
    store = MemoryStore()
    with GroupCommitter(store, AckTier.MEMORY) as gc:
        with pytest.raises(EventTooLargeError):
            gc.submit(sized(1, limits.EVENT_BYTES_MAX + 1))
        assert gc.append(ev(task(), 1, traj=TRAJ)).outcome.sequence_number == 1


# --- group commit: a bounded queue, backpressure ------------------------------------------------


class GatedStore(MemoryStore):
    """A memory store whose flushes wait until the test opens the gate."""

    def __init__(self):
        super().__init__()
        self.gate = threading.Event()
        self.flushing = threading.Event()

    def append_batch(self, events, tier):
        self.flushing.set()
        assert self.gate.wait(30), "the test never opened the gate"
        return super().append_batch(events, tier)


def test_a_full_queue_makes_writers_wait_and_a_timeout_is_a_typed_error():
    store = GatedStore()
    gc = GroupCommitter(store, AckTier.MEMORY, batch_cap=1, flush_timer_s=0.0, queued_batches_max=1)
    try:
        first = gc.submit(ev(task(), 1, traj=TRAJ))          # taken by the flusher, which blocks in the store
        assert store.flushing.wait(10)
        queued = gc.submit(ev(intent(op="o2"), 2, traj=TRAJ))   # the one queued batch
        t0 = time.monotonic()
        with pytest.raises(GroupCommitBackpressureError) as info:
            gc.submit(ev(intent(op="o3"), 3, traj=TRAJ), timeout_s=0.2)
        assert time.monotonic() - t0 >= 0.19 and info.value.retryable
        assert len(gc._batches) == 1                           # nothing of the refused call was queued
        done: list = []
        waiter = threading.Thread(target=lambda: done.append(gc.append(ev(intent(op="o3"), 3, traj=TRAJ))))
        waiter.start()                                          # no timeout: it waits for a slot
        time.sleep(0.2)
        assert waiter.is_alive() and not done                   # still waiting, not dropped
        store.gate.set()
        waiter.join(10)
        assert not waiter.is_alive() and done[0].outcome.sequence_number == 3
        assert first.result(10).outcome.sequence_number == 1 and queued.result(10).outcome.sequence_number == 2
        assert [e.sequence_number for e in store.read(TRAJ)] == [1, 2, 3]
    finally:
        store.gate.set()
        gc.close()


def test_a_writer_waiting_for_a_slot_is_told_when_the_committer_closes():
    store = GatedStore()
    gc = GroupCommitter(store, AckTier.MEMORY, batch_cap=1, flush_timer_s=0.0, queued_batches_max=1)
    gc.submit(ev(task(), 1, traj=TRAJ))
    assert store.flushing.wait(10)
    gc.submit(ev(intent(op="o2"), 2, traj=TRAJ))
    errors: list = []

    def wait_for_slot():
        try:
            gc.submit(ev(intent(op="o3"), 3, traj=TRAJ))
        except StoreError as exc:
            errors.append(exc)
    t = threading.Thread(target=wait_for_slot)
    t.start()
    time.sleep(0.1)
    closer = threading.Thread(target=gc.close)   # blocks until the flusher drains, i.e. until the gate opens
    closer.start()
    deadline = time.monotonic() + 10
    while not gc._closed and time.monotonic() < deadline:
        time.sleep(0.01)
    t.join(10)
    assert not t.is_alive() and len(errors) == 1 and "closed" in str(errors[0])
    store.gate.set()
    closer.join(10)
    assert not closer.is_alive() and store.head(TRAJ) == 2   # the queued batches were flushed, nothing else


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None])
def test_the_queue_bound_must_be_a_positive_int(bad):
    with pytest.raises(ConfigError):
        GroupCommitter(MemoryStore(), AckTier.MEMORY, queued_batches_max=bad).close()


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "1", True])
def test_the_timeout_must_be_a_finite_number_of_seconds(bad):
    with GroupCommitter(MemoryStore(), AckTier.MEMORY) as gc:
        with pytest.raises(ConfigError):
            gc.submit(ev(task(), 1, traj=TRAJ), timeout_s=bad)


def test_the_async_committer_applies_the_same_backpressure():
    class SlowStore(MemoryStore):
        def append_batch(self, events, tier):
            time.sleep(0.3)
            return super().append_batch(events, tier)

    async def main():
        gc = AsyncGroupCommitter(SlowStore(), AckTier.MEMORY, batch_cap=1, flush_timer_s=0.0, queued_batches_max=1,
                                 offload=True)
        first = asyncio.ensure_future(gc.append(ev(task(), 1, traj=TRAJ)))
        await asyncio.sleep(0.05)                             # the flusher took it and is flushing
        second = asyncio.ensure_future(gc.append(ev(intent(op="o2"), 2, traj=TRAJ)))
        await asyncio.sleep(0)                               # queued
        with pytest.raises(GroupCommitBackpressureError):
            await gc.append(ev(intent(op="o3"), 3, traj=TRAJ), timeout_s=0.05)
        third = await gc.append(ev(intent(op="o3"), 3, traj=TRAJ))   # waits for a slot, then is acknowledged
        acks = [await first, await second, third]
        await gc.aclose()
        return [a.outcome.sequence_number for a in acks]

    assert asyncio.run(main()) == [1, 2, 3]
