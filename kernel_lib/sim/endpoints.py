"""Scripted endpoints with declared repeat contracts, and a worker that dies after sending (§11.5, §11.9).

An endpoint in this module is an in-process object with a ``handle(intent)`` method that a
:class:`~kernel_lib.gate.dispatch.DispatchGate` can use as its transport. What it does with a
repeated request is its *repeat contract*, which the caller declares on the proposal and the
gate relies on when it decides whether another attempt is safe:

* :class:`PaymentService` pays every request it receives. It keeps no memory of earlier requests,
  so the only safe contract for it is ``at_most_once``: a request that may have been delivered must
  not be sent again. Its inquiry API (:meth:`~PaymentService.inquire`) answers which attempts of an
  operation it has paid.
* :class:`KeyedPaymentService` is the same service behind an ``idempotency_key`` contract: the
  key is the intent's ``idempotency_key`` (the same for every attempt of one operation, see
  :func:`kernel_lib.core.proposals.idempotency_key`), and a key it has already paid is answered
  again from its results, not paid twice. A request without a key is a new request.
* :class:`CompletionSigner` is an endpoint's signing identity: it signs completion records the way
  the live executor does (Ed25519 over the RFC 8785 encoding, :func:`kernel_lib.gate.evidence.signing_bytes`),
  so they can be deposited in a :class:`~kernel_lib.gate.inbox.ResultInbox` and verified.

:func:`dispatch_then_crash` is the first worker of the refund example: it admits one proposal,
makes its intent durable, sends the request, and dies before any reply is logged. The log then
ends at the ``ToolIntent``; the endpoint has acted.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from kernel_lib.core.events import TaskStarted, ToolIntent
from kernel_lib.errors import ConfigError
from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate, ToolProposal, ToolReply
from kernel_lib.gate.evidence import signing_bytes
from kernel_lib.log import FailureDomain, LogStore, MemoryStore, TrajectoryLog

__all__ = ["CompletionSigner", "KeyedPaymentService", "PaymentService", "WorkerDied", "dispatch_then_crash"]


class PaymentService:
    """A payment endpoint that pays every request it receives (contract: ``at_most_once``).

    Attributes:
        paid: ``(operation_id/attempt_id, amount_usd)`` for every request paid, in order: the side
            effects in the world.
        repeat_contract: the contract a caller may declare for it.
    """

    repeat_contract = "at_most_once"

    def __init__(self) -> None:
        self.paid: list[tuple[str, Any]] = []

    def handle(self, intent: ToolIntent) -> ToolReply:
        """Pay ``intent.arguments["amount_usd"]`` for this attempt; returns the completed reply.

        Raises: ConfigError: the request carries no ``amount_usd``."""
        if "amount_usd" not in intent.arguments:
            raise ConfigError(f"{intent.operation_id}: a payment request needs arguments['amount_usd']")
        who = f"{intent.operation_id}/{intent.attempt_id}"
        self.paid.append((who, intent.arguments["amount_usd"]))
        return ToolReply(status="completed", outcome={"refunded_usd": intent.arguments["amount_usd"], "paid_for": who},
                         observation_complete=True, charged_usd=0.05)

    def inquire(self, operation_id: str) -> list[str]:
        """The inquiry API: which attempts of ``operation_id`` this service has paid
        (``"operation_id/attempt_id"`` strings, in order)."""
        return [who for who, _ in self.paid if who.startswith(operation_id + "/")]


class KeyedPaymentService(PaymentService):
    """The same service behind an ``idempotency_key`` contract: the request's
    ``idempotency_key`` (what the gate put in the ``ToolIntent``) is the key; a key already paid
    is answered from the stored result (``duplicate: True``, nothing charged), not paid again. A
    request without a key (None) has nothing to be deduplicated by and is paid.

    Attributes: ``results``: key → the outcome of its one payment (besides :attr:`paid`);
    ``keys_received``: the key of every request received, in order (None for a request without one)."""

    repeat_contract = "idempotency_key"

    def __init__(self) -> None:
        super().__init__()
        self.results: dict[str, dict[str, Any]] = {}
        self.keys_received: list[str | None] = []

    def handle(self, intent: ToolIntent) -> ToolReply:
        key = getattr(intent, "idempotency_key", None)   # the key every attempt of the operation carries
        self.keys_received.append(key)
        if key is None:
            return super().handle(intent)
        if key in self.results:
            return ToolReply(status="completed", outcome={**self.results[key], "duplicate": True},
                             observation_complete=True, charged_usd=0.0)
        super().handle(intent)
        self.results[key] = {"refunded_usd": intent.arguments["amount_usd"],
                             "paid_for": f"{intent.operation_id}/{intent.attempt_id}"}
        return ToolReply(status="completed", outcome=dict(self.results[key]), observation_complete=True,
                         charged_usd=0.05)


@dataclass(frozen=True)
class CompletionSigner:
    """An endpoint's Ed25519 signing identity for completion records.

    Args:
        endpoint_id: the ``executor_id`` the records name (and the inbox registers the key under).
        private_key: 32 raw bytes of the Ed25519 private key. The default is a fixed, public key
            (``bytes(range(32))``) so that examples are reproducible: never use it for anything real.
    """

    endpoint_id: str
    private_key: bytes = field(default=bytes(range(32)), repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.private_key, bytes) or len(self.private_key) != 32:
            raise ConfigError("private_key must be 32 raw bytes of an Ed25519 private key")

    @property
    def _key(self) -> Ed25519PrivateKey:
        return Ed25519PrivateKey.from_private_bytes(self.private_key)

    @property
    def public_key_hex(self) -> str:
        """The public key as 64 hex characters (what a :class:`ResultInbox` registers)."""
        return self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()

    def sign(self, trajectory_id: str, operation_id: str, attempt_id: str, outcome: dict[str, Any],
             charged_usd: float, *, status: str = "completed", job_handle: str | None = None) -> dict[str, Any]:
        """A signed completion record ``{executor_id, trajectory_id, operation_id, attempt_id,
        job_handle, status, outcome, charged_usd, public_key_sha256, signature}`` (``job_handle``
        defaults to ``pay_<operation_id>``)."""
        rec = {"executor_id": self.endpoint_id, "trajectory_id": trajectory_id, "operation_id": operation_id,
               "attempt_id": attempt_id, "job_handle": job_handle or f"pay_{operation_id}", "status": status,
               "outcome": outcome, "charged_usd": charged_usd,
               "public_key_sha256": hashlib.sha256(bytes.fromhex(self.public_key_hex)).hexdigest()}
        rec["signature"] = self._key.sign(signing_bytes(rec)).hex()
        return rec


class WorkerDied(BaseException):
    """Raised inside :func:`dispatch_then_crash`'s transport after the request was sent: the worker
    is gone before the reply is logged (a BaseException, so no handler of ordinary errors in the
    gate catches it, as nothing catches a SIGKILL)."""


def dispatch_then_crash(trajectory_id: str, policy: AdmissionPolicy, task: TaskStarted, proposal: ToolProposal,
                        send: Callable[[ToolIntent], Any], store: LogStore | None = None) -> LogStore:
    """Record the first worker of a crash-after-send: start ``task``, admit ``proposal`` under
    ``policy``, make its ``ToolIntent`` durable, call ``send(intent)`` (the request leaves), then
    die before any reply is logged.

    Args:
        store: where to record (default: a fresh :class:`~kernel_lib.log.MemoryStore`; the log is
            opened with ``must_survive=NONE``, which every store satisfies).

    Returns: the store; its log for ``trajectory_id`` ends with the ``ToolIntent``.

    Raises: AdmissionDenied: the proposal is not admitted (then ``send`` is never called).
    """
    store = store if store is not None else MemoryStore()
    gate = DispatchGate(TrajectoryLog(store, trajectory_id, must_survive=FailureDomain.NONE), policy)
    gate.start(task)

    def send_then_die(intent: ToolIntent) -> ToolReply:
        send(intent)
        raise WorkerDied(f"worker killed after the request for {intent.operation_id}/{intent.attempt_id} left")

    with contextlib.suppress(WorkerDied):
        gate.run_tool(proposal, send_then_die)
    return store
