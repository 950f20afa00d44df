"""The systems-administration trajectory of figure 5 as a fleet program (``sysadmin``): the
synthesized harness (:class:`~kernel_lib.recovery.synthesis.harness.Harness`, one of table 14's
configurations) run by a fleet worker over the live tool services, with the chapter's fault
profile, and its process kills made real (Failure Recovery, "Fault-Tolerant System Synthesis",
"Fault injection benchmarks").

Parameters of a submitted trajectory: ``config`` (``unmanaged``, ``wal_only``, ``saga_only``,
``synthesized``), ``seed`` and ``index`` (the seeded :class:`~kernel_lib.recovery.synthesis.faults.FaultPlan`'s
trajectory index), ``turns`` (6 or more), ``profile`` (:class:`~kernel_lib.recovery.synthesis.faults.FaultProfile`
fields; default: no faults) and ``timings`` (:class:`~kernel_lib.recovery.synthesis.faults.Timings`
fields; default all 0: on the live substrate every wait is real and measured, nothing is added).

How each fault of the profile is met live (the same draws as the simulation, per executed proposal):

* **network drop**: dropped at this worker's client, on the very attempt it was drawn for: before
  the request leaves (the service never receives it) or after the service's answer arrived (the
  service applied it, the answer is thrown away); the caller sees a timeout. (The services' own
  ``timeout_*`` faults are queued per action for the next caller, so with several workers they
  could hit another trajectory: not used here.)
* **tool exception** and **format corruption**: as in the simulation (a wrong call the service
  itself refuses; a truncated tool call the harness parses);
* **process kill**: a real ``SIGKILL`` of the worker process, sent by the worker to itself at the
  drawn position (before the intent is written, after the intent, after the dispatch before the
  result is logged), recorded first in the fleet's queue with the turns it had committed; another
  worker takes the trajectory over when the lease expires and resumes it from the log (the
  harness runs the same script again over the surviving log). A configuration without a durable
  log finds nothing to resume: the taken-over trajectory ends ``LOST``.

A takeover draws its faults from the same plan at an offset per owner epoch (a replayed proposal
would otherwise meet the very kill that ended the previous owner, forever), and draws nothing for
a step the previous owner had already started (its proposal was made; the simulated harness
remembers it the same way). What each attempt
meets is noted in the queue as it happens (``faults``; on a takeover ``surviving_committed_turns``
and the crash-consistency check of what survived), so a killed worker's draws are not lost.
"""

from __future__ import annotations

import time
from typing import Any

from kernel_lib.errors import ConfigError
from kernel_lib.recovery.runner import ForwardingEndpoints

__all__ = ["run_sysadmin", "sysadmin_settings", "SYSADMIN_PARAMS", "LiveFaultFleet"]

#: a takeover's draws start at proposal index epoch * this (far past any trajectory's proposals)
EPOCH_PROPOSAL_OFFSET = 100_000


class _DropEndpoints(ForwardingEndpoints):
    """The endpoints the harness's runner gets: the worker's guarded endpoints, with network drops
    armed by :meth:`LiveFaultFleet.inject` applied at this client."""

    def __init__(self, fleet: "LiveFaultFleet"):
        super().__init__(fleet.endpoints)
        self.fleet = fleet

    def send(self, intent: Any) -> Any:
        kind = self.fleet.drops.pop(intent.tool, None)
        if kind == "timeout_before":
            raise TimeoutError(f"{intent.tool}: the request was dropped on its way out (injected network drop)")
        reply = self.inner.send(intent)
        if kind == "timeout_after":
            raise TimeoutError(f"{intent.tool}: the answer was dropped on its way back (injected network drop; the "
                               "service applied the request)")
        return reply


