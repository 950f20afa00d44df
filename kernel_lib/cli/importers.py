"""``python -m kernel_lib import FORMAT PATH --out LOG``: translate another agent's recorded
trajectory into a JSON-lines event log (§11.6, §11.7; table 1).

Errors are :class:`~kernel_lib.errors.KernelError` subclasses (``ImportFormatError`` names the
file and the JSON path), which the main CLI prints as one ``error:`` line with exit code 2.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import textwrap
from pathlib import Path

from kernel_lib.errors import KernelError

#: the top-level command of this group and its one-line help (``python -m kernel_lib --help``)
COMMANDS = {"import": "turn another agent's recorded trajectory (SWE-agent, tau-bench, Who&When, OpenAI "
                      "messages) into an event log"}

JSONL_SUFFIXES = (".jsonl", ".ndjson")

_DESCRIPTION = """\
Read one trajectory file recorded by another agent harness and write it as this project's
event log (canonical JSON lines, one event per line), which `python -m kernel_lib fold --log LOG`
folds. The file is read where it is; nothing is copied.

kept, as recorded:
  model turns      ContextBuilt (delivered input = the messages the source shows before the
                   turn, when it shows them) + ModelReplied (text, proposed calls, tokens if any);
                   invocation id turn-NNNN = the turn's position in the source list
  tool calls       ToolIntent call-NNNN with the tool name and parsed arguments, and a complete
                   ToolResult with the observation (failed where the source marks an error);
                   the source's own call ids are kept as source_call_id
  other messages   user/system/executor messages as RuntimeInput(kind=order) at their place
  costs, end       recorded spending as one BudgetSettled (no reservation); the recorded end of
                   the run as a final ControlChanged
  labels, scores   Who&When mistake labels, tau-bench rewards and user-simulator script: in the
                   notes of the import:source RuntimeInput, never as agent events

marked missing, never invented (the sentinel is "%s"):
%s
"""

_EPILOG = """\
formats:
  swe-agent        SWE-agent .traj {trajectory, history, info, replay_config?}
  tau-bench        tau-bench {task_id, trial, reward, info, traj: [OpenAI messages]}
  who-and-when     Who&When {history: [{content, role, name?}], question, mistake_agent, mistake_step, ...}
  openai-messages  a list of OpenAI chat messages, or {"messages": [...], "model"?, "tools"?}

examples:
""" + (
    "  python -m kernel_lib import swe-agent ../shared/data/trajectories/swe-agent/pydicom__pydicom-1458.traj"
    " --out /tmp/pydicom.jsonl\n"
    "  python -m kernel_lib fold --log /tmp/pydicom.jsonl\n"
    "  python -m kernel_lib import tau-bench ../shared/data/trajectories/tau-bench-airline/task08_trial1.json"
    " --out /tmp/t08.jsonl --json\n"
)


def _lacks_text() -> str:
    from kernel_lib.importers import LACKS
    return "\n".join(textwrap.fill(v, width=100, initial_indent=f"  {k:<24}", subsequent_indent=" " * 26)
                     for k, v in LACKS.items())


def _umask() -> int:
    """The process umask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _check_out(out: Path, shown: str, force: bool) -> None:
    """Refuse an ``--out`` that cannot or must not be written, naming the user's path."""
    parent = out.parent
    if not parent.exists():
        raise KernelError(f"--out {shown}: directory {parent} does not exist; create it first")
    if not parent.is_dir():
        raise KernelError(f"--out {shown}: {parent} is not a directory")
    if out.is_dir():
        raise KernelError(f"--out {shown} is a directory; name a log file inside it")
    if (out.exists() or out.is_symlink()) and not force:   # is_symlink: a dangling link is not replaced silently
        what = "is a symbolic link" + ("" if out.exists() else " (dangling)")
        raise KernelError(f"--out {shown} {what if out.is_symlink() else 'exists'}; pass --force to replace it")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise KernelError(f"--out {shown}: directory {parent} is not writable")


def _write_atomic(path: Path, data: bytes, shown: str) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory, then rename it into
    place; the log gets the ordinary mode a new file would (0666 less the umask), not mkstemp's 0600.
    Failures are reported against ``shown`` (the user's --out), never the temporary name."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise KernelError(f"--out {shown}: cannot write in {path.parent}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise KernelError(f"--out {shown}: cannot write: {exc.strerror or exc}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _cmd_import(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if out.suffix.lower() not in JSONL_SUFFIXES:
        raise KernelError(f"--out {args.out}: name the log .jsonl or .ndjson (that is how `fold --log` "
                          "recognises a JSON-lines log)")
    _check_out(out, args.out, args.force)
    from kernel_lib.importers import import_file
    result = import_file(args.format, args.path)
    _write_atomic(out, result.to_jsonl(), args.out)
    if args.json:
        print(json.dumps({**result.summary(), "out": str(out), "warnings": result.notes.get("warnings", []),
                          "redacted_places": len(result.notes.get("redacted", []))}, sort_keys=True))
        return 0
    c = result.counts
    print(f"imported {args.format} {result.source['file']} (sha256 {result.source['sha256'][:12]}) -> {out}")
    print(f"  trajectory {result.trajectory_id}: {c['events']} events, {c['model_turns']} model turns, "
          f"{c['tool_calls']} tool calls, {c['tool_results']} tool results, {c['inputs']} other messages")
    print(f"  lacks: {', '.join(result.lacks)}")
    for w in result.notes.get("warnings", []):
        print(f"  note: {w}")
    if result.notes.get("redacted"):
        print(f"  redacted (credential-looking values): {len(result.notes['redacted'])} place(s), listed in the notes")
    print(f"  fold it: python -m kernel_lib fold --log {out}")
    return 0


def add_commands(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``import`` command on a ``python -m kernel_lib`` subparsers object."""
    from kernel_lib.importers import FORMATS, NOT_RECORDED
    p = subparsers.add_parser(
        "import", help=COMMANDS["import"],
        description=_DESCRIPTION % (NOT_RECORDED, _lacks_text()), epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("format", choices=sorted(FORMATS), help="the source's format")
    p.add_argument("path", help="the trajectory file (read in place, never copied)")
    p.add_argument("--out", required=True, metavar="LOG", help="JSON-lines log to write (.jsonl or .ndjson)")
    p.add_argument("--force", action="store_true", help="replace LOG if it exists")
    p.add_argument("--json", action="store_true",
                   help="print a JSON summary (trajectory id, source, counts, lacks, warnings) instead of text; "
                        "the full notes are in the log's import:source RuntimeInput")
    p.set_defaults(func=_cmd_import)
    return p
