"""``python -m kernel_lib recovery decide OMEGA.json``: the recovery policy D(Ω) on one failure
(Failure Recovery, figure 2; :func:`kernel_lib.recovery.policy.decide`).

``python -m kernel_lib recovery spin LOG [--import FORMAT]``: where the anti-spin bound would have
stopped each recorded repair loop of a log (:func:`kernel_lib.recovery.spin_report.spin_report`);
another harness's file is read in place through :mod:`kernel_lib.importers`.

:func:`add_commands` registers the command group on the CLI's subparsers.
"""

from __future__ import annotations

import argparse
import json
import sys

#: the top-level command of this group and its one-line help (``python -m kernel_lib --help``)
COMMANDS = {"recovery": "the recovery policy D(Ω): transient retry, forward repair, rollback or escalation "
                        "(Failure Recovery)"}

_DESCRIPTION = """\
Decide what to do about one failed sub-transaction: TRANSIENT_RETRY, FORWARD_REPAIR,
BACKWARD_ROLLBACK or OPERATOR_ESCALATE, with the gate that decided (1 taxonomy, anti-spin,
2 budget headroom, 3 economics, or "pivot": a forward repair after the pivot, where rollback
does not exist), the reason, and every number that decided it."""

_EPILOG = """\
OMEGA.json is one object:

  failed_step   {step_id, tool, tier: "I"|"II"|"III", pivot_crossed: bool,
                 repairs_done (k_i, default 0), prior_signatures (σ of its earlier errors,
                 oldest first, default []), retries_done (transient retries so far, default 0)}
  error         a tool service's error object {http_status, error, retryable, reason,
                 retry_after_s, partial} or a text (traceback, pytest or shell output)
  budget        {tokens_rem, steps_rem, usd_rem}
  history       Σ, committed steps: [{step_id, compensation_s, compensation_usd, forward_s,
                 forward_usd}] (default [])
  remedies      [{name: error_feedback|resample|model_fallback, tokens, usd, s, steps (default 1),
                 success_p (optional: omit it to estimate p from outcomes), detail (object)}]
  reserves      {tokens, usd} kept back by gate 2 (default 0)
  policy        {k_repair (1..3, default 3), window (default 8), backoff_base_s (0.5),
                 backoff_cap_s (30), transient_retries_max (5), usd_per_s (null: repair must
                 pay in time and in dollars)}
  outcomes      recorded repair outcomes [{failure_class, remedy, success}] (default []); p is
                 their Beta(1, 1) posterior mean
  environment   a summary of the environment state (reported, not judged)

example (the givens of Napkin Math 0.2; the command computes both expected costs and the break-evens):
  {"failed_step": {"step_id": "mig.T6", "tool": "apply_routes", "tier": "II", "pivot_crossed": false},
   "error": {"http_status": 422, "error": "routes[0].port must be an integer", "retryable": false},
   "budget": {"tokens_rem": 200000, "steps_rem": 20, "usd_rem": 5.0},
   "history": [{"step_id": "mig.T1-5", "compensation_s": 40.6, "compensation_usd": 0.0,
                "forward_s": 46.0, "forward_usd": 0.162}],
   "remedies": [{"name": "error_feedback", "tokens": 2570, "usd": 0.00987, "s": 4.1,
                 "success_p": 0.5}]}

exit status: 0 a decision was made (whatever it is); 2 bad input (one `error:` line on stderr).
--seed N draws the backoff delay of a TRANSIENT_RETRY from a seeded generator.

  python -m kernel_lib recovery decide omega.json --json"""


