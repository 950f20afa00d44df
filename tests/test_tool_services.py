"""The tool services' contract, one suite on both fleets (Failure Recovery, table 5; definition 0.2).

Fault model: every injected fault class (timeout after the effect, timeout before it, 409, 429,
5xx, a crash of the service process, a slow answer, a partial effect), a repeated request under
an idempotency key, a key reused for another request, a revoked capability lease. Invariant: the
service's own counts and resources say exactly what was applied (a repeat is not applied again, a
refusal applies nothing), and releasing what was created brings Φ back to its baseline while the
ids move on. Goal: the simulated twins (:class:`~kernel_lib.sim.services.TwinFleet`) and the real
processes (:class:`~kernel_lib.live.services.LiveFleet`) honour it alike.

The live fleet is started once for the module (faults cleared and crashed services restarted
between tests); each test names its own operations and compares the services' counts before and
after, so tests do not see each other's effects. The scenario at the end runs the deployment saga
against the live processes, forward and unwound, judged by their audit trails.
"""

from __future__ import annotations

import hashlib
import time

import pytest

from kernel_lib.errors import ServiceDownError, ServiceError
from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate
from kernel_lib.live.services import LiveFleet
from kernel_lib.log import SQLiteStore, TrajectoryLog
from kernel_lib.recovery.runner import RetryPolicy, SagaRunner
from kernel_lib.sim.deployment import DEPLOYMENT_STEPS, TAKEN_DOMAIN, deployment_registry, run_deployment
from kernel_lib.sim.saga_sweep import GRANT_ID, account, start_task
from kernel_lib.sim.services import ACTIONS, SERVICES, TwinFleet

#: the live fleet's client timeout: an injected timeout costs a test this long
CLIENT_TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def live_fleet(tmp_path_factory):
    with LiveFleet(tmp_path_factory.mktemp("fleet"), client_timeout_s=CLIENT_TIMEOUT_S, hold_s=20.0) as f:
        f.taken_name(TAKEN_DOMAIN)
        yield f


@pytest.fixture(params=["twins", "live"])
def fleet(request):
    if request.param == "twins":
        f = TwinFleet()
        f.taken_name(TAKEN_DOMAIN)
        yield f
        return
    f = request.getfixturevalue("live_fleet")
    yield f
    for name in f.services:
        if f.is_down(name):
            f.restart(name)
    f.clear_faults()


@pytest.fixture
def uid(request):
    """A prefix unique to this test (the live fleet is shared by the module)."""
    return "t" + hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:10]


def counted(fleet, table: str, action: str) -> int:
    return fleet.counts()[ACTIONS[action].service][table].get(action, 0)


def test_both_fleets_offer_the_same_facade():
    names = [n for n in dir(TwinFleet) if not n.startswith("_") and callable(getattr(TwinFleet, n))] + ["services"]
    for n in names:
        if n != "twin_of":   # the twins' own accessor
            assert hasattr(LiveFleet, n), n
    assert LiveFleet.__dict__["services"].__class__ is property


def test_every_request_is_counted_refused_or_not(fleet, uid):
    c = fleet.client(uid)
    before = counted(fleet, "received", "provision_sandbox"), counted(fleet, "applied", "provision_sandbox")
    assert c.call("provision_sandbox", {"image": "a"}, f"{uid}-1", f"{uid}-k1")[0] == 200
    assert c.call("provision_sandbox", {"image": "a"}, f"{uid}-1", f"{uid}-k1")[0] == 200   # a repeat
    assert c.call("provision_sandbox", {"image": "b"}, f"{uid}-2", f"{uid}-k1")[0] == 409   # conflicting
    assert c.call("provision_sandbox", "not an object", f"{uid}-3", None)[0] == 422
    fleet.revoke(uid)
    assert c.call("provision_sandbox", {"image": "c"}, f"{uid}-4", f"{uid}-k4")[0] == 401
    after = counted(fleet, "received", "provision_sandbox"), counted(fleet, "applied", "provision_sandbox")
    assert (after[0] - before[0], after[1] - before[1]) == (5, 1)


def test_a_repeat_under_its_idempotency_key_gets_the_first_answer_and_is_not_applied_again(fleet, uid):
    c = fleet.client(uid)
    applied0 = counted(fleet, "applied", "reserve_ip")
    s1, b1 = c.call("reserve_ip", {"region": "eu"}, f"{uid}-op", f"{uid}-key")
    s2, b2 = c.call("reserve_ip", {"region": "eu"}, f"{uid}-op", f"{uid}-key")
    assert (s1, s2) == (200, 200) and b2 == {**b1, "duplicate": True} and "duplicate" not in b1
    assert counted(fleet, "applied", "reserve_ip") - applied0 == 1
    mine = [r for r in fleet.resources()["egress_ip"].values() if r["operation_id"] == f"{uid}-op"]
    assert len(mine) == 1


