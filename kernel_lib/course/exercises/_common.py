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
        if not isinstance(given, (list, tuple)):
            return False
        try:
            return sorted(given) == sorted(expected)
        except TypeError:           # items that do not order ([1, "a"], dicts): not the expected list
            return False
    if isinstance(given, bool) or not isinstance(given, (int, float)):
        return False
    if isinstance(expected, int):
        return given == expected
    try:
        given = float(given)        # an int too large for a float is no answer within a tolerance
    except OverflowError:
        return False
    return math.isfinite(given) and math.isclose(given, expected, rel_tol=tol.rel, abs_tol=tol.abs)


def alternative_values(alternative: Mapping[str, Any] | None, graded: Mapping[str, Tol],
                       aliases: Mapping[str, tuple[str, str]] | None = None) -> dict[str, list[tuple[str, Any]]]:
    """The documented alternative readings' answer for each graded quantity.

    ``alternative`` is a solution's ``"alternative"`` entry: either ``{reading: {quantity: value}}``
    or a flat ``{key: value}``. A nested quantity counts when it is graded under the same name; other
    keys (``"reading/key"`` for nested ones, ``"key"`` for flat ones) count only through ``aliases``,
    which maps them to ``(reading, graded quantity)``. Returns ``{quantity: [(reading, value), ...]}``.
    """
    aliases = aliases or {}
    out: dict[str, list[tuple[str, Any]]] = {}
    for key, value in (alternative or {}).items():
        if isinstance(value, Mapping):
            for inner, v in value.items():
                path = f"{key}/{inner}"
                reading, name = aliases[path] if path in aliases else (key, inner)
                if name in graded:
                    out.setdefault(name, []).append((reading, v))
        elif key in aliases:
            reading, name = aliases[key]
            out.setdefault(name, []).append((reading, value))
    return out


#: What a graded quantity's ``status`` can be, in a report.
STATUSES = ("correct", "alternative", "wrong", "unanswered")


def grade(exercise: str, expected: Mapping[str, Any], answers: Mapping[str, Any],
          graded: Mapping[str, Tol], aliases: Mapping[str, tuple[str, str]] | None = None) -> dict[str, Any]:
    """Compare ``answers`` with ``expected`` (a solution) on every graded quantity.

    Returns ``{"exercise", "all_ok", "answered", "score", "max_score", "quantities": {name: {expected,
    given, ok, status, points, max_points, tolerance[, reading]}}, "unknown_answers"}``. Each quantity
    is worth one point. ``status`` is one of :data:`STATUSES`: an answer that misses the graded
    reading but matches a documented alternative reading (``expected["alternative"]``, see
    :func:`alternative_values`) is ``"alternative"`` and names that ``reading``; it is not ok and
    earns no point (see :func:`accept_readings`). A missing answer is not ok; an answer under a name the
    exercise does not grade is listed in ``unknown_answers`` and makes ``all_ok`` false (it is
    usually a misspelt quantity). Raises ConfigError when ``answers`` is not a mapping.
    """
    if not isinstance(answers, Mapping):
        raise ConfigError(f"answers must be a JSON object of quantity -> value, got {type(answers).__name__}")
    alternatives = alternative_values(expected.get("alternative"), graded, aliases)
    quantities = {}
    for name, tol in graded.items():
        exp = expected[name]
        given = answers.get(name)
        q: dict[str, Any] = {"expected": exp, "given": given, "tolerance": tol.describe(exp)}
        if given is None:
            q["status"] = "unanswered"
        elif _matches(exp, given, tol):
            q["status"] = "correct"
        else:
            reading = next((r for r, v in alternatives.get(name, []) if _matches(v, given, tol)), None)
            q["status"] = "wrong" if reading is None else "alternative"
            if reading is not None:
                q["reading"] = reading
        q["ok"] = q["status"] == "correct"
        q["points"], q["max_points"] = int(q["ok"]), 1
        quantities[name] = q
    return _totals({"exercise": exercise, "answered": sum(answers.get(n) is not None for n in graded),
                    "quantities": quantities, "unknown_answers": sorted(set(answers) - set(graded))})


def _totals(report: dict[str, Any]) -> dict[str, Any]:
    qs = report["quantities"].values()
    report["all_ok"] = all(q["ok"] for q in qs) and not report["unknown_answers"]
    report["score"] = sum(q["points"] for q in qs)
    report["max_score"] = sum(q["max_points"] for q in qs)
    return {k: report[k] for k in _KEYS} | {k: v for k, v in report.items() if k not in _KEYS}


