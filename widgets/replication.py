"""Replication panel: a three-member etcd cluster you can break by hand (§11.3.1 table 2 row 3, footnote 3).

An anywidget (JupyterLab, VS Code, marimo) in the style of :mod:`widgets.crash_panel`. It owns no
state of its own: the cluster, the log and every count live in a
:class:`kernel_lib.quorum.session.ReplicationSession`; the panel only calls it and lays out what it
returns. Every button writes a ``command`` trait ``{"action", "member"?, "n"}`` (the protocol of
:class:`widgets._base.CommandWidget`); the Python side runs the matching session step and publishes
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

What an append means, how an in-doubt event is settled, and how every etcd process is stopped (by
pid in :meth:`ReplicationPanel.stop`, in :meth:`~ReplicationPanel.close`, at interpreter exit, and
with the kernel through a parent-death signal) is the session's: see :mod:`kernel_lib.quorum.session`.

Blocking: like the crash panel, each command runs to completion in the kernel's comm handler with
``busy`` set (the buttons are disabled and the panel says "working…"); every wait is bounded
(``append_timeout_s`` for appends, ``leader_wait_s`` after a fault, ``restart_wait_s`` for a
rejoining member), so no click holds the kernel for long. Running in the kernel's main thread also
lets the etcd members be started with a parent-death signal (see :mod:`kernel_lib.quorum.cluster`).

Bad input — an unknown member, restarting a member whose volume was destroyed, an append before
start — raises a :class:`ReplicationPanelError` subclass from the Python API and becomes a message
in ``error`` when it comes from a button.
"""

from __future__ import annotations

from typing import Any

import traitlets

from kernel_lib.errors import ConfigError
from kernel_lib.quorum.session import (
    MEMBER_STEPS,
    TRAJECTORY,
    ClusterNotRunningError,
    ClusterRunningError,
    MemberStateError,
    ReplicationSession,
    ReplicationSessionError,
    UnknownMemberError,
)
from widgets._base import CommandWidget, clip

__all__ = ["ReplicationPanel", "ReplicationPanelError", "ClusterNotRunningError", "ClusterRunningError",
           "UnknownMemberError", "MemberStateError", "ACTIONS", "MEMBER_ACTIONS", "TRAJECTORY"]

ACTIONS = ("start", "append", "kill", "pause", "resume", "restart", "destroy_volume", "stop", "refresh")
MEMBER_ACTIONS = MEMBER_STEPS
#: The panel's errors are the session's (the old name kept for callers that catch it).
ReplicationPanelError = ReplicationSessionError


