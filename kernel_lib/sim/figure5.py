"""Figure 5 for real, on the simulated twins: the six-turn systems-administration trajectory under
its four injected failures, run by the synthesized harness and judged by the services' own counts.

Failure Recovery, "Anatomy of a faulted trajectory" (figure 5) and "The synthesized runtime
engine" (H = ⟨K_sched, L_wal, S_saga, G_gate⟩). The trajectory is
:data:`~kernel_lib.sim.sysadmin.SYSADMIN_TASK` (clone, inspect the migrations, provision a staging
database, migrate, update the configuration, deploy) run by
:class:`~kernel_lib.recovery.synthesis.harness.Harness` with the ``synthesized`` configuration on a
:class:`~kernel_lib.sim.services.TwinFleet` (virtual clock, deterministic). The four failures:

1. **turn 3, a timeout after the effect**: the answer to ``provision_db`` is dropped after the
   database service created the database (:data:`~kernel_lib.sim.sysadmin.FIGURE5_SCRIPT`); the
   runtime asks the service by the operation id it logged before dispatch, and the database
   service counts one database;
2. **turn 4, a SQL syntax error**: the model's first migration has broken SQL, which the database
   service really runs in SQLite and refuses (422 ``sql_syntax_error``); D(Ω) chooses a forward
   repair, the corrected SQL is applied, within K_repair;
3. **turn 5, a host crash**: the worker dies right after the configuration update's intent is
   durable; a new process folds the surviving log (Σ rebuilt, RPO 0), the in-doubt update is
   settled by its status lookup and sent once;
4. **turn 6, a premature commit**: the restarted model, its memory gone, proposes the deploy at
   once and claims every check passes. The pre-pivot gate runs its deterministic checks against the
   services, finds the configuration not yet there and holds the pivot (a ``PivotVerified`` that
   failed; the deploy service receives nothing). Turn 5 is finished from the log, the gate runs
   again at turn 6, every check passes, and only then is the deploy sent.

How the premature attempt is made: :class:`Figure5Harness` is the harness with one addition, run
in a process that starts over a log written by a killed one: before resuming the script it puts
the model's deploy proposal through the gate (:meth:`SagaRunner.verify_pivot` records the verdict;
a failing one raises and nothing is sent). Everything else is the harness as the scorecard runs it.

:func:`run_figure5` returns the run as JSON data: the four failures each with the services'
counts that show how it was met (``ok`` per failure and overall), the gate's verdicts, the kill
(RPO, RTO on the virtual clock plus the measured CPU of recovery), the services' counts, and the
ladder of messages between the four lifelines
(:func:`~kernel_lib.recovery.synthesis.lifelines.lifeline_messages`, for the lifeline stepper).
:func:`judge_figure5` is the judgement, shared with the live run (:mod:`kernel_lib.live.figure5`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kernel_lib.core.events import Event, PivotCrossed, PivotVerified, SagaStepChanged, ToolIntent, ToolResult
from kernel_lib.errors import ConfigError, PivotRefusedError
from kernel_lib.log import MemoryStore, open_store
from kernel_lib.recovery.repair import fold_repairs
from kernel_lib.recovery.saga import fold_saga, step_operation_id
from kernel_lib.recovery.synthesis.config import CONFIGS
from kernel_lib.recovery.synthesis.faults import ScriptedFaultPlan, Timings
from kernel_lib.recovery.synthesis.harness import Harness
from kernel_lib.recovery.synthesis.lifelines import Crash, lifeline_messages, turn_rows
from kernel_lib.recovery.verification import ModelClaim, run_gate
from kernel_lib.sim.services import TwinFleet
from kernel_lib.sim.sysadmin import FIGURE5_SCRIPT, SYSADMIN_STEPS, SYSADMIN_TASK

__all__ = ["FIGURE5_FAILURES", "PREMATURE_CLAIM", "Figure5Harness", "figure5_plan", "run_figure5", "judge_figure5",
           "service_counts", "failure_rows", "figure5_report"]

#: The model's words with its premature deploy proposal (recorded with the verdict, weight 0).
PREMATURE_CLAIM = "Migration applied and the tests pass; everything is ready, deploy to production now."

#: The four injected failures of figure 5: turn, tool, what is injected, what the runtime is to do.
FIGURE5_FAILURES = (
    {"turn": 3, "tool": "provision_db", "failure": "timeout after the effect",
     "expected": "reconciliation probe with the logged operation id; one database"},
    {"turn": 4, "tool": "apply_migration", "failure": "SQL syntax error",
     "expected": "forward repair within K_repair (no rollback of turn 3)"},
    {"turn": 5, "tool": "update_config", "failure": "host crash (process kill after the intent)",
     "expected": "recovery from the log, Σ rebuilt, RPO 0, the in-doubt update settled and sent once"},
    {"turn": 6, "tool": "deploy_production", "failure": "premature commit across the pivot",
     "expected": "the gate holds the pivot until its deterministic checks pass"},
)


def figure5_plan(*, kill: bool = True) -> ScriptedFaultPlan:
    """Figure 5's scripted faults (:data:`~kernel_lib.sim.sysadmin.FIGURE5_SCRIPT`); ``kill=False``
    leaves out the simulated kill (the live run kills its worker for real)."""
    return ScriptedFaultPlan({k: f for k, f in FIGURE5_SCRIPT.items() if kill or f.kind != "process_kill"})


class Figure5Harness(Harness):
    """The synthesized harness plus figure 5's premature commit (module docstring).

    Args (besides :class:`Harness`'s):
        premature_pivot: put the restarted model's deploy proposal through the gate once, before
            the script resumes (default True).
        restarted: this process starts over a log a killed process wrote (the live recovery
            process); in process, a simulated kill makes every later start a restart.
        claim: the model's words with the premature proposal.
    """

    def __init__(self, *args: Any, premature_pivot: bool = True, restarted: bool = False,
                 claim: str = PREMATURE_CLAIM, **kw: Any):
        super().__init__(*args, **kw)
        self.premature_pivot = premature_pivot
        self.restarted = restarted
        self.claim = claim
        self.held: list[dict[str, Any]] = []

    def on_start(self) -> None:
        if self.premature_pivot and (self.restarted or (self.outcome is not None and self.outcome.kills)):
            self._premature()

    def _premature(self) -> None:
        """The restarted model proposes the pivot at once; the gate decides (recorded either way)."""
        runner = self.proc.runner
        saga = runner.saga
        if saga.verifications or saga.crossing is not None or saga.state not in (None, "RUNNING"):
            return     # already verified once, crossed or ended: nothing premature to try
        tid = runner.trajectory_id
        specs = self.task.turns(tid, self.turns)
        ops = runner.gate.record.operations
        committed = sorted((s for s in saga.steps.values() if s.state == "COMMITTED"), key=lambda s: s.index)
        outputs = {t.key: {k: v for k, v in (ops[s.step_id].outcome or {}).items()
                           if k not in ("status", "http_status", "duplicate")} for t, s in zip(specs, committed)}
        reads = [0]

        def read(action: str, arguments: dict[str, Any]) -> dict[str, Any]:
            reads[0] += 1
            status, body = runner.endpoints.call(action, arguments, f"{tid}.gate.held{reads[0]}", None)
            if status != 200:
                raise ConfigError(f"{action}: {status} {body.get('error')}")
            return body

        verdict = run_gate(self.task.pivot_checks(read, tid, outputs, specs), ModelClaim(self.claim, True))
        pivot_id = step_operation_id(runner.saga_id, saga.next_index)
        try:
            runner.verify_pivot(verdict, step_id=pivot_id)
            held = False
        except PivotRefusedError:
            held = True
        self.held.append({"pivot_step_id": pivot_id, "held": held, "passed": verdict.passed,
                          "failed_checks": list(verdict.failed_checks)})


def service_counts(counts: Mapping[str, Mapping[str, Mapping[str, int]]], actions: tuple[str, ...] | None = None
                   ) -> dict[str, dict[str, int]]:
    """``{action: {received, applied}}`` summed over the services (the services' own counts;
    ``actions``: only these)."""
    out: dict[str, dict[str, int]] = {}
    for c in counts.values():
        for table in ("received", "applied"):
            for a, n in (c.get(table) or {}).items():
                if actions is None or a in actions:
                    out.setdefault(a, {"received": 0, "applied": 0})[table] += n
    return out


def _ops_of(events: list[Event], tool: str) -> list[str]:
    return list(dict.fromkeys(e.payload.operation_id for e in events
                              if isinstance(e.payload, ToolIntent) and e.payload.tool == tool))


def judge_figure5(events: list[Event], counts: Mapping[str, Any], resources: Mapping[str, Mapping[str, Any]],
                  *, trajectory_id: str, crash_after: int | None, k_repair: int = 2) -> list[dict[str, Any]]:
    """Each of figure 5's four failures, judged: ``{turn, tool, failure, expected, what happened,
    evidence, ok}``. The evidence is the services' own counts and what they hold (``counts``,
    ``resources`` with released ones), and the records of the log (``events``) they are checked
    against; ``crash_after``: the last log position the killed process wrote (None: no kill)."""
    c = service_counts(counts)
    rows = []

    def row(i: int, happened: str, evidence: dict[str, Any], ok: bool) -> None:
        rows.append({**FIGURE5_FAILURES[i], "what happened": happened, "evidence": evidence, "ok": bool(ok)})

    # 1. the dropped answer of provision_db, settled by the probe
    prov = _ops_of(events, "provision_db")
    results = [e.payload for e in events if isinstance(e.payload, ToolResult) and e.payload.operation_id in prov]
    timed_out = [r for r in results if r.status == "timeout"]
    probed = [r for r in results if r.source == "reconciliation" and r.status == "completed"]
    dbs = [rid for held in resources.values() for rid, r in held.items()
           if r.get("kind") == "database" and str(r.get("operation_id", "")).startswith(trajectory_id + ".")]
    p = c.get("provision_db", {"received": 0, "applied": 0})
    row(0, f"{len(timed_out)} timeout, {len(probed)} probe answered completed; the database service received "
           f"{p['received']} and applied {p['applied']} provision_db ({len(dbs)} database)",
        {"provision_db": p, "databases": len(dbs), "timeouts_logged": len(timed_out), "probes_logged": len(probed)},
        p["applied"] == 1 and p["received"] == 1 and len(dbs) == 1 and len(timed_out) == 1 and len(probed) == 1)

    # 2. the broken SQL, repaired forward
    mig = c.get("apply_migration", {"received": 0, "applied": 0})
    subs = [h for h in fold_repairs(events).values() if h.decisions]
    k = max((h.repairs_done for h in subs), default=0)
    worked = [o.success for h in subs for o in h.outcomes]
    refused = [e.payload for e in events if isinstance(e.payload, ToolResult) and e.payload.status == "failed"
               and (e.payload.outcome or {}).get("reason") == "sql_syntax_error"]
    torn = c.get("teardown_db", {"applied": 0})["applied"]
    row(1, f"the database service refused {len(refused)} migration with 422 sql_syntax_error "
           f"({(refused[0].outcome or {}).get('error') if refused else 'none'}); {k} forward repair(s) "
           f"(K_repair = {k_repair}), {'worked' if worked and all(worked) else 'did not work'}; "
           f"received {mig['received']}, applied {mig['applied']} apply_migration; teardown_db applied {torn}",
        {"apply_migration": mig, "repairs": k, "k_repair": k_repair, "repair_outcomes": worked, "teardown_db": torn},
        len(refused) == 1 and 1 <= k <= k_repair and worked == [True] and mig["applied"] == 1 and torn == 0)

    # 3. the crash, recovered from the log
    cfg = c.get("update_config", {"received": 0, "applied": 0})
    if crash_after is None:
        row(2, "no crash happened", {"update_config": cfg}, False)
    else:
        survived = [e for e in events if e.sequence_number <= crash_after]
        saga = fold_saga(survived, trajectory_id)
        sigma = [f"C{s.index} {s.compensator['tool']}" for s in reversed(saga.stack)]
        committed_before = [s.index for s in saga.steps.values() if s.state == "COMMITTED"]
        final = fold_saga(events, trajectory_id)
        kept = all(final.steps[f"{trajectory_id}.T{i}"].state == "COMMITTED" for i in committed_before)
        row(2, f"killed after log position {crash_after}; the new process folded {len(survived)} events: "
               f"{len(committed_before)} steps committed, Σ = [{', '.join(sigma)}]; the config service received "
               f"{cfg['received']} and applied {cfg['applied']} update_config",
            {"crash_after": crash_after, "sigma_rebuilt": sigma, "committed_before_crash": len(committed_before),
             "rpo_turns": 0 if kept else None, "update_config": cfg},
            kept and cfg["applied"] == 1 and cfg["received"] == 1 and len(sigma) >= 3)

    # 4. the pivot held by the gate until its checks pass
    verdicts = [(e.sequence_number, e.payload) for e in events if isinstance(e.payload, PivotVerified)]
    crossing = next((e.sequence_number for e in events if isinstance(e.payload, PivotCrossed)), None)
    dep = c.get("deploy_production", {"received": 0, "applied": 0})
    deploy_intent = next((e.sequence_number for e in events if isinstance(e.payload, ToolIntent)
                          and e.payload.tool == "deploy_production"), None)
    first_pass = next((s for s, v in verdicts if v.passed), None)
    held = [(s, v) for s, v in verdicts if not v.passed]
    row(3, "; ".join(f"verdict at #{s}: " + ("passed" if v.passed else f"FAILED {', '.join(v.failed_checks)}")
                     + (" (the model claimed success, weight 0)" if (v.model_claim or {}).get("claims_success")
                        else "") for s, v in verdicts)
        + f"; the deploy service received {dep['received']} and applied {dep['applied']} deploy_production",
        {"verdicts": [{"position": s, "passed": v.passed, "failed_checks": list(v.failed_checks)} for s, v in verdicts],
         "crossed_at": crossing, "deploy_intent_at": deploy_intent, "deploy_production": dep},
        bool(held) and held[0][0] < (first_pass or 0) and first_pass is not None and crossing is not None
        and first_pass < crossing < (deploy_intent or 0) and dep["received"] == 1 and dep["applied"] == 1)
    return rows


def failure_rows(failures: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The judged failures as table rows (``turn``, ``failure``, ``what happened``, ``ok``)."""
    return [{"turn": f["turn"], "failure": f["failure"], "the runtime": f["expected"],
             "what happened (services' counts, the log)": f["what happened"], "ok": f["ok"]} for f in failures]


