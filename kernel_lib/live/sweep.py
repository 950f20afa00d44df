"""The crash sweep: kill the worker at every position of its trajectory in turn (§11.1, §11.3.3, §11.5.3).

:func:`run_sweep` runs :func:`kernel_lib.live.controller.run_worksheet` once per crash point of the
trajectory (:func:`kernel_lib.live.controller.crash_points`, every event the worker appends): each
time a fresh executor process and a fresh log, a real worker process paused right after that
position and killed with a real ``SIGKILL``, then a replacement process that folds the surviving
log and reconciles by operation id. After each recovery it reads, from the executor process
itself, how often each tool operation was invoked there (``GET /operations/{id}``: the accepted
``POST /jobs`` naming it; :func:`~kernel_lib.live.controller.executor_invocations`), never from the
log. An operation invoked more often in one run than its repeat contract allows
(:func:`allowed_invocations`: once under ``unsafe`` and ``at_most_once``, unbounded under the
repeat-safe contracts) is a violation (:func:`find_violations`).

Deferred evidence (one durable barrier per step, §11.3.1). The executor declares a status lookup
by operation id (``GET /contract``), so the worker's gate acknowledges test_r18's evidence at the
log's write tier and lets it ride the next barrier (the trajectory's final ``sync``). Kill positions
10 and 12 fall after such a deferred result and before that barrier; each run reports the deferred
positions no barrier covered at the kill (``deferred_uncovered_at_kill``) and which of them the
replacement did not find (``deferred_lost``). The second invariant (:func:`find_unsettled_losses`):
every deferred evidence the replacement does not find is settled by reconciliation from the
executor. A SIGKILL is a process crash, whose written bytes survive in the page cache, so here the
replacement finds them all; a host crash that loses them is explored by the crash-state engine
(``python -m kernel_lib crashcheck --workload one-barrier-steps``, on the segment store), under the
same invariant.

The model call goes to the worker's in-process stand-in, which no external executor counts; the
report names it under ``not_counted``.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Iterable, Sequence

from kernel_lib.core.proposals import REPEAT_SAFE_CONTRACTS
from kernel_lib.errors import ConfigError, KernelError
from kernel_lib.live.controller import crash_points, run_worksheet, worksheet_launcher
from kernel_lib.live.crash_points import CrashPoint, kill_positions
from kernel_lib.live.worker import OPERATION, reference_events, resolve_crash_point

__all__ = ["allowed_invocations", "deferred_uncovered", "find_unsettled_losses", "find_violations", "run_sweep"]


def allowed_invocations(repeat_contract: str) -> int | None:
    """How many invocations of one logical operation its endpoint contract allows in one run:
    None (no bound) for the repeat-safe contracts (``idempotent``, ``idempotency_key``,
    ``read_only``), 1 for every other (``unsafe``, ``at_most_once``, or one not known)."""
    return None if repeat_contract in REPEAT_SAFE_CONTRACTS else 1


def find_violations(runs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The operations invoked more often than their contract allows, per run.

    Args:
        runs: dicts with ``position`` and ``invocations`` ``{operation_id: {"invocations": int,
            "repeat_contract": str}}`` (the shape :func:`run_sweep` records per position).

    Returns: ``[{position, operation_id, invocations, allowed, repeat_contract}]`` in run order.
    """
    out = []
    for run in runs:
        for op, inv in sorted((run.get("invocations") or {}).items()):
            allowed = allowed_invocations(inv["repeat_contract"])
            if allowed is not None and inv["invocations"] > allowed:
                out.append({"position": run.get("position"), "operation_id": op, "invocations": inv["invocations"],
                            "allowed": allowed, "repeat_contract": inv["repeat_contract"]})
    return out


def deferred_uncovered(points: Sequence[CrashPoint], killed_at: int) -> list[CrashPoint]:
    """The deferred points at or before ``killed_at`` that no barrier covered yet: those after the
    last non-deferred point (every non-deferred append is a barrier of the log) up to the kill."""
    out: list[CrashPoint] = []
    for p in points:
        if p.position > killed_at:
            break
        out = out + [p] if p.deferred else []
    return out


