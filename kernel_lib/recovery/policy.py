"""The recovery policy D(Ω) (Failure Recovery, "Dynamic arbitration", figure 2, Napkin Math 0.2,
the anti-spin invariant): a pure function from the failure state Ω_t to one directive, with the
gate that decided, a one-sentence reason and every number that decided it.

Ω_t = (s_t, T_t, o_t^err, B_t, Σ_t) is :class:`Omega`: an environment summary, the failed
sub-transaction (:class:`FailedStep`: step id, tool, reversibility tier, whether the pivot was
crossed, k_i and the earlier signatures H_i, transient retries so far), the structured error, the
remaining budget (:class:`Budget`: tokens, steps, USD) and the committed history Σ
(:class:`CommittedStep`: each step's compensation cost and its forward cost, in s and USD).

The cascade of :func:`decide`:

1. **Gate 1, taxonomy** (:func:`~kernel_lib.recovery.taxonomy.classify_error`). transient →
   TRANSIENT_RETRY, remedy ``retry_unchanged`` with full-jitter backoff t ~ U(0, min(T_max,
   2^k·T_0)) (k = retries so far; a 429's Retry-After is a floor; after ``transient_retries_max``
   the fault is no longer treated as passing). fatal → BACKWARD_ROLLBACK before the pivot,
   OPERATOR_ESCALATE after it. unclassified → the same safe case, with the classifier's reason.
   semantic → on.
2. **Anti-spin** (:class:`~kernel_lib.recovery.signatures.SpinGuard`): σ of this error already in
   H_i, or k_i ≥ K_repair → BACKWARD_ROLLBACK (OPERATOR_ESCALATE after the pivot).
3. **Gate 2, budget headroom**: a remedy fits when T_rem ≥ E[T_repair] + T_reserve, $_rem ≥
   E[$_repair] + $_reserve and H_rem ≥ its steps. None fits → BACKWARD_ROLLBACK (escalate after the
   pivot).
4. **After the pivot** rollback does not exist: the cheapest fitting remedy per expected success
   (c_r/p) is chosen, FORWARD_REPAIR, gate ``"pivot"`` (OPERATOR_ESCALATE if every fitting remedy
   has p = 0). Gate 3 is not consulted (its alternative, unwind and rerun, is not available).
5. **Gate 3, economics**, before the pivot. U = Σ compensation costs, R = Σ forward (rerun) costs,
   both in s and in USD. For a remedy with cost c_r and success probability p,
   E[forward] = c_r + (1 − p)(U + R) against backward = U + R, so repair pays when p > p* = c_r/(U +
   R). p* is computed in time and in dollars separately; **the combination rule**: by default
   (``usd_per_s`` None) a remedy is taken only when p exceeds *both* break-evens (it is expected to
   be cheaper in time and in money: no exchange rate between them is assumed); with ``usd_per_s``
   set, both are converted to one dollar figure (c_usd + usd_per_s·c_s) and one break-even decides.
   Among the remedies that pass, the one with the least expected cost relative to backward
   (E_s/B_s + E_usd/B_usd, or the single dollar figure) is chosen; if none passes,
   BACKWARD_ROLLBACK. When U + R is 0 in a unit and c_r > 0, p* is infinite there (repair cannot
   beat a free unwind), reported as ``"inf"``.

**The displayed formula and the napkin.** The chapter's gate-3 display writes E[forward] = c_r +
(1 − p)·U(Σ), the unwind alone; its Napkin Math 0.2 uses U + R (a failed repair still unwinds
*and* reruns). Only U + R reproduces the napkin: with U = 40.6 s and $0, R = 46 s and $0.162, c_r
= 4.1 s and $0.00987, p = 0.5 gives 4.1 + 0.5·86.6 = 47.4 s and 0.00987 + 0.5·0.162 = $0.091
against 86.6 s and $0.162, and p* = 4.1/86.6 ≈ 4.7 % (the text's "5 percent") on time and
0.00987/0.162 ≈ 6.1 % ("6 percent") on dollars; the displayed form would give 24.4 s and p* =
10 % on time, and no finite break-even on dollars (U costs $0). :func:`economics` computes both,
the decision uses U + R; the ``numbers`` carry both.

**p is not assumed.** A remedy's p is either given (``success_p``, e.g. the napkin's assumed 0.5,
reported as ``"given"``) or the posterior mean of the recorded outcomes of that remedy on this
failure class (:class:`~kernel_lib.recovery.repair_stats.RepairStats`, prior Beta(1, 1)), reported
with its count and 95 % interval.

Remedies (``error_feedback``: repair with the error frame; ``resample``: a fresh sample, another
seed or temperature; ``model_fallback``: another model with its own price and success rate) are
:class:`RemedyOption` values with their own :class:`RepairCosts` and p.

Pure: no I/O; randomness only through the ``rng`` argument. Raises
:class:`~kernel_lib.errors.RecoveryPolicyError` for a bad configuration and
:class:`~kernel_lib.errors.OmegaError` for a malformed Ω document (:func:`omega_from_dict`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from kernel_lib.errors import OmegaError, RecoveryPolicyError
from kernel_lib.limits import JSON_NUMBER_MAX
from kernel_lib.recovery.repair_stats import RepairStats, fold_repair_stats
from kernel_lib.recovery.signatures import (
    K_REPAIR_DEFAULT, WINDOW_DEFAULT, SpinGuard, check_k_repair, signature_of,
)
from kernel_lib.recovery.taxonomy import ErrorClassification, classify_error

__all__ = ["DIRECTIVES", "REMEDIES", "Directive", "FailedStep", "Budget", "CommittedStep", "Omega", "RepairCosts",
           "Reserves", "RemedyOption", "PolicyConfig", "Economics", "RecoveryDecision", "economics", "decide",
           "backoff_window_s", "omega_from_dict", "config_from_dict", "decision_event"]

Directive = Literal["TRANSIENT_RETRY", "FORWARD_REPAIR", "BACKWARD_ROLLBACK", "OPERATOR_ESCALATE"]
DIRECTIVES: tuple[str, ...] = ("TRANSIENT_RETRY", "FORWARD_REPAIR", "BACKWARD_ROLLBACK", "OPERATOR_ESCALATE")
REMEDIES: tuple[str, ...] = ("error_feedback", "resample", "model_fallback")


def _num(name: str, v: Any, *, lo: float = 0.0, hi: float = JSON_NUMBER_MAX, integer: bool = False) -> None:
    """Raises RecoveryPolicyError unless ``v`` is a number (an int when ``integer``) in [lo, hi].

    The default ``hi`` is JSON_NUMBER_MAX: a larger count or cost is no real budget, is not stored
    exactly in the log, and a few of them would overflow the sums U and R (an int beyond a float's
    range used to raise OverflowError here)."""
    ok = (type(v) is int) if integer else (isinstance(v, (int, float)) and not isinstance(v, bool))
    if not ok or (isinstance(v, float) and not math.isfinite(v)) or not lo <= v <= hi:
        kind = "an integer" if integer else "a finite number"
        raise RecoveryPolicyError(f"{name} must be {kind} in [{lo:g}, {hi:g}], got {v!r}")


# --- Ω ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FailedStep:
    """T_t, the failed sub-transaction. ``tier``: reversibility tier I/II/III (table 5);
    ``pivot_crossed``: the saga's pivot has committed (rollback no longer exists);
    ``repairs_done``: k_i, forward repairs already spent on this step; ``prior_signatures``: H_i,
    σ of its earlier errors, oldest first; ``retries_done``: transient retries so far."""
    step_id: str
    tool: str
    tier: Literal["I", "II", "III"]
    pivot_crossed: bool
    repairs_done: int = 0
    prior_signatures: tuple[str, ...] = ()
    retries_done: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.step_id, str) or not self.step_id:
            raise RecoveryPolicyError("failed_step.step_id must be a non-empty str")
        if self.tier not in ("I", "II", "III"):
            raise RecoveryPolicyError(f"failed_step.tier must be 'I', 'II' or 'III', got {self.tier!r}")
        if not isinstance(self.pivot_crossed, bool):
            raise RecoveryPolicyError("failed_step.pivot_crossed must be true or false")
        _num("failed_step.repairs_done", self.repairs_done, integer=True)
        _num("failed_step.retries_done", self.retries_done, integer=True)


@dataclass(frozen=True)
class Budget:
    """B_t = ⟨T_rem, H_rem, $_rem⟩: tokens, trajectory steps and USD left."""
    tokens_rem: int
    steps_rem: int
    usd_rem: float

    def __post_init__(self) -> None:
        _num("budget.tokens_rem", self.tokens_rem, integer=True)
        _num("budget.steps_rem", self.steps_rem, integer=True)
        _num("budget.usd_rem", self.usd_rem)


@dataclass(frozen=True)
class CommittedStep:
    """One committed T_j of Σ: the cost of its compensator C_j (``compensation_s``,
    ``compensation_usd``) and of running T_j again after an unwind (``forward_s``,
    ``forward_usd``)."""
    step_id: str
    compensation_s: float
    compensation_usd: float
    forward_s: float
    forward_usd: float

    def __post_init__(self) -> None:
        for n in ("compensation_s", "compensation_usd", "forward_s", "forward_usd"):
            _num(f"history[{self.step_id}].{n}", getattr(self, n))


@dataclass(frozen=True)
class Omega:
    """Ω_t = (s_t, T_t, o_t^err, B_t, Σ_t). ``environment``: a JSON summary of s_t (reported, not
    judged); ``error``: the structured error (a service's error object, an imported observation,
    a text); ``history``: Σ, committed steps in order."""
    environment: Mapping[str, Any]
    failed: FailedStep
    error: Any
    budget: Budget
    history: tuple[CommittedStep, ...] = ()

    @property
    def unwind_s(self) -> float:
        """U(Σ) in seconds: Σ_j Cost(C_j)."""
        return math.fsum(c.compensation_s for c in self.history)

    @property
    def unwind_usd(self) -> float:
        return math.fsum(c.compensation_usd for c in self.history)

    @property
    def rerun_s(self) -> float:
        """R in seconds: running Σ's forward steps again after the unwind."""
        return math.fsum(c.forward_s for c in self.history)

    @property
    def rerun_usd(self) -> float:
        return math.fsum(c.forward_usd for c in self.history)


