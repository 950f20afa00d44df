"""A trajectory's handle on a log store: envelope stamping and the declared failure domain.

:class:`TrajectoryLog` is what the dispatch gate writes through. It binds one trajectory to one
store, picks the acknowledgment tier from the failure domain the trajectory must survive
(refusing a store that is too weak, §11.3.1), and stamps each payload with the envelope of
§11.2.2: the next gapless ``sequence_number``, an event id, the writer's ``owner_epoch`` and the
current ``control_epoch``.

One durable barrier per step (§11.3.1, §11.3.4): an append may be *deferred*
(``append_many(..., deferred=True)``): acknowledged at the store's write tier, without a barrier of
its own, and made durable at :attr:`TrajectoryLog.tier` by the next barrier of this log (the next
non-deferred append, or :meth:`TrajectoryLog.sync`). The gate defers only evidence from an
endpoint that declared a status lookup by operation id, and every event that licenses something
external (an intent) is a non-deferred append, so nothing leaves before the deferred events
before it are durable. It is offered only by a store that declares
:attr:`~kernel_lib.log.base.LogStore.barrier_covers_earlier_writes`; elsewhere a deferred append is
an ordinary one. :attr:`TrajectoryLog.durable_head` is the last position a barrier covered.
"""

from __future__ import annotations

from typing import Callable, Iterator, Sequence

from kernel_lib.errors import ConfigError, CorruptLogError, StoreError
from kernel_lib.core.events import Event, Payload, Provenance
from kernel_lib.log.base import AckTier, FailureDomain, LogStore, choose_tier, deferral_tier
from kernel_lib.log.group_commit import GroupCommitter, LeaderGroupCommitter


def default_event_id(trajectory_id: str, owner_epoch: int, sequence_number: int) -> str:
    """Deterministic event id: the same logical append retried gets the same id (and so is
    deduplicated by the store), a different owner's append at that position does not."""
    return f"{trajectory_id}/e{owner_epoch}/{sequence_number}"


#: Provenance stamped on events when the caller names none.
DEFAULT_PROVENANCE = Provenance("default", "kernel_lib")


