"""Crash-state exploration of payload-before-reference ordering (§11.8.2).

The claim under test: *in every state a crash can leave behind, each event of the surviving log
names payload bytes that are present and intact*, and every acknowledged event survived.

Method (the one :mod:`kernel_lib.verify.log_workload` and :mod:`kernel_lib.verify.checkpoint_workload` use):

1. **Record.** A workload appends ``turns`` ``ContextBuilt`` events to a
   :class:`~kernel_lib.log.segment.SegmentStore` (``/log``), each naming its delivered input by
   digest, with the bytes in a :class:`~kernel_lib.checkpoint.DirectoryBlobStore`
   (``/payloads``); both run over one :class:`~kernel_lib.log.fs.RecordingFileSystem`, which
   records every write and barrier. ``order="payload-first"`` goes through
   :meth:`PayloadStore.log_with_payloads <kernel_lib.retention.PayloadStore.log_with_payloads>`;
   ``order="reference-first"`` appends the event and writes the bytes afterwards (the ordering
   §11.8.2 warns about), so the method can be seen to find the violation.
2. **Crash states.** :func:`kernel_lib.verify.log_workload.crash_states`: a crash after every file
   operation, as a process crash, a host crash (unsynced writes lost), out-of-order subsets and
   torn writes.
3. **Check** each distinct state in a fresh memory file system: the log reopens; every
   acknowledged event is in it; every event's payload digest is stored with the right bytes.

Entry point: :func:`explore`.
"""

from __future__ import annotations

import random
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kernel_lib.checkpoint.blobs import DirectoryBlobStore, sha256_hex
from kernel_lib.verify.log_workload import _FILE_OPS, crash_states, materialize, state_key
from kernel_lib.errors import ConfigError, CorruptLogError
from kernel_lib.core.events import ContextBuilt, TaskStarted
from kernel_lib.log.fs import FileSystem, MemoryFileSystem, Op, RecordingFileSystem
from kernel_lib.log.segment import SegmentStore
from kernel_lib.log.trajectory import TrajectoryLog
from kernel_lib.retention.pricing import full_retention
from kernel_lib.retention.payloads import PayloadStore
from kernel_lib.retention.references import ReferenceIndex

LOG_DIR = "/log"
BLOB_DIR = "/payloads"
TRAJECTORY = "traj_payload_crash"
ORDERS = ("payload-first", "reference-first")


def _context(digest: str, turn: int) -> ContextBuilt:
    return ContextBuilt(invocation_id=f"inv{turn}", model="m", delivered_input_ref=digest,
                        delivered_input_sha256=digest)


def record_workload(order: str, turns: int, seed: int) -> list[Op]:
    """Run the workload on a recording file system; return its operations."""
    fs = RecordingFileSystem(MemoryFileSystem())
    fs.makedirs(LOG_DIR)
    rng = random.Random(seed)
    store = SegmentStore.open(LOG_DIR, fs=fs)
    with tempfile.TemporaryDirectory(prefix="payload-crash-") as tmp:
        index = ReferenceIndex(Path(tmp) / "refs.db")
        try:
            index.register(TRAJECTORY, tenant="lab", policy=full_retention(12))
            blobs = DirectoryBlobStore(BLOB_DIR, fs=fs)
            payloads = PayloadStore(blobs, index)
            log = TrajectoryLog(store, TRAJECTORY, must_survive="host_crash")
            first = log.append(TaskStarted(task_id="t", requester="lab", objective="payload ordering",
                                           grant_ids=["g"], budget_ceiling_usd=1.0, finalization_reserve_usd=0.1))
            fs.mark_ack([first.event_id], log.tier)
            for turn in range(1, turns + 1):
                data = (f"turn {turn} prompt " + " ".join(str(rng.random()) for _ in range(40))).encode()
                if order == "payload-first":
                    ev = payloads.log_with_payloads(log, lambda refs, t=turn: _context(refs["in"].digest, t),
                                                    {"in": (data, "observations", "text/plain")})
                else:
                    ev = log.append(_context(sha256_hex(data), turn))
                    blobs.put(data)
                fs.mark_ack([ev.event_id], log.tier)
        finally:
            index.close()
            store.close()
    return fs.ops


def _check(mem: FileSystem, acked: list[str]) -> list[str]:
    try:
        store = SegmentStore.open(LOG_DIR, fs=mem)
    except CorruptLogError as exc:
        return [f"the log reports corruption after the crash: {exc}"]
    problems: list[str] = []
    try:
        events = list(store.read(TRAJECTORY))
        ids = {e.event_id for e in events}
        problems += [f"acknowledged event {a} is not in the surviving log" for a in acked if a not in ids]
        blobs = DirectoryBlobStore(BLOB_DIR, fs=mem) if mem.exists(BLOB_DIR) else None
        for e in events:
            if isinstance(e.payload, ContextBuilt):
                d = e.payload.delivered_input_ref
                if blobs is None or not blobs.has(d):
                    problems.append(f"event #{e.sequence_number} names payload {d[:12]}… whose bytes are not stored")
    finally:
        store.close()
    return problems


@dataclass
class PayloadCrashReport:
    """Result of :func:`explore`: file ``ops`` recorded, ``states_explored`` distinct crash
    states checked (``by_kind``), ``violations`` and their first 50 ``violation_details``."""

    order: str
    turns: int
    seed: int
    ops: int = 0
    states_generated: int = 0
    states_explored: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    violations: int = 0
    violation_details: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def explore(order: str = "payload-first", *, turns: int = 3, seed: int = 0,
            progress: Callable[[int, int], None] | None = None) -> PayloadCrashReport:
    """Record the workload in ``order``, build every crash state and check each.

    Raises:
        ConfigError: unknown ``order``, or ``turns`` not an int in 1..50.
    """
    if order not in ORDERS:
        raise ConfigError(f"order must be one of {', '.join(ORDERS)}, got {order!r}")
    if type(turns) is not int or not 1 <= turns <= 50:
        raise ConfigError(f"turns must be an int from 1 to 50, got {turns!r}")
    t0 = time.perf_counter()
    ops = record_workload(order, turns, seed)
    rep = PayloadCrashReport(order, turns, seed, ops=sum(op.kind in _FILE_OPS for op in ops))
    states = crash_states(ops, seed, f"payload-{order}")
    rep.states_generated = len(states)
    seen: set[bytes] = set()
    for i, st in enumerate(states):
        mem = materialize(ops, st, seed)
        acked = [s for op in ops[:st.crash_after] if op.kind == "ack" for s in op.subjects]
        key = state_key(mem, acked)
        if key in seen:
            continue
        seen.add(key)
        rep.states_explored += 1
        rep.by_kind[st.kind] = rep.by_kind.get(st.kind, 0) + 1
        problems = _check(mem, acked)
        if problems:
            rep.violations += 1
            if len(rep.violation_details) < 50:
                op = ops[st.crash_after - 1] if st.crash_after else None
                rep.violation_details.append({"crash_after_ops": st.crash_after, "state": st.kind,
                                              "last_op": f"{op.kind} {op.path}".strip() if op else "none",
                                              "problems": problems})
        if progress is not None:
            progress(i + 1, len(states))
    rep.seconds = time.perf_counter() - t0
    return rep
