"""The log store interface, acknowledgment tiers and failure domains (§11.3.1 table 2, §11.8.4).

A store appends events and acknowledges them at a *tier*. Each tier declares the *failure
domains* its acknowledgment survives. A trajectory declares the failure domain it must survive;
:func:`choose_tier` picks the cheapest tier of a store that survives it, or refuses the pair with
:class:`~kernel_lib.errors.AcknowledgmentTooWeakError` naming both.

Every store enforces the append contract of §11.8.4 in :meth:`LogStore.append_batch`:

* per-trajectory ``sequence_number`` is gapless (the next append must be ``head + 1``);
* an identical retry of an event id (same canonical bytes) is acknowledged without a second copy;
* a different event under an existing event id raises ConflictingDuplicateError (split brain);
* an append whose ``owner_epoch`` is older than the newest the store has seen for that
  trajectory raises StaleOwnerError (fencing at the log, §11.5.1).

Arguments are checked the same way by every store, with the helpers below: :func:`parse_tier`
(an :class:`AckTier` or its label), :func:`check_events` (batch members must be
:class:`~kernel_lib.core.events.Event`, each at most :data:`~kernel_lib.limits.EVENT_BYTES_MAX`
canonical bytes), :func:`check_fence_args` (an int ``0 <= owner_epoch < 2**63``
and a non-empty trajectory id) and :func:`read_bounds` (``start < 1`` reads from 1, ``stop < start``
reads nothing).

A durable store opened with ``read_only=True`` changes nothing on disk: it reports what it found
in :attr:`LogStore.recovery` (a torn tail is reported, not trimmed) and refuses appends and
fences with :class:`~kernel_lib.errors.StoreReadOnlyError`.
"""

from __future__ import annotations

import enum
import operator
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Sequence

from kernel_lib.errors import (
    AcknowledgmentTooWeakError,
    ConflictingDuplicateError,
    EventTooLargeError,
    SequenceGapError,
    StaleOwnerError,
    PrefixRetiredError,
    StoreError,
    TierNotOfferedError,
)
from kernel_lib.core.events import Event
from kernel_lib.limits import EVENT_BYTES_MAX, OWNER_EPOCH_MAX


class FailureDomain(enum.IntEnum):
    """Failures a durability promise must survive, weakest first (§11.2, §11.3.1 table 2).

    The tiers nest: surviving a stronger failure implies surviving every weaker one.
    """

    NONE = 0            #: nothing: the process keeps running (only for demonstrations)
    PROCESS_CRASH = 1   #: the worker process dies; host, kernel page cache and volume intact
    HOST_CRASH = 2      #: power loss or host crash; the volume survives
    VOLUME_LOSS = 3     #: the worker's volume is permanently lost

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: "str | FailureDomain") -> "FailureDomain":
        if isinstance(text, FailureDomain):
            return text
        if not isinstance(text, str):
            raise StoreError(f"a failure domain is a FailureDomain or one of {[d.label for d in cls]}, got {text!r}")
        try:
            return cls[str(text).upper().replace("-", "_")]
        except KeyError:
            raise StoreError(f"unknown failure domain {text!r}; choose one of "
                             f"{[d.label for d in cls]}") from None


class AckTier(enum.Enum):
    """Acknowledgment tiers (§11.3.1, table 2) and the strongest failure each survives."""

    MEMORY = ("memory", FailureDomain.NONE)               #: queued in the runtime's own memory
    WRITE = ("write", FailureDomain.PROCESS_CRASH)        #: returned write(): kernel page cache
    FDATASYNC = ("fdatasync", FailureDomain.HOST_CRASH)   #: returned fdatasync()/fsync()
    QUORUM = ("quorum", FailureDomain.VOLUME_LOSS)        #: replicated store, off-volume quorum

    def __init__(self, label: str, survives_up_to: FailureDomain):
        self.label = label
        self.survives_up_to = survives_up_to

    @property
    def survives(self) -> frozenset[FailureDomain]:
        """Every failure domain this acknowledgment survives."""
        return frozenset(d for d in FailureDomain if d <= self.survives_up_to)

    def covers(self, domain: FailureDomain) -> bool:
        return domain <= self.survives_up_to

    @classmethod
    def parse(cls, text: "str | AckTier") -> "AckTier":
        if isinstance(text, AckTier):
            return text
        for t in cls:
            if t.label == str(text).lower():
                return t
        raise StoreError(f"unknown acknowledgment tier {text!r}; choose one of {[t.label for t in cls]}")


