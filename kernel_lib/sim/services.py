"""The chapter's external systems as tool services, and their simulated twins (Failure Recovery).

The deployment saga of the Failure Recovery chapter touches systems the runtime does not own: a
sandbox hypervisor, a cloud egress-IP API, a build inside the sandbox, a firewall, an
authoritative DNS server, a payment processor, a git forge, a mail relay and public routing.
:class:`ServiceLogic` is one such system's behaviour, written once and used two ways:

* :class:`ServiceTwin` runs it in process on a virtual clock (fast, exhaustive tests, the
  hypothesis state machine);
* :mod:`kernel_lib.live.services` serves it from a real process on loopback, its state in an
  SQLite file of its own (``synchronous=FULL``), so it outlives a killed worker and a killed
  service process.

The contract both honour (one conformance suite, ``tests/test_tool_services.py``, runs on both):

* ``call(action, arguments, operation_id, idempotency_key, lease)``: every request is counted in
  ``received`` (per action) before anything else, refused or not. The service checks the lease
  with the credential broker first (a revoked or expired lease: 401, nothing applied). A repeat
  under an idempotency key it has answered gets the first answer again (``duplicate: true``,
  counted, not applied again); the same key with other arguments: 409 ``conflicting_request``.
  An applied effect is counted in ``applied`` (per action).
* ``lookup(operation_id)``: the status query by operation id (§11.5.3): ``completed`` with the
  output, ``failed`` with the error, or ``unknown`` (never received, or received and not applied).
* ``resources()``: what really exists (sandboxes, IPs, holds, records, …) and ``invariants()``:
  the semantic invariants Φ of definition 0.2 (no live sandbox, no held IP, zero held balance, …)
  — S'_0 ≠ S_0 (ids advanced, the audit trail grew) while every φ(S'_0) = φ(S_0).
* Faults injected on command (:meth:`ServiceLogic.inject`), per action, for the next ``count``
  calls: ``timeout_after`` (the effect is applied, the answer never arrives), ``timeout_before``
  (no effect, no answer), ``conflict`` (409), ``rate_limited`` (429 with ``retry_after_s``),
  ``server_error`` (503), ``crash`` (the service process dies on receipt: nothing applied),
  ``slow`` (``delay_s`` before the answer), ``partial`` (part of the effect applied, then 500 with
  the partial output, so the step's own compensator can undo it).

A call returns ``(http_status, body)``; the twin turns a timeout into ``TimeoutError`` and a
crashed service into ``ConnectionRefusedError`` for the transport, as a real socket would.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kernel_lib._support.clock import ManualClock
from kernel_lib.errors import ServiceDownError, ServiceError

if TYPE_CHECKING:   # imported where used: a live service process needs neither (start-up time)
    from kernel_lib.core.events import ToolIntent
    from kernel_lib.core.proposals import ToolReply
    from kernel_lib.recovery.contracts import ToolContract

__all__ = ["FAULT_KINDS", "ACTIONS", "SERVICES", "ServiceLogic", "ServiceTwin", "BrokerLogic",
           "deployment_contracts", "sysadmin_contracts", "reply_from_answer", "TwinFleet", "TwinEndpoints",
           "BASE_SCHEMA_SQL", "REPOSITORY_MIGRATIONS", "schema_sha256", "config_sha256"]

FAULT_KINDS = ("timeout_after", "timeout_before", "conflict", "rate_limited", "server_error", "crash", "slow",
               "partial")


@dataclass(frozen=True)
class Action:
    """One action of a service: the resource kind it creates (``creates``) or releases
    (``releases``, naming the argument that holds the resource id), or neither (``pivot``: an
    effect outside, recorded but never released; ``read_only``: a query that changes nothing).

    ``tier`` overrides the reversibility tier the contracts declare (default: II for a creating
    action, III for a pivot, I for a read-only one); ``suite`` names the task the action belongs
    to (``deployment``: the deployment saga of Napkin Math 0.1; ``sysadmin``: the
    systems-administration trajectory of figure 5)."""

    service: str
    name: str
    creates: str | None = None
    releases: str | None = None
    id_argument: str | None = None
    pivot: bool = False
    #: simulated duration of the action (the chapter's figures, Napkin Math 0.1), seconds
    duration_s: float = 0.01
    read_only: bool = False
    tier: str | None = None
    suite: str = "deployment"


#: Every action of every service. Creating actions return ``{<kind>_id, ...}``.
ACTIONS: dict[str, Action] = {a.name: a for a in (
    Action("sandbox", "provision_sandbox", creates="sandbox", duration_s=0.120),
    Action("sandbox", "teardown_sandbox", releases="sandbox", id_argument="sandbox_id", duration_s=0.045),
    Action("egress_ip", "reserve_ip", creates="ip", duration_s=0.350),
    Action("egress_ip", "release_ip", releases="ip", id_argument="ip_id", duration_s=0.220),
    Action("build", "compile_binary", creates="build", duration_s=4.200),
    Action("build", "clean_build", releases="build", id_argument="build_id", duration_s=0.015),
    Action("firewall", "bind_firewall", creates="rule", duration_s=0.080),
    Action("firewall", "unbind_firewall", releases="rule", id_argument="rule_id", duration_s=0.010),
    Action("dns", "publish_dns", creates="record", duration_s=0.450),
    Action("dns", "delete_dns", releases="record", id_argument="record_id", duration_s=0.150),
    Action("payments", "place_hold", creates="hold", duration_s=0.300),
    Action("payments", "release_hold", releases="hold", id_argument="hold_id", duration_s=0.200),
    Action("git", "create_branch", creates="branch", duration_s=0.100),
    Action("git", "delete_branch", releases="branch", id_argument="branch_id", duration_s=0.050),
    Action("email", "send_email", creates="message", pivot=True, duration_s=0.200),
    Action("routing", "activate_route", creates="route", pivot=True, duration_s=0.300),
    # the systems-administration trajectory of figure 5 (Failure Recovery, "Anatomy of a faulted
    # trajectory"); durations are stated stand-ins, not the chapter's figures
    Action("git", "clone_repo", creates="checkout", tier="I", duration_s=0.800, suite="sysadmin"),
    Action("git", "delete_checkout", releases="checkout", id_argument="checkout_id", duration_s=0.050,
           suite="sysadmin"),
    Action("git", "inspect_migrations", read_only=True, duration_s=0.040, suite="sysadmin"),
    Action("database", "provision_db", creates="database", duration_s=2.500, suite="sysadmin"),
    Action("database", "teardown_db", releases="database", id_argument="database_id", duration_s=0.600,
           suite="sysadmin"),
    Action("database", "apply_migration", creates="migration", duration_s=0.300, suite="sysadmin"),
    Action("database", "revert_migration", releases="migration", id_argument="migration_id", duration_s=0.250,
           suite="sysadmin"),
    Action("database", "describe_database", read_only=True, duration_s=0.020, suite="sysadmin"),
    Action("config", "update_config", creates="config_version", duration_s=0.150, suite="sysadmin"),
    Action("config", "restore_config", releases="config_version", id_argument="config_version_id",
           duration_s=0.120, suite="sysadmin"),
    Action("config", "describe_config", read_only=True, duration_s=0.015, suite="sysadmin"),
    Action("deploy", "deploy_production", creates="deployment", pivot=True, duration_s=3.000, suite="sysadmin"),
)}
SERVICES = tuple(dict.fromkeys(a.service for a in ACTIONS.values()))


def deployment_contracts() -> list[ToolContract]:
    """The declared contracts of every action of the deployment saga (Failure Recovery, table 5):
    creating actions are tier II (compensable) with the releasing action as compensator, bound
    from the created id; ``send_email`` and ``activate_route`` are tier III pivots; releasing
    actions are compensators. Every action honours an idempotency key and answers a status lookup.
    The systems-administration actions are declared by :func:`sysadmin_contracts`."""
    return _contracts("deployment")


def sysadmin_contracts() -> list[ToolContract]:
    """The declared contracts of the systems-administration actions (figure 5; table 5's tiers):
    ``clone_repo`` tier I (its checkout deleted by ``delete_checkout``), ``provision_db``,
    ``apply_migration`` and ``update_config`` tier II with ``teardown_db``, ``revert_migration``
    and ``restore_config`` as compensators (bound from the created id), the read-only queries
    (``inspect_migrations``, ``describe_database``, ``describe_config``) tier I with no
    compensator (C = noop), and ``deploy_production`` the tier III pivot (C = ∅). Every action
    honours an idempotency key (reads: ``read_only``) and answers a status lookup."""
    return _contracts("sysadmin")


def _contracts(suite: str) -> list[ToolContract]:
    from kernel_lib.recovery.contracts import Compensator, ToolContract

    out = []
    releasers = {a.releases: a for a in ACTIONS.values() if a.releases}
    for a in ACTIONS.values():
        if a.suite != suite:
            continue
        if a.read_only:
            out.append(ToolContract(a.name, a.tier or "I", "read_only", True, None,
                                    description=f"{a.name} ({a.service}): read only, C = noop"))
        elif a.releases:
            out.append(ToolContract(a.name, "II", "idempotency_key", True, None, is_compensator=True,
                                    description=f"release a {a.releases} ({a.service})"))
        elif a.pivot:
            out.append(ToolContract(a.name, "III", "idempotency_key", True, None,
                                    description=f"{a.name} ({a.service}): irreversible"))
        else:
            rel = releasers[a.creates]
            out.append(ToolContract(a.name, a.tier or "II", "idempotency_key", True,
                                    Compensator(rel.name, {rel.id_argument: f"output.{a.creates}_id"}),
                                    description=f"create a {a.creates} ({a.service})"))
    return out


# ------------------------------------------------------------------------------------------------
# what the systems-administration services really check
# ------------------------------------------------------------------------------------------------

#: The schema every staging database starts from (``provision_db`` may name another in ``schema``).
BASE_SCHEMA_SQL = "CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT NOT NULL);"
#: What ``inspect_migrations`` lists for a checkout (the repository's migration scripts).
REPOSITORY_MIGRATIONS = ("0001_create_users.sql", "0002_add_email_index.sql", "0003_add_last_login.sql")
_ENGINES = ("postgres", "mysql", "sqlite")
_URL = re.compile(r"^(https://[\w.-]+/[\w./-]+|git@[\w.-]+:[\w./-]+)$")
_RELEASE = re.compile(r"^v\d+\.\d+\.\d+$")


def _schema_of(conn: sqlite3.Connection) -> str:
    rows = conn.execute("SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY type, name")
    return hashlib.sha256("\n".join(f"{t}\0{n}\0{q}" for t, n, q in rows).encode()).hexdigest()


def _run_sql(base: str, applied: list[str], sql: str | None) -> tuple[str | None, str | None]:
    """Replay ``base`` and ``applied`` in a scratch in-memory SQLite database, then run ``sql``
    (when given). Returns ``(error, schema_sha256)``: sqlite's own message when ``sql`` failed."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.executescript(base)
        for q in applied:
            conn.executescript(q)
        if sql is not None:
            try:
                conn.executescript(sql)
            except sqlite3.Error as exc:
                return str(exc), None
        return None, _schema_of(conn)
    finally:
        conn.close()


def schema_sha256(migrations: list[str], base: str = BASE_SCHEMA_SQL) -> str:
    """SHA-256 hex of the schema (``sqlite_master``) after ``base`` and ``migrations`` ran in a
    fresh in-memory SQLite database: what ``describe_database`` reports for a database with those
    migrations applied. Raises :class:`ServiceError` when the SQL does not run."""
    err, digest = _run_sql(base, list(migrations), None)
    if err is not None or digest is None:
        raise ServiceError(f"the migrations do not run: {err}")
    return digest


def config_sha256(settings: str) -> str:
    """SHA-256 hex of a configuration's canonical JSON (what ``describe_config`` reports).
    Raises :class:`ServiceError` when ``settings`` is not a JSON object text."""
    try:
        value = json.loads(settings)
    except (TypeError, ValueError) as exc:
        raise ServiceError(f"settings are not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ServiceError("settings must be a JSON object")
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


# ------------------------------------------------------------------------------------------------
# the credential broker (capability leases per trajectory)
# ------------------------------------------------------------------------------------------------


class BrokerLogic:
    """Short-lived capability leases per trajectory (Failure Recovery, "Terminal escalation":
    escrow and token revocation). State is a JSON-able dict (the live broker persists it).

    ``issue(trajectory_id, ttl_s)`` → ``{lease_id, token, expires_s}``; the token is the secret a
    transport presents, never logged. ``introspect(token)`` → ``{active, trajectory_id, reason}``.
    ``revoke_all(trajectory_id)`` → the revoked lease ids.
    """

    def __init__(self, clock: Callable[[], float], state: dict[str, Any] | None = None):
        self.clock = clock
        self.state = state if state is not None else {"leases": {}, "next": 1, "introspections": 0}

    def issue(self, trajectory_id: str, ttl_s: float = 300.0) -> dict[str, Any]:
        if not (isinstance(ttl_s, (int, float)) and 0 < ttl_s < 1e9):
            raise ServiceError(f"lease ttl_s must be a positive number of seconds, got {ttl_s!r}")
        n = self.state["next"]
        self.state["next"] = n + 1
        lease_id = f"lease-{n:06d}"
        token = f"cap-{n:06d}-{abs(hash((trajectory_id, n, self.clock()))) % 10**12:012d}"
        self.state["leases"][token] = {"lease_id": lease_id, "trajectory_id": trajectory_id,
                                       "expires_s": self.clock() + float(ttl_s), "revoked": False}
        return {"lease_id": lease_id, "token": token, "expires_s": self.clock() + float(ttl_s)}

    def introspect(self, token: str | None) -> dict[str, Any]:
        self.state["introspections"] += 1
        lease = self.state["leases"].get(token or "")
        if lease is None:
            return {"active": False, "reason": "unknown lease"}
        if lease["revoked"]:
            return {"active": False, "reason": "revoked", "trajectory_id": lease["trajectory_id"],
                    "lease_id": lease["lease_id"]}
        if self.clock() >= lease["expires_s"]:
            return {"active": False, "reason": "expired", "trajectory_id": lease["trajectory_id"],
                    "lease_id": lease["lease_id"]}
        return {"active": True, "trajectory_id": lease["trajectory_id"], "lease_id": lease["lease_id"]}

    def revoke_all(self, trajectory_id: str) -> list[str]:
        out = []
        for lease in self.state["leases"].values():
            if lease["trajectory_id"] == trajectory_id and not lease["revoked"]:
                lease["revoked"] = True
                out.append(lease["lease_id"])
        return out



# ------------------------------------------------------------------------------------------------
# one service's behaviour
# ------------------------------------------------------------------------------------------------


def _initial_state(name: str) -> dict[str, Any]:
    return {"service": name, "next_id": 1, "resources": {}, "answers": {}, "operations": {}, "received": {},
            "applied": {}, "refused": {}, "faults": {}, "audit": [], "taken_names": []}


class ServiceLogic:
    """One tool service's behaviour over a JSON-able state dict (see the module docstring).

    ``introspect(token)`` is the broker's introspection (a function; None: no lease check).
    ``sleep(seconds)``: how a ``slow`` fault or an action's duration passes (the twin advances
    its virtual clock; the live service really sleeps).
    """

    def __init__(self, name: str, *, state: dict[str, Any] | None = None,
                 introspect: Callable[[str | None], dict[str, Any]] | None = None,
                 sleep: Callable[[float], None] = lambda s: None, simulate_durations: bool = False):
        if name not in SERVICES:
            raise ServiceError(f"unknown service {name!r} (known: {', '.join(SERVICES)})")
        self.name = name
        self.state = state if state is not None else _initial_state(name)
        self.introspect = introspect
        self.sleep = sleep
        self.simulate_durations = simulate_durations

    # --- faults ------------------------------------------------------------------------------------
    def inject(self, action: str, kind: str, count: int = 1, **params: Any) -> dict[str, Any]:
        """Queue fault ``kind`` for the next ``count`` calls of ``action`` (ServiceError on a bad
        spec). ``params``: ``delay_s`` (slow), ``retry_after_s`` (rate_limited)."""
        a = ACTIONS.get(action)
        if a is None or a.service != self.name:
            raise ServiceError(f"service {self.name} has no action {action!r} "
                               f"(its actions: {[x.name for x in ACTIONS.values() if x.service == self.name]})")
        if kind not in FAULT_KINDS:
            raise ServiceError(f"unknown fault {kind!r} (known: {', '.join(FAULT_KINDS)})")
        if not (isinstance(count, int) and not isinstance(count, bool) and 1 <= count <= 10_000):
            raise ServiceError(f"fault count must be an integer 1..10000, got {count!r}")
        for k, v in params.items():
            if k not in ("delay_s", "retry_after_s") or not (isinstance(v, (int, float)) and 0 <= v <= 3600):
                raise ServiceError(f"fault parameter {k}={v!r} is not delay_s/retry_after_s in 0..3600 s")
        spec = {"kind": kind, "count": count, **params}
        self.state["faults"].setdefault(action, []).append(spec)
        return spec

    def clear_faults(self) -> None:
        self.state["faults"] = {}

    def _take_fault(self, action: str) -> dict[str, Any] | None:
        queue = self.state["faults"].get(action) or []
        if not queue:
            return None
        spec = queue[0]
        spec["count"] -= 1
        if spec["count"] <= 0:
            queue.pop(0)
        return dict(spec)

    def taken_name(self, name: str) -> None:
        """Mark a DNS name as owned by someone else: publishing it answers 409 (the chapter's
        domain-ownership collision)."""
        self.state["taken_names"].append(name)

    # --- the request path --------------------------------------------------------------------------
    def _count(self, table: str, action: str) -> None:
        self.state[table][action] = self.state[table].get(action, 0) + 1

    def call(self, action: str, arguments: dict[str, Any], operation_id: str, idempotency_key: str | None,
             lease: str | None) -> tuple[int, dict[str, Any], str | None]:
        """Serve one request. Returns ``(http_status, body, effect)`` where ``effect`` is None or
        the fault the transport must act out after the state was saved: ``"timeout"`` (no answer
        arrives), ``"crash"`` (the process dies), ``"slow:<s>"``."""
        self._count("received", action)
        a = ACTIONS.get(action)
        if a is None or a.service != self.name:
            return 404, {"error": f"no action {action!r} on {self.name}", "retryable": False}, None
        if not isinstance(arguments, dict):
            return 422, {"error": "arguments must be an object", "retryable": False}, None
        if self.introspect is not None:
            grant = self.introspect(lease)
            if not grant.get("active"):
                self._count("refused", action)
                self.state["audit"].append({"action": action, "operation_id": operation_id, "refused": "lease",
                                            "reason": grant.get("reason")})
                return 401, {"error": f"capability lease refused: {grant.get('reason')}", "retryable": False,
                             "reason": "lease_" + str(grant.get("reason", "invalid")).replace(" ", "_")}, None
        request = json.dumps([action, arguments], sort_keys=True)
        if idempotency_key:
            prior = self.state["answers"].get(idempotency_key)
            if prior is not None:
                if prior["request"] != request:
                    return 409, {"error": "idempotency key reused with another request", "retryable": False,
                                 "reason": "conflicting_request"}, None
                if prior["status"] < 300 or prior.get("final"):
                    return prior["status"], {**prior["body"], "duplicate": True}, None
        fault = self._take_fault(action)
        kind = fault["kind"] if fault else None
        if kind == "crash":
            return 0, {}, "crash"
        if kind == "timeout_before":
            return 0, {}, "timeout"
        if kind == "conflict":
            return self._answer(action, operation_id, idempotency_key, request, 409,
                                {"error": "conflict (injected)", "retryable": False, "reason": "conflict"},
                                final=True)
        if kind == "rate_limited":
            return 429, {"error": "rate limited", "retryable": True,
                         "retry_after_s": fault.get("retry_after_s", 1.0)}, None
        if kind == "server_error":
            return 503, {"error": "service unavailable (injected)", "retryable": True}, None
        if self.simulate_durations:
            self.sleep(a.duration_s)
        status, body = self._apply(a, arguments, operation_id, partial=(kind == "partial"))
        status, body, _ = self._answer(action, operation_id, idempotency_key, request, status, body,
                                       final=status >= 400 and not body.get("retryable", False))
        if kind == "timeout_after":
            return status, body, "timeout"
        if kind == "slow":
            return status, body, f"slow:{fault.get('delay_s', 1.0)}"
        return status, body, None

    def _answer(self, action: str, operation_id: str, key: str | None, request: str, status: int,
                body: dict[str, Any], *, final: bool = False) -> tuple[int, dict[str, Any], None]:
        if key:
            self.state["answers"][key] = {"request": request, "status": status, "body": body, "final": final}
        self.state["operations"][operation_id] = {
            "action": action, "status": "completed" if status < 300 else "failed", "http_status": status,
            "body": body}
        return status, body, None

    def _new_id(self, kind: str) -> str:
        n = self.state["next_id"]
        self.state["next_id"] = n + 1
        return f"{kind}-{n:04d}"

    def _apply(self, a: Action, arguments: dict[str, Any], operation_id: str, *,
               partial: bool) -> tuple[int, dict[str, Any]]:
        res = self.state["resources"]
        if a.releases:
            rid = arguments.get(a.id_argument)
            r = res.get(rid) if isinstance(rid, str) else None
            if r is None or r["kind"] != a.releases:
                return 404, {"error": f"no {a.releases} {rid!r}", "retryable": False, "reason": "not_found"}
            self._count("applied", a.name)
            already = r["state"] == "released"
            r["state"] = "released"
            self.state["audit"].append({"action": a.name, "operation_id": operation_id, "resource": rid,
                                        "already_released": already})
            return 200, {f"{a.releases}_id": rid, "released": True, "already_released": already}
        if a.read_only:
            return self._read(a, arguments, operation_id)
        if a.name == "publish_dns" and arguments.get("name") in self.state["taken_names"]:
            return 409, {"error": f"domain {arguments.get('name')!r} is owned by another account",
                         "retryable": False, "reason": "domain_ownership"}
        refused, extra = self._check_request(a, arguments)
        if refused is not None:
            return refused
        rid = self._new_id(a.creates)
        self._count("applied", a.name)
        res[rid] = {"kind": a.creates, "state": "partial" if partial else "active", "operation_id": operation_id,
                    "arguments": copy.deepcopy(arguments), "pivot": a.pivot, **extra}
        if a.name == "apply_migration":
            res[arguments["database_id"]].setdefault("migrations", []).append(rid)
        self.state["audit"].append({"action": a.name, "operation_id": operation_id, "resource": rid,
                                    "partial": partial})
        out = {f"{a.creates}_id": rid, **extra}
        if partial:
            return 500, {"error": f"{a.name} failed part way: {rid} exists", "retryable": False,
                         "partial": True, "output": out}
        return 200, out

    # --- the systems-administration services' own checks (figure 5) -----------------------------------
    def _active(self, rid: Any, kind: str) -> dict[str, Any] | None:
        r = self.state["resources"].get(rid) if isinstance(rid, str) else None
        return r if r is not None and r["kind"] == kind and r["state"] == "active" else None

    def _live_migrations(self, db: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        res = self.state["resources"]
        return [(m, res[m]) for m in db.get("migrations", []) if res[m]["state"] != "released"]

    def _check_request(self, a: Action, arguments: dict[str, Any]
                       ) -> tuple[tuple[int, dict[str, Any]] | None, dict[str, Any]]:
        """A creating request's own validity, checked by the service before anything is applied:
        ``(refusal, {})`` (a final 4xx: nothing applied) or ``(None, extra outputs)``. The SQL of
        ``apply_migration`` really runs, in a scratch in-memory SQLite database holding the
        database's schema and its live migrations; the settings of ``update_config`` are really
        parsed as JSON."""
        def no(status: int, reason: str, error: str) -> tuple[tuple[int, dict[str, Any]], dict[str, Any]]:
            return (status, {"error": error, "retryable": False, "reason": reason}), {}

        name = a.name
        if name == "clone_repo":
            url = arguments.get("url")
            if not isinstance(url, str) or not _URL.match(url):
                return no(422, "invalid_url", f"clone_repo: {url!r} is not a repository url (https://host/path "
                                              "or git@host:path)")
        elif name == "provision_db":
            engine = arguments.get("engine")
            if engine not in _ENGINES:
                return no(422, "unsupported_engine", f"provision_db: engine {engine!r} is not offered "
                                                     f"(offered: {', '.join(_ENGINES)})")
            schema = arguments.get("schema", BASE_SCHEMA_SQL)
            err, _ = _run_sql("", [], schema if isinstance(schema, str) else "")
            if err is not None:
                return no(422, "sql_syntax_error" if "syntax error" in err or "incomplete" in err else "sql_error",
                          err)
        elif name == "apply_migration":
            db = self._active(arguments.get("database_id"), "database")
            if db is None:
                return no(404, "not_found", f"apply_migration: no database {arguments.get('database_id')!r}")
            sql = arguments.get("sql")
            if not isinstance(sql, str) or not sql.strip():
                return no(422, "sql_missing", "apply_migration: sql must be a non-empty SQL text")
            applied = [m["arguments"]["sql"] for _, m in self._live_migrations(db)]
            err, digest = _run_sql(db["arguments"].get("schema", BASE_SCHEMA_SQL), applied, sql)
            if err is not None:
                syntax = "syntax error" in err or "incomplete input" in err
                return no(422, "sql_syntax_error" if syntax else "sql_error", err)
            return None, {"schema_sha256": digest}
        elif name == "update_config":
            settings = arguments.get("settings")
            try:
                value = json.loads(settings) if isinstance(settings, str) else None
            except ValueError as exc:
                snippet = settings[max(0, exc.pos - 12):exc.pos + 12]
                return no(422, "config_parse_error", f"update_config: settings are not JSON ({exc.msg}) near "
                                                     f"{snippet!r}")
            if not isinstance(value, dict):
                return no(422, "config_parse_error", "update_config: settings must be a JSON object text")
            return None, {"config_sha256": config_sha256(settings)}
        elif name == "deploy_production":
            release = arguments.get("release")
            if not isinstance(release, str) or not _RELEASE.match(release):
                return no(422, "invalid_release", f"deploy_production: release {release!r} is not a version tag "
                                                  "(vMAJOR.MINOR.PATCH)")
        return None, {}

    def _read(self, a: Action, arguments: dict[str, Any], operation_id: str) -> tuple[int, dict[str, Any]]:
        """A read-only query (counted as applied and audited with ``read_only``: nothing changes)."""
        res = self.state["resources"]
        if a.name == "inspect_migrations":
            checkout = self._active(arguments.get("checkout_id"), "checkout")
            if checkout is None:
                return 404, {"error": f"inspect_migrations: no checkout {arguments.get('checkout_id')!r}",
                             "retryable": False, "reason": "not_found"}
            body: dict[str, Any] = {"checkout_id": arguments["checkout_id"], "ref": checkout["arguments"].get("ref"),
                                    "migrations": list(REPOSITORY_MIGRATIONS)}
        elif a.name == "describe_database":
            dbs = []
            for rid, r in res.items():
                if r["kind"] == "database" and r["state"] != "released" and r["arguments"].get("name") == \
                        arguments.get("name"):
                    live = self._live_migrations(r)
                    _, digest = _run_sql(r["arguments"].get("schema", BASE_SCHEMA_SQL),
                                         [m["arguments"]["sql"] for _, m in live], None)
                    dbs.append({"database_id": rid, "state": r["state"], "schema_sha256": digest,
                                "migrations": [{"migration_id": m, "migration": r2["arguments"].get("migration")}
                                               for m, r2 in live]})
            body = {"name": arguments.get("name"), "databases": dbs}
        else:   # describe_config: the latest live version of the service's configuration
            versions = [(rid, r) for rid, r in res.items() if r["kind"] == "config_version"
                        and r["state"] != "released" and r["arguments"].get("service") == arguments.get("service")]
            last = versions[-1] if versions else None
            body = {"service": arguments.get("service"), "live_versions": len(versions),
                    "active_version_id": last[0] if last else None,
                    "config_sha256": last[1].get("config_sha256") if last else None}
        self._count("applied", a.name)
        self.state["audit"].append({"action": a.name, "operation_id": operation_id, "read_only": True})
        return 200, body

    def lookup(self, operation_id: str) -> dict[str, Any]:
        op = self.state["operations"].get(operation_id)
        if op is None:
            return {"operation_id": operation_id, "status": "unknown"}
        return {"operation_id": operation_id, "status": op["status"], "http_status": op["http_status"],
                "body": op["body"]}

    # --- what exists ---------------------------------------------------------------------------------
    def resources(self, *, live_only: bool = True) -> dict[str, dict[str, Any]]:
        return {k: dict(v) for k, v in self.state["resources"].items()
                if not live_only or v["state"] != "released"}

    def invariants(self) -> dict[str, Any]:
        """Φ (definition 0.2): the count of live (active or partial) compensable resources of each
        kind this service holds. Zero for every kind is the baseline S_0 every unwind must reach;
        pivot effects are listed apart (they can never return to zero)."""
        live: dict[str, int] = {}
        pivots = 0
        for v in self.state["resources"].values():
            if v.get("pivot"):
                pivots += 1
            elif v["state"] != "released":
                live[v["kind"]] = live.get(v["kind"], 0) + 1
        kinds = {a.creates for a in ACTIONS.values() if a.service == self.name and a.creates and not a.pivot}
        return {**{f"live_{k}_count": live.get(k, 0) for k in sorted(kinds)}, "pivot_effects": pivots}

    def counts(self) -> dict[str, dict[str, int]]:
        return {"received": dict(self.state["received"]), "applied": dict(self.state["applied"]),
                "refused": dict(self.state["refused"])}


def reply_from_answer(status: int, body: dict[str, Any]) -> ToolReply:
    """A service's HTTP answer as the gate's evidence: 2xx completed; a final 4xx/5xx failed
    (complete evidence: the service said no, which settles the operation). A retryable refusal
    (429, 503: nothing applied, try again) is recorded as ``failed`` with an *incomplete*
    observation: it must not settle the operation, whose next attempt under the same
    idempotency key may still complete it. A gateway's 502 or 504 (:data:`AMBIGUOUS_HTTP_STATUSES`:
    a proxy, or the service's own hold, gave up waiting for the answer) says nothing about whether
    the request was applied: it is recorded the same incomplete way, so the operation stays in
    doubt and the status lookup settles it (a complete ``failed`` here once let a runner resend
    blind under a new operation id and make a second resource)."""
    from kernel_lib.core.proposals import ToolReply

    outcome = {"http_status": status, **{k: v for k, v in body.items()}}
    if 200 <= status < 300:
        return ToolReply("completed", outcome=outcome, observation_complete=True)
    if status in AMBIGUOUS_HTTP_STATUSES:
        return ToolReply("failed", outcome={**outcome, "ambiguous": True}, observation_complete=False)
    return ToolReply("failed", outcome=outcome, observation_complete=not body.get("retryable", False))


#: HTTP answers that come from something between the client and the service having given up (bad
#: gateway, gateway timeout): whether the request was applied is unknown, as after a lost answer
AMBIGUOUS_HTTP_STATUSES = frozenset({502, 504})


class ServiceTwin:
    """A :class:`ServiceLogic` in process, on a virtual clock: the simulated twin of one service.

    ``transport(intent)`` is a dispatch-gate transport (raises ``TimeoutError`` for an injected
    timeout and :class:`ServiceDownError` while crashed); ``status_lookup(operation_id)`` the status
    query. ``restart()`` brings a crashed twin back with its state.
    """

    def __init__(self, name: str, clock: ManualClock | None = None, broker: BrokerLogic | None = None,
                 *, simulate_durations: bool = False):
        self.clock = clock or ManualClock()
        self.broker = broker
        self.logic = ServiceLogic(name, introspect=broker.introspect if broker else None,
                                  sleep=self.clock.advance, simulate_durations=simulate_durations)
        self.down = False

    @property
    def name(self) -> str:
        return self.logic.name

    def restart(self) -> None:
        self.down = False

    def call(self, action: str, arguments: dict[str, Any], operation_id: str, idempotency_key: str | None,
             lease: str | None) -> tuple[int, dict[str, Any]]:
        if self.down:
            raise ServiceDownError(f"service {self.name} is down")
        status, body, effect = self.logic.call(action, arguments, operation_id, idempotency_key, lease)
        if effect == "crash":
            self.down = True
            raise ServiceDownError(f"service {self.name} crashed on receipt (injected)")
        if effect == "timeout":
            raise TimeoutError(f"{self.name}.{action}: no answer (injected timeout)")
        if effect and effect.startswith("slow:"):
            self.clock.advance(float(effect.split(":", 1)[1]))
        return status, body

    def transport(self, intent: ToolIntent, lease: str | None = None) -> ToolReply:
        status, body = self.call(intent.tool, dict(intent.arguments), intent.operation_id, intent.idempotency_key,
                                 lease)
        return reply_from_answer(status, body)

    def status_lookup(self, operation_id: str) -> dict[str, Any]:
        if self.down:
            raise ServiceDownError(f"service {self.name} is down")
        return self.logic.lookup(operation_id)


class TwinFleet:
    """Every service as a simulated twin on one virtual clock, with one twin broker: the
    :class:`~kernel_lib.recovery.runner.Endpoints` of a simulated saga.

    ``client(trajectory_id)`` issues the trajectory's capability lease and returns its endpoints
    (the transports present the lease; it never enters the log). The fleet facade (``services``,
    ``inject``, ``clear_faults``, ``taken_name``, ``crash``/``restart``/``is_down``, ``resources``,
    ``audits``, ``counts``, ``invariants``, ``revoke``, ``close``; the reads raise
    :class:`ServiceDownError` while a service is crashed) is the same on the live fleet
    (:class:`kernel_lib.live.services.LiveFleet`), so a test, notebook or widget written against it
    runs on either.
    """

    def __init__(self, clock: ManualClock | None = None, *, simulate_durations: bool = False,
                 check_leases: bool = True):
        self.clock = clock or ManualClock()
        self.broker = BrokerLogic(self.clock) if check_leases else None
        self.twins = {name: ServiceTwin(name, self.clock, self.broker, simulate_durations=simulate_durations)
                      for name in SERVICES}
        self.tokens: dict[str, str] = {}

    def twin_of(self, tool: str) -> ServiceTwin:
        a = ACTIONS.get(tool)
        if a is None:
            raise ServiceError(f"no service offers {tool!r}")
        return self.twins[a.service]

    def client(self, trajectory_id: str, *, ttl_s: float = 3600.0) -> "TwinEndpoints":
        """The endpoints one trajectory's runner uses, with a fresh capability lease."""
        token = self.broker.issue(trajectory_id, ttl_s)["token"] if self.broker is not None else None
        return TwinEndpoints(self, trajectory_id, token)

    def live_resources(self) -> list[dict[str, Any]]:
        out = []
        for name, twin in self.twins.items():
            if twin.down:
                raise ServiceDownError(f"service {name} is down")
            for rid, r in twin.logic.resources().items():
                out.append({"service": name, "resource_id": rid, "kind": r["kind"], "state": r["state"],
                            "operation_id": r["operation_id"]})
        return out

    # --- the fleet facade (the same methods on kernel_lib.live.services.LiveFleet) ------------------
    @property
    def services(self) -> tuple[str, ...]:
        """The service names, in the order of :data:`SERVICES`."""
        return tuple(self.twins)

    def inject(self, action: str, kind: str, count: int = 1, **params: Any) -> dict[str, Any]:
        """Queue fault ``kind`` (one of :data:`FAULT_KINDS`) for the next ``count`` calls of
        ``action`` at the service that offers it; returns the spec. Raises :class:`ServiceError`
        on an unknown action, fault kind, count or parameter."""
        return self.twin_of(action).logic.inject(action, kind, count, **params)

    def clear_faults(self, service: str | None = None) -> None:
        """Drop every queued fault (of one service, or of all)."""
        for name, twin in self.twins.items():
            if service is None or name == service:
                twin.logic.clear_faults()

    def taken_name(self, name: str) -> None:
        """Mark a DNS name as owned by another account: ``publish_dns`` of it answers 409."""
        self.twins["dns"].logic.taken_name(name)

    def crash(self, service: str) -> None:
        """Take one service down (its state survives; calls raise :class:`ServiceDownError`)."""
        self._twin(service).down = True

    def restart(self, service: str) -> None:
        """Bring a crashed service back with its state."""
        self._twin(service).restart()

    def is_down(self, service: str) -> bool:
        return self._twin(service).down

    def _up(self, service: str) -> ServiceTwin:
        """The twin, or ServiceDownError while it is crashed (a dead process answers no reads either)."""
        twin = self.twins[service]
        if twin.down:
            raise ServiceDownError(f"service {service} is down")
        return twin

    def _twin(self, service: str) -> ServiceTwin:
        if service not in self.twins:
            raise ServiceError(f"unknown service {service!r} (known: {', '.join(self.twins)})")
        return self.twins[service]

    def resources(self, *, live_only: bool = True) -> dict[str, dict[str, dict[str, Any]]]:
        """``{service: {resource_id: {kind, state, operation_id, arguments, pivot}}}``: what each
        service really holds (``live_only=False``: released ones too)."""
        return {name: self._up(name).logic.resources(live_only=live_only) for name in self.twins}

    def audits(self) -> dict[str, list[dict[str, Any]]]:
        """``{service: [audit entry, ...]}``: every applied or refused request, in order."""
        return {name: copy.deepcopy(self._up(name).logic.state["audit"]) for name in self.twins}

    def counts(self) -> dict[str, dict[str, dict[str, int]]]:
        """``{service: {received|applied|refused: {action: n}}}``, counted by the services."""
        return {name: self._up(name).logic.counts() for name in self.twins}

    def invariants(self) -> dict[str, dict[str, Any]]:
        """``{service: Φ}`` (definition 0.2; see :meth:`ServiceLogic.invariants`)."""
        return {name: self._up(name).logic.invariants() for name in self.twins}

    def revoke(self, trajectory_id: str) -> list[str]:
        """Revoke every capability lease of the trajectory at the broker; the revoked lease ids."""
        return self.broker.revoke_all(trajectory_id) if self.broker is not None else []

    def close(self) -> None:
        """Nothing to release for twins (the live fleet stops its processes)."""

    def __enter__(self) -> "TwinFleet":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class TwinEndpoints:
    """One trajectory's view of a :class:`TwinFleet` (the runner's
    :class:`~kernel_lib.recovery.runner.Endpoints`): presents its lease token on every call."""

    def __init__(self, fleet: TwinFleet, trajectory_id: str, token: str | None):
        self.fleet, self.trajectory_id, self.token = fleet, trajectory_id, token

    def call(self, action: str, arguments: dict[str, Any], operation_id: str,
             idempotency_key: str | None) -> tuple[int, dict[str, Any]]:
        """One raw request: ``(http_status, body)`` (TimeoutError, ServiceDownError), as
        :meth:`kernel_lib.live.services.LiveEndpoints.call`."""
        return self.fleet.twin_of(action).call(action, arguments, operation_id, idempotency_key, self.token)

    def send(self, intent: ToolIntent) -> ToolReply:
        return self.fleet.twin_of(intent.tool).transport(intent, self.token)

    def lookup(self, tool: str, operation_id: str) -> dict[str, Any]:
        return self.fleet.twin_of(tool).status_lookup(operation_id)

    def live_resources(self) -> list[dict[str, Any]]:
        return self.fleet.live_resources()

    def revoke(self, trajectory_id: str) -> list[str]:
        return self.fleet.revoke(trajectory_id)