def _turn_table(events: list[Event], trajectory_id: str, messages: list[Any]) -> list[dict[str, Any]]:
    saga = fold_saga(events, trajectory_id)
    rows = turn_rows(messages)
    steps_by_turn: dict[int, list[str]] = {}
    for m in messages:
        if m.kind == "propose" and m.operation_id:
            step = saga.steps.get(m.operation_id)
            steps_by_turn.setdefault(m.turn, []).append(
                f"{m.label.split(' ')[0]} {step.tool if step else ''} {step.state if step else ''}".strip())
    return [{"turn": r["turn"], "tool": SYSADMIN_STEPS[r["turn"] - 1] if 1 <= r["turn"] <= 6 else "",
             "steps (saga, final state)": ", ".join(steps_by_turn.get(r["turn"], [])), "messages": r["messages"]}
            for r in rows if r["turn"] >= 1]


def run_figure5(*, trajectory_id: str = "fig5", store_dir: str | Path | None = None, timings: Timings | None = None,
                config: str = "synthesized", on_step: Callable[..., None] | None = None) -> dict[str, Any]:
    """Run figure 5 on the simulated twins (virtual clock; deterministic apart from the measured
    CPU time of recovery). ``store_dir``: keep the trajectory log as an SQLite file there
    (``figure5.sqlite``); None: in memory. ``config``: the table-14 configuration (figure 5 is the
    ``synthesized`` one; another shows what its absence costs, judged the same way). ``on_step``:
    the harness's per-position callback.

    Returns ``{substrate, trajectory_id, config, state, ok, failures, turns, verdicts, held,
    kill, rto_s, rto_note, virtual_s, counts, event_types, invariant_ok, crashes, messages}`` (JSON data;
    ``messages`` are the ladder's, as dicts). Raises ConfigError for an empty trajectory id or an
    unknown configuration."""
    if not isinstance(trajectory_id, str) or not trajectory_id or "." in trajectory_id:
        raise ConfigError(f"trajectory_id must be a non-empty name without dots, got {trajectory_id!r}")
    if config not in CONFIGS:
        raise ConfigError(f"unknown configuration {config!r}: choose one of {', '.join(CONFIGS)}")
    fleet = TwinFleet(simulate_durations=True)
    stores: dict[str, Any] = {}

    def store_factory(tid: str) -> Any:
        if store_dir is None:
            stores[tid] = MemoryStore()
        else:
            path = Path(store_dir) / "figure5.sqlite"
            path.parent.mkdir(parents=True, exist_ok=True)
            stores[tid] = open_store("sqlite", path, create=True)
        return stores[tid]

    crashes: list[Crash] = []
    seen = {"seq": 0, "kills": 0}

    def step(h: Harness, name: str, ev: Any) -> None:
        if h.outcome is not None and len(h.outcome.kills) > seen["kills"]:
            seen["kills"] = len(h.outcome.kills)
            crashes.append(Crash(seen["seq"], f"process kill ({h.outcome.kills[-1]['position']})"))
        if ev is not None:
            seen["seq"] = ev.sequence_number
        if on_step is not None:
            on_step(h, name, ev)

    harness = Figure5Harness(CONFIGS[config], fleet, SYSADMIN_TASK, plan=figure5_plan(kill=True),
                             timings=timings, store_factory=store_factory, audit=fleet.audits, on_step=step)
    t0 = time.perf_counter()
    out = harness.run(trajectory_id)
    wall = time.perf_counter() - t0
    store = stores[trajectory_id]
    try:
        events = list(store.read(trajectory_id))
    finally:
        if store_dir is not None:
            store.close()
    return figure5_report(events, fleet.audits(), fleet.counts(), fleet.resources(live_only=False), out.as_dict(),
                   harness.held, crashes, trajectory_id=trajectory_id,
                   substrate="simulated twins (virtual clock)", wall_s=wall, config=config)


