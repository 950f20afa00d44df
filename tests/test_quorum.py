"""The quorum tier on real etcd members (§11.3.1 table 2 row 3, footnote 3; §11.5.1).

Fault model: members are SIGKILLed (the leader mid-append included), SIGSTOPped (a minority
partition), lose their data directory (volume loss), and a majority is lost; a zombie owner with
a stale owner_epoch keeps appending. Invariant: every acknowledged event survives, in order, with
no gap and no duplicate; nothing is acknowledged without a majority; no stale owner's append lands.
Goal: the store and the coordinator say what happened with typed errors.
"""

from __future__ import annotations

import threading
import time

import pytest

from kernel_lib.errors import (AcknowledgmentTooWeakError, ConflictingDuplicateError, LeaseHeldError, LeaseLostError,
                               SequenceGapError, StaleOwnerError)
from kernel_lib.log import SQLiteStore, TrajectoryLog
from kernel_lib.log.base import AckTier, FailureDomain
from kernel_lib.quorum import EtcdCluster, EtcdStore, QuorumUnavailableError
from kernel_lib.quorum.coordinator import EtcdOwnershipCoordinator
from kernel_lib.quorum.demo import placement_demo, quorum_demo
from kernel_lib.core.record import fold, initial_record
from tests.helpers import ev, intent, task

pytestmark = pytest.mark.quorum


@pytest.fixture
def cluster():
    with EtcdCluster(3) as c:
        yield c


def _log(store, tid="q", epoch=0):
    return TrajectoryLog(store, tid, must_survive="volume_loss", owner_epoch=epoch)


def test_the_store_offers_only_the_quorum_tier_and_a_local_store_cannot_promise_volume_loss(cluster, tmp_path):
    store = EtcdStore(cluster.endpoints())
    assert store.offered_tiers == (AckTier.QUORUM,) and AckTier.QUORUM.covers(FailureDomain.VOLUME_LOSS)
    log = _log(store)
    log.append(task())
    assert log.tier is AckTier.QUORUM
    with pytest.raises(AcknowledgmentTooWeakError):
        TrajectoryLog(SQLiteStore.open(tmp_path / "l.db", create=True), "q", must_survive="volume_loss")


def test_the_append_contract_holds_on_etcd(cluster):
    """Gapless sequence numbers, semantic dedup (identical retry acknowledged, conflicting one
    refused), and a readable, foldable history."""
    store = EtcdStore(cluster.endpoints())
    e1, e2 = ev(task(), 1, traj="q"), ev(intent(), 2, traj="q")
    store.append_batch([e1, e2], AckTier.QUORUM)
    assert store.append(e2, AckTier.QUORUM).duplicate
    with pytest.raises(ConflictingDuplicateError):
        store.append(ev(intent(op="other"), 3, traj="q", event_id=e2.event_id), AckTier.QUORUM)
    with pytest.raises(SequenceGapError):
        store.append(ev(intent(op="x"), 5, traj="q"), AckTier.QUORUM)
    assert [e.digest for e in store.read("q")] == [e1.digest, e2.digest] and store.trajectories() == ["q"]
    fold(initial_record("q"), store.read("q"))