def test_the_same_key_with_other_arguments_is_refused_409(fleet, uid):
    c = fleet.client(uid)
    c.call("reserve_ip", {"region": "eu"}, f"{uid}-op", f"{uid}-key")
    applied0 = counted(fleet, "applied", "reserve_ip")
    status, body = c.call("reserve_ip", {"region": "us"}, f"{uid}-op", f"{uid}-key")
    assert status == 409 and body["reason"] == "conflicting_request" and not body["retryable"]
    assert counted(fleet, "applied", "reserve_ip") == applied0


def test_timeout_after_the_effect_applies_it_and_no_answer_arrives(fleet, uid):
    c = fleet.client(uid)
    applied0 = counted(fleet, "applied", "provision_sandbox")
    fleet.inject("provision_sandbox", "timeout_after")
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        c.call("provision_sandbox", {"image": "a"}, f"{uid}-op", f"{uid}-key")
    if isinstance(fleet, LiveFleet):   # the answer was really held until the client gave up
        assert time.monotonic() - t0 >= CLIENT_TIMEOUT_S * 0.9
    assert counted(fleet, "applied", "provision_sandbox") - applied0 == 1
    assert c.lookup("provision_sandbox", f"{uid}-op")["status"] == "completed"
    # the retry under the same key gets the answer that was lost, and applies nothing
    status, body = c.call("provision_sandbox", {"image": "a"}, f"{uid}-op", f"{uid}-key")
    assert status == 200 and body["duplicate"] and counted(fleet, "applied", "provision_sandbox") - applied0 == 1


def test_timeout_before_the_effect_applies_nothing(fleet, uid):
    c = fleet.client(uid)
    received0, applied0 = counted(fleet, "received", "bind_firewall"), counted(fleet, "applied", "bind_firewall")
    fleet.inject("bind_firewall", "timeout_before")
    with pytest.raises(TimeoutError):
        c.call("bind_firewall", {"ports": [443]}, f"{uid}-op", f"{uid}-key")
    assert counted(fleet, "received", "bind_firewall") - received0 == 1
    assert counted(fleet, "applied", "bind_firewall") == applied0
    assert c.lookup("bind_firewall", f"{uid}-op")["status"] == "unknown"
    status, body = c.call("bind_firewall", {"ports": [443]}, f"{uid}-op", f"{uid}-key")   # the retry applies it
    assert status == 200 and not body.get("duplicate") and counted(fleet, "applied", "bind_firewall") == applied0 + 1


def test_an_injected_409_is_final_and_applies_nothing(fleet, uid):
    c = fleet.client(uid)
    applied0 = counted(fleet, "applied", "place_hold")
    fleet.inject("place_hold", "conflict")
    status, body = c.call("place_hold", {"usd": 5}, f"{uid}-op", f"{uid}-key")
    assert status == 409 and body["reason"] == "conflict" and not body["retryable"]
    assert c.lookup("place_hold", f"{uid}-op")["status"] == "failed"
    status2, body2 = c.call("place_hold", {"usd": 5}, f"{uid}-op", f"{uid}-key")   # the final answer again
    assert status2 == 409 and body2["duplicate"] and counted(fleet, "applied", "place_hold") == applied0


def test_429_says_when_to_retry_and_the_retry_applies_once(fleet, uid):
    c = fleet.client(uid)
    applied0 = counted(fleet, "applied", "create_branch")
    fleet.inject("create_branch", "rate_limited", retry_after_s=0.25)
    status, body = c.call("create_branch", {"name": "x"}, f"{uid}-op", f"{uid}-key")
    assert status == 429 and body["retryable"] and body["retry_after_s"] == 0.25
    assert counted(fleet, "applied", "create_branch") == applied0
    assert c.call("create_branch", {"name": "x"}, f"{uid}-op", f"{uid}-key")[0] == 200
    assert counted(fleet, "applied", "create_branch") == applied0 + 1


def test_a_5xx_is_retryable_and_applies_nothing(fleet, uid):
    c = fleet.client(uid)
    applied0 = counted(fleet, "applied", "publish_dns")
    fleet.inject("publish_dns", "server_error", count=2)
    for _ in range(2):
        status, body = c.call("publish_dns", {"name": f"{uid}.example.test"}, f"{uid}-op", f"{uid}-key")
        assert status == 503 and body["retryable"]
    assert counted(fleet, "applied", "publish_dns") == applied0
    assert c.lookup("publish_dns", f"{uid}-op")["status"] == "unknown"


