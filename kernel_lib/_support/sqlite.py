"""One SQLite policy for kernel_lib's embedded databases (stdlib only).

Four components keep their state in an SQLite file of their own: the log store
(:mod:`kernel_lib.log.sqlite`), the ownership coordinator (:mod:`kernel_lib.ownership.leases`),
the result inbox (:mod:`kernel_lib.gate.inbox`) and the reference index
(:mod:`kernel_lib.retention.references`). They open, version, lock and fail the same way, through
this module:

* :func:`open_database` refuses a path that cannot be one of them before SQLite touches it (a
  directory, a missing parent directory, a file whose first bytes are not the SQLite header),
  connects (read-write, or read-only through a ``file:...?mode=ro`` URI that writes nothing),
  checks the file's layout (:class:`Layout`: its ``PRAGMA user_version``, optionally its
  ``PRAGMA application_id``, and the columns of its tables) *before* anything is written, so a
  foreign database is refused and left byte for byte as it was, then switches the journal mode
  (WAL by default), sets the ``synchronous`` level and creates the schema of a new file inside
  a ``BEGIN IMMEDIATE`` transaction (checking the layout again under the write lock, because a
  second process may have created it first).
* :func:`write_transaction` is ``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on any exception):
  the write lock is taken first, so what the body reads is still true when it commits. A lock
  held by another connection past the busy timeout (SQLITE_BUSY / SQLITE_LOCKED) becomes a typed,
  retryable error, :class:`~kernel_lib.errors.StoreBusyError` unless the component names its own:
  nothing of the transaction was applied and the connection stays usable.
  :func:`read_transaction` is the same with a deferred ``BEGIN`` (one snapshot for several reads).
* :func:`close_quietly` closes a connection whatever state it is in.

The ``synchronous`` level decides which failures a commit that has returned survives. In WAL
mode (the failure-domain names are those of :class:`kernel_lib.log.base.FailureDomain`, §11.3.1):

==========  ==========================================================  ===================
level       what a commit has done when it returns                      survives
==========  ==========================================================  ===================
``OFF``     handed its WAL frames to the kernel (``write()``), no sync  ``process_crash``
``NORMAL``  the same; the WAL is synced only before a checkpoint        ``process_crash``
``FULL``    synced the WAL (``fsync``)                                  ``host_crash``
``EXTRA``   as ``FULL`` (the extra directory sync is for rollback-      ``host_crash``
            journal modes only)
==========  ==========================================================  ===================

After a power loss or host crash, ``NORMAL`` keeps the database consistent but may lose the
latest commits; ``OFF`` may lose them and, with no sync ordering at all, can leave the file
damaged. No level survives ``volume_loss``: that needs a copy on another volume.
:data:`SYNCHRONOUS_SURVIVES` holds the last column.
"""

from __future__ import annotations

import contextlib
import math
import os
import sqlite3
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ContextManager

from kernel_lib.errors import ConfigError, StoreBusyError

__all__ = [
    "SQLITE_HEADER",
    "SYNCHRONOUS_LEVELS",
    "SYNCHRONOUS_SURVIVES",
    "Layout",
    "check_layout",
    "check_path",
    "close_quietly",
    "connect",
    "is_busy",
    "is_corrupt",
    "open_database",
    "read_transaction",
    "set_synchronous",
    "statements",
    "write_transaction",
]

#: The first 16 bytes of every SQLite 3 database file.
SQLITE_HEADER = b"SQLite format 3\x00"

#: ``PRAGMA synchronous`` levels, weakest first.
SYNCHRONOUS_LEVELS = ("OFF", "NORMAL", "FULL", "EXTRA")

#: The strongest failure domain (a :class:`kernel_lib.log.base.FailureDomain` label) that a commit
#: returned at each ``synchronous`` level survives, in WAL mode (module docstring).
SYNCHRONOUS_SURVIVES = {"OFF": "process_crash", "NORMAL": "process_crash", "FULL": "host_crash",
                        "EXTRA": "host_crash"}

