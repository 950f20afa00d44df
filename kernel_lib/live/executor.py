"""The executor service: its own OS process on loopback that runs the real tests (§11.1, §11.5.3).

Run as ``python -m kernel_lib.live.executor --snapshot DIR --digest HEX --state-dir DIR``. It
serves a Starlette app with uvicorn on ``127.0.0.1`` only, on a free port, and reports itself by
atomically writing ``<state-dir>/ready.json`` (``{"url", "port", "pid", "public_key_path",
"snapshot_digest"}``) and printing one line ``executor ready <url>`` on stdout.

Endpoints:

* ``POST /jobs`` ``{operation_id, attempt_id, snapshot_digest, check[, idempotency_key]}`` →
  ``{job_handle, status: "accepted"}``. The endpoint's repeat contract is ``idempotency_key``: the
  key comes in an ``Idempotency-Key`` header or the body's ``idempotency_key`` (the worker sends
  both, from the ``ToolIntent``; they must agree, else 422), at most 255 printable ASCII
  characters. A repeat under a key already accepted returns that key's job (``duplicate: true``,
  nothing run again); the same key with a different request is refused with 409
  (``reason: "conflicting_request"``), and so is another key for an operation id a keyed job
  already holds (``reason: "operation_id_in_use"``: another logical operation, e.g. of another
  trajectory). A request without a key is deduplicated by ``operation_id`` as before. The job
  copies the verified snapshot to a private directory, waits ``--test-delay-s`` (so a test is still
  running when the worker is killed), runs ``pytest -q`` in a subprocess, and charges
  ``--usd-per-s`` per second of test time for as long as it runs — whether or not anyone is still
  listening.
* Fencing (§11.5.1): ``POST /jobs`` may carry ``trajectory_id`` and ``owner_epoch`` (an int ≥ 0).
  The service keeps the highest owner_epoch it has seen per trajectory and per operation. A
  request whose epoch is lower than the one seen for its trajectory or its operation is refused
  with 409 and ``reason: "stale_owner_epoch"`` before anything else is looked at (also for a repeat
  of an accepted request); once an epoch was seen, a request without one is refused too
  (``reason: "unfenced_request"``). Requests that never carried an epoch are served as before.
  ``POST /fences`` ``{trajectory_id, owner_epoch}`` installs a new owner's epoch without
  submitting work (409 ``stale_owner_epoch`` when it is lower than the one held);
  ``GET /fences/{trajectory_id}`` → ``{trajectory_id, owner_epoch, rejected}`` lists it and every
  refusal. The fences live in this process's memory: they last as long as the service.
* ``GET /contract`` → :data:`ENDPOINT_CONTRACT`: the tool's declared repeat contract and whether
  it answers a status query by operation id (it does: the next endpoint).
* ``GET /operations/{operation_id}`` → ``{operation_id, status: running|completed|failed|unknown,
  job_handle, charged_usd, outcome, record, signature}``: a status query by logical operation id.
  ``record`` (once finished) is the completion record, signed with the executor's Ed25519 key;
  ``signature`` is the hex signature over the record's RFC 8785 encoding. Verify it with
  :func:`verify_completion`.

Result inbox (§11.5.3): with ``--inbox FILE`` every signed completion record is also deposited in
the durable :class:`~kernel_lib.gate.inbox.ResultInbox` in FILE (an SQLite file of its own, outside any
worker), under the trajectory the request named, as soon as the job finishes. The record then
outlives this process as well as the worker; the next owner ingests it. A deposit that fails is
kept in memory and listed by ``GET /inbox-failures`` (the status query still serves the record),
and so is a job submitted without ``trajectory_id`` (``reason: "no trajectory scope"``): its record
has nowhere to go. An unusable ``--inbox`` (a directory, a missing parent directory, a file that is
not an SQLite result inbox, one that cannot be written) is refused at startup: the executor prints
``error: ...`` on stderr and exits with status 2 before it reports ready.

The tests run with ``--color=no`` and without ``FORCE_COLOR``/``PY_COLORS``/``CLICOLOR_FORCE``
inherited from the caller (e.g. a Jupyter kernel), so the ``summary`` line is plain text.

SIGTERM/SIGINT shut it down cleanly: running test processes are killed and every job directory
is removed (``ready.json`` and the public key stay in the state directory, which the caller owns).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import os
import re
import signal
import socket
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from kernel_lib.errors import SnapshotMismatchError
from kernel_lib.gate.evidence import load_public_key, signing_bytes, verify_completion  # noqa: F401
from kernel_lib.live.orphan import watch_parent
from kernel_lib.live.workspace import copy_verified, remove_tree, verify
from kernel_lib._support.workdirs import write_text_atomic

#: The only check this executor runs (it never runs arbitrary commands).
CHECKS = {"pytest -q": ["-m", "pytest", "-q", "-p", "no:cacheprovider", "--color=no"]}
#: Variables that would make pytest colour its output even into a pipe; never passed to the tests.
_COLOR_ENV = ("FORCE_COLOR", "PY_COLORS", "CLICOLOR_FORCE")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
EXECUTOR_ID = "executor-r18"
_KEY = re.compile(r"[\x21-\x7e]{1,255}")   # an idempotency key: printable ASCII, no spaces
PUBLIC_KEY_FILE = "executor_ed25519.pub"
#: The endpoint contract this service declares for its ``run_tests`` tool, served at ``GET /contract``
#: (the worker reads it there before it proposes, :func:`kernel_lib.live.worker.endpoint_contract`):
#: repeats are deduplicated by idempotency key (``POST /jobs``), and a status query by logical
#: operation id exists (``GET /operations/{operation_id}``), which reconciliation uses (§11.5.3).
#: ``status_lookup`` True is what lets the dispatch gate acknowledge this tool's evidence at the
#: log's write tier and let it ride the next barrier (``ToolProposal.status_lookup``).
ENDPOINT_CONTRACT: dict[str, Any] = {"tool": "run_tests", "repeat_contract": "idempotency_key",
                                     "status_lookup": True, "status_query": "GET /operations/{operation_id}"}


def job_handle_for(operation_id: str) -> str:
    """Job handle derived from the operation id: ``test_r18`` → ``job_tests_18``; others
    ``job_<12 hex of sha256(operation_id)>``. The same operation always gets the same handle."""
    m = re.fullmatch(r"test_r(\d+)", operation_id)
    if m:
        return f"job_tests_{m.group(1)}"
    return "job_" + hashlib.sha256(operation_id.encode()).hexdigest()[:12]


# ------------------------------------------------------------------------------------------------
# signatures
# ------------------------------------------------------------------------------------------------


# ------------------------------------------------------------------------------------------------
# the service
# ------------------------------------------------------------------------------------------------


@dataclass
class Job:
    operation_id: str
    attempt_id: str
    snapshot_digest: str
    check: str
    job_handle: str
    accepted_unix_s: float
    started_monotonic: float
    status: str = "running"
    outcome: dict[str, Any] | None = None
    charged_usd: float = 0.0
    record: dict[str, Any] | None = None
    trajectory_id: str | None = None
    owner_epoch: int | None = None
    submissions: int = 1   # accepted POSTs naming this operation (the first and its identical repeats)
    idempotency_key: str | None = None   # the key it was accepted under (None: a request without one)
    task: asyncio.Task | None = field(default=None, repr=False)
    proc: asyncio.subprocess.Process | None = field(default=None, repr=False)


class ExecutorService:
    """State and behaviour of one executor process (see the module docstring)."""

    def __init__(self, snapshot_dir: Path, snapshot_digest: str, state_dir: Path, *, usd_per_s: float,
                 test_delay_s: float, test_timeout_s: float = 120.0, inbox_path: Path | None = None):
        self.snapshot_dir, self.snapshot_digest, self.state_dir = snapshot_dir, snapshot_digest, state_dir
        self.usd_per_s, self.test_delay_s, self.test_timeout_s = usd_per_s, test_delay_s, test_timeout_s
        self.jobs_dir = state_dir / "jobs"
        self.jobs: dict[str, Job] = {}
        self.jobs_by_key: dict[str, Job] = {}     # idempotency key -> the job accepted under it
        self.fences: dict[str, int] = {}          # "trajectory:<id>" / "operation:<id>" -> newest owner_epoch
        self.rejections: list[dict[str, Any]] = []
        self.inbox_path = inbox_path
        self.inbox_failures: list[dict[str, Any]] = []
        self._key = Ed25519PrivateKey.generate()   # private key lives in memory only
        raw = self._key.public_key().public_bytes_raw()
        self.public_key_hex = raw.hex()

    # --- jobs --------------------------------------------------------------------------------------
    def charged(self, job: Job) -> float:
        if job.status == "running":
            return round(self.usd_per_s * (time.monotonic() - job.started_monotonic), 6)
        return job.charged_usd

    def submit(self, body: dict[str, Any], idempotency_key: str | None = None) -> tuple[int, dict[str, Any]]:
        """``POST /jobs`` with ``body`` (and the ``Idempotency-Key`` header's value, if any): the HTTP
        status and the JSON answer (module docstring)."""
        need = ("operation_id", "attempt_id", "snapshot_digest", "check")
        if not isinstance(body, dict) or any(not isinstance(body.get(k), str) or not body.get(k) for k in need):
            return 422, {"error": f"body must be a JSON object with string fields {list(need)}"}
        key = body.get("idempotency_key")
        if idempotency_key is not None and key is not None and key != idempotency_key:
            return 422, {"error": "the Idempotency-Key header and the body's idempotency_key differ"}
        key = idempotency_key if idempotency_key is not None else key
        if key is not None and (not isinstance(key, str) or not _KEY.fullmatch(key)):
            return 422, {"error": f"idempotency_key must be 1..255 printable ASCII characters, got {key!r:.80}"}
        op = body["operation_id"]
        epoch, tid = body.get("owner_epoch"), body.get("trajectory_id")
        if epoch is not None and (type(epoch) is not int or not 0 <= epoch < 2**63):
            return 422, {"error": f"owner_epoch must be an integer 0 <= owner_epoch < 2**63, got {epoch!r}"}
        if tid is not None and (not isinstance(tid, str) or not tid):
            return 422, {"error": f"trajectory_id must be a non-empty string, got {tid!r}"}
        job = self.jobs_by_key.get(key) if key is not None else None
        keyed_repeat = job is not None
        job = job or self.jobs.get(op)
        if tid is None and job is not None:
            tid = job.trajectory_id   # an operation stays under its trajectory's fence
        refused = self._fence(tid, op, epoch, "POST /jobs")
        if refused is not None:
            return 409, refused
        if job is not None and not keyed_repeat and key is not None and job.idempotency_key is not None:
            return 409, {"error": f"operation id {op!r} is held by a job accepted under another idempotency key: "
                                  "another logical operation; nothing was run",
                         "reason": "operation_id_in_use", "job_handle": job.job_handle}
        if job is not None:
            if (job.operation_id, job.snapshot_digest, job.check) != (op, body["snapshot_digest"], body["check"]):
                held = f"idempotency key {key!r}" if keyed_repeat else f"operation {op!r}"
                return 409, {"error": f"{held} already names a different request (operation, snapshot or check); "
                                      "an operation's request is fixed by its first submission",
                             "reason": "conflicting_request", "job_handle": job.job_handle}
            job.submissions += 1
            return 200, {"job_handle": job.job_handle, "status": "accepted", "duplicate": True,
                         "attempt_id": job.attempt_id}
        if body["check"] not in CHECKS:
            return 422, {"error": f"unknown check {body['check']!r}; this executor runs {sorted(CHECKS)}"}
        if body["snapshot_digest"] != self.snapshot_digest:
            return 422, {"error": f"unknown snapshot {body['snapshot_digest'][:16]}…; this executor holds "
                                  f"{self.snapshot_digest[:16]}…"}
        job = Job(op, body["attempt_id"], body["snapshot_digest"], body["check"], job_handle_for(op),
                  time.time(), time.monotonic(), trajectory_id=tid, owner_epoch=epoch, idempotency_key=key)
        self.jobs[op] = job
        if key is not None:
            self.jobs_by_key[key] = job
        job.task = asyncio.get_running_loop().create_task(self._run(job))
        return 200, {"job_handle": job.job_handle, "status": "accepted", "duplicate": False,
                     "attempt_id": job.attempt_id}

    # --- fencing (§11.5.1) -----------------------------------------------------------------------
    def _fence(self, trajectory_id: str | None, operation_id: str | None, epoch: int | None,
               what: str) -> dict[str, Any] | None:
        """Check ``epoch`` against the newest seen for the trajectory and the operation; raise both
        to it when it is not older. Returns the 409 body of a refusal (recorded), or None."""
        keys = ([f"trajectory:{trajectory_id}"] if trajectory_id else []) + \
               ([f"operation:{operation_id}"] if operation_id else [])
        seen = max((self.fences[k] for k in keys if k in self.fences), default=None)
        where = f"trajectory {trajectory_id!r}" if trajectory_id else f"operation {operation_id!r}"
        refusal = None
        if seen is not None and epoch is None:
            refusal = {"reason": "unfenced_request",
                       "error": f"{what} for {where} carries no owner_epoch, but owner_epoch={seen} was already "
                                "seen for it: a request that cannot show its ownership generation is refused"}
        elif seen is not None and epoch < seen:
            refusal = {"reason": "stale_owner_epoch",
                       "error": f"{what} for {where} is stamped owner_epoch={epoch}, older than owner_epoch={seen} "
                                "already seen: the sender no longer owns the trajectory; nothing was run"}
        if refusal is not None:
            refusal.update(owner_epoch=epoch, fence=seen, trajectory_id=trajectory_id, operation_id=operation_id)
            self.rejections.append({**refusal, "what": what, "at_unix_s": round(time.time(), 6)})
            return refusal
        if epoch is not None:
            for k in keys:
                self.fences[k] = max(self.fences.get(k, epoch), epoch)
        return None

    def install_fence(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """``POST /fences``: a new owner installs its epoch here before relying on exclusion."""
        if not isinstance(body, dict):
            return 422, {"error": "body must be a JSON object {trajectory_id, owner_epoch}"}
        tid, epoch = body.get("trajectory_id"), body.get("owner_epoch")
        if not isinstance(tid, str) or not tid or type(epoch) is not int or not 0 <= epoch < 2**63:
            return 422, {"error": "body must be {trajectory_id: non-empty string, owner_epoch: int >= 0}"}
        previous = self.fences.get(f"trajectory:{tid}")
        refused = self._fence(tid, None, epoch, "POST /fences")
        if refused is not None:
            return 409, refused
        for job in self.jobs.values():   # the trajectory's operations come under the new fence too
            if job.trajectory_id == tid:
                k = f"operation:{job.operation_id}"
                self.fences[k] = max(self.fences.get(k, epoch), epoch)
        return 200, {"trajectory_id": tid, "owner_epoch": self.fences[f"trajectory:{tid}"], "previous": previous}

    def fence_status(self, trajectory_id: str) -> dict[str, Any]:
        """``GET /fences/{trajectory_id}``: the epoch held and every refusal for the trajectory."""
        return {"trajectory_id": trajectory_id, "owner_epoch": self.fences.get(f"trajectory:{trajectory_id}"),
                "rejected": [r for r in self.rejections if r.get("trajectory_id") == trajectory_id]}

    async def _run(self, job: Job) -> None:
        workdir = self.jobs_dir / job.job_handle
        try:
            try:
                tree = copy_verified(self.snapshot_dir, job.snapshot_digest, workdir / "tree")
            except SnapshotMismatchError as exc:
                self._finish(job, "failed", {"error": str(exc), "passed": 0, "failed": 0})
                return
            if self.test_delay_s > 0:
                await asyncio.sleep(self.test_delay_s)
            junit = workdir / "junit.xml"
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith(("PYTEST", "COV_")) and k not in _COLOR_ENV}
            env["PYTHONDONTWRITEBYTECODE"] = "1"
            # the repository's tests need no third-party plugin; auto-loading every plugin of a
            # full environment (nbval, hypothesis, langsmith, ...) costs seconds per run
            env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
            job.proc = await asyncio.create_subprocess_exec(
                sys.executable, *CHECKS[job.check], f"--junitxml={junit}", cwd=tree, env=env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
            try:
                out, _ = await asyncio.wait_for(job.proc.communicate(), self.test_timeout_s)
            except asyncio.TimeoutError:
                job.proc.kill()
                await job.proc.wait()
                self._finish(job, "failed", {"error": f"tests ran past {self.test_timeout_s} s", "passed": 0,
                                             "failed": 0})
                return
            counts = _junit_counts(junit)
            counts["exit_code"] = job.proc.returncode
            text = _ANSI.sub("", (out or b"").decode(errors="replace")).strip()
            counts["summary"] = text.splitlines()[-1][:200] if text else ""
            status = "completed" if job.proc.returncode in (0, 1) and counts.get("tests", 0) > 0 else "failed"
            self._finish(job, status, counts)
        except asyncio.CancelledError:
            if job.proc is not None and job.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    job.proc.kill()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(job.proc.wait(), 5)
            raise
        finally:
            remove_tree(workdir)

    def _finish(self, job: Job, status: str, outcome: dict[str, Any]) -> None:
        job.charged_usd = round(self.usd_per_s * (time.monotonic() - job.started_monotonic), 6)
        job.status, job.outcome = status, outcome
        record = {"executor_id": EXECUTOR_ID, "operation_id": job.operation_id, "attempt_id": job.attempt_id,
                  "job_handle": job.job_handle, "snapshot_digest": job.snapshot_digest, "check": job.check,
                  "status": status, "outcome": outcome, "charged_usd": job.charged_usd,
                  "accepted_unix_s": round(job.accepted_unix_s, 6), "finished_unix_s": round(time.time(), 6),
                  "public_key_sha256": hashlib.sha256(bytes.fromhex(self.public_key_hex)).hexdigest()}
        if job.trajectory_id:   # the scope is signed too: the record cannot be replayed into another trajectory
            record["trajectory_id"] = job.trajectory_id
        record["signature"] = self._key.sign(signing_bytes(record)).hex()
        job.record = record
        if self.inbox_path is None:
            return
        if job.trajectory_id:
            self._deposit(job, record)
        else:
            self.inbox_failures.append({
                "operation_id": job.operation_id, "attempt_id": job.attempt_id, "reason": "no trajectory scope",
                "error": "the job was submitted without trajectory_id, so its signed completion record has no "
                         "trajectory to be filed under and was not deposited in the inbox; it is served only by "
                         f"GET /operations/{job.operation_id}"})

    def _deposit(self, job: Job, record: dict[str, Any]) -> None:
        from kernel_lib.gate.inbox import ResultInbox   # imported here: kernel_lib.gate.inbox imports this module

        try:
            with ResultInbox(self.inbox_path, {EXECUTOR_ID: self.public_key_hex}) as inbox:
                inbox.deposit(record, trajectory_id=job.trajectory_id)
        except Exception as exc:   # noqa: BLE001 - the record is still served by the status query
            self.inbox_failures.append({"operation_id": job.operation_id, "attempt_id": job.attempt_id,
                                        "trajectory_id": job.trajectory_id, "reason": "deposit failed",
                                        "error": f"{type(exc).__name__}: {exc}"})

    def status(self, operation_id: str) -> dict[str, Any]:
        job = self.jobs.get(operation_id)
        if job is None:
            return {"operation_id": operation_id, "status": "unknown", "job_handle": None, "charged_usd": 0.0,
                    "outcome": None, "record": None, "signature": None}
        return {"operation_id": operation_id, "attempt_id": job.attempt_id, "status": job.status,
                "job_handle": job.job_handle, "charged_usd": self.charged(job), "outcome": job.outcome,
                "owner_epoch": job.owner_epoch, "submissions": job.submissions,
                "record": job.record, "signature": job.record["signature"] if job.record else None}

    async def shutdown(self) -> None:
        tasks = [j.task for j in self.jobs.values() if j.task is not None and not j.task.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        remove_tree(self.jobs_dir)


def _junit_counts(path: Path) -> dict[str, Any]:
    """passed/failed/errors/skipped/tests from a pytest JUnit XML report."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return {"tests": 0, "passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    t = sum(int(s.get("tests", 0)) for s in suites)
    f = sum(int(s.get("failures", 0)) for s in suites)
    e = sum(int(s.get("errors", 0)) for s in suites)
    sk = sum(int(s.get("skipped", 0)) for s in suites)
    return {"tests": t, "passed": t - f - e - sk, "failed": f, "errors": e, "skipped": sk}


def build_app(service: ExecutorService, on_ready=None):
    """The Starlette app over ``service``; ``on_ready()`` runs at lifespan startup."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def post_jobs(request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            return JSONResponse({"error": "body is not JSON"}, status_code=400)
        code, payload = service.submit(body, request.headers.get("idempotency-key"))
        return JSONResponse(payload, status_code=code)

    async def post_fences(request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            return JSONResponse({"error": "body is not JSON"}, status_code=400)
        code, payload = service.install_fence(body)
        return JSONResponse(payload, status_code=code)

    async def get_fences(request: Request) -> JSONResponse:
        return JSONResponse(service.fence_status(request.path_params["trajectory_id"]))

    async def get_contract(request: Request) -> JSONResponse:
        return JSONResponse({**ENDPOINT_CONTRACT, "executor_id": EXECUTOR_ID})

    async def get_operation(request: Request) -> JSONResponse:
        return JSONResponse(service.status(request.path_params["operation_id"]))

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True, "pid": os.getpid(), "executor_id": EXECUTOR_ID,
                             "snapshot_digest": service.snapshot_digest, "public_key": service.public_key_hex})

    async def get_inbox_failures(request: Request) -> JSONResponse:
        return JSONResponse({"inbox": str(service.inbox_path) if service.inbox_path else None,
                             "failures": list(service.inbox_failures)})

    @contextlib.asynccontextmanager
    async def lifespan(app):
        if on_ready:
            on_ready()
        try:
            yield
        finally:
            await service.shutdown()

    return Starlette(routes=[Route("/jobs", post_jobs, methods=["POST"]),
                             Route("/operations/{operation_id}", get_operation, methods=["GET"]),
                             Route("/contract", get_contract, methods=["GET"]),
                             Route("/fences", post_fences, methods=["POST"]),
                             Route("/fences/{trajectory_id}", get_fences, methods=["GET"]),
                             Route("/inbox-failures", get_inbox_failures, methods=["GET"]),
                             Route("/health", health, methods=["GET"])], lifespan=lifespan)


def check_inbox(path: Path, public_key_hex: str) -> str | None:
    """Why ``path`` cannot serve as this executor's result inbox, or None when it can: it is
    opened (created when missing, in an existing directory) and a write transaction is tried."""
    from kernel_lib.errors import KernelError
    from kernel_lib.gate.inbox import ResultInbox   # imported here: kernel_lib.gate.inbox imports this module

    try:
        with ResultInbox(path, {EXECUTOR_ID: public_key_hex}) as inbox:
            inbox.check_writable()
    except KernelError as exc:
        return str(exc)
    return None



def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kernel_lib.live.executor",
                                 description="The worksheet's executor service (loopback only).")
    ap.add_argument("--snapshot", required=True, help="the verified snapshot directory (ws_r18)")
    ap.add_argument("--digest", required=True, help="the snapshot's digest (hex SHA-256)")
    ap.add_argument("--state-dir", required=True, help="directory for ready.json, the public key and job trees")
    ap.add_argument("--usd-per-s", type=float, default=0.01, help="charge per second of test time (USD)")
    ap.add_argument("--test-delay-s", type=float, default=0.0,
                    help="artificial wait before pytest starts (so a test is still running at a crash)")
    ap.add_argument("--inbox", help="durable result inbox (SQLite file): every signed completion record is "
                                    "deposited there too, under its trajectory")
    args = ap.parse_args(argv)
    for name in ("usd_per_s", "test_delay_s"):
        value = getattr(args, name)
        if not math.isfinite(value) or value < 0:
            ap.error(f"--{name.replace('_', '-')} must be a finite number >= 0, got {value!r}")
    import uvicorn

    state = Path(args.state_dir)
    state.mkdir(parents=True, exist_ok=True)
    verify(args.snapshot, args.digest)   # refuse to start on a tampered snapshot
    service = ExecutorService(Path(args.snapshot), args.digest, state, usd_per_s=args.usd_per_s,
                              test_delay_s=args.test_delay_s, inbox_path=Path(args.inbox) if args.inbox else None)
    if service.inbox_path is not None:   # refuse an inbox that could never take a deposit
        problem = check_inbox(service.inbox_path, service.public_key_hex)
        if problem is not None:
            print(f"error: --inbox {args.inbox}: unusable as the durable result inbox: {problem}",
                  file=sys.stderr, flush=True)
            return 2
    key_path = state / PUBLIC_KEY_FILE
    write_text_atomic(key_path, service.public_key_hex + "\n")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))   # loopback only, a free port chosen by the kernel
    sock.listen(64)
    port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"

    def ready() -> None:
        write_text_atomic(state / "ready.json", json.dumps({"url": url, "port": port, "pid": os.getpid(),
                                                        "public_key_path": str(key_path),
                                                        "snapshot_digest": args.digest,
                                                        "inbox_path": str(service.inbox_path) if service.inbox_path
                                                        else None}))
        print(f"executor ready {url}", flush=True)

    config = uvicorn.Config(build_app(service, ready), log_level="warning", lifespan="on", access_log=False)
    server = uvicorn.Server(config)
    # the controller died without stopping us (e.g. a killed notebook kernel): shut down as on SIGTERM
    watch_parent(lambda: os.kill(os.getpid(), signal.SIGTERM))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
