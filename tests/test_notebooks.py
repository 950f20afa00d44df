"""Every notebook runs top to bottom headless (papermill), as CI and instructors run them."""

from __future__ import annotations

from pathlib import Path

import nbformat
import papermill as pm
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_headless(path, tmp_path):
    out = tmp_path / path.name
    pm.execute_notebook(str(path), str(out), cwd=str(path.parent), kernel_name="python3", progress_bar=False)
    nb = nbformat.read(out, as_version=4)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors


def test_committed_notebooks_carry_no_error_outputs():
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        assert not any(o.output_type == "error" for c in nb.cells if c.cell_type == "code"
                       for o in c.get("outputs", [])), path.name
