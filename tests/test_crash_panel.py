"""The step-wise worksheet session and the crash panel, with real processes and a real SIGKILL.

Fault model: the worker is SIGKILLed (after a chosen durable event, or whenever the reader clicks).
Invariant: the replacement rebuilds test_r18 from the surviving log alone and invents no outcome;
every process the session started is gone after close(). Goal: a reader can drive each step by hand
and bad input is a message, never a traceback.
"""

from __future__ import annotations

import signal
import time

import pytest

from kernel_lib.errors import ConfigError, KernelError, NoWorkerRunningError, SessionStateError
from kernel_lib.live.session import WorksheetSession
from widgets.crash_panel import CrashPanel
from tests.helpers import group_gone, process_gone

DELAY_S = 1.0


def test_session_start_crash_recover_reconcile(tmp_path):
    with WorksheetSession("sqlite", seed=0, test_delay_s=DELAY_S, workdir=tmp_path) as s:
        started = s.start(pause_at="ToolResult")
        assert started["paused"]["paused_at"] == "ToolResult" and s.worker_running()
        crash = s.crash()
        assert crash["signal"] == "SIGKILL" and crash["worker_exit"] == -signal.SIGKILL
        assert crash["log_position"] == started["paused"]["log_position"]
        assert crash["job_running_at_crash"] and crash["job_handle"] == "job_tests_18"
        assert s.log_tail(1)[-1]["type"] == "ToolResult"
        rec = s.recovered()
        op = rec["operations"]["test_r18"]
        assert rec["in_doubt"] == ["test_r18"] and op["status"] == "in_doubt" and op["attempt_id"] == "attempt1"
        assert rec["budget"]["outstanding_reservations_usd"] > 0 and op["outcome"] is None
        assert s.model["recorded_reply"] != s.model["fresh_reply"]
        done = s.reconcile(timeout_s=120)     # a bound: on a loaded machine the test job may take > 30 s
        assert done["in_doubt"] == [] and done["operations"]["test_r18"]["status"] == "established"
        assert done["actions"]["test_r18"]["signature_verified"] is True
        pids, work = list(s.pids), s.workdir
    assert all(process_gone(p) and group_gone(p) for p in pids)
    assert not work.exists()
    assert s.close()["already_closed"]   # idempotent


def test_crash_with_no_worker_is_a_typed_error(tmp_path):
    with WorksheetSession(test_delay_s=0, workdir=tmp_path) as s:
        with pytest.raises(NoWorkerRunningError, match="no worker is running"):
            s.crash()
        with pytest.raises(SessionStateError, match="no surviving log"):
            s.recovered()
        assert s.log_tail(5) == []
        with pytest.raises(ConfigError):
            s.start(pause_at="Nonsense")
        with pytest.raises(ConfigError):
            s.log_tail(0)
    with pytest.raises(SessionStateError, match="closed"):
        s.start()
    assert issubclass(NoWorkerRunningError, KernelError)


def test_bad_session_arguments_are_refused():
    with pytest.raises(ConfigError):
        WorksheetSession(store_kind="tape")
    with pytest.raises(ConfigError):
        WorksheetSession(test_delay_s=-1)


def test_panel_commands_drive_the_session_and_bad_input_is_a_message(tmp_path):
    s = WorksheetSession("sqlite", seed=3, test_delay_s=DELAY_S, workdir=tmp_path)
    try:
        w = CrashPanel(s, reconcile_timeout_s=30)
        assert w.operations == [] and w.status == "not started" and w.error == ""
        # bad input first: no worker, no log, unknown action, unknown position, malformed command
        w.command = {"action": "crash", "n": 1}
        assert "no worker is running" in w.error
        w.command = {"action": "recover", "n": 2}
        assert "no surviving log" in w.error
        w.command = {"action": "explode", "n": 3}
        assert "unknown action" in w.error
        w.command = {"action": "crash_at", "position": "Lunch", "n": 4}
        assert "not one of" in w.error
        w.command = {"n": 5}
        assert "malformed command" in w.error
        # the real path: crash at ToolIntent, recover, reconcile
        w.command = {"action": "crash_at", "position": "ToolIntent", "n": 6}
        assert w.error == "" and "SIGKILL" in w.status and w.last_result["paused_at"] == "ToolIntent"
        assert w.log_tail[-1]["type"] == "ToolIntent"
        assert [o for o in w.operations if o["operation_id"] == "test_r18"][0]["status"] == "in_doubt"
        assert w.in_doubt == ["test_r18"]
        w.command = {"action": "crash", "n": 7}            # the worker is already dead
        assert "already exited" in w.error
        w.command = {"action": "recover", "n": 8}
        assert w.error == "" and w.last_result["in_doubt"] == ["test_r18"]
        w.command = {"action": "reconcile", "n": 9}
        # killed before the request left: the executor knows no job, and absence is not proof, so it stays in doubt
        act = w.last_result["actions"]["test_r18"]
        assert w.error == "" and w.in_doubt == ["test_r18"]
        assert act["executor_status"] == "unknown" and act["action"] == "kept in doubt"
        # start (free run) then crash now
        w.command = {"action": "start", "n": 10}
        assert w.error == "" and s.worker_running()
        w.command = {"action": "crash", "n": 11}
        assert w.error == "" and w.last_result["signal"] == "SIGKILL" and not s.worker_running()
        assert not w.busy
    finally:
        pids = list(s.pids)
        s.close()
    assert pids and all(process_gone(p) and group_gone(p) for p in pids)


