"""Failure Recovery, Napkin Math 0.1, "Saga log unwinding overheads", as a seeded exercise (nm0.1).

Source: the Failure Recovery chapter, "The Trajectory Saga Pattern" → "Saga compensation stacks",
the worked block Napkin Math 0.1 (the deployment saga T1…T5 whose T5 fails with a 409, unwound by
C4, C3, C2, C1), with table 2 (the sub-transaction states whose transitions are logged) and the
section heading's claim that the unwind costs 17.6× less than the forward path.

Givens (papermill names): ``forward_step_ms`` the duration of each forward step T1…Tn, the last
being the one that fails; ``compensator_ms`` the duration of C1…C(n−1), one per committed step
(teardown, release, clean, firewall unbind by default); ``fsync_ms`` one log barrier;
``fsyncs_per_forward_step`` and ``fsyncs_per_compensator`` the barriers each forward step and each
compensator pop waits for; ``input_tokens`` / ``output_tokens`` the model tokens the forward run
spent, priced at ``input_usd_per_mtok`` / ``output_usd_per_mtok`` dollars per million.

Derivation (sympy, :func:`formulas`): with n forward steps, k = n − 1 committed, Σt the forward
time and Σc the compensators' time, the forward log I/O is n·f_fwd·t_fsync, the unwind's
k·f_comp·t_fsync, the unwind lasts Σc plus its I/O, the trajectory Σt + forward I/O + unwind, and
the log's share is the whole log I/O over that. C2 (the egress IP release) completes after the
compensators popped before it (C_k … C_2) and their barriers. The printed figures that do not follow
from the givens are listed by :func:`chapter_figures`; the readings under which they would are the
``alternative`` answers (graded ``alternative``, accepted with ``accept_readings``).

The same quantities measured on this machine: :mod:`kernel_lib.course.exercises.nm0_1_measure`.
"""

from __future__ import annotations

import functools
import random
from typing import Any, Mapping

import sympy as sp

from kernel_lib.course.exercises._common import Param, Tol, exact, grade, jsonable, validate

EXERCISE = "nm0.1"
TITLE = "Saga log unwinding overheads"

#: The chapter's names of the five forward steps and of their compensators (C_i undoes T_i).
STEP_NAMES = ("provision sandbox", "reserve egress IP", "compile binary", "bind firewall", "publish DNS")
COMPENSATOR_NAMES = ("teardown sandbox", "release egress IP", "clean build", "unbind firewall")

PARAMS = (
    Param("forward_step_ms", list, 0.001, 3_600_000.0,
          "duration of each forward step T1..Tn, ms; the last one fails", min_len=3, max_len=12),
    Param("compensator_ms", list, 0.001, 3_600_000.0,
          "duration of the compensators C1..C(n-1) of the committed steps, ms", min_len=2, max_len=11),
    Param("fsync_ms", float, 0.0, 1000.0, "one log barrier (fsync), ms"),
    Param("fsyncs_per_forward_step", int, 0, 10, "log barriers per forward step"),
    Param("fsyncs_per_compensator", int, 0, 10, "log barriers per compensator pop"),
    Param("input_tokens", int, 0, 100_000_000, "model input tokens the forward run spent"),
    Param("output_tokens", int, 0, 100_000_000, "model output tokens the forward run spent"),
    Param("input_usd_per_mtok", float, 0.0, 10_000.0, "price of input tokens, USD per million"),
    Param("output_usd_per_mtok", float, 0.0, 10_000.0, "price of output tokens, USD per million"),
)

DEFAULTS: dict[str, Any] = {
    "forward_step_ms": [120, 350, 4200, 80, 450],
    "compensator_ms": [45, 220, 15, 10],
    "fsync_ms": 1.2,
    "fsyncs_per_forward_step": 2,
    "fsyncs_per_compensator": 1,
    "input_tokens": 18400,
    "output_tokens": 1250,
    "input_usd_per_mtok": 3.0,
    "output_usd_per_mtok": 15.0,
}

#: The bound the chapter prints for the log's share of the trajectory ("less than 0.3%").
CHAPTER_SHARE_BOUND = 0.003
#: The chapter's network round trip to the regional API (a listed parameter no figure uses), ms.
CHAPTER_T_API_MS = 150.0

