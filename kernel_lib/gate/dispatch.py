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
  pause, a void or expired approval or a failed ownership check withholds the admitted, unsent
  attempt (:class:`DispatchWithheld`). The gate records that as an ``AttemptWithheld`` before
  raising: the attempt keeps its operation-table entry, settled as never sent (not in doubt), and
  its reservation is released; :meth:`DispatchGate.release` later dispatches the operation as a
  new attempt. When the recheck compares an approval's expiry with the wall clock, the gate first
  appends the reading as a ``RuntimeInput`` (kind ``clock``, name
  :data:`~kernel_lib.core.decisions.RECHECK_CLOCK_INPUT`), so a replay sees the value the decision
  used (the dispatch's or the withhold's); a recheck that needs no clock records none.
* The reply, a timeout or a transport error becomes a ``ToolResult`` (or ``ModelReplied``); only
  complete ``completed``/``failed`` evidence settles the operation. The usage settlement of a
  reply goes in the same batch as its evidence (one acknowledgment), so a crash never leaves a
  result without its settlement.
* One durable barrier per step: when the proposal declared ``status_lookup`` (the endpoint answers
  a status query by operation id; the intent records it), the evidence batch is a *deferred*
  append (:meth:`TrajectoryLog.append_many`): acknowledged at the store's write tier and made
  durable by the log's next barrier, which comes before anything else leaves (the next intent,
  model context or recheck reading is a barrier append) or at :meth:`DispatchGate.sync`. A host
  crash can lose only such evidence, and then the attempt is in doubt with an intent saying its
  endpoint can be asked: reconciliation settles it (§11.5.3). Undeclared, the evidence waits for
  its own barrier, as before.

``on_position`` is called with a position name after every step, so a crash controller (or a
test) can stop the worker at an exact point of eq. 1.

