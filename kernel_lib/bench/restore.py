"""``bench restore``: what a checkpoint buys a replacement worker on this machine (§11.4, §11.5.2).

For each log size n (default 10 000 and 100 000 events of the crash worksheet's turn shape:
model call, authorization, reservation, tool intent, tool result, settlement), one run in one
temporary directory:

1. **Write the log** to a durable store (SQLite by default) at the fdatasync tier, capturing
   checkpoints on the way: a full one at n/10, incremental ones at 2n/10 … 9n/10 and at
   0.99 n, then a consolidation of that chain into a full base (same position). The last 1 % of
   the log is the suffix a restore folds. Each capture's bytes written, pause and total time
   are reported (full vs incremental, table 4).
2. **Time to reach the last position**, measured in interleaved rounds (order rotating), median:

   * *fold from the start*: read and decode every event from the store and fold from record_0;
   * *restore from the latest checkpoint*: find it, verify and load its manifest and record
     snapshot, read and fold the suffix (:func:`kernel_lib.checkpoint.restore`, its default
     ``lazy_rows=True``). The snapshot is in ``kernel_lib.record-snapshot/4``: each table's ids
     and rows are byte strings with end offsets, plus a stored hash index of the ids, so
     decoding it parses no id and no row and builds no dict; a key is found through the index
     and its row built from its slice when the suffix first uses it
     (:class:`kernel_lib.core.lazy_table.IndexedLazyTable`): the restore pays for the keys and
     rows the suffix touches. The snapshot's SHA-256 is computed in a background thread while
     the main thread decodes it and reads and folds the suffix; restore waits for it before
     returning anything (damaged bytes fail the restore as a verified read would), so on two
     idle cores the hash costs little wall time (the ``check_wait`` phase is what was left of
     it);
   * the same *with every row built* (``lazy_rows=False``, what a resuming worker asks for, so a
     malformed row fails the restore itself): shown beside it, not a target;
   * *restore through the delta chain*: the same from the last incremental checkpoint (its
     chain of record deltas applied to the full base, the result's digest checked).

   Reported as seconds and as speedups over fold-from-start (target: restore from the latest
   checkpoint ≥ 50 × faster at 100 000 events), with the restore's own phases (find, load, fold,
   check wait; medians over the timed restores) and the record snapshot's format and size.
   Both restores are checked to equal the fold.
3. **Fold throughput**: the decoded events in memory, folded by the reducer vs a plain-Python
   loop applying the same events to dicts (operation status, reservations, consumption): events/s
   of each and their ratio, the price of the reducer's checks.
4. **Scrubber**: the time for the log scrubber (``widgets.scrubber.record_view`` with its
   :class:`~kernel_lib.checkpoint.CheckpointIndex`) to show a random position, median over
   positions, against the same view folded from the start (target ≤ 100 ms median at 100 000).

Figures are this machine's, from this run; ratios compare contenders measured in the same run.
"""

from __future__ import annotations

import gc
import os
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kernel_lib.bench.harness import (
    MeasuredDir,
    machine_info,
    median,
    quantile,
    ratio,
    time_each,
    time_rounds,
)
from kernel_lib.checkpoint.blobs import DirectoryBlobStore
from kernel_lib.checkpoint.capture import Checkpointer
from kernel_lib.checkpoint.index import CheckpointIndex
from kernel_lib.checkpoint.restore import restore
from kernel_lib.core.events import Event
from kernel_lib.core.record import fold, fold_into, initial_record
from kernel_lib.errors import ConfigError
from kernel_lib.history.scrub import record_view
from kernel_lib.log import TrajectoryLog, open_store
from kernel_lib.sim.events import EventMaker

DEFAULT_SIZES = (10_000, 100_000)
TARGET_RESTORE_SPEEDUP = 50.0     # restore from the latest checkpoint vs fold from the start, at 100k
TARGET_SCRUBBER_MS = 100.0        # median time to show a position of a 100k-event log
TARGET_SIZE = 100_000
TRAJECTORY = "traj_bench_restore"

def make_events(n: int, seed: int = 0) -> list[Event]:
    """``n`` events of one trajectory (sequence 1..n), seeded."""
    m = EventMaker(TRAJECTORY, random.Random(seed), short_texts=True)
    out = []
    for _ in range(n):
        out.append(m.make())
        m.next_seq += 1
    return out