#: The component's error class (a :class:`kernel_lib.errors.KernelException`): called as
#: ``error(message)`` for a failure, ``error(message, retryable=False)`` for a refusal that no
#: retry can clear (the file is not one of ours), ``busy_error(message, retryable=True)`` for a lock.
ErrorFactory = Callable[..., BaseException]


def is_busy(exc: BaseException) -> bool:
    """True for SQLITE_BUSY / SQLITE_LOCKED (and their extended codes): another connection holds
    a lock this one waited for past its busy timeout."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    name = getattr(exc, "sqlite_errorname", None)
    if name:
        return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED"))
    return str(exc).startswith(("database is locked", "database table is locked"))


def is_corrupt(exc: BaseException) -> bool:
    """True for SQLITE_CORRUPT / SQLITE_NOTADB: the file's bytes are damaged or not a database."""
    name = getattr(exc, "sqlite_errorname", None) or ""
    return name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB"))


def statements(script: str) -> tuple[str, ...]:
    """The statements of a ``;``-separated SQL script without string literals holding ``;``
    (``executescript`` would commit an open transaction, so schemas run statement by statement)."""
    return tuple(s.strip() for s in script.split(";") if s.strip())


def _refused(error: ErrorFactory, message: str) -> BaseException:
    """``error`` for a file that is not (and will not become) one of ours: not retryable."""
    return error(message, retryable=False)


