"""Crash traces and the overhead of a stride on one trace (§11.4.3 eq. 6).

A :class:`CrashTrace` is a run of ``turns`` turns and the crashes that hit it, each given as the
number of turns *completed* when it struck (``0 <= c < turns``; the crash interrupts turn ``c + 1``).
A checkpoint is published after every ``stride``-th completed turn (after turns k, 2k, ..., up to
and including turn ``turns``, so a run of N turns takes ``N // k`` of them), so a crash after
``c`` completed turns finds ``c mod k`` logged turns beyond its latest checkpoint. The turn that
was in flight is not counted: its calls are in doubt, which no cadence changes.

Eq. 6 then charges, in seconds::

    overhead(k) = N_k * C + N_crash * T_restore + R * sum_i (c_i mod k)

:func:`trace_overhead` evaluates it in closed form; :func:`simulate_turn_by_turn` walks the run one
turn at a time (executing turns, publishing checkpoints, crashing and reconstructing) and must
agree with it exactly; :func:`poisson_trace` draws a seeded trace with Poisson crashes.

``pause_s`` and ``reconstruction_s_per_turn`` may be plain numbers or :class:`~.measure.Quantity`
objects (from :func:`~.measure.measure_reconstruction`, :func:`~.measure.resolve_pause`); ``pause_s``
may also be a zero-argument callable that performs one capture and returns its pause (for instance
one built on the checkpoint package), which is then measured. Results record which inputs were given
and which measured.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from numbers import Integral

from kernel_lib.errors import CadenceParameterError
from kernel_lib.cadence.formulas import nonnegative, positive, random_seed, show, stride

#: Most crashes a Poisson trace may be expected to hold (turns x rate): beyond this the trace alone
#: would take hundreds of megabytes and every stride evaluated on it seconds.
MAX_POISSON_CRASHES = 10 ** 6

#: Longest run :func:`simulate_turn_by_turn` walks (it takes about 0.2 s per million turns), and the
#: longest run the ``simulate`` command accepts.
MAX_SIMULATED_TURNS = 10 ** 7

#: Longest run for which :func:`evaluate_strides` evaluates every stride 1..N by default.
MAX_ALL_STRIDES = 100_000


@dataclass(frozen=True)
class CrashTrace:
    """A run of ``turns`` turns and its crashes.

    Fields:
        turns: N, turns in the run (>= 1).
        crash_turns: completed turns at each crash, in the order they happened (non-decreasing;
            two crashes in the same turn share a value).
        source: how the trace was obtained ("given", "poisson(...)", "napkin-11.1", ...).

    Turns and crash turns may be any integer type (numpy's too; not ``bool``); they are stored as
    ``int``.

    Raises CadenceParameterError (at construction) for N < 1 or above
    :data:`~kernel_lib.cadence.formulas.MAX_COUNT`, a crash that is not a whole number or lies
    outside ``0..N-1``, or crashes out of order.
    """

    turns: int
    crash_turns: tuple[int, ...]
    source: str = "given"

    def __post_init__(self) -> None:
        n_ = stride("turns", self.turns)
        object.__setattr__(self, "turns", n_)
        crashes = []
        for c in self.crash_turns:
            if isinstance(c, bool) or not isinstance(c, Integral):
                raise CadenceParameterError(f"crash turns must be whole numbers of completed turns, got {show(c)}",
                                            name="crash_turns")
            c = int(c)
            if not 0 <= c < n_:
                raise CadenceParameterError(f"a crash after {c} completed turns is outside a run of {n_} turns "
                                            f"(allowed 0..{n_ - 1})", name="crash_turns")
            crashes.append(c)
        if crashes != sorted(crashes):
            raise CadenceParameterError(f"crash turns must be in the order they happened (non-decreasing), got "
                                        f"{crashes}", name="crash_turns")
        object.__setattr__(self, "crash_turns", tuple(crashes))

    @property
    def crashes(self) -> int:
        """N_crash, the number of crashes in the trace."""
        return len(self.crash_turns)

    @property
    def failure_rate_per_turn(self) -> float:
        """The trace's own crash rate, crashes / turns (lambda as eq. 5 uses it)."""
        return len(self.crash_turns) / self.turns

    def to_dict(self) -> dict:
        return {"turns": self.turns, "crash_turns": list(self.crash_turns), "crashes": self.crashes,
                "failure_rate_per_turn": self.failure_rate_per_turn, "source": self.source}


def given_trace(turns: int, crash_turns: Iterable[int], source: str = "given") -> CrashTrace:
    """A trace from data: ``crash_turns`` (completed turns at each crash) are sorted for you.

    Raises CadenceParameterError for a bad turn count or crash turn."""
    try:
        crashes = sorted(crash_turns)
    except TypeError:
        raise CadenceParameterError(f"crash turns must be whole numbers, got {crash_turns!r}",
                                    name="crash_turns") from None
    return CrashTrace(turns, tuple(crashes), source)


def poisson_trace(turns: int, failure_rate_per_turn: float, seed: int) -> CrashTrace:
    """Seeded Poisson crashes over a run of ``turns`` turns at ``failure_rate_per_turn`` crashes per
    turn of progress.

    A Poisson process of rate lambda on [0, N) has a Poisson(lambda N) number of points, each
    uniform on [0, N) independently of the others; a crash at position x strikes after ``floor(x)``
    completed turns, and ``floor`` of a uniform position is a uniform whole turn. So the draw is: the
    count K ~ Poisson(lambda N), then K turns uniform on 0..N-1, sorted. Both come from
    ``numpy.random.default_rng(seed)``: no loop, so the draw always ends, and the same seed always
    gives the same trace.

    Args:
        turns: N, 1 .. :data:`~kernel_lib.cadence.formulas.MAX_COUNT`.
        failure_rate_per_turn: lambda, 1e-12 .. 1e3 crashes per turn.
        seed: an integer >= 0 (``None`` and ``bool`` are refused: an unseeded trace cannot be repeated).

    Raises CadenceParameterError: a bad argument, or ``turns x failure_rate_per_turn`` above
    :data:`MAX_POISSON_CRASHES` expected crashes.
    """
    import numpy as np

    n_ = stride("turns", turns)
    rate = positive("failure_rate_per_turn", failure_rate_per_turn)
    s_ = random_seed("seed", seed)
    expected = n_ * rate
    if expected > MAX_POISSON_CRASHES:
        raise CadenceParameterError(
            f"a Poisson trace of {n_:,} turns at {rate:g} crashes/turn would hold about {expected:.3g} crashes; "
            f"at most {MAX_POISSON_CRASHES:,} are drawn (lower failure_rate_per_turn or turns)",
            name="failure_rate_per_turn")
    rng = np.random.default_rng(s_)
    count = int(rng.poisson(expected))
    # a Poisson count beyond twice a mean of at most 10^6 has probability far below 1e-100000
    count = min(count, 2 * MAX_POISSON_CRASHES)
    crashes = np.sort(rng.integers(0, n_, size=count, dtype=np.int64)).tolist()
    return CrashTrace(n_, tuple(crashes), f"poisson(rate={rate:g}/turn, seed={s_})")


def _value(name: str, q) -> tuple[float, str]:
    """A number, a Quantity, or a zero-argument measuring callable -> (seconds, source)."""
    if callable(q) and not hasattr(q, "value"):
        from kernel_lib.cadence.measure import resolve_pause
        q = resolve_pause(q)
    if hasattr(q, "value") and hasattr(q, "source"):
        return nonnegative(name, q.value), q.source
    return nonnegative(name, q), "given"


@dataclass(frozen=True)
class StrideResult:
    """Eq. 6 for one stride on one trace. Times in seconds.

    Fields:
        stride_turns: k. checkpoints: N_k = turns // k. lost_suffix_turns: c_i mod k per crash.
        capture_s: N_k * C. restore_s: N_crash * T_restore. reconstruction_s: R * sum(lost suffix).
        recovery_s: restore_s + reconstruction_s (all time spent recovering after crashes).
        overhead_s: capture_s + recovery_s (eq. 6).
    """

    stride_turns: int
    checkpoints: int
    lost_suffix_turns: tuple[int, ...]
    capture_s: float
    restore_s: float
    reconstruction_s: float
    recovery_s: float
    overhead_s: float

    def to_dict(self) -> dict:
        d_ = asdict(self)
        d_["lost_suffix_turns"] = list(self.lost_suffix_turns)
        return d_


def lost_suffix_turns(crash_turn: int, stride_turns: int) -> int:
    """Completed turns past the latest checkpoint when a crash strikes after ``crash_turn`` turns:
    ``crash_turn mod stride_turns``. Raises CadenceParameterError for a stride < 1."""
    return crash_turn % stride("stride_turns", stride_turns)


def trace_overhead(trace: CrashTrace, stride_turns: int, *, pause_s, restore_s_per_crash,
                   reconstruction_s_per_turn) -> StrideResult:
    """Eq. 6 on ``trace`` at stride ``stride_turns``: ``N_k C + N_crash T_restore + R sum(c_i mod k)``.

    Args:
        trace: the crash trace.
        stride_turns: k >= 1.
        pause_s: C, capture pause per checkpoint, seconds (number or Quantity, >= 0).
        restore_s_per_crash: T_restore, fixed restore latency per crash, seconds (>= 0).
        reconstruction_s_per_turn: R, seconds to reconstruct one logged turn (number or Quantity, >= 0).

    Raises CadenceParameterError for a bad argument.
    """
    k_ = stride("stride_turns", stride_turns)
    c_, _ = _value("pause_s", pause_s)
    t_, _ = _value("restore_s_per_crash", restore_s_per_crash)
    r_, _ = _value("reconstruction_s_per_turn", reconstruction_s_per_turn)
    lost = tuple(c % k_ for c in trace.crash_turns)
    checkpoints = trace.turns // k_
    capture, restore, recon = checkpoints * c_, trace.crashes * t_, r_ * sum(lost)
    return StrideResult(k_, checkpoints, lost, capture, restore, recon, restore + recon, capture + restore + recon)


def simulate_turn_by_turn(trace: CrashTrace, stride_turns: int, *, pause_s, restore_s_per_crash,
                          reconstruction_s_per_turn) -> float:
    """Eq. 6's total by brute force: run the trace turn by turn, publishing a checkpoint after every
    ``stride_turns``-th completed turn (cost C) and, at each crash, paying T_restore plus R for every
    completed turn since the latest checkpoint. Returns seconds. Used to check :func:`trace_overhead`.
    It walks every turn (about 0.2 s per million), so traces longer than :data:`MAX_SIMULATED_TURNS`
    are refused.

    Raises CadenceParameterError for a bad argument or a trace longer than MAX_SIMULATED_TURNS.
    """
    if trace.turns > MAX_SIMULATED_TURNS:
        raise CadenceParameterError(f"the turn-by-turn simulation walks every turn; a trace of {trace.turns:,} turns "
                                    f"is longer than its limit of {MAX_SIMULATED_TURNS:,} (use trace_overhead)",
                                    name="turns")
    k_ = stride("stride_turns", stride_turns)
    c_, _ = _value("pause_s", pause_s)
    t_, _ = _value("restore_s_per_crash", restore_s_per_crash)
    r_, _ = _value("reconstruction_s_per_turn", reconstruction_s_per_turn)
    crashes_at = Counter(trace.crash_turns)
    total, completed, last_checkpoint = 0.0, 0, 0
    while completed < trace.turns:
        for _ in range(crashes_at.get(completed, 0)):   # crashes while turn completed+1 runs
            total += t_
            for _turn in range(last_checkpoint, completed):   # reconstruct each logged turn of the suffix
                total += r_
        completed += 1   # the turn finishes (after recovery, the worker resumes at this turn)
        if completed % k_ == 0:
            total += c_
            last_checkpoint = completed
    return total


@dataclass(frozen=True)
class TraceEvaluation:
    """Eq. 6 across strides on one trace, with the givens and where each came from.

    Fields: ``trace``; ``pause_s``, ``restore_s_per_crash``, ``reconstruction_s_per_turn`` and their
    ``sources`` ("given" / "measured"); ``results`` per stride; ``best`` (lowest overhead among
    ``results``; ties go to the longer stride, which writes fewer checkpoints).
    """

    trace: CrashTrace
    pause_s: float
    restore_s_per_crash: float
    reconstruction_s_per_turn: float
    sources: dict
    results: tuple[StrideResult, ...]
    best: StrideResult
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict:
        return {"trace": self.trace.to_dict(), "pause_s": self.pause_s, "restore_s_per_crash": self.restore_s_per_crash,
                "reconstruction_s_per_turn": self.reconstruction_s_per_turn, "sources": dict(self.sources),
                "results": [r.to_dict() for r in self.results], "best_stride_turns": self.best.stride_turns,
                "best_overhead_s": self.best.overhead_s, "notes": list(self.notes)}


def evaluate_strides(trace: CrashTrace, strides: Sequence[int] | None = None, *, pause_s, restore_s_per_crash,
                     reconstruction_s_per_turn) -> TraceEvaluation:
    """Eq. 6 at each stride in ``strides`` (default: every stride 1..N) on ``trace``.

    Raises CadenceParameterError for a bad argument, an empty stride list, or no ``strides`` for a
    trace longer than :data:`MAX_ALL_STRIDES` turns (name the strides to evaluate instead).
    """
    if strides is None and trace.turns > MAX_ALL_STRIDES:
        raise CadenceParameterError(f"evaluating every stride 1..{trace.turns:,} is more than the {MAX_ALL_STRIDES:,} "
                                    f"this does by default; pass the strides to evaluate", name="strides")
    if isinstance(strides, (str, bytes)):
        raise CadenceParameterError(f"strides must be a sequence of whole numbers, got {show(strides)}",
                                    name="strides")
    try:
        ks = list(range(1, trace.turns + 1)) if strides is None else [stride("stride_turns", s) for s in strides]
    except TypeError:
        raise CadenceParameterError(f"strides must be a sequence of whole numbers, got {show(strides)}",
                                    name="strides") from None
    if not ks:
        raise CadenceParameterError("no strides to evaluate", name="strides")
    if callable(pause_s) and not hasattr(pause_s, "value"):   # measure once, not once per stride
        from kernel_lib.cadence.measure import resolve_pause
        pause_s = resolve_pause(pause_s)
    c_, cs = _value("pause_s", pause_s)
    t_, ts = _value("restore_s_per_crash", restore_s_per_crash)
    r_, rs = _value("reconstruction_s_per_turn", reconstruction_s_per_turn)
    results = tuple(trace_overhead(trace, k_, pause_s=c_, restore_s_per_crash=t_, reconstruction_s_per_turn=r_)
                    for k_ in ks)
    best = min(results, key=lambda r: (r.overhead_s, -r.stride_turns))
    notes = [f"{name} {src}" for name, src in (("pause_s", cs), ("reconstruction_s_per_turn", rs)) if src != "given"]
    for q in (pause_s, reconstruction_s_per_turn):
        notes.extend(getattr(q, "notes", ()) or ())
    return TraceEvaluation(trace, c_, t_, r_, {"pause_s": cs, "restore_s_per_crash": ts,
                                               "reconstruction_s_per_turn": rs},
                           results, best, tuple(notes))
