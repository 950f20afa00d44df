"""Table 14's four configurations, one fault at a time: each scenario states the fault, what the
configuration's semantics promise, and checks it against what the services counted (their audit,
counts and resources) and what the log kept."""

from __future__ import annotations

import pytest

from kernel_lib.errors import ConfigError
from kernel_lib.recovery.synthesis.config import CONFIGS, RuntimeConfig, config_named
from kernel_lib.recovery.synthesis.faults import Fault, FaultPlan, FaultProfile, ScriptedFaultPlan
from kernel_lib.recovery.synthesis.harness import Harness
from kernel_lib.sim.services import TwinFleet
from kernel_lib.sim.sysadmin import SYSADMIN_TASK, account_effects


def run(config: str, script: dict, *, on_step=None, turns: int = 6):
    fleet = TwinFleet(simulate_durations=True)
    stores = {}

    def step(h, name, ev):
        stores["store"] = h.proc.store
        if on_step is not None:
            on_step(h, name, ev, fleet)
    out = Harness(CONFIGS[config], fleet, SYSADMIN_TASK, plan=ScriptedFaultPlan(script), turns=turns,
                  audit=fleet.audits, on_step=step).run("t")
    verdict = account_effects(fleet.audits(), fleet.resources(live_only=False), {"t": out.kept if out.completed
                                                                                  else None})
    return out, fleet, verdict, stores.get("store")


def applied(fleet, service: str, action: str) -> int:
    return fleet.counts()[service]["applied"].get(action, 0)


DROP_AFTER = {(3, 0): Fault("network_drop", after_effect=True)}
DROP_BEFORE = {(3, 0): Fault("network_drop", after_effect=False)}
SQL_ERROR = {(4, 0): Fault("tool_exception")}
FORMAT = {(2, 0): Fault("format_corruption", repair_u=0.5)}


@pytest.mark.parametrize("config, state, databases, duplicated, leaked", [
    ("unmanaged", "ABORTED", 1, 0, 2),        # unhandled: the checkout and the database stay
    ("wal_only", "HALTED", 1, 0, 2),          # in doubt, no probe: halts, nothing undone
    ("saga_only", "COMPLETED", 2, 1, 1),      # blind retry: a second database, the first orphaned
    ("synthesized", "COMPLETED", 1, 0, 0),    # the probe finds the first: one database
])
def test_a_dropped_answer_after_the_effect(config, state, databases, duplicated, leaked):
    out, fleet, v, _ = run(config, DROP_AFTER)
    assert out.state == state
    assert applied(fleet, "database", "provision_db") == databases
    assert (v["duplicated_effects"], v["leaked_resources"]) == (duplicated, leaked)


def test_a_dropped_answer_before_the_effect_is_resent_under_its_key_only_by_the_synthesized_runtime():
    out, fleet, v, _ = run("synthesized", DROP_BEFORE)
    assert out.state == "COMPLETED" and applied(fleet, "database", "provision_db") == 1
    assert fleet.counts()["database"]["received"]["provision_db"] == 2 and v["leaked_resources"] == 0
    out, fleet, v, _ = run("saga_only", DROP_BEFORE)   # a blind retry that happens not to duplicate
    assert out.state == "COMPLETED" and out.blind_retries == 1 and v["duplicated_effects"] == 0


@pytest.mark.parametrize("config, state, migrations, leaked", [
    ("unmanaged", "ABORTED", 0, 2), ("wal_only", "HALTED", 0, 2),
    ("saga_only", "ABORT_CONSISTENT", 0, 0), ("synthesized", "COMPLETED", 1, 0),
])
def test_a_sql_syntax_error(config, state, migrations, leaked):
    out, fleet, v, _ = run(config, SQL_ERROR)
    assert out.state == state and applied(fleet, "database", "apply_migration") == migrations
    assert v["leaked_resources"] == leaked
    # the service refused the broken SQL itself: one 422 per broken proposal
    assert fleet.counts()["database"]["received"]["apply_migration"] == 1 + migrations
    if config == "saga_only":   # the rollback tore down what T1 and T3 created
        assert applied(fleet, "database", "teardown_db") == 1 and applied(fleet, "git", "delete_checkout") == 1


