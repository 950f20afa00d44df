"""Closed-form checkpoint cadence, evaluated numerically (§11.4.2 eq. 3, §11.4.3 theorem 11.1, eq. 4-5,
§11.12 exercise 9).

These are plain-``math`` transcriptions of the results that :mod:`kernel_lib.cadence.derivation`
derives with sympy; ``derivation.check_numeric()`` and the test suite compare the two, so an edit
here that drifts from the derivation fails a test.

All times are seconds, rates are per completed turn (or per second for Young's MTBF), strides are
turns. Every function checks its arguments and raises
:class:`~kernel_lib.errors.CadenceParameterError` (a ``ValueError``) naming the bad one: a
negative or non-finite time, a zero or negative rate where the formula divides by it, a stride
below 1.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from numbers import Real

from ..errors import CadenceParameterError


# --- argument checks ----------------------------------------------------------------------------
def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise CadenceParameterError(f"{name} must be a number, got {value!r}", name=name)
    v = float(value)
    if not math.isfinite(v):
        raise CadenceParameterError(f"{name} must be finite, got {value!r}", name=name)
    return v


def positive(name: str, value: object) -> float:
    """``value`` as a float > 0, else CadenceParameterError naming ``name``."""
    v = _number(name, value)
    if v <= 0:
        raise CadenceParameterError(f"{name} must be > 0, got {value!r}", name=name)
    return v


def nonnegative(name: str, value: object) -> float:
    """``value`` as a float >= 0, else CadenceParameterError naming ``name``."""
    v = _number(name, value)
    if v < 0:
        raise CadenceParameterError(f"{name} must be >= 0, got {value!r}", name=name)
    return v


def probability(name: str, value: object) -> float:
    """``value`` as a float in (0, 1], else CadenceParameterError naming ``name``."""
    v = positive(name, value)
    if v > 1:
        raise CadenceParameterError(f"{name} is a probability and must be <= 1, got {value!r}", name=name)
    return v


def stride(name: str, value: object) -> int:
    """``value`` as an int >= 1 (a stride in turns or checkpoints), else CadenceParameterError."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise CadenceParameterError(f"{name} must be a whole number of turns, got {value!r}", name=name)
    if value < 1:
        raise CadenceParameterError(f"{name} must be >= 1, got {value!r}", name=name)
    return value


# --- theorem 11.1, eq. 4: Young's interval in seconds ----------------------------------------------
def young_interval_s(pause_s: float, mtbf_s: float) -> float:
    """Young's useful-work interval between checkpoints, ``sqrt(2 C M)`` seconds (theorem 11.1, eq. 4).

    Args:
        pause_s: C, seconds execution stops to capture and durably publish one checkpoint (> 0).
        mtbf_s: M, mean seconds between failures that lose unrecorded work (> 0).

    Valid when failures are rare (C << M), Poisson and independent of progress.
    Raises CadenceParameterError for a non-positive or non-finite argument.
    """
    return math.sqrt(2.0 * positive("pause_s", pause_s) * positive("mtbf_s", mtbf_s))


def young_overhead_fraction(interval_s: float, pause_s: float, mtbf_s: float) -> float:
    """Expected fraction of useful time lost at checkpoint interval ``interval_s``:
    ``C/tau + tau/(2 M)`` (pauses plus half an interval re-executed per failure; theorem 11.1).

    Raises CadenceParameterError: interval or MTBF not > 0, pause < 0.
    """
    t = positive("interval_s", interval_s)
    return nonnegative("pause_s", pause_s) / t + t / (2.0 * positive("mtbf_s", mtbf_s))


def young_optimal_overhead_fraction(pause_s: float, mtbf_s: float) -> float:
    """Overhead at Young's interval, ``sqrt(2 C / M)`` of useful time (theorem 11.1).

    Raises CadenceParameterError for a non-positive or non-finite argument.
    """
    return math.sqrt(2.0 * positive("pause_s", pause_s) / positive("mtbf_s", mtbf_s))


