"""Forward repair under the anti-spin invariant (Failure Recovery, "Forward Recovery", figure 2,
Napkin Math 0.2, "The anti-spin invariant"): :mod:`kernel_lib.recovery.repair` over the saga's
runner, on the simulated twins (and once on the live services).

Each scenario reads as fault model, invariant, goal; effects are counted by the services (their
``received``/``applied`` counts and audit trails), never by our log.
"""

from __future__ import annotations

import pytest

from kernel_lib.errors import RecoveryPolicyError, RecoveryTerminated, TrajectoryFrozenRefusal
from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate
from kernel_lib.log import MemoryStore, TrajectoryLog
from kernel_lib.recovery.policy import PolicyConfig, RemedyOption, RepairCosts
from kernel_lib.recovery.repair import RepairFrame, RepairLoop, RepairLoopConfig, ToolCost, fold_repairs
from kernel_lib.recovery.runner import RetryPolicy, SagaRunner
from kernel_lib.recovery.signatures import signature_of
from kernel_lib.sim.deployment import TAKEN_DOMAIN, deployment_registry
from kernel_lib.sim.repairer import (
    FIXED_DOMAIN, SeededRepairer, StandInModel, deployment_tool_costs, dns_repairer, drift_domain,
    measure_break_even,
)
from kernel_lib.sim.saga_sweep import GRANT_ID, SAGA_ID, start_task
from kernel_lib.sim.services import TwinFleet

TID = "traj-fr"
RELEASES = ("teardown_sandbox", "release_ip", "clean_build", "unbind_firewall")
#: Napkin Math 0.2's repair pass: 2,390 in, 180 out at $3/$15 per Mtok, 3.6 s decode + 0.5 s validation
NAPKIN_REPAIR = RepairCosts(tokens=2570, usd=0.00987, s=4.1)


def remedies(p: float = 0.5) -> tuple[RemedyOption, ...]:
    return (RemedyOption("error_feedback", NAPKIN_REPAIR, p),)


class Crash(BaseException):
    """A process dying at an exact point (not an error a handler may catch)."""


def make(repairer, *, fleet=None, store=None, k_repair: int = 3, tokens_ceiling: int = 1_000_000,
         endpoints=None, p: float = 0.5):
    fleet = fleet or TwinFleet()
    if TAKEN_DOMAIN not in fleet.twins["dns"].logic.state["taken_names"]:
        fleet.taken_name(TAKEN_DOMAIN)
    store = store if store is not None else MemoryStore()
    reg = deployment_registry()
    gate = DispatchGate(TrajectoryLog(store, TID, must_survive="none"), AdmissionPolicy({GRANT_ID: set(reg.names())}),
                        coalesce_admission=True)
    if gate.record.task is None:
        start_task(gate, TID)
    sleeps: list[float] = []

    def sleep(s: float) -> None:
        sleeps.append(s)
        fleet.clock.advance(s)
    runner = SagaRunner(gate, reg, endpoints or fleet.client(TID), saga_id=SAGA_ID, grant_id=GRANT_ID,
                        retry=RetryPolicy(max_attempts=1), sleep=sleep)
    cfg = RepairLoopConfig(PolicyConfig(remedies(p), k_repair=k_repair), deployment_tool_costs(),
                           tokens_ceiling=tokens_ceiling)
    return fleet, store, RepairLoop(runner, cfg, repairer), sleeps


def deploy(loop: RepairLoop, *, pivot: bool = False) -> dict:
    """T1..T4 of the deployment saga (or T1 and the pivot), then T5 publishes the taken domain."""
    sb = loop.step("provision_sandbox", {"image": "deploy-base", "vcpus": 2})
    ip = loop.step("reserve_ip", {"region": "eu-west-1"})
    if pivot:
        loop.step("send_email", {"to": "ops@example.test", "subject": "deploying"})
    else:
        loop.step("compile_binary", {"sandbox_id": sb["sandbox_id"], "target": "api"})
        loop.step("bind_firewall", {"sandbox_id": sb["sandbox_id"], "ip_id": ip["ip_id"], "ports": [443]})
    return loop.step("publish_dns", {"name": TAKEN_DOMAIN, "ip_id": ip["ip_id"]})


def counts(fleet, action: str) -> tuple[int, int]:
    c = fleet.twin_of(action).logic.state
    return c["received"].get(action, 0), c["applied"].get(action, 0)


def log_types(store) -> list[str]:
    return [ev.event_type for ev in store.read(TID)]


