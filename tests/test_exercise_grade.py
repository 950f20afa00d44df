"""``python -m kernel_lib exercise grade``: an instructor grades students' exercise notebooks (§11.12).

Submissions are real student copies from ``exercises/`` with an answer cell filled in, run by papermill
the way a student's Run All would (module fixture, its own temporary folder), or run by the grader
itself. The grader recomputes each answer's verdict from the givens, so every expectation below is
derived from ``solve()`` at test time, never typed in.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import papermill as pm
import pytest

from kernel_lib.cli import main
from kernel_lib.course.exercises import EXERCISES, get, notebook_name
from kernel_lib.course.exercises._common import RECORD_MIME, _matches, alternative_values, plain_answers

ROOT = Path(__file__).resolve().parents[1]
EX = "11.1"
MOD = get(EX)
STUDENT = ROOT / "exercises" / "ex11_1.ipynb"
SOLUTION = ROOT / "solutions" / "ex11_1.ipynb"


ALT = get("11.2")      # its binary-units reading (MiB for MB) differs by 5 % at the defaults


def right_answers(mod=MOD, params=None) -> dict:
    sol = mod.solve(params)
    return {k: sol[k] for k in mod.GRADED}


def with_answers(answers: dict, extra_source: str = "", mod=MOD) -> nbformat.NotebookNode:
    """The student copy of ``mod`` with one answer cell (after the setup cell) that fills ``answers``."""
    nb = nbformat.read(ROOT / "exercises" / notebook_name(mod.EXERCISE), as_version=4)
    at = next(i for i, c in enumerate(nb.cells) if c.get("id") == "setup") + 1
    src = f"answers.update(__import__('json').loads({json.dumps(answers)!r}))"
    nb.cells.insert(at, nbformat.v4.new_code_cell(src + ("\n" + extra_source if extra_source else "")))
    return nb


@pytest.fixture(scope="module")
def submissions(tmp_path_factory):
    """Three students' notebooks, each run top to bottom and saved with its outputs (as JupyterLab
    saves them): all right and one answer wrong (exercise 1), one answer of the alternative reading
    (exercise 2)."""
    folder = tmp_path_factory.mktemp("class")
    right = right_answers()
    wrong = dict(right, placement_ack_ms=right["placement_ack_ms"] * 1.5)
    alt = dict(right_answers(ALT), full_write_mb=ALT.solve()["alternative"]["binary_units"]["full_write_mib"])
    paths = {}
    for name, answers, mod in (("right", right, MOD), ("wrong", wrong, MOD), ("alternative", alt, ALT)):
        src = folder / f"{name}.src.ipynb"
        nbformat.write(with_answers(answers, mod=mod), src)
        paths[name] = folder / f"{name}.ipynb"
        pm.execute_notebook(str(src), str(paths[name]), cwd=str(folder), kernel_name="python3", progress_bar=False)
        src.unlink()
    return paths


def grade_json(argv, capsys) -> tuple[int, dict]:
    code = main(["exercise", "grade", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


# --- the three kinds of submission -------------------------------------------------------------


def test_a_saved_notebook_carries_its_answers_record(submissions):
    """Situation: a student runs the notebook and saves it. Invariant: the grading cell's output holds
    the answers as one machine-readable record for the defaults. Goal: the file itself can be graded."""
    nb = nbformat.read(submissions["right"], as_version=4)
    cell = next(c for c in nb.cells if "grading" in c.metadata.get("tags", []))
    records = [o["data"][RECORD_MIME] for o in cell.outputs if RECORD_MIME in o.get("data", {})]
    assert len(records) == 1
    assert records[0]["exercise"] == EX and records[0]["params"] == MOD.validate_params(None)
    assert records[0]["answers"] == json.loads(json.dumps(right_answers()))


def test_a_correct_submission_exits_0_with_full_points(submissions, capsys):
    """Situation: every answer right. Invariant: exit 0, every quantity correct and worth its point,
    graded from the stored outputs without running it again. Goal: CI passes the student."""
    code, r = grade_json([str(submissions["right"])], capsys)
    assert code == 0 and r["all_ok"] is True and r["answers_from"] == "stored outputs"
    assert r["score"] == r["max_score"] == len(MOD.GRADED)
    assert {q["status"] for q in r["quantities"].values()} == {"correct"}


def test_a_wrong_answer_exits_1_and_names_only_that_quantity(submissions, capsys):
    """Situation: one answer 50 % off. Invariant: exit 1; that quantity alone is wrong, without its
    expected value. Goal: CI fails the student and says where."""
    code, r = grade_json([str(submissions["wrong"])], capsys)
    assert code == 1 and r["all_ok"] is False and r["score"] == len(MOD.GRADED) - 1
    bad = {n: q for n, q in r["quantities"].items() if q["status"] != "correct"}
    assert list(bad) == ["placement_ack_ms"] and bad["placement_ack_ms"]["status"] == "wrong"
    assert not any("expected" in q for q in r["quantities"].values())


def test_an_alternative_reading_is_named_not_a_bare_no(submissions, capsys):
    """Situation: the full snapshots' bytes answered in MiB, the binary-units reading the solution
    documents as the alternative (5 % below the MB answer). Invariant: status "alternative" naming the
    reading, no point by default (exit 1), the point with --accept-readings (exit 0); the text report
    says "matches the reading". Goal: the instructor sees a defensible reading, not a mistake."""
    code, r = grade_json([str(submissions["alternative"])], capsys)
    q = r["quantities"]["full_write_mb"]
    assert code == 1 and q["status"] == "alternative" and q["reading"] == "binary_units" and q["points"] == 0
    assert r["score"] == len(ALT.GRADED) - 1
    code, r = grade_json([str(submissions["alternative"]), "--accept-readings"], capsys)
    assert code == 0 and r["all_ok"] and r["quantities"]["full_write_mb"]["points"] == 1
    assert main(["exercise", "grade", str(submissions["alternative"])]) == 1
    text = capsys.readouterr().out
    line = next(ln for ln in text.splitlines() if "full_write_mb" in ln)
    assert line.lstrip().startswith("~~") and "matches the reading 'binary_units'" in line and "NO" not in line


def test_expected_values_appear_only_with_reveal(submissions, capsys):
    """Invariant: neither grade nor check prints an expected value unless --reveal is given."""
    expected = MOD.solve()["placement_ack_ms"]
    _, r = grade_json([str(submissions["wrong"])], capsys)
    assert "expected" not in r["quantities"]["placement_ack_ms"]
    _, r = grade_json([str(submissions["wrong"]), "--reveal"], capsys)
    assert r["quantities"]["placement_ack_ms"]["expected"] == expected
    assert main(["exercise", "grade", str(submissions["wrong"])]) == 1
    assert " expected " not in capsys.readouterr().out
    answers = submissions["wrong"].parent / "answers.json"
    answers.write_text(json.dumps({"placement_ack_ms": 1.0}))
    assert main(["exercise", "check", EX, "--answers", str(answers), "--json"]) == 1
    assert not any("expected" in q for q in json.loads(capsys.readouterr().out)["quantities"].values())
    assert main(["exercise", "check", EX, "--answers", str(answers), "--json", "--reveal"]) == 1
    assert json.loads(capsys.readouterr().out)["quantities"]["placement_ack_ms"]["expected"] == expected


# --- runs: seeds, unexecuted files, several notebooks --------------------------------------------


def test_a_seeded_variant_runs_the_notebook_with_those_givens(tmp_path, capsys):
    """Situation: the instructor assigns seed 7; the file is the worked solution, never run.
    Invariant: the grader runs a scratch copy with the seed's givens injected (the student's file is
    not written) and every answer is right for those givens. Goal: one command grades any variant."""
    sub = tmp_path / "sol.ipynb"
    shutil.copy(SOLUTION, sub)
    before = sub.read_bytes()
    code, r = grade_json([str(sub), "--seed", "7"], capsys)
    assert code == 0 and r["answers_from"] == "executed" and r["seed"] == 7
    assert r["params"] == MOD.validate_params(MOD.generate(7)) != MOD.validate_params(None)
    assert r["score"] == r["max_score"] == len(MOD.GRADED)
    assert sub.read_bytes() == before


def test_answers_stored_for_other_givens_are_not_trusted(submissions, capsys):
    """Situation: a notebook saved with the defaults' answers, graded for seed 7 without running.
    Invariant: exit 2, one line saying no answers are recorded for these givens. Goal: a stale or
    default run never passes for another variant."""
    assert main(["exercise", "grade", str(submissions["right"]), "--seed", "7", "--no-execute"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "givens" in err[0]


def test_a_class_in_one_call_summarises_and_exits_with_the_worst(submissions, tmp_path, capsys):
    """Situation: a folder of submissions, one of them not a notebook. Invariant: every notebook gets
    its report, the broken one an error entry, the summary counts them, exit 2 (bad input wins over
    wrong). Goal: an instructor grades a class with one command."""
    folder = tmp_path / "class"
    folder.mkdir()
    for name, p in submissions.items():
        shutil.copy(p, folder / f"{name}.ipynb")
    (folder / "zz_broken.ipynb").write_text("this is not json")
    code, r = grade_json([str(folder)], capsys)
    assert code == 2
    by_name = {Path(s["notebook"]).stem: s for s in r["submissions"]}
    assert set(by_name) == {"right", "wrong", "alternative", "zz_broken"}
    assert "error" in by_name["zz_broken"] and by_name["right"]["all_ok"] and not by_name["wrong"]["all_ok"]
    assert r["summary"] == {"notebooks": 4, "all_right": 1, "wrong": 2, "errors": 1,
                            "score": sum(by_name[n]["score"] for n in ("right", "wrong", "alternative")),
                            "max_score": 2 * len(MOD.GRADED) + len(ALT.GRADED)}
    code, r = grade_json([str(folder / "[rw]*.ipynb")], capsys)   # a glob the shell did not expand
    assert code == 1 and [Path(s["notebook"]).stem for s in r["submissions"]] == ["right", "wrong"]


# --- bad input: exit 2 with one clear line ----------------------------------------------------


def _one_error_line(argv, capsys) -> str:
    assert main(["exercise", "grade", *argv]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and not captured.out, captured
    return err[0]


def test_bad_input_is_one_error_line_and_exit_2(tmp_path, capsys):
    """Situations: a missing file, a text file, JSON that is no notebook, a notebook without an answer
    cell. Invariant: exit 2 and one ``error:`` line naming the file and the problem."""
    assert "no such file" in _one_error_line([str(tmp_path / "missing.ipynb")], capsys)
    (tmp_path / "notes.ipynb").write_text("my answers: 6.5 ms")
    assert "not a Jupyter notebook" in _one_error_line([str(tmp_path / "notes.ipynb")], capsys)
    (tmp_path / "obj.ipynb").write_text(json.dumps({"answers": {"placement_ack_ms": 6.5}}))
    assert "not a Jupyter notebook" in _one_error_line([str(tmp_path / "obj.ipynb")], capsys)
    nb = nbformat.read(STUDENT, as_version=4)
    nb.cells = [c for c in nb.cells if "grading" not in c.metadata.get("tags", []) and c.get("id") != "check"]
    nbformat.write(nb, tmp_path / "no_answer_cell.ipynb")
    assert "no answer cell" in _one_error_line([str(tmp_path / "no_answer_cell.ipynb")], capsys)
    bad = json.loads(Path(STUDENT).read_text())
    bad["cells"][0]["source"] = 5          # valid JSON that nbformat reads with a logged warning only
    (tmp_path / "int_source.ipynb").write_text(json.dumps(bad))
    assert "not a Jupyter notebook" in _one_error_line([str(tmp_path / "int_source.ipynb")], capsys)


def test_a_malformed_notebook_in_a_class_is_one_error_line_and_the_run_goes_on(tmp_path, capsys):
    """Fault: one submission's cells hold a source that is not text (nbformat reads it, logging a
    schema warning only); grading crashed the whole class run with a TypeError traceback and exit 1
    (the "wrong answer" code). Invariant: that notebook is one ``error:`` line, the next notebook
    is still looked at (here: one with no recorded answers), exit 2."""
    bad = json.loads(Path(STUDENT).read_text())
    for cell in bad["cells"]:
        if cell["cell_type"] == "code":
            cell["source"] = 7
    (tmp_path / "int_source.ipynb").write_text(json.dumps(bad))
    shutil.copy(STUDENT, tmp_path / "unrun.ipynb")
    code = main(["exercise", "grade", str(tmp_path / "int_source.ipynb"), str(tmp_path / "unrun.ipynb"),
                 "--no-execute"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 2 and all(line.startswith("error:") for line in err), err
    assert "int_source.ipynb" in err[0] and "not a Jupyter notebook" in err[0] and "unrun.ipynb" in err[1]


def test_a_notebook_that_raises_is_one_error_line_naming_the_exception(tmp_path):
    """Situation: a student's cell raises. Invariant: exit 2, exactly one stderr line (no kernel
    chatter) naming the exception, and with --json the same error as one JSON object on stdout.
    Run as a real command, as CI runs it."""
    sub = tmp_path / "raises.ipynb"
    nbformat.write(with_answers({"placement_ack_ms": 6.5}, "1 / 0"), sub)
    r = subprocess.run([sys.executable, "-m", "kernel_lib", "exercise", "grade", str(sub), "--json"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1, r.stderr
    assert err[0].startswith("error:") and "ZeroDivisionError" in err[0] and str(sub) in err[0]
    assert json.loads(r.stdout) == {"notebook": str(sub), "error": err[0].removeprefix("error: ")}


# --- the pieces: strip, alternatives, plain answers -----------------------------------------------


@pytest.mark.parametrize("ex", list(EXERCISES))
def test_student_grading_cells_hold_no_answer_placeholder(ex):
    """Fault: the solution's own checks in the grading cell were stripped to '# your answer here',
    inviting students to write into the grading cell. Invariant: each student notebook has exactly
    one grading cell, it calls submit and holds no placeholder or solution code."""
    nb = nbformat.read(ROOT / "exercises" / notebook_name(ex), as_version=4)
    cells = [c for c in nb.cells if "grading" in c.metadata.get("tags", [])]
    assert len(cells) == 1
    src = cells[0].source
    assert "your answer here" not in src.lower() and "submit(ex, params, answers)" in src and "solve(" not in src


@pytest.mark.parametrize("ex", list(EXERCISES))
def test_every_documented_alternative_answer_is_graded_as_that_reading(ex):
    """Invariant: for every graded quantity whose documented alternative reading gives a different
    answer (beyond tolerance), answering that value is graded "alternative" and names the reading."""
    mod = get(ex)
    seen = 0
    for params in [None, *(mod.generate(s) for s in range(8)), *SHORT_TURNS.get(ex, [])]:
        sol = mod.solve(params)
        alts = alternative_values(sol["alternative"], mod.GRADED, getattr(mod, "ALTERNATIVE_ALIASES", None))
        for name, options in alts.items():
            for _reading, value in options:
                q = mod.check(params, {name: value})["quantities"][name]
                if q["status"] == "correct":      # this reading agrees with the graded one here
                    continue
                seen += 1
                named = [v for r, v in options if r == q.get("reading")]   # the reading it names gives this value
                assert q["status"] == "alternative" and any(_matches(v, value, mod.GRADED[name]) for v in named), q
    assert seen, f"exercise {ex}: no documented alternative reading changes any graded answer"


#: Givens under which exercise 1's two readings of "share of elapsed time" differ beyond 1 % (with
#: seconds-long turns they never do: a/(w+a) and a/w agree to a/w).
SHORT_TURNS = {"11.1": [{"work_per_turn_s": 0.01}]}


def test_numpy_and_sympy_answers_are_graded_as_numbers():
    """Fault: an answer computed with numpy or sympy (np.int64, sympy.Float) is not a Python int/float
    and used to be graded wrong. Invariant: submit's conversion makes them the numbers they are."""
    np = pytest.importorskip("numpy")
    sp = pytest.importorskip("sympy")
    right = right_answers()
    typed = dict(right, majority_offvolume_copies=np.int64(right["majority_offvolume_copies"]),
                 placement_ack_ms=sp.Float(right["placement_ack_ms"]),
                 required_replica_indices=np.array(right["required_replica_indices"]),
                 majority_satisfies_contract=np.bool_(right["majority_satisfies_contract"]))
    assert not MOD.check(None, typed)["all_ok"]
    assert MOD.check(None, plain_answers(typed))["all_ok"]


