"""Crash-consistency exploration of the segment log (§11.3.1, table 2 and its footnote 2).

A durability claim is tested here, not assumed. The method follows ALICE (Pillai et al. 2014)
and SQLite's crash-test VFS:

1. **Record.** A built-in workload drives :class:`~kernel_lib.log.segment.SegmentStore` on a
   :class:`~kernel_lib.log.fs.RecordingFileSystem` over a
   :class:`~kernel_lib.log.fs.MemoryFileSystem`. Every create, write, truncate, fdatasync,
   directory fsync and remove is recorded in order, and after each ``append_batch`` /
   ``install_fence`` returns, the workload adds a marker saying which events (or fences) were
   acknowledged and at which tier.
2. **Build crash states.** For a crash after every recorded file operation:

   * ``process``: every operation so far reached the page cache and survives (process crash);
   * ``host``: only what a completed barrier covers survives: a write or truncate is kept only
     if a later ``fdatasync`` of the same file completed, a create or remove only if a later
     ``fsync_dir`` of its directory did (host crash / power loss, volume intact);
   * ``subset``: the process state minus a subset of the unsynced writes: every subset when
     there are at most 4, otherwise a seeded sample (unsynced writes persisting out of order);
   * ``torn``: the last write, if unsynced, persisted only up to a 512-byte sector boundary
     (every boundary, including none of it) and the rest ``missing``, ``zero``-filled or
     ``garbage`` (seeded random bytes), on top of the process state or the host state.

   Identical states (same files, same promises to check) are checked once.
3. **Check.** Each state is materialized into a fresh MemoryFileSystem and the store is reopened
   on it. The checks: (1) open does not report corruption (a crash only ever leaves a torn
   tail); (2) every event acknowledged at FDATASYNC, and every fence, before the crash is present
   and byte-identical; in ``process`` states every WRITE acknowledgment too; (3) what each
   trajectory holds is a prefix, in order, of what was written to it; (4) the store accepts the
   next append (head + 1) at FDATASYNC and that event survives a clean reopen, which trims
   nothing.

Assumptions (stated, not tested): a completed ``fdatasync`` covers every earlier write to that
file, including one made by an earlier process; a sector write is atomic; the log directory
itself exists before the crash.

Entry points: :func:`run` and the ``crashcheck`` subcommand (:func:`add_cli`).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import random
import sys
import textwrap
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from kernel_lib.errors import ConfigError, CorruptLogError, KernelError
from kernel_lib.core.events import (
    Authorized,
    BudgetReserved,
    BudgetSettled,
    ContextBuilt,
    Event,
    ModelReplied,
    Payload,
    Provenance,
    RuntimeInput,
    TaskStarted,
    ToolIntent,
    ToolResult,
    decode,
)
from kernel_lib.log.base import AckTier, AppendOutcome
from kernel_lib.log.fs import MemoryFileSystem, Op, RecordingFileSystem
from kernel_lib.log.segment import KIND_EVENT, SegmentStore, encode_frame, segment_name

DIRECTORY = "/log"
SECTOR_BYTES = 512
MAX_ENUMERATED_UNSYNCED = 4      # enumerate every subset up to this many unsynced writes
SAMPLED_SUBSETS = 10             # otherwise check this many seeded subsets
_FILE_OPS = ("create", "write", "truncate", "fdatasync", "fsync_dir", "remove", "makedirs")
_WORDS = ("patch", "test", "assert", "fixture", "module", "regression", "import", "timeout", "config",
          "retry", "branch", "diff", "runner", "sandbox", "coverage", "stack", "frame", "result")


# ------------------------------------------------------------------------------------------------
# realistic events
# ------------------------------------------------------------------------------------------------


class _EventMaker:
    """Builds one trajectory's events: a task, then turns of context → reply → authorization →
    reservation → tool intent → tool result → settlement, with seeded text of varied length."""

    def __init__(self, trajectory_id: str, rng: random.Random):
        self.trajectory_id = trajectory_id
        self.rng = rng
        self.next_seq = 1       # the sequence number the next accepted event takes
        self._made = 0

    def _text(self, lo: int, hi: int) -> str:
        n = self.rng.randint(lo, hi)
        words = []
        while sum(len(w) + 1 for w in words) < n:
            words.append(self.rng.choice(_WORDS))
        return " ".join(words)[:n]

    def _payload(self, step: int) -> Payload:
        t, r = self.trajectory_id, step // 7
        op, att = f"{t}-op{r}", f"{t}-op{r}-a1"
        phase = step % 7
        if step == 0:
            return TaskStarted(task_id=f"{t}-task", requester="user_17", objective=self._text(40, 160),
                               grant_ids=["grant_repo_rw"], budget_ceiling_usd=5.0, finalization_reserve_usd=0.25,
                               workspace_ref="ws_r18")
        if phase == 1:
            text = self._text(200, 1300)
            return ContextBuilt(invocation_id=f"{t}-inv{r}", model="model-x", delivered_input=text,
                                delivered_input_sha256=hashlib.sha256(text.encode()).hexdigest())
        if phase == 2:
            return ModelReplied(invocation_id=f"{t}-inv{r}", status="complete", reply=self._text(50, 400),
                                input_tokens=self.rng.randint(500, 9000), output_tokens=self.rng.randint(20, 800))
        if phase == 3:
            return Authorized(decision_id=f"{op}-auth", subject_id=op, subject_kind="tool", policy_version="p3",
                              grant_id="grant_repo_rw", decision="allow")
        if phase == 4:
            return BudgetReserved(reservation_id=f"{op}-res", subject_id=op, amount_usd=round(self.rng.uniform(0.01, 0.4), 4))
        if phase == 5:
            return ToolIntent(operation_id=op, attempt_id=att, tool="run_tests",
                              arguments={"check": f"test_r{r}", "workspace": "ws_r18"}, revision=f"r{r}",
                              repeat_contract="idempotency_key", grant_id="grant_repo_rw",
                              authorization_ref=f"{op}-auth", reservation_ref=f"{op}-res")
        if phase == 6:
            return ToolResult(operation_id=op, attempt_id=att, status="completed", job_handle=f"job_{op}",
                              outcome={"passed": self.rng.randint(0, 60), "failed": self.rng.randint(0, 3),
                                       "log": self._text(100, 1600)}, observation_complete=True)
        return BudgetSettled(reservation_id=f"{t}-op{r - 1}-res", subject_id=f"{t}-op{r - 1}",
                             actual_usd=0.01, final=True)

    def make(self, *, owner_epoch: int = 0, sequence_number: int | None = None) -> Event:
        """A new event (fresh event id) numbered ``next_seq`` unless ``sequence_number`` is given.
        The maker's ``next_seq`` advances only via :meth:`accepted`."""
        step = self._made
        self._made += 1
        return Event.create(trajectory_id=self.trajectory_id, event_id=f"{self.trajectory_id}-ev{step:04d}",
                            sequence_number=sequence_number or self.next_seq, payload=self._payload(step),
                            owner_epoch=owner_epoch, provenance=Provenance("tenant_a", "worker_1"))


