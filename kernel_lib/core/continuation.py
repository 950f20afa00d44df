"""Continuation admission after a resume, as pure decisions (Durable Execution §11.5.4).

A rebuilt record says what happened; it does not say what may happen next. Before a recovered
trajectory does anything new, :func:`evaluate` weighs one proposed step against the record *and*
against the conditions of now (clock, deployment, capacity), and returns a
:class:`ContinuationDecision` that lists every check with its outcome. Outcomes:

* ``admit``: every check passed; the step may go to the dispatch gate (which still runs its own
  dispatch-time recheck, §11.3.2).
* ``withhold``: a condition that can change holds it back (an in-doubt dependency, a pause, a
  pending approval, no free dispatch slot, outstanding reservations that must settle first). Try
  again when the condition changes; nothing was reserved.
* ``refuse``: the step cannot run as proposed (no grant, a void approval, an operating deadline
  that admits only finalization, a budget it cannot fit even with every reservation settled, a
  version change with no pin or migration, a proposal taken from a discarded partial stream).

The checks, in the order they are reported (a step is judged on all of them, so a student sees
every reason at once, not only the first):

=================  ===========================================================================
check              rule
=================  ===========================================================================
``identity``       the ids the step would log are free: not another kind's operation id, not an
                   attempt (or invocation) that already has a durable intent, not a reservation
                   already made (a refused or settled attempt is retried under a new attempt id)
``control``        the trajectory is RUNNING; PAUSED or AWAITING_APPROVAL withhold (leaving
                   PAUSED needs the guarded ``ControlChanged`` transition); a terminal state or
                   a trajectory that never started refuses
``deadline``       past ``deadline_unix_s`` only ``finalization=True`` steps are admitted; past
                   ``finalization_deadline_unix_s`` nothing is
``source``         a step proposed by a model invocation needs that invocation's *complete*
                   reply; a partial stream recovered from the log is discarded, never promoted
``dependencies``   every operation the step depends on (its own ``depends_on`` and the
                   ``depends_on`` of its entry in the logged plan) is established with no attempt
                   still in doubt; one in doubt or not yet run withholds; a denied one, a
                   dependency cycle or an unreadable plan entry refuses
``in_doubt``       a step that is not read-only and touches a resource an in-doubt operation
                   used (its ``input_ref``, or a listed resource) is withheld; so is a new
                   attempt of an in-doubt operation (reconciliation settles it first). An
                   independent read-only step passes
``grant``          the capability grant allows the subject (:class:`AdmissionPolicy`)
``approval``       no approval holds the step back (:meth:`TrajectoryRecord.approval_blocker`
                   at ``now_unix_s``): pending withholds, void or expired refuses
``capacity``       the deployment has a free dispatch slot
``budget``         consumption + outstanding reservations + the step's bound + finalization
                   reserve <= ceiling (a finalization step may draw on the reserve). An
                   admitted but unsent attempt keeps its reservation: it passes without
                   reserving again when its bound is within the held amount and the rule still
                   holds with that reservation counted once
``versions``       each version the step runs under (model, prompt template, tool schema) is
                   unchanged, pinned to the recorded one, or migrated by a registered path;
                   otherwise continuation halts
=================  ===========================================================================

Version keys are strings: ``"model"``, ``"prompt_template"`` and ``"tool_schema:<tool>"``. The
versions a trajectory ran under are ``TaskStarted.config`` overlaid by every transition logged
with :func:`kernel_lib.gate.admission.record_version_transition` (a ``RuntimeInput`` of kind
``config`` named ``version:<key>``, so that replay and evaluation see the boundary between
configurations).

Everything here is a value or a function of values: :func:`evaluate` takes the clock reading as
an argument and appends nothing. Each row of the table is one function (``_check_<name>``) that
returns its :class:`AdmissionCheck`; :func:`evaluate` runs them in table order. The effects live
one layer up, in :mod:`kernel_lib.gate.admission`: ``ContinuationGate`` logs a refusal as an
``Authorized`` deny with its reasons, raises ``DispatchWithheld`` on a withhold (logging nothing)
and runs an admitted step through the dispatch gate (eq. 1); ``record_version_transition`` logs
a pinned or migrated version.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Mapping

from kernel_lib.errors import ConfigError
from kernel_lib.core.money import micro_to_usd, usd_to_micro
from kernel_lib.core.proposals import (
    REPEAT_SAFE_CONTRACTS,
    AdmissionPolicy,
    ModelCall,
    ToolProposal,
    reservation_id,
)
from kernel_lib.core.record import TERMINAL_STATES, TrajectoryRecord

__all__ = [
    "Verdict", "Resolution", "Mode", "CHECKS", "ProposedStep", "Deployment", "AdmissionCheck", "VersionResolution",
    "ContinuationDecision", "VERSION_INPUT_PREFIX", "recorded_versions", "resolve_version", "unsent_reservation",
    "evaluate", "discarded_partial_streams",
]

Verdict = Literal["admit", "withhold", "refuse"]
Resolution = Literal["unchanged", "pinned", "migrated", "halt"]
Mode = Literal["normal", "finalization_only", "closed"]

#: Check names in report order.
CHECKS = ("identity", "control", "deadline", "source", "dependencies", "in_doubt", "grant", "approval", "capacity",
          "budget", "versions")
_RANK = {"admit": 0, "withhold": 1, "refuse": 2}


def _text(name: str, v: Any) -> str:
    if not isinstance(v, str) or not v:
        raise ConfigError(f"{name} must be a non-empty string, got {v!r}")
    return v


def _names(name: str, v: Any) -> tuple[str, ...]:
    """A tuple of non-empty strings from a list or tuple; a bare string is refused (it would
    otherwise be read as its characters)."""
    if not isinstance(v, (list, tuple, set, frozenset)):
        raise ConfigError(f"{name} must be a list, tuple or set of names, got {type(v).__name__} {v!r:.80}")
    for x in v:
        _text(f"each entry of {name}", x)
    return tuple(v)


def _finite(name: str, v: Any) -> float:
    """``v`` as a finite float; bools, non-numbers and values beyond float range are refused."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ConfigError(f"{name} must be a number, got {type(v).__name__} {v!r:.80}")
    try:
        f = float(v)
    except OverflowError:
        raise ConfigError(f"{name} is beyond the range of a float") from None
    if not math.isfinite(f):
        raise ConfigError(f"{name} must be finite, got {v!r}")
    return f