def decisions(store) -> list:
    return [ev.payload for ev in store.read(TID) if ev.event_type == "RecoveryDecided"]


def outcomes(store) -> list:
    return [ev.payload for ev in store.read(TID) if ev.event_type == "RepairOutcome"]


def assert_unwound_once(fleet):
    for rel in RELEASES:
        assert counts(fleet, rel)[1] == 1, rel
    assert all(v == 0 for inv in fleet.invariants().values() for k, v in inv.items() if k != "pivot_effects")


# --- the scenarios ------------------------------------------------------------------------------------

def test_a_semantic_failure_repaired_on_the_first_try_commits_once_and_keeps_sigma():
    """Fault: T5 publishes a domain another account owns (409, final: semantic). Invariant: the
    decision is durable before the repaired call is proposed; the repaired call passes admission
    as a new operation. Goal: one DNS effect at the service, no compensator ran, Σ intact, and
    RecoveryDecided then RepairOutcome(success) in the log."""
    rep = dns_repairer(1.0)
    fleet, store, loop, _ = make(rep)
    out = deploy(loop)
    assert out == {"record_id": "record-0001"}
    assert counts(fleet, "publish_dns") == (2, 1)          # the refused call and the repaired one
    audit = fleet.twins["dns"].logic.state["audit"]
    assert [a["action"] for a in audit] == ["publish_dns"]
    for rel in RELEASES:
        assert counts(fleet, rel) == (0, 0)
    saga = loop.runner.saga
    assert saga.steps["deploy.T5"].state == "FAILED" and saga.steps["deploy.T6"].state == "COMMITTED"
    assert [s.tool for s in saga.stack] == ["publish_dns", "bind_firewall", "compile_binary", "reserve_ip",
                                            "provision_sandbox"]
    (d,) = decisions(store)
    assert (d.directive, d.gate, d.remedy, d.failure_class) == ("FORWARD_REPAIR", 3, "error_feedback",
                                                                "semantic.validation")
    assert d.step_id == "deploy.T5" and d.numbers["repair_loop"]["attempt_operation_id"] == "deploy.T5"
    (o,) = outcomes(store)
    assert (o.step_id, o.success, o.remedy, o.failure_class) == ("deploy.T5", True, "error_feedback",
                                                                 "semantic.validation")
    evs = list(store.read(TID))
    seq = {ev.event_type + ":" + getattr(ev.payload, "operation_id", ""): ev.sequence_number for ev in evs}
    dec_seq = next(ev.sequence_number for ev in evs if ev.event_type == "RecoveryDecided")
    out_seq = next(ev.sequence_number for ev in evs if ev.event_type == "RepairOutcome")
    assert seq["ToolResult:deploy.T5"] < dec_seq < seq["ToolIntent:deploy.T6"] < out_seq
    # the repair pass saw the frame and nothing else
    (frame,) = rep.frames
    assert set(frame.as_dict()) == {"step_id", "tool", "arguments", "error", "remedy", "remedy_detail",
                                    "repair_number"}
    assert frame.arguments["name"] == TAKEN_DOMAIN and frame.error["http_status"] == 409
    assert frame.error["reason"] == "domain_ownership" and frame.repair_number == 1
    loop.runner.complete()


def test_a_spin_is_stopped_at_the_repeated_signature_before_k_repair_then_unwound():
    """Fault: every repair reproduces the same 409 (a no-op patch). Invariant: anti-spin stops at
    the second error, whose σ repeats the first, with k_i = 1 < K_repair = 3. Goal: rollback,
    every committed step compensated exactly once at the services."""
    fleet, store, loop, _ = make(dns_repairer(0.0, failure="spin"))
    with pytest.raises(RecoveryTerminated) as info:
        deploy(loop)
    assert (info.value.directive, info.value.gate, info.value.state) == ("BACKWARD_ROLLBACK", "anti-spin",
                                                                         "ABORT_CONSISTENT")
    d1, d2 = decisions(store)
    assert d1.directive == "FORWARD_REPAIR" and d1.error_signature == d2.error_signature
    assert d2.numbers["anti_spin"]["reason"] == "repeated_signature"
    assert d2.numbers["anti_spin"]["repairs_done"] == 1 and d2.numbers["anti_spin"]["matched_iteration"] == 1
    assert [o.success for o in outcomes(store)] == [False]
    assert counts(fleet, "publish_dns") == (2, 0)
    assert_unwound_once(fleet)
    assert fold_repairs(store.read(TID))["deploy.T5"].repairs_done == 1


