"""The deployment saga in a real worker process, killed with a real SIGKILL and recovered (Failure Recovery).

"Saga compensation stacks" (a crash during the compensation phase) with real parts: the tool
services are processes on loopback (:class:`~kernel_lib.live.services.LiveFleet`), the trajectory
log is a real store (an SQLite file, a segment-log directory, or a three-member etcd cluster), the
worker is its own process and dies by ``os.kill(pid, SIGKILL)``, and the recovery is a new process
that opens the surviving log and re-runs the same saga script (committed steps are answered from
the log, in-doubt ones settled by the services' status lookup, then the unwind continues where the
log says it stopped).

The worker process::

    python -m kernel_lib.live.saga_worker --store KIND --store-path PATH --fleet DIR \\
        --trajectory ID --saga-id ID [--pause-at K --marker FILE] [--domain NAME]

counts the dispatch gate's ``on_position`` calls (the same hook the in-process sweep,
:mod:`kernel_lib.sim.saga_sweep`, crashes at: after each appended event, dispatch and recheck);
with ``--pause-at K`` it writes ``--marker`` atomically right after the K-th
(``{position, name, log_head, durable_head, pid}``) and blocks until it is killed. Without it
(the recovery, or a clean run) it prints one JSON object: ``{outcome, failed_step, positions: [name,
...], log_head, pid, incident_id}``; ``outcome`` is the saga's final state (``COMPLETED``,
``ABORT_CONSISTENT``), ``PANIC`` or ``FROZEN`` (a frozen trajectory: nothing done). It attaches to
the running fleet (``LiveFleet.attach``) and takes a capability lease of its own for the trajectory.

:func:`sweep_live` is the controller: one fleet for the whole sweep, each run with its own
trajectory id, saga id and leases, judged on that saga's operations only by the services' audit
trails (:func:`kernel_lib.sim.saga_sweep.account`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable

from kernel_lib.errors import ConfigError, LiveProcessError, SagaPanicError, TrajectoryFrozenRefusal
from kernel_lib._support.workdirs import write_text_atomic

__all__ = ["SCENARIOS", "sweep_live", "run_saga_process", "build_runner"]

#: What each run meets: ``deployment`` (T5's 409, the unwind C4..C1 succeeds) or
#: ``compensator_panic`` (C4, unbind_firewall, answers a final 409: PANIC, the ACB freeze).
SCENARIOS = ("deployment", "compensator_panic")


def build_runner(store: Any, fleet: Any, trajectory_id: str, saga_id: str, *,
                 on_position: Callable[[str, Any], None] | None = None, must_survive: str = "host_crash",
                 on_log: Callable[[Any], None] | None = None, owner_epoch: int = 0,
                 fence_check: Callable[[str, int], "str | None"] | None = None, endpoints: Any = None) -> Any:
    """A :class:`~kernel_lib.recovery.runner.SagaRunner` for the deployment saga over ``store``
    (the trajectory started when its log is empty), reaching the services through ``fleet``.
    ``on_log(log)`` is told the trajectory log before anything is appended. A worker that owns
    the trajectory under a lease passes its ``owner_epoch`` (stamped on every append) and the
    gate's ``fence_check`` (:class:`~kernel_lib.ownership.leases.LeaseCheck`); ``endpoints``
    replaces ``fleet.client(trajectory_id)`` (e.g. the same client behind circuit breakers)."""
    from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate
    from kernel_lib.log import TrajectoryLog
    from kernel_lib.recovery.runner import RetryPolicy, SagaRunner
    from kernel_lib.sim.deployment import deployment_registry
    from kernel_lib.sim.saga_sweep import GRANT_ID, start_task

    reg = deployment_registry()
    log = TrajectoryLog(store, trajectory_id, must_survive=must_survive, owner_epoch=owner_epoch)
    if on_log is not None:
        on_log(log)
    gate = DispatchGate(log, AdmissionPolicy({GRANT_ID: set(reg.names())}), coalesce_admission=True,
                        on_position=on_position, fence_check=fence_check)
    if gate.record.task is None:
        start_task(gate, trajectory_id)
    return SagaRunner(gate, reg, endpoints if endpoints is not None else fleet.client(trajectory_id),
                      saga_id=saga_id, grant_id=GRANT_ID,
                      retry=RetryPolicy(max_attempts=4, base_s=0.01, cap_s=0.2), sleep=fleet.clock.advance)



def run_saga_process(args: argparse.Namespace) -> int:
    """The worker process's body (module docstring)."""
    from kernel_lib.live.services import LiveFleet
    from kernel_lib.log import open_store
    from kernel_lib.sim.deployment import run_deployment

    fleet = LiveFleet.attach(args.fleet, client_timeout_s=args.client_timeout_s)
    store = open_store(args.store, args.store_path, create=True)
    names: list[str] = []
    holder: list[Any] = []

    def on_position(name: str, ev: Any) -> None:
        names.append(name)
        if args.pause_at is not None and len(names) == args.pause_at:
            log = holder[0] if holder else None
            write_text_atomic(Path(args.marker), json.dumps({
                "position": len(names), "name": name, "pid": os.getpid(),
                "log_head": log.head if log else None, "durable_head": log.durable_head if log else None}))
            while True:   # block until killed
                signal.pause()

    out: dict[str, Any] = {"pid": os.getpid(), "trajectory_id": args.trajectory, "saga_id": args.saga_id}
    try:
        runner = build_runner(store, fleet, args.trajectory, args.saga_id, on_position=on_position,
                              must_survive=args.must_survive, on_log=holder.append)
        try:
            result = run_deployment(runner, domain=args.domain)
            out.update(outcome=result["state"], failed_step=result["failed_step"])
        except SagaPanicError as exc:
            out.update(outcome="PANIC", error=str(exc)[:500], incident_id=exc.incident.get("incident_id"),
                       residue=exc.residue)
        except TrajectoryFrozenRefusal as exc:
            out.update(outcome="FROZEN", error=str(exc)[:500], incident_id=exc.incident_id)
        out.update(positions=names, log_head=runner.gate.log.head)
    finally:
        store.close()
        fleet.close()
    print(json.dumps(out, default=str), flush=True)
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m kernel_lib.live.saga_worker",
                                 description="The deployment saga's worker process (started by the live saga "
                                             "sweep; to run the sweep use `python -m kernel_lib saga sweep`).")
    ap.add_argument("--store", choices=("sqlite", "segment", "etcd"), required=True)
    ap.add_argument("--store-path", required=True,
                    help="the SQLite file, the segment directory, or the etcd members' client URLs (comma-separated)")
    ap.add_argument("--fleet", required=True, help="the running live fleet's state directory")
    ap.add_argument("--trajectory", required=True)
    ap.add_argument("--saga-id", required=True)
    ap.add_argument("--domain", default=None, help="the DNS name T5 publishes (default: the taken one, so T5 fails)")
    ap.add_argument("--pause-at", type=int, default=None, help="block right after the K-th position (K >= 1)")
    ap.add_argument("--marker", default=None, help="file written (atomically) when the worker pauses")
    ap.add_argument("--must-survive", default="host_crash", help="the failure domain the trajectory declares")
    ap.add_argument("--client-timeout-s", type=float, default=5.0, help="how long a service call waits, seconds")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.pause_at is not None and (args.pause_at < 1 or not args.marker):
        ap.error("--pause-at needs K >= 1 and --marker")
    if args.domain is None:
        from kernel_lib.sim.deployment import TAKEN_DOMAIN
        args.domain = TAKEN_DOMAIN
    return run_saga_process(args)


