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

import ast
import importlib
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from kernel_lib.errors import ConfigError
from kernel_lib.course.exercises._common import accept_readings, format_report, redact, submit

#: Exercise id -> its module's name in this package, in the order the course lists them.
MODULES: dict[str, str] = {**{f"11.{n}": f"ex11_{n}" for n in range(1, 10)}, "nm0.1": "nm0_1",
                      "nm0.2": "nm0_2", "nm0.3": "nm0_3", "nm0.4": "nm0_4", "nm0.5": "nm0_5",
                      "ex0.1": "ex0_1",
                      "ex0.2": "ex0_2"}


class _Registry(Mapping):
    """``{id: module}`` whose modules are imported when first looked up (``exercise --help``, which
    lists every id and title, imports none of them: :func:`title` reads a module's ``TITLE``
    from its source)."""

    def __getitem__(self, key: str) -> ModuleType:
        return importlib.import_module(f"{__name__}.{MODULES[key]}")

    def __iter__(self) -> Iterator[str]:
        return iter(MODULES)

    def __len__(self) -> int:
        return len(MODULES)

    def __repr__(self) -> str:
        return f"EXERCISES({', '.join(MODULES)})"


EXERCISES: Mapping[str, ModuleType] = _Registry()

__all__ = ["EXERCISES", "MODULES", "get", "canonical_id", "notebook_name", "title", "format_report", "submit",
           "redact", "accept_readings", *MODULES.values()]


def __getattr__(name: str) -> Any:
    """``kernel_lib.course.exercises.ex11_4`` (and ``from ... import nm0_1``), imported on first use."""
    if name in MODULES.values():
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def title(exercise_id: str) -> str:
    """An exercise's ``TITLE``, read from its module's source without importing the module (so a
    help text listing them stays cheap). Raises ConfigError for an unknown id."""
    key = canonical_id(exercise_id)
    if key not in MODULES:
        raise ConfigError(f"unknown exercise {exercise_id!r}; available: {', '.join(MODULES)}")
    source = (Path(__file__).with_name(MODULES[key] + ".py")).read_text(encoding="utf-8")
    for node in ast.parse(source).body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "TITLE" for t in node.targets)
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            return node.value.value
    return get(key).TITLE      # not a plain string constant: ask the module itself


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
    if key not in MODULES:
        raise ConfigError(f"unknown exercise {exercise_id!r}; available: {', '.join(MODULES)}")
    return EXERCISES[key]


def notebook_name(exercise_id: str) -> str:
    """The file name of an exercise's notebook in ``solutions/`` and ``exercises/`` (its module's
    name: ``ex11_4.ipynb``, ``nm0_1.ipynb``). Raises ConfigError for an unknown id."""
    key = canonical_id(exercise_id)
    if key not in MODULES:
        raise ConfigError(f"unknown exercise {exercise_id!r}; available: {', '.join(MODULES)}")
    return MODULES[key] + ".ipynb"
