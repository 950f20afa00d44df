"""What the log scrubber shows at a log position (§11.2.1, §11.6.1 time travel).

The view is computed here, in the kernel, so that the widget (:mod:`widgets.scrubber`), the marimo
app and the restore benchmark (:mod:`kernel_lib.bench.restore`) all show and time the same thing.
"""

from __future__ import annotations

from typing import Any, Sequence

from kernel_lib.checkpoint.index import CheckpointIndex
from kernel_lib.core.events import Event
from kernel_lib.core.record import TrajectoryRecord, fold, initial_record

__all__ = ["record_view", "view_of"]


def record_view(events: Sequence[Event], position: int, index: CheckpointIndex | None = None) -> dict[str, Any]:
    """The JSON view the scrubber shows after folding the first ``position`` events.

    With ``index`` (a :class:`CheckpointIndex` over the same ``events``) the record comes from its
    nearest snapshot at or before ``position``; without it, from a fold of the whole prefix. The
    view is the same either way.
    """
    if index is not None:
        rec = index.record_at(position)
    else:
        rec = fold(initial_record(events[0].trajectory_id), events[:position])
    return view_of(rec, position)


def view_of(rec: TrajectoryRecord, position: int) -> dict[str, Any]:
    """The scrubber's JSON view of a folded record, built in one pass over the operation table
    and one over the reservations rather than through ``to_dict`` (whose cost grows with every
    field of every operation). ``budget`` equals ``rec.to_dict()["budget"]``; ``in_doubt`` and
    ``attempts_in_doubt`` equal the record's own lists."""
    ops, in_doubt, attempts_in_doubt = [], [], []
    for k, op in rec.operations.items():
        att = op.attempts.get(op.current_attempt_id or "")
        ops.append({"operation_id": op.operation_id, "kind": op.kind, "status": op.status,
                    "attempt_id": op.current_attempt_id, "job_handle": att.job_handle if att else None,
                    "last_evidence": att.last_result_status if att else None})
        if op.status == "in_doubt":
            in_doubt.append(k)
        for a in op.attempts.values():
            if a.intent_sequence is not None and not a.established:
                attempts_in_doubt.append([k, a.attempt_id])
    return {"position": position, "operations": ops, "in_doubt": in_doubt,
            "attempts_in_doubt": attempts_in_doubt, "budget": rec.budget.view(),
            "control_state": rec.control_state}