def _usd_amount(name: str, v: Any) -> float:
    f = _finite(name, v)
    if f < 0:
        raise ConfigError(f"{name} must be >= 0, got {v!r}")
    return f


@dataclass(frozen=True)
class ProposedStep:
    """One step a recovered trajectory wants to take next.

    Attributes:
        step_id: the operation id (tool) or invocation id (model) the step would run under.
        kind: ``"tool"`` or ``"model"``.
        subject: the tool name, or the model name.
        grant_id: the capability grant it runs under.
        bound_usd: its bounded liability (the reservation it needs), USD, finite and >= 0.
        attempt_id: the transport attempt id (tool steps).
        depends_on: operation ids whose settled outcome this step needs.
        read_only: the step changes nothing outside the trajectory (an observation or a query).
        finalization: the step belongs to the finalization routine (it may run after the
            operating deadline and may draw on the finalization reserve).
        resources: names of what the step reads or changes (e.g. a workspace snapshot ref); a
            non-read-only step sharing one with an in-doubt operation is withheld.
        source_invocation_id: the model invocation whose reply proposed this step, if any.

    Raises:
        ConfigError: an empty id, an unknown kind, or a bound that is not a finite number >= 0.
    """

    step_id: str
    kind: Literal["tool", "model"]
    subject: str
    grant_id: str
    bound_usd: float
    attempt_id: str | None = None
    depends_on: tuple[str, ...] = ()
    read_only: bool = False
    finalization: bool = False
    resources: tuple[str, ...] = ()
    source_invocation_id: str | None = None

    def __post_init__(self) -> None:
        _text("step_id", self.step_id)
        _text("subject", self.subject)
        _text("grant_id", self.grant_id)
        if self.kind not in ("tool", "model"):
            raise ConfigError(f"kind must be 'tool' or 'model', got {self.kind!r}")
        object.__setattr__(self, "bound_usd", _usd_amount(f"{self.step_id}: bound_usd", self.bound_usd))
        if self.kind == "tool":
            _text(f"{self.step_id}: attempt_id (a tool step needs its transport attempt id)", self.attempt_id)
        elif self.attempt_id is not None:
            raise ConfigError(f"{self.step_id}: a model step has no attempt id (its invocation id is its identity)")
        for name in ("read_only", "finalization"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{self.step_id}: {name} must be True or False, got {getattr(self, name)!r}")
        if self.source_invocation_id is not None:
            _text(f"{self.step_id}: source_invocation_id", self.source_invocation_id)
        object.__setattr__(self, "depends_on", _names(f"{self.step_id}: depends_on", self.depends_on))
        object.__setattr__(self, "resources", _names(f"{self.step_id}: resources", self.resources))

    @classmethod
    def from_tool(cls, proposal: ToolProposal, **kw: Any) -> "ProposedStep":
        """The step for a tool proposal (``kw``: depends_on, read_only, finalization, resources,
        source_invocation_id). The proposal's ``input_ref`` counts as a resource it touches."""
        res = tuple(kw.pop("resources", ())) + ((proposal.input_ref,) if proposal.input_ref else ())
        read_only = kw.pop("read_only", proposal.repeat_contract == "read_only")
        return cls(step_id=proposal.operation_id, kind="tool", subject=proposal.tool, grant_id=proposal.grant_id,
                   bound_usd=proposal.cost_bound_usd, attempt_id=proposal.attempt_id, resources=res,
                   read_only=read_only, **kw)

    @classmethod
    def from_model(cls, call: ModelCall, **kw: Any) -> "ProposedStep":
        """The step for a model call (a model call reads; it changes nothing outside)."""
        kw.setdefault("read_only", True)
        return cls(step_id=call.invocation_id, kind="model", subject=call.model, grant_id=call.grant_id,
                   bound_usd=call.cost_bound_usd, **kw)

    def version_keys(self) -> tuple[str, ...]:
        """The version keys this step runs under."""
        return ("model", "prompt_template") if self.kind == "model" else (f"tool_schema:{self.subject}",)


@dataclass(frozen=True)
class Deployment:
    """The conditions a resume meets now, which may differ from when the record was written.

    Attributes:
        versions: version key → the version deployed now. A key missing here is taken as
            unchanged since the record.
        servable: version key → older versions that can still be served (a step can be pinned
            to one of them).
        migrations: ``(key, from_version, to_version)`` → the verified migration path (a name or
            a reference to its validation evidence).
        free_dispatch_slots: how many dispatches the cluster can take now (>= 0).

    Raises:
        ConfigError: a negative or non-integer slot count, or a malformed mapping.
    """

    versions: Mapping[str, str] = field(default_factory=dict)
    servable: Mapping[str, Iterable[str]] = field(default_factory=dict)
    migrations: Mapping[tuple[str, str, str], str] = field(default_factory=dict)
    free_dispatch_slots: int = 1

    def __post_init__(self) -> None:
        s = self.free_dispatch_slots
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            raise ConfigError(f"free_dispatch_slots must be an integer >= 0, got {s!r}")
        for name in ("versions", "servable", "migrations"):
            if not isinstance(getattr(self, name), Mapping):
                raise ConfigError(f"{name} must be a mapping, got {type(getattr(self, name)).__name__}")
        for k, v in self.versions.items():
            _text("a version key", k)
            _text(f"versions[{k!r}]", v)
        servable = {}
        for k, v in self.servable.items():
            _text("a version key", k)
            servable[k] = frozenset(_names(f"servable[{k!r}] (the versions that can still be served)", v))
        object.__setattr__(self, "servable", servable)
        for key, path in self.migrations.items():
            if not (isinstance(key, tuple) and len(key) == 3 and all(isinstance(x, str) and x for x in key)):
                raise ConfigError(f"a migration key is (version key, from_version, to_version), got {key!r}")
            _text(f"the migration path for {key!r} (a name or a reference to its validation evidence)", path)


@dataclass(frozen=True)
class AdmissionCheck:
    """One check of an evaluation: its name, outcome and the reason in words."""

    name: str
    outcome: Verdict
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "outcome": self.outcome, "reason": self.reason}


