"""The checkpoint index behind the log scrubber (§11.4, time travel of §11.6).

Invariant: the record at any position, taken from the nearest in-memory snapshot plus at most one
stride of events, equals the fold of the whole prefix, in any order of positions, and asking never
changes the snapshots. The scrubber's view is the same with and without the index.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib.checkpoint import CheckpointIndex
from kernel_lib.errors import ConfigError, FoldError
from kernel_lib.sim.worksheet import worksheet_events
from kernel_lib.core.record import fold, initial_record
from tests.helpers import ev, intent, task
from tests.test_record_fold import record_run, steps_strategy
from widgets.scrubber import LogScrubber, record_view


def _view_from_to_dict(events, position):
    """The scrubber's view as it was computed before the index: fold the prefix, then to_dict."""
    rec = fold(initial_record(events[0].trajectory_id), events[:position])
    d = rec.to_dict()
    ops = []
    for op in rec.operations.values():
        att = op.attempts.get(op.current_attempt_id or "")
        ops.append({"operation_id": op.operation_id, "kind": op.kind, "status": op.status,
                    "attempt_id": op.current_attempt_id, "job_handle": op.job_handle,
                    "last_evidence": att.last_result_status if att else None})
    return {"position": position, "operations": ops, "in_doubt": d["in_doubt"],
            "attempts_in_doubt": d["attempts_in_doubt"], "budget": d["budget"], "control_state": rec.control_state}


@settings(max_examples=40)
@given(steps=steps_strategy, stride=st.integers(1, 9), data=st.data())
def test_record_at_any_position_equals_the_fold_and_snapshots_never_change(steps, stride, data):
    events, _ = record_run(steps)
    idx = CheckpointIndex(events, stride=stride)
    frozen = [json.dumps(s.state_dict(), sort_keys=True) for s in idx._snapshots]
    order = data.draw(st.lists(st.integers(0, len(events)), min_size=1, max_size=12))
    for p in order:
        got = idx.record_at(p)
        assert got.to_dict() == fold(initial_record("traj-h"), events[:p]).to_dict()
        assert record_view(events, p, idx) == _view_from_to_dict(events, p)
    assert [json.dumps(s.state_dict(), sort_keys=True) for s in idx._snapshots] == frozen
    assert idx.snapshot_positions == list(range(0, len(events) + 1, stride))[:len(idx._snapshots)]


def test_a_log_that_stops_folding_keeps_its_good_prefix():
    evs = [ev(task(), 1), ev(intent(), 2), ev(intent(), 3)]   # the same attempt intended twice
    idx = CheckpointIndex(evs, stride=1)
    assert idx.built_to == 2 and idx.record_at(2).in_doubt() == ["test_r18"]
    with pytest.raises(FoldError):
        idx.record_at(3)
    with pytest.raises(ConfigError):
        idx.record_at(4)


def test_the_scrubber_widget_shows_the_same_records_through_its_index():
    events = worksheet_events()
    w = LogScrubber(events)
    for p in [len(events), 0, 7, 3, len(events) - 1]:
        w.position = p
        assert w.record == _view_from_to_dict(events, p) and w.error == ""
