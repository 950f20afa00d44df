"""The worker process and the replacement worker (§11.1, §11.3.2, §11.5.3).

This is the internal entry point the live worksheet's controller starts as a child process; users
run ``python -m kernel_lib worksheet ...``.

``python -m kernel_lib.live.worker --store KIND --store-path PATH --executor-url URL
--public-key FILE --snapshot-digest HEX [--pause-at POINT --marker FILE]`` runs the repair
trajectory through the dispatch gate: TaskStarted; a model call to the seeded stand-in (recorded
as ContextBuilt/ModelReplied); admission of ``test_r18`` (Authorized, BudgetReserved); the durable
``ToolIntent`` for ``test_r18``/``attempt1``; ``POST /jobs``; ``ToolResult(accepted, job handle)``;
then it polls the executor until the job finishes, authenticates the signed completion record and
records ``ToolResult(completed|failed, observation_complete)`` with the record as evidence, and the
``BudgetSettled`` usage evidence.

One durable barrier per step (§11.3.1): before it proposes, the worker reads the executor's
declared endpoint contract (``GET /contract``, :func:`endpoint_contract`); the executor answers a
status query by operation id, so the ``test_r18`` proposal declares ``status_lookup=True`` and its
evidence is acknowledged at the log's write tier, made durable by the next barrier. The worker
takes that barrier (``gate.sync()``) before it prints its record, releases its lease or exits
after a failure; its JSON adds ``endpoint_contract`` and ``durability`` (barriers, head, durable
head, tiers).

``--pause-at POINT``: any event the worker appends is a crash point (:func:`crash_points`, the
positions of :func:`reference_events`), written ``N`` (log position), ``TYPE#K`` (the K-th event of
a type) or ``TYPE`` (its first event for ``test_r18``, else its first event; grammar in
:mod:`kernel_lib.live.crash_points`). An unknown point exits 2 listing the valid ones before
anything is opened. Right after that position is durable (the gate's ``on_position`` hook,
called after every appended event), the worker atomically writes ``--marker`` as
``{"paused_at", "point", "event_type", "subject", "log_position", "durable_head", "deferred", "pid"}``
(``deferred``: the point's evidence is acknowledged at the write tier and no barrier covered it
yet, ``durable_head`` < ``log_position``), prints ``paused at
position N``, and blocks until it is killed (the crash controller sends a real SIGKILL).

``--recover``: the replacement worker. It takes ownership (claims the log's fence + 1 as its
owner_epoch, read and installed in one atomic step of the store, so two replacements racing
without a coordinator never share an epoch),
folds the surviving log and reports the record it rebuilt (``recovered``: operations with status
and attempt id, budget with the held reservations, the table 3 conclusion per operation) — it
invents no outcome. With ``--reconcile`` it then queries the executor by operation id for every
in-doubt tool operation, authenticates a completion record before recording it as new evidence
(``source="reconciliation"``) plus usage evidence, and otherwise keeps the operation in doubt and
says why. It prints one JSON object ``{"recovered", "reconciled", "model", "resume_timeline"}`` on
stdout.

Timing the resume (§11.5, eq. 7). The replacement times each stage it runs with
:class:`kernel_lib.resume.stages.StageTimer` and reports them under ``resume_timeline``
(:meth:`kernel_lib.resume.stages.ResumeTimeline.to_dict`): ``ownership`` (the lease or bare fence in the
log plus the fence at the executor), ``checkpoint_suffix_read`` (reading the log; it has no
checkpoint), ``fold``, ``workspace_restore`` (with ``--workspace-snapshot``: the ``ws_r18`` snapshot
the log names is verified and copied into a fresh directory under ``--restore-root``),
``reconciliation`` (the executor queries and the evidence recorded) and ``prefill``, which is
computed from the ``--prefill-*`` givens, never measured. Without ``--reconcile`` the replacement
only inspects: ownership, workspace and reconciliation are reported as not run and no prefill is
needed.

Arguments are checked before anything is read or owned: ``--restore-root`` and
``--workspace-snapshot`` must be existing directories, ``--inbox`` must name a file in an existing
directory that is absent or an SQLite result inbox (opened read-only to check), and with
``--reconcile`` the ``--public-key`` must load. A bad value exits 2 with ``error: ...`` on stderr;
no lease is taken and no fence moves. If anything fails once a lease was granted, the lease is
released before the worker exits, so the next replacement need not wait out its ttl.

Availability and ownership (§11.5.1). Before it folds anything the replacement proves the
authoritative prefix complete (:func:`kernel_lib.ownership.leases.check_available_at`, on a read-only
open so that a missing store is reported, not created empty); if it cannot, it prints
``{"status": "unavailable", "availability": {...}}`` and exits with code 3. Both modes send
``trajectory_id`` and their ``owner_epoch`` with every ``POST /jobs``, and the replacement
installs its new epoch at the executor (``POST /fences``) as well as in the log.

``--coordinator FILE --owner-id ID --lease-ttl-s S``: ownership comes from a lease granted by the
:class:`~kernel_lib.ownership.leases.SQLiteOwnershipCoordinator` in FILE (a new owner_epoch per grant,
installed as the log's fence before the log is read, and checked again by the dispatch gate at
its recheck). The worker renews its lease while it polls; the replacement waits up to
``--lease-wait-s`` for an earlier owner's lease to expire.

``--stall-after-dispatch`` (with ``--coordinator`` and ``--marker``): the zombie of §11.5.1. Right
after ``test_r18`` was dispatched and its acceptance logged, the worker renews its lease (its last
successful ownership check), writes the marker ``{"stalled_after", "owner_epoch", "pid", ...}`` and
parks until it receives SIGCONT; the controller freezes it with SIGSTOP meanwhile. The parking only
pins the stall to one exact point: between a lease check and the next action, where any real
pause (a GC pause, swapping, a partition) can land. Resumed, it acts on its stale belief: it
appends the completion evidence, tries a new attempt through its dispatch gate, and re-sends its
original request to the executor as an HTTP retry would, and only then looks at its lease. It
prints ``{"zombie": {...}}`` with what each boundary answered.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import signal
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate, ModelCall, ToolProposal, ToolReply, conclude
from kernel_lib.errors import (
    AdmissionDenied,
    ConfigError,
    DispatchWithheld,
    FencedRequestError,
    KernelError,
    KernelException,
    LeaseHeldError,
    LeaseLostError,
    LiveProcessError,
    StoreError,
)
from kernel_lib.core.events import Event, TaskStarted, ToolIntent
from kernel_lib.log import FailureDomain, MemoryStore, TrajectoryLog, open_store
from kernel_lib.ownership.leases import LeaseCheck, SQLiteOwnershipCoordinator, check_available_at, take_ownership
from kernel_lib.core.record import TERMINAL_STATES, TrajectoryRecord, fold, initial_record
from kernel_lib.resume.stages import DEFAULT_PREFILL as _DP
from kernel_lib.resume.stages import PrefillModel, StageTimer
from kernel_lib.errors import EvidenceSignatureError, SnapshotMismatchError
from kernel_lib.live.executor import ENDPOINT_CONTRACT, load_public_key, verify_completion
from kernel_lib.sim.model import MODEL_NAME, StochasticModel, repair_prompt
from kernel_lib.live.crash_points import CrashPoint, points_of, resolve_point
from kernel_lib.live.orphan import watch_parent
from kernel_lib.live.workspace import copy_verified

TRAJECTORY = "traj_repair_r18"
OPERATION = "test_r18"
ATTEMPT = "attempt1"
GRANT = "grant_repair"
TEST_BOUND_USD = 0.50
#: Default givens of the computed prefill stage (context tokens, cached prefix tokens, tokens/s):
#: :data:`kernel_lib.resume.stages.DEFAULT_PREFILL`, an assumption, not a measurement.
DEFAULT_PREFILL = (_DP.context_tokens, _DP.cached_prefix_tokens, _DP.prefill_tokens_per_s)
#: The endpoint repeat contract of the worksheet's run_tests tool (its tool definition; the
#: executor dedups by operation id), declared with every test_r18 intent.
TOOL_REPEAT_CONTRACT = "idempotency_key"
#: The snapshot digest :func:`reference_events` records under (any digest gives the same event types).
REFERENCE_DIGEST = "0" * 64


def policy() -> AdmissionPolicy:
    return AdmissionPolicy(grants={GRANT: {"run_tests", MODEL_NAME}})


def task(snapshot_digest: str) -> TaskStarted:
    return TaskStarted(task_id="repair_r18", requester="alice", objective="make the failing test pass",
                       grant_ids=[GRANT], budget_ceiling_usd=5.0, finalization_reserve_usd=0.5,
                       workspace_ref=f"ws_r18@sha256:{snapshot_digest}",
                       config={"model": MODEL_NAME, "harness": "kernel_lib.live"})


def _client():
    import httpx
    return httpx.Client(timeout=5.0, trust_env=False)   # loopback: never through a proxy


def _evidence(record: dict[str, Any]) -> dict[str, str]:
    return {"signed_record": json.dumps({k: v for k, v in record.items() if k != "signature"}, sort_keys=True),
            "signature_ed25519": record["signature"], "signed_by": record.get("executor_id", ""),
            "public_key_sha256": record.get("public_key_sha256", "")}


def reply_from_record(record: dict[str, Any]) -> ToolReply:
    """The ToolReply recording an authenticated completion record."""
    return ToolReply(status=record["status"], job_handle=record["job_handle"], outcome=record["outcome"],
                     observation_complete=True, evidence=_evidence(record), charged_usd=record["charged_usd"])


def check_correlates(record: dict[str, Any], op_id: str, attempt_id: str | None, intent_args: dict[str, Any]) -> None:
    """The authenticated record must be about this operation, attempt and snapshot (§11.3.3:
    evidence is correlated before it updates the operation table)."""
    want = {"operation_id": op_id, "snapshot_digest": intent_args.get("snapshot_digest"),
            "check": intent_args.get("check")}
    if attempt_id is not None:
        want["attempt_id"] = attempt_id
    bad = {k: (record.get(k), v) for k, v in want.items() if record.get(k) != v}
    if bad:
        raise EvidenceSignatureError(f"completion record does not correlate with the logged intent: {bad}")


def job_request(intent: ToolIntent, trajectory_id: str, owner_epoch: int) -> dict[str, Any]:
    """The ``POST /jobs`` body for ``intent``, stamped with the sender's ownership generation and
    carrying the intent's ``idempotency_key`` (when it has one; the transport also sends it as the
    ``Idempotency-Key`` header)."""
    body = {"operation_id": intent.operation_id, "attempt_id": intent.attempt_id,
            "snapshot_digest": intent.arguments["snapshot_digest"], "check": intent.arguments["check"],
            "trajectory_id": trajectory_id, "owner_epoch": owner_epoch}
    if intent.idempotency_key is not None:
        body["idempotency_key"] = intent.idempotency_key
    return body


def make_transport(client, url: str, log: TrajectoryLog):
    """The tool transport: ``POST /jobs`` stamped with ``log``'s current owner_epoch.

    A 409 for a stale or missing epoch raises FencedRequestError (nothing ran, and this worker is
    not the owner, so there is nothing it may record); other refusals become failed evidence."""

    def transport(intent: ToolIntent) -> ToolReply:
        headers = {"Idempotency-Key": intent.idempotency_key} if intent.idempotency_key else {}
        r = client.post(f"{url}/jobs", json=job_request(intent, log.trajectory_id, log.owner_epoch), headers=headers)
        body = r.json()
        if r.status_code == 409 and body.get("reason") in ("stale_owner_epoch", "unfenced_request"):
            raise FencedRequestError(f"the executor refused {intent.operation_id}: {body.get('error')}",
                                     owner_epoch=body.get("owner_epoch"), fence=body.get("fence"))
        if r.status_code != 200:
            return ToolReply(status="failed", outcome={"error": body.get("error", r.text)[:300]},
                             observation_complete=True, charged_usd=0.0)
        return ToolReply(status="accepted", job_handle=body["job_handle"])

    return transport


def install_executor_fence(client, url: str | None, trajectory_id: str, owner_epoch: int) -> dict[str, Any]:
    """Install ``owner_epoch`` at the executor (``POST /fences``); returns what it answered
    (``{"installed": bool, ...}``), never raises: an unreachable executor is reported."""
    if not url:
        return {"installed": False, "note": "no executor URL"}
    try:
        r = client.post(f"{url}/fences", json={"trajectory_id": trajectory_id, "owner_epoch": owner_epoch})
        return {"installed": r.status_code == 200, "status_code": r.status_code, **r.json()}
    except Exception as exc:   # noqa: BLE001 - reported; the executor then still holds the older epoch
        return {"installed": False, "note": f"executor unreachable ({type(exc).__name__})"}


def _coordinator(args: argparse.Namespace):
    """The ownership coordinator named by ``--coordinator`` (an SQLite file, or ``etcd:URL,...``)."""
    if not args.coordinator:
        return None
    from kernel_lib.quorum.coordinator import open_coordinator
    return open_coordinator(args.coordinator)


def _acquire(coord: SQLiteOwnershipCoordinator, store, args: argparse.Namespace, wait_s: float):
    """take_ownership, retrying while another owner's lease is live, for up to ``wait_s`` seconds."""
    deadline = time.monotonic() + wait_s
    waited = 0.0
    while True:
        try:
            lease = take_ownership(coord, store, args.trajectory, args.owner_id, args.lease_ttl_s)
            return lease, waited
        except LeaseHeldError as exc:
            if time.monotonic() >= deadline:
                raise
            pause = min(max(exc.remaining_s, 0.01), 0.1)
            time.sleep(pause)
            waited += pause


