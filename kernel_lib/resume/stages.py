"""The stages of one resume, timed, and how they add up (Durable Execution §11.5, eq. 7).

Eq. 7 prices a resume as the sum of six terms. This module keeps them under these names (all in
seconds):

====================  ==========================================================================
stage                 what is timed here
====================  ==========================================================================
ownership             acquiring the trajectory (a lease with a new owner_epoch) and installing
                      that epoch as the fence of the log (and, in the live worker, the executor)
checkpoint_suffix_    finding the newest checkpoint, reading and verifying its objects, and
read                  reading the log suffix after it
fold                  folding that suffix into the checkpoint's record (no model, no tool)
workspace_restore     rebuilding the workspace files and checking them against their digests
reconciliation        settling the in-doubt operations (a caller-supplied query of the executor,
                      or, without one, only listing them)
prefill               rebuilding serving state for the next model call: *computed* from a
                      :class:`PrefillModel`, never measured here
====================  ==========================================================================

Serial sum and critical path
----------------------------
The stages depend on each other as a small DAG (:data:`DEPENDS_ON`): reading the checkpoint and
suffix needs no ownership, so those two can run side by side; the fold and the workspace need the
read; reconciliation needs both the folded record and ownership (it may append evidence); the
prefill comes last. :attr:`ResumeTimeline.serial_sum_s` is eq. 7 as written (every duration
added). :attr:`ResumeTimeline.critical_path_s` is the longest chain through the DAG weighted by
the same durations: the elapsed time the resume *would* take if every pair of independent stages
overlapped perfectly. It is computed from the durations, not measured: :func:`timed_resume` and
the live replacement worker run the stages one after another (each timed with
``time.perf_counter``), so what was measured is the serial schedule.

Before any stage, the availability proof (:func:`kernel_lib.ownership.leases.check_available`) shows that
the log prefix is complete and every object recovery needs is present. Its duration is kept as
:attr:`ResumeTimeline.availability_s` and is *not* one of eq. 7's terms: in this implementation it
reads and folds the whole prefix (and, with a blob store, runs a verifying restore), which
duplicates the work of the read and fold stages, so adding it in would count that work twice.

Prefill
-------
Inspecting an audit record, or keeping a trajectory paused, calls no model and so needs no prefill
(:meth:`PrefillModel.none`). Otherwise the model is ``(context_tokens - cached_prefix_tokens) /
prefill_tokens_per_s``: only the part of the context the serving engine no longer holds in its
prefix cache has to be prefilled again.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from numbers import Integral, Real
from pathlib import Path
from typing import Any

from kernel_lib.checkpoint.restore import RestoreResult, restore
from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate
from kernel_lib.errors import ConfigError, KernelError, ReconstructionUnavailableError
from kernel_lib.log import FailureDomain, LogStore, TrajectoryLog
from kernel_lib.ownership.leases import (
    Availability,
    Lease,
    LeaseCheck,
    OwnershipCoordinator,
    check_available,
    take_ownership,
)
from kernel_lib.core.record import TERMINAL_STATES, TrajectoryRecord, fold, initial_record
from kernel_lib.resume.truncation import refuse_truncated
from kernel_lib.limits import RESUME_SECONDS_MAX, RESUME_TOKENS_MAX

__all__ = [
    "DEPENDS_ON",
    "MAX_SECONDS",
    "MAX_TOKENS",
    "DEFAULT_PREFILL",
    "MEASURED_LABEL",
    "NOT_RUN_LABEL",
    "PREFILL_LABEL",
    "PrefillModel",
    "ResumeTimeline",
    "Stage",
    "StageTimer",
    "STAGE_NAMES",
    "TimedResume",
    "timed_resume",
]

#: The six terms of eq. 7, in the order the chapter adds them.
STAGE_NAMES: tuple[str, ...] = ("ownership", "checkpoint_suffix_read", "fold", "workspace_restore",
                                "reconciliation", "prefill")

#: Which stages must finish before each may start (§11.5, eq. 7 and the paragraph after it).
DEPENDS_ON: dict[str, tuple[str, ...]] = {
    "ownership": (),
    "checkpoint_suffix_read": (),
    "fold": ("checkpoint_suffix_read",),
    "workspace_restore": ("checkpoint_suffix_read",),
    "reconciliation": ("fold", "ownership"),
    "prefill": ("reconciliation",),
}

#: How a stage's figure was obtained, as the widget and the reports label it.
MEASURED_LABEL = "measured on this machine"
PREFILL_LABEL = "computed from the prefill model (given)"
GIVEN_LABEL = "given (not measured)"
NOT_RUN_LABEL = "not run"

#: Largest token count a :class:`PrefillModel` accepts (far above any context window; it keeps
#: the arithmetic in exact float range): :data:`kernel_lib.limits.RESUME_TOKENS_MAX`, under the
#: name this package exports.
MAX_TOKENS = RESUME_TOKENS_MAX

#: Largest time in seconds a stage may start or end at, and the longest prefill a
#: :class:`PrefillModel` may compute (about 31.7 million years: far above any resume, and low
#: enough that sums of stages and their values in milliseconds stay finite):
#: :data:`kernel_lib.limits.RESUME_SECONDS_MAX`, under the name this package exports.
MAX_SECONDS = RESUME_SECONDS_MAX

EQUATION = "§11.5, eq. 7"


# ------------------------------------------------------------------------------------------------
# the prefill model
# ------------------------------------------------------------------------------------------------


def _short(value: Any, limit: int = 60) -> str:
    """``value`` for a message: its repr, cut to ``limit`` characters (a huge int by its size)."""
    if isinstance(value, int) and abs(value) >= 10 ** 30:
        return f"an int of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def _finite(value: Any) -> float | None:
    """``value`` as a finite float, or None: not a real number, a bool, NaN, infinite, or an int
    too large for a float."""
    if isinstance(value, bool) or not isinstance(value, Real):
        return None
    try:
        v = float(value)
    except (OverflowError, ValueError, TypeError):
        return None
    return v if math.isfinite(v) else None


def _whole(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ConfigError(f"{name} must be a whole number of tokens, got {value!r}")
    v = int(value)
    if not 0 <= v <= MAX_TOKENS:
        raise ConfigError(f"{name} must be between 0 and {MAX_TOKENS:,} tokens, got {v:,}")
    return v


@dataclass(frozen=True)
class PrefillModel:
    """What rebuilding serving state for the next model call costs (§11.5.4, the ``T_prefill`` term
    of eq. 7): ``(context_tokens - cached_prefix_tokens) / prefill_tokens_per_s`` seconds.

    Fields:
        context_tokens: tokens of the context the next call sends (int ≥ 0).
        cached_prefix_tokens: how many leading tokens of it the serving engine still holds in its
            prefix (KV) cache and need not recompute (int, 0..context_tokens).
        prefill_tokens_per_s: prefill throughput for this request (finite float > 0, tokens/s).
        no_prefill_reason: set only by :meth:`none`: why no prefill is needed at all (then both
            token counts are 0 and the rate is None).

    All three numbers are givens (assumptions about the serving fleet), never measurements.

    Raises:
        ConfigError: a count that is not a whole number in 0..:data:`MAX_TOKENS`, a cached prefix
            longer than the context, a rate that is not a finite number > 0 (an int too large for
            a float included), or a prefill time longer than :data:`MAX_SECONDS`.
    """

    context_tokens: int
    cached_prefix_tokens: int
    prefill_tokens_per_s: float | None
    no_prefill_reason: str | None = None

    def __post_init__(self) -> None:
        if self.no_prefill_reason is not None:
            if not isinstance(self.no_prefill_reason, str) or not self.no_prefill_reason:
                raise ConfigError("no_prefill_reason must be a non-empty string")
            if (self.context_tokens, self.cached_prefix_tokens, self.prefill_tokens_per_s) != (0, 0, None):
                raise ConfigError("a PrefillModel without prefill has no tokens and no rate: use PrefillModel.none()")
            return
        ctx = _whole("context_tokens", self.context_tokens)
        cached = _whole("cached_prefix_tokens", self.cached_prefix_tokens)
        if cached > ctx:
            raise ConfigError(f"cached_prefix_tokens ({cached:,}) cannot exceed context_tokens ({ctx:,}): the cache "
                              "can only hold a prefix of the context")
        rate = _finite(self.prefill_tokens_per_s)
        if rate is None or rate <= 0:
            raise ConfigError(f"prefill_tokens_per_s must be a finite number of tokens per second > 0, got "
                              f"{_short(self.prefill_tokens_per_s)}")
        seconds = (ctx - cached) / rate
        if not seconds <= MAX_SECONDS:
            raise ConfigError(f"prefill_tokens_per_s = {rate!r} is too small: {ctx - cached:,} tokens would take "
                              f"longer than {MAX_SECONDS:g} s (or than any finite number of seconds)")
        object.__setattr__(self, "context_tokens", ctx)
        object.__setattr__(self, "cached_prefix_tokens", cached)
        object.__setattr__(self, "prefill_tokens_per_s", rate)

    @classmethod
    def none(cls, reason: str = "no model call follows the resume") -> PrefillModel:
        """No prefill at all, with the reason (e.g. the trajectory is only inspected, or it stays
        paused): ``prefill_tokens`` and ``prefill_s`` are 0."""
        return cls(0, 0, None, no_prefill_reason=reason)

    @property
    def needed(self) -> bool:
        """False for :meth:`none`."""
        return self.no_prefill_reason is None

    @property
    def prefill_tokens(self) -> int:
        """Tokens to prefill again: the context minus the cached prefix."""
        return self.context_tokens - self.cached_prefix_tokens

    @property
    def prefill_s(self) -> float:
        """Seconds of prefill: ``prefill_tokens / prefill_tokens_per_s`` (0.0 for :meth:`none`)."""
        return 0.0 if not self.needed else self.prefill_tokens / self.prefill_tokens_per_s

    def describe(self) -> str:
        """One line: the formula with its numbers, or the reason no prefill is needed."""
        if not self.needed:
            return f"no prefill: {self.no_prefill_reason}"
        return (f"({self.context_tokens:,} context - {self.cached_prefix_tokens:,} cached) tokens / "
                f"{self.prefill_tokens_per_s:g} tokens/s = {self.prefill_s:.6g} s")

    def to_dict(self) -> dict[str, Any]:
        return {"context_tokens": self.context_tokens, "cached_prefix_tokens": self.cached_prefix_tokens,
                "prefill_tokens_per_s": self.prefill_tokens_per_s, "no_prefill_reason": self.no_prefill_reason,
                "prefill_tokens": self.prefill_tokens, "prefill_s": self.prefill_s}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PrefillModel:
        """Inverse of :meth:`to_dict`. The derived fields (``prefill_tokens``, ``prefill_s``) are
        recomputed; when present they must agree with the recomputed ones.

        Raises:
            ConfigError: not a mapping, a missing field, a ``no_prefill_reason`` next to tokens or
                a rate (a model either needs no prefill or has givens, not both), derived fields
                that disagree, or any value :class:`PrefillModel` refuses.
        """
        if not isinstance(d, Mapping):
            raise ConfigError(f"a prefill model is a mapping, got {type(d).__name__}")
        if d.get("no_prefill_reason") is not None:
            givens = {k: d.get(k) for k in ("context_tokens", "cached_prefix_tokens", "prefill_tokens_per_s")}
            if any(v is not None and (isinstance(v, bool) or v != 0) for v in givens.values()):
                raise ConfigError(f"a prefill model with no_prefill_reason={d['no_prefill_reason']!r} has no tokens "
                                  f"and no rate, got {givens}")
            model = cls.none(d["no_prefill_reason"])
        else:
            try:
                model = cls(d["context_tokens"], d["cached_prefix_tokens"], d["prefill_tokens_per_s"])
            except KeyError as exc:
                raise ConfigError(f"a prefill model needs {exc.args[0]!r}") from None
        if "prefill_tokens" in d and (isinstance(d["prefill_tokens"], bool)
                                      or d["prefill_tokens"] != model.prefill_tokens):
            raise ConfigError(f"prefill_tokens = {_short(d['prefill_tokens'])} disagrees with the model's "
                              f"{model.prefill_tokens:,} (context - cached)")
        if "prefill_s" in d:
            given = _finite(d["prefill_s"])
            if given is None or not math.isclose(given, model.prefill_s, rel_tol=1e-9, abs_tol=1e-12):
                raise ConfigError(f"prefill_s = {_short(d['prefill_s'])} disagrees with the model's "
                                  f"{model.prefill_s!r} s ({model.describe()})")
        return model


#: Illustrative prefill givens (8,192 context tokens, 6,144 of them cached, 20,000 tokens/s): an
#: assumption about the serving fleet to start from, not a measurement. The live replacement worker
#: and the timeline widget start from these.
DEFAULT_PREFILL = PrefillModel(8192, 6144, 20000.0)


# ------------------------------------------------------------------------------------------------
# stages and the timeline
# ------------------------------------------------------------------------------------------------


def _seconds(name: str, value: Any) -> float:
    v = _finite(value)
    if v is None:
        raise ConfigError(f"{name} must be a finite number of seconds, got {_short(value)}")
    return v


def _stage_time(name: str, value: Any) -> float:
    v = _seconds(name, value)
    if not 0 <= v <= MAX_SECONDS:
        raise ConfigError(f"{name} must be between 0 and {MAX_SECONDS:g} seconds from the start of the resume, "
                          f"got {v!r}")
    return v


def _names(what: str, value: Any) -> tuple[str, ...]:
    """A list or tuple of stage names as a tuple; a string is refused, not split into characters."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ConfigError(f"{what} must be a list of stage names, got {_short(value)}")
    if not all(isinstance(d, str) for d in value):
        raise ConfigError(f"{what} must name stages (strings), got {_short(value)}")
    return tuple(value)


