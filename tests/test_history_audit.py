"""Auditing redactions from the log (kernel_lib.history.audit, §11.9 "the final context window").

Fault model: a tool observation carries a credential-shaped string and a later compaction drops it from
the context window. Invariants: the log names the redacted observation and every model call whose input
carried its redacted text, even though the final window shows none of it; a clean log yields nothing;
a text audit flags the marker and credential-shaped text and nothing else.
"""

from __future__ import annotations

from kernel_lib.core.events import TaskStarted
from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate, ModelCall, ModelReply, ToolProposal, ToolReply
from kernel_lib.history.audit import REDACTION_MARKER, audit_redactions, flagged_lines
from kernel_lib.log import FailureDomain, MemoryStore, TrajectoryLog

FAKE_KEY = "AKIA" + "EXAMPLEFAKE" + "00003"     # credential-shaped, not a real key
TRAJ = "traj_audit"


def _record(leak: bool):
    store = MemoryStore()
    gate = DispatchGate(TrajectoryLog(store, TRAJ, must_survive=FailureDomain.NONE),
                        AdmissionPolicy({"g": {"m", "read_ci_logs"}}))
    gate.start(TaskStarted(task_id="t", requester="alice", objective="fix", grant_ids=["g"], budget_ceiling_usd=5.0,
                           finalization_reserve_usd=0.5))
    context = ["Task: fix."]
    for turn in (1, 2, 3):
        gate.run_model(ModelCall(f"turn_{turn}", "m", "\n".join(context), "g", 0.05),
                       lambda ctx: ModelReply(status="complete", reply="read the logs", charged_usd=0.01))
        text = f"export KEY={FAKE_KEY}" if leak and turn == 1 else "all good"
        gate.run_tool(ToolProposal(f"op_{turn}", "attempt1", "read_ci_logs", {"turn": turn}, "g", 0.1),
                      lambda intent, text=text: ToolReply(status="completed", outcome={"stdout": text},
                                                          observation_complete=True, charged_usd=0.0))
        context.append(gate.record.operations[f"op_{turn}"].outcome["stdout"])
    return list(store.read(TRAJ))


def test_the_log_names_the_redacted_observation_and_who_saw_it():
    events = _record(leak=True)
    findings = audit_redactions(events)
    logged = next(e for e in events if e.sequence_number == findings[0].sequence_number)
    assert REDACTION_MARKER in logged.payload.outcome["stdout"] and FAKE_KEY not in logged.payload.outcome["stdout"]
    assert [(f.operation_id, f.redacted_fields, f.seen_by) for f in findings] == [("op_1", ("stdout",),
                                                                                   ("turn_2", "turn_3"))]
    assert audit_redactions(_record(leak=False)) == []


def test_a_text_audit_flags_markers_and_credentials_only():
    text = f"fine\nexport KEY={REDACTION_MARKER}\nleaked {FAKE_KEY}\nalso fine"
    assert flagged_lines(text) == [f"export KEY={REDACTION_MARKER}", f"leaked {FAKE_KEY}"]
    assert flagged_lines("") == [] and flagged_lines("nothing here") == []
