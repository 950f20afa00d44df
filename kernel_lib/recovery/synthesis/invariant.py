"""The crash-consistency invariant (Failure Recovery, "Fault-Tolerant System Synthesis"): a
runtime is crash-consistent when (1) every mutation the outside world can see was preceded by a
durable write-ahead record, and (2) every trajectory in flight can be put, on restart, into
exactly one of three classes: committed, compensable, pending forward repair.

Both halves are pure functions here, of what survives a crash and what the services say:

* :func:`check_crash_consistency` (events, audit) -- ``events`` is the durable log of one
  trajectory (empty when the configuration keeps none: everything it held was in memory) and
  ``audit`` the services' own audit trails. Part (1): every applied mutation of the trajectory in
  the audit (a create, a release or a pivot effect: not a refusal, not a read) must have a
  ``ToolIntent`` for its operation id in the durable log. The check is a snapshot; "preceded" is
  the order in time, which a test gets by checking at every position of the gate (a mutation
  applied before its intent was durable is then caught at the ``after:dispatch`` position that
  immediately follows the service's answer, before anything else can be appended);
* :func:`classify` (events) -- part (2), over the folds the runtime itself recovers with (the
  saga fold, the operation table, the repair records):

  - ``committed``: nothing is in flight (the saga ended COMPLETED or ABORT_CONSISTENT, or it is
    frozen for an operator with its residue listed);
  - ``pending_forward_repair``: the pivot is crossed (Σ retired: only forward), or a forward
    repair was elected and its attempt has not settled;
  - ``compensable``: before the pivot, Σ is determined by the log (every committed compensable
    step has its compensator bound; a read-only step needs none).

  What makes a trajectory unclassifiable is a violation: an operation in doubt whose service
  answers no status lookup and whose repeat contract makes no re-send safe (nobody can tell
  whether its effect exists), a committed tier I/II step with no compensator bound, or a log the
  runtime's folds refuse (``log_unfoldable``: a transition table 2 does not allow, e.g. a step
  committed with no intent before it; a restart could not recover from it either).

:class:`InvariantReport` carries the verdict, the class and every violation found.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kernel_lib.core.events import Event, ToolIntent
from kernel_lib.core.proposals import REPEAT_SAFE_CONTRACTS
from kernel_lib.core.record import fold, initial_record
from kernel_lib.errors import ConfigError, KernelError
from kernel_lib.recovery.repair import fold_repairs
from kernel_lib.recovery.saga import fold_saga

__all__ = ["CLASSIFICATIONS", "InvariantReport", "classify", "check_crash_consistency"]

CLASSIFICATIONS = ("committed", "compensable", "pending_forward_repair")


@dataclass(frozen=True)
class InvariantReport:
    """The verdict on one trajectory: ``ok`` (no violation), ``classification`` (one of
    :data:`CLASSIFICATIONS`, or None when unclassifiable), ``saga_state``, ``violations`` (each
    ``{kind, operation_id, ...}``; kinds ``mutation_without_durable_intent``,
    ``in_doubt_unresolvable``, ``committed_without_compensator``, ``log_unfoldable``), ``mutations_checked``."""

    ok: bool
    classification: str | None
    saga_state: str | None
    violations: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    mutations_checked: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "classification": self.classification, "saga_state": self.saga_state,
                "violations": len(self.violations), "violation_list": list(self.violations[:10]),
                "mutations_checked": self.mutations_checked}


def _events(events: Iterable[Event]) -> list[Event]:
    """The log as a list; ConfigError when it is not an iterable of :class:`Event`."""
    if events is None or isinstance(events, (str, bytes, Mapping)):
        raise ConfigError(f"events must be the trajectory's log (an iterable of Event), got {type(events).__name__}")
    try:
        evs = events if isinstance(events, list) else list(events)
    except TypeError:
        raise ConfigError(f"events must be the trajectory's log (an iterable of Event), "
                          f"got {type(events).__name__}") from None
    bad = next((e for e in evs if not isinstance(e, Event)), None)
    if bad is not None:
        raise ConfigError(f"events must hold Event records only, got a {type(bad).__name__} "
                          "(read a log with kernel_lib.log.load_events)")
    return evs


def _check_audit(audit: Any) -> dict[str, list[Mapping[str, Any]]]:
    """The audit as ``{service: [entry, ...]}`` (trails read once); ConfigError on another shape."""
    if not isinstance(audit, Mapping):
        raise ConfigError(f"audit must map each service to its audit entries, got {type(audit).__name__}")
    out: dict[str, list[Mapping[str, Any]]] = {}
    for service, trail in audit.items():
        if isinstance(trail, (str, bytes, Mapping)) or not isinstance(trail, Iterable):
            raise ConfigError(f"audit[{service!r}] must be a list of entries, got {type(trail).__name__}")
        out[service] = list(trail)
        bad = next((e for e in out[service] if not isinstance(e, Mapping)), None)
        if bad is not None:
            raise ConfigError(f"audit[{service!r}] holds a {type(bad).__name__}, not an entry mapping")
    return out


def classify(events: Iterable[Event], saga_id: str | None = None) -> tuple[str | None, list[dict[str, Any]]]:
    """Part (2) of the invariant: the class of the trajectory whose durable log is ``events``
    (its saga ``saga_id``, default the trajectory id), and the violations that make it
    unclassifiable (the class is then None). Pure."""
    evs = _events(events)
    if not evs:
        return "compensable", []   # nothing durable: Σ is empty (whatever the services hold is part (1)'s)
    tid = evs[0].trajectory_id
    try:
        saga = fold_saga(evs, saga_id or tid)
        record = fold(initial_record(tid), evs)
        repairs = fold_repairs(evs)
    except KernelError as exc:   # the runtime could not recover from this log either: say so, do not raise
        return None, [{"kind": "log_unfoldable", "operation_id": None, "error": f"{type(exc).__name__}: {exc}"[:500]}]
    violations: list[dict[str, Any]] = []
    intents: dict[str, ToolIntent] = {}
    for ev in evs:
        if isinstance(ev.payload, ToolIntent):
            intents[ev.payload.operation_id] = ev.payload
    for op in record.operations.values():
        if op.kind != "tool" or op.status != "in_doubt":
            continue
        intent = intents.get(op.operation_id)
        lookup = bool(intent is not None and intent.status_lookup)
        if not lookup and op.repeat_contract not in REPEAT_SAFE_CONTRACTS:
            violations.append({"kind": "in_doubt_unresolvable", "operation_id": op.operation_id, "tool": op.tool,
                               "repeat_contract": op.repeat_contract})
    for s in saga.steps.values():
        if s.state == "COMMITTED" and s.tier in ("I", "II") and s.compensator is None:
            op = record.operations.get(s.step_id)
            if op is None or op.repeat_contract != "read_only":
                violations.append({"kind": "committed_without_compensator", "operation_id": s.step_id,
                                   "tool": s.tool})
    if violations:
        return None, violations
    if saga.state in ("COMPLETED", "ABORT_CONSISTENT") or record.control_state == "FROZEN":
        return "committed", []
    if saga.phase == "COMMITTED":
        return "pending_forward_repair", []
    for sub in repairs.values():
        if sub.decisions and sub.decisions[-1].directive == "FORWARD_REPAIR" and len(sub.outcomes) < sub.repairs_done:
            return "pending_forward_repair", []
    return "compensable", []


def check_crash_consistency(events: Iterable[Event], audit: Mapping[str, Iterable[Mapping[str, Any]]], *,
                            trajectory_id: str | None = None, saga_id: str | None = None) -> InvariantReport:
    """Both parts of the invariant for one trajectory (see the module docstring).

    ``events``: its durable log; ``audit``: ``{service: [entry, ...]}`` as the services keep it
    (``{action, operation_id, resource?, refused?, read_only?}``); ``trajectory_id``: whose
    operations to check (operation ids ``<trajectory>.<...>``; default: the log's trajectory,
    which must then be non-empty). Pure; returns an :class:`InvariantReport`. Raises ConfigError
    when ``events`` is not an iterable of :class:`Event` or ``audit`` not a mapping of lists of
    entries (a tampered but well-typed log is a finding, ``log_unfoldable``, not an error)."""
    audit = _check_audit(audit)
    evs = _events(events)
    tid = trajectory_id or (evs[0].trajectory_id if evs else None)
    if tid is None:
        return InvariantReport(True, "compensable", None)
    prefix = tid + "."
    durable = {ev.payload.operation_id for ev in evs if isinstance(ev.payload, ToolIntent)}
    violations: list[dict[str, Any]] = []
    checked = 0
    for service, trail in audit.items():
        for entry in trail:
            op = str(entry.get("operation_id", ""))
            if not op.startswith(prefix) or entry.get("refused") or entry.get("read_only") or "resource" not in entry:
                continue
            checked += 1
            if op not in durable:
                violations.append({"kind": "mutation_without_durable_intent", "operation_id": op,
                                   "service": service, "action": entry.get("action"),
                                   "resource": entry.get("resource")})
    cls, why = classify(evs, saga_id or tid)
    violations.extend(why)
    saga_state = None
    if evs and cls is not None:
        saga_state = fold_saga(evs, saga_id or tid).state
    return InvariantReport(not violations, cls, saga_state, tuple(violations), checked)
