"""Availability and ownership (§11.5.1): leases, owner epochs, fencing at every boundary.

Each scenario states its fault model, the invariant that must hold under it, and the goal. The
stateful test at the end interleaves owners acquiring leases, crashing, stalling through clock
advances, renewing and appending, and checks that the log never accepts an append stamped with
a stale owner_epoch and that granted epochs strictly increase.
"""

from __future__ import annotations

import itertools
import json
import shutil
import sqlite3
import tempfile
import threading
from pathlib import Path

import httpx
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kernel_lib.checkpoint import Checkpointer, DirectoryBlobStore, MemoryBlobStore
from kernel_lib.gate.dispatch import (
    AdmissionPolicy,
    DispatchGate,
    ToolProposal,
    ToolReply,
    conclude,
)
from kernel_lib.errors import (
    AcknowledgmentTooWeakError,
    ConfigError,
    CoordinatorUnavailableError,
    DispatchWithheld,
    FencedRequestError,
    LeaseHeldError,
    LeaseLostError,
    ReconstructionUnavailableError,
    StaleOwnerError,
    StoreReadOnlyError,
)
from kernel_lib.core.events import Event
from kernel_lib.sim.worksheet import WORKSHEET_TRAJECTORY, worksheet_events
from kernel_lib.log import (
    AckTier,
    FailureDomain,
    MemoryStore,
    SQLiteStore,
    TrajectoryLog,
)
from kernel_lib.ownership.leases import (
    LeaseCheck,
    ManualClock,
    ReplicaView,
    SQLiteOwnershipCoordinator,
    check_available,
    check_available_at,
    require_coordinator_domain,
    take_ownership,
)
from kernel_lib.core.record import fold, initial_record
from tests.conftest import make_store
from tests.helpers import intent, task

TID = "traj_own"
POLICY = AdmissionPolicy({"g": {"run_tests"}})
PROPOSAL = ToolProposal("test_r18", "attempt1", "run_tests", {"snapshot": "ws_r18"}, "g", 0.5)


@pytest.fixture
def clock():
    return ManualClock(1_000.0)


@pytest.fixture
def coord(tmp_path, clock):
    c = SQLiteOwnershipCoordinator.open(tmp_path / "leases.sqlite", clock=clock)
    yield c
    c.close()


# ------------------------------------------------------------------------------------------------
# the coordinator
# ------------------------------------------------------------------------------------------------


def test_lease_expiry_and_takeover(coord, clock):
    """Fault model: worker A stops renewing (crashed or partitioned). Invariant: nobody else is
    granted the trajectory while A's lease is live, and every grant carries a new, larger epoch.
    Goal: expiry bounds how long A can block recovery; B takes over right after it."""
    a = coord.acquire(TID, "A", ttl_s=10)
    assert (a.owner_epoch, a.owner_id, a.expires_at_s) == (1, "A", 1_010.0)
    clock.advance(5)
    with pytest.raises(LeaseHeldError) as held:
        coord.acquire(TID, "B", ttl_s=10)
    assert held.value.holder == "A" and held.value.owner_epoch == 1 and held.value.remaining_s == pytest.approx(5)
    clock.advance(5)                                   # exactly at expiry: the lease is over
    b = coord.acquire(TID, "B", ttl_s=10)
    assert b.owner_epoch == 2 and coord.current(TID) == b
    assert [g.owner_epoch for g in coord.history(TID)] == [1, 2]
    assert [g.owner_id for g in coord.history(TID)] == ["A", "B"]
    # a floor: the grant lands above an epoch some boundary has already seen
    clock.advance(11)
    assert coord.acquire(TID, "C", ttl_s=1, min_epoch=40).owner_epoch == 41
    assert coord.current("never-granted") is None


def test_renew_after_takeover_fails(coord, clock):
    """Fault model: A stalls past its expiry and B takes over; then A wakes and renews.
    Invariant: a renewal never revives a superseded grant. Goal: A learns it lost the lease
    (a typed error naming the newer epoch) and B's lease is untouched."""
    a = coord.acquire(TID, "A", ttl_s=10)
    clock.advance(8)
    a = coord.renew(a)                                 # in time: same epoch, a new term
    assert a.owner_epoch == 1 and a.expires_at_s == 1_018.0
    assert coord.check(a) is None
    assert "less than the margin" in coord.check(a, margin_s=20)
    clock.advance(10)
    assert "expired" in coord.check(a)
    b = coord.acquire(TID, "B", ttl_s=10)
    with pytest.raises(LeaseLostError) as lost:
        coord.renew(a)
    assert lost.value.reason == "superseded" and lost.value.current_epoch == 2
    assert "owner_epoch=2" in coord.check(a)
    with pytest.raises(LeaseLostError):
        coord.verify(a)
    assert coord.release(a) is False and coord.current(TID) == b
    # expired without a takeover: renew refuses too (a new grant, with a new epoch, is needed)
    clock.advance(30)
    with pytest.raises(LeaseLostError) as lost:
        coord.renew(b)
    assert lost.value.reason == "expired"
    # release lets the next owner in without waiting for expiry
    c = coord.acquire(TID, "C", ttl_s=100)
    assert coord.release(c) is True and "released" in coord.check(c)
    assert coord.acquire(TID, "D", ttl_s=100).owner_epoch == 4
    # the same claimant acquiring again supersedes its own older grant
    d2 = coord.acquire(TID, "D", ttl_s=100)
    assert d2.owner_epoch == 5


