"""Seeded, self-checking exercises: §11.12 (Durable Execution) 1 to 9, and the Failure Recovery chapter's.

Ids: ``11.1`` … ``11.9`` for chapter 11 (modules ``ex11_N``); for the Failure Recovery chapter
``nm0.1`` … ``nm0.5`` (its Napkin Math blocks, modules ``nm0_N``) and ``ex0.1``, ``ex0.2`` (its
exercises, modules ``ex0_N``), registered as they are built. Each exercise module offers ``DEFAULTS`` (the papermill
parameters of its notebook), ``solve(params)`` (every quantity the exercise asks for and its
decision), ``generate(seed)`` (a seeded variant of the givens) and ``check(params, answers)`` (grading
with stated tolerances). ``solutions/`` holds each notebook with its worked solution; ``exercises/``
is derived from it by :mod:`kernel_lib.course.strip`. A notebook's grading cell calls :func:`submit`, which
prints the report and records the answers in the notebook; :mod:`kernel_lib.course.exercises.grading`
reads them back (or runs the notebook) to grade a class. The CLI is ``python -m kernel_lib exercise``.
"""

from __future__ import annotations

import re
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
import kernel_lib.course.exercises.nm0_1 as nm0_1
from kernel_lib.course.exercises._common import accept_readings, format_report, redact, submit

EXERCISES: dict[str, ModuleType] = {
    "11.1": ex11_1, "11.2": ex11_2, "11.3": ex11_3, "11.4": ex11_4, "11.5": ex11_5, "11.6": ex11_6, "11.7": ex11_7,
    "11.8": ex11_8, "11.9": ex11_9,
    "nm0.1": nm0_1,
}

__all__ = ["EXERCISES", "get", "canonical_id", "notebook_name", "format_report", "submit", "redact", "accept_readings",
           "ex11_1", "ex11_2", "ex11_3", "ex11_4", "ex11_5", "ex11_6", "ex11_7", "ex11_8", "ex11_9", "nm0_1"]


#: The id forms of the Failure Recovery chapter (a Napkin Math block or an exercise of chapter 0).
_CHAPTER0 = re.compile(r"(nm|ex)\s*0+[._](\d+)")
#: The id forms of chapter 11: ``11.N``, ``N``, ``11_N``, ``ex11_N``, ``ex11.N``.
_CHAPTER11 = re.compile(r"(?:ex)?\s*(?:11[._])?(\d+)")


def canonical_id(exercise_id: object) -> str | None:
    """The registry key an id names (``"11.4"``, ``"nm0.1"``), or None when it has none of the
    accepted forms. Case, surrounding blanks and ``_`` for ``.`` do not matter: ``NM0.1``,
    ``nm0_1`` and ``nm0.1`` are one id; ``4``, ``11_4`` and ``ex11_4`` are ``11.4``."""
    key = str(exercise_id).strip().lower()
    m = _CHAPTER0.fullmatch(key)
    if m:
        return f"{m.group(1)}0.{int(m.group(2))}"
    m = _CHAPTER11.fullmatch(key)
    if m:
        return f"11.{int(m.group(1))}"
    return None


def get(exercise_id: str) -> ModuleType:
    """The module of an exercise: ``11.N`` (also ``N``, ``11_N``, ``ex11_N``), or of the Failure
    Recovery chapter ``nm0.N`` / ``ex0.N`` (also upper case, and ``_`` for ``.``).

    Raises:
        ConfigError: the id names no registered exercise; the message lists the available ids.
    """
    key = canonical_id(exercise_id)
    if key not in EXERCISES:
        raise ConfigError(f"unknown exercise {exercise_id!r}; available: {', '.join(EXERCISES)}")
    return EXERCISES[key]


def notebook_name(exercise_id: str) -> str:
    """The file name of an exercise's notebook in ``solutions/`` and ``exercises/`` (its module's
    name: ``ex11_4.ipynb``, ``nm0_1.ipynb``). Raises ConfigError for an unknown id."""
    return get(exercise_id).__name__.rsplit(".", 1)[-1] + ".ipynb"