def test_drift_is_stopped_at_k_repair_then_unwound():
    """Fault: each repair fails with another error (another domain that is taken). Invariant: no
    σ repeats, so the counter stops it: k_i = K_repair = 3. Goal: rollback, compensators once."""
    fleet = TwinFleet()
    for n in range(1, 4):
        fleet.taken_name(drift_domain(n))
    fleet, store, loop, _ = make(dns_repairer(0.0, failure="drift"), fleet=fleet)
    with pytest.raises(RecoveryTerminated) as info:
        deploy(loop)
    assert info.value.gate == "anti-spin"
    ds = decisions(store)
    assert [d.directive for d in ds] == ["FORWARD_REPAIR"] * 3 + ["BACKWARD_ROLLBACK"]
    assert len({d.error_signature for d in ds}) == 4
    assert ds[-1].numbers["anti_spin"]["reason"] == "repair_budget_exhausted"
    h = fold_repairs(store.read(TID))["deploy.T5"]
    assert h.repairs_done == 3 and h.attempts == ["deploy.T5", "deploy.T6", "deploy.T7", "deploy.T8"]
    assert [o.success for o in outcomes(store)] == [False] * 3
    assert counts(fleet, "publish_dns") == (4, 0)
    assert_unwound_once(fleet)


def test_a_429_with_retry_after_is_retried_after_the_delay_and_never_repaired():
    """Fault: reserve_ip answers 429 once, Retry-After 2 s. Invariant: gate 1 reads transient; the
    wait is full jitter no sooner than Retry-After, slept on the virtual clock. Goal: the same
    call again, one effect, no repair pass, no RepairOutcome."""
    rep = dns_repairer(1.0)
    fleet, store, loop, sleeps = make(rep)
    fleet.inject("reserve_ip", "rate_limited", 1, retry_after_s=2.0)
    t0 = fleet.clock()
    loop.step("provision_sandbox", {"image": "x"})
    out = loop.step("reserve_ip", {"region": "eu-west-1"})
    assert out == {"ip_id": "ip-0001"}
    (d,) = decisions(store)
    assert (d.directive, d.gate, d.remedy, d.failure_class) == ("TRANSIENT_RETRY", 1, "retry_unchanged",
                                                                "transient.rate_limited")
    assert d.numbers["retry_after_s"] == 2.0 and d.numbers["delay_s"] >= 2.0
    assert sleeps == [d.numbers["delay_s"]] and fleet.clock() - t0 >= 2.0
    assert counts(fleet, "reserve_ip") == (2, 1)
    assert rep.frames == [] and outcomes(store) == []
    saga = loop.runner.saga
    assert saga.steps["deploy.T3"].tool == "reserve_ip" and saga.steps["deploy.T3"].state == "COMMITTED"
    # the retry is the same request under a fresh key (the service never applied the first)
    ops = loop.runner.gate.record.operations
    assert ops["deploy.T2"].arguments == ops["deploy.T3"].arguments


class DnsWithRevokedLease:
    """The trajectory's endpoints, except that DNS sees a lease the broker revoked (401)."""

    def __init__(self, fleet: TwinFleet):
        self.good = fleet.client(TID)
        self.bad = fleet.client("traj-revoked")
        fleet.revoke("traj-revoked")

    def send(self, intent):
        return (self.bad if intent.tool == "publish_dns" else self.good).send(intent)

    def __getattr__(self, name):
        return getattr(self.good, name)


def test_a_fatal_401_lease_revoked_is_never_repaired_and_rolls_back_before_the_pivot():
    """Fault: the DNS service refuses the lease (401 lease_revoked). Invariant: gate 1 reads fatal;
    no repair pass. Goal: rollback, compensators once each."""
    fleet = TwinFleet()
    rep = dns_repairer(1.0)
    fleet, store, loop, _ = make(rep, fleet=fleet, endpoints=DnsWithRevokedLease(fleet))
    with pytest.raises(RecoveryTerminated) as info:
        deploy(loop)
    (d,) = decisions(store)
    assert (d.directive, d.gate, d.error_class) == ("BACKWARD_ROLLBACK", 1, "fatal")
    assert d.failure_class == "fatal.credentials" and info.value.state == "ABORT_CONSISTENT"
    assert rep.frames == []
    assert fleet.twins["dns"].logic.state["refused"] == {"publish_dns": 1}
    assert_unwound_once(fleet)


