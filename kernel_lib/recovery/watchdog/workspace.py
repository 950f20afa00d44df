"""The environment's canonical state hash H_t = SHA-256(Canonicalize(s_t)) (Failure Recovery,
"Semantic Watchdog Timers": figure 3, the state-hash row of table 6), kept up to date cheaply.

**Canonical form.** What a file contributes is what it contributes to a Chapter 11 checkpoint
(§11.4.1, :class:`kernel_lib.checkpoint.tree.Tree`): the SHA-256 of its bytes and its size, as
the RFC 8785 entry ``{"executable": false, "sha256": …, "size": …}``. The watchdog strips what
says nothing about progress: timestamps (never part of a tree), modes (the executable flag is
always written ``false``), empty directories, and every path matched by an ignore glob (scratch,
caches, logs: :data:`DEFAULT_IGNORE_GLOBS`, table 6's "whitelist non-deterministic directories").
:meth:`WorkspaceHasher.tree` gives exactly the checkpoint tree of those files (modes stripped), so
a state the watchdog saw can be set beside any checkpoint.

The entries are grouped as a **Merkle tree**, the way git stores trees: each directory is one
node, an RFC 8785 object ``{"files": {name: entry}, "format": "kernel_lib.workspace-node/1"}`` in
the checkpoint tree's own encoding, where a child directory appears under its name followed by
``/`` (no file name holds a ``/``, so a file and a directory never collide), with the child node's
SHA-256 and the bytes under it. The state hash H_t is the SHA-256 of the root node. A change to
one file re-encodes only the nodes on its path to the root, instead of the one flat list of every
path a single tree object would need. (For a workspace whose files all sit at the top, the root
node holds the same entries as the checkpoint tree; the format names differ, so the two digests
never coincide by accident.) A symbolic link is not followed; it enters as a file whose content is
its target text (checkpoints refuse links, so :meth:`WorkspaceHasher.tree` raises for it).

**Incremental.** The hasher keeps each file's ``(device, inode, size, mtime_ns, ctime_ns)`` and its
entry; a re-hash re-reads only the files that may have changed and re-encodes their directories'
nodes up to the root. What may have changed comes from one of three change sources, reported in
:attr:`StateHash.mode`:

* ``inotify`` (Linux, the default where the kernel and ``inotify_simple`` offer it): one watch
  per directory; a re-hash drains the queued events and re-reads exactly the files named there,
  without a stat of the others. The kernel queues an event inside the writing system call, so a
  write that returned before ``hash()`` is always seen. Not seen: writes through a shared
  ``mmap``, writes through a hard link whose other name lies outside the workspace, and changes
  made on another machine to a network file system. Queue overflow, or a failure to add a watch
  (the per-user watch limit), falls back to the stat scan and says so.
* ``scan``: ``lstat`` of every file, re-reading those whose stat key changed. A file changed within
  the file system's timestamp granularity of the previous scan can keep its stat key (git's "racy"
  window), so files whose mtime or ctime falls within ``racy_window_ns`` of the previous scan's
  start are re-read once more on the next scan.
* ``hint``: the caller names the paths its own tools wrote (``changed_paths``); in scan mode only
  those (and the racy ones) are examined, which is exact only when the hint is complete. With
  inotify the hint is merged with the events (a cheap guard for ``mmap`` writers).

``hash(full=True)`` re-reads everything (mode ``full``); so does the first hash, the one after a
failed hash, and one that finds the root replaced by another directory of the same name.

Errors: :class:`~kernel_lib.errors.WorkspaceMissingError` when the root is absent or not a
directory; :class:`~kernel_lib.errors.WorkspaceUnreadableError` when a directory
cannot be listed, a file cannot be read, or a name is not valid text (a hash that skipped it
would call different states equal). A file that vanishes between listing and reading is simply
absent from the state (a tool's temporary file).
"""

from __future__ import annotations

import errno
import fnmatch
import hashlib
import json
import os
import re
import stat
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Literal

from kernel_lib.checkpoint.tree import FileEntry, Tree
from kernel_lib.errors import CheckpointError, ConfigError, WorkspaceMissingError, WorkspaceUnreadableError

__all__ = ["DEFAULT_IGNORE_GLOBS", "ChangeSource", "HashMode", "StateHash", "WorkspaceHasher", "inotify_available"]

