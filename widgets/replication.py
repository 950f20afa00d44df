"""Replication panel: a three-member etcd cluster you can break by hand (§11.3.1 table 2 row 3, footnote 3).

An anywidget (JupyterLab, VS Code, marimo) in the style of :mod:`widgets.crash_panel`. Every button
writes a ``command`` trait ``{"action", "member"?, "n"}`` (``n`` makes each click a change); the
Python side runs the matching method of the panel's own Python API and publishes what happened:
``members`` (name, state, pid, leader marker), ``head`` and ``log_tail`` (what this writer knows is
acknowledged), ``outcomes`` (one line per append, newest last), ``counts`` (acknowledged,
unacknowledged, in doubt, resolved later), ``check`` (every acknowledged event present?),
``status``, ``error`` and ``completed`` (the ``n`` of the last finished command).

The Python API mirrors the buttons, so a notebook can drive the same scenario without a browser::

    panel = ReplicationPanel()
    panel.start(); panel.append(); panel.kill(0); panel.append()      # two of three: still acknowledged
    panel.pause(1); panel.append()                                     # one of three: NOT acknowledged
    panel.resume(1); panel.restart(0); panel.state()["check"]         # the in-doubt write resolved
    panel.stop()

Appends go through a :class:`~kernel_lib.log.TrajectoryLog` that declares ``must_survive="volume_loss"``
on an :class:`~kernel_lib.quorum.EtcdStore`, so each acknowledgment is a Raft commit on a majority.
When no majority answers within ``append_timeout_s`` the append is reported as not acknowledged and
its event is held *in doubt*: it may still commit once a majority is back, so the trajectory does not
move past it. The next step that reaches a majority (resume, restart, or the next append) resolves
it the chapter's way, by appending the very same event again under the same event id: the store
deduplicates it if the first attempt did commit, and writes it otherwise.

Blocking: like the crash panel, each command runs to completion in the kernel's comm handler with
``busy`` set (the buttons are disabled and the panel says "working…"); every wait is bounded
(``append_timeout_s`` for appends, ``leader_wait_s`` after a fault, ``restart_wait_s`` for a
rejoining member), so no click holds the kernel for long. Running in the kernel's main thread also
lets the etcd members be started with a parent-death signal (see :mod:`kernel_lib.quorum.cluster`).

Processes: every member is stopped by pid in :meth:`ReplicationPanel.stop`, in :meth:`close`, and at
interpreter exit (a ``weakref.finalize`` hook); a kernel killed outright takes its members with it
(parent-death signal) and a later cluster sweeps any work directory left behind.

Bad input — an unknown member, restarting a member whose volume was destroyed, an append before
start — raises a :class:`ReplicationPanelError` subclass from the Python API and becomes a message
in ``error`` when it comes from a button.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

import anywidget
import traitlets

from kernel_lib.errors import ConfigError, KernelError
from kernel_lib.core.events import Event, TaskStarted, ToolIntent
from kernel_lib.log.base import AckTier
from kernel_lib.log.trajectory import TrajectoryLog
from kernel_lib.quorum.client import QuorumUnavailableError
from kernel_lib.quorum.cluster import EtcdCluster, QuorumSetupError
from kernel_lib.quorum.store import EtcdStore

ACTIONS = ("start", "append", "kill", "pause", "resume", "restart", "destroy_volume", "stop", "refresh")
MEMBER_ACTIONS = ("kill", "pause", "resume", "restart", "destroy_volume")
TRAJECTORY = "traj_replication_panel"


class ReplicationPanelError(KernelError):
    """A replication-panel step was asked for that cannot run (base class of the panel's errors)."""


class ClusterNotRunningError(ReplicationPanelError):
    """The step needs a running cluster, and none is started (never started, or stopped)."""


class ClusterRunningError(ReplicationPanelError):
    """``start`` was asked for while this panel's cluster is still running."""


class UnknownMemberError(ReplicationPanelError, ConfigError):
    """The member named is not one of the cluster's (give an index 0..N-1 or a name such as ``m1``)."""


class MemberStateError(ReplicationPanelError):
    """The member exists but is in a state where the step makes no sense (e.g. restart a member
    whose volume was destroyed, pause a member that is not running, resume one that is not paused)."""


_ESM = r"""
function render({ model, el }) {
  el.classList.add("dal-replication");
  el.dataset.lmSuppressShortcuts = "true";       // keys typed here are the widget's, not JupyterLab's
  el.addEventListener("keydown", (e) => e.stopPropagation());
  const bar = document.createElement("div"); bar.className = "dal-bar";
  const mk = (label, action, title) => {
    const b = document.createElement("button");
    b.textContent = label; b.dataset.action = action; b.className = "dal-btn"; b.title = title || "";
    b.addEventListener("click", () => send(action));
    return b;
  };
  const sel = document.createElement("select"); sel.className = "dal-member";
  sel.addEventListener("change", () => { model.set("member", sel.value); model.save_changes(); });
  bar.append(mk("start cluster", "start", "start three etcd members on loopback"),
             mk("append", "append", "append one event through the quorum store"),
             document.createTextNode(" member "), sel,
             mk("kill", "kill", "SIGKILL: a crashed node, its disk kept"),
             mk("pause (partition)", "pause", "SIGSTOP: alive but silent, as behind a partition"),
             mk("resume", "resume", "SIGCONT a paused member"),
             mk("restart", "restart", "start a killed member again on its own data"),
             mk("destroy volume", "destroy_volume", "SIGKILL and delete its data directory"),
             mk("stop", "stop", "stop every member by pid"));
  const status = document.createElement("div"); status.className = "dal-status";
  const msg = document.createElement("div"); msg.className = "dal-error";
  const members = document.createElement("table"); members.className = "dal-members";
  const head = document.createElement("div"); head.className = "dal-head";
  const counts = document.createElement("div"); counts.className = "dal-counts";
  const check = document.createElement("div"); check.className = "dal-check";
  const outcomes = document.createElement("ul"); outcomes.className = "dal-outcomes";
  el.append(bar, status, msg, members, head, counts, check, outcomes);
  const view = Math.random().toString(36).slice(2);
  let n = 0;
  function send(action) {
    n = Math.max(n, model.get("completed") || 0) + 1;
    model.set("command", { action, member: sel.value, n, view });
    model.save_changes();
  }
  function draw() {
    const busy = model.get("busy");
    el.dataset.completed = String(model.get("completed") || 0);
    for (const b of bar.querySelectorAll("button")) b.disabled = busy;
    const rows = model.get("members") || [];
    const names = rows.map((r) => r.member);
    if (sel.options.length !== names.length || names.some((x, i) => sel.options[i].value !== x)) {
      sel.replaceChildren();
      for (const x of names) { const o = document.createElement("option"); o.value = x; o.textContent = x; sel.appendChild(o); }
    }
    if (names.includes(model.get("member"))) sel.value = model.get("member");
    status.textContent = (busy ? "working… " : "") + (model.get("status") || "");
    msg.textContent = model.get("error") || "";
    members.replaceChildren();
    const hr = members.insertRow();
    for (const h of ["member", "state", "pid", "leader"]) { const th = document.createElement("th"); th.textContent = h; hr.appendChild(th); }
    for (const r of rows) {
      const tr = members.insertRow();
      tr.className = "dal-state-" + r.state;
      tr.dataset.member = r.member;
      tr.insertCell().textContent = r.member;
      tr.insertCell().textContent = r.state;
      tr.insertCell().textContent = r.pid == null ? "" : String(r.pid);
      tr.insertCell().textContent = r.leader ? "★ leader" : "";
    }
    const tail = model.get("log_tail") || [];
    head.textContent = "log head (acknowledged to this writer): #" + (model.get("head") || 0) +
      (tail.length ? "  ·  last: " + tail.map((e) => `#${e.sequence} ${e.type}${e.operation_id ? " " + e.operation_id : ""}`).join(", ") : "");
    const c = model.get("counts") || {};
    counts.textContent = `appends acknowledged: ${c.acknowledged || 0} · not acknowledged: ${c.unacknowledged || 0}` +
      ` · in doubt now: ${c.in_doubt || 0} · in-doubt writes resolved later: ${c.resolved_later || 0}`;
    check.textContent = model.get("check") || "";
    check.className = "dal-check" + (/missing|out of order/.test(check.textContent) ? " dal-bad" : "");
    outcomes.replaceChildren();
    for (const o of model.get("outcomes") || []) {
      const li = document.createElement("li"); li.textContent = o.text; li.className = "dal-" + o.kind;
      outcomes.appendChild(li);
    }
  }
  for (const t of ["status", "error", "members", "member", "head", "log_tail", "counts", "check", "outcomes", "busy", "completed"])
    model.on(`change:${t}`, draw);
  draw();
}
export default { render };
"""

_CSS = """
.dal-replication { font-family: system-ui, sans-serif; font-size: 13px; }
.dal-replication .dal-btn { margin-right: 4px; }
.dal-replication .dal-member { margin-right: 6px; }
.dal-replication .dal-status { margin: 4px 0; color: #333; }
.dal-replication .dal-error { color: #b00020; min-height: 1.2em; }
.dal-replication .dal-members { border-collapse: collapse; margin: 4px 0; }
.dal-replication .dal-members th, .dal-replication .dal-members td { border: 1px solid #ccc; padding: 2px 8px; text-align: left; }
.dal-replication .dal-state-killed td, .dal-replication .dal-state-destroyed td, .dal-replication .dal-state-stopped td { color: #888; }
.dal-replication .dal-state-paused td { background: #fff3cd; }
.dal-replication .dal-head, .dal-replication .dal-counts { margin: 2px 0; }
.dal-replication .dal-check { margin: 2px 0; font-weight: 600; color: #1b5e20; }
.dal-replication .dal-check.dal-bad { color: #b00020; }
.dal-replication .dal-outcomes { margin: 4px 0; padding-left: 1.6em; max-height: 16em; overflow-y: auto; }
.dal-replication .dal-unacknowledged, .dal-replication .dal-stalled { color: #8a4b00; font-weight: 600; }
.dal-replication .dal-resolved { color: #1b5e20; }
"""


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} characters)"


