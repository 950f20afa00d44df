"""Log compaction and garbage collection that keep every declared promise (§11.8.1-§11.8.3).

:func:`plan_compaction` decides, and :func:`compact` carries out, the retirement of a
trajectory's log prefix. A prefix ``1..p-1`` may go only when all of these hold (otherwise
:class:`~kernel_lib.errors.CompactionRefusedError` lists every reason and nothing changes):

1. a ``Checkpoint`` event is published in the log, covering position ``p`` (its record snapshot
   carries the whole operation table, so unresolved operations survive the cut);
2. that checkpoint and everything it depends on (its manifest chain, record snapshot or deltas,
   workspace tree and every file blob) read back intact from the blob store now;
3. the blob store and the log store both survive the declared failure domain (a
   :class:`~kernel_lib.checkpoint.MemoryBlobStore` survives nothing);
4. no active hold (a replay window, an audit, a compliance obligation) covers a position in
   ``1..p-1``.

Event ``p`` itself is kept: the checkpoint manifest binds to its digest, so the retained suffix
joins the checkpoint at exactly its committed boundary. After compaction the log starts at
``p``; restore and time travel work from the checkpoint's own event onwards and report
:class:`~kernel_lib.errors.PrefixRetiredError` for earlier positions (the replay horizon moved).

References held by the retired events are released, except for payloads the checkpoint's record
still names (an operation's input, a model call's delivered input), which current recovery needs
and which are carried over to the checkpoint. The bytes themselves go only in
:func:`collect_garbage`, and only when no trajectory references them any more.

Crash safety: :func:`compact` records its plan (the prefix and the holders whose references it
will release) in the reference index *before* it retires the prefix
(:meth:`~kernel_lib.retention.references.ReferenceIndex.begin_compaction`), and releases them
and clears the plan in one transaction after. A run killed in between leaves the prefix retired
and the plan recorded; the next :func:`compact` of that trajectory finishes the release first
(idempotent: a finished plan is gone, so a further run changes nothing). A plan whose prefix was
never retired (killed before the retirement) is dropped, since nothing was released yet.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from kernel_lib.checkpoint.blobs import BlobStore
from kernel_lib.checkpoint.restore import find_checkpoint, load_checkpoint
from kernel_lib.errors import CompactionRefusedError, KernelError, UnrecoverableStateError
from kernel_lib.core.events import CheckpointV2, Event
from kernel_lib.log.base import FailureDomain, LogStore
from kernel_lib._support.checks import check_unix_s
from kernel_lib.retention.references import ReferenceIndex


@dataclass
class CompactionPlan:
    """What :func:`plan_compaction` found. ``retire_through`` is the last position that may go
    (``covered - 1``), 0 when nothing may; ``reasons`` lists what blocks it (empty: allowed)."""

    trajectory_id: str
    head: int
    retired_through_before: int
    checkpoint_id: str | None = None
    checkpoint_event_id: str | None = None
    checkpoint_position: int | None = None
    covered_position: int | None = None
    retire_through: int = 0
    checkpoint_objects: list[str] = field(default_factory=list)
    blocking_holds: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    @property
    def allowed(self) -> bool:
        return not self.reasons and self.retire_through > self.retired_through_before

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["allowed"] = self.allowed
        d["checkpoint_objects"] = len(self.checkpoint_objects)
        return d


@dataclass
class CompactionReport:
    """What :func:`compact` did: the plan, events retired, references released, and the first
    position from which the state can still be rebuilt (the checkpoint's own event)."""

    plan: CompactionPlan
    events_retired: int
    references_released: int
    recoverable_from: int
    #: references released by finishing a compaction an earlier run left half done (its prefix
    #: retired, its release not): see the module docstring
    resumed_released: int = 0
    resumed_through: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"plan": self.plan.to_dict(), "events_retired": self.events_retired,
                "references_released": self.references_released, "recoverable_from": self.recoverable_from,
                "resumed_released": self.resumed_released, "resumed_through": self.resumed_through}


@dataclass
class CollectionReport:
    """What :func:`collect_garbage` did: bytes deleted, digests kept because some trajectory
    still references them (digest -> number of trajectories), interrupted collections finished."""

    deleted: list[str] = field(default_factory=list)
    bytes_freed: int = 0
    kept_referenced: dict[str, int] = field(default_factory=dict)
    resumed: list[str] = field(default_factory=list)


def _utc(unix_s: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(unix_s))


def store_failure_domain(store: LogStore) -> FailureDomain:
    """The strongest failure an acknowledgment from ``store`` survives."""
    return store.strongest_tier().survives_up_to


def blob_failure_domain(blobs: BlobStore) -> FailureDomain:
    """HOST_CRASH for a store whose puts are synced to disk, NONE for a memory store."""
    return FailureDomain.HOST_CRASH if getattr(blobs, "durable", False) else FailureDomain.NONE


