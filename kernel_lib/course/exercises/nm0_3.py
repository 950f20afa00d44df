"""Failure Recovery, Napkin Math 0.3, "What an undetected loop costs", as a seeded exercise (nm0.3).

Source: the Failure Recovery chapter, "Semantic Watchdog Timers" (figure 3's two-state loop, the
state-hash detector of table 6 and the listing), and the worked block Napkin Math 0.3 that follows
the listing: a trajectory caught in a loop, stopped either by the budget's turn ceiling or by a
detector that sees the repeated state a few turns in.

Givens (papermill names): ``first_turn_tokens`` the context the first looping turn sends;
``output_tokens_per_turn`` what the model writes each turn and ``error_tokens_per_turn`` the error
observation appended after it (both stay in the context, so the next turn re-sends them);
``turn_s`` one turn's model call and tool run; ``turn_ceiling`` the budget's turn ceiling;
``detect_turn`` the turn at which the detector sees the repeat (that turn is spent); prices
``input_usd_per_mtok`` / ``output_usd_per_mtok`` in dollars per million, no prefix caching.

Derivation (sympy, :func:`formulas`): turn k (from 1) sends s_0 + (k − 1)·Δ input tokens with
Δ = output + error tokens per turn; summed over n turns that is the arithmetic series
I(n) = n·s_0 + Δ·n(n − 1)/2 (``sp.summation``, not typed in). Output tokens are n·o. Dollars are
I·p_in + O·p_out per million, time n·t. The ceiling costs I(N), the detector I(d); their ratio in
dollars is the block's "cheaper by". Because I(n) grows with n², stopping early saves more than
the ratio of turns N/d.

Alternative readings, graded ``alternative`` (accepted with ``accept_readings``):
``error_only_context`` — only the error observation stays in the context (a runtime that drops the
model's own turns from the history), so Δ = error tokens; ``stop_before_detect_turn`` — the
detector stops the loop before the detect turn's call, so d − 1 turns are spent; ``token_ratio`` —
the "cheaper by" read as a ratio of input tokens instead of dollars. :func:`chapter_figures` lists
each printed figure beside its computed value.

The same quantities measured on the live looping agent (its loop's tokens and dollars up to the
watchdog's first intervention, and projected to the ceiling), beside these:
:mod:`kernel_lib.course.exercises.nm0_3_measure`.
"""

from __future__ import annotations

import functools
import random
from typing import Any, Mapping

import sympy as sp

from kernel_lib.course.exercises._common import Param, Tol, exact, grade, jsonable, validate
from kernel_lib.course.exercises.nm0_1 import usd
from kernel_lib.errors import ConfigError

EXERCISE = "nm0.3"
TITLE = "What an undetected loop costs"

PARAMS = (
    Param("first_turn_tokens", int, 1, 100_000_000, "input tokens the first looping turn sends (s_0)"),
    Param("output_tokens_per_turn", int, 0, 10_000_000, "output tokens the model writes each turn"),
    Param("error_tokens_per_turn", int, 0, 10_000_000, "tokens of the error observation appended each turn"),
    Param("turn_s", float, 0.001, 1e6, "one turn: model call and tool run, s"),
    Param("turn_ceiling", int, 1, 1_000_000, "the budget's turn ceiling N (turns the loop runs undetected)"),
    Param("detect_turn", int, 1, 1_000_000, "the turn d at which the detector sees the repeated state"),
    Param("input_usd_per_mtok", float, 1e-6, 10_000.0, "price of input tokens, USD per million (no prefix caching)"),
    Param("output_usd_per_mtok", float, 0.0, 10_000.0, "price of output tokens, USD per million"),
)

DEFAULTS: dict[str, Any] = {
    "first_turn_tokens": 1000,
    "output_tokens_per_turn": 300,
    "error_tokens_per_turn": 800,
    "turn_s": 10.0,
    "turn_ceiling": 50,
    "detect_turn": 4,
    "input_usd_per_mtok": 3.0,
    "output_usd_per_mtok": 15.0,
}

_MONEY = Tol(abs=5e-7)
GRADED: dict[str, Tol] = {
    "delta_tokens_per_turn": Tol(),
    "ceiling_input_tokens": Tol(),
    "ceiling_usd": _MONEY,
    "ceiling_s": Tol(),
    "detect_input_tokens": Tol(),
    "detect_usd": _MONEY,
    "detect_s": Tol(),
    "cost_ratio": Tol(),
}


