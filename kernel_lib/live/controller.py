"""The crash controller: the worksheet run end to end with real processes (§11.1, §11.3.3, §11.5.3).

:func:`run_worksheet` builds ``ws_r18``, starts the executor service, starts a worker that pauses
right after a chosen event is durable, kills it with a real ``os.kill(pid, SIGKILL)``, asks the
executor whether the test is still running, then starts a replacement worker process that folds
the surviving log (``recovered``) and reconciles by operation id against the executor
(``reconciled``). Every process is started in its own session and its whole process group is
killed in a ``finally``; the work directory (snapshot, log, executor state) is removed unless
``keep`` names a directory to copy the log to.

:func:`run_zombie` is the §11.5.1 handoff with a worker that is suspended, not dead: the worker
holds a lease from an ownership coordinator, dispatches ``test_r18`` and is frozen with
``SIGSTOP``; its lease lapses; a replacement is granted a newer owner_epoch, installs it in the log
and at the executor, and reconciles ``test_r18`` by operation id; then the old worker gets
``SIGCONT`` and acts on its stale belief. The report shows the epochs, what each boundary answered
to the late writes, and that the operation dispatched before the stall was kept, not sent again.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from kernel_lib._support import workdirs
from kernel_lib._support.checks import check_id
from kernel_lib._support.procs import kill_group, port_accepts, process_state  # noqa: F401
from kernel_lib._support.workdirs import OWNER_FILE  # noqa: F401
from kernel_lib.errors import ConfigError
from kernel_lib.errors import LiveProcessError
from kernel_lib.live.orphan import parent_env
from kernel_lib.live.crash_points import CrashPoint
from kernel_lib.live.worker import (
    OPERATION,
    TOOL_REPEAT_CONTRACT,
    TRAJECTORY,
    crash_points,  # noqa: F401 - re-exported: kernel_lib.live.crash_points
    reference_events,
    resolve_crash_point,
)
from kernel_lib.live.workspace import build_snapshot, remove_tree

CRASH_POINTS = ("Authorized", "BudgetReserved", "ToolIntent", "ToolResult")
TEMP_PREFIX = "kernel_lib_live_"

#: What table 3 lets recovery conclude about test_r18 at each crash point (for the report).
EXPECTED = {
    "Authorized": "not dispatched: authorized but not admitted (no reservation, no intent)",
    "BudgetReserved": "not dispatched: admitted with its reservation held, no durable intent",
    "ToolIntent": "in doubt: durable intent, no evidence; the request may or may not have left",
    "ToolResult": "in doubt: the executor's acceptance (job handle) is logged, no completion evidence",
}


def expected_at(crash_after: str | int | CrashPoint, seed: int = 0) -> str:
    """What table 3 lets recovery conclude about ``test_r18`` after a crash at ``crash_after``:
    the :data:`EXPECTED` line for the four named points, otherwise the conclusion
    (:func:`kernel_lib.core.crash_positions.conclude`) on the reference trajectory's prefix up to
    that position. Raises UnknownCrashPointError."""
    from kernel_lib.core.crash_positions import conclude
    from kernel_lib.core.record import fold, initial_record

    point = resolve_crash_point(crash_after, seed)
    if isinstance(crash_after, str) and crash_after in EXPECTED:
        return EXPECTED[crash_after]
    rec = fold(initial_record(TRAJECTORY), reference_events(seed)[:point.durable_at])
    if OPERATION not in rec.operations:
        return (f"{OPERATION} absent: not yet proposed, so nothing of it was dispatched; the next model turn may "
                "propose it")
    concl, why = conclude(rec, OPERATION, prefix_complete=True)
    return f"{concl.replace('_', ' ')}: {why}"


def executor_invocations(url: str, store_kind: str, store_path: Any) -> dict[str, dict[str, Any]]:
    """The executor's own count of invocations per tool operation of the trajectory, read from the
    executor process (``GET /operations/{id}``: ``submissions``, the accepted ``POST /jobs`` naming
    the operation; 0 when it knows none), with the repeat contract the operation's durable intent
    declares in the log (or, with no intent logged, the worksheet's tool definition,
    :data:`~kernel_lib.live.worker.TOOL_REPEAT_CONTRACT`).

    Returns ``{operation_id: {"invocations", "executor_status", "job_handle", "repeat_contract",
    "contract_from": "intent"|"tool definition"}}``; ``test_r18`` is always listed.

    Raises: LiveProcessError: the executor does not answer."""
    import httpx

    from kernel_lib.core.events import ToolIntent
    from kernel_lib.log import open_store

    with open_store(store_kind, store_path, read_only=True) as st:
        contracts = {e.payload.operation_id: e.payload.repeat_contract for e in st.read(TRAJECTORY)
                     if isinstance(e.payload, ToolIntent)}
    out: dict[str, dict[str, Any]] = {}
    try:
        with httpx.Client(timeout=5.0, trust_env=False) as client:
            for op in sorted({OPERATION, *contracts}):
                body = client.get(f"{url}/operations/{op}").json()
                out[op] = {"invocations": int(body.get("submissions") or 0) if body.get("status") != "unknown" else 0,
                           "executor_status": body.get("status"), "job_handle": body.get("job_handle"),
                           "repeat_contract": contracts.get(op, TOOL_REPEAT_CONTRACT),
                           "contract_from": "intent" if op in contracts else "tool definition"}
    except (httpx.HTTPError, ValueError) as exc:
        raise LiveProcessError(f"the executor did not report its invocation counts: {type(exc).__name__}: {exc}") \
            from None
    return out


def _wait_for_file(path: Path, proc: subprocess.Popen, timeout_s: float, what: str, errlog: Path) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            try:
                return json.loads(path.read_text())
            except ValueError:   # written atomically, so only a foreign file could be partial
                pass
        if proc.poll() is not None:
            raise LiveProcessError(f"{what} exited with code {proc.returncode} before it reported: "
                                   f"{_tail(errlog)}")
        time.sleep(0.02)
    raise LiveProcessError(f"{what} did not report within {timeout_s:g} s: {_tail(errlog)}")


def _tail(path: Path, n: int = 600) -> str:
    try:
        return path.read_text(errors="replace")[-n:].strip() or "(no output)"
    except OSError:
        return "(no output)"


def live_env() -> dict[str, str]:
    """Environment for the live processes: unbuffered output, no bytecode files left behind, and
    this process named as their parent so that they shut down if it dies (:mod:`.orphan`)."""
    return {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", **parent_env()}


def spawn_executor(work: Path, snap: Any, *, usd_per_s: float, test_delay_s: float, env: dict[str, str],
                   timeout_s: float, launch: Any = None) -> tuple[subprocess.Popen, dict[str, Any]]:
    """Start the executor service in its own session, on loopback, and wait for its ready file.

    Returns the process and its ready record ``{port, url, public_key_path, pid, inbox_path}``; the
    executor deposits every signed completion record in the durable result inbox ``work/inbox.sqlite``.
    Raises LiveProcessError if it exits or does not report within ``timeout_s``. ``launch``: a
    :class:`~kernel_lib._support.prefork.PreforkLauncher` to fork it from (default: a new interpreter).
    """
    state, log = work / "executor", work / "executor.log"
    argv = ["--snapshot", str(snap.path), "--digest", snap.digest, "--state-dir", str(state),
            "--usd-per-s", str(usd_per_s), "--test-delay-s", str(test_delay_s), "--inbox", str(work / "inbox.sqlite")]
    proc = _start("kernel_lib.live.executor", argv, log, env, launch)
    try:
        return proc, _wait_for_file(state / "ready.json", proc, timeout_s, "the executor", log)
    except BaseException:
        stop_executor(proc)
        raise


def spawn_worker(work: Path, *, store_kind: str, store_path: Path, ready: dict[str, Any], digest: str, seed: int,
                 pause_at: str | None, env: dict[str, str], timeout_s: float, extra_args: Sequence[str] = (),
                 wait_for_marker: bool = False, launch: Any = None) -> tuple[subprocess.Popen, dict | None]:
    """Start a worker running the trajectory; with ``pause_at`` (or ``wait_for_marker``, for a
    worker whose ``extra_args`` make it write its marker, e.g. ``--stall-after-dispatch``), wait
    until it has written its marker (``work/paused.json``) and return the marker too. Its output
    goes to ``work/worker.log``."""
    marker, log = work / "paused.json", work / "worker.log"
    argv = ["--store", store_kind, "--store-path", str(store_path), "--executor-url", ready["url"],
            "--public-key", ready["public_key_path"], "--snapshot-digest", digest, "--seed", str(seed)]
    if pause_at:
        argv += ["--pause-at", pause_at]
    if pause_at or wait_for_marker:
        argv += ["--marker", str(marker)]
    argv += list(extra_args)
    proc = _start("kernel_lib.live.worker", argv, log, env, launch)
    try:
        return proc, (_wait_for_file(marker, proc, timeout_s, "the worker", log)
                      if pause_at or wait_for_marker else None)
    except BaseException:
        kill_group(proc)
        raise


def run_replacement(*, store_kind: str, store_path: Path, ready: dict[str, Any], seed: int, reconcile: bool,
                    reconcile_timeout_s: float, step_timeout_s: float, env: dict[str, str],
                    extra_args: Sequence[str] = (), snapshot: Any = None,
                    prefill: Any = None, restore_root: Path | None = None, launch: Any = None) -> dict[str, Any]:
    """Run a replacement worker in a new process: fold the surviving log (and, with ``reconcile``,
    take ownership and reconcile by operation id). ``extra_args`` go to the worker (e.g.
    ``--coordinator FILE --owner-id ID``). ``snapshot`` (the run's ``ws_r18``
    :class:`~kernel_lib.live.workspace.Snapshot`) lets the resume restore the workspace into a fresh
    directory next to the log; ``prefill`` (a :class:`kernel_lib.resume.stages.PrefillModel`) sets the
    givens of the computed prefill stage (one that needs no prefill is sent as an empty context).
    Returns its JSON report ``{recovered, reconciled?, model, availability, ownership?,
    resume_timeline}``. Raises LiveProcessError if it fails (an unavailable log exits 3, with the
    reasons) or times out."""
    cmd = ["--recover", "--store", store_kind,
           "--store-path", str(store_path), "--executor-url", ready["url"], "--public-key", ready["public_key_path"],
           "--seed", str(seed), "--fresh-seed", str(seed + 1), "--reconcile-timeout-s", str(reconcile_timeout_s),
           *extra_args]
    if ready.get("inbox_path"):
        cmd += ["--inbox", ready["inbox_path"]]
    if snapshot is not None:
        cmd += ["--workspace-snapshot", str(snapshot.path), "--snapshot-digest", snapshot.digest,
                "--restore-root", str(restore_root or Path(store_path).resolve().parent)]
    if prefill is not None:   # a model needing no prefill is sent as an empty context
        cmd += ["--prefill-context-tokens", str(prefill.context_tokens),
                "--prefill-cached-prefix-tokens", str(prefill.cached_prefix_tokens)]
        if prefill.needed:
            cmd += ["--prefill-tokens-per-s", repr(prefill.prefill_tokens_per_s)]
    if reconcile:
        cmd.append("--reconcile")
    timeout_s = reconcile_timeout_s + step_timeout_s
    if launch is None:
        try:
            rp = subprocess.run([sys.executable, "-m", "kernel_lib.live.worker", *cmd], capture_output=True, text=True,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise LiveProcessError(f"the replacement worker did not finish within {exc.timeout:g} s") from None
        code, stdout, stderr = rp.returncode, rp.stdout, rp.stderr
    else:
        with tempfile.TemporaryDirectory(prefix="kl-replacement-") as tmp:
            out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
            try:
                code = launch.run("kernel_lib.live.worker", cmd, stdout=out, stderr=err, env=env, timeout_s=timeout_s)
            except subprocess.TimeoutExpired:
                raise LiveProcessError(f"the replacement worker did not finish within {timeout_s:g} s") from None
            stdout = out.read_text(errors="replace") if out.exists() else ""
            stderr = err.read_text(errors="replace") if err.exists() else ""
    if code != 0:
        raise LiveProcessError(f"the replacement worker failed (exit {code}): {stderr.strip()[-600:]}")
    return json.loads(stdout.strip().splitlines()[-1])


def _start(module: str, argv: list[str], log: Path, env: dict[str, str], launch: Any) -> Any:
    """Start ``python -m module argv`` in its own session, output to ``log``: forked from ``launch``
    (a :class:`~kernel_lib._support.prefork.PreforkLauncher`) when given, else a new interpreter."""
    if launch is not None:
        log.write_bytes(b"")
        return launch.popen(module, argv, stdout=log, stderr=log, env=env)
    with open(log, "wb") as fh:
        return subprocess.Popen([sys.executable, "-m", module, *argv], stdout=fh, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, env=env)


#: What the fork server of a worksheet sweep imports once (kernel_lib._support.prefork).
WORKSHEET_PRELOAD = ("kernel_lib.live.worker", "kernel_lib.live.executor", "kernel_lib.log", "kernel_lib.log.sqlite",
                     "kernel_lib.log.segment", "kernel_lib.gate.dispatch", "kernel_lib.resume.stages", "httpx")


def worksheet_launcher() -> Any:
    """The launcher a sweep forks its executor, worker and replacement processes from."""
    from kernel_lib._support.prefork import PreforkLauncher

    return PreforkLauncher(WORKSHEET_PRELOAD)


def stop_executor(proc: subprocess.Popen | None) -> None:
    """SIGTERM first (a clean shutdown removes its job trees), then SIGKILL its whole group."""
    if proc is not None and proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
    kill_group(proc)


def _tear_down_run(result: dict[str, Any], executor: subprocess.Popen | None, worker: subprocess.Popen | None,
                   work: Path, port: int | None) -> None:
    """Stop the executor, kill the worker's group, remove the work directory, and say so in
    ``result`` (``processes`` and ``cleanup``)."""
    stop_executor(executor)
    kill_group(worker)
    remove_tree(work)
    result["processes"] = {"executor_pid": executor.pid if executor else None,
                           "worker_pid": worker.pid if worker else None}
    result["cleanup"] = {"workdir_removed": not work.exists(), "workdir": str(work),
                         "executor_port_closed": (not port_accepts(port)) if port else None}


def _log_location(work: Path, store_kind: str, result: dict[str, Any]) -> tuple[Any, Any]:
    """Where this run's log lives: a file or directory in ``work``, or (``etcd``) a new three-member
    etcd cluster on loopback whose client URLs, comma-separated, are the store path."""
    if store_kind != "etcd":
        return None, work / ("log.sqlite" if store_kind == "sqlite" else "seglog")
    from kernel_lib.quorum.cluster import EtcdCluster
    cluster = EtcdCluster(3, work_dir=work / "etcd").start()
    result["etcd"] = {"members": [{"member": m.name, "pid": m.pid, "client_url": m.client_url}
                                  for m in cluster.members]}
    return cluster, ",".join(cluster.endpoints())


def _stop_cluster(cluster: Any, result: dict[str, Any]) -> None:
    if cluster is not None:
        cluster.stop()
        result.setdefault("etcd", {})["members_left_running"] = sum(1 for m in cluster.members if m.running())


#: the stores the live worksheet runs on (the etcd store needs a cluster: ``worksheet --store etcd``)
WORKSHEET_STORES = ("sqlite", "segment", "etcd")


def run_worksheet(crash_after: str | int = "ToolResult", store_kind: str = "sqlite",
                  workdir: str | os.PathLike | None = None, seed: int = 0, test_delay_s: float = 2.0, *,
                  usd_per_s: float = 0.01,
                  reconcile_timeout_s: float = 60.0, step_timeout_s: float = 60.0,
                  keep: str | os.PathLike | None = None, launch: Any = None) -> dict[str, Any]:
    """Run the crash worksheet once with real processes and a real SIGKILL.

    Args:
        crash_after: kill the worker right after this crash point is durable: any position of the
            trajectory (:func:`crash_points`), as a log position ``N``, ``TYPE#K`` or ``TYPE`` (the
            first such event for ``test_r18``, so :data:`CRASH_POINTS` keep their table-3 meaning);
            see :mod:`kernel_lib.live.crash_points`.
        store_kind: ``sqlite`` or ``segment``.
        workdir: parent directory for this run's private work directory (default: the system
            temp dir). The private directory is always removed.
        seed: the model stand-in's seed (the replacement's fresh sample uses ``seed + 1``).
        test_delay_s: artificial delay before the executor starts pytest, so the test is still
            running at the crash (seconds).
        usd_per_s: the executor's charge per second of test time.
        reconcile_timeout_s: how long reconciliation waits for a running job to finish.
        step_timeout_s: timeout for each process to report (ready, paused, recovered).
        keep: copy the surviving log (after reconciliation) into this directory.
        launch: a :func:`worksheet_launcher` to fork the executor, worker and replacement from
            (a sweep: each is still its own process); default a new interpreter for each.

    Returns:
        ``{crash: {signal, log_position, worker_pid, point, ...}, executor: {job_running_at_crash, ...},
        recovered: {...}, reconciled: {...}, model: {...}, resume_timeline: {...}, invocations,
        expected, processes, cleanup}`` (``resume_timeline``: the replacement's stages of eq. 7, see
        :mod:`kernel_lib.resume.stages`; ``invocations``: :func:`executor_invocations` after
        recovery, the executor's own count per tool operation).

    Raises:
        UnknownCrashPointError (a ConfigError): ``crash_after`` names no position; it lists them.
        ConfigError: another bad argument. LiveProcessError: a process failed or timed out
        (everything is still torn down).
    """
    point = resolve_crash_point(crash_after, seed, parameter="crash_after")
    if store_kind not in WORKSHEET_STORES:
        raise ConfigError(f"--store must be sqlite, segment or etcd, got {store_kind!r}")
    if not (isinstance(test_delay_s, (int, float)) and 0 <= test_delay_s <= 600):
        raise ConfigError(f"test_delay_s must be between 0 and 600 seconds, got {test_delay_s!r}")
    if not (isinstance(reconcile_timeout_s, (int, float)) and not isinstance(reconcile_timeout_s, bool)
            and 0 <= reconcile_timeout_s <= 600):
        raise ConfigError(f"reconcile_timeout_s must be between 0 and 600 seconds, got {reconcile_timeout_s!r}")
    work = make_workdir(workdir)
    executor = worker = None
    port = None
    result: dict[str, Any] = {"crash_after": crash_after, "store": store_kind, "seed": seed,
                              "expected": expected_at(crash_after, seed)}
    env = live_env()
    cluster = None
    try:
        snap = build_snapshot(work / "snapshots")
        cluster, store_path = _log_location(work, store_kind, result)
        executor, ready = spawn_executor(work, snap, usd_per_s=usd_per_s, test_delay_s=test_delay_s, env=env,
                                         timeout_s=step_timeout_s, launch=launch)
        port, url = ready["port"], ready["url"]
        worker, paused = spawn_worker(work, store_kind=store_kind, store_path=store_path, ready=ready,
                                      digest=snap.digest, seed=seed, pause_at=str(crash_after), env=env,
                                      timeout_s=step_timeout_s, launch=launch)
        if paused["log_position"] != point.durable_at:   # the worker resolved the point as we did
            raise LiveProcessError(f"the worker paused at log position {paused['log_position']}, not at "
                                   f"{point.describe()}")

        os.kill(worker.pid, signal.SIGKILL)            # the crash: a real SIGKILL, no clean-up code runs
        rc = worker.wait(timeout=step_timeout_s)
        kill_group(worker)
        import httpx
        with httpx.Client(timeout=5.0, trust_env=False) as client:
            at_crash = client.get(f"{url}/operations/{OPERATION}").json()
        result["crash"] = {"signal": "SIGKILL", "log_position": paused["log_position"], "worker_pid": worker.pid,
                           "paused_at": paused["paused_at"], "worker_exit": rc, "point": point.to_dict()}
        result["executor"] = {"job_running_at_crash": at_crash["status"] == "running",
                              "status_at_crash": at_crash["status"], "job_handle": at_crash.get("job_handle"),
                              "charged_usd_at_crash": at_crash.get("charged_usd"), "pid": executor.pid,
                              "port": port, "url": url}

        out = run_replacement(store_kind=store_kind, store_path=store_path, ready=ready, seed=seed, reconcile=True,
                              reconcile_timeout_s=reconcile_timeout_s, step_timeout_s=step_timeout_s, env=env,
                              snapshot=snap, restore_root=work, launch=launch)
        result["recovered"], result["reconciled"], result["model"] = out["recovered"], out["reconciled"], out["model"]
        result["resume_timeline"] = out.get("resume_timeline")
        result["invocations"] = executor_invocations(url, store_kind, store_path)
        if keep is not None:
            dest = Path(keep)
            dest.mkdir(parents=True, exist_ok=True)
            if store_kind == "etcd":      # the cluster goes away with the run: keep its events as JSON lines
                from kernel_lib.log import open_store
                from kernel_lib.log.files import encode_jsonl
                target = dest / "log.jsonl"
                with open_store("etcd", store_path, read_only=True) as st:
                    target.write_bytes(encode_jsonl(st.read(TRAJECTORY)))
            else:
                target = dest / Path(store_path).name
                if Path(store_path).is_dir():
                    shutil.copytree(store_path, target, dirs_exist_ok=True)
                else:
                    shutil.copyfile(store_path, target)
            result["kept_log"] = str(target)
        return result
    finally:
        _stop_cluster(cluster, result)
        _tear_down_run(result, executor, worker, work, port)


# ------------------------------------------------------------------------------------------------
# the zombie worker (§11.5.1)
# ------------------------------------------------------------------------------------------------


def _last_json(path: Path, key: str) -> dict[str, Any] | None:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if key in obj:
                return obj
    return None


def _check_zombie_args(store_kind: str, lease_ttl_s: float | None, test_delay_s: float,
                       reconcile_timeout_s: float) -> float:
    """Check :func:`run_zombie`'s store and times; return the old worker's lease term in seconds
    (the store's default when None, rounded up to whole seconds on etcd). Raises ConfigError."""
    if store_kind not in ("sqlite", "etcd"):
        raise ConfigError(f"the zombie scenario needs the sqlite or etcd store, not {store_kind!r}: "
                          "the segment log admits "
                          "one opener at a time (its directory lock), so a replacement cannot even open it while "
                          "the stalled worker lives; its fencing is tested in-process (tests/test_ownership.py)")
    if lease_ttl_s is None:        # etcd lease TTLs are whole seconds, counted on the leader's clock
        lease_ttl_s = 3.0 if store_kind == "etcd" else 1.0
    elif store_kind == "etcd" and not isinstance(lease_ttl_s, bool) and isinstance(lease_ttl_s, (int, float)):
        if lease_ttl_s < 2:
            raise ConfigError(f"with --store etcd the lease term must be at least 2 s (etcd counts lease TTLs in whole "
                              f"seconds, and the old worker must still hold its lease when it dispatches), got "
                              f"{lease_ttl_s!r}")
        lease_ttl_s = float(math.ceil(lease_ttl_s))     # what etcd will grant
    for name, value, lo, hi in (("lease_ttl_s", lease_ttl_s, 0.2, 60), ("test_delay_s", test_delay_s, 0, 600),
                                ("reconcile_timeout_s", reconcile_timeout_s, 0, 600)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
            raise ConfigError(f"{name} must be between {lo} and {hi} seconds, got {value!r}")
    return lease_ttl_s


def _freeze(pid: int) -> str:
    """SIGSTOP the process ``pid`` (frozen, not killed), wait up to 5 s until the kernel shows it
    stopped, and return its process state (``"T"`` once stopped)."""
    os.kill(pid, signal.SIGSTOP)                 # frozen, not killed
    deadline = time.monotonic() + 5
    while process_state(pid) != "T" and time.monotonic() < deadline:
        time.sleep(0.01)
    return process_state(pid)


def _wait_for_lapse(coord) -> bool:
    """Sleep until the trajectory's current lease at ``coord`` has expired (etcd's own clock may
    lag by about a second: poll up to 5 s more); True when it has lapsed."""
    held = coord.current(TRAJECTORY)
    time.sleep(max(0.0, held.expires_at_s - time.time()) + 0.05)   # let the old lease lapse
    deadline = time.monotonic() + 5.0      # etcd expires leases on its own clock, within about a second
    while coord.current(TRAJECTORY).live(time.time()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not coord.current(TRAJECTORY).live(time.time())


def run_zombie(store_kind: str = "sqlite", workdir: str | os.PathLike | None = None, seed: int = 0,
               test_delay_s: float = 3.0, *, lease_ttl_s: float | None = None, usd_per_s: float = 0.01,
               reconcile_timeout_s: float = 60.0, step_timeout_s: float = 60.0,
               takeover_owner_id: str = "worker-new") -> dict[str, Any]:
    """Run the zombie handoff of §11.5.1 once, with real processes and real signals.

    1. A worker takes a lease (owner_epoch 1) from an SQLite ownership coordinator, runs the
       trajectory and dispatches ``test_r18`` (the executor accepts it as ``job_tests_18``).
    2. Right after that it renews its lease one last time and is frozen with ``SIGSTOP`` (not
       killed); the test keeps running on the executor.
    3. Its lease lapses (``lease_ttl_s``). A replacement process is granted owner_epoch 2,
       installs it in the log and at the executor, and reconciles ``test_r18`` by operation id:
       it waits for the running job and records its signed completion record (or, when the job
       ended before the replacement started, ingests that record from the durable result inbox
       without asking the executor; ``takeover.reconciliation.source`` says which). It
       dispatches nothing.
    4. The old worker gets ``SIGCONT`` and acts as if it still owned the trajectory: it appends
       the completion evidence, tries a second attempt through its dispatch gate, and re-sends its
       original request to the executor. Each boundary must refuse it.

    Args:
        store_kind: ``sqlite`` (the only store two worker processes can open at once; the
            segment log admits a single opener through its directory lock).
        workdir: parent of this run's private work directory (default: the system temp dir).
        seed: the model stand-in's seed.
        test_delay_s: the executor's wait before pytest starts, so the test is still running at
            the stall (seconds).
        lease_ttl_s: the old worker's lease term (seconds, 0.2..60; default 1.0, or 3.0 on etcd,
            whose lease TTLs are whole seconds).
        usd_per_s, reconcile_timeout_s, step_timeout_s: as :func:`run_worksheet`.
        takeover_owner_id: the replacement's claimant id at the coordinator; the report's
            ``takeover.owner_id`` is the owner the coordinator's grant names.

    Returns:
        ``{epochs, stall, takeover, resume, rejections, lease_after_resume, preserved, log,
        executor, checks, ok, processes, cleanup}``; ``ok`` is True when every late action was
        refused, the log's epochs never go down, and ``test_r18`` was dispatched exactly once.

    Raises:
        ConfigError: a bad argument (or ``store_kind="segment"``). LiveProcessError: a process
        failed or timed out (everything is still torn down).
    """
    takeover_owner_id = check_id("takeover_owner_id", takeover_owner_id)
    from kernel_lib.log import open_store
    from kernel_lib.core.record import fold, initial_record

    lease_ttl_s = _check_zombie_args(store_kind, lease_ttl_s, test_delay_s, reconcile_timeout_s)
    work = make_workdir(workdir)
    executor = old = None
    port = None
    result: dict[str, Any] = {"store": store_kind, "seed": seed, "lease_ttl_s": lease_ttl_s}
    env = live_env()
    coord_path: Any = work / "leases.sqlite"
    coord = None
    cluster = None
    try:
        snap = build_snapshot(work / "snapshots")
        cluster, store_path = _log_location(work, store_kind, result)
        if cluster is not None:
            coord_path = "etcd:" + store_path       # leases on the same etcd cluster (§11.5.1)
        executor, ready = spawn_executor(work, snap, usd_per_s=usd_per_s, test_delay_s=test_delay_s, env=env,
                                         timeout_s=step_timeout_s)
        port, url = ready["port"], ready["url"]
        old, marker = spawn_worker(
            work, store_kind=store_kind, store_path=store_path, ready=ready, digest=snap.digest, seed=seed,
            pause_at=None, env=env, timeout_s=step_timeout_s, wait_for_marker=True,
            extra_args=["--coordinator", str(coord_path), "--owner-id", "worker-old", "--lease-ttl-s",
                        str(lease_ttl_s), "--stall-after-dispatch"])
        state_when_stopped = _freeze(old.pid)
        import httpx
        client = httpx.Client(timeout=10.0, trust_env=False)
        at_stall = client.get(f"{url}/operations/{OPERATION}").json()

        from kernel_lib.quorum.coordinator import open_coordinator
        coord = open_coordinator(str(coord_path))
        lapsed = _wait_for_lapse(coord)

        out = run_replacement(store_kind=store_kind, store_path=store_path, ready=ready, seed=seed, reconcile=True,
                              reconcile_timeout_s=reconcile_timeout_s, step_timeout_s=step_timeout_s, env=env,
                              extra_args=["--coordinator", str(coord_path), "--owner-id", takeover_owner_id,
                                          "--lease-ttl-s", "300"], snapshot=snap, restore_root=work)
        os.kill(old.pid, signal.SIGCONT)
        try:
            rc = old.wait(timeout=step_timeout_s)
        except subprocess.TimeoutExpired:
            raise LiveProcessError(f"the resumed worker did not finish within {step_timeout_s:g} s: "
                                   f"{_tail(work / 'worker.log')}") from None
        zombie = (_last_json(work / "worker.log", "zombie") or {}).get("zombie")
        if zombie is None:
            raise LiveProcessError(f"the resumed worker (exit {rc}) printed no report: {_tail(work / 'worker.log')}")

        final = client.get(f"{url}/operations/{OPERATION}").json()
        fences = client.get(f"{url}/fences/{TRAJECTORY}").json()
        client.close()
        store = open_store(store_kind, store_path, read_only=True)
        try:
            events = list(store.read(TRAJECTORY))
            log_fence = store.fence(TRAJECTORY)
        finally:
            store.close()
        record = fold(initial_record(TRAJECTORY), events)
        op = record.operations[OPERATION]
        grants = coord.history(TRAJECTORY)
        epochs = [e.owner_epoch for e in events]
        ownership = out.get("ownership") or {}
        new_epoch = ownership.get("lease", {}).get("owner_epoch")
        action = (out.get("reconciled") or {}).get("actions", {}).get(OPERATION, {})

        result["epochs"] = {"old_worker": marker["owner_epoch"], "new_worker": new_epoch, "log_fence": log_fence,
                            "executor_fence": fences.get("owner_epoch"),
                            "grants": [{"owner_id": g.owner_id, "owner_epoch": g.owner_epoch,
                                        "granted_at_s": round(g.granted_at_s, 3)} for g in grants]}
        result["stall"] = {"signal": "SIGSTOP", "worker_pid": old.pid, "process_state": state_when_stopped,
                           "stalled_after": marker["stalled_after"], "log_position": marker["log_position"],
                           "executor_status_at_stall": at_stall.get("status"),
                           "job_handle": at_stall.get("job_handle"), "lease_lapsed_before_takeover": lapsed,
                           "stalled_s": round(zombie["resumed_at_s"] - zombie["stalled_at_s"], 3)}
        result["takeover"] = {"owner_id": ownership.get("lease", {}).get("owner_id"), "owner_epoch": new_epoch,
                              "waited_for_lease_s": ownership.get("waited_for_lease_s"),
                              "log_fence_installed": ownership.get("log_fence"),
                              "executor_fence": ownership.get("executor_fence"),
                              "availability": out.get("availability", {}).get("status"),
                              "reconciliation": action, "resume_timeline": out.get("resume_timeline")}
        result["resume"] = {"signal": "SIGCONT", "worker_exit": rc}
        result["rejections"] = zombie["attempts"]
        result["lease_after_resume"] = zombie.get("lease_after_resume")
        result["preserved"] = {
            "operation_id": OPERATION, "job_handle": final.get("job_handle"),
            "executor_status": final.get("status"), "dispatched_under_owner_epoch": final.get("owner_epoch"),
            "executor_submissions": final.get("submissions"), "attempts_in_log": sorted(op.attempts),
            "status_in_log": op.status, "outcome": op.outcome,
            "evidence": [{"sequence_number": e.sequence_number, "status": e.payload.status,
                          "source": e.payload.source, "owner_epoch": e.owner_epoch} for e in events
                         if e.event_type == "ToolResult" and e.payload.operation_id == OPERATION],
        }
        result["log"] = {"head": len(events), "owner_epochs": epochs,
                         "events": [[e.sequence_number, e.event_type, e.owner_epoch] for e in events]}
        result["executor"] = {"pid": executor.pid, "port": port, "url": url, "rejected": fences.get("rejected", [])}
        checks = {
            "old_worker_was_stopped": state_when_stopped == "T",
            "new_epoch_is_newer": isinstance(new_epoch, int) and new_epoch > marker["owner_epoch"],
            "fences_installed": log_fence == new_epoch == fences.get("owner_epoch"),
            "every_late_action_refused": all(not a.get("accepted") for a in zombie["attempts"]),
            "no_request_left_the_gate": all(not a.get("request_sent") for a in zombie["attempts"]
                                            if a.get("boundary") == "dispatch gate"),
            "log_epochs_never_go_down": epochs == sorted(epochs),
            "dispatched_once": final.get("submissions") == 1 and sorted(op.attempts) == ["attempt1"],
            # by operation id while the job runs, or, when the job ended before the replacement got
            # going (a slow start on a loaded machine), from its signed record in the result inbox
            "settled_from_verified_evidence": op.status == "established" and action.get("signature_verified") is True
            and result["preserved"]["evidence"][-1]["source"] in ("reconciliation", "inbox"),
            "old_lease_lost": (zombie.get("lease_after_resume") or {}).get("renewed") is False,
        }
        result["checks"] = checks
        result["ok"] = all(checks.values())
        return result
    finally:
        if coord is not None:
            coord.close()
        if old is not None and old.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(old.pid, signal.SIGCONT)     # a stopped process still dies of SIGKILL; be tidy anyway
        kill_group(old)
        _stop_cluster(cluster, result)
        _tear_down_run(result, executor, old, work, port)


def sweep_stale_workdirs(parent: str | os.PathLike | None = None) -> list[Path]:
    """Remove the live substrate's work directories whose controller died (see
    :func:`kernel_lib._support.workdirs.sweep_stale_workdirs`)."""
    return workdirs.sweep_stale_workdirs(parent, prefix=TEMP_PREFIX)


def make_workdir(parent: str | os.PathLike | None = None) -> Path:
    """A new private work directory of the live substrate under ``parent`` (default: the system
    temp dir), marked with this process's pid; stale ones are swept first.

    Raises: ConfigError: ``parent`` cannot be created or written."""
    return workdirs.make_workdir(parent, prefix=TEMP_PREFIX)
