"""Frozen compatibility histories: logs written once, in every format, must still read and fold to
the record they folded to when they were written (§11.2.1, §11.8.4; the idea of replaying
checked-in histories in Temporal's replayer tests).

Fault model: a change to the event codec, a store's on-disk format, a payload schema or the
reducer silently alters how an existing log reads. Invariant: every frozen log under
``tests/histories/<version>/<history>/`` opened read-only folds (with the current reducer) to its
``expected_record.json`` exactly; the formats of one history hold the same canonical event bytes;
opening them changes no file. The histories are written by ``tools/freeze_histories.py`` and
never regenerated in place (see ``tests/histories/v1/README.md``).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest
import rfc8785

from kernel_lib.checkpoint import DirectoryBlobStore
from kernel_lib.checkpoint.restore import restore
from kernel_lib.core.record import fold, initial_record
from kernel_lib.errors import PrefixRetiredError
from kernel_lib.log import SegmentStore, SQLiteStore, load_events

ROOT = Path(__file__).resolve().parent / "histories"
#: Where each format of a history lives in its folder.
FORMAT_FILES = {"jsonl": "events.jsonl", "sqlite": "log.sqlite", "segment": "segments"}
#: The event families the first version covers (a history removed from v1 is a failure, not a skip).
V1_HISTORIES = {"worksheet", "in_doubt", "paused_approval", "retry", "model_calls", "checkpoint",
                "imported_openai", "compacted_sqlite"}


def _history_dirs() -> list[Path]:
    return sorted(p.parent for p in ROOT.glob("v*/*/manifest.json"))


def _manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def _expected(folder: Path) -> dict:
    return json.loads((folder / "expected_record.json").read_text())


def _hid(folder: Path) -> str:
    return f"{folder.parent.name}/{folder.name}"


def _compacted(folder: Path) -> bool:
    return "retired_through" in _manifest(folder)


HISTORIES = _history_dirs()
FULL = [h for h in HISTORIES if not _compacted(h)]
COMPACTED = [h for h in HISTORIES if _compacted(h)]
CASES = [(h, fmt) for h in FULL for fmt in _manifest(h)["formats"]]


def _as_json(value) -> dict:
    """A record's ``to_dict()`` as it reads back from JSON (tuples become lists, keys strings)."""
    return json.loads(json.dumps(value))


def _differences(got, want, path: str = "record") -> list[str]:
    if isinstance(got, dict) and isinstance(want, dict):
        out = [f"{path}.{k}: only in the expected record" for k in sorted(set(want) - set(got))]
        out += [f"{path}.{k}: not in the expected record" for k in sorted(set(got) - set(want))]
        for k in sorted(set(got) & set(want)):
            out += _differences(got[k], want[k], f"{path}.{k}")
        return out
    if isinstance(got, list) and isinstance(want, list) and len(got) == len(want):
        return [d for i, (g, w) in enumerate(zip(got, want)) for d in _differences(g, w, f"{path}[{i}]")]
    return [] if _same_json_value(got, want) else [f"{path}: folded {got!r}, expected {want!r}"]


