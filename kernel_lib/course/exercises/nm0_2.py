"""Failure Recovery, Napkin Math 0.2, "Forward repair vs. compensate and rerun", as a seeded exercise (nm0.2).

Source: the Failure Recovery chapter, "Forward Recovery" → "Dynamic arbitration: The recovery policy
function" (gate 3, economic amortization: the unwind cost U(Σ) = Σ Cost(C_j) and the expected cost of
trying forward repair first, Cost(a_repair) + (1 − P(success))·U(Σ)) and the worked block Napkin Math
0.2 that follows it (a six-step migration whose last step fails on a port typed as a string).

Givens (papermill names): ``forward_s`` how long the committed forward steps took and
``compensation_s`` how long their compensators take together (they spend no model tokens); the
forward steps billed ``input_tokens`` / ``output_tokens`` at ``input_usd_per_mtok`` /
``output_usd_per_mtok`` dollars per million. One repair call reads ``repair_input_tokens`` and writes
``repair_output_tokens`` at ``decode_tokens_per_s``, and the corrected step then validates in
``validation_s``. ``repair_success_p`` is the chance that one repair attempt fixes the step.

Derivation (sympy, :func:`formulas`): backing out costs the unwind U (the compensators) plus the
rerun R of the forward steps: U + R seconds, and in dollars only the rerun's tokens (U is free of
tokens). One repair attempt costs c_r = decode (output tokens / decode rate) + validation seconds,
and its own tokens in dollars. Trying repair first costs c_r always and, when the attempt fails
(probability 1 − p), the unwind and rerun as well: E = c_r + (1 − p)(U + R). Setting E equal to
U + R and solving for p gives the break-even p* = c_r / (U + R), in seconds and in dollars. Repair
first is the choice when p is above both break-evens (see :func:`solve` for the rule when they
disagree).

The chapter's displayed gate-3 formula charges a failed repair only U(Σ), the unwind; under that
reading (alternative ``unwind_only``) the rerun is left out on both sides and p* = c_r / U. The
napkin block itself uses U + R. :func:`chapter_figures` lists every printed figure beside its
computed value.
"""

from __future__ import annotations

import functools
import random
from typing import Any, Mapping

import sympy as sp

from kernel_lib.course.exercises._common import Param, Tol, exact, grade, jsonable, validate
from kernel_lib.course.exercises.nm0_1 import usd

EXERCISE = "nm0.2"
TITLE = "Forward repair vs. compensate and rerun"

PARAMS = (
    Param("forward_s", float, 0.001, 1e6, "duration of the committed forward steps T1..T(n-1), s"),
    Param("compensation_s", float, 0.001, 1e6, "duration of their compensators together (no model tokens), s"),
    Param("input_tokens", int, 1, 1_000_000_000, "model input tokens the forward steps billed"),
    Param("output_tokens", int, 0, 1_000_000_000, "model output tokens the forward steps billed"),
    Param("repair_input_tokens", int, 0, 100_000_000, "input tokens one repair call reads"),
    Param("repair_output_tokens", int, 0, 100_000_000, "output tokens one repair call writes"),
    Param("decode_tokens_per_s", float, 0.01, 1e6, "output tokens the model decodes per second"),
    Param("validation_s", float, 0.0, 1e5, "time to validate the corrected step, s"),
    Param("input_usd_per_mtok", float, 1e-6, 10_000.0, "price of input tokens, USD per million"),
    Param("output_usd_per_mtok", float, 0.0, 10_000.0, "price of output tokens, USD per million"),
    Param("repair_success_p", float, 0.0, 1.0, "probability that one repair attempt fixes the step"),
)

DEFAULTS: dict[str, Any] = {
    "forward_s": 46.0,
    "compensation_s": 40.6,
    "input_tokens": 38500,
    "output_tokens": 3100,
    "repair_input_tokens": 2390,
    "repair_output_tokens": 180,
    "decode_tokens_per_s": 50.0,
    "validation_s": 0.5,
    "input_usd_per_mtok": 3.0,
    "output_usd_per_mtok": 15.0,
    "repair_success_p": 0.5,
}

_MONEY = Tol(abs=5e-7)
GRADED: dict[str, Tol] = {
    "unwind_rerun_s": Tol(),
    "unwind_rerun_usd": _MONEY,
    "repair_s": Tol(),
    "repair_usd": _MONEY,
    "breakeven_p_time": Tol(),
    "breakeven_p_dollars": Tol(),
    "repair_first_expected_s": Tol(),
    "repair_first_expected_usd": _MONEY,
    "repair_first": Tol(),
}