def test_after_the_pivot_a_failure_is_repaired_forward_and_compensators_never_run():
    """Fault: the pivot (send_email, tier III) committed, then T4 publishes a taken domain.
    Invariant: rollback is never chosen past the pivot (gate "pivot"). Goal: repaired forward, no
    compensator ran, the email sent once."""
    fleet, store, loop, _ = make(dns_repairer(1.0))
    assert deploy(loop, pivot=True) == {"record_id": "record-0001"}
    (d,) = decisions(store)
    assert (d.directive, d.gate) == ("FORWARD_REPAIR", "pivot")
    assert loop.runner.saga.steps["deploy.T4"].state == "HALTED"
    assert counts(fleet, "send_email")[1] == 1 and counts(fleet, "publish_dns") == (2, 1)
    for rel in RELEASES:
        assert counts(fleet, rel) == (0, 0)


def test_after_the_pivot_a_spin_escalates_to_a_freeze_and_never_unwinds():
    """Fault: past the pivot, the repair repeats the error. Invariant: anti-spin stops it, and past
    the pivot the safe case is OPERATOR_ESCALATE. Goal: the trajectory frozen (POST_PIVOT_STALLED),
    no compensator ran, later steps refused."""
    fleet, store, loop, _ = make(dns_repairer(0.0, failure="spin"))
    with pytest.raises(RecoveryTerminated) as info:
        deploy(loop, pivot=True)
    assert (info.value.directive, info.value.state) == ("OPERATOR_ESCALATE", "FROZEN")
    assert [d.directive for d in decisions(store)] == ["FORWARD_REPAIR", "OPERATOR_ESCALATE"]
    frozen = [ev.payload for ev in store.read(TID) if ev.event_type == "TrajectoryFrozen"]
    assert [f.failure_mode for f in frozen] == ["POST_PIVOT_STALLED"]
    for rel in RELEASES:
        assert counts(fleet, rel) == (0, 0)
    with pytest.raises(TrajectoryFrozenRefusal):
        loop.step("create_branch", {"name": "x"})


def test_a_budget_too_small_for_a_repair_is_denied_at_gate_2_and_rolled_back():
    """Fault: T5's semantic 409 with 1,000 tokens left (a repair pass needs 2,570). Invariant:
    gate 2 denies before the repairer is asked. Goal: rollback, compensators once each."""
    rep = dns_repairer(1.0)
    fleet, store, loop, _ = make(rep, tokens_ceiling=1_000)
    with pytest.raises(RecoveryTerminated) as info:
        deploy(loop)
    (d,) = decisions(store)
    assert (d.directive, d.gate) == ("BACKWARD_ROLLBACK", 2) and info.value.gate == 2
    assert d.numbers["remedies"]["error_feedback"]["budget"]["tokens_rem"] == 1_000
    assert rep.frames == []
    assert_unwound_once(fleet)


def test_gate_3_prefers_rollback_when_repair_is_unlikely_and_the_stats_come_from_the_log():
    """Fault: the 409 with p estimated from recorded outcomes (none: the Beta(1, 1) prior, 0.5)
    but a repair that costs more than unwinding. Goal: gate 3 rolls back; p's source is the log."""
    fleet = TwinFleet()
    fleet.taken_name(TAKEN_DOMAIN)
    store = MemoryStore()
    fleet, store, loop, _ = make(dns_repairer(1.0), fleet=fleet, store=store)
    dear = RemedyOption("error_feedback", RepairCosts(tokens=2570, usd=5.0, s=400.0), None)
    loop.config = RepairLoopConfig(PolicyConfig((dear,)), deployment_tool_costs())
    with pytest.raises(RecoveryTerminated):
        deploy(loop)
    (d,) = decisions(store)
    assert (d.directive, d.gate) == ("BACKWARD_ROLLBACK", 3)
    assert d.numbers["remedies"]["error_feedback"]["p_source"] == "estimated"


