"""Cadence explorer: how far apart to put checkpoints, and what each representation costs
(Durable Execution §11.4.2 eq. 3, §11.4.3 theorem 11.1, eq. 5 and eq. 6, Napkin Math 11.1).

An anywidget (JupyterLab, VS Code, marimo). The widget keeps no state of its own (DESIGN.md,
principle 6): the sliders and number boxes drawn by the JavaScript write the givens below as
synced traits; every change makes the Python side call :func:`explore`, which evaluates the
givens with :mod:`kernel_lib.cadence` and returns two Vega-Lite charts (built with altair) and a
readout. The widget publishes the specs, their SVG drawings and the readout; the JavaScript only
draws what it receives.

Givens (traits, units last in each name):

============================  =====================================================  ==========
trait                         meaning (chapter symbol)                               check
============================  =====================================================  ==========
``pause_s``                   C, seconds one checkpoint stops the trajectory         > 0
``failure_rate_per_turn``     lambda, crashes per completed turn                     > 0
``reconstruction_s_per_turn`` R, seconds to rebuild one logged turn of the suffix    > 0
``reexecution_s_per_turn``    Re, seconds to re-run one unlogged turn                > 0
``restore_s_per_crash``       T_restore, fixed restore latency per crash (eq. 6)     >= 0
``stride_turns``              k, the stride being looked at (whole turns)            >= 1, <= N
``turns``                     N, trajectory length (whole turns)                     >= 1, <= 10^5
``state_growth_kb_per_turn``  g, checkpointed state added per turn, KB (1000 B)      >= 0
``restore_mb_per_s``          read rate of a restore, MB (10^6 B) per second         > 0
``delta_overhead_ms``         fixed fetch/validate/apply cost of one delta, ms       >= 0
============================  =====================================================  ==========

Outputs (traits the JavaScript draws):

* ``overhead_spec`` / ``overhead_svg``: seconds lost per turn against the stride (log-log), one
  curve for logged turns ``C/k + lambda R k/2`` and one for unlogged turns (R replaced by Re), each
  with its optimum k* (eq. 5) and its flat band ``[k*/2, 2 k*]``; the current stride as a rule;
  eq. 6 on the crash trace, divided by the trace's N, as one point per evaluated stride (the trace's
  best stride ringed). Dividing by N puts the trace on the per-turn axis; it also carries
  ``N_crash T_restore / N``, which is the same at every stride.
* ``storage_spec`` / ``storage_svg``: at checkpoint i (turn i k), the cumulative bytes full
  snapshots and deltas have written (eq. 3 with n = i), and the time to restore that checkpoint:
  a full snapshot reads the state once (``g k i`` bytes at the read rate); a delta chain from an
  empty base reads the same bytes plus ``delta_overhead_ms`` for each of its i deltas
  (:func:`kernel_lib.cadence.worst_case_restore_s`, B + d m).
* ``readout`` (numbers) and ``readout_lines`` (sentences): both optima, the logging gain
  sqrt(Re/R), the flat-minimum factor ``(x + 1/x)/2`` at the current stride for each regime,
  eq. 6 at the current stride and the trace's best stride, and eq. 3's totals.
* ``sources``: "measured" or "given" for every given. Pass a
  :class:`kernel_lib.cadence.Quantity` (from :func:`~kernel_lib.cadence.measure_reconstruction` or
  :func:`~kernel_lib.cadence.resolve_pause`) for a given to show it as measured, with its method;
  moving that slider afterwards makes it a given again.
* ``error``: why the last change was refused; ``invalid``: the refused givens, name -> why (their
  boxes are marked); ``notice``: why the charts are not drawn (the SVG engine is missing);
  ``revision``: bumped after each evaluation.

Bad input never raises: a negative pause, a zero rate, a stride below 1 or above N, NaN, an empty
box, a non-number, or a number outside the range kernel_lib accepts for that given (e.g. a pause of
``10**400`` s or a rate of ``1e-320`` per turn: see :data:`kernel_lib.cadence.formulas.RANGES`), set
from Python or typed in the widget, puts a message naming the given in ``error``, lists it in
``invalid`` (the widget marks its box) and keeps its last good value in the charts and readout;
the other givens still apply, so moving another slider while one box is wrong redraws with it.
Any real number type is accepted (numpy
scalars too) and synced as a plain ``int`` or ``float``.

Interactive limits: the explorer recomputes everything on every change, so it refuses ``turns``
above :data:`MAX_TURNS` (10^5) and, with ``poisson_seed``, a trace expected to hold more than
:data:`MAX_TRACE_CRASHES` crashes (``turns x failure_rate_per_turn``), which would take seconds per
redraw; the message says so. Evaluate longer runs with :func:`kernel_lib.cadence.evaluate_strides`.

Crash trace: ``trace=`` a :class:`kernel_lib.cadence.CrashTrace` (e.g. Napkin Math 11.1's, see
:meth:`CadenceExplorer.napkin_11_1`) held fixed; or ``poisson_seed=`` for a seeded
:func:`~kernel_lib.cadence.poisson_trace` redrawn from ``turns`` and ``failure_rate_per_turn``
whenever they change; or neither (no points). The trace's own crash rate may differ from the
slider's lambda; the readout shows both.

Offline drawing: the SVG is made in the kernel by altair's vl-convert engine
(``vl-convert-python``, which embeds Vega, Vega-Lite and a JavaScript runtime), so the page needs
no CDN, no vega-embed and no network. Without that package the readout still works and
``notice`` says what to install.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import Any

import altair as alt
import traitlets

from kernel_lib.cadence import (
    CrashTrace,
    Quantity,
    StrideSummary,
    TraceEvaluation,
    evaluate_strides,
    flat_minimum_factor,
    poisson_trace,
    snapshot_write_volumes,
    stride_overhead_s_per_turn,
    stride_summary,
    trace_overhead,
    worst_case_restore_s,
)
from kernel_lib.cadence.formulas import nonnegative, positive, stride
from kernel_lib.errors import CadenceError, CadenceParameterError
from widgets._base import KernelWidget

BYTES_PER_KB = 1000          # SI, as §11.4.2's example and exercise 11.2 count
BYTES_PER_MB = 1000 ** 2
FLAT_BAND_MISS = 2.0         # theorem 11.1: "within a factor of 2" of the optimum
CURVE_POINTS = 160
MAX_TRACE_STRIDES = 1000     # beyond this, a geometric selection of strides is evaluated
MAX_STORAGE_POINTS = 300
#: Longest trajectory the explorer accepts: past this a redraw stops being interactive.
MAX_TURNS = 100_000
#: Most crashes a ``poisson_seed`` trace may be expected to hold (turns x rate); about 1 s per redraw.
MAX_TRACE_CRASHES = 10_000

#: The overhead chart's foot lies this factor below its lowest curve minimum or point, to hold the k* labels.
LABEL_ROOM = 4.0
LABEL_FONT_PX = 11
LABEL_PAD_PX = 3
LABEL_LINE_PX = 13

LOGGED = "logged turns (R)"
UNLOGGED = "unlogged turns (Re)"
ON_TRACE = "eq. 6 on the trace / N"
COLORS = {LOGGED: "#1f77b4", UNLOGGED: "#d62728", ON_TRACE: "#555555"}

#: The givens: name -> (label, unit, check, slider min, slider max, scale, whole number).
GIVENS: dict[str, tuple[str, str, str, float, float, str, bool]] = {
    "pause_s": ("capture pause C", "s", "positive", 0.01, 100.0, "log", False),
    "failure_rate_per_turn": ("failure rate λ", "crashes/turn", "positive", 1e-4, 0.5, "log", False),
    "reconstruction_s_per_turn": ("reconstruction R", "s/turn", "positive", 1e-5, 10.0, "log", False),
    "reexecution_s_per_turn": ("re-execution Re", "s/turn", "positive", 0.1, 600.0, "log", False),
    "restore_s_per_crash": ("restore latency T_restore", "s/crash", "nonnegative", 0.0, 60.0, "linear", False),
    "stride_turns": ("stride k", "turns", "stride", 1, 1000, "log", True),
    "turns": ("trajectory length N", "turns", "stride", 10, 5000, "log", True),
    "state_growth_kb_per_turn": ("state growth g", "KB/turn", "nonnegative", 1.0, 10_000.0, "log", False),
    "restore_mb_per_s": ("restore read rate", "MB/s", "positive", 1.0, 10_000.0, "log", False),
    "delta_overhead_ms": ("per-delta overhead", "ms/delta", "nonnegative", 0.0, 1000.0, "linear", False),
}

#: Default givens. The pause, rate and re-execution cost are theorem 11.1's and Napkin Math 11.1's
#: stated inputs; the trajectory, growth and stride are §11.4.2's example; the restore rate and
#: per-delta cost are exercise 11.2's defaults. R and T_restore are placeholders to move.
DEFAULTS: dict[str, float | int] = {
    "pause_s": 2.0, "failure_rate_per_turn": 0.02, "reconstruction_s_per_turn": 0.1,
    "reexecution_s_per_turn": 20.0, "restore_s_per_crash": 0.0, "stride_turns": 5, "turns": 500,
    "state_growth_kb_per_turn": 128.0, "restore_mb_per_s": 200.0, "delta_overhead_ms": 20.0,
}

def _g(x: float) -> str:
    return f"{x:.3g}"


def _plain_number(value: Any) -> int | float | None:
    """``value`` as a plain finite ``int`` or ``float`` (numpy scalars included), or None when it is
    not a real number, is ``bool``, is NaN or infinite, or is an integer too large for a float."""
    if isinstance(value, bool) or not isinstance(value, Real):
        return None
    try:
        as_float = float(value)
    except (OverflowError, ValueError, TypeError):
        return None
    if not math.isfinite(as_float):
        return None
    return int(value) if isinstance(value, Integral) else as_float


def _check(name: str, value: Any) -> float | int:
    kind = GIVENS[name][2]
    if value is None:
        raise CadenceParameterError(f"{name} has no value (the box is empty or not a number)", name=name)
    if kind == "positive":
        return positive(name, value)
    if kind == "nonnegative":
        return nonnegative(name, value)
    return stride(name, value)


def check_givens(givens: Mapping[str, Any]) -> dict[str, float | int]:
    """Every given checked by kernel_lib's argument checks; returns them as numbers.

    ``givens`` may hold numbers or :class:`Quantity` objects (their ``value`` is checked); missing
    names take :data:`DEFAULTS`. Raises CadenceParameterError listing every bad given (``name``
    is the first), including a value outside kernel_lib's range for it, ``turns`` above
    :data:`MAX_TURNS`, a stride longer than the trajectory (no checkpoint at all) and an unknown
    name.
    """
    unknown = sorted(set(givens) - set(GIVENS))
    problems: list[tuple[str, str]] = [(n, f"unknown given {n!r}: choose from {sorted(GIVENS)}") for n in unknown]
    out: dict[str, float | int] = {}
    for name in GIVENS:
        raw = givens.get(name, DEFAULTS[name])
        if isinstance(raw, Quantity):
            raw = raw.value
        try:
            out[name] = _check(name, raw)
        except CadenceParameterError as exc:
            problems.append((name, str(exc)))
    if "turns" in out and out["turns"] > MAX_TURNS:
        problems.append(("turns", (f"turns = {out['turns']:,} is more than the explorer redraws interactively "
                                   f"(at most {MAX_TURNS:,}); evaluate longer runs with "
                                   f"kernel_lib.cadence.evaluate_strides")))
    if not problems and out["stride_turns"] > out["turns"]:
        problems.append(("stride_turns", f"stride_turns ({out['stride_turns']}) is longer than the trajectory "
                                         f"(turns = {out['turns']}): no checkpoint would be published"))
    if problems:
        raise CadenceParameterError("; ".join(p for _, p in problems), name=problems[0][0])
    return out


@dataclass(frozen=True)
class CadenceView:
    """What :func:`explore` computed from one set of givens.

    Fields:
        givens: the checked givens (numbers). sources: "given"/"measured" per given; notes: the
            measured quantities' methods and caveats.
        summary: eq. 5 for both regimes (:class:`kernel_lib.cadence.StrideSummary`).
        flat_band_factor: the overhead factor at the edge of the band (``flat_minimum_factor(2)``).
        curve: rows ``{stride_turns, overhead_s_per_turn, regime}`` of the two curves.
        trace: the crash trace used (or None); trace_evaluation: eq. 6 at each evaluated stride
            (:class:`kernel_lib.cadence.TraceEvaluation`); trace_at_stride: eq. 6 at the current stride.
        storage: rows per checkpoint ordinal i: ``turn``, ``checkpoint``, ``full_bytes``,
            ``incremental_bytes``, ``state_bytes``, ``full_restore_s``, ``chain_restore_s``.
        readout: the numbers of the text readout; readout_lines: the readout as sentences.
        overhead_spec, storage_spec: Vega-Lite dicts (``chart.to_dict()``).
    """

    givens: dict
    sources: dict
    notes: tuple[str, ...]
    summary: StrideSummary
    flat_band_factor: float
    curve: list
    trace: CrashTrace | None
    trace_evaluation: TraceEvaluation | None
    trace_at_stride: Any
    storage: list
    readout: dict
    readout_lines: list
    overhead_spec: dict = field(repr=False)
    storage_spec: dict = field(repr=False)


def _geometric(lo: float, hi: float, n: int) -> list[float]:
    a, b = math.log10(lo), math.log10(hi)
    return [10 ** (a + (b - a) * i / (n - 1)) for i in range(n)]


def trace_strides(turns: int, current: int, limit: int = MAX_TRACE_STRIDES) -> list[int]:
    """Strides at which eq. 6 is evaluated on a trace of ``turns`` turns: every stride 1..N when
    N <= ``limit``, else about ``limit`` geometrically spaced whole strides plus ``current``."""
    if turns <= limit:
        return list(range(1, turns + 1))
    picks = {max(1, min(turns, round(x))) for x in _geometric(1, turns, limit)}
    if current <= turns:
        picks.add(current)
    return sorted(picks)


def storage_ordinals(checkpoints: int, limit: int = MAX_STORAGE_POINTS) -> list[int]:
    """Checkpoint ordinals 1..n drawn in the storage chart (all of them, or ``limit`` evenly spaced
    ones including the last)."""
    if checkpoints <= limit:
        return list(range(1, checkpoints + 1))
    return sorted({max(1, round(checkpoints * i / limit)) for i in range(1, limit + 1)} | {checkpoints})


def explore(givens: Mapping[str, Any] | None = None, *, trace: CrashTrace | None = None,
            poisson_seed: int | None = None, validate_specs: bool = False, **more: Any) -> CadenceView:
    """Evaluate the cadence trade-off for one set of givens (see the module docstring).

    Args:
        givens / more: the givens by name (numbers or :class:`Quantity`); missing ones take
            :data:`DEFAULTS`.
        trace: a fixed crash trace for eq. 6; poisson_seed: when ``trace`` is None, draw
            ``poisson_trace(turns, failure_rate_per_turn, poisson_seed)``; neither: no trace.
        validate_specs: check both specs against the Vega-Lite schema (altair's jsonschema pass;
            it costs more than the rest of the computation, so interactive use skips it and the
            tests turn it on).

    Returns a :class:`CadenceView`. Raises CadenceParameterError (a ValueError) naming a bad given,
    or, with ``poisson_seed``, a trace expected to hold more than :data:`MAX_TRACE_CRASHES` crashes.
    """
    raw = {**(givens or {}), **more}
    g = check_givens(raw)
    quantities = {n: q for n, q in raw.items() if isinstance(q, Quantity)}
    sources = {n: (quantities[n].source if n in quantities else "given") for n in GIVENS}
    notes = tuple(f"{n}: {q.source}, {q.method}" + "".join(f"; {c}" for c in q.notes)
                  for n, q in quantities.items() if q.source != "given")
    C, lam, R, Re = (g["pause_s"], g["failure_rate_per_turn"], g["reconstruction_s_per_turn"],
                     g["reexecution_s_per_turn"])
    T, k, N = g["restore_s_per_crash"], g["stride_turns"], g["turns"]

    summary = stride_summary(C, lam, R, Re, reconstruction_source=sources["reconstruction_s_per_turn"])
    k_log, k_unl = summary.logged_stride_turns, summary.unlogged_stride_turns
    band = flat_minimum_factor(FLAT_BAND_MISS)

    if trace is None and poisson_seed is not None:
        if N * lam > MAX_TRACE_CRASHES:
            raise CadenceParameterError(
                f"a Poisson trace of {N:,} turns at {lam:g} crashes/turn would hold about {N * lam:.3g} crashes, more "
                f"than the explorer redraws interactively (at most {MAX_TRACE_CRASHES:,}): lower turns or "
                f"failure_rate_per_turn", name="failure_rate_per_turn")
        trace = poisson_trace(N, lam, poisson_seed)
    ev = at_k = None
    if trace is not None:
        if not isinstance(trace, CrashTrace):
            raise CadenceParameterError(f"trace must be a CrashTrace, got {type(trace).__name__}", name="trace")
        kw = dict(pause_s=quantities.get("pause_s", C), restore_s_per_crash=T,
                  reconstruction_s_per_turn=quantities.get("reconstruction_s_per_turn", R))
        ev = evaluate_strides(trace, trace_strides(trace.turns, k), **kw)
        at_k = trace_overhead(trace, k, **kw)

    # --- chart (a): overhead per turn against the stride ---------------------------------------
    n_axis = max(N, trace.turns if trace is not None else 0)
    x_lo = min(1.0, min(k_log, k_unl) / (1.5 * FLAT_BAND_MISS))
    x_hi = max(float(n_axis), FLAT_BAND_MISS * 1.5 * max(k_log, k_unl), float(k))
    curve = []
    for x in _geometric(x_lo, x_hi, CURVE_POINTS):
        for regime, cost in ((LOGGED, R), (UNLOGGED, Re)):
            curve.append({"stride_turns": x, "regime": regime,
                          "overhead_s_per_turn": stride_overhead_s_per_turn(x, C, lam, cost)})
    optima = [{"regime": LOGGED, "stride_turns": k_log, "overhead_s_per_turn": summary.logged_overhead_s_per_turn,
               "label": f"k* = {_g(k_log)}"},
              {"regime": UNLOGGED, "stride_turns": k_unl,
               "overhead_s_per_turn": summary.unlogged_overhead_s_per_turn, "label": f"k* = {_g(k_unl)}"}]
    bands = [{"regime": r["regime"], "lo": max(x_lo, r["stride_turns"] / FLAT_BAND_MISS),
              "hi": min(x_hi, r["stride_turns"] * FLAT_BAND_MISS)} for r in optima]
    points = []
    if ev is not None:
        points = [{"stride_turns": r.stride_turns, "overhead_s": r.overhead_s, "regime": ON_TRACE,
                   "overhead_s_per_turn": r.overhead_s / trace.turns, "best": r is ev.best} for r in ev.results]
    at_stride = [stride_overhead_s_per_turn(k, C, lam, cost) for cost in (R, Re)]
    shown = [o["overhead_s_per_turn"] for o in optima] + at_stride + [p["overhead_s_per_turn"] for p in points]
    shown = [v for v in shown if v > 0]
    y_domain = [min(shown) / LABEL_ROOM, max(shown) * 3.0]
    overhead_spec = _overhead_chart(curve, optima, bands, points, k, (x_lo, x_hi), y_domain, g, sources, trace,
                                    band).to_dict(validate=validate_specs)

    # --- chart (b): eq. 3 and restore time per checkpoint ----------------------------------------
    growth_bytes = g["state_growth_kb_per_turn"] * BYTES_PER_KB
    rate = g["restore_mb_per_s"] * BYTES_PER_MB
    per_delta_s = g["delta_overhead_ms"] / 1000.0
    n_ckpt = N // k
    storage = []
    for i in storage_ordinals(n_ckpt):
        vol = snapshot_write_volumes(growth_bytes, k, i)
        state = vol.incremental_bytes        # the i deltas together are the whole state at checkpoint i
        read_s = state / rate
        storage.append({"checkpoint": i, "turn": i * k, "full_bytes": vol.full_bytes,
                        "incremental_bytes": vol.incremental_bytes, "state_bytes": state, "full_restore_s": read_s,
                        "chain_restore_s": worst_case_restore_s(i, read_s, per_delta_s)})
    total = snapshot_write_volumes(growth_bytes, k, n_ckpt)
    storage_spec = _storage_chart(storage, g).to_dict(validate=validate_specs)

    # --- readout -----------------------------------------------------------------------------------
    readout: dict[str, Any] = {
        "logged_stride_turns": k_log, "unlogged_stride_turns": k_unl, "logging_gain": summary.logging_gain,
        "logged_overhead_s_per_turn": summary.logged_overhead_s_per_turn,
        "unlogged_overhead_s_per_turn": summary.unlogged_overhead_s_per_turn,
        "stride_turns": k, "flat_band_factor": band,
        "flat_factor_logged": flat_minimum_factor(k / k_log), "flat_factor_unlogged": flat_minimum_factor(k / k_unl),
        "overhead_logged_at_stride_s_per_turn": at_stride[0],
        "overhead_unlogged_at_stride_s_per_turn": at_stride[1],
        "checkpoints": n_ckpt, "uncheckpointed_tail_turns": N - n_ckpt * k,
        "full_write_bytes": total.full_bytes, "incremental_write_bytes": total.incremental_bytes,
        "write_amplification": total.ratio,
        "full_restore_s": storage[-1]["full_restore_s"], "chain_restore_s": storage[-1]["chain_restore_s"],
        "sources": sources,
    }
    src = {n: f" ({s})" for n, s in sources.items()}
    lines = [
        f"logged stride k* = sqrt(2C/(λR)) = {_g(k_log)} turns (eq. 5; C = {_g(C)} s{src['pause_s']}, "
        f"λ = {_g(lam)}/turn{src['failure_rate_per_turn']}, R = {_g(R)} s/turn{src['reconstruction_s_per_turn']}); "
        f"at k*: {_g(summary.logged_overhead_s_per_turn)} s lost per turn",
        f"unlogged stride k* = sqrt(2C/(λRe)) = {_g(k_unl)} turns (Re = {_g(Re)} s/turn"
        f"{src['reexecution_s_per_turn']}); logging lengthens the best stride {_g(summary.logging_gain)}× "
        f"(sqrt(Re/R))",
        f"at stride k = {k}: overhead ×{readout['flat_factor_logged']:.3f} the logged minimum and "
        f"×{readout['flat_factor_unlogged']:.3f} the unlogged one (flat-minimum factor (x + 1/x)/2, x = k/k*); "
        f"the shaded bands [k*/2, 2k*] cost at most ×{band:g}",
    ]
    if ev is not None:
        readout.update(trace=trace.to_dict(), trace_overhead_at_stride_s=at_k.overhead_s,
                       trace_best_stride_turns=ev.best.stride_turns, trace_best_overhead_s=ev.best.overhead_s,
                       trace_strides_evaluated=len(ev.results))
        every = "every stride 1.." + str(trace.turns) if len(ev.results) == trace.turns else \
            f"{len(ev.results)} strides"
        lines.append(
            f"trace {trace.source}: {trace.crashes} crashes in {trace.turns} turns (λ of the trace "
            f"{_g(trace.failure_rate_per_turn)}/turn); eq. 6 at k = {k}: {_g(at_k.overhead_s)} s "
            f"({at_k.checkpoints} checkpoints, lost suffixes {list(at_k.lost_suffix_turns)}, "
            f"T_restore = {_g(T)} s); best of {every}: k = {ev.best.stride_turns} at {_g(ev.best.overhead_s)} s")
    lines.append(
        f"eq. 3 over {N} turns at k = {k}: {n_ckpt} checkpoints; full snapshots write "
        f"{_g(total.full_bytes / BYTES_PER_MB)} MB, deltas {_g(total.incremental_bytes / BYTES_PER_MB)} MB "
        f"(×{_g(total.ratio)}); restoring the last checkpoint takes {_g(readout['full_restore_s'])} s from a full "
        f"snapshot, {_g(readout['chain_restore_s'])} s through the chain of {n_ckpt} deltas")
    lines.extend(f"measured: {n}" for n in notes)
    return CadenceView(givens=g, sources=sources, notes=notes, summary=summary, flat_band_factor=band, curve=curve,
                       trace=trace, trace_evaluation=ev, trace_at_stride=at_k, storage=storage, readout=readout,
                       readout_lines=lines, overhead_spec=overhead_spec, storage_spec=storage_spec)


def _overhead_chart(curve, optima, bands, points, k, x_domain, y_domain, g, sources, trace, band) -> alt.LayerChart:
    domain = [LOGGED, UNLOGGED] + ([ON_TRACE] if points else [])
    color = alt.Color("regime:N", title=None, legend=alt.Legend(orient="bottom"),
                      scale=alt.Scale(domain=domain, range=[COLORS[d] for d in domain]))
    x_scale = alt.Scale(type="log", domain=list(x_domain), nice=False)
    x_title = "stride k (turns between checkpoints, log scale)"
    x = alt.X("stride_turns:Q", title=x_title, scale=x_scale)
    y_title = "seconds lost per turn (log scale)"
    y_scale = alt.Scale(type="log", domain=list(y_domain), nice=False)
    y = alt.Y("overhead_s_per_turn:Q", title=y_title, scale=y_scale)
    layers = [
        alt.Chart(alt.Data(values=curve)).mark_line(clip=True).encode(x=x, y=y, color=color),
        alt.Chart(alt.Data(values=bands)).mark_rect(opacity=0.12, clip=True).encode(
            x=alt.X("lo:Q", scale=x_scale, title=x_title), x2="hi:Q", color=color),
        alt.Chart(alt.Data(values=[{"stride_turns": k}])).mark_rule(color="black", strokeDash=[4, 3]).encode(
            x=alt.X("stride_turns:Q", scale=x_scale, title=x_title)),
        alt.Chart(alt.Data(values=optima)).mark_point(shape="diamond", size=110, filled=True, clip=True).encode(
            x=x, y=y, color=color),
    ]
    # the k* labels sit at the foot of the plot, in their band, one line apart: the curves, the
    # diamonds and the trace's points all lie at least a factor LABEL_ROOM above the foot (y_domain),
    # so a label never covers a point, whatever the givens
    for i, opt in enumerate(optima):
        layers.append(alt.Chart(alt.Data(values=[{**opt, "label_y": y_domain[0]}])).mark_text(
            baseline="bottom", dy=-(LABEL_PAD_PX + LABEL_LINE_PX * i), fontSize=LABEL_FONT_PX, clip=True).encode(
            x=x, y=alt.Y("label_y:Q", scale=y_scale, title=y_title), text="label:N", color=color))
    if points:
        layers += [
            alt.Chart(alt.Data(values=points)).mark_circle(size=18, opacity=0.7, clip=True).encode(
                x=x, y=y, color=color),
            alt.Chart(alt.Data(values=[p for p in points if p["best"]])).mark_point(
                size=160, color="black", clip=True).encode(x=x, y=y),
        ]
    tag = {n: (" measured" if s == "measured" else "") for n, s in sources.items()}
    sub = [f"C = {_g(g['pause_s'])} s{tag['pause_s']}, λ = {_g(g['failure_rate_per_turn'])}/turn, "
           f"R = {_g(g['reconstruction_s_per_turn'])} s{tag['reconstruction_s_per_turn']}, "
           f"Re = {_g(g['reexecution_s_per_turn'])} s{tag['reexecution_s_per_turn']}; dashed: k = {k}; "
           f"bands: k*/2..2k* (≤ ×{band:g})"]
    if points:
        sub.append(f"points: eq. 6 on {trace.source} ({trace.crashes} crashes, T_restore = "
                   f"{_g(g['restore_s_per_crash'])} s) ÷ {trace.turns} turns; ringed: best on the trace")
    return alt.layer(*layers).properties(
        width=560, height=300,
        title=alt.TitleParams("Checkpoint overhead against stride (eq. 5, eq. 6)", subtitle=sub, fontSize=13))


def _storage_chart(rows, g) -> alt.HConcatChart:
    written = [{"turn": r["turn"], "MB": r[key] / BYTES_PER_MB, "representation": name}
               for r in rows for key, name in (("full_bytes", "full snapshots"), ("incremental_bytes", "deltas"))]
    restore = [{"turn": r["turn"], "seconds": r[key], "representation": name}
               for r in rows for key, name in (("full_restore_s", "full snapshots"), ("chain_restore_s", "deltas"))]
    color = alt.Color("representation:N", title=None, legend=alt.Legend(orient="bottom"),
                      scale=alt.Scale(domain=["full snapshots", "deltas"], range=["#9467bd", "#2ca02c"]))
    x = alt.X("turn:Q", title="turn of the checkpoint")
    left = alt.Chart(alt.Data(values=written)).mark_line(point=len(rows) <= 40).encode(
        x=x, y=alt.Y("MB:Q", title="cumulative MB written (eq. 3)"), color=color).properties(
        width=260, height=220, title=alt.TitleParams(
            "Bytes written", subtitle=f"g = {_g(g['state_growth_kb_per_turn'])} KB/turn, k = {g['stride_turns']}"))
    right = alt.Chart(alt.Data(values=restore)).mark_line(point=len(rows) <= 40).encode(
        x=x, y=alt.Y("seconds:Q", title="restore time of that checkpoint (s)"), color=color).properties(
        width=260, height=220, title=alt.TitleParams(
            "Restore time", subtitle=f"{_g(g['restore_mb_per_s'])} MB/s, {_g(g['delta_overhead_ms'])} ms per delta"))
    return alt.hconcat(left, right)


def render_svg(spec: dict) -> str:
    """A Vega-Lite spec drawn as an SVG string by altair's vl-convert engine, in this process and
    without network access. Raises ImportError (or ValueError from altair) without vl-convert-python."""
    from altair.utils.mimebundle import spec_to_mimebundle

    return spec_to_mimebundle(spec, format="svg", mode="vega-lite", engine="vl-convert")["image/svg+xml"]


class CadenceExplorer(KernelWidget, static="cadence_explorer"):
    """Sliders for the cadence givens, two charts and a readout, all computed by kernel_lib.

    Args:
        trace: a fixed :class:`~kernel_lib.cadence.CrashTrace` to evaluate eq. 6 on; it also sets
            the default ``turns`` and ``failure_rate_per_turn`` (when it has crashes).
        poisson_seed: without ``trace``, draw a seeded Poisson trace from ``turns`` and
            ``failure_rate_per_turn`` (redrawn when they change).
        draw_svg: make SVG drawings of the charts (needs ``vl-convert-python``); False publishes
            only the specs (faster; for tests and for front ends that draw Vega-Lite themselves).
        **givens: any of the givens by name (see the module docstring), as numbers or as
            :class:`~kernel_lib.cadence.Quantity` (shown as measured).

    Python API: set a trait (``w.pause_s = 0.5``) or several at once with :meth:`update`; ``w.view``
    is the last good :class:`CadenceView`; ``w.trace`` may be replaced at any time. Nothing raises
    for a bad given: read ``w.error``.
    """

    # the givens: Any, so that a bad value reaches the checks and becomes a message in `error`
    pause_s = traitlets.Any(DEFAULTS["pause_s"]).tag(sync=True)
    failure_rate_per_turn = traitlets.Any(DEFAULTS["failure_rate_per_turn"]).tag(sync=True)
    reconstruction_s_per_turn = traitlets.Any(DEFAULTS["reconstruction_s_per_turn"]).tag(sync=True)
    reexecution_s_per_turn = traitlets.Any(DEFAULTS["reexecution_s_per_turn"]).tag(sync=True)
    restore_s_per_crash = traitlets.Any(DEFAULTS["restore_s_per_crash"]).tag(sync=True)
    stride_turns = traitlets.Any(DEFAULTS["stride_turns"]).tag(sync=True)
    turns = traitlets.Any(DEFAULTS["turns"]).tag(sync=True)
    state_growth_kb_per_turn = traitlets.Any(DEFAULTS["state_growth_kb_per_turn"]).tag(sync=True)
    restore_mb_per_s = traitlets.Any(DEFAULTS["restore_mb_per_s"]).tag(sync=True)
    delta_overhead_ms = traitlets.Any(DEFAULTS["delta_overhead_ms"]).tag(sync=True)
    # what the JavaScript draws
    sliders = traitlets.List().tag(sync=True)
    sources = traitlets.Dict().tag(sync=True)
    notice = traitlets.Unicode("").tag(sync=True)
    readout = traitlets.Dict().tag(sync=True)
    readout_lines = traitlets.List().tag(sync=True)
    overhead_spec = traitlets.Dict().tag(sync=True)
    storage_spec = traitlets.Dict().tag(sync=True)
    overhead_svg = traitlets.Unicode("").tag(sync=True)
    storage_svg = traitlets.Unicode("").tag(sync=True)
    revision = traitlets.Int(0).tag(sync=True)
    #: The givens refused at the last change, name -> why; their boxes are marked in the widget.
    invalid = traitlets.Dict().tag(sync=True)
    # Python only
    trace = traitlets.Instance(CrashTrace, allow_none=True)
    poisson_seed = traitlets.Int(None, allow_none=True)

    def __init__(self, *, trace: CrashTrace | None = None, poisson_seed: int | None = None, draw_svg: bool = True,
                 **givens: Any):
        self._quantities: dict[str, Quantity] = {}
        self._invalid: dict[str, Any] = {}
        self._shown_inputs: tuple | None = None
        self._ready = False
        self.draw_svg = draw_svg
        self.view: CadenceView | None = None
        unknown = sorted(set(givens) - set(GIVENS))
        if unknown:
            raise TypeError(f"CadenceExplorer got unknown givens {unknown}: choose from {sorted(GIVENS)}")
        if trace is not None:
            givens.setdefault("turns", trace.turns)
            if trace.crashes:
                givens.setdefault("failure_rate_per_turn", trace.failure_rate_per_turn)
        super().__init__(trace=trace, poisson_seed=poisson_seed, **givens)
        self.sliders = self._slider_specs()
        self.observe(self._on_given, names=list(GIVENS))
        self.observe(self._on_given, names=["trace", "poisson_seed"])
        self._ready = True
        self._recompute()

    @classmethod
    def napkin_11_1(cls, **overrides: Any) -> CadenceExplorer:
        """The explorer on Napkin Math 11.1's trace, with C, R and T_restore as
        :func:`kernel_lib.cadence.napkin.reconstruct` solves them from the printed overheads, the
        stated Re, and the printed 25-turn stride; ``overrides`` replace any given."""
        import kernel_lib.cadence.napkin as napkin

        r = napkin.reconstruct()
        trace = CrashTrace(r.turns, r.crash_turns, "Napkin Math 11.1 (reconstructed)")
        givens = dict(pause_s=r.pause_s, reconstruction_s_per_turn=r.reconstruction_s_per_turn,
                      restore_s_per_crash=r.restore_s_per_crash, failure_rate_per_turn=r.failure_rate_per_turn,
                      reexecution_s_per_turn=napkin.PRINTED["givens"]["reexecution_s_per_turn"],
                      stride_turns=25 if 25 in r.strides else r.strides[0], turns=r.turns)
        givens.update(overrides)
        return cls(trace=trace, **givens)

    # --- Python side --------------------------------------------------------------------------------
    def update(self, **givens: Any) -> bool:
        """Set several givens and recompute once. Returns True if accepted, False if the reason is
        in ``error`` (the charts keep the last good givens). Unknown names are reported the same way."""
        return self.set_givens(givens, GIVENS)

    @traitlets.validate(*GIVENS)
    def _coerce(self, proposal: Any) -> Any:
        """Quantities become their value (and are remembered as measured); real numbers of any type
        become a plain ``int`` or ``float``; values that JSON cannot carry (NaN, infinities, integers
        beyond float range, strings, ...) are kept aside for the error message and synced as None.
        Never raises."""
        name, value = proposal["trait"].name, proposal["value"]
        self._invalid.pop(name, None)
        if isinstance(value, Quantity):
            self._quantities[name] = value
            plain = _plain_number(value.value)
            return float(plain) if plain is not None else self._keep_invalid(name, value.value)
        q = self._quantities.get(name)
        if q is not None and value != q.value:
            del self._quantities[name]          # moved away from the measured value: a given now
        plain = _plain_number(value)
        return plain if plain is not None else self._keep_invalid(name, value)

    def set_state(self, sync_data: dict[str, Any]) -> None:
        """The front end's changes. A box left empty (or holding NaN, which JSON sends as null) for a
        given that is already None is no trait change, so no validator sees it: report it here."""
        unchanged = [n for n in GIVENS if n in sync_data and sync_data[n] is None and getattr(self, n) is None]
        super().set_state(sync_data)
        for name in unchanged:
            self._invalid.pop(name, None)
        if unchanged and self._ready:
            self._recompute()

    def _keep_invalid(self, name: str, value: Any) -> None:
        if value is not None:
            self._invalid[name] = value
        if self._ready and getattr(self, name) is None:   # None -> None is no change: report it now
            self._recompute(extra={name: value})

    def _givens(self) -> dict[str, Any]:
        out = {}
        for name in GIVENS:
            if name in self._invalid:
                out[name] = self._invalid[name]
            elif name in self._quantities:
                out[name] = self._quantities[name]
            else:
                out[name] = getattr(self, name)
        return out

    def _on_given(self, change: dict[str, Any]) -> None:
        if self._ready:
            self._recompute()

    def _fallback(self, name: str) -> float | int:
        """The value a refused given is replaced by: the last good one, or its default."""
        return self.view.givens[name] if self.view is not None else DEFAULTS[name]

    def _recompute(self, extra: Mapping[str, Any] | None = None) -> bool:
        """Evaluate the givens and publish the result. A refused given does not hold the others
        back: it is listed in ``invalid`` (its box is marked), the charts use its last good value,
        and every other given's change is applied. Returns True when no given was refused."""
        givens = {**self._givens(), **(extra or {})}
        bad: dict[str, str] = {}
        for name in GIVENS:          # each given on its own, so every bad box is named at once
            raw = givens[name].value if isinstance(givens[name], Quantity) else givens[name]
            try:
                _check(name, raw)
            except CadenceParameterError as exc:
                bad[name] = str(exc)
        if bad and self.view is None:    # no last good value to fall back on: no chart until fixed
            first = next(iter(bad))
            self.error = self._refusal(CadenceParameterError("; ".join(bad.values()), name=first))
            self.invalid = dict(bad)
            return False
        view = None
        for _ in range(len(GIVENS) + 1):  # then the checks that involve more than one given
            usable = {n: (self._fallback(n) if n in bad else v) for n, v in givens.items()}
            if bad and self._same_inputs(usable):      # nothing else changed: keep the charts as they are
                self.error, self.invalid = self._partial_refusal(bad, self.view), dict(bad)
                return False
            try:
                view = explore(usable, trace=self.trace, poisson_seed=self.poisson_seed)
                break
            except CadenceParameterError as exc:
                if exc.name in GIVENS and exc.name not in bad:
                    bad[exc.name] = str(exc)
                    continue
                self.error, self.invalid = self._refusal(exc), dict(bad)
                return False
            except (CadenceError, ValueError, TypeError) as exc:
                self.error, self.invalid = self._refusal(exc), dict(bad)
                return False
            except Exception as exc:     # a bug must not become a traceback in the notebook either
                self.error = f"could not compute the charts ({type(exc).__name__}): {exc}"
                return False
        if view is None:                 # pragma: no cover - every pass adds a name, so the loop ends first
            return False
        svg_a = svg_b = ""
        notice = ""
        if self.draw_svg:
            try:
                svg_a, svg_b = render_svg(view.overhead_spec), render_svg(view.storage_spec)
            except ImportError as exc:
                notice = (f"charts not drawn: {exc}. Install vl-convert-python (pip install vl-convert-python) "
                          "to draw them offline; the readout is complete without it")
            except Exception as exc:
                notice = f"charts not drawn ({type(exc).__name__}): {exc}"
        self.view = view
        self._shown_inputs = self._inputs(usable)
        with self.hold_sync():
            self.overhead_spec, self.storage_spec = view.overhead_spec, view.storage_spec
            self.overhead_svg, self.storage_svg = svg_a, svg_b
            self.readout, self.readout_lines = view.readout, view.readout_lines
            self.sources = view.sources
            self.notice = notice
            self.invalid = dict(bad)
            self.error = self._partial_refusal(bad, view) if bad else ""
            self.revision += 1
        return not bad

    def _inputs(self, givens: Mapping[str, Any]) -> tuple:
        sources = tuple(n for n, v in givens.items() if isinstance(v, Quantity))
        return check_givens(givens), self.trace, self.poisson_seed, sources

    def _same_inputs(self, usable: Mapping[str, Any]) -> bool:
        """Would ``usable`` give the view already shown (same numbers, trace, seed and measured set)?"""
        if self.view is None or self._shown_inputs is None:
            return False
        try:
            return self._inputs(usable) == self._shown_inputs
        except CadenceParameterError:
            return False

    @staticmethod
    def _partial_refusal(bad: Mapping[str, str], view: CadenceView) -> str:
        kept = ", ".join(f"{n} = {view.givens[n]:g}" for n in bad)
        return (f"{'; '.join(bad.values())}. Until {'it is' if len(bad) == 1 else 'they are'} fixed the charts "
                f"keep the last valid givens for {'it' if len(bad) == 1 else 'them'} ({kept}); every other given "
                f"is applied")

    def _refusal(self, exc: Exception) -> str:
        if self.view is None:
            return f"{exc} (no chart yet: fix this given)"
        kept = ", ".join(f"{n} = {self.view.givens[n]:g}" for n in GIVENS)
        return f"{exc}. The charts still show the last valid givens: {kept}"

    def _slider_specs(self) -> list[dict[str, Any]]:
        """Slider ranges: the defaults of :data:`GIVENS`, widened to hold the starting values that
        pass the checks (a refused starting value leaves the default range)."""
        specs = []
        for name, (label, unit, _kind, lo, hi, scale, integer) in GIVENS.items():
            v = self._givens()[name]
            v = _plain_number(v.value if isinstance(v, Quantity) else v)
            try:
                v = _check(name, v)      # widen only to a value the explorer accepts
            except CadenceParameterError:
                v = None
            if v is not None:
                if scale == "log" and v > 0:
                    lo, hi = min(lo, 10 ** math.floor(math.log10(v))), max(hi, 10 ** math.ceil(math.log10(v)))
                elif scale == "linear":
                    lo, hi = min(lo, v), max(hi, v)
            if integer:
                lo, hi = max(1, int(lo)), int(math.ceil(hi))
            specs.append({"name": name, "label": label, "unit": unit, "min": lo, "max": hi, "scale": scale,
                          "integer": integer})
        return specs


__all__ = [
    "BYTES_PER_KB",
    "BYTES_PER_MB",
    "DEFAULTS",
    "GIVENS",
    "CadenceExplorer",
    "CadenceView",
    "check_givens",
    "explore",
    "render_svg",
    "storage_ordinals",
    "trace_strides",
]


#: What the front end receives: static/_shared.js + static/cadence_explorer.js, and static/cadence_explorer.css.
_ESM, _CSS = CadenceExplorer._esm, CadenceExplorer._css
