"""``recovery.watchdog``: semantic watchdogs (Failure Recovery, "Semantic Watchdog Timers":
figure 3, table 6, the cycle-detector listing, Napkin Math 0.3, table 7).

A worker that answers every heartbeat may still be going round in circles. The watchdog judges
progress from what the environment and the log show, never from liveness:

* ``model`` — the shared vocabulary: :class:`WatchStep` (one step as the detectors see it: the
  action, the observation after it, the environment's state hash, verifier metrics, the model's
  text) and :class:`Detection` (where a detector fired, its kind, its evidence, the tier);
* ``steps`` — steps folded from a log (ours or an imported one), pure;
* ``detectors`` — the table-6 detectors over a step sequence, pure;
* ``baselines`` — the loop rules other runtimes ship (OpenHands' stuck detector, Gemini CLI's
  loop detection), for comparison in the same shape;
* ``compare`` — the watchdog beside the baselines over many logs: loops caught and missed,
  detection delay, false positives on clean runs;
* ``workspace`` — the environment's canonical state hash (sorted file tree, timestamps and
  modes stripped, ignore globs), incremental: a file whose stat is unchanged is not re-read;
* ``escalation`` — the table-7 ladder as a pure decision from the log's watchdog records;
* ``runner`` — the thin runner that applies a tier: the synthetic interrupt observation, the
  backtrack to a checkpoint with an action mask, the terminal abort (compensate before the
  pivot, freeze after it).
"""

from kernel_lib.recovery.watchdog.model import DETECTION_KINDS, Detection, WatchStep

__all__ = ["DETECTION_KINDS", "Detection", "WatchStep"]
