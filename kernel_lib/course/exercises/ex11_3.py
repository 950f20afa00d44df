"""§11.12 exercise 3, "Checkpointing too often" (Basic).

Uses theorem 11.1 (§11.4.3): Young's interval ``tau* = sqrt(2 C M)`` (eq. 4), the overhead at it,
``sqrt(2 C / M)`` of useful time, and the flat minimum: at ``x`` times the optimum the overhead is
``(x + 1/x)/2`` times the optimal one. All three come from :mod:`kernel_lib.cadence`
(``young_interval_s``, ``young_overhead_fraction``, ``young_optimal_overhead_fraction``,
``flat_minimum_factor``), which derives them with sympy in :mod:`kernel_lib.cadence.derivation`.

Givens (papermill names): ``checkpoint_pause_s`` C (execution stops to capture and durably publish one
checkpoint), ``mtbf_s`` M (mean time between work-losing failures), ``current_interval_s`` and
``proposed_interval_s`` (useful work between checkpoints under the two policies).

Reading: the overhead of an interval tau is the fraction of useful time lost, ``C/tau + tau/(2M)``
(one pause per interval plus half an interval re-executed per failure), the expression theorem 11.1
minimizes. "The factor by which it exceeds the optimum" is read as the overhead ratio
h(tau)/h(tau*); the interval's miss factor (tau*/tau or tau/tau*, whichever is >= 1) is reported and
graded too, since the flat-minimum form links the two. Alternatives (``solve()["alternative"]``):
the overhead as a share of elapsed time, h/(1+h), and a first-order correction where a crash during
the pause also loses it, ``C/tau + (tau + C)^2 / (2 M tau)``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import Any

from kernel_lib.cadence import (
    flat_minimum_factor,
    young_interval_s,
    young_optimal_overhead_fraction,
    young_overhead_fraction,
    young_summary,
)
from kernel_lib.errors import ConfigError
from kernel_lib.course.exercises._common import Param, Tol, grade, jsonable, validate

EXERCISE = "11.3"
TITLE = "Checkpointing too often"

PARAMS = (
    Param("checkpoint_pause_s", float, 1e-6, 1e6,
          "C: seconds execution stops per checkpoint, durable publication included"),
    Param("mtbf_s", float, 1e-3, 1e10, "M: mean seconds between failures that lose unrecorded work"),
    Param("current_interval_s", float, 1e-6, 1e10, "useful-work interval between checkpoints today, s"),
    Param("proposed_interval_s", float, 1e-6, 1e10, "useful-work interval of the second proposal, s"),
)

DEFAULTS: dict[str, Any] = {"checkpoint_pause_s": 3.0, "mtbf_s": 1800, "current_interval_s": 10,
                            "proposed_interval_s": 200}

GRADED: dict[str, Tol] = {
    "optimal_interval_s": Tol(),
    "optimal_overhead_fraction": Tol(),
    "current_overhead_fraction": Tol(),
    "current_overhead_ratio": Tol(),
    "current_miss_factor": Tol(),
    "proposed_overhead_fraction": Tol(),
    "proposed_overhead_ratio": Tol(),
    "proposed_miss_factor": Tol(),
    "preferred_interval_s": Tol(),
}

#: Theorem 11.1's sensitivity example: givens and what the text prints (targets, never inputs).
CHAPTER_EXAMPLE = {"checkpoint_pause_s": 2.0, "mtbf_s": 600.0}
PRINTED = {"interval_s": 49.0, "overhead_percent": 8.2, "increase_at_2x_percent": 25.0, "at_10x_percent": 41.0}


def validate_params(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Defaults overridden by ``params``, checked (ConfigError on a bad name, type or range).

    Theorem 11.1 assumes the pause is small beside the MTBF; a pause of at least the MTBF is refused.
    """
    p = validate(PARAMS, DEFAULTS, params)
    if p["checkpoint_pause_s"] >= p["mtbf_s"]:
        raise ConfigError(f"checkpoint_pause_s ({p['checkpoint_pause_s']:g}) must be well below mtbf_s "
                          f"({p['mtbf_s']:g}): Young's approximation assumes C << M")
    return p


def _pause_exposed(tau: float, c: float, m: float) -> float:
    """Alternative reading: failures during the pause lose it too (first order in 1/M)."""
    return c / tau + (tau + c) ** 2 / (2 * m * tau)


