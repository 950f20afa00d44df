"""One trajectory scrubbed step by step as the watchdog sees it (Failure Recovery, "Semantic
Watchdog Timers": figure 3's window W, table 6's three signals), for a view to draw.

:func:`watch_timeline` folds a log (ours or an importer's) into its steps
(:func:`~kernel_lib.recovery.watchdog.steps.watch_steps`) and runs, once, the watchdog
(:func:`~kernel_lib.recovery.watchdog.detectors.run_watchdog`) and the baselines that
:mod:`~kernel_lib.recovery.watchdog.compare` lines up beside it (:data:`DETECTORS`: OpenHands as
shipped, OpenHands comparing the call alone, Gemini CLI). :meth:`WatchTimeline.at` then answers,
for step ``i`` (1-based; 0 is "before the first step"), what each signal held at that moment:

* ``state_window``: the ring buffer W of figure 3 and the listing as the state-hash detector holds
  it when step ``i``'s state arrives: the last K states (K = ``max_period``) of the mutative steps
  before ``i`` that carry a state hash, oldest first, each with its distance from the current one,
  and the period k of the first match scanning backwards (None: no match). The window follows the
  detector's own rule (:func:`~kernel_lib.recovery.watchdog.detectors.detect_state_cycles`): a
  read-only step never enters it, and an action of unknown effect that changed nothing visible
  is left out (``counted`` is False for it);
* ``metrics``: the verifier metrics of every measured step up to ``i`` (the series the metric
  detectors read), with each metric's direction (+1 larger is better, -1 smaller is better);
* ``actions``: h_tool (xxHash64 of the tool and its canonical arguments, nonces left out) of the
  last ``repetition_window`` steps up to ``i``, whether each one's observation was an error, and
  whether it is the same call as step ``i``'s;
* ``detections``: every detection of every detector with the step it belongs to, whether it has
  fired by step ``i`` (its position is at or before the end of step ``i``) and whether it fires at
  step ``i`` itself.

Pure: no I/O, no clock. Raises :class:`~kernel_lib.errors.WatchTimelineError` for a step outside
``0..n`` or of the wrong type, and :class:`~kernel_lib.errors.WatchdogConfigError` for a bad
configuration.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from numbers import Integral
from typing import Any

from kernel_lib.errors import WatchdogConfigError, WatchTimelineError
from kernel_lib.recovery.watchdog.baselines import gemini_detections, openhands_detections
from kernel_lib.recovery.watchdog.compare import DETECTORS
from kernel_lib.recovery.watchdog.detectors import METRIC_DIRECTIONS, WatchdogConfig, run_watchdog
from kernel_lib.recovery.watchdog.model import Detection, WatchStep, check_steps
from kernel_lib.recovery.watchdog.steps import step_signature, watch_steps

__all__ = ["DETECTORS", "DETECTOR_LABELS", "WatchTimeline", "watch_timeline", "timeline_of_steps",
           "detection_summary"]

#: How a reader names each detector of :data:`DETECTORS`.
DETECTOR_LABELS = {"watchdog": "semantic watchdog", "openhands": "OpenHands (as shipped)",
                   "openhands_calls": "OpenHands (call only)", "gemini": "Gemini CLI"}

#: Characters of an argument, observation or model text kept in a step's view.
TEXT_CHARS = 160


def _clip(text: str | None, n: int = TEXT_CHARS) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= n else flat[: n - 1] + "…"


def _direction(name: str) -> int:
    if name in METRIC_DIRECTIONS:
        return METRIC_DIRECTIONS[name]
    return -1 if name.endswith(("_failed", "_errors", "_findings", "_warnings")) else 1


def detection_summary(d: Detection) -> str:
    """One line of what a detection saw, from its evidence: the period k of a state cycle, the
    earlier failing call a repetition repeats, the question asked again, a baseline's rule."""
    ev = d.evidence
    if d.kind == "state_hash_cycle":
        extra = f", unchanged over {ev['unchanged_steps']} steps" if "unchanged_steps" in ev else ""
        return f"k = {ev.get('period')}: the state of #{ev.get('matched_position')} again{extra}"
    if d.kind == "action_repetition":
        return f"the failing call of #{ev.get('repeat_of')} again ({ev.get('steps_between')} steps between)"
    if d.kind in ("metric_stagnation", "metric_oscillation"):
        return f"no metric better over epoch E = {ev.get('epoch', '?')}" if d.kind == "metric_stagnation" \
            else f"{ev.get('metric', 'a metric')} going back and forth"
    if d.kind == "repeated_question":
        return f"asked {ev.get('times_asked')} times: {_clip(ev.get('question'), 80)}"
    if d.kind == "entropy_collapse":
        return f"entropy {ev.get('entropy')} against a baseline of {ev.get('baseline')}"
    if d.kind == "embedding_drift":
        return f"cosine {ev.get('similarity')} to #{ev.get('matched_position')}"
    rule = ev.get("rule", d.kind)
    reps = f" ({ev['repeats']} in a row)" if "repeats" in ev else ""
    return f"{rule}{reps}"


