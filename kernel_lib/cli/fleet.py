"""``python -m kernel_lib fleet run``: the worker fleet on this host (Failure Recovery, "Fault-Tolerant
System Synthesis"; Chapter 11 §11.5.1; :mod:`kernel_lib.live.fleet`).

:func:`add_commands` registers the command on the CLI's subparsers. Nothing heavy is imported
before the command runs.
"""

from __future__ import annotations

import argparse
import json
import sys

#: the top-level command of this group and its one-line help (``python -m kernel_lib --help``)
COMMANDS = {"fleet": "the worker fleet: N worker processes, a durable queue, ownership leases, takeover of a "
                     "SIGKILLed worker's trajectory, shared circuit breakers (Failure Recovery)"}

_DESCRIPTION = """\
Run M trajectories on N real worker processes of this host and report what happened, judged by the
tool services' own audit trails.

The fleet starts, in a temporary directory removed at the end: the tool services and the credential
broker (real processes on loopback), a durable queue (an SQLite file: claims in BEGIN IMMEDIATE
transactions, FIFO with priority), an ownership coordinator (an SQLite file, or etcd leases on a
three-member cluster it starts with --coordinator etcd), a breaker store every worker shares, and
the workers. Each worker claims a trajectory, takes ownership under a lease (a new owner_epoch,
installed as the log's fence before the log is read), renews it every third of its ttl while it
runs the trajectory's program (default: the deployment saga T1..T5), and records the result.

--kill-every S sends a real SIGKILL to a random busy worker every S seconds (and starts a
replacement). Its trajectory waits until the dead worker's lease expires; another worker claims it,
takes a higher owner_epoch and resumes from the log (committed steps answered from the log, an
in-doubt step settled by the service's status lookup). The RTO of each takeover is measured and
split: lease expiry wait, claim, takeover (grant, fence, token revocation), log open + fold, probes,
rest.

--durability off keeps each trajectory's log in its worker's memory (nothing survives the worker: a
takeover starts again from the first step, and only the services' idempotency keys prevent
duplicated effects); on (default) writes it to an SQLite file at the fdatasync tier.

A trajectory claimed 5 times without finishing (a poison trajectory: it keeps losing its workers)
is not run forward again: the next claim is compensation-only (a new owner fences the log, settles
a step left executing by the status lookup, and undoes what the log shows done; the trajectory ends
ABORT_CONSISTENT). If that unwind itself loses its worker 3 times, the trajectory is failed GAVE_UP
and its result lists the resources left at the services (the residue an operator must handle)."""

_EPILOG = """\
JSON keys: "fleet" (workers, coordinator, store, durability, lease_ttl_s, breaker, timings),
"summary" (trajectories, states, outcomes, unwound_after_give_up, gave_up, takeovers, kills, fenced,
fast_fails, forward_repeated, compensators_repeated, effects_left_unlisted, rto_s {n, mean, max,
parts_mean}), "throughput_per_s", "wall_s", "kills" (one record per SIGKILL), "trajectories" (per
trajectory: state, outcome, mode, owners, takeovers, rto, services), "ok".

exit status: 0 every trajectory ended (done) and the services counted no effect applied twice and no
resource left unlisted; 1 otherwise (or the run timed out); 2 a bad option (one error: line).

examples:
  python -m kernel_lib fleet run --workers 3 --trajectories 20 --kill-every 0.5
  python -m kernel_lib fleet run --workers 2 --trajectories 10 --coordinator etcd --json
  python -m kernel_lib fleet run --workers 2 --trajectories 10 --durability off --kill-every 0.4"""