def _same_json_value(a, b) -> bool:
    """Equal as JSON values: 5 and 5.0 are one JSON number (RFC 8785 writes both as ``5``, and a
    record restored from a snapshot holds what the JSON held), but true is not 1 and "1" is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def assert_same_record(got: dict, want: dict, where: str) -> None:
    diffs = _differences(_as_json(got), want)
    assert diffs or rfc8785.dumps(_as_json(got)) == rfc8785.dumps(want), f"{where}: canonical JSON differs"
    assert not diffs, (f"{where} no longer folds to its frozen record ({len(diffs)} differences; a change to the "
                       "codec, a store format or the reducer alters how existing logs read):\n  "
                       + "\n  ".join(diffs[:12]))


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ``root``: relative path -> (kind, size, mtime_ns, mode, sha256 of a file)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = Path(dirpath, n)
            st = p.lstat()
            is_dir = stat.S_ISDIR(st.st_mode)
            out[str(p.relative_to(root))] = ("dir" if is_dir else "file", 0 if is_dir else st.st_size,
                                             st.st_mtime_ns, st.st_mode,
                                             None if is_dir else hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def _open_read_only(folder: Path, fmt: str):
    path = folder / FORMAT_FILES[fmt]
    return SQLiteStore.open(path, read_only=True) if fmt == "sqlite" else SegmentStore.open(path, read_only=True)


# --- the collection itself ----------------------------------------------------------------------------


def test_the_frozen_histories_are_all_there():
    """Every version folder has its README and every history its record, manifest and the files
    of each format it lists; v1 covers the event families it was written for."""
    assert ROOT.is_dir() and HISTORIES, f"no frozen histories under {ROOT}"
    versions = sorted({h.parent for h in HISTORIES})
    assert [v.name for v in versions][0] == "v1"
    for v in versions:
        assert "never regenerate" in (v / "README.md").read_text().lower(), f"{v}/README.md"
    assert {h.name for h in HISTORIES if h.parent.name == "v1"} == V1_HISTORIES
    for h in HISTORIES:
        m = _manifest(h)
        assert m["formats"] and (h / "expected_record.json").is_file(), _hid(h)
        for fmt in m["formats"]:
            assert (h / FORMAT_FILES[fmt]).exists(), f"{_hid(h)}: {FORMAT_FILES[fmt]} missing"
        assert len(m["event_sha256"]) == m["events"] == m["head"], _hid(h)
        assert _expected(h)["trajectory_id"] == m["trajectory_id"], _hid(h)
    for v in versions:
        for leftover in list(v.rglob("*-wal")) + list(v.rglob("*-shm")) + list(v.rglob("LOCK")):
            pytest.fail(f"{leftover} must not be part of a frozen history (a log is frozen closed)")


# --- folding ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("folder,fmt", CASES, ids=[f"{_hid(h)}-{fmt}" for h, fmt in CASES])
def test_a_frozen_log_folds_to_its_expected_record(folder, fmt):
    """Open read-only (``load_events``), fold with the current reducer, compare exactly."""
    notes: list[str] = []
    events = load_events(folder / FORMAT_FILES[fmt], on_note=notes.append)
    if fmt == "jsonl":   # frozen before lines carried digests: one "unchecked" note; the manifest checks them
        assert len(notes) == 1 and "unchecked" in notes[0], f"{_hid(folder)} {fmt}: opening reported {notes}"
        notes = []
    assert notes == [], f"{_hid(folder)} {fmt}: opening reported {notes}"
    m = _manifest(folder)
    assert [e.digest for e in events] == m["event_sha256"], f"{_hid(folder)} {fmt}: the stored events changed"
    record = fold(initial_record(m["trajectory_id"]), events)
    assert_same_record(record.to_dict(), _expected(folder), f"{_hid(folder)} ({fmt})")


@pytest.mark.parametrize("folder", COMPACTED, ids=[_hid(h) for h in COMPACTED])
def test_a_frozen_compacted_log_restores_to_its_expected_record(folder):
    """The SQLite log with a retired prefix (§11.8.3): positions before the mark are gone, the
    retained suffix is the frozen one, and restoring from its checkpoint plus the suffix gives the
    record of the full fold taken before compaction."""
    m = _manifest(folder)
    tid, retired = m["trajectory_id"], m["retired_through"]
    with SQLiteStore.open(folder / "log.sqlite", read_only=True) as store:
        assert store.retired_through(tid) == retired > 0 and store.head(tid) == m["head"]
        with pytest.raises(PrefixRetiredError):
            list(store.read(tid))
        assert [e.digest for e in store.read(tid, retired + 1)] == m["event_sha256"][retired:]
        result = restore(store, tid, DirectoryBlobStore(str(folder / "blobs")))
    assert result.checkpoint is not None
    assert result.suffix_events == m["head"] - result.checkpoint.covered_sequence_number
    assert_same_record(result.record.to_dict(), _expected(folder), f"{_hid(folder)} (restored)")


# --- the formats agree, and reading changes nothing -------------------------------------------------


@pytest.mark.parametrize("folder", FULL, ids=[_hid(h) for h in FULL])
def test_the_formats_of_a_history_hold_byte_identical_canonical_events(folder):
    m = _manifest(folder)
    tid = m["trajectory_id"]
    lines = [line for line in (folder / "events.jsonl").read_bytes().split(b"\n") if line]
    by_format = {"jsonl": lines}
    for fmt in ("sqlite", "segment"):
        with _open_read_only(folder, fmt) as store:
            assert store.trajectories() == [tid] and store.head(tid) == m["head"], f"{_hid(folder)} {fmt}"
            assert store.fence(tid) == m["fence"], f"{_hid(folder)} {fmt}: fence {store.fence(tid)}"
            by_format[fmt] = [e.canonical for e in store.read(tid)]
    assert by_format["sqlite"] == lines, f"{_hid(folder)}: the SQLite log holds other bytes than events.jsonl"
    assert by_format["segment"] == lines, f"{_hid(folder)}: the segment log holds other bytes than events.jsonl"
    assert [hashlib.sha256(b).hexdigest() for b in lines] == m["event_sha256"]


@pytest.mark.parametrize("folder", HISTORIES, ids=[_hid(h) for h in HISTORIES])
def test_opening_a_frozen_history_changes_no_file(folder):
    """Every file's bytes, size, mode and mtime, and the set of entries, are the same after every
    format was opened read-only, read and folded (no -wal/-shm, no LOCK, no trimmed tail)."""
    before = snapshot(folder)
    m = _manifest(folder)
    tid = m["trajectory_id"]
    if _compacted(folder):
        with SQLiteStore.open(folder / "log.sqlite", read_only=True) as store:
            restore(store, tid, DirectoryBlobStore(str(folder / "blobs")))
    else:
        for fmt in m["formats"]:
            fold(initial_record(tid), load_events(folder / FORMAT_FILES[fmt], on_note=lambda line: None))
            if fmt != "jsonl":
                with _open_read_only(folder, fmt) as store:
                    list(store.read(tid))
                    store.fence(tid)
    after = snapshot(folder)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert not changed, f"{_hid(folder)}: opening the frozen logs changed {changed}"
