"""Watchdog view: scrub a trajectory step by step and see what the semantic watchdog and the
baselines saw there (Failure Recovery, "Semantic Watchdog Timers": figure 3's window W, table 6's
signals, the loop rules OpenHands and Gemini CLI ship).

An anywidget (JupyterLab, VS Code, marimo). It owns no state (DESIGN.md, principle 6): it holds a
:class:`kernel_lib.recovery.watchdog.timeline.WatchTimeline` (the kernel folded the log into steps
and ran every detector once), and moving the slider sets ``step``; the Python side publishes
``view = timeline.at(step)``, the kernel's answer at that step:

* the step itself: the action (tool, arguments, h_tool), the observation and whether it was an
  error, the environment's state hash after it and the verifier metrics;
* ``state_window``: the last K states the state-hash detector holds when this step's state
  arrives, which of them it matches and the period k;
* ``metrics``: the verifier metrics measured up to this step (the front end draws them over the
  whole trajectory's width);
* ``actions``: h_tool of the recent steps, with the failing ones and the repeats of this call
  marked;
* ``detections``: where every detector fires (one lane per detector: the watchdog, OpenHands as
  shipped and comparing the call alone, Gemini CLI), which have fired by this step and which
  fire at it.

``readout`` holds the same facts as sentences. A step outside ``0..max_step``, or a value that is
not a whole number (set from code or from the page), shows the widget's own message in ``error``
and keeps the view at the last good step; it never raises. ``max_step`` (the trajectory's step
count) cannot be set to another value.
"""

from __future__ import annotations

from numbers import Integral
from typing import Any, Sequence

import traitlets

from kernel_lib.core.events import Event
from kernel_lib.recovery.watchdog.detectors import WatchdogConfig
from kernel_lib.recovery.watchdog.timeline import (
    DETECTOR_LABELS, DETECTORS, WatchTimeline, timeline_of_steps, watch_timeline,
)
from kernel_lib.recovery.watchdog.model import WatchStep
from widgets._base import KernelWidget, clip

__all__ = ["WatchdogView", "readout_lines"]


def readout_lines(view: dict[str, Any]) -> list[str]:
    """The view at one step (``WatchTimeline.at``) as sentences, for the widget and for print."""
    n, i = view["n_steps"], view["step"]
    if not i:
        return [f"before the first of {n} steps: nothing seen yet"]
    cur = view["current"]
    obs = "an error" if cur["observation_error"] else "no error"
    effect = {True: "may change the environment", False: "reads only", None: "effect unknown"}[cur["mutative"]]
    lines = [f"step {i} of {n} (log #{cur['position']}): {cur['tool']} {cur['arguments']} — h_tool "
             f"{cur['signature']}, {effect}; the observation is {obs}"]
    w = view["state_window"]
    if w["current_hash"] is None:
        lines.append("state: the log reveals no state at this step")
    elif not w["counted"]:
        lines.append(f"state {w['current_hash']} ({w['state_source']}): not compared (a read, or an action of "
                     "unknown effect that changed nothing visible)")
    elif w["period"]:
        lines.append(f"state {w['current_hash']} ({w['state_source']}) equals the state {w['period']} mutative "
                     f"step(s) back: a cycle of period k = {w['period']}")
    else:
        lines.append(f"state {w['current_hash']} ({w['state_source']}) is not among the last "
                     f"{len(w['entries'])} of K = {w['max_period']}")
    here = [d for d in view["detections"] if d["here"]]
    for d in here:
        tier = f", tier {d['tier']}" if d["tier"] is not None else ""
        lines.append(f"fires here: {DETECTOR_LABELS.get(d['detector'], d['detector'])} — {d['kind']}{tier} at "
                     f"log #{d['position']}: {d['summary']}")
    fired = ", ".join(f"{DETECTOR_LABELS.get(k, k)} {v}" for k, v in view["fired"].items())
    lines.append(f"fired so far: {fired}")
    return lines


