"""The deployment saga one step at a time, for notebook FR.1 and the saga stepper widget.

Failure Recovery, "The Trajectory Saga Pattern" (definition 0.1, tables 2–3, the unwind listing)
and "Terminal escalation" (the ACB freeze). :class:`SagaDemo` drives the chapter's deployment
saga (T1 provision_sandbox … T5 publish_dns, :data:`~kernel_lib.sim.deployment.DEPLOYMENT_STEPS`)
over a fleet of tool services through the fleet facade only (``services``, ``client``,
``inject``, ``taken_name``, ``is_down``/``restart``, ``resources``, ``audits``, ``counts``,
``invariants``), so the same calls run on :class:`~kernel_lib.sim.services.TwinFleet` and on
the live fleet of real service processes.

The demo keeps no saga state of its own: Σ, the step states and the incident are folded from
the trajectory log (a real SQLite file when ``store_dir`` is given) every time they are shown,
and what exists comes from the services. What it holds is handles: the fleet, the store, the
current runner (or none after a crash), and the forward outputs the script passes from one step
to the next (re-read from the log by :meth:`SagaDemo.recover`).

Actions (each returns a small dict saying what happened; bad input raises
:class:`~kernel_lib.errors.ConfigError` with the reason):

* :meth:`SagaDemo.step` — the next forward step (a 409 or another final refusal records FAILED);
* :meth:`SagaDemo.inject` — queue a fault (:data:`~kernel_lib.sim.services.FAULT_KINDS`) on T_k or C_k;
* :meth:`SagaDemo.unwind` — pop Σ until it is empty, or until a compensator panics (PANIC, freeze);
* :meth:`SagaDemo.crash_during_unwind` — unwind, and abandon the runner right after the k-th
  compensator was dispatched (the service applied it, its answer is not in the log);
* :meth:`SagaDemo.recover` — restart crashed services, open the log again in a new runner,
  replay the committed forward steps from the log (an in-doubt one is settled by its status
  lookup); a frozen trajectory is found frozen and nothing runs.

:func:`attempt_prepare` is the two-phase-commit fallacy run: it asks the fleet for a prepare
phase, then sends the "prepare" the only way the services accept a request, as a normal call.
:class:`IncidentChannel` is an out-of-band channel for the freeze's incident record (a JSON-lines
file, never the model's context).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from kernel_lib.core.events import TaskStarted, ToolIntent
from kernel_lib.core.proposals import idempotency_key
from kernel_lib.core.record import fold, initial_record
from kernel_lib.errors import (
    ConfigError, KernelError, SagaPanicError, StepFailedError, TrajectoryFrozenRefusal,
)
from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate
from kernel_lib.log import FailureDomain, MemoryStore, TrajectoryLog, open_store
from kernel_lib.recovery.runner import RetryPolicy, SagaRunner
from kernel_lib.recovery.saga import SagaRecord, compensation_operation_id, fold_saga, step_operation_id
from kernel_lib.recovery.views import forward_rows, stack_rows, step_label
from kernel_lib.sim.deployment import DEPLOYMENT_STEPS, TAKEN_DOMAIN, deployment_registry
from kernel_lib.sim.saga_sweep import account
from kernel_lib.sim.services import ACTIONS, FAULT_KINDS

__all__ = ["DEMO_RETRY", "GRANT_ID", "LEASE_REFUSED", "VERDICT_LABELS", "DemoCrash", "IncidentChannel", "SagaDemo",
           "attempt_prepare", "deployment_arguments", "undo_by_hand", "resource_rows", "invariant_rows",
           "invariant_delta", "count_rows", "count_delta", "state_rows", "saga_effects", "verdict_rows",
           "answer_text", "incident_rows"]

GRANT_ID = "grant-deploy"
#: Backoff for the demo: short real waits (the live fleet sleeps for real), four attempts.
DEMO_RETRY = RetryPolicy(max_attempts=4, base_s=0.01, cap_s=0.05)


class DemoCrash(BaseException):
    """The abandoned runner (a BaseException: no ``except Exception`` of the runner or the gate
    catches it, as nothing catches a SIGKILL)."""


def deployment_arguments(index: int, outputs: list[dict[str, Any]], domain: str = TAKEN_DOMAIN) -> dict[str, Any]:
    """The arguments of forward step T_index of the deployment saga, from the outputs of T_1..T_{index-1}
    (the same script as :func:`kernel_lib.sim.deployment.run_deployment`). Raises ConfigError for an
    index outside 1..5 or when an earlier output is missing."""
    if not 1 <= index <= len(DEPLOYMENT_STEPS):
        raise ConfigError(f"the deployment saga has steps T1..T{len(DEPLOYMENT_STEPS)}, not T{index}")
    if len(outputs) < index - 1:
        raise ConfigError(f"T{index} needs the outputs of T1..T{index - 1}; {len(outputs)} are known")
    if index == 1:
        return {"image": "deploy-base", "vcpus": 2}
    if index == 2:
        return {"region": "eu-west-1"}
    sandbox, ip = outputs[0]["sandbox_id"], outputs[1]["ip_id"]
    if index == 3:
        return {"sandbox_id": sandbox, "target": "api"}
    if index == 4:
        return {"sandbox_id": sandbox, "ip_id": ip, "ports": [443]}
    return {"name": domain, "ip_id": ip}


class IncidentChannel:
    """An out-of-band channel for incident records: one JSON object per line in ``path``, written
    with flush and fsync (another process can tail it). ``emit`` is the runner's ``on_incident``."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def emit(self, incident: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(incident, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def read(self) -> list[dict[str, Any]]:
        """Every incident emitted so far, oldest first ([] when none)."""
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ------------------------------------------------------------------------------------------------
# the services' real state, as rows (read through the fleet facade)
# ------------------------------------------------------------------------------------------------