@pytest.mark.parametrize("config, position, state, rpo, rto", [
    ("unmanaged", "after_intent", "LOST", 4, False), ("saga_only", "after_intent", "LOST", 4, False),
    ("wal_only", "after_intent", "HALTED", 0, True), ("wal_only", "before_intent", "COMPLETED", 0, True),
    ("synthesized", "after_intent", "COMPLETED", 0, True), ("synthesized", "after_dispatch", "COMPLETED", 0, True),
])
def test_a_process_kill_at_turn_5(config, position, state, rpo, rto):
    out, fleet, v, _ = run(config, {(5, 0): Fault("process_kill", position=position)})
    assert out.state == state
    (kill,) = out.kills
    assert kill["turn"] == 5 and kill["position"] == position and kill["rpo_turns"] == rpo
    assert (kill["rto_s"] is not None) == rto
    if rto:
        assert kill["rto_cpu_s"] > 0 and kill["rto_virtual_s"] >= 0.5   # restart_s given, CPU measured
    assert kill["recovered"] == (state == "COMPLETED")
    assert applied(fleet, "config", "update_config") <= 1   # never a duplicate configuration
    if state == "LOST":
        assert v["leaked_resources"] == 3   # checkout, database, migration (T5's call never left)


@pytest.mark.parametrize("config, state", [("unmanaged", "CRASHED"), ("wal_only", "HALTED"),
                                           ("saga_only", "ABORT_CONSISTENT"), ("synthesized", "COMPLETED")])
def test_a_malformed_tool_call(config, state):
    out, fleet, v, store = run(config, FORMAT)
    assert out.state == state
    assert fleet.counts()["git"]["received"].get("inspect_migrations", 0) == (1 if state == "COMPLETED" else 0)
    names = [e.payload.name for e in store.read("t") if e.event_type == "RuntimeInput"]
    assert names == {"wal_only": ["malformed_tool_call"], "synthesized": ["schema_rejected"]}.get(config, [])


def test_the_gate_holds_the_pivot_when_a_check_fails_and_the_saga_unwinds():
    """A second staging database appears out of band before the deploy: the synthesized runtime's
    gate reads it from the database service and refuses; without a gate the deploy goes out."""
    def intruder(h, name, ev, fleet):
        if name == "after:SagaStepChanged" and ev.payload.step_index == 5 and ev.payload.state == "COMMITTED":
            fleet.client("intruder").call("provision_db", {"name": "staging-t", "engine": "postgres"}, "i.T1", "ik")
    out, fleet, v, store = run("synthesized", {}, on_step=intruder)
    assert out.state == "ABORT_CONSISTENT" and out.pivot["verified"] is False
    assert "staging_database" in out.pivot["failed_checks"]
    assert applied(fleet, "deploy", "deploy_production") == 0 and v["leaked_resources"] == 0
    assert [e.payload.passed for e in store.read("t") if e.event_type == "PivotVerified"] == [False]
    out, fleet, v, _ = run("saga_only", {}, on_step=intruder)
    assert out.state == "COMPLETED" and out.pivot["checks_passed"] is False and out.pivot["crossed"]
    assert applied(fleet, "deploy", "deploy_production") == 1   # premature: the checks would have failed


def test_a_longer_trajectory_repeats_the_migrate_and_configure_turns():
    out, fleet, v, _ = run("synthesized", {}, turns=9)
    assert out.state == "COMPLETED" and out.turns_committed == 9
    assert applied(fleet, "database", "apply_migration") == 3 and applied(fleet, "config", "update_config") == 2
    with pytest.raises(ConfigError):
        run("synthesized", {}, turns=5)


def test_configurations_and_profiles_refuse_nonsense():
    assert config_named("synthesized").forward_repair_k == 2 and len(CONFIGS) == 4
    with pytest.raises(ConfigError):
        config_named("chaos")
    with pytest.raises(ConfigError):
        RuntimeConfig("x", True, True, True, 2, True, True, True)   # a probe and blind retries
    with pytest.raises(ConfigError):
        RuntimeConfig("x", True, True, True, 4, True, True, False)
    with pytest.raises(ConfigError):
        FaultProfile(network_drop=0.9, tool_exception=0.2)
    with pytest.raises(ConfigError):
        FaultPlan(1.5)
    with pytest.raises(ConfigError):
        ScriptedFaultPlan({(0, 0): Fault("network_drop")})


def test_the_fault_plan_is_a_function_of_its_seed_and_meets_the_profile():
    plan = FaultPlan(7)
    draws = [plan.draw(t, p) for t in range(200) for p in range(25)]
    assert draws == [FaultPlan(7).draw(t, p) for t in range(200) for p in range(25)]
    kinds = [d.kind for d in draws]
    n = len(kinds)
    for kind, p in (("network_drop", 0.08), ("tool_exception", 0.06), ("process_kill", 0.04),
                    ("format_corruption", 0.02)):
        assert abs(kinds.count(kind) / n - p) < 4 * (p * (1 - p) / n) ** 0.5, kind
    assert kinds.count(None) / n == pytest.approx(0.8, abs=0.02)
