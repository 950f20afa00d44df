"""The reducer as it was before the fold was made faster (issue 15, "Read path"): a frozen reference
the differential tests (tests/test_fold_differential.py) compare :mod:`kernel_lib.core.record`'s
fold against, event for event. It works on the record's own dataclasses and must not be edited
to follow later changes of the reducer's semantics: such a change shows up as a difference here
and is then a deliberate, reviewed update of this reference.

Copied from kernel_lib/core/record.py at commit 1cc2ece (main), handlers unchanged, with the
ActionMasked handler issue 18 added on main since (commit 3919e7f); only the public names are
prefixed with ``reference_``.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any, Iterable, Literal

from kernel_lib._support.gc_pause import cyclic_gc_paused
from kernel_lib.core.events import (
    ActionMasked,
    ApprovalRequested,
    ApprovalResolved,
    AttemptWithheld,
    Authorized,
    BudgetReserved,
    BudgetSettled,
    Checkpoint,
    CheckpointV2,
    Compacted,
    CompensationIssued,
    ContextBuilt,
    ControlChanged,
    Event,
    FROZEN,
    ModelReplied,
    OutboxChanged,
    PivotCrossed,
    PivotVerified,
    PlanChanged,
    QuarantineChanged,
    RecoveryDecided,
    RepairOutcome,
    RuntimeInput,
    SagaChanged,
    SagaStepChanged,
    TaskStarted,
    ToolIntent,
    ToolIntentV1,
    ToolIntentV2,
    ToolResult,
    TrajectoryFrozen,
    WatchdogIntervened,
    WatchdogIntervenedV1,
    WorkspaceChanged,
)
from kernel_lib.core.money import Rounding, usd_to_micro
from kernel_lib.core.record import (
    SETTLING_STATUSES,
    SUPPORTED_REDUCER_VERSIONS,
    WITHHELD,
    Approval,
    Attempt,
    Operation,
    Reservation,
    TrajectoryRecord,
)
from kernel_lib.errors import FoldError


def reference_fold(record_0: TrajectoryRecord, events: Iterable[Event]) -> TrajectoryRecord:
    """Fold ``events`` over ``record_0`` (§11.2.1): apply(...apply(record_0, e1)..., ej).

    ``record_0`` is not modified. Events must belong to the record's trajectory and continue its
    sequence without a gap.

    Raises:
        FoldError: another trajectory's event, a sequence gap or repeat, or an event stamped with
            a reducer version this build does not support.
    """
    rec = copy.deepcopy(record_0)
    with cyclic_gc_paused():   # a long fold keeps all it builds: collector passes would free nothing
        for ev in events:
            reference_fold_step(rec, ev)
    return rec


def reference_apply(record: TrajectoryRecord, event: Event) -> TrajectoryRecord:
    """One reducer step; returns a new record (``record`` is not modified)."""
    return reference_fold(record, [event])


def reference_fold_into(record: TrajectoryRecord, events: Iterable[Event]) -> TrajectoryRecord:
    """Fold ``events`` into ``record`` itself and return it (no copy): what a restore does to a
    record it just rebuilt from a snapshot (§11.4.1). Same reducer and errors as :func:`fold`;
    on a FoldError the record holds every event before the refused one."""
    with cyclic_gc_paused():
        for ev in events:
            reference_fold_step(record, ev)
    return record



def _op(rec: TrajectoryRecord, op_id: str, kind: Literal["tool", "model"], ev: Event) -> Operation:
    op = rec.operations.get(op_id)
    if op is None:
        op = rec.operations[op_id] = Operation(operation_id=op_id, kind=kind)
    elif op.kind != kind:
        raise FoldError(f"event {ev.event_id} ({ev.event_type}) names {op_id!r} as a {kind} call, but the log "
                        f"already uses that id for a {op.kind} call")
    return op


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


def reference_fold_step(rec: TrajectoryRecord, ev: Event) -> TrajectoryRecord:
    """One reducer step applied to ``rec`` in place (no copy); returns ``rec``.

    Same reducer and errors as :func:`fold` (on a FoldError, as for :func:`fold_into`). After the step
    the invariants hold: ``rec.last_sequence_number`` advanced by exactly one, and the budget
    figures the event named are non-negative integer micro-dollars.

    Raises:
        FoldError: another trajectory's event, a sequence gap or repeat, an unsupported reducer
            version, or an event the reducer refuses (see the handlers).
    """
    before = rec.last_sequence_number
    if ev.trajectory_id != rec.trajectory_id:
        raise FoldError(f"event {ev.event_id} belongs to {ev.trajectory_id}, not {rec.trajectory_id}")
    if ev.sequence_number != rec.last_sequence_number + 1:
        raise FoldError(f"event {ev.event_id} has sequence_number {ev.sequence_number}; the record is at "
                        f"{rec.last_sequence_number}, so the next must be {rec.last_sequence_number + 1}")
    if ev.reducer_version not in SUPPORTED_REDUCER_VERSIONS:
        raise FoldError(f"event {ev.event_id} was written under reducer version {ev.reducer_version}; this "
                        f"build folds {sorted(SUPPORTED_REDUCER_VERSIONS)}")
    p = ev.payload
    handler = _HANDLERS.get(type(p))
    if handler is None:  # a registered family this reducer version does not interpret
        rec.recovery_records.append({"sequence_number": ev.sequence_number, "event_type": ev.event_type,
                                     "payload": p.model_dump(mode="json")})
    else:
        handler(rec, ev, p)
    rec.owner_epoch = max(rec.owner_epoch, ev.owner_epoch)
    rec.last_sequence_number = ev.sequence_number
    rec.prefix_sha256 = hashlib.sha256((rec.prefix_sha256 + ev.digest).encode()).hexdigest()
    # invariants (the checks above and the handlers' refusals guarantee them; a failure here is a
    # reducer bug, not bad data)
    assert rec.last_sequence_number == before + 1, (before, rec.last_sequence_number)
    if handler is _budget_reserved or handler is _budget_settled or handler is _task_started:
        b = rec.budget
        assert b.actual_consumption_micro_usd >= 0 and b.ceiling_micro_usd >= 0, b
        r = b.reservations.get(getattr(p, "reservation_id", ""))
        assert r is None or (r.amount_micro_usd >= 0 and r.settled_micro_usd >= 0 and r.outstanding_micro_usd >= 0), r
    return rec


def _amount(ev: Event, name: str, amount_usd: Any, rounding: Rounding) -> int:
    """An event's USD amount as integer micro-dollars, a finer amount rounded in the safe
    direction ``rounding`` (:mod:`kernel_lib.core.money`); FoldError (before anything changes) if
    it is not a finite number >= 0 (the schema refuses those; an event built around the schema
    could still carry one)."""
    try:
        micro = usd_to_micro(amount_usd, rounding)
    except ValueError as exc:
        raise FoldError(f"event {ev.event_id} ({ev.event_type}): {name}: {exc}") from None
    if micro < 0 or amount_usd < 0:
        raise FoldError(f"event {ev.event_id} ({ev.event_type}): {name} is negative ({amount_usd!r} USD)")
    return micro


def _task_started(rec: TrajectoryRecord, ev: Event, p: TaskStarted) -> None:
    if rec.task is not None:
        raise FoldError(f"event {ev.event_id}: a second TaskStarted (the task started at an earlier event)")
    ceiling = _amount(ev, "budget_ceiling_usd", p.budget_ceiling_usd, "down")
    reserve = _amount(ev, "finalization_reserve_usd", p.finalization_reserve_usd, "up")
    rec.task = p.model_dump(mode="json")
    rec.control_state = "RUNNING"
    rec.budget.ceiling_micro_usd = ceiling
    rec.budget.finalization_reserve_micro_usd = reserve


def _context_built(rec: TrajectoryRecord, ev: Event, p: ContextBuilt) -> None:
    _not_terminal(rec, ev)
    op = _op(rec, p.invocation_id, "model", ev)
    if p.invocation_id in op.attempts and op.attempts[p.invocation_id].intent_sequence is not None:
        raise FoldError(f"event {ev.event_id}: invocation {p.invocation_id} was already built; a retry needs a "
                        "fresh invocation id")
    op.tool = p.model
    op.input_ref = p.delivered_input_sha256
    att = op.attempts.setdefault(p.invocation_id, Attempt(p.invocation_id))
    att.intent_sequence = ev.sequence_number
    op.current_attempt_id = p.invocation_id
    _settle_status(op)   # in doubt: the request may have left; only a ModelReplied settles it


def _model_replied(rec: TrajectoryRecord, ev: Event, p: ModelReplied) -> None:
    op = _op(rec, p.invocation_id, "model", ev)
    att = op.attempts.setdefault(p.invocation_id, Attempt(p.invocation_id))
    att.last_result_status, att.last_result_sequence = p.status, ev.sequence_number
    if att.intent_sequence is None:
        op.intent_missing = True
    if p.status == "complete" and not att.established:
        att.established = True
        op.outcome = {"reply": p.reply, "proposal": p.proposal, "input_tokens": p.input_tokens,
                      "output_tokens": p.output_tokens}
    # partial or error replies leave the charge in doubt until usage evidence settles it
    _settle_status(op)


def _authorized(rec: TrajectoryRecord, ev: Event, p: Authorized) -> None:
    rec.decisions[p.decision_id] = {"subject_id": p.subject_id, "decision": p.decision,
                                    "policy_version": p.policy_version, "grant_id": p.grant_id,
                                    "sequence_number": ev.sequence_number}
    op = _op(rec, p.subject_id, p.subject_kind, ev)
    op.authorization_ref = p.decision_id
    if op.status == WITHHELD:   # a new attempt of an operation whose attempts were never sent
        op.status = "denied" if p.decision == "deny" else "proposed"   # admitted once its reservation folds
    elif op.status in ("proposed", "admitted", "denied"):
        op.status = "denied" if p.decision == "deny" else ("admitted" if op.reservation_id else "proposed")


def _budget_reserved(rec: TrajectoryRecord, ev: Event, p: BudgetReserved) -> None:
    if p.reservation_id in rec.budget.reservations:
        raise FoldError(f"event {ev.event_id}: reservation {p.reservation_id} already exists; a reservation "
                        "is never replaced (that would change the liability it holds)")
    rec.budget.reservations[p.reservation_id] = Reservation(p.reservation_id, p.subject_id,
                                                            _amount(ev, "amount_usd", p.amount_usd, "up"))
    op = rec.operations.get(p.subject_id)
    if op is not None:
        op.reservation_id = p.reservation_id
        auth = rec.decisions.get(op.authorization_ref or "")
        if op.status == "proposed" and auth and auth["decision"] == "allow":
            op.status = "admitted"


def _budget_settled(rec: TrajectoryRecord, ev: Event, p: BudgetSettled) -> None:
    actual = _amount(ev, "actual_usd", p.actual_usd, "up")
    r = rec.budget.reservations.get(p.reservation_id)
    if r is None:   # usage evidence without a reservation: count it, hold nothing
        rec.budget.actual_consumption_micro_usd += actual
        return
    if r.released:
        raise FoldError(f"event {ev.event_id}: reservation {p.reservation_id} was already finally settled")
    r.settled_micro_usd += actual
    rec.budget.actual_consumption_micro_usd += actual
    if p.final:
        r.released = True


def _tool_intent(rec: TrajectoryRecord, ev: Event, p: ToolIntent) -> None:
    _not_terminal(rec, ev)
    op = _op(rec, p.operation_id, "tool", ev)
    if p.attempt_id in op.attempts and op.attempts[p.attempt_id].intent_sequence is not None:
        raise FoldError(f"event {ev.event_id}: attempt {p.attempt_id} of {p.operation_id} already has an intent; "
                        "a new transport attempt needs a new attempt id")
    if any(a.intent_sequence is not None for a in op.attempts.values()) and (
            (p.tool, dict(p.arguments), p.input_ref) != (op.tool, op.arguments, op.input_ref)):
        raise FoldError(f"event {ev.event_id}: attempt {p.attempt_id} of {p.operation_id} changes the operation's "
                        "tool, arguments or input; an operation's request is fixed by its first intent")
    op.tool, op.arguments, op.input_ref = p.tool, dict(p.arguments), p.input_ref
    op.repeat_contract = p.repeat_contract
    op.authorization_ref = p.authorization_ref
    op.reservation_id = p.reservation_ref
    att = op.attempts.setdefault(p.attempt_id, Attempt(p.attempt_id))
    att.intent_sequence = ev.sequence_number
    if op.status != "established":
        op.current_attempt_id = p.attempt_id
    _settle_status(op)   # possible dispatch: nothing but evidence settles this attempt


def _tool_result(rec: TrajectoryRecord, ev: Event, p: ToolResult) -> None:
    op = _op(rec, p.operation_id, "tool", ev)
    att = op.attempts.setdefault(p.attempt_id, Attempt(p.attempt_id))
    if att.intent_sequence is None:
        op.intent_missing = True   # evidence of an effect whose intent was never logged (phantom)
    att.last_result_status, att.last_result_sequence = p.status, ev.sequence_number
    att.late = ev.control_epoch < rec.control_epoch
    if p.job_handle:
        att.job_handle = p.job_handle
    if att.established:
        return   # later evidence never un-settles an established attempt
    if p.status in SETTLING_STATUSES and p.observation_complete:
        att.established = True
        if op.status != "established":   # the first established attempt gives the outcome
            op.outcome = {"status": p.status, **(p.outcome or {})}
            op.evidence = p.evidence
            op.current_attempt_id = p.attempt_id
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
}

#: Payload types whose handlers :func:`fork` was checked against: they change only the record's
#: scalars and containers, and the operations, reservations and approvals their payload names by
#: ``operation_id``/``subject_id``/``invocation_id``/``held_operation_id``, ``reservation_id`` and
#: ``approval_id``. A handler added later is not in this set until it is checked, and fork falls
