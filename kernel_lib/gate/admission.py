"""Continuation admission after a resume, in front of the dispatch gate (Durable Execution §11.5.4).

The decision itself is pure and lives in :mod:`kernel_lib.core.continuation` (:func:`evaluate`,
the check table, the value types). This module does what the decision asks for:

* :class:`ContinuationGate` evaluates a step against the dispatch gate's record and clock. A
  refusal is logged as an ``Authorized`` deny with every reason (and an admitted-but-unsent
  reservation is released unspent) before :class:`~kernel_lib.errors.AdmissionDenied` is
  raised; a withhold raises :class:`~kernel_lib.errors.DispatchWithheld` and logs nothing; an
  admitted step has its pinned or migrated versions logged, then runs through the
  :class:`~kernel_lib.gate.dispatch.DispatchGate` (eq. 1).
* :func:`record_version_transition` logs a pinned or migrated version key as a ``RuntimeInput``.

The pure names are re-exported here, so ``from kernel_lib.gate.admission import evaluate`` keeps
working.
"""

from __future__ import annotations

from typing import Any, Callable

from kernel_lib.errors import AdmissionDenied, ConfigError, DispatchWithheld
from kernel_lib.core.continuation import (
    CHECKS,
    VERSION_INPUT_PREFIX,
    AdmissionCheck,
    ContinuationDecision,
    Deployment,
    Mode,
    ProposedStep,
    Resolution,
    Verdict,
    VersionResolution,
    discarded_partial_streams,
    evaluate,
    recorded_versions,
    resolve_version,
    unsent_reservation,
)
from kernel_lib.core.events import Authorized, BudgetSettled, RuntimeInput
from kernel_lib.core.proposals import ModelCall, ModelReply, ToolProposal, decision_id
from kernel_lib.core.record import TrajectoryRecord
from kernel_lib.gate.dispatch import DispatchGate, ModelTransport, ToolTransport

__all__ = [
    "ContinuationGate", "record_version_transition",
    # re-exported from kernel_lib.core.continuation
    "Verdict", "Resolution", "Mode", "CHECKS", "ProposedStep", "Deployment", "AdmissionCheck", "VersionResolution",
    "ContinuationDecision", "VERSION_INPUT_PREFIX", "recorded_versions", "resolve_version", "unsent_reservation",
    "evaluate", "discarded_partial_streams",
]


def record_version_transition(gate: DispatchGate, resolution: VersionResolution, *, issuer: str) -> None:
    """Log a pinned or migrated version key as a ``RuntimeInput`` (kind ``config``), so the record
    knows which configuration later turns ran under and evaluations can tell them apart.

    Raises:
        ConfigError: the resolution is ``unchanged`` (nothing to record) or ``halt`` (no
            continuation under it).
    """
    if resolution.resolution not in ("pinned", "migrated"):
        raise ConfigError(f"{resolution.key}: only a pinned or migrated version is recorded as a transition, "
                          f"not {resolution.resolution!r}")
    value = {**resolution.to_dict(), "issuer": issuer}
    same = {k: value[k] for k in ("recorded", "current", "resolution", "migration_path")}
    for ri in gate.record.runtime_inputs:   # already logged: the boundary is on record once
        old = ri.get("value")
        if (ri.get("kind") == "config" and ri.get("name") == VERSION_INPUT_PREFIX + resolution.key
                and isinstance(old, dict) and all(old.get(k) == v for k, v in same.items())):
            return
    gate.append(RuntimeInput(kind="config", name=VERSION_INPUT_PREFIX + resolution.key, value=value))


# --- the gate in front of the dispatch gate ------------------------------------------------------


