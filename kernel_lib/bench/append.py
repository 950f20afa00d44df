"""``bench append``: what a durable acknowledgment costs on this machine (§11.3.1, §11.3.4).

Every figure is measured in one run, in one temporary directory, on one disk, so the numbers
can be compared with each other (and only with each other: they are this machine's, today).
Contenders of a figure are always measured in interleaved rounds (the order changes every
round; :mod:`kernel_lib.bench.harness`), so machine noise falls on all of them alike.

1. **Per-append latency** of each log store at each acknowledgment tier it offers, for the
   same pre-built events, against a raw baseline of the same bytes: ``os.write`` appending to a
   file (what the ``write`` tier promises: process crash) and ``os.write`` + ``os.fdatasync``
   (what the ``fdatasync`` tier promises: host crash, volume intact). Median and p99 in µs and
   the ratios store / baseline, after a warm-up.
2. **Group commit vs single flush** with 1, 4 and 16 writers, each writing its own trajectory
   at the ``fdatasync`` tier, under two *writer models*, both measured in the same rounds:

   * **threads**: every writer is an OS thread. Single flush: each thread calls
     ``store.append(ev, FDATASYNC)`` itself (one barrier per event at most).
     (Both stores write under their lock and run the barrier outside it, and a barrier that
     started after a write covers it, so concurrent single-flush threads do share barriers: this
     baseline is the store's own concurrency, not one fdatasync per event.)
     Group: each thread calls :meth:`GroupCommitter.append`; a flusher thread writes a batch
     with one barrier and releases its writers. Every acknowledgment wakes an OS thread (a
     thread hand-off costs tens of µs on a small VM): with 16 writers, 16 wake-ups per flush
     cycle, which the time per flush shows next to the storage time.
   * **asyncio tasks**: every writer is a task on one event loop, as in an async agent runtime.
     Single flush: each task calls ``store.append(ev, FDATASYNC)`` directly on the loop, so the
     flushes are serial, exactly one barrier per event, with no hand-off at all (the fastest
     single-flush baseline a loop has). Group: each task awaits
     :meth:`AsyncGroupCommitter.append` with its default ``offload=False``: the flush runs on
     the loop, which stalls for one barrier while every writer of the batch waits on it anyway;
     a waiting writer costs a future and there is no thread hand-off at all. (``offload=True``
     runs each flush in a worker thread, for stores whose flush is long, at the price of one
     hand-off per flush.)

   Reported per writer model: events/s of each mode, their ratio, the mean batch size, the
   mean eq. 2 terms (``queue_wait_s``, ``storage_s``) from the committer's statistics, and the
   group run's time per flush, whose excess over ``storage_s`` is the time each flush cycle
   spends outside the store (waking the writers and collecting their next events).
3. **Per-step time of one trajectory**, ours and the peers' (DBOS on its SQLite system
   database, LangGraph with ``SqliteSaver`` and ``durability="sync"``), each with and without
   durability, so that *durability overhead* = durable − non-durable per step. Per-step time is
   the slope between runs of 1 and 1 + S steps, which removes each system's fixed per-run cost
   (workflow/thread start, task start). For each system the SQLite ``journal_mode`` and
   ``synchronous`` of its own connection are read back, which says whether its step
   acknowledgment is fsync-durable at all.

   *Barriers per step.* A write-ahead step cannot dispatch before its intent is durable, so one
   trajectory's durable step waits for at least one barrier, in sequence. Our bench endpoint
   declares a status lookup by operation id (``ToolProposal.status_lookup``), so the gate
   acknowledges its evidence at the write tier and lets it ride the next intent's barrier: one
   barrier per step (an undeclared endpoint would pay two). Every system's barriers per step is
   counted by a probe run, never assumed: ours by the barriers its log handle waited for
   (:attr:`TrajectoryLog.barriers`), LangGraph's by the ``COMMIT`` statements on its own SQLite
   connection (each one a WAL sync under ``synchronous=FULL``), DBOS's by the commits its
   system-database engine reports. The report computes the floor ratio = our barriers per step ×
   raw write+fdatasync median (figure 1) / LangGraph's overhead; when it is above the target, no
   step waiting for that many barriers can meet the target for a single trajectory on this disk,
   and the report says so next to the pass/fail row.

   *The SQLite engine's floor* (``engine/sqlite``, measured in the same rounds): SQLite by itself
   doing what our SQLite store asks of it per step (the log's schema; one autocommit INSERT of
   one row, then a three-row transaction and an fdatasync of the ``-wal`` file), with no code of
   ours. Its overhead / LangGraph's is printed beside the ``ours/sqlite`` row: the part of that
   row below it is SQLite's B-tree commits and WAL I/O, the part above it is our store and gate.

   *One barrier inside the step* (``floor/fdatasync+step``, same rounds): the gate's step on a
   MemoryStore that also writes every batch's bytes in place into a preallocated file and waits
   for one ``fdatasync`` after the intent batch, with no store at all. A raw fdatasync in a tight loop
   understates what one barrier costs a step: on a VM whose idle vCPU halts, the step's own work
   after each blocking wait runs on cold caches (on the reference VM a 140 µs fdatasync added
   about 250-290 µs to the step). This row is the floor of every design with one barrier per
   step in context; each ``ours`` row says what its store adds above it.
4. **Fleet per-step time**, the figure §11.3.4 is about (throughput across many concurrent
   trajectories, where one barrier can serve many of them): 16 threads, each running its own
   trajectory of 1 and of 1 + S steps, timed from a common start until all end; per-step time =
   slope of that wall time / (16 · S), overhead = durable − non-durable as in 3. Ours: each
   thread runs its own DispatchGate over its own TrajectoryLog, all sharing ONE durable store
   and ONE committer (non-durable: the same on a MemoryStore, no committer), measured with each
   of two committers: :class:`GroupCommitter` (a flusher thread closes and flushes batches;
   rows ``ours/KIND``) and :class:`LeaderGroupCommitter` (no flusher thread: a writer that
   finds no flush in progress flushes what is queued and hands the lead to the next waiting
   writer; rows ``ours/KIND+leader``), which saves the flusher's wake-ups: with 16 threads
   under one GIL each hand-off is paid in CPU. The committer's batch size and eq. 2 terms are
   reported. LangGraph: 16 threads invoking the
   same compiled graph, each with its own ``thread_id``, on one SqliteSaver (non-durable: the
   graph compiled without a checkpointer). DBOS: 16 threads each calling the workflow function
   (non-durable as in 3). The process's CPU time per step (same slope) is reported too: where
   it is close to the wall time, the fleet is CPU-bound (one GIL) and what durability adds is
   CPU (stores, committer, thread wake-ups), not barrier waits, which overlap other threads'
   work.
5. **Targets**, each marked pass/fail: fdatasync append ≤ 1.5 × raw write+fdatasync; group
   commit ≥ 5 × single flush at 16 writers, per store and writer model; our per-step durability
   overhead ≤ 0.35 × LangGraph's (``SqliteSaver``, ``durability="sync"``) for one trajectory (with
   its floor) and ≤ 0.15 × LangGraph's for the fleet of 16, both measured in the same run.

Run it as ``python -m kernel_lib bench append`` (or ``python -m kernel_lib.bench.append append``);
:func:`run_append_bench` is the same benchmark as a function returning a dict.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import importlib.util
import math
import os
import sqlite3
import statistics
import sys
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from kernel_lib.bench.harness import (
    Contender,
    MeasuredDir,
    machine_info,
    median,
    progress_bar,
    ratio,
    round_plan,
    rounds_ticks,
    run_rounds,
    summarize,
    time_call,
)
from kernel_lib.errors import KernelError
from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate, ToolProposal, ToolReply
from kernel_lib.core.events import Event, TaskStarted
from kernel_lib.log import (
    AckTier,
    AsyncGroupCommitter,
    FailureDomain,
    GroupCommitter,
    LeaderGroupCommitter,
    LogStore,
    TrajectoryLog,
    choose_tier,
    open_store,
)
from kernel_lib.sim.events import sample_intent_events

#: Writer counts of figure 2.
WRITER_COUNTS = (1, 4, 16)
#: Writer models of figure 2 (module docstring).
WRITER_MODELS = {
    "threads": "OS threads; single: store.append per event; group: GroupCommitter.append (flusher thread)",
    "asyncio": "tasks on one event loop; single: store.append per event on the loop (serial, one barrier "
               "each); group: await AsyncGroupCommitter.append (default offload=False: the flush runs on the loop)",
}
#: Concurrent trajectories of figure 4.
FLEET_SIZE = 16
#: Targets (figure 5).
TARGET_FDATASYNC_RATIO = 1.5     # store@fdatasync median ≤ 1.5 × raw write+fdatasync median
TARGET_OVERHEAD_RATIO = 0.35     # one trajectory: our per-step durability overhead ≤ 0.35 × LangGraph's
TARGET_FLEET_OVERHEAD_RATIO = 0.15   # fleet of 16: ours ≤ 0.15 × LangGraph's fleet overhead
#: The peer the overhead targets compare with (issue 15: LangGraph, SqliteSaver, durability="sync").
TARGET_PEER = "langgraph"
#: the name of the SQLite engine floor in figure 3 (:func:`_sqlite_engine_system`)
ENGINE_FLOOR = "engine/sqlite"
#: the name of the same SQLite work done inside our gate's step (:func:`_sqlite_engine_in_step_system`)
ENGINE_IN_STEP = "engine/sqlite+step"
#: name suffix of figure 4's rows whose trajectories share a :class:`LeaderGroupCommitter`
LEADER_SUFFIX = "+leader"
#: the name of one raw barrier per step done inside our gate's step (:func:`_barrier_in_step_system`)
BARRIER_IN_STEP = "floor/fdatasync+step"
#: size of the preallocated file of :data:`BARRIER_IN_STEP` (bytes; written in place, wrapping)
_BARRIER_FLOOR_FILE_BYTES = 16 << 20
#: figure 3 rows that are floors, not peers (left out of the peers' comparison)
FLOORS = (ENGINE_FLOOR, ENGINE_IN_STEP, BARRIER_IN_STEP)
TARGET_GROUP_SPEEDUP = 5.0       # group commit ≥ 5 × single flush at 16 writers
#: Default flush timer of the group committers in figures 2 and 4 (s): of 0.5, 1 and 2 ms, the
#: one that did best for both writer models on the reference VM (the timer mostly bounds the
#: first batch of a burst; the adaptive close ends the others).
DEFAULT_FLUSH_TIMER_S = 0.001
#: the most measured appends per contender ``--iterations`` accepts (100x the default; the events of
#: a figure are built in memory first, ~0.7 kB each, so a typo'd huge count would exhaust memory)
MAX_ITERATIONS = 200_000
DEFAULT_BATCH_CAP = 64
_BASELINE_OF_TIER = {"memory": "raw_write", "write": "raw_write", "fdatasync": "raw_write_fdatasync"}


@dataclass(frozen=True)
class BenchPlan:
    """How much to measure. ``quick`` is for tests and smoke runs (well under 20 s)."""

    iterations: int = 2000          # figure 1: measured appends per contender
    warmup: int = 100               # figure 1: discarded appends per contender, before the rounds
    rounds: int = 10                # interleaving rounds (figures 1 and 3)
    group_events: int = 960         # figure 2: events per (store, writers, mode) and round
    group_rounds: int = 3           # figure 2: rounds alternating single flush and group commit
    step_count: int = 20            # figures 3 and 4: S, the extra steps of the long run
    step_runs: int = 20             # figure 3: measured runs per contender
    step_warmup: int = 2
    fleet_runs: int = 11            # figure 4: measured fleet runs per contender (one per round; the
                                    # overhead is a difference of two noisy medians: 5 runs left it +-0.1)
    fleet_warmup: int = 1

    @classmethod
    def make(cls, iterations: int | None = None, quick: bool = False) -> "BenchPlan":
        if quick:
            base = cls(iterations=60, warmup=10, rounds=3, group_events=128, group_rounds=1,
                       step_count=5, step_runs=3, step_warmup=1, fleet_runs=2, fleet_warmup=1)
        else:
            base = cls()
        if iterations is None:
            return base
        if isinstance(iterations, bool) or not isinstance(iterations, int) or not 1 <= iterations <= MAX_ITERATIONS:
            raise KernelError(f"--iterations must be an integer 1..{MAX_ITERATIONS}, got {iterations}")
        scale = iterations / base.iterations
        return cls(iterations=iterations, warmup=max(1, round(base.warmup * scale)),
                   rounds=max(1, min(base.rounds, iterations)),
                   group_events=max(16, round(base.group_events * scale)), group_rounds=base.group_rounds,
                   step_count=base.step_count, step_runs=max(2, round(base.step_runs * scale)),
                   step_warmup=base.step_warmup, fleet_runs=max(2, round(base.fleet_runs * scale)),
                   fleet_warmup=base.fleet_warmup)


# ------------------------------------------------------------------------------------------------
# events and stores
# ------------------------------------------------------------------------------------------------

#: Padding that makes a sample intent a realistic ~0.7 kB event.
INTENT_PAD_CHARS = 200


def _events(trajectory_id: str, n: int) -> list[Event]:
    """``n`` pre-built intent events of one trajectory, sequence numbers 1..n."""
    return sample_intent_events(trajectory_id, n, pad_chars=INTENT_PAD_CHARS)


def _store_kinds() -> tuple[list[str], dict[str, str]]:
    """Store kinds this build can open, and why any other is skipped."""
    kinds, skipped = ["memory", "sqlite"], {}
    try:
        from kernel_lib.log.segment import SegmentStore  # noqa: F401  (written concurrently; may be absent)
        kinds.append("segment")
    except Exception as exc:  # ImportError, or a half-written module
        skipped["segment"] = f"kernel_lib.log.segment is not importable ({type(exc).__name__}: {exc})"
    return kinds, skipped


def _offered_tiers(kind: str, tmp: Path) -> tuple[AckTier, ...]:
    store = open_store(kind, None if kind == "memory" else tmp / f"probe-{kind}", create=True)
    try:
        return tuple(store.offered_tiers)
    finally:
        store.close()


class _Stores:
    """Opens stores under the temp dir, one fresh path each, and closes them all at the end."""

    def __init__(self, tmp: Path):
        self.tmp, self.opened, self.n = tmp, [], 0

    def open(self, kind: str, label: str) -> LogStore:
        self.n += 1
        path = None if kind == "memory" else self.tmp / f"{label}-{self.n}-{kind}"
        store = open_store(kind, path, create=True)
        self.opened.append(store)
        return store

    def close(self) -> None:
        for s in self.opened:
            with contextlib.suppress(Exception):
                s.close()


def _sqlite_durability(journal_mode: str, synchronous: int) -> dict[str, Any]:
    """Whether a SQLite commit under these PRAGMAs survives power loss (sqlite.org/pragma.html)."""
    jm = str(journal_mode).lower()
    names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
    if synchronous >= 2:
        durable, why = True, ("each commit syncs the WAL" if jm == "wal" else "each commit syncs the journal "
                              "and the database file") + " before it returns"
    elif synchronous == 1 and jm != "wal":
        durable, why = True, "NORMAL in rollback mode syncs at the critical moments (older filesystems: rare risk)"
    elif synchronous == 1:
        durable, why = False, "WAL + NORMAL syncs only at checkpoints: the last commits vanish on power loss"
    else:
        durable, why = False, "synchronous=OFF never syncs: commits survive a process crash only"
    return {"journal_mode": jm, "synchronous": synchronous, "synchronous_name": names.get(synchronous, "?"),
            "fsync_durable": durable, "why": why}


def _pragmas(conn: Any) -> dict[str, Any]:
    """Read journal_mode and synchronous off a DB-API SQLite connection."""
    jm = conn.execute("PRAGMA journal_mode").fetchone()[0]
    sync = conn.execute("PRAGMA synchronous").fetchone()[0]
    return _sqlite_durability(jm, int(sync))


def _our_durability(store: LogStore, tier: AckTier, deferred: AckTier | None = None) -> dict[str, Any]:
    """Our step's acknowledgment: the barrier tier and, when evidence is deferred, its write tier
    (the connection's last ``synchronous`` would only say which of the two committed last)."""
    out: dict[str, Any] = {"tier": tier.label, "fsync_durable": tier.covers(FailureDomain.HOST_CRASH),
                           "why": f"acknowledged at the {tier.label} tier, which survives "
                                  f"{tier.survives_up_to.label.replace('_', ' ')}"}
    db = getattr(store, "_db", None)
    if isinstance(db, sqlite3.Connection):
        with contextlib.suppress(Exception):
            out["journal_mode"] = str(db.execute("PRAGMA journal_mode").fetchone()[0]).lower()
            sync = str(db.execute("PRAGMA synchronous").fetchone()[0])
            name = {"0": "OFF", "1": "NORMAL", "2": "FULL", "3": "EXTRA"}.get(sync, sync)
            # every commit runs under the connection's level; the fdatasync tier adds an fdatasync of the WAL
            out["synchronous_name"] = name + ("+fdatasync(WAL)" if tier is AckTier.FDATASYNC else "")
    if deferred is not None and deferred is not tier:
        out["why"] += (f"; the reconcilable endpoint's evidence is acknowledged at the {deferred.label} tier and made "
                       f"durable by the next intent's {tier.label} barrier (a lost one is settled by reconciliation)")
    return out


# ------------------------------------------------------------------------------------------------
# figure 1: per-append latency
# ------------------------------------------------------------------------------------------------


def _figure_append_latency(tmp: Path, kinds: list[str], plan: BenchPlan, stores: _Stores,
                           tick: Callable[[], None]) -> dict[str, Any]:
    per_round = math.ceil(plan.iterations / plan.rounds)
    events = _events("bench-append", plan.warmup + per_round * plan.rounds)
    fds: list[int] = []

    def raw(sync: bool) -> Callable[[Event], None]:
        fd = os.open(tmp / f"raw-{'fdatasync' if sync else 'write'}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        fds.append(fd)
        if sync:
            return lambda ev: (os.write(fd, ev.canonical), os.fdatasync(fd))
        return lambda ev: os.write(fd, ev.canonical)

    contenders = [Contender("raw_write", raw(False), events), Contender("raw_write_fdatasync", raw(True), events)]
    for kind in kinds:
        for tier in _offered_tiers(kind, tmp):
            store = stores.open(kind, f"append-{tier.label}")
            contenders.append(Contender(f"{kind}@{tier.label}", lambda ev, s=store, t=tier: s.append(ev, t), events))
    try:
        samples = run_rounds(contenders, rounds=plan.rounds, per_round=per_round, warmup=plan.warmup, tick=tick,
                             collect="round")
    finally:
        for fd in fds:
            os.close(fd)
    figs = {name: summarize(xs, "us") for name, xs in samples.items()}
    baselines = {k: figs.pop(k) for k in ("raw_write", "raw_write_fdatasync")}
    out_stores: dict[str, dict[str, Any]] = {}
    for key, fig in figs.items():
        kind, tier = key.split("@")
        base = _BASELINE_OF_TIER.get(tier)
        if base is not None:
            fig.update(baseline=base, ratio_median=ratio(fig["median_us"], baselines[base]["median_us"]),
                       ratio_p99=ratio(fig["p99_us"], baselines[base]["p99_us"]))
        out_stores.setdefault(kind, {})[tier] = fig
    return {"event_bytes": round(statistics.fmean(len(e.canonical) for e in events)), "warmup": plan.warmup,
            "rounds": plan.rounds, "baselines": baselines, "stores": out_stores}


# ------------------------------------------------------------------------------------------------
# figure 2: group commit vs single flush
# ------------------------------------------------------------------------------------------------


def _concurrently(workers: Sequence[Callable[[], None]]) -> float:
    """Start one thread per worker, release them together, return the wall time until all end."""
    barrier = threading.Barrier(len(workers) + 1)
    errors: list[BaseException] = []

    def body(w: Callable[[], None]) -> None:
        barrier.wait()
        try:
            w()
        except BaseException as exc:  # re-raised in the caller
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(w,), name=f"bench-writer-{i}") for i, w in enumerate(workers)]
    for t in threads:
        t.start()

    def release_and_join() -> None:
        barrier.wait()
        for t in threads:
            t.join()

    elapsed = time_call(release_and_join)
    if errors:
        raise errors[0]
    return elapsed