def test_concurrent_claimants_get_one_lease(tmp_path, clock):
    """Fault model: several replacement workers race for the same trajectory, each through its
    own connection (as separate processes would). Invariant: exactly one live grant. Goal: one
    winner, everyone else told who holds it."""
    path = tmp_path / "leases.sqlite"
    SQLiteOwnershipCoordinator.open(path, clock=clock).close()
    results: list = []
    barrier = threading.Barrier(6)

    def claim(i):
        c = SQLiteOwnershipCoordinator.open(path, clock=clock, busy_timeout_s=30)
        try:
            barrier.wait()
            results.append(c.acquire(TID, f"W{i}", ttl_s=60))
        except LeaseHeldError as exc:
            results.append(exc)
        finally:
            c.close()

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [r for r in results if not isinstance(r, Exception)]
    assert len(winners) == 1 and winners[0].owner_epoch == 1
    assert all(r.holder == winners[0].owner_id for r in results if isinstance(r, LeaseHeldError))


def test_coordinator_bad_input_and_failure_domain(tmp_path, coord):
    with pytest.raises(ConfigError):
        coord.acquire(TID, "A", ttl_s=0)
    with pytest.raises(ConfigError):
        coord.acquire(TID, "", ttl_s=1)
    with pytest.raises(ConfigError):
        coord.acquire(TID, "A", ttl_s=float("nan"))
    with pytest.raises(ConfigError):
        coord.acquire(TID, "A", ttl_s=1, min_epoch=-1)
    # not a coordinator database: refused, left untouched
    log_file = tmp_path / "log.sqlite"
    SQLiteStore.open(log_file, create=True).close()
    before = log_file.read_bytes()
    with pytest.raises(CoordinatorUnavailableError, match="not a kernel_lib ownership coordinator"):
        SQLiteOwnershipCoordinator.open(log_file)
    assert log_file.read_bytes() == before
    # the coordinator must survive what the log survives
    require_coordinator_domain(coord, FailureDomain.HOST_CRASH)
    with pytest.raises(AcknowledgmentTooWeakError):
        require_coordinator_domain(coord, "volume_loss")
    coord.close()
    with pytest.raises(CoordinatorUnavailableError):
        coord.current(TID)


def _nan():
    return float("nan")


def _broken():
    raise OSError("clock unavailable")


@pytest.mark.parametrize("bad_clock", [_nan, lambda: float("inf"), lambda: "1000", lambda: None, lambda: True,
                                       _broken], ids=["nan", "inf", "str", "none", "bool", "raises"])
def test_a_coordinator_whose_clock_is_not_finite_decides_nothing(tmp_path, clock, bad_clock):
    """Fault model: the coordinator's clock returns NaN (or another non-time) or fails.
    Invariant: a lease service that cannot tell the time vouches for nothing: an expired lease
    is never reported valid, no grant is made over a live one, nothing is renewed or released.
    Goal: every decision raises CoordinatorUnavailableError; the gate's LeaseCheck withholds
    with a reason (never None); the rows are unchanged."""
    c = SQLiteOwnershipCoordinator.open(tmp_path / "c.sqlite", clock=clock)
    try:
        expired = c.acquire(TID, "A", ttl_s=10)
        live = c.acquire("other", "A", ttl_s=1_000)
        clock.advance(60)                                  # A's lease on TID expired 50 s ago
        assert "expired" in c.check(expired)
        c.clock = bad_clock
        before = (c.current(TID), c.current("other"))
        for call in (lambda: c.check(expired), lambda: c.check(live), lambda: c.acquire("other", "B", ttl_s=5),
                     lambda: c.acquire(TID, "B", ttl_s=5), lambda: c.renew(live), lambda: c.release(live),
                     lambda: c.verify(expired)):
            with pytest.raises(CoordinatorUnavailableError, match="clock"):
                call()
        for lease in (expired, live):
            why = LeaseCheck(c, lease)(lease.trajectory_id, lease.owner_epoch)
            assert why is not None and "cannot be verified" in why
        assert (c.current(TID), c.current("other")) == before
        assert c.check(expired, now=clock()) is not None   # an explicit, finite now still answers
        with pytest.raises(ConfigError):
            c.check(expired, now=float("nan"))
        with pytest.raises(ConfigError):
            c.check(live, now=clock(), margin_s=float("nan"))
    finally:
        c.close()


