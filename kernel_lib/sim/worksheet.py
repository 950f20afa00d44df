"""Recorded example trajectories built by running the real dispatch gate (§11.1, §11.3).

:func:`worksheet_events` records the crash worksheet's happy path: the repair task starts, a
model call proposes running the tests of candidate patch r18, admission reserves budget, the
durable ``ToolIntent`` for ``operation_id=test_r18`` / ``attempt_id=attempt1`` is acknowledged,
the test is dispatched to an executor that accepts it as ``job_tests_18``, and the completed
result is recorded. The model and executor here are in-process stand-ins with fixed replies (the
live worker with a real executor process is :mod:`kernel_lib.live`, a later issue); everything
else is the production gate writing to a real store.
"""

from __future__ import annotations

import hashlib

from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate, ModelCall, ModelReply, ToolProposal, ToolReply
from kernel_lib.core.events import Event, TaskStarted, ToolIntent
from kernel_lib.log import FailureDomain, LogStore, MemoryStore, TrajectoryLog

WORKSHEET_TRAJECTORY = "traj_repair_r18"
#: Content digest naming the immutable workspace snapshot ws_r18 in this stand-in run.
WS_R18_REF = "ws_r18@sha256:" + hashlib.sha256(b"ws_r18 stand-in snapshot").hexdigest()[:16]


def worksheet_policy() -> AdmissionPolicy:
    return AdmissionPolicy(grants={"grant_repair": {"run_tests", "stand-in-model"}})


def worksheet_task() -> TaskStarted:
    return TaskStarted(task_id="repair_r18", requester="alice", objective="make the failing test pass",
                       grant_ids=["grant_repair"], budget_ceiling_usd=5.0, finalization_reserve_usd=0.5,
                       workspace_ref=WS_R18_REF, config={"model": "stand-in-model", "harness": "kernel_lib"})


def worksheet_events(store: LogStore | None = None) -> list[Event]:
    """Record the worksheet trajectory through the dispatch gate and return its events.

    ``store`` defaults to a fresh :class:`MemoryStore` (with must_survive NONE, since memory
    survives nothing); pass a durable store to record it there.
    """
    store = store or MemoryStore()
    domain = FailureDomain.NONE if isinstance(store, MemoryStore) else FailureDomain.HOST_CRASH
    log = TrajectoryLog(store, WORKSHEET_TRAJECTORY, must_survive=domain)
    gate = DispatchGate(log, worksheet_policy())
    gate.start(worksheet_task())
    gate.run_model(
        ModelCall(invocation_id="model_call_1", model="stand-in-model", grant_id="grant_repair",
                  delivered_input="Repair the failing test. Workspace: ws_r18 (candidate patch r18).",
                  cost_bound_usd=0.20),
        lambda ctx: ModelReply(status="complete", reply="Run the test suite against ws_r18.",
                               proposal={"tool": "run_tests", "arguments": {"snapshot": "ws_r18"}},
                               input_tokens=412, output_tokens=38, charged_usd=0.012))

    def executor(intent: ToolIntent) -> ToolReply:
        return ToolReply(status="accepted", job_handle="job_tests_18")

    proposal = ToolProposal(operation_id="test_r18", attempt_id="attempt1", tool="run_tests",
                            arguments={"snapshot": "ws_r18", "check": "pytest -q"}, grant_id="grant_repair",
                            cost_bound_usd=0.50, repeat_contract="idempotency_key", input_ref=WS_R18_REF,
                            revision="r18")
    gate.run_tool(proposal, executor)
    gate.record_evidence("test_r18", "attempt1",
                         ToolReply(status="completed", job_handle="job_tests_18", observation_complete=True,
                                   outcome={"passed": 3, "failed": 0}, charged_usd=0.31,
                                   evidence={"signed_by": "executor", "signature": "stand-in"}))
    return list(log.events())