def resource_rows(fleet: Any, saga_id: str | None = None, *, live_only: bool = False) -> list[dict[str, Any]]:
    """What the services hold (``live_only=False``: released ones too): ``service``, ``resource``,
    ``kind``, ``state``, ``created by`` (the step, e.g. ``T2``). ``saga_id``: only that saga's."""
    rows = []
    for service, held in fleet.resources(live_only=live_only).items():
        for rid, r in held.items():
            op = str(r.get("operation_id", ""))
            if saga_id is not None and not op.startswith(saga_id + "."):
                continue
            rows.append({"service": service, "resource": rid, "kind": r.get("kind"), "state": r.get("state"),
                         "created by": step_label(op, saga_id) if saga_id else op})
    return rows


def invariant_rows(invariants: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Φ per service and invariant (definition 0.2): ``service``, ``invariant``, ``value``."""
    return [{"service": s, "invariant": k, "value": v} for s, phi in invariants.items() for k, v in phi.items()]


def invariant_delta(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Φ's change between two ``fleet.invariants()`` readings, one row per invariant that changed:
    ``service``, ``invariant``, ``before``, ``now``, ``change`` (``now - before`` for numbers, else
    ``"changed"``). An empty list means Φ is where it was at the first reading (back to baseline)."""
    rows = []
    for s, phi in after.items():
        old = before.get(s, {})
        for k, v in phi.items():
            b = old.get(k, 0)
            if v == b:
                continue
            numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (v, b))
            rows.append({"service": s, "invariant": k, "before": b, "now": v,
                         "change": v - b if numeric else "changed"})
    return rows


#: The header of the count the services keep of requests they turned away at the lease check (401:
#: a revoked, expired or unknown capability lease) before looking at them. Only those: a request
#: answered with an error of the service's own (the 409 of a taken name, an injected 409 or 503) is
#: received and not applied, and not counted here.
LEASE_REFUSED = "lease refused (401)"


def count_rows(counts: dict[str, dict[str, dict[str, int]]]) -> list[dict[str, Any]]:
    """The services' own request counts, one row per action that received anything:
    ``service``, ``action``, ``received`` (every request that reached the service), ``applied``
    (its effect was carried out), and :data:`LEASE_REFUSED` (turned away at the lease check, 401;
    a request refused for any other reason shows as received and not applied)."""
    rows = []
    for service, c in counts.items():
        actions = sorted(set(c.get("received", {})) | set(c.get("applied", {})) | set(c.get("refused", {})))
        for a in actions:
            rows.append({"service": service, "action": a, "received": c.get("received", {}).get(a, 0),
                         "applied": c.get("applied", {}).get(a, 0), LEASE_REFUSED: c.get("refused", {}).get(a, 0)})
    return rows


def state_rows(fleet: Any) -> list[dict[str, Any]]:
    """One row per service of what S looks like from outside: ``service``, ``live resources``,
    ``resources ever created`` (ids handed out, released ones included), ``audit entries``, and
    ``Φ`` (its invariants as ``name=value`` text). S'_0 ≠ S_0 shows in the middle columns, semantic
    equivalence in the last."""
    everything, live, audits, phi = (fleet.resources(live_only=False), fleet.resources(live_only=True),
                                     fleet.audits(), fleet.invariants())
    return [{"service": s, "live resources": len(live.get(s, {})), "resources ever created": len(everything.get(s, {})),
             "audit entries": len(audits.get(s, [])),
             "Φ": ", ".join(f"{k}={v}" for k, v in phi.get(s, {}).items())} for s in fleet.services]


