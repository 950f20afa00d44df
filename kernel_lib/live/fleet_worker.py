"""One worker process of the fleet (:mod:`kernel_lib.live.fleet` starts them; users run
``python -m kernel_lib fleet run``)::

    python -m kernel_lib.live.fleet_worker --dir FLEET_DIR --worker-id ID

The loop (Chapter 11 §11.5.1 at fleet scale; Failure Recovery, "Fault-Tolerant System Synthesis"):

1. **claim** the next trajectory from the durable queue (:class:`~kernel_lib.live.fleet_queue.FleetQueue`:
   one ``BEGIN IMMEDIATE`` transaction; a trajectory whose holder's lease expired comes first);
2. **take ownership**: :func:`~kernel_lib.ownership.leases.take_ownership` on the fleet's
   coordinator (SQLite file or etcd), waiting while the previous holder's lease is live; the
   new ``owner_epoch`` is installed as the log's fence before the log is read, and on a takeover
   the previous holder's capability tokens are revoked at the credential broker (the services
   then answer its requests 401);
3. **run** the trajectory's program (:mod:`kernel_lib.live.fleet_programs`) over its log, every
   append stamped with the epoch, every dispatch rechecked against the lease
   (:class:`~kernel_lib.ownership.leases.LeaseCheck`), every service call behind that service's
   circuit breaker, whose state every worker shares (:class:`~kernel_lib.recovery.gateway.shared.SQLiteBreakerStore`);
   a thread renews the lease every ``ttl/3`` and copies its expiry into the queue;
4. **finish**: the result goes into the queue only if this worker and epoch still hold the row;
   the lease is released.

A trajectory claimed ``max_claims`` times without finishing (a poison trajectory) is claimed next
in ``unwind`` mode: ownership is taken exactly as for a takeover (new ``owner_epoch`` fenced on the
log before it is read, the previous tokens revoked), then the program's compensation-only run
(:attr:`~kernel_lib.live.fleet_programs.Program.unwind`) folds the log and compensates what it
shows done; the row ends ``failed`` with the unwind's outcome (``ABORT_CONSISTENT``) and
``unwound_after_give_up`` in its result. Past ``max_unwind_claims`` the queue fails it
``GAVE_UP`` with the residue the last unwinder noted. A program with no compensation-only run, or
a trajectory run with durability off (no log survives a claim: an unwind would read an empty log
and report a consistent abort while the forward claims' effects are live), ends ``GAVE_UP`` at
its first unwind claim with its residue unknown (``None``).

A stale owner (one that lost its lease while stalled) is refused at each boundary: its appends
by the log's fence (StaleOwnerError), its dispatches by the lease check, its requests by the
broker (401), its result by the queue. The worker records such an attempt as ``fenced`` with
the refusal and goes back to the queue.

Measurements per attempt (the ``attempts`` table, wall-clock seconds): claim, grant (and the
time spent waiting for the previous lease), end of log open + fold, first event appended (the
trajectory moves forward again), status lookups before that (count and seconds), breaker fast
fails, end. The controller turns them into the RTO decomposition.

Test hooks, from the trajectory's parameters: ``kill_at`` K (and ``kill_epoch``, default 1):
right after the gate's K-th position the owner of that epoch records the kill in the queue and
sends itself a real SIGKILL (a program can do the same at a crash position it draws:
``ctx.kill_self(detail)``). ``kill_forward_at`` K: the same in every forward claim (a poison
trajectory); ``kill_unwind_at`` K: in unwind claims (only the first ``kill_unwind_claims`` of
them, when given). ``pause_at`` K (and ``pause_epoch``, default 1):
right after the gate's K-th position, the owner of that epoch writes ``MARKERS/<name>.json``
(``{pid, worker_id, trajectory_id, owner_epoch, position, name}``) and waits for
``MARKERS/<name>.go``; with ``stall`` true it stops renewing its lease first (so a SIGSTOP of
the process is a stalled owner whose lease runs out, the zombie of §11.5.1).

SIGTERM: finish the current trajectory, then exit. The worker also exits when the process that
started the fleet is gone (:mod:`kernel_lib.live.orphan`).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import json
import os
import re
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from kernel_lib.errors import (CoordinatorUnavailableError, FleetError, KernelError, LeaseHeldError,
                               LeaseLostError, StaleOwnerError)
from kernel_lib.recovery.runner import ForwardingEndpoints
from kernel_lib._support.workdirs import write_text_atomic

__all__ = ["CONFIG_FILE", "log_location", "marker_path", "open_coordinator_from", "GuardedEndpoints", "main"]

#: what a worker imports at start (the programs' runners), before it claims anything
PRELOAD = ("kernel_lib.live.fleet_programs", "kernel_lib.live.saga_worker", "kernel_lib.recovery.runner",
           "kernel_lib.gate.dispatch", "kernel_lib.sim.deployment", "kernel_lib.sim.saga_sweep",
           "kernel_lib.ownership.leases", "kernel_lib.recovery.gateway.runner", "kernel_lib.log",
           "kernel_lib.live.fleet_sysadmin", "kernel_lib.recovery.synthesis.harness", "kernel_lib.sim.sysadmin",
           "kernel_lib.recovery.synthesis.invariant")

#: the fleet's configuration in its directory, written by the controller, read by every worker
CONFIG_FILE = "fleet-config.json"


def _safe(trajectory_id: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", trajectory_id)[:80]
    return f"{stem}-{hashlib.sha256(trajectory_id.encode()).hexdigest()[:8]}"


def log_location(logs_dir: str | os.PathLike, trajectory_id: str, kind: str) -> Path:
    """Where the trajectory's log lives: ``LOGS/<name>.sqlite`` or the segment directory ``LOGS/<name>.seglog``."""
    return Path(logs_dir) / (_safe(trajectory_id) + (".sqlite" if kind == "sqlite" else ".seglog"))


