"""A practitioner's plain functions under the saga (kernel_lib.recovery.agent): declared once,
every call through the dispatch gate, compensated in reverse on failure, settled by the declared
status lookup after a crash. Effects are counted by the fake forge below (the 'service')."""

from __future__ import annotations

import pytest

from kernel_lib.core.events import TaskStarted
from kernel_lib.errors import StepFailedError, ToolContractError, ToolFailedError
from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate
from kernel_lib.log import MemoryStore, TrajectoryLog
from kernel_lib.recovery.agent import AgentTools, Compensator


class Forge:
    """The external system: what exists, and every request it received."""

    def __init__(self):
        self.branches: dict[str, str] = {}
        self.by_key: dict[str, dict] = {}
        self.ops: dict[str, dict] = {}
        self.received = 0
        self.created = 0
        self.deleted = 0
        self.lose_next_answer = False


def build(forge: Forge) -> AgentTools:
    tools = AgentTools()

    @tools.tool(tier="II", repeat_contract="idempotency_key", status_lookup=True,
                compensator=Compensator("delete_branch", {"name": "output.branch"}))
    def create_branch(arguments, *, idempotency_key):
        forge.received += 1
        if idempotency_key in forge.by_key:
            return forge.by_key[idempotency_key]
        forge.created += 1
        forge.branches[arguments["name"]] = "live"
        out = {"branch": arguments["name"]}
        forge.by_key[idempotency_key] = out
        forge.ops[arguments["name"]] = out
        if forge.lose_next_answer:
            forge.lose_next_answer = False
            raise TimeoutError("the answer was lost")
        return out

    @create_branch.lookup
    def _(operation_id):
        done = [v for k, v in forge.by_key.items()]
        return {"status": "completed", "body": done[-1]} if done else {"status": "unknown"}

    @tools.tool(tier="II", repeat_contract="idempotency_key", is_compensator=True)
    def delete_branch(arguments, *, idempotency_key):
        forge.received += 1
        if forge.branches.get(arguments["name"]) == "live":
            forge.deleted += 1
        forge.branches[arguments["name"]] = "deleted"
        return {"deleted": arguments["name"]}

    @tools.tool(tier="II", repeat_contract="idempotency_key", compensator=Compensator("delete_branch",
                                                                                    {"name": "arguments.branch"}))
    def open_pull_request(arguments, *, idempotency_key):
        raise ToolFailedError("422: head branch has no commits")

    return tools


def gate_for(store, tid="agent-1"):
    gate = DispatchGate(TrajectoryLog(store, tid, must_survive="none"),
                        AdmissionPolicy({"g": {"create_branch", "delete_branch", "open_pull_request"}}),
                        coalesce_admission=True)
    if gate.record.task is None:
        gate.start(TaskStarted(task_id=tid, requester="dev", objective="fix", grant_ids=["g"],
                               budget_ceiling_usd=1.0))
    return gate


def test_a_plain_agent_gets_compensation_without_writing_it():
    forge = Forge()
    runner = build(forge).runner(gate_for(MemoryStore()), saga_id="fix", grant_id="g")
    runner.step("create_branch", {"name": "fix-1"})
    with pytest.raises(StepFailedError):
        runner.step("open_pull_request", {"branch": "fix-1"})
    assert runner.unwind("pr refused") == "ABORT_CONSISTENT"
    assert forge.branches == {"fix-1": "deleted"} and forge.created == forge.deleted == 1


def test_a_lost_answer_is_settled_by_the_declared_lookup_not_by_a_second_create():
    forge = Forge()
    forge.lose_next_answer = True
    runner = build(forge).runner(gate_for(MemoryStore()), saga_id="fix", grant_id="g")
    assert runner.step("create_branch", {"name": "fix-2"}) == {"branch": "fix-2"}
    assert forge.created == 1 and forge.received == 1


def test_a_declared_lookup_must_be_registered():
    tools = AgentTools()

    @tools.tool(tier="II", repeat_contract="idempotency_key", status_lookup=True,
                compensator=Compensator("undo", {"x": "output.x"}))
    def do(arguments, *, idempotency_key):
        return {"x": 1}

    @tools.tool(tier="II", repeat_contract="idempotency_key", is_compensator=True)
    def undo(arguments, *, idempotency_key):
        return {}

    with pytest.raises(ToolContractError, match="registers none"):
        tools.runner(gate_for(MemoryStore()), saga_id="s", grant_id="g")
