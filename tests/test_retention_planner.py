"""The retention planner widget (§11.8.1 lifetimes, §11.8.2 artifact classes, Napkin Math 11.2, exercise 7).

Fault model: a reader (or code) enters givens or lifetimes that make no sense (negative, NaN, infinite,
text, a fraction of a turn, a lifetime beyond a century, an unknown class or preset), from Python or
from the page. Invariant: every cost, share and verdict the planner shows is what kernel_lib.retention.pricing
computes for the last accepted values; a refused value leaves everything as it was, says why in
``error``, and (from Python) raises ConfigError. Goal: in a real browser, editing a lifetime reprices
the policy and flips its promise verdict, and an out-of-range lifetime is refused in place.
"""

from __future__ import annotations

import json
import math
import re

import pytest

import kernel_lib.retention.pricing as rt
from kernel_lib.errors import ConfigError
import kernel_lib.course.exercises.ex11_7 as ex11_7
from widgets.retention_planner import (
    _ESM,
    CUSTOM,
    GIVENS,
    MAX_MONTHS,
    RetentionPlanner,
    stacked_bar_svg,
    usd,
)


def _bytes_of(w: RetentionPlanner) -> rt.TrajectoryBytes:
    g = w.givens()
    return rt.trajectory_bytes(g["turns"], g["envelope_kb_per_turn"], g["observation_kb_per_turn"], pages=g["pages"],
                               page_kb_raw=g["page_kb_raw"], workspace_mb=g["workspace_mb"])


def _row(w: RetentionPlanner, policy: str, artifact: str = "total") -> dict:
    return next(r for r in w.rows() if r["policy"] == policy and r["artifact"] == artifact)


def _full(w: RetentionPlanner) -> str:
    return next(n for n in w.policies() if n.startswith("full retention"))


def _split(w: RetentionPlanner) -> str:
    return next(n for n in w.policies() if n.startswith("split lifetimes"))


def _snapshot(w: RetentionPlanner) -> str:
    return json.dumps([w.givens(), w.custom_lifetimes, w.rows(), w.plan.promise_rows, w.cost_cells, w.promise_cells,
                       w.chart_svg, w.readout_lines, w.revision], sort_keys=True, default=str)


# --- defaults: Napkin Math 11.2 as kernel_lib recomputes it ------------------------------------------
def test_defaults_reproduce_napkin_11_2_as_kernel_lib_computes_it():
    w = RetentionPlanner()
    nap = rt.napkin_11_2()
    printed = rt.NAPKIN_11_2_PRINTED["givens"]
    g = w.givens()
    assert g["turns"] == printed["turns"] and g["envelope_kb_per_turn"] == printed["envelope_kb_per_turn"]
    assert g["observation_kb_per_turn"] == printed["payload_kb_per_turn"]
    assert g["usd_per_gb_month"] == printed["usd_per_gb_month"] and g["replay_months"] == printed["months"]
    # the two quantities the box leaves implicit come from napkin_11_2 and are labelled inferred
    assert g["workspace_mb"] == nap.workspace_mb and g["attempt_cost_usd"] == nap.attempt_cost_usd
    assert "inferred" in w.sources["workspace_mb"] and "inferred" in w.sources["attempt_cost_usd"]
    full = _full(w)
    assert full == f"full retention {printed['months']:g} months"
    total = _row(w, full)
    assert total["bytes"] == pytest.approx(nap.total_bytes, rel=1e-12)
    assert total["usd_per_trajectory"] == pytest.approx(nap.cost_usd, rel=1e-12)
    assert total["share_of_attempt"] == pytest.approx(nap.share_of_attempt, rel=1e-12)
    log_share = _row(w, full, "envelopes")["share_of_attempt"] + _row(w, full, "observations")["share_of_attempt"]
    assert log_share == pytest.approx(nap.log_share_of_attempt, rel=1e-12)
    assert _row(w, full, "workspace")["byte_share"] == pytest.approx(nap.workspace_share_of_bytes, rel=1e-12)
    assert w.napkin() == nap and w.napkin().all_ok
    assert usd(nap.cost_usd) in w.readout_lines[-1] and "reproduced: yes" in w.readout_lines[-1]
    assert w.error == "" and w.revision == 1


