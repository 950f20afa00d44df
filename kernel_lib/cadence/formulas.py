"""Closed-form checkpoint cadence, evaluated numerically (§11.4.2 eq. 3, §11.4.3 theorem 11.1, eq. 4-5,
§11.12 exercise 9).

These are plain-``math`` transcriptions of the results that :mod:`kernel_lib.cadence.derivation`
derives with sympy; ``derivation.check_numeric()`` and the test suite compare the two, so an edit
here that drifts from the derivation fails a test.

All times are seconds, rates are per completed turn (or per second for Young's MTBF), strides are
turns. Every function checks its arguments and raises
:class:`~kernel_lib.errors.CadenceParameterError` (a ``ValueError``) naming the bad one: a
non-number, a negative or non-finite value, a zero or negative rate where the formula divides by
it, a stride below 1, or a value outside the parameter's accepted range (:data:`RANGES`,
:data:`DEFAULT_RANGE`, :data:`MAX_COUNT`). The ranges keep every formula inside floating-point
range, and each result is checked as well: a result that is not finite and positive (an
overflow to ``inf``, an underflow to 0) raises CadenceParameterError naming the givens behind it
instead of being returned.

Numbers may be any real type (``int``, ``float``, numpy scalars, ...); ``bool`` is refused.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from numbers import Integral, Real

from kernel_lib.errors import CadenceParameterError

# --- accepted ranges --------------------------------------------------------------------------------
#: Smallest and largest accepted value of a real given, for names not in :data:`RANGES`. For times
#: this is a picosecond to about 31,700 years: any value the chapter's formulas mean anything for,
#: and far enough inside float range that no product or quotient of two or three givens overflows
#: or underflows. The smallest value applies where a given must be > 0 (:func:`positive`: it
#: divides, or the result must not vanish); where 0 is allowed (:func:`nonnegative`: the given only
#: adds a term) any value from 0 up to the largest is accepted.
DEFAULT_RANGE: tuple[float, float] = (1e-12, 1e12)

#: Per-parameter ranges (smallest value when > 0 is required, largest value, unit) where the default
#: does not fit.
#: A crash rate above 1e3 per turn means no turn ever completes (and a Poisson trace of it would be
#: astronomically long); strides and intervals that are *derived* (and fed back, e.g. by a chart
#: or a miss factor) get a wide range so that a computed optimum is never refused.
RANGES: dict[str, tuple[float, float, str]] = {
    "failure_rate_per_turn": (1e-12, 1e3, " crashes/turn"),
    "bytes_per_turn": (1e-12, 1e18, " bytes/turn"),
    "miss_factor": (1e-6, 1e6, ""),
    "stride_turns": (1e-30, 1e30, " turns"),
    "consolidation_stride": (1e-30, 1e30, " checkpoints"),
    "interval_s": (1e-30, 1e30, " s"),
}

#: Largest accepted whole count (turns in a run, a stride, checkpoints): 10^12.
MAX_COUNT = 10 ** 12


def _range(name: str) -> tuple[float, float, str]:
    if name in RANGES:
        return RANGES[name]
    unit = " s" if name.endswith("_s") else " s/turn" if name.endswith("_s_per_turn") else ""
    return (*DEFAULT_RANGE, unit)


def show(value: object) -> str:
    """A short text for a given in an error message (a 400-digit integer is not printed whole)."""
    if isinstance(value, Integral) and not isinstance(value, bool):
        v = int(value)
        if v.bit_length() > 64:
            return f"{'-' if v < 0 else ''}an integer of about {int(v.bit_length() * math.log10(2)) + 1} digits"
        return repr(v)
    if isinstance(value, Real) and not isinstance(value, bool):
        try:
            return repr(float(value))
        except OverflowError:
            return "a number too large for a float"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _real(name: str, value: object, *, zero_ok: bool, bounds: tuple[float, float, str] | None = None) -> float:
    """The shared check behind :func:`positive` and :func:`nonnegative`."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise CadenceParameterError(f"{name} must be a number, got {show(value)}", name=name)
    try:
        v = float(value)
        overflow = False
    except OverflowError:                           # an int (or Fraction, ...) beyond float range
        v, overflow = (math.inf if value > 0 else -math.inf), True
    if math.isnan(v) or (math.isinf(v) and not overflow):
        raise CadenceParameterError(f"{name} must be finite, got {show(value)}", name=name)
    if v < 0 or (v == 0 and not zero_ok):
        raise CadenceParameterError(f"{name} must be {'>= 0' if zero_ok else '> 0'}, got {show(value)}", name=name)
    lo, hi, unit = bounds or _range(name)
    if v > hi or (not zero_ok and v < lo):
        allowed = f"between 0 and {hi:g}{unit}" if zero_ok else f"between {lo:g} and {hi:g}{unit}"
        raise CadenceParameterError(f"{name} must be {allowed}, got {show(value)}", name=name)
    return v


