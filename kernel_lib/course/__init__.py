"""``course``: what the course adds on top of the kernel.

* :mod:`.exercises` — the §11.12 exercises: seeded generators, solvers, checkers;
* :mod:`.strip` — deriving student copies in ``exercises/`` from ``solutions/``;
* :mod:`.scratch` — the notebooks' scratch folders: one disk policy for every figure labelled
  "measured" (outside the checkout, on a named filesystem, tmpfs said so);
* :mod:`.lab` — the working copy ``make lab`` opens (``lab/course``), so the tracked notebooks stay clean;
* :mod:`.chapters` — the chapters read in place from ``../shared/chapters`` and rendered as Markdown views;
* :mod:`.notebook_links` — each notebook's marked cell of links to the chapter sections it teaches.
* :mod:`.fr_fallacies` — notebook FR.6's runs of the Failure Recovery fallacies and pitfalls as tables.

May import: every layer except ``cli``.
"""

from kernel_lib._support.lazy import lazy_exports  # noqa: E402

# Loaded on first use: the exercises import sympy and nbformat.
__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "kernel_lib.course.scratch": ("ScratchArea", "ScratchDir", "scratch_dir",),
    "kernel_lib.course.strip": ("strip_notebook", "sync",),
})
