"""Widget messages as a student meets them (issue 15), state set from Python as a notebook cell does.

Each test: the situation (what the student or a notebook cell did) -> the invariant the widget keeps
-> the goal (what the student sees)."""

from __future__ import annotations

import math
import re

import pytest

from kernel_lib.cadence import stride_summary
from kernel_lib.history.scrub import record_view
from kernel_lib.sim.worksheet import worksheet_events
import widgets.cadence_explorer as ce
from widgets.cadence_explorer import DEFAULTS, CadenceExplorer
from widgets.retention_planner import RetentionPlanner
from widgets.scrubber import LogScrubber

LABEL_FONT_PX = getattr(ce, "LABEL_FONT_PX", 11)     # the chart's label font (11 px before it was named)


def test_scrubber_stale_error_clears_when_a_valid_position_is_set_again():
    """Situation: a notebook cell (11.2, run with Run All) sets a position past the end, then sets the
    position already shown. Invariant: every assignment of a valid position is checked and clears
    the message. Goal: after Run All the widget shows no stale "outside the log" message."""
    events = worksheet_events()
    w = LogScrubber(events, position=9)
    w.position = len(events) + 5
    assert "outside the log" in w.error and w.position == 9
    w.position = 9                                    # the value it already holds: no trait change
    assert w.error == ""
    assert w.record == record_view(events, 9)


@pytest.mark.parametrize("bad", ["5", 4.0, None, [3]])
def test_scrubber_wrong_type_from_code_is_the_widgets_message(bad):
    """Situation: code sets ``position`` to a string, a float, None or a list. Invariant: no
    traitlets TraitError escapes; the record shown and the slider stay where they were. Goal: the
    widget's own message names the position and the range to choose from."""
    events = worksheet_events()
    w = LogScrubber(events, position=3)
    shown = dict(w.record)
    w.position = bad
    assert "not a log position" in w.error and f"0 to {len(events)}" in w.error
    assert "TraitError" not in w.error and w.position == 3 and w.record == shown
    w.position = 4
    assert w.error == "" and w.record == record_view(events, 4)


def test_scrubber_budget_is_written_as_money():
    """Situation: the scrubber shows the budget at a position. Invariant: the sentence is the
    record's budget (kernel_lib's fold) in dollars. Goal: no raw floats such as 3.988 or 1e-05."""
    from widgets.tables import money_text
    events = worksheet_events()
    w = LogScrubber(events, position=len(events))
    b = w.record["budget"]
    for key in ("actual_consumption_usd", "outstanding_reservations_usd", "available_usd", "ceiling_usd"):
        assert money_text(b[key]) in w.budget_line
    assert not re.search(r"\de-?\d", w.budget_line)


def test_wrong_type_from_code_is_a_message_on_any_widget_and_clears_on_a_good_value():
    """Situation: code sets a typed trait (the planner's preset, the explorer's trace) to a value of
    the wrong type. Invariant: the trait keeps its value; no TraitError. Goal: the widget's message
    names the widget, the trait and what it takes, and a good value afterwards clears it."""
    p = RetentionPlanner()
    p.preset = 3
    assert p.preset == "repair" and p.error.startswith("RetentionPlanner.preset = 3 was refused")
    p.preset = "repair"                               # the same, valid value: the message is stale now
    assert p.error == ""
    w = CadenceExplorer(draw_svg=False)
    w.trace = "napkin"
    assert w.trace is None and "CadenceExplorer.trace" in w.error and "CrashTrace" in w.error


def test_cadence_explorer_applies_other_changes_while_one_box_is_invalid():
    """Situation: the pause box holds a refused value (-1) and the student moves the stride and the
    re-execution cost. Invariant: the refused given keeps its last good value in the computation;
    every other change is applied and kernel_lib's eq. 5 is evaluated on them. Goal: the invalid
    box is marked (``invalid``) and the charts still follow the other sliders."""
    w = CadenceExplorer(draw_svg=False)
    rev = w.revision
    w.pause_s = -1
    assert set(w.invalid) == {"pause_s"} and "pause_s must be > 0" in w.error
    w.stride_turns = 40
    w.reexecution_s_per_turn = 5.0
    assert set(w.invalid) == {"pause_s"} and "pause_s" in w.error
    assert w.view.givens["stride_turns"] == 40 and w.readout["stride_turns"] == 40
    want = stride_summary(DEFAULTS["pause_s"], DEFAULTS["failure_rate_per_turn"],
                          DEFAULTS["reconstruction_s_per_turn"], 5.0)
    assert math.isclose(w.readout["unlogged_stride_turns"], want.unlogged_stride_turns)
    assert w.revision == rev + 2
    w.pause_s = 1.0                                   # fixed: the mark goes, the given applies
    assert w.invalid == {} and w.error == "" and w.view.givens["pause_s"] == 1.0


