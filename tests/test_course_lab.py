"""The course as JupyterLab opens it: the working copy ``make lab`` builds, the chapter views rendered
into it, and the chapter-links cell of each notebook (kernel_lib.course.lab, .chapters, .notebook_links).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from kernel_lib.course.chapters import anchor_for, find_chapters, read_chapter, render_markdown, resolve_section
from kernel_lib.course.lab import LabCopy, fresh, kernel_language_info, prepare
from kernel_lib.errors import ConfigError
from kernel_lib.course.notebook_links import CELL_TAG, link_notebook, sections_for

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
CHAPTERS = SHARED / "chapters"
needs_chapters = pytest.mark.skipif(not CHAPTERS.is_dir(), reason=f"no chapters at {CHAPTERS}")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def _clone(tmp_path: Path) -> Path:
    """A clone of this checkout's HEAD beside a ``shared`` folder, as the project sits beside ../shared;
    its .gitignore is this working tree's (committed in the clone, so the clone starts clean)."""
    repo = tmp_path / "repo"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(repo)], check=True)
    (repo / ".gitignore").write_text((ROOT / ".gitignore").read_text())
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "--quiet", "--allow-empty",
         "-am", "ignore")
    if SHARED.is_dir():
        (tmp_path / "shared").symlink_to(SHARED, target_is_directory=True)
    return repo


def _run_in_place(nb: Path) -> None:
    """Run a notebook top to bottom and save it over itself, in its own folder: what Run All then
    Save does in JupyterLab."""
    import papermill as pm
    pm.execute_notebook(str(nb), str(nb), cwd=str(nb.parent), kernel_name="python3", progress_bar=False)


def test_running_a_notebook_in_the_working_copy_leaves_git_status_clean(tmp_path):
    """Situation: a student runs the index notebook and an exercise from the lab and saves them (today
    the lab opens the tracked notebooks, and Run All leaves them modified). Invariant: ``git status
    --porcelain`` of the checkout is unchanged (the working copy is ignored, nothing tracked is
    written). Goal: working through the course never dirties the repository. The same run on the
    tracked notebook shows up in ``git status``, so the check can see a dirtied file."""
    repo = _clone(tmp_path)
    assert _git(repo, "status", "--porcelain") == ""
    report = prepare(project=repo)
    assert "notebooks/index.ipynb" in report.added
    copies = [report.lab.course / "notebooks" / "index.ipynb", report.lab.course / "exercises" / "ex11_1.ipynb"]
    before = [c.read_bytes() for c in copies]
    for copy in copies:
        _run_in_place(copy)
    assert [c.read_bytes() for c in copies] != before          # the runs really wrote their outputs
    assert any(o for c in nbformat.read(copies[0], as_version=4).cells if c.cell_type == "code"
               for o in c.outputs)
    assert _git(repo, "status", "--porcelain") == ""
    assert sorted(prepare(project=repo).kept) == ["exercises/ex11_1.ipynb", "notebooks/index.ipynb"]

    _run_in_place(repo / "notebooks" / "index.ipynb")           # the old way: the tracked notebook
    assert _git(repo, "status", "--porcelain").split() == ["M", "notebooks/index.ipynb"]


def _same_notebook(copy: Path, tracked: Path) -> bool:
    """The working copy is the tracked notebook with the lab kernel's language_info in its metadata."""
    a, b = json.loads(copy.read_text()), json.loads(tracked.read_text())
    info = a["metadata"].pop("language_info")
    b["metadata"].pop("language_info", None)
    a["metadata"].pop("kernelspec", None)
    b["metadata"].pop("kernelspec", None)
    return a == b and info == kernel_language_info()


def _fake_project(root: Path) -> Path:
    proj = root / "proj"
    for folder in ("notebooks", "exercises", "datasets"):
        (proj / folder).mkdir(parents=True)
    for name in ("a", "b"):
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"# {name} v1")]),
                       proj / "notebooks" / f"{name}.ipynb")
    (proj / "datasets" / "d.txt").write_text("data")
    return proj


