"""Log scrubber: a slider over log positions showing the folded record (§11.2.1).

An anywidget, so the same widget runs in JupyterLab, VS Code and marimo. The widget owns no
state of its own (DESIGN.md, principle 6): moving the slider sets ``position``; the Python side
folds the first ``position`` events with :func:`kernel_lib.core.record.fold` and publishes the result
as ``record`` (a JSON view: operations with their status, in-doubt attempts, budget). Operations
in doubt are highlighted. A position outside ``0..max_position`` shows a message in the widget and
keeps the last good record; it never raises.

The widget keeps a :class:`kernel_lib.checkpoint.CheckpointIndex` over its events: a position is
shown by folding from the nearest in-memory snapshot at or before it (at most one stride of
events), not from the start of the log (§11.4), so scrubbing a long log stays interactive.
"""

from __future__ import annotations

from typing import Any, Sequence

import anywidget
import traitlets

from kernel_lib.checkpoint.index import CheckpointIndex
from kernel_lib.core.events import Event
from kernel_lib.core.record import TrajectoryRecord, fold, initial_record

_ESM = r"""
function render({ model, el }) {
  el.classList.add("dal-scrubber");
  // keys typed in the widget (arrows on the slider, letters in a select) are the widget's, not
  // JupyterLab's notebook shortcuts (which would move to another cell or collapse a heading)
  el.dataset.lmSuppressShortcuts = "true";
  el.addEventListener("keydown", (e) => e.stopPropagation());
  const bar = document.createElement("div");
  const slider = Object.assign(document.createElement("input"), { type: "range", min: 0, step: 1 });
  slider.className = "dal-slider";
  const label = document.createElement("span");
  label.className = "dal-label";
  bar.append(slider, label);
  const msg = document.createElement("div");
  msg.className = "dal-error";
  const table = document.createElement("table");
  table.className = "dal-ops";
  const budget = document.createElement("div");
  budget.className = "dal-budget";
  el.append(bar, msg, table, budget);

  function draw() {
    const rec = model.get("record") || {};
    slider.max = model.get("max_position");
    slider.value = model.get("position");
    label.textContent = ` position ${model.get("position")} / ${model.get("max_position")}  ` +
      (model.get("last_event") || "");
    msg.textContent = model.get("error") || "";
    table.replaceChildren();
    const head = table.insertRow();
    for (const h of ["operation", "kind", "status", "attempt", "job handle", "last evidence"]) {
      const th = document.createElement("th"); th.textContent = h; head.appendChild(th);
    }
    for (const op of rec.operations || []) {
      const row = table.insertRow();
      row.className = op.status === "in_doubt" ? "dal-in-doubt" : "";
      for (const v of [op.operation_id, op.kind, op.status, op.attempt_id, op.job_handle, op.last_evidence]) {
        row.insertCell().textContent = v ?? "";
      }
    }
    const b = rec.budget || {};
    budget.textContent = `budget (USD): consumed ${b.actual_consumption_usd ?? 0}, held ` +
      `${b.outstanding_reservations_usd ?? 0}, reserve ${b.finalization_reserve_usd ?? 0}, ` +
      `available ${b.available_usd ?? 0}`;
  }
  slider.addEventListener("input", () => {
    model.set("position", Number(slider.value));
    model.save_changes();
  });
  model.on("change:record", draw);
  model.on("change:error", draw);
  model.on("change:position", draw);
  model.on("change:last_event", draw);
  draw();
}
export default { render };
"""

_CSS = """
.dal-scrubber { font-family: system-ui, sans-serif; font-size: 13px; }
.dal-slider { width: 60%; vertical-align: middle; }
.dal-error { color: #b00020; min-height: 1.2em; }
.dal-ops { border-collapse: collapse; margin: 4px 0; }
.dal-ops th, .dal-ops td { border: 1px solid #ccc; padding: 2px 6px; text-align: left; }
.dal-in-doubt { background: #fff3cd; font-weight: 600; }
"""


def record_view(events: Sequence[Event], position: int, index: CheckpointIndex | None = None) -> dict[str, Any]:
    """The JSON view the scrubber shows after folding the first ``position`` events.

    With ``index`` (a :class:`CheckpointIndex` over the same ``events``) the record comes from its
    nearest snapshot at or before ``position``; without it, from a fold of the whole prefix. The
    view is the same either way.
    """
    if index is not None:
        rec = index.record_at(position)
    else:
        rec = fold(initial_record(events[0].trajectory_id), events[:position])
    return view_of(rec, position)


