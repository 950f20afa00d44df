"""Crash-state exploration of payload-before-reference ordering (§11.8.2).

The claim under test: *in every state a crash can leave behind, each event of the surviving log
names payload bytes that are present and intact*, and every acknowledged event survived.

Method: the crash-state engine of :mod:`kernel_lib.verify.engine`, with this workload
(:class:`PayloadWorkload`):

1. **Record.** The workload appends ``turns`` ``ContextBuilt`` events to a
   :class:`~kernel_lib.log.segment.SegmentStore` (``/log``), each naming its delivered input by
   digest, with the bytes in a :class:`~kernel_lib.checkpoint.DirectoryBlobStore`
   (``/payloads``); both run over one :class:`~kernel_lib.log.fs.RecordingFileSystem`, which
   records every write and barrier. ``order="payload-first"`` goes through
   :meth:`PayloadStore.log_with_payloads <kernel_lib.retention.PayloadStore.log_with_payloads>`;
   ``order="reference-first"`` appends the event and writes the bytes afterwards (the ordering
   §11.8.2 warns about), so the method can be seen to find the violation.
2. **Crash states.** :func:`kernel_lib.verify.engine.crash_states`: a crash after every file
   operation, as a process crash, a host crash (unsynced writes lost), out-of-order subsets and
   torn writes.
3. **Check** each distinct state in a fresh memory file system: the log reopens; every
   acknowledged event is in it; every event's payload digest is stored with the right bytes.

Entry point: :func:`explore`.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Callable, Sequence

from kernel_lib.checkpoint.blobs import DirectoryBlobStore, sha256_hex
from kernel_lib.verify.engine import CrashReport, CrashWorkload, explore as explore_workloads
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


def _drive(fs: RecordingFileSystem, order: str, turns: int, seed: int) -> None:
    fs.makedirs(LOG_DIR)
    rng = random.Random(seed)
    store = SegmentStore.open(LOG_DIR, fs=fs, create=True)
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


def record_workload(order: str, turns: int, seed: int) -> list[Op]:
    """Run the workload on a recording file system; return its operations."""
    fs = RecordingFileSystem(MemoryFileSystem())
    _drive(fs, order, turns, seed)
    return fs.ops


def _check(mem: FileSystem, acked: Sequence[str]) -> list[str]:
    try:
        store = SegmentStore.open(LOG_DIR, fs=mem, create=True)
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


class PayloadWorkload(CrashWorkload):
    """The payload workload in one ``order`` over ``turns`` turns, as an engine workload named
    after the order. Promised in a crash state: every event acknowledged before it.

    Raises:
        ConfigError: unknown ``order``, or ``turns`` not an int in 1..50.
    """

    def __init__(self, order: str = "payload-first", turns: int = 3):
        if order not in ORDERS:
            raise ConfigError(f"order must be one of {', '.join(ORDERS)}, got {order!r}")
        if type(turns) is not int or not 1 <= turns <= 50:
            raise ConfigError(f"turns must be an int from 1 to 50, got {turns!r}")
        self.order, self.turns, self.name = order, turns, order
        self.description = (f"{turns} turns logged with offloaded inputs, bytes stored before the event "
                            "(§11.8.2)" if order == "payload-first" else
                            f"{turns} turns logged with the event committed before its bytes: the ordering "
                            "§11.8.2 warns about (violations expected)")

    @property
    def label(self) -> str:
        return f"payload-{self.order}"

    def record(self, fs: RecordingFileSystem, seed: int) -> None:
        _drive(fs, self.order, self.turns, seed)

    def check(self, fs: MemoryFileSystem, promised: Sequence[str]) -> list[str]:
        return _check(fs, promised)


def explore(order: str = "payload-first", *, turns: int = 3, seed: int = 0,
            progress: bool | Callable[[int, int], None] = False) -> CrashReport:
    """Record the workload in ``order``, build every crash state and check each.

    Returns:
        A :class:`~kernel_lib.verify.engine.CrashReport` with one row named ``order``: file
        ``ops`` recorded, ``states_explored`` distinct crash states checked (``by_kind``),
        ``violations`` and their first 50 ``violation_details``; ``report.order`` and
        ``report.turns`` are its parameters.

    Raises:
        ConfigError: unknown ``order``, or ``turns`` not an int in 1..50.
    """
    return explore_workloads([PayloadWorkload(order, turns)], seed=seed, progress=progress, max_details=50,
                             params={"order": order, "turns": turns})
