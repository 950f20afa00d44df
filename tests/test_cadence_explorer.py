"""The cadence explorer widget (§11.4.2 eq. 3, §11.4.3 theorem 11.1, eq. 5, eq. 6, Napkin Math 11.1).

Fault model: a reader (or code) sets givens that make no sense (a negative pause, a zero crash rate,
a stride below 1 or beyond the run, NaN, an empty box, a string), from Python or from the page.
Invariant: every number and chart the widget shows comes from kernel_lib.cadence for the last
valid givens; a bad given is a message in ``error`` and changes nothing else; nothing raises.
Goal: moving a slider in a real browser recomputes the readout and redraws the charts, offline.
"""

from __future__ import annotations

import json

import altair as alt
import pytest

from kernel_lib.cadence import (
    CrashTrace,
    Quantity,
    evaluate_strides,
    flat_minimum_factor,
    logged_stride_turns,
    logging_stride_gain,
    measure_reconstruction,
    poisson_trace,
    snapshot_write_volumes,
    trace_overhead,
    unlogged_stride_turns,
    worst_case_restore_s,
)
import kernel_lib.cadence.napkin as napkin
from widgets.cadence_explorer import (
    _ESM,
    BYTES_PER_KB,
    BYTES_PER_MB,
    DEFAULTS,
    GIVENS,
    LOGGED,
    ON_TRACE,
    UNLOGGED,
    CadenceExplorer,
    explore,
    trace_strides,
)

from tests.browser_support import _ERROR_OUTPUTS, _KERNEL_IDLE   # fixtures browser, lab: tests/conftest.py

NAPKIN_TRACE = CrashTrace(100, (37, 83), "fixed test trace")


def layer_values(spec: dict, predicate) -> list[dict]:
    """Rows of every layer whose inline data rows satisfy ``predicate`` (first row tested)."""
    out = []
    for layer in spec.get("layer", []):
        data = layer.get("data", {})
        rows = data.get("values") if "values" in data else spec.get("datasets", {}).get(data.get("name"), [])
        if rows and predicate(rows[0]):
            out.append(rows)
    return out


def trace_rows(spec: dict) -> list[dict]:
    layers = layer_values(spec, lambda r: r.get("regime") == ON_TRACE)
    assert len(layers) == 2, "one layer of points and one ring for the best stride"
    points, ring = sorted(layers, key=len, reverse=True)
    return points, ring


def snapshot(w: CadenceExplorer) -> str:
    return json.dumps([w.overhead_spec, w.storage_spec, w.readout, w.readout_lines, w.overhead_svg, w.storage_svg,
                       w.revision], sort_keys=True, default=str)


# --- Python side ----------------------------------------------------------------------------------
def test_optimum_is_logged_stride_turns_and_both_curves_are_drawn():
    g = dict(pause_s=2.0, failure_rate_per_turn=0.01, reconstruction_s_per_turn=0.05, reexecution_s_per_turn=30.0)
    w = CadenceExplorer(draw_svg=False, **g)
    assert w.error == "" and w.revision == 1
    k_log = logged_stride_turns(2.0, 0.01, 0.05)
    k_unl = unlogged_stride_turns(2.0, 0.01, 30.0)
    assert w.readout["logged_stride_turns"] == k_log
    assert w.readout["unlogged_stride_turns"] == k_unl
    assert w.readout["logging_gain"] == logging_stride_gain(0.05, 30.0)
    assert f"{k_log:.3g} turns" in w.readout_lines[0]
    # the chart marks the same optima, and its flat bands span [k*/2, 2 k*]
    optima = {r["regime"]: r for rows in layer_values(w.overhead_spec, lambda r: "label" in r) for r in rows}
    assert optima[LOGGED]["stride_turns"] == k_log and optima[UNLOGGED]["stride_turns"] == k_unl
    bands = {r["regime"]: r for rows in layer_values(w.overhead_spec, lambda r: "lo" in r) for r in rows}
    assert bands[LOGGED]["lo"] == pytest.approx(k_log / 2) and bands[LOGGED]["hi"] == pytest.approx(2 * k_log)
    curve = layer_values(w.overhead_spec, lambda r: r.get("regime") in (LOGGED, UNLOGGED) and "label" not in r
                         and "lo" not in r)[0]
    logged = [r for r in curve if r["regime"] == LOGGED]
    best = min(logged, key=lambda r: r["overhead_s_per_turn"])
    assert best["stride_turns"] == pytest.approx(k_log, rel=0.05)   # the sampled curve bottoms out at k*
    assert {r["regime"] for r in curve} == {LOGGED, UNLOGGED}
    # the specs are valid Vega-Lite (the interactive path skips altair's schema pass for speed)
    view = explore(g, validate_specs=True)
    alt.LayerChart.from_dict(view.overhead_spec, validate=True)
    alt.HConcatChart.from_dict(view.storage_spec, validate=True)


