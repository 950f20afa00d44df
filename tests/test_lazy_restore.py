"""Lazy table rows on restore (§11.4.1): a checkpoint's record is usable before every row is built.

Fault model: a replacement worker restores a long trajectory and folds the log suffix; a
snapshot may have been written by an older build (``record-snapshot/2``, attempts in a table of
their own; ``record-snapshot/3``, rows that must be parsed past), or hold a row that does not
fit its table (bytes that hash correctly but were written wrongly). The fault cases run on both
formats whose rows stay stored (3 and 4); format 4's own offset table is covered in
tests/test_record_snapshot_v4.py. Invariant: the lazily restored record equals the fold in every value, type
and order, before and after more events are folded into it, and copies of it behave as copies;
a bad row is refused with an UnrecoverableStateError naming the snapshot, at the latest when it
is first read, and at restore time when every row is asked for. Goal: a restore pays for the
rows the suffix touches, not for every row of the trajectory (``bench restore``).
"""

from __future__ import annotations

import copy
import pickle

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kernel_lib.checkpoint.capture as capture_mod
import kernel_lib.checkpoint.state as S
from kernel_lib.bench.restore import TRAJECTORY, make_events
from kernel_lib.checkpoint import Checkpointer, MemoryBlobStore
from kernel_lib.checkpoint.manifest import CheckpointManifest
from kernel_lib.checkpoint.restore import restore
from kernel_lib.core.lazy_table import IndexedLazyTable, LazyTable
from kernel_lib.core.record import TrajectoryRecord, fold, fold_into, initial_record
from kernel_lib.errors import UnrecoverableStateError
from kernel_lib.log import MemoryStore, TrajectoryLog
from kernel_lib.log.base import AckTier
from tests.test_record_fold import record_run, steps_strategy

_SORTED = msgspec.msgpack.Encoder(order="deterministic")


def _exact(rec: TrajectoryRecord) -> bytes:
    return _SORTED.encode(rec.state_dict())


def _orders(rec: TrajectoryRecord) -> tuple:
    return (list(rec.operations), [list(o.attempts) for o in rec.operations.values()],
            list(rec.budget.reservations), list(rec.decisions), list(rec.approvals))


# --- the table itself ------------------------------------------------------------------------------


class Stored(bytes):
    """A stored row (the stand-in for msgspec.Raw): what ``build`` turns into a value."""


_ops = st.lists(st.tuples(st.sampled_from(["get", "set", "del", "in", "iter", "copy", "deepcopy", "pickle", "eq"]),
                          st.sampled_from("abcdef"), st.integers(0, 9)), max_size=25)


@settings(max_examples=200, deadline=None)
@given(initial=st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 9)), ops=_ops)
def test_a_lazy_table_behaves_as_the_dict_it_stands_for_and_builds_each_row_once_on_read(initial, ops):
    """Invariant (random sequences of mapping operations): a LazyTable over stored rows gives
    what a dict of the built values gives, in the same key order, for reads, writes, deletes,
    membership, iteration, copies and pickling; a row is built only when read, at most once."""
    built: list[str] = []

    def build(key: str, raw: Stored) -> list[int]:
        built.append(key)
        return [int(raw)]

    table = LazyTable({k: Stored(str(v).encode()) for k, v in initial.items()}, Stored, build)
    model = {k: [v] for k, v in initial.items()}
    assert len(table) == len(model) and list(table) == list(model) and not built   # nothing built yet
    for op, key, val in ops:
        if op == "get":
            assert table.get(key) == model.get(key)
            if key in model:
                assert table[key] is table[key]          # built once, then the same object
        elif op == "set":
            table[key] = model[key] = [val]
        elif op == "del" and key in model:
            del table[key], model[key]
        elif op == "in":
            assert (key in table) == (key in model)
        elif op == "iter":
            assert list(table) == list(model) and len(table) == len(model)
        elif op == "copy":
            c, mark = copy.copy(table), len(built)
            c[key] = [val]
            assert list(table) == list(model)             # the copy's writes stay in the copy
            del built[mark:]                              # (a copy builds its own rows)
        elif op == "deepcopy":
            c, mark = copy.deepcopy(table), len(built)
            assert c == model
            for v in c.values():
                v.append(99)                              # mutating the deep copy's values...
            del built[mark:]
            assert table == model                         # ...leaves the original's alone
        elif op == "pickle":
            back = pickle.loads(pickle.dumps(table))      # builds every row of the table itself
            assert type(back) is dict and back == model and list(back) == list(model)
        elif op == "eq":
            assert table == model and model == table and table == copy.copy(table)
        assert len(built) == len(set(built))              # no row built twice
    assert table.materialize() == model and list(table.materialize()) == list(model)
    assert table.pending == 0


