"""§11.12 exercise 7, "Second lighthouse: retention for the research agent" (Intermediate).

Uses §11.8 (retention lifetimes, content-addressed payloads) and the bill of Napkin Math 11.2, priced by
:mod:`kernel_lib.retention.pricing`; the investigator's question uses §11.6.1 (folding the recorded projection),
§11.6.2 (harness regression replay), §11.6.3 (counterfactual branches) and table 6 of §11.7.1.

Givens (papermill names): ``turns`` of one research trajectory, ``pages`` fetched in it,
``envelope_kb_per_turn`` and ``observation_kb_per_turn`` logged per turn (the observation is the
bounded text the model received), ``page_kb_raw`` mean size of one raw page, ``usd_per_gb_month``
storage price, ``replay_months`` the replay promise, ``attempt_cost_usd`` one attempt,
``raw_page_months`` the diagnostic window proposed for raw pages, ``trajectories`` in the fleet.

Units: 1 KB = 1000 B, 1 GB = 10^9 B (SI, see :mod:`kernel_lib.retention.pricing`); a month is a twelfth of a
year; shares are fractions (0.0055, not 0.55 %).

Readings (``solve()["reading"]``, alternatives' numbers in ``["alternative"]``): the recovery and replay
inputs are the envelopes and the delivered observations (the research agent has no workspace, and the
raw pages were never delivered); "a year's retention" is the replay promise, ``replay_months``, which
is 12 at the defaults; "full retention" keeps every class for the replay promise; the fleet's annual
bill is ``trajectories`` x one trajectory's lifetime bill (a year's cohort, equal by Little's law to the
steady-state yearly bill when that many start each year); "notebook 11.2" is Napkin Math 11.2.

Checking: :func:`check` grades with :func:`kernel_lib.course.exercises._common.grade` and adds a ``hint`` to a
wrong answer that matches a known slip (binary GiB for GB, one month for the whole promise, months
counted as years, percent for a fraction, cents for dollars, one trajectory for the fleet, a wrong
choice with a reason). :func:`format_report` prints the common report and those hints.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import Any

import kernel_lib.retention.pricing as rt
from kernel_lib.errors import ConfigError
from kernel_lib.course.exercises._common import Param, Tol, grade, jsonable, validate
from kernel_lib.course.exercises._common import format_report as _common_format_report

EXERCISE = "11.7"
TITLE = "Second lighthouse: retention for the research agent"

METHODS = ("fold_recorded_projection", "regression_replay", "fresh_rerun")
BOUNDARIES = ("assembled_model_input", "model_response", "harness_decision", "tool_observation")  # table 6 rows
EVIDENCE = ("envelopes_and_observations", "envelopes_only", "raw_pages", "final_answer")
BRANCH_ADDS = ("effect_in_this_trajectory", "general_reliability", "delivered_input")

#: Which §11.8.1 lifetime a class's bytes serve once the run is over.
RETAINED_FOR = {"envelopes": "historical_replay", "observations": "historical_replay", "workspace": "historical_replay",
                "raw_pages": "diagnostics"}

PARAMS = (
    Param("turns", int, 1, 100_000, "turns in one research trajectory"),
    Param("pages", int, 0, 10_000_000, "external pages fetched in one trajectory"),
    Param("envelope_kb_per_turn", float, 0.0, 1e6, "KB of event envelopes logged per turn"),
    Param("observation_kb_per_turn", float, 0.0, 1e6, "KB of delivered, bounded observations logged per turn"),
    Param("page_kb_raw", float, 0.0, 1e7, "mean KB of one fetched page, raw"),
    Param("usd_per_gb_month", float, 1e-9, 1e3, "storage price, USD per GB-month (GB = 10^9 B)"),
    Param("replay_months", float, 1e-3, 1200, "replay promise, months"),
    Param("attempt_cost_usd", float, 1e-6, 1e6, "cost of one attempt of the trajectory, USD"),
    Param("raw_page_months", float, 0.0, 1200, "diagnostic window proposed for the raw pages, months"),
    Param("trajectories", int, 1, 10 ** 12, "trajectories in the fleet's year"),
)

DEFAULTS: dict[str, Any] = {
    "turns": 20, "pages": 100, "envelope_kb_per_turn": 4, "observation_kb_per_turn": 40, "page_kb_raw": 300,
    "usd_per_gb_month": 0.023, "replay_months": 12, "attempt_cost_usd": 1.50, "raw_page_months": 1,
    "trajectories": 1000000,
}

GRADED: dict[str, Tol] = {
    "recovery_replay_gb_per_trajectory": Tol(),
    "raw_pages_gb_per_trajectory": Tol(),
    "recovery_replay_usd_per_trajectory": Tol(),
    "recovery_replay_share_of_attempt": Tol(),
    "raw_pages_usd_per_trajectory": Tol(),
    "raw_pages_share_of_attempt": Tol(),
    "delivered_input_method": Tol(),
    "earliest_boundary": Tol(),
    "evidence_artifacts": Tol(),
    "establishes_causal_influence": Tol(),
    "branch_adds": Tol(),
    "fleet_full_retention_usd_per_year": Tol(),
    "fleet_policy_usd_per_year": Tol(),
    "policy_keeps_historical_replay": Tol(),
    "dominant_artifact": Tol(),
    "dominant_share_of_bytes": Tol(),
    "dominant_required_for_recovery": Tol(),
    "repair_dominant_artifact": Tol(),
    "repair_dominant_required_for_recovery": Tol(),
}


def _bill_change(before: float, after: float, no_raw_pages: bool) -> str:
    """"the bill falls from $X to $Y", or, when the two print alike (no raw pages, or a diagnostic window as
    long as the replay one), that the bill does not change, and why."""
    x, y = f"${before:,.2f}", f"${after:,.2f}"
    if x == y:
        why = ("there are no raw pages for the shorter diagnostic window to drop" if no_raw_pages else
               "the diagnostic window keeps the raw pages about as long as the replay promise keeps the rest")
        return f"the bill stays at {x} under the split ({why})"
    return f"the bill {'falls' if after < before else 'rises'} from {x} to {y}"


def _months(m: float) -> str:
    return f"{m:g} month" + ("" if m == 1 else "s")


def validate_params(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Defaults overridden by ``params``, checked (ConfigError on a bad name, type or range).

    The diagnostic window cannot outlast the replay promise (``raw_page_months > replay_months`` is
    refused: raw pages would then be kept longer than the bytes they help explain), and a trajectory
    must log something per turn.
    """
    p = validate(PARAMS, DEFAULTS, params)
    if p["raw_page_months"] > p["replay_months"]:
        raise ConfigError(f"raw_page_months ({p['raw_page_months']:g}) cannot exceed replay_months "
                          f"({p['replay_months']:g})")
    if p["envelope_kb_per_turn"] + p["observation_kb_per_turn"] <= 0:
        raise ConfigError("envelope_kb_per_turn and observation_kb_per_turn cannot both be 0")
    return p