class ReplicationPanel(CommandWidget, static="replication"):
    """Start, break and heal a small etcd cluster, appending to a quorum-acknowledged log.

    Args:
        session: the :class:`~kernel_lib.quorum.session.ReplicationSession` to drive; its caller
            stops it. Without one, the panel makes its own from the settings below and stops it
            in :meth:`close`.
        members: how many etcd members (default 3; 1..7).
        append_timeout_s: how long one append waits for a majority before it is reported as not
            acknowledged (default 2 s, so a click never holds the kernel long).
        leader_wait_s: after a kill, pause or resume, how long to wait for a leader when a majority
            is up (default 5 s; so the next append does not pay for the election).
        restart_wait_s: how long a restarted member may take to rejoin and see a leader (default 8 s).
        outcomes_kept: how many outcome lines the widget shows (the session keeps them all).

    Raises:
        ConfigError: a bad argument, or a session given together with settings for a new one.
    """

    ACTIONS = ACTIONS
    COMMAND_FIELDS = ", 'member': <name>"
    member = traitlets.Unicode("m0").tag(sync=True)
    members = traitlets.List().tag(sync=True)
    head = traitlets.Int(0).tag(sync=True)
    log_tail = traitlets.List().tag(sync=True)
    outcomes = traitlets.List().tag(sync=True)
    counts = traitlets.Dict().tag(sync=True)
    check = traitlets.Unicode("").tag(sync=True)

    def __init__(self, session: ReplicationSession | None = None, *, members: int | None = None,
                 append_timeout_s: float | None = None, leader_wait_s: float | None = None,
                 restart_wait_s: float | None = None, outcomes_kept: int = 12, **kw: Any):
        settings = {k: v for k, v in (("members", members), ("append_timeout_s", append_timeout_s),
                                      ("leader_wait_s", leader_wait_s), ("restart_wait_s", restart_wait_s))
                    if v is not None}
        owns = session is None
        if session is None:
            session = ReplicationSession(**settings)        # checks the settings
        elif not isinstance(session, ReplicationSession):
            raise ConfigError(f"session must be a kernel_lib.quorum.session.ReplicationSession, got "
                              f"{type(session).__name__}")
        elif settings:
            raise ConfigError(f"give either a session or settings for a new one, not both ({sorted(settings)})")
        if type(outcomes_kept) is not int or outcomes_kept < 1:
            raise ConfigError(f"outcomes_kept must be an int >= 1, got {outcomes_kept!r}")
        self.session = session
        self._owns_session = owns
        self.outcomes_kept = outcomes_kept
        super().__init__(**kw)
        self.refresh()

    # --- what the session holds, for callers of the old attributes -----------------------------------
    @property
    def cluster(self):
        """The session's running :class:`~kernel_lib.quorum.cluster.EtcdCluster`, or None."""
        return self.session.cluster

    @property
    def store(self):
        """The session's :class:`~kernel_lib.quorum.store.EtcdStore`, or None."""
        return self.session.store

    @property
    def pids(self) -> list[int]:
        """Every etcd pid the session ever started (tests check they are gone)."""
        return self.session.pids

    @property
    def history(self) -> list[dict[str, Any]]:
        """Every append's outcome, oldest first."""
        return self.session.history

    @property
    def members_n(self) -> int:
        return self.session.members_n

    @property
    def append_timeout_s(self) -> float:
        return self.session.append_timeout_s

    @property
    def leader_wait_s(self) -> float:
        return self.session.leader_wait_s

    @property
    def restart_wait_s(self) -> float:
        return self.session.restart_wait_s

    # --- the Python API (each button reaches one of these; see ReplicationSession for each step) ----
    def _published(self, result: dict[str, Any]) -> dict[str, Any]:
        """Show what the step just done said, publish the session's state, return ``result``."""
        self.status = clip(self.session.message, 600)
        self.refresh(keep_error=True)
        return result

    def start(self) -> dict[str, Any]:
        """Start the members on loopback and wait for a leader (:meth:`ReplicationSession.start`).
        Raises ClusterRunningError if the cluster is already running, QuorumSetupError if etcd is
        missing or will not start."""
        return self._published(self.session.start())

    def append(self) -> dict[str, Any]:
        """Append one event and wait at most ``append_timeout_s`` for the quorum's acknowledgment;
        returns the outcome (``acknowledged``, ``ms`` measured, ``sequence``, ``event_id``, ``text``;
        see :meth:`ReplicationSession.append`). Raises ClusterNotRunningError before start."""
        return self._published(self.session.append())

    def kill(self, which: int | str) -> dict[str, Any]:
        """SIGKILL member ``which`` (index or name): a crashed node whose disk survives."""
        return self._published(self.session.kill(which))

    def pause(self, which: int | str) -> dict[str, Any]:
        """SIGSTOP member ``which``: alive but silent, as a node behind a network partition."""
        return self._published(self.session.pause(which))

    def resume(self, which: int | str) -> dict[str, Any]:
        """SIGCONT a paused member; with a majority back, resolve an in-doubt event and check the log."""
        return self._published(self.session.resume(which))

    def restart(self, which: int | str) -> dict[str, Any]:
        """Start a killed member again on its own data; then resolve an in-doubt event and check that
        every acknowledged event is present. Raises MemberStateError for a destroyed volume."""
        return self._published(self.session.restart(which))

    def destroy_volume(self, which: int | str) -> dict[str, Any]:
        """SIGKILL member ``which`` and delete its data directory (that member's volume is lost)."""
        return self._published(self.session.destroy_volume(which))

    def verify(self, label: str = "check") -> dict[str, Any]:
        """Read the whole log back and check that every acknowledged event is there, in order
        (:meth:`ReplicationSession.verify`; ``ok`` None when no majority answered)."""
        return self.session.verify(label)

    def stop(self) -> dict[str, Any]:
        """Stop every member by pid (idempotent; a panel never started has nothing to stop)."""
        return self._published(self.session.stop())

    def close(self) -> None:
        """Stop the cluster of a session this panel made, then close the widget (also reached from
        ``__del__``, possibly on a panel whose ``__init__`` refused its arguments)."""
        try:
            session = getattr(self, "session", None)
            if getattr(self, "_owns_session", False) and session is not None and session.running:
                self.stop()
        finally:
            super().close()

    def state(self) -> dict[str, Any]:
        """What the panel shows, as plain data (:meth:`ReplicationSession.state`)."""
        return self.session.state()

    # --- the widget side --------------------------------------------------------------------------------
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

    def run(self, action: str, member: int | str | None = None) -> bool:
        """Run one button's action; True on success, False when the reason is in ``error``."""
        def step() -> None:
            if action in MEMBER_ACTIONS:
                getattr(self, action)(self.member if member is None else member)
            elif action == "refresh":
                self.refresh()
            else:
                getattr(self, action)()
        return self.attempt(action, step)

    def dispatch(self, command: dict[str, Any]) -> None:
        member = command.get("member")
        if member is not None and not isinstance(member, str):
            member = clip(repr(member), 40)
        if isinstance(member, str) and member:
            self.member = member[:60]
        self.run(str(command["action"]), member if member else None)


#: What the front end receives: static/_shared.js + static/replication.js, and static/replication.css.
_ESM, _CSS = ReplicationPanel._esm, ReplicationPanel._css