@dataclass(frozen=True)
class Stage:
    """One stage of a resume.

    Fields:
        name: one of :data:`STAGE_NAMES`.
        start_s, end_s: when it ran, seconds from the start of the resume (the availability proof
            included), on the clock that timed it; ``0 <= start_s <= end_s <=`` :data:`MAX_SECONDS`.
        depends_on: names of the stages that must finish before it can start (a list or tuple of
            strings; a bare string is refused).
        measured: True when the duration was timed on this machine; False when it was computed
            (the prefill) or given, or the stage did not run (then the duration is 0 and
            ``detail`` says why). Must be a bool.
        detail: what the stage did (or why it did nothing).

    Raises:
        ConfigError: a time that is not a finite number in 0..MAX_SECONDS, an end before the
            start, a non-string name or detail, ``depends_on`` that is not a list of names, or
            ``measured`` that is not a bool.
    """

    name: str
    start_s: float
    end_s: float
    depends_on: tuple[str, ...] = ()
    measured: bool = True
    detail: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"a stage needs a name, got {self.name!r}")
        start = _stage_time(f"{self.name}.start_s", self.start_s)
        end = _stage_time(f"{self.name}.end_s", self.end_s)
        if end < start:
            raise ConfigError(f"stage {self.name} ends ({end!r} s) before it starts ({start!r} s)")
        deps = _names(f"stage {self.name}: depends_on", self.depends_on)
        if not isinstance(self.measured, bool):
            raise ConfigError(f"stage {self.name}: measured must be True or False, got {_short(self.measured)}")
        if not isinstance(self.detail, str):
            raise ConfigError(f"stage {self.name}: detail must be a string, got {type(self.detail).__name__}")
        object.__setattr__(self, "start_s", start)
        object.__setattr__(self, "end_s", end)
        object.__setattr__(self, "depends_on", deps)

    @property
    def duration_s(self) -> float:
        """``end_s - start_s`` (seconds)."""
        return self.end_s - self.start_s

    @property
    def source(self) -> str:
        """:data:`MEASURED_LABEL`; :data:`PREFILL_LABEL` (an unmeasured prefill);
        :data:`NOT_RUN_LABEL` (another unmeasured stage of 0 s); else :data:`GIVEN_LABEL`."""
        if self.measured:
            return MEASURED_LABEL
        if self.name == "prefill":
            return PREFILL_LABEL
        return NOT_RUN_LABEL if self.duration_s == 0 else GIVEN_LABEL

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "start_s": self.start_s, "end_s": self.end_s, "duration_s": self.duration_s,
                "depends_on": list(self.depends_on), "measured": self.measured, "source": self.source,
                "detail": self.detail}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Stage:
        """Inverse of :meth:`to_dict` (``duration_s`` and ``source`` are recomputed; a missing
        ``depends_on``, ``measured`` or ``detail`` means none, True and ""). Values are taken as
        they are, not coerced: ``"false"`` is not a bool, ``None`` is not a detail. Raises
        ConfigError."""
        if not isinstance(d, Mapping):
            raise ConfigError(f"a stage is a mapping, got {type(d).__name__}")
        try:
            return cls(d["name"], d["start_s"], d["end_s"], d.get("depends_on", ()), d.get("measured", True),
                       d.get("detail", ""))
        except KeyError as exc:
            raise ConfigError(f"a stage needs {exc.args[0]!r}") from None