def test_trait_changes_recompute_everything():
    w = CadenceExplorer(draw_svg=False, stride_turns=10, turns=200)
    rev, k0 = w.revision, w.readout["logged_stride_turns"]
    w.pause_s = 4 * DEFAULTS["pause_s"]                       # quadrupling C doubles k* (eq. 5)
    assert w.error == "" and w.revision == rev + 1
    assert w.readout["logged_stride_turns"] == pytest.approx(2 * k0)
    w.failure_rate_per_turn = DEFAULTS["failure_rate_per_turn"] / 4   # and so does quartering lambda
    assert w.readout["logged_stride_turns"] == pytest.approx(4 * k0)
    # the flat-minimum factor at the current stride is kernel_lib's (x + 1/x)/2 with x = k / k*
    w.stride_turns = 40
    k_log = w.readout["logged_stride_turns"]
    assert w.readout["flat_factor_logged"] == flat_minimum_factor(40 / k_log)
    assert w.readout["flat_factor_unlogged"] == flat_minimum_factor(40 / w.readout["unlogged_stride_turns"])
    assert w.readout["flat_band_factor"] == flat_minimum_factor(2.0)
    rule = layer_values(w.overhead_spec, lambda r: set(r) == {"stride_turns"})
    assert rule == [[{"stride_turns": 40}]]
    # eq. 3 and the restore times follow turns, growth, stride, rate and per-delta overhead
    w.update(turns=500, state_growth_kb_per_turn=128, stride_turns=5, restore_mb_per_s=100, delta_overhead_ms=10)
    assert w.error == ""
    vol = snapshot_write_volumes(128 * BYTES_PER_KB, 5, 100)
    assert w.readout["checkpoints"] == 100
    assert (w.readout["full_write_bytes"] == vol.full_bytes
            and w.readout["incremental_write_bytes"] == vol.incremental_bytes)
    assert w.readout["write_amplification"] == vol.ratio
    read_s = vol.incremental_bytes / (100 * BYTES_PER_MB)
    assert w.readout["full_restore_s"] == read_s
    assert w.readout["chain_restore_s"] == worst_case_restore_s(100, read_s, 0.010)
    rows = w.view.storage
    assert [r["checkpoint"] for r in rows] == list(range(1, 101)) and rows[-1]["turn"] == 500
    assert all(r["full_bytes"] == snapshot_write_volumes(128 * BYTES_PER_KB, 5, r["checkpoint"]).full_bytes
               for r in rows)
    # the uncheckpointed tail of a run that is not a whole number of strides
    w.turns = 503
    assert w.readout["checkpoints"] == 100 and w.readout["uncheckpointed_tail_turns"] == 3


