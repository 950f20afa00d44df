"""Issue 19, adversarial: breaking the quarantine (Failure Recovery, "Blast Radius Quarantine",
table 12) and its tombstone fold.

Fault model, live runner: a stage of the four-stage protocol fails half-way (the egress cut or
the revocation raises), a member of the sandboxed tree dies before the freeze, the whole tree is
gone, a freezer never reports frozen, two demos run at once in one process. Invariants: a failed
stage surfaces as a typed :class:`~kernel_lib.errors.QuarantineIncompleteError` naming it (the
tombstone is still written), no cgroup, namespace or veth is left, a freeze that cannot complete
is reported within its timeout, two runs neither collide nor count each other's resources.

Fault model, fold: the tombstone lands in every control state, twice, before the task started,
with a taint or detection position outside the log. Invariants: dispatch and resume refused,
only an operator's CANCELLED/FAILED leaves a live quarantine, nothing (not even TaskStarted)
thaws it, impossible positions are refused with FoldError / ConfigError, and the quarantine
survives a format 4 record snapshot round trip.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from kernel_lib.core.events import (
    ControlChanged, TaskStarted, TrajectoryFrozen, TrajectoryQuarantined,
)
from kernel_lib.core.record import fold, initial_record
from kernel_lib.errors import (
    AdmissionDenied, ConfigError, ContainmentError, FoldError, KernelError, TrajectoryQuarantinedRefusal,
)
from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate, ToolProposal, ToolReply
from kernel_lib.log import MemoryStore, TrajectoryLog
from kernel_lib.recovery.quarantine import QuarantineTrigger, quarantine_of, refuse_if_quarantined
from kernel_lib.recovery.quarantine.protocol import tombstone
from tests.helpers import ev

# --- the tombstone fold ------------------------------------------------------------------------------------------


def _gate() -> DispatchGate:
    gate = DispatchGate(TrajectoryLog(MemoryStore(), "t1", must_survive="none"),
                        AdmissionPolicy({"g": {"write_file"}}))
    gate.start(TaskStarted(task_id="t", requester="r", objective="o", grant_ids=["g"], budget_ceiling_usd=1.0))
    gate.run_tool(ToolProposal("op1", "a1", "write_file", {"path": "a"}, "g", 0.0), _ok)
    return gate


def _ok(intent):
    return ToolReply("completed", outcome={}, observation_complete=True)


def _into(gate: DispatchGate, state: str) -> None:
    if state == "RUNNING":
        return
    if state == "FROZEN":
        gate.append(TrajectoryFrozen(incident_id="i1", failure_mode="SEMANTIC_DEADLOCK",
                                     log_offset=gate.record.last_sequence_number, frozen_context_ref="ctx"))
        return
    gate.change_control(state, issuer="operator", request_id=f"to-{state}")


def _tomb(gate: DispatchGate, qid: str = "q1", taint: int = 1):
    trig = QuarantineTrigger("operator", "t1", gate.record.last_sequence_number)
    return gate.append(tombstone(trig, quarantine_id=qid, taint_from_sequence=taint))[-1]


STATES = ["RUNNING", "PAUSED", "AWAITING_APPROVAL", "FINALIZING", "FROZEN", "COMPLETED", "CANCELLED", "FAILED"]


@pytest.mark.parametrize("state", STATES)
def test_a_tombstone_in_every_control_state_refuses_dispatch_and_resume(state):
    gate = _gate()
    _into(gate, state)
    _tomb(gate)
    terminal = state in ("COMPLETED", "CANCELLED", "FAILED")
    assert gate.record.control_state == (state if terminal else "FROZEN")
    with pytest.raises((AdmissionDenied, KernelError)):
        gate.run_tool(ToolProposal("op2", "a1", "write_file", {"path": "b"}, "g", 0.0), _ok)
    with pytest.raises(TrajectoryQuarantinedRefusal):
        refuse_if_quarantined(gate.record)
    for to in ("RUNNING", "PAUSED", "AWAITING_APPROVAL", "FINALIZING", "COMPLETED"):
        with pytest.raises(FoldError):
            fold(gate.record, [ev(ControlChanged(request_id="x", issuer="operator", to_state=to),
                                  gate.record.last_sequence_number + 1, traj="t1")])
    if not terminal:
        for to in ("CANCELLED", "FAILED"):   # only an operator's CANCELLED / FAILED leaves it
            left = fold(gate.record, [ev(ControlChanged(request_id="x", issuer="operator", to_state=to),
                                         gate.record.last_sequence_number + 1, traj="t1")])
            assert left.control_state == to
            with pytest.raises(TrajectoryQuarantinedRefusal):   # the tombstone still stands
                refuse_if_quarantined(left)


def test_a_tombstone_before_the_task_started_is_not_thawed_by_task_started():
    """Found: a tombstone at #1 set FROZEN, then TaskStarted at #2 set RUNNING: the quarantine
    was left without an operator."""
    tomb = ev(TrajectoryQuarantined(quarantine_id="q", trigger_kind="operator", detected_at_sequence=0,
                                    taint_from_sequence=1), 1, traj="t1")
    start = ev(TaskStarted(task_id="t", requester="r", objective="o", budget_ceiling_usd=1.0), 2, traj="t1")
    try:
        rec = fold(initial_record("t1"), [tomb, start])
    except FoldError:
        return   # refused: sound
    assert rec.control_state == "FROZEN"


def test_a_duplicate_tombstone_is_kept_sound():
    """Handled, not refused: a second tombstone (same or another id) keeps the first's id, the
    trajectory stays FROZEN, and the taint only widens."""
    gate = _gate()
    first = _tomb(gate, "q1", taint=2)
    _tomb(gate, "q1", taint=2)
    _tomb(gate, "q2", taint=1)
    q = quarantine_of(gate.record)
    assert q["quarantine_id"] == "q1" and q["sequence_number"] == first.sequence_number
    assert q["taint_from_sequence"] == 1 and q["tombstones"] == 3 and gate.record.control_state == "FROZEN"


@pytest.mark.parametrize("taint", [0, -1, -10**9])
def test_a_non_positive_taint_position_is_refused_typed(taint):
    with pytest.raises(ConfigError):
        tombstone(QuarantineTrigger("operator", "t1", 3), quarantine_id="q", taint_from_sequence=taint)


def test_a_taint_or_detection_position_beyond_the_log_head_is_refused():
    start = ev(TaskStarted(task_id="t", requester="r", objective="o", budget_ceiling_usd=1.0), 1, traj="t1")
    beyond_taint = ev(TrajectoryQuarantined(quarantine_id="q", trigger_kind="operator", detected_at_sequence=50,
                                            taint_from_sequence=40), 2, traj="t1")
    with pytest.raises(FoldError):
        fold(initial_record("t1"), [start, beyond_taint])
    # t_taint inside the log but t* (the detection) beyond it: the tombstone claims a detection
    # at a position the log never reached (found: it was accepted)
    beyond_detection = ev(TrajectoryQuarantined(quarantine_id="q", trigger_kind="operator", detected_at_sequence=50,
                                                taint_from_sequence=1), 2, traj="t1")
    with pytest.raises(FoldError, match="detected"):
        fold(initial_record("t1"), [start, beyond_detection])
    gate = _gate()
    head = gate.record.last_sequence_number
    with pytest.raises(FoldError):   # through the gate: nothing appended
        gate.append(tombstone(QuarantineTrigger("operator", "t1", head + 5), quarantine_id="q",
                              taint_from_sequence=head + 3))
    assert gate.record.last_sequence_number == head and quarantine_of(gate.record) is None


@pytest.mark.parametrize("state", ["RUNNING", "PAUSED", "COMPLETED"])
def test_the_quarantine_survives_a_format_4_snapshot_round_trip(state):
    from kernel_lib.checkpoint.state import RECORD_FORMAT, encode_record_state, record_from_snapshot, state_of

    assert RECORD_FORMAT.endswith("/4")
    gate = _gate()
    _into(gate, state)
    _tomb(gate, "q1", taint=2)
    for lazy in (True, False):
        back = record_from_snapshot(encode_record_state(state_of(gate.record)), lazy=lazy)
        assert back.control_state == gate.record.control_state
        assert quarantine_of(back) == quarantine_of(gate.record)
        with pytest.raises(TrajectoryQuarantinedRefusal):
            refuse_if_quarantined(back)
        with pytest.raises(FoldError):
            fold(back, [ev(ControlChanged(request_id="x", issuer="w", to_state="RUNNING"),
                           back.last_sequence_number + 1, traj="t1")])


# --- the live runner -------------------------------------------------------------------------------------------

from kernel_lib.live.quarantine import (   # noqa: E402
    CgroupFreezer, NetnsSandbox, QuarantineSupervisor, SigstopFreezer, tree_progress,
)
from tests.quarantine_support import (   # noqa: E402
    CAPS, assert_nothing_left, need_all, need_v1, start_agent, stop_agent,
)


@pytest.fixture
def nothing_left_behind():
    yield
    assert_nothing_left()


_agent, _stop = start_agent, stop_agent


@need_all
@pytest.mark.parametrize("broken", ["sever", "revoke"])
def test_a_stage_failing_mid_protocol_raises_naming_it_and_leaves_nothing(tmp_path, monkeypatch, broken,
                                                                         nothing_left_behind):
    """Found: the supervisor recorded the failure in ``report.errors`` and the demo returned as if
    contained (``request_after_cut_failed`` False, no error)."""
    from kernel_lib.errors import QuarantineIncompleteError
    from kernel_lib.live import quarantine_demo

    def boom(*a, **k):
        raise RuntimeError(f"injected {broken} failure")

    if broken == "sever":
        monkeypatch.setattr(NetnsSandbox, "cut", boom)
    else:
        real = QuarantineSupervisor.__init__

        def init(self, **kw):
            real(self, **{**kw, "revoke": boom})

        monkeypatch.setattr(QuarantineSupervisor, "__init__", init)
    with pytest.raises(QuarantineIncompleteError) as info:
        quarantine_demo.run_quarantine_demo(tmp_path, suspend="cgroup-v1" if CAPS.cgroup_v1_freezer else "cgroup",
                                            sever="netns", children=1)
    assert info.value.stage == broken and broken in info.value.failed_stages
    assert f"injected {broken} failure" in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_the_supervisor_raises_typed_after_writing_the_tombstone(tmp_path, nothing_left_behind):
    from kernel_lib.errors import QuarantineIncompleteError

    gate = _gate()
    proc, _ = _agent(tmp_path, children=1)
    try:
        sup = QuarantineSupervisor(gate=gate, freezer=SigstopFreezer(proc.pid),
                                   revoke=lambda t: (_ for _ in ()).throw(OSError("broker down")))
        with pytest.raises(QuarantineIncompleteError) as info:
            sup.quarantine(QuarantineTrigger("operator", "t1", gate.record.last_sequence_number),
                           taint_from_sequence=1)
        rep = info.value.report
        assert info.value.stage == "revoke" and set(rep.errors) == {"revoke"}
        assert gate.record.control_state == "FROZEN" and quarantine_of(gate.record) is not None   # tombstone written
        assert rep.stage_ms.keys() >= {"suspend", "taint"}
    finally:
        _stop(proc)


def _state_of(pid: int) -> str | None:
    """The state letter in /proc/PID/stat (None: no such process)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


