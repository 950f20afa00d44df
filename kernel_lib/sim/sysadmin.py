"""The systems-administration trajectory of figure 5 as a task for the synthesized harness
(Failure Recovery, "Anatomy of a faulted trajectory").

Six turns against the tool services of :mod:`kernel_lib.sim.services`: T1 ``clone_repo`` (tier I,
its checkout deleted by ``delete_checkout``), T2 ``inspect_migrations`` (read only, C = noop), T3
``provision_db`` (a staging database, tier II, ``teardown_db``), T4 ``apply_migration`` (tier II,
``revert_migration``; the database service really runs the SQL in SQLite and refuses broken SQL
with 422 ``sql_syntax_error``), T5 ``update_config`` (tier II, ``restore_config``; the settings are
really parsed), T6 ``deploy_production`` (the tier III pivot, C = ∅). A longer trajectory repeats
the migrate and configure turns before the deploy (``turns`` ≥ 6).

Each turn has its correct arguments and a family of wrong ones (``broken(outputs, variant)``):
what a model proposes when it gets the call semantically wrong; each variant fails at the
service with a different error (a different σ), so a failed repair that drifts is not mistaken
for a spin. :func:`pivot_checks` are the deterministic checks of the pre-pivot gate, reading the
services (the database's schema digest against the one the intended migrations give in a fresh
SQLite database, the configuration's digest, exactly one staging database).

:data:`SYSADMIN_TASK` is the task object :class:`~kernel_lib.recovery.synthesis.harness.Harness`
runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kernel_lib.errors import ConfigError
from kernel_lib.recovery.contracts import ToolRegistry
from kernel_lib.recovery.repair import ToolCost
from kernel_lib.recovery.synthesis.config import RuntimeConfig, config_named
from kernel_lib.recovery.synthesis.faults import Fault, FaultPlan, ScriptedFaultPlan
from kernel_lib.recovery.synthesis.harness import Harness, SimulatedKill, Task, TurnSpec
from kernel_lib.recovery.verification import Check, StateCheck
from kernel_lib.sim.services import ACTIONS, TwinFleet, config_sha256, schema_sha256, sysadmin_contracts

__all__ = ["REPO_URL", "RELEASE", "SYSADMIN_STEPS", "sysadmin_registry", "sysadmin_turns", "migration",
           "settings_text", "pivot_checks", "sysadmin_tool_costs", "SYSADMIN_TASK", "GRANT_ID", "account_effects",
           "trajectory_of", "FIGURE5_SCRIPT", "crash_sweep"]

REPO_URL = "https://git.example.test/acme/api.git"
RELEASE = "v2.4.0"
GRANT_ID = "grant-sysadmin"
#: The six turns' tools, in order.
SYSADMIN_STEPS = ("clone_repo", "inspect_migrations", "provision_db", "apply_migration", "update_config",
                  "deploy_production")
_ENGINE_TYPOS = ("postgress", "postgre", "pgsql", "postgrse")


def sysadmin_registry() -> ToolRegistry:
    """The checked registry of the systems-administration tools (:func:`sysadmin_contracts`)."""
    reg = ToolRegistry()
    for c in sysadmin_contracts():
        reg.register(c)
    return reg.check()


def migration(m: int) -> tuple[str, str]:
    """The m-th migration of the task (m ≥ 1): ``(name, sql)``."""
    if m == 1:
        return "0002_add_email_index", "CREATE INDEX idx_users_email ON users(email);"
    if m == 2:
        return "0003_add_last_login", "ALTER TABLE users ADD COLUMN last_login TEXT;"
    return f"{m + 1:04d}_add_extra_{m}", f"ALTER TABLE users ADD COLUMN extra_{m} INTEGER DEFAULT 0;"


def _broken_sql(sql: str, variant: int) -> str:
    """The SQL with its first keyword misspelt (variant v: a different misspelling each time)."""
    kw = sql.split()[0]
    return kw[:-1] + "Q" * (variant + 1) + sql[len(kw):]


def settings_text(c: int, trajectory_id: str) -> str:
    """The c-th configuration (c ≥ 1) as a JSON object text."""
    return json.dumps({"service": f"api-{trajectory_id}", "db_pool_size": 8 + c, "feature_last_login": True,
                       "revision": c}, sort_keys=True)


def _plan(turns: int) -> list[str]:
    if type(turns) is not int or turns < 6:
        raise ConfigError(f"the systems-administration trajectory has at least 6 turns, got {turns!r}")
    extra = turns - 6
    middle = ["migrate", "config"]
    for i in range(extra):
        middle.append("migrate" if i % 2 == 0 else "config")
    # migrations and configurations alternate after the provisioning turn
    mig = [k for k in middle if k == "migrate"]
    cfg = [k for k in middle if k == "config"]
    order: list[str] = []
    while mig or cfg:
        if mig:
            order.append(mig.pop())
        if cfg:
            order.append(cfg.pop())
    return ["clone", "inspect", "provision", *order, "deploy"]


def sysadmin_turns(trajectory_id: str, turns: int = 6) -> tuple[TurnSpec, ...]:
    """The task's turns for one trajectory (names are the trajectory's own: ``staging-<id>``,
    ``api-<id>``). ConfigError for fewer than 6 turns."""
    tid = trajectory_id
    out: list[TurnSpec] = []
    m = c = 0
    last_cfg = "config1"
    for kind in _plan(turns):
        if kind == "clone":
            out.append(TurnSpec(
                "clone", "clone_repo", lambda o: {"url": REPO_URL, "ref": "main", "dest": f"/srv/checkouts/{tid}"},
                lambda o, v: {"url": REPO_URL.replace("https://", "htps://") + "-x" * v, "ref": "main",
                              "dest": f"/srv/checkouts/{tid}"},
                ("url", "ref")))
        elif kind == "inspect":
            out.append(TurnSpec(
                "inspect", "inspect_migrations", lambda o: {"checkout_id": o["clone"]["checkout_id"]},
                lambda o, v: {"checkout_id": f"checkout-missing-{v}"}, ("checkout_id",), replay="harmless"))
        elif kind == "provision":
            out.append(TurnSpec(
                "provision", "provision_db", lambda o: {"name": f"staging-{tid}", "engine": "postgres"},
                lambda o, v: {"name": f"staging-{tid}", "engine": _ENGINE_TYPOS[v % 4] + ("" if v < 4 else str(v))},
                ("name", "engine")))
        elif kind == "migrate":
            m += 1
            name, sql = migration(m)
            out.append(TurnSpec(
                f"migrate{m}", "apply_migration",
                lambda o, name=name, sql=sql: {"database_id": o["provision"]["database_id"], "migration": name,
                                               "sql": sql},
                lambda o, v, name=name, sql=sql: {"database_id": o["provision"]["database_id"], "migration": name,
                                                  "sql": _broken_sql(sql, v)},
                ("database_id", "migration", "sql"), replay="refused"))
        elif kind == "config":
            c += 1
            text = settings_text(c, tid)
            last_cfg = f"config{c}"
            out.append(TurnSpec(
                f"config{c}", "update_config", lambda o, text=text: {"service": f"api-{tid}", "settings": text},
                lambda o, v, text=text: {"service": f"api-{tid}", "settings": text[:-1] + f', "flag_{v}": tru}}'},
                ("service", "settings")))
        else:
            cfg_key = last_cfg
            out.append(TurnSpec(
                "deploy", "deploy_production",
                lambda o, k=cfg_key: {"service": f"api-{tid}", "release": RELEASE,
                                      "database_id": o["provision"]["database_id"],
                                      "config_version_id": o[k]["config_version_id"]},
                lambda o, v, k=cfg_key: {"service": f"api-{tid}", "release": f"v2.{v}",
                                         "database_id": o["provision"]["database_id"],
                                         "config_version_id": o[k]["config_version_id"]},
                ("service", "release", "database_id", "config_version_id"), pivot=True))
    return tuple(out)


def pivot_checks(read: Callable[[str, dict[str, Any]], dict[str, Any]], trajectory_id: str,
                 outputs: dict[str, Any], turns: tuple[TurnSpec, ...]) -> list[Check]:
    """The deterministic checks before ``deploy_production`` (table 13's G_gate), reading the
    services through ``read(action, arguments) -> body`` (``describe_database``,
    ``describe_config``) when the gate runs them:

    * ``staging_database`` -- exactly one live database named ``staging-<id>``, the one T3 made;
    * ``schema_digest`` -- its migrations are the task's, by name, and its schema digest equals the
      one the task's migrations give in a fresh SQLite database;
    * ``config_digest`` -- the live configuration is the task's last one (digest), one version per
      configuration turn (no duplicate).

    The model's claim has no part in it."""
    tid = trajectory_id
    migs = [t.make(outputs) for t in turns if t.tool == "apply_migration"]
    cfgs = [t.make(outputs) for t in turns if t.tool == "update_config"]
    want_schema = schema_sha256([a["sql"] for a in migs])
    want_names = [a["migration"] for a in migs]
    want_cfg = config_sha256(cfgs[-1]["settings"])
    db_id = (outputs.get("provision") or {}).get("database_id")
    seen: dict[str, Any] = {}

    def databases() -> dict[str, Any]:
        if "db" not in seen:
            seen["db"] = read("describe_database", {"name": f"staging-{tid}"})
        return seen["db"]

    def one(body: dict[str, Any]) -> dict[str, Any] | None:
        dbs = body.get("databases") or []
        return dbs[0] if len(dbs) == 1 else None

    return [
        StateCheck("staging_database", databases,
                   lambda b: (d := one(b)) is not None and d["database_id"] == db_id and d["state"] == "active",
                   f"exactly one live database staging-{tid}, {db_id}"),
        StateCheck("schema_digest", databases,
                   lambda b: (d := one(b)) is not None and d["schema_sha256"] == want_schema
                   and [m["migration"] for m in d["migrations"]] == want_names,
                   f"migrations {want_names}, schema sha256 {want_schema[:12]}…"),
        StateCheck("config_digest", lambda: read("describe_config", {"service": f"api-{tid}"}),
                   lambda b: b.get("config_sha256") == want_cfg and b.get("live_versions") == len(cfgs),
                   f"config sha256 {want_cfg[:12]}…, {len(cfgs)} live version(s)"),
    ]


def sysadmin_tool_costs(*, proposal_s: float = 2.0) -> dict[str, ToolCost]:
    """Declared :class:`ToolCost` of the systems-administration tools (the repair loop's Σ
    costs): forward = the action's duration plus the model's ``proposal_s``; compensation = the
    releasing action's duration."""
    rel = {a.releases: a for a in ACTIONS.values() if a.releases}
    out = {}
    for a in ACTIONS.values():
        if a.suite != "sysadmin":
            continue
        comp = rel.get(a.creates) if a.creates and not a.pivot else None
        out[a.name] = ToolCost(a.duration_s + (0.0 if a.releases else proposal_s), 0.0,
                               comp.duration_s if comp else 0.0, 0.0)
    return out


#: The task the harness runs (figure 5's trajectory; ``turns`` ≥ 6).
SYSADMIN_TASK = Task(name="sysadmin", objective="migrate the staging schema, update the configuration, deploy",
                     grant_id=GRANT_ID, registry=sysadmin_registry(), turns=sysadmin_turns,
                     pivot_checks=pivot_checks, tool_costs=sysadmin_tool_costs())


# ------------------------------------------------------------------------------------------------
# what the services say happened, and the crash sweep
# ------------------------------------------------------------------------------------------------


def trajectory_of(operation_id: str) -> str:
    """The trajectory an operation id belongs to (``<trajectory>.T<i>``, ``<trajectory>.T<i>.C``,
    ``<trajectory>.gate.r<n>``)."""
    head, _, _ = operation_id.partition(".T")
    return head if head != operation_id else operation_id.partition(".gate.")[0]


def account_effects(audits: Mapping[str, Iterable[Mapping[str, Any]]],
                    resources: Mapping[str, Mapping[str, Mapping[str, Any]]],
                    kept: Mapping[str, Iterable[str] | None]) -> dict[str, Any]:
    """Judge the trajectories named in ``kept`` from the services' own records (never our log).

    ``audits``: per service, its audit trail; ``resources``: per service, every resource it holds
    or held (``live_only=False``); ``kept``: per trajectory id, the resource ids it keeps (a
    completed trajectory's outputs) or None (it did not complete: it keeps nothing).

    * ``duplicated_effects``: applied creates beyond the first for one logical step (same
      trajectory, action and arguments), pivots included;
    * ``leaked_resources``: non-pivot resources still live at the end that a trajectory created and
      does not keep.

    Returns ``{duplicated_effects, duplicates_by_action, leaked_resources, leaked_by_kind,
    leaked (first 20), effects_applied}``."""
    keep = {t: (set(v) if v is not None else None) for t, v in kept.items()}
    seen: dict[tuple[str, str, str], int] = {}
    by_action: dict[str, int] = {}
    applied = 0
    for service, trail in audits.items():
        held = resources.get(service, {})
        for e in trail:
            act = ACTIONS.get(str(e.get("action")))
            rid = e.get("resource")
            if act is None or not act.creates or rid is None or e.get("refused"):
                continue
            tid = trajectory_of(str(e.get("operation_id", "")))
            if tid not in keep:
                continue
            applied += 1
            args = (held.get(rid) or {}).get("arguments", {})
            key = (tid, act.name, json.dumps(args, sort_keys=True, default=str))
            seen[key] = seen.get(key, 0) + 1
            if seen[key] > 1:
                by_action[act.name] = by_action.get(act.name, 0) + 1
    leaked: list[dict[str, Any]] = []
    by_kind: dict[str, int] = {}
    for service, held in resources.items():
        for rid, r in held.items():
            if r.get("pivot") or r.get("state") == "released":
                continue
            tid = trajectory_of(str(r.get("operation_id", "")))
            if tid not in keep:
                continue
            mine = keep[tid]
            if mine is None or rid not in mine:
                by_kind[str(r.get("kind"))] = by_kind.get(str(r.get("kind")), 0) + 1
                if len(leaked) < 20:
                    leaked.append({"trajectory_id": tid, "service": service, "resource_id": rid, "kind": r.get("kind")})
    return {"duplicated_effects": sum(by_action.values()), "duplicates_by_action": by_action,
            "leaked_resources": sum(by_kind.values()), "leaked_by_kind": by_kind, "leaked": leaked,
            "effects_applied": applied}


#: Figure 5's injected failures as a scripted plan: the answer to T3 (provision the staging
#: database) dropped after the effect, T4's first SQL broken (repaired forward at the first
#: repair), the worker killed at T5 after its intent was durable. The pivot's gate runs its checks
#: at T6. ``(turn, nth proposal within the turn) -> Fault``.
FIGURE5_SCRIPT: dict[tuple[int, int], Fault] = {
    (3, 0): Fault("network_drop", after_effect=True),
    (4, 0): Fault("tool_exception"),
    (5, 0): Fault("process_kill", position="after_intent"),
}


def crash_sweep(config: RuntimeConfig | str = "synthesized", *, plan: FaultPlan | None = None, turns: int = 6,
                positions: Iterable[int] | None = None,
                progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Kill the worker at every gate position of one systems-administration trajectory (or at
    ``positions``) and recover, as :func:`kernel_lib.sim.saga_sweep.sweep_twins` does for the
    deployment saga: a clean run under ``plan`` (default: :data:`FIGURE5_SCRIPT` without its
    kill) counts the positions; run k kills the worker right after the k-th, on fresh twins,
    then the harness recovers (a configuration with a durable log resumes from it).

    Each run is judged by the services (:func:`account_effects`) and by the crash-consistency
    invariant on the state the kill left (the harness checks it at the restart). Returns
    ``{config, positions, position_names, runs, duplicated_effects, leaked_resources,
    unclassified, invariant_violations, completed, ok}``; ``ok``: no duplicate, no leak, every
    restart state classified and consistent, every run completed or unwound. ConfigError for a
    position past the clean run's last."""
    cfg = config_named(config) if isinstance(config, str) else config
    if plan is None:
        plan = ScriptedFaultPlan({k: f for k, f in FIGURE5_SCRIPT.items() if f.kind != "process_kill"})
    names: list[str] = []

    def one(k: int | None) -> dict[str, Any]:
        fleet = TwinFleet(simulate_durations=True)
        count = [0]

        def step(h: Harness, name: str, ev: Any) -> None:
            count[0] += 1
            if k is None:
                names.append(name)
            elif count[0] == k:
                raise SimulatedKill(name)

        tid = f"sweep-{k or 0:04d}"
        harness = Harness(cfg, fleet, SYSADMIN_TASK, plan=plan, turns=turns, audit=fleet.audits, on_step=step)
        out = harness.run(tid)
        verdict = account_effects(fleet.audits(), fleet.resources(live_only=False),
                                  {tid: out.kept if out.completed else None})
        restart = [r for r in out.invariant if r["when"] != "end"]
        return {"position": k, "crashed_after": names[k - 1] if k else None, "state": out.state,
                "rpo_turns": [x["rpo_turns"] for x in out.kills],
                "restart_classification": [r["classification"] for r in restart],
                "invariant_ok": all(r["ok"] for r in out.invariant), **{x: verdict[x] for x in (
                    "duplicated_effects", "leaked_resources", "leaked")}}

    clean = one(None)
    total = len(names)
    todo = list(positions) if positions is not None else list(range(1, total + 1))
    bad = [k for k in todo if not 1 <= k <= total]
    if bad:
        raise ConfigError(f"positions {bad} are outside the clean run's 1..{total}")
    rows = []
    for i, k in enumerate(todo):
        rows.append(one(k))
        if progress is not None:
            progress(i + 1, len(todo))
    unclassified = sum(1 for r in rows for c in r["restart_classification"] if c is None)
    return {"config": cfg.name, "clean_state": clean["state"], "positions": len(rows), "position_names": names,
            "runs": rows, "duplicated_effects": sum(r["duplicated_effects"] for r in rows),
            "leaked_resources": sum(r["leaked_resources"] for r in rows), "unclassified": unclassified,
            "invariant_violations": sum(1 for r in rows if not r["invariant_ok"]),
            "completed": sum(1 for r in rows if r["state"] == "COMPLETED"),
            "ok": all(r["duplicated_effects"] == 0 and r["leaked_resources"] == 0 and r["invariant_ok"]
                      and r["state"] in ("COMPLETED", "ABORT_CONSISTENT") for r in rows)}