def marker_path(markers_dir: str | os.PathLike, trajectory_id: str, owner_epoch: int) -> Path:
    """The pause marker of ``trajectory_id``'s owner of ``owner_epoch`` (its ``.go`` sibling releases it)."""
    return Path(markers_dir) / f"{_safe(trajectory_id)}.e{owner_epoch}.json"


def open_coordinator_from(cfg: dict[str, Any]) -> Any:
    """The ownership coordinator the fleet's configuration names (a new connection)."""
    c = cfg["coordinator"]
    if c["kind"] == "etcd":
        from kernel_lib.quorum.coordinator import EtcdOwnershipCoordinator

        return EtcdOwnershipCoordinator(c["endpoints"], prefix=c["prefix"])
    from kernel_lib.ownership.leases import SQLiteOwnershipCoordinator

    return SQLiteOwnershipCoordinator(c["path"])



class GuardedEndpoints(ForwardingEndpoints):
    """The runner's :class:`~kernel_lib.recovery.runner.Endpoints` over a live client, each service
    behind a circuit breaker (``breaker_of(service)``) whose state the fleet shares.

    A call the breaker refuses never leaves the host: it is answered as a retryable refusal
    (``503``, ``circuit_open: true``, ``retry_after_s`` = the cooldown left, capped at
    ``max_wait_s``), which the runner backs off from and tries again, like the service's own
    503. Transport failures (timeouts, refused connections), 5xx and 429 count as failures; any
    other answer as a success. Status lookups (probes) and raw reads (:meth:`call`) bypass the
    breakers; lookups are timed:
    ``lookups`` holds ``(started_at_s, seconds)`` of each.
    """

    def __init__(self, inner: Any, breaker_of: Callable[[str], Any], *, max_wait_s: float = 0.2):
        super().__init__(inner)
        self.breaker_of = breaker_of
        self.max_wait_s = max_wait_s
        self.fast_fails = 0
        self.lookups: list[tuple[float, float]] = []

    def send(self, intent: Any) -> Any:
        from kernel_lib.core.proposals import ToolReply
        from kernel_lib.recovery.gateway.breaker import Permit
        from kernel_lib.sim.services import ACTIONS

        service = ACTIONS[intent.tool].service
        br = self.breaker_of(service)
        permit = br.acquire()
        if type(permit) is not Permit:
            self.fast_fails += 1
            wait = min(float(permit.cooldown_remaining_s or 0.0), self.max_wait_s)
            return ToolReply("failed", outcome={"http_status": 503, "retryable": True, "circuit_open": True,
                                                "retry_after_s": wait, "error": permit.message},
                             observation_complete=False)
        t0 = time.perf_counter()
        try:
            reply = self.inner.send(intent)
        except (TimeoutError, OSError):
            br.record(permit, True, time.perf_counter() - t0)
            raise
        except BaseException:
            br.abandon(permit, time.perf_counter() - t0)
            raise
        status = (reply.outcome or {}).get("http_status")
        failed = isinstance(status, int) and (status >= 500 or status == 429)
        br.record(permit, failed, time.perf_counter() - t0)
        return reply

    def lookup(self, tool: str, operation_id: str) -> dict[str, Any]:
        t0, p0 = time.time(), time.perf_counter()
        try:
            return self.inner.lookup(tool, operation_id)
        finally:
            self.lookups.append((t0, time.perf_counter() - p0))


