"""Compaction killed between retiring a prefix and releasing its references is finished (§11.8.3).

Fault model: the process running :func:`compact` dies (SIGKILL, or a crash injected at each step
boundary) after some of its durable steps: registering the checkpoint's references, recording
its plan, retiring the log prefix, releasing the retired events' references.

Invariant: whatever step it died after, the next :func:`compact` of the trajectory leaves the
same end state as an uninterrupted run: the prefix retired behind the checkpoint, no reference
held by a retired event, every reference of a retained event and of the checkpoint still held,
the state at every retained position unchanged; and a further run changes nothing.

Goal: a real child process is killed with SIGKILL exactly after ``retire_prefix`` returned (the
parent waits for the child's own "retired" line, then kills it); a property test injects a
crash at every step boundary. References are counted in the reference index itself.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernel_lib.checkpoint import Checkpointer, DirectoryBlobStore, restore
from kernel_lib.core.record import fold, initial_record
from kernel_lib.errors import CompactionRefusedError
from kernel_lib.log import SQLiteStore, TrajectoryLog
from kernel_lib.retention import ReferenceIndex, compact
from kernel_lib.retention.pricing import full_retention
from tests.helpers import intent, result, task

TID = "c"
T0 = 1_800_000_000.0
ROOT = Path(__file__).resolve().parents[1]


def _world(tmp: Path):
    """An SQLite log (task, steps, a checkpoint, later steps), a blob store, and a reference index
    in which every event holds one payload of its own. Returns (checkpoint capture, records at
    every position, the payload digest of each event id)."""
    store = SQLiteStore.open(tmp / "log.db", create=True)
    blobs = DirectoryBlobStore(str(tmp / "blobs"))
    index = ReferenceIndex(tmp / "refs.db")
    index.register(TID, tenant="acme", policy=full_retention(12))
    log = TrajectoryLog(store, TID, must_survive="none")
    log.append(task(ceiling=100.0))
    for i in range(6):
        log.append(intent(op=f"op{i}"))
        if i % 2:
            log.append(result(op=f"op{i}"))
    cap = Checkpointer(log, blobs).capture(fold(initial_record(TID), store.read(TID)), {"m.py": b"x = 1\n"})
    for i in range(3):
        log.append(intent(op=f"late{i}"))
    payload_of = {}
    for e in store.read(TID):
        d = blobs.put(f"observation of {e.event_id}".encode())
        index.add(d, trajectory_id=TID, holder=e.event_id, artifact_class="observations", now_unix_s=T0)
        payload_of[e.event_id] = d
    records = {p: fold(initial_record(TID), store.read(TID, 1, p)).to_dict() for p in range(store.head(TID) + 1)}
    store.close()
    index.close()
    return cap, records, payload_of


def _open(tmp: Path):
    return (SQLiteStore.open(tmp / "log.db", create=True), DirectoryBlobStore(str(tmp / "blobs")),
            ReferenceIndex(tmp / "refs.db"))


def _assert_finished(tmp: Path, cap, records, payload_of) -> dict:
    """The end state of a finished compaction; returns a snapshot of the ledger and the log mark."""
    store, blobs, index = _open(tmp)
    try:
        p = cap.covered_sequence_number
        assert store.retired_through(TID) == p - 1
        holders = {r.holder for r in index.references(trajectory_id=TID)}
        seq_of = {e.event_id: e.sequence_number for e in store.read(TID, p)}
        for eid, digest in payload_of.items():
            held = {r.holder for r in index.references(digest)}
            if eid in seq_of:                                   # retained event: its reference stays
                assert eid in held, f"retained event {eid} lost its reference"
            else:                                               # retired event: released
                assert eid not in held, f"retired event {eid} still holds {digest[:12]}"
        assert f"checkpoint:{cap.checkpoint_id}" in holders      # the checkpoint's objects stay referenced
        head = store.head(TID)
        for target in (cap.event.sequence_number, head):
            assert restore(store, TID, blobs, target=target).record.to_dict() == records[target]
        return {"refs": sorted((r.digest, r.holder) for r in index.references(trajectory_id=TID)),
                "retired_through": store.retired_through(TID), "head": head}
    finally:
        store.close()
        index.close()


_CHILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from kernel_lib.checkpoint import DirectoryBlobStore
    from kernel_lib.log import SQLiteStore
    from kernel_lib.retention import ReferenceIndex, compact

    tmp = Path(sys.argv[1])
    store = SQLiteStore.open(tmp / "log.db", create=True)
    blobs = DirectoryBlobStore(str(tmp / "blobs"))
    index = ReferenceIndex(tmp / "refs.db")
    real = store.retire_prefix

    def retire_then_wait(*a, **kw):
        out = real(*a, **kw)
        print("retired", flush=True)       # the prefix is retired, its references not yet released
        time.sleep(120)                    # the parent kills us here
        return out

    store.retire_prefix = retire_then_wait
    compact(store, blobs, index, "c", now_unix_s=1_800_000_000.0, failure_domain="host_crash")
    print("finished", flush=True)
""")


