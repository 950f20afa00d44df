"""``recovery.watchdog``: semantic watchdogs (Failure Recovery, "Semantic Watchdog Timers":
figure 3, table 6, the cycle-detector listing, Napkin Math 0.3, table 7).

A worker that answers every heartbeat may still be going round in circles. The watchdog judges
progress from what the environment and the log show, never from liveness:

* ``model`` — the shared vocabulary: :class:`WatchStep` (one step as the detectors see it: the
  action, the observation after it, the environment's state hash, verifier metrics, the model's
  text) and :class:`Detection` (where a detector fired, its kind, its evidence, the tier);
* ``steps`` — steps folded from a log (ours or an imported one), pure, in one pass or as the
  log grows;
* ``detectors`` — the table-6 detectors over a step sequence, pure;
* ``baselines`` — the loop rules other runtimes ship (OpenHands' stuck detector, Gemini CLI's
  loop detection), for comparison in the same shape;
* ``compare`` — the watchdog beside the baselines over many logs: loops caught and missed,
  detection delay, false positives on clean runs;
* ``timeline`` — one log scrubbed step by step for a view: figure 3's window W, the metric
  series, the action hashes and every detector's detections at each step, pure;
* ``workspace`` — the environment's canonical state hash (sorted file tree, timestamps and
  modes stripped, ignore globs), incremental: a file whose stat is unchanged is not re-read;
* ``escalation`` — the table-7 ladder as a pure decision from the log's watchdog records, and the
  window of steps the detectors watch after a backtrack;
* ``runner`` — the thin runner that applies a tier: the synthetic interrupt observation, the
  backtrack to a checkpoint with an action mask, the terminal abort (compensate before the
  pivot, freeze after it).

The live agent these parts drive is :mod:`kernel_lib.live.looping_agent`; the command over a
recorded log is ``python -m kernel_lib watchdog`` (:mod:`kernel_lib.cli.watchdog`); the state
hash's cost per step is ``python -m kernel_lib bench watchdog`` (:mod:`kernel_lib.bench.watchdog`).

Every public name of the modules is exported here and loaded on first use (PEP 562): importing
the package, or one light module of it, does not load the event models, the checkpoint layer or
the importers' dependencies.
"""

from kernel_lib._support.lazy import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "kernel_lib.recovery.watchdog.model": ("DETECTION_KINDS", "DetectionKind", "Detection", "WatchStep", "StepKind",
                                           "STEP_KINDS", "check_steps"),
    "kernel_lib.recovery.watchdog.steps": ("LOG_STATE_MISSES", "log_format", "is_mutative", "metrics_from_text",
                                           "watch_steps", "StepFold", "step_signature"),
    "kernel_lib.recovery.watchdog.detectors": (
        "WatchdogConfig", "EmbeddingStatus", "Embedder", "METRIC_DIRECTIONS", "assign_tiers", "detect_state_cycles",
        "detect_metric_stagnation", "detect_metric_oscillation", "detect_action_repetition",
        "detect_repeated_questions", "detect_entropy_collapse", "detect_embedding_drift", "embedding_status",
        "lexical_entropy", "load_embedder", "question_sentences", "run_watchdog"),
    "kernel_lib.recovery.watchdog.baselines": ("BASELINES", "OPENHANDS_RULES", "GEMINI_RULES", "openhands_detections",
                                               "gemini_detections", "run_baseline"),
    "kernel_lib.recovery.watchdog.compare": ("CLEAN_RULE", "DETECTORS", "LogComparison", "Comparison",
                                             "compare_baselines", "compare_log", "is_clean_run", "loops_of"),
    "kernel_lib.recovery.watchdog.workspace": ("DEFAULT_IGNORE_GLOBS", "ChangeSource", "HashMode", "StateHash",
                                               "WorkspaceHasher", "inotify_available"),
    "kernel_lib.recovery.watchdog.escalation": (
        "LadderPolicy", "Intervention", "TierDecision", "interventions_of", "unfinished", "decide_tier",
        "mutative_steps", "action_at", "checkpoint_before", "onset_of", "step_position_of", "watch_window",
        "INTERRUPT_INPUT"),
    "kernel_lib.recovery.watchdog.runner": ("WatchdogRunner", "WorkspaceRestorer", "SemanticDeadlockError",
                                            "interrupt_text", "ERR_SEMANTIC_DEADLOCK"),
    # its DETECTORS is compare's (the one exported above)
    "kernel_lib.recovery.watchdog.timeline": ("DETECTOR_LABELS", "WatchTimeline", "watch_timeline",
                                              "timeline_of_steps", "detection_summary"),
})