class TrajectoryLog:
    """Append and read one trajectory's events.

    Args:
        store: the log store.
        trajectory_id: which trajectory.
        must_survive: the failure domain the trajectory declares (default: host crash).
        owner_epoch: the writer's ownership generation, stamped on every append.
        control_epoch: the current control epoch (the gate advances it on ControlChanged).
        provenance: tenant and issuer stamped on every append.
        event_id: ``(trajectory_id, owner_epoch, sequence_number) -> event id``.
        committer: optional :class:`GroupCommitter` or :class:`LeaderGroupCommitter` over the same
            store and tier (for a log shared by writer threads).

    Raises:
        AcknowledgmentTooWeakError: ``store`` cannot acknowledge at a tier surviving ``must_survive``.
    """

    def __init__(self, store: LogStore, trajectory_id: str, *,
                 must_survive: FailureDomain | str = FailureDomain.HOST_CRASH, owner_epoch: int = 0,
                 control_epoch: int = 0, provenance: Provenance = DEFAULT_PROVENANCE,
                 event_id: Callable[[str, int, int], str] = default_event_id,
                 committer: GroupCommitter | LeaderGroupCommitter | None = None):
        self.store = store
        self.trajectory_id = trajectory_id
        self.must_survive = FailureDomain.parse(must_survive)
        self.tier: AckTier = choose_tier(store, self.must_survive)
        if committer is not None and (committer.store is not store or committer.tier is not self.tier):
            raise StoreError("the group committer must use the same store and tier as the trajectory")
        self.owner_epoch = owner_epoch
        self.control_epoch = control_epoch
        self.provenance = provenance
        self._event_id = event_id
        self._committer = committer
        self._head = store.head(trajectory_id)
        #: tier of a deferred append (:attr:`tier` itself when this store cannot defer)
        self.deferred_tier: AckTier = deferral_tier(store, self.tier)
        self._durable_head = self._head   # what was in the log at open counts as durable
        self._uncovered: Event | None = None   # the last deferred event no barrier covered yet
        #: barriers this handle waited for (non-deferred appends and syncs), for measurement
        self.barriers = 0

    @property
    def head(self) -> int:
        """Sequence number of the last event this handle knows is in the log."""
        return self._head

    @property
    def durable_head(self) -> int:
        """Sequence number of the last event known durable at :attr:`tier`: :attr:`head` unless
        deferred appends (acknowledged at :attr:`deferred_tier` only) came after the last barrier."""
        return self._durable_head

    @property
    def can_defer(self) -> bool:
        """Does a deferred append skip a barrier here (a weaker write tier whose writes this
        store's next barrier covers)?"""
        return self.deferred_tier is not self.tier

    def sync(self) -> int:
        """Make every deferred append of this handle durable at :attr:`tier` (one barrier; none
        when nothing is uncovered) and return :attr:`durable_head`.

        Call it before anything relies on those events surviving a host crash with no later
        append to carry them: the trajectory finishing or its handle closing, a lease handed over,
        a reader told the log is durable. (A checkpoint or an intent is an append and carries them
        anyway.) The barrier is the store's own contract: the last deferred event is appended
        again, an identical retry, at :attr:`tier`, which the store acknowledges only once its
        stored copy is durable there (:meth:`~kernel_lib.log.base.LogStore.append_batch`).

        Raises: the store's error (e.g. StoreFailedError); the events then stay uncovered.
        """
        ev = self._uncovered
        if ev is None:
            return self._durable_head
        if self._committer is not None:
            (res,) = [ack.outcome for ack in self._committer.append_many([ev])]
        else:
            (res,) = self.store.append_batch([ev], self.tier)
            if isinstance(res, Exception):
                raise res
        self.barriers += 1
        self._uncovered = None
        self._durable_head = max(self._durable_head, ev.sequence_number)
        return self._durable_head

    def next_event_id(self) -> str:
        """The event id the next :meth:`append` will use (e.g. to name it as a payload's holder
        before the event exists, :class:`kernel_lib.retention.PayloadStore`)."""
        return self._event_id(self.trajectory_id, self.owner_epoch, self._head + 1)

    def stamp(self, payload: Payload, sequence_number: int, *, event_id: str | None = None) -> Event:
        """Wrap ``payload`` in this trajectory's envelope at ``sequence_number`` (no append)."""
        return Event.create(
            trajectory_id=self.trajectory_id,
            event_id=event_id or self._event_id(self.trajectory_id, self.owner_epoch, sequence_number),
            sequence_number=sequence_number, payload=payload, owner_epoch=self.owner_epoch,
            control_epoch=self.control_epoch, provenance=self.provenance)

    def append(self, payload: Payload, *, event_id: str | None = None) -> Event:
        """Append one payload and return its event once durable at :attr:`tier`."""
        return self.append_many([payload], event_ids=[event_id])[0]

    def append_many(self, payloads: Sequence[Payload | Event], *,
                    event_ids: Sequence[str | None] | None = None, deferred: bool = False) -> list[Event]:
        """Append several payloads with one acknowledgment (a logical batch, §11.2.2).

        ``deferred=True``: acknowledge them at :attr:`deferred_tier` (no barrier of their own;
        the next non-deferred append or :meth:`sync` makes them durable at :attr:`tier`); a store
        that cannot defer (:attr:`can_defer` False) acknowledges them at :attr:`tier` as usual.
        A deferred batch never goes through the group committer: it waits for no flush.

        A member may also be an :class:`Event` this log already stamped (:meth:`stamp`) for the
        position it will take, so that a caller who had to encode an event ahead (to check its
        size) does not encode it twice; any other Event is refused with ConfigError.

        Returns the events once all are durable at :attr:`tier`. Raises the store's error for the
        first event refused (the store's contract: gap, conflicting duplicate, stale owner;
        EventTooLargeError for one over :data:`kernel_lib.limits.EVENT_BYTES_MAX`), and
        CorruptLogError if the store acknowledged an event at another position than the one it
        was stamped with. Afterwards :attr:`head` is the last returned event's sequence number.
        """
        ids = list(event_ids) if event_ids is not None else [None] * len(payloads)
        events = [self._stamped(p, self._head + i + 1, ids[i]) for i, p in enumerate(payloads)]
        defer = deferred and self.can_defer
        if self._committer is not None and not defer:
            outcomes = [ack.outcome for ack in self._committer.append_many(events)]
        else:
            outcomes = self.store.append_batch(events, self.deferred_tier if defer else self.tier)
            for res in outcomes:
                if isinstance(res, Exception):
                    raise res
        for ev, res in zip(events, outcomes):   # invariant: each event is where it was stamped
            if (res.trajectory_id, res.sequence_number) != (ev.trajectory_id, ev.sequence_number):
                raise CorruptLogError(f"{self.store.name} acknowledged event {ev.event_id} at {res.trajectory_id!r} "
                                      f"#{res.sequence_number}, but it was stamped for #{ev.sequence_number}")
        self._head += len(events)
        assert not events or self._head == events[-1].sequence_number, (self._head, events[-1].sequence_number)
        if not events:
            return events
        if defer:
            self._uncovered = events[-1]
        else:   # this barrier covered every earlier write of the log, deferred ones included
            self.barriers += 1
            self._uncovered = None
            self._durable_head = self._head
        return events

    def _stamped(self, item: Payload | Event, sequence_number: int, event_id: str | None) -> Event:
        if not isinstance(item, Event):
            return self.stamp(item, sequence_number, event_id=event_id)
        if (item.trajectory_id, item.sequence_number, item.owner_epoch) != (
                self.trajectory_id, sequence_number, self.owner_epoch):
            raise ConfigError(f"event {item.event_id} is stamped for {item.trajectory_id!r} #{item.sequence_number} "
                              f"(owner_epoch {item.owner_epoch}), not for this log's next position "
                              f"{self.trajectory_id!r} #{sequence_number} (owner_epoch {self.owner_epoch})")
        return item

    def events(self, start: int = 1, stop: int | None = None) -> Iterator[Event]:
        """Read this trajectory's events back from the store."""
        return self.store.read(self.trajectory_id, start, stop)
