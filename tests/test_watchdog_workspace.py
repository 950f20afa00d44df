"""The watchdog's workspace state hash (Failure Recovery, "Semantic Watchdog Timers", table 6's
state-hash row): the Merkle form over the Chapter 11 checkpoint entries, invariances, ignore
globs, incremental hashing by every change source against a fresh full hash, and typed errors.

Expected digests are computed independently: by a recursive reference written here over the
checkpoint layer's own directory scan (``scan_directory``) and the ``rfc8785`` encoder, or by a
fresh hasher, never copied from the hasher under test.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel_lib.checkpoint.tree import FileEntry, Tree, scan_directory
from kernel_lib.errors import (CheckpointError, ConfigError, RecoveryError, WatchdogError, WorkspaceMissingError,
                               WorkspaceUnreadableError)
from kernel_lib.recovery.watchdog import workspace as ws
from kernel_lib.recovery.watchdog.workspace import DEFAULT_IGNORE_GLOBS, WorkspaceHasher, inotify_available

HAS_INOTIFY = inotify_available()[0]
SOURCES = ["scan", pytest.param("inotify", marks=pytest.mark.skipif(not HAS_INOTIFY, reason="no inotify here"))]
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def write(root: Path, rel: str, data: bytes) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)


def stripped_tree(root: Path, ignore=("__pycache__",)) -> Tree:
    """The checkpoint layer's tree of ``root`` with every executable flag cleared."""
    tree, _ = scan_directory(root, ignore=ignore)
    return Tree({p: FileEntry(e.sha256, e.size, False) for p, e in tree.files.items()})


def merkle_reference(tree: Tree) -> str:
    """The Merkle root by its definition: a node per directory, RFC 8785, children as 'name/'."""
    import hashlib

    def node(files: dict[str, FileEntry]) -> tuple[str, int]:
        here, below = {}, {}
        for path, e in files.items():
            head, sep, rest = path.partition("/")
            if sep:
                below.setdefault(head, {})[rest] = e
            else:
                here[head] = {"executable": False, "sha256": e.sha256, "size": e.size}
        size = sum(e.size for e in files.values())
        for name, sub in below.items():
            digest, sub_size = node(sub)
            here[name + "/"] = {"executable": False, "sha256": digest, "size": sub_size}
        body = rfc8785.dumps({"files": here, "format": ws.NODE_FORMAT})
        return hashlib.sha256(body).hexdigest(), size

    return node(tree.files)[0]


def fresh(root: Path, **kw) -> str:
    with WorkspaceHasher(root, change_source="scan", **kw) as h:
        return h.hash().digest


# --- canonical form ------------------------------------------------------------------------------------

# names mixing ASCII, BMP and astral characters: RFC 8785 orders keys by UTF-16 code units, where an
# astral character (a surrogate pair, 0xD8xx) sorts before U+E000..U+FFFF, unlike Python's str order
_NAME = st.text(st.sampled_from("ab_.-Zé\u00ff\ue000\uffe0\U0001f600\U00010000\" \t\n"), min_size=1, max_size=6).filter(
    lambda n: n not in (".", "..") and n not in DEFAULT_IGNORE_GLOBS and not n.endswith("~")
    and not n.endswith((".log", ".tmp", ".swp", ".swo", ".pyc", ".pyo")))
_FILES = st.dictionaries(st.lists(_NAME, min_size=1, max_size=3).map("/".join), st.binary(max_size=64),
                         min_size=0, max_size=8)


def _materialize(root: Path, files: dict[str, bytes]) -> dict[str, bytes]:
    """Write ``files``, skipping any path that collides with another's directory; what was written."""
    written: dict[str, bytes] = {}
    for rel, data in files.items():
        parts = rel.split("/")
        if any("/".join(parts[:i]) in written for i in range(1, len(parts))) or any(
                w.startswith(rel + "/") for w in written):
            continue
        write(root, rel, data)
        written[rel] = data
    return written


