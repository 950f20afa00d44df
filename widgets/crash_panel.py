"""Crash panel: drive the crash worksheet by hand with real processes (§11.1, §11.3.3, §11.5.3).

An anywidget (JupyterLab, VS Code, marimo). It owns no state of its own: every button writes a
``command`` trait ``{"action", "position"?, "n"}`` (``n`` makes each click a change; the protocol of
:class:`widgets._base.CommandWidget`); the Python side runs the matching
:class:`kernel_lib.live.session.WorksheetSession` step and publishes ``status``, ``log_tail`` (the
last events of the surviving log), ``operations`` (the log folded by
:func:`kernel_lib.core.record.fold`, in-doubt rows highlighted), ``last_result`` (and ``summary``,
its one-line reading), ``error``, and ``completed`` (the ``n`` of the last finished command).

Actions: ``start`` (worker runs freely), ``crash`` (SIGKILL now), ``crash_at`` (start a worker
paused right after ``position``, then SIGKILL it there), ``recover`` (a new process folds the
surviving log), ``reconcile`` (a new process reconciles by operation id), ``refresh``.

Crash positions: every event of the worksheet's trajectory
(:meth:`~kernel_lib.live.session.WorksheetSession.crash_points`). ``positions`` lists them as
``{"value": NAME, "label": "N TYPE#K (subject)"}`` for the dropdown, NAME being the shortest spec of
the point (``ToolResult`` for the executor's acceptance, ``Authorized#1`` for the model call's
admission). A ``position`` is resolved and validated in Python
(:meth:`~kernel_lib.live.session.WorksheetSession.resolve_point`: ``N``, ``TYPE#K`` or ``TYPE``), and
the trait then holds the point's NAME. A step that cannot run (crash with no worker, recover
before any log exists, an unknown action or position) becomes a message in ``error``; it never
raises into the notebook. So does a wrong value set on ``position`` from code (``panel.position = 99``
or ``= 3.5``): the trait keeps its previous value and ``error`` says why, instead of a TraitError.

While a worker started with ``start`` runs, a watcher thread re-reads the log every
``watch_interval_s`` (0.5 s) and once more when the worker exits, so the status line and the log
tail follow it without a click. The panel follows its session: when the session is closed (by code,
or by the kernel's exit) the panel redraws as ``closed``. After a kill at log position 0 (nothing
durable yet) ``recover`` says the surviving log is empty rather than refusing; a reconciliation's
actions are written with :func:`kernel_lib.live.session.action_reading`, the same words as the CLI's
``worksheet`` report.
"""

from __future__ import annotations

import threading
from typing import Any

import traitlets

from kernel_lib.errors import ConfigError, UnknownCrashPointError, UnrecoveredRunError
from kernel_lib.live.session import WorksheetSession, action_reading
from widgets._base import CommandWidget, clip
from widgets.scrubber import record_view
from widgets.tables import money_text

ACTIONS = ("start", "crash", "crash_at", "recover", "reconcile", "refresh")


def _short(text: str, limit: int = 120) -> str:
    """``text`` cut to ``limit`` characters, so a huge input stays readable in the widget."""
    return clip(text, limit)


def _usd(x: Any) -> str:
    return money_text(float(x or 0))


class _AnyPosition(traitlets.Any):
    """A trait taking any value, None included, through its ``@validate`` hook (``Any`` passes None
    by without validating it)."""

    allow_none = False


def _empty_log(report: dict[str, Any]) -> dict[str, Any]:
    """The ``surviving_events`` / ``note`` keys a report on an empty surviving log carries."""
    return {k: report[k] for k in ("surviving_events", "note") if k in report}


