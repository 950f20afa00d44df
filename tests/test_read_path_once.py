"""The read path does each piece of work once (§11.2.1, §11.5.2: a replacement worker opens, reads
and folds the log before it can resume).

Fault model: open + read + fold of a segment log cost more than the three measured apart, and more
than it had to: every event's bytes were hashed twice (once by open for the index, again by the
read that decoded them; the SQLite log likewise checked a row's digest, then hashed it again), and
Python's cyclic collector kept walking a heap that only grows (the index, the decoded events, the
record) without finding anything to free.

Invariants: over open and read, SHA-256 runs exactly once over each stored body, and every event
still carries the digest of its own canonical bytes (also for events appended after open, which
the index never hashed); the SQLite log hashes each row once per read. No collector pass starts
while a segment log is opened or a fold runs, and the collector is left as the caller had it,
however the fold ends. The single-pass operation status of the fold is the one the three-pass
definition gives, for every mix of attempts.

Goal: a faster read path with every check still made (frame CRC, digest, schema, credentials).
"""

from __future__ import annotations

import gc
import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib.bench.restore import TRAJECTORY, make_events
from kernel_lib.core.record import WITHHELD, Attempt, Operation, _settle_status, fold, fold_into, initial_record
from kernel_lib.errors import FoldError
from kernel_lib.log import SegmentStore, SQLiteStore


class _CountingSha256:
    """Stands in for :func:`hashlib.sha256`, counting the calls per input bytes."""

    def __init__(self) -> None:
        self.calls: dict[bytes, int] = {}
        self._real = hashlib.sha256

    def __call__(self, data: bytes = b"", **kw):
        key = bytes(data)
        self.calls[key] = self.calls.get(key, 0) + 1
        return self._real(data, **kw)


def _write_segment_log(path, events) -> None:
    store = SegmentStore.open(path, create=True)
    try:
        store.append_batch(events, "write")
    finally:
        store.close()


def test_open_and_read_of_a_segment_log_hash_each_body_once(tmp_path, monkeypatch):
    events = make_events(60, seed=3)
    path = tmp_path / "log"
    _write_segment_log(path, events[:50])
    counter = _CountingSha256()
    monkeypatch.setattr(hashlib, "sha256", counter)
    store = SegmentStore.open(path)
    try:
        store.append_batch(events[50:], "write")   # rows the index at open never hashed
        read = list(store.read(TRAJECTORY))
    finally:
        store.close()
    monkeypatch.undo()
    bodies = [e.canonical for e in events]
    assert [e.canonical for e in read] == bodies
    # each event carries the digest of its own bytes, recomputed here independently of the store
    assert [e.digest for e in read] == [hashlib.sha256(b).hexdigest() for b in bodies]
    # open hashed the 50 stored bodies once; read hashed none of them again. The 10 appended
    # events were hashed when they were created (before the counter), and once more by the read
    assert [counter.calls.get(b, 0) for b in bodies] == [1] * 60


def test_the_sqlite_log_hashes_each_row_once_per_read(tmp_path, monkeypatch):
    events = make_events(30, seed=4)
    store = SQLiteStore(tmp_path / "log.sqlite", create=True)
    try:
        store.append_batch(events, "write")
        counter = _CountingSha256()
        monkeypatch.setattr(hashlib, "sha256", counter)
        read = list(store.read(TRAJECTORY))
        monkeypatch.undo()
    finally:
        store.close()
    bodies = [e.canonical for e in events]
    assert [e.canonical for e in read] == bodies
    assert [e.digest for e in read] == [hashlib.sha256(b).hexdigest() for b in bodies]
    assert [counter.calls.get(b, 0) for b in bodies] == [1] * 30   # the check against the stored digest


class _Collections:
    """Counts the cyclic collector's passes as the collector itself reports them (gc.callbacks)."""

    def __init__(self) -> None:
        self.started = 0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self.started += 1

    def __enter__(self) -> "_Collections":
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self)


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_no_collector_pass_runs_while_a_segment_log_opens_or_a_fold_runs(tmp_path, collector_on):
    events = make_events(3000, seed=5)
    path = tmp_path / "log"
    _write_segment_log(path, events)
    # the control: the same amount of allocation outside the read path does start passes
    with _Collections() as control:
        _ = [{"n": i, "s": [i]} for i in range(30_000)]
    assert control.started > 10
    # at most the one pass the collector owes once it is enabled again (it may fall inside)
    with _Collections() as during_open:
        store = SegmentStore.open(path, read_only=True)
    assert during_open.started <= 1
    try:
        with _Collections() as during_fold:
            rec = fold(initial_record(TRAJECTORY), store.read(TRAJECTORY))   # the reads run inside the fold
    finally:
        store.close()
    assert during_fold.started <= 1
    assert rec.last_sequence_number == 3000
    assert gc.isenabled()


