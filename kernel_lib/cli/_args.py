"""What every command group of the CLI shares: argument types and the log argument."""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # the CLI imports what a command needs only when it runs
    from kernel_lib.core.events import Event

LOG_HELP = ("a .jsonl file of canonical events (each line's digest checked), a SQLite log file, "
            "or a segment-log directory "
            "(default: the built-in crash-worksheet example trajectory)")


def int_at_least(lo: int):
    """argparse type: an integer >= ``lo``."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"must be >= {lo}, got {v}")
        return v
    return parse


def positive_seconds(text: str) -> float:
    """argparse type: a finite number of seconds > 0 (not NaN, not infinite)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {text!r}")
    return v


def events_from(path: str | None, trajectory_id: str | None = None) -> list[Event]:
    """The events a command reads: the log at ``path`` (read-only), or the built-in crash-worksheet
    example trajectory when no path is given."""
    if path is None:
        from kernel_lib.sim.worksheet import worksheet_events
        return worksheet_events()
    from kernel_lib.log.files import load_events
    return load_events(path, trajectory_id)
