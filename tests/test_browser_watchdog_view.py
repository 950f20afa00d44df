"""The watchdog view in JupyterLab the way a student meets it: Run All, then scrub a real agent's log.

Fault model: a notebook cell that sets a step past the end (then a valid one), the reader jumping
between detections with the arrows, clicking a detector's mark, dragging the slider. Invariant:
after Run All no stale message shows; every redraw shows what the kernel published for that step
(the label, the window's match, the readout's "fires here" line, one mark per detection). Goal: a
reader can walk a real loop step by step and see where each detector fires. Headless Debian
chromium driven by Playwright (tests/browser_support.py); screenshots go to the test's tmp folder
(and to ``DAL_SCREENSHOT_DIR`` when set).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.browser_support import ROOT, _ERROR_OUTPUTS, _KERNEL_IDLE

pytestmark = pytest.mark.browser

LOG = ROOT.parent / "shared" / "data" / "trajectories" / "swe-agent" / "pydicom__pydicom-1458.traj"


def _shot(page, tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    page.screenshot(path=str(path))
    if os.environ.get("DAL_SCREENSHOT_DIR"):
        shutil.copy(path, Path(os.environ["DAL_SCREENSHOT_DIR"]) / name)


def _step_is(page, label, step: int) -> None:
    page.wait_for_function("([el, s]) => el.textContent.includes(`step ${s} /`)", arg=[label.element_handle(), step],
                           timeout=30_000)


@pytest.mark.skipif(not LOG.exists(), reason="the shared trajectories are not here")
def test_run_all_then_scrub_a_real_log(lab, browser, tmp_path):
    import nbformat

    from kernel_lib.importers import import_file
    from kernel_lib.recovery.watchdog.timeline import watch_timeline

    fires = watch_timeline(import_file("swe-agent", LOG).events).fires()
    first, later = fires[0], fires[-1]
    assert later["step"] > first["step"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in (
        "from kernel_lib.importers import import_file\nfrom widgets.watchdog_view import WatchdogView\n"
        f"view = WatchdogView(import_file('swe-agent', {str(LOG)!r}).events, name='pydicom', step=0)\nview",
        "view.step = 99      # past the end: the widget says so\nprint('message:', view.error)\nview.step = 0")],
        metadata={"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}})
    nbformat.write(nb, lab.root / "notebooks" / "watchdog_view.ipynb")
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    try:
        page.goto(lab.tree("notebooks/watchdog_view.ipynb"))
        page.wait_for_function("() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
                               " return !!w && !!w.context && w.context.path.endsWith('watchdog_view.ipynb'); }",
                               timeout=120_000)
        page.wait_for_function(_KERNEL_IDLE, timeout=120_000)
        page.evaluate("async () => { await window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        widget = page.locator(".dal-watchdog").first
        widget.wait_for(state="visible", timeout=120_000)
        page.wait_for_function(_KERNEL_IDLE, timeout=120_000)
        page.get_by_text("message: step 99").first.wait_for(state="visible", timeout=60_000)   # it did refuse
        assert page.evaluate(_ERROR_OUTPUTS) == []
        label = widget.locator(".dal-label")
        _step_is(page, label, 0)
        page.wait_for_timeout(500)                       # any late message from the kernel
        assert widget.locator(".dal-error").inner_text().strip() == ""
        marks = len({(f["detector"], f["step"]) for f in fires})       # one mark per detector and step
        assert widget.locator("circle.dal-mark").count() == marks
        assert widget.locator("circle.dal-mark.dal-fired").count() == 0

        widget.locator("button[data-action=next]").click()          # to the first detection
        _step_is(page, label, first["step"])
        readout = widget.locator(".dal-readout")
        page.wait_for_function("(el) => el.textContent.includes('fires here')", arg=readout.element_handle(),
                               timeout=30_000)
        assert first["kind"] in readout.inner_text()
        assert widget.locator("table.dal-window tr.dal-match").count() >= 1      # the state W already held
        widget.scroll_into_view_if_needed()
        _shot(page, tmp_path, "watchdog_view_first_detection.png")

        widget.locator(f"circle.dal-mark[data-step='{later['step']}']").first.click()   # a click on a later mark
        _step_is(page, label, later["step"])
        page.wait_for_function("(n) => document.querySelectorAll('.dal-watchdog circle.dal-mark.dal-fired').length"
                               " === n", arg=marks, timeout=30_000)

        widget.locator("input.dal-slider").fill("2")                # the slider, back before any detection
        _step_is(page, label, 2)
        page.wait_for_function("() => document.querySelectorAll('.dal-watchdog circle.dal-mark.dal-fired').length"
                               " === 0", timeout=30_000)
        assert widget.locator(".dal-error").inner_text().strip() == ""
        assert page.evaluate(_ERROR_OUTPUTS) == []
    finally:
        page.close()
