"""Crash panel: drive the crash worksheet by hand with real processes (§11.1, §11.3.3, §11.5.3).

An anywidget (JupyterLab, VS Code, marimo). It owns no state of its own: every button writes a
``command`` trait ``{"action", "position"?, "n"}`` (``n`` makes each click a change); the Python
side runs the matching :class:`kernel_lib.live.session.WorksheetSession` step and publishes
``status``, ``log_tail`` (the last events of the surviving log), ``operations`` (the log folded
by :func:`kernel_lib.core.record.fold`, in-doubt rows highlighted), ``last_result`` (and ``summary``, its
one-line reading), ``error``, and ``completed`` (the ``n`` of the last finished command).

Actions: ``start`` (worker runs freely), ``crash`` (SIGKILL now), ``crash_at`` (start a worker
paused right after ``position`` ∈ Authorized/BudgetReserved/ToolIntent/ToolResult, then SIGKILL
it there), ``recover`` (a new process folds the surviving log), ``reconcile`` (a new process
reconciles by operation id), ``refresh``. A step that cannot run (crash with no worker, recover
before any log exists, an unknown action or position) becomes a message in ``error``; it never
raises into the notebook.
"""

from __future__ import annotations

from typing import Any

import anywidget
import traitlets

from kernel_lib.errors import KernelError
from kernel_lib.live.session import CRASH_POINTS, UnrecoveredRunError, WorksheetSession
from widgets.scrubber import record_view

ACTIONS = ("start", "crash", "crash_at", "recover", "reconcile", "refresh")

_ESM = r"""
function render({ model, el }) {
  el.classList.add("dal-crash-panel");
  // keys typed in the widget (arrows on the slider, letters in a select) are the widget's, not
  // JupyterLab's notebook shortcuts (which would move to another cell or collapse a heading)
  el.dataset.lmSuppressShortcuts = "true";
  el.addEventListener("keydown", (e) => e.stopPropagation());
  const bar = document.createElement("div");
  const mk = (label, action) => {
    const b = document.createElement("button");
    b.textContent = label; b.dataset.action = action; b.className = "dal-btn";
    b.addEventListener("click", () => send(action));
    return b;
  };
  const sel = document.createElement("select");
  sel.className = "dal-position";
  for (const p of model.get("positions")) {
    const o = document.createElement("option"); o.value = p; o.textContent = p; sel.appendChild(o);
  }
  sel.value = model.get("position");
  sel.addEventListener("change", () => { model.set("position", sel.value); model.save_changes(); });
  bar.append(mk("start", "start"), mk("crash now", "crash"), mk("crash at", "crash_at"), sel,
             mk("recover", "recover"), mk("reconcile", "reconcile"));
  const status = document.createElement("div"); status.className = "dal-status";
  const summary = document.createElement("div"); summary.className = "dal-summary";
  const msg = document.createElement("div"); msg.className = "dal-error";
  const ops = document.createElement("table"); ops.className = "dal-ops";
  const tail = document.createElement("table"); tail.className = "dal-tail";
  el.append(bar, status, summary, msg, ops, tail);
  // every click must be a change of the command trait, also after a re-render or in a second view
  const view = Math.random().toString(36).slice(2);
  let n = 0;
  function send(action) {
    n = Math.max(n, model.get("completed") || 0) + 1;
    model.set("command", { action, position: sel.value, n, view });
    model.save_changes();
  }
  function fill(table, headers, rows, rowClass) {
    table.replaceChildren();
    const head = table.insertRow();
    for (const h of headers) { const th = document.createElement("th"); th.textContent = h; head.appendChild(th); }
    for (const r of rows) {
      const row = table.insertRow();
      row.className = rowClass ? rowClass(r) : "";
      for (const h of headers) row.insertCell().textContent = r[h] ?? "";
    }
  }
  function draw() {
    const busy = model.get("busy");
    el.dataset.completed = String(model.get("completed") || 0);
    for (const b of bar.querySelectorAll("button")) b.disabled = busy;
    status.textContent = (busy ? "working… " : "") + (model.get("status") || "");
    msg.textContent = model.get("error") || "";
    summary.textContent = model.get("summary") || "";
    fill(ops, ["operation_id", "kind", "status", "attempt_id", "job_handle", "last_evidence"],
         model.get("operations") || [], (r) => r.status === "in_doubt" ? "dal-in-doubt" : "");
    fill(tail, ["sequence", "type", "operation_id", "subject_id", "status", "job_handle", "owner_epoch"],
         model.get("log_tail") || []);
  }
  for (const t of ["status", "summary", "error", "operations", "log_tail", "busy", "completed"]) model.on(`change:${t}`, draw);
  draw();
}
export default { render };
"""

_CSS = """
.dal-crash-panel { font-family: system-ui, sans-serif; font-size: 13px; }
.dal-btn { margin-right: 4px; }
.dal-status { margin: 4px 0; color: #333; }
.dal-summary { margin: 4px 0; font-weight: 600; }
.dal-error { color: #b00020; min-height: 1.2em; }
.dal-ops, .dal-tail { border-collapse: collapse; margin: 4px 0; }
.dal-ops th, .dal-ops td, .dal-tail th, .dal-tail td { border: 1px solid #ccc; padding: 2px 6px; text-align: left; }
.dal-in-doubt { background: #fff3cd; font-weight: 600; }
"""


def _short(text: str, limit: int = 120) -> str:
    """``text`` cut to ``limit`` characters, so a huge input stays readable in the widget."""
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} characters)"


def _usd(x: Any) -> str:
    return f"{float(x or 0):.4g} USD"