def positive(name: str, value: object) -> float:
    """``value`` as a float > 0 within ``name``'s accepted range (:data:`RANGES`, else
    :data:`DEFAULT_RANGE`), else CadenceParameterError naming ``name``."""
    return _real(name, value, zero_ok=False)


def nonnegative(name: str, value: object) -> float:
    """``value`` as a float from 0 up to ``name``'s largest accepted value, else
    CadenceParameterError naming ``name``."""
    return _real(name, value, zero_ok=True)


def probability(name: str, value: object) -> float:
    """``value`` as a float in [1e-12, 1], else CadenceParameterError naming ``name``."""
    v = _real(name, value, zero_ok=False, bounds=(1e-12, math.inf, ""))
    if v > 1:
        raise CadenceParameterError(f"{name} is a probability and must be <= 1, got {show(value)}", name=name)
    return v


def stride(name: str, value: object, maximum: int = MAX_COUNT) -> int:
    """``value`` as an int in 1..``maximum`` (a stride in turns, a count of turns or checkpoints),
    else CadenceParameterError naming ``name``. Any integer type is accepted (numpy's too), and a
    float only when it is a whole number; ``bool`` is refused."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise CadenceParameterError(f"{name} must be a whole number, got {show(value)}", name=name)
    if isinstance(value, Integral):
        v = int(value)
    else:
        try:
            fv = float(value)
        except OverflowError:
            fv = math.inf
        if not math.isfinite(fv) or not fv.is_integer():
            raise CadenceParameterError(f"{name} must be a whole number, got {show(value)}", name=name)
        v = int(fv)
    if v < 1:
        raise CadenceParameterError(f"{name} must be >= 1, got {show(value)}", name=name)
    if v > maximum:
        raise CadenceParameterError(f"{name} must be <= {maximum:,}, got {show(value)}", name=name)
    return v


def random_seed(name: str, value: object) -> int:
    """A random seed: an integer >= 0 (any integer type, not ``bool``; ``None`` is refused because an
    unseeded draw cannot be reproduced). Raises CadenceParameterError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise CadenceParameterError(f"{name} must be a whole number >= 0 (a fixed seed, so that the draw can be "
                                    f"repeated), got {show(value)}", name=name)
    if value < 0:
        raise CadenceParameterError(f"{name} must be >= 0, got {show(value)}", name=name)
    return int(value)


def _result(what: str, value: float, givens: dict[str, object], *, zero_ok: bool = False) -> float:
    """``value`` if it is finite and > 0 (or == 0 with ``zero_ok``); else CadenceParameterError naming
    the givens it came from, so that no inf, nan or underflowed 0 is ever returned as an answer."""
    if math.isfinite(value) and (value > 0 or (zero_ok and value == 0)):
        return value
    named = ", ".join(f"{k} = {show(v)}" for k, v in givens.items())
    raise CadenceParameterError(f"{what} comes out as {value!r} for {named}: outside floating-point range; "
                                f"bring these givens closer to ordinary values", name=next(iter(givens)))


# --- unchecked cores (the public functions below check their arguments and results) ----------------
def _young_overhead(t: float, c: float, m: float) -> float:
    return c / t + t / (2.0 * m)


def _flat(x: float) -> float:
    return (x + 1.0 / x) / 2.0


def _stride_overhead(k: float, c: float, lam: float, cost: float) -> float:
    return c / k + lam * cost * k / 2.0