@dataclass(frozen=True)
class ResumeTimeline:
    """The six stages of one resume with their durations (§11.5, eq. 7).

    Fields:
        stages: one :class:`Stage` per name of :data:`STAGE_NAMES` (stored in that order).
        prefill: the :class:`PrefillModel` the prefill stage was computed from (None: the stage
            was given directly, e.g. a hand-built timeline).
        availability_s: seconds the availability proof took before the stages (None: not timed).
            Not an eq. 7 term (see the module docstring); reported beside the totals.
        clock: what timed the measured stages (for the report).

    Totals (seconds): :attr:`serial_sum_s` is eq. 7's sum; :attr:`critical_path_s` the longest
    dependency chain weighted by the same durations, i.e. what those durations would give if
    independent stages had run concurrently. The critical path is computed, not measured: the
    stages were run and timed one after another.

    Raises:
        ConfigError: ``stages`` not a list or tuple of :class:`Stage`; a missing, unknown or
            repeated stage name, a dependency on an unknown stage, or a dependency cycle; a
            ``clock`` that is not a non-empty string; with ``prefill``, a prefill stage whose
            duration is not the model's ``prefill_s`` or that claims to be measured.
    """

    stages: tuple[Stage, ...]
    prefill: PrefillModel | None = None
    availability_s: float | None = None
    clock: str = "time.perf_counter"

    def __post_init__(self) -> None:
        if isinstance(self.stages, (str, bytes)) or not isinstance(self.stages, Sequence):
            raise ConfigError(f"a timeline's stages are a list or tuple of Stage objects, got "
                              f"{type(self.stages).__name__}")
        stages = tuple(self.stages)
        if not all(isinstance(s, Stage) for s in stages):
            raise ConfigError("a timeline holds Stage objects")
        names = [s.name for s in stages]
        if sorted(names) != sorted(STAGE_NAMES):
            missing = sorted(set(STAGE_NAMES) - set(names))
            extra = sorted({n for n in names if n not in STAGE_NAMES or names.count(n) > 1})
            raise ConfigError(f"a resume timeline has exactly the stages {list(STAGE_NAMES)}; missing {missing}, "
                              f"unknown or repeated {extra}")
        by = {s.name: s for s in stages}
        for s in stages:
            unknown = [d for d in s.depends_on if d not in by]
            if unknown or s.name in s.depends_on:
                raise ConfigError(f"stage {s.name} depends on {unknown or [s.name]}, which is not another stage")
        object.__setattr__(self, "stages", tuple(by[n] for n in STAGE_NAMES))
        self._topological()                  # raises on a cycle
        if self.prefill is not None and not isinstance(self.prefill, PrefillModel):
            raise ConfigError(f"prefill must be a PrefillModel or None, got {type(self.prefill).__name__}")
        if self.prefill is not None:
            st, want = by["prefill"], self.prefill.prefill_s
            tol = 4 * math.ulp(max(abs(st.end_s), 1.0))     # end_s - start_s rounds start + prefill_s
            if not math.isclose(st.duration_s, want, rel_tol=1e-9, abs_tol=tol):
                raise ConfigError(f"the prefill stage lasts {st.duration_s!r} s but its prefill model gives "
                                  f"{want!r} s ({self.prefill.describe()}): the two disagree")
            if st.measured:
                raise ConfigError("the prefill stage is computed from its prefill model, so it cannot be measured")
        if not isinstance(self.clock, str) or not self.clock:
            raise ConfigError(f"clock must be a non-empty string naming what timed the stages, got "
                              f"{_short(self.clock)}")
        if self.availability_s is not None:
            v = _seconds("availability_s", self.availability_s)
            if v < 0:
                raise ConfigError(f"availability_s must be >= 0, got {v!r}")
            object.__setattr__(self, "availability_s", v)

    # --- construction ----------------------------------------------------------------------------
    @classmethod
    def from_durations(cls, durations_s: Mapping[str, float], *, measured: bool | Mapping[str, bool] = False,
                       prefill: PrefillModel | None = None,
                       depends_on: Mapping[str, Sequence[str]] | None = None,
                       details: Mapping[str, str] | None = None) -> ResumeTimeline:
        """A timeline laid out serially from one duration per stage (seconds ≥ 0), e.g. to study
        eq. 7 with hand-picked figures. ``measured`` (one flag, or one per stage) says whether a
        figure was timed on this machine; by default they count as given. With ``prefill``, the
        prefill stage's duration is the model's ``prefill_s`` (and ``durations_s`` may omit it).
        ``depends_on`` overrides the dependencies of :data:`DEPENDS_ON` per stage.

        Raises: ConfigError (a missing or negative duration, an unknown name, a bad dependency,
        ``prefill`` not a PrefillModel, a ``measured`` flag that is not a bool, an argument of
        the wrong type)."""
        if not isinstance(durations_s, Mapping):
            raise ConfigError(f"durations_s must map stage names to seconds, got {type(durations_s).__name__}")
        if prefill is not None and not isinstance(prefill, PrefillModel):
            raise ConfigError(f"prefill must be a PrefillModel or None, got {type(prefill).__name__}")
        for arg, value in (("measured", measured), ("depends_on", depends_on), ("details", details)):
            if value is not None and not isinstance(value, Mapping) and not (arg == "measured"
                                                                           and isinstance(value, bool)):
                raise ConfigError(f"{arg} must be a mapping by stage name{' or one bool' if arg == 'measured' else ''}"
                                  f", got {type(value).__name__}")
        unknown = sorted(map(repr, {*durations_s, *(depends_on or {}), *(details or {}),
                                    *(measured if isinstance(measured, Mapping) else {})} - set(STAGE_NAMES)))
        if unknown:
            raise ConfigError(f"unknown stage(s) {', '.join(unknown)}: the stages are {list(STAGE_NAMES)}")
        deps = {**DEPENDS_ON, **{k: _names(f"depends_on[{k!r}]", v) for k, v in (depends_on or {}).items()}}
        stages, t = [], 0.0
        for name in STAGE_NAMES:
            if name == "prefill" and prefill is not None:
                d, m = prefill.prefill_s, False
            else:
                if name not in durations_s:
                    raise ConfigError(f"no duration given for stage {name!r}")
                d = _seconds(name, durations_s[name])
                m = measured if isinstance(measured, bool) else measured.get(name, True)
            if d < 0:
                raise ConfigError(f"stage {name} has a negative duration ({d!r} s)")
            detail = (details or {}).get(name, prefill.describe() if name == "prefill" and prefill else "")
            stages.append(Stage(name, t, t + d, deps[name], m, detail))
            t += d
        return cls(tuple(stages), prefill=prefill)

    def with_prefill(self, prefill: PrefillModel) -> ResumeTimeline:
        """The same timeline with the prefill stage recomputed from ``prefill`` (it starts when
        the last of its dependencies ended). Raises ConfigError if ``prefill`` is not a PrefillModel."""
        if not isinstance(prefill, PrefillModel):
            raise ConfigError(f"prefill must be a PrefillModel, got {type(prefill).__name__}")
        old = self.stage("prefill")
        start = max([self.stage(d).end_s for d in old.depends_on], default=old.start_s)
        new = Stage("prefill", start, start + prefill.prefill_s, old.depends_on, False, prefill.describe())
        return replace(self, stages=tuple(new if s.name == "prefill" else s for s in self.stages), prefill=prefill)

    # --- views -------------------------------------------------------------------------------------
    def stage(self, name: str) -> Stage:
        """The stage called ``name``. Raises ConfigError for an unknown name."""
        for s in self.stages:
            if s.name == name:
                return s
        raise ConfigError(f"no stage {name!r}: the stages are {list(STAGE_NAMES)}")

    @property
    def durations_s(self) -> dict[str, float]:
        """Stage name → duration (seconds), in :data:`STAGE_NAMES` order."""
        return {s.name: s.duration_s for s in self.stages}

    @property
    def serial_sum_s(self) -> float:
        """Eq. 7: the sum of the six durations (seconds)."""
        return math.fsum(s.duration_s for s in self.stages)

    def _topological(self) -> list[str]:
        by = {s.name: s for s in self.stages}
        order: list[str] = []
        state: dict[str, int] = {}

        def visit(n: str, path: tuple[str, ...]) -> None:
            if state.get(n) == 2:
                return
            if state.get(n) == 1:
                raise ConfigError(f"the stage dependencies form a cycle: {' -> '.join(path + (n,))}")
            state[n] = 1
            for d in by[n].depends_on:
                visit(d, path + (n,))
            state[n] = 2
            order.append(n)

        for n in STAGE_NAMES:
            visit(n, ())
        return order

    def overlapped_schedule(self) -> dict[str, tuple[float, float]]:
        """Stage name → (earliest start, earliest end) in seconds from 0 when each stage starts as
        soon as all its dependencies have ended, with the measured durations."""
        by = {s.name: s for s in self.stages}
        out: dict[str, tuple[float, float]] = {}
        for n in self._topological():
            start = max((out[d][1] for d in by[n].depends_on), default=0.0)
            out[n] = (start, start + by[n].duration_s)
        return {n: out[n] for n in STAGE_NAMES}

    def serial_schedule(self) -> dict[str, tuple[float, float]]:
        """Stage name → (start, end) in seconds from 0 with the stages laid end to end in
        :data:`STAGE_NAMES` order (the schedule eq. 7's sum describes)."""
        out, t = {}, 0.0
        for s in self.stages:
            out[s.name] = (t, t + s.duration_s)
            t += s.duration_s
        return out

    @property
    def critical_path(self) -> list[str]:
        """The stages of the longest dependency chain, first to last. Ties: the chain ends at the
        stage listed last in :data:`STAGE_NAMES` (so a prefill of 0 s still closes it), and
        goes back through the dependency listed first."""
        sched = self.overlapped_schedule()
        by = {s.name: s for s in self.stages}
        last = max(STAGE_NAMES, key=lambda n: (sched[n][1], STAGE_NAMES.index(n)))
        path = [last]
        while by[path[-1]].depends_on:
            deps = by[path[-1]].depends_on
            path.append(max(deps, key=lambda d: (sched[d][1], -deps.index(d))))
        return path[::-1]

    @property
    def critical_path_s(self) -> float:
        """Length of the critical path in seconds: the elapsed resume time the durations give when
        independent stages overlap (computed, not measured)."""
        return max(end for _, end in self.overlapped_schedule().values())

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-ready): stages, both totals, the critical path, the prefill model and
        the availability proof's time, with the units and the equation."""
        return {"equation": EQUATION, "units": "seconds", "stages": [s.to_dict() for s in self.stages],
                "serial_sum_s": self.serial_sum_s, "critical_path_s": self.critical_path_s,
                "critical_path": self.critical_path,
                "prefill": self.prefill.to_dict() if self.prefill is not None else None,
                "availability_s": self.availability_s, "clock": self.clock,
                "note": "stages ran one after another; the critical path is computed from their durations as if "
                        "independent stages had overlapped. availability_s (the completeness proof before the "
                        "stages) is not an eq. 7 term"}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ResumeTimeline:
        """Inverse of :meth:`to_dict` (totals are recomputed from the stages). Raises ConfigError."""
        if not isinstance(d, Mapping) or not isinstance(d.get("stages"), (list, tuple)):
            raise ConfigError("a resume timeline is a mapping with a list of 'stages'")
        prefill = d.get("prefill")
        return cls(tuple(Stage.from_dict(s) for s in d["stages"]),
                   prefill=PrefillModel.from_dict(prefill) if prefill is not None else None,
                   availability_s=d.get("availability_s"), clock=d.get("clock", "time.perf_counter"))

    def to_frame(self):
        """A polars DataFrame, one row per stage in :data:`STAGE_NAMES` order: ``stage``,
        ``duration_s``, ``serial_start_s``/``serial_end_s`` (laid end to end),
        ``overlapped_start_s``/``overlapped_end_s`` (earliest start given the dependencies),
        ``on_critical_path``, ``measured``, ``source``, ``depends_on`` (comma-separated), ``detail``."""
        import polars as pl

        serial, over, crit = self.serial_schedule(), self.overlapped_schedule(), set(self.critical_path)
        return pl.DataFrame({
            "stage": list(STAGE_NAMES),
            "duration_s": [s.duration_s for s in self.stages],
            "serial_start_s": [serial[n][0] for n in STAGE_NAMES],
            "serial_end_s": [serial[n][1] for n in STAGE_NAMES],
            "overlapped_start_s": [over[n][0] for n in STAGE_NAMES],
            "overlapped_end_s": [over[n][1] for n in STAGE_NAMES],
            "on_critical_path": [n in crit for n in STAGE_NAMES],
            "measured": [s.measured for s in self.stages],
            "source": [s.source for s in self.stages],
            "depends_on": [", ".join(s.depends_on) for s in self.stages],
            "detail": [s.detail for s in self.stages],
        })

    def summary_lines(self) -> list[str]:
        """The timeline as sentences (per stage, then both totals)."""
        lines = [f"{s.name}: {s.duration_s * 1e3:.3f} ms ({s.source})" + (f"; {s.detail}" if s.detail else "")
                 for s in self.stages]
        lines.append(f"serial sum (eq. 7): {self.serial_sum_s * 1e3:.3f} ms")
        lines.append(f"critical path {' -> '.join(self.critical_path)}: {self.critical_path_s * 1e3:.3f} ms "
                     "(computed from the durations as if independent stages overlapped)")
        if self.availability_s is not None:
            lines.append(f"availability proof before the stages: {self.availability_s * 1e3:.3f} ms "
                         "(measured on this machine; not an eq. 7 term)")
        return lines