def _busy_timeout(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ConfigError(f"busy_timeout_s must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


def _is_memory(path: str) -> bool:
    return path == ":memory:"


# --- paths and connections ------------------------------------------------------------------------


def check_path(path: str | os.PathLike, *, label: str, error: ErrorFactory, must_exist: bool = False) -> None:
    """Refuse a path that cannot hold an SQLite database, before SQLite opens (or creates) it.

    Args:
        path: the database file (``":memory:"`` passes).
        label: how messages name the file, e.g. ``"SQLite log"``.
        error: the exception type raised (the component's own, e.g. StoreError).
        must_exist: a missing file is refused too (a read-only open, a reader that must not create).

    Raises:
        ``error``: the path is empty, is a directory or another non-regular file, lies in a
        directory that does not exist, does not exist while ``must_exist``, or names a file whose
        first bytes are not the SQLite header (nothing is written to it).
    """
    text = os.fspath(path)
    if _is_memory(text):
        return
    if not text:
        raise _refused(error, f"{label}: the path is empty")
    if os.path.isdir(text):
        raise _refused(error, f"{label} {text} is a directory, not an SQLite file")
    if not os.path.exists(text):
        if must_exist:
            raise _refused(error, f"no {label} at {text}: the file does not exist")
        parent = os.path.dirname(os.path.abspath(text))
        if not os.path.isdir(parent):
            raise _refused(error, f"{label} {text}: its directory {parent} does not exist")
        return
    if not os.path.isfile(text):
        raise _refused(error, f"{label} {text} is not a regular file, so not an SQLite database")
    try:
        with open(text, "rb") as f:
            head = f.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise error(f"cannot open {label} {text}: {exc}") from exc
    if not SQLITE_HEADER.startswith(head):   # an empty (or still being created) file is SQLite's to judge
        raise _refused(error, f"{label} {text} is not an SQLite database (it does not start with the SQLite "
                              "header); refusing to touch it")


def connect(path: str | os.PathLike, *, busy_timeout_s: float = 5.0, read_only: bool = False,
            immutable: bool = False) -> sqlite3.Connection:
    """A connection in autocommit mode (``isolation_level=None``: transactions are explicit),
    usable from any thread (callers serialise it with their own lock).

    Args:
        path: the database file, or ``":memory:"``.
        busy_timeout_s: how long a statement waits for another connection's lock (seconds, >= 0).
        read_only: connect through a ``file:...?mode=ro`` URI: nothing on disk can change through
            it and no write permission is needed.
        immutable: with ``read_only``, add ``immutable=1``: SQLite then takes no locks and creates
            no ``-wal``/``-shm`` file, trusting the file not to change while it is open (the
            caller must reconnect when it might have).

    Raises:
        ConfigError: a bad ``busy_timeout_s``. ``sqlite3.Error`` as raised by SQLite (callers
        map it to their own type; :func:`open_database` does).
    """
    timeout = _busy_timeout(busy_timeout_s)
    if read_only:
        # the path's bytes, percent-encoded: a name that is not UTF-8 opens too (quote() of the str fails on it)
        uri = "file:" + urllib.parse.quote(os.fsencode(Path(path).resolve())) + "?mode=ro"
        if immutable:
            uri += "&immutable=1"
        return sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False, timeout=timeout)
    return sqlite3.connect(os.fspath(path), isolation_level=None, check_same_thread=False, timeout=timeout)


def set_synchronous(db: sqlite3.Connection, level: str) -> None:
    """Set ``PRAGMA synchronous`` to one of :data:`SYNCHRONOUS_LEVELS` (see the module docstring
    for what each survives). Raises ConfigError for another level."""
    mode = level.upper() if isinstance(level, str) else level
    if mode not in SYNCHRONOUS_LEVELS:
        raise ConfigError(f"synchronous must be one of {', '.join(SYNCHRONOUS_LEVELS)}, got {level!r}")
    db.execute(f"PRAGMA synchronous={mode}")


def close_quietly(db: sqlite3.Connection | None) -> None:
    """Close ``db`` (None passes), ignoring any error: used on paths that are already failing."""
    if db is not None:
        with contextlib.suppress(Exception):
            db.close()


# --- layouts ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """The on-disk layout of one kind of kernel_lib database.

    Fields:
        kind: what the file must be, for messages (``"kernel_lib log"``: "... not a kernel_lib log").
        label: how messages name the file (``"SQLite log"``: "cannot open SQLite log PATH").
        version: the ``PRAGMA user_version`` this build writes and reads; None for a layout that
            predates versioning (the result inbox): its files are recognised by their tables
            alone, and missing tables are created in any file.
        tables: table name -> the columns it must have (more are allowed).
        schema: the statements creating the layout (``CREATE ... IF NOT EXISTS``), run in one
            ``BEGIN IMMEDIATE`` transaction when the file is new (see :func:`statements`).
        application_id: ``PRAGMA application_id`` stamped on creation and then required
            (0: none, the file is recognised by its version and tables).
        indexes: index names a file of an unversioned layout must have (else the schema runs).
    """

    kind: str
    label: str
    version: int | None
    tables: Mapping[str, frozenset[str]]
    schema: tuple[str, ...]
    application_id: int = 0
    indexes: frozenset[str] = field(default_factory=frozenset)


#: One statement, so one snapshot: (objects in the schema, user_version, application_id).
_SURVEY = ("SELECT (SELECT count(*) FROM sqlite_master), (SELECT user_version FROM pragma_user_version), "
           "(SELECT application_id FROM pragma_application_id)")


def check_layout(db: sqlite3.Connection, layout: Layout, *, path: str | os.PathLike,
                 error: ErrorFactory) -> bool:
    """Check, reading only, that ``db`` holds ``layout``. Returns True if the schema must still be
    created (a new, empty file; for an unversioned layout: a table or index is missing).

    The object count, ``user_version`` and ``application_id`` are read by one statement, so from
    one snapshot: a file another process is creating at this moment (it commits its tables,
    version and application id in one transaction) reads as new or as complete, never as a
    foreign database with tables and no version. Table names and columns are read afterwards,
    from a state at least as new.

    Raises:
        ``error``: the file is another application's database (objects but no such version or
        application id), another layout version, or lacks a table or column of the layout.
        ``sqlite3.Error`` from SQLite (e.g. the file is damaged).
    """
    objects, version, app = db.execute(_SURVEY).fetchone()
    if not layout.application_id:
        app = 0
    names = {r[0]: r[1] for r in db.execute("SELECT name, type FROM sqlite_master WHERE type IN ('table', 'index')")}
    tables = sorted(n for n, t in names.items() if t == "table")
    kind = layout.kind
    if layout.version is not None:
        if objects == 0 and version == 0 and app == 0:
            return True
        if layout.application_id and app != layout.application_id:
            raise _refused(error, f"{path} is an SQLite database but not a {kind} (application_id {app:#x}, "
                                  f"tables {tables[:5]}); refusing to touch it")
        if version == 0:
            raise _refused(error, f"{path} is an SQLite database but not a {kind} (it holds tables {tables[:5]} "
                                  f"and no {kind} layout version); refusing to touch it")
        if version != layout.version:
            raise _refused(error, f"{path} is a {kind} of layout version {version} (or another application's "
                                  f"database); this build reads version {layout.version}")
    for table, cols in layout.tables.items():
        if names.get(table) != "table":
            if layout.version is None:
                continue
            raise _refused(error, f"{path} has user_version {version} but no {kind} {table!r} table: not a "
                                  f"{kind}; refusing to touch it")
        have = {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
        if not cols <= have:
            raise _refused(error, f"{path} holds a {table!r} table that is not a {kind}'s (missing columns "
                              f"{sorted(cols - have)}); refusing to touch it")
    if layout.version is None:
        return (any(names.get(t) != "table" for t in layout.tables)
                or any(names.get(i) != "index" for i in layout.indexes))
    return False


def _create(db: sqlite3.Connection, layout: Layout, *, path: str, error: ErrorFactory) -> None:
    """Create the layout in one ``BEGIN IMMEDIATE`` transaction, unless another connection did
    it first (the layout is checked again under the write lock)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        if check_layout(db, layout, path=path, error=error):
            for stmt in layout.schema:
                db.execute(stmt)
            if layout.application_id:
                db.execute(f"PRAGMA application_id={int(layout.application_id)}")
            if layout.version is not None:
                db.execute(f"PRAGMA user_version={int(layout.version)}")
        db.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            if db.in_transaction:
                db.execute("ROLLBACK")
        raise


