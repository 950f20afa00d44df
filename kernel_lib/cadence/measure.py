"""Cadence inputs measured on this machine, labelled as such (§11.4.3: measure C and R, don't assume them).

* :func:`measure_reconstruction` measures R, the seconds to reconstruct one logged turn: it records a
  multi-turn trajectory through the real dispatch gate into a real kernel_lib log (SQLite or segment
  files, in a temporary directory), reopens it read-only, and times reading the suffix past a
  checkpoint position, checking and decoding each event, and folding it over the checkpointed record.
  R is the slope between a long and a short suffix, so fixed per-restore costs (the record copy,
  the query setup) fall out; the intercept is reported separately as part of the restore time.
* :func:`resolve_pause` turns a capture pause C given as a number into a "given" :class:`Quantity`,
  or calls a zero-argument measuring function (for instance one that captures a real checkpoint and
  returns how long execution stopped) a few times and keeps the median as "measured".
* :func:`measure_capture_pause` measures C itself: real full captures of a trajectory's record and
  workspace through :class:`kernel_lib.checkpoint.Checkpointer` into fresh blob directories on the
  disk the caller names, each published in the log; C is the median whole capture (freeze,
  serialize, durable write, publish), reported beside the freeze alone; optionally it also times
  restores at the head (T_restore). Notebooks 11.4 and 11.9 both take C from it.

What R here does not include: applying workspace deltas (the chapter's R counts them; this log holds
control events only), and a cold page cache (the log was just written, so reads hit memory).
"""

from __future__ import annotations

import gc
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from numbers import Integral
from pathlib import Path

from kernel_lib.errors import CadenceError, CadenceParameterError
from kernel_lib.limits import MEASURE_PAYLOAD_BYTES_MAX
from kernel_lib.cadence.formulas import nonnegative, show, stride

#: Bounds on the measurement's own counts, so that a typo cannot start an hours-long measurement.
MAX_MEASURE_TURNS = 100_000
MAX_REPEATS = 1000
MAX_PAYLOAD_BYTES = MEASURE_PAYLOAD_BYTES_MAX   # the filler must fit one event (kernel_lib.limits)


@dataclass(frozen=True)
class Quantity:
    """A number with its unit and provenance.

    Fields:
        value: the number. unit: e.g. "s", "s/turn". source: "given" or "measured".
        method: how it was obtained (one line). samples: raw measurements (seconds) if measured.
        detail: extra facts (store kind, events per turn, machine, intercept ...).
        notes: caveats a reader of the number should see.
    """

    value: float
    unit: str
    source: str
    method: str = ""
    samples: tuple[float, ...] = ()
    detail: dict = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        d_ = asdict(self)
        d_["samples"] = list(self.samples)
        d_["notes"] = list(self.notes)
        return d_


def given(value: float, unit: str = "s") -> Quantity:
    """A value stated by the user or the text. Raises CadenceParameterError if negative."""
    return Quantity(nonnegative("value", value), unit, "given")


def resolve_pause(pause: float | Quantity | Callable[[], float], repeats: int = 5) -> Quantity:
    """The capture pause C as a :class:`Quantity`.

    Args:
        pause: seconds (given), a Quantity (returned as is), or a zero-argument callable that
            performs one capture and returns the seconds execution stopped (measured; called
            ``repeats`` times, median kept).
        repeats: calls of a measuring callable (1 .. :data:`MAX_REPEATS`).

    Raises CadenceParameterError: a negative or out-of-range value, a callable returning a
    non-number or a negative number, repeats outside 1..MAX_REPEATS.
    """
    if isinstance(pause, Quantity):
        return pause
    if callable(pause):
        n_ = stride("repeats", repeats, MAX_REPEATS)
        samples = tuple(nonnegative("measured pause_s", pause()) for _ in range(n_))
        return Quantity(statistics.median(samples), "s", "measured",
                        method=f"median of {n_} calls of {getattr(pause, '__name__', type(pause).__name__)}",
                        samples=samples)
    return Quantity(nonnegative("pause_s", pause), "s", "given")


