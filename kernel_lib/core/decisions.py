"""The dispatch gate's decisions as pure functions of the folded record (Durable Execution
§11.3.2, eq. 1; §11.5.3–11.5.4).

Each function reads a :class:`~kernel_lib.core.record.TrajectoryRecord` (and the facts the caller
read for it: the log's fence, a clock reading) and returns a value: the payloads to append, a
denial, or a withhold. None of them appends, sends, sleeps or reads a clock;
:class:`kernel_lib.gate.dispatch.DispatchGate` appends what they return and does the transport.
Later decisions of the same kind (sagas, forward repair, watchdogs) follow this shape: a decision
from the fold, then an effect.

* :func:`decide_admission` — the control state, the identity rules for a retry, the capability
  grant and the bounded-liability budget rule (consumption + outstanding reservations + this
  step's bound + finalization reserve <= ceiling, in integer micro-dollars): an :class:`Admit`
  with ``Authorized``, ``BudgetReserved`` and the intent to append, or a :class:`Denial` (with
  the ``Authorized`` deny to log when the policy or the budget refused).
* :func:`recheck_reads_clock` and :func:`decide_recheck` — the dispatch-time recheck of control
  state, control epoch, approvals (at a clock reading the gate records first as a
  ``RuntimeInput``) and the log's ownership fence: None, or a :class:`Withhold`.
* :func:`tool_evidence`, :func:`usage_settlement`, :func:`model_evidence` and
  :func:`model_usage_settlement` — the evidence payloads for a reply.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Literal

from kernel_lib.errors import MalformedEventError
from kernel_lib.core.events import (
    ApprovalResolved,
    AttemptWithheld,
    Authorized,
    BudgetReserved,
    BudgetSettled,
    ContextBuilt,
    ModelReplied,
    Payload,
    ToolIntent,
    ToolResult,
    check_json,
    redact_secrets,
)
from kernel_lib.core.action_signature import action_signature
from kernel_lib.core.money import micro_to_usd, usd_to_micro
from kernel_lib.core.proposals import (
    REPEAT_SAFE_CONTRACTS,
    AdmissionPolicy,
    ModelCall,
    ModelReply,
    ToolProposal,
    ToolReply,
    decision_id,
    idempotency_key,
    reservation_id,
    usable_usage,
)
from kernel_lib.core.record import TERMINAL_STATES, WITHHELD, TrajectoryRecord

__all__ = [
    "Admit", "Denial", "Withhold", "tool_intent", "context_built", "decide_admission", "recheck_reads_clock",
    "decide_recheck", "RECHECK_CLOCK_INPUT", "attempt_withheld", "settled_identity_denial", "RESUME_CLOCK_INPUT",
    "resume_reads_clock", "lapsed_approvals", "orphan_settlements", "tool_evidence", "usage_settlement",
    "model_evidence", "model_usage_settlement", "masked_action",
]


@dataclass(frozen=True)
class Admit:
    """Admission passed: append ``payloads`` in order (``Authorized``, ``BudgetReserved``, the
    intent; only the intent when an admitted-but-unsent attempt keeps ``reuses_reservation``)."""

    payloads: tuple[Payload, ...]
    reuses_reservation: str | None = None


@dataclass(frozen=True)
class Denial:
    """Admission refused: append ``payloads`` (the ``Authorized`` deny, or nothing when the refusal
    needs no record: a paused trajectory, an id a retry may not reuse), then raise
    :class:`~kernel_lib.errors.AdmissionDenied` with ``reason``."""

    reason: str
    payloads: tuple[Payload, ...] = ()
    #: Set when the refusal is a masked action (table 7, tier 2): the tombstone's entry in
    #: ``record.masked_actions`` plus ``action_signature``; the gate then raises
    #: :class:`~kernel_lib.errors.ActionMaskedRefusal`.
    masked: dict[str, Any] | None = None


@dataclass(frozen=True)
class Withhold:
    """The dispatch-time recheck holds ``subject_id`` back for ``why``. The gate records the
    attempt as withheld, never sent (:func:`attempt_withheld`), which releases its reservation; a
    later release is a new attempt."""

    subject_id: str
    why: str

    @property
    def message(self) -> str:
        """The text :class:`~kernel_lib.errors.DispatchWithheld` carries."""
        return (f"{self.subject_id} withheld at the dispatch-time recheck: {self.why}; the request never left "
                "(the attempt keeps its operation-table entry, recorded as withheld)")


# --- the intent --------------------------------------------------------------------------------


def tool_intent(proposal: ToolProposal, trajectory_id: str) -> ToolIntent:
    """The ``ToolIntent`` of a tool proposal in trajectory ``trajectory_id``, naming its decision
    and reservation ids and carrying the operation's
    :func:`~kernel_lib.core.proposals.idempotency_key` (the same for every attempt, §11.3.3)."""
    return ToolIntent(operation_id=proposal.operation_id, attempt_id=proposal.attempt_id, tool=proposal.tool,
                      arguments=proposal.arguments, input_ref=proposal.input_ref, revision=proposal.revision,
                      repeat_contract=proposal.repeat_contract, grant_id=proposal.grant_id,
                      authorization_ref=decision_id(proposal.operation_id, proposal.attempt_id),
                      reservation_ref=reservation_id(proposal.operation_id, proposal.attempt_id),
                      idempotency_key=idempotency_key(trajectory_id, proposal.operation_id),
                      status_lookup=proposal.status_lookup)


def context_built(call: ModelCall) -> ContextBuilt:
    """The ``ContextBuilt`` (a model call's intent) of ``call``, with its input's SHA-256.

    Raises:
        MalformedEventError: the delivered input is not valid UTF-8 (a lone surrogate).
    """
    try:
        sha = hashlib.sha256(call.delivered_input.encode()).hexdigest()
    except UnicodeEncodeError:
        raise MalformedEventError("the model call's delivered input is not valid UTF-8 (lone surrogate)",
                                  event_type="ContextBuilt") from None
    return ContextBuilt(invocation_id=call.invocation_id, model=call.model, delivered_input=call.delivered_input,
                        delivered_input_sha256=sha, request_config=call.request_config)


# --- admission ---------------------------------------------------------------------------------


def decide_admission(record: TrajectoryRecord, policy: AdmissionPolicy, *, subject_id: str,
                     kind: Literal["tool", "model"], grant_id: str, subject: str, bound_usd: float,
                     intent: ToolIntent | ContextBuilt, attempt_id: str | None = None,
                     repeat_contract: str | None = None, finalization: bool = False) -> Admit | Denial:
    """Admission of one attempt (tool) or invocation (model) against ``record`` (eq. 1).

    Args:
        record: the folded record, current with the log.
        policy: the admission policy (capability grants, policy version).
        subject_id: the operation id (tool) or invocation id (model).
        kind: ``"tool"`` or ``"model"``.
        grant_id, subject: the capability grant and the tool or model it must allow.
        bound_usd: the reservation bound, USD (compared as integer micro-dollars).
        intent: the ``ToolIntent`` or ``ContextBuilt`` to append last.
        attempt_id, repeat_contract: the tool attempt's id and endpoint contract.
        finalization: finalization work may draw on the finalization reserve (§11.5.4).

    Returns:
        :class:`Admit` with the payloads to append, or :class:`Denial`. Rules, in order: the
        trajectory is RUNNING; an id with a durable intent is not reused (a tool operation in
        doubt may get a new attempt only under a repeat-safe contract, with the recorded contract
        and request; a proposal that declared none recorded ``unsafe``, so its operation is settled
        before anything repeats it); an admitted but unsent attempt keeps its reservation (no second
        reservation) when its bound fits the held one and the budget rule still holds; otherwise
        the grant must allow the subject and consumption + outstanding + bound + reserve <=
        ceiling, in integer micro-dollars.
    """
    rec = record
    if rec.control_state != "RUNNING":
        return Denial(f"{subject_id}: trajectory is {rec.control_state}, not RUNNING")
    if rec.masked_actions and isinstance(intent, ToolIntent) and (
            mask := masked_action(rec, intent.tool, intent.arguments)) is not None:
        why = (f"action {intent.tool} with signature {mask['action_signature']} is masked (tombstone at "
               f"#{mask['sequence_number']}: {mask['reason']})")
        auth = Authorized(decision_id=decision_id(subject_id, attempt_id), subject_id=subject_id, subject_kind=kind,
                          policy_version=policy.policy_version, grant_id=grant_id, decision="deny",
                          reason=why[:1000])
        return Denial(f"{subject_id}: {why}", (auth,), masked=mask)
    op = rec.operations.get(subject_id)
    if (settled := settled_identity_denial(rec, subject_id=subject_id, kind=kind, attempt_id=attempt_id,
                                           intent=intent)) is not None:   # an identity settled unsent: never reused
        return settled
    if op is not None and op.status in ("in_doubt", "established"):
        if kind == "model" or attempt_id in op.attempts:
            return Denial(f"{subject_id} already has a durable intent ({op.status}); a retry needs "
                          "a fresh identity (a new attempt id, or a new invocation id for a model call)")
        if op.status == "established":
            return Denial(f"{subject_id} is established (its outcome is recorded); running it again is "
                          "a new operation with its own operation id")
        if op.repeat_contract not in REPEAT_SAFE_CONTRACTS:   # the contract recorded with the intent
            return Denial(f"{subject_id} is in doubt and its endpoint contract is {op.repeat_contract!r}: settle it "
                          f"first (reconciliation), only {sorted(REPEAT_SAFE_CONTRACTS)} license another attempt")
        if repeat_contract != op.repeat_contract:
            return Denial(f"{subject_id}: a new attempt must keep the recorded repeat contract "
                          f"{op.repeat_contract!r}, not {repeat_contract!r}")
        if isinstance(intent, ToolIntent) and (intent.tool, dict(intent.arguments), intent.input_ref) != (
                op.tool, op.arguments, op.input_ref):
            return Denial(f"{subject_id}: a new attempt must repeat the recorded operation (same tool, "
                          "arguments and input); a different request is a different operation id")
    b = rec.budget
    bound = usd_to_micro(bound_usd, "up")
    reserve = 0 if finalization else b.finalization_reserve_micro_usd   # finalization work may use the reserve
    rid = reservation_id(subject_id, attempt_id)
    held = b.reservations.get(rid)
    if op is not None and op.status == "admitted" and held is not None and not held.released:
        # admitted before a crash but never sent: keep its identity and reservation, reserve
        # nothing again (§11.5.4); only the intent is still missing
        if bound > held.amount_micro_usd:
            return Denial(f"{subject_id}/{attempt_id} was admitted with a bound of {held.amount_usd} USD; "
                          f"a bound of {bound_usd} USD needs a new attempt id")
        if b.actual_consumption_micro_usd + b.outstanding_reservations_micro_usd + reserve > b.ceiling_micro_usd:
            # its bound is already in the outstanding figure; usage past other bounds since then
            # can still push the total over the ceiling
            return Denial(f"{subject_id}/{attempt_id} keeps its reservation, but consumption "
                          f"{b.actual_consumption_usd:.4f} + outstanding {b.outstanding_reservations_usd:.4f}"
                          f" + reserve {micro_to_usd(reserve):.4f} is over the ceiling {b.ceiling_usd:.4f} now")
        return Admit((intent,), reuses_reservation=rid)
    ok, why = policy.authorize(rec, grant_id, subject)
    if ok and b.actual_consumption_micro_usd + b.outstanding_reservations_micro_usd + bound + reserve \
            > b.ceiling_micro_usd:
        ok, why = False, (f"bounded liability {bound_usd:.4f} USD does not fit: consumption "
                          f"{b.actual_consumption_usd:.4f} + outstanding {b.outstanding_reservations_usd:.4f} "
                          f"+ reserve {micro_to_usd(reserve):.4f} > ceiling {b.ceiling_usd:.4f}")
    auth = Authorized(decision_id=decision_id(subject_id, attempt_id), subject_id=subject_id, subject_kind=kind,
                      policy_version=policy.policy_version, grant_id=grant_id,
                      decision="allow" if ok else "deny", reason=why)
    if not ok:
        return Denial(f"{subject_id}: {why}", (auth,))
    res = BudgetReserved(reservation_id=rid, subject_id=subject_id, amount_usd=bound_usd,
                         policy_version=policy.policy_version)
    return Admit((auth, res, intent))


def masked_action(record: TrajectoryRecord, tool: str, arguments: dict[str, Any]) -> dict[str, Any] | None:
    """The mask that refuses the tool call ``(tool, arguments)``, or None (Failure Recovery,
    table 7, tier 2: the gate enforces the tombstones the watchdog logged).

    The call's h_tool is computed by the one signature function,
    :func:`~kernel_lib.core.action_signature.action_signature`, once per distinct nonce set among
    the masks (usually one). Returns the entry of ``record.masked_actions`` with
    ``action_signature`` added. Pure; O(masks) per call.
    """
    masks = record.masked_actions
    if not masks:
        return None
    seen: dict[tuple[str, ...] | None, str] = {}
    for sig, entry in masks.items():
        nonces = entry.get("nonce_arguments")
        key = None if nonces is None else tuple(sorted(nonces))
        if key not in seen:
            seen[key] = action_signature(tool, arguments, nonce_arguments=nonces)
        if seen[key] == sig:
            return {**entry, "action_signature": sig}
    return None


# --- the dispatch-time recheck -----------------------------------------------------------------

#: ``RuntimeInput`` name (kind ``clock``) of the wall-clock reading a dispatch-time recheck used;
#: the value is ``{"subject_id": ..., "now_unix_s": ...}``.
RECHECK_CLOCK_INPUT = "dispatch_recheck_clock"


def recheck_reads_clock(record: TrajectoryRecord, subject_id: str, admitted_control_epoch: int) -> bool:
    """Does :func:`decide_recheck` for ``subject_id`` depend on the clock? True only when the
    recheck reaches the approval check (the trajectory is RUNNING at the admitted control epoch)
    and an approval holding the subject, pending or approved, has an expiry
    (:meth:`TrajectoryRecord.approval_blocker` compares it with the reading). Otherwise no clock is
    read and none is recorded."""
    if record.control_state != "RUNNING" or record.control_epoch != admitted_control_epoch:
        return False
    for a in record.approvals.values():
        if a.held_operation_id != subject_id:
            continue
        if a.status in ("pending", "approved") and a.expires_unix_s is not None:
            return True
        if a.status != "approved":   # pending without expiry, or void: decided without the clock
            return False
    return False


def decide_recheck(record: TrajectoryRecord, *, subject_id: str, admitted_control_epoch: int, fence: int,
                   owner_epoch: int, now_unix_s: float | None) -> Withhold | None:
    """The dispatch-time recheck (eq. 1): re-read control state and ownership, reserve nothing.

    Args:
        record: the folded record, current with the log.
        subject_id: the operation or invocation about to be dispatched.
        admitted_control_epoch: the record's control epoch when it was admitted.
        fence: the log's ownership fence (``owner_epoch``) as the store reports it now.
        owner_epoch: the owner epoch this writer holds.
        now_unix_s: the wall-clock reading (seconds since the epoch) an approval's expiry is
            compared with, or None when :func:`recheck_reads_clock` says none is needed.

    Returns:
        None when the attempt may be dispatched, else a :class:`Withhold` naming the first reason:
        the trajectory is not RUNNING, the control epoch moved, an approval holds it (pending,
        void, or past its expiry at ``now_unix_s``), or the fence moved past ``owner_epoch``.
    """
    rec = record
    if rec.control_state != "RUNNING":
        return Withhold(subject_id, f"trajectory is {rec.control_state}")
    if rec.control_epoch != admitted_control_epoch:
        return Withhold(subject_id, f"control_epoch moved from {admitted_control_epoch} to {rec.control_epoch}")
    blocker = rec.approval_blocker(subject_id, now_unix_s)
    if blocker is not None:   # pending, void (refused, withdrawn, expired) or past its expiry now
        return Withhold(subject_id, blocker)
    if fence > owner_epoch:
        return Withhold(subject_id, f"ownership moved: the log's fence is owner_epoch={fence}, this worker holds "
                                    f"{owner_epoch}")
    return None


def attempt_withheld(record: TrajectoryRecord, *, subject_id: str, attempt_id: str,
                     reason: str) -> AttemptWithheld | None:
    """The ``AttemptWithheld`` that settles a withheld attempt as never sent (§11.3.2), or None
    when the record does not allow one: the attempt has no durable intent, or it already has
    evidence (the fold would refuse the record, so it is never appended).

    The record names the reservation the fold releases: the tool attempt's (from its intent) or
    the model invocation's, when it is still held.
    """
    op = record.operations.get(subject_id)
    att = op.attempts.get(attempt_id) if op is not None else None
    if att is None or att.intent_sequence is None or att.established or att.last_result_status is not None:
        return None
    rid = reservation_id(subject_id, attempt_id) if op.kind == "tool" else reservation_id(subject_id)
    if op.kind == "tool" and op.current_attempt_id == attempt_id and op.reservation_id:
        rid = op.reservation_id   # the intent's reservation_ref
    res = record.budget.reservations.get(rid)
    held = res is not None and res.subject_id == subject_id and not res.released
    return AttemptWithheld(subject_id=subject_id, subject_kind=op.kind, attempt_id=attempt_id,
                           reservation_id=rid if held else None, reason=reason[:2000])


def settled_identity_denial(record: TrajectoryRecord, *, subject_id: str, kind: Literal["tool", "model"],
                            attempt_id: str | None, intent: ToolIntent | ContextBuilt) -> Denial | None:
    """Admission's identity rules for an attempt whose identity was already settled without a
    dispatch, so that admission never appends what the fold must refuse (§11.3.2):

    * its reservation exists and was finally settled (an admitted attempt whose reservation a
      resume released, or a withheld one): a new attempt needs a fresh attempt id (a model call, a
      fresh invocation id); appending a second reservation under that id would not fold;
    * the operation is withheld (every attempt with an intent was never sent): a new attempt needs
      a fresh id and must repeat the recorded request, but no repeat contract (nothing was sent).

    None when neither applies (the other admission rules and the budget rule still do)."""
    rid = reservation_id(subject_id, attempt_id) if kind == "tool" else reservation_id(subject_id)
    res = record.budget.reservations.get(rid)
    if res is not None and res.released:
        return Denial(f"{subject_id}{'/' + attempt_id if attempt_id else ''}: its reservation {rid} is already "
                      "settled; a new attempt needs a fresh identity (a new attempt id, or a new invocation id for a "
                      "model call)")
    op = record.operations.get(subject_id)
    if op is None or op.status != WITHHELD:
        return None
    if kind == "model" or attempt_id in op.attempts:
        return Denial(f"{subject_id} was withheld at the dispatch-time recheck (never sent); a new attempt needs a "
                      "fresh identity (a new attempt id, or a new invocation id for a model call)")
    if isinstance(intent, ToolIntent) and (intent.tool, dict(intent.arguments), intent.input_ref) != (
            op.tool, op.arguments, op.input_ref):
        return Denial(f"{subject_id}: a new attempt must repeat the recorded operation (same tool, arguments and "
                      "input); a different request is a different operation id")
    return None


# --- resume: what the record says must be settled ------------------------------------------------

#: ``RuntimeInput`` name (kind ``clock``) of the wall-clock reading a resume compared pending
#: approvals' expiries with; the value is ``{"purpose": "approval_expiry", "now_unix_s": ...}``.
RESUME_CLOCK_INPUT = "resume_approval_clock"


def resume_reads_clock(record: TrajectoryRecord) -> bool:
    """Does :func:`lapsed_approvals` depend on the clock? True when some approval is pending with
    an expiry and the trajectory is not terminal."""
    return record.control_state not in TERMINAL_STATES and any(
        a.status == "pending" and a.expires_unix_s is not None for a in record.approvals.values())


def lapsed_approvals(record: TrajectoryRecord, now_unix_s: float, *,
                     clock_sequence_number: int) -> list[ApprovalResolved]:
    """An ``expired`` resolution for every pending approval whose ``expires_unix_s`` is before
    ``now_unix_s`` (seconds since the epoch), in log order (§11.5.3: a lapsed request is void).

    ``clock_sequence_number`` is where the reading is (to be) recorded as a ``RuntimeInput``; each
    resolution names it and the reading as its evidence. Pure: the caller reads and records the
    clock, then appends the resolutions."""
    if record.control_state in TERMINAL_STATES:
        return []
    return [ApprovalResolved(approval_id=a.approval_id, decision="expired", reviewer=a.reviewer,
                             evidence=(f"runtime-input #{clock_sequence_number} ({RESUME_CLOCK_INPUT}): now_unix_s="
                                       f"{now_unix_s!r} is past expires_unix_s={a.expires_unix_s!r}; recorded by "
                                       "resume"))
            for a in record.approvals.values()
            if a.status == "pending" and a.expires_unix_s is not None and now_unix_s > a.expires_unix_s]


def orphan_settlements(record: TrajectoryRecord) -> list[BudgetSettled]:
    """A final ``BudgetSettled`` for every reservation :meth:`TrajectoryRecord.orphaned_reservations`
    reports, in log order (§11.5.3), for a resume over the complete authoritative log.

    An operation with no intent that was sent or may have been (only admitted, denied, or every
    attempt withheld) never dispatched through the gate, so its reservation is released unspent
    (``actual_usd`` 0). Any other holder (an established operation whose usage evidence is lost,
    an extra attempt of an established operation) may have been charged and no usage evidence
    survives: its unverified remainder is charged at the bound, counted as consumption and never
    released as unspent budget."""
    out = []
    for rid in record.orphaned_reservations():
        r = record.budget.reservations[rid]
        op = record.operations.get(r.subject_id)
        sent = op is None or op.intent_missing or any(
            a.intent_sequence is not None and not a.withheld for a in op.attempts.values())
        remainder = r.outstanding_micro_usd if sent else 0
        why = (f"orphaned: {r.subject_id} is {op.status if op else 'not in the operation table'}"
               + ("; no usage evidence survives, the unverified remainder is charged at the bound" if sent
                  else "; never dispatched, released unspent"))
        out.append(BudgetSettled(reservation_id=rid, subject_id=r.subject_id, actual_usd=micro_to_usd(remainder),
                                 final=True, evidence=f"resume: {why}"))
    return out


# --- evidence ----------------------------------------------------------------------------------


def tool_evidence(operation_id: str, attempt_id: str, reply: Any, source: str = "reply") -> ToolResult:
    """The ``ToolResult`` recording ``reply``.

    Credential-looking content is redacted (listed under ``outcome.redacted_fields``); content
    that cannot be stored as canonical JSON (or an unknown status) is replaced by a note, with
    the observation marked incomplete so the attempt stays in doubt; a reply that is not a
    :class:`ToolReply` is recorded as incomplete evidence (the request did leave). Evidence that
    arrived is never dropped silently.
    """
    if not isinstance(reply, ToolReply):
        reply = ToolReply(status="partial", outcome={"error": f"transport returned {type(reply).__name__}, "
                                                              "not a ToolReply"})
    try:
        check_json({"outcome": reply.outcome, "evidence": reply.evidence, "job_handle": reply.job_handle})
        outcome, hidden = redact_secrets(reply.outcome)
        evidence, hidden_ev = redact_secrets(reply.evidence)
        job_handle, hidden_job = redact_secrets(reply.job_handle)
        hidden += [f"evidence.{h}" for h in hidden_ev] + (["job_handle"] if hidden_job else [])
        if hidden:
            outcome = {**(outcome if isinstance(outcome, dict) else {"value": outcome}), "redacted_fields": hidden}
        return ToolResult(operation_id=operation_id, attempt_id=attempt_id, status=reply.status,
                          job_handle=job_handle, outcome=outcome, observation_complete=reply.observation_complete,
                          evidence=evidence, source=source)
    except ValueError as exc:   # pydantic's ValidationError is a ValueError
        why = str(exc).splitlines()[0][:200] if not hasattr(exc, "errors") else exc.errors()[0].get("msg", "")[:200]
        status = reply.status if reply.status in ToolResult.model_fields["status"].annotation.__args__ else "partial"
        return ToolResult(operation_id=operation_id, attempt_id=attempt_id, status=status,
                          outcome={"error": f"the reply could not be stored as evidence: {redact_secrets(why)[0]}"},
                          observation_complete=False, source=source)


def usage_settlement(record: TrajectoryRecord, operation_id: str, attempt_id: str, reply: Any,
                     source: str = "reply") -> BudgetSettled | None:
    """The ``BudgetSettled`` for a tool reply's usage report, read from the record *after* its
    ``ToolResult`` was folded; None when there is nothing to settle (no usable report, no
    reservation of this attempt, or one already finally settled).

    Usage evidence settles the attempt's own reservation, finally only once the attempt is
    established: a partial report leaves the unverified remainder held (§11.5.3).
    """
    charged = reply.charged_usd if isinstance(reply, ToolReply) else None
    res = record.budget.reservations.get(reservation_id(operation_id, attempt_id))
    if not usable_usage(charged) or res is None or res.released:
        return None
    op = record.operations.get(operation_id)
    att = op.attempts.get(attempt_id) if op is not None else None
    return BudgetSettled(reservation_id=res.reservation_id, subject_id=operation_id, actual_usd=charged,
                         final=att is not None and att.established, evidence=f"{source}:{reply.status}")


def model_evidence(invocation_id: str, reply: ModelReply) -> ModelReplied:
    """The ``ModelReplied`` recording ``reply`` (credential-looking content redacted); a reply
    whose content cannot be stored keeps the fact of a reply with status ``error``."""
    try:
        check_json({"reply": reply.reply, "proposal": reply.proposal})
        return ModelReplied(invocation_id=invocation_id, status=reply.status,
                            reply=redact_secrets(reply.reply)[0], proposal=redact_secrets(reply.proposal)[0],
                            input_tokens=reply.input_tokens, output_tokens=reply.output_tokens)
    except ValueError as exc:
        why = exc.errors()[0].get("msg", "") if hasattr(exc, "errors") else str(exc)
        return ModelReplied(invocation_id=invocation_id, status="error",
                            reply=f"the reply could not be stored: {why[:200]}")


def model_usage_settlement(invocation_id: str, reply: ModelReply, replied: ModelReplied) -> BudgetSettled | None:
    """The ``BudgetSettled`` for a model reply's usage report (final only for a complete reply),
    or None when the report is not usable."""
    if not usable_usage(reply.charged_usd):
        return None
    return BudgetSettled(reservation_id=reservation_id(invocation_id), subject_id=invocation_id,
                         actual_usd=reply.charged_usd, final=replied.status == "complete", evidence="provider usage")
