"""The file-system seam of the segment log (§11.3.1 table 2 and its footnote on crash testing).

Every file and directory operation that :class:`~kernel_lib.log.segment.SegmentStore` performs
goes through one :class:`FileSystem` object. That single seam is what lets the same store run on
a real disk, be recorded op by op, and be reopened on a synthetic crash state:

* :class:`OsFileSystem` makes the real calls (``os.pwrite``, ``os.fdatasync``, a directory fsync
  through ``os.open(dir, O_RDONLY)`` + ``os.fsync``, ``flock`` for the directory lock).
* :class:`MemoryFileSystem` keeps files as ``bytearray`` in a dict. The crash checker builds crash
  states in it and reopens the store on them.
* :class:`RecordingFileSystem` forwards to another file system and appends one :class:`Op` per
  mutation or barrier (create, write, truncate, fdatasync, fsync_dir, remove, makedirs), plus the
  acknowledgment markers a workload adds with :meth:`RecordingFileSystem.mark_ack`.
* :class:`ForwardingFileSystem` forwards everything; subclass it to inject faults in tests.

Units: offsets and sizes are bytes. Paths are plain strings. Errors are the ``OSError``\\ s the
operating system would raise (``FileNotFoundError`` etc.); :meth:`FileSystem.lock_dir` raises
:class:`~kernel_lib.errors.StoreError` when another opener holds the directory.
"""

from __future__ import annotations

import errno
import os
import posixpath
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Iterable

from kernel_lib.errors import StoreError

LOCK_FILE_NAME = "LOCK"

#: Writes up to this many bytes are made by :class:`OsFileSystem` with the GIL held (a copy into
#: the page cache takes microseconds). ``os.pwrite`` hands the GIL back for the call, and in a
#: process whose other threads keep the interpreter busy (a fleet of trajectories) getting it back
#: costs a thread switch and can wait a whole switch interval (5 ms): more than the write itself.
#: Larger writes, and platforms without ``pwrite`` in the C library, use ``os.pwrite``.
GIL_HELD_WRITE_BYTES_MAX = 64 * 1024


def _gil_held_pwrite():
    """libc ``pwrite`` called through :class:`ctypes.PyDLL` (which keeps the GIL), or None."""
    try:
        import ctypes
        libc = ctypes.PyDLL(None, use_errno=True)
        fn = libc.pwrite
    except (OSError, AttributeError, ImportError):   # pragma: no cover - no such C library
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_longlong)
    fn.restype = ctypes.c_ssize_t
    return fn, ctypes.get_errno


_PWRITE_GIL_HELD = _gil_held_pwrite()


# ------------------------------------------------------------------------------------------------
# the interface
# ------------------------------------------------------------------------------------------------


class FileHandle:
    """An open file. ``path`` is the path it was opened under; implementations add their state."""

    path: str

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.path}>"


class DirLock:
    """An advisory exclusive lock on a directory. :meth:`release` is idempotent."""

    def release(self) -> None:  # pragma: no cover - overridden
        pass


class FileSystem(ABC):
    """The operations a segment log needs, and nothing else.

    ``pwrite`` writes every byte or raises; it never returns a short count. ``fdatasync`` is the
    host-crash barrier of table 2 for one file's data; ``fsync_dir`` is the barrier for a
    directory's entries (file creation and removal).
    """

    @abstractmethod
    def open_file(self, path: str, *, create: bool = False) -> FileHandle:
        """Open ``path`` for reading and writing; create it empty first if ``create`` and missing.

        Raises FileNotFoundError if it is missing and ``create`` is false.
        """

    @abstractmethod
    def pwrite(self, handle: FileHandle, offset_bytes: int, data: bytes) -> None:
        """Write all of ``data`` at ``offset_bytes`` (extending the file with zeros if needed)."""

    @abstractmethod
    def truncate(self, handle: FileHandle, size_bytes: int) -> None:
        """Cut (or zero-extend) the file to ``size_bytes``."""

    @abstractmethod
    def fdatasync(self, handle: FileHandle) -> None:
        """Return once the file's data (and the size needed to read it) is on stable media."""

    @abstractmethod
    def close(self, handle: FileHandle) -> None:
        """Close the handle. Idempotent."""

    @abstractmethod
    def read_all(self, path: str) -> bytes:
        """The whole content of ``path``."""

    @abstractmethod
    def size(self, path: str) -> int:
        """Length of ``path`` in bytes."""

    @abstractmethod
    def exists(self, path: str) -> bool:
        """True if ``path`` names a file or directory."""

    @abstractmethod
    def listdir(self, path: str) -> list[str]:
        """Names (not paths) of the entries of directory ``path``, sorted."""

    @abstractmethod
    def makedirs(self, path: str) -> None:
        """Create directory ``path`` and its parents; no error if it exists."""

    @abstractmethod
    def remove(self, path: str) -> None:
        """Remove file ``path`` (its directory entry; open handles stay usable)."""

    @abstractmethod
    def fsync_dir(self, path: str) -> None:
        """Make the entries of directory ``path`` (creations, removals) durable."""

    @abstractmethod
    def lock_dir(self, path: str) -> DirLock:
        """Take an advisory exclusive lock on directory ``path`` without waiting.

        Raises:
            StoreError: another opener holds it; the message names the holder when known.
        """


