"""Crash-consistency workloads of the segment log (§11.3.1, table 2 and its footnote 2).

A durability claim is tested here, not assumed, by the crash-state engine
(:mod:`kernel_lib.verify.engine`: record, build every crash state, reopen, check):

1. **Record.** A built-in :class:`Workload` drives :class:`~kernel_lib.log.segment.SegmentStore`
   on the engine's recording file system through a :class:`Session`. After each
   ``append_batch`` / ``install_fence`` returns, the session adds a marker saying which events
   (or fences) were acknowledged and at which tier.
2. **Crash states**: the engine's ``process``, ``host``, ``subset`` and ``torn`` states after
   every recorded file operation (:func:`~kernel_lib.verify.engine.crash_states`). Identical
   states (same files, same promises to check) are checked once.
3. **Check** (:class:`SegmentLogWorkload`). The store is reopened on each materialized state:
   (1) open does not report corruption (a crash only ever leaves a torn tail); (2) every event
   acknowledged at FDATASYNC, and every fence, before the crash is present and byte-identical;
   in ``process`` states every WRITE acknowledgment too; (3) what each trajectory holds is a
   prefix, in order, of what was written to it; (4) the store accepts the next append (head + 1)
   at FDATASYNC and that event survives a clean reopen, which trims nothing.

Assumptions (stated, not tested): the engine's (a completed ``fdatasync`` covers every earlier
write to that file; a sector write is atomic), and the log directory exists before the crash.

Entry points: :func:`run` and the ``crashcheck`` command (:mod:`kernel_lib.cli.verify`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from kernel_lib.errors import ConfigError, CorruptLogError, KernelError
from kernel_lib.core.events import (
    Event,
    RuntimeInput,
    decode,
)
from kernel_lib.log.base import AckTier, AppendOutcome
from kernel_lib.log.fs import MemoryFileSystem, Op, RecordingFileSystem
from kernel_lib.log.segment import KIND_EVENT, SegmentStore, encode_frame, segment_name
from kernel_lib.sim.events import EventMaker
from kernel_lib.verify.engine import (
    CrashReport,
    CrashState,
    CrashWorkload,
    Verdict,
    check_max_states,
    crash_states,
    explore,
    materialize,
    state_key,
)

__all__ = [
    "DIRECTORY", "WORKLOADS", "CrashReport", "CrashState", "Recorded", "SegmentLogWorkload", "Session",
    "Workload", "crash_states", "materialize", "record", "run", "state_key",
]

DIRECTORY = "/log"
# ------------------------------------------------------------------------------------------------
# workloads
# ------------------------------------------------------------------------------------------------


class Session:
    """What a workload drives: a store on the recording file system, plus what it was promised.

    ``written[trajectory_id]`` lists the canonical bytes of every stored event in order;
    ``by_id[event_id]`` the bytes acknowledged under an id.
    """

    def __init__(self, rec: RecordingFileSystem, store_cls: type[SegmentStore], segment_bytes: int, seed: int,
                 preallocation: "Mapping[str, int] | None" = None):
        self.rec, self.store_cls, self.segment_bytes = rec, store_cls, segment_bytes
        self.preallocation = dict(preallocation or {})
        self.rng = random.Random(seed)
        self.store: SegmentStore | None = None
        self.written: dict[str, list[bytes]] = {}
        self.by_id: dict[str, bytes] = {}
        self.makers: dict[str, EventMaker] = {}

    def open(self) -> SegmentStore:
        self.store = self.store_cls.open(DIRECTORY, fs=self.rec, segment_bytes=self.segment_bytes, create=True,
                                         **self.preallocation)
        return self.store

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None

    def maker(self, trajectory_id: str) -> EventMaker:
        if trajectory_id not in self.makers:
            self.makers[trajectory_id] = EventMaker(trajectory_id, self.rng)
        return self.makers[trajectory_id]

    def new(self, trajectory_id: str, n: int = 1, *, owner_epoch: int = 0) -> list[Event]:
        """``n`` consecutive new events of one trajectory, numbered from its next sequence number."""
        m = self.maker(trajectory_id)
        return [m.make(owner_epoch=owner_epoch, sequence_number=m.next_seq + i) for i in range(n)]

    def append(self, events: Sequence[Event], tier: AckTier) -> list:
        """``append_batch`` and record which events were acknowledged (after it returned)."""
        assert self.store is not None
        outs = self.store.append_batch(events, tier)
        acked = []
        for ev, out in zip(events, outs):
            if not isinstance(out, AppendOutcome):
                continue
            acked.append(ev.event_id)
            if not out.duplicate:
                self.written.setdefault(ev.trajectory_id, []).append(ev.canonical)
                self.by_id[ev.event_id] = ev.canonical
                self.maker(ev.trajectory_id).next_seq = ev.sequence_number + 1
        self.rec.mark_ack(acked, tier)
        return outs

    def fence(self, trajectory_id: str, owner_epoch: int) -> None:
        assert self.store is not None
        self.store.install_fence(trajectory_id, owner_epoch)
        self.rec.mark_fence(trajectory_id, owner_epoch)


@dataclass(frozen=True)
class Workload:
    """A named, recorded scenario. ``body(session)`` drives the store; ``segment_bytes`` sizes it;
    ``preallocation`` holds the store's ``preallocate_bytes`` / ``preallocate_from_bytes`` when the
    workload sets them (default: the store's defaults, under which its short logs are never
    preallocated)."""

    name: str
    description: str
    segment_bytes: int
    body: Callable[[Session], None]
    preallocation: Mapping[str, int] = field(default_factory=dict)


def _wl_fdatasync_appends(s: Session) -> None:
    s.open()
    a, b = "traj-repair", "traj-support"
    for i in range(14):
        s.append(s.new(a), AckTier.FDATASYNC)
        s.append(s.new(b), AckTier.FDATASYNC)
        if i == 5:   # an ingestion retry after a lost acknowledgment: identical, no second copy
            first = s.written[a][0]
            s.append([_event_from(first)], AckTier.FDATASYNC)
    s.close()


def _event_from(canonical: bytes) -> Event:
    """The same event again, as an ingestion retry would resend it."""
    return decode(canonical)


def _wl_batches_mixed_tiers(s: Session) -> None:
    s.open()
    a, b = "traj-repair", "traj-research"
    tiers = [AckTier.WRITE, AckTier.WRITE, AckTier.FDATASYNC]
    for i in range(12):
        t = a if i % 3 != 2 else b
        batch = s.new(t, 2 + i % 4)
        if i == 4:   # one bad event in the batch: a gap; the others are still acknowledged
            batch.append(s.maker(t).make(sequence_number=s.maker(t).next_seq + 10))
        if i == 7:   # identical retry of the previous (WRITE-only) event, now asked at FDATASYNC
            batch = [_event_from(s.written[a][-1])] + batch
        if i == 9:   # one batch spanning both trajectories
            batch += s.new(b if t == a else a, 2)
        s.append(batch, tiers[i % 3])
    # an identical retry at FDATASYNC of events that were only written: must sync before acking
    s.append(s.new(a, 2), AckTier.WRITE)
    s.append([_event_from(s.written[a][-1])], AckTier.FDATASYNC)
    s.close()


def _wl_write_bursts(s: Session) -> None:
    s.open()
    trajs = ["traj-repair", "traj-support", "traj-research"]
    for r in range(4):
        for i in range(6):   # a burst of WRITE acknowledgments: up to 6 unsynced writes at once
            s.append(s.new(trajs[(r + i) % 3]), AckTier.WRITE)
        s.append(s.new(trajs[r % 3]), AckTier.FDATASYNC)   # one barrier covers the burst
    s.close()


def _wl_roll_fence_reopen(s: Session) -> None:
    s.open()
    a, b = "traj-repair", "traj-deploy"
    tiers = [AckTier.FDATASYNC, AckTier.WRITE]
    for i in range(10):
        t = a if i % 2 == 0 else b
        s.append(s.new(t, 1 + i % 3), tiers[i % 2])
        if i == 4:
            s.fence(a, 1)   # a new owner of traj-repair: later events carry owner_epoch=1
    for _ in range(3):
        s.append(s.new(a, 1, owner_epoch=1), AckTier.WRITE)
    s.close()
    # a crash left a torn record at the tail of the last segment, and a zero-filled next segment
    store_end = max(int(n[:8]) for n in s.rec.listdir(DIRECTORY) if n.endswith(".seg"))
    path = f"{DIRECTORY}/{segment_name(store_end)}"
    ghost = s.maker(b).make()
    frame = encode_frame(KIND_EVENT, ghost.canonical, (store_end, 0))
    h = s.rec.open_file(path)
    s.rec.pwrite(h, s.rec.size(path), frame[: len(frame) // 2])
    s.rec.close(h)
    h = s.rec.open_file(f"{DIRECTORY}/{segment_name(store_end + 1)}", create=True)
    s.rec.pwrite(h, 0, bytes(700))
    s.rec.close(h)
    store = s.open()
    if not store.recovery.torn_tail_trimmed:
        raise AssertionError("workload roll-fence-reopen: reopen did not trim the injected torn tail")
    epochs = {a: 1, b: 0}
    for i in range(6):
        t = a if i % 2 == 0 else b
        s.append(s.new(t, 1 + i % 2, owner_epoch=epochs[t]), tiers[i % 2])
        if i == 3:
            s.fence(b, 2)   # a new owner of traj-deploy
            epochs[b] = 2
    # the old owner of traj-deploy is rejected by the log; the new one is not
    s.append(s.new(b, 1, owner_epoch=0) + s.new(b, 1, owner_epoch=2), AckTier.FDATASYNC)
    s.close()


def _step(s: Session, t: str, i: int) -> None:
    """One durable step of a trajectory as the dispatch gate writes it (one barrier per step): the
    admission and intent batch at FDATASYNC, then the evidence of a reconcilable endpoint at WRITE,
    which the next step's barrier covers."""
    s.append(s.new(t, 3), AckTier.FDATASYNC)
    s.append(s.new(t, 1 + i % 2), AckTier.WRITE)


