"""``python -m kernel_lib bench ...``: the benchmarks' command line (append, restore, replay,
diverge, quorum, startup, read, saga, watchdog, gateway, herd, scorecard, fleet). Each benchmark lives in
:mod:`kernel_lib.bench`; this module only parses arguments and prints."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

#: the top-level command of this group and its one-line help (``python -m kernel_lib --help``); the
#: benchmark modules are imported only when ``bench`` is the command
COMMANDS = {"bench": "measure this machine's durability costs"}


_HELP = """\
Measure, in one run on one disk, what a durable acknowledgment costs here (§11.3.1, §11.3.4).

figures:
  1  per-append latency (median, p99, µs) of each store at each tier it offers, for the same
     pre-built events, and the same bytes appended raw: os.write (baseline of the write tier:
     survives a process crash) and os.write+os.fdatasync (baseline of the fdatasync tier:
     survives a host crash). Ratios = store / baseline. Interleaved rounds after a warm-up.
  2  events/s of 1, 4 and 16 writers (own trajectory each, fdatasync tier) flushing every event
     themselves ("single") vs through a group committer ("group"), for two writer models in the
     same interleaved rounds: "threads" (OS threads; GroupCommitter) and "asyncio" (tasks on one
     loop; single = store.append on the loop, serial; group = AsyncGroupCommitter, flush on
     the loop). The ratio, the mean batch size and the eq. 2 terms:
     queue_wait (flush start - arrival), storage (ack - flush start), storage per event.
  3  per-step time of one trajectory's durable step and of the same step without durability,
     as the slope between runs of 1 and 1+S steps; overhead = durable - non-durable. Ours: the
     dispatch gate's durable path (admission+intent durable as one batch, no-op dispatch, result
     durable) on each durable store vs on MemoryStore. Peers, when installed: DBOS (@DBOS.step
     in a @DBOS.workflow, SQLite system database) and LangGraph (SqliteSaver,
     durability="sync"). The SQLite journal_mode and synchronous of every system's connection
     are read back: is its step fsync-durable? The floor: barriers per step (probe-counted) x
     the raw write+fdatasync median of figure 1, as a ratio of the faster peer's overhead.
     With the peers, engine/sqlite: SQLite alone doing our SQLite step's two commits and one
     WAL fdatasync (the log's schema, no code of ours), the engine's floor for ours/sqlite.
     floor/fdatasync+step: the gate's step with one raw write+fdatasync per step and no
     store, the floor of any one-barrier design inside a step (on a VM the step's own work
     runs slower after each blocking wait, so it is above the raw fdatasync of figure 1).
  4  the same per-step figures for a fleet of 16 concurrent trajectories (threads) started
     together: wall time / (16 x steps), slope between runs of 1 and 1+S steps. Ours: one
     dispatch gate per trajectory, all on one store through one committer: a GroupCommitter
     (flusher thread; rows ours/KIND) and a LeaderGroupCommitter (the writers flush for each
     other, no flusher thread; rows ours/KIND+leader); LangGraph: the same compiled graph, one
     thread_id each, one SqliteSaver; DBOS: 16 workflow calls.
  5  targets: fdatasync append <= 1.5x raw write+fdatasync; group commit >= 5x single flush
     at 16 writers (per store and writer model); our per-step durability overhead <= 0.35x
     LangGraph's (SqliteSaver, durability="sync") for one trajectory (with its floor) and
     <= 0.15x LangGraph's for the fleet of 16.

The temporary directory is created under --dir (default: the current directory, so the disk is
the project's, not a RAM disk) and removed afterwards. Numbers are this machine's, today.
"""


def _cmd_append(args: argparse.Namespace) -> int:
    from kernel_lib.bench.append import format_report, run_append_bench
    result = run_append_bench(dir=args.dir, iterations=args.iterations, quick=args.quick,
                              peers=not args.no_peers, flush_timer_s=args.flush_timer_ms / 1e3,
                              batch_cap=args.batch_cap)
    print(json.dumps(result, indent=2) if args.json else format_report(result))
    return 0


def add_commands(subparsers: "argparse._SubParsersAction") -> argparse.ArgumentParser:
    """Register ``bench`` (with sub-subcommand ``append``) on a CLI's subparsers.

    The ``append`` parser sets ``func`` to a callable ``(args) -> exit code``.
    """
    from kernel_lib.bench.append import DEFAULT_BATCH_CAP, DEFAULT_FLUSH_TIMER_S, MAX_ITERATIONS
    bench = subparsers.add_parser("bench", help=COMMANDS["bench"],
                                  description="Benchmarks measured on this machine.")
    sub = bench.add_subparsers(dest="bench_command", required=True)   # metavar: the choices, as added
    p = sub.add_parser("append", help="append latency, group commit and per-step overhead vs peers",
                       description=_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.add_argument("--dir", metavar="PATH", help="create the temporary directory under PATH (default: the current "
                                                 "directory); use a directory on the disk you want measured")
    p.add_argument("--iterations", type=int, metavar="N",
                   help=f"measured appends per contender in figure 1 (default 2000; --quick 60; at most "
                        f"{MAX_ITERATIONS}); figures 2 to 4 scale with it")
    p.add_argument("--quick", action="store_true", help="few iterations: a smoke run of a few seconds")
    p.add_argument("--no-peers", action="store_true", help="skip DBOS and LangGraph even if installed")
    p.add_argument("--flush-timer-ms", type=float, default=DEFAULT_FLUSH_TIMER_S * 1e3, metavar="MS",
                   help=f"group committers' flush timer, figures 2 and 4 (default {DEFAULT_FLUSH_TIMER_S * 1e3:g} ms)")
    p.add_argument("--batch-cap", type=int, default=DEFAULT_BATCH_CAP, metavar="N",
                   help=f"group committers' batch cap, figures 2 and 4 (default {DEFAULT_BATCH_CAP}, the "
                        "committer's own)")
    p.set_defaults(func=_cmd_append)
    _add_restore_cli(sub)
    _add_diverge_cli(sub)
    _add_replay_cli(sub)
    _add_quorum_cli(sub)
    _add_startup_cli(sub)
    _add_read_cli(sub)
    _add_saga_cli(sub)
    _add_watchdog_cli(sub)
    _add_gateway_cli(sub)
    _add_herd_cli(sub)
    _add_fleet_cli(sub)
    _add_scorecard_cli(sub)
    return bench


# --- bench saga: the saga's log overhead, barriers, unwind time (kernel_lib.bench.saga) ----------

_SAGA_HELP = """\
What the trajectory saga costs in the log (Failure Recovery, Napkin Math 0.1), measured once on
this machine's disk. The tool services are simulated twins on a virtual clock, so their own
latencies are not waited for: every figure is the runtime's cost alone.

Tiers are the acknowledgment tiers of kernel_lib.log.AckTier: memory (no durability), write
(returned write(): survives a process crash) and fdatasync (returned fdatasync(): survives a host
crash). The output labels its rows with these names, read back from each trajectory log.

figures:
  1  one durable saga transition (a SagaStepChanged to COMMITTED, the record a forward step waits
     for) appended at the fdatasync tier on SQLite and on the segment log, against os.write +
     os.fdatasync of the same bytes to a plain file, in the same interleaved rounds: median and p99
     in µs, and each store's ratio to that raw baseline. Then the deployment saga runs once per
     store and its log handle counts the barriers it waited for, per forward step and per
     compensator pop; the runner documents {per_step} and {per_pop} (Napkin Math 0.1's fsyncs_per_forward_step and
     fsyncs_per_compensator).
  2  the unwind of a 100-step saga (--steps): that many committed compensable steps, a 409 on the
     DNS step, then every compensator popped; forward run and unwind timed apart (seconds, ms per
     pop and per step) on the memory store (memory tier), SQLite and the segment log (fdatasync
     tier), in rounds that rotate the stores.
  3  the whole deployment saga (5 steps, 4 pops) per store at the write tier (what
     `saga sweep --services twins` uses on a file store) and at the fdatasync tier (the live
     sweep's workers), with the runner as built (it folds the events the gate appended) and with
     the earlier path (every append read back from the store, then folded): ms per saga, and
     sqlite / segment for each.

targets: a saga transition at fdatasync <= {ratio:g}x raw write+fdatasync (as bench append); barriers
per forward step == {per_step} and per pop == {per_pop}, on both stores. Each is printed PASS or FAIL ("passed" in
--json).

The temporary directory is created under --dir (default: the current directory, so the disk is
the project's, not a RAM disk) and removed afterwards. Numbers are this machine's, from this run.

exit status: as bench append, 0 when the benchmark ran, whether its targets passed or not (a
missed target is a measurement, reported as FAIL, not a failure of the command); 2 bad input
(--rounds below 1, --steps below 4, --dir not an existing directory), one error: line.
"""


def _add_saga_cli(sub: "argparse._SubParsersAction") -> None:

    def cmd(args: argparse.Namespace) -> int:
        import kernel_lib.bench.saga as saga_bench
        result = saga_bench.run_saga_bench(dir=args.dir, quick=args.quick, rounds=args.rounds, steps=args.steps)
        print(json.dumps(result, indent=2) if args.json else saga_bench.format_saga_bench(result))
        return 0

    import kernel_lib.bench.saga as saga_bench
    description = _SAGA_HELP.format(ratio=saga_bench.TARGET_TRANSITION_RATIO,
                                    per_step=saga_bench.DOCUMENTED_BARRIERS["per_forward_step"],
                                    per_pop=saga_bench.DOCUMENTED_BARRIERS["per_pop"])
    p = sub.add_parser("saga", help="saga transition vs raw fdatasync, barriers per step and per pop, unwind of a "
                                    "100-step saga, sqlite vs segment per saga",
                       description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="print one JSON object (with targets) instead of tables")
    p.add_argument("--quick", action="store_true", help="few rounds: a smoke run of a few seconds")
    p.add_argument("--rounds", type=int, metavar="N", help="interleaved rounds of figures 1 and 3 (default 8; "
                                                           "--quick 3)")
    p.add_argument("--steps", type=int, default=100, metavar="N", help="committed steps of the unwound saga, "
                                                                       "figure 2 (default 100)")
    p.add_argument("--dir", metavar="PATH", help="create the temporary directory under PATH (default: the current "
                                                 "directory); use a directory on the disk you want measured")
    p.set_defaults(func=cmd)


# --- bench read: open + read + fold of a segment log vs a msgspec decode (kernel_lib.bench.read) ---


def _add_read_cli(sub: "argparse._SubParsersAction") -> None:

    def cmd(args: argparse.Namespace) -> int:
        import kernel_lib.bench.read as read_bench
        progress = None if args.json or not sys.stderr.isatty() else (lambda m: print(f"... {m}", file=sys.stderr))
        events = args.events if args.events is not None else (5_000 if args.quick else 100_000)
        rounds = args.rounds if args.rounds is not None else (1 if args.quick else 3)
        result = read_bench.run_read_bench(events, rounds=rounds, seed=args.seed, dir=args.dir,
                                           progress=progress)
        print(json.dumps(result, indent=2) if args.json else read_bench.format_read_bench(result))
        return 0

    p = sub.add_parser("read", help="open + read + fold of a segment log vs a msgspec decode of its bytes (ratio); "
                                    "fold vs a plain dict loop",
                       description="Time opening (read-only), reading and folding a segment log written by the "
                                   "project's own writer, against msgspec.json.decode of the same event bytes, in "
                                   "interleaved rounds; fold throughput against a plain dict loop; target: open + "
                                   "read + fold <= 4x the decode (kernel_lib.bench.read).")
    p.add_argument("--json", action="store_true", help="print one JSON object (with targets) instead of a table")
    p.add_argument("--events", type=int, metavar="N", help="events in the log (default 100000; --quick 5000)")
    p.add_argument("--rounds", type=int, metavar="N", help="interleaved timed rounds (default 3; --quick 1)")
    p.add_argument("--quick", action="store_true", help="a small log and one round: a smoke run of a few seconds "
                                                        "(its ratios are not the targets' 100k-event figures)")
    p.add_argument("--seed", type=int, default=0, help="seed of the generated log (default 0)")
    p.add_argument("--dir", metavar="PATH", help="create the temporary directory under PATH (default: the current "
                                                 "directory)")
    p.set_defaults(func=cmd)


# --- bench replay (§11.6.2) and bench diverge (§11.7): one shape, a ratio against a plain fold ---


def _add_ratio_bench(sub: "argparse._SubParsersAction", name: str, mod: Any, run: str, fmt: str, *,
                     help: str, events_help: str, seed_help: str) -> None:
    """Register ``bench NAME`` for a module whose ``run(events, rounds=, seed=)`` returns a dict and
    ``fmt(result)`` prints it (kernel_lib.bench.replay, kernel_lib.bench.diverge)."""

    def cmd(args: argparse.Namespace) -> int:
        result = getattr(mod, run)(args.events, rounds=args.rounds, seed=args.seed)
        print(json.dumps(result, indent=2) if args.json else getattr(mod, fmt)(result))
        return 0

    p = sub.add_parser(name, help=help, description=mod.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--events", type=int, default=10_000, metavar="N", help=events_help)
    p.add_argument("--rounds", type=int, default=5, metavar="N", help="interleaved timed rounds (default 5)")
    p.add_argument("--seed", type=int, default=0, help=seed_help)
    p.set_defaults(func=cmd)


def _add_diverge_cli(sub: "argparse._SubParsersAction") -> None:
    import kernel_lib.bench.diverge as diverge_bench
    _add_ratio_bench(sub, "diverge", diverge_bench, "run_diverge_bench", "format_diverge_bench",
                     help="locating the first divergence of two logs vs a plain fold of one (ratio)",
                     events_help="events per log (default 10000)", seed_help="seed of the synthetic logs (default 0)")


def _add_replay_cli(sub: "argparse._SubParsersAction") -> None:
    import kernel_lib.bench.replay as replay_bench
    _add_ratio_bench(sub, "replay", replay_bench, "run_replay_bench", "format_replay_bench",
                     help="serving a recording through the replay adapter vs a plain fold (ratio)",
                     events_help="events in the recording (default 10000)",
                     seed_help="seed of the synthetic recording (default 0)")


_QUORUM_HELP = """\
The price of the quorum tier (§11.3.1, table 2 row 3) against the local fdatasync tier, measured on
this machine in the same run and given as ratios:

  1. acknowledgment latency: one writer, one event per acknowledgment, the etcd store (a Raft
     commit on a majority of three members, each syncing its own log) against SQLite at fdatasync,
     in alternating rounds;
  2. group commit (eq. 2): several writers share acknowledgments through a group committer on
     each store; events acknowledged per second and the mean batch size.

It starts three etcd members on loopback and stops them at the end. All three share this machine's
disk and cores: the figures price the protocol, not an independent placement."""


def _add_quorum_cli(sub: "argparse._SubParsersAction") -> None:

    def cmd(args: argparse.Namespace) -> int:
        import kernel_lib.bench.quorum as qb
        result = qb.run_quorum_bench(args.events, rounds=args.rounds, writers=args.writers)
        print(json.dumps(result, indent=2) if args.json else qb.format_quorum_bench(result))
        return 0

    p = sub.add_parser("quorum", help="quorum (etcd) acknowledgment latency and group commit vs local fdatasync "
                                      "(ratios)", description=_QUORUM_HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--events", type=int, default=400, metavar="N", help="appends per store per figure (default 400)")
    p.add_argument("--rounds", type=int, default=4, metavar="N", help="alternating rounds in figure 1 (default 4)")
    p.add_argument("--writers", type=int, default=8, metavar="N", help="concurrent writers in figure 2 (default 8)")
    p.set_defaults(func=cmd)


# --- bench restore (§11.4): implemented in kernel_lib.bench.restore ---------------------------


def _cmd_restore(args: argparse.Namespace) -> int:
    import kernel_lib.bench.restore as restore_bench
    progress = None if args.json or not sys.stderr.isatty() else (lambda msg: print(f"... {msg}", file=sys.stderr))
    sizes = args.sizes or ([2_000] if args.quick else list(restore_bench.DEFAULT_SIZES))
    rounds = args.rounds if args.rounds is not None else (1 if args.quick else None)
    positions = args.positions if args.positions is not None else (5 if args.quick else 40)
    result = restore_bench.run_restore_bench(sizes=sizes, dir=args.dir, store=args.store, rounds=rounds,
                                             scrub_positions=positions, seed=args.seed, progress=progress)
    print(json.dumps(result, indent=2) if args.json else restore_bench.format_restore_report(result))
    return 0


def _add_restore_cli(sub: "argparse._SubParsersAction") -> None:
    import kernel_lib.bench.restore as restore_bench
    p = sub.add_parser("restore", help="restore from a checkpoint vs fold from the start; fold throughput; scrubber",
                       description=restore_bench.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.add_argument("--sizes", type=int, nargs="+", metavar="N",
                   help="log sizes in events (default: 10000 100000; --quick 2000)")
    p.add_argument("--store", choices=["sqlite", "segment"], default="sqlite", help="log store (default sqlite)")
    p.add_argument("--dir", metavar="PATH", help="create the temporary directory under PATH (default: the current "
                                                 "directory)")
    p.add_argument("--rounds", type=int, metavar="N", help="interleaved rounds per timed figure (default 5, 3 from "
                                                           "50000 events)")
    p.add_argument("--positions", type=int, metavar="N", help="scrubber positions timed (default 40; --quick 5)")
    p.add_argument("--seed", type=int, default=0, help="seed of the generated log (default 0)")
    p.add_argument("--quick", action="store_true", help="one small log, one round: a smoke run of a few seconds "
                                                        "(its ratios are not the targets' 100k-event figures)")
    p.set_defaults(func=_cmd_restore)


# --- bench startup: what one CLI call costs before it does any work ------------------------------


def _add_startup_cli(sub: "argparse._SubParsersAction") -> None:

    def cmd(args: argparse.Namespace) -> int:
        import kernel_lib.bench.startup as startup
        result = startup.run_startup_bench(rounds=args.rounds, progress=None if not args.json else False)
        print(json.dumps(result, indent=2) if args.json else startup.format_startup_report(result))
        return 0

    p = sub.add_parser("startup", help="start-up of one CLI call (--help, one command per group) vs `python -c pass`",
                       description="Time `python -m kernel_lib --help` and one light command per group as whole "
                                   "processes, in interleaved rounds, against the interpreter's own start-up "
                                   "(`python -c pass`), list the heaviest imports of --help, and check the target "
                                   "--help <= 0.3 s (kernel_lib.bench.startup).")
    p.add_argument("--json", action="store_true", help="print one JSON object (with targets) instead of a table")
    p.add_argument("--rounds", type=int, default=7, metavar="N", help="interleaved rounds (default 7)")
    p.set_defaults(func=cmd)


# --- bench watchdog: the state hash's cost per step (issue 18; kernel_lib.bench.watchdog) --------

_WATCHDOG_HELP = """\
What the watchdog's workspace state hash costs per step (Failure Recovery, "Semantic Watchdog
Timers", table 6), measured in one run on this machine: a full hash of a workspace of --files files
holding --mb MB, the re-hash after one file changed (inotify events where available; also the stat
scan and the runner's changed-paths hint), the re-hash with nothing changed, and the step it
watches (a real tool run as a subprocess, one durable append at fdatasync through the SQLite store),
each as a ratio to the full hash. Target: incremental / full <= 0.02.

The temporary directory is created under --dir (default: the current directory) and removed
afterwards. exit status: 0 when the benchmark ran, whether its target passed or not (printed PASS
or FAIL); 2 on bad input, one error: line. Details: kernel_lib.bench.watchdog."""


def _add_watchdog_cli(sub: "argparse._SubParsersAction") -> None:

    def cmd(args: argparse.Namespace) -> int:
        import kernel_lib.bench.watchdog as wb
        result = wb.run_watchdog_bench(files=args.files, mb=args.mb, rounds=args.rounds, per_round=args.per_round,
                                       seed=args.seed, dir=args.dir, progress=None if not args.json else False)
        print(json.dumps(result, indent=2) if args.json else wb.format_watchdog_bench(result))
        return 0

    p = sub.add_parser("watchdog", help="the watchdog's state hash: one-file re-hash vs full hash vs the step (ratios)",
                       description=_WATCHDOG_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--files", type=int, default=1000, metavar="N", help="files in the workspace (default 1000)")
    p.add_argument("--mb", type=float, default=10.0, metavar="MB", help="their total size, MB (default 10)")
    p.add_argument("--rounds", type=int, default=8, metavar="N", help="interleaved rounds (default 8)")
    p.add_argument("--per-round", type=int, default=4, metavar="N", help="calls per contender per round (default 4)")
    p.add_argument("--seed", type=int, default=0, help="seed of the file contents and edits (default 0)")
    p.add_argument("--dir", metavar="PATH", help="create the temporary directory under PATH (default: the current "
                                                 "directory)")
    p.add_argument("--json", action="store_true", help="print one JSON object (with targets) instead of a table")
    p.set_defaults(func=cmd)


# --- bench gateway: the tool gateway's per-call overhead (issue 19; kernel_lib.bench.gateway) ----

_GATEWAY_HELP = """\
What the tool gateway adds to one call (Failure Recovery, "Tool Circuit Breakers", tables 8-10),
measured in one run on this machine against a bare call and against pybreaker (when installed:
pip install pybreaker, or the 'peers' extra): the circuit breaker (admission + recording alone, and
the full call with classification and an Observation), a bulkhead slot, a call on the domain's
worker pool, the full ToolGateway call, the breaker with its state in the shared SQLite store
(healthy: no write; with failures in the window: one write per call), and a refusal by an open
breaker. Ratios of overheads (median per call, batches of --batch calls, interleaved rounds).

targets: breaker overhead <= pybreaker's (like for like); the full call <= 2x pybreaker's; an
open refusal <= pybreaker's; a healthy call on the shared breaker writes nothing. exit status: 0
when the benchmark ran, whether its targets passed or not (printed PASS or FAIL); 2 on bad input.
Details: kernel_lib.bench.gateway."""


def _add_gateway_cli(sub: "argparse._SubParsersAction") -> None:

    def cmd(args: argparse.Namespace) -> int:
        import kernel_lib.bench.gateway as gb
        rounds = args.rounds if args.rounds is not None else (3 if args.quick else 10)
        batch = args.batch if args.batch is not None else (100 if args.quick else 500)
        result = gb.run_gateway_bench(rounds=rounds, batch=batch, peers=not args.no_peers, dir=args.dir,
                                      progress=None if not args.json else False)
        print(json.dumps(result, indent=2) if args.json else gb.format_gateway_bench(result))
        return 0

    p = sub.add_parser("gateway", help="breaker, bulkhead and gateway overhead per call vs a bare call and pybreaker "
                                       "(ratios); the shared SQLite breaker's cost",
                       description=_GATEWAY_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, metavar="N", help="interleaved rounds (default 10; --quick 3)")
    p.add_argument("--batch", type=int, metavar="N", help="calls per timed sample (default 500; --quick 100)")
    p.add_argument("--quick", action="store_true", help="few rounds and small batches: a smoke run")
    p.add_argument("--no-peers", action="store_true", help="skip pybreaker even if installed")
    p.add_argument("--dir", metavar="PATH", help="create the temporary directory (the shared breaker's SQLite file) "
                                                 "under PATH (default: the current directory)")
    p.add_argument("--json", action="store_true", help="print one JSON object (with targets) instead of a table")
    p.set_defaults(func=cmd)


# --- bench herd: the herd simulator's throughput (issue 19; kernel_lib.bench.herd) ---------------------

_HERD_HELP = """\
How fast the virtual-clock herd simulator runs (Failure Recovery, "Tool Circuit Breakers"; issue 19:
10,000 agents simulated in seconds), in one run on this machine: the default retry-storm scenario
with --agents agents under each of the three policies of `python -m kernel_lib herd`
(deterministic, full_jitter, full_jitter_breaker), against a bare heapq event loop of the same
number of events (the floor of any event-driven simulator in Python), in interleaved rounds.
Figures: wall seconds, agent steps (attempts) and events per second, cost per event as a ratio to
the floor. Targets: cost per event <= 10x the floor; the three policies together <= 10 s.

exit status: 0 when the benchmark ran, whether its targets passed or not (printed PASS or FAIL);
2 on bad input, one error: line. Details: kernel_lib.bench.herd."""


def _add_herd_cli(sub: "argparse._SubParsersAction") -> None:

    def cmd(args: argparse.Namespace) -> int:
        import kernel_lib.bench.herd as hb
        result = hb.run_herd_bench(agents=args.agents, rounds=args.rounds, seed=args.seed)
        print(json.dumps(result, indent=2) if args.json else hb.format_herd_bench(result))
        return 0

    p = sub.add_parser("herd", help="the herd simulator: agent steps per second, cost per event vs a heapq loop",
                       description=_HERD_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--agents", type=int, default=10_000, metavar="N", help="agents (default 10000)")
    p.add_argument("--rounds", type=int, default=3, metavar="N", help="interleaved rounds (default 3)")
    p.add_argument("--seed", type=int, default=0, help="scenario seed (default 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object (with targets) instead of a table")
    p.set_defaults(func=cmd)


# --- bench fleet: the worker fleet's throughput, durability on vs off (issue 20; kernel_lib.bench.fleet) ----

_FLEET_HELP = """\
The worker fleet's throughput (Failure Recovery, "Fault-Tolerant System Synthesis"; issue 20) with
each trajectory's log durable (an SQLite file at the fdatasync tier) against the same fleet with it
off (the log in the worker's memory), in one run on this machine: one fleet of --workers real worker
processes and the live tool services runs batches of --trajectories deployment sagas, durability on
and off in interleaved rounds. Figures: trajectories per second and seconds per trajectory for each,
the ratio on/off, and the services' verdict on every trajectory (completed, no effect applied twice).
Targets: ratio on/off >= 0.5; no trajectory lost or duplicated.

exit status: 0 when the benchmark ran, whether its targets passed or not (printed PASS or FAIL);
2 on bad input, one error: line. Details: kernel_lib.bench.fleet."""


def _add_fleet_cli(sub: "argparse._SubParsersAction") -> None:

    def cmd(args: argparse.Namespace) -> int:
        import kernel_lib.bench.fleet as fb
        progress = None if args.json or not sys.stderr.isatty() else (lambda m: print(m, file=sys.stderr))
        result = fb.run_fleet_bench(args.workers, args.trajectories, rounds=args.rounds, coordinator=args.coordinator,
                                    workdir=args.dir, progress=progress)
        print(json.dumps(result, indent=2) if args.json else fb.format_fleet_bench(result))
        return 0

    p = sub.add_parser("fleet", help="the worker fleet: trajectories per second, durability on vs off (ratio)",
                       description=_FLEET_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=2, metavar="N", help="worker processes (default 2)")
    p.add_argument("--trajectories", type=int, default=20, metavar="M", help="trajectories per batch (default 20)")
    p.add_argument("--rounds", type=int, default=3, metavar="N", help="interleaved rounds (default 3)")
    p.add_argument("--coordinator", choices=("sqlite", "etcd"), default="sqlite",
                   help="where ownership leases live (default sqlite)")
    p.add_argument("--dir", default=None, help="where the fleet's directory (and so the logs) go (default: system "
                                               "temp; give a directory on the disk you mean to measure)")
    p.add_argument("--json", action="store_true", help="print one JSON object (with targets) instead of a table")
    p.set_defaults(func=cmd)


# --- bench scorecard: the simulated scorecard's throughput (issue 20; kernel_lib.bench.scorecard) --------

_SCORECARD_HELP = """\
How fast the simulated table-14 scorecard runs (Failure Recovery, "Fault injection benchmarks";
issue 20), in one run on this machine: --trajectories seeded six-turn systems-administration
trajectories under each runtime configuration (unmanaged, wal_only, saga_only, synthesized) on
twins of the services, with the scorecard's crash-consistency checks, in interleaved rounds;
against the unmanaged configuration (the same log, gate and services without the recovery
machinery: the baseline) and a bare loop over the same fault draws. Figures: trajectories per
second, time per trajectory as a ratio to unmanaged. Targets: synthesized <= 6x unmanaged per
trajectory; 1,000 x 4 configurations extrapolated <= 60 s.

exit status: 0 when the benchmark ran, whether its targets passed or not (printed PASS or FAIL);
2 on bad input, one error: line. Details: kernel_lib.bench.scorecard."""


def _add_scorecard_cli(sub: "argparse._SubParsersAction") -> None:
    from kernel_lib.cli._args import int_at_least

    def cmd(args: argparse.Namespace) -> int:
        import kernel_lib.bench.scorecard as sb
        progress = None if args.json or not sys.stderr.isatty() else (lambda m: print(f"... {m}", file=sys.stderr))
        result = sb.run_scorecard_bench(args.trajectories, rounds=args.rounds, seed=args.seed, progress=progress)
        print(json.dumps(result, indent=2) if args.json else sb.format_scorecard_bench(result))
        return 0

    p = sub.add_parser("scorecard", help="the simulated scorecard: trajectories per second per configuration",
                       description=_SCORECARD_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trajectories", type=int_at_least(1), default=200, metavar="N",
                   help="trajectories per configuration and round (default 200)")
    p.add_argument("--rounds", type=int_at_least(1), default=3, metavar="N", help="interleaved rounds (default 3)")
    p.add_argument("--seed", type=int, default=0, help="fault-plan seed (default 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object (with targets) instead of a table")
    p.set_defaults(func=cmd)