# --- configuration -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class RepairCosts:
    """Expected cost of one repair pass: ``tokens`` (E[T_repair]), ``usd`` (E[$_repair]), ``s``
    (its wall time: decode and validation) and ``steps`` (trajectory steps it takes)."""
    tokens: int
    usd: float
    s: float
    steps: int = 1

    def __post_init__(self) -> None:
        _num("repair.tokens", self.tokens, integer=True)
        _num("repair.usd", self.usd)
        _num("repair.s", self.s)
        _num("repair.steps", self.steps, integer=True)


@dataclass(frozen=True)
class Reserves:
    """T_reserve and $_reserve: budget gate 2 keeps back (tokens, USD)."""
    tokens: int = 0
    usd: float = 0.0

    def __post_init__(self) -> None:
        _num("reserves.tokens", self.tokens, integer=True)
        _num("reserves.usd", self.usd)


@dataclass(frozen=True)
class RemedyOption:
    """One forward remedy: ``name`` in :data:`REMEDIES`, its :class:`RepairCosts`, and either a
    given ``success_p`` or None (then p is estimated from recorded outcomes). ``detail``: what
    makes it this remedy (a seed, a temperature, the fallback model's name), reported as is."""
    name: str
    costs: RepairCosts
    success_p: float | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.name not in REMEDIES:
            raise RecoveryPolicyError(f"a remedy is one of {', '.join(REMEDIES)}; got {self.name!r}")
        if self.success_p is not None:
            _num(f"remedies[{self.name}].success_p", self.success_p, hi=1.0)


