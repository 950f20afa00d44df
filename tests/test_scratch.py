"""The scratch-folder policy of the notebooks (kernel_lib.course.scratch) and the disk identification
behind it (kernel_lib._support.disks).

Fault model: a notebook kernel dies without cleaning up, a parent is misconfigured, the temporary
directory is kept in memory. Invariants: a folder never lands inside the project checkout; every folder
says which filesystem it is on, and a tmpfs one says its timings do not measure a disk; leftovers of a
dead kernel are swept; a context block removes its folder even when the block fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kernel_lib._support import disks
from kernel_lib._support.disks import FilesystemInfo, filesystem_of
from kernel_lib.course import scratch as scratch_mod
from kernel_lib.course.scratch import SCRATCH_ENV, ScratchArea, project_checkout, scratch_dir, scratch_parent
from kernel_lib.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def test_filesystem_of_names_the_mount_holding_a_path(tmp_path):
    fs = filesystem_of(tmp_path)
    assert fs.path == os.path.realpath(tmp_path)
    if Path("/proc/self/mountinfo").exists():
        assert fs.mount_point is not None and fs.path.startswith(fs.mount_point.rstrip("/"))
        assert fs.fs_type != "unknown" and fs.in_memory is (fs.fs_type in disks.IN_MEMORY_FS_TYPES)
    # a path that does not exist yet is answered for its nearest existing ancestor
    assert filesystem_of(tmp_path / "not" / "yet").mount_point == fs.mount_point


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm on this machine")
def test_tmpfs_is_reported_as_memory_not_a_disk():
    fs = filesystem_of("/dev/shm")
    if fs.fs_type != "tmpfs":
        pytest.skip(f"/dev/shm is {fs.fs_type} here")
    assert fs.in_memory and not fs.real_disk
    assert "does not reach a disk" in fs.describe()


def test_unreadable_mount_table_gives_unknown_not_an_error(tmp_path, monkeypatch):
    real_open = open

    def no_proc(path, *a, **kw):
        if str(path) in ("/proc/self/mountinfo", "/proc/mounts"):
            raise OSError("no /proc here")
        return real_open(path, *a, **kw)

    monkeypatch.setattr("builtins.open", no_proc)
    fs = filesystem_of(tmp_path)
    assert fs.fs_type == "unknown" and fs.in_memory is None and not fs.real_disk
    assert "could not be identified" in fs.describe()


def test_a_ram_block_device_counts_as_memory_whatever_its_filesystem(tmp_path, monkeypatch):
    monkeypatch.setattr(disks, "_mounts", lambda: [("/", "ext4", "/dev/vda"), (str(tmp_path), "ext4", "/dev/zram0")])
    assert filesystem_of(tmp_path).in_memory and not filesystem_of("/").in_memory


def test_area_makes_marked_folders_and_a_block_removes_its_folder_even_on_failure(tmp_path):
    area = ScratchArea("nbtest", parent=tmp_path)
    assert not area.all_removed()                       # nothing made yet: the last-cell check must not pass
    d = area.dir("pause")
    assert d.path.parent == tmp_path and d.path.name.startswith("nbtest-pause-")
    assert (d.path / "owner.pid").read_text().strip() == str(os.getpid())
    assert d.name == str(d.path) and os.fspath(d) == str(d.path) and d / "x" == d.path / "x"
    with pytest.raises(RuntimeError):
        with area.dir("fails") as path:
            (path / "snap").mkdir()
            (path / "snap" / "f").write_text("read-only")
            (path / "snap" / "f").chmod(0o444)
            (path / "snap").chmod(0o555)                 # read-only snapshots are removed too
            raise RuntimeError("cell failed")
    assert area.leftovers() == [d.path]
    assert d.cleanup() and d.cleanup()                   # idempotent
    assert area.all_removed()
    assert area.filesystem == filesystem_of(tmp_path) and str(tmp_path) in area.describe()


def test_a_parent_inside_the_project_checkout_is_refused(monkeypatch):
    if project_checkout() is None:
        pytest.skip("kernel_lib runs from an installed copy here")
    with pytest.raises(ConfigError, match="inside the project checkout"):
        ScratchArea("nbtest", parent=ROOT / "notebooks")
    monkeypatch.setenv(SCRATCH_ENV, str(ROOT))
    with pytest.raises(ConfigError, match=SCRATCH_ENV):
        scratch_parent()


def test_parent_policy_argument_then_environment_then_temp_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(SCRATCH_ENV, str(tmp_path / "from-env"))
    assert scratch_parent(tmp_path / "arg") == tmp_path / "arg"
    assert scratch_parent() == tmp_path / "from-env"
    monkeypatch.delenv(SCRATCH_ENV)
    assert scratch_parent() == Path(tempfile.gettempdir())
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="not a directory"):
        scratch_parent(tmp_path / "file")


def test_a_temp_dir_kept_in_memory_falls_back_to_the_user_cache_on_a_disk(tmp_path, monkeypatch):
    monkeypatch.delenv(SCRATCH_ENV, raising=False)
    cache = tmp_path / "cache"
    monkeypatch.setattr(scratch_mod, "USER_CACHE_SCRATCH", cache)
    tmp = Path(tempfile.gettempdir())

    def fake(path):
        mem = Path(path) == tmp
        return FilesystemInfo(str(path), "/", "tmpfs" if mem else "ext4", "dev", mem)

    monkeypatch.setattr(scratch_mod, "filesystem_of", fake)
    assert scratch_parent() == cache
    d = ScratchArea("nbtest").dir("x")
    try:
        assert d.path.parent == cache and d.on_real_disk and d.measured_on().startswith("measured on this machine")
    finally:
        d.cleanup()


def test_measured_on_says_when_a_folder_is_in_memory(tmp_path):
    d = ScratchArea("nbtest", parent=tmp_path).dir("x")
    d.filesystem = FilesystemInfo(str(d.path), "/dev/shm", "tmpfs", "tmpfs", True)
    assert d.measured_on() == "measured in memory (tmpfs), not on a disk" and not d.on_real_disk
    d.cleanup()


def test_folders_of_a_dead_kernel_are_swept_by_the_next_area(tmp_path):
    code = ("import sys, os; from kernel_lib.course.scratch import ScratchArea; "
            "d = ScratchArea('nbtest', parent=sys.argv[1]).dir('left'); print(d.path); os._exit(0)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    left = Path(out.stdout.strip())
    assert left.is_dir()                                 # the process died without cleaning up
    other = tmp_path / "other-owner"
    other.mkdir()
    ScratchArea("nbtest", parent=tmp_path)
    assert not left.exists() and other.exists()          # only this name's folders of dead owners go


@pytest.mark.parametrize("bad", ["", "a/b", "../up", "sp ace"])
def test_bad_names_and_labels_are_typed_errors(tmp_path, bad):
    with pytest.raises(ConfigError):
        ScratchArea(bad, parent=tmp_path)
    with pytest.raises(ConfigError):
        ScratchArea("nbtest", parent=tmp_path).dir(bad)


def test_scratch_dir_is_one_folder_of_a_fresh_area(tmp_path):
    with scratch_dir("nbtest", "one", parent=tmp_path) as path:
        assert path.is_dir() and path.name.startswith("nbtest-one-")
    assert not path.exists()
