"""The watchdog's three-tier intervention (issue 18; Failure Recovery, table 7).

Fault model: a seeded agent loops on a real workspace (figure 3's flip-flop); its worker may die
at any log position, in process (a BaseException from the gate's position hook) or for real
(SIGKILL of a worker process). Invariants: the ladder escalates 1 -> 2 -> 3 as table 7 says; a
masked action never passes the gate; every tier's effect lands exactly once at its receiver (the
workspace's own effects ledger, the services' own counts), however the run is cut. Goal: the
loop ends compensated before the pivot and frozen after it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib.core.action_signature import action_signature
from kernel_lib.core.events import ActionMasked, TaskStarted, WatchdogIntervened, WatchdogIntervenedV1, decode
from kernel_lib.core.record import fold, initial_record
from kernel_lib.checkpoint.blobs import MemoryBlobStore
from kernel_lib.errors import ActionMaskedRefusal, AdmissionDenied, ConfigError
from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate, ToolProposal, ToolReply
from kernel_lib.live.looping_agent import run_looping_agent
from kernel_lib.log import MemoryStore, TrajectoryLog
from kernel_lib.recovery.watchdog.escalation import (
    Intervention, LadderPolicy, decide_tier, interventions_of, unfinished,
)
from kernel_lib.recovery.watchdog.model import Detection
from kernel_lib.sim.services import TwinFleet
from tests.helpers import ev

ROOT = Path(__file__).resolve().parents[1]


def _iv(tier: int, at: int, *, done: bool = True, iid: str | None = None) -> Intervention:
    return Intervention(iid or f"wd-{at}-t{tier}", tier, "state_hash_cycle", at, at + 1, at + 3 if done else None,
                        "0123456789abcdef", at - 4)


def _det(at: int, **evidence) -> Detection:
    return Detection(position=at, kind="state_hash_cycle", evidence={"action_signature": "0123456789abcdef",
                                                                      **evidence})


# --- escalation decisions as a table --------------------------------------------------------------

TABLE = [
    # history, steps since the last detection, detection at, policy, tier expected, why
    ([], None, 10, LadderPolicy(), 1, "first detection"),
    ([_iv(1, 10)], 1, 20, LadderPolicy(), 2, "persists within the epoch after tier 1"),
    ([_iv(1, 10)], 3, 20, LadderPolicy(), 2, "E steps is still within the epoch"),
    ([_iv(1, 10)], 4, 20, LadderPolicy(), 1, "more than an epoch: a new loop"),
    ([_iv(1, 10), _iv(2, 20)], 2, 30, LadderPolicy(), 3, "persists after the only backtrack"),
    ([_iv(1, 10), _iv(2, 20)], 2, 30, LadderPolicy(backtrack_budget=2), 2, "a second backtrack is budgeted"),
    ([_iv(1, 10), _iv(2, 20), _iv(2, 30)], 1, 40, LadderPolicy(backtrack_budget=2), 3, "budget of 2 spent"),
    ([_iv(1, 10)], 1, 20, LadderPolicy(backtrack_budget=0), 3, "no backtrack budget: 1 then 3"),
    ([_iv(1, 10), _iv(2, 20)], 9, 40, LadderPolicy(), 1, "after a long quiet stretch the ladder restarts"),
    ([_iv(1, 10), _iv(2, 20), _iv(1, 40)], 1, 45, LadderPolicy(), 3, "restarted, but the budget stays spent"),
    ([_iv(1, 10), _iv(2, 20), _iv(3, 30)], 1, 40, LadderPolicy(), None, "aborted: nothing more"),
    ([_iv(1, 10)], 0, 10, LadderPolicy(), None, "the same detection again: already answered"),
    ([_iv(1, 10), _iv(2, 20, done=False)], 1, 30, LadderPolicy(), 2, "unfinished tier 2: resume it"),
    ([_iv(1, 10, done=False)], 5, 30, LadderPolicy(), 1, "unfinished tier 1: resume it"),
]


@pytest.mark.parametrize("history,steps,at,policy,tier,why", TABLE, ids=[row[-1] for row in TABLE])
def test_the_ladder_of_table_7(history, steps, at, policy, tier, why):
    d = decide_tier(history, _det(at), policy, steps_since_last=steps)
    assert d.tier == tier, (why, d.reason)
    if history and not history[-1].finished:
        assert d.resume and d.intervention_id == history[-1].intervention_id
    elif tier is not None:
        assert not d.resume and d.intervention_id == f"wd-{at}-t{tier}"


@settings(max_examples=200, deadline=None)
@given(budget=st.integers(0, 3), gaps=st.lists(st.integers(1, 6), min_size=1, max_size=12))
def test_spent_backtracks_never_exceed_the_budget_and_tier_3_is_last(budget, gaps):
    policy, history, at = LadderPolicy(epoch_steps=3, backtrack_budget=budget), [], 10
    for gap in gaps:
        at += 10
        d = decide_tier(history, _det(at), policy, steps_since_last=gap if history else None)
        if d.tier is None:
            assert any(i.tier == 3 for i in history)
            continue
        if history and gap <= 3 and history[-1].tier in (1, 2):
            assert d.tier >= 2   # a persisting loop never falls back to an interrupt
        history.append(_iv(d.tier, at))
    assert sum(i.tier == 2 for i in history) <= budget
    assert all(i.tier != 3 for i in history[:-1])


def test_a_ladder_policy_out_of_range_is_refused():
    for kw in ({"epoch_steps": 0}, {"backtrack_budget": -1}, {"epoch_steps": 2.5}):
        with pytest.raises(ConfigError):
            LadderPolicy(**kw)
    with pytest.raises(ConfigError, match="steps_since_last"):
        decide_tier([_iv(1, 10)], _det(20))


def test_the_ladder_reads_the_detectors_evidence_and_counts_one_alarm_per_action():
    """The detectors fire at the observation after an action and name the loop's steps
    (``occurrences``), the action (``step_position``) and its h_tool (``signature``)."""
    sig = "0123456789abcdef"
    first = Detection(position=71, kind="state_hash_cycle",
                      evidence={"step_position": 70, "occurrences": [32, 51, 70], "signature": sig})
    d = decide_tier([], first, LadderPolicy())
    assert (d.tier, d.onset_position, d.action_signature) == (1, 32, sig)
    answered = Intervention("wd-71-t1", 1, "state_hash_cycle", 71, 72, 74, sig, 32, evidence=dict(first.evidence))
    # the same action seen again at a later position (its retried attempt's result) is the same alarm
    again = Detection(position=78, kind="state_hash_cycle", evidence={**first.evidence, "occurrences": [32, 51, 70]})
    assert decide_tier([answered], again, LadderPolicy(), steps_since_last=0).tier is None
    nxt = Detection(position=93, kind="state_hash_cycle",
                    evidence={"step_position": 92, "occurrences": [51, 70, 92], "signature": "fedcba9876543210"})
    d2 = decide_tier([answered], nxt, LadderPolicy(), steps_since_last=1)
    assert (d2.tier, d2.onset_position, d2.action_signature) == (2, 32, "fedcba9876543210")   # the earlier onset


def test_the_window_restarts_at_the_state_a_finished_backtrack_restored():
    from kernel_lib.recovery.watchdog.detectors import detect_state_cycles
    from kernel_lib.recovery.watchdog.escalation import watch_window
    from kernel_lib.recovery.watchdog.model import WatchStep

    def steps(states):
        return [WatchStep(position=10 * i, kind="tool", actor="agent", tool="edit", arguments={"to": h},
                          observation="ok", observation_position=10 * i + 1, state_hash=h, state_source="workspace",
                          mutative=True) for i, h in enumerate(states, 1)]
    # 0 -> A -> B -> A (tier 1) -> B (tier 2: rewound to 0, the step's recorded state is 0) -> A -> C -> A
    seq = steps(["0", "A", "B", "A", "0", "A", "C", "A"])
    t1 = Intervention("wd-41-t1", 1, "state_hash_cycle", 41, 42, 44)
    t2 = Intervention("wd-51-t2", 2, "state_hash_cycle", 51, 52, 55)
    assert watch_window(seq, [t1]) == seq
    assert watch_window(seq, [t1, Intervention("wd-51-t2", 2, "state_hash_cycle", 51, 52)]) == seq   # unfinished
    window = watch_window(seq, [t1, t2])
    assert [s.position for s in window] == [50, 60, 70, 80]   # from the step that carries the restored state
    assert [d.evidence["step_position"] for d in detect_state_cycles(window)] == [80]   # not 60: A before the rewind
    assert 60 in [d.evidence["step_position"] for d in detect_state_cycles(seq)]          # which the whole log shows


# --- the log's records: v2 intent/completion, v1 upcast, unfinished ----------------------------------


def _task():
    return TaskStarted(task_id="t", requester="r", objective="o", grant_ids=["g"], budget_ceiling_usd=10.0)


def test_an_intent_without_completion_is_unfinished_and_a_v1_record_reads_as_completed():
    intent = WatchdogIntervened(intervention_id="wd-5-t2", phase="intent", tier=2, detection_kind="state_hash_cycle",
                                detection_position=5, action_signature="0123456789abcdef", onset_position=3,
                                checkpoint_restored="ckpt-2")
    v1 = WatchdogIntervenedV1(watchdog="action_repetition", tier=1, signal={"k": 2}, action="interrupted")
    events = [ev(_task(), 1, traj="t"), ev(v1, 2, traj="t"), ev(intent, 3, traj="t")]
    back = decode(events[1].canonical)   # a stored v1 event decodes to the v1 class and re-encodes to its bytes
    assert type(back.payload) is WatchdogIntervenedV1 and back.canonical == events[1].canonical
    rec = fold(initial_record("t"), events)
    ivs = interventions_of(rec)
    assert [(i.intervention_id, i.tier, i.finished) for i in ivs] == [("wd-v1-2", 1, True), ("wd-5-t2", 2, False)]
    assert unfinished(rec).intervention_id == "wd-5-t2" and unfinished(rec).checkpoint_restored == "ckpt-2"
    done = intent.model_copy(update={"phase": "completed", "outcome": "backtracked"})
    rec = fold(rec, [ev(done, 4, traj="t")])
    assert unfinished(rec) is None and interventions_of(rec)[-1].outcome == "backtracked"


# --- the gate refuses a masked action ----------------------------------------------------------------


def test_the_gate_refuses_a_masked_action_and_only_that_one():
    gate = DispatchGate(TrajectoryLog(MemoryStore(), "t", must_survive="none"),
                        AdmissionPolicy({"g": {"edit_line", "run_tests"}}))
    gate.start(_task())
    sent = []

    def transport(intent):
        sent.append(intent.operation_id)
        return ToolReply("completed", outcome={}, observation_complete=True)

    args = {"path": "app/config.py", "line": 2, "text": "TIMEOUT_S = 40"}
    gate.run_tool(ToolProposal("op1", "a1", "edit_line", args, "g", 0.0, repeat_contract="idempotent"), transport)
    sig = action_signature("edit_line", args)
    gate.append(ActionMasked(action_signature=sig, reason="watchdog tier 2", position=4, tool="edit_line"))
    assert gate.record.masked_actions[sig]["position"] == 4
    with pytest.raises(ActionMaskedRefusal) as info:   # the same call again, with a nonce that does not count
        gate.run_tool(ToolProposal("op2", "a1", "edit_line", {**args, "request_id": "r-77"}, "g", 0.0), transport)
    assert isinstance(info.value, AdmissionDenied) and info.value.action_signature == sig
    assert info.value.masked_at == gate.record.masked_actions[sig]["sequence_number"]
    assert gate.record.operations["op2"].status == "denied" and "op2" not in sent   # logged, never sent
    other = {**args, "text": "TIMEOUT_S = 45"}
    gate.run_tool(ToolProposal("op3", "a1", "edit_line", other, "g", 0.0), transport)
    gate.run_tool(ToolProposal("op4", "a1", "run_tests", {}, "g", 0.0, repeat_contract="read_only"), transport)
    assert sent == ["op1", "op3", "op4"]
    # the fold derives the mask from the log alone
    assert fold(initial_record("t"), gate.log.events()).masked_actions == gate.record.masked_actions


def test_a_record_without_masks_reads_as_before():
    rec = fold(initial_record("t"), [ev(_task(), 1, traj="t")])
    assert "masked_actions" not in rec.to_dict() and rec.masked_actions == {}
    assert type(rec).from_dict(rec.state_dict()) == rec


# --- the live loop, end to end ------------------------------------------------------------------------


def _ledger(effects):
    """The receiver's effects without names a crash may shift (checkpoint ids carry positions)."""
    return [(e["effect"], e.get("tool"), e.get("operation_id"), tuple(e.get("files", ()))) for e in effects]


