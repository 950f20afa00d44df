"""Grade students' exercise notebooks: ``python -m kernel_lib exercise grade NOTEBOOK... [--seed S] --json``.

A notebook of ``exercises/`` collects the student's results in a dict ``answers`` and ends in its
grading cell (tagged ``grading``, cell id ``check``), which calls
:func:`kernel_lib.course.exercises.submit`: that prints the student's report and displays the
answers as a :data:`~kernel_lib.course.exercises._common.RECORD_MIME` output, so a saved notebook
carries them. Grading a submission:

1. read the notebook (bad input, :class:`~kernel_lib.errors.ConfigError`: no such file, not a
   notebook, no grading cell, no exercise named in it);
2. fix the givens: the seeded variant ``generate(seed)``, or the exercise's defaults;
3. take the answers recorded in the grading cell's output when they were computed for exactly those
   givens; otherwise (or with ``execute=True``) run the notebook with papermill, the givens injected
   as parameters, in a scratch copy (the student's file is never written), plus one appended cell
   that records ``params`` and ``answers`` from the kernel. A cell that raises is bad input too;
4. grade the answers with the exercise's ``check`` against the givens: one point per graded
   quantity, each ``correct``, ``alternative`` (it matches a documented alternative reading, which
   the report names), ``wrong`` or ``unanswered``. Expected values are left out unless ``reveal``.

The report shape follows what nbgrader and otter-grader give an instructor (per-question results,
points, a total per submission, a class summary) without their course database or containers: a
seeded exercise is graded by recomputing its solution from the givens, not by hidden test cells.
"""

from __future__ import annotations

import glob
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from kernel_lib.errors import ConfigError
from kernel_lib.course.exercises import EXERCISES, accept_readings, canonical_id, get, redact
from kernel_lib.course.exercises._common import RECORD_MIME, jsonable

GRADING_TAG = "grading"
GRADING_CELL_ID = "check"
COLLECT_TAG = "kernel-lib-collect"
#: an exercise module named in a notebook's code: ``ex11_N`` (§11.12), ``nm0_N`` or ``ex0_N`` (Failure Recovery)
_EXERCISE_IMPORT = re.compile(r"\b(ex11|nm0|ex0)_(\d+)\b")
_COLLECT_SOURCE = ("from kernel_lib.course.exercises._common import collect_answers as _kernel_lib_collect\n"
                   "_kernel_lib_collect({exercise!r}, globals())")


def read_submission(path: str | Path) -> Any:
    """The notebook at ``path`` (an ``nbformat`` node, version 4). Raises ConfigError when the file
    is missing, is a directory or is not a Jupyter notebook."""
    import nbformat

    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: no such file")
    if not path.is_file():
        raise ConfigError(f"{path}: not a file (give notebooks, a folder of them or a glob)")
    try:
        nb = nbformat.reads(path.read_text(encoding="utf-8"), as_version=4)
        cells = nb["cells"]
    except Exception as exc:   # nbformat raises many kinds (NotJSONError, KeyError, ValidationError ...)
        raise ConfigError(f"{path}: not a Jupyter notebook ({_first_line(exc) or type(exc).__name__})") from None
    if not isinstance(cells, list):
        raise ConfigError(f"{path}: not a Jupyter notebook (no list of cells)")
    for i, cell in enumerate(cells):   # nbformat.reads only logs a schema violation: check what grading reads
        if not isinstance(cell, dict) or not isinstance(cell.get("source", ""), str):
            raise ConfigError(f"{path}: not a Jupyter notebook (cell {i} is not a cell with a text source)")
        if cell.get("cell_type") == "code" and not isinstance(cell.get("outputs", []), list):
            raise ConfigError(f"{path}: not a Jupyter notebook (code cell {i} has no list of outputs)")
    return nb