def flat_minimum_factor(miss_factor: float) -> float:
    """Overhead at ``miss_factor`` times the optimum over the overhead at the optimum, counting only
    the parts that depend on the choice: ``(x + 1/x)/2`` (theorem 11.1's flat minimum; the same for
    eq. 4, eq. 5 and exercise 9's consolidation). ``x`` and ``1/x`` give the same factor.

    Raises CadenceParameterError if ``miss_factor`` is not > 0.
    """
    v = positive("miss_factor", miss_factor)
    return (v + 1.0 / v) / 2.0


# --- eq. 5: the stride in turns ------------------------------------------------------------------------
def stride_overhead_s_per_turn(stride_turns: float, pause_s: float, failure_rate_per_turn: float,
                               cost_s_per_turn: float) -> float:
    """Expected seconds lost per completed turn at a stride of ``stride_turns``: ``C/k + lam c k/2``
    (checkpoint pause spread over the stride, plus half a stride of per-turn recovery cost ``c`` per
    crash; §11.4.3). ``c`` is R (reconstruction) for logged turns, Re (re-execution) for unlogged.

    Raises CadenceParameterError: stride not > 0, pause/rate/cost < 0.
    """
    k_ = positive("stride_turns", stride_turns)
    return (nonnegative("pause_s", pause_s) / k_
            + nonnegative("failure_rate_per_turn", failure_rate_per_turn)
            * nonnegative("cost_s_per_turn", cost_s_per_turn) * k_ / 2.0)


def stride_turns(pause_s: float, failure_rate_per_turn: float, cost_s_per_turn: float) -> float:
    """The stride minimizing :func:`stride_overhead_s_per_turn`: ``sqrt(2 C / (lam c))`` turns (eq. 5).

    Raises CadenceParameterError for a non-positive or non-finite argument (a zero crash rate or
    cost has no finite optimum: never checkpointing is then free).
    """
    return math.sqrt(2.0 * positive("pause_s", pause_s)
                     / (positive("failure_rate_per_turn", failure_rate_per_turn)
                        * positive("cost_s_per_turn", cost_s_per_turn)))


def logged_stride_turns(pause_s: float, failure_rate_per_turn: float, reconstruction_s_per_turn: float) -> float:
    """k* = sqrt(2 C / (lam R)) turns, R = seconds to reconstruct one logged turn (read, validate,
    fold, apply its records). Eq. 5. Raises CadenceParameterError for a non-positive argument."""
    return stride_turns(pause_s, failure_rate_per_turn, reconstruction_s_per_turn)


def unlogged_stride_turns(pause_s: float, failure_rate_per_turn: float, reexecution_s_per_turn: float) -> float:
    """k* = sqrt(2 C / (lam Re)) turns, Re = seconds to re-execute an unlogged turn's model and tool
    calls: Young's regime counted in turns (§11.4.3). Raises CadenceParameterError."""
    return stride_turns(pause_s, failure_rate_per_turn, reexecution_s_per_turn)


def optimal_stride_overhead_s_per_turn(pause_s: float, failure_rate_per_turn: float,
                                       cost_s_per_turn: float) -> float:
    """Seconds lost per turn at the optimal stride: ``sqrt(2 C lam c)`` (§11.12 exercise 5).

    Raises CadenceParameterError for a non-positive or non-finite argument."""
    return math.sqrt(2.0 * positive("pause_s", pause_s) * positive("failure_rate_per_turn", failure_rate_per_turn)
                     * positive("cost_s_per_turn", cost_s_per_turn))


def logging_stride_gain(reconstruction_s_per_turn: float, reexecution_s_per_turn: float) -> float:
    """How many times longer the best stride is when turns are logged: ``sqrt(Re / R)`` (§11.4.3).

    Raises CadenceParameterError for a non-positive or non-finite argument."""
    return math.sqrt(positive("reexecution_s_per_turn", reexecution_s_per_turn)
                     / positive("reconstruction_s_per_turn", reconstruction_s_per_turn))


