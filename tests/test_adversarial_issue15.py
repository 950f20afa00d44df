"""Adversarial checks of issue 15's new course features: exercise grading and the lab working copy.

Each test states its fault model (what an outside user does), the invariant that must hold, and
the goal it serves. Every test works in its own ``tmp_path``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import nbformat
import pytest

from kernel_lib.cli import main
from kernel_lib.course.chapters import render_views
from kernel_lib.course.exercises import EXERCISES, get
from kernel_lib.course.exercises._common import RECORD_MIME, jsonable
from kernel_lib.course.lab import fresh, prepare
from kernel_lib.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]

#: answers no exercise's solution can equal, of kinds a student's code can produce
ODD_ANSWERS = {"int too large for a float": 10 ** 400, "list of mixed kinds": [1, "a"],
               "list of dicts": [{"a": 1}, {"b": 2}], "list holding None": [None, 1]}


@pytest.mark.parametrize("label", list(ODD_ANSWERS))
@pytest.mark.parametrize("ex", list(EXERCISES))
def test_an_answer_that_cannot_be_compared_is_graded_wrong_not_a_crash(ex, label):
    """Fault model: a student's answer is an int too large for a float, or a list whose items do not
    order (``[1, "a"]``, dicts). Invariant: ``check`` (and so ``exercise check``, ``submit`` and
    ``exercise grade``) grades it ``wrong`` with no point; it never raises OverflowError or
    TypeError, which aborted the grading of a whole class. Goal: one odd notebook cannot stop an
    instructor's run."""
    mod = get(ex)
    params = mod.validate_params(None)
    report = mod.check(params, {name: ODD_ANSWERS[label] for name in mod.GRADED})
    assert {q["status"] for q in report["quantities"].values()} == {"wrong"}
    assert report["score"] == 0 and not report["all_ok"]


def _student_copy_with_record(tmp_path: Path, answers: dict) -> Path:
    """exercises/ex11_1.ipynb whose grading cell carries an answers record (as a saved run leaves it)."""
    mod = get("11.1")
    nb = nbformat.read(ROOT / "exercises" / "ex11_1.ipynb", as_version=4)
    cell = next(c for c in nb.cells if "grading" in c.metadata.get("tags", []))
    cell.outputs = [nbformat.v4.new_output("display_data", data={RECORD_MIME: {
        "exercise": mod.EXERCISE, "params": jsonable(mod.validate_params(None)), "answers": answers}})]
    path = tmp_path / "student.ipynb"
    nbformat.write(nb, path)
    return path


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON (RFC 8259)")


def test_grade_json_stays_strict_json_when_an_answer_is_nan(tmp_path, capsys):
    """Fault model: a student's answers hold NaN and infinities (a division by zero), saved in the
    notebook. Invariant: ``exercise grade --json`` (and ``check --json``) prints strict JSON, which
    jq or a gradebook importer parses: no bare ``NaN``/``Infinity`` tokens; the answers are still
    graded wrong (exit 1). Goal: the machine-readable report is machine-readable for every input."""
    path = _student_copy_with_record(tmp_path, {"process_crash_ack_ms": math.nan, "host_crash_ack_ms": math.inf,
                                                "placement_ack_ms": -math.inf})
    code = main(["exercise", "grade", str(path), "--no-execute", "--json"])
    out = json.loads(capsys.readouterr().out, parse_constant=_refuse_constant)
    assert code == 1
    qs = out["quantities"]
    assert [qs[n]["status"] for n in ("process_crash_ack_ms", "host_crash_ack_ms", "placement_ack_ms")] == ["wrong"] * 3
    answers = tmp_path / "answers.json"
    answers.write_text('{"process_crash_ack_ms": NaN}')
    code = main(["exercise", "check", "11.1", "--answers", str(answers), "--json"])
    json.loads(capsys.readouterr().out, parse_constant=_refuse_constant)
    assert code == 1


