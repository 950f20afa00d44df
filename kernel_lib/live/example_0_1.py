"""Example 0.1, the dual-commit trap and its remedy, run against the live tool services.

Failure Recovery, Example 0.1 and Systems Perspective 0.1. The chapter's five steps are mapped
onto the processes of :class:`~kernel_lib.live.services.LiveFleet`:

* T1, provision the GPU instances (II) → ``provision_sandbox`` (the sandbox/microVM service; C1 is
  ``teardown_sandbox``). The request carries ``image_sha256``, the digest of the serving bundle,
  which the sandbox service keeps in its record of the instance;
* T2, warm and validate (I, internal compute) → a local step: the bundle is unpacked into the
  instance's working directory and its tests are run there (a real ``pytest`` subprocess), and
  the bundle's digest is compared with the sandbox service's record;
* T3, BGP anycast activation (III, the pivot) → ``activate_route`` (public routing: no
  compensator exists);
* T4, the catalog migration (II) → ``create_branch`` (the git service; C4 is ``delete_branch``).
  The migration is written onto a branch of the catalog repository: the chapter's "provisional
  escrow mode" for a database is a version of the catalog that exists beside the live one until
  it is merged, and deleting the branch is its compensation (the build service would fit less
  well: a build is an artifact, not a change of shared state). Its failure (the chapter's schema
  deadlock) is an injected ``conflict`` (409) at the git service;
* T5, the signed compliance webhook (III, stageable) → ``send_email`` (the mail relay: once sent,
  it is out).

Before the pivot the pre-pivot gate (:mod:`kernel_lib.recovery.verification`) runs: the tests in
the instance's directory, the bundle digest against the sandbox service's record, the instance
active at the sandbox service, no public route yet at the routing service, and in the remedy the
catalog branch present at the git service and the webhook staged in escrow and not sent. The
model stand-in's claim of success is recorded with the verdict, with weight 0.

:func:`run_trap` runs the chapter's order (the plan the checker refuses, run with
``enforce=False``): with the migration failing after the pivot, the unwind is refused and the
trajectory escalated — the public route stays and the webhook never goes, as the services' own
records show. :func:`run_remedy` runs :func:`~kernel_lib.recovery.pivot.propose_order`'s order:
the migration's failure unwinds cleanly (instance torn down, no route, no e-mail); without the
fault the webhook leaves with the pivot through the atomic outbox, exactly once at the mail relay.
:func:`run_example_0_1` runs both on one fleet and returns them as data for a notebook.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kernel_lib.errors import ConfigError
from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate
from kernel_lib.log import MemoryStore, TrajectoryLog
from kernel_lib.recovery.pivot import check_plan, example_0_1, propose_order
from kernel_lib.recovery.plan_run import PlanRun, StepBinding, run_plan
from kernel_lib.recovery.runner import RetryPolicy, SagaRunner
from kernel_lib.recovery.saga import fold_saga
from kernel_lib.recovery.verification import (
    DigestCheck, ModelClaim, StateCheck, TestRunCheck, file_sha256, run_gate,
)
from kernel_lib.sim.deployment import deployment_registry
from kernel_lib.sim.saga_sweep import GRANT_ID, start_task

__all__ = ["STEP_TOOLS", "SERVICES_SHOWN", "MODEL_CLAIM", "write_bundle", "Example01", "run_trap", "run_remedy",
           "run_example_0_1"]

#: Example 0.1's steps on the live services (None: a local step).
STEP_TOOLS = {"T1": "provision_sandbox", "T2": None, "T3": "activate_route", "T4": "create_branch",
              "T5": "send_email"}
#: The services whose records an outcome shows.
SERVICES_SHOWN = ("sandbox", "routing", "git", "email")
#: What the model stand-in says before the pivot, whatever the checks find.
MODEL_CLAIM = ModelClaim("Pre-flight complete: matmul validation passed on all 16 instances, KV caches are warm, "
                         "the catalog migration is ready. Safe to activate anycast.", claims_success=True)

_MATMUL = '''"""The serving bundle's kernel: a plain matrix product (the pre-flight validation's subject)."""


def matmul(a, b):
    n, k, m = len(a), len(b), len(b[0])
    return [[sum(a[i][t] * b[t][j] for t in range(k)) for j in range(m)] for i in range(n)]
'''
_BROKEN_MATMUL = '''"""The serving bundle's kernel, as the model 'optimized' it (the loop bound is off by one)."""