# ------------------------------------------------------------------------------------------------
# the worker
# ------------------------------------------------------------------------------------------------


def _release_quietly(coord, lease) -> None:
    """Give a lease back after a failure (the epoch stays fenced; only the wait is lifted)."""
    if coord is not None and lease is not None:
        with contextlib.suppress(KernelError):
            coord.release(lease)


def endpoint_contract(client, url: str) -> dict[str, Any]:
    """What the executor declares about its ``run_tests`` endpoint (``GET /contract``,
    :data:`kernel_lib.live.executor.ENDPOINT_CONTRACT`): ``{"status_lookup": bool, "repeat_contract",
    "declared_by"}``. ``status_lookup`` is True only if the executor said exactly that; an executor
    that does not answer, or answers anything else, is taken to offer no status lookup (the safe
    default: its evidence then waits for its own barrier). Never raises."""
    try:
        body = client.get(f"{url}/contract").json()
    except Exception as exc:   # noqa: BLE001 - no declaration: nothing is assumed
        return {"status_lookup": False, "repeat_contract": TOOL_REPEAT_CONTRACT,
                "declared_by": f"nothing: GET /contract failed ({type(exc).__name__})"}
    ok = isinstance(body, dict) and body.get("status_lookup") is True and body.get("tool") == "run_tests"
    return {"status_lookup": ok, "repeat_contract": TOOL_REPEAT_CONTRACT,
            "declared_by": f"GET {url}/contract" if ok else "GET /contract did not declare a status lookup"}