@dataclass(frozen=True)
class VersionResolution:
    """How one version key is handled for a step: ``unchanged``, ``pinned`` (to ``recorded``),
    ``migrated`` (``recorded`` → ``current`` by ``migration_path``) or ``halt``."""

    key: str
    recorded: str | None
    current: str | None
    resolution: Resolution
    migration_path: str | None = None

    @property
    def runs_under(self) -> str | None:
        """The version the step would run under (None when it must halt)."""
        return {"unchanged": self.recorded, "pinned": self.recorded, "migrated": self.current}.get(self.resolution)

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "recorded": self.recorded, "current": self.current, "resolution": self.resolution,
                "migration_path": self.migration_path, "runs_under": self.runs_under}


@dataclass(frozen=True)
class ContinuationDecision:
    """The result of :func:`evaluate` for one step.

    ``verdict`` is the strictest outcome over ``checks`` (refuse > withhold > admit).
    ``reuses_reservation`` names the reservation an admitted-but-unsent attempt keeps (no new
    reservation is made for it); ``versions`` says how each version key is resolved; ``mode`` is
    ``"normal"``, ``"finalization_only"`` (operating deadline passed) or ``"closed"`` (finalization
    deadline passed too).
    """

    step: ProposedStep
    verdict: Verdict
    checks: tuple[AdmissionCheck, ...]
    mode: Mode
    reuses_reservation: str | None
    versions: tuple[VersionResolution, ...]

    @property
    def admitted(self) -> bool:
        return self.verdict == "admit"

    def reasons(self) -> list[str]:
        """The reasons of every check that did not pass, in check order."""
        return [f"{c.name}: {c.reason}" for c in self.checks if c.outcome != "admit"]

    def to_dict(self) -> dict[str, Any]:
        return {"step_id": self.step.step_id, "verdict": self.verdict, "mode": self.mode,
                "reuses_reservation": self.reuses_reservation, "checks": [c.to_dict() for c in self.checks],
                "versions": [v.to_dict() for v in self.versions]}


