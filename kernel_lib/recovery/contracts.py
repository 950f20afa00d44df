"""Tool declarations: reversibility tier, repeat contract, status lookup, compensator and binding.

Failure Recovery, table 5 (the action invertibility matrix) and "Saga compensation stacks": a
tool developer registers each forward tool with its compensator at definition time; the model
never proposes one. A :class:`ToolContract` is that declaration:

* ``tier``: ``"I"`` invertible, ``"II"`` compensable, ``"III"`` pivot (irreversible, C = ∅).
  There is no default: a tool without a declared tier is refused (:class:`ToolContractError`).
* ``repeat_contract``: what the endpoint does with a repeated request (§11.3.3):
  ``idempotency_key`` (a repeat under the same key is answered from the first), ``idempotent``,
  ``read_only``, ``at_most_once``, or ``unsafe`` (the default when nothing is declared, as for
  the dispatch gate: a request that may have arrived is not sent again until it is settled).
* ``status_lookup``: the endpoint answers a status query by operation id (reconciliation,
  §11.5.3); its evidence may then ride the next barrier (one barrier per step, issue 15).
* ``compensator``: for tiers I and II, the registered compensating tool and how its arguments
  are bound from the forward step (:class:`Compensator`). Required for I/II, refused for III;
  a tier I tool declared ``read_only`` changes nothing and needs none (C = noop, figure 5's
  inspection turn).

:class:`ToolRegistry` holds the declarations and the transports; :meth:`ToolRegistry.tool` is the
decorator a practitioner uses on a plain Python function (see :mod:`kernel_lib.recovery.agent`).
Everything here is pure data and checks; nothing is dispatched.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kernel_lib.core.proposals import DEFAULT_REPEAT_CONTRACT, REPEAT_CONTRACTS, REPEAT_SAFE_CONTRACTS
from kernel_lib.errors import CompensatorBindError, ToolContractError

__all__ = ["TIERS", "TIER_NAMES", "REPAIRABLE_CONTRACTS", "Compensator", "ToolContract", "ToolRegistry",
           "bind_compensator_arguments"]

#: Reversibility tiers of table 5.
TIERS = ("I", "II", "III")
TIER_NAMES = {"I": "invertible", "II": "compensable", "III": "pivot"}
#: Repeat contracts under which re-sending a compensator after a crash is safe (the service
#: dedups or the call has no effect to repeat); a compensator without one may be re-sent only
#: after its status lookup says it did not run.
REPAIRABLE_CONTRACTS = REPEAT_SAFE_CONTRACTS

_SOURCES = ("output", "arguments")


@dataclass(frozen=True)
class Compensator:
    """C_i's declaration: the compensating tool and how its arguments are bound.

    ``bind`` maps each compensator argument to where its value comes from in the forward step:
    ``"output.<key>"`` (the service's answer: a resource id, the prior contents it returned) or
    ``"arguments.<key>"`` (what the step was called with); nested keys use more dots
    (``"output.hold.id"``). ``const`` gives fixed arguments. A value cannot come from the model.
    """

    tool: str
    bind: Mapping[str, str] = field(default_factory=dict)
    const: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.tool, str) or not self.tool:
            raise ToolContractError(f"a compensator names its tool by a non-empty string, got {self.tool!r}")
        for arg, src in dict(self.bind).items():
            head, _, rest = str(src).partition(".")
            if not isinstance(src, str) or head not in _SOURCES or not rest:
                raise ToolContractError(f"compensator {self.tool}: argument {arg!r} is bound to {src!r}; a binding is "
                                        "'output.<key>' or 'arguments.<key>'", tool=self.tool)
        overlap = set(self.bind) & set(self.const)
        if overlap:
            raise ToolContractError(f"compensator {self.tool}: {sorted(overlap)} both bound and constant",
                                    tool=self.tool)
        object.__setattr__(self, "bind", dict(self.bind))
        object.__setattr__(self, "const", dict(self.const))

    def schema(self) -> dict[str, Any]:
        return {"tool": self.tool, "bind": dict(self.bind), "const": dict(self.const)}


def _lookup(path: str, arguments: Mapping[str, Any], output: Mapping[str, Any] | None) -> Any:
    head, _, rest = path.partition(".")
    node: Any = output if head == "output" else arguments
    for part in rest.split("."):
        if not isinstance(node, Mapping) or part not in node:
            raise KeyError(path)
        node = node[part]
    return node


def bind_compensator_arguments(comp: Compensator, arguments: Mapping[str, Any],
                               output: Mapping[str, Any] | None) -> dict[str, Any]:
    """C_i's arguments θ_i^c from T_i's arguments and output (Failure Recovery, definition 0.1).

    Raises:
        CompensatorBindError: a bound path is missing (the service's answer lacks the resource id):
            the step cannot be reported committed with a compensator.
    """
    out = dict(comp.const)
    for arg, src in comp.bind.items():
        try:
            out[arg] = _lookup(src, arguments, output)
        except KeyError:
            raise CompensatorBindError(
                f"compensator {comp.tool}: argument {arg!r} is bound to {src!r}, which the step's "
                f"{'output' if src.startswith('output') else 'arguments'} do not hold "
                f"(keys: {sorted((output if src.startswith('output') else arguments) or {})})") from None
    return out


@dataclass(frozen=True)
class ToolContract:
    """A tool's declared recovery contract (Failure Recovery, table 5; §11.3.3).

    Raises ToolContractError on construction when the declaration is incomplete or inconsistent.
    """

    name: str
    tier: str | None
    repeat_contract: str = DEFAULT_REPEAT_CONTRACT
    status_lookup: bool = False
    compensator: Compensator | None = None
    cost_bound_usd: float = 0.0
    description: str = ""
    #: a compensating tool (C_i), which must itself be safe to re-send: see REPAIRABLE_CONTRACTS
    is_compensator: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ToolContractError(f"a tool is named by a non-empty string, got {self.name!r}")
        if self.tier is None:
            raise ToolContractError(f"tool {self.name!r} declares no reversibility tier; declare tier 'I' "
                                    "(invertible), 'II' (compensable) or 'III' (pivot): an undeclared tool is "
                                    "refused rather than guessed", tool=self.name)
        if self.tier not in TIERS:
            raise ToolContractError(f"tool {self.name!r}: tier {self.tier!r} is not one of {TIERS}", tool=self.name)
        if self.repeat_contract not in REPEAT_CONTRACTS:
            raise ToolContractError(f"tool {self.name!r}: repeat contract {self.repeat_contract!r} is not one of "
                                    f"{sorted(REPEAT_CONTRACTS)}", tool=self.name)
        if not isinstance(self.status_lookup, bool):
            raise ToolContractError(f"tool {self.name!r}: status_lookup must be True or False", tool=self.name)
        if self.tier == "III" and self.compensator is not None:
            raise ToolContractError(f"tool {self.name!r} is a pivot (tier III: C = ∅) but declares compensator "
                                    f"{self.compensator.tool!r}; an effect that can be compensated is tier II",
                                    tool=self.name)
        if self.tier in ("I", "II") and self.compensator is None and not self.is_compensator \
                and not (self.tier == "I" and self.repeat_contract == "read_only"):
            raise ToolContractError(f"tool {self.name!r} is tier {self.tier} ({TIER_NAMES[self.tier]}) but registers "
                                    "no compensator; register one (the model never proposes one) or declare it a "
                                    "pivot (tier III)", tool=self.name)
        if self.compensator is not None and not isinstance(self.compensator, Compensator):
            raise ToolContractError(f"tool {self.name!r}: compensator must be a Compensator", tool=self.name)
        if not (isinstance(self.cost_bound_usd, (int, float)) and 0 <= self.cost_bound_usd < float("inf")):
            raise ToolContractError(f"tool {self.name!r}: cost_bound_usd must be a finite number >= 0",
                                    tool=self.name)

    def schema(self) -> dict[str, Any]:
        """The declaration as JSON data (what a tool listing or a model's tool schema shows)."""
        return {"name": self.name, "tier": self.tier, "tier_name": TIER_NAMES[self.tier],
                "repeat_contract": self.repeat_contract, "status_lookup": self.status_lookup,
                "compensator": self.compensator.schema() if self.compensator else None,
                "cost_bound_usd": self.cost_bound_usd, "is_compensator": self.is_compensator,
                "description": self.description}


Transport = Callable[..., Any]


class ToolRegistry:
    """Declared tools and their transports.

    :meth:`register` adds a contract (and optionally the transport that reaches the tool);
    :meth:`check` verifies that every compensator a tool names is registered, is not itself a
    pivot, and is safe to re-send after a crash (a repeat contract in
    :data:`REPAIRABLE_CONTRACTS`, or a status lookup). :meth:`tool` is the decorator form.
    """

    def __init__(self) -> None:
        self._contracts: dict[str, ToolContract] = {}
        self._transports: dict[str, Transport] = {}

    def register(self, contract: ToolContract, transport: Transport | None = None) -> ToolContract:
        """Add ``contract`` (raises ToolContractError when the name is taken by another contract)."""
        if not isinstance(contract, ToolContract):
            raise ToolContractError(f"register takes a ToolContract, got {type(contract).__name__}")
        old = self._contracts.get(contract.name)
        if old is not None and old != contract:
            raise ToolContractError(f"tool {contract.name!r} is already registered with another contract",
                                    tool=contract.name)
        self._contracts[contract.name] = contract
        if transport is not None:
            self._transports[contract.name] = transport
        return contract

    def set_transport(self, name: str, transport: Transport) -> None:
        self.contract(name)
        self._transports[name] = transport

    def contract(self, name: str) -> ToolContract:
        """The declaration of ``name`` (ToolContractError when it is not registered)."""
        c = self._contracts.get(name)
        if c is None:
            raise ToolContractError(f"tool {name!r} is not registered (registered: {sorted(self._contracts)}); "
                                    "an undeclared tool is refused", tool=name)
        return c

    def transport(self, name: str) -> Transport:
        self.contract(name)
        t = self._transports.get(name)
        if t is None:
            raise ToolContractError(f"tool {name!r} is registered without a transport", tool=name)
        return t

    def __contains__(self, name: object) -> bool:
        return name in self._contracts

    def names(self) -> list[str]:
        return list(self._contracts)

    def schemas(self) -> list[dict[str, Any]]:
        return [c.schema() for c in self._contracts.values()]

    def check(self) -> "ToolRegistry":
        """Verify the compensators (see the class docstring); returns self. Raises ToolContractError."""
        for c in self._contracts.values():
            if c.compensator is None:
                continue
            comp = self._contracts.get(c.compensator.tool)
            if comp is None:
                raise ToolContractError(f"tool {c.name!r} registers compensator {c.compensator.tool!r}, which is not "
                                        "registered", tool=c.name)
            if comp.tier == "III":
                raise ToolContractError(f"compensator {comp.name!r} of {c.name!r} is a pivot; a compensator must not "
                                        "itself be irreversible", tool=c.name)
            if comp.repeat_contract not in REPAIRABLE_CONTRACTS and not comp.status_lookup:
                raise ToolContractError(
                    f"compensator {comp.name!r} of {c.name!r} is {comp.repeat_contract} without a status lookup: after "
                    "a crash during the unwind nothing could tell whether it ran, and it must not run twice; declare "
                    "an idempotency key or a status lookup", tool=c.name)
        return self

    def tool(self, *, tier: str | None = None, repeat_contract: str = DEFAULT_REPEAT_CONTRACT,
             status_lookup: bool = False,
             compensator: Compensator | None = None, cost_bound_usd: float = 0.0, name: str | None = None,
             is_compensator: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: register a plain function ``fn(arguments: dict, *, idempotency_key: str) -> dict``
        as a tool with this contract; see :mod:`kernel_lib.recovery.agent` for how calls are run.

        ``tier`` has no default on purpose: leaving it out raises ToolContractError.
        """
        def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
            contract = ToolContract(name or fn.__name__, tier, repeat_contract, status_lookup, compensator,
                                    cost_bound_usd, (fn.__doc__ or "").strip().split("\n")[0],
                                    is_compensator=is_compensator)
            self.register(contract, fn)
            fn.contract = contract   # type: ignore[attr-defined]
            return fn
        return deco