def count_delta(before: dict[str, dict[str, dict[str, int]]],
                after: dict[str, dict[str, dict[str, int]]]) -> list[dict[str, Any]]:
    """:func:`count_rows` of what changed between two ``fleet.counts()`` readings (rows whose
    counts all stayed the same are left out)."""
    old = {(r["service"], r["action"]): r for r in count_rows(before)}
    rows = []
    for r in count_rows(after):
        o = old.get((r["service"], r["action"]), {})
        d = {k: r[k] - o.get(k, 0) for k in ("received", "applied", LEASE_REFUSED)}
        if any(d.values()):
            rows.append({"service": r["service"], "action": r["action"], **d})
    return rows


#: What each count of the services' verdict (:meth:`SagaDemo.judge`) means, in a reader's words.
VERDICT_LABELS = {
    "effects_committed": "forward effects the services applied",
    "compensations_applied": "compensations the services applied",
    "compensators_repeated": "compensations applied more than once",
    "forward_repeated": "forward effects applied more than once",
    "effects_left_unlisted": "resources still live and listed nowhere (not in a PANIC record)",
}


def verdict_rows(verdict: dict[str, Any], keys: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """The services' verdict on a saga as ``{"the services' records show", "count"}`` rows, one per
    count in ``keys`` (default: every count of :data:`VERDICT_LABELS`, in that order)."""
    return [{"the services' records show": VERDICT_LABELS[k], "count": verdict[k]}
            for k in (keys if keys is not None else VERDICT_LABELS)]


def answer_text(answer: dict[str, Any]) -> str:
    """A service's answer as a sentence: ``401 failed: lease_revoked (capability lease refused: revoked)``."""
    head = " ".join(str(answer[k]) for k in ("http_status", "status") if answer.get(k) is not None)
    why = answer.get("reason") or ""
    err = answer.get("error") or ""
    tail = f"{why} ({err})" if why and err else (why or err)
    return f"{head}: {tail}" if tail else head


def _resource_text(r: dict[str, Any], saga_id: str) -> str:
    made_by = step_label(str(r.get("operation_id", "")), saga_id)
    return f"{r.get('resource_id')} ({r.get('kind')}, {r.get('state')}, made by {made_by})"


def incident_rows(incident: dict[str, Any], saga_id: str,
                  fields: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """An incident record as ``{field, value}`` rows of readable text (``fields``: these, in this
    order; default every field): the error as its message, its reason and whether a retry could
    help; each residue resource with its kind, state and the step that made it; the incomplete
    operations as the saga's step labels (T2, C3); other lists joined with commas."""
    err = incident.get("error")
    if isinstance(err, dict):
        err_text = (f"{err.get('error')} (reason {err.get('reason')}, "
                    f"{'retryable' if err.get('retryable') else 'final: no retry can change it'})")
    else:
        err_text = str(err or "")
    out = []
    for field in (fields if fields is not None else incident):
        value = incident.get(field)
        if field == "error":
            value = err_text
        elif field == "residue":
            value = "; ".join(_resource_text(r, saga_id) for r in value or []) or "none"
        elif field == "incomplete_steps":
            value = ", ".join(step_label(str(o), saga_id) for o in value or []) or "none"
        elif isinstance(value, (list, tuple)):
            value = ", ".join(str(v) for v in value) or "none"
        out.append({"field": field, "value": value if isinstance(value, (str, int)) else str(value)})
    return out


def saga_effects(audits: dict[str, list[dict[str, Any]]], saga_id: str) -> dict[str, int]:
    """``{action: n}``: how many times each action was applied for ``saga_id``'s operations, from
    the services' audit trails (refused requests are not counted)."""
    out: dict[str, int] = {}
    for trail in audits.values():
        for a in trail:
            if str(a.get("operation_id", "")).startswith(saga_id + ".") and not a.get("refused"):
                out[a["action"]] = out.get(a["action"], 0) + 1
    return out


# ------------------------------------------------------------------------------------------------
# the two-phase-commit fallacy
# ------------------------------------------------------------------------------------------------


def _raw_intent(trajectory_id: str, operation_id: str, tool: str, arguments: dict[str, Any]) -> ToolIntent:
    return ToolIntent(operation_id=operation_id, attempt_id="a1", tool=tool, arguments=arguments,
                      repeat_contract="idempotency_key", grant_id=GRANT_ID, authorization_ref="2pc-demo",
                      reservation_ref="2pc-demo", idempotency_key=idempotency_key(trajectory_id, operation_id))


def attempt_prepare(fleet: Any, trajectory_id: str, *, prefix: str = "prepare",
                    domain: str = TAKEN_DOMAIN) -> list[dict[str, Any]]:
    """Try phase one of a two-phase commit across the deployment's services.

    For each forward step: ask the fleet for a ``prepare_<tool>`` action (no service declares
    one: the fleet refuses to route it), then send the step's own action with
    ``{"phase": "prepare"}`` added, the only request the service accepts. The service treats it as
    the normal call it is and applies it. Returns one row per step: ``step``, ``prepare verb``
    (the fleet's refusal), ``sent as`` (the call), ``service answered`` (HTTP status, or the
    transport error), ``resource`` (what now exists). Operation ids are ``<prefix>.T<i>``.
    """
    client = fleet.client(trajectory_id)
    rows = []
    outputs: list[dict[str, Any]] = []
    for i, tool in enumerate(DEPLOYMENT_STEPS, start=1):
        op = f"{prefix}.T{i}"
        try:
            client.send(_raw_intent(trajectory_id, op + ".prepare", f"prepare_{tool}", {}))
            verb = "accepted (unexpected)"
        except (KernelError, OSError) as exc:
            verb = f"refused: {exc}"
        try:
            args = {**deployment_arguments(i, outputs, domain), "phase": "prepare"}
        except (ConfigError, KeyError):
            args = {"phase": "prepare"}
        try:
            reply = client.send(_raw_intent(trajectory_id, op, tool, args))
            outcome = dict(reply.outcome or {})
            answered = f"{outcome.get('http_status')} {reply.status}"
            made = next((v for k, v in outcome.items() if k.endswith("_id") and isinstance(v, str)), "")
        except (KernelError, OSError) as exc:
            answered, made, outcome = f"no answer: {exc}", "", {}
        outputs.append({k: v for k, v in outcome.items() if k.endswith("_id")})
        rows.append({"step": f"T{i}", "prepare verb": verb, "sent as": f"{tool}(..., phase=prepare)",
                     "service answered": answered, "resource": made})
    return rows


def undo_by_hand(fleet: Any, trajectory_id: str, *, prefix: str = "prepare") -> list[dict[str, Any]]:
    """Release, by the services' own releasing actions, every live resource ``attempt_prepare``
    left (there is no abort verb either). Returns ``{resource, sent, service answered}`` rows."""
    client = fleet.client(trajectory_id)
    releasers = {a.releases: a for a in ACTIONS.values() if a.releases}
    rows = []
    for held in fleet.resources(live_only=True).values():
        for rid, r in held.items():
            op = str(r.get("operation_id", ""))
            rel = releasers.get(r.get("kind"))
            if not op.startswith(prefix + ".") or rel is None:
                continue
            reply = client.send(_raw_intent(trajectory_id, op + ".undo", rel.name, {rel.id_argument: rid}))
            rows.append({"resource": rid, "sent": f"{rel.name}({rel.id_argument}={rid})",
                         "service answered": f"{(reply.outcome or {}).get('http_status')} {reply.status}"})
    return rows


# ------------------------------------------------------------------------------------------------
# the stepper
# ------------------------------------------------------------------------------------------------


class SagaDemo:
    """The deployment saga over ``fleet``, one action at a time (see the module docstring).

    Args:
        fleet: a fleet with the facade of :class:`~kernel_lib.sim.services.TwinFleet`.
        saga_id: the saga's id; one per fleet (the services key status lookups by operation id,
            ``<saga_id>.T<i>``), so a second demo on the same fleet takes another.
        trajectory_id: the trajectory's id (default ``traj-<saga_id>``).
        store_dir: a folder (made if missing) for the trajectory log as a real SQLite file
            (``log.sqlite``, every barrier an fsync); None keeps the log in memory.
        domain: the name T5 publishes; the default is marked taken at the DNS service, so T5
            gets the chapter's 409 (``mark_taken=False`` leaves the fleet as it is).
        on_incident: the out-of-band channel the freeze emits on (e.g. :meth:`IncidentChannel.emit`).
        retry, sleep: the runner's backoff and how it waits.

    Raises:
        ConfigError: ``saga_id`` was already used on this fleet.
    """

    def __init__(self, fleet: Any, *, saga_id: str = "deploy", trajectory_id: str | None = None,
                 store_dir: str | os.PathLike | None = None, domain: str = TAKEN_DOMAIN, mark_taken: bool = True,
                 on_incident: Callable[[dict[str, Any]], Any] | None = None, retry: RetryPolicy = DEMO_RETRY,
                 sleep: Callable[[float], Any] = time.sleep):
        if not isinstance(saga_id, str) or not saga_id or "." in saga_id:
            raise ConfigError(f"saga_id must be a non-empty name without dots, got {saga_id!r}")
        if resource_rows(fleet, saga_id):
            raise ConfigError(f"saga id {saga_id!r} was already used on this fleet (its services hold its "
                              "resources and answer its status lookups); choose another")
        self.fleet = fleet
        self.saga_id = saga_id
        self.trajectory_id = trajectory_id or f"traj-{saga_id}"
        self.domain = domain
        self.store_path = Path(store_dir) / "log.sqlite" if store_dir is not None else None
        self.retry, self.sleep = retry, sleep
        self._emit = on_incident or (lambda incident: None)
        if self.store_path is not None:
            self.store_path.parent.mkdir(parents=True, exist_ok=True)
        self.registry = deployment_registry()
        if mark_taken and domain == TAKEN_DOMAIN:
            fleet.taken_name(domain)
        self._store = open_store("sqlite", self.store_path, create=True) if self.store_path else MemoryStore()
        self._crash_plan: dict[str, Any] | None = None
        self._counts_0 = fleet.counts()     # the services' counts when this saga began (its view shows the change)
        self._phi_0 = fleet.invariants()    # Φ when this saga began (likewise: other sagas' leftovers are not its own)
        self.outputs: list[dict[str, Any]] = []
        self.runner: SagaRunner | None = self._new_runner()
        self.last: dict[str, Any] = {}

    # --- handles -----------------------------------------------------------------------------------
    def _new_runner(self) -> SagaRunner:
        domain = FailureDomain.HOST_CRASH if self.store_path else FailureDomain.NONE
        log = TrajectoryLog(self._store, self.trajectory_id, must_survive=domain)
        gate = DispatchGate(log, AdmissionPolicy({GRANT_ID: set(self.registry.names())}), coalesce_admission=True,
                            on_position=self._position)
        if gate.record.task is None:
            gate.start(TaskStarted(task_id=self.trajectory_id, requester="fr1-notebook", objective="deploy the api",
                                   grant_ids=[GRANT_ID], budget_ceiling_usd=100.0))
        return SagaRunner(gate, self.registry, self.fleet.client(self.trajectory_id), saga_id=self.saga_id,
                          grant_id=GRANT_ID, retry=self.retry, sleep=self.sleep, on_incident=self._emit)

    def _position(self, name: str, ev: Any) -> None:
        plan = self._crash_plan
        if plan is None:
            return
        if name == "after:ToolIntent":
            plan["last"] = ev.payload.operation_id
        elif name == "after:dispatch" and str(plan.get("last") or "").endswith(".C"):
            plan["seen"] += 1
            if plan["seen"] == plan["k"]:
                self._crash_plan = None
                raise DemoCrash(plan["last"])

    def _live(self) -> SagaRunner:
        if self.runner is None:
            raise ConfigError("the runner was abandoned at a crash; recover first (a new runner over the same log)")
        return self.runner

    def events(self) -> list[Any]:
        """The trajectory log as stored (read from the store, not from any runner's memory)."""
        return list(self._store.read(self.trajectory_id))

    def saga(self) -> SagaRecord:
        """The saga folded from the stored log."""
        return fold_saga(self.events(), self.saga_id)

    def close(self) -> None:
        """Close the log store (the fleet is the caller's)."""
        self.runner = None
        self._store.close()

    # --- which steps have run (folded from the stored log) -------------------------------------------
    def _ran(self) -> tuple[SagaRecord, set[int], set[int]]:
        """The saga, the forward steps that were sent (any state but PENDING) and the compensators
        that were sent (an intent for C_i is in the log, or its step ended COMPENSATED or PANIC)."""
        events = self.events()
        saga = fold_saga(events, self.saga_id)
        forward = {s.index for s in saga.steps.values() if s.state != "PENDING"}
        forward |= set(range(1, self.next_step()))
        comp_ops = {compensation_operation_id(step_operation_id(self.saga_id, i)): i
                    for i in range(1, len(DEPLOYMENT_STEPS) + 1)}
        sent = {comp_ops[e.payload.operation_id] for e in events
                if isinstance(e.payload, ToolIntent) and e.payload.operation_id in comp_ops}
        sent |= {s.index for s in saga.steps.values() if s.state in ("COMPENSATED", "PANIC", "MANUAL_ESCALATION")}
        return saga, forward, sent

    def first_not_run(self) -> str | None:
        """The first step of this saga that has not run yet, in the order the script and the
        unwind would run it (``"T3 (compile_binary)"``, ``"C4 (unbind_firewall)"``), folded from the
        stored log; None when nothing is left to run (every step ran, or the trajectory is frozen)."""
        saga, forward, sent = self._ran()
        return self._first_not_run(saga, forward, sent)

    def _first_not_run(self, saga: SagaRecord, forward: set[int], sent: set[int]) -> str | None:
        if saga.frozen is not None:
            return None
        k = max(forward, default=0) + 1
        if self._going_forward(saga) is None and k <= len(DEPLOYMENT_STEPS):
            return f"T{k} ({DEPLOYMENT_STEPS[k - 1]})"
        top = next((s for s in saga.stack if s.index not in sent), None)     # Σ, top first
        return f"C{top.index} ({top.compensator['tool']})" if top is not None else None

    @staticmethod
    def _going_forward(saga: SagaRecord) -> str | None:
        """None while forward steps may still run; else why none will."""
        stopped = next((s for s in sorted(saga.steps.values(), key=lambda s: s.index)
                        if s.state in ("FAILED", "ABORTED", "HALTED")), None)
        if saga.frozen is not None:
            return "the trajectory is frozen"
        if stopped is not None:
            return f"no forward step runs after T{stopped.index} {stopped.state}"
        if saga.state not in (None, "RUNNING", "COMMITTED"):
            return f"the saga is {saga.state}"
        return None

    def _refuse_fault(self, target: str, step: int, action: str) -> None:
        """Raise ConfigError when a fault on T_step (``target="forward"``) or C_step would never be
        seen: that step already ran, or it never will. The message names the first step that has not run."""
        saga, forward, sent = self._ran()
        label = f"{'T' if target == 'forward' else 'C'}{step} ({action})"
        first = self._first_not_run(saga, forward, sent)
        nxt = (f"the first step that has not run is {first}" if first is not None else
               "nothing is left to run" + (" (the trajectory is frozen)" if saga.frozen is not None else ""))
        if step in (forward if target == "forward" else sent):
            raise ConfigError(f"{label} already ran: a fault on it would never be seen; {nxt}")
        stopped = self._going_forward(saga)
        if target == "forward":
            why = stopped
        elif saga.frozen is not None:
            why = "the trajectory is frozen"
        elif stopped is not None and step not in {s.index for s in saga.stack}:
            why = f"T{step} left nothing on Σ to compensate and {stopped}"
        else:
            why = None
        if why is not None:
            raise ConfigError(f"{label} will never run ({why}): a fault on it would never be seen; {nxt}")

    # --- actions -----------------------------------------------------------------------------------
    def next_step(self) -> int:
        """The index of the next forward step the script would run."""
        return len(self.outputs) + 1

    def step(self) -> dict[str, Any]:
        """Run the next forward step. Returns ``{action, step, tool, state, output | error}``.

        Raises:
            ConfigError: every step already ran, a step failed (unwind now), the saga is unwinding
                or ended, or the runner was abandoned at a crash.
            TrajectoryFrozenRefusal: the trajectory is frozen.
        """
        runner = self._live()
        saga = runner.saga
        k = self.next_step()
        failed = [s for s in saga.steps.values() if s.state in ("FAILED", "ABORTED", "HALTED")]
        if saga.frozen is None:
            if failed:
                raise ConfigError(f"T{failed[0].index} ({failed[0].tool}) is {failed[0].state}: no forward step runs "
                                  "after it; unwind")
            if saga.state not in (None, "RUNNING", "COMMITTED"):
                raise ConfigError(f"the saga is {saga.state}: no forward step runs")
            if k > len(DEPLOYMENT_STEPS):
                raise ConfigError(f"all {len(DEPLOYMENT_STEPS)} steps committed; the saga is complete")
        tool = DEPLOYMENT_STEPS[k - 1]
        args = deployment_arguments(k, self.outputs, self.domain)
        try:
            out = runner.step(tool, args)
        except StepFailedError as exc:
            reason = runner.saga.steps[exc.step_id].reason if exc.step_id in runner.saga.steps else str(exc)
            self.last = {"action": "step", "step": f"T{k}", "tool": tool, "state": "FAILED", "error": reason}
            return self.last
        self.outputs.append(out)
        if k == len(DEPLOYMENT_STEPS):
            runner.complete()
        self.last = {"action": "step", "step": f"T{k}", "tool": tool, "state": "COMMITTED", "output": out}
        return self.last

    def inject(self, kind: str, step: int, *, target: str = "forward", count: int = 1,
               **params: Any) -> dict[str, Any]:
        """Queue fault ``kind`` for the next ``count`` calls of T_step (``target="forward"``) or of its
        compensator C_step (``target="compensator"``). Returns ``{action, fault, on, count}``.

        A fault is refused on a step that has already run, since no later call would meet it: a
        forward step that was sent (whatever its answer, FAILED included), any forward step once
        the saga stopped going forward (a step failed, the unwind began, the trajectory is frozen),
        and a compensator that was sent. The message names the first step that has not run.

        Raises:
            ConfigError: an unknown kind or target, a step outside 1..5, a step that already ran
                (see above), a step without a compensator.
            ServiceError: the fleet refused the specification.
        """
        if kind not in FAULT_KINDS:
            raise ConfigError(f"unknown fault {kind!r}: choose one of {', '.join(FAULT_KINDS)}")
        if target not in ("forward", "compensator"):
            raise ConfigError(f"target must be 'forward' or 'compensator', got {target!r}")
        if isinstance(step, bool) or not isinstance(step, int) or not 1 <= step <= len(DEPLOYMENT_STEPS):
            raise ConfigError(f"step must be an integer 1..{len(DEPLOYMENT_STEPS)}, got {step!r}")
        tool = DEPLOYMENT_STEPS[step - 1]
        if target == "forward":
            self._refuse_fault(target, step, tool)
            action = tool
        else:
            comp = self.registry.contract(tool).compensator
            action = comp.tool if comp is not None else ""
            if not action:
                raise ConfigError(f"T{step} ({tool}) has no compensator")
            self._refuse_fault(target, step, action)
        spec = self.fleet.inject(action, kind, count, **params)
        label = f"T{step}" if target == "forward" else f"C{step}"
        self.last = {"action": "inject", "fault": kind, "on": f"{label} ({action})", "count": spec.get("count", count)}
        return self.last

    def _unwind(self, runner: SagaRunner) -> dict[str, Any]:
        try:
            state = runner.unwind("stepper: unwind")
        except SagaPanicError as exc:
            return {"state": "PANIC", "incident": exc.incident, "residue": exc.residue}
        return {"state": state}

    def unwind(self) -> dict[str, Any]:
        """Pop Σ until it is empty. Returns ``{action, state}`` (``ABORT_CONSISTENT``), or on a panic
        ``{action, state: "PANIC", incident, residue}`` (the trajectory is then frozen).

        Raises:
            ConfigError: the runner was abandoned at a crash (recover first).
            TrajectoryFrozenRefusal: the trajectory is frozen.
        """
        self.last = {"action": "unwind", **self._unwind(self._live())}
        return self.last

    def crash_during_unwind(self, after_compensators: int = 1) -> dict[str, Any]:
        """Unwind, and abandon the runner right after the ``after_compensators``-th compensator of this
        unwind was dispatched and answered, before its evidence is in the log. Returns
        ``{action, crashed_after, log_head, in_doubt}``, or the unwind's result when it ended first.

        Raises:
            ConfigError: ``after_compensators`` is not 1..len(Σ), or the runner is already abandoned.
            TrajectoryFrozenRefusal: the trajectory is frozen.
        """
        runner = self._live()
        depth = len(runner.saga.stack)
        if isinstance(after_compensators, bool) or not isinstance(after_compensators, int) or not (
                1 <= after_compensators <= max(depth, 1)):
            raise ConfigError(f"Σ holds {depth} compensator{'s' * (depth != 1)}; a crash after compensator "
                              f"{after_compensators!r} of this unwind cannot happen (choose 1..{max(depth, 1)})")
        if depth == 0:
            raise ConfigError("Σ is empty: nothing to unwind, so nothing to crash in")
        self._crash_plan = {"k": after_compensators, "seen": 0, "last": None}
        try:
            result = self._unwind(runner)
        except DemoCrash as crash:
            self.runner = None
            events = self.events()
            rec = fold(initial_record(self.trajectory_id), events)
            self.last = {"action": "crash_during_unwind", "crashed_after": f"{step_label(str(crash), self.saga_id)} "
                         "dispatched, before its answer was logged", "log_head": len(events),
                         "in_doubt": [step_label(o, self.saga_id) for o in rec.in_doubt()]}
            return self.last
        finally:
            self._crash_plan = None
        self.last = {"action": "crash_during_unwind", "crashed_after": None, **result}
        return self.last

    def recover(self) -> dict[str, Any]:
        """A new runner over the same log, as a new process would start: restart any crashed
        service, open the log again, replay the committed forward steps from it (nothing is sent
        for them; an in-doubt step is settled by its status lookup). Returns ``{action,
        restarted, state, replayed, stack, in_doubt}``; on a frozen trajectory ``{..., state:
        "FROZEN", refused}`` and nothing runs."""
        restarted = [s for s in self.fleet.services if self.fleet.is_down(s)]
        for s in restarted:
            self.fleet.restart(s)
        self.runner = None
        if self.store_path is not None:     # the old process's handle is gone; open the file again
            self._store.close()
            self._store = open_store("sqlite", self.store_path)
        runner = self._new_runner()
        self.runner = runner
        saga = runner.saga
        self.outputs = []
        replayed: list[str] = []
        result: dict[str, Any] = {"action": "recover", "restarted": restarted}
        try:
            if saga.frozen is not None:
                runner.unwind("recover")       # raises TrajectoryFrozenRefusal: it does nothing
            if saga.state in (None, "RUNNING", "COMMITTED"):
                for s in sorted(saga.steps.values(), key=lambda s: s.index):
                    if s.state not in ("COMMITTED", "EXECUTING", "PENDING"):
                        break
                    out = runner.step(s.tool, deployment_arguments(s.index, self.outputs, self.domain))
                    self.outputs.append(out)
                    replayed.append(f"T{s.index}")
        except TrajectoryFrozenRefusal as exc:
            result.update(state="FROZEN", refused=str(exc))
        except StepFailedError as exc:
            result.update(settled_failed=exc.step_id)
        saga = runner.saga
        rec = runner.gate.record
        result.setdefault("state", saga.state)
        result.update(replayed=replayed, stack=[r["compensator"] for r in stack_rows(saga)],
                      in_doubt=[step_label(o, self.saga_id) for o in rec.in_doubt()])
        self.last = result
        return result

    def probe_lease(self, tool: str = "reserve_ip", arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send one request straight to ``tool``'s service with the lease the current runner holds,
        past the dispatch gate (what a leftover background thread of a frozen agent would do).
        Returns ``{http_status, status, reason, error}`` as the service answered: after the
        freeze the service itself refuses the revoked lease (401, ``lease_revoked``)."""
        endpoints = self._live().endpoints
        op = f"{self.saga_id}.probe"
        reply = endpoints.send(_raw_intent(self.trajectory_id, op, tool, dict(arguments or {"region": "eu-west-1"})))
        out = dict(reply.outcome or {})
        return {"http_status": out.get("http_status"), "status": reply.status, "reason": out.get("reason"),
                "error": out.get("error")}

    # --- what to show ------------------------------------------------------------------------------
    def judge(self) -> dict[str, Any]:
        """The services' verdict on this saga (:func:`kernel_lib.sim.saga_sweep.account`):
        ``compensators_repeated``, ``effects_left_unlisted``, ``forward_repeated``, …"""
        return account(self.fleet.audits(), self.fleet.resources(live_only=False), self.events(), self.saga_id)

    def view(self) -> dict[str, Any]:
        """Everything a stepper shows, as JSON data: ``saga_state``, ``frozen`` (the incident or
        None), ``crashed``, ``next_step``, ``log_head``, ``forward`` (L_fwd rows), ``stack`` (Σ
        rows, top first), ``in_doubt`` (operations the log cannot settle), and from the services:
        ``resources`` (this saga's), ``invariants`` (Φ's change since this demo began, :func:`invariant_delta`:
        only what changed, so a clean unwind shows none, whatever other sagas left on the fleet),
        ``counts`` (per action, what changed since this demo began: other sagas on the fleet are
        counted by the same services), ``effects`` (this saga's applied actions, from the audit trails)."""
        events = self.events()
        saga = fold_saga(events, self.saga_id)
        rec = fold(initial_record(self.trajectory_id), events)
        return {"saga_state": saga.state or "(not started)", "frozen": saga.frozen, "crashed": self.runner is None,
                "next_step": self.next_step(), "log_head": len(events),
                "forward": forward_rows(saga), "stack": stack_rows(saga),
                "in_doubt": [step_label(o, self.saga_id) for o in rec.in_doubt()],
                "resources": resource_rows(self.fleet, self.saga_id),
                "invariants": invariant_delta(self._phi_0, self.fleet.invariants()),
                "counts": count_delta(self._counts_0, self.fleet.counts()),
                "effects": saga_effects(self.fleet.audits(), self.saga_id)}

    def step_operation(self, index: int) -> str:
        """The operation id of T_index (its compensator's is this + ``.C``)."""
        return step_operation_id(self.saga_id, index)