def test_a_crash_kills_the_service_and_a_restart_keeps_its_state(fleet, uid):
    c = fleet.client(uid)
    _, made = c.call("compile_binary", {"target": "api"}, f"{uid}-made", f"{uid}-k0")
    received0, applied0 = counted(fleet, "received", "compile_binary"), counted(fleet, "applied", "compile_binary")
    pid0 = fleet.pid("build") if isinstance(fleet, LiveFleet) else None
    fleet.inject("compile_binary", "crash")
    with pytest.raises(ServiceDownError):
        c.call("compile_binary", {"target": "api"}, f"{uid}-op", f"{uid}-key")
    deadline = time.monotonic() + 10      # the dying process may still be on its way out
    while not fleet.is_down("build") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fleet.is_down("build") and not fleet.is_down("sandbox")
    with pytest.raises(ServiceDownError):
        fleet.counts()
    with pytest.raises(ServiceDownError):
        c.lookup("compile_binary", f"{uid}-made")
    fleet.restart("build")
    assert not fleet.is_down("build")
    if pid0 is not None:
        assert fleet.pid("build") != pid0
    # what existed, the counts (the crashed request was counted before the process died) and the
    # answers under each key survived the restart
    assert made["build_id"] in fleet.resources()["build"]
    assert counted(fleet, "received", "compile_binary") == received0 + 1
    assert counted(fleet, "applied", "compile_binary") == applied0
    assert c.lookup("compile_binary", f"{uid}-made")["status"] == "completed"
    assert c.call("compile_binary", {"target": "api"}, f"{uid}-made", f"{uid}-k0")[1]["duplicate"]


def test_a_slow_answer_really_takes_its_delay(fleet, uid):
    c = fleet.client(uid)
    fleet.inject("delete_branch", "slow", delay_s=0.4)
    t0 = fleet.clock()
    status, body = c.call("delete_branch", {"branch_id": "branch-none"}, f"{uid}-op", f"{uid}-key")
    assert status == 404 and fleet.clock() - t0 >= 0.4


def test_a_partial_effect_answers_500_with_what_exists_and_its_compensator_undoes_it(fleet, uid):
    c = fleet.client(uid)
    fleet.inject("provision_sandbox", "partial")
    status, body = c.call("provision_sandbox", {"image": "a"}, f"{uid}-op", f"{uid}-key")
    assert status == 500 and body["partial"] and not body["retryable"]
    rid = body["output"]["sandbox_id"]
    assert fleet.resources()["sandbox"][rid]["state"] == "partial"
    assert c.call("teardown_sandbox", {"sandbox_id": rid}, f"{uid}-op.C", f"{uid}-key.C")[0] == 200
    assert rid not in fleet.resources()["sandbox"]


def test_the_status_lookup_answers_completed_failed_and_unknown(fleet, uid):
    c = fleet.client(uid)
    c.call("reserve_ip", {}, f"{uid}-ok", f"{uid}-k1")
    c.call("release_ip", {"ip_id": "ip-none"}, f"{uid}-no", f"{uid}-k2")
    ok, no = c.lookup("reserve_ip", f"{uid}-ok"), c.lookup("release_ip", f"{uid}-no")
    assert ok["status"] == "completed" and ok["body"]["ip_id"].startswith("ip-")
    assert no["status"] == "failed" and no["http_status"] == 404
    assert c.lookup("reserve_ip", f"{uid}-never")["status"] == "unknown"


def test_a_revoked_lease_is_refused_by_the_service_itself(fleet, uid):
    mine, other = fleet.client(uid), fleet.client(uid + "-other")
    assert mine.call("reserve_ip", {}, f"{uid}-1", f"{uid}-k1")[0] == 200
    refused0 = counted(fleet, "refused", "reserve_ip")
    applied0 = counted(fleet, "applied", "reserve_ip")
    revoked = fleet.revoke(uid)
    assert len(revoked) == 1 and fleet.revoke(uid) == []
    status, body = mine.call("reserve_ip", {}, f"{uid}-2", f"{uid}-k2")
    assert status == 401 and body["reason"] == "lease_revoked"
    assert counted(fleet, "refused", "reserve_ip") == refused0 + 1
    assert counted(fleet, "applied", "reserve_ip") == applied0
    assert other.call("reserve_ip", {}, f"{uid}-3", f"{uid}-k3")[0] == 200   # only that trajectory's leases
    assert fleet.client(uid + "-nobody").__class__.__name__.endswith("Endpoints")
    status, _ = fleet.client(uid).call("reserve_ip", {}, f"{uid}-4", f"{uid}-k4")   # a fresh lease works again
    assert status == 200