def _run_tasks(loop: asyncio.AbstractEventLoop, workers: Sequence[Callable[[], Awaitable[object]]]) -> float:
    """Run one task per worker on ``loop``, started together; return the wall time until all end."""
    async def all_of() -> None:
        await asyncio.gather(*(w() for w in workers))

    return time_call(lambda: loop.run_until_complete(all_of()))


def _committer_summary(stats: Any) -> dict[str, Any]:
    """A committer's :class:`~kernel_lib.log.group_commit.FlushStats` as batch size and mean eq. 2 terms."""
    acks = stats.acks
    return {"events": len(acks), "flushes": len(stats.batch_sizes),
            "mean_batch_size": statistics.fmean(stats.batch_sizes), "max_batch_size": max(stats.batch_sizes),
            "mean_queue_wait_s": statistics.fmean(a.queue_wait_s for a in acks),
            "mean_storage_s": statistics.fmean(a.storage_s for a in acks),
            "mean_wait_s": statistics.fmean(a.wait_s for a in acks),
            "amortized_storage_per_event_s": sum(stats.storage_s) / len(acks)}


class _ThreadWriters:
    """Figure 2's ``threads`` model: one OS thread per writer; group = :class:`GroupCommitter`."""

    def __init__(self, store: LogStore, tier: AckTier, flush_timer_s: float, batch_cap: int):
        self.committer = GroupCommitter(store, tier, flush_timer_s=flush_timer_s, batch_cap=batch_cap)
        self.append = {"single": lambda ev: store.append(ev, tier), "group": self.committer.append}

    def run(self, mode: str, events_per_writer: Sequence[Sequence[Event]]) -> float:
        append = self.append[mode]
        return _concurrently([lambda e=evs: [append(ev) for ev in e] for evs in events_per_writer])

    def close(self) -> None:
        self.committer.close()


