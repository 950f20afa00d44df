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


class ConfigError(KernelError):
    """A parameter is out of range or inconsistent."""


class StoreBusyError(StoreError):
    """Another connection held the store's lock past the busy timeout (SQLITE_BUSY/LOCKED).

    Transient and retryable: nothing of the call was applied, and the store stays usable.
    """


class StoreReadOnlyError(StoreError):
    """An append or a fence was attempted on a store opened with ``read_only=True``."""
