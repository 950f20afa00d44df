"""Crash points of the live worksheet: every position of its trajectory, addressable (§11.1, §11.3.3).

A crash point is an event of the trajectory right after which the worker is paused and killed
with ``SIGKILL``. :func:`points_of` names every event of a trajectory as a :class:`CrashPoint`
(its log position, event type, occurrence ``k`` among the events of that type, the operation or
model invocation it concerns, and ``durable_at``, the last position of the append batch it was
acknowledged in); :func:`resolve_point` turns what a user typed into one of them.

Batches. The dispatch gate appends some events together in one batch with one acknowledgment (a
result and its usage settlement), so no crash can fall between them: right after such an event
is durable, the rest of its batch is durable too. Such a point is still addressable; the worker
is killed at its ``durable_at`` position, and the distinct kill positions of a trajectory are
the batch ends (:func:`kill_positions`). A point is written as

* ``N`` (an integer, or a string of digits): right after log position ``N`` (1-based);
* ``TYPE#K``: right after the ``K``-th event of type ``TYPE`` (``Authorized#1`` is the model call's
  admission, ``Authorized#2`` the test's);
* ``TYPE``: right after the first event of that type concerning the worksheet's tool operation
  (``test_r18``, the operation of table 3), or, for a type that operation never has (``TaskStarted``,
  ``ContextBuilt``, ``ModelReplied``), its first event. So the four table-3 crash points
  ``Authorized``, ``BudgetReserved``, ``ToolIntent`` and ``ToolResult`` keep their meaning.

Deferred batches (one durable barrier per step, §11.3.1). A batch the gate appended *deferred*
(the evidence of an endpoint that answers a status lookup by operation id) is acknowledged at the
store's write tier and made durable by the log's next barrier; its points have ``deferred`` True
and read ``[written, not synced until the next barrier]``. A kill there falls after the deferred
result and before the next barrier. A SIGKILL is a process crash: the written bytes are in the
page cache and survive it, so the replacement finds them. A host crash could lose them; that case
is the crash-state exploration's (``crashcheck --workload one-barrier-steps``), whose invariant is
that reconciliation settles every such loss.

Anything else raises :class:`~kernel_lib.errors.UnknownCrashPointError` listing every valid point.
This module is pure: it reads events, it starts nothing (the worker's reference trajectory is
:func:`kernel_lib.live.worker.reference_events`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from kernel_lib.errors import UnknownCrashPointError

__all__ = ["CrashPoint", "kill_positions", "points_of", "resolve_point", "spec_name", "subject_of"]

_DIGITS = re.compile(r"^[0-9]{1,18}$")
_TYPE_K = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)(?:#([0-9]+))?$")


def subject_of(ev: Any) -> str | None:
    """The operation or model invocation an event concerns (``operation_id``, ``subject_id`` or
    ``invocation_id`` of its payload), or None (``TaskStarted``)."""
    p = ev.payload
    for k in ("operation_id", "subject_id", "invocation_id"):
        v = getattr(p, k, None)
        if isinstance(v, str) and v:
            return v
    return None


@dataclass(frozen=True)
class CrashPoint:
    """One position of the trajectory at which the worker can be killed.

    ``position``: the event's log position (sequence number, 1-based); ``event_type`` its type;
    ``occurrence`` its ``k`` among the events of that type (1-based); ``subject`` the operation or
    invocation it concerns (None for ``TaskStarted``); ``durable_at`` the last log position of the
    batch it was appended in (== ``position`` unless later events share its acknowledgment): the
    surviving log's last position when the worker is killed right after this event.
    ``deferred``: its batch was acknowledged at the write tier only, to be covered by the log's next
    barrier (module docstring); not part of a point's identity (equality ignores it)."""

    position: int
    event_type: str
    occurrence: int
    subject: str | None
    durable_at: int = 0
    deferred: bool = field(default=False, compare=False)

    def __post_init__(self):
        if self.durable_at < self.position:
            object.__setattr__(self, "durable_at", self.position)

    @property
    def label(self) -> str:
        """``TYPE#K``: the name that addresses this point whatever else the trajectory holds."""
        return f"{self.event_type}#{self.occurrence}"

    def describe(self) -> str:
        """``"N TYPE#K (subject)"``, the form listed in errors, ``--help`` and the crash panel."""
        return (f"{self.position} {self.label}" + (f" ({self.subject})" if self.subject else "")
                + (f" [one batch through {self.durable_at}]" if self.durable_at != self.position else "")
                + (" [written, not synced until the next barrier]" if self.deferred else ""))

    def to_dict(self) -> dict[str, Any]:
        return {"position": self.position, "event_type": self.event_type, "occurrence": self.occurrence,
                "subject": self.subject, "label": self.label, "durable_at": self.durable_at,
                "deferred": self.deferred}