class ContinuationGate:
    """Continuation admission in front of a :class:`DispatchGate` for a resumed trajectory.

    Args:
        gate: the dispatch gate of the current owner (its record is the resumed record).
        deployment: the conditions now (versions, migrations, capacity).
        clock: wall clock in seconds since the epoch (default: the gate's clock).
        issuer: who records version transitions (e.g. the worker's owner id).

    :meth:`run_tool` / :meth:`run_model` evaluate the step; on ``refuse`` they log an
    ``Authorized`` deny carrying every reason and raise :class:`AdmissionDenied`; on ``withhold``
    they raise :class:`DispatchWithheld` and log nothing (the step is judged again later); on
    ``admit`` they log each pinned or migrated version once and run the step through the gate.
    """

    def __init__(self, gate: DispatchGate, deployment: Deployment | None = None, *,
                 clock: Callable[[], float] | None = None, issuer: str = "resume"):
        if not isinstance(gate, DispatchGate):
            raise ConfigError(f"gate must be a DispatchGate, got {type(gate).__name__}")
        if deployment is not None and not isinstance(deployment, Deployment):
            raise ConfigError(f"deployment must be a Deployment, got {type(deployment).__name__}")
        self.gate = gate
        self.deployment = deployment or Deployment()
        self.clock = clock or gate.clock
        self.issuer = issuer
        self.decisions: list[ContinuationDecision] = []

    def evaluate(self, step: ProposedStep) -> ContinuationDecision:
        """:func:`evaluate` against the gate's current record and this gate's clock."""
        return evaluate(self.gate.record, step, policy=self.gate.policy, now_unix_s=self.clock(),
                        deployment=self.deployment)

    def _judge(self, step: ProposedStep) -> ContinuationDecision:
        d = self.evaluate(step)
        self.decisions.append(d)
        if d.verdict == "refuse":
            unsent = unsent_reservation(self.gate.record, step)   # before the deny changes its status
            own = self.gate.record.operations.get(step.step_id)
            if own is not None and own.kind != step.kind:   # a deny under a clashing id would not fold: log nothing
                raise AdmissionDenied(f"{step.step_id} refused at continuation admission (not logged: the id "
                                      f"belongs to a {own.kind} operation): " + "; ".join(d.reasons()))
            self.gate.append(Authorized(decision_id=decision_id(step.step_id, step.attempt_id), subject_id=step.step_id,
                                         subject_kind=step.kind, policy_version=self.gate.policy.policy_version,
                                         grant_id=step.grant_id, decision="deny",
                                         reason="continuation admission: " + "; ".join(d.reasons())))
            if unsent is not None:   # admitted, never sent (complete prefix): nothing was charged
                self.gate.append(BudgetSettled(reservation_id=unsent, subject_id=step.step_id, actual_usd=0.0,
                                                final=True, evidence="released: the admitted attempt was never sent "
                                                "and continuation admission refused it"))
            raise AdmissionDenied(f"{step.step_id} refused at continuation admission: " + "; ".join(d.reasons()))
        if d.verdict == "withhold":
            raise DispatchWithheld(f"{step.step_id} withheld at continuation admission: " + "; ".join(d.reasons()))
        for r in d.versions:
            if r.resolution in ("pinned", "migrated"):
                record_version_transition(self.gate, r, issuer=self.issuer)
        return d

    def run_tool(self, proposal: ToolProposal, transport: ToolTransport, **step: Any) -> TrajectoryRecord:
        """Judge, then run ``proposal`` through the dispatch gate (``step``: the extra
        :class:`ProposedStep` fields: depends_on, read_only, finalization, resources,
        source_invocation_id).

        Raises:
            AdmissionDenied: refused here (logged) or by the dispatch gate's own admission.
            DispatchWithheld: withheld here, or by the dispatch-time recheck.
        """
        d = self._judge(ProposedStep.from_tool(proposal, **step))
        return self.gate.run_tool(proposal, transport, finalization=d.step.finalization)

    def run_model(self, call: ModelCall, transport: ModelTransport, **step: Any) -> ModelReply:
        """Judge, then run the model call through the dispatch gate; raises as :meth:`run_tool`."""
        d = self._judge(ProposedStep.from_model(call, **step))
        return self.gate.run_model(call, transport, finalization=d.step.finalization)
