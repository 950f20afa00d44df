"""The trajectory saga under interleaved forward steps, faults, crashes and unwinds (hypothesis).

Failure Recovery, definition 0.1, tables 2 and 3 and "Saga compensation stacks" (crash during
the compensation phase). A :class:`SagaMachine` drives the saga runner on the simulated twins
(:class:`~kernel_lib.sim.services.TwinFleet`) over a real store (memory, SQLite or the segment log
in a temporary folder). Rules interleave:

* forward steps: a tier-II tool of the deployment registry and, sometimes, a pivot (tier III);
* injected faults of every class of :data:`~kernel_lib.sim.services.FAULT_KINDS`, on forward
  tools and on compensators;
* worker crashes: the runner's process dies at a chosen ``on_position`` of a step, an unwind or
  a recovery; a new runner over the same log (reopened from its files) re-runs the script, as
  :mod:`kernel_lib.sim.saga_sweep` does; on the memory store also host crashes (the log is cut at
  its durable head);
* service crashes and restarts; voluntary unwinds (the agent gives up) and the unwind after a
  failed step;
* an illegal table-2 transition, which must raise and append nothing.

Invariant after every finished unwind (ABORT_CONSISTENT, or PANIC and frozen), judged by the
services' own audit trails (:func:`~kernel_lib.sim.saga_sweep.account`) and the fleet facade:
every committed tier-II effect is compensated exactly once or listed as residue in the PANIC /
freeze record; no compensator is applied twice; no forward effect is applied twice; and Σ as
folded from the log (steps whose C_i is recorded and did not reach COMPENSATED) names exactly the
resources the services still hold for the saga. Then a new saga starts on the same fleet and
store (another trajectory and saga id).

Run derandomized with ``pytest --hypothesis-profile=ci`` (tests/conftest.py).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
from hypothesis import event, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kernel_lib.errors import SagaPanicError, SagaTransitionError, StepFailedError, TrajectoryFrozenRefusal
from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate
from kernel_lib.log import MemoryStore, TrajectoryLog, open_store
from kernel_lib.recovery.runner import RetryPolicy, SagaRunner
from kernel_lib.recovery.saga import TRANSITIONS, fold_saga, step_operation_id
from kernel_lib.sim.deployment import TAKEN_DOMAIN, deployment_registry
from kernel_lib.sim.saga_sweep import GRANT_ID, account, start_task
from kernel_lib.sim.services import ACTIONS, FAULT_KINDS, SERVICES, TwinFleet

REGISTRY = deployment_registry()
#: tier-II forward tools (every create of the deployment registry) and the pivots (tier III)
FORWARD_TOOLS = sorted(n for n in REGISTRY.names() if REGISTRY.contract(n).tier == "II"
                       and not REGISTRY.contract(n).is_compensator)
PIVOT_TOOLS = sorted(n for n in REGISTRY.names() if REGISTRY.contract(n).tier == "III")
COMPENSATORS = sorted(n for n in REGISTRY.names() if REGISTRY.contract(n).is_compensator)
STEP_STATES = [s for s in TRANSITIONS if s is not None]


def _held(fleet, *, live_only: bool) -> dict:
    """What each service holds, read from its durable state even while it is crashed (the
    oracle's view: the facade answers no reads of a dead service, as a dead process would not)."""
    return {n: t.logic.resources(live_only=live_only) for n, t in fleet.twins.items()}


def _audits(fleet) -> dict:
    """Every service's audit trail, read the same way as :func:`_held`."""
    return {n: list(t.logic.state["audit"]) for n, t in fleet.twins.items()}


class _Crash(BaseException):
    """The worker process dies (a BaseException: no ``except Exception`` in the runner catches it)."""


def _arguments(tool: str, n: int, taken: bool) -> dict[str, Any]:
    if tool == "publish_dns":
        return {"name": TAKEN_DOMAIN if taken else f"svc{n}.example.test", "ip_id": "ip-x"}
    return {"n": n}


class SagaMachine(RuleBasedStateMachine):
    """One fleet of twins and one store; sagas run one after another on them (module docstring).

    ``phase`` of the current saga: ``running`` (the script may take its next step), ``failed``
    (a step failed: the script's next move is the unwind), ``crashed`` (the worker died; only
    recovery runs), ``ended`` (set only inside :meth:`_finish`, which checks and starts anew).
    """

    kind = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="saga_sm_"))
        self.fleet = TwinFleet()
        self.fleet.taken_name(TAKEN_DOMAIN)
        self.store = self._open(reopen=False)
        self.sagas = 0
        self.finished: list[str] = []
        self._new_saga()

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # --- the worker --------------------------------------------------------------------------------
    def _open(self, *, reopen: bool) -> Any:
        if self.kind == "memory":
            return MemoryStore()
        return open_store(self.kind, self.dir / ("log.sqlite" if self.kind == "sqlite" else "seglog"),
                          create=not reopen)

    def _new_saga(self) -> None:
        self.sagas += 1
        self.saga_id = f"deploy{self.sagas}"
        self.trajectory_id = f"traj-sm-{self.sagas}"
        self.script: list[tuple[str, dict[str, Any]]] = []
        self.phase = "running"
        self.crash_after: int | None = None
        self.runner = self._start_runner()

    def _hook(self, name: str, ev: Any) -> None:
        if self.crash_after is not None:
            self.crash_after -= 1
            if self.crash_after <= 0:
                self.crash_after = None
                raise _Crash(name)

    def _start_runner(self) -> SagaRunner:
        log = TrajectoryLog(self.store, self.trajectory_id, must_survive="none")
        gate = DispatchGate(log, AdmissionPolicy({GRANT_ID: set(REGISTRY.names())}), coalesce_admission=True,
                            on_position=self._hook)
        if gate.record.task is None:
            start_task(gate, self.trajectory_id)
        return SagaRunner(gate, REGISTRY, self.fleet.client(self.trajectory_id), saga_id=self.saga_id,
                          grant_id=GRANT_ID, retry=RetryPolicy(max_attempts=4), sleep=self.fleet.clock.advance)

    def _armed(self, fn, crash_at: int | None, host: bool = False) -> Any:
        """Run ``fn()`` with the worker dying after the ``crash_at``-th position (None: no crash)."""
        self.crash_after = crash_at
        try:
            return fn()
        except _Crash as c:
            event(f"worker crashed after {c}" if not host or self.kind != "memory" else "host crashed")
            self.phase = "crashed"
            self._crashed(host)
            return None
        finally:
            self.crash_after = None

    def _crashed(self, host: bool) -> None:
        durable_head = self.runner.gate.log.durable_head
        self.runner = None
        if self.kind != "memory":    # the dead worker's handle is gone; a new process opens the files
            self.store.close()
            self.store = self._open(reopen=True)
        elif host:                   # only what a barrier covered survives
            kept = [ev for tid in self.store.trajectories() for ev in self.store.read(tid)
                    if tid != self.trajectory_id or ev.sequence_number <= durable_head]
            self.store = MemoryStore()
            for tid in dict.fromkeys(ev.trajectory_id for ev in kept):
                self.store.append_batch([ev for ev in kept if ev.trajectory_id == tid], "memory")

    def _run_script(self) -> None:
        """The agent's program re-run by a new worker: every step of the script again (committed
        ones are answered from the log), then the unwind when a step failed or the saga is
        already unwinding."""
        try:
            for tool, args in self.script:
                self.runner.step(tool, args)
        except StepFailedError:
            self._unwind_now()
            return
        except TrajectoryFrozenRefusal:
            self._finish("FROZEN")
            return
        self.phase = "running"

    def _unwind_now(self) -> None:
        try:
            state = self.runner.unwind("test")
        except SagaPanicError:
            state = "PANIC"
        except TrajectoryFrozenRefusal:
            state = "FROZEN"
        self._finish(state)

    # --- rules -------------------------------------------------------------------------------------
    @precondition(lambda self: self.phase == "running")
    @rule(tools=st.lists(st.sampled_from(FORWARD_TOOLS), min_size=1, max_size=4),
          pivot=st.none() | st.sampled_from(PIVOT_TOOLS), pivot_at=st.integers(0, 3),
          taken=st.integers(0, 7), crash_at=st.none() | st.integers(1, 40), host=st.booleans())
    def forward_steps(self, tools, pivot, pivot_at, taken, crash_at, host):
        """The script's next steps (tier-II tools, sometimes a pivot among them), in one worker
        run that may die at its ``crash_at``-th position; the first failure stops the run."""
        if pivot is not None:
            tools = tools[:pivot_at] + [pivot] + tools[pivot_at:]

        def go() -> None:
            for tool in tools:
                args = _arguments(tool, len(self.script) + 1, taken == 0 and tool == "publish_dns")
                self.script.append((tool, args))
                try:
                    self.runner.step(tool, args)
                except StepFailedError:
                    self.phase = "failed"
                    return
                except SagaPanicError:   # an effect no compensator could be bound for: frozen
                    self._finish("PANIC")
                    return
                self._check_sigma_matches_services()

        self._armed(go, crash_at, host)

    @precondition(lambda self: self.phase == "failed" or (self.phase == "running" and self.script))
    @rule(crash_at=st.none() | st.integers(1, 20), host=st.booleans())
    def unwind(self, crash_at, host):
        self._armed(self._unwind_now, crash_at, host)

    @precondition(lambda self: self.phase == "crashed")
    @rule(crash_at=st.none() | st.integers(1, 20), host=st.booleans())
    def recover(self, crash_at, host):
        def go() -> None:
            self.runner = self._start_runner()
            self.phase = "recovering"
            self._run_script()

        self._armed(go, crash_at, host)

    @rule(action=st.sampled_from(sorted(ACTIONS)), kind=st.sampled_from(FAULT_KINDS), count=st.integers(1, 2))
    def inject_fault(self, action, kind, count):
        params = {"slow": {"delay_s": 2.0}, "rate_limited": {"retry_after_s": 0.5}}.get(kind, {})
        self.fleet.inject(action, kind, count, **params)

    @precondition(lambda self: self.script)
    @rule(data=st.data(), kind=st.sampled_from(FAULT_KINDS), count=st.integers(1, 4))
    def inject_fault_on_the_saga(self, data, kind, count):
        """A fault on a tool the script already used, or on its compensator."""
        tool = data.draw(st.sampled_from(sorted({t for t, _ in self.script})))
        comp = REGISTRY.contract(tool).compensator
        self.inject_fault(data.draw(st.sampled_from([tool] + ([comp.tool] if comp else []))), kind, count)

    @rule(service=st.sampled_from(SERVICES))
    def crash_service(self, service):
        self.fleet.crash(service)

    @rule(service=st.sampled_from(SERVICES))
    def restart_service(self, service):
        self.fleet.restart(service)

    @precondition(lambda self: self.phase in ("running", "failed"))
    @rule(data=st.data())
    def illegal_transition(self, data):
        """Table 2: a transition it does not list raises SagaTransitionError and appends nothing."""
        steps = sorted(self.runner.saga.steps.values(), key=lambda s: s.index)
        head, stored = self.runner.gate.log.head, self.store.head(self.trajectory_id)
        if steps:
            step = data.draw(st.sampled_from(steps))
            illegal = [s for s in STEP_STATES if s not in TRANSITIONS[step.state]]
            target = data.draw(st.sampled_from(illegal))
            try:
                self.runner._append_step(step, target, deferred=False)
            except SagaTransitionError as exc:
                assert (exc.from_state, exc.to_state) == (step.state, target)
            else:
                raise AssertionError(f"{step.state} -> {target} was appended")
        else:
            from kernel_lib.recovery.saga import SagaStep
            target = data.draw(st.sampled_from([s for s in STEP_STATES if s != "PENDING"]))
            ghost = SagaStep(step_operation_id(self.saga_id, 99), 99, "reserve_ip", "II", None)
            try:
                self.runner._append_step(ghost, target, deferred=False)
            except SagaTransitionError:
                pass
            else:
                raise AssertionError(f"(new) -> {target} was appended")
        assert (self.runner.gate.log.head, self.store.head(self.trajectory_id)) == (head, stored)

    # --- the judgement -----------------------------------------------------------------------------
    def _saga_resources(self) -> dict[str, str]:
        """``{resource_id: kind}`` the services still hold (not released) for this saga's
        compensable steps, read from the services' own state."""
        prefix = self.saga_id + "."
        return {rid: r["kind"] for held in _held(self.fleet, live_only=True).values() for rid, r in held.items()
                if str(r["operation_id"]).startswith(prefix) and not r.get("pivot")}

    def _log_uncompensated(self) -> set[str]:
        """The resource ids Σ (folded from the log, not the runner's memory) still owes a
        compensator: every recorded C_i whose step did not reach COMPENSATED."""
        saga = fold_saga(self.store.read(self.trajectory_id), self.saga_id)
        return {str(v) for s in saga.steps.values() if s.compensator is not None and s.state != "COMPENSATED"
                for v in s.compensator["arguments"].values()}

    def _check_sigma_matches_services(self) -> None:
        assert self._log_uncompensated() == set(self._saga_resources()), (
            self._log_uncompensated(), self._saga_resources(), self.script)

    def _finish(self, state: str) -> None:
        self.crash_after = None   # the judgement and the next saga's start are not crashed
        verdict = account(_audits(self.fleet), _held(self.fleet, live_only=False),
                          self.store.read(self.trajectory_id), saga_id=self.saga_id)
        detail = (state, verdict, self.script)
        assert verdict["compensators_repeated"] == 0, detail
        assert verdict["forward_repeated"] == 0, detail
        assert verdict["effects_left_unlisted"] == 0, detail
        saga = fold_saga(self.store.read(self.trajectory_id), self.saga_id)
        if state == "ABORT_CONSISTENT":
            assert saga.state == "ABORT_CONSISTENT" and not saga.stack, detail
            assert not self._saga_resources(), detail
        else:
            assert saga.frozen is not None, detail
            residue = saga.frozen.get("residue") or []
            ids = {r.get("resource_id") for r in residue if r.get("resource_id")}
            ops = {r.get("operation_id") for r in residue if not r.get("resource_id")}
            held = _held(self.fleet, live_only=True)
            for rid in self._saga_resources():
                op = next(r["operation_id"] for h in held.values() for k, r in h.items() if k == rid)
                assert rid in ids or op in ops, (rid, op, detail)
        if state == "ABORT_CONSISTENT":
            self._check_sigma_matches_services()
        self.finished.append(state)
        event(f"saga ended {state} after {len(self.script)} steps")
        self.phase = "ended"
        self.fleet.clear_faults()
        for service in SERVICES:
            self.fleet.restart(service)
        self._new_saga()

    @invariant()
    def log_folds(self):
        """The log always folds (no illegal transition ever reached it)."""
        fold_saga(self.store.read(self.trajectory_id), self.saga_id)


_SETTINGS = dict(stateful_step_count=40, deadline=None)
SagaMachine.TestCase.settings = settings(max_examples=100, **_SETTINGS)
test_saga_state_machine_memory = SagaMachine.TestCase


class SagaMachineSQLite(SagaMachine):
    kind = "sqlite"


SagaMachineSQLite.TestCase.settings = settings(max_examples=25, **_SETTINGS)
test_saga_state_machine_sqlite = SagaMachineSQLite.TestCase


class SagaMachineSegment(SagaMachine):
    kind = "segment"


SagaMachineSegment.TestCase.settings = settings(max_examples=25, **_SETTINGS)
test_saga_state_machine_segment = SagaMachineSegment.TestCase
