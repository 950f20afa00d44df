"""Typed errors raised by kernel_lib.

Every error a user can provoke with bad input has its own class here, so callers (the CLI,
notebooks, widgets) can catch it and show a clear message instead of a traceback. All derive
from :class:`KernelError`.
"""

from __future__ import annotations


class KernelError(Exception):
    """Base class of every error kernel_lib raises on purpose."""


# --- events (§11.2.2) -------------------------------------------------------------------------


class EventError(KernelError):
    """An event could not be built, encoded or decoded. ``event_id`` names it when known."""

    def __init__(self, message: str, *, event_id: str | None = None, event_type: str | None = None):
        self.event_id = event_id
        self.event_type = event_type
        where = []
        if event_type:
            where.append(f"type={event_type}")
        if event_id:
            where.append(f"event_id={event_id}")
        super().__init__(f"{message}" + (f" [{', '.join(where)}]" if where else ""))


class UnknownEventTypeError(EventError):
    """The event's type is not registered in this build."""


class UnknownSchemaVersionError(EventError):
    """The event's type is known but its schema version is not."""


class MalformedEventError(EventError):
    """The envelope or payload does not match its declared schema (or holds a secret)."""


# --- log stores (§11.3, §11.8.4) --------------------------------------------------------------


class StoreError(KernelError):
    """A log store could not do what was asked."""


class AcknowledgmentTooWeakError(StoreError):
    """The store's strongest acknowledgment does not survive the failure domain required.

    Raised when a trajectory that must survive ``required`` is opened on a store whose tiers
    survive at most ``strongest`` (§11.3.1, table 2).
    """

    def __init__(self, store: str, strongest: str, survives: str, required: str):
        self.store, self.strongest, self.survives, self.required = store, strongest, survives, required
        super().__init__(
            f"store {store!r} acknowledges at best with {strongest!r}, which survives {survives}; "
            f"the trajectory must survive {required!r}"
        )


class TierNotOfferedError(StoreError):
    """The store cannot honour the acknowledgment tier asked for."""


class SequenceGapError(StoreError):
    """An append's sequence_number is not the next one for its trajectory (gapless rule)."""


class ConflictingDuplicateError(StoreError):
    """A different event arrived under an event id the store already holds (§11.8.4).

    This is an integrity violation or a split brain (two workers both acting as owner), never an
    idempotent retry, so it is raised rather than dropped.
    """


class StaleOwnerError(StoreError):
    """An append carries an owner_epoch older than the newest this store has seen (fencing)."""


class CorruptLogError(StoreError):
    """Damage was found before the tail of a segment log: not a torn write, a hard error."""


class StoreFailedError(StoreError):
    """A durable flush failed; the store refuses appends until reopened (its tail is unknown)."""


class StoreClosedError(StoreError):
    """The store was used after close()."""


# --- record, fold, dispatch (§11.2.1, §11.3.2) -----------------------------------------------


class FoldError(KernelError):
    """The events cannot be folded: wrong trajectory, a sequence gap, or an unsupported reducer."""


class AdmissionDenied(KernelError):
    """Admission refused a proposal (authorization or budget, §11.3.2)."""


class DispatchWithheld(KernelError):
    """The dispatch-time recheck withheld an admitted, unsent attempt; it keeps its reservation."""


class StaleRecordError(KernelError):
    """The dispatch gate's trajectory record does not describe the end of the log it appends to
    (it was folded from a lagging replica, or another writer appended since): deciding from it
    could log a second intent for an attempt already logged, or miss an in-doubt operation, so
    nothing is appended. Fold the authoritative log again (§11.3.3 completeness rule, §11.9)."""


class ConfigError(KernelError):
    """A parameter is out of range or inconsistent."""


class StoreBusyError(StoreError):
    """Another connection held the store's lock past the busy timeout (SQLITE_BUSY/LOCKED).

    Transient and retryable: nothing of the call was applied, and the store stays usable.
    """


class StoreReadOnlyError(StoreError):
    """An append or a fence was attempted on a store opened with ``read_only=True``."""


# --- checkpoint cadence (§11.4.3) -------------------------------------------------------------


class CadenceError(KernelError):
    """A checkpoint-cadence computation (kernel_lib.cadence) could not be carried out."""


class CadenceParameterError(CadenceError, ConfigError, ValueError):
    """A cadence parameter is out of range: a negative pause, a zero failure rate, a stride
    below 1, a crash turn outside the run, a non-finite number. ``name`` names the parameter."""

    def __init__(self, message: str, *, name: str | None = None):
        self.name = name
        super().__init__(message)