@SETTINGS
@given(files=_FILES)
def test_the_digest_is_the_merkle_root_over_the_checkpoint_entries_with_modes_stripped(files):
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        written = _materialize(root, files)
        for i, rel in enumerate(sorted(written)):
            if i % 2:
                os.chmod(root / rel, 0o755)
        with WorkspaceHasher(root) as h:
            s = h.hash()
            expected = stripped_tree(root)
            assert h.tree() == expected and h.tree().sha256 == expected.sha256
            assert s.digest == merkle_reference(expected)
        assert (s.file_count, s.total_bytes) == (len(written), sum(map(len, written.values())))


@SETTINGS
@given(files=_FILES, order_seed=st.randoms(use_true_random=False), times=st.lists(st.integers(0, 2**31), min_size=8,
                                                                                      max_size=8))
def test_the_hash_ignores_creation_order_timestamps_and_modes(files, order_seed, times):
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        written = _materialize(Path(a), files)
        items = list(written.items())
        order_seed.shuffle(items)
        for i, (rel, data) in enumerate(items):
            write(Path(b), rel, data)
            os.utime(Path(b) / rel, ns=(times[i % 8], times[(i + 3) % 8]))
            os.chmod(Path(b) / rel, 0o700 if i % 2 else 0o444)
        assert fresh(Path(a)) == fresh(Path(b))


@SETTINGS
@given(files=_FILES.filter(bool), data=st.data())
def test_the_hash_changes_when_a_content_or_a_name_changes(files, data):
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        written = _materialize(root, files)
        before = fresh(root)
        rel = data.draw(st.sampled_from(sorted(written)))
        if data.draw(st.booleans()):
            write(root, rel, written[rel] + b"!")
        else:
            new = rel + "_renamed"
            os.rename(root / rel, root / new)
        assert fresh(root) != before


def test_a_name_a_checkpoint_refuses_is_still_hashed(tmp_path):
    write(tmp_path, "back\\slash.txt", b"1")
    with WorkspaceHasher(tmp_path) as h:
        one = h.hash().digest
        write(tmp_path, "back\\slash.txt", b"2")
        assert h.hash().digest != one
        with pytest.raises(CheckpointError, match="backslash"):
            h.tree()


def test_an_empty_workspace_and_empty_directories_hash_to_the_empty_node(tmp_path):
    empty = fresh(tmp_path)
    assert empty == merkle_reference(Tree({}))
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "c").mkdir()
    assert fresh(tmp_path) == empty
    with WorkspaceHasher(tmp_path) as h:
        h.hash()
        write(tmp_path, "a/b/f.txt", b"x")
        assert h.hash().digest != empty
        os.remove(tmp_path / "a/b/f.txt")            # the directories stay; the state is empty again
        assert h.hash().digest == empty and h._dirs.keys() == {""}


def test_a_file_and_a_directory_of_the_same_name_do_not_collide(tmp_path):
    """Workspace a: directory x holding y. Workspace b: a file x whose bytes are exactly a's node
    for x, so b's entry for x carries the same digest as a's; the '/' after a directory's name
    still keeps the two states apart."""
    a, b = tmp_path / "a", tmp_path / "b"
    write(a, "x/y", b"1")
    with WorkspaceHasher(a) as ha:
        root_a = ha.hash().digest
        node_x = ws._NODE_HEAD + ws._fragment("y", ha._entries["x/y"].sha256, 1) + ws._NODE_TAIL
        assert __import__("hashlib").sha256(node_x).hexdigest() == ha._dirs["x"].digest
    write(b, "x", node_x)
    with WorkspaceHasher(b) as hb:
        root_b = hb.hash().digest
        assert hb._entries["x"].sha256 == ha._dirs["x"].digest
    assert root_a != root_b


