"""Retention planner: what keeping each artifact class costs, and which retention promises a policy
keeps (Durable Execution §11.8.1 retention lifetimes, §11.8.2 content-addressed payloads,
Napkin Math 11.2, §11.12 exercise 7).

An anywidget (JupyterLab, VS Code, marimo) that also works headless (papermill): every figure it
shows is computed by :mod:`kernel_lib.retention.pricing`; the widget only checks the givens, asks that module,
and lays the answers out. The JavaScript draws what the kernel publishes and holds no state.

Givens (synced traits; sizes are SI, 1 KB = 1000 B, 1 MB = 10^6 B, GB = 10^9 B as in kernel_lib):

===========================  ===============================================  =====================
trait                        meaning                                          accepted
===========================  ===============================================  =====================
``turns``                    turns of one trajectory                          whole, 0 .. 10^6
``envelope_kb_per_turn``     event envelopes logged per turn, KB              0 .. 10^6
``observation_kb_per_turn``  delivered (bounded) observations per turn, KB    0 .. 10^6
``pages``                    raw pages kept besides the observations          whole, 0 .. 10^7
``page_kb_raw``              mean size of one raw page, KB                    0 .. 10^7
``workspace_mb``             workspace snapshots the run needs, MB            0 .. 10^7
``usd_per_gb_month``         storage price, USD per GB-month                  0 .. 1000
``attempt_cost_usd``         cost of one attempt, USD                         > 0, <= 10^6
``trajectories``             trajectories started per year (the fleet)        whole, 0 .. 10^12
``replay_months``            historical-replay promise, months                0 .. :data:`MAX_MONTHS`
``diagnostic_months``        diagnostics promise for raw pages, months        0 .. :data:`MAX_MONTHS`
===========================  ===============================================  =====================

``custom_lifetimes`` (synced dict) is the reader's own policy: for each artifact class of
:data:`kernel_lib.retention.pricing.ARTIFACT_CLASSES` a lifetime in months after the run (0 .. MAX_MONTHS; 0
keeps the bytes only until the run settles) or ``None`` for "not kept durably".

Policies compared (in this order; see :meth:`RetentionPlanner.policies`):

* ``full retention <replay_months> months``: :func:`kernel_lib.retention.pricing.full_retention`, one timer for
  every class (Napkin Math 11.2 prices this one at 12 months);
* ``split lifetimes (raw pages <diagnostic_months> ...)``: :func:`kernel_lib.retention.pricing.split_lifetimes`,
  the separate schedules of §11.8.1;
* ``custom``: ``custom_lifetimes``. It starts as exercise 7's "digest only" idea (delivered
  observations dropped when the run settles, everything else on its promise), which breaks replay;
* any ``extra_policies`` passed to the constructor.

Promises judged (:func:`kernel_lib.retention.pricing.promises` with ``replay_months``, ``diagnostic_months``,
and ``workspace=True`` when the trajectory has workspace bytes; verdicts from
:func:`~kernel_lib.retention.pricing.promises_kept`): ``current_recovery``, ``historical_replay``,
``diagnostics``.

Presets (``preset`` trait, :data:`PRESETS`): ``"repair"`` loads Napkin Math 11.2's stated givens plus
the two quantities the box leaves implicit, the workspace size and the attempt cost, as inferred by
:func:`kernel_lib.retention.pricing.napkin_11_2` (labelled "inferred" in ``sources``); the fleet size and
diagnostic window, which the box does not need, come from exercise 7's defaults. ``"research"`` loads
exercise 7's defaults (:data:`kernel_lib.course.exercises.ex11_7.DEFAULTS`; no workspace). Loading a preset
replaces the givens, not the custom lifetimes.

Bad input: a negative, NaN, infinite, empty or non-number value, a fraction where a whole count
belongs, a value outside the range above, an unknown artifact class or preset. Typed in the widget,
it is not applied: the trait goes back to its previous value and ``error`` says why. Set from Python
(attribute assignment, :meth:`~RetentionPlanner.update`, :meth:`~RetentionPlanner.set_lifetime`,
:meth:`~RetentionPlanner.load_preset`) it is reverted the same way and then raises
:class:`kernel_lib.errors.ConfigError`.

Drawing: the stacked bar is a plain SVG string built here (:func:`stacked_bar_svg`), so nothing is
fetched from a network at run time.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import Any

import traitlets

import kernel_lib.retention.pricing as rt
from kernel_lib.errors import ConfigError
from widgets.tables import money_text
import kernel_lib.course.exercises.ex11_7 as ex11_7
from widgets._base import KernelWidget

#: Longest lifetime or promise the planner takes, months (a century, as exercise 7's range).
MAX_MONTHS = 1200.0


@dataclass(frozen=True)
class Given:
    """One given: label, unit, whole number or not, and the accepted range [lo, hi] (lo excluded
    when ``positive``)."""

    label: str
    unit: str
    whole: bool
    lo: float
    hi: float
    positive: bool = False


GIVENS: dict[str, Given] = {
    "turns": Given("turns in one trajectory", "turns", True, 0, 10 ** 6),
    "envelope_kb_per_turn": Given("event envelopes logged per turn", "KB/turn", False, 0.0, 1e6),
    "observation_kb_per_turn": Given("delivered (bounded) observations per turn", "KB/turn", False, 0.0, 1e6),
    "pages": Given("raw pages kept besides the observations", "pages", True, 0, 10 ** 7),
    "page_kb_raw": Given("mean size of one raw page", "KB/page", False, 0.0, 1e7),
    "workspace_mb": Given("workspace snapshots the run needs", "MB", False, 0.0, 1e7),
    "usd_per_gb_month": Given("storage price", "USD per GB-month", False, 0.0, 1000.0),
    "attempt_cost_usd": Given("cost of one attempt", "USD", False, 0.0, 1e6, positive=True),
    "trajectories": Given("trajectories started per year (fleet)", "per year", True, 0, 10 ** 12),
    "replay_months": Given("historical replay promise", "months", False, 0.0, MAX_MONTHS),
    "diagnostic_months": Given("diagnostics promise (raw pages)", "months", False, 0.0, MAX_MONTHS),
}

#: Display names of the artifact classes (kernel_lib's names are the keys).
CLASS_LABELS = {"envelopes": "envelopes", "observations": "delivered observations", "raw_pages": "raw pages",
                "workspace": "workspace"}
COLORS = {"envelopes": "#1f77b4", "observations": "#2ca02c", "raw_pages": "#ff7f0e", "workspace": "#9467bd"}
CUSTOM = "custom"


def _napkin_preset() -> tuple[dict[str, Any], dict[str, str]]:
    nap = rt.napkin_11_2()
    g = rt.NAPKIN_11_2_PRINTED["givens"]
    ex = ex11_7.DEFAULTS
    stated = "stated in Napkin Math 11.2"
    inferred = "inferred by kernel_lib.retention.pricing.napkin_11_2 (the box does not state it)"
    givens = {"turns": g["turns"], "envelope_kb_per_turn": g["envelope_kb_per_turn"],
              "observation_kb_per_turn": g["payload_kb_per_turn"], "pages": 0, "page_kb_raw": 0.0,
              "workspace_mb": nap.workspace_mb, "usd_per_gb_month": g["usd_per_gb_month"],
              "attempt_cost_usd": nap.attempt_cost_usd, "trajectories": ex["trajectories"],
              "replay_months": g["months"], "diagnostic_months": ex["raw_page_months"]}
    sources = {"turns": stated, "envelope_kb_per_turn": stated,
               "observation_kb_per_turn": stated + " (its per-turn payload)",
               "pages": "none: the repair trajectory keeps no raw pages", "page_kb_raw": "none (no raw pages)",
               "workspace_mb": inferred, "usd_per_gb_month": stated, "attempt_cost_usd": inferred,
               "trajectories": "assumed: exercise 7's fleet (the box prices one trajectory)",
               "replay_months": stated + " (a year)",
               "diagnostic_months": "assumed: exercise 7's raw-page window"}
    return givens, sources


def _research_preset() -> tuple[dict[str, Any], dict[str, str]]:
    ex = ex11_7.DEFAULTS
    src = "exercise 7 default"
    givens = {"turns": ex["turns"], "envelope_kb_per_turn": ex["envelope_kb_per_turn"],
              "observation_kb_per_turn": ex["observation_kb_per_turn"], "pages": ex["pages"],
              "page_kb_raw": ex["page_kb_raw"], "workspace_mb": 0.0, "usd_per_gb_month": ex["usd_per_gb_month"],
              "attempt_cost_usd": ex["attempt_cost_usd"], "trajectories": ex["trajectories"],
              "replay_months": ex["replay_months"], "diagnostic_months": ex["raw_page_months"]}
    sources = {n: src for n in givens}
    sources["workspace_mb"] = "none: the research agent keeps no workspace"
    sources["diagnostic_months"] = "exercise 7 default (its raw_page_months)"
    return givens, sources


#: Preset name -> (label, loader returning (givens, sources)).
PRESETS: dict[str, tuple[str, Any]] = {
    "repair": ("repair trajectory (Napkin Math 11.2)", _napkin_preset),
    "research": ("research agent (exercise 7)", _research_preset),
}


def preset_givens(name: str) -> tuple[dict[str, Any], dict[str, str]]:
    """``(givens, sources)`` of preset ``name`` (a key of :data:`PRESETS`); ConfigError otherwise."""
    if not isinstance(name, str) or name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}: choose from {', '.join(PRESETS)}")
    givens, sources = PRESETS[name][1]()
    return check_givens(givens), sources


# --- checks ---------------------------------------------------------------------------------------


def _short(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def _number(name: str, value: Any, *, whole: bool, lo: float, hi: float, positive: bool = False) -> int | float:
    """``value`` as a plain int (``whole``) or float inside [lo, hi]; ConfigError naming ``name``."""
    if value is None or (isinstance(value, str) and value.strip() == ""):
        raise ConfigError(f"{name} has no value (the box is empty or not a number)")
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ConfigError(f"{name} must be a number, got {_short(value)}")
    try:
        as_float = float(value)
    except (OverflowError, ValueError, TypeError):
        raise ConfigError(f"{name} = {_short(value)} is too large (at most {hi:g})") from None
    if not math.isfinite(as_float):
        raise ConfigError(f"{name} must be a finite number, got {_short(value)}")
    if whole:
        if not (isinstance(value, Integral) or as_float.is_integer()):
            raise ConfigError(f"{name} must be a whole number, got {_short(value)}")
        out: int | float = int(value) if isinstance(value, Integral) else int(as_float)
    else:
        out = as_float
    if out < lo or (positive and out <= lo) or out > hi:
        low = f"> {lo:g}" if positive else f">= {lo:g}"
        raise ConfigError(f"{name} must be {low} and <= {hi:g}, got {_short(value)}")
    return out


def check_given(name: str, value: Any) -> int | float:
    """One given checked against :data:`GIVENS`; returns it as a plain int or float.

    Raises ConfigError for an unknown name, a missing, non-number, NaN or infinite value, a fraction
    where a whole number belongs, or a value outside the given's range."""
    if name not in GIVENS:
        raise ConfigError(f"unknown given {name!r}: choose from {', '.join(GIVENS)}")
    g = GIVENS[name]
    return _number(name, value, whole=g.whole, lo=g.lo, hi=g.hi, positive=g.positive)


