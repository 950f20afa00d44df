"""§11.12 exercise 9, "Consolidating a delta chain under a resume deadline" (Advanced).

Applies the method of theorem 11.1 (§11.4.3) to the consolidation stride m (checkpoints between new
bases): per checkpoint the expected overhead is ``H(m) = P/m + p (B + d m/2)``, minimized at
``m* = sqrt(2 P / (p d))``; a chain of up to m deltas restores in at most ``B + d m``; a resume
deadline D admits ``m <= (D - B)/d``. Evaluated by :mod:`kernel_lib.cadence`
(``consolidation_overhead_s``, ``consolidation_optimal_stride``, ``worst_case_restore_s``,
``largest_stride_within_deadline``, ``flat_minimum_factor``), derived in
:mod:`kernel_lib.cadence.derivation`. Compaction follows §11.4.2 (retire superseded deltas only after
the new base is durably published) and §11.4.1 (publication strictly after data availability).

Givens (papermill names): ``consolidation_pause_s`` P (execution pause to write and publish a new
base), ``base_read_s`` B, ``delta_apply_s`` d (per delta in the chain),
``restore_probability_per_checkpoint`` p (chance a restore is needed between two consecutive
checkpoints), ``restore_deadline_s`` D (worst-case restore allowed at resume).

Readings: overhead is accounted per checkpoint interval, the consolidation pause P being paid once
per m checkpoints (P/m); the routine capture of each incremental checkpoint is the same for every m
and is left out. The mean chain length at a crash is m/2 as the exercise instructs (alternative:
(m+1)/2 for a chain uniform on 1..m, which adds p d/2 and does not move m*). m* is the real optimum
(the best whole m is the alternative). "Within 2 s" admits equality (alternative: strictly less).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import Any

from kernel_lib.cadence import (
    consolidation_optimal_stride,
    consolidation_overhead_s,
    consolidation_plan,
    flat_minimum_factor,
    largest_stride_within_deadline,
    worst_case_restore_s,
)
from kernel_lib.errors import ConfigError
from kernel_lib.course.exercises._common import Param, Tol, exact, grade, jsonable, validate

EXERCISE = "11.9"
TITLE = "Consolidating a delta chain under a resume deadline"

PARAMS = (
    Param("consolidation_pause_s", float, 1e-6, 1e5, "P: pause to write and publish a new base, s"),
    Param("base_read_s", float, 0.0, 1e5, "B: time a restore spends reading the base, s"),
    Param("delta_apply_s", float, 1e-9, 1e5, "d: time a restore spends on each delta in the chain, s"),
    Param("restore_probability_per_checkpoint", float, 1e-12, 1.0,
          "p: probability that a restore is needed between two consecutive checkpoints"),
    Param("restore_deadline_s", float, 1e-6, 1e6, "D: longest worst-case restore allowed at resume, s"),
)

DEFAULTS: dict[str, Any] = {"consolidation_pause_s": 1.0, "base_read_s": 0.2, "delta_apply_s": 0.04,
                            "restore_probability_per_checkpoint": 0.005, "restore_deadline_s": 2.0}

GRADED: dict[str, Tol] = {
    "optimal_consolidation_stride": Tol(),
    "optimal_overhead_s": Tol(),
    "worst_case_restore_at_optimum_s": Tol(),
    "optimum_meets_deadline": Tol(),
    "deadline_consolidation_stride": Tol(),
    "deadline_overhead_s": Tol(),
    "deadline_cost_ratio": Tol(),
    "variable_part_ratio": Tol(),
    "flat_minimum_factor": Tol(),
    "delete_before_new_base_durable": Tol(),
}


def validate_params(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Defaults overridden by ``params``, checked (ConfigError on a bad name, type or range).

    A deadline that not even a one-delta chain meets (``B + d > D``) is refused.
    """
    p = validate(PARAMS, DEFAULTS, params)
    if exact(p["base_read_s"]) + exact(p["delta_apply_s"]) > exact(p["restore_deadline_s"]):
        raise ConfigError(f"restore_deadline_s ({p['restore_deadline_s']:g}) is below the base read plus one delta "
                          f"({p['base_read_s'] + p['delta_apply_s']:g} s): no consolidation stride meets it")
    return p