def test_a_symbolic_link_is_hashed_by_its_target_text_not_followed(tmp_path):
    write(tmp_path, "a.txt", b"x")
    os.symlink("a.txt", tmp_path / "link")
    one = fresh(tmp_path)
    os.remove(tmp_path / "link")
    os.symlink("elsewhere", tmp_path / "link")
    assert fresh(tmp_path) != one
    os.remove(tmp_path / "link")
    os.symlink("a.txt", tmp_path / "link")
    assert fresh(tmp_path) == one
    write(tmp_path, "a.txt", b"changed")        # the link's entry does not follow the target
    with WorkspaceHasher(tmp_path, change_source="scan") as h:
        s = h.hash()
        assert s.file_count == 2 and s.total_bytes == len("changed") + len("a.txt")
        with pytest.raises(CheckpointError, match="symbolic link"):
            h.tree()


# --- ignore globs ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("source", SOURCES)
def test_default_ignore_globs_leave_out_caches_logs_and_scratch(tmp_path, source):
    write(tmp_path, "src/app.py", b"print(1)\n")
    with WorkspaceHasher(tmp_path, change_source=source) as h:
        base = h.hash().digest
        for rel in [".git/objects/ab", "src/__pycache__/app.cpython-311.pyc", "src/app.pyc", ".pytest_cache/v",
                    "node_modules/x/index.js", "run.log", "src/debug.log", ".venv/bin/python", "tmp/scratch",
                    "src/tmp/x", ".hypothesis/db", "notes.txt~"]:
            write(tmp_path, rel, b"noise")
        s = h.hash()
        assert s.digest == base and s.file_count == 1 and s.changed == ()
        write(tmp_path, "src/app.py", b"print(2)\n")
        assert h.hash().changed == ("src/app.py",)
    assert h.ignored("src/__pycache__/x.pyc") and h.ignored("a/b/tmp/c") and not h.ignored("src/app.py")


@pytest.mark.parametrize("source", SOURCES)
def test_declared_globs_replace_the_defaults_and_path_globs_match_whole_paths(tmp_path, source):
    write(tmp_path, "build/out.o", b"o")
    write(tmp_path, "src/build/keep.c", b"c")
    write(tmp_path, "x.log", b"kept: not declared")
    with WorkspaceHasher(tmp_path, ["build/*.o"], change_source=source) as h:
        assert sorted(h.tree().files) == ["src/build/keep.c", "x.log"]
        write(tmp_path, "build/other.o", b"o2")
        assert h.hash().changed == ()
        write(tmp_path, "build/other.c", b"c2")
        assert h.hash().changed == ("build/other.c",)


@pytest.mark.parametrize("bad", ["*.log", ["", "x"], ["/abs"], [3]])
def test_bad_ignore_globs_are_config_errors(tmp_path, bad):
    with pytest.raises(ConfigError):
        WorkspaceHasher(tmp_path, bad)


# --- incremental: every change source gives what a fresh full hash gives ---------------------------------

_PATHS = ["a.txt", "b.txt", "d1/c.txt", "d1/d2/e.txt", "d3/f.txt", "d1/tmp/scratch.txt", "g.log"]
_OPS = st.lists(st.tuples(st.sampled_from(["write", "write_same_size", "delete", "rename", "rmdir", "mvdir", "chmod",
                                           "touch", "symlink", "mkdir"]),
                          st.sampled_from(_PATHS), st.sampled_from(_PATHS), st.binary(min_size=1, max_size=24)),
                min_size=1, max_size=12)


