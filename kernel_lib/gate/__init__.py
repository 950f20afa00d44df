"""``gate``: the dispatch gate and what stands in front of it (§11.3.2–11.3.3, §11.5.3–11.5.4).

* :mod:`.dispatch` — :class:`DispatchGate` applies the decisions of eq. 1 (admission, durable
  intent, dispatch-time recheck, dispatch, evidence) to one trajectory's log;
* :mod:`.admission` — continuation admission after a resume (§11.5.4) in front of the gate: it
  logs what :func:`kernel_lib.core.continuation.evaluate` decides (re-exported here);
* :mod:`.inbox` — the durable, authenticated result inbox (§11.5.3).

May import: ``ownership``-free lower layers: ``checkpoint``, ``log``, ``core`` and the leaves.
"""

from kernel_lib.gate.dispatch import (
    ToolProposal, ToolReply, ModelCall, ModelReply, AdmissionPolicy, REPEAT_SAFE_CONTRACTS, decision_id,
    reservation_id, DispatchGate, conclude, CrashPosition, crash_positions
)
from kernel_lib.gate.admission import (
    CHECKS, ProposedStep, Deployment, AdmissionCheck, VersionResolution, ContinuationDecision,
    VERSION_INPUT_PREFIX, recorded_versions, resolve_version, unsent_reservation, record_version_transition,
    evaluate, ContinuationGate, discarded_partial_streams
)
from kernel_lib.gate.inbox import (
    FINAL_STATUSES, InboxEntry, IngestOutcome, IngestReport, ResultInbox, open_inbox
)

__all__ = [
    "ToolProposal", "ToolReply", "ModelCall", "ModelReply", "AdmissionPolicy", "REPEAT_SAFE_CONTRACTS",
    "decision_id", "reservation_id", "DispatchGate", "conclude", "CrashPosition", "crash_positions",
    "CHECKS", "ProposedStep", "Deployment", "AdmissionCheck", "VersionResolution", "ContinuationDecision",
    "VERSION_INPUT_PREFIX", "recorded_versions", "resolve_version", "unsent_reservation", "record_version_transition",
    "evaluate", "ContinuationGate", "discarded_partial_streams", "FINAL_STATUSES", "InboxEntry", "IngestOutcome",
    "IngestReport", "ResultInbox", "open_inbox"
]