def summarize(result: dict[str, Any]) -> str:
    """One line saying what the last step showed (the widget prints it under the status)."""
    action = result.get("action")
    if action == "start":
        return f"worker {result.get('worker_pid')} started" + (
            f", paused after {result['pause_at']}" if result.get("pause_at") else "")
    if action in ("crash", "crash_at"):
        running = result.get("job_running_at_crash")
        job = result.get("job_handle")
        return (f"worker {result.get('worker_pid')} killed by {result.get('signal')} at log position "
                f"{result.get('log_position')}; executor job {job or '(none)'} "
                f"{'still running' if running else 'not running'} at the crash")
    if action in ("recover", "reconcile"):
        doubt = ", ".join(result.get("in_doubt") or []) or "none"
        held = _usd((result.get("budget") or {}).get("outstanding_reservations_usd"))
        head = ("a replacement process folded the surviving log" if action == "recover"
                else "a replacement took ownership and asked the executor by operation id")
        acts = "; ".join(f"{op}: {a.get('action')}" for op, a in (result.get("actions") or {}).items())
        return f"{head}: in doubt: {doubt}; reservations held: {held}" + (f"; {acts}" if acts else "")
    return ""


class CrashPanel(anywidget.AnyWidget):
    """Buttons for the worksheet steps and a live view of the log tail and operation table.

    Args:
        session: the :class:`WorksheetSession` to drive (the caller closes it).
        tail_n: how many events the log tail shows.
        reconcile_timeout_s: how long ``reconcile`` waits for a running test job.
    """

    _esm = _ESM
    _css = _CSS
    command = traitlets.Any({}).tag(sync=True)   # checked in _on_command, so bad input becomes ``error``
    position = traitlets.Unicode("ToolResult").tag(sync=True)
    positions = traitlets.List(list(CRASH_POINTS)).tag(sync=True)
    status = traitlets.Unicode("").tag(sync=True)
    error = traitlets.Unicode("").tag(sync=True)
    busy = traitlets.Bool(False).tag(sync=True)
    log_tail = traitlets.List().tag(sync=True)
    operations = traitlets.List().tag(sync=True)
    in_doubt = traitlets.List().tag(sync=True)
    last_result = traitlets.Dict().tag(sync=True)
    summary = traitlets.Unicode("").tag(sync=True)
    completed = traitlets.Int(0).tag(sync=True)

    def __init__(self, session: WorksheetSession, *, tail_n: int = 8, reconcile_timeout_s: float = 30.0, **kw: Any):
        self.session = session
        self._confirm_discard: str | None = None
        self.tail_n = tail_n
        self.reconcile_timeout_s = reconcile_timeout_s
        super().__init__(**kw)
        self.observe(self._on_command, names="command")
        self.refresh()

    # Python-side entry point (the buttons reach it through the ``command`` trait)
    def run(self, action: str, position: str | None = None) -> bool:
        """Run one action; returns True on success, False when the reason is in ``error``."""
        self.busy = True
        # a second click of start / crash at right after the "not recovered yet" refusal discards that run
        discard, self._confirm_discard = self._confirm_discard == action, None
        try:
            if action not in ACTIONS:
                raise ValueError(f"unknown action {_short(repr(action))}: choose one of {list(ACTIONS)}")
            s = self.session
            if action == "start":
                r = s.start(discard_previous=discard)
                self.last_result = {"action": "start", **r}
            elif action == "crash":
                self.last_result = {"action": "crash", **s.crash()}
            elif action == "crash_at":
                pos = position or self.position
                if pos not in CRASH_POINTS:
                    raise ValueError(f"crash position {_short(repr(pos))} is not one of {list(CRASH_POINTS)}")
                self.position = pos
                started = s.start(pause_at=pos, discard_previous=discard)
                self.last_result = {"action": "crash_at", "paused": started["paused"], **s.crash()}
            elif action == "recover":
                rec = s.recovered()
                self.last_result = {"action": "recover", "in_doubt": rec["in_doubt"], "budget": rec["budget"],
                                    "operations": rec["operations"], "model": s.model}
            elif action == "reconcile":
                rec = s.reconcile(self.reconcile_timeout_s)
                self.last_result = {"action": "reconcile", "in_doubt": rec["in_doubt"], "budget": rec["budget"],
                                    "actions": rec["actions"]}
            self.error = ""
            self.summary = summarize(self.last_result)
            return True
        except UnrecoveredRunError as exc:
            self._confirm_discard = action
            self.error = f"{action}: {exc}. Click {action.replace('_', ' ')} again to discard it."
            self.summary = ""
            return False
        except (KernelError, ValueError, TypeError, OSError) as exc:
            self.error = _short(f"{_short(str(action))}: {exc}", 600)
            self.summary = ""
            return False
        finally:
            self.refresh(keep_error=True)
            self.busy = False

    def refresh(self, keep_error: bool = False) -> None:
        """Re-read the surviving log (read-only) and fold it into the operation table."""
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

    def _on_command(self, change: dict[str, Any]) -> None:
        cmd = change["new"] or {}
        if not isinstance(cmd, dict) or not isinstance(cmd.get("action"), str) or not cmd["action"]:
            self.error = f"malformed command {_short(repr(cmd))}: expected {{'action': <one of {list(ACTIONS)}>}}"
            self.completed += 1
            return
        try:
            self.run(str(cmd["action"]), cmd.get("position"))
        finally:
            n = cmd.get("n")
            self.completed = n if isinstance(n, int) and not isinstance(n, bool) else self.completed + 1