def test_a_crashed_run_is_not_discarded_until_read_or_confirmed(tmp_path):
    """Fault model: a student crashes a worker, then clicks start again before recovering.
    Invariant: the only record of the crash (its surviving log) is not deleted silently.
    Goal: a clear refusal; the same click again discards it on purpose."""
    s = WorksheetSession(store_kind="sqlite", seed=0, test_delay_s=0.0, workdir=tmp_path)
    try:
        w = CrashPanel(s)
        w.command = {"action": "crash_at", "position": "ToolIntent", "n": 1}
        assert w.error == "" and w.completed == 1
        before = len(s.events())
        w.command = {"action": "start", "n": 2}
        assert "not been recovered" in w.error and "again to discard" in w.error
        assert len(s.events()) == before and not s.worker_running()      # nothing lost
        w.command = {"action": "start", "n": 3}                           # confirmed: discard it
        assert w.error == "" and s.worker_running()
        w.command = {"action": "crash", "n": 4}
        survived = bool(s.events())            # a free run killed at once may not have logged anything
        w.command = {"action": "crash_at", "position": "ToolIntent", "n": 5}
        assert ("not been recovered" in w.error) == survived              # refused only if a log survived
        w.command = {"action": "crash_at", "position": "ToolIntent", "n": 6}
        w.command = {"action": "recover", "n": 7}                         # read: a new run is allowed
        assert w.error == "" and w.in_doubt == ["test_r18"]
        w.command = {"action": "crash_at", "position": "Authorized", "n": 8}
        assert w.error == "" and w.last_result["paused_at"] == "Authorized"
    finally:
        pids = list(s.pids)
        s.close()
    assert pids and all(process_gone(p) and group_gone(p) for p in pids)


def test_the_panel_offers_every_event_and_crashes_after_any_of_them(tmp_path):
    """Fault model: a SIGKILL right after any event of the trajectory, chosen in the panel.
    Invariant: the dropdown lists every event of the trajectory, validated in Python; the kill
    lands where the choice says (the surviving log ends at that event's batch).
    Goal: the panel crashes the worker anywhere, not only at the four table-3 points."""
    s = WorksheetSession(store_kind="sqlite", seed=0, test_delay_s=0.0, workdir=tmp_path)
    try:
        w = CrashPanel(s)
        points = s.crash_points()
        assert [p["label"] for p in w.positions] == [p.describe() for p in points]
        assert all(s.resolve_point(p["value"]) == q for p, q in zip(w.positions, points))
        assert w.position == "ToolResult"                       # the table-3 default, by its name
        w.command = {"action": "crash_at", "position": "TaskStarted", "n": 1}
        assert w.error == "" and w.last_result["log_position"] == 1 and w.last_result["worker_exit"] == -9
        assert [e["type"] for e in w.log_tail] == ["TaskStarted"] and w.position == "TaskStarted"
        w.command = {"action": "recover", "n": 2}
        w.command = {"action": "crash_at", "position": "3", "n": 3}    # a log position works too
        assert w.error == "" and w.log_tail[-1]["type"] == "BudgetReserved" and w.position == "BudgetReserved#1"
        w.command = {"action": "crash_at", "position": "ToolIntent#2", "n": 4}
        assert "not one of" in w.error and "12 BudgetSettled#2" in w.error
    finally:
        pids = list(s.pids)
        s.close()
    assert pids and all(process_gone(p) and group_gone(p) for p in pids)


