"""Shared machinery of the seeded exercises: parameter specs, validation, grading.

Each exercise module declares ``PARAMS`` (a tuple of :class:`Param`), ``DEFAULTS`` (their
papermill defaults) and ``GRADED`` (the quantities :func:`grade` compares, each with its
tolerance). Bad parameters raise :class:`kernel_lib.errors.ConfigError`, which the CLI prints as
one ``error:`` line with exit code 2.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Mapping

from kernel_lib.errors import ConfigError


@dataclass(frozen=True)
class Param:
    """One given of an exercise: papermill name, type, admissible range, meaning."""

    name: str
    kind: type            # int, float or list (a list of floats)
    lo: float
    hi: float
    doc: str
    min_len: int = 0      # lists only
    max_len: int = 0

    def coerce(self, value: Any) -> Any:
        """The value as this parameter's type, range-checked; ConfigError otherwise."""
        if self.kind is list:
            if isinstance(value, tuple):
                value = list(value)
            if not isinstance(value, list):
                raise ConfigError(f"{self.name} must be a list of numbers, got {value!r}")
            if not self.min_len <= len(value) <= self.max_len:
                raise ConfigError(f"{self.name} must hold {self.min_len} to {self.max_len} numbers, got {len(value)}")
            return [_number(self, v, float) for v in value]
        return _number(self, value, self.kind)

    def parse(self, text: str) -> Any:
        """Parse a command-line value (``--param name=value``): JSON, or comma-separated for lists."""
        try:
            value = json.loads(text)
        except ValueError:
            if self.kind is list:
                try:
                    value = [float(t) for t in text.strip("[]() ").split(",") if t.strip()]
                except ValueError:
                    raise ConfigError(f"{self.name} must be a list of numbers like 1.5,2.5,6.5, got {text!r}") from None
            else:
                raise ConfigError(f"{self.name} must be {'an integer' if self.kind is int else 'a number'}, "
                                  f"got {text!r}") from None
        return self.coerce(value)


def _number(p: Param, v: Any, kind: type) -> int | float:
    what = "an integer" if kind is int else "a number"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ConfigError(f"{p.name} must be {what}, got {v!r}")
    if not math.isfinite(v):
        raise ConfigError(f"{p.name} must be finite, got {v!r}")
    if kind is int:
        if isinstance(v, float):
            if not v.is_integer():
                raise ConfigError(f"{p.name} must be an integer, got {v!r}")
            v = int(v)
    else:
        v = float(v)
    if not p.lo <= v <= p.hi:
        raise ConfigError(f"{p.name} must be between {p.lo:g} and {p.hi:g}, got {v!r}")
    return v


