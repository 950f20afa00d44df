"""An in-memory checkpoint index over one trajectory's events, for fast time travel (§11.4, §11.6).

:class:`CheckpointIndex` folds the log once and keeps a snapshot of the record every ``stride``
events. ``record_at(position)`` starts from the nearest snapshot at or before the position and
folds at most ``stride - 1`` events, instead of folding the whole prefix; this is what a log
scrubber needs to show any position of a long log quickly.

Snapshots share structure: each is a :func:`~kernel_lib.core.record.fork` of the previous one, so a
snapshot costs pointer copies of the record's tables plus copies of the entries the next
``stride`` events touched, not a deep copy of the record. Snapshots are never folded into; every
record handed out is a fork of its own. The default stride keeps at most
:data:`~kernel_lib.limits.CHECKPOINT_INDEX_SNAPSHOTS_MAX` snapshots (a snapshot of a record with n
operations holds O(n) pointers), never closer than
:data:`~kernel_lib.limits.CHECKPOINT_INDEX_STRIDE_MIN` events apart.
"""

from __future__ import annotations

import math
from typing import Sequence

from kernel_lib.errors import ConfigError, FoldError
from kernel_lib.core.events import Event
from kernel_lib.core.record import TrajectoryRecord, fold_into, fork, initial_record
from kernel_lib.limits import CHECKPOINT_INDEX_SNAPSHOTS_MAX, CHECKPOINT_INDEX_STRIDE_MIN


def default_stride(n_events: int) -> int:
    """Stride for ``n_events``: at least ``CHECKPOINT_INDEX_STRIDE_MIN``, and at most
    ``CHECKPOINT_INDEX_SNAPSHOTS_MAX`` snapshots (:mod:`kernel_lib.limits`)."""
    return max(CHECKPOINT_INDEX_STRIDE_MIN, math.ceil(n_events / CHECKPOINT_INDEX_SNAPSHOTS_MAX))


class CheckpointIndex:
    """Snapshots of the record of ``events`` (one trajectory, in sequence order from 1).

    Args:
        events: the trajectory's events.
        stride: events between snapshots (default :func:`default_stride`).

    Building folds every event once. ``built_to`` is the last position that folded; a log that
    stops folding at some event keeps its snapshots up to there, and :meth:`record_at` beyond it
    raises the reducer's FoldError for that event.

    Raises:
        ConfigError: ``stride`` < 1.
    """

    def __init__(self, events: Sequence[Event], stride: int | None = None):
        self.events = events
        n = len(events)
        self.stride = default_stride(n) if stride is None else stride
        if type(self.stride) is not int or self.stride < 1:
            raise ConfigError(f"stride must be an integer >= 1, got {stride!r}")
        self.trajectory_id = events[0].trajectory_id if n else ""
        self._snapshots: list[TrajectoryRecord] = [initial_record(self.trajectory_id)]
        self.built_to = 0
        self._error: FoldError | None = None
        cur = self._snapshots[0]
        for start in range(0, n, self.stride):
            chunk = events[start:start + self.stride]
            nxt = fork(cur, chunk)
            try:
                fold_into(nxt, chunk)
            except FoldError as exc:
                self._error = exc
                self.built_to = nxt.last_sequence_number
                break
            self.built_to = nxt.last_sequence_number
            if len(chunk) == self.stride:   # snapshot i sits at position i * stride
                self._snapshots.append(nxt)
                cur = nxt
        self._cursor: TrajectoryRecord | None = None

    @property
    def snapshot_positions(self) -> list[int]:
        """Positions of the snapshots kept (0 is record_0)."""
        return [s.last_sequence_number for s in self._snapshots]

    def nearest(self, position: int) -> TrajectoryRecord:
        """The snapshot at or before ``position`` (read-only: never fold into it)."""
        return self._snapshots[min(position // self.stride, len(self._snapshots) - 1)]

    def record_at(self, position: int) -> TrajectoryRecord:
        """The record after folding events 1..``position``, equal to
        ``fold(initial_record(...), events[:position])``.

        The result shares structure with the index's snapshots: treat it as read-only, and
        :func:`~kernel_lib.core.record.fork` it (with the events) before folding anything into it.
        It stays valid after later calls. Moving forward from the last position asked folds only
        the events in between.

        Raises:
            ConfigError: ``position`` is outside 0..len(events).
            FoldError: the events up to ``position`` do not fold.
        """
        n = len(self.events)
        if type(position) is not int or not 0 <= position <= n:
            raise ConfigError(f"position {position!r} is outside 0..{n}")
        base = self.nearest(position)
        cur = self._cursor
        if cur is not None and base.last_sequence_number <= cur.last_sequence_number <= position:
            base = cur
        todo = self.events[base.last_sequence_number:position]
        rec = fork(base, todo)
        fold_into(rec, todo)
        self._cursor = rec
        return rec
