"""Run a pivot plan through the saga runner: the preparation phase, the gated crossing, the
pivot with its atomic outbox, the finalization phase (Failure Recovery, "The pivot action
boundary" and Example 0.1).

A :class:`~kernel_lib.recovery.pivot.Plan` says what runs and in which order; a
:class:`StepBinding` per step says how (a service tool and its arguments, or a local tier I
computation). :func:`plan_actions` is the pure part: it turns the plan into the runner's actions
(``step``, ``local``, ``stage``, ``pivot``). :func:`run_plan` is the thin runner: it applies them
through :class:`~kernel_lib.recovery.runner.SagaRunner` and answers a failure as the phase
demands — before the crossing the saga is unwound (escrow dropped, Σ popped); after it the unwind
is refused and the trajectory escalated (:class:`~kernel_lib.errors.PivotCrossedError`).

The pivot is the plan's first tier III step. Before it, ``gate(outputs)`` (when given) returns
the pre-pivot :class:`~kernel_lib.recovery.verification.GateVerdict`, recorded with
:meth:`~kernel_lib.recovery.runner.SagaRunner.verify_pivot`; a failed verdict refuses the crossing
and the saga unwinds. A staging step (``stage_of``) writes its target's payload into escrow
(:meth:`~kernel_lib.recovery.runner.SagaRunner.stage`) with the binding of the target step; the
pivot's ``outbox`` is flushed right after the pivot commits.

Re-running :func:`run_plan` with a new runner over the same log (after a crash) continues: steps
already committed are answered from the log, a crossing already durable is not repeated (the
saga goes forward), an outbox entry already sent is settled by the service, not sent twice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kernel_lib.errors import (
    PivotCrossedError, PivotRefusedError, PlanError, SagaPanicError, StepFailedError, TrajectoryFrozenRefusal,
)
from kernel_lib.recovery.pivot import Plan, check_plan
from kernel_lib.recovery.runner import SagaRunner

__all__ = ["StepBinding", "PlanAction", "PlanRun", "plan_actions", "run_plan"]

Outputs = Mapping[str, Any]


@dataclass(frozen=True)
class StepBinding:
    """How one plan step runs.

    ``tool``: the registered service tool the step calls (None for a local step);
    ``arguments``: a dict, or a function of the outputs so far (``{step_id: output}``) returning
    one; ``local``: a tier I computation run in process (a function of the outputs returning a
    dict); an exception it raises fails the step.
    """

    tool: str | None = None
    arguments: Mapping[str, Any] | Callable[[Outputs], Mapping[str, Any]] = field(default_factory=dict)
    local: Callable[[Outputs], Mapping[str, Any]] | None = None

    def arguments_for(self, outputs: Outputs) -> dict[str, Any]:
        return dict(self.arguments(outputs) if callable(self.arguments) else self.arguments)


@dataclass(frozen=True)
class PlanAction:
    """One action of :func:`run_plan`: ``kind`` is ``step`` (a service call, a saga step),
    ``local`` (tier I, in process), ``stage`` (escrow entry ``stage_of`` staged) or ``pivot``
    (gate, crossing, the pivot's call, then its ``outbox`` flushed)."""

    step_id: str
    kind: str
    tool: str | None = None
    stage_of: str | None = None
    outbox: tuple[str, ...] = ()


def plan_actions(plan: Plan, bindings: Mapping[str, StepBinding]) -> tuple[PlanAction, ...]:
    """The actions :func:`run_plan` applies for ``plan`` (pure).

    Raises:
        PlanError: a step without a binding (a staging step uses its target's), a binding with
            neither a tool nor a local function, a local binding on a tier II/III step (only an
            invertible step runs in process), or a staged step bound to no tool.
    """
    pivot = check_plan(plan).pivot
    out = []
    for s in plan.steps:
        if s.stage_of is not None:
            b = bindings.get(s.stage_of)
            if b is None or b.tool is None:
                raise PlanError(f"staging step {s.id} stages {s.stage_of}, which is bound to no tool", step=s.id)
            out.append(PlanAction(s.id, "stage", b.tool, stage_of=s.stage_of))
            continue
        b = bindings.get(s.id)
        if b is None:
            raise PlanError(f"plan step {s.id} has no binding (bound: {', '.join(sorted(bindings))})", step=s.id)
        if b.local is not None:
            if s.tier != "I":
                raise PlanError(f"plan step {s.id} is tier {s.tier}: only an invertible (I) step runs in process",
                                step=s.id)
            out.append(PlanAction(s.id, "local"))
        elif b.tool is None:
            raise PlanError(f"plan step {s.id}: its binding names neither a tool nor a local function", step=s.id)
        else:
            out.append(PlanAction(s.id, "pivot" if s.id == pivot else "step", b.tool, outbox=s.outbox))
    return tuple(out)


@dataclass
class PlanRun:
    """What :func:`run_plan` did.

    ``state``: ``COMPLETED``, ``ABORT_CONSISTENT`` (a failure before the pivot, unwound),
    ``ESCALATED`` (a failure after the pivot: the unwind was refused and the trajectory frozen),
    ``PANIC`` (the unwind itself failed; frozen) or ``FROZEN`` (found frozen). ``done``: the
    plan step ids that finished, in order; ``outputs``: ``{step_id: output}``; ``failed_step``
    and ``error``: the plan step that failed and why; ``refused_checks``: the gate's failed checks
    when the gate refused the crossing; ``incident``: the freeze's incident record, if any;
    ``operation_ids``: ``{plan step id: saga operation id}`` of the steps that went to a service
    (the saga numbers its steps in the order they run: a local step has none).
    """

    state: str
    order: tuple[str, ...]
    done: list[str] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    failed_step: str | None = None
    error: str = ""
    refused_checks: list[str] = field(default_factory=list)
    incident: dict[str, Any] | None = None
    operation_ids: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "order": list(self.order), "done": list(self.done), "outputs": self.outputs,
                "failed_step": self.failed_step, "error": self.error, "refused_checks": list(self.refused_checks),
                "incident_id": (self.incident or {}).get("incident_id"), "operation_ids": dict(self.operation_ids)}