@dataclass(frozen=True)
class PolicyConfig:
    """The policy's settings. ``remedies``: the forward remedies on offer; ``reserves``;
    ``k_repair`` (K_repair, 1..3) and ``window`` (signatures kept per step); ``backoff_base_s`` T_0
    and ``backoff_cap_s`` T_max of full jitter; ``transient_retries_max``; ``usd_per_s``: None for
    the "both units" rule of gate 3, or the dollars one second is worth; ``stats``: recorded
    outcomes per ``(failure_class, remedy)``. Raises :class:`RecoveryPolicyError` when out of range."""
    remedies: tuple[RemedyOption, ...]
    reserves: Reserves = Reserves()
    k_repair: int = K_REPAIR_DEFAULT
    window: int = WINDOW_DEFAULT
    backoff_base_s: float = 0.5
    backoff_cap_s: float = 30.0
    transient_retries_max: int = 5
    usd_per_s: float | None = None
    stats: Mapping[tuple[str, str], RepairStats] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_k_repair(self.k_repair, self.window)
        if not self.remedies:
            raise RecoveryPolicyError("the policy needs at least one forward remedy")
        names = [r.name for r in self.remedies]
        if len(set(names)) != len(names):
            raise RecoveryPolicyError(f"each remedy may be offered once, got {names}")
        _num("backoff_base_s", self.backoff_base_s, lo=1e-9)
        _num("backoff_cap_s", self.backoff_cap_s, lo=self.backoff_base_s)
        _num("transient_retries_max", self.transient_retries_max, integer=True)
        if self.usd_per_s is not None:
            _num("usd_per_s", self.usd_per_s)