@dataclass(frozen=True, slots=True)
class AppendOutcome:
    """The acknowledgment of one event: where it is and at which tier; ``duplicate`` if it
    was an identical retry of an event the store already held."""

    event_id: str
    trajectory_id: str
    sequence_number: int
    tier: AckTier
    duplicate: bool = False


@dataclass
class RecoveryReport:
    """What a store found (and, opened read-write, repaired) when it opened.

    Fields:
        store: the store's kind (``"segment"``, ``"sqlite"``, ``"memory"``).
        path: the segment directory or SQLite file (None for memory).
        read_only: opened with ``read_only=True``: nothing was changed on disk.
        events_recovered: events readable after open. trajectories: trajectories among them.
        torn_tail_found: open found a torn (or never synced) tail after the last valid record.
        torn_tail_at: where it starts, ``"<segment-file>:<byte offset>"``.
        torn_tail_bytes: bytes from there to the end of the log (the last segment file included).
        torn_tail_reason: why the frame there is not valid (short header, CRC mismatch, ...).
        torn_tail_trimmed: open cut the torn tail off (read-write only; a read-only open leaves it
            on disk and reads only the valid prefix).
        bytes_trimmed, trimmed_at: what was cut and where (``"<segment-file>:<byte offset>"``).
        tail_damage: what the first bad frame looks like: ``"torn"`` (it is incomplete: a short
            header, bad magic, a body length that runs past the end of the file, a missing
            segment file) or ``"corrupt"`` (a complete record whose CRC fails or whose checked
            content is invalid: bit rot, or a write torn inside the record); None when clean.
        moved_aside: paths of the files beside the segments that hold, byte for byte, what a
            read-write open cut off (``<segment-file>.trimmed-at-<byte offset>``, with ``.2``,
            ``.3`` ... appended if that name is taken); stored bytes are never deleted.
        zero_tail_bytes: zeros found after the log's last byte that are not log content: the
            preallocated, never written space at the end of a segment log's last segment (kept,
            and reused by the next appends), plus any trailing run of at least
            :data:`~kernel_lib.log.segment.ZERO_RUN_NOT_COPIED_BYTES` zeros of a piece that was cut
            (counted here instead of copied into ``moved_aside``). 0 for the other stores.
        details: one human-readable line per finding or repair (empty when the log was clean);
            :meth:`notes` returns them.
    """

    store: str
    events_recovered: int = 0
    torn_tail_trimmed: bool = False
    bytes_trimmed: int = 0
    trimmed_at: str | None = None   # "segment-file:offset"
    details: list[str] = field(default_factory=list)
    path: str | None = None
    read_only: bool = False
    trajectories: int = 0
    torn_tail_found: bool = False
    torn_tail_at: str | None = None   # "segment-file:offset"
    torn_tail_bytes: int = 0
    torn_tail_reason: str | None = None
    tail_damage: str | None = None   # "torn" | "corrupt"
    moved_aside: list[str] = field(default_factory=list)
    zero_tail_bytes: int = 0

    def notes(self) -> list[str]:
        """Human-readable findings a reader of the log should see (empty when it was clean)."""
        return list(self.details)

    def to_dict(self) -> dict:
        return {
            "store": self.store, "path": self.path, "read_only": self.read_only,
            "events_recovered": self.events_recovered, "trajectories": self.trajectories,
            "torn_tail_found": self.torn_tail_found, "torn_tail_at": self.torn_tail_at,
            "torn_tail_bytes": self.torn_tail_bytes, "torn_tail_reason": self.torn_tail_reason,
            "torn_tail_trimmed": self.torn_tail_trimmed, "bytes_trimmed": self.bytes_trimmed,
            "trimmed_at": self.trimmed_at, "tail_damage": self.tail_damage,
            "moved_aside": list(self.moved_aside), "zero_tail_bytes": self.zero_tail_bytes,
            "details": list(self.details),
        }