#: Scratch, caches and logs left out of the state (table 6: non-deterministic directories). A glob
#: without ``/`` matches a file or directory name at any depth (an ignored directory is not
#: entered); a glob with ``/`` matches the whole relative POSIX path.
DEFAULT_IGNORE_GLOBS: tuple[str, ...] = (
    ".git", ".hg", ".svn",
    "__pycache__", "*.pyc", "*.pyo", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis", ".tox", ".nox",
    ".ipynb_checkpoints", ".cache",
    "node_modules", ".venv", "venv",
    "*.log", "logs",
    "tmp", ".tmp", "*.tmp", "*.swp", "*.swo", "*~", ".DS_Store",
)

ChangeSource = Literal["inotify", "scan"]
HashMode = Literal["full", "inotify", "scan", "hint"]

#: Default racy window: ten times a 100 Hz kernel tick (file times come from a coarse clock that may
#: lag the wall clock by a tick). Widened to 2 s on a file system that keeps whole seconds.
_RACY_WINDOW_NS = 100_000_000
_COARSE_RACY_WINDOW_NS = 2_000_000_000

#: Largest read of one file at a time (bytes); a larger file is hashed in chunks of this size.
_READ_CHUNK = 1 << 20

#: The format of one directory node of the state hash's Merkle tree (see the module docstring).
NODE_FORMAT = "kernel_lib.workspace-node/1"
_NODE_HEAD = b'{"files":{'
_NODE_TAIL = b'},"format":' + json.dumps(NODE_FORMAT).encode() + b"}"


@dataclass(frozen=True, slots=True)
class StateHash:
    """One state hash H_t of the workspace.

    ``digest``: hex SHA-256 of the root node of the canonical Merkle tree (64 characters; see
    the module docstring). ``file_count`` and ``total_bytes``: the files in the state and
    their bytes. ``mode``: how the candidates for change were found (``full``, ``inotify``,
    ``scan``, ``hint``). ``reread``: the paths whose bytes were read for this hash (sorted);
    ``reread_bytes`` their size. ``changed``: paths added, changed or removed since the previous
    hash (sorted). ``stat_calls``: ``lstat`` calls made. ``note``: why the mode is not the one
    asked for (an inotify fallback), else ``""``.
    """

    digest: str
    file_count: int
    total_bytes: int
    mode: HashMode
    reread: tuple[str, ...]
    reread_bytes: int
    changed: tuple[str, ...]
    stat_calls: int
    note: str = ""

    def to_json(self) -> dict:
        return {"digest": self.digest, "file_count": self.file_count, "total_bytes": self.total_bytes,
                "mode": self.mode, "reread": list(self.reread), "reread_bytes": self.reread_bytes,
                "changed": list(self.changed), "stat_calls": self.stat_calls, "note": self.note}


@dataclass(slots=True)
class _Entry:
    key: tuple[int, int, int, int, int]      # (st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns)
    sha256: str
    size: int
    link: bool = False                       # a symbolic link, hashed by its target text


@dataclass(slots=True)
class _Node:
    """One directory of the Merkle tree: its files (name -> (size, encoded entry)), the names of its
    child directories, and, once encoded, its digest and the files and bytes under it."""

    files: dict[str, tuple[int, bytes, bytes]] = field(default_factory=dict)   # name -> (size, sort key, entry)
    subdirs: set[str] = field(default_factory=set)
    digest: str = ""
    count: int = 0
    size: int = 0
    as_child: tuple[bytes, bytes] = (b"", b"")    # (sort key, entry) of this node in its parent


def inotify_available() -> tuple[bool, str]:
    """``(True, "")`` when an inotify instance can be made here, else ``(False, why)``."""
    try:
        import inotify_simple
    except ImportError:
        return False, "inotify_simple is not installed (pip install inotify_simple), or this is not Linux"
    try:
        inotify_simple.INotify(nonblocking=True).close()
    except OSError as exc:
        return False, f"inotify_init1 failed: {exc.strerror or exc}"
    return True, ""


def _utf16_key(path: str) -> bytes:
    """RFC 8785 orders object keys by their UTF-16 code units; big-endian UTF-16 bytes compare so."""
    return path.encode("utf-16-be", "surrogatepass")


def _fragment(path: str, sha256: str, size: int) -> bytes:
    # json.dumps(ensure_ascii=False) escapes strings as RFC 8785 does (ECMAScript JSON.stringify):
    # ", \\, \b \f \n \r \t short forms, other controls as lowercase \u00xx, the rest as UTF-8.
    return (json.dumps(path, ensure_ascii=False).encode("utf-8") + b':{"executable":false,"sha256":"'
            + sha256.encode("ascii") + b'","size":' + str(size).encode("ascii") + b"}")


