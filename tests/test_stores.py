"""The append contract of §11.8.4 and the tier/failure-domain pairing of §11.3.1, on every store."""

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


def tier_of(store):
    return store.strongest_tier()


def test_identical_retry_is_acknowledged_without_a_second_copy(any_store):
    t = tier_of(any_store)
    e = ev(task(), 1)
    first = any_store.append(e, t)
    again = any_store.append(e, t)
    assert not first.duplicate and again.duplicate and again.sequence_number == 1
    assert [x.event_id for x in any_store.read("traj-a")] == [e.event_id]
    assert any_store.head("traj-a") == 1


def test_conflicting_duplicate_is_an_integrity_error_and_nothing_is_overwritten(any_store):
    """Fault: a retried batch carries a timeout ToolResult under an event id the store holds with the
    success evidence (§11.8.4). Invariant: the stored success survives; the conflict is raised."""
    t = tier_of(any_store)
    any_store.append_batch([ev(task(), 1), ev(intent(), 2)], t)
    success = ev(result(status="completed"), 3, event_id="res-1")
    any_store.append(success, t)
    timeout = ev(result(status="timeout", complete=False), 3, event_id="res-1")
    with pytest.raises(ConflictingDuplicateError, match="split brain"):
        any_store.append(timeout, t)
    stored = list(any_store.read("traj-a"))
    assert stored[-1].canonical == success.canonical and len(stored) == 3


def test_gapless_sequence_numbers(any_store):
    t = tier_of(any_store)
    with pytest.raises(SequenceGapError):
        any_store.append(ev(task(), 2), t)
    any_store.append(ev(task(), 1), t)
    with pytest.raises(SequenceGapError):
        any_store.append(ev(intent(), 1, event_id="other"), t)   # position taken by another event
    with pytest.raises(SequenceGapError):
        any_store.append(ev(intent(), 3), t)
    assert any_store.head("traj-a") == 1


def test_stale_owner_is_fenced_at_the_log(any_store):
    t = tier_of(any_store)
    any_store.append(ev(task(), 1, epoch=1), t)
    with pytest.raises(StaleOwnerError, match="owner_epoch=0"):
        any_store.append(ev(intent(), 2, epoch=0), t)
    any_store.install_fence("traj-a", 2)
    with pytest.raises(StaleOwnerError):
        any_store.append(ev(intent(), 2, epoch=1), t)
    with pytest.raises(StaleOwnerError):
        any_store.install_fence("traj-a", 1)
    assert any_store.append(ev(intent(), 2, epoch=2), t).sequence_number == 2


def test_batch_outcomes_are_per_event(any_store):
    t = tier_of(any_store)
    out = any_store.append_batch([ev(task(), 1), ev(intent(), 5), ev(intent(), 2)], t)
    assert not isinstance(out[0], Exception) and isinstance(out[1], SequenceGapError)
    assert out[2].sequence_number == 2


def test_tiers_declare_failure_domains_and_weak_stores_are_refused(tmp_path):
    assert AckTier.WRITE.survives == {FailureDomain.NONE, FailureDomain.PROCESS_CRASH}
    assert AckTier.FDATASYNC.covers(FailureDomain.HOST_CRASH) and not AckTier.FDATASYNC.covers(FailureDomain.VOLUME_LOSS)
    sq = SQLiteStore.open(tmp_path / "x.sqlite")
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
    store = SQLiteStore.open(path)
    try:
        store.append(ev(intent(), 2, epoch=1), AckTier.FDATASYNC)
        q.put("appended")
    except StaleOwnerError as exc:
        q.put(f"fenced: {exc}")


def test_sqlite_fences_a_zombie_in_another_process(tmp_path):
    """Fault: the old owner (another process, epoch 1) appends after a new owner installed epoch 2.
    Goal: the log itself rejects it (§11.5.1)."""
    path = tmp_path / "log.sqlite"
    s = SQLiteStore.open(path)
    s.append(ev(task(), 1, epoch=1), AckTier.FDATASYNC)
    s.install_fence("traj-a", 2)
    q = mp.get_context("spawn").Queue()
    p = mp.get_context("spawn").Process(target=_zombie_append, args=(str(path), q))
    p.start()
    p.join(60)
    assert q.get(timeout=5).startswith("fenced")
    assert s.head("traj-a") == 1