_KEYS = ("exercise", "all_ok", "answered", "score", "max_score", "quantities", "unknown_answers")


def accept_readings(report: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``report`` in which an answer of a documented alternative reading counts as right
    (ok, its point awarded, still ``status == "alternative"``): an instructor's choice when the
    exercise's wording admits both readings."""
    out = dict(report)
    out["quantities"] = {}
    for name, q in report["quantities"].items():
        q = dict(q)
        if q["status"] == "alternative":
            q["ok"], q["points"] = True, q["max_points"]
        out["quantities"][name] = q
    return _totals(out)


def redact(report: Mapping[str, Any], reveal: bool = False) -> dict[str, Any]:
    """A copy of ``report`` without the expected values (kept only with ``reveal``, an instructor's
    explicit choice), for every output a student might see: notebooks, ``check`` and ``grade``."""
    out = dict(report)
    out["quantities"] = {name: ({k: v for k, v in q.items() if reveal or k != "expected"})
                         for name, q in report["quantities"].items()}
    return out


def exercise_label(exercise: str) -> str:
    """How reports name an exercise: ``§11.12 exercise 11.4``, ``Failure Recovery, Napkin Math 0.1
    (nm0.1)`` or ``Failure Recovery, exercise 0.2 (ex0.2)``."""
    exercise = str(exercise)
    if exercise.startswith("nm0."):
        return f"Failure Recovery, Napkin Math {exercise[2:]} ({exercise})"
    if exercise.startswith("ex0."):
        return f"Failure Recovery, exercise {exercise[2:]} ({exercise})"
    return f"§11.12 exercise {exercise}"


def format_report(report: Mapping[str, Any], reveal: bool = False) -> str:
    """A grading report as a small text table (what notebooks and the CLI print).

    Expected values are shown only with ``reveal`` (an instructor's view), so printing a report in
    the student notebook does not hand out the answers. An answer of a documented alternative
    reading is marked ``~~`` and names the reading.
    """
    qs = report["quantities"]
    w = max(len(n) for n in qs)
    alt = sum(q["status"] == "alternative" for q in qs.values())
    lines = [f"{exercise_label(report['exercise'])}: {report['answered']} of {len(qs)} quantities answered, "
             f"{sum(q['status'] == 'correct' for q in qs.values())} correct"
             + (f", {alt} of another reading" if alt else "")]
    for name, q in qs.items():
        status = q["status"]
        mark = {"correct": "ok ", "alternative": "~~ ", "unanswered": "-- "}.get(status, "NO ")
        given = "(unanswered)" if q["given"] is None else _fmt(q["given"], name)
        exp = f" expected {_fmt(q['expected'], name):<14}" if reveal and "expected" in q else ""
        if status == "alternative":
            hint = f"  matches the reading {q['reading']!r}, not the one graded" + (" (accepted)" if q["ok"] else "")
        else:
            hint = (q.get("hint") or _hint(q.get("expected"), q["given"])) if not q["ok"] else ""
        lines.append(f"  {mark}{name:<{w}}  your answer {given:<14}{exp} [{q['tolerance']}]{hint}")
    for name in report["unknown_answers"]:
        lines.append(f"  ?? {name}: not a quantity of this exercise (misspelt?)")
    return "\n".join(lines)


def _hint(expected: Any, given: Any) -> str:
    """A word on an answer of the wrong kind (a number typed as text, a yes/no as a word)."""
    if given is None or expected is None or type(given) is type(expected):
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


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def is_money(name: str) -> bool:
    """A quantity priced in dollars: ``usd`` is one of its name's words (``token_cost_usd``,
    ``policy_usd_per_trajectory``)."""
    return "usd" in name.split("_")


def is_share(name: str) -> bool:
    """A quantity that is a fraction of a whole (``log_share_of_total``, ``current_pause_share``,
    ``fleet_saving_fraction``); not one with a unit after it (``optimal_restore_share_s``)."""
    return name.endswith(("_share", "_fraction")) or "_share_of_" in name or "_fraction_of_" in name


def _fmt(v: Any, name: str = "") -> str:
    """An answer or expected value as the report shows it: a quantity named in dollars
    (:func:`is_money`) as money (``$0.07395``, ``-$1.5``), other floats with six significant digits,
    never in exponent form below 1e-4 of a dollar."""
    if is_money(name) and _is_number(v):
        x = float(v)
        text = f"{abs(x):.6g}" if abs(x) >= 1e-4 or x == 0 else f"{abs(x):.10f}".rstrip("0")
        return ("-$" if x < 0 else "$") + text
    if isinstance(v, float):
        return f"{v:.6g}"
    return json.dumps(v) if not isinstance(v, str) else v


def display_value(v: Any, name: str = "") -> str:
    """A computed quantity as ``exercise solve`` prints it for a reader: money as the grading report
    shows it (:func:`_fmt`), a share (:func:`is_share`) as a percentage with six significant digits
    (``0.305077%``), a mapping as ``name value`` pairs, everything else as :func:`_fmt`."""
    if is_share(name) and _is_number(v):
        return f"{float(v) * 100:.6g}%"
    if isinstance(v, Mapping):
        return ", ".join(f"{k} {display_value(x, str(k))}" for k, x in v.items())
    return _fmt(v, name)


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


def strict_json(x: Any) -> Any:
    """``x`` with every non-finite float (a student's NaN or infinity, echoed as ``given``) written as
    the text ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``, so ``json.dumps(..., allow_nan=False)``
    accepts it: the CLI's ``--json`` output stays strict JSON (RFC 8259 has no NaN)."""
    if isinstance(x, float) and not math.isfinite(x):
        return "NaN" if x != x else ("Infinity" if x > 0 else "-Infinity")
    if isinstance(x, Mapping):
        return {k: strict_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [strict_json(v) for v in x]
    return x

#: The MIME type of the answers record a grading cell displays (read back by ``exercise grade``).
RECORD_MIME = "application/vnd.kernel-lib.answers+json"


def plain_answer(value: Any) -> Any:
    """One answer as plain JSON: numpy and sympy scalars become int/float/bool, tuples and arrays
    lists, Fractions floats; anything else is kept as its ``str`` (and graded as a wrong kind)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): plain_answer(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain_answer(v) for v in value]
    if isinstance(value, Fraction):
        return float(value)
    if hasattr(value, "tolist"):                       # numpy scalars and arrays
        return plain_answer(value.tolist())
    if getattr(value, "is_Number", False):             # sympy numbers
        if getattr(value, "is_Integer", False):
            return int(value)
        return float(value)
    if getattr(value, "is_Boolean", False) and str(value) in ("True", "False"):   # sympy true/false
        return str(value) == "True"
    return str(value)


def plain_answers(answers: Any) -> dict[str, Any]:
    """``answers`` (a dict of quantity -> value) as plain JSON (see :func:`plain_answer`).

    Raises ConfigError when ``answers`` is not a mapping.
    """
    if not isinstance(answers, Mapping):
        raise ConfigError(f"answers must be a dict of quantity -> value, got {type(answers).__name__}")
    return {str(k): plain_answer(v) for k, v in answers.items()}


def answers_record(exercise: str, params: Mapping[str, Any], answers: Mapping[str, Any]) -> dict[str, Any]:
    """What ``exercise grade`` reads back from a notebook: ``{"exercise", "params", "answers"}``."""
    return {"exercise": exercise, "params": jsonable(dict(params)), "answers": plain_answers(answers)}


def display_record(record: Mapping[str, Any]) -> None:
    """Display ``record`` in the running notebook as :data:`RECORD_MIME` (with a one-line text form),
    so a saved notebook carries its answers; does nothing outside an IPython kernel."""
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        return
    if get_ipython() is None:
        return
    n = len(record["answers"])
    display({RECORD_MIME: dict(record),
             "text/plain": f"({n} answer{'s' if n != 1 else ''} recorded for `python -m kernel_lib exercise grade`)"},
            raw=True)


def submit(module: Any, params: Mapping[str, Any], answers: Mapping[str, Any]) -> dict[str, Any]:
    """The grading cell of an exercise notebook: grade ``answers`` (made plain JSON first, exactly as
    ``exercise grade`` will see them) against ``module.check``, print the report without the expected
    values, and record the answers in the notebook's output. Returns the report."""
    record = answers_record(module.EXERCISE, params, answers)
    report = module.check(params, record["answers"])
    print(getattr(module, "format_report", format_report)(report))
    display_record(record)
    return report


def collect_answers(exercise: str, namespace: Mapping[str, Any]) -> None:
    """The cell ``exercise grade`` appends to a run: display the record of the notebook's ``params``
    and ``answers`` (or of what is missing), whatever its grading cell does."""
    answers, params = namespace.get("answers"), namespace.get("params")
    if not isinstance(answers, Mapping):
        display_record({"exercise": exercise, "answers": {},
                        "error": "the notebook leaves no `answers` dict (its setup cell creates one)"})
        return
    display_record(answers_record(exercise, params if isinstance(params, Mapping) else {}, answers))
