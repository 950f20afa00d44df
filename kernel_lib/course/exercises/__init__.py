"""Seeded, self-checking exercises of §11.12 (Durable Execution): 1 to 9.

Each exercise module (``ex11_1`` ... ``ex11_9``) offers ``DEFAULTS`` (the papermill
parameters of its notebook), ``solve(params)`` (every quantity the exercise asks for and its
decision), ``generate(seed)`` (a seeded variant of the givens) and ``check(params, answers)`` (grading
with stated tolerances). ``solutions/`` holds each notebook with its worked solution; ``exercises/``
is derived from it by :mod:`kernel_lib.course.strip`. A notebook's grading cell calls :func:`submit`, which
prints the report and records the answers in the notebook; :mod:`kernel_lib.course.exercises.grading`
reads them back (or runs the notebook) to grade a class. The CLI is ``python -m kernel_lib exercise``.
"""

from __future__ import annotations

from types import ModuleType

from kernel_lib.errors import ConfigError
import kernel_lib.course.exercises.ex11_1 as ex11_1
import kernel_lib.course.exercises.ex11_2 as ex11_2
import kernel_lib.course.exercises.ex11_3 as ex11_3
import kernel_lib.course.exercises.ex11_4 as ex11_4
import kernel_lib.course.exercises.ex11_5 as ex11_5
import kernel_lib.course.exercises.ex11_6 as ex11_6
import kernel_lib.course.exercises.ex11_7 as ex11_7
import kernel_lib.course.exercises.ex11_8 as ex11_8
import kernel_lib.course.exercises.ex11_9 as ex11_9
from kernel_lib.course.exercises._common import accept_readings, format_report, redact, submit

EXERCISES: dict[str, ModuleType] = {
    "11.1": ex11_1, "11.2": ex11_2, "11.3": ex11_3, "11.4": ex11_4, "11.5": ex11_5, "11.6": ex11_6, "11.7": ex11_7,
    "11.8": ex11_8, "11.9": ex11_9,
}

__all__ = ["EXERCISES", "get", "format_report", "submit", "redact", "accept_readings", "ex11_1", "ex11_2", "ex11_3",
           "ex11_4", "ex11_5", "ex11_6", "ex11_7", "ex11_8", "ex11_9"]


def get(exercise_id: str) -> ModuleType:
    """The module of exercise ``11.N`` (also accepts ``N``, ``11_N``, ``ex11_N``)."""
    key = str(exercise_id).strip().lower().removeprefix("ex").replace("_", ".")
    if "." not in key:
        key = f"11.{key}"
    if key not in EXERCISES:
        raise ConfigError(f"unknown exercise {exercise_id!r}; available: {', '.join(EXERCISES)}")
    return EXERCISES[key]
