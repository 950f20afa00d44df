"""The claims notebook FR.6 (Failure Recovery, "Fallacies and Pitfalls") rests on, checked outside it.

Each test names the fallacy or pitfall, the fault model and the invariant; every count is read from
the service (or participant) that received the requests, never from our own log:

* 2PC across tools: a coordinator cut off after every yes vote leaves each participant's row locked
  (a simulated cut, and a real SIGKILL of the coordinator process with the participant itself killed
  and restarted), the participants refuse and count every other client's request for it until an
  operator resolves it; cooperative termination cannot decide; a manual decision after a partial
  commit breaks atomicity; the project's contracts offer no prepare verb at all; the same work as a
  saga locks nothing and completes or compensates;
* backward rollback: "compensating" an e-mail is a second e-mail (two at the relay), the
  pivot-ordered plan fails before the pivot (zero) or completes (exactly one);
* heartbeats: the watchdog-driven supervisor stops the looping worker at the cycle while every
  liveness probe passed; the journal's state hashes repeat;
* unbounded retries: agents that retry at once drive the service past its capacity and it does not
  recover, backoff and a breaker keep the service's count near the work's; the collapse needs
  agents / timeout above capacity.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel_lib._support.clock import ManualClock
from kernel_lib._support.procs import pid_alive
from kernel_lib.course import fr_fallacies as F
from kernel_lib.course.chapters import find_chapters, resolve_section
from kernel_lib.errors import ConfigError
from kernel_lib.recovery.pivot import check_plan, propose_order
from kernel_lib.sim.rollback_pitfall import (
    CORRECTION_SUBJECT, CUSTOMER, FREE_DOMAIN, announcement_plan, mail_to, run_naive, run_pivot_ordered,
)
from kernel_lib.sim.deployment import TAKEN_DOMAIN
from kernel_lib.sim.services import ACTIONS, Action, TwinFleet, deployment_contracts
from kernel_lib.sim.two_phase import (
    LOCKED, PreparableService, TwoPhaseCoordinator, default_branches, prepare_hooks, probe_prepare, run_saga_same_work,
    run_two_phase,
)

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "fr_6_fallacies.ipynb"
CHAPTERS = ROOT.parent / "shared" / "chapters"


# --- 1. two-phase commit ---------------------------------------------------------------------------


def test_a_cut_coordinator_leaves_rows_locked_and_the_participants_count_every_refused_request():
    """Fault: the coordinator is cut off after both yes votes. Invariant: each participant's row
    stays locked until the operator's decision, every other client's request in between is refused
    with 423 and counted by the participant, and the first request after it is served."""
    run = run_two_phase(cut="after_prepare", turn_s=2.0, client_every_s=0.5, intervene_after_s=30.0)
    assert not any(e["record"] == "DECISION" for e in run.coordinator_log)      # no decision exists anywhere
    for name, c in run.counts.items():
        tx = run.transactions[name]
        assert tx["state"] == "aborted" and tx["decided_by"] == "operator:oncall"
        assert run.lock_held_s[name] >= 30.0                                     # prepared until the operator
        refused = sum(c["blocked"].values())
        assert refused == run.clients[name]["locked"] >= 60                      # counted by the participant
        log = run.blocked_log[name]
        assert len(log) == refused and all(tx["prepared_s"] <= e["t_s"] <= tx["decided_s"] for e in log)
        assert c["heuristic"] == 1 and c["votes"]["yes"] == 1
    assert all(t["blocked"] and set(t["asked"].values()) == {"prepared"} for t in run.termination)
    assert run.timeline[-1]["payments: row"] == run.timeline[-1]["egress_ip: row"] == "free"


def test_without_intervention_the_rows_stay_locked_to_the_end():
    run = run_two_phase(cut="after_prepare", intervene_after_s=None, after_s=20.0)
    assert run.lock_held_s == {"payments": None, "egress_ip": None}
    assert all(t["state"] == "prepared" for t in run.transactions.values())
    assert run.clients["payments"]["served"] == 0                                # never served once
    assert sum(run.counts["payments"]["blocked"].values()) == run.clients["payments"]["sent"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cut=st.sampled_from([None, "after_prepare", "after_decision", "after_first_commit"]),
       turn_s=st.sampled_from([0.0, 0.5, 1.0, 3.0]), every=st.sampled_from([0.25, 0.5, 1.0]),
       intervene=st.sampled_from([0.0, 5.0, 20.0]), recover=st.booleans(), isolate=st.booleans())
def test_every_refused_request_fell_while_its_row_was_prepared(cut, turn_s, every, intervene, recover, isolate):
    """Property over cut points and timings: the participants' refusals are exactly the clients'
    423s, each one fell inside its holder's prepared interval, and at the end no row is locked
    (someone decided) and every branch ended committed or aborted."""
    run = run_two_phase(cut=cut, turn_s=turn_s, client_every_s=every, intervene_after_s=intervene,
                        recover_coordinator=recover, isolate_after_cut=isolate)
    for name, c in run.counts.items():
        tx = run.transactions[name]
        assert sum(c["blocked"].values()) == run.clients[name]["locked"]
        for e in run.blocked_log[name]:
            assert e["holder"] == "tx-1" and tx["prepared_s"] <= e["t_s"] <= tx["decided_s"]
        assert c["locks_held"] == 0 and tx["state"] in ("committed", "aborted")
    states = {t["state"] for t in run.transactions.values()}
    manual_after_partial = cut == "after_first_commit" and not recover and isolate
    assert (len(states) == 1) != manual_after_partial


def test_a_manual_decision_after_a_partial_commit_breaks_atomicity_at_the_services():
    run = run_two_phase(cut="after_first_commit", isolate_after_cut=True, intervene_after_s=10.0)
    assert run.transactions["payments"]["state"] == "committed"
    assert run.transactions["egress_ip"]["state"] == "aborted"
    held = {r["operation_id"] for r in run.resources["payments"].values()}
    assert "tx-1" in held                                                        # the hold exists ...
    assert "tx-1" not in {r["operation_id"] for r in run.resources["egress_ip"].values()}   # ... the IP does not


def test_a_restarted_coordinator_delivers_its_logged_decision_or_presumes_abort():
    for cut, want in (("after_decision", "committed"), ("after_prepare", "aborted")):
        run = run_two_phase(cut=cut, recover_coordinator=True, intervene_after_s=5.0)
        assert {t["state"] for t in run.transactions.values()} == {want}
        assert all(c["heuristic"] == 0 for c in run.counts.values())


def test_the_participant_protocol():
    clock = ManualClock(0.0)
    p = PreparableService("payments", clock=clock)
    args = {"account": "a1", "amount_usd": 5.0}
    assert p.prepare("t1", "place_hold", args)[1]["vote"] == "yes"
    assert p.prepare("t1", "place_hold", args)[1]["repeat"] is True
    status, body = p.prepare("t2", "place_hold", args)
    assert status == 409 and body["vote"] == "no" and body["holder"] == "t1"
    assert p.prepare("t3", "reserve_ip", {"region": "x"})[0] == 422           # not this service's action
    assert p.call("place_hold", {"account": "a2", "amount_usd": 1.0}, "c1")[0] == 200   # another row: served
    assert p.call("place_hold", args, "c2")[0] == LOCKED
    clock.advance(3.0)
    assert p.status("t1")[1]["held_s"] == 3.0
    assert p.commit("t1")[1]["state"] == "committed" and p.commit("t1")[1]["repeat"] is True
    assert p.abort("t1")[0] == 409                                               # committed cannot abort
    assert p.abort("t9")[1]["presumed"] is True                                  # presumed abort ...
    assert p.prepare("t9", "place_hold", args)[0] == 409                         # ... refuses a late prepare
    assert p.resolve("t1", "maybe", "op")[0] == 422
    assert p.counts()["applied"] == {"place_hold": 2} and p.counts()["blocked"] == {"place_hold": 1}
    with pytest.raises(ConfigError):
        TwoPhaseCoordinator({"payments": p}, []).run("t4", default_branches(), cut="halfway")
    with pytest.raises(ConfigError):
        run_two_phase(turn_s=-1)


def test_the_projects_tool_endpoints_offer_no_prepare_phase():
    rows = prepare_hooks()
    forward = {c.name for c in deployment_contracts() if not c.is_compensator}
    assert {r["tool"] for r in rows} == forward and {"place_hold", "reserve_ip", "send_email"} <= forward
    assert all(r["prepare/commit/abort verbs"] == "" and r["contract field for a prepare phase"] == "" for r in rows)
    # the computation can see a prepare verb when a service offers one
    fake = dict(ACTIONS)
    fake["prepare_place_hold"] = Action("payments", "prepare_place_hold")
    assert next(r for r in prepare_hooks(fake) if r["tool"] == "place_hold")["prepare/commit/abort verbs"] \
        == "prepare_place_hold"
    fleet = TwinFleet(check_leases=False)
    answers = probe_prepare(lambda action, args, op: fleet.twins["payments" if "hold" in action else "egress_ip"]
                            .logic.call(action, args, op, None, None)[:2])
    assert [a["http_status"] for a in answers] == [404, 404]
    assert fleet.counts()["payments"]["received"] == {"prepare_place_hold": 1}


def test_the_same_work_as_a_saga_locks_nothing_and_completes_or_compensates():
    done = run_saga_same_work(crash_after_first=True, outage_s=30.0)
    assert done.state == "COMPLETED" and done.recovered
    assert done.saga_effects == {"place_hold": 1, "reserve_ip": 1}               # T1 not sent again on resume
    for c in done.clients.values():
        assert c["applied"] == c["sent"] >= 60                                   # every other client served
    undone = run_saga_same_work(fail_second=True, outage_s=30.0)
    assert undone.state == "ABORT_CONSISTENT" and undone.live == []
    assert undone.saga_effects == {"place_hold": 1, "release_hold": 1}
    assert all(c["applied"] == c["sent"] for c in undone.clients.values())


def test_live_two_phase_sigkill_leaves_the_lock_across_a_participant_restart(tmp_path):
    from kernel_lib.live.two_phase import run_live_two_phase

    report = run_live_two_phase(tmp_path / "xa", turn_s=0.8, client_requests=4, client_every_s=0.02)
    assert report["coordinator_exit"] == -9
    assert [e["record"] for e in report["coordinator_log"]] == ["BEGIN", "VOTE", "VOTE"]
    assert report["lock_survived_restart"] is True
    for name, c in report["counts"].items():
        assert sum(c["blocked"].values()) == 5                                   # 4 while locked + 1 after restart
        assert report["clients"][name]["while locked"] == {str(LOCKED): 4}
        assert report["clients"][name]["after resolution"] == {"200": 1}
        assert c["heuristic"] == 1 and c["decisions"] == {"commit": 0, "abort": 1}
        assert report["lock_held_s"][name] > 0
    pids = [json.loads((tmp_path / "xa" / n / "ready.json").read_text())["pid"] for n in report["counts"]]
    assert not any(pid_alive(p) for p in pids)


# --- 2. backward rollback ----------------------------------------------------------------------------


def _fleet() -> TwinFleet:
    fleet = TwinFleet()
    fleet.taken_name(TAKEN_DOMAIN)
    return fleet


def test_compensating_an_email_sends_a_second_one():
    fleet = _fleet()
    out = run_naive(fleet)
    assert out.saga_state == "ABORT_CONSISTENT" and out.failed_step == "T3"     # the saga's own verdict ...
    msgs = mail_to(fleet)                                                        # ... the relay's record
    assert [m["subject"] for m in msgs] == ["Your endpoint is live", CORRECTION_SUBJECT]
    assert fleet.counts()["email"]["applied"] == {"send_email": 2}
    assert all(v["state"] == "released" for v in fleet.resources(live_only=False)["egress_ip"].values())


def test_the_pivot_ordered_plan_fails_before_the_pivot_and_sends_nothing():
    assert [r.rule for r in check_plan(announcement_plan()).reasons] == ["dependency_order"]
    assert propose_order(announcement_plan()).order == ("T1", "T3", "T2")
    fleet = _fleet()
    out = run_pivot_ordered(fleet)
    assert out.saga_state == "ABORT_CONSISTENT" and out.gate == []
    assert fleet.counts()["email"].get("received", {}) == {} and mail_to(fleet, CUSTOMER) == []
    assert fleet.resources()["egress_ip"] == {}
    fleet = _fleet()
    out = run_pivot_ordered(fleet, domain=FREE_DOMAIN)
    assert out.saga_state == "COMPLETED" and all(c["passed"] for c in out.gate) and len(out.gate) == 3
    assert fleet.counts()["email"]["applied"] == {"send_email": 1} and len(mail_to(fleet)) == 1


# --- 3. heartbeats ----------------------------------------------------------------------------------


def test_the_watchdog_supervisor_stops_a_worker_whose_liveness_never_failed(tmp_path):
    from kernel_lib.live.heartbeat import journal_steps, run_watchdog_supervisor

    run = run_watchdog_supervisor(tmp_path / "w", max_s=20.0, poll_every_s=0.05, step_s=0.05)
    assert not run.timed_out and run.detection.kind == "state_hash_cycle"
    assert run.healthy_probes == run.probes >= 2                                 # every liveness probe passed
    steps = journal_steps(tmp_path / "w" / "journal.jsonl")
    assert len(steps) == run.steps_taken and run.steps_taken <= run.detected_at_step + 3
    hashes = [s.state_hash for s in steps]
    assert hashes[run.detected_at_step - 1] in hashes[:run.detected_at_step - 1]  # the state had been seen before
    assert run.exit_code == 0


def test_the_two_timelines_of_a_short_heartbeat_run(tmp_path):
    from kernel_lib.live.heartbeat import run_heartbeat_fallacy

    report = run_heartbeat_fallacy(tmp_path / "hb", duration_s=1.2, probe_every_s=0.2, step_s=0.05,
                                   heartbeat_s=0.1, watchdog_sec=1.0)
    live = F.liveness_rows(report)
    assert live and all(r["liveness"] == "healthy" and r["HTTP /healthz"] == 200 for r in live)
    rows = F.journal_rows(tmp_path / "hb" / "journal.jsonl", report)
    assert len(rows) == len(report.steps)
    assert len({r["state hash"] for r in rows}) == report.distinct_states_journal <= 3
    fired = [r for r in rows if r["watchdog"].startswith("fires")]
    assert [r["step"] for r in fired] == [report.first_detection_step]
    assert fired[0]["state first seen at step"] < fired[0]["step"]


# --- 4. unbounded retries ---------------------------------------------------------------------------------


def test_retrying_at_once_collapses_the_service_and_backoff_with_a_breaker_does_not():
    out = F.herd_pitfall()
    runs = out["runs"]
    work = runs["no_outage"].totals["arrivals"]
    at_once, jb = runs["at_once_unbounded"].totals, runs["jitter_breaker"].totals
    assert at_once["arrivals"] > 4 * work and at_once["calls_completed"] < work / 2   # counted by the service
    assert jb["calls_completed"] == work and jb["arrivals"] < 1.05 * work and jb["fast_failed"] > 0
    assert out["collapse"]["retry_rate_at_once_per_s"] > out["collapse"]["capacity_per_s"] \
        > out["collapse"]["normal_load_per_s"]
    rows = {r["policy"]: r for r in out["rows"]}
    assert rows["retry at once, no bound"]["requests that reached the service"] == at_once["arrivals"]


def test_retrying_at_once_does_not_collapse_below_the_threshold():
    """agents / timeout below capacity: the same hiccup is absorbed (so the collapse above is the
    arithmetic's, not the simulator's)."""
    out = F.herd_pitfall(agents=120, calls_per_agent=10)
    runs = out["runs"]
    assert out["collapse"]["retry_rate_at_once_per_s"] < out["collapse"]["capacity_per_s"]
    assert runs["at_once_unbounded"].totals["calls_completed"] == runs["no_outage"].totals["calls_completed"]


# --- the notebook and its links ------------------------------------------------------------------------


def test_the_notebook_has_a_parameters_cell_and_links_the_failure_recovery_sections():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    params = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(params) == 1 and "seed" in params[0].source
    links = next(c for c in nb.cells if "chapter-links" in c.get("metadata", {}).get("tags", []))
    assert "failure_recovery.md#Fallacies-and-Pitfalls" in links.source
    assert "kernel_lib.course.fr_fallacies" in "".join(c.source for c in nb.cells)


@pytest.mark.skipif(not CHAPTERS.is_dir(), reason="the chapters are not beside the project")
def test_a_section_reference_can_name_its_chapter():
    chapters = find_chapters(CHAPTERS)
    assert resolve_section(chapters, "Fallacies and Pitfalls")[0].title == "11 Durable Execution"
    ch, sec = resolve_section(chapters, "Failure Recovery: Fallacies and Pitfalls")
    assert ch.title == "Failure Recovery" and sec.anchor == "Fallacies-and-Pitfalls"
    with pytest.raises(ConfigError):
        resolve_section(chapters, "Failure Recovery: 11.9 Fallacies and Pitfalls")


def test_a_client_rate_far_below_the_protocols_time_scale_is_refused_before_it_runs():
    """Bad input: other clients every microsecond would simulate tens of millions of requests (the
    run once took minutes). Goal: a ConfigError naming the parameter and the smallest value that
    runs; a value inside the bound still runs."""
    from kernel_lib.errors import ConfigError
    from kernel_lib.sim.two_phase import MAX_CLIENT_REQUESTS, run_saga_same_work, run_two_phase

    with pytest.raises(ConfigError, match="client_every_s=1e-06"):
        run_two_phase(client_every_s=1e-6)
    with pytest.raises(ConfigError, match="client_every_s"):
        run_saga_same_work(client_every_s=1e-6)
    assert run_two_phase(client_every_s=(8 * 2.0 + 60.0 + 2.0) / MAX_CLIENT_REQUESTS * 20) is not None