@need_v1
def test_a_member_killed_before_the_freeze_does_not_break_it(tmp_path, nothing_left_behind):
    with CgroupFreezer() as fz:
        proc, counters = _agent(tmp_path, freezer=fz, children=2)
        try:
            victim = [p for p in fz.pids() if p != proc.pid][0]
            os.kill(victim, signal.SIGKILL)
            rep = QuarantineSupervisor(freezer=fz).quarantine(QuarantineTrigger("operator", "t1", 0),
                                                              taint_from_sequence=1)
            assert not rep.errors
            # the killed member is gone, a zombie its (now frozen) parent had not reaped yet, or caught
            # by the freezer on its way out (state D: frozen in the exit path, seen on a loaded CI run):
            # each still shows in the cgroup's list and none runs anything; fz.kill() ends them all
            # and the fixture checks nothing is left behind
            assert victim not in fz.pids() or _state_of(victim) in (None, "Z", "D")
            live = [p for p in fz.pids() if _state_of(p) not in (None, "Z")]
            assert tree_progress(counters, live, wait_s=0.2)["stopped"]
        finally:
            fz.kill()
            proc.wait(timeout=10)


def test_a_tree_gone_before_the_freeze_is_reported_as_the_suspend_stage(tmp_path, nothing_left_behind):
    from kernel_lib.errors import QuarantineIncompleteError

    proc, _ = _agent(tmp_path, children=1)
    fz = SigstopFreezer(proc.pid)
    _stop(proc)
    with pytest.raises(QuarantineIncompleteError) as info:
        QuarantineSupervisor(freezer=fz).quarantine(QuarantineTrigger("operator", "t1", 0), taint_from_sequence=1)
    assert info.value.stage == "suspend"


