"""``python -m kernel_lib scorecard``: table 14 measured (Failure Recovery, "Fault injection
benchmarks"): N seeded systems-administration trajectories per runtime configuration on the
simulated twins (:mod:`kernel_lib.sim.scorecard`), or with ``--live`` a smaller sample on the live
worker fleet (:mod:`kernel_lib.live.fleet`).

:func:`add_commands` registers the command on the CLI's subparsers. Nothing heavy is imported
before the command runs.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import textwrap
from typing import Any

#: the top-level command of this group and its one-line help (``python -m kernel_lib --help``)
COMMANDS = {"scorecard": "table 14 measured: seeded fault-injected trajectories per runtime configuration "
                         "(unmanaged, WAL only, saga only, synthesized), completion, duplicates, leaks, RPO/RTO "
                         "(Failure Recovery)"}

_DESCRIPTION = """\
Run the six-turn systems-administration trajectory of figure 5 (clone, inspect the migrations,
provision a staging database, migrate, update the configuration, deploy to production: the
pivot) --trajectories times under each runtime configuration of table 14, with the chapter's
fault profile drawn per executed proposal from --seed (8 % network drops, half after the effect;
6 % tool exceptions: wrong calls the service refuses, e.g. broken SQL that SQLite rejects; 4 %
process kills at a random position of the gate; 2 % malformed calls), on simulated twins of the
services. The same seed gives every configuration the same faults.

  unmanaged     no durable log, no probe, no saga, no gate: any fault ends the run
  wal_only      durable log; in doubt halts (no probe); only a kill before the intent resumes
  saga_only     in-memory log; drops retried blindly; faults roll back; a kill loses everything
  synthesized   durable log, reconciliation probe, forward repair (K_repair = 2) then rollback,
                schema validation with re-sampling, deterministic gate before the pivot