def effective_turn_cost_s(unlogged_fraction: float, reconstruction_s_per_turn: float,
                          reexecution_s_per_turn: float) -> float:
    """Mean recovery cost of a lost turn when a fraction of turns is not captured by the log:
    ``f Re + (1 - f) R`` seconds (§11.12 exercise 5).

    Raises CadenceParameterError: fraction outside [0, 1], a cost < 0.
    """
    f_ = nonnegative("unlogged_fraction", unlogged_fraction)
    if f_ > 1:
        raise CadenceParameterError(f"unlogged_fraction must be <= 1, got {unlogged_fraction!r}",
                                    name="unlogged_fraction")
    return (f_ * nonnegative("reexecution_s_per_turn", reexecution_s_per_turn)
            + (1.0 - f_) * nonnegative("reconstruction_s_per_turn", reconstruction_s_per_turn))


# --- eq. 3: write volume of full vs incremental snapshots -------------------------------------------
@dataclass(frozen=True)
class SnapshotVolumes:
    """Eq. 3 evaluated: bytes written over ``checkpoints`` checkpoints, one every ``stride_turns``
    turns, when checkpointed state grows ``bytes_per_turn``. ``ratio`` = full / incremental
    = (n + 1)/2."""

    bytes_per_turn: float
    stride_turns: int
    checkpoints: int
    full_bytes: float
    incremental_bytes: float
    ratio: float

    def to_dict(self) -> dict:
        return asdict(self)


def snapshot_write_volumes(bytes_per_turn: float, stride_turns: int, checkpoints: int) -> SnapshotVolumes:
    """Eq. 3: ``W_full = g k n(n+1)/2`` and ``W_incr = g k n`` bytes, ratio ``(n+1)/2``.

    Args:
        bytes_per_turn: g, growth of checkpointed state per turn, bytes (>= 0).
        stride_turns: k, turns between checkpoints (>= 1).
        checkpoints: n, checkpoints over the trajectory (>= 1).

    Raises CadenceParameterError for a bad argument.
    """
    g_ = nonnegative("bytes_per_turn", bytes_per_turn)
    k_ = stride("stride_turns", stride_turns)
    n_ = stride("checkpoints", checkpoints)
    full = g_ * k_ * n_ * (n_ + 1) / 2.0
    incr = g_ * k_ * n_
    return SnapshotVolumes(g_, k_, n_, full, incr, (n_ + 1) / 2.0)


# --- §11.12 exercise 9: consolidating a delta chain ------------------------------------------------
def consolidation_overhead_s(consolidation_stride: float, consolidation_pause_s: float, restore_probability: float,
                             base_read_s: float, delta_apply_s: float) -> float:
    """Expected seconds lost per checkpoint when a new base is written every ``m`` checkpoints:
    ``P/m + p (B + d m/2)`` (§11.12 exercise 9: consolidation pause P shared by m checkpoints, plus
    the chance p of a restore in a checkpoint interval times base read B and, on average, m/2 deltas
    applied at d seconds each; the exercise takes the mean chain length as m/2).

    Raises CadenceParameterError for a bad argument.
    """
    m_ = positive("consolidation_stride", consolidation_stride)
    return (nonnegative("consolidation_pause_s", consolidation_pause_s) / m_
            + probability("restore_probability", restore_probability)
            * (nonnegative("base_read_s", base_read_s) + nonnegative("delta_apply_s", delta_apply_s) * m_ / 2.0))


def consolidation_optimal_stride(consolidation_pause_s: float, restore_probability: float, base_read_s: float,
                                 delta_apply_s: float) -> float:
    """m* = sqrt(2 P / (p d)) checkpoints between consolidations (theorem 11.1's method applied to
    exercise 9). ``base_read_s`` does not move the optimum; it is accepted for symmetry and checked.

    Raises CadenceParameterError: P, p or d not > 0, B < 0.
    """
    nonnegative("base_read_s", base_read_s)
    return math.sqrt(2.0 * positive("consolidation_pause_s", consolidation_pause_s)
                     / (probability("restore_probability", restore_probability)
                        * positive("delta_apply_s", delta_apply_s)))