@pytest.mark.parametrize("preset", ["repair", "research"])
def test_every_row_is_what_kernel_lib_retention_computes(preset):
    w = RetentionPlanner(preset)
    g, tb = w.givens(), _bytes_of(w)
    assert w.plan.bytes == tb
    wanted = rt.promises(g["replay_months"], g["diagnostic_months"], workspace=tb.workspace > 0)
    assert len(w.policies()) == 3 and CUSTOM in w.policies()
    for name, pol in w.policies().items():
        cost = rt.policy_cost_usd(tb, pol, g["usd_per_gb_month"])
        for a in (*rt.ARTIFACT_CLASSES, "total"):
            r = _row(w, name, a)
            assert r["usd_per_trajectory"] == cost[a]
            assert r["usd_per_fleet_year"] == rt.fleet_cost_usd(cost[a], g["trajectories"])
            assert r["share_of_attempt"] == rt.share_of_attempt(cost[a], g["attempt_cost_usd"])
            if a != "total":
                assert r["lifetime_months"] == pol.lifetime(a)
                assert r["gb_months"] == pytest.approx(rt.bytes_to_gb(tb.by_class()[a]) * (pol.lifetime(a) or 0))
        kept = rt.promises_kept(pol, wanted)
        for pr in w.plan.promise_rows:
            if pr["policy"] == name:
                assert pr["kept"] == kept[pr["promise"]].kept and tuple(pr["short"]) == kept[pr["promise"]].short
    df = w.table()
    assert df.height == 3 * (len(rt.ARTIFACT_CLASSES) + 1) and df.to_dicts() == w.rows()
    assert w.promise_table().height == 3 * len(rt.PROMISES)


def test_research_preset_matches_exercise_7_solution():
    w = RetentionPlanner("research")
    p = ex11_7.validate_params()
    assert w.givens()["workspace_mb"] == 0 and w.givens()["pages"] == p["pages"]
    s = ex11_7.solve()
    assert _row(w, _full(w))["usd_per_fleet_year"] == pytest.approx(s["fleet_full_retention_usd_per_year"], rel=1e-9)
    assert _row(w, _split(w))["usd_per_fleet_year"] == pytest.approx(s["fleet_policy_usd_per_year"], rel=1e-9)
    assert _row(w, _split(w), "raw_pages")["usd_per_trajectory"] == pytest.approx(
        rt.storage_cost_usd(_bytes_of(w).raw_pages, p["usd_per_gb_month"], p["raw_page_months"]))


def test_preset_switch_loads_givens_and_back():
    w = RetentionPlanner()
    repair = w.givens()
    w.load_preset("research")
    ex = ex11_7.DEFAULTS
    g = w.givens()
    for name in ("turns", "pages", "envelope_kb_per_turn", "observation_kb_per_turn", "page_kb_raw",
                 "usd_per_gb_month", "attempt_cost_usd", "trajectories", "replay_months"):
        assert g[name] == ex[name], name
    assert g["diagnostic_months"] == ex["raw_page_months"] and w.preset == "research"
    assert w.sources["turns"] == "exercise 7 default"
    w.preset = "repair"
    assert w.givens() == repair
    with pytest.raises(ConfigError, match="unknown preset"):
        w.load_preset("napkin")
    assert w.preset == "repair" and "unknown preset" in w.error


# --- policies and promises ------------------------------------------------------------------------
def test_changing_the_custom_policy_changes_its_verdicts_and_bill():
    w = RetentionPlanner()
    g = w.givens()
    verdict = lambda: {r["promise"]: (r["kept"], tuple(r["short"]))                  # noqa: E731
                       for r in w.plan.promise_rows if r["policy"] == CUSTOM}
    # starting custom: delivered observations dropped when the run settles -> replay broken
    assert verdict()["historical_replay"] == (False, ("observations",))
    assert verdict()["current_recovery"] == (True, ())
    before = _row(w, CUSTOM)["usd_per_trajectory"]
    w.set_lifetime("observations", g["replay_months"])
    assert verdict()["historical_replay"] == (True, ())
    after = _row(w, CUSTOM)["usd_per_trajectory"]
    added = rt.storage_cost_usd(_bytes_of(w).observations, g["usd_per_gb_month"], g["replay_months"])
    assert after == pytest.approx(before + added, rel=1e-12)
    # a workspace that is not kept breaks even current recovery of the repair run (§11.8.1)
    w.set_lifetime("workspace", None)
    assert verdict()["current_recovery"] == (False, ("workspace",))
    cell = next(r for r in w.promise_cells if r["policy"] == CUSTOM)["current_recovery"]
    assert cell["kept"] is False and "workspace" in cell["text"]
    # the research agent has no workspace, so the same lifetimes keep current recovery there
    w.load_preset("research")
    assert verdict()["current_recovery"] == (True, ())
    # the diagnostics promise reads raw pages only
    w.set_lifetime("raw_pages", 0)
    assert verdict()["diagnostics"] == (False, ("raw_pages",))
    assert verdict()["historical_replay"] == (True, ())