def matmul(a, b):
    n, k, m = len(a), len(b), len(b[0])
    return [[sum(a[i][t] * b[t][j] for t in range(k - 1)) for j in range(m)] for i in range(n)]
'''
_TESTS = '''from matmul import matmul


def test_identity():
    assert matmul([[1, 0], [0, 1]], [[5, 6], [7, 8]]) == [[5, 6], [7, 8]]


def test_rectangular():
    assert matmul([[1, 2, 3]], [[1], [2], [3]]) == [[14]]


def test_attention_shaped_block():
    q = [[0.5, 1.0], [1.5, -1.0]]
    k = [[2.0, 0.0], [1.0, 4.0]]
    assert matmul(q, k) == [[2.0, 4.0], [2.0, -4.0]]
'''


def write_bundle(directory: str | Path) -> Path:
    """Write the serving bundle (a small real repository: ``matmul.py``, ``test_matmul.py`` and
    ``weights.bin``, 64 KiB of fixed bytes) into ``directory``; returns the weights file, whose
    SHA-256 is the image digest T1 provisions with."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / "matmul.py").write_text(_MATMUL)
    (d / "test_matmul.py").write_text(_TESTS)
    weights = d / "weights.bin"
    weights.write_bytes(bytes((i * 31 + 7) % 256 for i in range(65536)))
    return weights


class Example01:
    """One run of Example 0.1 on a live fleet (see the module docstring).

    Args:
        fleet: a running :class:`~kernel_lib.live.services.LiveFleet` (or anything with its
            facade: ``client``, ``resources``, ``counts``, ``audits``, ``inject``, ``clock``).
        work_dir: where the bundle and the instances' working directories are written.
        saga_id: the saga's id (operation ids start with it; each run needs its own).
        store: the log store (a new :class:`~kernel_lib.log.MemoryStore` by default; pass the
            same store to a second :class:`Example01` to continue a crashed run).
        break_validation: the model "optimizes" the kernel in the instance before the pivot (the
            tests then fail while the model still claims success).
        tamper_artifact: the weights in the instance are changed after provisioning (the digest
            check then fails).
        endpoints_wrapper: wraps the runner's endpoints (tests use it to crash after a send).
    """

    def __init__(self, fleet: Any, work_dir: str | Path, saga_id: str, *, store: Any = None,
                 break_validation: bool = False, tamper_artifact: bool = False,
                 endpoints_wrapper: Callable[[Any], Any] | None = None):
        self.fleet = fleet
        self.work_dir = Path(work_dir)
        self.saga_id = saga_id
        self.trajectory_id = f"traj-{saga_id}"
        self.store = store if store is not None else MemoryStore()
        self.break_validation = break_validation
        self.tamper_artifact = tamper_artifact
        self.image_dir = self.work_dir / "image"
        self.weights = write_bundle(self.image_dir)
        self.image_sha256 = file_sha256(self.weights)
        registry = deployment_registry()
        gate = DispatchGate(TrajectoryLog(self.store, self.trajectory_id, must_survive="none"),
                            AdmissionPolicy({GRANT_ID: set(registry.names())}), coalesce_admission=True)
        if gate.record.task is None:
            start_task(gate, self.trajectory_id)
        endpoints = fleet.client(self.trajectory_id)
        if endpoints_wrapper is not None:
            endpoints = endpoints_wrapper(endpoints)
        self.incidents: list[dict[str, Any]] = []
        self.runner = SagaRunner(gate, registry, endpoints, saga_id=saga_id, grant_id=GRANT_ID,
                                 retry=RetryPolicy(max_attempts=4, base_s=0.01, cap_s=0.2), sleep=fleet.clock.advance,
                                 on_incident=self.incidents.append, require_verification=True)
        self.verdicts: list[Any] = []

    # --- the steps ---------------------------------------------------------------------------------
    def instance_dir(self, outputs: Mapping[str, Any]) -> Path:
        return self.work_dir / "instances" / str(outputs["T1"]["sandbox_id"])

    def _warm_and_validate(self, outputs: Mapping[str, Any]) -> dict[str, Any]:
        """T2: unpack the bundle into the instance's directory, then run the checks (a failure
        raises, which fails the step)."""
        d = self.instance_dir(outputs)
        if not d.exists():
            shutil.copytree(self.image_dir, d)
        verdict = run_gate(self._bundle_checks(outputs))
        if not verdict.passed:
            raise ConfigError(f"validation failed: {', '.join(verdict.failed_checks)}")
        if self.break_validation:   # after validating, the model rewrites the kernel ("an optimization")
            (d / "matmul.py").write_text(_BROKEN_MATMUL)
        if self.tamper_artifact:
            (d / "weights.bin").write_bytes(b"\0" * 65536)
        return {"instance_dir": str(d), "checks": [c.name for c in verdict.checks]}

    def _recorded_image(self, sandbox_id: str) -> str | None:
        r = self.fleet.resources(live_only=False)["sandbox"].get(sandbox_id) or {}
        return (r.get("arguments") or {}).get("image_sha256")

    def _bundle_checks(self, outputs: Mapping[str, Any]) -> list[Any]:
        sid = str(outputs["T1"]["sandbox_id"])
        d = self.instance_dir(outputs)
        return [TestRunCheck("tests_pass_in_instance", str(d)),
                DigestCheck("weights_digest_matches_sandbox_record", str(d / "weights.bin"),
                            lambda: self._recorded_image(sid), source=f"sandbox service, record of {sid}")]

    def _gate(self, outputs: Mapping[str, Any]) -> Any:
        """The pre-pivot gate: deterministic checks read from the instance and the services."""
        sid = str(outputs["T1"]["sandbox_id"])
        prefix = self.saga_id + "."
        checks = self._bundle_checks(outputs) + [
            StateCheck("instance_active_at_sandbox_service",
                       lambda: (self.fleet.resources(live_only=False)["sandbox"].get(sid) or {}).get("state"),
                       lambda s: s == "active", f"sandbox {sid} is active"),
            StateCheck("no_public_route_yet",
                       lambda: sorted(k for k, r in self.fleet.resources()["routing"].items()
                                      if str(r.get("operation_id", "")).startswith(prefix)),
                       lambda routes: routes == [], "the routing service holds no route of this saga"),
        ]
        if "T4" in outputs:
            bid = str(outputs["T4"]["branch_id"])
            checks.append(StateCheck("catalog_branch_at_git_service",
                                     lambda: (self.fleet.resources()["git"].get(bid) or {}).get("state"),
                                     lambda s: s == "active", f"branch {bid} holds the catalog migration"))
        if "T5.stage" in outputs:
            op = outputs["T5.stage"]["operation_id"]
            checks.append(StateCheck(
                "webhook_staged_not_sent",
                lambda: {"escrow": (fold_saga(self.store.read(self.trajectory_id), self.saga_id).outbox.get("T5")
                                    or None) is not None,
                         "sent": [k for k, r in self.fleet.resources(live_only=False)["email"].items()
                                  if r.get("operation_id") == op]},
                lambda o: o["escrow"] and o["sent"] == [], "the webhook is in escrow and the relay has not sent it"))
        verdict = run_gate(checks, MODEL_CLAIM)
        self.verdicts.append(verdict)
        return verdict

    def bindings(self) -> dict[str, StepBinding]:
        """The plan steps bound to the live services (T2 runs in process)."""
        return {
            "T1": StepBinding("provision_sandbox", {"image": "inference-h100", "instances": 16,
                                                    "zones": ["az-1", "az-2"], "image_sha256": self.image_sha256}),
            "T2": StepBinding(local=self._warm_and_validate),
            "T3": StepBinding("activate_route", lambda o: {"prefix": "203.0.113.0/24", "mode": "anycast-bgp",
                                                            "sandbox_id": o["T1"]["sandbox_id"]}),
            "T4": StepBinding("create_branch", lambda o: {"repo": "service-catalog",
                                                           "branch": f"migrate/{self.saga_id}",
                                                           "migration": "0042_add_inference_endpoint"}),
            "T5": StepBinding("send_email", {"to": "registry@compliance.example", "subject": "audit: inference "
                                             "cluster activated", "body": f"saga {self.saga_id}: cluster activated"
                                             ", catalog migrated", "signed_by": "sre-agent"}),
        }

    # --- running -------------------------------------------------------------------------------------
    def run(self, order: str) -> PlanRun:
        """Run the plan in ``order`` ``"chapter"`` (the trap, run although the checker refuses it)
        or ``"proposed"`` (propose_order's remedy). Raises ConfigError for another order."""
        if order == "chapter":
            return run_plan(example_0_1(), self.bindings(), self.runner, gate=self._gate, enforce=False)
        if order == "proposed":
            return run_plan(propose_order(example_0_1()).plan, self.bindings(), self.runner, gate=self._gate)
        raise ConfigError(f"order is 'chapter' or 'proposed', got {order!r}")

    def held(self) -> dict[str, Any]:
        """What each shown service holds for this saga, from the services' own records:
        ``{service: [{resource_id, kind, state, operation_id}]}`` and ``applied``: the effects
        of this saga per action, counted from the services' audit trails."""
        prefix = self.saga_id + "."
        res = self.fleet.resources(live_only=False)
        out: dict[str, Any] = {}
        for name in SERVICES_SHOWN:
            out[name] = [{"resource_id": k, "kind": r["kind"], "state": r["state"],
                          "operation_id": r.get("operation_id")}
                         for k, r in sorted(res[name].items()) if str(r.get("operation_id", "")).startswith(prefix)]
        applied: dict[str, int] = {}
        for trail in self.fleet.audits().values():
            for a in trail:
                if str(a.get("operation_id", "")).startswith(prefix) and not a.get("refused"):
                    applied[a["action"]] = applied.get(a["action"], 0) + 1
        out["applied"] = dict(sorted(applied.items()))
        return out

    def outcome(self, run: PlanRun) -> dict[str, Any]:
        """The run as data: the plan run, the saga as the log folds it, what the services hold."""
        saga = fold_saga(self.store.read(self.trajectory_id), self.saga_id)
        return {
            "saga_id": self.saga_id, "run": run.to_json(), "saga_state": saga.state, "phase": saga.phase,
            "crossing": saga.crossing, "retired_compensators": [s.step_id for s in saga.retired_stack],
            "outbox": {k: e.to_json() for k, e in saga.outbox.items()},
            "verdicts": [v.to_record() for v in self.verdicts],
            "frozen": saga.frozen is not None, "services": self.held(),
        }


def _fail_migration(fleet: Any) -> None:
    fleet.inject("create_branch", "conflict")   # the chapter's schema deadlock: a final 409


def _run_order(fleet: Any, work_dir: str | Path, saga_id: str, order: str, fail_migration: bool) -> dict[str, Any]:
    ex = Example01(fleet, work_dir, saga_id)
    if fail_migration:
        _fail_migration(fleet)
    return ex.outcome(ex.run(order))


def run_trap(fleet: Any, work_dir: str | Path, saga_id: str = "ex01-trap", *,
             fail_migration: bool = True) -> dict[str, Any]:
    """Example 0.1's trap: the chapter's order, the migration failing after the pivot.
    Returns :meth:`Example01.outcome`."""
    return _run_order(fleet, work_dir, saga_id, "chapter", fail_migration)


def run_remedy(fleet: Any, work_dir: str | Path, saga_id: str = "ex01-remedy", *,
               fail_migration: bool = True) -> dict[str, Any]:
    """Example 0.1's remedy: propose_order's order (escrow and atomic outbox), the same fault.
    Returns :meth:`Example01.outcome`."""
    return _run_order(fleet, work_dir, saga_id, "proposed", fail_migration)


def run_example_0_1(state_dir: str | Path | None = None, *, fleet: Any = None,
                    fail_migration: bool = True) -> dict[str, Any]:
    """Both outcomes of Example 0.1 on the live services, as data (for a notebook).

    Args:
        state_dir: where to start a :class:`~kernel_lib.live.services.LiveFleet` (a temporary
            folder when None); ignored when ``fleet`` is given (then it is not stopped).
        fleet: a running fleet to use.
        fail_migration: inject the migration's failure (the chapter's scenario); False shows the
            happy path (the remedy then completes and sends one e-mail with the pivot).

    Returns ``{"plan_check", "proposal", "trap", "remedy"}``: the checker's verdict on the
    chapter's plan, the reorderer's proposal, and each run's outcome (see
    :meth:`Example01.outcome`: ``services`` is what the sandbox, routing, git and e-mail
    services hold for that saga, read from them).
    """
    from kernel_lib.live.services import LiveFleet

    base = Path(state_dir) if state_dir is not None else Path(tempfile.mkdtemp(prefix="ex01_"))
    own = fleet is None
    if own:
        fleet = LiveFleet(base / "fleet", client_timeout_s=5.0)
    try:
        trap = run_trap(fleet, base / "trap", fail_migration=fail_migration)
        fleet.clear_faults("git")
        remedy = run_remedy(fleet, base / "remedy", fail_migration=fail_migration)
        fleet.clear_faults("git")
    finally:
        if own:
            fleet.close()
    proposal = propose_order(example_0_1())
    return {"plan_check": check_plan(example_0_1()).to_json(), "proposal": proposal.to_json(),
            "trap": trap, "remedy": remedy}
