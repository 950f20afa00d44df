"""Log scrubber: a slider over log positions showing the folded record (§11.2.1).

An anywidget, so the same widget runs in JupyterLab, VS Code and marimo. The widget owns no
state of its own (DESIGN.md, principle 6): moving the slider sets ``position``; the Python side
folds the first ``position`` events with :func:`kernel_lib.record.fold` and publishes the result
as ``record`` (a JSON view: operations with their status, in-doubt attempts, budget). Operations
in doubt are highlighted. A position outside ``0..max_position`` shows a message in the widget and
keeps the last good record; it never raises.
"""

from __future__ import annotations

from typing import Any, Sequence

import anywidget
import traitlets

from kernel_lib.events import Event
from kernel_lib.record import fold, initial_record

_ESM = r"""
function render({ model, el }) {
  el.classList.add("dal-scrubber");
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


def record_view(events: Sequence[Event], position: int) -> dict[str, Any]:
    """The JSON view the scrubber shows after folding the first ``position`` events."""
    rec = fold(initial_record(events[0].trajectory_id), events[:position])
    d = rec.to_dict()
    ops = []
    for op in rec.operations.values():
        att = op.attempts.get(op.current_attempt_id or "")
        ops.append({"operation_id": op.operation_id, "kind": op.kind, "status": op.status,
                    "attempt_id": op.current_attempt_id, "job_handle": op.job_handle,
                    "last_evidence": att.last_result_status if att else None})
    return {"position": position, "operations": ops, "in_doubt": d["in_doubt"],
            "attempts_in_doubt": d["attempts_in_doubt"], "budget": d["budget"],
            "control_state": rec.control_state}


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
        self._events = events
        super().__init__(max_position=len(events), **kw)
        self.observe(self._on_position, names="position")
        self.position = len(events) if position is None else position
        self._on_position({"new": self.position})

    def _on_position(self, change: dict[str, Any]) -> None:
        pos = change["new"]
        if not isinstance(pos, int) or not 0 <= pos <= len(self._events):
            self.error = (f"position {pos} is outside the log: choose 0 to {len(self._events)} "
                          f"(the record shown is still the one at {self.record.get('position', '-')})")
            return
        try:
            self.record = record_view(self._events, pos)
        except Exception as exc:   # a log that does not fold: say why in the widget
            self.error = f"cannot fold the first {pos} events: {exc}"
            return
        self.error = ""
        self.last_event = f"last: {self._events[pos - 1].event_type}" if pos else "before the first event"
