"""The synthesized runtime harness H = ⟨K_sched, L_wal, S_saga, G_gate⟩ (Failure Recovery,
"The synthesized runtime engine", table 13, figure 5, table 14), one runner class driven by a
:class:`~kernel_lib.recovery.synthesis.config.RuntimeConfig`.

What each element is here (nothing is re-implemented; the harness wires what exists):

* **K_sched** -- :meth:`Harness.run`'s turn loop: one trajectory's turns in order,
  non-preemptive; it asks the model stand-in for each proposal (drawn from the
  :class:`~kernel_lib.recovery.synthesis.faults.FaultPlan`), parses it (schema validation when
  configured) and hands it on; after a process kill it starts a new "process" over the surviving
  log and runs the same script again (Chapter 11's resume: committed turns are answered from the
  log);
* **L_wal** -- :class:`~kernel_lib.log.TrajectoryLog` through
  :class:`~kernel_lib.gate.dispatch.DispatchGate` (intent durable before dispatch, evidence after,
  in doubt on a crash). Configurations without a durable log keep the same records in process
  memory and lose them at a kill;
* **S_saga** -- :class:`~kernel_lib.recovery.runner.SagaRunner` (Σ, the unwind, the crossing)
  and, with ``forward_repair_k`` > 0, :class:`~kernel_lib.recovery.repair.RepairLoop` (D(Ω),
  K_repair, the anti-spin bound);
* **G_gate** -- :func:`~kernel_lib.recovery.verification.run_gate` over the task's deterministic
  checks before the tier III step, recorded with :meth:`SagaRunner.verify_pivot`.

**Faults** are injected as the services would meet them: a network drop through the fleet's
``inject`` (``timeout_before``/``timeout_after``) on the very attempt that is sent; a tool
exception as a semantically wrong proposal the service itself refuses; a format corruption as a
truncated tool-call text; a process kill by raising a crash (a ``BaseException``, so no handler in
the runner can swallow it) from the gate's ``on_position`` hook at the drawn position, after which
a configuration with a durable log recovers in a fresh runner over the surviving log (as
:mod:`kernel_lib.sim.saga_sweep` does).

**Time.** The virtual clock of the fleet carries the services' declared durations, timeouts,
probes, the restart delay and the model's proposal time (all given); the CPU time of our own
recovery code (folding the log, building the runner, replaying to the crashed turn) is measured
with ``time.perf_counter`` and reported apart.

Layering: the harness sits in ``recovery`` and so knows neither the twins nor the
systems-administration task; both are passed in (:mod:`kernel_lib.sim.sysadmin`,
:mod:`kernel_lib.sim.scorecard`). The fleet needs the twin/live facade: ``client(trajectory_id)``
(endpoints with ``send``, ``lookup``, ``call``, ``live_resources``, ``revoke``), ``inject`` and a
``clock`` with ``advance``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kernel_lib.core.events import Event, RuntimeInput, TaskStarted, ToolIntent
from kernel_lib.core.proposals import ToolReply
from kernel_lib.errors import (
    ConfigError, PivotCrossedError, PivotRefusedError, RecoveryTerminated, SagaPanicError, ServiceError,
    StepFailedError, TrajectoryFrozenRefusal,
)
from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate
from kernel_lib.log import MemoryStore, TrajectoryLog
from kernel_lib.recovery.contracts import ToolRegistry
from kernel_lib.recovery.policy import PolicyConfig, RemedyOption, RepairCosts
from kernel_lib.recovery.repair import RepairFrame, RepairLoop, RepairLoopConfig, ToolCost
from kernel_lib.recovery.runner import ForwardingEndpoints, RetryPolicy, SagaRunner
from kernel_lib.recovery.saga import fold_saga
from kernel_lib.recovery.synthesis.config import RuntimeConfig
from kernel_lib.recovery.synthesis.faults import Fault, FaultPlan, FaultProfile, Timings
from kernel_lib.recovery.verification import Check, run_gate

__all__ = ["TurnSpec", "Task", "TrajectoryOutcome", "Harness", "SimulatedKill", "BLIND_RETRIES_MAX", "REPAIR_TOKENS"]

#: How often a configuration that retries blindly re-sends one step whose answer was lost.
BLIND_RETRIES_MAX = 3
#: The tokens one repair pass is declared to take (Napkin Math 0.2's 2,390 in + 180 out): gate 2's
#: headroom check. Its seconds and dollars are declared 0 to D(Ω)'s gate 3 so that the economics
#: never veto a repair before K_repair (the stated semantics of the synthesized row); the pass's
#: model time is still spent on the virtual clock (``Timings.proposal_s``).
REPAIR_TOKENS = 2570


@dataclass(frozen=True)
class TurnSpec:
    """One turn of a task: ``key`` (where its output is kept), ``tool``, ``make(outputs)`` the
    correct arguments given the earlier turns' outputs, ``broken(outputs, variant)`` a
    semantically wrong call (each variant fails with a different error), ``required`` the
    argument names schema validation insists on, ``pivot`` (the tier III turn), ``replay`` what
    the service does with the same request sent again *as a new request* (no idempotency key to
    match it): ``repeats`` (applies it a second time: a duplicate), ``harmless`` (a read),
    ``refused`` (the service refuses the repeat: a migration whose change is already in the
    schema). Only the closed forms and a configuration that retries blindly meet the difference."""

    key: str
    tool: str
    make: Callable[[Mapping[str, Any]], dict[str, Any]]
    broken: Callable[[Mapping[str, Any], int], dict[str, Any]]
    required: tuple[str, ...] = ()
    pivot: bool = False
    replay: str = "repeats"


@dataclass(frozen=True)
class Task:
    """A task the harness runs: ``turns(trajectory_id, n)`` its turns, ``registry`` the declared
    tools, ``grant_id`` the capability grant, ``pivot_checks(read, trajectory_id, outputs,
    turns)`` the gate's deterministic checks (``read(action, arguments) -> body`` reads a
    service), ``tool_costs`` the declared :class:`ToolCost` per tool (the repair loop's Σ)."""

    name: str
    objective: str
    grant_id: str
    registry: ToolRegistry
    turns: Callable[[str, int], tuple[TurnSpec, ...]]
    pivot_checks: Callable[..., list[Check]]
    tool_costs: Mapping[str, ToolCost]


@dataclass
class TrajectoryOutcome:
    """What one trajectory did (the scorecard's raw material).

    ``state``: ``COMPLETED``; ``ABORT_CONSISTENT`` (unwound); ``PANIC``/``FROZEN`` (escalated);
    ``ABORTED`` (stopped with nothing undone); ``HALTED`` (stopped safely, logged); ``CRASHED``
    (the script died on a malformed call); ``LOST`` (killed without a durable log). ``faults``:
    every fault drawn (``{turn, proposal, kind, after_effect, position}``); ``proposals``: how many
    proposals the fault plan drew for; ``kills``: per process
    kill ``{turn, position, rpo_turns, recovered, rto_s, rto_cpu_s, rto_virtual_s, probes}``
    (RTO None when the configuration could not resume); ``repairs_s``: per fault that the
    trajectory got past, the time from its detection to the affected turn's commit (virtual
    seconds, plus the measured recovery CPU for a kill); ``virtual_s``: the trajectory's time on
    the virtual clock; ``cpu_s``: measured; ``kept``: resource ids a completed trajectory keeps;
    ``pivot``: ``{reached, verified, checks_passed, crossed}``; ``invariant``: the
    crash-consistency reports checked (end of run and each restart)."""

    trajectory_id: str
    config: str
    state: str = "RUNNING"
    turns: int = 0
    turns_committed: int = 0
    faults: list[dict[str, Any]] = field(default_factory=list)
    kills: list[dict[str, Any]] = field(default_factory=list)
    repairs_s: list[float] = field(default_factory=list)
    blind_retries: int = 0
    proposals: int = 0
    virtual_s: float = 0.0
    cpu_s: float = 0.0
    outputs: dict[str, Any] = field(default_factory=dict)
    kept: list[str] = field(default_factory=list)
    pivot: dict[str, Any] = field(default_factory=dict)
    invariant: list[dict[str, Any]] = field(default_factory=list)

    @property
    def completed(self) -> bool:
        return self.state == "COMPLETED"

    def as_dict(self) -> dict[str, Any]:
        return {"trajectory_id": self.trajectory_id, "config": self.config, "state": self.state,
                "completed": self.completed, "turns": self.turns, "turns_committed": self.turns_committed,
                "faults": self.faults, "kills": self.kills, "repairs_s": self.repairs_s,
                "blind_retries": self.blind_retries, "proposals": self.proposals, "virtual_s": self.virtual_s,
                "cpu_s": self.cpu_s,
                "kept": self.kept, "pivot": self.pivot, "invariant": self.invariant}


class SimulatedKill(BaseException):
    """The simulated process kill (a BaseException: no ``except Exception`` in the runner swallows
    it). Raise it from an ``on_step`` callback to kill the worker at that position (a crash
    sweep); the harness recovers as from a drawn kill. Its message names the position."""


_Kill = SimulatedKill


class _Stop(Exception):
    def __init__(self, state: str):
        super().__init__(state)
        self.state = state


@dataclass
class _Run:
    """What survives a process kill: the environment's side (the fault plan's position, the
    model stand-in's proposals by operation, the measurements). Never read by the runtime."""
    tid: str
    index: int
    specs: tuple[TurnSpec, ...]
    outcome: TrajectoryOutcome
    proposals: int = 0
    turn_proposals: dict[int, int] = field(default_factory=dict)
    remembered: dict[str, dict[str, Any]] = field(default_factory=dict)
    drops: dict[str, bool] = field(default_factory=dict)
    kills: dict[str, str] = field(default_factory=dict)
    last_intent: str | None = None
    turn: int = 0
    turns_done: int = 0
    fault_turn: int | None = None
    fault_t0: float = 0.0
    fault_cpu: float = 0.0
    recovering: dict[str, Any] | None = None
    probes: int = 0
    reads: int = 0
    current: tuple[TurnSpec, dict[str, Any]] | None = None


@dataclass
class _Proc:
    store: Any
    gate: DispatchGate
    runner: SagaRunner
    loop: RepairLoop | None


class _Endpoints(ForwardingEndpoints):
    """The runner's endpoints: the fleet's client, with this configuration's probe (or none), the
    drawn network drops injected on the attempt they belong to, and the virtual time of waits."""

    def __init__(self, harness: "Harness", inner: Any):
        super().__init__(inner)
        self.h = harness

    def send(self, intent: ToolIntent) -> ToolReply:
        h, run = self.h, self.h._run
        drop = run.drops.pop(intent.operation_id, None)
        if drop is not None:
            h.fleet.inject(intent.tool, "timeout_after" if drop else "timeout_before")
        try:
            reply = self.inner.send(intent)
        except TimeoutError:
            h.clock.advance(h.timings.timeout_s)
            h._mark_fault()
            raise
        if reply.status == "failed" and not intent.operation_id.endswith(".C"):
            h._mark_fault()
        return reply

    def lookup(self, tool: str, operation_id: str) -> dict[str, Any]:
        h = self.h
        if not h.config.reconciliation_probe:
            raise ConnectionRefusedError(f"configuration {h.config.name} has no reconciliation probe")
        h.clock.advance(h.timings.probe_s)
        h._run.probes += 1
        return self.inner.lookup(tool, operation_id)


def _no_faults() -> FaultPlan:
    return FaultPlan(0, FaultProfile(0.0, 0.0, 0.0, 0.0))


class Harness:
    """H for one configuration over one fleet and one task (see the module docstring).

    Args:
        config: the :class:`RuntimeConfig` (table 14's row).
        fleet: a fleet with the twin/live facade (``client``, ``inject``, ``clock``).
        task: the :class:`Task` (e.g. :data:`kernel_lib.sim.sysadmin.SYSADMIN_TASK`).
        plan: the seeded :class:`FaultPlan` (None: no faults).
        timings: the stated durations (:class:`Timings`).
        turns: the trajectory length (the task decides the minimum).
        store_factory: ``store_factory(trajectory_id)`` -> the trajectory's log store
            (default: a :class:`MemoryStore`; a kill keeps what was written when the log is
            durable, as a process crash does).
        audit: ``audit()`` -> ``{service: [audit entry, ...]}`` of the services, read once per
            trajectory end and per restart for the crash-consistency check (None: not checked).
            It may return only the entries since its last call.
        on_step: called as ``on_step(harness, position, event)`` at every gate position (tests
            check the invariant there); the live process, store and run are ``harness.proc``,
            ``harness.proc.store`` and the outcome ``harness.outcome``.
        max_kills: kills one trajectory may meet before it is given up (``LOST``).
        must_survive, owner_epoch, fence_check: for a worker that owns the trajectory under a
            lease (the live fleet, :mod:`kernel_lib.live.fleet`): the failure domain the log
            declares (default ``none``: the simulated substrate), the epoch stamped on every append
            and the dispatch gate's lease check.

    Raises ConfigError for a configuration, plan or timings of the wrong type.
    """

    def __init__(self, config: RuntimeConfig, fleet: Any, task: Task, *, plan: FaultPlan | None = None,
                 timings: Timings | None = None, turns: int = 6,
                 store_factory: Callable[[str], Any] | None = None,
                 audit: Callable[[], Mapping[str, list[dict[str, Any]]]] | None = None,
                 on_step: Callable[["Harness", str, Event | None], None] | None = None, max_kills: int = 16,
                 must_survive: str = "none", owner_epoch: int = 0,
                 fence_check: Callable[[str, int], "str | None"] | None = None):
        if not isinstance(config, RuntimeConfig):
            raise ConfigError(f"config must be a RuntimeConfig, got {type(config).__name__}")
        if plan is not None and not isinstance(plan, FaultPlan):
            raise ConfigError(f"plan must be a FaultPlan or None, got {type(plan).__name__}")
        timings = Timings() if timings is None else timings
        if not isinstance(timings, Timings):
            raise ConfigError(f"timings must be Timings, got {type(timings).__name__}")
        self.config, self.fleet, self.task = config, fleet, task
        self.plan = plan or _no_faults()
        self.profile = self.plan.profile
        self.timings = timings
        self.turns = turns
        self.store_factory = store_factory or (lambda tid: MemoryStore())
        self.audit = audit
        self.on_step = on_step
        self.max_kills = max_kills
        self.must_survive, self.owner_epoch, self.fence_check = must_survive, owner_epoch, fence_check
        self.clock = fleet.clock
        self._admission = AdmissionPolicy({task.grant_id: set(task.registry.names())})
        self._policy = PolicyConfig((RemedyOption("error_feedback", RepairCosts(tokens=REPAIR_TOKENS, usd=0.0, s=0.0),
                                                  self.profile.repair_success, {"model": "stand-in"}),),
                                    k_repair=config.forward_repair_k) if config.forward_repair_k else None
        self._run: _Run | None = None
        self.proc: _Proc | None = None
        self.outcome: TrajectoryOutcome | None = None

    # --- the environment's side -------------------------------------------------------------------
    def _mark_fault(self) -> None:
        run = self._run
        if run is not None and run.fault_turn is None:
            run.fault_turn, run.fault_t0, run.fault_cpu = run.turn, self.clock(), 0.0

    def _draw(self) -> Fault:
        run = self._run
        nth = run.turn_proposals.get(run.turn, 0)
        run.turn_proposals[run.turn] = nth + 1
        fault = self.plan.draw(run.index, run.proposals, turn=run.turn + 1, nth=nth)
        run.proposals += 1
        self.clock.advance(self.timings.proposal_s)
        if fault.kind is not None:
            run.outcome.faults.append({"turn": run.turn + 1, "proposal": run.proposals, **fault.as_dict()})
        return fault

    def _arm(self, op_id: str, fault: Fault, args: dict[str, Any]) -> dict[str, Any]:
        run = self._run
        if fault.kind == "network_drop":
            run.drops[op_id] = fault.after_effect
        elif fault.kind == "process_kill":
            run.kills[op_id] = fault.position or "before_intent"
        run.remembered[op_id] = dict(args)
        return dict(args)

    # --- the gate's position hook: kills, RTO, the per-step callback -------------------------------
    def _hook(self, name: str, ev: Event | None) -> None:
        run = self._run
        if run is None:
            return
        if ev is not None and run.recovering is not None:   # the recovered process's first record
            r, run.recovering = run.recovering, None
            cpu = time.perf_counter() - r["cpu0"]
            virtual = self.clock() - r["t0"]
            r["kill"].update(rto_cpu_s=cpu, rto_virtual_s=virtual, rto_s=cpu + virtual, probes=run.probes - r["probes"])
            run.fault_cpu += cpu
        if self.on_step is not None:
            self.on_step(self, name, ev)
        if not run.kills:
            return
        if name == "after:ToolIntent":
            run.last_intent = ev.payload.operation_id
            if run.kills.get(run.last_intent) == "after_intent":
                run.kills.pop(run.last_intent)
                raise _Kill("after_intent")
        elif name == "after:dispatch" and run.kills.get(run.last_intent or "") == "after_dispatch":
            run.kills.pop(run.last_intent)
            raise _Kill("after_dispatch")
        elif name == "after:SagaStepChanged" and ev.payload.state == "PENDING" and \
                run.kills.get(ev.payload.step_id) == "before_intent":
            run.kills.pop(ev.payload.step_id)
            raise _Kill("before_intent")

    # --- one process ------------------------------------------------------------------------------
    def _start(self, store: Any) -> _Proc:
        run, cfg, task = self._run, self.config, self.task
        log = TrajectoryLog(store, run.tid, must_survive=self.must_survive, owner_epoch=self.owner_epoch)
        gate = DispatchGate(log, self._admission, coalesce_admission=True, on_position=self._hook,
                            fence_check=self.fence_check)
        endpoints = _Endpoints(self, self.fleet.client(run.tid))
        retry = RetryPolicy(max_attempts=3 if cfg.reconciliation_probe else 1, base_s=0.05, cap_s=1.0, seed=run.index)
        runner = SagaRunner(gate, task.registry, endpoints, saga_id=run.tid, grant_id=task.grant_id, retry=retry,
                            sleep=self.clock.advance, require_verification=cfg.pivot_gate)
        loop = None
        if self._policy is not None:
            loop = RepairLoop(runner, RepairLoopConfig(self._policy, task.tool_costs, seed=run.index), self._repairer,
                              sleep=self.clock.advance)
        self.proc = _Proc(store, gate, runner, loop)
        if gate.record.task is None:
            gate.start(TaskStarted(task_id=run.tid, requester="synthesis-harness", objective=task.objective,
                                   grant_ids=[task.grant_id], budget_ceiling_usd=100.0))
        return self.proc

    def _parse(self, text: str, turn: TurnSpec) -> dict[str, Any]:
        """The model's tool call text -> arguments (ValueError when malformed; with schema
        validation also when it names another tool or lacks a required argument)."""
        call = json.loads(text)
        if self.config.schema_validation:
            if not isinstance(call, dict) or call.get("tool") != turn.tool \
                    or not isinstance(call.get("arguments"), dict):
                raise ValueError(f"the call is not {{tool: {turn.tool}, arguments: {{...}}}}")
            missing = [k for k in turn.required if k not in call["arguments"]]
            if missing:
                raise ValueError(f"{turn.tool}: missing required argument(s) {missing}")
        return dict(call["arguments"])

    def _malformed(self, turn: TurnSpec, text: str, exc: Exception) -> None:
        """A malformed tool call, as this configuration meets it (returns only to re-sample)."""
        cfg, gate = self.config, self.proc.gate
        self._mark_fault()
        note = {"tool": turn.tool, "text": text[:200], "error": str(exc)[:200]}
        if cfg.schema_validation:
            gate.append(RuntimeInput(kind="observation", name="schema_rejected", value=note))
            return
        if cfg.saga_compensation:
            raise _Stop(self._unwind("a malformed tool call, treated as a tool failure"))
        if cfg.durable_log:
            gate.append(RuntimeInput(kind="observation", name="malformed_tool_call", value=note))
            raise _Stop("HALTED")
        raise _Stop("CRASHED")

    def _emission(self, turn: TurnSpec, args: dict[str, Any], fault: Fault) -> str:
        text = json.dumps({"tool": turn.tool, "arguments": args}, sort_keys=True)
        if fault.kind == "format_corruption":   # truncated mid-value: not JSON any more
            return text[: max(1, int(len(text) * (0.3 + 0.5 * fault.repair_u)))]
        return text

    def _propose(self, turn: TurnSpec, outputs: dict[str, Any]) -> dict[str, Any]:
        runner, run = self.proc.runner, self._run
        op_id = runner.next_step_id
        op = runner.gate.record.operations.get(op_id)
        if op is not None and op.kind == "tool" and op.arguments is not None:
            return dict(op.arguments)   # a re-run: the request the log holds
        if op_id in run.remembered:
            return dict(run.remembered[op_id])   # the seeded model proposes the same again
        for _ in range(self.profile.resample_max + 1):
            fault = self._draw()
            args = turn.broken(outputs, 0) if fault.kind == "tool_exception" else turn.make(outputs)
            text = self._emission(turn, args, fault)
            try:
                parsed = self._parse(text, turn)
            except ValueError as exc:
                self._malformed(turn, text, exc)
                continue
            return self._arm(op_id, fault, parsed)
        raise _Stop(self._stop_state(f"{turn.tool}: malformed calls past the re-sample bound", in_doubt=False))

    def _repairer(self, frame: RepairFrame) -> dict[str, Any] | None:
        """The repair pass (RepairLoop's ``repairer``): the stand-in model proposes again, under
        the same fault plan, right with probability ``repair_success``."""
        run = self._run
        turn, outputs = run.current
        op_id = self.proc.runner.next_step_id
        if op_id in run.remembered:
            return dict(run.remembered[op_id])
        self._mark_fault()
        for _ in range(self.profile.resample_max + 1):
            fault = self._draw()
            wrong = fault.kind == "tool_exception" or fault.repair_u >= self.profile.repair_success
            if wrong:
                args = dict(frame.arguments) if self.profile.repair_failure == "spin" else \
                    turn.broken(outputs, frame.repair_number)
            else:
                args = turn.make(outputs)
            text = self._emission(turn, args, fault)
            try:
                parsed = self._parse(text, turn)
            except ValueError as exc:
                self._malformed(turn, text, exc)
                continue
            return self._arm(op_id, fault, parsed)
        return None

    def _unwind(self, reason: str) -> str:
        try:
            return self.proc.runner.unwind(reason[:400])
        except PivotCrossedError:
            return "FROZEN"
        except SagaPanicError:
            return "PANIC"

    def _stop_state(self, why: str, *, in_doubt: bool) -> str:
        cfg = self.config
        if cfg.saga_compensation:
            return self._unwind(why)
        if cfg.durable_log:
            return "HALTED"
        return "ABORTED"

    def _read(self, action: str, arguments: dict[str, Any]) -> dict[str, Any]:
        run = self._run
        run.reads += 1
        status, body = self.proc.runner.endpoints.call(action, arguments, f"{run.tid}.gate.r{run.reads}", None)
        if status != 200:
            raise ServiceError(f"{action}: {status} {body.get('error')}")
        return body

    def _pivot_gate(self, outputs: dict[str, Any]) -> None:
        run, runner = self._run, self.proc.runner
        if runner.saga.crossing is not None:
            return
        verdict = run_gate(self.task.pivot_checks(self._read, run.tid, outputs, run.specs))
        pivot = run.outcome.pivot
        pivot.update(reached=True, checks_passed=verdict.passed, failed_checks=list(verdict.failed_checks))
        if not self.config.pivot_gate:   # measured only: the crossing does not wait for it
            pivot["verified"] = False
            return
        pivot["verified"] = verdict.passed
        try:
            runner.verify_pivot(verdict)
        except PivotRefusedError as exc:
            raise _Stop(self._unwind(f"the pre-pivot gate refused: {exc}")) from None

    def _turn(self, turn: TurnSpec, outputs: dict[str, Any]) -> dict[str, Any]:
        run = self._run
        run.current = (turn, outputs)
        args = self._propose(turn, outputs)
        blind = 0
        while True:
            try:
                if self.proc.loop is not None:
                    return self.proc.loop.step(turn.tool, args)
                return self.proc.runner.step(turn.tool, args)
            except StepFailedError as exc:
                in_doubt = bool((exc.error or {}).get("in_doubt"))
                if in_doubt and self.config.retry_blindly and blind < BLIND_RETRIES_MAX:
                    blind += 1
                    run.outcome.blind_retries += 1
                    continue   # the same call again, as a new request (its own operation id and key)
                raise _Stop(self._stop_state(str(exc), in_doubt=in_doubt)) from None
            except RecoveryTerminated as exc:
                raise _Stop(exc.state or "ABORT_CONSISTENT") from None
            except (PivotCrossedError, TrajectoryFrozenRefusal):
                raise _Stop("FROZEN") from None
            except SagaPanicError:
                raise _Stop("PANIC") from None

    def _completed_outputs(self) -> dict[str, Any]:
        """A saga the log shows COMPLETED (a kill after its last record): the turns' outputs, from
        the committed steps in order (one per turn)."""
        runner, run = self.proc.runner, self._run
        committed = sorted((s for s in runner.saga.steps.values() if s.state == "COMMITTED"), key=lambda s: s.index)
        ops = runner.gate.record.operations
        return {t.key: {k: v for k, v in (ops[s.step_id].outcome or {}).items()
                        if k not in ("status", "http_status", "duplicate")}
                for t, s in zip(run.specs, committed)}

    def on_start(self) -> None:
        """A subclass's hook, called each time the scheduler starts walking the turns: on the first
        start and after every restart from the log (``self.proc`` then holds the rebuilt runner and
        gate, ``self.outcome.kills`` the kills so far). Default: nothing. Figure 5's restarted model
        proposing the pivot early (:class:`kernel_lib.sim.figure5.Figure5Harness`) is one."""

    def _script(self) -> dict[str, Any]:
        self.on_start()
        run = self._run
        state = self.proc.runner.saga.state
        if state == "COMPLETED":
            run.turns_done = len(run.specs)
            return self._completed_outputs()
        if state in ("ABORT_CONSISTENT", "PANIC") or self.proc.gate.record.control_state == "FROZEN":
            raise _Stop("FROZEN" if self.proc.gate.record.control_state == "FROZEN" else state)
        outputs: dict[str, Any] = {}
        for i, turn in enumerate(run.specs):
            run.turn = i
            if turn.pivot:
                self._pivot_gate(outputs)
            outputs[turn.key] = self._turn(turn, outputs)
            if run.fault_turn == i:
                run.outcome.repairs_s.append(self.clock() - run.fault_t0 + run.fault_cpu)
                run.fault_turn = None
            for k in run.outcome.kills:
                if k["turn"] == i + 1:
                    k["recovered"] = True
            run.turns_done = max(run.turns_done, i + 1)
            if turn.pivot:
                run.outcome.pivot["crossed"] = True
        self.proc.runner.complete()
        return outputs

    def _committed_in(self, store: Any) -> int:
        saga = fold_saga(store.read(self._run.tid), self._run.tid)
        return sum(1 for s in saga.steps.values() if s.state == "COMMITTED")

    # --- the scheduler: one trajectory ------------------------------------------------------------
    def run(self, trajectory_id: str, index: int = 0) -> TrajectoryOutcome:
        """Run one trajectory to its end (completed or not) under the configuration and the fault
        plan (draws of trajectory ``index``); returns its :class:`TrajectoryOutcome`."""
        cfg = self.config
        specs = self.task.turns(trajectory_id, self.turns)
        outcome = TrajectoryOutcome(trajectory_id, cfg.name, turns=len(specs))
        outcome.pivot = {"reached": False, "verified": None, "checks_passed": None, "crossed": False}
        run = self._run = _Run(trajectory_id, index, specs, outcome)
        self.outcome = outcome
        t0, cpu0 = self.clock(), time.perf_counter()
        store = self.store_factory(trajectory_id)
        try:
            while True:
                try:
                    self._start(store)
                    outcome.outputs = self._script()
                    outcome.state = "COMPLETED"
                    break
                except _Kill as k:
                    self._on_kill(str(k), store)
                    if not cfg.durable_log:
                        outcome.state = "LOST"
                        store = self.store_factory(trajectory_id)   # the in-memory records died with it
                        break
                    if len(outcome.kills) > self.max_kills:
                        outcome.state = "LOST"
                        break
                    self.clock.advance(self.timings.restart_s)
                    run.recovering = {"cpu0": time.perf_counter(), "t0": self.clock() - self.timings.restart_s,
                                      "probes": run.probes, "kill": outcome.kills[-1]}
                except _Stop as s:
                    outcome.state = s.state
                    break
        finally:
            run.recovering = None
        outcome.turns_committed = run.turns_done
        outcome.proposals = run.proposals
        outcome.virtual_s = self.clock() - t0
        outcome.cpu_s = time.perf_counter() - cpu0
        if outcome.completed:
            outcome.kept = sorted(v for t in specs if not t.pivot for k, v in (outcome.outputs.get(t.key) or {}).items()
                                  if k.endswith("_id") and isinstance(v, str)
                                  and not (t.tool == "inspect_migrations"))
        if self.audit is not None:
            outcome.invariant.append(self._check(store if cfg.durable_log else None, "end"))
        self._run = None
        self.proc = None
        return outcome

    def _on_kill(self, position: str, store: Any) -> None:
        run, cfg = self._run, self.config
        self._mark_fault()
        surviving = self._committed_in(store) if cfg.durable_log else 0
        kill = {"turn": run.turn + 1, "position": position, "rpo_turns": max(0, run.turns_done - surviving),
                "committed_turns": run.turns_done, "recovered": False, "rto_s": None, "rto_cpu_s": None,
                "rto_virtual_s": None, "probes": 0}
        run.outcome.kills.append(kill)
        if self.audit is not None:
            run.outcome.invariant.append(self._check(store if cfg.durable_log else None, f"restart after {position}"))

    def _check(self, store: Any, when: str) -> dict[str, Any]:
        """The crash-consistency check on what survives (the durable log; nothing without one)."""
        from kernel_lib.recovery.synthesis.invariant import check_crash_consistency

        tid = self._run.tid
        events = list(store.read(tid)) if store is not None else []
        report = check_crash_consistency(events, self.audit(), trajectory_id=tid)
        return {"when": when, **report.as_dict()}
