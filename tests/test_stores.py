"""Store-specific tests of the append contract of §11.8.4 and the tier/failure-domain pairing of
§11.3.1: concrete tier choices of the SQLite and memory stores, a zombie fenced from another
process, a long-lived SQLite reader, and a Hypothesis model of the contract on memory and SQLite.

The store-generic clauses (retries, conflicts, gaps, fencing, batches, claims, reopen, read-only)
are checks of the conformance suite, :mod:`kernel_lib.log.conformance`, which
``tests/test_store_conformance.py`` runs on every store, the etcd store included.
"""

from __future__ import annotations

import multiprocessing as mp

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from kernel_lib.errors import (AcknowledgmentTooWeakError, ConflictingDuplicateError, SequenceGapError,
                               StaleOwnerError, TierNotOfferedError)
from kernel_lib.log import (AckTier, FailureDomain, MemoryStore, SQLiteStore, TrajectoryLog,
                            choose_tier)
from tests.conftest import make_store
from tests.helpers import ev, intent, result, task


def test_tiers_declare_failure_domains_and_weak_stores_are_refused(tmp_path):
    assert AckTier.WRITE.survives == {FailureDomain.NONE, FailureDomain.PROCESS_CRASH}
    assert AckTier.FDATASYNC.covers(FailureDomain.HOST_CRASH)
    assert not AckTier.FDATASYNC.covers(FailureDomain.VOLUME_LOSS)
    sq = SQLiteStore.open(tmp_path / "x.sqlite", create=True)
    assert choose_tier(sq, FailureDomain.PROCESS_CRASH) is AckTier.WRITE
    assert choose_tier(sq, FailureDomain.HOST_CRASH) is AckTier.FDATASYNC
    with pytest.raises(AcknowledgmentTooWeakError) as ei:
        TrajectoryLog(sq, "t", must_survive=FailureDomain.VOLUME_LOSS)
    msg = str(ei.value)
    assert "'sqlite'" in msg and "fdatasync" in msg and "volume_loss" in msg
    with pytest.raises(AcknowledgmentTooWeakError, match="memory.*process_crash"):
        TrajectoryLog(MemoryStore(), "t", must_survive="process_crash")
    with pytest.raises(TierNotOfferedError):
        sq.append(ev(task(), 1), AckTier.QUORUM)


def test_memory_store_shows_what_is_lost():
    """A process-local log is gone with the process: a second store (the replacement worker's) is empty."""
    a = MemoryStore()
    TrajectoryLog(a, "t", must_survive="none").append(task())
    assert a.head("t") == 1 and MemoryStore().head("t") == 0


def _zombie_append(path, q):
    store = SQLiteStore.open(path, create=True)
    try:
        store.append(ev(intent(), 2, epoch=1), AckTier.FDATASYNC)
        q.put("appended")
    except StaleOwnerError as exc:
        q.put(f"fenced: {exc}")


def test_sqlite_fences_a_zombie_in_another_process(tmp_path):
    """Fault: the old owner (another process, epoch 1) appends after a new owner installed epoch 2.
    Goal: the log itself rejects it (§11.5.1)."""
    path = tmp_path / "log.sqlite"
    s = SQLiteStore.open(path, create=True)
    s.append(ev(task(), 1, epoch=1), AckTier.FDATASYNC)
    s.install_fence("traj-a", 2)
    q = mp.get_context("spawn").Queue()
    p = mp.get_context("spawn").Process(target=_zombie_append, args=(str(path), q))
    p.start()
    p.join(60)
    assert q.get(timeout=5).startswith("fenced")
    assert s.head("traj-a") == 1


# --- a stateful model of the contract ----------------------------------------------------------

