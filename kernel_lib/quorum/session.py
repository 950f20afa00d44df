"""A small etcd cluster to break by hand, one step at a time (§11.3.1 table 2 row 3, footnote 3).

:class:`ReplicationSession` is the state behind the replication panel (:mod:`widgets.replication`),
usable from a notebook or a script without any widget, as :class:`kernel_lib.live.session.WorksheetSession`
is behind the crash panel. Its steps:

* ``start()``: N etcd members on loopback (:class:`~kernel_lib.quorum.cluster.EtcdCluster`), a leader;
* ``append()``: one event through a :class:`~kernel_lib.log.trajectory.TrajectoryLog` that declares
  ``must_survive="volume_loss"`` on an :class:`~kernel_lib.quorum.store.EtcdStore`, so its
  acknowledgment is a Raft commit on a majority;
* ``kill`` / ``pause`` / ``resume`` / ``restart`` / ``destroy_volume`` (a member, by index or name);
* ``verify()``: read the whole log back and check every acknowledged event is there, in order;
* ``stop()``: every member stopped by pid (idempotent; also ``close()`` and the ``with`` exit).

In doubt: when no majority answers within ``append_timeout_s`` the append is reported as not
acknowledged and its event is held *in doubt*: it may still commit once a majority is back, so the
trajectory does not move past it (a later append is not sent). The next step that reaches a
majority (resume, restart, or the next append) settles it the chapter's way, by appending the very
same event again under the same event id: the store deduplicates it if the first attempt committed,
and writes it otherwise.

Every step returns plain data (:meth:`ReplicationSession.state`, or an append's outcome) and leaves
a sentence saying what it did in :attr:`ReplicationSession.message`; every append's outcome is kept
in :attr:`ReplicationSession.history`. Times marked "measured" are wall-clock times of this process.

Blocking: every wait is bounded (``append_timeout_s`` for appends, ``leader_wait_s`` after a fault,
``restart_wait_s`` for a rejoining member). Processes: every member is stopped by pid in
:meth:`~ReplicationSession.stop`, at garbage collection and at interpreter exit (a
``weakref.finalize`` hook); a process killed outright takes its members with it (parent-death
signal, see :mod:`kernel_lib.quorum.cluster`).

Bad input (an unknown member, restarting a member whose volume was destroyed, an append before
start, a bad argument) raises a :class:`~kernel_lib.errors.ReplicationSessionError` subclass (defined
in :mod:`kernel_lib.errors`, re-exported here) or ConfigError.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

from kernel_lib.core.events import Event, TaskStarted
from kernel_lib.errors import (  # the session's errors are defined in kernel_lib.errors and re-exported here
    ClusterNotRunningError,
    ClusterRunningError,
    ConfigError,
    MemberStateError,
    QuorumSetupError,
    QuorumUnavailableError,
    ReplicationSessionError,
    UnknownMemberError,
)
from kernel_lib.log.base import AckTier
from kernel_lib.log.trajectory import TrajectoryLog
from kernel_lib.quorum.cluster import EtcdCluster, Member
from kernel_lib.quorum.store import EtcdStore
from kernel_lib.sim.events import sample_intent

__all__ = ["ReplicationSession", "ReplicationSessionError", "ClusterNotRunningError", "ClusterRunningError",
           "UnknownMemberError", "MemberStateError", "MEMBER_STEPS", "TRAJECTORY"]

#: The steps that act on one member.
MEMBER_STEPS = ("kill", "pause", "resume", "restart", "destroy_volume")
#: The trajectory the session appends to.
TRAJECTORY = "traj_replication_panel"


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} characters)"


def _stop_cluster(cluster: EtcdCluster) -> None:
    """Stop every member by pid; used by the exit hook, so it never raises."""
    try:
        cluster.stop()
    except Exception:   # noqa: BLE001 - at interpreter exit there is nobody to tell
        pass


class ReplicationSession:
    """Start, break and heal a small etcd cluster, appending to a quorum-acknowledged log.

    Args:
        members: how many etcd members (default 3; 1..7).
        append_timeout_s: how long one append waits for a majority before it is reported as not
            acknowledged (default 2 s).
        leader_wait_s: after a kill, pause or resume, how long to wait for a leader when a majority
            is up (so the next append does not pay for the election).
        restart_wait_s: how long a restarted member may take to rejoin and see a leader.

    Attributes: ``cluster`` (the running :class:`EtcdCluster`, or None), ``store``, ``pids`` (every
    etcd pid this session ever started), ``history`` (every append's outcome, oldest first),
    ``message`` (what the last step did, one sentence).

    Raises:
        ConfigError: a bad argument.
    """

    def __init__(self, *, members: int = 3, append_timeout_s: float = 2.0, leader_wait_s: float = 5.0,
                 restart_wait_s: float = 8.0):
        if type(members) is not int or not 1 <= members <= 7:
            raise ConfigError(f"members must be an int from 1 to 7, got {members!r}")
        for name, v in (("append_timeout_s", append_timeout_s), ("leader_wait_s", leader_wait_s),
                        ("restart_wait_s", restart_wait_s)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 600:
                raise ConfigError(f"{name} must be a number of seconds in (0, 600), got {v!r}")
        self.members_n = members
        self.append_timeout_s = float(append_timeout_s)
        self.leader_wait_s = float(leader_wait_s)
        self.restart_wait_s = float(restart_wait_s)
        self.cluster: EtcdCluster | None = None
        self.store: EtcdStore | None = None
        self.message = ""
        self._log: TrajectoryLog | None = None
        self._finalizer: weakref.finalize | None = None
        self.pids: list[int] = []
        self.history: list[dict[str, Any]] = []
        self._reset_counts()

    def _reset_counts(self) -> None:
        self._acked: list[dict[str, Any]] = []      # {sequence, event_id, type, operation_id, ack_ms}
        self._pending: Event | None = None          # the event in doubt, if any
        self._appends = 0                           # append() calls on this cluster
        self._n_ack = self._n_unack = self._n_resolved = 0
        self._last_check: dict[str, Any] | None = None
        self._members_after_stop: list[dict[str, Any]] = []
        self.history = []

    @property
    def running(self) -> bool:
        """Whether this session's cluster is started (and not stopped)."""
        return self.cluster is not None

    def __enter__(self) -> ReplicationSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- helpers ------------------------------------------------------------------------------------
    def _running(self) -> EtcdCluster:
        if self.cluster is None:
            raise ClusterNotRunningError("no cluster is running: start it first (the start button, or start())")
        return self.cluster

    def _member(self, which: int | str) -> Member:
        c = self._running()
        names = [m.name for m in c.members]
        if isinstance(which, int) and not isinstance(which, bool) and 0 <= which < len(c.members):
            return c.members[which]
        if isinstance(which, str) and which in names:
            return c.member(which)
        raise UnknownMemberError(f"no member {_short(repr(which), 60)}: give an index 0..{len(names) - 1} "
                                 f"or one of {names}")

    def _majority_up(self) -> bool:
        c = self.cluster
        return c is not None and c.alive() >= c.majority()

    def _leader_name(self, timeout_s: float = 0.2) -> str | None:
        if self.cluster is None or not self._majority_up():
            return None
        try:
            return self.cluster.leader(timeout_s=timeout_s).name
        except QuorumSetupError:
            return None

    def _wait_leader(self) -> str:
        """After a fault: wait (bounded) for a leader when a majority is up; say what happened."""
        c = self._running()
        if not self._majority_up():
            return (f"{c.alive()} of {len(c.members)} members answer, fewer than the majority of "
                    f"{c.majority()}: no leader can be elected, so no write can commit")
        t0 = time.perf_counter()
        name = self._leader_name(self.leader_wait_s)
        if name is None:
            return f"no leader within {self.leader_wait_s:g} s although a majority is up"
        return f"leader {name} (found in {(time.perf_counter() - t0) * 1000:.0f} ms)"

    def _outcome(self, kind: str, text: str, **extra: Any) -> dict[str, Any]:
        o = {"n": len(self.history) + 1, "kind": kind, "text": text, **extra}
        self.history.append(o)
        return o

    def _say(self, text: str) -> None:
        self.message = text

    def _payload(self):
        k = self._appends
        if k == 1:
            return TaskStarted(task_id=TRAJECTORY, requester="lab", objective="replication panel",
                               grant_ids=["g"], budget_ceiling_usd=1.0, finalization_reserve_usd=0.1)
        return sample_intent(k - 1, arguments={"append": k})

    def _remember(self, ev: Event, ack_ms: float) -> None:
        self._acked.append({"sequence": ev.sequence_number, "event_id": ev.event_id, "type": ev.event_type,
                            "operation_id": getattr(ev.payload, "operation_id", None), "ack_ms": round(ack_ms, 2)})

    # --- the steps ------------------------------------------------------------------------------------
    def start(self) -> dict[str, Any]:
        """Start the members on loopback and wait for a leader; returns :meth:`state`. Raises
        ClusterRunningError if this session's cluster is already running, QuorumSetupError if etcd
        is missing or will not start."""
        if self.cluster is not None:
            raise ClusterRunningError("the cluster is already running: stop it before starting a new one")
        c = EtcdCluster(self.members_n)
        self._finalizer = weakref.finalize(self, _stop_cluster, c)   # also runs at interpreter exit
        try:
            c.start()
        except BaseException:
            self._finalizer()
            self._finalizer = None
            raise
        self.cluster = c
        self.pids += [m.pid for m in c.members if m.pid]
        self._reset_counts()
        self.store = EtcdStore(c.endpoints(), timeout_s=self.append_timeout_s)
        self._log = TrajectoryLog(self.store, TRAJECTORY, must_survive="volume_loss")
        leader = self._leader_name(self.leader_wait_s)
        self._say(f"started {len(c.members)} etcd members on loopback (majority {c.majority()}); leader {leader}")
        return self.state()

    def append(self) -> dict[str, Any]:
        """Append one event (first a TaskStarted, then ToolIntents) and wait at most
        ``append_timeout_s`` for the quorum's acknowledgment.

        Returns the outcome: ``n``, ``kind`` (acknowledged, unacknowledged, stalled), ``text``,
        ``acknowledged`` (bool), ``ms`` (measured), ``sequence``, ``event_id``. An event that was not
        acknowledged stays in doubt and blocks later appends until a majority answers (the next call
        first settles it). Raises ClusterNotRunningError before start; StoreError if the store
        refuses the event for a reason other than a missing majority.
        """
        self._running()
        self._appends += 1
        n = self._appends
        if self._pending is not None:
            resolved = self._resolve_pending()
            if self._pending is not None:
                self._n_unack += 1
                o = self._outcome("stalled", f"append {n}: NOT sent — event #{self._pending.sequence_number} is "
                                  f"still in doubt ({resolved}); the trajectory stays stalled behind it",
                                  acknowledged=False, ms=None, sequence=None, event_id=None)
                self._say(o["text"])
                return o
        t0 = time.perf_counter()
        ev: Event | None = None
        try:
            log = self._ensure_log()
            ev = log.stamp(self._payload(), log.head + 1)
            log.append(ev.payload, event_id=ev.event_id)      # the same envelope, so a retry is identical
        except QuorumUnavailableError:
            waited = time.perf_counter() - t0
            self._n_unack += 1
            if ev is not None:
                self._pending = ev
                o = self._outcome(
                    "unacknowledged",
                    f"append {n}: NOT acknowledged after {waited:.1f} s (measured): no majority answered. "
                    f"Event #{ev.sequence_number} may still commit later, so it is treated as in doubt and the "
                    f"trajectory stays stalled (nothing is dispatched on it) until a majority answers",
                    acknowledged=False, ms=round(waited * 1000, 1), sequence=ev.sequence_number,
                    event_id=ev.event_id)
            else:     # the log's head could not even be read: nothing was sent
                o = self._outcome("unacknowledged", f"append {n}: NOT acknowledged after {waited:.1f} s "
                                  "(measured): no majority answered the read of the log head; nothing was sent",
                                  acknowledged=False, ms=round(waited * 1000, 1), sequence=None, event_id=None)
            self._say(o["text"])
            return o
        ms = (time.perf_counter() - t0) * 1000
        self._n_ack += 1
        self._remember(ev, ms)
        o = self._outcome("acknowledged", f"append {n}: event #{ev.sequence_number} ({ev.event_type}) acknowledged "
                          f"in {ms:.1f} ms (measured), committed by a majority ({self.cluster.majority()} of "
                          f"{len(self.cluster.members)} members)",
                          acknowledged=True, ms=round(ms, 2), sequence=ev.sequence_number, event_id=ev.event_id)
        self._say(o["text"])
        return o

    def _ensure_log(self) -> TrajectoryLog:
        if self._log is None:
            self._log = TrajectoryLog(self.store, TRAJECTORY, must_survive="volume_loss")
        return self._log

    def _resolve_pending(self) -> str:
        """Append the in-doubt event again under its own id: the store deduplicates it if the
        first attempt committed after all, and writes it if it did not. Returns a short reason."""
        ev = self._pending
        if ev is None:
            return "nothing in doubt"
        t0 = time.perf_counter()
        try:
            out = self.store.append(ev, AckTier.QUORUM)
        except QuorumUnavailableError:
            return f"no majority answered within {self.append_timeout_s:g} s"
        ms = (time.perf_counter() - t0) * 1000
        self._pending = None
        self._n_resolved += 1
        self._remember(ev, ms)
        self._log = None            # the next append re-reads the head from the cluster
        if out.duplicate:
            text = (f"event #{ev.sequence_number}, in doubt, is in the log after all: it committed once a majority "
                    "was back, and the retry under the same event id was deduplicated, not written twice")
        else:
            text = (f"event #{ev.sequence_number}, in doubt, had not committed: appended again under the same "
                    f"event id and acknowledged in {ms:.1f} ms (measured)")
        self._outcome("resolved", text, acknowledged=True, ms=round(ms, 2), sequence=ev.sequence_number,
                      event_id=ev.event_id, committed_before_retry=out.duplicate)
        return text

    def _member_step(self, action: str, which: int | str) -> dict[str, Any]:
        c = self._running()
        m = self._member(which)
        if action == "kill":
            if not m.running():
                raise MemberStateError(f"member {m.name} is not running ({m.state}); nothing to kill")
            was_leader = self._leader_name() == m.name
            pid = m.pid
            c.kill(m.name)
            what = f"killed {m.name} (pid {pid}, SIGKILL{', it was the leader' if was_leader else ''})"
        elif action == "pause":
            if not m.running() or m.paused:
                raise MemberStateError(f"member {m.name} is {m.state}; only a running member can be paused")
            c.pause(m.name)
            what = f"paused {m.name} (SIGSTOP: alive but silent, like a node cut off by a partition)"
        elif action == "resume":
            if not m.paused:
                raise MemberStateError(f"member {m.name} is {m.state}, not paused; nothing to resume")
            c.resume(m.name)
            what = f"resumed {m.name} (SIGCONT)"
        elif action == "destroy_volume":
            if m.state == "destroyed":
                raise MemberStateError(f"member {m.name}'s volume is already destroyed")
            c.destroy_volume(m.name)
            what = f"destroyed {m.name}'s volume (killed, data directory deleted)"
        else:   # restart
            if m.state == "destroyed":
                raise MemberStateError(f"member {m.name}'s volume was destroyed: it cannot rejoin under its old "
                                       "identity (its Raft log is gone); stop and start a fresh cluster")
            if m.paused:
                raise MemberStateError(f"member {m.name} is paused, not down: resume it instead")
            if m.running():
                raise MemberStateError(f"member {m.name} is already running")
            try:
                c.restart(m.name, wait_s=self.restart_wait_s)
                what = f"restarted {m.name} (pid {m.pid}) on its own data; it rejoined"
            except QuorumSetupError:
                what = (f"restarted {m.name} (pid {m.pid}), but it sees no leader within {self.restart_wait_s:g} s: "
                        "too few members are up")
            if m.pid and m.pid not in self.pids:
                self.pids.append(m.pid)
        where = self._wait_leader()
        text = f"{what}; {where}"
        if action in ("resume", "restart") and self._majority_up():
            if self._pending is not None:
                text += "; " + self._resolve_pending()
            self.verify(label=f"after {action} {m.name}")
        self._say(text)
        return self.state()

    def kill(self, which: int | str) -> dict[str, Any]:
        """SIGKILL member ``which`` (index or name): a crashed node whose disk survives."""
        return self._member_step("kill", which)

    def pause(self, which: int | str) -> dict[str, Any]:
        """SIGSTOP member ``which``: alive but silent, as a node behind a network partition."""
        return self._member_step("pause", which)

    def resume(self, which: int | str) -> dict[str, Any]:
        """SIGCONT a paused member; with a majority back, settle an in-doubt event and check the log."""
        return self._member_step("resume", which)

    def restart(self, which: int | str) -> dict[str, Any]:
        """Start a killed member again on its own data; then settle an in-doubt event and check that
        every acknowledged event is present. Raises MemberStateError for a destroyed volume."""
        return self._member_step("restart", which)

    def destroy_volume(self, which: int | str) -> dict[str, Any]:
        """SIGKILL member ``which`` and delete its data directory (that member's volume is lost)."""
        return self._member_step("destroy_volume", which)

    def verify(self, label: str = "check") -> dict[str, Any]:
        """Read the whole log from the cluster and check that every acknowledged event is there, in
        order. Returns ``label``, ``ok`` (None when no majority answered, so the check could not run),
        ``acknowledged``, ``present``, ``missing`` (event ids), ``in_order``, ``head``, ``text``."""
        self._running()
        acked = sorted(self._acked, key=lambda a: a["sequence"])
        try:
            events = list(self.store.read(TRAJECTORY))
        except QuorumUnavailableError:
            r = {"label": label, "ok": None, "acknowledged": len(acked), "present": None, "missing": [],
                 "in_order": None, "head": None,
                 "text": f"{label}: cannot read the log, no majority answered; the check waits for one"}
            self._last_check = r
            return r
        at = {e.event_id: e.sequence_number for e in events}
        missing = [a["event_id"] for a in acked if a["event_id"] not in at]
        in_order = all(at.get(a["event_id"]) == a["sequence"] for a in acked if a["event_id"] in at)
        ok = not missing and in_order
        text = (f"{label}: all {len(acked)} acknowledged events present, in order (log head #{len(events)})" if ok
                else f"{label}: {len(missing)} of {len(acked)} acknowledged events missing"
                + ("" if in_order else ", some out of order"))
        r = {"label": label, "ok": ok, "acknowledged": len(acked), "present": len(acked) - len(missing),
             "missing": missing, "in_order": in_order, "head": len(events), "text": text}
        self._last_check = r
        return r

    def stop(self) -> dict[str, Any]:
        """Stop every member by pid (idempotent; a session never started has nothing to stop)."""
        c = self.cluster
        if c is None:
            self._say("no cluster running; nothing to stop")
            return self.state()
        pids = [m.pid for m in c.members if m.running()]
        if self.store is not None:
            self.store.close()
        if self._finalizer is not None:
            self._finalizer()           # EtcdCluster.stop, once
            self._finalizer = None
        left = [m.name for m in c.members if m.running()]
        self.cluster, self.store, self._log = None, None, None
        self._members_after_stop = [{"member": m.name, "state": m.state, "pid": None, "leader": False}
                                    for m in c.members]
        self._say(f"stopped the cluster: {len(pids)} running member(s) ended by pid"
                  + (f"; STILL RUNNING: {left}" if left else "; none left running"))
        return self.state()

    def close(self) -> None:
        """Stop the cluster if it runs (idempotent)."""
        if self.cluster is not None:
            self.stop()

    def state(self) -> dict[str, Any]:
        """What the session holds, as plain data (no network call except a short leader lookup).

        Keys: ``running``, ``members`` (``member``, ``state``, ``pid``, ``leader`` per member),
        ``majority``, ``alive``, ``leader``, ``head`` (last acknowledged sequence number), ``log_tail``
        (the last four acknowledged events), ``acknowledged`` / ``unacknowledged`` / ``resolved_later``
        (counts), ``in_doubt`` (event ids), ``acknowledged_event_ids``, ``outcomes`` (the history),
        ``check`` (the last :meth:`verify`, or None), ``append_timeout_s``."""
        c = self.cluster
        leader = self._leader_name() if c is not None else None
        if c is not None:
            members = [{"member": r["member"], "state": r["state"], "pid": r["pid"], "leader": r["member"] == leader}
                       for r in c.status()]
        else:
            members = list(self._members_after_stop)
        acked = sorted(self._acked, key=lambda a: a["sequence"])
        return {
            "running": c is not None,
            "members": members,
            "majority": c.majority() if c is not None else None,
            "alive": c.alive() if c is not None else 0,
            "leader": leader,
            "head": acked[-1]["sequence"] if acked else 0,
            "log_tail": acked[-4:],
            "acknowledged": self._n_ack,
            "unacknowledged": self._n_unack,
            "resolved_later": self._n_resolved,
            "in_doubt": [self._pending.event_id] if self._pending is not None else [],
            "acknowledged_event_ids": [a["event_id"] for a in acked],
            "outcomes": list(self.history),
            "check": dict(self._last_check) if self._last_check else None,
            "append_timeout_s": self.append_timeout_s,
        }
