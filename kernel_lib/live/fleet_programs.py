"""Trajectory programs the worker fleet runs, by name (:mod:`kernel_lib.live.fleet`).

A program is the trajectory's script: given a :class:`TrajectoryContext` (the log store, the
owner's epoch and the gate's lease check, the service endpoints behind the fleet's shared
breakers, the position hook), it builds its runner over the log and runs it to an end. It must
be safe to run again on the same log by another worker (Chapter 11's resume): every registered
program builds a :class:`~kernel_lib.recovery.runner.SagaRunner`, so a re-run answers committed
steps from the log, settles an in-doubt step with the service's status lookup and continues.

:data:`PROGRAMS` maps a name to a :class:`Program`; :func:`register_program` adds one (a user's
own script, or the sysadmin trajectory once :mod:`kernel_lib.sim.sysadmin` exists).

``deployment`` -- the deployment saga of :mod:`kernel_lib.sim.deployment` (T1..T5, five tier II
steps on the sandbox, egress_ip, build, firewall and dns services). Parameters: ``domain`` (the
DNS name T5 publishes; default a name derived from the trajectory id, so T5 succeeds and the saga
COMPLETES), ``fail_at_dns`` (True: publish the name another account owns, so T5's 409 makes the
saga unwind C4..C1 to ABORT_CONSISTENT), ``extra_steps`` (git branches before T5).

``sysadmin`` -- figure 5's six-turn systems-administration trajectory run by the synthesized
harness under one of table 14's configurations, with the chapter's fault profile and real
SIGKILLs (:mod:`kernel_lib.live.fleet_sysadmin`, which lists its parameters).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable

from kernel_lib.errors import ConfigError, SagaPanicError, TrajectoryFrozenRefusal

__all__ = ["TrajectoryContext", "Program", "PROGRAMS", "WORKER_PARAMS", "register_program", "get_program",
           "check_params", "log_residue"]


@dataclass
class TrajectoryContext:
    """What a worker hands a program for one claim of one trajectory.

    Fields:
        trajectory_id: the trajectory.
        params: the submitted parameters (JSON-able dict).
        store: the trajectory's log store (SQLite file, segment directory, or a memory store when
            durability is off).
        must_survive: the failure domain the trajectory's log declares (``host_crash``, or
            ``none`` with durability off).
        owner_epoch: this worker's ownership generation (stamp it on the log: ``TrajectoryLog``).
        fence_check: the dispatch gate's ownership hook (:class:`~kernel_lib.ownership.leases.LeaseCheck`).
        endpoints: the runner's :class:`~kernel_lib.recovery.runner.Endpoints` (the live services,
            each behind the fleet's shared circuit breaker).
        services: the attached :class:`~kernel_lib.live.services.LiveFleet` (resources, audits).
        on_position: the gate's position hook (the worker counts positions, times the first
            append, pauses where a test asked it to).
        mark: ``mark(name)`` records a milestone; a program calls ``mark("folded")`` once its
            runner has opened and folded the log.
        kill_self: ``kill_self(detail)`` records a kill of this worker in the queue and sends it a
            real SIGKILL (a program's drawn process-kill fault); it does not return.
        claims: this claim's number (1: the first owner; more: a takeover).
        note: ``note(**values)`` merges values into this attempt's notes in the queue at once (what
            a worker that may die next wants known: faults drawn, turns found committed).
        mode: ``forward`` (run the program) or ``unwind`` (the trajectory passed the fleet's
            forward give-up bound: :attr:`Program.unwind` runs instead, compensation only).
    """

    trajectory_id: str
    params: dict[str, Any]
    store: Any
    must_survive: str
    owner_epoch: int
    fence_check: Callable[[str, int], "str | None"] | None
    endpoints: Any
    services: Any
    on_position: Callable[[str, Any], None]
    mark: Callable[[str], None] = field(default=lambda name: None)
    kill_self: Callable[[dict[str, Any]], None] | None = None
    claims: int = 1
    note: Callable[..., None] = field(default=lambda **kv: None)
    mode: str = "forward"


@dataclass(frozen=True)
class Program:
    """A registered trajectory program.

    Fields:
        name: the registry key (what ``submit`` names).
        run: ``run(ctx) -> {"outcome": str, ...}`` (``COMPLETED``, ``ABORT_CONSISTENT``, ``PANIC``,
            ``FROZEN``, ...); may raise the fencing errors of a stale owner (StaleOwnerError,
            LeaseLostError), which the worker reports as fenced.
        saga_id: ``saga_id(trajectory_id) -> str``: the saga id the program runs under (the prefix
            of its operation ids, by which the services' audits are judged).
        description: one line for ``--help`` and reports.
        check: ``check(params)`` raises ConfigError for parameters the program would refuse
            (an unknown name, a wrong type or range), so a bad submission is refused before it
            is enqueued instead of failing in every worker that claims it; the worker's own
            parameters (:data:`WORKER_PARAMS`) are checked apart. Default: accepts anything.
        unwind: ``unwind(ctx) -> {"outcome": str, "residue": [...], ...}``: the compensation-only
            run a worker makes of a trajectory given up on forward progress (the fleet's
            ``max_claims``): fold the log, run no forward step, compensate what the log shows
            done (``ABORT_CONSISTENT``), and note ``residue`` (``ctx.note``) as it goes, so a
            give-up after a killed unwind can list it. None: the program has no such run; a
            given-up trajectory is failed ``GAVE_UP`` unwound by nobody.
    """

    name: str
    run: Callable[[TrajectoryContext], dict[str, Any]]
    saga_id: Callable[[str], str] = lambda trajectory_id: trajectory_id
    description: str = ""
    check: Callable[[dict[str, Any]], None] = lambda params: None
    unwind: Callable[[TrajectoryContext], dict[str, Any]] | None = None


PROGRAMS: dict[str, Program] = {}


def register_program(program: Program) -> Program:
    """Add ``program`` to :data:`PROGRAMS` (replacing one of the same name). Returns it.
    Raises ConfigError: not a Program, or an empty name."""
    if not isinstance(program, Program) or not isinstance(program.name, str) or not program.name:
        raise ConfigError(f"a fleet program is a Program with a name, got {program!r}")
    PROGRAMS[program.name] = program
    return program


def get_program(name: str) -> Program:
    """The registered program ``name``. Raises ConfigError naming the known ones."""
    try:
        return PROGRAMS[name]
    except (KeyError, TypeError):
        raise ConfigError(f"unknown fleet program {name!r}; known: {', '.join(sorted(PROGRAMS))}") from None


#: parameters the worker reads for any program (demonstration hooks): pause or SIGKILL the owner of
#: ``pause_epoch`` / ``kill_epoch`` at the gate position ``pause_at`` / ``kill_at``; ``stall``: stop
#: renewing the lease while paused
#: ``kill_forward_at``: SIGKILL at that position in every forward claim (a poison trajectory);
#: ``kill_unwind_at``: the same in unwind claims, in the first ``kill_unwind_claims`` of them (default: all)
WORKER_PARAMS = ("pause_at", "pause_epoch", "kill_at", "kill_epoch", "stall", "kill_forward_at", "kill_unwind_at",
                 "kill_unwind_claims")


def _whole(name: str, v: Any, lo: int, hi: int | None = None) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
        raise ConfigError(f"parameter {name} must be an integer {lo}..{hi if hi is not None else ''}, got {v!r}")


def check_params(program: str, params: Any) -> dict[str, Any]:
    """``params`` checked for ``program`` (its :attr:`Program.check`) and the worker's own
    :data:`WORKER_PARAMS`; returns them. Raises ConfigError: an unknown program, parameters that are
    not a JSON object, or a parameter the program or the worker would refuse."""
    prog = get_program(program)
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise ConfigError(f"the parameters of a trajectory are a JSON object, got {type(params).__name__}")
    for k in ("pause_at", "kill_at", "kill_forward_at", "kill_unwind_at", "kill_unwind_claims"):
        if params.get(k) is not None:
            _whole(k, params[k], 1)
    for k in ("pause_epoch", "kill_epoch"):
        if k in params:
            _whole(k, params[k], 1)
    if "stall" in params and not isinstance(params["stall"], bool):
        raise ConfigError(f"parameter stall must be true or false, got {params['stall']!r}")
    prog.check({k: v for k, v in params.items() if k not in WORKER_PARAMS})
    return params


def _check_deployment(params: dict[str, Any]) -> None:
    known = ("domain", "fail_at_dns", "extra_steps")
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ConfigError(f"the deployment program has no parameter {', '.join(map(repr, unknown))}; it takes "
                          f"{', '.join(known)} (and the worker's {', '.join(WORKER_PARAMS)})")
    if "domain" in params and params["domain"] is not None and (
            not isinstance(params["domain"], str) or not params["domain"]):
        raise ConfigError(f"parameter domain must be a DNS name, got {params['domain']!r}")
    if "fail_at_dns" in params and not isinstance(params["fail_at_dns"], bool):
        raise ConfigError(f"parameter fail_at_dns must be true or false, got {params['fail_at_dns']!r}")
    if "extra_steps" in params:
        _whole("extra_steps", params["extra_steps"], 0, 100)


def default_domain(trajectory_id: str) -> str:
    """A DNS name nobody owns, one per trajectory (so T5 of the deployment saga succeeds)."""
    return f"t{hashlib.sha256(trajectory_id.encode()).hexdigest()[:16]}.fleet.example.test"


def _deployment(ctx: TrajectoryContext) -> dict[str, Any]:
    from kernel_lib.live.saga_worker import build_runner
    from kernel_lib.sim.deployment import TAKEN_DOMAIN, run_deployment

    p = ctx.params
    extra = p.get("extra_steps", 0)
    if isinstance(extra, bool) or not isinstance(extra, int) or not 0 <= extra <= 100:
        raise ConfigError(f"extra_steps must be an integer 0..100, got {extra!r}")
    domain = TAKEN_DOMAIN if p.get("fail_at_dns") else (p.get("domain") or default_domain(ctx.trajectory_id))
    runner = build_runner(ctx.store, ctx.services, ctx.trajectory_id, ctx.trajectory_id, on_position=ctx.on_position,
                          must_survive=ctx.must_survive, owner_epoch=ctx.owner_epoch, fence_check=ctx.fence_check,
                          endpoints=ctx.endpoints)
    ctx.mark("folded")
    out: dict[str, Any] = {"saga_id": ctx.trajectory_id}
    try:
        result = run_deployment(runner, domain=domain, extra_steps=extra)
        out.update(outcome=result["state"], failed_step=result["failed_step"])
    except SagaPanicError as exc:
        out.update(outcome="PANIC", error=str(exc)[:500], residue=exc.residue)
    except TrajectoryFrozenRefusal as exc:
        out.update(outcome="FROZEN", error=str(exc)[:500], incident_id=exc.incident_id)
    runner.gate.sync()   # the deferred evidence is durable before the trajectory is reported ended
    out["log_head"] = runner.gate.log.head
    return out


def log_residue(runner: Any) -> dict[str, dict[str, Any]]:
    """What the saga's log shows done and not compensated, by step id: every step whose C_i is
    recorded and not run to COMPENSATED, a committed pivot, a step whose attempt is in doubt or
    that was left executing (its effect may exist). Each: ``{operation_id, tool, step, state,
    in_doubt, pivot, compensator: {tool, arguments} | None}`` (read from the fold: unconfirmed
    by the services)."""
    out: dict[str, dict[str, Any]] = {}
    for s in sorted(runner.saga.steps.values(), key=lambda s: s.index):
        op = runner.gate.record.operations.get(s.step_id)
        doubtful = op is not None and op.status == "in_doubt"
        owed = s.compensator is not None and s.state != "COMPENSATED"
        if owed or (s.pivot and s.state == "COMMITTED") or doubtful or s.state == "EXECUTING":
            out[s.step_id] = _residue_entry(s.step_id, s.tool, s.index, s.state, doubtful, s.pivot, s.compensator)
    return out


def _residue_entry(step_id: str, tool: str, index: int, state: str, in_doubt: bool, pivot: bool,
                   compensator: dict[str, Any] | None) -> dict[str, Any]:
    return {"operation_id": step_id, "tool": tool, "step": index, "state": state, "in_doubt": in_doubt,
            "pivot": bool(pivot), "compensator": None if compensator is None else
            {"tool": compensator["tool"], "arguments": compensator["arguments"]}}


def _deployment_unwind(ctx: TrajectoryContext) -> dict[str, Any]:
    """The deployment saga given up on forward progress: fold the log and compensate only
    (:meth:`~kernel_lib.recovery.runner.SagaRunner.compensate_only`). The residue is noted in
    the queue after the fold and again after every step record the unwind appends."""
    from kernel_lib.live.saga_worker import build_runner

    holder: dict[str, Any] = {}
    residue: dict[str, dict[str, Any]] = {}

    def on_position(name: str, ev: Any) -> None:
        payload = getattr(ev, "payload", None)
        runner = holder.get("runner")
        if runner is not None and type(payload).__name__ == "SagaStepChanged" and payload.saga_id == runner.saga_id:
            op = runner.gate.record.operations.get(payload.step_id)   # the gate folded the event already
            doubtful = op is not None and op.status == "in_doubt"
            if payload.state == "COMPENSATED" or (payload.state == "FAILED" and not doubtful
                                                  and payload.step_id in residue
                                                  and residue[payload.step_id]["compensator"] is None):
                residue.pop(payload.step_id, None)
            elif payload.step_id in residue or payload.compensator is not None:
                residue[payload.step_id] = _residue_entry(payload.step_id, payload.tool, payload.step_index,
                                                          payload.state, doubtful, False, payload.compensator or
                                                          (residue.get(payload.step_id) or {}).get("compensator"))
            ctx.note(residue=list(residue.values()))
        ctx.on_position(name, ev)

    runner = build_runner(ctx.store, ctx.services, ctx.trajectory_id, ctx.trajectory_id, on_position=on_position,
                          must_survive=ctx.must_survive, owner_epoch=ctx.owner_epoch, fence_check=ctx.fence_check,
                          endpoints=ctx.endpoints)
    holder["runner"] = runner
    ctx.mark("folded")
    residue.update(log_residue(runner))
    ctx.note(residue=list(residue.values()), residue_at_fold=list(residue.values()))
    out: dict[str, Any] = {"saga_id": ctx.trajectory_id, "unwound_after_give_up": True}
    try:
        state = runner.compensate_only("given up on forward progress: claimed too many times without finishing")
        out.update(outcome=state, state="done" if state == "COMPLETED" else "failed")
    except SagaPanicError as exc:
        out.update(outcome="PANIC", error=str(exc)[:500], residue=exc.residue)
    except TrajectoryFrozenRefusal as exc:
        out.update(outcome="FROZEN", error=str(exc)[:500], incident_id=exc.incident_id)
    runner.gate.sync()
    out["log_head"] = runner.gate.log.head
    out.setdefault("residue", list(log_residue(runner).values()))
    return out


register_program(Program("deployment", _deployment,
                         description="the deployment saga T1..T5 (sandbox, egress IP, build, firewall, DNS)",
                         check=_check_deployment, unwind=_deployment_unwind))


def _sysadmin(ctx: TrajectoryContext) -> dict[str, Any]:
    from kernel_lib.live.fleet_sysadmin import run_sysadmin

    return run_sysadmin(ctx)


def _check_sysadmin(params: dict[str, Any]) -> None:
    from kernel_lib.live.fleet_sysadmin import sysadmin_settings

    sysadmin_settings(params)


register_program(Program("sysadmin", _sysadmin,
                         description="figure 5's systems-administration trajectory under a table-14 configuration, "
                                     "with the chapter's fault profile and real SIGKILLs",
                         check=_check_sysadmin))