# --- versions ------------------------------------------------------------------------------------

VERSION_INPUT_PREFIX = "version:"


def recorded_versions(record: TrajectoryRecord) -> dict[str, str]:
    """Version key → the version the trajectory last ran under: ``TaskStarted.config`` overlaid,
    in log order, by every logged transition (see
    :func:`kernel_lib.gate.admission.record_version_transition`)."""
    out = dict((record.task or {}).get("config", {}) or {})
    for ri in record.runtime_inputs:
        name = ri.get("name", "")
        if ri.get("kind") == "config" and isinstance(name, str) and name.startswith(VERSION_INPUT_PREFIX):
            value = ri.get("value")
            if isinstance(value, dict) and isinstance(value.get("runs_under"), str):
                out[name[len(VERSION_INPUT_PREFIX):]] = value["runs_under"]
    return out


def resolve_version(key: str, recorded: str | None, deployment: Deployment) -> VersionResolution:
    """How ``key`` is handled: unchanged, pinned to the recorded version (still servable),
    migrated (a registered path from recorded to current), or halt (none of these)."""
    current = deployment.versions.get(key, recorded)
    if recorded is None or current == recorded:
        return VersionResolution(key, recorded, current, "unchanged")
    if recorded in deployment.servable.get(key, ()):
        return VersionResolution(key, recorded, current, "pinned")
    path = deployment.migrations.get((key, recorded, current))
    if path:
        return VersionResolution(key, recorded, current, "migrated", path)
    return VersionResolution(key, recorded, current, "halt")


# --- what the checks read from the record --------------------------------------------------------


def _plan_dependencies(record: TrajectoryRecord, step_id: str) -> tuple[tuple[str, ...], list[str]]:
    """The ``depends_on`` of ``step_id``'s entries in the logged plan, and the problems found in
    them. A bare string is read as one dependency (the stricter reading); any other shape cannot
    be interpreted and is reported, so the step is refused rather than run on a guess."""
    deps: list[str] = []
    problems: list[str] = []
    for s in record.plan_steps:
        if not (isinstance(s, dict) and s.get("step_id") == step_id):
            continue
        d = s.get("depends_on", [])
        if isinstance(d, str):
            d = [d]
        if not isinstance(d, list) or not all(isinstance(x, str) and x for x in d):
            problems.append(f"the logged plan gives {step_id} a depends_on that is not a list of operation ids "
                            f"({d!r:.80}); its dependencies cannot be proven")
            continue
        deps += d
    return tuple(deps), problems


def _plan_graph(record: TrajectoryRecord) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for s in record.plan_steps:
        if isinstance(s, dict) and isinstance(s.get("step_id"), str):
            d = s.get("depends_on", [])
            d = [d] if isinstance(d, str) else d
            if isinstance(d, list):
                graph.setdefault(s["step_id"], set()).update(x for x in d if isinstance(x, str))
    return graph