@pytest.mark.parametrize("dest", ["", "  "])
def test_an_empty_destination_is_refused_and_nothing_is_written_into_the_checkout(tmp_path, dest):
    """Fault: ``course prepare --dest ""`` (an unset shell variable) was read as "no --dest" and built
    lab/ inside the checkout, exit 0. Invariant: ConfigError (the CLI's one error line, exit 2) for
    prepare and fresh, and the project is left as it was."""
    proj = _fake_project(tmp_path)
    before = sorted(p.relative_to(proj).as_posix() for p in proj.rglob("*"))
    with pytest.raises(ConfigError, match="destination is empty"):
        prepare(project=proj, dest=dest, shared=tmp_path / "no-shared")
    with pytest.raises(ConfigError, match="destination is empty"):
        fresh("notebooks/a.ipynb", project=proj, dest=dest)
    assert sorted(p.relative_to(proj).as_posix() for p in proj.rglob("*")) == before


def test_prepare_keeps_a_changed_copy_follows_the_course_otherwise_and_fresh_restores_one(tmp_path):
    """Situation: the course updates two notebooks after the student edited one of them. Invariant:
    the next ``make lab`` (prepare) never overwrites the edited copy and says the course moved on;
    the untouched copy follows the course; ``course fresh`` gives the course's version and keeps the
    student's in lab/course/backups/. Goal: a student's work survives every ``make lab``."""
    proj = _fake_project(tmp_path)
    first = prepare(project=proj, shared=tmp_path / "no-shared")
    lab = first.lab
    assert sorted(first.added) == ["notebooks/a.ipynb", "notebooks/b.ipynb"]
    assert any("no shared folder" in n for n in first.notes)
    assert (lab.course / "datasets" / "d.txt").read_text() == "data"       # linked, not copied
    assert (lab.course / "datasets").is_symlink()

    mine = lab.course / "notebooks" / "a.ipynb"
    nb = nbformat.read(mine, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("my_answer = 42"))
    nbformat.write(nb, mine)
    student_bytes = mine.read_bytes()
    for name in ("a", "b"):
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"# {name} v2")]),
                       proj / "notebooks" / f"{name}.ipynb")

    second = prepare(project=proj, shared=tmp_path / "no-shared")
    assert second.kept == ["notebooks/a.ipynb"] and second.kept_behind == ["notebooks/a.ipynb"]
    assert second.updated == ["notebooks/b.ipynb"]
    assert mine.read_bytes() == student_bytes
    assert _same_notebook(lab.course / "notebooks" / "b.ipynb", proj / "notebooks" / "b.ipynb")
    assert "course fresh notebooks/a.ipynb" in second.summary()

    copy, backup = fresh("notebooks/a.ipynb", project=proj)
    assert _same_notebook(copy, proj / "notebooks" / "a.ipynb")
    assert backup is not None and backup.read_bytes() == student_bytes
    assert backup.is_relative_to(lab.course / "backups")
    third = prepare(project=proj, shared=tmp_path / "no-shared")
    assert third.kept == [] and third.updated == [] and third.added == []

    proc = subprocess.run([sys.executable, "-m", "kernel_lib", "course", "fresh", "README.md", "--dest",
                           str(lab.root)], capture_output=True, text=True, cwd=proj, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("error:") and "Traceback" not in proc.stderr


_REL = re.compile(r"""(?<![\w/.])(\.\./[\w./-]+)""")


def test_every_relative_path_a_notebook_uses_resolves_the_same_from_the_working_copy(tmp_path):
    """Situation: a notebook opened from the working copy runs in lab/course/notebooks, not in
    notebooks/. Invariant: every relative path any tracked notebook names (``../datasets/…``,
    ``../../shared/data/…``, links to ``../exercises/…``) reaches the same file from both folders.
    Goal: the notebooks work unchanged from the working copy."""
    lab = prepare(project=ROOT, dest=tmp_path / "lab", shared=SHARED).lab
    checked = 0
    for folder in ("notebooks", "exercises", "solutions"):
        for path in sorted((ROOT / folder).glob("*.ipynb")):
            text = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells)
            for rel in sorted(set(_REL.findall(text))):
                rel = rel.rstrip(".")
                tracked = (path.parent / rel)
                if not tracked.exists():
                    continue               # a path the notebook only mentions, or shared data absent here
                copy = lab.course / folder / rel
                assert copy.exists(), f"{path.name}: {rel} is missing from the working copy"
                if tracked.is_dir():
                    same = sorted(p.name for p in copy.iterdir()) == sorted(p.name for p in tracked.iterdir())
                else:
                    same = (os.path.samefile(copy, tracked) or copy.read_bytes() == tracked.read_bytes()
                            or (tracked.suffix == ".ipynb" and _same_notebook(copy, tracked)))
                assert same, f"{path.name}: {rel} reaches another file from the working copy"
                checked += 1
    assert checked >= 5