def test_manual_clock_holds_only_finite_times():
    for bad in (float("nan"), float("inf"), -float("inf"), "5", None, True, 10**400):
        with pytest.raises(ConfigError):
            ManualClock(bad)
    c = ManualClock(1e308)
    with pytest.raises(ConfigError):
        c.advance(1e308)                                   # would overflow to inf
    assert c() == 1e308


# ------------------------------------------------------------------------------------------------
# fencing at the log
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sqlite", "segment"])
def test_stale_append_rejected_in_both_stores(kind, tmp_path, coord, clock):
    """Fault model: A's lease expires while A is stalled; B takes ownership; A wakes and appends.
    Invariant: the log accepts no append stamped with an epoch older than the installed fence,
    also after the store is reopened. Goal: A's late write is refused with StaleOwnerError while
    B writes on. For SQLite, A and B hold separate connections, as two processes would; the
    segment log admits one opener (its directory lock), so there they share the store object."""
    store_a = make_store(kind, tmp_path)
    lease_a = take_ownership(coord, store_a, TID, "A", ttl_s=5)
    log_a = TrajectoryLog(store_a, TID, owner_epoch=lease_a.owner_epoch)
    log_a.append(task())
    assert store_a.fence(TID) == 1

    clock.advance(6)
    store_b = SQLiteStore.open(tmp_path / "log.sqlite", create=True) if kind == "sqlite" else store_a
    lease_b = take_ownership(coord, store_b, TID, "B", ttl_s=5)
    assert lease_b.owner_epoch == 2 and store_b.fence(TID) == 2 and store_a.fence(TID) == 2
    log_b = TrajectoryLog(store_b, TID, owner_epoch=2)

    with pytest.raises(StaleOwnerError, match="owner_epoch=1"):
        log_a.append(intent())                       # A's late append, next in line for A
    log_b.append(intent())                           # B goes on
    stale = Event.create(trajectory_id=TID, event_id="late", sequence_number=3, payload=intent(op="x"),
                         owner_epoch=1)
    (out,) = store_a.append_batch([stale], AckTier.FDATASYNC)
    assert isinstance(out, StaleOwnerError)
    assert [e.owner_epoch for e in store_b.read(TID)] == [1, 2]
    # a fence older than the installed one cannot be put back either
    with pytest.raises(StaleOwnerError):
        store_a.install_fence(TID, 1)
    if store_b is not store_a:
        store_b.close()
    store_a.close()
    reopened = make_store(kind, tmp_path)            # the fence is durable
    assert reopened.fence(TID) == 2
    with pytest.raises(StaleOwnerError):
        reopened.append(stale, AckTier.FDATASYNC)
    reopened.close()


def test_take_ownership_lands_above_the_log_fence(tmp_path, coord):
    """A log fenced before the coordinator existed (epoch 7): the first grant is 8, never an
    epoch the log would refuse."""
    store = make_store("sqlite", tmp_path)
    store.install_fence(TID, 7)
    assert take_ownership(coord, store, TID, "A", ttl_s=5).owner_epoch == 8
    assert store.fence(TID) == 8
    store.close()


def test_take_ownership_never_shares_an_epoch_with_a_claimant_without_a_coordinator(tmp_path, coord):
    """Fault model: A is granted owner_epoch=1 by the coordinator; before A installs it, a
    replacement running without a coordinator claims the log's next epoch (also 1). Invariant:
    no two owners hold one epoch. Goal: A's grant is refused as lost (the log already saw
    epoch 1) and given back, so the coordinator blocks nobody; the bare claimant alone writes."""
    store_a = make_store("sqlite", tmp_path)
    store_b = SQLiteStore.open(tmp_path / "log.sqlite", create=True)
    grant = coord.acquire
    bare = []

    def acquire_then_race(*a, **kw):
        lease = grant(*a, **kw)
        bare.append(store_b.claim_epoch(TID))      # the other replacement reaches the log first
        return lease
    coord.acquire = acquire_then_race
    try:
        with pytest.raises(LeaseLostError) as lost:
            take_ownership(coord, store_a, TID, "A", ttl_s=30)
        assert lost.value.owner_epoch == 1 == bare[0] and store_a.fence(TID) == 1
        assert coord.current(TID).released                     # not left blocking the next owner
        TrajectoryLog(store_b, TID, owner_epoch=1).append(task())
        coord.acquire = grant
        lease = take_ownership(coord, store_a, TID, "C", ttl_s=30)   # no wait for A's ttl
        assert lease.owner_epoch == 2 and store_a.fence(TID) == 2
    finally:
        store_b.close()
        store_a.close()


