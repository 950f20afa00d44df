"""Content-addressed blob stores for checkpoints and workspace snapshots (§11.4.1, §11.8.2).

Every object a checkpoint needs (file contents, tree manifests, record snapshots and deltas,
workspace deltas, checkpoint manifests) is stored as bytes under the lowercase hex SHA-256 of
those bytes. A name therefore proves nothing by itself: every read hashes the bytes again and a
mismatch is reported as damage, never returned. Identical bytes get one copy, so trajectories
over the same repository share their files (Venti-style coalescing, §11.8.2 footnote 9).

* :class:`DirectoryBlobStore` keeps one file per object under ``<root>/<d[:2]>/<d>`` and makes
  every new object durable (data ``fdatasync`` + directory ``fsync``) before :meth:`put_many`
  returns. All its file operations go through a :class:`~kernel_lib.log.fs.FileSystem`, the seam
  the crash explorer records and replays (:mod:`kernel_lib.verify.checkpoint_workload`).
* :class:`MemoryBlobStore` keeps objects in a dict (tests, simulations): nothing is durable.

Units: sizes are bytes. Errors: :class:`~kernel_lib.errors.UnrecoverableStateError` when a read
finds an object missing, damaged or unreadable (``missing`` names it);
:class:`~kernel_lib.errors.CheckpointError` when a put cannot store an object (e.g. its file
name is taken by a directory, or the disk is full): nothing that names it has been published.

A store object keeps no memory of what it wrote or verified: another process, a garbage
collector or the disk may remove or change an object at any time, so every "is it already
there?" question is answered from the stored bytes (read and hashed).
"""

from __future__ import annotations

import hashlib
import posixpath
import re
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from kernel_lib.errors import CheckpointError, UnrecoverableStateError
from kernel_lib.log.fs import FileSystem, OsFileSystem

_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def sha256_hex(data: bytes) -> str:
    """Lowercase hex SHA-256 of ``data``: the name of its object."""
    return hashlib.sha256(data).hexdigest()


def is_digest(text: object) -> bool:
    """True if ``text`` is a lowercase hex SHA-256 (64 characters)."""
    return isinstance(text, str) and bool(_HEX64.match(text))


@dataclass
class BlobStats:
    """Running totals of one store object (since it was opened): bytes and objects written by
    :meth:`BlobStore.put_many`, puts skipped because the object was already stored, bytes read
    back, objects deleted."""

    bytes_written: int = 0
    objects_written: int = 0
    objects_skipped: int = 0
    bytes_read: int = 0
    objects_deleted: int = 0


@dataclass
class PutResult:
    """What one :meth:`BlobStore.put_many` call did: ``digests`` in input order, and the bytes and
    objects actually written (objects already present are not rewritten)."""

    digests: list[str] = field(default_factory=list)
    bytes_written: int = 0
    objects_written: int = 0
    objects_skipped: int = 0


