"""A practitioner's own tools under the saga: plain Python functions, declared once.

Failure Recovery, "Saga compensation stacks": tool developers register forward/compensator pairs
at definition time. :class:`AgentTools` is that registration for plain functions: each
function is declared with :meth:`AgentTools.tool` (tier, repeat contract, status lookup,
compensator and how its arguments bind), and :meth:`AgentTools.runner` gives a
:class:`~kernel_lib.recovery.runner.SagaRunner` whose every call goes through the dispatch gate:
intent durable before the function runs, in doubt on a crash, reconciled by the declared status
lookup, compensated in reverse on failure. Example::

    tools = AgentTools()

    @tools.tool(tier="II", repeat_contract="idempotency_key", status_lookup=True,
                compensator=Compensator("delete_branch", {"name": "output.branch"}))
    def create_branch(arguments, *, idempotency_key):
        return {"branch": forge.create(arguments["name"], key=idempotency_key)}

    @create_branch.lookup
    def _(operation_id):               # {"status": "completed"|"failed"|"unknown", "body": {...}}
        return forge.status(operation_id)

    @tools.tool(tier="II", repeat_contract="idempotency_key", is_compensator=True)
    def delete_branch(arguments, *, idempotency_key):
        forge.delete(arguments["name"])
        return {"deleted": arguments["name"]}

    runner = tools.runner(gate, saga_id="fix-bug", grant_id="grant-1")
    out = runner.step("create_branch", {"name": "fix"})

A function returns its output (a dict of JSON data) or raises :class:`ToolFailedError` (the service
said no: ``retryable`` says whether the same request may succeed later, ``partial_output`` what
it left behind); ``TimeoutError``/``OSError`` mean no answer came (the attempt is in doubt).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kernel_lib.core.events import ToolIntent
from kernel_lib.core.proposals import ToolReply
from kernel_lib.errors import ToolContractError, ToolFailedError
from kernel_lib.gate.dispatch import DispatchGate
from kernel_lib.recovery.contracts import Compensator, ToolRegistry
from kernel_lib.recovery.runner import RetryPolicy, SagaRunner

__all__ = ["AgentTools", "ToolFailedError", "Compensator"]


class AgentTools:
    """Plain functions as declared tools (see the module docstring); also the runner's
    :class:`~kernel_lib.recovery.runner.Endpoints`."""

    def __init__(self, *, revoke: Callable[[str], list[str]] = lambda trajectory_id: []):
        self.registry = ToolRegistry()
        self._functions: dict[str, Callable[..., Any]] = {}
        self._lookups: dict[str, Callable[[str], dict[str, Any]]] = {}
        self._revoke = revoke

    def tool(self, **declaration: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: register ``fn(arguments, *, idempotency_key) -> dict`` with the declaration
        of :meth:`ToolRegistry.tool` (``tier`` required). The returned function gains a
        ``.lookup`` decorator for its status lookup (required when ``status_lookup=True``)."""
        reg_deco = self.registry.tool(**declaration)

        def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
            reg_deco(fn)
            name = fn.contract.name   # type: ignore[attr-defined]
            self._functions[name] = fn

            def lookup(look: Callable[[str], dict[str, Any]]) -> Callable[[str], dict[str, Any]]:
                self._lookups[name] = look
                return look
            fn.lookup = lookup   # type: ignore[attr-defined]
            return fn
        return deco

    def check(self) -> ToolRegistry:
        """The registry, checked; also every declared status lookup must be registered."""
        for name in self.registry.names():
            if self.registry.contract(name).status_lookup and name not in self._lookups:
                raise ToolContractError(f"tool {name!r} declares a status lookup but registers none "
                                        f"(decorate one with @{name}.lookup)", tool=name)
        return self.registry.check()

    # --- Endpoints ---------------------------------------------------------------------------------
    def send(self, intent: ToolIntent) -> ToolReply:
        fn = self._functions.get(intent.tool)
        if fn is None:
            return ToolReply("failed", outcome={"error": f"no function for {intent.tool}", "retryable": False},
                             observation_complete=True)
        try:
            out = fn(dict(intent.arguments), idempotency_key=intent.idempotency_key)
        except ToolFailedError as exc:
            outcome: dict[str, Any] = {"error": str(exc), "retryable": exc.retryable}
            if exc.partial_output is not None:
                outcome.update(partial=True, output=dict(exc.partial_output))
            return ToolReply("failed", outcome=outcome, observation_complete=not exc.retryable)
        if not isinstance(out, dict):
            out = {"value": out}
        return ToolReply("completed", outcome=dict(out), observation_complete=True)

    def lookup(self, tool: str, operation_id: str) -> dict[str, Any]:
        look = self._lookups.get(tool)
        return look(operation_id) if look is not None else {"status": "unknown"}

    def live_resources(self) -> list[dict[str, Any]]:
        return []

    def revoke(self, trajectory_id: str) -> list[str]:
        return self._revoke(trajectory_id)

    def runner(self, gate: DispatchGate, *, saga_id: str, grant_id: str, retry: RetryPolicy | None = None,
               sleep: Callable[[float], Any] = lambda s: None,
               on_incident: Callable[[dict[str, Any]], Any] = lambda incident: None) -> SagaRunner:
        """A saga runner over these tools (every call through ``gate``)."""
        return SagaRunner(gate, self.check(), self, saga_id=saga_id, grant_id=grant_id, retry=retry or RetryPolicy(),
                          sleep=sleep,
                          on_incident=on_incident)
