"""§11.12 exercise 5, "What logging buys the cadence" (Intermediate).

Uses §11.4.3 eq. 5 and the balance it comes from: per completed turn a stride of k turns costs
``C/k + lam c k/2`` (pause spread over the stride, plus half a stride of per-turn recovery cost ``c``
per crash), minimized at ``k* = sqrt(2 C / (lam c))`` with ``sqrt(2 C lam c)`` seconds per turn
there. ``c`` is R (reconstruction of a logged turn) for a fully logged trajectory and Re
(re-execution) for an unlogged one; a mixed trajectory uses the mean ``f Re + (1 - f) R``. All of
it is evaluated by :mod:`kernel_lib.cadence` (``logged_stride_turns``, ``unlogged_stride_turns``,
``stride_turns``, ``logging_stride_gain``, ``optimal_stride_overhead_s_per_turn``,
``stride_overhead_s_per_turn``, ``effective_turn_cost_s``, ``flat_minimum_factor``), and derived
symbolically in :mod:`kernel_lib.cadence.derivation` (the "show that" of the exercise).

Givens (papermill names): ``checkpoint_pause_s`` C, ``failure_rate_per_turn`` lam (crashes per
completed turn), ``reconstruction_s_per_turn`` R, ``reexecution_s_per_turn`` Re,
``unlogged_turn_fraction`` f (share of turns whose workspace writes the log does not capture).

Readings: strides are real numbers, as eq. 5 gives them (the chapter's own "about 22 turns"); the
best whole strides are reported as the alternative. "Their ratio" is logged over unlogged, which is
``sqrt(Re/R)``. "The overhead of keeping the logged stride" is seconds per turn under the mixed cost
at the fully logged k*; its ratio to the retuned optimum is reported beside it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import Any

from kernel_lib.cadence import (
    effective_turn_cost_s,
    flat_minimum_factor,
    logged_stride_turns,
    logging_stride_gain,
    optimal_stride_overhead_s_per_turn,
    stride_overhead_s_per_turn,
    stride_turns,
    unlogged_stride_turns,
)
from kernel_lib.errors import ConfigError
from kernel_lib.course.exercises._common import Param, Tol, grade, jsonable, validate

EXERCISE = "11.5"
TITLE = "What logging buys the cadence"

INVESTMENTS = ("capture_deltas", "retune_stride", "neither")

PARAMS = (
    Param("checkpoint_pause_s", float, 1e-6, 1e5, "C: seconds execution stops to capture and publish a checkpoint"),
    Param("failure_rate_per_turn", float, 1e-9, 1.0, "lam: crashes per completed turn"),
    Param("reconstruction_s_per_turn", float, 1e-6, 1e5, "R: seconds to reconstruct one logged turn from the log"),
    Param("reexecution_s_per_turn", float, 1e-6, 1e6, "Re: seconds to re-execute one unlogged turn"),
    Param("unlogged_turn_fraction", float, 0.0, 1.0, "f: share of turns whose workspace writes the log misses"),
)

DEFAULTS: dict[str, Any] = {"checkpoint_pause_s": 0.8, "failure_rate_per_turn": 0.01,
                            "reconstruction_s_per_turn": 0.05, "reexecution_s_per_turn": 12,
                            "unlogged_turn_fraction": 0.10}

GRADED: dict[str, Tol] = {
    "logged_stride_turns": Tol(),
    "unlogged_stride_turns": Tol(),
    "stride_ratio": Tol(),
    "logged_overhead_s_per_turn": Tol(),
    "effective_turn_cost_s": Tol(),
    "mixed_stride_turns": Tol(),
    "keep_logged_stride_overhead_s_per_turn": Tol(),
    "retuned_overhead_s_per_turn": Tol(),
    "better_investment": Tol(),
}


def validate_params(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Defaults overridden by ``params``, checked (ConfigError on a bad name, type or range).

    Re-executing a turn (new model and tool calls) cannot be cheaper than reading its records back:
    ``reexecution_s_per_turn < reconstruction_s_per_turn`` is refused.
    """
    p = validate(PARAMS, DEFAULTS, params)
    if p["reexecution_s_per_turn"] < p["reconstruction_s_per_turn"]:
        raise ConfigError(f"reexecution_s_per_turn ({p['reexecution_s_per_turn']:g}) must be at least "
                          f"reconstruction_s_per_turn ({p['reconstruction_s_per_turn']:g})")
    return p


