"""Crash states of one durable barrier per tool step (§11.3.1–11.3.3, §11.5.3).

The dispatch gate acknowledges the evidence of an endpoint that declared a status lookup by
operation id at the write tier, and lets it ride the next intent's barrier
(:mod:`kernel_lib.gate.dispatch`). This workload checks, on every crash state of the crash-state
engine (:mod:`kernel_lib.verify.engine`), that doing so weakens no promise that was made.

**Record.** A :class:`~kernel_lib.gate.dispatch.DispatchGate` over a
:class:`~kernel_lib.log.segment.SegmentStore` on the engine's recording file system runs a plan of
tool steps (:data:`PLAN`): endpoints with and without a status lookup, all ``unsafe`` (a repeat is
never allowed), then :meth:`~kernel_lib.gate.dispatch.DispatchGate.sync`. Every acknowledgment is
marked with its tier after it returned; every request that reaches the in-process endpoint is
marked ``dispatch:<operation>`` when it arrives there (the endpoint's own count, not the log's).

**Check**, on each crash state, after reopening the store and folding what survived:

1. no phantom effect: every operation dispatched before the crash has its intent in the log;
2. every event acknowledged at ``fdatasync`` before the crash is there, byte for byte;
3. evidence acknowledged before the crash and missing after it is allowed only for an intent that
   declared ``status_lookup``, and reconciliation then settles it by asking the endpoint by
   operation id (the endpoint answers from its own record); evidence of an endpoint without a
   status lookup must never be lost once acknowledged;
4. continuing the plan under a new owner (settlement before retry: an operation still in doubt is
   not attempted again) never makes the endpoint count more than one invocation of an operation.

Counters: ``evidence_lost_reconciled`` (states where write-tier evidence was lost and reconciliation
recovered it), ``in_doubt_left`` (operations left in doubt, never retried).

Assumptions: those of the engine (a completed ``fdatasync`` covers every earlier write to that
file; a sector write is atomic); the endpoint's status record survives the worker's crash.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Hashable, Sequence

from kernel_lib.core.events import Event, TaskStarted, ToolIntent, ToolResult
from kernel_lib.core.record import fold, initial_record
from kernel_lib.errors import KernelError
from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate, ToolProposal, ToolReply
from kernel_lib.log.base import AckTier, FailureDomain
from kernel_lib.log.fs import MemoryFileSystem, Op, RecordingFileSystem
from kernel_lib.log.segment import SegmentStore
from kernel_lib.log.trajectory import TrajectoryLog
from kernel_lib.verify.engine import CrashState, CrashWorkload, Verdict

__all__ = ["PLAN", "OneBarrierWorkload", "Step"]

DIRECTORY = "/log"
TRAJECTORY = "traj-one-barrier"
GRANT = "grant-barrier"


@dataclass(frozen=True)
class Step:
    """One tool step of the plan: its operation id and whether its endpoint answers a status
    lookup by operation id."""

    operation_id: str
    status_lookup: bool


#: The recorded plan: reconcilable and non-reconcilable endpoints interleaved.
PLAN: tuple[Step, ...] = (Step("op-1-lookup", True), Step("op-2-plain", False), Step("op-3-lookup", True),
                          Step("op-4-lookup", True), Step("op-5-plain", False))


def _outcome(operation_id: str) -> dict[str, Any]:
    return {"operation": operation_id, "passed": True}


def _proposal(step: Step, attempt_id: str = "attempt1") -> ToolProposal:
    return ToolProposal(step.operation_id, attempt_id, "run_check", {"op": step.operation_id}, GRANT, 0.01,
                        repeat_contract="unsafe", status_lookup=step.status_lookup)


class _MarkingLog(TrajectoryLog):
    """A TrajectoryLog that marks every acknowledgment (after it returned) on the recording fs."""

    def __init__(self, rec: RecordingFileSystem, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self._rec = rec

    def append_many(self, payloads, *, event_ids=None, deferred=False):  # type: ignore[override]
        events = super().append_many(payloads, event_ids=event_ids, deferred=deferred)
        tier = self.deferred_tier if (deferred and self.can_defer) else self.tier
        results = [f"result:{e.payload.operation_id}" for e in events if isinstance(e.payload, ToolResult)]
        self._rec.mark_ack([e.event_id for e in events] + results, tier)
        return events

    def sync(self) -> int:
        covered = [] if self._uncovered is None else [self._uncovered.event_id]
        head = super().sync()
        if covered:
            self._rec.mark_ack(covered, self.tier)
        return head


class OneBarrierWorkload(CrashWorkload):
    """The one-barrier-per-step workload (module docstring).

    ``defer_everything=True`` is a deliberately broken gate for tests: it defers the evidence of
    endpoints without a status lookup too, which the check must catch.
    """

    name = "one-barrier-steps"
    description = ("dispatch-gate tool steps on the segment log, evidence of status-lookup endpoints at the write "
                   "tier riding the next intent's barrier; reconciliation and continuation checked per state")
    counters = ("evidence_lost_reconciled", "in_doubt_left")

    def __init__(self, *, defer_everything: bool = False, plan: Sequence[Step] = PLAN):
        self.defer_everything = defer_everything
        self.plan = tuple(plan)
        if defer_everything:
            self.name = "one-barrier-steps-broken"

    def record(self, fs: RecordingFileSystem, seed: int) -> dict[str, int]:
        store = SegmentStore.open(DIRECTORY, fs=fs, create=True)
        try:
            log = _MarkingLog(fs, store, TRAJECTORY, must_survive=FailureDomain.HOST_CRASH)
            gate = DispatchGate(log, AdmissionPolicy(grants={GRANT: {"run_check"}}), coalesce_admission=True)
            if self.defer_everything:
                plain_record = gate.record_evidence

                def deferring(op, att, reply, source="reply", *, reconcilable=False):
                    gate._status_lookup_attempts.add((op, att))   # the bug: treat every endpoint as declared
                    return plain_record(op, att, reply, source, reconcilable=True)
                gate.record_evidence = deferring  # type: ignore[method-assign]
            gate.start(TaskStarted(task_id="barrier", requester="crashcheck", objective="one barrier per step",
                                   grant_ids=[GRANT], budget_ceiling_usd=1.0))

            def endpoint(intent: ToolIntent) -> ToolReply:
                fs.mark_ack([f"dispatch:{intent.operation_id}"], "dispatch")   # the endpoint received it
                return ToolReply(status="completed", outcome=_outcome(intent.operation_id), observation_complete=True)

            for step in self.plan:
                gate.run_tool(_proposal(step), endpoint)
            gate.sync()
            return {"steps": len(self.plan), "barriers": log.barriers}
        finally:
            store.close()

    def promised(self, ops: Sequence[Op], state: CrashState) -> Hashable:
        return tuple((op.tier, s) for op in ops[:state.crash_after] if op.kind == "ack" for s in op.subjects)

    def check(self, fs: MemoryFileSystem, promised: Any) -> Verdict:
        problems: list[str] = []
        dispatched = [s.split(":", 1)[1] for tier, s in promised if tier == "dispatch"]
        acked = {s: tier for tier, s in promised if tier != "dispatch"}
        if not acked and not fs.exists(DIRECTORY):
            return Verdict()   # crashed before the log existed: nothing was promised
        store = SegmentStore.open(DIRECTORY, fs=fs)
        try:
            events = list(store.read(TRAJECTORY))
            held = {e.event_id: e for e in events}
            # (2) every fdatasync acknowledgment survived (the bytes are the store's own check)
            for eid, tier in acked.items():
                if tier == AckTier.FDATASYNC.label and not eid.startswith("result:") and eid not in held:
                    problems.append(f"event {eid} was acknowledged at fdatasync and is missing")
            rec = fold(initial_record(TRAJECTORY), events)
            intents = {e.payload.operation_id: e.payload for e in events if isinstance(e.payload, ToolIntent)}
            # (1) no phantom effect
            for op in dispatched:
                if op not in intents:
                    problems.append(f"{op} reached the endpoint but its intent is not in the surviving log")
            # (3) lost evidence only where the endpoint can be asked
            # an operation whose evidence was acknowledged (at any tier) but is not established now
            lost_ops = {s.split(":", 1)[1] for s in acked if s.startswith("result:")}
            lost_ops = {o for o in lost_ops if o not in rec.operations or rec.operations[o].status != "established"}
            for op in sorted(lost_ops):
                if not intents[op].status_lookup:
                    problems.append(f"{op}: its endpoint has no status lookup, yet its acknowledged evidence was lost")
            if rec.task is None:
                return Verdict(tuple(problems))
            epoch = store.claim_epoch(TRAJECTORY)
            log = TrajectoryLog(store, TRAJECTORY, must_survive=FailureDomain.HOST_CRASH, owner_epoch=epoch)
            gate = DispatchGate(log, AdmissionPolicy(grants={GRANT: {"run_check"}}), record=rec)
            invocations = {op: dispatched.count(op) for op in set(dispatched)}
            reconciled = 0
            for op in rec.in_doubt():
                intent = intents.get(op)
                if intent is None or not intent.status_lookup:
                    continue
                if op in invocations:   # the endpoint's own record answers the lookup by operation id
                    gate.record_evidence(op, intent.attempt_id, ToolReply(
                        status="completed", outcome=_outcome(op), observation_complete=True), source="reconciliation")
                    reconciled += op in lost_ops
            for op in sorted(lost_ops):
                if gate.record.operations[op].status != "established":
                    problems.append(f"{op}: its write-tier evidence was lost and reconciliation did not settle it")

            # (4) continue the plan: settled operations are skipped, in-doubt ones are not retried
            def endpoint(intent: ToolIntent) -> ToolReply:
                invocations[intent.operation_id] = invocations.get(intent.operation_id, 0) + 1
                return ToolReply(status="completed", outcome=_outcome(intent.operation_id), observation_complete=True)

            left = 0
            for step in self.plan:
                op = gate.record.operations.get(step.operation_id)
                if op is not None and op.status == "established":
                    continue
                if op is not None and step.operation_id in gate.record.in_doubt():
                    left += 1   # settlement before retry: an unsafe operation in doubt is not sent again
                    continue
                try:
                    gate.run_tool(_proposal(step, "attempt1" if op is None else "attempt-r"), endpoint)
                except KernelError as exc:
                    problems.append(f"continuing at {step.operation_id} raised {type(exc).__name__}: {exc}")
                    break
            gate.sync()
            for op, n in sorted(invocations.items()):
                if n > 1:
                    problems.append(f"the endpoint counted {n} invocations of the unsafe operation {op}")
            return Verdict(tuple(problems), counts={"evidence_lost_reconciled": reconciled, "in_doubt_left": left})
        finally:
            store.close()


def events_of(store: SegmentStore) -> list[Event]:
    """The recorded trajectory's events (for inspection)."""
    return list(store.read(TRAJECTORY))