# --- the economics of gate 3 --------------------------------------------------------------------------


def _ratio(c: float, b: float) -> float:
    if b > 0:
        return c / b
    return 0.0 if c == 0 else math.inf


@dataclass(frozen=True)
class Economics:
    """Gate 3's numbers for one remedy (seconds and USD). ``backward_*`` = U + R;
    ``forward_*`` = c_r + (1 − p)(U + R); ``p_star_*`` = c_r/(U + R) (inf when U + R = 0 < c_r);
    ``displayed_*``: the same with the display's (1 − p)·U and its break-even c_r/U."""
    p: float
    repair_s: float
    repair_usd: float
    unwind_s: float
    unwind_usd: float
    rerun_s: float
    rerun_usd: float

    @property
    def backward_s(self) -> float:
        return self.unwind_s + self.rerun_s

    @property
    def backward_usd(self) -> float:
        return self.unwind_usd + self.rerun_usd

    @property
    def forward_s(self) -> float:
        return self.repair_s + (1.0 - self.p) * self.backward_s

    @property
    def forward_usd(self) -> float:
        return self.repair_usd + (1.0 - self.p) * self.backward_usd

    @property
    def p_star_s(self) -> float:
        return _ratio(self.repair_s, self.backward_s)

    @property
    def p_star_usd(self) -> float:
        return _ratio(self.repair_usd, self.backward_usd)

    @property
    def displayed_forward_s(self) -> float:
        return self.repair_s + (1.0 - self.p) * self.unwind_s

    @property
    def displayed_forward_usd(self) -> float:
        return self.repair_usd + (1.0 - self.p) * self.unwind_usd

    @property
    def displayed_p_star_s(self) -> float:
        return _ratio(self.repair_s, self.unwind_s)

    @property
    def displayed_p_star_usd(self) -> float:
        return _ratio(self.repair_usd, self.unwind_usd)

    def combined_p_star(self, usd_per_s: float) -> float:
        """One break-even with seconds priced at ``usd_per_s``."""
        return _ratio(self.repair_usd + usd_per_s * self.repair_s, self.backward_usd + usd_per_s * self.backward_s)

    def as_dict(self) -> dict[str, Any]:
        def j(x: float) -> float | str:
            return x if math.isfinite(x) else "inf"
        return {"p": self.p, "repair_s": self.repair_s, "repair_usd": self.repair_usd,
                "unwind_s": self.unwind_s, "unwind_usd": self.unwind_usd, "rerun_s": self.rerun_s,
                "rerun_usd": self.rerun_usd, "backward_s": self.backward_s, "backward_usd": self.backward_usd,
                "forward_expected_s": self.forward_s, "forward_expected_usd": self.forward_usd,
                "p_star_s": j(self.p_star_s), "p_star_usd": j(self.p_star_usd),
                "displayed_forward_expected_s": self.displayed_forward_s,
                "displayed_forward_expected_usd": self.displayed_forward_usd,
                "displayed_p_star_s": j(self.displayed_p_star_s), "displayed_p_star_usd": j(self.displayed_p_star_usd)}


def economics(repair: RepairCosts, p: float, *, unwind_s: float, unwind_usd: float, rerun_s: float,
              rerun_usd: float) -> Economics:
    """Gate 3's numbers for one repair of cost ``repair`` and success probability ``p`` against
    an unwind costing ``unwind_*`` (U) and a rerun costing ``rerun_*`` (R). Raises
    :class:`RecoveryPolicyError` for p outside [0, 1] or a negative cost."""
    _num("p", p, hi=1.0)
    for n, v in (("unwind_s", unwind_s), ("unwind_usd", unwind_usd), ("rerun_s", rerun_s), ("rerun_usd", rerun_usd)):
        _num(n, v)
    return Economics(p, repair.s, repair.usd, unwind_s, unwind_usd, rerun_s, rerun_usd)


# --- the decision ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecoveryDecision:
    """D(Ω)'s answer. ``directive`` (one of :data:`DIRECTIVES`); ``gate``: 1, 2, 3, ``"anti-spin"``
    or ``"pivot"``; ``reason``: one sentence; ``numbers``: every number that decided it (JSON);
    ``remedy``: ``retry_unchanged`` or the forward remedy chosen (None otherwise) and
    ``remedy_reason``; ``classification``: gate 1's reading; ``error_signature``: σ."""
    step_id: str
    directive: Directive
    gate: int | str
    reason: str
    numbers: dict[str, Any]
    classification: ErrorClassification
    error_signature: str
    remedy: str | None = None
    remedy_reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"step_id": self.step_id, "directive": self.directive, "gate": self.gate, "reason": self.reason,
                "remedy": self.remedy, "remedy_reason": self.remedy_reason,
                "error_class": self.classification.error_class, "failure_class": self.classification.failure_class,
                "error_signature": self.error_signature, "classification": self.classification.as_dict(),
                "numbers": self.numbers}