def test_take_ownership_gives_the_grant_back_when_the_log_refuses_the_fence(tmp_path, coord):
    """Fault model: the log cannot take the fence (here: opened read-only). Invariant: ownership
    is not established, and the grant does not block the next claimant for its whole ttl."""
    make_store("sqlite", tmp_path).close()
    ro = SQLiteStore.open(tmp_path / "log.sqlite", read_only=True)
    try:
        with pytest.raises(StoreReadOnlyError):
            take_ownership(coord, ro, TID, "A", ttl_s=30)
    finally:
        ro.close()
    assert coord.current(TID).released
    assert coord.acquire(TID, "B", ttl_s=30).owner_epoch == 2


# ------------------------------------------------------------------------------------------------
# fencing at the dispatch gate
# ------------------------------------------------------------------------------------------------


def _gate_for(store, coord, lease):
    log = TrajectoryLog(store, TID, owner_epoch=lease.owner_epoch)
    gate = DispatchGate(log, POLICY, fence_check=LeaseCheck(coord, lease))
    return gate


def test_stale_dispatch_withheld_by_the_gate(tmp_path, coord, clock):
    """Fault model: A's intent is durable, then A stalls before dispatch; its lease expires and
    B is granted the trajectory but has not reached the log yet (no log fence moved). Invariant:
    the dispatch-time recheck asks the coordinator, so no request leaves under a lost lease, and
    the withheld attempt keeps its operation-table entry, recorded as withheld (never sent, its
    reservation released: A still held the log's fence, so it could record that). Goal: A is
    stopped at the gate even where the log alone could not tell."""
    store = make_store("sqlite", tmp_path)
    lease_a = take_ownership(coord, store, TID, "A", ttl_s=10)
    gate = _gate_for(store, coord, lease_a)
    gate.start(task())
    sent = []

    def transport(i):
        sent.append(i.attempt_id)
        return ToolReply("accepted", job_handle="job_tests_18")

    def stall_after_intent(name, ev):
        if name == "after:ToolIntent":
            clock.advance(11)                            # A's lease lapses while it is stalled
    gate.on_position = stall_after_intent
    with pytest.raises(DispatchWithheld, match="expired"):
        gate.run_tool(PROPOSAL, transport)
    assert sent == [] and "test_r18" in gate.withheld
    assert gate.record.operations["test_r18"].status == "withheld"     # recorded as never sent
    assert gate.record.budget.reservations["res-test_r18/attempt1"].released is True

    gate.on_position = lambda name, ev: None
    coord.acquire(TID, "B", ttl_s=10)                    # granted, not yet installed in the log
    assert store.fence(TID) == lease_a.owner_epoch       # the log alone would let A through
    with pytest.raises(DispatchWithheld, match="moved to owner_epoch=2"):
        gate.release("test_r18", transport)
    assert sent == []
    store.install_fence(TID, 2)                          # B reaches the log: the log fence says it too
    with pytest.raises(DispatchWithheld, match="log's fence is owner_epoch=2"):
        gate.release("test_r18", transport)
    assert sent == []
    store.close()


def test_gate_withholds_when_ownership_cannot_be_verified(tmp_path, coord):
    """Fault model: the coordinator is unreachable at dispatch time. Invariant: a boundary that
    cannot verify ownership withholds. Goal: no request leaves; the live lease path dispatches."""
    store = make_store("sqlite", tmp_path)
    lease = take_ownership(coord, store, TID, "A", ttl_s=10)
    gate = _gate_for(store, coord, lease)
    gate.start(task())
    gate.run_tool(PROPOSAL, lambda i: ToolReply("accepted", job_handle="job_tests_18"))   # live lease: sent
    coord.close()
    with pytest.raises(DispatchWithheld, match="cannot be verified"):
        gate.run_tool(ToolProposal("test_r19", "attempt1", "run_tests", {"snapshot": "ws_r19"}, "g", 0.5),
                      lambda i: pytest.fail("dispatched without verified ownership"))

    def boom(tid, epoch):
        raise RuntimeError("lease service bug")
    gate.fence_check = boom
    with pytest.raises(DispatchWithheld, match="ownership check failed"):
        gate.release("test_r19", lambda i: pytest.fail("dispatched"))
    store.close()


# ------------------------------------------------------------------------------------------------
# fencing at the tool endpoint (the executor, over real HTTP on loopback)
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def executor():
    from kernel_lib.live.controller import (
        live_env,
        make_workdir,
        spawn_executor,
        stop_executor,
    )
    from kernel_lib.live.workspace import build_snapshot, remove_tree
    work = make_workdir()
    proc = None
    try:
        snap = build_snapshot(work / "snapshots")
        # a long pre-test delay: jobs are accepted but pytest never starts during this module
        proc, ready = spawn_executor(work, snap, usd_per_s=0.01, test_delay_s=600, env=live_env(), timeout_s=60)
        yield {"url": ready["url"], "digest": snap.digest}
    finally:
        stop_executor(proc)
        remove_tree(work)