class LiveFaultFleet:
    """The fleet facade the harness needs (``client``, ``inject``, ``clock``) over one worker's
    endpoints: ``inject(action, "timeout_before"|"timeout_after")`` arms a drop for this worker's
    next send of ``action`` (never another worker's); other faults go to the services; the clock is
    the wall clock (a wait really waits). ``on_client()`` is called when the harness asks for a
    client, right after it opened and folded the log (the fleet's ``folded`` milestone)."""

    def __init__(self, endpoints: Any, services: Any, on_client: Any = None):
        from kernel_lib.live.services import WallClock

        self.endpoints, self.services = endpoints, services
        self.clock = WallClock()
        self.drops: dict[str, str] = {}
        self.on_client = on_client or (lambda: None)

    def client(self, trajectory_id: str) -> _DropEndpoints:
        self.on_client()
        return _DropEndpoints(self)

    def inject(self, action: str, kind: str, count: int = 1, **params: Any) -> dict[str, Any]:
        if kind in ("timeout_before", "timeout_after"):
            self.drops[action] = kind
            return {"kind": kind, "count": 1, "where": "this worker's client"}
        return self.services.inject(action, kind, count, **params)


def _plan(base: Any, epoch: int, on_kill: Any, on_fault: Any, is_replay: Any) -> Any:
    from kernel_lib.recovery.synthesis.faults import Fault, FaultPlan

    class LivePlan(FaultPlan):
        """The seeded plan, shifted per owner epoch; a drawn kill becomes a real one (``on_kill``)
        and reaches the harness as no fault."""

        def __init__(self) -> None:
            super().__init__(base.seed, base.profile)

        def draw(self, trajectory: int, proposal: int, *, turn: int = 0, nth: int = 0) -> Fault:
            if is_replay():   # the previous owner proposed this step (and was killed): nothing new is drawn
                return Fault(None)
            f = base.draw(trajectory, proposal + (epoch - 1) * EPOCH_PROPOSAL_OFFSET, turn=turn, nth=nth)
            if f.kind is None:
                return f
            on_fault({"turn": turn, "proposal": proposal, "owner_epoch": epoch, **f.as_dict()})
            if f.kind == "process_kill":
                on_kill(f)
                return Fault(None, repair_u=f.repair_u)
            return f

    return LivePlan()


def _committed(saga: Any) -> int:
    return sum(1 for s in saga.steps.values() if s.state == "COMMITTED")


#: the parameters of the ``sysadmin`` program (module docstring)
SYSADMIN_PARAMS = ("config", "seed", "index", "turns", "profile", "timings")


