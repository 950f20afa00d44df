"""Notebook FR.5 in JupyterLab the way a student meets it: Run All, then step through figure 5's ladder.

Fault model: "prev" clicked on the first message, the slider and the turn menu used, a message
clicked in the ladder, the buttons pressed past the last message.
Invariant: after Run All the stepper shows the message the notebook moved it to, with no error
output and no stale message;
each move shows the message the kernel computed (readout, detail table, the highlighted row of the
SVG); a refused move shows the widget's own message and the next accepted one clears it; the
ladder fits the notebook's width (no sideways scrolling at 1400 px with the file browser open).
Goal: step, scrub and jump through figure 5 with nothing to work around. Screenshots go to the
test's tmp folder (and to ``DAL_SCREENSHOT_DIR`` when set).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.browser_support import _ERROR_OUTPUTS, _KERNEL_IDLE

pytestmark = pytest.mark.browser

NOTEBOOK = "fr_5_synthesis.ipynb"


def _completed(widget) -> int:
    return int(widget.get_attribute("data-completed") or 0)


def _wait_done(page, widget, before: int) -> None:
    page.wait_for_function("([el, before]) => Number(el.dataset.completed) > before",
                           arg=[widget.element_handle(), before], timeout=120_000)


def _click(page, widget, action: str) -> None:
    before = _completed(widget)
    widget.locator(f"button[data-action={action}]").click()
    _wait_done(page, widget, before)


def _shot(page, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=False)
    if os.environ.get("DAL_SCREENSHOT_DIR"):
        shutil.copy(path, Path(os.environ["DAL_SCREENSHOT_DIR"]) / path.name)
    return path


def test_run_all_then_step_through_the_ladder(lab, browser, tmp_path):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(lab.tree(f"notebooks/{NOTEBOOK}"))
        page.wait_for_function("() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
                               f" return !!w && !!w.context && w.context.path.endsWith('{NOTEBOOK}'); }}",
                               timeout=120_000)
        page.wait_for_function(_KERNEL_IDLE, timeout=120_000)
        page.evaluate("() => window.jupyterapp.shell.activateById('filebrowser')")
        page.evaluate("async () => { await window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        widget = page.locator(".dal-lifeline-stepper").first
        widget.wait_for(state="visible", timeout=300_000)
        page.wait_for_function(_KERNEL_IDLE, timeout=300_000)
        page.locator(".dal-lifeline-stepper").nth(1).wait_for(state="visible", timeout=300_000)   # the live one
        page.wait_for_function(_KERNEL_IDLE, timeout=300_000)
        assert page.evaluate(_ERROR_OUTPUTS) == []
        error, status = widget.locator(".dal-error"), widget.locator(".dal-status")
        widget.scroll_into_view_if_needed()        # Run All leaves the notebook scrolled to its end
        page.wait_for_function("(el) => el.textContent.trim().length > 0", arg=status.element_handle(),
                               timeout=60_000)
        # the notebook's next cell moved the stepper from code to the recovery after the kill
        assert error.inner_text().strip() == "" and "· recover" in status.inner_text(), status.inner_text()
        total = int(status.inner_text().split(" of ")[1].split(" ")[0])
        assert widget.locator("g.dal-ll-msg").count() == total
        assert widget.locator("text.dal-ll-name").all_text_contents() == [
            "control plane K_sched", "write-ahead log L_wal", "saga engine S_saga", "sandbox / services"]

        _click(page, widget, "first")
        assert "message 1 of" in status.inner_text()
        _click(page, widget, "prev")                            # refused: nothing before the first
        assert "no message before the first" in error.inner_text(), error.inner_text()
        _click(page, widget, "next")
        assert error.inner_text().strip() == "" and "message 2 of" in status.inner_text()
        assert widget.get_attribute("data-step") == "2"

        # the turn menu: turn 3 provisions the staging database, whose answer is lost after the effect
        before = _completed(widget)
        widget.locator("select.dal-turn").select_option(label="turn 3: provision_db")
        _wait_done(page, widget, before)
        assert "turn 3: provision_db" in status.inner_text()
        for _ in range(5):              # propose, intent, dispatch, effect, timeout, then the probe
            _click(page, widget, "next")
        detail = widget.locator(".dal-detail-table")
        assert "probe" in detail.inner_text() and "status lookup of T3" in detail.inner_text(), detail.inner_text()
        current = widget.locator("g.dal-ll-current")
        assert current.count() == 1 and "status lookup of T3" in current.text_content()
        assert widget.locator("g.dal-ll-future").count() == total - int(widget.get_attribute("data-step"))
        assert widget.evaluate("(el) => el.scrollWidth <= el.clientWidth + 1")      # no sideways scrolling
        widget.scroll_into_view_if_needed()
        _shot(page, tmp_path, "fr5_stepper_probe")

        # click the crash in the ladder itself: the recovery folds the surviving log and rebuilds Σ
        before = _completed(widget)
        widget.locator("g.dal-ll-msg.k-crash").click()
        _wait_done(page, widget, before)
        assert "· crash" in status.inner_text() and "process kill" in detail.inner_text()
        _click(page, widget, "next")
        assert "Σ = [C1, C3, C5]" in detail.inner_text(), detail.inner_text()
        _click(page, widget, "next")                             # the restarted model's premature deploy
        _click(page, widget, "next")
        assert "FAILED config_digest" in detail.inner_text() and "turn 6" in detail.inner_text(), detail.inner_text()
        widget.scroll_into_view_if_needed()
        _shot(page, tmp_path, "fr5_stepper_held")

        _click(page, widget, "last")
        _click(page, widget, "next")                             # refused: past the last
        assert f"the ladder has {total} messages" in error.inner_text()
        _click(page, widget, "first")
        assert error.inner_text().strip() == "" and "message 1 of" in status.inner_text()
        assert page.evaluate(_ERROR_OUTPUTS) == []
    finally:
        page.close()