def _apply(root: Path, op: str, rel: str, other: str, data: bytes) -> set[str]:
    """Apply one edit; return the paths it touched (what a runner's own tool would report)."""
    p, q = root / rel, root / other
    touched = {rel}
    try:
        if op == "write":
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            p.parent.mkdir(parents=True, exist_ok=True)
            if p.is_symlink():
                p.unlink()
            p.write_bytes(data)
        elif op == "write_same_size" and p.is_file() and not p.is_symlink():
            old = p.read_bytes()
            if old:                             # same size, same inode, likely the same clock tick
                with open(p, "r+b") as f:
                    f.write(bytes([(old[0] + 1) % 256]) + old[1:])
        elif op == "delete" and (p.is_file() or p.is_symlink()):
            p.unlink()
        elif op == "rename" and (p.is_file() or p.is_symlink()) and rel != other and not q.is_dir():
            q.parent.mkdir(parents=True, exist_ok=True)
            os.replace(p, q)
            touched.add(other)
        elif op == "rmdir" and p.parent != root and p.parent.is_dir():
            shutil.rmtree(p.parent)
            touched = {str(Path(rel).parent)}
        elif op == "mvdir" and p.parent != root and p.parent.is_dir() and not (root / "moved").exists():
            os.rename(p.parent, root / "moved")
            touched = {str(Path(rel).parent), "moved"}
        elif op == "chmod" and p.is_file() and not p.is_symlink():
            os.chmod(p, 0o755 if not os.access(p, os.X_OK) else 0o644)
        elif op == "touch" and p.is_file() and not p.is_symlink():
            os.utime(p, ns=(123, 456))
        elif op == "symlink" and not p.exists() and not p.is_symlink():
            p.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(other, p)
        elif op == "mkdir" and not p.exists():
            (p.parent / (p.name + "_dir")).mkdir(parents=True, exist_ok=True)
            write(root, rel + "_dir/inner.txt", data)
            touched = {rel + "_dir"}
    except (NotADirectoryError, FileExistsError, IsADirectoryError):
        pass                                    # a path the generated sequence made impossible
    return touched


@pytest.mark.parametrize("source", SOURCES + ["hint"])
@SETTINGS
@given(steps=st.lists(_OPS, min_size=1, max_size=4))
def test_incremental_hash_equals_a_fresh_full_hash_after_random_edits(source, steps):
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        for rel in _PATHS[:4]:
            write(root, rel, rel.encode())
        with WorkspaceHasher(root, change_source="scan" if source == "hint" else source) as h:
            h.hash()
            for ops in steps:                   # several edits between two hashes
                touched: set[str] = set()
                for op in ops:
                    touched |= _apply(root, *op)
                s = h.hash(touched) if source == "hint" else h.hash()
                assert s.mode == source
                assert s.digest == fresh(root)
                assert (s.file_count, s.total_bytes) == (len(h._entries), sum(e.size for e in h._entries.values()))


@pytest.mark.parametrize("source", SOURCES)
def test_an_unchanged_workspace_rereads_nothing(tmp_path, source):
    for i in range(50):
        write(tmp_path, f"d{i % 5}/f{i}.txt", b"x" * i)
    past = 1_000_000_000 * 3600
    for p in tmp_path.rglob("*.txt"):
        os.utime(p, ns=(past, past))
    with WorkspaceHasher(tmp_path, change_source=source, racy_window_ns=0) as h:
        first = h.hash()
        assert first.mode == "full" and len(first.reread) == 50
        again = h.hash()
        assert again.reread == () and again.changed == () and again.digest == first.digest
        assert again.stat_calls == (50 if source == "scan" else 0)   # inotify stats nothing
        write(tmp_path, "d1/f1.txt", b"new")
        one = h.hash()
        assert one.reread == ("d1/f1.txt",) and one.changed == ("d1/f1.txt",)
        assert one.stat_calls == (50 if source == "scan" else 1)


def test_the_scan_rereads_a_file_rewritten_within_the_racy_window(tmp_path, monkeypatch):
    """Same size, same inode, and mtime and ctime forced back to what they were: only the racy
    window can tell the file changed (git's racy-git problem)."""
    write(tmp_path, "f.txt", b"aaaa")
    with WorkspaceHasher(tmp_path, change_source="scan") as h:
        first = h.hash()
        st0 = os.stat(tmp_path / "f.txt")
        with open(tmp_path / "f.txt", "r+b") as f:
            f.write(b"bbbb")
        os.utime(tmp_path / "f.txt", ns=(st0.st_atime_ns, st0.st_mtime_ns))
        # ctime cannot be set back; make the stat key blind to it to model a coarse-clock file system
        real = ws._stat_key
        monkeypatch.setattr(ws, "_stat_key", lambda s: real(s)[:4] + (0,))
        h._entries["f.txt"].key = ws._stat_key(st0)
        second = h.hash()
        assert second.digest != first.digest and second.reread == ("f.txt",)
    with WorkspaceHasher(tmp_path, change_source="scan", racy_window_ns=0) as h:
        h.hash()
        h._racy.clear()                         # nothing racy: the same trick goes unseen, as documented
        with open(tmp_path / "f.txt", "r+b") as f:
            f.write(b"cccc")
        os.utime(tmp_path / "f.txt", ns=(st0.st_atime_ns, st0.st_mtime_ns))
        h._entries["f.txt"].key = ws._stat_key(os.stat(tmp_path / "f.txt"))
        assert h.hash().reread == ()