def _cycle_through(step_id: str, deps: tuple[str, ...], graph: dict[str, set[str]]) -> list[str] | None:
    """A dependency path from ``step_id`` back to itself (through ``deps`` and the plan), or None."""
    stack = [(d, [step_id, d]) for d in deps]
    seen: set[str] = set()
    while stack:
        node, path = stack.pop()
        if node == step_id:
            return path
        if node in seen:
            continue
        seen.add(node)
        stack.extend((n, path + [n]) for n in graph.get(node, ()))
    return None


def _unsettled_attempts(record: TrajectoryRecord, op_id: str) -> list[str]:
    op = record.operations.get(op_id)
    return [] if op is None else [a.attempt_id for a in op.attempts.values() if a.in_doubt]


def unsent_reservation(record: TrajectoryRecord, step: ProposedStep) -> str | None:
    """The reservation id an admitted, definitely unsent attempt of ``step`` still holds, or None.

    Such an attempt has an ``Authorized`` allow and a live ``BudgetReserved`` but no durable
    intent, so nothing was sent: a continuation may keep the reservation, and a refusal releases
    it unspent (§11.5.4).
    """
    op = record.operations.get(step.step_id)
    if op is None or op.status != "admitted":
        return None
    rid = reservation_id(step.step_id, step.attempt_id if step.kind == "tool" else None)
    held = record.budget.reservations.get(rid)
    if held is None or held.released:
        return None
    att = op.attempts.get(step.attempt_id or step.step_id)
    return rid if att is None or att.intent_sequence is None else None


# --- one function per check (the rows of the module table, in order) -----------------------------


def _check_identity(record: TrajectoryRecord, step: ProposedStep, reusable: str | None) -> AdmissionCheck:
    """``identity``: the ids the step would log must not clash with what the log holds.
    ``reusable`` is :func:`unsent_reservation` for the step."""
    own = record.operations.get(step.step_id)
    rid = reservation_id(step.step_id, step.attempt_id)
    prior = record.budget.reservations.get(rid)
    if own is not None and own.kind != step.kind:
        return AdmissionCheck("identity", "refuse", f"{step.step_id} is a {own.kind} operation in the log; a "
                                                    f"{step.kind} step needs an id of its own")
    if step.kind == "model" and own is not None and reusable is None and (
            own.attempts.get(step.step_id) is not None or own.status in ("in_doubt", "established")):
        return AdmissionCheck("identity", "refuse", f"invocation {step.step_id} was already built or decided; asking "
                                                    "the model again needs a fresh invocation id")
    if step.kind == "tool" and own is not None and step.attempt_id in own.attempts \
            and own.attempts[step.attempt_id].intent_sequence is not None:
        return AdmissionCheck("identity", "refuse", f"{step.step_id}/{step.attempt_id} already has a durable intent; "
                                                    "another try is a new attempt id (and only if the endpoint's "
                                                    "repeat contract allows it)")
    if prior is not None and reusable is None:
        return AdmissionCheck("identity", "refuse", f"reservation {rid} was already made and is "
                                                    f"{'released' if prior.released else 'in use'}; a new try needs "
                                                    "a new attempt id")
    return AdmissionCheck("identity", "admit", "its ids are new to the log" if own is None else
                          f"continues {step.step_id} under ids the log allows")


def _check_control(record: TrajectoryRecord) -> AdmissionCheck:
    """``control``: RUNNING admits; PAUSED and AWAITING_APPROVAL withhold; a terminal state or a
    trajectory that never started refuses."""
    state = record.control_state
    if state == "RUNNING":
        return AdmissionCheck("control", "admit", "the trajectory is RUNNING")
    if state in TERMINAL_STATES:
        return AdmissionCheck("control", "refuse", f"the trajectory is {state}, a terminal state; it stays terminal "
                                                   "after a resume")
    if state == "NOT_STARTED":
        return AdmissionCheck("control", "refuse", "the trajectory has not started (no TaskStarted in the record)")
    if state == "PAUSED":
        return AdmissionCheck("control", "withhold", "the trajectory recovered PAUSED and stays paused; leaving PAUSED "
                                                     "takes the guarded ControlChanged(RUNNING) transition by an "
                                                     "authorized issuer")
    return AdmissionCheck("control", "withhold", f"the trajectory is {state}; new work waits until it is RUNNING again")