def validate_params(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Defaults overridden by ``params``, each coerced and range-checked.

    Raises ConfigError naming the parameter on an unknown name, a wrong type, a value out of its
    range, or a ``detect_turn`` after the ``turn_ceiling`` (the ceiling would stop the loop first).
    """
    p = validate(PARAMS, DEFAULTS, params)
    if p["detect_turn"] > p["turn_ceiling"]:
        raise ConfigError(f"detect_turn {p['detect_turn']} is after turn_ceiling {p['turn_ceiling']}: the ceiling "
                          "would stop the loop first")
    return p


#: The symbols of :func:`formulas`, in this order (all nonnegative).
SYMBOLS = sp.symbols("s_0 o e t N d p_in p_out", nonnegative=True)


@functools.lru_cache(maxsize=1)
def formulas() -> dict[str, sp.Expr]:
    """The closed forms (sympy) in s_0 (first turn's tokens), o, e (output and error tokens per
    turn), t (s per turn), N (turn ceiling), d (detect turn), p_in, p_out (USD per million).

    ``input_tokens(n)`` is derived by summing turn k's context s_0 + (k − 1)Δ over k = 1..n; every
    other quantity substitutes n = N (ceiling), n = d (detector), or an alternative reading's Δ or n.
    """
    s0, o, e, t, N, d, pi, po = SYMBOLS
    n, k, delta = sp.symbols("n k Delta", positive=True, integer=True)
    series = sp.factor(sp.summation(s0 + (k - 1) * delta, (k, 1, n)))

    def tokens_in(turns: sp.Expr, growth: sp.Expr) -> sp.Expr:
        return sp.expand(series.xreplace({n: turns, delta: growth}))

    def usd_of(turns: sp.Expr, growth: sp.Expr) -> sp.Expr:
        return (tokens_in(turns, growth) * pi + turns * o * po) / 10**6

    out: dict[str, sp.Expr] = {"input_tokens_series": series, "delta_tokens_per_turn": o + e}
    for name, turns in (("ceiling", N), ("detect", d)):
        out[f"{name}_input_tokens"] = tokens_in(turns, o + e)
        out[f"{name}_output_tokens"] = turns * o
        out[f"{name}_input_usd"] = tokens_in(turns, o + e) * pi / 10**6
        out[f"{name}_output_usd"] = turns * o * po / 10**6
        out[f"{name}_usd"] = usd_of(turns, o + e)
        out[f"{name}_s"] = turns * t
    out["cost_ratio"] = out["ceiling_usd"] / out["detect_usd"]
    out["token_ratio"] = out["ceiling_input_tokens"] / out["detect_input_tokens"]
    out["time_ratio"] = N / d
    out["saved_usd"] = out["ceiling_usd"] - out["detect_usd"]
    out["saved_s"] = out["ceiling_s"] - out["detect_s"]
    # error_only_context: the model's own output is not re-sent, only the error observations grow the context
    for name, turns in (("ceiling", N), ("detect", d)):
        out[f"error_only_{name}_input_tokens"] = tokens_in(turns, e)
        out[f"error_only_{name}_usd"] = usd_of(turns, e)
    out["error_only_cost_ratio"] = out["error_only_ceiling_usd"] / out["error_only_detect_usd"]
    # stop_before_detect_turn: the detector stops the loop before the detect turn's call: d - 1 turns spent
    out["before_detect_input_tokens"] = tokens_in(d - 1, o + e)
    out["before_detect_usd"] = usd_of(d - 1, o + e)
    out["before_detect_s"] = (d - 1) * t
    return out


def _rational(x: float | int) -> sp.Rational:
    f = exact(x)
    return sp.Rational(f.numerator, f.denominator)


def substitutions(params: Mapping[str, Any] | None = None) -> dict[sp.Symbol, sp.Rational]:
    """``{symbol: exact value}`` for the symbols of :func:`formulas`, from the givens (validated
    first: ConfigError on bad ones), decimals taken as typed."""
    p = validate_params(params)
    names = ("first_turn_tokens", "output_tokens_per_turn", "error_tokens_per_turn", "turn_s", "turn_ceiling",
             "detect_turn", "input_usd_per_mtok", "output_usd_per_mtok")
    return {sym: _rational(p[name]) for sym, name in zip(SYMBOLS, names)}


def _exact_values(p: Mapping[str, Any]) -> dict[str, sp.Expr]:
    subs = substitutions(p)
    return {name: expr.xreplace(subs) for name, expr in formulas().items() if name != "input_tokens_series"}


def _number(name: str, x: sp.Expr) -> int | float:
    """A token count as an int (graded exactly), anything else as a float."""
    return int(x) if "tokens" in name.split("_") else float(x)


def solve(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every quantity Napkin Math 0.3 computes, from the givens (tokens, seconds, USD).

    Graded: the context growth per turn Δ (``delta_tokens_per_turn``); the loop stopped by the
    ceiling (``ceiling_input_tokens``, ``ceiling_usd``, ``ceiling_s``) and by the detector at
    ``detect_turn`` (``detect_input_tokens``, ``detect_usd``, ``detect_s``); how many times
    cheaper the detector is in dollars (``cost_ratio``). Also returned: output tokens and the
    input/output split of each cost, the token and time ratios, what the detector saves, the
    alternative readings' answers. Raises ConfigError for bad givens.
    """
    p = validate_params(params)
    v = {k: _number(k, e) for k, e in _exact_values(p).items()}
    N, d = p["turn_ceiling"], p["detect_turn"]
    quadratic = v["cost_ratio"] > N / d * 1.000001
    decision = "stop_at_first_repeated_state" if d < N else "no_saving"
    text = (f"Left to the ceiling, the loop runs {N} turns: {v['ceiling_input_tokens']:,} input tokens re-sent, "
            f"{usd(v['ceiling_usd'])} and {v['ceiling_s']:,.0f} s ({v['ceiling_s'] / 60:.1f} min). Stopped at turn "
            f"{d}, where the state hash repeats, it costs {v['detect_input_tokens']:,} input tokens, "
            f"{usd(v['detect_usd'])} and {v['detect_s']:,.0f} s: {v['cost_ratio']:.1f}x cheaper in dollars, "
            f"{v['token_ratio']:.1f}x fewer input tokens, {v['time_ratio']:.1f}x less time, saving "
            f"{usd(v['saved_usd'])} per loop. ")
    if quadratic:
        text += (f"The dollar ratio exceeds the {N}/{d} = {N / d:.1f} ratio of turns because every turn re-sends a "
                 "context the loop keeps growing: the loop's cost grows with the square of its length.")
    else:
        text += "With no context growth or no early stop, the saving is only the turns not spent."
    out = {
        "exercise": EXERCISE,
        **{k: v[k] for k in ("delta_tokens_per_turn", "ceiling_input_tokens", "ceiling_output_tokens",
                             "ceiling_input_usd", "ceiling_output_usd", "ceiling_usd", "ceiling_s",
                             "detect_input_tokens", "detect_output_tokens", "detect_input_usd", "detect_output_usd",
                             "detect_usd", "detect_s", "cost_ratio", "token_ratio", "time_ratio", "saved_usd",
                             "saved_s")},
        "ceiling_min": v["ceiling_s"] / 60,
        "decision": decision,
        "decision_text": text,
        "reading": {
            "delta_tokens_per_turn": "each turn's output and its error observation both stay in the context, so "
                                     "the next turn re-sends them: Δ = output + error tokens. Alternative "
                                     "'error_only_context': a runtime that keeps only the observations (the model's "
                                     "turns dropped from the history) grows the context by the error tokens alone.",
            "detect_input_tokens": "the detector sees the repeated state after turn d ran, so d turns are spent (the "
                                   "block's 10,600 tokens are 4 turns). Alternative 'stop_before_detect_turn': a "
                                   "detector that stops the loop before the d-th call spends d − 1 turns.",
            "cost_ratio": "'cheaper' is read in dollars, input and output together: ceiling_usd / detect_usd. "
                          "Alternative 'token_ratio': the ratio of re-sent input tokens, which leaves the output "
                          "tokens (billed linearly in n) out and is larger.",
            "prices": "no prefix caching: every re-sent token is billed at the full input price. Caching lowers the "
                      "price of the re-sent tokens, not the number of turns or the minutes.",
        },
        "alternative": {
            "error_only_context": {
                "delta_tokens_per_turn": p["error_tokens_per_turn"],
                "ceiling_input_tokens": v["error_only_ceiling_input_tokens"],
                "ceiling_usd": v["error_only_ceiling_usd"],
                "detect_input_tokens": v["error_only_detect_input_tokens"],
                "detect_usd": v["error_only_detect_usd"],
                "cost_ratio": v["error_only_cost_ratio"],
            },
            "stop_before_detect_turn": {
                "detect_input_tokens": v["before_detect_input_tokens"],
                "detect_usd": v["before_detect_usd"],
                "detect_s": v["before_detect_s"],
                # d = 1: nothing spent before the first call, no finite ratio
                **({"cost_ratio": v["ceiling_usd"] / v["before_detect_usd"]} if v["before_detect_usd"] else {}),
            },
            "token_ratio": {"cost_ratio": v["token_ratio"]},
        },
    }
    return jsonable(out)


#: Alternative answers filed under other names (none: every reading is nested under its quantities' names).
ALTERNATIVE_ALIASES: dict[str, tuple[str, str]] = {}


def check(params: Mapping[str, Any] | None, answers: Mapping[str, Any]) -> dict[str, Any]:
    """Grade ``answers`` against :func:`solve`: token counts exactly (whole numbers), floats within
    1 % relative, dollars also within half a millionth of a dollar. An answer of a documented
    alternative reading is graded ``alternative`` (see :func:`~kernel_lib.course.exercises.accept_readings`)."""
    return grade(EXERCISE, solve(params), answers, GRADED, ALTERNATIVE_ALIASES)


def chapter_figures() -> list[dict[str, Any]]:
    """Each figure Napkin Math 0.3 prints, beside what its givens (:data:`DEFAULTS`) give, rounded as
    printed: ``[{claim, printed, computed, holds, note}]``. Only the printed text is typed in."""
    s = solve(DEFAULTS)
    d = DEFAULTS
    rounded_ratio = round(s["ceiling_usd"], 2) / round(s["detect_usd"], 2)

    def row(claim: str, printed: str, computed: str, note: str) -> dict[str, Any]:
        return {"claim": claim, "printed": printed, "computed": computed, "holds": computed == printed, "note": note}

    return [
        row("context growth per turn Δ", "1,100 tokens", f"{s['delta_tokens_per_turn']:,} tokens",
            f"{d['output_tokens_per_turn']} output + {d['error_tokens_per_turn']} error tokens"),
        row("input tokens to the ceiling", "1,397,500", f"{s['ceiling_input_tokens']:,}",
            f"{d['turn_ceiling']}·{d['first_turn_tokens']:,} + {s['delta_tokens_per_turn']:,}·"
            f"{d['turn_ceiling']}·{d['turn_ceiling'] - 1}/2"),
        row("cost to the ceiling", "$4.42", f"${s['ceiling_usd']:.2f}",
            f"{usd(s['ceiling_input_usd'])} input + {usd(s['ceiling_output_usd'])} output "
            f"({s['ceiling_output_tokens']:,} tokens)"),
        row("time to the ceiling", "about 8 minutes", f"about {s['ceiling_min']:.0f} minutes",
            f"{s['ceiling_s']:,.0f} s = {s['ceiling_min']:.2f} min"),
        row("input tokens with detection", "10,600", f"{s['detect_input_tokens']:,}",
            f"{d['detect_turn']} turns spent, the detect turn included"),
        row("cost with detection", "$0.05", f"${s['detect_usd']:.2f}",
            f"{usd(s['detect_usd'])} exactly, printed to the cent"),
        row("time with detection", "40 s", f"{s['detect_s']:.0f} s", f"{d['detect_turn']} turns of {d['turn_s']:g} s"),
        row("cheaper by", "about 89×", f"about {s['cost_ratio']:.0f}×",
            f"{s['cost_ratio']:.2f} from the unrounded dollars; the printed, rounded $4.42 / $0.05 give "
            f"{rounded_ratio:.1f}; in input tokens alone the ratio is {s['token_ratio']:.1f}, in time "
            f"{s['time_ratio']:.1f}"),
    ]


_PRICES = ((3.0, 15.0), (0.8, 4.0), (15.0, 75.0), (1.25, 10.0), (2.5, 10.0), (0.15, 0.6), (5.0, 25.0))


def generate(seed: int) -> dict[str, Any]:
    """A seeded variant: another starting context, output and error size, turn time, ceiling
    (20 to 200 turns), detect turn (2 to 8, never after the ceiling) and model price."""
    rng = random.Random(f"nm0.3:{seed}")
    params = {
        "first_turn_tokens": rng.randrange(500, 20_001, 100),
        "output_tokens_per_turn": rng.randrange(50, 2001, 10),
        "error_tokens_per_turn": rng.randrange(100, 6001, 50),
        "turn_s": rng.choice([3.0, 5.0, 8.0, 10.0, 15.0, 20.0, 30.0, 45.0]),
        "turn_ceiling": rng.choice([20, 25, 30, 40, 50, 60, 80, 100, 150, 200]),
        "detect_turn": rng.randint(2, 8),
    }
    params["input_usd_per_mtok"], params["output_usd_per_mtok"] = rng.choice(_PRICES)
    return params
