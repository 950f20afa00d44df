"""Failure Recovery, Example 0.1, "The dual-commit trap and pivot allocation", as a seeded exercise (ex0.1).

Source: the Failure Recovery chapter, "Pivot Action Irreversibility": table 5 (the three
reversibility tiers), "The pivot action boundary" (at most one pivot; reversible steps before it,
repeat-safe steps after it), Example 0.1 (a deployment whose two irreversible steps are separated
by a fallible one, and its remedy by escrow and an atomic outbox) and Systems Perspective 0.1
(sort the plan's DAG so the reversible steps come first and the one pivot last).

Givens (papermill names): the plan as parallel lists, one entry per step in the order the agent
proposed: ``step_ids``, ``tiers`` (``"I"``, ``"II"``, ``"III"``), ``repeat_contracts``,
``stageable`` (tier III payloads that can wait in escrow), ``depends_on`` (lists of ids) and
``step_min`` (each step's duration, minutes; the chapter gives none, these are assumptions).
``billing_step`` is the compensable step that starts the per-minute bill (the GPU cluster,
``gpu_usd_per_min`` dollars a minute for ``gpu_instances`` instances); ``failing_step`` is the step
that fails (the catalog migration's schema deadlock). A failure before the pivot is unwound: the
cluster is torn down in ``teardown_min``. A failure after it cannot be: the trajectory is frozen and
the live cluster waits ``escalation_min`` for an operator.

Everything structural is computed by :mod:`kernel_lib.recovery.pivot` (:func:`check_plan`,
:func:`propose_order`); the money is the cluster's bill from the end of ``billing_step`` to the
end of ``failing_step``, plus the teardown or the wait for the operator, in the plan's own order
(the trap) and in the proposed order (the remedy).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernel_lib.course.exercises._common import Tol, grade, jsonable
from kernel_lib.errors import ConfigError

EXERCISE = "ex0.1"
TITLE = "The dual-commit trap and pivot allocation"


@dataclass(frozen=True)
class PlanParam:
    """A given of this exercise that is not a plain number: a list of ids, tiers, contracts, flags or
    id lists (one entry per step), a step id, or a number. Same interface as
    :class:`~kernel_lib.course.exercises._common.Param` (``name``, ``doc``, ``coerce``, ``parse``)."""

    name: str
    kind: str          # "ids", "tiers", "contracts", "flags", "deps", "minutes", "id", "number", "count"
    doc: str
    lo: float = 0.0
    hi: float = 0.0

    def coerce(self, value: Any) -> Any:
        """The value checked and normalized; ConfigError naming the parameter otherwise."""
        if self.kind == "number":
            return _number(self.name, value, self.lo, self.hi)
        if self.kind == "count":
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if isinstance(value, bool) or not isinstance(value, int) or not self.lo <= value <= self.hi:
                raise ConfigError(f"{self.name} must be an integer between {self.lo:g} and {self.hi:g}, got {value!r}")
            return value
        if self.kind == "id":
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(f"{self.name} must be a step id (a non-empty string), got {value!r}")
            return value.strip()
        if isinstance(value, tuple):
            value = list(value)
        if not isinstance(value, list) or not 1 <= len(value) <= 12:
            raise ConfigError(f"{self.name} must be a list of 1 to 12 entries (one per step), got {value!r}")
        return [self._item(v) for v in value]

    def _item(self, v: Any) -> Any:
        if self.kind == "flags":
            if not isinstance(v, bool):
                raise ConfigError(f"{self.name} must hold true/false flags, got {v!r}")
            return v
        if self.kind == "minutes":
            return _number(self.name, v, 0.0, 10_000.0)
        if self.kind == "deps":
            if isinstance(v, tuple):
                v = list(v)
            if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
                raise ConfigError(f"{self.name} must hold one list of step ids per step, got {v!r}")
            return list(v)
        if not isinstance(v, str) or not v.strip():
            raise ConfigError(f"{self.name} must hold non-empty strings, got {v!r}")
        return v.strip()

    def parse(self, text: str) -> Any:
        """A command-line value (``--param name=value``): JSON, or for a list of strings comma-separated."""
        try:
            value = json.loads(text)
        except ValueError:
            if self.kind in ("ids", "tiers", "contracts"):
                value = [t.strip() for t in text.strip("[]() ").split(",") if t.strip()]
            elif self.kind == "id":
                value = text
            else:
                raise ConfigError(f"{self.name} must be JSON here ({self.doc}), got {text!r}") from None
        return self.coerce(value)


def _number(name: str, v: Any, lo: float, hi: float) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ConfigError(f"{name} must be a finite number, got {v!r}")
    if not lo <= v <= hi:
        raise ConfigError(f"{name} must be between {lo:g} and {hi:g}, got {v!r}")
    return float(v)


PARAMS = (
    PlanParam("step_ids", "ids", "the steps' ids, in the order the agent proposed"),
    PlanParam("tiers", "tiers", "each step's reversibility tier: I invertible, II compensable, III pivot"),
    PlanParam("repeat_contracts", "contracts", "each step's repeat contract (idempotent, idempotency_key, read_only, "
                                               "at_most_once, unsafe)"),
    PlanParam("stageable", "flags", "each step: can its (tier III) payload wait in escrow for the pivot's outbox?"),
    PlanParam("depends_on", "deps", "each step's dependencies (lists of step ids)"),
    PlanParam("step_min", "minutes", "each step's duration, minutes"),
    PlanParam("billing_step", "id", "the compensable step that starts the per-minute bill (the GPU cluster)"),
    PlanParam("failing_step", "id", "the step that fails (tier I or II)"),
    PlanParam("gpu_usd_per_min", "number", "the cluster's price, USD per minute", 0.0, 10_000.0),
    PlanParam("gpu_instances", "count", "instances in the cluster (used by the per-instance reading)", 1, 10_000),
    PlanParam("escalation_min", "number", "minutes until an operator answers a frozen trajectory", 0.0, 10_000.0),
    PlanParam("teardown_min", "number", "minutes the compensator takes to tear the cluster down", 0.0, 10_000.0),
)

DEFAULTS: dict[str, Any] = {
    "step_ids": ["T1", "T2", "T3", "T4", "T5"],
    "tiers": ["II", "I", "III", "II", "III"],
    "repeat_contracts": ["idempotency_key", "idempotent", "unsafe", "unsafe", "unsafe"],
    "stageable": [False, False, False, False, True],
    "depends_on": [[], ["T1"], ["T1", "T2"], ["T1"], ["T2", "T4"]],
    "step_min": [8.0, 5.0, 1.0, 3.0, 0.5],
    "billing_step": "T1",
    "failing_step": "T4",
    "gpu_usd_per_min": 5.5,
    "gpu_instances": 16,
    "escalation_min": 30.0,
    "teardown_min": 2.0,
}

GRADED: dict[str, Tol] = {
    "pivot_count": Tol(),
    "plan_valid": Tol(),
    "offending_steps": Tol(),
    "finalization_unsafe_steps": Tol(),
    "pivot": Tol(),
    "staged_steps": Tol(),
    "proposed_order": Tol(),
    "trap_failure_usd": Tol(abs=0.005),
    "remedy_failure_usd": Tol(abs=0.005),
    "saving_usd": Tol(abs=0.005),
}

_LISTS = ("tiers", "repeat_contracts", "stageable", "depends_on", "step_min")


def _validate(params: Mapping[str, Any] | None) -> dict[str, Any]:
    by_name = {p.name: p for p in PARAMS}
    params = dict(params or {})
    unknown = sorted(set(params) - set(by_name))
    if unknown:
        raise ConfigError(f"unknown parameter {unknown[0]!r}; known: {', '.join(by_name)}")
    merged = {**DEFAULTS, **params}
    return {name: by_name[name].coerce(merged[name]) for name in by_name}


def plan_of(p: Mapping[str, Any]):
    """The :class:`~kernel_lib.recovery.pivot.Plan` the givens describe (PlanError, a ConfigError,
    naming the step when a step is malformed)."""
    from kernel_lib.recovery.pivot import Plan, PlanStep
    steps = [PlanStep(i, t, c, tuple(d), stageable=s)
             for i, t, c, s, d in zip(p["step_ids"], p["tiers"], p["repeat_contracts"], p["stageable"],
                                      p["depends_on"])]
    return Plan(tuple(steps), "ex0.1")


def validate_params(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Defaults overridden by ``params``, checked. ConfigError (naming the parameter) on a bad name,
    type or range; when the per-step lists differ in length; when the plan is malformed; when
    ``billing_step`` is not a tier II step or ``failing_step`` not a tier I/II step other than it;
    and when no valid order exists (the exercise asks for the remedy: check such a plan with
    ``python -m kernel_lib plan check``)."""
    from kernel_lib.recovery.pivot import propose_order
    p = _validate(params)
    n = len(p["step_ids"])
    for name in _LISTS:
        if len(p[name]) != n:
            raise ConfigError(f"{name} must hold one entry per step ({n}, as step_ids), got {len(p[name])}")
    plan = plan_of(p)
    tier = dict(zip(p["step_ids"], p["tiers"]))
    if tier.get(p["billing_step"]) != "II":
        raise ConfigError(f"billing_step {p['billing_step']!r} must name a compensable (tier II) step of the plan")
    if tier.get(p["failing_step"]) not in ("I", "II") or p["failing_step"] == p["billing_step"]:
        raise ConfigError(f"failing_step {p['failing_step']!r} must name a tier I or II step other than the "
                          "billing step")
    if propose_order(plan).order is None:
        raise ConfigError("step_ids/tiers/depends_on: this plan has no valid order at all; the exercise asks for "
                          "the remedy (see why with `python -m kernel_lib plan check`)")
    return p