class ContractMachine(RuleBasedStateMachine):
    """Random appends, retries, conflicts, stale owners and fences against a plain model."""

    kind = "memory"

    @initialize()
    def setup(self):
        import tempfile
        self.dir = tempfile.mkdtemp()
        from pathlib import Path
        self.store = make_store(self.kind, Path(self.dir))
        self.tier = self.store.strongest_tier()
        self.model: dict[str, list] = {"a": [], "b": []}
        self.fences = {"a": 0, "b": 0}
        self.n = 0

    def teardown(self):
        if hasattr(self, "store"):
            self.store.close()

    def _new(self, traj, epoch, seq=None):
        self.n += 1
        seq = seq or len(self.model[traj]) + 1
        return ev(result(op=f"op{self.n}"), seq, traj=traj, epoch=epoch, event_id=f"id{self.n}")

    @rule(traj=st.sampled_from("ab"), bump=st.integers(0, 1))
    def append_new(self, traj, bump):
        e = self._new(traj, self.fences[traj] + bump)
        self.store.append(e, self.tier)
        self.model[traj].append(e)
        self.fences[traj] = max(self.fences[traj], e.owner_epoch)

    @rule(traj=st.sampled_from("ab"), data=st.data())
    def retry_identical(self, traj, data):
        if self.model[traj]:
            e = data.draw(st.sampled_from(self.model[traj]))
            assert self.store.append(e, self.tier).duplicate

    @rule(traj=st.sampled_from("ab"), data=st.data())
    def conflicting_duplicate(self, traj, data):
        if self.model[traj]:
            old = data.draw(st.sampled_from(self.model[traj]))
            bad = ev(result(op="other", status="timeout"), old.sequence_number, traj=traj,
                     epoch=old.owner_epoch, event_id=old.event_id)
            with pytest.raises(ConflictingDuplicateError):
                self.store.append(bad, self.tier)

    @rule(traj=st.sampled_from("ab"))
    def stale_owner(self, traj):
        if self.fences[traj] > 0:
            with pytest.raises(StaleOwnerError):
                self.store.append(self._new(traj, self.fences[traj] - 1), self.tier)

    @rule(traj=st.sampled_from("ab"))
    def install_fence(self, traj):
        self.fences[traj] += 1
        self.store.install_fence(f"{traj}", self.fences[traj])

    @rule(traj=st.sampled_from("ab"), skip=st.integers(2, 4))
    def gap(self, traj, skip):
        with pytest.raises(SequenceGapError):
            self.store.append(self._new(traj, self.fences[traj], len(self.model[traj]) + skip), self.tier)

    @invariant()
    def store_matches_model(self):
        if not hasattr(self, "store"):
            return
        for traj, evs in self.model.items():
            assert [e.canonical for e in self.store.read(traj)] == [e.canonical for e in evs]
            assert self.store.head(traj) == len(evs)
            assert self.store.fence(traj) == self.fences[traj]


class MemoryContract(ContractMachine):
    kind = "memory"


class SQLiteContract(ContractMachine):
    kind = "sqlite"


TestMemoryContract = MemoryContract.TestCase
TestSQLiteContract = SQLiteContract.TestCase
TestSQLiteContract.settings = settings(max_examples=15, stateful_step_count=15)


def test_a_long_lived_read_only_sqlite_reader_sees_writers_that_came_and_went(tmp_path):
    p = tmp_path / "log.sqlite"
    w = SQLiteStore.open(p, create=True)
    w.append_batch([ev(task(), 1)], AckTier.FDATASYNC)
    w.close()
    ro = SQLiteStore.open(p, read_only=True)
    assert ro.head("traj-a") == 1
    w = SQLiteStore.open(p, create=True)
    w.append_batch([ev(intent(), 2), ev(task(), 1, traj="traj-b")], AckTier.FDATASYNC)
    w.close()                                     # a clean close removes the -wal again
    assert ro.head("traj-a") == 2 and ro.trajectories() == ["traj-a", "traj-b"]
    assert [e.sequence_number for e in ro.read("traj-a")] == [1, 2]
    ro.close()
