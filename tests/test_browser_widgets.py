"""Real-browser tests of widget messages (issue 15): what a student sees in JupyterLab after Run All
and while one number box holds a refused value.

Headless Debian chromium driven by Playwright, JupyterLab on a temporary copy of notebooks/ (the
``lab`` and ``browser`` fixtures of tests/browser_support.py). Screenshots go to the test's own
tmp_path (and to ``DAL_SCREENSHOT_DIR`` when it is set, for a person who wants to look).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.browser_support import ROOT, _ERROR_OUTPUTS, _KERNEL_IDLE

pytestmark = pytest.mark.browser

_RUN_ALL = "async () => { await window.jupyterapp.commands.execute('notebook:run-all-cells'); }"


def _notebook(root: Path, name: str, *sources: str) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources],
                                  metadata={"kernelspec": {"display_name": "Python 3", "language": "python",
                                                           "name": "python3"}})
    nbformat.write(nb, root / "notebooks" / name)


def _open(page, lab, name: str) -> None:
    """Open ``notebooks/<name>`` in a workspace of its own, wait for its kernel, Run All."""
    page.goto(lab.tree(f"notebooks/{name}"))
    page.wait_for_function("(n) => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
                           " return !!w && !!w.context && w.context.path.endsWith(n); }", arg=name, timeout=120_000)
    page.wait_for_function(_KERNEL_IDLE, timeout=120_000)
    page.evaluate(_RUN_ALL)


def _shot(page, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    page.screenshot(path=str(path))
    if os.environ.get("DAL_SCREENSHOT_DIR"):
        shutil.copy(path, Path(os.environ["DAL_SCREENSHOT_DIR"]) / name)
    return path


def test_scrubber_after_run_all_shows_no_stale_error(lab, browser, tmp_path):
    """Situation: Run All of a notebook whose later cell tries a position past the end of the log
    and then sets the shown position again (as notebook 11.2 does). Invariant: the kernel's
    ``error`` is cleared by the valid assignment and the view redraws from it. Goal: the student
    sees the record at position 9 and no red "outside the log" message."""
    log = str(ROOT / "datasets" / "worksheet_r18_example.jsonl")
    _notebook(lab.root, "scrubber_stale.ipynb",
              f"from kernel_lib.log import load_events\nfrom widgets.scrubber import LogScrubber\n"
              f"events = load_events({log!r})\nscrubber = LogScrubber(events, position=9)\nscrubber",
              "scrubber.position = len(events) + 5   # past the end: the widget says so\n"
              "print('message:', scrubber.error)\n"
              "scrubber.position = 9                 # back where it was")
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    try:
        _open(page, lab, "scrubber_stale.ipynb")
        widget = page.locator(".dal-scrubber").first
        widget.wait_for(state="visible", timeout=120_000)
        page.wait_for_function(_KERNEL_IDLE, timeout=120_000)
        page.get_by_text("message: position").first.wait_for(state="visible", timeout=60_000)  # it did refuse
        assert page.evaluate(_ERROR_OUTPUTS) == []
        label = widget.locator(".dal-label")
        page.wait_for_function("(el) => el.textContent.includes('position 9 /')", arg=label.element_handle(),
                               timeout=30_000)
        page.wait_for_timeout(500)            # let any late message from the kernel arrive
        _shot(page, tmp_path, "scrubber_after_run_all.png")
        assert widget.locator(".dal-error").inner_text().strip() == ""
        assert widget.locator("tr.dal-in-doubt", has_text="test_r18").count() == 1
        assert "$" in widget.locator(".dal-budget").inner_text()
    finally:
        page.close()


def test_cadence_explorer_marks_the_invalid_box_and_applies_other_changes(lab, browser, tmp_path):
    """Situation: the student types -1 into the pause box, then changes the stride box. Invariant:
    the refused pause keeps its last good value in kernel_lib's computation; the stride change is
    applied. Goal: the pause row is marked with the reason, the readout follows the new stride, and
    fixing the pause removes the mark and the message."""
    _notebook(lab.root, "cadence_invalid.ipynb",
              "from widgets.cadence_explorer import CadenceExplorer\nexplorer = CadenceExplorer.napkin_11_1()\n"
              "explorer")
    page = browser.new_page(viewport={"width": 1300, "height": 1100})
    try:
        _open(page, lab, "cadence_invalid.ipynb")
        widget = page.locator(".dal-cadence").first
        widget.wait_for(state="visible", timeout=180_000)
        page.wait_for_function(_KERNEL_IDLE, timeout=120_000)
        assert page.evaluate(_ERROR_OUTPUTS) == []
        row = widget.locator(".dal-row[data-name=pause_s]")
        pause = widget.locator("input.dal-number[data-name=pause_s]")
        pause.fill("-1")
        pause.press("Enter")
        error = widget.locator(".dal-error")
        page.wait_for_function("(el) => el.textContent.includes('pause_s must be > 0')", arg=error.element_handle(),
                               timeout=30_000)
        page.wait_for_function("(el) => el.classList.contains('dal-invalid')", arg=row.element_handle(),
                               timeout=30_000)
        assert pause.get_attribute("aria-invalid") == "true" and "pause_s" in (pause.get_attribute("title") or "")

        stride = widget.locator("input.dal-number[data-name=stride_turns]")
        stride.fill("10")
        stride.press("Enter")
        readout = widget.locator(".dal-readout")
        page.wait_for_function("(el) => el.textContent.includes('at stride k = 10:')", arg=readout.element_handle(),
                               timeout=30_000)
        assert "dal-invalid" in (row.get_attribute("class") or "")       # still marked: pause is still -1
        assert "pause_s must be > 0" in error.inner_text()
        row.scroll_into_view_if_needed()
        _shot(page, tmp_path, "cadence_invalid_box.png")

        pause.fill("1")
        pause.press("Enter")
        page.wait_for_function("(el) => !el.classList.contains('dal-invalid')", arg=row.element_handle(),
                               timeout=30_000)
        page.wait_for_function("(el) => el.textContent.trim() === ''", arg=error.element_handle(), timeout=30_000)
        assert "at stride k = 10:" in readout.inner_text() and "C = 1 s" in readout.inner_text()
        assert page.evaluate(_ERROR_OUTPUTS) == []
    finally:
        page.close()
