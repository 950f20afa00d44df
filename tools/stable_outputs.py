#!/usr/bin/env python3
"""Refresh (or check) the stable outputs stored in the course notebooks.

The committed notebooks keep outputs only in code cells tagged ``nbval-check-output``: the cells whose
output is fully determined by the parameters cell (seed, recorded dataset, fixed givens). nbval's lax
mode (``pytest --nbval-lax``) re-runs every cell and compares exactly those tagged cells with what is
stored; every other code cell is stored without outputs and with ``execution_count`` None, so nbval
only checks that it runs.

This script executes each notebook once, top to bottom, with its default parameters (kernel
``python3``, working directory = the notebook's folder, as papermill and nbval use), then writes it
back: tagged cells get the fresh outputs and execution counts, all other code cells are cleared. Cell
sources and notebook metadata are never changed, and a second run writes the same bytes.

    python tools/stable_outputs.py notebooks/*.ipynb            # refresh
    python tools/stable_outputs.py --check notebooks/*.ipynb    # exit 1 if a refresh would change them

Exit status: 0 on success (and, with --check, when nothing would change); 1 when --check finds a
difference; 2 on usage errors or when a notebook fails to execute.
"""

from __future__ import annotations

import argparse
import copy
import difflib
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

TAG = "nbval-check-output"


def is_tagged(cell) -> bool:
    """True for a code cell carrying the nbval-check-output tag."""
    return cell.cell_type == "code" and TAG in cell.get("metadata", {}).get("tags", [])


def execute(nb, notebook_dir: Path, *, kernel_name: str, timeout_s: float):
    """Run a deep copy of ``nb`` in ``notebook_dir``; return the executed copy.

    The copy absorbs everything nbclient adds (language_info, widget state, timings), so none of it
    reaches the stored notebook. Raises CellExecutionError if a cell raises.
    """
    run = copy.deepcopy(nb)
    client = NotebookClient(run, timeout=timeout_s, kernel_name=kernel_name, record_timing=False,
                            store_widget_state=False, resources={"metadata": {"path": str(notebook_dir)}})
    client.execute()
    return run


def _coalesced(outputs):
    """``outputs`` with consecutive stream outputs of one stream joined into one (as nbval compares
    them), so where the kernel happened to flush does not change the stored bytes."""
    out = []
    for o in outputs:
        if (o.get("output_type") == "stream" and out and out[-1].get("output_type") == "stream"
                and out[-1].get("name") == o.get("name")):
            text = out[-1]["text"]
            out[-1]["text"] = (text if isinstance(text, str) else "".join(text)) + (
                o["text"] if isinstance(o["text"], str) else "".join(o["text"]))
        else:
            out.append(o)
    return out


def stable_outputs(nb, executed):
    """Return a copy of ``nb`` whose tagged cells hold the outputs of ``executed`` and whose other
    code cells hold none. Cells are matched by position; their sources must agree."""
    out = copy.deepcopy(nb)
    if len(out.cells) != len(executed.cells):
        raise RuntimeError("the executed notebook has a different number of cells")
    for cell, ran in zip(out.cells, executed.cells):
        if cell.cell_type != "code":
            continue
        if cell.source != ran.source:
            raise RuntimeError(f"cell {cell.get('id')} changed its source while executing")
        if is_tagged(cell):
            cell.outputs = _coalesced(copy.deepcopy(ran.outputs))
            cell.execution_count = ran.execution_count
        else:
            cell.outputs = []
            cell.execution_count = None
    return out


def describe_changes(path: Path, old_text: str, new_text: str, limit: int = 60) -> str:
    diff = list(difflib.unified_diff(old_text.splitlines(), new_text.splitlines(), f"{path} (stored)",
                                     f"{path} (refreshed)", lineterm="", n=2))
    if len(diff) > limit:
        diff = diff[:limit] + [f"... ({len(diff) - limit} more diff lines)"]
    return "\n".join(diff)


def process(path: Path, *, check: bool, kernel_name: str, timeout_s: float) -> bool:
    """Refresh or check one notebook. Returns True if the stored file is (now) up to date."""
    old_text = path.read_text(encoding="utf-8")
    nb = nbformat.reads(old_text, as_version=4)
    tagged = sum(is_tagged(c) for c in nb.cells)
    executed = execute(nb, path.resolve().parent, kernel_name=kernel_name, timeout_s=timeout_s)
    refreshed = stable_outputs(nb, executed)
    empty = [c.get("id") for c in refreshed.cells if is_tagged(c) and not c.outputs]
    if empty:
        print(f"warning: {path}: tagged cells without output (nbval cannot check them): {empty}",
              file=sys.stderr)
    new_text = nbformat.writes(refreshed) + "\n"
    if new_text == old_text:
        print(f"{path}: up to date ({tagged} stable cells)")
        return True
    if check:
        print(f"{path}: stored outputs differ from a fresh run ({tagged} stable cells)")
        print(describe_changes(path, old_text, new_text))
        return False
    path.write_text(new_text, encoding="utf-8")
    print(f"{path}: refreshed ({tagged} stable cells)")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="stable_outputs.py",
        description=("Execute notebooks and keep outputs only in cells tagged "
                     f"'{TAG}' (the cells nbval checks in --nbval-lax mode); clear every other code "
                     "cell. Sources and metadata are left alone; running it twice changes nothing."))
    parser.add_argument("notebooks", nargs="+", type=Path, metavar="NOTEBOOK", help="notebook(s) to refresh")
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 if refreshing would change any stored output")
    parser.add_argument("--kernel", default="python3", help="kernel name (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=600.0, metavar="S",
                        help="per-cell timeout in seconds (default: %(default)s)")
    args = parser.parse_args(argv)

    missing = [str(p) for p in args.notebooks if not p.is_file()]
    if missing:
        parser.error(f"no such notebook: {', '.join(missing)}")

    ok = True
    for path in args.notebooks:
        try:
            ok &= process(path, check=args.check, kernel_name=args.kernel, timeout_s=args.timeout)
        except CellExecutionError as exc:
            print(f"{path}: a cell failed, nothing written\n{exc}", file=sys.stderr)
            return 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