def open_database(path: str | os.PathLike, layout: Layout, *, error: ErrorFactory,
                  busy_error: ErrorFactory = StoreBusyError, busy_timeout_s: float = 5.0,
                  journal_mode: str | None = "WAL", synchronous: str | None = "FULL",
                  read_only: bool = False, immutable: bool = False, create: bool = True) -> sqlite3.Connection:
    """Open one of kernel_lib's SQLite databases durably (module docstring).

    Steps: :func:`check_path`; :func:`connect`; :func:`check_layout` (nothing written yet); for a
    read-write open, ``PRAGMA journal_mode`` (skipped for ``":memory:"``), ``PRAGMA synchronous``,
    and the schema of a new file. A read-only open runs no PRAGMA write and no schema.

    Args:
        path: the database file (``":memory:"`` for a throwaway one).
        layout: what the file must hold.
        error: the component's error type, raised for everything but a busy lock.
        busy_error: raised when another connection holds a lock past ``busy_timeout_s``.
        busy_timeout_s: seconds a statement waits for another connection's lock (>= 0).
        journal_mode: e.g. ``"WAL"`` (readers never wait for the writer); None leaves it.
        synchronous: one of :data:`SYNCHRONOUS_LEVELS` (what a commit survives), or None to
            leave SQLite's default (a component that sets it per transaction).
        read_only: connect with ``mode=ro``; the file must exist and hold the layout.
        immutable: with ``read_only``, add ``immutable=1`` (see :func:`connect`).
        create: with False, a missing file is refused instead of created.

    Returns:
        The connection (autocommit; see :func:`connect`).

    Raises:
        ``error``: the path or file is refused (:func:`check_path`, :func:`check_layout`), a
        read-only file is an empty database, or SQLite failed to open it.
        ``busy_error``: the file was locked past the timeout (retry).
        ConfigError: a bad ``busy_timeout_s`` or ``synchronous``.
    """
    text = os.fspath(path)
    label = layout.label
    check_path(text, label=label, error=error, must_exist=read_only or not create)
    timeout = _busy_timeout(busy_timeout_s)
    if synchronous is not None and (not isinstance(synchronous, str) or synchronous.upper() not in SYNCHRONOUS_LEVELS):
        raise ConfigError(f"synchronous must be one of {', '.join(SYNCHRONOUS_LEVELS)}, got {synchronous!r}")
    db = None
    try:
        db = connect(text, busy_timeout_s=timeout, read_only=read_only, immutable=immutable)
        fresh = check_layout(db, layout, path=text, error=error)   # before anything is written
        if read_only:
            if fresh:
                raise _refused(error, f"{text} is an empty SQLite database, not a {layout.kind}")
            return db
        if journal_mode is not None and not _is_memory(text):
            db.execute(f"PRAGMA journal_mode={journal_mode}")
        if synchronous is not None:
            set_synchronous(db, synchronous)
        if fresh:
            _create(db, layout, path=text, error=error)
        return db
    except sqlite3.Error as exc:
        close_quietly(db)
        if is_busy(exc):
            raise busy_error(f"cannot open {label} {text}: {exc} (another connection holds its lock; "
                             "retry)", retryable=True) from exc
        raise error(f"cannot open {label} {text}: {exc}") from exc
    except BaseException:
        close_quietly(db)
        raise


