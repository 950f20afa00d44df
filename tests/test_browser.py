"""Real-browser tests: the course as a student sees it, in headless Chromium driven by Playwright.

Situation: a student scrubs a recorded log in the marimo app by moving the slider (and is told why a
torn log cannot be loaded), and types into the scrubber's slider and the resume timeline's number
boxes in JupyterLab, where the notebook's own keyboard shortcuts must not take the keys. (Notebook
11.1's crash panel, with its real SIGKILLs, is driven in tests/test_browser_crash_panel.py.)

The browser is Debian's ``chromium`` (``make test`` installs it when it is missing); Playwright
only drives it (no downloaded browser). JupyterLab is the session's shared server, each test on
its own copy of ``notebooks/`` (autosave off), so the committed notebooks are never written.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import pytest

from tests.browser_support import BIN, ROOT, _ERROR_OUTPUTS, _KERNEL_IDLE, _free_port, _stop, _wait_http

pytestmark = pytest.mark.browser


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

    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# heading a stray arrow key would collapse"),
        nbformat.v4.new_code_cell("from kernel_lib.log import load_events\nfrom widgets.scrubber import LogScrubber\n"
                                  "LogScrubber(load_events("
                                  f"{str(ROOT / 'datasets' / 'worksheet_r18_example.jsonl')!r}),"
                                  " position=9)"),
        nbformat.v4.new_markdown_cell("## another heading")],
        metadata={"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}})
    nbformat.write(nb, lab.root / "notebooks" / "scrubber_keys.ipynb")
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(lab.tree("notebooks/scrubber_keys.ipynb"))
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
    nbformat.write(nb, lab.root / "notebooks" / "resume_timeline_view.ipynb")
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(lab.tree("notebooks/resume_timeline_view.ipynb"))
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
