"""``history``: looking back at a recorded trajectory (§11.6–11.7).

* :mod:`.replay` — time travel, harness regression replay (the matching-request rule, sealed live
  paths) and counterfactual branches (§11.6);
* :mod:`.diverge` — locating the first divergence of two executions (§11.7, table 6);
* :mod:`.audit` — what the write-time scanner redacted and which model calls saw it (§11.9).

May import: ``gate``, ``ownership``, ``checkpoint``, ``log``, ``core`` and the leaves.
"""

from kernel_lib.errors import (   # re-exported
    LiveCallDuringReplayError, ReplayInputMismatchError, ReplayMismatchError
)
from kernel_lib.history.replay import (
    NORMALIZATIONS, ORDERS, rerun_match_probability,
    ExternalInput, ReplayReport, ReplayAdapter, HarnessRuntime, RecordingRuntime, ReplayRuntime, sealed,
    EXAMPLE_GRANT, EXAMPLE_TRAJECTORY, example_policy,
    worksheet_harness, record_example, replay_harness, TimeTravelView, time_travel, BRANCH_ORIGIN,
    Intervention, BranchTransports, Branch, fork_branch
)
from kernel_lib.history.diverge import (
    ASSEMBLED_INPUT, MODEL_RESPONSE, HARNESS_DECISION, TOOL_OBSERVATION, CATEGORIES, TIMESTAMP_KEY,
    DURATION_KEY, is_duration_key, IMPORT_HEADER, boundary_fields, Equivalence, Boundary, extract_boundaries, Step,
    DivergenceReport,
    sequence_fault, locate_divergence
)

__all__ = [
    "NORMALIZATIONS", "ORDERS", "rerun_match_probability", "ReplayMismatchError",
    "LiveCallDuringReplayError", "ReplayInputMismatchError", "HarnessRuntime", "RecordingRuntime",
    "ReplayRuntime", "ExternalInput", "ReplayReport", "ReplayAdapter", "sealed",
    "EXAMPLE_GRANT", "EXAMPLE_TRAJECTORY", "example_policy", "worksheet_harness", "record_example",
    "replay_harness", "TimeTravelView", "time_travel", "BRANCH_ORIGIN", "Intervention", "BranchTransports",
    "Branch", "fork_branch", "ASSEMBLED_INPUT", "MODEL_RESPONSE", "HARNESS_DECISION", "TOOL_OBSERVATION",
    "CATEGORIES", "TIMESTAMP_KEY", "DURATION_KEY", "is_duration_key", "IMPORT_HEADER", "boundary_fields",
    "Equivalence", "Boundary",
    "extract_boundaries", "Step", "DivergenceReport", "sequence_fault", "locate_divergence"
]
