"""Napkin Math 0.1 measured on this machine: the deployment saga run for real on a log on disk.

Failure Recovery, "Saga compensation stacks", Napkin Math 0.1. :func:`measure_deployment` runs the
chapter's deployment saga (:func:`kernel_lib.sim.deployment.run_deployment`: T1…T5, T5 refused
with a 409, unwound by C4…C1) on the simulated service twins with no simulated durations, so the
times measured are the runtime's own (the dispatch gate, the saga records and the log's barriers),
against a real SQLite file or segment log in a temporary folder, with the trajectory declared to
survive a host crash (each barrier is a real ``fdatasync``). It counts, per forward step and per
compensator pop:

* the barriers the log handle waited for (:attr:`kernel_lib.log.TrajectoryLog.barriers`), and
* for the segment log, the ``fdatasync`` calls that reached the file system (counted and timed at
  the store's file-system seam, not by the log that asked for them);

and times a raw ``fdatasync`` (a 4 KiB append and its ``fdatasync``, repeated) in the same
folder, the forward phase and the unwind. This module imports the saga machinery; the exercise
module :mod:`kernel_lib.course.exercises.nm0_1` stays light and does not import it.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from kernel_lib.errors import ConfigError
from kernel_lib.log.fs import FileHandle, ForwardingFileSystem, OsFileSystem

__all__ = ["LABEL", "measure_deployment", "raw_fdatasync_ms", "comparison_rows"]

#: How every measured figure is labelled beside the computed ones.
LABEL = "measured on this machine"
STORES = ("segment", "sqlite")


class _TimedFileSystem(ForwardingFileSystem):
    """The real file system, counting and timing every ``fdatasync`` that reaches it."""

    def __init__(self) -> None:
        super().__init__(OsFileSystem())
        self.fdatasyncs = 0
        self.fdatasync_ms: list[float] = []

    def fdatasync(self, handle: FileHandle) -> None:
        t0 = time.perf_counter()
        super().fdatasync(handle)
        self.fdatasync_ms.append((time.perf_counter() - t0) * 1e3)
        self.fdatasyncs += 1


def raw_fdatasync_ms(directory: str | os.PathLike, repeats: int = 50, size_bytes: int = 4096) -> dict[str, float]:
    """Time ``repeats`` raw barriers in ``directory``: append ``size_bytes`` to one file and
    ``fdatasync`` it (an append, as a log's record is, so the file's size is made durable too).
    Returns ``{"median_ms", "p90_ms", "min_ms", "repeats"}`` (ms per barrier, write included).
    Raises ConfigError for ``repeats`` < 1."""
    if repeats < 1:
        raise ConfigError(f"repeats must be at least 1, got {repeats!r}")
    path = Path(directory) / "raw-fdatasync.bin"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    sync = getattr(os, "fdatasync", os.fsync)
    block = os.urandom(size_bytes)
    times = []
    try:
        os.pwrite(fd, block, 0)
        sync(fd)
        for i in range(1, repeats + 1):
            t0 = time.perf_counter()
            os.pwrite(fd, block, i * size_bytes)
            sync(fd)
            times.append((time.perf_counter() - t0) * 1e3)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    times.sort()
    return {"median_ms": statistics.median(times), "p90_ms": times[min(len(times) - 1, int(0.9 * len(times)))],
            "min_ms": times[0], "repeats": repeats}


def _one_run(store_kind: str, folder: Path, k: int) -> dict[str, Any]:
    """One deployment saga on a fresh store in ``folder``; counts and times per step and per pop."""
    from kernel_lib.core.events import SagaStepChanged
    from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate
    from kernel_lib.log import TrajectoryLog, open_store
    from kernel_lib.log.base import FailureDomain
    from kernel_lib.recovery.runner import RetryPolicy, SagaRunner
    from kernel_lib.sim.deployment import TAKEN_DOMAIN, deployment_registry, run_deployment
    from kernel_lib.sim.saga_sweep import GRANT_ID, SAGA_ID, start_task
    from kernel_lib.sim.services import TwinFleet

    fs = _TimedFileSystem() if store_kind == "segment" else None
    path = folder / (f"run-{k}.log" if store_kind == "segment" else f"run-{k}.sqlite")
    store = open_store(store_kind, path, create=True, **({"fs": fs} if fs is not None else {}))
    try:
        fleet = TwinFleet(simulate_durations=False)
        fleet.taken_name(TAKEN_DOMAIN)
        registry = deployment_registry()
        trajectory_id = f"nm0-1-measure-{k}"
        log = TrajectoryLog(store, trajectory_id, must_survive=FailureDomain.HOST_CRASH)

        def counters() -> tuple[int, int, float, float]:
            return (log.barriers, fs.fdatasyncs if fs else 0, sum(fs.fdatasync_ms) if fs else 0.0,
                    time.perf_counter() * 1e3)

        pops: list[dict[str, Any]] = []

        def on_position(name: str, ev: Any) -> None:   # a compensator pop: from COMPENSATING to COMPENSATED
            payload = getattr(ev, "payload", None)
            if isinstance(payload, SagaStepChanged) and payload.state == "COMPENSATING":
                pops.append({"step_index": payload.step_index, "start": counters()})
            elif isinstance(payload, SagaStepChanged) and payload.state == "COMPENSATED":
                pops[-1]["end"] = counters()

        gate = DispatchGate(log, AdmissionPolicy({GRANT_ID: set(registry.names())}), coalesce_admission=True,
                            on_position=on_position)
        start_task(gate, trajectory_id)
        runner = SagaRunner(gate, registry, fleet.client(trajectory_id), saga_id=SAGA_ID, grant_id=GRANT_ID,
                            retry=RetryPolicy(max_attempts=4), sleep=fleet.clock.advance)
        steps: list[dict[str, Any]] = []
        phases: dict[str, Any] = {}
        forward_step, unwind = runner.step, runner.unwind

        def timed_step(tool: str, arguments: dict[str, Any], **kw: Any) -> dict[str, Any]:
            phases.setdefault("forward_start", counters())
            row = {"tool": tool, "start": counters()}
            steps.append(row)
            try:
                return forward_step(tool, arguments, **kw)
            finally:
                row["end"] = counters()

        def timed_unwind(reason: str = "") -> str:
            phases["forward_end"] = phases["unwind_start"] = counters()
            try:
                return unwind(reason)
            finally:
                phases["unwind_end"] = counters()

        runner.step, runner.unwind = timed_step, timed_unwind   # run_deployment calls these
        outcome = run_deployment(runner)
        counts = fleet.counts()
    finally:
        store.close()

    def span(a: tuple, b: tuple) -> dict[str, float]:
        return {"barriers": b[0] - a[0], "fdatasyncs": b[1] - a[1], "fdatasync_ms": b[2] - a[2], "wall_ms": b[3] - a[3]}

    last_pop_end = pops[-1]["end"] if pops else phases["unwind_start"]
    return {
        "state": outcome["state"], "failed_step": outcome["failed_step"], "service_counts": counts,
        "steps": [{"tool": s["tool"], **span(s["start"], s["end"])} for s in steps],
        "pops": [{"step_index": p["step_index"], **span(p["start"], p["end"])} for p in pops],
        "forward": span(phases["forward_start"], phases["forward_end"]),
        "unwind": span(phases["unwind_start"], phases["unwind_end"]),
        "unwind_close": span(last_pop_end, phases["unwind_end"]),
        "fdatasync_call_ms": list(fs.fdatasync_ms) if fs else [],
    }


def measure_deployment(store: str = "segment", *, repeats: int = 3, directory: str | os.PathLike | None = None,
                       raw_repeats: int = 50) -> dict[str, Any]:
    """Run the deployment saga ``repeats`` times on a fresh ``store`` log (``segment`` or
    ``sqlite``) in a temporary folder (under ``directory`` if given) and measure it.

    Returns ``{"label", "store", "repeats", "state", "forward_steps", "compensator_pops",
    "barriers_per_forward_step", "barriers_per_compensator_pop", "unwind_closing_barriers",
    "fdatasyncs_per_forward_step", "fdatasyncs_per_compensator_pop" (None on sqlite: its syncs are
    inside SQLite), "fdatasync_in_log_median_ms" (None on sqlite), "raw_fdatasync_median_ms",
    "raw_fdatasync_p90_ms", "forward_ms", "unwind_ms", "forward_to_unwind_ratio",
    "forward_fdatasync_ms", "unwind_fdatasync_ms", "service_counts", "runs"}``: counts are per step or
    pop and must agree over every step and run (else the list of distinct values is given); times
    are medians over the runs, in ms of wall-clock. Raises ConfigError for an unknown store or
    ``repeats`` < 1.
    """
    if store not in STORES:
        raise ConfigError(f"store must be one of {', '.join(STORES)}, got {store!r}")
    if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
        raise ConfigError(f"repeats must be a positive integer, got {repeats!r}")
    with tempfile.TemporaryDirectory(prefix="nm0-1-", dir=directory) as tmp:
        raw = raw_fdatasync_ms(tmp, raw_repeats)
        runs = [_one_run(store, Path(tmp), k) for k in range(repeats)]

    def same(values: list[Any]) -> Any:
        distinct = sorted(set(values))
        return distinct[0] if len(distinct) == 1 else distinct

    def median(key: str, field: str) -> float:
        return statistics.median(r[key][field] for r in runs)

    segment = store == "segment"
    forward_ms, unwind_ms = median("forward", "wall_ms"), median("unwind", "wall_ms")
    in_log = [t for r in runs for t in r["fdatasync_call_ms"]]
    return {
        "label": LABEL, "store": store, "repeats": repeats,
        "state": same([r["state"] for r in runs]),
        "forward_steps": same([len(r["steps"]) for r in runs]),
        "compensator_pops": same([len(r["pops"]) for r in runs]),
        "barriers_per_forward_step": same([s["barriers"] for r in runs for s in r["steps"]]),
        "barriers_per_compensator_pop": same([p["barriers"] for r in runs for p in r["pops"]]),
        "unwind_closing_barriers": same([r["unwind_close"]["barriers"] for r in runs]),
        "fdatasyncs_per_forward_step": same([s["fdatasyncs"] for r in runs for s in r["steps"]]) if segment else None,
        "fdatasyncs_per_compensator_pop": same([p["fdatasyncs"] for r in runs for p in r["pops"]]) if segment else None,
        "fdatasync_in_log_median_ms": statistics.median(in_log) if in_log else None,
        "raw_fdatasync_median_ms": raw["median_ms"], "raw_fdatasync_p90_ms": raw["p90_ms"],
        "forward_ms": forward_ms, "unwind_ms": unwind_ms,
        "forward_to_unwind_ratio": forward_ms / unwind_ms if unwind_ms > 0 else None,
        "forward_fdatasync_ms": median("forward", "fdatasync_ms") if segment else None,
        "unwind_fdatasync_ms": median("unwind", "fdatasync_ms") if segment else None,
        "service_counts": runs[-1]["service_counts"],
        "runs": runs,
    }


def comparison_rows(computed: dict[str, Any], params: dict[str, Any], measured: dict[str, Any]) -> list[dict[str, Any]]:
    """The table the notebook shows: each quantity as the chapter's givens set it, as
    :func:`~kernel_lib.course.exercises.nm0_1.solve` computes it, and as measured here.
    ``computed`` is a ``solve()`` result for ``params``; ``measured`` a :func:`measure_deployment` result."""
    def fmt(x: Any, unit: str = "") -> str:
        if x is None:
            return "n/a"
        if isinstance(x, list):
            return " / ".join(str(v) for v in x) + " (not constant)"
        return (f"{x:.3g}" if isinstance(x, float) else str(x)) + unit

    return [
        {"quantity": "barriers per forward step", "given or computed": fmt(params["fsyncs_per_forward_step"]),
         LABEL: fmt(measured["barriers_per_forward_step"])},
        {"quantity": "fdatasync calls per forward step (file system)", "given or computed":
            fmt(params["fsyncs_per_forward_step"]), LABEL: fmt(measured["fdatasyncs_per_forward_step"])},
        {"quantity": "barriers per compensator pop", "given or computed": fmt(params["fsyncs_per_compensator"]),
         LABEL: fmt(measured["barriers_per_compensator_pop"])},
        {"quantity": "fdatasync calls per compensator pop (file system)", "given or computed":
            fmt(params["fsyncs_per_compensator"]), LABEL: fmt(measured["fdatasyncs_per_compensator_pop"])},
        {"quantity": "closing barrier of the unwind", "given or computed": "0 (not counted)",
         LABEL: fmt(measured["unwind_closing_barriers"])},
        {"quantity": "one fdatasync", "given or computed": fmt(params["fsync_ms"], " ms"),
         LABEL: fmt(measured["raw_fdatasync_median_ms"], " ms (raw, median)")},
        {"quantity": "forward log I/O", "given or computed": fmt(computed["forward_io_ms"], " ms"),
         LABEL: fmt(measured["forward_fdatasync_ms"], " ms")},
        {"quantity": "unwind log I/O", "given or computed": fmt(computed["unwind_io_ms"], " ms"),
         LABEL: fmt(measured["unwind_fdatasync_ms"], " ms")},
        {"quantity": "forward phase",
         "given or computed": fmt(computed["forward_ms"] + computed["forward_io_ms"], " ms"),
         LABEL: fmt(measured["forward_ms"], " ms (runtime only: the twins take no time)")},
        {"quantity": "unwind phase", "given or computed": fmt(computed["unwind_ms"], " ms"),
         LABEL: fmt(measured["unwind_ms"], " ms (runtime only)")},
        {"quantity": "forward / unwind", "given or computed": fmt(computed["unwind_speedup"], "×"),
         LABEL: fmt(measured["forward_to_unwind_ratio"], "×")},
    ]
