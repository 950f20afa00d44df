"""The dispatch gate (§11.3.2–11.3.3, eq. 1): the effects of the gate's decisions.

For every tool call and model call the gate enforces eq. 1::

    validated proposal  <  admission (Authorized + BudgetReserved)  <  intent durable at the
    declared tier  <  dispatch-time recheck  <  dispatch  <  evidence recorded

The decisions are pure functions of the folded record in :mod:`kernel_lib.core.decisions`
(admission, the dispatch-time recheck, the evidence payloads); :class:`DispatchGate` appends what
they return, folds each appended event into its record, and moves requests and replies through
the transports:

* Admission checks the control state, the capability grant and the bounded-liability budget rule
  (consumption + outstanding reservations + this step's bound + finalization reserve ≤ ceiling,
  in integer micro-dollars).
* The intent (``ToolIntent``; for a model call ``ContextBuilt``) and everything before it are
  acknowledged by the store at the trajectory's tier before anything leaves.
* The dispatch-time recheck re-reads control state and ownership without reserving again; a
  pause or a lost fence withholds the admitted, unsent attempt (:class:`DispatchWithheld`), which
  keeps its operation-table entry and its reservation. When the recheck compares an approval's
  expiry with the wall clock, the gate first appends the reading as a ``RuntimeInput`` (kind
  ``clock``, name :data:`~kernel_lib.core.decisions.RECHECK_CLOCK_INPUT`), so a replay sees the
  value the decision used; a recheck that needs no clock records none.
* The reply, a timeout or a transport error becomes a ``ToolResult`` (or ``ModelReplied``); only
  complete ``completed``/``failed`` evidence settles the operation.

``on_position`` is called with a position name after every step, so a crash controller (or a
test) can stop the worker at an exact point of eq. 1.

The value types (:class:`ToolProposal`, :class:`ToolReply`, :class:`ModelCall`,
:class:`ModelReply`, :class:`AdmissionPolicy`, :func:`decision_id`, :func:`reservation_id`) live in
:mod:`kernel_lib.core.proposals`, and :func:`crash_positions` / :func:`conclude` (what recovery may
conclude after a crash at each position, table 3) in :mod:`kernel_lib.core.crash_positions`; this
module re-exports them.
"""

from __future__ import annotations

import math

import time
from typing import Callable

from kernel_lib.errors import AdmissionDenied, DispatchWithheld, KernelError, StaleRecordError
from kernel_lib.core.crash_positions import Conclusion, CrashPosition, conclude, crash_positions
from kernel_lib.core.decisions import (
    RECHECK_CLOCK_INPUT,
    Admit,
    Denial,
    Withhold,
    context_built,
    decide_admission,
    decide_recheck,
    model_evidence,
    model_usage_settlement,
    recheck_reads_clock,
    tool_evidence,
    tool_intent,
    usage_settlement,
)
from kernel_lib.core.events import ContextBuilt, ControlChanged, Event, Payload, RuntimeInput, TaskStarted, ToolIntent
from kernel_lib.core.proposals import (
    REPEAT_SAFE_CONTRACTS,
    AdmissionPolicy,
    ModelCall,
    ModelReply,
    ToolProposal,
    ToolReply,
    decision_id,
    reservation_id,
)
from kernel_lib.core.record import TERMINAL_STATES, TrajectoryRecord, fold, fold_step, initial_record
from kernel_lib.log.base import check_events
from kernel_lib.log.trajectory import TrajectoryLog

__all__ = [
    "ToolProposal", "ToolReply", "ModelCall", "ModelReply", "AdmissionPolicy", "REPEAT_SAFE_CONTRACTS",
    "decision_id", "reservation_id", "ToolTransport", "ModelTransport", "DispatchGate", "Conclusion", "conclude",
    "CrashPosition", "crash_positions",
]

