"""The dispatch gate and crash-position analysis (§11.3.2–11.3.3, eq. 1, table 3).

For every tool call and model call the gate enforces eq. 1::

    validated proposal  <  admission (Authorized + BudgetReserved)  <  intent durable at the
    declared tier  <  dispatch-time recheck  <  dispatch  <  evidence recorded

* Admission checks the control state, the capability grant and the bounded-liability budget rule
  (consumption + outstanding reservations + this step's bound + finalization reserve ≤ ceiling).
* The intent (``ToolIntent``; for a model call ``ContextBuilt``) and everything before it are
  acknowledged by the store at the trajectory's tier before anything leaves.
* The dispatch-time recheck re-reads control state and ownership without reserving again; a
  pause or a lost fence withholds the admitted, unsent attempt (:class:`DispatchWithheld`), which
  keeps its operation-table entry and its reservation.
* The reply, a timeout or a transport error becomes a ``ToolResult`` (or ``ModelReplied``); only
  complete ``completed``/``failed`` evidence settles the operation.

``on_position`` is called with a position name after every step, so a crash controller (or a
test) can stop the worker at an exact point of eq. 1.

:func:`crash_positions` classifies, for a recorded trajectory, what recovery may conclude after a
crash at each position, following table 3 and the completeness rule.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Sequence

from kernel_lib.errors import (
    AdmissionDenied,
    ConfigError,
    DispatchWithheld,
    KernelError,
    MalformedEventError,
    StaleRecordError,
)
from kernel_lib.core.events import (
    Authorized,
    BudgetReserved,
    BudgetSettled,
    ContextBuilt,
    ControlChanged,
    Event,
    ModelReplied,
    Payload,
    TaskStarted,
    ToolIntent,
    ToolResult,
    check_json,
    redact_secrets,
)
from kernel_lib.log.trajectory import TrajectoryLog
from kernel_lib.core.record import TERMINAL_STATES, TrajectoryRecord, _apply_in_place, fold, initial_record

# ------------------------------------------------------------------------------------------------
# proposals and replies
# ------------------------------------------------------------------------------------------------


def _check_bound(subject: str, bound_usd: Any) -> None:
    if isinstance(bound_usd, bool) or not isinstance(bound_usd, (int, float)) or not math.isfinite(bound_usd) \
            or bound_usd < 0:
        raise ConfigError(f"{subject}: cost_bound_usd must be a finite number >= 0, got {bound_usd!r}")


@dataclass(frozen=True)
class ToolProposal:
    """A validated, complete tool-call proposal (the first term of eq. 1).

    ``cost_bound_usd`` is the reservation bound: the most this attempt can charge.
    """

    operation_id: str
    attempt_id: str
    tool: str
    arguments: dict[str, Any]
    grant_id: str
    cost_bound_usd: float
    repeat_contract: str = "idempotency_key"
    input_ref: str | None = None
    revision: str | None = None

    def __post_init__(self) -> None:
        _check_bound(self.operation_id, self.cost_bound_usd)


@dataclass(frozen=True)
class ToolReply:
    """What the transport brought back. ``status`` as in :class:`~kernel_lib.core.events.ToolResult`."""

    status: str
    job_handle: str | None = None
    outcome: dict[str, Any] | None = None
    observation_complete: bool = False
    evidence: dict[str, str] | None = None
    charged_usd: float | None = None   # usage evidence, if the endpoint reports it


@dataclass(frozen=True)
class ModelCall:
    """A model invocation: its identity, delivered input, and reservation bound (USD)."""

    invocation_id: str
    model: str
    delivered_input: str
    grant_id: str
    cost_bound_usd: float
    request_config: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_bound(self.invocation_id, self.cost_bound_usd)


@dataclass(frozen=True)
class ModelReply:
    status: Literal["complete", "partial", "error"]
    reply: str = ""
    proposal: dict[str, Any] | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    charged_usd: float = 0.0


@dataclass
class AdmissionPolicy:
    """Which tools each capability grant allows; the policy version stamped on decisions."""

    grants: dict[str, set[str]]
    policy_version: str = "policy-v1"

    def authorize(self, record: TrajectoryRecord, grant_id: str, subject: str) -> tuple[bool, str]:
        task_grants = set((record.task or {}).get("grant_ids", []))
        if grant_id not in task_grants:
            return False, f"grant {grant_id!r} was not issued to this task"
        if subject not in self.grants.get(grant_id, set()):
            return False, f"grant {grant_id!r} does not allow {subject!r}"
        return True, "allowed"


def _usage(charged_usd: Any) -> bool:
    """Is this a usable usage report (a finite number ≥ 0)? Anything else settles nothing."""
    return (isinstance(charged_usd, (int, float)) and not isinstance(charged_usd, bool)
            and math.isfinite(charged_usd) and 0 <= charged_usd <= 2**53)


def _tool_result(operation_id: str, attempt_id: str, reply: ToolReply, source: str) -> ToolResult:
    """The ToolResult recording ``reply``: credential-looking content redacted (listed under
    ``outcome.redacted_fields``); content that cannot be stored as canonical JSON (or an unknown
    status) replaced by a note, with the observation marked incomplete so the attempt stays in
    doubt. Evidence that arrived is never dropped silently."""
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


# ------------------------------------------------------------------------------------------------
# the gate
# ------------------------------------------------------------------------------------------------

ToolTransport = Callable[[ToolIntent], ToolReply]

#: Endpoint repeat contracts under which an in-doubt operation may get another attempt (§11.3.3).
REPEAT_SAFE_CONTRACTS = frozenset({"idempotent", "idempotency_key", "read_only"})


def decision_id(subject_id: str, attempt_id: str | None = None) -> str:
    """Id of the Authorized decision for an attempt (or a model invocation)."""
    return f"auth-{subject_id}" + (f"/{attempt_id}" if attempt_id else "")


def reservation_id(subject_id: str, attempt_id: str | None = None) -> str:
    """Id of the BudgetReserved reservation for an attempt (or a model invocation)."""
    return f"res-{subject_id}" + (f"/{attempt_id}" if attempt_id else "")
ModelTransport = Callable[[ContextBuilt], ModelReply]


class DispatchGate:
    """Admission → durable intent → recheck → dispatch → evidence, for one trajectory.

    Args:
        log: the trajectory's log handle (its tier was chosen from the declared failure domain).
        policy: the admission policy.
        record: the folded record of the log so far (default: fold the log).
        on_position: called as ``on_position(name, event_or_None)`` after each step; names are
            ``after:<EventType>`` for appended events, ``after:dispatch`` and ``after:recheck``.
        coalesce_admission: append Authorized, BudgetReserved and the intent as one batch with one
            acknowledgment (§11.2.2 allows it; causal order inside the batch is kept).
        fence_check: optional ownership hook for the dispatch-time recheck (§11.5.1), called as
            ``fence_check(trajectory_id, owner_epoch)`` after the log-fence comparison; it returns
            None when this writer may still dispatch, or the reason to withhold (e.g.
            :class:`kernel_lib.ownership.leases.LeaseCheck`: the lease was superseded or expired). A hook
            that raises withholds too: ownership that cannot be verified is not assumed.
        clock: wall clock in seconds since the epoch (default ``time.time``), read only at the
            dispatch-time recheck to test an approval's expiry (§11.5.3); the fold reads no clock.

    The gate keeps :attr:`record` current by folding each event it appends.
    """

    def __init__(self, log: TrajectoryLog, policy: AdmissionPolicy, *, record: TrajectoryRecord | None = None,
                 on_position: Callable[[str, Event | None], None] | None = None,
                 coalesce_admission: bool = False,
                 fence_check: Callable[[str, int], "str | None"] | None = None,
                 clock: Callable[[], float] = time.time):
        self.log = log
        self.clock = clock
        self.policy = policy
        self.fence_check = fence_check
        self.record = record if record is not None else fold(initial_record(log.trajectory_id), log.events())
        self.on_position = on_position or (lambda name, ev: None)
        self.coalesce_admission = coalesce_admission
        self.withheld: dict[str, ToolIntent] = {}
        log.control_epoch = max(log.control_epoch, self.record.control_epoch)

    # --- appends ---------------------------------------------------------------------------------
    def _append(self, *payloads: Payload) -> list[Event]:
        if self.record.last_sequence_number != self.log.head:
            raise StaleRecordError(
                f"the gate's record of {self.log.trajectory_id!r} ends at #{self.record.last_sequence_number} but the "
                f"log's head is #{self.log.head}: it was folded from an incomplete copy (a lagging replica?) or another "
                "writer appended since; nothing appended. Fold the authoritative log again before deciding")
        events = self.log.append_many(list(payloads))
        for ev in events:   # fold the whole batch before any callback can append more
            _apply_in_place(self.record, ev)
        self.log.control_epoch = self.record.control_epoch
        for ev in events:
            self.on_position(f"after:{ev.event_type}", ev)
        return events

    def start(self, task: TaskStarted) -> Event:
        """Append TaskStarted (the initial scope and accounting contract).

        Raises KernelError (before anything is appended) if the trajectory already started."""
        if self.record.task is not None:
            raise KernelError(f"{self.log.trajectory_id} already started (TaskStarted is in the log)")
        return self._append(task)[0]

    def change_control(self, to_state: str, *, issuer: str, request_id: str, reason: str = "",
                       bump_control_epoch: bool = True) -> Event:
        """Append a ControlChanged (e.g. PAUSED); by default it advances control_epoch.

        Raises KernelError (before anything is appended) before TaskStarted or from a terminal state."""
        if self.record.task is None:
            raise KernelError(f"{self.log.trajectory_id} has not started; no control transition yet")
        if self.record.control_state in TERMINAL_STATES:
            raise KernelError(f"{self.log.trajectory_id} is {self.record.control_state}, a terminal state; "
                              f"no transition to {to_state}")
        return self._append(ControlChanged(request_id=request_id, issuer=issuer, to_state=to_state,
                                           bump_control_epoch=bump_control_epoch, reason=reason))[0]

    # --- admission ---------------------------------------------------------------------------------
    def _admit(self, subject_id: str, kind: str, grant_id: str, subject: str, bound_usd: float,
               then: Payload | None, attempt_id: str | None = None,
               repeat_contract: str | None = None, finalization: bool = False) -> list[Event]:
        rec = self.record
        if rec.control_state != "RUNNING":
            raise AdmissionDenied(f"{subject_id}: trajectory is {rec.control_state}, not RUNNING")
        op = rec.operations.get(subject_id)
        if op is not None and op.status in ("in_doubt", "established"):
            if kind == "model" or attempt_id in op.attempts:
                raise AdmissionDenied(f"{subject_id} already has a durable intent ({op.status}); a retry needs "
                                      "a fresh identity (a new attempt id, or a new invocation id for a model call)")
            if op.status == "established":
                raise AdmissionDenied(f"{subject_id} is established (its outcome is recorded); running it again is "
                                      "a new operation with its own operation id")
            if op.repeat_contract not in REPEAT_SAFE_CONTRACTS:   # the contract recorded with the intent
                raise AdmissionDenied(
                    f"{subject_id} is in doubt and its endpoint contract is {op.repeat_contract!r}: settle it "
                    f"first (reconciliation), only {sorted(REPEAT_SAFE_CONTRACTS)} license another attempt")
            if repeat_contract != op.repeat_contract:
                raise AdmissionDenied(f"{subject_id}: a new attempt must keep the recorded repeat contract "
                                      f"{op.repeat_contract!r}, not {repeat_contract!r}")
            if isinstance(then, ToolIntent) and (then.tool, dict(then.arguments), then.input_ref) != (
                    op.tool, op.arguments, op.input_ref):
                raise AdmissionDenied(f"{subject_id}: a new attempt must repeat the recorded operation (same tool, "
                                      "arguments and input); a different request is a different operation id")
        rid = reservation_id(subject_id, attempt_id)
        held = rec.budget.reservations.get(rid)
        if op is not None and op.status == "admitted" and held is not None and not held.released:
            # admitted before a crash but never sent: keep its identity and reservation, reserve
            # nothing again (§11.5.4); only the intent is still missing
            if bound_usd > held.amount_usd + 1e-12:
                raise AdmissionDenied(f"{subject_id}/{attempt_id} was admitted with a bound of {held.amount_usd} USD; "
                                      f"a bound of {bound_usd} USD needs a new attempt id")
            b = rec.budget
            reserve = 0.0 if finalization else b.finalization_reserve_usd
            if b.actual_consumption_usd + b.outstanding_reservations_usd + reserve > b.ceiling_usd + 1e-9:
                # its bound is already in the outstanding figure; usage past other bounds since then
                # can still push the total over the ceiling
                raise AdmissionDenied(f"{subject_id}/{attempt_id} keeps its reservation, but consumption "
                                      f"{b.actual_consumption_usd:.4f} + outstanding {b.outstanding_reservations_usd:.4f}"
                                      f" + reserve {reserve:.4f} is over the ceiling {b.ceiling_usd:.4f} now")
            return self._append(then) if then is not None else []
        ok, why = self.policy.authorize(rec, grant_id, subject)
        b = rec.budget
        reserve = 0.0 if finalization else b.finalization_reserve_usd   # finalization work may use the reserve
        if ok and (b.actual_consumption_usd + b.outstanding_reservations_usd + bound_usd
                   + reserve) > b.ceiling_usd + 1e-9:
            ok, why = False, (f"bounded liability {bound_usd:.4f} USD does not fit: consumption "
                              f"{b.actual_consumption_usd:.4f} + outstanding {b.outstanding_reservations_usd:.4f} "
                              f"+ reserve {reserve:.4f} > ceiling {b.ceiling_usd:.4f}")
        auth = Authorized(decision_id=decision_id(subject_id, attempt_id), subject_id=subject_id, subject_kind=kind,
                          policy_version=self.policy.policy_version, grant_id=grant_id,
                          decision="allow" if ok else "deny", reason=why)
        if not ok:
            self._append(auth)
            raise AdmissionDenied(f"{subject_id}: {why}")
        res = BudgetReserved(reservation_id=reservation_id(subject_id, attempt_id), subject_id=subject_id, amount_usd=bound_usd,
                             policy_version=self.policy.policy_version)
        if self.coalesce_admission and then is not None:
            return self._append(auth, res, then)
        return self._append(auth) + self._append(res) + (self._append(then) if then is not None else [])

    def _recheck(self, subject_id: str, admitted_control_epoch: int) -> None:
        rec = self.record
        why = None
        if rec.control_state != "RUNNING":
            why = f"trajectory is {rec.control_state}"
        elif rec.control_epoch != admitted_control_epoch:
            why = f"control_epoch moved from {admitted_control_epoch} to {rec.control_epoch}"
        elif (blocker := rec.approval_blocker(subject_id, self.clock())) is not None:
            why = blocker      # pending, void (refused, withdrawn, expired) or past its expiry now
        elif self.log.store.fence(self.log.trajectory_id) > self.log.owner_epoch:
            why = (f"ownership moved: the log's fence is owner_epoch={self.log.store.fence(self.log.trajectory_id)}, "
                   f"this worker holds {self.log.owner_epoch}")
        elif self.fence_check is not None:
            try:
                why = self.fence_check(self.log.trajectory_id, self.log.owner_epoch)
            except Exception as exc:   # noqa: BLE001 - an unverifiable owner does not dispatch
                why = f"the ownership check failed ({type(exc).__name__}: {exc})"
        if why:
            raise DispatchWithheld(f"{subject_id} withheld at the dispatch-time recheck: {why}; the attempt "
                                   "keeps its operation-table entry and its reservation")
        self.on_position("after:recheck", None)

    # --- tool calls --------------------------------------------------------------------------------
    def run_tool(self, proposal: ToolProposal, transport: ToolTransport, *,
                 finalization: bool = False) -> TrajectoryRecord:
        """Run one tool attempt through the whole of eq. 1. Returns the updated record.

        ``finalization=True`` marks finalization work, whose bound may draw on the finalization
        reserve (§11.5.4); all other work must leave the reserve untouched.

        Raises:
            AdmissionDenied: refused at admission (the denial is logged).
            DispatchWithheld: the recheck withheld the attempt (see :meth:`release`).
        """
        intent = ToolIntent(operation_id=proposal.operation_id, attempt_id=proposal.attempt_id,
                            tool=proposal.tool, arguments=proposal.arguments, input_ref=proposal.input_ref,
                            revision=proposal.revision, repeat_contract=proposal.repeat_contract,
                            grant_id=proposal.grant_id,
                            authorization_ref=decision_id(proposal.operation_id, proposal.attempt_id),
                            reservation_ref=reservation_id(proposal.operation_id, proposal.attempt_id))
        epoch = self.record.control_epoch
        self._admit(proposal.operation_id, "tool", proposal.grant_id, proposal.tool, proposal.cost_bound_usd,
                    intent, proposal.attempt_id, proposal.repeat_contract, finalization)
        return self._release(intent, transport, epoch)

    def release(self, operation_id: str, transport: ToolTransport) -> TrajectoryRecord:
        """Re-run the recheck for a withheld attempt and dispatch it; no second reservation."""
        intent = self.withheld.get(operation_id)
        if intent is None:
            raise KernelError(f"{operation_id} is not withheld by this gate")
        return self._release(intent, transport, self.record.control_epoch)

    def _release(self, intent: ToolIntent, transport: ToolTransport, epoch: int) -> TrajectoryRecord:
        try:
            self._recheck(intent.operation_id, epoch)
        except DispatchWithheld:
            self.withheld[intent.operation_id] = intent
            raise
        self.withheld.pop(intent.operation_id, None)
        try:
            reply = transport(intent)
        except TimeoutError as exc:
            reply = ToolReply(status="timeout", outcome={"error": str(exc) or "timeout"})
        except OSError as exc:
            reply = ToolReply(status="unreachable", outcome={"error": repr(exc)})
        self.on_position("after:dispatch", None)
        return self.record_evidence(intent.operation_id, intent.attempt_id, reply)

    def record_evidence(self, operation_id: str, attempt_id: str, reply: ToolReply,
                        source: str = "reply") -> TrajectoryRecord:
        """Append a ToolResult (and usage evidence when given) for an attempt.

        Evidence is what the endpoint sent, so credential-looking fields in it are redacted (and
        listed under ``outcome.redacted_fields``) rather than refused: the log keeps the evidence
        and never the secret. A reply that is not a :class:`ToolReply` is recorded as incomplete
        evidence (the request did leave), so the attempt stays in doubt.
        """
        if not isinstance(reply, ToolReply):
            reply = ToolReply(status="partial", outcome={"error": f"transport returned {type(reply).__name__}, "
                                                                  "not a ToolReply"})
        self._append(_tool_result(operation_id, attempt_id, reply, source))
        att = self.record.operations[operation_id].attempts[attempt_id]
        res = self.record.budget.reservations.get(reservation_id(operation_id, attempt_id))
        charged = reply.charged_usd
        if _usage(charged) and res is not None and not res.released:
            # usage evidence settles this attempt's own reservation; finally only once the attempt
            # is established (a partial report leaves the unverified remainder held, §11.5.3)
            self._append(BudgetSettled(reservation_id=res.reservation_id, subject_id=operation_id,
                                       actual_usd=charged, final=att.established,
                                       evidence=f"{source}:{reply.status}"))
        return self.record

    # --- model calls -------------------------------------------------------------------------------
    def run_model(self, call: ModelCall, transport: ModelTransport, *, finalization: bool = False) -> ModelReply:
        """ContextBuilt and its reservation durable before the request leaves (§11.3.2);
        ``finalization`` as in :meth:`run_tool`."""
        try:
            sha = hashlib.sha256(call.delivered_input.encode()).hexdigest()
        except UnicodeEncodeError:
            raise MalformedEventError("the model call's delivered input is not valid UTF-8 (lone surrogate)",
                                      event_type="ContextBuilt") from None
        ctx = ContextBuilt(invocation_id=call.invocation_id, model=call.model, delivered_input=call.delivered_input,
                           delivered_input_sha256=sha, request_config=call.request_config)
        epoch = self.record.control_epoch
        self._admit(call.invocation_id, "model", call.grant_id, call.model, call.cost_bound_usd, ctx,
                    finalization=finalization)
        self._recheck(call.invocation_id, epoch)
        reply = transport(ctx)
        self.on_position("after:dispatch", None)
        if not isinstance(reply, ModelReply):
            reply = ModelReply(status="error", reply=f"transport returned {type(reply).__name__}, not a ModelReply")
        try:
            check_json({"reply": reply.reply, "proposal": reply.proposal})
            replied = ModelReplied(invocation_id=call.invocation_id, status=reply.status,
                                   reply=redact_secrets(reply.reply)[0], proposal=redact_secrets(reply.proposal)[0],
                                   input_tokens=reply.input_tokens, output_tokens=reply.output_tokens)
        except ValueError as exc:   # keep the fact of a reply; its content could not be stored
            why = exc.errors()[0].get("msg", "") if hasattr(exc, "errors") else str(exc)
            replied = ModelReplied(invocation_id=call.invocation_id, status="error",
                                   reply=f"the reply could not be stored: {why[:200]}")
        self._append(replied)
        if _usage(reply.charged_usd):
            self._append(BudgetSettled(reservation_id=reservation_id(call.invocation_id),
                                       subject_id=call.invocation_id, actual_usd=reply.charged_usd,
                                       final=replied.status == "complete", evidence="provider usage"))
        return reply


# ------------------------------------------------------------------------------------------------
# crash positions (eq. 1, table 3)
# ------------------------------------------------------------------------------------------------

Conclusion = Literal["not_dispatched", "in_doubt", "established"]


def conclude(record: TrajectoryRecord, operation_id: str, prefix_complete: bool) -> tuple[Conclusion, str]:
    """What recovery may conclude about one operation from a folded surviving prefix (table 3).

    Absence of an intent proves non-dispatch only when the prefix is complete and authoritative;
    otherwise the operation is in doubt.
    """
    op = record.operations.get(operation_id)
    has_intent = op is not None and any(a.intent_sequence is not None for a in op.attempts.values())
    if not has_intent:
        if prefix_complete:
            return "not_dispatched", ("no durable intent in a complete authoritative prefix: this attempt was "
                                      "not dispatched through the gate; reconsider the proposal under current "
                                      "admission, do not dispatch automatically")
        return "in_doubt", ("no intent in an incomplete prefix proves nothing: the intent may exist in the part "
                            "not read")
    if op.status == "established":
        return "established", f"durable intent plus complete outcome evidence ({(op.outcome or {}).get('status')})"
    last = op.attempts[op.current_attempt_id].last_result_status if op.current_attempt_id else None
    return "in_doubt", ("durable intent without adequate outcome evidence"
                        + (f" (last evidence: {last})" if last else "") + "; keep identity, liability and owner")


@dataclass(frozen=True)
class CrashPosition:
    """One crash position of eq. 1 and what recovery may conclude there (table 3)."""

    position: str
    after_sequence_number: int
    prefix_complete: bool
    surviving_sequence_number: int
    operation_id: str
    conclusion: Conclusion
    dispatched: bool          # ground truth from the recorded run: had the request left?
    sound: bool               # the conclusion never claims less than what is true
    reason: str
    other_operations: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _dispatch_after(events: Sequence[Event]) -> dict[str, int]:
    """For each operation, the sequence number of its intent: dispatch happens right after it."""
    out: dict[str, int] = {}
    for ev in events:
        if isinstance(ev.payload, ToolIntent):
            out.setdefault(ev.payload.operation_id, ev.sequence_number)
        elif isinstance(ev.payload, ContextBuilt):
            out.setdefault(ev.payload.invocation_id, ev.sequence_number)
    return out


def crash_positions(events: Sequence[Event], operation_id: str | None = None,
                    lag_events: int = 1) -> list[CrashPosition]:
    """Classify every crash position of a recorded trajectory (eq. 1, table 3).

    Positions are: before the first event; during each intent append with its acknowledgment
    lost (the intent landed, or did not); after each event; and after each dispatch action (which
    eq. 1 places after the intent and before any evidence). For each, the surviving log is folded
    twice: as a complete authoritative prefix, and as an incomplete one (a reader lagging by
    ``lag_events`` events, e.g. an asynchronous replica).

    The log is folded once, incrementally; the conclusion for every prefix length is computed
    as the fold passes it, so the cost is linear in events × operations.

    Args:
        events: the recorded trajectory, in sequence order.
        operation_id: the tool operation to classify (default: the first tool operation logged).
        lag_events: how far behind the incomplete reader is (≥ 1).

    Returns:
        One :class:`CrashPosition` per (position, completeness), in position order.

    Raises:
        ConfigError: ``lag_events`` < 1. KernelError: no such operation in the log (or no
        ToolIntent at all when ``operation_id`` is None). FoldError: the events do not fold.
    """
    if isinstance(lag_events, bool) or not isinstance(lag_events, int) or lag_events < 1:
        raise ConfigError(f"lag_events must be an integer >= 1, got {lag_events!r}")
    events = list(events)
    if not events:
        return []
    dispatch_after = _dispatch_after(events)
    if operation_id is None:
        tool_ops = [ev.payload.operation_id for ev in events if isinstance(ev.payload, ToolIntent)]
        if not tool_ops:
            raise KernelError("the trajectory logs no ToolIntent; name the operation to classify (--operation)")
        operation_id = tool_ops[0]
    elif operation_id not in dispatch_after and not any(
            getattr(ev.payload, "operation_id", None) == operation_id
            or getattr(ev.payload, "subject_id", None) == operation_id for ev in events):
        raise KernelError(f"operation {operation_id!r} does not occur in the log; operations with an intent: "
                          f"{sorted(dispatch_after)[:10]}")
    intents = {seq: op for op, seq in dispatch_after.items()}
    others = [k for k in dispatch_after if k != operation_id]

    # conclusions for every surviving prefix length n = 0..N, complete and incomplete
    rec = initial_record(events[0].trajectory_id)
    table: list[dict[bool, tuple[Conclusion, str, dict[str, str]]]] = []
    for n in range(len(events) + 1):
        if n:
            _apply_in_place(rec, events[n - 1])
        table.append({c: (*conclude(rec, operation_id, c), {k: conclude(rec, k, c)[0] for k in others})
                      for c in (True, False)})

    # (label, surviving prefix length n, dispatched?) ; dispatched = the op's request has left
    op_intent = dispatch_after.get(operation_id)
    positions: list[tuple[str, int, bool]] = [("before the first event", 0, False)]
    for i, ev in enumerate(events, start=1):
        left = op_intent is not None and i > op_intent   # dispatch of op followed its intent
        if ev.sequence_number in intents:
            positions.append((f"during {ev.event_type} append for {intents[ev.sequence_number]}, "
                              "acknowledgment lost, intent did not land", i - 1, left and op_intent < i - 1))
            positions.append((f"during {ev.event_type} append for {intents[ev.sequence_number]}, "
                              "acknowledgment lost, intent landed", i, left))
        positions.append((f"after {ev.event_type} (sequence {ev.sequence_number})", i, left))
        if ev.sequence_number in intents:
            positions.append((f"after dispatch of {intents[ev.sequence_number]} (before evidence)", i,
                              op_intent is not None and i >= op_intent))
    out: list[CrashPosition] = []
    for label, n, dispatched in positions:
        for complete in (True, False):
            seen = n if complete else max(n - lag_events, 0)
            concl, why, other = table[seen][complete]
            sound = not (concl == "not_dispatched" and dispatched)
            out.append(CrashPosition(label, n, complete, seen, operation_id, concl, dispatched, sound, why, other))
    return out