@dataclass(frozen=True, slots=True)
class StoredRef:
    """What a store remembers about an event id: where it is and its digest."""

    trajectory_id: str
    sequence_number: int
    digest: str


#: Largest owner_epoch a fence may carry: every store keeps it in a signed 64-bit integer
#: (:data:`kernel_lib.limits.OWNER_EPOCH_MAX`; this name is kept for the ``kernel_lib.log`` API).
MAX_OWNER_EPOCH = OWNER_EPOCH_MAX


def parse_tier(tier: "AckTier | str") -> AckTier:
    """``tier`` as an :class:`AckTier`; a label (``"fdatasync"``, any case) is parsed.

    Raises:
        TierNotOfferedError: not a tier nor the label of one.
    """
    if isinstance(tier, AckTier):
        return tier
    if isinstance(tier, str):
        try:
            return AckTier.parse(tier)
        except StoreError:
            pass
    raise TierNotOfferedError(f"{tier!r} is not an acknowledgment tier; choose one of {[t.label for t in AckTier]}")


def check_events(events: Iterable[Event]) -> list[Event]:
    """The batch as a list, after checking that every member is an :class:`Event` of at most
    :data:`~kernel_lib.limits.EVENT_BYTES_MAX` canonical bytes (every store and the group
    committer call this before anything of the batch is written or queued).

    Raises:
        StoreError: a member is not an Event (nothing of the batch is appended).
        EventTooLargeError: a member's canonical encoding is over the limit (nothing of the batch
            is appended); the error names the event, its size and the limit.
    """
    try:
        batch = list(events)
    except TypeError:
        raise StoreError(f"append_batch takes a sequence of Event objects, got {type(events).__name__}") from None
    for i, e in enumerate(batch):
        if not isinstance(e, Event):
            raise StoreError(f"append_batch takes Event objects; batch member {i} is a {type(e).__name__} "
                             "(nothing of this batch was appended)")
        if len(e.canonical) > EVENT_BYTES_MAX:
            raise EventTooLargeError(
                f"event {e.event_id} ({e.event_type}) is {len(e.canonical):,} bytes, over the {EVENT_BYTES_MAX:,}-byte "
                "limit on one event (kernel_lib.limits.EVENT_BYTES_MAX); nothing of this batch was appended. Keep "
                "large content in a blob store and log its digest (§11.8.2)",
                event_id=e.event_id, size_bytes=len(e.canonical), limit_bytes=EVENT_BYTES_MAX)
    return batch


def check_fence_args(trajectory_id: str, owner_epoch: int) -> None:
    """Check the arguments of :meth:`LogStore.install_fence`.

    Raises:
        StoreError: ``trajectory_id`` is not a non-empty string, or ``owner_epoch`` is not an int
            (bool excluded) with ``0 <= owner_epoch <= MAX_OWNER_EPOCH``.
    """
    if not isinstance(trajectory_id, str) or not trajectory_id:
        raise StoreError(f"install_fence needs a non-empty trajectory id, got {trajectory_id!r}")
    if type(owner_epoch) is not int or not 0 <= owner_epoch <= MAX_OWNER_EPOCH:
        raise StoreError(f"install_fence needs an int owner_epoch with 0 <= owner_epoch < 2**63, got "
                         f"{owner_epoch!r} for {trajectory_id!r}")


