"""Figure 5's ladder computed from a log (kernel_lib.recovery.synthesis.lifelines).

Fault model: the deployment saga on the simulated twins with a reply lost after the effect, a
final 409, a forward repair of the failed step, and the worker crashed at every position of a run
(then recovered by a new runner over the surviving log).
Invariant: the ladder is a view of the log and the services' audit only: every message carries
the log position of the event it comes from, positions never go back, turns never go back, every
effect the services applied for the trajectory appears exactly once and after the durable intent
of its operation, and the Σ the recovery message names is the fold of the surviving prefix.
Goal: figure 5 drawn from what happened, never from what we meant to happen.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel_lib.core.events import ToolIntent
from kernel_lib.errors import ConfigError, RecoveryTerminated
from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate
from kernel_lib.log import MemoryStore, TrajectoryLog
from kernel_lib.recovery.policy import PolicyConfig, RemedyOption, RepairCosts
from kernel_lib.recovery.repair import RepairLoop, RepairLoopConfig
from kernel_lib.recovery.runner import RetryPolicy, SagaRunner
from kernel_lib.recovery.saga import fold_saga
from kernel_lib.recovery.synthesis.lifelines import (
    KINDS, LIFELINES, Crash, legend_rows, lifeline_messages, turn_rows,
)
from kernel_lib.sim.deployment import DEPLOYMENT_STEPS, TAKEN_DOMAIN, deployment_registry, run_deployment
from kernel_lib.sim.repairer import FIXED_DOMAIN, deployment_tool_costs, dns_repairer
from kernel_lib.sim.saga_sweep import GRANT_ID, start_task
from kernel_lib.sim.services import TwinFleet


class _Crash(BaseException):
    pass


def _runner(store, fleet, tid, on_position=None, saga_id="deploy"):
    reg = deployment_registry()
    gate = DispatchGate(TrajectoryLog(store, tid, must_survive="none"), AdmissionPolicy({GRANT_ID: set(reg.names())}),
                        coalesce_admission=True, on_position=on_position)
    if gate.record.task is None:
        start_task(gate, tid)
    return SagaRunner(gate, reg, fleet.client(tid), saga_id=saga_id, grant_id=GRANT_ID,
                      retry=RetryPolicy(max_attempts=4), sleep=fleet.clock.advance)


def _applied_effects(fleet, ops):
    return [(a["operation_id"], a.get("resource")) for trail in fleet.audits().values() for a in trail
            if a["operation_id"] in ops and not a.get("refused")]


def _check_ladder(msgs, events, fleet):
    """The invariants every ladder keeps (see the module docstring)."""
    assert [m.index for m in msgs] == list(range(len(msgs)))
    assert all(m.source in LIFELINES and m.target in LIFELINES and m.kind in KINDS for m in msgs)
    positions = [m.position for m in msgs if m.position is not None]
    assert positions == sorted(positions)
    turns = [m.turn for m in msgs]
    assert turns == sorted(turns)
    seqs = {e.sequence_number: e for e in events}
    for m in msgs:
        if m.event_type is not None:
            assert seqs[m.position].event_type == m.event_type
    ops = {e.payload.operation_id for e in events if isinstance(e.payload, ToolIntent)}
    shown = [(m.operation_id, m.label.split(" -> ")[-1]) for m in msgs if m.kind == "effect" and "applied" in m.label]
    assert sorted(shown) == sorted(_applied_effects(fleet, ops))
    for m in msgs:
        if m.kind == "effect":     # intent before effect, in the ladder too
            assert any(i.kind == "intent" and i.operation_id == m.operation_id and i.index < m.index for i in msgs)


def test_a_lost_reply_is_drawn_as_timeout_then_probe_and_the_service_counts_one_effect():
    fleet = TwinFleet()
    fleet.taken_name(TAKEN_DOMAIN)
    store = MemoryStore()
    fleet.inject("reserve_ip", "timeout_after")
    result = run_deployment(_runner(store, fleet, "t-lost"))
    assert result["state"] == "ABORT_CONSISTENT"
    events = list(store.read("t-lost"))
    msgs = lifeline_messages(events, fleet.audits())
    _check_ladder(msgs, events, fleet)
    t2 = [m for m in msgs if m.operation_id == "deploy.T2" and m.kind != "compensate"]
    assert [m.kind for m in t2] == ["propose", "intent", "dispatch", "effect", "timeout", "probe", "probe", "commit"]
    assert t2[3].label == "egress_ip: applied reserve_ip -> ip-0001"
    assert "completed" in t2[6].label and "ip-0001" in t2[6].label
    assert sum(c["applied"].get("reserve_ip", 0) for c in fleet.counts().values()) == 1
    assert {m.turn for m in t2} == {2}
    # the unwind: C4..C1 popped in the turn whose failure unwinds (T5), Σ's order
    pops = [m.label.split(" ")[1] for m in msgs if m.kind == "compensate" and m.label.startswith("pop")]
    assert pops == ["C4", "C3", "C2", "C1"]
    assert all(m.turn == 5 for m in msgs if m.kind == "compensate")
    rows = turn_rows(msgs)
    assert [r["turn"] for r in rows] == list(range(6))
    assert [r["label"] for r in rows[1:]] == [f"turn {i}: {t}" for i, t in enumerate(DEPLOYMENT_STEPS, 1)]
    assert rows[-1]["last"] == len(msgs) - 1


def test_a_forward_repair_stays_in_the_failed_steps_turn():
    fleet = TwinFleet()
    fleet.taken_name(TAKEN_DOMAIN)
    store = MemoryStore()
    runner = _runner(store, fleet, "t-repair")
    outs = [runner.step(t, a) for t, a in (("provision_sandbox", {"image": "deploy-base", "vcpus": 2}),
                                           ("reserve_ip", {"region": "eu-west-1"}))]
    costs = RepairCosts(tokens=2000, usd=0.01, s=1.0, steps=1)
    loop = RepairLoop(runner, RepairLoopConfig(PolicyConfig((RemedyOption("error_feedback", costs, 1.0, {}),),
                                                            k_repair=2), deployment_tool_costs()),
                      dns_repairer(1.0))
    out = loop.step("publish_dns", {"name": TAKEN_DOMAIN, "ip_id": outs[1]["ip_id"]})
    assert out["record_id"]
    events = list(store.read("t-repair"))
    msgs = lifeline_messages(events, fleet.audits())
    _check_ladder(msgs, events, fleet)
    kinds = [(m.turn, m.kind) for m in msgs if m.turn == 3]
    assert (3, "fail") in kinds and (3, "repair") in kinds
    repaired = [m for m in msgs if m.operation_id == "deploy.T4"]    # the repaired call: the runner's next step
    assert repaired and {m.turn for m in repaired} == {3}
    assert any(m.kind == "dispatch" and FIXED_DOMAIN in m.label for m in repaired)
    decision = next(m for m in msgs if m.kind == "repair" and m.label.startswith("D(Ω)"))
    assert "FORWARD_REPAIR via error_feedback (repair 1" in decision.label
    assert next(m for m in msgs if m.label.startswith("repair of T3")).label.endswith("worked")
    assert max(m.turn for m in msgs) == 3


def _crashed_run(k):
    """The deployment saga crashed right after its k-th gate position, then recovered."""
    fleet = TwinFleet()
    fleet.taken_name(TAKEN_DOMAIN)
    store = MemoryStore()
    tid = f"t-crash-{k}"
    seen = [0]

    def hook(name, ev):
        seen[0] += 1
        if seen[0] == k:
            raise _Crash(name)

    crashed = False
    try:
        run_deployment(_runner(store, fleet, tid, on_position=hook))
    except _Crash:
        crashed = True
    head = len(list(store.read(tid)))
    run_deployment(_runner(store, fleet, tid))
    return fleet, list(store.read(tid)), (head if crashed else None)


def _positions():
    names = []
    fleet = TwinFleet()
    fleet.taken_name(TAKEN_DOMAIN)
    run_deployment(_runner(MemoryStore(), fleet, "t-count", on_position=lambda n, e: names.append(n)))
    return len(names)


POSITIONS = _positions()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=1, max_value=POSITIONS))
def test_a_crash_at_any_position_is_drawn_with_the_sigma_of_the_surviving_log(k):
    fleet, events, head = _crashed_run(k)
    assert head is not None
    msgs = lifeline_messages(events, fleet.audits(), crashes=[Crash(head, "SIGKILL")])
    _check_ladder(msgs, events, fleet)
    crash = [m for m in msgs if m.kind == "crash"]
    recover = [m for m in msgs if m.kind == "recover"]
    assert len(crash) == len(recover) == 1 and recover[0].index == crash[0].index + 1
    assert crash[0].position == head
    assert all(m.position is None or m.position <= head for m in msgs[: crash[0].index])
    assert all(m.position is None or m.position > head for m in msgs[recover[0].index + 1:])
    survived = [e for e in events if e.sequence_number <= head]
    sigma = fold_saga(survived, "deploy").stack
    assert f"Σ = [{', '.join('C' + str(s.index) for s in reversed(sigma))}]" in recover[0].label
    assert f"folds {len(survived)} events" in recover[0].label


def test_an_effect_without_a_durable_intent_is_shown_as_an_orphan():
    fleet = TwinFleet()
    store = MemoryStore()
    runner = _runner(store, fleet, "t-orphan")
    runner.step("provision_sandbox", {"image": "deploy-base", "vcpus": 2})
    # a request sent past the log (what an unmanaged script does): the service applies it
    fleet.client("t-orphan").call("reserve_ip", {"region": "eu-west-1"}, "deploy.T9", None)
    msgs = lifeline_messages(list(store.read("t-orphan")), fleet.audits())
    orphans = [m for m in msgs if m.kind == "orphan"]
    assert len(orphans) == 1 and orphans[0].operation_id == "deploy.T9" and orphans[0].position is None
    assert "no intent in the log" in orphans[0].label


def test_bad_input_is_refused_with_a_reason():
    fleet = TwinFleet()
    store = MemoryStore()
    run_deployment(_runner(store, fleet, "t-bad"))
    events = list(store.read("t-bad"))
    with pytest.raises(ConfigError, match="outside the log"):
        lifeline_messages(events, crashes=[len(events) + 3])
    with pytest.raises(ConfigError, match="sequence order"):
        lifeline_messages(list(reversed(events)))
    other = list(_crashed_run(POSITIONS)[1])
    with pytest.raises(ConfigError, match="more than one trajectory"):
        lifeline_messages(events + other)
    assert lifeline_messages([]) == []
    assert [r["kind"] for r in legend_rows()] == list(KINDS)


def test_a_repair_that_never_works_is_stopped_and_drawn_as_a_rollback():
    fleet = TwinFleet()
    fleet.taken_name(TAKEN_DOMAIN)
    store = MemoryStore()
    runner = _runner(store, fleet, "t-spin")
    ip = runner.step("reserve_ip", {"region": "eu-west-1"})
    costs = RepairCosts(tokens=2000, usd=0.01, s=1.0, steps=1)
    loop = RepairLoop(runner, RepairLoopConfig(PolicyConfig((RemedyOption("error_feedback", costs, 1.0, {}),),
                                                            k_repair=2), deployment_tool_costs()),
                      dns_repairer(0.0, failure="spin"))
    with pytest.raises(RecoveryTerminated):
        loop.step("publish_dns", {"name": TAKEN_DOMAIN, "ip_id": ip["ip_id"]})
    events = list(store.read("t-spin"))
    msgs = lifeline_messages(events, fleet.audits())
    _check_ladder(msgs, events, fleet)
    assert max(m.turn for m in msgs) == 2                      # every attempt of T2 stays in turn 2
    decisions = [m.label for m in msgs if m.kind == "repair" and m.label.startswith("D(Ω)")]
    assert decisions and "BACKWARD_ROLLBACK" in decisions[-1]
    assert [m.label for m in msgs if m.kind == "compensate" and m.label.startswith("pop")] == [
        "pop C1 (reserve_ip's compensator) from Σ"]