def sysadmin_settings(params: dict[str, Any], *, strict: bool = True) -> tuple[Any, int, int, int, Any, Any]:
    """``(config, seed, index, turns, profile, timings)`` from a trajectory's parameters. Raises
    ConfigError: (``strict``) a parameter not in :data:`SYSADMIN_PARAMS` (the fleet checks a
    submission without the worker's own parameters), a name that is no configuration, a value of
    the wrong type or range, a profile or timings field that does not exist."""
    from kernel_lib.recovery.synthesis.config import config_named
    from kernel_lib.recovery.synthesis.faults import FaultProfile, Timings

    p = params
    unknown = sorted(set(p) - set(SYSADMIN_PARAMS))
    if strict and unknown:
        raise ConfigError(f"the sysadmin program has no parameter {', '.join(map(repr, unknown))}; it takes "
                          f"{', '.join(SYSADMIN_PARAMS)}")
    cfg = config_named(p.get("config", "synthesized"))
    seed, index, turns = p.get("seed", 0), p.get("index", 0), p.get("turns", 6)
    for name, v in (("seed", seed), ("index", index), ("turns", turns)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(f"{name} must be an integer, got {v!r}")
    if turns < 6:
        raise ConfigError(f"turns must be an integer >= 6 (the six-turn task), got {turns!r}")
    fields: list[tuple[str, Any, Any]] = [("profile", p.get("profile"), FaultProfile),
                                          ("timings", p.get("timings"), Timings)]
    for name, given, cls in fields:
        if given is not None and not isinstance(given, dict):
            raise ConfigError(f"{name} must be an object of {cls.__name__} fields, got {given!r}")
        bad = sorted(set(given or {}) - set(cls.__dataclass_fields__))
        if bad:
            raise ConfigError(f"{name} has no field {', '.join(map(repr, bad))}; its fields: "
                              f"{', '.join(cls.__dataclass_fields__)}")
    profile = FaultProfile(**p["profile"]) if p.get("profile") else FaultProfile(0.0, 0.0, 0.0, 0.0)
    timings = Timings(**{"timeout_s": 0.0, "probe_s": 0.0, "restart_s": 0.0, "proposal_s": 0.0,
                         **(p.get("timings") or {})})
    return cfg, seed, index, turns, profile, timings


def run_sysadmin(ctx: Any) -> dict[str, Any]:
    """The ``sysadmin`` fleet program (module docstring). Returns the harness's
    :meth:`~kernel_lib.recovery.synthesis.harness.TrajectoryOutcome.as_dict` with ``outcome`` (its
    state), ``state`` (``done``: the trajectory ended, whatever its outcome) and ``config``."""
    from kernel_lib.recovery.saga import fold_saga
    from kernel_lib.recovery.synthesis.faults import FaultPlan
    from kernel_lib.recovery.synthesis.harness import Harness
    from kernel_lib.recovery.synthesis.invariant import check_crash_consistency
    from kernel_lib.sim.sysadmin import SYSADMIN_TASK

    cfg, seed, index, turns, profile, timings = sysadmin_settings(ctx.params, strict=False)   # the worker's own too
    tid, epoch = ctx.trajectory_id, ctx.owner_epoch
    if ctx.claims > 1:   # a takeover: what survived the previous owner
        events = list(ctx.store.read(tid)) if ctx.store.head(tid) else []
        surviving = _committed(fold_saga(events, tid))
        report = check_crash_consistency(events, ctx.services.audits(), trajectory_id=tid)
        ctx.note(surviving_committed_turns=surviving, restart_invariant={"when": f"takeover (owner_epoch {epoch})",
                                                                         **report.as_dict()})
        if not cfg.durable_log:   # the previous owner's records died with its memory
            ctx.mark("folded")
            return {"outcome": "LOST", "state": "done", "config": cfg.name, "trajectory_id": tid,
                    "lost_because": "the configuration keeps its log in the worker's memory; the worker was killed"}
    faults: list[dict[str, Any]] = []
    armed: dict[str, str] = {}
    seen = {"last_intent": None}
    holder: dict[str, Any] = {}

    def on_fault(f: dict[str, Any]) -> None:
        faults.append(f)
        ctx.note(faults=faults)

    def on_kill(f: Any) -> None:
        armed[holder["h"].proc.runner.next_step_id] = f.position or "before_intent"

    def kill(position: str, op_id: str) -> None:
        h = holder["h"]
        ctx.kill_self({"kind": "process_kill", "position": position, "operation_id": op_id,
                       "turn": h._run.turn + 1 if h._run is not None else None,
                       "committed_turns": _committed(h.proc.runner.saga)})

    def on_step(h: Any, name: str, ev: Any) -> None:
        ctx.on_position(name, ev)
        if not armed:
            return
        if name == "after:SagaStepChanged" and ev.payload.state == "PENDING" \
                and armed.get(ev.payload.step_id) == "before_intent":
            armed.pop(ev.payload.step_id)
            kill("before_intent", ev.payload.step_id)
        elif name == "after:ToolIntent":
            seen["last_intent"] = ev.payload.operation_id
            if armed.get(ev.payload.operation_id) == "after_intent":
                armed.pop(ev.payload.operation_id)
                kill("after_intent", ev.payload.operation_id)
        elif name == "after:dispatch" and armed.get(seen["last_intent"] or "") == "after_dispatch":
            armed.pop(seen["last_intent"])
            kill("after_dispatch", seen["last_intent"])

    facade = LiveFaultFleet(ctx.endpoints, ctx.services, on_client=lambda: ctx.mark("folded"))
    base = FaultPlan(seed, profile)
    def is_replay() -> bool:
        runner = holder["h"].proc.runner
        return epoch > 1 and runner.next_step_id in runner.saga.steps

    harness = Harness(cfg, facade, SYSADMIN_TASK, plan=_plan(base, epoch, on_kill, on_fault, is_replay),
                      timings=timings,
                      turns=turns, store_factory=lambda _tid: ctx.store, on_step=on_step,
                      must_survive=ctx.must_survive, owner_epoch=epoch, fence_check=ctx.fence_check)
    holder["h"] = harness
    t0 = time.perf_counter()
    outcome = harness.run(tid, index)
    doc = outcome.as_dict()
    doc.update(outcome=outcome.state, state="done", config=cfg.name, process_s=round(time.perf_counter() - t0, 6),
               faults_this_process=faults)
    return doc