# --- Failure Recovery, Napkin Math 0.1 ----------------------------------------------------------------

NM = get("nm0.1")


@pytest.fixture(scope="module")
def nm_submissions(tmp_path_factory):
    """Two students' copies of exercises/nm0_1.ipynb, run and saved: one answer wrong, and one answer of
    the documented reading that does not charge the failing step's barriers."""
    folder = tmp_path_factory.mktemp("nm0_1")
    right = right_answers(NM)
    reading = NM.solve()["alternative"]["committed_steps_only"]
    cases = {"wrong": dict(right, unwind_ms=right["unwind_ms"] * 1.5),
             "reading": dict(right, forward_fsyncs=reading["forward_fsyncs"])}
    paths = {}
    for name, answers in cases.items():
        src = folder / f"{name}.src.ipynb"
        nbformat.write(with_answers(answers, mod=NM), src)
        paths[name] = folder / f"{name}.ipynb"
        pm.execute_notebook(str(src), str(paths[name]), cwd=str(folder), kernel_name="python3", progress_bar=False)
        src.unlink()
    return paths


def test_grading_the_nm0_1_solution_notebook_runs_it_and_finds_every_answer_right(capsys):
    code, out = grade_json([str(SOLUTION.parent / "nm0_1.ipynb")], capsys)
    assert code == 0, out
    assert out["exercise"] == "nm0.1" and out["answers_from"] == "executed" and out["all_ok"]
    assert out["score"] == out["max_score"] == len(NM.GRADED)