def check_claim_args(trajectory_id: str, owner_epoch: "int | None") -> None:
    """Check the arguments of :meth:`LogStore.claim_epoch`.

    Raises:
        StoreError: ``trajectory_id`` is not a non-empty string, or ``owner_epoch`` is neither None
            nor an int (bool excluded) with ``1 <= owner_epoch <= MAX_OWNER_EPOCH``.
    """
    if not isinstance(trajectory_id, str) or not trajectory_id:
        raise StoreError(f"claim_epoch needs a non-empty trajectory id, got {trajectory_id!r}")
    if owner_epoch is not None and (type(owner_epoch) is not int or not 1 <= owner_epoch <= MAX_OWNER_EPOCH):
        raise StoreError(f"claim_epoch takes None or an int owner_epoch with 1 <= owner_epoch < 2**63, got "
                         f"{owner_epoch!r} for {trajectory_id!r}")


def next_claimed_epoch(trajectory_id: str, owner_epoch: "int | None", current: int) -> int:
    """The epoch :meth:`LogStore.claim_epoch` installs over the fence ``current``: ``current + 1``
    when ``owner_epoch`` is None, else ``owner_epoch`` if it is strictly newer than ``current``.

    Raises:
        StaleOwnerError: ``owner_epoch`` is not newer than ``current`` (another claimant reached
            the log first, or the epoch was already claimed).
        StoreError: the fence is already at :data:`MAX_OWNER_EPOCH`.
    """
    if owner_epoch is None:
        if current >= MAX_OWNER_EPOCH:
            raise StoreError(f"cannot claim a new owner_epoch on {trajectory_id}: the fence is at 2**63 - 1")
        return current + 1
    if owner_epoch <= current:
        raise StaleOwnerError(f"cannot claim owner_epoch={owner_epoch} on {trajectory_id}: the log has already seen "
                              f"owner_epoch={current} (another claimant reached the log first)")
    return owner_epoch


def check_fence_not_older(trajectory_id: str, owner_epoch: int, current: int) -> None:
    """Raise StaleOwnerError if ``owner_epoch`` is older than the fence ``current`` (§11.5.1)."""
    if owner_epoch < current:
        raise StaleOwnerError(f"cannot install owner_epoch={owner_epoch} on {trajectory_id}: "
                              f"the log has seen owner_epoch={current}")


