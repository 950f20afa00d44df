"""The deployment saga of the Failure Recovery chapter (Napkin Math 0.1) as a saga script.

T1 provision an isolated sandbox, T2 reserve a public egress IP, T3 compile the binary inside
the sandbox, T4 bind the firewall rules, T5 publish the DNS record. In the chapter T5 fails with
an unrecoverable 409 (domain ownership collision) and the unwind runs C4, C3, C2, C1.

:func:`run_deployment` is the script a worker runs (and re-runs after a crash: committed steps
are answered from the log); :func:`deployment_registry` declares the tools (every create is tier
II with its release as compensator; see :func:`kernel_lib.sim.services.deployment_contracts`).
"""

from __future__ import annotations

from typing import Any

from kernel_lib.recovery.contracts import ToolRegistry
from kernel_lib.errors import StepFailedError
from kernel_lib.recovery.runner import SagaRunner
from kernel_lib.sim.services import deployment_contracts

__all__ = ["DEPLOYMENT_STEPS", "TAKEN_DOMAIN", "deployment_registry", "run_deployment"]

#: The forward steps (tool names), in order.
DEPLOYMENT_STEPS = ("provision_sandbox", "reserve_ip", "compile_binary", "bind_firewall", "publish_dns")
#: The domain another account owns: publishing it answers 409.
TAKEN_DOMAIN = "api.example.test"


def deployment_registry() -> ToolRegistry:
    reg = ToolRegistry()
    for c in deployment_contracts():
        reg.register(c)
    return reg.check()


def run_deployment(runner: SagaRunner, *, domain: str = TAKEN_DOMAIN, extra_steps: int = 0) -> dict[str, Any]:
    """Run the deployment saga; on a failed step, unwind. Returns ``{"state", "outputs",
    "failed_step"}``. ``extra_steps`` adds that many git-branch steps before the DNS step (the
    100-step benchmark). A saga the log already shows COMPLETED (a new owner resuming after the
    last owner completed it and died before reporting) is reported as such: nothing runs again.
    Raises what :meth:`SagaRunner.unwind` raises (SagaPanicError)."""
    outputs: dict[str, Any] = {}
    if runner.saga.state == "COMPLETED":
        return {"state": "COMPLETED", "outputs": outputs, "failed_step": None}
    try:
        sb = runner.step("provision_sandbox", {"image": "deploy-base", "vcpus": 2})
        outputs["sandbox"] = sb
        ip = runner.step("reserve_ip", {"region": "eu-west-1"})
        outputs["ip"] = ip
        outputs["build"] = runner.step("compile_binary", {"sandbox_id": sb["sandbox_id"], "target": "api"})
        outputs["firewall"] = runner.step("bind_firewall", {"sandbox_id": sb["sandbox_id"], "ip_id": ip["ip_id"],
                                                            "ports": [443]})
        for k in range(extra_steps):
            outputs[f"branch{k}"] = runner.step("create_branch", {"name": f"deploy-{k}"})
        outputs["dns"] = runner.step("publish_dns", {"name": domain, "ip_id": ip["ip_id"]})
    except StepFailedError as exc:
        state = runner.unwind(f"step failed: {exc}")
        return {"state": state, "outputs": outputs, "failed_step": exc.step_id}
    runner.complete()
    return {"state": "COMPLETED", "outputs": outputs, "failed_step": None}
