"""``python -m kernel_lib``: the command-line face of kernel_lib, and the only argparse code in it.

One module per command group, each offering ``add_commands(subparsers)``:

==========================  =====================================================================
module                      commands
==========================  =====================================================================
:mod:`.log`                 ``crash-positions``, ``fold``, ``schema``, ``example``
:mod:`.verify`              ``crashcheck``
:mod:`.bench`               ``bench append|restore|replay|diverge|quorum``
:mod:`.exercises`           ``exercise list|solve|generate|check|strip``
:mod:`.live`                ``worksheet``
:mod:`.cadence`             ``cadence ...``
:mod:`.diverge`             ``diverge``
:mod:`.saga`                ``saga sweep``
:mod:`.plan`                ``plan check|example``
:mod:`.quorum`              ``quorum-cluster``, ``quorum-demo``, ``quorum-placement``
:mod:`.importers`           ``import``
:mod:`.recovery`            ``recovery decide``, ``recovery spin``
:mod:`.watchdog`            ``watchdog``
:mod:`.herd`                ``herd``
:mod:`.quarantine`          ``quarantine demo``
:mod:`.fleet`               ``fleet run``
:mod:`.scorecard`           ``scorecard``
:mod:`.figure5`             ``figure5``
==========================  =====================================================================

Every command has ``--help``. One exit-code policy, in :func:`main`: 0 success; 1 the command ran
and found what it looks for (a violation, a mismatch, an unsound conclusion); 2 a usage error or
an error kernel_lib raises on purpose (:class:`~kernel_lib.errors.KernelError`), or an operating
system error on a path the user gave, printed as one ``error:`` line on stderr, never a traceback;
also 2 for a refusal that reaches here (:class:`~kernel_lib.errors.Refusal`: admission denied, dispatch
withheld), printed as one ``refused:`` line; 130 for Ctrl-C (one ``interrupted`` line, after the
command's own clean-up ran).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Sequence

from kernel_lib import __version__
from kernel_lib.errors import KernelError, Refusal

__all__ = ["build_parser", "main"]

#: The command groups, in the order ``--help`` lists them. Each module is light to import: it declares
#: ``COMMANDS`` (top-level command -> one-line help) and imports what a command needs only inside
#: ``add_commands`` and the command itself, so ``--help`` and each command load only what they use.
COMMAND_GROUPS = ("log", "verify", "bench", "exercises", "live", "cadence", "diverge", "quorum", "importers",
                  "course", "saga", "recovery", "plan", "watchdog", "herd", "quarantine", "scorecard",
                  "fleet", "figure5")


def _group(name: str):
    return importlib.import_module(f"kernel_lib.cli.{name}")


def command_of(argv: Sequence[str]) -> str | None:
    """The top-level command ``argv`` names: its first token that is not an option (the top level
    has only flag options: ``--help``, ``--version``), or None."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``python -m kernel_lib`` parser; each subcommand sets ``func(args) -> exit code``.

    ``only``: a top-level command name. Then only the group that owns it builds its full parsers
    (and imports what they need); every other command is listed with its one-line help but not
    built. None builds every group (for documentation and tests)."""
    ap = argparse.ArgumentParser(
        prog="python -m kernel_lib",
        description="durable-agents-lab kernel: trajectory logs, fold, intent before dispatch, "
                    "crash analysis, the live crash worksheet, checkpoints and cadence, resume, "
                    "replay and divergence, imports of other agents' logs (Durable Execution §11.1-11.9); "
                    "sagas, forward recovery and pivots, semantic watchdogs, the tool gateway's "
                    "breakers and bulkheads, the retry-storm simulator, quarantine and taint (Failure "
                    "Recovery); exercises and benchmarks of both.")
    ap.add_argument("--version", action="version", version=f"kernel_lib {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_GROUPS:
        group = _group(name)
        if only is None or only in group.COMMANDS:
            group.add_commands(sub)
        else:
            for command, help_text in group.COMMANDS.items():
                sub.add_parser(command, help=help_text, add_help=False)
    return ap


def _leaf_parser(ap: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.ArgumentParser:
    """The deepest (sub)parser ``argv`` names: ``bench restore --bogus`` -> the ``bench restore`` parser."""
    parser = ap
    for word in argv:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or word not in subs[0].choices:
            continue
        parser = subs[0].choices[word]
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit code (see the module docstring for the policy)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = build_parser(only=command_of(argv) or "")
    args, extras = ap.parse_known_args(argv)
    if extras:   # name the command that does not take them, with its own usage (argparse names the top level)
        _leaf_parser(ap, argv).error(f"unrecognized arguments: {' '.join(extras)}")
    if not getattr(args, "func", None):
        ap.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except KernelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Refusal as exc:   # not a fault, but the command could not do what was asked
        print(f"refused: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:   # Ctrl-C: the command's own clean-up (with/finally) has run on the way out
        print("interrupted (Ctrl-C): what the command had started was stopped", file=sys.stderr)
        return 130
    except BrokenPipeError:   # output piped into head & co.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:   # a path the user gave: missing directory, permissions, a directory for a file
        print(f"error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
        return 2