def summarize(result: dict[str, Any]) -> str:
    """One line saying what the last step showed (the widget prints it under the status)."""
    action = result.get("action")
    if action == "start":
        return f"worker {result.get('worker_pid')} started" + (
            f", paused after {result['pause_at']}" if result.get("pause_at") else "")
    if action in ("crash", "crash_at"):
        running = result.get("job_running_at_crash")
        job = result.get("job_handle")
        at = (f"worker {result.get('worker_pid')} killed by {result.get('signal')} at log position "
              f"{result.get('log_position')}")
        if job is None:
            return at + "; the executor holds no job for test_r18 at the crash"
        return at + f"; executor job {job} {'still running' if running else 'not running'} at the crash"
    if action in ("recover", "reconcile"):
        acts = "; ".join(f"{op}: {action_reading(a)}" for op, a in (result.get("actions") or {}).items())
        if result.get("surviving_events") == 0:
            return (result.get("note") or "the surviving log is empty") + (f"; {acts}" if acts else "")
        doubt = ", ".join(result.get("in_doubt") or []) or "none"
        held = _usd((result.get("budget") or {}).get("outstanding_reservations_usd"))
        head = ("a replacement process folded the surviving log" if action == "recover"
                else "a replacement took ownership and reconciled by operation id")
        return f"{head}: in doubt: {doubt}; reservations held: {held}" + (f"; {acts}" if acts else "")
    return ""


