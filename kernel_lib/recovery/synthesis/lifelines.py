"""Figure 5 as data: a trajectory log (and the services' audit) read as messages between four lifelines.

Failure Recovery, "Anatomy of a faulted trajectory" (figure 5, the protocol ladder of the
synthesized runtime H = ⟨K_sched, L_wal, S_saga, G_gate⟩). The figure draws four lifelines — the
control-plane scheduler, the write-ahead log, the saga engine and the sandbox / external
services — and the messages between them across the six turns. :func:`lifeline_messages` is that
ladder computed, never drawn by hand: a pure function of

* ``events``: one trajectory's log as stored (the dispatch gate's ``ToolIntent``/``ToolResult``,
  the saga's ``SagaStepChanged``/``SagaChanged``, the pre-pivot gate's ``PivotVerified``, the
  crossing ``PivotCrossed``, D(Ω)'s ``RecoveryDecided`` and ``RepairOutcome``, a freeze);
* ``audits`` (optional): ``{service: [audit entry, ...]}`` as the services keep it
  (``fleet.audits()``): the effects they applied, shown as the services' own word, never inferred
  from our log;
* ``crashes`` (optional): where the worker process died. A SIGKILL leaves no record in the log
  (that is what it is), so the runner that killed the process says after which log position it
  happened; the recovery that follows is read from the log (the events the new process folded,
  Σ rebuilt by :func:`~kernel_lib.recovery.saga.fold_saga` over them).

Each :class:`LifelineMessage` has ``source``/``target`` (one of :data:`LIFELINES`), a ``label``,
the log ``position`` (sequence number) of the event it comes from (for a crash: the last
position that survived), the ``turn`` it belongs to, its ``kind`` (:data:`KINDS`), the
``operation_id`` and ``event_type`` it came from, and a longer ``detail``.

Turns. By default a turn is one sub-transaction of the saga: a new forward step starts a new
turn, except a step the recovery policy proposed as the next attempt of a failed one (after a
``RecoveryDecided`` with TRANSIENT_RETRY or FORWARD_REPAIR, the repaired call is the runner's
next saga step: Failure Recovery, "Forward Recovery"), which stays in the failed step's turn. A
compensator runs in the turn whose failure unwinds the saga. A gate verdict or a crossing is
drawn in the turn of the pivot step it names (a premature attempt held by the gate may come
before the turn it belongs to ends: the one place the ladder's turns go back). ``turn_of``
overrides all this: a mapping (or function) from operation id to turn, for a harness that
numbers its turns itself.

Which audit rows are this trajectory's: those whose operation id appears in the log, or starts
with one of ``operation_prefixes`` (default: ``<saga_id>.`` for each saga in the log). An applied
effect of this trajectory with no ``ToolIntent`` in the log is shown as ``orphan`` (an effect
without a durable record before it: what the crash-consistency invariant forbids).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from kernel_lib.core.events import (
    Authorized, Event, PivotCrossed, PivotVerified, RecoveryDecided, RepairOutcome, SagaChanged, SagaStepChanged,
    TaskStarted, ToolIntent, ToolResult, TrajectoryFrozen,
)
from kernel_lib.errors import ConfigError
from kernel_lib.recovery.saga import fold_saga

__all__ = ["LIFELINES", "LIFELINE_LABELS", "KINDS", "KIND_MEANINGS", "LifelineMessage", "Crash",
           "lifeline_messages", "turn_rows", "legend_rows"]

#: The four lifelines of figure 5, left to right.
LIFELINES = ("scheduler", "log", "saga", "services")
#: How the figure names them (H's components; the sandbox stands for every external service).
LIFELINE_LABELS = {"scheduler": "control plane K_sched", "log": "write-ahead log L_wal",
                   "saga": "saga engine S_saga", "services": "sandbox / services"}

#: Every message kind and what it means (the widget's legend shows these words).
KIND_MEANINGS: dict[str, str] = {
    "start": "the trajectory (or its saga) begins",
    "propose": "a step proposed by the model enters the saga as PENDING",
    "intent": "the intent is durable in the log before anything leaves (intent before effect)",
    "dispatch": "the request leaves for the service, with its idempotency key",
    "effect": "the service applied an effect (the service's own audit, not our log)",
    "reply": "the service's answer arrives and is recorded as evidence",
    "error": "the service refused the request (a final error, recorded as evidence)",
    "timeout": "no answer arrived: the outcome is unknown",
    "probe": "reconciliation: a status lookup by the logged operation id settles the attempt",
    "commit": "the step is COMMITTED and its compensator C_i is pushed on Σ",
    "fail": "the step is FAILED in the saga",
    "repair": "the recovery policy D(Ω) decides, or a forward repair's outcome is recorded",
    "compensate": "backward recovery: a compensator is popped from Σ",
    "crash": "the worker process dies (SIGKILL): its memory is gone, the log survives",
    "recover": "a new process folds the surviving log: state and Σ rebuilt",
    "gate": "the pre-pivot verification gate runs its deterministic checks",
    "pivot": "the pivot is crossed: Σ retired, no rollback past this point",
    "complete": "the trajectory's terminal record",
    "halt": "the trajectory stops (aborted, halted, frozen or refused)",
    "orphan": "an effect the services applied with no durable intent in the log",
}
KINDS = tuple(KIND_MEANINGS)

_LABEL_MAX = 90


@dataclass(frozen=True)
class LifelineMessage:
    """One arrow of the ladder (see the module docstring). ``index`` is its place in the
    ladder (0-based); ``position`` a log sequence number (None only for an orphan effect)."""

    index: int
    source: str
    target: str
    label: str
    position: int | None
    turn: int
    kind: str
    operation_id: str | None = None
    event_type: str | None = None
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Crash:
    """A worker death the log cannot record: after log position ``after_position`` (the last
    event that survived), with a ``label`` (e.g. ``"SIGKILL of pid 4242"``)."""

    after_position: int
    label: str = "SIGKILL"


def _clip(text: str, limit: int = _LABEL_MAX) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _short(op: str | None) -> str:
    """The readable tail of an operation id: ``fig5.T3`` -> ``T3``, ``fig5.T3.C`` -> ``C3``."""
    if not op:
        return ""
    parts = op.split(".")
    if len(parts) >= 3 and parts[-1] == "C" and parts[-2].startswith("T"):
        return "C" + parts[-2][1:]
    return parts[-1] if parts[-1].startswith("T") else op


def _call(tool: str, arguments: Mapping[str, Any] | None) -> str:
    args = ", ".join(f"{k}={v}" for k, v in sorted((arguments or {}).items()) if not isinstance(v, (dict, list)))
    return f"{tool}({args})"


def _outcome_text(outcome: Mapping[str, Any] | None) -> str:
    o = dict(outcome or {})
    status = o.pop("http_status", None)
    o.pop("status", None)
    o.pop("duplicate", None)
    why = o.get("reason") or ""
    err = o.get("error") or ""
    if err or why:
        text = f"{why}: {err}" if why and err else str(why or err)
    else:
        text = ", ".join(f"{k}={v}" for k, v in sorted(o.items()) if not isinstance(v, (dict, list)))
    return f"{status} {text}".strip() if status is not None else text


def _audit_text(entry: Mapping[str, Any]) -> str:
    if entry.get("refused"):
        return f"refused {entry.get('action')} ({entry.get('refused')}: {entry.get('reason')})"
    what = entry.get("resource") or ""
    if entry.get("read_only"):
        return f"answered {entry.get('action')} (read only: nothing changed)"
    if entry.get("already_released"):
        return f"{entry.get('action')}: {what} was already released"
    return f"applied {entry.get('action')}" + (f" -> {what}" if what else "") + (" (partial)" if entry.get("partial")
                                                                                else "")


def legend_rows() -> list[dict[str, str]]:
    """``[{kind, meaning}]`` for every kind, in :data:`KINDS` order (the widget's legend)."""
    return [{"kind": k, "meaning": m} for k, m in KIND_MEANINGS.items()]


def lifeline_messages(events: Iterable[Event], audits: Mapping[str, Iterable[Mapping[str, Any]]] | None = None, *,
                      crashes: Iterable[Crash | int] = (),
                      turn_of: Mapping[str, int] | Callable[[str], int | None] | None = None,
                      operation_prefixes: Iterable[str] | None = None) -> list[LifelineMessage]:
    """The ladder of figure 5 for one trajectory (see the module docstring), in order.

    Args:
        events: the trajectory's events in sequence order (one trajectory).
        audits: ``{service: [entry, ...]}`` from the services (``fleet.audits()``), or None.
        crashes: :class:`Crash` values (or bare positions) after which the worker died.
        turn_of: operation id -> turn (mapping or function; None from a function: the default rule).
        operation_prefixes: which audit rows belong to this trajectory besides those of its
            logged operations (default ``<saga_id>.`` for each saga in the log).

    Returns:
        :class:`LifelineMessage` values, ``index`` 0.. in ladder order.

    Raises:
        ConfigError: the events hold more than one trajectory, are out of sequence order, or a
            crash position lies outside the log.
    """
    evs = list(events)
    if len({e.trajectory_id for e in evs}) > 1:
        raise ConfigError("the events belong to more than one trajectory: a ladder shows one trajectory's log")
    seqs = [e.sequence_number for e in evs]
    if seqs != sorted(seqs) or len(set(seqs)) != len(seqs):
        raise ConfigError("the events are not in sequence order (read them from the store in order)")
    head = seqs[-1] if seqs else 0
    crash_list: list[Crash] = []
    for c in crashes:
        c = c if isinstance(c, Crash) else Crash(int(c))
        if not 0 <= c.after_position <= head:
            raise ConfigError(f"a crash after position {c.after_position} lies outside the log (positions 0..{head})")
        crash_list.append(c)
    crash_list.sort(key=lambda c: c.after_position)
    # two passes: the first learns the turn each step is proposed in, so that a gate verdict
    # recorded before its pivot step (a premature attempt, held) is drawn in the pivot's turn
    ahead: dict[str, int] = {}
    for _pass in range(2):
        ladder = _Ladder(evs, audits or {}, turn_of, operation_prefixes, ahead)
        pending = list(crash_list)
        for ev in evs:
            while pending and pending[0].after_position < ev.sequence_number:
                ladder.crash(pending.pop(0))
            ladder.event(ev)
        for c in pending:
            ladder.crash(c)
        ahead = dict(ladder.turns)
    ladder.orphans()
    return ladder.out


class _Ladder:
    """The state of one pass over the log: the messages so far, the turn, the audit rows per operation."""

    def __init__(self, evs: list[Event], audits: Mapping[str, Iterable[Mapping[str, Any]]],
                 turn_of: Mapping[str, int] | Callable[[str], int | None] | None,
                 operation_prefixes: Iterable[str] | None, ahead: Mapping[str, int] | None = None):
        self.evs = evs
        self.ahead = dict(ahead or {})
        self.turn_of = turn_of
        self.out: list[LifelineMessage] = []
        self.turn = 0
        self.retry_pending = False
        self.opened_by_crash = False     # a crash between turns opened the next one: its step keeps it
        self.turns: dict[str, int] = {}
        logged_ops = {e.payload.operation_id for e in evs if isinstance(e.payload, ToolIntent)}
        self.sagas = {e.payload.saga_id for e in evs if isinstance(e.payload, (SagaStepChanged, SagaChanged))}
        prefixes = (tuple(operation_prefixes) if operation_prefixes is not None
                    else tuple(f"{s}." for s in sorted(self.sagas)))
        self.applied: dict[str, list[Mapping[str, Any]]] = {}
        self.service_of: dict[str, str] = {}
        self._orphans: list[tuple[str, Mapping[str, Any]]] = []
        for service, trail in audits.items():
            for entry in trail:
                op = str(entry.get("operation_id", ""))
                if op in logged_ops:
                    self.applied.setdefault(op, []).append(entry)
                    self.service_of[op] = service
                elif prefixes and op.startswith(prefixes) and not entry.get("refused") and not entry.get("read_only"):
                    self._orphans.append((service, entry))
        self.dispatches: dict[str, int] = {}
        #: (operation, attempt) -> the statuses of the replies recorded for it (a reply proves it left)
        self.replies: dict[tuple[str, str], list[str]] = {}
        for e in evs:
            if isinstance(e.payload, ToolIntent):
                self.dispatches[e.payload.operation_id] = self.dispatches.get(e.payload.operation_id, 0) + 1
            elif isinstance(e.payload, ToolResult):
                self.replies.setdefault((e.payload.operation_id, e.payload.attempt_id), []).append(
                    e.payload.status if e.payload.source == "reply" else f"{e.payload.source}:{e.payload.status}")
        self.seen_dispatch: dict[str, int] = {}
        self.last_attempt: dict[str, ToolIntent] = {}

    # --- turns ----------------------------------------------------------------------------------------
    def explicit(self, op: str) -> int | None:
        if self.turn_of is None:
            return None
        t = self.turn_of.get(op) if isinstance(self.turn_of, Mapping) else self.turn_of(op)
        return None if t is None else int(t)

    def turn_for(self, op: str | None) -> int:
        if not op:
            return self.turn
        t = self.explicit(op)
        if t is not None:
            return t
        if op.endswith(".C") or op not in self.turns:    # a compensator runs in the turn that unwinds
            return self.turn
        return self.turns[op]

    def upcoming(self, op: str) -> int:
        """The turn of a pivot step the gate or the crossing names before it is proposed."""
        t = self.explicit(op)
        if t is None:
            t = self.ahead.get(op)
        return self.turn + 1 if t is None else t

    def emit(self, source: str, target: str, label: str, ev: Event | None, kind: str, op: str | None = None,
             detail: str = "", at_turn: int | None = None, position: int | None = None) -> None:
        pos = position if position is not None else (ev.sequence_number if ev is not None else None)
        self.out.append(LifelineMessage(len(self.out), source, target, _clip(label), pos,
                                        at_turn if at_turn is not None else self.turn_for(op), kind, op,
                                        ev.event_type if ev is not None else None, detail or label))

    # --- one event --------------------------------------------------------------------------------------
    def event(self, ev: Event) -> None:
        p = ev.payload
        handler = {TaskStarted: self._task, SagaChanged: self._saga, SagaStepChanged: self._step,
                   ToolIntent: self._intent, ToolResult: self._result, RecoveryDecided: self._decided,
                   RepairOutcome: self._repaired, PivotVerified: self._verified, PivotCrossed: self._crossed,
                   TrajectoryFrozen: self._frozen, Authorized: self._authorized}.get(type(p))
        if handler is None:
            handler = next((h for t, h in ((ToolIntent, self._intent),) if isinstance(p, t)), None)
        if handler is not None:
            handler(ev, p)

    def _task(self, ev: Event, p: TaskStarted) -> None:
        self.emit("scheduler", "log", f"task started: {p.objective}", ev, "start", at_turn=0)

    def _authorized(self, ev: Event, p: Authorized) -> None:
        if p.decision == "deny":
            self.emit("scheduler", "log", f"admission refused {_short(p.subject_id)}: {p.reason}", ev, "halt",
                      p.subject_id)

    def _saga(self, ev: Event, p: SagaChanged) -> None:
        if p.state == "RUNNING":
            self.emit("scheduler", "saga", f"saga {p.saga_id} begins", ev, "start")
        elif p.state == "COMPENSATING":
            self.emit("saga", "log", "unwind begins" + (f": {p.reason}" if p.reason else ""), ev, "compensate")
        elif p.state == "COMPLETED":
            self.emit("scheduler", "log", "terminal commit: trajectory COMPLETED", ev, "complete")
        else:
            self.emit("saga", "log", f"saga {p.state}" + (f": {p.reason}" if p.reason else ""), ev, "halt")

    def _step(self, ev: Event, p: SagaStepChanged) -> None:
        label = _short(p.step_id)
        if p.state == "PENDING":
            t = self.explicit(p.step_id)
            if t is None:
                keep = (self.retry_pending or self.opened_by_crash) and self.turn > 0
                t = self.turn if keep else self.turn + 1
            self.turns[p.step_id] = t
            self.turn = max(self.turn, t)
            self.retry_pending = self.opened_by_crash = False
            self.emit("scheduler", "saga", f"{label} {p.tool} proposed (tier {p.tier})", ev, "propose", p.step_id)
        elif p.state == "COMMITTED":
            comp = p.compensator
            pushed = (f"Σ += {_call(str(comp.get('tool')), comp.get('arguments'))}" if comp else
                      "C = ∅ (nothing to push)" if p.tier == "III" else "C = noop (nothing to undo)")
            self.emit("saga", "log", f"{label} COMMITTED; {pushed}", ev, "commit", p.step_id)
        elif p.state == "FAILED":
            self.emit("saga", "log", f"{label} FAILED: {p.reason}", ev, "fail", p.step_id)
        elif p.state == "COMPENSATING":
            self.emit("saga", "scheduler", f"pop C{label[1:]} ({p.tool}'s compensator) from Σ", ev, "compensate",
                      p.step_id, at_turn=self.turn)
        elif p.state == "COMPENSATED":
            self.emit("saga", "log", f"{label} COMPENSATED", ev, "compensate", p.step_id, at_turn=self.turn)
        else:
            self.emit("saga", "log", f"{label} {p.state}" + (f": {p.reason}" if p.reason else ""), ev, "halt",
                      p.step_id, at_turn=self.turn)

    def _intent(self, ev: Event, p: ToolIntent) -> None:
        op = p.operation_id
        prev = self.last_attempt.get(op)
        if prev is not None and prev.status_lookup:
            answers = self.replies.get((op, prev.attempt_id), [])
            if not any(a in ("completed", "failed") or a.endswith((":completed", ":failed")) for a in answers):
                # the runner re-sends an in-doubt attempt only after its status lookup answered
                # "unknown" (never applied); that answer settles nothing, so it is not recorded
                self.emit("scheduler", "services", f"probe: status lookup of {_short(op)} ({prev.attempt_id})", ev,
                          "probe", op, detail=f"{op} attempt {prev.attempt_id} was in doubt (no answer recorded); "
                                              "before sending again the runtime asked the service by its logged id")
                self.emit("services", "scheduler", f"unknown: {_short(op)} never applied, send again", ev, "probe",
                          op, detail=f"the service answered unknown for {op}: {prev.attempt_id} never took effect. "
                                     f"An unknown settles nothing, so the log holds no record of it; the new "
                                     f"attempt {p.attempt_id} (same idempotency key) is the evidence it was asked")
        self.last_attempt[op] = p
        key = (p.idempotency_key or "")[:12]
        self.emit("scheduler", "log", f"intent {_short(op)} {p.tool} ({p.attempt_id}) durable" +
                  (f", key {key}…" if key else ""), ev, "intent", op,
                  detail=f"ToolIntent {op} attempt {p.attempt_id}: {_call(p.tool, p.arguments)}; idempotency key "
                         f"{p.idempotency_key}; status lookup {'declared' if p.status_lookup else 'not declared'}")
        self.seen_dispatch[op] = j = self.seen_dispatch.get(op, 0) + 1
        # the services' own audit of this operation, one application per attempt on its last
        # attempts (any surplus, applied more often than it was sent, on the last one)
        rows, d = self.applied.get(op, []), self.dispatches[op]
        if len(rows) <= d:
            mine = [rows[j - 1 - (d - len(rows))]] if j > d - len(rows) else []
        else:
            mine = rows[j - 1: j] if j < d else rows[d - 1:]
        if mine or any(not a.startswith(("reconciliation:", "inbox:")) for a in
                       self.replies.get((op, p.attempt_id), [])):
            self.emit("scheduler", "services", f"dispatch {_call(p.tool, p.arguments)}", ev, "dispatch", op)
        service = self.service_of.get(op, "service")
        for entry in mine:
            self.emit("services", "services", f"{service}: {_audit_text(entry)}", ev, "effect", op,
                      detail=f"from the {service} service's audit trail: {_audit_text(entry)} for operation {op}")

    def _result(self, ev: Event, p: ToolResult) -> None:
        op = p.operation_id
        text = _outcome_text(p.outcome)
        if p.source == "reconciliation":
            self.emit("scheduler", "services", f"probe: status lookup of {_short(op)} by its logged id", ev, "probe",
                      op)
            self.emit("services", "scheduler", f"{p.status}" + (f": {text}" if text else ""), ev, "probe", op,
                      detail=f"reconciliation settled {op} as {p.status} ({text}); recorded at position "
                             f"{ev.sequence_number}")
        elif p.status in ("timeout", "unreachable"):
            self.emit("services", "scheduler", f"{p.status}: no answer for {_short(op)}", ev, "timeout", op,
                      detail=f"{op}: {p.status}; the outcome is unknown until a status lookup settles it")
        elif p.status == "completed":
            dup = " (duplicate: the first answer again)" if (p.outcome or {}).get("duplicate") else ""
            self.emit("services", "scheduler", f"{text}{dup}" or "completed", ev, "reply", op)
        elif p.status == "failed":
            self.emit("services", "scheduler", f"refused: {text}", ev, "error", op)
        else:
            self.emit("services", "scheduler", f"{p.status}" + (f": {text}" if text else ""), ev, "reply", op)

    def _decided(self, ev: Event, p: RecoveryDecided) -> None:
        numbers = p.numbers if isinstance(p.numbers, Mapping) else {}
        loop = numbers.get("repair_loop")
        n = loop.get("repair_number") if isinstance(loop, Mapping) else None
        k = numbers.get("K_repair")
        bound = (f" (repair {n}" + (f" of K_repair = {k}" if k is not None else "") + ")") if n else ""
        remedy = f" via {p.remedy}" if p.remedy else ""
        self.emit("saga", "scheduler", f"D(Ω), gate {p.gate}: {p.directive}{remedy}{bound}", ev, "repair", p.step_id,
                  detail=f"{p.directive} for {p.step_id} at gate {p.gate} ({p.error_class}, {p.failure_class}): "
                         f"{p.reason}")
        self.retry_pending = p.directive in ("TRANSIENT_RETRY", "FORWARD_REPAIR")

    def _repaired(self, ev: Event, p: RepairOutcome) -> None:
        self.emit("saga", "log", f"repair of {_short(p.step_id)} ({p.remedy}) " + ("worked" if p.success else "failed"),
                  ev, "repair", p.step_id)

    def _verified(self, ev: Event, p: PivotVerified) -> None:
        names = ", ".join(str(c.get("name")) for c in p.checks)
        t = self.upcoming(p.pivot_step_id)
        self.emit("scheduler", "services", f"G_gate: deterministic checks {names}", ev, "gate", p.pivot_step_id,
                  at_turn=t)
        verdict = "all passed: the pivot may cross" if p.passed else f"FAILED {', '.join(p.failed_checks)}: pivot held"
        ignored = "; the model's claim of success has weight 0" if (p.model_claim or {}).get("claims_success") else ""
        checks = "; ".join(f"{c.get('name')}: {'passed' if c.get('passed') else 'FAILED'} "
                           f"({_evidence_text(c.get('evidence'))})" for c in p.checks)
        self.emit("scheduler", "log", f"verdict: {verdict}{ignored}", ev, "gate", p.pivot_step_id, at_turn=t,
                  detail=f"verdict: {verdict}{ignored}. The checks: {checks}")

    def _crossed(self, ev: Event, p: PivotCrossed) -> None:
        self.emit("scheduler", "log", f"pivot crossed before {p.pivot_tool}: Σ retired "
                  f"({len(p.retired_compensators)} compensators will never run)", ev, "pivot", p.pivot_step_id,
                  at_turn=self.upcoming(p.pivot_step_id))

    def _frozen(self, ev: Event, p: TrajectoryFrozen) -> None:
        self.emit("saga", "log", f"FROZEN ({p.failure_mode}): incident {p.incident_id}", ev, "halt")

    # --- what the log cannot hold -------------------------------------------------------------------------
    def crash(self, crash: Crash) -> None:
        """The crash (on the scheduler's lifeline) and the recovery read from the surviving prefix."""
        pos = crash.after_position
        survived = [e for e in self.evs if e.sequence_number <= pos]
        sagas = [fold_saga(survived, s) for s in sorted(self.sagas)]
        last = max((st for saga in sagas for st in saga.steps.values()), key=lambda st: st.index, default=None)
        # a crash between turns belongs to the next one; one inside a step still open, to its turn
        t = self.turn if last is not None and last.state in ("PENDING", "EXECUTING", "FAILED") else self.turn + 1
        if t > self.turn:
            self.turn, self.opened_by_crash = t, True
        self.emit("scheduler", "scheduler", f"{crash.label}: the process dies, its memory is gone", None, "crash",
                  at_turn=t, position=pos,
                  detail=f"{crash.label} after log position {pos}; nothing of the dead process is used again")
        stacks = "; ".join(f"Σ = [{', '.join('C' + str(x.index) for x in reversed(saga.stack))}]" for saga in sagas)
        committed = sum(1 for saga in sagas for st in saga.steps.values()
                        if any(state == "COMMITTED" for _, state in st.history))
        self.emit("log", "scheduler", f"new process folds {len(survived)} events: {committed} steps committed, "
                  + (stacks or "no saga"), None, "recover", at_turn=t, position=pos,
                  detail=f"recovery reads the {len(survived)} events that survived (positions 1..{pos}) and folds "
                         f"them: {committed} steps committed, {stacks or 'no saga'}; the saga ledger is rebuilt "
                         "from the log, nothing from memory")

    def orphans(self) -> None:
        for service, entry in self._orphans:
            op = str(entry.get("operation_id"))
            self.out.append(LifelineMessage(
                len(self.out), "services", "services", _clip(f"{service}: {_audit_text(entry)} with no intent in "
                                                             "the log"),
                None, self.turn, "orphan", op, None,
                f"the {service} service applied {entry.get('action')} for {op}, and the log holds no ToolIntent "
                "for it"))


def _evidence_text(evidence: Any) -> str:
    if not isinstance(evidence, Mapping):
        return str(evidence)
    return ", ".join(f"{k}={v}" for k, v in list(evidence.items())[:4] if not isinstance(v, (dict, list)))


def turn_rows(messages: Iterable[LifelineMessage]) -> list[dict[str, Any]]:
    """``[{turn, first, last, messages, label}]``: where each turn's messages start and end in the
    ladder (indices), and a label naming the tools its forward steps proposed."""
    rows: dict[int, dict[str, Any]] = {}
    for m in messages:
        r = rows.setdefault(m.turn, {"turn": m.turn, "first": m.index, "last": m.index, "messages": 0, "tools": []})
        r["last"] = m.index
        r["messages"] += 1
        if m.kind == "propose":
            tool = m.label.split(" ")[1] if " " in m.label else m.label
            if tool not in r["tools"]:
                r["tools"].append(tool)
    out = []
    for t in sorted(rows):
        r = rows[t]
        tools = r.pop("tools")
        r["label"] = f"turn {t}" + (f": {', '.join(tools)}" if tools else (" (start)" if t == 0 else ""))
        out.append(r)
    return out