def _consolidation_variable(m: float, pause: float, p: float, d: float) -> float:
    """The part of exercise 9's H(m) that depends on m: ``P/m + p d m/2``."""
    return pause / m + p * d * m / 2.0


# --- theorem 11.1, eq. 4: Young's interval in seconds ----------------------------------------------
def young_interval_s(pause_s: float, mtbf_s: float) -> float:
    """Young's useful-work interval between checkpoints, ``sqrt(2 C M)`` seconds (theorem 11.1, eq. 4).

    Args:
        pause_s: C, seconds execution stops to capture and durably publish one checkpoint
            (> 0, within :data:`DEFAULT_RANGE`).
        mtbf_s: M, mean seconds between failures that lose unrecorded work (> 0, same range).

    Valid when failures are rare (C << M), Poisson and independent of progress.
    Raises CadenceParameterError for a non-number, a non-positive, non-finite or out-of-range
    argument.
    """
    c_, m_ = positive("pause_s", pause_s), positive("mtbf_s", mtbf_s)
    return _result("Young's interval sqrt(2 C M)", math.sqrt(2.0 * c_ * m_), {"pause_s": pause_s, "mtbf_s": mtbf_s})


def young_overhead_fraction(interval_s: float, pause_s: float, mtbf_s: float) -> float:
    """Expected fraction of useful time lost at checkpoint interval ``interval_s``:
    ``C/tau + tau/(2 M)`` (pauses plus half an interval re-executed per failure; theorem 11.1).

    Raises CadenceParameterError: interval or MTBF not > 0, pause < 0, an argument out of range.
    """
    t, c_, m_ = positive("interval_s", interval_s), nonnegative("pause_s", pause_s), positive("mtbf_s", mtbf_s)
    return _result("the overhead C/tau + tau/(2M)", _young_overhead(t, c_, m_),
                   {"interval_s": interval_s, "pause_s": pause_s, "mtbf_s": mtbf_s})


def young_optimal_overhead_fraction(pause_s: float, mtbf_s: float) -> float:
    """Overhead at Young's interval, ``sqrt(2 C / M)`` of useful time (theorem 11.1).

    Raises CadenceParameterError for a non-positive, non-finite or out-of-range argument.
    """
    c_, m_ = positive("pause_s", pause_s), positive("mtbf_s", mtbf_s)
    return _result("the overhead sqrt(2 C / M)", math.sqrt(2.0 * c_ / m_), {"pause_s": pause_s, "mtbf_s": mtbf_s})


def flat_minimum_factor(miss_factor: float) -> float:
    """Overhead at ``miss_factor`` times the optimum over the overhead at the optimum, counting only
    the parts that depend on the choice: ``(x + 1/x)/2`` (theorem 11.1's flat minimum; the same for
    eq. 4, eq. 5 and exercise 9's consolidation). ``x`` and ``1/x`` give the same factor.

    Raises CadenceParameterError if ``miss_factor`` is not in [1e-6, 1e6].
    """
    return _flat(positive("miss_factor", miss_factor))


# --- eq. 5: the stride in turns ------------------------------------------------------------------------
def stride_overhead_s_per_turn(stride_turns: float, pause_s: float, failure_rate_per_turn: float,
                               cost_s_per_turn: float) -> float:
    """Expected seconds lost per completed turn at a stride of ``stride_turns``: ``C/k + lam c k/2``
    (checkpoint pause spread over the stride, plus half a stride of per-turn recovery cost ``c`` per
    crash; §11.4.3). ``c`` is R (reconstruction) for logged turns, Re (re-execution) for unlogged.
    ``stride_turns`` may be fractional (the continuous curve); it is accepted in [1e-30, 1e30].

    Raises CadenceParameterError: stride not > 0, pause/rate/cost < 0, an argument out of range.
    """
    k_ = positive("stride_turns", stride_turns)
    h = _stride_overhead(k_, nonnegative("pause_s", pause_s),
                         nonnegative("failure_rate_per_turn", failure_rate_per_turn),
                         nonnegative("cost_s_per_turn", cost_s_per_turn))
    return _result("the overhead C/k + lam c k/2", h,
                   {"stride_turns": stride_turns, "pause_s": pause_s, "failure_rate_per_turn": failure_rate_per_turn,
                    "cost_s_per_turn": cost_s_per_turn}, zero_ok=True)