# ------------------------------------------------------------------------------------------------
# timing stages as they run
# ------------------------------------------------------------------------------------------------


class _Open:
    """What a running stage may still fill in before it ends."""

    def __init__(self) -> None:
        self.detail = ""


class StageTimer:
    """Times stages as they run, one after another, against one clock.

    Args:
        clock: ``() -> seconds`` (default ``time.perf_counter``); read once now (the origin) and
            twice per timed stage. Every reading must be a finite number: one that is not (NaN,
            an infinity, not a number) raises ConfigError, the first one already here.

    Use ``with timer.stage("fold") as st: ...; st.detail = "..."`` (nothing is recorded if the
    block raises), :meth:`skip` for a stage that did not run, :meth:`add` for one timed
    elsewhere, then :meth:`timeline`.
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        if not callable(clock):
            raise ConfigError(f"clock must be callable, got {clock!r}")
        self.clock = clock
        self.origin = self._read()
        self.stages: dict[str, Stage] = {}
        self.availability_s: float | None = None

    def _read(self) -> float:
        value = self.clock()
        t = _finite(value)
        if t is None:
            raise ConfigError(f"the clock {_clock_name(self.clock)} returned {_short(value)}, not a finite number "
                              "of seconds")
        return t

    def now_s(self) -> float:
        """Seconds since the origin. Raises ConfigError if the clock's reading is not finite."""
        return self._read() - self.origin

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[_Open]:
        """Time the block as stage ``name`` (measured)."""
        info = _Open()
        start = self.now_s()
        yield info
        self.add(name, start, self.now_s(), measured=True, detail=info.detail)

    def add(self, name: str, start_s: float, end_s: float, *, measured: bool = True, detail: str = "") -> Stage:
        """Record a stage with known times (seconds from the origin). Raises ConfigError for an
        unknown or repeated name."""
        if name not in STAGE_NAMES:
            raise ConfigError(f"unknown stage {name!r}: the stages are {list(STAGE_NAMES)}")
        if name in self.stages:
            raise ConfigError(f"stage {name!r} was already recorded")
        s = Stage(name, start_s, end_s, DEPENDS_ON[name], measured, detail)
        self.stages[name] = s
        return s

    def skip(self, name: str, detail: str) -> Stage:
        """Record that stage ``name`` did not run (0 s, not measured), saying why."""
        t = self.now_s()
        return self.add(name, t, t, measured=False, detail=detail)

    def timeline(self, prefill: PrefillModel) -> ResumeTimeline:
        """The timeline of the recorded stages, with the prefill stage computed from ``prefill``
        (starting when reconciliation ended). Raises ConfigError if a stage other than prefill
        was not recorded."""
        missing = [n for n in STAGE_NAMES if n != "prefill" and n not in self.stages]
        if missing:
            raise ConfigError(f"stages not recorded: {missing}")
        start = max(self.stages[d].end_s for d in DEPENDS_ON["prefill"])
        placeholder = Stage("prefill", start, start, DEPENDS_ON["prefill"], False, "")
        tl = ResumeTimeline(tuple(self.stages[n] for n in STAGE_NAMES if n != "prefill") + (placeholder,),
                            availability_s=self.availability_s, clock=_clock_name(self.clock))
        return tl.with_prefill(prefill)


