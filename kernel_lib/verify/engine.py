"""The crash-state engine: record a workload's file operations, rebuild every crash state, check it.

One engine serves every crash-consistency workload of the kit: the segment log (§11.3.1, table 2
and its footnote 2), checkpoint capture (§11.4.1) and payload-before-reference logging (§11.8.2).
The method is the one of ALICE (Pillai et al. 2014) and SQLite's crash-test VFS:

1. **Record.** The engine hands a workload a :class:`~kernel_lib.log.fs.RecordingFileSystem` over
   a fresh :class:`~kernel_lib.log.fs.MemoryFileSystem` — the one file-system seam every store of
   the kit goes through. Each create, write, truncate, fdatasync, directory fsync, remove and
   makedirs is recorded in order. After an operation of the system under test returns, the
   workload adds an acknowledgment marker (:meth:`~kernel_lib.log.fs.RecordingFileSystem.mark_ack`)
   naming what was acknowledged and at which tier.
2. **Build crash states** (:func:`crash_states`). For a crash after every recorded file operation:

   * ``process``: every operation so far reached the page cache and survives (process crash);
   * ``host``: only what a completed barrier covers survives: a write or truncate is kept only
     if a later ``fdatasync`` of the same file completed, a create or remove only if a later
     ``fsync_dir`` of its directory did (host crash / power loss, volume intact);
   * ``subset``: the process state minus a subset of the unsynced writes: every subset when
     there are at most :data:`MAX_ENUMERATED_UNSYNCED`, otherwise a seeded sample of
     :data:`SAMPLED_SUBSETS` plus two fixed ones (unsynced writes persisting out of order);
   * ``torn``: the last write, if unsynced, persisted only up to a :data:`SECTOR_BYTES` boundary
     (every boundary, including none of it) and the rest ``missing``, ``zero``-filled or
     ``garbage`` (seeded random bytes), on top of the process state or the host state.

3. **Materialize and de-duplicate.** Each state becomes a fresh MemoryFileSystem
   (:func:`materialize`); states with the same files and the same promises (:func:`state_key`)
   are checked once per workload. Under a cap (``max_states``) a seeded sample of the generated
   states is kept, in order.
4. **Check.** The workload reopens its system on the materialized files and reports every
   promise that does not hold (:meth:`CrashWorkload.check`).

Assumptions (stated, not tested): a completed ``fdatasync`` covers every earlier write to that
file, including one made by an earlier process; a sector write is atomic; directories made by
``makedirs`` exist after any crash.

A workload is a :class:`CrashWorkload`: ``record(fs, seed)`` drives the system and marks each
acknowledgment; ``promised(ops, state)`` is what had been acknowledged by the crash (default:
every marker's subjects); ``check(fs, promised)`` lists the broken promises. :func:`explore` runs
a list of them and returns one :class:`CrashReport`.
"""

from __future__ import annotations

import hashlib
import itertools
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Mapping, Sequence

from kernel_lib.errors import ConfigError
from kernel_lib.log.fs import MemoryFileSystem, Op, RecordingFileSystem

SECTOR_BYTES = 512
MAX_ENUMERATED_UNSYNCED = 4      # enumerate every subset up to this many unsynced writes
SAMPLED_SUBSETS = 10             # otherwise check this many seeded subsets
#: The recorded operation kinds that touch the file system (every other kind is a marker).
FILE_OPS = ("create", "write", "truncate", "fdatasync", "fsync_dir", "remove", "makedirs")
#: The default number of violations a report describes in ``violation_details``.
MAX_DETAILS = 200


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


def _coverage(ops: Sequence[Op]) -> list[int]:
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


def _crash_points(ops: Sequence[Op]) -> list[int]:
    """Crash points k (ops[:k] happened), one after each file op, extended over the ack markers
    that follow it (same files, more promises to check)."""
    points = [0]
    for i, op in enumerate(ops):
        if op.kind in FILE_OPS:
            k = i + 1
            while k < len(ops) and ops[k].kind == "ack":
                k += 1
            points.append(k)
    return points


