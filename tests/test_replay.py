"""Harness regression replay (§11.6.2).

Fault model: a harness change that alters what the harness asks for, in what order, or that
tries to reach a live endpoint while being tested on history.
Invariant: a recorded reply is served only to the exact request it answered (identity, then the
canonical request), never by position; nothing leaves the process while a replay is sealed.
Goal: a faithful harness reproduces the recorded log; a regression fails at its first differing
request, with both sides shown.
"""

from __future__ import annotations

import hashlib
import socket
import subprocess
import sys

import pytest

from kernel_lib.gate.dispatch import ModelCall, ToolProposal, ToolReply
from kernel_lib.errors import ConfigError, LiveCallDuringReplayError, ReplayMismatchError
from kernel_lib.core.events import ContextBuilt
from kernel_lib.history.replay import (
    EXAMPLE_GRANT, ReplayAdapter, record_example, replay_harness, sealed, worksheet_harness,
)


@pytest.fixture(scope="module")
def recording():
    return record_example()


def payloads(events):
    return [(e.event_type, e.payload.model_dump(mode="json")) for e in events]


def test_a_faithful_harness_reproduces_the_recorded_log(recording):
    replayed, report = replay_harness(recording)
    assert payloads(replayed) == payloads(recording)
    assert report.complete and report.served == ["model model_call_1", "tool test_r18/attempt1"]
    assert report.external_inputs == 2   # the pause and the late result


def test_a_model_call_fired_on_a_late_result_while_paused_is_caught(recording):
    with pytest.raises(ReplayMismatchError) as err:
        replay_harness(recording, fire_model_on_late_result=True)
    assert err.value.kind == "model" and err.value.key == "model_call_2" and err.value.expected is None
    assert "never falls back to a live call" in str(err.value)


def changed_harness(**change):
    """The example harness with one request changed (prompt, arguments, order, a skipped call)."""
    def harness(gate, model, tool, inputs):
        from kernel_lib.core.events import TaskStarted
        gate.start(TaskStarted(task_id="repair-r18", requester="alice", objective="fix the median bug",
                               grant_ids=[EXAMPLE_GRANT], budget_ceiling_usd=2.0, finalization_reserve_usd=0.2))
        call = ModelCall("model_call_1", "stand-in-model", change.get("prompt", "tests for ws_r18?"), EXAMPLE_GRANT,
                         0.05, request_config=change.get("config", {}))
        test = ToolProposal("test_r18", "attempt1", "run_tests", change.get("args", {"snapshot": "ws_r18"}),
                            EXAMPLE_GRANT, 0.5, input_ref="ws_r18")
        steps = [lambda: gate.run_model(call, model), lambda: gate.run_tool(test, tool)]
        if change.get("swap"):
            steps.reverse()
        for step in steps[: change.get("steps", 2)]:
            step()
    return harness


@pytest.mark.parametrize("change, field", [(dict(prompt="tests for ws_r19?"), "delivered_input_sha256"),
                                           (dict(args={"snapshot": "ws_r19"}), "arguments"),
                                           (dict(config={"temperature": 0.7}), "request_config")])
def test_a_changed_request_fails_at_once_with_both_sides(recording, change, field):
    with pytest.raises(ReplayMismatchError) as err:
        replay_harness(recording, harness=changed_harness(**change))
    assert field in err.value.reason and err.value.expected is not None and err.value.actual is not None
    assert err.value.expected[field] != err.value.actual[field]


def test_a_declared_normalization_admits_exactly_what_it_names(recording):
    adapter = ReplayAdapter(recording, normalizations=["ignore_request_config"])
    text = "tests for ws_r18?"
    ctx = ContextBuilt(invocation_id="model_call_1", model="stand-in-model", delivered_input=text,
                       delivered_input_sha256=hashlib.sha256(text.encode()).hexdigest(),
                       request_config={"trace": "abc"})
    assert adapter.model(ctx).reply == "run the tests on ws_r18"
    with pytest.raises(ConfigError):
        ReplayAdapter(recording, normalizations=["ignore_everything"])