def test_the_collector_is_left_as_the_caller_had_it(collector_on):
    events = make_events(40, seed=6)
    with pytest.raises(FoldError):
        fold(initial_record("another_trajectory"), events)
    assert gc.isenabled()
    with pytest.raises(FoldError):
        fold_into(initial_record("another_trajectory"), events)
    assert gc.isenabled()
    gc.disable()   # a caller that keeps the collector off finds it off afterwards
    fold(initial_record(TRAJECTORY), events)
    assert not gc.isenabled()


def _settle_reference(op: Operation) -> None:
    """The three-pass definition the fold used before (Attempt's own properties)."""
    if any(a.established for a in op.attempts.values()):
        op.status = "established"
    elif any(a.in_doubt for a in op.attempts.values()) or op.intent_missing:
        op.status = "in_doubt"
    elif any(a.withheld for a in op.attempts.values()):
        op.status = WITHHELD


_attempts = st.lists(st.tuples(st.sampled_from([None, 3, 7]), st.sampled_from([None, WITHHELD, "completed", "failed"]),
                               st.booleans()), max_size=4)


@settings(max_examples=300, deadline=None)
@given(attempts=_attempts, intent_missing=st.booleans(),
       status=st.sampled_from(["proposed", "authorized", "denied", "in_doubt", "established"]))
def test_the_single_pass_status_is_the_three_pass_one(attempts, intent_missing, status):
    ops = []
    for _ in range(2):
        op = Operation(operation_id="op", kind="tool", status=status, intent_missing=intent_missing)
        for i, (intent, last, established) in enumerate(attempts):
            op.attempts[f"a{i}"] = Attempt(attempt_id=f"a{i}", intent_sequence=intent, last_result_status=last,
                                           established=established)
        ops.append(op)
    _settle_status(ops[0])
    _settle_reference(ops[1])
    assert ops[0].status == ops[1].status


def test_a_segment_read_pauses_the_collector_per_run_and_decodes_only_a_short_run_ahead(tmp_path, collector_on,
                                                                                  monkeypatch):
    """``list(store.read(t))`` (what resume does) runs at most one collector pass per run of decodes; a
    caller that takes only the first event still pays for a few decodes, not for the whole log."""
    import kernel_lib.log.segment as segment_mod

    events = make_events(3000, seed=7)
    path = tmp_path / "log"
    _write_segment_log(path, events)
    store = SegmentStore.open(path, read_only=True)
    try:
        with _Collections() as during_read:
            read = list(store.read(TRAJECTORY))
        runs, done, run = 0, 0, 16   # the runs SegmentStore.read documents: 16 events, doubling up to 1024
        while done < len(events):
            runs, done, run = runs + 1, done + run, min(2 * run, 1024)
        # at most the pass the collector owes after each run (before: one per 700 allocations)
        assert runs == 8 and during_read.started <= runs
        assert [e.canonical for e in read] == [e.canonical for e in events]
        decoded = []
        real = segment_mod.decode_stored

        def counting(body, **kw):
            decoded.append(body)
            return real(body, **kw)
        monkeypatch.setattr(segment_mod, "decode_stored", counting)
        first = next(store.read(TRAJECTORY))
        assert first.sequence_number == 1 and 1 <= len(decoded) <= 16
    finally:
        store.close()
    assert gc.isenabled()


def test_a_refused_event_is_raised_at_its_place_after_the_events_before_it(tmp_path, monkeypatch):
    """A body the decoder refuses (here the 20th, and then the 3rd) stops the read exactly there:
    every event before it is yielded first, the typed error comes next, nothing after it."""
    import kernel_lib.log.segment as segment_mod
    from kernel_lib.errors import MalformedEventError

    events = make_events(60, seed=8)
    path = tmp_path / "log"
    _write_segment_log(path, events)
    real = segment_mod.decode_stored
    for bad in (20, 3):
        def refusing(body, _bad=events[bad - 1].canonical, **kw):
            if body == _bad:
                raise MalformedEventError("refused for the test")
            return real(body, **kw)
        monkeypatch.setattr(segment_mod, "decode_stored", refusing)
        store = SegmentStore.open(path, read_only=True)
        try:
            got = []
            with pytest.raises(MalformedEventError, match="refused for the test"):
                for ev in store.read(TRAJECTORY):
                    got.append(ev.sequence_number)
            assert got == list(range(1, bad))
        finally:
            store.close()