class _TaskWriters:
    """Figure 2's ``asyncio`` model: one task per writer on one loop; group = :class:`AsyncGroupCommitter`."""

    def __init__(self, store: LogStore, tier: AckTier, flush_timer_s: float, batch_cap: int):
        self.store, self.tier = store, tier
        self.loop = asyncio.new_event_loop()

        async def make() -> AsyncGroupCommitter:   # the committer binds to the running loop
            return AsyncGroupCommitter(store, tier, flush_timer_s=flush_timer_s, batch_cap=batch_cap)

        self.committer = self.loop.run_until_complete(make())

    async def _single(self, events: Sequence[Event]) -> None:
        for ev in events:
            self.store.append(ev, self.tier)   # on the loop: the tasks' flushes run one after another

    async def _group(self, events: Sequence[Event]) -> None:
        for ev in events:
            await self.committer.append(ev)

    def run(self, mode: str, events_per_writer: Sequence[Sequence[Event]]) -> float:
        writer = self._group if mode == "group" else self._single
        return _run_tasks(self.loop, [lambda e=evs: writer(e) for evs in events_per_writer])

    def close(self) -> None:
        try:
            self.loop.run_until_complete(self.committer.aclose())
            self.loop.run_until_complete(self.loop.shutdown_default_executor())
        finally:
            self.loop.close()


_WRITER_MODEL_CLASSES = {"threads": _ThreadWriters, "asyncio": _TaskWriters}


