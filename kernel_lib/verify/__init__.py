"""``verify``: crash-state exploration of recorded workloads (§11.3.1, §11.4, §11.8).

Every file operation of a workload goes through one seam; every crash state (prefixes, dropped
unsynced writes, a torn last write) is rebuilt, reopened and checked against what each
acknowledgment promised.

* :mod:`.engine` — the one engine: crash states, materialization, de-duplication, sampling under
  a cap, and the one report type (:class:`~kernel_lib.verify.engine.CrashReport`);
* :mod:`.log_workload` — the segment-file log;
* :mod:`.checkpoint_workload` — checkpoints and their blobs;
* :mod:`.payload_workload` — payload-before-reference logging.

May import: every layer below ``cli`` and ``course``.
"""

from kernel_lib._support.lazy import lazy_exports  # noqa: E402

# Loaded on first use: each workload pulls in the layers it exercises.
__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "kernel_lib.verify.engine": ("CrashReport", "CrashState", "CrashWorkload", "crash_states", "materialize",
                                 "state_key"),
    "kernel_lib.verify.log_workload": ("WORKLOADS", "run",),
    "kernel_lib.verify.checkpoint_workload": ("explore",),
})
