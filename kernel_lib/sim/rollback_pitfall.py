"""The pitfall of assuming every effect can be rolled back, run on the twin services (Failure
Recovery, "Fallacies and Pitfalls": backward rollback is not universal; "Pivot Action
Irreversibility": the tripartite taxonomy, the pivot action boundary, the pre-pivot gate).

The work: an agent reserves an egress IP (T1), tells the customer by e-mail that their endpoint
``<domain>`` is live at that IP (T2, ``send_email``: the mail relay sends it at once), and
publishes the DNS record (T3). The e-mail's claim depends on T1 and T3; the agent proposed it
second anyway. T3 then meets the chapter's 409 (another account owns the domain).

* :func:`run_naive`: a runtime whose registry treats *everything* as compensable. ``send_email``
  is declared tier II with the only inverse a mail relay offers, another e-mail (a correction to
  the same customer). The saga unwinds "consistently" by its own account; the relay counts two
  messages delivered to the customer.
* :func:`run_pivot_ordered`: the project's real contracts (``send_email`` is tier III, C = ∅),
  the plan reordered by :func:`~kernel_lib.recovery.pivot.propose_order` (the e-mail moves after
  the DNS record it announces) and run by :func:`~kernel_lib.recovery.plan_run.run_plan` with a
  pre-pivot gate of deterministic checks read from the services (the record published for this
  IP, the IP active, nothing sent yet). The 409 comes before the pivot: the saga unwinds (the IP
  released) and zero messages leave. With a free domain the same plan completes and exactly one
  message leaves.

Every count is read from the services (the mail relay's resources and audit), never from our log.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate
from kernel_lib.log import MemoryStore, TrajectoryLog
from kernel_lib.recovery.contracts import Compensator, ToolContract, ToolRegistry
from kernel_lib.recovery.pivot import Plan, PlanStep, check_plan, propose_order
from kernel_lib.recovery.plan_run import StepBinding, run_plan
from kernel_lib.recovery.runner import RetryPolicy, SagaRunner
from kernel_lib.recovery.verification import StateCheck, run_gate
from kernel_lib.sim.deployment import TAKEN_DOMAIN, deployment_registry
from kernel_lib.sim.saga_sweep import GRANT_ID, start_task
from kernel_lib.sim.services import TwinFleet, deployment_contracts

__all__ = ["CUSTOMER", "FREE_DOMAIN", "CORRECTION_SUBJECT", "announcement_plan", "naive_registry",
           "RollbackOutcome", "run_naive", "run_pivot_ordered", "run_rollback_pitfall", "mail_to"]

#: The customer the e-mails go to.
CUSTOMER = "customer@example.test"
#: A domain nobody else owns (the happy path).
FREE_DOMAIN = "api.customer-7.example.test"
#: The subject of the naive runtime's "compensating" e-mail.
CORRECTION_SUBJECT = "Correction: please disregard our previous message"


def announcement_plan() -> Plan:
    """The work as the agent proposed it: T1 reserve_ip (II), T2 send_email (III: its text names
    the IP and the domain, so it depends on T1 and T3), T3 publish_dns (II, needs the IP). The
    proposed order runs T2 before a step it depends on; :func:`check_plan` refuses it."""
    return Plan((
        PlanStep("T1", "II", "idempotency_key", (), tool="reserve_ip", description="reserve a public egress IP"),
        PlanStep("T2", "III", "idempotency_key", ("T1", "T3"), tool="send_email",
                 description="tell the customer their endpoint is live at the IP and the domain"),
        PlanStep("T3", "II", "idempotency_key", ("T1",), tool="publish_dns",
                 description="publish the DNS record of the domain for the IP"),
    ), "announce the endpoint")


def naive_registry() -> ToolRegistry:
    """The project's contracts, except that ``send_email`` is declared compensable (tier II) with
    a correction e-mail to the same recipient as its compensator: "every action has an inverse"."""
    reg = ToolRegistry()
    for c in deployment_contracts():
        if c.name == "send_email":
            c = ToolContract("send_email", "II", "idempotency_key", True,
                             Compensator("send_email", {"to": "arguments.to"},
                                         {"subject": CORRECTION_SUBJECT,
                                          "body": "The endpoint we announced is not live. We are sorry for the "
                                                  "confusion."}),
                             description="send an e-mail (declared compensable: the naive assumption)")
        reg.register(c)
    return reg.check()


def _bindings(domain: str) -> dict[str, StepBinding]:
    return {
        "T1": StepBinding("reserve_ip", {"region": "eu-west-1"}),
        "T2": StepBinding("send_email", lambda o: {"to": CUSTOMER, "subject": "Your endpoint is live",
                                                  "body": f"{domain} now answers at {o['T1']['ip_id']}."}),
        "T3": StepBinding("publish_dns", lambda o: {"name": domain, "ip_id": o["T1"]["ip_id"]}),
    }


def mail_to(fleet: Any, recipient: str = CUSTOMER, saga_id: str | None = None) -> list[dict[str, Any]]:
    """Every message the mail relay ever created for ``recipient`` (of ``saga_id``'s operations
    when given), in creation order: ``{message_id, subject, operation_id}`` (read from the relay)."""
    out = []
    for rid, r in fleet.resources(live_only=False)["email"].items():
        args = r.get("arguments") or {}
        if args.get("to") != recipient:
            continue
        if saga_id is not None and not str(r.get("operation_id", "")).startswith(saga_id + "."):
            continue
        out.append({"message_id": rid, "subject": args.get("subject"), "operation_id": r.get("operation_id")})
    return sorted(out, key=lambda m: m["message_id"])


@dataclass
class RollbackOutcome:
    """One run, as the services saw it: ``runtime`` (``naive`` or ``pivot-ordered``), ``order`` (the
    plan step ids in the order run), ``saga_state`` (what the saga says of itself), ``failed_step``,
    ``messages`` (:func:`mail_to`), ``messages_delivered`` (their number, counted by the relay),
    ``relay_applied`` (``send_email`` effects the relay applied for this saga, from its audit),
    ``live_resources`` (this saga's resources still held), ``gate`` (the pre-pivot verdict's
    checks, when a gate ran), ``plan_check`` (the checker's reasons on the proposed order)."""

    runtime: str
    order: list[str]
    saga_state: str
    failed_step: str | None
    messages: list[dict[str, Any]]
    messages_delivered: int
    relay_applied: int
    live_resources: list[dict[str, Any]]
    gate: list[dict[str, Any]] = field(default_factory=list)
    plan_check: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _runner(fleet: TwinFleet, registry: ToolRegistry, saga_id: str, *, verify: bool) -> SagaRunner:
    traj = f"traj-{saga_id}"
    gate = DispatchGate(TrajectoryLog(MemoryStore(), traj, must_survive="none"),
                        AdmissionPolicy({GRANT_ID: set(registry.names())}), coalesce_admission=True)
    start_task(gate, traj)
    return SagaRunner(gate, registry, fleet.client(traj), saga_id=saga_id, grant_id=GRANT_ID,
                      retry=RetryPolicy(max_attempts=3, base_s=0.01, cap_s=0.05), sleep=fleet.clock.advance,
                      require_verification=verify)


def _outcome(fleet: TwinFleet, runtime: str, saga_id: str, order: list[str], state: str, failed: str | None,
             **extra: Any) -> RollbackOutcome:
    msgs = mail_to(fleet, CUSTOMER, saga_id)
    applied = sum(1 for a in fleet.audits()["email"] if a["action"] == "send_email"
                  and str(a.get("operation_id", "")).startswith(saga_id + ".") and not a.get("refused"))
    live = [r for r in fleet.live_resources() if str(r["operation_id"]).startswith(saga_id + ".")]
    return RollbackOutcome(runtime, order, state, failed, msgs, len(msgs), applied, live, **extra)


def run_naive(fleet: TwinFleet, *, domain: str = TAKEN_DOMAIN, saga_id: str = "naive") -> RollbackOutcome:
    """The agent's order under the naive registry: step T1, T2, T3; on a failed step, unwind
    everything (:meth:`~kernel_lib.recovery.runner.SagaRunner.unwind`), the e-mail's "compensator"
    included. Returns the :class:`RollbackOutcome` read from the services."""
    from kernel_lib.errors import StepFailedError

    runner = _runner(fleet, naive_registry(), saga_id, verify=False)
    bindings = _bindings(domain)
    outputs: dict[str, Any] = {}
    order = list(announcement_plan().ids)
    failed = None
    try:
        for sid in order:
            b = bindings[sid]
            outputs[sid] = runner.step(b.tool, b.arguments_for(outputs))
        runner.complete()
        state = "COMPLETED"
    except StepFailedError as exc:
        failed = next(s for s in order if s not in outputs)
        state = runner.unwind(f"step failed: {exc}")
    return _outcome(fleet, "naive: every effect compensable", saga_id, order, state, failed)


def _gate(fleet: TwinFleet, saga_id: str, domain: str) -> Any:
    def gate(outputs: dict[str, Any]) -> Any:
        ip = (outputs.get("T1") or {}).get("ip_id")
        prefix = saga_id + "."
        checks = [
            StateCheck("ip_active_at_egress_service",
                       lambda: (fleet.resources()["egress_ip"].get(ip) or {}).get("state"),
                       lambda s: s == "active", f"{ip} is active"),
            StateCheck("dns_record_points_to_the_ip",
                       lambda: sorted((r["arguments"].get("name"), r["arguments"].get("ip_id"))
                                      for r in fleet.resources()["dns"].values()
                                      if str(r.get("operation_id", "")).startswith(prefix)),
                       lambda recs: [domain, ip] in [list(x) for x in recs], f"a live record {domain} -> {ip}"),
            StateCheck("nothing_sent_to_the_customer_yet", lambda: mail_to(fleet, CUSTOMER, saga_id),
                       lambda msgs: msgs == [], "the relay holds no message of this saga"),
        ]
        return run_gate(checks)
    return gate


def run_pivot_ordered(fleet: TwinFleet, *, domain: str = TAKEN_DOMAIN, saga_id: str = "ordered") -> RollbackOutcome:
    """The project's contracts, :func:`propose_order`'s order and the pre-pivot gate (module
    docstring), run by :func:`run_plan`. Returns the :class:`RollbackOutcome` read from the services."""
    plan = announcement_plan()
    proposal = propose_order(plan)
    runner = _runner(fleet, deployment_registry(), saga_id, verify=True)
    gate = _gate(fleet, saga_id, domain)
    verdicts: list[Any] = []

    def recording_gate(outputs: dict[str, Any]) -> Any:
        v = gate(outputs)
        verdicts.append(v)
        return v

    run = run_plan(proposal.plan, _bindings(domain), runner, gate=recording_gate)
    checks = [{"check": c.name, "passed": c.passed} for v in verdicts for c in v.checks]
    return _outcome(fleet, "pivot-ordered: tiers, propose_order, gate", saga_id, list(proposal.order), run.state,
                    run.failed_step, gate=checks, plan_check=[str(r) for r in check_plan(plan).reasons])


def run_rollback_pitfall() -> dict[str, RollbackOutcome]:
    """The three runs on fresh twin fleets (the domain taken where the chapter's 409 is wanted):
    ``{"naive": ..., "ordered": ..., "ordered_free_domain": ...}``."""
    out = {}
    for key, fn, domain in (("naive", run_naive, TAKEN_DOMAIN), ("ordered", run_pivot_ordered, TAKEN_DOMAIN),
                            ("ordered_free_domain", run_pivot_ordered, FREE_DOMAIN)):
        fleet = TwinFleet()
        fleet.taken_name(TAKEN_DOMAIN)
        out[key] = fn(fleet, domain=domain)
    return out