def test_a_hint_is_trusted_and_examines_only_the_named_paths(tmp_path):
    write(tmp_path, "a.txt", b"a")
    write(tmp_path, "sub/b.txt", b"b")
    with WorkspaceHasher(tmp_path, change_source="scan", racy_window_ns=0) as h:
        h.hash()
        write(tmp_path, "a.txt", b"A")
        write(tmp_path, "sub/b.txt", b"B")
        s = h.hash(["a.txt"])
        assert s.mode == "hint" and s.reread == ("a.txt",) and s.digest != fresh(tmp_path)   # b.txt not named
        s = h.hash([tmp_path / "sub"])            # absolute, a directory: everything under it
        assert s.digest == fresh(tmp_path) and s.reread == ("sub/b.txt",)
        os.remove(tmp_path / "sub/b.txt")
        assert h.hash(["sub/b.txt"]).changed == ("sub/b.txt",)
        for bad in (["../x"], ["/elsewhere/x"], "a.txt", [b"a.txt"]):
            with pytest.raises(ConfigError):
                h.hash(bad)


@pytest.mark.skipif(not HAS_INOTIFY, reason="no inotify here")
def test_inotify_follows_a_directory_moved_inside_the_workspace(tmp_path):
    write(tmp_path, "pkg/mod/a.py", b"1")
    with WorkspaceHasher(tmp_path, change_source="inotify") as h:
        h.hash()
        os.rename(tmp_path / "pkg", tmp_path / "lib")
        assert h.hash().digest == fresh(tmp_path)
        write(tmp_path, "lib/mod/a.py", b"2")          # a write inside the moved directory
        write(tmp_path, "lib/mod/new/b.py", b"3")      # and in a directory made after the move
        s = h.hash()
        assert s.digest == fresh(tmp_path) and s.mode == "inotify" and "lib/mod/new/b.py" in s.changed
        moved_out = tmp_path.parent / (tmp_path.name + "_out")
        os.rename(tmp_path / "lib", moved_out)         # moved out of the workspace: no longer watched
        assert h.hash().file_count == 0
        (moved_out / "mod" / "a.py").write_bytes(b"outside")
        assert h.hash().changed == ()
        shutil.rmtree(moved_out)


