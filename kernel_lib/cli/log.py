"""``crash-positions``, ``fold``, ``schema`` and ``example``: reading a trajectory log from the
command line (§11.2–11.3)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kernel_lib.cli._args import LOG_HELP, events_from, int_at_least
from kernel_lib.errors import KernelError

#: the top-level commands of this group and their one-line help (``python -m kernel_lib --help``)
COMMANDS = {
    "crash-positions": "what recovery may conclude after a crash at each position of eq. 1",
    "fold": "fold a log into its trajectory record",
    "schema": "list registered event types and schema versions",
    "example": "write the recorded worksheet example trajectory as JSON lines",
}


def _cmd_crash_positions(args: argparse.Namespace) -> int:
    from kernel_lib.gate.dispatch import crash_positions
    events = events_from(args.log, args.trajectory)
    rows = crash_positions(events, args.operation, lag_events=args.lag)
    if args.json:
        for r in rows:
            print(json.dumps(r.to_dict(), sort_keys=True))
    else:
        print(f"operation classified: {rows[0].operation_id} (table 3); 'lagging' = a reader {args.lag} event(s) "
              "behind, i.e. an incomplete prefix; 'request left' = whether the recorded run had dispatched it")
        w = max(len(r.position) for r in rows)
        print(f"{'crash position':<{w}}  prefix    conclusion      request left  why")
        for r in rows:
            print(f"{r.position:<{w}}  {'complete' if r.prefix_complete else 'lagging':<8}  "
                  f"{r.conclusion:<14}  {'yes' if r.dispatched else 'no':<12}  {r.reason.split(';')[0]}")
    return 0 if all(r.sound for r in rows) else 1


def _cmd_fold(args: argparse.Namespace) -> int:
    from kernel_lib.core.record import fold, initial_record
    events = events_from(args.log, args.trajectory)
    if args.position is not None and not 0 <= args.position <= len(events):
        raise KernelError(f"--position must be between 0 and {len(events)}, got {args.position}")
    upto = events if args.position is None else events[:args.position]
    rec = fold(initial_record(events[0].trajectory_id), upto)
    if args.json:
        print(json.dumps(rec.to_dict(), sort_keys=True))
        return 0
    b = rec.budget
    print(f"trajectory {rec.trajectory_id}: folded {rec.last_sequence_number} of {len(events)} events; "
          f"control state {rec.control_state}, control_epoch {rec.control_epoch}, owner_epoch {rec.owner_epoch}")
    print("operations:")
    for op in rec.operations.values():
        att = op.attempts.get(op.current_attempt_id or "")
        extra = [f"attempt {op.current_attempt_id}"] if op.current_attempt_id else []
        if op.job_handle:
            extra.append(f"job {op.job_handle}")
        if att and att.last_result_status:
            extra.append(f"last evidence {att.last_result_status}")
        if op.outcome and op.status == "established":
            outcome = json.dumps(op.outcome, sort_keys=True)
            extra.append("outcome " + (outcome if len(outcome) <= 80 else outcome[:79] + "…"))
        print(f"  {op.operation_id:<20} {op.kind:<5} {op.status:<12} {', '.join(extra)}")
    if rec.attempts_in_doubt():
        print("attempts in doubt: " + ", ".join(f"{o}/{a}" for o, a in rec.attempts_in_doubt()))
    held = {k: round(v, 9) for k, v in b.outstanding_reservations.items()}
    print(f"budget (USD): ceiling {b.ceiling_usd:g}, consumed {b.actual_consumption_usd:.6g}, outstanding "
          f"reservations {b.outstanding_reservations_usd:.6g}{' ' + str(held) if held else ''}, finalization reserve "
          f"{b.finalization_reserve_usd:g}, available {b.available_usd:.6g}")
    if rec.approvals:
        print("approvals: " + ", ".join(f"{a.approval_id} {a.status}" for a in rec.approvals.values()))
    print("(--json prints the whole trajectory record)")
    return 0


def _cmd_schema(args: argparse.Namespace) -> int:
    from kernel_lib.core.events import payload_class, registered_types
    families = {t: {str(v): list(payload_class(t, v).model_fields) for v in vs}
                for t, vs in registered_types().items()}
    if args.json:
        print(json.dumps(families, sort_keys=True))
        return 0
    print("event envelope: trajectory_id, event_id, sequence_number, event_type, schema_version, reducer_version, "
          "owner_epoch, control_epoch, provenance {tenant, issuer}, payload")
    for t, versions in families.items():
        for v, fields in versions.items():
            doc = (payload_class(t, int(v)).__doc__ or "").strip().splitlines()[0]
            print(f"\n{t} v{v}: {doc}\n  payload: {', '.join(fields)}")
    return 0


def _cmd_example(args: argparse.Namespace) -> int:
    from kernel_lib.log.files import encode_jsonl
    from kernel_lib.sim.worksheet import worksheet_events
    data = encode_jsonl(worksheet_events())
    if args.out:
        Path(args.out).write_bytes(data)
    else:
        sys.stdout.buffer.write(data)
    return 0


def add_commands(sub: "argparse._SubParsersAction") -> None:
    """Register ``crash-positions``, ``fold``, ``schema`` and ``example``."""
    p = sub.add_parser("crash-positions", help=COMMANDS["crash-positions"],
                       description="For each crash position of eq. 1 (before/after every event, during each "
                                   "intent append with a lost acknowledgment, after each dispatch), fold the "
                                   "surviving log as a complete authoritative prefix and as a lagging one, and "
                                   "classify the operation per table 3: not_dispatched, in_doubt or established. "
                                   "Exit code 1 if any conclusion would be unsound.")
    p.add_argument("--log", help=LOG_HELP)
    p.add_argument("--trajectory", help="trajectory id when the log holds several")
    p.add_argument("--operation", help="tool operation id to classify (default: the first ToolIntent's)")
    p.add_argument("--lag", type=int_at_least(1), default=1,
                   help="events the incomplete reader lags behind (default 1)")
    p.add_argument("--json", action="store_true", help="one JSON object per crash position (JSON lines)")
    p.set_defaults(func=_cmd_crash_positions)

    p = sub.add_parser("fold", help=COMMANDS["fold"],
                       description="Fold a trajectory's events (optionally only the first N) and print the "
                                   "trajectory record (§11.2.1): operations with status (in_doubt when an "
                                   "intent lacks adequate evidence), budgets, approvals, control state.")
    p.add_argument("--log", help=LOG_HELP)
    p.add_argument("--trajectory", help="trajectory id when the log holds several")
    p.add_argument("--position", type=int_at_least(0), help="fold only events 1..N")
    p.add_argument("--json", action="store_true", help="compact JSON")
    p.set_defaults(func=_cmd_fold)

    p = sub.add_parser("schema", help=COMMANDS["schema"],
                       description="List every event family (table 1 plus Failure Recovery records) and the "
                                   "schema versions this build can decode.")
    p.add_argument("--json", action="store_true", help="compact JSON")
    p.set_defaults(func=_cmd_schema)

    p = sub.add_parser("example", help=COMMANDS["example"],
                       description="Record the crash worksheet's trajectory through the dispatch gate and "
                                   "write its events as JSON lines, each with its digest "
                                   "({\"digest\": ..., \"event\": ...}; `fold --log` verifies them).")
    p.add_argument("--out", help="file to write (default: stdout)")
    p.set_defaults(func=_cmd_example)