class _Renewer(threading.Thread):
    """Renews the lease every ``every_s`` on a coordinator connection of its own and copies the
    expiry into the queue. Stops on :meth:`stop`, or when the lease is lost (``lost`` is then the
    LeaseLostError). :meth:`hold` pauses renewing (a stalled owner)."""

    def __init__(self, cfg: dict[str, Any], lease: Any, worker_id: str, every_s: float):
        super().__init__(name="lease-renewer", daemon=True)
        self.cfg, self.lease, self.worker_id, self.every_s = cfg, lease, worker_id, every_s
        self.lost: LeaseLostError | None = None
        self.renewals = 0
        self._halt = threading.Event()
        self._hold = threading.Event()

    def hold(self) -> None:
        self._hold.set()

    def release(self) -> None:
        self._hold.clear()

    def stop(self) -> None:
        self._halt.set()
        if self.is_alive():
            self.join(timeout=10)

    def run(self) -> None:
        from kernel_lib.live.fleet_queue import FleetQueue

        coord = open_coordinator_from(self.cfg)
        queue = FleetQueue(self.cfg["queue"])
        try:
            while not self._halt.wait(self.every_s):
                if self._hold.is_set():
                    continue
                try:
                    self.lease = coord.renew(self.lease)
                    self.renewals += 1
                except LeaseLostError as exc:
                    self.lost = exc
                    return
                except CoordinatorUnavailableError:
                    continue   # try again; the lease may still be live at the next try
                with contextlib.suppress(FleetError):
                    queue.renew(self.lease.trajectory_id, self.worker_id, self.lease.owner_epoch,
                                self.lease.expires_at_s)
        finally:
            with contextlib.suppress(Exception):
                coord.close()
            queue.close()


