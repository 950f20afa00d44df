"""Real-browser tests: a student opens a chapter from inside the course in JupyterLab.

Situation: ``make lab`` has built the working copy (``kernel_lib.course.lab.prepare``) with the chapter
views rendered from ``../shared/chapters`` and a chapter-links cell in the notebook. Invariant: a click
on a section link in a notebook opens that chapter's Markdown view, scrolled so the section's heading
is on screen, for chapter 11 and for Failure Recovery alike. Goal: chapters are readable from the lab
under readable names, one click from the notebook that teaches them.

JupyterLab runs on a working copy in a temporary folder (autosave off); screenshots go to the test's
own temporary folder.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.browser_support import BIN, ROOT, _free_port, _stop, _wait_http

pytestmark = pytest.mark.browser

SHARED = ROOT.parent / "shared"


@pytest.fixture(scope="module")
def course_lab(tmp_path_factory):
    """JupyterLab with the working copy's course folder as its root; yields (base_url, token, course, tmp)."""
    if not (SHARED / "chapters").is_dir():
        pytest.skip(f"no chapters at {SHARED / 'chapters'}")
    from kernel_lib.course.lab import prepare
    from kernel_lib.course.notebook_links import link_notebook

    tmp = tmp_path_factory.mktemp("chapters-lab")
    report = prepare(dest=tmp / "lab", shared=SHARED)
    course = report.lab.course
    link_notebook(course / "notebooks" / "11_4_checkpoints.ipynb", SHARED / "chapters")
    # a notebook teaching a Failure Recovery section (no course notebook does yet)
    fr = course / "notebooks" / "fr_probe.ipynb"
    fr.write_text(json.dumps({"cells": [{"cell_type": "markdown", "id": "t", "metadata": {},
                                          "source": ["# A Failure Recovery notebook"]}],
                              "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                                          "name": "python3"}},
                              "nbformat": 4, "nbformat_minor": 5}))
    link_notebook(fr, SHARED / "chapters", sections=["Forward Recovery"])
    settings = tmp / "settings"
    for ext, name, body in (("docmanager-extension", "plugin", {"autosave": False}),
                            ("apputils-extension", "notification", {"fetchNews": "false"})):
        d = settings / "@jupyterlab" / ext
        d.mkdir(parents=True)
        (d / f"{name}.jupyterlab-settings").write_text(json.dumps(body))
    port, token = _free_port(), "chapters-test"
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp / "cfg"), JUPYTER_RUNTIME_DIR=str(tmp / "rt"),
               IPYTHONDIR=str(tmp / "ipy"), JUPYTER_DATA_DIR=str(tmp / "data"))
    log = tmp / "lab.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(BIN / "jupyter"), "lab", "--no-browser", "--allow-root", "--ip=127.0.0.1", f"--port={port}",
             f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={course}",
             f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={tmp / 'ws'}",
             "--LabApp.expose_app_in_browser=True"],
            env=env, stdout=out, stderr=subprocess.STDOUT, cwd=course)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_http(f"{base}/api/status?token={token}", proc, log)
        yield base, token, course, tmp
    finally:
        _stop(proc)


_CURRENT_PATH = "() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget; " \
                "return w && w.context ? w.context.path : null; }"
# where the heading with this anchor is, in the current main-area widget (ids may be kept as data-jupyter-id)
_HEADING_BOX = """(anchor) => { const w = window.jupyterapp.shell.currentWidget; if (!w) return null;
  const sel = `[id="${CSS.escape(anchor)}"], [data-jupyter-id="${CSS.escape(anchor)}"]`;
  const el = w.node.querySelector(sel); if (!el) return null;
  const r = el.getBoundingClientRect(), host = w.node.getBoundingClientRect();
  return {top: r.top - host.top, height: host.height, text: el.textContent}; }"""


def _open_link_and_check(page, base, token, notebook: str, workspace: str, link_text: str, view: str,
                         anchor: str, shot: Path) -> str:
    page.goto(f"{base}/lab/workspaces/{workspace}/tree/notebooks/{notebook}?token={token}&reset")
    page.wait_for_function(f"() => {{ const p = ({_CURRENT_PATH})(); return p && p.endsWith({notebook!r}); }}",
                           timeout=120_000)
    link = page.locator(".jp-RenderedMarkdown a", has_text=link_text).first
    link.wait_for(state="visible", timeout=60_000)
    link.click()
    page.wait_for_function(f"() => ({_CURRENT_PATH})() === {('chapters/' + view)!r}", timeout=60_000)
    page.wait_for_function(f"() => {{ const b = ({_HEADING_BOX})({anchor!r}); "
                           "return !!b && b.top >= 0 && b.top < b.height * 0.5; }", timeout=60_000)
    box = page.evaluate(_HEADING_BOX, anchor)
    page.screenshot(path=str(shot))
    return box["text"]


def test_a_section_link_in_a_notebook_opens_chapter_11_at_that_section(course_lab, browser):
    base, token, course, tmp = course_lab
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        heading = _open_link_and_check(page, base, token, "11_4_checkpoints.ipynb", "ch11",
                                       "§11.4.3 Checkpoint cadence", "11_durable_execution.md",
                                       "11.4.3-Checkpoint-cadence", tmp / "chapter11_link.png")
        assert heading.startswith("11.4.3 Checkpoint cadence")
        # the view is the rendered Markdown preview (readable), not the text editor
        assert page.locator(".jp-MainAreaWidget:visible .jp-RenderedMarkdown h3").count() > 0
        # and the file browser names the chapters readably
        names = json.loads(page.evaluate(
            "async () => JSON.stringify((await window.jupyterapp.serviceManager.contents.get('chapters'))"
            ".content.map(f => f.name))"))
        assert {"11_durable_execution.md", "failure_recovery.md"} <= set(names)
    finally:
        page.close()


def test_a_section_link_opens_the_failure_recovery_chapter_at_that_section(course_lab, browser):
    base, token, course, tmp = course_lab
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        heading = _open_link_and_check(page, base, token, "fr_probe.ipynb", "fr", "Forward Recovery",
                                       "failure_recovery.md", "Forward-Recovery", tmp / "failure_recovery_link.png")
        assert heading.startswith("Forward Recovery")
    finally:
        page.close()


def test_the_index_says_where_to_start_and_opens_a_failure_recovery_section(course_lab, browser):
    """The committed index, as the working copy holds it: its "Where to start" list is on the page and
    a section name in its Failure Recovery table opens that chapter at that section."""
    base, token, course, tmp = course_lab
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        page.goto(f"{base}/lab/workspaces/index/tree/notebooks/index.ipynb?token={token}&reset")
        start = page.locator(".jp-RenderedMarkdown h2", has_text="Where to start").first
        start.wait_for(state="visible", timeout=120_000)
        first_step = page.locator(".jp-RenderedMarkdown ol li").first
        assert "11_1_worker_failure" in first_step.inner_text()
        page.screenshot(path=str(tmp / "index.png"))
        heading = _open_link_and_check(page, base, token, "index.ipynb", "index-fr", "Pivot Action Irreversibility",
                                       "failure_recovery.md", "Pivot-Action-Irreversibility",
                                       tmp / "index_failure_recovery.png")
        assert heading.startswith("Pivot Action Irreversibility")
    finally:
        page.close()