def test_promise_windows_follow_the_givens():
    w = RetentionPlanner("research")
    w.update(replay_months=24, diagnostic_months=3)
    assert _full(w) == "full retention 24 months" and _split(w) == "split lifetimes (raw pages 3 months)"
    custom = {r["promise"]: r["kept"] for r in w.plan.promise_rows if r["policy"] == CUSTOM}
    assert custom["historical_replay"] is False          # custom envelopes still at 12 < 24 months
    assert _row(w, _full(w))["usd_per_trajectory"] == rt.policy_cost_usd(
        _bytes_of(w), rt.full_retention(24), w.givens()["usd_per_gb_month"])["total"]


def test_extra_policies_are_compared_too():
    p = ex11_7.validate_params()
    extra = ex11_7.policies(p)["raw_instead"]
    w = RetentionPlanner("research", extra_policies=[extra])
    assert list(w.policies())[-1] == "raw_instead"
    kept = rt.promises_kept(extra, rt.promises(p["replay_months"], p["raw_page_months"]))
    rows = {r["promise"]: r["kept"] for r in w.plan.promise_rows if r["policy"] == "raw_instead"}
    assert rows == {k: v.kept for k, v in kept.items()} and rows["historical_replay"] is False
    with pytest.raises(ConfigError, match="used twice"):
        RetentionPlanner(extra_policies=[rt.RetentionPolicy(CUSTOM, {})])


# --- fleet scaling -----------------------------------------------------------------------------------
def test_fleet_bill_is_linear_in_trajectories():
    w = RetentionPlanner()
    n = w.givens()["trajectories"]
    per1 = {(r["policy"], r["artifact"]): r["usd_per_trajectory"] for r in w.rows()}
    fleet1 = {(r["policy"], r["artifact"]): r["usd_per_fleet_year"] for r in w.rows()}
    w.trajectories = 3 * n
    for r in w.rows():
        key = (r["policy"], r["artifact"])
        assert r["usd_per_trajectory"] == per1[key]
        assert r["usd_per_fleet_year"] == pytest.approx(3 * fleet1[key], rel=1e-12)
    w.trajectories = 0
    assert all(r["usd_per_fleet_year"] == 0 for r in w.rows())


# --- bad input ----------------------------------------------------------------------------------------
BAD_GIVENS = [("turns", -1), ("turns", 2.5), ("turns", 10 ** 400), ("turns", True), ("pages", 10 ** 8),
              ("envelope_kb_per_turn", float("nan")), ("observation_kb_per_turn", float("inf")),
              ("workspace_mb", -0.5), ("usd_per_gb_month", "0.023"), ("attempt_cost_usd", 0),
              ("trajectories", None), ("replay_months", MAX_MONTHS + 1), ("diagnostic_months", -1)]


@pytest.mark.parametrize("name,bad", BAD_GIVENS)
def test_a_bad_given_from_python_raises_and_keeps_the_previous_value(name, bad):
    w = RetentionPlanner()
    before, kept = _snapshot(w), getattr(w, name)
    with pytest.raises(ConfigError, match=name):
        setattr(w, name, bad)
    assert getattr(w, name) == kept and _snapshot(w) == before
    assert name in w.error and "kept the previous value" in w.error
    with pytest.raises(ConfigError):
        w.update(**{"turns": 7, name: bad})            # atomically: turns is not moved either
    assert _snapshot(w) == before
    w.turns = 31
    assert w.error == "" and w.givens()["turns"] == 31


