"""``course``: what the course adds on top of the kernel.

* :mod:`.exercises` — the §11.12 exercises: seeded generators, solvers, checkers;
* :mod:`.strip` — deriving student copies in ``exercises/`` from ``solutions/``.

May import: every layer except ``cli``.
"""