def _record_trajectory(store, trajectory_id: str, turns: int, payload_bytes: int) -> list[int]:
    """Record ``turns`` turns (a model call, then a tool call with its result) through the dispatch
    gate into ``store``. Returns the log position (sequence number) at the end of each turn."""
    from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate, ModelCall, ModelReply, ToolProposal, ToolReply
    from kernel_lib.core.events import TaskStarted
    from kernel_lib.log import FailureDomain, TrajectoryLog

    log = TrajectoryLog(store, trajectory_id, must_survive=FailureDomain.PROCESS_CRASH)
    gate = DispatchGate(log, AdmissionPolicy(grants={"grant_cadence": {"stand-in-model", "run_tests"}}))
    gate.start(TaskStarted(task_id=trajectory_id, requester="cadence", objective="measure reconstruction per turn",
                           grant_ids=["grant_cadence"], budget_ceiling_usd=1e9, finalization_reserve_usd=0.0,
                           config={"model": "stand-in-model"}))
    filler = "x" * max(0, payload_bytes)
    ends = []
    for t in range(1, turns + 1):
        gate.run_model(ModelCall(invocation_id=f"model_call_{t}", model="stand-in-model", grant_id="grant_cadence",
                                 delivered_input=f"turn {t}: {filler}", cost_bound_usd=0.2),
                       lambda ctx, t=t: ModelReply(status="complete", reply=f"run the tests, turn {t}",
                                                   proposal={"tool": "run_tests", "turn": t},
                                                   input_tokens=400, output_tokens=40, charged_usd=0.01))
        gate.run_tool(ToolProposal(operation_id=f"test_{t}", attempt_id="attempt1", tool="run_tests",
                                   arguments={"turn": t}, grant_id="grant_cadence", cost_bound_usd=0.5,
                                   repeat_contract="idempotency_key"),
                      lambda intent, t=t: ToolReply(status="completed", outcome={"passed": t, "log": filler[:256]},
                                                    observation_complete=True, charged_usd=0.3))
        ends.append(store.head(trajectory_id))
    return ends


