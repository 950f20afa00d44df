"""The trajectory record and its fold (§11.2.1, §11.5.3).

``fold(record_0, events)`` applies events in order with a pure, versioned reducer: it calls no
model and no tool, reads no clock, and never invents an outcome. An operation with a durable
intent and no adequate evidence folds to ``in_doubt`` with its reservation held; only a
``ToolResult`` that is ``completed`` or ``failed`` with a complete observation establishes it
(§11.3.3, table 3). A model invocation whose ``ContextBuilt`` is logged without a
``ModelReplied`` is in doubt too, but only for its charge (§11.3.2). An ``AttemptWithheld`` (the
gate's record that its dispatch-time recheck withheld the attempt before it could leave) settles
the attempt as never sent and releases its reservation; an operation whose every attempt was
withheld has status ``withheld``. :meth:`TrajectoryRecord.orphaned_reservations` reports every
reservation that still holds liability though its operation is neither in doubt nor running.

The record is plain data (dataclasses) and :meth:`TrajectoryRecord.to_dict` gives a JSON view;
:func:`fold` never mutates its input record. :func:`fold_step` is the reducer's single step, in
place (what a gate that keeps its record current calls after each append).

Money is kept as integer micro-dollars (``*_micro_usd`` fields, :mod:`kernel_lib.core.money`):
each USD amount an event carries is converted once, when it is folded (rounded half-even to
1e-6 USD), and the budget arithmetic is exact integer arithmetic, so a reservation released
unspent or fully settled nets to exactly zero outstanding. The ``*_usd`` attributes are floats
computed from the integers, and :meth:`TrajectoryRecord.to_dict` shows only those.

Invariants of every fold step: the sequence advances by exactly one (an event that does not
continue it is refused before the step), and the budget figures the event touched are
non-negative integers (checked by the budget handlers after they change them; so every
reservation's outstanding amount is >= 0). An event whose amounts cannot be represented
(negative, not finite) is refused with a FoldError before it changes the record.

The reducer runs in one loop over the events (:func:`fold`, :func:`fold_into` and
:func:`fold_step` share it) that dispatches each payload type to its handler through one dict,
mutates one private record (``fold`` deep-copies ``record_0`` once, never per event), converts a
whole number of micro-dollars without the general money route, and reads the payload's fields
from its ``__dict__``. ``tests/test_fold_differential.py`` checks it against the plain reducer it
replaced (``tests/fold_reference.py``).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import itertools
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Literal, Sequence

from kernel_lib._support.gc_pause import cyclic_gc_paused
from kernel_lib.errors import FoldError, RecordFormatError
from kernel_lib.core.lazy_table import materialized
from kernel_lib.core.money import MICRO_PER_USD, Rounding, micro_to_usd, usd_to_micro
from kernel_lib.core.events import (
    REDUCER_VERSION,
    ApprovalRequested,
    ApprovalResolved,
    Authorized,
    BudgetReserved,
    BudgetSettled,
    Checkpoint,
    CheckpointV2,
    Compacted,
    CompensationIssued,
    SagaChanged,
    SagaStepChanged,
    RecoveryDecided,
    RepairOutcome,
    PivotVerified,
    PivotCrossed,
    OutboxChanged,
    TrajectoryFrozen,
    FROZEN,
    ContextBuilt,
    ControlChanged,
    Event,
    ModelReplied,
    PlanChanged,
    QuarantineChanged,
    RuntimeInput,
    TaskStarted,
    ToolIntent,
    ToolIntentV1,
    ToolIntentV2,
    ToolResult,
    AttemptWithheld,
    WatchdogIntervened,
    WorkspaceChanged,
)
from kernel_lib.core.events import ActionMasked, WatchdogIntervenedV1   # issue 18 (wd-tiers)
from kernel_lib.core.events import TrajectoryQuarantined   # issue 19 (quarantine)

#: Reducer versions this build can fold. An event stamped with another version is refused.
SUPPORTED_REDUCER_VERSIONS = frozenset({1})

OperationStatus = Literal["proposed", "admitted", "denied", "in_doubt", "established", "withheld"]

#: ToolResult statuses that settle an attempt when the observation is complete.
SETTLING_STATUSES = frozenset({"completed", "failed"})

#: ``Attempt.last_result_status`` of an attempt an ``AttemptWithheld`` settled as never sent (the
#: gate's own evidence; later evidence about the attempt replaces it), and the operation status
#: of an operation whose every attempt with an intent was withheld (§11.3.2).
WITHHELD = "withheld"


@dataclass
class Attempt:
    """One transport attempt of an operation."""

    attempt_id: str
    intent_sequence: int | None = None
    job_handle: str | None = None
    last_result_status: str | None = None
    last_result_sequence: int | None = None
    established: bool = False   # complete completed/failed evidence recorded for this attempt
    late: bool = False   # evidence stamped with an older control_epoch than the record's

    @property
    def withheld(self) -> bool:
        """Settled as never sent: the dispatch-time recheck withheld it (``AttemptWithheld``)
        and no evidence about it came later."""
        return self.last_result_status == WITHHELD and not self.established

    @property
    def in_doubt(self) -> bool:
        """An intent is logged and no adequate evidence settles it (a withheld attempt is settled:
        the gate recorded that it never left)."""
        return self.intent_sequence is not None and not self.established and not self.withheld


@dataclass
class Operation:
    """A row of the operation table: one logical tool operation or model invocation."""

    operation_id: str
    kind: Literal["tool", "model"]
    status: OperationStatus = "proposed"
    tool: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)
    input_ref: str | None = None
    repeat_contract: str | None = None
    authorization_ref: str | None = None
    reservation_id: str | None = None
    attempts: dict[str, Attempt] = field(default_factory=dict)
    current_attempt_id: str | None = None
    outcome: dict[str, Any] | None = None
    evidence: dict[str, str] | None = None
    intent_missing: bool = False   # evidence arrived for an operation with no logged intent

    @property
    def job_handle(self) -> str | None:
        a = self.attempts.get(self.current_attempt_id or "")
        return a.job_handle if a else None


@dataclass
class Reservation:
    """A budget reservation: its bound and what settlements verified so far, in integer
    micro-dollars (``*_usd`` properties: the same figures in USD, floats)."""

    reservation_id: str
    subject_id: str
    amount_micro_usd: int
    settled_micro_usd: int = 0
    released: bool = False

    @classmethod
    def from_usd(cls, reservation_id: str, subject_id: str, amount_usd: float, settled_usd: float = 0.0,
                 released: bool = False) -> "Reservation":
        """A reservation from USD figures (converted as the fold converts them).

        Raises ValueError: an amount that is not a finite number."""
        return cls(reservation_id, subject_id, usd_to_micro(amount_usd), usd_to_micro(settled_usd), released)

    @property
    def amount_usd(self) -> float:
        return micro_to_usd(self.amount_micro_usd)

    @property
    def settled_usd(self) -> float:
        return micro_to_usd(self.settled_micro_usd)

    @property
    def outstanding_micro_usd(self) -> int:
        """Liability still held: the bound minus verified usage, or 0 once finally settled."""
        return 0 if self.released else max(self.amount_micro_usd - self.settled_micro_usd, 0)

    @property
    def outstanding_usd(self) -> float:
        return micro_to_usd(self.outstanding_micro_usd)

    @property
    def overrun_micro_usd(self) -> int:
        """Verified usage beyond the reservation bound (a real overcharge, kept visible)."""
        return max(self.settled_micro_usd - self.amount_micro_usd, 0)

    @property
    def overrun_usd(self) -> float:
        return micro_to_usd(self.overrun_micro_usd)

    def usd_dict(self) -> dict[str, Any]:
        """The reservation with its figures in USD (the layout of :meth:`TrajectoryRecord.to_dict`
        and of record snapshots)."""
        return {"reservation_id": self.reservation_id, "subject_id": self.subject_id, "amount_usd": self.amount_usd,
                "settled_usd": self.settled_usd, "released": self.released}


#: Budget's private cache of the reservations still holding a liability (not a field: never
#: compared, stored or snapshotted; see Budget.outstanding_reservations_micro_usd).
_OPEN_CACHE = "_open_cache"


@dataclass
class Budget:
    """Budgets as §11.5.3 rebuilds them, not a remaining-balance scalar: integer micro-dollar
    fields, with ``*_usd`` properties giving the same figures in USD."""

    ceiling_micro_usd: int = 0
    finalization_reserve_micro_usd: int = 0
    actual_consumption_micro_usd: int = 0
    reservations: dict[str, Reservation] = field(default_factory=dict)

    @property
    def ceiling_usd(self) -> float:
        return micro_to_usd(self.ceiling_micro_usd)

    @property
    def finalization_reserve_usd(self) -> float:
        return micro_to_usd(self.finalization_reserve_micro_usd)

    @property
    def actual_consumption_usd(self) -> float:
        return micro_to_usd(self.actual_consumption_micro_usd)

    @property
    def outstanding_reservations(self) -> dict[str, float]:
        """Reservation id → liability still held (USD), for reservations holding any."""
        return {k: micro_to_usd(m) for k, r in self.reservations.items() if (m := r.outstanding_micro_usd) > 0}

    @property
    def outstanding_reservations_micro_usd(self) -> int:
        """Sum of every reservation's liability still held, in micro-dollars.

        Admission asks for it at every step, so it must not walk every reservation the
        trajectory ever made (that made a run of n steps cost O(n²)). A reservation's liability
        only ever falls (its bound is fixed, settlements only add, release is final) and
        reservations are only ever added, so a reservation found holding nothing is dropped for
        good and only reservations added since the last call are scanned. The cache is tied to
        the reservations dict itself: a new dict (a fork, a restore) or any other mapping type
        is summed in full."""
        res = self.reservations
        if type(res) is not dict:
            return sum(r.outstanding_micro_usd for r in res.values())
        cache = self.__dict__.get(_OPEN_CACHE)
        if cache is None or cache[0] is not res or cache[1] > len(res):
            cache = (res, 0, [])
        _src, seen, open_ids = cache
        if len(res) > seen:
            for rid in itertools.islice(res, seen, None):
                open_ids.append(rid)
        total, still_open = 0, []
        for rid in open_ids:
            r = res.get(rid)
            m = r.outstanding_micro_usd if r is not None else 0
            if m > 0:
                total += m
                still_open.append(rid)
        self.__dict__[_OPEN_CACHE] = (res, len(res), still_open)
        return total

    @property
    def outstanding_reservations_usd(self) -> float:
        return micro_to_usd(self.outstanding_reservations_micro_usd)

    @property
    def available_micro_usd(self) -> int:
        """What a new step could still reserve: ceiling − consumption − outstanding − reserve (§11.5.4)."""
        return (self.ceiling_micro_usd - self.actual_consumption_micro_usd - self.outstanding_reservations_micro_usd
                - self.finalization_reserve_micro_usd)

    @property
    def available_usd(self) -> float:
        return micro_to_usd(self.available_micro_usd)

    def usd_dict(self) -> dict[str, Any]:
        """The stored figures in USD (the layout of record snapshots; no derived figures)."""
        return {"ceiling_usd": self.ceiling_usd, "finalization_reserve_usd": self.finalization_reserve_usd,
                "actual_consumption_usd": self.actual_consumption_usd,
                "reservations": {k: r.usd_dict() for k, r in self.reservations.items()}}

    def view(self) -> dict[str, Any]:
        """The budget as :meth:`TrajectoryRecord.to_dict` shows it: the stored figures plus the
        derived ones (outstanding, available, overruns), in USD rounded to 1e-9."""
        d = self.usd_dict()
        d["outstanding_reservations_usd"] = _usd(self.outstanding_reservations_usd)
        d["available_usd"] = _usd(self.available_usd)
        d["actual_consumption_usd"] = _usd(self.actual_consumption_usd)
        d["outstanding_reservations"] = {k: _usd(v) for k, v in self.outstanding_reservations.items()}
        d["overruns"] = {k: _usd(r.overrun_usd) for k, r in self.reservations.items() if r.overrun_micro_usd > 0}
        return d


@dataclass
class Approval:
    approval_id: str
    held_operation_id: str
    held_attempt_id: str
    reviewer: str
    expires_unix_s: float | None
    status: Literal["pending", "approved", "refused", "withdrawn", "expired"] = "pending"


@dataclass
class TrajectoryRecord:
    """The control record a worker rebuilds by folding the log.

    ``last_sequence_number`` is the log position folded so far (0 for the base record);
    ``prefix_sha256`` chains the digests of every folded event, so two folds of the same prefix
    agree on it and any difference in the prefix changes it.
    """

    trajectory_id: str
    last_sequence_number: int = 0
    prefix_sha256: str = hashlib.sha256(b"").hexdigest()
    reducer_version: int = REDUCER_VERSION
    owner_epoch: int = 0
    control_epoch: int = 0
    control_state: str = "NOT_STARTED"
    task: dict[str, Any] | None = None
    operations: dict[str, Operation] = field(default_factory=dict)
    budget: Budget = field(default_factory=Budget)
    approvals: dict[str, Approval] = field(default_factory=dict)
    plan_revision: int = 0
    plan_steps: list[dict[str, Any]] = field(default_factory=list)
    decisions: dict[str, dict[str, Any]] = field(default_factory=dict)
    runtime_inputs: list[dict[str, Any]] = field(default_factory=list)
    compactions: list[dict[str, Any]] = field(default_factory=list)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    recovery_records: list[dict[str, Any]] = field(default_factory=list)
    #: Digest of the workspace tree the log last recorded (a ``WorkspaceChanged`` result), or None
    #: while no workspace change is logged (§11.4.1).
    workspace_tree_sha256: str | None = None
    #: Action signatures the log masked (``ActionMasked``, Failure Recovery table 7, tier 2):
    #: signature -> ``{tool, reason, position, intervention_id, nonce_arguments, sequence_number}``.
    #: Replaced, never edited, by the reducer (so forks and snapshots may share it); omitted from
    #: :meth:`to_dict` while empty, so logs without masks read as they always did.
    masked_actions: dict[str, dict[str, Any]] = field(default_factory=dict)

    # --- views -----------------------------------------------------------------------------------
    def in_doubt(self) -> list[str]:
        """Ids of operations whose outcome the record cannot settle, in log order."""
        return [k for k, op in self.operations.items() if op.status == "in_doubt"]

    def attempts_in_doubt(self) -> list[tuple[str, str]]:
        """(operation id, attempt id) of every attempt with an intent and no adequate evidence,
        including extra attempts of an operation another attempt already established (their
        effects and charges are still unknown)."""
        return [(k, a.attempt_id) for k, op in self.operations.items() for a in op.attempts.values() if a.in_doubt]

    def orphaned_reservations(self) -> list[str]:
        """Ids of reservations still holding liability (outstanding > 0) whose reason is gone, in
        log order: no reservation outlives its reason (§11.5.3).

        A reservation's reason is its operation (``subject_id``): one in doubt (an attempt may
        have left and may still charge), or one still running toward its intent, i.e. admitted
        (or re-proposed) in a trajectory that is not terminal and that no void approval (refused,
        withdrawn, expired) holds back. Every other holder leaves the reservation orphaned: an
        established operation (a crash between its result and its usage settlement, or an extra
        attempt of an operation another attempt established), a withheld or denied one, one that
        can never be dispatched, or no operation at all. Resume settles each
        (:func:`kernel_lib.core.decisions.orphan_settlements`). A derived view, not part of
        :meth:`to_dict` (whose layout frozen logs are compared against).
        """
        out = []
        for rid, r in self.budget.reservations.items():
            if r.outstanding_micro_usd > 0 and not self._reservation_has_reason(r):
                out.append(rid)
        return out

    def _reservation_has_reason(self, r: Reservation) -> bool:
        op = self.operations.get(r.subject_id)
        if op is None:
            return False
        if op.status == "in_doubt":
            return True
        if op.status in ("proposed", "admitted"):
            void = any(a.held_operation_id == op.operation_id and a.status in ("refused", "withdrawn", "expired")
                       for a in self.approvals.values())
            return self.control_state not in TERMINAL_STATES and not void
        return False

    def approval_blocker(self, operation_id: str, now_unix_s: float | None = None) -> str | None:
        """Why an approval still holds ``operation_id`` back, or None if none does (§11.5.3).

        Every approval logged for the operation counts: a pending one means the action is still
        awaiting its reviewer, until ``now_unix_s`` passes its expiry (then it is void too); a
        refused, withdrawn or expired one is void, and a void approval is never revived by a later
        worker. An approved one releases the action, unless
        ``now_unix_s`` (the caller's clock at dispatch time, seconds since the epoch; the fold
        itself reads no clock) is past its ``expires_unix_s``. The result is meant for the
        dispatch-time recheck, e.g. as the reason a gate's hook returns to withhold.
        """
        held = [a for a in self.approvals.values() if a.held_operation_id == operation_id]
        for a in held:
            lapsed = now_unix_s is not None and a.expires_unix_s is not None and now_unix_s > a.expires_unix_s
            if a.status == "pending" and lapsed:
                return (f"approval request {a.approval_id} for {operation_id} lapsed at {a.expires_unix_s:.3f} while "
                        f"still pending with {a.reviewer} (now {now_unix_s:.3f}); it is void, "
                        "a fresh request is needed")
            if a.status == "pending":
                return f"approval {a.approval_id} for {operation_id} is still pending with {a.reviewer}"
            if a.status != "approved":
                return f"approval {a.approval_id} for {operation_id} is void ({a.status}); it releases nothing"
            if now_unix_s is not None and a.expires_unix_s is not None and now_unix_s > a.expires_unix_s:
                return (f"approval {a.approval_id} for {operation_id} expired at {a.expires_unix_s:.3f} "
                        f"(now {now_unix_s:.3f}, seconds since the epoch); a fresh approval is needed")
        return None

    def approval_pending(self, operation_id: str, now_unix_s: float | None = None) -> bool:
        """True when a request for ``operation_id`` still waits for its reviewer (pending and, at
        ``now_unix_s``, not past its expiry): the action may yet be released, unlike a void one."""
        return any(a.held_operation_id == operation_id and a.status == "pending"
                   and not (now_unix_s is not None and a.expires_unix_s is not None and now_unix_s > a.expires_unix_s)
                   for a in self.approvals.values())

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible view, with derived budget figures included. Budget figures are shown in
        USD (``ceiling_usd``, ``amount_usd``...; the integer micro-dollar fields are not shown),
        rounded to 1e-9 USD."""
        b = self.budget
        # lazily restored tables (kernel_lib.core.lazy_table) are built here: asdict copies dicts only
        d = asdict(dataclasses.replace(self, budget=Budget(), operations=materialized(self.operations),
                                       decisions=materialized(self.decisions), approvals=materialized(self.approvals)))
        d["budget"] = b.view()
        if not self.masked_actions:
            del d["masked_actions"]
        for k, op in self.operations.items():
            d["operations"][k]["attempt_id"] = op.current_attempt_id
            d["operations"][k]["job_handle"] = op.job_handle
        d["in_doubt"] = self.in_doubt()
        d["attempts_in_doubt"] = [list(x) for x in self.attempts_in_doubt()]
        return d

    def state_dict(self) -> dict[str, Any]:
        """The stored fields only, as plain JSON data: what a record snapshot holds (§11.4.1).

        Equal to ``dataclasses.asdict(self)`` (no derived figures, no rounding, so
        :meth:`from_dict` of it rebuilds an equal record) except that ``masked_actions`` (issue
        18) is left out while empty, so a log without masks snapshots to the same bytes as
        before it existed; and several times faster: the
        containers the reducer changes are fresh, while JSON leaf values (the task, arguments,
        outcomes, list entries) are shared with the record. The reducer replaces those leaves
        and never edits them; callers should treat them as read-only too.
        """
        d = dict(self.__dict__)
        d["operations"] = {k: {**op.__dict__, "attempts": {a: dict(att.__dict__) for a, att in op.attempts.items()}}
                           for k, op in self.operations.items()}
        budget = {k: v for k, v in self.budget.__dict__.items() if k != _OPEN_CACHE}   # fields only
        budget["reservations"] = {k: dict(r.__dict__) for k, r in self.budget.reservations.items()}
        d["budget"] = budget
        d["approvals"] = {k: dict(a.__dict__) for k, a in self.approvals.items()}
        d["decisions"] = dict(self.decisions)
        for name in _LIST_FIELDS:
            d[name] = list(d[name])
        if not d["masked_actions"]:
            del d["masked_actions"]
        return d

    def snapshot_state(self) -> dict[str, Any]:
        """:meth:`state_dict` in the layout of record snapshots (``record-snapshot/1``,
        :mod:`kernel_lib.checkpoint.state`): the same stored fields, with the budget's figures in
        USD under their USD names (``ceiling_usd``, ``amount_usd``, ``settled_usd``...), as the
        format has always held them. :meth:`from_dict` reads it back exactly (each figure is a
        whole number of micro-dollars, so the conversion back is exact)."""
        d = self.state_dict()
        d["budget"] = self.budget.usd_dict()
        return d

    @classmethod
    def from_dict(cls, d: Any) -> "TrajectoryRecord":
        """Rebuild a record from :meth:`state_dict` (exactly: ``from_dict(r.state_dict()) == r``),
        from :meth:`snapshot_state`, or from the :meth:`to_dict` view (its derived keys are
        ignored). Budget figures given in USD (``ceiling_usd``, ``amount_usd``...) are converted to
        micro-dollars as the fold converts them; micro-dollar fields must be integers.

        Integers in time fields are read as floats (JSON writes 5.0 as 5). JSON leaf values are
        shared with ``d``, not copied.

        Raises:
            RecordFormatError: a field is missing or has the wrong shape, or a key is unknown.
        """
        with cyclic_gc_paused():   # a large record is many new objects and no garbage: skip the collector's passes
            try:
                return _record_from(d)
            except RecordFormatError:
                raise
            except (KeyError, TypeError, AttributeError, ValueError) as exc:
                raise RecordFormatError(f"not a trajectory record: {type(exc).__name__}: {exc}") from None