def propose(gate: DispatchGate, seed: int, snapshot_digest: str, status_lookup: bool = False) -> ToolProposal:
    """The trajectory's model turn through ``gate`` (the seeded stand-in, ``model_call_1``) and the
    ``test_r18`` proposal it leads to (the run_tests tool under :data:`TOOL_REPEAT_CONTRACT`).
    ``status_lookup``: what the executor declared (:func:`endpoint_contract`); True lets the gate
    acknowledge test_r18's evidence at the write tier, covered by the log's next barrier."""
    model = StochasticModel(seed)
    ref = f"ws_r18@sha256:{snapshot_digest}"
    reply = gate.run_model(ModelCall(invocation_id="model_call_1", model=MODEL_NAME, delivered_input=repair_prompt(ref),
                                     grant_id=GRANT, cost_bound_usd=0.20),
                           lambda ctx: model.reply(ctx.delivered_input))
    prop = reply.proposal or {}
    arguments = {**prop.get("arguments", {}), "snapshot_digest": snapshot_digest}
    return ToolProposal(operation_id=OPERATION, attempt_id=ATTEMPT, tool=prop.get("tool", "run_tests"),
                        arguments=arguments, grant_id=GRANT, cost_bound_usd=TEST_BOUND_USD,
                        repeat_contract=TOOL_REPEAT_CONTRACT, input_ref=ref, revision="r18",
                        status_lookup=status_lookup)