def _args(p: Mapping[str, Any]) -> tuple[float, float, float, float]:
    return (p["consolidation_pause_s"], p["restore_probability_per_checkpoint"], p["base_read_s"], p["delta_apply_s"])


def _best_whole(m_star: float, args: tuple[float, float, float, float], cap: int | None = None) -> int:
    cands = {max(1, math.floor(m_star)), max(1, math.ceil(m_star))}
    if cap is not None:
        cands = {min(c, cap) for c in cands}
    return min(sorted(cands), key=lambda m: consolidation_overhead_s(m, *args))


def solve(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every quantity §11.12 exercise 9 asks for, and the consolidation and compaction decision."""
    p = validate_params(params)
    args = _args(p)
    P, prob, B, d = args
    D = p["restore_deadline_s"]
    plan = consolidation_plan(P, prob, B, d, deadline_s=D)
    m_star, h_star, worst_star = plan.optimal_stride, plan.optimal_overhead_s, plan.worst_case_restore_at_optimum_s
    m_dead = plan.deadline_stride
    binding = m_dead < m_star
    # the deadline only ever shortens the stride: when it admits more than m*, stay at m*
    # (consolidation_plan evaluates H at the deadline stride whether or not it binds)
    m_use = m_dead if binding else m_star
    h_use = plan.deadline_overhead_s if binding else h_star
    const = prob * B                                # the part of H that no choice of m moves
    x = m_star / m_use
    out: dict[str, Any] = {
        "exercise": EXERCISE,
        "optimal_consolidation_stride": m_star,
        "optimal_overhead_s": h_star,
        "optimal_consolidation_share_s": P / m_star,
        "optimal_restore_share_s": h_star - P / m_star,
        "worst_case_restore_at_optimum_s": worst_star,
        "optimum_meets_deadline": worst_star <= D,
        "deadline_consolidation_stride": m_dead,
        "deadline_binding": binding,
        "chosen_consolidation_stride": m_use,
        "worst_case_restore_at_chosen_s": worst_case_restore_s(m_use, B, d),
        "deadline_overhead_s": h_use,
        "deadline_extra_overhead_s": h_use - h_star,
        "deadline_cost_ratio": h_use / h_star,
        "miss_factor": x,
        "variable_part_ratio": (h_use - const) / (h_star - const),
        "flat_minimum_factor": flat_minimum_factor(x),
        "delete_before_new_base_durable": False,
    }
    out["decision"] = f"consolidate_every_{m_dead}" if binding else "consolidate_at_optimum"
    out["decision_text"] = (
        f"Balancing the {P:g} s consolidation pause against restores (probability {prob:g} per checkpoint, {B:g} s "
        f"base read plus {d:g} s per delta, mean chain m/2) gives m* = {m_star:.4g} checkpoints and "
        f"H(m*) = {h_star:.4g} s per checkpoint; a crash just before a consolidation then restores in "
        f"{worst_star:.4g} s. "
        + (f"The {D:g} s deadline admits at most {m_dead} deltas ({B:g} + {d:g} x {m_dead} = "
           f"{worst_case_restore_s(m_dead, B, d):.4g} s), so consolidate every {m_dead} checkpoints: H = "
           f"{h_use:.4g} s per checkpoint, {h_use / h_star:.4g}x the optimum ({h_use - h_star:.3g} s more). "
           f"Without the constant p B the ratio is {out['variable_part_ratio']:.4g}, exactly (x + 1/x)/2 at "
           f"x = m*/m = {x:.4g}; the flat minimum makes a {x:.3g}x shorter stride cheap. "
           if binding else
           f"The {D:g} s deadline admits up to {m_dead} deltas, more than m*, so it costs nothing: consolidate at "
           f"the optimum. ")
        + "When the new base is published, compaction may delete the deltas it merged and the base they applied "
          "to (every delta and base older than the new base), but only after verifying that the new base and "
          "its manifest are durably published within the failure domain (bytes flushed, integrity hashes "
          "checked, the Checkpoint event appended to the authoritative log), and that no retention promise "
          "(audit, replay, an active recovery path or another trajectory's reference) still needs them.")

    def h_alt(m: float) -> float:   # mean chain (m+1)/2: the same as a base read longer by d/2
        return consolidation_overhead_s(m, P, prob, B + d / 2, d)

    m_whole = _best_whole(m_star, args)
    fd = (exact(D) - exact(B)) / exact(d)
    strict = math.ceil(fd) - 1 if fd == int(fd) else math.floor(fd)
    out["reading"] = {
        "accounting": "overhead per checkpoint interval: the consolidation pause P is paid once per m checkpoints "
                      "(P/m); the capture of each incremental checkpoint is the same for every m and left out. "
                      "Alternative: per consolidation cycle, m·H(m), which is not comparable across m (a shorter "
                      "cycle always looks cheaper).",
        "chain_mean": "the chain length at a crash averages m/2, as the exercise instructs. Alternative: (m+1)/2 "
                      "for a chain uniform on 1..m, which adds p·d/2 to every H and moves neither m* nor the "
                      "decision.",
        "stride": "m* is the real optimum, as theorem 11.1 states it; the best whole stride is the alternative.",
        "deadline": "'within D' admits equality: B + d·m <= D. Alternative: strictly less.",
        "compaction": "deletable: the merged deltas and the base they applied to; first verify the new base is "
                      "durably published and that no retention promise still references them.",
    }
    out["alternative"] = {
        "per_cycle": {"optimal_overhead_s_per_cycle": m_star * h_star,
                      "deadline_overhead_s_per_cycle": m_use * h_use},
        "chain_mean_m_plus_1_over_2": {"optimal_overhead_s": h_alt(m_star), "deadline_overhead_s": h_alt(m_use),
                                       "deadline_cost_ratio": h_alt(m_use) / h_alt(m_star)},
        "whole_optimum": {"optimal_consolidation_stride": m_whole,
                          "optimal_overhead_s": consolidation_overhead_s(m_whole, *args),
                          "worst_case_restore_at_optimum_s": worst_case_restore_s(m_whole, B, d),
                          "deadline_cost_ratio": h_use / consolidation_overhead_s(m_whole, *args)},
        "strict_deadline": ({"deadline_consolidation_stride": strict,
                             "deadline_overhead_s": consolidation_overhead_s(strict, *args),
                             "deadline_cost_ratio": consolidation_overhead_s(strict, *args) / h_star}
                            if strict >= 1 else None),
    }
    return jsonable(out)


#: Alternative answers filed under other names: ``reading/key`` in ``solve()["alternative"]`` -> (reading, graded
#: quantity). Per consolidation cycle instead of per checkpoint.
ALTERNATIVE_ALIASES: dict[str, tuple[str, str]] = {
    "per_cycle/optimal_overhead_s_per_cycle": ("per_cycle", "optimal_overhead_s"),
    "per_cycle/deadline_overhead_s_per_cycle": ("per_cycle", "deadline_overhead_s"),
}


def check(params: Mapping[str, Any] | None, answers: Mapping[str, Any]) -> dict[str, Any]:
    """Grade ``answers`` against :func:`solve` (tolerances in ``GRADED``: 1 % relative, else exact)."""
    return grade(EXERCISE, solve(params), answers, GRADED, ALTERNATIVE_ALIASES)


def generate(seed: int) -> dict[str, Any]:
    """A seeded variant in which the deadline binds: it admits between a quarter and 3/4 of m*."""
    rng = random.Random(f"ex11.9:{seed}")
    while True:
        P = rng.choice([0.5, 1.0, 1.5, 2.0, 3.0])
        B = rng.choice([0.1, 0.2, 0.3, 0.5])
        d = rng.choice([0.01, 0.02, 0.04, 0.05, 0.1])
        prob = rng.choice([0.001, 0.002, 0.005, 0.01, 0.02])
        m_star = consolidation_optimal_stride(P, prob, B, d)
        D = round(B + d * m_star / rng.uniform(1.3, 4.0), 1)
        if D < B + d:
            continue
        m_dead = largest_stride_within_deadline(D, B, d)
        if 2 <= m_dead < m_star:
            return {"consolidation_pause_s": P, "base_read_s": B, "delta_apply_s": d,
                    "restore_probability_per_checkpoint": prob, "restore_deadline_s": D}
