"""Resume timeline: the stages of one real resume laid out two ways (Durable Execution §11.5, eq. 7).

An anywidget (JupyterLab, VS Code, marimo). It holds no state of its own: it is given a
:class:`kernel_lib.resume.stages.ResumeTimeline` (from :func:`kernel_lib.resume.stages.timed_resume`, or from the
live replacement worker's ``resume_timeline`` via
:meth:`~kernel_lib.resume.stages.ResumeTimeline.from_dict`) and the Python side computes everything with
:mod:`kernel_lib.resume.stages`; the JavaScript only draws what it receives.

What it shows:

* a Gantt-style chart with two panels sharing one time axis: the stages laid end to end (eq. 7's
  serial sum) and the same durations scheduled as early as their dependencies allow (the critical
  path), critical stages outlined;
* a readout: the serial sum, the critical path (names and seconds), and every stage's figure with
  where it comes from: "measured on this machine" for the stages the resume timed,
  "computed from the prefill model (given)" for the prefill;
* a table of the stages.

Givens (number boxes, synced traits): ``context_tokens``, ``cached_prefix_tokens`` and
``prefill_tokens_per_s`` of the :class:`~kernel_lib.resume.stages.PrefillModel`. Changing one recomputes
the prefill stage and both totals; the measured stages never change. A value the model refuses (a
negative or fractional count, a cached prefix longer than the context, a rate that is zero,
negative, NaN or infinite, an empty box, text), or one outside the widget's range (a count above
:data:`MAX_GIVEN_TOKENS`, a rate below :data:`MIN_GIVEN_RATE` tokens/s: together they keep the
prefill under about three years, so every figure shown stays a plain finite number), is not
applied: ``error`` says why and the trait goes back to its previous value. Nothing raises into
the notebook. To move two givens at once (e.g. a shorter context with a shorter cached prefix)
use :meth:`ResumeTimelineView.update`.

If the resume needed no prefill (inspection only, or a paused trajectory), the widget first shows
it that way and says so in ``notice``; changing a given then models a prefill from those numbers.

Offline drawing: the SVG is made in the kernel by altair's vl-convert engine (as in
:mod:`widgets.cadence_explorer`); without ``vl-convert-python`` the readout still works and
``notice`` says what to install.
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any

import altair as alt
import traitlets

from kernel_lib.errors import ConfigError
from kernel_lib.resume.stages import (
    DEFAULT_PREFILL,
    MEASURED_LABEL,
    NOT_RUN_LABEL,
    PREFILL_LABEL,
    STAGE_NAMES,
    PrefillModel,
    ResumeTimeline,
)
from widgets._base import KernelWidget
from widgets.tables import number_text

#: The givens: trait name -> (label, unit, whole number).
GIVENS: dict[str, tuple[str, str, bool]] = {
    "context_tokens": ("context of the next model call", "tokens", True),
    "cached_prefix_tokens": ("prefix still in the serving cache", "tokens", True),
    "prefill_tokens_per_s": ("prefill throughput", "tokens/s", False),
}

#: Largest token count the widget takes for a given (a context far beyond any model's).
MAX_GIVEN_TOKENS = 10 ** 8
#: Smallest prefill throughput the widget takes, tokens per second.
MIN_GIVEN_RATE = 1.0

SERIAL = "serial: stages end to end (eq. 7 sum)"
OVERLAPPED = "overlapped: earliest start after dependencies"
COLORS = {MEASURED_LABEL: "#1f77b4", PREFILL_LABEL: "#ff7f0e", NOT_RUN_LABEL: "#bbbbbb",
          "given (not measured)": "#7f7f7f"}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def _short(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} characters)"


def _plain(name: str, value: Any) -> int | float:
    """``value`` as the plain number the model takes, or ConfigError naming the given."""
    whole = GIVENS[name][2]
    if value is None:
        raise ConfigError(f"{name} has no value (the box is empty or not a number)")
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ConfigError(f"{name} must be a number, got {_short(value)}")
    try:
        as_float = float(value)
    except (OverflowError, ValueError, TypeError):
        raise ConfigError(f"{name} = {_short(value)} is too large") from None
    if not math.isfinite(as_float):
        raise ConfigError(f"{name} must be finite, got {_short(value)}")
    if whole:
        if isinstance(value, Integral):
            count = int(value)
        elif as_float.is_integer():
            count = int(as_float)
        else:
            raise ConfigError(f"{name} must be a whole number of tokens, got {_short(value)}")
        if count > MAX_GIVEN_TOKENS:
            raise ConfigError(f"{name} must be at most {MAX_GIVEN_TOKENS:,} tokens, got {count:,}")
        return count
    if as_float < MIN_GIVEN_RATE:
        raise ConfigError(f"{name} must be at least {MIN_GIVEN_RATE:g} token/s, got {_short(value)}")
    return as_float


def prefill_from(givens: dict[str, Any]) -> PrefillModel:
    """The :class:`PrefillModel` of the three givens. Raises ConfigError naming a bad one
    (including a count above :data:`MAX_GIVEN_TOKENS` or a rate below :data:`MIN_GIVEN_RATE`)."""
    vals = {n: _plain(n, givens[n]) for n in GIVENS}
    return PrefillModel(vals["context_tokens"], vals["cached_prefix_tokens"], vals["prefill_tokens_per_s"])


def chart(timeline: ResumeTimeline) -> alt.VConcatChart:
    """The two Gantt panels of ``timeline`` (serial and overlapped) on one time axis (ms)."""
    serial, over = timeline.serial_schedule(), timeline.overlapped_schedule()
    crit = set(timeline.critical_path)
    rows = []
    for panel, sched in ((SERIAL, serial), (OVERLAPPED, over)):
        for s in timeline.stages:
            start, end = sched[s.name]
            rows.append({"panel": panel, "stage": s.name, "start_ms": start * 1e3, "end_ms": end * 1e3,
                         "duration": _ms(s.duration_s) if s.duration_s > 0 or s.measured else s.source,
                         "source": s.source, "critical": panel == OVERLAPPED and s.name in crit})
    top = max(timeline.serial_sum_s, 1e-9) * 1e3
    x_scale = alt.Scale(domain=[0, top * 1.35], nice=False)
    domain = [k for k in COLORS if any(r["source"] == k for r in rows)]
    color = alt.Color("source:N", title=None, legend=alt.Legend(orient="bottom", labelLimit=0),
                      scale=alt.Scale(domain=domain, range=[COLORS[d] for d in domain]))
    y = alt.Y("stage:N", sort=list(STAGE_NAMES), title=None)

    def panel(name: str, subtitle: str) -> alt.LayerChart:
        data = alt.Data(values=[r for r in rows if r["panel"] == name])
        bars = alt.Chart(data).mark_bar(height=14).encode(
            x=alt.X("start_ms:Q", scale=x_scale, title="milliseconds from the first stage"), x2="end_ms:Q",
            y=y, color=color,
            stroke=alt.condition("datum.critical", alt.value("black"), alt.value(None)),
            strokeWidth=alt.condition("datum.critical", alt.value(2), alt.value(0)))
        labels = alt.Chart(data).mark_text(align="left", dx=4, fontSize=10).encode(
            x=alt.X("end_ms:Q", scale=x_scale), y=y, text="duration:N")
        return alt.layer(bars, labels).properties(width=560, height=150,
                                                  title=alt.TitleParams(name, subtitle=subtitle, fontSize=12))

    return alt.vconcat(
        panel(SERIAL, f"sum of the six durations: {_ms(timeline.serial_sum_s)}"),
        panel(OVERLAPPED, f"critical path {' → '.join(timeline.critical_path)}: {_ms(timeline.critical_path_s)} "
                          "(outlined; computed from the durations, not measured)"),
    ).resolve_scale(x="shared").properties(
        title=alt.TitleParams("Resume stages (§11.5, eq. 7)", fontSize=13))


def readout_of(timeline: ResumeTimeline) -> tuple[dict[str, Any], list[str]]:
    """The numbers and sentences of the readout."""
    p = timeline.prefill
    numbers = {"serial_sum_s": timeline.serial_sum_s, "critical_path_s": timeline.critical_path_s,
               "critical_path": timeline.critical_path,
               "overlap_saving_s": timeline.serial_sum_s - timeline.critical_path_s,
               "availability_s": timeline.availability_s, "durations_s": timeline.durations_s,
               "sources": {s.name: s.source for s in timeline.stages},
               "prefill": p.to_dict() if p is not None else None}
    lines = [f"serial sum (eq. 7): {_ms(timeline.serial_sum_s)}",
             f"critical path {' → '.join(timeline.critical_path)}: {_ms(timeline.critical_path_s)}; what the same "
             f"durations would take if independent stages ran side by side (computed, not measured; the stages "
             f"ran one after another), {_ms(numbers['overlap_saving_s'])} less than the sum"]
    for s in timeline.stages:
        what = s.detail if s.name != "prefill" or p is None else p.describe()
        lines.append(f"{s.name}: {_ms(s.duration_s)}, {s.source}" + (f" — {what}" if what else ""))
    if timeline.availability_s is not None:
        lines.append(f"availability proof before the stages: {_ms(timeline.availability_s)}, {MEASURED_LABEL} "
                     "(not one of eq. 7's terms)")
    return numbers, lines


def render_svg(spec: dict) -> str:
    """A Vega-Lite spec as SVG, drawn in this process (see :func:`widgets.cadence_explorer.render_svg`)."""
    from widgets.cadence_explorer import render_svg as _render

    return _render(spec)


class ResumeTimelineView(KernelWidget, static="resume_timeline"):
    """A resume's six stages as two Gantt panels, a readout and a table, with the prefill givens
    as number boxes (see the module docstring).

    Args:
        timeline: the :class:`~kernel_lib.resume.stages.ResumeTimeline` to show.
        draw_svg: draw the chart as SVG (needs ``vl-convert-python``); False publishes only the
            Vega-Lite spec (faster; for tests and front ends that draw Vega-Lite themselves).
        **givens: starting values of ``context_tokens``, ``cached_prefix_tokens``,
            ``prefill_tokens_per_s``; given any, the prefill is computed from them at once.

    Attributes (Python side): ``measured_timeline`` is the timeline as given; ``timeline`` the one
    shown (its prefill recomputed from the givens); ``prefill`` the current model.

    Raises:
        ConfigError: ``timeline`` is not a ResumeTimeline, an unknown given, or starting givens the
            prefill model or the widget's range refuses (after construction, bad values only set
            ``error``).
    """

    context_tokens = traitlets.Any(DEFAULT_PREFILL.context_tokens).tag(sync=True)
    cached_prefix_tokens = traitlets.Any(DEFAULT_PREFILL.cached_prefix_tokens).tag(sync=True)
    prefill_tokens_per_s = traitlets.Any(DEFAULT_PREFILL.prefill_tokens_per_s).tag(sync=True)
    givens_spec = traitlets.List().tag(sync=True)
    notice = traitlets.Unicode("").tag(sync=True)
    readout = traitlets.Dict().tag(sync=True)
    readout_lines = traitlets.List().tag(sync=True)
    stages = traitlets.List().tag(sync=True)
    #: The stage table as it is shown: durations to 3 significant digits, names in words.
    stage_cells = traitlets.List().tag(sync=True)
    chart_spec = traitlets.Dict().tag(sync=True)
    chart_svg = traitlets.Unicode("").tag(sync=True)
    revision = traitlets.Int(0).tag(sync=True)

    def __init__(self, timeline: ResumeTimeline, *, draw_svg: bool = True, **givens: Any):
        if not isinstance(timeline, ResumeTimeline):
            raise ConfigError(f"ResumeTimelineView needs a kernel_lib.resume.stages.ResumeTimeline, got "
                              f"{type(timeline).__name__}")
        unknown = sorted(set(givens) - set(GIVENS))
        if unknown:
            raise ConfigError(f"unknown given(s) {unknown}: choose from {sorted(GIVENS)}")
        self._quiet = True
        self.draw_svg = draw_svg
        self.measured_timeline = timeline
        given = timeline.prefill if timeline.prefill is not None and timeline.prefill.needed else DEFAULT_PREFILL
        start = {"context_tokens": given.context_tokens, "cached_prefix_tokens": given.cached_prefix_tokens,
                 "prefill_tokens_per_s": given.prefill_tokens_per_s, **givens}
        model = prefill_from(start)      # bad starting givens raise here
        super().__init__(**start)
        self.givens_spec = [{"name": n, "label": lab, "unit": unit, "integer": whole}
                            for n, (lab, unit, whole) in GIVENS.items()]
        apply_now = bool(givens) or (timeline.prefill is not None and timeline.prefill.needed)
        self.prefill: PrefillModel | None = model if apply_now else timeline.prefill
        if not apply_now:
            why = (timeline.prefill.no_prefill_reason if timeline.prefill is not None
                   else f"it was given as {_ms(timeline.stage('prefill').duration_s)}")
            self.notice = (f"this resume's prefill is not computed from a model ({why}); change a given below to "
                           "model one")
        self.timeline = timeline.with_prefill(model) if apply_now else timeline
        self.observe(self._on_given, names=list(GIVENS))
        self._quiet = False
        self._publish()

    # --- Python side --------------------------------------------------------------------------------
    def update(self, **givens: Any) -> bool:
        """Set several givens at once. Returns True if applied; False if refused (the reason is in
        ``error`` and every given keeps its previous value)."""
        unknown = sorted(set(givens) - set(GIVENS))
        if unknown:
            self.error = f"unknown given(s) {unknown}: choose from {sorted(GIVENS)}"
            return False
        old = {n: getattr(self, n) for n in GIVENS}
        self._quiet = True
        try:
            with self.hold_trait_notifications():
                for n, v in givens.items():
                    setattr(self, n, v)
        finally:
            self._quiet = False
        return self._apply(old)

    def _on_given(self, change: dict[str, Any]) -> None:
        if self._quiet:
            return
        old = {n: getattr(self, n) for n in GIVENS}
        old[change["name"]] = change["old"]
        self._apply(old)

    def _apply(self, old: dict[str, Any]) -> bool:
        try:
            model = prefill_from({n: getattr(self, n) for n in GIVENS})
        except ConfigError as exc:
            self._quiet = True
            try:
                for n, v in old.items():
                    setattr(self, n, v)
            finally:
                self._quiet = False
            self.error = f"{exc}; kept the previous value"
            return False
        self._quiet = True
        try:      # show the values as the model holds them (8192.0 tokens -> 8192)
            self.context_tokens, self.cached_prefix_tokens = model.context_tokens, model.cached_prefix_tokens
            self.prefill_tokens_per_s = model.prefill_tokens_per_s
        finally:
            self._quiet = False
        self.prefill = model
        self.timeline = self.measured_timeline.with_prefill(model)
        self.error = self.notice = ""
        self._publish()
        return True

    def _publish(self) -> None:
        tl = self.timeline
        numbers, lines = readout_of(tl)
        crit = set(tl.critical_path)
        rows = [{"stage": s.name, "duration_ms": round(s.duration_s * 1e3, 6), "source": s.source,
                 "depends_on": ", ".join(s.depends_on), "critical": s.name in crit, "detail": s.detail}
                for s in tl.stages]
        cells = [{"stage": r["stage"].replace("_", " "), "duration": f"{number_text(r['duration_ms'])} ms",
                  "source": r["source"], "after": r["depends_on"].replace("_", " ") or "—",
                  "critical": "on the critical path" if r["critical"] else "", "detail": r["detail"],
                  "is_critical": r["critical"]} for r in rows]
        spec = chart(tl).to_dict()
        svg, notice = "", self.notice
        if self.draw_svg:
            try:
                svg = render_svg(spec)
            except (ImportError, ValueError) as exc:
                notice = f"the chart is not drawn ({exc}); install vl-convert-python to draw it offline"
        with self.hold_trait_notifications():
            self.readout, self.readout_lines, self.stages, self.stage_cells = numbers, lines, rows, cells
            self.chart_spec, self.chart_svg, self.notice = spec, svg, notice
            self.revision += 1


#: What the front end receives: static/_shared.js + static/resume_timeline.js, and static/resume_timeline.css.
_ESM, _CSS = ResumeTimelineView._esm, ResumeTimelineView._css
