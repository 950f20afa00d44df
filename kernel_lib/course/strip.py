"""Derive the student notebooks in ``exercises/`` from their single source in ``solutions/``.

Solution regions are removed:

* a cell tagged ``solution`` becomes a placeholder (code: ``# your answer here``; Markdown:
  ``*Your answer here.*``);
* in code cells, the lines from ``# BEGIN SOLUTION`` to ``# END SOLUTION`` (inclusive) become one
  ``# your answer here`` line at the marker's indentation; in Markdown cells the same holds for
  ``<!-- BEGIN SOLUTION -->`` / ``<!-- END SOLUTION -->``;
* a region opened with ``# BEGIN SOLUTION NO PROMPT`` (Markdown: ``<!-- BEGIN SOLUTION NO PROMPT -->``)
  is removed with no placeholder: the worked solution's own checks in a grading cell, where a
  student has nothing to write (otter-grader's marker for the same thing).

Every output, execution count and run-time metadata is dropped, and a note naming the source is
put first, so the result is byte-for-byte a function of the solution notebook: ``--check`` (and
``tests/test_exercises.py``) fails when the committed exercises drift from their solutions.

Usage: ``python -m kernel_lib exercise strip [--check]``.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

from typing import TYPE_CHECKING

from kernel_lib.errors import ConfigError

if TYPE_CHECKING:          # nbformat is imported where it is used: it costs ~1.5 s (jsonschema) at start-up
    import nbformat

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS_DIR = ROOT / "solutions"
EXERCISES_DIR = ROOT / "exercises"

CODE_PLACEHOLDER = "# your answer here"
MARKDOWN_PLACEHOLDER = "*Your answer here.*"
_MARKERS = {   # group 1: indentation; group 2: " NO PROMPT" (remove the region without a placeholder)
    "code": (re.compile(r"^(\s*)#\s*BEGIN SOLUTION(\s+NO PROMPT)?\s*$"), re.compile(r"^\s*#\s*END SOLUTION\s*$"),
             CODE_PLACEHOLDER),
    "markdown": (re.compile(r"^(\s*)<!--\s*BEGIN SOLUTION(\s+NO PROMPT)?\s*-->\s*$"),
                 re.compile(r"^\s*<!--\s*END SOLUTION\s*-->\s*$"), MARKDOWN_PLACEHOLDER),
}
_VOLATILE_CELL_METADATA = ("execution", "papermill", "collapsed", "scrolled", "jupyter")


def strip_source(source: str, cell_type: str = "code", where: str = "cell") -> str:
    """``source`` with every solution region replaced by one placeholder line (a ``NO PROMPT``
    region by nothing).

    Raises ConfigError for an unbalanced or nested marker.
    """
    if cell_type not in _MARKERS:
        return source
    begin, end, placeholder = _MARKERS[cell_type]
    out, inside = [], False
    for n, line in enumerate(source.split("\n"), start=1):
        m = begin.match(line)
        if m:
            if inside:
                raise ConfigError(f"{where}: line {n}: BEGIN SOLUTION inside a solution region")
            inside = True
            if not m.group(2):
                out.append(m.group(1) + placeholder)
        elif end.match(line):
            if not inside:
                raise ConfigError(f"{where}: line {n}: END SOLUTION without BEGIN SOLUTION")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ConfigError(f"{where}: BEGIN SOLUTION is never closed")
    return "\n".join(out)


def strip_notebook(nb: "nbformat.NotebookNode", source_name: str = "the solution notebook") -> "nbformat.NotebookNode":
    """A student copy of a solution notebook (see the module docstring)."""
    nb = copy.deepcopy(nb)
    cells = []
    for i, cell in enumerate(nb.cells):
        where = f"{source_name} cell {i}"
        tags = list(cell.get("metadata", {}).get("tags", []))
        if "solution" in tags:
            tags.remove("solution")
            cell.source = CODE_PLACEHOLDER if cell.cell_type == "code" else MARKDOWN_PLACEHOLDER
        else:
            cell.source = strip_source(cell.source, cell.cell_type, where)
        for key in _VOLATILE_CELL_METADATA:
            cell.metadata.pop(key, None)
        if tags:
            cell.metadata["tags"] = tags
        else:
            cell.metadata.pop("tags", None)
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cells.append(cell)
    import nbformat

    note = nbformat.v4.new_markdown_cell(
        f"> **Your copy of the exercise**: fill in the cells marked for your answers and run the notebook; "
        "the last cells grade what you wrote. You may use any function of `kernel_lib` (for instance "
        "`kernel_lib.cadence` for the checkpoint exercises) or plain arithmetic.\n>\n"
        f"> *(For maintainers: this file is generated from `solutions/{source_name}` by "
        "`python -m kernel_lib exercise strip`; change the solution notebook, not this file.)*")
    note.id = "derived-from-solution"
    nb.cells = [note] + cells
    for key in ("papermill", "widgets"):
        nb.metadata.pop(key, None)
    return nb


def render(solution_path: Path) -> str:
    """The exact text of the exercise notebook derived from ``solution_path``."""
    solution_path = Path(solution_path)
    import nbformat

    nb = nbformat.read(solution_path, as_version=4)
    text = nbformat.writes(strip_notebook(nb, solution_path.name))
    return text if text.endswith("\n") else text + "\n"


def sync(solutions: Path = SOLUTIONS_DIR, exercises: Path = EXERCISES_DIR, check: bool = False) -> list[str]:
    """Write (or with ``check``, only compare) every derived notebook.

    Returns the problems found in check mode: exercise notebooks missing, drifted from their
    solution, or left over without one. In write mode returns the files written.
    """
    solutions, exercises = Path(solutions), Path(exercises)
    sources = sorted(solutions.glob("*.ipynb"))
    if not sources:
        raise ConfigError(f"no solution notebooks in {solutions}")
    out = []
    for src in sources:
        dst = exercises / src.name
        text = render(src)
        if check:
            if not dst.exists():
                out.append(f"{dst}: missing (derive it with `python -m kernel_lib exercise strip`)")
            elif dst.read_text() != text:
                out.append(f"{dst}: differs from the stripped {src} (edit the solution, then re-derive)")
        else:
            exercises.mkdir(parents=True, exist_ok=True)
            if not dst.exists() or dst.read_text() != text:
                dst.write_text(text)
            out.append(str(dst))
    if check:
        names = {s.name for s in sources}
        out += [f"{p}: has no solution notebook in {solutions}" for p in sorted(exercises.glob("*.ipynb"))
                if p.name not in names]
    return out
