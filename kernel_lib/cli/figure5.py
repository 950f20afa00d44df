"""``python -m kernel_lib figure5``: the chapter's figure 5 run for real (Failure Recovery, "Anatomy
of a faulted trajectory"; :mod:`kernel_lib.sim.figure5`, :mod:`kernel_lib.live.figure5`).

:func:`add_commands` registers the command on the CLI's subparsers. Nothing heavy is imported
before the command runs.
"""

from __future__ import annotations

import argparse
import json
import sys

#: the top-level command of this group and its one-line help (``python -m kernel_lib --help``)
COMMANDS = {"figure5": "figure 5 for real: the six-turn sysadmin trajectory under its four injected failures, "
                       "on the simulated twins or (--live) on live services with a real SIGKILL (Failure Recovery)"}

_DESCRIPTION = """\
Run the systems-administration trajectory of the chapter's figure 5 under the synthesized runtime
(H = <K_sched, L_wal, S_saga, G_gate>): clone the repository, inspect its migrations, provision a
staging database, apply a migration, update the configuration, deploy to production. Four
failures are injected:

  turn 3  the answer to provision_db is lost after the database was created: the runtime asks
          the database service by the operation id it logged before sending (one database)
  turn 4  the migration's SQL has a syntax error, which the database service finds by running it
          in SQLite (422): D(Omega) repairs it forward, within K_repair = 2
  turn 5  the worker process dies right after the configuration update's intent is durable: a
          new process folds the log (the saga ledger Sigma rebuilt, no committed turn lost), asks
          the config service about the update in doubt, and sends it once
  turn 6  the restarted model proposes the deploy at once, claiming every check passes: the
          pre-pivot gate's deterministic checks fail (the configuration is not there yet) and the
          pivot is held; once turn 5 is finished the checks pass and the deploy goes out

Each failure is judged by the services' own counts (what they received and applied), never by
our log alone. Default: the simulated twins on a virtual clock (deterministic, well under a
second). --live: the tool services and the credential broker as processes on loopback, the log
in an SQLite file, the worker its own process killed by a real SIGKILL, the recovery a new
process (a few seconds; RTO measured on the wall clock)."""

_EPILOG = """\
JSON keys: "substrate", "trajectory_id", "config", "state", "ok", "failures" (each "turn",
"tool", "failure", "expected", "what happened", "evidence", "ok"), "turns", "verdicts", "held",
"kill", "rto_s", "rto_note", "virtual_s", "counts", "invariant_ok", "crashes", "messages" (the
ladder between the four lifelines: "index", "source", "target", "label", "position", "turn",
"kind", "operation_id", "event_type", "detail"); --live adds "signal", "worker_pid",
"worker_exit", "recovery_pid", "timings".

exit status: 0 every failure was met as figure 5 says (ok); 1 one was not; 2 error.

examples:
  python -m kernel_lib figure5
  python -m kernel_lib figure5 --ladder
  python -m kernel_lib figure5 --live --json"""


def timings_text(timings: dict) -> str:
    """``{"fleet_start_s": 2.3, ...}`` as ``fleet start 2.300 s, ...``: the unit once, after the number."""
    return ", ".join(f"{k.removesuffix('_s').replace('_', ' ')} {v:.3f} s" for k, v in timings.items())


def format_figure5(r: dict, *, ladder: bool = False) -> str:
    """The run as text: the four failures, the gate's verdicts, the kill, and (``ladder``) the messages."""
    lines = [f"figure 5 on {r['substrate']}: trajectory {r['trajectory_id']} ({r['config']}) ended {r['state']}; "
             f"{'ok' if r['ok'] else 'NOT ok'}", ""]
    for f in r["failures"]:
        lines.append(f"turn {f['turn']}  {f['failure']}  [{'ok' if f['ok'] else 'FAILED'}]")
        lines.append(f"        expected: {f['expected']}")
        lines.append(f"        happened: {f['what happened']}")
    lines.append("")
    for v in r["verdicts"]:
        checks = ", ".join(f"{c['name']} {'passed' if c['passed'] else 'FAILED'}" for c in v["checks"])
        lines.append(f"gate verdict at log position {v['position']}: {'passed' if v['passed'] else 'held'} ({checks})")
    rto = r.get("rto_s")
    lines.append(f"RTO {rto:.3f} s ({r['rto_note']})" if isinstance(rto, (int, float)) else f"RTO: {r['rto_note']}")
    if r.get("timings"):
        lines.append("measured: " + timings_text(r["timings"]))
    if ladder:
        lines += ["", "the ladder (position, turn, kind, from -> to: message):"]
        for m in r["messages"]:
            pos = "" if m["position"] is None else f"#{m['position']}"
            lines.append(f"  {pos:>5} t{m['turn']} {m['kind']:<10} {m['source']} -> {m['target']}: {m['label']}")
    return "\n".join(lines)


def _cmd_figure5(args: argparse.Namespace) -> int:
    if args.client_timeout is not None and not args.live:
        print("error: --client-timeout applies to --live only (the twins run on a virtual clock)", file=sys.stderr)
        return 2
    if args.live:
        from kernel_lib.live.figure5 import run_figure5_live
        result = run_figure5_live(client_timeout_s=1.0 if args.client_timeout is None else args.client_timeout)
    else:
        from kernel_lib.sim.figure5 import run_figure5
        result = run_figure5()
    if args.json:
        print(json.dumps(result, indent=2, allow_nan=False, default=str))
    else:
        print(format_figure5(result, ladder=args.ladder))
    return 0 if result["ok"] else 1


def add_commands(subparsers: "argparse._SubParsersAction") -> argparse.ArgumentParser:
    from kernel_lib.cli._args import positive_seconds

    p = subparsers.add_parser("figure5", help=COMMANDS["figure5"], description=_DESCRIPTION, epilog=_EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--live", action="store_true",
                   help="live services as processes, a real SIGKILL of the worker at turn 5 (a few seconds)")
    p.add_argument("--json", action="store_true", help="print the run as one JSON object")
    p.add_argument("--ladder", action="store_true", help="also print every message of the ladder (text output)")
    p.add_argument("--client-timeout", type=positive_seconds, default=None, metavar="S",
                   help="--live: how long the worker waits for a service's answer (the lost answer at turn 3 "
                        "costs this much; default 1; at most 15, half the time the services hold that answer)")
    p.set_defaults(func=_cmd_figure5)
    return p