# --- transactions -------------------------------------------------------------------------------------


@contextlib.contextmanager
def _transaction(db: sqlite3.Connection, begin: str, label: str,
                 busy_error: ErrorFactory) -> Iterator[sqlite3.Connection]:
    try:
        db.execute(begin)
        yield db
        db.execute("COMMIT")
    except BaseException as exc:
        with contextlib.suppress(sqlite3.Error):
            if db.in_transaction:
                db.execute("ROLLBACK")
        if is_busy(exc) and not db.in_transaction:
            raise busy_error(f"{label}: {exc}: another connection holds the write lock past the busy timeout; "
                             "nothing was applied, retry", retryable=True) from exc
        raise


def write_transaction(db: sqlite3.Connection, label: str, *,
                      busy_error: ErrorFactory = StoreBusyError) -> ContextManager[sqlite3.Connection]:
    """``with write_transaction(db, "SQLite append on PATH") as db: ...``: one ``BEGIN IMMEDIATE``
    transaction, committed when the block ends, rolled back when it raises.

    ``BEGIN IMMEDIATE`` takes the database's write lock before the first read, so a decision the
    block reads and writes (a compare-and-set) cannot be overtaken by another connection or
    process. The commit survives what the connection's ``synchronous`` level survives.

    Raises:
        ``busy_error`` (default :class:`~kernel_lib.errors.StoreBusyError`): another connection
            held the lock past the busy timeout; the transaction was rolled back, nothing of it
            was applied, the connection is usable and the call may be retried. The message starts
            with ``label``.
        Anything the block raises, and any other ``sqlite3.Error``, after the rollback (when the
        rollback itself failed, ``db.in_transaction`` stays True and a busy error is re-raised
        as the ``sqlite3.Error`` it is: the connection is then not known to be clean).
    """
    return _transaction(db, "BEGIN IMMEDIATE", label, busy_error)


def read_transaction(db: sqlite3.Connection, label: str, *,
                     busy_error: ErrorFactory = StoreBusyError) -> ContextManager[sqlite3.Connection]:
    """As :func:`write_transaction` with a deferred ``BEGIN``: the reads of the block see one
    snapshot (in WAL mode without waiting for a writer)."""
    return _transaction(db, "BEGIN", label, busy_error)
