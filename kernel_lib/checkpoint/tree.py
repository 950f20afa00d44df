"""Workspace snapshots as content-addressed trees, and the deltas between them (§11.4.1, §11.8.2).

A **tree** maps every file's relative POSIX path to ``(sha256, size, executable)``: the digest
of its bytes (the name of its blob), its length in bytes, and whether any execute bit is set.
Its canonical RFC 8785 encoding is itself stored as an object, so a whole workspace is named by
one digest, the tree id. Only regular files are snapshotted; empty directories are not kept and
a symbolic link is refused (its target may lie outside the workspace).

A **workspace delta** records how one tree became another: the base tree id, the ordered
changes (sorted by path: ``write`` with the new blob digest, size and flag, ``delete``, or
``mode`` for an executable-flag change), and the result tree id as a checksum. Applying it
checks both ids, so a delta applied to the wrong base, or one that does not produce what it
claims, is refused instead of yielding a wrong tree.

Errors: :class:`~kernel_lib.errors.CheckpointError` for a workspace that cannot be snapshotted;
:class:`~kernel_lib.errors.UnrecoverableStateError` for stored trees or deltas that are
malformed, or do not fit together, and for blobs missing at materialization.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Union

import rfc8785

from kernel_lib.errors import CheckpointError, UnrecoverableStateError
from kernel_lib.checkpoint.blobs import BlobStore, is_digest, sha256_hex

TREE_FORMAT = "kernel_lib.tree/1"
DELTA_FORMAT = "kernel_lib.workspace-delta/1"


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One file of a tree: blob digest (hex SHA-256), size in bytes, executable flag."""

    sha256: str
    size: int
    executable: bool = False

    def to_json(self) -> dict:
        return {"sha256": self.sha256, "size": self.size, "executable": self.executable}


def check_path(path: object) -> str:
    """``path`` if it is a safe relative POSIX path (no empty, ``.`` or ``..`` part, no leading
    ``/``, no backslash or NUL); raises ValueError otherwise."""
    if not isinstance(path, str) or not path:
        raise ValueError(f"workspace path {path!r} is not a non-empty string")
    if path.startswith("/") or "\\" in path or "\x00" in path:
        raise ValueError(f"workspace path {path!r} is absolute or holds a backslash or NUL")
    if any(part in ("", ".", "..") for part in path.split("/")):
        raise ValueError(f"workspace path {path!r} has an empty, '.' or '..' part")
    return path


class Tree:
    """An immutable workspace tree: ``files`` maps path → :class:`FileEntry`.

    ``canonical`` is the RFC 8785 encoding stored in the blob store; ``sha256`` its digest (the
    tree id). ``total_bytes`` is the sum of file sizes.

    Raises ValueError for an unsafe path, a malformed entry, or a path that is both a file and
    the parent directory of another file.
    """

    __slots__ = ("files", "_canonical", "_sha256")

    def __init__(self, files: Mapping[str, FileEntry] | None = None):
        files = dict(sorted((files or {}).items()))
        for p, e in files.items():
            check_path(p)
            if not (isinstance(e, FileEntry) and is_digest(e.sha256) and type(e.size) is int and e.size >= 0
                    and type(e.executable) is bool):
                raise ValueError(f"tree entry {p!r} is not a valid FileEntry: {e!r}")
        for p in files:
            parts = p.split("/")
            for i in range(1, len(parts)):
                if "/".join(parts[:i]) in files:
                    raise ValueError(f"{'/'.join(parts[:i])!r} is a file and also the directory of {p!r}")
        self.files: dict[str, FileEntry] = files
        self._canonical: bytes | None = None
        self._sha256: str | None = None

    @property
    def canonical(self) -> bytes:
        if self._canonical is None:
            self._canonical = rfc8785.dumps({"format": TREE_FORMAT,
                                             "files": {p: e.to_json() for p, e in self.files.items()}})
        return self._canonical

    @property
    def sha256(self) -> str:
        if self._sha256 is None:
            self._sha256 = sha256_hex(self.canonical)
        return self._sha256

    @property
    def total_bytes(self) -> int:
        return sum(e.size for e in self.files.values())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tree) and other.files == self.files

    def __hash__(self) -> int:
        return hash(self.sha256)

    def __len__(self) -> int:
        return len(self.files)

    def __repr__(self) -> str:
        return f"Tree({len(self.files)} files, {self.total_bytes} bytes, sha256={self.sha256[:12]}…)"

    @classmethod
    def from_bytes(cls, data: bytes, *, name: str = "tree") -> "Tree":
        """Parse a stored tree. Raises UnrecoverableStateError if it is not one."""
        try:
            d = json.loads(data)
            if d.get("format") != TREE_FORMAT or set(d) != {"format", "files"}:
                raise ValueError(f"format is {d.get('format')!r}, not {TREE_FORMAT!r}")
            files = {p: FileEntry(e["sha256"], e["size"], e["executable"]) for p, e in d["files"].items()}
            return cls(files)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise UnrecoverableStateError(f"{name} is not a workspace tree: {exc}", missing=[("tree", name)]) from None


