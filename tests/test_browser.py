"""Real-browser tests: the course as a student sees it, in headless Chromium driven by Playwright.

Fault model: a worker process is killed with a real SIGKILL from the crash panel's button while its
test job is running in the executor process. Invariant: the record rebuilt from the surviving log
shows ``test_r18`` in doubt, with no invented outcome. Goal: the student sees that in JupyterLab
(notebook 11.1) by clicking, and can scrub a recorded log in the marimo app by moving the slider.

The browser is Debian's ``chromium`` (``make test`` installs it when it is missing); Playwright
only drives it (no downloaded browser). JupyterLab runs on a copy of ``notebooks/`` in a temporary
folder with autosave off, so the committed notebooks are never written.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.browser_support import (BIN, ROOT, _ERROR_OUTPUTS, _KERNEL_IDLE, _RUN_REST, _RUN_THROUGH, _free_port,
                                   _stop, _wait_http)

NOTEBOOK = "11_1_worker_failure.ipynb"

pytestmark = pytest.mark.browser

def _panel_cell_index(nb_path: Path) -> int:
    cells = json.loads(nb_path.read_text())["cells"]
    for i, c in enumerate(cells):
        if c["cell_type"] == "code" and "CrashPanel(session)" in "".join(c["source"]):
            return i
    raise AssertionError(f"{nb_path.name} has no cell that builds CrashPanel(session)")


def _click_and_wait(page, panel, action: str) -> None:
    """Click a crash-panel button and wait until the kernel reports that command finished."""
    before = int(panel.get_attribute("data-completed") or 0)
    panel.locator(f"button[data-action={action}]").click()
    page.wait_for_function("([el, before]) => Number(el.dataset.completed) > before",
                           arg=[panel.element_handle(), before], timeout=120_000)


def test_crash_panel_in_jupyterlab_shows_test_r18_in_doubt(lab, browser):
    base, token, root = lab
    nb_path = root / "notebooks" / NOTEBOOK
    panel_cell = _panel_cell_index(nb_path)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(f"{base}/lab/tree/notebooks/{NOTEBOOK}?token={token}")
        page.wait_for_function(_KERNEL_IDLE, timeout=120_000)
        # run the notebook from the top through the cell that shows the crash panel
        page.evaluate(_RUN_THROUGH, panel_cell)
        panel = page.locator(".dal-crash-panel")
        panel.wait_for(state="visible", timeout=180_000)
        page.wait_for_function(_KERNEL_IDLE, timeout=180_000)
        assert page.evaluate(_ERROR_OUTPUTS) == []

        # a student picks the position after the executor accepted the job, and crashes there
        panel.locator("select.dal-position").select_option("ToolResult")
        _click_and_wait(page, panel, "crash_at")
        assert panel.locator(".dal-error").inner_text().strip() == ""
        assert "SIGKILL" in panel.locator(".dal-status").inner_text() or \
            "killed" in panel.locator(".dal-status").inner_text().lower()

        # a replacement process folds the surviving log: test_r18 is in doubt, its outcome unknown
        _click_and_wait(page, panel, "recover")
        assert "folded the surviving log: in doubt: test_r18" in panel.locator(".dal-summary").inner_text()
        in_doubt_row = panel.locator(".dal-ops tr.dal-in-doubt", has_text="test_r18")
        in_doubt_row.wait_for(state="visible", timeout=30_000)
        cells = in_doubt_row.locator("td").all_inner_texts()
        assert cells[0] == "test_r18" and "in_doubt" in cells and "attempt1" in cells
        assert "job_tests_18" in cells            # the executor's acceptance survived in the log
        if os.environ.get("DAL_SCREENSHOT_DIR"):      # for a person who wants to look
            in_doubt_row.scroll_into_view_if_needed()
            page.screenshot(path=str(Path(os.environ["DAL_SCREENSHOT_DIR"]) / "crash_panel.png"))

        # reconciling by operation id replaces doubt with verified evidence
        _click_and_wait(page, panel, "reconcile")
        assert "in doubt: none" in panel.locator(".dal-summary").inner_text()
        page.wait_for_function(
            "(el) => !Array.from(el.querySelectorAll('.dal-ops tr')).some("
            "r => r.textContent.includes('test_r18') && r.classList.contains('dal-in-doubt'))",
            arg=panel.element_handle(), timeout=60_000)

        # "crash now" with no worker running is a message in the widget, not a traceback
        _click_and_wait(page, panel, "crash")
        assert "no worker" in panel.locator(".dal-error").inner_text().lower()

        # the rest of the notebook (it closes the session) still runs cleanly
        page.evaluate(_RUN_REST, panel_cell + 1)
        page.wait_for_function(_KERNEL_IDLE, timeout=180_000)
        assert page.evaluate(_ERROR_OUTPUTS) == []
    finally:
        page.close()


@contextlib.contextmanager
def _marimo(tmp: Path, **env_extra: str):
    """``marimo run apps/scrubber.py`` on a free loopback port; yields its URL."""
    port = _free_port()
    log = tmp / "marimo.log"
    env = dict(os.environ, MARIMO_SKIP_UPDATE_CHECK="1", HOME=str(tmp), **env_extra)
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(BIN / "marimo"), "run", str(ROOT / "apps" / "scrubber.py"), "--headless", "--no-token",
             "--host", "127.0.0.1", "--port", str(port)],
            env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_http(base, proc, log)
        yield base
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def marimo_app(tmp_path_factory):
    with _marimo(tmp_path_factory.mktemp("marimo")) as base:
        yield base


def test_marimo_scrubber_says_why_a_log_cannot_be_loaded(tmp_path, browser):
    bad = tmp_path / "torn.jsonl"
    bad.write_text('{"trajectory_id": "t", "sequence_nu')          # a line cut in half
    with _marimo(tmp_path, SCRUBBER_LOG=str(bad)) as base:
        page = browser.new_page()
        try:
            page.goto(base)
            page.get_by_text("Cannot load").wait_for(state="visible", timeout=120_000)
            assert "torn.jsonl" in page.content()
        finally:
            page.close()


def test_marimo_scrubber_slider_moves_through_the_log(marimo_app, browser):
    from kernel_lib.log import load_events
    from widgets.scrubber import record_view

    events = load_events(str(ROOT / "datasets" / "worksheet_r18_example.jsonl"))
    # the first position at which the fold shows test_r18 in doubt (the durable intent)
    target = next(p for p in range(1, len(events) + 1) if "test_r18" in record_view(events, p)["in_doubt"])
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(marimo_app)
        scrubber = page.locator(".dal-scrubber")
        scrubber.wait_for(state="visible", timeout=120_000)
        label = scrubber.locator(".dal-label")
        assert f"position 0 / {len(events)}" in label.inner_text()
        slider = scrubber.locator("input.dal-slider")
        slider.focus()
        for _ in range(target):
            slider.press("ArrowRight")
        page.wait_for_function(f"(el) => el.textContent.includes('position {target} /')",
                               arg=label.element_handle(), timeout=30_000)
        row = scrubber.locator(".dal-ops tr.dal-in-doubt", has_text="test_r18")
        row.wait_for(state="visible", timeout=30_000)
        assert events[target - 1].event_type in label.inner_text()

        slider.press("End")             # the end of the log: the verified result settled the doubt
        page.wait_for_function(f"(el) => el.textContent.includes('position {len(events)} /')",
                               arg=label.element_handle(), timeout=30_000)
        page.wait_for_function(
            "(el) => !el.querySelector('tr.dal-in-doubt') && el.textContent.includes('established')",
            arg=scrubber.element_handle(), timeout=30_000)
    finally:
        page.close()


def test_scrubber_arrow_keys_in_jupyterlab_move_the_slider_not_the_notebook(lab, browser):
    """Arrow keys on the scrubber's slider belong to the widget: JupyterLab's notebook shortcuts
    (select the next cell, collapse a heading) must not take them."""
    import nbformat

    base, token, root = lab
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# heading a stray arrow key would collapse"),
        nbformat.v4.new_code_cell("from kernel_lib.log import load_events\nfrom widgets.scrubber import LogScrubber\n"
                                  "LogScrubber(load_events("
                                  f"{str(ROOT / 'datasets' / 'worksheet_r18_example.jsonl')!r}),"
                                  " position=9)"),
        nbformat.v4.new_markdown_cell("## another heading")],
        metadata={"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}})
    nbformat.write(nb, root / "notebooks" / "scrubber_keys.ipynb")
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        # a workspace of its own: the shared JupyterLab would otherwise restore the earlier tests' tabs
        page.goto(f"{base}/lab/workspaces/scrubber-keys/tree/notebooks/scrubber_keys.ipynb?token={token}&reset")
        page.wait_for_function("() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
                               " return !!w && !!w.context && w.context.path.endsWith('scrubber_keys.ipynb'); }",
                               timeout=120_000)
        page.wait_for_function(_KERNEL_IDLE, timeout=120_000)
        page.evaluate("async () => { await window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        scrubber = page.locator(".dal-scrubber").first
        scrubber.wait_for(state="visible", timeout=120_000)
        label = scrubber.locator(".dal-label")
        page.wait_for_function("(el) => el.textContent.includes('position 9 /')", arg=label.element_handle(),
                               timeout=30_000)
        slider = scrubber.locator("input.dal-slider")
        slider.focus()
        slider.press("ArrowLeft")
        slider.press("ArrowLeft")
        page.wait_for_function("(el) => el.textContent.includes('position 7 /')", arg=label.element_handle(),
                               timeout=30_000)
        assert scrubber.is_visible()        # no heading collapsed over it, no other cell took the keys
    finally:
        page.close()


_CELL_TYPES = "() => window.jupyterapp.shell.currentWidget.content.widgets.map(c => c.model.type)"


def test_resume_timeline_number_boxes_in_jupyterlab(lab, browser):
    """The resume timeline in JupyterLab: an SVG chart and a readout with eq. 7's serial sum and the
    critical path; a cached prefix longer than the context is refused in the widget (the box goes
    back), a shorter one recomputes the prefill; digits typed in the box are not notebook shortcuts
    ("0, 0" in command mode restarts the kernel, after a "Restart Kernel?" dialog)."""
    import nbformat

    base, token, root = lab
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# heading above"),
        nbformat.v4.new_code_cell(
            "from kernel_lib.resume.stages import ResumeTimeline, PrefillModel\n"
            "from widgets import ResumeTimelineView\n"
            "tl = ResumeTimeline.from_durations({'ownership': 0.005, 'checkpoint_suffix_read': 0.02, 'fold': 0.01,"
            " 'workspace_restore': 0.002, 'reconciliation': 0.04}, measured=True,"
            " prefill=PrefillModel(8192, 6144, 20000.0))\nResumeTimelineView(tl)"),
        nbformat.v4.new_markdown_cell("## heading below")],
        metadata={"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}})
    nbformat.write(nb, root / "notebooks" / "resume_timeline_view.ipynb")
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        # a workspace of its own: the shared JupyterLab would otherwise restore the earlier tests' tabs
        page.goto(f"{base}/lab/workspaces/resume-timeline/tree/notebooks/resume_timeline_view.ipynb"
                  f"?token={token}&reset")
        page.wait_for_function("() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
                               " return !!w && !!w.context && w.context.path.endsWith('resume_timeline_view.ipynb'); }",
                               timeout=120_000)
        page.wait_for_function(_KERNEL_IDLE, timeout=120_000)
        kernel_id = page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.id")
        page.evaluate("async () => { await window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        view = page.locator(".dal-resume").first
        view.wait_for(state="visible", timeout=120_000)
        page.wait_for_function(_KERNEL_IDLE, timeout=120_000)
        assert page.evaluate(_ERROR_OUTPUTS) == []
        cell_types = page.evaluate(_CELL_TYPES)
        assert cell_types == ["markdown", "code", "markdown"]

        # (1) the chart and the readout: 5 + 20 + 10 + 2 + 40 ms measured, prefill (8192 - 6144) / 20000 s
        view.locator(".dal-chart svg").first.wait_for(state="visible", timeout=30_000)
        readout = view.locator(".dal-readout")
        text = readout.inner_text()
        assert "serial sum (eq. 7): 179.400 ms" in text
        assert "critical path checkpoint_suffix_read → fold → reconciliation → prefill: 172.400 ms" in text
        assert "prefill: 102.400 ms" in text
        assert view.locator(".dal-error").inner_text().strip() == ""

        # (2) a cached prefix longer than the context, typed key by key and committed with Enter
        box = view.locator("input.dal-number[data-name=cached_prefix_tokens]")
        assert box.input_value() == "6144"
        box.click()
        box.press("Control+a")
        box.press_sequentially("10000")          # "0, 0" is a notebook shortcut in command mode
        box.press("Enter")
        page.wait_for_function("(el) => el.textContent.includes('cannot exceed context_tokens')",
                               arg=view.locator(".dal-error").element_handle(), timeout=30_000)
        assert "kept the previous value" in view.locator(".dal-error").inner_text()
        page.wait_for_function("(el) => el.value === '6144'", arg=box.element_handle(), timeout=10_000)
        assert "prefill: 102.400 ms" in readout.inner_text()

        # (3) no cached prefix: the whole context is prefilled, 8192 / 20000 s
        box.click()
        box.press("Control+a")
        box.press_sequentially("0")
        box.press("Enter")
        page.wait_for_function("(el) => el.textContent.includes('prefill: 409.600 ms')",
                               arg=readout.element_handle(), timeout=30_000)
        assert "serial sum (eq. 7): 486.600 ms" in readout.inner_text()
        assert view.locator(".dal-error").inner_text().strip() == ""
        assert box.input_value() == "0"

        # the digits stayed in the box: no restart-kernel dialog, same kernel, no cell changed type
        assert page.evaluate(_CELL_TYPES) == cell_types
        assert page.locator(".jp-Dialog").count() == 0
        assert page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.id") \
            == kernel_id
        assert view.is_visible()
    finally:
        page.close()