def check_givens(givens: Mapping[str, Any]) -> dict[str, int | float]:
    """Every given of :data:`GIVENS` checked (all must be present); ConfigError names the first bad one."""
    unknown = [n for n in givens if n not in GIVENS]
    if unknown:
        raise ConfigError(f"unknown given {unknown[0]!r}: choose from {', '.join(GIVENS)}")
    missing = [n for n in GIVENS if n not in givens]
    if missing:
        raise ConfigError(f"missing given(s): {', '.join(missing)}")
    return {n: check_given(n, givens[n]) for n in GIVENS}


def check_lifetime(artifact: str, months: Any) -> float | None:
    """A lifetime in months for ``artifact`` (None = not kept durably), checked: a class of
    :data:`kernel_lib.retention.pricing.ARTIFACT_CLASSES` and a number in [0, MAX_MONTHS]; ConfigError otherwise."""
    if artifact not in rt.ARTIFACT_CLASSES:
        raise ConfigError(f"unknown artifact class {artifact!r}: choose from {', '.join(rt.ARTIFACT_CLASSES)}")
    if months is None:
        return None
    return float(_number(f"lifetime of {artifact}", months, whole=False, lo=0.0, hi=MAX_MONTHS))


def check_lifetimes(lifetimes: Mapping[str, Any]) -> dict[str, float | None]:
    """``{class: months or None}`` for every artifact class (a class left out is None, not kept)."""
    if not isinstance(lifetimes, Mapping):
        raise ConfigError(f"custom lifetimes must be a mapping of artifact class to months or None, got "
                          f"{type(lifetimes).__name__}")
    for a in lifetimes:
        if a not in rt.ARTIFACT_CLASSES:
            raise ConfigError(f"unknown artifact class {a!r}: choose from {', '.join(rt.ARTIFACT_CLASSES)}")
    return {a: check_lifetime(a, lifetimes.get(a)) for a in rt.ARTIFACT_CLASSES}


