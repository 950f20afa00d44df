"""``python -m kernel_lib herd``: the retry storm on a virtual clock (Failure Recovery, "Tool Circuit
Breakers", figure 4 panel (b), Napkin Math 0.4; :mod:`kernel_lib.sim.herd`): the same agents and the
same outage under deterministic backoff, full jitter, and full jitter behind one shared breaker.

:func:`add_commands` registers the command on the CLI's subparsers. Nothing heavy is imported
before the command runs.
"""

from __future__ import annotations

import argparse
import json

#: the top-level command of this group and its one-line help (``python -m kernel_lib --help``)
COMMANDS = {"herd": "retry storm on a virtual clock: N agents, one degraded service, deterministic backoff vs "
                    "full jitter vs full jitter with a shared circuit breaker (Failure Recovery)"}

_DESCRIPTION = """\
Simulate N agent trajectories calling one service through an outage, on a virtual clock (seconds
of simulated time per second of wall time: 10,000 agents take a few seconds), three times with
the same agents and seed:

  deterministic         retry k waits min(T_max, T0*2^k)            (no jitter)
  full_jitter           retry k waits U(0, min(T_max, T0*2^k))      (figure 4 (b))
  full_jitter_breaker   full jitter, and one circuit breaker shared by every agent (table 8:
                        tau_fail 0.6 over 20 calls, one canary, cooldown 5 s doubling to 60 s):
                        while it is open, attempts fail fast and never reach the service

The service: one FIFO queue drained at --capacity requests/s, answering --latency after service.
The outage (--outage-mode): "stall", the service hangs for --outage-s and then restarts,
resetting every request it holds at one instant (the correlated failure that lines retries up);
or "slow", requests served during the outage answer after --degraded-latency and fail with
probability --error-rate. The client times out after --timeout; the server still serves requests
whose client has gone unless --drop-expired. Every agent makes one call (its first within
--start-spread of t = 0) and retries it at most --max-retries times; the scheduler adds a
dispatch jitter of U(0, --dispatch-jitter) to every wake-up.

Reported per policy: the peak arrival rate (arrivals in the busiest dispatch-jitter bin, per
second), the mean arrival rate over the span (until every agent is done and the service idle),
the peak and time-averaged queue depth, goodput (calls that succeeded), calls given up, fast
fails, the server time wasted on requests whose client had left, the breaker's transitions; and
the simulator's speed in agent steps (attempts) per second."""

_EPILOG = """\
JSON keys: "config", "seed", "deterministic", "full_jitter", "full_jitter_breaker" (each with
"peak_arrival_rate_per_s", "mean_arrival_rate_per_s", "peak_queue_depth", "mean_queue_depth",
"goodput", "goodput_per_s", "totals", "breaker_transitions", and "series" with --series),
"simulator" ("agent_steps", "events", "wall_s", "agent_steps_per_s").

exit status: 0 the simulation ran; 2 a bad option (one error: line).

examples:
  python -m kernel_lib herd --agents 10000 --json
  python -m kernel_lib herd --agents 2000 --outage-mode slow --outage-s 30 --error-rate 0.5
  python -m kernel_lib herd --agents 10000 --drop-expired --seed 3"""


def _cmd_herd(args: argparse.Namespace) -> int:
    from kernel_lib.sim.herd import HerdConfig, compare_herd, format_herd

    cfg = HerdConfig(agents=args.agents, capacity_per_s=args.capacity, latency_s=args.latency, timeout_s=args.timeout,
                     queue_limit=args.queue_limit, outage_mode=args.outage_mode, outage_s=args.outage_s,
                     degraded_latency_s=args.degraded_latency, degraded_error_rate=args.error_rate,
                     drop_expired=args.drop_expired, base_s=args.base, cap_s=args.cap, max_retries=args.max_retries,
                     start_spread_s=args.start_spread, dispatch_jitter_s=args.dispatch_jitter,
                     series_bin_s=args.series_bin)
    result = compare_herd(cfg, seed=args.seed, series=args.series or not args.json)
    if args.json:
        print(json.dumps(result, indent=2, allow_nan=False))
    else:
        print(format_herd(result))
    return 0


def add_commands(subparsers: "argparse._SubParsersAction") -> argparse.ArgumentParser:
    from kernel_lib.cli._args import int_at_least, positive_seconds

    def nonneg(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not v >= 0 or v == float("inf"):
            raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
        return v

    p = subparsers.add_parser("herd", help=COMMANDS["herd"], description=_DESCRIPTION, epilog=_EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--agents", type=int_at_least(1), default=10_000, metavar="N",
                   help="agent trajectories (default 10000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the start times, backoff draws and errors (default 0)")
    p.add_argument("--capacity", type=positive_seconds, default=200.0, metavar="REQ_PER_S",
                   help="requests the service completes per second (default 200)")
    p.add_argument("--latency", type=nonneg, default=0.05, metavar="S", help="answer latency after service (0.05)")
    p.add_argument("--timeout", type=positive_seconds, default=5.0, metavar="S", help="client timeout (default 5)")
    p.add_argument("--queue-limit", type=int_at_least(0), default=1_000_000, metavar="N",
                   help="requests that may wait before the service refuses at once (default 1000000)")
    p.add_argument("--outage-mode", choices=("stall", "slow"), default="stall",
                   help="stall: hang, then restart resetting what it holds; slow: degraded latency and errors")
    p.add_argument("--outage-s", type=nonneg, default=3.0, metavar="S", help="outage length from t = 0 (default 3)")
    p.add_argument("--degraded-latency", type=nonneg, default=2.0, metavar="S",
                   help="latency during a slow outage (default 2)")
    def probability(text: str) -> float:
        v = nonneg(text)
        if v > 1:
            raise argparse.ArgumentTypeError(f"is a probability, 0 to 1, got {text!r}")
        return v

    p.add_argument("--error-rate", type=probability, default=0.0, metavar="P",
                   help="failure probability during a slow outage, 0..1 (default 0)")
    p.add_argument("--drop-expired", action="store_true",
                   help="the server skips a request it can no longer answer before the client's timeout")
    p.add_argument("--base", type=positive_seconds, default=1.0, metavar="S", help="backoff base T0 (default 1)")
    p.add_argument("--cap", type=positive_seconds, default=30.0, metavar="S", help="backoff cap T_max (default 30)")
    p.add_argument("--max-retries", type=int_at_least(0), default=8, metavar="N",
                   help="retries per call at most (default 8; retries are never unbounded)")
    p.add_argument("--start-spread", type=nonneg, default=2.0, metavar="S",
                   help="agents' first calls spread uniformly over this many seconds (default 2)")
    p.add_argument("--dispatch-jitter", type=positive_seconds, default=0.002, metavar="S",
                   help="scheduler jitter on every wake-up, also the bin of the peak rate (default 0.002)")
    p.add_argument("--series-bin", type=positive_seconds, default=0.5, metavar="S",
                   help="bin of the time series and the text chart (default 0.5)")
    p.add_argument("--series", action="store_true", help="with --json: include the per-bin series")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(func=_cmd_herd)
    return p
