"""Crash the deployment saga at every position and judge the unwind by the services' own counts.

Failure Recovery, "Saga compensation stacks" (crash during the compensation phase). A clean run
of the saga calls the gate's ``on_position`` hook N times (after each appended event, after each
dispatch and recheck); the sweep runs the saga once per position k = 1..N, crashes it right after
the k-th, recovers in a fresh runner over the surviving log (the same script, re-run), and asks
the services what happened:

* ``compensators_repeated``: applications of a compensator beyond the first, per resource (from
  each service's audit of what it applied, never from our log);
* ``effects_left_unlisted``: committed compensable effects of the saga that still exist and are
  not listed as residue by a PANIC/freeze record;
* ``forward_repeated``: forward effects applied more than once for one operation.

:func:`account` is the judgement (shared with the live sweep, which reads the same audit from
real service processes); :func:`sweep_twins` runs the sweep on the simulated twins, with a
process crash (everything written survives) or a host crash (only what a barrier covered
survives).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kernel_lib.core.events import Event, TaskStarted
from kernel_lib.errors import ConfigError, SagaPanicError
from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate
from kernel_lib.log import MemoryStore, TrajectoryLog
from kernel_lib.recovery.runner import RetryPolicy, SagaRunner
from kernel_lib.sim.deployment import TAKEN_DOMAIN, deployment_registry, run_deployment
from kernel_lib.sim.services import ACTIONS, TwinFleet

__all__ = ["account", "sweep_twins", "SAGA_ID", "GRANT_ID", "start_task"]

SAGA_ID = "deploy"
GRANT_ID = "grant-deploy"


def start_task(gate: DispatchGate, trajectory_id: str) -> None:
    gate.start(TaskStarted(task_id=trajectory_id, requester="saga-sweep", objective="deploy the api",
                           grant_ids=[GRANT_ID], budget_ceiling_usd=100.0))


def account(audits: dict[str, list[dict[str, Any]]], resources: dict[str, dict[str, dict[str, Any]]],
            events: Iterable[Event], saga_id: str = SAGA_ID) -> dict[str, Any]:
    """Judge one run from the services' own records.

    ``audits``: per service, its audit trail (``{action, operation_id, resource, ...}`` per applied
    effect); ``resources``: per service, every resource it holds or held (``{kind, state,
    operation_id}``); ``events``: the trajectory log (read only for residue the saga listed).
    """
    prefix = saga_id + "."
    listed: set[str] = set()
    listed_ops: set[str] = set()   # residue the log listed by operation (the services could not be read)
    for ev in events:
        for r in getattr(ev.payload, "residue", None) or []:
            if isinstance(r, dict) and r.get("resource_id"):
                listed.add(str(r["resource_id"]))
            elif isinstance(r, dict) and r.get("operation_id"):
                listed_ops.add(str(r["operation_id"]))
    created: dict[str, int] = {}
    releases: dict[str, int] = {}
    for trail in audits.values():
        for a in trail:
            act = ACTIONS.get(a.get("action", ""))
            if act is None or not str(a.get("operation_id", "")).startswith(prefix) or a.get("refused"):
                continue
            if act.releases:
                releases[a["resource"]] = releases.get(a["resource"], 0) + 1
            elif not act.pivot:
                created[a["operation_id"]] = created.get(a["operation_id"], 0) + 1
    unlisted = []
    for service, held in resources.items():
        for rid, r in held.items():
            if (str(r.get("operation_id", "")).startswith(prefix) and not r.get("pivot")
                    and r.get("state") != "released" and rid not in listed
                    and str(r.get("operation_id")) not in listed_ops):
                unlisted.append({"service": service, "resource_id": rid, "kind": r.get("kind")})
    return {"compensators_repeated": sum(max(0, n - 1) for n in releases.values()),
            "effects_left_unlisted": len(unlisted), "unlisted": unlisted,
            "forward_repeated": sum(max(0, n - 1) for n in created.values()),
            "effects_committed": sum(1 for n in created.values() if n), "compensations_applied": len(releases),
            "residue_listed": sorted(listed)}


class _Crash(BaseException):
    """The simulated crash (a BaseException, so no ``except Exception`` in the runner swallows it)."""


@dataclass
class _Run:
    fleet: TwinFleet
    store: MemoryStore
    trajectory_id: str


def _runner(store: Any, fleet: TwinFleet, trajectory_id: str,
            on_position: Callable[[str, Any], None] | None = None) -> SagaRunner:
    reg = deployment_registry()
    log = TrajectoryLog(store, trajectory_id, must_survive="none")
    gate = DispatchGate(log, AdmissionPolicy({GRANT_ID: set(reg.names())}), coalesce_admission=True,
                        on_position=on_position)
    if gate.record.task is None:
        start_task(gate, trajectory_id)
    return SagaRunner(gate, reg, fleet.client(trajectory_id), saga_id=SAGA_ID, grant_id=GRANT_ID,
                      retry=RetryPolicy(max_attempts=4), sleep=fleet.clock.advance)


def _judge(run: _Run) -> dict[str, Any]:
    return account(run.fleet.audits(), run.fleet.resources(live_only=False), run.store.read(run.trajectory_id))


def _fresh(k: int, open_store: Callable[[int, bool], Any] | None = None) -> _Run:
    fleet = TwinFleet()
    fleet.taken_name(TAKEN_DOMAIN)
    return _Run(fleet, open_store(k, False) if open_store else MemoryStore(), f"saga-sweep-{k:04d}")


def sweep_twins(*, crash: str = "process", positions: Iterable[int] | None = None,
                progress: Callable[[int, int], None] | None = None,
                open_store: Callable[[int, bool], Any] | None = None, store_name: str = "memory") -> dict[str, Any]:
    """Crash the deployment saga on the twins at every position (or ``positions``) and recover.

    ``crash``: ``"process"`` (the worker dies; every written event survives) or ``"host"``
    (only events a barrier covered survive: the log is cut at its durable head; memory store
    only). ``open_store(k, reopen)``: the store of run ``k`` (a real SQLite or segment log in a
    directory of its own; ``reopen=True`` after the crash: opened again from its files, as a new
    process would). Returns
    ``{positions, runs, compensators_repeated, effects_left_unlisted, forward_repeated, ok}``.
    Raises :class:`ConfigError` for a position past the clean run's last one.
    """
    if crash not in ("process", "host"):
        raise ConfigError(f"crash must be 'process' or 'host', got {crash!r}")
    if crash == "host" and open_store is not None:
        raise ConfigError("a host crash is simulated on the memory store only (the log is cut at its durable head); "
                          "on a real store file use crash='process'")
    names: list[str] = []
    clean = _fresh(0, open_store)
    run_deployment(_runner(clean.store, clean.fleet, clean.trajectory_id,
                           on_position=lambda name, ev: names.append(name)))
    total = len(names)
    todo = list(positions) if positions is not None else list(range(1, total + 1))
    bad = [k for k in todo if k > total]
    if bad:   # as the live sweep: the clean run is what counts the positions
        raise ConfigError(f"positions {bad} are past the clean run's last position {total}")
    rows = []
    for i, k in enumerate(todo):
        run = _fresh(k, open_store)
        seen = [0]

        def hook(name: str, ev: Any, k: int = k, seen: list[int] = seen) -> None:
            seen[0] += 1
            if seen[0] == k:
                raise _Crash(name)

        at = None
        holder: list[SagaRunner] = []
        try:
            holder.append(_runner(run.store, run.fleet, run.trajectory_id, on_position=hook))
            run_deployment(holder[0])
        except _Crash as c:
            at = str(c)
        durable_head = holder[0].gate.log.durable_head if holder else 0
        if open_store is not None:   # the crashed worker's handle is gone; a new process opens the files
            run.store.close()
            run.store = open_store(k, True)
        if crash == "host":
            kept = list(run.store.read(run.trajectory_id))[:durable_head]
            run.store = MemoryStore()
            if kept:
                run.store.append_batch(kept, "memory")
        outcome = "ABORT_CONSISTENT"
        try:
            outcome = run_deployment(_runner(run.store, run.fleet, run.trajectory_id))["state"]
        except SagaPanicError as exc:
            outcome = f"PANIC: {exc}"
        verdict = _judge(run)
        if open_store is not None:
            run.store.close()
        rows.append({"position": k, "crashed_after": at, "outcome": outcome, **verdict})
        if progress:
            progress(i + 1, len(todo))
    if open_store is not None:
        clean.store.close()
    return {"store": store_name, "services": "simulated twins", "crash": crash, "positions": len(rows),
            "position_names": names,
            "compensators_repeated": sum(r["compensators_repeated"] for r in rows),
            "effects_left_unlisted": sum(r["effects_left_unlisted"] for r in rows),
            "forward_repeated": sum(r["forward_repeated"] for r in rows),
            "ok": all(r["compensators_repeated"] == 0 and r["effects_left_unlisted"] == 0
                      and r["forward_repeated"] == 0 and r["outcome"] == "ABORT_CONSISTENT" for r in rows),
            "runs": rows}