def default_custom_lifetimes(replay_months: float, diagnostic_months: float) -> dict[str, float | None]:
    """The custom policy's starting point: exercise 7's "digest only" variant (envelopes, workspace on
    the replay promise; delivered observations kept only until the run settles, 0 months; raw pages on
    the diagnostics window)."""
    r, d = float(replay_months), float(diagnostic_months)
    return {"envelopes": r, "observations": 0.0, "raw_pages": d, "workspace": r}


# --- the plan -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetentionPlan:
    """What :func:`plan` computed for one set of givens (every number from kernel_lib.retention.pricing).

    Fields:
        givens: the checked givens. bytes: :class:`kernel_lib.retention.pricing.TrajectoryBytes` of one trajectory.
        policies: ``{display name: RetentionPolicy}`` in comparison order.
        costs: ``{policy: {class: USD per trajectory, "total": USD}}``
            (:func:`~kernel_lib.retention.pricing.policy_cost_usd`).
        wanted: the three promises (:func:`~kernel_lib.retention.pricing.promises`).
        verdicts: ``{policy: {promise: PromiseVerdict}}`` (:func:`~kernel_lib.retention.pricing.promises_kept`).
        rows: one dict per policy and class plus a ``"total"`` row per policy, keys
            ``policy, artifact, lifetime_months, bytes, byte_share, gb_months, usd_per_trajectory,
            usd_per_fleet_year, share_of_attempt`` (the total row's lifetime is None).
        promise_rows: one dict per policy and promise: ``policy, promise, window_months, classes, kept, short``.
    """

    givens: dict
    bytes: rt.TrajectoryBytes
    policies: dict
    costs: dict
    wanted: tuple
    verdicts: dict
    rows: list = field(repr=False)
    promise_rows: list = field(repr=False)


