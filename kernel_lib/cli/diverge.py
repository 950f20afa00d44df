"""``python -m kernel_lib diverge LOG_A LOG_B``: where two recorded executions first disagree (§11.7).

:func:`add_commands` registers the subcommand on the CLI's subparsers.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # the divergence locator is imported only when ``diverge`` runs
    from kernel_lib.history.diverge import Equivalence

#: the top-level command of this group and its one-line help (``python -m kernel_lib --help``)
COMMANDS = {"diverge": "locate the first boundary where two executions differ (§11.7)"}

_DESCRIPTION = """\
Compare two recorded executions boundary by boundary (Durable Execution §11.7) and report the
earliest boundary where they stop agreeing under a declared equivalence relation.

Each log is cut into boundaries in its recorded order, each in one category of table 6:
  {c0:<18} ContextBuilt: the delivered input of a model invocation (text, or digest)
  {c1:<18} ModelReplied: status, reply, proposal, tokens, provider, and the request
                     it answered (model, request_config)
  {c2:<18} Authorized, BudgetReserved/Settled, ToolIntent (tool, arguments, target
                     snapshot), ControlChanged, PlanChanged, approvals, ...
  {c3:<18} ToolResult: status, outcome, observation_complete
Boundaries pair up by invocation/operation identity, never by position alone; when the two runs
share no identities (imported logs with generated ids), identities are renamed by order of first
appearance (@1, @2, ...) and the report says so. Event ids, sequence numbers, epochs, job
handles and signatures are never compared.

The report gives the last verified boundary, the first mismatch with its category and a diff,
the evidence confirmed identical, later differences (likely consequences), missing evidence
(e.g. a delivered input kept only as a digest, a log that ends early), and what the result does
and does not establish.
"""

_EPILOG = """\
exit status: 0 no mismatch found, 1 a mismatch was found, 2 error (unreadable or malformed log,
bad option).

examples:
  python -m kernel_lib diverge run_a.jsonl run_b.jsonl
  python -m kernel_lib diverge run_a.jsonl run_b.jsonl --json
  python -m kernel_lib diverge a.jsonl b.jsonl --ignore ModelReplied.provider --normalize-whitespace
  python -m kernel_lib diverge a.jsonl b.jsonl --mask '/tmp/[A-Za-z0-9_]+' --cost-tolerance 0.001
  python -m kernel_lib diverge a.jsonl b.jsonl --ignore-timestamps --ignore-durations