def _step_view(i: int, s: WatchStep, sig: str) -> dict[str, Any]:
    args = json.dumps(s.arguments, sort_keys=True, ensure_ascii=False, default=str)
    return {"step": i, "position": s.position, "kind": s.kind, "actor": s.actor, "tool": s.tool,
            "arguments": _clip(args), "signature": sig, "mutative": s.mutative,
            "observation": _clip(s.observation), "observation_error": s.observation_error,
            "observation_position": s.observation_position,
            "state_hash": s.state_hash[:16] if s.state_hash else None, "state_source": s.state_source,
            "metrics": dict(s.metrics), "model_text": _clip(s.model_text)}


@dataclass(frozen=True)
class WatchTimeline:
    """A trajectory's steps, every detector's detections, and the per-step views (module docstring).

    ``name``: a label for the log. ``steps``: its :class:`WatchStep` sequence. ``detections``:
    detector name (:data:`DETECTORS`) -> its detections, in position order. ``config``: the
    watchdog's configuration. ``signatures``: h_tool of each step (16 hex digits)."""

    name: str
    steps: tuple[WatchStep, ...]
    detections: dict[str, tuple[Detection, ...]]
    config: WatchdogConfig
    signatures: tuple[str, ...] = field(repr=False)
    _ends: tuple[int, ...] = field(repr=False)          # the last log position of each step

    @property
    def n_steps(self) -> int:
        return len(self.steps)

    def step_of(self, position: int) -> int:
        """The step (1-based) a log ``position`` belongs to: the last step whose action is at or
        before it (0 when it comes before every step). A binary search: the steps' positions
        increase (:func:`~kernel_lib.recovery.watchdog.model.check_steps`)."""
        return bisect_right(self._positions, position)

    @cached_property
    def _positions(self) -> list[int]:
        return [s.position for s in self.steps]

    @cached_property
    def _fires(self) -> tuple[dict[str, Any], ...]:
        out = [{"detector": name, "kind": d.kind, "position": d.position, "step": self.step_of(d.position),
                "tier": d.tier, "summary": detection_summary(d)}
               for name in DETECTORS for d in self.detections.get(name, ())]
        return tuple(sorted(out, key=lambda r: (r["position"], DETECTORS.index(r["detector"]))))

    def fires(self) -> list[dict[str, Any]]:
        """Every detection of every detector, in position order: ``detector``, ``kind``,
        ``position`` (log sequence number), ``step`` (1-based), ``tier`` (the watchdog's; None for a
        baseline) and ``summary`` (:func:`detection_summary`). Built once; each call returns fresh
        dicts."""
        return [dict(f) for f in self._fires]

    def _check(self, step: Any) -> int:
        if isinstance(step, bool) or not isinstance(step, Integral):
            raise WatchTimelineError(f"step {step!r} is not a step number ({type(step).__name__}): choose a whole "
                                     f"number from 0 to {self.n_steps}")
        step = int(step)
        if not 0 <= step <= self.n_steps:
            shown = step if abs(step) < 10**30 else ("a huge negative number" if step < 0 else "a huge number")
            raise WatchTimelineError(f"step {shown} is outside the trajectory: choose 0 to {self.n_steps}")
        return step

    def state_window(self, step: int) -> dict[str, Any]:
        """Figure 3's window W when step ``step``'s state arrives (module docstring): ``entries``
        (oldest first: ``step``, ``position``, ``state_hash``, ``distance``, ``matches``),
        ``current_hash``, ``counted`` (the step's state is one the detector compares), ``period``
        (k of the first backward match, or None) and ``max_period`` K."""
        step = self._check(step)
        K = self.config.max_period
        window: list[tuple[str, int]] = []          # (state hash, step number) as the detector keeps it
        current: tuple[str | None, bool, int | None] = (None, False, None)
        for i, s in enumerate(self.steps[:step], start=1):
            if s.state_hash is None or s.mutative is False:
                if i == step:
                    current = (s.state_hash, False, None)
                continue
            k = next((d for d in range(1, min(K, len(window)) + 1) if window[-d][0] == s.state_hash), None)
            skipped = k == 1 and s.mutative is None
            if i == step:
                current = (s.state_hash, not skipped, None if skipped else k)
                break
            if not skipped:
                window.append((s.state_hash, i))
                del window[:-K]
        h, counted, period = current
        entries = []
        for d, (wh, wi) in enumerate(reversed(window), start=1):
            entries.append({"step": wi, "position": self.steps[wi - 1].position, "state_hash": wh[:16],
                            "distance": d, "matches": bool(counted and wh == h)})
        entries.reverse()
        return {"max_period": K, "entries": entries, "current_hash": h[:16] if h else None, "counted": counted,
                "period": period,
                "state_source": self.steps[step - 1].state_source if step else None}

    def at(self, step: int) -> dict[str, Any]:
        """The view of step ``step`` (0..n; module docstring), plain JSON data: ``step``,
        ``n_steps``, ``position``, ``current`` (the step's action, observation, state and metrics;
        None at 0), ``state_window``, ``metrics``, ``actions``, ``detections`` and ``fired``
        (detector -> how many of its detections fired by this step).

        Raises WatchTimelineError for a step outside 0..n or not a whole number."""
        step = self._check(step)
        cur = self.steps[step - 1] if step else None
        end = self._ends[step - 1] if step else 0
        names = sorted({k for s in self.steps[:step] for k in s.metrics})
        series = [{"step": i, "position": s.position, **s.metrics}
                  for i, s in enumerate(self.steps[:step], start=1) if s.metrics]
        lo = max(1, step - self.config.repetition_window + 1)
        cur_sig = self.signatures[step - 1] if step else None
        actions = [{"step": i, "position": self.steps[i - 1].position, "tool": self.steps[i - 1].tool,
                    "signature": self.signatures[i - 1], "error": self.steps[i - 1].observation_error,
                    "same_as_current": self.signatures[i - 1] == cur_sig and i != step}
                   for i in range(lo, step + 1)]
        fires = self.fires()
        for f in fires:
            f["fired"] = f["position"] <= end if step else False
            f["here"] = step > 0 and f["step"] == step
        fired = {name: sum(1 for f in fires if f["detector"] == name and f["fired"]) for name in DETECTORS}
        return {"name": self.name, "step": step, "n_steps": self.n_steps, "position": cur.position if cur else None,
                "current": _step_view(step, cur, cur_sig) if cur else None,
                "state_window": self.state_window(step),
                "metrics": {"names": names, "directions": {n: _direction(n) for n in names}, "series": series},
                "actions": actions, "detections": fires, "fired": fired}