def _label_and_point_boxes(spec: dict) -> tuple[list, list]:
    """Pixel boxes of the k* labels and of every drawn point in the overhead chart's layers."""
    w_px, h_px = spec["width"], spec["height"]
    enc0 = next(layer["encoding"] for layer in spec["layer"] if layer["mark"]["type"] == "line")
    xd, yd = enc0["x"]["scale"]["domain"], enc0["y"]["scale"]["domain"]

    def px(xv, yv):
        fx = (math.log10(xv) - math.log10(xd[0])) / (math.log10(xd[1]) - math.log10(xd[0]))
        fy = (math.log10(yv) - math.log10(yd[0])) / (math.log10(yd[1]) - math.log10(yd[0]))
        return fx * w_px, (1 - fy) * h_px

    labels, points = [], []
    for layer in spec["layer"]:
        mark, enc = layer["mark"], layer.get("encoding", {})
        rows = layer.get("data", {}).get("values", [])
        if mark["type"] == "text":
            for r in rows:
                x, y = px(r[enc["x"]["field"]], r[enc["y"]["field"]])
                y += mark.get("dy", 0)
                width = 0.62 * LABEL_FONT_PX * len(r["label"])
                top = y - LABEL_FONT_PX if mark.get("baseline") == "bottom" else y - LABEL_FONT_PX / 2
                labels.append((x - width / 2, top, x + width / 2, top + LABEL_FONT_PX))
        elif mark["type"] in ("point", "circle"):
            radius = math.sqrt(mark.get("size", 30)) / 2 + 1
            for r in rows:
                x, y = px(r[enc["x"]["field"]], r[enc["y"]["field"]])
                points.append((x - radius, y - radius, x + radius, y + radius))
    return labels, points


@pytest.mark.parametrize("givens", [{}, {"reexecution_s_per_turn": 0.2}, {"stride_turns": 22}])
def test_optimum_labels_do_not_cover_points(givens):
    """Situation: the overhead chart on Napkin Math 11.1's trace, whose eq. 6 points crowd around
    the logged optimum (and with R close to Re, the two optima close together). Invariant: no k*
    label's box meets a point, a diamond or the other label. Goal: every label and point readable."""
    w = CadenceExplorer.napkin_11_1(draw_svg=False, **givens)
    labels, points = _label_and_point_boxes(w.overhead_spec)
    assert len(labels) == 2 and len(points) > 10

    def meet(a, b):
        return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]

    assert not [(lab, p) for lab in labels for p in points if meet(lab, p)]
    assert not meet(labels[0], labels[1])


def test_retention_promises_say_what_a_zero_window_means():
    """Situation: a custom policy keeps no envelopes, so current recovery (a 0-month window) breaks.
    Invariant: the verdict is kernel_lib's (the promise is broken). Goal: the text says what the
    promise needs in words, never "needs 0 mo", and names the promise and the class for people."""
    p = RetentionPlanner()
    p.set_lifetime("envelopes", None)
    custom = next(r for r in p.promise_cells if r["policy"] == "custom")
    text = custom["current_recovery"]["text"]
    assert not custom["current_recovery"]["kept"]
    assert "0 mo" not in text and "envelopes not kept" in text and "can no longer be resumed" in text
    assert p.promise_labels["current_recovery"] == "current recovery"
    assert not any(re.search(r"\de-\d", v) for row in p.cost_cells for v in row.values())


def test_tables_write_money_numbers_and_strings_for_people():
    """Situation: a polars frame with sub-cent dollars, long floats, long strings and raw names.
    Invariant: the helper changes only how values are written (``.frame`` is the frame given).
    Goal: money as dollars, floats to 3 significant digits, no exponent, no quotes, nothing cut."""
    import polars as pl

    from widgets.tables import money_text, number_text, table

    long_text = "the executor accepted the job and the worker was killed before the result " * 2
    df = pl.DataFrame({"step": ["intent", long_text], "cost_usd": [3.31e-05, 2.12756571428],
                       "p50_ms": [0.0123456, 1234.5678], "tiny": [1e-9, 2.5]})
    t = table(df)
    assert t.frame is df
    assert t.headers == ("step", "cost ($)", "p50 (ms)", "tiny")
    assert t.rows[0][1:] == ("$0.0000331", "0.0123", "1×10⁻⁹") and t.rows[1][1:] == ("$2.13", "1,235", "2.5")
    assert t.rows[1][0] == long_text                 # not clipped
    page = t._repr_html_()
    assert long_text in page and '"intent"' not in page and "overflow-x:auto" in page
    assert "e-05" not in page and "e-09" not in str(t)
    assert money_text(0.1) == "$0.10" and money_text(-1234.5) == "-$1,234.50" and number_text(None) == "—"


def test_a_wide_table_keeps_its_first_column_in_view():
    """Newcomer report (issue 15): in 11.1's log tail the position column scrolled off-screen. A
    table of five or more columns pins its first column (sticky, painted with the page's
    background); a narrow one is left as it is."""
    from widgets.tables import STICKY_FROM_COLUMNS, table

    wide = table([{f"c{i}": i for i in range(STICKY_FROM_COLUMNS)}])._repr_html_()
    narrow = table([{f"c{i}": i for i in range(STICKY_FROM_COLUMNS - 1)}])._repr_html_()
    first_head, second_head = wide.split("<th ")[1:3]
    assert "position:sticky;left:0" in first_head and "sticky" not in second_head
    first_cell, second_cell = wide.split("<td ")[1:3]
    assert "position:sticky" in first_cell and "sticky" not in second_cell
    assert "sticky" not in narrow