class WatchdogView(KernelWidget, static="watchdog_view"):
    """Scrub a trajectory and see the watchdog's window, metrics, action hashes and detections.

    Args:
        source: the log's events in sequence order (this project's, e.g.
            ``kernel_lib.log.load_events(path)``, or an importer's ``import_file(...).events``), a
            list of :class:`~kernel_lib.recovery.watchdog.model.WatchStep`, or a
            :class:`~kernel_lib.recovery.watchdog.timeline.WatchTimeline` already built.
        name: a label for the log.
        config: the watchdog's :class:`~kernel_lib.recovery.watchdog.detectors.WatchdogConfig`.
        step: where to start (default: the step of the first detection of any detector, else the
            last step).

    Raises:
        TypeError: ``source`` is none of those.
        ValueError: the log holds no action step (nothing to scrub).
    """

    # Any, so that a wrong type set from code reaches _check_step and becomes a message in `error`
    # instead of a traitlets TraitError; the trait itself only ever holds a valid step
    step = traitlets.Any(0).tag(sync=True)
    step.allow_none = False
    max_step = traitlets.Int(0).tag(sync=True)
    name = traitlets.Unicode("").tag(sync=True)
    view = traitlets.Dict().tag(sync=True)
    readout = traitlets.List().tag(sync=True)
    #: The lanes, in order: ``[{"detector", "label"}]``.
    detectors = traitlets.List().tag(sync=True)

    def __init__(self, source: Any, *, name: str = "", config: WatchdogConfig | None = None,
                 step: int | None = None, **kw: Any):
        self.timeline = self._timeline(source, name, config)
        if self.timeline.n_steps == 0:
            raise ValueError("the log holds no action step (no tool call, message or question): nothing to scrub")
        self._good = 0
        self._show(0)
        super().__init__(max_step=self.timeline.n_steps, name=self.timeline.name,
                         detectors=[{"detector": d, "label": DETECTOR_LABELS[d]} for d in DETECTORS], **kw)
        if step is None:
            fires = self.timeline.fires()
            step = fires[0]["step"] if fires else self.timeline.n_steps
        self.step = step

    @staticmethod
    def _timeline(source: Any, name: str, config: WatchdogConfig | None) -> WatchTimeline:
        if isinstance(source, WatchTimeline):
            return source
        if isinstance(source, (str, bytes)) or not isinstance(source, Sequence):
            raise TypeError(f"WatchdogView scrubs a log's events, a list of WatchStep or a WatchTimeline, got "
                            f"{type(source).__name__}")
        items = list(source)
        if items and all(isinstance(s, WatchStep) for s in items):
            return timeline_of_steps(items, config, name=name)
        bad = next((e for e in items if not isinstance(e, Event)), None)
        if bad is not None:
            raise TypeError(f"WatchdogView needs kernel_lib Event objects (kernel_lib.log.load_events, or an "
                            f"importer's events) or WatchStep objects, got {type(bad).__name__}")
        return watch_timeline(items, config, name=name)

    @traitlets.validate("step")
    def _check_step(self, proposal: dict[str, Any]) -> int:
        """Every assignment of ``step`` comes here: a valid step is shown and clears ``error``; a
        step outside the trajectory or a value that is not a whole number keeps the view where it
        was and says why in ``error``."""
        value = proposal["value"]
        n = self.timeline.n_steps
        if isinstance(value, bool) or not isinstance(value, Integral):
            self.error = (f"step {clip(repr(value), 40)} is not a step number ({type(value).__name__}): set a whole "
                          f"number from 0 to {n} (still showing step {self._good})")
            return self._good
        value = int(value)
        if not 0 <= value <= n:
            shown = value if abs(value) < 10**30 else ("a huge negative number" if value < 0 else "a huge number")
            self.error = f"step {shown} is outside the trajectory: choose 0 to {n} (still showing step {self._good})"
            return self._good
        self._show(value)
        self.error = ""
        return value

    @traitlets.validate("max_step")
    def _check_max_step(self, proposal: dict[str, Any]) -> int:
        """``max_step`` is the trajectory's step count (the slider's end), not a setting: another
        value set from code is refused in ``error`` and the count stays."""
        n = self.timeline.n_steps
        if proposal["value"] != n:
            self.error = (f"max_step is the trajectory's {n} steps and cannot be set to "
                          f"{clip(repr(proposal['value']), 40)}")
        return n

    def _show(self, step: int) -> None:
        view = self.timeline.at(step)
        self.view = view
        self.readout = readout_lines(view)
        self._good = step


#: What the front end receives: static/_shared.js + static/watchdog_view.js, and static/watchdog_view.css.
_ESM, _CSS = WatchdogView._esm, WatchdogView._css