EMPTY_TREE = Tree({})

#: What a capture accepts as a workspace: a directory, in-memory files (path → bytes, or
#: path → (bytes, executable)), or a tree already in the blob store.
WorkspaceSource = Union[str, os.PathLike, Mapping[str, Union[bytes, tuple[bytes, bool]]], Tree]


def _shown(path: object, limit: int = 120) -> str:
    """``path`` for an error message, shortened in the middle when very long."""
    text = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else str(path)
    return text if len(text) <= limit else f"{text[:limit // 2]}…{text[-limit // 2:]} ({len(text)} characters)"


def scan_directory(root: str | os.PathLike, *, ignore: Iterable[str] = ()) -> tuple[Tree, dict[str, bytes]]:
    """Read every regular file under ``root`` into a tree and its blobs (digest → bytes).

    ``ignore``: file or directory names skipped wherever they occur (e.g. ``__pycache__``).

    Raises:
        CheckpointError: ``root`` is not a directory; it holds a symbolic link or a special
            file; a directory under it cannot be listed; a file cannot be read or vanishes while
            the workspace is read (a snapshot is the whole workspace or nothing).
    """
    root = Path(root)
    if not root.is_dir():
        raise CheckpointError(f"workspace {_shown(root)} is not a directory")
    skip = set(ignore)
    files: dict[str, FileEntry] = {}
    blobs: dict[str, bytes] = {}

    def unlistable(exc: OSError) -> None:
        where = exc.filename if exc.filename is not None else root
        raise CheckpointError(f"workspace {_shown(root)}: cannot list directory {_shown(where)} "
                              f"({exc.strerror or exc}); a snapshot must hold every file or none")

    for dirpath, dirnames, filenames in os.walk(root, onerror=unlistable):
        for d in list(dirnames):
            if d in skip:
                dirnames.remove(d)
            elif os.path.islink(os.path.join(dirpath, d)):
                raise CheckpointError(f"workspace {_shown(root)} holds a symbolic link "
                                      f"{_shown(os.path.join(dirpath, d))}; snapshots keep regular files only")
        dirnames.sort()
        for name in sorted(filenames):
            if name in skip:
                continue
            full = os.path.join(dirpath, name)
            rel = Path(full).relative_to(root).as_posix()
            try:
                st = os.lstat(full)
                if not stat.S_ISREG(st.st_mode):
                    raise CheckpointError(f"workspace file {_shown(rel)} is not a regular file (a link or device); "
                                          "snapshots keep regular files only")
                fd = os.open(full, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
                with open(fd, "rb") as f:
                    st = os.fstat(f.fileno())
                    if not stat.S_ISREG(st.st_mode):
                        raise CheckpointError(f"workspace file {_shown(rel)} was replaced by a non-regular file "
                                              "while the workspace was read")
                    data = f.read()
            except FileNotFoundError:
                raise CheckpointError(f"workspace file {_shown(rel)} vanished while the workspace was read (is a "
                                      "tool still writing?); no snapshot taken") from None
            except OSError as exc:
                raise CheckpointError(f"cannot read workspace file {_shown(rel)}: {exc.strerror or exc}") from None
            digest = sha256_hex(data)
            blobs[digest] = data
            files[rel] = FileEntry(digest, len(data), bool(st.st_mode & 0o111))
    try:
        return Tree(files), blobs
    except ValueError as exc:
        raise CheckpointError(f"workspace {_shown(root)}: {exc}") from None


def files_tree(files: Mapping[str, bytes | tuple[bytes, bool]]) -> tuple[Tree, dict[str, bytes]]:
    """A tree and its blobs from in-memory files: path → bytes, or path → (bytes, executable).

    Raises CheckpointError for an unsafe path or a value that is not bytes."""
    entries: dict[str, FileEntry] = {}
    blobs: dict[str, bytes] = {}
    for p, v in files.items():
        data, exe = (v if isinstance(v, tuple) else (v, False))
        if not isinstance(data, (bytes, bytearray)) or not isinstance(exe, bool):
            raise CheckpointError(f"workspace file {p!r}: expected bytes or (bytes, bool), got {type(v).__name__}")
        data = bytes(data)
        d = sha256_hex(data)
        blobs[d] = data
        entries[p] = FileEntry(d, len(data), exe)
    try:
        return Tree(entries), blobs
    except ValueError as exc:
        raise CheckpointError(f"workspace: {exc}") from None


def read_workspace(source: WorkspaceSource, blobs: BlobStore, *,
                   ignore: Iterable[str] = ()) -> tuple[Tree, dict[str, bytes]]:
    """The tree of ``source`` and the blobs it needs that may not be stored yet.

    A :class:`Tree` source must already be in ``blobs`` with every file it names (checked here:
    a checkpoint must not reference bytes that are not durable).

    Raises:
        CheckpointError: the source is not a directory path (``str`` or ``os.PathLike`` of
            text), a mapping of files or a :class:`Tree`, or cannot be read as a tree.
    """
    if isinstance(source, Tree):
        absent = [p for p, e in source.files.items() if not blobs.has(e.sha256)]
        if absent:
            raise CheckpointError(f"tree {source.sha256[:12]}… names {len(absent)} file(s) whose blobs are not "
                                  f"stored, e.g. {absent[:3]}")
        return source, {}
    if isinstance(source, Mapping):
        return files_tree(source)
    if isinstance(source, (str, os.PathLike)) and isinstance(os.fspath(source), str):
        return scan_directory(source, ignore=ignore)
    raise CheckpointError(f"a workspace is a directory path (str or os.PathLike), a mapping of path → bytes or "
                          f"(bytes, executable), or a stored Tree, not {type(source).__name__} "
                          f"{_shown(repr(source), 60)}")


def load_tree(blobs: BlobStore, digest: str, *, needed_by: str = "") -> Tree:
    """Read and verify a stored tree. Raises UnrecoverableStateError if missing, damaged or not a
    tree (or if its content does not hash back to ``digest``)."""
    tree = Tree.from_bytes(blobs.get(digest, kind="workspace tree", needed_by=needed_by), name=digest[:16])
    if tree.sha256 != digest:
        raise UnrecoverableStateError(f"workspace tree {digest[:16]}… is not in canonical form",
                                      missing=[("workspace tree", digest)])
    return tree


# ------------------------------------------------------------------------------------------------
# deltas
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One ordered change of a delta: ``op`` is ``write`` (``entry`` is the new file), ``delete``
    or ``mode`` (``entry`` carries the new executable flag and the unchanged digest/size)."""

    op: str
    path: str
    entry: FileEntry | None = None

    def to_json(self) -> dict:
        d: dict = {"op": self.op, "path": self.path}
        if self.entry is not None:
            d.update(self.entry.to_json())
        return d


@dataclass(frozen=True)
class WorkspaceDelta:
    """How tree ``base_tree`` became tree ``result_tree``: ``changes`` sorted by path."""

    base_tree: str
    result_tree: str
    changes: tuple[Change, ...]

    @property
    def canonical(self) -> bytes:
        return rfc8785.dumps({"format": DELTA_FORMAT, "base_tree": self.base_tree, "result_tree": self.result_tree,
                              "changes": [c.to_json() for c in self.changes]})

    @property
    def sha256(self) -> str:
        return sha256_hex(self.canonical)

    def counts(self) -> dict[str, int]:
        """Numbers of files written, deleted and with a changed executable flag."""
        out = {"write": 0, "delete": 0, "mode": 0}
        for c in self.changes:
            out[c.op] += 1
        return out

    def new_blobs(self) -> list[str]:
        """Digests of the blobs the writes of this delta need."""
        return [c.entry.sha256 for c in self.changes if c.op == "write" and c.entry is not None]

    def apply(self, base: Tree) -> Tree:
        """The result tree. Raises UnrecoverableStateError if ``base`` is not this delta's base, a
        change does not fit it, or the result does not hash to ``result_tree``."""
        if base.sha256 != self.base_tree:
            raise UnrecoverableStateError(
                f"workspace delta from tree {self.base_tree[:12]}… cannot apply to tree {base.sha256[:12]}…",
                missing=[("workspace delta base", self.base_tree)])
        files = dict(base.files)
        for c in self.changes:
            if c.op == "write":
                files[c.path] = c.entry
            elif c.path not in files:
                raise UnrecoverableStateError(f"workspace delta {c.op}s {c.path!r}, which tree "
                                              f"{self.base_tree[:12]}… does not hold",
                                              missing=[("workspace file", c.path)])
            elif c.op == "delete":
                del files[c.path]
            else:
                old = files[c.path]
                files[c.path] = FileEntry(old.sha256, old.size, c.entry.executable)
        try:
            out = Tree(files)
        except ValueError as exc:
            raise UnrecoverableStateError(f"workspace delta gives an invalid tree: {exc}",
                                          missing=[("workspace delta", self.result_tree)]) from None
        if out.sha256 != self.result_tree:
            raise UnrecoverableStateError(
                f"workspace delta claims result tree {self.result_tree[:12]}… but gives {out.sha256[:12]}…",
                missing=[("workspace delta result", self.result_tree)])
        return out

    @classmethod
    def from_bytes(cls, data: bytes, *, name: str = "workspace delta") -> "WorkspaceDelta":
        """Parse a stored delta. Raises UnrecoverableStateError if it is not one."""
        try:
            d = json.loads(data)
            if d.get("format") != DELTA_FORMAT:
                raise ValueError(f"format is {d.get('format')!r}, not {DELTA_FORMAT!r}")
            changes = []
            for c in d["changes"]:
                op, path = c["op"], check_path(c["path"])
                if op not in ("write", "delete", "mode"):
                    raise ValueError(f"unknown change {op!r}")
                entry = None
                if op != "delete":
                    entry = FileEntry(c["sha256"], c["size"], c["executable"])
                changes.append(Change(op, path, entry))
            if not (is_digest(d["base_tree"]) and is_digest(d["result_tree"])):
                raise ValueError("base_tree/result_tree are not digests")
            return cls(d["base_tree"], d["result_tree"], tuple(changes))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise UnrecoverableStateError(f"{name} is not a workspace delta: {exc}",
                                          missing=[("workspace delta", name)]) from None


def diff_trees(base: Tree, result: Tree) -> WorkspaceDelta:
    """The delta that turns ``base`` into ``result`` (changes sorted by path)."""
    changes: list[Change] = []
    for p in sorted(set(base.files) | set(result.files)):
        old, new = base.files.get(p), result.files.get(p)
        if new is None:
            changes.append(Change("delete", p))
        elif old is None or (old.sha256, old.size) != (new.sha256, new.size):
            changes.append(Change("write", p, new))
        elif old.executable != new.executable:
            changes.append(Change("mode", p, new))
    return WorkspaceDelta(base.sha256, result.sha256, tuple(changes))


def load_delta(blobs: BlobStore, digest: str, *, needed_by: str = "") -> WorkspaceDelta:
    """Read, verify and parse a stored workspace delta (UnrecoverableStateError if absent/bad)."""
    return WorkspaceDelta.from_bytes(blobs.get(digest, kind="workspace delta", needed_by=needed_by),
                                     name=digest[:16])


def materialize(tree: Tree, blobs: BlobStore, dest: str | os.PathLike | None, *,
                needed_by: str = "") -> int:
    """Verify every blob of ``tree`` and, when ``dest`` is given, write the files there.

    ``dest`` must not exist or be an empty directory (not a symbolic link). The files are
    written into a new sibling directory of ``dest`` that is renamed onto ``dest`` once complete,
    so ``dest`` ends up holding the whole tree or is left as it was; the sibling is removed on
    failure. Files get mode 0o755 when executable, else 0o644. Returns the bytes of file content
    verified (and written).

    Raises:
        UnrecoverableStateError: blobs are missing or damaged; ``missing`` lists every one, with
            the paths that need them (nothing is written in that case).
        CheckpointError: ``dest`` cannot receive the tree: it exists and is not an empty
            directory, is a symbolic link, lies under a regular file, or a file of the tree
            cannot be written there (a name or path too long for the file system, no space,
            no permission); nothing is left at ``dest``.
    """
    missing: list[tuple[str, str]] = []
    datas: dict[str, bytes] = {}
    for p, e in tree.files.items():
        if e.sha256 in datas:
            continue
        try:
            datas[e.sha256] = blobs.get(e.sha256, kind="file blob", needed_by=needed_by)
        except UnrecoverableStateError:
            missing.append(("file blob", f"{e.sha256} ({p})"))
    if missing:
        raise UnrecoverableStateError(
            f"{len(missing)} file blob(s) of workspace tree {tree.sha256[:12]}… are missing or damaged"
            + (f" (needed by {needed_by})" if needed_by else "") + ": "
            + ", ".join(m[1] for m in missing[:5]) + (" …" if len(missing) > 5 else ""), missing=missing)
    if dest is not None:
        _write_tree(tree, datas, dest)
    return sum(e.size for e in tree.files.values())


def _write_tree(tree: Tree, datas: dict[str, bytes], dest: str | os.PathLike) -> None:
    if not isinstance(dest, (str, os.PathLike)) or not isinstance(os.fspath(dest), str):
        raise CheckpointError(f"cannot materialize into {dest!r}: a destination is a str or os.PathLike path")
    dest = Path(os.path.abspath(dest))
    shown = _shown(dest)
    if os.path.islink(dest):
        raise CheckpointError(f"cannot materialize into {shown}: it is a symbolic link (restore writes a real "
                              "directory there, and will not follow or replace a link)")
    try:
        st = os.stat(dest)
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        raise CheckpointError(f"cannot materialize into {shown}: a parent of it is not a directory") from None
    except OSError as exc:
        raise CheckpointError(f"cannot materialize into {shown}: {exc.strerror or exc}") from None
    try:
        if st is not None and (not stat.S_ISDIR(st.st_mode) or os.listdir(dest)):
            raise CheckpointError(f"cannot materialize into {shown}: it exists and is not an empty directory")
    except OSError as exc:
        raise CheckpointError(f"cannot materialize into {shown}: {exc.strerror or exc}") from None
    created: list[Path] = []       # parents of dest this call creates, removed again on failure
    for anc in reversed(dest.parents):
        if not os.path.lexists(anc):
            try:
                os.mkdir(anc)
            except FileExistsError:
                continue
            except OSError as exc:
                _undo(None, created)
                why = "a parent of it is not a directory" if isinstance(exc, NotADirectoryError) else (
                    exc.strerror or str(exc))
                raise CheckpointError(f"cannot materialize into {shown}: {why}") from None
            created.append(anc)
        elif not os.path.isdir(anc):
            _undo(None, created)
            raise CheckpointError(f"cannot materialize into {shown}: its parent {_shown(anc)} is not a directory")
    tmp = dest.parent / f".{dest.name[:64]}.restore-{secrets.token_hex(6)}"
    made = False
    try:
        os.mkdir(tmp)
        made = True
        for p, e in tree.files.items():
            target = tmp / p
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(datas[e.sha256])
            target.chmod(0o755 if e.executable else 0o644)
        if st is not None:
            os.chmod(tmp, stat.S_IMODE(st.st_mode))
        os.rename(tmp, dest)      # atomic; replaces dest only if it is still an empty directory
    except OSError as exc:
        _undo(tmp if made else None, created)
        where = ""
        if exc.filename is not None and made:
            try:
                rel = Path(os.fsdecode(exc.filename)).relative_to(tmp).as_posix()
                where = f" (writing {_shown(rel, 80)})" if rel != "." else ""
            except ValueError:
                pass
        raise CheckpointError(f"cannot materialize the workspace into {shown}{where}: "
                              f"{exc.strerror or exc}; nothing was left there") from None


def _undo(tmp: Path | None, created: list[Path]) -> None:
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    for d in reversed(created):
        try:
            os.rmdir(d)
        except OSError:
            break