def test_releasing_what_was_created_brings_phi_back_while_the_ids_advance(fleet, uid):
    c = fleet.client(uid)
    phi0 = fleet.invariants()
    ids = []
    pairs = [("provision_sandbox", "teardown_sandbox", "sandbox_id"), ("reserve_ip", "release_ip", "ip_id"),
             ("place_hold", "release_hold", "hold_id")]
    for i, (make, release, arg) in enumerate(pairs):
        _, body = c.call(make, {"n": i}, f"{uid}-{i}", f"{uid}-k{i}")
        ids.append(body[arg])
        assert fleet.invariants() != phi0
        assert c.call(release, {arg: body[arg]}, f"{uid}-{i}.C", f"{uid}-k{i}.C")[0] == 200
    assert fleet.invariants() == phi0   # φ(S'_0) = φ(S_0)
    every = fleet.resources(live_only=False)
    assert all(every[ACTIONS[m].service][rid]["state"] == "released"
               for m, rid in zip(("provision_sandbox", "reserve_ip", "place_hold"), ids))
    _, later = c.call("provision_sandbox", {"n": 9}, f"{uid}-9", f"{uid}-k9")
    assert int(later["sandbox_id"].split("-")[1]) > int(ids[0].split("-")[1])   # S'_0 ≠ S_0


def test_a_bad_fault_or_service_name_is_a_typed_error(fleet):
    with pytest.raises(ServiceError):
        fleet.inject("provision_sandbox", "meteor")
    with pytest.raises(ServiceError):
        fleet.inject("no_such_action", "crash")
    with pytest.raises(ServiceError):
        fleet.crash("no_such_service")
    assert fleet.services == SERVICES


# --- scenario: the deployment saga against the live processes -----------------------------------


def _runner(fleet, tmp_path, trajectory_id: str, saga_id: str) -> tuple[SagaRunner, SQLiteStore]:
    store = SQLiteStore.open(tmp_path / f"{trajectory_id}.sqlite", create=True)
    reg = deployment_registry()
    gate = DispatchGate(TrajectoryLog(store, trajectory_id, must_survive="none"),
                        AdmissionPolicy({GRANT_ID: set(reg.names())}), coalesce_admission=True)
    start_task(gate, trajectory_id)
    return SagaRunner(gate, reg, fleet.client(trajectory_id), saga_id=saga_id, grant_id=GRANT_ID,
                      retry=RetryPolicy(max_attempts=4, base_s=0.01), sleep=fleet.clock.advance), store


def test_the_deployment_saga_runs_forward_and_unwinds_against_the_live_services(live_fleet, tmp_path, uid):
    """Forward with a free domain: every step's effect exists at its service. With the taken
    domain T5 fails 409 and the unwind runs C4..C1: each created resource is released exactly once
    by its own service, Φ returns to where it was, nothing is left unlisted."""
    fleet = live_fleet
    phi0 = fleet.invariants()
    runner, store = _runner(fleet, tmp_path, f"{uid}-fwd", f"{uid}-fwd")
    out = run_deployment(runner, domain=f"{uid}.example.test")
    assert out["state"] == "COMPLETED"
    held = {r["operation_id"]: r for r in fleet.live_resources()}
    assert [held[f"{uid}-fwd.T{i}"]["kind"] for i in range(1, 6)] == ["sandbox", "ip", "build", "rule", "record"]
    store.close()

    runner, store = _runner(fleet, tmp_path, f"{uid}-unw", f"{uid}-unw")
    phi1 = fleet.invariants()
    out = run_deployment(runner, domain=TAKEN_DOMAIN)
    assert out["state"] == "ABORT_CONSISTENT" and out["failed_step"] == f"{uid}-unw.T5"
    verdict = account(fleet.audits(), fleet.resources(live_only=False), store.read(f"{uid}-unw"), f"{uid}-unw")
    assert verdict["effects_committed"] == len(DEPLOYMENT_STEPS) - 1 == verdict["compensations_applied"]
    assert (verdict["compensators_repeated"], verdict["effects_left_unlisted"],
            verdict["forward_repeated"]) == (0, 0, 0)
    assert fleet.invariants() == phi1 != phi0
    order = [a["action"] for trail in fleet.audits().values() for a in trail
             if str(a.get("operation_id", "")).startswith(f"{uid}-unw.") and a["action"].startswith(
                 ("teardown", "release", "clean", "unbind"))]
    assert sorted(order) == sorted(["unbind_firewall", "clean_build", "release_ip", "teardown_sandbox"])
    store.close()
