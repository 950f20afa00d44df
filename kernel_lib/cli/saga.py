"""``python -m kernel_lib saga sweep``: crash the deployment saga at every position (Failure Recovery).

:func:`add_commands` registers the command group on the CLI's subparsers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from pathlib import Path

#: the top-level command of this group and its one-line help (``python -m kernel_lib --help``)
COMMANDS = {"saga": "the trajectory saga: crash sweep of the deployment saga (Failure Recovery)"}

_SWEEP_DESCRIPTION = """\
Run the chapter's deployment saga (T1 provision sandbox, T2 reserve egress IP, T3 compile,
T4 bind firewall, T5 publish DNS, which fails with a 409) once cleanly to count its positions
(every appended event, dispatch and recheck), then once per position: crash right after it,
recover over the surviving log (the same script, re-run, in a new process), and judge the run by
the services' own audit trails:

  compensators_repeated   applications of a compensator beyond the first, per resource
  effects_left_unlisted   committed compensable effects still held and not listed as residue
  forward_repeated        forward effects applied more than once for one operation

The real thing (the default for --store sqlite, segment and etcd): --services live --crash
sigkill. The broker and the nine tool services run as processes on loopback, each with its state
in an SQLite file of its own (synchronous=FULL); one fleet serves the whole sweep, and each run
has its own trajectory id, saga id and capability leases and is judged on its own operations only
(the services are not reset between runs). A worker process runs the saga over the store (an
SQLite file or segment directory per run; --store etcd: one three-member etcd cluster on loopback
for the sweep, which `make quorum` installs), pauses right after position k, and is killed with a
real SIGKILL; a recovery process opens the log and finishes the unwind. Both are forked from a
server process that imported the saga's modules once (about 0.3 s a position instead of 1.6 s);
each is still a process of its own, with its own pid and session.

Fast and exhaustive: --services twins --crash process|host (the default for --store memory). The
services are simulated twins in process and the crash is simulated (the worker's handle is
dropped; --crash host cuts the memory log at its durable head)."""

_EPILOG = """\
exit status: 0 every position recovered clean (ok), 1 some did not, 2 error. An error is one
`error:` line on stderr; with --json it is also one JSON object {"error": ...} on stdout (as
`exercise grade --json`). A position past the clean run's last one is refused after the clean run
(the number of positions is known only then).

