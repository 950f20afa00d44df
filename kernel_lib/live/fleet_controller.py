"""The fleet's controller, :class:`Fleet` (start, submit, kill, pause, wait, results, stop), and
:func:`rto_decomposition`. Import them from :mod:`kernel_lib.live.fleet`, whose docstring describes
the fleet (Failure Recovery, "Fault-Tolerant System Synthesis"; Chapter 11 §11.5.1)."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Iterable

from kernel_lib._support.procs import kill_group
from kernel_lib.errors import ConfigError, FleetError, FleetTimeoutError, KernelError
from kernel_lib.live.fleet_queue import QUEUE_FILE, TERMINAL, FleetQueue
from kernel_lib.live.fleet_worker import CONFIG_FILE, log_location, marker_path, open_coordinator_from

__all__ = ["Fleet", "DURABILITY", "COORDINATORS", "STORES", "DEFAULT_BREAKER", "rto_decomposition"]

DURABILITY = ("on", "off")
COORDINATORS = ("sqlite", "etcd")
STORES = ("sqlite", "segment")

#: the fleet's breaker per service (table 8's parameters, scaled to a run of seconds): a count
#: window of 10 calls, tripping at a failure rate >= 0.5 over at least 4, one canary after 2 s
DEFAULT_BREAKER = {"window_kind": "count", "window_size": 10, "minimum_calls": 4, "failure_rate_threshold": 0.5,
                   "cooldown_s": 2.0, "cooldown_max_s": 10.0, "half_open_permits": 1, "canary_timeout_s": 5.0}

_WORKER_MODULE = "kernel_lib.live.fleet_worker"


def _check_seconds(name: str, value: Any, *, low: float = 0.0, high: float = 3600.0, low_open: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            (value > low if low_open else value >= low) and value <= high):
        raise ConfigError(f"{name} must be a number of seconds in {'(' if low_open else '['}{low:g}, {high:g}], "
                          f"got {value!r}")
    return float(value)


def rto_decomposition(killed_at_s: float, lease_expires_at_s: float | None, attempt: dict[str, Any]) -> dict[str, Any]:
    """The recovery time of one takeover after a kill, split into its parts (module docstring).

    Args:
        killed_at_s: when the SIGKILL was sent (wall clock, s).
        lease_expires_at_s: when the killed owner's lease expired (None: not known; then the
            expiry wait is folded into ``claim_s``).
        attempt: the new owner's attempt row (``claimed_at_s``, ``granted_at_s``, ``folded_at_s``,
            ``first_append_at_s``, ``finished_at_s``, ``probes``, ``probes_s``).

    Returns:
        ``{rto_s, lease_expiry_wait_s, claim_s, takeover_s, log_open_fold_s, probes, probes_s,
        other_s, resumed_by}``, seconds rounded to the microsecond; the parts add up to ``rto_s``.
        ``resumed_by``: ``first_append`` (the new owner appended an event) or ``finish`` (it had
        nothing to append: the log already held the whole trajectory). Parts not reached are None.
    """
    expiry = lease_expires_at_s if lease_expires_at_s is not None else killed_at_s
    expiry = max(expiry, killed_at_s)
    resumed = attempt.get("first_append_at_s")
    resumed_by = "first_append"
    if resumed is None:
        resumed, resumed_by = attempt.get("finished_at_s"), "finish"
    out: dict[str, Any] = {"lease_expiry_wait_s": round(expiry - killed_at_s, 6)}
    claimed, granted, folded = attempt.get("claimed_at_s"), attempt.get("granted_at_s"), attempt.get("folded_at_s")
    out["claim_s"] = round(claimed - expiry, 6) if claimed is not None else None
    out["takeover_s"] = round(granted - claimed, 6) if granted is not None and claimed is not None else None
    out["log_open_fold_s"] = round(folded - granted, 6) if folded is not None and granted is not None else None
    out["probes"] = int(attempt.get("probes") or 0)
    out["probes_s"] = round(float(attempt.get("probes_s") or 0.0), 6)
    if resumed is None or folded is None:
        out.update(rto_s=None, other_s=None, resumed_by=None)
        return out
    out["rto_s"] = round(resumed - killed_at_s, 6)
    out["other_s"] = round(out["rto_s"] - out["lease_expiry_wait_s"] - out["claim_s"] - out["takeover_s"]
                           - out["log_open_fold_s"] - out["probes_s"], 6)
    out["resumed_by"] = resumed_by
    return out


class Fleet:
    """The fleet controller (module docstring).

    Args:
        workers: worker processes to start (1..64).
        coordinator: ``"sqlite"`` or ``"etcd"``.
        store: the durable log store kind, ``"sqlite"`` or ``"segment"`` (one log per trajectory).
        durability: ``"on"`` or ``"off"``: the default of submitted trajectories.
        lease_ttl_s: the ownership lease's term (s); renewed every third of it. Default 1 s on
            SQLite, 2 s on etcd (etcd rounds a term up to whole seconds and reports what is left
            rounded down, so it needs at least 2 s).
        services: a running :class:`~kernel_lib.live.services.LiveFleet` to use (not stopped by
            :meth:`stop`); default: one is started in the fleet directory.
        workdir: where the fleet directory is created (default: the system temporary folder).
        etcd_endpoints: with ``coordinator="etcd"``: use this running cluster (else one of
            ``etcd_members`` members is started and stopped with the fleet).
        breaker: :class:`~kernel_lib.recovery.gateway.breaker.BreakerConfig` fields overriding
            :data:`DEFAULT_BREAKER`.
        poll_s: how often an idle worker looks at the queue (s).
        max_claims: a trajectory claimed this many times without finishing is given up on forward
            progress: it goes back to the queue to be unwound (compensation only; its result then
            says ``unwound_after_give_up``; Failure Recovery, "Saga compensation stacks").
        max_unwind_claims: a given-up trajectory claimed this many times to unwind without
            finishing is failed ``GAVE_UP``, its result listing the residue (what its log showed
            done and not compensated).
        client_timeout_s: how long a worker's service call waits for an answer (s).
        keep_dir: leave the fleet directory on disk after :meth:`stop` (for inspection).

    Raises:
        ConfigError: a bad argument (before anything starts).
        FleetError / ServiceError / QuorumSetupError: something failed to start; everything that
            had started is stopped and the directory removed before the error propagates.
    """

    def __init__(self, workers: int = 2, *, coordinator: str = "sqlite", store: str = "sqlite",
                 durability: str = "on", lease_ttl_s: float | None = None, services: Any = None,
                 workdir: str | os.PathLike | None = None, etcd_endpoints: list[str] | None = None,
                 etcd_members: int = 3, breaker: dict[str, Any] | None = None, poll_s: float = 0.02,
                 max_claims: int = 5, client_timeout_s: float = 5.0, keep_dir: bool = False,
                 max_unwind_claims: int = 3):
        if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 64:
            raise ConfigError(f"workers must be an integer 1..64, got {workers!r}")
        if coordinator not in COORDINATORS:
            raise ConfigError(f"coordinator must be one of {', '.join(COORDINATORS)}, got {coordinator!r}")
        if store not in STORES:
            raise ConfigError(f"store must be one of {', '.join(STORES)}, got {store!r}")
        if durability not in DURABILITY:
            raise ConfigError(f"durability must be one of {', '.join(DURABILITY)}, got {durability!r}")
        if lease_ttl_s is None:
            lease_ttl_s = 2.0 if coordinator == "etcd" else 1.0
        self.lease_ttl_s = _check_seconds("lease_ttl_s", lease_ttl_s, high=600.0)
        if coordinator == "etcd" and self.lease_ttl_s < 2.0:
            raise ConfigError(f"with etcd, lease_ttl_s must be at least 2 s (etcd counts a lease's remaining time "
                              "in whole seconds, rounded down: a 1 s lease reads as expired at once), got "
                              f"{lease_ttl_s!r}")
        _check_seconds("poll_s", poll_s, high=5.0)
        _check_seconds("client_timeout_s", client_timeout_s, high=600.0)
        for name, bound in (("max_claims", max_claims), ("max_unwind_claims", max_unwind_claims)):
            if isinstance(bound, bool) or not isinstance(bound, int) or not 1 <= bound <= 100:
                raise ConfigError(f"{name} must be an integer 1..100, got {bound!r}")
        if workdir is not None and not Path(workdir).is_dir():
            raise ConfigError(f"workdir {str(workdir)!r} is not an existing directory")
        from kernel_lib.recovery.gateway.breaker import BreakerConfig

        breaker_fields = {**DEFAULT_BREAKER, **(breaker or {})}
        BreakerConfig(**breaker_fields)   # checked now (GatewayConfigError / TypeError on a bad field)
        self.coordinator_kind, self.store_kind, self.durability = coordinator, store, durability
        self.dir = Path(tempfile.mkdtemp(prefix="kl-fleet-", dir=workdir))
        self.keep_dir = keep_dir
        self._procs: dict[str, Any] = {}
        self._replaced: set[str] = set()   # dead workers already replaced (or not to be)
        self._stopped = False
        self._own_services = services is None
        self.services = services
        self._cluster = None
        self.queue: FleetQueue | None = None
        self.coord: Any = None
        self._next_worker = 0
        self._nonce = uuid.uuid4().hex[:6]
        self._rng = random.Random()
        self.timings: dict[str, float] = {}
        try:
            t0 = time.monotonic()
            if self.services is None:
                from kernel_lib.live.services import LiveFleet

                self.services = LiveFleet(self.dir / "services", client_timeout_s=client_timeout_s)
                self.timings["services_start_s"] = self.services.start_s
            from kernel_lib.sim.deployment import TAKEN_DOMAIN

            self.services.taken_name(TAKEN_DOMAIN)
            coord_cfg: dict[str, Any] = {"kind": "sqlite", "path": str(self.dir / "coordinator.sqlite")}
            if coordinator == "etcd":
                if etcd_endpoints is None:
                    from kernel_lib.quorum.cluster import EtcdCluster

                    t1 = time.monotonic()
                    self._cluster = EtcdCluster(etcd_members, work_dir=self.dir / "etcd").start()
                    self.timings["etcd_start_s"] = round(time.monotonic() - t1, 3)
                    etcd_endpoints = self._cluster.endpoints()
                coord_cfg = {"kind": "etcd", "endpoints": list(etcd_endpoints), "prefix": f"kl-fleet-{self._nonce}/"}
            for sub in ("logs", "markers", "workers"):
                (self.dir / sub).mkdir()
            self.config = {
                "services_dir": str(self.services.state_dir), "queue": str(self.dir / QUEUE_FILE),
                "coordinator": coord_cfg, "store": store, "logs_dir": str(self.dir / "logs"),
                "markers_dir": str(self.dir / "markers"), "breakers": str(self.dir / "breakers.sqlite"),
                "breaker": breaker_fields, "lease_ttl_s": self.lease_ttl_s,
                "lease_margin_s": round(min(0.1, self.lease_ttl_s / 10), 6),
                "lease_wait_s": max(10.0, 4 * self.lease_ttl_s), "poll_s": float(poll_s), "max_claims": max_claims,
                "max_unwind_claims": max_unwind_claims,
                "client_timeout_s": float(client_timeout_s), "breaker_max_wait_s": 0.2}
            (self.dir / CONFIG_FILE).write_text(json.dumps(self.config, indent=1))
            self.queue = FleetQueue(self.dir / QUEUE_FILE)
            self.coord = open_coordinator_from(self.config)
            for _ in range(workers):
                self.spawn_worker()
            self.timings["start_s"] = round(time.monotonic() - t0, 3)
        except BaseException:
            self.stop()
            raise

    # --- life cycle -------------------------------------------------------------------------------------
    def __enter__(self) -> "Fleet":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _check_running(self) -> None:
        if self._stopped:
            raise FleetError("the fleet was stopped")

    def _env(self) -> dict[str, str]:
        from kernel_lib.live.orphan import parent_env

        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", **parent_env()}
        # the workers import this kernel_lib, wherever it was imported from
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        return env

    def spawn_worker(self) -> str:
        """Start one more worker process; returns its worker id."""
        self._check_running()
        wid = f"w{self._next_worker}-{self._nonce}"
        self._next_worker += 1
        with open(self.dir / "workers" / f"{wid}.log", "ab") as log:
            self._procs[wid] = subprocess.Popen(
                [sys.executable, "-m", _WORKER_MODULE, "--dir", str(self.dir), "--worker-id", wid],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                env=self._env())
        return wid

    def pids(self) -> dict[str, int]:
        """``{worker_id: pid}`` of every worker process started, alive or not."""
        return {wid: p.pid for wid, p in self._procs.items()}

    def alive_workers(self) -> list[str]:
        return [wid for wid, p in self._procs.items() if p.poll() is None]

    def stop(self, *, grace_s: float = 3.0) -> None:
        """Stop every worker (SIGTERM, then SIGKILL after ``grace_s``), the etcd cluster and the
        services this fleet started, and remove the fleet directory (unless ``keep_dir``).
        Idempotent; never raises for a part that is already gone."""
        if self._stopped:
            return
        self._stopped = True
        procs = list(self._procs.values())
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p.pid, signal.SIGCONT)   # a paused worker must be able to exit
                    os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
        for p in procs:
            kill_group(p, signal.SIGKILL, wait_s=5.0)
        for closer in (getattr(self.queue, "close", None), getattr(self.coord, "close", None)):
            if closer is not None:
                with contextlib.suppress(Exception):
                    closer()
        if self._cluster is not None:
            with contextlib.suppress(Exception):
                self._cluster.stop()
        if self._own_services and self.services is not None:
            with contextlib.suppress(Exception):
                self.services.close()
        if not self.keep_dir:
            from kernel_lib.live.workspace import remove_tree

            with contextlib.suppress(Exception):
                remove_tree(self.dir)

    # --- work -------------------------------------------------------------------------------------------
    def submit(self, trajectories: int | Iterable[dict[str, Any] | str] = 1, *, program: str = "deployment",
               params: dict[str, Any] | None = None, durability: str | None = None, priority: int = 0) -> list[str]:
        """Enqueue trajectories; returns their ids in submission order.

        ``trajectories``: a count (that many of ``program`` with ``params``), or items, each a
        trajectory id (str) or a dict ``{trajectory_id?, program?, params?, durability?,
        priority?, worker?}`` (``worker``: only that worker id may claim it, for demonstrations;
        the keyword arguments are the defaults of missing keys).

        Raises ConfigError: an unknown program, parameters it would refuse
        (:func:`~kernel_lib.live.fleet_programs.check_params`), a bad durability, a repeated id
        (nothing enqueued).
        """
        from kernel_lib.live.fleet_programs import check_params

        self._check_running()
        if isinstance(trajectories, bool):
            raise ConfigError(f"trajectories must be a count or items, got {trajectories!r}")
        if isinstance(trajectories, int):
            if trajectories < 0:
                raise ConfigError(f"a count of trajectories must be >= 0, got {trajectories}")
            items: list[Any] = [{} for _ in range(trajectories)]
        else:
            items = list(trajectories)
        rows = []
        base = len(self.queue.rows()) if items else 0
        for i, it in enumerate(items):
            it = {"trajectory_id": it} if isinstance(it, str) else dict(it)
            prog = it.get("program", program)
            dur = it.get("durability", durability or self.durability)
            if dur not in DURABILITY:
                raise ConfigError(f"durability must be one of {', '.join(DURABILITY)}, got {dur!r}")
            tid = it.get("trajectory_id") or f"{prog}-{self._nonce}-{base + i:05d}"
            if not isinstance(tid, str):
                raise ConfigError(f"a trajectory id is a string, got {tid!r}")
            p = check_params(prog, it.get("params", params) or {})
            json.dumps(p)   # JSON-able or TypeError now, not in a worker
            rows.append({"trajectory_id": tid, "program": prog, "params": p, "durability": dur,
                         "priority": it.get("priority", priority), "pinned_worker": it.get("worker")})
        return self.queue.submit(rows)

    def _pending(self, ids: list[str] | None) -> list[str]:
        return [r["trajectory_id"] for r in self.queue.rows(ids) if r["state"] not in TERMINAL]

    def wait(self, ids: Iterable[str] | None = None, *, timeout_s: float = 60.0, kill_every_s: float | None = None,
             respawn: bool = True, seed: int | None = None) -> float:
        """Wait until every trajectory (or those named) has ended; returns the seconds waited.

        ``kill_every_s``: meanwhile, SIGKILL a random busy worker every that many seconds. With
        ``respawn`` (default), every worker that dies meanwhile (killed by this controller, or by
        itself at a drawn crash position) is replaced by a new one. Raises FleetTimeoutError (naming the unfinished
        ones) after ``timeout_s``; FleetError when every worker has died and none is respawned."""
        self._check_running()
        want = None if ids is None else list(ids)
        timeout_s = _check_seconds("timeout_s", timeout_s, high=86400.0)
        if kill_every_s is not None:
            kill_every_s = _check_seconds("kill_every_s", kill_every_s, high=3600.0)
        rng = random.Random(seed) if seed is not None else self._rng
        t0 = time.monotonic()
        next_kill = t0 + kill_every_s if kill_every_s else None
        while True:
            pending = self._pending(want)
            if not pending:
                return round(time.monotonic() - t0, 6)
            now = time.monotonic()
            if now - t0 > timeout_s:
                raise FleetTimeoutError(f"{len(pending)} trajectories unfinished after {timeout_s:g} s "
                                        f"(first: {pending[:3]})", pending=pending, waited_s=now - t0)
            for wid, p in list(self._procs.items()):   # a worker that died (a drawn self-kill, a bug)
                if p.poll() is not None and wid not in self._replaced:
                    self._replaced.add(wid)
                    if respawn:
                        self.spawn_worker()
            if not self.alive_workers():
                raise FleetError(f"every worker has exited with {len(pending)} trajectories unfinished; see "
                                 f"{self.dir / 'workers'}")
            if next_kill is not None and now >= next_kill:
                self.kill_worker(respawn=respawn, rng=rng)
                next_kill = now + kill_every_s
            time.sleep(0.01)

    # --- faults -----------------------------------------------------------------------------------------
    def busy_workers(self) -> list[dict[str, Any]]:
        """Workers whose process is alive and that are inside a trajectory (queue's ``workers`` rows)."""
        alive = {p.pid for p in self._procs.values() if p.poll() is None}
        return [w for w in self.queue.workers() if w["state"] == "busy" and w["pid"] in alive]

    def kill_worker(self, pid: int | None = None, *, respawn: bool = True,
                    rng: random.Random | None = None) -> dict[str, Any] | None:
        """SIGKILL a worker for real: ``pid``, or a random busy one (None when no worker is busy).
        The kill is recorded with the trajectory it was running and that lease's expiry, read
        from the coordinator after the process is gone. ``respawn``: start a replacement.
        Returns the kill record ``{pid, worker_id, trajectory_id, owner_epoch, attempt_id,
        killed_at_s, lease_expires_at_s, signal, worker_exit, respawned}``.

        Raises FleetError: ``pid`` is not a worker of this fleet or has already exited."""
        self._check_running()
        if pid is None:
            busy = self.busy_workers()
            if not busy:
                return None
            pid = (rng or self._rng).choice(busy)["pid"]
        proc = next((p for p in self._procs.values() if p.pid == pid), None)
        if proc is None or proc.poll() is not None:
            raise FleetError(f"pid {pid} is not a running worker of this fleet")
        killed_at = time.time()
        os.kill(pid, signal.SIGKILL)   # the real thing: no handler runs, nothing is flushed
        code = proc.wait(timeout=30)
        flight = self.queue.in_flight(pid)
        expires = None
        if flight is not None and flight["owner_epoch"] is not None:
            with contextlib.suppress(KernelError):
                cur = self.coord.current(flight["trajectory_id"])
                if cur is not None and cur.owner_epoch == flight["owner_epoch"]:
                    expires = cur.expires_at_s
        row = self.queue.record_kill(pid, killed_at, lease_expires_at_s=expires)
        self._replaced.add(next(w for w, p in self._procs.items() if p.pid == pid))
        row.update(worker_exit=code, respawned=self.spawn_worker() if respawn else None)
        return row

    def pause_worker(self, pid: int) -> None:
        """SIGSTOP the worker (a stalled owner: no code of it runs until :meth:`resume_worker`)."""
        self._signal(pid, signal.SIGSTOP)

    def resume_worker(self, pid: int, *, trajectory_id: str | None = None, owner_epoch: int = 1) -> None:
        """SIGCONT the worker; with ``trajectory_id`` also release its pause marker."""
        if trajectory_id is not None:
            self.release_marker(trajectory_id, owner_epoch)
        self._signal(pid, signal.SIGCONT)

    def _signal(self, pid: int, sig: int) -> None:
        self._check_running()
        proc = next((p for p in self._procs.values() if p.pid == pid), None)
        if proc is None or proc.poll() is not None:
            raise FleetError(f"pid {pid} is not a running worker of this fleet")
        os.kill(pid, sig)

    def wait_marker(self, trajectory_id: str, owner_epoch: int = 1, *, timeout_s: float = 30.0) -> dict[str, Any]:
        """Wait for the pause marker of ``trajectory_id``'s owner of ``owner_epoch`` (the trajectory
        was submitted with ``pause_at``) and return it. Raises FleetTimeoutError."""
        path = marker_path(self.config["markers_dir"], trajectory_id, owner_epoch)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if path.exists():
                with contextlib.suppress(ValueError, OSError):
                    return json.loads(path.read_text())
            time.sleep(0.005)
        raise FleetTimeoutError(f"no worker paused {trajectory_id} within {timeout_s:g} s",
                                pending=[trajectory_id], waited_s=timeout_s)

    def release_marker(self, trajectory_id: str, owner_epoch: int = 1) -> None:
        """Let a worker paused at a marker go on."""
        marker_path(self.config["markers_dir"], trajectory_id, owner_epoch).with_suffix(".go").touch()

    # --- results ----------------------------------------------------------------------------------------
    def _events(self, row: dict[str, Any]) -> list[Any]:
        if row["durability"] == "off":
            return []
        from kernel_lib.log import open_store

        path = log_location(self.config["logs_dir"], row["trajectory_id"], self.store_kind)
        if not path.exists():
            return []
        with open_store(self.store_kind, path, read_only=True) as st:
            return list(st.read(row["trajectory_id"]))

    def events(self, trajectory_id: str) -> list[Any]:
        """The trajectory's log as stored (empty with durability off)."""
        rows = self.queue.rows([trajectory_id])
        if not rows:
            raise ConfigError(f"no trajectory {trajectory_id!r} in this fleet")
        return self._events(rows[0])

    def results(self, ids: Iterable[str] | None = None, *, judge: bool = True) -> list[dict[str, Any]]:
        """Per trajectory (module docstring): ``{trajectory_id, program, durability, state,
        outcome, result, claims, takeovers, owners: [...], rto: [...], fast_fails, elapsed_s,
        services: {forward_repeated, compensators_repeated, effects_left_unlisted, effects_committed,
        compensations_applied}}``. ``takeovers``: later claims that were granted ownership;
        ``services`` only with ``judge`` (read from the services' audits)."""
        from kernel_lib.live.fleet_programs import get_program
        from kernel_lib.sim.saga_sweep import account

        self._check_running()
        rows = self.queue.rows(None if ids is None else list(ids))
        attempts = self.queue.attempts()
        kills = {k["attempt_id"]: k for k in self.queue.kills() if k["attempt_id"] is not None}
        audits = self.services.audits() if judge else {}
        resources = self.services.resources(live_only=False) if judge else {}
        out = []
        for row in rows:
            tid = row["trajectory_id"]
            atts = [a for a in attempts if a["trajectory_id"] == tid]
            owners, rto = [], []
            for i, a in enumerate(atts):
                kill = kills.get(a["id"])
                owners.append({"worker_id": a["worker_id"], "pid": a["pid"], "owner_epoch": a["owner_epoch"],
                               "claimed_at_s": a["claimed_at_s"], "granted_at_s": a["granted_at_s"],
                               "finished_at_s": a["finished_at_s"], "outcome": a["outcome"], "fenced": a["fenced"],
                               "error": a["error"], "killed": kill is not None,
                               # counted by the worker at its end: not known for one that died first
                               **{k: a[k] if a["finished_at_s"] is not None else None
                                  for k in ("probes", "fast_fails", "events_appended")}})
                prev_kill = kills.get(atts[i - 1]["id"]) if i > 0 else None
                if prev_kill is not None and a["granted_at_s"] is not None:
                    rto.append({"from_worker": atts[i - 1]["worker_id"], "to_worker": a["worker_id"],
                                "owner_epoch": a["owner_epoch"], "killed_at_s": prev_kill["killed_at_s"],
                                "lease_expires_at_s": prev_kill["lease_expires_at_s"],
                                **rto_decomposition(prev_kill["killed_at_s"], prev_kill["lease_expires_at_s"], a)})
            takeovers = sum(1 for i, a in enumerate(atts) if i > 0 and a["granted_at_s"] is not None)
            rec: dict[str, Any] = {
                "trajectory_id": tid, "program": row["program"], "durability": row["durability"],
                "state": row["state"], "outcome": row["outcome"], "result": row["result"], "claims": row["claims"],
                "mode": row["mode"], "unwind_claims": row["unwind_claims"],
                "takeovers": takeovers, "owners": owners, "rto": rto,
                "fast_fails": sum(a["fast_fails"] for a in atts),
                "elapsed_s": round(row["finished_at_s"] - row["submitted_at_s"], 6) if row["finished_at_s"] else None}
            if judge:
                events = self._events(row)
                verdict = account(audits, resources, events, get_program(row["program"]).saga_id(tid))
                ended_not_completed = row["state"] in TERMINAL and row["outcome"] != "COMPLETED"
                # a row given up past the unwind bound lists its residue in the queue's result, not the log
                in_result = {str(x.get("operation_id")) for x in (row["result"] or {}).get("residue") or []
                             if isinstance(x, dict)}
                unlisted = [u for u in verdict["unlisted"]
                            if str(resources[u["service"]][u["resource_id"]].get("operation_id")) not in in_result]
                rec["services"] = {
                    "forward_repeated": verdict["forward_repeated"],
                    "compensators_repeated": verdict["compensators_repeated"],
                    "effects_left_unlisted": len(unlisted) if ended_not_completed else 0,
                    "effects_committed": verdict["effects_committed"],
                    "compensations_applied": verdict["compensations_applied"]}
            out.append(rec)
        return out

    def summary(self, results: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """Totals over :meth:`results`: ``{trajectories, states, outcomes, unwound_after_give_up
        (given up on forward progress and unwound), gave_up (given up, residue listed), takeovers, kills, fenced,
        fast_fails, forward_repeated, compensators_repeated, effects_left_unlisted, rto_s: {n, mean,
        max, parts_mean: {...}}}`` (measured)."""
        res = self.results() if results is None else results
        states: dict[str, int] = {}
        outcomes: dict[str, int] = {}
        for r in res:
            states[r["state"]] = states.get(r["state"], 0) + 1
            outcomes[str(r["outcome"])] = outcomes.get(str(r["outcome"]), 0) + 1
        rtos = [x for r in res for x in r["rto"] if x.get("rto_s") is not None]
        parts = ("lease_expiry_wait_s", "claim_s", "takeover_s", "log_open_fold_s", "probes_s", "other_s")

        def mean(xs: list[float]) -> float | None:
            return round(sum(xs) / len(xs), 6) if xs else None

        svc = [r["services"] for r in res if "services" in r]
        return {"trajectories": len(res), "states": states, "outcomes": outcomes,
                "unwound_after_give_up": sum(1 for r in res if (r["result"] or {}).get("unwound_after_give_up")),
                "gave_up": sum(1 for r in res if r["outcome"] == "GAVE_UP"),
                "takeovers": sum(r["takeovers"] for r in res), "kills": len(self.queue.kills()),
                "fenced": sum(1 for r in res for o in r["owners"] if o["fenced"]),
                "fast_fails": sum(r["fast_fails"] for r in res),
                "forward_repeated": sum(s["forward_repeated"] for s in svc),
                "compensators_repeated": sum(s["compensators_repeated"] for s in svc),
                "effects_left_unlisted": sum(s["effects_left_unlisted"] for s in svc),
                "rto_s": {"n": len(rtos), "mean": mean([x["rto_s"] for x in rtos]),
                          "max": max((x["rto_s"] for x in rtos), default=None),
                          "parts_mean": {p: mean([x[p] for x in rtos if x.get(p) is not None]) for p in parts},
                          "label": "measured (wall clock, this host)"}}

    def breaker_transitions(self) -> list[dict[str, Any]]:
        """Every breaker transition any worker recorded (``pid`` says which process made it)."""
        from kernel_lib.recovery.gateway.shared import SQLiteBreakerStore

        path = Path(self.config["breakers"])
        if not path.exists():
            return []
        with SQLiteBreakerStore(path) as st:
            return st.transition_rows()

    def describe(self) -> dict[str, Any]:
        """The fleet's configuration, for reports."""
        return {"workers": len(self.alive_workers()), "coordinator": self.coordinator_kind, "store": self.store_kind,
                "durability": self.durability, "lease_ttl_s": self.lease_ttl_s, "dir": str(self.dir),
                "breaker": dict(self.config["breaker"]), "timings": dict(self.timings)}