@pytest.mark.parametrize("name, value, says", [
    ("pause_s", -1.0, "pause_s must be > 0"),
    ("pause_s", 0, "pause_s must be > 0"),
    ("failure_rate_per_turn", 0, "failure_rate_per_turn must be > 0"),
    ("reconstruction_s_per_turn", -0.1, "reconstruction_s_per_turn must be > 0"),
    ("stride_turns", 0, "stride_turns must be >= 1"),
    ("stride_turns", 2.5, "stride_turns must be a whole number"),
    ("stride_turns", 10_000, "longer than the trajectory"),
    ("turns", 0, "turns must be >= 1"),
    ("pause_s", float("nan"), "pause_s must be finite"),
    ("reexecution_s_per_turn", float("inf"), "reexecution_s_per_turn must be finite"),
    ("restore_mb_per_s", 0.0, "restore_mb_per_s must be > 0"),
    ("delta_overhead_ms", -5, "delta_overhead_ms must be >= 0"),
    ("state_growth_kb_per_turn", "lots", "state_growth_kb_per_turn must be a number"),
    ("restore_s_per_crash", None, "restore_s_per_crash has no value"),
])
def test_bad_values_are_a_message_and_keep_the_last_chart(name, value, says):
    w = CadenceExplorer(draw_svg=False, trace=NAPKIN_TRACE)
    before = snapshot(w)
    setattr(w, name, value)                    # from Python: no exception
    assert says in w.error and "last valid givens" in w.error
    assert snapshot(w) == before               # charts, readout and revision untouched
    # the same from the page: the front end sends JSON, where NaN and an empty box arrive as null
    w.error = ""
    w.set_state({name: None})
    assert f"{name} has no value" in w.error and snapshot(w) == before
    # a good value clears the message and recomputes
    setattr(w, name, DEFAULTS[name] if name != "turns" else NAPKIN_TRACE.turns)
    assert w.error == "" and w.revision == json.loads(before)[-1] + 1


def test_bad_values_never_raise_even_before_any_chart_and_in_update():
    w = CadenceExplorer(draw_svg=False, pause_s=-2)
    assert "pause_s must be > 0" in w.error and "no chart yet" in w.error and w.revision == 0
    assert w.readout == {} and w.overhead_spec == {}
    w.pause_s = 2.0
    assert w.error == "" and w.revision == 1
    assert w.update(pause_s=-1, failure_rate_per_turn=0) is False
    assert "pause_s must be > 0" in w.error and "failure_rate_per_turn must be > 0" in w.error
    assert w.revision == 1
    assert w.update(bogus_s=3) is False and "unknown given" in w.error
    assert w.update(pause_s=1.0, failure_rate_per_turn=0.05) is True and w.revision == 2
    # NaN twice in a row (no trait change the second time) is still reported
    w.pause_s = float("nan")
    w.error = ""
    w.pause_s = float("nan")
    assert "pause_s must be finite" in w.error
    with pytest.raises(TypeError, match="unknown givens"):
        CadenceExplorer(draw_svg=False, pause_ms=3)   # a misspelt keyword is a programming error


def test_trace_overlay_has_one_point_per_stride_and_its_minimum_is_evaluate_strides():
    r = napkin.reconstruct()
    w = CadenceExplorer.napkin_11_1(draw_svg=False)
    assert w.error == "" and w.trace.crash_turns == r.crash_turns
    assert (w.pause_s, w.reconstruction_s_per_turn, w.restore_s_per_crash) == (
        r.pause_s, r.reconstruction_s_per_turn, r.restore_s_per_crash)
    kw = dict(pause_s=r.pause_s, restore_s_per_crash=r.restore_s_per_crash,
              reconstruction_s_per_turn=r.reconstruction_s_per_turn)
    ev = evaluate_strides(w.trace, None, **kw)
    points, ring = trace_rows(w.overhead_spec)
    assert [p["stride_turns"] for p in points] == list(range(1, w.trace.turns + 1))   # one per stride
    assert [p["overhead_s"] for p in points] == [x.overhead_s for x in ev.results]
    assert all(p["overhead_s_per_turn"] == p["overhead_s"] / w.trace.turns for p in points)
    assert ring == [p for p in points if p["best"]]
    assert ring[0]["stride_turns"] == ev.best.stride_turns == r.best_on_trace["stride_turns"]
    assert ring[0]["overhead_s"] == ev.best.overhead_s == min(p["overhead_s"] for p in points)
    assert w.readout["trace_best_stride_turns"] == ev.best.stride_turns
    assert w.readout["trace_overhead_at_stride_s"] == trace_overhead(w.trace, 25, **kw).overhead_s
    # moving the pause moves the overlay: still one point per stride, minimum still evaluate_strides'
    w.pause_s = 2.0
    ev2 = evaluate_strides(w.trace, None, **{**kw, "pause_s": 2.0})
    points2, ring2 = trace_rows(w.overhead_spec)
    assert len(points2) == len(ev2.results) and ring2[0]["stride_turns"] == ev2.best.stride_turns
    # replacing the trace from Python recomputes; a long trace is sampled, one point per evaluated stride
    long = poisson_trace(5000, 0.002, seed=3)
    w.update(turns=5000)
    w.trace = long
    points3, ring3 = trace_rows(w.overhead_spec)
    strides = trace_strides(5000, w.stride_turns)
    assert [p["stride_turns"] for p in points3] == strides and len(strides) < 5000
    assert ring3[0]["overhead_s"] == evaluate_strides(long, strides, **{**kw, "pause_s": 2.0}).best.overhead_s
    # no trace: no points, and the readout says nothing about one
    w.trace = None
    assert layer_values(w.overhead_spec, lambda r: r.get("regime") == ON_TRACE) == []
    assert "trace_best_stride_turns" not in w.readout