def build_policies(givens: Mapping[str, Any], custom: Mapping[str, Any],
                   extra: Iterable[rt.RetentionPolicy] = ()) -> dict[str, rt.RetentionPolicy]:
    """``{name: RetentionPolicy}``: full retention and split lifetimes on the givens' promise windows
    (§11.8.1), the custom policy, then ``extra``. ConfigError on a duplicate name or a non-policy."""
    r, d = givens["replay_months"], givens["diagnostic_months"]
    full = rt.full_retention(r, f"full retention {r:g} months")
    split = rt.split_lifetimes(r, d, f"split lifetimes (raw pages {d:g} month{'' if d == 1 else 's'})")
    out = {full.name: full, split.name: split, CUSTOM: rt.RetentionPolicy(CUSTOM, check_lifetimes(custom))}
    for p in extra:
        if not isinstance(p, rt.RetentionPolicy):
            raise ConfigError("extra policies must be kernel_lib.retention.pricing.RetentionPolicy, "
                              f"got {type(p).__name__}")
        if p.name in out:
            raise ConfigError(f"policy name {p.name!r} is used twice; give each policy its own name")
        out[p.name] = p
    return out


def plan(givens: Mapping[str, Any], custom: Mapping[str, Any] | None = None,
         extra: Iterable[rt.RetentionPolicy] = ()) -> RetentionPlan:
    """Price every policy and judge every promise for ``givens`` (see :data:`GIVENS`).

    ``custom`` defaults to :func:`default_custom_lifetimes`. Raises ConfigError on a bad given, lifetime
    or policy (and passes on kernel_lib.retention.pricing's own ConfigError, e.g. an overflowing bill)."""
    g = check_givens(givens)
    if custom is None:
        custom = default_custom_lifetimes(g["replay_months"], g["diagnostic_months"])
    tb = rt.trajectory_bytes(g["turns"], g["envelope_kb_per_turn"], g["observation_kb_per_turn"], pages=g["pages"],
                             page_kb_raw=g["page_kb_raw"], workspace_mb=g["workspace_mb"])
    pols = build_policies(g, custom, extra)
    wanted = rt.promises(g["replay_months"], g["diagnostic_months"], workspace=tb.workspace > 0)
    price, attempt, n = g["usd_per_gb_month"], g["attempt_cost_usd"], g["trajectories"]
    costs, verdicts, rows, prows = {}, {}, [], []
    sizes = tb.by_class()
    for name, pol in pols.items():
        cost = rt.policy_cost_usd(tb, pol, price)
        costs[name] = cost
        gbm_total = 0.0
        for a in rt.ARTIFACT_CLASSES:
            life = pol.lifetime(a)
            gbm = rt.storage_cost_usd(sizes[a], 1.0, life or 0.0)     # GB-months: the bill at $1 per GB-month
            gbm_total += gbm
            rows.append({"policy": name, "artifact": a, "lifetime_months": life, "bytes": sizes[a],
                         "byte_share": tb.share(a), "gb_months": gbm, "usd_per_trajectory": cost[a],
                         "usd_per_fleet_year": rt.fleet_cost_usd(cost[a], n),
                         "share_of_attempt": rt.share_of_attempt(cost[a], attempt)})
        rows.append({"policy": name, "artifact": "total", "lifetime_months": None, "bytes": tb.total,
                     "byte_share": 1.0 if tb.total else 0.0, "gb_months": gbm_total,
                     "usd_per_trajectory": cost["total"], "usd_per_fleet_year": rt.fleet_cost_usd(cost["total"], n),
                     "share_of_attempt": rt.share_of_attempt(cost["total"], attempt)})
        verdicts[name] = rt.promises_kept(pol, wanted)
        for pr in wanted:
            v = verdicts[name][pr.name]
            prows.append({"policy": name, "promise": pr.name, "window_months": pr.months, "classes": list(pr.classes),
                          "kept": v.kept, "short": list(v.short)})
    return RetentionPlan(g, tb, pols, costs, wanted, verdicts, rows, prows)


# --- presentation ---------------------------------------------------------------------------------


def usd(x: float) -> str:
    """A dollar amount for display (:func:`widgets.tables.money_text`): from a dollar up with 2 decimals
    and separators, below with 3 significant digits ("$0.0149", "$0.0000331"), never exponent notation."""
    return money_text(x)