def test_requests_out_of_the_recorded_order_fail_unless_any_order_is_declared(recording):
    with pytest.raises(ReplayMismatchError, match="recorded order"):
        replay_harness(recording, harness=changed_harness(swap=True))
    # declared equivalence: the two requests may come in either order
    adapter = ReplayAdapter(recording, order="any")
    intent = next(e.payload for e in recording if e.event_type == "ToolIntent")
    ctx = next(e.payload for e in recording if e.event_type == "ContextBuilt")
    assert adapter.tool(intent).status == "accepted" and adapter.model(ctx).status == "complete"
    assert adapter.finish().complete


def test_a_request_is_served_once_and_a_skipped_one_is_reported(recording):
    adapter = ReplayAdapter(recording)
    ctx = next(e.payload for e in recording if e.event_type == "ContextBuilt")
    adapter.model(ctx)
    with pytest.raises(ReplayMismatchError, match="already served"):
        adapter.model(ctx)
    _, report = replay_harness(recording, harness=changed_harness(steps=1))
    assert report.unserved == ["tool test_r18/attempt1"] and not report.complete


def test_a_request_recorded_without_a_reply_cannot_be_answered():
    events = [e for e in record_example() if e.sequence_number <= 9]   # the run died right after the intent
    with pytest.raises(ReplayMismatchError, match="no reply"):
        replay_harness(events)


def test_usage_is_served_with_the_reply_it_was_logged_after(recording):
    adapter = ReplayAdapter(recording)
    ctx = next(e.payload for e in recording if e.event_type == "ContextBuilt")
    intent = next(e.payload for e in recording if e.event_type == "ToolIntent")
    assert adapter.model(ctx).charged_usd == pytest.approx(0.01)
    assert adapter.tool(intent).charged_usd is None          # the acceptance reported no usage
    late = [x for x in adapter.external_inputs() if x.event.event_type == "ToolResult"]
    assert [x.charged_usd for x in late] == [pytest.approx(0.12)]


# --- sealing ------------------------------------------------------------------------------------

def test_sealed_refuses_sockets_http_and_child_processes_and_restores_them():
    import httpx

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        with sealed():
            with pytest.raises(LiveCallDuringReplayError):
                socket.create_connection(("127.0.0.1", port), timeout=1)
            with pytest.raises(LiveCallDuringReplayError):
                s = socket.socket()
                try:
                    s.connect(("127.0.0.1", port))
                finally:
                    s.close()
            with pytest.raises(LiveCallDuringReplayError):
                httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
            with pytest.raises(LiveCallDuringReplayError):
                subprocess.run([sys.executable, "-c", "pass"])
        socket.create_connection(("127.0.0.1", port), timeout=1).close()   # restored
        assert subprocess.run([sys.executable, "-c", "pass"]).returncode == 0
    finally:
        server.close()


def test_a_harness_that_tries_a_live_call_during_replay_is_refused(recording):
    def live(gate, model, tool, inputs, **kw):
        worksheet_harness(gate, model, tool, inputs)
        import httpx
        httpx.post("http://127.0.0.1:9/jobs", json={"operation_id": "deploy"}, timeout=1)
    with pytest.raises(LiveCallDuringReplayError):
        replay_harness(recording, harness=live)


def test_a_recording_of_two_trajectories_is_refused(recording):
    other = record_example()
    from kernel_lib.core.events import Event
    foreign = Event.create(trajectory_id="other", event_id="o1", sequence_number=1, payload=other[0].payload)
    with pytest.raises(ConfigError):
        ReplayAdapter(recording + [foreign])


# --- time travel (§11.6.1) ------------------------------------------------------------------------

def test_time_travel_shows_the_in_doubt_intent_and_the_exact_delivered_input(recording):
    from kernel_lib.log import FailureDomain, MemoryStore, TrajectoryLog
    from kernel_lib.history.replay import time_travel

    store = MemoryStore()
    log = TrajectoryLog(store, recording[0].trajectory_id, must_survive=FailureDomain.NONE)
    log.append_many([e.payload for e in recording])
    at_intent = next(e.sequence_number for e in recording if e.event_type == "ToolIntent")
    view = time_travel(store, log.trajectory_id, at_intent)
    assert view.in_doubt == ["test_r18"] and view.missing == []
    assert view.delivered_inputs == {"model_call_1": "tests for ws_r18?"}
    end = time_travel(store, log.trajectory_id, store.head(log.trajectory_id))
    assert end.in_doubt == [] and end.record.control_state == "PAUSED"
    assert time_travel(store, log.trajectory_id, 0).record.last_sequence_number == 0
    for bad in (-1, store.head(log.trajectory_id) + 1, "3", True):
        with pytest.raises(ConfigError):
            time_travel(store, log.trajectory_id, bad)


