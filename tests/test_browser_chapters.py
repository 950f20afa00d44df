"""Real-browser tests: a student opens a chapter from inside the course in JupyterLab.

Situation: ``make lab`` has built the working copy (``kernel_lib.course.lab.prepare``) with the chapter
views rendered from ``../shared/chapters`` and a chapter-links cell in the notebook. Invariant: a click
on a section link in a notebook opens that chapter's Markdown view, scrolled so the section's heading
is on screen, for chapter 11 and for Failure Recovery alike. Goal: chapters are readable from the lab
under readable names, one click from the notebook that teaches them.

Each test prepares its own working copy in a folder of the session's shared JupyterLab (autosave off;
tests/browser_support.py); screenshots go to the test's own temporary folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.browser_support import _KERNEL_IDLE, ROOT, Lab, kernels_shut_down_after, own_folder

pytestmark = pytest.mark.browser

SHARED = ROOT.parent / "shared"


@pytest.fixture
def course_lab(lab_server, request):
    """This test's own working copy (``prepare``, with chapter links) in the shared JupyterLab; yields
    a :class:`Lab` whose folder is the working copy's course folder (JupyterLab's root in ``make lab``)."""
    if not (SHARED / "chapters").is_dir():
        pytest.skip(f"no chapters at {SHARED / 'chapters'}")
    from kernel_lib.course.lab import prepare
    from kernel_lib.course.notebook_links import link_notebook

    folder, prefix = own_folder(lab_server, request)
    report = prepare(dest=folder / "lab", shared=SHARED)
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
    with kernels_shut_down_after(lab_server):
        yield Lab(lab_server.base, lab_server.token, course, f"{prefix}/lab/course")


_CURRENT_PATH = "() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget; " \
                "return w && w.context ? w.context.path : null; }"
# where the heading with this anchor is, in the current main-area widget (ids may be kept as data-jupyter-id)
_HEADING_BOX = """(anchor) => { const w = window.jupyterapp.shell.currentWidget; if (!w) return null;
  const sel = `[id="${CSS.escape(anchor)}"], [data-jupyter-id="${CSS.escape(anchor)}"]`;
  const el = w.node.querySelector(sel); if (!el) return null;
  const r = el.getBoundingClientRect(), host = w.node.getBoundingClientRect();
  return {top: r.top - host.top, height: host.height, text: el.textContent}; }"""


def _open_link_and_check(page, lab: Lab, notebook: str, workspace: str, link_text: str, view: str,
                         anchor: str, shot: Path) -> str:
    page.goto(lab.tree(f"notebooks/{notebook}", workspace=workspace))
    page.wait_for_function(f"() => {{ const p = ({_CURRENT_PATH})(); return p && p.endsWith({notebook!r}); }}",
                           timeout=120_000)
    link = page.locator(".jp-RenderedMarkdown a", has_text=link_text).first
    link.wait_for(state="visible", timeout=60_000)
    link.click()
    page.wait_for_function(f"() => ({_CURRENT_PATH})() === {(lab.prefix + '/chapters/' + view)!r}",
                           timeout=60_000)
    page.wait_for_function(f"() => {{ const b = ({_HEADING_BOX})({anchor!r}); "
                           "return !!b && b.top >= 0 && b.top < b.height * 0.5; }", timeout=60_000)
    box = page.evaluate(_HEADING_BOX, anchor)
    page.screenshot(path=str(shot))
    return box["text"]


def test_section_links_open_each_chapter_at_that_section_and_the_index_says_where_to_start(
        course_lab, browser, tmp_path):
    """One page, three links (one JupyterLab load and one working copy; issue 15: suite time): a
    section link in 11.4 opens chapter 11 at §11.4.3 as rendered Markdown, with the chapters under
    readable names in the file browser; a link in a notebook teaching a Failure Recovery section
    opens that chapter at it; and the committed index, as the working copy holds it, shows its
    "Where to start" list, and a section name in its Failure Recovery table opens that section."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        heading = _open_link_and_check(page, course_lab, "11_4_checkpoints.ipynb", "ch11",
                                       "§11.4.3 Checkpoint cadence", "11_durable_execution.md",
                                       "11.4.3-Checkpoint-cadence", tmp_path / "chapter11_link.png")
        assert heading.startswith("11.4.3 Checkpoint cadence")
        # the view is the rendered Markdown preview (readable), not the text editor
        assert page.locator(".jp-MainAreaWidget:visible .jp-RenderedMarkdown h3").count() > 0
        # and the file browser names the chapters readably
        names = json.loads(page.evaluate(
            "async (p) => JSON.stringify((await window.jupyterapp.serviceManager.contents.get(p))"
            ".content.map(f => f.name))", f"{course_lab.prefix}/chapters"))
        assert {"11_durable_execution.md", "failure_recovery.md"} <= set(names)

        heading = _open_link_and_check(page, course_lab, "fr_probe.ipynb", "fr", "Forward Recovery",
                                       "failure_recovery.md", "Forward-Recovery",
                                       tmp_path / "failure_recovery_link.png")
        assert heading.startswith("Forward Recovery")

        page.goto(course_lab.tree("notebooks/index.ipynb", workspace="index"))
        start = page.locator(".jp-RenderedMarkdown h2", has_text="Where to start").first
        start.wait_for(state="visible", timeout=120_000)
        first_step = page.locator(".jp-RenderedMarkdown ol li").first
        assert "11_1_worker_failure" in first_step.inner_text()
        page.screenshot(path=str(tmp_path / "index.png"))
        heading = _open_link_and_check(page, course_lab, "index.ipynb", "index-fr", "Pivot Action Irreversibility",
                                       "failure_recovery.md", "Pivot-Action-Irreversibility",
                                       tmp_path / "index_failure_recovery.png")
        assert heading.startswith("Pivot Action Irreversibility")
    finally:
        page.close()


_DIRTY = ("() => { const w = window.jupyterapp.shell.currentWidget; "
          "return w && w.context ? w.context.model.dirty : null; }")


def test_a_notebook_of_the_working_copy_opens_unmodified(course_lab, browser, tmp_path):
    """Situation (newcomer report, issue 15): a notebook showed as modified as soon as its kernel
    started, before the student did anything. Invariant: a working copy written by ``prepare``
    carries the kernel's language_info, so nothing changes when the kernel reports it. The same
    notebook copied raw (as tracked: language_info holds only a name) turns dirty, so the check can
    see the difference. Goal: opening a notebook leaves it unmodified."""
    import shutil

    raw = course_lab.root / "notebooks" / "raw_11_2.ipynb"
    shutil.copyfile(ROOT / "notebooks" / "11_2_trajectory_log.ipynb", raw)
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        for name, dirty in (("11_2_trajectory_log.ipynb", False), ("raw_11_2.ipynb", True)):
            page.goto(course_lab.tree(f"notebooks/{name}", workspace=f"dirty-{dirty}"))
            page.wait_for_function(_KERNEL_IDLE, timeout=120_000)
            page.wait_for_timeout(1500)      # the kernel's info has reached the model by now
            assert page.evaluate(_DIRTY) is dirty, name
        page.screenshot(path=str(tmp_path / "opened_unmodified.png"))
    finally:
        page.close()