# ------------------------------------------------------------------------------------------------
# the real operating system
# ------------------------------------------------------------------------------------------------


@dataclass(eq=False, repr=False)
class _OsHandle(FileHandle):
    path: str
    fd: int
    closed: bool = False


@dataclass(eq=False)
class _OsDirLock(DirLock):
    fd: int
    released: bool = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            import fcntl

            try:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                os.close(self.fd)


class OsFileSystem(FileSystem):
    """Real files: ``os.pwrite``, ``os.fdatasync`` and a directory ``fsync`` (POSIX only)."""

    def open_file(self, path: str, *, create: bool = False) -> FileHandle:
        flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0) | (os.O_CREAT if create else 0)
        return _OsHandle(path, os.open(path, flags, 0o644))

    def pwrite(self, handle: FileHandle, offset_bytes: int, data: bytes) -> None:
        assert isinstance(handle, _OsHandle)
        if (_PWRITE_GIL_HELD is not None and type(data) is bytes and 0 < len(data) <= GIL_HELD_WRITE_BYTES_MAX):
            fn, get_errno = _PWRITE_GIL_HELD
            n = fn(handle.fd, data, len(data), offset_bytes)
            if n == len(data):
                return
            if n < 0:
                code = get_errno()
                if code != errno.EINTR:
                    raise OSError(code, f"pwrite to {handle.path}: {os.strerror(code)}")
                n = 0
            data, offset_bytes = data[n:], offset_bytes + n   # short write or EINTR: the rest as below
        view = memoryview(data)
        while view:
            n = os.pwrite(handle.fd, view, offset_bytes)
            if n <= 0:  # pragma: no cover - the kernel reports errors by raising
                raise OSError(errno.EIO, f"pwrite wrote {n} bytes to {handle.path}")
            view = view[n:]
            offset_bytes += n

    def truncate(self, handle: FileHandle, size_bytes: int) -> None:
        assert isinstance(handle, _OsHandle)
        os.ftruncate(handle.fd, size_bytes)

    def fdatasync(self, handle: FileHandle) -> None:
        assert isinstance(handle, _OsHandle)
        sync = getattr(os, "fdatasync", os.fsync)  # macOS has no fdatasync
        sync(handle.fd)

    def close(self, handle: FileHandle) -> None:
        assert isinstance(handle, _OsHandle)
        if not handle.closed:
            handle.closed = True
            os.close(handle.fd)

    def read_all(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def size(self, path: str) -> int:
        return os.stat(path).st_size

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def remove(self, path: str) -> None:
        os.remove(path)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def lock_dir(self, path: str) -> DirLock:
        import fcntl

        lock_path = os.path.join(path, LOCK_FILE_NAME)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
            finally:
                os.close(fd)
            raise StoreError(
                f"log directory {path} is locked by another opener ({holder or 'holder unknown'}); "
                "only one process may append to a segment log at a time"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}\n".encode(), 0)
        return _OsDirLock(fd)


# ------------------------------------------------------------------------------------------------
# memory
# ------------------------------------------------------------------------------------------------


def _norm(path: str) -> str:
    return posixpath.normpath(path)


@dataclass(eq=False, repr=False)
class _MemHandle(FileHandle):
    path: str
    buf: bytearray        # the file's "inode": survives removal of its directory entry
    closed: bool = False


@dataclass(eq=False)
class _MemDirLock(DirLock):
    owner: "MemoryFileSystem"
    path: str
    released: bool = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            with self.owner._mutex:
                self.owner._locks.discard(self.path)


class MemoryFileSystem(FileSystem):
    """Files in memory: ``files`` maps a normalized path to its bytes; ``dirs`` holds directories.

    Barriers are no-ops (nothing here is volatile). Build one from a crash state with
    ``MemoryFileSystem(files={...}, dirs={...})``; :meth:`snapshot` returns the current content.
    """

    def __init__(self, files: dict[str, bytes] | None = None, dirs: Iterable[str] = ()):
        self.files: dict[str, bytearray] = {_norm(p): bytearray(b) for p, b in (files or {}).items()}
        self.dirs: set[str] = {"/", "."}
        for d in list(dirs) + [posixpath.dirname(p) for p in self.files]:
            self._add_dir(_norm(d))
        self._locks: set[str] = set()
        self._mutex = threading.Lock()

    def _add_dir(self, path: str) -> None:
        while path not in self.dirs and path not in ("", "/", "."):
            self.dirs.add(path)
            path = posixpath.dirname(path)

    def snapshot(self) -> dict[str, bytes]:
        """A copy of every file's content, by path."""
        return {p: bytes(b) for p, b in self.files.items()}

    def open_file(self, path: str, *, create: bool = False) -> FileHandle:
        p = _norm(path)
        buf = self.files.get(p)
        if buf is None:
            if not create:
                raise FileNotFoundError(errno.ENOENT, "no such file", path)
            if posixpath.dirname(p) not in self.dirs:
                raise FileNotFoundError(errno.ENOENT, "no such directory", posixpath.dirname(p))
            buf = self.files[p] = bytearray()
        return _MemHandle(p, buf)

    def pwrite(self, handle: FileHandle, offset_bytes: int, data: bytes) -> None:
        assert isinstance(handle, _MemHandle) and not handle.closed
        buf = handle.buf
        if len(buf) < offset_bytes:
            buf.extend(bytes(offset_bytes - len(buf)))
        buf[offset_bytes:offset_bytes + len(data)] = data

    def truncate(self, handle: FileHandle, size_bytes: int) -> None:
        assert isinstance(handle, _MemHandle) and not handle.closed
        if len(handle.buf) > size_bytes:
            del handle.buf[size_bytes:]
        else:
            handle.buf.extend(bytes(size_bytes - len(handle.buf)))

    def fdatasync(self, handle: FileHandle) -> None:
        assert isinstance(handle, _MemHandle) and not handle.closed

    def close(self, handle: FileHandle) -> None:
        assert isinstance(handle, _MemHandle)
        handle.closed = True

    def read_all(self, path: str) -> bytes:
        try:
            return bytes(self.files[_norm(path)])
        except KeyError:
            raise FileNotFoundError(errno.ENOENT, "no such file", path) from None

    def size(self, path: str) -> int:
        try:
            return len(self.files[_norm(path)])
        except KeyError:
            raise FileNotFoundError(errno.ENOENT, "no such file", path) from None

    def exists(self, path: str) -> bool:
        p = _norm(path)
        return p in self.files or p in self.dirs

    def listdir(self, path: str) -> list[str]:
        p = _norm(path)
        if p not in self.dirs:
            raise FileNotFoundError(errno.ENOENT, "no such directory", path)
        names = {posixpath.basename(q) for q in list(self.files) + list(self.dirs)
                 if q != p and posixpath.dirname(q) == p}
        return sorted(names)

    def makedirs(self, path: str) -> None:
        self._add_dir(_norm(path))

    def remove(self, path: str) -> None:
        try:
            del self.files[_norm(path)]
        except KeyError:
            raise FileNotFoundError(errno.ENOENT, "no such file", path) from None

    def fsync_dir(self, path: str) -> None:
        if _norm(path) not in self.dirs:
            raise FileNotFoundError(errno.ENOENT, "no such directory", path)

    def lock_dir(self, path: str) -> DirLock:
        p = _norm(path)
        with self._mutex:
            if p in self._locks:
                raise StoreError(f"log directory {path} is locked by another opener (in this process); "
                                 "only one opener may append to a segment log at a time")
            self._locks.add(p)
        return _MemDirLock(self, p)


# ------------------------------------------------------------------------------------------------
# forwarding and recording
# ------------------------------------------------------------------------------------------------


class ForwardingFileSystem(FileSystem):
    """Forwards every call to ``inner``. Subclass it to observe calls or inject faults."""

    def __init__(self, inner: FileSystem):
        self.inner = inner

    def open_file(self, path: str, *, create: bool = False) -> FileHandle:
        return self.inner.open_file(path, create=create)

    def pwrite(self, handle: FileHandle, offset_bytes: int, data: bytes) -> None:
        self.inner.pwrite(handle, offset_bytes, data)

    def truncate(self, handle: FileHandle, size_bytes: int) -> None:
        self.inner.truncate(handle, size_bytes)

    def fdatasync(self, handle: FileHandle) -> None:
        self.inner.fdatasync(handle)

    def close(self, handle: FileHandle) -> None:
        self.inner.close(handle)

    def read_all(self, path: str) -> bytes:
        return self.inner.read_all(path)

    def size(self, path: str) -> int:
        return self.inner.size(path)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def listdir(self, path: str) -> list[str]:
        return self.inner.listdir(path)

    def makedirs(self, path: str) -> None:
        self.inner.makedirs(path)

    def remove(self, path: str) -> None:
        self.inner.remove(path)

    def fsync_dir(self, path: str) -> None:
        self.inner.fsync_dir(path)

    def lock_dir(self, path: str) -> DirLock:
        return self.inner.lock_dir(path)


@dataclass(frozen=True, slots=True)
class Op:
    """One recorded operation.

    ``kind`` is one of ``create``, ``write``, ``truncate``, ``fdatasync``, ``fsync_dir``,
    ``remove``, ``makedirs`` (file-system ops, recorded after they return) or ``ack`` (a
    workload's marker). ``inode`` numbers each incarnation of a path (a path removed and created
    again gets a new one), so a barrier covers only writes to the same file. For ``write``,
    ``offset`` and ``data``; for ``truncate``, ``size``; for ``ack``, ``tier`` (its label) and
    ``subjects`` (event ids, or ``"fence:<trajectory_id>:<owner_epoch>"``).
    """

    kind: str
    path: str = ""
    inode: int = 0
    offset: int = 0
    data: bytes = b""
    size: int = 0
    tier: str = ""
    subjects: tuple[str, ...] = ()


@dataclass(eq=False, repr=False)
class _RecHandle(FileHandle):
    path: str
    inode: int
    inner: FileHandle


class RecordingFileSystem(ForwardingFileSystem):
    """Forwards to ``inner`` and appends an :class:`Op` to ``ops`` for every mutation and barrier.

    An op is recorded only after the inner call returned, so a recorded barrier is a completed
    barrier. Reads and the directory lock are forwarded without being recorded.
    """

    def __init__(self, inner: FileSystem):
        super().__init__(inner)
        self.ops: list[Op] = []
        self._inode_of: dict[str, int] = {}
        self._next_inode = 1
        self._mutex = threading.Lock()

    def _record(self, op: Op) -> None:
        with self._mutex:
            self.ops.append(op)

    def _inode(self, path: str, *, fresh: bool = False) -> int:
        p = _norm(path)
        with self._mutex:
            if fresh or p not in self._inode_of:
                self._inode_of[p] = self._next_inode
                self._next_inode += 1
            return self._inode_of[p]

    def mark_ack(self, subjects: Iterable[str], tier: object) -> None:
        """Record that ``subjects`` (event ids) were acknowledged at ``tier`` just now.

        Call it after the store's append returned: the acknowledgment follows its barrier.
        ``tier`` is an :class:`~kernel_lib.log.base.AckTier` or its label.
        """
        label = getattr(tier, "label", str(tier))
        self._record(Op("ack", tier=label, subjects=tuple(subjects)))

    def mark_fence(self, trajectory_id: str, owner_epoch: int) -> None:
        """Record that a fence (``install_fence``) was acknowledged at fdatasync just now."""
        self._record(Op("ack", tier="fdatasync", subjects=(f"fence:{trajectory_id}:{owner_epoch}",)))

    def open_file(self, path: str, *, create: bool = False) -> FileHandle:
        existed = self.inner.exists(path)
        h = self.inner.open_file(path, create=create)
        if not existed:
            ino = self._inode(path, fresh=True)
            self._record(Op("create", _norm(path), ino))
        else:
            ino = self._inode(path)
        return _RecHandle(_norm(path), ino, h)

    def pwrite(self, handle: FileHandle, offset_bytes: int, data: bytes) -> None:
        assert isinstance(handle, _RecHandle)
        self.inner.pwrite(handle.inner, offset_bytes, data)
        self._record(Op("write", handle.path, handle.inode, offset=offset_bytes, data=bytes(data)))

    def truncate(self, handle: FileHandle, size_bytes: int) -> None:
        assert isinstance(handle, _RecHandle)
        self.inner.truncate(handle.inner, size_bytes)
        self._record(Op("truncate", handle.path, handle.inode, size=size_bytes))

    def fdatasync(self, handle: FileHandle) -> None:
        assert isinstance(handle, _RecHandle)
        self.inner.fdatasync(handle.inner)
        self._record(Op("fdatasync", handle.path, handle.inode))

    def close(self, handle: FileHandle) -> None:
        assert isinstance(handle, _RecHandle)
        self.inner.close(handle.inner)

    def makedirs(self, path: str) -> None:
        self.inner.makedirs(path)
        self._record(Op("makedirs", _norm(path)))

    def remove(self, path: str) -> None:
        ino = self._inode(path)
        self.inner.remove(path)
        with self._mutex:
            self._inode_of.pop(_norm(path), None)
        self._record(Op("remove", _norm(path), ino))

    def fsync_dir(self, path: str) -> None:
        self.inner.fsync_dir(path)
        self._record(Op("fsync_dir", _norm(path)))
