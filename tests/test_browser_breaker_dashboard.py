"""The breaker dashboard in JupyterLab the way a student meets it: Run All, then step table 8's
breaker with the buttons.

Fault model: a notebook cell that sets a bad clock step (then a good one), the reader typing a
negative step into the box, clicking the call buttons past the trip and while open, advancing the
clock through the cooldown. Invariant: after Run All no stale message shows; each redraw shows what
the kernel's breaker published (the state badge, the window's cells, one transitions row and one
timeline segment per transition, the refusal text in the status line); a bad step is refused in
the widget's own words and the box shows the kept value. Goal: a reader can walk the breaker from
Closed to Open, Half-Open and back and read why each transition happened. Headless Debian chromium
driven by Playwright (tests/browser_support.py); screenshots go to the test's tmp folder (and to
``DAL_SCREENSHOT_DIR`` when set).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.browser_support import _ERROR_OUTPUTS, _KERNEL_IDLE

pytestmark = pytest.mark.browser


def _shot(page, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    page.screenshot(path=str(path))
    if os.environ.get("DAL_SCREENSHOT_DIR"):
        shutil.copy(path, Path(os.environ["DAL_SCREENSHOT_DIR"]) / name)
    return path


def _state_is(page, widget, state: str) -> None:
    page.wait_for_function("([el, s]) => el.dataset.state === s", arg=[widget.element_handle(), state],
                           timeout=30_000)


def _click(page, widget, action: str) -> None:
    """Click a button and wait until the kernel finished that command (the protocol's ``completed``)."""
    before = int(widget.get_attribute("data-completed") or 0)
    widget.locator(f"button[data-action={action}]").click()
    page.wait_for_function("([el, n]) => Number(el.dataset.completed) > n", arg=[widget.element_handle(), before],
                           timeout=30_000)


def test_run_all_then_step_the_breaker_through_its_states(lab, browser, tmp_path):
    import nbformat

    from widgets.breaker_dashboard import DEFAULT_CONFIG

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in (
        "from widgets.breaker_dashboard import BreakerDashboard\ndash = BreakerDashboard()\ndash",
        "dash.advance_s = -5      # refused: the widget says so\nprint('message:', dash.error)\n"
        f"dash.advance_s = {DEFAULT_CONFIG.cooldown_s}")],
        metadata={"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}})
    nbformat.write(nb, lab.root / "notebooks" / "breaker_dashboard.ipynb")
    page = browser.new_page(viewport={"width": 1300, "height": 1100})
    try:
        page.goto(lab.tree("notebooks/breaker_dashboard.ipynb"))
        page.wait_for_function("() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
                               " return !!w && !!w.context && w.context.path.endsWith('breaker_dashboard.ipynb'); }",
                               timeout=120_000)
        page.wait_for_function(_KERNEL_IDLE, timeout=120_000)
        page.evaluate("async () => { await window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        widget = page.locator(".dal-breaker").first
        widget.wait_for(state="visible", timeout=120_000)
        page.wait_for_function(_KERNEL_IDLE, timeout=120_000)
        page.get_by_text("message: advance_s = -5 was refused").first.wait_for(state="visible", timeout=60_000)
        assert page.evaluate(_ERROR_OUTPUTS) == []
        _state_is(page, widget, "closed")
        page.wait_for_timeout(500)                                   # any late message from the kernel
        assert widget.locator(".dal-error").inner_text().strip() == ""
        box = widget.locator("input.dal-number[data-name=advance_s]")
        assert float(box.input_value()) == DEFAULT_CONFIG.cooldown_s

        for _ in range(DEFAULT_CONFIG.minimum_calls - 1):
            _click(page, widget, "failure")
        assert widget.locator(".dal-window .dal-fail").count() == DEFAULT_CONFIG.minimum_calls - 1
        assert widget.locator(".dal-window .dal-cell").count() == DEFAULT_CONFIG.window_size
        _click(page, widget, "failure")                              # the fifth: E = 1 over 5 calls trips it
        _state_is(page, widget, "open")
        assert widget.locator(".dal-state").inner_text() == "Open"
        assert widget.locator("table.dal-transitions tr").count() == 2
        assert "failure_rate" in widget.locator("table.dal-transitions").inner_text()
        _click(page, widget, "success")                              # refused without a call
        assert "ERR_CIRCUIT_OPEN" in widget.locator(".dal-status").inner_text()
        widget.scroll_into_view_if_needed()
        _shot(page, tmp_path, "breaker_dashboard_open.png")

        box.fill("-1")                                               # a bad step typed in the box
        box.press("Enter")
        page.wait_for_function("(el) => el.textContent.includes('advance_s = -1 was refused')",
                               arg=widget.locator(".dal-error").element_handle(), timeout=30_000)
        page.wait_for_function("(el) => Number(el.value) === 30", arg=box.element_handle(), timeout=30_000)
        _click(page, widget, "advance")                              # the kept 30 s: the cooldown elapses
        _state_is(page, widget, "half_open")
        assert widget.locator(".dal-state").inner_text() == "Half-Open"
        _click(page, widget, "success")                              # the canary succeeds
        _state_is(page, widget, "closed")
        assert widget.locator("table.dal-transitions tr").count() == 4
        assert widget.locator("rect.dal-seg").count() == 4            # closed, open, half-open, closed
        assert [s for s in widget.locator("rect.dal-seg").evaluate_all("els => els.map(e => e.dataset.state)")] == [
            "closed", "open", "half_open", "closed"]
        assert widget.locator(".dal-error").inner_text().strip() == ""   # the good click cleared the message
        readout = widget.locator(".dal-readout").inner_text()
        assert "canary_succeeded" in readout and "t = 30.00 s" in readout
        widget.scroll_into_view_if_needed()
        _shot(page, tmp_path, "breaker_dashboard_closed_again.png")
        assert page.evaluate(_ERROR_OUTPUTS) == []
    finally:
        page.close()
