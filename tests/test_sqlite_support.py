"""The shared SQLite helper (kernel_lib._support.sqlite) used by the log store, the ownership
coordinator, the result inbox and the reference index: durable open, refusal of what is not one
of ours (nothing written), the layout version, ``BEGIN IMMEDIATE`` transactions, busy → a typed
retryable error."""

from __future__ import annotations

import os
import sqlite3

import pytest

import kernel_lib._support.sqlite as sq
from kernel_lib.errors import ConfigError, InboxError, RetentionError, StoreBusyError, StoreError
from kernel_lib.log.base import FailureDomain

LAYOUT = sq.Layout(kind="test ledger", label="test ledger", version=3,
                   tables={"items": frozenset({"id", "name"})},
                   schema=sq.statements("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL);"
                                        "INSERT INTO items VALUES (1, 'seed')"),
                   application_id=0x54455354)


def _open(path, **kw):
    return sq.open_database(path, LAYOUT, error=StoreError, **kw)


class _Rows:
    def __init__(self, rows):
        self._rows = list(rows)

    def fetchone(self):
        return self._rows.pop(0) if self._rows else None


def _pragma(path, name):
    with sqlite3.connect(path) as db:
        return db.execute(f"PRAGMA {name}").fetchone()[0]


def test_a_new_file_gets_the_layout_wal_and_the_synchronous_level(tmp_path):
    p = tmp_path / "a.db"
    db = _open(p, synchronous="FULL")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA synchronous").fetchone()[0] == 2          # FULL
    assert db.execute("SELECT name FROM items").fetchall() == [("seed",)]
    db.close()
    assert (_pragma(p, "user_version"), _pragma(p, "application_id")) == (3, 0x54455354)
    again = _open(p, synchronous="OFF")                                   # reopening runs no schema
    assert again.execute("SELECT count(*) FROM items").fetchone()[0] == 1
    assert again.execute("PRAGMA synchronous").fetchone()[0] == 0
    again.close()


@pytest.mark.parametrize("case", ["directory", "garbage", "missing parent", "parent is a file"])
def test_a_path_that_cannot_hold_a_database_is_refused_and_nothing_is_written(tmp_path, case):
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"definitely not sqlite" * 50)
    (tmp_path / "plain").write_text("x")
    path = {"directory": tmp_path, "garbage": garbage, "missing parent": tmp_path / "no" / "a.db",
            "parent is a file": tmp_path / "plain" / "a.db"}[case]
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(RetentionError) as ei:
        sq.open_database(path, LAYOUT, error=RetentionError)
    assert ei.value.retryable is False and str(path) in str(ei.value)
    assert garbage.read_bytes() == b"definitely not sqlite" * 50 and sorted(os.listdir(tmp_path)) == before


def test_foreign_databases_are_refused_untouched(tmp_path):
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE customers (id INTEGER)")
    before = other.read_bytes()
    with pytest.raises(StoreError, match="not a test ledger.*refusing to touch it"):
        _open(other)
    wrong_version = tmp_path / "v9.db"
    with sqlite3.connect(wrong_version) as db:
        db.execute(f"PRAGMA application_id={LAYOUT.application_id}")   # ours, but another layout version
        db.execute("PRAGMA user_version=9")
        db.execute("CREATE TABLE items (id INTEGER, name TEXT)")
    with pytest.raises(StoreError, match="layout version 9.*reads version 3"):
        _open(wrong_version)
    other_app = tmp_path / "app.db"
    with sqlite3.connect(other_app) as db:
        db.execute("PRAGMA application_id=7")
        db.execute("PRAGMA user_version=3")
        db.execute("CREATE TABLE items (id INTEGER, name TEXT)")
    with pytest.raises(StoreError, match="application_id 0x7"):
        _open(other_app)
    assert other.read_bytes() == before and _pragma(other, "journal_mode") == "delete"
    assert _pragma(wrong_version, "journal_mode") == "delete" and _pragma(other_app, "journal_mode") == "delete"


def test_a_missing_column_is_refused(tmp_path):
    p = tmp_path / "a.db"
    with sqlite3.connect(p) as db:
        db.execute(f"PRAGMA application_id={LAYOUT.application_id}")
        db.execute("PRAGMA user_version=3")
        db.execute("CREATE TABLE items (id INTEGER)")
    with pytest.raises(StoreError, match=r"missing columns \['name'\]"):
        _open(p)


def test_read_only_open_changes_nothing_and_refuses_what_is_not_there(tmp_path):
    with pytest.raises(StoreError, match="no test ledger at .*does not exist"):
        _open(tmp_path / "absent.db", read_only=True)
    assert not (tmp_path / "absent.db").exists()
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    with pytest.raises(StoreError, match="empty SQLite database, not a test ledger"):
        _open(empty, read_only=True)
    p = tmp_path / "a.db"
    _open(p).close()
    names = sorted(os.listdir(tmp_path))
    ro = _open(p, read_only=True, immutable=True)
    assert ro.execute("SELECT name FROM items").fetchall() == [("seed",)]
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        ro.execute("INSERT INTO items VALUES (2, 'x')")
    ro.close()
    assert sorted(os.listdir(tmp_path)) == names                         # no -wal / -shm created


