"""Our runtime's recovery time measured on this machine, in Napkin Math 0.5's terms (Failure Recovery).

Napkin Math 0.5 ("Fault-Tolerant System Synthesis" → "Fault injection benchmarks") sums a
recovery as T_snap + T_wal + T_prefill + T_probe (:mod:`kernel_lib.recovery.synthesis.rto`).
:func:`measure_rto` records a trajectory with the real runtime, crashes it, recovers it, and times
each of those terms as our runtime pays it:

1. **Record.** A trajectory of ``turns`` turns (default 10, as in the block) runs through the
   dispatch gate on a durable log (SQLite by default, each barrier a real ``fdatasync``): each turn
   a model call (a stand-in: its context is the running transcript, its token counts a
   word-and-punctuation count of it) and a tool step of a saga (``create_branch`` on the live git
   service, a real process on loopback: :class:`~kernel_lib.live.services.LiveFleet`). A full
   checkpoint (:class:`~kernel_lib.checkpoint.capture.Checkpointer`) is captured after every
   ``snapshot_every`` turns (default 4: the latest is after turn 8). In the last turn the process
   "crashes" right after the service applied the step and before its result reached the log: the
   step is in doubt.
2. **Takeover** (``takeover_lease_s``, optional). The recording worker held an ownership lease of
   that ttl (:class:`~kernel_lib.ownership.leases.SQLiteOwnershipCoordinator`) and renewed it at
   every turn; a second worker polls :func:`~kernel_lib.ownership.leases.take_ownership` from the
   crash on. The wait until it is granted is measured (it is the remaining lease: ttl less the
   time since the last renewal). Without it, the recovery is a restart on the same host and has
   no such term (the block's sum has none either).
3. **Recover**, timed phase by phase, in the order a resuming worker runs them:

   * *snapshot read* (T_snap): open the log and restore the latest checkpoint
     (:func:`kernel_lib.checkpoint.restore` at the checkpoint's own position, every row built, as
     a resuming worker asks): find it, read and verify its manifest and record snapshot;
   * *WAL read* (T_wal): read the log records after the checkpoint and fold them into the record;
   * *prefill* (T_prefill): **not measured**. The stand-in model has no inference engine, so
     there is no KV cache to rebuild; the row gives ΔL / P with ΔL taken from the recorded
     context (the last model call's input tokens less the last one the checkpoint covers) and P
     the given rate, labelled computed;
   * *probe* (T_probe): re-establish the tool session (a fresh capability lease from the broker)
     and ask the service for the in-doubt step's status by its operation id: two real round trips
     on loopback;
   * *settle* (not in the block's sum): append the reconciled result to the log (one durable
     barrier); the trajectory can then move forward.

   The whole sequence is timed end to end once (``total``); snapshot, WAL and probe are then
   repeated ``rounds`` times more on the same log (they read only) and reported as medians.

Each row: ``{term, chapter_formula_value_ms, measured_ms, ours_ms, label, formula_at_our_sizes_ms,
how, samples_ms}``: the block's formula at its givens (or at ``params``), our measured time (None
for the prefill), the figure our total uses (measured, or computed for the prefill), and the
block's formula applied to the sizes we actually read (our snapshot and WAL bytes at B_disk, our
ΔL at P). The log was written just before it is read, so its pages are almost surely in the
operating system's page cache: the reads are memory reads, not the NVMe reads the block assumes,
and the times are dominated by decoding, verifying and folding.
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from kernel_lib.errors import ConfigError

__all__ = ["LABEL", "measure_rto", "format_rto_table", "TRAJECTORY", "TOOL"]

#: How every measured figure is labelled.
LABEL = "measured on this machine"
#: The prefix of the recorded trajectory's id (each run adds its own suffix: a fleet may serve several runs,
#: and the services answer a repeated idempotency key from their cache).
TRAJECTORY = "rto-measure"
#: The tool every turn's saga step calls (the live git service).
TOOL = "create_branch"
_GRANT = "grant-rto"
_MODEL = "stand-in-model"
STORES = ("sqlite", "segment")


class _Crash(BaseException):
    """The simulated process death (a BaseException, so no ``except Exception`` swallows it)."""


def _check_args(turns: Any, snapshot_every: Any, takeover_lease_s: Any, rounds: Any, store: Any) -> None:
    if isinstance(turns, bool) or not isinstance(turns, int) or not 2 <= turns <= 200:
        raise ConfigError(f"turns must be an integer from 2 to 200, got {turns!r}")
    if isinstance(snapshot_every, bool) or not isinstance(snapshot_every, int) or not 1 <= snapshot_every < turns:
        raise ConfigError(f"snapshot_every must be an integer from 1 to turns - 1 ({turns - 1}), got "
                          f"{snapshot_every!r} (a checkpoint must precede the crash in the last turn)")
    if takeover_lease_s is not None and (isinstance(takeover_lease_s, bool)
                                         or not isinstance(takeover_lease_s, (int, float))
                                         or not 0.01 <= takeover_lease_s <= 60):
        raise ConfigError(f"takeover_lease_s must be None (a restart on the same host) or seconds from 0.01 to 60, "
                          f"got {takeover_lease_s!r}")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= 1000:
        raise ConfigError(f"rounds must be an integer from 1 to 1000, got {rounds!r}")
    if store not in STORES:
        raise ConfigError(f"store must be one of {', '.join(STORES)}, got {store!r}")


def _count_tokens(text: str) -> int:
    from kernel_lib.live.looping_agent import count_tokens
    return count_tokens(text)


def _record(store: Any, fleet: Any, blobs: Any, tid: str, *, turns: int, snapshot_every: int,
            lease_hooks: tuple[Callable[[], int], Callable[[], None]] | None) -> dict[str, Any]:
    """Run the trajectory (module docstring, step 1) until its crash in the last turn. Returns what
    the recovery needs to know from outside the log: the crash instant (monotonic s) and the
    checkpoint positions; everything else is read back from the log."""
    from kernel_lib.checkpoint.capture import Checkpointer
    from kernel_lib.core.events import TaskStarted
    from kernel_lib.core.proposals import ModelCall, ModelReply
    from kernel_lib.core.record import fold_step
    from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate
    from kernel_lib.log import TrajectoryLog
    from kernel_lib.recovery.runner import RetryPolicy, SagaRunner
    from kernel_lib.sim.deployment import deployment_registry

    epoch = lease_hooks[0]() if lease_hooks else 0
    renew = lease_hooks[1] if lease_hooks else (lambda: None)
    armed = [False]

    def on_position(name: str, ev: Any) -> None:
        if armed[0] and name == "after:dispatch":
            raise _Crash("after the service applied the last step, before its result was logged")

    reg = deployment_registry()
    log = TrajectoryLog(store, tid, must_survive="host_crash", owner_epoch=epoch)
    gate = DispatchGate(log, AdmissionPolicy({_GRANT: set(reg.names()) | {_MODEL}}), coalesce_admission=True,
                        on_position=on_position)
    gate.start(TaskStarted(task_id=tid, requester="nm0.5 measure", objective="set up the branches for a "
                           "staged migration, one per turn", grant_ids=[_GRANT], budget_ceiling_usd=100.0))
    runner = SagaRunner(gate, reg, fleet.client(tid), saga_id=tid, grant_id=_GRANT,
                        retry=RetryPolicy(max_attempts=2, base_s=0.0, cap_s=0.0))
    ck = Checkpointer(log, blobs)
    transcript = ("system: you are a systems-administration agent; every turn propose one tool call.\n"
                  "user: prepare one git branch per migration step, then report.\n")
    checkpoints: list[dict[str, int]] = []
    crash_s = None
    for t in range(1, turns + 1):
        renew()
        reply = f"turn {t}: create the branch migrate-step-{t} for the next migration script."
        gate.run_model(ModelCall(invocation_id=f"model-{t}", model=_MODEL, delivered_input=transcript,
                                 grant_id=_GRANT, cost_bound_usd=0.05),
                       lambda ctx, transcript=transcript, reply=reply, t=t: ModelReply(
                           status="complete", reply=reply,
                           proposal={"tool": TOOL, "arguments": {"name": f"migrate-step-{t}"}},
                           input_tokens=_count_tokens(transcript), output_tokens=_count_tokens(reply),
                           charged_usd=0.0))
        transcript += f"assistant: {reply}\n"
        if t == turns:
            armed[0] = True
        try:
            out = runner.step(TOOL, {"name": f"migrate-step-{t}"})
        except _Crash:
            crash_s = time.monotonic()
            break
        transcript += f"tool {TOOL}: {out}\n"
        if t % snapshot_every == 0:
            res = ck.capture(gate.record, None, kind="full")
            fold_step(gate.record, res.event)
            checkpoints.append({"turn": t, "position": res.event.sequence_number,
                                "covered": res.event.payload.covered_sequence_number})
    if crash_s is None:   # pragma: no cover - the hook fires on the last step's dispatch
        raise AssertionError("the recorded trajectory did not reach its crash")
    return {"crash_s": crash_s, "checkpoints": checkpoints, "crash_turn": turns}


def _context_tokens(events: list[Any], upto: int | None = None) -> int:
    """Input tokens of the last model call at or before position ``upto`` (the recorded context)."""
    found = 0
    for ev in events:
        if upto is not None and ev.sequence_number > upto:
            break
        if ev.event_type == "ModelReplied":
            found = int(ev.payload.input_tokens)
    return found


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def measure_rto(params: Mapping[str, Any] | None = None, *, turns: int = 10, snapshot_every: int = 4,
                takeover_lease_s: float | None = None, rounds: int = 5, store: str = "sqlite",
                directory: str | Path | None = None, fleet: Any = None) -> dict[str, Any]:
    """Record, crash and recover a trajectory, and time its recovery in the block's terms
    (module docstring).

    Args:
        params: Napkin Math 0.5's givens (:data:`~kernel_lib.recovery.synthesis.rto.GIVEN_NAMES`;
            the chapter's where absent): the chapter column, the prefill rate and disk rate used for
            our computed rows.
        turns: turns of the recorded trajectory; the crash is in the last one.
        snapshot_every: a checkpoint after every this many turns (at least one before the crash).
        takeover_lease_s: None for a restart on the same host; else the ttl of the recording
            worker's ownership lease, waited out for real by the worker that takes over.
        rounds: repetitions of the read-only phases (medians reported) after the first recovery.
        store: ``sqlite`` or ``segment``.
        directory: parent of the temporary directory (default: the system's); it is removed.
        fleet: a running :class:`~kernel_lib.live.services.LiveFleet` to use (default: one is
            started in the temporary directory and stopped).

    Returns:
        ``{"label", "givens", "takeover", "takeover_lease_s", "recorded", "rows", "total_ms",
        "measured_total_ms", "chapter_total_ms", "first_run_ms", "filesystem", "notes"}``: ``rows``
        as in the module docstring (terms ``lease_wait`` when a takeover,
        ``snapshot``, ``wal``, ``prefill``, ``probe``, ``settle``, ``total``); ``recorded`` the
        trajectory's figures (events, checkpoint position, suffix events, snapshot and WAL bytes,
        context tokens at the crash and at the checkpoint, the in-doubt operation and how the
        service settled it).

    Raises:
        ConfigError: bad givens (naming the parameter) or arguments.
        ServiceError: the live fleet could not start.
    """
    from kernel_lib.recovery.synthesis.rto import CHAPTER_GIVENS, rto_terms

    givens = {**CHAPTER_GIVENS, **dict(params or {})}
    chapter = rto_terms(givens)   # validates the givens (ConfigError naming the parameter)
    _check_args(turns, snapshot_every, takeover_lease_s, rounds, store)
    with tempfile.TemporaryDirectory(prefix="nm0-5-rto-", dir=directory) as tmp:
        root = Path(tmp)
        from kernel_lib._support.disks import filesystem_of
        fs = filesystem_of(root)
        with contextlib.ExitStack() as stack:
            if fleet is None:
                from kernel_lib.live.services import LiveFleet
                fleet = stack.enter_context(LiveFleet(root / "fleet"))
            out = _run(root, fleet, givens, chapter, turns=turns, snapshot_every=snapshot_every,
                       takeover_lease_s=takeover_lease_s, rounds=rounds, store_kind=store)
    out["filesystem"] = {**fs.to_dict(), "describe": fs.describe()}
    out["notes"].insert(0, f"the log and the checkpoint lived on {fs.describe()}")
    return out


def _run(root: Path, fleet: Any, givens: dict[str, Any], chapter: dict[str, Any], *, turns: int,
         snapshot_every: int, takeover_lease_s: float | None, rounds: int, store_kind: str) -> dict[str, Any]:
    """Record, crash, take over (optionally), recover once end to end, repeat the read-only phases."""
    from kernel_lib.checkpoint.blobs import DirectoryBlobStore
    from kernel_lib.log import open_store
    from kernel_lib.ownership.leases import SQLiteOwnershipCoordinator, take_ownership

    import uuid

    tid = f"{TRAJECTORY}-{uuid.uuid4().hex[:8]}"
    path = root / ("log.sqlite" if store_kind == "sqlite" else "log")
    blob_dir = str(root / "blobs")
    coordinator = SQLiteOwnershipCoordinator(root / "owners.sqlite") if takeover_lease_s is not None else None
    try:
        # --- record, with worker A's lease renewed every turn -------------------------------------------
        first = open_store(store_kind, path, create=True)
        hooks = None
        if coordinator is not None:
            held: list[Any] = []

            def take() -> int:
                held.append(take_ownership(coordinator, first, tid, "worker-a", takeover_lease_s))
                return held[-1].owner_epoch

            def renew() -> None:
                held[-1] = coordinator.renew(held[-1])

            hooks = (take, renew)
        try:
            rec = _record(first, fleet, DirectoryBlobStore(blob_dir), tid, turns=turns, snapshot_every=snapshot_every,
                          lease_hooks=hooks)
        finally:
            first.close()   # the crashed worker's handle is gone
        latest = rec["checkpoints"][-1]
        lease_wait_ms, epoch_b = None, 0
        if coordinator is not None:
            lease_wait_ms, epoch_b = _take_over(coordinator, store_kind, path, tid, rec["crash_s"], takeover_lease_s)
        first_run = _recover(store_kind, path, blob_dir, fleet, tid, latest["position"], epoch_b)
        samples = _repeat(store_kind, path, blob_dir, fleet, tid, latest["position"], first_run, rounds)
    finally:
        if coordinator is not None:
            coordinator.close()
    return _result(givens, chapter, tid, rec, latest, first_run, samples, lease_wait_ms, takeover_lease_s,
                   turns=turns, snapshot_every=snapshot_every, store_kind=store_kind)


def _take_over(coordinator: Any, store_kind: str, path: Path, tid: str, crash_s: float,
               ttl_s: float) -> tuple[float, int]:
    """Worker B polls :func:`take_ownership` from the crash until worker A's lease lapses:
    ``(wait_ms from the crash, B's owner_epoch)``."""
    from kernel_lib.errors import LeaseHeldError
    from kernel_lib.log import open_store
    from kernel_lib.ownership.leases import take_ownership

    store = open_store(store_kind, path)
    try:
        poll_s = min(0.005, ttl_s / 50)
        while True:
            try:
                epoch = take_ownership(coordinator, store, tid, "worker-b", ttl_s).owner_epoch
                break
            except LeaseHeldError:
                time.sleep(poll_s)
    finally:
        store.close()
    return (time.monotonic() - crash_s) * 1e3, epoch


def _recover(store_kind: str, path: Path, blob_dir: str, fleet: Any, tid: str, checkpoint_position: int,
             owner_epoch: int) -> dict[str, Any]:
    """The first recovery, in order, each phase timed (ms), and what it found."""
    from kernel_lib.checkpoint.blobs import DirectoryBlobStore
    from kernel_lib.checkpoint.restore import restore
    from kernel_lib.core.proposals import ToolReply
    from kernel_lib.core.record import fold_into
    from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate
    from kernel_lib.log import TrajectoryLog, open_store
    from kernel_lib.sim.deployment import deployment_registry

    t0 = time.perf_counter()
    s = open_store(store_kind, path)
    try:
        res = restore(s, tid, DirectoryBlobStore(blob_dir), target=checkpoint_position, lazy_rows=False)
        t1 = time.perf_counter()
        suffix = list(s.read(tid, checkpoint_position + 1))
        record = fold_into(res.record, suffix)
        t2 = time.perf_counter()
        head = suffix[-1].sequence_number if suffix else checkpoint_position   # the log as the crash left it
        doubtful = [op for op in record.operations.values() if op.status == "in_doubt"]
        if len(doubtful) != 1:   # pragma: no cover - the crash leaves exactly the last step in doubt
            raise AssertionError(f"expected one in-doubt step after the crash, found {len(doubtful)}")
        op = doubtful[0]
        t3 = time.perf_counter()
        endpoints = fleet.client(tid)                # a new tool session: a lease from the broker
        t4 = time.perf_counter()
        answer = endpoints.lookup(TOOL, op.operation_id)    # the reconciliation probe
        t5 = time.perf_counter()
        log = TrajectoryLog(s, tid, must_survive="host_crash", owner_epoch=owner_epoch)
        gate = DispatchGate(log, AdmissionPolicy({_GRANT: set(deployment_registry().names()) | {_MODEL}}),
                            record=record)
        status = answer.get("status")
        if status in ("completed", "failed"):
            gate.record_evidence(op.operation_id, op.current_attempt_id,
                                 ToolReply(status, outcome={"http_status": answer.get("http_status"),
                                                            **dict(answer.get("body") or {})},
                                           observation_complete=True), source="reconciliation")
        t6 = time.perf_counter()
        events = list(s.read(tid, 1, head))
    finally:
        s.close()   # one opener at a time (a segment log locks its directory)
    return {"snapshot": (t1 - t0) * 1e3, "wal": (t2 - t1) * 1e3, "session": (t4 - t3) * 1e3,
            "lookup": (t5 - t4) * 1e3, "settle": (t6 - t5) * 1e3, "total": (t6 - t0) * 1e3,
            "snapshot_bytes": int(res.bytes_read), "suffix": suffix, "head": head, "events": events,
            "operation_id": op.operation_id, "probe_status": status}


def _repeat(store_kind: str, path: Path, blob_dir: str, fleet: Any, tid: str, checkpoint_position: int,
            first_run: dict[str, Any], rounds: int) -> dict[str, list[float]]:
    """The read-only phases ``rounds`` more times on the same log (the first run's included): ms."""
    from kernel_lib.checkpoint.blobs import DirectoryBlobStore
    from kernel_lib.checkpoint.restore import restore
    from kernel_lib.core.record import fold_into
    from kernel_lib.log import open_store

    samples = {k: [first_run[k]] for k in ("snapshot", "wal", "session", "lookup")}
    samples["probe"] = [first_run["session"] + first_run["lookup"]]
    for _ in range(rounds):
        a = time.perf_counter()
        again = open_store(store_kind, path)
        try:
            r = restore(again, tid, DirectoryBlobStore(blob_dir), target=checkpoint_position, lazy_rows=False)
            b = time.perf_counter()
            fold_into(r.record, again.read(tid, checkpoint_position + 1, first_run["head"]))
            c = time.perf_counter()
        finally:
            again.close()
        e = fleet.client(tid)
        d = time.perf_counter()
        e.lookup(TOOL, first_run["operation_id"])
        f = time.perf_counter()
        for k, v in (("snapshot", b - a), ("wal", c - b), ("session", d - c), ("lookup", f - d), ("probe", f - c)):
            samples[k].append(v * 1e3)
    return samples


def _result(givens: dict[str, Any], chapter: dict[str, Any], tid: str, rec: dict[str, Any], latest: dict[str, int],
            first_run: dict[str, Any], samples: dict[str, list[float]], lease_wait_ms: float | None,
            takeover_lease_s: float | None, *, turns: int, snapshot_every: int, store_kind: str) -> dict[str, Any]:
    """The rows of the decomposition (module docstring) and the recorded trajectory's figures."""
    from kernel_lib.core.events import encode
    from kernel_lib.core.record import fold, initial_record

    events, suffix, head = first_run["events"], first_run["suffix"], first_run["head"]
    fold_start = time.perf_counter()
    fold(initial_record(tid), events)
    fold_from_start_ms = (time.perf_counter() - fold_start) * 1e3
    snapshot_bytes = first_run["snapshot_bytes"]
    wal_bytes = sum(len(encode(ev)) for ev in suffix)
    crash_tokens = _context_tokens(events, head)
    checkpoint_tokens = _context_tokens(events, latest["covered"])
    delta = crash_tokens - checkpoint_tokens
    disk, P = givens["disk_mb_per_s"], givens["prefill_tokens_per_s"]
    rand_ms = givens["random_read_us"] / 1000
    op, settled = first_run["operation_id"], first_run["probe_status"]
    recorded = {
        "trajectory_id": tid, "store": store_kind, "turns": turns, "snapshot_every": snapshot_every,
        "crash_turn": rec["crash_turn"],
        "checkpoint_turn": latest["turn"], "checkpoint_position": latest["position"],
        "checkpoint_covers": latest["covered"], "head_at_crash": head, "suffix_events": len(suffix),
        "snapshot_bytes": snapshot_bytes, "wal_bytes": wal_bytes, "context_tokens": crash_tokens,
        "snapshot_tokens": checkpoint_tokens, "delta_tokens": delta, "in_doubt_operation": op,
        "probe_status": settled, "fold_from_start_ms": fold_from_start_ms,
    }
    med = {k: _median(v) for k, v in samples.items()}
    rows: list[dict[str, Any]] = []
    if lease_wait_ms is not None:
        rows.append(_row("lease_wait", None, lease_wait_ms, lease_wait_ms, LABEL, takeover_lease_s * 1e3,
                         f"a takeover: worker B polls take_ownership from the crash until worker A's "
                         f"{takeover_lease_s:g} s lease (renewed every turn) lapses; the block's sum has no such "
                         "term (a restart on the same host)", [lease_wait_ms]))
    rows += [
        _row("snapshot", chapter["t_snap_ms"], med["snapshot"], med["snapshot"], LABEL,
             snapshot_bytes / 1e6 / disk * 1e3,
             f"open the log and restore the checkpoint after turn {latest['turn']} (find, read and verify its "
             f"manifest and {snapshot_bytes:,} B record snapshot, build every row); median of "
             f"{len(samples['snapshot'])}", samples["snapshot"]),
        _row("wal", chapter["t_wal_ms"], med["wal"], med["wal"], LABEL, wal_bytes / 1e6 / disk * 1e3 + rand_ms,
             f"read the {len(suffix)} log records after the checkpoint ({wal_bytes:,} B encoded) and fold them into "
             f"the record; median of {len(samples['wal'])}", samples["wal"]),
        _row("prefill", chapter["t_prefill_ms"], None, delta / P * 1e3, "computed: not measurable with the stand-in "
             "model", delta / P * 1e3,
             f"the stand-in model has no KV cache to rebuild: ΔL = {crash_tokens:,} − {checkpoint_tokens:,} = "
             f"{delta:,} recorded context tokens (word-and-punctuation count) at the given {P:,.0f} tokens/s", []),
        _row("probe", chapter["t_probe_ms"], med["probe"], med["probe"], LABEL, None,
             f"a new tool session (capability lease from the broker, median {med['session']:.2f} ms) and the status "
             f"lookup of the in-doubt step {op} (median {med['lookup']:.2f} ms): two round trips on "
             f"loopback; the service answered {settled!r}", samples["probe"]),
        _row("settle", None, first_run["settle"], first_run["settle"], LABEL, None,
             "append the reconciled result (one durable barrier at the host_crash tier); not in the block's sum",
             [first_run["settle"]]),
    ]
    ours_total = sum(r["ours_ms"] for r in rows)
    measured_total = first_run["total"] + (lease_wait_ms or 0.0)
    rows.append(_row("total", chapter["rto_ms"], measured_total, ours_total,
                     LABEL + " (end to end, first recovery) / ours: the rows summed with the computed prefill", None,
                     "the first recovery timed end to end (its phases: snapshot "
                     f"{first_run['snapshot']:.2f}, WAL {first_run['wal']:.2f}, probe "
                     f"{first_run['session'] + first_run['lookup']:.2f}, settle {first_run['settle']:.2f} ms)"
                     + (f" plus the lease wait {lease_wait_ms:.0f} ms" if lease_wait_ms is not None else ""),
                     [measured_total]))
    notes = [
        "the log was written just before it was read: its pages are in the page cache, so the reads are memory "
        "reads, not NVMe reads; snapshot and WAL times are decoding, verifying and folding",
        f"folding the whole log from the start ({head} events) took {fold_from_start_ms:.2f} ms: with a log "
        "this short the checkpoint saves little; it pays off on long logs (bench restore)",
        "the prefill row is computed, not measured: the stand-in model keeps no inference state",
        "starting a new process and importing the runtime is not counted (the block's sum starts at the "
        "snapshot read too)",
    ]
    first = {k: first_run[k] for k in ("snapshot", "wal", "session", "lookup", "settle", "total")}
    return {"label": LABEL, "givens": givens, "takeover": takeover_lease_s is not None,
            "takeover_lease_s": takeover_lease_s, "recorded": recorded, "rows": rows, "total_ms": ours_total,
            "measured_total_ms": measured_total, "chapter_total_ms": chapter["rto_ms"], "first_run_ms": first,
            "notes": notes}


def _row(term: str, chapter_ms: float | None, measured_ms: float | None, ours_ms: float, label: str,
         formula_ours_ms: float | None, how: str, samples: list[float]) -> dict[str, Any]:
    return {"term": term, "chapter_formula_value_ms": chapter_ms, "measured_ms": measured_ms, "ours_ms": ours_ms,
            "label": label, "formula_at_our_sizes_ms": formula_ours_ms, "how": how, "samples_ms": samples}


def format_rto_table(result: Mapping[str, Any]) -> str:
    """The rows of :func:`measure_rto` as a text table (what ``exercise measure nm0.5`` prints)."""
    def f(x: float | None) -> str:
        return "-" if x is None else (f"{x:,.3f}" if abs(x) < 10 else f"{x:,.1f}")

    r = result["recorded"]
    lines = [f"Napkin Math 0.5 beside our runtime ({result['label']}; {r['store']} log, {r['turns']} turns, "
             f"checkpoint after turn {r['checkpoint_turn']}, crash in turn {r['crash_turn']}"
             + (f", takeover with a {result['takeover_lease_s']:g} s lease" if result["takeover"] else
                ", restart on the same host") + ")",
             f"  {'term':<11}{'chapter ms':>12}{'measured ms':>13}{'ours ms':>11}{'formula at our sizes ms':>25}"]
    for row in result["rows"]:
        lines.append(f"  {row['term']:<11}{f(row['chapter_formula_value_ms']):>12}{f(row['measured_ms']):>13}"
                     f"{f(row['ours_ms']):>11}{f(row['formula_at_our_sizes_ms']):>25}")
    lines.append("how:")
    lines += [f"  {row['term']}: {row['how']}" for row in result["rows"]]
    lines += [f"note: {n}" for n in result["notes"]]
    return "\n".join(lines)
