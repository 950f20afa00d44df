"""The forward-repair loop: D(Ω) applied to a saga's failed steps (Failure Recovery, "Forward
Recovery", figure 2, "The anti-spin invariant").

:class:`RepairLoop` wraps a :class:`~kernel_lib.recovery.runner.SagaRunner`. When a forward step
fails it

1. folds Ω_t from the log: Σ (the committed steps, with compensation and rerun costs from the
   declared per-tool figures :class:`ToolCost`), the remaining budget B_t (USD from the trajectory
   record's ceiling, reservations and consumption; tokens and steps from the declared ceilings
   of :class:`RepairLoopConfig` minus what the log shows spent), and the sub-transaction's k_i,
   H_i and transient retries **folded from its ``RecoveryDecided`` records** (:func:`fold_repairs`);
2. calls :func:`~kernel_lib.recovery.policy.decide`, with the per-failure-class estimates of p
   folded from the log's ``RepairOutcome`` records (added to the configured ones);
3. appends the ``RecoveryDecided`` record at a barrier **before** acting on it;
4. applies the directive:

   * TRANSIENT_RETRY — waits the decision's full-jitter delay (``sleep``, a virtual clock in
     tests) and proposes the same call again;
   * FORWARD_REPAIR — hands the injected ``repairer`` a :class:`RepairFrame` (the failed call's
     tool and arguments, the structured error, the remedy: nothing else) and proposes the
     arguments it returns;
   * BACKWARD_ROLLBACK — :meth:`SagaRunner.unwind`; OPERATOR_ESCALATE — the runner's freeze
     (after the pivot, the unwind's POST_PIVOT_STALLED freeze). Both end in
     :class:`~kernel_lib.errors.RecoveryTerminated` (or the runner's ``SagaPanicError``).

**What a retry or a repair is to the gate.** The dispatch gate's attempts of one operation are
repeats of the *same* request (same tool, arguments and idempotency key; admission refuses
anything else, and refuses any new attempt once the operation's outcome is recorded). A repaired
call is a different request, so it runs as a new operation: the runner's next saga step
(``<saga>.T<j>``, its own κ), admitted, reserved and recorded like every other step. The loop
ties the attempts of one sub-transaction together in its records: ``RecoveryDecided.step_id`` and
``RepairOutcome.step_id`` name the sub-transaction (the id of its first attempt), and each
decision's ``numbers["repair_loop"]`` names the attempt it answered (``attempt_operation_id``).
A transient retry is a new step too: the runner only gives up on an attempt that its service
says never applied (status lookup ``unknown``), so the fresh κ cannot double an effect.

**k_i counts forward repairs elected** (FORWARD_REPAIR decisions recorded for the
sub-transaction), H_i is the σ of every decision of it, oldest first; both come back from the
log after a crash. A ``RepairOutcome`` is recorded once per repair, when the repaired attempt
settles (committed: success; failed: not), so p is measured from the log next time.

**Crash and resume.** Re-run the same script with a new runner and loop over the same log: a
committed attempt is answered from the log, a failed one finds its recorded decision and applies
it again without deciding anew (a retry's wait is slept again, a repair asks the repairer again
unless the repaired attempt's request is already in the log, whose arguments are then used).

Charges: a repair pass is the model's work; the stand-in repairer is not billed through the
gate, so the loop charges the chosen remedy's declared cost (tokens, USD, steps) in the decision
record (``numbers["repair_loop"]["charged"]``) and B_t subtracts what the records charged.

Errors: :class:`~kernel_lib.errors.RecoveryPolicyError` for a configuration the loop cannot use
(a tool without declared costs); :class:`~kernel_lib.errors.RecoveryTerminated` when the policy
stops the sub-transaction; what the runner raises otherwise.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kernel_lib.core.events import Event, RecoveryDecided, RepairOutcome
from kernel_lib.errors import RecoveryPolicyError, RecoveryTerminated, SagaPanicError, StepFailedError
from kernel_lib.recovery.policy import (
    Budget, CommittedStep, FailedStep, Omega, PolicyConfig, RecoveryDecision, decide, decision_event,
)
from kernel_lib.recovery.repair_stats import RepairStats, fold_repair_stats
from kernel_lib.recovery.runner import SagaRunner

__all__ = ["ToolCost", "RepairLoopConfig", "RepairFrame", "Repairer", "SubTransactionRepairs", "fold_repairs",
           "RepairLoop"]


def _nonneg(name: str, v: Any, *, integer: bool = False) -> None:
    ok = (type(v) is int) if integer else (isinstance(v, (int, float)) and not isinstance(v, bool))
    if not ok or not math.isfinite(v) or v < 0:
        raise RecoveryPolicyError(f"{name} must be a{'n integer' if integer else ' finite number'} >= 0, got {v!r}")


@dataclass(frozen=True)
class ToolCost:
    """The declared cost of one tool: running it forward (``forward_s`` wall time, ``forward_usd``:
    the model work that proposed it, billed again on a rerun) and running its compensator
    (``compensation_s``, ``compensation_usd``). Seconds and USD, >= 0."""
    forward_s: float
    forward_usd: float = 0.0
    compensation_s: float = 0.0
    compensation_usd: float = 0.0

    def __post_init__(self) -> None:
        for n in ("forward_s", "forward_usd", "compensation_s", "compensation_usd"):
            _nonneg(n, getattr(self, n))


@dataclass(frozen=True)
class RepairLoopConfig:
    """The loop's declared figures. ``policy``: D(Ω)'s configuration (remedies, K_repair, reserves,
    backoff); ``tool_costs``: :class:`ToolCost` per tool name (every tool of the saga must be
    declared); ``tokens_ceiling`` and ``steps_ceiling``: the trajectory's token and step budget
    (the record holds the dollar ceiling); ``seed``: seeds the backoff draw per attempt.
    Raises :class:`RecoveryPolicyError` for negative ceilings or a cost that is not a ToolCost."""
    policy: PolicyConfig
    tool_costs: Mapping[str, ToolCost]
    tokens_ceiling: int = 1_000_000
    steps_ceiling: int = 1_000
    seed: int = 0

    def __post_init__(self) -> None:
        _nonneg("tokens_ceiling", self.tokens_ceiling, integer=True)
        _nonneg("steps_ceiling", self.steps_ceiling, integer=True)
        for k, v in self.tool_costs.items():
            if not isinstance(v, ToolCost):
                raise RecoveryPolicyError(f"tool_costs[{k!r}] must be a ToolCost, got {type(v).__name__}")

    def cost_of(self, tool: str) -> ToolCost:
        c = self.tool_costs.get(tool)
        if c is None:
            raise RecoveryPolicyError(f"no declared cost for tool {tool!r}: Σ's unwind and rerun costs are "
                                      f"read from RepairLoopConfig.tool_costs (declared: {sorted(self.tool_costs)})")
        return c


@dataclass(frozen=True)
class RepairFrame:
    """The constrained diagnostic frame a repair pass sees, and nothing else: the sub-transaction
    (``step_id``), the failed call (``tool``, ``arguments``), its structured ``error``, the
    ``remedy`` chosen (``error_feedback``, ``resample`` or ``model_fallback``) with its
    ``remedy_detail`` (seed, temperature, model name), and ``repair_number`` (k_i after this
    repair, 1..K_repair)."""
    step_id: str
    tool: str
    arguments: Mapping[str, Any]
    error: Mapping[str, Any]
    remedy: str
    remedy_detail: Mapping[str, Any]
    repair_number: int

    def as_dict(self) -> dict[str, Any]:
        return {"step_id": self.step_id, "tool": self.tool, "arguments": dict(self.arguments),
                "error": dict(self.error), "remedy": self.remedy, "remedy_detail": dict(self.remedy_detail),
                "repair_number": self.repair_number}


#: A repair pass: the frame in, the corrected arguments out (None: no repair proposed).
Repairer = Callable[[RepairFrame], "Mapping[str, Any] | None"]


@dataclass
class SubTransactionRepairs:
    """One sub-transaction's recovery history folded from the log. ``decisions``: its
    ``RecoveryDecided`` payloads in log order; ``attempts``: the operation id each answered;
    ``outcomes``: its ``RepairOutcome`` payloads. Derived: ``repairs_done`` (k_i),
    ``signatures`` (H_i, oldest first), ``retries_done``, charges."""
    step_id: str
    decisions: list[RecoveryDecided] = field(default_factory=list)
    attempts: list[str] = field(default_factory=list)
    outcomes: list[RepairOutcome] = field(default_factory=list)

    @property
    def repairs_done(self) -> int:
        """k_i: forward repairs elected for this sub-transaction."""
        return sum(1 for d in self.decisions if d.directive == "FORWARD_REPAIR")

    @property
    def retries_done(self) -> int:
        """Transient retries since the last forward repair (the backoff exponent)."""
        n = 0
        for d in reversed(self.decisions):
            if d.directive != "TRANSIENT_RETRY":
                break
            n += 1
        return n

    @property
    def signatures(self) -> tuple[str, ...]:
        """H_i: σ of every error this sub-transaction met, oldest first."""
        return tuple(d.error_signature for d in self.decisions)

    def decision_for(self, operation_id: str) -> RecoveryDecided | None:
        for op, d in zip(self.attempts, self.decisions):
            if op == operation_id:
                return d
        return None

    def charged(self, key: str) -> float:
        return math.fsum(float(((d.numbers.get("repair_loop") or {}).get("charged") or {}).get(key, 0))
                         for d in self.decisions)


def fold_repairs(events: Iterable[Event]) -> dict[str, SubTransactionRepairs]:
    """Fold ``RecoveryDecided`` and ``RepairOutcome`` records into one
    :class:`SubTransactionRepairs` per sub-transaction id. Other events are skipped; a decision
    without ``numbers["repair_loop"]`` (recorded by something other than this loop) counts as an
    attempt of the sub-transaction's own id."""
    out: dict[str, SubTransactionRepairs] = {}
    for ev in events:
        p = ev.payload
        if isinstance(p, RecoveryDecided):
            sub = out.setdefault(p.step_id, SubTransactionRepairs(p.step_id))
            sub.decisions.append(p)
            loop = p.numbers.get("repair_loop") if isinstance(p.numbers, Mapping) else None
            op = loop.get("attempt_operation_id") if isinstance(loop, Mapping) else None
            sub.attempts.append(op if isinstance(op, str) else p.step_id)
        elif isinstance(p, RepairOutcome):
            out.setdefault(p.step_id, SubTransactionRepairs(p.step_id)).outcomes.append(p)
    return out