# ------------------------------------------------------------------------------------------------
# workloads
# ------------------------------------------------------------------------------------------------


class Session:
    """What a workload drives: a store on the recording file system, plus what it was promised.

    ``written[trajectory_id]`` lists the canonical bytes of every stored event in order;
    ``by_id[event_id]`` the bytes acknowledged under an id.
    """

    def __init__(self, rec: RecordingFileSystem, store_cls: type[SegmentStore], segment_bytes: int, seed: int):
        self.rec, self.store_cls, self.segment_bytes = rec, store_cls, segment_bytes
        self.rng = random.Random(seed)
        self.store: SegmentStore | None = None
        self.written: dict[str, list[bytes]] = {}
        self.by_id: dict[str, bytes] = {}
        self.makers: dict[str, _EventMaker] = {}

    def open(self) -> SegmentStore:
        self.store = self.store_cls.open(DIRECTORY, fs=self.rec, segment_bytes=self.segment_bytes)
        return self.store

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None

    def maker(self, trajectory_id: str) -> _EventMaker:
        if trajectory_id not in self.makers:
            self.makers[trajectory_id] = _EventMaker(trajectory_id, self.rng)
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
    """A named, recorded scenario. ``body(session)`` drives the store; ``segment_bytes`` sizes it."""

    name: str
    description: str
    segment_bytes: int
    body: Callable[[Session], None]


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
    for i in range(3):
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
)}