Reported per configuration: completion rate with its Wilson 95 % interval and the closed form's
prediction; duplicated effects and leaked resources as the services count them; RPO (committed
turns a kill lost); RTO (kill -> the recovered process's first record), MTTR and MTBF, in
seconds on the virtual clock plus the measured CPU time of the recovery code; crash-consistency
invariant violations; faults injected by kind; deploys made while the gate's checks would have
failed. Longer trajectories (--turns) repeat the migrate and configure turns."""

_EPILOG = """\
JSON keys: "unmanaged", "wal_only", "saga_only", "synthesized" (each: "completion_rate",
"completion_ci95", "completion_closed_form", "duplicated_effects", "leaked_resources", "rpo_turns"
(max), "rpo_turns_mean", "rpo_kind" where a kill loses everything, "rto_s" / "mttr_s" / "mtbf_s"
(null with "rto_note" / "mttr_note" / "mtbf_note"), "rto_cpu_s", "invariant_violations",
"faults_injected", "unsafe_pivots", "states", ...), "configurations" (the same rows as a list,
each with "name"), "seed", "trajectories", "turns", "profile", "timings", "semantics",
"closed_forms", "chapter", "time_labels".

exit status: 0 the scorecard ran; 1 the synthesized configuration broke a guarantee (an
invariant violation, a duplicated effect or a leaked resource); 2 bad input, or --live without
the live fleet.

examples:
  python -m kernel_lib scorecard --trajectories 1000 --seed 0
  python -m kernel_lib scorecard --trajectories 1000 --seed 0 --json
  python -m kernel_lib scorecard --trajectories 500 --turns 12 --config synthesized --config saga_only
  python -m kernel_lib scorecard --live --trajectories 20 --json"""


def _fmt(x: Any, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def format_scorecard(doc: dict[str, Any]) -> str:
    """The scorecard as a text table (one row per configuration), with its semantics and labels."""
    rows = doc["configurations"]
    lines = [f"scorecard: {doc['trajectories']} trajectories per configuration, {doc['turns']} turns, seed "
             f"{doc['seed']}, {doc.get('services', 'simulated twins')}; faults per proposal: "
             + ", ".join(f"{k.replace('_', ' ')} {doc['profile'][k]:.0%}"
                         for k in ("network_drop", "tool_exception", "process_kill", "format_corruption")), "",
             f"{'configuration':<13}{'completion':>11}{'95% CI':>16}{'closed form':>12}{'chapter':>9}{'dup':>6}"
             f"{'leak':>6}{'RPO max':>8}{'RPO mean':>9}{'RTO s':>8}{'MTTR s':>8}{'MTBF s':>9}{'inv':>6}"
             f"{'unsafe':>7}"]
    for r in rows:
        ci = f"[{r['completion_ci95'][0]:.3f}, {r['completion_ci95'][1]:.3f}]"
        chap = (doc.get("chapter") or {}).get(r["name"], {}).get("completion_rate")
        rpo = "total" if r.get("rpo_kind") == "total_loss" and r["kills"] else str(r["rpo_turns"])
        lines.append(f"{r['name']:<13}{r['completion_rate']:>11.3f}{ci:>16}{r['completion_closed_form']:>12.3f}"
                     f"{_fmt(chap):>9}{r['duplicated_effects']:>6}{r['leaked_resources']:>6}{rpo:>8}"
                     f"{_fmt(r['rpo_turns_mean'], '.2f'):>9}{_fmt(r['rto_s']):>8}{_fmt(r['mttr_s'], '.2f'):>8}"
                     f"{_fmt(r['mtbf_s'], '.1f'):>9}{r['invariant_violations']:>6}{r['unsafe_pivots']:>7}")
    lines += ["", *textwrap.wrap(
        "columns: dup = effects applied twice (the services' audit), leak = resources left behind (the services' "
        "state), RPO = committed turns a kill lost, inv = crash-consistency invariant violations, unsafe = deploys "
        "made while the gate's checks would have failed", width=110, subsequent_indent="  "), "", "notes:"]
    for r in rows:
        for key in ("rto_note", "mttr_note", "mtbf_note"):
            if key in r:
                lines.append(f"  {r['name']}: {key[:-5].upper()}: {r[key]}")
    lines += ["", "outcomes:"]
    for r in rows:
        lines.append(f"  {r['name']}: " + ", ".join(f"{k} {v}" for k, v in r["states"].items())
                     + "; faults " + ", ".join(f"{k} {v}" for k, v in r["faults_injected"].items()))
    labels = doc.get("time_labels") or {}
    lines += ["", "time:", *(f"  {k}: {v}" for k, v in labels.items()),
              "  chapter: table 14's printed completion rates, for comparison (its trajectory lengths and fault "
              "semantics are not stated)"]
    return "\n".join(lines)


def _broke_a_guarantee(doc: dict[str, Any]) -> bool:
    """The synthesized row counted an invariant violation, a duplicated effect or a leaked resource."""
    syn = doc.get("synthesized") or {}
    return bool(syn.get("invariant_violations") or syn.get("duplicated_effects") or syn.get("leaked_resources"))


def _live(args: argparse.Namespace) -> int:
    try:
        fleet = importlib.import_module("kernel_lib.live.fleet")
    except ModuleNotFoundError as exc:
        if exc.name not in ("kernel_lib.live.fleet",):
            raise
        print("error: --live needs the worker fleet (kernel_lib.live.fleet), which this installation does not have",
              file=sys.stderr)
        return 2
    run = getattr(fleet, "live_scorecard", None)
    if run is None:
        print("error: --live: kernel_lib.live.fleet offers no live_scorecard(trajectories=, seed=, turns=) yet",
              file=sys.stderr)
        return 2
    kw: dict[str, Any] = {}
    if args.config:
        kw["configs"] = list(dict.fromkeys(args.config))
    if any(getattr(args, f) is not None for f in _PROFILE_OPTIONS):
        kw["profile"] = _profile(args)
    doc = run(trajectories=args.trajectories or LIVE_TRAJECTORIES, seed=args.seed, turns=args.turns,
              progress=lambda line: print(line, file=sys.stderr), **kw)
    if args.json:
        print(json.dumps(doc, indent=2, allow_nan=False, default=str))
    else:
        print(format_scorecard(doc) if "configurations" in doc else json.dumps(doc, indent=2, default=str))
    return 1 if _broke_a_guarantee(doc) else 0


#: the fault-profile options (argparse dest -> FaultProfile field); None when not given
_PROFILE_OPTIONS = {"drop": "network_drop", "exception": "tool_exception", "kill": "process_kill",
                    "format": "format_corruption", "repair_success": "repair_success",
                    "repair_failure": "repair_failure"}
#: trajectories per configuration by default: the simulation, and the live fleet's smaller sample
SIM_TRAJECTORIES, LIVE_TRAJECTORIES = 1000, 20


def _profile(args: argparse.Namespace) -> Any:
    """The FaultProfile of the options given (the chapter's defaults for the others)."""
    from kernel_lib.recovery.synthesis.faults import FaultProfile

    return FaultProfile(**{field: getattr(args, dest) for dest, field in _PROFILE_OPTIONS.items()
                           if getattr(args, dest) is not None})


def _cmd_scorecard(args: argparse.Namespace) -> int:
    if args.live:
        return _live(args)
    from kernel_lib.sim.scorecard import run_scorecard

    profile = _profile(args)
    configs = args.config or ["unmanaged", "wal_only", "saga_only", "synthesized"]
    doc = run_scorecard(trajectories=args.trajectories or SIM_TRAJECTORIES, seed=args.seed, turns=args.turns,
                        configs=list(dict.fromkeys(configs)), profile=profile, progress=sys.stderr.isatty())
    if args.json:
        print(json.dumps(doc, indent=2, allow_nan=False))
    else:
        print(format_scorecard(doc))
    return 1 if _broke_a_guarantee(doc) else 0


def add_commands(subparsers: "argparse._SubParsersAction") -> argparse.ArgumentParser:
    from kernel_lib.cli._args import int_at_least

    def probability(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not 0.0 <= v <= 1.0:
            raise argparse.ArgumentTypeError(f"is a probability, 0 to 1, got {text!r}")
        return v

    p = subparsers.add_parser("scorecard", help=COMMANDS["scorecard"], description=_DESCRIPTION, epilog=_EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trajectories", type=int_at_least(1), default=None, metavar="N",
                   help=f"trajectories per configuration (default {SIM_TRAJECTORIES}; with --live "
                        f"{LIVE_TRAJECTORIES})")
    p.add_argument("--seed", type=int, default=0, help="seed of the fault draws (default 0)")
    p.add_argument("--turns", type=int_at_least(6), default=6, metavar="T",
                   help="turns per trajectory, at least 6 (default 6; more repeat migrate/configure)")
    p.add_argument("--config", action="append", choices=("unmanaged", "wal_only", "saga_only", "synthesized"),
                   help="run only this configuration (repeatable; default all four)")
    p.add_argument("--drop", type=probability, default=None, metavar="P", help="network drops per proposal (0.08)")
    p.add_argument("--exception", type=probability, default=None, metavar="P",
                   help="tool exceptions per proposal (0.06)")
    p.add_argument("--kill", type=probability, default=None, metavar="P", help="process kills per proposal (0.04)")
    p.add_argument("--format", type=probability, default=None, metavar="P",
                   help="malformed calls per proposal (0.02)")
    p.add_argument("--repair-success", type=probability, default=None, metavar="P",
                   help="a repair proposal is right with this probability (0.8)")
    p.add_argument("--repair-failure", choices=("drift", "spin"), default=None,
                   help="a wrong repair fails differently (drift) or repeats its error (spin: anti-spin stops it)")
    p.add_argument("--live", action="store_true",
                   help="run a small sample on the live worker fleet with real SIGKILLs (kernel_lib.live.fleet); "
                        "--config (default wal_only and synthesized) and the fault options apply there too")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(func=_cmd_scorecard)
    return p