class ListIndex:
    """A KeyIndex over a list of keys (the stand-in for a snapshot's stored id index), counting
    the calls that need every key."""

    def __init__(self, keys: list[str]) -> None:
        self._keys, self.full_reads = keys, 0

    def __len__(self) -> int:
        return len(self._keys)

    def find(self, key: str) -> int:
        return self._keys.index(key) if key in self._keys else -1

    def keys(self) -> list[str]:
        self.full_reads += 1
        return list(self._keys)


_INDEXED_OPS = ["get", "set", "del", "in", "len", "pending", "iter", "copy", "deepcopy", "pickle", "eq"]
_indexed_ops = st.lists(st.tuples(st.sampled_from(_INDEXED_OPS), st.sampled_from("abcdefgh"), st.integers(0, 9)),
                        max_size=30)


@settings(max_examples=300, deadline=None)
@given(initial=st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 9)), ops=_indexed_ops)
def test_an_indexed_lazy_table_behaves_as_the_dict_it_stands_for_and_reads_every_key_only_when_asked(initial, ops):
    """Invariant (random sequences of mapping operations, format 4's tables): an IndexedLazyTable
    over stored rows found through a key index gives what a dict of the built values gives, in
    the same key order (a deleted and re-added key at the end), for reads, writes, deletes,
    membership, length, iteration, copies and pickling; a row is built only when read, at most
    once; the index is asked for every key only by an operation that needs them all, once."""
    built: list[int] = []
    keys = list(initial)

    def build(key: str, row: int) -> list[int]:
        assert keys[row] == key
        built.append(row)
        return [initial[key]]

    index = ListIndex(keys)
    table = IndexedLazyTable(index, build)
    model = {k: [v] for k, v in initial.items()}
    whole = False                                      # has an operation needed every key yet?
    for op, key, val in ops:
        if op == "get":
            assert table.get(key) == model.get(key)
            if key in model:
                assert table[key] is table[key]
            else:
                with pytest.raises(KeyError):
                    table[key]
        elif op == "set":
            table[key] = model[key] = [val]
        elif op == "del":
            if key in model:
                del table[key], model[key]
            else:
                with pytest.raises(KeyError):
                    del table[key]
        elif op == "in":
            assert (key in table) == (key in model)
        elif op == "len":
            assert len(table) == len(model)
        elif op == "pending":
            assert 0 <= table.pending <= len(model)
        elif op == "iter":
            assert list(table) == list(model)
            whole = True
        elif op in ("copy", "deepcopy"):
            c, mark = (copy.copy if op == "copy" else copy.deepcopy)(table), len(built)
            c[key] = [val]
            assert list(table) == list(model)
            del built[mark:]
            whole = True
        elif op == "pickle":
            back = pickle.loads(pickle.dumps(table))
            assert type(back) is dict and back == model and list(back) == list(model)
            whole = True
        elif op == "eq":
            assert table == model and model == table
            whole = True
        assert index.full_reads == (1 if whole else 0)
        assert len(built) == len(set(built))
    assert table.materialize() == model and list(table.materialize()) == list(model)
    assert table.pending == 0 and index.full_reads == 1


# --- format 3 and 4 snapshots ------------------------------------------------------------------------

LAZY_FORMATS = [S.RECORD_FORMAT_NESTED, S.RECORD_FORMAT]
FORMAT_IDS = ["format-3", "format-4"]