def bytes_of(p: Mapping[str, Any]) -> rt.TrajectoryBytes:
    """One research trajectory's bytes by class (no workspace)."""
    return rt.trajectory_bytes(p["turns"], p["envelope_kb_per_turn"], p["observation_kb_per_turn"],
                               pages=p["pages"], page_kb_raw=p["page_kb_raw"])


def policies(p: Mapping[str, Any]) -> dict[str, rt.RetentionPolicy]:
    """The policies compared: full retention, the proposed split, and two that save more and break promises.

    ``digest_only`` keeps the envelopes (with the observations' digests) for the replay promise but
    deletes the delivered observations when the run ends; ``raw_instead`` keeps the raw pages for the
    replay promise and never stores the bounded observations durably.
    """
    r, d = p["replay_months"], p["raw_page_months"]
    return {
        "full": rt.full_retention(r, "full"),
        "proposed": rt.split_lifetimes(r, d, "proposed"),
        "digest_only": rt.RetentionPolicy("digest_only", {"envelopes": r, "observations": 0.0, "raw_pages": d}),
        "raw_instead": rt.RetentionPolicy("raw_instead", {"envelopes": r, "observations": None, "raw_pages": r}),
    }


def policy_table(p: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per policy of :func:`policies`: per-trajectory and fleet bills, and the promises kept."""
    p = validate_params(p)
    tb = bytes_of(p)
    wanted = rt.promises(p["replay_months"], p["raw_page_months"])
    rows = []
    for name, pol in policies(p).items():
        cost = rt.policy_cost_usd(tb, pol, p["usd_per_gb_month"])
        kept = rt.promises_kept(pol, wanted)
        rows.append({"policy": name, **{f"{c}_months": pol.lifetime(c) for c in ("envelopes", "observations",
                                                                                 "raw_pages")},
                     "usd_per_trajectory": cost["total"],
                     "fleet_usd_per_year": rt.fleet_cost_usd(cost["total"], p["trajectories"]),
                     **{f"keeps_{k}": v.kept for k, v in kept.items()}})
    return rows


def solve(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every quantity §11.12 exercise 7 asks for, and the proposed retention policy."""
    p = validate_params(params)
    tb = bytes_of(p)
    price, months, attempt, n = p["usd_per_gb_month"], p["replay_months"], p["attempt_cost_usd"], p["trajectories"]
    rr_bytes = tb.envelopes + tb.observations           # recovery and replay inputs
    rr_usd = rt.storage_cost_usd(rr_bytes, price, months)
    raw_usd = rt.storage_cost_usd(tb.raw_pages, price, months)
    pols = policies(p)
    full = rt.policy_cost_usd(tb, pols["full"], price)
    proposed = rt.policy_cost_usd(tb, pols["proposed"], price)
    wanted = rt.promises(months, p["raw_page_months"])
    kept = rt.promises_kept(pols["proposed"], wanted)
    dominant = tb.dominant()
    repair = rt.napkin_11_2(other_attempt_cost_usd=attempt)

    out: dict[str, Any] = {
        "exercise": EXERCISE,
        "envelope_gb_per_trajectory": rt.bytes_to_gb(tb.envelopes),
        "observation_gb_per_trajectory": rt.bytes_to_gb(tb.observations),
        "recovery_replay_gb_per_trajectory": rt.bytes_to_gb(rr_bytes),
        "raw_pages_gb_per_trajectory": rt.bytes_to_gb(tb.raw_pages),
        "recovery_replay_usd_per_trajectory": rr_usd,
        "recovery_replay_share_of_attempt": rt.share_of_attempt(rr_usd, attempt),
        "raw_pages_usd_per_trajectory": raw_usd,
        "raw_pages_share_of_attempt": rt.share_of_attempt(raw_usd, attempt),
        "full_retention_share_of_attempt": rt.share_of_attempt(full["total"], attempt),
        "delivered_input_method": "fold_recorded_projection",
        "earliest_boundary": "assembled_model_input",
        "evidence_artifacts": "envelopes_and_observations",
        "establishes_causal_influence": False,
        "branch_adds": "effect_in_this_trajectory",
        "rerun_cost_usd": attempt,
        "policy_lifetimes_months": {c: pols["proposed"].lifetime(c) for c in ("envelopes", "observations",
                                                                               "raw_pages")},
        "full_retention_usd_per_trajectory": full["total"],
        "policy_usd_per_trajectory": proposed["total"],
        "fleet_full_retention_usd_per_year": rt.fleet_cost_usd(full["total"], n),
        "fleet_policy_usd_per_year": rt.fleet_cost_usd(proposed["total"], n),
        "fleet_saving_fraction": 1 - proposed["total"] / full["total"] if full["total"] else 0.0,
        "policy_keeps_current_recovery": kept["current_recovery"].kept,
        "policy_keeps_historical_replay": kept["historical_replay"].kept,
        "policy_keeps_diagnostics_months": p["raw_page_months"],
        "dominant_artifact": dominant,
        "dominant_share_of_bytes": tb.share(dominant),
        "dominant_required_for_recovery": dominant != "raw_pages",
        "dominant_retained_for": RETAINED_FOR[dominant],
        "repair_dominant_artifact": repair.dominant,
        "repair_dominant_share_of_bytes": repair.workspace_share_of_bytes,
        "repair_dominant_required_for_recovery": True,
        "repair_workspace_mb_inferred": repair.workspace_mb,
        "repair_attempt_cost_usd_inferred": repair.attempt_cost_usd,
        "repair_share_of_attempt": repair.share_of_attempt,
        "decision": "split_lifetimes",
    }
    rr_share, raw_share = out["recovery_replay_share_of_attempt"], out["raw_pages_share_of_attempt"]
    bill = _bill_change(out["fleet_full_retention_usd_per_year"], out["fleet_policy_usd_per_year"], tb.raw_pages == 0)
    out["decision_text"] = (
        f"Per trajectory the recovery and replay inputs are {rr_bytes / rt.BYTES_PER_KB:,.4g} KB (envelopes "
        f"{tb.envelopes / rt.BYTES_PER_KB:,.4g} KB, "
        f"delivered observations {tb.observations / rt.BYTES_PER_KB:,.4g} KB) "
        f"and the raw pages {tb.raw_pages / rt.BYTES_PER_MB:,.4g} MB. Kept for the {months:g}-month promise they cost "
        f"${rr_usd:.4g} ({rr_share:.3%} of the ${attempt:,.2f} attempt) and ${raw_usd:.4g} ({raw_share:.3%}). "
        "The investigator's question is answered by folding the recorded projection: the input manifest of the "
        "model call before the citation (its assembled-input boundary, table 6) and the delivered observation bytes "
        "it references are the text the model received. The raw pages are what the tool fetched, not what was "
        "delivered after bounding; a rerun fetches pages that may have changed and samples the model again, a new "
        f"execution costing another ${attempt:,.2f}. The record shows what was received, not that it caused the "
        "citation; a controlled branch from that boundary with the passage altered tests its effect in this one "
        f"trajectory. Policy: envelopes and delivered observations {_months(months)}, raw pages "
        f"{_months(p['raw_page_months'])} under diagnostics, which keeps current recovery and historical replay. "
        f"For {n:,} trajectories a year {bill}. Here {dominant.replace('_', ' ')} are "
        f"{tb.share(dominant):.1%} of the bytes and "
        + ("no recovery or replay promise reads them; in the repair trajectory (Napkin Math 11.2) the workspace "
           if dominant == "raw_pages" else "a recovery and replay promise reads them; in the repair trajectory the "
           "workspace ")
        + f"is {repair.workspace_share_of_bytes:.1%} of the bytes and recovery cannot proceed without it.")

    # alternative readings
    binary = rt.BYTES_PER_GIB / rt.BYTES_PER_GB
    year = rt.MONTHS_PER_YEAR
    cohort_months = min(months, year)
    alt_proposed = rt.policy_cost_usd(tb, rt.split_lifetimes(cohort_months, min(p["raw_page_months"], year)), price)
    out["reading"] = {
        "inputs": "the recovery and replay inputs are the event envelopes and the delivered bounded observations; "
                  "the research agent has no workspace, and the raw pages were never delivered to the model, so "
                  "they count only under diagnostics.",
        "units": "1 KB = 1000 B and GB = 10^9 B, the unit the price is quoted in; shares are fractions of the "
                 "attempt cost. Alternative: binary sizes (GiB) priced as if they were GB.",
        "year": "'a year's retention' is the replay promise (replay_months, 12 at the defaults). Alternative: "
                "exactly 12 months whatever the promise.",
        "fleet": "the annual bill is trajectories x one trajectory's lifetime bill: a year's cohort, equal by "
                 "Little's law to the steady-state yearly bill when that many trajectories start every year. "
                 "Alternative: the first calendar year of a cohort started at once (lifetimes cut at 12 months).",
        "full_retention": "full retention keeps every class, raw pages included, for the replay promise.",
        "notebook_11_2": "'notebook 11.2' is Napkin Math 11.2 (the repair trajectory: 30 turns of 4 + 128 KB and "
                         f"a {repair.workspace_mb:g} MB workspace inferred from its printed total).",
        "boundary": "the earliest boundary to compare is the assembled model input (ContextBuilt and its input "
                    "manifest) of the call that produced the citation; table 6 lists it first.",
    }
    out["alternative"] = {
        "binary_units": {
            "recovery_replay_gb_per_trajectory": rr_bytes / rt.BYTES_PER_GIB,
            "raw_pages_gb_per_trajectory": tb.raw_pages / rt.BYTES_PER_GIB,
            "recovery_replay_usd_per_trajectory": rr_usd / binary,
            "raw_pages_usd_per_trajectory": raw_usd / binary,
            "fleet_full_retention_usd_per_year": out["fleet_full_retention_usd_per_year"] / binary,
            "fleet_policy_usd_per_year": out["fleet_policy_usd_per_year"] / binary,
        },
        "exactly_12_months": {
            "recovery_replay_usd_per_trajectory": rt.storage_cost_usd(rr_bytes, price, year),
            "raw_pages_usd_per_trajectory": rt.storage_cost_usd(tb.raw_pages, price, year),
            "recovery_replay_share_of_attempt": rt.share_of_attempt(rt.storage_cost_usd(rr_bytes, price, year),
                                                                    attempt),
            "raw_pages_share_of_attempt": rt.share_of_attempt(rt.storage_cost_usd(tb.raw_pages, price, year),
                                                              attempt),
        },
        "first_calendar_year_of_a_cohort": {
            "fleet_full_retention_usd_per_year": rt.fleet_cost_usd(
                rt.storage_cost_usd(tb.total, price, cohort_months), n),
            "fleet_policy_usd_per_year": rt.fleet_cost_usd(alt_proposed["total"], n),
        },
    }
    return jsonable(out)


# --- checking, with hints for the usual slips ----------------------------------------------------

_CHOICE_HINTS: dict[str, dict[Any, str]] = {
    "delivered_input_method": {
        "regression_replay": "a regression replay runs harness code on the captured inputs: it tests what the "
                             "harness would assemble, not what it delivered",
        "fresh_rerun": "a rerun fetches the pages again and samples the model again: a new execution, not the "
                       "one under investigation",
    },
    "earliest_boundary": {
        "model_response": "the response comes after the input; the question is what the model received",
        "tool_observation": "the tool's raw output is not what the model received: bounding sits between them",
        "harness_decision": "the harness decision comes after the model call; compare the input first",
    },
    "evidence_artifacts": {
        "raw_pages": "the model received bounded observations, not the raw pages",
        "envelopes_only": "an envelope keeps the observation's digest, which can confirm bytes but cannot show them",
        "final_answer": "the final answer hides every intermediate boundary",
    },
    "establishes_causal_influence": {
        True: "the record shows which text was delivered, not that it produced the citation",
    },
    "branch_adds": {
        "general_reliability": "one branch is one trajectory; claims about the workload need many runs",
        "delivered_input": "the record already establishes the delivered input; the branch adds an intervention",
    },
    "dominant_required_for_recovery": {
        True: "raw pages were never delivered to the model, so no fold or rebuilt context reads them",
        False: "the dominant bytes here are read by recovery and replay",
    },
    "repair_dominant_required_for_recovery": {
        False: "without the workspace snapshot the repair run cannot be restored; regenerating the patch is a new "
               "execution",
    },
    "policy_keeps_historical_replay": {
        False: "replay reads envelopes and delivered observations, which the policy keeps for the whole promise",
        True: "replay reads envelopes and delivered observations; one of them expires before the promise ends",
    },
}


def slips(params: Mapping[str, Any] | None = None) -> dict[str, list[tuple[float, str]]]:
    """For each float quantity, values a typical slip produces and the hint for each (first match wins)."""
    p = validate_params(params)
    s = solve(p)
    months, n = p["replay_months"], p["trajectories"]
    out: dict[str, list[tuple[float, str]]] = {}
    gib = "binary units: GB here is 10^9 bytes (1 KB = 1000 B), not GiB, MiB or KiB"
    # one, two or three conversions by 1024 instead of 1000, in either direction (KiB pages, GiB totals, ...)
    ratio = rt.BYTES_PER_KIB / rt.BYTES_PER_KB
    binary = [(ratio ** -k, gib) for k in (3, 2, 1)] + [(ratio ** k, gib) for k in (1, 2, 3)]
    per_month = f"that is one month; the promise runs {_months(months)}"
    years = "12 times too much: months counted as years (the price is per GB-month)"
    for name in ("recovery_replay_gb_per_trajectory", "raw_pages_gb_per_trajectory"):
        v = s[name]
        out[name] = [(v * f, h) for f, h in binary] + [(v * 1000, "that is MB; the answer is in GB"),
                                                       (v * 1e6, "that is KB; the answer is in GB")]
    for name in ("recovery_replay_usd_per_trajectory", "raw_pages_usd_per_trajectory",
                 "fleet_full_retention_usd_per_year", "fleet_policy_usd_per_year"):
        v = s[name]
        out[name] = [(v * f, h) for f, h in binary] + [(v / months, per_month), (v * 12, years),
                                                       (v * 100, "that is cents; answer in USD")]
    for name in ("recovery_replay_share_of_attempt", "raw_pages_share_of_attempt"):
        v = s[name]
        out[name] = [(v * 100, "that is a percentage; answer a fraction (0.005 for 0.5 %)")] + [
            (v * f, h) for f, h in binary] + [(v / months, per_month), (v * 12, years)]
    for name in ("fleet_full_retention_usd_per_year", "fleet_policy_usd_per_year"):
        out[name].append((s[name] / n, "that is one trajectory; multiply by the fleet"))
    out["fleet_policy_usd_per_year"].append(
        (s["fleet_full_retention_usd_per_year"],
         f"that is full retention; the policy keeps raw pages only {_months(p['raw_page_months'])}"))
    out["dominant_share_of_bytes"] = [(s["dominant_share_of_bytes"] * 100, "that is a percentage; answer a fraction")]
    return out


_FLOAT_MAX = 1.7976931348623157e308   # sys.float_info.max


def _hint_for(name: str, expected: Any, given: Any, slip_values: list[tuple[float, str]]) -> str:
    if name in _CHOICE_HINTS:
        if type(given) is not type(expected):     # a wrong type is _common's hint ("answer True or False")
            return ""
        return _CHOICE_HINTS[name].get(given, "")
    if (isinstance(given, bool) or not isinstance(given, (int, float))
            or abs(given) > _FLOAT_MAX or not math.isfinite(given)):    # an int too large for a float: no slip
        return ""
    for value, hint in slip_values:
        if math.isclose(given, value, rel_tol=GRADED[name].rel, abs_tol=GRADED[name].abs):
            return hint
    return ""


def check(params: Mapping[str, Any] | None, answers: Mapping[str, Any]) -> dict[str, Any]:
    """Grade ``answers`` against :func:`solve` (1 % relative for floats, else exact).

    A wrong answer that matches a known slip gets ``report["quantities"][name]["hint"]``.
    """
    report = grade(EXERCISE, solve(params), answers, GRADED)
    sl = slips(params)
    for name, q in report["quantities"].items():
        if not q["ok"] and q["given"] is not None:
            hint = _hint_for(name, q["expected"], q["given"], sl.get(name, []))
            if hint:
                q["hint"] = hint
    return report


def format_report(report: Mapping[str, Any], reveal: bool = False) -> str:
    """The common report table (:func:`kernel_lib.course.exercises.format_report`), then one line per hint."""
    lines = [_common_format_report(report, reveal=reveal)]
    lines += [f"  hint for {name}: {q['hint']}" for name, q in report["quantities"].items() if q.get("hint")]
    return "\n".join(lines)


def generate(seed: int) -> dict[str, Any]:
    """A seeded variant: run length, page count and sizes, price, promise, attempt cost, window and fleet.

    The diagnostic window never exceeds the promise. Most variants keep raw pages dominant; a few
    (few, small pages against long, rich observations) make the delivered observations the largest class.
    """
    rng = random.Random(f"ex11.7:{seed}")
    replay = rng.choice([6, 12, 12, 18, 24, 36])
    return {
        "turns": rng.choice([10, 15, 20, 30, 40, 60]),
        "pages": rng.choice([5, 20, 50, 80, 100, 150, 250]),
        "envelope_kb_per_turn": rng.choice([2, 3, 4, 6, 8]),
        "observation_kb_per_turn": rng.choice([16, 24, 32, 40, 64, 96]),
        "page_kb_raw": rng.choice([80, 150, 300, 450, 800]),
        "usd_per_gb_month": rng.choice([0.0125, 0.018, 0.023, 0.026, 0.04]),
        "replay_months": replay,
        "attempt_cost_usd": rng.choice([0.40, 0.75, 1.00, 1.50, 2.50, 4.00]),
        "raw_page_months": rng.choice([m for m in (0.5, 1, 2, 3) if m <= replay]),
        "trajectories": rng.choice([100_000, 250_000, 500_000, 1_000_000, 2_000_000, 10_000_000]),
    }
