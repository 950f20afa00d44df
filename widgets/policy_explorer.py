"""Policy explorer: what the recovery policy D(Ω) decides as sunk cost, repair cost, repair success
probability and budget move (Failure Recovery, figure 2 "Dynamic arbitration", gate 3's break-even
p* = c_r/(U + R), Napkin Math 0.2).

An anywidget (JupyterLab, VS Code, marimo). The widget keeps no state of its own beyond its
givens: every change builds Ω and the policy configuration from the givens and calls
:func:`kernel_lib.recovery.policy.decide`; the directive, the gate that decided, the reason and the
numbers shown are that decision's. The chart's regions are ``decide`` on a grid over (p, U) with
every other given as set, and the break-even curve is :func:`kernel_lib.recovery.policy.economics`'s
``p_star_s`` at each U.

Givens (traits, units last in each name):

=====================  =============================================================  ===========
trait                  meaning (chapter symbol)                                       check
=====================  =============================================================  ===========
``unwind_s``           U(Σ) in seconds: running the compensators of Σ                 >= 0
``unwind_usd``         U(Σ) in dollars                                                >= 0
``rerun_s``            R in seconds: running Σ's steps again after the unwind         >= 0
``rerun_usd``          R in dollars                                                   >= 0
``repair_s``           c_r in seconds: one repair pass (decode and validation)        >= 0
``repair_usd``         c_r in dollars                                                 >= 0
``repair_tokens``      E[T_repair], tokens one repair pass takes                      whole, >= 0
``success_p``          p = P(success | o_err) of the repair                           in [0, 1]
``tokens_rem``         T_rem, tokens left in the budget                               whole, >= 0
``usd_rem``            $_rem, dollars left                                            >= 0
``tokens_reserve``     T_reserve, tokens gate 2 keeps back                            whole, >= 0
``usd_reserve``        $_reserve, dollars gate 2 keeps back                           >= 0
``pivot_crossed``      the saga's pivot has committed (no rollback exists)            true/false
``error_class``        gate 1's class of the failure: transient, semantic, fatal,     one of four
                       unclassified (a sample error of that class is decided:
                       :data:`SAMPLE_ERRORS`)
=====================  =============================================================  ===========

Defaults: Napkin Math 0.2 (U = 40.6 s and $0, R = 46 s and $0.162, c_r = 4.1 s and $0.00987,
2570 tokens, p = 0.5) on a semantic error before the pivot, with 200 000 tokens and $5 left and
no reserve. Only one forward remedy is offered (``error_feedback``, p given), so the chart shows
the gates, not the choice among remedies.

Outputs: ``decision`` (``RecoveryDecision.as_dict()``), ``readout_lines`` (sentences),
``chart_spec`` (Vega-Lite, altair) and ``chart_svg`` (drawn in the kernel by vl-convert, offline;
without it ``notice`` says so), ``sliders`` (the controls' ranges), ``revision``.

Bad input never raises: a negative cost, a p above 1, NaN, an empty box, a string where a number
goes, a fractional token count or an unknown error class, set from Python or in the widget, puts a
message naming the given in ``error``, lists it in ``invalid`` (its box is marked) and keeps its
last good value; every other given still applies.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import Any

import altair as alt
import traitlets

from kernel_lib.limits import JSON_NUMBER_MAX
from kernel_lib.recovery.policy import (
    Budget, CommittedStep, FailedStep, Omega, PolicyConfig, RecoveryDecision, RemedyOption, RepairCosts, Reserves,
    decide, economics,
)
from widgets._base import KernelWidget

ERROR_CLASSES = ("transient", "semantic", "fatal", "unclassified")

#: One error of each class, as our tool services report them; gate 1 classifies each (the tests check it).
SAMPLE_ERRORS: dict[str, Any] = {
    "transient": {"http_status": 503, "error": "service unavailable", "retryable": True},
    "semantic": {"http_status": 422, "error": "routes[0].port must be an integer", "retryable": False},
    "fatal": {"http_status": 401, "error": "credential revoked", "reason": "lease_revoked", "retryable": False},
    "unclassified": "the tool printed something no rule knows",
}

#: The givens: name -> (label, unit, kind, slider min, slider max). kind: "nonneg", "whole", "prob",
#: "bool" or "class".
GIVENS: dict[str, tuple[str, str, str, float, float]] = {
    "unwind_s": ("sunk cost U (compensators)", "s", "nonneg", 0.0, 600.0),
    "unwind_usd": ("sunk cost U (compensators)", "$", "nonneg", 0.0, 5.0),
    "rerun_s": ("rerun R", "s", "nonneg", 0.0, 600.0),
    "rerun_usd": ("rerun R", "$", "nonneg", 0.0, 5.0),
    "repair_s": ("repair cost c_r", "s", "nonneg", 0.0, 120.0),
    "repair_usd": ("repair cost c_r", "$", "nonneg", 0.0, 1.0),
    "repair_tokens": ("repair tokens E[T_repair]", "tokens", "whole", 0, 50_000),
    "success_p": ("repair success p", "", "prob", 0.0, 1.0),
    "tokens_rem": ("budget left T_rem", "tokens", "whole", 0, 400_000),
    "usd_rem": ("budget left $_rem", "$", "nonneg", 0.0, 10.0),
    "tokens_reserve": ("reserve T_reserve", "tokens", "whole", 0, 100_000),
    "usd_reserve": ("reserve $_reserve", "$", "nonneg", 0.0, 5.0),
    "pivot_crossed": ("pivot crossed", "", "bool", 0, 1),
    "error_class": ("error class (gate 1)", "", "class", 0, 0),
}

#: Napkin Math 0.2's numbers on a semantic error before the pivot.
DEFAULTS: dict[str, Any] = {
    "unwind_s": 40.6, "unwind_usd": 0.0, "rerun_s": 46.0, "rerun_usd": 0.162, "repair_s": 4.1,
    "repair_usd": 0.00987, "repair_tokens": 2570, "success_p": 0.5, "tokens_rem": 200_000, "usd_rem": 5.0,
    "tokens_reserve": 0, "usd_reserve": 0.0, "pivot_crossed": False, "error_class": "semantic",
}

#: Grid of the decision-region chart: p steps and U steps (each cell is one call of ``decide``).
GRID_P = 21
GRID_U = 11
STEPS_REM = 20
COLORS = {"TRANSIENT_RETRY": "#9ecae1", "FORWARD_REPAIR": "#a1d99b", "BACKWARD_ROLLBACK": "#fdae6b",
          "OPERATOR_ESCALATE": "#e377c2"}


def check_given(name: str, value: Any) -> Any:
    """``value`` checked for given ``name``; returns it as a plain ``int``/``float``/``bool``/``str``.
    Raises ValueError naming the given (an unknown name, a wrong type, out of range, NaN, above
    JSON_NUMBER_MAX)."""
    if name not in GIVENS:
        raise ValueError(f"unknown given {name!r}: choose from {sorted(GIVENS)}")
    kind = GIVENS[name][2]
    if kind == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be true or false, got {value!r}")
        return value
    if kind == "class":
        if value not in ERROR_CLASSES:
            raise ValueError(f"{name} must be one of {', '.join(ERROR_CLASSES)}, got {value!r}")
        return value
    if value is None:
        raise ValueError(f"{name} has no value (the box is empty or not a number)")
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    try:
        x = float(value)
    except (OverflowError, ValueError):
        raise ValueError(f"{name} = {value!r} is too large") from None
    if not math.isfinite(x):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if kind == "whole":
        if x != int(x) or x < 0 or x > 10**12:
            raise ValueError(f"{name} must be a whole number of tokens in [0, 10^12], got {value!r}")
        return int(x)
    if x < 0 or (kind == "prob" and x > 1):
        raise ValueError(f"{name} must be in [0, 1], got {value!r}" if kind == "prob"
                         else f"{name} must be >= 0, got {value!r}")
    if x > JSON_NUMBER_MAX:   # the policy's own bound: refused there, the whole decision would be lost
        raise ValueError(f"{name} must be at most {JSON_NUMBER_MAX} (2^53 - 1), got {value!r}")
    return x


def omega_and_config(g: Mapping[str, Any]) -> tuple[Omega, PolicyConfig]:
    """Ω and the policy configuration the checked givens ``g`` describe (one committed step Σ
    holding U and R; one remedy, ``error_feedback``, with p given)."""
    failed = FailedStep("T_fail", "tool", "II", g["pivot_crossed"])
    history = (CommittedStep("Σ", g["unwind_s"], g["unwind_usd"], g["rerun_s"], g["rerun_usd"]),)
    omega = Omega({"view": "policy explorer"}, failed, SAMPLE_ERRORS[g["error_class"]],
                  Budget(g["tokens_rem"], STEPS_REM, g["usd_rem"]), history)
    remedy = RemedyOption("error_feedback", RepairCosts(g["repair_tokens"], g["repair_usd"], g["repair_s"]),
                          success_p=g["success_p"])
    return omega, PolicyConfig((remedy,), reserves=Reserves(g["tokens_reserve"], g["usd_reserve"]))


@dataclass(frozen=True)
class PolicyView:
    """What :func:`explore_policy` computed: ``givens`` (checked), ``decision`` (D(Ω)), ``regions``
    (rows {success_p, unwind_s, directive, gate}), ``break_even`` (rows {unwind_s, p_star_s}),
    ``p_star_usd`` (the dollar break-even at the current U, "inf" when none), ``readout_lines``
    and ``chart_spec`` (Vega-Lite dict)."""
    givens: dict
    decision: RecoveryDecision
    regions: list
    break_even: list
    p_star_usd: float | str
    readout_lines: list
    chart_spec: dict = field(repr=False)


def _fmt(x: Any) -> str:
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def explore_policy(givens: Mapping[str, Any] | None = None, **more: Any) -> PolicyView:
    """D(Ω) for the givens (missing ones take :data:`DEFAULTS`), the decision regions over (p, U)
    and the break-even curve. Raises ValueError naming the first bad given."""
    raw = {**DEFAULTS, **(givens or {}), **more}
    g = {n: check_given(n, raw[n]) for n in GIVENS}
    unknown = sorted(set(raw) - set(GIVENS))
    if unknown:
        raise ValueError(f"unknown given(s) {unknown}: choose from {sorted(GIVENS)}")
    omega, config = omega_and_config(g)
    decision = decide(omega, config)
    u_hi = max(GIVENS["unwind_s"][4] / 2, 2.0 * g["unwind_s"], 1.0)
    us = [u_hi * i / (GRID_U - 1) for i in range(GRID_U)]
    ps = [i / (GRID_P - 1) for i in range(GRID_P)]
    regions = []
    for u in us:
        for p in ps:
            o, c = omega_and_config({**g, "unwind_s": u, "success_p": p})
            d = decide(o, c)
            regions.append({"success_p": p, "unwind_s": u, "directive": d.directive, "gate": str(d.gate)})
    costs = RepairCosts(g["repair_tokens"], g["repair_usd"], g["repair_s"])
    fine = [u_hi * i / 200 for i in range(201)]
    curve = []
    for u in fine:
        e = economics(costs, g["success_p"], unwind_s=u, unwind_usd=g["unwind_usd"], rerun_s=g["rerun_s"],
                      rerun_usd=g["rerun_usd"])
        if math.isfinite(e.p_star_s) and e.p_star_s <= 1:
            curve.append({"unwind_s": u, "p_star_s": e.p_star_s})
    now = economics(costs, g["success_p"], unwind_s=g["unwind_s"], unwind_usd=g["unwind_usd"], rerun_s=g["rerun_s"],
                    rerun_usd=g["rerun_usd"])
    p_usd: float | str = now.p_star_usd if math.isfinite(now.p_star_usd) else "inf"
    cls = decision.classification
    lines = [f"D(Ω) = {decision.directive} (gate {decision.gate})", decision.reason,
             f"gate 1: {cls.error_class} ({cls.rule})"]
    n = decision.numbers
    if "p_star_s" in n:
        lines.append(f"break-even p* = c_r/(U + R): {_fmt(n['p_star_s'])} in time, {_fmt(n['p_star_usd'])} in "
                     f"dollars; E[forward] = {_fmt(n['forward_expected_s'])} s and ${_fmt(n['forward_expected_usd'])} "
                     f"against unwind + rerun {_fmt(n['backward_s'])} s and ${_fmt(n['backward_usd'])}")
    rem = n.get("remedies", {}).get("error_feedback")
    if rem:
        b = rem["budget"]
        lines.append(f"gate 2: {b['tokens_rem']} tokens ≥ {b['repair_tokens']} + {b['tokens_reserve']} reserve and "
                     f"${_fmt(b['usd_rem'])} ≥ ${_fmt(b['repair_usd'])} + ${_fmt(b['usd_reserve'])} reserve: "
                     f"{'fits' if b['fits'] else 'does not fit'}")
    spec = _chart(regions, curve, g, decision, p_usd, u_hi)
    return PolicyView(g, decision, regions, curve, p_usd, lines, spec)


def _chart(regions, curve, g, decision, p_usd, u_hi) -> dict:
    domain = [d for d in COLORS if any(r["directive"] == d for r in regions)] or list(COLORS)
    du, dp = u_hi / (GRID_U - 1), 1 / (GRID_P - 1)
    cells = [{**r, "u0": max(0.0, r["unwind_s"] - du / 2), "u1": r["unwind_s"] + du / 2,
              "p0": max(0.0, r["success_p"] - dp / 2), "p1": min(1.0, r["success_p"] + dp / 2)} for r in regions]
    x = alt.X("p0:Q", title="repair success probability p", scale=alt.Scale(domain=[0, 1], nice=False))
    y = alt.Y("u0:Q", title="sunk cost U (s)", scale=alt.Scale(domain=[0, u_hi + du / 2], nice=False))
    layers = [alt.Chart(alt.Data(values=cells)).mark_rect(opacity=0.75).encode(
        x=x, x2="p1:Q", y=y, y2="u1:Q",
        color=alt.Color("directive:N", title="D(Ω)", legend=alt.Legend(orient="bottom"),
                        scale=alt.Scale(domain=domain, range=[COLORS[d] for d in domain])),
        tooltip=["directive:N", "gate:N", "success_p:Q", "unwind_s:Q"])]
    if curve:
        layers.append(alt.Chart(alt.Data(values=[{**c, "what": "p* = c_r/(U+R), time"} for c in curve]))
                      .mark_line(color="black", strokeWidth=2).encode(
                          x=alt.X("p_star_s:Q"), y=alt.Y("unwind_s:Q"), order="unwind_s:Q"))
    if isinstance(p_usd, float) and p_usd <= 1:
        layers.append(alt.Chart(alt.Data(values=[{"p_star_usd": p_usd}])).mark_rule(
            color="black", strokeDash=[4, 3]).encode(x="p_star_usd:Q"))
    layers.append(alt.Chart(alt.Data(values=[{"success_p": g["success_p"], "unwind_s": g["unwind_s"],
                                              "label": f"Ω: {decision.directive}"}]))
                  .mark_point(shape="diamond", size=160, filled=True, color="black").encode(
                      x="success_p:Q", y="unwind_s:Q", tooltip=["label:N"]))
    title = [f"D(Ω) over (p, U): R = {g['rerun_s']:g} s, c_r = {g['repair_s']:g} s and ${g['repair_usd']:g}, "
             f"{g['error_class']}, pivot {'crossed' if g['pivot_crossed'] else 'not crossed'}",
             "solid: break-even in time p* = c_r/(U+R); dashed: in dollars; diamond: the current Ω"]
    return alt.layer(*layers).properties(width=420, height=300, title=title).to_dict()


def render_svg(spec: dict) -> str:
    """``spec`` drawn as SVG by vl-convert, in the kernel and offline (ImportError without it)."""
    from altair.utils.mimebundle import spec_to_mimebundle

    return spec_to_mimebundle(spec, format="svg", mode="vega-lite", engine="vl-convert")["image/svg+xml"]


def _jsonable(value: Any) -> Any:
    """What the front end can be sent for a given: plain numbers, bools and strings; None otherwise."""
    if isinstance(value, (bool, str)) or value is None:
        return value
    if isinstance(value, Real):
        try:
            x = float(value)
        except (OverflowError, ValueError):
            return None
        if not math.isfinite(x):
            return None
        return int(value) if isinstance(value, Integral) else x
    return None


class PolicyExplorer(KernelWidget, static="policy_explorer"):
    """Sliders and boxes for Ω's costs, p, budget, pivot and error class; D(Ω), its reason and
    numbers, and the decision-region chart, all computed by kernel_lib.

    Args: ``draw_svg`` (draw the chart as SVG; needs vl-convert-python) and any givens by name.
    Python API: set a trait (``w.success_p = 0.02``) or several with :meth:`update`; ``w.view`` is
    the last :class:`PolicyView`. Nothing raises for a bad given: read ``w.error`` and ``w.invalid``.
    """

    unwind_s = traitlets.Any(DEFAULTS["unwind_s"]).tag(sync=True)
    unwind_usd = traitlets.Any(DEFAULTS["unwind_usd"]).tag(sync=True)
    rerun_s = traitlets.Any(DEFAULTS["rerun_s"]).tag(sync=True)
    rerun_usd = traitlets.Any(DEFAULTS["rerun_usd"]).tag(sync=True)
    repair_s = traitlets.Any(DEFAULTS["repair_s"]).tag(sync=True)
    repair_usd = traitlets.Any(DEFAULTS["repair_usd"]).tag(sync=True)
    repair_tokens = traitlets.Any(DEFAULTS["repair_tokens"]).tag(sync=True)
    success_p = traitlets.Any(DEFAULTS["success_p"]).tag(sync=True)
    tokens_rem = traitlets.Any(DEFAULTS["tokens_rem"]).tag(sync=True)
    usd_rem = traitlets.Any(DEFAULTS["usd_rem"]).tag(sync=True)
    tokens_reserve = traitlets.Any(DEFAULTS["tokens_reserve"]).tag(sync=True)
    usd_reserve = traitlets.Any(DEFAULTS["usd_reserve"]).tag(sync=True)
    pivot_crossed = traitlets.Any(DEFAULTS["pivot_crossed"]).tag(sync=True)
    error_class = traitlets.Any(DEFAULTS["error_class"]).tag(sync=True)
    # what the JavaScript draws
    sliders = traitlets.List().tag(sync=True)
    decision = traitlets.Dict().tag(sync=True)
    readout_lines = traitlets.List().tag(sync=True)
    chart_spec = traitlets.Dict().tag(sync=True)
    chart_svg = traitlets.Unicode("").tag(sync=True)
    notice = traitlets.Unicode("").tag(sync=True)
    invalid = traitlets.Dict().tag(sync=True)
    revision = traitlets.Int(0).tag(sync=True)

    def __init__(self, *, draw_svg: bool = True, **givens: Any):
        unknown = sorted(set(givens) - set(GIVENS))
        if unknown:
            raise TypeError(f"PolicyExplorer got unknown givens {unknown}: choose from {sorted(GIVENS)}")
        self._raw: dict[str, Any] = {}
        self._good: dict[str, Any] = {}
        self._ready = False
        self.draw_svg = draw_svg
        self.view: PolicyView | None = None
        super().__init__(**givens)
        self.sliders = [{"name": n, "label": lab, "unit": u, "kind": k, "min": lo, "max": hi,
                         "choices": list(ERROR_CLASSES) if k == "class" else []}
                        for n, (lab, u, k, lo, hi) in GIVENS.items()]
        self.observe(self._on_given, names=list(GIVENS))
        self._ready = True
        self._recompute()

    @traitlets.validate(*GIVENS)
    def _coerce(self, proposal: Any) -> Any:
        """Keep the value as given for the checks; sync only what JSON can carry (else None)."""
        name, value = proposal["trait"].name, proposal["value"]
        self._raw[name] = value
        return _jsonable(value)

    def update(self, **givens: Any) -> bool:
        """Set several givens and decide once. Returns True if all were accepted (else see ``error``)."""
        return self.set_givens(givens, GIVENS)

    def set_state(self, sync_data: dict[str, Any]) -> None:
        """The front end's changes; an empty box on a given already None is no trait change, so it
        is reported here."""
        same = [n for n in GIVENS if n in sync_data and sync_data[n] is None and getattr(self, n) is None]
        super().set_state(sync_data)
        for n in same:
            self._raw[n] = None
        if same and self._ready:
            self._recompute()

    def _on_given(self, change: dict[str, Any]) -> None:
        if self._ready:
            self._recompute()

    def _recompute(self) -> bool:
        bad: dict[str, str] = {}
        usable: dict[str, Any] = {}
        for name in GIVENS:
            raw = self._raw.get(name, getattr(self, name))
            try:
                usable[name] = self._good[name] = check_given(name, raw)
            except ValueError as exc:
                bad[name] = str(exc)
                usable[name] = self._good.get(name, DEFAULTS[name])
        try:
            view = explore_policy(usable)
        except Exception as exc:    # noqa: BLE001 - a bug must not become a traceback in the notebook
            self.error, self.invalid = f"could not decide ({type(exc).__name__}): {exc}", dict(bad)
            return False
        svg, notice = "", ""
        if self.draw_svg:
            try:
                svg = render_svg(view.chart_spec)
            except ImportError as exc:
                notice = f"chart not drawn: {exc}. Install vl-convert-python to draw it offline"
            except Exception as exc:    # noqa: BLE001
                notice = f"chart not drawn ({type(exc).__name__}): {exc}"
        self.view = view
        with self.hold_sync():
            self.decision = _safe(view.decision.as_dict())
            self.readout_lines = view.readout_lines
            self.chart_spec, self.chart_svg, self.notice = view.chart_spec, svg, notice
            self.invalid = dict(bad)
            self.error = self._refusal(bad, view) if bad else ""
            self.revision += 1
        return not bad

    @staticmethod
    def _refusal(bad: Mapping[str, str], view: PolicyView) -> str:
        kept = ", ".join(f"{n} = {view.givens[n]!r}" for n in bad)
        return (f"{'; '.join(bad.values())}. Until fixed the decision keeps the last valid value ({kept}); "
                f"every other given is applied")


def _safe(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return "inf" if v > 0 else "-inf"
    if isinstance(v, Mapping):
        return {str(k): _safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_safe(x) for x in v]
    return v


__all__ = ["DEFAULTS", "ERROR_CLASSES", "GIVENS", "SAMPLE_ERRORS", "PolicyExplorer", "PolicyView", "check_given",
           "explore_policy", "omega_and_config", "render_svg"]


#: What the front end receives: static/_shared.js + static/policy_explorer.js, and static/policy_explorer.css.
_ESM, _CSS = PolicyExplorer._esm, PolicyExplorer._css