class _DeferralLog(TrajectoryLog):
    """A TrajectoryLog noting the positions the gate appended deferred (:func:`reference_trajectory`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.deferred_positions: set[int] = set()

    def append_many(self, payloads, *, event_ids=None, deferred: bool = False):
        events = super().append_many(payloads, event_ids=event_ids, deferred=deferred)
        if deferred:
            self.deferred_positions.update(e.sequence_number for e in events)
        return events


def reference_trajectory(seed: int = 0, snapshot_digest: str = REFERENCE_DIGEST) -> tuple[list[Event], list[int]]:
    """The events a worker run appends when nothing crashes, recorded in memory through the same
    gate steps (:func:`propose`, the tool dispatch, the completion evidence) with stand-in replies
    for the executor: TaskStarted, the model call's admission, context, reply and settlement,
    test_r18's admission, intent, acceptance, completion and settlement. The crash points of the
    worksheet are its positions (:func:`crash_points`); the event types do not depend on ``seed``.

    The proposal declares what this package's executor declares (:data:`ENDPOINT_CONTRACT`), as
    the worker's does when it reads ``GET /contract``.

    Returns ``(events, batch_ends)``: ``batch_ends`` the last position of every append batch (the
    gate reports each event once its whole batch is acknowledged)."""
    events, ends, _ = _reference(seed, snapshot_digest)
    return events, ends


@functools.lru_cache(maxsize=16)
def _reference(seed: int, snapshot_digest: str) -> tuple[list[Event], list[int], frozenset[int]]:
    """:func:`reference_trajectory` plus the positions the gate appended deferred."""
    log = _DeferralLog(MemoryStore(), TRAJECTORY, must_survive=FailureDomain.NONE)
    ends: set[int] = set()
    gate = DispatchGate(log, policy(), on_position=lambda name, ev: ends.add(log.head) if ev is not None else None)
    gate.start(task(snapshot_digest))
    proposal = propose(gate, seed, snapshot_digest, status_lookup=ENDPOINT_CONTRACT["status_lookup"])
    gate.run_tool(proposal, lambda intent: ToolReply(status="accepted", job_handle="job_reference"))
    gate.record_evidence(OPERATION, ATTEMPT, ToolReply(
        status="completed", job_handle="job_reference", outcome={"passed": 0, "failed": 0},
        observation_complete=True, evidence={"signed_by": "reference"}, charged_usd=0.0),
        reconcilable=proposal.status_lookup)
    gate.sync()
    return list(log.events()), sorted(ends), frozenset(log.deferred_positions)


def reference_events(seed: int = 0, snapshot_digest: str = REFERENCE_DIGEST) -> list[Event]:
    """The events of :func:`reference_trajectory`."""
    return reference_trajectory(seed, snapshot_digest)[0]


@functools.lru_cache(maxsize=16)
def crash_points(seed: int = 0) -> tuple[CrashPoint, ...]:
    """Every position of the worker's trajectory as a :class:`~kernel_lib.live.crash_points.CrashPoint`
    (:func:`reference_events`), in log order."""
    events, ends, deferred = _reference(seed, REFERENCE_DIGEST)
    return points_of(events, ends, deferred)


def resolve_crash_point(spec: Any, seed: int = 0, *, parameter: str | None = None) -> CrashPoint:
    """The crash point ``spec`` names (``N``, ``TYPE#K`` or ``TYPE``; :mod:`kernel_lib.live.crash_points`).
    ``parameter``: the name the user passed ``spec`` under, which the error message names.

    Raises: UnknownCrashPointError (a ConfigError) listing every valid point."""
    return resolve_point(spec, crash_points(seed), OPERATION, parameter=parameter)


def _pauser(args: argparse.Namespace, point: CrashPoint | None, log: TrajectoryLog):
    """The gate's ``on_position`` hook: right after ``point``'s event is acknowledged (with the rest
    of its append batch), write the marker ``{paused_at, point, event_type, subject, event_position,
    log_position, durable_head, deferred, pid}`` atomically (``log_position``: the log's head,
    ``point.durable_at``; ``durable_head``: the last position a barrier covered, below the head
    when ``deferred`` evidence waits for the next barrier), say
    so on stdout and block until killed. An event at that position of another type than the
    reference trajectory's raises LiveProcessError (the run diverged: pausing there would kill
    elsewhere)."""

    def on_position(name: str, ev: Event | None) -> None:
        if point is None or ev is None or ev.sequence_number != point.position:
            return
        if ev.event_type != point.event_type:
            raise LiveProcessError(f"log position {point.position} is a {ev.event_type} in this run, not the "
                                   f"{point.event_type} of the reference trajectory; not pausing there")
        marker = {"paused_at": args.pause_at, "point": point.label, "event_type": ev.event_type,
                  "subject": point.subject, "event_position": ev.sequence_number, "log_position": log.head,
                  "durable_head": log.durable_head, "deferred": log.durable_head < log.head, "pid": os.getpid()}
        if args.marker:
            tmp = Path(args.marker + ".tmp")
            tmp.write_text(json.dumps(marker))
            os.replace(tmp, args.marker)
        print(f"paused at position {log.head} (after {point.describe()})", flush=True)
        while True:   # block until killed
            signal.pause()

    return on_position


def run_worker(args: argparse.Namespace) -> int:
    # the pause point is checked before anything is opened or appended
    point = resolve_crash_point(args.pause_at, args.seed, parameter="--pause-at") if args.pause_at is not None else None
    store = open_store(args.store, args.store_path, create=True)   # the worker starts the trajectory's log
    coord = _coordinator(args)
    lease = None
    gate = None
    try:
        if coord is not None:
            lease, _ = _acquire(coord, store, args, args.lease_wait_s)
        log = TrajectoryLog(store, args.trajectory, must_survive="host_crash",
                            owner_epoch=lease.owner_epoch if lease else 0)

        gate = DispatchGate(log, policy(), on_position=_pauser(args, point, log),
                            fence_check=LeaseCheck(coord, lease) if lease else None)
        client = _client()
        contract = endpoint_contract(client, args.executor_url)   # the executor's declaration, read once
        gate.start(task(args.snapshot_digest))
        proposal = propose(gate, args.seed, args.snapshot_digest, status_lookup=contract["status_lookup"])
        arguments = proposal.arguments
        transport = make_transport(client, args.executor_url, log)

        rec = gate.run_tool(proposal, transport)
        if args.stall_after_dispatch:
            return _zombie(args, coord, lease, gate, proposal, transport, client)
        op = rec.operations[OPERATION]
        if op.status != "established":
            key = load_public_key(args.public_key)
            deadline = time.monotonic() + args.poll_timeout_s
            while time.monotonic() < deadline:
                if lease is not None:
                    try:
                        lease = coord.renew(lease)
                    except LeaseLostError as exc:   # not the owner any more: stop acting (no sync either:
                        # the log is the new owner's, which reconciles whatever a host crash lost)
                        print(json.dumps({"lease_lost": str(exc), "record": gate.record.to_dict()}, sort_keys=True),
                              flush=True)
                        return 4
                st = client.get(f"{args.executor_url}/operations/{OPERATION}").json()
                if st["status"] in ("completed", "failed") and st.get("record"):
                    record = verify_completion(st["record"], key)
                    check_correlates(record, OPERATION, ATTEMPT, arguments)
                    gate.record_evidence(OPERATION, ATTEMPT, reply_from_record(record),
                                         reconcilable=proposal.status_lookup)
                    break
                time.sleep(args.poll_interval_s)
        # the trajectory's last barrier: deferred evidence is durable before anyone is told (the
        # record printed, the lease released)
        gate.sync()
        print(json.dumps({"record": gate.record.to_dict(), "endpoint_contract": contract,
                          "durability": {"barriers": log.barriers, "head": log.head, "durable_head": log.durable_head,
                                         "write_tier": log.deferred_tier.label, "tier": log.tier.label}},
                         sort_keys=True), flush=True)
        if lease is not None:
            coord.release(lease)
        return 0
    except BaseException:
        if gate is not None:   # a failure: make what was acknowledged durable before exit and hand-over
            with contextlib.suppress(KernelException, OSError):
                gate.sync()
        _release_quietly(coord, lease)
        raise
    finally:
        store.close()
        if coord is not None:
            coord.close()


def _zombie(args: argparse.Namespace, coord, lease, gate: DispatchGate, proposal: ToolProposal, transport,
            client) -> int:
    """Stall after the dispatch, then act on a stale belief of ownership (module docstring)."""
    gate.sync()                                    # the acceptance is durable before anyone is told of it
    lease = coord.renew(lease)                     # the last ownership check that succeeds
    continued = []
    signal.signal(signal.SIGCONT, lambda signum, frame: continued.append(time.time()))
    marker = {"stalled_after": "dispatch", "operation_id": OPERATION, "owner_epoch": lease.owner_epoch,
              "owner_id": lease.owner_id, "pid": os.getpid(), "log_position": gate.log.head,
              "lease_expires_at_s": lease.expires_at_s, "stalled_at_s": time.time()}
    tmp = Path(args.marker + ".tmp")
    tmp.write_text(json.dumps(marker))
    os.replace(tmp, args.marker)
    while not continued:                           # parked; SIGSTOP freezes it here
        time.sleep(0.02)
    out: dict[str, Any] = {"owner_epoch": lease.owner_epoch, "owner_id": lease.owner_id,
                           "resumed_at_s": continued[0], "stalled_at_s": marker["stalled_at_s"], "attempts": []}

    # 1. late append: the completion evidence it was waiting for
    key = load_public_key(args.public_key)
    deadline = time.monotonic() + args.poll_timeout_s
    record = None
    while time.monotonic() < deadline:
        st = client.get(f"{args.executor_url}/operations/{OPERATION}").json()
        if st["status"] in ("completed", "failed") and st.get("record"):
            record = verify_completion(st["record"], key)
            break
        time.sleep(args.poll_interval_s)
    step: dict[str, Any] = {"action": f"append ToolResult({record['status'] if record else 'none'}) for "
                                      f"{OPERATION}/{ATTEMPT}", "boundary": "log"}
    try:
        if record is None:
            raise KernelError("no completion record arrived to append")
        gate.record_evidence(OPERATION, ATTEMPT, reply_from_record(record))
        step.update(accepted=True, note="the log accepted an append from a stale owner")
    except StoreError as exc:
        step.update(accepted=False, error_type=type(exc).__name__, error=str(exc))
    out["attempts"].append(step)

    # 2. late dispatch through its gate: a second attempt of the same operation
    retry = ToolProposal(**{**proposal.__dict__, "attempt_id": "attempt2"})
    step = {"action": f"dispatch {OPERATION}/attempt2 through the dispatch gate", "boundary": "dispatch gate"}
    sent = []

    def counting(intent: ToolIntent) -> ToolReply:
        sent.append(intent.attempt_id)
        return transport(intent)

    try:
        gate.run_tool(retry, counting)
        step.update(accepted=True, request_sent=bool(sent), note="the gate let a stale owner dispatch")
    except (StoreError, DispatchWithheld, AdmissionDenied, FencedRequestError) as exc:
        step.update(accepted=False, request_sent=bool(sent), error_type=type(exc).__name__, error=str(exc),
                    refused_by="log fence at the gate's first durable step" if isinstance(exc, StoreError)
                    else "dispatch-time recheck" if isinstance(exc, DispatchWithheld) else type(exc).__name__)
    step["gate_recheck_now"] = gate.fence_check(gate.log.trajectory_id, gate.log.owner_epoch) \
        if gate.fence_check else None
    out["attempts"].append(step)

    # 3. late dispatch past the gate: its original request re-sent, as an HTTP client's retry would
    original = gate.record.operations[OPERATION]
    r = client.post(f"{args.executor_url}/jobs", json={
        "operation_id": OPERATION, "attempt_id": ATTEMPT, "snapshot_digest": original.arguments["snapshot_digest"],
        "check": original.arguments["check"], "trajectory_id": gate.log.trajectory_id,
        "owner_epoch": gate.log.owner_epoch})
    body = r.json()
    out["attempts"].append({"action": f"re-send POST /jobs for {OPERATION}/{ATTEMPT} (an HTTP retry)",
                            "boundary": "executor", "accepted": r.status_code == 200, "status_code": r.status_code,
                            "reason": body.get("reason"), "error": body.get("error"),
                            "fence": body.get("fence")})

    # 4. only now does it look at its lease
    try:
        coord.renew(lease)
        out["lease_after_resume"] = {"renewed": True}
    except LeaseLostError as exc:
        out["lease_after_resume"] = {"renewed": False, "error_type": type(exc).__name__, "reason": exc.reason,
                                     "current_epoch": exc.current_epoch, "error": str(exc)}
    print(json.dumps({"zombie": out}, sort_keys=True), flush=True)
    return 0


# ------------------------------------------------------------------------------------------------
# the replacement worker
# ------------------------------------------------------------------------------------------------


def summarize(rec: TrajectoryRecord) -> dict[str, Any]:
    """The recovered record as the worksheet reports it: operations keyed by id (status, attempt
    id, job handle, last evidence, table 3 conclusion), the budget with held reservations, the
    in-doubt list, and the full record."""
    d = rec.to_dict()
    ops = {}
    for k, op in rec.operations.items():
        att = op.attempts.get(op.current_attempt_id or "")
        concl, why = conclude(rec, k, prefix_complete=True) if op.kind == "tool" else (op.status, "")
        ops[k] = {"kind": op.kind, "status": op.status, "attempt_id": op.current_attempt_id,
                  "job_handle": op.job_handle, "last_result_status": att.last_result_status if att else None,
                  "outcome": op.outcome if op.status == "established" else None,
                  "conclusion": concl, "conclusion_reason": why}
    b = d["budget"]
    return {"log_position": rec.last_sequence_number, "owner_epoch": rec.owner_epoch,
            "control_state": rec.control_state, "operations": ops, "in_doubt": rec.in_doubt(),
            "attempts_in_doubt": [list(x) for x in rec.attempts_in_doubt()],
            "budget": {"ceiling_usd": b["ceiling_usd"], "actual_consumption_usd": b["actual_consumption_usd"],
                       "outstanding_reservations": b["outstanding_reservations"],
                       "outstanding_reservations_usd": b["outstanding_reservations_usd"],
                       "finalization_reserve_usd": b["finalization_reserve_usd"], "available_usd": b["available_usd"]},
            "record": d}


def _reconcile_one(gate: DispatchGate, op_id: str, client, url: str, key, timeout_s: float,
                   interval_s: float) -> dict[str, Any]:
    rec = gate.record
    op = rec.operations[op_id]
    att_id = op.current_attempt_id
    out: dict[str, Any] = {"attempt_id": att_id, "job_handle_logged": op.job_handle}
    deadline = time.monotonic() + timeout_s
    waited = False
    while True:
        try:
            st = client.get(f"{url}/operations/{op_id}").json()
        except Exception as exc:   # unreachable: the operation stays in doubt
            out.update(executor_status="unreachable", action="kept in doubt",
                       note=f"executor unreachable ({type(exc).__name__}); {op_id} stays in doubt with its "
                            "reservation held")
            return out
        if st["status"] == "running" and time.monotonic() < deadline:
            waited = True
            time.sleep(interval_s)
            continue
        break
    out["executor_status"] = st["status"]
    out["job_handle"] = st.get("job_handle")
    out["waited_for_completion"] = waited
    if st["status"] == "unknown":
        out.update(action="kept in doubt", signature_verified=None,
                   note=f"no job known to the executor for {op_id}; it stays in doubt with its reservation held. "
                        "Absence alone is not proof of non-dispatch: a delayed request may still arrive. The new "
                        "owner_epoch installed at the executor makes it refuse such a request, but this executor "
                        "keeps its fences in memory only, so that protection ends if it restarts. The endpoint's "
                        f"repeat contract ({op.repeat_contract}) decides whether another attempt is safe; it does "
                        "not settle what happened to this one")
        return out
    if st["status"] == "running":
        if st.get("job_handle") and not op.job_handle:
            gate.record_evidence(op_id, att_id, ToolReply(status="running", job_handle=st["job_handle"]),
                                 source="reconciliation")
        out.update(action="kept in doubt", signature_verified=None, charged_so_far_usd=st.get("charged_usd"),
                   note=f"{op_id} is still running on the executor ({st.get('job_handle')}) after {timeout_s:g} s; "
                        "it stays in doubt with its reservation held; reconcile again later")
        return out
    try:
        record = verify_completion(st.get("record") or {}, key)
        check_correlates(record, op_id, None, op.arguments)
    except EvidenceSignatureError as exc:
        out.update(action="kept in doubt", signature_verified=False, note=f"evidence rejected: {exc}")
        return out
    attempt = record["attempt_id"] if record["attempt_id"] in op.attempts else att_id
    gate.record_evidence(op_id, attempt, reply_from_record(record), source="reconciliation")
    out.update(action="recorded verified evidence", signature_verified=True, outcome=record["outcome"],
               status=record["status"], charged_usd=record["charged_usd"],
               note=f"verified completion record ({record['status']}) recorded as evidence from reconciliation; "
                    f"usage {record['charged_usd']} USD settled against the reservation")
    return out


def prefill_model(args: argparse.Namespace) -> PrefillModel:
    """The :class:`~kernel_lib.resume.stages.PrefillModel` of the ``--prefill-*`` options (givens, not
    measurements). Raises ConfigError for values out of range."""
    return PrefillModel(args.prefill_context_tokens, args.prefill_cached_prefix_tokens, args.prefill_tokens_per_s)


def _snapshot_digest_of(rec: TrajectoryRecord) -> str | None:
    ref = (rec.task or {}).get("workspace_ref") or ""
    return ref.split("@sha256:", 1)[1] if "@sha256:" in ref else None


def restore_workspace(args: argparse.Namespace, rec: TrajectoryRecord) -> tuple[Path, str]:
    """The workspace stage of the live resume: verify the ``ws_r18`` snapshot the recovered record
    names (its ``workspace_ref`` digest) and copy it into a fresh directory under
    ``--restore-root`` (default: the directory holding the log), verifying the copy too.

    Returns (the restored directory, the digest). Raises SnapshotMismatchError when the snapshot
    does not hash to the digest the log names, or ``--snapshot-digest`` names another one."""
    logged = _snapshot_digest_of(rec)
    digest = logged or args.snapshot_digest
    if digest is None:
        raise SnapshotMismatchError("neither the recovered record nor --snapshot-digest names the workspace snapshot")
    if logged and args.snapshot_digest and args.snapshot_digest != logged:
        raise SnapshotMismatchError(f"--snapshot-digest {args.snapshot_digest[:16]}… is not the snapshot the log "
                                    f"names ({logged[:16]}…)")
    root = Path(args.restore_root) if args.restore_root else Path(args.store_path).resolve().parent
    fresh = Path(tempfile.mkdtemp(prefix="restored_ws_r18_", dir=root))
    return copy_verified(args.workspace_snapshot, digest, fresh / "ws_r18"), digest


def _ingest_inbox(args: argparse.Namespace, log: TrajectoryLog, gate: DispatchGate) -> dict[str, Any]:
    """Ingest the durable result inbox (§11.5.3) into the new owner's log before anything is asked
    of the executor: records the executor deposited while no worker listened settle their
    operations here, each authenticated again. Returns ``{path, outcomes, settled}`` where
    ``settled`` maps each operation the inbox established to its reconciliation action."""
    from kernel_lib.gate.inbox import ResultInbox
    from kernel_lib.live.executor import EXECUTOR_ID

    before = {k for k, op in gate.record.operations.items() if op.status == "established"}
    if not os.path.exists(args.inbox):   # nothing was ever deposited; a reader does not create the file
        return {"path": args.inbox, "outcomes": [], "settled": {}, "note": "no inbox file yet: nothing deposited"}
    try:
        with ResultInbox(args.inbox, {EXECUTOR_ID: args.public_key}, create=False) as inbox:
            report = inbox.ingest(log, gate.record)
    except (KernelError, sqlite3.Error, OSError) as exc:
        # an unreadable inbox settles nothing; the executor is asked instead
        return {"path": args.inbox, "error": f"{type(exc).__name__}: {exc}", "outcomes": [], "settled": {}}
    outcomes = [dataclasses.asdict(o) for o in report.outcomes]
    settled = {}
    for k, op in gate.record.operations.items():
        if op.status == "established" and k not in before:
            settled[k] = {"attempt_id": op.current_attempt_id, "action": "recorded verified evidence",
                          "source": "inbox", "signature_verified": True, "outcome": op.outcome,
                          "note": f"the executor's signed completion record for {k} was waiting in the durable "
                                  "result inbox; authenticated again and ingested, so the executor was not asked"}
    return {"path": args.inbox, "outcomes": outcomes, "settled": settled}


def _check_directory(option: str, value: str) -> None:
    path = Path(value)
    if not path.exists():
        raise ConfigError(f"{option} {value}: no such directory")
    if not path.is_dir():
        raise ConfigError(f"{option} {value}: not a directory")


def check_inbox_path(value: str) -> None:
    """ConfigError unless ``value`` can be the durable result inbox: a path in an existing
    directory that is not itself a directory and is either absent (the inbox is then created
    empty) or an SQLite database holding the inbox's ``completions`` table (or no table yet).
    An existing file is opened read-only to check it; nothing is created or changed."""
    path = Path(value)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise ConfigError(f"--inbox {value}: its directory {parent} does not exist")
    if path.is_dir():
        raise ConfigError(f"--inbox {value}: is a directory, not an SQLite inbox file")
    if not path.exists():
        return
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        finally:
            db.close()
    except sqlite3.Error as exc:
        raise ConfigError(f"--inbox {value}: not a readable SQLite result inbox ({exc})") from None
    if tables and "completions" not in tables:
        raise ConfigError(f"--inbox {value}: an SQLite database without the inbox's 'completions' table "
                          f"(it holds {sorted(tables)[:5]}); refusing to use it as the result inbox")


def check_recover_args(args: argparse.Namespace) -> None:
    """The replacement's path arguments, checked before anything is read or owned (module
    docstring). Raises ConfigError."""
    if args.restore_root:
        _check_directory("--restore-root", args.restore_root)
    if args.workspace_snapshot:
        _check_directory("--workspace-snapshot", args.workspace_snapshot)
    if args.inbox:
        check_inbox_path(args.inbox)


def _public_key(args: argparse.Namespace):
    """The executor's public key for reconciliation, loaded before ownership. Raises ConfigError."""
    if not args.public_key:
        raise ConfigError("--recover --reconcile needs --public-key (the executor's Ed25519 public key) to "
                          "authenticate completion records")
    try:
        return load_public_key(args.public_key)
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(f"--public-key {args.public_key}: not an Ed25519 public key file or hex "
                          f"({type(exc).__name__}: {exc})") from None