def test_time_travel_names_a_delivered_input_that_retention_pruned(tmp_path):
    from kernel_lib.checkpoint import DirectoryBlobStore
    from kernel_lib.core.events import TaskStarted
    from kernel_lib.log import FailureDomain, MemoryStore, TrajectoryLog
    from kernel_lib.history.replay import time_travel

    blobs = DirectoryBlobStore(str(tmp_path / "blobs"))
    kept, pruned = b"the prompt we kept", b"the prompt retention pruned"
    refs = [blobs.put(kept), blobs.put(pruned)]
    store = MemoryStore()
    log = TrajectoryLog(store, "t", must_survive=FailureDomain.NONE)
    log.append(TaskStarted(task_id="t", requester="a", objective="o", budget_ceiling_usd=1.0))
    for i, (ref, data) in enumerate(zip(refs, (kept, pruned))):
        log.append(ContextBuilt(invocation_id=f"m{i}", model="m", delivered_input_ref=ref,
                                delivered_input_sha256=hashlib.sha256(data).hexdigest()))
    for p in (tmp_path / "blobs").rglob(refs[1] + "*"):
        p.unlink()
    view = time_travel(store, "t", 3, blobs=blobs)
    assert view.delivered_inputs == {"m0": "the prompt we kept"}
    assert [m[:2] for m in view.missing] == [("delivered input", "m1")] and refs[1][:16] in view.missing[0][2]


# --- counterfactual branches (§11.6.3) -----------------------------------------------------------

def parent_log(events):
    from kernel_lib.log import FailureDomain, MemoryStore, TrajectoryLog
    store = MemoryStore()
    TrajectoryLog(store, events[0].trajectory_id, must_survive=FailureDomain.NONE).append_many(
        [e.payload for e in events])
    return store


def test_a_branch_inherits_the_folded_prefix_and_records_its_origin(recording):
    from kernel_lib.core.record import fold, initial_record
    from kernel_lib.history.replay import BRANCH_ORIGIN, Intervention, fork_branch

    parent = parent_log(recording)
    traj = recording[0].trajectory_id
    before = [e.digest for e in parent.read(traj)]
    change = Intervention("prompt_template", "ask for the failing test first", {"prompt_template": "repair-v5"})
    br = fork_branch(parent, traj, 6, branch_id="branch-1", intervention=change)
    at6 = fold(initial_record(traj), list(parent.read(traj, 1, 6)))
    rec = br.record()
    assert rec.trajectory_id == "branch-1" and rec.operations.keys() == at6.operations.keys()
    assert rec.budget.actual_consumption_usd == at6.budget.actual_consumption_usd
    origin = rec.runtime_inputs[-1]
    assert origin["name"] == BRANCH_ORIGIN and origin["value"]["parent_position"] == 6
    assert origin["value"]["parent_prefix_sha256"] == at6.prefix_sha256
    assert origin["value"]["intervention"]["changes"] == {"prompt_template": "repair-v5"}
    assert [e.digest for e in parent.read(traj)] == before          # the parent is only read


def test_a_branch_serves_recorded_replies_until_its_first_new_request_then_only_the_sandbox(recording):
    from kernel_lib.history.replay import Intervention, example_policy, fork_branch

    parent = parent_log(recording)
    br = fork_branch(parent, recording[0].trajectory_id, 6, branch_id="branch-2",
                     intervention=Intervention("policy", "run the tests on the next snapshot too"))
    sandbox_calls = []

    def sandbox_tool(intent):
        sandbox_calls.append(intent.operation_id)
        return ToolReply(status="completed", outcome={"sandbox": True}, observation_complete=True)
    tr = br.transports(sandbox_tool=sandbox_tool)
    gate = br.gate(example_policy())
    same = ToolProposal("test_r18", "attempt1", "run_tests", {"snapshot": "ws_r18"}, EXAMPLE_GRANT, 0.5,
                        input_ref="ws_r18")
    rec = gate.run_tool(same, tr.tool)
    assert rec.operations["test_r18"].job_handle == "job_tests_18" and sandbox_calls == []   # recorded reply
    new = ToolProposal("test_r19", "attempt1", "run_tests", {"snapshot": "ws_r19"}, EXAMPLE_GRANT, 0.5,
                       input_ref="ws_r19")
    gate.run_tool(new, tr.tool)
    assert tr.diverged_at == "tool test_r19/attempt1" and sandbox_calls == ["test_r19"]


