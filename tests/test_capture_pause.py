"""Measuring the capture pause C and T_restore on this machine (kernel_lib.cadence.measure_capture_pause,
§11.4.3), the one measurement notebooks 11.4 and 11.9 both take C from.

Invariants: every capture is a real, published, restorable full checkpoint written into its own fresh
blob directory (so deduplication cannot hide the write); C is the median whole capture and carries its
samples and provenance; the record handed back has every Checkpoint folded in, so the trajectory can go
on from the log's head; bad counts and folders are typed errors.
"""

from __future__ import annotations

import statistics

import pytest

from kernel_lib.cadence import CaptureMeasurement, measure_capture_pause
from kernel_lib.checkpoint import restore
from kernel_lib.core.events import TaskStarted
from kernel_lib.core.record import fold, initial_record
from kernel_lib.errors import CadenceParameterError
from kernel_lib.log import FailureDomain, SQLiteStore, TrajectoryLog

TRAJ = "traj_capture_pause"
WORKSPACE = {"median.py": b"def median(xs):\n    return sorted(xs)[len(xs) // 2]\n", "README": b"r18\n"}


@pytest.fixture
def log(tmp_path):
    store = SQLiteStore.open(tmp_path / "log.sqlite", create=True)
    lg = TrajectoryLog(store, TRAJ, must_survive=FailureDomain.HOST_CRASH)
    lg.append(TaskStarted(task_id="t", requester="lab", objective="measure C", grant_ids=["g"],
                          budget_ceiling_usd=1.0, finalization_reserve_usd=0.1))
    yield lg
    store.close()


def test_each_capture_is_a_real_published_checkpoint_in_its_own_directory(log, tmp_path):
    rec = fold(initial_record(TRAJ), log.events())
    m = measure_capture_pause(log, rec, WORKSPACE, tmp_path, repeats=3, restore_repeats=2)
    assert isinstance(m, CaptureMeasurement) and len(m.captures) == 3
    assert sorted(p.name for p in tmp_path.glob("blobs-*")) == ["blobs-1", "blobs-2", "blobs-3"]
    assert all(c.kind == "full" and c.bytes_written > 0 for c in m.captures)     # nothing deduplicated away
    events = list(log.store.read(TRAJ))
    assert sum(e.event_type.startswith("Checkpoint") for e in events) == 3
    assert m.record.last_sequence_number == log.head
    assert m.record.to_dict() == fold(initial_record(TRAJ), events).to_dict()
    assert m.pause.source == "measured" and m.pause.unit == "s" and len(m.pause.samples) == 3
    assert m.pause.value == statistics.median(c.total_s for c in m.captures)
    assert m.freeze.value == statistics.median(c.pause_s for c in m.captures) <= m.pause.value
    assert m.restore is not None and m.restore.source == "measured" and len(m.restore.samples) == 2
    back = restore(log.store, TRAJ, m.blobs, dest=tmp_path / "restored")    # the last capture restores the state
    assert back.checkpoint.checkpoint_id == m.captures[-1].checkpoint_id
    assert {p.name: p.read_bytes() for p in (tmp_path / "restored").iterdir()} == WORKSPACE


def test_without_restore_repeats_no_restore_is_timed(log, tmp_path):
    m = measure_capture_pause(log, fold(initial_record(TRAJ), log.events()), WORKSPACE, tmp_path, repeats=1)
    assert m.restore is None and len(m.captures) == 1 and "1 real full captures" in m.pause.method


@pytest.mark.parametrize("kw", [{"repeats": 0}, {"repeats": 10 ** 6}, {"repeats": True}, {"restore_repeats": -1},
                                {"restore_repeats": 1.5}])
def test_bad_counts_are_typed_errors(log, tmp_path, kw):
    with pytest.raises(CadenceParameterError):
        measure_capture_pause(log, fold(initial_record(TRAJ), log.events()), WORKSPACE, tmp_path, **kw)


def test_a_missing_directory_is_a_typed_error(log, tmp_path):
    with pytest.raises(CadenceParameterError, match="not an existing folder"):
        measure_capture_pause(log, fold(initial_record(TRAJ), log.events()), WORKSPACE, tmp_path / "absent")