def run_plan(plan: Plan, bindings: Mapping[str, StepBinding], runner: SagaRunner, *,
             gate: Callable[[Outputs], Any] | None = None, enforce: bool = True) -> PlanRun:
    """Run ``plan`` step by step through ``runner`` (see the module docstring).

    Args:
        plan: the plan, in the order to run it.
        bindings: ``{plan step id: StepBinding}``.
        runner: the saga runner (a new one over the same log continues a crashed run).
        gate: ``gate(outputs)`` returns the pre-pivot verdict (a ``GateVerdict``); None: no gate
            (the runner's ``require_verification`` then decides whether the crossing may happen).
        enforce: refuse a plan that breaks the pivot boundary invariant (``check_plan``). False
            runs it anyway — how Example 0.1's trap is reproduced.

    Returns a :class:`PlanRun`.

    Raises:
        PlanError: ``enforce`` and the plan is invalid (the reasons in the message), or a binding
            is missing (:func:`plan_actions`).
    """
    if enforce:
        check = check_plan(plan)
        if not check.valid:
            raise PlanError("the plan breaks the pivot boundary invariant: " + "; ".join(str(r) for r in check.reasons))
    actions = plan_actions(plan, bindings)
    run = PlanRun("RUNNING", plan.ids)
    current: str | None = None
    try:
        for a in actions:
            current = a.step_id
            if a.kind == "local":
                try:
                    run.outputs[a.step_id] = dict(bindings[a.step_id].local(run.outputs))
                except (SagaPanicError, TrajectoryFrozenRefusal):
                    raise
                except Exception as exc:   # a local step that fails is a failed step
                    raise StepFailedError(f"local step {a.step_id} failed: {exc}", step_id=a.step_id) from exc
            elif a.kind == "stage":
                entry = runner.stage(a.stage_of, a.tool, bindings[a.stage_of].arguments_for(run.outputs))
                run.outputs[a.step_id] = entry.to_json()
            elif a.kind == "pivot":
                if gate is not None and runner.saga.crossing is None:   # a re-run past the crossing goes on
                    runner.verify_pivot(gate(run.outputs))
                run.operation_ids[a.step_id] = runner.next_step_id
                run.outputs[a.step_id] = runner.step(a.tool, bindings[a.step_id].arguments_for(run.outputs))
                if a.outbox:
                    run.outputs["outbox"] = runner.flush_outbox()
            else:
                run.operation_ids[a.step_id] = runner.next_step_id
                run.outputs[a.step_id] = runner.step(a.tool, bindings[a.step_id].arguments_for(run.outputs))
            run.done.append(a.step_id)
        runner.complete()
        run.state = "COMPLETED"
        return run
    except TrajectoryFrozenRefusal as exc:
        run.state, run.error = "FROZEN", str(exc)
        return run
    except PivotRefusedError as exc:
        run.failed_step, run.error, run.refused_checks = current, str(exc), list(exc.failed_checks)
    except StepFailedError as exc:
        run.failed_step, run.error = current, str(exc)
    except SagaPanicError as exc:   # an effect that could not be bound, or an outbox that cannot be sent
        run.failed_step, run.error, run.incident = current, str(exc), exc.incident
        run.state = "ESCALATED" if runner.saga.phase == "COMMITTED" else "PANIC"
        return run
    try:
        run.state = runner.unwind(f"plan step {run.failed_step} failed: {run.error}"[:500])
    except PivotCrossedError as exc:
        run.state, run.incident = "ESCALATED", exc.incident
    except SagaPanicError as exc:
        run.state, run.incident = "PANIC", exc.incident
    except TrajectoryFrozenRefusal:
        run.state = "FROZEN"
    return run