class BlobStore(ABC):
    """Objects named by the SHA-256 of their bytes.

    ``put_many`` returns only once every new object is durable in the store's failure domain
    (that ordering is what lets a checkpoint be published after it, §11.4.1). ``get`` verifies the
    digest on every read.
    """

    name: str = "blobs"
    #: True when put_many's return means the bytes survive a host crash.
    durable: bool = False

    def __init__(self) -> None:
        self.stats = BlobStats()

    @abstractmethod
    def _read(self, digest: str) -> bytes | None:
        """Raw bytes stored under ``digest`` (unverified), or None if there are none. May raise
        OSError when something is stored but cannot be read."""

    @abstractmethod
    def _write_many(self, items: list[tuple[str, bytes]]) -> None:
        """Store every ``(digest, bytes)`` pair and make it durable before returning. Raises
        CheckpointError naming the object that could not be stored."""

    @abstractmethod
    def _remove(self, digest: str) -> bool:
        """Remove the object; False if it was not there."""

    @abstractmethod
    def digests(self) -> Iterator[str]:
        """Names of every stored object (valid or not), in no particular order."""

    def exists(self, digest: str) -> bool:
        """True if something is stored under ``digest``, without reading or verifying it: a cheap
        presence check (a stat for a directory store). Use :meth:`has` to know the bytes are right."""
        try:
            return self._read(digest) is not None
        except OSError:
            return True

    def put_many(self, datas: Iterable[bytes]) -> PutResult:
        """Store each of ``datas`` under its digest; durable when this returns.

        An object already stored with the right bytes (read back and hashed now, not remembered
        from an earlier call) is skipped (counted in ``objects_skipped``); one that is absent or
        stored with wrong bytes (a torn write, a file removed or changed by another process) is
        written again.

        Raises:
            CheckpointError: an object could not be stored (the message names it); objects
                written before it stay (they are harmless unreferenced garbage).
        """
        out = PutResult()
        todo: dict[str, bytes] = {}
        for data in datas:
            data = bytes(data)
            d = sha256_hex(data)
            out.digests.append(d)
            if d in todo:
                continue
            if self.has(d):
                out.objects_skipped += 1
                continue
            todo[d] = data
        if todo:
            try:
                self._write_many(list(todo.items()))
            except OSError as exc:
                raise CheckpointError(f"blob store {self.name} could not store {len(todo)} object(s): "
                                      f"{exc.strerror or exc}") from None
            out.bytes_written += sum(len(data) for data in todo.values())
            out.objects_written += len(todo)
        self.stats.bytes_written += out.bytes_written
        self.stats.objects_written += out.objects_written
        self.stats.objects_skipped += out.objects_skipped
        return out

    def put(self, data: bytes) -> str:
        """Store one object (see :meth:`put_many`); returns its digest."""
        return self.put_many([data]).digests[0]

    def has(self, digest: str) -> bool:
        """True if ``digest`` is stored with the right bytes (read and hashed on every call).
        Something stored but unreadable counts as absent."""
        if not is_digest(digest):
            return False
        try:
            raw = self._read(digest)
        except OSError:
            return False
        return raw is not None and sha256_hex(raw) == digest

    def get(self, digest: str, *, kind: str = "object", needed_by: str = "") -> bytes:
        """The bytes of ``digest``, verified.

        Args:
            kind: what the object is (``manifest``, ``record snapshot``, ``file blob``, ...), for
                the error message.
            needed_by: what needs it, for the error message.

        Raises:
            UnrecoverableStateError: the object is missing, or its bytes hash to another digest.
        """
        if not is_digest(digest):
            raise UnrecoverableStateError(f"{kind} name {digest!r} is not a SHA-256 digest"
                                          + (f" (needed by {needed_by})" if needed_by else ""),
                                          missing=[(kind, str(digest))])
        try:
            raw = self._read(digest)
        except OSError as exc:
            raise UnrecoverableStateError(f"{kind} {digest[:16]}… cannot be read from blob store {self.name} "
                                          f"({exc.strerror or exc})"
                                          + (f"; needed by {needed_by}" if needed_by else ""),
                                          missing=[(kind, digest)]) from None
        if raw is None:
            raise self._unusable(digest, "is missing", kind, needed_by)
        self.stats.bytes_read += len(raw)
        got = sha256_hex(raw)
        if got != digest:
            raise self._unusable(digest, _damaged(len(raw), got), kind, needed_by)
        return raw

    def get_pending(self, digest: str, *, kind: str = "object", needed_by: str = "") -> tuple[bytes, "PendingCheck"]:
        """The bytes of ``digest`` now, and the check of their digest still running: the restore
        path's read of a large record snapshot (:func:`kernel_lib.checkpoint.restore.restore`),
        which decodes the bytes while a background thread hashes them (hashlib releases the GIL
        on large buffers, so on two cores the hash costs no wall time).

        The bytes are **unverified** until :meth:`PendingCheck.wait` returns: nothing derived
        from them may be returned, written or acted upon before that, and if anything derived
        from them fails, the caller waits first, so that damage is reported as damage (the
        error :meth:`get` raises) rather than as whatever the damaged bytes made fail. Objects
        under :data:`PENDING_CHECK_MIN_BYTES` are hashed before returning (a thread would cost
        more than it hides).

        Raises:
            UnrecoverableStateError: the object is missing or unreadable (as :meth:`get`); its
                damage is raised by :meth:`PendingCheck.wait`.
        """
        if not is_digest(digest):
            return self.get(digest, kind=kind, needed_by=needed_by), PendingCheck.done(None)
        try:
            raw = self._read(digest)
        except OSError:
            return self.get(digest, kind=kind, needed_by=needed_by), PendingCheck.done(None)
        if raw is None:
            raise self._unusable(digest, "is missing", kind, needed_by)
        self.stats.bytes_read += len(raw)
        return raw, PendingCheck(raw, digest, lambda got: self._unusable(digest, _damaged(len(raw), got), kind,
                                                                         needed_by))

    def _unusable(self, digest: str, why: str, kind: str, needed_by: str) -> UnrecoverableStateError:
        return UnrecoverableStateError(f"{kind} {digest[:16]}… {why} in blob store {self.name}"
                                       + (f"; needed by {needed_by}" if needed_by else ""),
                                       missing=[(kind, digest)])

    def delete(self, digest: str) -> bool:
        """Remove one object (durably for a durable store); False if it was not stored.

        Raises CheckpointError if it is stored but cannot be removed."""
        try:
            gone = self._remove(digest)
        except OSError as exc:
            raise CheckpointError(f"blob store {self.name} could not delete object {digest[:16]}…: "
                                  f"{exc.strerror or exc}") from None
        if gone:
            self.stats.objects_deleted += 1
        return gone

    def size(self, digest: str) -> int | None:
        """Stored length of ``digest`` in bytes (unverified), or None if absent or unreadable."""
        try:
            raw = self._read(digest)
        except OSError:
            return None
        return None if raw is None else len(raw)


