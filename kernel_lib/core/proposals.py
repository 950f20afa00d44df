"""What the dispatch gate decides about: proposals, replies, the admission policy, and the ids of
the decisions and reservations it logs (Durable Execution §11.3.2, eq. 1).

Plain values, pure and deterministic (no I/O, no clock). :mod:`kernel_lib.core.decisions` decides
on them; :class:`kernel_lib.gate.dispatch.DispatchGate` appends what the decisions return and
moves requests and replies through the transports. :mod:`kernel_lib.gate.dispatch` re-exports
every name here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from kernel_lib.errors import ConfigError
from kernel_lib.limits import USAGE_USD_MAX
from kernel_lib.core.record import TrajectoryRecord

__all__ = [
    "REPEAT_SAFE_CONTRACTS", "ToolProposal", "ToolReply", "ModelCall", "ModelReply", "AdmissionPolicy",
    "decision_id", "reservation_id", "usable_usage",
]

#: Endpoint repeat contracts under which an in-doubt operation may get another attempt (§11.3.3).
REPEAT_SAFE_CONTRACTS = frozenset({"idempotent", "idempotency_key", "read_only"})


def _check_bound(subject: str, bound_usd: Any) -> None:
    if isinstance(bound_usd, bool) or not isinstance(bound_usd, (int, float)) or not math.isfinite(bound_usd) \
            or bound_usd < 0:
        raise ConfigError(f"{subject}: cost_bound_usd must be a finite number >= 0, got {bound_usd!r}")


@dataclass(frozen=True)
class ToolProposal:
    """A validated, complete tool-call proposal (the first term of eq. 1).

    ``cost_bound_usd`` is the reservation bound: the most this attempt can charge (USD, finite,
    >= 0; the record holds it as integer micro-dollars).

    Raises:
        ConfigError: a bound that is not a finite number >= 0.
    """

    operation_id: str
    attempt_id: str
    tool: str
    arguments: dict[str, Any]
    grant_id: str
    cost_bound_usd: float
    repeat_contract: str = "idempotency_key"
    input_ref: str | None = None
    revision: str | None = None

    def __post_init__(self) -> None:
        _check_bound(self.operation_id, self.cost_bound_usd)


@dataclass(frozen=True)
class ToolReply:
    """What the transport brought back. ``status`` as in :class:`~kernel_lib.core.events.ToolResult`;
    ``charged_usd`` is usage evidence (USD), if the endpoint reports it."""

    status: str
    job_handle: str | None = None
    outcome: dict[str, Any] | None = None
    observation_complete: bool = False
    evidence: dict[str, str] | None = None
    charged_usd: float | None = None


@dataclass(frozen=True)
class ModelCall:
    """A model invocation: its identity, delivered input, and reservation bound (USD).

    Raises:
        ConfigError: a bound that is not a finite number >= 0.
    """

    invocation_id: str
    model: str
    delivered_input: str
    grant_id: str
    cost_bound_usd: float
    request_config: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_bound(self.invocation_id, self.cost_bound_usd)


@dataclass(frozen=True)
class ModelReply:
    """What a model transport brought back; ``charged_usd`` is the provider's usage report (USD)."""

    status: Literal["complete", "partial", "error"]
    reply: str = ""
    proposal: dict[str, Any] | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    charged_usd: float = 0.0


@dataclass
class AdmissionPolicy:
    """Which tools each capability grant allows; the policy version stamped on decisions."""

    grants: dict[str, set[str]]
    policy_version: str = "policy-v1"

    def authorize(self, record: TrajectoryRecord, grant_id: str, subject: str) -> tuple[bool, str]:
        """``(allowed, reason)``: the grant was issued to the task and allows ``subject``."""
        task_grants = set((record.task or {}).get("grant_ids", []))
        if grant_id not in task_grants:
            return False, f"grant {grant_id!r} was not issued to this task"
        if subject not in self.grants.get(grant_id, set()):
            return False, f"grant {grant_id!r} does not allow {subject!r}"
        return True, "allowed"


def decision_id(subject_id: str, attempt_id: str | None = None) -> str:
    """Id of the Authorized decision for an attempt (or a model invocation)."""
    return f"auth-{subject_id}" + (f"/{attempt_id}" if attempt_id else "")


def reservation_id(subject_id: str, attempt_id: str | None = None) -> str:
    """Id of the BudgetReserved reservation for an attempt (or a model invocation)."""
    return f"res-{subject_id}" + (f"/{attempt_id}" if attempt_id else "")


def usable_usage(charged_usd: Any) -> bool:
    """Is this a usable usage report (a finite number in 0..:data:`~kernel_lib.limits.USAGE_USD_MAX`
    USD)? Anything else settles nothing."""
    return (isinstance(charged_usd, (int, float)) and not isinstance(charged_usd, bool)
            and math.isfinite(charged_usd) and 0 <= charged_usd <= USAGE_USD_MAX)
