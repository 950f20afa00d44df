"""``core``: the pure, deterministic heart of the kernel (Durable Execution §11.2–11.3).

No I/O, no clock, no threads. What lives here:

* :mod:`.events` — the event envelope, the event families of table 1, canonical encoding
  (RFC 8785) and digests (§11.2.2);
* :mod:`.record` — the trajectory record and the pure fold (§11.2.1, §11.5.3).

May import: :mod:`kernel_lib.errors`, :mod:`kernel_lib.limits`, :mod:`kernel_lib._support`.
"""

from kernel_lib.core.events import (
    REDUCER_VERSION, JSON_SAFE_MAX, JSON_MAX_DEPTH, find_secrets, redact_secrets, check_json, Payload,
    register, registered_types, payload_class, TaskStarted, ContextBuilt, ModelReplied, Authorized,
    BudgetReserved, BudgetSettled, ToolIntent, ToolResult, ControlChanged, PlanChanged, ApprovalRequested,
    ApprovalResolved, Compacted, RuntimeInput, Checkpoint, CheckpointV2, WorkspaceChanged,
    CompensationIssued, QuarantineChanged, WatchdogIntervened, Provenance, Event, encode, digest, decode,
    from_dict, decode_stored
)
from kernel_lib.core.record import (
    SUPPORTED_REDUCER_VERSIONS, SETTLING_STATUSES, Attempt, Operation, Reservation, Budget, Approval,
    TrajectoryRecord, initial_record, fold, apply, fold_into, fork, TERMINAL_STATES
)

__all__ = [
    "REDUCER_VERSION", "JSON_SAFE_MAX", "JSON_MAX_DEPTH", "find_secrets", "redact_secrets", "check_json",
    "Payload", "register", "registered_types", "payload_class", "TaskStarted", "ContextBuilt",
    "ModelReplied", "Authorized", "BudgetReserved", "BudgetSettled", "ToolIntent", "ToolResult",
    "ControlChanged", "PlanChanged", "ApprovalRequested", "ApprovalResolved", "Compacted", "RuntimeInput",
    "Checkpoint", "CheckpointV2", "WorkspaceChanged", "CompensationIssued", "QuarantineChanged",
    "WatchdogIntervened", "Provenance", "Event", "encode", "digest", "decode", "from_dict", "decode_stored",
    "SUPPORTED_REDUCER_VERSIONS", "SETTLING_STATUSES", "Attempt", "Operation", "Reservation", "Budget",
    "Approval", "TrajectoryRecord", "initial_record", "fold", "apply", "fold_into", "fork",
    "TERMINAL_STATES"
]