def _check_availability(args: argparse.Namespace, timer: StageTimer):
    """Whether the trajectory can be reconstructed from ``args.store`` (with the blobs of
    ``--blobs``, if given); the time taken goes to ``timer.availability_s``."""
    blobs = None
    if args.blobs:
        from kernel_lib.checkpoint import DirectoryBlobStore
        blobs = DirectoryBlobStore(args.blobs)
    a0 = timer.now_s()
    availability = check_available_at(args.store, args.store_path, args.trajectory, blobs)
    timer.availability_s = timer.now_s() - a0
    return availability


def _model_view(args: argparse.Namespace, recovered_rec, events: list) -> dict[str, Any]:
    """The recorded model reply (reproduced by the fold) next to a fresh sample; ``{}`` when the
    log holds no settled model call."""
    model_view: dict[str, Any] = {}
    mc = recovered_rec.operations.get("model_call_1")
    if mc is not None and mc.outcome:
        ctx = next((e.payload for e in events if e.event_type == "ContextBuilt"), None)
        fresh = StochasticModel(args.fresh_seed).reply(ctx.delivered_input) if ctx else None
        model_view = {"recorded_reply": mc.outcome.get("reply"), "recorded_seed": args.seed,
                      "fresh_seed": args.fresh_seed, "fresh_reply": fresh.reply if fresh else None,
                      "note": "folding reproduces the recorded reply exactly; re-prompting with a fresh sample "
                              "gives a different continuation, so recovery uses the log, not the model"}
    return model_view


