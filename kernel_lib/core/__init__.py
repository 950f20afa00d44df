"""``core``: the pure, deterministic heart of the kernel (Durable Execution §11.2–11.3).

No I/O, no clock, no threads. What lives here:

* :mod:`.events` — the event envelope, the event families of table 1, canonical encoding
  (RFC 8785) and digests (§11.2.2);
* :mod:`.record` — the trajectory record and the pure fold (§11.2.1, §11.5.3), with its
  budget in integer micro-dollars (:mod:`.money`);
* :mod:`.proposals` — what the dispatch gate decides about: proposals, replies, the admission
  policy, decision and reservation ids (§11.3.2);
* :mod:`.decisions` — the gate's decisions as values: admission, the dispatch-time recheck, the
  evidence payloads (eq. 1);
* :mod:`.crash_positions` — what recovery may conclude after a crash at each position of eq. 1
  (table 3);
* :mod:`.continuation` — continuation admission after a resume as a value: every check of one
  proposed step against the record and the conditions of now (§11.5.4).

May import: :mod:`kernel_lib.errors`, :mod:`kernel_lib.limits`, :mod:`kernel_lib._support`.
"""

from kernel_lib.core.events import (
    REDUCER_VERSION, JSON_SAFE_MAX, JSON_MAX_DEPTH, find_secrets, redact_secrets, check_json, Payload,
    register, registered_types, payload_class, TaskStarted, ContextBuilt, ModelReplied, Authorized,
    BudgetReserved, BudgetSettled, ToolIntent, ToolResult, ControlChanged, PlanChanged, ApprovalRequested,
    ApprovalResolved, Compacted, RuntimeInput, Checkpoint, CheckpointV2, WorkspaceChanged,
    CompensationIssued, QuarantineChanged, WatchdogIntervened, SagaStepChanged, SagaChanged, TrajectoryFrozen,
    RecoveryDecided, RepairOutcome, PivotVerified, PivotCrossed, OutboxChanged, WatchdogIntervenedV1, ActionMasked,
    TrajectoryQuarantined,
    SAGA_STEP_STATES, FROZEN, Provenance, Event, encode, digest, decode, from_dict,
    decode_stored
)
from kernel_lib.core.record import (
    SUPPORTED_REDUCER_VERSIONS, SETTLING_STATUSES, Attempt, Operation, Reservation, Budget, Approval,
    TrajectoryRecord, initial_record, fold, apply, fold_into, fold_step, fork, TERMINAL_STATES
)
from kernel_lib.core.money import MICRO_PER_USD, usd_to_micro, micro_to_usd
from kernel_lib.core.proposals import (
    REPEAT_SAFE_CONTRACTS, ToolProposal, ToolReply, ModelCall, ModelReply, AdmissionPolicy, decision_id,
    reservation_id
)
from kernel_lib.core.decisions import (
    Admit, Denial, Withhold, RECHECK_CLOCK_INPUT, decide_admission, recheck_reads_clock, decide_recheck
)
from kernel_lib.core.crash_positions import conclude, CrashPosition, crash_positions
from kernel_lib.core.continuation import (
    CHECKS, VERSION_INPUT_PREFIX, ProposedStep, Deployment, AdmissionCheck, VersionResolution,
    ContinuationDecision, recorded_versions, resolve_version, unsent_reservation, evaluate,
    discarded_partial_streams
)

__all__ = [
    "REDUCER_VERSION", "JSON_SAFE_MAX", "JSON_MAX_DEPTH", "find_secrets", "redact_secrets", "check_json",
    "Payload", "register", "registered_types", "payload_class", "TaskStarted", "ContextBuilt",
    "ModelReplied", "Authorized", "BudgetReserved", "BudgetSettled", "ToolIntent", "ToolResult",
    "ControlChanged", "PlanChanged", "ApprovalRequested", "ApprovalResolved", "Compacted", "RuntimeInput",
    "Checkpoint", "CheckpointV2", "WorkspaceChanged", "CompensationIssued", "QuarantineChanged",
    "WatchdogIntervened",
    "SagaStepChanged", "SagaChanged", "TrajectoryFrozen", "RecoveryDecided", "RepairOutcome",
    "PivotVerified", "PivotCrossed", "OutboxChanged", "WatchdogIntervenedV1", "ActionMasked", "TrajectoryQuarantined",
    "SAGA_STEP_STATES",
    "FROZEN",
    "Provenance", "Event", "encode", "digest", "decode", "from_dict", "decode_stored",
    "SUPPORTED_REDUCER_VERSIONS", "SETTLING_STATUSES", "Attempt", "Operation", "Reservation", "Budget",
    "Approval", "TrajectoryRecord", "initial_record", "fold", "apply", "fold_into", "fold_step", "fork",
    "TERMINAL_STATES", "MICRO_PER_USD", "usd_to_micro", "micro_to_usd", "REPEAT_SAFE_CONTRACTS", "ToolProposal",
    "ToolReply", "ModelCall", "ModelReply", "AdmissionPolicy", "decision_id", "reservation_id", "Admit", "Denial",
    "Withhold", "RECHECK_CLOCK_INPUT", "decide_admission", "recheck_reads_clock", "decide_recheck", "conclude",
    "CrashPosition", "crash_positions", "CHECKS", "VERSION_INPUT_PREFIX", "ProposedStep", "Deployment",
    "AdmissionCheck", "VersionResolution", "ContinuationDecision", "recorded_versions", "resolve_version",
    "unsent_reservation", "evaluate", "discarded_partial_streams"
]