def backoff_window_s(retries_done: int, base_s: float, cap_s: float) -> float:
    """Full jitter's upper bound min(T_max, 2^k·T_0) for the k-th retry (k = ``retries_done``)."""
    return min(cap_s, base_s * 2.0 ** min(retries_done, 1023))


def _safe_case(omega: Omega, gate: int | str, why: str, base: dict[str, Any]) -> tuple[str, int | str, str]:
    if omega.failed.pivot_crossed:
        return "OPERATOR_ESCALATE", gate, f"{why}; the pivot is crossed, so no rollback: an operator takes over"
    return "BACKWARD_ROLLBACK", gate, f"{why}; before the pivot the saga unwinds by its compensators"


def _p_of(remedy: RemedyOption, failure_class: str, config: PolicyConfig) -> tuple[float, dict[str, Any]]:
    if remedy.success_p is not None:
        return remedy.success_p, {"p": remedy.success_p, "p_source": "given"}
    st = config.stats.get((failure_class, remedy.name), RepairStats())
    return st.mean, {"p": st.mean, "p_source": "estimated", "estimate": st.as_dict()}


def _fits(remedy: RemedyOption, omega: Omega, config: PolicyConfig) -> tuple[bool, dict[str, Any]]:
    c, b, r = remedy.costs, omega.budget, config.reserves
    ok = (b.tokens_rem >= c.tokens + r.tokens and b.usd_rem >= c.usd + r.usd and b.steps_rem >= c.steps)
    return ok, {"tokens_rem": b.tokens_rem, "repair_tokens": c.tokens, "tokens_reserve": r.tokens,
                "usd_rem": b.usd_rem, "repair_usd": c.usd, "usd_reserve": r.usd, "steps_rem": b.steps_rem,
                "repair_steps": c.steps, "fits": ok}


def _transient(omega: Omega, config: PolicyConfig, cls: ErrorClassification, rng: random.Random | None,
               numbers: dict[str, Any]) -> tuple[str, int | str, str, str | None, str | None]:
    k = omega.failed.retries_done
    if k >= config.transient_retries_max:
        numbers.update(retries_done=k, transient_retries_max=config.transient_retries_max)
        d, g, why = _safe_case(omega, 1, f"a transient fault ({cls.rule}) persisted through {k} retries "
                               f"(max {config.transient_retries_max}), so it is no longer treated as passing", numbers)
        return d, g, why, None, None
    window = backoff_window_s(k, config.backoff_base_s, config.backoff_cap_s)
    delay = rng.uniform(0.0, window) if rng is not None else None
    floor = cls.retry_after_s
    if delay is not None and floor is not None:
        delay = max(delay, floor)
    numbers.update(retries_done=k, backoff_base_s=config.backoff_base_s, backoff_cap_s=config.backoff_cap_s,
                   backoff_window_s=window, retry_after_s=floor, delay_s=delay)
    why = (f"gate 1 reads a transient fault ({cls.rule}): retry the same request after a full-jitter wait drawn "
           f"from U(0, {window:g} s)" + (f", no sooner than the service's Retry-After {floor:g} s" if floor else ""))
    return "TRANSIENT_RETRY", 1, why, "retry_unchanged", "a transient fault needs no change to the request"


def _post_pivot(fitting: list[tuple[RemedyOption, float, dict[str, Any]]], config: PolicyConfig,
                numbers: dict[str, Any]) -> tuple[str, int | str, str, str | None, str | None]:
    def per_success(item: tuple[RemedyOption, float, dict[str, Any]]) -> tuple[float, float]:
        rem, p, _ = item
        if p <= 0:
            return (math.inf, math.inf)
        if config.usd_per_s is not None:
            return ((rem.costs.usd + config.usd_per_s * rem.costs.s) / p, 0.0)
        return (rem.costs.usd / p, rem.costs.s / p)
    best = min(fitting, key=per_success)
    cost = per_success(best)
    numbers["chosen_cost_per_success"] = [x if math.isfinite(x) else "inf" for x in cost]
    if best[1] <= 0:
        return ("OPERATOR_ESCALATE", "pivot", "past the pivot rollback does not exist, and no fitting remedy has "
                "any chance of success (p = 0): an operator takes over", None, None)
    why = ("past the pivot rollback does not exist and the repair fits the budget: complete forward "
           f"with {best[0].name}, the least expected cost per success (c_r/p) among the fitting remedies")
    return "FORWARD_REPAIR", "pivot", why, best[0].name, f"least c_r/p after the pivot (p = {best[1]:.3g})"