def view_of(rec: TrajectoryRecord, position: int) -> dict[str, Any]:
    """The scrubber's JSON view of a folded record, built in one pass over the operation table
    and one over the reservations rather than through ``to_dict`` (whose cost grows with every
    field of every operation). ``budget`` equals ``rec.to_dict()["budget"]``; ``in_doubt`` and
    ``attempts_in_doubt`` equal the record's own lists."""
    ops, in_doubt, attempts_in_doubt = [], [], []
    for k, op in rec.operations.items():
        att = op.attempts.get(op.current_attempt_id or "")
        ops.append({"operation_id": op.operation_id, "kind": op.kind, "status": op.status,
                    "attempt_id": op.current_attempt_id, "job_handle": att.job_handle if att else None,
                    "last_evidence": att.last_result_status if att else None})
        if op.status == "in_doubt":
            in_doubt.append(k)
        for a in op.attempts.values():
            if a.intent_sequence is not None and not a.established:
                attempts_in_doubt.append([k, a.attempt_id])
    return {"position": position, "operations": ops, "in_doubt": in_doubt,
            "attempts_in_doubt": attempts_in_doubt, "budget": _budget_view(rec),
            "control_state": rec.control_state}


_EPS = 1e-9


def _usd(x: float) -> float:
    return round(x, 9)


def _budget_view(rec: TrajectoryRecord) -> dict[str, Any]:
    """``rec.to_dict()["budget"]``, computed in one pass (same float operations, same order)."""
    b = rec.budget
    reservations, outstanding, overruns = {}, {}, {}
    held = 0
    for k, r in b.reservations.items():
        reservations[k] = {"reservation_id": r.reservation_id, "subject_id": r.subject_id,
                           "amount_usd": r.amount_usd, "settled_usd": r.settled_usd, "released": r.released}
        o = 0.0 if r.released else max(r.amount_usd - r.settled_usd, 0.0)
        held += o
        if o > _EPS:
            outstanding[k] = _usd(o)
        over = max(r.settled_usd - r.amount_usd, 0.0)
        if over > _EPS:
            overruns[k] = _usd(over)
    available = b.ceiling_usd - b.actual_consumption_usd - held - b.finalization_reserve_usd
    return {"ceiling_usd": b.ceiling_usd, "finalization_reserve_usd": b.finalization_reserve_usd,
            "actual_consumption_usd": _usd(b.actual_consumption_usd), "reservations": reservations,
            "outstanding_reservations_usd": _usd(held), "available_usd": _usd(available),
            "outstanding_reservations": outstanding, "overruns": overruns}


class LogScrubber(anywidget.AnyWidget):
    """Slide through a recorded trajectory and see the record a replacement worker would fold.

    Args:
        events: one trajectory's events in sequence order (e.g. ``kernel_lib.cli.load_events``).
        position: where to start (default: the end).

    Raises:
        ValueError: ``events`` is empty (there is nothing to scrub).
    """

    _esm = _ESM
    _css = _CSS
    position = traitlets.Int(0).tag(sync=True)
    max_position = traitlets.Int(0).tag(sync=True)
    record = traitlets.Dict().tag(sync=True)
    last_event = traitlets.Unicode("").tag(sync=True)
    error = traitlets.Unicode("").tag(sync=True)

    def __init__(self, events: Sequence[Event], position: int | None = None, **kw: Any):
        events = list(events)
        if not events:
            raise ValueError("the log holds no events: nothing to scrub")
        bad = next((e for e in events if not isinstance(e, Event)), None)
        if bad is not None:
            raise TypeError(f"LogScrubber needs kernel_lib Event objects (e.g. from kernel_lib.cli.load_events), "
                            f"got {type(bad).__name__}")
        trajectories = sorted({e.trajectory_id for e in events})
        if len(trajectories) > 1:
            raise ValueError(f"the events belong to {len(trajectories)} trajectories {trajectories[:5]}: "
                             "a scrubber shows one trajectory's log; filter by trajectory_id first")
        self._events = events
        self._index = CheckpointIndex(events)
        self._good = 0             # the last position whose record is shown
        self._snapping = False
        super().__init__(max_position=len(events), **kw)
        self.observe(self._on_position, names="position")
        start = len(events) if position is None else position
        self._show(0)              # something valid to fall back on
        if start != 0:
            self.position = start
        if self.position != start or start == 0:
            self._on_position({"new": start})

    def _snap_back(self, message: str) -> None:
        """Show ``message``, and put the slider back on the position whose record is shown."""
        self.error = message
        self._snapping = True
        try:
            self.position = self._good
        finally:
            self._snapping = False

    def _on_position(self, change: dict[str, Any]) -> None:
        if self._snapping:
            return
        pos = change["new"]
        if isinstance(pos, bool) or not isinstance(pos, int) or not 0 <= pos <= len(self._events):
            self._snap_back(f"position {pos!r} is outside the log: choose 0 to {len(self._events)} "
                            f"(still showing the record at {self._good})")
            return
        try:
            self._show(pos)
        except Exception as exc:   # a log that does not fold: say why in the widget
            self._snap_back(f"cannot fold the first {pos} events: {exc} (still showing the record at {self._good})")
            return
        self.error = ""

    def _show(self, pos: int) -> None:
        self.record = record_view(self._events, pos, self._index)
        self._good = pos
        self.last_event = f"last: {self._events[pos - 1].event_type}" if pos else "before the first event"