@pytest.mark.skipif(not HAS_INOTIFY, reason="no inotify here")
def test_an_overflowed_event_queue_falls_back_to_a_full_stat_scan(tmp_path):
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if limit > 50_000:
        pytest.skip(f"max_queued_events is {limit}: too many files to write here")
    with WorkspaceHasher(tmp_path, change_source="inotify") as h:
        h.hash()
        for i in range(limit // 3 + 200):             # each new file: IN_CREATE, IN_MODIFY, IN_CLOSE_WRITE
            (tmp_path / f"f{i}").write_bytes(b"x")
        s = h.hash()
        assert s.mode == "scan" and "overflow" in s.note and s.digest == fresh(tmp_path)
        write(tmp_path, "after.txt", b"y")             # the watches were set again
        s = h.hash()
        assert s.mode == "inotify" and s.changed == ("after.txt",)


def test_auto_falls_back_to_the_stat_scan_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setattr(ws, "inotify_available", lambda: (False, "no inotify in this test"))
    h = WorkspaceHasher(tmp_path)
    assert h.change_source == "scan" and "no inotify in this test" in h.note
    h.hash()
    assert "no inotify in this test" in h.hash().note
    with pytest.raises(ConfigError, match="unavailable"):
        WorkspaceHasher(tmp_path, change_source="inotify")
    with pytest.raises(ConfigError):
        WorkspaceHasher(tmp_path, change_source="fanotify")


@pytest.mark.skipif(not HAS_INOTIFY, reason="no inotify here")
def test_a_watch_limit_falls_back_to_the_stat_scan(tmp_path, monkeypatch):
    write(tmp_path, "a/b.txt", b"b")
    h = WorkspaceHasher(tmp_path, change_source="inotify")

    def refuse(path, mask):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(h._inotify, "add_watch", refuse)
    s = h.hash()
    assert h.change_source == "scan" and "max_user_watches" in h.note and s.digest == fresh(tmp_path)
    write(tmp_path, "a/b.txt", b"c")
    assert h.hash().mode == "scan"


# --- errors --------------------------------------------------------------------------------------------


def test_a_missing_root_is_a_typed_error(tmp_path):
    with pytest.raises(WorkspaceMissingError) as info:
        WorkspaceHasher(tmp_path / "nope")
    assert info.value.root == str(tmp_path / "nope")
    assert issubclass(WorkspaceMissingError, WatchdogError) and issubclass(WatchdogError, RecoveryError)
    write(tmp_path, "file", b"x")
    with pytest.raises(WorkspaceMissingError, match="not a directory"):
        WorkspaceHasher(tmp_path / "file")
    root = tmp_path / "ws"
    write(root, "a.txt", b"a")
    for source in ("scan", "auto"):
        h = WorkspaceHasher(root, change_source=source)
        h.hash()
        shutil.rmtree(root)
        with pytest.raises(WorkspaceMissingError):
            h.hash()
        write(root, "a.txt", b"a")             # a new directory of the same name: read afresh
        s = h.hash()
        assert s.mode == "full" and s.digest == fresh(root)
        h.close()


def test_an_unreadable_file_or_name_is_a_typed_error_and_the_next_hash_starts_over(tmp_path, monkeypatch):
    write(tmp_path, "ok.txt", b"ok")
    bad = os.fsencode(str(tmp_path)) + b"/bad\xff.txt"
    with open(bad, "wb") as f:
        f.write(b"x")
    with WorkspaceHasher(tmp_path, change_source="scan") as h, pytest.raises(WorkspaceUnreadableError) as info:
        h.hash()
    assert "UTF-8" in str(info.value) and info.value.path is not None
    os.remove(bad)
    h = WorkspaceHasher(tmp_path, change_source="scan")
    h.hash()
    write(tmp_path, "ok.txt", b"changed")
    real_open = os.open

    def deny(path, *a, **k):
        if str(path).endswith("ok.txt"):
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, *a, **k)
    monkeypatch.setattr(os, "open", deny)
    with pytest.raises(WorkspaceUnreadableError, match="ok.txt") as info:
        h.hash()
    assert info.value.path == "ok.txt"
    monkeypatch.setattr(os, "open", real_open)
    s = h.hash()
    assert s.mode == "full" and s.digest == fresh(tmp_path)


def test_special_files_are_left_out(tmp_path):
    write(tmp_path, "a.txt", b"a")
    os.mkfifo(tmp_path / "pipe")
    with WorkspaceHasher(tmp_path, change_source="scan") as h:
        assert h.hash().file_count == 1
    assert stat.S_ISFIFO(os.lstat(tmp_path / "pipe").st_mode)


def test_state_hash_json_names_every_field(tmp_path):
    write(tmp_path, "a.txt", b"a")
    with WorkspaceHasher(tmp_path) as h:
        d = h.hash().to_json()
    assert set(d) == {"digest", "file_count", "total_bytes", "mode", "reread", "reread_bytes", "changed",
                      "stat_calls", "note"} and len(d["digest"]) == 64
