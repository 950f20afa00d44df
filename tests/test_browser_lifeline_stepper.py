"""The lifeline stepper in JupyterLab the way a student meets it: Run All, then step through the ladder.

Fault model: "prev" clicked on the first message, the slider and the turn menu used, a message
clicked in the ladder, the buttons pressed past the last message.
Invariant: after Run All the stepper shows message 1 with no error output and no stale message;
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

NOTEBOOK = "lifeline_stepper_check.ipynb"
SETUP = """\
from kernel_lib.recovery.synthesis.lifelines import Crash, lifeline_messages
from kernel_lib.sim.saga_demo import SagaDemo
from kernel_lib.sim.services import TwinFleet
from widgets.lifeline_stepper import LifelineStepper

fleet = TwinFleet()
demo = SagaDemo(fleet, saga_id="ll", sleep=fleet.clock.advance)
demo.inject("timeout_after", 2)
for _ in range(5):
    demo.step()
head = demo.crash_during_unwind(2)["log_head"]
demo.recover()
demo.unwind()
messages = lifeline_messages(demo.events(), fleet.audits(), crashes=[Crash(head, "SIGKILL")])
stepper = LifelineStepper(messages, title="the deployment saga: a lost reply, a crash during the unwind")
stepper"""


def _notebook(root: Path) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(SETUP)],
                                  metadata={"kernelspec": {"display_name": "Python 3", "language": "python",
                                                           "name": "python3"}})
    nbformat.write(nb, root / "notebooks" / NOTEBOOK)


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
    _notebook(lab.root)
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
        assert page.evaluate(_ERROR_OUTPUTS) == []
        error, status = widget.locator(".dal-error"), widget.locator(".dal-status")
        assert error.inner_text().strip() == "" and "message 1 of" in status.inner_text()
        total = int(status.inner_text().split(" of ")[1].split(" ")[0])
        assert widget.locator("g.dal-ll-msg").count() == total
        assert widget.locator("text.dal-ll-name").all_text_contents() == [
            "control plane K_sched", "write-ahead log L_wal", "saga engine S_saga", "sandbox / services"]

        _click(page, widget, "prev")                            # refused: nothing before the first
        assert "no message before the first" in error.inner_text(), error.inner_text()
        _click(page, widget, "next")
        assert error.inner_text().strip() == "" and "message 2 of" in status.inner_text()
        assert widget.get_attribute("data-step") == "2"

        # the turn menu: turn 2 is T2 reserve_ip, whose reply was lost after the effect
        before = _completed(widget)
        widget.locator("select.dal-turn").select_option(label="turn 2: reserve_ip")
        _wait_done(page, widget, before)
        assert "turn 2: reserve_ip" in status.inner_text()
        for _ in range(5):              # propose, intent, dispatch, effect, timeout, then the probe
            _click(page, widget, "next")
        detail = widget.locator(".dal-detail-table")
        assert "probe" in detail.inner_text() and "status lookup of T2" in detail.inner_text(), detail.inner_text()
        current = widget.locator("g.dal-ll-current")
        assert current.count() == 1 and "status lookup of T2" in current.text_content()
        assert widget.locator("g.dal-ll-future").count() == total - int(widget.get_attribute("data-step"))
        assert widget.evaluate("(el) => el.scrollWidth <= el.clientWidth + 1")      # no sideways scrolling
        widget.scroll_into_view_if_needed()
        _shot(page, tmp_path, "lifeline_stepper_probe")

        # click the crash in the ladder itself
        before = _completed(widget)
        widget.locator("g.dal-ll-msg.k-crash").click()
        _wait_done(page, widget, before)
        assert "· crash" in status.inner_text() and "SIGKILL" in detail.inner_text()
        _click(page, widget, "next")
        assert "Σ = [C1, C2, C3]" in detail.inner_text(), detail.inner_text()
        widget.scroll_into_view_if_needed()
        _shot(page, tmp_path, "lifeline_stepper_recover")

        _click(page, widget, "last")
        _click(page, widget, "next")                             # refused: past the last
        assert f"the ladder has {total} messages" in error.inner_text()
        _click(page, widget, "first")
        assert error.inner_text().strip() == "" and "message 1 of" in status.inner_text()
        assert page.evaluate(_ERROR_OUTPUTS) == []
    finally:
        page.close()