def _check_deadline(record: TrajectoryRecord, step: ProposedStep, now_unix_s: float) -> tuple[AdmissionCheck, Mode]:
    """``deadline``: the check and the mode the deadlines put the trajectory in at ``now_unix_s``."""
    task = record.task or {}
    deadline, fin_deadline = task.get("deadline_unix_s"), task.get("finalization_deadline_unix_s")
    if fin_deadline is not None and now_unix_s > fin_deadline:
        return AdmissionCheck("deadline", "refuse", f"the finalization deadline ({fin_deadline:.3f}) has passed (now "
                                                    f"{now_unix_s:.3f}); nothing more is admitted"), "closed"
    if deadline is not None and now_unix_s > deadline:
        if step.finalization:
            check = AdmissionCheck("deadline", "admit", f"the operating deadline ({deadline:.3f}) has passed; this is "
                                                        "finalization work, which the declared reserve is for")
        else:
            check = AdmissionCheck("deadline", "refuse", f"the operating deadline ({deadline:.3f}) passed "
                                                         f"{now_unix_s - deadline:.3f} s ago: only finalization work "
                                                         "is admitted now, whatever budget remains")
        return check, "finalization_only"
    return AdmissionCheck("deadline", "admit", "no deadline has passed" if deadline is None
                          else f"{deadline - now_unix_s:.3f} s left before the operating deadline"), "normal"


def _check_source(record: TrajectoryRecord, step: ProposedStep) -> AdmissionCheck:
    """``source``: a step taken from a model reply needs that reply complete; a partial stream is
    discarded."""
    src = step.source_invocation_id
    if src is None:
        return AdmissionCheck("source", "admit", "not taken from a model reply")
    op = record.operations.get(src)
    if op is None or op.kind != "model":
        return AdmissionCheck("source", "refuse", f"{src} is not a model invocation in the record")
    if op.status == "established":
        return AdmissionCheck("source", "admit", f"proposed by the complete reply of {src}")
    att = op.attempts.get(src)
    seen = att.last_result_status if att else None
    return AdmissionCheck("source", "refuse", f"{src} has no complete reply (last: {seen or 'none'}); a partial "
                                              "stream recovered from the log is discarded, not promoted: prompt "
                                              "again under a new invocation id")


def _check_dependencies(record: TrajectoryRecord, step: ProposedStep) -> AdmissionCheck:
    """``dependencies``: the step's own and its plan entry's ``depends_on``, each settled; the
    strictest outcome over them, with every reason joined."""
    plan_deps, plan_problems = _plan_dependencies(record, step.step_id)
    deps = tuple(dict.fromkeys(step.depends_on + plan_deps))
    dep_out: list[tuple[Verdict, str]] = [("refuse", p) for p in plan_problems]
    cycle = _cycle_through(step.step_id, deps, _plan_graph(record))
    if cycle is not None:
        dep_out.append(("refuse", "its dependencies lead back to itself (" + " -> ".join(cycle) + "); the plan must "
                                  "change"))
    for d in deps:
        op = record.operations.get(d)
        unsettled = _unsettled_attempts(record, d)
        if d == step.step_id:
            continue   # reported as a cycle
        if op is None or op.status in ("proposed", "admitted", "withheld"):   # withheld: recorded never sent
            dep_out.append(("withhold", f"{d} has not run yet"))
        elif op.status == "in_doubt":
            dep_out.append(("withhold", f"{d} is in doubt; work that depends on it waits for reconciliation"))
        elif op.status == "denied":
            dep_out.append(("refuse", f"{d} was denied; the plan must change before this step can run"))
        elif unsettled:
            dep_out.append(("withhold", f"{d} is established, but its attempt(s) {', '.join(unsettled)} are still in "
                                        "doubt; their effects are unknown"))
    if not deps and not dep_out:
        return AdmissionCheck("dependencies", "admit", "depends on no other operation")
    if not dep_out:
        return AdmissionCheck("dependencies", "admit", f"{', '.join(deps)} established")
    worst = max((o for o, _ in dep_out), key=_RANK.__getitem__)
    return AdmissionCheck("dependencies", worst, "; ".join(r for _, r in dep_out))