def test_poisson_trace_follows_the_sliders():
    w = CadenceExplorer(draw_svg=False, poisson_seed=7, turns=400, stride_turns=10, failure_rate_per_turn=0.01)
    assert w.trace is None and w.view.trace == poisson_trace(400, 0.01, 7)
    w.failure_rate_per_turn = 0.05
    assert w.view.trace == poisson_trace(400, 0.05, 7)
    points, _ = trace_rows(w.overhead_spec)
    assert len(points) == 400


def test_measured_values_are_labelled_measured():
    r_q = measure_reconstruction("sqlite", turns=12, short_suffix_turns=2, long_suffix_turns=10, repeats=3)
    assert isinstance(r_q, Quantity) and r_q.source == "measured"
    w = CadenceExplorer(draw_svg=False, reconstruction_s_per_turn=r_q, trace=NAPKIN_TRACE)
    assert w.error == "" and w.reconstruction_s_per_turn == r_q.value
    assert w.sources["reconstruction_s_per_turn"] == "measured" and w.sources["pause_s"] == "given"
    assert w.readout["logged_stride_turns"] == logged_stride_turns(w.pause_s, w.failure_rate_per_turn, r_q.value)
    assert "(measured)" in w.readout_lines[0]
    assert any(line.startswith("measured: reconstruction_s_per_turn") for line in w.readout_lines)
    assert "measured" in json.dumps(w.overhead_spec["title"])
    assert w.view.trace_evaluation.sources["reconstruction_s_per_turn"] == "measured"
    # a slider far below the default range still reaches the measured value
    spec = next(s for s in w.sliders if s["name"] == "reconstruction_s_per_turn")
    assert spec["min"] <= r_q.value <= spec["max"]
    # moving that slider makes R a given again
    w.reconstruction_s_per_turn = 0.2
    assert w.sources["reconstruction_s_per_turn"] == "given" and "(measured)" not in w.readout_lines[0]


def test_charts_are_drawn_offline_as_svg():
    pytest.importorskip("vl_convert", reason="vl-convert-python draws the SVG")
    w = CadenceExplorer(trace=NAPKIN_TRACE, stride_turns=25)
    assert w.error == "" and w.notice == ""
    for svg in (w.overhead_svg, w.storage_svg):
        assert svg.lstrip().startswith("<svg") and "</svg>" in svg
        assert "<script" not in svg and "<image" not in svg
    old = w.overhead_svg
    w.pause_s = 5.0
    assert w.overhead_svg != old
    # the page needs no network: the front end imports nothing
    assert "import " not in _ESM and "http" not in _ESM and "vegaEmbed" not in _ESM


def test_without_the_svg_engine_the_readout_still_works(monkeypatch):
    import widgets.cadence_explorer as ce

    def missing(spec):
        raise ImportError("No module named 'vl_convert'")

    monkeypatch.setattr(ce, "render_svg", missing)
    w = CadenceExplorer(trace=NAPKIN_TRACE)
    assert w.error == "" and "vl-convert-python" in w.notice and w.revision == 1
    assert w.overhead_svg == "" and w.overhead_spec and w.readout["logged_stride_turns"] > 0


