"""Every exception kernel_lib raises on purpose, in one tree.

Callers (the CLI, notebooks, widgets, a retry loop) catch these by family instead of parsing
messages. Two kinds of outcome share one root, :class:`KernelException`:

* **faults** derive from :class:`KernelError`: something is wrong with the input, the stored
  data, a resource or the environment, and the operation asked for did not happen.
  :class:`ConfigError` is the fault for bad *user input* (a parameter out of range or
  inconsistent); a wrong type passed between kernel_lib's own modules is a programming error
  and raises ``TypeError`` or fails an assertion instead.
* **refusals** derive from :class:`Refusal`: the kernel worked as designed and decided not to do
  a step (admission denied it, or the dispatch-time recheck withheld it, §11.3.2). A refusal is
  an answer, not a failure, so ``Refusal`` is deliberately *not* a ``KernelError``: an
  ``except KernelError`` around a step does not swallow it. Catch :class:`Refusal` (or the
  specific class) where a refusal is an expected answer, and :class:`KernelException` where
  anything kernel_lib raises on purpose is handled the same way (the CLI does: one line on
  stderr, exit code 2).

``retryable`` (a ``bool`` class attribute, ``False`` on the root) is ``True`` only where the
error means *nothing was applied, and the same request may succeed later with no other change*,
so backoff and circuit breakers can key on it: :class:`StoreBusyError`,
:class:`QuorumUnavailableError`, :class:`CoordinatorUnavailableError`, :class:`LeaseHeldError`
and :class:`BackpressureError`, and the subclasses that inherit it. Read it on the instance
(``exc.retryable``): a raise site whose particular failure waiting cannot clear passes
``retryable=False`` to the constructor (a closed coordinator, a batch larger than the whole
store budget).

The tree (first base class; ``also`` names further bases; ``[retryable]`` marks the classes
that are retryable)::

    KernelException
        KernelError
            ConfigError
                HerdConfigError
            EventError
                UnknownEventTypeError
                UnknownSchemaVersionError
                MalformedEventError
            FoldError
            RecordFormatError  (also ValueError)
            StaleRecordError
            StoreError
                AcknowledgmentTooWeakError
                TierNotOfferedError
                SequenceGapError
                ConflictingDuplicateError
                StaleOwnerError
                LogNotFoundError
                CorruptLogError
                StoreFailedError
                StoreClosedError
                StoreReadOnlyError
                StoreBusyError  [retryable]
                PrefixRetiredError
                EventTooLargeError
                BackpressureError  [retryable]
                    GroupCommitBackpressureError  [retryable]
                QuorumUnavailableError  [retryable]
            QuorumSetupError
            ReplicationSessionError
                ClusterNotRunningError
                ClusterRunningError
                UnknownMemberError  (also ConfigError)
                MemberStateError
            CadenceError
                CadenceParameterError  (also ConfigError, ValueError)
                FailureDataError
            CheckpointError
            UnrecoverableStateError
                CheckpointRetiredError
            OwnershipError
                LeaseHeldError  [retryable]
                    LeaseWaitTimeoutError  [retryable]
                LeaseLostError
                CoordinatorUnavailableError  [retryable]
                FencedRequestError
                ReconstructionUnavailableError
                    LogTruncatedError
            InboxError
                InboxRecordError  (also ValueError)
                InboxConflictError
            RetentionError
                DanglingReferenceError
                PayloadAccessError
                CompactionRefusedError
            ReplayMismatchError
                ReplayInputMismatchError
            LiveCallDuringReplayError
            ImportFormatError  (also ValueError)
            UnknownImportFormatError  (also ValueError)
            LiveError
                SnapshotMismatchError
                PatchApplyError
                EvidenceSignatureError
                LiveProcessError
                OperationStillRunningError
                SessionStateError
                    UnrecoveredRunError
                    NoWorkerRunningError
                UnknownCrashPointError  (also ConfigError)
                FleetError
                    FleetTimeoutError
            RecoveryError
                ToolContractError  (also ConfigError)
                PlanError  (also ConfigError)
                CompensatorBindError
                SagaTransitionError
                SagaPanicError
                    PivotCrossedError
                PivotRefusedError
                VerificationError  (also ConfigError)
                OutboxError
                StepFailedError
                RecoveryTerminated
                ToolFailedError
                ServiceError
                    ServiceFaultError
                    ServiceDownError  (also ConnectionRefusedError)
                    BrokerUnreachableError
                RecoveryPolicyError  (also ConfigError)
                    OmegaError  (also ValueError)
                WatchdogError
                    WatchdogConfigError  (also ConfigError)
                    SemanticDeadlockError
                    WorkspaceMissingError
                    WorkspaceUnreadableError
                    WatchTimelineError  (also ValueError)
                    WatchInputError  (also ValueError)
                GatewayError
                    GatewayConfigError  (also ConfigError)
                    BreakerStoreError
                QuarantineError
                    ContainmentError
                        ContainmentUnavailableError
                        QuarantineIncompleteError
                    TaintLedgerError
                    ArtifactError  (also ValueError)
        Refusal
            AdmissionDenied
                ActionMaskedRefusal
            DispatchWithheld
            TrajectoryFrozenRefusal
                TrajectoryQuarantinedRefusal
            ArtifactQuarantined
            ClearanceRefused
            EgressDenied

This module imports nothing from kernel_lib (it is the lowest layer), so every module may raise
and catch these. ``tests/test_errors.py`` checks that no exception class is defined elsewhere in
kernel_lib and that this tree matches the classes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = [
    "KernelException", "KernelError", "Refusal", "ConfigError", "AdmissionDenied", "DispatchWithheld", "EventError",
    "UnknownEventTypeError", "UnknownSchemaVersionError", "MalformedEventError", "FoldError", "RecordFormatError",
    "StaleRecordError", "StoreError", "AcknowledgmentTooWeakError", "TierNotOfferedError", "SequenceGapError",
    "ConflictingDuplicateError", "StaleOwnerError", "LogNotFoundError", "CorruptLogError", "StoreFailedError",
    "StoreClosedError",
    "StoreReadOnlyError", "StoreBusyError", "PrefixRetiredError", "EventTooLargeError", "BackpressureError",
    "GroupCommitBackpressureError", "QuorumUnavailableError", "QuorumSetupError", "ReplicationSessionError",
    "ClusterNotRunningError", "ClusterRunningError", "UnknownMemberError", "MemberStateError", "CadenceError",
    "CadenceParameterError", "FailureDataError", "CheckpointError", "UnrecoverableStateError", "CheckpointRetiredError",
    "OwnershipError", "LeaseHeldError", "LeaseWaitTimeoutError", "LeaseLostError", "CoordinatorUnavailableError",
    "FencedRequestError", "ReconstructionUnavailableError", "LogTruncatedError", "InboxError", "InboxRecordError",
    "InboxConflictError",
    "RetentionError", "DanglingReferenceError", "PayloadAccessError", "CompactionRefusedError",
    "ReplayMismatchError", "ReplayInputMismatchError",
    "LiveCallDuringReplayError", "ImportFormatError", "UnknownImportFormatError",
    "LiveError", "SnapshotMismatchError", "PatchApplyError", "EvidenceSignatureError", "LiveProcessError",
    "OperationStillRunningError", "SessionStateError", "UnrecoveredRunError", "NoWorkerRunningError",
    "UnknownCrashPointError", "RecoveryError", "ToolContractError", "PlanError", "CompensatorBindError",
    "SagaTransitionError", "SagaPanicError", "PivotCrossedError", "PivotRefusedError", "OutboxError",
    "VerificationError", "StepFailedError", "RecoveryTerminated", "ToolFailedError", "ServiceError",
    "ServiceFaultError",
    "ServiceDownError", "BrokerUnreachableError", "TrajectoryFrozenRefusal",
    "ActionMaskedRefusal", "SemanticDeadlockError", "WatchdogConfigError",
]

# --- the roots: faults and refusals ---------------------------------------------------------------


class KernelException(Exception):
    """Root of everything kernel_lib raises on purpose: the faults (:class:`KernelError`) and the
    refusals (:class:`Refusal`).

    ``retryable``: ``True`` when nothing was applied and the same request may succeed later (see
    the module docstring); a class attribute, overridden on one instance by ``retryable=``."""

    retryable: bool = False

    def __init__(self, *args: Any, retryable: bool | None = None):
        super().__init__(*args)
        if retryable is not None:
            self.retryable = bool(retryable)


class KernelError(KernelException):
    """Base class of every fault kernel_lib raises on purpose (not of the refusals: :class:`Refusal`)."""


class Refusal(KernelException):
    """Base class of the outcomes that are not faults: the kernel decided, by design, not to do a
    step (§11.3.2). Not a :class:`KernelError`, so ``except KernelError`` does not catch it."""


class ConfigError(KernelError):
    """A parameter is out of range or inconsistent: bad user input (a wrong type passed between
    kernel_lib's own modules is a ``TypeError`` instead)."""


# --- refusals: outcomes that are not faults (§11.3.2) ---------------------------------------------


class AdmissionDenied(Refusal):
    """Admission refused a proposal (authorization or budget, §11.3.2)."""


class DispatchWithheld(Refusal):
    """The dispatch-time recheck withheld an admitted, unsent attempt; it keeps its reservation."""


# --- events (§11.2.2) -----------------------------------------------------------------------------


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


# --- record and fold (§11.2.1, §11.3.3) -----------------------------------------------------------


class FoldError(KernelError):
    """The events cannot be folded: wrong trajectory, a sequence gap, or an unsupported reducer."""


class RecordFormatError(KernelError, ValueError):
    """Data given to :meth:`kernel_lib.core.record.TrajectoryRecord.from_dict` is not a trajectory
    record (a missing field, a wrong type)."""


class StaleRecordError(KernelError):
    """The dispatch gate's trajectory record does not describe the end of the log it appends to
    (it was folded from a lagging replica, or another writer appended since): deciding from it
    could log a second intent for an attempt already logged, or miss an in-doubt operation, so
    nothing is appended. Fold the authoritative log again (§11.3.3 completeness rule, §11.9)."""


# --- log stores (§11.3, §11.8.4) ------------------------------------------------------------------


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


class LogNotFoundError(StoreError):
    """No log exists at the path a store was opened at, and the caller did not ask to create one
    (``create=True``): a missing log is not an empty one (a resuming worker pointed at a wrong
    path must not conclude that nothing happened)."""


class CorruptLogError(StoreError):
    """Damage was found before the tail of a segment log: not a torn write, a hard error."""


class StoreFailedError(StoreError):
    """A durable flush failed; the store refuses appends until reopened (its tail is unknown)."""


class StoreClosedError(StoreError):
    """The store was used after close()."""


class StoreReadOnlyError(StoreError):
    """An append or a fence was attempted on a store opened with ``read_only=True``."""


class StoreBusyError(StoreError):
    """Another connection held the store's lock past the busy timeout (SQLITE_BUSY/LOCKED).

    Transient and retryable: nothing of the call was applied, and the store stays usable.
    """

    retryable = True


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


class EventTooLargeError(StoreError):
    """An event's canonical encoding is larger than :data:`kernel_lib.limits.EVENT_BYTES_MAX`,
    the bound every store applies. Nothing of its batch was appended. Keep the large content in a
    blob store and log its digest (§11.8.2). ``size_bytes`` and ``limit_bytes`` give the figures."""

    def __init__(self, message: str, *, event_id: str = "", size_bytes: int = 0, limit_bytes: int = 0):
        self.event_id = event_id
        self.size_bytes = size_bytes
        self.limit_bytes = limit_bytes
        super().__init__(message)


class BackpressureError(StoreError):
    """The store is full and no space was released within the stall timeout (§11.8.4). The
    append was NOT made and is NOT acknowledged; nothing already stored was dropped or
    overwritten. The trajectory must stay stalled (no dispatch) until the append succeeds.

    Retryable: space may be released later. A batch larger than the whole budget is raised
    with ``retryable=False`` (no release can ever make it fit)."""

    retryable = True


class GroupCommitBackpressureError(BackpressureError):
    """A group committer's queue of unflushed batches stayed full for the whole timeout the writer
    gave (:data:`kernel_lib.limits.GROUP_COMMIT_QUEUED_BATCHES_MAX`). The events were NOT queued
    and are NOT acknowledged. Without a timeout a writer waits instead; it is never dropped."""


class QuorumUnavailableError(StoreError):
    """No etcd member acknowledged the request within the timeout (no majority reachable, or all
    members down). Nothing is acknowledged; a write may still commit later if a majority returns.

    Retryable with the same request: the quorum store answers an event that did commit as an
    idempotent duplicate (§11.8.4), so resending it cannot write it twice."""

    retryable = True


# --- the quorum cluster (§11.3.1) -----------------------------------------------------------------


class QuorumSetupError(KernelError):
    """etcd cannot be started here: the binary is missing, a member did not become healthy, or
    the cluster has no leader within the start timeout."""


# --- the replication session: a cluster broken by hand (kernel_lib.quorum.session) ----------------


class ReplicationSessionError(KernelError):
    """A :class:`~kernel_lib.quorum.session.ReplicationSession` step was asked for that cannot run
    (base class of the session's errors)."""


class ClusterNotRunningError(ReplicationSessionError):
    """The step needs a running cluster, and none is started (never started, or stopped)."""


class ClusterRunningError(ReplicationSessionError):
    """``start`` was asked for while the session's cluster is still running."""


class UnknownMemberError(ReplicationSessionError, ConfigError):
    """The member named is not one of the cluster's (give an index 0..N-1 or a name such as ``m1``)."""


class MemberStateError(ReplicationSessionError):
    """The member exists but is in a state where the step makes no sense (e.g. restart a member
    whose volume was destroyed, pause a member that is not running, resume one that is not paused)."""


# --- checkpoint cadence (§11.4.3) -----------------------------------------------------------------


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


# --- checkpoints and snapshots (§11.4.1, §11.4.2) -------------------------------------------------


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

    def __init__(self, message: str, *, missing: tuple[tuple[str, str], ...] | list[tuple[str, str]] = ()):
        self.missing = tuple(missing)
        super().__init__(message)


class CheckpointRetiredError(UnrecoverableStateError):
    """Restore needed a checkpoint that was retired on purpose (consolidated into a newer full
    base, §11.4.2), and no fallback exists: no older retained checkpoint at or before the target
    position restores, and the log cannot be folded from its start (its prefix was retired by
    compaction, §11.8.3, or a workspace state only the retired checkpoint held is gone). Not data
    loss: ``retired_by`` (e.g. ``"consolidation"``) removed it at ``retired_at_unix_s`` (Unix
    seconds, the retiring caller's clock); ``checkpoint_id`` names it, ``replaced_by`` the
    checkpoint that superseded it, ``target`` the position asked for."""

    def __init__(self, message: str, *, checkpoint_id: str = "", retired_by: str = "",
                 retired_at_unix_s: float | None = None, replaced_by: str = "", target: int | None = None,
                 missing: tuple[tuple[str, str], ...] | list[tuple[str, str]] = ()):
        self.checkpoint_id, self.retired_by, self.retired_at_unix_s = checkpoint_id, retired_by, retired_at_unix_s
        self.replaced_by, self.target = replaced_by, target
        super().__init__(message, missing=missing)


# --- ownership, fencing and availability (§11.5.1) ------------------------------------------------


class OwnershipError(KernelError):
    """Trajectory ownership could not be granted, kept or verified (kernel_lib.ownership.leases)."""


class LeaseHeldError(OwnershipError):
    """Another owner holds an unexpired lease on the trajectory, so no new grant is issued yet.

    ``holder`` and ``owner_epoch`` name the current grant; ``expires_at_s`` is its expiry on the
    coordinator's clock (seconds) and ``remaining_s`` how long until then. Retryable: nothing
    was granted, and a grant may be issued once the lease expires or is released."""

    retryable = True

    def __init__(self, message: str, *, trajectory_id: str = "", holder: str = "", owner_epoch: int = 0,
                 expires_at_s: float = 0.0, remaining_s: float = 0.0):
        self.trajectory_id, self.holder, self.owner_epoch = trajectory_id, holder, owner_epoch
        self.expires_at_s, self.remaining_s = expires_at_s, remaining_s
        super().__init__(message)


class LeaseWaitTimeoutError(LeaseHeldError):
    """Waiting for another owner's lease to end (:func:`kernel_lib.ownership.wait.wait_for_lease`)
    ran out of time: that lease was still live when ``timeout_s`` had passed, so nothing was
    granted. ``waited_s`` is how long the caller waited and ``attempts`` how often it asked; the
    fields of :class:`LeaseHeldError` name the holder seen last."""

    def __init__(self, message: str, *, waited_s: float = 0.0, attempts: int = 0, **held):
        self.waited_s, self.attempts = waited_s, attempts
        super().__init__(message, **held)


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
    answer to act must withhold the action.

    Retryable: the coordinator may answer later. A coordinator that is closed, or a file that is
    not a coordinator of this layout, is raised with ``retryable=False``."""

    retryable = True


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


class LogTruncatedError(ReconstructionUnavailableError):
    """The log is shorter than a position another durable record names (a checkpoint manifest's
    covered position, a result-inbox entry's intent position, a replica's head): it lost a
    suffix, e.g. cut exactly on a record boundary, which no CRC can see. Resume refuses instead
    of continuing from the shorter log. ``position`` is the highest position named, ``named_by``
    who names it (``kind`` one of checkpoint, inbox, replica), ``head`` the log's head;
    ``finding`` is the :class:`kernel_lib.resume.truncation.TruncationFinding` with every
    record beyond the head."""

    def __init__(self, message: str, *, trajectory_id: str = "", head: int = 0, position: int = 0,
                 named_by: str = "", kind: str = "", finding=None):
        self.trajectory_id, self.head, self.position = trajectory_id, head, position
        self.named_by, self.kind, self.finding = named_by, kind, finding
        super().__init__(message)


# --- the durable result inbox (§11.5.3) -----------------------------------------------------------


class InboxError(KernelError):
    """The durable result inbox (kernel_lib.gate.inbox) refused a request (§11.5.3)."""


class InboxRecordError(InboxError, ValueError):
    """A completion record cannot enter the inbox: a required field is missing or has the wrong
    type, no public key is registered for its endpoint, or its trajectory scope is missing."""


class InboxConflictError(InboxError):
    """A completion record contradicts one the inbox already holds for the same (trajectory,
    operation, attempt), or names another trajectory than the stored copy. The stored entry is
    kept as it was; the newcomer is not stored."""


# --- retention and compaction (§11.8) -------------------------------------------------------------


class RetentionError(KernelError):
    """Base class of the storage engine's retention errors (:mod:`kernel_lib.retention`)."""


class DanglingReferenceError(RetentionError):
    """An event or checkpoint would publish a reference to a payload that is not durable in the
    payload store (or not registered for that holder): the payload must be durable before any
    committed reference to it (§11.8.2). Nothing was appended. ``digests`` names the payloads."""

    def __init__(self, message: str, *, digests: tuple[str, ...] | list[str] = ()):
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

    def __init__(self, message: str, *, reasons: tuple[str, ...] | list[str] = ()):
        self.reasons = tuple(reasons)
        super().__init__(message)


# --- replay (§11.6.2) -----------------------------------------------------------------------------


class ReplayMismatchError(KernelError):
    """A request of the replayed harness does not match the recording (§11.6.2).

    Attributes: ``kind`` (``"model"``/``"tool"``), ``key`` (the request's identity), ``expected``
    (the recorded canonical request, or None when nothing was recorded under that identity),
    ``actual`` (the request made), ``reason``."""

    def __init__(self, reason: str, *, kind: str, key: str, expected: Any, actual: Any):
        super().__init__(f"replay mismatch ({kind} {key}): {reason}\n  recorded: {_show_request(expected)}\n"
                         f"  replayed: {_show_request(actual)}")
        self.kind, self.key, self.expected, self.actual, self.reason = kind, key, expected, actual, reason


class ReplayInputMismatchError(ReplayMismatchError):
    """The replayed harness asked for a runtime input (random draw, identifier, clock reading)
    other than the one the recording holds at that draw (§11.6.2), or for more draws than it holds.

    Attributes (besides ReplayMismatchError's; ``kind`` is ``"runtime input"``, ``key`` is
    ``"draw #N"``): ``draw_index`` (1-based), ``expected`` the recorded draw ``{kind, name, value,
    sequence_number}`` (None past the recording's last draw), ``actual`` the draw asked for
    ``{kind, name}``."""

    def __init__(self, reason: str, *, draw_index: int, expected: Any, actual: Any):
        super().__init__(reason, kind="runtime input", key=f"draw #{draw_index}", expected=expected, actual=actual)
        self.draw_index = draw_index


class LiveCallDuringReplayError(KernelError):
    """Something tried to reach the outside world while a replay was sealed."""


def _show_request(x: Any, limit: int = 400) -> str:
    text = json.dumps(x, sort_keys=True, default=str) if x is not None else "nothing recorded"
    return text if len(text) <= limit else text[:limit] + "…"


# --- importers of other agents' logs --------------------------------------------------------------


class ImportFormatError(KernelError, ValueError):
    """A source file cannot be read as the named format.

    ``path`` is the file as given and ``where`` the place inside it: a JSON path such as
    ``trajectory[12].observation`` or ``traj[30].tool_calls[0].function.arguments``, ``line L
    column C`` for text that is not JSON, or ``$`` for the file as a whole.
    """

    def __init__(self, message: str, *, path: str | Path, where: str = "$"):
        self.path = str(path)
        self.where = where
        self.reason = message
        super().__init__(f"{self.path}: at {where}: {message}")


class UnknownImportFormatError(KernelError, ValueError):
    """The format name is not one of :data:`kernel_lib.importers.FORMATS`."""


# --- the live substrate (real processes: executor, workers, the worksheet session) ----------------


class LiveError(KernelError):
    """Base of the live substrate's errors."""


class SnapshotMismatchError(LiveError):
    """A workspace snapshot's files do not hash to the digest that names it (§11.4: a
    content-addressed tree is identified by its digest; any added, removed or changed file is a
    mismatch). ``differences`` lists the relative paths that differ."""

    def __init__(self, message: str, differences: list[str] | None = None):
        self.differences = list(differences or [])
        super().__init__(message)


class PatchApplyError(LiveError):
    """The candidate patch does not apply to the base repository."""


class EvidenceSignatureError(LiveError):
    """A completion record's Ed25519 signature does not verify against the executor's public key
    (tampered, truncated, or signed by another key): it is not evidence (§11.5.3)."""


class LiveProcessError(LiveError):
    """A live process (executor, worker, replacement worker) failed to start, report or stop in time."""


class OperationStillRunningError(LiveError):
    """A wait for an executor job to finish (:meth:`kernel_lib.live.client.ExecutorClient.wait_until_finished`)
    ran out of time while the executor still reported it ``running``. Nothing was changed; the
    operation is still in doubt. ``operation_id`` names it, ``waited_s`` is how long the caller
    waited and ``last_status`` the executor's last answer."""

    def __init__(self, message: str, *, operation_id: str = "", waited_s: float = 0.0,
                 last_status: dict | None = None):
        self.operation_id, self.waited_s, self.last_status = operation_id, waited_s, dict(last_status or {})
        super().__init__(message)


class SessionStateError(LiveError):
    """A :class:`WorksheetSession` step was asked for at a moment it cannot run (e.g. recover
    before any log exists, start while a worker is still running, any step after ``close()``)."""


class UnrecoveredRunError(SessionStateError):
    """``start()`` would tear down a crashed run whose surviving log no replacement has read yet."""


class NoWorkerRunningError(SessionStateError):
    """``crash()`` was asked for but no worker process is running (never started, already killed,
    or it finished its trajectory)."""


class UnknownCrashPointError(LiveError, ConfigError):
    """A crash (pause) point of the live worksheet names no position of its trajectory (§11.1,
    §11.3.3): not a log position 1..N, not an event type the worker appends, or ``TYPE#K`` past
    the K-th such event. ``choices`` lists every valid point as ``"N TYPE#K"`` strings."""

    def __init__(self, message: str, *, choices: tuple[str, ...] | list[str] = ()):
        self.choices = tuple(choices)
        super().__init__(message)


# --- Failure Recovery: tool contracts, the saga, terminal escalation ------------------------------


class RecoveryError(KernelError):
    """Base of the Failure Recovery chapter's faults (sagas, compensation, the tool services)."""


class ToolContractError(RecoveryError, ConfigError):
    """A tool's declaration is refused at registration (Failure Recovery, table 5): no
    reversibility tier, an unknown repeat contract, a pivot (tier III) with a compensator, a tier
    I/II tool without one, a compensator that is not registered or whose binding names nothing,
    a name registered twice with another contract. ``tool`` names the tool."""

    def __init__(self, message: str, *, tool: str | None = None):
        self.tool = tool
        super().__init__(message)


class PlanError(RecoveryError, ConfigError):
    """A plan given to the pivot-boundary checker cannot be read (Failure Recovery, "The pivot
    action boundary"; :mod:`kernel_lib.recovery.pivot`): not a JSON object or list of steps, a step
    without an id or a reversibility tier, an id used twice, an unknown repeat contract or key, a
    ``stageable`` flag on a step that is not a pivot. A readable plan that breaks the invariant is
    not an error: the checker answers it with reasons. ``step`` names the step when there is one."""

    def __init__(self, message: str, *, step: str | None = None):
        self.step = step
        super().__init__(message)


class CompensatorBindError(RecoveryError):
    """A committed step's compensator C_i cannot be bound from the step's arguments and output
    (a bound path is missing from the service's answer): the saga refuses to report the step
    committed without a durable compensator, and escalates instead (Failure Recovery, "Saga
    compensation stacks")."""


class SagaTransitionError(RecoveryError):
    """A saga sub-transaction transition that table 2 does not allow (e.g. COMMITTED ->
    EXECUTING, COMPENSATED -> COMPENSATING), or a step unknown to the saga. Raised before
    anything is appended. ``from_state``/``to_state`` name the refused transition."""

    def __init__(self, message: str, *, from_state: str | None = None, to_state: str | None = None):
        self.from_state, self.to_state = from_state, to_state
        super().__init__(message)


class SagaPanicError(RecoveryError):
    """A compensator failed unrecoverably: the saga appended PANIC, froze the trajectory and
    stopped (Failure Recovery, the unwind listing). ``residue`` lists the resources the services
    still hold; ``incident`` is the emitted incident record (a dict)."""

    def __init__(self, message: str, *, residue: list | None = None, incident: dict | None = None):
        self.residue = list(residue or [])
        self.incident = dict(incident or {})
        super().__init__(message)


class PivotCrossedError(SagaPanicError):
    """An unwind asked for after the saga crossed its pivot (PREPARING -> COMMITTED is durable in
    the log; Failure Recovery, "The pivot action boundary"): the compensation log is retired and
    no compensator runs. The request is refused; the runner escalates instead (the ACB freeze,
    ``POST_PIVOT_STALLED``), so ``incident`` and ``residue`` are those of the freeze.
    ``pivot_step_id`` names the pivot the crossing was for."""

    def __init__(self, message: str, *, pivot_step_id: str | None = None, residue: list | None = None,
                 incident: dict | None = None):
        self.pivot_step_id = pivot_step_id
        super().__init__(message, residue=residue, incident=incident)


class PivotRefusedError(RecoveryError):
    """The saga may not cross its pivot (Failure Recovery, "The pivot action boundary": every
    pre-condition must hold before T_pivot is dispatched): the pre-pivot verification gate
    failed (``failed_checks`` names the checks; the verdict is in the log), no passing verdict was
    given to a runner that requires one, the verdict is for another step, or escrow entries are
    staged for a pivot that would not flush them. Nothing is crossed or dispatched; the saga is
    still in its preparation phase and can be unwound. ``step_id`` names the pivot step."""

    def __init__(self, message: str, *, step_id: str | None = None, failed_checks: list | None = None):
        self.step_id = step_id
        self.failed_checks = list(failed_checks or [])
        super().__init__(message)


class VerificationError(RecoveryError, ConfigError):
    """The pre-pivot verification gate is set up wrong (:mod:`kernel_lib.recovery.verification`):
    no checks, checks without unique names, a model claim of the wrong type. A check that fails is
    not an error: it is a failed check in the verdict."""


class OutboxError(RecoveryError):
    """An escrow/outbox request the saga refuses (Failure Recovery, Example 0.1's remedy): staging
    after the pivot was crossed, an entry id used twice with another payload, a flush before the
    pivot committed, or a staged tool that is not registered. ``entry_id`` names the entry."""

    def __init__(self, message: str, *, entry_id: str | None = None):
        self.entry_id = entry_id
        super().__init__(message)


class StepFailedError(RecoveryError):
    """A forward saga step ended FAILED (recorded), or the saga is already unwinding or ended:
    the caller unwinds (:meth:`kernel_lib.recovery.runner.SagaRunner.unwind`). ``step_id`` names
    the step, ``error`` the service's answer."""

    def __init__(self, message: str, *, step_id: str | None = None, error: dict | None = None):
        self.step_id = step_id
        self.error = dict(error or {})
        super().__init__(message)


class RecoveryTerminated(RecoveryError):
    """The forward-repair loop stopped a failed sub-transaction by the recovery policy's directive
    (:mod:`kernel_lib.recovery.repair`): BACKWARD_ROLLBACK (the saga was unwound, ``state`` is its
    final state, ``ABORT_CONSISTENT``) or OPERATOR_ESCALATE (the trajectory is frozen, ``state``
    is ``FROZEN``). ``step_id`` names the sub-transaction, ``directive`` and ``gate`` the decision,
    ``incident`` the freeze's incident record when there was one."""

    def __init__(self, message: str, *, step_id: str | None = None, directive: str | None = None,
                 gate: int | str | None = None, state: str | None = None, incident: dict | None = None):
        self.step_id = step_id
        self.directive = directive
        self.gate = gate
        self.state = state
        self.incident = dict(incident or {})
        super().__init__(message)


class ToolFailedError(RecoveryError):
    """Raised by a practitioner's tool function (:mod:`kernel_lib.recovery.agent`): the tool
    answered no. ``retryable``: nothing was applied and the same request may succeed later;
    ``partial_output``: what a partial effect left behind (bound to the step's own compensator)."""

    def __init__(self, message: str, *, retryable: bool = False, partial_output: dict | None = None):
        self.partial_output = partial_output
        super().__init__(message, retryable=retryable)


class ServiceError(RecoveryError):
    """A tool service (live process or simulated twin) could not be started, reached or
    configured (bad fault specification, unknown service, state file unusable)."""


class ServiceFaultError(ServiceError):
    """An injected fault, as a transport sees it: ``kind`` is the fault class (``timeout_after``,
    ``timeout_before``, ``conflict``, ``rate_limited``, ``server_error``, ``crash``, ``slow``,
    ``partial``); ``status`` the HTTP status when there is one. ``retryable`` follows the class
    (429 and 5xx and a timeout before the effect may be retried)."""

    def __init__(self, message: str, *, kind: str, status: int | None = None, retryable: bool | None = None):
        self.kind, self.status = kind, status
        super().__init__(message, retryable=retryable)


class TrajectoryFrozenRefusal(Refusal):
    """The trajectory is FROZEN (terminal escalation, the ACB freeze): a worker that finds it so
    does nothing. ``incident_id`` names the incident record in the log."""

    def __init__(self, message: str, *, incident_id: str | None = None):
        self.incident_id = incident_id
        super().__init__(message)


class ServiceDownError(ServiceError, ConnectionRefusedError):
    """A simulated twin service crashed (an injected ``crash``) and was not restarted; an
    ``OSError`` too, as a refused connection to a real one is."""


class BrokerUnreachableError(ServiceError):
    """A live tool service could not reach the credential broker to introspect a request's lease
    (Failure Recovery, "Terminal escalation"); the service answers 503 (retryable) and applies
    nothing."""


class RecoveryPolicyError(RecoveryError, ConfigError):
    """The recovery policy D(Ω) refuses its configuration or an input it cannot judge (Failure
    Recovery, figure 2 and the anti-spin invariant): K_repair outside 1..3, a sliding window
    shorter than one, a negative cost or reserve, a success probability outside [0, 1], an error
    that is neither a service's error object, a text nor an exception."""


class OmegaError(RecoveryPolicyError, ValueError):
    """An Ω document (the failure state handed to D(Ω), e.g. ``recovery decide OMEGA.json``) is
    malformed: not JSON, a missing or extra field, a value of the wrong type or out of range.
    ``field`` names the offending field as a dotted path (``budget.tokens_rem``)."""

    def __init__(self, message: str, *, field: str | None = None):
        self.field = field
        super().__init__(message)


# --- issue 18: the semantic watchdog (Failure Recovery, "Semantic Watchdog Timers") ---


class WatchdogError(RecoveryError):
    """Base class of the semantic watchdog's faults (Failure Recovery, "Semantic Watchdog Timers":
    the state hash, the detectors, the table-7 tiers)."""


# --- issue 18 wd-detect --------------------------------------------------------------------------------


class WatchdogConfigError(WatchdogError, ConfigError):
    """The semantic watchdog refuses its configuration (Failure Recovery, "Semantic Watchdog
    Timers", table 6): a window, period, epoch or count below its minimum, a threshold outside its
    range, an unknown detection kind, an embedder that is not callable. The message names the field."""


# --- issue 18 wd-tiers: the watchdog's three-tier intervention (Failure Recovery, table 7) ------------


class ActionMaskedRefusal(AdmissionDenied):
    """Admission refused a tool call whose action signature h_tool the log masked (an
    ``ActionMasked`` tombstone, the watchdog's tier-2 backtrack): the agent may not repeat the
    action that kept it looping. ``action_signature`` is the 16-hex-digit signature, ``tool`` the
    call's tool, ``masked_at`` the log position of the tombstone."""

    def __init__(self, message: str, *, action_signature: str | None = None, tool: str | None = None,
                 masked_at: int | None = None):
        self.action_signature = action_signature
        self.tool = tool
        self.masked_at = masked_at
        super().__init__(message)


class SemanticDeadlockError(WatchdogError):
    """ERR_SEMANTIC_DEADLOCK: the watchdog's tier 3 ended a trajectory that kept looping after its
    backtrack budget (Failure Recovery, table 7). ``outcome`` is ``compensated`` (no pivot was
    crossed: the saga unwound, the trajectory is FAILED) or ``frozen`` (past the pivot: the
    trajectory is FROZEN for an operator); either way its capability leases were revoked.
    ``intervention_id`` names the tier-3 intervention in the log, ``incident`` the freeze's
    incident record when there was one, ``revoked_leases`` the leases the broker revoked."""

    def __init__(self, message: str, *, outcome: str | None = None, intervention_id: str | None = None,
                 incident: dict | None = None, revoked_leases: list | None = None):
        self.outcome = outcome
        self.intervention_id = intervention_id
        self.incident = dict(incident or {})
        self.revoked_leases = list(revoked_leases or [])


# issue 18 wd-hash ---------------------------------------------------------------------------------
# the semantic watchdog (Failure Recovery, "Semantic Watchdog Timers"): the environment's state hash

__all__ += ["WatchdogError", "WorkspaceMissingError", "WorkspaceUnreadableError"]


class WorkspaceMissingError(WatchdogError):
    """The workspace whose state the watchdog hashes is not there: its root does not exist, is not
    a directory, or was removed or replaced while it was watched. ``root`` names it."""

    def __init__(self, message: str, *, root: str | None = None):
        self.root = root
        super().__init__(message)


class WorkspaceUnreadableError(WatchdogError):
    """A directory or file of the workspace cannot be listed or read (permissions, an I/O error, a
    name that is not valid text), so no state hash can be given: a hash that skipped it would call
    two different states equal. ``path`` names it, relative to the workspace root."""

    def __init__(self, message: str, *, path: str | None = None):
        self.path = path
        super().__init__(message)


# --- issue 18 wd-course: the watchdog's course views (FR.3 notebook, the watchdog view widget) ----------

__all__ += ["WatchTimelineError"]


class WatchTimelineError(WatchdogError, ValueError):
    """A step asked of a watchdog timeline (:mod:`kernel_lib.recovery.watchdog.timeline`) that the
    trajectory does not have: outside ``0..n`` or not a whole number."""


# --- issue 18 wd-adv: adversarial inputs to the semantic watchdog ---------------------------------------

__all__ += ["WatchInputError"]


class WatchInputError(WatchdogError, ValueError):
    """What the watchdog was handed is not what it reads (Failure Recovery, "Semantic Watchdog
    Timers"): an event, step or detection of the wrong type or with a field of the wrong type or
    range, log positions that do not increase (a spliced or reordered log), a detection at a
    position the log does not have yet, or a worker journal line that is not a step record.
    ``field`` names the offending field when there is one."""

    def __init__(self, message: str, *, field: str | None = None):
        self.field = field
        super().__init__(message)


# --- issue 19: gateway ---------------------------------------------------------------------------------
# the tool gateway (Failure Recovery, "Tool Circuit Breakers": figure 4, tables 8-10, Napkin Math 0.4)

__all__ += ["GatewayError", "GatewayConfigError", "BreakerStoreError"]


class GatewayError(RecoveryError):
    """Base class of the tool gateway's faults (Failure Recovery, "Tool Circuit Breakers": the
    circuit breaker, the backoff policy, the bulkheads). A fast-fail answer of the gateway
    (``ERR_CIRCUIT_OPEN``, ``ERR_BULKHEAD_FULL``, ...) is not an exception: it is an observation
    returned to the caller (:mod:`kernel_lib.recovery.gateway`)."""


class GatewayConfigError(GatewayError, ConfigError):
    """The gateway refuses a configuration: a threshold outside (0, 1], a window, cap, timeout or
    capacity out of range, an unknown strategy or domain, and above all a retry policy with no
    bound (no ``max_retries`` and no finite retry budget: the chapter's "unbounded retries"
    pitfall). ``field`` names the offending field."""

    def __init__(self, message: str, *, field: str | None = None):
        self.field = field
        super().__init__(message)


class BreakerStoreError(GatewayError):
    """The shared breaker store (SQLite on the host, etcd on the quorum tier) cannot be used: the
    file is not a breaker store, a row does not decode, the dependency's row was written with
    another breaker configuration, or the store did not answer. ``dependency_id`` names the
    breaker when there is one."""

    def __init__(self, message: str, *, dependency_id: str | None = None, retryable: bool | None = None):
        self.dependency_id = dependency_id
        super().__init__(message, retryable=retryable)


# --- issue 19 herd: the retry-storm simulator and the live gateway lab -----------------------------------

__all__ += ["HerdConfigError"]


class HerdConfigError(ConfigError):
    """A scenario the herd simulator (:mod:`kernel_lib.sim.herd`) or the live gateway lab
    (:mod:`kernel_lib.live.gateway_lab`) cannot run: a count, rate or duration out of range, an
    unknown backoff strategy, a policy that is not one. ``field`` names the offending field."""

    def __init__(self, message: str, *, field: str | None = None):
        self.field = field
        super().__init__(message)


# --- issue 19: quarantine ------------------------------------------------------------------------------
# blast-radius quarantine and taint (Failure Recovery, "Blast Radius Quarantine": tables 11-12,
# definition 0.3, Example 0.2; kernel_lib.recovery.quarantine and kernel_lib.live.quarantine)

__all__ += ["QuarantineError", "ContainmentError", "ContainmentUnavailableError", "TaintLedgerError", "ArtifactError",
            "TrajectoryQuarantinedRefusal", "ArtifactQuarantined", "ClearanceRefused", "EgressDenied"]


class QuarantineError(RecoveryError):
    """Base of the quarantine faults: a containment stage could not be applied, the taint ledger
    cannot be used, or an artifact's description is malformed."""


class ContainmentError(QuarantineError):
    """A containment primitive failed while it was being applied (a cgroup file refused the write,
    ``ip``/``tc`` exited non-zero, a process tree did not reach the frozen state in time).
    ``stage`` names the quarantine stage (``suspend``, ``sever``, ``revoke``, ``taint``),
    ``mechanism`` the primitive (``cgroup_freezer``, ``sigstop``, ``netns``, ``gateway``...)."""

    def __init__(self, message: str, *, stage: str | None = None, mechanism: str | None = None):
        self.stage = stage
        self.mechanism = mechanism
        super().__init__(message)


class ContainmentUnavailableError(ContainmentError):
    """The machine does not offer a containment mechanism that was asked for by name (not root,
    no writable cgroup freezer, no ``ip`` command, no network namespaces). ``reason`` says which
    check failed; the automatic choice falls back instead of raising this."""

    def __init__(self, message: str, *, stage: str | None = None, mechanism: str | None = None,
                 reason: str = ""):
        self.reason = reason
        super().__init__(message, stage=stage, mechanism=mechanism)


class TaintLedgerError(QuarantineError):
    """The taint ledger cannot be opened or used: the file is not a taint ledger (or another
    layout version), or an operation names what the ledger does not hold."""


class ArtifactError(QuarantineError, ValueError):
    """An artifact's envelope is malformed: a hash that is not 64 lowercase hex digits, an empty
    producer, a negative epoch, an unknown parent, a parent that is the artifact itself, or the
    same hash registered again with another producer, epoch or parents. ``sha256`` names it."""

    def __init__(self, message: str, *, sha256: str | None = None):
        self.sha256 = sha256
        super().__init__(message)


class TrajectoryQuarantinedRefusal(TrajectoryFrozenRefusal):
    """The trajectory is quarantined (a ``TrajectoryQuarantined`` tombstone is in its log): it is
    neither resumed nor dispatched; only an operator may cancel or fail it. ``quarantine_id`` names
    the tombstone, ``taint_from_sequence`` the log position from which its output is tainted."""

    def __init__(self, message: str, *, quarantine_id: str | None = None, taint_from_sequence: int | None = None):
        self.quarantine_id = quarantine_id
        self.taint_from_sequence = taint_from_sequence
        super().__init__(message, incident_id=quarantine_id)


class ArtifactQuarantined(Refusal):
    """The mediation gateway refused a peer's read of an artifact whose taint state is TAINTED or
    SUSPECT (Failure Recovery, definition 0.3). ``sha256`` names the artifact, ``state`` its taint
    state, ``producer`` the trajectory that produced it, ``reader`` who asked, ``blocked_by`` the
    tainted artifact(s) its state comes from (itself when TAINTED, ancestors when SUSPECT)."""

    def __init__(self, message: str, *, sha256: str | None = None, state: str | None = None,
                 producer: str | None = None, reader: str | None = None, blocked_by: list | None = None):
        self.sha256 = sha256
        self.state = state
        self.producer = producer
        self.reader = reader
        self.blocked_by = list(blocked_by or [])
        super().__init__(message)


class ClearanceRefused(Refusal):
    """A clearance of a tainted artifact was refused: only an external verifier or an operator
    may clear taint, never the model (or any agent trajectory) vouching for its own output
    (definition 0.3's common pitfall). ``verifier_kind`` and ``verifier_id`` name who asked."""

    def __init__(self, message: str, *, verifier_kind: str | None = None, verifier_id: str | None = None):
        self.verifier_kind = verifier_kind
        self.verifier_id = verifier_id
        super().__init__(message)


class EgressDenied(Refusal):
    """The pre-execution egress check refused a tool call: a destination not on the allow-list,
    or any call at all from a trajectory whose egress is severed at the gateway. ``host`` names
    the destination (None when the call was refused as severed), ``trajectory_id`` the caller,
    ``severed`` whether the trajectory's egress is cut."""

    def __init__(self, message: str, *, host: str | None = None, trajectory_id: str | None = None,
                 severed: bool = False):
        self.host = host
        self.trajectory_id = trajectory_id
        self.severed = severed
        super().__init__(message)


# --- adv19b: adversarial review of issue 19's quarantine -----------------------------------------


class QuarantineIncompleteError(ContainmentError):
    """A quarantine ran every stage but one or more failed (Failure Recovery, table 12): the
    stages that could run did, and the tombstone was written when the taint stage succeeded.
    ``stage`` names the first failed stage in protocol order (``suspend``, ``sever``,
    ``revoke``, ``taint``), ``failed_stages`` maps each failed stage to its error text, and
    ``report`` is the supervisor's QuarantineReport (its ``errors`` the same map)."""

    def __init__(self, message: str, *, failed_stages: dict[str, str], report: object = None,
                 mechanism: str | None = None):
        order = ("suspend", "sever", "revoke", "taint")
        self.failed_stages = dict(failed_stages)
        self.report = report
        first = next((s for s in order if s in self.failed_stages), next(iter(self.failed_stages), None))
        super().__init__(message, stage=first, mechanism=mechanism)


# --- issue 20: the worker fleet (kernel_lib.live.fleet) ------------------------------------------


class FleetError(LiveError):
    """The worker fleet could not do what was asked: its queue file cannot be opened or stayed
    locked, a worker process failed to start, or the fleet was used after :meth:`stop`
    (:mod:`kernel_lib.live.fleet`). Nothing half-done is left: a refused claim claims nothing."""


class FleetTimeoutError(FleetError):
    """A wait on the fleet ran out of time with trajectories still unfinished (``pending`` names
    them, ``waited_s`` is how long it waited). The fleet keeps running; nothing was stopped."""

    def __init__(self, message: str, *, pending: list | None = None, waited_s: float = 0.0):
        self.pending = list(pending or [])
        self.waited_s = waited_s
        super().__init__(message)
