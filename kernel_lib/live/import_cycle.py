"""The chapter's repair spin loop as real test runs (Failure Recovery, "The anti-spin invariant",
the observable trace of an agent repair spin loop: ImportError → AttributeError → TypeError →
ImportError).

:func:`import_cycle_trace` writes a small failing repository (a stand-in ``orm`` package without
``AsyncSession``, a module ``app.py`` and one test importing it), applies the four patches a
spinning agent makes, one per iteration, each in a folder of its own, and runs the real
``python -m pytest`` after each; it returns the four failed runs' output. Iteration 4 reverts to
iteration 1's import (with other line numbers, in another folder): the same fault, re-observed
with different noise, which σ must see as equal.

Real processes: one ``python -m pytest`` per iteration (about a second each). Raises
:class:`RuntimeError` if a run unexpectedly passes or pytest cannot be started.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

__all__ = ["ORM_SOURCE", "PATCHES", "TEST_SOURCE", "import_cycle_trace"]

#: The stand-in ``orm`` package: it has ``Session`` but no ``AsyncSession``.
ORM_SOURCE = "class Session:\n    pass\n"

#: The module under test after each agent patch (iteration → source).
PATCHES: dict[int, str] = {
    1: "from orm import AsyncSession\n\nAsyncSession()\n",
    2: ("class AsyncSession:\n    pass\n\nsession = AsyncSession()\n\n\n"
        "engine = session.sync_engine\n"),
    3: ("class AsyncSession:\n    sync_engine = None\n\nsession = AsyncSession()\n"
        "engine = session.sync_engine if hasattr(session, 'sync_engine') else None\nrange(engine)\n"),
    4: "\n\n\n# cyclical regression: back to the first import\nfrom orm import AsyncSession\n\nAsyncSession()\n",
}

#: The validation the agent's patches must pass.
TEST_SOURCE = "def test_app_imports():\n    import app  # noqa: F401\n"


def _run(folder: Path, source: str, timeout_s: float) -> str:
    (folder / "tests").mkdir(parents=True)
    (folder / "orm.py").write_text(ORM_SOURCE)
    (folder / "app.py").write_text(source)
    (folder / "tests" / "test_app.py").write_text(TEST_SOURCE)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"   # the iterations need no plugin; loading all costs seconds
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(folder),
                           "-o", "pythonpath=.", "tests"], cwd=folder, capture_output=True, text=True,
                          timeout=timeout_s, env=env)
    if proc.returncode == 0:
        raise RuntimeError(f"the iteration in {folder} passed its test; the trace needs a failure")
    if proc.returncode not in (1, 2):
        raise RuntimeError(f"pytest could not run in {folder} (exit {proc.returncode}): {proc.stderr[-500:]}")
    return proc.stdout + proc.stderr


def import_cycle_trace(workdir: str | os.PathLike[str], *, timeout_s: float = 120.0) -> list[str]:
    """Run the four iterations of the chapter's spin loop under ``workdir`` (created if needed; each
    iteration gets ``workdir/iter<i>/repo``) and return the four pytest outputs, oldest first.

    Shapes: a list of 4 str (pytest's output of each failed run). Raises :class:`RuntimeError`
    when a run passes or pytest fails to start, :class:`subprocess.TimeoutExpired` after
    ``timeout_s`` seconds per run, :class:`FileExistsError` when an iteration folder exists."""
    root = Path(workdir)
    out = []
    for i in (1, 2, 3, 4):
        folder = root / f"iter{i}" / "repo"
        if folder.exists():
            raise FileExistsError(f"{folder} exists; give import_cycle_trace an empty folder")
        out.append(_run(folder, PATCHES[i], timeout_s))
    return out