@pytest.mark.parametrize("name,bad", BAD_GIVENS)
def test_a_bad_given_from_the_page_is_a_message_not_a_traceback(name, bad):
    w = RetentionPlanner()
    before, kept = _snapshot(w), getattr(w, name)
    w.set_state({name: bad})                          # what the front end's model.save_changes() reaches
    assert getattr(w, name) == kept and _snapshot(w) == before
    assert name in w.error


@pytest.mark.parametrize("artifact,bad,match", [("workspace", MAX_MONTHS + 1, "lifetime of workspace"),
                                                ("observations", -1, "lifetime of observations"),
                                                ("raw_pages", float("nan"), "lifetime of raw_pages"),
                                                ("envelopes", "", "has no value"),
                                                ("snapshots", 3, "unknown artifact class")])
def test_a_bad_lifetime_is_refused(artifact, bad, match):
    w = RetentionPlanner()
    before = _snapshot(w)
    with pytest.raises(ConfigError, match=match):
        w.set_lifetime(artifact, bad)
    assert _snapshot(w) == before and "kept the previous value" in w.error
    with pytest.raises(ConfigError, match=match):
        w.custom_lifetimes = {**w.custom_lifetimes, artifact: bad}
    assert _snapshot(w) == before
    w.set_state({"custom_lifetimes": {**w.custom_lifetimes, artifact: bad}})
    assert _snapshot(w) == before and re.search(match, w.error)


def test_bad_construction_raises():
    with pytest.raises(ConfigError, match="turns"):
        RetentionPlanner(turns=-5)
    with pytest.raises(ConfigError, match="unknown given"):
        RetentionPlanner(speed=3)
    with pytest.raises(ConfigError, match="unknown preset"):
        RetentionPlanner("napkin")
    with pytest.raises(ConfigError, match="lifetime of workspace"):
        RetentionPlanner(custom_lifetimes={"workspace": 10_000})


def test_numpy_values_are_synced_as_plain_numbers():
    np = pytest.importorskip("numpy")
    w = RetentionPlanner()
    w.update(turns=np.int64(40), workspace_mb=np.float32(20.0), pages=np.float64(3.0))
    assert type(w.turns) is int and w.turns == 40 and type(w.workspace_mb) is float and type(w.pages) is int
    assert w.sources["turns"] == "edited"
    json.dumps(w.get_state(), default=str)


# --- drawing --------------------------------------------------------------------------------------------
def test_stacked_bar_segments_are_proportional_to_kernel_costs():
    w = RetentionPlanner("research")
    svg = stacked_bar_svg(w.plan)
    assert svg == w.chart_svg
    segs = re.findall(r'<rect x="[\d.]+" y="\d+" width="([\d.]+)" height="\d+" fill="#\w+" '
                      r'data-policy="([^"]+)" data-artifact="(\w+)" data-usd="([^"]+)"', svg)
    assert segs
    biggest = max(c["total"] for c in w.plan.costs.values())
    for width, policy, artifact, cost in segs:
        expected = w.plan.costs[policy.replace("&amp;", "&")][artifact]
        assert float(cost) == expected
        assert float(width) == pytest.approx(440 * expected / biggest, abs=0.01)
    # classes with no bytes or not kept draw nothing
    assert not any(a == "workspace" for _, _, a, _ in segs)
    assert "http" not in _ESM and "import " not in _ESM.split("export default")[0]   # no CDN, no network
    assert "lmSuppressShortcuts" in _ESM


def test_every_given_has_a_spec_and_a_source():
    w = RetentionPlanner()
    assert [g["name"] for g in w.givens_spec] == list(GIVENS)
    assert set(w.sources) == set(GIVENS) and all(w.sources.values())
    assert all(math.isfinite(r["usd_per_trajectory"]) for r in w.rows())


# --- real browser ---------------------------------------------------------------------------------
from tests.browser_support import _ERROR_OUTPUTS, _KERNEL_IDLE   # noqa: E402  fixtures: tests/conftest.py

BROWSER_NOTEBOOK = "retention_planner_browser_check.ipynb"


def _wait_revision(page, widget, above: int) -> int:
    page.wait_for_function("([el, n]) => Number(el.dataset.revision || 0) > n",
                           arg=[widget.element_handle(), above], timeout=60_000)
    return int(widget.get_attribute("data-revision"))