def _job(executor, op, **extra):
    return {"operation_id": op, "attempt_id": "attempt1", "snapshot_digest": executor["digest"],
            "check": "pytest -q", **extra}


def test_executor_rejects_a_stale_epoch_over_http(executor):
    """Fault model: a zombie worker (epoch 1) sends requests after a new owner installed epoch 2
    at the executor. Invariant: the executor serves no request stamped with an epoch older than
    the newest it has seen for the trajectory or operation (nor an unstamped one once stamping
    began), and an operation it already accepted keeps its single job. Goal: 409 with a clear
    reason, every refusal listed, the preserved job untouched."""
    url, tid = executor["url"], "traj_http"
    with httpx.Client(timeout=10, trust_env=False) as c:
        r = c.post(f"{url}/jobs", json=_job(executor, "op_a", trajectory_id=tid, owner_epoch=1))
        assert r.status_code == 200 and r.json()["duplicate"] is False
        handle = r.json()["job_handle"]
        r = c.post(f"{url}/fences", json={"trajectory_id": tid, "owner_epoch": 2})
        assert r.status_code == 200 and r.json() == {"trajectory_id": tid, "owner_epoch": 2, "previous": 1}

        late_retry = c.post(f"{url}/jobs", json=_job(executor, "op_a", trajectory_id=tid, owner_epoch=1))
        assert late_retry.status_code == 409
        body = late_retry.json()
        assert body["reason"] == "stale_owner_epoch" and body["owner_epoch"] == 1 and body["fence"] == 2
        assert "no longer owns" in body["error"]
        late_new = c.post(f"{url}/jobs", json=_job(executor, "op_b", trajectory_id=tid, owner_epoch=1))
        assert late_new.status_code == 409 and late_new.json()["reason"] == "stale_owner_epoch"
        unstamped = c.post(f"{url}/jobs", json=_job(executor, "op_a"))   # names no trajectory, no epoch
        assert unstamped.status_code == 409 and unstamped.json()["reason"] == "unfenced_request"
        older_fence = c.post(f"{url}/fences", json={"trajectory_id": tid, "owner_epoch": 1})
        assert older_fence.status_code == 409

        st = c.get(f"{url}/operations/op_a").json()
        assert st["job_handle"] == handle and st["submissions"] == 1 and st["owner_epoch"] == 1
        assert c.get(f"{url}/operations/op_b").json()["status"] == "unknown"
        again = c.post(f"{url}/jobs", json=_job(executor, "op_a", trajectory_id=tid, owner_epoch=2))
        assert again.status_code == 200 and again.json()["duplicate"] is True   # the owner's repeat: same job
        assert c.get(f"{url}/operations/op_a").json()["submissions"] == 2

        fences = c.get(f"{url}/fences/{tid}").json()
        assert fences["owner_epoch"] == 2
        assert [x["reason"] for x in fences["rejected"]] == ["stale_owner_epoch", "stale_owner_epoch",
                                                             "unfenced_request", "stale_owner_epoch"]
        # requests that never carried an epoch are served as before; malformed epochs are refused
        assert c.post(f"{url}/jobs", json=_job(executor, "legacy")).status_code == 200
        for bad in ("1", True, -1, 2**63):
            assert c.post(f"{url}/jobs", json=_job(executor, "op_c", trajectory_id=tid,
                                                   owner_epoch=bad)).status_code == 422


def test_the_worker_transport_stamps_its_epoch(executor):
    """The worker's transport sends trajectory_id and owner_epoch; a fenced refusal raises
    FencedRequestError (nothing to record: the sender is not the owner)."""
    from kernel_lib.live.worker import make_transport
    url, tid = executor["url"], "traj_transport"
    log = TrajectoryLog(MemoryStore(), tid, must_survive="none", owner_epoch=3)
    args = {"snapshot_digest": executor["digest"], "check": "pytest -q"}
    with httpx.Client(timeout=10, trust_env=False) as c:
        send = make_transport(c, url, log)
        reply = send(intent(op="op_t", arguments=args))
        assert reply.status == "accepted"
        assert c.get(f"{url}/fences/{tid}").json()["owner_epoch"] == 3
        assert c.post(f"{url}/fences", json={"trajectory_id": tid, "owner_epoch": 4}).status_code == 200
        with pytest.raises(FencedRequestError) as fenced:
            send(intent(op="op_t2", arguments=args))
        assert fenced.value.owner_epoch == 3 and fenced.value.fence == 4


# ------------------------------------------------------------------------------------------------
# prefix completeness
# ------------------------------------------------------------------------------------------------


def _worksheet_store(kind, tmp_path):
    store = make_store(kind, tmp_path)
    worksheet_events(store)
    return store


