"""``python -m kernel_lib watchdog LOG``: the semantic watchdog's detectors over a recorded log
(Failure Recovery, "Semantic Watchdog Timers"; :mod:`kernel_lib.recovery.watchdog`), or one of the
baselines other runtimes ship, or all of them side by side.

:func:`add_commands` registers the command on the CLI's subparsers. Nothing heavy is imported
before the command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

#: the top-level command of this group and its one-line help (``python -m kernel_lib --help``)
COMMANDS = {"watchdog": "semantic watchdog over a log (ours or another harness's): state-hash cycles, metric "
                        "stagnation, repeated failing actions and questions; the OpenHands and Gemini CLI "
                        "loop rules beside it (Failure Recovery)"}

#: formats ``--import`` reads (the keys of ``kernel_lib.importers.FORMATS``; spelled out here so that
#: building the parser imports no importer)
IMPORT_FORMATS = ("swe-agent", "tau-bench", "who-and-when", "openai-messages")
BASELINE_NAMES = ("openhands", "gemini")
_OUR_SUFFIXES = (".jsonl", ".ndjson", ".db", ".sqlite", ".sqlite3")
_FOREIGN_SUFFIXES = (".traj", ".json")

_DESCRIPTION = """\
Run the semantic watchdog's detectors (table 6) over one recorded trajectory and print each
detection with the log position where it fires, its kind, its evidence and the table-7 tier the
watchdog would apply (1 context interrupt, 2 backtrack with the action masked, 3 terminal abort):

  state_hash_cycle    the environment's state returned to one of its last K states (k = 1: a
                      mutative step that changed nothing, repeated; k = 2: a flip-flop)
  metric_stagnation   no verifier metric (tests passed, compiler errors, lint findings) improved
                      over an epoch of E measurements, past the grace
  metric_oscillation  a metric going back and forth (4, 3, 4, 3)
  action_repetition   a tool call (or an agent's action message) repeated after it failed, also
                      with other calls in between
  repeated_question   the agent asking the user the same question again and again
  entropy_collapse    the model's text losing its lexical variety against its own baseline
  embedding_drift     a paraphrased loop, only with an offline embedding model installed
                      (else reported "unavailable")

LOG is this project's log (.jsonl, SQLite, segment directory) or another harness's file: the
format of a .traj/.json file is recognised (SWE-agent, tau-bench, Who&When, OpenAI messages), or
named with --import. A directory (not a segment log) runs every such file under it, its
subdirectories included; anything that is neither a regular file nor a directory (a FIFO, a
device) is refused."""

_EPILOG = """\
--baseline openhands|gemini prints that runtime's loop rules instead, in the same shape (tier
null): OpenHands' stuck detector (the same action and observation 4 times, the same action with
an error 3 times, a monologue, an A,B,A,B alternation over 6 steps, 3 empty replies) and Gemini
CLI's loop detection (the same tool call 5 times in a row, repeated content chanting).
--compare (not with --baseline) runs all three, groups their detections into loops, and reports
per detector the loops caught and missed, the detection delay (steps from the loop's first
repetition to the alarm) and the false-positive rate on clean runs (tau-bench runs with reward 1
and no error observation).

Without a workspace recorded in the log, the state is what the log reveals (file windows a tool
printed, entities a tool returned, the page a browser showed); the JSON output lists what that
misses under "log_state_misses".

exit status: 0 the detectors ran (whether or not anything fired); 2 a missing or malformed log or
a bad option (one `error:` line on stderr).