#: How close (relative) a seeded success probability may come to a break-even: closer and the
#: decision would hinge on rounding, so :func:`generate` draws again.
_TIE_MARGIN = 0.03


def validate_params(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Defaults overridden by ``params``, each coerced and range-checked.

    Raises ConfigError naming the parameter on an unknown name, a wrong type or a value out of its
    range (times must be positive; the rerun must cost something: at least one input token at a
    positive price, so the dollar break-even exists).
    """
    return validate(PARAMS, DEFAULTS, params)


#: The symbols of :func:`formulas`, in this order (all nonnegative).
SYMBOLS = sp.symbols("T_fwd U N_in N_out n_in n_out r_dec t_val p_in p_out p", nonnegative=True)


@functools.lru_cache(maxsize=1)
def formulas() -> dict[str, sp.Expr]:
    """The closed forms (sympy expressions) in the symbols T_fwd (forward s), U (compensation s),
    N_in, N_out (forward tokens), n_in, n_out (repair tokens), r_dec (tokens/s), t_val (s), p_in,
    p_out (USD per million tokens) and p (repair success probability).

    The break-evens are solved, not typed: ``sp.solve`` of E_repair_first(p) = E_backward for p, on
    time and on dollars, under the napkin's reading (backward = unwind + rerun) and under the
    displayed formula's (backward = unwind only).
    """
    T, U, Ni, No, ni, no, r, tv, pi, po, p = SYMBOLS
    rerun_usd = Ni * pi / 10**6 + No * po / 10**6
    backward_s, backward_usd = U + T, 0 + rerun_usd          # compensators spend no tokens
    repair_s = no / r + tv
    repair_usd = ni * pi / 10**6 + no * po / 10**6

    def expected(c: sp.Expr, b: sp.Expr) -> sp.Expr:
        return c + (1 - p) * b

    # solved once for a generic attempt cost c and backing-out cost b (both positive), then specialised
    c_, b_ = sp.symbols("c b", positive=True)
    (root,) = sp.solve(sp.Eq(expected(c_, b_), b_), p)

    def breakeven(c: sp.Expr, b: sp.Expr) -> sp.Expr:
        return sp.factor(root.xreplace({c_: c, b_: b}))

    return {
        "rerun_input_usd": Ni * pi / 10**6,
        "rerun_output_usd": No * po / 10**6,
        "unwind_rerun_s": backward_s,
        "unwind_rerun_usd": backward_usd,
        "repair_decode_s": no / r,
        "repair_s": repair_s,
        "repair_input_usd": ni * pi / 10**6,
        "repair_output_usd": no * po / 10**6,
        "repair_usd": repair_usd,
        "breakeven_p_time": breakeven(repair_s, backward_s),
        "breakeven_p_dollars": breakeven(repair_usd, backward_usd),
        "repair_first_expected_s": expected(repair_s, backward_s),
        "repair_first_expected_usd": expected(repair_usd, backward_usd),
        # the displayed formula's reading: a failed repair costs the unwind U only, and so does backing out
        "unwind_only_breakeven_p_time": breakeven(repair_s, U),
        "unwind_only_expected_s": expected(repair_s, U),
        "unwind_only_expected_usd": expected(repair_usd, 0),
    }


def _rational(x: float | int) -> sp.Rational:
    f = exact(x)
    return sp.Rational(f.numerator, f.denominator)


def substitutions(params: Mapping[str, Any] | None = None) -> dict[sp.Symbol, sp.Rational]:
    """``{symbol: exact value}`` for the symbols of :func:`formulas`, from the givens (validated
    first: ConfigError on bad ones). Decimals are taken as typed (46.0, 0.5 as exact rationals), so
    ``formulas()[name].xreplace(substitutions(params))`` is the exact answer."""
    p = validate_params(params)
    T, U, Ni, No, ni, no, r, tv, pi, po, ps = SYMBOLS
    return {T: _rational(p["forward_s"]), U: _rational(p["compensation_s"]), Ni: sp.Integer(p["input_tokens"]),
            No: sp.Integer(p["output_tokens"]), ni: sp.Integer(p["repair_input_tokens"]),
            no: sp.Integer(p["repair_output_tokens"]), r: _rational(p["decode_tokens_per_s"]),
            tv: _rational(p["validation_s"]), pi: _rational(p["input_usd_per_mtok"]),
            po: _rational(p["output_usd_per_mtok"]), ps: _rational(p["repair_success_p"])}


def _exact_values(p: Mapping[str, Any]) -> dict[str, sp.Expr]:
    """Every formula of :func:`formulas` as an exact rational for the givens ``p``."""
    subs = substitutions(p)
    return {name: expr.xreplace(subs) for name, expr in formulas().items()}


def solve(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every quantity Napkin Math 0.2 computes, from the givens (times in s, money in USD,
    probabilities as fractions).

    Graded: the cost of backing out, unwind plus rerun (``unwind_rerun_s``, ``unwind_rerun_usd``);
    one repair attempt (``repair_s``, ``repair_usd``); the break-even success probabilities
    (``breakeven_p_time``, ``breakeven_p_dollars``); the expected cost of trying repair first at
    ``repair_success_p`` (``repair_first_expected_s``, ``repair_first_expected_usd``); and whether to
    try repair first (``repair_first``): yes when p is above the break-even on time and on dollars.
    When the two disagree the answer is no: a repair must pay on both budgets, the chapter's "about
    6 percent" bar is the larger of its two break-evens, and no exchange rate between seconds and
    dollars is given. A break-even above 1 means repair never pays. Raises ConfigError for bad givens.
    """
    p = validate_params(params)
    x = _exact_values(p)
    ps = _rational(p["repair_success_p"])
    on_time, on_dollars = bool(ps > x["breakeven_p_time"]), bool(ps > x["breakeven_p_dollars"])
    repair_first = on_time and on_dollars
    v = {k: float(e) for k, e in x.items()}
    saving_s = v["unwind_rerun_s"] - v["repair_first_expected_s"]
    saving_usd = v["unwind_rerun_usd"] - v["repair_first_expected_usd"]
    bar = max(v["breakeven_p_time"], v["breakeven_p_dollars"])
    if on_time == on_dollars:
        agreement = "both"
    else:
        agreement = "time_only" if on_time else "dollars_only"
    decision = "repair_first" if repair_first else "compensate_and_rerun"
    pct = p["repair_success_p"]

    def share(q: float) -> str:
        return f"{q:.1%}" if q <= 1 else f"{q:.1%} (above 1: repair never pays)"

    if repair_first:
        verdict = (f"Try the repair first: at p = {pct:.0%} it is above both break-evens, and the expected cost of "
                   f"repairing first is {v['repair_first_expected_s']:,.1f} s and "
                   f"{usd(v['repair_first_expected_usd'])} against {v['unwind_rerun_s']:,.1f} s and "
                   f"{usd(v['unwind_rerun_usd'])} for unwinding at once (saving {saving_s:,.1f} s and "
                   f"{usd(saving_usd)} on average).")
    elif agreement == "both":
        verdict = (f"Compensate and rerun: at p = {pct:.0%} a repair attempt does not pay on either budget; "
                   f"trying it first would cost {v['repair_first_expected_s']:,.1f} s and "
                   f"{usd(v['repair_first_expected_usd'])} on average against {v['unwind_rerun_s']:,.1f} s and "
                   f"{usd(v['unwind_rerun_usd'])}.")
    else:
        wins, loses = ("time", "dollars") if on_time else ("dollars", "time")
        verdict = (f"Compensate and rerun: at p = {pct:.0%} repair first would save {wins} but cost {loses}; "
                   f"with no exchange rate between seconds and dollars, a repair attempt has to pay on both "
                   f"budgets, so the bar is the larger break-even, {share(bar)}.")
    out = {
        "exercise": EXERCISE,
        "unwind_s": float(_rational(p["compensation_s"])),
        "rerun_s": float(_rational(p["forward_s"])),
        "unwind_rerun_s": v["unwind_rerun_s"],
        "rerun_input_usd": v["rerun_input_usd"],
        "rerun_output_usd": v["rerun_output_usd"],
        "unwind_rerun_usd": v["unwind_rerun_usd"],
        "repair_decode_s": v["repair_decode_s"],
        "repair_s": v["repair_s"],
        "repair_input_usd": v["repair_input_usd"],
        "repair_output_usd": v["repair_output_usd"],
        "repair_usd": v["repair_usd"],
        "breakeven_p_time": v["breakeven_p_time"],
        "breakeven_p_dollars": v["breakeven_p_dollars"],
        "repair_first_expected_s": v["repair_first_expected_s"],
        "repair_first_expected_usd": v["repair_first_expected_usd"],
        "repair_first_saving_s": saving_s,
        "repair_first_saving_usd": saving_usd,
        "repair_pays_on_time": on_time,
        "repair_pays_on_dollars": on_dollars,
        "budgets_agree": agreement == "both",
        "repair_first": repair_first,
        "decision": decision,
        "decision_text": (
            f"Backing out costs {v['unwind_rerun_s']:,.1f} s ({p['compensation_s']:g} s of compensators and a "
            f"{p['forward_s']:g} s rerun) and {usd(v['unwind_rerun_usd'])} of rerun tokens; one repair attempt costs "
            f"{v['repair_s']:,.2f} s and {usd(v['repair_usd'])}. Repair pays once one attempt succeeds more often than "
            f"{share(v['breakeven_p_time'])} on time and {share(v['breakeven_p_dollars'])} on dollars. " + verdict),
        "reading": {
            "unwind_rerun_s": "backing out means compensating the committed steps and then running them again, "
                              "U + R, as the napkin block counts it. The gate-3 formula displayed just before it "
                              "charges a failed repair only U(Σ), the unwind: alternative 'unwind_only', where the "
                              "rerun is left out on both sides, the break-even on time is c_r / U and, since the "
                              "compensators spend no tokens, repair never pays in dollars (that reading has no "
                              "dollar break-even).",
            "repair_s": "decoding the repair's output tokens at the given rate plus validating the corrected step; "
                        "reading the repair's input is taken as free of time, as the chapter does.",
            "repair_first_expected_s": "the repair attempt is always paid; when it fails (1 − p) the unwind and the "
                                       "rerun are paid as well. The failing step's own retry is paid on both paths "
                                       "and left out of both.",
            "repair_first": "repair first only when p exceeds the break-even on time and on dollars; when the two "
                            "disagree, compensate and rerun.",
        },
        "alternative": {
            "unwind_only": {
                "unwind_rerun_s": float(_rational(p["compensation_s"])),
                "unwind_rerun_usd": 0.0,
                "breakeven_p_time": v["unwind_only_breakeven_p_time"],
                "repair_first_expected_s": v["unwind_only_expected_s"],
                "repair_first_expected_usd": v["unwind_only_expected_usd"],
            },
        },
    }
    return jsonable(out)


#: Alternative answers filed under other names (none: the reading is nested under its quantities' names).
ALTERNATIVE_ALIASES: dict[str, tuple[str, str]] = {}


def check(params: Mapping[str, Any] | None, answers: Mapping[str, Any]) -> dict[str, Any]:
    """Grade ``answers`` against :func:`solve`: floats within 1 % relative, dollars also within half a
    millionth of a dollar absolute, the yes/no ``repair_first`` exactly. An answer of the
    ``unwind_only`` reading is graded ``alternative`` (see :func:`~kernel_lib.course.exercises.accept_readings`)."""
    return grade(EXERCISE, solve(params), answers, GRADED, ALTERNATIVE_ALIASES)


def _pct(q: float) -> str:
    return f"{q * 100:.0f} percent"


def chapter_figures() -> list[dict[str, Any]]:
    """Each figure Napkin Math 0.2 prints, beside what its givens (:data:`DEFAULTS`) give, rounded as
    printed: ``[{claim, printed, computed, holds, note}]``. Nothing here is typed in but the printed
    text; every computed value comes from :func:`solve`."""
    s = solve(DEFAULTS)
    alt = s["alternative"]["unwind_only"]
    d = DEFAULTS

    def row(claim: str, printed: str, computed: str, note: str) -> dict[str, Any]:
        return {"claim": claim, "printed": printed, "computed": computed, "holds": computed == printed, "note": note}

    def money(x: float) -> str:
        return f"${x:.3f}"

    def sec(x: float) -> str:
        return f"{x:.1f} s"

    return [
        row("unwind + rerun time (U + R)", "86.6 s", sec(s["unwind_rerun_s"]),
            f"{d['compensation_s']:g} s of compensators + {d['forward_s']:g} s of forward steps run again"),
        row("unwind + rerun dollars", "$0.162", money(s["unwind_rerun_usd"]),
            f"only the rerun bills tokens: {usd(s['rerun_input_usd'])} input + {usd(s['rerun_output_usd'])} output"),
        row("one repair attempt, time (c_r)", "4.1 s", sec(s["repair_s"]),
            f"{s['repair_decode_s']:g} s decoding {d['repair_output_tokens']} tokens at {d['decode_tokens_per_s']:g}/s "
            f"+ {d['validation_s']:g} s validation (the block only says 'under a second'; {d['validation_s']:g} s is "
            "what makes its 4.1 s)"),
        row("one repair attempt, dollars", "$0.010", money(s["repair_usd"]),
            f"{usd(s['repair_usd'])} exactly ({usd(s['repair_input_usd'])} input + {usd(s['repair_output_usd'])} "
            "output), printed to a tenth of a cent"),
        row("break-even on time", "5 percent", _pct(s["breakeven_p_time"]),
            f"c_r / (U + R) = {s['breakeven_p_time']:.2%}"),
        row("break-even on dollars", "6 percent", _pct(s["breakeven_p_dollars"]),
            f"c_r / (U + R) in dollars = {s['breakeven_p_dollars']:.2%}"),
        row("the bar for repairing first", "about 6 percent",
            "about " + _pct(max(s["breakeven_p_time"], s["breakeven_p_dollars"])),
            "the larger of the two break-evens: repair has to pay on both budgets"),
        row(f"expected cost of repair first at p = {d['repair_success_p']:g}, time", "47.4 s",
            sec(s["repair_first_expected_s"]), f"c_r + (1 − p)(U + R); under the displayed formula's U(Σ) alone it "
                                               f"would be {sec(alt['repair_first_expected_s'])}"),
        row(f"expected cost of repair first at p = {d['repair_success_p']:g}, dollars", "$0.091",
            money(s["repair_first_expected_usd"]),
            f"{usd(s['repair_first_expected_usd'])}; under U(Σ) alone it would be only the repair's "
            f"{usd(alt['repair_first_expected_usd'])}"),
        {"claim": "gate 3's displayed formula against the block", "printed": "Cost(a_repair) + (1 − P)·U(Σ)",
         "computed": f"with U(Σ) alone: p* = {alt['breakeven_p_time']:.1%} on time, none on dollars",
         "holds": False,
         "note": "the formula charges a failed repair the unwind only, while the block's figures all use "
                 "U + R (unwind and rerun); read literally it more than doubles the time bar and, since compensators "
                 "spend no tokens, repair could never pay in dollars"},
    ]


_PRICES = ((3.0, 15.0), (0.8, 4.0), (15.0, 75.0), (1.25, 10.0), (2.5, 10.0), (0.15, 0.6), (5.0, 25.0))


def generate(seed: int) -> dict[str, Any]:
    """A seeded variant: the failure arrives after 1 to 9 committed steps (so the forward time,
    compensations and tokens grow with the work done), another model price and decode rate, another
    repair size, validation time and success probability. The success probability is kept clear of
    both break-evens, so the decision flips between seeds but never hinges on rounding."""
    rng = random.Random(f"nm0.2:{seed}")
    steps = rng.randint(1, 9)
    forward = [rng.uniform(2.0, 15.0) for _ in range(steps)]
    params = {
        "forward_s": round(sum(forward), 1),
        "compensation_s": round(sum(f * rng.uniform(0.2, 1.1) for f in forward), 1),
        "input_tokens": sum(rng.randrange(2000, 12001, 100) for _ in range(steps)),
        "output_tokens": sum(rng.randrange(100, 1201, 10) for _ in range(steps)),
        "repair_input_tokens": rng.randrange(800, 8001, 10),
        "repair_output_tokens": rng.randrange(60, 1201, 10),
        "decode_tokens_per_s": rng.choice([20.0, 30.0, 50.0, 80.0, 120.0]),
        "validation_s": rng.choice([0.1, 0.3, 0.5, 1.0, 2.0, 5.0]),
    }
    params["compensation_s"] = max(params["compensation_s"], 0.1)
    params["input_usd_per_mtok"], params["output_usd_per_mtok"] = rng.choice(_PRICES)
    x = _exact_values({**params, "repair_success_p": 0.5})
    edges = [float(x["breakeven_p_time"]), float(x["breakeven_p_dollars"])]
    choices = [0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
    rng.shuffle(choices)
    # two break-evens rule out at most two of these twelve values each
    params["repair_success_p"] = next(ps for ps in choices
                                      if all(abs(ps - e) > _TIE_MARGIN * max(e, ps) for e in edges))
    return params