def _policy(tau: float, tau_star: float, c: float, m: float, h_star: float) -> dict[str, Any]:
    h = young_overhead_fraction(tau, c, m)
    x = tau / tau_star
    return {"interval_s": tau, "overhead_fraction": h, "overhead_ratio": h / h_star,
            "miss_factor": max(x, 1 / x), "direction": "too_often" if x < 1 else "too_rarely" if x > 1 else "optimal",
            "flat_minimum_factor": flat_minimum_factor(x),
            "pause_share": (c / tau) / h, "elapsed_share": h / (1 + h),
            "pause_exposed_overhead_fraction": _pause_exposed(tau, c, m)}


def solve(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every quantity §11.12 exercise 3 asks for (theorem 11.1, eq. 4), and the decision."""
    p = validate_params(params)
    c, m = p["checkpoint_pause_s"], p["mtbf_s"]
    tau_star = young_interval_s(c, m)
    h_star = young_optimal_overhead_fraction(c, m)
    cur = _policy(p["current_interval_s"], tau_star, c, m, h_star)
    pro = _policy(p["proposed_interval_s"], tau_star, c, m, h_star)
    if pro["overhead_fraction"] < cur["overhead_fraction"]:
        decision, pref = "proposed", pro
    elif cur["overhead_fraction"] < pro["overhead_fraction"]:
        decision, pref = "current", cur
    else:   # same overhead (tau_cur * tau_pro = tau*^2): take the longer interval, fewer pauses
        decision = "tie"
        pref = pro if pro["interval_s"] >= cur["interval_s"] else cur
    out: dict[str, Any] = {"exercise": EXERCISE, "pause_to_mtbf": c / m, "optimal_interval_s": tau_star,
                           "optimal_overhead_fraction": h_star}
    for prefix, pol in (("current", cur), ("proposed", pro)):
        for key in ("overhead_fraction", "overhead_ratio", "miss_factor", "direction", "pause_share"):
            out[f"{prefix}_{key}"] = pol[key]
    out["preferred_interval_s"] = pref["interval_s"]
    out["decision"] = decision

    def says(pol: dict[str, Any], name: str) -> str:
        return (f"{name} every {pol['interval_s']:g} s is {pol['miss_factor']:.3g}x "
                f"{pol['direction'].replace('_', ' ')}: "
                f"overhead {pol['overhead_fraction']:.2%}, {pol['overhead_ratio']:.3g}x the optimum "
                f"(the flat-minimum form (x+1/x)/2 gives {pol['flat_minimum_factor']:.3g})")

    out["decision_text"] = (
        f"With a {c:g} s pause and an MTBF of {m:g} s, Young's interval is {tau_star:.4g} s and costs "
        f"{h_star:.2%} of useful time. {says(cur, 'Checkpointing')}. {says(pro, 'The proposal to checkpoint')}. "
        + ({"proposed": f"Adopt the {pro['interval_s']:g} s proposal.",
            "current": f"Keep the {cur['interval_s']:g} s policy: the proposal overshoots by more than it corrects.",
            "tie": "The two cost the same; prefer the longer interval, which pauses less often."}[decision])
        + " The overhead depends on the interval only through x = tau/tau*, and (x + 1/x)/2 takes the same value "
          "at x and 1/x: being k times too frequent costs exactly as much as being k times too rare, so the "
          "comparison is decided by how far each interval is from the optimum as a ratio, not by the side it errs "
          "on. Near the optimum the curve is flat (2x off costs "
        + f"{flat_minimum_factor(2.0) - 1:.0%} more) and far from it steep (10x off costs "
        + f"{flat_minimum_factor(10.0):.3g}x).")
    out["reading"] = {
        "overhead": "fraction of useful time lost, C/tau + tau/(2M): a pause per interval of useful work plus "
                    "half an interval re-executed per failure (theorem 11.1). Alternatives: the same lost time "
                    "as a share of elapsed time, h/(1+h); or a crash during the pause also losing it, "
                    "C/tau + (tau+C)^2/(2 M tau).",
        "factor": "'the factor by which it exceeds the optimum' is the overhead ratio h(tau)/h(tau*); the "
                  "interval's own miss factor max(tau/tau*, tau*/tau) is graded too.",
    }
    alt_star = math.sqrt(2 * c * m + c * c)   # minimizer of the pause-exposed form
    out["alternative"] = {
        "elapsed_share": {"optimal_overhead_fraction": h_star / (1 + h_star),
                          "current_overhead_fraction": cur["elapsed_share"],
                          "proposed_overhead_fraction": pro["elapsed_share"]},
        "pause_exposed": {"optimal_interval_s": alt_star,
                          "optimal_overhead_fraction": _pause_exposed(alt_star, c, m),
                          "current_overhead_fraction": cur["pause_exposed_overhead_fraction"],
                          "proposed_overhead_fraction": pro["pause_exposed_overhead_fraction"],
                          "preferred_interval_s": (pro if pro["pause_exposed_overhead_fraction"]
                                                   <= cur["pause_exposed_overhead_fraction"] else cur)["interval_s"]},
        "interval_ratio_as_factor": {"current_overhead_ratio": cur["miss_factor"],
                                     "proposed_overhead_ratio": pro["miss_factor"]},
    }
    return jsonable(out)


def check(params: Mapping[str, Any] | None, answers: Mapping[str, Any]) -> dict[str, Any]:
    """Grade ``answers`` against :func:`solve` (tolerances in ``GRADED``: 1 % relative, else exact)."""
    return grade(EXERCISE, solve(params), answers, GRADED)


def chapter_example() -> dict[str, Any]:
    """Theorem 11.1's sensitivity example (2 s pause, 10 min MTBF) recomputed beside :data:`PRINTED`.

    Returns the interval, the overhead at it, and for miss factors 0.5, 2, 0.1 and 10 the overhead,
    the ratio to the optimum and the relative increase, plus which reading of "raises it to 41
    percent" the numbers support (``at_10x_reading``): ``"absolute"`` (the overhead becomes 41 % of
    useful time) or ``"relative"`` (it grows by 41 %).
    """
    c, m = CHAPTER_EXAMPLE["checkpoint_pause_s"], CHAPTER_EXAMPLE["mtbf_s"]
    s = young_summary(c, m, miss_factors=(0.5, 2.0, 0.1, 10.0))
    misses = {f"{r['miss_factor']:g}x": {"overhead_percent": 100 * r["overhead_fraction"],
                                         "ratio_to_optimum": r["relative_to_optimum"],
                                         "increase_percent": 100 * (r["relative_to_optimum"] - 1),
                                         "flat_minimum_factor": r["flat_minimum_factor"]} for r in s.misses}
    ten = misses["10x"]
    absolute_ok = round(ten["overhead_percent"]) == PRINTED["at_10x_percent"]
    relative_ok = round(ten["increase_percent"]) == PRINTED["at_10x_percent"]
    out = {
        "givens": dict(CHAPTER_EXAMPLE), "printed": dict(PRINTED),
        "interval_s": s.interval_s, "overhead_percent": 100 * s.overhead_fraction, "misses": misses,
        "interval_matches": round(s.interval_s) == PRINTED["interval_s"],
        "overhead_matches": round(100 * s.overhead_fraction, 1) == PRINTED["overhead_percent"],
        "increase_at_2x_matches": all(round(misses[k]["increase_percent"]) == PRINTED["increase_at_2x_percent"]
                                      for k in ("0.5x", "2x")),
        "at_10x_reading": "absolute" if absolute_ok else "relative" if relative_ok else "neither",
        "note": (f"A 10x miss multiplies the overhead by (x + 1/x)/2 = {ten['ratio_to_optimum']:.3g}: from "
                 f"{100 * s.overhead_fraction:.2f} % to {ten['overhead_percent']:.1f} % of useful time, an increase "
                 f"of {ten['increase_percent']:.0f} %. The printed '{PRINTED['at_10x_percent']:g} percent' is the "
                 f"new overhead level, while the '{PRINTED['increase_at_2x_percent']:g} percent' for a 2x miss in "
                 f"the same sentence is an increase; both follow from (x + 1/x)/2 once each is read that way."),
    }
    return jsonable(out)


def _nice(v: float) -> float:
    """Round an interval to what a person would configure: 2 significant digits."""
    digits = 1 - math.floor(math.log10(abs(v)))
    r = round(v, digits)
    return float(r) if r == int(r) else r


def generate(seed: int) -> dict[str, Any]:
    """A seeded variant: one interval too frequent and one too rare, never (nearly) tied."""
    rng = random.Random(f"ex11.3:{seed}")
    while True:
        c = rng.choice([0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 8.0, 10.0])
        m = rng.choice([600, 900, 1200, 1800, 3600, 7200, 14400])
        tau_star = young_interval_s(c, m)
        cur = _nice(tau_star / rng.uniform(1.5, 15.0))
        pro = _nice(tau_star * rng.uniform(1.5, 15.0))
        h_cur, h_pro = (young_overhead_fraction(t, c, m) for t in (cur, pro))
        if abs(h_cur - h_pro) > 0.05 * min(h_cur, h_pro):
            return {"checkpoint_pause_s": c, "mtbf_s": m, "current_interval_s": cur, "proposed_interval_s": pro}