def measure_reconstruction(store_kind: str = "sqlite", *, turns: int = 60, short_suffix_turns: int = 10,
                           long_suffix_turns: int = 50, repeats: int = 7, payload_bytes: int = 1024,
                           directory: str | None = None) -> Quantity:
    """Measure R, seconds to reconstruct one logged turn from a real kernel_lib log on this machine.

    Args:
        store_kind: "sqlite" or "segment".
        turns: turns recorded (each: ContextBuilt, its admission and reservation, ModelReplied,
            usage; Authorized, BudgetReserved, ToolIntent, ToolResult, usage).
        short_suffix_turns, long_suffix_turns: the two suffix lengths timed; R is the slope.
        repeats: timed rounds (medians kept; both suffixes timed in every round).
        payload_bytes: filler in each delivered input (and 256 bytes of it in each tool result).
        directory: parent for the temporary directory (default: the system's temp dir); put it on
            the disk whose log you want measured.

    Returns a Quantity (unit "s/turn", source "measured") whose ``detail`` holds the store,
    events per turn, bytes, the intercept (fixed seconds per restore) and the machine.

    Raises CadenceParameterError: an unknown store kind, bad counts (suffixes must satisfy
    1 <= short < long <= turns; turns <= :data:`MAX_MEASURE_TURNS`, repeats <= :data:`MAX_REPEATS`,
    payload_bytes a whole number in 0..:data:`MAX_PAYLOAD_BYTES`).
    """
    if store_kind not in ("sqlite", "segment"):
        raise CadenceParameterError(f"store_kind must be 'sqlite' or 'segment', got {store_kind!r}", name="store_kind")
    n_, ks, kl, reps = (stride("turns", turns, MAX_MEASURE_TURNS), stride("short_suffix_turns", short_suffix_turns),
                        stride("long_suffix_turns", long_suffix_turns), stride("repeats", repeats, MAX_REPEATS))
    if (isinstance(payload_bytes, bool) or not isinstance(payload_bytes, Integral)
            or not 0 <= payload_bytes <= MAX_PAYLOAD_BYTES):
        raise CadenceParameterError(f"payload_bytes must be a whole number in 0..{MAX_PAYLOAD_BYTES:,}, got "
                                    f"{show(payload_bytes)}", name="payload_bytes")
    payload_bytes = int(payload_bytes)
    if not ks < kl <= n_:
        raise CadenceParameterError(f"need 1 <= short_suffix_turns < long_suffix_turns <= turns, got {ks}, {kl}, {n_}",
                                    name="long_suffix_turns")
    from kernel_lib.log import open_store
    from kernel_lib.core.record import fold, initial_record

    tid = "traj_cadence_measure"
    with tempfile.TemporaryDirectory(prefix="cadence-R-", dir=directory) as tmp:
        path = Path(tmp) / ("log.sqlite" if store_kind == "sqlite" else "seglog")
        store = open_store(store_kind, path, create=True)
        try:
            ends = _record_trajectory(store, tid, n_, payload_bytes)
        finally:
            store.close()
        size = (path.stat().st_size if path.is_file()
                else sum(p.stat().st_size for p in path.rglob("*") if p.is_file()))
        store = open_store(store_kind, path, read_only=True)
        try:
            head = ends[-1]
            full = fold(initial_record(tid), store.read(tid))
            bases = {}
            for k_ in (ks, kl):
                # the checkpoint sits after turn N-k (after TaskStarted, position 1, when k = N)
                pos = ends[n_ - k_ - 1] if n_ - k_ >= 1 else 1
                bases[k_] = (pos, fold(initial_record(tid), store.read(tid, 1, pos)))
            times: dict[int, list[float]] = {ks: [], kl: []}
            gc.collect()
            for r_ in range(reps):
                for k_ in ((ks, kl) if r_ % 2 == 0 else (kl, ks)):
                    pos, base = bases[k_]
                    t0 = time.perf_counter()
                    rec = fold(base, store.read(tid, pos + 1, head))
                    times[k_].append(time.perf_counter() - t0)
                    if rec.prefix_sha256 != full.prefix_sha256:   # the reconstruction must be the record
                        raise CadenceError("suffix fold over the checkpointed record differs from a full fold")
        finally:
            store.close()
    med_s, med_l = statistics.median(times[ks]), statistics.median(times[kl])
    slope = (med_l - med_s) / (kl - ks)
    notes = ["reads hit a warm page cache (the log was just written)",
             "covers reading, digest checks, decoding and folding control events; applying workspace deltas "
             "is not included"]
    if slope <= 0:
        slope = med_l / kl
        notes.append("the slope was not positive (timer noise); R is the long suffix's time per turn instead")
    intercept = max(0.0, med_s - slope * ks)
    events_per_turn = (ends[-1] - ends[0]) / (n_ - 1) if n_ > 1 else float(ends[0])
    return Quantity(slope, "s/turn", "measured",
                    method=f"read+decode+fold of the last {ks} and {kl} turns of a {n_}-turn {store_kind} log, "
                           f"median of {reps} rounds, slope between them",
                    samples=tuple(times[kl]),
                    detail={"store": store_kind, "turns_recorded": n_, "events_per_turn": events_per_turn,
                            "log_bytes": size, "short_suffix_turns": ks, "long_suffix_turns": kl,
                            "median_short_s": med_s, "median_long_s": med_l, "intercept_s": intercept,
                            "machine": f"{platform.system()} {platform.machine()} python {platform.python_version()}"},
                    notes=tuple(notes))


@dataclass(frozen=True)
class CaptureMeasurement:
    """What :func:`measure_capture_pause` measured (every time in seconds, on this machine).

    Fields:
        pause: C, the median whole capture (freeze + serialize + durable write + publish) of the
            ``repeats`` captures: a "measured" :class:`Quantity`, unit "s", with every sample.
        freeze: the median of the freeze phase alone (``CaptureResult.pause_s``), "measured", "s".
        restore: T_restore, the median wall time of ``restore_repeats`` restores of the trajectory at
            the log's head from the last capture (record and workspace rebuilt, every blob verified),
            "measured", "s"; None when ``restore_repeats`` is 0.
        record: the trajectory record with every published Checkpoint event folded in (the caller's
            live record after the captures).
        blobs: the blob store holding the last capture (what ``restore`` reads).
        captures: the :class:`~kernel_lib.checkpoint.capture.CaptureResult` of each capture, in order.
    """

    pause: Quantity
    freeze: Quantity
    restore: Quantity | None
    record: object
    blobs: object
    captures: tuple = ()