@settings(max_examples=25, deadline=None)
@given(steps=steps_strategy, data=st.data())
def test_a_lazily_rebuilt_record_equals_the_fold_and_stays_equal_as_the_suffix_is_folded(steps, data):
    """Invariant (generated workloads): the record rebuilt from a format-3 or format-4 snapshot,
    lazily or in full, equals the fold at the snapshot's position in values, types and table
    order; folding the rest of the log into the lazy record gives the fold of the whole log,
    while the record it was deep-copied from is unchanged."""
    events, _ = record_run(steps)
    cut = data.draw(st.integers(0, len(events)))
    at = fold(initial_record("traj-h"), events[:cut])
    assert (S.RECORD_FORMAT_NESTED, S.RECORD_FORMAT) == ("kernel_lib.record-snapshot/3", "kernel_lib.record-snapshot/4")
    for fmt in LAZY_FORMATS:
        snapshot = S.encode_record_state(S.state_of(at), format=fmt)
        assert msgspec.msgpack.decode(snapshot)["format"] == fmt
        lazy = S.record_from_snapshot(snapshot, format=fmt)
        full = S.record_from_snapshot(snapshot, format=fmt, lazy=False)
        assert isinstance(lazy.operations, LazyTable) and type(full.operations) is dict
        for rec in (lazy, full, TrajectoryRecord.from_dict(S.decode_record_state(snapshot)[0])):
            assert _orders(rec) == _orders(at)
            assert rec == at and _exact(rec) == _exact(at)
        kept = copy.deepcopy(lazy)
        fold_into(lazy, events[cut:])
        whole = fold(initial_record("traj-h"), events)
        assert lazy == whole and _exact(lazy) == _exact(whole) and _orders(lazy) == _orders(whole)
        assert kept == at and S.encode_record_state(kept.state_dict(), format=fmt) == snapshot


@pytest.mark.parametrize("fmt", LAZY_FORMATS, ids=FORMAT_IDS)
def test_tables_whose_entries_differ_in_their_fields_keep_their_order_through_formats_3_and_4(fmt):
    """Situation: a state whose operations (or attempts) do not all share their fields (a hand-made
    or future state). Invariant: the snapshot stores them as values, attempts as ordered pairs,
    and decodes to the same state in the same order."""
    state = initial_record("t").state_dict()
    state["operations"] = {"z": {"kind": "tool", "attempts": {"b": {"x": 1}, "a": {"x": 2, "y": 3}}},
                           "a": {"kind": "model", "extra": True, "attempts": {}}}
    data = S.encode_record_state(state, format=fmt)
    assert "values" in msgspec.msgpack.decode(data)["tables"]["operations"]
    back, _ = S.decode_record_state(data, format=fmt)
    assert back["operations"] == state["operations"]
    assert list(back["operations"]) == ["z", "a"] and list(back["operations"]["z"]["attempts"]) == ["b", "a"]


# --- restore -----------------------------------------------------------------------------------------


def _bench_shaped_log(n: int, covered: int):
    """A log of ``n`` events of the bench's turn shape with one full checkpoint at ``covered``."""
    store, blobs = MemoryStore(), MemoryBlobStore()
    events = make_events(n)
    store.append_batch(events[:covered], AckTier.MEMORY)
    log = TrajectoryLog(store, TRAJECTORY, must_survive="none")
    rec = fold(initial_record(TRAJECTORY), store.read(TRAJECTORY))
    Checkpointer(log, blobs).capture(rec, None, kind="full")
    log.append_many([e.payload for e in events[covered:]])
    return store, blobs


def test_a_restore_builds_only_the_rows_the_suffix_touches_and_a_full_scan_builds_the_rest():
    """Situation: 3 000 events, a full checkpoint at 2 900, restore to the head. Invariant: the
    record equals the fold; after the restore most operation, reservation and decision rows are
    still stored, the suffix's own operations are built; a view that scans every operation
    (in_doubt) builds them all and answers as the fold does. ``lazy_rows=False`` builds every
    row before returning (plain dicts)."""
    store, blobs = _bench_shaped_log(3000, 2900)
    want = fold(initial_record(TRAJECTORY), store.read(TRAJECTORY))
    res = restore(store, TRAJECTORY, blobs)
    assert res.checkpoint.record_format == S.RECORD_FORMAT and res.suffix_events > 100
    ops = res.record.operations
    assert isinstance(ops, LazyTable) and len(ops) == len(want.operations)
    assert ops.pending >= 0.9 * len(ops) and res.record.budget.reservations.pending >= 0.9 * len(ops) / 2
    assert res.record.decisions.pending >= 0.9 * len(res.record.decisions)
    assert res.record.in_doubt() == want.in_doubt() and ops.pending == 0
    assert res.record == want and _exact(res.record) == _exact(want) and _orders(res.record) == _orders(want)
    assert restore(store, TRAJECTORY, blobs).record.to_dict() == want.to_dict()     # the JSON view of lazy tables
    eager = restore(store, TRAJECTORY, blobs, lazy_rows=False).record
    assert type(eager.operations) is dict and type(eager.budget.reservations) is dict and eager == want


def _rows_doc(rec: TrajectoryRecord, fmt: str) -> dict:
    """The snapshot document of ``rec`` in ``fmt``, every table's rows as a list (to be changed)."""
    doc = msgspec.msgpack.decode(S.encode_record_state(S.state_of(rec), format=fmt))
    if fmt == S.RECORD_FORMAT:
        doc["tables"] = {k: S._rows_from_bytes(t, k) for k, t in doc["tables"].items()}
    return doc


