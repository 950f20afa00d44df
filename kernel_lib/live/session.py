"""The crash worksheet one step at a time, for notebooks and the crash panel (§11.1, §11.3.3, §11.5.3).

:func:`kernel_lib.live.controller.run_worksheet` does the whole worksheet in one call. A
:class:`WorksheetSession` splits it into the steps a reader triggers by hand:

* ``start(pause_at=None)``: build ``ws_r18``, start the executor service and a worker process (with
  ``pause_at`` the worker stops right after that crash point is durable: any position of the
  trajectory, listed by ``crash_points()``, as ``N``, ``TYPE#K`` or ``TYPE``;
  :mod:`kernel_lib.live.crash_points`);
* ``crash()``: a real ``SIGKILL`` of the worker, now;
* ``log_tail(n)``: the last ``n`` events of the surviving log (opened read-only);
* ``recovered()``: a replacement worker process folds the surviving log (``--recover``);
* ``reconcile(timeout_s)``: a replacement worker takes ownership, restores the workspace and
  reconciles by operation id against the executor (``--recover --reconcile``);

* ``close()``: tear everything down (idempotent; also the context-manager exit); the callables
  registered with ``on_close(fn)`` are then called, so a view of the session can say it closed.

Both replacement steps return the replacement's report with one more key, ``resume_timeline``: the
stages of eq. 7 as the replacement timed them (:meth:`kernel_lib.resume.stages.ResumeTimeline.to_dict`;
rebuild it with :meth:`~kernel_lib.resume.stages.ResumeTimeline.from_dict`). The last one is also kept
in :attr:`WorksheetSession.resume_timeline`. When the worker was killed before its first event was
durable (log position 0), nothing survived: both steps then fold the empty log in this process (no
replacement is started, since there is nothing to take over) and say so (``surviving_events`` 0,
``note``). :meth:`WorksheetSession.status` names the last replacement step after the crash, and
:func:`action_reading` is the one wording of a reconciliation action (``action: note``) that the CLI
and the crash panel print.

The process plumbing (waiting for a report file, killing a process group, probing a port, the
snapshot builder and tree removal) is the controller's and workspace's; the worker and executor
are the same ``python -m kernel_lib.live.worker|executor`` programs the controller runs. Every
process starts in its own session and its whole group is killed on ``close()``; the private work
directory is removed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernel_lib._support.procs import kill_group
from kernel_lib.errors import (
    ConfigError,
    LiveProcessError,
    NoWorkerRunningError,
    SessionStateError,
    UnrecoveredRunError,
)
from kernel_lib.log import open_store
from kernel_lib.live.controller import (
    CRASH_POINTS,
    WORKSHEET_STORES,
    crash_points,
    expected_at,
    live_env,
    make_workdir,
    port_accepts,
    run_replacement,
    spawn_executor,
    spawn_worker,
    stop_executor,
)
from kernel_lib.live.crash_points import CrashPoint, spec_name
from kernel_lib.live.worker import OPERATION, TRAJECTORY, resolve_crash_point
from kernel_lib.live.workspace import build_snapshot, remove_tree

__all__ = ["WorksheetSession", "CRASH_POINTS", "action_reading", "check_worksheet_parameters", "NOTHING_SURVIVED"]

#: What recover / reconcile say when the worker was killed before its first event was durable.
NOTHING_SURVIVED = ("the surviving log holds no event of the trajectory: the worker was killed at log position 0, "
                    "before its first event was durable; there is nothing to rebuild: no operation was proposed, "
                    "nothing was dispatched and no reservation is held, so a new run starts the task afresh")




def check_worksheet_parameters(*, seed: Any = 0, store: Any = "sqlite", crash_after: Any = "ToolResult",
                               test_delay_s: Any = 1.0) -> dict[str, Any]:
    """Check the crash worksheet's papermill parameters (notebook 11.1, §11.1) before anything
    starts, each under the name the user set it with.

    Returns ``{"seed", "store", "crash_after", "test_delay_s", "point"}`` (``point`` the resolved
    :class:`CrashPoint`'s ``describe()``).

    Raises:
        ConfigError naming the parameter: ``seed`` not an integer >= 0; ``store`` not one of
        :data:`WORKSHEET_STORES`; ``test_delay_s`` not a number in [0, 600] seconds.
        UnknownCrashPointError (a ConfigError) starting with ``crash_after:``: not a crash point
        (the message lists every valid one)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"seed must be an integer >= 0, got {seed!r}")
    if store not in WORKSHEET_STORES:
        raise ConfigError(f"store must be one of {', '.join(WORKSHEET_STORES)}, got {store!r}")
    if (isinstance(test_delay_s, bool) or not isinstance(test_delay_s, (int, float))
            or not 0 <= test_delay_s <= 600):
        raise ConfigError(f"test_delay_s must be a number of seconds in [0, 600], got {test_delay_s!r}")
    point = resolve_crash_point(crash_after, seed, parameter="crash_after")
    return {"seed": seed, "store": store, "crash_after": crash_after, "test_delay_s": test_delay_s,
            "point": point.describe()}