@pytest.mark.parametrize("kind", ["sqlite", "segment"])
def test_a_complete_authoritative_prefix_is_available(kind, tmp_path):
    store = _worksheet_store(kind, tmp_path)
    events = list(store.read(WORKSHEET_TRAJECTORY))
    a = check_available(store, WORKSHEET_TRAJECTORY)
    assert a.ok and a.status == "available" and a.reasons == [] and a.head == len(events)
    assert a.prefix_sha256 == fold(initial_record(WORKSHEET_TRAJECTORY), events).prefix_sha256
    assert a.raise_if_unavailable() is a
    store.close()
    assert check_available_at(kind, store_path(kind, tmp_path), WORKSHEET_TRAJECTORY).ok


def store_path(kind, tmp_path):
    return tmp_path / ("log.sqlite" if kind == "sqlite" else "seglog")


@pytest.mark.parametrize("kind", ["sqlite", "segment"])
def test_a_missing_store_is_unavailable_not_empty(kind, tmp_path):
    """Fault model: the log's volume is not mounted (the path is missing). Invariant: the check
    never creates an empty log in its place. Goal: "unavailable" with the reason."""
    path = store_path(kind, tmp_path)
    a = check_available_at(kind, path, WORKSHEET_TRAJECTORY)
    assert not a.ok and a.head is None and "cannot be opened" in a.reasons[0]
    assert not path.exists()
    with pytest.raises(ReconstructionUnavailableError) as err:
        a.raise_if_unavailable()
    assert err.value.availability is a
    # an existing store that holds nothing of the trajectory: a missing history, not an empty one
    store = _worksheet_store(kind, tmp_path)
    b = check_available(store, "traj_other")
    assert not b.ok and b.head == 0 and "no events" in b.reasons[0]
    assert check_available(store, "traj_other", require_events=False).ok
    store.close()


def test_a_lagging_replica_is_not_authoritative():
    """Fault model (§11.9): recovery reads an asynchronous replica that has not yet received the
    ToolIntent for test_r18. Invariant: a replica's prefix is never certified complete. Goal:
    the check refuses it, where a fold of the replica would conclude "not dispatched"."""
    store = MemoryStore()
    events = worksheet_events(store)
    intent_at = next(e.sequence_number for e in events if e.event_type == "ToolIntent")
    replica = ReplicaView(store, lag_events=len(events) - intent_at + 1)
    seen = list(replica.read(WORKSHEET_TRAJECTORY))
    assert seen[-1].sequence_number == intent_at - 1
    misleading = conclude(fold(initial_record(WORKSHEET_TRAJECTORY), seen), "test_r18", prefix_complete=True)
    assert misleading[0] == "not_dispatched"            # what trusting the replica would claim
    a = check_available(replica, WORKSHEET_TRAJECTORY)
    assert not a.ok and not a.authoritative and "replica" in a.reasons[0]
    assert check_available(store, WORKSHEET_TRAJECTORY).ok
    with pytest.raises(Exception, match="no appends"):
        replica.append(events[0], AckTier.MEMORY)


def test_a_truncated_or_gapped_sqlite_log_is_unavailable(tmp_path):
    """Fault model: rows of the authoritative SQLite log were lost (a restored backup, a bad
    copy). Invariant: a shorter log than an acknowledged position, or one with a gap, is never
    folded as if complete. Goal: unavailable, naming the truncation or the gap."""
    store = _worksheet_store("sqlite", tmp_path)
    head = store.head(WORKSHEET_TRAJECTORY)
    store.close()
    db = sqlite3.connect(tmp_path / "log.sqlite")
    db.execute("DELETE FROM events WHERE sequence_number > ?", (head - 2,))
    db.commit()
    a = check_available_at("sqlite", tmp_path / "log.sqlite", WORKSHEET_TRAJECTORY, min_head=head)
    assert not a.ok and a.head == head - 2 and "truncated" in a.reasons[0]
    db.execute("DELETE FROM events WHERE sequence_number = 3")
    db.commit()
    db.close()
    b = check_available_at("sqlite", tmp_path / "log.sqlite", WORKSHEET_TRAJECTORY)
    assert not b.ok and any("cannot be read" in r and "CorruptLogError" in r for r in b.reasons)
    assert any("#3" in n for n in b.notes)


def test_a_segment_log_with_an_unsettled_or_damaged_tail_is_unavailable_read_only(tmp_path):
    """Fault model: the last segment file of the log is cut short (a copy still in progress, a
    partition hiding the tail). Invariant: a read-only view that stops at an unsettled tail is not
    certified. Goal: unavailable with the tail's position; damage before the tail as well."""
    store = _worksheet_store("segment", tmp_path)
    store.close()
    seg = max((tmp_path / "seglog").glob("*.seg"))
    data = seg.read_bytes()
    seg.write_bytes(data[:-7])
    a = check_available_at("segment", tmp_path / "seglog", WORKSHEET_TRAJECTORY)
    assert not a.ok and any("unsettled tail" in r for r in a.reasons)
    seg.write_bytes(data[:40] + bytes([data[40] ^ 0xFF]) + data[41:])   # damage in the first record
    b = check_available_at("segment", tmp_path / "seglog", WORKSHEET_TRAJECTORY)
    assert not b.ok and "cannot be opened" in b.reasons[0]