# ------------------------------------------------------------------------------------------------
# crash states
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CrashState:
    """One crash state: the first ``crash_after`` recorded ops happened; ``drop`` are indices of
    ops that did not persist; ``torn`` = (op index, bytes of it that persisted, fill)."""

    crash_after: int
    kind: str            # process | host | subset | torn
    drop: frozenset[int] = frozenset()
    torn: tuple[int, int, str] | None = None
    note: str = ""


def _dirname(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


def _coverage(ops: list[Op]) -> list[int]:
    """For each op, the index of the first later barrier that covers it (len(ops) if none)."""
    n = len(ops)
    covered = [n] * n
    pending_file: dict[int, list[int]] = {}
    pending_dir: dict[str, list[int]] = {}
    for i, op in enumerate(ops):
        if op.kind in ("write", "truncate"):
            pending_file.setdefault(op.inode, []).append(i)
        elif op.kind in ("create", "remove"):
            pending_dir.setdefault(_dirname(op.path), []).append(i)
        elif op.kind == "fdatasync":
            for j in pending_file.pop(op.inode, []):
                covered[j] = i
        elif op.kind == "fsync_dir":
            for j in pending_dir.pop(op.path, []):
                covered[j] = i
    return covered


def _crash_points(ops: list[Op]) -> list[int]:
    """Crash points k (ops[:k] happened), one after each file op, extended over the ack markers
    that follow it (same files, more promises to check)."""
    points = [0]
    for i, op in enumerate(ops):
        if op.kind in _FILE_OPS:
            k = i + 1
            while k < len(ops) and ops[k].kind == "ack":
                k += 1
            points.append(k)
    return points


def crash_states(ops: list[Op], seed: int = 0, label: str = "") -> list[CrashState]:
    """Every crash state of the recorded ``ops`` under the model in the module docstring."""
    covered = _coverage(ops)
    out: list[CrashState] = []
    for k in _crash_points(ops):
        unsynced = [i for i in range(k) if ops[i].kind in ("write", "truncate", "create", "remove")
                    and covered[i] >= k]
        writes = [i for i in unsynced if ops[i].kind == "write"]
        out.append(CrashState(k, "process"))
        if unsynced:
            out.append(CrashState(k, "host", frozenset(unsynced)))
        if len(writes) <= MAX_ENUMERATED_UNSYNCED:
            subsets = [frozenset(c) for r in range(1, len(writes) + 1) for c in itertools.combinations(writes, r)]
        else:
            rng = random.Random(f"{seed}:{label}:{k}:subsets")
            subsets = [frozenset(i for i in writes if rng.random() < 0.5) for _ in range(SAMPLED_SUBSETS)]
            subsets += [frozenset(writes[:1]), frozenset(writes[1:])]
        out.extend(CrashState(k, "subset", s) for s in subsets if s)
        last = max((i for i in range(k) if ops[i].kind in _FILE_OPS), default=None)
        if last is not None and ops[last].kind == "write" and covered[last] >= k:
            op = ops[last]
            start, end = op.offset, op.offset + len(op.data)
            cuts = [start] + list(range((start // SECTOR_BYTES + 1) * SECTOR_BYTES, end, SECTOR_BYTES))
            host_drop = frozenset(i for i in unsynced if i != last)
            for base_kind, base in (("process", frozenset()), ("host", host_drop)):
                for cut in cuts:
                    for fill in ("missing", "zero", "garbage"):
                        if fill == "missing" and cut == start:
                            continue  # = the write dropped, a subset/host state
                        out.append(CrashState(k, "torn", base, (last, cut - start, fill),
                                              f"on {base_kind} state"))
    return out


def state_key(mem: MemoryFileSystem, promised: object, label: str = "") -> bytes:
    """A digest of what a crash state leaves on disk plus what had been promised (acknowledged)
    by then: two states with the same key need checking once."""
    h = hashlib.blake2b(label.encode(), digest_size=16)
    for path in sorted(mem.files):
        h.update(path.encode() + b"\0" + hashlib.blake2b(mem.files[path], digest_size=16).digest())
    h.update(repr(promised).encode())
    return h.digest()


def materialize(ops: list[Op], state: CrashState, seed: int = 0) -> MemoryFileSystem:
    """The files a reboot would find in ``state``, as a fresh :class:`MemoryFileSystem`."""
    inodes: dict[int, bytearray] = {}
    entries: dict[str, int] = {}
    dirs: set[str] = set()
    for i in range(state.crash_after):
        op = ops[i]
        if op.kind == "makedirs":
            dirs.add(op.path)
            continue
        if op.kind == "create":
            inodes.setdefault(op.inode, bytearray())
            if i not in state.drop:
                entries[op.path] = op.inode
            continue
        if i in state.drop or op.kind not in ("write", "truncate", "remove"):
            continue
        if op.kind == "remove":
            if entries.get(op.path) == op.inode:
                del entries[op.path]
            continue
        buf = inodes.setdefault(op.inode, bytearray())
        if op.kind == "truncate":
            del buf[op.size:]
            buf.extend(bytes(op.size - len(buf)))
            continue
        data = op.data
        if state.torn is not None and state.torn[0] == i:
            _, keep, fill = state.torn
            rest = len(data) - keep
            if fill == "missing":
                data = data[:keep]
            elif fill == "zero":
                data = data[:keep] + bytes(rest)
            else:
                rng = random.Random(f"{seed}:{i}:{keep}:garbage")
                data = data[:keep] + rng.randbytes(rest)
        if len(buf) < op.offset:
            buf.extend(bytes(op.offset - len(buf)))
        buf[op.offset:op.offset + len(data)] = data
    return MemoryFileSystem(files={p: bytes(inodes[n]) for p, n in entries.items()}, dirs=dirs)


# ------------------------------------------------------------------------------------------------
# checking
# ------------------------------------------------------------------------------------------------


@dataclass
class _Recorded:
    workload: Workload
    ops: list[Op]
    written: dict[str, list[bytes]]
    by_id: dict[str, bytes]


def record(workload: Workload, store_cls: type[SegmentStore] = SegmentStore, seed: int = 0) -> _Recorded:
    """Run ``workload`` on a recording file system and return its ops and promises."""
    rec = RecordingFileSystem(MemoryFileSystem())
    session = Session(rec, store_cls, workload.segment_bytes, seed)
    try:
        workload.body(session)
    finally:
        session.close()
    return _Recorded(workload, rec.ops, session.written, session.by_id)


def _promises(ops: list[Op], k: int, include_write_tier: bool) -> tuple[frozenset[str], frozenset[tuple[str, int]]]:
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
    return frozenset(events), frozenset(fences)


def _check(rec: _Recorded, mem: MemoryFileSystem, events: frozenset[str], fences: frozenset[tuple[str, int]],
           store_cls: type[SegmentStore]) -> tuple[list[str], bool]:
    """Reopen on ``mem``; return descriptions of every violated check (empty if none) and whether
    the reopen trimmed a torn tail."""
    seg = rec.workload.segment_bytes
    try:
        store = store_cls.open(DIRECTORY, fs=mem, segment_bytes=seg)
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
            want = rec.written.get(tid, [])
            if got != want[:len(got)]:
                problems.append(f"(3) {tid}: the {len(got)} events present are not a prefix of the "
                                f"{len(want)} written")
            present.update((e.event_id, e.canonical) for e in rows)
        for eid in sorted(events):
            if eid not in present:
                problems.append(f"(2) acknowledged event {eid} is missing")
            elif present[eid] != rec.by_id[eid]:
                problems.append(f"(2) acknowledged event {eid} differs from what was written")
        for tid, epoch in sorted(fences):
            if store.fence(tid) < epoch:
                problems.append(f"(2) acknowledged fence {tid}@{epoch} is missing (fence {store.fence(tid)})")
        # (4) the store accepts the next append, and it survives a clean reopen
        tid = sorted(rec.written)[0]
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
            store = store_cls.open(DIRECTORY, fs=mem, segment_bytes=seg)
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


@dataclass
class CrashCheckReport:
    """Result of :func:`run`.

    ``states_explored`` counts distinct crash states checked (files + promises);
    ``states_generated`` counts them before de-duplication. ``violations`` is the number of states
    with at least one failed check; ``violation_details`` describes each (first 200 kept).
    ``reopen_trimmed`` counts states whose reopen trimmed a torn tail.
    ``workloads`` maps a workload name to its counts; ``seconds`` is wall time.
    """

    seed: int
    states_explored: int = 0
    states_generated: int = 0
    violations: int = 0
    violation_details: list[dict] = field(default_factory=list)
    reopen_trimmed: int = 0
    workloads: dict[str, dict] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {"states_explored": self.states_explored, "violations": self.violations,
                "states_generated": self.states_generated, "reopen_trimmed": self.reopen_trimmed,
                "seconds": round(self.seconds, 3),
                "seed": self.seed, "workloads": self.workloads, "violation_details": self.violation_details}


def run(seed: int = 0, max_states: int | None = None, progress: bool = False,
        workloads: Iterable[str] | None = None, store_cls: type[SegmentStore] = SegmentStore) -> CrashCheckReport:
    """Record the workloads, build their crash states, reopen the store on each and check it.

    Args:
        seed: seeds event text, sampled subsets and garbage bytes (same seed, same run).
        max_states: check at most this many generated states (a seeded sample), for quick runs.
        progress: show a tqdm bar on stderr.
        workloads: names from :data:`WORKLOADS` (default: all).
        store_cls: the store under test (a subclass, e.g. a deliberately broken one).

    Returns:
        A :class:`CrashCheckReport`.

    Raises:
        ConfigError: an unknown workload, or ``max_states`` < 1.
    """
    if max_states is not None and (isinstance(max_states, bool) or not isinstance(max_states, int)
                                   or max_states < 1):
        raise ConfigError(f"max_states (--max-states) must be an integer >= 1, got {max_states!r}")
    t0 = time.perf_counter()
    names = list(workloads) if workloads else list(WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise ConfigError(f"unknown workload(s) {unknown}; choose from {list(WORKLOADS)}")
    report = CrashCheckReport(seed=seed)
    jobs: list[tuple[_Recorded, CrashState]] = []
    for name in names:
        recd = record(WORKLOADS[name], store_cls, seed)
        states = crash_states(recd.ops, seed, name)
        report.workloads[name] = {"ops": sum(op.kind in _FILE_OPS for op in recd.ops),
                                  "events_written": sum(len(v) for v in recd.written.values()),
                                  "states_generated": len(states), "states_explored": 0,
                                  "by_kind": {}, "reopen_trimmed": 0, "violations": 0}
        jobs.extend((recd, st) for st in states)
    if max_states is not None and max_states < len(jobs):
        keep = sorted(random.Random(f"{seed}:max_states").sample(range(len(jobs)), max_states))
        jobs = [jobs[i] for i in keep]
    report.states_generated = len(jobs)
    seen: set[bytes] = set()
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(jobs), unit="state", desc="crashcheck", file=sys.stderr)
    for recd, st in jobs:
        if bar is not None:
            bar.update(1)
        mem = materialize(recd.ops, st, seed)
        events, fences = _promises(recd.ops, st.crash_after, include_write_tier=(st.kind == "process"))
        key = state_key(mem, (sorted(events), sorted(fences)), recd.workload.name)
        if key in seen:
            continue
        seen.add(key)
        w = report.workloads[recd.workload.name]
        w["states_explored"] += 1
        w["by_kind"][st.kind] = w["by_kind"].get(st.kind, 0) + 1
        report.states_explored += 1
        problems, trimmed = _check(recd, mem, events, fences, store_cls)
        w["reopen_trimmed"] += trimmed
        report.reopen_trimmed += trimmed
        if problems:
            report.violations += 1
            w["violations"] += 1
            if len(report.violation_details) < 200:
                op = recd.ops[st.crash_after - 1] if st.crash_after else None
                report.violation_details.append({
                    "workload": recd.workload.name, "crash_after_ops": st.crash_after,
                    "last_op": f"{op.kind} {op.path}".strip() if op else "none",
                    "state": st.kind, "dropped_ops": sorted(st.drop), "torn": st.torn, "note": st.note,
                    "problems": problems})
    if bar is not None:
        bar.close()
    report.seconds = time.perf_counter() - t0
    return report


# ------------------------------------------------------------------------------------------------
# command line
# ------------------------------------------------------------------------------------------------

_EPILOG = """\
crash states, for a crash after every recorded file operation:
  process  every write so far survives (the page cache outlives the process)
  host     only writes/truncates covered by a later completed fdatasync of the file, and
           creates/removes covered by a later fsync of the directory, survive
  subset   the process state minus a subset of the unsynced writes (all subsets up to 4
           unsynced writes, else a seeded sample): out-of-order persistence
  torn     the last unsynced write persisted up to a 512-byte sector boundary, the rest
           missing, zero-filled or garbage, on top of the process or the host state

checks on every state: (1) reopen reports no corruption; (2) every event and fence
acknowledged at fdatasync (and, in process states, at write) is present and byte-identical;
(3) each trajectory holds a prefix of what was written to it; (4) the next append (head+1)
is accepted and survives a clean reopen.

exit status: 0 if no violation, 1 if any, 2 on a usage or kernel error.
"""


def _description() -> str:
    head = ("Record built-in workloads on the segment log through a recording file system, build\n"
            "every crash state (process crash, host crash, out-of-order and torn writes), reopen\n"
            "the store on each and check every acknowledgment's promise (§11.3.1, table 2).\n\n"
            "workloads:\n")
    body = "".join(textwrap.fill(w.description, width=88, initial_indent=f"  {w.name:<20} ",
                                 subsequent_indent=" " * 23) + "\n" for w in WORKLOADS.values())
    return head + body


def _cmd_crashcheck(args: argparse.Namespace) -> int:
    progress = not args.json and sys.stderr.isatty()
    report = run(seed=args.seed, max_states=args.max_states, progress=progress, workloads=args.workload)
    if args.json:
        print(json.dumps(report.to_dict(), sort_keys=True))
    else:
        print(f"{'workload':<22} {'file ops':>8} {'states':>7} {'trimmed':>7} {'violations':>10}  by kind")
        for name, w in report.workloads.items():
            kinds = ", ".join(f"{k} {v}" for k, v in sorted(w["by_kind"].items()))
            print(f"{name:<22} {w['ops']:>8} {w['states_explored']:>7} {w['reopen_trimmed']:>7} "
                  f"{w['violations']:>10}  {kinds}")
        print(f"explored {report.states_explored} distinct crash states ({report.states_generated} generated) "
              f"in {report.seconds:.1f} s: {report.violations} violation(s)")
        for d in report.violation_details[:10]:
            print(f"  VIOLATION {d['workload']} after op {d['crash_after_ops']} ({d['last_op']}), "
                  f"{d['state']} {d['torn'] or ''}: {'; '.join(d['problems'])}")
    return 1 if report.violations else 0


def add_cli(subparsers) -> argparse.ArgumentParser:
    """Register the ``crashcheck`` subcommand on an argparse ``subparsers`` object."""
    p = subparsers.add_parser(
        "crashcheck", help="crash-test the segment log: every crash state of recorded workloads",
        description=_description(),
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true",
                   help='print one JSON object: {"states_explored": N, "violations": V, ...}')
    p.add_argument("--seed", type=int, default=0, help="seed for event text, sampled subsets and garbage (default 0)")
    p.add_argument("--workload", action="append", choices=list(WORKLOADS), metavar="NAME",
                   help=f"run only this workload (repeatable); one of {', '.join(WORKLOADS)}")
    p.add_argument("--max-states", type=int, default=None, metavar="N",
                   help="check at most N generated states (a seeded sample) for a quick run")
    p.set_defaults(func=_cmd_crashcheck)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``crashcheck`` subcommand on its own: ``python -m kernel_lib.verify.log_workload``."""
    ap = argparse.ArgumentParser(prog="python -m kernel_lib.verify.log_workload")
    sub = ap.add_subparsers(dest="command")
    add_cli(sub)
    args = ap.parse_args(["crashcheck", *(sys.argv[1:] if argv is None else argv)])
    try:
        return args.func(args)
    except KernelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