def _index(value: object, name: str) -> int:
    if isinstance(value, bool):
        raise StoreError(f"read() {name} must be an int, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise StoreError(f"read() {name} must be an int, got {value!r}") from None


def check_retire_args(trajectory_id: str, through: object, head: int, checkpoint_event_id: object) -> int:
    """Check the arguments of :meth:`LogStore.retire_prefix` against the trajectory's ``head``.

    Raises:
        StoreError: bad trajectory id or checkpoint event id, ``through`` not an int (bool
            excluded), negative, or not below the head.
    """
    if not isinstance(trajectory_id, str) or not trajectory_id:
        raise StoreError(f"retire_prefix needs a non-empty trajectory id, got {trajectory_id!r}")
    if not isinstance(checkpoint_event_id, str) or not checkpoint_event_id:
        raise StoreError(f"retire_prefix needs the id of the Checkpoint event the suffix recovers from, got "
                         f"{checkpoint_event_id!r}")
    if type(through) is not int or through < 0:
        raise StoreError(f"retire_prefix needs an int position >= 0, got {through!r}")
    if through >= head:
        raise StoreError(f"cannot retire {trajectory_id!r} through #{through}: its head is #{head}, and compaction "
                         "always keeps a non-empty suffix (the checkpoint's own events)")
    return through


def prefix_retired(trajectory_id: str, lo: int, retired: int, checkpoint_event_id: str, where: str = "") -> None:
    """Raise :class:`PrefixRetiredError` if a read starting at ``lo`` reaches the retired prefix."""
    if retired and lo <= retired:
        raise PrefixRetiredError(
            f"{where}{trajectory_id!r} positions 1..{retired} were retired by log compaction; the log now starts "
            f"at #{retired + 1} and is recoverable from checkpoint event {checkpoint_event_id}: read from "
            f"#{retired + 1} (or restore) instead of #{lo}",
            trajectory_id=trajectory_id, retired_through=retired, checkpoint_event_id=checkpoint_event_id)


def read_bounds(start: int, stop: "int | None") -> tuple[int, "int | None"]:
    """Normalize :meth:`LogStore.read` bounds to ``(lo, hi)``, both inclusive.

    ``start < 1`` is read as 1; ``hi`` is None when ``stop`` is None (to the head). The range is
    empty when ``hi < lo`` (e.g. ``stop < start`` or ``stop < 1``).

    Raises:
        StoreError: ``start`` or ``stop`` is not an int.
    """
    lo = max(_index(start, "start"), 1)
    return lo, (None if stop is None else _index(stop, "stop"))


def check_append(
    event: Event,
    existing: StoredRef | None,
    existing_bytes: "bytes | None",
    head: int,
    fence: int,
) -> bool:
    """Decide one append under the §11.8.4 contract. Shared by every store.

    Args:
        event: the event to append.
        existing: what the store holds under ``event.event_id`` (None if nothing).
        existing_bytes: the stored canonical bytes of that event, if the store has them at hand
            (compared instead of the digest when given).
        head: the trajectory's last sequence number (0 when empty).
        fence: the newest owner_epoch the store has seen for the trajectory.

    Returns:
        True if the event is an identical retry (acknowledge, do not store again); False if it
        must be stored.

    Raises:
        ConflictingDuplicateError, StaleOwnerError, SequenceGapError.
    """
    if existing is not None:
        same = (existing_bytes == event.canonical) if existing_bytes is not None else (existing.digest == event.digest)
        if same:
            return True
        raise ConflictingDuplicateError(
            f"event id {event.event_id} already holds a different event "
            f"(stored {existing.trajectory_id}#{existing.sequence_number} digest {existing.digest[:12]}, "
            f"new {event.trajectory_id}#{event.sequence_number} digest {event.digest[:12]}): "
            "integrity violation or split brain; refusing to drop or overwrite either"
        )
    if event.owner_epoch < fence:
        raise StaleOwnerError(
            f"append to {event.trajectory_id} stamped owner_epoch={event.owner_epoch}, but the log has "
            f"seen owner_epoch={fence}: the writer no longer owns the trajectory (event {event.event_id})"
        )
    if event.sequence_number != head + 1:
        raise SequenceGapError(
            f"append to {event.trajectory_id} has sequence_number={event.sequence_number}, expected "
            f"{head + 1} (sequence numbers are gapless; event {event.event_id})"
        )
    return False


def decide_append(event: Event, existing: StoredRef | None, existing_bytes: "bytes | None", head: int,
                  fence: int, tier: AckTier) -> "AppendOutcome | StoreError | None":
    """:func:`check_append` as a value, for a batch loop: None means store the event; an
    ``AppendOutcome`` with ``duplicate=True`` acknowledges an identical retry; a ``StoreError``
    is that event's refusal (the rest of the batch goes on)."""
    try:
        if check_append(event, existing, existing_bytes, head, fence):
            return AppendOutcome(event.event_id, existing.trajectory_id, existing.sequence_number, tier, True)
    except StoreError as exc:
        return exc
    return None


class LogStore(ABC):
    """One interface over every log store. Stores are thread-safe for appends.

    Subclasses set ``name`` and ``offered_tiers``, and implement the abstract methods. After
    :meth:`close`, every method but ``close`` raises StoreClosedError.

    Attributes:
        recovery: what open found (:class:`RecoveryReport`).
        read_only: opened with ``read_only=True`` (appends and fences raise StoreReadOnlyError).
    """

    name: str = "store"
    offered_tiers: tuple[AckTier, ...] = ()
    recovery: RecoveryReport
    read_only: bool = False
    #: The store's declaration behind one barrier per step (:func:`deferral_tier`): an append
    #: acknowledged at a weaker tier is covered by the next append acknowledged at a stronger one
    #: on this store (one barrier flushes every earlier write: the segment file's ``fdatasync``;
    #: SQLite's fdatasync of its WAL after a commit). False (the default): no such promise.
    barrier_covers_earlier_writes: bool = False

    # --- appends ------------------------------------------------------------------------------
    @abstractmethod
    def append_batch(self, events: Sequence[Event], tier: AckTier) -> list["AppendOutcome | StoreError"]:
        """Append ``events`` in order and make them durable at ``tier`` with one flush.

        Each event is decided independently under :func:`check_append` (earlier events of the
        batch count), so one bad event yields its error in the returned list without failing the
        others. Nothing is acknowledged before the flush returns. ``tier`` may be an
        :class:`AckTier` or its label.

        Raises:
            TierNotOfferedError: the store cannot honour ``tier`` (or it is not a tier).
            StoreError: a batch member is not an Event (checked before anything is written).
            StoreFailedError: the flush itself failed; no event of the batch is acknowledged.
            StoreReadOnlyError, StoreClosedError: opened read-only, or closed.
        """

    def append(self, event: Event, tier: AckTier) -> AppendOutcome:
        """Append one event; raise its error instead of returning it. See :meth:`append_batch`."""
        (out,) = self.append_batch([event], tier)
        if isinstance(out, Exception):
            raise out
        return out

    # --- reads --------------------------------------------------------------------------------
    @abstractmethod
    def read(self, trajectory_id: str, start: int = 1, stop: int | None = None) -> Iterator[Event]:
        """Events of one trajectory with ``start <= sequence_number <= stop``, in order.

        Bounds as :func:`read_bounds`: ``start < 1`` reads from 1, ``stop=None`` to the head,
        ``stop < start`` nothing. Raises StoreError for non-int bounds.
        """

    @abstractmethod
    def head(self, trajectory_id: str) -> int:
        """Last sequence number of the trajectory (0 if it has no events)."""

    @abstractmethod
    def fence(self, trajectory_id: str) -> int:
        """Newest owner_epoch this store has seen for the trajectory (0 if none)."""

    @abstractmethod
    def install_fence(self, trajectory_id: str, owner_epoch: int) -> None:
        """Record a new ownership generation durably, so older owners' appends are rejected.

        Raises:
            StaleOwnerError: ``owner_epoch`` is older than the current fence.
            StoreError: bad arguments (see :func:`check_fence_args`).
            StoreReadOnlyError, StoreClosedError: opened read-only, or closed.
        """

    def claim_epoch(self, trajectory_id: str, owner_epoch: "int | None" = None) -> int:
        """Claim a new ownership generation for the trajectory in one atomic step and return it.

        Reading the fence and installing it are one operation (one ``BEGIN IMMEDIATE``
        transaction in SQLite, the store's lock in the segment and memory stores), and the epoch
        installed is strictly newer than every epoch the log has seen: two claimants racing on
        the same log, from two threads or two processes, never both get the same epoch. With
        ``owner_epoch=None`` the epoch is the fence + 1; with an epoch (e.g. a lease's), that
        epoch is installed only if it is newer than the fence. Contrast :meth:`install_fence`,
        which also accepts the current epoch again.

        Raises:
            StaleOwnerError: ``owner_epoch`` is not newer than the fence (nothing installed).
            StoreError: bad arguments (:func:`check_claim_args`), or a store that cannot claim
                atomically (this default).
            StoreReadOnlyError, StoreClosedError: opened read-only, or closed.
        """
        raise StoreError(f"store {self.name!r} cannot claim an owner_epoch atomically; use a store that implements "
                         "claim_epoch")

    # --- log compaction (§11.8.3) --------------------------------------------------------------
    def retired_through(self, trajectory_id: str) -> int:
        """Last position that log compaction retired (0: the whole log is retained). Reads of
        positions ``<= retired_through`` raise :class:`~kernel_lib.errors.PrefixRetiredError`."""
        return 0

    def retire_prefix(self, trajectory_id: str, through: int, *, checkpoint_event_id: str) -> int:
        """Delete events ``1..through`` of one trajectory, atomically and durably, keeping the
        suffix (whose first event is ``through + 1``) and the head, fence and event ids unchanged.

        This is the storage primitive only: it checks the shape of the request, not the promises.
        Call it through :func:`kernel_lib.retention.compact`, which first proves that a newer
        checkpoint and its dependencies are durable and that no replay or audit hold needs the
        prefix. Retiring again at or below the current mark is a no-op.

        Args:
            through: last position to retire; must be below the head (the suffix is never empty).
            checkpoint_event_id: the ``Checkpoint`` event (in the retained suffix) the trajectory
                is recoverable from afterwards; recorded with the mark and named by
                :class:`~kernel_lib.errors.PrefixRetiredError`.

        Returns:
            The retired mark after the call.

        Raises:
            StoreError: this store cannot compact (this default), or ``through`` is not an int
                with ``0 <= through < head``. StoreReadOnlyError, StoreClosedError.
        """
        raise StoreError(f"store {self.name!r} does not support log compaction (retire_prefix); use the SQLite "
                         "or memory store")

    @abstractmethod
    def trajectories(self) -> list[str]:
        """Ids of every trajectory with at least one event, sorted."""

    @abstractmethod
    def close(self) -> None:
        """Release files and locks. Idempotent."""

    # --- helpers ------------------------------------------------------------------------------
    def check_tier(self, tier: "AckTier | str") -> AckTier:
        """``tier`` parsed (see :func:`parse_tier`); raises TierNotOfferedError unless offered."""
        tier = parse_tier(tier)
        if tier not in self.offered_tiers:
            raise TierNotOfferedError(
                f"store {self.name!r} offers {[t.label for t in self.offered_tiers]}, not {tier.label!r}")
        return tier

    def strongest_tier(self) -> AckTier:
        return max(self.offered_tiers, key=lambda t: t.survives_up_to)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def choose_tier(store: LogStore, must_survive: FailureDomain) -> AckTier:
    """The cheapest tier ``store`` offers whose acknowledgment survives ``must_survive``.

    Raises:
        AcknowledgmentTooWeakError: no offered tier survives it; the message names the store's
            strongest acknowledgment, what that survives, and the failure domain required.
    """
    fitting = [t for t in store.offered_tiers if t.covers(must_survive)]
    if not fitting:
        best = store.strongest_tier()
        survives = ", ".join(d.label for d in sorted(best.survives) if d) or "no failure at all"
        raise AcknowledgmentTooWeakError(store.name, best.label, survives, must_survive.label)
    return min(fitting, key=lambda t: t.survives_up_to)


def deferral_tier(store: LogStore, tier: AckTier) -> AckTier:
    """The tier of a deferred append on ``store`` for a trajectory acknowledged at ``tier``: the
    cheapest offered tier that still survives a process crash and is weaker than ``tier``, when
    the store declares :attr:`LogStore.barrier_covers_earlier_writes`; otherwise ``tier`` itself
    (nothing is deferred). One durable barrier per step, §11.3.1 and §11.3.4."""
    if not store.barrier_covers_earlier_writes:
        return tier
    weaker = [t for t in store.offered_tiers
              if t.covers(FailureDomain.PROCESS_CRASH) and t.survives_up_to < tier.survives_up_to]
    return min(weaker, key=lambda t: t.survives_up_to) if weaker else tier