def test_without_a_sandbox_a_branch_halts_at_its_first_new_request(recording):
    from kernel_lib.history.replay import Intervention, example_policy, fork_branch

    br = fork_branch(parent_log(recording), recording[0].trajectory_id, 6, branch_id="branch-3",
                     intervention=Intervention("model", "a different model"))
    tr = br.transports()
    changed = ToolProposal("test_r18", "attempt1", "run_tests", {"snapshot": "ws_r18", "k": "median"},
                           EXAMPLE_GRANT, 0.5, input_ref="ws_r18")
    with pytest.raises(ReplayMismatchError):
        br.gate(example_policy()).run_tool(changed, tr.tool)


def test_parent_approvals_never_carry_over_to_a_branch():
    from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate
    from kernel_lib.errors import DispatchWithheld
    from kernel_lib.core.events import ApprovalRequested, ApprovalResolved, TaskStarted
    from kernel_lib.log import FailureDomain, MemoryStore, TrajectoryLog
    from kernel_lib.history.replay import Intervention, fork_branch

    policy = AdmissionPolicy({"g": {"deploy"}})
    store = MemoryStore()
    log = TrajectoryLog(store, "p", must_survive=FailureDomain.NONE)
    gate = DispatchGate(log, policy)
    gate.start(TaskStarted(task_id="t", requester="a", objective="o", grant_ids=["g"], budget_ceiling_usd=5.0))
    log.append_many([ApprovalRequested(approval_id="ap1", held_operation_id="deploy_1", held_attempt_id="a1",
                                       reviewer="bob"),
                     ApprovalResolved(approval_id="ap1", decision="approved", reviewer="bob")])
    br = fork_branch(store, "p", store.head("p"), branch_id="p-branch",
                     intervention=Intervention("other", "same plan, new branch"))
    assert br.voided_approvals == ["ap1"] and br.record().approvals["ap1"].status == "withdrawn"
    deploy = ToolProposal("deploy_1", "a1", "deploy", {}, "g", 1.0)
    with pytest.raises(DispatchWithheld, match="void"):
        br.gate(policy).run_tool(deploy, lambda intent: pytest.fail("dispatched on the parent's approval"))


def test_fork_refuses_bad_arguments(recording):
    from kernel_lib.history.replay import Intervention, fork_branch

    parent = parent_log(recording)
    traj = recording[0].trajectory_id
    ok = Intervention("other", "x")
    for kw in (dict(branch_id=traj), dict(branch_id=""), dict(intervention="x")):
        with pytest.raises(ConfigError):
            fork_branch(parent, traj, 3, **{"branch_id": "b", "intervention": ok, **kw})
    with pytest.raises(ConfigError):
        fork_branch(parent, traj, 99, branch_id="b", intervention=ok)
    br = fork_branch(parent, traj, 3, branch_id="b", intervention=ok)
    with pytest.raises(ConfigError, match="used once"):
        fork_branch(parent, traj, 3, branch_id="b", intervention=ok, store=br.store)
    with pytest.raises(ConfigError):
        Intervention("vibes", "x")


def test_bench_replay_and_bench_diverge_report_ratios_against_a_fold_in_the_same_run(capsys):
    import json as _json

    from kernel_lib.cli import main
    assert main(["bench", "replay", "--events", "300", "--rounds", "1", "--json"]) == 0
    r = _json.loads(capsys.readouterr().out)
    assert r["requests"] > 0 and r["median_s"]["fold"] > 0
    assert r["ratio_replay_over_fold"] == pytest.approx(r["median_s"]["replay"] / r["median_s"]["fold"])
    assert main(["bench", "diverge", "--events", "300", "--rounds", "1", "--json"]) == 0
    d = _json.loads(capsys.readouterr().out)
    assert d["found_expected"] and d["ratio_locate_over_fold"] > 0
    assert main(["bench", "replay", "--events", "3"]) == 2


