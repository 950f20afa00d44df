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

import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

from ..errors import CadenceParameterError
from .formulas import nonnegative, positive, stride


@dataclass(frozen=True)
class CrashTrace:
    """A run of ``turns`` turns and its crashes.

    Fields:
        turns: N, turns in the run (>= 1).
        crash_turns: completed turns at each crash, in the order they happened (non-decreasing;
            two crashes in the same turn share a value).
        source: how the trace was obtained ("given", "poisson(...)", "napkin-11.1", ...).

    Raises CadenceParameterError (at construction) for N < 1, a crash outside ``0..N-1``, or
    crashes out of order.
    """

    turns: int
    crash_turns: tuple[int, ...]
    source: str = "given"

    def __post_init__(self) -> None:
        n_ = stride("turns", self.turns)
        object.__setattr__(self, "turns", n_)
        crashes = []
        for c in self.crash_turns:
            if isinstance(c, bool) or not isinstance(c, int):
                raise CadenceParameterError(f"crash turns must be whole numbers of completed turns, got {c!r}",
                                            name="crash_turns")
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
    turn of progress: exponential gaps (mean 1/rate) in turn units from ``random.Random(seed)``; a crash
    at position x < N strikes after ``floor(x)`` completed turns.

    Raises CadenceParameterError: turns < 1, rate not > 0.
    """
    n_ = stride("turns", turns)
    rate = positive("failure_rate_per_turn", failure_rate_per_turn)
    rng = random.Random(seed)
    crashes, x = [], rng.expovariate(rate)
    while x < n_:
        crashes.append(int(x))
        x += rng.expovariate(rate)
    return CrashTrace(n_, tuple(crashes), f"poisson(rate={rate:g}/turn, seed={seed})")


def _value(name: str, q) -> tuple[float, str]:
    """A number, a Quantity, or a zero-argument measuring callable -> (seconds, source)."""
    if callable(q) and not hasattr(q, "value"):
        from .measure import resolve_pause
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

    Raises CadenceParameterError for a bad argument.
    """
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

    Raises CadenceParameterError for a bad argument or an empty stride list.
    """
    ks = list(range(1, trace.turns + 1)) if strides is None else [stride("stride_turns", s) for s in strides]
    if not ks:
        raise CadenceParameterError("no strides to evaluate", name="strides")
    if callable(pause_s) and not hasattr(pause_s, "value"):   # measure once, not once per stride
        from .measure import resolve_pause
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