#: Preallocation of the ``preallocated-*`` workloads: 1 KiB of zeros ahead at most, from the first
#: record on, so that short recordings extend, roll and close preallocated segments many times.
_SMALL_PREALLOCATION = {"preallocate_bytes": 1024, "preallocate_from_bytes": 0}


def _wl_preallocated_steps(s: Session) -> None:
    s.open()
    a, b = "traj-repair", "traj-support"
    for i in range(8):
        _step(s, a if i % 3 else b, i)
    s.close()   # a clean close cuts the zeros off the last segment
    s.open()
    for i in range(4):
        _step(s, b if i % 2 else a, i)
    s.close()


def _crash(s: Session) -> None:
    """Abandon the session's store as a killed process does: no close (so its preallocated zeros
    stay), only the handle and the directory lock go, as the kernel drops them."""
    assert s.store is not None
    s.store._release_files()
    s.store = None


def _wl_preallocated_crash_tail(s: Session) -> None:
    s.open()
    a = "traj-repair"
    for i in range(5):
        _step(s, a, i)
    assert s.store is not None
    seg, end = s.store.end_position
    # a crash (no close): the last segment ends in its preallocated zeros; into them went half of a
    # record that was never acknowledged, and a garbage sector further on
    path = f"{DIRECTORY}/{segment_name(seg)}"
    ghost = encode_frame(KIND_EVENT, s.maker(a).make().canonical, (seg, end))
    _crash(s)
    h = s.rec.open_file(path)
    s.rec.pwrite(h, end, ghost[: len(ghost) // 2])
    s.rec.close(h)
    store = s.store_cls.open(DIRECTORY, fs=s.rec, segment_bytes=s.segment_bytes, create=True, **s.preallocation)
    s.store = store
    if not store.recovery.torn_tail_trimmed or store.recovery.tail_damage != "torn":
        raise AssertionError(f"workload preallocated-crash-tail: the record cut short in preallocated zeros was not "
                             f"trimmed as torn: {store.recovery.details}")
    for i in range(4):
        _step(s, a, i)
    seg, end = store.end_position
    _crash(s)   # again, this time with nothing after the log's end but zeros
    reopened = s.store_cls.open(DIRECTORY, fs=s.rec, segment_bytes=s.segment_bytes, create=True, **s.preallocation)
    s.store = reopened
    if reopened.recovery.torn_tail_found or reopened.end_position != (seg, end):
        raise AssertionError(f"workload preallocated-crash-tail: an all-zero tail was not read as the log's end: "
                             f"{reopened.recovery.details}")
    for i in range(3):
        _step(s, a, i)
    s.close()


WORKLOADS: dict[str, Workload] = {w.name: w for w in (
    Workload("fdatasync-appends",
             "single-writer appends acknowledged at FDATASYNC across two trajectories, with an "
             "identical retry", 64 * 1024 * 1024, _wl_fdatasync_appends),
    Workload("batches-mixed-tiers",
             "append_batch of 2-5 events alternating WRITE and FDATASYNC tiers, a rejected gap in a "
             "batch, identical retries that must be synced before they are acknowledged",
             64 * 1024 * 1024, _wl_batches_mixed_tiers),
    Workload("write-bursts",
             "bursts of six WRITE-tier appends over three trajectories, each closed by one FDATASYNC "
             "append, in 8 KiB segments (rolls inside a burst sync the old segment)",
             8192, _wl_write_bursts),
    Workload("roll-fence-reopen",
             "4 KiB segments rolling across several files, install_fence, then a close, an injected "
             "torn tail (half a record plus a zero-filled next segment), a reopen that trims it, and "
             "more appends and fences", 4096, _wl_roll_fence_reopen),
    Workload("preallocated-steps",
             "durable steps as the gate writes them (intent batch at FDATASYNC, evidence at WRITE) in 2 KiB "
             "segments preallocated 1 KiB at a time: extensions, rolls that cut the zeros, a clean close and a "
             "reopen", 2048, _wl_preallocated_steps, _SMALL_PREALLOCATION),
    Workload("preallocated-crash-tail",
             "steps in 4 KiB preallocated segments, then two crashes without close: half a record written into "
             "the preallocated zeros (trimmed as torn), and a bare zero tail (read as the log's end)", 4096,
             _wl_preallocated_crash_tail, _SMALL_PREALLOCATION),
)}


# ------------------------------------------------------------------------------------------------
# checking
# ------------------------------------------------------------------------------------------------


def _promises(ops: Sequence[Op], k: int,
              include_write_tier: bool) -> tuple[tuple[str, ...], tuple[tuple[str, int], ...]]:
    """The events and fences acknowledged among ``ops[:k]`` (fdatasync tier; also write if
    ``include_write_tier``), each sorted."""
    events, fences = set(), set()
    for op in ops[:k]:
        if op.kind != "ack" or (op.tier != "fdatasync" and not include_write_tier):
            continue
        for subject in op.subjects:
            if subject.startswith("fence:"):
                _, tid, epoch = subject.rsplit(":", 2)
                fences.add((tid, int(epoch)))
            else:
                events.add(subject)
    return tuple(sorted(events)), tuple(sorted(fences))


def _check(workload: Workload, written: Mapping[str, list[bytes]], by_id: Mapping[str, bytes],
           mem: MemoryFileSystem, events: Iterable[str], fences: Iterable[tuple[str, int]],
           store_cls: type[SegmentStore]) -> tuple[list[str], bool]:
    """Reopen on ``mem``; return descriptions of every violated check (empty if none) and whether
    the reopen trimmed a torn tail."""
    seg, pre = workload.segment_bytes, dict(workload.preallocation)
    try:   # create: a crash before the first op leaves no directory yet (an empty log, as before)
        store = store_cls.open(DIRECTORY, fs=mem, segment_bytes=seg, create=True, **pre)
    except CorruptLogError as exc:
        return [f"(1) open reported corruption after a crash: {exc}"], False
    except Exception as exc:  # noqa: BLE001 - any failure to reopen is a finding
        return [f"(1) open raised {type(exc).__name__}: {exc}"], False
    trimmed = store.recovery.torn_tail_trimmed
    problems: list[str] = []
    try:
        present: dict[str, bytes] = {}
        for tid in store.trajectories():
            rows = [e for e in store.read(tid)]
            got = [e.canonical for e in rows]
            want = written.get(tid, [])
            if got != want[:len(got)]:
                problems.append(f"(3) {tid}: the {len(got)} events present are not a prefix of the "
                                f"{len(want)} written")
            present.update((e.event_id, e.canonical) for e in rows)
        for eid in sorted(events):
            if eid not in present:
                problems.append(f"(2) acknowledged event {eid} is missing")
            elif present[eid] != by_id[eid]:
                problems.append(f"(2) acknowledged event {eid} differs from what was written")
        for tid, epoch in sorted(fences):
            if store.fence(tid) < epoch:
                problems.append(f"(2) acknowledged fence {tid}@{epoch} is missing (fence {store.fence(tid)})")
        # (4) the store accepts the next append, and it survives a clean reopen
        tid = sorted(written)[0]
        head = store.head(tid)
        probe = Event.create(trajectory_id=tid, event_id=f"crashcheck-probe-{tid}-{head + 1}",
                             sequence_number=head + 1, owner_epoch=store.fence(tid),
                             payload=RuntimeInput(kind="identifier", name="crashcheck_probe", value=head + 1))
        try:
            store.append(probe, AckTier.FDATASYNC)
        except KernelError as exc:
            problems.append(f"(4) append of {tid}#{head + 1} after reopen failed: {exc}")
            return problems, trimmed
        store.close()
        try:
            store = store_cls.open(DIRECTORY, fs=mem, segment_bytes=seg, **pre)
        except Exception as exc:  # noqa: BLE001
            problems.append(f"(4) clean reopen after the probe append raised {type(exc).__name__}: {exc}")
            return problems, trimmed
        last = list(store.read(tid, head + 1, head + 1))
        if store.head(tid) != head + 1 or not last or last[0].canonical != probe.canonical:
            problems.append(f"(4) probe {tid}#{head + 1} did not survive a clean reopen")
        if store.recovery.torn_tail_trimmed:
            problems.append(f"(4) a clean reopen trimmed a tail: {store.recovery.details}")
    except Exception as exc:  # noqa: BLE001
        problems.append(f"checking raised {type(exc).__name__}: {exc}")
    finally:
        store.close()
    return problems, trimmed


class SegmentLogWorkload(CrashWorkload):
    """One :class:`Workload` as an engine workload, on ``store_cls`` (a subclass of
    :class:`~kernel_lib.log.segment.SegmentStore`, e.g. a deliberately broken one).

    Promised in a crash state: every event and fence acknowledged at FDATASYNC before it, and in
    ``process`` states the WRITE acknowledgments too. Its row reports ``events_written`` and, per
    state, ``reopen_trimmed`` (the reopen trimmed a torn tail)."""

    counters = ("reopen_trimmed",)

    def __init__(self, workload: Workload, store_cls: type[SegmentStore] = SegmentStore):
        self.workload, self.store_cls = workload, store_cls
        self.name, self.description = workload.name, workload.description
        self.written: dict[str, list[bytes]] = {}
        self.by_id: dict[str, bytes] = {}

    def record(self, fs: RecordingFileSystem, seed: int) -> dict[str, int]:
        session = Session(fs, self.store_cls, self.workload.segment_bytes, seed, self.workload.preallocation)
        try:
            self.workload.body(session)
        finally:
            session.close()
        self.written, self.by_id = session.written, session.by_id
        return {"events_written": sum(len(v) for v in self.written.values())}

    def promised(self, ops: Sequence[Op], state: CrashState) -> tuple:
        return _promises(ops, state.crash_after, include_write_tier=(state.kind == "process"))

    def check(self, fs: MemoryFileSystem, promised: tuple) -> Verdict:
        events, fences = promised
        problems, trimmed = _check(self.workload, self.written, self.by_id, fs, events, fences, self.store_cls)
        return Verdict(tuple(problems), counts={"reopen_trimmed": int(trimmed)})


@dataclass
class Recorded:
    """One recorded run of a workload: its ops and what was written (``written[trajectory_id]``:
    canonical bytes in order; ``by_id[event_id]``: the bytes acknowledged under an id)."""

    workload: Workload
    ops: list[Op]
    written: dict[str, list[bytes]]
    by_id: dict[str, bytes]


def record(workload: Workload, store_cls: type[SegmentStore] = SegmentStore, seed: int = 0) -> Recorded:
    """Run ``workload`` on a recording file system and return its ops and promises."""
    rec = RecordingFileSystem(MemoryFileSystem())
    wl = SegmentLogWorkload(workload, store_cls)
    wl.record(rec, seed)
    return Recorded(workload, rec.ops, wl.written, wl.by_id)


def run(seed: int = 0, max_states: int | None = None, progress: bool | Callable[[int, int], None] = False,
        workloads: Iterable[str] | None = None, store_cls: type[SegmentStore] = SegmentStore) -> CrashReport:
    """Record the workloads, build their crash states, reopen the store on each and check it.

    Args:
        seed: seeds event text, sampled subsets and garbage bytes (same seed, same run).
        max_states: check at most this many generated states (a seeded sample), for quick runs.
        progress: show a tqdm bar on stderr (or a ``progress(done, total)`` callable).
        workloads: names from :data:`WORKLOADS` (default: all).
        store_cls: the store under test (a subclass, e.g. a deliberately broken one).

    Returns:
        A :class:`~kernel_lib.verify.engine.CrashReport`: one row per workload (``ops``,
        ``events_written``, ``states_generated``, ``states_explored``, ``by_kind``,
        ``reopen_trimmed``, ``violations``), ``report.reopen_trimmed`` in total.

    Raises:
        ConfigError: an unknown workload, or ``max_states`` < 1.
    """
    check_max_states(max_states)
    names = list(dict.fromkeys(workloads)) if workloads else list(WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise ConfigError(f"unknown workload(s) {unknown}; choose from {list(WORKLOADS)}")
    return explore([SegmentLogWorkload(WORKLOADS[n], store_cls) for n in names], seed=seed,
                   max_states=max_states, progress=progress, sample_salt="max_states")