def _gate3(omega: Omega, fitting: list[tuple[RemedyOption, float, dict[str, Any]]], config: PolicyConfig,
           numbers: dict[str, Any]) -> tuple[str, int | str, str, str | None, str | None]:
    scored = []
    for rem, p, _info in fitting:
        e = economics(rem.costs, p, unwind_s=omega.unwind_s, unwind_usd=omega.unwind_usd, rerun_s=omega.rerun_s,
                      rerun_usd=omega.rerun_usd)
        numbers["remedies"][rem.name]["economics"] = e.as_dict()
        if config.usd_per_s is not None:
            star = e.combined_p_star(config.usd_per_s)
            passes = p > star
            k = config.usd_per_s
            back = e.backward_usd + k * e.backward_s
            score = (e.forward_usd + k * e.forward_s) / back if back > 0 else math.inf
            numbers["remedies"][rem.name]["p_star_combined"] = star if math.isfinite(star) else "inf"
        else:
            passes = p > e.p_star_s and p > e.p_star_usd
            score = sum(f / b for f, b in ((e.forward_s, e.backward_s), (e.forward_usd, e.backward_usd)) if b > 0)
        numbers["remedies"][rem.name].update(passes_break_even=passes, relative_expected_cost=score)
        scored.append((not passes, score, rem, p, e))
    scored.sort(key=lambda t: (t[0], t[1]))
    failed, _score, rem, p, e = scored[0]
    numbers.update({k: v for k, v in e.as_dict().items()})
    numbers["combination_rule"] = ("both: p above the break-even in time and in dollars" if config.usd_per_s is None
                                   else f"one currency at {config.usd_per_s:g} USD per s")
    if failed:
        why = (f"gate 3: no remedy is worth trying; the best, {rem.name}, has p = {p:.3g} against break-evens "
               f"p* = {_fmt(e.p_star_s)} (time) and {_fmt(e.p_star_usd)} (dollars), so unwinding "
               f"({e.backward_s:.4g} s, ${e.backward_usd:.4g}) is expected to be cheaper")
        return "BACKWARD_ROLLBACK", 3, why, None, None
    why = (f"gate 3: {rem.name} with p = {p:.3g} exceeds the break-evens p* = {_fmt(e.p_star_s)} (time) and "
           f"{_fmt(e.p_star_usd)} (dollars); expected {e.forward_s:.4g} s and ${e.forward_usd:.4g} against "
           f"{e.backward_s:.4g} s and ${e.backward_usd:.4g} for unwind and rerun")
    others = [t[2].name for t in scored[1:]]
    rr = f"least expected cost relative to unwind and rerun among {', '.join([rem.name] + others)}"
    return "FORWARD_REPAIR", 3, why, rem.name, rr


def _fmt(x: float) -> str:
    return f"{x:.3g}" if math.isfinite(x) else "inf"


def decide(omega: Omega, config: PolicyConfig, *, rng: random.Random | None = None) -> RecoveryDecision:
    """D(Ω_t): the recovery directive for ``omega`` under ``config`` (see the module docstring).

    ``rng``: a seeded ``random.Random`` to draw the backoff delay of a TRANSIENT_RETRY (None: only
    the window is reported). Returns a :class:`RecoveryDecision`. Raises
    :class:`RecoveryPolicyError` for an error of an unsupported kind."""
    cls = classify_error(omega.error)
    sigma = signature_of(omega.error)
    f = omega.failed
    numbers: dict[str, Any] = {"error_class": cls.error_class, "rule": cls.rule, "pivot_crossed": f.pivot_crossed,
                               "tier": f.tier}
    remedy = remedy_reason = None
    if cls.error_class == "transient":
        directive, gate, why, remedy, remedy_reason = _transient(omega, config, cls, rng, numbers)
    elif cls.error_class in ("fatal", "unclassified"):
        what = "a fatal invariant violation" if cls.error_class == "fatal" else "an error it cannot classify"
        directive, gate, why = _safe_case(omega, 1, f"gate 1 reads {what} ({cls.rule}: {cls.reason})", numbers)
    else:
        directive, gate, why, remedy, remedy_reason = _semantic(omega, config, cls, sigma, numbers)
    return RecoveryDecision(f.step_id, directive, gate, why, numbers, cls, sigma, remedy, remedy_reason)