def best_whole_stride(pause_s: float, failure_rate_per_turn: float, cost_s_per_turn: float) -> int:
    """The whole stride (>= 1) with the least ``stride_overhead_s_per_turn``: floor or ceiling of k*."""
    k = stride_turns(pause_s, failure_rate_per_turn, cost_s_per_turn)
    cands = {max(1, math.floor(k)), max(1, math.ceil(k))}
    return min(sorted(cands), key=lambda w: stride_overhead_s_per_turn(w, pause_s, failure_rate_per_turn,
                                                                         cost_s_per_turn))


def solve(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every quantity §11.12 exercise 5 asks for (eq. 5), and the investment decision."""
    p = validate_params(params)
    C, lam, R, Re, f = (p["checkpoint_pause_s"], p["failure_rate_per_turn"], p["reconstruction_s_per_turn"],
                        p["reexecution_s_per_turn"], p["unlogged_turn_fraction"])
    k_log = logged_stride_turns(C, lam, R)
    k_unl = unlogged_stride_turns(C, lam, Re)
    h_log = optimal_stride_overhead_s_per_turn(C, lam, R)
    h_unl = optimal_stride_overhead_s_per_turn(C, lam, Re)
    c_eff = effective_turn_cost_s(f, R, Re)
    k_mix = stride_turns(C, lam, c_eff)
    h_retuned = optimal_stride_overhead_s_per_turn(C, lam, c_eff)
    h_keep = stride_overhead_s_per_turn(k_log, C, lam, c_eff)
    h_captured = h_log   # every turn logged again: back to the logged balance at the logged stride
    three = {"keep_logged_stride": h_keep, "retune_stride": h_retuned, "capture_deltas": h_captured}
    # decided on the givens, not on rounded overheads: capturing wins exactly when the mean cost of a lost
    # turn exceeds R, i.e. f > 0 and Re > R (validate_params refuses Re < R, where retuning would win)
    better = "capture_deltas" if f > 0 and Re > R else "neither"
    out: dict[str, Any] = {
        "exercise": EXERCISE,
        "logged_stride_turns": k_log,
        "unlogged_stride_turns": k_unl,
        "stride_ratio": k_log / k_unl,
        "logging_stride_gain": logging_stride_gain(R, Re),
        "logged_overhead_s_per_turn": h_log,
        "unlogged_overhead_s_per_turn": h_unl,
        "effective_turn_cost_s": c_eff,
        "mixed_stride_turns": k_mix,
        "keep_logged_stride_overhead_s_per_turn": h_keep,
        "retuned_overhead_s_per_turn": h_retuned,
        "captured_overhead_s_per_turn": h_captured,
        "keep_over_retuned": h_keep / h_retuned,
        "keep_miss_factor": k_log / k_mix,
        "keep_flat_minimum_factor": flat_minimum_factor(k_log / k_mix),
        "retuned_over_captured": h_retuned / h_captured,
        "better_investment": better,
        "decision": better,
    }
    out["decision_text"] = (
        f"Fully logged, the best stride is {k_log:.4g} turns; fully unlogged {k_unl:.3g} turns: logging lengthens "
        f"it {k_log / k_unl:.3g}x = sqrt(Re/R). At the logged optimum checkpointing and reconstruction together "
        f"cost sqrt(2 C lam R) = {h_log:.4g} s per turn. With {f:.0%} of turns unlogged, a lost turn costs "
        f"{c_eff:.4g} s on average, the best stride falls to {k_mix:.4g} turns, and the three overheads are: keep "
        f"the logged stride {h_keep:.4g} s/turn ({h_keep / h_retuned:.3g}x the retuned optimum, as (x+1/x)/2 "
        f"with x = {k_log / k_mix:.3g} predicts), retune the stride {h_retuned:.4g} s/turn, capture the missing "
        f"workspace deltas {h_captured:.4g} s/turn. "
        + {"capture_deltas": f"Capture the deltas: it lowers overhead {h_retuned / h_captured:.3g}x below the best "
                             "retuning can reach, because retuning only re-balances a larger per-turn cost under "
                             "the square root while capturing removes the cost itself (R in place of "
                             "f Re + (1-f) R). Retune only as a stopgap until the deltas are logged.",
           "retune_stride": "Retune the stride: the log does not make recovery cheaper here.",
           "neither": "Nothing is missing from the log, so neither investment changes the overhead."}[better])
    whole = {name: best_whole_stride(C, lam, cost) for name, cost in (("logged", R), ("unlogged", Re),
                                                                      ("mixed", c_eff))}
    out["reading"] = {
        "strides": "strides are the real k* of eq. 5, as the chapter quotes 'about 22 turns'. Alternative: the best "
                   "whole stride (floor or ceiling of k*, whichever costs less).",
        "ratio": "'their ratio' is logged over unlogged stride, sqrt(Re/R) (> 1). Alternative: its inverse.",
        "keep": "'the overhead of keeping the logged stride' is the per-turn overhead C/k + lam c_eff k/2 at the "
                "fully logged k* once a fraction f of turns cost Re; its ratio to the retuned optimum is reported too.",
        "effective_cost": "a lost suffix's turns are unlogged independently with probability f, so a lost turn "
                          "costs f Re + (1-f) R on average (the exercise's wording).",
    }
    out["alternative"] = {
        "whole_strides": {
            "logged_stride_turns": whole["logged"], "unlogged_stride_turns": whole["unlogged"],
            "mixed_stride_turns": whole["mixed"],
            "logged_overhead_s_per_turn": stride_overhead_s_per_turn(whole["logged"], C, lam, R),
            "keep_logged_stride_overhead_s_per_turn": stride_overhead_s_per_turn(whole["logged"], C, lam, c_eff),
            "retuned_overhead_s_per_turn": stride_overhead_s_per_turn(whole["mixed"], C, lam, c_eff),
        },
        "inverse_ratio": {"stride_ratio": k_unl / k_log},
        "three_overheads_s_per_turn": three,
    }
    return jsonable(out)


def check(params: Mapping[str, Any] | None, answers: Mapping[str, Any]) -> dict[str, Any]:
    """Grade ``answers`` against :func:`solve` (tolerances in ``GRADED``: 1 % relative, else exact)."""
    return grade(EXERCISE, solve(params), answers, GRADED)


def chapter_example() -> dict[str, Any]:
    """Napkin Math 11.1's balance strides from eq. 5, beside the figures the text prints.

    The chapter prints lam = 0.02 and Re = 20 s but not C or R; :func:`kernel_lib.cadence.napkin.reconstruct`
    recovers them from the printed eq. 6 overheads. With those givens this exercise's solver must give
    the printed "about 22 turns", "1.6 turns" and "about 14.1x".
    """
    from kernel_lib.cadence.napkin import PRINTED as NAPKIN_PRINTED
    from kernel_lib.cadence.napkin import TOLERANCE, reconstruct

    r = reconstruct()
    givens = {"checkpoint_pause_s": r.pause_s, "failure_rate_per_turn": r.failure_rate_per_turn,
              "reconstruction_s_per_turn": r.reconstruction_s_per_turn,
              "reexecution_s_per_turn": NAPKIN_PRINTED["givens"]["reexecution_s_per_turn"],
              "unlogged_turn_fraction": 0.0}
    s = solve(givens)
    rows = {}
    for name, key in (("logged_stride_turns", "logged_stride_turns"),
                      ("unlogged_stride_turns", "unlogged_stride_turns"),
                      ("logging_gain", "stride_ratio")):
        rows[name] = {"printed": NAPKIN_PRINTED[name], "computed": s[key], "tolerance": TOLERANCE[name],
                      "ok": abs(NAPKIN_PRINTED[name] - s[key]) <= TOLERANCE[name]}
    return jsonable({"givens": givens, "figures": rows, "all_ok": all(r_["ok"] for r_ in rows.values())})


def generate(seed: int) -> dict[str, Any]:
    """A seeded variant: pause, crash rate, per-turn costs and the unlogged share perturbed."""
    rng = random.Random(f"ex11.5:{seed}")
    return {
        "checkpoint_pause_s": rng.choice([0.2, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 3.0]),
        "failure_rate_per_turn": rng.choice([0.002, 0.005, 0.01, 0.02, 0.03, 0.05]),
        "reconstruction_s_per_turn": rng.choice([0.01, 0.02, 0.05, 0.1, 0.2]),
        "reexecution_s_per_turn": rng.choice([4, 6, 8, 10, 12, 15, 20, 30]),
        "unlogged_turn_fraction": rng.choice([0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4]),
    }