def _encoded(doc: dict, fmt: str) -> bytes:
    """A (changed) document of :func:`_rows_doc` stored as ``fmt`` stores it."""
    if fmt == S.RECORD_FORMAT:
        doc = dict(doc, tables={k: S._rows_as_bytes(t) for k, t in doc["tables"].items()})
    return msgspec.msgpack.Encoder(order="deterministic").encode(doc)


@pytest.mark.parametrize("fmt", LAZY_FORMATS, ids=FORMAT_IDS)
def test_a_row_that_does_not_fit_its_table_is_refused_when_read_or_at_once_when_every_row_is_asked_for(fmt):
    """Fault: a snapshot whose bytes are intact but one operation row and one reservation row are
    malformed (too few values; a micro-dollar figure that is not an integer). Invariant: the lazy
    record refuses each with an UnrecoverableStateError naming the snapshot when that row is
    read, the other rows still read; ``lazy=False`` refuses the snapshot at once."""
    store, blobs = _bench_shaped_log(120, 120)
    rec = fold(initial_record(TRAJECTORY), store.read(TRAJECTORY))
    doc = _rows_doc(rec, fmt)
    ops, res = doc["tables"]["operations"], doc["tables"]["reservations"]
    bad_op, good_op = ops["ids"][3], ops["ids"][4]
    ops["rows"][3] = ops["rows"][3][:2]
    res["rows"][0][res["fields"].index("amount_micro_usd")] = 1.5
    data = _encoded(doc, fmt)
    lazy = S.record_from_snapshot(data, name="snap-x", format=fmt)
    assert lazy.operations[good_op] == rec.operations[good_op]
    with pytest.raises(UnrecoverableStateError, match="snap-x") as info:
        lazy.operations[bad_op]
    assert ("record snapshot", "snap-x") in info.value.missing
    with pytest.raises(UnrecoverableStateError, match="integer"):
        lazy.budget.reservations[res["ids"][0]]
    with pytest.raises(UnrecoverableStateError, match="snap-x"):
        S.record_from_snapshot(data, name="snap-x", format=fmt, lazy=False)


def test_a_format_2_checkpoint_of_an_older_build_restores_in_full_and_its_chain_keeps_format_2(monkeypatch):
    """Situation: an older build wrote a full checkpoint in ``record-snapshot/2`` (attempts in a
    table of their own); this build continues the log. Invariant: restore gives the fold, the
    incremental checkpoint on that chain stays format 2, and a new full checkpoint is format 4."""
    store, blobs = MemoryStore(), MemoryBlobStore()
    events = make_events(400)
    store.append_batch(events[:300], AckTier.MEMORY)
    log = TrajectoryLog(store, TRAJECTORY, must_survive="none")
    rec = fold(initial_record(TRAJECTORY), store.read(TRAJECTORY))
    monkeypatch.setattr(capture_mod, "RECORD_FORMAT", S.RECORD_FORMAT_ATTEMPT_TABLE)   # the older build's writer
    old = Checkpointer(log, blobs).capture(rec, None, kind="full")
    monkeypatch.undo()
    assert msgspec.msgpack.decode(blobs.get(old.record_sha256))["tables"].keys() >= {"attempts"}
    log.append_many([e.payload for e in events[300:]])
    want = fold(initial_record(TRAJECTORY), store.read(TRAJECTORY))
    got = restore(store, TRAJECTORY, blobs).record
    assert type(got.operations) is dict and got == want and _orders(got) == _orders(want)
    ck = Checkpointer(TrajectoryLog(store, TRAJECTORY, must_survive="none"), blobs)
    inc = ck.capture(fold(initial_record(TRAJECTORY), store.read(TRAJECTORY)), None, kind="incremental")
    assert CheckpointManifest.from_bytes(blobs.get(inc.manifest_sha256)).record_format == S.RECORD_FORMAT_ATTEMPT_TABLE
    assert restore(store, TRAJECTORY, blobs).record == fold(initial_record(TRAJECTORY), store.read(TRAJECTORY))
    new = ck.capture(fold(initial_record(TRAJECTORY), store.read(TRAJECTORY)), None, kind="full")
    assert CheckpointManifest.from_bytes(blobs.get(new.manifest_sha256)).record_format == S.RECORD_FORMAT
    assert restore(store, TRAJECTORY, blobs).record == fold(initial_record(TRAJECTORY), store.read(TRAJECTORY))