def _restore_stage(args: argparse.Namespace, timer: StageTimer, recovered_rec) -> None:
    """The timed ``workspace_restore`` stage: restore ``--workspace-snapshot`` (verified), or
    record the stage as skipped when none was given."""
    if args.workspace_snapshot:
        with timer.stage("workspace_restore") as st:
            restored, digest = restore_workspace(args, recovered_rec)
            st.detail = f"ws_r18@sha256:{digest[:16]}… verified, copied to {restored} and the copy verified"
    else:
        timer.skip("workspace_restore", "no --workspace-snapshot given: no workspace restored")


def _settle_operations(args: argparse.Namespace, gate, recovered_rec, inbox_view: dict[str, Any] | None, client,
                       key) -> dict[str, Any]:
    """What reconciliation does with each tool operation of the recovered record, by operation
    id: taken from the inbox when it settled it, reconciled with the executor when in doubt, left
    undispatched when no durable intent exists; ``test_r18`` is reported absent if never proposed."""
    actions: dict[str, Any] = {}
    for op_id, op in list(recovered_rec.operations.items()):
        if op.kind != "tool":
            continue
        if op_id in (inbox_view or {}).get("settled", {}):
            actions[op_id] = inbox_view["settled"][op_id]
        elif op.status == "in_doubt":
            actions[op_id] = _reconcile_one(gate, op_id, client, args.executor_url, key,
                                            args.reconcile_timeout_s, args.poll_interval_s)
        elif op.status in ("proposed", "admitted"):
            actions[op_id] = {"attempt_id": op.current_attempt_id, "action": "not dispatched",
                              "note": f"no durable intent for {op_id} in a complete authoritative "
                                      "prefix: it was not dispatched; reconsider the proposal under "
                                      "current admission, do not dispatch automatically"
                                      + ("; its reservation stays held until then" if op.reservation_id
                                         else "")}
    if OPERATION not in recovered_rec.operations:
        actions[OPERATION] = {"action": "absent", "note": f"{OPERATION} was never proposed in the "
                              "surviving log; the next model turn may propose it"}
    return actions