class FailureDataError(CadenceError):
    """A failure-record file (LANL format) cannot be read as such. ``path`` names the file and
    ``line`` the 1-based line of the file (the header is line 1) when one row is to blame."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None):
        self.path, self.line = path, line
        where = f"{path}" if path else ""
        if line is not None:
            where += f":{line}"
        super().__init__(f"{where}: {message}" if where else message)


# --- checkpoints and snapshots (§11.4.1, §11.4.2) ----------------------------------------------


class CheckpointError(KernelError):
    """A checkpoint could not be captured or published: the record and the workspace do not
    describe the same log position, a workspace file type cannot be snapshotted, or a capture
    argument is inconsistent. Nothing was published (the previous checkpoint stays in force)."""


class UnrecoverableStateError(KernelError):
    """Restore cannot rebuild the state at the requested log position (§11.4.1): an object it
    needs (checkpoint manifest, record snapshot or delta, tree, workspace delta, file blob,
    required artifact) is missing or its bytes do not match their SHA-256 digest, or the pieces
    disagree about which state they describe. ``missing`` lists ``(kind, name)`` of every object
    at fault. Restore fails fast rather than pair a log position with an older tree."""

    def __init__(self, message: str, *, missing: "tuple[tuple[str, str], ...] | list[tuple[str, str]]" = ()):
        self.missing = tuple(missing)
        super().__init__(message)


class RecordFormatError(KernelError, ValueError):
    """Data given to :meth:`kernel_lib.core.record.TrajectoryRecord.from_dict` is not a trajectory
    record (a missing field, a wrong type)."""


# --- ownership, fencing and availability (§11.5.1) ---------------------------------------------


class OwnershipError(KernelError):
    """Trajectory ownership could not be granted, kept or verified (kernel_lib.ownership.leases)."""


class LeaseHeldError(OwnershipError):
    """Another owner holds an unexpired lease on the trajectory, so no new grant is issued yet.

    ``holder`` and ``owner_epoch`` name the current grant; ``expires_at_s`` is its expiry on the
    coordinator's clock (seconds) and ``remaining_s`` how long until then."""

    def __init__(self, message: str, *, trajectory_id: str = "", holder: str = "", owner_epoch: int = 0,
                 expires_at_s: float = 0.0, remaining_s: float = 0.0):
        self.trajectory_id, self.holder, self.owner_epoch = trajectory_id, holder, owner_epoch
        self.expires_at_s, self.remaining_s = expires_at_s, remaining_s
        super().__init__(message)


class LeaseLostError(OwnershipError):
    """A lease is no longer the trajectory's current grant: a newer owner_epoch was issued
    (``reason="superseded"``), it ran past its expiry (``"expired"``), it was released
    (``"released"``), or the coordinator has no such grant (``"unknown"``). ``current_epoch`` is
    the coordinator's newest owner_epoch for the trajectory (0 if none)."""

    def __init__(self, message: str, *, trajectory_id: str = "", owner_epoch: int = 0, current_epoch: int = 0,
                 reason: str = "superseded"):
        self.trajectory_id, self.owner_epoch = trajectory_id, owner_epoch
        self.current_epoch, self.reason = current_epoch, reason
        super().__init__(message)


class CoordinatorUnavailableError(OwnershipError):
    """The ownership coordinator could not answer (its database is locked past the timeout, failed,
    is not a coordinator database, or was closed). Nothing was granted; a caller that needed an
    answer to act must withhold the action."""


class FencedRequestError(OwnershipError):
    """A downstream resource (the executor) refused a request stamped with an owner_epoch older
    than the newest it has seen for the trajectory or operation. ``owner_epoch`` is the request's
    epoch, ``fence`` the resource's."""

    def __init__(self, message: str, *, owner_epoch: int | None = None, fence: int | None = None):
        self.owner_epoch, self.fence = owner_epoch, fence
        super().__init__(message)


class ReconstructionUnavailableError(OwnershipError):
    """The authoritative log prefix or a required checkpoint object could not be shown complete,
    so reconstruction is unavailable (never an empty history). ``availability`` is the
    :class:`kernel_lib.ownership.leases.Availability` with the reasons."""

    def __init__(self, message: str, *, availability=None):
        self.availability = availability
        super().__init__(message)


class InboxError(KernelError):
    """The durable result inbox (kernel_lib.gate.inbox) refused a request (§11.5.3)."""


class InboxRecordError(InboxError, ValueError):
    """A completion record cannot enter the inbox: a required field is missing or has the wrong
    type, no public key is registered for its endpoint, or its trajectory scope is missing."""


class InboxConflictError(InboxError):
    """A completion record contradicts one the inbox already holds for the same (trajectory,
    operation, attempt), or names another trajectory than the stored copy. The stored entry is
    kept as it was; the newcomer is not stored."""


# --- retention, compaction and the storage engine contract (§11.8) ------------------------------


class PrefixRetiredError(StoreError):
    """A read reached log positions that log compaction retired (§11.8.3). The events at
    ``1..retired_through`` are gone; the trajectory is recoverable only from the checkpoint named
    ``checkpoint_event_id`` (published in the retained suffix) onwards. Positions before
    ``retired_through + 1`` are past the surviving replay interval."""

    def __init__(self, message: str, *, trajectory_id: str = "", retired_through: int = 0,
                 checkpoint_event_id: str = ""):
        self.trajectory_id = trajectory_id
        self.retired_through = retired_through
        self.checkpoint_event_id = checkpoint_event_id
        super().__init__(message)


class RetentionError(KernelError):
    """Base class of the storage engine's retention errors (:mod:`kernel_lib.retention`)."""


class DanglingReferenceError(RetentionError):
    """An event or checkpoint would publish a reference to a payload that is not durable in the
    payload store (or not registered for that holder): the payload must be durable before any
    committed reference to it (§11.8.2). Nothing was appended. ``digests`` names the payloads."""

    def __init__(self, message: str, *, digests: "tuple[str, ...] | list[str]" = ()):
        self.digests = tuple(digests)
        super().__init__(message)


class PayloadAccessError(RetentionError):
    """A tenant asked for a payload no trajectory of that tenant references: a content digest
    names bytes, it does not grant the right to read them (§11.8.2)."""


class CompactionRefusedError(RetentionError):
    """Log compaction would break a promise (§11.8.3), so nothing was retired. ``reasons`` lists
    each blocking condition: no newer published checkpoint, a checkpoint object missing or not
    durable across the declared failure domain, an active replay / audit / compliance hold on the
    prefix."""

    def __init__(self, message: str, *, reasons: "tuple[str, ...] | list[str]" = ()):
        self.reasons = tuple(reasons)
        super().__init__(message)


class BackpressureError(StoreError):
    """The store is full and no space was released within the stall timeout (§11.8.4). The
    append was NOT made and is NOT acknowledged; nothing already stored was dropped or
    overwritten. The trajectory must stay stalled (no dispatch) until the append succeeds."""
