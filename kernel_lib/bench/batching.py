"""Group commit by batch cap: eq. 2's queue wait and storage time, measured (§11.3.4, notebook 11.3).

:func:`measure_batch_caps` runs ``writers`` OS threads, each appending its own trajectory's
``ToolIntent`` events through one :class:`~kernel_lib.log.GroupCommitter` over one log store at one
acknowledgment tier, once for every batch cap, and returns every acknowledgment's two eq. 2 terms as
the committer recorded them: the time the event sat in the queue before its batch's flush started,
and the flush itself, which every member of the batch waits out in full. Each writer pauses a
seeded, random think time (0..``max_think_s``) between dispatches, so arrivals interleave.

Every figure is measured on this machine, on the disk holding ``directory``; the result says which
(:func:`kernel_lib._support.disks.filesystem_of`): on tmpfs the ``fdatasync`` tier reaches no disk.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from numbers import Integral
from pathlib import Path

from kernel_lib._support.disks import FilesystemInfo, filesystem_of
from kernel_lib.core.events import Event
from kernel_lib.errors import ConfigError
from kernel_lib.log import AckTier, GroupCommitter, open_store
from kernel_lib.sim.events import sample_intent

__all__ = ["MAX_APPENDS", "BatchCapAck", "BatchCapRun", "measure_batch_caps", "worksheet_intent"]

#: Bound on writers × appends per writer × caps, so that a typo cannot start an hours-long run.
MAX_APPENDS = 200_000


def worksheet_intent(trajectory_id: str, sequence_number: int) -> Event:
    """The ``ToolIntent`` appended at ``sequence_number``: ``op<n>``/``attempt1`` running the
    tests of ``ws_r18`` (a realistic intent of the crash worksheet)."""
    payload = sample_intent(sequence_number, arguments={"snapshot": "ws_r18"}, grant_id="grant_repair")
    return Event.create(trajectory_id=trajectory_id, event_id=f"{trajectory_id}/{sequence_number}",
                        sequence_number=sequence_number, payload=payload)


@dataclass(frozen=True)
class BatchCapAck:
    """One acknowledgment: its ``batch_cap``, the ``batch_size`` of the flush that acknowledged it,
    and eq. 2's terms in seconds (``queue_wait_s``, ``storage_s``, ``wait_s`` = their sum)."""

    batch_cap: int
    batch_size: int
    queue_wait_s: float
    storage_s: float
    wait_s: float


@dataclass(frozen=True)
class BatchCapRun:
    """Every acknowledgment of a :func:`measure_batch_caps` run, and where it ran."""

    acks: tuple[BatchCapAck, ...]
    writers: int
    appends_per_writer: int
    tier: str
    store_kind: str
    filesystem: FilesystemInfo
    notes: tuple[str, ...] = field(default=())

    def rows(self) -> list[dict]:
        """One dict per acknowledgment (for a data frame)."""
        return [{"batch_cap": a.batch_cap, "batch_size": a.batch_size, "queue_wait_s": a.queue_wait_s,
                 "storage_s": a.storage_s, "wait_s": a.wait_s} for a in self.acks]


def _count(name: str, value: object, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < low:
        raise ConfigError(f"{name} must be a whole number >= {low}, got {value!r}")
    return int(value)


def measure_batch_caps(directory: str | Path, batch_caps, *, writers: int = 8, appends_per_writer: int = 24,
                       flush_timer_s: float = 0.001, seed: int = 0, max_think_s: float = 0.0002,
                       store_kind: str = "sqlite", tier: AckTier | str = AckTier.FDATASYNC) -> BatchCapRun:
    """Measure group commit's eq. 2 terms for each batch cap (seconds, on this machine).

    Args:
        directory: an existing folder on the disk to measure; one log per cap is created in it
            (``group-<cap>.sqlite``) and left for the caller to remove.
        batch_caps: the caps to compare (whole numbers >= 1), in the order run.
        writers: writer threads, each with its own trajectory ``traj_w<i>``.
        appends_per_writer: intents each writer appends per cap.
        flush_timer_s: the committer's flush timer (seconds).
        seed: seeds writer ``i``'s think-time jitter as ``random.Random(seed * 1000 + i)``.
        max_think_s: upper bound of the uniform think time between a writer's appends (seconds).
        store_kind: a kind :func:`kernel_lib.log.open_store` opens on a path (``sqlite``, ``segment``).
        tier: the acknowledgment tier of every flush.

    Returns: a :class:`BatchCapRun` (acknowledgments in the order the committers recorded them).

    Raises:
        ConfigError: ``directory`` is not a folder, a bad cap or count, more than
            :data:`MAX_APPENDS` appends in all, a negative ``max_think_s``; and the committer's own
            ConfigError (flush timer). StoreError: an unknown tier label; TierNotOfferedError: a
            tier the store does not offer.
    """
    root = Path(directory)
    if not root.is_dir():
        raise ConfigError(f"directory {str(root)!r} is not an existing folder")
    caps = [_count("batch cap", c) for c in batch_caps]
    if not caps:
        raise ConfigError("batch_caps is empty")
    n_writers, per_writer, seed = (_count("writers", writers), _count("appends_per_writer", appends_per_writer),
                                   _count("seed", seed, 0))
    if n_writers * per_writer * len(caps) > MAX_APPENDS:
        raise ConfigError(f"{n_writers} writers x {per_writer} appends x {len(caps)} caps exceeds {MAX_APPENDS:,}")
    if isinstance(max_think_s, bool) or not isinstance(max_think_s, (int, float)) or not 0 <= max_think_s <= 1:
        raise ConfigError(f"max_think_s must be between 0 and 1 second, got {max_think_s!r}")
    tier = AckTier.parse(tier)
    acks: list[BatchCapAck] = []
    for cap in caps:
        suffix = ".sqlite" if store_kind == "sqlite" else ""
        store = open_store(store_kind, root / f"group-{cap}{suffix}", create=True)
        committer = None
        try:
            committer = GroupCommitter(store, tier, flush_timer_s=flush_timer_s, batch_cap=cap)
            errors: list[BaseException] = []

            def writer(w: int, committer=committer, errors=errors) -> None:
                rng = random.Random(seed * 1000 + w)
                traj = f"traj_w{w}"
                try:
                    for seq in range(1, per_writer + 1):
                        committer.append(worksheet_intent(traj, seq))
                        threading.Event().wait(rng.uniform(0, max_think_s))   # think time between dispatches
                except BaseException as exc:   # noqa: BLE001 - re-raised in the caller's thread below
                    errors.append(exc)

            threads = [threading.Thread(target=writer, args=(w,), name=f"batch-cap-writer-{w}")
                       for w in range(n_writers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                raise errors[0]
        finally:
            if committer is not None:
                committer.close()
            store.close()
        acks += [BatchCapAck(cap, a.batch_size, a.queue_wait_s, a.storage_s, a.wait_s) for a in committer.stats.acks]
    fs = filesystem_of(root)
    notes = () if fs.real_disk else (f"{root} is not on a known disk ({fs.describe()})",)
    return BatchCapRun(acks=tuple(acks), writers=n_writers, appends_per_writer=per_writer, tier=tier.label,
                       store_kind=store_kind, filesystem=fs, notes=notes)