def _stat_key(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class _Ignore:
    """The ignore globs as two compiled patterns: one over a name, one over a relative path."""

    def __init__(self, globs: Iterable[str]):
        if isinstance(globs, str) or not isinstance(globs, Iterable):
            raise ConfigError(f"ignore_globs is a sequence of glob strings, not {type(globs).__name__}")
        globs = tuple(globs)
        for g in globs:
            if not isinstance(g, str) or not g or g.startswith("/"):
                raise ConfigError(f"ignore glob {g!r} is not a non-empty relative glob string")
        self.globs = globs
        names = [fnmatch.translate(g) for g in globs if "/" not in g]
        paths = [fnmatch.translate(g.rstrip("/")) for g in globs if "/" in g]
        self._name = re.compile("|".join(names)) if names else None
        self._path = re.compile("|".join(paths)) if paths else None

    def __call__(self, rel: str, name: str) -> bool:
        return bool((self._name is not None and self._name.fullmatch(name))
                    or (self._path is not None and self._path.fullmatch(rel)))

    def any_part(self, rel: str) -> bool:
        """Whether ``rel`` or any directory above it is ignored."""
        parts = rel.split("/")
        return any(self("/".join(parts[:i + 1]), parts[i]) for i in range(len(parts)))


class WorkspaceHasher:
    """Incremental canonical state hash of the directory ``root`` (see the module docstring).

    ``ignore_globs``: names or paths left out (default :data:`DEFAULT_IGNORE_GLOBS`).
    ``change_source``: ``"auto"`` (inotify where available, else the stat scan), ``"inotify"``
    (raise ConfigError when unavailable) or ``"scan"``. ``racy_window_ns``: the scan's racy window
    (default 100 ms, or 2 s once every file time seen is a whole second).

    Not thread-safe. Holds an inotify file descriptor in inotify mode: use it as a context
    manager or call :meth:`close` (the descriptor is also closed when the hasher is collected).

    Raises:
        WorkspaceMissingError: ``root`` does not exist or is not a directory.
        ConfigError: a bad glob or change source; ``"inotify"`` asked for where it is unavailable.
    """

    def __init__(self, root: str | os.PathLike, ignore_globs: Iterable[str] = DEFAULT_IGNORE_GLOBS, *,
                 change_source: Literal["auto", "inotify", "scan"] = "auto", racy_window_ns: int | None = None):
        if change_source not in ("auto", "inotify", "scan"):
            raise ConfigError(f"change_source {change_source!r} is not 'auto', 'inotify' or 'scan'")
        if racy_window_ns is not None and (type(racy_window_ns) is not int or racy_window_ns < 0):
            raise ConfigError(f"racy_window_ns {racy_window_ns!r} is not a whole number of nanoseconds >= 0")
        try:
            text = os.fsdecode(root)
        except TypeError:
            raise ConfigError(f"workspace root must be a path, got {type(root).__name__}") from None
        if not text or "\0" in text:
            raise ConfigError(f"workspace root {text!r} is not a path (empty, or holding a NUL character)")
        self.root = Path(os.path.abspath(text))
        self._ignore = _Ignore(ignore_globs)
        self._root_id = self._stat_root()
        self._racy_window_ns = racy_window_ns
        self._entries: dict[str, _Entry] = {}          # relative path -> what the file held when read
        self._dirs: dict[str, _Node] = {"": _Node()}   # relative directory ("" = root) -> its Merkle node
        self._dirty: set[str] = {""}                   # nodes to encode again, with every ancestor
        self._racy: set[str] = set()
        self._whole_seconds = True                    # every file time seen so far is a whole second
        self._hashed = False
        self.note = ""
        self._inotify = None
        self._wd_dir: dict[int, str] = {}             # watch descriptor -> relative directory ("" = root)
        self._dir_wd: dict[str, int] = {}
        self._overflowed = False
        if change_source == "scan":
            self.change_source: ChangeSource = "scan"
        else:
            ok, why = inotify_available()
            if not ok and change_source == "inotify":
                raise ConfigError(f"change_source 'inotify' is unavailable here: {why}")
            self.change_source = "inotify" if ok else "scan"
            self.note = "" if ok else f"stat scan: {why}"
            if ok:
                import inotify_simple
                self._inotify = inotify_simple.INotify(nonblocking=True)
                self._finalizer = weakref.finalize(self, self._inotify.close)

    # --- life cycle -------------------------------------------------------------------------------

    def close(self) -> None:
        """Release the inotify descriptor (the hasher falls back to the stat scan if used again)."""
        if self._inotify is not None:
            self._finalizer()
            self._inotify = None
            self._wd_dir.clear()
            self._dir_wd.clear()
            if self.change_source == "inotify":
                self.change_source = "scan"
                self.note = "stat scan: the hasher was closed"

    def __enter__(self) -> "WorkspaceHasher":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"WorkspaceHasher({str(self.root)!r}, {len(self._entries)} files, "
                f"change_source={self.change_source!r})")

    @property
    def ignore_globs(self) -> tuple[str, ...]:
        return self._ignore.globs

    def ignored(self, rel: str) -> bool:
        """Whether the relative POSIX path ``rel`` (or a directory above it) is left out."""
        return self._ignore.any_part(rel)

    # --- the hash ---------------------------------------------------------------------------------

    def hash(self, changed_paths: Iterable[str | os.PathLike] | None = None, *, full: bool = False) -> StateHash:
        """H_t of the workspace now. ``changed_paths``: paths (relative to ``root``, or absolute
        under it; a directory stands for everything under it) that the caller's own tools wrote
        since the previous hash; ``full``: re-read every file. Returns a :class:`StateHash`.

        Raises WorkspaceMissingError (root gone), WorkspaceUnreadableError (a directory or file
        that cannot be read, or a name that is not valid text; the next call then re-reads
        everything) and ConfigError (a changed path outside the workspace)."""
        try:
            root_id = self._stat_root()
        except WorkspaceMissingError:
            self._hashed = False              # whatever comes back under this name is read afresh
            raise
        hint = None if changed_paths is None else self._relative(changed_paths)
        note = ""
        if root_id != self._root_id:          # replaced by another directory of the same name
            self._root_id, full = root_id, True
            note = "the workspace root was replaced: full re-read"
        ctx = _Pass(time.time_ns())
        try:
            if full or not self._hashed:
                mode: HashMode = "full"
                self._full(ctx)
            elif self.change_source == "inotify" and self._inotify is not None:
                mode = "inotify"
                if not self._drain(ctx, hint or ()):
                    mode, note = "scan", "inotify event queue overflowed: stat scan"
                    self._scan(ctx, rewatch=True)
            elif hint is not None:
                mode = "hint"
                ctx.files.update(self._racy)
                self._route(hint, ctx)
                self._examine(ctx)
            else:
                mode = "scan"
                self._scan(ctx, rewatch=False)
        except BaseException:
            self._hashed = False              # the cache may be half updated, events consumed
            raise
        self._hashed = True
        self._encode_dirty()
        root = self._dirs[""]
        return StateHash(digest=root.digest, file_count=root.count, total_bytes=root.size, mode=mode,
                         reread=tuple(sorted(ctx.reread)),
                         reread_bytes=ctx.reread_bytes, changed=tuple(sorted(ctx.changed)),
                         stat_calls=ctx.stat_calls, note=note or self.note)

    def tree(self) -> Tree:
        """The checkpoint :class:`Tree` (modes stripped) of the files the last hash covered: the
        same file entries, as one flat tree (its id is a checkpoint's tree id, not the Merkle
        state hash). Hashes first when nothing was hashed yet.

        Raises CheckpointError when the workspace holds what a checkpoint refuses (a symbolic link,
        a backslash in a name): the state hash still covers it, no checkpoint tree can hold it."""
        if not self._hashed:
            self.hash()
        links = sorted(p for p, e in self._entries.items() if e.link)
        if links:
            raise CheckpointError(f"workspace {str(self.root)!r} has no checkpoint tree: it holds symbolic links, "
                                  f"e.g. {links[0]!r}")
        try:
            return Tree({p: FileEntry(e.sha256, e.size, False) for p, e in self._entries.items()})
        except ValueError as exc:
            raise CheckpointError(f"workspace {str(self.root)!r} has no checkpoint tree: {exc}") from None

    # --- change sources ---------------------------------------------------------------------------

    def _full(self, ctx: "_Pass") -> None:
        """Forget everything, re-add the watches, read every file."""
        self._reset_watches()
        self._overflowed = False
        old = {p: e.sha256 for p, e in self._entries.items()}
        self._entries, self._dirs, self._dirty = {}, {"": _Node()}, {""}
        self._racy.clear()
        self._walk("", ctx, watch=True, force=True, seen=None)
        ctx.changed = {p for p in old if p not in self._entries}
        ctx.changed.update(p for p, e in self._entries.items() if old.get(p) != e.sha256)

    def _scan(self, ctx: "_Pass", *, rewatch: bool) -> None:
        """Stat every file; re-read those whose stat key changed or that were racy."""
        if rewatch:
            self._reset_watches()
            self._overflowed = False
        seen: set[str] = set()
        self._walk("", ctx, watch=rewatch, force=False, seen=seen)
        for p in [p for p in self._entries if p not in seen]:
            self._remove(p, ctx)

    def _drain(self, ctx: "_Pass", hint: Iterable[str]) -> bool:
        """Apply the queued inotify events (and the hint). False when the queue overflowed."""
        from inotify_simple import flags
        assert self._inotify is not None
        overflow, ignored, isdir = int(flags.Q_OVERFLOW), int(flags.IGNORED), int(flags.ISDIR)
        gone = int(flags.DELETE_SELF | flags.MOVE_SELF)
        wd_dir, files, dirs = self._wd_dir, ctx.files, ctx.dirs
        while True:
            events = self._inotify.read(timeout=0)
            if not events:
                break
            for wd, mask, _cookie, name in events:
                if mask & overflow:
                    self._overflowed = True
                    continue
                base = wd_dir.get(wd)
                if base is None:
                    continue
                if mask & ignored:
                    self._forget_watch(wd)
                elif mask & gone:
                    dirs.add(base)              # re-examine the directory's place
                elif name:
                    rel = f"{base}/{name}" if base else name
                    (dirs if mask & isdir else files).add(rel)
        if self._overflowed:
            return False
        self._route(hint, ctx)
        self._examine(ctx)
        return True

    def _route(self, paths: Iterable[str], ctx: "_Pass") -> None:
        """Hinted paths: the root or a directory goes to ``ctx.dirs``, anything else to ``ctx.files``."""
        for rel in paths:
            ctx.hinted.add(rel)
            if rel == "" or os.path.isdir(os.path.join(self.root, rel)) and not os.path.islink(
                    os.path.join(self.root, rel)):
                ctx.dirs.add(rel)
            else:
                ctx.files.add(rel)

    def _examine(self, ctx: "_Pass") -> None:
        """Bring the candidate directories (whole subtrees) and files in ``ctx`` up to date."""
        if "" in ctx.dirs:
            self._scan(ctx, rewatch=self._inotify is not None)
            return
        done: set[str] = set()
        for d in sorted(ctx.dirs, key=lambda d: d.count("/")):
            if self._under_any(d, done):
                continue
            done.add(d)
            prefix = d + "/"
            if self._inotify is not None:          # the subtree's watches are set again by the walk
                for sub in [s for s in self._dir_wd if s == d or s.startswith(prefix)]:
                    wd = self._dir_wd.pop(sub)
                    self._wd_dir.pop(wd, None)
                    try:
                        self._inotify.rm_watch(wd)
                    except OSError:
                        pass                       # already gone with its directory
            self._visit(d, ctx, force=True)
        for f in sorted(ctx.files):
            if not self._under_any(f, done):
                self._visit(f, ctx, force=True)

    def _through_link(self, rel: str, ctx: "_Pass") -> bool:
        """Whether some directory above ``rel`` (under the root) is not a real directory now: a
        symbolic link, a file, or gone."""
        parent = rel.rpartition("/")[0]
        if not parent:
            return False
        cur = str(self.root)
        for part in parent.split("/"):
            cur = os.path.join(cur, part)
            ctx.stat_calls += 1
            try:
                if not stat.S_ISDIR(os.lstat(cur).st_mode):
                    return True
            except (FileNotFoundError, NotADirectoryError):
                return True
        return False

    @staticmethod
    def _under_any(path: str, dirs: set[str]) -> bool:
        if not dirs:
            return False
        parts = path.split("/")
        return any("/".join(parts[:i]) in dirs for i in range(1, len(parts) + 1))

    def _visit(self, rel: str, ctx: "_Pass", *, force: bool) -> None:
        """Bring ``rel`` (a file, link, directory, or nothing any more) up to date in the cache."""
        if self._ignore.any_part(rel):
            return
        ctx.stat_calls += 1
        try:
            # a hinted path whose parent is reached through a symbolic link ("link/x") is no file of
            # the workspace: the link is one, hashed by its target text, and is not followed (paths
            # from inotify events and the walk come from real, watched or listed, directories)
            through = rel in ctx.hinted and self._through_link(rel, ctx)
            st = None if through else os.lstat(os.path.join(self.root, rel))
        except (FileNotFoundError, NotADirectoryError):
            st = None
        except OSError as exc:
            raise WorkspaceUnreadableError(f"cannot stat workspace path {rel!r}: {exc.strerror or exc}",
                                           path=rel) from None
        if st is not None and stat.S_ISDIR(st.st_mode):
            self._remove(rel, ctx)                         # a file became a directory
            seen: set[str] = set()
            self._walk(rel, ctx, watch=self._inotify is not None, force=force, seen=seen)
            for p in [p for p in self._files_under(rel) if p not in seen]:
                self._remove(p, ctx)
            return
        for p in self._files_under(rel):
            self._remove(p, ctx)                           # a directory became a file, or went away
        if st is None or not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
            self._remove(rel, ctx)
            return
        self._file(rel, st, ctx, force=force)

    def _walk(self, rel_dir: str, ctx: "_Pass", *, watch: bool, force: bool, seen: set[str] | None) -> None:
        """Visit every entry under ``rel_dir`` (adding a watch before listing, in inotify mode)."""
        full = os.path.join(self.root, rel_dir) if rel_dir else str(self.root)
        if watch:
            self._add_watch(rel_dir)
        try:
            with os.scandir(full) as it:
                items = list(it)
        except (FileNotFoundError, NotADirectoryError):
            if rel_dir == "":
                raise WorkspaceMissingError(f"workspace root {str(self.root)!r} vanished while it was read",
                                            root=str(self.root)) from None
            return
        except OSError as exc:
            raise WorkspaceUnreadableError(f"cannot list workspace directory {rel_dir or '.'!r}: "
                                           f"{exc.strerror or exc}", path=rel_dir or ".") from None
        racy = self._racy                 # a file is visited once a pass: its mark is from before
        for de in items:
            name = de.name
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if self._ignore(rel, name):
                continue
            try:
                if de.is_dir(follow_symlinks=False):
                    self._walk(rel, ctx, watch=watch, force=force, seen=seen)
                    continue
                ctx.stat_calls += 1
                st = de.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue                                   # vanished after the listing
            except OSError as exc:
                raise WorkspaceUnreadableError(f"cannot stat workspace path {rel!r}: {exc.strerror or exc}",
                                               path=rel) from None
            if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                if seen is not None:
                    seen.add(rel)
                self._file(rel, st, ctx, force=force or rel in racy)

    def _file(self, rel: str, st: os.stat_result, ctx: "_Pass", *, force: bool) -> None:
        """Re-read ``rel`` when forced or when its stat key changed; update the cache."""
        key = _stat_key(st)
        old = self._entries.get(rel)
        if not force and old is not None and old.key == key:
            self._note_racy(rel, st, ctx)
            return
        full = os.path.join(self.root, rel)
        try:
            rel.encode("utf-8")
        except UnicodeEncodeError:
            raise WorkspaceUnreadableError(f"workspace file name {rel!r} is not valid UTF-8 text; a state hash "
                                           "names every file", path=rel) from None
        try:
            if stat.S_ISLNK(st.st_mode):
                data = os.fsencode(os.readlink(full))
                digest, size = hashlib.sha256(data).hexdigest(), len(data)
            else:
                fd = os.open(full, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
                try:
                    st = os.fstat(fd)
                    h, size = hashlib.sha256(), 0
                    while True:                        # a small file in one read, then the EOF read
                        chunk = os.read(fd, min(max(st.st_size + 1 - size, 1 << 16), _READ_CHUNK))
                        if not chunk:
                            break
                        h.update(chunk)
                        size += len(chunk)
                finally:
                    os.close(fd)
                digest = h.hexdigest()
                key = _stat_key(st)
        except (FileNotFoundError, NotADirectoryError):
            self._remove(rel, ctx)                         # gone between the listing and the read
            return
        except OSError as exc:
            if exc.errno == errno.ELOOP:                   # became a link between lstat and open
                return self._visit(rel, ctx, force=True)
            raise WorkspaceUnreadableError(f"cannot read workspace file {rel!r}: {exc.strerror or exc}",
                                           path=rel) from None
        ctx.reread.add(rel)
        ctx.reread_bytes += size
        self._note_racy(rel, st, ctx)
        link = stat.S_ISLNK(st.st_mode)
        if old is not None and old.sha256 == digest and old.size == size and old.link == link:
            old.key = key
            return
        self._entries[rel] = _Entry(key, digest, size, link)
        parent, _, name = rel.rpartition("/")
        self._node(parent).files[name] = (size, _utf16_key(name), _fragment(name, digest, size))
        self._mark(parent)
        ctx.changed.add(rel)

    def _remove(self, rel: str, ctx: "_Pass") -> None:
        if self._entries.pop(rel, None) is None:
            return
        parent, _, name = rel.rpartition("/")
        del self._dirs[parent].files[name]
        self._mark(parent)
        self._racy.discard(rel)
        ctx.changed.add(rel)

    # --- the Merkle tree of directory nodes -------------------------------------------------------

    def _node(self, rel_dir: str) -> "_Node":
        """The node of ``rel_dir``, made (with its missing ancestors) when absent."""
        node = self._dirs.get(rel_dir)
        if node is None:
            node = self._dirs[rel_dir] = _Node()
            parent, _, name = rel_dir.rpartition("/")
            self._node(parent).subdirs.add(name)
        return node

    def _mark(self, rel_dir: str) -> None:
        """Mark ``rel_dir`` and every directory above it for encoding (stops at one already marked)."""
        while rel_dir not in self._dirty:
            self._dirty.add(rel_dir)
            if rel_dir == "":
                return
            rel_dir = rel_dir.rpartition("/")[0]

    def _encode_dirty(self) -> None:
        """Encode the marked nodes, deepest first, so each parent sees its children's new digests.
        A directory with no file left under it leaves the tree (empty directories are no state)."""
        for rel_dir in sorted(self._dirty, key=lambda d: -d.count("/") - (d != "")):
            node = self._dirs.get(rel_dir)
            if node is None:
                continue
            entries = [(key, frag) for _, key, frag in node.files.values()]
            count, size = len(node.files), sum(v[0] for v in node.files.values())
            for name in list(node.subdirs):
                child_dir = f"{rel_dir}/{name}" if rel_dir else name
                child = self._dirs[child_dir]
                if child.count == 0:
                    node.subdirs.discard(name)
                    del self._dirs[child_dir]
                    continue
                entries.append(child.as_child)
                count, size = count + child.count, size + child.size
            entries.sort()
            node.count, node.size = count, size
            node.digest = hashlib.sha256(_NODE_HEAD + b",".join(f for _, f in entries) + _NODE_TAIL).hexdigest()
            if rel_dir:
                name = rel_dir.rpartition("/")[2] + "/"
                node.as_child = (_utf16_key(name), _fragment(name, node.digest, size))
        self._dirty.clear()

    def _files_under(self, rel_dir: str) -> list[str]:
        """The cached file paths under the directory ``rel_dir``."""
        node = self._dirs.get(rel_dir)
        if node is None:
            return []
        out = [f"{rel_dir}/{name}" for name in node.files]
        for name in node.subdirs:
            out += self._files_under(f"{rel_dir}/{name}")
        return out

    def _note_racy(self, rel: str, st: os.stat_result, ctx: "_Pass") -> None:
        """Remember ``rel`` as racy when its newest file time is within the window of this pass's
        start: a later write in the same clock tick could leave its stat key as it is."""
        newest = max(st.st_mtime_ns, st.st_ctime_ns)
        if newest % 1_000_000_000:
            self._whole_seconds = False
        window = self._racy_window_ns
        if window is None:
            window = _COARSE_RACY_WINDOW_NS if self._whole_seconds else _RACY_WINDOW_NS
        if newest >= ctx.start_ns - window:
            self._racy.add(rel)
        else:
            self._racy.discard(rel)

    # --- inotify watches ----------------------------------------------------------------------------

    def _add_watch(self, rel_dir: str) -> None:
        if self._inotify is None or self.change_source != "inotify" or rel_dir in self._dir_wd:
            return
        from inotify_simple import flags
        mask = (flags.CREATE | flags.DELETE | flags.MODIFY | flags.CLOSE_WRITE | flags.MOVED_FROM | flags.MOVED_TO
                | flags.DELETE_SELF | flags.MOVE_SELF | flags.DONT_FOLLOW | flags.EXCL_UNLINK | flags.ONLYDIR)
        path = os.path.join(self.root, rel_dir) if rel_dir else str(self.root)
        try:
            wd = self._inotify.add_watch(path, mask)
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            why = ("the per-user inotify watch limit (fs.inotify.max_user_watches) was reached"
                   if exc.errno == errno.ENOSPC else f"inotify_add_watch failed: {exc.strerror or exc}")
            self.close()
            self.note = f"stat scan: {why}"
            return
        old = self._wd_dir.get(wd)
        if old is not None and old != rel_dir:            # the same directory under a new name
            self._dir_wd.pop(old, None)
        self._wd_dir[wd] = rel_dir
        self._dir_wd[rel_dir] = wd

    def _forget_watch(self, wd: int) -> None:
        rel = self._wd_dir.pop(wd, None)
        if rel is not None and self._dir_wd.get(rel) == wd:
            del self._dir_wd[rel]

    def _reset_watches(self) -> None:
        if self._inotify is None:
            return
        for wd in list(self._wd_dir):
            try:
                self._inotify.rm_watch(wd)
            except OSError:
                pass
        self._wd_dir.clear()
        self._dir_wd.clear()
        self._inotify.read(timeout=0)                      # drop what was queued for the old watches

    def _add_watches_everywhere(self) -> None:
        def walk(rel_dir: str) -> None:
            self._add_watch(rel_dir)
            full = os.path.join(self.root, rel_dir) if rel_dir else str(self.root)
            try:
                with os.scandir(full) as it:
                    subs = [de.name for de in it if de.is_dir(follow_symlinks=False)]
            except OSError:
                return
            for name in subs:
                rel = f"{rel_dir}/{name}" if rel_dir else name
                if not self._ignore(rel, name):
                    walk(rel)
        walk("")

    # --- helpers ------------------------------------------------------------------------------------

    def _stat_root(self) -> tuple[int, int]:
        try:
            st = os.stat(self.root)
        except (FileNotFoundError, NotADirectoryError):
            raise WorkspaceMissingError(f"workspace root {str(self.root)!r} does not exist",
                                        root=str(self.root)) from None
        except OSError as exc:
            raise WorkspaceMissingError(f"workspace root {str(self.root)!r} cannot be reached: "
                                        f"{exc.strerror or exc}", root=str(self.root)) from None
        if not stat.S_ISDIR(st.st_mode):
            raise WorkspaceMissingError(f"workspace root {str(self.root)!r} is not a directory", root=str(self.root))
        return (st.st_dev, st.st_ino)

    def _relative(self, paths: Iterable[str | os.PathLike]) -> set[str]:
        if isinstance(paths, (str, bytes, os.PathLike)):
            raise ConfigError("changed_paths is a collection of paths, not one path")
        if not isinstance(paths, Iterable):
            raise ConfigError(f"changed_paths is a collection of paths, not {type(paths).__name__}")
        out: set[str] = set()
        for p in paths:
            try:
                text = os.fspath(p)
            except TypeError:
                raise ConfigError(f"changed path {p!r} is not a path ({type(p).__name__})") from None
            if not isinstance(text, str):
                raise ConfigError(f"changed path {p!r} is not text")
            if "\0" in text:
                raise ConfigError(f"changed path {text!r} holds a NUL character")
            q = Path(text)
            if q.is_absolute():
                try:
                    q = Path(os.path.normpath(q)).relative_to(self.root)
                except ValueError:
                    raise ConfigError(f"changed path {text!r} is not under the workspace {str(self.root)!r}") from None
            rel = Path(os.path.normpath(q)).as_posix()
            if rel.startswith("../") or rel == "..":
                raise ConfigError(f"changed path {text!r} leaves the workspace")
            out.add("" if rel == "." else rel)
        return out


class _Pass:
    """What one ``hash()`` call collected and did."""

    __slots__ = ("start_ns", "files", "dirs", "hinted", "reread", "reread_bytes", "changed", "stat_calls")

    def __init__(self, start_ns: int) -> None:
        self.start_ns = start_ns
        self.hinted: set[str] = set()
        self.files: set[str] = set()
        self.dirs: set[str] = set()
        self.reread: set[str] = set()
        self.reread_bytes = 0
        self.changed: set[str] = set()
        self.stat_calls = 0