def _param(text: str) -> tuple[str, object]:
    """argparse type: ``KEY=VALUE``, the value read as JSON when it parses, else kept as text."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def _fmt(r: dict) -> str:
    s = r["summary"]
    f = r["fleet"]
    lines = [f"fleet: {f['workers']} workers, coordinator {f['coordinator']}, log {f['store']} "
             f"(durability {f['durability']}), lease ttl {f['lease_ttl_s']:g} s",
             f"{s['trajectories']} trajectories in {r['wall_s']:.2f} s (measured): "
             f"{r['throughput_per_s']:.2f} trajectories/s",
             "states: " + ", ".join(f"{k} {v}" for k, v in sorted(s["states"].items())),
             "outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(s["outcomes"].items())),
             f"given up on forward progress: {s['unwound_after_give_up']} unwound (compensation only), "
             f"{s['gave_up']} given up with their residue listed",
             f"kills (SIGKILL): {s['kills']}, takeovers: {s['takeovers']}, stale owners fenced: {s['fenced']}, "
             f"breaker fast fails: {s['fast_fails']}",
             f"counted by the services: effects applied twice {s['forward_repeated']}, compensators applied twice "
             f"{s['compensators_repeated']}, resources left unlisted {s['effects_left_unlisted']}"]
    rto = s["rto_s"]
    if rto["n"]:
        lines.append(f"RTO over {rto['n']} takeovers (measured): mean {rto['mean']:.3f} s, max {rto['max']:.3f} s; "
                     "mean parts: " + ", ".join(f"{k.removesuffix('_s')} {v:.3f} s"
                                                 for k, v in rto["parts_mean"].items() if v is not None))
    lines.append("ok" if r["ok"] else "NOT OK: see the counts above")
    return "\n".join(lines)


def run_fleet(args: argparse.Namespace) -> dict:
    """The command's work (also used by tests): start, submit, wait (killing), judge, stop."""
    import time

    from kernel_lib.errors import FleetTimeoutError
    from kernel_lib.live.fleet import Fleet
    from kernel_lib.live.fleet_programs import check_params

    # an unknown program, or a parameter it would refuse: ConfigError (exit 2) before anything starts
    check_params(args.program, dict(args.param))

    with Fleet(args.workers, coordinator=args.coordinator, store=args.store, durability=args.durability,
               lease_ttl_s=args.lease_ttl, workdir=args.dir) as fleet:
        t0 = time.monotonic()
        ids = fleet.submit(args.trajectories, program=args.program, params=dict(args.param))
        timed_out = None
        try:
            fleet.wait(ids, timeout_s=args.timeout, kill_every_s=args.kill_every, seed=args.seed)
        except FleetTimeoutError as exc:
            timed_out = str(exc)
        wall = time.monotonic() - t0
        results = fleet.results(ids)
        summary = fleet.summary(results)
        ok = (timed_out is None and summary["states"].get("done", 0) == len(ids)
              and summary["forward_repeated"] == 0 and summary["compensators_repeated"] == 0
              and summary["effects_left_unlisted"] == 0)
        return {"fleet": fleet.describe(), "summary": summary, "wall_s": round(wall, 6),
                "throughput_per_s": round(len(ids) / wall, 6) if wall > 0 else None,
                "kills": fleet.queue.kills(), "trajectories": results, "timed_out": timed_out, "ok": ok}


def _cmd_run(args: argparse.Namespace) -> int:
    r = run_fleet(args)
    if args.json:
        print(json.dumps(r, indent=2, default=str))
    else:
        print(_fmt(r))
        if r["timed_out"]:
            print(f"timed out: {r['timed_out']}", file=sys.stderr)
    return 0 if r["ok"] else 1


def add_commands(subparsers: "argparse._SubParsersAction") -> argparse.ArgumentParser:
    from kernel_lib.cli._args import int_at_least, positive_seconds

    fleet = subparsers.add_parser("fleet", help=COMMANDS["fleet"], description=_DESCRIPTION,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = fleet.add_subparsers(dest="fleet_command", metavar="SUBCOMMAND")
    p = sub.add_parser("run", help="run M trajectories on N workers, optionally SIGKILLing workers",
                       description=_DESCRIPTION, epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int_at_least(1), default=2, metavar="N", help="worker processes (default 2)")
    p.add_argument("--trajectories", type=int_at_least(1), default=10, metavar="M",
                   help="trajectories to run (default 10)")
    p.add_argument("--kill-every", type=positive_seconds, default=None, metavar="S",
                   help="SIGKILL a random busy worker every S seconds and start a replacement (default: no kills)")
    p.add_argument("--coordinator", choices=("sqlite", "etcd"), default="sqlite",
                   help="where ownership leases live: an SQLite file, or etcd (a 3-member cluster on loopback)")
    p.add_argument("--store", choices=("sqlite", "segment"), default="sqlite",
                   help="the durable log store, one log per trajectory (default sqlite)")
    p.add_argument("--durability", choices=("on", "off"), default="on",
                   help="on: logs at the fdatasync tier; off: logs in the worker's memory (default on)")
    p.add_argument("--lease-ttl", type=positive_seconds, default=None, metavar="S",
                   help="ownership lease term in seconds, renewed every third of it (default 1 on sqlite, 2 on etcd)")
    p.add_argument("--program", default="deployment",
                   help="the registered trajectory program: deployment (the deployment saga T1..T5) or sysadmin "
                        "(figure 5's six-turn trajectory under a runtime configuration); default deployment")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", type=_param,
                   help="a parameter of every trajectory (VALUE read as JSON, else as text); repeatable, e.g. "
                        "--param fail_at_dns=true")
    p.add_argument("--timeout", type=positive_seconds, default=120.0, metavar="S",
                   help="give up waiting after S seconds (exit 1; default 120)")
    p.add_argument("--seed", type=int, default=None, help="seed of the choice of worker to kill")
    p.add_argument("--dir", default=None, help="where the fleet's temporary directory goes (default: system temp)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd_run)

    def no_sub(args: argparse.Namespace) -> int:
        fleet.print_help(sys.stderr)
        return 2

    fleet.set_defaults(func=no_sub)
    return fleet