def test_a_raising_grading_cell_is_named_not_blamed_on_the_collector(tmp_path, capsys):
    """Fault model: the student's code leaves ``answers`` an int, so the grading cell's ``submit``
    raises while the grader runs the notebook. Papermill inserts a cell of injected parameters, so
    the grading cell ends up at the index the grader took for its own appended collector.
    Invariant: the error line names the student's cell (``cell [N]``) and its exception, never
    "collecting the answers" (the grader's own cell). Goal: an instructor is sent to the right cell."""
    nb = nbformat.read(ROOT / "exercises" / "ex11_1.ipynb", as_version=4)
    work = next(c for c in nb.cells if c.get("id") == "work1")
    work.source = "answers = 5"
    path = tmp_path / "student.ipynb"
    nbformat.write(nb, path)
    before = path.read_bytes()
    code = main(["exercise", "grade", str(path), "--execute", "--timeout", "120"])
    err = capsys.readouterr().err
    assert code == 2
    assert "collecting the answers" not in err
    assert "cell [" in err and "ConfigError" in err
    assert path.read_bytes() == before


def _course(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A minimal course checkout (one notebook), its shared folder and a working-copy destination."""
    project, shared = tmp_path / "proj", tmp_path / "shared"
    (project / "notebooks").mkdir(parents=True)
    (shared / "chapters").mkdir(parents=True)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Notebook")])
    nbformat.write(nb, project / "notebooks" / "a.ipynb")
    return project, shared, tmp_path / "lab"


def test_fresh_refuses_a_path_that_climbs_out_of_the_course(tmp_path):
    """Fault model: ``course fresh notebooks/../../x`` (a typo, or tab completion gone wrong) names a
    file outside the course folders. Invariant: refused with ConfigError; nothing is read from outside
    the project's course folders and nothing is written outside ``lab/course``. Goal: ``fresh`` only
    ever replaces one of the course's notebooks."""
    project, shared, dest = _course(tmp_path)
    prepare(project, dest, shared)
    (tmp_path / "outside.txt").write_text("not a notebook")
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(ConfigError):
        fresh("notebooks/../../outside.txt", project, dest)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("chapter", ["none", "empty", "not utf-8"])
def test_prepare_makes_the_copy_when_the_chapters_cannot_be_rendered(tmp_path, chapter):
    """Fault model: ``../shared/chapters`` exists but holds no chapter, an empty chapter file or one
    that is not UTF-8. Invariant: ``prepare`` (``make lab``) still copies the notebooks, records them
    in its manifest and reports the chapters' problem as a note, as it does for a missing folder; it
    never stops with a traceback. Goal: a student can always open the notebooks."""
    project, shared, dest = _course(tmp_path)
    if chapter == "empty":
        (shared / "chapters" / "c.txt").write_text("")
    elif chapter == "not utf-8":
        (shared / "chapters" / "c.txt").write_bytes(b"\xff\xfeChapter 11\n\nbody\n")
    report = prepare(project, dest, shared)
    assert report.added == ["notebooks/a.ipynb"]
    copied = json.loads((dest / "course" / "notebooks" / "a.ipynb").read_text(encoding="utf-8"))
    original = json.loads((project / "notebooks" / "a.ipynb").read_text(encoding="utf-8"))
    # the copy carries this interpreter's kernel metadata (kernel_lib.course.lab._copy); the rest is the notebook's own
    assert copied["metadata"].pop("language_info")["name"] == "python"
    assert {k: v for k, v in copied.items()} == original
    assert "notebooks/a.ipynb" in json.loads((dest / ".copies.json").read_text())
    assert any("chapter" in n for n in report.notes)


def test_two_chapters_of_one_title_get_a_view_each(tmp_path):
    """Fault model: two chapter files start with the same title line. Invariant: each gets its own
    Markdown view (none overwrites another) and the contents page links to both. Goal: no chapter
    silently disappears from the working copy."""
    src = tmp_path / "chapters"
    src.mkdir()
    (src / "a.txt").write_text("Same Title\n\nfirst body\n")
    (src / "b.txt").write_text("Same Title\n\nsecond body\n")
    views = render_views(src, tmp_path / "out")
    names = [p.name for p in views]
    assert len(set(names)) == 3
    texts = [p.read_text() for p in views[:2]]
    assert any("first body" in t for t in texts) and any("second body" in t for t in texts)
    contents = views[-1].read_text()
    assert all(n in contents for n in names[:2])



def test_grade_json_on_bad_input_prints_its_error_as_json_and_exits_2(tmp_path, capsys):
    """Fault model: a gradebook script runs ``exercise grade X --json`` on a missing file and on a
    file that is not a notebook. Invariant: stdout is one JSON object ``{notebook, error}`` (stderr
    keeps the ``error:`` line), exit 2. Goal: the script parses every run's output the same way."""
    bad = tmp_path / "bad.ipynb"
    bad.write_text('{"cells": 5}')
    for path in (str(tmp_path / "missing.ipynb"), str(bad)):
        code = main(["exercise", "grade", path, "--json"])
        captured = capsys.readouterr()
        out = json.loads(captured.out)
        assert code == 2 and out["notebook"] == path and out["error"] and "error:" in captured.err


@pytest.mark.parametrize("value", ["nan", "-1", "0", "inf", "soon"])
def test_grade_refuses_a_timeout_that_is_not_a_positive_number_of_seconds(value, capsys):
    """Fault model: ``--timeout`` given as NaN, negative, zero, infinite or not a number. Invariant:
    argparse refuses it naming ``--timeout`` (exit 2) before any notebook is touched."""
    with pytest.raises(SystemExit) as info:
        main(["exercise", "grade", "x.ipynb", "--timeout", value])
    assert info.value.code == 2 and "--timeout" in capsys.readouterr().err


def test_one_notebook_named_twice_is_graded_once(tmp_path, capsys, monkeypatch):
    """Fault model: the shell expands ``a.ipynb ./a.ipynb`` (or a folder and a file in it).
    Invariant: the class report holds the submission once. Goal: a class's summary counts students."""
    path = _student_copy_with_record(tmp_path, {"process_crash_ack_ms": 1.0})
    monkeypatch.chdir(tmp_path)
    code = main(["exercise", "grade", path.name, f"./{path.name}", str(tmp_path), "--no-execute", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["notebook"] == path.name      # one notebook left: its own report


def test_a_notebook_that_imports_two_exercises_is_refused_not_graded_as_the_first(tmp_path, capsys):
    """Fault model: a student pastes code from exercise 11.4 into the 11.1 notebook. Invariant: the
    grader names both exercises and exits 2 instead of silently grading the notebook as whichever
    import came first. Goal: a grade is always for the exercise the notebook answers."""
    nb = nbformat.read(ROOT / "exercises" / "ex11_1.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("from kernel_lib.course.exercises import ex11_4"))
    path = tmp_path / "two.ipynb"
    nbformat.write(nb, path)
    code = main(["exercise", "grade", str(path), "--no-execute", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 2 and "11.1" in out["error"] and "11.4" in out["error"]


@pytest.mark.parametrize("entry", [5, "x", None, [], {"copied": 3}])
def test_a_hand_edited_copies_manifest_does_not_stop_prepare_or_overwrite_the_students_copy(tmp_path, entry):
    """Fault model: ``lab/.copies.json`` was edited by hand: an entry is not ``{"copied": digest}``.
    Invariant: ``prepare`` finishes; the student's changed copy is kept (its origin is unknown, so it
    is treated as the student's own). Goal: a broken bookkeeping file never costs a student work."""
    project, shared, dest = _course(tmp_path)
    prepare(project, dest, shared)
    mine = dest / "course" / "notebooks" / "a.ipynb"
    mine.write_text(mine.read_text().replace("# Notebook", "# Notebook, my notes"))
    before = mine.read_bytes()
    (dest / ".copies.json").write_text(json.dumps({"notebooks/a.ipynb": entry}))
    report = prepare(project, dest, shared)
    assert report.kept == ["notebooks/a.ipynb"] and mine.read_bytes() == before
