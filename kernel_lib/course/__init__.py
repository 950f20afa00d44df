"""``course``: what the course adds on top of the kernel.

* :mod:`.exercises` — the §11.12 exercises: seeded generators, solvers, checkers;
* :mod:`.strip` — deriving student copies in ``exercises/`` from ``solutions/``;
* :mod:`.scratch` — the notebooks' scratch folders: one disk policy for every figure labelled
  "measured" (outside the checkout, on a named filesystem, tmpfs said so).

May import: every layer except ``cli``.
"""