def percent(fraction: float) -> str:
    """A fraction shown as a percentage with 3 significant digits."""
    return f"{100 * fraction:.3g}%"


def months_text(m: float | None) -> str:
    """A lifetime in words: "not kept", or "12 months" after the run."""
    return "not kept" if m is None else f"{m:g} months"


def _size(nbytes: float) -> str:
    if nbytes >= rt.BYTES_PER_GB:
        return f"{nbytes / rt.BYTES_PER_GB:,.3g} GB"
    if nbytes >= rt.BYTES_PER_MB:
        return f"{nbytes / rt.BYTES_PER_MB:,.3g} MB"
    return f"{nbytes / rt.BYTES_PER_KB:,.3g} KB"


#: The promises as the tables and sentences name them.
PROMISE_LABELS = {"current_recovery": "current recovery", "historical_replay": "historical replay",
                  "diagnostics": "diagnostics"}


def _kept_for(artifact: str, pol: rt.RetentionPolicy) -> str:
    life = pol.lifetime(artifact)
    if life is None:
        return f"{CLASS_LABELS[artifact]} not kept"
    if life == 0:
        return f"{CLASS_LABELS[artifact]} dropped when the run ends"
    return f"{CLASS_LABELS[artifact]} kept only {life:g} months"


def _short_text(pr: rt.Promise, v: rt.PromiseVerdict, pol: rt.RetentionPolicy) -> str:
    """"kept", or why not: which classes fall short and what the promise needs, in words (a window of
    0 months means "kept durably while the run can still be resumed", not "for no time")."""
    if v.kept:
        return "kept"
    why = ", ".join(_kept_for(a, pol) for a in v.short)
    if pr.months == 0:
        return f"broken: {why}; needs them kept durably until the run can no longer be resumed"
    return f"broken: {why}; needs {pr.months:g} months after the run"


COST_COLUMNS = [("policy", "policy")] + [(a, CLASS_LABELS[a]) for a in rt.ARTIFACT_CLASSES] + [
    ("total", "per trajectory"), ("fleet", "per fleet-year"), ("share", "share of attempt")]


def cost_cells(p: RetentionPlan) -> list[dict[str, str]]:
    """The cost table as display strings, one dict per policy keyed by :data:`COST_COLUMNS`."""
    out = []
    for name, pol in p.policies.items():
        rows = {r["artifact"]: r for r in p.rows if r["policy"] == name}
        row = {"policy": name}
        for a in rt.ARTIFACT_CLASSES:
            life = pol.lifetime(a)
            row[a] = "not kept" if life is None else f"{usd(rows[a]['usd_per_trajectory'])} ({life:g} months)"
        t = rows["total"]
        row.update(total=usd(t["usd_per_trajectory"]), fleet=usd(t["usd_per_fleet_year"]),
                   share=percent(t["share_of_attempt"]))
        out.append(row)
    return out


def promise_cells(p: RetentionPlan) -> list[dict[str, Any]]:
    """The promise table, one dict per policy: ``policy`` and, per promise, ``{"text", "kept"}``."""
    out = []
    for name, pol in p.policies.items():
        row: dict[str, Any] = {"policy": name}
        for pr in p.wanted:
            v = p.verdicts[name][pr.name]
            row[pr.name] = {"text": _short_text(pr, v, pol), "kept": v.kept}
        out.append(row)
    return out


def stacked_bar_svg(p: RetentionPlan, *, width: int = 440) -> str:
    """One horizontal bar per policy, split by artifact class, length proportional to the USD one
    trajectory costs under it (the same shape as GB-months, since the price is one for all classes).
    Each segment is a ``<rect>`` with ``data-policy``, ``data-artifact`` and ``data-usd``."""
    label_w, bar_h, gap, top = 230, 18, 8, 6
    names = list(p.policies)
    biggest = max((p.costs[n]["total"] for n in names), default=0.0)
    rows_h = top + len(names) * (bar_h + gap)
    height = rows_h + 24
    total_w = label_w + width + 90
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w}" height="{height}" '
             f'viewBox="0 0 {total_w} {height}" font-family="sans-serif" font-size="11" class="dal-bars">']
    gbm = {(r["policy"], r["artifact"]): r["gb_months"] for r in p.rows}
    for i, n in enumerate(names):
        y = top + i * (bar_h + gap)
        parts.append(f'<text x="{label_w - 6}" y="{y + bar_h - 5}" text-anchor="end">{html.escape(n)}</text>')
        x = float(label_w)
        for a in rt.ARTIFACT_CLASSES:
            c = p.costs[n][a]
            w = width * c / biggest if biggest > 0 else 0.0
            if w > 0:
                tip = f"{n}: {CLASS_LABELS[a]} {usd(c)} per trajectory, {gbm[(n, a)]:.4g} GB-months"
                parts.append(f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{bar_h}" fill="{COLORS[a]}" '
                             f'data-policy="{html.escape(n, quote=True)}" data-artifact="{a}" data-usd="{c!r}">'
                             f'<title>{html.escape(tip)}</title></rect>')
            x += w
        parts.append(f'<text x="{x + 4:.2f}" y="{y + bar_h - 5}">{usd(p.costs[n]["total"])}</text>')
    lx = label_w
    for a in rt.ARTIFACT_CLASSES:
        parts.append(f'<rect x="{lx}" y="{rows_h + 6}" width="10" height="10" fill="{COLORS[a]}"/>'
                     f'<text x="{lx + 14}" y="{rows_h + 15}">{CLASS_LABELS[a]}</text>')
        lx += 14 + 7 * len(CLASS_LABELS[a]) + 14
    parts.append("</svg>")
    return "".join(parts)