def run_recover(args: argparse.Namespace) -> int:
    prefill = prefill_model(args)               # refuse bad givens before anything is read
    check_recover_args(args)
    timer = StageTimer()
    availability = _check_availability(args, timer)
    if not availability.ok:
        print(json.dumps({"status": "unavailable", "availability": availability.to_dict(), "recovered": None,
                          "reconciled": None, "model": {}}, sort_keys=True), flush=True)
        print("error: reconstruction unavailable: " + "; ".join(availability.reasons), file=sys.stderr)
        return 3
    key = _public_key(args) if args.reconcile else None     # before ownership, like every argument
    store = open_store(args.store, args.store_path)
    lease = None
    client = None
    try:
        coord = _coordinator(args)
    except BaseException:
        store.close()
        raise
    try:
        ownership: dict[str, Any] | None = None
        new_epoch = 0
        if args.reconcile:
            # ownership first: once the fence is in, no older owner extends the log (reading it for
            # inspection alone needs no ownership)
            client = _client()
            with timer.stage("ownership") as st:
                if coord is not None:
                    lease, waited = _acquire(coord, store, args, args.lease_wait_s)
                    new_epoch = lease.owner_epoch
                    ownership = {"lease": lease.to_dict(), "waited_for_lease_s": round(waited, 3),
                                 "log_fence": store.fence(args.trajectory)}
                else:   # read the fence and install the next epoch in one atomic step of the store
                    new_epoch = store.claim_epoch(args.trajectory)
                executor_fence = install_executor_fence(client, args.executor_url, args.trajectory, new_epoch)
                if ownership is not None:
                    ownership["executor_fence"] = executor_fence
                st.detail = ((f"lease owner_epoch={new_epoch} from the coordinator (waited {waited:.3f} s)"
                              if lease is not None else f"owner_epoch={new_epoch} installed without a lease")
                             + "; fenced in the log and at the executor"
                             + ("" if executor_fence.get("installed") else " (the executor did not take it)"))
        else:
            timer.skip("ownership", "inspection only: reading the log needs no ownership, none taken")
        with timer.stage("checkpoint_suffix_read") as st:
            events = list(store.read(args.trajectory))
            st.detail = f"{len(events)} events read from the {args.store} log (no checkpoint: all of it is the suffix)"
        with timer.stage("fold") as st:
            recovered_rec = fold(initial_record(args.trajectory), events)
            st.detail = f"{len(events)} events folded from record_0; in doubt: {recovered_rec.in_doubt()}"
        recovered = summarize(recovered_rec)
        recovered["store_recovery_notes"] = list(store.recovery.notes()) if getattr(store, "recovery", None) else []
        model_view = _model_view(args, recovered_rec, events)
        out: dict[str, Any] = {"recovered": recovered, "model": model_view, "reconciled": None,
                               "availability": availability.to_dict()}
        if ownership is not None:
            out["ownership"] = ownership
        if args.reconcile:
            _restore_stage(args, timer, recovered_rec)
            with timer.stage("reconciliation") as st:
                log = TrajectoryLog(store, args.trajectory, must_survive="host_crash", owner_epoch=new_epoch)
                gate = DispatchGate(log, policy(), record=recovered_rec,
                                    fence_check=LeaseCheck(coord, lease) if lease else None)
                inbox_view = _ingest_inbox(args, log, gate) if args.inbox else None
                if inbox_view is not None:
                    out["inbox"] = inbox_view
                actions = _settle_operations(args, gate, recovered_rec, inbox_view, client, key)
                # a reservation whose operation is no longer in doubt or running is settled here (§11.5.3)
                orphans = [ev.payload.reservation_id for ev in gate.settle_orphaned_reservations()]
                if orphans:
                    actions["orphaned_reservations"] = {"action": "settled", "reservation_ids": orphans}
                st.detail = "; ".join(f"{k}: {a.get('action')}" for k, a in actions.items()) or "nothing to settle"
            out["reconciled"] = {**summarize(gate.record), "actions": actions, "owner_epoch_installed": new_epoch}
            state = gate.record.control_state
            chosen = (PrefillModel.none(f"the trajectory is {state}: no model call follows")
                      if state == "PAUSED" or state in TERMINAL_STATES else prefill)
        else:
            timer.skip("workspace_restore", "inspection only: no workspace needed to read the record")
            timer.skip("reconciliation", "inspection only: nothing reconciled")
            chosen = PrefillModel.none("inspection only: no model call follows")
        out["resume_timeline"] = timer.timeline(chosen).to_dict()
        if lease is not None and args.release_lease:
            coord.release(lease)
        print(json.dumps(out, sort_keys=True), flush=True)
        return 0
    except BaseException:
        _release_quietly(coord, lease)
        raise
    finally:
        if client is not None:
            client.close()
        store.close()
        if coord is not None:
            coord.close()


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m kernel_lib.live.worker",
        description="The worker and the replacement worker of the live worksheet (§11.1, §11.3.2, §11.5.3). "
                    "This is the internal entry point the worksheet's controller starts as a child process; "
                    "to run the worksheet, use `python -m kernel_lib worksheet ...`. Without --recover it runs the "
                    "repair trajectory through the dispatch gate; with --recover it is the replacement that folds "
                    "the surviving log (and, with --reconcile, takes ownership and settles in-doubt operations), "
                    "printing one JSON object on stdout. Bad arguments exit 2 with `error: ...` on stderr.")
    ap.add_argument("--store", choices=["sqlite", "segment", "etcd"], required=True,
                    help="kind of the durable log store holding the trajectory")
    ap.add_argument("--store-path", required=True,
                    help="the log: the SQLite file (--store sqlite), the segment directory (--store segment), or the "
                         "etcd members' client URLs, comma-separated (--store etcd)")
    ap.add_argument("--trajectory", default=TRAJECTORY,
                    help="id of the trajectory to run or recover (default %(default)s)")
    ap.add_argument("--executor-url", required=False,
                    help="base URL of the executor service (e.g. http://127.0.0.1:PORT); needed in worker mode, and "
                         "by --recover --reconcile to install its fence and query in-doubt operations")
    ap.add_argument("--public-key", help="file with the executor's Ed25519 public key (hex); needed in worker mode "
                                         "and by --recover --reconcile to authenticate completion records")
    ap.add_argument("--snapshot-digest", help="digest of ws_r18 (worker mode; with --recover it must be the one the "
                                              "log names)")
    ap.add_argument("--seed", type=int, default=0, help="the model stand-in's seed (default %(default)s)")
    ap.add_argument("--fresh-seed", type=int, default=None,
                    help="--recover: seed of the fresh re-prompt sample (default: --seed + 1)")
    ap.add_argument("--pause-at", metavar="POINT",
                    help="pause right after this crash point is durable: a log position N, an event type TYPE (its "
                         "first event for test_r18, or its first event when test_r18 has none) or TYPE#K (the K-th "
                         "event of that type); any event the worker appends (see kernel_lib.live.crash_points). An "
                         "unknown point exits 2 listing the valid ones, before anything is appended")
    ap.add_argument("--marker", help="file the worker writes (atomically) when it pauses at --pause-at or stalls "
                                     "with --stall-after-dispatch; the controller waits for it")
    ap.add_argument("--poll-timeout-s", type=float, default=60.0,
                    help="worker mode: how long to poll the executor for test_r18's completion, seconds "
                         "(default %(default)s)")
    ap.add_argument("--poll-interval-s", type=float, default=0.05,
                    help="seconds between two polls of the executor, in worker mode and during reconciliation "
                         "(default %(default)s)")
    ap.add_argument("--recover", action="store_true", help="replacement worker: fold the surviving log")
    ap.add_argument("--reconcile", action="store_true", help="with --recover: reconcile in-doubt operations")
    ap.add_argument("--reconcile-timeout-s", type=float, default=30.0,
                    help="--recover --reconcile: how long reconciliation waits for a running job to finish, "
                         "seconds (default %(default)s)")
    ap.add_argument("--coordinator", help="ownership coordinator: an SQLite file, or etcd:URL[,URL...] for leases on "
                                          "an etcd cluster; take ownership by lease (§11.5.1)")
    ap.add_argument("--owner-id", default=None,
                    help="with --coordinator: this worker's claimant id (default: worker-PID)")
    ap.add_argument("--lease-ttl-s", type=float, default=30.0,
                    help="with --coordinator: lease term, seconds (default %(default)s)")
    ap.add_argument("--lease-wait-s", type=float, default=30.0,
                    help="with --coordinator: how long to wait for an earlier owner's lease to expire, seconds "
                         "(default %(default)s)")
    ap.add_argument("--blobs", help="--recover: blob directory holding the log's checkpoint objects (verified "
                                    "before anything is folded)")
    ap.add_argument("--inbox", help="--recover --reconcile: the durable result inbox (SQLite file) the executor "
                                    "deposits signed completion records in; ingested before the executor is asked")
    ap.add_argument("--release-lease", action="store_true",
                    help="--recover: release the lease before exiting (it is always released when the replacement "
                         "fails)")
    ap.add_argument("--workspace-snapshot", help="--recover --reconcile: the ws_r18 snapshot directory; the resume "
                                                 "verifies it against the digest the log names and copies it into "
                                                 "a fresh directory (the workspace_restore stage)")
    ap.add_argument("--restore-root", help="--recover: an existing directory in which the fresh workspace directory "
                                           "is made (default: the directory of the log)")
    ap.add_argument("--prefill-context-tokens", type=int, default=DEFAULT_PREFILL[0],
                    help="--recover: tokens of the next model call's context, for the computed prefill stage "
                         "(a given, not a measurement; default %(default)s)")
    ap.add_argument("--prefill-cached-prefix-tokens", type=int, default=DEFAULT_PREFILL[1],
                    help="--recover: leading tokens of that context still in the serving engine's prefix cache "
                         "(0..context; default %(default)s)")
    ap.add_argument("--prefill-tokens-per-s", type=float, default=DEFAULT_PREFILL[2],
                    help="--recover: prefill throughput in tokens per second (> 0; default %(default)s); "
                         "prefill = (context - cached) / rate")
    ap.add_argument("--stall-after-dispatch", action="store_true",
                    help="zombie mode: park after test_r18 is dispatched until SIGCONT, then act on a stale lease")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    watch_parent(lambda: os._exit(70))   # the controller is gone: leave nothing running behind it
    if args.fresh_seed is None:
        args.fresh_seed = args.seed + 1
    if args.coordinator and not args.owner_id:
        args.owner_id = f"worker-{os.getpid()}"
    try:
        if args.stall_after_dispatch and not (args.coordinator and args.marker):
            raise KernelError("--stall-after-dispatch needs --coordinator and --marker")
        if args.recover:
            return run_recover(args)
        if not (args.executor_url and args.public_key and args.snapshot_digest):
            raise KernelError("worker mode needs --executor-url, --public-key and --snapshot-digest")
        return run_worker(args)
    except KernelException as exc:   # a fault, or a refusal (admission, dispatch recheck) not handled above
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
