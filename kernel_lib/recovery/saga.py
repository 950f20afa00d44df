"""The trajectory saga as a fold of the trajectory log: states, the compensation stack Σ, decisions.

Failure Recovery, definition 0.1 and tables 2–3. A saga's forward steps T_i and its compensators
C_i are ordinary tool operations of the trajectory (``ToolIntent``/``ToolResult`` through the
dispatch gate, so eq. 1 holds for both); the saga adds ``SagaStepChanged`` and ``SagaChanged``
records in the same log, and :func:`fold_saga` folds all of them into a :class:`SagaRecord`.
Nothing is kept in process memory: a new owner folds the same log and gets the same Σ.

The sub-transaction state machine (:data:`TRANSITIONS`, table 2)::

    (new)        -> PENDING
    PENDING      -> EXECUTING (derived: the step's first ToolIntent is in the log), ABORTED
    EXECUTING    -> COMMITTED (C_i bound and recorded with it), FAILED
    COMMITTED    -> COMPENSATING (only with a compensator: a pivot's C = ∅)
    FAILED       -> COMPENSATING (only with C_k recorded: a partial effect, or a step that failed in
                    doubt and that its service's status lookup later shows completed), HALTED
    COMPENSATING -> COMPENSATED, PANIC
    PANIC        -> MANUAL_ESCALATION

Table 2 lists ``COMPENSATING, TERMINATED`` after ``COMPENSATED``: those are the *saga's* next
moves (the preceding step's compensator, or the end of the unwind). A compensated step itself
does not move again, so here COMPENSATED, ABORTED, HALTED and MANUAL_ESCALATION are final for
the step. :func:`check_transition` raises :class:`SagaTransitionError` for anything else; the
runner calls it before it appends, so an illegal transition appends nothing.

The pivot crossing (Failure Recovery, "The pivot action boundary"): the saga is in its
preparation phase (the chapter's STATUS_PREPARING; ``RUNNING`` in the log, as logs written before
the crossing existed say) until a ``PivotCrossed`` record moves it to ``COMMITTED``
(STATUS_COMMITTED). The runner appends that record with a barrier before the pivot's
``ToolIntent``. From it on Σ is retired (:attr:`SagaRecord.stack` is empty,
:attr:`SagaRecord.retired_stack` shows what it held): no compensator may run, a failure is
retried forward or escalated. A log without any ``PivotCrossed`` folds exactly as before (its
phase is read from a committed tier III step, :attr:`SagaRecord.pivot_committed`).
``PivotVerified`` (the pre-pivot gate's verdicts) and ``OutboxChanged`` (the escrow and atomic
outbox of Example 0.1's remedy) are folded into :attr:`SagaRecord.verifications` and
:attr:`SagaRecord.outbox`.

The decisions (:func:`next_unwind`, :func:`decide_crossing`) are pure functions of the
:class:`SagaRecord` and the trajectory record's operation table;
:mod:`kernel_lib.recovery.runner` applies them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kernel_lib.core.events import (
    Event, OutboxChanged, PivotCrossed, PivotVerified, SagaChanged, SagaStepChanged, ToolIntent, TrajectoryFrozen,
)
from kernel_lib.core.record import Operation, TrajectoryRecord
from kernel_lib.errors import SagaTransitionError

__all__ = ["TRANSITIONS", "FINAL_STEP_STATES", "SAGA_TRANSITIONS", "SagaStep", "SagaRecord", "OutboxEntry",
           "check_transition", "fold_saga", "compensation_operation_id", "step_operation_id",
           "outbox_operation_id", "UnwindAction", "next_unwind", "CrossingDecision", "decide_crossing"]

#: Allowed transitions of one sub-transaction (see the module docstring). ``None`` is "not yet in
#: the saga".
TRANSITIONS: dict[str | None, frozenset[str]] = {
    None: frozenset({"PENDING"}),
    "PENDING": frozenset({"EXECUTING", "ABORTED"}),
    "EXECUTING": frozenset({"COMMITTED", "FAILED"}),
    "COMMITTED": frozenset({"COMPENSATING"}),
    "FAILED": frozenset({"COMPENSATING", "HALTED"}),
    "COMPENSATING": frozenset({"COMPENSATED", "PANIC"}),
    "COMPENSATED": frozenset(),
    "PANIC": frozenset({"MANUAL_ESCALATION"}),
    "MANUAL_ESCALATION": frozenset(),
    "ABORTED": frozenset(),
    "HALTED": frozenset(),
}
FINAL_STEP_STATES = frozenset(k for k, v in TRANSITIONS.items() if k is not None and not v)

#: Saga-level transitions (``SagaChanged``, and ``PivotCrossed`` for RUNNING -> COMMITTED): RUNNING
#: (the preparation phase, STATUS_PREPARING) first; COMPENSATING once an unwind starts; COMMITTED
#: once the pivot is crossed (STATUS_COMMITTED: no COMPENSATING after it).
SAGA_TRANSITIONS: dict[str | None, frozenset[str]] = {
    None: frozenset({"RUNNING"}),
    "RUNNING": frozenset({"COMPENSATING", "COMMITTED", "COMPLETED", "HALTED", "PANIC"}),
    "COMMITTED": frozenset({"COMPLETED", "HALTED", "PANIC", "COMPENSATING"}),   # COMPENSATING: pivot refused
    "COMPENSATING": frozenset({"ABORT_CONSISTENT", "PANIC"}),
    "ABORT_CONSISTENT": frozenset(),
    "COMPLETED": frozenset(),
    "HALTED": frozenset(),
    "PANIC": frozenset(),
}


def step_operation_id(saga_id: str, index: int) -> str:
    """The operation id of forward step T_index of ``saga_id`` (its κ_i is the gate's
    :func:`~kernel_lib.core.proposals.idempotency_key` of this id)."""
    return f"{saga_id}.T{index}"


def compensation_operation_id(step_id: str) -> str:
    """The operation id of C_i for the step ``step_id``; κ_i^c is the idempotency key of this id."""
    return f"{step_id}.C"


def outbox_operation_id(saga_id: str, entry_id: str) -> str:
    """The operation id of the send that flushes escrow entry ``entry_id`` (its κ is the gate's
    idempotency key of this id, fixed when the entry is staged)."""
    return f"{saga_id}.outbox.{entry_id}"


def check_transition(step_id: str, from_state: str | None, to_state: str) -> None:
    """Raise :class:`SagaTransitionError` unless table 2 allows ``from_state -> to_state``."""
    allowed = TRANSITIONS.get(from_state)
    if allowed is None or to_state not in allowed:
        raise SagaTransitionError(
            f"saga step {step_id}: {from_state or '(new)'} -> {to_state} is not a transition of table 2 "
            f"(from {from_state or '(new)'}: {sorted(allowed) if allowed else 'none, the state is final'})",
            from_state=from_state, to_state=to_state)


@dataclass
class SagaStep:
    """One sub-transaction T_i = <α_i, θ_i, φ_i, κ_i> as the log records it.

    ``history``: ``(sequence_number, state)`` of every transition. ``compensator``: C_i bound
    (``{tool, arguments, operation_id, idempotency_key, repeat_contract, status_lookup}``) or None.
    """

    step_id: str
    index: int
    tool: str
    tier: str
    state: str
    idempotency_key: str | None = None
    compensator: dict[str, Any] | None = None
    reason: str = ""
    residue: list[dict[str, Any]] = field(default_factory=list)
    history: list[tuple[int, str]] = field(default_factory=list)

    @property
    def pivot(self) -> bool:
        return self.tier == "III"


@dataclass
class OutboxEntry:
    """One escrow entry (an ``OutboxChanged`` history): ``state`` STAGED, DROPPED or FLUSHED;
    ``history``: ``(sequence_number, state)`` of each record."""

    entry_id: str
    tool: str
    arguments: dict[str, Any]
    operation_id: str
    idempotency_key: str
    payload_sha256: str
    state: str
    history: list[tuple[int, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"entry_id": self.entry_id, "tool": self.tool, "arguments": self.arguments,
                "operation_id": self.operation_id, "idempotency_key": self.idempotency_key,
                "payload_sha256": self.payload_sha256, "state": self.state}


@dataclass
class SagaRecord:
    """The saga's state folded from the log (table 3: the forward execution log L_fwd and the
    LIFO compensation stack Σ)."""

    saga_id: str
    state: str | None = None
    steps: dict[str, SagaStep] = field(default_factory=dict)
    failed_step_id: str | None = None
    reason: str = ""
    frozen: dict[str, Any] | None = None
    last_sequence_number: int = 0
    #: the PivotCrossed record (``{sequence_number, pivot_step_id, pivot_index, pivot_tool,
    #: verified_sequence, retired_compensators, outbox, reason}``) or None
    crossing: dict[str, Any] | None = None
    #: every PivotVerified record, in log order (``{sequence_number, pivot_step_id, passed, ...}``)
    verifications: list[dict[str, Any]] = field(default_factory=list)
    #: escrow entries by id (OutboxChanged)
    outbox: dict[str, OutboxEntry] = field(default_factory=dict)

    def _sigma(self) -> list[SagaStep]:
        live = [s for s in self.steps.values() if s.compensator is not None
                and s.state in ("COMMITTED", "FAILED", "COMPENSATING")]
        return sorted(live, key=lambda s: s.index, reverse=True)

    @property
    def stack(self) -> list[SagaStep]:
        """Σ, top first: every step whose compensator is recorded and not yet run to COMPENSATED
        (COMMITTED, a FAILED step with a partial effect, or COMPENSATING), latest index first.
        Empty once the pivot is crossed (L_comp is retired: see :attr:`retired_stack`)."""
        return [] if self._retired() else self._sigma()

    @property
    def retired_stack(self) -> list[SagaStep]:
        """What Σ held when the crossing retired it (empty before the crossing): shown, never run."""
        return self._sigma() if self._retired() else []

    @property
    def pivot_refused(self) -> bool:
        """The crossing's own pivot step failed definitively, leaving no effect (FAILED or ABORTED,
        no compensator recorded for a partial effect): the pivot never returned successfully, so
        the world did not advance and the finalization phase never began (the chapter disables
        rollback once the pivot *returns*); L_comp is live again and the saga may unwind."""
        if self.crossing is None:
            return False
        step = self.steps.get(self.crossing.get("pivot_step_id") or "")
        return step is not None and step.state in ("FAILED", "ABORTED") and step.compensator is None

    def _retired(self) -> bool:
        return self.crossing is not None and not self.pivot_refused

    @property
    def phase(self) -> str | None:
        """``"PREPARING"`` before the pivot, ``"COMMITTED"`` once it is crossed (a ``PivotCrossed``
        record, or in a log written before that record existed, a committed tier III step); None
        before the saga started."""
        if self._retired() or self.pivot_committed is not None:
            return "COMMITTED"
        return None if self.state is None else "PREPARING"

    def latest_verification(self, pivot_step_id: str) -> dict[str, Any] | None:
        """The last PivotVerified record for ``pivot_step_id``, or None."""
        return next((v for v in reversed(self.verifications) if v["pivot_step_id"] == pivot_step_id), None)

    @property
    def pivot_committed(self) -> SagaStep | None:
        """The committed pivot (tier III) step, if any: past it no rollback is chosen."""
        return next((s for s in self.steps.values() if s.pivot and s.state == "COMMITTED"), None)

    @property
    def next_index(self) -> int:
        return max((s.index for s in self.steps.values()), default=0) + 1

    def forward_log(self) -> list[dict[str, Any]]:
        """L_fwd as table 3 shows it: one row per step (index, tool, tier, state, κ_i)."""
        return [{"step": s.index, "step_id": s.step_id, "tool": s.tool, "tier": s.tier, "state": s.state,
                 "idempotency_key": s.idempotency_key} for s in sorted(self.steps.values(), key=lambda s: s.index)]

    def stack_view(self) -> list[dict[str, Any]]:
        """Σ as table 3 shows it, top first: compensator tool, bound arguments, κ_i^c."""
        stack = self.stack
        return [{"position": "TOP" if i == 0 else f"STACK[{len(stack) - 1 - i}]", "step": s.index,
                 "compensator": s.compensator["tool"], "arguments": s.compensator["arguments"],
                 "idempotency_key": s.compensator.get("idempotency_key"), "state": s.state}
                for i, s in enumerate(stack)]


def fold_saga(events: Iterable[Event], saga_id: str, into: SagaRecord | None = None) -> SagaRecord:
    """Fold the trajectory's events into the :class:`SagaRecord` of ``saga_id``.

    Reads ``SagaStepChanged``/``SagaChanged`` of that saga, ``TrajectoryFrozen``, and the
    ``ToolIntent`` of each pending step (PENDING -> EXECUTING). Other events are skipped.
    ``into``: a record folded so far, continued in place with the events after it (the runner
    folds each batch it appends this way).

    Raises:
        SagaTransitionError: the log holds a transition table 2 does not allow, or a record that
            contradicts the step's declaration (another tool, tier or index for the same step).
    """
    rec = into if into is not None else SagaRecord(saga_id)
    for ev in events:
        p = ev.payload
        rec.last_sequence_number = ev.sequence_number
        if isinstance(p, SagaStepChanged):
            if p.saga_id != saga_id:
                continue
            _fold_step_change(rec, ev, p)
        elif isinstance(p, ToolIntent):
            step = rec.steps.get(p.operation_id)
            if step is not None and step.state == "PENDING":
                step.state = "EXECUTING"
                step.history.append((ev.sequence_number, "EXECUTING"))
                step.idempotency_key = p.idempotency_key or step.idempotency_key
        elif isinstance(p, SagaChanged):
            if p.saga_id != saga_id:
                continue
            allowed = SAGA_TRANSITIONS.get(rec.state, frozenset())
            if p.state != rec.state and p.state not in allowed:
                raise SagaTransitionError(f"saga {saga_id}: {rec.state or '(new)'} -> {p.state} at "
                                          f"#{ev.sequence_number} is not a saga transition",
                                          from_state=rec.state, to_state=p.state)
            rec.state = p.state
            rec.failed_step_id = p.failed_step_id or rec.failed_step_id
            rec.reason = p.reason or rec.reason
        elif isinstance(p, TrajectoryFrozen) and p.saga_id in (None, saga_id):
            rec.frozen = {"sequence_number": ev.sequence_number, **p.model_dump(mode="json")}
        elif isinstance(p, PivotCrossed):
            if p.saga_id == saga_id:
                _fold_crossing(rec, ev, p)
        elif isinstance(p, PivotVerified):
            if p.saga_id == saga_id:
                rec.verifications.append({"sequence_number": ev.sequence_number, **p.model_dump(mode="json")})
        elif isinstance(p, OutboxChanged):
            if p.saga_id == saga_id:
                _fold_outbox(rec, ev, p)
    return rec


def _fold_crossing(rec: SagaRecord, ev: Event, p: PivotCrossed) -> None:
    if rec.crossing is not None or rec.state != "RUNNING":
        raise SagaTransitionError(f"saga {rec.saga_id}: {rec.state or '(new)'} -> COMMITTED (PivotCrossed for "
                                  f"{p.pivot_step_id}) at #{ev.sequence_number} is not a saga transition: the pivot "
                                  "is crossed once, from the preparation phase (RUNNING)",
                                  from_state=rec.state, to_state="COMMITTED")
    step = rec.steps.get(p.pivot_step_id)
    if step is not None and (step.tool, step.index) != (p.pivot_tool, p.pivot_index):
        raise SagaTransitionError(f"saga {rec.saga_id}: the crossing at #{ev.sequence_number} names {p.pivot_tool} "
                                  f"step {p.pivot_index}; {p.pivot_step_id} is {step.tool} step {step.index}",
                                  from_state=rec.state, to_state="COMMITTED")
    rec.crossing = {"sequence_number": ev.sequence_number, **p.model_dump(mode="json")}
    rec.state = "COMMITTED"


_OUTBOX_NEXT = {None: {"STAGED"}, "STAGED": {"DROPPED", "FLUSHED"}, "DROPPED": set(), "FLUSHED": set()}


def _fold_outbox(rec: SagaRecord, ev: Event, p: OutboxChanged) -> None:
    entry = rec.outbox.get(p.entry_id)
    prior = entry.state if entry is not None else None
    if p.state not in _OUTBOX_NEXT[prior]:
        raise SagaTransitionError(f"saga {rec.saga_id}: escrow entry {p.entry_id} {prior or '(new)'} -> {p.state} "
                                  f"at #{ev.sequence_number} is not an outbox transition (STAGED, then DROPPED "
                                  "before the pivot or FLUSHED after it)", from_state=prior, to_state=p.state)
    if p.state == "STAGED" and rec.crossing is not None:
        raise SagaTransitionError(f"saga {rec.saga_id}: escrow entry {p.entry_id} staged at #{ev.sequence_number}, "
                                  "after the pivot was crossed", from_state=prior, to_state=p.state)
    if p.state == "FLUSHED" and (rec.crossing is None or p.entry_id not in rec.crossing["outbox"]):
        raise SagaTransitionError(f"saga {rec.saga_id}: escrow entry {p.entry_id} flushed at #{ev.sequence_number} "
                                  "without a crossing whose outbox names it", from_state=prior, to_state=p.state)
    if entry is None:
        entry = rec.outbox[p.entry_id] = OutboxEntry(p.entry_id, p.tool, dict(p.arguments), p.operation_id,
                                                     p.idempotency_key, p.payload_sha256, p.state)
    elif (p.operation_id, p.payload_sha256) != (entry.operation_id, entry.payload_sha256):
        raise SagaTransitionError(f"saga {rec.saga_id}: escrow entry {p.entry_id} at #{ev.sequence_number} names "
                                  "another payload or operation than the one staged", from_state=prior,
                                  to_state=p.state)
    entry.state = p.state
    entry.history.append((ev.sequence_number, p.state))


def _fold_step_change(rec: SagaRecord, ev: Event, p: SagaStepChanged) -> None:
    step = rec.steps.get(p.step_id)
    if step is None:
        check_transition(p.step_id, None, p.state)
        step = rec.steps[p.step_id] = SagaStep(p.step_id, p.step_index, p.tool, p.tier, p.state,
                                               p.idempotency_key)
    else:
        if (p.tool, p.tier, p.step_index) != (step.tool, step.tier, step.index):
            raise SagaTransitionError(f"saga step {p.step_id} at #{ev.sequence_number} names tool {p.tool} tier "
                                      f"{p.tier} step {p.step_index}; the step was declared as {step.tool} tier "
                                      f"{step.tier} step {step.index}", from_state=step.state, to_state=p.state)
        check_transition(p.step_id, step.state, p.state)
        step.state = p.state
    if p.compensator is not None:   # with COMMITTED, or with COMPENSATING for a step that failed in doubt
        step.compensator = dict(p.compensator)
    if p.state == "COMPENSATING" and step.compensator is None:
        raise SagaTransitionError(f"saga step {p.step_id} at #{ev.sequence_number}: COMPENSATING without a recorded "
                                  "compensator (a pivot has none; a failed step without a partial effect needs none)",
                                  from_state=step.history[-1][1] if step.history else None, to_state=p.state)
    if p.idempotency_key:
        step.idempotency_key = p.idempotency_key
    step.reason = p.reason or step.reason
    if p.residue:
        step.residue = [dict(r) for r in p.residue]
    step.history.append((ev.sequence_number, p.state))


# ------------------------------------------------------------------------------------------------
# the unwind's next action: a pure decision from the saga fold and the operation table
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UnwindAction:
    """What the unwind does next (:func:`next_unwind`).

    ``kind``:

    * ``"begin"`` — record COMPENSATING for ``step`` (its compensator has not been admitted);
    * ``"dispatch"`` — C_i is COMPENSATING with no attempt in flight: send it (a new attempt);
    * ``"reconcile"`` — C_i's attempt is in doubt: ask the service's status lookup first;
    * ``"resend"`` — in doubt with no status lookup, and C_i's repeat contract makes a re-send
      safe (κ_i^c dedups it);
    * ``"record_compensated"`` — C_i's evidence says it completed: record COMPENSATED;
    * ``"failed"`` — C_i's evidence says it failed: the runner retries (retryable) or panics;
    * ``"escalate"`` — in doubt, no lookup, not safe to re-send: nothing automatic may decide; or
      a step is already PANIC (a run died between that record and its freeze): the unwind never
      goes past it;
    * ``"done"`` — Σ is empty: the unwind ends ABORT_CONSISTENT.
    """

    kind: str
    step: SagaStep | None = None
    attempt_id: str | None = None
    reason: str = ""


def _compensation_op(record: TrajectoryRecord, step: SagaStep) -> Operation | None:
    return record.operations.get(step.compensator["operation_id"]) if step.compensator else None


def next_unwind(saga: SagaRecord, record: TrajectoryRecord) -> UnwindAction:
    """The unwind's next action for the top of Σ (Failure Recovery, the unwind listing), from the
    saga fold and the trajectory record (pure; see :class:`UnwindAction`)."""
    stuck = next((s for s in sorted(saga.steps.values(), key=lambda s: -s.index) if s.state == "PANIC"), None)
    if stuck is not None:   # the unwind stopped at a compensator that failed unrecoverably: never past it
        return UnwindAction("escalate", stuck, reason=f"C{stuck.index} is PANIC: {stuck.reason or 'failed'}")
    stack = saga.stack
    if not stack:
        return UnwindAction("done", reason="the compensation stack is empty")
    top = stack[0]
    if top.state != "COMPENSATING":
        return UnwindAction("begin", top, reason=f"top of Σ: C{top.index} ({top.compensator['tool']})")
    op = _compensation_op(record, top)
    if op is None or not op.attempts:
        return UnwindAction("dispatch", top, reason=f"C{top.index} recorded COMPENSATING, not yet admitted")
    if op.status == "established":
        outcome = op.outcome or {}
        if outcome.get("status") == "completed":
            return UnwindAction("record_compensated", top, op.current_attempt_id,
                                reason=f"C{top.index} completed ({op.current_attempt_id})")
        return UnwindAction("failed", top, op.current_attempt_id, reason=str(outcome.get("error", "failed")))
    if op.status == "in_doubt":
        attempt = op.current_attempt_id
        if top.compensator.get("status_lookup"):
            return UnwindAction("reconcile", top, attempt, reason=f"C{top.index} attempt {attempt} is in doubt; its "
                                                                  "service answers a status lookup")
        if top.compensator.get("repeat_contract") in ("idempotency_key", "idempotent", "read_only"):
            return UnwindAction("resend", top, attempt, reason=f"C{top.index} attempt {attempt} is in doubt; κ^c makes "
                                                               "a re-send safe")
        return UnwindAction("escalate", top, attempt, reason=f"C{top.index} attempt {attempt} is in doubt, its service "
                                                             "has no status lookup and a re-send is not safe")
    # withheld or only admitted: nothing left, send a new attempt
    return UnwindAction("dispatch", top, reason=f"C{top.index} has no attempt in flight ({op.status})")


# ------------------------------------------------------------------------------------------------
# the pivot crossing: a pure decision from the saga fold
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CrossingDecision:
    """What the runner does before dispatching a tier III step (:func:`decide_crossing`).

    ``kind``:

    * ``"cross"`` — append ``PivotCrossed`` (a barrier) before the step's intent;
      ``verified_sequence`` is the passing verdict it rests on (None: no gate was configured),
      ``retired`` the compensators it retires, ``outbox`` the staged entries it releases;
    * ``"crossed"`` — the crossing for this very step is already in the log (a re-run after a
      crash between the crossing and the dispatch): go forward, append nothing;
    * ``"finalization"`` — the saga is past its pivot and this tier III step is a finalization
      step (repeat-safe: the runner retries it forward);
    * ``"refuse"`` — nothing may be crossed (``failed_checks`` names the gate's failed checks when
      that is why); the saga stays in its preparation phase.
    """

    kind: str
    reason: str = ""
    verified_sequence: int | None = None
    retired: tuple[str, ...] = ()
    outbox: tuple[str, ...] = ()
    failed_checks: tuple[str, ...] = ()


def decide_crossing(saga: SagaRecord, step_id: str, *, repeat_safe: bool,
                    require_verification: bool) -> CrossingDecision:
    """Whether tier III step ``step_id`` may be dispatched, and what the log needs first (pure).

    Args:
        saga: the saga fold.
        step_id: the tier III step about to be dispatched.
        repeat_safe: the step's repeat contract makes a retry safe (idempotency key, idempotent,
            read only): required of a tier III step after the pivot (finalization phase).
        require_verification: the crossing needs a passing ``PivotVerified`` for this step that is
            newer than every step record (the gate ran after the last preparation step).

    A failed verdict recorded last for the step refuses the crossing whether or not a verdict is
    required. Returns a :class:`CrossingDecision`; raises nothing.
    """
    crossing = saga.crossing
    if crossing is not None:
        if crossing["pivot_step_id"] == step_id:
            return CrossingDecision("crossed", f"the crossing for {step_id} is durable at "
                                               f"#{crossing['sequence_number']}: the saga goes forward",
                                    crossing.get("verified_sequence"))
        if repeat_safe:
            return CrossingDecision("finalization", f"past the pivot {crossing['pivot_step_id']}: {step_id} runs in "
                                                    "the finalization phase, retried forward")
        return CrossingDecision("refuse", f"{step_id} is a second irreversible step after the pivot "
                                          f"{crossing['pivot_step_id']} and is not repeat-safe: the finalization "
                                          "phase can only retry forward")
    if saga.pivot_committed is not None:   # a log written before the crossing record existed
        if repeat_safe:
            return CrossingDecision("finalization", f"past the pivot {saga.pivot_committed.step_id} (committed "
                                                    "before crossing records existed)")
        return CrossingDecision("refuse", f"{step_id} would be a second pivot after {saga.pivot_committed.step_id}")
    if saga.state != "RUNNING":
        return CrossingDecision("refuse", f"the saga is {saga.state or 'not started'}: the pivot is crossed only from "
                                          "the preparation phase (RUNNING)")
    verdict = saga.latest_verification(step_id)
    retired = tuple(s.step_id for s in saga.stack)
    outbox = tuple(e.entry_id for e in saga.outbox.values() if e.state == "STAGED")
    if verdict is not None and not verdict["passed"]:
        failed = tuple(verdict.get("failed_checks") or ())
        return CrossingDecision("refuse", f"the pre-pivot gate refused {step_id} at #{verdict['sequence_number']}: "
                                          f"failed {', '.join(failed) or 'checks'}", failed_checks=failed)
    if verdict is None:
        if require_verification:
            return CrossingDecision("refuse", f"no verdict of the pre-pivot gate for {step_id}: the crossing needs "
                                              "every check to pass first")
        return CrossingDecision("cross", f"crossing at {step_id} without a gate (none configured)", None, retired,
                                outbox)
    newest_step = max((seq for s in saga.steps.values() for seq, _ in s.history), default=0)
    newest_entry = max((seq for e in saga.outbox.values() for seq, _ in e.history), default=0)
    if require_verification and verdict["sequence_number"] < max(newest_step, newest_entry):
        return CrossingDecision("refuse", f"the gate's verdict for {step_id} (#{verdict['sequence_number']}) is older "
                                          f"than the last preparation record (#{max(newest_step, newest_entry)}): "
                                          "verify again")
    return CrossingDecision("cross", f"every check passed at #{verdict['sequence_number']}",
                            verdict["sequence_number"], retired, outbox)