@need_v1
def test_a_freezer_that_never_reports_frozen_is_reported_not_hung(tmp_path, monkeypatch, nothing_left_behind):
    from kernel_lib.errors import QuarantineIncompleteError

    with CgroupFreezer() as fz:
        proc, _ = _agent(tmp_path, freezer=fz, children=1)
        try:
            monkeypatch.setattr(CgroupFreezer, "is_frozen", lambda self: False)
            t0 = time.monotonic()
            with pytest.raises(ContainmentError) as direct:
                fz.freeze(timeout_s=0.2)
            assert direct.value.stage == "suspend" and time.monotonic() - t0 < 2.0
            sup = QuarantineSupervisor(freezer=fz, freeze_timeout_s=0.3)
            t0 = time.monotonic()
            with pytest.raises(QuarantineIncompleteError) as info:
                sup.quarantine(QuarantineTrigger("operator", "t1", 0), taint_from_sequence=1)
            assert info.value.stage == "suspend" and "frozen within" in str(info.value)
            assert time.monotonic() - t0 < 3.0
        finally:
            monkeypatch.undo()
            fz.kill()   # the kernel did freeze it: a plain SIGKILL would wait for the thaw
            proc.wait(timeout=10)
    assert not fz.path.exists()


@need_all
def test_two_demos_at_once_do_not_collide_and_both_clean_up(tmp_path, nothing_left_behind):
    """Found: each demo counted every ``klq`` resource of the process as its own leftover, so a
    demo finishing while the other ran reported ``clean`` False."""
    from kernel_lib.live.quarantine_demo import run_quarantine_demo

    results: dict[int, object] = {}

    def one(i):
        d = tmp_path / str(i)
        d.mkdir()
        try:
            results[i] = run_quarantine_demo(d, children=1)
        except BaseException as exc:   # reported below
            results[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert all(isinstance(r, dict) for r in results.values()) and len(results) == 2, results
    a, b = results[0], results[1]
    assert a["report"]["details"]["cgroup"]["path"] != b["report"]["details"]["cgroup"]["path"]
    for r in (a, b):
        assert r["clean"] and r["tree_stopped"] and r["request_after_cut_failed"], r["leftovers"]