def test_every_given_has_a_slider_with_its_unit():
    w = CadenceExplorer(draw_svg=False)
    names = [s["name"] for s in w.sliders]
    assert names == list(GIVENS)
    for s in w.sliders:
        assert s["min"] <= DEFAULTS[s["name"]] <= s["max"] and s["unit"]
        assert s["scale"] in ("log", "linear") and (s["min"] > 0 or s["scale"] == "linear")


# --- real browser ----------------------------------------------------------------------------------
BROWSER_NOTEBOOK = "cadence_explorer_browser_check.ipynb"
_RUN_ALL = "async () => { await window.jupyterapp.commands.execute('notebook:run-all-cells'); }"


def _notebook() -> dict:
    src = ["from widgets.cadence_explorer import CadenceExplorer\n",
           "explorer = CadenceExplorer.napkin_11_1()\n",
           "explorer"]
    return {"cells": [{"cell_type": "code", "execution_count": None, "id": "cadence", "metadata": {},
                       "outputs": [], "source": src}],
            "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
            "nbformat": 4, "nbformat_minor": 5}


def _wait_revision(page, widget, above: int) -> int:
    page.wait_for_function("([el, n]) => Number(el.dataset.revision || 0) > n", arg=[widget.element_handle(), above],
                           timeout=60_000)
    return int(widget.get_attribute("data-revision"))


@pytest.mark.browser
def test_browser_slider_moves_the_optimum_and_bad_input_keeps_the_chart(lab, browser):
    import os
    from pathlib import Path

    (lab.root / "notebooks" / BROWSER_NOTEBOOK).write_text(json.dumps(_notebook()))
    r = napkin.reconstruct()
    page = browser.new_page(viewport={"width": 1400, "height": 1400})
    try:
        page.goto(lab.tree(f"notebooks/{BROWSER_NOTEBOOK}"))
        page.wait_for_function(_KERNEL_IDLE, timeout=120_000)
        page.evaluate(_RUN_ALL)
        widget = page.locator(".dal-cadence")
        widget.wait_for(state="visible", timeout=180_000)
        rev = _wait_revision(page, widget, 0)
        page.wait_for_function(_KERNEL_IDLE, timeout=120_000)
        assert page.evaluate(_ERROR_OUTPUTS) == []
        readout = widget.locator(".dal-readout li").first
        k0 = logged_stride_turns(r.pause_s, r.failure_rate_per_turn, r.reconstruction_s_per_turn)
        assert f"k* = sqrt(2C/(λR)) = {k0:.3g} turns" in readout.inner_text()
        # the bullet (drawn outside the item's box) has room inside the widget: not cut at the left
        assert readout.bounding_box()["x"] - widget.bounding_box()["x"] >= 12
        chart = widget.locator(".dal-chart-overhead svg")
        chart.wait_for(state="visible", timeout=30_000)
        svg0 = widget.locator(".dal-chart-overhead").inner_html()
        assert widget.locator(".dal-chart-storage svg").count() == 1

        # drag the capture-pause slider to its top end: the balance stride moves out with sqrt(C)
        top = next(s for s in CadenceExplorer.napkin_11_1(draw_svg=False).sliders if s["name"] == "pause_s")["max"]
        slider = widget.locator("input.dal-slider[data-name=pause_s]")
        slider.focus()
        slider.press("End")
        rev = _wait_revision(page, widget, rev)
        k1 = logged_stride_turns(top, r.failure_rate_per_turn, r.reconstruction_s_per_turn)
        page.wait_for_function("([el, t]) => el.textContent.includes(t)",
                               arg=[readout.element_handle(), f"= {k1:.3g} turns"], timeout=30_000)
        assert widget.locator("input.dal-number[data-name=pause_s]").input_value() == f"{top:g}"
        svg1 = widget.locator(".dal-chart-overhead").inner_html()
        assert svg1 != svg0 and widget.locator(".dal-error").inner_text().strip() == ""
        if os.environ.get("DAL_SCREENSHOT_DIR"):
            page.screenshot(path=str(Path(os.environ["DAL_SCREENSHOT_DIR"]) / "cadence_explorer.png"), full_page=True)

        # a negative pause typed into the box: a message, the same chart and readout, no traceback
        box = widget.locator("input.dal-number[data-name=pause_s]")
        box.fill("-1")
        box.press("Enter")
        error = widget.locator(".dal-error")
        page.wait_for_function("(el) => el.textContent.includes('pause_s must be > 0')",
                               arg=error.element_handle(), timeout=30_000)
        assert widget.locator(".dal-chart-overhead").inner_html() == svg1
        assert f"= {k1:.3g} turns" in readout.inner_text()
        assert int(widget.get_attribute("data-revision")) == rev
        assert page.evaluate(_ERROR_OUTPUTS) == []
    finally:
        page.close()


