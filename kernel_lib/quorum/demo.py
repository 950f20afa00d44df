"""Real fault runs on a real etcd cluster: ``quorum-demo`` and the placement question of exercise 1.

:func:`quorum_demo` starts three members, appends through :class:`~kernel_lib.quorum.EtcdStore`,
kills one member (appends go on: two of three is a majority), kills a second (an append is not
acknowledged, and the caller is told so), restarts both, then checks that every acknowledged
event is in the log, in order, and stops every member.

:func:`placement_demo` makes the placement question of §11.12 exercise 1 real. A "worker volume"
is a directory that holds the worker's own files and the data directory of every member placed
*on* it (co-located). Members elsewhere are off-volume. With the off-volume members that are not
needed for a majority paused, acknowledged appends rest on whatever majority remains; then the
worker volume is deleted (its co-located members are killed and their data removed), the paused
members resume, and the surviving members are read: which acknowledged events survived, and how
many copies of each existed outside the worker's volume when it was acknowledged.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from kernel_lib.errors import ConfigError, QuorumUnavailableError, StoreError
from kernel_lib.core.events import TaskStarted, ToolIntent
from kernel_lib.log.base import AckTier
from kernel_lib.log.trajectory import TrajectoryLog
from kernel_lib.quorum.cluster import EtcdCluster
from kernel_lib.quorum.store import EtcdStore
from kernel_lib.sim.events import sample_intent

TRAJECTORY = "traj_quorum_demo"


def _intent(i: int) -> ToolIntent:
    return sample_intent(i)


def _task() -> TaskStarted:
    return TaskStarted(task_id=TRAJECTORY, requester="lab", objective="quorum demonstration", grant_ids=["g"],
                       budget_ceiling_usd=1.0, finalization_reserve_usd=0.1)


@dataclass
class QuorumDemoReport:
    """What :func:`quorum_demo` saw. ``steps`` lists each phase; latencies are measured (ms)."""

    members: int
    acknowledged: int = 0
    acknowledged_lost: int = 0
    stalled_without_majority: bool = False
    stall_waited_s: float = 0.0
    unacknowledged_later_present: int = 0
    log_head_after_restart: int = 0
    in_order: bool = False
    steps: list[dict[str, Any]] = field(default_factory=list)
    processes_started: int = 0
    processes_left_running: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def quorum_demo(*, per_phase: int = 5, timeout_s: float = 2.0,
                progress: Callable[[str], None] | None = None) -> QuorumDemoReport:
    """Run the demonstration (module docstring) on three fresh members and stop them all.

    Args:
        per_phase: appends in each phase (all members up; one killed; after restart).
        timeout_s: how long an append waits for a quorum before it is reported unacknowledged.
        progress: called with a one-line description of each phase.

    Raises:
        ConfigError: bad arguments. QuorumSetupError: etcd missing or not starting.
    """
    if type(per_phase) is not int or not 1 <= per_phase <= 1000:
        raise ConfigError(f"per_phase must be an int from 1 to 1000, got {per_phase!r}")
    say = progress or (lambda msg: None)
    rep = QuorumDemoReport(members=3)
    acked: list[str] = []
    unacked: list[str] = []
    cluster = EtcdCluster(3)
    try:
        cluster.start()
        rep.processes_started = len(cluster.members)
        # appends with a majority may wait out a leader election (slow on a loaded machine): they get
        # a generous timeout; only the append made without a majority uses ``timeout_s``
        store = EtcdStore(cluster.endpoints(), timeout_s=max(timeout_s, 15.0))
        log = TrajectoryLog(store, TRAJECTORY, must_survive="volume_loss")
        n = 0

        def phase(label: str, count: int) -> None:
            nonlocal n
            t0 = time.perf_counter()
            ok = 0
            for _ in range(count):
                n += 1
                ev = log.append(_intent(n))
                acked.append(ev.event_id)
                ok += 1
            ms = (time.perf_counter() - t0) * 1000 / max(count, 1)
            rep.steps.append({"phase": label, "members_alive": cluster.alive(), "appended": ok,
                              "mean_ack_ms": round(ms, 2)})
            say(f"{label}: {ok} appends acknowledged by a majority ({ms:.1f} ms each, measured)")

        acked.append(log.append(_task()).event_id)
        phase("3 of 3 members up", per_phase)
        first = cluster.leader()
        cluster.kill(first.name)
        say(f"killed member {first.name} (the leader) with SIGKILL")
        phase("2 of 3 up (leader killed)", per_phase)
        second = next(m for m in cluster.members if m.running())
        cluster.kill(second.name)
        say(f"killed member {second.name}: one of three left, no majority")
        n += 1
        short = EtcdStore(cluster.endpoints(), timeout_s=timeout_s)
        stalled = log.stamp(_intent(n), log.head + 1)   # the log is reopened after the restart, head and all
        t0 = time.perf_counter()
        try:
            short.append(stalled, AckTier.QUORUM)
            acked.append(stalled.event_id)
        except QuorumUnavailableError as exc:
            rep.stalled_without_majority = True
            unacked.append(stalled.event_id)
            rep.stall_waited_s = round(time.perf_counter() - t0, 3)
            rep.steps.append({"phase": "1 of 3 up", "members_alive": cluster.alive(), "appended": 0,
                              "outcome": "not acknowledged: " + str(exc).split(":")[0]})
            say(f"append without a majority: not acknowledged after {rep.stall_waited_s:.1f} s; the caller was told")
        short.close()
        cluster.restart(first.name)
        cluster.restart(second.name)
        say("restarted both members")
        store.close()
        store = EtcdStore(cluster.endpoints(), timeout_s=max(timeout_s, 5.0))
        log = TrajectoryLog(store, TRAJECTORY, must_survive="volume_loss")
        unacked_present = {e.event_id for e in store.read(TRAJECTORY)} & set(unacked)
        if unacked_present:
            rep.unacknowledged_later_present = len(unacked_present)
            acked.extend(unacked_present)      # it committed after all: part of the log now
        elif unacked:
            n -= 1                             # it never landed: its operation number is free again
        phase("3 of 3 up again", per_phase)
        events = list(store.read(TRAJECTORY))
        ids = [e.event_id for e in events]
        rep.acknowledged = len(acked)
        rep.acknowledged_lost = len(set(acked) - set(ids))
        rep.in_order = [i for i in ids if i in set(acked)] == [a for a in acked if a in set(ids)]
        rep.log_head_after_restart = store.head(TRAJECTORY)
        store.close()
    finally:
        cluster.stop()
        rep.processes_left_running = sum(1 for m in cluster.members if m.running())
    return rep


@dataclass
class PlacementReport:
    """One placement run of :func:`placement_demo`."""

    members: int
    colocated: int
    majority: int
    acknowledged: int
    survived: int
    copies_outside_worker_volume: int
    off_volume_down_during_acks: int
    verdict: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def placement_demo(colocated: int, *, members: int = 3, appends: int = 5, timeout_s: float = 2.0) -> PlacementReport:
    """Place ``colocated`` of ``members`` etcd members on the worker's volume, acknowledge
    ``appends`` events with only a bare majority up (the off-volume members beyond it are down:
    killed, so no message reaches them), delete the worker's volume, restart the members that were
    down and count what survived; when no majority is left, each survivor is recovered alone from
    its own disk (etcd's ``--force-new-cluster``) and read.

    (A member frozen with SIGSTOP would not do here: the kernel keeps accepting the leader's
    messages into its socket buffers, and the member applies them when it resumes, even after the
    leader is gone.)

    Raises:
        ConfigError: ``colocated`` outside 0..members, or a bad count.
    """
    if type(members) is not int or not 1 <= members <= 7:
        raise ConfigError(f"members must be an int from 1 to 7, got {members!r}")
    if type(colocated) is not int or not 0 <= colocated <= members:
        raise ConfigError(f"colocated must be an int from 0 to {members}, got {colocated!r}")
    if type(appends) is not int or not 1 <= appends <= 1000:
        raise ConfigError(f"appends must be an int from 1 to 1000, got {appends!r}")
    majority = members // 2 + 1
    cluster = EtcdCluster(members)
    try:
        cluster.start()
        worker_volume = Path(cluster.work_dir) / "worker-volume"
        worker_volume.mkdir()
        on_volume = cluster.members[:colocated]
        off_volume = cluster.members[colocated:]
        # a majority that uses the co-located members first: the commit rests on them
        keep_off = max(0, majority - colocated)
        down = off_volume[keep_off:]
        for m in down:
            cluster.kill(m.name)
        store = EtcdStore(cluster.endpoints(only_running=True), timeout_s=timeout_s)
        log = TrajectoryLog(store, TRAJECTORY, must_survive="volume_loss")
        acked = [log.append(_task()).event_id]
        for i in range(1, appends):
            acked.append(log.append(_intent(i)).event_id)
        store.close()
        copies_outside = keep_off if colocated < majority else 0
        # the worker's volume is lost: everything on it, including co-located members' data
        for m in on_volume:
            cluster.destroy_volume(m.name)
        shutil.rmtree(worker_volume, ignore_errors=True)
        left = [m for m in cluster.members if m.state != "destroyed"]
        survived = 0
        if len(left) >= majority:
            for m in down:
                cluster.restart(m.name)
            survivors = [m for m in cluster.members if m.running()]
            st = EtcdStore([m.client_url for m in survivors], timeout_s=5.0)
            try:
                survived = len({e.event_id for e in st.read(TRAJECTORY)} & set(acked))
            except StoreError:
                survived = 0
            finally:
                st.close()
        else:      # no majority left: recover each survivor alone from its own disk and read it
            survived = _count_on_disk_survivors(cluster, left, acked)
        verdict = ("every acknowledged event survived" if survived == len(acked) else
                   f"{len(acked) - survived} of {len(acked)} acknowledged events lost with the worker's volume")
        return PlacementReport(members, colocated, majority, len(acked), survived, copies_outside, len(down),
                               verdict)
    finally:
        cluster.stop()


def _count_on_disk_survivors(cluster: EtcdCluster, survivors: list, acked: list[str]) -> int:
    """Without a majority nothing can be read through the cluster, so recover each surviving
    member alone from its own data directory (``--force-new-cluster``, etcd's disaster-recovery
    start) and count the acknowledged events found on any of them."""
    from kernel_lib.core.events import decode_stored
    from kernel_lib.quorum.client import EtcdClient, b64, range_end_for_prefix, unb64

    prefix = f"kl/t/{TRAJECTORY}/e/".encode()
    found: set[str] = set()
    for m in survivors:
        cluster.recover_alone(m.name)
        with EtcdClient([m.client_url], timeout_s=5.0) as c:
            try:
                kvs = c.call("/v3/kv/range", {"key": b64(prefix), "range_end": b64(range_end_for_prefix(prefix))}
                             ).get("kvs") or []
            except StoreError:
                kvs = []
        cluster.kill(m.name)
        for kv in kvs:
            try:
                found.add(decode_stored(unb64(kv.get("value"))).event_id)
            except Exception:  # noqa: BLE001 - a damaged value is not a surviving event
                continue
    return len(found & set(acked))
