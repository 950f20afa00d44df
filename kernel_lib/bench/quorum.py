"""``bench quorum``: the price of the quorum tier against the local fdatasync tier, same run (§11.3.1, eq. 2).

Two figures, both measured on this machine, each given as a ratio against the local baseline
measured in the same run (these machines are noisy; absolute numbers are printed too):

1. **Acknowledgment latency.** One writer appends events one at a time and waits for each
   acknowledgment: :class:`~kernel_lib.quorum.EtcdStore` (Raft commit on 2 of 3 members, each
   member syncing its own write-ahead log) against :class:`~kernel_lib.log.SQLiteStore` at
   ``fdatasync``. Rounds alternate between the two so drift hits both.
2. **Group-commit throughput.** ``writers`` threads, one trajectory each, append through a
   :class:`~kernel_lib.log.group_commit.GroupCommitter` on each store (one acknowledgment per
   batch, eq. 2); events acknowledged per second, and the mean batch size.

All three members share this machine's disk and cores, so the quorum here pays for replication
without the independence a real deployment buys with it (footnote 3): the figures price the
protocol, not a placement.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kernel_lib.bench.harness import (
    Contender,
    filesystem_of,
    machine_info,
    median,
    ratio,
    run_rounds,
    summarize,
    time_call,
)
from kernel_lib.core.events import Event
from kernel_lib.errors import ConfigError
from kernel_lib.log.base import AckTier, LogStore
from kernel_lib.log.group_commit import GroupCommitter
from kernel_lib.log.sqlite import SQLiteStore
from kernel_lib.quorum.cluster import EtcdCluster
from kernel_lib.quorum.store import EtcdStore
from kernel_lib.sim.events import sample_intent


def _event(tid: str, seq: int) -> Event:
    return Event.create(trajectory_id=tid, event_id=f"{tid}/{seq}", sequence_number=seq,
                        payload=sample_intent(seq, arguments={"seq": seq}, pad_chars=200))


def _appender(label: str, store: LogStore, tier: AckTier, tid: str, n: int) -> Contender:
    """One writer acknowledging one event at a time: ``n`` pre-built events of trajectory ``tid``."""
    return Contender(label, lambda e: store.append(e, tier), [_event(tid, seq) for seq in range(1, n + 1)])


def _latency_row(samples_s: list[float]) -> dict[str, Any]:
    """Acknowledgment latencies (s) as ``appends``, ``p50_ms``, ``p99_ms``, ``mean_ms`` (and min, p90)."""
    s = summarize(samples_s, "ms")
    return {"appends": s["n"], "p50_ms": s["median_ms"], "p99_ms": s["p99_ms"], "mean_ms": s["mean_ms"],
            "min_ms": s["min_ms"], "p90_ms": s["p90_ms"]}


def _throughput(store: LogStore, tier: AckTier, label: str, writers: int, per_writer: int) -> dict[str, Any]:
    committer = GroupCommitter(store, tier, flush_timer_s=0.002, batch_cap=64)
    errors: list[BaseException] = []

    def work(w: int) -> None:
        tid = f"{label}-gc-{w}"
        try:
            for seq in range(1, per_writer + 1):
                committer.append_many([_event(tid, seq)])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(writers)]

    def start_and_join() -> None:
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    elapsed = time_call(start_and_join)
    stats = getattr(committer, "stats", None)
    committer.close()
    if errors:
        raise errors[0]
    total = writers * per_writer
    sizes = list(getattr(stats, "batch_sizes", []) or [])
    return {"events": total, "seconds": elapsed, "events_per_s": total / elapsed,
            "flushes": len(sizes), "mean_batch": statistics.fmean(sizes) if sizes else None}


def run_quorum_bench(events: int = 200, *, rounds: int = 4, seed: int = 0, writers: int = 8,
                     members: int = 3) -> dict[str, Any]:
    """Run both figures (module docstring). ``events``: sequential appends per store in figure 1
    (split over ``rounds``, interleaved: :func:`kernel_lib.bench.harness.run_rounds`); figure 2 uses
    ``writers`` x ``events // writers`` appends per store. The result's ``machine`` names the disk
    of the local store (``filesystem``, the system temp directory) and of the etcd members
    (``etcd_filesystem``); latencies are in ms (``p50_ms``: the median), throughput in events/s.

    Raises:
        ConfigError: bad counts. QuorumSetupError: etcd missing.
    """
    for name, v, lo in (("events", events, 10), ("rounds", rounds, 1), ("writers", writers, 1)):
        if type(v) is not int or v < lo:
            raise ConfigError(f"{name} must be an int >= {lo}, got {v!r}")
    per_round = max(1, events // rounds)
    with tempfile.TemporaryDirectory(prefix="kl-bench-quorum-") as tmp, EtcdCluster(members) as cluster:
        local = SQLiteStore.open(Path(tmp) / "local.db", create=True)
        quorum = EtcdStore(cluster.endpoints(), timeout_s=10.0)
        machine = {**machine_info(tmp), "etcd_filesystem": filesystem_of(cluster.work_dir)}
        lat = run_rounds([_appender("fdatasync", local, AckTier.FDATASYNC, "lat-fdatasync", per_round * rounds),
                          _appender("quorum", quorum, AckTier.QUORUM, "lat-quorum", per_round * rounds)],
                         rounds=rounds, per_round=per_round, collect="round")
        fig1 = {label: _latency_row(xs) for label, xs in lat.items()}
        fig1["ratio_p50"] = ratio(fig1["quorum"]["p50_ms"], fig1["fdatasync"]["p50_ms"])
        fig1["ratio_p99"] = ratio(fig1["quorum"]["p99_ms"], fig1["fdatasync"]["p99_ms"])
        per_writer = max(1, events // writers)
        fig2 = {"fdatasync": _throughput(local, AckTier.FDATASYNC, "local", writers, per_writer),
                "quorum": _throughput(quorum, AckTier.QUORUM, "quorum", writers, per_writer)}
        fig2["ratio_events_per_s"] = ratio(fig2["quorum"]["events_per_s"], fig2["fdatasync"]["events_per_s"])
        one_at_a_time_per_s = 1e3 / fig1["quorum"]["mean_ms"]
        fig2["quorum_group_commit_speedup"] = ratio(fig2["quorum"]["events_per_s"], one_at_a_time_per_s)
        local.close()
        quorum.close()
    return {"members": members, "writers": writers, "seed": seed, "machine": machine, "latency": fig1,
            "group_commit": fig2,
            "note": "all members on this one machine: the protocol's cost, not an independent placement"}


def format_quorum_bench(r: dict[str, Any]) -> str:
    lat, gc = r["latency"], r["group_commit"]
    lines = [f"bench quorum: etcd, {r['members']} members on loopback, against SQLite at fdatasync (measured here)"]
    fs = r.get("machine", {}).get("filesystem", {})
    if fs.get("warning"):
        lines.append(f"WARNING: {fs['warning']}")
    lines += ["",
              "1. acknowledgment latency, one writer, one event per acknowledgment",
              f"   fdatasync: p50 {lat['fdatasync']['p50_ms']:.2f} ms, p99 {lat['fdatasync']['p99_ms']:.2f} ms "
              f"({lat['fdatasync']['appends']} appends)",
              f"   quorum:    p50 {lat['quorum']['p50_ms']:.2f} ms, p99 {lat['quorum']['p99_ms']:.2f} ms "
              f"({lat['quorum']['appends']} appends)",
              f"   ratio quorum / fdatasync: p50 {lat['ratio_p50']:.2f}x, p99 {lat['ratio_p99']:.2f}x",
              "",
              f"2. group commit, {r['writers']} writers (eq. 2)",
              f"   fdatasync: {gc['fdatasync']['events_per_s']:.0f} events/s, mean batch "
              f"{gc['fdatasync']['mean_batch'] or 0:.1f}",
              f"   quorum:    {gc['quorum']['events_per_s']:.0f} events/s, mean batch "
              f"{gc['quorum']['mean_batch'] or 0:.1f} ({gc['quorum_group_commit_speedup']:.1f}x the one-at-a-time "
              "quorum rate)",
              f"   ratio quorum / fdatasync: {gc['ratio_events_per_s']:.2f}x",
              "", r["note"]]
    return "\n".join(lines)


def measure_tiers(appends: int = 100, *, cluster: EtcdCluster | None = None) -> list[dict[str, Any]]:
    """Acknowledgment latency per tier of table 2, side by side, measured on this machine: SQLite
    at ``write`` (page cache), SQLite at ``fdatasync`` (the disk), and etcd at ``quorum`` (a Raft
    commit on a majority). One writer, one event per acknowledgment, ``appends`` each, the three
    interleaved in rounds. Uses ``cluster`` if given (running), else starts and stops its own.

    Returns one row per tier: ``tier``, ``survives`` (failure domain), ``appends``, ``p50_ms``,
    ``p99_ms``, ``mean_ms``, ``ratio_to_fdatasync_p50``.

    Raises:
        ConfigError: ``appends`` not an int >= 4. QuorumSetupError: etcd missing.
    """
    if type(appends) is not int or appends < 4:
        raise ConfigError(f"appends must be an int >= 4, got {appends!r}")
    own = cluster is None
    cluster = cluster or EtcdCluster(3).start()
    try:
        with tempfile.TemporaryDirectory(prefix="kl-tiers-") as tmp:
            local = SQLiteStore.open(Path(tmp) / "tiers.db", create=True)
            quorum = EtcdStore(cluster.endpoints(only_running=True), timeout_s=10.0, prefix="kl-tiers/")
            tiers = [("write", local, AckTier.WRITE), ("fdatasync", local, AckTier.FDATASYNC),
                     ("quorum", quorum, AckTier.QUORUM)]
            tag = f"{time.time_ns()}"
            rounds = 4
            per = [appends // rounds + (1 if r < appends % rounds else 0) for r in range(rounds)]   # `appends` in all
            lat = run_rounds([_appender(label, store, tier, f"tiers-{label}-{tag}", appends)
                              for label, store, tier in tiers], rounds=rounds, per_round=per,
                             collect="round")
            local.close()
            quorum.close()
    finally:
        if own:
            cluster.stop()
    base = median(lat["fdatasync"])
    return [{"tier": label, "survives": tier.survives_up_to.label, **_latency_row(lat[label]),
             "ratio_to_fdatasync_p50": ratio(median(lat[label]), base)}
            for label, _s, tier in tiers]
