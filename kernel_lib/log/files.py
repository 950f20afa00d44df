"""Loading a log file: JSON lines of canonical events, a SQLite log, or a segment-log directory
(always read-only: inspecting a log never trims or changes it), and writing JSON lines.

JSON-lines format (what :func:`encode_jsonl` writes; every writer in the project uses it):
one line per event, ``{"digest":"<sha256 hex of the event's canonical bytes>","event":<the
event's canonical RFC 8785 JSON>}`` followed by ``\n``. The line is itself RFC 8785 JSON, so the
event's canonical bytes are the slice between ``"event":`` and the final ``}``; any JSON reader
gets the event with ``json.loads(line)["event"]``. The digest is the one the stores keep
(:attr:`~kernel_lib.core.events.Event.digest`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Callable, Iterable

from kernel_lib.core.events import Event, decode, from_dict
from kernel_lib.errors import ConflictingDuplicateError, CorruptLogError, KernelError
from kernel_lib.log.stores import open_store

__all__ = ["JSONL_SUFFIXES", "encode_jsonl", "jsonl_line", "load_events", "split_jsonl_line"]

JSONL_SUFFIXES = (".jsonl", ".ndjson")

_CHECKED_LINE = re.compile(rb'\A\{"digest":"([0-9a-f]{64})","event":(\{.*\})\}\Z', re.DOTALL)
_WRAPPER_START = re.compile(rb'\A\{\s*"(?:digest|event)"\s*:')


def jsonl_line(event: Event) -> bytes:
    """One JSON-lines record of ``event``: ``{"digest":...,"event":...}`` and ``\\n`` (module
    docstring). Raises KernelError if ``event`` is not an Event."""
    if not isinstance(event, Event):
        raise KernelError(f"jsonl_line needs a kernel_lib Event, got {type(event).__name__}")
    return b'{"digest":"' + event.digest.encode("ascii") + b'","event":' + event.canonical + b"}\n"


def encode_jsonl(events: Iterable[Event]) -> bytes:
    """The events as JSON lines with their digests (module docstring): what every writer of a
    ``.jsonl`` log in the project writes, and what :func:`load_events` checks."""
    return b"".join(jsonl_line(e) for e in events)


def split_jsonl_line(line: bytes) -> tuple[bytes, "str | None"]:
    """``(event bytes, digest)`` of one line as :func:`jsonl_line` writes it, or ``(line, None)``
    for a line that is a bare event (written by another tool, unchecked). A wrapper that was
    re-serialized (other spacing or key order) gives the event's canonical bytes re-encoded.

    Raises the typed decode errors (MalformedEventError, ...) for a re-serialized wrapper whose
    event does not decode. Nothing is verified here: :func:`load_events` checks the digest.
    """
    line = line.strip()
    m = _CHECKED_LINE.match(line)
    if m:
        return m.group(2), m.group(1).decode("ascii")
    if _WRAPPER_START.match(line):
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            obj = None
        if isinstance(obj, dict) and set(obj) == {"digest", "event"} and isinstance(obj["digest"], str):
            return from_dict(obj["event"]).canonical, obj["digest"]
    return line, None


def _read_jsonl(path: str, on_note: Callable[[str], None]) -> list[Event]:
    """Every event of a JSON-lines log, each digest verified, duplicates checked (load_events)."""
    out: list[Event] = []
    seen: dict[str, tuple[int, str]] = {}       # event id -> (line, digest)
    unchecked = checked = lines = repeats = 0
    first_unchecked = first_checked = 0
    for i, line in enumerate(Path(path).read_bytes().splitlines(), start=1):
        if not line.strip():
            continue
        lines += 1
        try:
            raw, stored = split_jsonl_line(line)
        except KernelError as exc:
            raise type(exc)(f"{path}:{i}: {exc}") from exc
        if stored is not None and hashlib.sha256(raw).hexdigest() != stored:   # before decoding; lowercase hex
            raise CorruptLogError(f"{path}:{i}: the event on this line does not match the digest stored with it "
                                  f"({stored[:16]}...): the line was changed after it was written")
        if stored is None:
            unchecked += 1
            first_unchecked = first_unchecked or i
        else:
            checked += 1
            first_checked = first_checked or i
        if checked and unchecked:     # a line stripped of its digest inside a checked log
            raise CorruptLogError(f"{path}:{i if stored is None else first_unchecked}: "
                                  f"this line carries no digest, but line {first_checked} does: a log the "
                                  "project wrote has a digest on every line, so this one was changed or "
                                  "spliced in after it was written")
        try:
            ev = decode(raw)
        except KernelError as exc:
            raise type(exc)(f"{path}:{i}: {exc}") from exc
        first = seen.get(ev.event_id)
        if first is not None:
            if first[1] != ev.digest:
                raise ConflictingDuplicateError(
                    f"{path}:{i}: event id {ev.event_id} was already read at line {first[0]} with other content "
                    "(a conflicting duplicate: an integrity violation or a split brain, never a retry)")
            repeats += 1      # an identical repeat, as a store acknowledges an identical retry: kept once
            continue
        seen[ev.event_id] = (i, ev.digest)
        out.append(ev)
    if unchecked:
        on_note(f"note: {path}: unchecked: {unchecked} of {lines} lines carry no digest (not written by "
                "kernel_lib?), so damage inside them cannot be detected")
    if repeats:
        on_note(f"note: {path}: {repeats} lines repeat an earlier event byte for byte; each event is read once")
    return out


def load_events(path: str | os.PathLike, trajectory_id: str | None = None, *,
                on_note: Callable[[str], None] | None = None) -> list[Event]:
    """Events of one trajectory from a JSON-lines log (``.jsonl``/``.ndjson``), a SQLite log file,
    or a segment-log directory. Stores are opened read-only: inspecting a log never changes it (a
    torn tail is reported through ``on_note``, by default on stderr, not trimmed).

    A JSON-lines log gets the stores' checks. Each line is ``{"digest":"<sha256 hex>","event":
    <canonical event>}`` (module docstring; :func:`encode_jsonl` writes it): the event must be
    canonical and match its digest. An event id read twice must carry the same bytes; an exact
    repeat is read once (as a store acknowledges an identical retry) and noted. A line that is a
    bare canonical event (a file written by another tool) is read, and the file gets one
    ``unchecked`` note through ``on_note``; a file that mixes both is refused (a line stripped of
    its digest is indistinguishable from a tampered one).

    Returns: the trajectory's events in file order (sequence order for a store).

    Raises:
        CorruptLogError: a JSON line whose event does not match its digest, or a line without a
            digest in a log whose other lines carry one (``file:line``).
        ConflictingDuplicateError: an event id read twice with different content (``file:line``).
        KernelError (typed): a missing path, a malformed line (``file:line``), a file that is not
            a log, an empty log, or an ambiguous trajectory.
    """
    path = os.fspath(path) if path is not None else path
    if on_note is None:
        def on_note(line: str) -> None:
            print(line, file=sys.stderr)
    p = Path(path) if path else Path()
    if not path or not p.exists():
        raise KernelError(f"no such log: {path!r}")
    if p.is_file() and p.suffix.lower() in JSONL_SUFFIXES:
        out = _read_jsonl(path, on_note)
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