def _semantic(omega: Omega, config: PolicyConfig, cls: ErrorClassification, sigma: str,
              numbers: dict[str, Any]) -> tuple[str, int | str, str, str | None, str | None]:
    f = omega.failed
    guard = SpinGuard.for_step(f.step_id, f.repairs_done, f.prior_signatures, k_repair=config.k_repair,
                               window=config.window)
    v = guard.verdict(f.step_id, sigma)
    numbers["anti_spin"] = v.as_dict()
    if not v.allowed:
        if v.reason == "repeated_signature":
            what = (f"anti-spin: this error's signature repeats iteration {v.matched_iteration} (now iteration "
                    f"{v.iteration}), the repair loop is cycling")
        else:
            what = f"anti-spin: k_i = {v.repairs_done} repairs already spent, K_repair = {v.k_repair}"
        d, g, why = _safe_case(omega, "anti-spin", what, numbers)
        return d, g, why, None, None
    numbers["remedies"] = {}
    fitting = []
    for rem in config.remedies:
        ok, budget_numbers = _fits(rem, omega, config)
        p, pinfo = _p_of(rem, cls.failure_class, config)
        numbers["remedies"][rem.name] = {"budget": budget_numbers, **pinfo, "detail": dict(rem.detail)}
        if ok:
            fitting.append((rem, p, pinfo))
    if not fitting:
        d, g, why = _safe_case(omega, 2, "gate 2: no remedy fits the remaining budget with its reserve "
                               f"(tokens {omega.budget.tokens_rem}, ${omega.budget.usd_rem:g}, "
                               f"{omega.budget.steps_rem} steps left)", numbers)
        return d, g, why, None, None
    if f.pivot_crossed:
        return _post_pivot(fitting, config, numbers)
    return _gate3(omega, fitting, config, numbers)



# --- Ω and the configuration from JSON (the CLI's OMEGA.json) ------------------------------------------

_OMEGA_KEYS = {"environment", "failed_step", "error", "budget", "history", "remedies", "reserves", "policy",
               "outcomes"}