def grading_cell(nb: Any, path: str | Path = "notebook") -> Any:
    """The notebook's grading cell (the answer cell): tagged ``grading``, or with cell id ``check``.
    Raises ConfigError when there is none."""
    code = [c for c in nb.cells if c.get("cell_type") == "code"]
    for cell in code:
        if GRADING_TAG in cell.get("metadata", {}).get("tags", []):
            return cell
    for cell in code:
        if cell.get("id") == GRADING_CELL_ID:
            return cell
    raise ConfigError(f"{path}: no answer cell (no code cell tagged {GRADING_TAG!r}): is it one of the notebooks "
                      "in exercises/?")


def exercise_of(nb: Any, path: str | Path = "notebook") -> Any:
    """The exercise module a notebook works on, from its ``import ... ex11_N`` (or ``nm0_N``,
    ``ex0_N``) line. ConfigError if it names none, or several (a notebook is graded as one exercise)."""
    found = (canonical_id(f"{m.group(1)}_{m.group(2)}") for cell in nb.cells if cell.get("cell_type") == "code"
             for m in _EXERCISE_IMPORT.finditer(cell.get("source", "")))
    named = list(dict.fromkeys(k for k in found if k in EXERCISES))
    if not named:
        raise ConfigError(f"{path}: names no exercise (no `from kernel_lib.course.exercises import ex11_N` "
                          "or `... import nm0_N`)")
    if len(named) > 1:
        raise ConfigError(f"{path}: names several exercises ({', '.join(named)}); a notebook is graded as one "
                          "exercise, so keep the import of the one it answers")
    return get(named[0])


def stored_record(cell: Any) -> dict[str, Any] | None:
    """The last answers record in a cell's outputs, or None."""
    found = None
    for out in cell.get("outputs", []):
        data = out.get("data", {}) if out.get("output_type") in ("display_data", "execute_result") else {}
        if isinstance(data.get(RECORD_MIME), Mapping):
            found = dict(data[RECORD_MIME])
    return found


def run_submission(nb: Any, path: Path, exercise: str, params: Mapping[str, Any], *,
                   kernel_name: str = "python3", timeout_s: float = 600.0) -> dict[str, Any]:
    """Run a copy of ``nb`` with papermill (``params`` injected, working directory the notebook's
    folder) and return the answers record its appended collector cell displays.

    Raises ConfigError when papermill is missing, a cell raises (the message names the cell and the
    exception), or the notebook leaves no ``answers`` dict.
    """
    import copy

    import nbformat
    try:
        import papermill as pm
        from papermill.exceptions import PapermillExecutionError
    except ImportError:
        raise ConfigError("running a notebook needs papermill (pip install 'durable-agents-lab[course]')") from None
    run = copy.deepcopy(nb)
    collector = nbformat.v4.new_code_cell(_COLLECT_SOURCE.format(exercise=exercise))
    collector.metadata["tags"] = [COLLECT_TAG]
    run.cells.append(collector)
    # no kernel chatter on stderr (start-up warnings, "KeyboardInterrupt caught" as papermill stops it):
    # what went wrong reaches the user as one error line from the execution result
    quiet = ["--IPKernelApp.log_level=CRITICAL"] if kernel_name.startswith("python") else []
    try:
        done = pm.execute_notebook(run, None, parameters=dict(params), cwd=str(path.resolve().parent),
                                   kernel_name=kernel_name, progress_bar=False, request_save_on_cell_execute=False,
                                   execution_timeout=timeout_s,
                                   extra_arguments=quiet)
    except PapermillExecutionError as exc:
        where = f"cell [{exc.exec_count}]" if exc.exec_count else f"cell {exc.cell_index}"
        if exc.source == collector.source:   # not its index: papermill inserts a cell of injected parameters
            where = "collecting the answers"
        raise ConfigError(f"{path}: {where} raised {exc.ename}: {_first_line(exc.evalue)}") from None
    except Exception as exc:   # no such kernel, the kernel died, a timeout
        raise ConfigError(f"{path}: could not run it ({type(exc).__name__}: {_first_line(exc)})") from None
    record = stored_record(done.cells[-1])
    if record is None:
        raise ConfigError(f"{path}: the run recorded no answers")
    if "error" in record:
        raise ConfigError(f"{path}: {record['error']}")
    return record


