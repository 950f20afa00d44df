"""Notebook 11.1 in JupyterLab the way a student meets it: Run All Cells, then play with the crash panel.

Fault model: the worker is killed with a real SIGKILL from the panel's buttons (right after start, and
right after a chosen durable event). Invariant: after Run All the panel is ready (no stale message
from the notebook's scripted demo, the session open), and each message says what just happened: a
recover after a kill before anything was durable says the surviving log is empty; after a kill at
ToolIntent the fold shows ``test_r18`` in doubt; after a kill at ToolResult the executor's acceptance
survives and reconciliation by operation id settles the doubt. Goal: Run All, then use the panel,
with nothing to work around. Screenshots go to the test's tmp folder (and to ``DAL_SCREENSHOT_DIR`` when set).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.browser_support import _ERROR_OUTPUTS, _KERNEL_IDLE

NOTEBOOK = "11_1_worker_failure.ipynb"

pytestmark = pytest.mark.browser


def _completed(panel) -> int:
    return int(panel.get_attribute("data-completed") or 0)


def _click_and_wait(page, panel, action: str) -> None:
    """Click a panel button and wait until the kernel says that command finished."""
    before = _completed(panel)
    panel.locator(f"button[data-action={action}]").click()
    page.wait_for_function("([el, before]) => Number(el.dataset.completed) > before",
                           arg=[panel.element_handle(), before], timeout=240_000)


def _shot(page, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=False)
    if os.environ.get("DAL_SCREENSHOT_DIR"):
        shutil.copy(path, Path(os.environ["DAL_SCREENSHOT_DIR"]) / path.name)
    return path


def test_run_all_then_use_the_crash_panel(lab, browser, tmp_path):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(lab.tree(f"notebooks/{NOTEBOOK}"))
        page.wait_for_function("() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
                               f" return !!w && !!w.context && w.context.path.endsWith('{NOTEBOOK}'); }}",
                               timeout=120_000)
        page.wait_for_function(_KERNEL_IDLE, timeout=120_000)
        page.evaluate("async () => { await window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        panel = page.locator(".dal-crash-panel")
        panel.wait_for(state="visible", timeout=300_000)
        # the cell after the panel sends two commands (its demo, then a clear): wait for both
        page.wait_for_function("(el) => Number(el.dataset.completed) >= 2", arg=panel.element_handle(),
                               timeout=300_000)
        page.wait_for_function(_KERNEL_IDLE, timeout=300_000)
        assert page.evaluate(_ERROR_OUTPUTS) == []

        # (1) ready to use: no stale red message, the session open and its status following reconcile
        status, error = panel.locator(".dal-status"), panel.locator(".dal-error")
        assert error.inner_text().strip() == ""
        assert "closed" not in status.inner_text()
        assert "reconciled by a replacement" in status.inner_text()
        assert panel.locator(".dal-tail th").first.inner_text() == "position"     # headers for people
        panel.scroll_into_view_if_needed()
        _shot(page, tmp_path, "crash_panel_after_run_all")

        # (2) start, and kill the worker at once: before it logged anything (position 0) or a little later
        _click_and_wait(page, panel, "start")
        assert error.inner_text().strip() == "", error.inner_text()
        assert "worker" in status.inner_text()
        _click_and_wait(page, panel, "crash")
        assert error.inner_text().strip() == "", error.inner_text()
        summary = panel.locator(".dal-summary")
        assert "killed by SIGKILL" in summary.inner_text()
        killed_at = int(summary.inner_text().split("at log position ")[1].split(";")[0])

        # (3) recover says what that surviving log holds, never "start a run and crash it first"
        _click_and_wait(page, panel, "recover")
        assert error.inner_text().strip() == "", error.inner_text()
        text = summary.inner_text()
        assert "start a run" not in text
        if killed_at == 0:
            assert "holds no event" in text and "empty" in status.inner_text()
        else:
            assert "folded the surviving log" in text
        _shot(page, tmp_path, "crash_panel_after_crash_now_and_recover")

        # (4) crash at ToolIntent: the fold keeps test_r18 in doubt, the executor never heard of it
        panel.locator("select.dal-position").select_option("ToolIntent")
        _click_and_wait(page, panel, "crash_at")
        assert error.inner_text().strip() == "", error.inner_text()
        assert "killed by SIGKILL" in status.inner_text() and "not recovered yet" in status.inner_text()
        _click_and_wait(page, panel, "recover")
        assert "in doubt: test_r18" in summary.inner_text()
        assert status.inner_text().endswith("a replacement folded the surviving log: in doubt: test_r18")
        row = panel.locator(".dal-ops tr.dal-in-doubt", has_text="test_r18")
        row.wait_for(state="visible", timeout=30_000)
        assert panel.locator(".dal-tail tr").last.locator("td").nth(1).inner_text() == "ToolIntent"
        row.scroll_into_view_if_needed()
        _shot(page, tmp_path, "crash_panel_tool_intent_recovered")

        # (5) crash at ToolResult, after the executor accepted the job: the acceptance survives in the
        # log, test_r18 is in doubt with its job handle, and reconciling by operation id settles it
        panel.locator("select.dal-position").select_option("ToolResult")
        _click_and_wait(page, panel, "crash_at")
        assert error.inner_text().strip() == "", error.inner_text()
        _click_and_wait(page, panel, "recover")
        assert "folded the surviving log: in doubt: test_r18" in summary.inner_text()
        row.wait_for(state="visible", timeout=30_000)
        cells = row.locator("td").all_inner_texts()
        assert cells[0] == "test_r18" and "in_doubt" in cells and "attempt1" in cells
        assert "job_tests_18" in cells            # the executor's acceptance survived in the log
        _click_and_wait(page, panel, "reconcile")
        assert error.inner_text().strip() == "", error.inner_text()
        assert "in doubt: none" in summary.inner_text()
        page.wait_for_function(
            "(el) => !Array.from(el.querySelectorAll('.dal-ops tr')).some("
            "r => r.textContent.includes('test_r18') && r.classList.contains('dal-in-doubt'))",
            arg=panel.element_handle(), timeout=60_000)

        # (6) "crash now" with no worker running, clicked: a message in the panel, not a traceback
        _click_and_wait(page, panel, "crash")
        assert "no worker" in error.inner_text().lower()

        # (7) closing the session from code: the panel follows without a click
        page.evaluate("async () => { const app = window.jupyterapp; const nb = app.shell.currentWidget.content;"
                      " nb.activeCellIndex = nb.widgets.length - 1;"
                      " await app.commands.execute('notebook:insert-cell-below'); }")
        page.wait_for_function("() => !!document.querySelector('.jp-Notebook .jp-Cell.jp-mod-active .cm-content')",
                               timeout=30_000)
        editor = page.locator(".jp-Notebook .jp-Cell.jp-mod-active .cm-content")
        editor.click()
        page.keyboard.type("session.close()")
        page.keyboard.press("Shift+Enter")
        page.wait_for_function("(el) => el.textContent.trim().startsWith('closed')", arg=status.element_handle(),
                               timeout=60_000)
        assert page.evaluate(_ERROR_OUTPUTS) == []
    finally:
        page.close()