class Worker:
    """The worker loop (module docstring) for the fleet in ``fleet_dir``."""

    def __init__(self, fleet_dir: str | os.PathLike, worker_id: str):
        from kernel_lib.live.fleet_queue import FleetQueue
        from kernel_lib.live.services import LiveFleet
        from kernel_lib.recovery.gateway.shared import SQLiteBreakerStore

        self.dir = Path(fleet_dir)
        self.cfg = json.loads((self.dir / CONFIG_FILE).read_text())
        self.worker_id = worker_id
        self.pid = os.getpid()
        self.stopping = False
        self.busy = False
        self.queue = FleetQueue(self.cfg["queue"])
        self.coord = open_coordinator_from(self.cfg)
        self.services = LiveFleet.attach(self.cfg["services_dir"], client_timeout_s=self.cfg["client_timeout_s"])
        self.breaker_store = SQLiteBreakerStore(self.cfg["breakers"])
        self._breakers: dict[str, Any] = {}
        for module in PRELOAD:   # imported before the first claim, so no takeover pays for them
            with contextlib.suppress(ModuleNotFoundError):
                importlib.import_module(module)

    def breaker_of(self, service: str) -> Any:
        from kernel_lib.recovery.gateway.breaker import BreakerConfig
        from kernel_lib.recovery.gateway.runner import CircuitBreaker

        br = self._breakers.get(service)
        if br is None:
            br = self._breakers[service] = CircuitBreaker(f"service:{service}", BreakerConfig(**self.cfg["breaker"]),
                                                          store=self.breaker_store)
        return br

    def close(self) -> None:
        for closer in (self.queue.close, self.breaker_store.close, self.services.close,
                       getattr(self.coord, "close", lambda: None)):
            with contextlib.suppress(Exception):
                closer()

    # --- the loop ----------------------------------------------------------------------------------------
    def loop(self) -> int:
        q = self.queue
        q.worker_state(self.worker_id, self.pid, "idle")
        poll = float(self.cfg["poll_s"])
        try:
            while not self.stopping:
                if not q.has_claimable(self.worker_id):
                    time.sleep(poll)
                    continue
                claim = q.claim(self.worker_id, self.pid, float(self.cfg["lease_ttl_s"]),
                                max_claims=int(self.cfg["max_claims"]),
                                max_unwind_claims=int(self.cfg.get("max_unwind_claims", 3)))
                if claim is None:
                    continue
                self.busy = True
                q.worker_state(self.worker_id, self.pid, "busy", claim.trajectory_id)
                try:
                    self.run_claim(claim)
                except Exception:   # noqa: BLE001 - a bug must not take the worker down: logged, claim handed back
                    traceback.print_exc()
                    with contextlib.suppress(Exception):
                        q.update_attempt(claim.attempt_id, finished_at_s=time.time(), outcome="ERROR",
                                         error="the worker failed (see its log)")
                        q.give_back(claim.trajectory_id, self.worker_id)
                finally:
                    self.busy = False
                q.worker_state(self.worker_id, self.pid, "idle")
        finally:
            with contextlib.suppress(Exception):
                q.worker_state(self.worker_id, self.pid, "exited")
            self.close()
        return 0

    def _open_log(self, claim: Any) -> tuple[Any, str]:
        from kernel_lib.log import MemoryStore, open_store

        if claim.durability == "off":
            return MemoryStore(), "none"
        kind = self.cfg["store"]
        path = log_location(self.cfg["logs_dir"], claim.trajectory_id, kind)
        return open_store(kind, path, create=True), "host_crash"

    def _own(self, store: Any, claim: Any) -> tuple[Any, float]:
        """take_ownership, waiting while another owner's lease is live (at most ``lease_wait_s``)."""
        from kernel_lib.ownership.leases import take_ownership

        deadline = time.monotonic() + float(self.cfg["lease_wait_s"])
        t0 = time.monotonic()
        while True:
            try:
                lease = take_ownership(self.coord, store, claim.trajectory_id, self.worker_id,
                                       float(self.cfg["lease_ttl_s"]))
                return lease, time.monotonic() - t0
            except (LeaseHeldError, CoordinatorUnavailableError) as exc:
                if time.monotonic() >= deadline or not getattr(exc, "retryable", False):
                    raise
                time.sleep(min(max(getattr(exc, "remaining_s", 0.0), 0.005), float(self.cfg["poll_s"]) * 2))

    def run_claim(self, claim: Any) -> None:
        from kernel_lib.live.fleet_programs import get_program

        q, tid, aid = self.queue, claim.trajectory_id, claim.attempt_id
        try:
            program = get_program(claim.program)
            store, must_survive = self._open_log(claim)
        except KernelError as exc:
            why = f"{type(exc).__name__}: {exc}"[:800]
            q.update_attempt(aid, finished_at_s=time.time(), outcome="ERROR", error=why)
            q.fail_claim(tid, self.worker_id, "ERROR", {"error": why})
            return
        lease = None
        renewer = None
        try:
            try:
                lease, waited = self._own(store, claim)
            except KernelError as exc:
                q.update_attempt(aid, finished_at_s=time.time(), outcome="NOT_OWNED",
                                 error=f"{type(exc).__name__}: {exc}"[:800])
                q.give_back(tid, self.worker_id)
                return
            q.update_attempt(aid, owner_epoch=lease.owner_epoch, lease_wait_s=round(waited, 6))
            if not q.set_owner(tid, self.worker_id, lease.owner_epoch, lease.expires_at_s):
                q.update_attempt(aid, finished_at_s=time.time(), outcome="CLAIM_LOST", fenced=1,
                                 error="the queue row was claimed by another worker before the grant was recorded")
                return
            if claim.claims > 1:   # a takeover (or an unwind): the previous holder's capability tokens stop working
                with contextlib.suppress(Exception):
                    self.services.revoke(tid)
            client = self.services.client(tid)   # a capability token of this owner's own
            q.update_attempt(aid, granted_at_s=time.time())   # owned at every boundary: coordinator, log, broker
            renewer = _Renewer(self.cfg, lease, self.worker_id, float(self.cfg["lease_ttl_s"]) / 3)
            renewer.start()
            self._run_program(program, claim, store, must_survive, lease, renewer, client)
        finally:
            if renewer is not None:
                renewer.stop()
            if lease is not None:
                with contextlib.suppress(KernelError):
                    self.coord.release(renewer.lease if renewer is not None else lease)
            with contextlib.suppress(Exception):
                store.close()

    def _run_program(self, program: Any, claim: Any, store: Any, must_survive: str, lease: Any, renewer: _Renewer,
                     client: Any) -> None:
        from kernel_lib.live.fleet_programs import TrajectoryContext
        from kernel_lib.ownership.leases import LeaseCheck

        q, tid, aid = self.queue, claim.trajectory_id, claim.attempt_id
        params = claim.params
        marks: dict[str, float] = {}
        counts = {"positions": 0, "appended": 0}
        pause_at = params.get("pause_at")
        pause_epoch = params.get("pause_epoch", 1)
        kill_at = params.get("kill_at")
        kill_epoch = params.get("kill_epoch", 1)
        if claim.mode == "unwind":   # the test hooks of a poison trajectory (fleet_programs.WORKER_PARAMS)
            limit = params.get("kill_unwind_claims")
            kill_mode_at = params.get("kill_unwind_at") if limit is None or claim.unwind_claims <= limit else None
        else:
            kill_mode_at = params.get("kill_forward_at")

        notes: dict[str, Any] = {}

        def note(**values: Any) -> None:
            notes.update(values)
            q.update_attempt(aid, notes=json.dumps(notes, default=str))

        def kill_self(detail: dict[str, Any]) -> None:
            """A real SIGKILL of this worker, recorded first (the program's drawn process kill)."""
            q.record_kill(self.pid, time.time(), lease_expires_at_s=renewer.lease.expires_at_s,
                          signal_name="SIGKILL", sent_by="self", detail=detail)
            os.kill(self.pid, signal.SIGKILL)
            while True:   # pragma: no cover - the signal is delivered before this runs
                time.sleep(1)

        def on_position(name: str, ev: Any) -> None:
            counts["positions"] += 1
            if ev is not None:
                counts["appended"] += 1
                if "first_append" not in marks:   # written at once: a worker killed later still has its RTO
                    mark("folded")   # a program that appends while it builds its runner has folded by then
                    marks["first_append"] = time.time()
                    early = [d for (_t, d) in endpoints.lookups]
                    q.update_attempt(aid, first_append_at_s=marks["first_append"], probes=len(early),
                                     probes_s=round(sum(early), 6))
            if pause_at == counts["positions"] and lease.owner_epoch == pause_epoch:
                self._pause(claim, lease, counts["positions"], name, renewer, bool(params.get("stall")))
            if (kill_at == counts["positions"] and lease.owner_epoch == kill_epoch) \
                    or kill_mode_at == counts["positions"]:
                kill_self({"position": counts["positions"], "name": name, "mode": claim.mode})

        def mark(name: str) -> None:
            if name not in marks:
                marks[name] = time.time()
                if name == "folded":
                    q.update_attempt(aid, folded_at_s=marks[name])

        endpoints = GuardedEndpoints(client, self.breaker_of,
                                     max_wait_s=float(self.cfg["breaker_max_wait_s"]))
        ctx = TrajectoryContext(trajectory_id=tid, params=params, store=store, must_survive=must_survive,
                                owner_epoch=lease.owner_epoch,
                                fence_check=LeaseCheck(self.coord, lease, margin_s=float(self.cfg["lease_margin_s"])),
                                endpoints=endpoints, services=self.services, on_position=on_position,
                                mark=mark, kill_self=kill_self,
                                claims=claim.claims, note=note, mode=claim.mode)

        def measured() -> dict[str, Any]:
            first = marks.get("first_append")
            before = [d for (t, d) in endpoints.lookups if first is None or t < first]
            return {"folded_at_s": marks.get("folded"), "first_append_at_s": first, "probes": len(before),
                    "probes_s": round(sum(before), 6), "fast_fails": endpoints.fast_fails,
                    "events_appended": counts["appended"]}

        run = program.run
        if claim.mode == "unwind":
            why = None
            if program.unwind is None:   # no compensation-only run: given up as before, its residue unknown
                why = f"program {program.name!r} has no compensation-only run"
            elif claim.durability == "off":   # a fresh empty log: it would "unwind" nothing and claim consistency
                why = "durability is off: no log survives a claim, so what the forward claims did is unknown"
            if why is not None:
                q.finish(tid, self.worker_id, lease.owner_epoch, "failed", "GAVE_UP",
                         {"error": f"given up after {claim.claims - claim.unwind_claims} claims; {why}",
                          "gave_up": "forward", "residue": None}, attempt_id=aid, **measured())
                return
            run = program.unwind
        try:
            result = run(ctx)
            if claim.mode == "unwind":
                result.update(unwound_after_give_up=True, forward_claims=claim.claims - claim.unwind_claims,
                              unwind_claims=claim.unwind_claims)
        except (StaleOwnerError, LeaseLostError) as exc:
            q.update_attempt(aid, **measured(), finished_at_s=time.time(), outcome="FENCED", fenced=1,
                             error=f"{type(exc).__name__}: {exc}"[:800])
            q.give_back(tid, self.worker_id)   # changes nothing unless the row is still this worker's
            return
        except Exception as exc:   # noqa: BLE001 - recorded; the trajectory goes back to the queue
            lost = self._lease_lost(lease, renewer)
            q.update_attempt(aid, **measured(), finished_at_s=time.time(), outcome="FENCED" if lost else "ERROR",
                             fenced=int(lost), error=f"{type(exc).__name__}: {exc}"[:800])
            q.give_back(tid, self.worker_id)
            return
        outcome = str(result.get("outcome"))
        state = result.get("state") or ("done" if outcome in ("COMPLETED", "ABORT_CONSISTENT") else "failed")
        if claim.mode == "unwind" and outcome != "COMPLETED":
            state = "failed"   # undone, not done: the trajectory was given up (its result says unwound)
        q.finish(tid, self.worker_id, lease.owner_epoch, state, outcome, result, attempt_id=aid, **measured())

    def _lease_lost(self, lease: Any, renewer: _Renewer) -> bool:
        if renewer.lost is not None:
            return True
        try:
            return self.coord.check(renewer.lease) is not None
        except KernelError:
            return False

    def _pause(self, claim: Any, lease: Any, position: int, name: str, renewer: _Renewer, stall: bool) -> None:
        if stall:
            renewer.hold()
        marker = marker_path(self.cfg["markers_dir"], claim.trajectory_id, lease.owner_epoch)
        write_text_atomic(marker, json.dumps({"pid": self.pid, "worker_id": self.worker_id,
                                          "trajectory_id": claim.trajectory_id, "owner_epoch": lease.owner_epoch,
                                          "position": position, "name": name, "stall": stall,
                                          "at_s": time.time()}))
        go = marker.with_suffix(".go")
        while not go.exists():
            time.sleep(0.005)
        renewer.release()


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m kernel_lib.live.fleet_worker",
                                 description="One worker of the fleet (started by kernel_lib.live.fleet; to run a "
                                             "fleet use `python -m kernel_lib fleet run`).")
    ap.add_argument("--dir", required=True, help="the fleet's directory (holds fleet-config.json)")
    ap.add_argument("--worker-id", required=True, help="this worker's owner id")
    return ap


def main(argv: list[str] | None = None) -> int:
    from kernel_lib.live.orphan import watch_parent

    args = build_parser().parse_args(argv)
    if not (Path(args.dir) / CONFIG_FILE).is_file():
        print(f"error: no {CONFIG_FILE} in {args.dir}", file=sys.stderr)
        return 2
    try:
        worker = Worker(args.dir, args.worker_id)
    except (KernelError, OSError, ValueError) as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2

    def on_term(signum: int, frame: Any) -> None:   # the loop sees it within one poll, or after the trajectory
        worker.stopping = True

    signal.signal(signal.SIGTERM, on_term)
    watch_parent(lambda: os._exit(0))   # the controller is gone: leave (like a crash: the lease runs out)
    return worker.loop()


if __name__ == "__main__":
    sys.exit(main())