def measure_capture_pause(log, record, workspace, directory: str | Path, *, repeats: int = 5,
                          restore_repeats: int = 0) -> CaptureMeasurement:
    """Measure the capture pause C of a trajectory on this machine (§11.4.3: measure C, do not assume it).

    Each of the ``repeats`` captures is a real full checkpoint of ``record`` and ``workspace``
    (:meth:`kernel_lib.checkpoint.Checkpointer.capture` with ``kind="full"``) into a fresh
    :class:`~kernel_lib.checkpoint.DirectoryBlobStore` under ``directory``, published in ``log``;
    its Checkpoint event is folded into the record before the next capture, so every capture runs
    at the log's head, as a live trajectory's would. Fresh directories keep deduplication from
    hiding the write: every capture writes the whole state.

    Args:
        log: the trajectory's :class:`kernel_lib.log.TrajectoryLog` (its store on the disk you want
            measured; nothing is appended but the Checkpoint events).
        record: the trajectory record folded up to the log's head.
        workspace: a directory, in-memory files (``{relative path: bytes}``) or a stored tree, as
            ``Checkpointer.capture`` accepts.
        directory: an existing folder for the blob directories (``blobs-1``, ``blobs-2``, ...); put
            it on the disk whose durable writes you want timed (see
            :class:`kernel_lib.course.scratch.ScratchArea`).
        repeats: captures (1 .. :data:`MAX_REPEATS`).
        restore_repeats: timed restores at the head after the captures (0 .. :data:`MAX_REPEATS`).

    Returns: a :class:`CaptureMeasurement`.

    Raises:
        CadenceParameterError: ``repeats`` or ``restore_repeats`` out of range, or ``directory``
            is not an existing folder.
        CheckpointError, StoreError subclasses: a capture or its publication failed (as
            ``Checkpointer.capture``); UnrecoverableStateError: a timed restore failed.
    """
    from kernel_lib.checkpoint import Checkpointer, DirectoryBlobStore, restore
    from kernel_lib.core.record import fold

    n_ = stride("repeats", repeats, MAX_REPEATS)
    if isinstance(restore_repeats, bool) or not isinstance(restore_repeats, Integral) \
            or not 0 <= restore_repeats <= MAX_REPEATS:
        raise CadenceParameterError(f"restore_repeats must be a whole number in 0..{MAX_REPEATS}, got "
                                    f"{show(restore_repeats)}", name="restore_repeats")
    root = Path(directory)
    if not root.is_dir():
        raise CadenceParameterError(f"directory {str(root)!r} is not an existing folder", name="directory")
    captures, blobs = [], None
    for i in range(1, n_ + 1):
        blobs = DirectoryBlobStore(str(root / f"blobs-{i}"))
        result = Checkpointer(log, blobs).capture(record, workspace, kind="full")
        record = fold(record, [result.event])
        captures.append(result)
    totals = tuple(r.total_s for r in captures)
    freezes = tuple(r.pause_s for r in captures)
    where = {"directory": str(root), "captures": n_, "state_bytes": captures[-1].state_bytes,
             "bytes_written_per_capture": captures[-1].bytes_written}
    pause = Quantity(statistics.median(totals), "s", "measured",
                     method=f"median of {n_} real full captures (freeze, serialize, durable write, publish), "
                            "each into a fresh blob directory",
                     samples=totals, detail=where)
    freeze = Quantity(statistics.median(freezes), "s", "measured",
                      method=f"median freeze phase of the same {n_} captures", samples=freezes, detail=where)
    restored = None
    if restore_repeats:
        times = []
        for _ in range(int(restore_repeats)):
            t0 = time.perf_counter()
            restore(log.store, log.trajectory_id, blobs)
            times.append(time.perf_counter() - t0)
        restored = Quantity(statistics.median(times), "s", "measured", method="median restore at the head",
                            samples=tuple(times), detail=where)
    return CaptureMeasurement(pause=pause, freeze=freeze, restore=restored, record=record, blobs=blobs,
                              captures=tuple(captures))