def test_a_crash_in_the_middle_of_a_repair_sequence_resumes_k_i_and_the_window_from_the_log():
    """Fault: drift; the process dies inside the second repair pass (after its decision was
    appended). Invariant: a new runner over the same log folds k_i = 2 and H_i = (σ1, σ2) from
    the RecoveryDecided records, answers committed and failed attempts from the log, sends no
    request twice. Goal: the bound still stops at K_repair = 3 in all, compensators once."""
    fleet = TwinFleet()
    for n in range(1, 4):
        fleet.taken_name(drift_domain(n))
    store = MemoryStore()

    def dying(frame: RepairFrame):
        if frame.repair_number == 2:
            raise Crash()
        return {**frame.arguments, "name": drift_domain(frame.repair_number)}
    fleet, store, loop, _ = make(dying, fleet=fleet, store=store)
    with pytest.raises(Crash):
        deploy(loop)
    before = [ev.event_type for ev in store.read(TID)]
    assert before[-1] == "RecoveryDecided"
    received = counts(fleet, "publish_dns")[0]
    assert received == 2

    # a new process: new gate, runner and loop over the same store and services
    fleet, store, loop2, _ = make(dns_repairer(0.0, failure="drift"), fleet=fleet, store=store)
    h = loop2.repairs()["deploy.T5"]
    assert h.repairs_done == 2 and h.attempts == ["deploy.T5", "deploy.T6"]
    sig1 = signature_of({"http_status": 409, "error": f"domain {TAKEN_DOMAIN!r} is owned by another account",
                         "reason": "domain_ownership"})
    sig2 = signature_of({"http_status": 409, "error": f"domain {drift_domain(1)!r} is owned by another account",
                         "reason": "domain_ownership"})
    assert h.signatures == (sig1, sig2)
    omega = loop2.omega("deploy.T5", "publish_dns", {"http_status": 409, "error": "x"}, h)
    assert omega.failed.repairs_done == 2 and omega.failed.prior_signatures == (sig1, sig2)
    with pytest.raises(RecoveryTerminated) as info:
        deploy(loop2)
    assert info.value.gate == "anti-spin"
    ds = decisions(store)
    assert [d.directive for d in ds] == ["FORWARD_REPAIR"] * 3 + ["BACKWARD_ROLLBACK"]   # no decision twice
    assert [o.success for o in outcomes(store)] == [False] * 3                            # no outcome twice
    assert counts(fleet, "publish_dns") == (4, 0)   # T5..T8, each sent once across both processes
    for tool in ("provision_sandbox", "reserve_ip", "compile_binary", "bind_firewall"):
        assert counts(fleet, tool) == (1, 1)
    assert_unwound_once(fleet)


def test_a_crash_after_the_repaired_call_was_admitted_uses_the_logged_request_not_a_new_sample():
    """Fault: the process dies right after the repaired call's result is recorded and before the
    outcome is. Goal: the re-run answers the commit from the log, records the success once, and
    never asks the repairer again."""
    fleet = TwinFleet()
    store = MemoryStore()
    fleet, store, loop, _ = make(dns_repairer(1.0), fleet=fleet, store=store)
    real = loop.runner.step

    def step_then_die(tool, args, **kw):
        out = real(tool, args, **kw)
        if args.get("name") == FIXED_DOMAIN:
            raise Crash()
        return out
    loop.runner.step = step_then_die
    with pytest.raises(Crash):
        deploy(loop)
    assert outcomes(store) == []
    again = SeededRepairer(lambda f: {"name": "never-asked"}, 1.0)
    fleet, store, loop2, _ = make(again, fleet=fleet, store=store)
    assert deploy(loop2) == {"record_id": "record-0001"}
    assert again.frames == [] and [o.success for o in outcomes(store)] == [True]
    assert counts(fleet, "publish_dns") == (2, 1)


def test_the_loop_refuses_a_saga_tool_without_declared_costs():
    fleet, store, loop, _ = make(dns_repairer(1.0))
    loop.config = RepairLoopConfig(PolicyConfig(remedies()), {"provision_sandbox": ToolCost(1.0)})
    loop.step("provision_sandbox", {"image": "x"})
    fleet.inject("reserve_ip", "conflict", 1)
    with pytest.raises(RecoveryPolicyError, match="no declared cost for tool 'reserve_ip'"):
        loop.step("reserve_ip", {"region": "r"})
    with pytest.raises(RecoveryPolicyError):
        ToolCost(-1.0)
    with pytest.raises(RecoveryPolicyError):
        RepairLoopConfig(PolicyConfig(remedies()), {}, tokens_ceiling=-1)