def stride_turns(pause_s: float, failure_rate_per_turn: float, cost_s_per_turn: float) -> float:
    """The stride minimizing :func:`stride_overhead_s_per_turn`: ``sqrt(2 C / (lam c))`` turns (eq. 5).
    It may be below 1 (then every turn is worth a checkpoint).

    Raises CadenceParameterError for a non-positive, non-finite or out-of-range argument (a zero
    crash rate or cost has no finite optimum: never checkpointing is then free).
    """
    c_ = positive("pause_s", pause_s)
    lam = positive("failure_rate_per_turn", failure_rate_per_turn)
    cost = positive("cost_s_per_turn", cost_s_per_turn)
    return _result("the stride sqrt(2C/(lam c))", math.sqrt(2.0 * c_ / (lam * cost)),
                   {"pause_s": pause_s, "failure_rate_per_turn": failure_rate_per_turn,
                    "cost_s_per_turn": cost_s_per_turn})


def _renamed(exc: CadenceParameterError, old: str, new: str) -> CadenceParameterError:
    return CadenceParameterError(str(exc).replace(old, new), name=new if exc.name == old else exc.name)


def logged_stride_turns(pause_s: float, failure_rate_per_turn: float, reconstruction_s_per_turn: float) -> float:
    """k* = sqrt(2 C / (lam R)) turns, R = seconds to reconstruct one logged turn (read, validate,
    fold, apply its records). Eq. 5. Raises CadenceParameterError for a non-positive or out-of-range
    argument (naming ``reconstruction_s_per_turn`` for R)."""
    try:
        return stride_turns(pause_s, failure_rate_per_turn, reconstruction_s_per_turn)
    except CadenceParameterError as exc:
        raise _renamed(exc, "cost_s_per_turn", "reconstruction_s_per_turn") from None


def unlogged_stride_turns(pause_s: float, failure_rate_per_turn: float, reexecution_s_per_turn: float) -> float:
    """k* = sqrt(2 C / (lam Re)) turns, Re = seconds to re-execute an unlogged turn's model and tool
    calls: Young's regime counted in turns (§11.4.3). Raises CadenceParameterError (naming
    ``reexecution_s_per_turn`` for Re)."""
    try:
        return stride_turns(pause_s, failure_rate_per_turn, reexecution_s_per_turn)
    except CadenceParameterError as exc:
        raise _renamed(exc, "cost_s_per_turn", "reexecution_s_per_turn") from None


def optimal_stride_overhead_s_per_turn(pause_s: float, failure_rate_per_turn: float,
                                       cost_s_per_turn: float) -> float:
    """Seconds lost per turn at the optimal stride: ``sqrt(2 C lam c)`` (§11.12 exercise 5).

    Raises CadenceParameterError for a non-positive, non-finite or out-of-range argument."""
    c_ = positive("pause_s", pause_s)
    lam = positive("failure_rate_per_turn", failure_rate_per_turn)
    cost = positive("cost_s_per_turn", cost_s_per_turn)
    return _result("the overhead sqrt(2 C lam c)", math.sqrt(2.0 * c_ * lam * cost),
                   {"pause_s": pause_s, "failure_rate_per_turn": failure_rate_per_turn,
                    "cost_s_per_turn": cost_s_per_turn})


def logging_stride_gain(reconstruction_s_per_turn: float, reexecution_s_per_turn: float) -> float:
    """How many times longer the best stride is when turns are logged: ``sqrt(Re / R)`` (§11.4.3).

    Raises CadenceParameterError for a non-positive, non-finite or out-of-range argument."""
    re_ = positive("reexecution_s_per_turn", reexecution_s_per_turn)
    r_ = positive("reconstruction_s_per_turn", reconstruction_s_per_turn)
    return _result("the gain sqrt(Re/R)", math.sqrt(re_ / r_),
                   {"reexecution_s_per_turn": reexecution_s_per_turn,
                    "reconstruction_s_per_turn": reconstruction_s_per_turn})