@needs_chapters
def test_chapter_sections_render_as_headings_with_the_anchors_links_use(tmp_path):
    """Situation: the chapters are plain text with hashed names and two layouts. Invariant: every
    numbered heading line of chapter 11 and every section the index lists for Failure Recovery
    becomes one Markdown heading of the matching level, whose rendered id (JupyterLab: its text,
    spaces as ``-``) is the anchor the links use. Goal: a link can land on any section."""
    from markdown_it import MarkdownIt

    chapters = find_chapters(CHAPTERS)
    names = {c.view_name for c in chapters}
    assert {"11_durable_execution.md", "failure_recovery.md"} <= names
    ch11 = next(c for c in chapters if c.view_name == "11_durable_execution.md")
    numbered = [ln.strip() for ln in ch11.source.read_text(encoding="utf-8").splitlines()
                if re.match(r"^\d+\.\d+(\.\d+)* [A-Z][^.]{2,80}$", ln.strip())]
    assert len(numbered) > 30
    for ch in chapters:
        tokens = MarkdownIt().enable("table").parse(render_markdown(ch))
        headings = [(int(t.tag[1]), tokens[i + 1].content) for i, t in enumerate(tokens) if t.type == "heading_open"]
        assert headings == [(s.level, s.heading) for s in ch.sections], ch.view_name
        if ch is ch11:
            found = {s.heading: s for s in ch.sections}
            for line in numbered:
                assert found[line].level == 1 + line.split()[0].count(".")
            assert found["11.4.3 Checkpoint cadence"].anchor == "11.4.3-Checkpoint-cadence"
        assert not any(t.type == "html_block" and "<" in t.content and "-->" not in t.content for t in tokens)

    index = nbformat.read(ROOT / "notebooks" / "index.ipynb", as_version=4)
    fr_rows = [m.groups() for c in index.cells if c.cell_type == "markdown" and "## Failure Recovery" in c.source
               for m in re.finditer(r"^\| \[([A-Z][\w :-]+?)\]\(\.\./chapters/([\w.]+)#([^)]+)\) \|", c.source, re.M)]
    assert len(fr_rows) >= 7
    for name, view, anchor in fr_rows:
        ch, sec = resolve_section(chapters, name)
        # a row names a top-level section of the chapter (level 2) or one of its subsections (level 3);
        # a name both chapters use is qualified ("Failure Recovery: Fallacies and Pitfalls")
        assert ch.view_name == view == "failure_recovery.md" and sec.level in (2, 3) and sec.anchor == anchor
    assert sum(1 for name, _v, _a in fr_rows if resolve_section(chapters, name)[1].level == 2) >= 7
    # every chapter link anywhere in the index lands on a heading the view has
    anchors = {c.view_name: {s.anchor for s in c.sections} for c in chapters}
    links = [m.groups() for c in index.cells if c.cell_type == "markdown"
             for m in re.finditer(r"\]\(\.\./chapters/([\w.]+\.md)(?:#([^)\s]+))?\)", c.source)]
    assert len(links) > 20
    for view, anchor in links:
        contents_page = (view, anchor) == ("README.md", None)
        assert contents_page or (view in anchors and (anchor is None or anchor in anchors[view])), (view, anchor)