def test_an_nm0_1_submission_is_graded_wrong_or_as_its_reading(nm_submissions, capsys):
    code, out = grade_json([str(nm_submissions["wrong"]), str(nm_submissions["reading"])], capsys)
    assert code == 1
    by_name = {Path(s["notebook"]).stem: s for s in out["submissions"]}
    wrong, reading = by_name["wrong"], by_name["reading"]
    assert wrong["answers_from"] == "stored outputs" and wrong["quantities"]["unwind_ms"]["status"] == "wrong"
    assert wrong["score"] == len(NM.GRADED) - 1 and "expected" not in wrong["quantities"]["unwind_ms"]
    q = reading["quantities"]["forward_fsyncs"]
    assert q["status"] == "alternative" and q["reading"] == "committed_steps_only" and not reading["all_ok"]
    code, out = grade_json([str(nm_submissions["reading"]), "--accept-readings"], capsys)
    assert code == 0 and out["all_ok"] and out["quantities"]["forward_fsyncs"]["status"] == "alternative"
    assert main(["exercise", "grade", str(nm_submissions["reading"])]) == 1
    assert "matches the reading 'committed_steps_only'" in capsys.readouterr().out


def test_a_dollar_quantity_reads_as_money_in_the_report():
    """Newcomer report (issue 15): grading printed dollar answers as bare %g numbers. Invariant: a
    quantity named ``*_usd`` shows the student's answer and (with reveal) the expected value as
    money, without exponent notation; other quantities are unchanged."""
    from kernel_lib.course.exercises import format_report, get

    mod = get("nm0.1")
    report = mod.check(mod.DEFAULTS, {"token_cost_usd": 0.07395, "input_cost_usd": 3.31e-05, "forward_fsyncs": 10})
    text = format_report(report, reveal=True)
    line = {ln.split()[1]: ln for ln in text.splitlines()[1:]}
    assert "your answer $0.07395" in line["token_cost_usd"] and "expected $0.07395" in line["token_cost_usd"]
    assert "your answer $0.0000331 " in line["input_cost_usd"] and "e-05" not in text
    assert "your answer 10 " in line["forward_fsyncs"] and "$" not in line["forward_fsyncs"]