def effective_turn_cost_s(unlogged_fraction: float, reconstruction_s_per_turn: float,
                          reexecution_s_per_turn: float) -> float:
    """Mean recovery cost of a lost turn when a fraction of turns is not captured by the log:
    ``f Re + (1 - f) R`` seconds (§11.12 exercise 5).

    Raises CadenceParameterError: fraction outside [0, 1] (or positive below 1e-12), a cost < 0 or
    out of range.
    """
    f_ = nonnegative("unlogged_fraction", unlogged_fraction)
    if f_ > 1:
        raise CadenceParameterError(f"unlogged_fraction must be <= 1, got {show(unlogged_fraction)}",
                                    name="unlogged_fraction")
    c_ = (f_ * nonnegative("reexecution_s_per_turn", reexecution_s_per_turn)
          + (1.0 - f_) * nonnegative("reconstruction_s_per_turn", reconstruction_s_per_turn))
    return _result("the cost f Re + (1 - f) R", c_,
                   {"unlogged_fraction": unlogged_fraction, "reconstruction_s_per_turn": reconstruction_s_per_turn,
                    "reexecution_s_per_turn": reexecution_s_per_turn}, zero_ok=True)


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
        bytes_per_turn: g, growth of checkpointed state per turn, bytes (0, or 1e-12 .. 1e18).
        stride_turns: k, turns between checkpoints (1 .. :data:`MAX_COUNT`).
        checkpoints: n, checkpoints over the trajectory (1 .. :data:`MAX_COUNT`).

    Raises CadenceParameterError for a bad argument.
    """
    g_ = nonnegative("bytes_per_turn", bytes_per_turn)
    k_ = stride("stride_turns", stride_turns)
    n_ = stride("checkpoints", checkpoints)
    givens = {"bytes_per_turn": bytes_per_turn, "stride_turns": k_, "checkpoints": n_}
    full = _result("W_full", g_ * k_ * (n_ * (n_ + 1) / 2.0), givens, zero_ok=True)
    incr = _result("W_incr", g_ * k_ * n_, givens, zero_ok=True)
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
    pause = nonnegative("consolidation_pause_s", consolidation_pause_s)
    p_ = probability("restore_probability", restore_probability)
    b_, d_ = nonnegative("base_read_s", base_read_s), nonnegative("delta_apply_s", delta_apply_s)
    return _result("H(m)", pause / m_ + p_ * (b_ + d_ * m_ / 2.0),
                   {"consolidation_stride": consolidation_stride, "consolidation_pause_s": consolidation_pause_s,
                    "restore_probability": restore_probability, "base_read_s": base_read_s,
                    "delta_apply_s": delta_apply_s}, zero_ok=True)


def consolidation_optimal_stride(consolidation_pause_s: float, restore_probability: float, base_read_s: float,
                                 delta_apply_s: float) -> float:
    """m* = sqrt(2 P / (p d)) checkpoints between consolidations (theorem 11.1's method applied to
    exercise 9). ``base_read_s`` does not move the optimum; it is accepted for symmetry and checked.

    Raises CadenceParameterError: P, p or d not > 0, B < 0, an argument out of range.
    """
    nonnegative("base_read_s", base_read_s)
    pause = positive("consolidation_pause_s", consolidation_pause_s)
    p_ = probability("restore_probability", restore_probability)
    d_ = positive("delta_apply_s", delta_apply_s)
    return _result("m* = sqrt(2P/(p d))", math.sqrt(2.0 * pause / (p_ * d_)),
                   {"consolidation_pause_s": consolidation_pause_s, "restore_probability": restore_probability,
                    "delta_apply_s": delta_apply_s})


def worst_case_restore_s(consolidation_stride: float, base_read_s: float, delta_apply_s: float) -> float:
    """Longest restore with a chain of up to ``m`` deltas: ``B + d m`` seconds (exercise 9).

    Raises CadenceParameterError for a bad argument."""
    b_, d_ = nonnegative("base_read_s", base_read_s), nonnegative("delta_apply_s", delta_apply_s)
    m_ = positive("consolidation_stride", consolidation_stride)
    return _result("B + d m", b_ + d_ * m_, {"consolidation_stride": consolidation_stride, "base_read_s": base_read_s,
                                             "delta_apply_s": delta_apply_s}, zero_ok=True)


def largest_stride_within_deadline(deadline_s: float, base_read_s: float, delta_apply_s: float) -> int:
    """Largest whole ``m`` with ``B + d m <= deadline_s`` (exercise 9's resume deadline).

    Raises CadenceParameterError: a bad or out-of-range argument, or a deadline that not even one
    delta meets (``B + d > deadline_s``).
    """
    dl = positive("deadline_s", deadline_s)
    b_ = nonnegative("base_read_s", base_read_s)
    d_ = positive("delta_apply_s", delta_apply_s)
    q = (dl - b_) / d_ + 1e-9   # tolerate float noise at an exact boundary; finite: |dl - b| / d <= 1e24
    m_ = math.floor(q) if q >= 1 else 0
    if m_ < 1:
        raise CadenceParameterError(f"no chain length meets the deadline: base read {b_:g} s + one delta {d_:g} s "
                                    f"> {dl:g} s", name="deadline_s")
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

    The variable-part ratio is computed from the m-dependent terms ``P/m + p d m/2`` directly (not
    as a difference of totals, which loses every digit when ``p B`` dwarfs them).

    Raises CadenceParameterError for a bad or out-of-range argument or an unreachable deadline.
    """
    args = (consolidation_pause_s, restore_probability, base_read_s, delta_apply_s)
    m_star = consolidation_optimal_stride(*args)
    h_star = consolidation_overhead_s(m_star, *args)
    pause, p_, d_ = float(consolidation_pause_s), float(restore_probability), float(delta_apply_s)
    plan = dict(consolidation_pause_s=pause, restore_probability=p_,
                base_read_s=float(base_read_s), delta_apply_s=d_, optimal_stride=m_star,
                optimal_overhead_s=h_star,
                worst_case_restore_at_optimum_s=worst_case_restore_s(m_star, base_read_s, delta_apply_s))
    if deadline_s is not None:
        m_d = largest_stride_within_deadline(deadline_s, base_read_s, delta_apply_s)
        # a deadline that admits m* costs nothing: the figures are then those of m* itself
        binding = m_d < m_star
        m_use = m_d if binding else m_star
        h_d = consolidation_overhead_s(m_use, *args)
        givens = {"deadline_s": deadline_s, "consolidation_pause_s": consolidation_pause_s,
                  "restore_probability": restore_probability, "delta_apply_s": delta_apply_s}
        miss = _result("the miss factor m*/m", m_star / m_use, givens)
        var_ratio = _result("the variable-part ratio", _consolidation_variable(m_use, pause, p_, d_)
                            / _consolidation_variable(m_star, pause, p_, d_), givens)
        plan.update(deadline_s=float(deadline_s), deadline_stride=m_d, deadline_overhead_s=h_d,
                    deadline_cost_ratio=_result("H(m)/H(m*)", h_d / h_star, givens), miss_factor=miss,
                    variable_part_ratio=var_ratio, flat_minimum_factor=_result("(x + 1/x)/2", _flat(miss), givens),
                    deadline_binding=binding)
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
    c_, m_ = float(pause_s), float(mtbf_s)
    givens = {"pause_s": pause_s, "mtbf_s": mtbf_s}
    h = _result("the overhead at Young's interval", _young_overhead(t, c_, m_), givens)
    misses = []
    for x_ in miss_factors:
        xv = positive("miss_factor", x_)
        hx = _result(f"the overhead at {xv:g} x Young's interval", _young_overhead(xv * t, c_, m_),
                     {"miss_factor": x_, **givens})
        misses.append({"miss_factor": xv, "interval_s": xv * t, "overhead_fraction": hx,
                       "relative_to_optimum": hx / h, "flat_minimum_factor": _flat(xv)})
    return YoungSummary(c_, m_, t, h, _result("pause/MTBF", c_ / m_, givens), tuple(misses))


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
    k_logged = logged_stride_turns(pause_s, failure_rate_per_turn, reconstruction_s_per_turn)   # checks all three
    if reexecution_s_per_turn is not None:
        positive("reexecution_s_per_turn", reexecution_s_per_turn)
    out = dict(pause_s=float(pause_s), failure_rate_per_turn=float(failure_rate_per_turn),
               reconstruction_s_per_turn=float(reconstruction_s_per_turn),
               logged_stride_turns=k_logged,
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