def _check_in_doubt(record: TrajectoryRecord, step: ProposedStep) -> AdmissionCheck:
    """``in_doubt``: a new attempt of an in-doubt operation, or a step that changes what an
    in-doubt operation used, waits for reconciliation."""
    own = record.operations.get(step.step_id)
    touching = []
    if not step.read_only and step.resources:
        wanted = set(step.resources)
        for k, op in record.operations.items():
            if k != step.step_id and op.kind == "tool" and op.input_ref in wanted and _unsettled_attempts(record, k):
                touching.append(f"{k} (on {op.input_ref})")
    if own is not None and own.kind == step.kind and own.status == "in_doubt" and not (
            step.kind == "tool" and step.attempt_id not in own.attempts
            and own.repeat_contract in REPEAT_SAFE_CONTRACTS):
        return AdmissionCheck("in_doubt", "withhold", f"{step.step_id} itself is in doubt (contract "
                                                      f"{own.repeat_contract!r}); reconciliation settles it before "
                                                      "anything re-runs it")
    if touching:
        return AdmissionCheck("in_doubt", "withhold", "changes what in-doubt " + ", ".join(touching) + " used; it "
                                                      "waits until reconciliation settles that")
    return AdmissionCheck("in_doubt", "admit", "read-only and independent of unsettled effects" if step.read_only
                          else "touches nothing an in-doubt operation used")


def _check_grant(record: TrajectoryRecord, step: ProposedStep, policy: AdmissionPolicy) -> AdmissionCheck:
    """``grant``: the capability grant allows the subject."""
    ok, why = policy.authorize(record, step.grant_id, step.subject)
    return AdmissionCheck("grant", "admit" if ok else "refuse", why)


def _check_approval(record: TrajectoryRecord, step: ProposedStep, now_unix_s: float) -> AdmissionCheck:
    """``approval``: no approval holds the step at ``now_unix_s``; pending withholds, void or
    expired refuses."""
    blocker = record.approval_blocker(step.step_id, now_unix_s)
    if blocker is None:
        return AdmissionCheck("approval", "admit", "no approval holds it")
    return AdmissionCheck("approval", "withhold" if record.approval_pending(step.step_id, now_unix_s) else "refuse",
                          blocker)


def _check_capacity(deployment: Deployment) -> AdmissionCheck:
    """``capacity``: the deployment has a free dispatch slot."""
    if deployment.free_dispatch_slots > 0:
        return AdmissionCheck("capacity", "admit", f"{deployment.free_dispatch_slots} dispatch slot(s) free")
    return AdmissionCheck("capacity", "withhold", "no free dispatch slot in the cluster now")


def _check_budget(record: TrajectoryRecord, step: ProposedStep,
                  reusable: str | None) -> tuple[AdmissionCheck, str | None]:
    """``budget``: the rule of the module table in integer micro-dollars (the figures in the
    reasons are USD). Returns the check and the reservation the step keeps (``reusable`` when it
    still fits under it, else None)."""
    b = record.budget
    consumed, outstanding, ceiling = (b.actual_consumption_micro_usd, b.outstanding_reservations_micro_usd,
                                      b.ceiling_micro_usd)
    reserve = 0 if step.finalization else b.finalization_reserve_micro_usd
    if reusable is not None:
        held = b.reservations[reusable]
        need = consumed + outstanding + reserve   # the held bound is in outstanding
        if usd_to_micro(step.bound_usd, "up") > held.amount_micro_usd:
            return AdmissionCheck("budget", "refuse", f"admitted with a bound of {held.amount_usd:g} USD under "
                                                      f"{reusable}; a bound of {step.bound_usd:g} USD needs a new "
                                                      "attempt id"), None
        if need > ceiling:
            others = outstanding - held.outstanding_micro_usd
            return AdmissionCheck(
                "budget", "withhold" if need - others <= ceiling else "refuse",
                f"keeps {reusable}, but consumption {b.actual_consumption_usd:.4f} + outstanding "
                f"{b.outstanding_reservations_usd:.4f} (its own {held.outstanding_usd:.4f} included) + reserve "
                f"{micro_to_usd(reserve):.4f} = {micro_to_usd(need):.4f} USD is over the ceiling {b.ceiling_usd:.4f} "
                "(usage beyond a bound since the admission)"), None
        return AdmissionCheck("budget", "admit", f"admitted before the crash and never sent: keeps {reusable} "
                                                 f"({held.amount_usd:g} USD) and reserves nothing again"), reusable
    need = consumed + outstanding + usd_to_micro(step.bound_usd, "up") + reserve
    figures = (f"consumption {b.actual_consumption_usd:.4f} + outstanding {b.outstanding_reservations_usd:.4f} "
               f"+ bound {step.bound_usd:.4f} + reserve {micro_to_usd(reserve):.4f} = {micro_to_usd(need):.4f} USD "
               f"against the ceiling {b.ceiling_usd:.4f}")
    if need <= ceiling:
        return AdmissionCheck("budget", "admit",
                              figures + (" (finalization work may use the reserve)" if step.finalization else "")), None
    if need - outstanding <= ceiling:
        return AdmissionCheck("budget", "withhold", figures + "; it could fit only if the outstanding reservations "
                                                              "settle below their bounds (it fits if all are released "
                                                              "unspent)"), None
    return AdmissionCheck("budget", "refuse", figures + "; it does not fit even with every reservation settled"), None


