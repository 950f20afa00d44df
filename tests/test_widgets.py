"""Widgets own no state: the scrubber shows what kernel_lib's fold computes, and bad input is a message."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel_lib.sim.worksheet import worksheet_events
from kernel_lib.core.record import fold, initial_record
from widgets.scrubber import LogScrubber


def test_scrubber_shows_the_fold_at_every_position():
    events = worksheet_events()
    w = LogScrubber(events, position=0)
    for pos in range(len(events) + 1):
        w.position = pos
        rec = fold(initial_record(events[0].trajectory_id), events[:pos])
        assert w.error == "" and w.record["position"] == pos
        assert w.record["in_doubt"] == rec.in_doubt()
        assert {o["operation_id"]: o["status"] for o in w.record["operations"]} == {
            k: op.status for k, op in rec.operations.items()}
    intent = next(e.sequence_number for e in events if e.event_type == "ToolIntent")
    w.position = intent
    assert "test_r18" in w.record["in_doubt"] and w.record["budget"]["outstanding_reservations_usd"] > 0


@pytest.mark.parametrize("bad", [-1, 10_000])
def test_a_position_past_the_end_is_a_message_not_a_traceback(bad):
    events = worksheet_events()
    w = LogScrubber(events, position=3)
    w.position = bad
    assert "outside the log" in w.error and w.record["position"] == 3
    w.position = 4
    assert w.error == "" and w.record["position"] == 4


def test_an_empty_log_is_refused_clearly():
    with pytest.raises(ValueError, match="nothing to scrub"):
        LogScrubber([])


def test_the_marimo_scrubber_app_runs():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "apps" / "scrubber.py"
    spec = importlib.util.spec_from_file_location("scrubber_app", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    outputs, defs = mod.app.run()
    assert defs["scrubber"].widget.max_position == len(defs["events"])


def test_scrubber_snaps_back_from_bad_positions_and_refuses_foreign_input():
    import dataclasses

    from kernel_lib.log import load_events
    from widgets.scrubber import LogScrubber

    events = load_events(str(Path(__file__).resolve().parents[1] / "datasets" / "worksheet_r18_example.jsonl"))
    w = LogScrubber(events, position=9)
    shown = dict(w.record)
    for bad in (-1, len(events) + 1, 10**30, True):
        w.position = bad
        assert ("not a log position" if bad is True else "outside the log") in w.error
        assert w.position == 9 and w.record == shown and w.last_event.endswith("ToolIntent")   # label stays true
    w.position = 11
    assert w.error == "" and w.last_event.endswith("ToolResult")
    mixed = events + [dataclasses.replace(e, trajectory_id="other") for e in events[:2]]
    with pytest.raises(ValueError, match="2 trajectories"):
        LogScrubber(mixed)
    with pytest.raises(TypeError, match="Event objects"):
        LogScrubber([1, 2, 3])
