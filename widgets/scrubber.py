"""Log scrubber: a slider over log positions showing the folded record (§11.2.1).

An anywidget, so the same widget runs in JupyterLab, VS Code and marimo. The widget owns no
state of its own (DESIGN.md, principle 6): moving the slider sets ``position``; the Python side
folds the first ``position`` events with :func:`kernel_lib.core.record.fold` and publishes the result
as ``record`` (a JSON view: operations with their status, in-doubt attempts, budget). Operations
in doubt are highlighted. A position outside ``0..max_position``, or a value that is not a whole
number (set from code), shows a message in the widget and keeps the last good record; it never
raises. Every assignment is checked, also one of the position already shown, so setting a valid
position always clears an earlier message (as after Run All of a notebook that tried a bad one).

The widget keeps a :class:`kernel_lib.checkpoint.CheckpointIndex` over its events: a position is
shown by folding from the nearest in-memory snapshot at or before it (at most one stride of
events), not from the start of the log (§11.4), so scrubbing a long log stays interactive.
"""

from __future__ import annotations

from numbers import Integral
from typing import Any, Sequence

import traitlets

from kernel_lib.checkpoint.index import CheckpointIndex
from kernel_lib.core.events import Event
from kernel_lib.history.scrub import record_view, view_of  # noqa: F401  (the kernel computes the view)
from widgets._base import KernelWidget, clip
from widgets.tables import money_text


class LogScrubber(KernelWidget, static="scrubber"):
    """Slide through a recorded trajectory and see the record a replacement worker would fold.

    Args:
        events: one trajectory's events in sequence order (e.g. ``kernel_lib.log.load_events``).
        position: where to start (default: the end).

    Raises:
        ValueError: ``events`` is empty (there is nothing to scrub).
    """

    # Any, so that a wrong type set from code reaches _check_position and becomes a message in
    # `error` instead of a traitlets TraitError; the trait itself only ever holds a valid position
    position = traitlets.Any(0).tag(sync=True)
    position.allow_none = False     # traitlets.Any forces True, and None would skip _check_position
    max_position = traitlets.Int(0).tag(sync=True)
    record = traitlets.Dict().tag(sync=True)
    last_event = traitlets.Unicode("").tag(sync=True)
    #: The record's budget as a sentence in dollars (``money_text``), computed here, not in JavaScript.
    budget_line = traitlets.Unicode("").tag(sync=True)

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
        self._show(0)              # something valid to fall back on
        super().__init__(max_position=len(events), **kw)
        self.position = len(events) if position is None else position

    @traitlets.validate("position")
    def _check_position(self, proposal: dict[str, Any]) -> int:
        """Every assignment of ``position`` (from code or from the slider, also of the value it
        already holds) comes here: a valid position is folded and shown and clears ``error``; a
        position outside the log, a value that is not a whole number, or a prefix that does not
        fold keeps the record shown, says why in ``error``, and leaves ``position`` on it."""
        pos = proposal["value"]
        n = len(self._events)
        if isinstance(pos, bool) or not isinstance(pos, Integral):
            self.error = (f"position {clip(repr(pos), 40)} is not a log position ({type(pos).__name__}): "
                          f"set a whole number of events from 0 to {n} (still showing the record at {self._good})")
            return self._good
        pos = int(pos)
        if not 0 <= pos <= n:
            self.error = (f"position {pos} is outside the log: choose 0 to {n} "
                          f"(still showing the record at {self._good})")
            return self._good
        try:
            self._show(pos)
        except Exception as exc:   # a log that does not fold: say why in the widget
            self.error = f"cannot fold the first {pos} events: {exc} (still showing the record at {self._good})"
            return self._good
        self.error = ""
        return pos

    def _show(self, pos: int) -> None:
        self.record = record_view(self._events, pos, self._index)
        self._good = pos
        self.last_event = f"last: {self._events[pos - 1].event_type}" if pos else "before the first event"
        b = self.record.get("budget") or {}
        self.budget_line = (f"budget: spent {money_text(b.get('actual_consumption_usd', 0.0))}, "
                            f"held for calls in flight {money_text(b.get('outstanding_reservations_usd', 0.0))}, "
                            f"final-step reserve {money_text(b.get('finalization_reserve_usd', 0.0))}, "
                            f"available {money_text(b.get('available_usd', 0.0))} "
                            f"of {money_text(b.get('ceiling_usd', 0.0))}")


#: What the front end receives: static/_shared.js + static/scrubber.js, and static/scrubber.css.
_ESM, _CSS = LogScrubber._esm, LogScrubber._css