def checkpoint_objects(blobs: BlobStore, event: Event, trajectory_id: str) -> list[str]:
    """Every object the checkpoint published by ``event`` needs, verified now (manifest chain,
    record parts, tree, file blobs). Raises UnrecoverableStateError naming a missing one."""
    p: CheckpointV2 = event.payload
    loaded = load_checkpoint(blobs, p.manifest_sha256, trajectory_id=trajectory_id, expect=p)
    objects = {p.manifest_sha256}
    for digest, manifest in loaded.chain:
        objects.add(digest)
        objects.update(manifest.objects())
    if loaded.tree is not None:
        for path, entry in loaded.tree.files.items():
            if not blobs.has(entry.sha256):
                raise UnrecoverableStateError(f"checkpoint {p.checkpoint_id}: file blob for {path!r} is missing or "
                                              "damaged", missing=[("file blob", entry.sha256)])
            objects.add(entry.sha256)
    return sorted(objects)


def track_checkpoint(index: ReferenceIndex, blobs: BlobStore, event: Event) -> int:
    """Register every object of the checkpoint published by ``event`` as referenced by it
    (holder = checkpoint id, class ``workspace``), so no collection removes them while the
    trajectory's policy keeps its workspace. Returns how many objects were registered.

    Raises UnrecoverableStateError if an object is already missing."""
    objs = checkpoint_objects(blobs, event, event.trajectory_id)
    for d in objs:
        index.add(d, trajectory_id=event.trajectory_id, holder=f"checkpoint:{event.payload.checkpoint_id}",
                  artifact_class="workspace")
    return len(objs)


def plan_compaction(store: LogStore, blobs: BlobStore, index: ReferenceIndex, trajectory_id: str, *,
                    now_unix_s: float | None = None,
                    failure_domain: FailureDomain = FailureDomain.HOST_CRASH) -> CompactionPlan:
    """Decide whether (and how far) ``trajectory_id``'s prefix may be retired; see the module
    docstring for the four conditions. Reads only; never raises for a blocked compaction (the
    reasons say why).

    Args:
        now_unix_s: the time at which holds are judged (default: now); a finite number.
        failure_domain: the failure the recovery contract promises to survive (§11.8.3: the
            replacement checkpoint must be durable across it).
    """
    now = time.time() if now_unix_s is None else check_unix_s("now_unix_s", now_unix_s)
    failure_domain = FailureDomain.parse(failure_domain)
    head = store.head(trajectory_id)
    before = store.retired_through(trajectory_id)
    plan = CompactionPlan(trajectory_id, head, before)
    ev, _ = find_checkpoint(store, trajectory_id, head) if head else (None, [])
    if ev is None:
        plan.reasons.append(f"no published checkpoint in the retained log of {trajectory_id!r}: the prefix is the only "
                            "way to rebuild the state")
        return plan
    p: CheckpointV2 = ev.payload
    plan.checkpoint_id, plan.checkpoint_event_id = p.checkpoint_id, ev.event_id
    plan.checkpoint_position, plan.covered_position = ev.sequence_number, p.covered_sequence_number
    plan.retire_through = max(0, p.covered_sequence_number - 1)
    try:
        plan.checkpoint_objects = checkpoint_objects(blobs, ev, trajectory_id)
    except UnrecoverableStateError as exc:
        gone = ", ".join(f"{k} {n[:16]}…" for k, n in exc.missing) or "an object"
        plan.reasons.append(f"checkpoint {p.checkpoint_id} is not intact ({gone}): {str(exc)[:200]}")
    except KernelError as exc:
        plan.reasons.append(f"checkpoint {p.checkpoint_id} cannot be loaded: {str(exc)[:200]}")
    for what, domain in (("blob store " + blobs.name, blob_failure_domain(blobs)),
                         ("log store " + store.name, store_failure_domain(store))):
        if domain < failure_domain:
            plan.reasons.append(f"the {what} survives only {domain.label}, but the recovery contract declares "
                                f"{failure_domain.label}: the checkpoint is not durable across the declared failure "
                                "domain")
    for hold in index.holds(trajectory_id):
        if hold.active(now) and hold.covers(plan.retire_through) and plan.retire_through > before:
            plan.blocking_holds.append(hold.hold_id)
            plan.reasons.append(f"{hold.purpose} hold {hold.hold_id!r} needs positions #{hold.from_sequence}..#"
                                f"{hold.to_sequence} until {_utc(hold.until_unix_s)}")
    if not plan.reasons and plan.retire_through <= before:
        plan.reasons.append(f"nothing new to retire: the log already starts at #{before + 1} and the newest checkpoint "
                            f"covers #{p.covered_sequence_number}")
    return plan