def timeline_of_steps(steps: Sequence[WatchStep], config: WatchdogConfig | None = None, *,
                      name: str = "") -> WatchTimeline:
    """A :class:`WatchTimeline` over steps already made (a journal, constructed sequences).

    Raises WatchdogConfigError for a ``config`` that is not a WatchdogConfig, TypeError for steps
    that are not :class:`WatchStep` objects, WatchInputError for steps not in log order."""
    cfg = config if config is not None else WatchdogConfig()
    if not isinstance(cfg, WatchdogConfig):
        raise WatchdogConfigError(f"config must be a WatchdogConfig, not {type(cfg).__name__}")
    steps = tuple(steps)
    bad = next((s for s in steps if not isinstance(s, WatchStep)), None)
    if bad is not None:
        raise TypeError(f"steps must be WatchStep objects, got {type(bad).__name__}")
    check_steps(steps)
    dets = {"watchdog": tuple(run_watchdog(steps, cfg)), "openhands": tuple(openhands_detections(steps)),
            "openhands_calls": tuple(openhands_detections(steps, compare_thought=False)),
            "gemini": tuple(gemini_detections(steps))}
    sigs = tuple(step_signature(s, cfg.nonce_arguments) for s in steps)
    ends = []
    for i, s in enumerate(steps):
        nxt = steps[i + 1].position - 1 if i + 1 < len(steps) else None
        last = max(s.position, s.observation_position or s.position)
        ends.append(max(last, nxt) if nxt is not None else 1 << 62)
    return WatchTimeline(name, steps, dets, cfg, sigs, tuple(ends))


def watch_timeline(events: Sequence[Any], config: WatchdogConfig | None = None, *, name: str = "") -> WatchTimeline:
    """The :class:`WatchTimeline` of one log: ``events`` in sequence order (ours, from
    :func:`kernel_lib.log.load_events`, or an importer's ``ImportResult.events``).

    Raises TypeError for something that is not an event sequence, WatchdogConfigError for a bad
    ``config``."""
    return timeline_of_steps(watch_steps(events), config, name=name)