def crash_states(ops: Sequence[Op], seed: int = 0, label: str = "") -> list[CrashState]:
    """Every crash state of the recorded ``ops`` under the model in the module docstring.

    ``seed`` and ``label`` seed the sampled subsets (when more than
    :data:`MAX_ENUMERATED_UNSYNCED` writes are unsynced). Returns the states in crash-point order.
    """
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
        last = max((i for i in range(k) if ops[i].kind in FILE_OPS), default=None)
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
    by then: two states with the same key need checking once. ``promised`` must have a
    deterministic ``repr`` (tuples and sorted lists, not sets)."""
    h = hashlib.blake2b(label.encode(), digest_size=16)
    for path in sorted(mem.files):
        h.update(path.encode() + b"\0" + hashlib.blake2b(mem.files[path], digest_size=16).digest())
    h.update(repr(promised).encode())
    return h.digest()


def materialize(ops: Sequence[Op], state: CrashState, seed: int = 0) -> MemoryFileSystem:
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


def acknowledged(ops: Sequence[Op], crash_after: int, tiers: Sequence[str] | None = None) -> tuple[str, ...]:
    """The subjects of every acknowledgment marker among ``ops[:crash_after]``, in order;
    only markers at one of ``tiers`` (labels such as ``"fdatasync"``) if given."""
    return tuple(s for op in ops[:crash_after] if op.kind == "ack" and (tiers is None or op.tier in tiers)
                 for s in op.subjects)


# ------------------------------------------------------------------------------------------------
# workloads
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """What :meth:`CrashWorkload.check` found in one crash state.

    ``problems``: one sentence per broken promise (empty: the state passed). ``counts``: per-state
    counters the report sums (names from :attr:`CrashWorkload.counters`, e.g. ``reopen_trimmed``).
    ``tally``: per-state labels the report counts by value (names from
    :attr:`CrashWorkload.tallies`, e.g. ``{"restored_from": "ckpt-3"}``).
    """

    problems: tuple[str, ...] = ()
    counts: Mapping[str, int] = field(default_factory=dict)
    tally: Mapping[str, str] = field(default_factory=dict)


class CrashWorkload:
    """A recorded scenario the engine explores. Subclass it and override :meth:`record` and
    :meth:`check` (and :meth:`promised` when not every acknowledgment binds every crash state).

    Attributes:
        name: the workload's row in the report; unique within one :func:`explore`.
        description: one line for listings (the ``crashcheck`` help).
        label: seeds the sampled subsets of :func:`crash_states` (default: ``name``).
        counters: names of the per-state counts its verdicts carry (reported even when 0).
        tallies: names of the per-state labels its verdicts carry.
    """

    name: str = ""
    description: str = ""
    counters: tuple[str, ...] = ()
    tallies: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return self.name

    def record(self, fs: RecordingFileSystem, seed: int) -> Mapping[str, int] | None:
        """Drive the system under test on ``fs`` and ``fs.mark_ack`` every acknowledgment after it
        returned. May return per-workload figures for the report row (e.g. ``events_written``)."""
        raise NotImplementedError

    def promised(self, ops: Sequence[Op], state: CrashState) -> Hashable:
        """What had been acknowledged when ``state`` crashed (default: every marker's subjects up
        to ``state.crash_after``, a tuple). Must have a deterministic ``repr`` (see
        :func:`state_key`)."""
        return acknowledged(ops, state.crash_after)

    def check(self, fs: MemoryFileSystem, promised: Any) -> Verdict | Sequence[str]:
        """Reopen the system on the crashed files ``fs``; return a :class:`Verdict` or the list of
        broken promises (empty: none)."""
        raise NotImplementedError


# ------------------------------------------------------------------------------------------------
# the report
# ------------------------------------------------------------------------------------------------


_REPORT_KEYS = frozenset({"ops", "states_generated", "states_explored", "by_kind", "violations", "seconds",
                          "seed", "workloads", "violation_details"})


@dataclass
class WorkloadRow:
    """One workload's figures in a :class:`CrashReport`.

    ``ops``: file operations recorded; ``facts``: what ``record`` returned (e.g. ``events_written``);
    ``states_generated``: crash states built for it, before any cap; ``states_explored``: distinct
    states checked (``by_kind``: by crash-state kind); ``counts`` and ``tallies``: its verdicts'
    per-state counters and labels, summed; ``violations``: states with at least one broken promise.
    """

    name: str
    ops: int = 0
    facts: dict[str, int] = field(default_factory=dict)
    states_generated: int = 0
    states_explored: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    tallies: dict[str, dict[str, int]] = field(default_factory=dict)
    violations: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"ops": self.ops, **self.facts, "states_generated": self.states_generated,
                "states_explored": self.states_explored, "by_kind": dict(self.by_kind), **self.counts,
                **{k: dict(v) for k, v in self.tallies.items()}, "violations": self.violations}


@dataclass
class CrashReport:
    """The result of :func:`explore`, one type for every workload.

    ``rows`` maps a workload name to its :class:`WorkloadRow`. ``states_generated`` counts the
    states kept under the cap, before de-duplication (each row's ``states_generated`` counts all
    the states built for it). ``violation_details`` describes the first violations (workload,
    ``crash_after_ops``, ``last_op``, ``state`` kind, ``dropped_ops``, ``torn``, ``note``,
    ``problems``). ``params`` holds the workload's run parameters (e.g. ``order``, ``turns``);
    ``seconds`` is wall time.

    Totals over the rows: :attr:`states_explored`, :attr:`violations`, :attr:`ops`,
    :attr:`by_kind`, :attr:`counts`, :attr:`tallies`. A counter, a tally or a parameter also reads
    as an attribute (``report.reopen_trimmed``, ``report.restored_from``, ``report.order``).
    """

    seed: int
    rows: dict[str, WorkloadRow] = field(default_factory=dict)
    states_generated: int = 0
    violation_details: list[dict[str, Any]] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def states_explored(self) -> int:
        return sum(r.states_explored for r in self.rows.values())

    @property
    def violations(self) -> int:
        return sum(r.violations for r in self.rows.values())

    @property
    def ops(self) -> int:
        return sum(r.ops for r in self.rows.values())

    @property
    def by_kind(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows.values():
            for k, v in r.by_kind.items():
                out[k] = out.get(k, 0) + v
        return out

    @property
    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows.values():
            for k, v in r.counts.items():
                out[k] = out.get(k, 0) + v
        return out

    @property
    def tallies(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for r in self.rows.values():
            for name, t in r.tallies.items():
                merged = out.setdefault(name, {})
                for k, v in t.items():
                    merged[k] = merged.get(k, 0) + v
        return out

    @property
    def workloads(self) -> dict[str, dict[str, Any]]:
        """Each row as a dict (:meth:`WorkloadRow.to_dict`), by workload name."""
        return {name: r.to_dict() for name, r in self.rows.items()}

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        if name.startswith("_") or "rows" not in d:
            raise AttributeError(name)
        if name in d["params"]:
            return d["params"][name]
        counts = self.counts
        if name in counts:
            return counts[name]
        tallies = self.tallies
        if name in tallies:
            return tallies[name]
        raise AttributeError(f"{type(self).__name__} has no attribute, counter, tally or parameter {name!r}")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: the totals, the counters, ``seconds``, ``seed``, the tallies, the
        parameters, ``workloads`` (rows) and ``violation_details``."""
        return {"states_explored": self.states_explored, "violations": self.violations,
                "states_generated": self.states_generated, **self.counts, "seconds": round(self.seconds, 3),
                "seed": self.seed, **self.tallies, **self.params, "workloads": self.workloads,
                "violation_details": self.violation_details}


