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

import traitlets

from kernel_lib.checkpoint.index import CheckpointIndex
from kernel_lib.core.events import Event
from kernel_lib.history.scrub import record_view, view_of  # noqa: F401  (the kernel computes the view)
from widgets._base import KernelWidget


class LogScrubber(KernelWidget, static="scrubber"):
    """Slide through a recorded trajectory and see the record a replacement worker would fold.

    Args:
        events: one trajectory's events in sequence order (e.g. ``kernel_lib.log.load_events``).
        position: where to start (default: the end).

    Raises:
        ValueError: ``events`` is empty (there is nothing to scrub).
    """

    position = traitlets.Int(0).tag(sync=True)
    max_position = traitlets.Int(0).tag(sync=True)
    record = traitlets.Dict().tag(sync=True)
    last_event = traitlets.Unicode("").tag(sync=True)

    def __init__(self, events: Sequence[Event], position: int | None = None, **kw: Any):
        events = list(events)
        if not events:
            raise ValueError("the log holds no events: nothing to scrub")
        bad = next((e for e in events if not isinstance(e, Event)), None)
        if bad is not None:
            raise TypeError(f"LogScrubber needs kernel_lib Event objects (e.g. from kernel_lib.log.load_events), "
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


#: What the front end receives: static/_shared.js + static/scrubber.js, and static/scrubber.css.
_ESM, _CSS = LogScrubber._esm, LogScrubber._css
