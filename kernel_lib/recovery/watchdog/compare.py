"""The watchdog beside the baselines on real logs: what each catches, how late, and how often it
cries wolf (issue 18: "show side by side where environment-state hashing catches what they miss
and what it misses; measure the false-positive rate on clean runs and the detection delay").

:func:`compare_baselines` runs the watchdog (:func:`~kernel_lib.recovery.watchdog.detectors.run_watchdog`)
and both baselines (:mod:`~kernel_lib.recovery.watchdog.baselines`; OpenHands twice: as shipped,
comparing each call with its thought, and as ``openhands_calls``, comparing the call alone) over
each log and lines their detections up:

* **Loops.** Every detection names the positions of the steps that make up what it saw repeat
  (``evidence["occurrences"]``). Detections whose occurrence sets overlap, from any detector, are
  the same loop (transitively). A loop's *first repetition* is the earliest
  ``first_repeat_position`` among its detections: the first step at which something had already
  happened once before.
* **Detection delay** of a detector on a loop: the number of steps (turns of the trajectory, as
  :func:`~kernel_lib.recovery.watchdog.steps.watch_steps` counts them) from the loop's first
  repetition to that detector's first alarm on it. 0 means it fired at the first repeat; a
  detector that never fired on the loop *missed* it.
* **Clean runs** (:data:`CLEAN_RULE`): tau-bench runs whose recorded reward is 1 and whose
  observations hold no error (no failed tool result, no error text). A reader would call them
  clean: the task was solved and nothing went wrong on the way. The false-positive rate of a
  detector is the share of clean runs on which it fired at all; its detections there are listed.
  Other logs are not judged (their outcome is not recorded as a score, or errors occurred).

Pure over the events given; the caller reads the files (the importers, the CLI, a notebook).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import mean, median
from typing import Any

from kernel_lib.recovery.watchdog.baselines import gemini_detections, openhands_detections
from kernel_lib.recovery.watchdog.detectors import WatchdogConfig, run_watchdog
from kernel_lib.recovery.watchdog.model import Detection, WatchStep
from kernel_lib.recovery.watchdog.steps import log_format, watch_steps

__all__ = ["CLEAN_RULE", "DETECTORS", "LogComparison", "Comparison", "compare_baselines", "compare_log",
           "is_clean_run", "loops_of"]

#: How a run is judged clean for the false-positive rate (module docstring).
CLEAN_RULE = ("a tau-bench run whose recorded reward is 1 and none of whose observations is an error "
              "(no failed tool result, no error text)")

#: The detectors compared, in report order. ``openhands_calls`` is OpenHands' rules with actions
#: compared by their call alone, not by call and thought (the generous reading of the baseline).
DETECTORS = ("watchdog", "openhands", "openhands_calls", "gemini")


def _notes(events: Sequence[Any]) -> dict[str, Any]:
    for e in events[:4]:
        if e.event_type == "RuntimeInput" and e.payload.name == "import:source":
            v = e.payload.value
            notes = v.get("notes") if isinstance(v, Mapping) else None
            return dict(notes) if isinstance(notes, Mapping) else {}
    return {}


def is_clean_run(events: Sequence[Any], steps: Sequence[WatchStep]) -> tuple[bool | None, str]:
    """(clean, why) under :data:`CLEAN_RULE`: True or False for a tau-bench run, None (not
    judged) for any other log."""
    if log_format(events) != "tau-bench":
        return None, "not judged: only tau-bench runs record a reward"
    reward = _notes(events).get("reward")
    if not isinstance(reward, (int, float)) or isinstance(reward, bool):
        return None, "not judged: no reward recorded"
    errors = [s.position for s in steps if s.observation_error]
    if reward != 1:
        return False, f"reward {reward:g}"
    if errors:
        return False, f"reward 1 but error observations at {errors}"
    return True, "reward 1, no error observation"


def _step_index(steps: Sequence[WatchStep]):
    places: list[tuple[int, int]] = []
    for i, s in enumerate(steps):
        places.append((s.position, i))
        if s.observation_position is not None:
            places.append((s.observation_position, i))
    places.sort()

    def at(position: int) -> int:
        best = 0
        for p, i in places:
            if p > position:
                break
            best = i
        return best
    return at


def loops_of(detections: Mapping[str, Sequence[Detection]], steps: Sequence[WatchStep]) -> list[dict[str, Any]]:
    """The loops of one log (module docstring): detections grouped by overlapping occurrences.

    ``detections``: detector name -> its detections. Returns, in order of first repetition, one
    object per loop: ``first_repeat_position``, ``positions`` (the union of the occurrences),
    ``caught_by`` (detector -> ``{"position", "kind", "delay_steps"}`` of its first alarm on the
    loop, and ``kinds``: every kind it reported on the loop) and ``missed_by`` (the detectors of
    ``detections`` that never fired on it)."""
    items = [(name, d, set(d.evidence.get("occurrences") or [d.position])) for name, ds in detections.items()
             for d in ds]
    parent = list(range(len(items)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    for a in range(len(items)):
        for b in range(a + 1, len(items)):
            if items[a][2] & items[b][2]:
                parent[find(a)] = find(b)
    groups: dict[int, list[int]] = {}
    for i in range(len(items)):
        groups.setdefault(find(i), []).append(i)
    at = _step_index(steps)
    loops = []
    for members in groups.values():
        first = min(items[i][1].evidence.get("first_repeat_position", items[i][1].position) for i in members)
        positions = sorted(set().union(*(items[i][2] for i in members)))
        caught: dict[str, dict[str, Any]] = {}
        for i in sorted(members, key=lambda i: items[i][1].position):
            name, d, _ = items[i]
            if name not in caught:
                caught[name] = {"position": d.position, "kind": d.kind,
                                "delay_steps": max(0, at(d.position) - at(first)), "kinds": []}
            if d.kind not in caught[name]["kinds"]:
                caught[name]["kinds"].append(d.kind)
        loops.append({"first_repeat_position": first, "positions": positions, "caught_by": caught,
                      "missed_by": [n for n in detections if n not in caught]})
    loops.sort(key=lambda lp: lp["first_repeat_position"])
    return loops


@dataclass(frozen=True)
class LogComparison:
    """One log: its ``name``, source ``format``, number of ``steps``, ``clean`` (True/False/None,
    :func:`is_clean_run`) with ``clean_reason``, each detector's ``detections`` and the ``loops``."""
    name: str
    format: str
    steps: int
    clean: bool | None
    clean_reason: str
    detections: dict[str, list[Detection]]
    loops: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "format": self.format, "steps": self.steps, "clean": self.clean,
                "clean_reason": self.clean_reason,
                "detections": {k: [d.to_json() for d in v] for k, v in self.detections.items()},
                "loops": self.loops}


