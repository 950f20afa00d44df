"""The systems-administration tools (figure 5) as services, and one trajectory through the
synthesized harness. Effects are counted by the services (their audit, counts and resources)."""

from __future__ import annotations

import pytest

from kernel_lib.errors import ToolContractError
from kernel_lib.recovery.contracts import ToolContract
from kernel_lib.recovery.signatures import signature_of
from kernel_lib.recovery.synthesis.config import CONFIGS
from kernel_lib.recovery.synthesis.harness import Harness
from kernel_lib.sim.services import TwinFleet, schema_sha256
from kernel_lib.sim.sysadmin import SYSADMIN_TASK, migration, sysadmin_registry, sysadmin_turns


def test_the_database_service_really_runs_the_sql_and_refuses_a_syntax_error():
    fleet = TwinFleet()
    c = fleet.client("t")
    _, db = c.call("provision_db", {"name": "staging-t", "engine": "postgres"}, "t.T1", "k1")
    name, sql = migration(1)
    status, body = c.call("apply_migration", {"database_id": db["database_id"], "migration": name,
                                              "sql": "CREAT INDEX i ON users(email);"}, "t.T2", "k2")
    assert status == 422 and body["reason"] == "sql_syntax_error" and "CREAT" in body["error"]
    status, body = c.call("apply_migration", {"database_id": db["database_id"], "migration": name,
                                              "sql": "CREATE INDEX i ON no_such_table(x);"}, "t.T3", "k3")
    assert status == 422 and body["reason"] == "sql_error" and "no_such_table" in body["error"]
    assert fleet.counts()["database"]["applied"].get("apply_migration", 0) == 0   # nothing applied
    status, body = c.call("apply_migration", {"database_id": db["database_id"], "migration": name, "sql": sql},
                          "t.T4", "k4")
    assert status == 200 and body["schema_sha256"] == schema_sha256([sql])
    _, seen = c.call("describe_database", {"name": "staging-t"}, "t.r1", None)
    assert [m["migration"] for m in seen["databases"][0]["migrations"]] == [name]
    # the compensator brings the schema back
    assert c.call("revert_migration", {"migration_id": body["migration_id"]}, "t.T4.C", "k4c")[0] == 200
    _, seen = c.call("describe_database", {"name": "staging-t"}, "t.r2", None)
    assert seen["databases"][0]["schema_sha256"] == schema_sha256([]) and not seen["databases"][0]["migrations"]


def test_each_broken_variant_is_refused_by_the_service_with_its_own_error():
    fleet = TwinFleet()
    specs = sysadmin_turns("trajectory-00045", 6)
    outputs: dict = {}
    c = fleet.client("trajectory-00045")
    for i, turn in enumerate(specs):
        sigmas = set()
        for v in range(3):
            status, body = c.call(turn.tool, turn.broken(outputs, v), f"t.b{i}.{v}", f"kb{i}.{v}")
            assert 400 <= status < 500, (turn.tool, status, body)
            sigmas.add(signature_of({"http_status": status, **body}))
        assert len(sigmas) == 3, turn.tool   # three different σ: a drifting repair is not a spin
        status, outputs[turn.key] = c.call(turn.tool, turn.make(outputs), f"t.T{i}", f"k{i}")
        assert status == 200, (turn.tool, outputs[turn.key])


def test_a_read_only_tier_i_tool_needs_no_compensator_but_a_creating_one_does():
    assert ToolContract("inspect", "I", "read_only", True).compensator is None
    with pytest.raises(ToolContractError, match="registers no compensator"):
        ToolContract("clone", "I", "idempotency_key", True)
    reg = sysadmin_registry()
    assert reg.contract("clone_repo").tier == "I" and reg.contract("clone_repo").compensator.tool == "delete_checkout"
    assert reg.contract("apply_migration").compensator.bind == {"migration_id": "output.migration_id"}
    assert reg.contract("deploy_production").tier == "III"


def test_a_clean_synthesized_trajectory_completes_with_the_gate_passing_and_one_of_each_effect():
    fleet = TwinFleet(simulate_durations=True)
    out = Harness(CONFIGS["synthesized"], fleet, SYSADMIN_TASK, audit=fleet.audits).run("clean")
    assert out.state == "COMPLETED" and out.turns_committed == 6
    assert out.pivot["verified"] and out.pivot["checks_passed"] and out.pivot["crossed"]
    applied = {s: c["applied"] for s, c in fleet.counts().items()}
    assert applied["database"]["provision_db"] == 1 and applied["database"]["apply_migration"] == 1
    assert applied["config"]["update_config"] == 1 and applied["deploy"]["deploy_production"] == 1
    assert [r["ok"] for r in out.invariant] == [True] and out.invariant[0]["classification"] == "committed"
    assert out.virtual_s > 0