def _merge_stats(base: Mapping[tuple[str, str], RepairStats],
                 more: Mapping[tuple[str, str], RepairStats]) -> dict[tuple[str, str], RepairStats]:
    out = dict(base)
    for k, s in more.items():
        b = out.get(k)
        out[k] = s if b is None else RepairStats(b.successes + s.successes, b.attempts + s.attempts,
                                                 b.prior_a, b.prior_b)
    return out


class RepairLoop:
    """The recovery loop over ``runner`` (see the module docstring).

    Args:
        runner: the saga's thin runner (its gate's log is the only state).
        config: :class:`RepairLoopConfig`.
        repairer: the repair pass (:data:`Repairer`), injected: a model stand-in in tests.
        sleep: waits a transient retry's delay in seconds (default: the runner's ``sleep``).
    """

    def __init__(self, runner: SagaRunner, config: RepairLoopConfig, repairer: Repairer, *,
                 sleep: Callable[[float], Any] | None = None):
        if not isinstance(config, RepairLoopConfig):
            raise RecoveryPolicyError(f"config must be a RepairLoopConfig, got {type(config).__name__}")
        self.runner = runner
        self.config = config
        self.repairer = repairer
        self.sleep = sleep if sleep is not None else runner.sleep

    # --- the fold --------------------------------------------------------------------------------------
    def _events(self) -> list[Event]:
        return list(self.runner.gate.log.events())

    def repairs(self) -> dict[str, SubTransactionRepairs]:
        """Every sub-transaction's recovery history, folded from the log now."""
        return fold_repairs(self._events())

    def structured_error(self, operation_id: str, fallback: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The service's structured answer to ``operation_id`` as the log holds it: the recorded
        outcome (with ``http_status``), or for an attempt left open by a retryable refusal (429,
        503) the last result recorded for it; ``fallback`` (the runner's summary) otherwise."""
        rec = self.runner.gate.record
        op = rec.operations.get(operation_id)
        if op is not None and op.outcome and op.outcome.get("status") == "failed":
            return {k: v for k, v in op.outcome.items() if k != "status"}
        if op is not None:
            att = op.attempts.get(op.current_attempt_id)
            seq = att.last_result_sequence if att is not None else None
            if seq is not None:
                for ev in self.runner.gate.log.events(seq, seq):
                    outcome = dict(getattr(ev.payload, "outcome", None) or {})
                    if outcome:
                        outcome.pop("status", None)
                        return outcome
        return dict(fallback or {"error": "failed"})

    def omega(self, sub_id: str, tool: str, error: Mapping[str, Any],
              history: SubTransactionRepairs | None = None) -> Omega:
        """Ω_t of sub-transaction ``sub_id`` failing with ``error`` (pure over the fold)."""
        runner, cfg = self.runner, self.config
        saga = runner.saga
        h = history or SubTransactionRepairs(sub_id)
        contract = runner.registry.contract(tool)
        committed = sorted((s for s in saga.steps.values() if s.state == "COMMITTED"), key=lambda s: s.index)
        sigma = []
        for s in committed:
            c = cfg.cost_of(s.tool)
            comp = s.compensator is not None
            sigma.append(CommittedStep(s.step_id, c.compensation_s if comp else 0.0,
                                       c.compensation_usd if comp else 0.0, c.forward_s, c.forward_usd))
        cfg.cost_of(tool)   # the failed tool must be declared too
        subs = self.repairs()
        charged_tokens = sum(x.charged("tokens") for x in subs.values())
        charged_usd = math.fsum(x.charged("usd") for x in subs.values())
        charged_steps = sum(x.charged("steps") for x in subs.values())
        rec = runner.gate.record
        model_tokens = sum(int((op.outcome or {}).get("input_tokens") or 0)
                           + int((op.outcome or {}).get("output_tokens") or 0)
                           for op in rec.operations.values() if op.kind == "model")
        budget = Budget(tokens_rem=max(0, int(cfg.tokens_ceiling - model_tokens - charged_tokens)),
                        steps_rem=max(0, int(cfg.steps_ceiling - len(saga.steps) - charged_steps)),
                        usd_rem=max(0.0, rec.budget.available_usd - charged_usd))
        failed = FailedStep(sub_id, tool, contract.tier, saga.phase == "COMMITTED",
                            repairs_done=h.repairs_done, prior_signatures=h.signatures, retries_done=h.retries_done)
        env = {"trajectory_id": runner.trajectory_id, "saga_id": runner.saga_id, "saga_state": saga.state,
               "committed_steps": len(committed)}
        return Omega(env, failed, dict(error), budget, tuple(sigma))

    def _policy(self) -> PolicyConfig:
        pol = self.config.policy
        return dataclasses.replace(pol, stats=_merge_stats(pol.stats, fold_repair_stats(self._events())))

    # --- the loop ----------------------------------------------------------------------------------------
    def step(self, tool: str, arguments: Mapping[str, Any], *, cost_bound_usd: float | None = None) -> dict[str, Any]:
        """Run forward step ``tool(arguments)`` under the recovery policy and return its output.

        Raises:
            RecoveryTerminated: the policy chose BACKWARD_ROLLBACK (the saga was unwound) or
                OPERATOR_ESCALATE (the trajectory was frozen).
            SagaPanicError: the unwind or the post-pivot escalation froze the trajectory.
            StepFailedError: the saga is not running (already unwinding or ended).
            RecoveryPolicyError: a tool without declared costs.
        """
        runner = self.runner
        args = dict(arguments)
        sub_id: str | None = None
        while True:
            op_id = runner.next_step_id
            sub_id = sub_id or op_id
            op = runner.gate.record.operations.get(op_id)
            if op is not None and op.kind == "tool" and op.tool == tool and op.arguments is not None:
                args = dict(op.arguments)   # on a re-run, the request the log holds (not a fresh sample)
            try:
                out = runner.step(tool, args, cost_bound_usd=cost_bound_usd)
            except StepFailedError as exc:
                # the saga runs forward in its preparation phase (RUNNING) and past the crossing (COMMITTED)
                if exc.step_id != op_id or runner.saga.state not in ("RUNNING", "COMMITTED"):
                    raise
                args = self._recover(sub_id, op_id, tool, args, exc)
                continue
            self._settle_repair(sub_id, success=True)
            return out

    def _settle_repair(self, sub_id: str, *, success: bool) -> None:
        """Record the outcome of the sub-transaction's last repair, once (counted from the log)."""
        h = self.repairs().get(sub_id)
        if h is None or not h.decisions or h.decisions[-1].directive != "FORWARD_REPAIR":
            return
        if len(h.outcomes) >= h.repairs_done:
            return
        d = h.decisions[-1]
        self.runner.gate.append(RepairOutcome(step_id=sub_id, failure_class=d.failure_class, remedy=d.remedy,
                                              success=success, error_signature=d.error_signature))

    def _recover(self, sub_id: str, op_id: str, tool: str, args: dict[str, Any],
                 exc: StepFailedError) -> dict[str, Any]:
        error = self.structured_error(op_id, exc.error)
        h = self.repairs().get(sub_id)
        recorded = h.decision_for(op_id) if h is not None else None
        if recorded is None:
            self._settle_repair(sub_id, success=False)   # the repaired attempt failed (once per repair)
            h = self.repairs().get(sub_id) or SubTransactionRepairs(sub_id)
            omega = self.omega(sub_id, tool, error, h)
            policy = self._policy()
            decision = decide(omega, policy, rng=random.Random(f"{self.config.seed}:{op_id}"))
            recorded = self._record(decision, op_id, policy, h)
        d = recorded
        loop = d.numbers.get("repair_loop") or {}
        if d.directive == "TRANSIENT_RETRY":
            delay = d.numbers.get("delay_s")
            self.sleep(float(delay) if isinstance(delay, (int, float)) else 0.0)
            return args
        if d.directive == "FORWARD_REPAIR":
            nxt = self.runner.gate.record.operations.get(self.runner.next_step_id)
            if nxt is not None and nxt.kind == "tool" and nxt.tool == tool and nxt.arguments is not None:
                return dict(nxt.arguments)   # the repaired request is already in the log
            remedy = next(r for r in self.config.policy.remedies if r.name == d.remedy)
            frame = RepairFrame(sub_id, tool, dict(args), dict(error), d.remedy, dict(remedy.detail),
                                int(loop.get("repair_number", 1)))
            new = self.repairer(frame)
            if new is None:   # no repair proposed: a failed repair, then the safe case (never a retry)
                self._settle_repair(sub_id, success=False)
                safe = "OPERATOR_ESCALATE" if self.runner.saga.phase == "COMMITTED" else "BACKWARD_ROLLBACK"
                self._stop(sub_id, tool, d, "the repairer proposed no repair", directive=safe)
            return dict(new)
        self._stop(sub_id, tool, d, d.reason)
        raise AssertionError("unreachable")   # pragma: no cover

    def _record(self, decision: RecoveryDecision, op_id: str, policy: PolicyConfig,
                h: SubTransactionRepairs) -> RecoveryDecided:
        loop: dict[str, Any] = {"attempt_operation_id": op_id, "attempt": len(h.decisions) + 1}
        if decision.directive == "FORWARD_REPAIR":
            costs = next(r.costs for r in policy.remedies if r.name == decision.remedy)
            loop["repair_number"] = h.repairs_done + 1
            loop["charged"] = {"tokens": costs.tokens, "usd": costs.usd, "s": costs.s, "steps": costs.steps}
        decision = dataclasses.replace(decision, numbers={**decision.numbers, "repair_loop": loop})
        payload = decision_event(decision)
        self.runner.gate.append(payload)   # durable (a barrier) before the directive is acted on
        return payload

    def _stop(self, sub_id: str, tool: str, d: RecoveryDecided, why: str, *, directive: str | None = None) -> None:
        """Apply BACKWARD_ROLLBACK (the unwind) or OPERATOR_ESCALATE (the freeze; past the pivot
        the unwind's POST_PIVOT_STALLED freeze) and raise :class:`RecoveryTerminated`. D(Ω) only
        escalates past the pivot; a pre-pivot escalation (not produced by the policy) freezes
        with the runner's COMPENSATION_CORRUPTED mode, the only other mode a freeze records."""
        runner = self.runner
        directive = directive or d.directive
        if directive == "BACKWARD_ROLLBACK" and runner.saga.phase != "COMMITTED":
            state = runner.unwind(f"recovery policy, gate {d.gate}: {why}")
            raise RecoveryTerminated(f"{sub_id} ({tool}): BACKWARD_ROLLBACK at gate {d.gate}: {why}; the saga is "
                                     f"{state}", step_id=sub_id, directive=directive, gate=d.gate, state=state)
        # OPERATOR_ESCALATE (or any stop past the pivot): the runner's freeze, never a rollback
        if runner.saga.phase == "COMMITTED":
            try:
                runner.unwind(f"recovery policy, gate {d.gate}: {why}")   # past the pivot: freezes, raises
            except SagaPanicError as exc:
                raise RecoveryTerminated(f"{sub_id} ({tool}): {directive} at gate {d.gate}: {why}; frozen as "
                                         f"incident {exc.incident.get('incident_id')}", step_id=sub_id,
                                         directive=directive, gate=d.gate, state="FROZEN",
                                         incident=exc.incident) from exc
        incident = runner.freeze("COMPENSATION_CORRUPTED" if runner.saga.phase != "COMMITTED"
                                 else "POST_PIVOT_STALLED", error={"error": why, "step_id": sub_id},
                                 failing_tool=tool, residue=[])
        raise RecoveryTerminated(f"{sub_id} ({tool}): {directive} at gate {d.gate}: {why}; frozen as incident "
                                 f"{incident.get('incident_id')}", step_id=sub_id, directive=directive,
                                 gate=d.gate, state="FROZEN", incident=incident)