def plain_fold(events: Sequence[Event]) -> tuple[dict, dict, float]:
    """The baseline of figure 3: the same decoded events applied to plain dicts, with no checks:
    operation id → status, open reservations, consumed USD."""
    ops: dict[str, str] = {}
    held: dict[str, float] = {}
    consumed = 0.0
    for e in events:
        p, t = e.payload, e.event_type
        if t == "ToolIntent":
            ops[p.operation_id] = "in_doubt"
        elif t == "ToolResult":
            if p.status in ("completed", "failed") and p.observation_complete:
                ops[p.operation_id] = "established"
        elif t == "ContextBuilt":
            ops[p.invocation_id] = "in_doubt"
        elif t == "ModelReplied":
            if p.status == "complete":
                ops[p.invocation_id] = "established"
        elif t == "Authorized":
            ops.setdefault(p.subject_id, "proposed" if p.decision == "allow" else "denied")
        elif t == "BudgetReserved":
            held[p.reservation_id] = p.amount_usd
        elif t == "BudgetSettled":
            consumed += p.actual_usd
            if p.final:
                held.pop(p.reservation_id, None)
    return ops, held, consumed


def _size(n: int, tmp: Path, store_kind: str, rounds: int, scrub_positions: int, seed: int,
          tick: Callable[[str], None]) -> dict[str, Any]:
    tick(f"{n} events: generating")
    t0 = time.perf_counter()
    events = make_events(n, seed)
    gen_s = time.perf_counter() - t0
    path = tmp / (f"log-{n}.sqlite" if store_kind == "sqlite" else f"log-{n}")
    store = open_store(store_kind, path, create=True)
    blobs = DirectoryBlobStore(str(tmp / f"blobs-{n}"))
    log = TrajectoryLog(store, TRAJECTORY)
    ck = Checkpointer(log, blobs, max_chain=10 ** 6)
    marks = sorted({max(1, k * n // 10) for k in range(1, 10)} | {max(1, n - max(1, n // 100))})
    captures: list[dict[str, Any]] = []
    tick(f"{n} events: writing the log with checkpoints")
    written = 0
    t0 = time.perf_counter()
    rec = initial_record(TRAJECTORY)
    for mark in marks + [n]:
        chunk = events[written:mark]
        for i in range(0, len(chunk), 1000):
            log.append_many([e.payload for e in chunk[i:i + 1000]])
        written = mark
        if mark == n:
            break
        rec = fold_into(rec, log.events(rec.last_sequence_number + 1))
        r = ck.capture(rec, None, kind="full" if not captures else "incremental")
        rec = fold_into(rec, [r.event])
        captures.append({k: r.to_dict()[k] for k in ("checkpoint_id", "kind", "covered_sequence_number",
                                                      "chain_length", "bytes_written", "state_bytes", "pause_s",
                                                      "serialize_s", "write_s", "publish_s", "total_s")})
    last_incremental = captures[-1]["checkpoint_id"]
    cons = ck.consolidate()
    consolidation = {k: cons.capture.to_dict()[k] for k in ("checkpoint_id", "bytes_written", "total_s")}
    consolidation["supersedes"] = len(cons.supersedes)
    write_s = time.perf_counter() - t0
    head = store.head(TRAJECTORY)

    # --- figure 2: reach the last position ---------------------------------------------------------
    tick(f"{n} events: checking restore = fold")
    whole = fold_into(initial_record(TRAJECTORY), store.read(TRAJECTORY))
    latest = restore(store, TRAJECTORY, blobs)
    chain = restore(store, TRAJECTORY, blobs, checkpoint_id=last_incremental)
    same = latest.record.state_dict() == whole.state_dict() == chain.record.state_dict()
    del whole
    tick(f"{n} events: timing fold vs restore ({rounds} rounds)")
    phases: dict[str, list[dict[str, float]]] = {"latest": [], "chain": []}

    def timed(kind: str, **kw: Any) -> Callable[[], object]:
        return lambda: phases[kind].append(restore(store, TRAJECTORY, blobs, **kw).timings_s)

    samples = time_rounds({
        "fold_from_start": lambda: fold_into(initial_record(TRAJECTORY), store.read(TRAJECTORY)),
        "restore_latest": timed("latest"),
        "restore_latest_all_rows": lambda: restore(store, TRAJECTORY, blobs, lazy_rows=False),
        "restore_chain": timed("chain", checkpoint_id=last_incremental),
    }, rounds)
    med = {k: median(v) for k, v in samples.items()}
    reach = {
        "head": head, "suffix_events_latest": latest.suffix_events, "suffix_events_chain": chain.suffix_events,
        "chain_length": chain.chain_length, "restore_equals_fold": same,
        "median_s": med, "samples_s": samples,
        "speedup_latest": ratio(med["fold_from_start"], med["restore_latest"]),
        "speedup_chain": ratio(med["fold_from_start"], med["restore_chain"]),
        "speedup_latest_all_rows": ratio(med["fold_from_start"], med["restore_latest_all_rows"]),
        "restore_latest_phases_s": _median_phases(phases["latest"]),
        "restore_chain_phases_s": _median_phases(phases["chain"]),
        "record_snapshot_bytes": latest.checkpoint.record["size"],
        "record_format": latest.checkpoint.record_format,
    }

    # --- figure 3: fold throughput -----------------------------------------------------------------
    tick(f"{n} events: fold throughput")
    decoded = list(store.read(TRAJECTORY))
    store.close()
    t = time_rounds({"fold": lambda: fold(initial_record(TRAJECTORY), decoded),
                     "plain_loop": lambda: plain_fold(decoded)}, rounds)
    fold_eps = len(decoded) / median(t["fold"])
    plain_eps = len(decoded) / median(t["plain_loop"])
    throughput = {"events": len(decoded), "fold_events_per_s": fold_eps, "plain_loop_events_per_s": plain_eps,
                  "fold_over_plain": ratio(fold_eps, plain_eps), "median_s": {k: median(v) for k, v in t.items()}}

    # --- figure 4: the scrubber --------------------------------------------------------------------
    tick(f"{n} events: scrubber")
    scrub = _scrubber(decoded, scrub_positions, seed)
    return {"events": n, "generate_s": gen_s, "write_with_checkpoints_s": write_s, "captures": captures,
            "consolidation": consolidation, "reach_last_position": reach, "fold_throughput": throughput,
            "scrubber": scrub}


def _median_phases(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each phase's median over the timed restores (seconds): the first, untimed restore of a
    run can carry a collection of the garbage the fold before it left."""
    return {k: median([r[k] for r in runs]) for k in runs[0]} if runs else {}


def _scrubber(events: list[Event], positions: int, seed: int) -> dict[str, Any]:
    via = "kernel_lib.history.scrub.record_view (the scrubber's view)"
    gc.collect()
    t0 = time.perf_counter()
    idx = CheckpointIndex(events)
    build_s = time.perf_counter() - t0
    rng = random.Random(f"{seed}:scrub")
    pos = [rng.randint(0, len(events)) for _ in range(positions)]
    with_index = time_each(lambda p: record_view(events, p, idx), pos)
    # folding from the start is slow: a few positions
    baseline = time_each(lambda p: record_view(events, p), pos[:max(1, min(3, positions))])
    med_ms = median(with_index) * 1e3
    base_ms = median(baseline) * 1e3
    return {"via": via, "stride": idx.stride, "snapshots": len(idx.snapshot_positions), "index_build_s": build_s,
            "positions": positions, "median_ms": med_ms, "p90_ms": quantile(with_index, 0.9) * 1e3,
            "fold_from_start_median_ms": base_ms, "speedup": ratio(base_ms, med_ms)}


def run_restore_bench(*, sizes: Sequence[int] = DEFAULT_SIZES, dir: str | os.PathLike | None = None,
                      store: str = "sqlite", rounds: int | None = None, scrub_positions: int = 40, seed: int = 0,
                      progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the benchmark (module docstring) and return its figures as a dict.

    Args:
        sizes: log sizes in events (each ≥ 20); a size given twice is run once (each size has
            its own log in the temporary directory).
        dir: parent of the temporary directory (default: the current directory, so the disk is the
            project's; ``machine.filesystem`` in the result names it); it is removed.
        store: ``sqlite`` or ``segment``.
        rounds: interleaved rounds per timed figure (default 5 below 50 000 events, else 3).
        scrub_positions: random positions the scrubber is timed on.
        progress: called with a short description before each step.

    Raises:
        ConfigError: a size below 20, an unknown store, rounds/positions below 1, or ``dir`` not an
            existing directory.
    """
    sizes = list(sizes)
    if not sizes or any(type(n) is not int or n < 20 for n in sizes):
        raise ConfigError(f"sizes must be integers >= 20, got {sizes!r}")
    sizes = list(dict.fromkeys(sizes))      # duplicates would share one log path: run each size once
    if store not in ("sqlite", "segment"):
        raise ConfigError(f"store must be sqlite or segment, not {store!r}")
    if rounds is not None and (type(rounds) is not int or rounds < 1):
        raise ConfigError(f"rounds must be an integer >= 1, got {rounds!r}")
    if type(scrub_positions) is not int or scrub_positions < 1:
        raise ConfigError(f"scrub_positions must be an integer >= 1, got {scrub_positions!r}")
    tick = progress or (lambda _msg: None)
    scratch = MeasuredDir(dir, prefix="bench-restore-")
    tmp = scratch.path
    machine = {**machine_info(tmp), "cpus": os.cpu_count()}
    t0 = time.perf_counter()
    try:
        results = [_size(n, tmp, store, rounds or (5 if n < 50_000 else 3), scrub_positions, seed, tick) for n in sizes]
    finally:
        scratch.remove()
    out = {"benchmark": "restore", "store": store, "sizes": sizes, "seed": seed, "machine": machine,
           "results": results, "temp_dir_removed": scratch.removed, "seconds": time.perf_counter() - t0}
    out["targets"] = _targets(results)
    return out


def _targets(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One ``{events, name, measured, limit, passed}`` per target and size (``passed`` is None
    below :data:`TARGET_SIZE` events: the targets are stated for 100 000)."""
    out = []
    for r in results:
        applies = r["events"] >= TARGET_SIZE
        s = r["reach_last_position"]["speedup_latest"]
        out.append({"events": r["events"], "name": "restore from the latest checkpoint vs fold from the start (x)",
                    "measured": s, "limit": f">= {TARGET_RESTORE_SPEEDUP:g} at {TARGET_SIZE} events",
                    "passed": (s >= TARGET_RESTORE_SPEEDUP) if applies else None})
        m = r["scrubber"]["median_ms"]
        out.append({"events": r["events"], "name": "scrubber: median time to show a position (ms)",
                    "measured": m, "limit": f"<= {TARGET_SCRUBBER_MS:g} at {TARGET_SIZE} events",
                    "passed": (m <= TARGET_SCRUBBER_MS) if applies else None})
    return out


def format_restore_report(r: dict[str, Any]) -> str:
    """Human-readable tables of :func:`run_restore_bench`'s result."""
    lines = [f"bench restore: {r['store']} store, seed {r['seed']}, {r['machine']['platform']}, "
             f"{r['machine']['cpus']} CPUs ({r['seconds']:.0f} s)", ""]
    warning = r["machine"].get("filesystem", {}).get("warning")
    if warning:
        lines[1:1] = [f"WARNING: {warning}"]
    for x in r["results"]:
        n, reach, th, sc = x["events"], x["reach_last_position"], x["fold_throughput"], x["scrubber"]
        med = reach["median_s"]
        lines += [f"== {n} events (generated in {x['generate_s']:.1f} s, written with checkpoints in "
                  f"{x['write_with_checkpoints_s']:.1f} s)",
                  "captures (bytes written / state bytes, pause ms, total ms):"]
        for c in x["captures"]:
            lines.append(f"  {c['kind']:<11} at {c['covered_sequence_number']:>7}: {c['bytes_written']:>11,} / "
                         f"{c['state_bytes']:>11,} B   pause {c['pause_s'] * 1e3:8.1f}   "
                         f"total {c['total_s'] * 1e3:8.1f}")
        cons = x["consolidation"]
        lines += [f"  consolidation into a full base: {cons['bytes_written']:,} B, {cons['total_s'] * 1e3:.1f} ms, "
                  f"supersedes {cons['supersedes']} deltas",
                  f"reach position {reach['head']} (restore == fold: {reach['restore_equals_fold']}):",
                  f"  fold from the start            {med['fold_from_start']:9.3f} s   1.0x",
                  f"  restore, latest checkpoint     {med['restore_latest']:9.3f} s   {reach['speedup_latest']:.1f}x "
                  f"faster (suffix {reach['suffix_events_latest']} events; phases "
                  + ", ".join(f"{k.replace('_', ' ')} {reach['restore_latest_phases_s'][k] * 1e3:.1f} ms"
                              for k in ("find", "load", "fold", "check_wait")
                              if k in reach["restore_latest_phases_s"])
                  + f"; record snapshot {reach['record_snapshot_bytes']:,} B, {reach.get('record_format', '?')}, "
                    "its SHA-256 checked in a background thread during load and fold)",
                  f"  restore, latest, all rows built {med['restore_latest_all_rows']:8.3f} s   "
                  f"{reach['speedup_latest_all_rows']:.1f}x faster (what a resuming worker asks for: lazy_rows=False)",
                  f"  restore, through {reach['chain_length']} deltas     {med['restore_chain']:9.3f} s   "
                  f"{reach['speedup_chain']:.1f}x faster (suffix {reach['suffix_events_chain']} events)",
                  f"fold throughput: reducer {th['fold_events_per_s']:,.0f} events/s, plain loop "
                  f"{th['plain_loop_events_per_s']:,.0f} events/s: ratio {th['fold_over_plain']:.2f}",
                  f"scrubber ({sc['via']}): median {sc['median_ms']:.1f} ms (p90 {sc['p90_ms']:.1f} ms) over "
                  f"{sc['positions']} positions vs {sc['fold_from_start_median_ms']:.1f} ms folding from the start "
                  f"({sc['speedup']:.0f}x); index of {sc['snapshots']} snapshots every {sc['stride']} events built in "
                  f"{sc['index_build_s']:.2f} s", ""]
    lines.append("targets:")
    for t in r["targets"]:
        verdict = "n/a (smaller log)" if t["passed"] is None else ("PASS" if t["passed"] else "FAIL")
        lines.append(f"  {t['events']:>7} events  {t['name']}: {t['measured']:.1f} (target {t['limit']})  {verdict}")
    return "\n".join(lines)