def readout_lines(p: RetentionPlan) -> list[str]:
    """Sentences: the bytes of one trajectory, then one line per policy (bill, share, fleet, promises)."""
    tb, g = p.bytes, p.givens
    dom = tb.dominant()
    lines = [f"one trajectory keeps {', '.join(f'{CLASS_LABELS[a]} {_size(b)}' for a, b in tb.by_class().items())}"
             f" (total {_size(tb.total)}); the largest class is {CLASS_LABELS[dom]}, "
             f"{percent(tb.share(dom))} of the bytes"]
    for name in p.policies:
        t = next(r for r in p.rows if r["policy"] == name and r["artifact"] == "total")
        broken = [k for k, v in p.verdicts[name].items() if not v.kept]
        lines.append(f"{name}: {usd(t['usd_per_trajectory'])} per trajectory over its lifetime, "
                     f"{percent(t['share_of_attempt'])} of the {usd(g['attempt_cost_usd'])} attempt; "
                     f"{usd(t['usd_per_fleet_year'])} per year for {g['trajectories']:,} trajectories; "
                     + ("keeps every promise" if not broken else
                        f"breaks {', '.join(PROMISE_LABELS.get(b, b) for b in broken)}"))
    return lines


def napkin_line(nap: rt.NapkinRetention | None = None) -> str:
    """One sentence on Napkin Math 11.2 as :func:`kernel_lib.retention.pricing.napkin_11_2` recomputes it: the
    reference the "repair" preset starts from."""
    nap = nap if nap is not None else rt.napkin_11_2()
    months = rt.NAPKIN_11_2_PRINTED["givens"]["months"]
    return (f"reference, Napkin Math 11.2 recomputed: {_size(nap.total_bytes)} kept {months:g} months cost "
            f"{usd(nap.cost_usd)}, {percent(nap.share_of_attempt)} of the inferred {usd(nap.attempt_cost_usd)} "
            f"attempt (the log alone {percent(nap.log_share_of_attempt)}); workspace {nap.workspace_mb:g} MB "
            f"inferred; printed figures reproduced: {'yes' if nap.all_ok else 'no'}")


# --- the widget -----------------------------------------------------------------------------------


def _plain_lifetimes(d: Mapping[str, float | None]) -> dict[str, float | None]:
    return {a: (None if d[a] is None else float(d[a])) for a in rt.ARTIFACT_CLASSES}