def _elapsed_min(order: list[str], p: Mapping[str, Any], start_of_failing: bool = False) -> float | None:
    """Minutes from the end of the billing step to the failure (the end of the failing step, or
    its start), or None when the billing step has not run by then (nothing is billed)."""
    minutes = dict(zip(p["step_ids"], p["step_min"]))
    if p["billing_step"] not in order or order.index(p["billing_step"]) > order.index(p["failing_step"]):
        return None
    between = order[order.index(p["billing_step"]) + 1: order.index(p["failing_step"]) + 1]
    if start_of_failing:
        between = between[:-1]
    return sum(minutes.get(i, 0.0) for i in between)   # a staging step takes no time of its own


def _failure_cost(order: list[str], pivot: str | None, p: Mapping[str, Any], rate: float,
                  start_of_failing: bool = False) -> tuple[float, bool]:
    """(USD billed for the cluster when ``failing_step`` fails in ``order``, is it after the pivot)."""
    after = pivot is not None and order.index(p["failing_step"]) > order.index(pivot)
    elapsed = _elapsed_min(order, p, start_of_failing)
    if elapsed is None:
        return 0.0, after
    return rate * (elapsed + (p["escalation_min"] if after else p["teardown_min"])), after


def solve(params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every quantity the exercise asks for, from the givens (money in USD, time in minutes).

    Graded: the number of pivots (tier III steps) in the plan as proposed, whether it is valid, the
    steps it is refused for (all rules), the steps after its pivot that are not repeat-safe, the
    pivot and the staged steps of the proposed order, that order (ids joined by commas, a staging
    step named ``<id>.stage``), and the cluster's bill when ``failing_step`` fails in the trap
    (plan order) and in the remedy (proposed order), and the saving. Raises ConfigError.
    """
    from kernel_lib.recovery.pivot import check_plan, propose_order
    p = validate_params(params)
    plan = plan_of(p)
    verdict = check_plan(plan)
    prop = propose_order(plan)
    offending = sorted({s for r in verdict.reasons for s in r.steps}, key=plan.ids.index)
    unsafe = verdict.offending.get("finalization_repeat_safe", [])
    trap_order, remedy_order = list(plan.ids), list(prop.order)
    rate = p["gpu_usd_per_min"]
    trap_usd, trap_after = _failure_cost(trap_order, verdict.pivot, p, rate)
    remedy_usd, remedy_after = _failure_cost(remedy_order, prop.pivot, p, rate)
    per_instance = rate * p["gpu_instances"]
    alt_trap, _ = _failure_cost(trap_order, verdict.pivot, p, per_instance)
    alt_remedy, _ = _failure_cost(remedy_order, prop.pivot, p, per_instance)
    start_trap, _ = _failure_cost(trap_order, verdict.pivot, p, rate, start_of_failing=True)
    start_remedy, _ = _failure_cost(remedy_order, prop.pivot, p, rate, start_of_failing=True)
    decision = "reorder" if not verdict.valid else "run_as_proposed"
    fail = p["failing_step"]
    out = {
        "exercise": EXERCISE,
        "pivot_count": sum(t == "III" for t in p["tiers"]),
        "plan_valid": verdict.valid,
        "offending_steps": offending,
        "finalization_unsafe_steps": list(unsafe),
        "pivot": prop.pivot or "",
        "staged_steps": list(prop.staged),
        "proposed_order": ",".join(prop.order),
        "trap_failure_usd": trap_usd,
        "remedy_failure_usd": remedy_usd,
        "saving_usd": trap_usd - remedy_usd,
        "reasons": [str(r) for r in verdict.reasons],
        "transformations": [t.message for t in prop.transformations],
        "failing_step_after_pivot_in_trap": trap_after,
        "failing_step_after_pivot_in_remedy": remedy_after,
        "decision": decision,
        "decision_text": (
            f"The plan as proposed has {sum(t == 'III' for t in p['tiers'])} pivot(s) and is "
            + ("valid: run it as it is. " if verdict.valid else
               f"refused ({'; '.join(r.rule + ' ' + ', '.join(r.steps) for r in verdict.reasons)}). ")
            + f"Run it as {', '.join(prop.order)} with {prop.pivot} as the one pivot"
            + (f", flushing the escrow of {', '.join(prop.staged)} through its atomic outbox" if prop.staged else "")
            + f". If {fail} fails, the trap order "
            + ("cannot unwind (it is past the pivot): the live cluster waits for an operator"
               if trap_after else "still unwinds")
            + f" and bills ${trap_usd:,.2f}; the proposed order "
            + ("still has to go forward" if remedy_after else "unwinds it and tears the cluster down")
            + f" for ${remedy_usd:,.2f}, saving ${trap_usd - remedy_usd:,.2f}."),
        "reading": {
            "offending_steps": "every step some rule names: the pivots counted beyond one (all tier III steps are "
                               "named, the first included) and the steps after the first pivot that are not "
                               "repeat-safe.",
            "trap_failure_usd": "the cluster bills from the end of billing_step to the end of failing_step (the "
                                "failure found when the step ends), then during the operator's escalation_min "
                                "(past the pivot) or the teardown_min (before it); gpu_usd_per_min is the whole "
                                "cluster's price, as the chapter's '$5.50/min' reads for the 16 instances. "
                                "Alternatives: 'per_instance_rate' (the price is per instance), "
                                "'failure_at_step_start' (the failing step fails as it starts).",
            "proposed_order": "ids joined by commas, without blanks; a staged step as '<id>.stage'; the pivot's "
                              "outbox flush is part of the pivot.",
        },
        "alternative": {
            "per_instance_rate": {"trap_failure_usd": alt_trap, "remedy_failure_usd": alt_remedy,
                                  "saving_usd": alt_trap - alt_remedy},
            "failure_at_step_start": {"trap_failure_usd": start_trap, "remedy_failure_usd": start_remedy,
                                      "saving_usd": start_trap - start_remedy},
        },
    }
    return jsonable(out)


ALTERNATIVE_ALIASES: dict[str, tuple[str, str]] = {}


def _normalize_order(v: Any) -> Any:
    if isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v):
        v = ",".join(v)
    if isinstance(v, str):
        return "".join(v.replace("→", ",").replace(";", ",").split())
    return v


def check(params: Mapping[str, Any] | None, answers: Mapping[str, Any]) -> dict[str, Any]:
    """Grade ``answers`` against :func:`solve`: counts, yes/no and the pivot exactly; step lists as
    sets; the order exactly (a list of ids or a comma-separated string, blanks ignored); dollars
    within 1 % relative or half a cent. Raises ConfigError when ``answers`` is not a mapping."""
    if isinstance(answers, Mapping) and "proposed_order" in answers:
        answers = {**answers, "proposed_order": _normalize_order(answers["proposed_order"])}
    return grade(EXERCISE, solve(params), answers, GRADED, ALTERNATIVE_ALIASES)


def _draw_plan(rng: random.Random) -> dict[str, Any]:
    """One trap plan: billing step first, a pivot, the failing compensable step right after it, and
    one or two stageable irreversible steps later; other steps reversible, those that depend on the
    pivot repeat-safe."""
    n = rng.randint(5, 8)
    ids = [f"T{i + 1}" for i in range(n)]
    k = rng.randint(1, n - 3)            # the pivot's position
    fail = k + 1
    staged = sorted(rng.sample(range(k + 2, n), min(n - k - 2, rng.choice([1, 1, 2]))))
    tiers, contracts, stageable, deps, tainted = [], [], [], [], {ids[k]}
    for i in range(n):
        earlier = [ids[j] for j in range(i)]
        clean = [x for x in earlier if x not in tainted and x not in [ids[s] for s in staged]]
        if i == 0:
            tier, contract, d = "II", "idempotency_key", []
        elif i == k:
            tier, contract, d = "III", "unsafe", rng.sample(clean, rng.randint(1, len(clean)))
        elif i == fail or i in staged:
            tier = "II" if i == fail else "III"
            contract = rng.choice(["unsafe", "at_most_once"]) if i == fail else "unsafe"
            d = rng.sample(clean, rng.randint(1, min(2, len(clean))))
        else:
            tier = rng.choice(["I", "II"])
            d = rng.sample(earlier, rng.randint(0, min(2, len(earlier))))
            if i > k and rng.random() < 0.5:
                d = sorted(set(d) | {ids[k]})
            if any(x in tainted for x in d):
                tainted.add(ids[i])
                contract = rng.choice(["idempotent", "idempotency_key", "read_only"])
            else:
                contract = rng.choice(["idempotent", "idempotency_key", "unsafe", "at_most_once"])
        if i in staged:
            tainted.add(ids[i])          # its effect exists only once the pivot's outbox is flushed
        tiers.append(tier)
        contracts.append(contract)
        stageable.append(i in staged)
        deps.append(sorted(d, key=ids.index))
    return {"step_ids": ids, "tiers": tiers, "repeat_contracts": contracts, "stageable": stageable,
            "depends_on": deps, "failing_step": ids[fail]}


def generate(seed: int) -> dict[str, Any]:
    """A seeded variant: another trap plan (5 to 8 steps, other tiers, contracts and dependencies, one
    or two stageable pivots), other durations, prices, escalation and teardown times."""
    rng = random.Random(f"ex0.1:{seed}")
    out = _draw_plan(rng)
    n = len(out["step_ids"])
    out["step_min"] = [float(rng.randrange(4, 31)) / 2 for _ in range(n)]
    out["billing_step"] = "T1"
    out["gpu_usd_per_min"] = rng.choice([2.75, 4.0, 5.5, 8.25, 12.5])
    out["gpu_instances"] = rng.choice([8, 16, 32])
    out["escalation_min"] = float(rng.choice([15, 30, 45, 60, 90]))
    out["teardown_min"] = float(rng.choice([1, 2, 3, 5]))
    return {name: out[name] for name in DEFAULTS}