def test_a_missing_checkpoint_object_makes_reconstruction_unavailable(tmp_path):
    """Fault model: an immutable checkpoint object was lost from object storage. Invariant: the
    availability check verifies every object restore needs before anything is reconstructed.
    Goal: unavailable, naming the missing object; available again when it is back."""
    store = MemoryStore()
    log = TrajectoryLog(store, TID, must_survive="none")
    log.append(task(ceiling=100.0))
    log.append(intent(op="op0"))
    blobs = DirectoryBlobStore(str(tmp_path / "blobs"))
    cap = Checkpointer(log, blobs).capture(fold(initial_record(TID), store.read(TID)), {"a.py": b"print(1)\n"},
                                           kind="full")
    log.append(intent(op="op1"))
    ok = check_available(store, TID, blobs)
    assert ok.ok and ok.checkpoint_id == cap.checkpoint_id
    no_blobs = check_available(store, TID)
    assert not no_blobs.ok and "no blob store" in no_blobs.reasons[0]

    snapshot = cap.record_sha256
    path = Path(blobs.path_of(snapshot))
    kept = path.read_bytes()
    path.unlink()
    gone = check_available(store, TID, blobs)
    assert not gone.ok and "record snapshot" in gone.reasons[0] and snapshot[:16] in gone.reasons[0]
    path.write_bytes(kept[:-1] + b"x")                  # damaged rather than missing
    assert not check_available(store, TID, blobs).ok
    path.write_bytes(kept)
    assert check_available(store, TID, blobs).ok
    # a file blob of the workspace tree is required too
    mem = MemoryBlobStore()
    log2 = TrajectoryLog(MemoryStore(), TID, must_survive="none")
    log2.append(task(ceiling=100.0))
    Checkpointer(log2, mem).capture(fold(initial_record(TID), log2.events()), {"a.py": b"x = 2\n"}, kind="full")
    file_blob = next(d for d in mem.objects if mem.objects[d] == b"x = 2\n")
    del mem.objects[file_blob]
    bad = check_available(log2.store, TID, mem)
    assert not bad.ok and file_blob[:16] in bad.reasons[0]


def test_the_replacement_worker_reports_unavailable_for_a_missing_log(tmp_path, capsys):
    """The live replacement worker (``--recover``) on a missing log prints "unavailable" with
    the reason and exits 3; it creates no empty log and folds nothing."""
    import kernel_lib.live.worker as worker
    path = tmp_path / "gone.sqlite"
    rc = worker.main(["--recover", "--reconcile", "--store", "sqlite", "--store-path", str(path)])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 3 and out["status"] == "unavailable" and out["recovered"] is None
    assert "cannot be opened" in out["availability"]["reasons"][0]
    assert not path.exists()


# ------------------------------------------------------------------------------------------------
# stateful: owners, crashes, clock advances and appends interleaved
# ------------------------------------------------------------------------------------------------

OWNERS = ("A", "B", "C")
TTL_S = 10.0