def test_write_transaction_commits_rolls_back_and_turns_busy_into_a_retryable_error(tmp_path):
    p = tmp_path / "a.db"
    db = _open(p, busy_timeout_s=0.05)
    with sq.write_transaction(db, "test") as tx:
        tx.execute("INSERT INTO items VALUES (2, 'two')")
    with pytest.raises(KeyError):
        with sq.write_transaction(db, "test") as tx:
            tx.execute("INSERT INTO items VALUES (3, 'three')")
            raise KeyError("a bug in the block")
    assert not db.in_transaction and db.execute("SELECT max(id) FROM items").fetchone()[0] == 2
    other = sqlite3.connect(p, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")                                     # another process holds the write lock
    with pytest.raises(StoreBusyError, match="^append on x: .*nothing was applied, retry") as ei:
        with sq.write_transaction(db, "append on x") as tx:
            tx.execute("INSERT INTO items VALUES (4, 'four')")
    assert ei.value.retryable and isinstance(ei.value.__cause__, sqlite3.OperationalError)
    with pytest.raises(InboxError) as ei:                                # a component's own type
        with sq.write_transaction(db, "deposit", busy_error=InboxError):
            pass
    assert ei.value.retryable is True
    assert not db.in_transaction
    other.execute("ROLLBACK")
    other.close()
    with sq.write_transaction(db, "test") as tx:                        # usable again: the retry goes through
        tx.execute("INSERT INTO items VALUES (4, 'four')")
    assert db.execute("SELECT count(*) FROM items").fetchone()[0] == 3
    sq.close_quietly(db)
    sq.close_quietly(db)                                                 # closing twice is harmless
    sq.close_quietly(None)


def test_a_file_created_by_another_opener_between_the_check_and_the_write_lock_opens(tmp_path, monkeypatch):
    """Fault: two processes open a new file at once; the other one creates the layout after this
    opener read the file as empty but before it takes the write lock. Invariant: the layout is
    checked again under the lock, so the schema (here with a plain INSERT that would fail if run
    twice) is not run again and the file opens."""
    p = tmp_path / "race.db"
    real_connect = sqlite3.connect
    state = {"surveys": 0}

    class Conn:
        def __init__(self, db):
            self._db = db

        def execute(self, sql, *args):
            if sql != sq._SURVEY:
                return self._db.execute(sql, *args)
            rows = self._db.execute(sql, *args).fetchall()   # read (and its lock released) first
            state["surveys"] += 1
            if state["surveys"] == 1:                         # it said "new": the other opener wins now
                assert rows == [(0, 0, 0)]
                monkeypatch.setattr(sq.sqlite3, "connect", real_connect)
                _open(p).close()
            return _Rows(rows)

        def __getattr__(self, name):
            return getattr(self._db, name)

    monkeypatch.setattr(sq.sqlite3, "connect", lambda *a, **k: Conn(real_connect(*a, **k)))
    db = _open(p)
    assert state["surveys"] == 2                                          # looked again under the write lock
    assert db.execute("SELECT count(*) FROM items").fetchone()[0] == 1
    db.close()


def test_an_unversioned_layout_adds_what_is_missing_but_refuses_a_wrong_table(tmp_path):
    inbox_like = sq.Layout(kind="result inbox", label="inbox", version=None,
                           tables={"completions": frozenset({"a", "b"})},
                           schema=sq.statements("CREATE TABLE IF NOT EXISTS completions (a, b);"
                                                "CREATE INDEX IF NOT EXISTS by_a ON completions (a)"),
                           indexes=frozenset({"by_a"}))
    p = tmp_path / "legacy.db"
    with sqlite3.connect(p) as db:
        db.execute("CREATE TABLE completions (a, b)")                    # a file from before the index existed
    sq.open_database(p, inbox_like, error=InboxError).close()
    with sqlite3.connect(p) as db:
        assert db.execute("SELECT count(*) FROM sqlite_master WHERE name='by_a'").fetchone()[0] == 1
        assert db.execute("PRAGMA user_version").fetchone()[0] == 0       # the layout stays unversioned
    wrong = tmp_path / "wrong.db"
    with sqlite3.connect(wrong) as db:
        db.execute("CREATE TABLE completions (x)")
    with pytest.raises(InboxError, match="'completions' table that is not a result inbox's"):
        sq.open_database(wrong, inbox_like, error=InboxError)
    assert _pragma(wrong, "journal_mode") == "delete"
    mem = sq.open_database(":memory:", inbox_like, error=InboxError)
    assert mem.execute("SELECT count(*) FROM completions").fetchone()[0] == 0


def test_bad_parameters_are_config_errors(tmp_path):
    for bad in (float("nan"), -1, "5", True, float("inf")):
        with pytest.raises(ConfigError, match="busy_timeout_s"):
            sq.connect(tmp_path / "a.db", busy_timeout_s=bad)
    with pytest.raises(ConfigError, match="synchronous"):
        _open(tmp_path / "a.db", synchronous="SOMETIMES")
    db = sqlite3.connect(":memory:")
    with pytest.raises(ConfigError):
        sq.set_synchronous(db, "sometimes")
    sq.set_synchronous(db, "normal")
    assert db.execute("PRAGMA synchronous").fetchone()[0] == 1


def test_each_synchronous_level_names_a_failure_domain():
    assert tuple(sq.SYNCHRONOUS_SURVIVES) == sq.SYNCHRONOUS_LEVELS
    survives = [FailureDomain.parse(v) for v in sq.SYNCHRONOUS_SURVIVES.values()]
    assert survives == sorted(survives) and FailureDomain.VOLUME_LOSS not in survives
    assert sq.SYNCHRONOUS_SURVIVES["FULL"] == FailureDomain.HOST_CRASH.label