def _v3_doc(n: int = 120, fmt: str = S.RECORD_FORMAT_NESTED):
    rec = fold(initial_record(TRAJECTORY), make_events(n))
    return rec, _rows_doc(rec, fmt)


def _no_attempt_fields(doc):
    t = doc["tables"]["operations"]
    at = t["fields"].index("attempts")
    t["attempt_fields"] = []
    for row in t["rows"]:
        row[at] = [[a[0]] for a in row[at]]


def _twice(table):
    def mutate(doc):
        ids = doc["tables"][table]["ids"]
        ids[1] = ids[0]
    return mutate


def _attempt_twice(doc):
    t = doc["tables"]["operations"]
    at = t["fields"].index("attempts")
    row = next(r for r in t["rows"] if r[at])
    row[at].append(list(row[at][0]))


@pytest.mark.parametrize("fmt", LAZY_FORMATS, ids=FORMAT_IDS)
@pytest.mark.parametrize("mutate", [_no_attempt_fields, _twice("operations"), _twice("reservations"),
                                    _twice("decisions"), _attempt_twice],
                         ids=["attempts-without-fields", "operation-id-twice", "reservation-id-twice",
                              "decision-id-twice", "attempt-key-twice"])
def test_a_snapshot_whose_tables_do_not_add_up_is_refused_not_read_as_fewer_or_empty_rows(mutate, fmt):
    """Fault: digest-valid bytes of a faulty writer: attempt rows holding only their key under an
    empty ``attempt_fields`` (they built Attempt objects without a field, an AttributeError on first
    use), or an id given twice in a table or in an operation's attempts (the later row silently
    replaced the earlier one: an operation, reservation, decision or attempt gone). Invariant:
    UnrecoverableStateError naming the snapshot, lazily (at the latest when the row, or in
    format 4 the whole table, is read) and eagerly, and from decode_record_state; never a record
    with fewer rows."""
    _rec, doc = _v3_doc(fmt=fmt)
    mutate(doc)
    data = _encoded(doc, fmt)
    with pytest.raises(UnrecoverableStateError, match="snap-t"):
        S.record_from_snapshot(data, name="snap-t", format=fmt, lazy=False)
    with pytest.raises(UnrecoverableStateError, match="snap-t"):
        lazy = S.record_from_snapshot(data, name="snap-t", format=fmt)
        for table in (lazy.operations, lazy.budget.reservations, lazy.decisions):
            table.materialize()
    with pytest.raises(UnrecoverableStateError, match="snap-t"):
        S.decode_record_state(data, name="snap-t", format=fmt)


@pytest.mark.parametrize("fmt", LAZY_FORMATS, ids=FORMAT_IDS)
def test_a_stored_row_that_is_not_messagepack_is_refused_when_read_naming_the_snapshot(fmt):
    """Fault: a byte inside one operation row turned into invalid UTF-8 (the lazy decode skips over
    the row, so only its first read decodes it). It reached the reader as a raw msgspec.DecodeError.
    Invariant: UnrecoverableStateError naming the snapshot and the row; the other rows still read."""
    rec, doc = _v3_doc(fmt=fmt)
    data = S.encode_record_state(S.state_of(rec), format=fmt)
    first = doc["tables"]["operations"]["ids"][0]
    kind = rec.operations[first].kind.encode()
    at = data.index(kind, data.index(b"row_bytes" if fmt == S.RECORD_FORMAT else b"rows"))
    bad = data[:at] + b"\xff" + data[at + 1:]
    lazy = S.record_from_snapshot(bad, name="snap-u", format=fmt)
    with pytest.raises(UnrecoverableStateError, match=r"snap-u.*operation") as info:
        lazy.operations[first]
    assert ("record snapshot", "snap-u") in info.value.missing
    other = doc["tables"]["operations"]["ids"][1]
    assert lazy.operations[other] == rec.operations[other]


@pytest.mark.parametrize("reader", ["record_from_snapshot", "decode_record_state", "decode_record_delta"])
def test_bytes_nested_past_the_decoders_depth_are_an_unrecoverable_state_error(reader):
    """Fault: bytes nested deeper than msgspec decodes (a RecursionError escaped every reader).
    Invariant: UnrecoverableStateError naming the object."""
    with pytest.raises(UnrecoverableStateError, match="deep-x"):
        getattr(S, reader)(b"\x91" * 100_000, name="deep-x")