class OwnershipMachine(RuleBasedStateMachine):
    """Owners race for one trajectory through a real coordinator and a real store.

    Each owner process has its own store handle (its own SQLite connection in the SQLite
    variant). An owner may crash (it forgets its lease; the coordinator keeps it until expiry),
    stall (the clock moves on while it holds a stale belief), renew, and append. Checked after
    every step: the log's fence equals the newest epoch granted; the log's owner_epochs never go
    down along the sequence; no append stamped with a stale epoch was accepted; granted epochs
    strictly increase.
    """

    kind = "memory"

    def __init__(self):
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="ownership_sm_"))
        self.clock = ManualClock(0.0)
        self.coord = SQLiteOwnershipCoordinator.open(self.dir / "leases.sqlite", clock=self.clock)
        self.shared = MemoryStore() if self.kind == "memory" else SQLiteStore.open(self.dir / "log.sqlite", create=True)
        self.stores = {o: (self.shared if self.kind == "memory"
                           else SQLiteStore.open(self.dir / "log.sqlite", create=True))
                       for o in OWNERS}
        self.leases: dict[str, object] = {}            # what each owner believes it holds
        self.granted: list[int] = []
        self.holder: tuple[str, int, float] | None = None   # model: (owner, epoch, expires_at_s), live or not
        self.accepted_epochs: list[int] = []

    def teardown(self):
        self.coord.close()
        for s in {id(s): s for s in [self.shared, *self.stores.values()]}.values():
            s.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _live_holder(self) -> str | None:
        if self.holder and self.clock() < self.holder[2]:
            return self.holder[0]
        return None

    @rule(owner=st.sampled_from(OWNERS))
    def acquire(self, owner):
        live = self._live_holder()
        try:
            lease = take_ownership(self.coord, self.stores[owner], TID, owner, TTL_S)
        except LeaseHeldError as exc:
            assert live is not None and live != owner and exc.holder == live
            return
        assert live is None or live == owner
        assert not self.granted or lease.owner_epoch > self.granted[-1]   # epochs strictly increase
        self.granted.append(lease.owner_epoch)
        self.leases[owner] = lease
        self.holder = (owner, lease.owner_epoch, lease.expires_at_s)

    @rule(owner=st.sampled_from(OWNERS))
    def takeover(self, owner):
        """The holder stalls past its expiry (the clock jumps), then ``owner`` claims the trajectory."""
        if self.holder is not None:
            self.clock.advance(max(0.0, self.holder[2] - self.clock()))
        self.acquire(owner)

    @rule(seconds=st.sampled_from([0.5, 3.0, TTL_S - 0.5, TTL_S, 2 * TTL_S]))
    def advance_clock(self, seconds):
        self.clock.advance(seconds)

    @rule(owner=st.sampled_from(OWNERS))
    def crash(self, owner):
        self.leases.pop(owner, None)                   # the process is gone; its lease lingers until expiry

    @precondition(lambda self: self.leases)
    @rule(data=st.data())
    def renew(self, data):
        owner = data.draw(st.sampled_from(sorted(self.leases)))
        lease = self.leases[owner]
        current = self.holder is not None and self.holder[:2] == (owner, lease.owner_epoch) \
            and self.clock() < self.holder[2]
        try:
            renewed = self.coord.renew(lease)
        except LeaseLostError:
            assert not current
            return
        assert current
        self.leases[owner] = renewed
        self.holder = (owner, renewed.owner_epoch, renewed.expires_at_s)

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), via_gate_check=st.booleans())
    def append(self, data, via_gate_check):
        """An owner (current, or a zombie with a superseded lease) appends the next event."""
        self._append_as(data.draw(st.sampled_from(sorted(self.leases))), via_gate_check)

    def _zombies(self):
        return sorted(o for o, lease in self.leases.items() if lease.owner_epoch < self.granted[-1])

    @precondition(lambda self: self.granted and self._zombies())
    @rule(data=st.data(), via_gate_check=st.booleans())
    def zombie_append(self, data, via_gate_check):
        """An owner whose lease was superseded wakes up and appends on its stale belief."""
        self._append_as(data.draw(st.sampled_from(self._zombies())), via_gate_check)

    def _append_as(self, owner, via_gate_check):
        lease = self.leases[owner]
        store = self.stores[owner]
        if via_gate_check:
            why = LeaseCheck(self.coord, lease)(TID, lease.owner_epoch)
            live_current = self._live_holder() == owner and self.holder[1] == lease.owner_epoch
            assert (why is None) == live_current
            if why is not None:
                return
            assert lease.owner_epoch == self.granted[-1]
        seq = self.shared.head(TID) + 1
        ev = Event.create(trajectory_id=TID, event_id=f"{TID}/e{lease.owner_epoch}/{seq}", sequence_number=seq,
                          payload=intent(op=f"op{seq}"), owner_epoch=lease.owner_epoch)
        (out,) = store.append_batch([ev], store.offered_tiers[0])
        stale = lease.owner_epoch < self.granted[-1]
        if stale:
            assert isinstance(out, StaleOwnerError), f"stale epoch {lease.owner_epoch} accepted: {out}"
        else:
            assert not isinstance(out, Exception), out
            self.accepted_epochs.append(lease.owner_epoch)

    @invariant()
    def fence_is_newest_grant(self):
        assert self.shared.fence(TID) == (self.granted[-1] if self.granted else 0)

    @invariant()
    def log_epochs_never_go_down(self):
        epochs = [e.owner_epoch for e in self.shared.read(TID)]
        assert epochs == sorted(epochs) and epochs == self.accepted_epochs

    @invariant()
    def grants_strictly_increase(self):
        hist = [g.owner_epoch for g in self.coord.history(TID)]
        assert hist == self.granted and all(a < b for a, b in itertools.pairwise(hist))


class SQLiteOwnershipMachine(OwnershipMachine):
    kind = "sqlite"


TestOwnershipMemory = OwnershipMachine.TestCase
TestOwnershipMemory.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
TestOwnershipSQLite = SQLiteOwnershipMachine.TestCase
TestOwnershipSQLite.settings = settings(max_examples=12, stateful_step_count=25, deadline=None)