def find_unsettled_losses(runs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Deferred evidence the replacement did not find and reconciliation did not settle, per run.

    Args:
        runs: dicts with ``position``, ``deferred_lost`` ``[{position, subject}]`` (deferred events
            beyond the recovered log's end) and ``reconciled`` ``{operation_id: action}``.

    Returns: ``[{position, kind: "lost_evidence_unsettled", operation_id, lost_position, action}]``;
    a loss is settled only when reconciliation recorded verified evidence for its operation.
    """
    out = []
    for run in runs:
        for lost in run.get("deferred_lost") or []:
            action = (run.get("reconciled") or {}).get(lost["subject"])
            if action != "recorded verified evidence":
                out.append({"position": run.get("position"), "kind": "lost_evidence_unsettled",
                            "operation_id": lost["subject"], "lost_position": lost["position"], "action": action})
    return out


def _run_view(point: CrashPoint, covers: list[CrashPoint], r: dict[str, Any],
              points: Sequence[CrashPoint] = ()) -> dict[str, Any]:
    crash, rec, recon = r["crash"], r["recovered"], r["reconciled"]
    uncovered = deferred_uncovered(points, crash["log_position"])
    found = rec["log_position"]
    return {"position": point.position, "point": point.label, "event_type": point.event_type,
            "subject": point.subject, "covers": [c.describe() for c in covers],
            "killed_at_log_position": crash["log_position"], "signal": crash["signal"],
            "worker_pid": crash["worker_pid"], "worker_exit": crash["worker_exit"],
            "job_running_at_crash": r["executor"]["job_running_at_crash"],
            "recovered": {op: o["status"] for op, o in rec["operations"].items()},
            "reconciled": {op: a.get("action") for op, a in recon["actions"].items()},
            "in_doubt_after_reconciliation": recon["in_doubt"],
            "invocations": r["invocations"], "expected": r["expected"],
            "workdir_removed": r["cleanup"]["workdir_removed"],
            "recovered_log_position": found,
            "deferred_uncovered_at_kill": [p.position for p in uncovered],
            "deferred_lost": [{"position": p.position, "subject": p.subject} for p in uncovered if p.position > found]}


def _kills(points: Sequence[Any] | None, seed: int) -> list[tuple[CrashPoint, list[CrashPoint]]]:
    """The kill positions the chosen points need, each as (its point, the chosen points it covers)."""
    if points is None:
        chosen = list(crash_points(seed))
    elif isinstance(points, (str, bytes)) or not points:
        raise ConfigError(f"points must be a non-empty list of crash points, got {points!r:.80}")
    else:
        chosen = [resolve_crash_point(p, seed) for p in points]
    by_position = {p.position: p for p in crash_points(seed)}
    return [(by_position[k], sorted({c for c in chosen if c.durable_at == k}, key=lambda c: c.position))
            for k in kill_positions(chosen)]


def run_sweep(store_kind: str = "sqlite", *, seed: int = 0, points: Sequence[Any] | None = None,
              workdir: str | os.PathLike | None = None, test_delay_s: float = 0.0, usd_per_s: float = 0.01,
              reconcile_timeout_s: float = 60.0, step_timeout_s: float = 60.0, progress: bool = False,
              on_run: Callable[[dict[str, Any]], None] | None = None, fork: bool = True) -> dict[str, Any]:
    """Kill the worker at every kill position in turn, recover each time, and count invocations.

    The kill positions are the batch ends of the chosen points
    (:func:`~kernel_lib.live.crash_points.kill_positions`): an event appended in one batch with the
    next ones is durable only with them, so the run killed at the batch's end covers it.

    Args:
        store_kind: ``sqlite``, ``segment`` or ``etcd`` (a cluster per position: slow).
        seed: the model stand-in's seed.
        points: the crash points to try (``N``, ``TYPE#K``, ``TYPE``); default every position of
            the trajectory.
        workdir, test_delay_s, usd_per_s, reconcile_timeout_s, step_timeout_s: as
            :func:`~kernel_lib.live.controller.run_worksheet` (``test_delay_s`` defaults to 0
            here: the sweep kills at log positions, not mid-test).
        progress: show a tqdm bar on stderr (only when stderr is a terminal).
        on_run: called with each position's run record as it finishes.
        fork: True (default) forks each position's executor, worker and replacement from one server
            that imported kernel_lib once (:func:`~kernel_lib.live.controller.worksheet_launcher`);
            False starts a new interpreter for each, as a single worksheet run does.

    Returns:
        ``{store, seed, positions: [N, ...] (the kill positions), events_covered: {"event position":
        kill position}, runs: [{position, point, covers, killed_at_log_position,
        worker_exit, recovered, reconciled, invocations, recovered_log_position,
        deferred_uncovered_at_kill, deferred_lost, ...}], invocations: {operation_id:
        largest count in one run}, invocations_by_position: {"N": {operation_id: count}},
        contracts: {operation_id: {repeat_contract, allowed_per_run}}, not_counted, violations,
        errors: [{position, point, error}], ok, elapsed_s}``. ``violations`` holds those of
        :func:`find_violations` then those of :func:`find_unsettled_losses` (``kind:
        "lost_evidence_unsettled"``). ``ok`` is True when every position
        ran, every worker died of SIGKILL at its position, and there is no violation.

    Raises:
        UnknownCrashPointError / ConfigError: a bad point or argument (before anything starts).
    """
    kills = _kills(points, seed)
    all_points = crash_points(seed)
    t0 = time.monotonic()
    # one fork server for the sweep: the executor, worker and replacement of each position are
    # forked from it instead of importing kernel_lib again (each is still its own process)
    launch = worksheet_launcher() if fork else None
    runs: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    from tqdm import tqdm

    bar = tqdm(total=len(kills), desc=f"sweep ({store_kind})", unit="position", file=sys.stderr,
               disable=not (progress and sys.stderr.isatty()))
    try:
        for point, covers in kills:
            bar.set_postfix_str(point.describe())
            try:
                r = run_worksheet(point.position, store_kind, workdir, seed, test_delay_s, usd_per_s=usd_per_s,
                                  reconcile_timeout_s=reconcile_timeout_s, step_timeout_s=step_timeout_s,
                                  launch=launch)
            except ConfigError:
                raise
            except KernelError as exc:
                errors.append({"position": point.position, "point": point.label,
                               "error": f"{type(exc).__name__}: {exc}"})
                bar.update(1)
                continue
            run = _run_view(point, covers, r, all_points)
            if run["worker_exit"] != -9 or run["killed_at_log_position"] != point.position:
                errors.append({"position": point.position, "point": point.label,
                               "error": f"the worker was not killed by SIGKILL at position {point.position} "
                                        f"(exit {run['worker_exit']}, log position {run['killed_at_log_position']})"})
            runs.append(run)
            if on_run is not None:
                on_run(run)
            bar.update(1)
    finally:
        bar.close()
    violations = find_violations(runs) + find_unsettled_losses(runs)
    ops = sorted({op for run in runs for op in run["invocations"]} or {OPERATION})
    contracts = {}
    for op in ops:
        c = next((run["invocations"][op]["repeat_contract"] for run in reversed(runs) if op in run["invocations"]),
                 None)
        contracts[op] = {"repeat_contract": c, "allowed_per_run": allowed_invocations(c) if c else None}
    models = sorted({e.payload.invocation_id for e in reference_events(seed) if e.event_type == "ContextBuilt"})
    return {"store": store_kind, "seed": seed, "positions": [p.position for p, _ in kills],
            "events_covered": {str(c.position): p.position for p, covers in kills for c in covers}, "runs": runs,
            "invocations": {op: max((run["invocations"][op]["invocations"] for run in runs
                                     if op in run["invocations"]), default=0) for op in ops},
            "invocations_by_position": {str(run["position"]): {op: v["invocations"]
                                                              for op, v in run["invocations"].items()}
                                        for run in runs},
            "contracts": contracts,
            "not_counted": {m: "model call to the worker's in-process stand-in: no external executor counts it"
                            for m in models},
            "violations": violations, "errors": errors,
            "ok": not violations and not errors and len(runs) == len(kills),
            "elapsed_s": round(time.monotonic() - t0, 3)}
