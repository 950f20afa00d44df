"""Notebook FR.1 in JupyterLab the way a student meets it: Run All Cells, then drive the saga stepper.

Fault model: a fault queued on a compensator from the widget's controls, the runner abandoned in the
middle of the unwind by the "crash during unwind" button, a refused value typed into the k box, a
fault asked for on a step that already ran.
Invariant: after Run All the stepper is ready (no error output, no stale message); each click's
result is what the kernel computed (Σ folded from the log, the services' resources and counts, Φ's
change since the saga began); a refused value shows the widget's own message and the next valid
click clears it; at a 1400 px window with the file browser open every table fits its column (no
sideways scrolling hides Σ's state or L_fwd's compensator). Goal: Run All, then step, crash,
recover and unwind with nothing to work around. Screenshots go to the test's tmp folder (and to
``DAL_SCREENSHOT_DIR`` when set).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.browser_support import _ERROR_OUTPUTS, _KERNEL_IDLE

NOTEBOOK = "fr_1_sagas.ipynb"

pytestmark = pytest.mark.browser


def _completed(widget) -> int:
    return int(widget.get_attribute("data-completed") or 0)


def _click_and_wait(page, widget, action: str) -> None:
    """Click a stepper button and wait until the kernel says that command finished."""
    before = _completed(widget)
    widget.locator(f"button[data-action={action}]").click()
    page.wait_for_function("([el, before]) => Number(el.dataset.completed) > before",
                           arg=[widget.element_handle(), before], timeout=120_000)


def _shot(page, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=False)
    if os.environ.get("DAL_SCREENSHOT_DIR"):
        shutil.copy(path, Path(os.environ["DAL_SCREENSHOT_DIR"]) / path.name)
    return path


# every column of the stepper whose content is wider than its box (it would scroll sideways)
_OVERFLOWING = """(el) => Array.from(el.querySelectorAll('.dal-col')).filter(
  c => c.scrollWidth > c.clientWidth + 1).map(c => [c.scrollWidth, c.clientWidth])"""


def test_run_all_then_drive_the_saga_stepper(lab, browser, tmp_path):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(lab.tree(f"notebooks/{NOTEBOOK}"))
        page.wait_for_function("() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
                               f" return !!w && !!w.context && w.context.path.endsWith('{NOTEBOOK}'); }}",
                               timeout=120_000)
        page.wait_for_function(_KERNEL_IDLE, timeout=120_000)
        # the layout a student has: the file browser open beside the notebook
        page.evaluate("() => window.jupyterapp.shell.activateById('filebrowser')")
        assert page.evaluate("() => !window.jupyterapp.shell.leftCollapsed")
        page.evaluate("async () => { await window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        widget = page.locator(".dal-saga-stepper").first
        widget.wait_for(state="visible", timeout=300_000)
        page.wait_for_function(_KERNEL_IDLE, timeout=300_000)
        assert page.evaluate(_ERROR_OUTPUTS) == []
        error, summary = widget.locator(".dal-error"), widget.locator(".dal-summary")
        status = widget.locator(".dal-status")
        assert error.inner_text().strip() == "" and "not started" in status.inner_text()

        # a value the widget refuses: k = 9 (the saga has five steps); nothing is queued
        box = widget.locator("input.dal-number[data-name=fault_step]")
        box.fill("9")
        _click_and_wait(page, widget, "inject")
        assert "fault_step = '9' was refused" in error.inner_text(), error.inner_text()
        assert summary.inner_text().strip() == ""

        # a valid fault clears the message: C1's first request gets a 503 (retried by the runner)
        box.fill("1")
        widget.locator("select.dal-target").select_option("compensator")
        widget.locator("select.dal-kind").select_option("server_error")
        _click_and_wait(page, widget, "inject")
        assert error.inner_text().strip() == "", error.inner_text()
        assert "queued server_error on C1 (teardown_sandbox)" in summary.inner_text()

        for _ in range(5):
            _click_and_wait(page, widget, "step")
        assert "T5 publish_dns FAILED" in summary.inner_text()
        assert widget.locator("table.dal-stack tr").count() == 1 + 4          # header + C4..C1
        assert widget.locator("table.dal-resources td", has_text="active").count() == 4
        assert widget.locator("table.dal-invariants tr").count() == 1 + 4     # Φ moved: four live kinds
        widget.scroll_into_view_if_needed()
        _shot(page, tmp_path, "saga_stepper_after_t5")
        assert widget.evaluate(_OVERFLOWING) == []                            # the tables fit their columns
        assert widget.locator("table.dal-stack th", has_text="state").is_visible()

        # T5 ran (and failed): a fault on it is refused, naming the first step that has not run
        widget.locator("select.dal-target").select_option("forward")
        box.fill("5")
        _click_and_wait(page, widget, "inject")
        assert "T5 (publish_dns) already ran" in error.inner_text(), error.inner_text()
        assert "the first step that has not run is C4 (unbind_firewall)" in error.inner_text()

        widget.locator("input.dal-number[data-name=crash_after]").fill("2")
        _click_and_wait(page, widget, "crash_unwind")
        assert "C3 dispatched" in summary.inner_text() and "in doubt: C3" in summary.inner_text()
        assert widget.locator("table.dal-stack tr.dal-in-doubt", has_text="C3").count() == 1
        widget.scroll_into_view_if_needed()
        _shot(page, tmp_path, "saga_stepper_after_crash")

        _click_and_wait(page, widget, "step")                  # refused: the runner is gone
        assert "recover first" in error.inner_text()
        _click_and_wait(page, widget, "recover")
        assert error.inner_text().strip() == "" and "saga COMPENSATING" in summary.inner_text()
        _click_and_wait(page, widget, "unwind")
        assert summary.inner_text().strip() == "unwind ended ABORT_CONSISTENT", summary.inner_text()
        assert widget.locator("table.dal-stack tr").count() == 1               # Σ empty: the header only
        assert widget.locator("table.dal-resources td", has_text="active").count() == 0
        rows = widget.locator("table.dal-counts tr", has_text="clean_build")
        assert rows.count() == 1 and rows.first.locator("td").nth(2).inner_text() == "1"   # received once
        assert widget.locator("table.dal-counts th", has_text="lease refused (401)").count() == 1
        # Φ is back where it was when the saga began: no row, the baseline line instead
        assert not widget.locator("table.dal-invariants").is_visible()
        assert widget.locator(".dal-baseline").is_visible()
        assert widget.evaluate(_OVERFLOWING) == []
        _shot(page, tmp_path, "saga_stepper_unwound")
        assert page.evaluate(_ERROR_OUTPUTS) == []
    finally:
        page.close()