def test_durable_stores_keep_everything_across_reopen(durable_store_kind, tmp_path):
    s = make_store(durable_store_kind, tmp_path)
    events = [ev(task(), 1), ev(intent(), 2), ev(result(), 3)]
    s.append_batch(events, AckTier.FDATASYNC)
    s.install_fence("traj-a", 4)
    s.close()
    s2 = make_store(durable_store_kind, tmp_path)
    assert [e.canonical for e in s2.read("traj-a")] == [e.canonical for e in events]
    assert s2.fence("traj-a") == 4 and s2.trajectories() == ["traj-a"]
    with pytest.raises(StaleOwnerError):
        s2.append(ev(task(), 4, epoch=3), AckTier.FDATASYNC)
    s2.close()


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


def test_mixed_batches_decide_every_event(any_store):
    """A batch mixing new events, an identical retry, a conflict and an id repeated inside the batch
    (SQLite's all-new fast path must fall back to deciding each one)."""
    t = tier_of(any_store)
    e1, e2 = ev(task(), 1), ev(intent(), 2)
    any_store.append(e1, t)
    out = any_store.append_batch([e1, e2, ev(intent(op="b"), 3, event_id=e2.event_id), ev(result(), 3)], t)
    assert out[0].duplicate and not out[1].duplicate
    assert isinstance(out[2], ConflictingDuplicateError)
    assert out[3].sequence_number == 3
    assert [e.canonical for e in any_store.read("traj-a")] == [e1.canonical, e2.canonical,
                                                              ev(result(), 3).canonical]


def test_a_long_lived_read_only_sqlite_reader_sees_writers_that_came_and_went(tmp_path):
    p = tmp_path / "log.sqlite"
    w = SQLiteStore.open(p)
    w.append_batch([ev(task(), 1)], AckTier.FDATASYNC)
    w.close()
    ro = SQLiteStore.open(p, read_only=True)
    assert ro.head("traj-a") == 1
    w = SQLiteStore.open(p)
    w.append_batch([ev(intent(), 2), ev(task(), 1, traj="traj-b")], AckTier.FDATASYNC)
    w.close()                                     # a clean close removes the -wal again
    assert ro.head("traj-a") == 2 and ro.trajectories() == ["traj-a", "traj-b"]
    assert [e.sequence_number for e in ro.read("traj-a")] == [1, 2]
    ro.close()


# --- claiming an epoch atomically (§11.5.1: no two owners with one epoch) ---------------------

def test_claim_epoch_installs_a_strictly_newer_epoch_in_every_store(any_store):
    """claim_epoch() is fence + 1; a given epoch is installed only if strictly newer (unlike
    install_fence, which takes the current epoch again); bad arguments change nothing."""
    from kernel_lib.errors import StoreError

    assert any_store.claim_epoch("traj-a") == 1 and any_store.fence("traj-a") == 1
    assert any_store.claim_epoch("traj-a") == 2
    any_store.install_fence("traj-a", 2)                       # install_fence accepts an equal epoch
    with pytest.raises(StaleOwnerError, match="owner_epoch=2"):
        any_store.claim_epoch("traj-a", 2)                     # claim_epoch never does
    with pytest.raises(StaleOwnerError):
        any_store.claim_epoch("traj-a", 1)
    assert any_store.claim_epoch("traj-a", 7) == 7 and any_store.fence("traj-a") == 7
    for tid, epoch in (("", None), (None, None), ("traj-a", 0), ("traj-a", True), ("traj-a", 2**63), ("traj-a", 8.0)):
        with pytest.raises(StoreError):
            any_store.claim_epoch(tid, epoch)
    assert any_store.fence("traj-a") == 7
    with pytest.raises(StaleOwnerError):                       # an append under the old epoch is fenced
        any_store.append(ev(task(), 1, epoch=6), tier_of(any_store))
    assert any_store.claim_epoch("traj-b") == 1                # per trajectory


