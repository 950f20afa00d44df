"""The saga stepper widget (widgets/saga_stepper.py) and the demo it drives (kernel_lib.sim.saga_demo).

Fault model: faults injected at T_k or C_k, the runner abandoned in the middle of the unwind, a
compensator that fails unrecoverably, bad input from code and from the browser's command trait.
Invariant: the widget shows what the stored log folds to and what the services report, and keeps
no state of its own; effects are judged by the services' own counts and audit trails.
Goal: a student can drive every path of the saga by hand without a traceback.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel_lib.recovery.saga import fold_saga
from kernel_lib.sim.deployment import DEPLOYMENT_STEPS
from kernel_lib.sim.saga_demo import (
    LEASE_REFUSED, SagaDemo, attempt_prepare, count_delta, count_rows, invariant_delta, undo_by_hand,
)
from kernel_lib.sim.services import FAULT_KINDS, TwinFleet
from widgets.saga_stepper import SagaStepper


def click(w: SagaStepper, action: str, **fields) -> None:
    w.command = {"action": action, **fields, "n": w.completed + 1}


def applied(fleet: TwinFleet, action: str) -> int:
    return sum(c["applied"].get(action, 0) for c in fleet.counts().values())


def received(fleet: TwinFleet, action: str) -> int:
    return sum(c["received"].get(action, 0) for c in fleet.counts().values())


@pytest.fixture
def stepper(tmp_path):
    fleet = TwinFleet()
    demo = SagaDemo(fleet, saga_id="w", store_dir=tmp_path)
    w = SagaStepper(demo)
    yield w
    demo.close()


def test_each_step_shows_the_folded_sigma_and_the_services_state(stepper):
    w, fleet = stepper, stepper.demo.fleet
    for k in range(1, 5):
        click(w, "step")
        assert w.error == "" and f"T{k}" in w.summary and "COMMITTED" in w.summary
        saga = fold_saga(w.demo.events(), "w")           # the log, read again
        assert [r["compensator"] for r in w.stack] == [f"C{s.index}" for s in saga.stack]
        assert len(w.stack) == k and w.stack[0]["position"] == "TOP"
        assert len([r for r in w.resources if r["state"] == "active"]) == k   # what the services hold
    click(w, "step")
    assert "T5 publish_dns FAILED" in w.summary and "owned by another account" in w.summary
    assert w.forward[-1]["state"] == "FAILED" and len(w.stack) == 4
    click(w, "unwind")
    assert w.summary == "unwind ended ABORT_CONSISTENT" and w.stack == []
    assert all(r["state"] == "released" for r in w.resources)
    assert w.invariants == []                                          # Φ back where it was
    for release in ("unbind_firewall", "clean_build", "release_ip", "teardown_sandbox"):
        assert applied(fleet, release) == 1


def test_a_crash_during_the_unwind_then_recover_runs_no_compensator_twice(stepper):
    w, fleet = stepper, stepper.demo.fleet
    for _ in DEPLOYMENT_STEPS:
        click(w, "step")
    click(w, "crash_unwind", after="2")
    assert w.crashed and "C3 dispatched" in w.summary and w.in_doubt == ["C3"]
    assert applied(fleet, "clean_build") == 1 and applied(fleet, "release_ip") == 0
    click(w, "step")
    assert "recover first" in w.error
    click(w, "recover")
    assert w.error == "" and not w.crashed and "in doubt: C3" in w.summary
    before = fleet.counts()
    click(w, "unwind")
    assert w.summary == "unwind ended ABORT_CONSISTENT"
    delta = {r["action"]: (r["received"], r["applied"]) for r in count_delta(before, fleet.counts())}
    assert "clean_build" not in delta                     # settled by the status lookup, never re-sent
    assert delta == {"release_ip": (1, 1), "teardown_sandbox": (1, 1)}
    assert w.demo.judge()["compensators_repeated"] == 0


def test_a_compensator_fault_from_the_widget_panics_and_freezes(stepper):
    w, fleet = stepper, stepper.demo.fleet
    click(w, "inject", kind="conflict", step="2", target="compensator")
    assert w.error == "" and "C2 (release_ip)" in w.summary
    for _ in DEPLOYMENT_STEPS:
        click(w, "step")
    click(w, "unwind")
    assert w.summary.startswith("PANIC: COMPENSATION_CORRUPTED (release_ip)") and "sandbox-0001, ip-0001" in w.summary
    assert "COMPENSATION_CORRUPTED" in w.frozen and w.forward[1]["state"] == "PANIC"
    sent = received(fleet, "teardown_sandbox")
    click(w, "recover")
    assert "FROZEN; it does nothing" in w.summary
    click(w, "unwind")
    assert "FROZEN" in w.error and received(fleet, "teardown_sandbox") == sent == 0


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_every_fault_kind_at_a_forward_step_ends_in_a_consistent_state(tmp_path, kind):
    fleet = TwinFleet()
    demo = SagaDemo(fleet, saga_id="f", store_dir=tmp_path)
    w = SagaStepper(demo)
    click(w, "inject", kind=kind, step=2)
    assert w.error == ""
    click(w, "step")
    click(w, "step")
    if kind == "crash":              # the service process died; recover restarts it
        assert fleet.is_down("egress_ip") or "COMMITTED" in w.summary
        click(w, "recover")
    click(w, "unwind")
    assert w.error == "" and w.summary == "unwind ended ABORT_CONSISTENT", (kind, w.summary, w.error)
    verdict = demo.judge()
    assert verdict["compensators_repeated"] == verdict["effects_left_unlisted"] == verdict["forward_repeated"] == 0
    assert w.invariants == []
    demo.close()


def test_invalid_values_get_the_widgets_message_and_a_stale_one_clears(stepper):
    w = stepper
    w.fault_step = 9
    assert "fault_step = 9 was refused" in w.error and w.fault_step == 5
    w.fault_step = "three"
    assert "whole number 1..5" in w.error and w.fault_step == 5
    w.fault_step = 3
    assert w.error == "" and w.fault_step == 3
    click(w, "inject", kind="meteor")
    assert "fault_kind = 'meteor' was refused" in w.error and w.fault_kind == "conflict"
    assert received(w.demo.fleet, "compile_binary") == 0
    click(w, "step")                                   # the next valid action clears the stale message
    assert w.error == "" and "T1" in w.summary
    click(w, "inject", kind="conflict", step=1, target="forward")
    assert "T1 (provision_sandbox) already ran" in w.error and w.summary == ""
    assert "the first step that has not run is T2 (reserve_ip)" in w.error
    click(w, "crash_unwind", after=4)
    assert "Σ holds 1 compensator" in w.error
    click(w, "inject", target="sideways")
    assert "fault_target = 'sideways' was refused" in w.error
    click(w, "fly")
    assert "unknown action 'fly'" in w.error
    w.command = "junk"
    assert "malformed command" in w.error
    click(w, "refresh")
    assert w.error == ""


def test_the_stepper_refuses_what_is_not_a_demo():
    with pytest.raises(TypeError, match="SagaDemo"):
        SagaStepper(object())


def test_the_prepare_attempt_is_a_normal_call_and_a_saga_id_is_one_per_fleet():
    fleet = TwinFleet()
    fleet.taken_name("api.example.test")
    rows = attempt_prepare(fleet, "t2pc")
    assert all(r["prepare verb"].startswith("refused") for r in rows)
    assert [applied(fleet, a) for a in DEPLOYMENT_STEPS] == [1, 1, 1, 1, 0]      # applied at once
    assert sum(v for phi in fleet.invariants().values() for v in phi.values()) == 4
    undo_by_hand(fleet, "t2pc")
    assert sum(v for phi in fleet.invariants().values() for v in phi.values()) == 0
    demo = SagaDemo(fleet, saga_id="x")
    demo.step()
    with pytest.raises(Exception, match="already used"):
        SagaDemo(fleet, saga_id="x")


# --- Φ is this saga's: its change since the saga began -----------------------------------------------


def test_phi_shows_this_sagas_change_not_another_sagas_leftovers(tmp_path):
    """A frozen saga leaves a live sandbox and IP on the fleet; a second stepper on the same fleet
    shows Φ's change since its own saga began: up while its steps hold resources, none after its
    clean unwind, although the fleet's Φ is not zero."""
    fleet = TwinFleet()
    frozen = SagaDemo(fleet, saga_id="d")
    frozen.inject("conflict", 2, target="compensator")
    while frozen.step()["state"] == "COMMITTED":
        pass
    assert frozen.unwind()["state"] == "PANIC"
    leftovers = invariant_delta({}, fleet.invariants())
    assert {(r["service"], r["invariant"], r["now"]) for r in leftovers} == {
        ("sandbox", "live_sandbox_count", 1), ("egress_ip", "live_ip_count", 1)}

    w = SagaStepper(SagaDemo(fleet, saga_id="s"))
    assert w.invariants == []                                 # nothing changed yet
    click(w, "step")
    click(w, "step")
    assert {(r["service"], r["invariant"], r["before"], r["now"], r["change"]) for r in w.invariants} == {
        ("sandbox", "live_sandbox_count", 1, 2, 1), ("egress_ip", "live_ip_count", 1, 2, 1)}
    while "COMMITTED" in w.summary:
        click(w, "step")
    click(w, "unwind")
    assert w.summary == "unwind ended ABORT_CONSISTENT"
    assert w.invariants == []                                 # back to baseline: the stepper's own saga
    # the frozen saga's sandbox and IP are still live on the fleet
    assert sum(v for phi in fleet.invariants().values() for v in phi.values()) == 2
    frozen.close()
    w.demo.close()