def _figure_group_commit(kinds: list[str], plan: BenchPlan, stores: _Stores, flush_timer_s: float,
                         batch_cap: int, tick: Callable[[], None]) -> dict[str, Any]:
    """For each store and writer count: both writer models x (single, group), interleaved by round."""
    tier = AckTier.FDATASYNC
    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for kind in kinds:
        out[kind] = {model: [] for model in WRITER_MODELS}
        for writers in WRITER_COUNTS:
            per_writer = max(1, plan.group_events // writers)
            store = stores.open(kind, f"group-w{writers}")
            models: dict[str, Any] = {}
            try:
                contenders = []
                for model, cls in _WRITER_MODEL_CLASSES.items():
                    models[model] = cls(store, tier, flush_timer_s, batch_cap)
                    for mode in ("single", "group"):
                        evs = [_events(f"gc-{model}-{mode}-w{writers}-{w:02d}", per_writer * plan.group_rounds)
                               for w in range(writers)]
                        chunks = [[e[r * per_writer:(r + 1) * per_writer] for e in evs]
                                  for r in range(plan.group_rounds)]
                        contenders.append(Contender(f"{model}|{mode}", lambda chunk, m=models[model], md=mode:
                                                    m.run(md, chunk), chunks, self_timed=True))
                samples = run_rounds(contenders, rounds=plan.group_rounds, per_round=1, tick=tick, collect="round")
            finally:
                for m in models.values():
                    m.close()
            elapsed = {name: sum(xs) for name, xs in samples.items()}
            n = per_writer * writers * plan.group_rounds
            for model, m in models.items():
                single, group = elapsed[f"{model}|single"], elapsed[f"{model}|group"]
                summary = _committer_summary(m.committer.stats)
                out[kind][model].append({"writers": writers, "single_flush_events_per_s": n / single,
                                         "group_commit_events_per_s": n / group, "speedup": ratio(single, group),
                                         "time_per_flush_s": group / summary["flushes"], **summary})
    return {"tier": tier.label, "flush_timer_s": flush_timer_s, "batch_cap": batch_cap,
            "rounds": plan.group_rounds, "writer_models": dict(WRITER_MODELS), "stores": out}


# ------------------------------------------------------------------------------------------------
# figure 3: per-step durability overhead, ours and the peers'
# ------------------------------------------------------------------------------------------------


@dataclass
class _StepSystem:
    """A system whose run of ``n`` steps can be timed with and without durability.

    ``run(durable, n, run_id)`` performs one run (a fresh trajectory, workflow or thread); it is
    safe to call from several threads at once with distinct ``run_id`` (figure 4).
    """

    name: str
    run: Callable[[bool, int, str], None]
    durability: Callable[[], dict[str, Any]]   # read after the runs, off the system's own connection
    notes: list[str] = field(default_factory=list)
    close: Callable[[], None] = lambda: None
    #: durable acknowledgments (barriers) one step waits for, counted by a probe run (ours only)
    barriers_per_step: Callable[[], float] | None = None
    #: the group committer's batch sizes and eq. 2 terms over the durable runs (ours, figure 4)
    group_commit: Callable[[], dict[str, Any]] | None = None


_STEP_POLICY = AdmissionPolicy(grants={"grant-ci": {"noop"}})
_STEP_REPLY = ToolReply(status="completed", outcome={"passed": True}, observation_complete=True)


def _gate_steps(log: TrajectoryLog, n: int, run_id: str) -> None:
    """One run of figure 3's step: TaskStarted, then ``n`` no-op tool calls through the gate
    (coalesced admission, an endpoint declaring a status lookup), then ``gate.sync()``."""
    gate = DispatchGate(log, _STEP_POLICY, coalesce_admission=True)
    gate.start(TaskStarted(task_id=run_id, requester="bench", objective="bench", grant_ids=["grant-ci"],
                           budget_ceiling_usd=1.0))
    for i in range(n):
        gate.run_tool(ToolProposal(operation_id=f"op-{i}", attempt_id="attempt1", tool="noop",
                                   arguments={"i": i}, grant_id="grant-ci", cost_bound_usd=0.0,
                                   status_lookup=True),
                      lambda intent: _STEP_REPLY)
    gate.sync()   # the run ends: the last step's evidence is made durable too


def _our_step_system(kind: str, stores: _Stores,
                     group_commit: "Callable[[LogStore, AckTier], GroupCommitter | LeaderGroupCommitter] | None" = None,
                     suffix: str = "") -> _StepSystem:
    """Our durable step: the dispatch gate's durable path.

    ``group_commit(store, tier)``: makes the committer (:class:`GroupCommitter` or
    :class:`LeaderGroupCommitter`) that every durable run shares (figure 4); without it each run
    acknowledges through the store itself (figure 3). ``suffix`` is appended to the system's
    name (``ours/segment+leader``).
    """
    durable_store = stores.open(kind, "steps-durable")
    memory_store = stores.open("memory", "steps-memory")
    tier = choose_tier(durable_store, FailureDomain.HOST_CRASH)
    committer = group_commit(durable_store, tier) if group_commit is not None else None
    how = ("DispatchGate.run_tool with coalesce_admission=True: [Authorized, BudgetReserved, ToolIntent] "
           "as one durable batch, dispatch-time recheck, no-op dispatch; the no-op endpoint declares a status "
           "lookup by operation id, so its ToolResult is acknowledged at the write tier and made durable by the "
           "next intent's barrier (and by gate.sync() at the end of the run)")

    steps = _gate_steps

    def run(durable: bool, n: int, run_id: str) -> None:
        if durable:
            log = TrajectoryLog(durable_store, f"step-{run_id}", must_survive=FailureDomain.HOST_CRASH,
                                committer=committer)
        else:
            log = TrajectoryLog(memory_store, f"step-{run_id}", must_survive=FailureDomain.NONE)
        steps(log, n, run_id)

    def barriers_per_step(extra: int = 4) -> float:
        acks = []
        for n in (1, 1 + extra):
            log = TrajectoryLog(durable_store, f"probe-barriers-{n}", must_survive=FailureDomain.HOST_CRASH)
            steps(log, n, f"probe-barriers-{n}")
            acks.append(log.barriers)
        return (acks[1] - acks[0]) / extra

    notes = [how, "non-durable: the same step on MemoryStore (tier memory)"]
    if committer is not None:
        if isinstance(committer, LeaderGroupCommitter):
            how_flushed = (f"batch cap {committer.batch_cap}; no flusher thread: the first writer to find no flush "
                           "in progress flushes everything queued, then hands the lead to the next waiting writer")
        else:
            how_flushed = (f"flush timer {committer.flush_timer_s * 1e3:g} ms, batch cap {committer.batch_cap}; "
                           "a flusher thread")
        notes.insert(1, f"every thread's TrajectoryLog on ONE {kind} store through ONE {type(committer).__name__} "
                        f"({how_flushed})")

    def close() -> None:
        if committer is not None:
            committer.close()

    deferred = TrajectoryLog(durable_store, "probe-tier", must_survive=FailureDomain.HOST_CRASH).deferred_tier
    return _StepSystem(f"ours/{kind}{suffix}", run, lambda: _our_durability(durable_store, tier, deferred), notes=notes,
                       close=close,
                       barriers_per_step=barriers_per_step,
                       group_commit=(lambda: _committer_summary(committer.stats)) if committer is not None else None)


def _sqlite_engine_system(tmp: Path) -> _StepSystem:
    """SQLite alone doing what ``ours/sqlite`` asks of it per step, with none of our Python: the
    log's own schema (:data:`kernel_lib.log.sqlite.SCHEMA_SQL`, WAL, ``synchronous=NORMAL``), one
    autocommit INSERT of one ~700-byte row (the previous step's evidence, write tier), then one
    transaction of three rows (the intent batch) and an ``fdatasync`` of the ``-wal`` file (the
    barrier). Non-durable: the same loop writing nothing. Its overhead is the floor that the
    SQLite engine sets for our SQLite store on this disk, measured in the same rounds."""
    from kernel_lib.log.sqlite import SCHEMA_SQL

    path = tmp / "engine-floor.sqlite"
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(SCHEMA_SQL)
    body = _events("engine-floor", 1)[0].canonical
    digest_hex = "0" * 64
    insert = "INSERT INTO events (trajectory_id, sequence_number, event_id, digest, body) VALUES (?,?,?,?,?)"
    fds: list[int] = []

    def run(durable: bool, n: int, run_id: str) -> None:
        if not durable:   # the non-durable step writes nothing
            return
        if not fds:
            conn.execute(insert, ("engine-open", 1, "engine-open", digest_hex, body))   # the -wal exists now
            fds.append(os.open(f"{path}-wal", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)))
        seq = 0
        for _i in range(n):
            seq += 1
            conn.execute(insert, (run_id, seq, f"{run_id}/{seq}", digest_hex, body))
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(insert, [(run_id, seq + k, f"{run_id}/{seq + k}", digest_hex, body) for k in (1, 2, 3)])
            conn.execute("COMMIT")
            seq += 3
            os.fdatasync(fds[0])

    def close() -> None:
        for fd in fds:
            os.close(fd)
        conn.close()

    def durability() -> dict[str, Any]:
        out = _pragmas(conn)
        out.update(synchronous_name=out["synchronous_name"] + "+fdatasync(WAL)", fsync_durable=True,
                   why="each step ends with an fdatasync of the WAL, as our fdatasync tier does")
        return out

    return _StepSystem(ENGINE_FLOOR, run, durability, close=close, notes=[
                           "the SQLite engine alone, no kernel_lib code: the log's schema, per step one autocommit "
                           "INSERT of one row then a BEGIN IMMEDIATE transaction of three rows and an fdatasync of "
                           "the -wal file (what ours/sqlite asks of SQLite per step)",
                           "non-durable: the same loop, writing nothing"])


def _sqlite_engine_in_step_system(tmp: Path) -> _StepSystem:
    """The engine floor's SQLite work done inside our gate's step: the gate runs its step on a
    MemoryStore whose appends also hand SQLite exactly what :func:`_sqlite_engine_system` does (the
    log's schema, WAL, ``synchronous=NORMAL``; the intent batch as one ``BEGIN IMMEDIATE``
    transaction of plain INSERTs and an ``fdatasync`` of the ``-wal`` file, the evidence as one
    autocommit INSERT), with none of our store's code (no checks, no ``INSERT ... SELECT``, no
    ``PRAGMA data_version``, no cache). Non-durable: the same step on a plain MemoryStore. Its
    overhead is what SQLite and the barrier cost when they run between the gate's own work (caches
    and the CPU go cold across the step and the barrier's sleep) rather than in a tight loop, so
    the part of ``ours/sqlite`` above it is our store's code; the part between
    :data:`ENGINE_FLOOR` and it is the price of running SQLite inside a step at all."""
    from kernel_lib.log.memory import MemoryStore
    from kernel_lib.log.sqlite import SCHEMA_SQL

    path = tmp / "engine-in-step.sqlite"
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(SCHEMA_SQL)
    insert = "INSERT INTO events (trajectory_id, sequence_number, event_id, digest, body) VALUES (?,?,?,?,?)"
    conn.execute(insert, ("engine-open", 1, "engine-open", "0" * 64, b"{}"))   # the -wal exists now
    wal_fd = os.open(f"{path}-wal", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))

    class _EngineMemoryStore(MemoryStore):
        def append_batch(self, events: Sequence[Event], tier: Any) -> list:
            out = super().append_batch(events, tier)
            rows = [(e.trajectory_id, e.sequence_number, e.event_id, e.digest, e.canonical) for e in events]
            if any(e.event_type == "ToolIntent" for e in events):   # the intent batch: commit, then barrier
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(insert, rows)
                conn.execute("COMMIT")
                os.fdatasync(wal_fd)
            elif len(rows) == 1:   # the evidence (and TaskStarted): one autocommit INSERT
                conn.execute(insert, rows[0])
            else:
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(insert, rows)
                conn.execute("COMMIT")
            return out

    engine_store, memory_store = _EngineMemoryStore(), MemoryStore()

    def run(durable: bool, n: int, run_id: str) -> None:
        store = engine_store if durable else memory_store
        _gate_steps(TrajectoryLog(store, f"step-{run_id}", must_survive=FailureDomain.NONE), n, run_id)

    def close() -> None:
        os.close(wal_fd)
        conn.close()

    def durability() -> dict[str, Any]:
        out = _pragmas(conn)
        out.update(synchronous_name=out["synchronous_name"] + "+fdatasync(WAL)", fsync_durable=True,
                   why="each step's intent batch ends with an fdatasync of the WAL, as our fdatasync tier does")
        return out

    return _StepSystem(ENGINE_IN_STEP, run, durability, close=close, notes=[
                           f"the gate's step on a MemoryStore that also hands SQLite what {ENGINE_FLOOR} does (intent "
                           "batch: a BEGIN IMMEDIATE transaction of plain INSERTs then an fdatasync of the -wal file; "
                           "evidence: one autocommit INSERT), no code of our SQLite store",
                           "non-durable: the same step on a plain MemoryStore"])


