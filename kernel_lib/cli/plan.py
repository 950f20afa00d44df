"""``python -m kernel_lib plan check|example``: the pivot action boundary of a plan (Failure Recovery).

:func:`add_commands` registers the command group on the CLI's subparsers; the checker itself is
:mod:`kernel_lib.recovery.pivot`, imported only when a command runs.
"""

from __future__ import annotations

import argparse
import json
import sys

#: the top-level command of this group and its one-line help (``python -m kernel_lib --help``)
COMMANDS = {"plan": "check a plan against the pivot action boundary and propose a valid order (Failure Recovery)"}

_CHECK_DESCRIPTION = """\
Check a plan against the Pivot Action Boundary Invariant (Failure Recovery, "The pivot action
boundary"): the plan's pivot is its first tier III step; at most one pivot; every step before it
tier I (invertible) or II (compensable); every step after it repeat-safe (repeat contract
idempotent, idempotency_key or read_only: after the pivot a failed step is only retried forward);
dependencies name steps of the plan, are acyclic and are respected by the order. Then propose an
order that satisfies the invariant under the declared dependencies: invertible and compensable
steps first, the pivot, then only what must follow it; a stageable tier III step is split into a
staging step in local escrow (T.stage, tier I) before the pivot and an entry of the pivot's
atomic outbox, flushed with it (Example 0.1)."""

_PLAN_FORMAT = """\
plan format (JSON): {"name": "...", "steps": [STEP, ...]} or just [STEP, ...]; each STEP is
  id               required, unique string
  tier             required: "I" invertible, "II" compensable, "III" pivot (no default)
  repeat_contract  idempotent | idempotency_key | read_only | at_most_once | unsafe (default: unsafe)
  depends_on       ids of the steps whose effect this step needs (default: [])
  stageable        tier III only: its payload can be staged in escrow and flushed by the pivot's
                   outbox (default: false)
  tool, description  free text
  stage_of, outbox   written by the reorderer (a staging step; the pivot's outbox); a plan that
                   carries them is checked as given

example (python -m kernel_lib plan example ex0.1 prints the chapter's Example 0.1):
  {"steps": [
    {"id": "T1", "tier": "II", "repeat_contract": "idempotency_key"},
    {"id": "T2", "tier": "III", "depends_on": ["T1"]},
    {"id": "T3", "tier": "II", "depends_on": ["T1"]},
    {"id": "T4", "tier": "III", "depends_on": ["T3"], "stageable": true}]}

output (--json): {"valid": bool, "reasons": ["rule [steps]: why", ...], "violations": [{"rule",
"steps", "message"}], "pivot", "preparation", "finalization", "proposed_order": [ids] or null,
"proposal_reasons": [why no order exists], "transformations": [{"kind", "step", "message", ...}],
"staged", "transformed_plan"}. proposed_order is the order of the transformed plan's steps; it is
the plan's own order when that is already valid.

exit status: 0 the plan is valid as given; 1 it is not (whether or not a valid order was
proposed); 2 bad input (unreadable file, not JSON, not a plan: one `error:` line on stderr).

examples:
  python -m kernel_lib plan example ex0.1 > plan.json
  python -m kernel_lib plan check plan.json --json
  python -m kernel_lib plan check - < plan.json"""


def add_commands(subparsers: "argparse._SubParsersAction") -> argparse.ArgumentParser:
    p = subparsers.add_parser("plan", help=COMMANDS["plan"], description=COMMANDS["plan"])
    sub = p.add_subparsers(dest="plan_command", metavar="COMMAND", required=True)
    c = sub.add_parser("check", help="check a plan's pivot boundary and propose a valid order",
                       description=_CHECK_DESCRIPTION, epilog=_PLAN_FORMAT,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("plan", metavar="PLAN.json", help="the plan file (- reads standard input)")
    c.add_argument("--json", action="store_true", help="one JSON object")
    c.set_defaults(func=_check)
    e = sub.add_parser("example", help="print a built-in example plan as JSON",
                       description="Print a built-in plan as JSON, to start from: ex0.1 is the chapter's Example 0.1 "
                                   "(the dual-commit trap, as the agent proposed it).")
    e.add_argument("name", nargs="?", default="ex0.1", help="the example (default: ex0.1; available: ex0.1)")
    e.set_defaults(func=_example)
    return p


def _read(path: str) -> str:
    from pathlib import Path

    from kernel_lib.errors import PlanError

    if path == "-":
        return sys.stdin.read()
    if not path:   # Path("") is the current directory
        raise PlanError("no plan file named (an empty path); give PLAN.json or - for standard input")
    f = Path(path)
    if f.is_dir():
        raise PlanError(f"{path}: a directory, not a plan file")
    try:
        return f.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise PlanError(f"{path}: not a UTF-8 text file") from None


def _check(args: argparse.Namespace) -> int:
    from kernel_lib.recovery.pivot import check_plan, load_plan, propose_order

    plan = load_plan(_read(args.plan))
    verdict = check_plan(plan)
    proposal = propose_order(plan)
    out = verdict.to_json() | proposal.to_json()
    if args.json:
        print(json.dumps(out))
    else:
        print(f"plan {plan.name or args.plan}: {'valid' if verdict.valid else 'INVALID'} "
              f"(pivot: {verdict.pivot or 'none'})")
        for r in verdict.reasons:
            print(f"  - {r}")
        if proposal.order is None:
            print("no valid order exists:")
            for r in proposal.reasons:
                print(f"  - {r}")
        else:
            print("proposed order: " + ", ".join(proposal.order)
                  + (f" (the pivot {proposal.pivot} flushes the outbox of {', '.join(proposal.staged)})"
                     if proposal.staged else ""))
            for t in proposal.transformations:
                print(f"  * {t.message}")
    return 0 if verdict.valid else 1


def _example(args: argparse.Namespace) -> int:
    from kernel_lib.errors import PlanError
    from kernel_lib.recovery.pivot import EXAMPLES

    key = args.name.strip().lower().replace("_", ".")
    if key not in EXAMPLES:
        raise PlanError(f"unknown example {args.name!r}; available: {', '.join(EXAMPLES)}")
    print(json.dumps(EXAMPLES[key]().to_json(), indent=2))
    return 0