# --- adversarial pass -----------------------------------------------------------------------------

def test_sealed_also_cuts_connections_opened_before_it_and_other_process_starts():
    import os
    import posix
    import threading as _t

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    conn = socket.create_connection(server.getsockname(), timeout=1)   # a pooled keep-alive connection
    try:
        with sealed():
            with pytest.raises(LiveCallDuringReplayError):
                conn.sendall(b"POST /jobs")
            with pytest.raises(LiveCallDuringReplayError):
                socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", 9))
            for fn in (os.fork, posix.system):
                with pytest.raises(LiveCallDuringReplayError):
                    fn("true") if fn is posix.system else fn()
            a, b = socket.socketpair()          # local pipes (an event loop's self-pipe) still work
            a.sendall(b"ok")
            assert b.recv(2) == b"ok"
            a.close(), b.close()
        conn.sendall(b"ping")                   # restored
    finally:
        conn.close()
        server.close()
    # overlapping blocks from two threads: cut until the last one exits, restored exactly once
    entered, release = _t.Event(), _t.Event()

    def other():
        with sealed():
            entered.set()
            release.wait(5)
    t = _t.Thread(target=other)
    with sealed():
        t.start()
        entered.wait(5)
    with pytest.raises(LiveCallDuringReplayError):   # the other thread's block still holds the seal
        subprocess.run([sys.executable, "-c", "pass"])
    release.set()
    t.join(5)
    assert subprocess.run([sys.executable, "-c", "pass"]).returncode == 0


def test_recordings_that_this_runtime_could_not_have_written_are_refused(recording):
    from kernel_lib.core.events import ModelReplied
    other = ModelReplied(invocation_id="model_call_1", status="complete", reply="something else")
    from kernel_lib.core.events import Event
    bad = recording[:5] + [Event.create(trajectory_id=recording[0].trajectory_id, event_id="x6", sequence_number=6,
                                        payload=other)]
    with pytest.raises(ConfigError, match="twice"):
        ReplayAdapter(bad)
    with pytest.raises(ConfigError, match="sequence order"):
        ReplayAdapter(list(reversed(recording)))
    for junk in (None, "log.jsonl", {"a": 1}, [1, 2]):
        with pytest.raises(ConfigError):
            ReplayAdapter(junk)
    adapter = ReplayAdapter(recording)
    with pytest.raises(ConfigError):
        adapter.model({"invocation_id": "model_call_1"})


def test_fork_refuses_a_missing_parent_and_a_taken_branch_id(recording):
    from kernel_lib.history.replay import Intervention, fork_branch

    parent = parent_log(recording)
    with pytest.raises(ConfigError, match="no trajectory"):
        fork_branch(parent, "no_such_parent", 0, branch_id="b", intervention=Intervention("other", "x"))
    with pytest.raises(ConfigError, match="JSON"):
        Intervention("model", "x", {"temperature": float("nan")})
    # two forks racing for one id: the second writes position 1 too and is refused
    first = fork_branch(parent, recording[0].trajectory_id, 3, branch_id="exp", intervention=Intervention("other", "a"))
    from kernel_lib.log import FailureDomain, TrajectoryLog
    from kernel_lib.history.replay import _append_first
    from kernel_lib.core.events import RuntimeInput
    with pytest.raises(ConfigError, match="already in use"):
        _append_first(TrajectoryLog(first.store, "exp", must_survive=FailureDomain.NONE),
                      RuntimeInput(kind="config", name="branch:origin", value={"parent_position": 9}))
    assert first.store.head("exp") == 1


def test_a_mismatch_names_the_field_even_when_python_equality_would_hide_it(recording):
    intent = next(e.payload for e in recording if e.event_type == "ToolIntent")
    flagged = intent.model_copy(update={"arguments": {"snapshot": "ws_r18", "verbose": True}})
    base = intent.model_copy(update={"arguments": {"snapshot": "ws_r18", "verbose": 1}})
    from kernel_lib.core.events import Event
    rec = [e if e.event_type != "ToolIntent" else Event.create(trajectory_id=e.trajectory_id, event_id=e.event_id,
                                                               sequence_number=e.sequence_number, payload=base)
           for e in recording]
    adapter = ReplayAdapter(rec, order="any")
    with pytest.raises(ReplayMismatchError) as err:
        adapter.tool(flagged)
    assert "['arguments']" in err.value.reason