def test_invariant_delta_lists_only_what_changed():
    before = {"a": {"x": 1, "y": 0, "tag": "p"}}
    after = {"a": {"x": 1, "y": 2, "tag": "q"}, "b": {"z": 3}}
    assert invariant_delta(before, after) == [
        {"service": "a", "invariant": "y", "before": 0, "now": 2, "change": 2},
        {"service": "a", "invariant": "tag", "before": "p", "now": "q", "change": "changed"},
        {"service": "b", "invariant": "z", "before": 0, "now": 3, "change": 3}]
    assert invariant_delta(after, after) == []


# --- a fault on a step that already ran (or never will) is refused, naming the first that has not ---


def _queued(fleet: TwinFleet) -> dict[str, list]:
    return {f"{s}.{a}": list(q) for s in fleet.services for a, q in fleet.twins[s].logic.state["faults"].items() if q}


def _refused(w: SagaStepper, fleet: TwinFleet, **fields) -> str:
    """Click inject; it must be refused with a message, and no fault may be queued at any service."""
    before = _queued(fleet)
    click(w, "inject", **fields)
    assert w.error and w.summary == "", (fields, w.error, w.summary)
    assert _queued(fleet) == before, "a refused fault was queued anyway"
    return w.error


def test_a_fault_on_a_step_that_already_ran_is_refused_naming_the_first_that_has_not(stepper):
    w, fleet = stepper, stepper.demo.fleet
    for _ in DEPLOYMENT_STEPS:
        click(w, "step")
    assert "T5 publish_dns FAILED" in w.summary
    # T5 was sent and answered 409: a fault on it would never be seen (it used to be queued silently)
    err = _refused(w, fleet, kind="conflict", step=5, target="forward")
    assert "T5 (publish_dns) already ran" in err and "the first step that has not run is C4 (unbind_firewall)" in err
    err = _refused(w, fleet, kind="conflict", step=1, target="forward")
    assert "T1 (provision_sandbox) already ran" in err and "C4 (unbind_firewall)" in err
    assert "T5 or later" not in err
    # the unwind runs C4, C3, ...: after a crash right after C3 was sent, C4 and C3 have run, C2 has not
    click(w, "crash_unwind", after=2)
    assert w.crashed
    for k, tool in ((4, "unbind_firewall"), (3, "clean_build")):
        err = _refused(w, fleet, kind="server_error", step=k, target="compensator")
        assert f"C{k} ({tool}) already ran" in err and "the first step that has not run is C2 (release_ip)" in err
    click(w, "inject", kind="server_error", step=2, target="compensator")      # C2 has not run: queued
    assert w.error == "" and "queued server_error on C2 (release_ip)" in w.summary
    click(w, "recover")
    click(w, "unwind")
    assert w.summary == "unwind ended ABORT_CONSISTENT", w.summary
    err = _refused(w, fleet, kind="conflict", step=1, target="compensator")
    assert "C1 (teardown_sandbox) already ran" in err and "nothing is left to run" in err
    assert w.demo.judge()["compensators_repeated"] == 0


