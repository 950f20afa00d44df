"""The saga's thin runner: applies :mod:`kernel_lib.recovery.saga`'s decisions through the dispatch gate.

Failure Recovery, "Saga compensation stacks" (the unwind listing) and "Terminal escalation" (the
ACB-freeze listing). Every forward step and every compensator is a tool operation of the
trajectory, run through :class:`~kernel_lib.gate.dispatch.DispatchGate` (intent durable before
dispatch, evidence after, in doubt on a crash). The runner adds the saga's records and decides
nothing itself: the state machine and the next unwind action come from the fold.

Barriers (the durable acknowledgments a step waits for; Napkin Math 0.1 counts them as fsyncs):

* forward step: ``PENDING`` rides the admission batch's barrier (Authorized, BudgetReserved,
  ToolIntent: one barrier); the evidence of a service with a status lookup rides the next
  barrier, which is ``COMMITTED`` with C_i bound — durable **before control returns to the
  model**. Two barriers per forward step.
* compensator pop: ``COMPENSATING`` rides the compensator's admission barrier; its evidence and
  ``COMPENSATED`` ride the next pop's barrier (or the final ``ABORT_CONSISTENT``), which is safe
  because a lost ``COMPENSATED`` leaves C_i's attempt in doubt and the service's status lookup (or
  κ_i^c) settles it without running C_i again. One barrier per pop, one to end the unwind.

The pivot (Failure Recovery, "The pivot action boundary"): before a tier III step's intent the
runner applies :func:`~kernel_lib.recovery.saga.decide_crossing`: it appends ``PivotCrossed``
with its own barrier (the synchronous WAL write that moves the saga PREPARING -> COMMITTED and
retires Σ), then the step's records as usual. :meth:`SagaRunner.verify_pivot` records the
pre-pivot gate's verdict (``PivotVerified``) for the next step; with ``require_verification`` a
crossing needs a passing one. :meth:`SagaRunner.stage` writes an irreversible payload into
escrow (``OutboxChanged`` STAGED, durable, not sent); the crossing names the staged entries and
:meth:`SagaRunner.flush_outbox` sends them after the pivot under the idempotency key fixed at
staging (retried forward; a re-send after a crash is deduplicated by the service).
:meth:`SagaRunner.unwind` after the crossing runs no compensator: it escalates (the ACB freeze)
and raises :class:`~kernel_lib.errors.PivotCrossedError`.

Crash recovery is re-running the same saga script in a new process over the same log
(:meth:`SagaRunner.step` answers a committed step from the log, settles an in-doubt one by the
service's status lookup, and refuses a script that diverged from the log), then
:meth:`SagaRunner.unwind`, which continues where the log says the unwind stopped.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from kernel_lib.core.events import (
    FROZEN, Event, OutboxChanged, PivotCrossed, PivotVerified, SagaChanged, SagaStepChanged, ToolIntent,
    TrajectoryFrozen,
)
from kernel_lib.core.proposals import REPEAT_SAFE_CONTRACTS, ToolProposal, ToolReply, idempotency_key
from kernel_lib.errors import (
    AdmissionDenied, CompensatorBindError, DispatchWithheld, OutboxError, PivotCrossedError, PivotRefusedError,
    RecoveryError, SagaPanicError, SagaTransitionError, StepFailedError, TrajectoryFrozenRefusal,
)
from kernel_lib.gate.dispatch import DispatchGate
from kernel_lib.recovery.contracts import REPAIRABLE_CONTRACTS, ToolRegistry, bind_compensator_arguments
from kernel_lib.recovery.saga import (
    OutboxEntry, SagaRecord, SagaStep, check_transition, compensation_operation_id, decide_crossing, fold_saga,
    next_unwind, outbox_operation_id, step_operation_id,
)

# StepFailedError: from errors
__all__ = ["Endpoints", "ForwardingEndpoints", "RetryPolicy", "StepFailedError", "SagaRunner"]


class Endpoints(Protocol):
    """How the runner reaches the tool services (a fleet of twins or of live processes)."""

    def send(self, intent: ToolIntent) -> ToolReply:
        """Dispatch one attempt; raise ``TimeoutError``/``OSError`` when no answer came."""

    def lookup(self, tool: str, operation_id: str) -> dict[str, Any]:
        """Status query by operation id: ``{"status": completed|failed|unknown, "http_status", "body"}``."""

    def live_resources(self) -> list[dict[str, Any]]:
        """Every resource the services still hold: ``{service, resource_id, kind, state, operation_id}``."""

    def revoke(self, trajectory_id: str) -> list[str]:
        """Revoke every capability lease of the trajectory at the broker; returns the lease ids."""


class ForwardingEndpoints:
    """:class:`Endpoints` that pass every call to ``inner`` (a fleet of twins or of live services,
    or another wrapper); a wrapper that changes one path (faults injected on ``send``, probes timed
    or refused on ``lookup``, breakers in front) subclasses this and overrides that method only.
    ``call`` is the raw request that reads such as the pre-pivot gate's checks make."""

    def __init__(self, inner: Any):
        self.inner = inner

    def send(self, intent: ToolIntent) -> ToolReply:
        return self.inner.send(intent)

    def lookup(self, tool: str, operation_id: str) -> dict[str, Any]:
        return self.inner.lookup(tool, operation_id)

    def call(self, action: str, arguments: dict[str, Any], operation_id: str,
             idempotency_key: str | None) -> tuple[int, dict[str, Any]]:
        return self.inner.call(action, arguments, operation_id, idempotency_key)

    def live_resources(self) -> list[dict[str, Any]]:
        return self.inner.live_resources()

    def revoke(self, trajectory_id: str) -> list[str]:
        return self.inner.revoke(trajectory_id)


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff for retryable failures (429, 503, a timeout the lookup shows never arrived):
    full jitter, ``delay = U(0, min(cap_s, base_s * 2**n))``, seeded; at most ``max_attempts``
    attempts per operation."""

    max_attempts: int = 5
    base_s: float = 0.05
    cap_s: float = 2.0
    seed: int = 0

    def delay_s(self, attempt: int, rng: random.Random) -> float:
        return rng.uniform(0.0, min(self.cap_s, self.base_s * 2 ** max(0, attempt - 1)))


_PLAIN_KEYS = ("status", "http_status", "duplicate")


def _payload_sha256(tool: str, arguments: dict[str, Any]) -> str:
    """SHA-256 hex of the canonical JSON of ``[tool, arguments]`` (an escrow entry's payload digest)."""
    blob = json.dumps([tool, arguments], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _output(outcome: dict[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (outcome or {}).items() if k not in _PLAIN_KEYS}


class SagaRunner:
    """Runs one trajectory saga through ``gate`` (see the module docstring).

    Args:
        gate: the trajectory's dispatch gate (its record is the fold of the log).
        registry: the declared tools (:class:`ToolRegistry`, checked).
        endpoints: how the services are reached (:class:`Endpoints`).
        saga_id: the saga's id (step ids are ``<saga_id>.T<i>``, compensators ``<step>.C``).
        grant_id: the capability grant every step is admitted under.
        retry: backoff for retryable failures; ``sleep`` waits (a virtual clock's ``advance`` in
            simulation, ``time.sleep`` live).
        on_incident: the out-of-band channel a freeze emits its incident record on (a queue's
            ``put``, a file writer); never the model's context.
        require_verification: a tier III step is crossed only on a passing verdict of the
            pre-pivot gate recorded for it (:meth:`verify_pivot`) after the last preparation
            record; False (the default, as before the gate existed): a crossing without a verdict
            is recorded with ``verified_sequence`` None, while a failed verdict still refuses.
    """

    def __init__(self, gate: DispatchGate, registry: ToolRegistry, endpoints: Endpoints, *, saga_id: str,
                 grant_id: str, retry: RetryPolicy = RetryPolicy(), sleep: Callable[[float], Any] = lambda s: None,
                 on_incident: Callable[[dict[str, Any]], Any] = lambda incident: None,
                 require_verification: bool = False):
        self.gate = gate
        self.registry = registry.check()
        self.endpoints = endpoints
        self.saga_id = saga_id
        self.grant_id = grant_id
        self.retry = retry
        self.sleep = sleep
        self.on_incident = on_incident
        self.require_verification = bool(require_verification)
        self._rng = random.Random(retry.seed)
        self._next_index = 1
        self.saga = fold_saga(gate.log.events(), saga_id)
        # the events the gate appends, as the store acknowledged them (the gate reports each to its
        # on_position hook after folding it): _refold folds these instead of reading them back
        self._appended: list[Event] = []
        outer = gate.on_position

        def seen(name: str, ev: Event | None) -> None:
            if ev is not None:
                self._appended.append(ev)
            outer(name, ev)

        gate.on_position = seen

    # --- the fold ------------------------------------------------------------------------------------
    def _refold(self) -> SagaRecord:
        """Fold what was appended since the saga record's position (the log is the only source).

        The events come from the gate's appends when they are exactly the log's next positions
        (the events the store acknowledged there); otherwise they are read back from the store.
        """
        head = self.gate.log.head
        last = self.saga.last_sequence_number
        if last < head:
            tail = [ev for ev in self._appended if ev.sequence_number > last]
            if len(tail) == head - last and all(ev.sequence_number == last + 1 + i for i, ev in enumerate(tail)):
                fold_saga(tail, self.saga_id, into=self.saga)
            else:
                fold_saga(self.gate.log.events(last + 1, head), self.saga_id, into=self.saga)
        self._appended.clear()
        return self.saga

    @property
    def trajectory_id(self) -> str:
        return self.gate.log.trajectory_id

    @property
    def next_step_id(self) -> str:
        """The operation id the next :meth:`step` call runs as (``<saga_id>.T<i>``): a driver on
        top of the runner (the forward-repair loop) reads it to find that step in the log."""
        return step_operation_id(self.saga_id, self._next_index)

    def _check_not_frozen(self) -> None:
        if self.gate.record.control_state == FROZEN:
            inc = next((r for r in reversed(self.gate.record.recovery_records)
                        if r.get("event_type") == "TrajectoryFrozen"), {})
            self.endpoints.revoke(self.trajectory_id)   # idempotent: a freeze that died before revoking finishes
            raise TrajectoryFrozenRefusal(
                f"trajectory {self.trajectory_id} is FROZEN ({inc.get('failure_mode')}, incident "
                f"{inc.get('incident_id')}); it waits for an operator and does nothing",
                incident_id=inc.get("incident_id"))

    def _append_step(self, step: SagaStep, state: str, *, deferred: bool, **fields: Any) -> None:
        """Append ``step``'s transition to ``state`` (table 2 is checked before anything is appended)."""
        check_transition(step.step_id, step.state, state)
        self.gate.append(SagaStepChanged(saga_id=self.saga_id, step_id=step.step_id, step_index=step.index,
                                         state=state, tool=step.tool, tier=step.tier, **fields), deferred=deferred)
        self._refold()

    def _append_saga(self, state: str, *, deferred: bool, **fields: Any) -> None:
        if self.saga.state == state:
            return
        self.gate.append(SagaChanged(saga_id=self.saga_id, state=state, **fields), deferred=deferred)
        self._refold()

    # --- forward steps -------------------------------------------------------------------------------
    def step(self, tool: str, arguments: dict[str, Any], *, cost_bound_usd: float | None = None) -> dict[str, Any]:
        """Run forward step T_i (the script's next step) and return its output.

        Answered from the log when the step already committed (a re-run after a crash); an
        in-doubt step is settled by the service's status lookup first. C_i is bound from the
        output and recorded with COMMITTED before this returns.

        Raises:
            StepFailedError: the step failed (FAILED is recorded; the caller unwinds), or the saga is
                already unwinding or ended.
            SagaTransitionError: the script diverged from the log (another tool at this step).
            TrajectoryFrozenRefusal: the trajectory is frozen.
            ToolContractError: ``tool`` is not registered, or is a compensator.
        """
        self._check_not_frozen()
        contract = self.registry.contract(tool)
        if contract.is_compensator:
            raise SagaTransitionError(f"{tool} is a compensator; the saga runs compensators itself, a step never "
                                      "proposes one")
        index = self._next_index
        self._next_index += 1
        step_id = step_operation_id(self.saga_id, index)
        saga = self.saga
        if saga.state is None:
            self._append_saga("RUNNING", deferred=True)
        elif saga.state not in ("RUNNING", "COMMITTED"):
            raise StepFailedError(f"saga {self.saga_id} is {saga.state}; no forward step runs", step_id=step_id)
        step = self.saga.steps.get(step_id)
        if step is not None and (step.tool, step.index) != (tool, index):
            raise SagaTransitionError(f"the saga script diverged from the log: step {index} is {step.tool} in the "
                                      f"log, {tool} in this run", from_state=step.state)
        crossing = self.saga.crossing
        if crossing is not None and crossing["pivot_index"] == index and crossing["pivot_tool"] != tool:
            raise SagaTransitionError(f"the saga script diverged from the log: the pivot crossed at step {index} is "
                                      f"{crossing['pivot_tool']}, {tool} in this run", from_state=self.saga.state)
        if step is not None and step.state == "COMMITTED":
            return _output(self.gate.record.operations[step_id].outcome)
        if contract.tier == "III" and (step is None or step.state == "PENDING"):
            self._cross(step_id, index, tool, contract)
        if step is not None and step.state in ("FAILED", "ABORTED", "HALTED", "COMPENSATING", "COMPENSATED", "PANIC"):
            raise StepFailedError(f"step {index} ({tool}) is {step.state}", step_id=step_id)
        if step is None:
            check_transition(step_id, None, "PENDING")
            self.gate.append(SagaStepChanged(saga_id=self.saga_id, step_id=step_id, step_index=index, state="PENDING",
                                             tool=tool, tier=contract.tier,
                                             idempotency_key=idempotency_key(self.trajectory_id, step_id)),
                             deferred=True)
            self._refold()
        bound = contract.cost_bound_usd if cost_bound_usd is None else cost_bound_usd
        return self._drive_forward(step_id, index, tool, contract, dict(arguments), bound)

    # --- the pivot: verification, crossing, escrow and outbox ----------------------------------------------

    def verify_pivot(self, verdict: Any, *, step_id: str | None = None) -> dict[str, Any]:
        """Record the pre-pivot gate's verdict for the pivot step ``step_id`` (default: the
        script's next step) as ``PivotVerified``, with a barrier, and return the record.

        ``verdict``: a :class:`~kernel_lib.recovery.verification.GateVerdict` (anything with
        ``to_record()`` returning ``{passed, checks, failed_checks, model_claim}``). When the
        crossing for that step is already in the log (a re-run), nothing is appended.

        Raises:
            PivotRefusedError: the verdict failed (it is recorded first; ``failed_checks`` names
                the checks): the saga stays in its preparation phase and can still be unwound.
            TrajectoryFrozenRefusal: the trajectory is frozen.
        """
        self._check_not_frozen()
        sid = step_id or self.next_step_id
        crossing = self.saga.crossing
        if crossing is not None and crossing["pivot_step_id"] == sid:
            return dict(self.saga.latest_verification(sid) or {"pivot_step_id": sid, "passed": True,
                                                                "already_crossed": True})
        if crossing is not None:
            raise PivotRefusedError(f"saga {self.saga_id} already crossed its pivot {crossing['pivot_step_id']}; "
                                    f"there is no second crossing to verify for {sid}", step_id=sid)
        rec = dict(verdict.to_record())
        if self.saga.state is None:
            self._append_saga("RUNNING", deferred=True)
        self.gate.append(PivotVerified(saga_id=self.saga_id, pivot_step_id=sid, passed=bool(rec["passed"]),
                                       checks=rec.get("checks", []), failed_checks=rec.get("failed_checks", []),
                                       model_claim=rec.get("model_claim")), deferred=False)
        self._refold()
        out = dict(self.saga.latest_verification(sid) or {})
        if not out.get("passed"):
            raise PivotRefusedError(f"the pre-pivot gate refused {sid}: failed "
                                    f"{', '.join(out.get('failed_checks') or []) or 'checks'} (recorded at "
                                    f"#{out.get('sequence_number')}); the saga is still preparing and can be unwound",
                                    step_id=sid, failed_checks=out.get("failed_checks"))
        return out

    def _cross(self, step_id: str, index: int, tool: str, contract: Any) -> None:
        """Before tier III step ``step_id``'s intent: the crossing (a barrier) when the fold says so."""
        d = decide_crossing(self.saga, step_id, repeat_safe=contract.repeat_contract in REPEAT_SAFE_CONTRACTS,
                            require_verification=self.require_verification)
        if d.kind in ("crossed", "finalization"):
            return
        if d.kind == "refuse":
            self._next_index -= 1   # the step did not happen: the script may verify and call it again
            raise PivotRefusedError(f"saga {self.saga_id}: {d.reason}", step_id=step_id,
                                    failed_checks=list(d.failed_checks))
        self.gate.append(PivotCrossed(saga_id=self.saga_id, pivot_step_id=step_id, pivot_index=index,
                                      pivot_tool=tool, verified_sequence=d.verified_sequence,
                                      retired_compensators=list(d.retired), outbox=list(d.outbox),
                                      reason=d.reason[:500]), deferred=False)
        self._refold()

    def stage(self, entry_id: str, tool: str, arguments: dict[str, Any]) -> OutboxEntry:
        """Stage an irreversible payload in local escrow (Example 0.1's T5,stage): ``OutboxChanged``
        STAGED, durable (a barrier), nothing sent. The crossing's atomic outbox releases it with
        the pivot (:meth:`flush_outbox`). Staging the same entry again (a re-run) is a no-op.

        Raises:
            OutboxError: the pivot is already crossed, ``tool`` is not a registered forward tool,
                its repeat contract does not make a re-send safe (the flush must be retriable and
                idempotent), or ``entry_id`` was staged with another payload.
            TrajectoryFrozenRefusal: the trajectory is frozen.
        """
        self._check_not_frozen()
        if not isinstance(entry_id, str) or not entry_id or not isinstance(arguments, dict):
            raise OutboxError(f"an escrow entry is a non-empty id and a dict of arguments, got {entry_id!r}",
                              entry_id=entry_id if isinstance(entry_id, str) else None)
        try:
            contract = self.registry.contract(tool)
        except RecoveryError as exc:
            raise OutboxError(f"escrow entry {entry_id}: {exc}", entry_id=entry_id) from None
        if contract.is_compensator or contract.repeat_contract not in REPEAT_SAFE_CONTRACTS:
            raise OutboxError(f"escrow entry {entry_id}: {tool} ({contract.repeat_contract}) cannot be flushed by an "
                              "outbox: the flush runs after the pivot and must be safe to send again",
                              entry_id=entry_id)
        digest = _payload_sha256(tool, arguments)
        entry = self.saga.outbox.get(entry_id)
        if entry is not None:
            if entry.payload_sha256 != digest:
                raise OutboxError(f"escrow entry {entry_id} is already staged with another payload", entry_id=entry_id)
            return entry
        if self.saga.phase == "COMMITTED":
            raise OutboxError(f"escrow entry {entry_id}: the pivot is crossed; escrow is filled in the preparation "
                              "phase only", entry_id=entry_id)
        if self.saga.state is None:
            self._append_saga("RUNNING", deferred=True)
        elif self.saga.state != "RUNNING":
            raise OutboxError(f"escrow entry {entry_id}: the saga is {self.saga.state}", entry_id=entry_id)
        op_id = outbox_operation_id(self.saga_id, entry_id)
        self.gate.append(OutboxChanged(saga_id=self.saga_id, entry_id=entry_id, state="STAGED", tool=tool,
                                       arguments=dict(arguments), operation_id=op_id,
                                       idempotency_key=idempotency_key(self.trajectory_id, op_id),
                                       payload_sha256=digest), deferred=False)
        self._refold()
        return self.saga.outbox[entry_id]

    def flush_outbox(self) -> dict[str, dict[str, Any]]:
        """Send every escrow entry the crossing's outbox names and that is not FLUSHED yet, each
        under the idempotency key fixed at staging; record FLUSHED on the service's answer.
        Part of the finalization phase: retryable refusals are retried (backoff), an attempt in
        doubt is settled by the service's status lookup or re-sent under κ. Returns
        ``{entry_id: output}`` (the service's answer, for entries flushed before too).

        Raises:
            OutboxError: the pivot step has not committed yet.
            SagaPanicError: an entry cannot be sent (a final refusal, attempts exhausted): the
                trajectory is escalated (POST_PIVOT_STALLED) — the pivot is not undone.
            TrajectoryFrozenRefusal: the trajectory is frozen.
        """
        self._check_not_frozen()
        crossing = self.saga.crossing
        pivot = self.saga.steps.get(crossing["pivot_step_id"]) if crossing else None
        if pivot is None or pivot.state != "COMMITTED":
            raise OutboxError(f"saga {self.saga_id}: the outbox is flushed after the pivot commits "
                              f"(pivot: {pivot.state if pivot else 'not crossed'})")
        out: dict[str, dict[str, Any]] = {}
        for entry_id in crossing["outbox"]:
            entry = self.saga.outbox[entry_id]
            if entry.state != "FLUSHED":
                self._drive_flush(entry)
            out[entry_id] = _output(self.gate.record.operations[entry.operation_id].outcome)
        return out

    def _drive_flush(self, entry: OutboxEntry) -> None:
        contract = self.registry.contract(entry.tool)
        op_id = entry.operation_id
        while True:
            op = self.gate.record.operations.get(op_id)
            if op is None or not any(a.intent_sequence is not None for a in op.attempts.values()):
                why = self._dispatch(op_id, entry.tool, dict(entry.arguments), 0.0)
                if why is not None:
                    return self._panic(None, "POST_PIVOT_STALLED", {"error": f"outbox {entry.entry_id}: {why}"},
                                       failing_tool=entry.tool)
                continue
            if op.status == "established":
                outcome = op.outcome or {}
                if outcome.get("status") == "completed":
                    self.gate.append(OutboxChanged(saga_id=self.saga_id, entry_id=entry.entry_id, state="FLUSHED",
                                                   tool=entry.tool, arguments=entry.arguments, operation_id=op_id,
                                                   idempotency_key=entry.idempotency_key,
                                                   payload_sha256=entry.payload_sha256), deferred=False)
                    self._refold()
                    return None
                return self._panic(None, "POST_PIVOT_STALLED",
                                   {"error": f"outbox {entry.entry_id}: {_output(outcome).get('error', 'refused')}"},
                                   failing_tool=entry.tool)
            if op.status == "in_doubt" and contract.status_lookup:
                if self._settle_by_lookup(op_id, entry.tool) in ("completed", "failed"):
                    continue
            if self._attempts(op_id) >= self.retry.max_attempts:
                return self._panic(None, "POST_PIVOT_STALLED",
                                   {"error": f"outbox {entry.entry_id} not sent after {self._attempts(op_id)} "
                                             "attempts"}, failing_tool=entry.tool)
            self._backoff(op_id)
            why = self._dispatch(op_id, entry.tool, dict(entry.arguments), 0.0)   # re-sent under κ: deduplicated
            if why is not None:
                return self._panic(None, "POST_PIVOT_STALLED", {"error": f"outbox {entry.entry_id}: {why}"},
                                   failing_tool=entry.tool)

    def _proposal(self, op_id: str, tool: str, arguments: dict[str, Any], bound: float) -> ToolProposal:
        c = self.registry.contract(tool)
        op = self.gate.record.operations.get(op_id)
        n = len(op.attempts) + 1 if op is not None else 1
        return ToolProposal(op_id, f"a{n}", tool, arguments, self.grant_id, bound, repeat_contract=c.repeat_contract,
                            status_lookup=c.status_lookup)

    def _dispatch(self, op_id: str, tool: str, arguments: dict[str, Any], bound: float) -> str | None:
        """One attempt through the gate; returns None, or the reason it never left."""
        try:
            self.gate.run_tool(self._proposal(op_id, tool, arguments, bound), self.endpoints.send)
        except AdmissionDenied as exc:
            return f"admission denied: {exc}"
        except DispatchWithheld as exc:
            return f"withheld at the dispatch-time recheck: {exc}"
        finally:
            self._refold()
        return None

    def _settle_by_lookup(self, op_id: str, tool: str) -> str:
        """Ask the service about an in-doubt attempt; record what it says. Returns the status
        (``completed``/``failed``/``unknown``/``unreachable``)."""
        op = self.gate.record.operations[op_id]
        attempt = op.current_attempt_id
        try:
            answer = self.endpoints.lookup(tool, op_id)
        except OSError:
            return "unreachable"
        status = answer.get("status")
        if status in ("completed", "failed"):
            body = dict(answer.get("body") or {})
            reply = ToolReply(status, outcome={"http_status": answer.get("http_status"), **body},
                              observation_complete=True)
            self.gate.record_evidence(op_id, attempt, reply, source="reconciliation")
            self._refold()
        return status or "unknown"

    def _last_outcome(self, op_id: str) -> dict[str, Any]:
        """The outcome of the operation's last recorded result (a retryable refusal's
        ``retry_after_s`` lives there while the operation is still open)."""
        op = self.gate.record.operations.get(op_id)
        att = op.attempts.get(op.current_attempt_id) if op is not None else None
        seq = att.last_result_sequence if att is not None else None
        if seq is None:
            return {}
        for ev in self.gate.log.events(seq, seq):
            return dict(getattr(ev.payload, "outcome", None) or {})
        return {}

    def _backoff(self, op_id: str) -> None:
        wait = self._last_outcome(op_id).get("retry_after_s")
        self.sleep(float(wait) if isinstance(wait, (int, float)) and 0 <= wait <= 3600 else
                   self.retry.delay_s(self._attempts(op_id), self._rng))

    def _attempts(self, op_id: str) -> int:
        op = self.gate.record.operations.get(op_id)
        return len(op.attempts) if op is not None else 0

    def _drive_forward(self, step_id: str, index: int, tool: str, contract: Any, arguments: dict[str, Any],
                       bound: float) -> dict[str, Any]:
        while True:
            op = self.gate.record.operations.get(step_id)
            if op is None or not any(a.intent_sequence is not None for a in op.attempts.values()):
                why = self._dispatch(step_id, tool, arguments, bound)
                if why is not None:
                    return self._forward_failed(step_id, index, tool, contract, {"error": why, "never_sent": True})
                continue
            if op.status == "in_doubt":
                status = self._settle_by_lookup(step_id, tool) if contract.status_lookup else "no_lookup"
                if status in ("completed", "failed"):
                    continue
                safe = status == "unknown" or contract.repeat_contract in REPAIRABLE_CONTRACTS
                if safe and self._attempts(step_id) < self.retry.max_attempts:
                    self._backoff(step_id)
                    why = self._dispatch(step_id, tool, arguments, bound)
                    if why is not None:
                        return self._forward_failed(step_id, index, tool, contract, {"error": why})
                    continue
                return self._forward_failed(step_id, index, tool, contract, {
                    "error": f"in doubt after {self._attempts(step_id)} attempts ({status})", "in_doubt": True})
            if op.status == "withheld":
                return self._forward_failed(step_id, index, tool, contract, {"error": "withheld", "never_sent": True})
            outcome = op.outcome or {}
            if outcome.get("status") == "completed":
                output = _output(outcome)
                fields: dict[str, Any] = {}
                step = self.saga.steps[step_id]
                if contract.compensator is not None:
                    try:
                        args = bind_compensator_arguments(contract.compensator, arguments, output)
                    except CompensatorBindError as exc:
                        # an effect exists that no compensator can be bound for: it is never reported
                        # committed; FAILED, then the trajectory is frozen with the effect as residue
                        self._append_step(step, "FAILED", deferred=False, reason=str(exc)[:500])
                        incident = self.freeze("COMPENSATION_CORRUPTED", error={"error": str(exc)}, failing_tool=tool,
                                               residue=self._residue())
                        raise SagaPanicError(f"saga {self.saga_id}: {exc}; frozen as incident "
                                             f"{incident['incident_id']}", residue=incident["residue"],
                                             incident=incident) from exc
                    fields["compensator"] = self._bound_compensator(step_id, contract.compensator.tool, args)
                self._append_step(step, "COMMITTED", deferred=False, **fields)
                return output
            # failed (the service's final answer; a retryable refusal leaves the operation open)
            return self._forward_failed(step_id, index, tool, contract, _output(outcome))

    def _bound_compensator(self, step_id: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        c = self.registry.contract(tool)
        op_id = compensation_operation_id(step_id)
        return {"tool": tool, "arguments": arguments, "operation_id": op_id,
                "idempotency_key": idempotency_key(self.trajectory_id, op_id), "repeat_contract": c.repeat_contract,
                "status_lookup": c.status_lookup}

    def _forward_failed(self, step_id: str, index: int, tool: str, contract: Any, error: dict[str, Any]) -> Any:
        step = self.saga.steps[step_id]
        fields: dict[str, Any] = {"reason": str(error.get("error", "failed"))[:500]}
        if error.get("never_sent") and step.state == "PENDING":
            self._append_step(step, "ABORTED", deferred=False, **fields)
            raise StepFailedError(f"step {index} ({tool}) never left: {fields['reason']}", step_id=step_id, error=error)
        if error.get("partial") and contract.compensator is not None and isinstance(error.get("output"), dict):
            try:
                args = bind_compensator_arguments(contract.compensator, {}, error["output"])
                fields["compensator"] = self._bound_compensator(step_id, contract.compensator.tool, args)
            except RecoveryError:
                pass
        # the crossing's own pivot failing is not "past the pivot": it never returned (saga.pivot_refused)
        is_pivot = (self.saga.crossing or {}).get("pivot_step_id") == step_id
        state = "HALTED" if self.saga.phase == "COMMITTED" and "compensator" not in fields and not is_pivot \
            else "FAILED"
        self._append_step(step, "FAILED", deferred=False, **fields)
        if state == "HALTED":
            self._append_step(self.saga.steps[step_id], "HALTED", deferred=False, reason="past the pivot: no rollback")
        raise StepFailedError(f"step {index} ({tool}) failed: {fields['reason']}", step_id=step_id, error=error)

    def complete(self) -> None:
        """Record the saga COMPLETED (a barrier): every step committed.

        Raises:
            OutboxError: the crossing's outbox holds an entry not flushed yet (call
                :meth:`flush_outbox` first: the outbox goes with the pivot).
        """
        self._check_not_frozen()
        crossing = self.saga.crossing
        pending = [e for e in (crossing or {}).get("outbox", []) if self.saga.outbox[e].state != "FLUSHED"]
        if pending:
            raise OutboxError(f"saga {self.saga_id}: escrow entries {', '.join(pending)} are not flushed yet",
                              entry_id=pending[0])
        self._append_saga("COMPLETED", deferred=False)

    # --- the unwind ----------------------------------------------------------------------------------
    def unwind(self, reason: str = "") -> str:
        """Pop Σ until it is empty (the unwind listing), from wherever the log says it stopped.

        Returns the saga's final state, ``ABORT_CONSISTENT``. After the pivot a failure is not
        unwound: the trajectory is frozen (POST_PIVOT_STALLED) and SagaPanicError is raised.
        A forward step that failed in doubt is asked about first: completed after all, its C_i
        is bound and it joins Σ; still unknowable (service unreachable), the unwind pops the rest
        of Σ and then panics, listing it. A panic a crash cut short before its freeze is finished
        (no compensator runs again). When the services cannot be read, the residue is what the
        log says may still exist, marked unconfirmed.

        Raises:
            SagaPanicError: a compensator failed unrecoverably (PANIC recorded, trajectory frozen,
                residue read from the services), or the failure is past the pivot.
            TrajectoryFrozenRefusal: the trajectory was already frozen.
        """
        self._check_not_frozen()
        saga = self._refold()
        if saga.state in ("ABORT_CONSISTENT",):
            return saga.state
        panicked = next((s for s in saga.steps.values() if s.state == "PANIC"), None)
        if panicked is not None or saga.state == "PANIC":
            # a crash cut a panic short before its freeze was durable: finish it (no compensator runs again)
            mode = "COMPENSATION_CORRUPTED" if panicked is not None or saga.pivot_committed is None \
                else "POST_PIVOT_STALLED"
            return self._panic(None, mode, {"error": (panicked.reason if panicked else saga.reason) or "panic"},
                               failing_tool=(panicked.compensator or {}).get("tool") if panicked else None)
        failed = next((s.step_id for s in sorted(saga.steps.values(), key=lambda s: -s.index)
                       if s.state in ("FAILED", "HALTED", "ABORTED")), None)
        if saga.phase == "COMMITTED":   # past the pivot: no compensator runs; escalate instead
            pivot = (saga.crossing or {}).get("pivot_step_id") or saga.pivot_committed.step_id
            try:
                return self._panic(None, "POST_PIVOT_STALLED", {"error": reason or "failure past the pivot"},
                                   failing_tool=saga.steps[failed].tool if failed else None)
            except SagaPanicError as exc:
                raise PivotCrossedError(f"saga {self.saga_id} crossed its pivot {pivot}: the unwind is refused (the "
                                        f"compensation log is retired); escalated instead: {exc}",
                                        pivot_step_id=pivot, residue=exc.residue, incident=exc.incident) from None
        if saga.state is None:   # an unwind before the first step: the saga still starts, then ends
            self._append_saga("RUNNING", deferred=True)
        if self.saga.state != "COMPENSATING":
            self._append_saga("COMPENSATING", deferred=True, failed_step_id=failed, reason=reason[:500])
        for entry in list(self.saga.outbox.values()):   # escrow is invertible: drop what was staged, unsent
            if entry.state == "STAGED":
                self.gate.append(OutboxChanged(saga_id=self.saga_id, entry_id=entry.entry_id, state="DROPPED",
                                               tool=entry.tool, arguments=entry.arguments,
                                               operation_id=entry.operation_id,
                                               idempotency_key=entry.idempotency_key,
                                               payload_sha256=entry.payload_sha256,
                                               reason=(reason or "unwind")[:500]), deferred=True)
                self._refold()
        doubtful = self._settle_failed_in_doubt()
        while True:
            action = next_unwind(self.saga, self.gate.record)
            step = action.step
            if action.kind == "done":
                if doubtful:
                    names = ", ".join(f"T{s.index} ({s.tool})" for s in doubtful)
                    return self._panic(None, "COMPENSATION_CORRUPTED",
                                       {"error": f"{names} failed in doubt and its service cannot say whether it "
                                                 "applied: the unwind cannot show the saga undone"},
                                       failing_tool=doubtful[0].tool)
                self._append_saga("ABORT_CONSISTENT", deferred=False)
                return "ABORT_CONSISTENT"
            comp = step.compensator
            if action.kind == "begin":
                self._append_step(step, "COMPENSATING", deferred=True)
            elif action.kind in ("dispatch", "resend"):
                if self._attempts(comp["operation_id"]) >= self.retry.max_attempts:
                    return self._panic(step, "COMPENSATION_CORRUPTED",
                                       {"error": f"C{step.index} not settled after {self.retry.max_attempts} attempts"})
                if action.kind == "resend" or self._attempts(comp["operation_id"]):
                    self._backoff(comp["operation_id"])
                why = self._dispatch(comp["operation_id"], comp["tool"], dict(comp["arguments"]), 0.0)
                if why is not None:
                    return self._panic(step, "COMPENSATION_CORRUPTED", {"error": why})
            elif action.kind == "reconcile":
                status = self._settle_by_lookup(comp["operation_id"], comp["tool"])
                if status in ("unknown", "unreachable"):   # never applied, or not answering: resend under κ^c
                    if self._attempts(comp["operation_id"]) >= self.retry.max_attempts:
                        return self._panic(step, "COMPENSATION_CORRUPTED", {
                            "error": f"C{step.index} not settled after {self._attempts(comp['operation_id'])} "
                                     f"attempts (last status lookup: {status})"})
                    self._backoff(comp["operation_id"])
                    why = self._dispatch(comp["operation_id"], comp["tool"], dict(comp["arguments"]), 0.0)
                    if why is not None:
                        return self._panic(step, "COMPENSATION_CORRUPTED", {"error": why})
            elif action.kind == "record_compensated":
                safe = comp.get("status_lookup") or comp.get("repeat_contract") in REPAIRABLE_CONTRACTS
                self._append_step(step, "COMPENSATED", deferred=bool(safe))
            elif action.kind == "failed":   # the service's final no: unrecoverable
                outcome = self.gate.record.operations[comp["operation_id"]].outcome or {}
                return self._panic(step, "COMPENSATION_CORRUPTED", _output(outcome))
            else:   # escalate
                return self._panic(step, "COMPENSATION_CORRUPTED", {"error": action.reason})

    def compensate_only(self, reason: str = "") -> str:
        """Give up on forward progress without leaking: run no forward step, settle the steps a
        dead owner left executing, then :meth:`unwind` (Failure Recovery, "Saga compensation
        stacks": a runtime that stops going forward compensates what the log shows done, and
        records the residue it cannot undo instead of walking away from it).

        A step left ``EXECUTING`` (its owner died between the intent and ``COMMITTED``) is asked
        about with the service's status lookup when its attempt is in doubt (never dispatched
        again). Completed: C_i is bound from the answer and the step recorded ``COMMITTED``, so it
        joins Σ and is compensated. Failed or never received (``unknown``): ``FAILED``, no
        effect. Still unknowable (no lookup, service unreachable): ``FAILED`` in doubt, which
        :meth:`unwind` asks about again and, failing that, ends in PANIC listing as residue.

        Returns the saga's final state: ``ABORT_CONSISTENT``, or ``COMPLETED`` when the log
        already shows the saga completed (nothing is undone then).

        Raises: what :meth:`unwind` raises (SagaPanicError, PivotCrossedError after the pivot,
        TrajectoryFrozenRefusal); SagaPanicError when a completed step's compensator cannot be
        bound (the trajectory is frozen with the effect as residue).
        """
        self._check_not_frozen()
        saga = self._refold()
        if saga.state in ("COMPLETED", "ABORT_CONSISTENT"):
            return saga.state
        for step in sorted(saga.steps.values(), key=lambda s: s.index):
            if step.state != "EXECUTING":
                continue
            contract = self.registry.contract(step.tool)
            op = self.gate.record.operations.get(step.step_id)
            status = op.status if op is not None else "none"
            if status == "in_doubt" and contract.status_lookup:
                status = self._settle_by_lookup(step.step_id, step.tool)
                op = self.gate.record.operations[step.step_id]
            outcome = (op.outcome or {}) if op is not None and op.status == "established" else {}
            if outcome.get("status") == "completed":
                fields: dict[str, Any] = {}
                if contract.compensator is not None:
                    try:
                        args = bind_compensator_arguments(contract.compensator, dict(op.arguments), _output(outcome))
                    except CompensatorBindError as exc:
                        self._append_step(self.saga.steps[step.step_id], "FAILED", deferred=False,
                                          reason=str(exc)[:500])
                        incident = self.freeze("COMPENSATION_CORRUPTED", error={"error": str(exc)},
                                               failing_tool=step.tool, residue=self._residue())
                        raise SagaPanicError(f"saga {self.saga_id}: {exc}; frozen as incident "
                                             f"{incident['incident_id']}", residue=incident["residue"],
                                             incident=incident) from exc
                    fields["compensator"] = self._bound_compensator(step.step_id, contract.compensator.tool, args)
                self._append_step(self.saga.steps[step.step_id], "COMMITTED", deferred=False, **fields)
            else:
                self._append_step(self.saga.steps[step.step_id], "FAILED", deferred=False,
                                  reason=f"given up while executing (settled: {status})"[:500])
        return self.unwind(reason or "gave up on forward progress")

    # --- panic and the ACB freeze ---------------------------------------------------------------------
    def _residue(self) -> list[dict[str, Any]]:
        """Resources the services still hold that this saga's steps created (read from them)."""
        ours = {s.step_id for s in self.saga.steps.values()}
        try:
            held = self.endpoints.live_resources()
        except OSError as exc:
            return self._residue_from_log(f"the services could not be read: {exc}")
        return [r for r in held if r.get("operation_id") in ours]

    def _residue_from_log(self, why: str) -> list[dict[str, Any]]:
        """When the services cannot be read: every step whose effect may still exist, as the log
        knows it (C_i recorded and not run to COMPENSATED, a committed pivot, or an operation
        still in doubt), by operation id, marked unconfirmed. ``resource_id`` is given when C_i
        has exactly one bound argument (the resource it releases)."""
        out: list[dict[str, Any]] = []
        for s in sorted(self.saga.steps.values(), key=lambda s: s.index):
            op = self.gate.record.operations.get(s.step_id)
            owed = s.compensator is not None and s.state != "COMPENSATED"
            pivot = s.pivot and s.state == "COMMITTED"
            doubtful = op is not None and op.status == "in_doubt"
            if not (owed or pivot or doubtful):
                continue
            entry: dict[str, Any] = {"operation_id": s.step_id, "tool": s.tool, "step": s.index, "state": s.state,
                                     "unconfirmed": why, "in_doubt": doubtful, "pivot": s.pivot}
            if s.compensator is not None:
                entry["compensator"] = {"tool": s.compensator["tool"], "arguments": s.compensator["arguments"]}
                if len(s.compensator["arguments"]) == 1:
                    entry["resource_id"] = str(next(iter(s.compensator["arguments"].values())))
            out.append(entry)
        return out or [{"unknown": why}]

    def _in_doubt_without_compensator(self) -> list[SagaStep]:
        """Forward steps that failed in doubt (their effect may exist) with no C_i recorded."""
        out = []
        for s in self.saga.steps.values():
            op = self.gate.record.operations.get(s.step_id)
            if s.compensator is None and not s.pivot and op is not None and op.status == "in_doubt":
                out.append(s)
        return out

    def _settle_failed_in_doubt(self) -> list[SagaStep]:
        """Before the unwind pops Σ: ask the services about every forward step that failed in
        doubt. One that completed after all gets its C_i bound from the answer and recorded with
        COMPENSATING (it joins Σ); one whose service answers ``unknown`` or ``failed`` left no
        effect. Returns the steps still in doubt (their service is unreachable, or has no status
        lookup): the unwind cannot show them undone and ends in PANIC listing them as residue."""
        doubtful = []
        for s in self._in_doubt_without_compensator():
            contract = self.registry.contract(s.tool)
            status = self._settle_by_lookup(s.step_id, s.tool) if contract.status_lookup else "no_lookup"
            op = self.gate.record.operations[s.step_id]
            if status == "completed" and contract.compensator is not None and s.state == "FAILED":
                try:
                    args = bind_compensator_arguments(contract.compensator, {}, _output(op.outcome))
                except CompensatorBindError:
                    doubtful.append(s)
                    continue
                self._append_step(s, "COMPENSATING", deferred=True,
                                  compensator=self._bound_compensator(s.step_id, contract.compensator.tool, args))
            elif status not in ("unknown", "failed", "completed"):
                doubtful.append(s)
        return doubtful

    def _panic(self, step: SagaStep | None, mode: str, error: dict[str, Any],
               failing_tool: str | None = None) -> Any:
        residue = self._residue()
        if step is not None:
            if step.state != "PANIC":   # PANIC already recorded by a run that died before its freeze
                self._append_step(step, "PANIC", deferred=True,
                                  reason=str(error.get("error", "compensator failed"))[:500], residue=residue)
            failing_tool = step.compensator["tool"] if step.compensator else step.tool
        if self.saga.state in ("RUNNING", "COMPENSATING", "COMMITTED"):
            self._append_saga("PANIC", deferred=True, reason=str(error.get("error", ""))[:500])
        incident = self.freeze(mode, error=error, failing_tool=failing_tool, residue=residue)
        raise SagaPanicError(f"saga {self.saga_id}: {mode}: {error.get('error', error)}; frozen as incident "
                             f"{incident['incident_id']}", residue=residue, incident=incident)

    def freeze(self, failure_mode: str, *, error: dict[str, Any], failing_tool: str | None,
               residue: Iterable[dict[str, Any]] = ()) -> dict[str, Any]:
        """The ACB freeze: revoke the trajectory's leases at the broker, persist the incident
        (``TrajectoryFrozen``: admission now refuses every model call and dispatch), then emit it
        on the out-of-band channel. Returns the incident record (a dict)."""
        revoked = self.endpoints.revoke(self.trajectory_id)
        incomplete = [s.step_id for s in self.saga.steps.values()
                      if s.state not in ("COMMITTED", "COMPENSATED", "ABORTED")]
        head = self.gate.log.head
        payload = TrajectoryFrozen(
            incident_id=f"incident-{self.trajectory_id}-{head + 1}", saga_id=self.saga_id, failure_mode=failure_mode,
            log_offset=head, failing_tool=failing_tool, error={k: v for k, v in error.items()},
            frozen_context_ref=f"log:{self.trajectory_id}@{head}", revoked_leases=revoked,
            residue=list(residue), incomplete_steps=incomplete)
        self.gate.append(payload)
        self._refold()
        incident = payload.model_dump(mode="json")
        incident["trajectory_id"] = self.trajectory_id
        self.on_incident(incident)
        return incident
