"""The watchdog's thin runner: applies the tier :func:`~kernel_lib.recovery.watchdog.escalation.decide_tier`
chose (Failure Recovery, table 7), log first, then act.

Every intervention is two records around its effects::

    WatchdogIntervened(phase="intent")   durable before any effect
    effects of the tier                  each one skipped when the log or the receiver shows it done
    WatchdogIntervened(phase="completed")

* tier 1: a ``RuntimeInput`` of kind ``observation`` (name
  :data:`~kernel_lib.recovery.watchdog.escalation.INTERRUPT_INPUT`) holding the interrupt's text:
  the agent builds its next context from the log, so the text reaches the model exactly once
  and a replay delivers the same words;
* tier 2: the workspace rewound to the checkpoint the intent names (the caller's
  :class:`WorkspaceRestorer`, which writes nothing when the workspace already is that tree), then
  an ``ActionMasked`` tombstone for the looping action's h_tool (the gate refuses it from then on);
* tier 3: before the pivot the saga unwinds (its compensators, :meth:`SagaRunner.unwind`), the
  capability leases are revoked and the trajectory is marked ``FAILED``; past the pivot the
  trajectory is frozen (:meth:`SagaRunner.freeze` with ``SEMANTIC_DEADLOCK``: leases revoked,
  ``TrajectoryFrozen``). Then :class:`~kernel_lib.errors.SemanticDeadlockError` is raised.

A crash anywhere between the intent and the completion leaves an unfinished intervention;
:meth:`WatchdogRunner.resume` (called first by :meth:`WatchdogRunner.intervene`) finishes it with
the parameters its intent recorded and never starts another tier before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from kernel_lib.core.events import FROZEN, ActionMasked, RuntimeInput, WatchdogIntervened
from kernel_lib.core.record import TERMINAL_STATES
from kernel_lib.errors import ConfigError, SemanticDeadlockError, WatchInputError
from kernel_lib.gate.dispatch import DispatchGate
from kernel_lib.recovery.watchdog.escalation import (
    INTERRUPT_INPUT, Intervention, LadderPolicy, TierDecision, decide_tier, interventions_of, unfinished,
)
from kernel_lib.recovery.watchdog.model import Detection

__all__ = ["WatchdogRunner", "WorkspaceRestorer", "SemanticDeadlockError", "interrupt_text", "ERR_SEMANTIC_DEADLOCK"]

ERR_SEMANTIC_DEADLOCK = "ERR_SEMANTIC_DEADLOCK"


class WorkspaceRestorer(Protocol):
    """Rewinds the real workspace to a checkpoint (tier 2)."""

    def restore(self, checkpoint: dict[str, Any]) -> bool:
        """Make the workspace equal to ``checkpoint``'s tree (an entry of ``record.checkpoints``).
        Returns True when it wrote anything, False when the workspace already was that tree."""


def interrupt_text(kind: str, evidence: dict[str, Any], onset_position: int | None) -> str:
    """The tier-1 synthetic observation, in this project's words (the chapter's STATE_OSCILLATION
    alert): what the supervisor saw, and what the model should do instead."""
    label = {"state_hash_cycle": "STATE_OSCILLATION", "action_repetition": "REPEATED_FAILING_ACTION",
             "metric_stagnation": "NO_METRIC_PROGRESS", "metric_oscillation": "METRIC_OSCILLATION"}.get(
        kind, kind.upper())
    k = evidence.get("period")
    where = f" first seen at log position #{onset_position}" if onset_position else ""
    return (f"[WATCHDOG INTERRUPT: {label}{f' k={k}' if k else ''}] The supervisor held back this step. The "
            f"environment is back in a state it was already in{where}: the last actions made no net progress. "
            "Repeating them will not help. Do not issue the previous command again; form a different hypothesis "
            "about the failure, or check what you assumed about the environment, before the next change.")


def _action_position(iv: Intervention) -> int:
    """The log position of the looping action an intervention answers: its detection's
    ``step_position`` (detectors fire at the observation after the action), else the detection's
    position, else the intervention's own."""
    pos = iv.evidence.get("step_position")
    if type(pos) is int and pos >= 1 and (iv.detection_position is None or pos <= iv.detection_position):
        return pos
    return iv.detection_position or iv.intent_position