def test_compaction_killed_between_retire_and_release_is_finished_by_the_next_run(tmp_path):
    cap, records, payload_of = _world(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(tmp_path)], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline()
        assert line.strip() == "retired", child.stderr.read()
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
        child.stderr.close()
    # the fault took effect: the prefix is retired but the retired events still hold references
    store, blobs, index = _open(tmp_path)
    p = cap.covered_sequence_number
    assert store.retired_through(TID) == p - 1
    retired_events = [eid for eid in payload_of if eid not in {e.event_id for e in store.read(TID, p)}]
    assert retired_events and any(r.holder in retired_events for r in index.references(trajectory_id=TID))
    # the next run finishes the release
    rep = compact(store, blobs, index, TID, now_unix_s=T0, failure_domain="host_crash")
    assert rep.events_retired == 0 and rep.resumed_released >= len(retired_events)
    store.close()
    index.close()
    first = _assert_finished(tmp_path, cap, records, payload_of)
    # a third run changes nothing
    store, blobs, index = _open(tmp_path)
    try:
        with pytest.raises(CompactionRefusedError, match="nothing new"):
            compact(store, blobs, index, TID, now_unix_s=T0, failure_domain="host_crash")
    finally:
        store.close()
        index.close()
    assert _assert_finished(tmp_path, cap, records, payload_of) == first


class Crash(BaseException):
    """A simulated process death (not an Exception: nothing in compaction may catch it)."""


#: step boundaries: (object, method) after which the crash is injected
STEPS = [("index", "add"), ("index", "begin_compaction"), ("store", "retire_prefix"), ("index", "finish_compaction")]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(step=st.sampled_from(STEPS), nth=st.integers(1, 3))
def test_a_crash_after_any_step_is_finished_by_the_next_run(tmp_path_factory, step, nth):
    tmp = tmp_path_factory.mktemp("crash")
    cap, records, payload_of = _world(tmp)
    store, blobs, index = _open(tmp)
    target = {"index": index, "store": store}[step[0]]
    real = getattr(target, step[1], None)
    if real is None:                       # a step this build does not have (e.g. before the plan existed)
        store.close()
        index.close()
        return
    calls = {"n": 0}

    def crashing(*a, **kw):
        out = real(*a, **kw)
        calls["n"] += 1
        if calls["n"] == nth or step[1] != "add":
            raise Crash(step)
        return out

    setattr(target, step[1], crashing)
    try:
        with pytest.raises(Crash):
            compact(store, blobs, index, TID, now_unix_s=T0, failure_domain="host_crash")
    finally:
        store.close()
        index.close()
    store, blobs, index = _open(tmp)                 # the next process
    try:
        compact(store, blobs, index, TID, now_unix_s=T0, failure_domain="host_crash")
    except CompactionRefusedError:
        assert step == ("index", "finish_compaction")   # the crashed run had already finished everything
    finally:
        store.close()
        index.close()
    first = _assert_finished(tmp, cap, records, payload_of)
    store, blobs, index = _open(tmp)
    try:
        with pytest.raises(CompactionRefusedError, match="nothing new"):
            compact(store, blobs, index, TID, now_unix_s=T0, failure_domain="host_crash")
    finally:
        store.close()
        index.close()
    assert _assert_finished(tmp, cap, records, payload_of) == first