def test_cross_references_into_the_book_render_as_words_not_as_mathjax_question_marks():
    """Fault model: the chapters cite principles of other volumes as ``$\\ref{pri-vol3-...}$``, a label
    MathJax cannot resolve, so the rendered chapter showed ``principle ???``. Invariant: such a span
    becomes the label's words in italics; every other math span is left to MathJax."""
    from kernel_lib.course.chapters import _inline

    text = r"probe first (principle $\ref{pri-vol3-exactly-once-settlement}$), then prefill $L_k/P$"
    assert _inline(text) == "probe first (principle *exactly once settlement*), then prefill $L_k/P$"
    assert _inline(r"see $\ref{nbk-01-trajectory-goodput}$.") == "see *trajectory goodput*."
    if CHAPTERS.is_dir():
        for ch in find_chapters(CHAPTERS):
            assert "\\ref{" not in render_markdown(ch), ch.view_name


@needs_chapters
def test_no_chapter_text_is_committed():
    """Invariant: no tracked file carries a sentence of the chapters (their views are rendered into
    the untracked working copy only). Goal: the project keeps the chapters' text out of the repo."""
    probes = []
    for ch in find_chapters(CHAPTERS):
        for kind, text in ch.blocks:
            if kind == "para" and len(str(text)) > 200 and "$" not in str(text):
                mid = len(str(text)) // 2
                probes.append(str(text)[mid:mid + 70])
    assert len(probes) > 50
    tracked = _git(ROOT, "ls-files").split("\n")
    hits = []
    for rel in tracked:
        p = ROOT / rel
        if not rel or p.suffix not in {".py", ".md", ".ipynb", ".txt", ".toml", ".json", ".jsonl", ".yml"}:
            continue
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        hits += [(rel, probe) for probe in probes if probe in text]
    assert hits == []