class WatchdogRunner:
    """Applies table 7's tiers to one trajectory through its dispatch gate (module docstring).

    Args:
        gate: the trajectory's dispatch gate (its record is the fold of the log).
        workspace: rewinds the workspace for tier 2 (None: tier 2 masks without restoring, and
            says so in its completion).
        saga: the trajectory's :class:`~kernel_lib.recovery.runner.SagaRunner` (tier 3
            compensates or freezes through it); None: no external effects to compensate.
        revoke: revokes the trajectory's capability leases at the broker (idempotent; returns the
            lease ids it revoked); default: the saga's endpoints', else nothing.
        policy: the ladder's epoch and backtrack budget.
        issuer: who the control transitions are recorded for.

    Raises ConfigError for a gate that is not a DispatchGate, a workspace without ``restore``, a
    ``revoke`` that is not callable, a policy that is not a LadderPolicy or an empty issuer.
    """

    def __init__(self, gate: DispatchGate, *, workspace: WorkspaceRestorer | None = None, saga: Any = None,
                 revoke: Callable[[str], list[str]] | None = None, policy: LadderPolicy | None = None,
                 issuer: str = "watchdog"):
        if not isinstance(gate, DispatchGate):
            raise ConfigError(f"gate must be a DispatchGate, got {type(gate).__name__}")
        # checked here, not when a tier needs them: a tier that fails after its intent is logged
        # would be resumed, and fail, at every later step
        if workspace is not None and not callable(getattr(workspace, "restore", None)):
            raise ConfigError(f"workspace must have a restore(checkpoint) method, got {type(workspace).__name__}")
        if revoke is not None and not callable(revoke):
            raise ConfigError(f"revoke must be callable (trajectory id -> lease ids), got {type(revoke).__name__}")
        if policy is not None and not isinstance(policy, LadderPolicy):
            raise ConfigError(f"policy must be a LadderPolicy, got {type(policy).__name__}")
        if not isinstance(issuer, str) or not issuer:
            raise ConfigError(f"issuer must be a non-empty str, got {issuer!r}")
        self.gate = gate
        self.workspace = workspace
        self.saga = saga
        self.policy = policy if policy is not None else LadderPolicy()
        self.issuer = issuer
        if revoke is None and saga is not None:
            revoke = saga.endpoints.revoke
        self._revoke = revoke or (lambda trajectory_id: [])

    @property
    def trajectory_id(self) -> str:
        return self.gate.log.trajectory_id

    def interventions(self) -> list[Intervention]:
        return interventions_of(self.gate.record)

    # --- the two entry points ---------------------------------------------------------------------
    def resume(self) -> Intervention | None:
        """Finish the intervention a crash cut short (intent logged, completion not), if any, and
        return it; None when there was none.

        Raises: SemanticDeadlockError when the finished intervention is a tier 3."""
        open_one = unfinished(self.gate.record)
        if open_one is None:
            return None
        return self._apply(open_one)

    def intervene(self, detection: Detection) -> Intervention | None:
        """Answer ``detection`` with the tier :func:`decide_tier` chooses: log the intent, apply
        the effects, log the completion. Returns the finished intervention, or None when the
        detection needs nothing (already answered).

        Raises:
            SemanticDeadlockError: tier 3 ended the trajectory (compensated or frozen).
            WatchInputError: ``detection`` is not a Detection, names no position of the log, or
                holds evidence the log cannot hold (not JSON data); nothing is logged then.
        """
        done = self.resume()
        if done is not None and done.tier == 3:   # pragma: no cover - resume raises for tier 3
            return done
        d = decide_tier(self.gate.record, detection, self.policy)
        if d.tier is None:
            return None
        return self._apply(self._intent(d, detection))

    def decide(self, detection: Detection) -> TierDecision:
        """The decision :meth:`intervene` would apply, without applying it."""
        return decide_tier(self.gate.record, detection, self.policy)

    # --- intent, effects, completion ----------------------------------------------------------------
    def _intent(self, d: TierDecision, detection: Detection) -> Intervention:
        try:   # built before anything is logged: evidence the log cannot hold is refused, not half-written
            intent = WatchdogIntervened(
                intervention_id=d.intervention_id, phase="intent", tier=d.tier, detection_kind=detection.kind,
                detection_position=detection.position, evidence=dict(detection.evidence),
                action_signature=d.action_signature, onset_position=d.onset_position,
                checkpoint_restored=d.checkpoint_id, reason=d.reason[:1000])
        except ValueError as exc:   # pydantic's ValidationError is a ValueError
            raise WatchInputError(f"the detection at #{detection.position} cannot be logged: "
                                  f"{' '.join(str(exc).split())[:300]}", field="evidence") from None
        self.gate.append(intent)
        return next(i for i in self.interventions() if i.intervention_id == d.intervention_id)

    def _complete(self, iv: Intervention, *, outcome: str, checkpoint: str | None = None, reason: str = "") -> None:
        self.gate.append(WatchdogIntervened(
            intervention_id=iv.intervention_id, phase="completed", tier=iv.tier, detection_kind=iv.detection_kind,
            detection_position=iv.detection_position, action_signature=iv.action_signature,
            onset_position=iv.onset_position, checkpoint_restored=checkpoint, outcome=outcome,
            reason=reason[:1000]))

    def _apply(self, iv: Intervention) -> Intervention:
        if iv.tier == 1:
            self._interrupt(iv)
        elif iv.tier == 2:
            self._backtrack(iv)
        else:
            self._abort(iv)   # raises SemanticDeadlockError
        return next(i for i in self.interventions() if i.intervention_id == iv.intervention_id)

    def _interrupt(self, iv: Intervention) -> None:
        rec = self.gate.record
        sent = any(ri.get("kind") == "observation" and ri.get("name") == INTERRUPT_INPUT
                   and isinstance(ri.get("value"), dict) and ri["value"].get("intervention_id") == iv.intervention_id
                   for ri in rec.runtime_inputs)
        if not sent:
            self.gate.append(RuntimeInput(kind="observation", name=INTERRUPT_INPUT, value={
                "intervention_id": iv.intervention_id, "detection_kind": iv.detection_kind,
                "text": interrupt_text(iv.detection_kind, iv.evidence, iv.onset_position)}))
        self._complete(iv, outcome="interrupted", reason="synthetic interrupt delivered into the model's context")

    def _backtrack(self, iv: Intervention) -> None:
        rec = self.gate.record
        restored, why = None, ""
        ckpt = next((c for c in rec.checkpoints if c.get("checkpoint_id") == iv.checkpoint_restored), None)
        if ckpt is None:
            why = "no checkpoint before the cycle's onset: the workspace was not rewound"
        elif self.workspace is None:
            why = "no workspace restorer configured: the workspace was not rewound"
        else:
            wrote = self.workspace.restore(ckpt)
            restored = ckpt["checkpoint_id"]
            why = (f"workspace rewound to checkpoint {restored} (covers #{ckpt.get('covered_sequence_number')})"
                   + ("" if wrote else "; it already was that tree"))
        sig = iv.action_signature
        if sig is not None and sig not in self.gate.record.masked_actions:
            op_tool = self._tool_of(iv)
            self.gate.append(ActionMasked(action_signature=sig, reason=f"watchdog tier 2 ({iv.detection_kind}): the "
                                          "action kept the trajectory in a loop", position=_action_position(iv),
                                          tool=op_tool, intervention_id=iv.intervention_id))
        elif sig is None:
            why += "; no action signature to mask"
        self._complete(iv, outcome="backtracked", checkpoint=restored, reason=why)

    def _tool_of(self, iv: Intervention) -> str | None:
        from kernel_lib.recovery.watchdog.escalation import action_at

        act = action_at(self.gate.record, _action_position(iv))
        if act is None and iv.detection_position:
            act = action_at(self.gate.record, iv.detection_position)
        return act[0] if act else None

    def _abort(self, iv: Intervention) -> None:
        rec = self.gate.record
        why = f"{ERR_SEMANTIC_DEADLOCK}: {iv.detection_kind} persisted after the backtrack budget"
        saga = self.saga
        incident: dict[str, Any] = {}
        revoked: list[str] = []
        crossed = saga is not None and saga._refold().phase == "COMMITTED"
        if rec.control_state == FROZEN or crossed:
            outcome = "frozen"
            if rec.control_state != FROZEN:
                incident = saga.freeze("SEMANTIC_DEADLOCK", error={"error": why, "intervention_id": iv.intervention_id},
                                       failing_tool=self._tool_of(iv))
                revoked = list(incident.get("revoked_leases", []))
            else:
                inc = next((r for r in reversed(self.gate.record.recovery_records)
                            if r.get("event_type") == "TrajectoryFrozen"), {})
                incident = {k: v for k, v in inc.items() if k != "event_type"}
                revoked = self._revoke(self.trajectory_id)   # idempotent: finishes a revocation a crash cut short
        else:
            outcome = "compensated"
            if saga is not None and saga.saga.state is not None and saga.saga.state != "ABORT_CONSISTENT":
                saga.unwind(why)   # resumable: continues where the log says the unwind stopped
            revoked = self._revoke(self.trajectory_id)
            if self.gate.record.control_state not in TERMINAL_STATES:
                self.gate.change_control("FAILED", issuer=self.issuer, request_id=f"{iv.intervention_id}-abort",
                                         reason=why[:500])
        if unfinished(self.gate.record) is not None:
            self._complete(iv, outcome=outcome, reason=why)
        raise SemanticDeadlockError(
            f"{why}; trajectory {self.trajectory_id} "
            + ("compensated before its pivot and FAILED" if outcome == "compensated"
               else "past its pivot: FROZEN for an operator"),
            outcome=outcome, intervention_id=iv.intervention_id, incident=incident, revoked_leases=revoked)