def _obj(d: Any, where: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> Mapping[str, Any]:
    if not isinstance(d, Mapping):
        raise OmegaError(f"{where} must be an object, got {type(d).__name__}", field=where)
    missing = [k for k in required if k not in d]
    if missing:
        raise OmegaError(f"{where} is missing {', '.join(missing)}", field=f"{where}.{missing[0]}")
    extra = sorted(set(d) - set(required) - set(optional))
    if extra:
        raise OmegaError(f"{where} has unknown field(s) {', '.join(extra)}", field=f"{where}.{extra[0]}")
    return d


def _build(where: str, cls: type, **kw: Any) -> Any:
    try:
        return cls(**kw)
    except RecoveryPolicyError as exc:
        raise OmegaError(f"{where}: {exc}", field=where) from None
    except TypeError as exc:
        raise OmegaError(f"{where}: {exc}", field=where) from None


def omega_from_dict(d: Any) -> Omega:
    """Ω from its JSON form (the format ``recovery decide --help`` documents): ``environment``
    (object), ``failed_step`` {step_id, tool, tier, pivot_crossed[, repairs_done,
    prior_signatures, retries_done]}, ``error`` (a service's error object or a text), ``budget``
    {tokens_rem, steps_rem, usd_rem}, ``history`` [{step_id, compensation_s, compensation_usd,
    forward_s, forward_usd}]. Other top-level keys are the configuration's
    (:func:`config_from_dict`). Raises :class:`OmegaError` naming the field."""
    d = _obj(d, "omega", ("failed_step", "error", "budget"), tuple(_OMEGA_KEYS))
    env = d.get("environment", {})
    if not isinstance(env, Mapping):
        raise OmegaError("environment must be an object", field="environment")
    fs = _obj(d["failed_step"], "failed_step", ("step_id", "tool", "tier", "pivot_crossed"),
              ("repairs_done", "prior_signatures", "retries_done"))
    prior = fs.get("prior_signatures", [])
    if not isinstance(prior, list) or not all(isinstance(s, str) for s in prior):
        raise OmegaError("failed_step.prior_signatures must be a list of σ strings",
                         field="failed_step.prior_signatures")
    failed = _build("failed_step", FailedStep, step_id=fs["step_id"], tool=fs["tool"], tier=fs["tier"],
                    pivot_crossed=fs["pivot_crossed"], repairs_done=fs.get("repairs_done", 0),
                    prior_signatures=tuple(prior), retries_done=fs.get("retries_done", 0))
    if not isinstance(d["error"], (str, Mapping)):
        raise OmegaError("error must be a service's error object or a text", field="error")
    b = _obj(d["budget"], "budget", ("tokens_rem", "steps_rem", "usd_rem"))
    budget = _build("budget", Budget, tokens_rem=b["tokens_rem"], steps_rem=b["steps_rem"], usd_rem=b["usd_rem"])
    hist = d.get("history", [])
    if not isinstance(hist, list):
        raise OmegaError("history must be a list of committed steps", field="history")
    steps = []
    for i, h in enumerate(hist):
        h = _obj(h, f"history[{i}]", ("step_id", "compensation_s", "compensation_usd", "forward_s", "forward_usd"))
        steps.append(_build(f"history[{i}]", CommittedStep, **h))
    return Omega(dict(env), failed, d["error"], budget, tuple(steps))


def config_from_dict(d: Any) -> PolicyConfig:
    """The policy configuration from the same JSON document: ``remedies`` [{name, tokens, usd, s[,
    steps, success_p, detail]}], ``reserves`` {tokens, usd}, ``policy`` {k_repair, window,
    backoff_base_s, backoff_cap_s, transient_retries_max, usd_per_s}, ``outcomes``
    [{failure_class, remedy, success}] (folded into the per-class estimates). Raises
    :class:`OmegaError` naming the field."""
    d = _obj(d, "omega", ("remedies",), tuple(_OMEGA_KEYS - {"remedies"}))
    rems = d["remedies"]
    if not isinstance(rems, list) or not rems:
        raise OmegaError("remedies must be a non-empty list", field="remedies")
    options = []
    for i, r in enumerate(rems):
        r = _obj(r, f"remedies[{i}]", ("name", "tokens", "usd", "s"), ("steps", "success_p", "detail"))
        costs = _build(f"remedies[{i}]", RepairCosts, tokens=r["tokens"], usd=r["usd"], s=r["s"],
                       steps=r.get("steps", 1))
        detail = r.get("detail", {})
        if not isinstance(detail, Mapping):
            raise OmegaError(f"remedies[{i}].detail must be an object", field=f"remedies[{i}].detail")
        options.append(_build(f"remedies[{i}]", RemedyOption, name=r["name"], costs=costs,
                              success_p=r.get("success_p"), detail=dict(detail)))
    res = _obj(d.get("reserves", {}), "reserves", (), ("tokens", "usd"))
    reserves = _build("reserves", Reserves, **res)
    pol = _obj(d.get("policy", {}), "policy", (), ("k_repair", "window", "backoff_base_s", "backoff_cap_s",
                                                    "transient_retries_max", "usd_per_s"))
    outcomes = d.get("outcomes", [])
    if not isinstance(outcomes, list) or not all(isinstance(o, Mapping) for o in outcomes):
        raise OmegaError("outcomes must be a list of {failure_class, remedy, success}", field="outcomes")
    try:
        stats = fold_repair_stats(outcomes)
    except RecoveryPolicyError as exc:
        raise OmegaError(f"outcomes: {exc}", field="outcomes") from None
    return _build("policy", PolicyConfig, remedies=tuple(options), reserves=reserves, stats=stats, **pol)


def decision_event(decision: RecoveryDecision) -> Any:
    """The ``RecoveryDecided`` record of ``decision``, to append to the trajectory log (secrets in
    the reason or numbers are redacted first). Returns a :class:`~kernel_lib.core.events.RecoveryDecided`."""
    from kernel_lib.core.events import RecoveryDecided, redact_secrets

    reason, _ = redact_secrets(decision.reason)
    numbers, _ = redact_secrets(_json_safe(decision.numbers))
    return RecoveryDecided(step_id=decision.step_id, directive=decision.directive, gate=decision.gate, reason=reason,
                           numbers=numbers, remedy=decision.remedy, error_signature=decision.error_signature,
                           error_class=decision.classification.error_class,
                           failure_class=decision.classification.failure_class)


def _json_safe(v: Any) -> Any:
    """Numbers as the log can hold them: an infinity, or a magnitude beyond canonical JSON's exact
    range (:data:`~kernel_lib.limits.JSON_NUMBER_MAX`), becomes a string."""
    if isinstance(v, float) and not math.isfinite(v):
        return "inf" if v > 0 else "-inf"
    if isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) > JSON_NUMBER_MAX:
        return f"{v:.6g}"
    if isinstance(v, Mapping):
        return {str(k): _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    return v
