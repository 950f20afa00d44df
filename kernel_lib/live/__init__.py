"""The live substrate of the crash worksheet (issue 3): real processes, files and sockets.

* :mod:`.workspace` — the immutable, content-addressed workspace snapshot ``ws_r18``.
* :mod:`.executor` — the executor service (its own OS process, loopback only) that runs the real
  tests, keeps charging after the worker dies, answers status by operation id and signs its
  completion records (Ed25519).
* :mod:`.worker` — the worker process (runs the repair trajectory through the dispatch gate; can
  pause at a log position) and the replacement worker (``--recover``: fold, then reconcile).
* :mod:`.controller` — the crash controller: ``run_worksheet`` kills the worker with a real
  ``SIGKILL`` after any event of its trajectory (``crash_points``) and recovers in a new process
  (§11.1, §11.3.3, §11.5.3).
* :mod:`.crash_points` — the crash points: every log position of the trajectory, addressed as
  ``N``, ``TYPE#K`` or ``TYPE``.
* :mod:`.sweep` — ``run_sweep``: kill the worker at every position in turn, recover each time, and
  count each operation's invocations at the executor against its repeat contract.
* :mod:`.client` — ``ExecutorClient``: the executor's endpoints (status by operation id, fences,
  job submission, a bounded wait for a running job) for notebooks and widgets.
* :mod:`.checks` — where an executor job's seconds go: pytest's reported time and a timed
  start-up probe of the executor's check command.
* :mod:`.services` — the Failure Recovery chapter's tool services and credential broker, each its
  own process on loopback with its state in an SQLite file of its own; ``LiveFleet`` starts them
  and offers the fleet facade of the simulated twins (``kernel_lib.sim.services.TwinFleet``).
* :mod:`.saga_worker` — the deployment saga in a worker process paused at a position and killed
  with a real ``SIGKILL``, a recovery process that finishes the unwind, and the live crash sweep.
* :mod:`.payload_order` — the §11.8.2 write-order experiment: a worker process writing a payload
  and the event naming it is SIGKILLed between the two writes.
* :mod:`.heartbeat` — the heartbeat fallacy run: a worker process that answers HTTP health probes
  and sd_notify heartbeats while its workspace flips between two states, and the supervisor that
  probes it and runs the semantic watchdog over its journal.
* :mod:`.gateway_lab` — the gateway lab: a loopback service process whose latency and error rate
  are dialed at run time, real worker threads calling it on one shared pool or through the
  gateway's bulkheads and breaker, a local file tool's latency measured beside them.
* :mod:`.quarantine` — the quarantine's effects (issue 19): cgroup v1/v2 freezer and SIGSTOP of a
  trajectory's process tree, a network namespace on a veth pair cut over netlink, the supervisor
  running table 12's four stages; :mod:`.quarantine_demo` runs Example 0.2 for real and
  :mod:`.quarantine_sandbox` is the processes inside the sandbox.
* :mod:`.two_phase` — the two-phase-commit fallacy with real processes: lockable participants with
  their state in SQLite, a coordinator process killed with ``SIGKILL`` after every yes vote.

The seeded model stand-in the worker uses is deterministic and lives in :mod:`kernel_lib.sim`.

May import every layer below it (``quorum`` and ``sim`` included); never ``verify``, ``bench``,
``course`` or ``cli``.
"""

from kernel_lib._support.lazy import lazy_exports

# The names load on first use: the worker and the executor run as ``python -m kernel_lib.live.worker``
# / ``kernel_lib.live.executor``, and importing them here would load them twice in those processes.
__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "kernel_lib.live.controller": (
        "CRASH_POINTS", "EXPECTED", "TEMP_PREFIX", "crash_points", "executor_invocations", "expected_at",
        "live_env", "make_workdir", "run_replacement", "run_worksheet", "run_zombie", "spawn_executor",
        "spawn_worker", "stop_executor", "sweep_stale_workdirs"),
    "kernel_lib.live.crash_points": ("CrashPoint", "points_of", "resolve_point", "spec_name"),
    "kernel_lib.live.sweep": ("allowed_invocations", "find_violations", "run_sweep"),
    "kernel_lib.live.session": ("WorksheetSession",),
    "kernel_lib.live.client": ("ExecutorClient", "JobAnswer"),
    "kernel_lib.live.services": ("LiveFleet", "LiveEndpoints"),
    "kernel_lib.live.quarantine": ("CgroupFreezer", "SigstopFreezer", "NetnsSandbox", "GatewaySever",
                                   "QuarantineSupervisor", "QuarantineReport", "probe_host", "tree_progress",
                                   "spawn_in_sandbox", "leftovers"),
    "kernel_lib.live.quarantine_demo": ("run_quarantine_demo",),
    "kernel_lib.live.workspace": (
        "BASE_DIR", "DATASET_DIR", "PATCH_FILE", "SNAPSHOT_NAME", "Snapshot", "apply_patch", "build_snapshot",
        "copy_verified", "manifest_digest", "manifest_of", "verify"),
})
