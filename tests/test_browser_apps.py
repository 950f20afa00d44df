"""The crash panel and the cadence explorer as marimo apps (`marimo run apps/...`), opened and driven in
headless Debian chromium.

Fault model (crash panel): a real worker is SIGKILLed from the app's button right after its durable
ToolIntent. Invariant: the replacement's fold shows ``test_r18`` in doubt, and reconciliation keeps
it there (the executor never heard of the job, which proves nothing). Situation (cadence explorer):
a reader moves the stride and types a bad pause. Invariant: the readout is recomputed by kernel_lib
for the new stride; a bad value is refused in the widget and the readout keeps the last good
givens. Goal: both apps work in marimo with their guidance on the page. Screenshots go to the
test's tmp folder (and ``DAL_SCREENSHOT_DIR`` when set).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.browser_support import BIN, ROOT, _free_port, _stop, _wait_http
from tests.helpers import process_gone

pytestmark = pytest.mark.browser


@contextlib.contextmanager
def _marimo(app: str, tmp: Path):
    """``marimo run apps/<app>`` on a free loopback port, with ``tmp`` as HOME and TMPDIR; yields its URL."""
    port = _free_port()
    log = tmp / "marimo.log"
    (tmp / "tmp").mkdir(exist_ok=True)
    env = dict(os.environ, MARIMO_SKIP_UPDATE_CHECK="1", HOME=str(tmp), TMPDIR=str(tmp / "tmp"))
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(BIN / "marimo"), "run", str(ROOT / "apps" / app), "--headless", "--no-token",
             "--host", "127.0.0.1", "--port", str(port)],
            env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        _wait_http(f"http://127.0.0.1:{port}", proc, log)
        yield f"http://127.0.0.1:{port}"
    finally:
        _stop(proc)


def _live_helpers(temp: Path) -> list[int]:
    """Pids of the live substrate's processes (executor, workers) working in a folder under ``temp``."""
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if "kernel_lib.live." in cmd and str(temp) in cmd:
                out.append(int(proc.name))
    return out


def _shot(page, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    if os.environ.get("DAL_SCREENSHOT_DIR"):
        shutil.copy(path, Path(os.environ["DAL_SCREENSHOT_DIR"]) / path.name)


def _click_and_wait(page, panel, action: str) -> None:
    before = int(panel.get_attribute("data-completed") or 0)
    panel.locator(f"button[data-action={action}]").click()
    page.wait_for_function("([el, before]) => Number(el.dataset.completed) > before",
                           arg=[panel.element_handle(), before], timeout=240_000)


def test_marimo_crash_panel_app_kills_and_recovers(browser, tmp_path):
    with _marimo("crash_panel.py", tmp_path) as base:
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        try:
            page.goto(base)
            panel = page.locator(".dal-crash-panel")
            panel.wait_for(state="visible", timeout=180_000)
            assert page.get_by_text("What to do.").is_visible() and page.get_by_text("What to notice.").is_visible()
            status, summary, error = (panel.locator(c) for c in (".dal-status", ".dal-summary", ".dal-error"))
            page.wait_for_function("(el) => el.textContent.includes('not started')", arg=status.element_handle(),
                                   timeout=60_000)

            # a click that cannot run is a message in the panel
            _click_and_wait(page, panel, "crash")
            assert "no worker is running" in error.inner_text()

            panel.locator("select.dal-position").select_option("ToolIntent")
            _click_and_wait(page, panel, "crash_at")
            assert error.inner_text().strip() == "", error.inner_text()
            assert "killed by SIGKILL" in status.inner_text() and "not recovered yet" in status.inner_text()

            _click_and_wait(page, panel, "recover")
            assert "in doubt: test_r18" in summary.inner_text()
            row = panel.locator(".dal-ops tr.dal-in-doubt", has_text="test_r18")
            row.wait_for(state="visible", timeout=30_000)

            # the executor never heard of the job; absence is not proof, so test_r18 stays in doubt
            _click_and_wait(page, panel, "reconcile")
            assert error.inner_text().strip() == "", error.inner_text()
            assert "test_r18: kept in doubt" in summary.inner_text()
            assert "reconciled by a replacement" in status.inner_text()
            assert status.inner_text().endswith("in doubt: test_r18")
            row.wait_for(state="visible", timeout=30_000)
            _shot(page, tmp_path, "marimo_crash_panel")
            helpers = _live_helpers(tmp_path / "tmp")
            assert helpers, "the executor of the session should be running"
        finally:
            page.close()
    # marimo ends its kernel with os._exit (no atexit), so the helpers notice their parent is gone and
    # stop by themselves; the work directory left behind is stale and the next session sweeps it
    deadline = time.monotonic() + 30
    while any(not process_gone(p) for p in helpers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert all(process_gone(p) for p in helpers)
    from kernel_lib.live.controller import sweep_stale_workdirs
    sweep_stale_workdirs(tmp_path / "tmp")
    assert not list((tmp_path / "tmp").glob("kernel_lib_live_*"))


def test_marimo_cadence_explorer_app_recomputes_and_refuses(browser, tmp_path):
    with _marimo("cadence_explorer.py", tmp_path) as base:
        page = browser.new_page(viewport={"width": 1400, "height": 1400})
        try:
            page.goto(base)
            view = page.locator(".dal-cadence")
            view.wait_for(state="visible", timeout=180_000)
            assert page.get_by_text("What to do.").is_visible() and page.get_by_text("What to notice.").is_visible()
            readout = view.locator(".dal-readout")
            page.wait_for_function("(el) => el.textContent.includes('at stride k = 25')",
                                   arg=readout.element_handle(), timeout=60_000)
            view.locator(".dal-chart svg").first.wait_for(state="visible", timeout=60_000)

            # a new stride: kernel_lib recomputes the readout for it
            stride = view.locator("input.dal-number[data-name=stride_turns]")
            stride.click()
            stride.press("Control+a")
            stride.press_sequentially("50")
            stride.press("Enter")
            page.wait_for_function("(el) => el.textContent.includes('at stride k = 50')",
                                   arg=readout.element_handle(), timeout=60_000)
            assert view.locator(".dal-error").inner_text().strip() == ""

            # a negative pause is refused in the widget; the readout keeps the last good givens
            before = readout.inner_text()
            pause = view.locator("input.dal-number[data-name=pause_s]")
            pause.click()
            pause.press("Control+a")
            pause.press_sequentially("-1")
            pause.press("Enter")
            page.wait_for_function("(el) => el.textContent.includes('pause_s')",
                                   arg=view.locator(".dal-error").element_handle(), timeout=60_000)
            assert view.locator(".dal-row.dal-invalid[data-name=pause_s]").count() == 1
            assert readout.inner_text() == before
            _shot(page, tmp_path, "marimo_cadence_explorer")
        finally:
            page.close()