# --- adversarial review: huge and numpy values, underflowing rates, interactive limits -----------------
def test_a_huge_integer_is_a_message_not_an_overflow():
    w = CadenceExplorer(draw_svg=False, trace=NAPKIN_TRACE)
    before = snapshot(w)
    w.pause_s = 10 ** 400                      # was OverflowError out of the validator
    assert w.error.startswith("pause_s must be between") and "last valid givens" in w.error
    assert w.pause_s is None and snapshot(w) == before
    assert "about 401 digits" in w.error and len(w.error) < 600
    w2 = CadenceExplorer(draw_svg=False, turns=10 ** 400)      # nor at construction
    assert "turns" in w2.error and w2.revision == 0
    w.pause_s = 2.0
    assert w.error == ""


def test_numpy_numbers_are_synced_as_plain_numbers():
    import numpy as np
    w = CadenceExplorer(draw_svg=False, trace=NAPKIN_TRACE)
    w.pause_s = np.int64(3)                    # was synced as None while the charts used 3
    assert w.error == "" and w.pause_s == 3 and type(w.pause_s) is int
    assert w.view.givens["pause_s"] == 3 and w.get_state()["pause_s"] == 3
    w.reconstruction_s_per_turn = np.float32(0.25)
    assert w.error == "" and type(w.reconstruction_s_per_turn) is float and w.reconstruction_s_per_turn == 0.25
    w.stride_turns = np.int32(20)
    assert w.error == "" and w.readout["stride_turns"] == 20 and type(w.stride_turns) is int
    json.dumps(w.get_state(), default=str)      # everything synced is plain JSON


def test_an_underflowing_rate_blames_the_rate():
    w = CadenceExplorer(draw_svg=False)
    w.failure_rate_per_turn = 1e-320           # was blamed on stride_turns
    assert w.error.startswith("failure_rate_per_turn must be between")
    assert "stride_turns" not in w.error.split(". The charts")[0]


def test_turns_are_capped_to_what_stays_interactive():
    import time

    from widgets.cadence_explorer import MAX_TRACE_CRASHES, MAX_TURNS
    w = CadenceExplorer(draw_svg=False, poisson_seed=7)
    rev = w.revision
    t0 = time.perf_counter()
    w.turns = 10 ** 7                           # took 46 s with a Poisson trace; refused at once now
    assert time.perf_counter() - t0 < 10        # a loose bound (loaded machines): it is a refusal, not a trace
    assert "interactively" in w.error and f"{MAX_TURNS:,}" in w.error and w.revision == rev
    w.update(turns=MAX_TURNS, failure_rate_per_turn=2 * MAX_TRACE_CRASHES / MAX_TURNS)
    assert "Poisson trace" in w.error and "interactively" in w.error
    # the refused rate keeps its last good value; the accepted length of the trajectory is applied
    assert w.invalid.keys() == {"failure_rate_per_turn"} and w.revision == rev + 1
    assert w.view.givens["turns"] == MAX_TURNS and w.view.givens["failure_rate_per_turn"] == DEFAULTS[
        "failure_rate_per_turn"]
    w.update(turns=MAX_TURNS, failure_rate_per_turn=0.05)    # 5000 expected crashes: accepted
    assert w.error == "" and w.revision == rev + 2 and w.view.trace.turns == MAX_TURNS
    # without a trace the cap still applies (a redraw is promised to be interactive)
    assert CadenceExplorer(draw_svg=False, turns=MAX_TURNS + 1).error.startswith("turns = ")