class CrashPanel(CommandWidget, static="crash_panel"):
    """Buttons for the worksheet steps and a live view of the log tail and operation table.

    Args:
        session: the :class:`WorksheetSession` to drive (the caller closes it).
        tail_n: how many events the log tail shows.
        reconcile_timeout_s: how long ``reconcile`` waits for a running test job.
    """

    ACTIONS = ACTIONS
    position = _AnyPosition("").tag(sync=True)     # checked in _check_position: bad input becomes ``error``
    positions = traitlets.List().tag(sync=True)
    log_tail = traitlets.List().tag(sync=True)
    operations = traitlets.List().tag(sync=True)
    in_doubt = traitlets.List().tag(sync=True)
    last_result = traitlets.Dict().tag(sync=True)
    summary = traitlets.Unicode("").tag(sync=True)

    #: while a started worker runs, the panel re-reads the log this often (seconds), so the status
    #: line and the log tail follow the worker without a click; 0 turns the watcher off
    watch_interval_s = 0.5

    def __init__(self, session: WorksheetSession, *, tail_n: int = 8, reconcile_timeout_s: float = 30.0, **kw: Any):
        self.session = session
        self._watcher: threading.Thread | None = None
        self._reading = threading.RLock()   # the watcher's re-reads and a command's never interleave
        self._confirm_discard: str | None = None
        self.tail_n = tail_n
        self.reconcile_timeout_s = reconcile_timeout_s
        super().__init__(**kw)
        self.positions = [{"value": session.point_name(p), "label": p.describe()} for p in session.crash_points()]
        self.position = self.resolve("ToolResult")
        self.refresh()
        session.on_close(self._session_closed)

    def _session_closed(self) -> None:
        self.refresh(keep_error=True)

    @traitlets.validate("position")
    def _check_position(self, proposal: dict[str, Any]) -> str:
        """Any spec of a crash point becomes its NAME; anything else keeps the previous position
        and says why in ``error`` (no TraitError reaches the caller)."""
        value = proposal["value"]
        # the last accepted position, kept here: a value sent from the page arrives inside
        # hold_trait_notifications, where the trait already holds the refused value when this runs
        previous = self.__dict__.get("_good_position", self._trait_values.get("position", ""))
        if value == "" and not previous:     # the empty default, before __init__ picks ToolResult
            return ""
        try:
            if isinstance(value, bool) or not isinstance(value, (str, int)):
                raise ConfigError(f"crash position must be a position N or a name like ToolResult or "
                                  f"BudgetReserved#1, got a {type(value).__name__} ({_short(repr(value), 60)})")
            name = self.resolve(value)
        except (ConfigError, ValueError) as exc:
            self.error = f"position: {exc}; kept {previous or 'the previous position'}"
            return previous
        self.error = ""
        self.__dict__["_good_position"] = name
        return name

    def resolve(self, position: Any) -> str:
        """The dropdown value (the shortest spec, :meth:`WorksheetSession.point_name`) of ``position``.

        Raises ValueError naming every valid position when ``position`` is none of them."""
        try:
            return self.session.point_name(self.session.resolve_point(position))
        except UnknownCrashPointError as exc:
            raise ValueError(f"crash position {_short(repr(position))} is not one of the trajectory's positions: "
                             + ", ".join(exc.choices)) from None
        except ConfigError as exc:      # not a spec at all (e.g. a float)
            raise ValueError(f"crash position {_short(repr(position))}: {exc}") from None

    # Python-side entry point (the buttons reach it through the ``command`` trait)
    def run(self, action: str, position: str | None = None) -> bool:
        """Run one action; returns True on success, False when the reason is in ``error``."""
        # a second click of start / crash at right after the "not recovered yet" refusal discards that run
        discard, self._confirm_discard = self._confirm_discard == action, None

        def step() -> None:
            s = self.session
            if action == "start":
                r = s.start(discard_previous=discard)
                self.last_result = {"action": "start", **r}
                self._watch()
            elif action == "crash":
                self.last_result = {"action": "crash", **s.crash()}
            elif action == "crash_at":
                pos = position or self.position
                self.position = self.resolve(pos)
                started = s.start(pause_at=pos, discard_previous=discard)
                self.last_result = {"action": "crash_at", "paused": started["paused"], **s.crash()}
            elif action == "recover":
                rec = s.recovered()
                self.last_result = {"action": "recover", "in_doubt": rec["in_doubt"], "budget": rec["budget"],
                                    "operations": rec["operations"], "model": s.model, **_empty_log(rec)}
            elif action == "reconcile":
                rec = s.reconcile(self.reconcile_timeout_s)
                self.last_result = {"action": "reconcile", "in_doubt": rec["in_doubt"], "budget": rec["budget"],
                                    "actions": rec["actions"], **_empty_log(rec)}
            self.summary = summarize(self.last_result)

        return self.attempt(action, step)

    def refusal(self, action: str, exc: Exception) -> str:
        self.summary = ""
        if isinstance(exc, UnrecoveredRunError):
            self._confirm_discard = action
            return f"{action}: {exc}. Click {action.replace('_', ' ')} again to discard it."
        return super().refusal(action, exc)

    def _watch(self) -> None:
        """Follow a freely running worker: re-read the log every :attr:`watch_interval_s` while it
        runs (skipping a tick while a command is busy), and once more when it has exited, so the
        status says "exited" or "killed" without a refresh click."""
        if self.watch_interval_s <= 0 or (self._watcher is not None and self._watcher.is_alive()):
            return

        def follow() -> None:
            while True:
                running = self.session.status() != "closed" and self.session.worker_running()
                if not self.busy:
                    self.refresh(keep_error=True)
                if not running:
                    return
                threading.Event().wait(self.watch_interval_s)

        self._watcher = threading.Thread(target=follow, name="crash-panel-watch", daemon=True)
        self._watcher.start()

    def refresh(self, keep_error: bool = False) -> None:
        """Re-read the surviving log (read-only) and fold it into the operation table."""
        with self._reading:
            self._refresh(keep_error)

    def _refresh(self, keep_error: bool) -> None:
        if self.session.status() == "closed":
            self.status, self.log_tail, self.operations, self.in_doubt = "closed", [], [], []
            if not keep_error:
                self.error = ""
            return
        try:
            events = self.session.events()
            self.log_tail = self.session.log_tail(self.tail_n) if events else []
            view = record_view(events, len(events)) if events else {"operations": [], "in_doubt": []}
            self.operations = view["operations"]
            self.in_doubt = list(view["in_doubt"])
            self.status = self.session.status()
        except Exception as exc:   # a log that cannot be read: say so in the widget
            self.error = f"cannot read the log: {exc}"
            return
        if not keep_error:
            self.error = ""

    def dispatch(self, command: dict[str, Any]) -> None:
        self.run(str(command["action"]), command.get("position"))


#: What the front end receives: static/_shared.js + static/crash_panel.js, and static/crash_panel.css.
_ESM, _CSS = CrashPanel._esm, CrashPanel._css