def action_reading(action: dict[str, Any] | None) -> str:
    """What a reconciliation ``action`` (one entry of ``reconcile()["actions"]``, ``{"action",
    "note"?, ...}``) says, as one phrase: ``"ACTION: NOTE"``, or ``"ACTION"`` without a note
    (e.g. ``"absent: test_r18 was never proposed in the surviving log; ..."``). The CLI's
    ``worksheet`` report and the crash panel both print it (§11.5.3)."""
    act = action or {}
    what, note = act.get("action") or "no action", act.get("note") or ""
    return f"{what}: {note}" if note else str(what)


def _event_view(ev) -> dict[str, Any]:
    p = ev.payload
    view = {"sequence": ev.sequence_number, "type": ev.event_type, "owner_epoch": ev.owner_epoch}
    for k in ("operation_id", "subject_id", "invocation_id", "attempt_id", "status", "job_handle",
              "amount_usd", "actual_usd", "decision"):
        v = getattr(p, k, None)
        if v is not None:
            view[k] = v if isinstance(v, (int, float, str, bool)) else str(v)
    return view


class WorksheetSession:
    """A step-wise crash worksheet with real processes (see the module docstring).

    Args:
        store_kind: ``sqlite`` or ``segment``.
        seed: the model stand-in's seed (the replacement's fresh re-prompt uses ``seed + 1``).
        test_delay_s: delay before the executor starts pytest, so the test is still running at
            the crash (seconds, 0..600).
        workdir: parent of the private work directory (default: the system temp dir).
        usd_per_s: the executor's charge per second of test time.
        step_timeout_s: how long each process may take to report (ready, paused, recovered).

    Raises:
        ConfigError: a bad argument.
    """

    def __init__(self, store_kind: str = "sqlite", seed: int = 0, test_delay_s: float = 1.0, *,
                 workdir: str | os.PathLike | None = None, usd_per_s: float = 0.01, step_timeout_s: float = 60.0):
        if store_kind not in ("sqlite", "segment"):
            raise ConfigError(f"store_kind must be sqlite or segment, got {store_kind!r}")
        if not (isinstance(test_delay_s, (int, float)) and 0 <= test_delay_s <= 600):
            raise ConfigError(f"test_delay_s must be between 0 and 600 seconds, got {test_delay_s!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigError(f"seed must be an integer, got {seed!r}")
        if not (isinstance(step_timeout_s, (int, float)) and 0 < step_timeout_s <= 3600):
            raise ConfigError(f"step_timeout_s must be between 0 and 3600 seconds, got {step_timeout_s!r}")
        if not (isinstance(usd_per_s, (int, float)) and 0 <= usd_per_s < float("inf")):
            raise ConfigError(f"usd_per_s must be a non-negative number, got {usd_per_s!r}")
        self.store_kind, self.seed, self.test_delay_s = store_kind, int(seed), float(test_delay_s)
        self.usd_per_s, self.step_timeout_s = usd_per_s, step_timeout_s
        self._parent = workdir
        self._work: Path | None = None
        self._executor: subprocess.Popen | None = None
        self._worker: subprocess.Popen | None = None
        self._ready: dict[str, Any] | None = None
        self._digest: str | None = None
        self._snapshot = None              # the run's ws_r18 Snapshot (the replacement restores it)
        self.resume_timeline: dict[str, Any] | None = None   # the last replacement's timed stages
        self._closed = False
        self.pause_at: str | None = None
        self.paused: dict[str, Any] | None = None
        self.last_crash: dict[str, Any] | None = None
        self._unrecovered = False          # a crash whose surviving log no replacement has read yet
        self.last_replacement: dict[str, Any] | None = None   # {"action", "in_doubt", "owner_epoch"} since the crash
        self._on_close: list[Callable[[], Any]] = []
        self.model: dict[str, Any] = {}
        self.pids: list[int] = []          # every process this session started (for checks)
        self._env = live_env()

    # -------------------------------------------------------------------------------- properties
    @property
    def store_path(self) -> Path | None:
        if self._work is None:
            return None
        return self._work / ("log.sqlite" if self.store_kind == "sqlite" else "seglog")

    @property
    def workdir(self) -> Path | None:
        return self._work

    @property
    def executor_url(self) -> str | None:
        return self._ready["url"] if self._ready else None

    def worker_running(self) -> bool:
        return self._worker is not None and self._worker.poll() is None

    def status(self) -> str:
        """A one-line description of where the session stands."""
        if self._closed:
            return "closed"
        if self._work is None:
            return "not started"
        if self.worker_running():
            return (f"worker {self._worker.pid} paused after {self.paused['paused_at']} at position "
                    f"{self.paused['log_position']}") if self.paused else f"worker {self._worker.pid} running"
        if self.last_crash:
            crash = (f"worker {self.last_crash['worker_pid']} killed by SIGKILL "
                     f"at position {self.last_crash['log_position']}")
            rep = self.last_replacement
            if rep is None:
                return crash + "; not recovered yet"
            doubt = ", ".join(rep["in_doubt"]) or "none"
            if rep.get("surviving_events") == 0:
                return crash + f"; {rep['action']}: the surviving log is empty, nothing to rebuild"
            if rep["action"] == "reconcile":
                return crash + f"; reconciled by a replacement (owner_epoch {rep['owner_epoch']}): in doubt: {doubt}"
            return crash + f"; a replacement folded the surviving log: in doubt: {doubt}"
        if self._worker is not None:
            return f"worker {self._worker.pid} exited with code {self._worker.returncode}"
        return "executor running, no worker"

    # -------------------------------------------------------------------------------- steps
    def _check_open(self) -> None:
        if self._closed:
            raise SessionStateError("this worksheet session is closed; create a new WorksheetSession")

    def crash_points(self) -> tuple[CrashPoint, ...]:
        """Every position of the worksheet's trajectory at which :meth:`start` can pause the worker
        (:func:`kernel_lib.live.controller.crash_points` for this session's seed), in log order."""
        return crash_points(self.seed)

    def resolve_point(self, pause_at: Any) -> CrashPoint:
        """The crash point ``pause_at`` names (``N``, ``TYPE#K`` or ``TYPE``).

        Raises: UnknownCrashPointError (a ConfigError) listing every valid point."""
        return resolve_crash_point(pause_at, self.seed)

    def point_name(self, point: CrashPoint) -> str:
        """The shortest spec naming ``point`` (``TYPE`` when it resolves to it, else ``TYPE#K``)."""
        return spec_name(point, self.crash_points(), OPERATION)

    def start(self, pause_at: str | int | None = None, *, discard_previous: bool = False) -> dict[str, Any]:
        """Start a fresh run: executor + worker. With ``pause_at`` (any crash point of
        :meth:`crash_points`: a log position ``N``, ``TYPE#K``, or ``TYPE``, whose first event for
        ``test_r18`` is meant, so :data:`CRASH_POINTS` keep their table-3 meaning) block until the
        worker has paused right after that position is durable.

        A previous run of this session (log, executor, its jobs) is torn down first. If that run was
        crashed and no replacement has read its surviving log yet, ``start`` refuses unless
        ``discard_previous`` is true: a fresh run would delete the only record of the crash.

        Returns: ``{"worker_pid", "executor_url", "pause_at", "point", "paused"}`` (``point`` the
        resolved :meth:`CrashPoint.to_dict` or None; ``paused`` the pause marker ``{paused_at,
        point, event_type, subject, log_position, pid}`` or None).

        Raises:
            UnknownCrashPointError (a ConfigError): ``pause_at`` is not a crash point; the message
            and ``choices`` list them. SessionStateError: a worker is still running, the session
            is closed, or an unread crashed run would be discarded. LiveProcessError: a process
            failed to report, or paused elsewhere than asked.
        """
        self._check_open()
        point = self.resolve_point(pause_at) if pause_at is not None else None
        if self.worker_running():
            raise SessionStateError(f"worker {self._worker.pid} is still running: crash it (or close the "
                                    "session) before starting another run")
        if self._unrecovered and not discard_previous and self.events():   # an empty log loses nothing
            crash = self.last_crash or {}
            raise UnrecoveredRunError(
                f"the crashed run (worker {crash.get('worker_pid')}, log position {crash.get('log_position')}) has "
                "not been recovered yet; a new run would delete its surviving log. Recover or reconcile it first, "
                "or discard it explicitly (start(..., discard_previous=True))")
        self._teardown()
        self._unrecovered = False
        self.last_replacement = None
        self._work = make_workdir(self._parent)
        self.pause_at, self.paused, self.last_crash, self.model = pause_at, None, None, {}
        work = self._work
        try:
            snap = build_snapshot(work / "snapshots")
            self._digest, self._snapshot = snap.digest, snap
            self._executor, self._ready = spawn_executor(work, snap, usd_per_s=self.usd_per_s,
                                                         test_delay_s=self.test_delay_s, env=self._env,
                                                         timeout_s=self.step_timeout_s)
            self.pids.append(self._executor.pid)
            self._worker, self.paused = spawn_worker(work, store_kind=self.store_kind, store_path=self.store_path,
                                                     ready=self._ready, digest=snap.digest, seed=self.seed,
                                                     pause_at=None if pause_at is None else str(pause_at),
                                                     env=self._env, timeout_s=self.step_timeout_s)
            self.pids.append(self._worker.pid)
            if point is not None and self.paused["log_position"] != point.durable_at:
                raise LiveProcessError(f"the worker paused at log position {self.paused['log_position']}, not at "
                                       f"{point.describe()}")
        except BaseException:
            self._teardown()
            raise
        return {"worker_pid": self._worker.pid, "executor_url": self._ready["url"], "pause_at": pause_at,
                "point": point.to_dict() if point else None, "paused": self.paused}

    def crash(self) -> dict[str, Any]:
        """Kill the running worker now with a real ``SIGKILL`` (no clean-up code runs in it).

        Returns: ``{"signal": "SIGKILL", "worker_pid", "log_position", "paused_at", "worker_exit",
        "executor_status_at_crash", "job_running_at_crash", "job_handle"}``.

        Raises:
            NoWorkerRunningError: no worker is running. SessionStateError: the session is closed.
        """
        self._check_open()
        if not self.worker_running():
            rc = None if self._worker is None else self._worker.returncode
            how = (f"killed by {signal.Signals(-rc).name}" if isinstance(rc, int) and rc < 0
                   and -rc in signal.valid_signals() else f"code {rc}")
            why = ("no run has been started" if self._worker is None else
                   f"worker {self._worker.pid} already exited ({how})")
            raise NoWorkerRunningError(f"no worker is running to crash: {why}; press start first")
        pid = self._worker.pid
        os.kill(pid, signal.SIGKILL)
        rc = self._worker.wait(timeout=self.step_timeout_s)
        kill_group(self._worker)
        tail = self.log_tail(1)
        at = self._executor_status()
        self.last_crash = {"signal": "SIGKILL", "worker_pid": pid, "worker_exit": rc,
                           "log_position": tail[-1]["sequence"] if tail else 0,
                           "paused_at": self.paused["paused_at"] if self.paused else None,
                           "executor_status_at_crash": at.get("status"),
                           "job_running_at_crash": at.get("status") == "running", "job_handle": at.get("job_handle"),
                           "expected": expected_at(self.pause_at, self.seed) if self.pause_at is not None
                           else None}
        self._unrecovered = True
        return dict(self.last_crash)

    def _executor_status(self) -> dict[str, Any]:
        if not self._ready or self._executor is None or self._executor.poll() is not None:
            return {"status": "unreachable"}
        import httpx
        try:
            with httpx.Client(timeout=5.0, trust_env=False) as client:
                return client.get(f"{self._ready['url']}/operations/{OPERATION}").json()
        except Exception as exc:   # report, do not raise: this is an observation
            return {"status": "unreachable", "error": type(exc).__name__}

    def events(self) -> list:
        """Every event of the worksheet trajectory in the surviving log (opened read-only); [] when
        no log exists yet."""
        self._check_open()
        path = self.store_path
        if path is None or not path.exists():
            return []
        store = open_store(self.store_kind, path, read_only=True)
        try:
            return list(store.read(TRAJECTORY))
        finally:
            store.close()

    def log_tail(self, n: int = 8) -> list[dict[str, Any]]:
        """The last ``n`` events as small dicts ``{sequence, type, owner_epoch, operation_id?, ...}``.

        Raises: ConfigError: ``n`` is not a positive integer.
        """
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ConfigError(f"n must be a positive integer, got {n!r}")
        return [_event_view(e) for e in self.events()[-n:]]

    def _replacement(self, reconcile: bool, timeout_s: float, prefill: Any = None) -> dict[str, Any]:
        self._check_open()
        if self.worker_running():
            raise SessionStateError(f"worker {self._worker.pid} is still running: a replacement takes over only "
                                    "after the worker is gone (crash it first)")
        if not self.events():
            if self.last_crash is None:
                raise SessionStateError("there is no surviving log to recover from yet: start a run (and crash it) "
                                        "first")
            return self._nothing_survived(reconcile)
        if reconcile and (self._executor is None or self._executor.poll() is not None):
            raise SessionStateError("the executor is not running, so there is nothing to reconcile against")
        out = run_replacement(store_kind=self.store_kind, store_path=self.store_path, ready=self._ready,
                              seed=self.seed, reconcile=reconcile, reconcile_timeout_s=timeout_s,
                              step_timeout_s=self.step_timeout_s, env=self._env, snapshot=self._snapshot,
                              prefill=prefill)
        self.model = out.get("model") or {}
        self.resume_timeline = out.get("resume_timeline")
        self._unrecovered = False
        part = out.get("reconciled" if reconcile else "recovered") or {}
        self.last_replacement = {"action": "reconcile" if reconcile else "recover",
                                 "in_doubt": list(part.get("in_doubt") or []),
                                 "owner_epoch": part.get("owner_epoch_installed", part.get("owner_epoch"))}
        return out

    def _nothing_survived(self, reconcile: bool) -> dict[str, Any]:
        """The report of a recover / reconcile on an empty surviving log: the empty log folded here
        (the initial record; no replacement process, no ownership taken), with ``surviving_events``
        0 and the :data:`NOTHING_SURVIVED` note."""
        from kernel_lib.core.record import fold, initial_record
        from kernel_lib.live.worker import summarize

        rec = summarize(fold(initial_record(TRAJECTORY), []))
        rec.update(surviving_events=0, note=NOTHING_SURVIVED)
        out: dict[str, Any] = {"recovered": rec, "model": {}, "resume_timeline": None, "inbox": None}
        if reconcile:
            out["reconciled"] = {**rec, "actions": {OPERATION: {
                "action": "absent", "note": f"{OPERATION} was never proposed in the surviving log (it holds no "
                                            "event); the next model turn may propose it"}}}
        self.model, self.resume_timeline, self._unrecovered = {}, None, False
        self.last_replacement = {"action": "reconcile" if reconcile else "recover", "in_doubt": [],
                                 "owner_epoch": None, "surviving_events": 0}
        return out

    def recovered(self) -> dict[str, Any]:
        """Fold the surviving log in a new process, as a replacement worker does, without taking
        ownership: operations (status, attempt id, table 3 conclusion), held reservations, in-doubt
        list. The model stand-in's recorded vs fresh reply is kept in :attr:`model`. The result
        also holds ``resume_timeline`` (inspection only: no ownership, workspace, reconciliation
        or prefill, so only the read and the fold are timed).

        Raises: SessionStateError: a worker is still running, or there is no log yet.
        LiveProcessError: the replacement failed.
        """
        out = self._replacement(False, 1.0)
        return {**out["recovered"], "resume_timeline": out.get("resume_timeline")}

    def reconcile(self, timeout_s: float = 30.0, *, prefill: Any = None) -> dict[str, Any]:
        """A replacement worker takes ownership (owner_epoch + 1), restores ``ws_r18`` into a fresh
        directory, queries the executor by operation id for each in-doubt tool operation (waiting
        up to ``timeout_s`` for a running job) and records authenticated completion records as new
        evidence (§11.5.3). A record the executor already deposited in the durable result inbox
        (``work/inbox.sqlite``) is ingested first, and then the executor is not asked about that
        operation. Returns the reconciled summary with ``actions`` per operation, ``inbox`` (what the
        ingestion did) and ``resume_timeline``, the replacement's timed stages of eq. 7 (§11.5).

        Args:
            timeout_s: how long to wait for a running job (seconds, 0..600).
            prefill: a :class:`kernel_lib.resume.stages.PrefillModel` for the computed prefill stage
                (default: the worker's ``--prefill-*`` defaults).

        Raises: ConfigError: bad ``timeout_s`` or ``prefill``. SessionStateError / LiveProcessError
        as :meth:`recovered`, or the executor is not running.
        """
        from kernel_lib.resume.stages import PrefillModel

        if not (isinstance(timeout_s, (int, float)) and 0 <= timeout_s <= 600):
            raise ConfigError(f"timeout_s must be between 0 and 600 seconds, got {timeout_s!r}")
        if prefill is not None and not isinstance(prefill, PrefillModel):
            raise ConfigError(f"prefill must be a kernel_lib.resume.stages.PrefillModel, got {type(prefill).__name__}")
        out = self._replacement(True, float(timeout_s), prefill)
        return {**out["reconciled"], "resume_timeline": out.get("resume_timeline"), "inbox": out.get("inbox")}

    # -------------------------------------------------------------------------------- teardown
    def _teardown(self) -> dict[str, Any]:
        port = self._ready.get("port") if self._ready else None
        stop_executor(self._executor)
        kill_group(self._worker)
        work = self._work
        if work is not None:
            remove_tree(work)
        report = {"workdir_removed": work is None or not work.exists(),
                  "executor_port_closed": (not port_accepts(port)) if port else None}
        self._executor = self._worker = None
        self._ready, self._work, self._snapshot = None, None, None
        return report

    def close(self) -> dict[str, Any]:
        """Tear everything down: executor (SIGTERM, then its group SIGKILL), worker group, work
        directory. Idempotent. Returns ``{"workdir_removed", "executor_port_closed"}``."""
        if self._closed:
            return {"workdir_removed": True, "executor_port_closed": None, "already_closed": True}
        try:
            return self._teardown()
        finally:
            self._closed = True
            listeners, self._on_close = self._on_close, []
            for ref in listeners:
                fn = ref()
                if fn is not None:
                    with contextlib.suppress(Exception):   # a view's failure must not undo the teardown
                        fn()

    def on_close(self, fn: Callable[[], Any]) -> None:
        """Call ``fn()`` once when the session closes (right after :meth:`close` tore it down). A bound
        method is held weakly, so a view that is gone is not kept alive or called."""
        ref = weakref.WeakMethod(fn) if hasattr(fn, "__self__") else (lambda fn=fn: fn)
        self._on_close.append(ref)

    def __enter__(self) -> "WorksheetSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):   # last resort; close() is the contract
        with contextlib.suppress(Exception):
            if not self._closed:
                self.close()

    def __repr__(self) -> str:
        return f"WorksheetSession(store_kind={self.store_kind!r}, seed={self.seed}, status={self.status()!r})"
