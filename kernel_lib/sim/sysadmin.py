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
from collections.abc import Callable
from typing import Any

from kernel_lib.errors import ConfigError
from kernel_lib.recovery.contracts import ToolRegistry
from kernel_lib.recovery.repair import ToolCost
from kernel_lib.recovery.synthesis.harness import Task, TurnSpec
from kernel_lib.recovery.verification import Check, StateCheck
from kernel_lib.sim.services import ACTIONS, config_sha256, schema_sha256, sysadmin_contracts

__all__ = ["REPO_URL", "RELEASE", "SYSADMIN_STEPS", "sysadmin_registry", "sysadmin_turns", "migration",
           "settings_text", "pivot_checks", "sysadmin_tool_costs", "SYSADMIN_TASK", "GRANT_ID"]

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
                lambda o, v: {"checkout_id": f"checkout-missing-{v}"}, ("checkout_id",)))
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
                ("database_id", "migration", "sql")))
        elif kind == "config":
            c += 1
            text = settings_text(c, tid)
            last_cfg = f"config{c}"
            out.append(TurnSpec(
                f"config{c}", "update_config", lambda o, text=text: {"service": f"api-{tid}", "settings": text},
                lambda o, v, text=text: {"service": f"api-{tid}", "settings": text[:-(v + 2)]},
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