@pytest.mark.browser
def test_browser_lifetime_edit_reprices_and_flips_the_verdict(lab, browser):
    import os
    from pathlib import Path

    import nbformat

    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# heading above"),
        nbformat.v4.new_code_cell("from widgets import RetentionPlanner\nplanner = RetentionPlanner()\nplanner")],
        metadata={"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}})
    nbformat.write(nb, lab.root / "notebooks" / BROWSER_NOTEBOOK)
    # expected figures, from kernel_lib.retention.pricing directly
    headless = RetentionPlanner()
    g, tb = headless.givens(), _bytes_of(headless)
    lives = dict(headless.custom_lifetimes)
    start_total = rt.policy_cost_usd(tb, rt.RetentionPolicy("c", lives), g["usd_per_gb_month"])["total"]
    lives["observations"] = 12.0
    new_total = rt.policy_cost_usd(tb, rt.RetentionPolicy("c", lives), g["usd_per_gb_month"])["total"]
    assert usd(new_total) != usd(start_total)

    page = browser.new_page(viewport={"width": 1400, "height": 1400})
    try:
        page.goto(lab.tree(f"notebooks/{BROWSER_NOTEBOOK}"))
        page.wait_for_function("() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
                               f" return !!w && !!w.context && w.context.path.endsWith('{BROWSER_NOTEBOOK}'); }}",
                               timeout=120_000)
        page.wait_for_function(_KERNEL_IDLE, timeout=120_000)
        kernel_id = page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.id")
        page.evaluate("async () => { await window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        widget = page.locator(".dal-retention").first
        widget.wait_for(state="visible", timeout=180_000)
        rev = _wait_revision(page, widget, 0)
        page.wait_for_function(_KERNEL_IDLE, timeout=120_000)
        assert page.evaluate(_ERROR_OUTPUTS) == []

        # (1) rendered: bars, cost table and promise table from the kernel
        widget.locator(".dal-chart svg rect[data-artifact=workspace]").first.wait_for(state="visible", timeout=30_000)
        total = widget.locator(".dal-costs tr[data-policy=custom] td[data-col=total]")
        replay = widget.locator(".dal-promises tr[data-policy=custom] td[data-promise=historical_replay]")
        assert total.inner_text() == usd(start_total)
        assert "broken" in replay.inner_text() and "observations" in replay.inner_text()
        assert widget.locator(".dal-chart rect[data-policy=custom][data-artifact=observations]").count() == 0

        # (2) keep delivered observations for the 12-month promise: repriced, replay kept
        box = widget.locator("input.dal-life[data-artifact=observations]")
        assert box.input_value() == "0"
        box.click()
        box.press("Control+a")
        box.press_sequentially("12")
        box.press("Enter")
        rev = _wait_revision(page, widget, rev)
        page.wait_for_function("([el, t]) => el.textContent === t", arg=[total.element_handle(), usd(new_total)],
                               timeout=30_000)
        assert replay.inner_text() == "kept"
        assert widget.locator(".dal-chart rect[data-policy=custom][data-artifact=observations]").count() == 1
        assert widget.locator(".dal-error").inner_text().strip() == ""
        if os.environ.get("DAL_SCREENSHOT_DIR"):      # for a person who wants to look
            page.screenshot(path=str(Path(os.environ["DAL_SCREENSHOT_DIR"]) / "retention_planner.png"), full_page=True)

        # (3) a lifetime beyond the accepted range is refused: message, box back to 12, nothing redrawn
        box.click()
        box.press("Control+a")
        box.press_sequentially("5000")           # "0, 0" would restart the kernel in command mode
        box.press("Enter")
        error = widget.locator(".dal-error")
        page.wait_for_function("(el) => el.textContent.includes('lifetime of observations must be')",
                               arg=error.element_handle(), timeout=30_000)
        assert "kept the previous value" in error.inner_text()
        page.wait_for_function("(el) => el.value === '12'", arg=box.element_handle(), timeout=10_000)
        assert total.inner_text() == usd(new_total) and replay.inner_text() == "kept"
        assert int(widget.get_attribute("data-revision")) == rev
        assert page.locator(".jp-Dialog").count() == 0
        assert page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.id") \
            == kernel_id
        assert page.evaluate(_ERROR_OUTPUTS) == []
    finally:
        page.close()