def test_malformed_commands_and_a_closed_session_are_messages(tmp_path):
    s = WorksheetSession(store_kind="segment", seed=0, test_delay_s=0.0, workdir=tmp_path / "made" / "here")
    w = CrashPanel(s)
    for _n, bad in enumerate(["x", None, [1], 5, {"action": None}, {"n": 9}], start=1):
        done = w.completed
        w.command = bad
        assert "malformed command" in w.error and w.completed == done + 1
    w.command = {"action": "crash_at", "position": "P" * 1_000_000, "n": 50}
    assert "not one of" in w.error and len(w.error) < 800              # huge input is cut, not echoed
    s.close()
    w.command = {"action": "recover", "n": 51}
    assert "closed" in w.error and w.status == "closed" and w.operations == []


def test_session_creates_its_workdir_and_checks_arguments(tmp_path):
    for bad in ({"seed": "abc"}, {"seed": None}, {"seed": True}, {"step_timeout_s": -1},
                {"step_timeout_s": float("nan")}, {"usd_per_s": "x"}):
        with pytest.raises(ConfigError):
            WorksheetSession(**bad)
    with WorksheetSession(test_delay_s=0.0, workdir=tmp_path / "a" / "b") as s:
        s.start(pause_at="Authorized")
        assert s.workdir is not None and s.workdir.parent == tmp_path / "a" / "b"
        s.crash()


def test_recover_after_a_kill_at_position_0_says_what_the_empty_log_holds(tmp_path):
    """Fault model: the worker is SIGKILLed before its first event is durable (log position 0).
    Invariant: recover and reconcile report what the surviving log holds (nothing: no operation,
    no reservation, test_r18 absent), not "start a run and crash it first", which is what the
    student just did. Goal: the panel's messages match what just happened."""
    s = WorksheetSession(store_kind="sqlite", seed=0, test_delay_s=0.0, workdir=tmp_path)
    try:
        w = CrashPanel(s)
        w.command = {"action": "start", "n": 1}
        w.command = {"action": "crash", "n": 2}           # python has not even imported kernel_lib yet
        assert w.error == "" and w.last_result["log_position"] == 0 and s.events() == []
        w.command = {"action": "recover", "n": 3}
        assert w.error == "" and "start a run" not in w.summary
        assert "holds no event" in w.summary and w.last_result["in_doubt"] == [] and w.operations == []
        assert w.status.endswith("recover: the surviving log is empty, nothing to rebuild")
        w.command = {"action": "reconcile", "n": 4}
        assert w.error == "" and w.last_result["actions"]["test_r18"]["action"] == "absent"
        assert "test_r18: absent: test_r18 was never proposed" in w.summary
        w.command = {"action": "start", "n": 5}            # read: a new run needs no confirmation
        assert w.error == "" and s.worker_running()
    finally:
        s.close()


def test_status_line_follows_recover_and_reconcile(tmp_path):
    """Situation: crash after ToolResult, then recover, then reconcile. Invariant: the status line
    says which replacement step ran last and what it left in doubt (not only the kill).
    Goal: the status line matches the summary."""
    s = WorksheetSession(store_kind="sqlite", seed=0, test_delay_s=DELAY_S, workdir=tmp_path)
    try:
        w = CrashPanel(s, reconcile_timeout_s=120)     # a bound: it waits only while the test job runs
        w.command = {"action": "crash_at", "position": "ToolResult", "n": 1}
        assert w.status.endswith("not recovered yet")
        w.command = {"action": "recover", "n": 2}
        assert w.status.endswith("a replacement folded the surviving log: in doubt: test_r18")
        w.command = {"action": "reconcile", "n": 3}
        assert w.error == "" and w.last_result["in_doubt"] == []
        epoch = s.last_replacement["owner_epoch"]
        assert epoch == 1                    # the first replacement to take ownership installs owner_epoch 1
        assert w.status.endswith(f"reconciled by a replacement (owner_epoch {epoch}): in doubt: none")
        assert s.status() == w.status
    finally:
        s.close()


def test_the_panel_redraws_as_closed_when_its_session_closes(tmp_path):
    """Situation: the session is closed from code (or by the kernel's exit), not through the panel.
    Invariant: the panel's state follows the session without a click. Goal: no stale buttons-ready
    view of a session that is gone."""
    s = WorksheetSession(store_kind="sqlite", seed=0, test_delay_s=0.0, workdir=tmp_path)
    w = CrashPanel(s)
    w.command = {"action": "crash_at", "position": "Authorized", "n": 1}
    assert w.log_tail and "SIGKILL" in w.status
    s.close()
    assert w.status == "closed" and w.log_tail == [] and w.operations == []