examples:
  python -m kernel_lib watchdog ../shared/data/trajectories/swe-agent/pydicom__pydicom-1458.traj --json
  python -m kernel_lib watchdog --import tau-bench ../shared/data/trajectories/tau-bench-airline/task08_trial1.json
  python -m kernel_lib watchdog ../shared/data/trajectories/tau-bench-airline/task08_trial1.json --baseline openhands
  python -m kernel_lib watchdog ../shared/data/trajectories --compare --json"""


def add_commands(subparsers: "argparse._SubParsersAction") -> argparse.ArgumentParser:
    from kernel_lib.cli._args import int_at_least

    p = subparsers.add_parser("watchdog", help=COMMANDS["watchdog"], description=_DESCRIPTION, epilog=_EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("log", metavar="LOG", nargs="?", default=None,
                   help="a log or trajectory file, or a directory of them (or give the path after --import FORMAT)")
    p.add_argument("--import", dest="import_args", nargs="+", metavar=("FORMAT", "PATH"), default=None,
                   help=f"read the file as FORMAT ({', '.join(IMPORT_FORMATS)}) through the importers; PATH here "
                        "or as LOG")
    p.add_argument("--baseline", choices=BASELINE_NAMES, default=None,
                   help="print this runtime's loop rules instead of the watchdog's")
    p.add_argument("--compare", action="store_true",
                   help="the watchdog and both baselines side by side: loops, delays, false positives")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.add_argument("--max-period", type=int_at_least(1), default=4, metavar="K",
                   help="longest state cycle looked for (default 4)")
    p.add_argument("--metric-epoch", type=int_at_least(1), default=3, metavar="E",
                   help="measurements over which some metric must improve (default 3)")
    p.add_argument("--metric-grace", type=int_at_least(0), default=1, metavar="G",
                   help="extra stagnant measurements tolerated (default 1)")
    p.add_argument("--repetition-window", type=int_at_least(1), default=10, metavar="STEPS",
                   help="steps looked back for the same failing action (default 10)")
    p.add_argument("--nonce", action="append", default=None, metavar="ARG",
                   help="an argument name to ignore in action signatures (repeatable; default: idempotency_key, "
                        "request_id, nonce, timestamp, operation_id, client_token)")
    p.set_defaults(func=_cmd_watchdog)
    return p


# --- reading logs ------------------------------------------------------------------------------------------


def _sniff(path: Path) -> str | None:
    """The importer format of a foreign trajectory file, or None for this project's own log."""
    from kernel_lib.errors import UnknownImportFormatError

    suffix = path.suffix.lower()
    if suffix in _OUR_SUFFIXES or path.is_dir():
        return None
    if suffix == ".traj":
        return "swe-agent"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:   # RecursionError: nested too deeply
        raise UnknownImportFormatError(f"{path}: not a JSON trajectory ({type(exc).__name__}: {exc}); name the "
                                       f"format with --import ({', '.join(IMPORT_FORMATS)})") from None
    if isinstance(doc, list):
        return "openai-messages"
    if isinstance(doc, dict):
        if "trajectory" in doc:
            return "swe-agent"
        if "traj" in doc:
            return "tau-bench"
        if "history" in doc and ("mistake_agent" in doc or "question" in doc):
            return "who-and-when"
        if "messages" in doc:
            return "openai-messages"
    raise UnknownImportFormatError(f"{path}: cannot tell which harness wrote it; name the format with --import "
                                   f"({', '.join(IMPORT_FORMATS)})")


def _is_segment_log(path: Path) -> bool:
    import re
    return any(re.fullmatch(r"\d{8}\.seg|LOCK", c.name) for c in path.iterdir())


def _targets(args: argparse.Namespace) -> list[tuple[Path, str | None]]:
    """(path, format or None for our own log) of every log the command reads."""
    from kernel_lib.errors import KernelError, UnknownImportFormatError

    fmt: str | None = None
    path = args.log
    if args.import_args:
        if len(args.import_args) > 2:
            raise KernelError(f"--import takes FORMAT [PATH], got {len(args.import_args)} values")
        fmt = args.import_args[0].strip().lower().replace("_", "-")
        if fmt not in IMPORT_FORMATS:
            raise UnknownImportFormatError(f"unknown import format {args.import_args[0]!r}; known: "
                                           f"{', '.join(IMPORT_FORMATS)}")
        if len(args.import_args) == 2:
            if path is not None:
                raise KernelError("give the file once: as LOG or after --import FORMAT, not both")
            path = args.import_args[1]
    if path is None or path == "":
        raise KernelError("no log given: name a LOG (or --import FORMAT PATH)")
    p = Path(path)
    if not p.exists():
        raise KernelError(f"no such log: {path!r}")
    if not (p.is_dir() or p.is_file()):   # a FIFO, a device, a socket: reading it could block for ever
        raise KernelError(f"{path!r} is not a log: neither a regular file nor a directory")
    if args.compare and args.baseline:
        raise KernelError("--compare already runs both baselines beside the watchdog; drop --baseline")
    if p.is_dir() and not _is_segment_log(p):
        files = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in _FOREIGN_SUFFIXES + _OUR_SUFFIXES
                       and f.name.upper() != "LICENSE")
        if not files:
            raise KernelError(f"{path} holds no log or trajectory file (.jsonl, .traj, .json)")
        return [(f, fmt or _sniff(f)) for f in files]
    return [(p, fmt if fmt else _sniff(p))]


def _shown(path: Path) -> str:
    """``path`` as printable text: bytes of a name that are not UTF-8 as ``\\xNN`` escapes (stdout
    cannot encode the lone surrogates Python keeps them as)."""
    import os
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _events(path: Path, fmt: str | None) -> tuple[list[Any], dict[str, Any]]:
    if fmt is not None:
        from kernel_lib.importers import import_file
        result = import_file(fmt, path)
        return result.events, {"format": fmt, **result.source}
    from kernel_lib.log.files import load_events
    return load_events(path), {"format": "kernel_lib", "file": _shown(path)}