def test_rerun_match_probability_compounds_per_call_reproduction():
    """§11.9: a per-call reproduction chance p over n calls reproduces the whole run with p**n;
    the chapter's 0.99 over 30 calls is about 74 percent."""
    from kernel_lib.errors import ConfigError
    from kernel_lib.history.replay import rerun_match_probability
    assert rerun_match_probability(0.99, 30) == pytest.approx(0.7397, abs=1e-4)
    assert rerun_match_probability(1.0, 500) == 1.0 and rerun_match_probability(0.5, 0) == 1.0
    assert rerun_match_probability(0.9, 2) == pytest.approx(0.81)
    for bad in ((1.5, 3), (-0.1, 3), (float("nan"), 3), (True, 3), (0.9, -1), (0.9, 2.0)):
        with pytest.raises(ConfigError):
            rerun_match_probability(*bad)


def _approved_harness(gate, model, tool, inputs):
    """One test_r18 attempt held by an approval that expires at t=2000 s and was approved."""
    from kernel_lib.core.events import ApprovalRequested, ApprovalResolved, TaskStarted
    from kernel_lib.history.replay import EXAMPLE_GRANT
    gate.start(TaskStarted(task_id="t", requester="a", objective="o", grant_ids=[EXAMPLE_GRANT],
                           budget_ceiling_usd=5.0))
    gate.append(ApprovalRequested(approval_id="ap1", held_operation_id="test_r18", held_attempt_id="attempt1",
                                  reviewer="bob", expires_unix_s=2_000.0),
                ApprovalResolved(approval_id="ap1", decision="approved", reviewer="bob"))
    gate.run_tool(ToolProposal("test_r18", "attempt1", "run_tests", {"snapshot": "ws_r18"}, EXAMPLE_GRANT, 0.5),
                  tool)


def test_replay_judges_an_approval_at_the_recorded_clock_reading():
    """Fault model: a recording whose dispatch was licensed by an approval that has since expired
    (the replay runs long after). Invariant: the replayed recheck reads the recorded clock value,
    so the replay dispatches exactly as the recording did, and a replay that reads the clock more
    often than the recording is a mismatch."""
    from kernel_lib.gate.dispatch import DispatchGate
    from kernel_lib.history.replay import EXAMPLE_TRAJECTORY, example_policy, replay_harness
    from kernel_lib.log import FailureDomain, MemoryStore, TrajectoryLog
    store = MemoryStore()
    gate = DispatchGate(TrajectoryLog(store, EXAMPLE_TRAJECTORY, must_survive=FailureDomain.NONE), example_policy(),
                        clock=lambda: 1_000.0)
    _approved_harness(gate, None, lambda intent: ToolReply("completed", observation_complete=True), [])
    recorded = list(store.read(EXAMPLE_TRAJECTORY))
    replayed, report = replay_harness(recorded, harness=_approved_harness)
    assert [e.digest for e in replayed] == [e.digest for e in recorded] and report.complete

    def twice(gate, model, tool, inputs):   # a second approval-held step the recording never ran
        from kernel_lib.core.events import ApprovalRequested, ApprovalResolved
        from kernel_lib.history.replay import EXAMPLE_GRANT
        _approved_harness(gate, model, tool, inputs)
        gate.append(ApprovalRequested(approval_id="ap2", held_operation_id="lint_r18", held_attempt_id="attempt1",
                                      reviewer="bob", expires_unix_s=2_000.0),
                    ApprovalResolved(approval_id="ap2", decision="approved", reviewer="bob"))
        gate.run_tool(ToolProposal("lint_r18", "attempt1", "run_tests", {"snapshot": "ws_r18"}, EXAMPLE_GRANT, 0.5),
                      tool)
    with pytest.raises(ReplayMismatchError, match="clock"):
        replay_harness(recorded, harness=twice)