ToolTransport = Callable[[ToolIntent], ToolReply]
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
            dispatch-time recheck to test an approval's expiry (§11.5.3), and then recorded as a
            ``RuntimeInput`` before the recheck decides; the fold reads no clock.

    The gate keeps :attr:`record` current by folding each event it appends (:meth:`append`).
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
    def append(self, *payloads: Payload | Event) -> list[Event]:
        """Append ``payloads`` as one batch (one acknowledgment at the log's tier), fold them into
        :attr:`record`, then report each as ``after:<EventType>`` to ``on_position``. A member may
        be an event the log already stamped for its position (see :meth:`TrajectoryLog.append_many`).

        Returns the appended events. The whole batch is folded before any callback runs, so a
        callback that appends more sees a current record.

        Raises:
            StaleRecordError: the record does not end at the log's head (it was folded from an
                incomplete copy, or another writer appended since); nothing is appended. Also
                after the append, if the record and the log's head disagree.
            FoldError: an appended event does not fold (the record keeps the events before it).
            StoreError subclasses: the store refused the batch (e.g. a stale owner).
        """
        if self.record.last_sequence_number != self.log.head:
            raise StaleRecordError(
                f"the gate's record of {self.log.trajectory_id!r} ends at #{self.record.last_sequence_number} but the "
                f"log's head is #{self.log.head}: it was folded from an incomplete copy (a lagging replica?) or "
                "another writer appended since; nothing appended. Fold the authoritative log again before deciding")
        events = self.log.append_many(list(payloads))
        for ev in events:   # fold the whole batch before any callback can append more
            fold_step(self.record, ev)
        if self.record.last_sequence_number != self.log.head:   # invariant: the record ends at the head
            raise StaleRecordError(
                f"after appending #{events[0].sequence_number if events else self.log.head}..#{self.log.head} the "
                f"gate's record of {self.log.trajectory_id!r} ends at #{self.record.last_sequence_number}: the record "
                "was replaced or changed outside the gate; fold the authoritative log again")
        self.log.control_epoch = self.record.control_epoch
        for ev in events:
            self.on_position(f"after:{ev.event_type}", ev)
        return events

    def start(self, task: TaskStarted) -> Event:
        """Append TaskStarted (the initial scope and accounting contract).

        Raises KernelError (before anything is appended) if the trajectory already started."""
        if self.record.task is not None:
            raise KernelError(f"{self.log.trajectory_id} already started (TaskStarted is in the log)")
        return self.append(task)[0]

    def change_control(self, to_state: str, *, issuer: str, request_id: str, reason: str = "",
                       bump_control_epoch: bool = True) -> Event:
        """Append a ControlChanged (e.g. PAUSED); by default it advances control_epoch.

        Raises KernelError (before anything is appended) before TaskStarted or from a terminal state."""
        if self.record.task is None:
            raise KernelError(f"{self.log.trajectory_id} has not started; no control transition yet")
        if self.record.control_state in TERMINAL_STATES:
            raise KernelError(f"{self.log.trajectory_id} is {self.record.control_state}, a terminal state; "
                              f"no transition to {to_state}")
        return self.append(ControlChanged(request_id=request_id, issuer=issuer, to_state=to_state,
                                          bump_control_epoch=bump_control_epoch, reason=reason))[0]

    # --- admission and recheck: the effects of the core decisions ----------------------------------
    def _admit(self, decision: Admit | Denial) -> list[Event]:
        if isinstance(decision, Denial):
            if decision.payloads:
                self.append(*decision.payloads)
            raise AdmissionDenied(decision.reason)
        # every event of the admission must be storable before the first is appended: an intent
        # too large for one event (a huge delivered input) is refused here, with no reservation
        # left held by an admission that can never reach its intent. The intent (the one event
        # that can be large) is stamped ahead once, checked, and appended as stamped.
        items: list[Payload | Event] = [
            self.log.stamp(p, self.log.head + i + 1) if isinstance(p, (ToolIntent, ContextBuilt)) else p
            for i, p in enumerate(decision.payloads)]
        check_events(x for x in items if isinstance(x, Event))
        if self.coalesce_admission:
            return self.append(*items)
        out: list[Event] = []
        for item in items:
            out += self.append(item)
        return out

    def _recheck(self, subject_id: str, admitted_control_epoch: int) -> None:
        fence = self.log.store.fence(self.log.trajectory_id)
        now = None
        withhold = None
        reads_clock = recheck_reads_clock(self.record, subject_id, admitted_control_epoch)
        if reads_clock and fence <= self.log.owner_epoch:
            # the decision compares an approval's expiry with the clock (a writer that lost the
            # fence withholds whatever the clock says, so it decides without a reading)
            now = self.clock()
            if isinstance(now, bool) or not isinstance(now, (int, float)) or not math.isfinite(now):
                withhold = Withhold(subject_id, f"the clock returned {now!r:.60}, not a finite number of seconds: "
                                                "an unreadable clock does not license a dispatch")
        if withhold is None:
            withhold = decide_recheck(self.record, subject_id=subject_id,
                                      admitted_control_epoch=admitted_control_epoch, fence=fence,
                                      owner_epoch=self.log.owner_epoch, now_unix_s=now)
        if withhold is None and self.fence_check is not None:
            try:
                why = self.fence_check(self.log.trajectory_id, self.log.owner_epoch)
            except Exception as exc:   # noqa: BLE001 - an unverifiable owner does not dispatch
                why = f"the ownership check failed ({type(exc).__name__}: {exc})"
            if why:
                withhold = Withhold(subject_id, why)
        if withhold is not None:
            raise DispatchWithheld(withhold.message)
        if now is not None:
            # the reading that licensed this dispatch is recorded before anything leaves, so a
            # replay serves the same value (a withheld recheck appends nothing: polling a
            # withheld attempt does not grow the log)
            self.append(RuntimeInput(kind="clock", name=RECHECK_CLOCK_INPUT,
                                     value={"subject_id": subject_id, "now_unix_s": now}))
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
        intent = tool_intent(proposal)
        epoch = self.record.control_epoch
        self._admit(decide_admission(self.record, self.policy, subject_id=proposal.operation_id, kind="tool",
                                     grant_id=proposal.grant_id, subject=proposal.tool,
                                     bound_usd=proposal.cost_bound_usd, intent=intent, attempt_id=proposal.attempt_id,
                                     repeat_contract=proposal.repeat_contract, finalization=finalization))
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
        (:func:`~kernel_lib.core.decisions.tool_evidence`,
        :func:`~kernel_lib.core.decisions.usage_settlement`.)
        """
        self.append(tool_evidence(operation_id, attempt_id, reply, source))
        settlement = usage_settlement(self.record, operation_id, attempt_id, reply, source)
        if settlement is not None:
            self.append(settlement)
        return self.record

    # --- model calls -------------------------------------------------------------------------------
    def run_model(self, call: ModelCall, transport: ModelTransport, *, finalization: bool = False) -> ModelReply:
        """ContextBuilt and its reservation durable before the request leaves (§11.3.2);
        ``finalization`` as in :meth:`run_tool`.

        Raises:
            MalformedEventError: the delivered input is not valid UTF-8.
            AdmissionDenied, DispatchWithheld: as :meth:`run_tool` (a withheld model call is not
                kept for :meth:`release`).
        """
        ctx = context_built(call)
        epoch = self.record.control_epoch
        self._admit(decide_admission(self.record, self.policy, subject_id=call.invocation_id, kind="model",
                                     grant_id=call.grant_id, subject=call.model, bound_usd=call.cost_bound_usd,
                                     intent=ctx, finalization=finalization))
        self._recheck(call.invocation_id, epoch)
        reply = transport(ctx)
        self.on_position("after:dispatch", None)
        if not isinstance(reply, ModelReply):
            reply = ModelReply(status="error", reply=f"transport returned {type(reply).__name__}, not a ModelReply")
        replied = model_evidence(call.invocation_id, reply)
        self.append(replied)
        settlement = model_usage_settlement(call.invocation_id, reply, replied)
        if settlement is not None:
            self.append(settlement)
        return reply