# --- the command ---------------------------------------------------------------------------------------------


def _config(args: argparse.Namespace):
    from kernel_lib.recovery.watchdog.detectors import WatchdogConfig
    return WatchdogConfig(max_period=args.max_period, metric_epoch=args.metric_epoch, metric_grace=args.metric_grace,
                          repetition_window=args.repetition_window,
                          nonce_arguments=tuple(args.nonce) if args.nonce else None)


def _one(path: Path, fmt: str | None, args: argparse.Namespace, config) -> dict[str, Any]:
    from kernel_lib.recovery.watchdog.baselines import run_baseline
    from kernel_lib.recovery.watchdog.detectors import embedding_status, run_watchdog
    from kernel_lib.recovery.watchdog.steps import LOG_STATE_MISSES, watch_steps

    events, source = _events(path, fmt)
    steps = watch_steps(events)
    sources = sorted({s.state_source for s in steps if s.state_source})
    if args.baseline:
        detections = run_baseline(args.baseline, steps)
        detector = args.baseline
    else:
        detections = run_watchdog(steps, config)
        detector = "watchdog"
    out: dict[str, Any] = {
        "source": source, "detector": detector, "steps": len(steps),
        "state_source": sources[0] if len(sources) == 1 else (sources or None),
        "detections": [{"position": d.position, "kind": d.kind, "evidence": d.evidence, "tier": d.tier}
                       for d in detections],
    }
    if not args.baseline:
        out["embedding"] = embedding_status(config).to_json()
        if "log" in sources:
            out["log_state_misses"] = list(LOG_STATE_MISSES)
    return out


def _print_text(report: dict[str, Any]) -> None:
    src = report["source"]
    print(f"{src.get('file')} ({src.get('format')}): {report['steps']} steps, state from "
          f"{report['state_source'] or 'nowhere'}; {report['detector']}: {len(report['detections'])} detection(s)")
    for d in report["detections"]:
        ev = d["evidence"]
        detail = []
        for key in ("period", "unchanged_steps", "repeat_of", "steps_between", "question", "metric", "rule",
                    "similarity", "entropy"):
            if key in ev:
                detail.append(f"{key}={ev[key]}")
        if ev.get("error"):
            detail.append(f"error: {ev['error'][:70]}")
        tier = f"tier {d['tier']}" if d["tier"] is not None else "-"
        print(f"  {d['position']:>6}  {d['kind']:<40} {tier:<6}  {'; '.join(detail)}")
    emb = report.get("embedding")
    if emb is not None and not emb["available"]:
        print(f"  embedding_drift: unavailable ({emb['reason']})")


def _cmd_watchdog(args: argparse.Namespace) -> int:
    config = _config(args)
    targets = _targets(args)
    if args.compare:
        from kernel_lib.recovery.watchdog.compare import compare_baselines
        logs = []
        for path, fmt in targets:
            events, _ = _events(path, fmt)
            logs.append((_shown(path), events))
        comparison = compare_baselines(logs, config)
        out = comparison.to_json()
        if args.json:
            print(json.dumps(out, indent=1, ensure_ascii=False))
            return 0
        _print_comparison(out["summary"])
        return 0
    reports = [_one(path, fmt, args, config) for path, fmt in targets]
    if args.json:
        doc = reports[0] if len(reports) == 1 else {"logs": reports,
                                                     "detections": [d for r in reports for d in r["detections"]]}
        print(json.dumps(doc, indent=1, ensure_ascii=False))
        return 0
    for r in reports:
        _print_text(r)
    sys.stdout.flush()
    return 0


def _print_comparison(summary: dict[str, Any]) -> None:
    print(f"{summary['logs']} logs, {summary['loops_total']} loop(s) found by any detector; "
          f"{summary['clean_runs']} clean runs ({summary['clean_rule']})")
    print(f"  {'detector':<16} {'logs':>5} {'detections':>10} {'loops caught':>12} {'delay mean/max':>15} "
          f"{'FP rate':>8}")
    for name, d in summary["detectors"].items():
        delay = f"{d['delay_steps']['mean']}/{d['delay_steps']['max']}" if d["delay_steps"] else "-"
        fp = f"{d['false_positive_rate']:.3f}" if d["false_positive_rate"] is not None else "-"
        print(f"  {name:<16} {d['logs_with_detections']:>5} {d['detections']:>10} {d['loops_caught']:>12} "
              f"{delay:>15} {fp:>8}")
    for title, key in (("caught by the watchdog only", "only_watchdog"),
                       ("caught by a baseline only", "only_baselines"), ("caught by both", "both")):
        print(f"  {title}: {len(summary[key])}")
        for lp in summary[key]:
            print(f"    {Path(lp['log']).name} at {lp['first_repeat_position']}: {', '.join(lp['kinds'])}")