def test_absent_reads_the_same_in_the_panel_and_the_cli(tmp_path):
    """Situation: a kill right after TaskStarted, so test_r18 was never proposed; reconcile.
    Invariant: the panel and the CLI's worksheet report print the same reading of that action
    (kernel_lib.live.session.action_reading: the action and its note), not a bare "absent".
    Goal: one wording for one state."""
    import subprocess
    import sys

    from kernel_lib.live.session import action_reading

    s = WorksheetSession(store_kind="sqlite", seed=0, test_delay_s=0.0, workdir=tmp_path)
    try:
        w = CrashPanel(s)
        w.command = {"action": "crash_at", "position": "TaskStarted", "n": 1}
        w.command = {"action": "reconcile", "n": 2}
        act = w.last_result["actions"]["test_r18"]
        reading = action_reading(act)
        assert act["action"] == "absent" and act["note"] and reading == f"absent: {act['note']}"
        assert f"test_r18: {reading}" in w.summary
    finally:
        s.close()
    env = {**__import__("os").environ, "TMPDIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "kernel_lib", "worksheet", "--crash-after", "TaskStarted",
                          "--test-delay-s", "0"], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    assert f"reconciled: {reading}" in out.stdout.splitlines()


@pytest.mark.parametrize("bad, says", [(3.5, "got a float"), (99, "not one of"), (None, "got a NoneType"),
                                       ("Lunch", "not one of"), ([1], "got a list")])
def test_a_wrong_position_set_from_code_is_the_widgets_message(tmp_path, bad, says):
    """Situation: code sets ``panel.position`` to a wrong type or an unknown point.
    Invariant: no TraitError or traceback; the position keeps its previous value; ``error`` says
    why in the panel's words. Goal: code and clicks get the same kind of message."""
    s = WorksheetSession(store_kind="sqlite", seed=0, test_delay_s=0.0, workdir=tmp_path)
    try:
        w = CrashPanel(s)
        w.position = 3                                  # a log position is a valid spec: stored by name
        assert w.position == "BudgetReserved#1" and w.error == ""
        w.position = bad
        assert w.position == "BudgetReserved#1"
        assert w.error.startswith("position: crash position") and says in w.error
        assert "kept BudgetReserved#1" in w.error
    finally:
        s.close()


# Run All of notebook 11.1, then the panel in use (no stale message, the session open, start
# starts a worker): tests/test_browser_crash_panel.py drives exactly that in JupyterLab (a kernel
# run of the same notebook here repeated it; issue 15: suite time).


def test_the_status_line_follows_a_freely_running_worker_without_a_click(tmp_path):
    """Situation: start (no crash), then nobody clicks. Invariant: the panel re-reads the session
    while its worker runs (newcomer report, issue 15: the status stayed at "running" until a
    refresh). Goal: the status line reaches "exited" and the log tail holds the worker's events,
    with no command sent after start."""
    s = WorksheetSession(store_kind="sqlite", seed=0, test_delay_s=DELAY_S, workdir=tmp_path)
    try:
        w = CrashPanel(s)
        w.watch_interval_s = 0.1
        w.command = {"action": "start", "n": 1}
        assert w.error == ""
        deadline = time.monotonic() + 90
        while "exited" not in w.status and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "exited with code" in w.status, w.status
        assert w.status == s.status() and w.log_tail and w.log_tail[-1]["sequence"] == len(s.events())
        assert w.completed == 1      # nothing else was sent
    finally:
        s.close()


def test_a_wrong_position_sent_from_the_page_keeps_the_last_good_one(tmp_path):
    """Situation: the page sends a position that is no crash point (``set_state``, as the
    browser does: the value arrives inside ``hold_trait_notifications``, where the trait already
    holds it when the validator runs). Invariant: the position stays the last accepted one and
    the message names it. Goal: a bad value from the page is refused like one set from code."""
    s = WorksheetSession(store_kind="sqlite", seed=0, test_delay_s=0.0, workdir=tmp_path)
    try:
        w = CrashPanel(s)
        w.position = 3
        assert w.position == "BudgetReserved#1"
        w.set_state({"position": "Lunch"})
        assert w.position == "BudgetReserved#1"
        assert "kept BudgetReserved#1" in w.error
    finally:
        s.close()