def add_commands(subparsers: "argparse._SubParsersAction") -> argparse.ArgumentParser:
    p = subparsers.add_parser("recovery", help=COMMANDS["recovery"], description=COMMANDS["recovery"])
    sub = p.add_subparsers(dest="recovery_command", metavar="COMMAND", required=True)
    d = sub.add_parser("decide", help="D(Ω) on one failure: directive, gate, reason, numbers",
                       description=_DESCRIPTION, epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("omega", metavar="OMEGA.json", help="the failure state Ω and the policy's configuration (below)")
    d.add_argument("--seed", type=int, default=None, help="seed of the backoff draw (default: report the window only)")
    d.add_argument("--json", action="store_true", help="one JSON object")
    d.set_defaults(func=_decide)
    s = sub.add_parser("spin", help="where the anti-spin bound would have stopped each repair loop of a log",
                       description=_SPIN_DESCRIPTION, epilog=_SPIN_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("log", metavar="LOG", help="our JSON-lines/SQLite log, or with --import another harness's file")
    s.add_argument("--import", dest="import_format", choices=IMPORT_FORMATS, default=None,
                   help="read LOG as this format through the importers (the file is read in place)")
    s.add_argument("--k-repair", type=int, default=3, help="K_repair, 1..3 (default 3)")
    s.add_argument("--window", type=int, default=8, help="signatures kept per sub-transaction (default 8)")
    s.add_argument("--json", action="store_true", help="one JSON object")
    s.set_defaults(func=_spin)
    return p


#: formats ``recovery spin --import`` reads (the keys of ``kernel_lib.importers.FORMATS``; spelled out
#: here so that building the parser imports no importer)
IMPORT_FORMATS = ("swe-agent", "tau-bench", "who-and-when", "openai-messages")

_SPIN_DESCRIPTION = """\
Replay a log's error observations through the anti-spin bound (K_repair repairs per
sub-transaction, a repeated error signature σ stops at once) and report, per sub-transaction,
the log position where the bound would have stopped the repair sequence, why
(repeated_signature, naming the earlier matching position, or repair_budget_exhausted), and the
error class of gate 1."""

_SPIN_EPILOG = """\
Errors: tool results the source marks failed; in sources that mark nothing, observations with an
error line (exception, shell error, "Error:") or a short refusal ("Wrong flag!").
Sub-transaction of an imported log: the tool/action name plus its target (a file argument, the
first *_id argument, a path in a shell command, or the open file of an editor command); for a
transcript without tool calls, the speaking agent. A success of the same group ends the episode
(the bound counts consecutive repairs); a σ that comes back after such a success is listed under
"recurrences". Positions: seq (the log's sequence number) and source_path/source_index (the
source file's own step or message index).

exit status: 0 the report was made (whether or not the bound fired); 2 bad input.

  python -m kernel_lib recovery spin ../shared/data/trajectories/swe-agent/pydicom__pydicom-1458.traj \\
      --import swe-agent --json"""


def _spin(args: argparse.Namespace) -> int:
    from kernel_lib.recovery.spin_report import spin_report

    if args.import_format:
        from kernel_lib.importers import import_file
        result = import_file(args.import_format, args.log)
        events, source = result.events, {"format": args.import_format, **result.source}
    else:
        from kernel_lib.log.files import load_events
        events, source = load_events(args.log), {"format": "kernel_lib", "file": args.log}
    report = spin_report(events, k_repair=args.k_repair, window=args.window)
    out = {"source": source, **report.as_dict()}
    if args.json:
        print(json.dumps(out, indent=2, ensure_ascii=False))
        return 0
    print(f"{source.get('file', args.log)}: {report.errors} error(s) in {len(report.groups)} episode(s); "
          f"K_repair = {report.k_repair}, window = {report.window}")
    for g in report.groups:
        where = ", ".join(f"seq {e.seq}" + (f" ({e.source_path})" if e.source_path else "") for e in g.errors)
        print(f"  {g.group} #{g.episode}: {len(g.errors)} error(s) at {where}")
        st = g.stop
        if st is not None:
            why = (f"repeats seq {st.matched.seq} ({st.matched.source_path})" if st.matched
                   else f"k_i = {st.repairs_done} = K_repair")
            print(f"    stop at seq {st.at.seq} ({st.at.source_path}): {st.reason}, {why}; {st.at.error_class} "
                  f"({st.at.rule}): {st.at.excerpt[:90]}")
    for r in report.recurrences:
        print(f"  recurrence in {r['group']}: seq {r['first']['seq']} again at seq {r['again']['seq']} "
              f"(after a success of the same group)")
    sys.stdout.flush()
    return 0


def _decide(args: argparse.Namespace) -> int:
    import random

    from kernel_lib.errors import OmegaError
    from kernel_lib.recovery.policy import config_from_dict, decide, omega_from_dict

    try:
        with open(args.omega, encoding="utf-8") as fh:
            text = fh.read()
    except UnicodeDecodeError:
        raise OmegaError(f"{args.omega} is not a UTF-8 text file (an Ω document is JSON)") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OmegaError(f"{args.omega} is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    omega, config = omega_from_dict(doc), config_from_dict(doc)
    decision = decide(omega, config, rng=random.Random(args.seed) if args.seed is not None else None)
    out = decision.as_dict()
    if args.json:
        print(json.dumps(_finite(out), indent=2))
        return 0
    print(f"directive  {decision.directive}")
    print(f"gate       {decision.gate}")
    print(f"reason     {decision.reason}")
    if decision.remedy:
        print(f"remedy     {decision.remedy} ({decision.remedy_reason})")
    print(f"error      {decision.classification.failure_class} ({decision.classification.evidence})")
    print(f"σ          {decision.error_signature}")
    print("numbers")
    for key, value in decision.numbers.items():
        if key not in ("remedies", "anti_spin"):
            print(f"  {key:32} {value}")
    for name, info in decision.numbers.get("remedies", {}).items():
        print(f"  remedy {name}: p = {info['p']:.4g} ({info['p_source']}), fits budget: {info['budget']['fits']}")
    spin = decision.numbers.get("anti_spin")
    if spin:
        print(f"  anti-spin: {spin['reason']} (iteration {spin['iteration']}, k_i = {spin['repairs_done']}, "
              f"K_repair = {spin['k_repair']})")
    sys.stdout.flush()
    return 0


def _finite(v):
    import math
    if isinstance(v, float) and not math.isfinite(v):
        return "inf" if v > 0 else "-inf"
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v
