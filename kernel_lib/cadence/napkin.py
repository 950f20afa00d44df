"""Napkin Math 11.1 rebuilt from its printed results (§11.4.3, eq. 5-6; pitfall of §11.9).

The chapter prints the outcome of one crash trace (a 100-turn run, two crashes, strides 10/25/50)
but not the crash turns, the capture pause C, the per-turn reconstruction cost R or the per-crash
restore time. This module recovers them from what is printed, instead of typing them in:

1. **Crash turns.** An exhaustive search over every pair of crash positions ``0 <= c1 <= c2 < 100``
   keeps the pairs whose lost suffixes ``c mod k`` match the printed suffixes at every printed
   stride. Read as unordered pairs several traces fit; read in the printed order (first suffix =
   first crash) exactly one does. Every fitting trace yields the same figures (checked).
2. **C, R, T_restore.** Eq. 6 at the three printed strides gives three linear equations in the three
   unknowns (checkpoint counts and suffix sums come from step 1); sympy's ``linsolve`` solves them.
3. **The printed "reconstruction totals".** Two readings are tested with ``linsolve`` against all
   six printed equations: the literal third term of eq. 6 alone (``R * sum suffix``) and the whole
   recovery time (``N_crash * T_restore + R * sum suffix``). The text's numbers fit only the second;
   the report says so and shows what the first would give.
4. Every printed figure (checkpoint counts, suffixes, totals, overheads, lambda, both balance
   strides, the logging gain, the winner, the §11.9 every-turn figure, the flat-minimum and
   square-root claims) is then recomputed by the package's own functions and compared, with the
   tolerance stated where the text rounds.

``PRINTED`` holds the text's figures: they are the targets of the comparison, never inputs to a
computation, except the stated givens (run length, strides, re-execution cost of 20 s per turn).
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field
from typing import Any

import sympy as sp

from kernel_lib.errors import CadenceError
import kernel_lib.cadence.formulas as f
from kernel_lib.cadence.trace import CrashTrace, evaluate_strides, trace_overhead

#: What Napkin Math 11.1 and the §11.9 pitfall print. ``givens`` are stated inputs; the rest are
#: results this module must reproduce.
PRINTED: dict[str, Any] = {
    "givens": {"turns": 100, "crashes": 2, "strides": (10, 25, 50), "reexecution_s_per_turn": 20.0},
    "per_stride": {
        10: {"checkpoints": 10, "lost_suffix_turns": (7, 3), "reconstruction_total_s": 3, "overhead_s": 8},
        25: {"checkpoints": 4, "lost_suffix_turns": (12, 8), "reconstruction_total_s": 4, "overhead_s": 6},
        50: {"checkpoints": 2, "lost_suffix_turns": (37, 33), "reconstruction_total_s": 9, "overhead_s": 10},
    },
    "failure_rate_per_turn": 0.02,
    "logged_stride_turns": 22,          # "about 22 turns": rounded to a whole turn
    "unlogged_stride_turns": 1.6,       # one decimal
    "logging_gain": 14.1,               # one decimal
    "winner_stride_turns": 25,
    "winner_overhead_s": 6,
    "every_turn_overhead_s": 52,        # §11.9 pitfall: a checkpoint after each of the 100 turns
    "flat_factor_at_2x": 1.25,          # "at most 25 percent extra" within a factor of 2
    "sqrt_knob_factor": 2.0,            # quadrupling C (or quartering lambda) doubles k*
}

#: Tolerances for printed figures that are rounded (absolute, in the figure's own unit).
TOLERANCE: dict[str, float] = {"logged_stride_turns": 0.5, "unlogged_stride_turns": 0.05, "logging_gain": 0.05}
EXACT = 1e-9


@dataclass(frozen=True)
class Check:
    """One printed figure against the computed one."""

    figure: str
    printed: Any
    computed: Any
    tolerance: float | None
    ok: bool

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Reading:
    """One interpretation of the printed "reconstruction totals" and whether the text's six
    equations admit a solution under it (``solution`` is None when they do not)."""

    name: str
    total_expression: str
    consistent: bool
    solution: dict | None
    totals_under_solved_givens_s: tuple[float, ...]

    def to_dict(self) -> dict:
        d_ = asdict(self)
        d_["totals_under_solved_givens_s"] = list(self.totals_under_solved_givens_s)
        return d_


@dataclass(frozen=True)
class NapkinReconstruction:
    """The rebuilt Napkin Math 11.1 (see the module docstring).

    Fields:
        turns, strides: stated givens. crash_turns: the trace used (printed order reading).
        candidate_traces_unordered / candidate_traces_ordered: every crash pair that fits.
        pause_s, reconstruction_s_per_turn, restore_s_per_crash: solved C, R, T_restore (exact
            rationals as floats; ``solved_exact`` keeps the sympy rationals as strings).
        failure_rate_per_turn: crashes / turns of the trace.
        readings: the two interpretations of "reconstruction totals".
        results: eq. 6 per stride (1 = every turn, then the printed strides and the balance stride
            rounded).
        best_on_trace: the best stride over 1..N on this trace (eq. 6), which need not be near k*.
        checks: every printed figure vs the computed one.
        notes: explanations where the text's wording and its numbers differ.
    """

    turns: int
    strides: tuple[int, ...]
    crash_turns: tuple[int, ...]
    candidate_traces_unordered: tuple[tuple[int, int], ...]
    candidate_traces_ordered: tuple[tuple[int, int], ...]
    pause_s: float
    reconstruction_s_per_turn: float
    restore_s_per_crash: float
    solved_exact: dict
    failure_rate_per_turn: float
    logged_stride_turns: float
    unlogged_stride_turns: float
    logging_gain: float
    readings: tuple[Reading, ...]
    results: tuple
    best_on_trace: dict
    checks: tuple[Check, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def all_ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def to_dict(self) -> dict:
        return {
            "source": "Napkin Math 11.1 (§11.4.3) and the §11.9 pitfall 'checkpointing after every turn'",
            "givens_stated": {"turns": self.turns, "strides": list(self.strides),
                              "reexecution_s_per_turn": PRINTED["givens"]["reexecution_s_per_turn"]},
            "givens_reconstructed": {
                "crash_turns": list(self.crash_turns), "pause_s": self.pause_s,
                "reconstruction_s_per_turn": self.reconstruction_s_per_turn,
                "restore_s_per_crash": self.restore_s_per_crash, "exact": dict(self.solved_exact),
                "candidate_traces_unordered": [list(t) for t in self.candidate_traces_unordered],
                "candidate_traces_ordered": [list(t) for t in self.candidate_traces_ordered]},
            "failure_rate_per_turn": self.failure_rate_per_turn,
            "logged_stride_turns": self.logged_stride_turns, "unlogged_stride_turns": self.unlogged_stride_turns,
            "logging_gain": self.logging_gain,
            "readings_of_reconstruction_totals": [r.to_dict() for r in self.readings],
            "per_stride": [r.to_dict() for r in self.results],
            "best_on_trace": dict(self.best_on_trace),
            "checks": [c.to_dict() for c in self.checks], "all_ok": self.all_ok, "notes": list(self.notes),
        }


def candidate_traces(turns: int, per_stride_suffixes: dict[int, tuple[int, ...]], *,
                     ordered: bool) -> list[tuple[int, ...]]:
    """Every crash trace (non-decreasing crash turns in ``0..turns-1``) whose lost suffixes ``c mod k``
    match ``per_stride_suffixes[k]`` for every stride: as a multiset (``ordered=False``) or in the
    given order (``ordered=True``, the first suffix belonging to the first crash). Exhaustive."""
    crashes = len(next(iter(per_stride_suffixes.values())))
    out = []
    for trace in itertools.combinations_with_replacement(range(turns), crashes):
        fits = True
        for k_, want in per_stride_suffixes.items():
            got = tuple(c % k_ for c in trace)
            if (got != tuple(want)) if ordered else (sorted(got) != sorted(want)):
                fits = False
                break
        if fits:
            out.append(trace)
    return out


def _solve_readings(trace: CrashTrace, printed: dict) -> tuple[dict[sp.Symbol, sp.Rational], tuple[Reading, ...]]:
    Cs, Rs, Ts = sp.symbols("C R T_restore", positive=True)
    eq6 = []
    for k_, row in printed["per_stride"].items():
        n_k = trace.turns // k_
        lost = sum(c % k_ for c in trace.crash_turns)
        eq6.append(sp.Eq(n_k * Cs + trace.crashes * Ts + lost * Rs, sp.nsimplify(row["overhead_s"])))
    sol = sp.linsolve(eq6, [Cs, Rs, Ts])
    if not sol or len(sol) != 1:
        raise CadenceError(f"eq. 6 at the printed strides does not determine C, R and T_restore: {sol}")
    (c_, r_, t_), = sol
    if any(v.free_symbols or not v.is_positive for v in (c_, r_, t_)):
        raise CadenceError(f"eq. 6 at the printed strides gives no positive C, R, T_restore: {(c_, r_, t_)}")
    solved = {Cs: c_, Rs: r_, Ts: t_}
    readings = []
    for name, expr_text, with_restore in (
            ("eq. 6 third term only", "R * sum(lost suffix)", False),
            ("whole recovery time", "N_crash * T_restore + R * sum(lost suffix)", True)):
        eqs = list(eq6)
        totals = []
        for k_, row in printed["per_stride"].items():
            lost = sum(c % k_ for c in trace.crash_turns)
            total = lost * Rs + (trace.crashes * Ts if with_restore else 0)
            eqs.append(sp.Eq(total, sp.nsimplify(row["reconstruction_total_s"])))
            totals.append(float(total.subs(solved)))
        s_ = sp.linsolve(eqs, [Cs, Rs, Ts])
        consistent = bool(s_) and len(s_) == 1
        readings.append(Reading(name, expr_text, consistent,
                                {str(sym): str(v) for sym, v in zip((Cs, Rs, Ts), next(iter(s_)))}
                                if consistent else None,
                                tuple(totals)))
    return solved, tuple(readings)


def reconstruct(printed: dict | None = None) -> NapkinReconstruction:
    """Rebuild Napkin Math 11.1 from ``printed`` (default :data:`PRINTED`) and check every figure.

    Raises CadenceError if no crash trace fits the printed suffixes or eq. 6 cannot be solved.
    """
    pr = PRINTED if printed is None else printed
    turns = pr["givens"]["turns"]
    strides = tuple(pr["givens"]["strides"])
    suffixes = {k_: tuple(row["lost_suffix_turns"]) for k_, row in pr["per_stride"].items()}
    unordered = candidate_traces(turns, suffixes, ordered=False)
    ordered = candidate_traces(turns, suffixes, ordered=True)
    if not unordered:
        raise CadenceError("no crash trace fits the printed lost suffixes")
    chosen = ordered[0] if len(ordered) == 1 else unordered[0]
    trace = CrashTrace(turns, tuple(chosen), "napkin-11.1 (reconstructed)")
    solved, readings = _solve_readings(trace, pr)
    Cs, Rs, Ts = list(solved)
    c_, r_, t_ = (float(solved[s]) for s in (Cs, Rs, Ts))
    lam = trace.failure_rate_per_turn
    re_ = float(pr["givens"]["reexecution_s_per_turn"])
    k_log = f.logged_stride_turns(c_, lam, r_)
    k_unl = f.unlogged_stride_turns(c_, lam, re_)
    gain = f.logging_stride_gain(r_, re_)
    kw = dict(pause_s=c_, restore_s_per_crash=t_, reconstruction_s_per_turn=r_)
    shown = sorted({1, *strides, round(k_log)})
    ev = evaluate_strides(trace, shown, **kw)
    by_k = {r.stride_turns: r for r in ev.results}
    best_all = evaluate_strides(trace, None, **kw).best

    checks: list[Check] = []

    def check(figure: str, printed_v, computed_v, tol: float | None = EXACT) -> None:
        if tol is None:
            ok = printed_v == computed_v
        else:
            ok = abs(float(printed_v) - float(computed_v)) <= tol
        checks.append(Check(figure, printed_v, computed_v, tol, ok))

    reading = next(r for r in readings if r.name == "whole recovery time")
    for k_, row in pr["per_stride"].items():
        res = by_k[k_]
        check(f"stride {k_}: checkpoints", row["checkpoints"], res.checkpoints, None)
        check(f"stride {k_}: lost suffixes (turns)", tuple(row["lost_suffix_turns"]), res.lost_suffix_turns, None)
        check(f"stride {k_}: reconstruction total (s)", row["reconstruction_total_s"], res.recovery_s)
        check(f"stride {k_}: overhead, eq. 6 (s)", row["overhead_s"], res.overhead_s)
    check("crash rate lambda (per turn)", pr["failure_rate_per_turn"], lam)
    check("logged stride k* (turns), eq. 5", pr["logged_stride_turns"], k_log, TOLERANCE["logged_stride_turns"])
    check("unlogged stride k* at Re = 20 s (turns)", pr["unlogged_stride_turns"], k_unl,
          TOLERANCE["unlogged_stride_turns"])
    check("logging gain sqrt(Re/R)", pr["logging_gain"], gain, TOLERANCE["logging_gain"])
    winner = min((by_k[k_] for k_ in strides), key=lambda r: r.overhead_s)
    check("winning printed stride (turns)", pr["winner_stride_turns"], winner.stride_turns, None)
    check("winning overhead (s)", pr["winner_overhead_s"], winner.overhead_s)
    check("every-turn policy, stride 1 (s), §11.9", pr["every_turn_overhead_s"], by_k[1].overhead_s)
    check("flat minimum: overhead factor at 2x miss", pr["flat_factor_at_2x"], f.flat_minimum_factor(2.0))
    check("k* grows 2x when C is quadrupled", pr["sqrt_knob_factor"],
          f.logged_stride_turns(4 * c_, lam, r_) / k_log)
    check("k* grows 2x when lambda is quartered", pr["sqrt_knob_factor"],
          f.logged_stride_turns(c_, lam / 4, r_) / k_log)
    # every trace that fits gives the same printed figures (at the printed strides and stride 1;
    # other strides, such as 22, do tell the candidates apart)
    same = all(
        abs(trace_overhead(CrashTrace(turns, tuple(t), "candidate"), k_, **kw).overhead_s - by_k[k_].overhead_s)
        <= EXACT for t in unordered for k_ in (1, *strides))
    check("every fitting crash trace gives the printed overheads", True, same, None)

    literal = next(r for r in readings if r.name == "eq. 6 third term only")
    notes = [
        f"crash turns: {len(unordered)} unordered pairs fit the printed suffixes {[list(t) for t in unordered]}; "
        f"reading each printed pair in crash order leaves {[list(t) for t in ordered]}",
        f"C, R and T_restore are fixed by eq. 6 at the three printed overheads alone: C = {solved[Cs]} s, "
        f"R = {solved[Rs]} s/turn, T_restore = {solved[Ts]} s per crash",
        f"the printed 'reconstruction totals' {[row['reconstruction_total_s'] for row in pr['per_stride'].values()]} s "
        f"include the {trace.crashes} x {t_:g} s restores: R * sum(suffix) alone is "
        f"{[round(v, 9) for v in literal.totals_under_solved_givens_s]} s, and no R makes that reading fit "
        f"(consistent: {literal.consistent}); the whole-recovery reading is consistent: {reading.consistent}",
        f"on this particular trace the best stride over 1..{turns} is {best_all.stride_turns} "
        f"({best_all.overhead_s:g} s), while the balance point k* = {k_log:.2f} is an average over Poisson "
        f"traces; stride {round(k_log)} costs {by_k[round(k_log)].overhead_s:g} s here",
    ]
    return NapkinReconstruction(
        turns=turns, strides=strides, crash_turns=trace.crash_turns,
        candidate_traces_unordered=tuple(tuple(t) for t in unordered),
        candidate_traces_ordered=tuple(tuple(t) for t in ordered),
        pause_s=c_, reconstruction_s_per_turn=r_, restore_s_per_crash=t_,
        solved_exact={"pause_s": str(solved[Cs]), "reconstruction_s_per_turn": str(solved[Rs]),
                      "restore_s_per_crash": str(solved[Ts])},
        failure_rate_per_turn=lam, logged_stride_turns=k_log, unlogged_stride_turns=k_unl, logging_gain=gain,
        readings=readings, results=ev.results,
        best_on_trace={"stride_turns": best_all.stride_turns, "overhead_s": best_all.overhead_s},
        checks=tuple(checks), notes=tuple(notes))
