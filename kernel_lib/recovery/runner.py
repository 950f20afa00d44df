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

Crash recovery is re-running the same saga script in a new process over the same log
(:meth:`SagaRunner.step` answers a committed step from the log, settles an in-doubt one by the
service's status lookup, and refuses a script that diverged from the log), then
:meth:`SagaRunner.unwind`, which continues where the log says the unwind stopped.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from kernel_lib.core.events import FROZEN, Event, SagaChanged, SagaStepChanged, ToolIntent, TrajectoryFrozen
from kernel_lib.core.proposals import ToolProposal, ToolReply, idempotency_key
from kernel_lib.errors import (
    AdmissionDenied, CompensatorBindError, DispatchWithheld, RecoveryError, SagaPanicError, SagaTransitionError,
    StepFailedError, TrajectoryFrozenRefusal,
)
from kernel_lib.gate.dispatch import DispatchGate
from kernel_lib.recovery.contracts import REPAIRABLE_CONTRACTS, ToolRegistry, bind_compensator_arguments
from kernel_lib.recovery.saga import (
    SagaRecord, SagaStep, check_transition, compensation_operation_id, fold_saga, next_unwind, step_operation_id,
)

__all__ = ["Endpoints", "RetryPolicy", "StepFailedError", "SagaRunner"]   # StepFailedError: from errors


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
    """

    def __init__(self, gate: DispatchGate, registry: ToolRegistry, endpoints: Endpoints, *, saga_id: str,
                 grant_id: str, retry: RetryPolicy = RetryPolicy(), sleep: Callable[[float], Any] = lambda s: None,
                 on_incident: Callable[[dict[str, Any]], Any] = lambda incident: None):
        self.gate = gate
        self.registry = registry.check()
        self.endpoints = endpoints
        self.saga_id = saga_id
        self.grant_id = grant_id
        self.retry = retry
        self.sleep = sleep
        self.on_incident = on_incident
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
        elif saga.state != "RUNNING":
            raise StepFailedError(f"saga {self.saga_id} is {saga.state}; no forward step runs", step_id=step_id)
        step = self.saga.steps.get(step_id)
        if step is not None and (step.tool, step.index) != (tool, index):
            raise SagaTransitionError(f"the saga script diverged from the log: step {index} is {step.tool} in the "
                                      f"log, {tool} in this run", from_state=step.state)
        if step is not None and step.state == "COMMITTED":
            return _output(self.gate.record.operations[step_id].outcome)
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
        state = "HALTED" if self.saga.pivot_committed is not None and "compensator" not in fields else "FAILED"
        self._append_step(step, "FAILED", deferred=False, **fields)
        if state == "HALTED":
            self._append_step(self.saga.steps[step_id], "HALTED", deferred=False, reason="past the pivot: no rollback")
        raise StepFailedError(f"step {index} ({tool}) failed: {fields['reason']}", step_id=step_id, error=error)

    def complete(self) -> None:
        """Record the saga COMPLETED (a barrier): every step committed."""
        self._check_not_frozen()
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
        if saga.pivot_committed is not None:
            return self._panic(None, "POST_PIVOT_STALLED", {"error": reason or "failure past the pivot"},
                               failing_tool=saga.steps[failed].tool if failed else None)
        if saga.state is None:   # an unwind before the first step: the saga still starts, then ends
            self._append_saga("RUNNING", deferred=True)
        if self.saga.state != "COMPENSATING":
            self._append_saga("COMPENSATING", deferred=True, failed_step_id=failed, reason=reason[:500])
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
        if self.saga.state in ("RUNNING", "COMPENSATING"):
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