def figure5_report(events: list[Event], audits: Any, counts: Any, resources: Any, outcome: dict[str, Any],
            held: list[dict[str, Any]], crashes: list[Crash], *, trajectory_id: str, substrate: str,
            wall_s: float, rto: dict[str, Any] | None = None, config: str = "synthesized") -> dict[str, Any]:
    """The report of one figure-5 run (see :func:`run_figure5` for its keys) from what it left: the
    log's ``events``, the services' ``audits``, ``counts`` and ``resources`` (released ones too),
    the harness's ``outcome`` (:meth:`TrajectoryOutcome.as_dict`), the premature attempts ``held``,
    the ``crashes``; ``rto``: ``{rto_s, rto_note}`` when measured outside the harness (live)."""
    messages = lifeline_messages(events, audits, crashes=crashes)
    failures = judge_figure5(events, counts, resources, trajectory_id=trajectory_id,
                             crash_after=crashes[0].after_position if crashes else None)
    kill = outcome["kills"][0] if outcome.get("kills") else None
    if rto is None:
        rto = {"rto_s": kill.get("rto_s") if kill else None,
               "rto_note": ("virtual seconds from the kill to the restarted process's first record (restart delay and "
                            "probe as stated in Timings) plus the measured CPU time of folding and replaying"
                            if kill else "no kill happened")}
    verdicts = [{"position": e.sequence_number, "pivot_step_id": e.payload.pivot_step_id, "passed": e.payload.passed,
                 "failed_checks": list(e.payload.failed_checks),
                 "checks": [{"name": c.get("name"), "passed": c.get("passed"),
                             "expected": (c.get("evidence") or {}).get("expected")} for c in e.payload.checks],
                 "model_claim": (e.payload.model_claim or {}).get("text")}
                for e in events if isinstance(e.payload, PivotVerified)]
    steps = [e.payload for e in events if isinstance(e.payload, SagaStepChanged)]
    return {"substrate": substrate, "trajectory_id": trajectory_id, "config": config,
            "state": outcome.get("state"), "ok": outcome.get("state") == "COMPLETED" and all(f["ok"] for f in failures),
            "failures": failures, "turns": _turn_table(events, trajectory_id, messages), "verdicts": verdicts,
            "held": held, "kill": kill, **rto, "virtual_s": outcome.get("virtual_s"), "wall_s": round(wall_s, 4),
            "log_events": len(events), "saga_steps": len({p.step_id for p in steps}),
            "event_types": dict(sorted(Counter(e.event_type for e in events).items())),
            "counts": service_counts(counts), "invariant_ok": all(r.get("ok") for r in outcome.get("invariant", [])),
            "invariant": outcome.get("invariant", []), "crashes": [{"after_position": c.after_position,
                                                                      "label": c.label} for c in crashes],
            "messages": [m.to_json() for m in messages]}