def grade_notebook(path: str | Path, seed: int | None = None, *, execute: bool | None = None, reveal: bool = False,
                   accept: bool = False, kernel_name: str = "python3", timeout_s: float = 600.0) -> dict[str, Any]:
    """Grade one submitted notebook (see the module docstring for the steps).

    ``execute``: None (default) runs the notebook only when it holds no answers recorded for the
    givens; True always runs it; False never does. ``accept``: an alternative reading's answer
    counts as right. Returns ``{"notebook", "exercise", "title", "seed", "params", "answers_from",
    "all_ok", "answered", "score", "max_score", "quantities", "unknown_answers"[, "note"]}`` where
    each quantity is ``{given, ok, status, points, max_points, tolerance[, reading][, hint][, expected]}``
    (``expected`` only with ``reveal``). Raises ConfigError on bad input.
    """
    path = Path(path)
    nb = read_submission(path)
    cell = grading_cell(nb, path)
    mod = exercise_of(nb, path)
    params = mod.validate_params(mod.generate(seed) if seed is not None else None)
    record = None if execute else stored_record(cell)
    source = "stored outputs"
    if record is not None and (record.get("exercise") != mod.EXERCISE or record.get("params") != jsonable(params)):
        record = None
    if record is None:
        if execute is False:
            raise ConfigError(f"{path}: holds no answers recorded for exercise {mod.EXERCISE} with these givens "
                              "(run it, or drop --no-execute)")
        record = run_submission(nb, path, mod.EXERCISE, params, kernel_name=kernel_name, timeout_s=timeout_s)
        source = "executed"
    report = mod.check(params, record.get("answers") or {})
    if accept:
        report = accept_readings(report)
    out: dict[str, Any] = {"notebook": str(path), "exercise": mod.EXERCISE, "title": mod.TITLE, "seed": seed,
                           "params": params, "answers_from": source, **redact(report, reveal)}
    if record.get("params") != jsonable(params):
        out["note"] = "the notebook computed its answers from other givens than the ones graded"
    return out


def expand(patterns: Sequence[str]) -> list[str]:
    """Notebook paths from command-line arguments: a file, a folder (its ``*.ipynb``) or a glob
    (expanded here when the shell did not). Unmatched arguments are kept, to be reported as missing."""
    out: list[str] = []
    for arg in patterns:
        p = Path(arg)
        if p.is_dir():
            found = sorted(str(q) for q in p.glob("*.ipynb"))
            out += found or [arg]
        elif not p.exists() and any(ch in arg for ch in "*?["):
            out += sorted(glob.glob(arg)) or [arg]
        else:
            out.append(arg)
    once: dict[str, str] = {}       # ./a.ipynb and a.ipynb are one submission, graded once
    for path in out:
        key = str(Path(path).resolve()) if Path(path).exists() else path
        once.setdefault(key, path)
    return list(once.values())


def grade_class(patterns: Sequence[str], seed: int | None = None, **kw: Any) -> dict[str, Any]:
    """Grade every notebook the arguments name (see :func:`expand`); a bad one is reported, not fatal.

    Returns ``{"submissions": [report or {"notebook", "error"}], "summary": {"notebooks", "all_right",
    "wrong", "errors", "score", "max_score"}}``.
    """
    subs: list[dict[str, Any]] = []
    for path in expand(patterns):
        try:
            subs.append(grade_notebook(path, seed, **kw))
        except ConfigError as exc:
            subs.append({"notebook": path, "error": str(exc)})
    graded = [s for s in subs if "error" not in s]
    return {"submissions": subs,
            "summary": {"notebooks": len(subs), "all_right": sum(s["all_ok"] for s in graded),
                        "wrong": sum(not s["all_ok"] for s in graded), "errors": len(subs) - len(graded),
                        "score": sum(s["score"] for s in graded), "max_score": sum(s["max_score"] for s in graded)}}


def _first_line(x: Any) -> str:
    lines = [ln.strip() for ln in str(x).strip().splitlines() if ln.strip()]
    return lines[0] if lines else ""