def _barrier_in_step_system(tmp: Path) -> _StepSystem:
    """One raw barrier per step, inside our gate's step, with no store at all: the gate runs its
    step on a MemoryStore whose appends also write the events' bytes in place into a file
    preallocated with zeros (a barrier flushes data, never a grown size), and whose intent batch
    then waits for one ``os.fdatasync`` of it (the evidence is written and
    rides the next barrier, as in ``ours/KIND``). Non-durable: the same step on a plain
    MemoryStore. Its overhead is what one blocking barrier costs *in context*: the fdatasync
    itself plus what the step's own work loses to the wait (on a VM whose idle vCPU halts, the
    work after every blocking wait runs on cold caches). No design with one barrier per step can
    go below it on this machine, whatever its store."""
    from kernel_lib.log.memory import MemoryStore

    # the file is preallocated with written zeros and written in place (wrapping at its end), so a
    # barrier flushes data only, never a grown size: the cheapest barrier this disk offers (the
    # segment store does the same; an appending file would pay a metadata flush at every barrier)
    size = _BARRIER_FLOOR_FILE_BYTES
    fd = os.open(tmp / "barrier-in-step.bin", os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    zeros = bytes(1 << 20)
    for at in range(0, size, len(zeros)):
        os.pwrite(fd, zeros, at)
    os.fsync(fd)
    offset = [0]

    class _BarrierMemoryStore(MemoryStore):
        def append_batch(self, events: Sequence[Event], tier: Any) -> list:
            out = super().append_batch(events, tier)
            data = b"".join(e.canonical for e in events)
            if offset[0] + len(data) > size:
                offset[0] = 0
            offset[0] += os.pwrite(fd, data, offset[0])
            if any(e.event_type == "ToolIntent" for e in events):   # the intent batch waits for its barrier
                os.fdatasync(fd)
            return out

    barrier_store, memory_store = _BarrierMemoryStore(), MemoryStore()

    def run(durable: bool, n: int, run_id: str) -> None:
        store = barrier_store if durable else memory_store
        _gate_steps(TrajectoryLog(store, f"step-{run_id}", must_survive=FailureDomain.NONE), n, run_id)

    def durability() -> dict[str, Any]:
        return {"tier": "fdatasync", "fsync_durable": True,
                "why": "each step's intent batch waits for one fdatasync of the preallocated file its bytes were "
                       "written to"}

    return _StepSystem(BARRIER_IN_STEP, run, durability, close=lambda: os.close(fd), notes=[
                           "the gate's step on a MemoryStore that also writes every batch's bytes in place into a "
                           "preallocated file and waits for one os.fdatasync of it after the intent batch: one "
                           "barrier per step, no store code",
                           "non-durable: the same step on a plain MemoryStore"])


def _langgraph_system(tmp: Path) -> _StepSystem:
    from typing import TypedDict

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    class State(TypedDict):
        i: int

    conn = sqlite3.connect(str(tmp / "langgraph.sqlite"), check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    graphs: dict[tuple[bool, int], Any] = {}

    def graph(durable: bool, n: int) -> Any:
        if (durable, n) not in graphs:
            g = StateGraph(State)
            prev = START
            for k in range(n):
                g.add_node(f"n{k}", lambda s: {"i": s["i"] + 1})
                g.add_edge(prev, f"n{k}")
                prev = f"n{k}"
            g.add_edge(prev, END)
            graphs[(durable, n)] = g.compile(checkpointer=saver if durable else None)
        return graphs[(durable, n)]

    def run(durable: bool, n: int, run_id: str) -> None:
        kw = {"durability": "sync"} if durable else {}
        graph(durable, n).invoke({"i": 0}, config={"configurable": {"thread_id": run_id}}, **kw)

    def barriers_per_step(extra: int = 4) -> float:
        """COMMITs on the SqliteSaver's own connection per step (each a WAL sync under FULL)."""
        commits = []
        for n in (1, 1 + extra):
            seen: list[str] = []
            conn.set_trace_callback(seen.append)
            try:
                run(True, n, f"probe-barriers-{n}")
            finally:
                conn.set_trace_callback(None)
            commits.append(sum(1 for q in seen if q.lstrip().upper().startswith("COMMIT")))
        return (commits[1] - commits[0]) / extra

    return _StepSystem("langgraph", run, lambda: _pragmas(conn), close=conn.close,
                       barriers_per_step=barriers_per_step, notes=[
        "durable: chain of no-op nodes compiled with SqliteSaver, invoke(durability='sync'), fresh thread_id",
        "non-durable: the same graph compiled without a checkpointer",
        "PRAGMAs read on the SqliteSaver's own connection after setup()"])


def _dbos_system(tmp: Path) -> _StepSystem:
    import dbos._dbos as dbos_core
    from dbos import DBOS

    if dbos_core._dbos_global_instance is not None:
        raise KernelError("a DBOS instance already exists in this process; not replacing it")
    DBOS(config={"name": "kernel-lib-bench", "system_database_url": f"sqlite:///{tmp / 'dbos.sqlite'}",
                 "log_level": "WARNING"})
    try:
        @DBOS.step()
        def noop_step(i: int) -> int:
            return i

        def body(n: int) -> int:
            for i in range(n):
                noop_step(i)
            return n

        workflow = DBOS.workflow()(body)
        DBOS.launch()
    except BaseException:
        DBOS.destroy(destroy_registry=True)
        raise

    def run(durable: bool, n: int, run_id: str) -> None:
        (workflow if durable else body)(n)

    def barriers_per_step(extra: int = 4) -> float:
        """Commits DBOS's system-database engine reports per step (SQLAlchemy ``commit`` events)."""
        import sqlalchemy as sa
        engine = dbos_core._dbos_global_instance._sys_db.engine
        commits = []
        for n in (1, 1 + extra):
            seen = [0]

            def count(conn: Any, box: list[int] = seen) -> None:
                box[0] += 1
            sa.event.listen(engine, "commit", count)
            try:
                run(True, n, f"probe-barriers-{n}")
            finally:
                sa.event.remove(engine, "commit", count)
            commits.append(seen[0])
        return (commits[1] - commits[0]) / extra

    def durability() -> dict[str, Any]:
        import sqlalchemy as sa
        with dbos_core._dbos_global_instance._sys_db.engine.connect() as c:
            return _sqlite_durability(c.execute(sa.text("PRAGMA journal_mode")).scalar(),
                                      int(c.execute(sa.text("PRAGMA synchronous")).scalar()))

    return _StepSystem("dbos", run, durability, close=lambda: DBOS.destroy(destroy_registry=True),
                       barriers_per_step=barriers_per_step, notes=[
        "durable: @DBOS.workflow running n @DBOS.step no-op steps, SQLite system database in the temp dir",
        "non-durable: DBOS cannot run a workflow without its system database; measured instead the same "
        "workflow body as a plain function, whose @DBOS.step calls then run as plain functions "
        "(DBOS's behaviour outside a workflow)",
        "PRAGMAs read on a connection of DBOS's own system-database engine (DBOS sets neither)"])


def _peer_factories(tmp: Path) -> dict[str, tuple[Callable[[], _StepSystem], str | None]]:
    """Each peer's constructor, or None with the reason it cannot run."""
    need = {"langgraph": ("langgraph", "langgraph.checkpoint.sqlite"), "dbos": ("dbos",)}
    out = {}
    for name, factory in (("langgraph", lambda: _langgraph_system(tmp)), ("dbos", lambda: _dbos_system(tmp))):
        missing = []
        for mod in need[name]:
            try:
                found = importlib.util.find_spec(mod) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                missing.append(mod)
        out[name] = (factory, f"not installed ({', '.join(missing)}); `make peers` installs it" if missing else None)
    return out


def _figure_steps(systems: list[_StepSystem], plan: BenchPlan, tick: Callable[[], None], *,
                  trajectories: int = 1) -> dict[str, Any]:
    """Per-step time of each system, durable and not: the slope between runs of 1 and 1 + S steps.

    ``trajectories`` = 1: one run at a time (figure 3). More: ``trajectories`` threads run one
    trajectory each, released together, and a sample is the wall time until all end (figure 4);
    per-step time is then that slope divided by ``trajectories``.
    """
    lo, hi = 1, 1 + plan.step_count
    fleet = trajectories > 1
    runs, warmup = (plan.fleet_runs, plan.fleet_warmup) if fleet else (plan.step_runs, plan.step_warmup)
    contenders = []
    for sys_ in systems:
        for durable in (True, False):
            for n in (lo, hi):
                key = f"{sys_.name}|{'durable' if durable else 'plain'}|{n}"
                run_ids = [f"{'fleet-' if fleet else ''}{key}|{i}".replace("|", "-").replace("/", "-")
                           for i in range(warmup + runs)]
                if fleet:
                    op = (lambda rid, s=sys_, d=durable, k=n: _concurrently(
                        [lambda j=j: s.run(d, k, f"{rid}-t{j:02d}") for j in range(trajectories)]))
                else:
                    op = lambda rid, s=sys_, d=durable, k=n: s.run(d, k, rid)  # noqa: E731
                # a fleet run is self-timed (its threads start outside the measurement) and records CPU
                contenders.append(Contender(key, op, run_ids, self_timed=fleet, cpu=fleet))
    per_round, rounds = round_plan(runs, runs if fleet else plan.rounds)   # a fleet run is long: one a round
    run_rounds(contenders, rounds=rounds, per_round=per_round, warmup=warmup, tick=tick, collect="round")
    med = {c.name: median(c.samples_s) for c in contenders}
    cpu = {c.name: median(c.cpu_samples_s) for c in contenders if c.cpu_samples_s}

    def slope(m: dict[str, float], name: str, mode: str) -> float:   # µs per step
        return (m[f"{name}|{mode}|{hi}"] - m[f"{name}|{mode}|{lo}"]) / ((hi - lo) * trajectories) * 1e6

    out = {}
    for sys_ in systems:
        per_step = {mode: slope(med, sys_.name, mode) for mode in ("durable", "plain")}
        out[sys_.name] = {
            "durable_step_us": per_step["durable"], "non_durable_step_us": per_step["plain"],
            "durability_overhead_us": per_step["durable"] - per_step["plain"],
            "run_us": {f"{mode}_{n}_steps": med[f"{sys_.name}|{mode}|{n}"] * 1e6
                       for mode in ("durable", "plain") for n in (lo, hi)},
            "durability": sys_.durability(), "notes": sys_.notes}
        if cpu:
            cpu_step = {mode: slope(cpu, sys_.name, mode) for mode in ("durable", "plain")}
            out[sys_.name].update(durable_cpu_us_per_step=cpu_step["durable"],
                                  non_durable_cpu_us_per_step=cpu_step["plain"],
                                  durability_overhead_cpu_us=cpu_step["durable"] - cpu_step["plain"])
        if sys_.barriers_per_step is not None:
            try:
                out[sys_.name]["barriers_per_step"] = sys_.barriers_per_step()
            except Exception as exc:  # noqa: BLE001 - a peer's probe that fails is reported, not fatal
                out[sys_.name]["barriers_per_step"] = None
                out[sys_.name]["notes"] = [*sys_.notes, f"barriers per step not counted: {type(exc).__name__}: {exc}"]
        if sys_.group_commit is not None:
            out[sys_.name]["group_commit"] = sys_.group_commit()
    note = "all systems' runs are interleaved in the same rounds"
    if any(sys_.name == "dbos" for sys_ in systems):
        note += "; DBOS stays launched throughout, so its background threads add the same noise to every system"
    if fleet:
        note = (f"a run = {trajectories} threads, one trajectory each, released together; run_us is the wall time "
                f"until all end; per-step = slope / {trajectories}; CPU = the process's CPU time (all threads, "
                "every core) per step, same slope: CPU ≈ wall means the fleet is CPU-bound (one GIL), so what "
                "durability adds there is CPU, not waiting; " + note)
    return {"trajectories": trajectories, "steps_short_run": lo, "steps_long_run": hi, "runs": per_round * rounds,
            "systems": out, "note": note}


def _compare_to_peers(steps: dict[str, Any], raw_fdatasync_us: float | None = None) -> dict[str, Any]:
    """Ours / the faster peer, per metric, and for the overhead also ours / :data:`TARGET_PEER`'s
    (``target_peer``, ``ours_over_target_peer``; the faster peer stands in when it was not
    measured). With ``raw_fdatasync_us`` (one trajectory, figure 3), also the floor of the
    overhead ratio: barriers per step x raw fdatasync / the target peer's overhead."""
    systems = steps["systems"]
    peers = {k: v for k, v in systems.items() if not k.startswith("ours/") and k not in FLOORS}
    ours = {k: v for k, v in systems.items() if k.startswith("ours/")}
    out: dict[str, Any] = {}
    for metric in ("durable_step_us", "durability_overhead_us"):
        if not peers:
            break
        best = min(peers, key=lambda k: peers[k][metric])
        out[metric] = {"faster_peer": best, "faster_peer_us": peers[best][metric],
                       "ours_over_faster_peer": {k: ratio(v[metric], peers[best][metric]) for k, v in ours.items()}}
    over = out.get("durability_overhead_us")
    if over:
        target = TARGET_PEER if TARGET_PEER in peers else over["faster_peer"]
        peer_over = peers[target]["durability_overhead_us"]
        over.update(target_peer=target, target_peer_us=peer_over,
                    ours_over_target_peer={k: ratio(v["durability_overhead_us"], peer_over) for k, v in ours.items()})
    if over and raw_fdatasync_us:
        peer_us = over["target_peer_us"]
        over["floor"] = {
            "raw_fdatasync_median_us": raw_fdatasync_us, "target_us": TARGET_OVERHEAD_RATIO * peer_us,
            "one_barrier_ratio": ratio(raw_fdatasync_us, peer_us),
            "ours": {k: {"barriers_per_step": v["barriers_per_step"],
                         "floor_us": v["barriers_per_step"] * raw_fdatasync_us,
                         "floor_ratio": ratio(v["barriers_per_step"] * raw_fdatasync_us, peer_us)}
                     for k, v in ours.items() if v.get("barriers_per_step") is not None}}
    engine = systems.get(ENGINE_FLOOR)
    if over and engine:   # what SQLite itself costs per step: the floor of ours/sqlite on this disk
        over.setdefault("floor", {})["sqlite_engine"] = {
            "overhead_us": engine["durability_overhead_us"],
            "ratio": ratio(engine["durability_overhead_us"], over["target_peer_us"])}
    barrier = systems.get(BARRIER_IN_STEP)
    if over and barrier:   # one raw barrier inside the step: the floor of any one-barrier design in context
        over.setdefault("floor", {})["barrier_in_step"] = {
            "overhead_us": barrier["durability_overhead_us"],
            "ratio": ratio(barrier["durability_overhead_us"], over["target_peer_us"])}
    in_step = systems.get(ENGINE_IN_STEP)
    if over and in_step:   # the same SQLite work inside the gate's step: the floor of ours/sqlite in context
        over.setdefault("floor", {})["sqlite_engine_in_step"] = {
            "overhead_us": in_step["durability_overhead_us"],
            "ratio": ratio(in_step["durability_overhead_us"], over["target_peer_us"])}
    return out


# ------------------------------------------------------------------------------------------------
# targets
# ------------------------------------------------------------------------------------------------


def _overhead_targets(figure: int, fleet: bool, comparison: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows "ours / LangGraph's per-step durability overhead <= limit" of one step figure: 0.35
    for one trajectory (:data:`TARGET_OVERHEAD_RATIO`), 0.15 for the fleet
    (:data:`TARGET_FLEET_OVERHEAD_RATIO`)."""
    scope = "fleet " if fleet else ""
    limit = TARGET_FLEET_OVERHEAD_RATIO if fleet else TARGET_OVERHEAD_RATIO
    over = comparison.get("durability_overhead_us")
    if not over:
        return [{"figure": figure, "name": f"{scope}per-step durability overhead / {TARGET_PEER}'s", "measured": None,
                 "limit": f"<= {limit}", "passed": None,
                 "detail": "not evaluated: no peer was measured"}]
    out = []
    floor = over.get("floor", {})
    for ours, over_peer in over["ours_over_target_peer"].items():
        row = {"figure": figure, "name": f"{ours} {scope}per-step durability overhead / {over['target_peer']}'s {scope}"
                                         "overhead",
               "measured": over_peer, "limit": f"<= {limit}",
               "passed": over_peer <= limit}
        if over["target_peer"] != TARGET_PEER:
            row["detail"] = f"{TARGET_PEER} was not measured; compared with {over['target_peer']} instead"
        f = floor.get("ours", {}).get(ours)
        if f:
            reachable = f["floor_ratio"] <= limit
            row["floor_ratio"] = f["floor_ratio"]
            row["detail"] = (f"floor {f['floor_ratio']:.2f} = {_plural(f['barriers_per_step'], 'barrier')}/step x "
                             f"{floor['raw_fdatasync_median_us']:.0f} µs raw fdatasync / "
                             f"{over['target_peer_us']:.0f} µs: " + ("the target is above the floor" if reachable else
                                                                  "unreachable for one trajectory on this disk; see "
                                                                  "the fleet row"))
        barrier = floor.get("barrier_in_step")
        if barrier:
            _add_in_context_floor(row, "barrier_in_step_floor_ratio", barrier, limit,
                                  f"one raw barrier inside the gate's step ({BARRIER_IN_STEP}, no store)",
                                  "this store adds", "no design waiting for one barrier per step")
        engine = floor.get("sqlite_engine")
        if engine and ours == "ours/sqlite":
            row["engine_floor_ratio"] = engine["ratio"]
            row["detail"] = row.get("detail", "") + (
                f"; SQLite alone doing this step's two commits and one WAL fdatasync ({ENGINE_FLOOR}, no code of "
                f"ours) costs {engine['overhead_us']:.0f} µs = {engine['ratio']:.2f} of {over['target_peer']}'s "
                f"overhead, so ours/sqlite's own code adds {row['measured'] - engine['ratio']:.2f}")
        in_step = floor.get("sqlite_engine_in_step")
        if in_step and ours == "ours/sqlite":
            _add_in_context_floor(row, "engine_in_step_floor_ratio", in_step, limit,
                                  f"the same SQLite work inside the gate's step ({ENGINE_IN_STEP}, still no code of "
                                  "our store)", "our store adds",
                                  "no store doing these two SQLite commits and one WAL fdatasync per step")
        out.append(row)
    return out


def _add_in_context_floor(row: dict[str, Any], key: str, floor: dict[str, Any], limit: float, what: str,
                          adds: str, who_cannot: str) -> None:
    """Record an in-context floor (its overhead in µs and its ratio to the peer's) on a target
    row: the ratio under ``key``, and in the detail what it costs, what the row adds above it,
    and whether the floor itself is above the limit (then ``who_cannot`` meets the target)."""
    row[key] = floor["ratio"]
    row["detail"] = row.get("detail", "") + (
        f"; {what} costs {floor['overhead_us']:.0f} µs = {floor['ratio']:.2f}, so measured in context {adds} "
        f"{row['measured'] - floor['ratio']:+.2f}" + (
            f"; that floor is above the limit: {who_cannot} meets the target for one trajectory on this machine"
            if floor["ratio"] > limit else ""))


def _targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for kind, tiers in result["append_latency"]["stores"].items():
        fig = tiers.get("fdatasync")
        if fig:
            out.append({"figure": 1, "name": f"{kind}@fdatasync append median / raw write+fdatasync median",
                        "measured": fig["ratio_median"], "limit": f"<= {TARGET_FDATASYNC_RATIO}",
                        "passed": fig["ratio_median"] <= TARGET_FDATASYNC_RATIO})
    for kind, models in result["group_commit"]["stores"].items():
        for model, rows in models.items():
            row = next(r for r in rows if r["writers"] == max(WRITER_COUNTS))
            t = {"figure": 2, "name": f"{kind}, {model}: group commit / single flush events/s at "
                                     f"{row['writers']} writers",
                 "measured": row["speedup"], "limit": f">= {TARGET_GROUP_SPEEDUP}",
                 "passed": row["speedup"] >= TARGET_GROUP_SPEEDUP}
            if not t["passed"]:
                cycle_us, storage_us = row["time_per_flush_s"] * 1e6, row["mean_storage_s"] * 1e6
                t["detail"] = (f"each flush cycle took {cycle_us:,.0f} µs, of which {storage_us:,.0f} µs in the store "
                               f"and {max(cycle_us - storage_us, 0):,.0f} µs outside it (waking "
                               f"{row['writers']} writers and taking their next events"
                               + ("; every wake-up is an OS thread hand-off" if model == "threads" else "") + ")")
            out.append(t)
    out += _overhead_targets(3, False, result["per_step"]["comparison"])
    out += _overhead_targets(4, True, result["fleet"]["comparison"])
    return out


# ------------------------------------------------------------------------------------------------
# the benchmark
# ------------------------------------------------------------------------------------------------


def run_append_bench(*, dir: str | os.PathLike | None = None, iterations: int | None = None, quick: bool = False,
                     peers: bool = True, flush_timer_s: float = DEFAULT_FLUSH_TIMER_S,
                     batch_cap: int = DEFAULT_BATCH_CAP, progress: bool | None = None) -> dict[str, Any]:
    """Run every figure of ``bench append`` once, in one temporary directory, and return them.

    Args:
        dir: parent of the temporary directory (default: the current directory, so the figures
            are measured on the project's filesystem, not on a RAM disk). Removed afterwards.
        iterations: measured appends per contender in figure 1, 1..:data:`MAX_ITERATIONS` (the other
            figures scale with it).
        quick: few iterations (tests, smoke runs).
        peers: measure DBOS and LangGraph when importable.
        flush_timer_s: the group committers' flush timer in figures 2 and 4 (s).
        batch_cap: the group committers' batch cap in figures 2 and 4.
        progress: show a tqdm bar on stderr (default: when stderr is a terminal).

    Returns:
        ``{"machine", "config", "append_latency", "group_commit", "per_step", "fleet", "targets"}``;
        latencies in µs, throughput in events/s, eq. 2 terms in s. See the module docstring.

    Raises:
        KernelError: a parameter out of range; StoreError from a store that fails.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:   # called from a running loop (Jupyter, marimo): figure 2's asyncio writers need their own
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="bench-append") as pool:
            return pool.submit(run_append_bench, dir=dir, iterations=iterations, quick=quick, peers=peers,
                               flush_timer_s=flush_timer_s, batch_cap=batch_cap, progress=progress).result()
    plan = BenchPlan.make(iterations, quick)
    if not math.isfinite(flush_timer_s) or flush_timer_s < 0 or isinstance(batch_cap, bool) \
            or not isinstance(batch_cap, int) or batch_cap < 1:
        raise KernelError(f"need a finite flush timer >= 0 and an integer batch cap >= 1, got {flush_timer_s} s, "
                          f"{batch_cap}")
    scratch = MeasuredDir(dir, prefix="bench-append-")
    tmp = scratch.path
    stores = _Stores(tmp)
    systems: list[_StepSystem] = []
    bar = None
    try:
        kinds, skipped_stores = _store_kinds()
        durable_kinds = [k for k in kinds if k != "memory"]
        peer_factories = _peer_factories(tmp) if peers else {}
        units = (rounds_ticks(plan.rounds) + len(durable_kinds) * len(WRITER_COUNTS) * rounds_ticks(plan.group_rounds)
                 + rounds_ticks(round_plan(plan.step_runs, plan.rounds)[1]) + rounds_ticks(plan.fleet_runs))
        bar = progress_bar(units, enabled=progress, factory=tqdm)
        tick = lambda: bar.update(1)  # noqa: E731
        result: dict[str, Any] = {"machine": machine_info(tmp)}
        result["config"] = {"quick": quick, **dataclasses.asdict(plan), "fleet_size": FLEET_SIZE,
                            "peers_requested": peers, "stores": kinds, "skipped_stores": skipped_stores}
        bar.set_description("per-append latency")
        result["append_latency"] = _figure_append_latency(tmp, kinds, plan, stores, tick)
        bar.set_description("group commit")
        result["group_commit"] = _figure_group_commit(durable_kinds, plan, stores, flush_timer_s, batch_cap, tick)
        skipped_peers: dict[str, str] = {}
        with contextlib.redirect_stdout(sys.stderr):   # keep --json output clean of peers' prints
            peer_systems = []
            for name, (factory, why_not) in peer_factories.items():
                if why_not:
                    skipped_peers[name] = why_not
                    continue
                try:
                    peer_systems.append(factory())
                except Exception as exc:
                    skipped_peers[name] = f"could not start: {type(exc).__name__}: {exc}"
            systems += peer_systems
            single = [_our_step_system(k, stores) for k in durable_kinds]
            single.append(_barrier_in_step_system(tmp))   # one barrier inside the step: every store's floor
            if "sqlite" in durable_kinds and peer_systems:   # the SQLite engine's floors
                single += [_sqlite_engine_system(tmp), _sqlite_engine_in_step_system(tmp)]
            fleet = [_our_step_system(k, stores, lambda store, tier: GroupCommitter(
                store, tier, flush_timer_s=flush_timer_s, batch_cap=batch_cap)) for k in durable_kinds]
            fleet += [_our_step_system(k, stores, lambda store, tier: LeaderGroupCommitter(
                store, tier, batch_cap=batch_cap), suffix=LEADER_SUFFIX) for k in durable_kinds]
            systems += single + fleet
            bar.set_description("per-step overhead")
            steps = _figure_steps(single + peer_systems, plan, tick)
            bar.set_description("fleet per-step overhead")
            fleet_steps = _figure_steps(fleet + peer_systems, plan, tick, trajectories=FLEET_SIZE)
        if not peers:
            skipped_peers = {"dbos": "--no-peers", "langgraph": "--no-peers"}
        raw_fdatasync_us = result["append_latency"]["baselines"]["raw_write_fdatasync"]["median_us"]
        for fig, raw in ((steps, raw_fdatasync_us), (fleet_steps, None)):
            fig["skipped_peers"] = skipped_peers
            fig["comparison"] = _compare_to_peers(fig, raw)
        result["per_step"], result["fleet"] = steps, fleet_steps
        result["targets"] = _targets(result)
        return result
    finally:
        if bar is not None:
            bar.close()
        for s in systems:
            with contextlib.suppress(Exception), contextlib.redirect_stdout(sys.stderr):
                s.close()
        stores.close()
        scratch.remove()


# ------------------------------------------------------------------------------------------------
# output
# ------------------------------------------------------------------------------------------------


def _plural(n: float, noun: str) -> str:
    """``n noun`` with the noun's plural unless n is 1 (a whole float prints without ``.0``)."""
    return f"{int(n) if float(n).is_integer() else n} {noun}" + ("" if n == 1 else "s")


def _fmt(x: float | None, nd: int = 1) -> str:
    return "-" if x is None else f"{x:,.{nd}f}"


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def _format_steps(ps: dict[str, Any], title: str) -> list[str]:
    """The table and notes of a per-step figure (3: one trajectory, 4: the fleet)."""
    out = ["", f"{title} (slope between runs of {ps['steps_short_run']} and {ps['steps_long_run']} steps, "
               f"median of {ps['runs']} runs each, interleaved)"]
    with_cpu = any("durable_cpu_us_per_step" in s for s in ps["systems"].values())
    rows = []
    for name, s in ps["systems"].items():
        d, g = s["durability"], s.get("group_commit")
        ack = (f"{d['journal_mode']}/synchronous={d['synchronous_name']}" if "journal_mode" in d
               else d.get("tier", "?"))
        cpu = [_fmt(s.get("durable_cpu_us_per_step")), _fmt(s.get("durability_overhead_cpu_us"))] if with_cpu else []
        rows.append([name, _fmt(s["durable_step_us"]), _fmt(s["non_durable_step_us"]),
                     _fmt(s["durability_overhead_us"]), *cpu, _fmt(s.get("barriers_per_step"), 0),
                     _fmt(g and g["mean_batch_size"], 2),
                     _fmt(g and g["mean_queue_wait_s"] * 1e6, 0), _fmt(g and g["mean_storage_s"] * 1e6, 0),
                     ack, "yes" if d.get("fsync_durable") else "NO"])
    out.append(_table(rows, ["system", "durable µs/step", "non-durable µs/step", "overhead µs/step",
                             *(["durable CPU µs/step", "overhead CPU µs/step"] if with_cpu else []), "barriers/step",
                             "mean batch", "queue_wait µs", "storage µs", "acknowledgment", "fsync-durable"]))
    for name, s in ps["systems"].items():
        out.append(f"  {name}: " + "; ".join([*s["notes"], s["durability"].get("why", "")]))
    out.append(f"  note: {ps['note']}")
    for name, why in ps["skipped_peers"].items():
        out.append(f"  skipped {name}: {why}")
    for metric, label in (("durable_step_us", "per-step time"),
                          ("durability_overhead_us", "per-step durability overhead")):
        c = ps["comparison"].get(metric)
        if c:
            ratios = ", ".join(f"{k} {v:.2f}×" for k, v in c["ours_over_faster_peer"].items())
            out.append(f"  {label}: faster peer {c['faster_peer']} ({_fmt(c['faster_peer_us'])} µs); "
                       f"ours / it: {ratios}")
    floor = (ps["comparison"].get("durability_overhead_us") or {}).get("floor")
    if floor:
        peer = ps["comparison"]["durability_overhead_us"]["target_peer"]
        out.append(f"  floor: a write-ahead step waits for at least one durable barrier before it dispatches; one "
                   f"raw write+fdatasync (figure 1 median) = {_fmt(floor['raw_fdatasync_median_us'])} µs, while the "
                   f"target allows {TARGET_OVERHEAD_RATIO} × {peer}'s overhead = {_fmt(floor['target_us'])} µs "
                   f"(one barrier alone is {floor['one_barrier_ratio']:.2f}× {peer}'s overhead)")
        for name, f in floor["ours"].items():
            verdict = ("the target is below this floor: no implementation with this many barriers per step can meet "
                       "it for one trajectory on this disk (figure 4 shares barriers across trajectories)"
                       if f["floor_ratio"] > TARGET_OVERHEAD_RATIO else "the target is above this floor")
            out.append(f"  floor {name}: {_plural(f['barriers_per_step'], 'barrier')}/step (probe-counted) × "
                       f"{_fmt(floor['raw_fdatasync_median_us'])} µs = {_fmt(f['floor_us'])} µs = floor ratio "
                       f"{f['floor_ratio']:.2f}; {verdict}")
        engine = floor.get("sqlite_engine")
        if engine:
            out.append(f"  floor of the SQLite engine ({ENGINE_FLOOR}: the same schema, two commits and one WAL "
                       f"fdatasync per step, no code of ours): {_fmt(engine['overhead_us'])} µs = "
                       f"{engine['ratio']:.2f}× {peer}'s overhead")
        barrier = floor.get("barrier_in_step")
        if barrier:
            out.append(f"  floor of one barrier inside the step ({BARRIER_IN_STEP}: the gate's step, its bytes "
                       f"written in place into a preallocated file and one fdatasync per intent batch, no store): "
                       f"{_fmt(barrier['overhead_us'])} µs = {barrier['ratio']:.2f}× {peer}'s overhead (the raw "
                       "fdatasync alone is below it: the step's own work runs slower after every blocking wait)")
        in_step = floor.get("sqlite_engine_in_step")
        if in_step:
            out.append(f"  floor of the SQLite engine inside the step ({ENGINE_IN_STEP}: the same SQLite work between "
                       f"the gate's own work, no code of our store): {_fmt(in_step['overhead_us'])} µs = "
                       f"{in_step['ratio']:.2f}× {peer}'s overhead")
    return out


def format_report(r: dict[str, Any]) -> str:
    """The readable form of :func:`run_append_bench`'s result."""
    m, fs = r["machine"], r["machine"]["filesystem"]
    out = [f"bench append: {m['cpu_count']} CPUs, Python {m['python']}, SQLite {m['sqlite_version']}, "
           f"{fs['fs_type']} on {fs['device']} (mounted at {fs['mount_point']}); temp dir removed after the run"]
    if fs.get("warning"):
        out.append(f"WARNING: {fs['warning']}")
    al = r["append_latency"]
    out += ["", f"1. Per-append latency, {al['event_bytes']} B events, {r['config']['iterations']} appends per "
                f"contender in {_plural(al['rounds'], 'interleaved round')} after {al['warmup']} warm-up appends"]
    rows = [[k, "", _fmt(v["median_us"]), _fmt(v["p99_us"]), "", ""] for k, v in al["baselines"].items()]
    for kind, tiers in al["stores"].items():
        for tier, v in tiers.items():
            rows.append([f"{kind}@{tier}", v.get("baseline", "-"), _fmt(v["median_us"]), _fmt(v["p99_us"]),
                         _fmt(v.get("ratio_median"), 2), _fmt(v.get("ratio_p99"), 2)])
    out.append(_table(rows, ["contender", "baseline", "median µs", "p99 µs", "× base (median)", "× base (p99)"]))
    for k, why in r["config"]["skipped_stores"].items():
        out.append(f"  skipped {k}: {why}")
    gc_ = r["group_commit"]
    out += ["", f"2. Group commit vs single flush at the {gc_['tier']} tier (flush timer "
                f"{gc_['flush_timer_s'] * 1e3:g} ms, batch cap {gc_['batch_cap']}; each writer its own trajectory; "
                f"both writer models and modes interleaved in {_plural(gc_['rounds'], 'round')})"]
    rows = []
    for kind, models in gc_["stores"].items():
        for model, rs in models.items():
            for x in rs:
                rows.append([kind, model, str(x["writers"]), _fmt(x["single_flush_events_per_s"], 0),
                             _fmt(x["group_commit_events_per_s"], 0), _fmt(x["speedup"], 2),
                             _fmt(x["mean_batch_size"], 2), _fmt(x["mean_queue_wait_s"] * 1e6, 0),
                             _fmt(x["mean_storage_s"] * 1e6, 0), _fmt(x["amortized_storage_per_event_s"] * 1e6, 0),
                             _fmt(x["time_per_flush_s"] * 1e6, 0)])
    out.append(_table(rows, ["store", "writers as", "writers", "single ev/s", "group ev/s", "× single", "mean batch",
                             "queue_wait µs", "storage µs", "storage/event µs", "µs per flush"]))
    for model, how in gc_["writer_models"].items():
        out.append(f"  {model}: {how}")
    out.append("  µs per flush = group run time / flushes; minus storage µs, it is the time each flush cycle spends "
               "outside the store (waking writers and collecting their next events)")
    out += _format_steps(r["per_step"], "3. Per-step time of one trajectory")
    out += _format_steps(r["fleet"], f"4. Fleet per-step time: {r['fleet']['trajectories']} concurrent trajectories "
                                     "(threads), wall time / (trajectories · steps)")
    out += ["", "5. Targets" + (" (--quick: few samples, indicative only; run without --quick to judge)"
                                if r["config"]["quick"] else "")]
    rows = [[str(t["figure"]), t["name"], _fmt(t["measured"], 2), t["limit"],
             {True: "PASS", False: "FAIL", None: "n/a"}[t["passed"]]] for t in r["targets"]]
    out.append(_table(rows, ["fig", "target", "measured", "limit", "result"]))
    out += [f"  fig {t['figure']} {t['name']}: {t['detail']}" for t in r["targets"] if t.get("detail")]
    return "\n".join(out)
