"""Waiting for a dead owner's lease to end, with a deadline (kernel_lib.ownership.wait, §11.5.1).

Fault model: the owner of a trajectory dies (or stalls) without releasing its lease. Invariants: the
replacement is granted only after the lease has ended, under a newer owner_epoch; it never waits past
its deadline (a typed error names the holder); with a store the new epoch is also the log's fence.
The coordinator's clock and the wait's clock are the same fake clock, so nothing sleeps.
"""

from __future__ import annotations

import pytest

from kernel_lib.errors import ConfigError, LeaseHeldError, LeaseWaitTimeoutError, StaleOwnerError
from kernel_lib.core.events import TaskStarted
from kernel_lib.log import FailureDomain, MemoryStore, TrajectoryLog
from kernel_lib.ownership import ManualClock, SQLiteOwnershipCoordinator, wait_for_lease

TRAJ = "traj_wait"


@pytest.fixture
def coord(tmp_path):
    clock = ManualClock()
    c = SQLiteOwnershipCoordinator(tmp_path / "leases.sqlite", clock=clock)
    yield c, clock
    c.close()


def test_the_replacement_is_granted_once_the_dead_owners_lease_expires(coord):
    c, clock = coord
    w1 = c.acquire(TRAJ, "w1", 2.0)
    slept = []

    def sleep(s):
        slept.append(s)
        clock.advance(s)

    got = wait_for_lease(c, TRAJ, "w2", 5.0, timeout_s=30.0, interval_s=0.1, clock=clock, sleep=sleep)
    assert got.lease.owner_id == "w2" and got.lease.owner_epoch > w1.owner_epoch
    assert got.waited_s == pytest.approx(2.0, abs=0.11) and got.attempts == len(slept) + 1 > 1
    assert max(slept) <= 0.1 and got.held_by == (("w1", w1.owner_epoch),)
    assert got.to_dict()["lease"]["owner_id"] == "w2"


def test_a_free_trajectory_is_granted_at_once(coord):
    c, clock = coord
    got = wait_for_lease(c, TRAJ, "w2", 5.0, timeout_s=0, clock=clock, sleep=lambda s: pytest.fail("slept"))
    assert got.attempts == 1 and got.waited_s == 0 and got.held_by == ()


def test_the_wait_never_runs_past_its_deadline_and_says_who_holds_the_lease(coord):
    c, clock = coord
    w1 = c.acquire(TRAJ, "w1", 60.0)
    with pytest.raises(LeaseWaitTimeoutError) as info:
        wait_for_lease(c, TRAJ, "w2", 5.0, timeout_s=1.0, interval_s=0.3, clock=clock, sleep=clock.advance)
    err = info.value
    assert isinstance(err, LeaseHeldError) and err.holder == "w1" and err.owner_epoch == w1.owner_epoch
    assert err.waited_s == pytest.approx(1.0) and err.attempts >= 4
    assert c.current(TRAJ).owner_id == "w1"             # nothing was granted


def test_with_a_store_the_new_epoch_fences_the_old_owner(coord):
    c, clock = coord
    store = MemoryStore()
    w1 = c.acquire(TRAJ, "w1", 1.0)
    old = TrajectoryLog(store, TRAJ, must_survive=FailureDomain.NONE, owner_epoch=w1.owner_epoch)
    old.append(TaskStarted(task_id="t", requester="lab", objective="wait", grant_ids=["g"], budget_ceiling_usd=1.0,
                           finalization_reserve_usd=0.1))
    got = wait_for_lease(c, TRAJ, "w2", 5.0, store=store, clock=clock, sleep=clock.advance)
    assert store.fence(TRAJ) == got.lease.owner_epoch > w1.owner_epoch
    with pytest.raises(StaleOwnerError):
        old.append(TaskStarted(task_id="t2", requester="lab", objective="late", grant_ids=["g"],
                               budget_ceiling_usd=1.0, finalization_reserve_usd=0.1))


@pytest.mark.parametrize("kw", [{"timeout_s": -1}, {"timeout_s": float("nan")}, {"timeout_s": 1e9},
                                {"interval_s": 0}, {"interval_s": True}, {"timeout_s": "5"}])
def test_bad_timings_are_typed_errors(coord, kw):
    c, clock = coord
    with pytest.raises(ConfigError):
        wait_for_lease(c, TRAJ, "w2", 5.0, clock=clock, sleep=clock.advance, **kw)