def test_model_fallback_uses_the_fallback_models_price_and_success_rate():
    """The stand-in's fallback model has its own price and p; the policy picks the remedy by
    expected cost and the frame names the model."""
    cheap_bad = StandInModel("small", 0.5, 1.5, 0.05)
    dear_good = StandInModel("large", 3.0, 15.0, 0.95)
    fleet = TwinFleet()
    rep = SeededRepairer(lambda f: {**f.arguments, "name": FIXED_DOMAIN}, {"error_feedback": 0.05}, seed=3,
                         models={"large": dear_good})
    fleet, store, loop, _ = make(rep, fleet=fleet)
    loop.config = RepairLoopConfig(PolicyConfig((
        cheap_bad.remedy("error_feedback", 2390, 180, success_p=0.05),
        dear_good.remedy("model_fallback", 2390, 180, success_p=0.95))), deployment_tool_costs())
    assert deploy(loop) == {"record_id": "record-0001"}
    (d,) = decisions(store)
    assert d.remedy == "model_fallback" and rep.frames[0].remedy_detail == {"model": "large"}


# --- the measured break-even ---------------------------------------------------------------------------

def test_the_measured_break_even_matches_the_computed_one_at_its_ends_and_in_expectation():
    """Goal: measured on the twins' virtual clock, repair first costs c_r when it always works and
    c_r + U + R when it never does, exactly the napkin's terms; at p = 0.5 the measured mean is
    within sampling error of c_r + (1 − p)(U + R); and the memoized paths equal full simulation."""
    never, always = measure_break_even(0.0, trials=5), measure_break_even(1.0, trials=5)
    assert never.repair_first_s == pytest.approx(never.computed_forward_s, abs=1e-6)
    assert never.repair_first_usd == pytest.approx(never.computed_forward_usd, abs=1e-9)
    assert always.repair_first_s == pytest.approx(always.computed_forward_s, abs=1e-6)
    assert never.unwind_rerun_s == pytest.approx(never.computed_backward_s, abs=1e-6)
    assert never.unwind_rerun_usd == pytest.approx(never.computed_backward_usd, abs=1e-9)
    half = measure_break_even(0.5, trials=200, seed=1)
    realized = half.repairs_succeeded / half.trials
    assert abs(realized - 0.5) < 0.12
    spread = (never.repair_first_s - always.repair_first_s)
    assert half.repair_first_s == pytest.approx(always.repair_first_s + (1 - realized) * spread, abs=1e-6)
    assert half.repair_first_s < half.unwind_rerun_s
    assert 0 < half.p_star_s < 0.2 and 0 < half.p_star_usd < 0.2
    assert measure_break_even(0.3, trials=6, seed=2, simulate_all=True) == measure_break_even(0.3, trials=6, seed=2)


# --- the live services ------------------------------------------------------------------------------------

def test_a_semantic_failure_is_repaired_on_the_live_services(tmp_path):
    """The first scenario once on real service processes on loopback: the taken domain's 409 from a
    real DNS service, repaired on the first try; one effect, counted by the service itself."""
    from kernel_lib.live.services import LiveFleet

    fleet = LiveFleet(tmp_path / "fleet", client_timeout_s=5.0)
    try:
        fleet.taken_name(TAKEN_DOMAIN)
        store = MemoryStore()
        reg = deployment_registry()
        gate = DispatchGate(TrajectoryLog(store, TID, must_survive="none"),
                            AdmissionPolicy({GRANT_ID: set(reg.names())}), coalesce_admission=True)
        start_task(gate, TID)
        runner = SagaRunner(gate, reg, fleet.client(TID), saga_id=SAGA_ID, grant_id=GRANT_ID,
                            retry=RetryPolicy(max_attempts=1))
        loop = RepairLoop(runner, RepairLoopConfig(PolicyConfig(remedies()), deployment_tool_costs()),
                          dns_repairer(1.0))
        assert deploy(loop)["record_id"].startswith("record-")
        c = fleet.counts()["dns"]
        assert c["received"]["publish_dns"] == 2 and c["applied"]["publish_dns"] == 1
        assert all(fleet.counts()[s]["applied"].get(r, 0) == 0 for s in fleet.services for r in RELEASES)
        assert [d.directive for d in decisions(store)] == ["FORWARD_REPAIR"]
        assert [o.success for o in outcomes(store)] == [True]
    finally:
        fleet.close()


def test_a_repairer_that_proposes_nothing_counts_as_a_failed_repair_and_rolls_back():
    fleet, store, loop, _ = make(lambda frame: None)
    with pytest.raises(RecoveryTerminated) as info:
        deploy(loop)
    assert (info.value.directive, info.value.state) == ("BACKWARD_ROLLBACK", "ABORT_CONSISTENT")
    assert [o.success for o in outcomes(store)] == [False]
    assert counts(fleet, "publish_dns") == (1, 0)
    assert_unwound_once(fleet)