def test_a_stale_owner_is_fenced_atomically_with_the_append(cluster):
    """Fault: a zombie (epoch 1) and its replacement (epoch 2) on separate connections append
    concurrently. Invariant: once epoch 2 is claimed, no epoch-1 append lands."""
    zombie_store, new_store = EtcdStore(cluster.endpoints()), EtcdStore(cluster.endpoints())
    zombie = _log(zombie_store, epoch=1)
    zombie.append(task())
    assert new_store.claim_epoch("q") == 2
    with pytest.raises(StaleOwnerError):
        zombie.append(intent())
    replacement = _log(new_store, epoch=2)
    replacement.append(intent(op="by-the-new-owner"))
    assert [e.owner_epoch for e in new_store.read("q")] == [1, 2]

    # racing claims from threads: every winner gets a distinct epoch
    got, errors = [], []

    def claim():
        try:
            got.append(EtcdStore(cluster.endpoints()).claim_epoch("race"))
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)
    threads = [threading.Thread(target=claim) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and len(set(got)) == len(got) == 6


def test_killing_the_leader_mid_append_loses_no_acknowledged_event(cluster):
    """Fault: the Raft leader is SIGKILLed while a writer thread appends. Invariant: every
    acknowledged event is in the log afterwards, in order, gapless; appends resume."""
    store = EtcdStore(cluster.endpoints(), timeout_s=5.0)
    log = _log(store)
    log.append(task())
    acked, stop, failures = [], threading.Event(), []

    def writer():
        i = 0
        while not stop.is_set():
            i += 1
            try:
                acked.append(log.append(intent(op=f"o{i}")).event_id)
            except QuorumUnavailableError as exc:
                failures.append(exc)
                return
    t = threading.Thread(target=writer)
    t.start()
    time.sleep(0.3)
    leader = cluster.leader()
    cluster.kill(leader.name)
    time.sleep(1.0)
    stop.set()
    t.join(30)
    assert not failures
    cluster.restart(leader.name)
    ids = [e.event_id for e in EtcdStore(cluster.endpoints()).read("q")]
    assert ids[1:] == acked and len(acked) > 5
    assert [e.sequence_number for e in store.read("q")] == list(range(1, len(ids) + 1))


def test_a_minority_partition_does_not_stop_appends_and_the_member_catches_up(cluster):
    store = EtcdStore(cluster.endpoints(), timeout_s=5.0)
    log = _log(store)
    log.append(task())
    paused = cluster.pause(cluster.members[0].name)
    for i in range(5):
        log.append(intent(op=f"p{i}"))
    cluster.resume(paused.name)
    cluster.kill(cluster.members[1].name)        # now the resumed member is needed for a majority
    log.append(intent(op="after"))
    assert EtcdStore([paused.client_url]).head("q") == 7


def test_without_a_majority_nothing_is_acknowledged_and_everything_acknowledged_survives(cluster):
    """Fault: two of three members killed. Goal: the append raises QuorumUnavailableError within
    the timeout (not acknowledged); after restart every acknowledged event is there."""
    store = EtcdStore(cluster.endpoints(), timeout_s=1.5)
    log = _log(store)
    acked = [log.append(task()).event_id] + [log.append(intent(op=f"a{i}")).event_id for i in range(3)]
    cluster.kill(cluster.members[0].name)
    cluster.kill(cluster.members[1].name)
    t0 = time.monotonic()
    with pytest.raises(QuorumUnavailableError, match="Nothing is acknowledged"):
        log.append(intent(op="no-majority"))
    assert time.monotonic() - t0 < 5
    cluster.restart(cluster.members[0].name)
    cluster.restart(cluster.members[1].name)
    after = [e.event_id for e in EtcdStore(cluster.endpoints()).read("q")]
    assert after[:len(acked)] == acked


def test_the_quorum_demo_reports_no_acknowledged_loss_and_a_stall_and_stops_every_process():
    rep = quorum_demo(per_phase=3, timeout_s=1.5)
    assert rep.acknowledged >= 10 and rep.acknowledged_lost == 0 and rep.stalled_without_majority
    assert rep.in_order and rep.processes_started == 3 and rep.processes_left_running == 0


def test_placement_decides_which_acknowledgments_survive_losing_the_worker_volume():
    """Exercise 1 for real: with no member on the worker's volume every acknowledgment survives
    with two copies outside it; with one co-located member (the colleague's majority) it still
    survives but may rest on one outside copy; with two co-located members acknowledged events are
    lost with the volume."""
    r0, r1, r2 = (placement_demo(k, appends=3) for k in (0, 1, 2))
    assert (r0.survived, r0.copies_outside_worker_volume) == (r0.acknowledged, 2)
    assert (r1.survived, r1.copies_outside_worker_volume) == (r1.acknowledged, 1)
    assert r2.survived == 0 and r2.acknowledged == 3


def test_etcd_leases_bound_how_long_a_lost_owner_blocks_recovery(cluster):
    co = EtcdOwnershipCoordinator(cluster.endpoints())
    assert co.survives_up_to is FailureDomain.VOLUME_LOSS
    first = co.acquire("q", "w1", 1.0)
    with pytest.raises(LeaseHeldError):
        co.acquire("q", "w2", 1.0)
    t0 = time.monotonic()                # w1 is frozen: no keep-alive; etcd expires its key on its own clock
    while True:
        try:
            second = co.acquire("q", "w2", 5.0)
            break
        except LeaseHeldError:
            assert time.monotonic() - t0 < 8, "a 1 s etcd lease should expire within a few seconds"
            time.sleep(0.1)
    assert time.monotonic() - t0 > 0.5      # not before its term
    assert second.owner_epoch == first.owner_epoch + 1
    with pytest.raises(LeaseLostError) as err:
        co.renew(first)
    assert err.value.reason == "superseded"
    assert co.check(second) is None and co.release(second) and co.current("q").released


def test_bench_quorum_reports_ratios_against_fdatasync_measured_in_the_same_run():
    from kernel_lib.bench.quorum import format_quorum_bench, run_quorum_bench
    r = run_quorum_bench(40, rounds=2, writers=4)
    lat, gc = r["latency"], r["group_commit"]
    assert lat["quorum"]["appends"] == lat["fdatasync"]["appends"] == 40
    assert lat["ratio_p50"] == pytest.approx(lat["quorum"]["p50_ms"] / lat["fdatasync"]["p50_ms"])
    assert gc["quorum"]["events"] == 40 and gc["quorum"]["mean_batch"] >= 1
    assert "ratio quorum / fdatasync" in format_quorum_bench(r)


@pytest.mark.parametrize("crash_after", ["ToolIntent", "ToolResult"])
def test_the_crash_worksheet_runs_unchanged_on_the_etcd_store(crash_after):
    """The worksheet with its log on a three-member etcd cluster: SIGKILL after the event, a
    replacement folds the surviving quorum log and reconciles; every member is stopped after."""
    from kernel_lib.live.controller import run_worksheet
    r = run_worksheet(crash_after, "etcd", test_delay_s=1.0)
    assert r["crash"]["signal"] == "SIGKILL" and r["crash"]["worker_exit"] == -9
    assert r["recovered"]["log_position"] == r["crash"]["log_position"]
    if crash_after == "ToolIntent":
        assert r["recovered"]["in_doubt"] == ["test_r18"]
    else:
        assert r["reconciled"]["operations"]["test_r18"]["status"] == "established"
    assert r["etcd"]["members_left_running"] == 0 and r["cleanup"]["workdir_removed"]


def test_the_zombie_is_refused_at_every_boundary_with_etcd_leases_and_log():
    from kernel_lib.live.controller import run_zombie
    r = run_zombie("etcd")
    assert r["ok"], ({k: v for k, v in r["checks"].items() if v is not True}, r)
    assert [g["owner_epoch"] for g in r["epochs"]["grants"]] == [1, 2] and r["epochs"]["log_fence"] == 2
    assert r["etcd"]["members_left_running"] == 0


def test_measure_tiers_reports_each_tier_of_table_2_with_its_failure_domain():
    from kernel_lib.bench.quorum import measure_tiers
    rows = {r["tier"]: r for r in measure_tiers(8)}
    assert [rows[t]["survives"] for t in ("write", "fdatasync", "quorum")] == ["process_crash", "host_crash",
                                                                               "volume_loss"]
    assert rows["fdatasync"]["ratio_to_fdatasync_p50"] == 1.0 and all(r["appends"] == 8 for r in rows.values())


def test_quorum_demo_cli_prints_the_promised_json_and_quorum_cluster_stops_its_members():
    import json
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "kernel_lib", "quorum-demo", "--json", "--per-phase", "2"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["acknowledged"] >= 7 and r["acknowledged_lost"] == 0 and r["stalled_without_majority"] is True
    out = subprocess.run([sys.executable, "-m", "kernel_lib", "quorum-cluster", "--seconds", "0.5", "--json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    pids = [m["pid"] for m in json.loads(out.stdout)["members"]]
    from kernel_lib.live.orphan import pid_alive
    assert len(pids) == 3 and not any(pid_alive(p) for p in pids)


def test_the_store_declares_what_it_survives_from_the_cluster_it_is_on(cluster):
    d = EtcdStore(cluster.endpoints()).declaration()
    assert d["members"] == 3 and d["majority"] == 2 and d["tolerates_member_losses"] == 1
    assert d["survives"] == ["process_crash", "host_crash", "volume_loss"] and d["tier"] == "quorum"


def test_a_lone_survivor_is_read_from_its_own_disk_without_a_majority(cluster):
    """The placement demo counts what survives without a majority by recovering each surviving
    member alone from its own disk (--force-new-cluster); on a member that did receive the events
    the count is every acknowledged event (so a 0 elsewhere is a reading, not a default)."""
    from kernel_lib.quorum.demo import TRAJECTORY, _count_on_disk_survivors
    store = EtcdStore(cluster.endpoints())
    log = _log(store, tid=TRAJECTORY)
    acked = [log.append(task()).event_id] + [log.append(intent(op=f"s{i}")).event_id for i in range(3)]
    time.sleep(0.3)                      # let every follower apply the commits
    cluster.kill(0)
    cluster.kill(1)
    assert _count_on_disk_survivors(cluster, [cluster.members[2]], acked) == len(acked)
