"""What the dispatch gate decides about: proposals, replies, the admission policy, and the ids of
the decisions and reservations it logs (Durable Execution §11.3.2, eq. 1).

Plain values, pure and deterministic (no I/O, no clock). :mod:`kernel_lib.core.decisions` decides
on them; :class:`kernel_lib.gate.dispatch.DispatchGate` appends what the decisions return and
moves requests and replies through the transports. :mod:`kernel_lib.gate.dispatch` re-exports
every name here.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, Literal

from kernel_lib.errors import ConfigError
from kernel_lib.limits import USAGE_USD_MAX
from kernel_lib.core.record import TrajectoryRecord

__all__ = [
    "REPEAT_CONTRACTS", "REPEAT_SAFE_CONTRACTS", "DEFAULT_REPEAT_CONTRACT", "ToolProposal", "ToolReply", "ModelCall",
    "ModelReply", "AdmissionPolicy",
    "decision_id", "reservation_id", "idempotency_key", "usable_usage",
]

#: Every endpoint repeat contract a proposal may declare (the ``ToolIntent.repeat_contract`` values).
REPEAT_CONTRACTS = frozenset({"idempotent", "idempotency_key", "at_most_once", "read_only", "unsafe"})

#: Endpoint repeat contracts under which an in-doubt operation may get another attempt (§11.3.3).
REPEAT_SAFE_CONTRACTS = frozenset({"idempotent", "idempotency_key", "read_only"})
#: The contract of a proposal that declares none: ``unsafe``, not repeat-safe. Nothing is known about
#: what the endpoint does with a repeated request, so an attempt in doubt is settled (reconciliation,
#: evidence) before the operation gets another one (settlement before retry, §11.3.3).
DEFAULT_REPEAT_CONTRACT = "unsafe"


def _check_bound(subject: str, bound_usd: Any) -> None:
    if isinstance(bound_usd, bool) or not isinstance(bound_usd, (int, float)) or not math.isfinite(bound_usd) \
            or bound_usd < 0:
        raise ConfigError(f"{subject}: cost_bound_usd must be a finite number >= 0, got {bound_usd!r}")


@dataclass(frozen=True)
class ToolProposal:
    """A validated, complete tool-call proposal (the first term of eq. 1).

    ``cost_bound_usd`` is the reservation bound: the most this attempt can charge (USD, finite,
    >= 0; the record holds it as integer micro-dollars).

    ``repeat_contract`` is what the endpoint does with a repeated request (one of
    :data:`REPEAT_CONTRACTS`). Undeclared, it is :data:`DEFAULT_REPEAT_CONTRACT` (``unsafe``): an
    attempt in doubt is not repeated until it is settled. Declare ``idempotency_key``,
    ``idempotent`` or ``read_only`` only for an endpoint that honours it (§11.3.3). Every attempt's
    intent carries the operation's :func:`idempotency_key` whatever the contract.

    ``status_lookup`` is a separate declaration: the endpoint answers a status query by this
    operation's identity (its operation id or idempotency key), so reconciliation can recover an
    outcome whose evidence a crash lost (§11.5.3). Declared, the attempt's evidence is acknowledged
    at the write tier and made durable by the log's next barrier (the next intent's, or
    :meth:`~kernel_lib.gate.dispatch.DispatchGate.sync`): one durable barrier per step. Undeclared
    (the default: nothing is known about the endpoint), the evidence waits for its own barrier at
    the trajectory's tier. The intent records the declaration (``ToolIntent.status_lookup``).

    Raises:
        ConfigError: a bound that is not a finite number >= 0, an unknown repeat contract, or a
            ``status_lookup`` that is not a bool.
    """

    operation_id: str
    attempt_id: str
    tool: str
    arguments: dict[str, Any]
    grant_id: str
    cost_bound_usd: float
    repeat_contract: str = DEFAULT_REPEAT_CONTRACT
    input_ref: str | None = None
    revision: str | None = None
    status_lookup: bool = False

    def __post_init__(self) -> None:
        _check_bound(self.operation_id, self.cost_bound_usd)
        if not isinstance(self.repeat_contract, str) or self.repeat_contract not in REPEAT_CONTRACTS:
            raise ConfigError(f"{self.operation_id}: repeat_contract must be one of {sorted(REPEAT_CONTRACTS)}, "
                              f"got {self.repeat_contract!r}")
        if not isinstance(self.status_lookup, bool):
            raise ConfigError(f"{self.operation_id}: status_lookup must be True or False (does the endpoint answer "
                              f"a status query by operation id?), got {self.status_lookup!r}")


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


def idempotency_key(trajectory_id: str, operation_id: str) -> str:
    """The idempotency key of a logical tool operation: ``"idem-"`` + the first 32 hex digits of
    the SHA-256 of the JSON array ``[trajectory_id, operation_id]`` (37 characters, ASCII, fit for an
    ``Idempotency-Key`` HTTP header).

    Deterministic in the operation's identity and nothing else, so every attempt of one operation
    (a retry, a new attempt after a resume under a new owner) carries the same key, and the same
    operation id in another trajectory carries another one (identity scoping, §11.3.3). The gate
    puts it in every ``ToolIntent`` it writes; the transport hands it to the endpoint, which
    deduplicates by it when its contract is ``idempotency_key``.
    """
    ident = json.dumps([trajectory_id, operation_id], ensure_ascii=False, separators=(",", ":"))
    return "idem-" + hashlib.sha256(ident.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def usable_usage(charged_usd: Any) -> bool:
    """Is this a usable usage report (a finite number in 0..:data:`~kernel_lib.limits.USAGE_USD_MAX`
    USD)? Anything else settles nothing."""
    return (isinstance(charged_usd, (int, float)) and not isinstance(charged_usd, bool)
            and math.isfinite(charged_usd) and 0 <= charged_usd <= USAGE_USD_MAX)