def validate(params_spec: tuple[Param, ...], defaults: Mapping[str, Any],
             params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Defaults overridden by ``params``, every value coerced and range-checked.

    Unknown names, wrong types and out-of-range values raise ConfigError.
    """
    by_name = {p.name: p for p in params_spec}
    params = dict(params or {})
    unknown = sorted(set(params) - set(by_name))
    if unknown:
        raise ConfigError(f"unknown parameter {unknown[0]!r}; known: {', '.join(by_name)}")
    merged = {**defaults, **params}
    return {name: by_name[name].coerce(merged[name]) for name in by_name}


def exact(x: float | int) -> Fraction:
    """The decimal a person typed (2.5, 0.02) as an exact fraction, so ceilings are not off by one ulp."""
    return Fraction(repr(float(x))) if isinstance(x, float) else Fraction(x)


@dataclass(frozen=True)
class Tol:
    """How a quantity is graded: floats within rel_tol or abs_tol; ints, bools, strings exactly."""

    rel: float = 0.01
    abs: float = 0.0
    unit: str = ""

    def describe(self, expected: Any) -> str:
        if isinstance(expected, bool) or not isinstance(expected, float):
            return "exact"
        parts = [f"±{self.rel:.0%} relative"] if self.rel else []
        if self.abs:
            parts.append(f"±{self.abs:g} absolute")
        return " or ".join(parts)


def _matches(expected: Any, given: Any, tol: Tol) -> bool:
    if given is None:
        return False
    if isinstance(expected, bool):
        return isinstance(given, bool) and given == expected
    if isinstance(expected, str):
        return isinstance(given, str) and given.strip().casefold() == expected.casefold()
    if isinstance(expected, list):
        return isinstance(given, (list, tuple)) and sorted(given) == sorted(expected)
    if isinstance(given, bool) or not isinstance(given, (int, float)) or not math.isfinite(given):
        return False
    if isinstance(expected, int):
        return given == expected
    return math.isclose(given, expected, rel_tol=tol.rel, abs_tol=tol.abs)


def grade(exercise: str, expected: Mapping[str, Any], answers: Mapping[str, Any],
          graded: Mapping[str, Tol]) -> dict[str, Any]:
    """Compare ``answers`` with ``expected`` on every graded quantity.

    Returns ``{"exercise", "all_ok", "answered", "quantities": {name: {expected, given, ok,
    tolerance}}, "unknown_answers"}``. A missing answer is not ok; an answer under a name the
    exercise does not grade is listed in ``unknown_answers`` and makes ``all_ok`` false (it is
    usually a misspelt quantity).
    """
    if not isinstance(answers, Mapping):
        raise ConfigError(f"answers must be a JSON object of quantity -> value, got {type(answers).__name__}")
    quantities = {}
    for name, tol in graded.items():
        exp = expected[name]
        given = answers.get(name)
        quantities[name] = {"expected": exp, "given": given, "ok": _matches(exp, given, tol),
                            "tolerance": tol.describe(exp)}
    unknown = sorted(set(answers) - set(graded))
    return {"exercise": exercise,
            "all_ok": all(q["ok"] for q in quantities.values()) and not unknown,
            "answered": sum(answers.get(n) is not None for n in graded),
            "quantities": quantities,
            "unknown_answers": unknown}


def format_report(report: Mapping[str, Any], reveal: bool = False) -> str:
    """A grading report as a small text table (what notebooks and the CLI print).

    Expected values are shown only with ``reveal`` (an instructor's view), so printing a report in
    the student notebook does not hand out the answers.
    """
    qs = report["quantities"]
    w = max(len(n) for n in qs)
    lines = [f"§11.12 exercise {report['exercise']}: {report['answered']} of {len(qs)} quantities answered, "
             f"{sum(q['ok'] for q in qs.values())} correct"]
    for name, q in qs.items():
        mark = "ok " if q["ok"] else ("-- " if q["given"] is None else "NO ")
        given = "(unanswered)" if q["given"] is None else _fmt(q["given"])
        exp = f" expected {_fmt(q['expected']):<14}" if reveal else ""
        hint = (q.get("hint") or _hint(q["expected"], q["given"])) if not q["ok"] else ""
        lines.append(f"  {mark}{name:<{w}}  your answer {given:<14}{exp} [{q['tolerance']}]{hint}")
    for name in report["unknown_answers"]:
        lines.append(f"  ?? {name}: not a quantity of this exercise (misspelt?)")
    return "\n".join(lines)


def _hint(expected: Any, given: Any) -> str:
    """A word on an answer of the wrong kind (a number typed as text, a yes/no as a word)."""
    if given is None or type(given) is type(expected):
        return ""
    if isinstance(expected, (int, float)) and not isinstance(expected, bool) and isinstance(given, str):
        try:
            float(given)
        except ValueError:
            return "  (answer with a number)"
        return "  (a number written as text: drop the quotes)"
    if isinstance(expected, bool) and not isinstance(given, bool):
        return "  (answer True or False)"
    return ""


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return json.dumps(v) if not isinstance(v, str) else v


def jsonable(x: Any) -> Any:
    """Plain JSON types (floats rounded to 12 significant digits to keep output stable)."""
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, Fraction):
        x = float(x)
    if isinstance(x, float):
        return float(f"{x:.12g}")
    return x