# ------------------------------------------------------------------------------------------------
# the controller: the live sweep
# ------------------------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    from kernel_lib.live.orphan import parent_env

    return {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", **parent_env()}


def _worker_argv(store_kind: str, store_path: str, fleet_dir: Path, trajectory_id: str, saga_id: str,
                 pause_at: int | None = None, marker: Path | None = None) -> list[str]:
    argv = ["--store", store_kind, "--store-path", store_path, "--fleet", str(fleet_dir), "--trajectory",
            trajectory_id, "--saga-id", saga_id]
    if pause_at is not None:
        argv += ["--pause-at", str(pause_at), "--marker", str(marker)]
    return argv


#: What the fork server imports once, so that each worker and recovery process starts in
#: milliseconds instead of paying the imports again (kernel_lib._support.prefork).
PRELOAD = ("kernel_lib.live.saga_worker", "kernel_lib.live.services", "kernel_lib.recovery.runner",
           "kernel_lib.gate.dispatch", "kernel_lib.log", "kernel_lib.log.sqlite", "kernel_lib.log.segment",
           "kernel_lib.sim.deployment", "kernel_lib.sim.saga_sweep", "httpx")


def launcher(use_fork: bool = True) -> Any:
    """The process launcher the live sweep starts its workers with (forked from a server that
    imported :data:`PRELOAD`; ``use_fork=False``: a fresh ``python -m`` interpreter each)."""
    from kernel_lib._support.prefork import PreforkLauncher

    return PreforkLauncher(PRELOAD, use_fork=use_fork)


_MODULE = "kernel_lib.live.saga_worker"


def _run_to_end(launch: Any, argv: list[str], log: Path, timeout_s: float) -> dict[str, Any]:
    """Run a worker process to its end and parse its JSON line. Raises LiveProcessError."""
    out = log.with_name(f"{log.stem}-{uuid.uuid4().hex[:8]}.out")
    try:
        try:
            code = launch.run(_MODULE, argv, stdout=out, stderr=log, env=_env(), timeout_s=timeout_s)
        except subprocess.TimeoutExpired:
            raise LiveProcessError(f"the saga worker did not finish within {timeout_s:g} s") from None
        text = out.read_text(errors="replace") if out.exists() else ""
    finally:
        with contextlib.suppress(OSError):
            out.unlink()
    lines = [ln for ln in text.splitlines() if ln.startswith("{")]
    if code != 0 or not lines:
        tail = log.read_text(errors="replace")[-800:].strip() if log.exists() else ""
        raise LiveProcessError(f"the saga worker exited with code {code}: {tail or '(no output)'}")
    return json.loads(lines[-1])


def _kill_at(launch: Any, argv: list[str], marker: Path, log: Path, timeout_s: float) -> dict[str, Any]:
    """Start a worker paused at a position, wait for its marker, SIGKILL it for real, reap it.
    Returns ``{marker, signal, worker_exit, worker_pid}``; ``marker`` None when the worker ended
    before reaching the position."""
    proc = launch.popen(_MODULE, argv, stdout=Path(os.devnull), stderr=log, env=_env())
    try:
        deadline = time.monotonic() + timeout_s
        seen = None
        while time.monotonic() < deadline:
            if marker.exists():
                with contextlib.suppress(ValueError, OSError):
                    seen = json.loads(marker.read_text())
                    break
            if proc.poll() is not None:
                break
            time.sleep(0.002)
        if seen is None and proc.poll() is None:
            raise LiveProcessError(f"the saga worker did not reach its position within {timeout_s:g} s")
        if seen is not None:
            os.kill(proc.pid, signal.SIGKILL)   # the real thing: no handler runs, nothing is flushed
        code = proc.wait(timeout=30)
        return {"marker": seen, "signal": "SIGKILL" if seen is not None else None, "worker_exit": code,
                "worker_pid": proc.pid}
    finally:
        if proc.poll() is None:
            from kernel_lib._support.procs import kill_group
            kill_group(proc)


def _read_events(store_kind: str, store_path: str, trajectory_id: str) -> list[Any]:
    from kernel_lib.log import open_store

    with open_store(store_kind, store_path, read_only=True) as st:
        return list(st.read(trajectory_id))


def _one_run(launch: Any, store_kind: str, path: str, fleet: Any, tid: str, sid: str, k: int, marker: Path,
             log: Path, timeout_s: float, recover: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """Kill a worker at position ``k``, recover in a new process (unless ``recover`` is False: the
    control), judge by the services. Returns the run's record and the kill's."""
    from kernel_lib.sim.saga_sweep import account

    t_run = time.monotonic()
    kill = _kill_at(launch, _worker_argv(store_kind, path, fleet.state_dir, tid, sid, k, marker), marker, log,
                    timeout_s)
    t_kill = time.monotonic()
    rec = (_run_to_end(launch, _worker_argv(store_kind, path, fleet.state_dir, tid, sid), log, timeout_s) if recover
           else {"outcome": "NOT RECOVERED (control)", "positions": []})
    t_rec = time.monotonic()
    verdict = account(fleet.audits(), fleet.resources(live_only=False), _read_events(store_kind, path, tid), sid)
    row = {"position": k, "crashed_after": None, "signal": kill["signal"], "worker_exit": kill["worker_exit"],
           "paused": kill["marker"], "outcome": rec["outcome"], "recovery_positions": len(rec["positions"]),
           "trajectory_id": tid, "saga_id": sid, **{key: v for key, v in verdict.items() if key != "residue_listed"},
           "residue_listed": len(verdict["residue_listed"]),
           "timings": {"worker_to_kill_s": round(t_kill - t_run, 3), "recovery_s": round(t_rec - t_kill, 3),
                       "judge_s": round(time.monotonic() - t_rec, 3)}}
    return row, kill


def _prepare(fleet: Any, scenario: str) -> None:
    fleet.clear_faults()
    if scenario == "compensator_panic":
        fleet.inject("unbind_firewall", "conflict")


def _checked_arguments(store_kind: str, scenario: str, positions: Iterable[int] | None,
                       workdir: str | os.PathLike | None) -> list[int] | None:
    """:func:`sweep_live`'s arguments checked before anything starts; the positions asked for, or None."""
    if store_kind not in ("sqlite", "segment", "etcd"):
        raise ConfigError(f"the live sweep runs on sqlite, segment or etcd, not {store_kind!r}")
    if scenario not in SCENARIOS:
        raise ConfigError(f"scenario must be one of {', '.join(SCENARIOS)}, got {scenario!r}")
    todo_given = list(positions) if positions is not None else None
    if todo_given is not None and (not todo_given or any(isinstance(k, bool) or not isinstance(k, int) or k < 1
                                                         for k in todo_given)):
        raise ConfigError(f"positions are integers >= 1, got {todo_given!r:.80}")
    if todo_given is not None and len(set(todo_given)) != len(todo_given):
        raise ConfigError(f"positions are each named once, got {todo_given!r:.80}")
    if workdir is not None and not Path(workdir).is_dir():
        raise ConfigError(f"--dir {str(workdir)!r} is not an existing directory")
    return todo_given


def sweep_live(store_kind: str = "sqlite", *, positions: Iterable[int] | None = None, scenario: str = "deployment",
               fleet: Any = None, workdir: str | os.PathLike | None = None, progress: bool = False,
               step_timeout_s: float = 60.0, on_run: Callable[[dict[str, Any]], None] | None = None,
               recover: bool = True, fork: bool = True) -> dict[str, Any]:
    """Kill the deployment saga's worker with a real SIGKILL at every position (or ``positions``)
    and recover in a new process, judged by the live services' audit trails.

    Args:
        store_kind: ``sqlite`` or ``segment`` (a log file per run in the work folder) or ``etcd`` (one
            three-member cluster on loopback for the sweep; each run its own trajectory).
        positions: the kill positions (1..N of the clean run); default all.
        scenario: one of :data:`SCENARIOS`.
        fleet: a running :class:`~kernel_lib.live.services.LiveFleet` to reuse (default: one is
            started in the work folder and stopped at the end).
        workdir: where the work folder goes (default: the system temporary folder); removed after.
        progress: a tqdm bar on stderr (when it is a terminal).
        step_timeout_s: the longest a worker may take to pause or finish.
        on_run: called with each run's record.
        recover: False skips the recovery process (a control: the killed worker's committed
            effects are then left unlisted, and the judgement must say so).
        fork: True (default) forks each worker and recovery process from a server that imported
            the saga's modules once (:func:`launcher`; each is still its own process, killed by a
            real SIGKILL); False starts a fresh ``python -m`` interpreter for each (slower).

    Returns:
        ``{store, services: "live", crash: "sigkill", scenario, positions, position_names,
        compensators_repeated, effects_left_unlisted, forward_repeated, ok, runs: [{position,
        crashed_after, signal, worker_exit, outcome, compensators_repeated, effects_left_unlisted,
        forward_repeated, ..., timings}], errors, timings: {fleet_start_s, clean_run_s, sweep_s,
        per_run_s}}``. ``ok``: every position was reached and killed by SIGKILL, recovered to the
        scenario's end (``ABORT_CONSISTENT``; ``PANIC``/``FROZEN`` with the residue listed for
        ``compensator_panic``), with no repeated compensator, no repeated forward effect and no
        committed effect left unlisted.

    Raises:
        ConfigError: a bad store kind, scenario, position or repeated position, or ``workdir`` not an
            existing directory (before anything starts); a position past the clean run's last one
            (after the clean run, which counts them).
        LiveProcessError / ServiceError / QuorumSetupError: the fleet, the cluster or the clean run failed.
    """
    from tqdm import tqdm

    from kernel_lib.live.services import LiveFleet
    from kernel_lib.live.workspace import remove_tree
    from kernel_lib.sim.deployment import TAKEN_DOMAIN
    todo_given = _checked_arguments(store_kind, scenario, positions, workdir)
    t_start = time.monotonic()
    launch = launcher(fork)
    work = Path(tempfile.mkdtemp(prefix="kl-saga-live-", dir=workdir))
    own_fleet = fleet is None
    cluster = None
    nonce = uuid.uuid4().hex[:6]
    timings: dict[str, Any] = {}
    try:
        if own_fleet:
            fleet = LiveFleet(work / "fleet", client_timeout_s=5.0)
            timings["fleet_start_s"] = fleet.start_s
        fleet.taken_name(TAKEN_DOMAIN)
        if store_kind == "etcd":
            from kernel_lib.quorum.cluster import EtcdCluster

            t0 = time.monotonic()
            cluster = EtcdCluster(3, work_dir=work / "etcd").start()
            timings["etcd_start_s"] = round(time.monotonic() - t0, 3)

        def location(k: int) -> str:
            if cluster is not None:
                return ",".join(cluster.endpoints())
            return str(work / (f"run-{k:04d}.sqlite" if store_kind == "sqlite" else f"run-{k:04d}.seglog"))

        def ids(k: int) -> tuple[str, str]:
            return f"saga-live-{nonce}-{k:04d}", f"deploy-{nonce}-{k:04d}"

        t0 = time.monotonic()
        _prepare(fleet, scenario)
        tid, sid = ids(0)
        clean = _run_to_end(launch, _worker_argv(store_kind, location(0), fleet.state_dir, tid, sid),
                            work / "worker.log", step_timeout_s)
        timings["clean_run_s"] = round(time.monotonic() - t0, 3)
        names = clean["positions"]
        todo = todo_given if todo_given is not None else list(range(1, len(names) + 1))
        bad = [k for k in todo if k > len(names)]
        if bad:
            raise ConfigError(f"positions {bad} are past the clean run's last position {len(names)}")
        rows: list[dict[str, Any]] = []
        errors: list[dict[str, Any]] = []
        bar = tqdm(total=len(todo), desc=f"saga sweep ({store_kind}, live, sigkill)", unit="position",
                   file=sys.stderr, disable=not (progress and sys.stderr.isatty()))
        try:
            for k in todo:
                bar.set_postfix_str(f"{k}: {names[k - 1]}")
                tid, sid = ids(k)
                path = location(k)
                marker = work / f"paused-{k:04d}.json"
                _prepare(fleet, scenario)
                try:
                    row, kill = _one_run(launch, store_kind, path, fleet, tid, sid, k, marker, work / "worker.log",
                                         step_timeout_s, recover)
                except LiveProcessError as exc:
                    errors.append({"position": k, "error": str(exc)[:800]})
                    bar.update(1)
                    continue
                row["crashed_after"] = names[k - 1]
                if kill["signal"] != "SIGKILL" or kill["worker_exit"] != -signal.SIGKILL:
                    errors.append({"position": k, "error": f"the worker was not killed by SIGKILL at position {k} "
                                                           f"(exit {kill['worker_exit']})"})
                rows.append(row)
                if on_run is not None:
                    on_run(row)
                bar.update(1)
        finally:
            bar.close()
        fleet.clear_faults()
        expected = ("ABORT_CONSISTENT",) if scenario == "deployment" else ("PANIC", "FROZEN")
        sweep_s = round(time.monotonic() - t_start, 3)
        timings.update(sweep_s=sweep_s, per_run_s=round(sum(r["timings"]["worker_to_kill_s"] + r["timings"]
                                                            ["recovery_s"] for r in rows) / max(1, len(rows)), 3))
        timings["worker_start"] = "forked from a preloaded server" if launch.forks else "python -m per process"
        return {"store": store_kind, "services": "live", "crash": "sigkill", "scenario": scenario,
                "positions": len(rows), "position_names": names, "clean_outcome": clean["outcome"],
                "compensators_repeated": sum(r["compensators_repeated"] for r in rows),
                "effects_left_unlisted": sum(r["effects_left_unlisted"] for r in rows),
                "forward_repeated": sum(r["forward_repeated"] for r in rows),
                "ok": not errors and len(rows) == len(todo) and all(
                    r["compensators_repeated"] == 0 and r["effects_left_unlisted"] == 0 and r["forward_repeated"] == 0
                    and r["outcome"] in expected for r in rows),
                "runs": rows, "errors": errors, "timings": timings}
    finally:
        if cluster is not None:
            cluster.stop()
        if own_fleet and fleet is not None:
            fleet.close()
        remove_tree(work)


if __name__ == "__main__":
    sys.exit(main())