def test_a_forward_fault_after_the_saga_stopped_going_forward_is_refused(stepper):
    w, fleet = stepper, stepper.demo.fleet
    click(w, "inject", kind="conflict", step=3)               # T3 will fail with a final 409
    assert w.error == ""
    for _ in range(3):
        click(w, "step")
    assert "T3 compile_binary FAILED" in w.summary
    err = _refused(w, fleet, kind="conflict", step=4)
    assert "T4 (bind_firewall) will never run (no forward step runs after T3 FAILED)" in err
    assert "the first step that has not run is C2 (release_ip)" in err
    err = _refused(w, fleet, kind="conflict", step=4, target="compensator")
    assert "C4 (unbind_firewall) will never run" in err
    click(w, "inject", kind="server_error", step=1, target="compensator")      # still ahead: accepted
    assert w.error == ""
    assert w.demo.first_not_run() == "C2 (release_ip)"


def test_a_fault_ahead_of_the_saga_is_accepted_and_first_not_run_follows_the_log(stepper):
    w = stepper
    assert w.demo.first_not_run() == "T1 (provision_sandbox)"
    click(w, "step")
    click(w, "inject", kind="server_error", step=2)
    assert w.error == "" and "queued server_error on T2 (reserve_ip)" in w.summary
    click(w, "inject", kind="server_error", step=1, target="compensator")
    assert w.error == ""
    assert w.demo.first_not_run() == "T2 (reserve_ip)"