Parallel tool calls (one turn's calls issued at once, from threads or asyncio tasks) share one
gate: each decide-and-append step (admission, the recheck, the evidence) holds the gate's lock, so
two calls are never admitted against the same budget figure or log position, while the endpoint
round trips run outside it and overlap (:meth:`DispatchGate.run_tool_async` for asyncio).

The value types (:class:`ToolProposal`, :class:`ToolReply`, :class:`ModelCall`,
:class:`ModelReply`, :class:`AdmissionPolicy`, :func:`decision_id`, :func:`reservation_id`,
:func:`idempotency_key`: the key every ``ToolIntent`` carries to the endpoint) live in
:mod:`kernel_lib.core.proposals`, and :func:`crash_positions` / :func:`conclude` (what recovery may
conclude after a crash at each position, table 3) in :mod:`kernel_lib.core.crash_positions`; this
module re-exports them.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import threading
import time
from typing import Any, Awaitable, Callable

from kernel_lib._support.checks import finite_or_none
from kernel_lib.errors import (
    ActionMaskedRefusal, AdmissionDenied, ConfigError, DispatchWithheld, KernelError, StaleRecordError, StoreError,
)
from kernel_lib.core.crash_positions import Conclusion, CrashPosition, conclude, crash_positions
from kernel_lib.core.decisions import (
    RECHECK_CLOCK_INPUT,
    RESUME_CLOCK_INPUT,
    Admit,
    Denial,
    Withhold,
    attempt_withheld,
    context_built,
    decide_admission,
    decide_recheck,
    lapsed_approvals,
    model_evidence,
    model_usage_settlement,
    orphan_settlements,
    recheck_reads_clock,
    resume_reads_clock,
    tool_evidence,
    tool_intent,
    usage_settlement,
)
from kernel_lib.core.events import ContextBuilt, ControlChanged, Event, Payload, RuntimeInput, TaskStarted, ToolIntent
from kernel_lib.core.proposals import (
    DEFAULT_REPEAT_CONTRACT,
    REPEAT_CONTRACTS,
    REPEAT_SAFE_CONTRACTS,
    AdmissionPolicy,
    ModelCall,
    ModelReply,
    ToolProposal,
    ToolReply,
    decision_id,
    idempotency_key,
    reservation_id,
)
from kernel_lib.core.record import (
    SETTLING_STATUSES, TERMINAL_STATES, WITHHELD, TrajectoryRecord, fold, fold_step, initial_record,
)
from kernel_lib.log.base import check_events
from kernel_lib.log.trajectory import TrajectoryLog

__all__ = [
    "ToolProposal", "ToolReply", "ModelCall", "ModelReply", "AdmissionPolicy", "REPEAT_SAFE_CONTRACTS",
    "REPEAT_CONTRACTS", "DEFAULT_REPEAT_CONTRACT", "decision_id", "reservation_id", "idempotency_key",
    "ToolTransport", "AsyncToolTransport", "ModelTransport", "DispatchGate", "Conclusion", "conclude",
    "CrashPosition", "crash_positions",
]

ToolTransport = Callable[[ToolIntent], ToolReply]
AsyncToolTransport = Callable[[ToolIntent], Awaitable[ToolReply]]
ModelTransport = Callable[[ContextBuilt], ModelReply]


def _recheck_reading(subject_id: str, now: float) -> RuntimeInput:
    """The clock reading a dispatch-time recheck decided on, as the log records it."""
    return RuntimeInput(kind="clock", name=RECHECK_CLOCK_INPUT, value={"subject_id": subject_id, "now_unix_s": now})


def _serialized(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run a gate method under the gate's (reentrant) lock: a decide-and-append step."""
    @functools.wraps(method)
    def locked(self: "DispatchGate", *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)
    return locked


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

    Thread-safe for parallel calls: every read of :attr:`record` that decides and the appends it
    leads to run under one reentrant lock (``on_position`` callbacks run under it too); a transport
    runs outside it. :attr:`record` itself is shared: read it from one thread at a time, or take a
    :func:`~kernel_lib.core.record.fork` under ``with gate.lock:``.
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
        #: (operation, attempt) whose ToolIntent, appended through this gate, declared a status lookup:
        #: only their evidence may be deferred (anything else, e.g. after a resume, takes a barrier)
        self._status_lookup_attempts: set[tuple[str, str]] = set()
        self.on_position = on_position or (lambda name, ev: None)
        self.coalesce_admission = coalesce_admission
        self.withheld: dict[str, ToolIntent] = {}
        self._lock = threading.RLock()
        log.control_epoch = max(log.control_epoch, self.record.control_epoch)

    @property
    def lock(self) -> threading.RLock:
        """The gate's reentrant lock: held by every decide-and-append step."""
        return self._lock

    # --- appends ---------------------------------------------------------------------------------
    @_serialized
    def sync(self) -> int:
        """Make deferred evidence durable at the log's tier now (:meth:`TrajectoryLog.sync`: one
        barrier, none if nothing is uncovered); returns the log's durable head. Call it before the
        trajectory finishes, a lease is handed over or a reader is told the log is durable."""
        return self.log.sync()

    @_serialized
    def append(self, *payloads: Payload | Event, deferred: bool = False) -> list[Event]:
        """Append ``payloads`` as one batch (one acknowledgment at the log's tier), fold them into
        :attr:`record`, then report each as ``after:<EventType>`` to ``on_position``. A member may
        be an event the log already stamped for its position (see :meth:`TrajectoryLog.append_many`).

        Returns the appended events. The whole batch is folded before any callback runs, so a
        callback that appends more sees a current record. ``deferred``: acknowledged at the log's
        write tier, made durable by its next barrier (:meth:`TrajectoryLog.append_many`).

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
        events = self.log.append_many(list(payloads), deferred=deferred)
        for ev in events:   # fold the whole batch before any callback can append more
            fold_step(self.record, ev)
            if ev.event_type == "ToolIntent" and getattr(ev.payload, "status_lookup", False) is True:
                self._status_lookup_attempts.add((ev.payload.operation_id, ev.payload.attempt_id))
        if self.record.last_sequence_number != self.log.head:   # invariant: the record ends at the head
            raise StaleRecordError(
                f"after appending #{events[0].sequence_number if events else self.log.head}..#{self.log.head} the "
                f"gate's record of {self.log.trajectory_id!r} ends at #{self.record.last_sequence_number}: the record "
                "was replaced or changed outside the gate; fold the authoritative log again")
        self.log.control_epoch = self.record.control_epoch
        for ev in events:
            self.on_position(f"after:{ev.event_type}", ev)
        return events

    @_serialized
    def start(self, task: TaskStarted) -> Event:
        """Append TaskStarted (the initial scope and accounting contract).

        Raises KernelError (before anything is appended) if the trajectory already started."""
        if self.record.task is not None:
            raise KernelError(f"{self.log.trajectory_id} already started (TaskStarted is in the log)")
        return self.append(task)[0]

    @_serialized
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
            if decision.masked is not None:   # a watchdog tombstone (table 7, tier 2)
                m = decision.masked
                raise ActionMaskedRefusal(decision.reason, action_signature=m["action_signature"], tool=m.get("tool"),
                                          masked_at=m.get("sequence_number"))
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

    def _decide_recheck(self, subject_id: str, admitted_control_epoch: int) -> tuple[Withhold | None, float | None]:
        """The dispatch-time recheck's decision and the clock reading it used (None: none read, or
        the reading was not a finite number); appends nothing."""
        fence = self.log.store.fence(self.log.trajectory_id)
        now = None
        withhold = None
        reads_clock = recheck_reads_clock(self.record, subject_id, admitted_control_epoch)
        if reads_clock and fence <= self.log.owner_epoch:
            # the decision compares an approval's expiry with the clock (a writer that lost the
            # fence withholds whatever the clock says, so it decides without a reading)
            now = self.clock()
            if finite_or_none(now) is None:
                withhold = Withhold(subject_id, f"the clock returned {now!r:.60}, not a finite number of seconds: "
                                                "an unreadable clock does not license a dispatch")
                now = None
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
        return withhold, now

    @_serialized
    def _recheck(self, subject_id: str, admitted_control_epoch: int, attempt_id: str | None = None) -> None:
        """The dispatch-time recheck of the attempt ``attempt_id`` of ``subject_id`` (a model
        invocation: its own id) whose intent was just made durable.

        A withhold never leaves the attempt in doubt: before raising :class:`DispatchWithheld` the
        gate appends an ``AttemptWithheld`` (after the clock reading the decision used, if it read
        one), which settles the attempt as never sent and releases its reservation. Only a writer
        that lost the log's fence cannot record it (the store refuses its appends): the attempt then
        stays in doubt for the new owner, who holds the fence, to settle.
        """
        withhold, now = self._decide_recheck(subject_id, admitted_control_epoch)
        if withhold is not None:
            raise DispatchWithheld(self._record_withheld(subject_id, attempt_id or subject_id, withhold, now))
        if now is not None:
            # the reading that licensed this dispatch is recorded before anything leaves, so a
            # replay serves the same value
            self.append(_recheck_reading(subject_id, now))
        self.on_position("after:recheck", None)

    def _record_withheld(self, subject_id: str, attempt_id: str, withhold: Withhold, now: float | None) -> str:
        """Append the ``AttemptWithheld`` of a withheld attempt (with the clock reading that
        decided it first); returns the message for :class:`DispatchWithheld`."""
        record = attempt_withheld(self.record, subject_id=subject_id, attempt_id=attempt_id, reason=withhold.why)
        if record is None:
            return withhold.message
        if self.log.store.fence(self.log.trajectory_id) > self.log.owner_epoch:
            return withhold.message + "; not recorded as withheld (this writer lost the fence), so it stays in doubt"
        batch: list[Payload] = []
        if now is not None:
            batch.append(_recheck_reading(subject_id, now))
        try:
            self.append(*batch, record)
        except (StoreError, StaleRecordError) as exc:
            return withhold.message + f"; the withheld record could not be appended ({exc}), so it stays in doubt"
        return withhold.message + "; recorded as withheld, its reservation released"

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
        intent = tool_intent(proposal, self.log.trajectory_id)
        with self._lock:   # decide and append as one step: no other call is admitted in between
            epoch = self.record.control_epoch
            self._admit(decide_admission(self.record, self.policy, subject_id=proposal.operation_id, kind="tool",
                                         grant_id=proposal.grant_id, subject=proposal.tool,
                                         bound_usd=proposal.cost_bound_usd, intent=intent,
                                         attempt_id=proposal.attempt_id, repeat_contract=proposal.repeat_contract,
                                         finalization=finalization))
        return self._release(intent, transport, epoch)

    async def run_tool_async(self, proposal: ToolProposal, transport: ToolTransport | AsyncToolTransport, *,
                             finalization: bool = False) -> TrajectoryRecord:
        """:meth:`run_tool` for asyncio: parallel tool calls of one turn as tasks
        (``asyncio.gather(gate.run_tool_async(p1, t), gate.run_tool_async(p2, t))``).

        The blocking steps (admission, the durable appends at the log's tier, the recheck, the
        evidence) run in a thread of their own, so the event loop is never blocked on a store
        acknowledgment; the calls serialize only on the gate's lock. ``transport`` may be a plain
        callable (called in that thread) or an ``async def`` (awaited on the caller's event loop,
        so an ``httpx.AsyncClient`` transport works). Cancelling the awaiting task does not stop an
        attempt already admitted: it runs to its evidence (an intent is durable; abandoning it half
        way would only leave it in doubt).

        Returns the updated record (the shared :attr:`record`). Raises: as :meth:`run_tool`.
        """
        loop = asyncio.get_running_loop()
        if inspect.iscoroutinefunction(transport) or inspect.iscoroutinefunction(type(transport).__call__):
            async_transport = transport

            def sync_transport(intent: ToolIntent) -> ToolReply:   # in the worker thread; awaited on the loop
                return asyncio.run_coroutine_threadsafe(async_transport(intent), loop).result()
        else:
            sync_transport = transport
        done: asyncio.Future[TrajectoryRecord] = loop.create_future()

        def settle(ok: bool, value: Any) -> None:
            if not done.done():
                done.set_result(value) if ok else done.set_exception(value)

        def work() -> None:
            try:
                value, ok = self.run_tool(proposal, sync_transport, finalization=finalization), True
            except BaseException as exc:   # noqa: BLE001 - handed to the awaiting task as raised
                value, ok = exc, False
            with contextlib.suppress(RuntimeError):   # the loop closed meanwhile: nobody is waiting
                loop.call_soon_threadsafe(settle, ok, value)

        # a thread per call, not the loop's default executor: an async transport that needs that
        # executor (DNS resolution) cannot then starve behind calls waiting for it
        ctx = contextvars.copy_context()
        threading.Thread(target=ctx.run, args=(work,), name=f"gate-{proposal.operation_id}", daemon=True).start()
        return await asyncio.shield(done)

    def release(self, operation_id: str, transport: ToolTransport, *, attempt_id: str | None = None,
                finalization: bool = False) -> TrajectoryRecord:
        """Dispatch an operation the recheck withheld, as a new attempt (§11.3.2, §11.5.4).

        The withheld attempt was settled as never sent and its reservation released
        (``AttemptWithheld``), so this works from the record alone, after a crash and a resume too.
        First the recheck runs again on the current record without appending anything (polling a
        still-withheld operation does not grow the log); if it passes, a new attempt of the same
        request (``attempt_id``, default ``<first attempt>-r<n>``) goes through admission (a fresh
        reservation of the withheld attempt's bound, under the current budget rule), its intent,
        the recheck and dispatch, as :meth:`run_tool`. ``finalization`` as there.

        Raises:
            KernelError: ``operation_id`` is not withheld (not recorded as withheld in the log,
                nor withheld by this gate).
            DispatchWithheld: the recheck still withholds it (nothing appended), or withholds the
                new attempt. AdmissionDenied: the new attempt is refused at admission.
        """
        with self._lock:
            op = self.record.operations.get(operation_id)
            if op is None or op.status != WITHHELD:
                if operation_id not in self.withheld:
                    raise KernelError(f"{operation_id} is not withheld (its status is "
                                      f"{op.status if op else 'unknown'}); only an operation recorded as withheld "
                                      "at the dispatch-time recheck can be released")
                withhold, _ = self._decide_recheck(operation_id, self.record.control_epoch)
                if withhold is not None:
                    raise DispatchWithheld(withhold.message)
                raise KernelError(f"{operation_id} was withheld by this gate but is "
                                  f"{op.status if op else 'unknown'} in the log (its withheld record could not be "
                                  "appended): settle it by reconciliation")
            intent = self._withheld_intent(op)
            withhold, _ = self._decide_recheck(operation_id, self.record.control_epoch)
            if withhold is not None:
                raise DispatchWithheld(withhold.message)
            res = self.record.budget.reservations.get(intent.reservation_ref)
            if attempt_id is None:
                root = next(iter(op.attempts))
                n = len(op.attempts)
                while f"{root}-r{n}" in op.attempts:
                    n += 1
                attempt_id = f"{root}-r{n}"
            proposal = ToolProposal(operation_id, attempt_id, intent.tool, dict(intent.arguments), intent.grant_id,
                                    res.amount_usd if res is not None else 0.0,
                                    repeat_contract=intent.repeat_contract, input_ref=intent.input_ref,
                                    revision=intent.revision, status_lookup=intent.status_lookup)
        return self.run_tool(proposal, transport, finalization=finalization)

    def _withheld_intent(self, op) -> ToolIntent:
        """The intent of the operation's last withheld attempt (kept by this gate, else read back
        from the log at the attempt's intent position)."""
        att = max((a for a in op.attempts.values() if a.withheld), key=lambda a: a.intent_sequence)
        kept = self.withheld.get(op.operation_id)
        if kept is not None and kept.attempt_id == att.attempt_id:
            return kept
        for ev in self.log.events(att.intent_sequence, att.intent_sequence):
            if isinstance(ev.payload, ToolIntent):
                return ev.payload
        raise KernelError(f"the intent of {op.operation_id}/{att.attempt_id} (#{att.intent_sequence}) cannot be read "
                          "back from the log")

    def _release(self, intent: ToolIntent, transport: ToolTransport, epoch: int) -> TrajectoryRecord:
        try:
            self._recheck(intent.operation_id, epoch, attempt_id=intent.attempt_id)
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
        return self.record_evidence(intent.operation_id, intent.attempt_id, reply, reconcilable=intent.status_lookup)

    @_serialized
    def record_evidence(self, operation_id: str, attempt_id: str, reply: ToolReply,
                        source: str = "reply", *, reconcilable: bool = False) -> TrajectoryRecord:
        """Append a ToolResult (and usage evidence when given) for an attempt.

        ``reconcilable=True`` (the attempt's intent declared ``status_lookup``; :meth:`run_tool`
        passes it): the batch is deferred, acknowledged at the log's write tier and made durable by
        its next barrier; a crash that loses it leaves the attempt in doubt for reconciliation. It
        is honoured only for an attempt whose ToolIntent this gate appended with ``status_lookup``
        true; for any other attempt the evidence takes a barrier as usual (the safe reading).
        Raises ConfigError when ``reconcilable`` is not a bool.

        Evidence is what the endpoint sent, so credential-looking fields in it are redacted (and
        listed under ``outcome.redacted_fields``) rather than refused: the log keeps the evidence
        and never the secret. A reply that is not a :class:`ToolReply` is recorded as incomplete
        evidence (the request did leave), so the attempt stays in doubt.
        (:func:`~kernel_lib.core.decisions.tool_evidence`,
        :func:`~kernel_lib.core.decisions.usage_settlement`.)
        """
        if not isinstance(reconcilable, bool):
            raise ConfigError(f"reconcilable must be True or False, got {reconcilable!r}")
        deferred = reconcilable and (operation_id, attempt_id) in self._status_lookup_attempts
        result = tool_evidence(operation_id, attempt_id, reply, source)
        settlement = usage_settlement(self.record, operation_id, attempt_id, reply, source)
        if settlement is not None:
            # the settlement is final once the attempt is established, which the result about to
            # be folded may make it (the reducer's rule, record._tool_result); result and
            # settlement go in one batch, so no crash can leave the result without its settlement
            op = self.record.operations.get(operation_id)
            att = op.attempts.get(attempt_id) if op is not None else None
            established = (att is not None and att.established) or (
                result.status in SETTLING_STATUSES and result.observation_complete)
            if settlement.final != established:
                settlement = settlement.model_copy(update={"final": established})
        self.append(result, *([settlement] if settlement is not None else []), deferred=deferred)
        return self.record

    # --- resume: what the recovered record says must be settled -----------------------------------
    @_serialized
    def expire_lapsed_approvals(self) -> list[Event]:
        """Record the expiry of every pending approval whose deadline passed (§11.5.3), e.g. while
        no worker was alive: a lapsed request is void, and the trajectory leaves
        AWAITING_APPROVAL once none is pending.

        The gate's clock is read only when some pending approval has an expiry; if one lapsed, the
        reading is appended first as a ``RuntimeInput`` (kind ``clock``, name
        :data:`~kernel_lib.core.decisions.RESUME_CLOCK_INPUT`) and each ``ApprovalResolved``
        (``expired``) names it as its evidence, in the same batch. Returns the appended events
        (none when nothing lapsed or the clock did not return a finite number: nothing is decided
        on an unreadable clock). (:func:`~kernel_lib.core.decisions.lapsed_approvals`.)
        """
        if not resume_reads_clock(self.record):
            return []
        now = self.clock()
        if finite_or_none(now) is None:
            return []
        seq = self.log.head + 1
        resolutions = lapsed_approvals(self.record, now, clock_sequence_number=seq)
        if not resolutions:
            return []
        reading = RuntimeInput(kind="clock", name=RESUME_CLOCK_INPUT,
                               value={"purpose": "approval_expiry", "now_unix_s": now})
        return self.append(reading, *resolutions)

    @_serialized
    def settle_orphaned_reservations(self) -> list[Event]:
        """Append a final ``BudgetSettled`` for every reservation that outlived its reason
        (:meth:`~kernel_lib.core.record.TrajectoryRecord.orphaned_reservations`), in one batch:
        released unspent when its operation never dispatched, else charged at its bound (no usage
        evidence survives; missing usage is never released as unspent, §11.5.3). Meant for a
        resume over the complete authoritative log. Returns the appended events.
        (:func:`~kernel_lib.core.decisions.orphan_settlements`.)"""
        settlements = orphan_settlements(self.record)
        return self.append(*settlements) if settlements else []

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
        with self._lock:   # decide and append as one step, as in run_tool
            epoch = self.record.control_epoch
            self._admit(decide_admission(self.record, self.policy, subject_id=call.invocation_id, kind="model",
                                         grant_id=call.grant_id, subject=call.model, bound_usd=call.cost_bound_usd,
                                         intent=ctx, finalization=finalization))
        self._recheck(call.invocation_id, epoch, attempt_id=call.invocation_id)
        reply = transport(ctx)
        self.on_position("after:dispatch", None)
        if not isinstance(reply, ModelReply):
            reply = ModelReply(status="error", reply=f"transport returned {type(reply).__name__}, not a ModelReply")
        replied = model_evidence(call.invocation_id, reply)
        settlement = model_usage_settlement(call.invocation_id, reply, replied)
        self.append(replied, *([settlement] if settlement is not None else []))   # one batch, as for a tool
        return reply
