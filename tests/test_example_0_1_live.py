"""Example 0.1 on the live tool services: the dual-commit trap and its remedy (Failure Recovery).

Fault model: the catalog migration (git ``create_branch``) answers a final 409 (the chapter's
schema deadlock); the model rewrites the kernel after validation and still claims success; the
worker dies right after the mail relay applied the outbox's send. Invariant: before the pivot a
failure unwinds cleanly; after it nothing is unwound. Every effect is read from the services' own
records (resources, audit trails, counts), never from our log.
"""

from __future__ import annotations

import pytest

from kernel_lib.live.example_0_1 import Example01, run_remedy, run_trap
from kernel_lib.live.services import LiveFleet
from kernel_lib.log import MemoryStore


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    with LiveFleet(tmp_path_factory.mktemp("fleet01"), client_timeout_s=5.0) as f:
        yield f


@pytest.fixture(autouse=True)
def no_faults(fleet):
    fleet.clear_faults()
    yield
    fleet.clear_faults()


def test_the_trap_strands_a_public_route_and_never_sends_the_webhook(fleet, tmp_path):
    out = run_trap(fleet, tmp_path, "trap1")
    assert out["run"]["state"] == "ESCALATED" and out["run"]["failed_step"] == "T4"
    assert out["phase"] == "COMMITTED" and out["frozen"]
    held = out["services"]
    assert [r["state"] for r in held["routing"]] == ["active"]       # the public route stays
    assert [r["state"] for r in held["sandbox"]] == ["active"]       # no compensator ran past the pivot
    assert held["email"] == [] and held["git"] == []                 # the webhook never went
    assert held["applied"] == {"activate_route": 1, "provision_sandbox": 1}
    assert out["retired_compensators"] == [out["run"]["operation_ids"]["T1"]]


def test_the_remedy_unwinds_the_migrations_failure_cleanly(fleet, tmp_path):
    out = run_remedy(fleet, tmp_path, "remedy1")
    assert out["run"]["order"] == ["T1", "T2", "T4", "T5.stage", "T3"]
    assert out["run"]["state"] == "ABORT_CONSISTENT" and out["run"]["failed_step"] == "T4"
    held = out["services"]
    assert [r["state"] for r in held["sandbox"]] == ["released"]     # C1 ran, counted at the service
    assert held["routing"] == [] and held["email"] == []
    assert held["applied"] == {"provision_sandbox": 1, "teardown_sandbox": 1}
    assert out["crossing"] is None and not out["frozen"]


def test_the_gate_refuses_while_the_model_claims_success(fleet, tmp_path):
    ex = Example01(fleet, tmp_path, "gate1", break_validation=True)
    run = ex.run("proposed")
    verdict = ex.verdicts[-1]
    assert verdict.model_claim.claims_success and verdict.claim_contradicted
    assert verdict.failed_checks == ("tests_pass_in_instance",)
    assert run.state == "ABORT_CONSISTENT" and run.refused_checks == ["tests_pass_in_instance"]
    held = ex.held()
    assert held["routing"] == [] and held["email"] == []
    assert held["applied"] == {"create_branch": 1, "delete_branch": 1, "provision_sandbox": 1,
                               "teardown_sandbox": 1}


class _Crash(BaseException):
    pass


class _CrashAfterMail:
    """Endpoints that die right after the relay applied ``send_email`` (the answer is lost)."""

    def __init__(self, inner):
        self.inner = inner

    def send(self, intent):
        reply = self.inner.send(intent)
        if intent.tool == "send_email":
            raise _Crash("after the mail relay applied the send")
        return reply

    def __getattr__(self, name):
        return getattr(self.inner, name)


class _NoLookup:
    """The next owner's endpoints: the status lookup is unreachable, so the outbox re-sends under κ."""

    def __init__(self, inner):
        self.inner = inner

    def lookup(self, tool, operation_id):
        raise ConnectionRefusedError("status lookup unreachable")

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_the_outbox_resend_after_a_crash_delivers_exactly_one_email(fleet, tmp_path):
    store = MemoryStore()
    before = fleet.counts()["email"]
    first = Example01(fleet, tmp_path, "outbox1", store=store, endpoints_wrapper=_CrashAfterMail)
    with pytest.raises(_Crash):
        first.run("proposed")
    second = Example01(fleet, tmp_path, "outbox1", store=store, endpoints_wrapper=_NoLookup)
    run = second.run("proposed")
    assert run.state == "COMPLETED"
    after = fleet.counts()["email"]
    assert after["received"]["send_email"] - before["received"].get("send_email", 0) == 2   # re-sent once
    assert after["applied"]["send_email"] - before["applied"].get("send_email", 0) == 1     # delivered once
    held = second.held()
    assert len(held["email"]) == 1 and [r["state"] for r in held["routing"]] == ["active"]
    assert held["applied"]["activate_route"] == 1 and held["applied"]["send_email"] == 1
    out = second.outcome(run)
    assert out["outbox"]["T5"]["state"] == "FLUSHED" and out["saga_state"] == "COMPLETED"