def points_of(events: Iterable[Any], batch_ends: Iterable[int] | None = None,
              deferred: Iterable[int] = ()) -> tuple[CrashPoint, ...]:
    """Every event of ``events`` (in log order) as a :class:`CrashPoint`.

    ``batch_ends``: the last log position of every append batch (default: each event its own
    batch); an event's ``durable_at`` is the first batch end at or after it. ``deferred``: the log
    positions appended in deferred batches (write tier, covered by the next barrier)."""
    ends = sorted(set(batch_ends)) if batch_ends is not None else None
    deferred = set(deferred)
    seen: dict[str, int] = {}
    out = []
    for ev in events:
        seen[ev.event_type] = seen.get(ev.event_type, 0) + 1
        n = ev.sequence_number
        durable = next((e for e in ends if e >= n), n) if ends is not None else n
        out.append(CrashPoint(n, ev.event_type, seen[ev.event_type], subject_of(ev), durable, n in deferred))
    return tuple(out)


def kill_positions(points: Iterable[CrashPoint]) -> list[int]:
    """The distinct log positions a worker can be killed at (every batch end), ascending."""
    return sorted({p.durable_at for p in points})


def _refuse(spec: Any, points: Sequence[CrashPoint], why: str, parameter: str | None = None) -> UnknownCrashPointError:
    shown = repr(str(spec)[:80]) if isinstance(spec, (int, str)) and not isinstance(spec, bool) else (
        f"{repr(spec)[:80]} (a {type(spec).__name__})")
    types = list(dict.fromkeys(p.event_type for p in points))
    named = f"{parameter}: " if parameter else ""
    return UnknownCrashPointError(
        f"{named}unknown crash point {shown}: {why}. A crash point is a log position 1..{len(points)}, "
        f"an event type ({', '.join(types)}) or TYPE#K; valid: {', '.join(p.describe() for p in points)}",
        choices=[p.describe() for p in points])


def resolve_point(spec: Any, points: Sequence[CrashPoint], operation_id: str, *,
                  parameter: str | None = None) -> CrashPoint:
    """The point ``spec`` names (module docstring: ``N``, ``TYPE#K`` or ``TYPE``).

    Args:
        spec: an int, a string, or a :class:`CrashPoint` of ``points``.
        points: the trajectory's points (:func:`points_of`), non-empty.
        operation_id: the tool operation a bare ``TYPE`` prefers (``test_r18``).
        parameter: the name the caller gave ``spec`` under (``crash_after``, ``--crash-after``),
            which the error message starts with, so it names what the user passed.

    Raises:
        UnknownCrashPointError: ``spec`` names no point; its message and ``choices`` list them all.
    """
    def refuse(shown: Any, why: str) -> UnknownCrashPointError:
        return _refuse(shown, points, why, parameter)

    if isinstance(spec, CrashPoint):
        if spec in points:
            return spec
        raise refuse(spec.describe(), "it is not a position of this trajectory")
    if isinstance(spec, int) and not isinstance(spec, bool):
        n = spec
    elif isinstance(spec, str) and _DIGITS.match(spec.strip()):
        n = int(spec.strip())
    elif isinstance(spec, str):
        m = _TYPE_K.match(spec.strip()) if len(spec) <= 200 else None
        if not m:
            raise refuse(spec, "not a position, an event type or TYPE#K")
        etype, k = m.group(1), m.group(2)
        of_type = [p for p in points if p.event_type == etype]
        if not of_type:
            raise refuse(spec, f"the worker appends no {etype} event")
        if k is None:
            return next((p for p in of_type if p.subject == operation_id), of_type[0])
        if not 1 <= int(k) <= len(of_type):
            raise refuse(spec, f"the trajectory has {len(of_type)} {etype} event(s)")
        return of_type[int(k) - 1]
    else:
        raise refuse(spec, "a crash point is a log position (an int) or a string")
    by_position = {p.position: p for p in points}
    if n not in by_position:
        raise refuse(spec, f"the trajectory has log positions 1..{len(points)}")
    return by_position[n]


def spec_name(point: CrashPoint, points: Sequence[CrashPoint], operation_id: str) -> str:
    """The shortest name that resolves to ``point``: its bare ``TYPE`` when that names it (so the
    table-3 points read ``ToolIntent``, ``ToolResult``, ...), else ``TYPE#K``."""
    return point.event_type if resolve_point(point.event_type, points, operation_id) == point else point.label
