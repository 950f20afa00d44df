"""Crash-position analysis: what recovery may conclude after a crash at each point of eq. 1
(Durable Execution §11.3.2–11.3.3, table 3).

Pure: it folds a recorded trajectory (a list of events) and returns values. :func:`conclude`
judges one operation from a folded surviving prefix; :func:`crash_positions` enumerates every
crash position of a recorded run and classifies each, complete and incomplete (a lagging reader).
:mod:`kernel_lib.gate.dispatch` re-exports these names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Sequence

from kernel_lib.errors import ConfigError, KernelError
from kernel_lib.core.decisions import RECHECK_CLOCK_INPUT
from kernel_lib.core.events import AttemptWithheld, ContextBuilt, Event, RuntimeInput, ToolIntent
from kernel_lib.core.record import TrajectoryRecord, fold_step, initial_record

__all__ = ["Conclusion", "conclude", "CrashPosition", "crash_positions"]

Conclusion = Literal["not_dispatched", "in_doubt", "established"]


def conclude(record: TrajectoryRecord, operation_id: str, prefix_complete: bool) -> tuple[Conclusion, str]:
    """What recovery may conclude about one operation from a folded surviving prefix (table 3).

    Absence of an intent proves non-dispatch only when the prefix is complete and authoritative;
    otherwise the operation is in doubt.
    """
    op = record.operations.get(operation_id)
    has_intent = op is not None and any(a.intent_sequence is not None for a in op.attempts.values())
    if not has_intent:
        if prefix_complete:
            return "not_dispatched", ("no durable intent in a complete authoritative prefix: this attempt was "
                                      "not dispatched through the gate; reconsider the proposal under current "
                                      "admission, do not dispatch automatically")
        return "in_doubt", ("no intent in an incomplete prefix proves nothing: the intent may exist in the part "
                            "not read")
    if op.status == "established":
        return "established", f"durable intent plus complete outcome evidence ({(op.outcome or {}).get('status')})"
    if op.status == "withheld":
        if prefix_complete:
            return "not_dispatched", ("every durable intent of it is followed by its AttemptWithheld record: the "
                                      "dispatch-time recheck withheld it and it was never sent; a release is a new "
                                      "attempt under current admission")
        return "in_doubt", ("withheld in the part read, but an incomplete prefix proves nothing about a later "
                            "attempt in the part not read")
    last = op.attempts[op.current_attempt_id].last_result_status if op.current_attempt_id else None
    return "in_doubt", ("durable intent without adequate outcome evidence"
                        + (f" (last evidence: {last})" if last else "") + "; keep identity, liability and owner")


@dataclass(frozen=True)
class CrashPosition:
    """One crash position of eq. 1 and what recovery may conclude there (table 3)."""

    position: str
    after_sequence_number: int
    prefix_complete: bool
    surviving_sequence_number: int
    operation_id: str
    conclusion: Conclusion
    dispatched: bool          # ground truth from the recorded run: had the request left?
    sound: bool               # the conclusion never claims less than what is true
    reason: str
    other_operations: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _intents(events: Sequence[Event]) -> dict[str, int]:
    """For each operation, the sequence number of its first intent (ToolIntent or ContextBuilt)."""
    out: dict[str, int] = {}
    for ev in events:
        if isinstance(ev.payload, ToolIntent):
            out.setdefault(ev.payload.operation_id, ev.sequence_number)
        elif isinstance(ev.payload, ContextBuilt):
            out.setdefault(ev.payload.invocation_id, ev.sequence_number)
    return out


def _dispatch_after(events: Sequence[Event]) -> dict[str, int]:
    """For each operation, the event its first dispatch follows: the intent of its first attempt
    that was not withheld, or the clock reading the dispatch-time recheck recorded for it right
    after that intent (``RuntimeInput`` named
    :data:`~kernel_lib.core.decisions.RECHECK_CLOCK_INPUT`), which is logged before the request
    leaves. An attempt followed by its ``AttemptWithheld`` never left, so it is skipped."""
    withheld = {(ev.payload.subject_id, ev.payload.attempt_id) for ev in events
                if isinstance(ev.payload, AttemptWithheld)}
    out: dict[str, int] = {}
    last_of: dict[str, int] = {}
    for ev in events:
        p = ev.payload
        if isinstance(p, ToolIntent) and (p.operation_id, p.attempt_id) not in withheld:
            out.setdefault(p.operation_id, ev.sequence_number)
        elif isinstance(p, ContextBuilt) and (p.invocation_id, p.invocation_id) not in withheld:
            out.setdefault(p.invocation_id, ev.sequence_number)
        elif (isinstance(p, RuntimeInput) and p.kind == "clock" and p.name == RECHECK_CLOCK_INPUT
              and isinstance(p.value, dict)):
            sid = p.value.get("subject_id")
            if sid in out and last_of.get(sid) == out[sid]:   # read right after that subject's intent
                out[sid] = ev.sequence_number
        sid = getattr(p, "operation_id", None) or getattr(p, "invocation_id", None)
        if sid is not None:
            last_of[sid] = ev.sequence_number
    return out


def crash_positions(events: Sequence[Event], operation_id: str | None = None,
                    lag_events: int = 1) -> list[CrashPosition]:
    """Classify every crash position of a recorded trajectory (eq. 1, table 3).

    Positions are: before the first event; during each intent append with its acknowledgment
    lost (the intent landed, or did not); after each event; and after each dispatch action (which
    eq. 1 places after the intent and before any evidence). For each, the surviving log is folded
    twice: as a complete authoritative prefix, and as an incomplete one (a reader lagging by
    ``lag_events`` events, e.g. an asynchronous replica).

    The log is folded once, incrementally; the conclusion for every prefix length is computed
    as the fold passes it, so the cost is linear in events × operations.

    Args:
        events: the recorded trajectory, in sequence order.
        operation_id: the tool operation to classify (default: the first tool operation logged).
        lag_events: how far behind the incomplete reader is (≥ 1).

    Returns:
        One :class:`CrashPosition` per (position, completeness), in position order.

    Raises:
        ConfigError: ``lag_events`` < 1. KernelError: no such operation in the log (or no
        ToolIntent at all when ``operation_id`` is None). FoldError: the events do not fold.
    """
    if isinstance(lag_events, bool) or not isinstance(lag_events, int) or lag_events < 1:
        raise ConfigError(f"lag_events must be an integer >= 1, got {lag_events!r}")
    events = list(events)
    if not events:
        return []
    intent_at = _intents(events)
    dispatch_at = _dispatch_after(events)
    if operation_id is None:
        tool_ops = [ev.payload.operation_id for ev in events if isinstance(ev.payload, ToolIntent)]
        if not tool_ops:
            raise KernelError("the trajectory logs no ToolIntent; name the operation to classify (--operation)")
        operation_id = tool_ops[0]
    elif operation_id not in intent_at and not any(
            getattr(ev.payload, "operation_id", None) == operation_id
            or getattr(ev.payload, "subject_id", None) == operation_id for ev in events):
        raise KernelError(f"operation {operation_id!r} does not occur in the log; operations with an intent: "
                          f"{sorted(intent_at)[:10]}")
    intents = {seq: op for op, seq in intent_at.items()}
    dispatches = {seq: op for op, seq in dispatch_at.items()}
    others = [k for k in intent_at if k != operation_id]

    # conclusions for every surviving prefix length n = 0..N, complete and incomplete
    rec = initial_record(events[0].trajectory_id)
    table: list[dict[bool, tuple[Conclusion, str, dict[str, str]]]] = []
    for n in range(len(events) + 1):
        if n:
            fold_step(rec, events[n - 1])
        table.append({c: (*conclude(rec, operation_id, c), {k: conclude(rec, k, c)[0] for k in others})
                      for c in (True, False)})

    # (label, surviving prefix length n, dispatched?) ; dispatched = the op's request has left
    op_dispatch = dispatch_at.get(operation_id)
    positions: list[tuple[str, int, bool]] = [("before the first event", 0, False)]
    for i, ev in enumerate(events, start=1):
        left = op_dispatch is not None and i > op_dispatch   # the op's dispatch followed that event
        if ev.sequence_number in intents:
            positions.append((f"during {ev.event_type} append for {intents[ev.sequence_number]}, "
                              "acknowledgment lost, intent did not land", i - 1, left and op_dispatch < i - 1))
            positions.append((f"during {ev.event_type} append for {intents[ev.sequence_number]}, "
                              "acknowledgment lost, intent landed", i, left))
        positions.append((f"after {ev.event_type} (sequence {ev.sequence_number})", i, left))
        if ev.sequence_number in dispatches:
            positions.append((f"after dispatch of {dispatches[ev.sequence_number]} (before evidence)", i,
                              op_dispatch is not None and i >= op_dispatch))
    out: list[CrashPosition] = []
    for label, n, dispatched in positions:
        for complete in (True, False):
            seen = n if complete else max(n - lag_events, 0)
            concl, why, other = table[seen][complete]
            sound = not (concl == "not_dispatched" and dispatched)
            out.append(CrashPosition(label, n, complete, seen, operation_id, concl, dispatched, sound, why, other))
    return out
