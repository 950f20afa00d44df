"""``python -m kernel_lib crashcheck``: every crash state of recorded workloads (by default the
segment log's; ``--workload`` adds the checkpoint-capture and payload-ordering ones)."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # the engine and its workloads are imported only when crashcheck is chosen
    from kernel_lib.verify.engine import CrashWorkload

#: the top-level command of this group and its one-line help (``python -m kernel_lib --help``)
COMMANDS = {"crashcheck": "crash-test the segment log (and checkpoints, payloads): every crash state of "
                          "recorded workloads"}


def _other_workloads() -> tuple[str, ...]:
    """Workloads run only when named with --workload (the default stays the segment log's four)."""
    from kernel_lib.verify.barrier_workload import OneBarrierWorkload
    from kernel_lib.verify.checkpoint_workload import CaptureWorkload
    from kernel_lib.verify.payload_workload import ORDERS
    return (CaptureWorkload.name, *ORDERS, OneBarrierWorkload.name)

_EPILOG = """\
crash states, for a crash after every recorded file operation:
  process  every write so far survives (the page cache outlives the process)
  host     only writes/truncates covered by a later completed fdatasync of the file, and
           creates/removes covered by a later fsync of the directory, survive
  subset   the process state minus a subset of the unsynced writes (all subsets up to 4
           unsynced writes, else a seeded sample): out-of-order persistence
  torn     the last unsynced write persisted up to a 512-byte sector boundary, the rest
           missing, zero-filled or garbage, on top of the process or the host state

checks on every state of a segment-log workload: (1) reopen reports no corruption; (2) every
event and fence acknowledged at fdatasync (and, in process states, at write) is present and
byte-identical; (3) each trajectory holds a prefix of what was written to it; (4) the next
append (head+1) is accepted and survives a clean reopen.
checkpoint-capture (§11.4.1): every acknowledged checkpoint is published; restore at the head
uses the newest surviving one and equals the fold of the log; a new capture works.
payload-first / reference-first (§11.8.2): every acknowledged event survives and names stored
bytes (reference-first is the unsafe order: it is expected to show violations).

exit status: 0 if no violation, 1 if any, 2 on a usage or kernel error.
"""


def _description() -> str:
    from kernel_lib.verify.log_workload import WORKLOADS
    head = ("Record built-in workloads on the segment log through a recording file system, build\n"
            "every crash state (process crash, host crash, out-of-order and torn writes), reopen\n"
            "the store on each and check every acknowledgment's promise (§11.3.1, table 2).\n\n"
            "workloads:\n")
    body = "".join(textwrap.fill(w.description, width=88, initial_indent=f"  {w.name:<20} ",
                                 subsequent_indent=" " * 23) + "\n" for w in WORKLOADS.values())
    others = "".join(textwrap.fill(w.description, width=88, initial_indent=f"  {w.name:<20} ",
                                   subsequent_indent=" " * 23) + "\n" for w in _workloads(_other_workloads()))
    return head + body + "\nonly when named with --workload:\n" + others


def _workloads(names) -> list[CrashWorkload]:
    """The engine workloads for ``names`` (default: the segment log's), each once, in order."""
    from kernel_lib.verify.barrier_workload import OneBarrierWorkload
    from kernel_lib.verify.checkpoint_workload import CaptureWorkload
    from kernel_lib.verify.log_workload import WORKLOADS, SegmentLogWorkload
    from kernel_lib.verify.payload_workload import PayloadWorkload
    out: list[CrashWorkload] = []
    for name in dict.fromkeys(names or WORKLOADS):
        if name in WORKLOADS:
            out.append(SegmentLogWorkload(WORKLOADS[name]))
        elif name == CaptureWorkload.name:
            out.append(CaptureWorkload())
        elif name == OneBarrierWorkload.name:
            out.append(OneBarrierWorkload())
        else:
            out.append(PayloadWorkload(name))
    return out


def _cmd_crashcheck(args: argparse.Namespace) -> int:
    from kernel_lib.verify.engine import explore
    progress = not args.json and sys.stderr.isatty()
    report = explore(_workloads(args.workload), seed=args.seed, max_states=args.max_states, progress=progress,
                     sample_salt="max_states")
    if args.json:
        print(json.dumps(report.to_dict(), sort_keys=True))
    else:
        print(f"{'workload':<22} {'file ops':>8} {'states':>7} {'trimmed':>7} {'violations':>10}  by kind")
        for name, w in report.workloads.items():
            kinds = ", ".join(f"{k} {v}" for k, v in sorted(w["by_kind"].items()))
            print(f"{name:<22} {w['ops']:>8} {w['states_explored']:>7} {w.get('reopen_trimmed', '-'):>7} "
                  f"{w['violations']:>10}  {kinds}")
        print(f"explored {report.states_explored} distinct crash states ({report.states_generated} generated) "
              f"in {report.seconds:.1f} s: {report.violations} violation(s)")
        for d in report.violation_details[:10]:
            print(f"  VIOLATION {d['workload']} after op {d['crash_after_ops']} ({d['last_op']}), "
                  f"{d['state']} {d['torn'] or ''}: {'; '.join(d['problems'])}")
    return 1 if report.violations else 0


def add_commands(subparsers) -> argparse.ArgumentParser:
    """Register the ``crashcheck`` subcommand on an argparse ``subparsers`` object."""
    from kernel_lib.verify.log_workload import WORKLOADS
    names = [*WORKLOADS, *_other_workloads()]
    p = subparsers.add_parser(
        "crashcheck", help=COMMANDS["crashcheck"],
        description=_description(),
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true",
                   help='print one JSON object: {"states_explored": N, "violations": V, ...}')
    p.add_argument("--seed", type=int, default=0, help="seed for event text, sampled subsets and garbage (default 0)")
    p.add_argument("--workload", action="append", choices=names, metavar="NAME",
                   help=f"run only this workload (repeatable); one of {', '.join(names)}")
    p.add_argument("--max-states", type=int, default=None, metavar="N",
                   help="check at most N generated states (a seeded sample) for a quick run")
    p.set_defaults(func=_cmd_crashcheck)
    return p