@dataclass(frozen=True)
class Comparison:
    """Every log's :class:`LogComparison` and the summary per detector (:meth:`summary`)."""
    logs: list[LogComparison]
    clean_rule: str = CLEAN_RULE
    notes: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """Per detector: ``logs_with_detections``, ``detections``, ``loops_caught`` of
        ``loops_total``, ``delay_steps`` (mean, median, max over the loops it caught),
        ``false_positive_rate`` (clean runs with any detection / clean runs) and
        ``clean_runs_flagged``; plus ``only_watchdog`` and ``only_baselines``: the loops caught by
        the watchdog and by no baseline, and the other way round."""
        clean = [lg for lg in self.logs if lg.clean]
        loops = [(lg.name, lp) for lg in self.logs for lp in lg.loops]
        out: dict[str, Any] = {"logs": len(self.logs), "clean_runs": len(clean), "loops_total": len(loops),
                               "clean_rule": self.clean_rule, "detectors": {}}
        for name in DETECTORS:
            delays = [lp["caught_by"][name]["delay_steps"] for _, lp in loops if name in lp["caught_by"]]
            flagged = [lg.name for lg in clean if lg.detections.get(name)]
            out["detectors"][name] = {
                "logs_with_detections": sum(1 for lg in self.logs if lg.detections.get(name)),
                "detections": sum(len(lg.detections.get(name, [])) for lg in self.logs),
                "loops_caught": len(delays),
                "delay_steps": ({"mean": round(mean(delays), 2), "median": median(delays), "max": max(delays)}
                                if delays else None),
                "false_positive_rate": round(len(flagged) / len(clean), 4) if clean else None,
                "clean_runs_flagged": flagged,
            }

        def brief(log: str, lp: dict[str, Any]) -> dict[str, Any]:
            return {"log": log, "first_repeat_position": lp["first_repeat_position"],
                    "kinds": sorted({k for c in lp["caught_by"].values() for k in c["kinds"]})}
        baselines = [n for n in DETECTORS if n != "watchdog"]
        out["only_watchdog"] = [brief(n, lp) for n, lp in loops
                                if "watchdog" in lp["caught_by"] and not any(b in lp["caught_by"] for b in baselines)]
        out["only_baselines"] = [brief(n, lp) for n, lp in loops if "watchdog" not in lp["caught_by"]]
        out["both"] = [brief(n, lp) for n, lp in loops
                       if "watchdog" in lp["caught_by"] and any(b in lp["caught_by"] for b in baselines)]
        return out

    def to_json(self) -> dict[str, Any]:
        return {"summary": self.summary(), "logs": [lg.to_json() for lg in self.logs], "notes": self.notes}


def compare_log(name: str, events: Sequence[Any], config: WatchdogConfig | None = None) -> LogComparison:
    """One log's comparison (see :func:`compare_baselines`)."""
    steps = watch_steps(events)
    clean, why = is_clean_run(events, steps)
    dets = {"watchdog": run_watchdog(steps, config), "openhands": openhands_detections(steps),
            "openhands_calls": openhands_detections(steps, compare_thought=False), "gemini": gemini_detections(steps)}
    return LogComparison(name, log_format(events), len(steps), clean, why, dets, loops_of(dets, steps))


def compare_baselines(logs: Mapping[str, Sequence[Any]] | Iterable[tuple[str, Sequence[Any]]],
                      config: WatchdogConfig | None = None) -> Comparison:
    """The watchdog and both baselines over several logs (module docstring).

    ``logs``: name -> events (or (name, events) pairs), each a log's
    :class:`~kernel_lib.core.events.Event` list in sequence order (ours or an importer's).
    ``config``: the watchdog's configuration (default :class:`WatchdogConfig`).
    Returns a :class:`Comparison` (``.summary()``, ``.to_json()``)."""
    pairs = logs.items() if isinstance(logs, Mapping) else logs
    return Comparison([compare_log(name, events, config) for name, events in pairs])