def _stop_cluster(cluster: EtcdCluster) -> None:
    """Stop every member by pid; used by the exit hook, so it never raises."""
    try:
        cluster.stop()
    except Exception:   # noqa: BLE001 - at interpreter exit there is nobody to tell
        pass


class ReplicationPanel(anywidget.AnyWidget):
    """Start, break and heal a small etcd cluster, appending to a quorum-acknowledged log.

    Args:
        members: how many etcd members (default 3; 1..7).
        append_timeout_s: how long one append waits for a majority before it is reported as not
            acknowledged (default 2 s, so a click never holds the kernel long).
        leader_wait_s: after a kill, pause or resume, how long to wait for a leader when a majority
            is up (so the next append does not pay for the election).
        restart_wait_s: how long a restarted member may take to rejoin and see a leader.
        outcomes_kept: how many outcome lines the widget shows (the Python API keeps them all).

    Raises:
        ConfigError: a bad argument.
    """

    _esm = _ESM
    _css = _CSS
    command = traitlets.Any({}).tag(sync=True)      # checked in _on_command: bad input becomes ``error``
    member = traitlets.Unicode("m0").tag(sync=True)
    members = traitlets.List().tag(sync=True)
    status = traitlets.Unicode("").tag(sync=True)
    error = traitlets.Unicode("").tag(sync=True)
    busy = traitlets.Bool(False).tag(sync=True)
    head = traitlets.Int(0).tag(sync=True)
    log_tail = traitlets.List().tag(sync=True)
    outcomes = traitlets.List().tag(sync=True)
    counts = traitlets.Dict().tag(sync=True)
    check = traitlets.Unicode("").tag(sync=True)
    completed = traitlets.Int(0).tag(sync=True)

    def __init__(self, *, members: int = 3, append_timeout_s: float = 2.0, leader_wait_s: float = 5.0,
                 restart_wait_s: float = 8.0, outcomes_kept: int = 12, **kw: Any):
        if type(members) is not int or not 1 <= members <= 7:
            raise ConfigError(f"members must be an int from 1 to 7, got {members!r}")
        for name, v in (("append_timeout_s", append_timeout_s), ("leader_wait_s", leader_wait_s),
                        ("restart_wait_s", restart_wait_s)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 600:
                raise ConfigError(f"{name} must be a number of seconds in (0, 600), got {v!r}")
        if type(outcomes_kept) is not int or outcomes_kept < 1:
            raise ConfigError(f"outcomes_kept must be an int >= 1, got {outcomes_kept!r}")
        self.members_n = members
        self.append_timeout_s = float(append_timeout_s)
        self.leader_wait_s = float(leader_wait_s)
        self.restart_wait_s = float(restart_wait_s)
        self.outcomes_kept = outcomes_kept
        self.cluster: EtcdCluster | None = None
        self.store: EtcdStore | None = None
        self._log: TrajectoryLog | None = None
        self._finalizer: weakref.finalize | None = None
        self.pids: list[int] = []          # every etcd pid this panel ever started (tests check they are gone)
        self.history: list[dict[str, Any]] = []
        self._reset_counts()
        super().__init__(**kw)
        self.observe(self._on_command, names="command")
        self.refresh()

    def _reset_counts(self) -> None:
        self._acked: list[dict[str, Any]] = []      # {sequence, event_id, type, operation_id, ack_ms}
        self._pending: Event | None = None          # the event in doubt, if any
        self._appends = 0                           # append() calls on this cluster
        self._n_ack = self._n_unack = self._n_resolved = 0
        self._last_check: dict[str, Any] | None = None
        self._members_after_stop: list[dict[str, Any]] = []
        self.history = []

    # --- helpers ------------------------------------------------------------------------------------
    def _running(self) -> EtcdCluster:
        if self.cluster is None:
            raise ClusterNotRunningError("no cluster is running: start it first (the start button, or start())")
        return self.cluster

    def _member(self, which: "int | str"):
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

    def _payload(self):
        k = self._appends
        if k == 1:
            return TaskStarted(task_id=TRAJECTORY, requester="lab", objective="replication panel",
                               grant_ids=["g"], budget_ceiling_usd=1.0, finalization_reserve_usd=0.1)
        return ToolIntent(operation_id=f"op{k - 1}", attempt_id="attempt1", tool="run_tests",
                          arguments={"append": k}, repeat_contract="idempotency_key", grant_id="g",
                          authorization_ref=f"auth{k - 1}", reservation_ref=f"res{k - 1}")

    def _remember(self, ev: Event, ack_ms: float) -> None:
        self._acked.append({"sequence": ev.sequence_number, "event_id": ev.event_id, "type": ev.event_type,
                            "operation_id": getattr(ev.payload, "operation_id", None), "ack_ms": round(ack_ms, 2)})

    # --- the Python API (each button reaches one of these) ----------------------------------------------
    def start(self) -> dict[str, Any]:
        """Start the members on loopback and wait for a leader. Raises ClusterRunningError if this
        panel's cluster is already running, QuorumSetupError if etcd is missing or will not start."""
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

        Returns the outcome: ``acknowledged`` (bool), ``ms`` (measured), ``sequence``, ``event_id``,
        ``text``. An event that was not acknowledged stays in doubt and blocks later appends until
        a majority answers (the next call first resolves it). Raises ClusterNotRunningError before
        start; StoreError if the store refuses the event for a reason other than a missing majority.
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

    def _member_step(self, action: str, which: "int | str") -> dict[str, Any]:
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

    def kill(self, which: "int | str") -> dict[str, Any]:
        """SIGKILL member ``which`` (index or name): a crashed node whose disk survives."""
        return self._member_step("kill", which)

    def pause(self, which: "int | str") -> dict[str, Any]:
        """SIGSTOP member ``which``: alive but silent, as a node behind a network partition."""
        return self._member_step("pause", which)

    def resume(self, which: "int | str") -> dict[str, Any]:
        """SIGCONT a paused member; with a majority back, resolve an in-doubt event and check the log."""
        return self._member_step("resume", which)

    def restart(self, which: "int | str") -> dict[str, Any]:
        """Start a killed member again on its own data; then resolve an in-doubt event and check that
        every acknowledged event is present. Raises MemberStateError for a destroyed volume."""
        return self._member_step("restart", which)

    def destroy_volume(self, which: "int | str") -> dict[str, Any]:
        """SIGKILL member ``which`` and delete its data directory (that member's volume is lost)."""
        return self._member_step("destroy_volume", which)

    def verify(self, label: str = "check") -> dict[str, Any]:
        """Read the whole log from the cluster and check that every acknowledged event is there, in
        order. Needs a majority; without one the result says the check could not run (``ok`` None)."""
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
        """Stop every member by pid (idempotent; a panel never started has nothing to stop)."""
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
        """Stop the cluster, then close the widget (also reached from ``__del__``, possibly on a
        panel whose ``__init__`` refused its arguments, which has started nothing)."""
        try:
            if getattr(self, "cluster", None) is not None:
                self.stop()
        finally:
            super().close()

    def state(self) -> dict[str, Any]:
        """What the panel shows, as plain data (no network call except a short leader lookup)."""
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

    # --- the widget side --------------------------------------------------------------------------------
    def _say(self, status: str) -> None:
        self.status = _short(status, 600)
        self.refresh(keep_error=True)

    def refresh(self, keep_error: bool = False) -> None:
        """Publish :meth:`state` to the widget's traits."""
        s = self.state()
        self.members = s["members"]
        if s["members"] and self.member not in [m["member"] for m in s["members"]]:
            self.member = s["members"][0]["member"]
        self.head = s["head"]
        self.log_tail = [{"sequence": a["sequence"], "type": a["type"], "operation_id": a["operation_id"] or ""}
                         for a in s["log_tail"]]
        self.counts = {"acknowledged": s["acknowledged"], "unacknowledged": s["unacknowledged"],
                       "in_doubt": len(s["in_doubt"]), "resolved_later": s["resolved_later"]}
        self.outcomes = [{"kind": o["kind"], "text": o["text"]} for o in s["outcomes"][-self.outcomes_kept:]]
        self.check = s["check"]["text"] if s["check"] else ""
        if not s["running"] and not self.status:
            self.status = "no cluster: click start cluster"
        if not keep_error:
            self.error = ""

    def run(self, action: str, member: "int | str | None" = None) -> bool:
        """Run one button's action; True on success, False when the reason is in ``error``."""
        self.busy = True
        try:
            if action not in ACTIONS:
                raise ConfigError(f"unknown action {_short(repr(action), 80)}: choose one of {list(ACTIONS)}")
            if action in MEMBER_ACTIONS:
                getattr(self, action)(self.member if member is None else member)
            elif action == "refresh":
                self.refresh()
            else:
                getattr(self, action)()
            self.error = ""
            return True
        except (KernelError, ValueError, TypeError, OSError) as exc:
            self.error = _short(f"{_short(str(action), 40)}: {exc}", 600)
            return False
        finally:
            try:
                self.refresh(keep_error=True)
            finally:
                self.busy = False

    def _on_command(self, change: dict[str, Any]) -> None:
        cmd = change["new"] or {}
        if not isinstance(cmd, dict) or not isinstance(cmd.get("action"), str) or not cmd["action"]:
            self.error = _short(f"malformed command {_short(repr(cmd), 80)}: expected "
                                f"{{'action': <one of {list(ACTIONS)}>, 'member': <name>}}", 400)
            self.completed += 1
            return
        try:
            member = cmd.get("member")
            if member is not None and not isinstance(member, str):
                member = _short(repr(member), 40)
            if isinstance(member, str) and member:
                self.member = member[:60]
            self.run(str(cmd["action"]), member if member else None)
        finally:
            n = cmd.get("n")
            self.completed = n if isinstance(n, int) and not isinstance(n, bool) else self.completed + 1