def worst_case_restore_s(consolidation_stride: float, base_read_s: float, delta_apply_s: float) -> float:
    """Longest restore with a chain of up to ``m`` deltas: ``B + d m`` seconds (exercise 9).

    Raises CadenceParameterError for a bad argument."""
    return (nonnegative("base_read_s", base_read_s)
            + nonnegative("delta_apply_s", delta_apply_s) * positive("consolidation_stride", consolidation_stride))


def largest_stride_within_deadline(deadline_s: float, base_read_s: float, delta_apply_s: float) -> int:
    """Largest whole ``m`` with ``B + d m <= deadline_s`` (exercise 9's resume deadline).

    Raises CadenceParameterError: a bad argument, or a deadline that not even one delta meets
    (``B + d > deadline_s``).
    """
    dl = positive("deadline_s", deadline_s)
    b_ = nonnegative("base_read_s", base_read_s)
    d_ = positive("delta_apply_s", delta_apply_s)
    m_ = math.floor((dl - b_) / d_ + 1e-9)   # tolerate float noise at an exact boundary
    if m_ < 1:
        raise CadenceParameterError(f"no chain length meets the deadline: base read {b_} s + one delta {d_} s "
                                    f"> {dl} s", name="deadline_s")
    return m_


@dataclass(frozen=True)
class ConsolidationPlan:
    """Exercise 9 worked through. Times in seconds, strides in checkpoints.

    Fields: the givens; ``optimal_stride`` (real m*), ``optimal_overhead_s`` (at m*),
    ``worst_case_restore_at_optimum_s``; with a deadline: ``deadline_stride`` (largest admissible
    whole m), ``deadline_overhead_s``, ``deadline_cost_ratio`` (overhead at it / at m*),
    ``miss_factor`` (m* / deadline stride), ``variable_part_ratio`` (ratio of the m-dependent terms),
    ``deadline_binding`` (False when the deadline admits m*: the cost figures are then m*'s own)
    and ``flat_minimum_factor`` ((x + 1/x)/2 for that miss factor), which must agree.
    """

    consolidation_pause_s: float
    restore_probability: float
    base_read_s: float
    delta_apply_s: float
    optimal_stride: float
    optimal_overhead_s: float
    worst_case_restore_at_optimum_s: float
    deadline_s: float | None = None
    deadline_stride: int | None = None
    deadline_overhead_s: float | None = None
    deadline_cost_ratio: float | None = None
    miss_factor: float | None = None
    variable_part_ratio: float | None = None
    deadline_binding: bool | None = None
    flat_minimum_factor: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def consolidation_plan(consolidation_pause_s: float, restore_probability: float, base_read_s: float,
                       delta_apply_s: float, deadline_s: float | None = None) -> ConsolidationPlan:
    """Exercise 9: the optimal consolidation stride, its overhead and worst-case restore, and, with
    ``deadline_s``, the largest stride meeting the restore deadline and what the deadline costs.

    Raises CadenceParameterError for a bad argument or an unreachable deadline.
    """
    args = (consolidation_pause_s, restore_probability, base_read_s, delta_apply_s)
    m_star = consolidation_optimal_stride(*args)
    h_star = consolidation_overhead_s(m_star, *args)
    plan = dict(consolidation_pause_s=float(consolidation_pause_s), restore_probability=float(restore_probability),
                base_read_s=float(base_read_s), delta_apply_s=float(delta_apply_s), optimal_stride=m_star,
                optimal_overhead_s=h_star,
                worst_case_restore_at_optimum_s=worst_case_restore_s(m_star, base_read_s, delta_apply_s))
    if deadline_s is not None:
        m_d = largest_stride_within_deadline(deadline_s, base_read_s, delta_apply_s)
        # a deadline that admits m* costs nothing: the figures are then those of m* itself
        binding = m_d < m_star
        m_use = m_d if binding else m_star
        h_d = consolidation_overhead_s(m_use, *args)
        const = float(restore_probability) * float(base_read_s)
        plan.update(deadline_s=float(deadline_s), deadline_stride=m_d, deadline_overhead_s=h_d,
                    deadline_cost_ratio=h_d / h_star, miss_factor=m_star / m_use,
                    variable_part_ratio=(h_d - const) / (h_star - const),
                    flat_minimum_factor=flat_minimum_factor(m_star / m_use), deadline_binding=binding)
    return ConsolidationPlan(**plan)