def _applied(fleet):
    return {(svc, action): n for svc, c in fleet.counts().items() for action, n in c.get("applied", {}).items()}


def _log_counts(store, tid):
    evs = list(store.read(tid))
    completions = [e.payload.intervention_id for e in evs
                   if e.event_type == "WatchdogIntervened" and e.payload.phase == "completed"]
    return {"completions": completions, "masks": sum(e.event_type == "ActionMasked" for e in evs),
            "interrupts": sum(e.event_type == "RuntimeInput" and e.payload.kind == "observation" for e in evs),
            "frozen": sum(e.event_type == "TrajectoryFrozen" for e in evs)}


class _Reference:
    """One uncrashed run of a scenario, kept for every test of this module that compares with it:
    its result, its fleet and store, and the (name, event) of each gate position."""

    def __init__(self, root: Path, scenario: str):
        self.fleet, self.store, self.seen = TwinFleet(), MemoryStore(), []
        self.res = run_looping_agent(root / f"ref-{scenario}", store=self.store, fleet=self.fleet, scenario=scenario,
                                     must_survive="none", on_position=lambda name, ev: self.seen.append((name, ev)))
        self.applied, self.counts = _applied(self.fleet), _log_counts(self.store, "loop-1")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uncrashed run of each scenario, made once for the module (``reference(scenario)``)."""
    root, made = tmp_path_factory.mktemp("loop-references"), {}

    def get(scenario: str) -> _Reference:
        if scenario not in made:
            made[scenario] = _Reference(root, scenario)
        return made[scenario]
    return get


@pytest.mark.parametrize("scenario,outcome,state", [("no_pivot", "compensated", "FAILED"),
                                                    ("pivot", "frozen", "FROZEN")])
def test_the_live_loop_goes_through_the_three_tiers(reference, scenario, outcome, state):
    ref = reference(scenario)
    fleet, store, res = ref.fleet, ref.store, ref.res
    assert res.outcome == outcome and res.control_state == state
    assert [(i["tier"], i["outcome"]) for i in res.interventions] == [
        (1, "interrupted"), (2, "backtracked"), (3, outcome)]
    t2 = res.interventions[1]
    assert t2["checkpoint_restored"] and t2["onset_position"] < t2["detection_position"]
    assert res.refused == 1   # the masked edit was proposed again and the gate refused it
    kinds = [e["effect"] for e in res.effects]
    assert kinds.count("restore") == 1 and kinds.index("restore") == 4   # after the four looping edits
    assert any(e.get("tool") == "write_file" for e in res.effects)   # the work-around the state hash still caught
    applied = _applied(fleet)
    assert res.revoked_leases
    if scenario == "no_pivot":   # compensated: every resource the saga made was released once
        assert applied[("sandbox", "teardown_sandbox")] == 1 and applied[("git", "delete_branch")] == 1
        assert res.services["live_resources"] == 0
    else:   # past the pivot: nothing is compensated, the trajectory waits for an operator
        assert ("sandbox", "teardown_sandbox") not in applied and _log_counts(store, "loop-1")["frozen"] == 1
    cost = res.loop_cost
    assert cost["turns_to_detection"] >= 3 and cost["ratio_ceiling_to_detection"] > 1
    per_turn = cost["input_tokens_per_turn"]
    upto = cost["loop_first_turn"] + cost["turns_to_detection"]
    assert per_turn[:upto] == sorted(per_turn[:upto]) and cost["growth_tokens_per_turn"] > 0   # the context grows
    assert min(per_turn[upto:]) < max(per_turn[:upto + 2])   # until the backtrack prunes the looping turns
    hashed = res.workspace_hash   # one incremental hasher: a full read once, then only the changes
    assert hashed["change_source"] in ("inotify", "scan") and hashed["modes"]["full"] == 1
    incremental = {"inotify"} if hashed["change_source"] == "inotify" else {"scan", "hint"}
    assert set(hashed["modes"]) - {"full"} <= incremental and sum(hashed["modes"].values()) > len(res.effects)
    evs = list(store.read("loop-1"))   # the log names the state each edit left: a checkpoint right after it
    for i, e in enumerate(evs):
        if e.event_type == "ToolResult" and e.payload.operation_id.startswith("t") and e.payload.outcome.get("changed"):
            assert evs[i + 1].event_type == "Checkpoint", (e.sequence_number, evs[i + 1].event_type)


def test_an_agent_that_heeds_the_interrupt_is_resolved_at_tier_1(tmp_path):
    fleet = TwinFleet()
    res = run_looping_agent(tmp_path / "ws", store=MemoryStore(), fleet=fleet, obey_interrupt=1.0,
                            must_survive="none")
    assert res.outcome == "resolved" and [i["tier"] for i in res.interventions] == [1]
    assert (tmp_path / "ws" / "app" / "config.py").read_text().startswith("RETRIES = 2")
    assert res.refused == 0 and not res.revoked_leases


# --- durability: a crash at every position resumes at the right tier --------------------------------------


class _Crash(BaseException):
    """The worker dies here (no handler of ordinary errors catches it)."""


def _crash_at(k):
    seen = [0]

    def hook(name, event):
        seen[0] += 1
        if seen[0] == k:
            raise _Crash(name)
    return hook


def _crash_and_resume(tmp_path, scenario, k):
    """Crash the run at its ``k``-th gate position, in process, then resume it. The log store, the
    blob store and the fleet are objects this test keeps across the crash; the workspace and its
    effects ledger are files whose page cache outlives an in-process crash, so the ledger is
    acknowledged at ``write`` (a sync would prove nothing here; the SIGKILL test below syncs).
    The workspace hasher uses the stat scan with the tools' hints here (the references use
    inotify where the kernel has it, so the sweep also shows both change sources agree)."""
    fleet, store, blobs, ws = TwinFleet(), MemoryStore(), MemoryBlobStore(), tmp_path / f"{scenario}-{k}"
    run = dict(store=store, fleet=fleet, blobs=blobs, scenario=scenario, must_survive="none", ledger_ack="write",
               change_source="scan")
    with pytest.raises(_Crash):
        run_looping_agent(ws, on_position=_crash_at(k), **run)
    res = run_looping_agent(ws, **run)
    assert res.workspace_hash["change_source"] == "scan"
    assert set(res.workspace_hash["modes"]) <= {"full", "hint", "scan"}
    return res, _applied(fleet), _log_counts(store, "loop-1")


def _same_run(got, ref, where):
    res, applied, counts = got
    assert res.outcome == ref.res.outcome, where
    assert [(i["tier"], i["outcome"]) for i in res.interventions] == [
        (i["tier"], i["outcome"]) for i in ref.res.interventions], where
    assert _ledger(res.effects) == _ledger(ref.res.effects), where   # each edit and the rewind landed once
    assert applied == ref.applied, where   # the services applied each request once
    assert counts["masks"] == 1 and counts["interrupts"] == 1 and counts["frozen"] == ref.counts["frozen"], where
    assert sorted(set(counts["completions"])) == sorted(counts["completions"]) and len(counts["completions"]) == 3, \
        where   # no tier completed twice


@pytest.mark.parametrize("scenario", ["no_pivot", "pivot"])
def test_a_crash_at_every_position_resumes_at_the_right_tier(tmp_path, reference, scenario):
    ref = reference(scenario)
    n = len(ref.res.positions)
    ks = range(1, n + 1) if scenario == "no_pivot" else range(1, n + 1, 3)   # the pivot run: every third
    for k in ks:
        _same_run(_crash_and_resume(tmp_path, scenario, k), ref, f"{scenario}: crash at position {k}/{n}")
    assert n > 100


# --- a real SIGKILL of a worker process -------------------------------------------------------------------


def _env():
    from kernel_lib.live.orphan import parent_env

    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1", **parent_env()}


def _worker(args, **kw):
    return subprocess.Popen([sys.executable, "-m", "kernel_lib.live.looping_agent", *args], env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def test_a_sigkilled_worker_resumes_at_the_right_tier_with_every_effect_once(tmp_path, reference):
    from kernel_lib.live.services import LiveFleet

    pos = reference("no_pivot").seen   # gate positions (1-based) of the uncrashed run, with their events
    # inside tier 2 (its intent is durable, the rewind not yet done) and inside tier 3 (the unwind began)
    t2 = next(i for i, (_n, e) in enumerate(pos, 1) if e is not None and e.event_type == "WatchdogIntervened"
              and e.payload.phase == "intent" and e.payload.tier == 2)
    t3 = next(i for i, (_n, e) in enumerate(pos, 1) if e is not None and e.event_type == "ToolIntent"
              and e.payload.operation_id.endswith(".C"))
    fleet = LiveFleet(tmp_path / "fleet", client_timeout_s=5.0)
    try:
        for k, tier in ((t2, 2), (t3, 3)):
            ws, db, marker = tmp_path / f"ws-{k}", tmp_path / f"log-{k}.sqlite", tmp_path / f"marker-{k}"
            tid = f"loop-kill-{k}"
            args = ["--workspace", str(ws), "--store-path", str(db), "--fleet", str(fleet.state_dir),
                    "--trajectory", tid]
            before = _applied(fleet)
            proc = _worker([*args, "--pause-at", str(k), "--marker", str(marker)])
            deadline = time.monotonic() + 120
            while not marker.exists():
                assert proc.poll() is None, proc.stderr.read()[-2000:]
                assert time.monotonic() < deadline, "the worker never reached its position"
                time.sleep(0.01)
            os.kill(proc.pid, signal.SIGKILL)   # the real thing: no handler runs, nothing is flushed
            assert proc.wait(timeout=30) == -signal.SIGKILL
            from kernel_lib.log.sqlite import SQLiteStore

            with SQLiteStore.open(str(db), read_only=True) as st:
                open_tier = unfinished(fold(initial_record(tid), st.read(tid)))
            assert open_tier is not None and open_tier.tier == tier   # the crash came mid-tier
            rec = _worker(args)
            out, err = rec.communicate(timeout=180)
            assert rec.returncode == 0, err[-2000:]
            res = json.loads(out.strip().splitlines()[-1])
            assert res["outcome"] == "compensated"
            assert [(i["tier"], i["outcome"]) for i in res["interventions"]] == [
                (1, "interrupted"), (2, "backtracked"), (3, "compensated")]
            kinds = [e["effect"] for e in res["effects"]]   # the workspace's own ledger
            assert kinds.count("restore") == 1 and kinds.count("edit") == 7, kinds
            after = _applied(fleet)
            delta = {key: after.get(key, 0) - before.get(key, 0) for key in after}
            assert delta[("sandbox", "teardown_sandbox")] == 1 and delta[("git", "delete_branch")] == 1, delta
            assert delta[("sandbox", "provision_sandbox")] == 1 and delta[("git", "create_branch")] == 1, delta
    finally:
        fleet.close()