GRADED: dict[str, Tol] = {
    "forward_ms": Tol(),
    "forward_fsyncs": Tol(),
    "forward_io_ms": Tol(),
    "unwind_fsyncs": Tol(),
    "unwind_io_ms": Tol(),
    "log_io_ms": Tol(),
    "unwind_ms": Tol(),
    "log_share_of_total": Tol(),
    "chapter_share_claim_holds": Tol(),
    "unwind_speedup": Tol(),
    "ip_release_done_ms": Tol(),
    "input_cost_usd": Tol(abs=5e-7),
    "output_cost_usd": Tol(abs=5e-7),
    "token_cost_usd": Tol(abs=5e-7),
}


def usd(x: float) -> str:
    """Dollars as money: ``$0.07395``, ``$0.0552``, ``$12.50``, ``$1,234.00`` (sub-dollar amounts
    keep their significant cents' digits, up to a millionth of a dollar)."""
    if abs(x) >= 1:
        return f"${x:,.2f}"
    text = f"{x:.6f}".rstrip("0").rstrip(".")
    return "$" + (text if text not in ("", "-0", "0") else "0")


def validate_params(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Defaults overridden by ``params``, checked: ConfigError naming the parameter on a bad name,
    type or range, and when ``compensator_ms`` does not hold one compensator per committed step
    (one fewer than ``forward_step_ms``)."""
    from kernel_lib.errors import ConfigError
    p = validate(PARAMS, DEFAULTS, params)
    n = len(p["forward_step_ms"])
    if len(p["compensator_ms"]) != n - 1:
        raise ConfigError(f"compensator_ms must hold one duration per committed step, {n - 1} for the {n} forward "
                          f"steps of forward_step_ms (the last one fails), got {len(p['compensator_ms'])}")
    return p


_S = sp.symbols("n T_fwd C_sum c_1 f_fwd f_comp t_fsync N_in N_out p_in p_out", nonnegative=True)


@functools.lru_cache(maxsize=1)
def formulas() -> dict[str, sp.Expr]:
    """The closed forms, in the symbols n (forward steps), T_fwd (Σ forward ms), C_sum (Σ
    compensator ms), c_1 (C1's ms), f_fwd, f_comp (barriers per step, per pop), t_fsync (ms),
    N_in, N_out (tokens), p_in, p_out (USD per million tokens)."""
    n, T, C, c1, fw, fc, ts, Ni, No, pi, po = _S
    forward_io = n * fw * ts
    unwind_io = (n - 1) * fc * ts
    unwind = C + unwind_io
    total = T + forward_io + unwind
    return {
        "forward_fsyncs": n * fw,
        "forward_io_ms": forward_io,
        "unwind_fsyncs": (n - 1) * fc,
        "unwind_io_ms": unwind_io,
        "log_io_ms": forward_io + unwind_io,
        "unwind_ms": unwind,
        "trajectory_ms": total,
        "log_share_of_total": (forward_io + unwind_io) / total,
        "unwind_speedup": T / unwind,
        # C_k … C_2 and their pops run before C2 is done (C1, the teardown, is the last pop)
        "ip_release_done_ms": (C - c1) + (n - 2) * fc * ts,
        "input_cost_usd": Ni * pi / 10**6,
        "output_cost_usd": No * po / 10**6,
        "token_cost_usd": Ni * pi / 10**6 + No * po / 10**6,
    }


def _rational(x: float | int) -> sp.Rational:
    f = exact(x)
    return sp.Rational(f.numerator, f.denominator)


def _values(p: Mapping[str, Any]) -> dict[str, Any]:
    """Every formula of :func:`formulas` evaluated exactly for the givens ``p``."""
    n, T, C, c1, fw, fc, ts, Ni, No, pi, po = _S
    subs = {n: len(p["forward_step_ms"]), T: sum(_rational(t) for t in p["forward_step_ms"]),
            C: sum(_rational(c) for c in p["compensator_ms"]), c1: _rational(p["compensator_ms"][0]),
            fw: p["fsyncs_per_forward_step"], fc: p["fsyncs_per_compensator"], ts: _rational(p["fsync_ms"]),
            Ni: p["input_tokens"], No: p["output_tokens"], pi: _rational(p["input_usd_per_mtok"]),
            po: _rational(p["output_usd_per_mtok"])}
    out: dict[str, Any] = {}
    for name, expr in formulas().items():
        v = expr.xreplace(subs)
        out[name] = int(v) if name.endswith("_fsyncs") else float(v)
    return out


def _share_and_claim(log_io_ms: float, total_ms: float) -> tuple[float, bool]:
    share = log_io_ms / total_ms
    return share, share < CHAPTER_SHARE_BOUND


def solve(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every quantity Napkin Math 0.1 computes, from the givens (times in ms, money in USD).

    Graded: the forward time and its barriers (count and ms), the unwind's barriers, the whole log
    I/O, the unwind's duration (compensators plus their barriers), the log's share of the whole
    trajectory (forward, its I/O, and the unwind) and whether it is below the chapter's 0.3 %, how
    many times shorter the unwind is than the forward path, when C2 (the IP release) has completed
    counted from the start of the unwind, and the token cost. Raises ConfigError for bad givens.
    """
    p = validate_params(params)
    v = _values(p)
    n = len(p["forward_step_ms"])
    k = n - 1
    forward_ms = float(sum(_rational(t) for t in p["forward_step_ms"]))
    share, holds = _share_and_claim(v["log_io_ms"], v["trajectory_ms"])

    # the documented alternative readings, each computed by the same formulas
    fwd_io_committed = k * p["fsyncs_per_forward_step"] * float(_rational(p["fsync_ms"]))
    log_committed = fwd_io_committed + v["unwind_io_ms"]
    total_committed = forward_ms + fwd_io_committed + v["unwind_ms"]
    share_committed, holds_committed = _share_and_claim(log_committed, total_committed)
    closing_io = v["unwind_io_ms"] + float(_rational(p["fsync_ms"]))
    closing_unwind = v["unwind_ms"] + float(_rational(p["fsync_ms"]))
    closing_log = v["forward_io_ms"] + closing_io
    closing_share, _ = _share_and_claim(closing_log, forward_ms + v["forward_io_ms"] + closing_unwind)
    reversed_ms = float(sum(_rational(t) for t in p["forward_step_ms"][:-1]))

    alternative = {
        "committed_steps_only": {
            "forward_fsyncs": k * p["fsyncs_per_forward_step"], "forward_io_ms": fwd_io_committed,
            "log_io_ms": log_committed, "log_share_of_total": share_committed,
            "chapter_share_claim_holds": holds_committed},
        "share_of_forward_time": {"log_share_of_total": v["log_io_ms"] / forward_ms,
                                  "chapter_share_claim_holds": v["log_io_ms"] / forward_ms < CHAPTER_SHARE_BOUND},
        "closing_record": {"unwind_fsyncs": v["unwind_fsyncs"] + 1, "unwind_io_ms": closing_io,
                           "log_io_ms": closing_log, "unwind_ms": closing_unwind, "log_share_of_total": closing_share},
        "reversed_steps_only": {"unwind_speedup": reversed_ms / v["unwind_ms"]},
        "ip_release_bound_by_whole_unwind": {"ip_release_done_ms": v["unwind_ms"]},
    }
    dead_loss_ms = forward_ms + v["forward_io_ms"]
    decision = "log_negligible" if share < 0.01 else "log_material"
    out = {
        "exercise": EXERCISE,
        "forward_steps": n,
        "committed_steps": k,
        "forward_ms": forward_ms,
        "forward_fsyncs": v["forward_fsyncs"],
        "forward_io_ms": v["forward_io_ms"],
        "unwind_fsyncs": v["unwind_fsyncs"],
        "unwind_io_ms": v["unwind_io_ms"],
        "log_io_ms": v["log_io_ms"],
        "compensators_ms": float(sum(_rational(c) for c in p["compensator_ms"])),
        "unwind_ms": v["unwind_ms"],
        "trajectory_ms": v["trajectory_ms"],
        "log_share_of_total": share,
        "chapter_share_claim_holds": holds,
        "unwind_speedup": v["unwind_speedup"],
        "ip_release_done_ms": v["ip_release_done_ms"],
        "input_cost_usd": v["input_cost_usd"],
        "output_cost_usd": v["output_cost_usd"],
        "token_cost_usd": v["token_cost_usd"],
        "dead_loss_ms": dead_loss_ms,
        "decision": decision,
        "decision_text": (
            f"The log's barriers cost {v['log_io_ms']:g} ms ({v['forward_fsyncs']} forward, {v['unwind_fsyncs']} "
            f"in the unwind), {share:.3%} of the {v['trajectory_ms']:,.1f} ms trajectory: "
            + ("negligible beside the services' own latencies. " if decision == "log_negligible" else
               "a cost worth engineering (group commit, fewer barriers per step). ")
            + f"The unwind takes {v['unwind_ms']:,.1f} ms, {v['unwind_speedup']:.1f}× less than the "
            f"{forward_ms:,.0f} ms forward path, and the egress IP is released {v['ip_release_done_ms']:,.1f} ms "
            f"after the unwind starts. What the failure destroys for good is the forward work: "
            f"{dead_loss_ms:,.1f} ms of wall-clock and {usd(v['token_cost_usd'])} of model tokens "
            f"({usd(v['input_cost_usd'])} input + {usd(v['output_cost_usd'])} output)."),
        "reading": {
            "forward_fsyncs": f"every one of the {n} forward steps is charged {p['fsyncs_per_forward_step']} "
                              "barriers, as the chapter does (5 × 2), although the failing step never commits nor "
                              "registers a compensator; the runtime still logs its intent and its FAILED record. "
                              f"Alternative 'committed_steps_only': only the {k} committed steps.",
            "log_share_of_total": "the log's I/O over the whole trajectory's wall-clock: the forward steps, their "
                                  "barriers and the unwind. Alternative 'share_of_forward_time': over the forward "
                                  "steps' time alone.",
            "unwind_fsyncs": "one barrier set per compensator pop, as the chapter counts; the runtime here also "
                             "writes one closing record (ABORT_CONSISTENT) with a barrier of its own: "
                             "alternative 'closing_record'.",
            "unwind_speedup": "forward time (without its barriers) over unwind time, the section heading's 17.6×. "
                              "Alternative 'reversed_steps_only': only the committed steps the unwind reverses.",
            "ip_release_done_ms": "C2 completes after C_k … C3 and itself, each followed by its pop's barriers; "
                                  "the chapter's 'within 295 ms' is the whole unwind: alternative "
                                  "'ip_release_bound_by_whole_unwind'.",
        },
        "alternative": alternative,
    }
    return jsonable(out)


#: Alternative answers filed under other names (none: every reading is nested under its quantity's name).
ALTERNATIVE_ALIASES: dict[str, tuple[str, str]] = {}


def check(params: Mapping[str, Any] | None, answers: Mapping[str, Any]) -> dict[str, Any]:
    """Grade ``answers`` against :func:`solve` (floats within 1 % relative, dollars also within half a
    millionth absolute; counts and the yes/no claim exactly)."""
    return grade(EXERCISE, solve(params), answers, GRADED, ALTERNATIVE_ALIASES)


def chapter_figures() -> list[dict[str, Any]]:
    """Each figure Napkin Math 0.1 (and its section's heading) prints, beside what its own givens
    give: ``[{claim, printed, computed, holds, note}]``. Computed from :data:`DEFAULTS`."""
    s = solve(DEFAULTS)
    n = s["forward_steps"]
    tokens = DEFAULTS["input_tokens"] + DEFAULTS["output_tokens"]
    share_fwd = s["alternative"]["share_of_forward_time"]["log_share_of_total"]
    committed = s["alternative"]["committed_steps_only"]
    with_api = s["log_io_ms"] / (s["trajectory_ms"] + CHAPTER_T_API_MS)
    return [
        {"claim": "trajectory length", "printed": "6-step", "computed": f"{n} steps listed", "holds": n == 6,
         "note": f"the scenario lists T_1 … T_{n} and every later figure uses {n} forward steps (5 × 2 barriers); "
                 "'6-step' matches nothing in the block"},
        {"claim": "forward time", "printed": "5,200 ms", "computed": f"{s['forward_ms']:,.0f} ms",
         "holds": s["forward_ms"] == 5200, "note": "sum of the five step durations"},
        {"claim": "forward barriers", "printed": "10 writes, 12 ms",
         "computed": f"{s['forward_fsyncs']} writes, {s['forward_io_ms']:g} ms", "holds": s["forward_fsyncs"] == 10,
         "note": f"{n} × 2 charges the failing T_{n} for a COMMITTED record and a C_{n} it never gets; by the block's "
                 f"own wording only {n - 1} steps commit ({committed['forward_fsyncs']} writes, "
                 f"{committed['forward_io_ms']:g} ms)"},
        {"claim": "unwind barriers", "printed": "4 writes, 4.8 ms",
         "computed": f"{s['unwind_fsyncs']} writes, {s['unwind_io_ms']:g} ms", "holds": s["unwind_fsyncs"] == 4,
         "note": "one per pop; a runtime that also records the unwind's end adds one more"},
        {"claim": "log I/O", "printed": "16.8 ms", "computed": f"{s['log_io_ms']:g} ms",
         "holds": abs(s["log_io_ms"] - 16.8) < 1e-9, "note": "12 + 4.8"},
        {"claim": "log share of the trajectory", "printed": "less than 0.3%",
         "computed": f"{s['log_share_of_total']:.3%} of {s['trajectory_ms']:,.1f} ms "
                     f"({share_fwd:.3%} of the forward time)",
         "holds": s["chapter_share_claim_holds"],
         "note": f"{s['log_io_ms']:g} ms is more than 0.3 % under either denominator; the bound holds only if the "
                 f"failing step's barriers are dropped ({committed['log_io_ms']:g} ms, "
                 f"{committed['log_share_of_total']:.3%}) or if unstated time is added, e.g. the never-used "
                 f"t_api = {CHAPTER_T_API_MS:g} ms once ({s['log_io_ms']:g} / "
                 f"{s['trajectory_ms'] + CHAPTER_T_API_MS:,.1f} ms = {with_api:.3%})"},
        {"claim": "unwind time", "printed": "294.8 ms", "computed": f"{s['unwind_ms']:g} ms",
         "holds": abs(s["unwind_ms"] - 294.8) < 1e-9, "note": "10 + 15 + 220 + 45 + 4.8"},
        {"claim": "unwind vs forward (heading)", "printed": "17.6× less",
         "computed": f"{s['unwind_speedup']:.2f}×", "holds": round(s["unwind_speedup"], 1) == 17.6,
         "note": "5,200 / 294.8; over only the four steps the unwind reverses it is "
                 f"{s['alternative']['reversed_steps_only']['unwind_speedup']:.2f}×"},
        {"claim": "IP released", "printed": "within 295 ms of failure",
         "computed": f"{s['ip_release_done_ms']:g} ms", "holds": s["ip_release_done_ms"] <= 295,
         "note": "true but loose: C2 is the third pop (after C4 and C3), done at 10 + 15 + 220 + 3 × 1.2 ms; "
                 "295 ms is when C1 ends the whole unwind"},
        {"claim": "token cost", "printed": "$0.07395 (≈ $0.074)", "computed": usd(s["token_cost_usd"]),
         "holds": abs(s["token_cost_usd"] - 0.07395) < 1e-12, "note": "$0.0552 input + $0.01875 output"},
        {"claim": "tokens burned", "printed": "tens of thousands", "computed": f"{tokens:,}",
         "holds": tokens >= 20_000, "note": "18,400 + 1,250 is just under twenty thousand"},
        {"claim": "unused given", "printed": "t_api = 150 ms", "computed": "not used by any figure",
         "holds": False, "note": "the API round trip is listed as a parameter, but the step durations already "
                                 "include their calls and no formula uses it"},
    ]


def generate(seed: int) -> dict[str, Any]:
    """A seeded variant of the deployment saga: the same five steps and four compensators with other
    durations, another barrier cost and barrier counts, other token counts and prices."""
    rng = random.Random(f"nm0.1:{seed}")
    forward = [rng.randrange(60, 301), rng.randrange(150, 801), rng.randrange(1500, 9001, 10),
               rng.randrange(30, 201), rng.randrange(200, 901)]
    comps = [rng.randrange(20, 151), rng.randrange(100, 401), rng.randrange(5, 41), rng.randrange(5, 31)]
    prices = rng.choice([(3.0, 15.0), (0.8, 4.0), (15.0, 75.0), (1.25, 10.0), (2.5, 10.0), (0.15, 0.6)])
    return {
        "forward_step_ms": forward,
        "compensator_ms": comps,
        "fsync_ms": rng.choice([0.05, 0.2, 0.5, 0.8, 1.2, 2.0, 4.0, 8.0]),
        "fsyncs_per_forward_step": rng.choice([1, 2, 2, 3]),
        "fsyncs_per_compensator": rng.choice([1, 1, 2]),
        "input_tokens": rng.randrange(4000, 80_001, 100),
        "output_tokens": rng.randrange(300, 6001, 50),
        "input_usd_per_mtok": prices[0],
        "output_usd_per_mtok": prices[1],
    }
