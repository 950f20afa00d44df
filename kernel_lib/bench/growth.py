"""``bench.growth``: what full snapshots and delta chains write, and what their restores cost, on a
trajectory whose state grows turn by turn (§11.4.2, eq. 3 and table 4; notebook 11.4, section 3).

A synthetic trajectory runs ``turns`` turns through the dispatch gate on a SQLite log: each turn a
model call (a stand-in reply) and a tool call writing one new workspace file of ``bytes_per_turn``
seeded random bytes. Every ``stride`` turns it is checkpointed, in one of three modes, each its own
run in its own files under one directory:

* ``"full, self-contained"``: a full snapshot into a fresh blob store each time (nothing shared
  with the earlier copies: eq. 3's full-snapshot volume);
* ``"incremental"``: a full base, then deltas on one shared blob store (eq. 3's deltas);
* ``"full, shared store"``: full snapshots on one shared content-addressed store, which skips
  every file blob already stored.

Measured per capture: bytes written, state bytes, record bytes, pause and total capture time
(:class:`~kernel_lib.checkpoint.capture.CaptureResult`). Then every checkpoint of the first two
modes is restored at its own position into a fresh directory, ``restore_repeats`` times in
interleaved rounds (:func:`kernel_lib.bench.harness.run_rounds`), and the medians of the whole
restore and of its ``load`` phase (manifests, snapshot or chain, digests) are kept. The summary
gives the ratios against the baselines of the same run: bytes written by the self-contained full
snapshots over the deltas', and the restore of the last delta over the restore of the last full
snapshot.

Byte counts are deterministic for given parameters; times are this machine's, from this run.
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kernel_lib.bench.harness import Contender, machine_info, median, ratio, run_rounds
from kernel_lib.checkpoint.blobs import DirectoryBlobStore
from kernel_lib.checkpoint.capture import Checkpointer
from kernel_lib.checkpoint.restore import restore
from kernel_lib.core.events import TaskStarted
from kernel_lib.core.record import fold
from kernel_lib.errors import ConfigError, KernelError
from kernel_lib.gate.dispatch import AdmissionPolicy, DispatchGate, ModelCall, ModelReply, ToolProposal, ToolReply
from kernel_lib.log import FailureDomain, SQLiteStore, TrajectoryLog

__all__ = ["GROWTH_TRAJECTORY", "MODES", "grow_trajectory", "run_growth_bench", "time_restores"]

#: The growing trajectory's id.
GROWTH_TRAJECTORY = "traj_growth"
#: The checkpoint modes, in the order they run (module docstring).
MODES = ("full, self-contained", "incremental", "full, shared store")
_SLUG = {"full, self-contained": "full", "incremental": "incr", "full, shared store": "cas"}
_GRANT = "grant_growth"
_MODEL = "stand-in-model"


def _check_int(name: str, value: Any, lo: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ConfigError(f"{name} must be an integer >= {lo}, got {value!r}")


def grow_trajectory(root: str | os.PathLike, mode: str, *, turns: int = 24, stride: int = 2,
                    bytes_per_turn: int = 16_000, seed: int = 0) -> dict[str, Any]:
    """One run of the growing trajectory in ``mode`` (one of :data:`MODES`), under ``root``.

    Creates ``root/ws-<slug>`` (the workspace), ``root/log-<slug>.sqlite`` (the log, at the
    ``process_crash`` tier) and the blob directories ``root/blobs-<slug>`` (and, in the
    self-contained mode, ``root/blobs-full-<turn>``), where ``<slug>`` is ``full``, ``incr`` or
    ``cas``.

    Returns ``{"store", "checkpointer", "blobs", "rows"}``: the log store, still open (the caller
    closes it), the mode's :class:`~kernel_lib.checkpoint.capture.Checkpointer` and its shared
    :class:`~kernel_lib.checkpoint.blobs.DirectoryBlobStore`, and one row per capture:
    ``{"mode", "checkpoint" (1-based), "turn", "capture" (its CaptureResult), "blobs" (the store
    it was written to)}``.

    Raises:
        ConfigError: an unknown mode, a count below 1, or ``root`` not an existing directory.
    """
    if mode not in _SLUG:
        raise ConfigError(f"mode must be one of {MODES}, got {mode!r}")
    for name, v in (("turns", turns), ("stride", stride), ("bytes_per_turn", bytes_per_turn)):
        _check_int(name, v, 1)
    root = Path(root)
    if not root.is_dir():
        raise ConfigError(f"root {str(root)!r} is not an existing directory")
    rng = random.Random(seed)
    slug = _SLUG[mode]
    ws = root / f"ws-{slug}"
    ws.mkdir()
    store = SQLiteStore.open(root / f"log-{slug}.sqlite", create=True)
    log = TrajectoryLog(store, GROWTH_TRAJECTORY, must_survive=FailureDomain.PROCESS_CRASH)
    gate = DispatchGate(log, AdmissionPolicy(grants={_GRANT: {_MODEL, "write_file"}}))
    gate.start(TaskStarted(task_id=GROWTH_TRAJECTORY, requester="notebook 11.4",
                           objective="grow the workspace turn by turn", grant_ids=[_GRANT], budget_ceiling_usd=1e6,
                           finalization_reserve_usd=0.0, config={"model": _MODEL}))
    shared = DirectoryBlobStore(str(root / f"blobs-{slug}"))
    ck = Checkpointer(log, shared, max_chain=10 ** 6)
    rows: list[dict[str, Any]] = []
    for t in range(1, turns + 1):
        gate.run_model(ModelCall(invocation_id=f"model_{t}", model=_MODEL, grant_id=_GRANT,
                                 delivered_input=f"turn {t}: what next?", cost_bound_usd=0.1),
                       lambda ctx, t=t: ModelReply(status="complete", reply=f"write part {t}",
                                                   proposal={"tool": "write_file", "turn": t},
                                                   input_tokens=120, output_tokens=12, charged_usd=0.001))
        data = rng.randbytes(bytes_per_turn)

        def write_file(intent: Any, t: int = t, data: bytes = data) -> ToolReply:
            (ws / f"part_{t:03d}.bin").write_bytes(data)
            return ToolReply(status="completed", outcome={"bytes": len(data)}, observation_complete=True,
                             charged_usd=0.0)

        gate.run_tool(ToolProposal(operation_id=f"write_{t}", attempt_id="attempt1", tool="write_file",
                                   arguments={"path": f"part_{t:03d}.bin"}, grant_id=_GRANT,
                                   cost_bound_usd=0.1, repeat_contract="idempotency_key"), write_file)
        if t % stride:
            continue
        if mode == "full, self-contained":
            where = DirectoryBlobStore(str(root / f"blobs-full-{t:04d}"))    # nothing shared with earlier copies
            r = Checkpointer(log, where).capture(gate.record, ws, kind="full")
        else:
            where = shared
            r = ck.capture(gate.record, ws, kind="full" if mode == "full, shared store" or not rows else "incremental")
        gate.record = fold(gate.record, [r.event])
        rows.append({"mode": mode, "checkpoint": len(rows) + 1, "turn": t, "capture": r, "blobs": where})
    return {"store": store, "checkpointer": ck, "blobs": shared, "rows": rows}


def time_restores(runs: dict[str, dict[str, Any]], root: str | os.PathLike, *, repeats: int = 5,
                  modes: Sequence[str] = MODES[:2],
                  tick: Callable[[], None] | None = None) -> dict[tuple[str, int], dict[str, float]]:
    """Restore every checkpoint of ``runs[mode]`` (as :func:`grow_trajectory` returns them) for each
    of ``modes`` at its own position into ``root/restore-timing`` (removed after each), ``repeats``
    times in interleaved rounds.

    Returns ``{(mode, checkpoint): {"restore_ms", "load_ms"}}``: the median milliseconds of the
    whole restore and of its ``load`` phase (the restore's own phase timings).

    Raises:
        ConfigError: ``repeats`` below 1. KernelError: a restore that does not rebuild the
        checkpoint it was asked for (its chain length or tree digest differ).
    """
    _check_int("repeats", repeats, 1)
    dest = Path(root) / "restore-timing"
    loads: dict[str, list[float]] = {}

    def restorer(name: str, run: dict[str, Any], row: dict[str, Any]) -> Callable[[], float]:
        r = row["capture"]

        def once() -> float:
            res = restore(run["store"], GROWTH_TRAJECTORY, row["blobs"], target=r.event.sequence_number,
                          checkpoint_id=r.checkpoint_id, dest=dest)
            try:
                if res.chain_length != r.chain_length or res.tree_sha256 != r.tree_sha256:
                    raise KernelError(f"restoring {r.checkpoint_id} rebuilt chain length {res.chain_length}, tree "
                                      f"{res.tree_sha256}; expected {r.chain_length}, {r.tree_sha256}")
            finally:
                shutil.rmtree(dest, ignore_errors=True)
            loads[name].append(res.timings_s["load"])
            return res.timings_s["total"]

        return once

    contenders, keys = [], {}
    for mode in modes:
        for row in runs[mode]["rows"]:
            name = f"{mode}|{row['checkpoint']}"
            loads[name] = []
            keys[name] = (mode, row["checkpoint"])
            contenders.append(Contender(name, restorer(name, runs[mode], row), self_timed=True))
    if not contenders:
        return {}
    totals = run_rounds(contenders, rounds=repeats, tick=tick, collect="round")   # many short restores
    return {keys[name]: {"restore_ms": median(totals[name]) * 1e3, "load_ms": median(loads[name]) * 1e3}
            for name in totals}


def run_growth_bench(root: str | os.PathLike, *, turns: int = 24, stride: int = 2, bytes_per_turn: int = 16_000,
                     restore_repeats: int = 5, seed: int = 0) -> dict[str, Any]:
    """Run the three modes (module docstring) under ``root`` and time the restores.

    ``root``: an existing directory on the disk to measure (the caller owns it: close every
    ``runs[mode]["store"]``, then remove it).

    Returns ``{"config", "machine", "runs", "rows", "summary"}``:

    * ``runs``: ``{mode: grow_trajectory(...)}``, stores still open;
    * ``rows``: one dict per capture, in mode order: ``mode``, ``checkpoint``, ``turn``,
      ``chain length``, ``bytes written``, ``state bytes``, ``record bytes written`` (bytes),
      ``pause_ms``, ``capture_ms`` (ms), and ``restore_ms``, ``load_ms`` (median ms; None for
      the shared-store mode, whose restores are not timed);
    * ``summary``: per mode the checkpoints and total bytes written, and the ratios against the
      baselines of this run: ``full_over_incremental_bytes`` (self-contained full snapshots
      over deltas, total bytes written) and ``incremental_over_full_restore_last`` (restore of
      the last delta over restore of the last self-contained full snapshot, median times);
    * ``machine``: :func:`kernel_lib.bench.harness.machine_info` of ``root`` (which disk).

    Raises:
        ConfigError: a count below 1, or ``root`` not an existing directory.
    """
    _check_int("restore_repeats", restore_repeats, 1)
    root = Path(root)
    if not root.is_dir():
        raise ConfigError(f"root {str(root)!r} is not an existing directory")
    runs = {mode: grow_trajectory(root, mode, turns=turns, stride=stride, bytes_per_turn=bytes_per_turn, seed=seed)
            for mode in MODES}
    timed = time_restores(runs, root, repeats=restore_repeats)
    rows = []
    for mode, run in runs.items():
        for row in run["rows"]:
            r = row["capture"]
            rows.append({"mode": mode, "checkpoint": row["checkpoint"], "turn": row["turn"],
                         "chain length": r.chain_length, "bytes written": r.bytes_written,
                         "state bytes": r.state_bytes, "record bytes written": r.record_bytes,
                         "pause_ms": r.pause_s * 1e3, "capture_ms": r.total_s * 1e3,
                         **timed.get((mode, row["checkpoint"]), {"restore_ms": None, "load_ms": None})})
    written = {mode: sum(x["bytes written"] for x in rows if x["mode"] == mode) for mode in MODES}
    last = {mode: [x for x in rows if x["mode"] == mode][-1] if runs[mode]["rows"] else None for mode in MODES}
    full, incr = MODES[0], MODES[1]
    summary = {
        "checkpoints": {mode: len(runs[mode]["rows"]) for mode in MODES}, "bytes_written_total": written,
        "full_over_incremental_bytes": ratio(written[full], written[incr]),
        "restore_ms_last": {mode: last[mode]["restore_ms"] if last[mode] else None for mode in MODES[:2]},
        "incremental_over_full_restore_last": (ratio(last[incr]["restore_ms"], last[full]["restore_ms"])
                                               if last[full] and last[incr] else None)}
    return {"config": {"turns": turns, "stride": stride, "bytes_per_turn": bytes_per_turn,
                       "restore_repeats": restore_repeats, "seed": seed},
            "machine": machine_info(root),
            "runs": runs, "rows": rows, "summary": summary}