def _clock_name(clock: Callable[[], float]) -> str:
    name = getattr(clock, "__qualname__", None)
    if not name:
        return type(clock).__name__
    module = getattr(clock, "__module__", None)
    return f"{module}.{name}" if module else name


# ------------------------------------------------------------------------------------------------
# a real resume, timed
# ------------------------------------------------------------------------------------------------


@dataclass
class TimedResume:
    """What :func:`timed_resume` did.

    Fields:
        record: the trajectory record after reconciliation (the dispatch gate's record; it is the
            fold of the log as it now stands). ``restore_result.record`` is this same object.
        restore_result: the :class:`~kernel_lib.checkpoint.RestoreResult` (None without a blob store).
        availability: the availability proof.
        lease: the lease granted (None without a coordinator).
        owner_epoch: the ownership generation installed as the log's fence.
        log: a :class:`~kernel_lib.log.TrajectoryLog` stamped with ``owner_epoch``.
        gate: the :class:`~kernel_lib.gate.dispatch.DispatchGate` reconciliation used (its
            ``fence_check`` checks the lease, when there is one).
        reconciliation: what the reconcile step returned.
        workspace_dir: where the workspace files were written (None: none written).
        timeline: the :class:`ResumeTimeline`.
    """

    record: TrajectoryRecord
    restore_result: RestoreResult | None
    availability: Availability
    lease: Lease | None
    owner_epoch: int
    log: TrajectoryLog
    gate: DispatchGate
    reconciliation: dict[str, Any]
    workspace_dir: Path | None
    timeline: ResumeTimeline = field(repr=False)