def _damaged(size: int, got: str) -> str:
    return f"is damaged (its {size} bytes hash to {got[:12]}…, not to its name)"


#: Objects at least this large (bytes) are hashed in a background thread by
#: :meth:`BlobStore.get_pending`; smaller ones are hashed at once.
PENDING_CHECK_MIN_BYTES = 1 << 20


class PendingCheck:
    """The SHA-256 check of bytes already handed out by :meth:`BlobStore.get_pending`, running
    in a daemon thread (or already done). :meth:`wait` joins it and raises the damage error if
    the bytes do not hash to their name; :meth:`damaged` joins it and says whether they do not.
    Waiting again returns (or raises) the same answer."""

    __slots__ = ("_thread", "_got", "_failure", "_digest", "_error")

    def __init__(self, data: bytes | None, digest: str | None,
                 error: "Callable[[str], UnrecoverableStateError] | None" = None) -> None:
        self._digest, self._error = digest, error
        self._got: str | None = None
        self._failure: BaseException | None = None
        self._thread: threading.Thread | None = None
        if data is None:
            return
        if len(data) < PENDING_CHECK_MIN_BYTES:
            self._got = sha256_hex(data)
            return
        self._thread = threading.Thread(target=self._hash, args=(data,), name="blob-digest-check", daemon=True)
        self._thread.start()

    @classmethod
    def done(cls, digest: str | None) -> "PendingCheck":
        """A check with nothing left to do (the bytes were verified already)."""
        return cls(None, digest)

    def _hash(self, data: bytes) -> None:
        try:
            self._got = sha256_hex(data)
        except BaseException as exc:   # handed to the waiting thread  # noqa: BLE001
            self._failure = exc

    def _join(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._failure is not None:
            raise self._failure

    def damaged(self) -> bool:
        """Wait for the check; True if the bytes do not hash to their name."""
        self._join()
        return self._digest is not None and self._got != self._digest

    def wait(self) -> None:
        """Wait for the check. Raises UnrecoverableStateError (the message and ``missing`` of
        :meth:`BlobStore.get`) if the bytes do not hash to their name."""
        if self.damaged() and self._error is not None:
            raise self._error(self._got or "")


class MemoryBlobStore(BlobStore):
    """Objects in a dict (``objects``: digest → bytes). Not durable: for tests and simulations.
    Tests may edit ``objects`` to simulate damage; reads verify digests, so they notice."""

    name = "memory"
    durable = False

    def __init__(self) -> None:
        super().__init__()
        self.objects: dict[str, bytes] = {}

    def _read(self, digest: str) -> bytes | None:
        return self.objects.get(digest)

    def exists(self, digest: str) -> bool:
        return digest in self.objects

    def _write_many(self, items: list[tuple[str, bytes]]) -> None:
        for d, data in items:
            self.objects[d] = data

    def _remove(self, digest: str) -> bool:
        return self.objects.pop(digest, None) is not None

    def digests(self) -> Iterator[str]:
        return iter(list(self.objects))


class DirectoryBlobStore(BlobStore):
    """One file per object under ``root``: ``<root>/<d[:2]>/<d>`` (256 fan-out directories).

    Durability: a new object is written with ``pwrite`` and ``fdatasync``; once all objects of a
    :meth:`put_many` are, every directory that gained an entry is ``fsync``'d (and the root first
    when a fan-out directory was created). There is no rename: an object is written in place
    under its final name, and because every read verifies the digest, a file torn by a crash (or
    removed or changed by another process) is treated as absent and rewritten by the next put of
    the same bytes: :meth:`put_many` decides what to skip from the files on disk, never from a
    memory of earlier puts.

    Args:
        root: the store's directory (created if missing; shared across trajectories).
        fs: the file-system seam (default: the real one).
    """

    durable = True

    def __init__(self, root: str, fs: FileSystem | None = None):
        super().__init__()
        self.fs = fs or OsFileSystem()
        self.root = posixpath.normpath(str(root))
        self.name = f"directory {self.root}"
        if not self.fs.exists(self.root):
            self.fs.makedirs(self.root)
            parent = posixpath.dirname(self.root) or "/"
            if self.fs.exists(parent):
                self.fs.fsync_dir(parent)

    def path_of(self, digest: str) -> str:
        """File path of object ``digest``."""
        return f"{self.root}/{digest[:2]}/{digest}"

    def exists(self, digest: str) -> bool:
        if not is_digest(digest):
            return False
        try:
            self.fs.size(self.path_of(digest))
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError:
            return True
        return True

    def _read(self, digest: str) -> bytes | None:
        if not is_digest(digest):
            return None
        try:
            return self.fs.read_all(self.path_of(digest))
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def _write_many(self, items: list[tuple[str, bytes]]) -> None:
        new_dirs = sorted({d[:2] for d, _ in items if not self.fs.exists(f"{self.root}/{d[:2]}")})
        for sub in new_dirs:
            try:
                self.fs.makedirs(f"{self.root}/{sub}")
            except OSError as exc:
                first = next(d for d, _ in items if d[:2] == sub)
                raise CheckpointError(f"blob store {self.name} could not create directory {self.root}/{sub} for "
                                      f"object {first[:16]}…: {exc.strerror or exc}") from None
        if new_dirs:
            self.fs.fsync_dir(self.root)
        touched: set[str] = set()
        for d, data in items:
            path = self.path_of(d)
            try:
                existed = self.fs.exists(path)
                h = self.fs.open_file(path, create=True)
                try:
                    if existed:   # wrong bytes under this name (a torn write): replace them
                        self.fs.truncate(h, 0)
                    self.fs.pwrite(h, 0, data)
                    self.fs.fdatasync(h)
                finally:
                    self.fs.close(h)
            except OSError as exc:
                raise CheckpointError(f"blob store {self.name} could not store object {d[:16]}… at {path}: "
                                      f"{exc.strerror or exc}") from None
            if not existed:
                touched.add(f"{self.root}/{d[:2]}")
        for sub in sorted(touched):
            self.fs.fsync_dir(sub)

    def _remove(self, digest: str) -> bool:
        if not is_digest(digest):
            return False
        path = self.path_of(digest)
        if not self.fs.exists(path):
            return False
        self.fs.remove(path)
        self.fs.fsync_dir(posixpath.dirname(path))
        return True

    def digests(self) -> Iterator[str]:
        for sub in self.fs.listdir(self.root):
            if len(sub) != 2:
                continue
            try:
                names = self.fs.listdir(f"{self.root}/{sub}")
            except (FileNotFoundError, NotADirectoryError):
                continue
            for n in names:
                if is_digest(n) and n[:2] == sub:
                    yield n
