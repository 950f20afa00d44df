"""Crash anywhere (issue 14): every event the worker appends is a crash point.

Fault model: the worker process dies by SIGKILL right after *any* event of its trajectory is
durable, not only after the four table-3 events (``--pause-at TaskStarted`` used to be accepted by
the worker and never fire: it ran to completion).
Invariant: a pause point names exactly one event of the trajectory; the worker really stops right
after it is durable (its marker, the surviving log's length and the event at that position agree;
an event appended in one batch with the next ones is durable only with them, so the log ends at
the batch's end) and the kill is a real SIGKILL (exit -9); a point that names no event is a typed
error listing the valid ones.
Goal: the CLI, the session and the crash panel can crash the worker at every position.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel_lib.errors import ConfigError, UnknownCrashPointError
from kernel_lib.live.controller import crash_points, expected_at
from kernel_lib.live.crash_points import points_of, resolve_point, spec_name
from kernel_lib.live.session import WorksheetSession
from kernel_lib.live.worker import OPERATION, reference_events, resolve_crash_point
from tests.helpers import group_gone, process_gone

POINTS = crash_points()
TYPES = list(dict.fromkeys(p.event_type for p in POINTS))


# ------------------------------------------------------------------------------------------------
# units: the grammar, on the reference trajectory
# ------------------------------------------------------------------------------------------------


def test_the_reference_trajectory_has_every_event_type_the_worker_appends():
    """The crash points are the positions of the worker's own gate steps, 1..N without a gap,
    and they cover the model call, admission, intent, results and settlements."""
    evs = reference_events()
    assert [p.position for p in POINTS] == [e.sequence_number for e in evs] == list(range(1, len(evs) + 1))
    assert {"TaskStarted", "ContextBuilt", "ModelReplied", "Authorized", "BudgetReserved", "ToolIntent",
            "ToolResult", "BudgetSettled"} <= set(TYPES)
    assert points_of(reference_events(seed=5)) == tuple(dataclasses.replace(p, durable_at=p.position)
                                                         for p in crash_points(5))
    # a point's batch ends at or after it, and the batch ends are themselves points
    assert all(p.position <= p.durable_at for p in POINTS)
    assert {p.durable_at for p in POINTS} <= {p.position for p in POINTS} and POINTS[-1].durable_at == len(POINTS)
    assert [p.event_type for p in crash_points(5)] == [p.event_type for p in POINTS]   # seed changes no type


@pytest.mark.parametrize("point", POINTS, ids=lambda p: p.label)
def test_every_position_is_addressable_by_number_label_and_short_name(point):
    assert resolve_crash_point(point.position) == point
    assert resolve_crash_point(str(point.position)) == point
    assert resolve_crash_point(point.label) == point
    assert resolve_crash_point(spec_name(point, POINTS, OPERATION)) == point
    assert resolve_point(point, POINTS, OPERATION) == point


def test_bare_types_keep_their_table_3_meaning():
    """A bare type names its first event for test_r18 (the four table-3 points are unchanged),
    or its first event when test_r18 has none."""
    for name in ("Authorized", "BudgetReserved", "ToolIntent", "ToolResult"):
        p = resolve_crash_point(name)
        first_for_op = next(q for q in POINTS if q.event_type == name and q.subject == OPERATION)
        assert p.subject == OPERATION and p == first_for_op
    assert resolve_crash_point("TaskStarted").position == 1
    assert resolve_crash_point("ContextBuilt").subject == "model_call_1"
    assert resolve_crash_point("ToolResult") != resolve_crash_point("ToolResult#2")
    assert resolve_crash_point("Authorized#1").subject == "model_call_1"


@given(st.one_of(st.integers(), st.text(max_size=40)))
def test_anything_else_is_a_typed_error_listing_every_valid_point(spec):
    valid = {p.position for p in POINTS}
    try:
        p = resolve_crash_point(spec)
    except UnknownCrashPointError as exc:
        assert isinstance(exc, ConfigError)
        assert list(exc.choices) == [q.describe() for q in POINTS]
        assert all(c in str(exc) for c in exc.choices)
        return
    assert p in POINTS
    if isinstance(spec, int):
        assert spec in valid
    else:   # it was a position, a type, or TYPE#K
        s = spec.strip()
        assert re.fullmatch(r"[0-9]+", s) or s.split("#")[0] in TYPES


@pytest.mark.parametrize("bad", [0, len(POINTS) + 1, -1, "Nope", "ToolIntent#2", "Authorized#0", "", True, 2.0,
                                 None, "P" * 100_000])
def test_bad_points_are_refused(bad):
    with pytest.raises(UnknownCrashPointError, match="unknown crash point"):
        resolve_crash_point(bad)


def test_expected_follows_eq_1_along_the_trajectory():
    """What recovery may conclude about test_r18 moves only forward along eq. 1: absent (not yet
    proposed), not dispatched (no durable intent), in doubt (intent, no complete evidence),
    established; each stage occurs, and the four table-3 names keep their own lines."""
    order = ["test_r18 absent", "not dispatched", "in doubt", "established"]
    stages = [next(i for i, o in enumerate(order) if expected_at(p.position).startswith(o)) for p in POINTS]
    assert stages == sorted(stages) and set(stages) == set(range(len(order)))
    from kernel_lib.live.controller import EXPECTED
    assert all(expected_at(k) == v for k, v in EXPECTED.items())


# ------------------------------------------------------------------------------------------------
# real processes: pause, SIGKILL, surviving log
# ------------------------------------------------------------------------------------------------


def _crash_and_read(session: WorksheetSession, pause_at):
    started = session.start(pause_at=pause_at)
    pid = started["worker_pid"]
    assert session.worker_running()            # it paused: it did not run the trajectory to its end
    crash = session.crash()
    return started, crash, session.events(), pid


def test_pause_at_task_started_really_pauses_and_is_killed_at_position_1(tmp_path):
    with WorksheetSession("sqlite", seed=0, test_delay_s=0.0, workdir=tmp_path) as s:
        started, crash, events, pid = _crash_and_read(s, "TaskStarted")
        assert started["paused"]["log_position"] == 1 and started["paused"]["event_type"] == "TaskStarted"
        assert crash["signal"] == "SIGKILL" and crash["worker_exit"] == -9 and crash["log_position"] == 1
        assert [e.event_type for e in events] == ["TaskStarted"]
        rec = s.recovered()
        assert rec["log_position"] == 1 and OPERATION not in rec["operations"] and rec["in_doubt"] == []
        pids = list(s.pids)
    assert process_gone(pid) and all(group_gone(p) for p in pids)


@pytest.mark.parametrize("event_type", TYPES)
def test_the_worker_pauses_and_dies_after_every_event_type(event_type, tmp_path):
    """One real run per event type (the sqlite and segment stores alternate by position): the
    marker, the kill and the surviving log agree on the position the point names. The sweep
    (tests/test_worksheet_sweep.py) covers every position on both stores."""
    point = resolve_crash_point(event_type)
    with WorksheetSession("segment" if point.position % 2 else "sqlite", seed=1, test_delay_s=0.0,
                          workdir=tmp_path) as s:
        started, crash, events, _ = _crash_and_read(s, event_type)
        assert started["paused"]["log_position"] == point.durable_at == crash["log_position"]
        assert started["paused"]["event_position"] == point.position
        assert crash["worker_exit"] == -9
        assert len(events) == point.durable_at and events[point.position - 1].event_type == event_type
        # the real run's prefix is the reference trajectory's, type by type and subject by subject
        assert [q.label for q in points_of(events)] == [q.label for q in crash_points(1)[:point.durable_at]]
        assert [q.subject for q in points_of(events)] == [q.subject for q in crash_points(1)[:point.durable_at]]
    assert list(tmp_path.iterdir()) == []


def test_cli_crash_after_any_point_and_a_bad_one(tmp_path):
    p = subprocess.run([sys.executable, "-m", "kernel_lib", "worksheet", "--crash-after", "TaskStarted",
                        "--test-delay-s", "0", "--json"], capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["crash"]["log_position"] == 1 and r["crash"]["worker_exit"] == -9
    assert r["crash"]["point"]["event_type"] == "TaskStarted" and r["recovered"]["log_position"] == 1
    assert r["reconciled"]["actions"][OPERATION]["action"] == "absent"
    for spec in ("ToolIntent#3", ""):            # an empty point is refused, not taken for the default
        bad = subprocess.run([sys.executable, "-m", "kernel_lib", "worksheet", "--crash-after", spec],
                             capture_output=True, text=True, timeout=60)
        assert bad.returncode == 2 and "unknown crash point" in bad.stderr and "12 BudgetSettled#2" in bad.stderr
    worker = subprocess.run([sys.executable, "-m", "kernel_lib.live.worker", "--store", "sqlite", "--store-path",
                             str(tmp_path / "never.sqlite"), "--executor-url", "http://127.0.0.1:9",
                             "--public-key", "x", "--snapshot-digest", "0" * 64, "--pause-at", "Lunch"],
                            capture_output=True, text=True, timeout=60)
    assert worker.returncode == 2 and "unknown crash point" in worker.stderr
    assert not (tmp_path / "never.sqlite").exists()         # refused before anything was opened
    worker = subprocess.run([sys.executable, "-m", "kernel_lib.live.worker", "--store", "sqlite", "--store-path",
                             str(tmp_path / "never.sqlite"), "--executor-url", "http://127.0.0.1:9",
                             "--public-key", "x", "--snapshot-digest", "0" * 64, "--pause-at", ""],
                            capture_output=True, text=True, timeout=60)
    assert worker.returncode == 2 and "unknown crash point" in worker.stderr
    assert not (tmp_path / "never.sqlite").exists()