examples:
  python -m kernel_lib saga sweep --store sqlite --json
  python -m kernel_lib saga sweep --store etcd --positions 24,49
  python -m kernel_lib saga sweep --store segment --services twins
  python -m kernel_lib saga sweep --store memory --crash host --json"""


def _positions(text: str) -> list[int]:
    """argparse type of --positions: distinct integers >= 1, comma-separated, no empty item."""
    items = [x.strip() for x in text.split(",")]
    if any(not x for x in items):
        raise argparse.ArgumentTypeError(f"{text!r} has an empty item; give positions as K,K,... (e.g. 24,49)")
    try:
        out = [int(x) for x in items]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of positions") from None
    if any(k < 1 for k in out):
        raise argparse.ArgumentTypeError("positions are integers >= 1")
    repeated = sorted({k for k in out if out.count(k) > 1})
    if repeated:
        raise argparse.ArgumentTypeError(f"{text!r} names position{'s' if len(repeated) > 1 else ''} "
                                         f"{', '.join(map(str, repeated))} more than once")
    return out


def add_commands(subparsers: "argparse._SubParsersAction") -> argparse.ArgumentParser:
    p = subparsers.add_parser("saga", help=COMMANDS["saga"], description=COMMANDS["saga"])
    sub = p.add_subparsers(dest="saga_command", metavar="COMMAND", required=True)
    s = sub.add_parser("sweep", help="crash the deployment saga at every position and recover",
                       description=_SWEEP_DESCRIPTION, epilog=_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("--store", choices=("memory", "sqlite", "segment", "etcd"), default="sqlite",
                   help="the trajectory log's store (default: sqlite)")
    s.add_argument("--services", choices=("live", "twins"), default=None,
                   help="live: service processes on loopback; twins: simulated in process (default: live, "
                        "twins for --store memory)")
    s.add_argument("--crash", choices=("sigkill", "process", "host"), default=None,
                   help="sigkill: a worker process killed for real (live services); process: every written event "
                        "survives; host: only what a barrier covered (memory only) (default: sigkill with live "
                        "services, process with twins)")
    s.add_argument("--scenario", choices=("deployment", "compensator_panic"), default="deployment",
                   help="live services: deployment (T5 fails, the unwind succeeds) or compensator_panic (C4 answers "
                        "a final 409: PANIC and the ACB freeze; residue listed) (default: deployment)")
    s.add_argument("--positions", type=_positions, default=None, metavar="K,K,...",
                   help="only these positions, each named once (default: every position)")
    s.add_argument("--dir", type=Path, default=None, help="where the store files go (default: a temporary folder)")
    s.add_argument("--json", action="store_true", help="one JSON object")
    s.set_defaults(func=_sweep)
    return p


def _choose(args: argparse.Namespace) -> tuple[str, str]:
    from kernel_lib.errors import ConfigError

    services = args.services or ("twins" if args.store == "memory" else "live")
    crash = args.crash or ("sigkill" if services == "live" else "process")
    if services == "live" and args.store == "memory":
        raise ConfigError("--services live needs a store a worker process can open (sqlite, segment or etcd); "
                          "the memory store runs with --services twins")
    if services == "live" and crash != "sigkill":
        raise ConfigError(f"--crash {crash} is simulated in process on the twins (--services twins); the live "
                          "services run with a worker process killed by --crash sigkill")
    if services == "twins" and crash == "sigkill":
        raise ConfigError("--crash sigkill kills a worker process, which reaches the live services (--services live); "
                          "the twins live in this process's memory")
    if services == "twins" and args.scenario != "deployment":
        raise ConfigError("--scenario compensator_panic runs on the live services (the twins sweep is covered by "
                          "tests/test_saga.py)")
    return services, crash


def _sweep(args: argparse.Namespace) -> int:
    from kernel_lib.errors import KernelError

    try:
        return _run_sweep(args)
    except KernelError as exc:
        if not args.json:
            raise   # the main CLI prints it as one error: line, exit 2
        print(f"error: {exc}", file=sys.stderr)
        print(json.dumps({"error": str(exc)}))
        return 2


def _run_sweep(args: argparse.Namespace) -> int:
    import time

    from kernel_lib.errors import ConfigError

    services, crash = _choose(args)
    if args.dir is not None and not args.dir.is_dir():   # before any fleet or store starts
        raise ConfigError(f"--dir {str(args.dir)!r} is not an existing directory")
    progress_on = not args.json and sys.stderr.isatty()
    t0 = time.monotonic()
    if services == "live":
        from kernel_lib.live.saga_worker import sweep_live

        result = sweep_live(args.store, positions=args.positions, scenario=args.scenario, workdir=args.dir,
                            progress=progress_on)
    else:
        result = _sweep_twins(args, crash, progress_on)
        result.setdefault("timings", {})["sweep_s"] = round(time.monotonic() - t0, 3)
    if args.json:
        print(json.dumps(result, default=str))
    else:
        print(f"saga sweep: store {result['store']}, services {result['services']}, {result['crash']} crash")
        print(f"  positions tried          {result['positions']}")
        print(f"  compensators repeated    {result['compensators_repeated']}")
        print(f"  effects left unlisted    {result['effects_left_unlisted']}")
        print(f"  forward effects repeated {result['forward_repeated']}")
        print(f"  seconds                  {result['timings']['sweep_s']}")
        expected = ("PANIC", "FROZEN") if result.get("scenario") == "compensator_panic" else ("ABORT_CONSISTENT",)
        bad = [r for r in result["runs"] if not str(r["outcome"]).startswith(expected) or r["compensators_repeated"]
               or r["effects_left_unlisted"] or r["forward_repeated"]]
        for r in bad[:10]:
            print(f"  position {r['position']} ({r['crashed_after']}): {r['outcome']}")
        for e in result.get("errors", [])[:10]:
            print(f"  position {e['position']}: {e['error']}")
        print("  ok: every position recovered with each committed effect compensated exactly once or listed as "
              "residue" if result["ok"] else "  NOT ok")
    return 0 if result["ok"] else 1


def _sweep_twins(args: argparse.Namespace, crash: str, progress_on: bool) -> dict:
    from tqdm import tqdm

    from kernel_lib.sim.saga_sweep import sweep_twins

    with tempfile.TemporaryDirectory(prefix="saga-sweep-", dir=args.dir) as tmp, contextlib.ExitStack() as stack:
        opener = None
        if args.store in ("sqlite", "segment"):
            from kernel_lib.log import open_store

            def opener(k: int, reopen: bool, kind: str = args.store):
                path = Path(tmp) / f"run-{k:04d}.{'sqlite' if kind == 'sqlite' else 'log'}"
                return open_store(kind, path, create=not reopen)
        elif args.store == "etcd":
            from kernel_lib.log import open_store
            from kernel_lib.quorum.cluster import EtcdCluster

            cluster = stack.enter_context(EtcdCluster(3, work_dir=Path(tmp) / "etcd"))
            endpoints = ",".join(cluster.endpoints())

            def opener(k: int, reopen: bool):
                return open_store("etcd", endpoints)

        bar = stack.enter_context(tqdm(desc=f"saga sweep ({args.store}, twins, {crash})", unit="position",
                                       file=sys.stderr, disable=not progress_on))

        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        result = sweep_twins(crash=crash, positions=args.positions, progress=progress, open_store=opener,
                             store_name=args.store)
    result["services"] = "twins"
    return result