def default_reconciliation(gate: DispatchGate) -> dict[str, Any]:
    """Reconciliation with no executor to ask: list the in-doubt operations and attempts and
    settle none of them (they keep their reservations)."""
    rec = gate.record
    return {"queried": 0, "settled": [], "in_doubt": rec.in_doubt(),
            "attempts_in_doubt": [list(x) for x in rec.attempts_in_doubt()],
            "note": "no reconcile callable was given: in-doubt operations are listed and stay in doubt"}


def timed_resume(store: LogStore, trajectory_id: str, *, blobs=None, coordinator: OwnershipCoordinator | None = None,
                 owner_id: str = "resume-worker", lease_ttl_s: float = 30.0,
                 workspace_dest: str | os.PathLike | None = None,
                 reconcile: Callable[[DispatchGate], Mapping[str, Any]] | None = None,
                 policy: AdmissionPolicy | None = None, prefill: PrefillModel | None = None,
                 must_survive: FailureDomain | str | None = None, min_head: int | None = None,
                 clock: Callable[[], float] = time.perf_counter, inbox=None, replicas=(),
                 wall_clock: Callable[[], float] = time.time) -> TimedResume:
    """Resume ``trajectory_id`` from ``store`` for real, timing each stage of eq. 7 (§11.5).

    In order, each stage timed with ``clock`` unless noted:

    1. availability (before eq. 7's stages): :func:`~kernel_lib.ownership.leases.check_available` proves
       the prefix complete and every checkpoint object present; if not, raise at once;
    2. ownership: :func:`~kernel_lib.ownership.leases.take_ownership` with ``coordinator`` (a lease and
       a new owner_epoch installed as the log's fence); without a coordinator, the log's fence + 1
       is installed directly (no lease: nothing but the fence excludes an older owner);
    3. checkpoint_suffix_read, fold, workspace_restore: with ``blobs``, one
       :func:`~kernel_lib.checkpoint.restore` call, split by its own ``perf_counter`` timings
       (read = ``find`` + ``load``, fold = ``fold``, workspace = ``workspace`` +
       ``materialize``); without ``blobs``, the log is read and folded from record_0 and no
       workspace is known (that stage is recorded as not run);
    4. reconciliation: first the approvals that lapsed while no worker was alive are recorded as
       expired (:meth:`~kernel_lib.gate.dispatch.DispatchGate.expire_lapsed_approvals`: the
       ``wall_clock`` reading is logged as a ``RuntimeInput`` and named as the expiries'
       evidence, so a trajectory does not stay AWAITING_APPROVAL on a void request); then
       ``reconcile(gate)`` with a :class:`~kernel_lib.gate.dispatch.DispatchGate` over a
       log handle stamped with the new epoch (it may record evidence through
       ``gate.record_evidence``); without ``reconcile``, :func:`default_reconciliation` only lists
       what is in doubt; last, every reservation that outlived its reason is settled
       (:meth:`~kernel_lib.gate.dispatch.DispatchGate.settle_orphaned_reservations`), so every
       outstanding reservation afterwards belongs to an operation in doubt or still running;
    5. prefill: computed from ``prefill``. A trajectory that is paused or terminal after the fold
       makes no model call, so its prefill is :meth:`PrefillModel.none` whatever was given; no
       ``prefill`` at all also means none.

    Args:
        store: the authoritative log store (it must accept a fence).
        trajectory_id: the trajectory to resume.
        blobs: the blob store with the checkpoint objects (required if the log names any).
        coordinator: the lease service; owner_id, lease_ttl_s: the claimant and its lease term (s).
        workspace_dest: an absent or empty directory to write the workspace into (needs ``blobs``).
        reconcile: ``(gate) -> mapping`` that settles in-doubt operations.
        policy: admission policy of the gate (default: one granting nothing; reconciliation only
            records evidence).
        prefill: the :class:`PrefillModel` of the next model call.
        must_survive: failure domain of the gate's log handle (default: the strongest the store
            acknowledges).
        min_head: a log position known to be acknowledged (see ``check_available``).
        clock: ``() -> seconds``; default ``time.perf_counter``.
        wall_clock: ``() -> seconds since the epoch`` (default ``time.time``), the gate's clock:
            read during reconciliation only if a pending approval has an expiry.
        inbox, replicas: a :class:`~kernel_lib.gate.inbox.ResultInbox` and replicas (LogStores
            or ``name -> head``) whose positions, with the blob store's checkpoint manifests, the
            log must reach (:func:`kernel_lib.resume.truncation.refuse_truncated`, before step 1).

    Returns:
        :class:`TimedResume` with the record, lease, epoch and :class:`ResumeTimeline`.

    Raises:
        ConfigError: a bad argument, checked before anything is read: ``store`` not a LogStore,
            ``blobs`` not a BlobStore, a ``workspace_dest`` that is not an absent or empty
            directory (or lies under a file), a ``clock`` that is not callable or whose first
            reading is not a finite number, and the others' types.
        ReconstructionUnavailableError: the availability proof failed (``availability`` holds the
            reasons); nothing further runs: no lease, no fence, no restore, no files.
        LogTruncatedError (a ReconstructionUnavailableError): the log is shorter than a position
            a checkpoint manifest, inbox entry or replica names; nothing further runs.
        LeaseHeldError, LeaseLostError, CoordinatorUnavailableError: ownership not obtained.
        StaleOwnerError: without a coordinator, the fence could not be claimed.
        UnrecoverableStateError, CheckpointError, FoldError: from restore / the fold.
        ConfigError: ``reconcile`` returned something other than a mapping, or a later clock
            reading was not finite (after ownership).
        Whatever ``reconcile`` raises.

    Anything raised after the lease was granted releases it (the epoch stays installed as the
    log's fence), so the next replacement need not wait out ``lease_ttl_s``.
    """
    from kernel_lib.checkpoint.blobs import BlobStore

    if not isinstance(store, LogStore):
        raise ConfigError(f"store must be a LogStore (the authoritative log), got {type(store).__name__}")
    if not isinstance(trajectory_id, str) or not trajectory_id:
        raise ConfigError(f"trajectory_id must be a non-empty string, got {trajectory_id!r}")
    if blobs is not None and not isinstance(blobs, BlobStore):
        raise ConfigError(f"blobs must be a BlobStore (e.g. DirectoryBlobStore(path)) or None, got "
                          f"{type(blobs).__name__}")
    if workspace_dest is not None and blobs is None:
        raise ConfigError("a workspace can only be restored from a blob store: pass blobs= with workspace_dest=")
    if workspace_dest is not None:
        _check_workspace_dest(workspace_dest)
    if reconcile is not None and not callable(reconcile):
        raise ConfigError(f"reconcile must be callable, got {reconcile!r}")
    if prefill is not None and not isinstance(prefill, PrefillModel):
        raise ConfigError(f"prefill must be a PrefillModel or None, got {type(prefill).__name__}")
    if policy is not None and not isinstance(policy, AdmissionPolicy):
        raise ConfigError(f"policy must be an AdmissionPolicy, got {type(policy).__name__}")
    if coordinator is not None and not isinstance(coordinator, OwnershipCoordinator):
        raise ConfigError(f"coordinator must be an OwnershipCoordinator, got {type(coordinator).__name__}")
    try:
        domain = FailureDomain.parse(must_survive) if must_survive is not None else \
            store.strongest_tier().survives_up_to
    except KernelError as exc:
        raise ConfigError(f"must_survive: {exc}") from None
    timer = StageTimer(clock)

    a0 = timer.now_s()
    refuse_truncated(store, trajectory_id, blobs=blobs, inbox=inbox, replicas=replicas)   # a cut suffix (issue 14)
    availability = check_available(store, trajectory_id, blobs, min_head=min_head)
    timer.availability_s = timer.now_s() - a0
    if not availability.ok:
        raise ReconstructionUnavailableError("reconstruction unavailable: " + "; ".join(availability.reasons),
                                             availability=availability)

    lease: Lease | None = None
    try:
        with timer.stage("ownership") as st:
            if coordinator is not None:
                lease = take_ownership(coordinator, store, trajectory_id, owner_id, lease_ttl_s)
                epoch = lease.owner_epoch
                st.detail = (f"lease from {coordinator.name}: owner_epoch={epoch} for {owner_id} "
                             f"({lease.ttl_s:g} s), installed as the log's fence")
            else:
                # read the fence and install the next epoch in one atomic step: two replacements
                # racing without a coordinator never both get the same epoch
                epoch = store.claim_epoch(trajectory_id)
                st.detail = f"no coordinator: owner_epoch={epoch} claimed as the log's fence directly (no lease)"
        return _resume_owned(store, trajectory_id, blobs, coordinator, lease, epoch, workspace_dest, reconcile,
                             policy, prefill, domain, timer, availability, wall_clock=wall_clock)
    except BaseException:
        if lease is not None:
            with contextlib.suppress(KernelError):   # the fence stays; only the lease's wait is lifted
                coordinator.release(lease)
        raise


