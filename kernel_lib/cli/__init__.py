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
:mod:`.quorum`              ``quorum-cluster``, ``quorum-demo``, ``quorum-placement``
:mod:`.importers`           ``import``
==========================  =====================================================================

Every command has ``--help``. One exit-code policy, in :func:`main`: 0 success; 1 the command ran
and found what it looks for (a violation, a mismatch, an unsound conclusion); 2 a usage error or
an error kernel_lib raises on purpose (:class:`~kernel_lib.errors.KernelError`), or an operating
system error on a path the user gave, printed as one ``error:`` line on stderr, never a traceback;
also 2 for a refusal that reaches here (:class:`~kernel_lib.errors.Refusal`: admission denied, dispatch
withheld), printed as one ``refused:`` line.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

import kernel_lib.cli.bench as bench_commands
import kernel_lib.cli.cadence as cadence_commands
import kernel_lib.cli.diverge as diverge_commands
import kernel_lib.cli.exercises as exercise_commands
import kernel_lib.cli.importers as import_commands
import kernel_lib.cli.live as live_commands
import kernel_lib.cli.log as log_commands
import kernel_lib.cli.quorum as quorum_commands
import kernel_lib.cli.verify as verify_commands
from kernel_lib import __version__
from kernel_lib.errors import KernelError, Refusal

__all__ = ["build_parser", "main"]

#: The command groups, in the order ``--help`` lists them.
COMMAND_GROUPS = (log_commands, verify_commands, bench_commands, exercise_commands, live_commands,
                  cadence_commands, diverge_commands, quorum_commands, import_commands)


def build_parser() -> argparse.ArgumentParser:
    """The whole ``python -m kernel_lib`` parser; each subcommand sets ``func(args) -> exit code``."""
    ap = argparse.ArgumentParser(
        prog="python -m kernel_lib",
        description="durable-agents-lab kernel: trajectory logs, fold, intent before dispatch, "
                    "crash analysis, the live crash worksheet, checkpoints and cadence, resume, "
                    "replay and divergence, imports of other agents' logs, exercises, "
                    "benchmarks (Durable Execution §11.1-11.9).")
    ap.add_argument("--version", action="version", version=f"kernel_lib {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    for group in COMMAND_GROUPS:
        group.add_commands(sub)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit code (see the module docstring for the policy)."""
    ap = build_parser()
    args = ap.parse_args(argv)
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
    except BrokenPipeError:   # output piped into head & co.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:   # a path the user gave: missing directory, permissions, a directory for a file
        print(f"error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
        return 2
