"""Loading a log file: JSON lines of canonical events, a SQLite log, or a segment-log directory
(always read-only: inspecting a log never trims or changes it)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable

from kernel_lib.core.events import Event, decode
from kernel_lib.errors import KernelError
from kernel_lib.log.stores import open_store

__all__ = ["JSONL_SUFFIXES", "load_events"]

JSONL_SUFFIXES = (".jsonl", ".ndjson")


def load_events(path: str | os.PathLike, trajectory_id: str | None = None, *,
                on_note: Callable[[str], None] | None = None) -> list[Event]:
    """Events of one trajectory from a JSON-lines file of canonical events (``.jsonl``/``.ndjson``),
    a SQLite log file, or a segment-log directory. Stores are opened read-only: inspecting a log
    never changes it (a torn tail is reported through ``on_note``, by default on stderr, not
    trimmed).

    Returns: the trajectory's events in sequence order.

    Raises KernelError (typed) for a missing path, a malformed line, a file that is not a log,
    an empty log, or an ambiguous trajectory.
    """
    path = os.fspath(path) if path is not None else path
    if on_note is None:
        def on_note(line: str) -> None:
            print(line, file=sys.stderr)
    p = Path(path) if path else Path()
    if not path or not p.exists():
        raise KernelError(f"no such log: {path!r}")
    if p.is_file() and p.suffix.lower() in JSONL_SUFFIXES:
        out = []
        for i, line in enumerate(p.read_bytes().splitlines(), start=1):
            if line.strip():
                try:
                    out.append(decode(line))
                except KernelError as exc:
                    raise type(exc)(f"{path}:{i}: {exc}") from exc
        trajs = sorted({e.trajectory_id for e in out})
        if trajectory_id is None and len(trajs) > 1:
            raise KernelError(f"{path} holds {len(trajs)} trajectories {trajs[:5]}; name one with --trajectory")
        if trajectory_id:
            out = [e for e in out if e.trajectory_id == trajectory_id]
        if not out:
            raise KernelError(f"{path} holds no events"
                              + (f" for trajectory {trajectory_id!r}" if trajectory_id else ""))
        return out
    store = open_store("segment" if p.is_dir() else "sqlite", p, read_only=True)
    try:
        rep = store.recovery
        for line in rep.notes():
            on_note(f"note: {path}: {line}")
        trajs = store.trajectories()
        if not trajs:
            raise KernelError(f"{path} is a {store.name} log with no events")
        if trajectory_id is None:
            if len(trajs) != 1:
                raise KernelError(f"{path} holds {len(trajs)} trajectories {trajs[:5]}; name one with --trajectory")
            trajectory_id = trajs[0]
        elif trajectory_id not in trajs:
            raise KernelError(f"{path} has no trajectory {trajectory_id!r}; it holds {trajs[:5]}")
        return list(store.read(trajectory_id))
    finally:
        store.close()
