"""A missing log is not an empty one (issue 14, §11.5 resume under a new owner).

Fault model: a worker (or a person) opens a log read-write at a path that does not exist: a typo,
an unmounted volume, a log that was moved away.
Invariant: a read-write open of a missing SQLite file or segment directory raises
LogNotFoundError and creates nothing on disk unless the caller passed ``create=True``; with it a
new, empty log is started; an existing log opens the same either way.
Goal: a resuming owner pointed at the wrong path stops with a typed error instead of reading an
empty log and concluding that nothing was ever dispatched.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings, strategies as st

from kernel_lib.core.events import Event, RuntimeInput
from kernel_lib.errors import ConfigError, LogNotFoundError, StoreError
from kernel_lib.log import AckTier, SegmentStore, SQLiteStore, open_store
from kernel_lib.log.fs import MemoryFileSystem

F = AckTier.FDATASYNC


def ev(seq: int) -> Event:
    return Event.create(trajectory_id="t", event_id=f"e{seq}", sequence_number=seq, owner_epoch=0,
                        payload=RuntimeInput(kind="identifier", name="n", value=seq))


def _tree(root) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, n), root) for d, ds, fs in os.walk(root) for n in ds + fs)


@pytest.mark.parametrize("kind,name", [("sqlite", "log.sqlite"), ("segment", "seglog")])
def test_open_store_read_write_of_a_missing_path_refuses_and_creates_nothing(tmp_path, kind, name):
    with pytest.raises(LogNotFoundError, match="create=True"):
        open_store(kind, tmp_path / name)
    assert _tree(tmp_path) == []
    assert issubclass(LogNotFoundError, StoreError)


@pytest.mark.parametrize("opener", [SQLiteStore.open, SQLiteStore, SegmentStore.open])
def test_store_classes_refuse_a_missing_path_without_create(tmp_path, opener):
    with pytest.raises(LogNotFoundError):
        opener(tmp_path / "nested" / "log")
    assert _tree(tmp_path) == []


@pytest.mark.parametrize("kind,name", [("sqlite", "log.sqlite"), ("segment", "seglog")])
def test_create_starts_a_new_log_and_an_existing_log_needs_no_create(tmp_path, kind, name):
    path = tmp_path / name
    with open_store(kind, path, create=True) as s:
        assert s.head("t") == 0 and s.trajectories() == []
        s.append(ev(1), F)
    for create in (False, True):
        with open_store(kind, path, create=create) as s:
            assert s.head("t") == 1                   # an existing log is never recreated
    with open_store(kind, path, read_only=True, create=True) as s:   # read-only never creates, reads
        assert s.head("t") == 1


@pytest.mark.parametrize("kind,name", [("sqlite", "log.sqlite"), ("segment", "seglog")])
def test_read_only_of_a_missing_path_is_refused_even_with_create(tmp_path, kind, name):
    with pytest.raises(LogNotFoundError):
        open_store(kind, tmp_path / name, read_only=True, create=True)
    assert _tree(tmp_path) == []


@pytest.mark.parametrize("bad", [1, "yes", None])
def test_create_must_be_a_bool(tmp_path, bad):
    with pytest.raises(ConfigError):
        SQLiteStore.open(tmp_path / "x.sqlite", create=bad)
    with pytest.raises(ConfigError):
        SegmentStore.open(tmp_path / "x", create=bad)
    assert _tree(tmp_path) == []


@settings(max_examples=30, deadline=None)
@given(parts=st.lists(st.text("abcxyz", min_size=1, max_size=4), min_size=1, max_size=3))
def test_segment_store_on_any_missing_directory_writes_no_file(parts):
    """Counted by the file system that would receive the writes: nothing is created."""
    mem = MemoryFileSystem()
    before = (mem.snapshot(), set(mem.dirs))
    with pytest.raises(LogNotFoundError):
        SegmentStore.open("/" + "/".join(parts), fs=mem)
    assert (mem.snapshot(), set(mem.dirs)) == before


# --- from the adversarial pass: a file or folder that exists but never held a log -------------------
def test_an_empty_file_is_not_an_empty_log(tmp_path):
    """Fault: the path names a zero-byte file (touched by mistake, a failed copy). Invariant: only
    ``create=True`` turns it into a log; a WAL-mode log whose main file is still empty (its pages in
    the ``-wal``) is a log. Goal: LogNotFoundError and the file left at zero bytes."""
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    with pytest.raises(LogNotFoundError, match="the file is empty"):
        SQLiteStore.open(empty)
    assert empty.stat().st_size == 0 and not (tmp_path / "empty.sqlite-wal").exists()
    s = SQLiteStore.open(empty, create=True)
    s.append(ev(1), F)
    s.close()
    assert [e.event_id for e in SQLiteStore.open(empty, read_only=True).read("t")] == ["e1"]


def test_a_folder_that_never_held_a_segment_log_is_not_one(tmp_path):
    """Fault: the path names an existing folder with other files in it (or none). Invariant: a
    read-write open without ``create=True`` writes nothing into a folder that holds no segment
    file and no LOCK. Goal: LogNotFoundError and the folder's listing unchanged."""
    for name, files in (("junk", {"notes.txt": b"mine"}), ("bare", {})):
        d = tmp_path / name
        d.mkdir()
        for f, data in files.items():
            (d / f).write_bytes(data)
        with pytest.raises(LogNotFoundError, match="holds no segment file"):
            SegmentStore.open(d)
        with pytest.raises(LogNotFoundError):
            open_store("segment", d)
        assert sorted(os.listdir(d)) == sorted(files)
    s = SegmentStore.open(tmp_path / "bare", create=True)
    s.append(ev(1), F)
    s.close()
    s = SegmentStore.open(tmp_path / "bare")        # a log now: opens without create
    assert [e.event_id for e in s.read("t")] == ["e1"]
    s.close()