def test_claim_epoch_is_durable_and_refused_read_only(durable_store_kind, tmp_path):
    from kernel_lib.errors import StoreReadOnlyError
    from kernel_lib.log import open_store

    s = make_store(durable_store_kind, tmp_path)
    assert s.claim_epoch("traj-a") == 1
    s.close()
    path = tmp_path / ("log.sqlite" if durable_store_kind == "sqlite" else "seglog")
    ro = open_store(durable_store_kind, path, read_only=True)
    assert ro.fence("traj-a") == 1
    with pytest.raises(StoreReadOnlyError):
        ro.claim_epoch("traj-a")
    ro.close()
    s = make_store(durable_store_kind, tmp_path)
    assert s.claim_epoch("traj-a") == 2
    s.close()


def _racing_handles(kind, tmp_path):
    """Two handles on one log, as two claimants would hold: two SQLite connections; the segment
    log admits one writer per directory, so its claimants share the store object."""
    if kind == "memory":
        s = MemoryStore()
        return [s, s]
    if kind == "segment":
        s = make_store(kind, tmp_path)
        return [s, s]
    return [SQLiteStore.open(tmp_path / "log.sqlite") for _ in range(2)]


@pytest.mark.parametrize("kind", ["memory", "sqlite", "segment"])
def test_two_claimants_reading_the_fence_together_never_share_an_epoch(kind, tmp_path):
    """Fault: two replacement workers claim the trajectory at the same moment, without a
    coordinator. The handles' ``fence``/``install_fence`` are instrumented so that a claimant
    going through them must read the fence together with the other before either installs (the
    interleaving that gave both owner_epoch=1). Invariant: claim_epoch reads and installs in one
    step, so the two epochs differ and the older owner's append is fenced."""
    import threading

    handles = _racing_handles(kind, tmp_path)
    barrier = threading.Barrier(2)

    def instrument(store):
        read = store.fence

        def fence(tid):
            value = read(tid)
            try:
                barrier.wait(1.0)     # wait for the other claimant to have read it too
            except threading.BrokenBarrierError:
                pass
            return value
        store.fence = fence

    for h in {id(h): h for h in handles}.values():
        instrument(h)
    got: dict[int, int] = {}
    errors: list[BaseException] = []

    def claim(i):
        try:
            got[i] = handles[i].claim_epoch("traj-a")
        except BaseException as exc:   # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
    threads = [threading.Thread(target=claim, args=(i,)) for i in range(2)]
    [t.start() for t in threads]
    [t.join(30) for t in threads]
    try:
        assert not errors and sorted(got.values()) == [1, 2]
        loser = min(got, key=got.get)
        with pytest.raises(StaleOwnerError):
            handles[loser].append(ev(task(), 1, epoch=got[loser]), tier_of(handles[loser]))
        handles[1 - loser].append(ev(task(), 1, epoch=got[1 - loser]), tier_of(handles[1 - loser]))
    finally:
        for h in {id(h): h for h in handles}.values():
            h.close()


_CLAIMER = """
import json, sys
from kernel_lib.log import SQLiteStore
s = SQLiteStore.open(sys.argv[1])
print(json.dumps([s.claim_epoch("traj-a") for _ in range(int(sys.argv[2]))]))
s.close()
"""


def test_claim_epoch_from_several_processes_hands_out_each_epoch_once(tmp_path):
    """Three processes claim 15 epochs each on one SQLite log at once: every claim is one BEGIN
    IMMEDIATE transaction, so the 45 epochs are exactly 1..45, none twice."""
    import json
    import subprocess
    import sys

    path = tmp_path / "log.sqlite"
    SQLiteStore.open(path).close()
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    procs = [subprocess.Popen([sys.executable, "-c", _CLAIMER, str(path), "15"], stdout=subprocess.PIPE, text=True,
                              cwd=root) for _ in range(3)]
    claimed = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        claimed += json.loads(out)
    assert sorted(claimed) == list(range(1, 46))
    s = SQLiteStore.open(path)
    assert s.fence("traj-a") == 45
    s.close()