# ------------------------------------------------------------------------------------------------
# running
# ------------------------------------------------------------------------------------------------


def check_max_states(max_states: object) -> None:
    """Raise :class:`~kernel_lib.errors.ConfigError` unless ``max_states`` is None or an int >= 1."""
    if max_states is not None and (type(max_states) is not int or max_states < 1):
        raise ConfigError(f"max_states (--max-states) must be an integer >= 1, got {max_states!r}")


def _new_row(wl: CrashWorkload, ops: Sequence[Op], facts: Mapping[str, int], generated: int) -> WorkloadRow:
    names = [*facts, *wl.counters, *wl.tallies]
    clash = sorted(set(names) & _REPORT_KEYS) or sorted({n for n in names if names.count(n) > 1})
    if clash:
        raise ConfigError(f"workload {wl.name!r}: figure name(s) {clash} clash with the report's own")
    return WorkloadRow(wl.name, ops=sum(op.kind in FILE_OPS for op in ops), facts=dict(facts),
                       states_generated=generated, counts={c: 0 for c in wl.counters},
                       tallies={t: {} for t in wl.tallies})


def explore(workloads: Sequence[CrashWorkload], *, seed: int = 0, max_states: int | None = None,
            progress: bool | Callable[[int, int], None] = False, sample_salt: str = "max_states",
            max_details: int = MAX_DETAILS, params: Mapping[str, Any] | None = None) -> CrashReport:
    """Record each workload, build its crash states, and check every distinct one.

    Args:
        workloads: the :class:`CrashWorkload` objects, explored in this order (names unique).
        seed: passed to ``record`` (event text) and seeding sampled subsets, garbage bytes and
            the cap's sample: the same seed gives the same states and figures.
        max_states: check at most this many of all the generated states, a sample drawn with
            ``random.Random(f"{seed}:{sample_salt}")`` and kept in order; None: all.
        progress: True shows a tqdm bar on stderr; a callable is called as ``progress(done, total)``
            after each generated state.
        sample_salt: names the cap's sample (each entry point keeps its own, so its figures stay).
        max_details: how many violations ``violation_details`` describes.
        params: run parameters to carry in the report (``report.params``).

    Returns:
        A :class:`CrashReport` with one row per workload.

    Raises:
        ConfigError: ``max_states`` not an int >= 1, no workloads, a repeated name, or a figure
            name that clashes with the report's own keys.
    """
    check_max_states(max_states)
    if not workloads:
        raise ConfigError("explore needs at least one workload")
    names = [wl.name for wl in workloads]
    if len(set(names)) != len(names):
        raise ConfigError(f"workload names must be unique, got {names}")
    t0 = time.perf_counter()
    report = CrashReport(seed=seed, params=dict(params or {}))
    jobs: list[tuple[CrashWorkload, Sequence[Op], CrashState]] = []
    for wl in workloads:
        fs = RecordingFileSystem(MemoryFileSystem())
        facts = wl.record(fs, seed) or {}
        ops = fs.ops
        states = crash_states(ops, seed, wl.label)
        report.rows[wl.name] = _new_row(wl, ops, facts, len(states))
        jobs.extend((wl, ops, st) for st in states)
    if max_states is not None and max_states < len(jobs):
        keep = sorted(random.Random(f"{seed}:{sample_salt}").sample(range(len(jobs)), max_states))
        jobs = [jobs[i] for i in keep]
    report.states_generated = len(jobs)
    seen: set[bytes] = set()
    bar = None
    if progress is True:
        from tqdm import tqdm
        bar = tqdm(total=len(jobs), unit="state", desc="crashcheck", file=sys.stderr)
    try:
        for done, (wl, ops, st) in enumerate(jobs, 1):
            if bar is not None:
                bar.update(1)
            elif callable(progress):
                progress(done, len(jobs))
            mem = materialize(ops, st, seed)
            promised = wl.promised(ops, st)
            key = state_key(mem, promised, wl.name)
            if key in seen:
                continue
            seen.add(key)
            row = report.rows[wl.name]
            row.states_explored += 1
            row.by_kind[st.kind] = row.by_kind.get(st.kind, 0) + 1
            try:
                verdict = wl.check(mem, promised)
            except Exception as exc:  # noqa: BLE001 - a check that breaks on a state is a finding
                verdict = [f"checking raised {type(exc).__name__}: {exc}"]
            if not isinstance(verdict, Verdict):
                verdict = Verdict(tuple(verdict))
            for k, v in verdict.counts.items():
                row.counts[k] = row.counts.get(k, 0) + int(v)
            for k, label in verdict.tally.items():
                t = row.tallies.setdefault(k, {})
                t[label] = t.get(label, 0) + 1
            if verdict.problems:
                row.violations += 1
                if len(report.violation_details) < max_details:
                    op = ops[st.crash_after - 1] if st.crash_after else None
                    report.violation_details.append({
                        "workload": wl.name, "crash_after_ops": st.crash_after,
                        "last_op": f"{op.kind} {op.path}".strip() if op else "none",
                        "state": st.kind, "dropped_ops": sorted(st.drop), "torn": st.torn, "note": st.note,
                        "problems": list(verdict.problems)})
    finally:
        if bar is not None:
            bar.close()
    report.seconds = time.perf_counter() - t0
    return report