def _usd(x: float) -> float:
    return round(x, 9)


# --- record snapshots: from_dict (§11.4.1) -----------------------------------------------------

_LIST_FIELDS = ("plan_steps", "runtime_inputs", "compactions", "checkpoints", "recovery_records")
#: Keys that to_dict adds (derived figures); from_dict ignores them.
_DERIVED_RECORD = frozenset({"in_doubt", "attempts_in_doubt"})
_DERIVED_BUDGET = frozenset({"outstanding_reservations_usd", "available_usd", "outstanding_reservations", "overruns"})
#: USD names of the budget's and a reservation's micro-dollar fields (the to_dict / snapshot layout).
_BUDGET_USD = {"ceiling_usd": "ceiling_micro_usd", "finalization_reserve_usd": "finalization_reserve_micro_usd",
               "actual_consumption_usd": "actual_consumption_micro_usd"}
_RESERVATION_USD = {"amount_usd": "amount_micro_usd", "settled_usd": "settled_micro_usd"}
_DERIVED_OPERATION = frozenset({"attempt_id", "job_handle"})


def _fields(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


FIELD_NAMES = {cls: _fields(cls) for cls in (TrajectoryRecord, Operation, Attempt, Budget, Reservation, Approval)}


def _known(d: Any, names: frozenset[str], derived: frozenset[str], where: str) -> dict[str, Any]:
    """``d`` restricted to the dataclass field ``names`` (derived keys dropped); an unknown key is
    an error. Returns ``d`` itself when it holds field names only (the common, fast case)."""
    if type(d) is not dict:
        raise RecordFormatError(f"{where}: expected an object, got {type(d).__name__}")
    if d.keys() <= names:
        return d
    unknown = d.keys() - names - derived
    if unknown:
        raise RecordFormatError(f"{where}: unknown field(s) {sorted(unknown)}")
    return {k: v for k, v in d.items() if k in names}


def _float(v: Any) -> Any:
    return float(v) if type(v) is int else v


def _micro_fields(d: dict[str, Any], usd_names: dict[str, str], where: str) -> dict[str, Any]:
    """``d`` with its USD-named figures converted to the micro-dollar fields (a new dict when any
    is converted); every micro-dollar field present must be an integer."""
    if any(k in d for k in usd_names):
        d = dict(d)
        for usd, micro in usd_names.items():
            if usd in d:
                if micro in d:
                    raise RecordFormatError(f"{where}: both {usd} and {micro} are given")
                try:
                    d[micro] = usd_to_micro(d.pop(usd))
                except ValueError as exc:
                    raise RecordFormatError(f"{where}.{usd}: {exc}") from None
    for micro in usd_names.values():
        v = d.get(micro, 0)
        if type(v) is not int:
            raise RecordFormatError(f"{where}.{micro} must be an integer number of micro-dollars, got {v!r:.40}")
    return d


def _make(cls: type, d: dict[str, Any], names: frozenset[str], where: str) -> Any:
    """An instance of dataclass ``cls`` from field dict ``d``: a copy of ``d`` becomes its
    ``__dict__`` when ``d`` holds exactly the fields (fast: no ``__init__`` call per entry of a
    100 000-event record), else through ``__init__`` (defaults, unknown-key errors)."""
    if type(d) is dict and d.keys() == names:
        obj = object.__new__(cls)
        obj.__dict__ = dict(d)
        return obj
    return cls(**_known(d, names, frozenset(), where))


def _record_from(d: Any) -> TrajectoryRecord:
    F = FIELD_NAMES
    kw = dict(_known(d, F[TrajectoryRecord], _DERIVED_RECORD, "record"))
    ops = {}
    attempt_f, op_f = F[Attempt], F[Operation]
    for k, o in kw.get("operations", {}).items():
        od = dict(_known(o, op_f, _DERIVED_OPERATION, f"operations[{k!r}]"))
        od["attempts"] = {a: _make(Attempt, x, attempt_f, f"operations[{k!r}].attempts[{a!r}]")
                          for a, x in od.get("attempts", {}).items()}
        ops[k] = _make(Operation, od, op_f, f"operations[{k!r}]")
    kw["operations"] = ops
    if "budget" in kw:
        bd = dict(_known(kw["budget"], F[Budget] | _BUDGET_USD.keys(), _DERIVED_BUDGET, "budget"))
        res = {}
        res_f = F[Reservation]
        for k, r in bd.get("reservations", {}).items():
            where = f"budget.reservations[{k!r}]"
            if type(r) is not dict:
                raise RecordFormatError(f"{where}: expected an object, got {type(r).__name__}")
            res[k] = _make(Reservation, _micro_fields(r, _RESERVATION_USD, where), res_f, where)
        bd["reservations"] = res
        kw["budget"] = Budget(**_micro_fields(bd, _BUDGET_USD, "budget"))
    apps = {}
    for k, a in kw.get("approvals", {}).items():
        ad = dict(_known(a, F[Approval], frozenset(), f"approvals[{k!r}]"))
        ad["expires_unix_s"] = _float(ad.get("expires_unix_s"))
        apps[k] = Approval(**ad)
    kw["approvals"] = apps
    for name in _LIST_FIELDS:
        if name in kw:
            kw[name] = list(kw[name])
    if "decisions" in kw:
        kw["decisions"] = dict(kw["decisions"])
    rec = TrajectoryRecord(**kw)
    if not isinstance(rec.trajectory_id, str) or not isinstance(rec.last_sequence_number, int):
        raise RecordFormatError("record: trajectory_id must be a string and last_sequence_number an integer")
    for k, op in ops.items():
        if not isinstance(op.operation_id, str) or not isinstance(op.attempts, dict):
            raise RecordFormatError(f"operations[{k!r}]: malformed operation")
    return rec


def initial_record(trajectory_id: str) -> TrajectoryRecord:
    """record_0: the empty base record of a trajectory."""
    return TrajectoryRecord(trajectory_id=trajectory_id)


# ------------------------------------------------------------------------------------------------
# the reducer
# ------------------------------------------------------------------------------------------------


def fold(record_0: TrajectoryRecord, events: Iterable[Event]) -> TrajectoryRecord:
    """Fold ``events`` over ``record_0`` (§11.2.1): apply(...apply(record_0, e1)..., ej).

    ``record_0`` is not modified: the events are folded into one private copy of it, which is
    returned (no copy per event). Events must belong to the record's trajectory and continue its
    sequence without a gap.

    Raises:
        FoldError: another trajectory's event, a sequence gap or repeat, or an event stamped with
            a reducer version this build does not support.
    """
    rec = copy.deepcopy(record_0)
    with cyclic_gc_paused():   # a long fold keeps all it builds: collector passes would free nothing
        _fold_events(rec, events)
    return rec


def apply(record: TrajectoryRecord, event: Event) -> TrajectoryRecord:
    """One reducer step; returns a new record (``record`` is not modified)."""
    return fold(record, [event])


def fold_into(record: TrajectoryRecord, events: Iterable[Event]) -> TrajectoryRecord:
    """Fold ``events`` into ``record`` itself and return it (no copy): what a restore does to a
    record it just rebuilt from a snapshot (§11.4.1). Same reducer and errors as :func:`fold`;
    on a FoldError the record holds every event before the refused one."""
    with cyclic_gc_paused():
        _fold_events(record, events)
    return record


def fork(record: TrajectoryRecord, events: Sequence[Event] = ()) -> TrajectoryRecord:
    """A copy of ``record`` that :func:`fold_into` may fold ``events`` into without changing
    ``record``, made by sharing rather than copying what those events cannot touch.

    The record's own containers (operation table, reservations, approvals, decisions, lists) are
    copied shallowly, and only the operations, reservations and approvals that ``events`` name
    are copied one level deeper. Cost: O(number of entries) pointer copies plus the touched
    entries, against a deep copy of everything for :func:`fold`. Used by checkpoint indexes that
    keep many snapshots of one trajectory (kernel_lib.checkpoint.index). An event family whose
    handler is not known to this function gets a full deep copy instead (always correct).
    """
    if any(type(ev.payload) in _HANDLERS and type(ev.payload) not in _FORK_REVIEWED for ev in events):
        return copy.deepcopy(record)
    new = copy.copy(record)
    new.operations = dict(record.operations)
    new.approvals = dict(record.approvals)
    new.decisions = dict(record.decisions)
    for name in _LIST_FIELDS:
        setattr(new, name, list(getattr(record, name)))
    budget = copy.copy(record.budget)
    budget.reservations = dict(record.budget.reservations)
    new.budget = budget
    done: set[tuple[str, str]] = set()
    for ev in events:
        p = ev.payload
        for attr in ("operation_id", "subject_id", "invocation_id", "held_operation_id"):
            k = getattr(p, attr, None)
            if k is not None and ("op", k) not in done and k in new.operations:
                done.add(("op", k))
                op = copy.copy(new.operations[k])
                op.attempts = {a: copy.copy(x) for a, x in op.attempts.items()}
                new.operations[k] = op
        k = getattr(p, "reservation_id", None)
        if k is not None and ("res", k) not in done and k in budget.reservations:
            done.add(("res", k))
            budget.reservations[k] = copy.copy(budget.reservations[k])
        k = getattr(p, "approval_id", None)
        if k is not None and ("app", k) not in done and k in new.approvals:
            done.add(("app", k))
            new.approvals[k] = copy.copy(new.approvals[k])
    return new


def _settle_status(op: Operation) -> None:
    """Operation status from its attempts: established if any attempt is, else in doubt if any
    attempt with an intent is not settled, else withheld if every attempt with an intent was
    withheld (never sent); admission statuses are left alone otherwise. One pass over the
    attempts, with :attr:`Attempt.withheld` and :attr:`Attempt.in_doubt` spelled out (for an
    attempt that is not established: withheld is a WITHHELD last result, in doubt an intent
    without one); it runs once per folded intent, result and withholding."""
    in_doubt = op.intent_missing
    withheld = False
    for a in op.attempts.values():
        if a.established:
            op.status = "established"
            return
        if a.last_result_status == WITHHELD:
            withheld = True
        elif a.intent_sequence is not None:
            in_doubt = True
    if in_doubt:
        op.status = "in_doubt"
    elif withheld:
        op.status = WITHHELD


def fold_step(rec: TrajectoryRecord, ev: Event) -> TrajectoryRecord:
    """One reducer step applied to ``rec`` in place (no copy); returns ``rec``.

    Same reducer and errors as :func:`fold` (on a FoldError, as for :func:`fold_into`). After the step
    the invariants hold: ``rec.last_sequence_number`` advanced by exactly one, and the budget
    figures the event named are non-negative integer micro-dollars.

    Raises:
        FoldError: another trajectory's event, a sequence gap or repeat, an unsupported reducer
            version, or an event the reducer refuses (see the handlers).
    """
    _fold_events(rec, (ev,))
    return rec


def _fold_events(rec: TrajectoryRecord, events: Iterable[Event]) -> None:
    """The reducer's loop: every step of :func:`fold_step`, in place, for each event in turn.

    The envelope's running figures (position, prefix digest, owner epoch) are kept in locals and
    written back to ``rec`` when the loop ends, however it ends (a refused event, an error from the
    iterator), so ``rec`` then holds exactly the events before the one that failed. No handler
    reads those three fields. The sequence check before each step is what makes the position
    advance by exactly one; the budget handlers check the budget invariants themselves.
    """
    handlers = _HANDLERS   # looked up per event: tests swap a handler in this very dict
    supported = SUPPORTED_REDUCER_VERSIONS
    sha256 = hashlib.sha256
    trajectory_id = rec.trajectory_id
    seq = rec.last_sequence_number
    prefix = rec.prefix_sha256
    owner_epoch = rec.owner_epoch
    try:
        for ev in events:
            if ev.trajectory_id != trajectory_id:
                raise FoldError(f"event {ev.event_id} belongs to {ev.trajectory_id}, not {trajectory_id}")
            n = ev.sequence_number
            if n != seq + 1:
                raise FoldError(f"event {ev.event_id} has sequence_number {n}; the record is at "
                                f"{seq}, so the next must be {seq + 1}")
            if ev.reducer_version not in supported:
                raise FoldError(f"event {ev.event_id} was written under reducer version {ev.reducer_version}; this "
                                f"build folds {sorted(supported)}")
            p = ev.payload
            handler = handlers.get(type(p))
            if handler is None:  # a registered family this reducer version does not interpret
                rec.recovery_records.append({"sequence_number": n, "event_type": ev.event_type,
                                             "payload": p.model_dump(mode="json")})
            else:
                handler(rec, ev, p)
            if ev.owner_epoch > owner_epoch:
                owner_epoch = ev.owner_epoch
            seq = n
            prefix = sha256((prefix + ev.digest).encode()).hexdigest()
    finally:
        rec.last_sequence_number = seq
        rec.prefix_sha256 = prefix
        rec.owner_epoch = owner_epoch


#: 2**45 micro-dollars: below it a float is a whole number of micro-dollars exactly when its
#: product with 1e6 rounds back to it (the fast route of :func:`kernel_lib.core.money.usd_to_micro`).
_WHOLE_MICRO_LIMIT = float(2 ** 45)


def _amount(ev: Event, name: str, amount_usd: Any, rounding: Rounding) -> int:
    """An event's USD amount as integer micro-dollars, a finer amount rounded in the safe
    direction ``rounding`` (:mod:`kernel_lib.core.money`); FoldError (before anything changes) if
    it is not a finite number >= 0 (the schema refuses those; an event built around the schema
    could still carry one).

    A float in [0, 2**45 micro-dollars) that is a whole number of micro-dollars (every amount this
    kernel writes) is converted inline: the result is the one ``usd_to_micro`` gives in every
    rounding direction (the same test as its fast route), and it is >= 0. NaN and infinities
    fail the range test and take the full route, which refuses them."""
    if type(amount_usd) is float:
        scaled = amount_usd * MICRO_PER_USD
        if 0.0 <= scaled < _WHOLE_MICRO_LIMIT:
            micro = round(scaled)
            if micro / MICRO_PER_USD == amount_usd:
                return micro
    try:
        micro = usd_to_micro(amount_usd, rounding)
    except ValueError as exc:
        raise FoldError(f"event {ev.event_id} ({ev.event_type}): {name}: {exc}") from None
    if micro < 0 or amount_usd < 0:
        raise FoldError(f"event {ev.event_id} ({ev.event_type}): {name} is negative ({amount_usd!r} USD)")
    return micro


def _check_budget(b: Budget, r: Reservation | None) -> None:
    """The budget invariants after a step that touched the budget (a failure is a reducer bug,
    not bad data: the handlers refuse whatever would break them). A reservation's outstanding
    amount is ``max(amount - settled, 0)`` or 0, so it is >= 0 by definition; its two terms are
    what is checked."""
    assert b.actual_consumption_micro_usd >= 0 and b.ceiling_micro_usd >= 0, b
    assert r is None or (r.amount_micro_usd >= 0 and r.settled_micro_usd >= 0), r


def _kind_clash(ev: Event, op_id: str, kind: str, op: Operation) -> FoldError:
    return FoldError(f"event {ev.event_id} ({ev.event_type}) names {op_id!r} as a {kind} call, but the log "
                     f"already uses that id for a {op.kind} call")


def _task_started(rec: TrajectoryRecord, ev: Event, p: TaskStarted) -> None:
    if rec.task is not None:
        raise FoldError(f"event {ev.event_id}: a second TaskStarted (the task started at an earlier event)")
    ceiling = _amount(ev, "budget_ceiling_usd", p.budget_ceiling_usd, "down")
    reserve = _amount(ev, "finalization_reserve_usd", p.finalization_reserve_usd, "up")
    rec.task = p.model_dump(mode="json")
    rec.control_state = "RUNNING"
    rec.budget.ceiling_micro_usd = ceiling
    rec.budget.finalization_reserve_micro_usd = reserve
    _check_budget(rec.budget, None)


# The handlers below are the hot ones (a turn of the log is one of each). Each keeps the plain
# reducer's order of checks and changes (the terminal state where dispatch is concerned, the kind
# of call the id was first used for, :func:`_kind_clash`, then the handler's own refusals), so a
# refused event leaves the record as the plain reducer left it. Each settles the operation's
# status directly where the outcome is known without walking the attempts (an operation whose
# only attempt has just been given an intent is in doubt; an attempt just established makes the
# operation established), else through :func:`_settle_status`. They read the payload's fields
# from its ``__dict__`` (where a pydantic model keeps them): an attribute read on a payload goes
# through the model class's ``__getattr__`` hook and costs several dict reads. Error messages,
# built only on a refusal, use plain attributes.


def _context_built(rec: TrajectoryRecord, ev: Event, p: ContextBuilt) -> None:
    pf = p.__dict__   # the payload's fields (see above)
    if rec.control_state in TERMINAL_STATES:
        _not_terminal(rec, ev)
    inv = pf["invocation_id"]
    ops = rec.operations
    op = ops.get(inv)
    if op is None:
        op = ops[inv] = Operation(inv, "model")
    elif op.kind != "model":
        raise _kind_clash(ev, inv, "model", op)
    if not op.attempts:   # the usual case: a new invocation (or one authorized but never built)
        op.tool = pf["model"]
        op.input_ref = pf["delivered_input_sha256"]
        op.attempts[inv] = Attempt(inv, ev.sequence_number)
        op.current_attempt_id = inv
        op.status = "in_doubt"   # the request may have left; only a ModelReplied settles it
        return
    att = op.attempts.get(inv)
    if att is not None and att.intent_sequence is not None:
        raise FoldError(f"event {ev.event_id}: invocation {inv} was already built; a retry needs a "
                        "fresh invocation id")
    op.tool = pf["model"]
    op.input_ref = pf["delivered_input_sha256"]
    if att is None:
        att = op.attempts[inv] = Attempt(inv)
    att.intent_sequence = ev.sequence_number
    op.current_attempt_id = inv
    _settle_status(op)   # in doubt: the request may have left; only a ModelReplied settles it


def _model_replied(rec: TrajectoryRecord, ev: Event, p: ModelReplied) -> None:
    pf = p.__dict__   # the payload's fields (see above)
    inv = pf["invocation_id"]
    ops = rec.operations
    op = ops.get(inv)
    if op is None:
        op = ops[inv] = Operation(inv, "model")
    elif op.kind != "model":
        raise _kind_clash(ev, inv, "model", op)
    att = op.attempts.get(inv)
    if att is None:
        att = op.attempts[inv] = Attempt(inv)
    status = pf["status"]
    att.last_result_status, att.last_result_sequence = status, ev.sequence_number
    if att.intent_sequence is None:
        op.intent_missing = True
    if status == "complete" and not att.established:
        att.established = True
        op.outcome = {"reply": pf["reply"], "proposal": pf["proposal"], "input_tokens": pf["input_tokens"],
                      "output_tokens": pf["output_tokens"]}
        op.status = "established"
        return
    # partial or error replies leave the charge in doubt until usage evidence settles it
    _settle_status(op)


def _authorized(rec: TrajectoryRecord, ev: Event, p: Authorized) -> None:
    pf = p.__dict__   # the payload's fields (see above)
    decision = pf["decision"]
    rec.decisions[pf["decision_id"]] = {"subject_id": pf["subject_id"], "decision": decision,
                                        "policy_version": pf["policy_version"], "grant_id": pf["grant_id"],
                                        "sequence_number": ev.sequence_number}
    subject, kind = pf["subject_id"], pf["subject_kind"]
    ops = rec.operations
    op = ops.get(subject)
    if op is None:
        op = ops[subject] = Operation(subject, kind)
    elif op.kind != kind:
        raise _kind_clash(ev, subject, kind, op)
    op.authorization_ref = pf["decision_id"]
    status = op.status
    if status == WITHHELD:   # a new attempt of an operation whose attempts were never sent
        op.status = "denied" if decision == "deny" else "proposed"   # admitted once its reservation folds
    elif status == "proposed" or status == "admitted" or status == "denied":
        op.status = "denied" if decision == "deny" else ("admitted" if op.reservation_id else "proposed")


def _budget_reserved(rec: TrajectoryRecord, ev: Event, p: BudgetReserved) -> None:
    pf = p.__dict__   # the payload's fields (see above)
    b = rec.budget
    reservations = b.reservations
    rid = pf["reservation_id"]
    if rid in reservations:
        raise FoldError(f"event {ev.event_id}: reservation {rid} already exists; a reservation "
                        "is never replaced (that would change the liability it holds)")
    r = reservations[rid] = Reservation(rid, pf["subject_id"], _amount(ev, "amount_usd", pf["amount_usd"], "up"))
    op = rec.operations.get(pf["subject_id"])
    if op is not None:
        op.reservation_id = rid
        if op.status == "proposed":
            auth = rec.decisions.get(op.authorization_ref or "")
            if auth and auth["decision"] == "allow":
                op.status = "admitted"
    _check_budget(b, r)


def _budget_settled(rec: TrajectoryRecord, ev: Event, p: BudgetSettled) -> None:
    pf = p.__dict__   # the payload's fields (see above)
    actual = _amount(ev, "actual_usd", pf["actual_usd"], "up")
    b = rec.budget
    r = b.reservations.get(pf["reservation_id"])
    if r is None:   # usage evidence without a reservation: count it, hold nothing
        b.actual_consumption_micro_usd += actual
        _check_budget(b, None)
        return
    if r.released:
        raise FoldError(f"event {ev.event_id}: reservation {p.reservation_id} was already finally settled")
    r.settled_micro_usd += actual
    b.actual_consumption_micro_usd += actual
    if pf["final"]:
        r.released = True
    _check_budget(b, r)


def _tool_intent(rec: TrajectoryRecord, ev: Event, p: ToolIntent) -> None:
    pf = p.__dict__   # the payload's fields (see above)
    if rec.control_state in TERMINAL_STATES:
        _not_terminal(rec, ev)
    op_id, aid = pf["operation_id"], pf["attempt_id"]
    ops = rec.operations
    op = ops.get(op_id)
    if op is None:
        op = ops[op_id] = Operation(op_id, "tool")
    elif op.kind != "tool":
        raise _kind_clash(ev, op_id, "tool", op)
    attempts = op.attempts
    arguments = dict(pf["arguments"])
    if not attempts:   # the usual case: a new operation, or one authorized (and reserved) but never tried
        op.tool, op.arguments, op.input_ref = pf["tool"], arguments, pf["input_ref"]
        op.repeat_contract = pf["repeat_contract"]
        op.authorization_ref = pf["authorization_ref"]
        op.reservation_id = pf["reservation_ref"]
        attempts[aid] = Attempt(aid, ev.sequence_number)
        op.current_attempt_id = aid   # not established: that takes an established attempt
        op.status = "in_doubt"   # possible dispatch: nothing but evidence settles its one attempt
        return
    att = attempts.get(aid)
    if att is not None and att.intent_sequence is not None:
        raise FoldError(f"event {ev.event_id}: attempt {aid} of {op_id} already has an intent; "
                        "a new transport attempt needs a new attempt id")
    if any(a.intent_sequence is not None for a in attempts.values()) and (
            (pf["tool"], arguments, pf["input_ref"]) != (op.tool, op.arguments, op.input_ref)):
        raise FoldError(f"event {ev.event_id}: attempt {aid} of {op_id} changes the operation's "
                        "tool, arguments or input; an operation's request is fixed by its first intent")
    op.tool, op.arguments, op.input_ref = pf["tool"], arguments, pf["input_ref"]
    op.repeat_contract = pf["repeat_contract"]
    op.authorization_ref = pf["authorization_ref"]
    op.reservation_id = pf["reservation_ref"]
    if att is None:
        att = attempts[aid] = Attempt(aid)
    att.intent_sequence = ev.sequence_number
    if op.status != "established":
        op.current_attempt_id = aid
    _settle_status(op)   # possible dispatch: nothing but evidence settles this attempt


def _tool_result(rec: TrajectoryRecord, ev: Event, p: ToolResult) -> None:
    pf = p.__dict__   # the payload's fields (see above)
    op_id, aid = pf["operation_id"], pf["attempt_id"]
    ops = rec.operations
    op = ops.get(op_id)
    if op is None:
        op = ops[op_id] = Operation(op_id, "tool")
    elif op.kind != "tool":
        raise _kind_clash(ev, op_id, "tool", op)
    att = op.attempts.get(aid)
    if att is None:
        att = op.attempts[aid] = Attempt(aid)
    if att.intent_sequence is None:
        op.intent_missing = True   # evidence of an effect whose intent was never logged (phantom)
    status = pf["status"]
    att.last_result_status, att.last_result_sequence = status, ev.sequence_number
    att.late = ev.control_epoch < rec.control_epoch
    if pf["job_handle"]:
        att.job_handle = pf["job_handle"]
    if att.established:
        return   # later evidence never un-settles an established attempt
    if status in SETTLING_STATUSES and pf["observation_complete"]:
        att.established = True
        if op.status != "established":   # the first established attempt gives the outcome
            op.outcome = {"status": status, **(pf["outcome"] or {})}
            op.evidence = pf["evidence"]
            op.current_attempt_id = aid
            op.status = "established"
        return
    _settle_status(op)   # accepted / running / timeout / partial / unreachable leave it in doubt


TERMINAL_STATES = frozenset({"COMPLETED", "CANCELLED", "FAILED"})


def _not_terminal(rec: TrajectoryRecord, ev: Event) -> None:
    if rec.control_state in TERMINAL_STATES:
        raise FoldError(f"event {ev.event_id} ({ev.event_type}): the trajectory is {rec.control_state}, a terminal "
                        "state; nothing new may be dispatched")


def _control_changed(rec: TrajectoryRecord, ev: Event, p: ControlChanged) -> None:
    if rec.control_state in TERMINAL_STATES:
        raise FoldError(f"event {ev.event_id}: {rec.control_state} is terminal; no transition to {p.to_state}")
    if rec.control_state == FROZEN and p.to_state not in ("CANCELLED", "FAILED"):
        raise FoldError(f"event {ev.event_id}: the trajectory is FROZEN (terminal escalation); only an operator's "
                        f"CANCELLED or FAILED leaves it, not {p.to_state}")
    if rec.task is None:
        raise FoldError(f"event {ev.event_id}: a control transition before TaskStarted")
    pending = any(a.status == "pending" for a in rec.approvals.values())
    # resuming does not bypass a held action: with an approval pending the trajectory awaits it
    rec.control_state = "AWAITING_APPROVAL" if p.to_state == "RUNNING" and pending else p.to_state
    if p.bump_control_epoch:
        rec.control_epoch = max(rec.control_epoch, ev.control_epoch) + 1


def _plan_changed(rec: TrajectoryRecord, ev: Event, p: PlanChanged) -> None:
    rec.plan_revision, rec.plan_steps = p.plan_revision, [dict(s) for s in p.steps]


def _approval_requested(rec: TrajectoryRecord, ev: Event, p: ApprovalRequested) -> None:
    rec.approvals[p.approval_id] = Approval(p.approval_id, p.held_operation_id, p.held_attempt_id,
                                            p.reviewer, p.expires_unix_s)
    if rec.control_state == "RUNNING":
        rec.control_state = "AWAITING_APPROVAL"


def _approval_resolved(rec: TrajectoryRecord, ev: Event, p: ApprovalResolved) -> None:
    a = rec.approvals.get(p.approval_id)
    if a is None:
        raise FoldError(f"event {ev.event_id} resolves unknown approval {p.approval_id}")
    if a.status != "pending":
        raise FoldError(f"event {ev.event_id}: approval {p.approval_id} was already resolved ({a.status})")
    a.status = p.decision
    if rec.control_state == "AWAITING_APPROVAL" and not any(x.status == "pending" for x in rec.approvals.values()):
        rec.control_state = "RUNNING"


def _attempt_withheld(rec: TrajectoryRecord, ev: Event, p: AttemptWithheld) -> None:
    """The recheck withheld an attempt with a durable intent before it could leave: settle it as
    never sent and release its reservation unspent (§11.3.2). Refused (FoldError) when the attempt
    has no intent or already has evidence (the record would contradict what the log says left),
    or when the reservation is not the subject's."""
    op = rec.operations.get(p.subject_id)
    att = op.attempts.get(p.attempt_id) if op is not None else None
    if op is None or att is None or att.intent_sequence is None or op.kind != p.subject_kind:
        raise FoldError(f"event {ev.event_id}: {p.subject_kind} attempt {p.subject_id}/{p.attempt_id} has no durable "
                        "intent; only an admitted attempt whose intent is logged can be withheld")
    if att.established or att.last_result_status is not None:
        raise FoldError(f"event {ev.event_id}: attempt {p.subject_id}/{p.attempt_id} already has evidence "
                        f"({att.last_result_status}); a withheld attempt is one that never left")
    r = rec.budget.reservations.get(p.reservation_id) if p.reservation_id is not None else None
    if p.reservation_id is not None and (r is None or r.subject_id != p.subject_id):
        raise FoldError(f"event {ev.event_id}: reservation {p.reservation_id} is not held for {p.subject_id}")
    att.last_result_status, att.last_result_sequence = WITHHELD, ev.sequence_number
    if r is not None:
        r.released = True   # never sent: no effect and no charge, so nothing is left to hold
    _settle_status(op)


def _compacted(rec: TrajectoryRecord, ev: Event, p: Compacted) -> None:
    rec.compactions.append({"sequence_number": ev.sequence_number, **p.model_dump(mode="json")})


def _runtime_input(rec: TrajectoryRecord, ev: Event, p: RuntimeInput) -> None:
    rec.runtime_inputs.append({"sequence_number": ev.sequence_number, "kind": p.kind, "name": p.name,
                               "value": p.value})


def _checkpoint(rec: TrajectoryRecord, ev: Event, p: Checkpoint | CheckpointV2) -> None:
    rec.checkpoints.append({"sequence_number": ev.sequence_number, **p.model_dump(mode="json")})


def _workspace_changed(rec: TrajectoryRecord, ev: Event, p: WorkspaceChanged) -> None:
    if rec.workspace_tree_sha256 is not None and p.base_tree_sha256 != rec.workspace_tree_sha256:
        raise FoldError(f"event {ev.event_id}: workspace change {p.change_id} starts from tree "
                        f"{p.base_tree_sha256[:12]}…, but the log's workspace is at {rec.workspace_tree_sha256[:12]}…")
    rec.workspace_tree_sha256 = p.result_tree_sha256


def _recovery(rec: TrajectoryRecord, ev: Event, p: Any) -> None:
    rec.recovery_records.append({"sequence_number": ev.sequence_number, "event_type": ev.event_type,
                                 **p.model_dump(mode="json")})


def _frozen(rec: TrajectoryRecord, ev: Event, p: TrajectoryFrozen) -> None:
    """Terminal escalation (Failure Recovery, the ACB freeze): the record keeps the incident and
    the control state becomes FROZEN, so admission refuses every model call and dispatch."""
    if rec.control_state in TERMINAL_STATES:
        raise FoldError(f"event {ev.event_id}: the trajectory is {rec.control_state}, a terminal state; it cannot be "
                        "frozen")
    _recovery(rec, ev, p)
    rec.control_state = FROZEN


def _action_masked(rec: TrajectoryRecord, ev: Event, p: ActionMasked) -> None:
    """A tombstone masking an action signature (table 7, tier 2): kept as a recovery record and
    indexed in ``masked_actions`` (a new dict, so a fork or snapshot sharing the old one is not
    changed). A second mask of the same signature keeps the first."""
    _recovery(rec, ev, p)
    if p.action_signature not in rec.masked_actions:
        rec.masked_actions = {**rec.masked_actions, p.action_signature: {
            "tool": p.tool, "reason": p.reason, "position": p.position, "intervention_id": p.intervention_id,
            "nonce_arguments": p.nonce_arguments, "sequence_number": ev.sequence_number}}


def _quarantined(rec: TrajectoryRecord, ev: Event, p: TrajectoryQuarantined) -> None:
    """The quarantine tombstone (Failure Recovery, table 12 stage 4): kept as a recovery record;
    a trajectory that has not ended becomes FROZEN (admission refuses everything; only an
    operator's CANCELLED or FAILED leaves it). One that had ended keeps its state: the tombstone
    then only taints what it produced. t_taint must name a position the log already has."""
    if p.taint_from_sequence > ev.sequence_number:
        raise FoldError(f"event {ev.event_id}: taint_from_sequence {p.taint_from_sequence} is after the tombstone "
                        f"itself (#{ev.sequence_number})")
    if p.detected_at_sequence >= ev.sequence_number:   # t* is a position the log held before the tombstone
        raise FoldError(f"event {ev.event_id}: detected_at_sequence {p.detected_at_sequence} is not before the "
                        f"tombstone itself (#{ev.sequence_number})")
    if rec.task is None:   # TaskStarted would set RUNNING and thaw it without an operator
        raise FoldError(f"event {ev.event_id}: a quarantine tombstone before TaskStarted")
    _recovery(rec, ev, p)
    if rec.control_state not in TERMINAL_STATES:
        rec.control_state = FROZEN


_HANDLERS = {
    TaskStarted: _task_started, ContextBuilt: _context_built, ModelReplied: _model_replied,
    Authorized: _authorized, BudgetReserved: _budget_reserved, BudgetSettled: _budget_settled,
    ToolIntent: _tool_intent, ToolResult: _tool_result, ControlChanged: _control_changed,
    PlanChanged: _plan_changed, ApprovalRequested: _approval_requested,
    ApprovalResolved: _approval_resolved, Compacted: _compacted, RuntimeInput: _runtime_input,
    Checkpoint: _checkpoint, CompensationIssued: _recovery, QuarantineChanged: _recovery,
    WatchdogIntervened: _recovery, CheckpointV2: _checkpoint, WorkspaceChanged: _workspace_changed,
    ToolIntentV1: _tool_intent,   # schema 1 of ToolIntent (no idempotency key) folds the same way
    ToolIntentV2: _tool_intent,   # schema 2 of ToolIntent (no status_lookup) folds the same way
    AttemptWithheld: _attempt_withheld,
    SagaStepChanged: _recovery, SagaChanged: _recovery, TrajectoryFrozen: _frozen,
    RecoveryDecided: _recovery, RepairOutcome: _recovery,
    PivotVerified: _recovery, PivotCrossed: _recovery, OutboxChanged: _recovery,
    WatchdogIntervenedV1: _recovery, ActionMasked: _action_masked,   # issue 18 (wd-tiers)
    TrajectoryQuarantined: _quarantined,   # issue 19 (quarantine)
}

#: Payload types whose handlers :func:`fork` was checked against: they change only the record's
#: scalars and containers, and the operations, reservations and approvals their payload names by
#: ``operation_id``/``subject_id``/``invocation_id``/``held_operation_id``, ``reservation_id`` and
#: ``approval_id``. A handler added later is not in this set until it is checked, and fork falls
#: back to a deep copy for it.
_FORK_REVIEWED = frozenset({
    TaskStarted, ContextBuilt, ModelReplied, Authorized, BudgetReserved, BudgetSettled, ToolIntent, ToolResult,
    ControlChanged, PlanChanged, ApprovalRequested, ApprovalResolved, Compacted, RuntimeInput, Checkpoint,
    CompensationIssued, QuarantineChanged, WatchdogIntervened, CheckpointV2, WorkspaceChanged, ToolIntentV1,
    AttemptWithheld, ToolIntentV2, SagaStepChanged, SagaChanged, TrajectoryFrozen, RecoveryDecided, RepairOutcome,
    PivotVerified, PivotCrossed, OutboxChanged,
    WatchdogIntervenedV1, ActionMasked,   # issue 18: masked_actions is replaced, never edited
    TrajectoryQuarantined,   # issue 19: a scalar (control_state) and an appended recovery record
})