class RetentionPlanner(KernelWidget, static="retention_planner"):
    """Price retention policies per artifact class and check the promises each keeps (see the module
    docstring for the givens, policies, presets and units).

    Args:
        preset: ``"repair"`` (Napkin Math 11.2, the default) or ``"research"`` (exercise 7); the
            starting givens.
        custom_lifetimes: ``{class: months or None}`` of the custom policy (classes left out are not
            kept); default :func:`default_custom_lifetimes` of the starting promise windows.
        extra_policies: more :class:`kernel_lib.retention.pricing.RetentionPolicy` objects to compare (fixed; their
            names must differ from the built-in ones).
        **givens: any given of :data:`GIVENS` by name, overriding the preset (its source shows "edited").

    Python API: :meth:`table` (polars DataFrame of costs), :meth:`promise_table` (verdicts),
    :meth:`napkin` (Napkin Math 11.2 recomputed), :meth:`policies`, :meth:`update`, :meth:`set_lifetime`,
    :meth:`load_preset`; ``plan`` is the last accepted :class:`RetentionPlan`.

    Raises:
        ConfigError: a bad starting given, lifetime, preset or extra policy; later, any bad value set
            from Python (after reverting it and putting the reason in ``error``).
    """

    preset = traitlets.Unicode("repair").tag(sync=True)
    turns = traitlets.Any(0).tag(sync=True)
    envelope_kb_per_turn = traitlets.Any(0.0).tag(sync=True)
    observation_kb_per_turn = traitlets.Any(0.0).tag(sync=True)
    pages = traitlets.Any(0).tag(sync=True)
    page_kb_raw = traitlets.Any(0.0).tag(sync=True)
    workspace_mb = traitlets.Any(0.0).tag(sync=True)
    usd_per_gb_month = traitlets.Any(0.0).tag(sync=True)
    attempt_cost_usd = traitlets.Any(1.0).tag(sync=True)
    trajectories = traitlets.Any(0).tag(sync=True)
    replay_months = traitlets.Any(0.0).tag(sync=True)
    diagnostic_months = traitlets.Any(0.0).tag(sync=True)
    custom_lifetimes = traitlets.Dict().tag(sync=True)
    # layout and results the JavaScript draws
    presets_spec = traitlets.List().tag(sync=True)
    givens_spec = traitlets.List().tag(sync=True)
    classes_spec = traitlets.List().tag(sync=True)
    cost_columns = traitlets.List().tag(sync=True)
    promise_names = traitlets.List().tag(sync=True)
    promise_labels = traitlets.Dict().tag(sync=True)
    sources = traitlets.Dict().tag(sync=True)
    cost_cells = traitlets.List().tag(sync=True)
    promise_cells = traitlets.List().tag(sync=True)
    readout_lines = traitlets.List().tag(sync=True)
    chart_svg = traitlets.Unicode("").tag(sync=True)
    notice = traitlets.Unicode("").tag(sync=True)
    revision = traitlets.Int(0).tag(sync=True)

    def __init__(self, preset: str = "repair", *, custom_lifetimes: Mapping[str, Any] | None = None,
                 extra_policies: Iterable[rt.RetentionPolicy] = (), **givens: Any):
        self._quiet = True
        self._from_front = False
        start, sources = preset_givens(preset)
        for name, value in givens.items():
            start[name] = check_given(name, value)
            sources[name] = "edited"
        custom = check_lifetimes(custom_lifetimes if custom_lifetimes is not None
                                 else default_custom_lifetimes(start["replay_months"], start["diagnostic_months"]))
        self._extra = tuple(extra_policies)
        self._napkin = rt.napkin_11_2()
        first = plan(start, custom, self._extra)          # bad starting values raise here
        super().__init__(preset=preset, custom_lifetimes=_plain_lifetimes(custom), **start)
        self.presets_spec = [{"name": k, "label": lab} for k, (lab, _) in PRESETS.items()]
        self.givens_spec = [{"name": n, "label": g.label, "unit": g.unit, "whole": g.whole} for n, g in GIVENS.items()]
        self.classes_spec = [{"name": a, "label": CLASS_LABELS[a]} for a in rt.ARTIFACT_CLASSES]
        self.cost_columns = [{"key": k, "label": lab} for k, lab in COST_COLUMNS]
        self.promise_names = list(rt.PROMISES)
        self.promise_labels = {n: PROMISE_LABELS.get(n, n.replace("_", " ")) for n in rt.PROMISES}
        self.sources = sources
        self.observe(self._on_change, names=[*GIVENS, "custom_lifetimes", "preset"])
        self._quiet = False
        self._publish(first)

    # --- Python API -----------------------------------------------------------------------------
    def policies(self) -> dict[str, rt.RetentionPolicy]:
        """``{display name: RetentionPolicy}`` compared now, in table order."""
        return dict(self.plan.policies)

    def table(self):
        """Costs as a polars DataFrame, one row per policy and artifact class plus a ``"total"`` row per
        policy. Columns: ``policy`` (str), ``artifact`` (str), ``lifetime_months`` (float, null = not kept;
        null on total rows), ``bytes`` (B per trajectory), ``byte_share`` (fraction of the trajectory's
        bytes), ``gb_months`` (GB x months kept), ``usd_per_trajectory``, ``usd_per_fleet_year`` (USD),
        ``share_of_attempt`` (fraction of ``attempt_cost_usd``). Every number from kernel_lib.retention.pricing."""
        import polars as pl

        return pl.DataFrame(self.plan.rows, schema={
            "policy": pl.Utf8, "artifact": pl.Utf8, "lifetime_months": pl.Float64, "bytes": pl.Float64,
            "byte_share": pl.Float64, "gb_months": pl.Float64, "usd_per_trajectory": pl.Float64,
            "usd_per_fleet_year": pl.Float64, "share_of_attempt": pl.Float64})

    def promise_table(self):
        """Promise verdicts as a polars DataFrame, one row per policy and promise: ``policy``, ``promise``
        (current_recovery, historical_replay, diagnostics), ``window_months``, ``classes`` (list of the
        classes it reads), ``kept`` (bool), ``short`` (list of the classes kept too briefly or not at all)."""
        import polars as pl

        return pl.DataFrame(self.plan.promise_rows, schema={
            "policy": pl.Utf8, "promise": pl.Utf8, "window_months": pl.Float64, "classes": pl.List(pl.Utf8),
            "kept": pl.Boolean, "short": pl.List(pl.Utf8)})

    def rows(self) -> list[dict[str, Any]]:
        """The rows of :meth:`table` as plain dicts (no polars needed)."""
        return [dict(r) for r in self.plan.rows]

    @staticmethod
    def napkin(other_attempt_cost_usd: float | None = None) -> rt.NapkinRetention:
        """Napkin Math 11.2 recomputed by :func:`kernel_lib.retention.pricing.napkin_11_2` (its checks against the
        printed figures included; ``other_attempt_cost_usd`` is passed through)."""
        return rt.napkin_11_2(other_attempt_cost_usd=other_attempt_cost_usd)

    def givens(self) -> dict[str, int | float]:
        """The current (accepted) givens."""
        return dict(self.plan.givens)

    def update(self, **givens: Any) -> None:
        """Set several givens at once and recompute once. On a bad value nothing changes, ``error`` says
        why, and ConfigError is raised."""
        unknown = [n for n in givens if n not in GIVENS]
        if unknown:
            self.error = f"unknown given {unknown[0]!r}: choose from {', '.join(GIVENS)}"
            raise ConfigError(self.error)
        old = {n: getattr(self, n) for n in givens}
        self._quiet = True
        try:
            with self.hold_trait_notifications():
                for n, v in givens.items():
                    setattr(self, n, v)
        finally:
            self._quiet = False
        self._apply(old, edited=list(givens))

    def set_lifetime(self, artifact: str, months: float | None) -> None:
        """Set the custom policy's lifetime of ``artifact`` (months, or None for not kept). ConfigError on
        an unknown class or a bad or out-of-range value (the previous lifetime is kept)."""
        try:
            check_lifetime(artifact, months)
        except ConfigError as exc:
            self.error = f"{exc}; kept the previous value"
            raise
        self.custom_lifetimes = {**self.custom_lifetimes, artifact: months}

    def load_preset(self, name: str) -> None:
        """Replace the givens by preset ``name`` (a key of :data:`PRESETS`); ConfigError for another name."""
        self.preset = name

    # --- plumbing -------------------------------------------------------------------------------
    def set_state(self, sync_data: dict[str, Any]) -> None:
        """Changes from the front end: a refused value is reverted with a message, never raised."""
        self._from_front = True
        try:
            super().set_state(sync_data)
        finally:
            self._from_front = False

    def _on_change(self, change: dict[str, Any]) -> None:
        if self._quiet:
            return
        name = change["name"]
        if name == "preset":
            self._apply({"preset": change["old"]}, preset=change["new"])
        elif name == "custom_lifetimes":
            self._apply({"custom_lifetimes": change["old"]})
        else:
            self._apply({name: change["old"]}, edited=[name])

    def _set_quietly(self, values: Mapping[str, Any]) -> None:
        self._quiet = True
        try:
            with self.hold_trait_notifications():
                for n, v in values.items():
                    setattr(self, n, v)
        finally:
            self._quiet = False

    def _apply(self, old: Mapping[str, Any], *, edited: Iterable[str] = (), preset: Any = None) -> bool:
        """Recompute from the traits; on a refusal put ``old`` back, set ``error`` and (unless the change
        came from the front end) raise the ConfigError."""
        try:
            if preset is not None:
                givens, sources = preset_givens(preset)
            else:
                givens, sources = check_givens({n: getattr(self, n) for n in GIVENS}), dict(self.sources)
                for n in edited:
                    sources[n] = "edited"
            custom = check_lifetimes(self.custom_lifetimes)
            result = plan(givens, custom, self._extra)
        except ConfigError as exc:
            self._set_quietly(old)
            self.error = f"{exc}; kept the previous value"
            if not self._from_front:
                raise
            return False
        # show the values as accepted (numpy scalars and 30.0 turns become plain 30)
        self._set_quietly({**givens, "custom_lifetimes": _plain_lifetimes(custom)})
        self.sources = sources
        self._publish(result)
        return True

    def _publish(self, p: RetentionPlan) -> None:
        self.plan = p
        with self.hold_sync():
            self.cost_cells = cost_cells(p)
            self.promise_cells = promise_cells(p)
            self.readout_lines = readout_lines(p) + [napkin_line(self._napkin)]
            self.chart_svg = stacked_bar_svg(p)
            self.error = ""
            self.revision += 1


__all__ = [
    "CLASS_LABELS",
    "COST_COLUMNS",
    "GIVENS",
    "MAX_MONTHS",
    "PRESETS",
    "RetentionPlan",
    "RetentionPlanner",
    "build_policies",
    "check_given",
    "check_givens",
    "check_lifetime",
    "check_lifetimes",
    "cost_cells",
    "default_custom_lifetimes",
    "napkin_line",
    "plan",
    "preset_givens",
    "promise_cells",
    "readout_lines",
    "stacked_bar_svg",
    "usd",
]


#: What the front end receives: static/_shared.js + static/retention_planner.js, and static/retention_planner.css.
_ESM, _CSS = RetentionPlanner._esm, RetentionPlanner._css