def _check_workspace_dest(dest: Any) -> None:
    """ConfigError unless ``dest`` is a path that is absent or an empty directory (not a link),
    whose nearest existing ancestor is a directory."""
    if not isinstance(dest, (str, os.PathLike)) or not isinstance(os.fspath(dest), str) or not os.fspath(dest):
        raise ConfigError(f"workspace_dest must be a path (str or os.PathLike), got {_short(dest)}")
    path = Path(os.path.abspath(dest))
    try:
        if os.path.islink(path):
            raise ConfigError(f"workspace_dest {path} is a symbolic link; give an absent or empty directory")
        if path.exists():
            if not path.is_dir() or any(path.iterdir()):
                raise ConfigError(f"workspace_dest {path} exists and is not an empty directory; the restore writes "
                                  "the workspace only into an absent or empty directory")
            return
        anc = path.parent
        while not os.path.lexists(anc):
            anc = anc.parent
        if not anc.is_dir():
            raise ConfigError(f"workspace_dest {path} lies under {anc}, which is not a directory")
    except OSError as exc:
        raise ConfigError(f"workspace_dest {path} cannot be checked: {exc.strerror or exc}") from None


def _resume_owned(store: LogStore, trajectory_id: str, blobs, coordinator: OwnershipCoordinator | None,
                  lease: Lease | None, epoch: int, workspace_dest, reconcile, policy: AdmissionPolicy | None,
                  prefill: PrefillModel | None, domain: FailureDomain, timer: StageTimer,
                  availability: Availability, wall_clock: Callable[[], float] = time.time) -> TimedResume:
    """The stages of :func:`timed_resume` after ownership (see there)."""
    result: RestoreResult | None = None
    if blobs is not None:
        t0 = timer.now_s()
        result = restore(store, trajectory_id, blobs, dest=workspace_dest, verify_blobs=True, lazy_rows=False)
        tm = result.timings_s
        read_end = t0 + tm["find"] + tm["load"]
        fold_end = read_end + tm["fold"]
        cp = result.checkpoint
        timer.add("checkpoint_suffix_read", t0, read_end,
                  detail=(f"checkpoint {cp.checkpoint_id} at #{cp.covered_sequence_number} (chain of "
                          f"{result.chain_length} deltas, {result.bytes_read:,} blob bytes) and its suffix"
                          if cp else "no checkpoint: the whole log is the suffix"))
        timer.add("fold", read_end, fold_end, detail=f"{result.suffix_events} suffix events folded")
        files = len(result.tree.files) if result.tree is not None else 0
        timer.add("workspace_restore", fold_end, fold_end + tm["workspace"] + tm["materialize"],
                  detail=(f"{result.workspace_changes} logged workspace changes applied; {files} files verified"
                          + (f" and written to {result.workspace_dir}" if result.workspace_dir else "")
                          if result.tree is not None else "the log names no workspace"))
        record = result.record
    else:
        with timer.stage("checkpoint_suffix_read") as st:
            events = list(store.read(trajectory_id))
            st.detail = f"no blob store (no checkpoint): read all {len(events)} events"
        with timer.stage("fold") as st:
            record = fold(initial_record(trajectory_id), events)
            st.detail = f"{len(events)} events folded from record_0"
        timer.skip("workspace_restore", "no blob store: the log names no workspace objects, nothing restored")

    with timer.stage("reconciliation") as st:
        log = TrajectoryLog(store, trajectory_id, must_survive=domain, owner_epoch=epoch)
        gate = DispatchGate(log, policy or AdmissionPolicy(grants={}), record=record,
                            fence_check=LeaseCheck(coordinator, lease) if lease is not None else None,
                            clock=wall_clock)
        expired = gate.expire_lapsed_approvals()   # lapsed while no worker was alive (§11.5.3)
        in_doubt = record.in_doubt()
        answer = reconcile(gate) if reconcile is not None else default_reconciliation(gate)
        if not isinstance(answer, Mapping):
            raise ConfigError(f"reconcile must return a mapping (what it settled), got {type(answer).__name__}")
        outcome = dict(answer)
        settled = gate.settle_orphaned_reservations()   # no reservation outlives its reason
        st.detail = (f"{len(in_doubt)} in-doubt operation(s) {in_doubt}; "
                     + ("reconciled by the given callable" if reconcile is not None
                        else "listed only (no reconcile callable)")
                     + (f"; {len(expired) - 1} lapsed approval(s) recorded as expired" if expired else "")
                     + (f"; {len(settled)} orphaned reservation(s) settled" if settled else ""))

    record = gate.record
    if record.control_state == "PAUSED" or record.control_state in TERMINAL_STATES:
        chosen = PrefillModel.none(f"the trajectory is {record.control_state}: no model call follows"
                                   + (" (the given prefill model is not used)" if prefill is not None else ""))
    else:
        chosen = prefill if prefill is not None else PrefillModel.none("no prefill model was given")
    return TimedResume(record=record, restore_result=result, availability=availability, lease=lease,
                       owner_epoch=epoch, log=log, gate=gate, reconciliation=outcome,
                       workspace_dir=result.workspace_dir if result is not None else None,
                       timeline=timer.timeline(chosen))
