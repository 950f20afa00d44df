"""Checkpoint cadence (Durable Execution §11.4.2-11.4.3, §11.9, §11.12 exercises 3, 5, 9).

How often to checkpoint is a balance: every checkpoint stops execution for its capture pause C,
and every crash costs the work since the latest checkpoint, either re-executed (Young's regime,
theorem 11.1) or merely reconstructed from the trajectory log (eq. 5), which is much cheaper and so
moves the best stride out by sqrt(Re/R).

Modules:

* :mod:`.derivation`: the sympy derivations (differentiate, solve, check curvature, simplify the
  flat-minimum factor) of every closed form below; ``derive()``, ``check_numeric()``.
* :mod:`.formulas`: the numeric closed forms (checked against the derivations by the tests):
  Young's interval and overhead (eq. 4), the stride in turns (eq. 5), the logging gain, the flat
  minimum, eq. 3 write volumes, exercise 9's consolidation plan.
* :mod:`.trace`: crash traces (given or seeded Poisson), eq. 6 on a trace, a turn-by-turn check.
* :mod:`.measure`: R measured from a real kernel_lib log on this machine; C given, measured by a
  callable, or measured by real checkpoint captures (``measure_capture_pause``, which can also time
  T_restore); values carry their provenance.
* :mod:`.napkin`: Napkin Math 11.1 rebuilt from its printed results.
* :mod:`.lanl`: LANL failure records: loader, inter-arrival statistics, a Poisson test with a
  bootstrap-calibrated KS p-value, Young's interval at the measured MTBF and its replay on the
  real failure times.

Command line: ``python -m kernel_lib cadence {trace,young,stride,simulate,consolidation,snapshot,lanl,derive}``.

Bad input is a typed error, never a traceback, a hang or a meaningless number: every given is
checked against a per-parameter range (``formulas.RANGES``, ``formulas.DEFAULT_RANGE``,
``formulas.MAX_COUNT``) and every result must be finite (and positive where it must), else
:class:`~kernel_lib.errors.CadenceParameterError` names the given; work that grows with the input
is bounded (``trace.MAX_POISSON_CRASHES``, ``trace.MAX_SIMULATED_TURNS``, ``trace.MAX_ALL_STRIDES``,
``lanl.MAX_BOOTSTRAP``); seeds are integers >= 0. Failure-record files raise
:class:`~kernel_lib.errors.FailureDataError` naming the file and line.
"""

from __future__ import annotations

from kernel_lib.cadence.formulas import (
    ConsolidationPlan,
    SnapshotVolumes,
    StrideSummary,
    YoungSummary,
    consolidation_optimal_stride,
    consolidation_overhead_s,
    consolidation_plan,
    effective_turn_cost_s,
    flat_minimum_factor,
    largest_stride_within_deadline,
    logged_stride_turns,
    logging_stride_gain,
    optimal_stride_overhead_s_per_turn,
    snapshot_write_volumes,
    stride_overhead_s_per_turn,
    stride_summary,
    stride_turns,
    unlogged_stride_turns,
    worst_case_restore_s,
    young_interval_s,
    young_optimal_overhead_fraction,
    young_overhead_fraction,
    young_summary,
)
from kernel_lib.cadence.measure import (
    CaptureMeasurement,
    Quantity,
    given,
    measure_capture_pause,
    measure_reconstruction,
    resolve_pause,
)
from kernel_lib.cadence.trace import (
    CrashTrace,
    StrideResult,
    TraceEvaluation,
    evaluate_strides,
    given_trace,
    lost_suffix_turns,
    poisson_trace,
    simulate_turn_by_turn,
    trace_overhead,
)

__all__ = [
    "CaptureMeasurement",
    "ConsolidationPlan",
    "CrashTrace",
    "Quantity",
    "SnapshotVolumes",
    "StrideResult",
    "StrideSummary",
    "TraceEvaluation",
    "YoungSummary",
    "consolidation_optimal_stride",
    "consolidation_overhead_s",
    "consolidation_plan",
    "effective_turn_cost_s",
    "evaluate_strides",
    "flat_minimum_factor",
    "given",
    "given_trace",
    "largest_stride_within_deadline",
    "logged_stride_turns",
    "logging_stride_gain",
    "lost_suffix_turns",
    "measure_capture_pause",
    "measure_reconstruction",
    "optimal_stride_overhead_s_per_turn",
    "poisson_trace",
    "resolve_pause",
    "simulate_turn_by_turn",
    "snapshot_write_volumes",
    "stride_overhead_s_per_turn",
    "stride_summary",
    "stride_turns",
    "trace_overhead",
    "unlogged_stride_turns",
    "worst_case_restore_s",
    "young_interval_s",
    "young_optimal_overhead_fraction",
    "young_overhead_fraction",
    "young_summary",
]