Supporting evidence (the task start, runtime and configuration inputs) that differs is shown in
full: every differing path with its complete values on both sides, never cut short, so the
configuration difference behind a first divergence can be read off the report.
"""


def add_commands(subparsers: "argparse._SubParsersAction") -> argparse.ArgumentParser:
    """Register ``diverge`` on an argparse ``subparsers`` object; the parser's ``func`` is
    ``(args) -> exit code``."""
    from kernel_lib.history.diverge import CATEGORIES
    p = subparsers.add_parser("diverge", help=COMMANDS["diverge"],
                              description=_DESCRIPTION.format(**{f"c{i}": c for i, c in enumerate(CATEGORIES)}),
                              epilog=_EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("log_a", metavar="LOG_A", help="the reference log: a .jsonl file of canonical events, a SQLite "
                                                  "log file or a segment-log directory")
    p.add_argument("log_b", metavar="LOG_B", help="the log compared with it (same formats)")
    p.add_argument("--trajectory-a", metavar="ID", help="trajectory of LOG_A when it holds several")
    p.add_argument("--trajectory-b", metavar="ID", help="trajectory of LOG_B when it holds several")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    g = p.add_argument_group("equivalence (default: exact canonical equality of the compared payload fields)")
    g.add_argument("--ignore", action="append", default=[], metavar="FIELD",
                   help="drop a key before comparing (repeatable): a plain name at any depth ('reply', "
                        "'duration_s'), or EventType.path for one type ('ToolResult.outcome.log', "
                        "'ModelReplied.request')")
    g.add_argument("--ignore-timestamps", action="store_true",
                   help="drop keys named like points in time (timestamp, created_at, *_unix_s, start_time, ...; "
                        "the pattern is kernel_lib.history.diverge.TIMESTAMP_KEY). Durations are NOT dropped: "
                        "add --ignore-durations for those")
    g.add_argument("--ignore-durations", action="store_true",
                   help="drop keys named like lengths of time (duration_s, elapsed_ms, latency_s, execution_time, "
                        "execution_time_s as the swe-agent importer writes it, wall_time, ...; the pattern is "
                        "kernel_lib.history.diverge.DURATION_KEY). Independent of --ignore-timestamps")
    g.add_argument("--normalize-whitespace", action="store_true",
                   help="collapse whitespace runs in strings to one space and strip the ends")
    g.add_argument("--mask", action="append", default=[], metavar="REGEX",
                   help="replace matches of REGEX inside strings by <masked> (repeatable)")
    g.add_argument("--embedded-json", action="store_true",
                   help="compare strings holding a JSON object or array as parsed data (key order, spacing)")
    g.add_argument("--ignore-list-order", action="store_true", help="compare lists as multisets")
    g.add_argument("--cost-tolerance", type=float, default=0.0, metavar="USD",
                   help="numbers under *_usd keys are equal within USD (default 0)")
    g.add_argument("--align", choices=["auto", "identity", "ordinal"], default="auto",
                   help="pair boundaries by identity, by ordinal of first appearance, or auto (default: identity "
                        "unless under half the shorter log pairs that way)")
    g.add_argument("--strict-order", action="store_true",
                   help="a paired boundary recorded in a different relative order is a mismatch (default: any "
                        "order of concurrent, identity-paired calls is equivalent)")
    p.add_argument("--max-differences", type=int, default=20, metavar="N",
                   help="later differences listed in the report (default 20; the count is always given)")
    p.set_defaults(func=_cmd_diverge)
    return p


def equivalence_from_args(args: argparse.Namespace) -> Equivalence:
    """The :class:`Equivalence` the options declare. Raises ConfigError for bad values."""
    from kernel_lib.history.diverge import Equivalence
    return Equivalence(ignore_fields=tuple(args.ignore), ignore_timestamps=args.ignore_timestamps,
                       ignore_durations=args.ignore_durations,
                       normalize_whitespace=args.normalize_whitespace, mask_patterns=tuple(args.mask),
                       embedded_json=args.embedded_json, ignore_list_order=args.ignore_list_order,
                       cost_tolerance_usd=args.cost_tolerance, align=args.align, strict_order=args.strict_order)


def _cmd_diverge(args: argparse.Namespace) -> int:
    from kernel_lib.errors import ConfigError
    from kernel_lib.history.diverge import locate_divergence
    from kernel_lib.log.files import load_events
    if args.max_differences < 0:
        raise ConfigError(f"--max-differences must be >= 0, got {args.max_differences}")
    eq = equivalence_from_args(args)
    a = load_events(args.log_a, args.trajectory_a)
    _check_sequence(a, args.log_a)
    b = load_events(args.log_b, args.trajectory_b)
    _check_sequence(b, args.log_b)
    rep = locate_divergence(a, b, eq, label_a=args.log_a, label_b=args.log_b)
    if args.json:
        print(json.dumps(rep.to_dict(max_differences=args.max_differences), sort_keys=True))
    else:
        print(rep.summary(max_differences=args.max_differences))
    return 1 if rep.diverged else 0


def _check_sequence(events, path: str) -> None:
    """Refuse a log whose sequence numbers repeat or skip, or whose event ids repeat (ConfigError
    naming the file and, for a JSON-lines file, the line)."""
    from kernel_lib.errors import ConfigError
    from kernel_lib.history.diverge import sequence_fault
    fault = sequence_fault(events)
    if fault is None:
        return
    i, what = fault
    where = f"{path}: event {i + 1}"
    try:   # a JSON-lines file: find the line of the offending event
        traj, target = events[i].trajectory_id, events[i].event_id
        with open(path, "rb") as fh:
            k = -1
            for n, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                d = json.loads(line)
                if d.get("trajectory_id") != traj:
                    continue
                k += 1
                if k == i and d.get("event_id") == target:
                    where = f"{path}:{n}"
                    break
    except (OSError, ValueError, AttributeError):
        pass
    raise ConfigError(f"{where}: {what}")