# --- what "refused" counts ----------------------------------------------------------------------------


def test_the_count_header_says_only_lease_refusals_are_counted_there(stepper):
    w, fleet = stepper, stepper.demo.fleet
    for _ in DEPLOYMENT_STEPS:
        click(w, "step")
    dns = next(r for r in count_rows(fleet.counts()) if r["action"] == "publish_dns")
    assert (dns["received"], dns["applied"], dns[LEASE_REFUSED]) == (1, 0, 0)    # a 409: not a lease refusal
    assert "refused" not in dns and LEASE_REFUSED == "lease refused (401)"
    assert all(set(r) == {"service", "action", "received", "applied", LEASE_REFUSED} for r in w.counts)
    js = (Path(__file__).resolve().parents[1] / "widgets" / "static" / "saga_stepper.js").read_text()
    assert f'const LEASE_REFUSED = "{LEASE_REFUSED}";' in js         # the widget's header is the kernel's key


# --- the notebook's readable forms (no raw dict or list reprs) ---------------------------------------


def test_contracts_incident_verdict_and_answers_read_as_text():
    from kernel_lib.recovery.views import contract_rows
    from kernel_lib.sim.deployment import deployment_registry
    from kernel_lib.sim.saga_demo import answer_text, incident_rows, verdict_rows

    rows = {r["tool"]: r for r in contract_rows(deployment_registry().schemas())}
    assert rows["provision_sandbox"]["compensator (bound from the step)"] == \
        "teardown_sandbox(sandbox_id ← output.sandbox_id)"
    assert rows["teardown_sandbox"]["compensator (bound from the step)"] == "—, it is one"
    assert rows["send_email"]["compensator (bound from the step)"] == "∅ (pivot)"
    assert rows["provision_sandbox"]["tier"] == "II (compensable)"

    fleet = TwinFleet()
    demo = SagaDemo(fleet, saga_id="p")
    demo.inject("conflict", 2, target="compensator")
    while demo.step()["state"] == "COMMITTED":
        pass
    incident = demo.unwind()["incident"]
    table = {r["field"]: r["value"] for r in incident_rows(incident, "p", ("error", "residue", "incomplete_steps",
                                                                           "revoked_leases", "log_offset"))}
    assert list(table) == ["error", "residue", "incomplete_steps", "revoked_leases", "log_offset"]
    assert table["error"] == "conflict (injected) (reason conflict, final: no retry can change it)"
    assert table["residue"] == "sandbox-0001 (sandbox, active, made by T1); ip-0001 (ip, active, made by T2)"
    assert table["incomplete_steps"] == "T2, T5"
    assert not any(ch in str(v) for v in table.values() for ch in "{}[]'")
    assert answer_text(demo.probe_lease()) == "401 failed: lease_revoked (capability lease refused: revoked)"
    verdict = verdict_rows(demo.judge())
    assert [r["count"] for r in verdict] == [4, 2, 0, 0, 0]
    assert verdict[-1]["the services' records show"].startswith("resources still live and listed nowhere")
    demo.close()


def test_a_bad_value_sent_from_the_page_keeps_the_last_good_one(stepper):
    """Situation: the page sends ``fault_step = 99`` and an unknown fault kind through
    ``set_state`` (as the browser does: inside ``hold_trait_notifications``, so the trait already
    holds the refused value when the validator runs). Invariant: both keep the last accepted
    value and the message says so. Goal: bad values from the page and from code are refused alike."""
    w = stepper
    w.fault_step = 3
    kind = w.fault_kind
    w.set_state({"fault_step": 99})
    assert w.fault_step == 3 and "fault_step = 99 was refused" in w.error and "it stays 3" in w.error
    w.set_state({"fault_kind": "meteor"})
    assert w.fault_kind == kind and f"it stays {kind!r}" in w.error