def compact(store: LogStore, blobs: BlobStore, index: ReferenceIndex, trajectory_id: str, *,
            now_unix_s: float | None = None,
            failure_domain: FailureDomain = FailureDomain.HOST_CRASH) -> CompactionReport:
    """Retire ``trajectory_id``'s prefix up to (not including) the newest checkpoint's covered
    position, after :func:`plan_compaction` allows it; release the references the retired
    events held (the checkpoint's own references are registered first).

    First finishes a compaction of ``trajectory_id`` that an earlier run left between retiring
    its prefix and releasing its references (module docstring); the report counts that release
    in ``resumed_released``. If nothing new may be retired then, that report is returned.

    Raises:
        CompactionRefusedError: the plan is blocked (``reasons``) and no interrupted compaction
            was finished; nothing was retired.
        StoreError: the store cannot compact (e.g. the segment store).
    """
    resumed_released, resumed_through = 0, None
    pending = index.pending_compaction(trajectory_id)
    if pending is not None:
        if store.retired_through(trajectory_id) >= pending.through_sequence:
            resumed_released, resumed_through = index.finish_compaction(trajectory_id), pending.through_sequence
        else:
            index.abandon_compaction(trajectory_id)     # killed before retiring: nothing was released
    plan = plan_compaction(store, blobs, index, trajectory_id, now_unix_s=now_unix_s, failure_domain=failure_domain)
    if not plan.allowed:
        if resumed_through is not None:
            return CompactionReport(plan, 0, 0, plan.checkpoint_position or resumed_through + 1, resumed_released,
                                    resumed_through)
        raise CompactionRefusedError(f"log compaction of {trajectory_id!r} refused: " + "; ".join(plan.reasons),
                                     reasons=plan.reasons)
    ev = next(iter(store.read(trajectory_id, plan.checkpoint_position, plan.checkpoint_position)))
    track_checkpoint(index, blobs, ev)
    retiring = list(store.read(trajectory_id, plan.retired_through_before + 1, plan.retire_through))
    holders = {e.event_id for e in retiring}
    holders |= {f"checkpoint:{e.payload.checkpoint_id}" for e in retiring if isinstance(e.payload, CheckpointV2)}
    holders.discard(f"checkpoint:{plan.checkpoint_id}")
    _carry_record_references(index, blobs, ev, holders)
    index.begin_compaction(trajectory_id, through_sequence=plan.retire_through,
                           checkpoint_event_id=plan.checkpoint_event_id, holders=holders, now_unix_s=now_unix_s)
    try:
        store.retire_prefix(trajectory_id, plan.retire_through, checkpoint_event_id=plan.checkpoint_event_id)
    except KernelError:
        if store.retired_through(trajectory_id) < plan.retire_through:
            index.abandon_compaction(trajectory_id)     # refused (e.g. a store that cannot compact)
        raise
    released = index.finish_compaction(trajectory_id)     # release + clear the plan, one transaction
    return CompactionReport(plan, len(retiring), released, plan.checkpoint_position, resumed_released,
                            resumed_through)


def _carry_record_references(index: ReferenceIndex, blobs: BlobStore, event: Event, holders: set[str]) -> None:
    """Payloads the retiring events hold that the checkpoint's record still names (an operation's
    ``input_ref``, a model call's delivered input, in doubt or not) stay needed for current
    recovery (§11.8.1): re-register them under the checkpoint before the events' references go."""
    p: CheckpointV2 = event.payload
    held = [r for r in index.references(trajectory_id=event.trajectory_id) if r.holder in holders]
    if not held:
        return
    record = load_checkpoint(blobs, p.manifest_sha256, trajectory_id=event.trajectory_id, expect=p,
                             as_record=True).record
    named = json.dumps(record.to_dict(), default=str)
    for r in held:
        if r.digest in named:
            index.add(r.digest, trajectory_id=r.trajectory_id, holder=f"checkpoint:{p.checkpoint_id}",
                      artifact_class=r.artifact_class)


def collect_garbage(blobs: BlobStore, index: ReferenceIndex, *, now_unix_s: float | None = None,
                    candidates: "set[str] | None" = None) -> CollectionReport:
    """Expire references whose lifetime is over (:meth:`ReferenceIndex.expire`), then delete the
    bytes of every blob the index knows that no trajectory references any more (``candidates``:
    only those; objects never registered with the index are never touched). A blob another
    trajectory still references is kept, whatever happened to the trajectory that stored it
    first. Interrupted collections (a crash after the mark) are finished first.

    Each deletion is: mark the digest as collecting (atomically, only if unreferenced), delete
    the bytes, clear the mark; a concurrent :meth:`PayloadStore.put` of the same bytes waits for
    the mark to clear and then writes them again.
    """
    rep = CollectionReport()
    for d in index.unfinished_collections():
        if blobs.exists(d):
            rep.bytes_freed += blobs.size(d) or 0
            blobs.delete(d)
        index.end_collect(d)
        rep.resumed.append(d)
    index.expire(time.time() if now_unix_s is None else now_unix_s)
    referenced = index.referenced()
    pool = index.known() if candidates is None else set(candidates) & index.known()
    for d in sorted(pool):
        if d in referenced:
            rep.kept_referenced[d] = len({r.trajectory_id for r in index.references(d)})
            continue
        if not index.begin_collect(d):
            continue
        try:
            size = blobs.size(d) or 0
            if blobs.delete(d):
                rep.deleted.append(d)
                rep.bytes_freed += size
        finally:
            index.end_collect(d)
    return rep

