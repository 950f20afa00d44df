"""``python -m kernel_lib quorum-demo`` and ``quorum-placement``: real faults on real etcd members."""

from __future__ import annotations

import argparse
import json
import sys

#: the top-level commands of this group and their one-line help (``python -m kernel_lib --help``)
COMMANDS = {
    "quorum-cluster": "run N etcd members on loopback until Ctrl-C (for your own experiments with --store etcd)",
    "quorum-demo": "kill etcd members under a live log and check every acknowledged event survives (§11.3.1 row 3)",
    "quorum-placement": "which acknowledgments survive losing the worker's volume, by member placement (exercise 1)",
}

_DEMO = """\
Start three etcd members on loopback, append trajectory events through the quorum store, SIGKILL
the leader (appends go on: two of three is a majority), kill a second member (an append is not
acknowledged and the command says so), restart both, check that every acknowledged event is in
the log in order, and stop every member it started (by pid).

JSON keys: members, acknowledged, acknowledged_lost, stalled_without_majority, stall_waited_s,
unacknowledged_later_present, log_head_after_restart, in_order, steps (per phase: members alive,
appends, mean acknowledgment latency in ms, measured), processes_started, processes_left_running.
Exit status 0 when nothing acknowledged was lost and the append without a majority stalled."""

_PLACEMENT = """\
The placement question of exercise 1 (§11.12), run for real: put COLOCATED of the members on the
worker's volume, acknowledge appends with only a bare majority alive (the spare off-volume
members paused), delete the worker's volume (its co-located members with it), and count which
acknowledged events survive and how many copies of each existed outside the worker's volume."""


def _cmd_demo(args: argparse.Namespace) -> int:
    progress = None if args.json else (lambda msg: print(msg, file=sys.stderr, flush=True))
    try:
        from kernel_lib.quorum.demo import quorum_demo
        rep = quorum_demo(per_phase=args.per_phase, timeout_s=args.timeout, progress=progress)
    except KeyboardInterrupt:
        print("quorum-demo: interrupted; every member it started was stopped", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps(rep.to_dict(), indent=2))
    else:
        print(f"acknowledged: {rep.acknowledged}, acknowledged and lost: {rep.acknowledged_lost}, "
              f"append without a majority stalled: {rep.stalled_without_majority} "
              f"(waited {rep.stall_waited_s:.1f} s), members left running: {rep.processes_left_running}")
    return 0 if rep.acknowledged_lost == 0 and rep.stalled_without_majority else 1


def _cmd_placement(args: argparse.Namespace) -> int:
    from kernel_lib.quorum.demo import placement_demo
    reps = [placement_demo(k, members=args.members, appends=args.appends)
            for k in (args.colocated if args.colocated else range(args.members // 2 + 2))]
    if args.json:
        print(json.dumps([r.to_dict() for r in reps], indent=2))
    else:
        for r in reps:
            policy = "meets" if r.copies_outside_worker_volume >= 2 else "fails"
            print(f"{r.colocated} of {r.members} members on the worker's volume: {r.survived}/{r.acknowledged} "
                  f"acknowledged events survived; copies outside the volume per acknowledgment: "
                  f"{r.copies_outside_worker_volume}, so it {policy} the worksheet's two-copies-off-the-volume "
                  f"policy ({r.verdict})")
    return 0


def _cmd_cluster(args: argparse.Namespace) -> int:
    import signal
    import threading

    from kernel_lib.quorum.cluster import EtcdCluster

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    cluster = EtcdCluster(args.members, work_dir=args.dir)
    try:
        try:
            cluster.start()
        except KeyboardInterrupt:
            return 130
        info = {"endpoints": cluster.endpoints(), "store_path": ",".join(cluster.endpoints()),
                "members": cluster.status(), "work_dir": str(cluster.work_dir)}
        until = f"stopping after {args.seconds:g} s" if args.seconds else "Ctrl-C stops every one"
        print(json.dumps(info, indent=2) if args.json else
              f"{args.members} etcd members up; client URLs (for open_store('etcd', ...) / EtcdStore in Python, or "
              f"etcdctl --endpoints):\n  {info['store_path']}\n"
              f"pids: {[m['pid'] for m in info['members']]}; {until}", flush=True)
        stop.wait(args.seconds if args.seconds else None)
    finally:
        cluster.stop()
        if not args.json:
            print(f"stopped {len(cluster.members)} members", file=sys.stderr)
    return 0


def add_commands(subparsers: "argparse._SubParsersAction") -> None:
    """Register ``quorum-demo``, ``quorum-placement`` and ``quorum-cluster``."""
    c = subparsers.add_parser("quorum-cluster", help=COMMANDS["quorum-cluster"],
                              description="Start N etcd members on 127.0.0.1 (free ports), print their client URLs "
                                          "(the store path of `--store etcd`) and pids, keep them running until "
                                          "Ctrl-C, SIGTERM or --seconds, then stop every one by pid.")
    c.add_argument("--members", type=int, default=3, help="how many (1..7, default 3)")
    c.add_argument("--dir", metavar="PATH", help="keep data directories here (default: a temporary directory, "
                                                  "removed at the end)")
    c.add_argument("--seconds", type=float, default=0, help="stop after this many seconds (default: wait for Ctrl-C)")
    c.add_argument("--json", action="store_true", help="print the endpoints and pids as JSON")
    c.set_defaults(func=_cmd_cluster)
    p = subparsers.add_parser("quorum-demo", help=COMMANDS["quorum-demo"],
                              description=_DEMO, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--per-phase", type=int, default=5, metavar="N", help="appends per phase (default 5)")
    p.add_argument("--timeout", type=float, default=2.0, metavar="S",
                   help="seconds an append waits for a majority before it is reported unacknowledged (default 2)")
    p.set_defaults(func=_cmd_demo)
    q = subparsers.add_parser("quorum-placement", help=COMMANDS["quorum-placement"],
                              description=_PLACEMENT, formatter_class=argparse.RawDescriptionHelpFormatter)
    q.add_argument("--colocated", type=int, action="append", metavar="K",
                   help="members on the worker's volume (repeatable; default: 0 up to a majority)")
    q.add_argument("--members", type=int, default=3, help="cluster size (default 3)")
    q.add_argument("--appends", type=int, default=5, help="events acknowledged before the volume is lost (default 5)")
    q.add_argument("--json", action="store_true", help="print the reports as JSON")
    q.set_defaults(func=_cmd_placement)