@needs_chapters
def test_the_chapter_links_cell_is_written_once_and_lands_on_rendered_headings(tmp_path):
    """Situation: the link tool runs on a notebook, then again (at integration, on every notebook).
    Invariant: one marked cell after the title, a second run writes nothing, and every link names a
    view and an anchor that the rendered view really has. Goal: each notebook links to the sections
    it teaches, idempotently."""
    nb_path = tmp_path / "11_4_checkpoints.ipynb"
    original = nbformat.read(ROOT / "notebooks" / "11_4_checkpoints.ipynb", as_version=4)
    original.cells = [c for c in original.cells if CELL_TAG not in c.metadata.get("tags", [])]   # as before the tool
    nbformat.write(original, nb_path)
    assert link_notebook(nb_path, CHAPTERS) is True
    once = nb_path.read_bytes()
    assert link_notebook(nb_path, CHAPTERS) is False and nb_path.read_bytes() == once
    nb = nbformat.read(nb_path, as_version=4)
    marked = [i for i, c in enumerate(nb.cells) if CELL_TAG in c.metadata.get("tags", [])]
    assert marked == [1] and len(nb.cells) == len(original.cells) + 1
    assert [c.source for c in nb.cells[:1] + nb.cells[2:]] == [c.source for c in original.cells]

    views = {c.view_name: {s.anchor for s in c.sections} for c in find_chapters(CHAPTERS)}
    links = re.findall(r"\]\(\.\./chapters/([\w.]+\.md)#([^)\s]+)\)", nb.cells[1].source)
    assert [a for _, a in links] == [anchor_for(resolve_section(find_chapters(CHAPTERS), s)[1].heading)
                                     for s in sections_for(nb_path)]
    for view, anchor in links:
        assert anchor in views[view]

    # every course notebook has sections the tool can resolve, and the committed index already has its cell
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        scratch = tmp_path / path.name
        scratch.write_bytes(path.read_bytes())
        link_notebook(scratch, CHAPTERS)
    assert link_notebook(ROOT / "notebooks" / "index.ipynb", CHAPTERS, write=False) is False

    proc = subprocess.run([sys.executable, "-m", "kernel_lib", "course", "link-chapters", "--check",
                           "--chapters", str(CHAPTERS), str(tmp_path / "missing_11_4.ipynb")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("error:")
    fresh_copy = tmp_path / "again.ipynb"
    nbformat.write(original, fresh_copy)
    proc = subprocess.run([sys.executable, "-m", "kernel_lib", "course", "link-chapters", "--check",
                           "--section", "11.4.3", "--chapters", str(CHAPTERS), str(fresh_copy)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "would change" in proc.stdout


def test_make_lab_opens_the_working_copy_and_prints_the_url_without_a_display():
    """Situation: ``make lab`` on a server with no display. Invariant: it prepares the working copy,
    starts JupyterLab rooted there on the index, and passes ``--no-browser``; the README says where the
    URL and token appear. Goal: the one command works headless."""
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    out = subprocess.run(["make", "-n", "lab"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=60).stdout.replace("\\\n", " ")
    assert "kernel_lib course prepare" in out
    launch = next(ln for ln in out.splitlines() if "jupyter" in ln and " lab " in ln)
    assert f"root_dir=\"{ROOT / 'lab' / 'course'}\"" in launch and "notebooks/index.ipynb" in launch
    assert "--no-browser" in launch or sys.platform != "linux"
    readme = (ROOT / "README.md").read_text()
    assert "--no-browser" in readme and "token" in readme and "jupyter server list" in readme
    assert "lab/course" in readme and "make fresh" in readme


def test_lab_copy_refuses_a_path_outside_the_course(tmp_path):
    lab = LabCopy.at(project=_fake_project(tmp_path), dest=tmp_path / "lab")
    from kernel_lib.errors import ConfigError
    with pytest.raises(ConfigError):
        lab.copy_of("datasets/d.txt")
    with pytest.raises(ConfigError):
        read_chapter(tmp_path / "missing.txt")
    assert json.loads(json.dumps(str(lab.course)))


@needs_chapters
def test_every_course_notebook_and_solution_links_the_sections_it_teaches():
    """Every tracked notebook and solution carries an up-to-date chapter-links cell (the tool's own
    --check writes nothing and exits 1 when one would change), and each link names a heading the
    rendered chapter view has."""
    paths = sorted([*ROOT.glob("notebooks/*.ipynb"), *ROOT.glob("solutions/*.ipynb"), *ROOT.glob("exercises/*.ipynb")])
    proc = subprocess.run([sys.executable, "-m", "kernel_lib", "course", "link-chapters", "--check",
                           *map(str, paths)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    headings = {anchor_for(s.heading) for ch in find_chapters(CHAPTERS) for s in ch.sections}
    for p in paths:
        nb = nbformat.read(p, as_version=4)
        cells = [c for c in nb.cells if CELL_TAG in c.get("metadata", {}).get("tags", [])]
        assert len(cells) == 1, f"{p.name}: {len(cells)} chapter-links cells"
        if p.name == "index.ipynb":   # the index links whole chapters; its tables link the sections
            assert "../chapters/11_durable_execution.md" in cells[0].source
            continue
        targets = re.findall(r"\]\(\.\./chapters/[^)#]+\.md#([^)]+)\)", cells[0].source)
        assert targets and set(targets) <= headings, (p.name, sorted(set(targets) - headings))


def test_a_copied_notebook_opens_unmodified_and_stays_the_courses_until_changed(tmp_path):
    """Situation (newcomer report, issue 15): every notebook opened in JupyterLab showed as modified at once, because
    the tracked ones store only ``language_info.name`` and the kernel reports the full record, which JupyterLab
    writes into the open notebook. Invariant: the working copy carries the full record this interpreter's
    ipykernel reports (and the kernelspec as installed), and the manifest records the bytes written, so a later
    ``prepare`` sees the copy as untouched (neither kept nor updated) and still follows the course when the
    tracked notebook changes. Goal: opening a notebook changes nothing."""
    from jupyter_client.manager import start_new_kernel

    proj = _fake_project(tmp_path)
    lab = prepare(project=proj, shared=tmp_path / "no-shared").lab
    copy = lab.course / "notebooks" / "a.ipynb"
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        kc.kernel_info()
        reported = kc.get_shell_msg(timeout=60)["content"]["language_info"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert json.loads(copy.read_text())["metadata"]["language_info"] == reported
    again = prepare(project=proj, shared=tmp_path / "no-shared")
    assert again.kept == [] and again.updated == [] and again.added == []
    v2 = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# a v2")])
    nbformat.write(v2, proj / "notebooks" / "a.ipynb")
    third = prepare(project=proj, shared=tmp_path / "no-shared")
    assert third.updated == ["notebooks/a.ipynb"] and "# a v2" in copy.read_text()