def _check_versions(record: TrajectoryRecord, step: ProposedStep,
                    deployment: Deployment) -> tuple[AdmissionCheck, tuple[VersionResolution, ...]]:
    """``versions``: the check and how each of the step's version keys is resolved."""
    rec_v = recorded_versions(record)
    res = tuple(resolve_version(k, rec_v.get(k), deployment) for k in step.version_keys())
    halted = [r for r in res if r.resolution == "halt"]
    if halted:
        return AdmissionCheck("versions", "refuse", "; ".join(
            f"{r.key} moved from {r.recorded} to {r.current} with no servable pin and no verified migration: "
            "continuation halts" for r in halted)), res
    moved = [f"{r.key} {r.resolution}" + (f" via {r.migration_path}" if r.migration_path else f" at {r.recorded}")
             for r in res if r.resolution != "unchanged"]
    return AdmissionCheck("versions", "admit",
                          "; ".join(moved) if moved else "versions unchanged since the record"), res


# --- the evaluation ------------------------------------------------------------------------------


def evaluate(record: TrajectoryRecord, step: ProposedStep, *, policy: AdmissionPolicy, now_unix_s: float,
             deployment: Deployment | None = None) -> ContinuationDecision:
    """Judge ``step`` against ``record`` and the conditions of now (§11.5.4); see the module table.

    Every check runs (in :data:`CHECKS` order), so the decision carries every reason at once.

    Args:
        record: the record the resume rebuilt (folded, reconciled).
        step: the proposed step.
        policy: the admission policy (capability grants).
        now_unix_s: the wall clock now, seconds since the epoch (injected; the record holds none).
        deployment: current versions, servable versions, migrations and capacity (default: nothing
            changed, one free slot).

    Returns:
        A :class:`ContinuationDecision`; nothing is appended or reserved.

    Raises:
        ConfigError: ``now_unix_s`` is not a finite number, or an argument has the wrong type.
    """
    now_unix_s = _finite("now_unix_s (seconds since the epoch)", now_unix_s)
    if not isinstance(record, TrajectoryRecord):
        raise ConfigError(f"record must be a TrajectoryRecord, got {type(record).__name__}")
    if not isinstance(step, ProposedStep):
        raise ConfigError("step must be a ProposedStep (ProposedStep.from_tool / from_model), got "
                          f"{type(step).__name__}")
    if not isinstance(policy, AdmissionPolicy):
        raise ConfigError(f"policy must be an AdmissionPolicy, got {type(policy).__name__}")
    if deployment is not None and not isinstance(deployment, Deployment):
        raise ConfigError(f"deployment must be a Deployment, got {type(deployment).__name__}")
    dep = deployment or Deployment()
    reusable = unsent_reservation(record, step)
    identity = _check_identity(record, step, reusable)
    control = _check_control(record)
    deadline, mode = _check_deadline(record, step, now_unix_s)
    source = _check_source(record, step)
    dependencies = _check_dependencies(record, step)
    in_doubt = _check_in_doubt(record, step)
    grant = _check_grant(record, step, policy)
    approval = _check_approval(record, step, now_unix_s)
    capacity = _check_capacity(dep)
    budget, reuse = _check_budget(record, step, reusable)
    versions, res = _check_versions(record, step, dep)
    checks = (identity, control, deadline, source, dependencies, in_doubt, grant, approval, capacity, budget, versions)
    verdict = max((c.outcome for c in checks), key=_RANK.__getitem__)
    return ContinuationDecision(step, verdict, checks, mode, reuse if verdict == "admit" else None, res)


def discarded_partial_streams(record: TrajectoryRecord) -> list[str]:
    """Model invocations whose last logged reply is a partial stream with no complete reply:
    recovery discards them (their text is never a completed candidate) and keeps their charge in
    doubt until usage evidence settles it (§11.5.4, §11.3.2)."""
    out = []
    for k, op in record.operations.items():
        if op.kind == "model" and op.status != "established":
            if any(a.last_result_status == "partial" for a in op.attempts.values()):
                out.append(k)
    return out