# --- summaries used by the CLI and notebooks ---------------------------------------------------------
@dataclass(frozen=True)
class YoungSummary:
    """Theorem 11.1 for one (pause, MTBF): the interval, the overhead at it, and the overhead at
    each requested miss factor (``misses``: list of dicts with ``miss_factor``, ``interval_s``,
    ``overhead_fraction``, ``relative_to_optimum``)."""

    pause_s: float
    mtbf_s: float
    interval_s: float
    overhead_fraction: float
    pause_to_mtbf: float
    misses: tuple

    def to_dict(self) -> dict:
        d_ = asdict(self)
        d_["misses"] = [dict(r) for r in self.misses]
        return d_


def young_summary(pause_s: float, mtbf_s: float, miss_factors=(0.1, 0.5, 2.0, 10.0)) -> YoungSummary:
    """Young's interval, its overhead, and the flat minimum at ``miss_factors`` (each evaluated on
    ``C/tau + tau/(2M)`` directly and compared with :func:`flat_minimum_factor`).

    Raises CadenceParameterError for a bad argument."""
    t = young_interval_s(pause_s, mtbf_s)
    h = young_overhead_fraction(t, pause_s, mtbf_s)
    misses = []
    for x_ in miss_factors:
        xv = positive("miss_factor", x_)
        hx = young_overhead_fraction(xv * t, pause_s, mtbf_s)
        misses.append({"miss_factor": xv, "interval_s": xv * t, "overhead_fraction": hx,
                       "relative_to_optimum": hx / h, "flat_minimum_factor": flat_minimum_factor(xv)})
    return YoungSummary(float(pause_s), float(mtbf_s), t, h, float(pause_s) / float(mtbf_s), tuple(misses))


@dataclass(frozen=True)
class StrideSummary:
    """Eq. 5 for one set of givens: the logged stride and its per-turn overhead; with a re-execution
    cost, the unlogged stride, its overhead, and the gain sqrt(Re/R)."""

    pause_s: float
    failure_rate_per_turn: float
    reconstruction_s_per_turn: float
    logged_stride_turns: float
    logged_overhead_s_per_turn: float
    reexecution_s_per_turn: float | None = None
    unlogged_stride_turns: float | None = None
    unlogged_overhead_s_per_turn: float | None = None
    logging_gain: float | None = None
    reconstruction_source: str = "given"

    def to_dict(self) -> dict:
        return asdict(self)


def stride_summary(pause_s: float, failure_rate_per_turn: float, reconstruction_s_per_turn: float,
                   reexecution_s_per_turn: float | None = None, reconstruction_source: str = "given") -> StrideSummary:
    """Eq. 5 in one call (see :class:`StrideSummary`). Raises CadenceParameterError."""
    out = dict(pause_s=float(pause_s), failure_rate_per_turn=float(failure_rate_per_turn),
               reconstruction_s_per_turn=float(reconstruction_s_per_turn),
               logged_stride_turns=logged_stride_turns(pause_s, failure_rate_per_turn, reconstruction_s_per_turn),
               logged_overhead_s_per_turn=optimal_stride_overhead_s_per_turn(pause_s, failure_rate_per_turn,
                                                                             reconstruction_s_per_turn),
               reconstruction_source=reconstruction_source)
    if reexecution_s_per_turn is not None:
        out.update(reexecution_s_per_turn=float(reexecution_s_per_turn),
                   unlogged_stride_turns=unlogged_stride_turns(pause_s, failure_rate_per_turn, reexecution_s_per_turn),
                   unlogged_overhead_s_per_turn=optimal_stride_overhead_s_per_turn(
                       pause_s, failure_rate_per_turn, reexecution_s_per_turn),
                   logging_gain=logging_stride_gain(reconstruction_s_per_turn, reexecution_s_per_turn))
    return StrideSummary(**out)
