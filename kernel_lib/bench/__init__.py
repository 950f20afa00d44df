"""``bench``: benchmarks, each printing ratios against a baseline measured in the same run.

* :mod:`.append` — append latency by tier, group commit (eq. 2), peers (DBOS, LangGraph);
* :mod:`.restore` — restore from a checkpoint against a fold from the start, the scrubber;
* :mod:`.replay` — serving a recording through the replay adapter against a plain fold;
* :mod:`.diverge` — locating the first divergence against a plain fold;
* :mod:`.quorum` — etcd acknowledgment latency and group commit against local fdatasync;
* :mod:`.saga` — a saga transition against a raw fdatasync, barriers per forward step and per
  compensator pop, the unwind of a 100-step saga on the twins (Failure Recovery);
* :mod:`.growth` — bytes written and restore time of full snapshots against delta chains on a
  growing trajectory (notebook 11.4);
* :mod:`.watchdog` — the watchdog's workspace state hash: a one-file re-hash and a no-change
  re-hash against a full hash, and against the step it watches (Failure Recovery);
* :mod:`.gateway` — the tool gateway's per-call overhead (breaker, bulkhead, full gateway, the
  shared SQLite breaker) against a bare call and pybreaker (Failure Recovery).

All of them time through :mod:`.harness`: interleaved rounds, summaries, ratios against a
baseline of the same run, machine info and which disk was measured.

May import: every layer below ``cli`` and ``course``.
"""

from kernel_lib._support.lazy import lazy_exports  # noqa: E402

# Loaded on first use: a benchmark imports the peers and tiers it measures.
__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "kernel_lib.bench.harness": ("Contender", "run_rounds", "time_rounds", "summarize", "ratio", "machine_info",
                                 "MeasuredDir"),
    "kernel_lib.bench.append": ("run_append_bench",),
    "kernel_lib.bench.restore": ("run_restore_bench",),
    "kernel_lib.bench.replay": ("run_replay_bench",),
    "kernel_lib.bench.diverge": ("run_diverge_bench",),
    "kernel_lib.bench.quorum": ("run_quorum_bench",),
    "kernel_lib.bench.growth": ("run_growth_bench",),
    "kernel_lib.bench.batching": ("measure_batch_caps",),
    "kernel_lib.bench.saga": ("run_saga_bench",),
    "kernel_lib.bench.watchdog": ("run_watchdog_bench",),
    "kernel_lib.bench.gateway": ("run_gateway_bench",),
})
